"""Build ``nogradlab/estimate/data/gpu_workspaces.json`` from the operator probe of a GPU run.

    python benchmarks/build_workspace_table.py results/h200-alloc-probe/probes.json.gz

For every operator call the probe (``benchmarks/gpu_alloc_probe.py``) recorded the bytes allocated
before and after it and the peak inside it; ``peak - after`` is what the operator allocated for
itself and freed again: cuDNN's convolution workspace, a reduction's scratch buffer, a loss's
temporaries. The table maps each call's signature (operator, argument shapes without the batch
dimension, the other arguments) to ``{batch: bytes}``. The transformer fast path is left out: the
estimate traces its operators one by one (``nogradlab.cudamodel``).
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from nogradlab import cudamodel  # noqa: E402
from nogradlab.outdir import write_text_atomic  # noqa: E402

SKIP = {"_transformer_encoder_layer_fwd"}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("probes")
    ap.add_argument("--env", default=None, help="env.json of the same run (device, versions)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(cudamodel.__file__), "data",
                                                  "gpu_workspaces.json"))
    a = ap.parse_args(argv)
    with gzip.open(a.probes, "rt") as f:
        jobs = json.load(f)
    env = {}
    env_path = a.env or os.path.join(os.path.dirname(a.probes), "env.json")
    if os.path.exists(env_path):
        with open(env_path) as f:
            env = json.load(f).get("result", {})
    table: dict = {}
    calls = 0
    for job in jobs:
        if not job.get("ok"):
            continue
        for case in job["result"]["cases"]:
            if case.get("error"):
                continue
            for op in case["ops"]:
                name, a1, peak = op[0], op[2], op[3]
                short = name.split(".")[1] if name.startswith("aten.") else name
                if short in SKIP or len(op) < 6:
                    continue
                key, batch = cudamodel.op_signature(short, op[5])
                if key is None:
                    continue
                ws = max(0, peak - a1)
                calls += 1
                entry = table.setdefault(key, {})
                # a signature can occur several times in one step (repeated blocks): keep the largest
                entry[str(batch)] = max(ws, entry.get(str(batch), 0))
    # drop the other operators' signatures that never needed a workspace (convolutions stay: a
    # zero there is a measurement, and an estimate says which convolutions it had no figure for)
    table = {k: v for k, v in table.items() if k.startswith("('convolution") or any(x > 0 for x in v.values())}
    meta = {"device": env.get("device", "unknown GPU"), "torch": env.get("torch"), "cuda": env.get("cuda"),
            "cudnn": env.get("cudnn"), "capability": env.get("capability"),
            "source": os.path.relpath(a.probes), "calls": calls, "signatures": len(table),
            "what": "bytes an operator allocated for itself and freed again (peak inside minus "
                    "allocated after), per signature and batch; cudnn_benchmark off"}
    write_text_atomic(a.out, json.dumps({"meta": meta, "ops": table}, indent=0, sort_keys=True))
    print(f"{len(table)} signatures from {calls} calls -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
