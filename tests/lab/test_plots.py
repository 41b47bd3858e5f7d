"""nogradlab.plots: each picture is drawn from the data given, labelled with device and scale,
and bad data is refused with a clear message."""
from __future__ import annotations

import pytest
import torch
from matplotlib.figure import Figure

from nogradlab import memory, plots


def _texts(fig: Figure) -> str:
    parts = [fig._suptitle.get_text() if fig._suptitle else ""]
    parts += [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    for ax in fig.axes:
        parts += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
        parts += [t.get_text() for t in ax.texts]
        parts += [t.get_text() for t in ax.get_yticklabels() + ax.get_xticklabels()]
        if ax.get_legend():
            parts += [t.get_text() for t in ax.get_legend().get_texts()]
    return "\n".join(parts)


def test_memory_vs_batch_from_an_estimate_sweep():
    from nogradlab.claims.measure import estimate_sweep

    rows = estimate_sweep("mlp", [1, 4], ("train", "eval+grad", "eval+no_grad"), device="cpu", scale="tiny")
    fig = plots.memory_vs_batch(rows, device="cpu (test)", scale="tiny", value="total_peak_bytes")
    text = _texts(fig)
    assert "cpu (test), scale tiny" in text and "mlp" in text
    lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines()}
    assert set(lines) == {"train", "eval+grad", "eval+no_grad"}
    assert list(lines["train"].get_xdata()) == [1, 4]
    by = {(r["setting"], r["batch"]): r["total_peak_bytes"] for r in rows}
    assert lines["train"].get_ydata()[1] == pytest.approx(by[("train", 4)] / 2**20)
    assert lines["train"].get_ydata()[1] > lines["eval+no_grad"].get_ydata()[1]
    two = plots.memory_vs_batch(rows + [{**r, "workload": "other"} for r in rows], device="cpu",
                                value="total_peak_bytes")
    assert [ax.get_title() for ax in two.axes] == ["mlp", "other"]


def test_article_table_draws_bands_and_values():
    rows = [dict(workload="resnet50", quantity="memory saved %", measured=41.0, low=30, high=35,
                 ci_low=39.0, ci_high=43.0),
            dict(workload="mlp", quantity="memory saved %", measured=12.0, low=15, high=20),
            dict(workload="resnet50", quantity="batch factor x", measured=2.4, low=1.8, high=2.2),
            dict(workload="mlp", quantity="batch factor x", measured=None, low=1.2, high=1.4)]
    fig = plots.article_table(rows, device="gpu X", scale="full")
    assert len(fig.axes) == 2
    text = _texts(fig)
    assert "gpu X, scale full" in text and "article's band" in text and "this run (each panel says how it was obtained)" in text
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["resnet50", "mlp"]
    # one shaded band per row, one point per measured value
    assert len(fig.axes[0].collections) >= 2
    xs = sorted(float(c.get_xdata()[0]) for c in fig.axes[0].get_lines() if c.get_marker() == "o")
    assert xs == [12.0, 41.0]


def test_timeline_from_reports():
    net = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(4)])
    x = torch.randn(8, 64)
    reports = {}
    for mode in ("grad", "no_grad"):
        def fn(mode=mode):
            with (torch.enable_grad() if mode == "grad" else torch.no_grad()):
                return net(x)
        reports[mode] = memory.measure(fn, "cpu", timeline=True)
    fig = plots.timeline(reports, device="cpu", scale="tiny")
    lines = {ln.get_label(): ln.get_ydata() for ln in fig.axes[0].get_lines()}
    assert set(lines) == {"grad", "no_grad"}
    assert max(lines["grad"]) > max(lines["no_grad"])  # grad keeps activations alive
    with pytest.raises(ValueError, match="timeline=True"):
        plots.timeline({"grad": memory.measure(lambda: net(x), "cpu")}, device="cpu")


def test_saving_vs_length():
    series = {"measured": [{"seq_len": 64, "memory_saved": 0.5}, {"seq_len": 32, "memory_saved": 0.25}]}
    fig = plots.saving_vs_length(series, device="cpu", scale="tiny", threshold=0.4)
    lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines()}
    assert list(lines["measured"].get_xdata()) == [32, 64]
    assert list(lines["measured"].get_ydata()) == [25.0, 50.0]
    assert list(lines["the article's mark"].get_ydata()) == [40.0, 40.0]


def test_eval_grid_needs_four_cells():
    cell = {"saved_bytes": 2048, "requires_grad": True}
    cells = {"train+grad": cell, "train+no_grad": {"saved_bytes": 0}, "eval+grad": cell,
             "eval+no_grad": {"saved_bytes": 0}}
    fig = plots.eval_grid(cells, device="cpu", scale="tiny")
    text = _texts(fig)
    assert "saved_bytes: 2.00 KiB" in text and "model.eval()" in text and "(cpu, " in text and "scale tiny" in text
    with pytest.raises(ValueError, match="missing: eval\\+no_grad"):
        plots.eval_grid({k: v for k, v in cells.items() if k != "eval+no_grad"}, device="cpu")


def test_largest_batch_bars():
    fig = plots.largest_batch({"12 GiB": {"train": 90, "eval+no_grad": 400}, "16 GiB": {"train": 120}},
                              device="cuda (virtual)", scale="full")
    assert isinstance(fig, Figure) and fig._repr_png_().startswith(b"\x89PNG")  # shows itself in Jupyter
    heights = sorted(int(p.get_height()) for p in fig.axes[0].patches)
    assert heights == [0, 90, 120, 400]
    assert fig.axes[0].get_yscale() == "linear"
    wide = plots.largest_batch({"mlp 12 GiB": {"train": 90000}, "unet 12 GiB": {"train": 12}}, device="cpu")
    assert wide.axes[0].get_yscale() == "log"
    assert "cuda (virtual), scale full" in _texts(fig)


@pytest.mark.parametrize("fn, arg", [(plots.memory_vs_batch, []), (plots.article_table, []),
                                     (plots.timeline, {}), (plots.largest_batch, {}),
                                     (plots.saving_vs_length, {})])
def test_empty_data_refused(fn, arg):
    with pytest.raises(ValueError, match="at least one"):
        fn(arg, device="cpu")


def test_for_claim_draws_from_a_result_and_from_its_dict():
    from nogradlab import claims

    r = claims.check("C14", device="cpu", scale="tiny")
    fig = claims.figure(r)
    assert "model.eval()" in _texts(fig) and "scale tiny" in _texts(fig)
    assert _texts(claims.figure(r.to_dict())) == _texts(fig)
    with pytest.raises(ValueError, match="no picture for claim 'C06'; allowed: C04"):
        claims.figure({"id": "C06", "evidence": {}})


def test_a_log_panel_of_the_article_table_has_two_or_more_labelled_ticks():
    """The report's batch-factor panel (measured far beyond the band: a log axis) showed one tick, "10¹"."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    rows = [dict(workload=w, quantity="batch factor x", measured=m, low=lo, high=hi, ci_low=m * 0.95, ci_high=m * 1.05)
            for w, m, lo, hi in (("resnet50", 6.27, 1.8, 2.2), ("transformer_base", 23.67, 1.6, 1.9),
                                 ("unet", 4.85, 2.0, 2.3), ("mlp", 1.80, 1.2, 1.4))]
    fig = plots.article_table(rows, device="gpu X", scale="full")
    FigureCanvasAgg(fig).draw()
    ax = fig.axes[0]
    assert ax.get_xscale() == "symlog"
    lo, hi = ax.get_xlim()
    shown = [(t.get_position()[0], t.get_text()) for t in ax.get_xticklabels()
             if t.get_text() and lo <= t.get_position()[0] <= hi]
    assert len(shown) >= 3, shown
    assert shown[-1][0] >= 10 and all("^" not in s and "$" not in s for _, s in shown), shown  # plain numbers
