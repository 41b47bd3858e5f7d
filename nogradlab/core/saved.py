"""What one forward saves for backward, layer by layer: :func:`saved_by_layer` runs the model once
with grad on under ``torch.autograd.graph.saved_tensors_hooks`` and counts each saved storage once,
in the innermost module running when it was first saved; attention layers that save an L x L matrix
are named. Notebook 10 shows it on your own model.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import torch
from torch import nn

from nogradlab.core import format as _format
from nogradlab.core import memory as _memory
from nogradlab.core import ownmodel

__all__ = ["SavedByLayer", "saved_by_layer"]



@dataclass
class SavedByLayer:
    """What one forward saved for backward: distinct storages (parameters and buffers excluded), each
    counted once, in the innermost module that was running when it was first saved."""

    total_bytes: int
    tensors: int
    rows: list  # [{"layer", "type", "saved_bytes", "tensors", "largest"}] in the order the layers ran
    attention: list = field(default_factory=list)  # [{"layer", "type", "saves_LxL", "shapes"}]
    #: [{"block", "type", "saved_bytes", "input_bytes", "after_bytes", "frees"}]: every module with submodules
    #: (the model itself left out), what the layers inside it save, the bytes of its inputs, what the layers
    #: after it save, and ``frees``, what recomputing it in backward (``torch.utils.checkpoint.checkpoint``,
    #: which keeps the block's inputs) would take off a training step's peak: the peak falls by what the block
    #: saves, less its inputs, until backward recomputes it, and then everything saved before it is still
    #: held; so the block frees the lesser of its own saved bytes and those saved after it, less its inputs
    #: (a block that is nearly the whole model frees nothing). Largest first.
    blocks: list = field(default_factory=list)

    def best_block(self) -> "dict | None":
        """The block whose recomputation takes the most off the peak, or None where none frees anything."""
        return next((b for b in self.blocks if b["frees"] > 0), None)

    def frame(self, top: int = 12):
        """The ``top`` layers by bytes saved (the rest summed in one row), as a pandas DataFrame."""
        import pandas as pd

        rows = sorted((r for r in self.rows if r["saved_bytes"]), key=lambda r: -r["saved_bytes"])
        out = [{"layer": r["layer"], "type": r["type"], "saved": _format.bytes_(r["saved_bytes"]),
                "share": _format.percent(r["saved_bytes"] / self.total_bytes, 1), "tensors": r["tensors"],
                "largest saved": "x".join(map(str, r["largest"]))} for r in rows[:top]]
        rest = rows[top:]
        if rest:
            n = sum(r["saved_bytes"] for r in rest)
            out.append({"layer": f"the other {len(rest)} layers", "type": "", "saved": _format.bytes_(n),
                        "share": _format.percent(n / self.total_bytes, 1), "tensors": sum(r["tensors"] for r in rest),
                        "largest saved": ""})
        return pd.DataFrame(out, columns=["layer", "type", "saved", "share", "tensors", "largest saved"])

    def by_type(self) -> dict:
        """Bytes saved per layer type (``{"Conv2d": n, ...}``), largest first."""
        out: dict = {}
        for r in self.rows:
            out[r["type"]] = out.get(r["type"], 0) + r["saved_bytes"]
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _is_attention(module) -> bool:
    return isinstance(module, nn.MultiheadAttention) or bool(re.search(r"attn|attention", type(module).__name__, re.I))


def _is_lxl(shape: tuple, inputs: set) -> bool:
    """A saved tensor shaped like attention weights: at least 3 dimensions (batch or heads, L, L), the last
    two equal to a sequence length of the layer's input (a dimension of it other than the last, the
    features), and not the shape of an input itself (a (batch, L, d) input whose L equals d)."""
    if len(shape) < 3 or shape[-1] != shape[-2] or shape[-1] < 2 or shape in inputs:
        return False
    lengths = {d for x in inputs for d in x[:-1]}
    return shape[-1] in lengths


def saved_by_layer(model: nn.Module, inputs) -> SavedByLayer:
    """Run ``model(inputs)`` once with grad on (a tuple is passed as positional arguments, a dict as
    keywords) and record, with ``torch.autograd.graph.saved_tensors_hooks``, every tensor autograd saves
    for backward: per layer the distinct storages first saved while it was the innermost running module.
    For attention layers (``nn.MultiheadAttention`` or a class named ...Attention/...Attn): whether one
    of the tensors they saved themselves is shaped like an L x L matrix of attention weights (a heuristic
    on shapes, :func:`_is_lxl`: L is a sequence length of the layer's input)."""
    from torch.utils.weak import WeakIdKeyDictionary

    mods = _memory._ModuleStack()
    seen = WeakIdKeyDictionary()
    in_shapes: dict = {}  # id(attention module) -> the shapes of its tensor inputs
    per: dict = {}  # id(module) -> [bytes, tensors, largest shape, largest bytes]
    shapes: dict = {}  # id(attention module) -> saved shapes
    total = [0, 0]

    weights = _weight_storages(model)

    def pack(t):
        st = _memory._storage(t)
        if st is None or isinstance(t, nn.Parameter) or st in weights or st in mods.excluded:
            return t.detach()
        cur = mods.current
        if cur is not None and _is_attention(cur):
            shapes.setdefault(id(cur), []).append(tuple(t.shape))
        if st not in seen:
            seen[st] = True
            n = st.nbytes()
            total[0] += n
            total[1] += 1
            order.append(n)
            rec = per.setdefault(None if cur is None else id(cur), [0, 0, (), 0])
            rec[0] += n
            rec[1] += 1
            if n > rec[3]:
                rec[2], rec[3] = tuple(t.shape), n
        return t.detach()  # an alias of the storage: returning t itself would make a reference cycle

    def unpack(t):
        return t

    in_bytes: dict = {}  # id(module) -> bytes of the distinct storages of its first call's tensor inputs
    order: list = []  # the bytes of each distinct storage saved, in the order they were first saved
    ended: dict = {}  # id(module) -> len(order) when its first call returned

    def pre(module, args):  # (global forward pre-hooks see the positional arguments only)
        if id(module) not in in_bytes:
            sts = {id(st): st.nbytes() for t in ownmodel.model_tensors(args)
                   if (st := _memory._storage(t)) is not None and st not in weights}
            in_bytes[id(module)] = sum(sts.values())
        if _is_attention(module):
            in_shapes.setdefault(id(module), set()).update(tuple(t.shape) for t in ownmodel.model_tensors(args))

    def post(module, args, output):
        ended.setdefault(id(module), len(order))

    from torch.nn.modules import module as _m

    hooks = [_m.register_module_forward_pre_hook(pre), _m.register_module_forward_hook(post)]
    try:
        with mods, torch.autograd.graph.saved_tensors_hooks(pack, unpack), torch.enable_grad():
            out = ownmodel.forward(model, inputs)
    finally:
        for h in hooks:
            h.remove()
    del out
    _memory.release()
    names = mods.names()
    rows = _layer_rows(mods, names, per)
    attention = _attention_rows(mods, names, shapes, in_shapes)
    after = {i: sum(order[k:]) for i, k in ended.items()}
    blocks = _block_rows(model, mods, names, per, in_bytes, after)
    return SavedByLayer(total_bytes=total[0], tensors=total[1], rows=rows, attention=attention, blocks=blocks)


def _weight_storages(model: nn.Module):
    """The storages of every parameter and buffer of ``model``, also of modules whose forward never runs
    (MultiheadAttention uses out_proj's weight): what autograd saves of them is no activation."""
    from torch.utils.weak import WeakIdKeyDictionary

    weights = WeakIdKeyDictionary()
    for w in list(model.parameters()) + list(model.buffers()):
        if _memory._storage(w) is not None:
            weights[_memory._storage(w)] = True
    return weights


def _layer_rows(mods, names: dict, per: dict) -> list:
    """One row per module that ran (and one for what was saved outside any): bytes and tensors it saved first."""
    rows = []
    for i, m in mods.seen.items():
        b, n, largest, _ = per.get(i, (0, 0, (), 0))
        rows.append({"layer": names.get(i, type(m).__name__) or type(m).__name__, "type": type(m).__name__,
                     "saved_bytes": b, "tensors": n, "largest": largest})
    if None in per:  # saved outside any module (the model's own forward code around its layers)
        b, n, largest, _ = per[None]
        rows.append({"layer": "(outside any layer)", "type": "", "saved_bytes": b, "tensors": n, "largest": largest})
    return rows


def _attention_rows(mods, names: dict, shapes: dict, in_shapes: dict) -> list:
    """The attention layers that saved something themselves: whether an L x L matrix is among it (:func:`_is_lxl`)."""
    attention = []
    for i, m in mods.seen.items():
        if _is_attention(m) and shapes.get(i):  # attention layers that saved something themselves
            s = shapes[i]
            attention.append({"layer": names.get(i, type(m).__name__), "type": type(m).__name__,
                              "saves_LxL": any(_is_lxl(x, in_shapes.get(i, set())) for x in s),
                              "shapes": sorted(set(s), key=lambda x: -math.prod(x))[:4]})
    return attention


def _block_rows(model: nn.Module, mods, names: dict, per: dict, in_bytes: dict, after: dict) -> list:
    """Each named block (a module with children, not the model): what it and its children saved, its input's
    bytes, what was saved after it, and what recomputing it would take off the peak (``frees``, see
    :attr:`SavedByLayer.blocks`), largest first."""
    blocks = []
    for i, m in mods.seen.items():
        kids = [c for c in m.modules() if c is not m]
        if not kids or m is model or i not in names:
            continue
        inside = per.get(i, (0,))[0] + sum(per.get(id(c), (0,))[0] for c in kids)
        later = after.get(i, 0)
        blocks.append({"block": names[i], "type": type(m).__name__, "saved_bytes": inside,
                       "input_bytes": in_bytes.get(i, 0), "after_bytes": later,
                       "frees": max(0, min(inside, later) - in_bytes.get(i, 0)),
                       "has_batchnorm": any(isinstance(c, nn.modules.batchnorm._BatchNorm) for c in kids)})
    blocks.sort(key=lambda b: -b["frees"])
    return blocks
