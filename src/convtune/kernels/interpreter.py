"""Triton's interpreter without the overflow checks whose verdict it throws away.

For every integer add, sub and mul in a kernel, Triton's interpreter (its `sanitize_overflow` option, on by default)
computes the operation again in int64, compares the result with the type's bounds and hands the verdict to a
device_assert. Without `debug` that assert is dropped before it runs (`semantic.device_assert` returns at once), so
the work changes nothing: a kernel's results, and the errors it raises, are the same with it off. That work is
about half of an interpreted kernel's time: 32.8 of the 66.9 s that the kernels took in one
`run.py +experiment=candidates problem=tiny device=interpreter` under cProfile (Triton 3.9, torch 2.13 on the CPU).

`install()` turns the option off in the interpreter's one builder while `debug` is off there. Compiled kernels are
left alone.
"""

from __future__ import annotations

import dataclasses
import os


def install() -> bool:
    """Skip the discarded overflow checks in this process's interpreter; True where that was done. A no-op without
    TRITON_INTERPRET=1 (compiled Triton), with the interpreter's `debug` on, or in a Triton whose interpreter has
    no such option."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return False
    try:
        from triton.runtime.interpreter import interpreter_builder
    except ImportError:
        return False
    options = getattr(interpreter_builder, "options", None)
    if not dataclasses.is_dataclass(options) or getattr(options, "debug", True) \
            or not getattr(options, "sanitize_overflow", False):
        return False
    interpreter_builder.options = dataclasses.replace(options, sanitize_overflow=False)
    return True
