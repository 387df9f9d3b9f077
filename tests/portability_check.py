"""Compile the library's kernels for GPUs other than the one that tuned them, with no GPU: Triton compiles for a named
target (GPUTarget). Run by tests/test_portability.py in a process of its own (TRITON_INTERPRET unset, so that
@triton.jit gives compilable functions); a launch is recorded instead of run (JITFunction.run replaced), and each
recorded launch compiled for each target. Prints one JSON line a binary."""

import json
import os
import sys

os.environ.pop("TRITON_INTERPRET", None)

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

launches: list = []
JITFunction.run = lambda self, *args, grid=None, warmup=False, **kwargs: launches.append((self, args, kwargs))

from convtune.kernels import Meta  # noqa: E402
from convtune.kernels import VARIANTS  # noqa: E402
from convtune.kernels.epilogue import Epilogue, pack_vectors  # noqa: E402
from convtune.problem import ConvProblem  # noqa: E402


TYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.int32: "i32"}  # Triton's names


def signature(fn, args, kwargs):
    """Triton's signature, constexprs and options of one recorded launch."""
    values = {**dict(zip(fn.arg_names, args)), **{k: v for k, v in kwargs.items() if k in fn.arg_names}}
    options = {k: v for k, v in kwargs.items() if k not in fn.arg_names}
    sig, constexprs = {}, {}
    for param, name in zip(fn.params, fn.arg_names):
        v = values[name]
        if param.is_constexpr:
            sig[name], constexprs[name] = "constexpr", v
        elif isinstance(v, torch.Tensor):
            sig[name] = "*" + TYPES[v.dtype]
        elif isinstance(v, TensorDescriptor):
            sig[name] = f"tensordesc<{TYPES[v.base.dtype]}{list(v.block_shape)}>"
        elif isinstance(v, int) and not isinstance(v, bool):
            sig[name] = "i32" if abs(v) < 2**31 else "i64"
        else:
            raise TypeError(f"{fn.__name__}.{name}: {type(v).__name__}")
    return sig, constexprs, options


def main() -> int:
    from convtune.errors import ConfigError, UnsupportedProblem

    # [[variant, problem mapping, meta dict, precision, once], ...]: `once`, a job of which only the first the
    # variant accepts is compiled
    with open(sys.argv[1]) as f:  # a JSON file of them
        jobs = json.load(f)
    targets = [tuple(t) for t in json.loads(sys.argv[2])]  # [[capability, shared bytes a block], ...]
    seen, done = {}, set()
    for name, problem, meta, precision, once in jobs:
        if once and name in done:
            continue
        p = ConvProblem.from_mapping(problem)
        dtype = getattr(torch, p.dtype)
        x = torch.rand(1, p.in_channels, p.height, p.width, dtype=dtype)  # one image: binaries do not depend on it
        if p.layout == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        w = torch.rand(p.out_channels, p.in_channels, p.kernel_h, p.kernel_w, dtype=dtype)
        b = torch.rand(p.out_channels, dtype=dtype) if p.bias else None
        ep = Epilogue(p.epilogue, pack_vectors(p.epilogue, [(w.new_ones(p.out_channels),) * 2] * len(p.epilogue)),
                      x.new_zeros((1,) + p.output_shape[1:]) if "add" in p.epilogue else None)
        first = len(launches)
        try:
            VARIANTS[name].launch(x, w, b, p.stride, p.padding, p.dilation, Meta(**meta), precision,
                                  **({"epilogue": ep} if p.epilogue else {}))
        except (UnsupportedProblem, ConfigError) as e:  # the variant's own refusal: it never launches this
            print(json.dumps(dict(variant=name, meta=Meta(**meta).short(), refused=str(e)[:200])), flush=True)
            continue
        done.add(name)
        for fn, args, kwargs in launches[first:]:
            sig, cx, opts = signature(fn, args, kwargs)
            # a binary two variants launch (the input's rounding copy) is compiled once and reported for each
            users, *_ = seen.setdefault(repr((fn.__name__, sorted(sig.items()), sorted(cx.items()),
                                              sorted(opts.items()))), ({}, fn, sig, cx, opts))
            users.setdefault(name, Meta(**meta).short())
    for users, fn, sig, cx, opts in seen.values():
        for capability, limit in targets:
            row = dict(kernel=fn.__name__, capability=capability, limit=limit, epilogue=cx.get("EPILOGUE", 0))
            try:
                compiled = triton.compile(ASTSource(fn, sig, cx), target=GPUTarget("cuda", capability, 32),
                                          options=opts)
                row["shared"] = compiled.metadata.shared
            except Exception as e:  # noqa: BLE001 - reported, and the test says what it expected
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            for name, short in users.items():
                print(json.dumps(dict(variant=name, meta=short, **row)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
