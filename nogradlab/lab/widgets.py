"""Interactive lab: pick a workload, batch and gradient modes, press *Measure*, see memory and time.

    from nogradlab import widgets
    widgets.explorer("mlp", scale="tiny")             # controls + Measure button (live kernel)
    widgets.budget_explorer("resnet50", budget_gib=12)  # GiB slider -> largest batch per mode

Both work without a widget frontend too: ``interactive=False`` (chosen automatically outside a live
Jupyter kernel, under pytest/nbval, or when ``NOGRADLAB_INTERACTIVE=0``) measures once and returns a
result object whose HTML shows the same figure and table, so papermill reports and plain scripts
get them as well.

Nothing is measured here: memory comes from :func:`nogradlab.memory.measure` (the real model) or
:func:`nogradlab.estimate.fake.estimate` (fake tensors), time from :func:`nogradlab.timing.compare`
(interleaved rounds, paired signed-rank CI), largest batches from
:func:`nogradlab.batch.largest_batch`. This module orchestrates and draws.
"""
from __future__ import annotations

import base64
import collections
import html
import io
import os
import threading
from dataclasses import dataclass, field

from nogradlab.core import html as _htmlmod
from nogradlab.core import device as _device
from nogradlab.core import format as _format
from nogradlab.core import memory as _memory
from nogradlab.core import pipeline as _pipeline
from nogradlab.core import modes as _modes
from nogradlab.core import timing as _timing
from nogradlab.core import workloads as _workloads
from nogradlab.estimate import fake as _fake

__all__ = ["ModesResult", "BudgetResult", "measure_modes", "estimate_modes", "explorer",
           "budget_explorer", "Explorer", "BudgetExplorer", "live_frontend", "MEMORY_SOURCES",
           "BUDGET_MODES"]

MEMORY_SOURCES = ("measure", "estimate")
BUDGET_MODES = ("train", "grad", "eval+no_grad", "inference_mode")
_FALSE = ("0", "false", "no", "off")


def live_frontend() -> bool:
    """True when widgets can be shown and clicked: a Jupyter kernel (not a terminal IPython),
    not under pytest (nbval), not under ``python -m nogradlab run`` (papermill; it sets
    ``NOGRADLAB_LEDGER``), and ``NOGRADLAB_INTERACTIVE`` not set to 0/false.
    ``NOGRADLAB_INTERACTIVE=1`` forces widgets in any kernel."""
    env = os.environ.get("NOGRADLAB_INTERACTIVE", "").strip().lower()
    if env in _FALSE:
        return False
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None or getattr(shell, "kernel", None) is None:
        return False
    headless = "PYTEST_CURRENT_TEST" in os.environ or _pipeline.in_run()
    return env != "" or not headless


def _is_interactive(interactive) -> bool:
    if interactive is None:
        return live_frontend()
    if not isinstance(interactive, bool):
        raise ValueError(f"interactive must be True, False or None (auto), got {interactive!r}")
    return interactive


# --------------------------------------------------------------------------------------------
# drawing helpers


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96, bbox_inches="tight")
    return buf.getvalue()


def _img_html(png: bytes) -> str:
    return f'<img src="data:image/png;base64,{base64.b64encode(png).decode()}"/>'


_html_table = _htmlmod.table  # one table markup for every display (nogradlab.core.html)


def _text_table(header, rows) -> str:
    rows = [tuple(map(str, header))] + [tuple(map(str, r)) for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = []
    for i, r in enumerate(rows):
        lines.append("  ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in
                                                         zip(r[1:], widths[1:])]).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


#: What a ratio whose confidence interval holds both a slowdown and a speedup is shown as.
UNCLEAR = _format.NO_CLEAR_DIFFERENCE


def clear_difference(ci) -> bool:
    """False when the interval ``(low, high)`` of a speedup holds both a slowdown (< 1) and a
    speedup (> 1): the data do not say which way the difference goes, so no ratio is headlined."""
    return not _format.spans(*ci, 1.0)


def _error_html(exc: BaseException) -> str:
    return ('<div style="border:1px solid #c00;background:#fee;color:#600;padding:6px 10px;'
            'border-radius:4px" class="nogradlab-error"><b>'
            f"{html.escape(type(exc).__name__)}</b>: {html.escape(str(exc))}</div>")


# --------------------------------------------------------------------------------------------
# results


class _Shown:
    """How a result shows itself: its table (``_rows``) and figure, under its caption."""

    def png(self) -> bytes:
        return _png(self.figure())

    def notes(self) -> list:
        """Sentences the reader needs next to the table (how to read a capped or noisy value)."""
        return []

    def _notes_html(self) -> str:
        return "".join(f'<p class="nogradlab-note">{html.escape(n)}</p>' for n in self.notes())

    def _text(self) -> str:
        lines = [self._caption(), _text_table(*self._rows())]
        lines += [f"note: {n}" for n in self.notes()]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        return (f"<div><p>{html.escape(self._caption())}</p>{_html_table(*self._rows())}"
                f"{self._notes_html()}{_img_html(self.png())}</div>")


@dataclass
class ModesResult(_Shown):
    """Memory and time of the same call under several gradient modes (settings).

    ``memory[mode]`` is a :class:`nogradlab.memory.MemoryReport` (measured or estimated, see
    ``memory_source``); ``comparison`` a :class:`nogradlab.timing.Comparison` whose baseline is the
    first mode (None when time was not measured)."""

    modes: list
    memory: dict = field(default_factory=dict)
    comparison: "object | None" = None
    memory_source: str = "measure"
    device: str = "cpu"
    title: str = ""
    seconds: float = 0.0  # wall time the measurement took

    def frame(self):
        """One row per mode: bytes (peak, saved for backward, retained) and time (median, IQR,
        speedup over the first mode with its CI, time saved)."""
        import pandas as pd

        rows = []
        for m in self.modes:
            r = self.memory.get(m)
            row = {"mode": m,
                   "peak_bytes": r.peak_bytes if r else None,
                   "saved_bytes": r.saved_bytes if r else None,
                   "retained_bytes": r.retained_bytes if r else None}
            c = self.comparison
            if c is not None:
                t = c.timings[m]
                row.update(median_ms=t.median * 1e3, iqr_ms=t.iqr * 1e3, speedup=c.speedup[m],
                           ci_low=c.ci[m][0], ci_high=c.ci[m][1], time_saved=c.time_saved(m),
                           clear_difference=clear_difference(c.ci[m]))
            rows.append(row)
        return pd.DataFrame(rows)

    def _rows(self):
        header = ["mode"]
        c = self.comparison
        if c is not None:
            header += ["median", "IQR", "speedup", f"{_timing.CONFIDENCE:.0%} CI", "time saved"]
        if self.memory:
            header += ["peak", "saved for backward", "retained"]
        rows = []
        unit = _format.time_unit(min(t.median for t in c.timings.values())) if c else None
        for m in self.modes:
            row = [m]
            if c is not None:
                t = c.timings[m]
                lo, hi = c.ci[m]
                clear = clear_difference((lo, hi))
                if m == c.baseline:
                    speed, saved = f"{_format.ratio(1.0)} (baseline)", "\u2013"
                elif clear:
                    s_lo, s_hi = c.time_saved_ci(m)
                    speed = _format.ratio(c.speedup[m], 3)
                    saved = _format.percent_ci(c.time_saved(m), s_lo, s_hi, 1, signed=True, noisy=False)
                else:  # the interval holds a slowdown and a speedup: no headline number
                    speed, saved = UNCLEAR, "\u2013"
                row += [_format.seconds(t.median, unit),
                        _format.seconds(t.iqr, unit, 2),
                        speed, "\u2013" if m == c.baseline else _format.interval(lo, hi, _format.ratio),
                        saved]
            if self.memory:
                r = self.memory[m]
                row += [_memory.format_bytes(r.peak_bytes), _memory.format_bytes(r.saved_bytes),
                        _memory.format_bytes(r.retained_bytes)]
            rows.append(row)
        return header, rows

    def _caption(self) -> str:
        parts = [self.title] if self.title else []
        if self.memory:
            parts.append(f"memory {'estimated with fake tensors' if self.memory_source == 'estimate' else 'measured'}")
        if self.comparison is not None:
            c = self.comparison
            parts.append(f"time: {c.rounds} interleaved rounds, {c.threads} thread{'' if c.threads == 1 else 's'}, "
                         f"speedup vs {c.baseline!r}")
        return "; ".join(parts)

    def notes(self) -> list:
        c = self.comparison
        out = []
        if c is not None and any(not clear_difference(c.ci[m]) for m in self.modes):
            out.append(f"{UNCLEAR}: the {_timing.CONFIDENCE:.0%} CI of the speedup spans both a "
                       f"slowdown (below {_format.ratio(1.0)}) and a speedup (above {_format.ratio(1.0)}), so "
                       "the data do not say which mode is faster; rerun on a quieter machine, with "
                       "more rounds or a longer min_run_time")
        for m in self.modes:
            r = self.memory.get(m)
            for n in (r.notes if r is not None else []):
                if f"{m}: {n}" not in out:
                    out.append(f"{m}: {n}")
        return out

    def __str__(self) -> str:
        return self._text()

    __repr__ = __str__

    def figure(self):
        """A matplotlib Figure: memory bars (peak, saved for backward) and time bars (median
        with IQR), one group per mode."""
        from matplotlib.figure import Figure

        panels = int(bool(self.memory)) + int(self.comparison is not None)
        fig = Figure(figsize=(4.6 * max(panels, 1), 3.3))
        axes = fig.subplots(1, max(panels, 1), squeeze=False)[0]
        i = 0
        xs = range(len(self.modes))
        if self.memory:
            ax = axes[i]
            i += 1
            peak = [self.memory[m].peak_bytes for m in self.modes]
            saved = [self.memory[m].saved_bytes for m in self.modes]
            name, size = _format.byte_unit(max(peak + saved + [1]))
            w = 0.38
            ax.bar([x - w / 2 for x in xs], [p / size for p in peak], w, label="peak (new allocations)",
                   color="#4c72b0")
            ax.bar([x + w / 2 for x in xs], [s / size for s in saved], w,
                   label="saved for backward (incl. inputs)", color="#dd8452")
            ax.set_xticks(list(xs), self.modes)
            ax.set_ylabel(name)
            src = "estimated" if self.memory_source == "estimate" else "measured"
            ax.set_title(f"memory ({src})")
            ax.legend(fontsize=8)
        if self.comparison is not None:
            ax = axes[i]
            c = self.comparison
            uname, uscale = _format.time_unit(min(t.median for t in c.timings.values()))
            med = [c.timings[m].median / uscale for m in self.modes]
            iqr = [c.timings[m].iqr / uscale / 2 for m in self.modes]
            ax.bar(list(xs), med, 0.6, yerr=iqr, capsize=4, color="#55a868")
            for x, m in zip(xs, self.modes):
                lo, hi = c.ci[m]
                text = ("baseline" if m == c.baseline else
                        f"{_format.ratio(c.speedup[m])}\n{_format.interval(lo, hi, _format.ratio)}"
                        if clear_difference((lo, hi)) else UNCLEAR.replace(" difference ", "\ndifference\n"))
                ax.annotate(text, (x, med[x] + iqr[x]),
                            ha="center", va="bottom", fontsize=8, xytext=(0, 4),
                            textcoords="offset points")
            ax.set_xticks(list(xs), self.modes)
            ax.set_ylabel(uname)
            ax.set_ylim(0, max(a + b for a, b in zip(med, iqr)) * 1.35)
            ax.set_title(f"time per call (median, IQR); speedup vs {c.baseline}")
        if self.title:
            fig.suptitle(self.title, fontsize=10)
        fig.tight_layout()
        return fig


_PNGS: "collections.OrderedDict" = collections.OrderedDict()  # BudgetResult charts already drawn


@dataclass
class BudgetResult(_Shown):
    """Largest batch per mode that fits ``budget_bytes`` on ``device`` (from
    :func:`nogradlab.batch.largest_batch`); ``results[mode]`` is its ``BatchResult``."""

    workload: str
    scale: str
    device: str
    budget_bytes: int
    results: dict = field(default_factory=dict)
    method: str = "estimate"
    seconds: float = 0.0
    allocator: "str | None" = None  # the CUDA caching allocator's mode (None off CUDA)

    @property
    def batches(self) -> dict:
        return {m: r.batch for m, r in self.results.items()}

    def png(self) -> bytes:
        """The bar chart, drawn once per answer (a budget seen before is not drawn again)."""
        key = (self.workload, self.scale, self.device, self.budget_bytes, self.method, self.allocator,
               tuple((m, r.batch, bool(r.at_limit)) for m, r in self.results.items()))
        if key not in _PNGS:
            _PNGS[key] = _png(self.figure())
            while len(_PNGS) > 64:
                _PNGS.popitem(last=False)
        _PNGS.move_to_end(key)
        return _PNGS[key]

    @staticmethod
    def _batch_text(r) -> str:
        return f"\u2265 {r.batch} (search limit)" if r.at_limit else str(r.batch)

    @staticmethod
    def _vs(r, base) -> str:
        """``r``'s batch over the reference's, honest about searches that hit their limit: a
        capped batch is a lower bound, so its ratio is one too (and a capped reference makes
        the ratio an upper bound)."""
        if base is None or not base.batch:
            return "n/a"
        if r is base:
            return f"{_format.ratio(1.0)} (reference)"
        x = r.batch / base.batch
        if r.at_limit and base.at_limit:
            return "n/a (both hit the search limit)"
        if r.at_limit:
            return f"\u2265 {_format.ratio(x)} (lower bound)"
        if base.at_limit:
            return f"\u2264 {_format.ratio(x)} (upper bound)"
        return _format.ratio(x)

    def _rows(self):
        base = self.results.get("train")
        rows = [[m, self._batch_text(r), self._vs(r, base)] for m, r in self.results.items()]
        return ["mode", "largest batch", "vs train"], rows

    def notes(self) -> list:
        capped = [m for m, r in self.results.items() if r.at_limit]
        if not capped:
            return []
        limit = max(r.batch for r in self.results.values() if r.at_limit)
        return [f"\u2265 {limit} (search limit): every batch the search tried fitted for "
                f"{', '.join(capped)}; the search stopped at its limit (max_batch), so the real "
                "largest batch is at least this; a ratio over a capped batch is a lower bound (over a "
                "capped reference, an upper bound), not the real ratio"]

    def _caption(self) -> str:
        how = "fake-tensor estimates" if self.method == "estimate" else "real runs"
        if self.allocator and self.method == "estimate":
            how += f", CUDA caching allocator modelled ({self.allocator})"
        elif self.allocator:
            how += f", {self.allocator} allocator"
        return (f"{self.workload} ({self.scale}) on {self.device}: largest batch within "
                f"{_memory.format_bytes(self.budget_bytes)} ({how})")

    def __str__(self) -> str:
        return self._text()

    __repr__ = __str__

    def figure(self):
        from matplotlib.figure import Figure

        fig = Figure(figsize=(6, 2.8))
        ax = fig.subplots()
        names = list(self.results)
        vals = [self.results[m].batch for m in names]
        capped = [self.results[m].at_limit for m in names]
        bars = ax.barh(names, vals, color="#4c72b0")
        for bar, cap in zip(bars, capped):
            if cap:  # open-ended: the search stopped here, the answer is at least this
                bar.set_hatch("//")
                bar.set_facecolor("#a6bddb")
        for y, m in enumerate(names):
            ax.annotate(self._batch_text(self.results[m]), (vals[y], y), xytext=(3, 0),
                        textcoords="offset points", va="center", fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("largest batch that fits")
        ax.set_xlim(0, max(vals + [1]) * (1.6 if any(capped) else 1.15))
        ax.set_title(self._caption(), fontsize=9)
        fig.tight_layout()
        return fig


# --------------------------------------------------------------------------------------------
# orchestration (the measurements themselves live in memory / timing / batch)


def _check_modes(modes_) -> list:
    if isinstance(modes_, str):
        modes_ = [modes_]
    modes_ = list(modes_ or [])
    if not modes_:
        raise ValueError(f"choose at least one mode; allowed: {', '.join(_modes.names())} "
                         "(or settings such as 'eval+no_grad')")
    for m in modes_:
        _modes.parse(m)  # raises naming the allowed parts
    if len(set(modes_)) != len(modes_):
        raise ValueError(f"modes repeat: {modes_}")
    return modes_


def _check_timing(rounds, min_run_time, warmup=0):
    """The timing knobs, checked before any work (timing.compare checks them again, later)."""
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 2:
        raise ValueError(f"rounds must be an integer of at least 2, got {rounds!r}")
    if isinstance(min_run_time, bool) or not isinstance(min_run_time, (int, float)) \
            or not min_run_time > 0:
        raise ValueError(f"min_run_time must be a positive number of seconds, got {min_run_time!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an integer of 0 or more, got {warmup!r}")


def measure_modes(fn, modes=("grad", "no_grad", "inference_mode"), device=None, *, model=None,
                  memory: bool = True, time: bool = True, rounds: int = 10,
                  min_run_time: float = 0.3, warmup: int = 2, method: str = "auto",
                  on_step=None, title: str = "") -> ModesResult:
    """Run ``fn()`` under each mode (a name from ``nogradlab.modes`` or a setting such as
    ``"eval+no_grad"``; train/eval settings need ``model``): its memory once per mode with
    :func:`nogradlab.memory.measure`, then its time with :func:`nogradlab.timing.compare`
    (interleaved rounds, warm-up, speedup over the first mode with a paired signed-rank CI).

    ``on_step(done, total, text)`` is called before each step (for progress bars).
    """
    import time as _time

    if not callable(fn):
        raise TypeError(f"measure_modes needs a callable, got {type(fn).__name__}")
    modes_ = _check_modes(modes)
    _check_timing(rounds, min_run_time, warmup)
    dev = _device.resolve(device) if device is not None else None
    for m in modes_:
        if _modes.parse(m).train is not None and model is None:
            raise ValueError(f"mode {m!r} sets train/eval, so it needs model=")
    total = len(modes_) * int(memory) + int(time)
    step = 0

    def tick(text):
        nonlocal step
        if on_step is not None:
            on_step(step, total, text)
        step += 1

    def case(m):
        def run():
            with _modes.setting(m, model=model, device=dev):
                return fn()
        return run

    cases = {m: case(m) for m in modes_}
    start = _time.perf_counter()
    reports = {}
    if memory:
        reports = _memory.measure_modes(fn, modes_, dev, model=model, method=method,
                                        on_mode=lambda m: tick(f"memory: {m}"))
    comparison = None
    if time:
        tick(f"time: {len(modes_)} modes, {rounds} interleaved rounds")
        comparison = _timing.compare(cases, baseline=modes_[0], device=dev, rounds=rounds,
                                     min_run_time=min_run_time, warmup=warmup)
    if on_step is not None:
        on_step(total, total, "done")
    return ModesResult(modes=modes_, memory=reports, comparison=comparison,
                       memory_source="measure", device=str(dev) if dev is not None else "any",
                       title=title, seconds=_time.perf_counter() - start)


def estimate_modes(workload, batch: int, modes=("grad", "no_grad", "inference_mode"),
                   device="cpu", *, scale: str = "tiny", on_step=None) -> dict:
    """``{mode: MemoryReport}`` from :func:`nogradlab.estimate.fake.estimate` (fake tensors: nothing
    allocated; ``device="cuda"`` works without a GPU)."""
    modes_ = _check_modes(modes)
    out = {}
    for i, m in enumerate(modes_):
        if on_step is not None:
            on_step(i, len(modes_), f"estimate: {m}")
        out[m] = _fake.estimate(workload, batch, device, mode=m, scale=scale)
    return out


def _check_common(workload, scale, batch, dev_name):
    if workload not in _workloads.names():
        raise ValueError(f"unknown workload {workload!r}; allowed: {', '.join(_workloads.names())}")
    if scale not in _workloads.SCALE_CHOICES:
        raise ValueError(f"unknown scale {scale!r}; allowed: {', '.join(_workloads.SCALE_CHOICES)}")
    if batch is not None:
        _workloads.check_batch(batch)
    return _device.resolve(dev_name)


def _run_workload(workload, scale, batch, modes_, dev, memory_source, *, rounds, min_run_time,
                  on_step=None) -> ModesResult:
    """Build ``workload`` at ``scale`` on ``dev``, then memory (measured or estimated) and time
    per mode. The model is in eval mode for every plain gradient mode, so only grad mode differs."""
    import time as _time

    import torch

    if memory_source not in MEMORY_SOURCES:
        raise ValueError(f"unknown memory source {memory_source!r}; allowed: "
                         f"{', '.join(MEMORY_SOURCES)}")
    start = _time.perf_counter()
    wl = _workloads.get(workload, scale)
    batch = batch or wl.default_batch
    with _device.rng_preserved(dev):  # seeded, leaving the caller's RNG (CPU, CUDA) alone
        torch.manual_seed(0)
        model = wl.build(dev).eval()
        x = wl.make_input(batch, dev)
    title = f"{workload} ({scale}), batch {batch}, {_device.label(_device.describe(dev))}"
    k = len(modes_)
    if memory_source == "estimate":
        steps = k + 1

        def sub(i, _n, text):
            if on_step is not None:
                on_step(min(i, k), steps, text)

        reports = estimate_modes(wl, batch, modes_, dev, scale=scale, on_step=sub)
        res = measure_modes(lambda: model(x), modes_, dev, model=model, memory=False,
                            rounds=rounds, min_run_time=min_run_time,
                            on_step=(lambda i, n, t: on_step(k + i, steps, t)) if on_step else None,
                            title=title)
        res.memory, res.memory_source = reports, "estimate"
    else:
        res = measure_modes(lambda: model(x), modes_, dev, model=model, rounds=rounds,
                            min_run_time=min_run_time, on_step=on_step, title=title)
    res.seconds = _time.perf_counter() - start
    return res


# --------------------------------------------------------------------------------------------
# explorer


class _LiveView:
    """What the two live widgets share: progress, the error box, and redrawing the result."""

    verb = "measurement"

    def _step(self, done, total, text):
        self.progress.max = max(total, 1)
        self.progress.value = done
        self.status.value = f"{self.verb} #{self.runs + 1}: {html.escape(text)}..."

    def _failed(self, e):
        self.error = f"{type(e).__name__}: {e}"
        self.error_box.value = _error_html(e)
        self.status.value = f"{self.verb} #{self.runs + 1} failed"

    def _show(self, res, text):
        from IPython.display import HTML, Image, display

        self.runs += 1
        self.result, self.error = res, None
        self.progress.value = self.progress.max
        self.status.value = (f"<span class='nogradlab-status'>{self.verb} #{self.runs}: "
                             f"{html.escape(text)}</span>")
        self.output.clear_output(wait=True)
        with self.output:
            display(HTML(_html_table(*res._rows()) + res._notes_html()))
            display(Image(data=res.png(), format="png"))
        return res

    def refresh(self):
        raise NotImplementedError

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget)
        if not self._shown:
            self._shown = True
            self.refresh()


class Explorer(_LiveView):
    """The controls of :func:`explorer` and what they last produced.

    ``widget`` is the ipywidgets box; ``measure()`` runs one measurement with the current control
    values (what the *Measure* button does); ``result`` is the last :class:`ModesResult`, ``error``
    the last error message (shown in the widget, not raised), ``runs`` how many measurements ran.
    Displaying the object shows the widget and, the first time, measures once.
    """

    def __init__(self, workload="mlp", scale="tiny", batch=None, modes=("grad", "no_grad",
                 "inference_mode"), device="auto", memory_source="measure", rounds=10,
                 min_run_time=0.3):
        import ipywidgets as W

        self.rounds, self.min_run_time = rounds, min_run_time
        self.result = None
        self.error = None
        self.runs = 0
        wl = _workloads.get(workload, scale)
        devices = _device.available()
        if device not in devices:
            devices.append(device)
        style = {"description_width": "80px"}
        lay = W.Layout(width="230px")
        self.workload = W.Dropdown(options=list(_workloads.names()), value=workload,
                                   description="workload", style=style, layout=lay)
        self.scale = W.Dropdown(options=list(_workloads.SCALES), value=scale,
                                description="scale", style=style, layout=lay)
        self.batch = W.BoundedIntText(value=batch or wl.default_batch, min=1, max=1 << 20,
                                      description="batch", style=style, layout=lay)
        self.device = W.Dropdown(options=devices, value=device, description="device",
                                 style=style, layout=lay)
        self.memory_source = W.Dropdown(options=list(MEMORY_SOURCES), value=memory_source,
                                        description="memory", style=style, layout=lay)
        self.mode_boxes = {m: W.Checkbox(value=m in modes, description=m, indent=False,
                                         layout=W.Layout(width="150px"))
                           for m in list(_modes.names()) + [m for m in modes
                                                            if m not in _modes.names()]}
        self.button = W.Button(description="Measure", button_style="primary", icon="play")
        self.progress = W.IntProgress(value=0, min=0, max=1, layout=W.Layout(width="230px"))
        self.status = W.HTML(value="not measured yet")
        self.error_box = W.HTML(value="")
        self.output = W.Output()
        self.workload.observe(self._default_batch, names="value")
        self.scale.observe(self._default_batch, names="value")
        self.button.on_click(lambda _b: self.measure())
        self.widget = W.VBox([
            W.HBox([W.VBox([self.workload, self.scale, self.batch]),
                    W.VBox([self.device, self.memory_source]),
                    W.VBox([W.Label("modes to compare"), *self.mode_boxes.values()])]),
            W.HBox([self.button, self.progress, self.status]),
            self.error_box, self.output])
        self.widget.add_class("nogradlab-explorer")
        self._shown = False

    def _default_batch(self, _change):
        self.batch.value = _workloads.get(self.workload.value, self.scale.value).default_batch

    @property
    def modes(self) -> list:
        return [m for m, box in self.mode_boxes.items() if box.value]

    def measure(self):
        """Measure with the current control values and redraw; errors go to the error box."""
        self.button.disabled = True
        self.error_box.value = ""
        try:
            modes_ = _check_modes(self.modes)
            dev = _device.resolve(self.device.value)
            res = _run_workload(self.workload.value, self.scale.value, self.batch.value, modes_,
                                dev, self.memory_source.value, rounds=self.rounds,
                                min_run_time=self.min_run_time, on_step=self._step)
        except Exception as e:  # noqa: BLE001 - shown in the widget, not as a traceback
            self._failed(e)
            return None
        finally:
            self.button.disabled = False
        return self._show(res, f"{res.title}, done in {res.seconds:.1f} s")

    refresh = measure


def explorer(workload: str = "mlp", scale: str = "tiny", batch: "int | None" = None,
             modes=("grad", "no_grad", "inference_mode"), device: str = "auto", interactive=None,
             *, memory_source: str = "measure", rounds: int = 10, min_run_time: float = 0.3):
    """Compare gradient modes on a workload: memory and time per mode, as bars.

    ``workload``: one of ``nogradlab.workloads.names()``; ``scale``: tiny/small/full or ``auto``;
    ``batch``: None for the workload's default; ``modes``: names from ``nogradlab.modes`` (or
    settings such as ``"eval+no_grad"``); ``device``: auto/cpu/cuda/cuda:N/mps;
    ``memory_source``: ``"measure"`` (the real model) or ``"estimate"`` (fake tensors).

    Interactive (a live Jupyter frontend, see :func:`live_frontend`): returns an
    :class:`Explorer`; displaying it shows the controls and measures once. Otherwise: measures once
    and returns a :class:`ModesResult` (its HTML holds the same table and figure).
    Bad arguments raise ``ValueError`` naming the allowed values before anything runs.
    """
    dev = _check_common(workload, scale, batch, device)
    scale = _workloads.resolve_scale(scale, dev)
    modes_ = _check_modes(modes)
    _check_timing(rounds, min_run_time)
    if memory_source not in MEMORY_SOURCES:
        raise ValueError(f"unknown memory source {memory_source!r}; allowed: "
                         f"{', '.join(MEMORY_SOURCES)}")
    if _is_interactive(interactive):
        return Explorer(workload, scale, batch, modes_, device, memory_source, rounds,
                        min_run_time)
    return _run_workload(workload, scale, batch, modes_, dev, memory_source, rounds=rounds,
                         min_run_time=min_run_time)


# --------------------------------------------------------------------------------------------
# budget explorer


def _check_budget_gib(budget_gib) -> None:
    """A positive, finite number of GiB that is at least one byte; ``ValueError`` otherwise."""
    if not (isinstance(budget_gib, (int, float)) and not isinstance(budget_gib, bool)
            and 0 < budget_gib < float("inf") and 1 <= budget_gib * 2 ** 30 < 2 ** 62):
        raise ValueError(f"budget_gib must be a positive, finite number of GiB (at least one byte, under "
                         f"{2 ** 32} GiB), got {budget_gib!r}")


#: every estimated largest-batch search of this session: ``(workload, scale, device, budget, mode,
#: method, allocator) -> BatchResult`` (oldest dropped beyond :data:`SEARCHES_MAX`)
SEARCHES: "collections.OrderedDict" = collections.OrderedDict()
SEARCHES_MAX = 2048


def _hint(searches, key) -> "int | None":
    """A batch near the answer for ``key``: the answer at the nearest budget searched for the same
    workload and mode, scaled by the budgets' ratio (memory grows about linearly with the batch)."""
    workload, scale, device, budget, mode, method, allocator = key
    near = [(abs(k[3] - budget), k[3], r) for k, r in searches.items()
            if k[:3] == (workload, scale, device) and k[4:] == (mode, method, allocator)
            and getattr(r, "batch", 0) and not getattr(r, "at_limit", False)]
    if not near:
        return None
    _, b, r = min(near, key=lambda t: t[0])
    return max(1, int(r.batch * budget / b))


def predicted_batches(workload, scale, device, budget_gib, modes=BUDGET_MODES, *,
                      method: str = "estimate", allocator: "str | None" = None) -> dict:
    """``{mode: batch}`` predicted, without any new estimate, from the trials of the searches this
    session already ran for the same workload, scale, device and mode (:data:`SEARCHES`): a
    least-squares affine fit of the bytes against the batch, solved for the budget. A prediction,
    not an answer (the allocator rounds, a cap is decided on reserved bytes): the widget shows it
    while the exact search runs. Modes with fewer than two batches measured are left out."""
    _check_budget_gib(budget_gib)
    budget = int(budget_gib * 2**30)
    out = {}
    for m in modes:
        points = {}
        for k, r in SEARCHES.items():
            if k[:3] == (workload, scale, str(device)) and k[4:] == (m, method, allocator):
                for b, _ok, n in getattr(r, "trials", ()):
                    if n is not None:
                        points[int(b)] = int(n)
        if len(points) < 2:
            continue
        xs, ys = list(points), [points[b] for b in points]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
        if slope <= 0:
            continue
        out[m] = max(0, int((budget - (my - slope * mx)) // slope))
    return out


#: the order the modes are searched in: the inference modes first (two traces each for a new budget, against
#: four to six for a training step), so that a slider shows their exact answers first
SEARCH_ORDER = ("eval+no_grad", "inference_mode", "grad", "train")


def largest_batches(workload, scale, device, budget_gib, modes=BUDGET_MODES, *,
                    method: str = "estimate", on_step=None, cache=None,
                    allocator: "str | None" = None, on_result=None) -> BudgetResult:
    """Largest batch per mode within ``budget_gib`` GiB, from ``nogradlab.batch.largest_batch``
    (``method="estimate"``: fake tensors, and ``device="cuda"`` needs no GPU; on CUDA the answer
    comes from the caching allocator's model under the cap, ``allocator`` ``"native"`` by default
    or ``"expandable_segments"``; ``"auto"``: real runs under a memory cap on a real GPU).

    Every estimated search is kept (:data:`SEARCHES`, per workload, scale, device, mode, method,
    allocator and budget), so a budget seen before is answered without a search, and a new one
    starts from the answer at the nearest budget seen for that workload and mode (``hint``), with
    its line fitted through the traces those searches took: two new traces a mode where they lie on
    one line, the same answer where fitting is monotone in the batch (see ``largest_batch`` for
    where the allocator's rounding makes it not). ``cache`` (a dict) reuses answers too, for any
    method. The modes are searched in :data:`SEARCH_ORDER` (the result keeps ``modes``' order);
    ``on_result(mode, result)`` is called as each mode's answer is known."""
    import time as _time

    from nogradlab.estimate.batch import largest_batch

    _check_budget_gib(budget_gib)
    budget = int(budget_gib * 2**30)
    start = _time.perf_counter()
    results = {}
    shared = SEARCHES if method == "estimate" else None  # a real search measures today's GPU: never reused
    order = sorted(modes, key=lambda m: SEARCH_ORDER.index(m) if m in SEARCH_ORDER else len(SEARCH_ORDER))
    for i, m in enumerate(order):
        if on_step is not None:
            on_step(i, len(modes), f"largest batch: {m}")
        key = (workload, scale, str(device), budget, m, method, allocator)
        for store in (cache, shared):
            if store is not None and key in store:
                results[m] = store[key]
                break
        else:
            hint = _hint(shared, key) if shared is not None else None
            results[m] = largest_batch(workload, m, budget, device, scale=scale, method=method,
                                       allocator=allocator, **({"hint": hint} if hint else {}))
        for store in (cache, shared):
            if store is not None:
                store[key] = results[m]
        if shared is not None:
            shared.move_to_end(key)
            while len(shared) > SEARCHES_MAX:
                shared.popitem(last=False)
        if on_result is not None:
            on_result(m, results[m])
    results = {m: results[m] for m in modes}
    if on_step is not None:
        on_step(len(modes), len(modes), "done")
    used = next((r.allocator for r in results.values() if r.allocator), None)
    return BudgetResult(workload=workload, scale=scale, device=str(device), budget_bytes=budget,
                        results=results, method=method, seconds=_time.perf_counter() - start,
                        allocator=used)


def _check_budget_device(device) -> str:
    if isinstance(device, str) and device.strip().lower().startswith("cuda"):
        return device.strip().lower()  # a virtual GPU: estimates need no real one
    return str(_device.resolve(device))


class _Stale(Exception):
    """A computation whose setting changed while it ran."""


class BudgetExplorer(_LiveView):
    """The controls of :func:`budget_explorer`: a GiB slider, workload, scale, device; every
    change recomputes the largest batch per mode (cached). ``result`` / ``error`` / ``runs`` as
    in :class:`Explorer`."""

    def __init__(self, workload="resnet50", scale="full", device="cuda", budget_gib=12.0,
                 modes=BUDGET_MODES, method="estimate", allocator=None):
        import ipywidgets as W

        self.modes_ = tuple(modes)
        self.method = method
        self.allocator = allocator
        self.result, self.error, self.runs = None, None, 0
        self.predicted: dict = {}  # the last prediction shown while an exact search ran
        self._cache: dict = {}
        style = {"description_width": "80px"}
        small = min(0.5, budget_gib)
        self.budget = W.FloatSlider(value=budget_gib, min=small, max=max(80.0, budget_gib),
                                    step=small, description="budget GiB", readout_format=".3g",
                                    continuous_update=False, style=style,
                                    layout=W.Layout(width="420px"))
        self.workload = W.Dropdown(options=list(_workloads.names()), value=workload,
                                   description="workload", style=style)
        self.scale = W.Dropdown(options=list(_workloads.SCALES), value=scale,
                                description="scale", style=style)
        devices = ["cuda", "cpu"] + [d for d in [device] if d not in ("cuda", "cpu")]
        self.device = W.Dropdown(options=devices, value=device, description="device",
                                 style=style)
        self.progress = W.IntProgress(value=0, min=0, max=len(self.modes_))
        self.status = W.HTML(value="not computed yet")
        self.error_box = W.HTML(value="")
        self.output = W.Output()
        # a burst of changes (arrow keys on the slider) computes once, after a short pause; a
        # computation still running for an older setting stops at its next mode
        self._lock = threading.Lock()
        self._one_at_a_time = threading.Lock()
        self._wanted = 0  # generation of the latest request
        self._timer = None
        self.started = 0  # computations started by control changes
        self.dropped = 0  # of those, stopped because the setting changed again
        for w in (self.budget, self.workload, self.scale, self.device):
            w.observe(lambda _c: self.request(), names="value")
        self.widget = W.VBox([W.HBox([self.workload, self.scale, self.device]), self.budget,
                              W.HBox([self.progress, self.status]), self.error_box, self.output])
        self.widget.add_class("nogradlab-budget-explorer")
        self._shown = False

    verb = "computation"
    #: seconds of quiet after the last change before a computation starts
    debounce_s = 0.4

    def _setting_text(self) -> str:
        return (f"{self.workload.value} ({self.scale.value}) on {self.device.value}, "
                f"{self.budget.value:.3g} GiB")

    def request(self):
        """A control changed: the shown result no longer applies, so it is cleared at once (never a
        result under another setting's caption), the status says what is being computed, and the
        computation starts after :attr:`debounce_s` seconds without another change, in a thread
        (the kernel stays free for the next change). A computation for an older setting stops at
        its next step and shows nothing."""
        with self._lock:
            self._wanted += 1
            gen = self._wanted
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(self.debounce_s, self._compute_for, args=(gen,))
            self._timer.daemon = True
            self._timer.start()
        self.error_box.value = ""
        self.output.outputs = ()
        self.status.value = (f"<span class='nogradlab-status nogradlab-pending'>computing for "
                             f"{html.escape(self._setting_text())}...</span>")

    def _stale(self, gen) -> bool:
        return gen != self._wanted

    def _compute_for(self, gen):
        with self._one_at_a_time:
            if self._stale(gen):
                return
            self.started += 1

            def step(done, total, text):
                if self._stale(gen):
                    raise _Stale
                self._step(done, total, text)

            def exact(mode, result):
                if self._stale(gen):
                    raise _Stale
                self.exact[mode] = result.answer if hasattr(result, "answer") else result.batch

            try:
                dev = _check_budget_device(self.device.value)
                self._predict(dev)
                res = largest_batches(self.workload.value, self.scale.value, dev, self.budget.value,
                                      self.modes_, method=self.method, on_step=step,
                                      cache=self._cache, allocator=self.allocator, on_result=exact)
            except _Stale:
                self.dropped += 1
                return
            except Exception as e:  # noqa: BLE001 - shown in the widget, not as a traceback
                if not self._stale(gen):
                    self._failed(e)
                return
            if self._stale(gen):
                self.dropped += 1
                return
            self._show_outputs(res, f"{res._caption()}, {res.seconds:.1f} s")

    def _predict(self, dev):
        """While a new budget's exact search runs: the answer predicted from the searches so far
        (:func:`predicted_batches`), in the status line, labelled as a prediction."""
        self.predicted = {}
        self.exact = {}
        if self.method != "estimate":
            return
        key = (self.workload.value, self.scale.value, str(dev), int(self.budget.value * 2**30))
        if all(key + (m, self.method, self.allocator) in SEARCHES for m in self.modes_):
            return  # answered at once: nothing to predict
        self.predicted = predicted_batches(*key[:3], self.budget.value, self.modes_, method=self.method,
                                           allocator=self.allocator)

    def _prediction_html(self) -> str:
        if not self.predicted:
            return ""
        exact = getattr(self, "exact", {})
        done = ", ".join(f"{m} = {b}" for m, b in exact.items())
        guess = ", ".join(f"{m} \u2248 {b}" for m, b in self.predicted.items() if m not in exact)
        if not guess:
            return ""
        return ((f" <span class='nogradlab-exact'>(exact: {html.escape(done)})</span>" if done else "")
                + f" <span class='nogradlab-prediction'>(predicted from the searches so far, an affine fit: "
                f"{html.escape(guess)}; the exact search is running)</span>")

    def _step(self, done, total, text):
        super()._step(done, total, text)
        self.status.value += self._prediction_html()

    def _show_outputs(self, res, text):
        """:meth:`_show` from any thread: the output widget's outputs set directly."""
        self.runs += 1
        self.result, self.error = res, None
        self.progress.value = self.progress.max
        self.status.value = (f"<span class='nogradlab-status'>{self.verb} #{self.runs}: "
                             f"{html.escape(text)}</span>")
        self.output.outputs = (
            {"output_type": "display_data", "metadata": {},
             "data": {"text/html": _html_table(*res._rows()) + res._notes_html(), "text/plain": text}},
            {"output_type": "display_data", "metadata": {},
             "data": {"image/png": base64.b64encode(res.png()).decode("ascii"), "text/plain": "chart"}})

    def wait(self, timeout: float = 600.0) -> bool:
        """Wait until no computation is pending or running (tests, scripts); False on timeout."""
        import time

        end = time.monotonic() + timeout
        while time.monotonic() < end:
            t = self._timer
            if (t is None or not t.is_alive()) and not self._one_at_a_time.locked():
                return True
            time.sleep(0.05)
        return False

    def compute(self):
        """Recompute with the current control values; errors go to the error box."""
        self.error_box.value = ""
        try:
            dev = _check_budget_device(self.device.value)
            res = largest_batches(self.workload.value, self.scale.value, dev, self.budget.value,
                                  self.modes_, method=self.method, on_step=self._step,
                                  cache=self._cache, allocator=self.allocator)
        except Exception as e:  # noqa: BLE001 - shown in the widget, not as a traceback
            self._failed(e)
            return None
        return self._show(res, f"{res._caption()}, {res.seconds:.1f} s")

    refresh = compute


def budget_explorer(workload: str = "resnet50", scale: str = "full", device: str = "cuda",
                    budget_gib: float = 12, interactive=None, *, modes=BUDGET_MODES,
                    method: str = "estimate", allocator: "str | None" = None):
    """How large a batch fits a memory budget, per mode (``train`` step, ``grad`` forward,
    ``eval+no_grad``, ``inference_mode``), from fake-tensor estimates: a GPU-sized question
    answered on any machine (``device="cuda"`` is virtual when no GPU is present). On CUDA the
    estimate decides with the caching allocator's model under the cap (``allocator``:
    ``"native"``, the default, or ``"expandable_segments"``), as the real cap decides.
    ``method="auto"`` uses real runs under a memory cap where a real GPU is present.

    Interactive: returns a :class:`BudgetExplorer` (a GiB slider; displaying it computes once).
    Otherwise computes once and returns a :class:`BudgetResult` (table and bar chart in its HTML).
    """
    if workload not in _workloads.names():
        raise ValueError(f"unknown workload {workload!r}; allowed: {', '.join(_workloads.names())}")
    if scale not in _workloads.SCALES:
        raise ValueError(f"unknown scale {scale!r}; allowed: {', '.join(_workloads.SCALES)}")
    dev = _check_budget_device(device)
    _check_budget_gib(budget_gib)
    from nogradlab.estimate.batch import METHODS, MODES

    modes = (modes,) if isinstance(modes, str) else tuple(modes)
    if not modes or any(m not in MODES for m in modes):
        raise ValueError(f"modes must be chosen from {', '.join(MODES)}; got {modes!r}")
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; allowed: {', '.join(METHODS)}")
    from nogradlab.estimate.fake import ALLOCATORS

    if allocator is not None and allocator not in ALLOCATORS:
        raise ValueError(f"unknown allocator {allocator!r}; allowed: {', '.join(ALLOCATORS)}")
    if _is_interactive(interactive):
        return BudgetExplorer(workload, scale, device, float(budget_gib), modes, method, allocator)
    return largest_batches(workload, scale, dev, budget_gib, modes, method=method, allocator=allocator)
