"""convtune.conv2d as a PyTorch operator: gradients like torch.nn.Conv2d's, and traced whole by torch.compile."""

import os

import pytest
import torch
import torch.nn.functional as F

import convtune

GEOMETRY = dict(stride=(2, 1), padding=(1, 2), dilation=(1, 2))


def leaves(bias, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(2, 3, 9, 11, generator=g)
    w = torch.rand(5, 3, 3, 2, generator=g) - 0.5
    b = torch.rand(5, generator=g) if bias else None
    return x, w, b


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("wants", [(True, True, True), (False, True, True), (True, False, False)],
                         ids=["all", "params-only", "input-only"])
def test_gradients_equal_torch_conv2d_gradients(bias, wants):
    ours = [t.clone().requires_grad_(want) if t is not None else None for t, want in zip(leaves(bias), wants)]
    theirs = [t.clone().requires_grad_(want) if t is not None else None for t, want in zip(leaves(bias), wants)]
    y = convtune.conv2d(*ours, **GEOMETRY, precision="ieee")
    y_ref = F.conv2d(*theirs, **GEOMETRY)
    assert y.requires_grad and y.grad_fn is not None
    g = torch.rand_like(y)
    (y * g).sum().backward()
    (y_ref * g).sum().backward()
    torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-5)
    for a, r in zip(ours, theirs):
        if r is not None and r.requires_grad:
            torch.testing.assert_close(a.grad, r.grad, rtol=1e-5, atol=1e-5)
        elif a is not None:
            assert a.grad is None


def test_backward_of_a_plain_sum_works_and_no_grad_skips_the_graph():
    x, w, b = leaves(True)
    w.requires_grad_()
    convtune.conv2d(x, w, b, **GEOMETRY).sum().backward()  # "element 0 ... does not require grad" before
    assert w.grad is not None and w.grad.abs().sum() > 0
    with torch.no_grad():
        assert convtune.conv2d(x, w, b, **GEOMETRY).grad_fn is None


def test_torch_compile_traces_the_whole_graph_with_our_operator_in_it():
    x, w, b = leaves(True)
    seen = []

    def recording_backend(gm, example_inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    def model(x, w, b):
        return torch.relu(convtune.conv2d(x, w, b, **GEOMETRY, precision="ieee")) * 2

    compiled = torch.compile(model, fullgraph=True, backend=recording_backend)
    torch.testing.assert_close(compiled(x, w, b), torch.relu(F.conv2d(x, w, b, **GEOMETRY)) * 2, rtol=1e-5, atol=1e-5)
    assert "convtune.conv2d.default" in seen, seen  # our kernel, not a graph break and not torch's conv


def test_torch_compile_takes_the_default_precision_as_eager_does():
    x, w, b = leaves(True)
    compiled = torch.compile(lambda x, w, b: convtune.conv2d(x, w, b, **GEOMETRY), fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x, w, b), convtune.conv2d(x, w, b, **GEOMETRY), rtol=0, atol=0)


def test_aot_autograd_compiles_forward_and_backward_through_the_operator():
    x, w, b = (t.requires_grad_() for t in leaves(True))
    compiled = torch.compile(lambda x, w, b: convtune.conv2d(x, w, b, **GEOMETRY, precision="ieee").square().sum(),
                             fullgraph=True, backend="aot_eager")
    compiled(x, w, b).backward()
    xr, wr, br = (t.requires_grad_() for t in leaves(True))
    F.conv2d(xr, wr, br, **GEOMETRY).square().sum().backward()
    for a, r in ((x, xr), (w, wr), (b, br)):
        torch.testing.assert_close(a.grad, r.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
def test_a_small_cnn_trains_like_with_torch_conv2d():
    """A few SGD steps of a two-conv CNN on the GPU: the same loss curve as torch.nn.Conv2d, within TF32 noise."""
    def make(conv):
        torch.manual_seed(0)
        return torch.nn.Sequential(conv(3, 16, 3, padding=1), torch.nn.ReLU(), conv(16, 8, 3, stride=2),
                                   torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.LazyLinear(10)).cuda()

    torch.manual_seed(1)
    batch = (torch.rand(16, 3, 32, 32, device="cuda"), torch.randint(0, 10, (16,), device="cuda"))
    data = [batch] * 10  # one batch again and again: the loss must fall, whatever the labels
    curves = []
    for conv in (torch.nn.Conv2d, convtune.nn.Conv2d):
        model = make(conv)
        model(data[0][0])  # materialise the lazy layer before the optimiser sees the parameters
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        losses = []
        for x, y in data:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        curves.append(losses)
    assert curves[0][-1] < curves[0][0] and curves[1][-1] < curves[1][0]  # both learn
    print("losses torch.nn.Conv2d:", [round(v, 4) for v in curves[0]], "convtune.nn.Conv2d:", [round(v, 4) for v in curves[1]])
    torch.testing.assert_close(torch.tensor(curves[1]), torch.tensor(curves[0]), rtol=2e-2, atol=2e-3)


def test_aot_autograd_compiles_a_channels_last_call_through_nhwc_igemm_with_torchs_layout():
    """The operator's fake output is channels_last where its input is, as the real one (aot_eager checks the
    strides it traced against the ones the call returns)."""
    g = torch.Generator().manual_seed(11)
    x = torch.rand(2, 16, 7, 6, generator=g).to(memory_format=torch.channels_last).requires_grad_()
    w = (torch.rand(5, 16, 3, 3, generator=g) - 0.5).requires_grad_()
    compiled = torch.compile(lambda x, w: convtune.conv2d(x, w, None, padding=1, precision="ieee"), fullgraph=True,
                             backend="aot_eager")
    y = compiled(x, w)
    assert y.is_contiguous(memory_format=torch.channels_last)
    y.square().sum().backward()
    xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    ref = F.conv2d(xr, wr, None, padding=1)
    ref.square().sum().backward()
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
    for a, r in ((x, xr), (w, wr)):
        torch.testing.assert_close(a.grad, r.grad, rtol=1e-4, atol=1e-5)


def test_the_values_read_once_at_trace_time_carry_torchs_own_mark_and_importing_dynamo_is_left_to_compile():
    """call_key.constant_when_traced marks a function as torch.compiler.assume_constant_result does, without the
    import of torch._dynamo that the decorator makes (most of the library's import time): the marks are equal, each
    function read at trace time has it, and importing the library leaves torch._dynamo unimported."""
    import sys

    from convtune.library import call_key, functional
    from tests import preloaded

    def torchs():
        return ""

    def ours():
        return ""

    torch.compiler.assume_constant_result(torchs)
    call_key.constant_when_traced(ours)
    assert vars(ours) == vars(torchs) and vars(torchs)
    for fn in (call_key._traced_default_precision, call_key._traced_autocast, functional._traced_runs_kernel):
        assert vars(torchs).items() <= vars(fn).items(), fn
    code = "import sys, convtune.library.nn, convtune.app; print('torch._dynamo' in sys.modules)"
    r = preloaded.run([sys.executable, "-c", code], env=dict(os.environ), timeout=120)  # a process with torch imported
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stdout + r.stderr
