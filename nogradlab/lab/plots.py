"""Pictures of measurements: each function takes data measured in this run and returns a
``matplotlib.figure.Figure``. The figures are not registered with pyplot (nothing leaks between
cells) and show themselves as PNG in Jupyter, papermill and nbconvert output, with or without an
inline backend. Titles name the hardware and the scale the data came from.

* ``memory_vs_batch``: peak memory against batch size, one line per gradient mode;
* ``saving_vs_length``: the fraction of memory saved against sequence length;
* ``article_table``: the article's table as a chart, its bands shaded beside our values;
* ``timeline``: live memory across one forward pass, one curve per mode;
* ``eval_grid``: the 2x2 grid train/eval x grad/no_grad;
* ``largest_batch``: the largest batch that fits each memory budget, per mode;

A claim's picture is drawn by its own module with these (``@C.draws``; ``claims.figure(result)``).
The data come from the claim checks' evidence or from the package's sweeps, e.g.
``nogradlab.estimate.sweep.estimate_sweep`` for ``memory_vs_batch``.
"""
from __future__ import annotations

import io
import math

from matplotlib.figure import Figure as _MplFigure
from matplotlib.ticker import FuncFormatter

from nogradlab.core import format as _format

__all__ = ["memory_vs_batch", "saving_vs_length", "article_table", "timeline",
           "eval_grid", "largest_batch", "MODE_COLOURS"]

# colour by the gradient mode in a mode or setting name ("eval+no_grad" is drawn as no_grad)
MODE_COLOURS = {"train": "#8250df", "inference_mode": "#1a7f37", "no_grad": "#0969da", "grad": "#cf222e"}
_MIB = 2 ** 20
_STYLES = ("-", "--", ":", "-.")


class Figure(_MplFigure):
    """A matplotlib Figure that displays itself as a PNG (IPython's ``_repr_png_``) without pyplot."""

    def _repr_png_(self) -> bytes:
        buf = io.BytesIO()
        self.savefig(buf, format="png", dpi=100, bbox_inches="tight")
        return buf.getvalue()


def _colour(mode: str, i: int) -> str:
    parts = str(mode).split("+")
    return next((c for name, c in MODE_COLOURS.items() if name in parts), f"C{i}")


def _title(what: str, device: str, scale: "str | None") -> str:
    """Two lines: what is drawn, and where (a device name is replaced by its hardware label)."""
    from nogradlab.core import device as _device

    if str(device).split(":")[0] in ("cpu", "cuda", "mps"):
        try:
            device = _device.label(_device.describe(device))
        except (ValueError, RuntimeError):
            pass  # a device this machine lacks: keep the name
    tail = f"{device}" + (f", scale {scale}" if scale else "")
    return f"{what}\n{tail}"


def _log2_axis(ax) -> None:
    """A base-2 log x axis labelled with plain numbers (8, 16, ...) rather than powers."""
    from matplotlib.ticker import FuncFormatter

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))


def _rows(data) -> list:
    """A list of dicts from a list of dicts or a pandas DataFrame."""
    if hasattr(data, "to_dict"):
        return data.to_dict("records")
    return list(data)


def memory_vs_batch(rows, *, device: str, scale: "str | None" = None, value: str = "total_bytes",
                    title: str = "Peak memory of one step") -> Figure:
    """Lines of ``value`` (bytes, shown in MiB) against batch size, one per mode, one panel per
    workload.

    ``rows``: dicts (or a DataFrame) with ``mode`` (or ``setting``), ``batch``, ``value`` and
    optionally ``workload`` keys, e.g. from ``nogradlab.claims.measure.estimate_sweep`` with
    ``value="total_peak_bytes"``.
    """
    rows = [{"mode": r.get("setting"), **r} if "mode" not in r else r for r in _rows(rows)]
    if not rows:
        raise ValueError("memory_vs_batch needs at least one row")
    names = list(dict.fromkeys(r.get("workload", "") for r in rows))
    fig = Figure(figsize=(1.0 + 4.2 * len(names), 4))
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    for ax, name in zip(axes, names):
        mine = [r for r in rows if r.get("workload", "") == name]
        for i, mode in enumerate(dict.fromkeys(r["mode"] for r in mine)):
            pts = sorted((r["batch"], r[value] / _MIB) for r in mine if r["mode"] == mode)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=mode,
                    color=_colour(mode, i), ls=_STYLES[i % len(_STYLES)])  # styles: coinciding lines stay visible
        _log2_axis(ax)
        ax.set_xlabel("batch size")
        ax.set_title(name, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("MiB")
    fig.suptitle(_title(title, device, scale), fontsize=10)
    fig.tight_layout()
    return fig


def saving_vs_length(series: dict, *, device: str, scale: "str | None" = None, x: str = "seq_len",
                     y: str = "memory_saved", threshold: "float | None" = None,
                     threshold_label: str = "the article's mark") -> Figure:
    """Lines of a saved fraction (``y``, shown in %) against ``x`` (a sequence length), one per
    series; ``threshold`` (a fraction) is drawn as a dashed line.

    ``series``: ``{label: [{x: ..., y: ...}, ...]}``.
    """
    if not series:
        raise ValueError("saving_vs_length needs at least one series")
    fig = Figure(figsize=(6.4, 4))
    ax = fig.add_subplot()
    for i, (label, pts) in enumerate(series.items()):
        pts = sorted((p[x], 100 * p[y]) for p in _rows(pts))
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label, color=f"C{i}")
    if threshold is not None:
        ax.axhline(100 * threshold, color="#57606a", ls="--", label=threshold_label)
    _log2_axis(ax)
    ax.set_xlabel(x.replace("_", " "))
    ax.set_ylabel(f"{y.replace('_', ' ')} (%)")
    ax.set_title(_title("Memory saved by no_grad against sequence length", device, scale), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def article_table(rows, *, device: str, scale: "str | None" = None) -> Figure:
    """The article's table beside our measurements: one panel per quantity, one row per workload,
    the article's band as a shaded range and the measured value as a dot (with its interval
    where one was measured).

    ``rows``: dicts with ``workload``, ``quantity`` (e.g. ``"memory saved %"``), ``measured``,
    ``low`` and ``high`` (the article's band), optionally ``ci_low``/``ci_high``.
    """
    rows = _rows(rows)
    if not rows:
        raise ValueError("article_table needs at least one row")
    quantities = list(dict.fromkeys(r["quantity"] for r in rows))
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    fig = Figure(figsize=(4 * len(quantities), 1.0 + 0.7 * len(workloads)))
    axes = fig.subplots(1, len(quantities), sharey=True, squeeze=False)[0]
    for ax, q in zip(axes, quantities):
        for y, wl in enumerate(workloads):
            for r in (r for r in rows if r["quantity"] == q and r["workload"] == wl):
                if r.get("low") is not None and r.get("high") is not None:
                    ax.fill_betweenx([y - 0.3, y + 0.3], r["low"], r["high"], color="#bbbbbb",
                                     alpha=0.6, label="article's band" if y == 0 else None)
                if r.get("measured") is not None:
                    lo, hi = r.get("ci_low"), r.get("ci_high")
                    err = None
                    if lo is not None and hi is not None:
                        err = [[max(r["measured"] - lo, 0)], [max(hi - r["measured"], 0)]]
                    ax.errorbar([r["measured"]], [y], xerr=err, fmt="o", color="#0969da",
                                capsize=3, label="this run (each panel says how it was obtained)" if y == 0 else None)
        mine = [r for r in rows if r["quantity"] == q]
        top = max([abs(r.get("ci_high") or r.get("measured") or 0) for r in mine] + [0])
        if top > 10 * max(abs(r.get("high") or 0) for r in mine):  # far off the band: keep both readable
            ax.set_xscale("symlog", linthresh=max(abs(r.get("high") or 1) for r in mine))
            # its own locator labelled one decade ("10¹") on a 1.2-25x panel: round 1-2-5 values, as plain numbers
            nice = [m * 10 ** k for k in range(0, int(math.log10(top)) + 2) for m in (1, 2, 5)]
            ax.set_xticks([0] + [v for v in nice if v <= top * 1.05])
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.set_title(q, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(workloads)), workloads)
    axes[0].invert_yaxis()
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=8)
    fig.suptitle(_title("The article's table (grey) and this run (blue; each panel says how it was obtained)", device,
                        scale), fontsize=10)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def _curve(t):
    """(x in [0, 1], live MiB) from a MemoryReport or a [(index, live_bytes, label)] list."""
    events = t.timeline if hasattr(t, "timeline") else t
    if not events:
        raise ValueError("timeline data is empty: measure with timeline=True")
    n = max(len(events) - 1, 1)
    return [k / n for k in range(len(events))], [e[1] / _MIB for e in events]


def timeline(reports: dict, *, device: str, scale: "str | None" = None,
             title: str = "Live memory during one forward pass") -> Figure:
    """One curve per mode of the live tensor bytes across one call, from reports measured with
    ``timeline=True``. The x axis is the fraction of the call's allocation events, so passes with
    different event counts line up."""
    if not reports:
        raise ValueError("timeline needs at least one report")
    fig = Figure(figsize=(6.4, 3.6))
    ax = fig.add_subplot()
    for i, (mode, rep) in enumerate(reports.items()):
        x, y = _curve(rep)
        ax.plot(x, y, label=mode, color=_colour(mode, i), lw=1.2)
    ax.set_xlabel("progress through the pass (allocation events)")
    ax.set_ylabel("live MiB above the start")
    ax.set_title(_title(title, device, scale), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


def eval_grid(cells: dict, *, device: str, scale: "str | None" = None,
              colour_by: str = "saved_bytes") -> Figure:
    """The 2x2 grid train/eval (rows) x grad/no_grad (columns): each cell lists its facts and is
    shaded by ``colour_by``.

    ``cells``: ``{(model_mode, grad_mode): {fact: value, ...}}`` with model modes ``"train"``,
    ``"eval"`` and grad modes ``"grad"``, ``"no_grad"`` (string keys ``"train+grad"`` work too).
    """
    norm = {}
    for k, v in cells.items():
        key = tuple(k.split("+")) if isinstance(k, str) else tuple(k)
        norm[key] = v
    rows, cols = ("train", "eval"), ("grad", "no_grad")
    missing = [f"{r}+{c}" for r in rows for c in cols if (r, c) not in norm]
    if missing:
        raise ValueError(f"eval_grid needs all four cells; missing: {', '.join(missing)}")
    values = [float(norm[(r, c)].get(colour_by, 0) or 0) for r in rows for c in cols]
    top = max(values) or 1.0
    fig = Figure(figsize=(7, 4.2))
    ax = fig.add_subplot()
    for i, r in enumerate(rows):
        for j, c in enumerate(cols):
            facts = norm[(r, c)]
            shade = float(facts.get(colour_by, 0) or 0) / top
            ax.add_patch(_rect(j, i, (1.0, 1 - 0.6 * shade, 1 - 0.6 * shade)))
            text = "\n".join(f"{k}: {_fmt(k, v)}" for k, v in facts.items())
            ax.text(j + 0.5, i + 0.5, text, ha="center", va="center", fontsize=8)
    ax.set_xlim(0, 2)
    ax.set_ylim(2, 0)
    ax.set_xticks([0.5, 1.5], [f"{c}" for c in cols])
    ax.set_yticks([0.5, 1.5], [f"model.{r}()" for r in rows])
    ax.xaxis.tick_top()
    ax.set_title(_title(f"train/eval x grad/no_grad (shade: {colour_by})", device, scale), fontsize=10,
                 pad=24)
    fig.tight_layout()
    return fig


def _rect(x, y, colour):
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), 1, 1, facecolor=colour, edgecolor="#444444")


def _fmt(key: str, v) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if key.endswith("bytes") and isinstance(v, (int, float)):
        return _format.bytes_(v)
    return _format.number(v)


def largest_batch(data: dict, *, device: str, scale: "str | None" = None) -> Figure:
    """Grouped bars: the largest batch that fits each budget, one bar per mode.

    ``data``: ``{label: {mode: batch}}``, e.g. ``{"12 GiB": {"train": 96, "no_grad": 410}}``; the
    y axis turns logarithmic when the batches span more than a factor of 50.
    """
    if not data:
        raise ValueError("largest_batch needs at least one budget")
    budgets = list(data)
    modes = list(dict.fromkeys(m for b in budgets for m in data[b]))
    width = 0.8 / len(modes)
    fig = Figure(figsize=(max(6.4, 1.25 * len(budgets) + 1.5), 4))
    ax = fig.add_subplot()
    for i, mode in enumerate(modes):
        xs = [k + (i - (len(modes) - 1) / 2) * width for k in range(len(budgets))]
        ys = [data[b].get(mode) or 0 for b in budgets]
        bars = ax.bar(xs, ys, width, label=mode, color=_colour(mode, i))
        ax.bar_label(bars, labels=[str(y) for y in ys], fontsize=7, padding=2,
                     rotation=90 if len(modes) * len(budgets) > 6 else 0)  # many bars: labels upright
    values = [v for b in budgets for v in data[b].values() if v]
    if values and max(values) > 50 * min(values):  # workloads of very different sizes side by side
        ax.set_yscale("log")
        ax.set_ylim(top=max(values) * 8)  # room for the labels
    elif values:
        ax.set_ylim(top=max(values) * 1.2)
    # "workload, budget" labels side by side overlap: one part a line
    ax.set_xticks(range(len(budgets)), [b.replace(", ", "\n") for b in budgets] if len(budgets) > 3 else budgets,
                  fontsize=8)
    ax.set_xlabel("memory budget")
    ax.set_ylabel("largest batch that fits")
    ax.set_title(_title("Largest batch per memory budget", device, scale), fontsize=10)
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig
