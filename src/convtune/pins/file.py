"""Pinned launch configurations: data in the package (pins.yaml), read by the library, written by promote.

Layout: pins → GPU name (or "interpreter") → section → problem key ("<shape key>/<precision>[+train|+compiled]") → entry. A key's
pin is filed once, under the kernel it names: a variant's section holds {meta: {BLOCK_M, ...}, provenance: {...}} (that
kernel runs the key with this configuration), and the `torch` section holds {provenance: {...}} (torch's own
convolution, cuDNN on a GPU, won the key's contest, and the library runs torch for it). A key ending in "+train"
(written by tune_model.py train=true from whole train steps of a model) decides the calls that record gradients;
where a shape has none, those calls follow the plain key. A key ending in "+compiled" (written by tune_model.py
compile=true from whole compiled forwards of a model) decides the calls traced by torch.compile; a plain key, measured in
eager calls, never decides those (a compiled graph runs torch for a shape with no "+compiled" pin). A file written before pins were filed so may hold, under
the section of the variant that served the call by default, an entry naming another kernel (`kernel`, `meta`) or
`backend: torch`: it is read as that kernel's or torch's, and the next write files it under its own section.

Writes take a file lock, re-read the file under it, change one entry, and replace the file atomically (temp file +
rename) with sorted keys, so a diff shows one change and two promotes at once both land. A file that does not parse
is refused and never overwritten.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

import yaml
from filelock import FileLock

from convtune.pins import schema
from convtune.kernels.meta import Meta

PACKAGE_PINS = Path(__file__).resolve().parents[1] / "pins.yaml"
ENV_VAR = "CONVTUNE_PINS"  # the library's override of the pins file location
HEADER = ("# convtune pins: written by `python promote.py`; edit by hand only with care.\n"
          "# pins -> GPU name -> kernel variant -> problem key/precision -> {meta | backend: torch | kernel, meta;\n"
          "#   provenance}\n")
# The last line of a file promote writes. Cut short (a copy or a disk that filled), the rest may still be valid
# YAML with pins missing, which the library would use silently; a file that has the header and not this line
# is refused. A file without the header (written by hand) is taken as it is.
END = "# end of pins\n"
UNCHECKED = object()  # write_pin's `expect` when the caller did not read the pin it replaces
TORCH = "torch"  # a pin's value when torch's convolution is what runs for the key, and the section of such pins


def kernel_names() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the variants that may have a section, those a pin's `kernel` may name): the registry's (kernels.base), read
    when a file is read, so that a new variant needs no edit here."""
    from convtune.kernels.base import REGISTRY

    return tuple(sorted(REGISTRY)), tuple(sorted(n for n, v in REGISTRY.items() if v.library is not None))


@dataclass(frozen=True)
class KernelPin:
    """A pin that names its kernel: convtune's kernel `kernel` with `meta`. In a file, an entry under another
    variant's section says {kernel, meta}; an entry under its own section is a plain {meta}."""

    kernel: str
    meta: Meta

    def short(self) -> str:
        return f"{self.kernel} {self.meta.short()}"


# A Meta (the section's own kernel with this configuration), a KernelPin (another kernel), or TORCH
Pinned = Union[Meta, KernelPin, str]


class PinsError(ValueError):
    """The pins file is unreadable or malformed; the message names the file and what is wrong."""


class PinChanged(PinsError):
    """The pin a writer meant to replace was replaced by another writer meanwhile (two promotes on one key)."""


def default_path() -> Path:
    """The pins file the library reads: $CONVTUNE_PINS, else the package's. A CONVTUNE_PINS that names no readable
    file (missing, a folder, /dev/null) is refused in one line (PinsError), on every call alike: a typo in it would
    otherwise have meant "no pins" silently."""
    value = os.environ.get(ENV_VAR)
    if not value:
        return PACKAGE_PINS
    path = Path(value).expanduser()
    why = ("no such file" if not path.exists() else "a folder" if path.is_dir()
           else "not a regular file" if not path.is_file() else None)
    if why is not None:
        raise PinsError(f"{ENV_VAR}={value!r} names no pins file ({why}): point it at a pins file, or unset it for "
                        f"the packaged pins ({PACKAGE_PINS})")
    return path


def create_empty(path: Path) -> None:
    """A pins file with no pins (the header and the end line), where there is none: what the library may read
    before the first pin is written (write_pin's checks apply)."""
    path = Path(os.path.realpath(path))
    check_writable(path)
    with FileLock(str(path) + ".lock", timeout=60):
        if not path.exists():
            _replace(path, HEADER + "pins: {}\n" + END)


TRAIN = "+train"  # the suffix of a pin key that decides calls recording gradients (training)
COMPILED = "+compiled"  # the suffix of a pin key that decides calls inside a torch.compile graph
# The context a pin was measured in, by its key's suffix: eager forward calls, eager train steps, compiled forwards
CONTEXTS = {"eager": "", "train": TRAIN, "compiled": COMPILED}


def pin_key(problem_key: str, precision: str, training: bool = False, compiled: bool = False) -> str:
    if training and compiled:
        raise ValueError("no pin key decides compiled training calls: those run torch")
    return f"{problem_key}/{precision}{TRAIN if training else COMPILED if compiled else ''}"


def context_of(key: str) -> str:
    """The context in which the pin of `key` was measured, and whose calls it decides: eager, train or compiled."""
    return next((name for name, suffix in CONTEXTS.items() if suffix and key.endswith(suffix)), "eager")


def load(path: Path) -> dict[str, Any]:
    """The whole file as {"pins": {...}}; an absent file is empty. Raises PinsError, naming the file (and the
    line or entry), on anything malformed: unreadable, not UTF-8, not YAML, a key repeated anywhere, a section
    that is not a GPU, kernel or problem key (with the closest valid name), or a pin that is not a valid launch
    configuration (a bool is not an int)."""
    if not path.exists():
        return {"pins": {}}
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise PinsError(f"pins file {path}: not UTF-8 text (byte {e.start})") from None
    except OSError as e:  # a directory, no permission, ...
        raise PinsError(f"pins file {path}: cannot be read ({e.strerror})") from None
    if not text.strip():
        raise PinsError(f"pins file {path}: empty (cut short? delete it to start with no pins)")
    if text.startswith(HEADER.splitlines()[0]) and not text.endswith(END):
        raise PinsError(f"pins file {path}: written by promote but its last line is not {END.strip()!r}: "
                        "cut short (a copy or a full disk?), so pins may be missing; restore it (git, a "
                        "backup) or, if you edited it by hand, end it with that line")
    return parse(text, str(path))


Source = Union[Path, Sequence[Path]]  # a pins file, or files read as layers (the first that pins a key decides)


def load_layers(source: Source) -> dict[str, Any]:
    """The pins of `source` as one file's data: a single path as load reads it; for several, each entry (GPU /
    variant / key) and each `gpus` and `families` row from the first file that has it (the per-user overlay over
    the packaged pins)."""
    paths = [source] if isinstance(source, Path) else list(source)
    merged: dict[str, Any] = {"pins": {}}
    for path in reversed(paths):  # later layers first, so that earlier ones overwrite them
        data = load(path)
        for gpu, sections in (data.get("pins") or {}).items():
            for section, keys in (sections or {}).items():
                merged["pins"].setdefault(gpu, {}).setdefault(section, {}).update(keys or {})
        for table in ("gpus", "families"):
            if data.get(table):
                merged.setdefault(table, {}).update(data[table])
    return merged


def parse(text: str, where: str) -> dict[str, Any]:
    """A pins file's text as load returns it, checked as load checks it; `where` names it in messages."""
    from convtune.strict_yaml import Cycle, DuplicateKey, load as strict_load

    try:
        data = strict_load(text) or {"pins": {}}
    except (DuplicateKey, Cycle) as e:
        raise PinsError(f"pins file {where}: {e}") from None
    except yaml.YAMLError as e:
        raise PinsError(f"pins file {where}: not valid YAML ({str(e).splitlines()[0]})") from None
    schema.check(data, f"pins file {where}", *kernel_names(), PinsError)
    data.setdefault("pins", {})
    return _refiled(data)


def entries(data: dict[str, Any], gpu: str, kernel: str) -> dict[str, Any]:
    """A section's entries as the file holds them (a variant's, or TORCH's)."""
    return ((data.get("pins") or {}).get(gpu) or {}).get(kernel) or {}


def pin_for(data: dict[str, Any], gpu: str, key: str, own: Optional[str] = None) -> Optional[tuple[str, dict[str, Any]]]:
    """(the section, the entry) of `key`'s pin on `gpu`: the library's, filed under one of the library's kernels or
    TORCH; or, for `own`, a variant the library does not run (seed), its own configuration, filed under it. None
    where there is none."""
    sections = (data.get("pins") or {}).get(gpu) or {}
    if own is not None and own != TORCH and own not in kernel_names()[1]:
        return (own, sections[own][key]) if key in (sections.get(own) or {}) else None
    library = set(kernel_names()[1]) | {TORCH}
    for section, keys in sections.items():
        if section in library and key in (keys or {}):
            return section, keys[key]
    return None


def value_of(section: str, entry: dict[str, Any]) -> Pinned:
    """What one (loaded, so valid) entry of `section` runs: a KernelPin (its kernel named) or TORCH."""
    if section == TORCH or entry.get("backend") == TORCH:
        return TORCH
    return KernelPin(entry.get("kernel", section), Meta(**entry["meta"]))


def pinned_value(data: dict[str, Any], gpu: str, key: str, own: Optional[str] = None) -> Optional[Pinned]:
    """What `key`'s pin on `gpu` runs (pin_for, value_of), or None."""
    found = pin_for(data, gpu, key, own)
    return None if found is None else value_of(*found)


def section_of(value: Pinned) -> str:
    """The section a pin is filed under: the kernel it names, or TORCH."""
    return TORCH if value == TORCH else value.kernel  # type: ignore[union-attr]


def as_entry(value: Pinned) -> dict[str, Any]:
    """A value as its own section's entry holds it (without provenance)."""
    return {} if value == TORCH else {"meta": value.meta.as_dict()}  # type: ignore[union-attr]


def named(value: Union[Pinned, Meta], kernel: str) -> Pinned:
    """A value with its kernel named: a plain configuration is `kernel`'s."""
    return KernelPin(kernel, value) if isinstance(value, Meta) else value


def _refiled(data: dict[str, Any]) -> dict[str, Any]:
    """`data` with every entry under the section of the kernel it names (an older file's `kernel` and `backend: torch`
    entries moved to their own sections), so that what is written is filed as this module files it."""
    for gpu, sections in list((data.get("pins") or {}).items()):
        refiled: dict[str, dict[str, Any]] = {}
        for section, keys in (sections or {}).items():
            for key, entry in (keys or {}).items():
                value = value_of(section, entry)
                body = {**as_entry(value), **({"provenance": entry["provenance"]} if "provenance" in entry else {})}
                refiled.setdefault(section_of(value), {})[key] = body
        data["pins"][gpu] = refiled
    return data


def describe(value: Union[Pinned, None]) -> str:
    """A pin's value in a message: the short configuration (after its kernel's name where it names one),
    'torch' or 'none'."""
    return "none" if value is None else (TORCH if value == TORCH else value.short())  # type: ignore[union-attr]


PINS_FILE_REMEDY = "set pins_file= to a writable place"  # what a command's user can do about an unwritable file


def write_pin(path: Path, gpu: str, kernel: str, key: str, value: Union[Pinned, Meta], provenance: dict[str, Any],
              expect: Any = UNCHECKED, capability: Optional[tuple[int, int]] = None,
              remedy: str = PINS_FILE_REMEDY) -> tuple[str, str]:
    """Pin `key` on `gpu` to `value` (a KernelPin, TORCH, or a Meta: a configuration of `kernel`), filed under the
    kernel it names (or TORCH), with any earlier pin of the key removed; every other entry is left as it is (an older
    file's entries are filed under their own kernels as it is written). Returns the file's text before and after.

    `expect`: what the caller found pinned for this key when it decided (a pin's value, or None: no pin). If
    another writer has changed that pin since, nothing is written and PinChanged says what is pinned now: the
    caller's decision was made against a pin that is gone. `capability`: the GPU's compute capability, recorded in
    the file's `gpus` table (what makes its pins a family's: family_sources).

    A symbolic link is written through: its target gets the pin and the lock, and the link stays a link. `remedy`:
    what a refusal of an unwritable file advises (check_writable)."""
    path = Path(os.path.realpath(path))
    check_writable(path, remedy)
    value = named(value, kernel)
    with FileLock(str(path) + ".lock", timeout=60):
        before = path.read_text() if path.exists() else ""
        data = load(path)  # refuses a broken file before anything is written
        now = pin_for(data, gpu, key, section_of(value))
        now_value = value_of(*now) if now else None
        if expect is not UNCHECKED and now_value != (None if expect is None else named(expect, kernel)):
            by = f" by run {now[1]['provenance'].get('run_id')}" if now and now[1].get("provenance") else ""
            raise PinChanged(f"pins file {path}: the pin for {gpu} / {key} changed while this ran "
                             f"({describe(None if expect is None else named(expect, kernel))} → {describe(now_value)}"
                             f"{by}); nothing written: run promote "
                             "again to contest the pin now in place")
        sections = data["pins"].setdefault(gpu, {})
        if now is not None:
            del sections[now[0]][key]
            if not sections[now[0]]:
                del sections[now[0]]
        sections.setdefault(section_of(value), {})[key] = {**as_entry(value), "provenance": provenance}
        if capability is not None:
            data.setdefault("gpus", {})[gpu] = {"compute_capability": f"{capability[0]}.{capability[1]}"}
        after = HEADER + yaml.safe_dump(data, sort_keys=True, default_flow_style=False) + END
        # Never write what could not be read back to the same content (a value the schema refuses, a dump that
        # would not parse): the file on disk stays as it was.
        try:
            again = parse(after, f"{path} (as it would be written)")
        except PinsError as e:
            raise PinsError(f"{e}; nothing written") from None
        if again != data:
            raise PinsError(f"pins file {path}: the new text does not read back to the pins it was made from; "
                            "nothing written")
        _replace(path, after)
    return before, after


def check_writable(path: Path, remedy: str = PINS_FILE_REMEDY) -> None:
    """Refuse in one line (PinsError) unless promote can write `path`: its folder takes new files (the lock and
    the temporary file) and the file, where it exists, is not read-only. Called before a contest starts, so that
    its minutes are not spent on a decision that cannot be written; write_pin checks again. A symbolic link is
    judged by its target, which write_pin writes."""
    path = Path(os.path.realpath(path))
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".check")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise PinsError(f"pins file {path}: its folder {folder} takes no new file ({e.strerror}); promote writes "
                        f"the file by replacing it ({remedy})") from None
    if path.exists() and not os.stat(path).st_mode & 0o200:
        raise PinsError(f"pins file {path}: read-only (mode {os.stat(path).st_mode & 0o777:o}); promote keeps "
                        "such a file as it is (chmod u+w it to let promote write)")


def _replace(path: Path, text: str) -> None:
    """Replace `path` by `text` atomically (temp file + rename: readers see the old file or the new one, never
    half of one), keeping the file's mode (a new file gets 0644 less the umask); the temp file never outlives a
    failure. An OSError (a full disk) is a PinsError and the old file is untouched."""
    if path.exists():
        mode = os.stat(path).st_mode & 0o777
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o644 & ~umask
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise PinsError(f"pins file {path}: not written ({e.strerror}); the file is as it was") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def capability_of(data: dict[str, Any], gpu: str) -> Optional[tuple[int, int]]:
    """A GPU's compute capability as the file's `gpus` table records it (promote writes it), or None."""
    value = ((data.get("gpus") or {}).get(gpu) or {}).get("compute_capability")
    if value is None:
        return None
    major, minor = value.split(".")
    return int(major), int(minor)


def family_sources(data: dict[str, Any], gpu: str, capability: Optional[tuple[int, int]]) -> list[str]:
    """The other GPUs whose pins may stand for `gpu`'s (once verified on it: library/dispatch.py), best first: those
    a `families` entry lists with it, then those of the same compute capability (the `gpus` table), each by name."""
    listed = sorted({g for members in (data.get("families") or {}).values() if gpu in members for g in members} - {gpu})
    same = sorted(g for g in (data.get("pins") or {}) if g != gpu and g not in listed and capability is not None
                  and capability_of(data, g) == capability)
    return [g for g in listed if g in (data.get("pins") or {})] + same


def _geometry(key: str) -> tuple[str, int]:
    """Split a pin key into (everything but batch/height/width, batch·height·width) for the fallback."""
    shape, _, precision = key.rpartition("/")
    parts = shape.split("-")
    size = 1
    rest = []
    for p in parts:
        if p[:1] in "nhw" and p[1:].isdigit():
            size *= int(p[1:])
        else:
            rest.append(p)
    return "-".join(rest) + "/" + precision, size


def lookup(data: dict[str, Any], gpu: str, kernel: str, key: str,
           default: Callable[[], Meta]) -> tuple[Pinned, str]:
    """find, else `kernel`'s default: (value, where it came from)."""
    found = find(data, gpu, kernel, key)
    return found if found is not None else (default(), f"{kernel} default (no pin for {gpu})")


def find(data: dict[str, Any], gpu: str, kernel: str, key: str) -> Optional[tuple[Union[Pinned, Meta], str]]:
    """What a run of `kernel` takes from the pins for `key`: the key's pin, wherever it is filed (its Meta where it
    names `kernel`, else the KernelPin or TORCH it says), else `kernel`'s pin of the nearest shape of the same kernel
    geometry (channels, kernel size, strides, padding, dilation, bias, dtype, precision; nearest in batch·H·W), else
    None. A "+train" or "+compiled" key finds only pins of its context (the suffix is part of the geometry). Returns (value, source)."""
    exact = pin_for(data, gpu, key, kernel)
    if exact is not None:
        value = value_of(*exact)
        own = isinstance(value, KernelPin) and value.kernel == kernel
        return (value.meta if own else value), f"pin {gpu} / {exact[0]} / {key}"  # type: ignore[union-attr]
    pins = entries(data, gpu, kernel)
    geometry, size = _geometry(key)
    near = [(abs(s - size), k) for k in pins for g, s in [_geometry(k)] if g == geometry]
    if near:
        k = min(near)[1]
        return Meta(**pins[k]["meta"]), f"nearest pin {gpu} / {kernel} / {k}"
    return None
