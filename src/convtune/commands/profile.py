"""`python -m convtune.commands.profile '<job json>'`: build the inputs and launch the kernel once (for ncu)."""

import json
import sys

import torch

from convtune.kernels import Meta, get_variant
from convtune.measure.one_config import make_inputs
from convtune.problem import ConvProblem


def main() -> None:
    job = json.loads(sys.argv[1])
    p = ConvProblem.from_mapping(job["problem"])
    x, w, b = make_inputs(p, job.get("seed", 0), torch.device("cuda"))
    get_variant(job["kernel"]).launch(x, w, b, p.stride, p.padding, p.dilation, Meta(**job["meta"]), job["precision"])
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
