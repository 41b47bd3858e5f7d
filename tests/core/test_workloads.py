"""Tests for nogradlab.workloads: every workload builds at the tiny scale, runs forward and
backward, validates its arguments, and builds inside FakeTensorMode for a CUDA device that this
machine need not have."""
import math

import pytest
import torch

from nogradlab import workloads

NAMES = ("resnet50", "transformer_base", "unet", "mlp")


def expected_output_shape(wl, batch):
    p = wl.params
    if wl.name in ("resnet50", "mlp"):
        return (batch, p["num_classes"])
    if wl.name == "unet":
        return (batch, 1, p["image_size"], p["image_size"])
    return (batch, p["seq_len"], p["d_model"])


def test_names_and_scales():
    assert workloads.names() == NAMES
    assert workloads.SCALES == ("tiny", "small", "full")


@pytest.mark.parametrize("scale", workloads.SCALES)
@pytest.mark.parametrize("name", NAMES)
def test_metadata_without_building(name, scale):
    wl = workloads.get(name, scale)
    assert (wl.name, wl.scale) == (name, scale)
    assert isinstance(wl.description, str) and wl.description and "\n" not in wl.description
    assert isinstance(wl.default_batch, int) and wl.default_batch > 0
    assert isinstance(wl.input_shape, tuple) and all(isinstance(d, int) for d in wl.input_shape)
    assert isinstance(wl.params, dict) and wl.params
    if name in ("resnet50", "unet"):
        assert wl.input_shape == (3, wl.params["image_size"], wl.params["image_size"])
    if name == "unet":
        assert wl.params["image_size"] % 2 ** wl.params["depth"] == 0
        assert "not recurrent" in wl.description
    if name == "transformer_base":
        assert wl.input_shape == (wl.params["seq_len"], wl.params["d_model"])
        assert wl.params["d_model"] % wl.params["nhead"] == 0
    if name == "mlp":
        assert math.prod(wl.input_shape) == wl.params["in_features"]


def test_sizes_match_the_article():
    assert workloads.get("resnet50", "full").params["image_size"] == 224
    assert workloads.get("resnet50", "tiny").default_batch == 2
    full_tf = workloads.get("transformer_base", "full").params
    assert (full_tf["num_layers"], full_tf["d_model"], full_tf["nhead"],
            full_tf["dim_feedforward"], full_tf["seq_len"]) == (12, 768, 12, 3072, 512)
    assert workloads.get("unet", "full").params["base"] == 64
    assert workloads.get("mlp", "full").params["hidden"] == 8192
    for name in NAMES:
        batches = [workloads.get(name, s).default_batch for s in workloads.SCALES]
        assert batches == sorted(batches)


@pytest.mark.integration
@pytest.mark.parametrize("name", NAMES)
def test_tiny_forward_backward(name):
    wl = workloads.get(name, "tiny")
    torch.manual_seed(0)
    model = wl.build("cpu")
    assert model.training
    batch = wl.default_batch
    x = wl.make_input(batch)
    assert x.shape == (batch, *wl.input_shape) and x.dtype == torch.float32
    out = model(x)
    assert out.shape == expected_output_shape(wl, batch)
    loss = wl.loss(out, wl.make_target(batch))
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    for pname, param in model.named_parameters():
        assert param.grad is not None, pname
        assert torch.isfinite(param.grad).all(), pname


def test_targets():
    mlp = workloads.get("mlp")
    t = mlp.make_target(5)
    assert t.shape == (5,) and t.dtype == torch.int64
    assert 0 <= int(t.min()) and int(t.max()) < mlp.params["num_classes"]
    unet = workloads.get("unet")
    mask = unet.make_target(2)
    assert mask.shape == expected_output_shape(unet, 2) and mask.is_floating_point()
    assert set(mask.unique().tolist()) <= {0.0, 1.0}
    tf = workloads.get("transformer_base")
    assert tf.make_target(3).shape == expected_output_shape(tf, 3)


@pytest.mark.parametrize("name", ["transformer_base", "unet", "mlp"])
def test_build_is_fresh_and_deterministic(name):
    wl = workloads.get(name)
    torch.manual_seed(123)
    a = wl.build()
    torch.manual_seed(123)
    b = wl.build()
    assert a is not b
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert next(a.parameters()).data_ptr() != next(b.parameters()).data_ptr()


def test_transformer_layers_are_independent():
    model = workloads.get("transformer_base").build()
    assert isinstance(model, torch.nn.TransformerEncoder)
    assert model.num_layers == len(model.layers) == 2
    assert not torch.equal(model.layers[0].linear1.weight, model.layers[1].linear1.weight)


def test_build_dtype():
    wl = workloads.get("mlp")
    before = torch.get_default_dtype()
    model = wl.build(dtype=torch.bfloat16)
    assert torch.get_default_dtype() == before
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    out = model(wl.make_input(4, dtype=torch.bfloat16))
    assert out.dtype == torch.bfloat16
    loss = wl.loss(out, wl.make_target(4))
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    with pytest.raises(ValueError, match="floating-point"):
        wl.build(dtype=torch.int64)
    assert torch.get_default_dtype() == before


def test_unknown_name():
    with pytest.raises(ValueError) as info:
        workloads.get("resnet18")
    msg = str(info.value)
    assert "resnet18" in msg and all(n in msg for n in NAMES)


@pytest.mark.parametrize("scale", ["huge", "auto", "Tiny", None])
def test_unknown_scale(scale):
    with pytest.raises(ValueError) as info:
        workloads.get("mlp", scale)
    assert all(s in str(info.value) for s in workloads.SCALES)


@pytest.mark.parametrize("batch", [0, -1, 2.5, True, "2", None])
@pytest.mark.parametrize("method", ["make_input", "make_target"])
def test_bad_batch(method, batch):
    wl = workloads.get("mlp")
    with pytest.raises(ValueError, match="batch must be a positive integer, got"):
        getattr(wl, method)(batch)


def test_resolve_scale():
    assert workloads.resolve_scale("auto", torch.device("cpu")) == "tiny"
    assert workloads.resolve_scale("auto", "cpu") == "tiny"
    assert workloads.resolve_scale("auto", "mps") == "tiny"
    assert workloads.resolve_scale("auto", torch.device("cuda", 0)) == "full"
    for scale in workloads.SCALES:
        assert workloads.resolve_scale(scale, "cpu") == scale
        assert workloads.resolve_scale(scale, "cuda") == scale
    with pytest.raises(ValueError, match="auto, tiny, small, full"):
        workloads.resolve_scale("bogus", "cpu")


# --- FakeTensorMode: shapes and devices for a CUDA run, without a GPU --------------------------

def _fake_cuda_mode():
    """A FakeTensorMode if this torch can create and run fake CUDA modules; else skip."""
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode
        with FakeTensorMode():
            with torch.device("cuda"):
                probe = torch.nn.Linear(2, 2)
            probe(torch.zeros(1, 2, device="cuda"))
    except Exception as exc:  # pragma: no cover - depends on the torch build
        pytest.skip(f"this torch cannot run modules on fake CUDA tensors: {exc!r}")
    return FakeTensorMode


@pytest.mark.parametrize("name", NAMES)
def test_fake_cuda_forward(name):
    FakeTensorMode = _fake_cuda_mode()
    was_initialized = torch.cuda.is_initialized()
    wl = workloads.get(name, "tiny")
    batch = wl.default_batch
    with FakeTensorMode():
        model = wl.build("cuda")
        assert all(p.device.type == "cuda" for p in model.parameters())
        x = wl.make_input(batch, "cuda")
        out = model(x)  # train mode, grad enabled
        assert out.device.type == "cuda" and out.requires_grad
        assert out.shape == expected_output_shape(wl, batch)
        loss = wl.loss(out, wl.make_target(batch, "cuda"))
        assert loss.dim() == 0
        model.eval()
        with torch.no_grad():
            out = model(x)
        assert out.shape == expected_output_shape(wl, batch) and not out.requires_grad
    assert torch.cuda.is_initialized() == was_initialized
