"""convtune.nn.graphed (library/graphed.py) on the CPU: which calls run the model as it is and why, what a graph's
signature holds, the state checked before each replay, the list of parameters and buffers made again after a
registration, and the copies of the outputs. Capture and replay are CUDA's: tests/gpu_scripts/graphed.py."""

import collections
import copy
import pickle

import pytest
import torch

import convtune
from convtune.library import dispatch, graphed
from tests.tiny_models import tiny_resnet, two_shapes


def model():
    return tiny_resnet().eval()


def test_calls_it_cannot_replay_run_the_model_and_say_why():
    m = model()
    g = convtune.nn.graphed(m)
    x = torch.rand(2, 3, 16, 16)
    with torch.no_grad():
        assert torch.equal(g(x), m(x)) and g.graphs == 0  # a CPU tensor: the model, eagerly
        assert "CUDA device" in g.why_eager((x,), {})
        assert "keyword" in g.why_eager((x,), {"y": x})
        assert "not a tensor" in g.why_eager((x, 3), {})
        assert g.why_eager((), {}) == "no arguments"
    assert "records gradients" in g.why_eager((x,), {})  # grad mode on, parameters that require one
    for p in m.parameters():
        p.requires_grad_(False)
    assert "CUDA device" in g.why_eager((x,), {})  # grad mode on, nothing requires one: no gradient recorded
    assert "records gradients" in g.why_eager((x.requires_grad_(),), {})
    m.train()
    with torch.no_grad():
        assert "training mode" in g.why_eager((x,), {})
    m.eval()
    m.layer = torch.nn.Dropout().train()  # one module in training mode is enough
    with torch.no_grad():
        assert "training mode" in g.why_eager((x,), {})


def test_the_arguments_are_checked():
    with pytest.raises(TypeError, match="torch.nn.Module"):
        convtune.nn.graphed(lambda x: x)
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="warmup"):
            convtune.nn.graphed(model(), warmup=bad)
        with pytest.raises(ValueError, match="max_graphs"):
            convtune.nn.graphed(model(), max_graphs=bad)


def test_a_signature_holds_shapes_strides_dtype_autocast_tf32_and_inference_mode():
    x = torch.rand(2, 3, 8, 8)
    base = graphed.signature((x,))
    assert graphed.signature((torch.rand(2, 3, 8, 8),)) == base
    assert graphed.signature((torch.rand(3, 3, 8, 8),)) != base
    assert graphed.signature((x.to(memory_format=torch.channels_last),)) != base
    assert graphed.signature((x.double(),)) != base
    assert graphed.signature((x, x)) != base
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert graphed.signature((x,)) != base
    with torch.inference_mode():
        assert graphed.signature((x,)) != base
    before = torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = not before
        assert graphed.signature((x,)) != base
    finally:
        torch.backends.cudnn.allow_tf32 = before


def test_the_state_moves_with_an_in_place_update_new_data_and_new_pins():
    m = model()
    g = convtune.nn.graphed(m)
    tensors = g._lists()[1]
    assert len(tensors) == len(list(m.parameters())) + len(list(m.buffers()))
    state = graphed._state(tensors)
    assert graphed._state(tensors) == state
    with torch.no_grad():
        next(m.parameters()).mul_(2)  # an optimiser step
    moved = graphed._state(tensors)
    assert moved != state
    next(m.buffers()).data = torch.zeros_like(next(m.buffers()))  # as Module.to moves a tensor
    assert graphed._state(tensors) != moved
    moved = graphed._state(tensors)
    dispatch.forget()
    assert graphed._state(tensors) != moved


def test_registering_a_parameter_buffer_or_module_lists_them_again():
    m = model()
    g = convtune.nn.graphed(m)
    modules, tensors = g._lists()
    assert g._lists()[1] is tensors  # kept while nothing registers
    conv = next(c for c in m.modules() if isinstance(c, torch.nn.Conv2d))
    conv.weight = torch.nn.Parameter(torch.rand_like(conv.weight))
    now = g._lists()[1]
    assert any(t is conv.weight for t in now) and not any(t is conv.weight for t in tensors)
    bn = next(b for b in m.modules() if isinstance(b, torch.nn.BatchNorm2d))
    bn.running_mean = torch.ones_like(bn.running_mean)
    assert any(t is bn.running_mean for t in g._lists()[1])
    m.extra = torch.nn.Linear(2, 2)
    modules, tensors = g._lists()
    assert m.extra in modules and any(t is m.extra.weight for t in tensors)


def test_the_outputs_are_copies_in_the_models_structure():
    Pair = collections.namedtuple("Pair", "a b")
    t = torch.rand(3)
    out = graphed._copied([Pair(t, {"k": (t, None)}), 7])
    assert isinstance(out, list) and isinstance(out[0], Pair) and out[1] == 7 and out[0].b["k"][1] is None
    for copied in (out[0].a, out[0].b["k"][0]):
        assert torch.equal(copied, t) and copied.data_ptr() != t.data_ptr()


def test_a_copy_keeps_the_model_and_the_settings_and_captures_its_own_graphs():
    class Uncopyable:  # as a CUDA graph: copy.deepcopy and pickle refuse it
        def __reduce_ex__(self, protocol):
            raise TypeError("cannot pickle a CUDA graph")

    m = two_shapes().eval()  # classes pickle can name
    g = convtune.nn.graphed(m, warmup=3, max_graphs=2)
    g._graphs[("signature",)] = Uncopyable()
    g._failed[("other",)] = "why"
    x = torch.rand(2, 3, 8, 8)
    for other in (copy.deepcopy(g), pickle.loads(pickle.dumps(g))):
        assert (other.warmup, other.max_graphs, other.graphs, other._failed) == (3, 2, 0, {})
        assert other.module is not m and g.graphs == 1
        with torch.no_grad():
            assert torch.equal(other(x), m(x))
        assert other.state_dict().keys() == g.state_dict().keys()
