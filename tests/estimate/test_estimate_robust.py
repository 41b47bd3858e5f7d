"""The estimate on real and broken models: the largest-batch search from a line fitted through two traces
gives the exhaustive search's answer in few trials (and falls back, saying so, where memory is not a line
in the batch); a builder is estimated as the model it builds (RegNet, transformers from builders); inputs
the model cannot take, weights pinned to the CPU, frozen models and failing factories get one-line
answers from the command, which keeps every mode it could estimate."""
import json
import re

import pytest
import torch
import torchvision
from torch import nn

from nogradlab import batch, memory, ownmodel
from nogradlab.__main__ import main


# --- factories for the command (MODULE:FACTORY = test_estimate_robust:NAME) -----------------------

def small_cnn():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 10))


def frozen():
    m = small_cnn()
    for p in m.parameters():
        p.requires_grad_(False)
    return m


def returns_42():
    return 42


def exits_0():
    raise SystemExit(0)


def linear():
    return nn.Sequential(nn.Flatten(), nn.Linear(16, 4))


def pinned():
    return nn.Sequential(nn.Flatten(), nn.Linear(16, 4, device="cpu"))


def half():
    return nn.Sequential(nn.Flatten(), nn.Linear(16, 4)).half()


class _IntOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 4)

    def forward(self, x):
        return self.lin(x).argmax(-1)  # no floating-point output: no training step


def int_output():
    return _IntOut()


class _Tokens(nn.Module):
    """Token ids in, a tuple and a dict out."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.head = nn.Linear(16, 50)

    def forward(self, ids):
        h = self.emb(ids)
        return self.head(h), {"hidden": h, "pooled": h.mean(1)}


def tokens():
    return _Tokens()


class PatchViT(nn.Module):
    """The shape of most vision transformers people write: a Conv2d patch embedding, a position table,
    an nn.TransformerEncoder (norm first, no nested tensors) and a linear head."""

    def __init__(self, img=16, patch=4, d=16, heads=2, layers=2, classes=10):
        super().__init__()
        self.embed = nn.Conv2d(3, d, patch, stride=patch)
        self.pos = nn.Parameter(torch.zeros(1, (img // patch) ** 2, d))
        layer = nn.TransformerEncoderLayer(d, heads, 2 * d, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2) + self.pos
        return self.head(self.encoder(x).mean(1))


def encoder():
    return nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 6)


class _MoreOps(nn.Module):
    """Runs one more operation each time the batch doubles: its trace is not one line in the batch."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 64)

    def forward(self, x):
        y = self.lin(x)
        for _ in range(x.shape[0].bit_length()):
            y = y + 1
        return y


def _cli(argv, capsys):
    rc = main(["estimate", *argv, "--no-progress"])
    out = capsys.readouterr()
    return rc, out.out, out.err


# --- the search ------------------------------------------------------------------------------------

def _bracket_search(build, mode, budget, inputs, monkeypatch):
    """The search as it was before the fitted line: the bracket from batches 1 and 2, every trial traced.
    (Plain doubling from 1 can differ: the allocator's segments make "fits" not quite monotone in the
    batch, e.g. a small CNN under 64 MiB fits 4311, not 4312..5119, and 5120 again.)"""
    with monkeypatch.context() as m:
        m.setattr(batch, "_program", lambda *a, **k: "programs off (the test's bracket search)")
        m.setattr(batch, "_affine_find",
                  lambda probe, events_of, replay, budget, max_batch, hint=None, **_:
                  (batch._find(probe, budget, max_batch, "auto", hint), None))
        return batch.largest_batch(build, mode, budget, "cuda", inputs=inputs)


def _new_traces(monkeypatch):
    """The batches traced from now on (each a fake-tensor run of the step)."""
    seen, real = [], batch._estimate
    def counted(*a, **k):
        seen.append(a[3])
        return real(*a, **k)

    counted.cache_clear = real.cache_clear  # largest_batch forgets its caches after your own model's search
    monkeypatch.setattr(batch, "_estimate", counted)
    return seen


@pytest.mark.integration
@pytest.mark.parametrize("build, inputs, mode, budget", [
    (small_cnn, (3, 8, 8), "eval+no_grad", 64 << 20),
    (small_cnn, (3, 8, 8), "train", 128 << 20),
    (PatchViT, (3, 16, 16), "grad", 96 << 20),
    (PatchViT, (3, 16, 16), "train", 96 << 20),
])
def test_the_programs_search_gives_the_bracket_searchs_answer_from_few_traces(build, inputs, mode, budget,
                                                                             monkeypatch):
    batch._forget_estimates()
    traced = _new_traces(monkeypatch)
    fitted = batch.largest_batch(build, mode, budget, "cuda", inputs=inputs)
    monkeypatch.undo()
    bracket = _bracket_search(build, mode, budget, inputs, monkeypatch)
    assert fitted.batch == bracket.batch > 2 and not fitted.at_limit
    # the program: batches 16 and 64 fitted, 17 checked, then the small batches until one lies on the line
    assert set(traced) <= {16, 64, 17, 1, 2, 4, 8} and len(traced) <= 7
    note = next(n for n in fitted.notes if n.startswith(batch.SEARCH_NOTE))
    assert "replays of the step's allocation program" in note
    # every trial the replays decided is what a traced trial decides there
    own = ownmodel.Model(build, inputs)
    for b, ok, reserved in fitted.trials[-3:]:
        assert batch._modelled_fit(own, "", mode, b, "cuda:0", "native", 0, budget, None)[:2] == (ok, reserved)
    batch._forget_estimates()


def test_a_search_under_a_new_budget_costs_no_trace(monkeypatch):
    """The budget slider's second search replays the program the first search made: no new trace (at
    batches the program serves), and the answer a fresh search gives."""
    batch._forget_estimates()
    first = batch.largest_batch("unet", "eval+no_grad", 256 << 20, "cuda", scale="tiny", method="estimate")
    new = _new_traces(monkeypatch)
    second = batch.largest_batch("unet", "eval+no_grad", 384 << 20, "cuda", scale="tiny", method="estimate",
                                 hint=first.batch * 3 // 2)
    assert new == []
    note = next(n for n in second.notes if n.startswith(batch.SEARCH_NOTE))
    assert "replays of the step's allocation program" in note and "traced below" not in note
    monkeypatch.undo()
    batch._forget_estimates()
    fresh = batch.largest_batch("unet", "eval+no_grad", 384 << 20, "cuda", scale="tiny", method="estimate")
    assert second.batch == fresh.batch > first.batch


@pytest.mark.integration
def test_where_fitting_is_not_monotone_every_start_gives_a_verified_boundary():
    """ResNet-50 (tiny) under 384 MiB fits up to 208, not 209-213, and 214-216 again (the allocator's
    rounding, torch 2.14.1): a search from a hint may stop at the other boundary, as largest_batch's
    docstring says; each answer fits and the next batch does not."""
    batch._forget_estimates()
    fresh = batch.largest_batch("resnet50", "eval+no_grad", 384 << 20, "cuda", scale="tiny", method="estimate")
    hinted = batch.largest_batch("resnet50", "eval+no_grad", 384 << 20, "cuda", scale="tiny",
                                 method="estimate", hint=156)
    for r in (fresh, hinted):
        assert (r.batch, True) in [t[:2] for t in r.trials] and (r.batch + 1, False) in [t[:2] for t in r.trials]
    if fresh.batch != hinted.batch:  # two boundaries: fitting is not monotone between them
        lo, hi = sorted((fresh.batch, hinted.batch))
        fits = [batch._modelled_fit("resnet50", "tiny", "eval+no_grad", b, "cuda:0", "native", 0, 384 << 20,
                                    batch._fastpath_enabled())[0] for b in range(lo, hi + 2)]
        assert fits[0] and not fits[1] and fits[-2] and not fits[-1]
    batch._forget_estimates()


def test_memory_that_is_no_line_in_the_batch_falls_back_to_the_bracket_and_says_so(monkeypatch):
    fitted = batch.largest_batch(_MoreOps, "eval+no_grad", 40 << 20, "cuda", inputs=(64,))
    bracket = _bracket_search(_MoreOps, "eval+no_grad", 40 << 20, (64,), monkeypatch)
    assert fitted.batch == bracket.batch > 0
    assert any("bracket search" in n and "no allocation program serves every batch: the allocation traces of "
               "batches 16 and 64 are not the same operations" in n for n in fitted.notes)


def test_a_fitted_trace_is_exact_for_a_model_affine_in_the_batch():
    own = ownmodel.Model(small_cnn, (3, 8, 8))
    ev = {b: batch._estimate(own, "", "train", b, "cuda:0", "native", 0, None).events for b in (2, 3, 7)}
    line = batch._affine_trace(ev[2], 2, ev[3], 3)
    assert line is not None and line(7) == ev[7]
    assert batch._affine_trace(ev[2], 2, ev[3][:-1], 3) is None
    batch._forget_estimates()


@pytest.mark.integration
@pytest.mark.parametrize("build, inputs", [
    (lambda: torchvision.models.mobilenet_v3_small(weights=None, num_classes=10), (3, 32, 32)),
    (PatchViT, (3, 16, 16)), (tokens, ((12,), torch.int64))])
def test_the_searchs_lean_trace_is_the_full_estimates_trace(build, inputs):
    for kw in (dict(mode="grad"), dict(mode="eval+no_grad"), dict(mode="inference_mode"), dict(step="train")):
        full = memory.estimate(build, 3, "cuda", inputs=inputs, **kw)
        lean = memory.estimate(build, 3, "cuda", inputs=inputs, _trace_only=True, **kw)
        assert lean.events == full.events and lean.events
        assert (lean.allocated_bytes, lean.reserved_bytes, lean.baseline_bytes) == \
            (full.allocated_bytes, full.reserved_bytes, full.baseline_bytes)


# --- builders estimated as what they build ----------------------------------------------------------

def test_regnet_is_estimated_as_the_model_it_builds():
    build = lambda: torchvision.models.regnet_y_400mf(weights=None)  # noqa: E731 - widths from .tolist()
    real = build()
    n_real = sum(p.numel() for p in real.parameters())
    own = ownmodel.Model(build, (3, 32, 32))
    structure, _, how = own.structure()
    assert sum(p.numel() for p in structure.parameters()) == n_real  # not 34 k parameters
    a = memory.estimate(own, 2, "cuda", "eval+no_grad")
    b = memory.estimate(real.to("meta"), 2, "cuda", "eval+no_grad", inputs=(3, 32, 32))
    assert a.baseline_bytes == b.baseline_bytes >= 4 * n_real
    assert (a.allocated_bytes, a.reserved_bytes) == (b.allocated_bytes, b.reserved_bytes)
    assert any("weights on the meta device" in n for n in a.notes)


@pytest.mark.integration
@pytest.mark.parametrize("build, inputs", [(PatchViT, (3, 16, 16)), (encoder, (8, 16))])
def test_transformers_from_builders_estimate_every_mode_as_their_meta_build(build, inputs):
    with torch.device("meta"):
        meta = build()
    for kw in (dict(mode="grad"), dict(mode="eval+no_grad"), dict(mode="inference_mode"), dict(step="train")):
        a = memory.estimate(build, 2, "cuda", inputs=inputs, **kw)
        b = memory.estimate(meta, 2, "cuda", inputs=inputs, **kw)
        assert (a.reserved_bytes, a.baseline_bytes) == (b.reserved_bytes, b.baseline_bytes) and a.reserved_bytes > 0
        # the builder's own construction is part of the trace (nn.TransformerEncoder clones the layer it is
        # given: a process that built it held both for a moment); a given module's is not known
        assert a.allocated_bytes >= b.allocated_bytes


def test_inputs_the_model_cannot_take_are_refused():
    with pytest.raises(memory.InputMismatch, match="aten.addmm got float32 and int64"):
        memory.estimate(linear, 2, "cuda", "no_grad", inputs=((16,), torch.int64))
    with pytest.raises(memory.InputMismatch, match="float16 and float32"):
        memory.estimate(half, 2, "cpu", "no_grad", inputs=(16,))
    with pytest.raises(ValueError, match="puts its weights on cpu"):
        memory.estimate(pinned, 2, "cuda", "no_grad", inputs=(16,))
    # token ids into an embedding are what it takes; tuple and dict outputs are fine
    r = memory.estimate(tokens, 2, "cuda", step="train", inputs=((12,), torch.int64))
    assert r.reserved_bytes > 0


# --- the command -----------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, words", [
    (["test_estimate_robust:returns_42", "--input", "3x8x8"], "returned int, not an nn.Module"),
    (["test_estimate_robust:exits_0", "--input", "3x8x8"], "raised SystemExit(0)"),
    (["test_estimate_robust:linear", "--input", "16", "--dtype", "int64"], "aten.addmm got float32 and int64"),
    (["test_estimate_robust:pinned", "--input", "16"], "puts its weights on cpu"),
    (["test_estimate_robust:half", "--input", "16"], "give --dtype"),
    (["test_estimate_robust:linear", "--input", "16", "--batch", str(10 ** 12)], "2**30"),
    (["test_estimate_robust:linear", "--input", "3037000500x3037000500"], "beyond the byte arithmetic"),
])
def test_the_command_answers_a_broken_model_in_one_line_with_exit_2(argv, words, capsys):
    rc, out, err = _cli(argv + ["--gpu", "64MiB"], capsys)
    assert rc == 2 and words in err
    assert err.count("\n") == 1 and "Traceback" not in err + out


def test_a_frozen_model_gets_train_as_not_applicable_and_keeps_the_other_modes(tmp_path, capsys):
    path = tmp_path / "e.json"
    rc, out, err = _cli(["test_estimate_robust:frozen", "--input", "3x8x8", "--gpu", "64MiB",
                         "--json", str(path)], capsys)
    doc = json.loads(path.read_text())
    assert rc == 0 and set(doc["modes"]) == {"grad", "no_grad", "inference_mode"}
    assert doc["not_applicable"] == ["train"] and "train: not applicable" in out


def test_a_mode_that_fails_does_not_lose_the_others(tmp_path, capsys):
    path = tmp_path / "e.json"
    rc, out, err = _cli(["test_estimate_robust:int_output", "--input", "16", "--gpu", "64MiB",
                         "--modes", "no_grad,train", "--json", str(path)], capsys)
    doc = json.loads(path.read_text())
    assert rc == 2 and set(doc["modes"]) == {"no_grad"} and doc["modes"]["no_grad"]["largest_batch"] > 0
    assert "floating-point" in doc["skipped"]["train"] and "train: not estimated" in out


def test_token_inputs_and_tuple_outputs_and_a_table_whose_columns_never_touch(capsys):
    rc, out, err = _cli(["test_estimate_robust:tokens", "--input", "12", "--dtype", "int64", "--gpu", "256MiB",
                         "--modes", "no_grad,train", "--batch", "3"], capsys)
    assert rc == 0, err
    rows = [ln for ln in out.splitlines() if ln.startswith(("no_grad  ", "train  "))]
    assert len(rows) == 2
    for ln in rows:
        # four columns, each two spaces or more from the next: "34.00 MiB65536" cannot happen
        assert len(re.split(r"\s{2,}", ln.strip())) == 4, ln


def test_the_python_api_takes_a_factory_a_function_or_a_module_and_gives_the_commands_document():
    from nogradlab import estimate_cmd

    module = small_cnn()
    before = [p.clone() for p in module.parameters()]
    docs = [estimate_cmd.estimate(m, "3x8x8", gpu="128MiB", modes="no_grad")
            for m in ("test_estimate_robust:small_cnn", small_cnn, module)]
    assert len({d["modes"]["no_grad"]["largest_batch"] for d in docs}) == 1
    assert len({d["modes"]["no_grad"]["reserved_peak_bytes"] for d in docs}) == 1
    assert all(torch.equal(a, b) for a, b in zip(before, module.parameters()))  # left unchanged
    with pytest.raises(ValueError, match="MODULE:FACTORY"):
        estimate_cmd.estimate(42, "3x8x8")


# --- the user's own objects are never touched by an estimate ----------------------------------------------------

def test_an_estimate_leaves_the_objects_a_users_hooks_fill_alone():
    """A built module with forward hooks that fill the user's list and dict: the estimate runs on fake
    tensors, so its copy's hooks are not run (they would fill the user's objects with FakeTensors and the next
    real torch.cat would fail, "Mixing fake modes"); the report says so, naming them."""
    model = small_cnn()
    acts, by_name = [], {}
    model[0].register_forward_hook(lambda m, i, o: acts.append(o))
    model[1].register_forward_pre_hook(lambda m, i: by_name.__setitem__("relu", i[0]))
    r = memory.estimate(model, 4, "cpu", "grad", inputs=(3, 8, 8))
    assert acts == [] and by_name == {}
    assert any("hook" in n and "not run" in n for n in r.notes), r.notes
    assert len(model[0]._forward_hooks) == 1  # the user's model keeps its hooks
    model(torch.randn(2, 3, 8, 8))
    model(torch.randn(2, 3, 8, 8))
    assert torch.cat(acts).shape == (4, 8, 8, 8) and by_name["relu"].shape == (2, 8, 8, 8)
    plain = memory.estimate(small_cnn(), 4, "cpu", "grad", inputs=(3, 8, 8))
    assert r.peak_bytes == plain.peak_bytes and not any("hook" in n for n in plain.notes)


class _Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(8, 16, batch_first=True)
        self.fc = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc(self.rnn(x)[0][:, -1])


def recurrent():
    return _Recurrent()


def test_an_lstm_estimate_gives_no_fake_tensor_data_ptr_warning():
    """nn.LSTM reads its weights' data_ptr() when it is built and moved: on the estimate's fake tensors (the
    virtual CUDA device, as the command estimates) torch warned, and the warning reached the command's stderr."""
    import warnings

    for dev in ("cuda", "cpu"):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            memory.estimate(recurrent, 2, dev, "grad", inputs=(10, 8))
        assert not [w for w in seen if "data pointer of FakeTensor" in str(w.message)], dev


def pruned():
    m = small_cnn()
    torch.nn.utils.prune.l1_unstructured(m[3], "weight", amount=0.5)  # weight = weight_orig * mask, in a hook
    return m


def test_a_pruned_model_estimates_the_same_from_its_builder_and_built_and_as_measured():
    """Pruning keeps ``weight`` as a tensor computed from the weights (no graph leaf: deepcopy refused the
    builder's copy) and recomputes it in a forward pre-hook of torch's own, which the estimate keeps."""
    import torch.nn.utils.prune  # noqa: F401

    model = pruned()
    x = torch.randn(4, 3, 8, 8)
    real = memory.measure(lambda: model(x), "cpu", method="storage").peak_bytes
    built = memory.estimate(model, 4, "cpu", "grad", inputs=(3, 8, 8))
    from_builder = memory.estimate(pruned, 4, "cpu", "grad", inputs=(3, 8, 8))
    assert built.peak_bytes == from_builder.peak_bytes == real
    assert not any("hook" in n for n in built.notes + from_builder.notes)
