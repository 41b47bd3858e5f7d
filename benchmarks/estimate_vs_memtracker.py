"""The CPU estimate (fake tensors, ``memory.estimate(..., "cpu")``) against PyTorch's own MemTracker
(``torch.distributed._tools.mem_tracker``) and nogradlab's storage-level ``memory.measure`` on a real CPU run
of the same step, for models the tests do not use: the total peak (weights, inputs and the step's own
allocations) in bytes, per mode. Printed, never asserted. Small inputs keep it cheap (the bytes differ in
size, not in kind).

The model and its inputs are built before MemTracker is entered and handed to it with ``track_external``
(PyTorch's documented way to count what was made outside it), so that its peak is the step's, as the
estimate's is. Built inside the tracker, the model's own construction is counted too: a note says where
that construction peaks above the step (googlenet: ``torch.nn.init.trunc_normal_``'s temporaries).

``lstm``, ``self_attention`` and ``checkpointed`` are issue 41's kinds: a recurrent model (oneDNN's LSTM
workspace), an attention model (a submodule's weights used without calling it) and a checkpointed conv net
(recomputed in the backward); a mark (*) and a note follow a cell whose estimate names memory no tensor shows
(oneDNN's scratch buffers, which MemTracker does not see either).

``patch_vit`` is the small patch transformer of issue 31 (a Conv2d patch embedding, a position table, an
``nn.TransformerEncoder`` with ``norm_first=True`` and ``enable_nested_tensor=False``, a linear head); its
real runs are made with the fused fast path off, as the CPU estimate traces it, and one more row shows
MemTracker with the fast path on.

    python benchmarks/estimate_vs_memtracker.py [--models googlenet,regnet_y_400mf,patch_vit,lstm,...]
        [--input 3x64x64] [--batch 2]
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import warnings
from pathlib import Path

import torch
import torchvision
from torch import nn
from torch.distributed._tools.mem_tracker import MemTracker

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nogradlab.core import memory, modes, ownmodel  # noqa: E402
from nogradlab.estimate import fake  # noqa: E402

MODELS = ("mobilenet_v3_large", "efficientnet_b0", "regnet_y_400mf", "shufflenet_v2_x1_0", "squeezenet1_1",
          "patch_vit", "lstm", "self_attention", "checkpointed")
MODES = ("eval+grad", "eval+no_grad", "train")


class PatchViT(nn.Module):
    """Issue 31's patch transformer: Conv2d patch embedding, position table, a pre-norm
    nn.TransformerEncoder without nested tensors, a linear head."""

    def __init__(self, img=64, patch=8, d=64, heads=4, layers=4, classes=10):
        super().__init__()
        self.embed = nn.Conv2d(3, d, patch, stride=patch)
        self.pos = nn.Parameter(torch.zeros(1, (img // patch) ** 2, d))
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2) + self.pos
        return self.head(self.encoder(x).mean(1))


class LSTMClassifier(nn.Module):
    """Recurrent (issue 41): a 2-layer LSTM over a sequence of feature vectors, its last step classified.
    oneDNN's ``mkldnn_rnn_layer`` keeps a workspace for the backward that its fake kernel leaves empty."""

    def __init__(self, features=16, hidden=64, layers=2, classes=10):
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        return self.head(self.lstm(x)[0][:, -1])


class SelfAttention(nn.Module):
    """Attention (issue 41): nn.MultiheadAttention on one sequence, whose ``out_proj`` weight is used without
    calling the submodule (it was counted as a saved activation), with a feed-forward block and a head."""

    def __init__(self, d=64, heads=4, classes=10):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.norm = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        x = self.norm(x + self.attn(x, x, x, need_weights=False)[0])
        return self.head((x + self.ff(x)).mean(1))


class Checkpointed(nn.Module):
    """Activation checkpointing (issue 41): two conv blocks under ``torch.utils.checkpoint`` (non-reentrant),
    recomputed in the backward."""

    def __init__(self, width=32, classes=10):
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Conv2d(c, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU()) for c in (3, width))
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint

        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=False)
        return self.head(x.mean((2, 3)))


# models of their own kinds: (builder, one sample's input shape; None: --input)
OWN = {"patch_vit": (None, None), "lstm": (LSTMClassifier, (32, 16)), "self_attention": (SelfAttention, (16, 64)),
       "checkpointed": (Checkpointed, None)}


def factory(name: str, shape):
    if name == "patch_vit":
        return lambda: PatchViT(img=shape[-1])
    if name in OWN:
        return OWN[name][0]
    f = getattr(torchvision.models, name)
    return lambda: f(weights=None)


def build(own: ownmodel.Model, b: int, mode: str):
    torch.manual_seed(0)
    model = own.build("cpu")
    x = own.make_input(b, "cpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=True) if mode == "train" else None
    return model, x, opt


def step(own, model, x, opt, mode):
    if mode == "train":
        return memory.train_step(model, x, None, own.loss, opt)
    with modes.setting(mode, model=model):
        return ownmodel.forward(model, x)


def tracked(own: ownmodel.Model, b: int, mode: str, fast_path: bool = False) -> int:
    """MemTracker's peak on the CPU for one real step, the model, inputs and optimizer registered with
    ``track_external`` before the tracker is entered."""
    model, x, opt = build(own, b, mode)
    mt = MemTracker()
    mt.track_external(model, x, opt)
    paths = contextlib.nullcontext() if fast_path else memory.fused_paths_off()
    with paths, mt:
        out = step(own, model, x, opt, mode)  # noqa: F841 - alive at the peak
    return mt.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"]


def measured(own: ownmodel.Model, b: int, mode: str) -> int:
    """nogradlab's storage-level tracking of the same real step: what is resident before it plus its peak."""
    model, x, opt = build(own, b, mode)
    with memory.fused_paths_off():
        rep = memory.measure(lambda: step(own, model, x, opt, mode), "cpu", method="storage")
    return memory.resident_bytes(model, [x]) + rep.peak_bytes


def build_peak(own: ownmodel.Model, b: int) -> int:
    """MemTracker's peak while the model and its inputs are built inside it (construction only)."""
    torch.manual_seed(0)
    mt = MemTracker()
    with mt:
        model = own.build("cpu")  # noqa: F841
        x = own.make_input(b, "cpu")  # noqa: F841
    return mt.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--input", default="3x64x64")
    p.add_argument("--batch", type=int, default=2)
    args = p.parse_args()
    shape = ownmodel.parse_shape(args.input)
    names = args.models.split(",")
    bad = [n for n in names if n not in OWN and not callable(getattr(torchvision.models, n, None))]
    if bad:
        p.error(f"unknown model(s) {', '.join(bad)}: a torchvision.models builder or one of {', '.join(OWN)}")
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}; inputs {args.input}, batch {args.batch}")
    print(f"{'model':<22}{'mode':<28}{'estimate':>12}{'MemTracker':>12}{'measure':>12}{'ratio':>8}")
    notes, equal, noted, cells = [], 0, 0, 0
    for name in names:
        own = ownmodel.Model(factory(name, shape), OWN.get(name, (None, None))[1] or shape, name=name)
        peaks = []
        for mode in MODES:
            kw = dict(step="train") if mode == "train" else dict(mode=mode)
            with memory.fused_paths_off(), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch's FakeTensor data_ptr warning inside nn.LSTM
                rep = fake.estimate(own, args.batch, "cpu", **kw)
            est = rep.total_peak_bytes
            real = tracked(own, args.batch, mode)
            meas = measured(own, args.batch, mode)
            peaks.append(real)
            cells += 1
            equal += est == real == meas
            # memory no tensor shows (oneDNN's scratch): neither column counts it, the estimate names it
            mark = " *" if rep.missed else ""
            noted += bool(rep.missed) and not est == real == meas
            for m in rep.missed:
                n = f"# {name} {mode}: {m['op']}: {m['why']}" + (f", about {m['bytes']} B" if m["bytes"] else "")
                if n not in notes:
                    notes.append(n)
            print(f"{name:<22}{mode:<28}{est:>12}{real:>12}{meas:>12}{est / real:>8.3f}{mark}", flush=True)
        if name == "patch_vit":
            real = tracked(own, args.batch, "eval+no_grad", fast_path=True)
            print(f"{name:<22}{'eval+no_grad (fast path on)':<28}{'':>12}{real:>12}{'':>12}{'':>8}", flush=True)
        bp = build_peak(own, args.batch)
        if bp > min(peaks):
            notes.append(f"# {name}: built inside MemTracker, its construction peaks at {bp} B, above the "
                         f"{', '.join(m for m, pk in zip(MODES, peaks) if pk < bp)} step's peak: not held by any step")
    print(f"# {equal} of {cells} cells equal to the byte in all three columns; {noted} others noted (*)")
    for n in notes:
        print(n)


if __name__ == "__main__":
    main()
