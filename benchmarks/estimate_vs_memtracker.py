"""The CPU estimate (fake tensors, ``memory.estimate(..., "cpu")``) against PyTorch's own MemTracker
(``torch.distributed._tools.mem_tracker``) on a real CPU run of the same step, for models the tests do not
use: the total peak (weights, inputs and the step's own allocations) in bytes, per mode. Printed, never
asserted. Small inputs keep it cheap (the bytes differ in size, not in kind).

    python benchmarks/estimate_vs_memtracker.py [--models mobilenet_v3_large,...] [--input 3x64x64] [--batch 2]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torchvision
from torch.distributed._tools.mem_tracker import MemTracker

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nogradlab import memory, modes, ownmodel  # noqa: E402

MODELS = ("mobilenet_v3_large", "efficientnet_b0", "regnet_y_400mf", "shufflenet_v2_x1_0", "squeezenet1_1")


def tracked(own: ownmodel.Model, b: int, mode: str) -> int:
    """MemTracker's peak on the CPU for one real step (the model and inputs made inside the tracker, so
    that they are counted as the estimate's baseline counts them)."""
    torch.manual_seed(0)
    mt = MemTracker()
    with mt:
        model = own.build("cpu")
        x = own.make_input(b, "cpu")
        if mode == "train":
            opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=True)
            mt.track_external(model, opt)
            memory.train_step(model, x, None, own.loss, opt)
        else:
            with modes.setting(mode, model=model):
                out = ownmodel.forward(model, x)  # noqa: F841 - alive at the peak
    return mt.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"]

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--input", default="3x64x64")
    p.add_argument("--batch", type=int, default=2)
    args = p.parse_args()
    shape = ownmodel.parse_shape(args.input)
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}; inputs {args.input}, batch {args.batch}")
    print(f"{'model':<22}{'mode':<16}{'estimate':>14}{'MemTracker':>14}{'ratio':>8}")
    for name in args.models.split(","):
        f = getattr(torchvision.models, name)
        own = ownmodel.Model(lambda f=f: f(weights=None), shape, name=name)
        for mode in ("eval+grad", "eval+no_grad", "train"):
            kw = dict(step="train") if mode == "train" else dict(mode=mode)
            with memory.fused_paths_off():
                est = memory.estimate(own, args.batch, "cpu", **kw).total_peak_bytes
            real = tracked(own, args.batch, mode)
            print(f"{name:<22}{mode:<16}{est:>14}{real:>14}{est / real:>8.3f}", flush=True)


if __name__ == "__main__":
    main()
