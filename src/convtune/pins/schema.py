"""The shape of a pins file, checked exactly: every section a GPU, a kernel or a problem key, every entry's fields
known, every launch value an int (a bool is not one). A name that is not valid is refused with the closest valid
one, so that a misspelt section (`implicit_gemmm`) is never read as "no pins" and then dropped by promote.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Iterable, Type

from convtune.errors import ConfigError
from convtune.kernels.epilogue import CODES
from convtune.kernels.meta import Meta, validate_meta
from convtune.kernels.precision import PRECISIONS

TOP_KEYS = ("pins", "gpus", "families")
ENTRY_KEYS = ("meta", "backend", "kernel", "provenance")
TORCH_SECTION = "torch"  # the section of the keys whose pin says torch's convolution runs
INTERPRETER = "interpreter"
# A GPU section is a device name as torch.cuda.get_device_name() prints it, or "interpreter". Names are open-ended
# (a new GPU needs no code change), so the check is on their form: a vendor's prefix.
GPU_PREFIXES = ("NVIDIA ", "Tesla ", "Quadro ", "AMD ", "Radeon ", "Intel ")
KNOWN_GPUS = (INTERPRETER, "NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA A100-SXM4-80GB",
              "NVIDIA GeForce RTX 4090")  # only for "did you mean"
# "<problem key>/<precision>[+train|+compiled]": problem.ConvProblem.key(), then the precision (pins.pin_key); a
# problem with an epilogue ends its key in "-then-" and its ops joined by "." (bn.relu)
_OP = "(" + "|".join(CODES) + ")"
KEY_PATTERN = re.compile(r"n\d+-c\d+-h\d+-w\d+-k\d+-r\d+x\d+-s\d+x\d+-p\d+x\d+-d\d+x\d+-g\d+-(bias|nobias)"
                         rf"-(nchw|channels_last)-[a-z0-9]+(-then-{_OP}(\.{_OP})*)?"
                         r"/(?P<precision>[a-z0-9_]+)(\+train|\+compiled)?")
CAPABILITY = re.compile(r"\d+\.\d+")  # a GPU's compute capability as 'major.minor' (gpus / <name>)
KEY_EXAMPLE = "n256-c3-h224-w224-k96-r11x11-s4x4-p2x2-d1x1-g1-bias-nchw-float32/tf32"


def closest(name: object, valid: Iterable[str]) -> str:
    """' (did you mean X?)' for the closest valid name, or a list of them where none is close."""
    valid = list(valid)
    near = difflib.get_close_matches(str(name), valid, n=1, cutoff=0.6)
    return f" (did you mean {near[0]!r}?)" if near else f" (one of {valid})"


def _mapping(value: Any, where: str, what: str, error: Type[Exception]) -> dict[Any, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise error(f"{where} must map {what}; got {type(value).__name__}")
    return value


def check(data: Any, where: str, sections: tuple[str, ...], kernels: tuple[str, ...], error: Type[Exception]) -> None:
    """Raise `error` with one line naming the first thing in `data` (a parsed pins file) that is not valid.
    `sections`: the kernel variants that may have a section; `kernels`: those an entry's 'kernel' may name."""
    if not isinstance(data, dict):
        raise error(f"{where}: top level must be a mapping with a 'pins' mapping")
    for key in data:
        if key not in TOP_KEYS:
            raise error(f"{where}: unknown top-level key {key!r}{closest(key, TOP_KEYS)}")
    for gpu, by_kernel in _mapping(data.get("pins"), f"{where}: pins", "GPU names to kernels", error).items():
        _check_gpu(gpu, f"{where}: pins", error)
        seen: dict[str, str] = {}
        for kernel, keys in _mapping(by_kernel, f"{where}: pins / {gpu}", "kernel names to pins", error).items():
            if kernel not in sections and kernel != TORCH_SECTION:
                raise error(f"{where}: pins / {gpu} / {kernel!r} is not a kernel variant or {TORCH_SECTION!r}"
                            f"{closest(kernel, list(sections) + [TORCH_SECTION])}")
            for key, entry in _mapping(keys, f"{where}: pins / {gpu} / {kernel}", "problem keys to pins",
                                       error).items():
                _check_key(key, f"{where}: pins / {gpu} / {kernel}", error)
                if key in seen and (kernel in kernels or kernel == TORCH_SECTION):
                    raise error(f"{where}: pins / {gpu}: {key} is pinned twice, under {seen[key]!r} and {kernel!r} "
                                "(the library's pin of a key is filed once, under the kernel it names, or torch)")
                if kernel in kernels or kernel == TORCH_SECTION:
                    seen[key] = kernel
                _check_entry(entry, kernel, kernels, f"{where}: entry {gpu} / {kernel} / {key}", error)


    for gpu, about in _mapping(data.get("gpus"), f"{where}: gpus", "GPU names to what they are", error).items():
        _check_gpu(gpu, f"{where}: gpus", error)
        about = _mapping(about, f"{where}: gpus / {gpu}", "compute_capability to 'major.minor'", error)
        for field, value in about.items():
            if field != "compute_capability":
                raise error(f"{where}: gpus / {gpu}: unknown field {field!r}{closest(field, ['compute_capability'])}")
            if not (isinstance(value, str) and CAPABILITY.fullmatch(value)):
                raise error(f"{where}: gpus / {gpu}: compute_capability must be 'major.minor' as a string (e.g. "
                            f"'9.0'); got {value!r}")
    for name, members in _mapping(data.get("families"), f"{where}: families", "family names to GPU names",
                                  error).items():
        if not isinstance(members, list) or len(members) < 2:
            raise error(f"{where}: families / {name!r} must list two or more GPU names")
        for gpu in members:
            _check_gpu(gpu, f"{where}: families / {name}", error)


def _check_gpu(gpu: Any, where: str, error: Type[Exception]) -> None:
    if not isinstance(gpu, str) or not (gpu == INTERPRETER or gpu.startswith(GPU_PREFIXES)):
        raise error(f"{where} / {gpu!r} is not a GPU: a device name as torch.cuda.get_device_name() prints it, or "
                    f"{INTERPRETER!r}{closest(gpu, KNOWN_GPUS)}")


def _check_key(key: Any, where: str, error: Type[Exception]) -> None:
    m = KEY_PATTERN.fullmatch(key) if isinstance(key, str) else None
    if m is None:
        raise error(f"{where} / {key!r} is not a problem key: '<shape>/<precision>[+train|+compiled]' as promote writes it, "
                    f"e.g. {KEY_EXAMPLE!r}")
    if m["precision"] not in PRECISIONS:
        raise error(f"{where} / {key}: unknown precision {m['precision']!r}{closest(m['precision'], PRECISIONS)}")


def _check_entry(entry: Any, kernel: str, kernels: tuple[str, ...], where: str, error: Type[Exception]) -> None:
    """An entry under its section: under `torch`, provenance only (a `backend: torch` too); under a kernel, its meta.
    A file written before pins were filed under the kernel they name may hold, under another kernel's section, an
    entry that names its kernel (`kernel`, meta) or says `backend: torch`: read as that kernel's or torch's."""
    if not isinstance(entry, dict):
        raise error(f"{where} must be a mapping (meta, backend or kernel, provenance)")
    if kernel == TORCH_SECTION:
        extra = [f for f in entry if f not in ("provenance", "backend")]
        if extra or entry.get("backend", "torch") != "torch":
            raise error(f"{where}: a pin under {TORCH_SECTION!r} holds its provenance only; got {sorted(entry)}")
        if "provenance" in entry and not isinstance(entry["provenance"], (dict, type(None))):
            raise error(f"{where}: 'provenance' must be a mapping")
        return
    for field in entry:
        if field not in ENTRY_KEYS:
            raise error(f"{where}: unknown field {field!r}{closest(field, ENTRY_KEYS)}")
    if "provenance" in entry and not isinstance(entry["provenance"], (dict, type(None))):
        raise error(f"{where}: 'provenance' must be a mapping")
    if "backend" in entry:
        if entry["backend"] != "torch" or "meta" in entry or "kernel" in entry:
            raise error(f"{where}: 'backend' may only be 'torch' (torch's convolution runs), and then without "
                        f"'meta' or 'kernel'; got backend={entry['backend']!r}")
        return
    if "kernel" in entry and (entry["kernel"] not in kernels or entry["kernel"] == kernel):
        raise error(f"{where}: 'kernel' names another of the library's kernels than the section's ({kernel!r}); "
                    f"got {entry['kernel']!r}{closest(entry['kernel'], [k for k in kernels if k != kernel])}")
    check_meta(entry.get("meta"), where, error)


def check_meta(meta: Any, where: str, error: Type[Exception]) -> None:
    """A pin's `meta`: exactly Meta's keys, each an int (never a bool), a valid launch configuration."""
    if not isinstance(meta, dict):
        raise error(f"{where} has no 'meta' mapping (needs exactly {', '.join(Meta.keys())})")
    for key in meta:
        if key not in Meta.keys():
            raise error(f"{where}: unknown meta key {key!r}{closest(key, Meta.keys())}")
    missing = [k for k in Meta.keys() if k not in meta]
    if missing:
        raise error(f"{where}: meta lacks {', '.join(missing)}")
    for key, value in meta.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise error(f"{where}: meta {key}={value!r} is not an integer")
    try:
        validate_meta(Meta(**meta))
    except ConfigError as e:
        raise error(f"{where}: {e}") from None
