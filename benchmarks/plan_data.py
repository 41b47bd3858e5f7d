"""Refresh the measured parts of tools/plan_h200.json, the reference a GPU plan is computed
from (tools/plan.py): run by hand after changing a search, a check's GPU defaults or a notebook.

1. ``search_trials``: the trials of every estimate search C04, C09 and C20 make on a GPU, run here on
   the virtual CUDA device exactly as the checks call them (the counts are exact: the same trials run
   on a real GPU's own device type).
2. ``trial_s``: the seconds one trial (fake-tensor trace and allocator replay) takes per workload and
   mode on this machine's CPU (the trace runs on the host, whatever the GPU).
3. with ``--session FILE`` (the --json of benchmarks/session.py): ``notebook_rest_s``, each notebook's
   seconds on the CPU at tiny scale less its claims.check cells' (kernel start, imports, its own cells:
   they run the same small models on a GPU).

The H200 figures (per-call forward times, other checks' seconds, a real search, a compile) are not
touched: they come from ../shared/gpu/h200-2026-11-30 (see the file's "source").

    python benchmarks/plan_data.py [--session /tmp/session.json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from nogradlab import allocator, claims, memory, workloads  # noqa: E402
from nogradlab.claims import searches as capacity  # noqa: E402
from nogradlab.claims import measure as N  # noqa: E402
from nogradlab.run.outdir import write_text_atomic  # noqa: E402

GiB = 2 ** 30
DATA = ROOT / "tools" / "plan_h200.json"


def search_trials() -> dict:
    out = {}
    for gib in capacity.default_budgets(claims.Context(torch.device("cuda"), "full", 0, {"reference": True})):
        out[f"C04@{gib:g}"] = {n: {m: len(r.trials) for m, r in capacity._searches(n, int(gib * GiB), "cuda",
                                                                                 "estimate", max_batch=2 ** 22).items()}
                               for n in workloads.names()}
    out["C09@12"] = {"resnet50": {m: len(r.trials) for m, r in
                                  capacity._searches("resnet50", 12 * GiB, "cuda", "estimate").items()}}
    c20 = {}
    with N.accounting():
        for n in workloads.names():
            full_b = workloads.get(n, "full").default_batch
            c20[n] = {m: len(capacity.shared_largest_batch(
                n, m, N.ARTICLE_GPU_BYTES, "cuda", scale="full", method="estimate", max_batch=2 ** 22,
                start=N._start_guess(n, m, full_b) if m == "train" else "auto").trials)  # as C20 asks
                for m in ("train", "eval+no_grad")}
    out["C20"] = c20
    return out


def trial_seconds() -> dict:
    out = {}
    for n in workloads.names():
        for mode, kw in (("eval+no_grad", dict(mode="eval+no_grad")), ("grad", dict(mode="grad")),
                         ("train", dict(step="train"))):
            memory.estimate(n, 3, "cuda", scale="full", **kw)  # warm: the first trace in a process costs more
            t = time.perf_counter()
            for b in (5, 7, 9):  # one trial: the trace, then its replay under a cap (as batch._modelled_fit)
                r = memory.estimate(n, b, "cuda", scale="full", **kw)
                allocator.simulate(r.events, "native", 12 * GiB, keep_segments=False)
            out[f"{n} {mode}"] = round((time.perf_counter() - t) / 3, 3)
    return out


def notebook_rest(session: dict) -> dict:
    """Each notebook's seconds less its claims.check cells' (papermill's per-cell durations)."""
    out = {}
    for nb, r in session["papermill"]["notebooks"].items():
        if nb in claims.NOTEBOOKS:
            out[nb] = round(max(r["seconds"] - r["check_cells_seconds"], 2.0), 1)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--session", default=None, help="a benchmarks/session.py --json file")
    args = ap.parse_args(argv)
    data = json.loads(DATA.read_text())
    data["search_trials"] = search_trials()
    data["trial_s"] = trial_seconds()
    if args.session:
        data["notebook_rest_s"] = notebook_rest(json.loads(Path(args.session).read_text()))
    data["source"]["measured_here"] = (f"search_trials, trial_s{', notebook_rest_s' if args.session else ''}: "
                                       f"benchmarks/plan_data.py on {N.torch.__version__}, "
                                       f"{time.strftime('%Y-%m-%d')}")
    write_text_atomic(DATA, json.dumps(data, indent=1) + "\n")
    print(json.dumps(data["search_trials"], indent=1))
    print(json.dumps(data["trial_s"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
