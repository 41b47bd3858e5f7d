"""Your own model (nogradlab.ownmodel): the estimate of four models used nowhere else equals
memory.measure on the CPU to the byte at two batches; the built-in workloads get exactly what they
got before; bad input and models fake tensors cannot run get clear errors; a given module is never
changed and nothing keeps it alive."""
import gc
import json
import weakref

import pytest
import torch
import torchvision
from torch import nn

from nogradlab import batch, memory, modes, ownmodel
from nogradlab.estimate import fake

import builtin_fingerprint


# --- four models used nowhere else in the project, at small sizes ------------------------------

class TinyDecoder(nn.Module):
    """A decoder-only language model from nn.TransformerDecoderLayer: token and position
    embeddings, causal self-attention (the layer's cross-attention reads the embedded sequence
    itself, causally masked too: there is no encoder), a vocabulary head."""

    def __init__(self, vocab=97, d=32, heads=4, layers=2, seq=16, ffn=None, dropout=0.1, bias=True):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(1, seq, d))
        self.layers = nn.ModuleList(nn.TransformerDecoderLayer(d, heads, ffn or 4 * d, dropout=dropout,
                                                               batch_first=True)
                                    for _ in range(layers))
        self.head = nn.Linear(d, vocab, bias=bias)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.tok(ids) + self.pos[:, :t]
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=ids.device)
        mem = x
        for layer in self.layers:
            x = layer(x, mem, tgt_mask=mask, memory_mask=mask, tgt_is_causal=True, memory_is_causal=True)
        return self.head(x)


MODELS = {
    "mobilenet_v3_small": (lambda: torchvision.models.mobilenet_v3_small(weights=None, num_classes=10),
                           (3, 32, 32)),
    "lraspp_mobilenet_v3_large": (lambda: torchvision.models.segmentation.lraspp_mobilenet_v3_large(
        weights=None, weights_backbone=None, num_classes=3), (3, 32, 32)),
    "vit_small": (lambda: torchvision.models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=10),
                  (3, 32, 32)),
    "decoder_only": (TinyDecoder, ((16,), torch.int64)),
}
STEPS = ("eval+grad", "eval+no_grad", "train")


def measured(own: ownmodel.Model, b: int, step: str) -> memory.MemoryReport:
    """memory.measure of the same step on real CPU tensors (the fused transformer path off, as the
    estimate runs it), with the entry bytes the estimate's baseline counts."""
    torch.manual_seed(0)
    model = own.build("cpu")
    x, y = own.make_input(b, "cpu"), own.make_target(b, "cpu")
    if step == "train":
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=True)

        def fn():
            return memory.train_step(model, x, y, own.loss, opt)
    else:
        def fn():
            with modes.setting(step, model=model):
                return ownmodel.forward(model, x)
    with memory.fused_paths_off():
        rep = memory.measure(fn, "cpu")
    rep.baseline_bytes = memory.resident_bytes(model, ownmodel.model_tensors((x, y)))
    return rep


@pytest.mark.integration
@pytest.mark.parametrize("name", MODELS)
def test_cpu_estimate_equals_measure_to_the_byte(name):
    build, inputs = MODELS[name]
    own = ownmodel.Model(build, inputs)
    rows = []
    for b in (2, 3):
        for step in STEPS:
            kw = dict(step="train") if step == "train" else {}
            est = memory.estimate(own, b, "cpu", step if step != "train" else "no_grad", **kw)
            real = measured(own, b, step)
            for f in ("peak_bytes", "saved_bytes", "retained_bytes", "baseline_bytes"):
                rows.append((b, step, f, getattr(est, f), getattr(real, f)))
    wrong = [r for r in rows if r[3] != r[4]]
    assert not wrong, wrong
    grad = {b: p for b, s, f, p, _ in rows if s == "eval+grad" and f == "saved_bytes"}
    assert 0 < grad[2] < grad[3]  # what autograd saves grows with the batch: a real comparison


@pytest.mark.integration
def test_a_given_module_is_estimated_as_its_builder_and_left_unchanged():
    build, inputs = MODELS["mobilenet_v3_small"]
    module = build()
    module.eval()
    before = {n: (p, p.clone()) for n, p in module.named_parameters()}
    a = memory.estimate(module, 2, "cpu", step="train", inputs=inputs)
    module.train()
    b = memory.estimate(build, 2, "cpu", step="train", inputs=inputs)
    assert (a.peak_bytes, a.saved_bytes, a.baseline_bytes) == (b.peak_bytes, b.saved_bytes, b.baseline_bytes)
    for n, p in module.named_parameters():
        assert p is before[n][0] and p.grad is None and torch.equal(p, before[n][1])
        assert type(p) is nn.Parameter  # not replaced by a fake tensor


def test_a_module_on_the_meta_device_and_a_huge_builder_allocate_nothing():
    with torch.device("meta"):
        meta = torchvision.models.mobilenet_v3_small(weights=None, num_classes=10)
    cpu = memory.estimate(MODELS["mobilenet_v3_small"][0], 2, "cpu", "no_grad", inputs=(3, 64, 64))
    r = memory.estimate(meta, 2, "cpu", "no_grad", inputs=(3, 64, 64))
    assert (r.peak_bytes, r.baseline_bytes) == (cpu.peak_bytes, cpu.baseline_bytes)
    # 60 000 x 60 000 float32 weights are 14.4 GB: built fake, so estimated on any machine
    big = memory.estimate(lambda: nn.Linear(60_000, 60_000), 4, "cuda", "no_grad", inputs=(60_000,))
    assert big.baseline_bytes >= 60_000 * 60_000 * 4 and big.reserved_bytes >= big.baseline_bytes


def test_several_inputs_a_loss_and_a_target():
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(8, 4), nn.Linear(6, 4)

        def forward(self, x, y, scale=1.0):
            return self.a(x) * scale + self.b(y)

    own = ownmodel.Model(Two, lambda b: (torch.randn(b, 8), torch.randn(b, 6)),
                         # not F.mse_loss: its CPU kernel returns the scalar in a storage of the
                         # elementwise loss (batch x 4 floats), its fake kernel in 4 bytes
                         loss_fn=lambda out, t: (out - t).pow(2).mean(),
                         target_fn=lambda b: torch.zeros(b, 4))
    r = memory.estimate(own, 5, "cpu", step="train")
    real = measured(own, 5, "train")
    assert r.peak_bytes == real.peak_bytes and r.saved_bytes == real.saved_bytes > 0
    # inputs and the target are resident at entry: 5 x (8 + 6 + 4) float32
    assert r.baseline_bytes == memory.resident_bytes(own.build("cpu")) + 5 * 18 * 4
    kw = memory.estimate(Two, 3, "cpu", "grad", inputs=lambda b: {"x": torch.ones(b, 8), "y": torch.ones(b, 6),
                                                                   "scale": 2.0})
    assert kw.saved_bytes > 0


def test_largest_batch_of_your_own_model_and_nothing_keeps_it_alive():
    build, inputs = MODELS["vit_small"]
    module = build()
    ref = weakref.ref(module)
    r = batch.largest_batch(module, "eval+no_grad", 8 << 20, "cpu", inputs=inputs)
    fits = memory.estimate(module, r.batch, "cpu", "eval+no_grad", inputs=inputs).total_peak_bytes
    over = memory.estimate(module, r.batch + 1, "cpu", "eval+no_grad", inputs=inputs).total_peak_bytes
    assert fits <= 8 << 20 < over and not r.at_limit
    assert r.workload == "VisionTransformer" and "AT THE SEARCH LIMIT" not in str(r)
    capped = batch.largest_batch(build, "eval+no_grad", 256 << 20, "cuda", inputs=inputs, max_batch=4)
    assert capped.batch == 4 and capped.at_limit and "(search limit)" in str(capped)
    del module, r
    gc.collect()
    assert ref() is None  # the estimate caches let go of it


def test_generic_path_gives_the_built_in_numbers():
    from nogradlab import workloads

    wl = workloads.get("mlp", "tiny")
    # built on the device the estimate sets (wl.build() alone would pin the weights to the CPU: refused)
    own = ownmodel.Model(lambda: wl.build(torch.get_default_device()), wl.input_shape, loss_fn=wl.loss,
                         target_fn=lambda b: wl.make_target(b))
    for kw in (dict(mode="grad"), dict(step="train")):
        a, b = memory.estimate("mlp", 4, "cuda", **kw), memory.estimate(own, 4, "cuda", **kw)
        assert (a.peak_bytes, a.saved_bytes, a.allocated_bytes, a.reserved_bytes) == \
               (b.peak_bytes, b.saved_bytes, b.allocated_bytes, b.reserved_bytes)


@pytest.mark.integration
@pytest.mark.parametrize("name", ["mlp", "transformer_base", "unet", "resnet50"])
def test_built_in_workloads_get_exactly_what_they_got_before(name):
    want = json.loads(builtin_fingerprint.PATH.read_text())
    if want["torch"] != torch.__version__.split("+")[0]:
        pytest.skip(f"numbers recorded with torch {want['torch']}; rerun tests/builtin_fingerprint.py")
    got = builtin_fingerprint.fingerprint(name)
    assert got["estimates"] == {k: v for k, v in want["estimates"].items() if k.startswith(name + " ")}
    assert got["searches"] == {k: v for k, v in want["searches"].items() if k.startswith(name + " ")}


# --- errors ------------------------------------------------------------------------------------

def _never():
    raise AssertionError("built before the arguments were checked")


@pytest.mark.parametrize("kwargs, words", [
    (dict(workload=_never), "needs inputs="),
    (dict(workload=_never, inputs="3x0x4"), "positive integer"),
    (dict(workload=_never, inputs="3 by 4"), "joined by 'x'"),
    (dict(workload=_never, inputs=((3, 4), "float8")), "allowed: float32"),
    (dict(workload="mlp", inputs=(3, 4)), "built-in workload"),
    (dict(workload=42, inputs=(3, 4)), "allowed: resnet50"),
    (dict(workload=_never, inputs=(3, 4), mode="fast"), "allowed"),
])
def test_bad_input_is_refused_before_any_work(kwargs, words):
    with pytest.raises(ValueError, match=words):
        memory.estimate(batch=2, **kwargs)
    if kwargs.get("mode") is None:
        with pytest.raises(ValueError, match=words):
            batch.largest_batch(kwargs.pop("workload"), "train", 1 << 30, "cuda", **kwargs)


class _Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        return y * 2 if y.sum() > 0 else y


class _Nonzero(_Branchy):
    def forward(self, x):
        return self.lin(x)[x > 0]


@pytest.mark.parametrize("model, op, words", [
    (_Branchy, "aten._local_scalar_dense", "control flow"),
    (_Nonzero, "aten.nonzero", "shape depends on the values"),
])
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_data_dependent_models_get_an_error_naming_the_op(model, op, words, device):
    with pytest.raises(memory.NotEstimable, match=words) as e:
        memory.estimate(model, 2, device, "no_grad", inputs=(4,))
    assert e.value.op.startswith(op) and op in str(e.value) and "memory.measure" in str(e.value)


def test_an_op_without_a_fake_kernel_gets_an_error_naming_it():
    lib = torch.library.Library("nogradlab_test", "DEF")  # noqa: F841 - alive for the test
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CPU")

    class Custom(_Branchy):
        def forward(self, x):
            return torch.ops.nogradlab_test.twice(self.lin(x))

    x = torch.ones(2, 4)
    assert torch.equal(Custom()(x) * 0, x * 0)  # it runs on real tensors
    with pytest.raises(memory.NotEstimable, match="no fake") as e:
        memory.estimate(Custom, 2, "cpu", "no_grad", inputs=(4,))
    assert "nogradlab_test.twice" in str(e.value) and "register_fake" in str(e.value)


# --- the command ---------------------------------------------------------------------------------

def small_cnn():
    """A factory for the command's tests (MODULE:FACTORY = test_own_model:small_cnn)."""
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 10))


@pytest.mark.parametrize("argv, words", [
    (["torchvision.models:resnet101", "--input", "3x224"], None),  # fine: only the rest is bad below
    (["torchvision.models:nope", "--input", "3x8x8"], "has no 'nope'"),
    (["no_such_module_xyz:f", "--input", "3x8x8"], "cannot import"),
    (["resnet101", "--input", "3x8x8"], "MODULE:FACTORY"),
    (["test_own_model:small_cnn", "--input", "3x-8"], "joined by 'x'"),
    (["test_own_model:small_cnn", "--input", "3x8x8", "--gpu", "24 parsecs"], "units"),
    (["test_own_model:small_cnn", "--input", "3x8x8", "--gpu", "24"], "has no unit and would mean 24 bytes"),
    (["test_own_model:small_cnn", "--input", "3x8x8", "--gpu", "1e9TiB"], "units"),
    (["test_own_model:small_cnn", "--input", "3x8x8", "--gpu", "99999999TiB"], "under"),
    (["test_own_model:small_cnn", "--input", "3x8x8", "--modes", "grad,fast"], "allowed: grad, no_grad"),
    (["test_own_model:small_cnn", "--input", "3x8x8", "--allocator", "slab"], "allowed: native"),
    (["test_own_model:small_cnn", "--input", "3x8x8", "--dtype", "float8"], "allowed: float32"),
    (["test_own_model:small_cnn", "--input", "3x8x8", "--batch", "0"], "positive"),
])
def test_estimate_command_refuses_bad_input_before_any_work(argv, words, capsys, monkeypatch):
    from nogradlab.__main__ import main

    if words is None:
        argv = argv + ["--gpu", "0GiB"]
        words = "positive"
    monkeypatch.setattr(fake, "estimate", _never)
    assert main(["estimate", *argv, "--no-progress"]) == 2
    assert words in capsys.readouterr().err


def test_estimate_command_writes_json_and_never_overwrites_a_foreign_file(tmp_path, capsys):
    from nogradlab.__main__ import main

    out = tmp_path / "est.json"
    argv = ["estimate", "test_own_model:small_cnn", "--input", "3x8x8", "--gpu", "128MiB", "--batch", "2",
            "--modes", "grad,no_grad,train", "--no-progress", "--json", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert set(doc["modes"]) == {"grad", "no_grad", "train"}
    for e in doc["modes"].values():
        assert set(e) >= {"allocated_peak_bytes", "reserved_peak_bytes", "largest_batch", "at_limit"}
        assert e["reserved_peak_bytes"] >= e["allocated_peak_bytes"] > 0 and e["at_limit"] is False
        want = batch.largest_batch(small_cnn, e["setting"], 128 << 20, "cuda", inputs=(3, 8, 8))
        assert e["largest_batch"] == want.batch > 0
    est = memory.estimate(small_cnn, 2, "cuda", "eval+no_grad", inputs=(3, 8, 8))
    assert doc["modes"]["no_grad"]["reserved_peak_bytes"] == est.reserved_bytes
    f = doc["no_grad_factor"]
    assert f["over_grad"] == round(doc["modes"]["no_grad"]["largest_batch"] / doc["modes"]["grad"]["largest_batch"], 3)
    assert f"no_grad fits {f['over_grad']:.2f}\u00d7 the batch of grad" in printed
    assert main(argv) == 0  # its own earlier file may be replaced
    mine = tmp_path / "mine.json"
    mine.write_text('{"meta": {}, "modes": {}}')
    assert main(argv[:-1] + [str(mine)]) == 2
    assert "not a JSON file of estimate --json written by nogradlab" in capsys.readouterr().err
    assert mine.read_text() == '{"meta": {}, "modes": {}}'


def test_estimate_json_onto_a_deeply_nested_file_or_a_folder_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    from nogradlab.__main__ import main
    from nogradlab.run import yourmodel

    monkeypatch.setattr(fake, "estimate", _never)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000 + "]" * 100000)  # json.loads: RecursionError
    argv = ["estimate", "test_own_model:small_cnn", "--input", "3x8x8", "--gpu", "64MiB", "--no-progress", "--json"]
    assert main(argv + [str(deep)]) == 2
    err = capsys.readouterr().err
    assert "not a JSON file of estimate --json" in err and "Traceback" not in err
    assert main(argv + [str(tmp_path)]) == 2
    assert f"e.g. {str(tmp_path / 'estimate.json')!r}" in capsys.readouterr().err
    with pytest.raises(ValueError, match="estimate.json"):
        yourmodel.check("test_own_model:small_cnn", "3x8x8", save_json=tmp_path)
