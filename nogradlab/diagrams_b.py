"""Concept diagrams for notebooks 05-09, drawn from what PyTorch does when the cell runs (nothing is
stored): where a forward pass's memory goes (05), the 2x2 grid of autocast and no_grad (06), the grad
mode of an event loop's thread while requests await (07), a real autograd graph walked from
``grad_fn.next_functions`` (08) and what an inference tensor may do (09).

Each function returns a :class:`nogradlab.plots.Figure` (displays itself in a notebook, never touches
pyplot's global state)."""
from __future__ import annotations

import asyncio
import threading
import time

import torch

from .plots import Figure

__all__ = ["where_memory_goes", "autocast_grid", "grad_mode_timeline", "autograd_graph", "inference_rules"]

_ON, _OFF, _GREY = "#d62728", "#2ca02c", "#bbbbbb"


def _mib(n: float) -> float:
    return n / 2 ** 20


def _kib_or_mib(n: float) -> str:
    return f"{n / 2 ** 20:.2f} MiB" if n >= 2 ** 20 else f"{n / 2 ** 10:.0f} KiB"


# ------------------------------------------------------------------------------------ 05: memory


def _saved_bytes(fn, skip) -> int:
    storages = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in skip:
            storages[s.data_ptr()] = s.nbytes()
        return t.detach()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(storages.values())


def where_memory_goes(model, x, *, title: "str | None" = None) -> Figure:
    """Peak memory of one forward pass of ``model(x)``, with grad and under ``no_grad``, split into the
    weights, the input, what autograd saves for backward, and the rest (the output and the temporaries
    each layer makes and frees): measured on this machine with :func:`nogradlab.memory.measure`."""
    from . import memory

    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    inp = x.numel() * x.element_size()
    skip = {p.untyped_storage().data_ptr() for p in model.parameters()} | {x.untyped_storage().data_ptr()}
    saved = _saved_bytes(lambda: model(x), skip)
    peaks = {m: r.peak_bytes for m, r in memory.measure_modes(lambda: model(x), ("grad", "no_grad"), x.device).items()}
    rows = {
        "grad on": [weights, inp, saved, max(peaks["grad"] - saved, 0)],
        "no_grad": [weights, inp, 0, peaks["no_grad"]],
    }
    parts = ["weights", "input", "saved for backward", "output and temporaries"]
    colours = ["#7f7f7f", "#bcbd22", _ON, "#1f77b4"]
    fig = Figure(figsize=(8, 2.6))
    ax = fig.subplots()
    for y, (label, vals) in enumerate(reversed(list(rows.items()))):
        left = 0.0
        for part, v, c in zip(parts, vals, colours):
            ax.barh(y, _mib(v), left=left, color=c, edgecolor="white", label=part if y == 0 else None)
            if v > 0.06 * sum(rows["grad on"]):
                ax.text(left + _mib(v) / 2, y, _kib_or_mib(v), ha="center", va="center", fontsize=8, color="white")
            left += _mib(v)
    ax.set_yticks([0, 1], list(reversed(list(rows))))
    ax.set_xlabel("MiB at the peak of one forward pass")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=4, fontsize=8, frameon=False)
    ax.set_title(title or "Where one forward pass's memory goes at its peak (red: kept for backward, with grad on only)", fontsize=10)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------------ 06: 2x2 grid


def autocast_grid(model, x, *, device_type: str = "cpu", dtype=torch.bfloat16) -> Figure:
    """``model(x)`` run in the four combinations of grad on / ``no_grad`` and autocast off / on; each
    square shows the output's dtype and whether it has a ``grad_fn``: two independent switches."""
    import contextlib

    fig = Figure(figsize=(6, 3.4))
    ax = fig.subplots()
    for i, (glabel, gmode) in enumerate((("grad on", contextlib.nullcontext), ("no_grad", torch.no_grad))):
        for j, (alabel, amode) in enumerate((("autocast off", contextlib.nullcontext),
                                             (f"autocast {str(dtype).replace('torch.', '')}",
                                              lambda: torch.autocast(device_type=device_type, dtype=dtype)))):
            with gmode(), amode():
                out = model(x)
            graph = out.grad_fn is not None
            ax.add_patch(_square(j, 1 - i, _ON if graph else _OFF))
            ax.text(j + 0.5, 1 - i + 0.5, f"{str(out.dtype).replace('torch.', '')}\n"
                    f"grad_fn {type(out.grad_fn).__name__ if graph else 'None'}",
                    ha="center", va="center", fontsize=9, color="white")
            if i == 0:
                ax.text(j + 0.5, 2.08, alabel, ha="center", va="bottom", fontsize=9)
        ax.text(-0.05, 1 - i + 0.5, glabel, ha="right", va="center", fontsize=9)
    ax.set_xlim(-0.8, 2.05)
    ax.set_ylim(-0.05, 2.35)
    ax.axis("off")
    ax.set_title("The output of model(x): autocast picks the dtype, grad mode the graph "
                 "(red: a graph is recorded)", fontsize=9)
    fig.tight_layout()
    return fig


def _square(x, y, colour):
    from matplotlib.patches import Rectangle

    return Rectangle((x + 0.03, y + 0.03), 0.94, 0.94, color=colour)


# ------------------------------------------------------------------------------------ 07: timeline


def grad_mode_timeline(requests, *, step_s: float = 0.002) -> Figure:
    """Run ``requests`` on one event loop in a fresh thread and draw, against time, when each request
    waits inside its grad-mode block and the grad mode of the loop's thread.

    ``requests``: ``[(name, start_s, wait_s, block)]``; ``block`` is ``"no_grad"`` (``with
    torch.no_grad(): await asyncio.sleep(wait_s)``) or ``None`` (a plain request that reads the mode
    at ``start_s`` and returns)."""
    spans, samples = [], []

    async def request(name, start, wait, block):
        await asyncio.sleep(start)
        t0 = time.perf_counter()
        if block == "no_grad":
            with torch.no_grad():
                await asyncio.sleep(wait)
                spans.append((name, t0, time.perf_counter(), torch.is_grad_enabled()))
        else:
            spans.append((name, t0, t0, torch.is_grad_enabled()))

    async def sampler(until):
        while time.perf_counter() < until:
            samples.append((time.perf_counter(), torch.is_grad_enabled()))
            await asyncio.sleep(step_s)

    async def main():
        end = max(s + w for _, s, w, _ in requests) + 0.02
        origin[0] = time.perf_counter()
        await asyncio.gather(sampler(origin[0] + end), *(request(*r) for r in requests))

    origin = [0.0]
    t = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
    t.start()
    t.join(10)

    names = [r[0] for r in requests]
    fig = Figure(figsize=(8, 1.0 + 0.5 * (len(names) + 1)))
    ax = fig.subplots()
    for name, t0, t1, grad in spans:
        y = len(names) - names.index(name)
        x0, x1 = (t0 - origin[0]) * 1e3, (t1 - origin[0]) * 1e3
        if t1 > t0:
            ax.barh(y, x1 - x0, left=x0, color=_GREY, height=0.5)
            ax.text(x0, y + 0.3, "with no_grad: await ...", fontsize=7, va="bottom")
        ax.plot([x1], [y], marker="o", color=_ON if grad else _OFF, markersize=8)
        ax.text(x1 + 1, y, f"model call: grad {'on' if grad else 'off'}", fontsize=7, va="center")
    for (a, ga), (b, _) in zip(samples, samples[1:]):
        ax.barh(0, (b - a) * 1e3, left=(a - origin[0]) * 1e3, color=_ON if ga else _OFF, height=0.5)
    ax.set_yticks(range(len(names) + 1), ["the thread's\ngrad mode", *reversed(names)], fontsize=8)
    ax.set_xlabel("ms since the first request (red: grad on, green: grad off)")
    ax.set_title("One event loop, one thread, one grad mode", fontsize=10)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------------ 08: a graph


def autograd_graph(t: torch.Tensor, *, names: "dict | None" = None, title: str = "",
                   max_per_level: int = 8) -> Figure:
    """The autograd graph behind ``t``, walked from ``t.grad_fn`` through ``next_functions``: one box per
    node, by distance from the output; a node's box says how many tensors it saved for backward
    (its ``_saved_*`` attributes); ``AccumulateGrad`` boxes name their leaf (``names``: ``{tensor:
    name}``, e.g. ``{p: n for n, p in model.named_parameters()}``)."""
    by_id = {id(k): v for k, v in (names or {}).items()}
    levels, seen = [], {}
    frontier = [t.grad_fn] if t.grad_fn is not None else []
    edges = []
    while frontier:
        level, nxt = [], []
        for node in frontier:
            if node in seen:
                continue
            seen[node] = (len(levels), len(level))
            level.append(node)
            for child, _ in node.next_functions:
                if child is not None:
                    edges.append((node, child))
                    if child not in seen:
                        nxt.append(child)
        if level:
            levels.append(level)
        frontier = nxt
    width = max([min(len(lv), max_per_level) for lv in levels] or [1])
    fig = Figure(figsize=(max(6, 1.6 * width), 0.9 + 0.75 * max(len(levels), 1)))
    ax = fig.subplots()
    ax.axis("off")
    if not levels:
        ax.text(0.5, 0.5, "grad_fn None: no graph was recorded", ha="center", va="center", fontsize=11)
        ax.set_title(title, fontsize=10)
        return fig
    pos = {}
    for d, lv in enumerate(levels):
        shown = lv[:max_per_level]
        for k, node in enumerate(shown):
            pos[node] = ((k + 0.5) / len(shown) * width, -d)
        if len(lv) > len(shown):
            ax.text(width, -d, f"+{len(lv) - len(shown)} more", fontsize=7, va="center")
    for a, b in edges:
        if a in pos and b in pos:
            (x0, y0), (x1, y1) = pos[a], pos[b]
            ax.annotate("", xy=(x1, y1 + 0.18), xytext=(x0, y0 - 0.18),
                        arrowprops=dict(arrowstyle="->", color="#999999", lw=0.8))
    for node, (x, y) in pos.items():
        name = type(node).__name__
        saved = [n for n in dir(node) if n.startswith("_saved_") and not n.endswith("_raw")
                 and _is_tensors(node, n)]
        if name == "AccumulateGrad":
            leaf = by_id.get(id(node.variable), "leaf")
            label, colour = f"{leaf}\n(.grad)", "#7f7f7f"
        else:
            label = name.replace("Backward", "\nBackward") + (f"\nsaved {len(saved)}" if saved else "")
            colour = _ON if saved else "#1f77b4"
        ax.text(x, y, label, ha="center", va="center", fontsize=7, color="white",
                bbox=dict(boxstyle="round,pad=0.3", fc=colour, ec="none"))
    ax.set_xlim(-0.2, width + 0.6)
    ax.set_ylim(-len(levels) + 0.5, 0.6)
    ax.set_title(title or "The autograd graph (top: the output; red: nodes holding tensors saved for backward)", fontsize=10)
    fig.tight_layout()
    return fig


def _is_tensors(node, attr: str) -> bool:
    """Whether a node's saved attribute holds a tensor (or tensors), not a size or a flag."""
    try:
        v = getattr(node, attr)
    except RuntimeError:  # freed by a backward already
        return True
    return isinstance(v, torch.Tensor) or (isinstance(v, (tuple, list)) and any(isinstance(e, torch.Tensor) for e in v))


# ------------------------------------------------------------------------------------ 09: the rules


def inference_rules() -> Figure:
    """A tensor made under ``no_grad`` beside one made under ``inference_mode``, each tried, outside its
    mode, at what the two modes differ in: a version counter, a tracked view, being an input of a
    recorded operation that saves it (``w * t``) or does not (``w + t``), an in-place update. Each
    square is what this PyTorch did when the cell ran."""
    w = torch.randn(3, requires_grad=True)
    made = {}
    with torch.no_grad():
        made["no_grad"] = torch.ones(3) * 2
    with torch.inference_mode():
        made["inference_mode"] = torch.ones(3) * 2

    def attempt(fn, yes: str, no: str):
        try:
            return (yes, True) if fn() is not False else (no, False)
        except RuntimeError:
            return no, False

    tests = [
        ("has a version counter", lambda t: t._version is not None, "yes", "no"),
        ("a view of it is tracked", lambda t: t[:2]._is_view(), "yes", "no"),
        ("w + t\n(t not saved)", lambda t: w + t is not None, "works", "refused"),
        ("w * t\n(t saved for backward)", lambda t: w * t is not None, "works", "refused"),
        ("t.add_(1)\n(in place)", lambda t: t.add_(1) is not None, "works", "refused"),
    ]
    fig = Figure(figsize=(8, 2.8))
    ax = fig.subplots()
    for i, (mode, t) in enumerate(made.items()):
        for j, (label, fn, yes, no) in enumerate(tests):
            text, good = attempt(lambda: fn(t), yes, no)
            ax.add_patch(_square(j, 1 - i, _OFF if good else _ON))
            ax.text(j + 0.5, 1 - i + 0.5, text, ha="center", va="center", fontsize=9, color="white")
            if i == 0:
                ax.text(j + 0.5, 2.05, label, ha="center", va="bottom", fontsize=7)
        ax.text(-0.05, 1 - i + 0.5, f"made under\n{mode}", ha="right", va="center", fontsize=8)
    ax.set_xlim(-1.1, len(tests) + 0.05)
    ax.set_ylim(-0.05, 2.5)
    ax.axis("off")
    ax.set_title("Outside its mode, what a tensor made under each mode may do (tried just now)", fontsize=10)
    fig.tight_layout()
    return fig
