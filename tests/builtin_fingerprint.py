"""The estimates of the four built-in workloads at tiny scale, as numbers: written once to
tests/data/builtin_estimates.json (``python tests/builtin_fingerprint.py``, from the code before a
change) and compared to the byte by tests/core/test_own_model.py, so that support for other models
cannot change what the built-in workloads get."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from nogradlab import batch, memory, workloads

PATH = Path(__file__).with_name("data") / "builtin_estimates.json"
FIELDS = ("peak_bytes", "retained_bytes", "saved_bytes", "saved_tensors", "baseline_bytes",
          "allocated_bytes", "reserved_bytes")

# (device, mode or None for a training step, keyword arguments)
CASES = [
    ("cpu", "grad", {}), ("cpu", "no_grad", {}), ("cpu", "inference_mode", {}),
    ("cpu", None, {}), ("cuda", "eval+no_grad", {}), ("cuda", "grad", {}),
    ("cuda", "eval+no_grad+bf16", {}), ("cuda", None, {"optimizer": "adam"}),
    ("cuda", "no_grad", {"allocator": "expandable_segments", "held_bytes": 3_000_000}),
]
SEARCHES = [("mlp", "cuda", "eval+no_grad", 256 << 20), ("unet", "cpu", "train", 64 << 20),
            ("transformer_base", "cuda", "train", 512 << 20)]


def fingerprint(only: "str | None" = None) -> dict:
    """The numbers of every built-in workload, or of workload ``only``."""
    out = {"torch": torch.__version__.split("+")[0], "estimates": {}, "searches": {}}
    for name in workloads.names():
        if only is not None and name != only:
            continue
        for dev, mode, kw in CASES:
            kw = dict(kw)
            if mode is None:
                kw["step"] = "train"
            r = memory.estimate(name, 2, dev, mode or "no_grad", scale="tiny", **kw)
            key = f"{name} {dev} {mode or 'train'} {json.dumps(kw, sort_keys=True)}"
            out["estimates"][key] = {f: getattr(r, f) for f in FIELDS}
    for name, dev, mode, budget in SEARCHES:
        if only is not None and name != only:
            continue
        r = batch.largest_batch(name, mode, budget, dev, scale="tiny")
        out["searches"][f"{name} {dev} {mode} {budget}"] = {"batch": r.batch, "at_limit": r.at_limit}
    return out


if __name__ == "__main__":
    doc = fingerprint()
    PATH.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"wrote {PATH}: {len(doc['estimates'])} estimates, {len(doc['searches'])} searches", file=sys.stderr)
