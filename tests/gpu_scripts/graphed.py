"""GPU check of convtune.nn.graphed (library/graphed.py), run by tests/test_gpu.py in a subprocess without the
interpreter: a converted model with folded batch norms, fused ReLUs and a residual add, replayed from CUDA graphs,
gives the eager forward's output after every change the wrapper checks for, and runs eagerly where it must. Prints
'ok' at the end; any failure raises."""

import os
import warnings

os.environ.setdefault("CONVTUNE_UNPINNED", "kernel")  # the kernels' paths through the library are the subject
import torch  # noqa: E402

import convtune  # noqa: E402
from convtune.library import dispatch  # noqa: E402

torch.manual_seed(0)


class Block(torch.nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False), torch.nn.BatchNorm2d(c)
        self.conv2, self.bn2 = torch.nn.Conv2d(c, c, 1, bias=False), torch.nn.BatchNorm2d(c)
        self.relu = torch.nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(y)) + x)


def make() -> torch.nn.Module:
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
                            Block(32), Block(32), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                            torch.nn.Linear(32, 10))
    for bn in m.modules():
        if isinstance(bn, torch.nn.BatchNorm2d):  # statistics away from 0/1, so that folding them shows
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
    return m.cuda().eval()


model = make()
x = torch.randn(4, 3, 20, 20, device="cuda")
report = convtune.nn.convert(model, example_input=x, fold_bn_layers=True)
assert sum(s.decided.get("eager") not in (None, "torch") for s in report) >= 3, report
g = convtune.nn.graphed(model)


def eager(inp: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(inp)


def replayed(inp: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return g(inp)


# 1. Replays give the eager forward's bits; the outputs are copies (a later replay leaves an earlier output alone).
want = eager(x)
first = replayed(x)
assert g.graphs == 1 and torch.equal(first, want), (g.graphs, (first - want).abs().max())
kept = first.clone()
x2 = torch.randn_like(x)
second = replayed(x2)
assert torch.equal(second, eager(x2)) and torch.equal(first, kept) and g.graphs == 1

# 2. An in-place weight change (what an optimiser step does), a batch norm's statistics and load_state_dict: the next
# call captures again and gives the new eager output (the folded weights are made again).
replay = g._graphs[next(iter(g._graphs))]
with torch.no_grad():
    model[3].conv1.weight.mul_(1.5)
assert torch.equal(replayed(x), eager(x)) and g._graphs[next(iter(g._graphs))] is not replay and g.graphs == 1
with torch.no_grad():
    model[4].bn2.running_var.mul_(3.0)
assert torch.equal(replayed(x), eager(x))
other = make()
model.load_state_dict(other.state_dict())
assert torch.equal(replayed(x), eager(x))

# 3. A parameter replaced by a new one (a registration: the list checked is made again), and param.data = ...
model[7].weight = torch.nn.Parameter(torch.randn_like(model[7].weight))
assert torch.equal(replayed(x), eager(x))
model[3].conv2.weight.data = torch.randn_like(model[3].conv2.weight)
assert torch.equal(replayed(x), eager(x))

# 4. New pins (dispatch.forget: the pins' generation) capture again.
replay = g._graphs[next(iter(g._graphs))]
dispatch.forget()
assert torch.equal(replayed(x), eager(x)) and g._graphs[next(iter(g._graphs))] is not replay

# 5. Another batch, another graph; beyond max_graphs, eager calls (right, and no graph kept).
small = convtune.nn.graphed(model, max_graphs=2)
for n in (1, 2, 3):
    xn = torch.randn(n, 3, 20, 20, device="cuda")
    with torch.no_grad():
        assert torch.equal(small(xn), eager(xn)), n
assert small.graphs == 2

# 6. Calls that record gradients and train-mode calls run the model eagerly.
out = g(x)
assert out.requires_grad and out.grad_fn is not None
out.sum().backward()
assert model[0].weight.grad is not None
model.train()
with torch.no_grad():
    a = g(x)
model.eval()
assert a.shape == want.shape and g.graphs == 1

# 7. Under bfloat16 autocast, in separate autocast regions (autocast's cast cache is off for the capture: a cast kept
# by a finished region would be freed under the graph), and under inference mode.
for _ in range(3):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        got, ref = replayed(x), eager(x)
    assert got.dtype == ref.dtype and torch.equal(got, ref), (got - ref).abs().max()
    torch.randn(1 << 22, device="cuda")  # allocations in between: freed memory under a graph would be rewritten
with torch.inference_mode():
    got = g(x)
assert torch.equal(got, eager(x))

# 8. A forward that cannot be captured (a host synchronisation) warns once and runs eagerly, right.


class Syncs(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * float(x.abs().max())


s = convtune.nn.graphed(Syncs().cuda().eval())
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with torch.no_grad():
        outs = [s(x) for _ in range(3)]
assert len([w for w in caught if "could not be captured" in str(w.message)]) == 1, [str(w.message) for w in caught]
assert all(torch.equal(o, x * float(x.abs().max())) for o in outs) and s.graphs == 0
with torch.no_grad():  # the CUDA context still works after the failed capture
    assert torch.equal(replayed(x), eager(x))

# A forward that raises as it runs raises from the graphed call too (in the warmup: nothing is marked failed).


class Raises(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("the model's own error")


r = convtune.nn.graphed(Raises().cuda().eval())
for _ in range(2):
    try:
        with torch.no_grad():
            r(x)
        raise AssertionError("no error")
    except ValueError as e:
        assert "the model's own error" in str(e)
assert r._failed == {} and r.graphs == 0

# 9. An argument with gaps between its elements (a slice) is captured with its own strides: the forward sees what it
# sees eagerly.
wide = torch.randn(4, 3, 20, 40, device="cuda")[..., ::2]
assert not wide.is_contiguous()
assert torch.equal(replayed(wide), eager(wide)) and torch.equal(replayed(wide), eager(wide))
assert next(r for k, r in g._graphs.items() if k[0][0][1] == wide.stride()).inputs[0].stride() == wide.stride()

# 10. A tuple output and a second argument.


class Two(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = convtune.nn.Conv2d(3, 8, 3)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple:
        return self.conv(a), {"sum": self.conv(b) + 1}


two = Two().cuda().eval()
gt = convtune.nn.graphed(two)
b = torch.randn_like(x)
with torch.no_grad():
    r1, r2 = gt(x, b), two(x, b)
    assert torch.equal(r1[0], r2[0]) and torch.equal(r1[1]["sum"], r2[1]["sum"]) and gt.graphs == 1
print("ok")
