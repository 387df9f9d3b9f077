"""The library as a drop-in (interpreter, CPU tensors): any memory layout in, torch's layout out; what the
kernel cannot take says why in one line; convtune.nn.convert swaps a model's convolutions and reports."""

import pytest
import torch
import torch.nn.functional as F

import convtune
from convtune.library import dispatch, functional


@pytest.fixture
def kernel_runs(monkeypatch):
    """Unpinned calls run the library's default kernel (CONVTUNE_UNPINNED=kernel): with no pin the library runs
    torch, and a test of the kernel's drop-in behaviour would compare torch with torch."""
    monkeypatch.setenv(dispatch.UNPINNED_ENV, "kernel")
    dispatch.forget()
    yield
    dispatch.forget()


def layouts():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(2, 3, 9, 11, generator=g)
    w = torch.rand(5, 3, 3, 2, generator=g) - 0.5
    cl = torch.channels_last
    return {
        "nchw": (x, w),
        "channels_last input": (x.to(memory_format=cl), w),
        "channels_last weight": (x, w.to(memory_format=cl)),
        "both channels_last": (x.to(memory_format=cl), w.to(memory_format=cl)),
        "strided input (a slice)": (torch.rand(2, 3, 9, 22, generator=g)[..., ::2], w),
        "transposed H/W input": (torch.rand(2, 3, 11, 9, generator=g).transpose(2, 3), w),
        # both layouts contiguous at once: the strides decide, as in torch (the H200 run found these)
        "one input channel, channels_last": (torch.rand(2, 1, 9, 11, generator=g).to(memory_format=cl),
                                             torch.rand(5, 1, 3, 2, generator=g)),
        "1x1 weight, channels_last": (x, torch.rand(5, 3, 1, 1, generator=g).to(memory_format=cl)),
        "one input channel, NCHW": (torch.rand(2, 1, 9, 11, generator=g), torch.rand(5, 1, 3, 2, generator=g)),
    }


@pytest.mark.parametrize("name", list(layouts()))
def test_any_layout_in_gives_torchs_values_and_torchs_output_layout(name, kernel_runs):
    x, w = layouts()[name]
    b = torch.rand(5)
    ours = convtune.conv2d(x, w, b, stride=(2, 1), padding=1, precision="ieee")
    assert len(functional.cached_plans()) == 1  # the kernel ran, not torch
    ref = F.conv2d(x.double(), w.double(), b.double(), stride=(2, 1), padding=1)
    torch.testing.assert_close(ours.double(), ref, rtol=1e-5, atol=1e-5)
    theirs = F.conv2d(x, w, b, stride=(2, 1), padding=1)
    for fmt in (torch.contiguous_format, torch.channels_last):
        assert ours.is_contiguous(memory_format=fmt) == theirs.is_contiguous(memory_format=fmt), fmt


def test_gradients_flow_back_to_a_channels_last_input_in_its_layout(kernel_runs):
    x = torch.rand(2, 3, 9, 11).to(memory_format=torch.channels_last).requires_grad_()
    w = (torch.rand(5, 3, 3, 3) - 0.5).requires_grad_()
    xr, wr = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    with dispatch.forward_pins_in_training():  # a call that records gradients runs the kernel (forward) here
        convtune.conv2d(x, w, padding=1, precision="ieee").square().sum().backward()
        assert len(functional.cached_plans()) == 1  # the kernel ran, not torch
    F.conv2d(xr, wr, padding=1).square().sum().backward()
    torch.testing.assert_close(x.grad.double(), xr.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(w.grad.double(), wr.grad, rtol=1e-4, atol=1e-4)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.blocks = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, padding=1, groups=4), torch.nn.ReLU(),
                                          torch.nn.Conv2d(8, 8, 3, padding="same"),
                                          torch.nn.Conv2d(8, 8, 3, padding=1, padding_mode="reflect"))
        self.unused = torch.nn.Conv2d(8, 8, 1)

    def forward(self, x):
        return self.blocks(self.stem(x))


def test_convert_swaps_every_conv_in_place_and_says_what_each_runs(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET")  # CPU tensors as a user without a GPU has them: torch runs them
    net = Net()
    x = torch.rand(2, 3, 8, 8)
    before, state = net(x), {k: v.clone() for k, v in net.state_dict().items()}
    stem_weight = net.stem.weight
    report = convtune.nn.convert(net, example_input=x, leave_torch_layers=False)
    assert all(type(m) is convtune.nn.Conv2d for m in net.modules() if isinstance(m, torch.nn.Conv2d))
    assert net.stem.weight is stem_weight and net.state_dict().keys() == state.keys()
    torch.testing.assert_close(net(x), before)  # CPU tensors: torch's convolution, the same numbers
    runs = {s.name: s.runs for s in report}
    assert runs == {"stem": "torch: input on cpu (the kernels run on CUDA tensors, or on the CPU under TRITON_INTERPRET=1)",
                    "blocks.0": "torch: groups=4 (the kernel takes groups=1)",
                    "blocks.2": "torch: padding='same' (the kernel takes numbers)",
                    "blocks.3": "torch: padding_mode='reflect' (the kernel pads with zeros)",
                    "unused": "not called by the example input"}
    assert str(report).splitlines()[-1] == ("5 convolution(s) swapped: 0 run convtune's kernel, 4 torch's, 1 not called by the example input")
    assert {s.name: s.runs for s in convtune.nn.convert(net)}["stem"] == \
        "convtune (configuration per input shape: pins)"  # no example input: per shape, decided at the call


def test_what_no_kernel_takes_runs_torch_with_the_reason_at_debug_and_what_torch_refuses_is_refused(
        monkeypatch, caplog):
    import logging

    monkeypatch.setenv("CONVTUNE_UNPINNED", "kernel")  # a call the kernels take would run one
    g = torch.Generator().manual_seed(1)
    x, w, b = torch.rand(1, 4, 8, 8, generator=g), torch.rand(4, 4, 3, 3, generator=g), torch.rand(4, generator=g)
    cases = [(dict(groups=2), (x, w[:, :2], b), "groups=2 (the kernels take groups=1)"),
             (dict(padding="same"), (x, w, b), "padding='same' (the kernels take numbers)"),
             ({}, (x.double(), w.double(), b.double()),
              "input is torch.float64 (the kernels take float32, bfloat16 and float16)"),
             ({}, (x.bfloat16(), w.bfloat16(), None), "bfloat16 on the CPU (the Triton interpreter computes it wrong: "
                                                     "numpy has no bfloat16)"),
             ({}, (x[0], w, b), "3-d input (the kernels take a batch, N×C×H×W)")]
    for kwargs, (xx, ww, bb), why in cases:
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="convtune.library.functional"):
            got = convtune.conv2d(xx, ww, bb, **kwargs)
        assert torch.equal(got, F.conv2d(xx, ww, bb, **kwargs)), why  # torch's own call: the same bits
        assert f"convtune.conv2d runs torch: {why}" in caplog.text
    # a mix of dtypes is torch's to refuse, in its words
    with pytest.raises(RuntimeError) as theirs:
        F.conv2d(x.half(), w, None)
    with caplog.at_level(logging.DEBUG, logger="convtune.library.functional"), pytest.raises(RuntimeError) as ours:
        convtune.conv2d(x.half(), w, None)
    assert str(ours.value) == str(theirs.value)
    assert "runs torch: weight is torch.float32, input torch.float16" in caplog.text
    # a CPU tensor without TRITON_INTERPRET (as a user without a GPU runs it): torch, said at DEBUG
    monkeypatch.delenv("TRITON_INTERPRET")
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="convtune.library.functional"):
        assert torch.equal(convtune.conv2d(x, w, b, padding=1), F.conv2d(x, w, b, padding=1))
    assert "runs torch: input on cpu (the kernels run on CUDA tensors, or on the CPU under TRITON_INTERPRET=1)" \
        in caplog.text


def test_the_kernel_path_refuses_what_torch_refuses_in_torchs_words_after_the_first_call_too(monkeypatch):
    from convtune.errors import ConfigError, InvalidConvolution
    from convtune.library import dispatch

    monkeypatch.setenv("CONVTUNE_UNPINNED", "kernel")  # the kernel runs: its checks are the subject
    dispatch.forget()
    g = torch.Generator().manual_seed(2)
    x, w = torch.rand(1, 4, 6, 6, generator=g), torch.rand(4, 4, 3, 3, generator=g)
    ours = convtune.conv2d(x, w, torch.ones(4), padding=1)  # the signature's first call: planned and cached
    assert torch.allclose(ours, F.conv2d(x, w, torch.ones(4), padding=1), rtol=1e-2, atol=1e-2)
    bad = [((x, w, torch.ones(n) if isinstance(n, int) else torch.ones(*n)), dict(padding=1),
            f"Given weight of size [4, 4, 3, 3], expected bias to be 1-dimensional with 4 elements, but got bias of "
            f"size {[n] if isinstance(n, int) else list(n)} instead") for n in (3, 5, (4, 1), (2, 2))]
    bad += [((x, w, None), dict(stride=0), "non-positive stride is not supported"),
            ((x, w, None), dict(padding=-1), "negative padding is not supported"),
            ((x, w, None), dict(dilation=0), "dilation should be greater than zero, but got [0, 0]"),
            ((x, w, None), dict(dilation=-1), "dilation should be greater than zero, but got [-1, -1]"),
            ((x, torch.rand(4, 4, 0, 3), None), {}, "kernel size should be greater than zero, but got kernel_height: "
                                                    "0 kernel_width: 3"),
            ((x, torch.rand(0, 4, 3, 3), None), {}, "Given groups=1, expected weight to be at least 1 at dimension 0, "
                                                    "but got weight of size [0, 4, 3, 3] instead")]
    for args, kwargs, words in bad:
        with pytest.raises(RuntimeError) as e:  # a RuntimeError, as torch's own
            convtune.conv2d(*args, **kwargs)
        assert isinstance(e.value, InvalidConvolution) and str(e.value) == words, (kwargs, str(e.value))
        with pytest.raises(RuntimeError):  # and torch refuses it too
            F.conv2d(*args, **kwargs)
    with pytest.raises(ConfigError, match=r"^precision='fp8' is not allowed: one of \['tf32', "):
        convtune.conv2d(x, w, precision="fp8")
    dispatch.forget()


def test_convert_with_an_example_input_leaves_the_models_state_as_it_was():
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Dropout(0.5)).train()
    net[2].eval()  # mixed modes are kept as they were, module by module
    before = {k: v.clone() for k, v in net.state_dict().items()}
    convtune.nn.convert(net, example_input=torch.rand(2, 3, 8, 8) * 10)
    after = net.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # running mean/var, num_batches_tracked
    assert [m.training for m in net] == [True, True, False]


def test_problems_lists_each_distinct_convolution_the_kernel_can_take_with_its_layers():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(8, 8, 3, padding=1, bias=False), torch.nn.Conv2d(8, 8, 3, padding=1, bias=False),
                                torch.nn.Conv2d(8, 8, 3, padding=1, groups=2), torch.nn.Conv2d(8, 4, 1, stride=2))
    model.train()
    found = convtune.nn.problems(model, torch.rand(2, 3, 10, 12))
    assert {k: layers for k, (_, layers) in found.items()} == {
        "n2-c3-h10-w12-k8-r3x3-s1x1-p1x1-d1x1-g1-bias-nchw-float32": ["0"],
        "n2-c8-h10-w12-k8-r3x3-s1x1-p1x1-d1x1-g1-nobias-nchw-float32": ["2", "3"],  # one problem, two layers
        "n2-c8-h10-w12-k4-r1x1-s2x2-p0x0-d1x1-g1-bias-nchw-float32": ["5"],  # groups=2 (layer 4) is left out
    }
    p, _ = found["n2-c8-h10-w12-k4-r1x1-s2x2-p0x0-d1x1-g1-bias-nchw-float32"]
    assert (p.name, p.out_h, p.out_w, p.init) == ("5", 5, 6, "randn") and model.training  # modes restored
    cl = convtune.nn.problems(model.to(memory_format=torch.channels_last),
                              torch.rand(2, 3, 10, 12).to(memory_format=torch.channels_last))
    assert sorted(cl) == sorted(k.replace("-nchw-", "-channels_last-") for k in found)  # what a promote must pin


def test_convert_can_leave_the_layers_that_run_torch_as_torch_nn_conv2d(monkeypatch):
    """leave_torch_layers, the default with an example input: the layers the kernel cannot take go back to
    torch.nn.Conv2d and the report says so; a plain layer seen on the CPU stays convtune's (the pins decide on the
    GPU, where the model may yet go), as does a layer the example does not call; asked for without an example
    input, it is refused in one line."""
    monkeypatch.delenv("TRITON_INTERPRET")  # CPU tensors as a user without a GPU has them: torch runs them
    net = Net()
    x = torch.rand(2, 3, 8, 8)
    before = net(x)
    report = convtune.nn.convert(net, example_input=x)
    runs = {s.name: s.runs for s in report}
    assert runs["stem"] == "torch: input on cpu (the kernels run on CUDA tensors, or on the CPU under TRITON_INTERPRET=1)"
    assert runs["blocks.0"] == "torch: groups=4 (the kernel takes groups=1); left as torch.nn.Conv2d"
    assert runs["blocks.3"] == "torch: padding_mode='reflect' (the kernel pads with zeros); left as torch.nn.Conv2d"
    assert [type(m) for m in (net.stem, net.blocks[0], net.blocks[2], net.blocks[3], net.unused)] == \
        [convtune.nn.Conv2d, torch.nn.Conv2d, torch.nn.Conv2d, torch.nn.Conv2d, convtune.nn.Conv2d]
    assert runs["unused"] == "not called by the example input"
    assert str(report).splitlines()[-1] == ("2 convolution(s) swapped and 3 left as torch.nn.Conv2d: 0 run convtune's "
                                            "kernel, 4 torch's, 1 not called by the example input")
    torch.testing.assert_close(net(x), before)
    with pytest.raises(ValueError, match="^leave_torch_layers needs an example_input: which layers run torch "
                                         "depends on the input$"):
        convtune.nn.convert(Net(), leave_torch_layers=True)
    with pytest.raises(ValueError, match=r"^leave_torch_layers='yes': give True, False or None \(on with an "
                                         r"example_input\)$"):
        convtune.nn.convert(Net(), example_input=x, leave_torch_layers="yes")
    assert [s.left for s in report] == [False, True, True, True, False]


def test_under_autocast_the_module_gives_torchs_dtype_and_values(monkeypatch):
    """Under torch.autocast(bfloat16) convtune.nn.Conv2d returned float32 where torch returns bfloat16;
    its kernels are fp32, so autocast's calls take torch's own path."""

    monkeypatch.setenv(dispatch.UNPINNED_ENV, "kernel")  # so that without autocast our kernel would run here
    torch.manual_seed(0)
    ref = torch.nn.Conv2d(3, 8, 3, padding=1)
    ours = convtune.nn.Conv2d(3, 8, 3, padding=1)
    ours.load_state_dict(ref.state_dict())
    x = torch.rand(2, 3, 9, 9)
    assert ours(x).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected, got = ref(x), ours(x)
    assert expected.dtype == got.dtype == torch.bfloat16 and torch.equal(got, expected)
