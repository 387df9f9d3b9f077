"""convert folds each batch norm that follows a convolution into it, for the calls that record no gradients
(library/fold_bn.py): the folded parameters are the float64 fold rounded once, the pairs are found by tracing the model
(torchvision's ResNet blocks as tests/tiny_models restates them), the batch norm then passes its input through, and
training or any call that records gradients runs both modules as torch does. CPU, torch's convolution."""

import copy

import pytest
import torch

import convtune
from convtune.library import fold_bn, residual
from tests.conftest import own_pins
from tests.tiny_models import BasicBlock, Bottleneck, tiny_resnet

TORCH_2_13 = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 13)

FOLDED = {"0": "1", "3.conv1": "3.bn1", "3.conv2": "3.bn2", "3.downsample.0": "3.downsample.1", "4.conv1": "4.bn1",
          "4.conv2": "4.bn2", "4.conv3": "4.bn3"}


def converted(**kw):
    model = tiny_resnet()
    ref = copy.deepcopy(model)
    report = convtune.nn.convert(model, torch.rand(2, 3, 16, 16), **{"fold_bn_layers": True, **kw})
    return model, ref, report


def passes(model):
    """Per batch norm, whether its last call handed its input on unchanged."""
    seen = {}
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.register_forward_hook(lambda mod, args, out, name=name: seen.__setitem__(name, out is args[0]))
    return seen


def test_the_pairs_are_found_by_tracing_and_the_report_names_them():
    model, _, report = converted()
    relus = {"0": "2", "3.conv1": "3.relu", "4.conv1": "4.relu", "4.conv2": "4.relu"}  # a ReLU takes the bn's output
    adds = {"3.conv2", "4.conv3"}  # the block's residual is added to the bn's output, then its ReLU
    assert {s.name: s.pattern for s in report} == {
        **{c: f"conv+bn+relu ({b}, {relus[c]})" if c in relus else f"conv+bn+add+relu ({b})" if c in adds else
           f"conv+bn ({b})" for c, b in FOLDED.items()},
        "5.conv": "conv"}
    assert "7 fold a batch norm" in str(report) and "[conv+bn+relu (3.bn1, 3.relu): Conv2d(8, 16" in str(report)
    assert isinstance(dict(model.named_modules())["3.bn1"], fold_bn.FoldedBatchNorm2d)
    assert type(dict(model.named_modules())["5.bn"]) is torch.nn.BatchNorm2d  # its conv's output is used twice
    assert list(model.state_dict()) == list(tiny_resnet().state_dict())  # the same keys: checkpoints still load
    chains, why = fold_bn.conv_bn_chains(torch.nn.Sequential(BasicBlock(4, 4), Bottleneck(4, 1)))
    # the ReLU after a batch norm where nothing else takes its output (the blocks' shared relu, called three times);
    # not after the residual add
    assert why is None and chains == [("0.conv1", "0.bn1", "0.relu"), ("0.conv2", "0.bn2", None),
                                      ("1.conv1", "1.bn1", "1.relu"), ("1.conv2", "1.bn2", "1.relu"),
                                      ("1.conv3", "1.bn3", None)]


def test_the_folded_weight_and_bias_are_the_float64_fold_rounded_once():
    model, _, _ = converted()
    conv, bn = model[3].conv1, model[3].bn1
    w, b = fold_bn.folded_params(conv, bn)
    s = bn.weight.double() / (bn.running_var.double() + bn.eps).sqrt()
    assert torch.equal(w, (conv.weight.double() * s[:, None, None, None]).float())
    assert torch.equal(b, (bn.bias.double() - bn.running_mean.double() * s).float())
    w0, b0 = fold_bn.folded_params(model[0], model[1])  # a convolution with its own bias
    s0 = model[1].weight.double() / (model[1].running_var.double() + model[1].eps).sqrt()
    shift0 = model[1].bias.double() + (model[0].bias.double() - model[1].running_mean.double()) * s0
    assert torch.equal(b0, shift0.float())


def test_in_eval_without_gradients_the_batch_norms_pass_through_and_the_output_is_torchs():
    model, ref, _ = converted()
    model.eval(), ref.eval()
    seen = passes(model)
    x = torch.rand(2, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(model(x), ref(x), rtol=1e-5, atol=1e-6)
    assert {n for n, through in seen.items() if through} == set(FOLDED.values()) and seen["5.bn"] is False


@pytest.mark.parametrize("mode", ["train", "eval with gradients", "eval, frozen convolutions"])
def test_calls_that_record_gradients_fold_nothing_and_match_torch_bit_for_bit(mode):
    model, ref, _ = converted()
    for m in (model, ref):
        m.train(mode == "train")
        if mode == "eval, frozen convolutions":  # the batch norms' parameters still record gradients
            for c in m.modules():
                if isinstance(c, torch.nn.Conv2d):
                    c.requires_grad_(False)
    seen = passes(model)
    x = torch.rand(2, 3, 16, 16)
    out, theirs = model(x), ref(x)
    assert torch.equal(out, theirs) and not any(seen.values())
    out.sum().backward(), theirs.sum().backward()
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        assert (p.grad is None) == (q.grad is None) and (p.grad is None or torch.equal(p.grad, q.grad)), n
    if mode == "train":  # the running statistics moved as torch's did
        assert torch.equal(model[1].running_mean, ref[1].running_mean)


def test_the_fold_follows_a_change_of_the_statistics_and_parameters():
    model, ref, _ = converted()
    model.eval(), ref.eval()
    x = torch.rand(2, 3, 16, 16)
    with torch.no_grad():
        model(x)
        for m in (model, ref):
            m[3].bn2.running_var.mul_(3.0)
            m[4].conv2.weight.add_(0.25)
        torch.testing.assert_close(model(x), ref(x), rtol=1e-5, atol=1e-6)


def test_a_weight_computed_by_a_pre_hook_is_folded_as_computed():
    """torch.nn.utils.weight_norm moves the weight out of the module's parameters and computes it before each call:
    the fold reads it as the attribute it then is, and follows a change of what it is computed from."""
    import warnings

    def make():
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # the old weight_norm is deprecated
            torch.nn.utils.weight_norm(m[0])  # (a model with it cannot be deep-copied)
        m[1].running_mean.uniform_(-1, 1), m[1].running_var.uniform_(0.5, 2)
        return m.eval()

    model, ref = make(), make()
    x = torch.rand(2, 3, 12, 12)
    report = convtune.nn.convert(model, x, fold_bn_layers=True)
    assert report[0].pattern == "conv+bn+relu (1, 2)"
    with torch.no_grad():
        torch.testing.assert_close(model(x), ref(x), rtol=1e-5, atol=1e-6)
        for m in (model, ref):
            m[0].weight_g.mul_(-0.5)
        torch.testing.assert_close(model(x), ref(x), rtol=1e-5, atol=1e-6)


def test_fold_bn_layers_takes_a_bool_only():
    with pytest.raises(ValueError, match=r"fold_bn_layers='yes': give True or False \(off by default\)"):
        convtune.nn.convert(tiny_resnet(), fold_bn_layers="yes")


def test_by_default_and_in_an_untraceable_model_nothing_is_folded():
    model = tiny_resnet()
    report = convtune.nn.convert(model, torch.rand(2, 3, 16, 16))
    assert all(s.pattern == "conv" for s in report) and report.unfolded is None and "batch norm" not in str(report)
    assert type(model[1]) is torch.nn.BatchNorm2d

    class Branchy(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.bn = torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)

        def forward(self, x):
            return self.bn(self.conv(x)) if x.sum() > 0 else x  # control flow on a value: fx cannot trace it

    report = convtune.nn.convert(Branchy(), torch.rand(1, 3, 8, 8), fold_bn_layers=True)
    assert [s.pattern for s in report] == ["conv"]
    assert report.unfolded.startswith("not traced by torch.fx (TraceError") and report.unfolded in str(report)


def test_compiled_calls_fold_nothing_and_trace_as_torchs_modules():
    """Under torch.compile both modules run as torch's (fold_bn: folded in the graph, ResNet-50 ran 0.905x compiled
    torch): the graph computes what the unconverted model does, bit for bit with the eager backend."""
    model, ref, _ = converted()
    model.eval(), ref.eval()
    x = torch.rand(2, 3, 16, 16)
    with torch.no_grad():
        model(x)  # an eager call folds and keeps the folded parameters: the traced one must not use them
        out = torch.compile(model, backend="eager", fullgraph=True)(x)
        assert torch.equal(out, ref(x))


def test_under_torch_compile_a_converted_model_adds_no_guard_a_layer():
    """A compiled call evaluates every guard of its graph on the host, and compiled ResNet-50 b32 on the H200 waits on
    its host (2.50 ms of host time a forward for 3.05). A converted layer's traced forward reached torch's through
    zero-argument super(), whose __class__ cell dynamo guards for each layer (CLOSURE_MATCH): 49 more guards for 48
    layers, and a CPU model of 48 convolutions took 339.7 us a compiled call (Inductor) against torch's 332.0. Convert's
    compiled decision is the layer's class (nn.TracedAsTorch), not an attribute (two guards a layer), and a block with
    a fused residual tail holds its base forward in a closure, not read through its class (a guard a block). So the
    guards a converted model adds to torch's are as many whatever the layers."""
    from collections import Counter

    from tests.tiny_models import Bottleneck

    torch.manual_seed(0)
    x = torch.rand(1, 16, 2, 2)

    def guards(model):
        with torch.no_grad():
            found = torch._dynamo.explain(model)(x).out_guards
        torch._dynamo.reset()
        return Counter(g.create_fn_name() for g in found)

    counts = {}
    for n in (2, 4):  # 6 and 12 convolutions, batch norms; 2 and 4 shared ReLU modules
        blocks = [Bottleneck(16, 4) for _ in range(n)]
        kept, folded = (torch.nn.Sequential(*copy.deepcopy(blocks)).eval() for _ in range(2))
        convtune.nn.convert(kept, x, leave_torch_layers=False)
        convtune.nn.convert(folded, x, leave_torch_layers=False, fold_bn_layers=True)
        assert {type(m) for m in kept.modules() if isinstance(m, torch.nn.Conv2d)} == {convtune.nn.TracedAsTorch}
        counts[n] = (guards(torch.nn.Sequential(*blocks).eval()), guards(kept), guards(folded))
    # before torch 2.13 (2.11 on the H200) dynamo guards each block's base forward: one more a block
    per_block = 0 if TORCH_2_13 else 1
    ref2, kept2, folded2 = (sum(c.values()) for c in counts[2])
    ref4, kept4, folded4 = (sum(c.values()) for c in counts[4])
    assert kept4 - ref4 == kept2 - ref2 and folded4 - ref4 - (folded2 - ref2) == 2 * per_block, counts
    # and few: the functions the modules name (torch's forwards, passes_through, ...), guarded once each
    assert kept4 - ref4 <= 10 and folded4 - ref4 - 4 * per_block <= 25, (kept4 - ref4, folded4 - ref4)
    # the functions the modules name are guarded once each, whatever the layers; before torch 2.13 a block with a fused
    # residual tail adds one for its base forward
    closures = {n: tuple(c["CLOSURE_MATCH"] for c in counts[n]) for n in counts}
    assert closures[2][:2] == closures[4][:2] and closures[4][2] - closures[2][2] == 2 * per_block, closures
    ref, kept_closures, folded_closures = closures[4]
    assert kept_closures - ref <= 2 and folded_closures - ref - 4 * per_block <= 6, closures[4]


@pytest.mark.parametrize("pinned_key_has_bias", [True, False])
def test_a_folded_layer_is_decided_as_the_convolution_with_a_bias_it_computes(tmp_path, monkeypatch,
                                                                              pinned_key_has_bias):
    """The pins decide a folded layer by the call it makes (with the folded bias): a kernel pin of that key runs the
    kernel on the folded weight and bias (Triton's interpreter here), matching the unconverted model; a pin of the
    layer's own key (no bias) does not decide its folded calls, which then run torch."""
    from convtune import pins
    from convtune.kernels import Meta
    from convtune.library import dispatch, functional
    from convtune.problem import ConvProblem

    f = own_pins(tmp_path, monkeypatch)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1, bias=False), torch.nn.BatchNorm2d(4)).eval()
    model[1].running_mean.uniform_(-0.5, 0.5)
    model[1].running_var.uniform_(0.5, 2.0)
    ref = copy.deepcopy(model)
    key = ConvProblem("", 1, 3, 8, 8, 4, 3, 3, (1, 1), (1, 1), (1, 1), 1, pinned_key_has_bias).key()
    pins.write_pin(f, "interpreter", "implicit_gemm", pins.pin_key(key, "tf32"),
                   pins.KernelPin("implicit_gemm", Meta(16, 16, 16, 4, 2)), {"rule": "test"})
    dispatch.forget()
    try:
        x = torch.rand(1, 3, 8, 8)
        report = convtune.nn.convert(model, x, fold_bn_layers=True)
        assert report[0].pattern == "conv+bn (1)"
        assert report[0].runs.startswith("convtune" if pinned_key_has_bias else "torch"), report[0].runs
        dispatch.forget()
        with torch.no_grad():
            torch.testing.assert_close(model(x), ref(x), rtol=2e-3, atol=2e-3)  # tf32: the kernel rounds to TF32
        assert bool(functional.cached_plans()) is pinned_key_has_bias  # the kernel's plan, made for the folded call
    finally:
        dispatch.forget()


def _pin_and_count_relus(f, key, monkeypatch):
    """Pin `key` (unless None) to implicit_gemm in the pins file `f` and count the calls of torch's ReLU (FusedReLU runs
    it by name): the list it returns grows by one a call."""
    from convtune import pins
    from convtune.kernels import Meta
    from convtune.library import dispatch

    if key is not None:
        pins.write_pin(f, "interpreter", "implicit_gemm", pins.pin_key(key, "tf32"),
                       pins.KernelPin("implicit_gemm", Meta(16, 16, 16, 4, 2)), {"rule": "test"})
    dispatch.forget()
    ran = []
    monkeypatch.setattr(torch.nn.ReLU, "forward", lambda self, x, f=torch.nn.ReLU.forward: ran.append(1) or f(self, x))
    return ran


def _matches_torch(model, ref, x, ran):
    """The converted `model`'s output on `x` without gradients, decided afresh, against the unconverted `ref`'s (TF32:
    the kernel rounds its operands); `ran` counts the ReLU calls of the converted model's call alone. Returns ref's."""
    from convtune.library import dispatch

    dispatch.forget()
    with torch.no_grad():
        want = ref(x)
        ran.clear()
        got = model(x)
    torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-3)
    return want


@pytest.mark.parametrize("fused_pin", [True, False])
def test_the_relu_after_a_folded_batch_norm_runs_in_the_kernel_where_a_pin_of_the_fused_problem_says_so(
        tmp_path, monkeypatch, fused_pin):
    """A conv → bn → ReLU whose links go nowhere else: where the pins name a kernel for the fused problem (the
    convolution with the folded bias, then `relu`), the kernel runs the ReLU (Triton's interpreter here) and the ReLU
    module hands its output on; without such a pin the layer runs the folded convolution alone and the ReLU runs. Either
    way the output is the unconverted model's; a call that records gradients fuses and folds nothing."""
    from convtune import pins
    from convtune.library import dispatch, fused
    from convtune.problem import ConvProblem

    f = own_pins(tmp_path, monkeypatch)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1, bias=False), torch.nn.BatchNorm2d(4),
                                torch.nn.ReLU()).eval()
    model[1].running_mean.uniform_(-0.5, 0.5)
    model[1].running_var.uniform_(0.5, 2.0)
    ref = copy.deepcopy(model)
    key = ConvProblem("", 1, 3, 8, 8, 4, 3, 3, (1, 1), (1, 1), (1, 1), 1, True, epilogue=("relu",)).key()
    assert key.endswith("-bias-nchw-float32-then-relu")
    ran = _pin_and_count_relus(f, key if fused_pin else None, monkeypatch)
    try:
        x = torch.rand(1, 3, 8, 8)
        report = convtune.nn.convert(model, x, fold_bn_layers=True)
        assert report[0].pattern == "conv+bn+relu (1, 2)" and type(model[2]) is fused.FusedReLU
        assert report[0].runs.endswith(
            f"; with its ReLU: convtune implicit_gemm M16-N16-K16-w4-s2 (pin interpreter / implicit_gemm / {key}/tf32)"
            if fused_pin else f"; with its ReLU: torch (no pin for {key}/tf32 on interpreter: the library runs a kernel "
                              "only where a measurement on this GPU (or its family) pinned it)"), report[0].runs
        _matches_torch(model, ref, x, ran)
        assert (ran == []) is fused_pin  # torch's ReLU did not run where the kernel applied it
        assert [v is pins.TORCH for v in fused._plans.values()] == [not fused_pin]
        ran.clear()
        x.requires_grad_(True)
        torch.testing.assert_close(model(x), ref(x), rtol=2e-3, atol=2e-3)  # training: torch's bn and ReLU
        assert len(ran) == 2
    finally:
        dispatch.forget()


def _basic_block():
    """A BasicBlock(4, 8, stride 2) in eval mode with non-trivial batch-norm statistics, and an unconverted copy."""
    torch.manual_seed(0)
    model = BasicBlock(4, 8, stride=2).eval()
    for bn in (model.bn1, model.bn2, model.downsample[1]):
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    return model, copy.deepcopy(model)


@pytest.mark.parametrize("fused_pin", [True, False])
def test_the_residual_add_and_relu_after_a_folded_batch_norm_run_in_the_kernel_where_a_pin_says_so(
        tmp_path, monkeypatch, fused_pin):
    """A BasicBlock with a downsample (which it computes after conv2): where the pins name a kernel for conv2's fused
    problem (the convolution with the folded bias, then `add,relu`), the block's eval forward computes the downsample
    first and the kernel adds it and applies the ReLU (Triton's interpreter here): torch's ReLU runs once (after bn1,
    unfused), not twice. Without the pin the block calls its modules. Either way the output is the unconverted block's;
    training runs the block's own forward, bit for bit; a deep copy runs its own modules."""
    from convtune import pins
    from convtune.library import dispatch, fused
    from convtune.problem import ConvProblem

    f = own_pins(tmp_path, monkeypatch)
    model, ref = _basic_block()
    key = ConvProblem("", 1, 8, 4, 4, 8, 3, 3, (1, 1), (1, 1), (1, 1), 1, True, epilogue=("add", "relu")).key()
    assert key.endswith("-bias-nchw-float32-then-add.relu")
    ran = _pin_and_count_relus(f, key if fused_pin else None, monkeypatch)
    try:
        x = torch.rand(1, 4, 8, 8)
        report = convtune.nn.convert(model, x, fold_bn_layers=True)
        (conv2,) = [s for s in report if s.name == "conv2"]
        assert conv2.pattern == "conv+bn+add+relu (bn2)" and isinstance(model, BasicBlock)
        assert f": {int(fused_pin)} run convtune's kernel, {3 - int(fused_pin)} torch's" in str(report)
        assert conv2.runs.endswith(
            f"; with its residual add and ReLU: convtune implicit_gemm M16-N16-K16-w4-s2 (pin interpreter / "
            f"implicit_gemm / {key}/tf32)" if fused_pin else f"; with its residual add and ReLU: torch (no pin for "
            f"{key}/tf32 on interpreter: the library runs a kernel only where a measurement on this GPU (or its family) "
            "pinned it)"), conv2.runs
        assert list(model.state_dict()) == list(ref.state_dict()) and \
            [n for n, _ in model.named_modules()] == [n for n, _ in ref.named_modules()]
        want = _matches_torch(model, ref, x, ran)
        assert len(ran) == (1 if fused_pin else 2)
        # conv1's fused ReLU has no pin (torch); conv2's residual chain runs the kernel where pinned
        assert {sig[-1]: v is pins.TORCH for sig, v in fused._plans.items()} == {("relu",): True,
                                                                                ("add", "relu"): not fused_pin}
        assert key in convtune.nn.problems(ref, x, fold_bn_layers=True)  # what tune_model.py fold_bn=true tunes
        twin = copy.deepcopy(model)
        with torch.no_grad():
            twin.conv2.weight.mul_(2)  # the copy's own modules: the original's output stays
            torch.testing.assert_close(model(x), want, rtol=2e-3, atol=2e-3)
            assert not torch.allclose(twin(x), want, rtol=2e-3, atol=2e-3)
            assert type(twin) is type(model) and twin._convtune_traced.conv2 is twin.conv2  # the copy still fuses
            seen = []
            hook = model.bn2.register_forward_hook(lambda m, args, out: seen.append(out))
            ran.clear()
            torch.testing.assert_close(model(x), want, rtol=2e-3, atol=2e-3)
            hook.remove()
            assert len(seen) == 1 and len(ran) == 2  # a hook watches bn2: the modules run, the hook sees its call
        # the block frozen, its residual recording gradients (the convolution would fold): the modules' path
        model.requires_grad_(False)
        r = torch.rand(1, 8, 4, 4, requires_grad=True)
        y = model.relu(model.bn1(model.conv1(x)))  # conv2's input
        out = residual.conv_bn_add_relu(model.conv2, model.bn2, model.relu, y, r)
        out.sum().backward()
        assert r.grad is not None and torch.equal(r.grad, (out > 0).float())
        model.requires_grad_(True)
        model.train(), ref.train()
        ran.clear()
        assert torch.equal(model(x), ref(x)) and len(ran) == 4  # the block's own forward, twice its ReLU, in each
    finally:
        dispatch.forget()


def test_under_autocast_the_residual_tail_runs_the_kernel_of_the_regions_dtype(tmp_path, monkeypatch):
    """Under torch.autocast the block's fused call computes as its convolution would there: the folded parameters cast
    to the region's dtype (float16: the interpreter has no bfloat16), keyed by it, the residual in it too."""
    from convtune.library import fused
    from convtune.problem import ConvProblem

    f = own_pins(tmp_path, monkeypatch)
    torch.manual_seed(0)
    model = Bottleneck(16, 4).eval()
    for bn in (model.bn1, model.bn2, model.bn3):
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    ref = copy.deepcopy(model)
    x = torch.rand(1, 16, 4, 4)
    with torch.autocast("cpu", dtype=torch.float16):
        report = convtune.nn.convert(model, x.half(), fold_bn_layers=True)
    assert [s.pattern for s in report if s.name == "conv3"] == ["conv+bn+add+relu (bn3)"]
    key = ConvProblem("", 1, 4, 4, 4, 16, 1, 1, (1, 1), (0, 0), (1, 1), 1, True, dtype="float16",
                      epilogue=("add", "relu")).key()
    _pin_and_count_relus(f, key, monkeypatch)
    with torch.autocast("cpu", dtype=torch.float16), torch.no_grad():
        want, got = ref(x.half()), model(x.half())
    assert got.dtype == want.dtype == torch.float16
    torch.testing.assert_close(got.float(), want.float(), rtol=1e-2, atol=1e-2)
    assert {sig[-1]: v is fused.pins.TORCH for sig, v in fused._plans.items()}.get(("add", "relu")) is False


@pytest.mark.parametrize("kernel", ["implicit_gemm", "nhwc_igemm"])
def test_a_channels_last_block_fuses_with_its_folded_weights_in_the_layout_the_kernel_reads(tmp_path, monkeypatch,
                                                                                           kernel):
    """A channels_last model's folded weight is channels_last too; the kernels read an NCHW-contiguous one
    (implicit_gemm reads it as it is and refuses any other; the copy is made once per folded weight): with both fused
    calls of a BasicBlock pinned to the kernel (its ReLU after bn1, its residual add and ReLU after bn2), the block
    runs both and its output, channels_last, is torch's."""
    from convtune import pins
    from convtune.kernels import Meta
    from convtune.library import dispatch, fused
    from convtune.problem import ConvProblem

    f = own_pins(tmp_path, monkeypatch)
    model, ref = _basic_block()
    model = model.to(memory_format=torch.channels_last)
    x = torch.rand(1, 4, 8, 8).to(memory_format=torch.channels_last)
    for key in (ConvProblem("", 1, 4, 8, 8, 8, 3, 3, (2, 2), (1, 1), (1, 1), 1, True, layout="channels_last",
                            epilogue=("relu",)).key(),
                ConvProblem("", 1, 8, 4, 4, 8, 3, 3, (1, 1), (1, 1), (1, 1), 1, True, layout="channels_last",
                            epilogue=("add", "relu")).key()):
        pins.write_pin(f, "interpreter", kernel, pins.pin_key(key, "tf32"),
                       pins.KernelPin(kernel, Meta(16, 16, 16, 4, 2)), {"rule": "test"})
    dispatch.forget()
    try:
        convtune.nn.convert(model, x, fold_bn_layers=True)
        dispatch.forget()
        with torch.no_grad():
            got, want = model(x), ref(x)
        torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-3)
        assert got.is_contiguous(memory_format=torch.channels_last)
        assert {sig[-1]: v is pins.TORCH for sig, v in fused._plans.items()} == {("relu",): False,
                                                                                ("add", "relu"): False}
    finally:
        dispatch.forget()


def test_a_converted_model_saves_with_torch_save_and_loads_as_its_own_classes(tmp_path):
    """torch.save pickles the model: a module whose residual tail fuses is written as its own class without its
    traced graph (a class made at run time has no name to load by); the loaded model computes the same, and convert
    makes it fuse again."""
    from tests.tiny_models import Bottleneck

    torch.manual_seed(0)
    model = torch.nn.Sequential(BasicBlock(4, 8, stride=2), Bottleneck(8, 2))
    ref = copy.deepcopy(model).eval()
    x = torch.rand(2, 4, 16, 16)
    convtune.nn.convert(model, x, fold_bn_layers=True)
    assert type(model[1]) is not Bottleneck and isinstance(model[1], Bottleneck)
    torch.save(model, tmp_path / "model.pt")
    loaded = torch.load(tmp_path / "model.pt", weights_only=False).eval()
    assert [type(m) for m in loaded] == [BasicBlock, Bottleneck] and "_convtune_traced" not in loaded[1].__dict__
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), ref(x))
        report = convtune.nn.convert(loaded, x, fold_bn_layers=True)
        assert [s.pattern for s in report if s.name == "1.conv3"] == ["conv+bn+add+relu (1.bn3)"]
        assert type(loaded[1]) is type(model[1])
        torch.testing.assert_close(loaded(x), ref(x))


def test_convert_leaves_each_modules_train_or_eval_flag_as_it_was():
    """A model in training with a frozen batch norm (eval mode inside a training block, as detection models keep
    theirs): convert traces each block in eval mode to find its residual tail and gives each module its own flag
    back."""
    model = tiny_resnet().train()
    model[4].bn2.eval()
    before = {name: m.training for name, m in model.named_modules()}
    convtune.nn.convert(model, torch.rand(2, 3, 16, 16), fold_bn_layers=True)
    assert {name: m.training for name, m in model.named_modules()} == before
