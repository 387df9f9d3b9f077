"""The per-user pins overlay: what this user's GPU proved on first use, read before the packaged pins.

One file a GPU, `<dir>/pins-<gpu>.yaml`, in the pins file's own format (pins/file.py: read strictly, written one
entry at a time under a file lock and replaced atomically, so many processes may write it at once). It holds:
- a family pin verified here (dispatch.py): the pin as measured on another GPU of this GPU's family, with the check's
  numbers in its provenance; or `backend: torch` where that pin lost to torch or failed the judge's check here;
- a first-use tuning's winner (dispatch.tune_on_first_use): a kernel and configuration, or torch.

`CONVTUNE_OVERLAY_DIR` moves the folder (default `$XDG_CACHE_HOME/convtune`, else `~/.cache/convtune`); `off` turns
the overlay off (nothing read, nothing written: family pins then run torch, and first-use tuning keeps nothing).
A file that does not read (broken, cut short, a hand edit the schema refuses) or that holds another GPU's pins
(foreign: a copy from another machine) is refused in one warning line and ignored whole, never half-used; delete it
to start again.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any, Optional

from convtune.pins import file as pins

log = logging.getLogger(__name__)
ENV = "CONVTUNE_OVERLAY_DIR"
OFF = "off"
_refused: set[tuple[str, float]] = set()  # (file, mtime) already refused: one warning a version of a file


def folder() -> Optional[Path]:
    """The overlay's folder, or None where CONVTUNE_OVERLAY_DIR=off."""
    value = os.environ.get(ENV, "")
    if value.lower() == OFF:
        return None
    if value:
        return Path(value).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "convtune"


def path_for(gpu: str) -> Optional[Path]:
    """The overlay file of `gpu` (a device name), or None where the overlay is off."""
    where = folder()
    return None if where is None else where / f"pins-{re.sub(r'[^A-Za-z0-9]+', '-', gpu).strip('-')}.yaml"


def read(gpu: str) -> tuple[dict[str, Any], Optional[Path]]:
    """(this GPU's overlay as pins data, its path); empty data where there is none, it is off, or it is refused."""
    path = path_for(gpu)
    empty: dict[str, Any] = {"pins": {}}
    if path is None or not path.exists():
        return empty, path
    try:
        data = pins.load(path)
    except pins.PinsError as e:
        _refuse(path, f"{e}")
        return empty, path
    foreign = sorted(g for g in data["pins"] if g != gpu)
    if foreign:
        _refuse(path, f"pins overlay {path}: holds pins of {', '.join(foreign)}, not only of {gpu} (a file a GPU: "
                      "a copy from another machine?)")
        return empty, path
    return data, path


def _refuse(path: Path, why: str) -> None:
    try:
        mark = (str(path), path.stat().st_mtime)
    except OSError:
        mark = (str(path), 0.0)
    if mark not in _refused:
        _refused.add(mark)
        log.warning("%s; ignored whole (delete it to start again)", why)


def keep(gpu: str, section: str, key: str, value: pins.Pinned, provenance: dict[str, Any]) -> Optional[Path]:
    """Write one decision into this GPU's overlay (atomic, locked: many processes may); None where the overlay is off.
    A refused file is left as it is and nothing is kept (one warning line)."""
    path = path_for(gpu)
    if path is None:
        return None
    try:
        if path.exists():
            data = pins.load(path)
            foreign = sorted(g for g in data["pins"] if g != gpu)
            if foreign:
                raise pins.PinsError(f"pins overlay {path}: holds pins of {', '.join(foreign)}")
        pins.write_pin(path, gpu, section, key, value, provenance,
                       remedy=f"set {ENV} to a writable folder, or to {OFF} to keep nothing")
    except pins.PinsError as e:
        _refuse(path, f"{e}; this decision was not kept")
        return None
    return path
