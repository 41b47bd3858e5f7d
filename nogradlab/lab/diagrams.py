"""Pictures of the ideas (not of measurements): each function draws one concept from objects the
notebook made with plain PyTorch, and returns a :class:`nogradlab.plots.Figure` (a PNG in a notebook,
nothing registered with pyplot).

* :func:`autograd_graph` - the real graph behind a tensor, walked from ``grad_fn.next_functions``,
  each node with the tensors it saved for backward; several tensors side by side (grad on / no_grad).
* :func:`grad_mode_timeline` - grad mode as a per-thread switch: one lane per thread, on/off over time.
* :func:`eval_grad_grid` - the ``model.eval()`` x ``no_grad`` 2x2 grid: what each switch changes.
* :func:`allocator_segments` - caching-allocator segments with their blocks in use and the holes.
* :func:`allocator_steps` - the same after each step of a short sequence of requests, one panel a step (02).
* :func:`where_memory_goes` - a forward pass's memory at its peak, grad vs no_grad (05).
* :func:`autocast_grid` - the 2x2 grid of autocast and no_grad: dtype and grad_fn (06).
* :func:`request_timeline` - an event loop's grad mode over time while requests await (07).
* :func:`named_graph` - one tensor's autograd graph with its parameters named (08).
* :func:`inference_rules` - what a tensor made under each mode may do outside it, tried live (09).
* :func:`modes_table` - grad, ``requires_grad_(False)``, ``no_grad``, ``inference_mode``, ``eval()`` side by
  side, each cell found by running it (00).
"""
from __future__ import annotations

import asyncio
import threading
import time
import warnings

import torch

from nogradlab.core import format as _format
from nogradlab.lab.plots import Figure

__all__ = ["autograd_graph", "graph_nodes", "grad_mode_timeline", "eval_grad_grid", "allocator_segments",
           "allocator_steps", "where_memory_goes", "autocast_grid", "request_timeline", "named_graph",
           "inference_rules", "modes_table"]

_ON, _OFF, _SAVED, _LEAF = "#2c7fb8", "#d95f0e", "#fdd49e", "#c7e9c0"


def _saved(node) -> list:
    """[(name, shape, bytes)] of the tensors a graph node saved for backward (its ``_saved_*``)."""
    out = []
    for name in dir(node):
        if not name.startswith("_saved_"):
            continue
        try:
            v = getattr(node, name)
        except RuntimeError:  # freed by a backward that did not retain the graph
            out.append((name[7:], "freed", 0))
            continue
        for t in (v if isinstance(v, (tuple, list)) else (v,)):
            if isinstance(t, torch.Tensor):
                out.append((name[7:], tuple(t.shape), t.numel() * t.element_size()))
    return out


def graph_nodes(tensor) -> list:
    """The graph behind ``tensor`` as [(depth, node name, [(saved name, shape, bytes)], [child index])],
    breadth first from ``tensor.grad_fn`` (depth 0); [] when nothing was recorded."""
    root = getattr(tensor, "grad_fn", None)
    if root is None:
        return []
    order, index, depth = [root], {root: 0}, {root: 0}
    children: dict = {0: []}
    i = 0
    while i < len(order):
        node = order[i]
        for nxt, _ in getattr(node, "next_functions", ()):
            if nxt is None:
                continue
            if nxt not in index:
                index[nxt] = len(order)
                depth[nxt] = depth[node] + 1
                children[index[nxt]] = []
                order.append(nxt)
            children[i].append(index[nxt])
        i += 1
    rows = []
    for k, node in enumerate(order):
        name = type(node).__name__
        if name == "AccumulateGrad":
            v = node.variable
            name = f"leaf {tuple(v.shape)}"
        rows.append((depth[node], name, _saved(node), children[k]))
    return rows


def _draw_graph(ax, tensor, title):
    ax.set_axis_off()
    ax.set_title(title, fontsize=10)
    rows = graph_nodes(tensor)
    if not rows:
        ax.text(0.5, 0.5, "grad_fn None\nno graph, nothing saved", ha="center", va="center", fontsize=10,
                bbox=dict(boxstyle="round", fc="white", ec=_OFF, lw=2))
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        return
    levels: dict = {}
    for k, (d, *_rest) in enumerate(rows):
        levels.setdefault(d, []).append(k)
    n_levels = max(levels) + 1
    pos = {}
    for d, ks in levels.items():
        for j, k in enumerate(ks):
            pos[k] = ((j + 1) / (len(ks) + 1), 1 - (d + 0.5) / n_levels)
    for k, (_, _, _, kids) in enumerate(rows):
        for c in kids:
            ax.annotate("", xy=pos[c], xytext=pos[k], arrowprops=dict(arrowstyle="->", color="grey",
                                                                      shrinkA=14, shrinkB=14))
    for k, (_, name, saved, _) in enumerate(rows):
        x, y = pos[k]
        leaf = name.startswith("leaf")
        ax.text(x, y, name, ha="center", va="center", fontsize=8,
                bbox=dict(boxstyle="round", fc=_LEAF if leaf else "white", ec=_ON, lw=1.5))
        if saved:
            text = "\n".join(f"saves {n} {s if s == 'freed' else 'x'.join(map(str, s)) or 'scalar'}"
                             + ("" if s == "freed" else f" ({_format.bytes_(b)})") for n, s, b in saved)
            ax.text(x, y - 0.42 / n_levels, text, ha="center", va="top", fontsize=7,
                    bbox=dict(boxstyle="square", fc=_SAVED, ec="none"))
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.05, 1)


def autograd_graph(*tensors, title: "str | None" = None, **named) -> Figure:
    """Draw the graph autograd recorded behind each tensor, side by side: one box per node of
    ``grad_fn.next_functions`` (leaves in green) and under each node the tensors it saved for
    backward. Keyword tensors are titled by their keyword: ``autograd_graph(grad_on=y, no_grad=y2)``;
    a tensor with ``grad_fn`` None shows that nothing was recorded."""
    panels = [(title or "the graph behind the tensor", t) for t in tensors] + \
        [(k.replace("_", " "), t) for k, t in named.items()]
    if not panels:
        raise TypeError("autograd_graph() needs at least one tensor")
    fig = Figure(figsize=(4.2 * len(panels), 4.2))
    for i, (name, t) in enumerate(panels):
        _draw_graph(fig.add_subplot(1, len(panels), i + 1), t, name)
    fig.tight_layout()
    return fig


def grad_mode_timeline(trace, title: str = "Grad mode is a setting of each thread") -> Figure:
    """``trace``: [(thread name, label, grad enabled)] in the order the points were recorded (e.g.
    ``(threading.current_thread().name, "inside no_grad", torch.is_grad_enabled())``); one lane per
    thread, one box per point, blue when grad was on and orange when off."""
    trace = list(trace)
    threads = list(dict.fromkeys(t for t, _, _ in trace))
    fig = Figure(figsize=(max(6.0, 1.6 * len(trace)), 0.9 + 0.9 * len(threads)))
    ax = fig.add_subplot(1, 1, 1)
    for step, (thread, label, on) in enumerate(trace):
        y = len(threads) - 1 - threads.index(thread)
        ax.barh(y, 0.9, left=step, color=_ON if on else _OFF, alpha=0.85)
        ax.text(step + 0.45, y, f"{label}\n{'grad on' if on else 'grad off'}", ha="center", va="center",
                fontsize=7, color="white")
    ax.set_yticks(range(len(threads)), list(reversed(threads)))
    ax.set_xticks([])
    ax.set_xlabel("time (order in which the points ran)")
    ax.set_title(title, fontsize=10)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    return fig


def eval_grad_grid(outputs: dict, title: str = "Two independent switches") -> Figure:
    """``outputs``: {(layers mode "train" | "eval", grad enabled bool): output tensor} for the same
    input and seed. Draws the 2x2 grid: rows the layers' mode, columns grad on/off; each cell says
    whether the numbers equal the eval row's (what ``eval()`` changes) and whether a graph was
    recorded (what ``no_grad`` changes)."""
    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.add_subplot(1, 1, 1)
    ax.set_axis_off()
    ref = {g: outputs[("eval", g)].detach() for g in (True, False) if ("eval", g) in outputs}
    for r, mode in enumerate(("train", "eval")):
        for c, grad in enumerate((True, False)):
            out = outputs.get((mode, grad))
            if out is None:
                continue
            x0, y0 = 0.1 + 0.45 * c, 0.5 - 0.45 * r
            same = any(torch.allclose(out.detach(), v) for v in ref.values())
            graph = out.grad_fn is not None
            ax.add_patch(__import__("matplotlib.patches", fromlist=["x"]).FancyBboxPatch(
                (x0, y0), 0.4, 0.38, boxstyle="round,pad=0.01", fc=_LEAF if same else _SAVED,
                ec=_ON if graph else _OFF, lw=2.5, transform=ax.transAxes))
            ax.text(x0 + 0.2, y0 + 0.19,
                    f"numbers: {'eval-mode values' if same else 'dropout / batch stats'}\n"
                    f"graph: {type(out.grad_fn).__name__ if graph else 'none'}\n"
                    f"out[0,0] = {out.flatten()[0].item():.4f}",
                    ha="center", va="center", fontsize=8, transform=ax.transAxes)
    for c, grad in enumerate((True, False)):
        ax.text(0.3 + 0.45 * c, 0.95, "grad on" if grad else "torch.no_grad()", ha="center",
                fontsize=10, transform=ax.transAxes, color=_ON if grad else _OFF, weight="bold")
    for r, mode in enumerate(("train", "eval")):
        ax.text(0.06, 0.69 - 0.45 * r, f"model.{mode}()", ha="right", va="center", fontsize=10,
                transform=ax.transAxes, rotation=90)
    ax.set_title(title + ": rows change the numbers, columns change the graph", fontsize=10)
    return fig


def _segments_of(segments) -> list:
    """[(size, blocks)] oldest segment first: an allocator model's snapshot lists them by address, and
    the model gives each new segment an address below the older ones (``Allocator._new_address``)."""
    segments = list(segments)
    if segments and all(hasattr(s, "address") for s in segments):
        segments.sort(key=lambda s: -s.address)
    return [(s.size, list(s.blocks)) if hasattr(s, "blocks") else (s[0], list(s[1])) for s in segments]


def _draw_segments(ax, segs, title: str) -> None:
    """One bar per segment, blocks in use dark, free blocks (cached, still reserved) as hatched holes."""
    mib = 2 ** 20
    for i, (_size, blocks) in enumerate(segs):
        y, left = len(segs) - 1 - i, 0
        for nbytes, used in blocks:
            ax.barh(y, nbytes / mib, left=left / mib, color=_ON if used else "white", ec="black",
                    hatch=None if used else "//", height=0.6)
            ax.text((left + nbytes / 2) / mib, y, f"{nbytes / mib:g} MiB\n{'in use' if used else 'free'}",
                    ha="center", va="center", fontsize=7, color="white" if used else "black",
                    bbox=None if used else dict(fc="white", ec="none", pad=1))
            left += nbytes
    # segment 1, the oldest, at the top
    ax.set_yticks(range(len(segs)), [f"segment {len(segs) - k} ({segs[len(segs) - 1 - k][0] / mib:g} MiB)"
                                     for k in range(len(segs))])
    ax.set_ylim(-0.6, max(len(segs), 1) - 0.4)
    ax.set_title(title, fontsize=10)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def allocator_segments(segments, title: str = "Caching-allocator segments") -> Figure:
    """``segments``: ``nogradlab.allocator.Allocator().snapshot()`` (objects with ``size`` and
    ``blocks`` = [(bytes, in use)]) or [(size, [(bytes, in use)])]. One bar per segment, the oldest on
    top, blocks in use dark, free blocks (cached, still reserved) as hatched holes."""
    segs = _segments_of(segments)
    fig = Figure(figsize=(7.0, 0.9 + 0.7 * len(segs)))
    ax = fig.add_subplot(1, 1, 1)
    _draw_segments(ax, segs, title)
    ax.set_xlabel("MiB from the segment's start")
    fig.tight_layout()
    return fig


def allocator_steps(steps) -> Figure:
    """``steps``: [(caption, segments)], the segments as :func:`allocator_segments` takes them (an
    allocator's ``snapshot()`` after each step of a sequence). One panel per step, top to bottom, on one
    MiB scale, so a learner can follow each request to the block it lands in."""
    steps = list(steps)
    if not steps:
        raise ValueError("allocator_steps needs at least one (caption, segments) step")
    drawn = [(str(caption), _segments_of(segs)) for caption, segs in steps]
    widest = max((sum(b for b, _ in blocks) for _, segs in drawn for _, blocks in segs), default=0) / 2 ** 20
    heights = [max(len(segs), 1) for _, segs in drawn]
    fig = Figure(figsize=(7.0, 0.6 + sum(0.55 * h + 0.55 for h in heights)))
    grid = fig.add_gridspec(len(drawn), 1, height_ratios=heights)
    for k, (caption, segs) in enumerate(drawn):
        ax = fig.add_subplot(grid[k, 0])
        _draw_segments(ax, segs, caption)
        ax.set_xlim(0, widest * 1.02 or 1)
    fig.axes[-1].set_xlabel("MiB from the segment's start")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------- notebooks 05-09

_RED, _GREEN, _GREY = "#d62728", "#2ca02c", "#bbbbbb"


def _mib(n: float) -> float:
    return n / 2 ** 20


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
    from nogradlab.core import memory

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
    colours = ["#7f7f7f", "#bcbd22", _RED, "#1f77b4"]
    fig = Figure(figsize=(8, 2.6))
    ax = fig.subplots()
    for y, (_label, vals) in enumerate(reversed(list(rows.items()))):
        left = 0.0
        for part, v, c in zip(parts, vals, colours):
            ax.barh(y, _mib(v), left=left, color=c, edgecolor="white", label=part if y == 0 else None)
            if v > 0.06 * sum(rows["grad on"]):
                ax.text(left + _mib(v) / 2, y, _format.bytes_(v), ha="center", va="center", fontsize=8, color="white")
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
            ax.add_patch(_square(j, 1 - i, _RED if graph else _GREEN))
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


def request_timeline(requests, *, step_s: float = 0.002) -> Figure:
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
        ax.plot([x1], [y], marker="o", color=_RED if grad else _GREEN, markersize=8)
        ax.text(x1 + 1, y, f"model call: grad {'on' if grad else 'off'}", fontsize=7, va="center")
    for (a, ga), (b, _) in zip(samples, samples[1:]):
        ax.barh(0, (b - a) * 1e3, left=(a - origin[0]) * 1e3, color=_RED if ga else _GREEN, height=0.5)
    ax.set_yticks(range(len(names) + 1), ["the thread's\ngrad mode", *reversed(names)], fontsize=8)
    ax.set_xlabel("ms since the first request (red: grad on, green: grad off)")
    ax.set_title("One event loop, one thread, one grad mode", fontsize=10)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------------ 08: a graph


def named_graph(t: torch.Tensor, *, names: "dict | None" = None, title: str = "",
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
            colour = _RED if saved else "#1f77b4"
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
        ("w + t, t not saved\n(runs today, not promised)", lambda t: w + t is not None, "works", "refused"),
        ("w * t\n(t saved for backward)", lambda t: w * t is not None, "works", "refused"),
        ("t.add_(1)\n(in place)", lambda t: t.add_(1) is not None, "works", "refused"),
    ]
    fig = Figure(figsize=(8, 2.8))
    ax = fig.subplots()
    for i, (mode, t) in enumerate(made.items()):
        for j, (label, fn, yes, no) in enumerate(tests):
            text, good = attempt(lambda fn=fn, t=t: fn(t), yes, no)
            ax.add_patch(_square(j, 1 - i, _GREEN if good else _RED))
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


# ------------------------------------------------------------------------------------ 00: the modes side by side

_ROWS = [  # (property, lesson that shows it)
    ("records a graph (`grad_fn`)", "01_what_no_grad_does.ipynb"),
    ("saves tensors for backward", "02_inside_the_engine.ipynb"),
    ("what it makes has a version counter (bumped in place)", "09_beyond_no_grad.ipynb"),
    ("tracks views of what it makes", "09_beyond_no_grad.ipynb"),
    ("forward-mode AD", "09_beyond_no_grad.ipynb"),
    ("its results usable in training later", "09_beyond_no_grad.ipynb"),
    ("changes layers (Dropout, BatchNorm)", "04_eval_vs_no_grad.ipynb"),
    ("a thread started inside sees it", "07_production_serving.ipynb"),
]


def _mode_facts(prepare, context) -> list:
    """The eight facts of one way of running a model (``prepare`` the model, then run under ``context``), each
    found by running it: [True/False/str] in the order of ``_ROWS``."""
    import torch.autograd.forward_ad as fwAD  # noqa: PLC0415

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Dropout(0.5))
    prepare(model)
    x = torch.ones(4, 64)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t), context():
        out = model(x)
        again = model(x)
        made = x * 2
        try:
            version = made._version
            made.add_(1)
            bumps = made._version > version
        except RuntimeError:  # an inference tensor has no version counter
            bumps = False
        view = made[:1]._is_view()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # forward AD's first use warns about torch.jit.script
        with fwAD.dual_level():
            dual = fwAD.make_dual(torch.ones(3), torch.ones(3))
            with context():
                forward_ad = fwAD.unpack_dual(dual * 2).tangent is not None
    try:
        (torch.ones(64, requires_grad=True) * out).sum().backward()
        later = True
    except RuntimeError:
        later = False
    seen = {}

    def worker():
        seen["graph"] = model(x).grad_fn is not None
        seen["layers"] = torch.equal(model(x), model(x))

    with context():
        t = threading.Thread(target=worker)
        t.start()
        t.join()
    graph, layers = out.grad_fn is not None, torch.equal(out, again)
    switched = (not graph) or layers  # this way changes something against grad on
    thread = "" if not switched else ("no" if (seen["graph"], seen["layers"]) != (graph, layers) else "yes")
    return [graph, bool(saved), bumps, view, forward_ad, later, layers, thread]


def modes_table():
    """grad on, ``requires_grad_(False)``, ``no_grad``, ``inference_mode`` and ``model.eval()`` side by side:
    records a graph, saves tensors, gives version counters, tracks views, forward-mode AD, results usable in
    training later, changes layers, seen by a thread started inside. Every cell is found by running it now
    (a small Linear + Dropout model), and links to the lesson that shows it. A Markdown table."""
    import contextlib  # noqa: PLC0415

    from IPython.display import Markdown  # noqa: PLC0415

    none = contextlib.nullcontext
    ways = {
        "grad on": (lambda m: None, none),
        "`requires_grad_(False)`": (lambda m: m.requires_grad_(False), none),
        "`no_grad()`": (lambda m: None, torch.no_grad),
        "`inference_mode()`": (lambda m: None, torch.inference_mode),
        "`model.eval()`": (lambda m: m.eval(), none),
    }
    facts = {name: _mode_facts(*way) for name, way in ways.items()}
    with torch.inference_mode():
        inference_out = torch.ones(1)
    lines = ["| | " + " | ".join(ways) + " |", "|---" * (len(ways) + 1) + "|"]
    for i, (label, lesson) in enumerate(_ROWS):
        cells = []
        for name in ways:
            v = facts[name][i]
            text = v if isinstance(v, str) else ("yes" if v else "no")
            if text and name == "`inference_mode()`" and i == 5 and inference_out.is_inference():
                text += " (the contract)" if not v else " (today; the contract says no)"
            cells.append(f"[{text}]({lesson})" if text else "")
        lines.append(f"| [{label}]({lesson}) | " + " | ".join(cells) + " |")
    return Markdown("\n".join(lines))
