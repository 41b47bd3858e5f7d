"""Writes ``largest_batches_reference.json``: the largest batch of every case below, from the search of the
commit it runs on (each estimate on a virtual CUDA device, full scale). The answers ``largest_batch`` gave
before the allocation programs (issue 38), kept so that tests/estimate/test_programs.py holds today's search
to them.

    python tests/data/make_largest_batches.py [--out tests/data/largest_batches_reference.json]

Cases: the 26 searches of the H200 reference (results/h200-alloc-probe: 4 workloads x 3 modes x 12 and
16 GiB, native, and two with expandable_segments), and the benchmark workloads in the four modes under the
budgets notebook 02's slider moves through (benchmarks/budget_slider.py: 3, 7, 12, 13.5, 20, 30 GiB), and
two torchvision models of benchmarks/estimate_speed.py under 12 GiB.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

GiB = 2 ** 30


def cases():
    with open(os.path.join(ROOT, "results", "h200-alloc-probe", "h200-2026-11-30-largest_batch.json")) as f:
        d = json.load(f)
    out = [dict(workload=s["workload"], mode=s["mode"], budget_bytes=s["budget_bytes"], allocator=s["allocator"],
                source="h200") for s in d["searches"]
           + [s for s in d["more_searches"] if s["allocator"] == "expandable_segments"]]
    for wl in ("resnet50", "transformer_base", "unet", "mlp"):
        for mode in ("train", "grad", "eval+no_grad", "inference_mode"):
            for gib in (3, 7, 12, 13.5, 20, 30):
                out.append(dict(workload=wl, mode=mode, budget_bytes=int(gib * GiB), allocator="native",
                                source="slider"))
    for wl in ("mobilenet_v3_large", "efficientnet_b0"):
        for mode in ("train", "grad", "eval+no_grad", "inference_mode"):
            out.append(dict(workload=wl, mode=mode, budget_bytes=12 * GiB, allocator="native", source="torchvision"))
    return out


def model_of(name):
    from nogradlab.core import workloads
    if name in workloads.names():
        return name
    import torchvision

    return getattr(torchvision.models, name)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                 "largest_batches_reference.json"))
    a = p.parse_args()
    from nogradlab.estimate import batch

    rows = []
    t0 = time.perf_counter()
    for c in cases():
        wl = model_of(c["workload"])
        kw = dict(inputs=(3, 224, 224)) if not isinstance(wl, str) else dict(scale="full")
        r = batch.largest_batch(wl, c["mode"], c["budget_bytes"], "cuda", method="estimate",
                                allocator=c["allocator"], **kw)
        rows.append(dict(c, batch=r.batch))
        print(f"{c['workload']:18s} {c['mode']:14s} {c['budget_bytes'] / GiB:5.1f} GiB {c['allocator']:20s} "
              f"{r.batch:8d} {r.seconds:6.2f} s", flush=True)
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    import torch

    with open(a.out, "w") as f:
        json.dump({"what": "largest_batch(method='estimate') on a virtual CUDA device, full scale, per case",
                   "commit": commit, "torch": torch.__version__, "seconds": round(time.perf_counter() - t0, 1),
                   "cases": rows}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
