"""Notebook 10 (your model) and its instrument, nogradlab.yourmodel: the request is checked before any work;
what one forward saves is counted per layer, each storage once, weights left out; the L x L attention matrix is
seen where it is saved and not elsewhere; the estimate document is the command's own (`nogradlab estimate
--json`), also through the loop used for several inputs; an operator fake tensors cannot run is named. The
notebook runs through papermill on models it does not name (token inputs with a tuple output, two inputs with a
dict output, a torchvision model, a custom operator without a fake kernel), and its saved document agrees with
the command's on the same model.

The test models live in tests/yourmodel_factories.py (importable by the notebook's kernel through PYTHONPATH)."""
from __future__ import annotations

import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import yourmodel_factories as F
from nogradlab import memory, yourmodel
from nogradlab.exercises import nb10

REPO = Path(__file__).resolve().parents[2]
TESTS = Path(__file__).resolve().parents[1]  # tests/, where yourmodel_factories.py lives
NB = REPO / "notebooks" / "10_your_model.ipynb"


# --------------------------------------------------------------------------------------------
# the request


@pytest.mark.parametrize("kwargs, words", [
    (dict(model="torchvision.models", input="3x8x8"), "MODULE:FACTORY"),
    (dict(model="torchvision.models:no_such_model", input="3x8x8"), "has no"),
    (dict(model="yourmodel_factories:two_inputs", input="3x0x8"), "positive integer"),
    (dict(model="yourmodel_factories:two_inputs", input="3x8x8,"), "several joined by commas"),
    (dict(model="yourmodel_factories:two_inputs", input="3x8x8", dtype="float8"), "allowed: float32"),
    (dict(model="yourmodel_factories:two_inputs", input="3x8x8,8", dtype="float32,int64,bool"), "one per input"),
    (dict(model="yourmodel_factories:two_inputs", input="3x8x8", gpu="24 parsecs"), "units: B, KiB"),
    (dict(model="yourmodel_factories:two_inputs", input="3x8x8", save_json=12), "file name"),
])
def test_check_refuses_bad_parameters_naming_what_is_allowed(kwargs, words):
    with pytest.raises(ValueError, match=words):
        yourmodel.check(**kwargs)


def test_check_never_targets_a_file_it_did_not_write(tmp_path):
    theirs = tmp_path / "notes.json"
    theirs.write_text(json.dumps({"mine": True}))
    with pytest.raises(ValueError, match="nothing was overwritten"):
        yourmodel.check("yourmodel_factories:tiny_encoder", "16", "int64", save_json=str(theirs))
    with pytest.raises(ValueError, match="is a folder"):
        yourmodel.check("yourmodel_factories:tiny_encoder", "16", "int64", save_json=str(tmp_path))
    assert json.loads(theirs.read_text()) == {"mine": True}


def test_inputs_as_the_command_takes_them_token_ids_and_several():
    tokens = yourmodel.check("yourmodel_factories:tiny_encoder", 16, "int64")  # papermill's -p input 16: an int
    x = tokens.sample(3)
    assert x.shape == (3, 16) and x.dtype == torch.int64 and not x.any()  # zeros: valid token ids
    assert tokens.request is not None and tokens.request.shape == (16,)
    two = yourmodel.check("yourmodel_factories:two_inputs", "3x16x16,8", "float32")
    img, feats = two.sample(2)
    assert img.shape == (2, 3, 16, 16) and feats.shape == (2, 8) and two.request is None
    out = two.build()(*two.sample(2))
    assert set(out) == {"logits", "aux"}
    mixed = yourmodel.check("yourmodel_factories:two_inputs", "3x16x16,8", "float64,int64")
    assert [t.dtype for t in mixed.sample(1)] == [torch.float64, torch.int64]
    assert next(mixed.build().parameters()).dtype == torch.float64  # a floating input dtype is the model's
    assert torch.get_default_dtype() == torch.float32


# --------------------------------------------------------------------------------------------
# what one forward saves


def _conv_net():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(8 * 4 * 4, 10))


@pytest.mark.parametrize("make, x", [
    (_conv_net, torch.randn(2, 3, 8, 8)),
    (F.two_inputs, (torch.randn(2, 3, 16, 16), torch.randn(2, 8))),
])
def test_saved_by_layer_agrees_with_memory_measure_and_sums_its_layers(make, x):
    torch.manual_seed(0)
    model = make()
    saved = yourmodel.saved_by_layer(model, x)
    args = x if isinstance(x, tuple) else (x,)
    with torch.enable_grad():
        ref = memory.measure(lambda: model(*args), "cpu")
    assert saved.total_bytes == ref.saved_bytes > 0 and saved.tensors == ref.saved_tensors
    assert sum(r["saved_bytes"] for r in saved.rows) == saved.total_bytes
    by_name = {m.name: m.saved_bytes for m in ref.modules}
    assert {r["layer"]: r["saved_bytes"] for r in saved.rows if r["layer"] in by_name} == \
        {k: v for k, v in by_name.items() if k in {r["layer"] for r in saved.rows}}


def test_saved_by_layer_leaves_out_weights_of_layers_whose_forward_never_runs():
    """MultiheadAttention uses out_proj's weight without calling out_proj: still a weight, not saved bytes
    (memory.measure counted it until issue 41: its exclusion list held the weights of modules that ran;
    it now holds those of their submodules too)."""
    torch.manual_seed(0)
    model, x = F.explicit_attention(), torch.randn(2, 10, 16)
    saved = yourmodel.saved_by_layer(model, x)
    assert saved.total_bytes == nb10.saved_bytes.reference(model, x)  # the exercise's hand count
    assert memory.measure(lambda: model(x), "cpu").saved_bytes == saved.total_bytes


@pytest.mark.integration
def test_the_attention_matrix_is_seen_where_it_is_saved_and_not_elsewhere():
    torch.manual_seed(0)
    explicit = yourmodel.saved_by_layer(F.explicit_attention(), torch.randn(2, 10, 16))
    assert [(a["layer"], a["saves_LxL"]) for a in explicit.attention] == [("mha", True)]
    # the encoder's attention runs the fused kernel (a log-sum-exp per row saved, no L x L); its batch x
    # length (2 x 16) equals the model width (32): a (32, 32) saved tensor that is not attention weights
    fused = yourmodel.saved_by_layer(F.tiny_encoder(), torch.zeros(2, 16, dtype=torch.int64))
    assert [a["saves_LxL"] for a in fused.attention] == [False, False]
    assert any((32, 32) in a["shapes"] for a in fused.attention)
    assert yourmodel.saved_by_layer(_conv_net(), torch.randn(2, 3, 8, 8)).attention == []


def test_nothing_is_saved_outside_grad_mode_the_lessons_premise():
    model, x = _conv_net(), torch.randn(2, 3, 8, 8)
    for mode in (torch.no_grad, torch.inference_mode):
        calls = []
        with mode(), torch.autograd.graph.saved_tensors_hooks(lambda t: calls.append(t) or t, lambda t: t):
            model(x)
        assert calls == []


# --------------------------------------------------------------------------------------------
# here: peaks and times


@pytest.mark.integration
def test_measure_here_peaks_by_mode():
    spec = yourmodel.check("yourmodel_factories:two_inputs", "3x16x16,8")
    here = yourmodel.measure_here(spec, "cpu", "tiny", 0, time_it=False)
    p = here["peak_bytes"]
    assert list(p) == list(yourmodel.MODES) and here["batch"] == yourmodel.here_batch("tiny")
    assert p["train"] > p["grad"] >= p["no_grad"] == p["inference_mode"] > 0
    assert "timing" not in here and here["device"] == "cpu"


def test_measure_heres_memory_steps_run_on_the_timings_thread_count_and_restore_torchs(monkeypatch):
    """Beside a busy neighbour on a 2-core machine its memory steps ran on torch's two OpenMP threads, one of
    which waited for the neighbour's core: 0.6-4 s a step instead of 0.1-0.4 s (notebook 10's cell, 16 s)."""
    import torch

    from nogradlab.core import memory, timing

    seen, real = [], memory.measure
    monkeypatch.setattr(memory, "measure", lambda *a, **k: seen.append(torch.get_num_threads()) or real(*a, **k))
    monkeypatch.setattr(timing, "threads_here", lambda **k: (1, "one thread, as the test asks"))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        spec = yourmodel.check("yourmodel_factories:two_inputs", "3x16x16,8")
        yourmodel.measure_here(spec, "cpu", "tiny", 0, time_it=False)
        assert seen and set(seen) == {1} and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.integration
def test_measure_here_times_each_mode_with_an_interval_around_its_ratio():
    spec = yourmodel.check("yourmodel_factories:explicit_attention", "10x16")
    here = yourmodel.measure_here(spec, "cpu", "tiny", 0)
    t = here["timing"]["modes"]
    assert set(t) == set(yourmodel.MODES) and t["grad"]["over_grad"] == 1.0
    for m, e in t.items():
        lo, hi = e["over_grad_ci"]
        assert lo <= e["over_grad"] <= hi and e["median_s"] > 0, m
    assert "interleaved rounds" in here["timing"]["protocol"]
    assert yourmodel.here_frame(here).shape[0] == 4


# --------------------------------------------------------------------------------------------
# for GPUs


def test_a_line_through_the_engines_answer():
    e = {"largest_batch": 101, "reserved_peak_bytes": 100, "at_limit": False}
    assert yourmodel._extrapolate(e, 1100, 1100) == (101, False)  # through the answer at the budget
    assert yourmodel._extrapolate(e, 1100, 2100) == (201, False)  # 10 bytes a sample
    assert yourmodel._extrapolate(e, 1100, 10**9) == (65536, True)  # where the engine would stop too
    assert yourmodel._extrapolate({**e, "at_limit": True}, 1100, 500) == (None, False)
    assert yourmodel._extrapolate({**e, "largest_batch": 0}, 1100, 5000) == (None, False)


def _doc(budget, batches):
    return {"meta": {"gpu_bytes": budget}, "modes": {m: {"largest_batch": b, "reserved_peak_bytes": 100, "at_limit": False}
                                                      for m, b in batches.items()}}


def test_gpu_sizes_read_the_line_and_at_full_scale_check_it_by_the_engine_at_the_largest(monkeypatch):
    spec = yourmodel.check("yourmodel_factories:two_inputs", "3x16x16,8", gpu="1100B")
    doc = _doc(1100, {"grad": 101, "train": 51})
    calls = []
    monkeypatch.setattr(yourmodel, "estimate", lambda s, size: calls.append(size) or _doc(size, {"grad": 7, "train": 5}))
    tiny = yourmodel.gpu_sizes(spec, doc, "tiny", gib=(2e-6, 4e-6))
    assert calls == [] and [r["how"] for r in tiny] == ["engine", "line", "line"]
    assert tiny[0]["grad"] == (101, False) and tiny[0]["gpu_bytes"] == 1100
    full = yourmodel.gpu_sizes(spec, doc, "full", gib=(2e-6, 4e-6))
    assert calls == [int(4e-6 * 2**30)] and [r["how"] for r in full] == ["engine", "line", "engine"]
    assert full[2]["grad"] == (7, False) and full[2]["line"]["grad"] == tiny[2]["grad"]
    assert "(line: " in yourmodel.sizes_frame(full).iloc[2]["grad"]


def test_an_operator_fake_tensors_cannot_run_is_named():
    spec = yourmodel.check("yourmodel_factories:no_fake", "8")
    with pytest.raises(yourmodel.EstimateFailed, match="nogradlab_tests::twice") as info:
        yourmodel.estimate(spec)
    assert info.value.op == "nogradlab_tests::twice"
    lines = yourmodel.recipe(None, None, None, None, str(info.value))
    assert any("could not run" in ln and "twice" in ln for ln in lines)


def _command_doc(tmp_path, model, input, dtype, gpu) -> dict:
    out = tmp_path / "cli.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(REPO), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "nogradlab", "estimate", model, "--input", input, "--dtype", dtype,
                           "--gpu", gpu, "--json", str(out), "--no-progress"], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(out.read_text())


def _timeless(modes: dict) -> dict:
    """The modes of an estimate document without the search's wall time (``seconds``), which no two runs share."""
    return {m: {k: v for k, v in e.items() if k != "seconds"} for m, e in modes.items()}


@pytest.mark.integration
def test_the_estimate_is_the_commands_document_also_through_the_loop_for_several_inputs(tmp_path):
    spec = yourmodel.check("yourmodel_factories:explicit_attention", "10x16", "float32", "64MiB")
    cli = _command_doc(tmp_path, spec.model, "10x16", "float32", "64MiB")
    doc = yourmodel.estimate(spec)
    assert _timeless(doc["modes"]) == _timeless(cli["modes"]) and doc["no_grad_factor"] == cli["no_grad_factor"]
    assert {k: v for k, v in doc["meta"].items() if k != "command"} == \
        {k: v for k, v in cli["meta"].items() if k != "command"}
    assert not any(e["at_limit"] for e in doc["modes"].values())  # a budget where the search decides
    loop = yourmodel._run_engine(spec, spec.own(), spec.budget, "x")
    assert _timeless(loop["modes"]) == _timeless(cli["modes"]) and loop["notes"] == cli["notes"]
    assert {k: v for k, v in loop["meta"].items() if k != "command"} == \
        {k: v for k, v in cli["meta"].items() if k != "command"}


# --------------------------------------------------------------------------------------------
# a lesson like the others (the rules test_lessons.py holds lessons 01-09 to)


def test_notebook_is_a_lesson_like_the_others():
    import test_lessons as L

    stem = NB.stem
    nb = L._nb(stem)
    assert nb.cells[0].source.split("\n")[1] == L.expected_badges(stem)
    assert L._header_seconds(stem)  # a range, checked against session.json in test_lessons
    goals = next(i for i, c in enumerate(nb.cells) if L._h2(c) == "## Learning goals")
    assert ["parameters" if "parameters" in L._tags(c) else c.cell_type for c in nb.cells[1:goals]] == \
        ["code", "parameters"]
    assert L._first_code(nb) == L._first_code(L._nb("01_what_no_grad_does"))
    assert [h.split(":")[0] for h, _, _ in L._sections(nb)][-4:] == L.END_SECTIONS
    assert L.exercise_problems(nb, "10") == []
    plain, package = L.cell_counts(nb)
    assert plain > package, (plain, package)
    assert any(c.cell_type == "code" and L.DIAGRAM_RE.search(c.source) for c in nb.cells)
    links = {a for c in nb.cells if c.cell_type == "markdown" for a in L.GLOSSARY_LINK.findall(c.source)}
    assert links and links <= L._anchors()
    assert re.search(r"\]\(00_index\.ipynb\)", nb.cells[-1].source)
    params = next(c.source for c in nb.cells if "parameters" in L._tags(c))
    for name in ("model", "input", "dtype", "gpu", "device", "scale", "seed", "save_json"):
        assert re.search(rf"^{name} = ", params, re.M), name
    # a model defined in the notebook itself is named __main__:factory; said where the model is asked for (issue 40)
    assert "__main__:factory" in nb.cells[0].source and "__main__:factory" in params


# the estimate's notes as a learner reads them: beside the rows they qualify, in plain words

#: the notes `yourmodel.estimate` gave for torchvision's mobilenet_v3_small at 3x64x64 under 1 GiB (no GPU,
#: torch 2.14.1), as the engine wrote them: forward modes' notes first, then the training step's own
MOBILENET_NOTES = [
    "library workspaces kept by the process, as on NVIDIA H200 (sm90): cublas 32 MiB (forward), cublaslt 1 MiB "
    "(forward)",
    "workspaces at the sizes NVIDIA H200 reported (cuDNN 91900): 0 convolution calls, 0 other calls; 41 convolution "
    "shapes are not in the table and were given no workspace (e.g. convolution 120x1x1*32x120x1x1; convolution "
    "120x4x4*120x1x5x5; convolution 120x4x4*48x120x1x1, and 38 more): cuDNN may take more there, so this estimate "
    "can be low by their workspaces",
    "no GPU here: estimated on a virtual cuda:0 device",
    "decided as the real cap decides: the step's allocations replayed through the caching allocator's model "
    "(native) under a cap of 1.00 GiB reserved",
    "backward cannot run on a fake CUDA device without a GPU in this torch (2.14.1+cu130); estimated on the fake CPU "
    "device with CUDA's 512-byte block rounding and the CUDA kernels modelled",
    "library workspaces kept by the process, as on NVIDIA H200 (sm90): cublas 32 MiB (forward), cublaslt 1 MiB "
    "(forward), cublas 32 MiB (backward)",
    "workspaces at the sizes NVIDIA H200 reported (cuDNN 91900): 0 convolution calls, 1 other calls; 82 convolution "
    "shapes are not in the table and were given no workspace (e.g. convolution 120x1x1*32x120x1x1; convolution "
    "120x4x4*120x1x5x5; convolution 120x4x4*48x120x1x1, and 79 more): cuDNN may take more there, so this estimate "
    "can be low by their workspaces",
    "workspaces interpolated between the batches measured on NVIDIA H200 (not measured at this batch) for 1 "
    "operator signatures (e.g. sum 1000)",
]


def test_caveats_sit_with_the_rows_they_qualify_in_plain_words():
    """Issue 40: MobileNet's estimate had no cuDNN workspace for any of its 41 forward convolution shapes, and
    that was one of eight notes printed far from the table. caveats() gives each note to the rows it
    qualifies (the forward modes', the training step's, every row's), says the missing workspaces in plain
    words with their count, and drops none."""
    doc = {"modes": {m: {} for m in yourmodel.MODES_ORDER}, "notes": list(MOBILENET_NOTES)}
    got = yourmodel.caveats(doc)
    assert list(got) == ["every row", "the grad, no_grad and inference_mode rows", "the train row"]
    assert sum(len(v) for v in got.values()) == len(MOBILENET_NOTES)
    forward, train = " ".join(got["the grad, no_grad and inference_mode rows"]), " ".join(got["the train row"])
    assert "none of the 41 convolution shapes" in forward and "fewer samples" in forward
    assert "none of the 82 convolution shapes" in train and "fake CPU tensors" in train
    assert "virtual CUDA device" in " ".join(got["every row"]) and "1.00 GiB" in " ".join(got["every row"])
    text = " ".join(line for lines in got.values() for line in lines)
    assert "workspaces at the sizes" not in text and "decided as the real cap decides" not in text


def test_caveats_keep_a_note_they_do_not_know_word_for_word():
    """Without a training step's own notes (no train row, or a real GPU) every note is every row's."""
    doc = {"modes": {"grad": {}, "no_grad": {}}, "notes": ["something new the engine says", MOBILENET_NOTES[2]]}
    got = yourmodel.caveats(doc)
    assert list(got) == ["every row"] and got["every row"][0] == "something new the engine says"
    assert got["every row"][1].startswith("No GPU here")
    doc["notes"] += MOBILENET_NOTES[4:5] + ["another new one"]
    assert yourmodel.caveats(doc)["the train row"][1] == "another new one"
    assert yourmodel.caveats({"modes": {}, "notes": []}) == {}


def test_a_factory_written_in_the_notebook_is_named_main_factory(monkeypatch):
    """What notebook 10 tells the learner: a notebook's cells run in __main__, so `def factory()` there is
    `__main__:factory`."""
    import __main__

    monkeypatch.setattr(__main__, "factory", lambda: nn.Linear(8, 4), raising=False)
    spec = yourmodel.check("__main__:factory", "8")
    assert isinstance(spec.build("cpu", 0), nn.Linear)


def test_measure_here_measures_a_later_training_step_that_holds_the_momentum_through_backward():
    """The train row is a first step: SGD makes its momentum buffers after backward freed what the forward saved
    (torch/optim/sgd.py clones the gradient when the buffer is None). A later step holds them through backward:
    measure_here measures that second step with the same optimizer, the buffers counted as resident (report 3:
    the recipe's first-step figure understated a training loop)."""
    spec = yourmodel.check("yourmodel_factories:two_inputs", "3x16x16,8")
    here = yourmodel.measure_here(spec, "cpu", "tiny", 0, time_it=False)
    first, later = here["peak_bytes"]["train"], here["train_later_step_bytes"]
    net = spec.build("cpu", 0)
    weights = sum(p.numel() * p.element_size() for p in net.parameters())
    assert later > first and later > 3 * weights, (first, later, weights)  # weights, gradients, momentum
    line = next(ln for ln in yourmodel.recipe(None, here, None) if "training step" in ln)
    assert "a first training step" in line and "a later step" in line and _format_bytes(later) in line, line


def _format_bytes(n):
    from nogradlab.core import format as _format

    return _format.bytes_(n)
