"""How long ``python -m nogradlab estimate`` takes for a model the project does not otherwise use: all four
modes, one budget, on a virtual CUDA device. The target (issue 30): 20 s or less per model on the 2-core CPU.
Printed (and with ``--json`` written), never asserted: times scale with the machine.

Each model runs in a fresh Python process (as the command does), timing ``estimate_cmd.run`` (the estimates
at ``--batch`` and the largest-batch searches; imports and argument checks excluded). ``--pythonpath``
runs another checkout's ``nogradlab`` (say main's, exported with ``git archive main | tar -x -C DIR``)
for a before/after comparison: the largest batches must agree.

    python benchmarks/estimate_speed.py [--models mobilenet_v3_large,efficientnet_b0,...] [--gpu 16GiB]
        [--pythonpath DIR] [--before DIR] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("mobilenet_v3_large", "efficientnet_b0", "regnet_y_400mf", "shufflenet_v2_x1_0", "squeezenet1_1",
          "densenet121", "vit_b_16")

_CHILD = r"""
import json, sys, time
import torch
from nogradlab import estimate_cmd
req = estimate_cmd.check(sys.argv[1], sys.argv[2], "float32", sys.argv[3])
t0 = time.perf_counter()
doc = estimate_cmd.run(req, progress=False)
dt = time.perf_counter() - t0
print("RESULT " + json.dumps({"seconds": dt, "modes": {m: {"largest_batch": e["largest_batch"],
      "at_limit": e["at_limit"], "trials": e.get("trials")} for m, e in doc["modes"].items()},
      "notes": doc.get("notes", [])}))
"""


def run_one(model: str, shape: str, gpu: str, pythonpath: str) -> dict:
    env = dict(os.environ, PYTHONPATH=pythonpath)
    t0 = time.perf_counter()
    # run from the checkout's own folder: ``python -c`` puts the working directory first on sys.path
    p = subprocess.run([sys.executable, "-c", _CHILD, f"torchvision.models:{model}", shape, gpu],
                       capture_output=True, text=True, env=env, cwd=pythonpath)
    wall = time.perf_counter() - t0
    line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
    if p.returncode != 0 or line is None:
        err = (p.stderr.strip().splitlines() or ["?"])[-1]
        return {"model": model, "error": err, "process_seconds": round(wall, 1)}
    out = json.loads(line[len("RESULT "):])
    out.update(model=model, process_seconds=round(wall, 1))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--input", default="3x224x224")
    p.add_argument("--gpu", default="16GiB")
    p.add_argument("--pythonpath", default=str(ROOT), help="the checkout whose nogradlab runs (default this one)")
    p.add_argument("--before", default=None,
                   help="another checkout (main's): each model runs there too, right before or after this one's "
                        "run (alternating), so both see the same machine load; its largest batches must agree")
    p.add_argument("--json", default=None, help="also write the rows here")
    args = p.parse_args()
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else ["?"]
    print(f"nogradlab from {args.pythonpath}; budget {args.gpu}; inputs {args.input}; {os.cpu_count()} CPUs; "
          f"load average {' '.join(load)} at the start")
    modes = ("grad", "no_grad", "inference_mode", "train")
    print(f"{'model':<32}{'seconds':>9}  " + "".join(f"{m:>16}" for m in modes) + "  trials")
    rows = []
    for i, model in enumerate([m.strip() for m in args.models.split(",") if m.strip()]):
        runs = [("after", args.pythonpath)] + ([("before", args.before)] if args.before else [])
        if i % 2:
            runs.reverse()  # alternate which goes first: a drift in the machine's load hits both alike
        for label, path in runs:
            r = run_one(model, args.input, args.gpu, path)
            r["checkout"] = label if args.before else path
            rows.append(r)
            name = f"{model} ({label})" if args.before else model
            if "error" in r:
                print(f"{name:<32}  error: {r['error']}")
                continue
            cells = "".join(f"{str(r['modes'][m]['largest_batch']) + ('+' if r['modes'][m]['at_limit'] else ''):>16}"
                            if m in r["modes"] else f"{'-':>16}" for m in modes)
            trials = "/".join(str(r["modes"][m].get("trials")) for m in modes if m in r["modes"])
            load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
            print(f"{name:<32}{r['seconds']:>8.1f}s  {cells}  {trials}  (load {load})", flush=True)
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else ["?"]
    print(f"load average {' '.join(load)} at the end; target: <= 20 s a model on a 2-core CPU (not asserted)")
    if args.json:
        Path(args.json).write_text(json.dumps({"pythonpath": args.pythonpath, "gpu": args.gpu, "input": args.input,
                                               "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
