"""convtune.kernels.interpreter: the interpreter skips the integer-overflow checks whose verdict it discards, and a
kernel computes the same with them on and off, overflowing arithmetic included."""

import dataclasses

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import interpreter_builder

from convtune.kernels import interpreter  # importing the package installs the setting, as for every user of it


@triton.jit
def _wrapping(x_ptr, y_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(y_ptr + offs, x * 65536 + x - 7)  # int32 products past 2**31 wrap


def _run(options) -> torch.Tensor:
    saved = interpreter_builder.options
    interpreter_builder.options = options
    try:
        x = torch.tensor([1, 40000, -40000, 2**31 - 1, -(2**31), 12345], dtype=torch.int32)
        x = torch.cat([x, torch.zeros(2, dtype=torch.int32)])
        y = torch.empty_like(x)
        _wrapping[(1,)](x, y, N=8)
        return y
    finally:
        interpreter_builder.options = saved


def test_importing_the_kernels_turns_the_discarded_checks_off():
    assert interpreter_builder.options.sanitize_overflow is False and interpreter_builder.options.debug is False


def test_a_kernel_computes_the_same_with_the_checks_on_and_off_overflow_included():
    on = _run(dataclasses.replace(interpreter_builder.options, sanitize_overflow=True))
    off = _run(dataclasses.replace(interpreter_builder.options, sanitize_overflow=False))
    x = np.array([1, 40000, -40000, 2**31 - 1, -(2**31), 12345, 0, 0], dtype=np.int64)
    wrapped = ((x * 65536 + x - 7 + 2**31) % 2**32 - 2**31).astype(np.int32)
    assert torch.equal(on, off) and np.array_equal(off.numpy(), wrapped)
    # the arithmetic does overflow: with debug on, the same checks stop the kernel
    with pytest.raises(Exception, match="int32 overflow detected"):
        _run(dataclasses.replace(interpreter_builder.options, sanitize_overflow=True, debug=True))


def test_with_debug_on_or_without_the_interpreter_the_checks_stay(monkeypatch):
    saved = interpreter_builder.options
    try:
        interpreter_builder.options = dataclasses.replace(saved, debug=True, sanitize_overflow=True)
        assert interpreter.install() is False and interpreter_builder.options.sanitize_overflow is True
        interpreter_builder.options = dataclasses.replace(saved, sanitize_overflow=True)
        monkeypatch.delenv("TRITON_INTERPRET")
        assert interpreter.install() is False and interpreter_builder.options.sanitize_overflow is True
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        assert interpreter.install() is True and interpreter_builder.options.sanitize_overflow is False
    finally:
        interpreter_builder.options = saved
