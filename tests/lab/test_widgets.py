"""The interactive lab: argument checks, the non-interactive fallback, and the widget driven in
process (clicking Measure, changing controls, errors shown in the widget instead of raised)."""
import base64

import pytest
import torch

from nogradlab import memory, modes, widgets

FAST = dict(rounds=3, min_run_time=0.03)


@pytest.fixture(autouse=True)
def _restore_grad_mode():
    before = torch.is_grad_enabled()
    yield
    assert torch.is_grad_enabled() == before
    torch.set_grad_enabled(before)


# --- bad input fails before any work -----------------------------------------------------------

@pytest.mark.parametrize("kwargs, words", [
    (dict(workload="vgg"), ["unknown workload", "mlp", "resnet50"]),
    (dict(scale="huge"), ["unknown scale", "tiny", "full"]),
    (dict(batch=0), ["batch"]),
    (dict(modes=("grad", "nograd")), ["nograd", "no_grad", "inference_mode"]),
    (dict(modes=()), ["at least one mode", "no_grad"]),
    (dict(device="tpu"), ["unknown device", "cpu", "cuda"]),
    (dict(memory_source="guess"), ["measure", "estimate"]),
    (dict(interactive="yes"), ["interactive"]),
    (dict(rounds=1), ["rounds", "at least 2"]),
    (dict(min_run_time=0), ["min_run_time", "positive"]),
])
def test_explorer_rejects_bad_arguments(kwargs, words):
    with pytest.raises((ValueError, RuntimeError)) as e:
        widgets.explorer(**{"interactive": False, **kwargs})
    for w in words:
        assert w in str(e.value)


@pytest.mark.parametrize("kwargs, words", [
    (dict(budget_gib=0), ["budget_gib", "positive"]),
    (dict(budget_gib="12"), ["budget_gib"]),
    (dict(budget_gib=1e308), ["budget_gib", "finite"]),  # finite, but 1e308 GiB in bytes is not
    (dict(modes=("train", "no_grad")), ["eval+no_grad", "inference_mode"]),
    (dict(workload="bert"), ["unknown workload", "unet"]),
    (dict(scale="auto"), ["unknown scale", "tiny"]),
    (dict(method="guess"), ["estimate", "search"]),
])
def test_budget_explorer_rejects_bad_arguments(kwargs, words):
    with pytest.raises(ValueError) as e:
        widgets.budget_explorer(**{"interactive": False, **kwargs})
    for w in words:
        assert w in str(e.value)


# --- the orchestration: same numbers as the core modules give -----------------------------------

def test_measure_modes_matches_memory_measure_per_mode():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)
    res = widgets.measure_modes(lambda: net(x), ("grad", "no_grad", "inference_mode"), "cpu",
                                **FAST)
    for m in res.modes:
        with modes.get(m)():
            direct = memory.measure(lambda: net(x), "cpu")
        assert res.memory[m].peak_bytes == direct.peak_bytes
        assert res.memory[m].saved_bytes == direct.saved_bytes
    # grad saves the input and the ReLU output; the other modes save nothing
    assert res.memory["grad"].saved_bytes == 8 * 16 * 4 + 8 * 32 * 4
    assert res.memory["no_grad"].saved_bytes == 0 == res.memory["inference_mode"].saved_bytes
    c = res.comparison
    assert c.baseline == "grad" and c.rounds == 3 and c.speedup["grad"] == 1.0
    assert set(c.timings) == {"grad", "no_grad", "inference_mode"}
    df = res.frame()
    assert list(df["mode"]) == ["grad", "no_grad", "inference_mode"]
    assert {"peak_bytes", "saved_bytes", "median_ms", "speedup", "ci_low", "ci_high"} <= set(df)


def test_measure_modes_reports_progress_and_accepts_settings():
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    x = torch.randn(2, 4)
    seen = []
    net.train()
    res = widgets.measure_modes(lambda: net(x), ["eval+grad", "eval+no_grad"], "cpu", model=net,
                                on_step=lambda i, n, t: seen.append((i, n, t)), **FAST)
    assert net.training  # the setting restored train mode
    assert [s[0] for s in seen] == [0, 1, 2, 3] and all(s[1] == 3 for s in seen)
    assert "memory: eval+grad" in seen[0][2] and seen[-1][2] == "done"
    assert res.memory["eval+no_grad"].saved_bytes == 0 < res.memory["eval+grad"].saved_bytes
    with pytest.raises(ValueError, match="needs model"):
        widgets.measure_modes(lambda: net(x), ["train+grad"], "cpu", **FAST)


def test_explorer_fallback_returns_tables_and_figure():
    res = widgets.explorer("mlp", "tiny", batch=4, device="cpu", interactive=False, **FAST)
    assert isinstance(res, widgets.ModesResult)
    assert res.modes == ["grad", "no_grad", "inference_mode"]
    assert res.memory["grad"].saved_bytes > 0 == res.memory["no_grad"].saved_bytes
    text = str(res)
    assert "mlp (tiny), batch 4" in text and "saved for backward" in text and "speedup" in text
    page = res._repr_html_()
    assert "<table>" in page and "data:image/png;base64," in page
    png = base64.b64decode(page.split("base64,")[1].split('"')[0])
    assert png.startswith(b"\x89PNG")


def test_explorer_estimate_source_uses_fake_tensors():
    res = widgets.explorer("mlp", "tiny", batch=4, device="cpu", interactive=False,
                           memory_source="estimate", modes=("grad", "no_grad"), **FAST)
    assert res.memory_source == "estimate"
    direct = memory.estimate("mlp", 4, "cpu", mode="grad", scale="tiny")
    assert res.memory["grad"].method == "fake"
    assert res.memory["grad"].saved_bytes == direct.saved_bytes
    assert "estimated with fake tensors" in str(res)


def test_budget_fallback_uses_largest_batch():
    from nogradlab import batch

    res = widgets.budget_explorer("mlp", "tiny", device="cpu", budget_gib=0.001,
                                  interactive=False)
    assert isinstance(res, widgets.BudgetResult)
    assert list(res.results) == list(widgets.BUDGET_MODES)
    budget = int(0.001 * 2**30)
    for m, r in res.results.items():
        assert r.batch == batch.largest_batch("mlp", m, budget, "cpu", scale="tiny",
                                              method="estimate").batch
    assert res.batches["eval+no_grad"] >= res.batches["grad"] >= 1
    assert "largest batch" in str(res) and "data:image/png" in res._repr_html_()


# --- the widget, driven in process ----------------------------------------------------------

def test_live_frontend_detection(monkeypatch):
    monkeypatch.delenv("NOGRADLAB_INTERACTIVE", raising=False)
    assert widgets.live_frontend() is False  # no Jupyter kernel in pytest
    monkeypatch.setenv("NOGRADLAB_INTERACTIVE", "0")
    assert widgets.live_frontend() is False


def test_explorer_widget_measures_redraws_and_shows_errors():
    ex = widgets.explorer("mlp", "tiny", batch=4, device="cpu", interactive=True, **FAST)
    assert isinstance(ex, widgets.Explorer) and ex.runs == 0
    assert ex.modes == ["grad", "no_grad", "inference_mode"]
    first = ex.measure()  # what the Measure button does
    assert ex.runs == 1 and ex.error is None and ex.result is first
    assert "measurement #1" in ex.status.value and ex.progress.value == ex.progress.max
    ex.batch.value = 8
    ex.mode_boxes["inference_mode"].value = False
    ex.button.click()
    assert ex.runs == 2 and ex.result.modes == ["grad", "no_grad"]
    assert "batch 8" in ex.result.title and "measurement #2" in ex.status.value
    assert ex.result.memory["grad"].saved_bytes > first.memory["grad"].saved_bytes
    # an error lands in the widget, not as an exception
    for box in ex.mode_boxes.values():
        box.value = False
    assert ex.measure() is None
    assert ex.runs == 2 and "at least one mode" in ex.error
    assert "nogradlab-error" in ex.error_box.value and "at least one mode" in ex.error_box.value
    assert not ex.button.disabled
    # a new workload resets the batch to its default
    ex.workload.value = "unet"
    assert ex.batch.value == 2


def test_budget_widget_recomputes_on_slider_change():
    bx = widgets.budget_explorer("mlp", "tiny", device="cpu", budget_gib=0.001,
                                 interactive=True)
    assert isinstance(bx, widgets.BudgetExplorer)
    first = bx.compute()
    bx.budget.min = 0.0005
    bx.budget.step = 0.0005
    bx.budget.value = 0.002  # the observer clears the old result at once and recomputes after a pause
    assert bx.output.outputs == () and "computing for" in bx.status.value
    assert bx.wait(120)
    assert bx.runs == 2 and bx.result.budget_bytes == int(0.002 * 2**30)
    assert bx.result.batches["eval+no_grad"] > first.batches["eval+no_grad"]
    assert "computation #2" in bx.status.value


def test_budget_widget_bursts_compute_once_for_the_last_value():
    bx = widgets.budget_explorer("mlp", "tiny", device="cpu", budget_gib=0.001, interactive=True)
    bx.compute()
    bx.budget.min, bx.budget.step = 0.0005, 0.0005
    for v in (0.0015, 0.002, 0.0025, 0.003):  # arrow keys: four changes in a row
        bx.budget.value = v
    assert bx.wait(120)
    assert bx.started == 1 and bx.runs == 2 and bx.result.budget_bytes == int(0.003 * 2**30)
    assert "0.003" in bx.status.value or "3.07 MiB" in bx.status.value or "MiB" in bx.status.value


@pytest.mark.integration
def test_a_budget_seen_before_is_answered_without_a_search_or_a_new_drawing(monkeypatch):
    """The slider of notebook 02: back to a budget already shown, nothing is searched or drawn again,
    even in a new explorer (a re-run cell); a new budget's search starts from the nearest one seen."""
    from nogradlab import batch

    widgets.SEARCHES.clear()
    widgets._PNGS.clear()
    calls, draws = [], []
    real, figure = batch.largest_batch, widgets.BudgetResult.figure
    monkeypatch.setattr(batch, "largest_batch", lambda *a, **k: calls.append(k) or real(*a, **k))
    monkeypatch.setattr(widgets.BudgetResult, "figure", lambda self: draws.append(1) or figure(self))
    bx = widgets.budget_explorer("mlp", "tiny", device="cpu", budget_gib=0.001, interactive=True)
    n_modes = len(bx.modes_)
    first = bx.compute()
    assert len(calls) == n_modes and len(draws) == 1 and not any("hint" in k for k in calls)
    bx.budget.min, bx.budget.step = 0.0005, 0.0005
    bx.budget.value = 0.002
    assert bx.wait(120) and bx.runs == 2
    assert len(calls) == 2 * n_modes
    # each mode that fitted a batch before starts its new search there (0 fitted: no hint to give)
    searched = sorted(bx.modes_, key=widgets.SEARCH_ORDER.index)  # the inference modes first
    assert [bool(k.get("hint")) for k in calls[n_modes:]] == [first.batches[m] > 0 for m in searched]
    assert len(draws) == 2
    bx.budget.value = 0.001  # seen before
    assert bx.wait(120) and bx.runs == 3 and bx.result.budget_bytes == int(0.001 * 2**30)
    assert len(calls) == 2 * n_modes and len(draws) == 2
    again = widgets.budget_explorer("mlp", "tiny", device="cpu", budget_gib=0.002, interactive=True)
    res = again.compute()
    assert len(calls) == 2 * n_modes and len(draws) == 2
    # the same answers as a fresh search
    assert res.batches == {m: real("mlp", m, int(0.002 * 2**30), "cpu", scale="tiny", method="estimate").batch
                           for m in again.modes_}


def _one_new_budget(gib, modes):
    """An interactive explorer of the tiny MLP moved to ``gib``: (the explorer, every status line it showed)."""
    bx = widgets.budget_explorer("mlp", "tiny", device="cpu", budget_gib=gib, modes=modes, interactive=True)
    shown = []
    real_step = bx._step
    bx._step = lambda *a: (real_step(*a), shown.append(bx.status.value))
    bx.request()
    assert bx.wait(120) and bx.runs == 1
    return bx, shown


def test_the_inference_modes_are_searched_first_and_shown_exact_while_the_rest_is_predicted():
    """A new budget on the slider: each mode's exact answer is shown as soon as it is known, the inference
    modes first (they take the fewest traces); the others stay labelled as predictions until theirs arrive."""
    widgets.SEARCHES.clear()
    modes = ("train", "grad", "eval+no_grad")
    seen = []
    res = widgets.largest_batches("mlp", "tiny", "cpu", 0.001, modes, on_result=lambda m, r: seen.append(m))
    assert seen == ["eval+no_grad", "grad", "train"] and list(res.batches) == list(modes)
    modes = ("grad", "eval+no_grad")  # both predicted after two budgets (CPU bytes, affine in the batch)
    widgets.largest_batches("mlp", "tiny", "cpu", 0.002, modes)
    bx, shown = _one_new_budget(0.003, modes)
    # while grad was searched (last): eval+no_grad exact, grad still a labelled prediction
    last = next(v for v in reversed(shown) if "predicted" in v)
    assert "exact: eval+no_grad = " in last and "grad \u2248" in last.split("predicted")[1]
    assert "predicted" not in bx.status.value and "exact:" not in bx.status.value


def test_a_new_budget_shows_a_labelled_prediction_from_earlier_searches_then_the_exact_answer():
    widgets.SEARCHES.clear()
    modes = ("grad", "eval+no_grad")
    assert widgets.predicted_batches("mlp", "tiny", "cpu", 0.003, modes) == {}  # nothing searched yet
    for gib in (0.001, 0.002):
        widgets.largest_batches("mlp", "tiny", "cpu", gib, modes)
    guess = widgets.predicted_batches("mlp", "tiny", "cpu", 0.003, modes)
    exact = widgets.largest_batches("mlp", "tiny", "cpu", 0.003, modes).batches
    assert set(guess) == set(modes)
    for m in modes:  # CPU bytes are affine in the batch: the fit lands next to the answer
        assert abs(guess[m] - exact[m]) <= max(2, exact[m] // 20), (m, guess, exact)
    bx, shown = _one_new_budget(0.004, modes)
    assert set(bx.predicted) == set(modes) and any("predicted from the searches so far" in v for v in shown)
    assert "predicted" not in bx.status.value  # the exact answer replaces it


def test_predicted_batches_refuses_a_budget_no_byte_count_holds():
    with pytest.raises(ValueError, match="budget_gib"):
        widgets.predicted_batches("mlp", "tiny", "cpu", 1e308)
