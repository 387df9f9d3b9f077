"""What the library runs for a call: the one place that decides, `decide`, with one cache of decisions and one way to
drop it, `forget`. In order:

1. this GPU's per-user overlay (pins/overlay.py): what a first-use check, first-use tuning or a promote without
   pins_file= proved here;
2. the packaged pins' exact pin for this GPU (for a call recording gradients its "+train" pin first);
3. a pin of this GPU's family (the same compute capability, or a family the pins file names: pins/file.py), used
   only once verified on this GPU: on its first call a short contest (library/first_use.py: the tracker's timing and
   the judge's matches-torch check) runs it against torch on the call's shape; it runs if it matched torch and was
   faster by the promote threshold, else torch runs; either way the outcome goes into the overlay and is not checked
   again;
4. with tuning on first use turned on (tune_on_first_use, or CONVTUNE_TUNE=1): a bounded contest of torch against the
   library's kernels that take the call (first_use.candidates), kept in the overlay;
5. torch.

Never the default variant at its default configuration, nor a pinned neighbour's configuration, for a shape no
measurement covers: on the H200 those ran whole models at 0.72-0.95x torch. CONVTUNE_UNPINNED=kernel brings that
back for experiments and for tests of the kernels through the library. A kernel that cannot run on this GPU (its
compute capability, a refusal by its plan, shared memory per block) is never chosen.

A call traced by torch.compile is decided when it is traced, in its own context: only a "+compiled" pin (tune_model.py
compile=true: the compiled model faster with the kernel) runs a kernel there, from this GPU's overlay or pins. A plain
pin, a family pin and first-use tuning were measured on one eager call in isolation, and inside a compiled graph the
peer is Inductor's plan around cuDNN (on the H200, VGG16 b32 with four layers on kernels that each won alone by 27-45 %
ran 0.894x compiled torch); such a call runs torch (aten's convolution in the graph, which Inductor plans as it would without convtune).
Compiled calls that record gradients run torch.

A call that records gradients (training) runs a kernel only under a "+train" pin: a plain pin was measured on forward
calls, and what it names runs in training as torch (forward_pins_in_training: why, and the switch tune_model.py uses
while it measures train steps).

The tracker asks the same function for `kernel=library` (decide with its pins files and first_use=False: what the
library would run, a family pin included, with no contest); `configuration` answers the tracker's other question,
which configuration a run of a named variant measures. Every decision says which rule decided and why; convert's report
prints it, and this module's logger says it at DEBUG (the first-use checks at INFO, with their cost).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from convtune import pins
from convtune.errors import ConfigError
from convtune.kernels import VARIANTS, KernelVariant, default_meta, get_variant, library_variant
from convtune.library import first_use
from convtune.pins import overlay
from convtune.problem import ConvProblem

log = logging.getLogger(__name__)

TUNE_ENV = "CONVTUNE_TUNE"  # on: tune on first use (tune_on_first_use); read by env_flag
BUDGET_ENV = "CONVTUNE_TUNE_BUDGET_S"  # a first-use contest's time budget per shape, seconds
FAMILY_ENV = "CONVTUNE_FAMILY"  # off: family pins are not checked on first use (torch runs until the tracker pins)
UNPINNED_ENV = "CONVTUNE_UNPINNED"  # torch (an unpinned call runs torch) or kernel (the default variant)
UNPINNED = ("torch", "kernel")
DEFAULT_BUDGET_S = 30.0
TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
_tune: Optional[bool] = None  # set by tune_on_first_use; None: the environment decides
# Whether a call that records gradients may run the kernel of a plain pin (one measured on forward calls). Off: such a
# call runs torch unless a "+train" pin names a kernel. Why: on the H200, two ResNet-50 batch-32 shapes whose kernels
# won their forward contests (two NCHW-reading kernels) each made SGD train steps 6.6 % and 7.9 % slower (tune_model.py
# train=true, with / without 1.0662 and 1.0791); the train step waits on the host, and a training call of those kernels
# cost ~0.6 ms of host time against torch's ~0.08 (a cProfile of 10 steps: 53 ms in 80 calls). tune_model.py train=true
# turns it on while it times train steps, then writes the "+train" pins that the measurement supports.
_forward_pins_in_training = False
# Whether a compiled call may run the kernel of a plain (eager) pin where no "+compiled" pin decides: on only while
# tune_model.py compile=true times the compiled model with and without each shape (eager_pins_in_compile).
_eager_pins_in_compile = False
_decided: dict[tuple[Any, ...], "Decision"] = {}  # the one cache of decisions (forget drops it)
generation = 0  # bumped by forget: callers that keep a decision of their own (the library call's plans) compare it
on_forget: list[Callable[[], None]] = []  # what else forget drops (library/functional's plans)


@dataclass(frozen=True)
class Decision:
    """What runs for a call (a pins.KernelPin, or pins.TORCH) and why: `rule` is overlay, pin, family, tuned, torch
    or kernel (CONVTUNE_UNPINNED=kernel); `source` says it in one line; `key` is the pin key that decided (or the
    call's own key) and `section` the variant whose pins section holds it."""

    value: pins.Pinned
    source: str
    rule: str
    key: str
    section: str

    @property
    def context(self) -> str:
        """Where the deciding pin was measured, and whose calls it decides: eager, train or compiled (pins.CONTEXTS)."""
        return pins.context_of(self.key)


def decide(p: ConvProblem, gpu: str, capability: Optional[tuple[int, int]], precision: str, training: bool = False,
           device: Any = None, *, files: Optional[Sequence[Path]] = None, first_use_on: bool = True,
           compiled: bool = False) -> Decision:
    """What runs for the call `p` on `gpu` (its compute capability; None: the interpreter), decided once and cached
    until `forget`. The library's call passes no `files` (its overlay over pins.default_path()) and runs first-use
    contests on `device`; the tracker passes the files it reads and `first_use_on=False`. `compiled`: the call is
    traced by torch.compile (its "+compiled" pin decides)."""
    read = list(files) if files is not None else [overlay.path_for(gpu), pins.default_path()]
    cache = (p.key(), gpu, capability, precision, training, compiled, files is None, first_use_on, unpinned_policy(),
             _forward_pins_in_training, _eager_pins_in_compile, tuning(), family_checks(), _stamps(read))
    found = _decided.get(cache)
    if found is None:
        found = _decided[cache] = _decide(p, gpu, capability, precision, training, device, files, first_use_on,
                                          compiled)
    return found


def _decide(p: ConvProblem, gpu: str, capability: Optional[tuple[int, int]], precision: str, training: bool,
            device: Any, files: Optional[Sequence[Path]], first_use_on: bool, compiled: bool = False) -> Decision:
    home = get_variant(library_variant(p.layout, p.in_channels))
    runs_here = {name for name, v in VARIANTS.items() if v.runs_on(capability)}  # a family pin's kernel must be one
    keys = ([pins.pin_key(p.key(), precision, training=True)] if training else []) + [pins.pin_key(p.key(), precision)]
    if unpinned_policy() == "kernel":  # the default variant at its pin (exact or nearest) or default, training too
        value, source = configuration(home, files or [pins.default_path()], gpu, p, precision, training)
        return Decision(pins.named(value, home.name), source, "kernel", keys[-1], home.name)
    if compiled:
        return _decide_compiled(p, gpu, precision, training, files, home.name)
    mine = _from_overlay(gpu, keys, home.name) if files is None else None
    if mine is not None:
        return _for_training(mine, training)
    data = pins.load_layers(files or [pins.default_path()])
    for source_gpu in [gpu] + pins.family_sources(data, gpu, capability):
        key = next((k for k in keys if pins.pin_for(data, source_gpu, k)), None)
        if key is None:
            continue
        section, entry = pins.pin_for(data, source_gpu, key)  # type: ignore[misc]
        value = pins.value_of(section, entry)
        if source_gpu == gpu:
            return _for_training(Decision(value, f"pin {gpu} / {section} / {key}", "pin", key, home.name), training)
        if isinstance(value, pins.KernelPin) and value.kernel not in runs_here:
            continue  # a family GPU's kernel that this one cannot run (its compute capability): never chosen
        cc = "" if capability is None else f", compute capability {capability[0]}.{capability[1]} as {gpu}"
        source = f"family pin {source_gpu} / {section} / {key}{cc}"
        if not first_use_on:  # the tracker measures what the library would verify
            return Decision(value, source, "family", key, home.name)
        if value == pins.TORCH or not _decides(key, training):  # a plain pin's forward check counts not in training
            return _for_training(Decision(value, source, "family", key, home.name), training)
        if not family_checks() or overlay.path_for(gpu) is None:
            return Decision(pins.TORCH, f"{source}, not verified on {gpu} ({FAMILY_ENV}=off or {overlay.ENV}=off): "
                                        "torch until it is", "family", key, home.name)
        out = first_use.verify_family(p, gpu, value, source_gpu, source, precision, device, budget_s())
        return _kept(gpu, out, Decision(out.kept, out.why, "family", key, home.name))
    if first_use_on and tuning() and capability is not None:
        # the contest times forward calls: its winner is the plain key's, which decides calls without gradients
        out = first_use.tune(p, gpu, capability, keys[-1], precision, device, budget_s())
        return _for_training(_kept(gpu, out, Decision(out.kept, out.why, "tuned", keys[-1], home.name)), training)
    return Decision(pins.TORCH, f"no pin for {keys[-1]} on {gpu}" + (" or its family" if capability else "") +
                    ": the library runs a kernel only where a measurement on this GPU (or its family) pinned it",
                    "torch", keys[-1], home.name)


def _decide_compiled(p: ConvProblem, gpu: str, precision: str, training: bool, files: Optional[Sequence[Path]],
                     section: str) -> Decision:
    """A call inside a torch.compile graph: this GPU's "+compiled" pin (the overlay's, then the pins files'), within
    eager_pins_in_compile its plain pin next; else torch. No family pin and no first-use contest: both are eager
    measurements of one call."""
    key = pins.pin_key(p.key(), precision, compiled=True)
    if training:
        return Decision(pins.TORCH, "torch: a call that records gradients inside torch.compile runs torch (no pin is "
                                    "measured in compiled training)", "torch", key, section)
    keys = [key] + ([pins.pin_key(p.key(), precision)] if _eager_pins_in_compile else [])
    mine = _from_overlay(gpu, keys, section) if files is None else None
    if mine is not None:
        return mine
    data = pins.load_layers(files or [pins.default_path()])
    found = next((k for k in keys if pins.pin_for(data, gpu, k)), None)
    if found is not None:
        where, entry = pins.pin_for(data, gpu, found)  # type: ignore[misc]
        return Decision(pins.value_of(where, entry), f"pin {gpu} / {where} / {found}", "pin", found, section)
    return Decision(pins.TORCH, f"no pin measured under torch.compile for {key} on {gpu}: the compiled graph runs torch "
                                "(eager pins and first-use tuning decide one eager call in isolation; tune_model.py "
                                "compile=true decides in the compiled model)", "torch", key, section)


def _from_overlay(gpu: str, keys: Sequence[str], section: str) -> Optional[Decision]:
    """The library's own overlay's pin for the first of `keys` it holds (refused whole, with one warning, where broken
    or foreign), or None."""
    mine, path = overlay.read(gpu)
    key = next((k for k in keys if pins.pin_for(mine, gpu, k)), None)
    if key is None:
        return None
    where, entry = pins.pin_for(mine, gpu, key)  # type: ignore[misc]
    how = (entry.get("provenance") or {}).get("rule", "written there by hand")
    return Decision(pins.value_of(where, entry), f"overlay {path} / {where} / {key} ({how})", "overlay", key, section)


def _kept(gpu: str, out: first_use.Outcome, d: Decision) -> Decision:
    """A first-use contest's outcome kept in this GPU's overlay (under the section and key of `d`), so that every later
    call of the key follows it, and logged at INFO with its cost."""
    where = overlay.keep(gpu, d.section, d.key, out.kept, out.provenance)
    log.info("convtune: %s%s", out.message, f"; kept in {where}" if where else "; not kept (no overlay)")
    return d


def configuration(variant: KernelVariant, files: Sequence[Path], gpu: str, p: ConvProblem, precision: str,
                  training: bool = False) -> tuple[pins.Pinned, str]:
    """The configuration a run of `variant` measures for `p` (the tracker's question, not what the library runs): the
    key's pin (a "+train" one first where `training`), else `variant`'s pin of the nearest shape of the same geometry,
    else its default (pins.find). A pin may say torch or name another kernel: (Meta, KernelPin or TORCH, source)."""
    data = pins.load_layers(list(files))
    found = pins.find(data, gpu, variant.name, pins.pin_key(p.key(), precision, training=True)) if training else None
    return found or pins.lookup(data, gpu, variant.name, pins.pin_key(p.key(), precision),
                                lambda: default_meta(variant, p, precision))


def _stamps(paths: Sequence[Optional[Path]]) -> tuple[Any, ...]:
    """The files a decision reads, as they are now (path, size, modification time): a pin written since (a promote in
    this process, another process's first use) makes the cached decision stale."""
    out = []
    for path in paths:
        try:
            st = os.stat(path) if path is not None else None
        except OSError:
            st = None
        out.append((str(path), None if st is None else (st.st_size, st.st_mtime_ns)))
    return tuple(out)


def _decides(key: str, training: bool) -> bool:
    """Whether what the pin `key` names may run for the call: any pin for a call without gradients; a "+train" pin, or
    a plain one within forward_pins_in_training, for a call that records gradients."""
    return not training or key.endswith(pins.TRAIN) or _forward_pins_in_training


def _for_training(d: Decision, training: bool) -> Decision:
    """A decision for a call; one that records gradients runs torch where a plain pin (not "+train") named a kernel."""
    if d.value == pins.TORCH or _decides(d.key, training):
        return d
    return Decision(pins.TORCH, f"torch in training: {d.source} names {pins.describe(d.value)} for calls without "
                                f"gradients, and a call that records gradients runs a kernel only under a "
                                f"\"{pins.TRAIN}\" pin (tune_model.py train=true measures and writes those)",
                    d.rule, d.key, d.section)


def forget() -> None:
    """Drop every cached decision, and what callers keep from them (the pins file or the overlay changed here)."""
    global generation
    _decided.clear()
    generation += 1
    for drop in on_forget:
        drop()


@contextlib.contextmanager
def forward_pins_in_training() -> Iterator[None]:
    """Within: a training call falls back to its shape's plain pin where no "+train" pin decides (what tune_model
    measures before it writes "+train" pins). Cached decisions are dropped on entry and exit."""
    global _forward_pins_in_training
    before = _forward_pins_in_training
    _forward_pins_in_training = True
    forget()
    try:
        yield
    finally:
        _forward_pins_in_training = before
        forget()


@contextlib.contextmanager
def eager_pins_in_compile() -> Iterator[None]:
    """Within: a compiled call falls back to its shape's plain (eager) pin where no "+compiled" pin decides (what
    tune_model.py compile=true measures before it writes "+compiled" pins). Cached decisions are dropped on entry and
    exit; a graph traced within keeps what it decided (torch._dynamo.reset() drops it)."""
    global _eager_pins_in_compile
    before = _eager_pins_in_compile
    _eager_pins_in_compile = True
    forget()
    try:
        yield
    finally:
        _eager_pins_in_compile = before
        forget()


def tune_on_first_use(enabled: bool = True) -> None:
    """Turn tuning on first use on or off for this process (as torch.backends.cudnn.benchmark): a call whose shape no
    pin covers then runs a short contest on its first call and keeps the winner in the per-user overlay."""
    global _tune
    _tune = bool(enabled)


def env_flag(name: str, default: bool) -> bool:
    """A yes/no environment variable, read strictly: 1/true/yes/on or 0/false/no/off (any case; unset or empty: the
    default); anything else is a ConfigError in one line, never a guess (`false` once meant on)."""
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value in TRUE or value in FALSE:
        return value in TRUE
    raise ConfigError(name, os.environ[name], f"one of {'/'.join(TRUE)} (on) or {'/'.join(FALSE)} (off)")


def tuning() -> bool:
    return _tune if _tune is not None else env_flag(TUNE_ENV, False)


def family_checks() -> bool:
    """Whether a family pin is checked on first use (CONVTUNE_FAMILY: on, the default, or off; env_flag)."""
    return env_flag(FAMILY_ENV, True)


def unpinned_policy() -> str:
    """CONVTUNE_UNPINNED: what an unpinned call runs, torch (the default) or kernel (the default variant)."""
    value = os.environ.get(UNPINNED_ENV, "torch") or "torch"
    if value not in UNPINNED:
        raise ConfigError(UNPINNED_ENV, value, f"one of {list(UNPINNED)} (torch: unpinned calls run torch)")
    return value


def budget_s() -> float:
    """CONVTUNE_TUNE_BUDGET_S, seconds a first-use contest may take per shape (ConfigError for anything else)."""
    value = os.environ.get(BUDGET_ENV, "")
    try:
        budget = float(value) if value else DEFAULT_BUDGET_S
    except ValueError:
        budget = -1.0
    if not budget >= 0:
        raise ConfigError(BUDGET_ENV, value, "a number of seconds >= 0 (default 30)")
    return budget
