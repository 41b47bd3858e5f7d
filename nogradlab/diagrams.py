"""Pictures of the ideas (not of measurements): each function draws one concept from objects the
notebook made with plain PyTorch, and returns a :class:`nogradlab.plots.Figure` (a PNG in a notebook,
nothing registered with pyplot).

* :func:`autograd_graph` - the real graph behind a tensor, walked from ``grad_fn.next_functions``,
  each node with the tensors it saved for backward; several tensors side by side (grad on / no_grad).
* :func:`grad_mode_timeline` - grad mode as a per-thread switch: one lane per thread, on/off over time.
* :func:`eval_grad_grid` - the ``model.eval()`` x ``no_grad`` 2x2 grid: what each switch changes.
* :func:`allocator_segments` - caching-allocator segments with their blocks in use and the holes.
"""
from __future__ import annotations

import torch

from .plots import Figure

__all__ = ["autograd_graph", "graph_nodes", "grad_mode_timeline", "eval_grad_grid", "allocator_segments"]

_ON, _OFF, _SAVED, _LEAF = "#2c7fb8", "#d95f0e", "#fdd49e", "#c7e9c0"


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


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
                             + ("" if s == "freed" else f" ({_human(b)})") for n, s, b in saved)
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


def allocator_segments(segments, title: str = "Caching-allocator segments") -> Figure:
    """``segments``: ``nogradlab.allocator.Allocator().snapshot()`` (objects with ``size`` and
    ``blocks`` = [(bytes, in use)]) or [(size, [(bytes, in use)])]. One bar per segment, blocks in
    use dark, free blocks (cached, still reserved) as hatched holes."""
    segs = [(s.size, list(s.blocks)) if hasattr(s, "blocks") else (s[0], list(s[1])) for s in segments]
    fig = Figure(figsize=(7.0, 0.9 + 0.7 * len(segs)))
    ax = fig.add_subplot(1, 1, 1)
    mib = 2 ** 20
    for i, (size, blocks) in enumerate(segs):
        y, left = len(segs) - 1 - i, 0
        for nbytes, used in blocks:
            ax.barh(y, nbytes / mib, left=left / mib, color=_ON if used else "white", ec="black",
                    hatch=None if used else "//", height=0.6)
            ax.text((left + nbytes / 2) / mib, y, f"{nbytes / mib:g} MiB\n{'in use' if used else 'free'}",
                    ha="center", va="center", fontsize=7, color="white" if used else "black",
                    bbox=None if used else dict(fc="white", ec="none", pad=1))
            left += nbytes
    ax.set_yticks(range(len(segs)), [f"segment {len(segs) - k} ({segs[len(segs) - 1 - k][0] / mib:g} MiB)"
                                     for k in range(len(segs))])
    ax.set_xlabel("MiB from the segment's start")
    ax.set_title(title, fontsize=10)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    return fig
