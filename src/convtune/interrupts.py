"""SIGINT and SIGTERM at any moment of a run or a sweep: nothing left RUNNING, one line, exit 130 / 143.

Pure standard library: the tracking room and the app both use it.

- `install()` (by the entry points, before anything is created) turns both signals into `Interrupted`, a
  BaseException, so Hydra's `except Exception` wrappers let it through to the entry point's `guard`.
- `deferred()` marks a section that must not be cut in half (creating a run, recording its outcome, writing
  the summary): a signal there is remembered and raised when the section ends. A second signal while one
  is pending is raised at once, so a hung write can still be interrupted.
- `on_interrupt(fn)` registers what to close if an interrupt ends the process (a job's run, a sweep's
  parent); `guard` runs what is still registered, newest first, with further signals ignored.
- `checkpoint(name)` lets a test stop the process at a named moment: with CONVTUNE_PAUSE_AT=name (or
  name:N for the N-th time it is reached), it writes `name` to CONVTUNE_PAUSE_FILE and waits for a signal,
  so tests deliver signals at exact points instead of after a sleep.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator, NoReturn, Optional

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
ABNORMAL_EXIT = "error"  # what cleanups are told when an error, not a signal, ends the process
_depth = 0  # nesting of deferred() sections
_pending: Optional[int] = None  # a signal received inside a deferred section
_closing = False  # guard() is running the cleanups: further signals are ignored
_guarded = False  # guard() runs the entry point; before that nothing is open and a signal just ends the process
_cleanups: list[tuple[int, Callable[[str], None]]] = []
_next_id = 0
_reached: dict[str, int] = {}


class Interrupted(BaseException):
    """SIGINT or SIGTERM. A BaseException, like KeyboardInterrupt, so `except Exception` does not swallow it."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(self.name)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def _handler(signum: int, frame: object) -> None:
    global _pending
    if _closing:
        return
    if not _guarded:  # still importing: nothing exists yet that could be left RUNNING
        print(f"interrupted ({signal.Signals(signum).name}) before anything started", file=sys.stderr, flush=True)
        os._exit(128 + signum)
    if _depth > 0 and _pending is None:
        _pending = signum
        return
    _pending = None
    if not _cleanups:
        # Nothing is open, so nothing needs unwinding: end here instead of raising into whatever runs now. Raised
        # while torch's import was calling back into Python from C++, the exception aborted the process (rc -6,
        # 2 of 30 SIGINTs at random moments of a sweep, benchmarks/signal_campaign.py).
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - the main thread may be mid-write to it: what is lost is lost
                pass
        print(f"interrupted ({signal.Signals(signum).name}): nothing was open", file=sys.stderr, flush=True)
        os._exit(128 + signum)
    raise Interrupted(signum)


def install() -> None:
    """Route SIGINT and SIGTERM through this module (main thread only; elsewhere signals are the main thread's)."""
    if threading.current_thread() is threading.main_thread():
        for s in _SIGNALS:
            signal.signal(s, _handler)


def installed() -> bool:
    return signal.getsignal(signal.SIGINT) is _handler


def pending() -> Optional[int]:
    """The signal waiting for the current deferred section to end, if any."""
    return _pending


@contextmanager
def deferred() -> Iterator[None]:
    """A section a signal must not cut: the signal is raised as Interrupted when the outermost section ends."""
    global _depth, _pending
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
    if _depth == 0 and _pending is not None and not _closing:
        signum, _pending = _pending, None
        raise Interrupted(signum)


class Registration:
    def __init__(self, ident: int) -> None:
        self.ident = ident

    def cancel(self) -> None:
        _cleanups[:] = [(i, f) for i, f in _cleanups if i != self.ident]


def on_interrupt(cleanup: Callable[[str], None]) -> Registration:
    """Run `cleanup(signal_name)` if an interrupt ends the process before `.cancel()` is called."""
    global _next_id
    _next_id += 1
    _cleanups.append((_next_id, cleanup))
    return Registration(_next_id)


def close_all(signal_name: str) -> list[str]:
    """Run every registered cleanup, newest first, each once; returns the errors they raised, one line each."""
    global _closing
    _closing = True
    errors = []
    while _cleanups:
        _, fn = _cleanups.pop()
        try:
            fn(signal_name)
        except Exception as e:  # noqa: BLE001 - one failing cleanup must not stop the others
            errors.append(f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}")
    return errors


def guard(main: Callable[[], object]) -> object:
    """Run an entry point: on SIGINT/SIGTERM close what is open, print one line, exit 128 + signal."""
    global _guarded
    install()
    _guarded = True
    try:
        return main()
    except SystemExit as e:
        # An error that ends the process with runs still open (Hydra reports a failed compose of a sweep's
        # job with sys.exit(1), past every callback): close them FAILED, not left RUNNING.
        if e.code not in (None, 0) and _cleanups:
            _say_unclosed(close_all(ABNORMAL_EXIT), "an error")
        raise
    except (Interrupted, KeyboardInterrupt) as e:
        signum = e.signum if isinstance(e, Interrupted) else signal.SIGINT
        name = signal.Signals(signum).name
        _say_unclosed(close_all(name), name)
        print(f"interrupted ({name}): finished runs kept, open runs marked KILLED", file=sys.stderr, flush=True)
        sys.exit(128 + signum)


def _say_unclosed(errors: list[str], after: str) -> None:
    """One line for the runs that could not be closed (the store itself failing, most often: every cleanup then
    fails alike); the next run on this host marks them KILLED (track.store.Tracker.reap_orphans)."""
    if errors:
        print(f"warning: {len(errors)} open run(s) could not be closed after {after} ({errors[0]}); the next run on "
              "this host marks them KILLED", file=sys.stderr)


def main_then_exit(main: Callable[[], object]) -> NoReturn:
    """An entry point's whole life: `guard(main)`, then `exit_now` with the status Python would have given."""
    try:
        guard(main)
        code: object = 0
    except SystemExit as e:
        code = e.code
    exit_now(code)


def exit_now(code: object = 0) -> NoReturn:
    """End the process as `sys.exit(code)` would, minus Python's teardown of every loaded module: with torch and
    MLflow loaded that teardown alone takes ~1.4 s of each command (importing both and exiting: 5.0 s, 3.6 s
    with this, on the 2-core CI machine), and it writes nothing of ours. atexit handlers still run (logging
    flushes and closes its files there; the tracking store closes its database there), and the standard
    streams are flushed. While another non-daemon thread is alive, the ordinary exit waits for it instead."""
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(code)
    global _closing
    _closing = True  # nothing is open any more: a late Ctrl-C must not break the handlers below
    if code is not None and not isinstance(code, int):  # what Python does with sys.exit("message")
        print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()  # no public API runs them; CPython's own, stable since Python 2
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing left to say anyway
            pass
    os._exit(code or 0)


def checkpoint(name: str) -> None:
    """A named moment where a test may hold the process (see the module docstring); free otherwise."""
    want = os.environ.get("CONVTUNE_PAUSE_AT")
    if not want:
        return
    point, _, nth = want.partition(":")
    if point != name:
        return
    _reached[name] = _reached.get(name, 0) + 1
    if _reached[name] != int(nth or 1):
        return
    marker = os.environ.get("CONVTUNE_PAUSE_FILE")
    if marker:
        with open(marker, "w") as f:
            f.write(name)
    deadline = time.monotonic() + float(os.environ.get("CONVTUNE_PAUSE_S", "120"))  # never hang a test forever
    while _pending is None and time.monotonic() < deadline:
        time.sleep(0.01)  # the handler raises Interrupted here, or sets _pending inside a deferred section
