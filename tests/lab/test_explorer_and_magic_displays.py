"""What the explorer, the budget explorer and the magics show: no headline ratio for noise, capped
searches shown as lower bounds, the user's own line in a magic's traceback, and units on every number."""
import re

import numpy as np
import pytest
import torch
from IPython.core.interactiveshell import InteractiveShell

from nogradlab import batch, timing, widgets

FAST = dict(rounds=2, min_run_time=0.01)


def _comparison(spread_no_grad=3.0, seed=0):
    """A Comparison from made-up per-round samples: grad and no_grad with a wide spread (their
    CI spans x1), inference_mode clearly faster. Numbers as timing.compare would compute them."""
    rng = np.random.default_rng(seed)
    samples = {"grad": list(1e-4 * (1 + rng.random(10) * spread_no_grad)),
               "no_grad": list(1e-4 * (1 + rng.random(10) * spread_no_grad)),
               "inference_mode": list(0.5e-4 * (1 + rng.random(10) * 0.01))}
    speedup, ci = timing.bootstrap_speedup(samples, "grad")
    tim = {n: timing.Timing.from_samples(v, 1, label=n, threads=2, device="cpu")
           for n, v in samples.items()}
    return timing.Comparison(timings=tim, baseline="grad", speedup=speedup, ci=ci, rounds=10,
                             device="cpu", threads=2)


@pytest.fixture(scope="module")
def noisy():
    c = _comparison()
    lo, hi = c.ci["no_grad"]
    assert lo < 1 < hi and c.ci["inference_mode"][0] > 1  # the premise of the tests below
    return widgets.ModesResult(modes=list(c.timings), comparison=c, title="made-up samples")


# --- 9a: a CI across x1 is no result ---------------------------------------------------------

def test_clear_difference_rule():
    assert not widgets.clear_difference((0.163, 46.453))
    assert not widgets.clear_difference((0.92, 109.7))
    assert widgets.clear_difference((1.2, 3.0)) and widgets.clear_difference((0.5, 0.9))
    assert widgets.clear_difference((1.0, 1.0))  # the baseline itself


def test_noisy_ratio_has_no_headline_in_text_and_html(noisy):
    c = noisy.comparison
    headline = f"{c.speedup['no_grad']:.3f}"
    for shown in (str(noisy), noisy._repr_html_()):
        assert widgets.UNCLEAR in shown
        assert headline not in shown  # the point estimate is not shown as a result
    header, rows = noisy._rows()
    row = dict(zip(header, rows[1]))
    assert row["speedup"] == widgets.UNCLEAR and row["time saved"] == "\u2013"
    lo, hi = c.ci["no_grad"]
    assert row["95% CI"] == f"[{lo:.2f}\u00d7, {hi:.2f}\u00d7]"  # the evidence stays visible
    clear = dict(zip(header, rows[2]))
    assert clear["speedup"] == f"{c.speedup['inference_mode']:.3f}\u00d7"
    assert re.fullmatch(r"\+\d+\.\d% \[\+\d+\.\d%, \+\d+\.\d%\]", clear["time saved"])
    assert noisy.frame()["clear_difference"].tolist() == [True, False, True]


def test_noisy_ratio_has_no_headline_in_the_figure(noisy):
    texts = [t.get_text() for ax in noisy.figure().axes for t in ax.texts]
    assert any("no clear" in t for t in texts)
    assert not any(f"{noisy.comparison.speedup['no_grad']:.2f}" in t for t in texts)


def test_explorer_widget_shows_no_headline_for_noise(noisy, monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda *objs, **k: shown.extend(objs))
    monkeypatch.setattr(widgets, "_run_workload", lambda *a, **k: noisy)
    ex = widgets.explorer("mlp", "tiny", batch=4, device="cpu", interactive=True, **FAST)
    assert ex.measure() is noisy
    page = "".join(getattr(o, "data", "") for o in shown if isinstance(getattr(o, "data", None), str))
    assert widgets.UNCLEAR in page and f"{noisy.comparison.speedup['no_grad']:.3f}" not in page


def test_modes_magic_prints_no_headline_for_noise(noisy, monkeypatch, capsys):
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "nogradlab")
    monkeypatch.setattr(widgets, "measure_modes", lambda *a, **k: noisy)
    ip.run_cell_magic("modes", "grad no_grad inference_mode", "pass")
    out = capsys.readouterr().out
    assert widgets.UNCLEAR in out and f"{noisy.comparison.speedup['no_grad']:.3f}" not in out


# --- 8: a capped search is a lower bound -----------------------------------------------------

@pytest.fixture(scope="module")
def capped():
    big = 2**30
    res = {m: batch.largest_batch("mlp", m, big, "cpu", scale="tiny", method="estimate",
                                  max_batch=64) for m in ("train", "eval+no_grad")}
    res["grad"] = batch.largest_batch("mlp", "grad", 2**20, "cpu", scale="tiny",
                                      method="estimate")
    assert res["train"].at_limit and res["eval+no_grad"].at_limit and not res["grad"].at_limit
    return widgets.BudgetResult("mlp", "tiny", "cpu", big, res)


def test_budget_table_marks_the_search_limit(capped):
    header, rows = capped._rows()
    table = {r[0]: r for r in rows}
    assert table["train"][1] == table["eval+no_grad"][1] == "\u2265 64 (search limit)"
    assert table["eval+no_grad"][2] == "n/a (both hit the search limit)"  # not x1.00
    g = capped.results["grad"].batch
    assert table["grad"][1] == str(g) and table["grad"][2] == f"\u2264 {g / 64:.2f}\u00d7 (upper bound)"
    for shown in (str(capped), capped._repr_html_()):
        assert "\u2265 64 (search limit)" in shown and "lower bound" in shown


def test_budget_ratio_over_an_uncapped_reference_is_a_lower_bound():
    train = batch.largest_batch("mlp", "train", 2**22, "cpu", scale="tiny", method="estimate")
    assert 0 < train.batch < 4096 and not train.at_limit
    inf = batch.largest_batch("mlp", "inference_mode", 2**30, "cpu", scale="tiny",
                              method="estimate", max_batch=4096)
    r = widgets.BudgetResult("mlp", "tiny", "cpu", 2**20, {"train": train, "inference_mode": inf})
    assert r._rows()[1][1][2] == f"\u2265 {4096 / train.batch:.2f}\u00d7 (lower bound)"


def test_budget_figure_and_widget_mark_the_limit(capped, monkeypatch):
    texts = [t.get_text() for ax in capped.figure().axes for t in ax.texts]
    assert texts.count("\u2265 64 (search limit)") == 2
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda *objs, **k: shown.extend(objs))
    monkeypatch.setattr(widgets, "largest_batches", lambda *a, **k: capped)
    bx = widgets.budget_explorer("mlp", "tiny", device="cpu", budget_gib=1, interactive=True)
    assert bx.compute() is capped
    page = "".join(o.data for o in shown if isinstance(getattr(o, "data", None), str))
    assert "\u2265 64 (search limit)" in page and "lower bound" in page


# --- units -----------------------------------------------------------------------------------

def test_units_on_every_number():
    res = widgets.explorer("mlp", "tiny", batch=4, device="cpu", interactive=False, **FAST)
    header, rows = res._rows()
    for row in rows:
        cells = dict(zip(header, row))
        assert re.fullmatch(r"[\d.]+ (s|ms|µs|ns)", cells["median"]), cells["median"]
        assert re.match(r"[\d.]+ (s|ms|µs|ns)", cells["IQR"])
        for k in ("peak", "saved for backward", "retained"):
            assert re.fullmatch(r"\d+ B|[\d.]+ (KiB|MiB|GiB)", cells[k]), cells[k]
        assert re.match(r"[\d.]+\u00d7", cells["speedup"]) or cells["speedup"] == widgets.UNCLEAR
    assert " us" not in str(res)
    assert "GiB" in widgets.BudgetResult("mlp", "tiny", "cpu", 2**31, {})._caption()


# --- 10: magic errors show the user's line ---------------------------------------------------

@pytest.mark.parametrize("magic", ["memory", "modes grad no_grad -r 2 -t 0.01"])
def test_magic_traceback_shows_the_users_line(magic, capsys):
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "nogradlab")
    ip.run_line_magic("colors", "nocolor")
    capsys.readouterr()
    result = ip.run_cell(f"%%{magic}\nimport torch\nx = torch.ones(3)\n"
                         "y = x @ torch.ones(4)  # the learner's bad line\n")
    out = capsys.readouterr().out
    assert isinstance(result.error_in_exec, RuntimeError)
    assert "----> 4 y = x @ torch.ones(4)  # the learner's bad line" in out
    assert "Could not get source" not in out
    assert "nogradlab" not in out.replace("load_ext", "")  # no frames of the instrument
    assert out.count("File ") == 0


def test_magic_traceback_keeps_the_frames_the_user_called(capsys):
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "nogradlab")
    ip.run_line_magic("colors", "nocolor")
    ip.user_ns.update(torch=torch, lin=torch.nn.Linear(4, 2))
    capsys.readouterr()
    result = ip.run_cell("%%memory\ny = lin(torch.ones(3, 5))\n")
    out = capsys.readouterr().out
    assert isinstance(result.error_in_exec, RuntimeError)
    assert "----> 2 y = lin(torch.ones(3, 5))" in out
    assert "linear.py" in out  # the user's call into torch is kept
    assert "memory.py" not in out and "widgets.py" not in out


def test_errors_of_the_magic_itself_are_unchanged():
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "nogradlab")
    with pytest.raises(ZeroDivisionError):
        ip.run_cell_magic("memory", "", "1 / 0")
