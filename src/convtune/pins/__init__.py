"""The pins: tuned configurations as data. `pins.yaml` in the package (what a GPU's promotes measured), read strictly
and written one entry at a time (file.py), its schema (schema.py), and this user's overlay per GPU (overlay.py: what
first use or a promote without pins_file= proved here). What the library runs for a call is decided from them in
library/dispatch.py, and nowhere else.
"""

from convtune.pins.file import (COMPILED, CONTEXTS, END, ENV_VAR, HEADER, PACKAGE_PINS, TORCH, TRAIN, UNCHECKED,
                                KernelPin, Pinned, PinChanged, PinsError, Source, as_entry, capability_of,
                                check_writable, context_of, create_empty, default_path, describe, entries,
                                family_sources, find, kernel_names, load, load_layers, lookup, named, parse,
                                pin_for, pin_key, pinned_value, section_of, value_of, write_pin)
from convtune.pins.file import Meta  # a pin's configuration type (kernels' Meta), for readers of pins alone

__all__ = ["COMPILED", "CONTEXTS", "END", "ENV_VAR", "HEADER", "PACKAGE_PINS", "TORCH", "TRAIN", "UNCHECKED",
           "KernelPin", "Meta", "Pinned", "PinChanged", "PinsError", "Source", "as_entry", "capability_of",
           "check_writable", "context_of", "create_empty", "default_path", "describe", "entries", "family_sources",
           "find", "kernel_names", "load", "load_layers", "lookup", "named", "parse", "pin_for", "pin_key",
           "pinned_value", "section_of", "value_of", "write_pin"]
