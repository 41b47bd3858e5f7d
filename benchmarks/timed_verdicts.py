"""Do the timed verdicts hold on a busy machine? The claims whose checks time something (C03, C13, C17,
C20's speed cells, X01, X05), checked on this CPU at ``scale="tiny"`` twice: quiet, and beside busy
neighbour processes (``--neighbours``, busy loops). Printed per claim: the verdict on this machine's own
measurements (``Result.local`` where a reference column decides the claim, else the verdict itself) and
each condition's reading, then whether the loaded run kept the quiet run's words, or fell back to
"inconclusive"/unresolved, and whether any condition changed side (agrees <-> disagrees): the acceptance
of issue 37.

    PYTHONPATH=. python benchmarks/timed_verdicts.py                 # quiet, then beside 2 busy neighbours
    PYTHONPATH=. python benchmarks/timed_verdicts.py --json out.json

Run on a machine with nothing else to do for the quiet half (the script cannot make it quiet); it
prints the load average beside each half. About 2-4 minutes a half on a 2-core CPU.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time

IDS = ("C03", "C13", "C17", "C20", "X01", "X05")

BUSY = "import time\nend = time.monotonic() + float(__import__('sys').argv[1])\nwhile time.monotonic() < end:\n    pass\n"


def _coverage_script():
    """benchmarks/coverage.py, loaded from its path (its name is also a PyPI package's)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("nogradlab_coverage_benchmark",
                                                  os.path.join(os.path.dirname(os.path.abspath(__file__)), "coverage.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def busy_neighbours(count: int, seconds: float = 1800):
    """``count`` busy loops beside the run (:func:`coverage.neighbours`), stopped when the block ends."""
    return _coverage_script().neighbours(BUSY, count, seconds)


def _local(result):
    """The judgement of this machine's own measurements alone (a GPU speed claim run on a CPU is decided
    by the reference GPU's column; here only what this CPU measured is read)."""
    from nogradlab import claims

    m = claims.Measurements(result.measurements, result.device, result.scale, result.torch)
    return claims._judge(claims.get(result.id), m)


def _readings(judgement) -> dict:
    """``{condition label: reading}`` of a judgement (a reading that disagrees carries its side)."""
    conds = judgement.conditions
    out = {}
    for c in conds or []:
        if isinstance(c, dict):
            label = c.get("label") or c.get("condition") or c.get("name")
            if label is not None:
                side = c.get("side")
                out[str(label)] = c.get("reading") + (f" ({side})" if side else "")
    return out


def run_all(ids) -> dict:
    from nogradlab import claims
    from nogradlab.claims import runcache

    out = {}
    claims.new_run()  # nothing measured by an earlier half is reused
    runcache.clear_cache()
    for cid in ids:
        t0 = time.perf_counter()
        r = claims.check(cid, device="cpu", scale="tiny")
        j = _local(r)
        out[cid] = {"verdict": r.verdict, "local": j.verdict, "readings": _readings(j),
                    "seconds": round(time.perf_counter() - t0, 1)}
    return out


#: the side of the band a reading puts a condition on; "unresolved" is on none
SIDES = {"agrees": "in", "disagrees (above)": "above", "disagrees (below)": "below", "disagrees": "out"}


def compare_runs(quiet: dict, loaded: dict) -> list:
    """Problems: a verdict whose words changed other than to "inconclusive", a condition that changed
    side (agrees <-> disagrees) rather than falling to unresolved."""
    problems = []
    for cid, q in quiet.items():
        lo = loaded.get(cid)
        if lo is None:
            continue
        if lo["local"] != q["local"] and lo["local"] != "inconclusive":
            problems.append(f"{cid}: {q['local']!r} quiet, {lo['local']!r} loaded")
        for label, reading in q["readings"].items():
            other = lo["readings"].get(label)
            a, b = SIDES.get(reading), SIDES.get(other)
            if a and b and a != b:
                problems.append(f"{cid} {label}: {reading} quiet, {other} loaded")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--neighbours", type=int, default=2, help="busy-loop processes beside the loaded run (2)")
    ap.add_argument("--ids", default=",".join(IDS))
    ap.add_argument("--json", default=None, help="write both runs' verdicts and readings here")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # a half, in its own process: its JSON here
    a = ap.parse_args(argv)
    ids = [i for i in a.ids.split(",") if i]
    if a.one:
        with open(a.one, "w") as f:
            json.dump(run_all(ids), f)
        return 0
    runs = {}
    import tempfile

    for label, n in (("quiet", 0), (f"beside {a.neighbours} busy neighbours", a.neighbours)):
        load0 = os.getloadavg()[0]
        # each half in a fresh process: what an earlier half left in the process (glibc's malloc thresholds,
        # raised by larger workloads, make the bf16 lever's per-call weight casts page-fault free) would make
        # the second half differ from the first for a reason that is not the load
        with (busy_neighbours(n) if n else contextlib.nullcontext()), tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "half.json")
            subprocess.run([sys.executable, os.path.abspath(__file__), "--ids", ",".join(ids), "--one", out],
                           check=True)
            with open(out) as f:
                runs[label] = json.load(f)
            load1 = os.getloadavg()[0]
        print(f"\n{label} (load average {load0:.1f} -> {load1:.1f}):")
        for cid, r in runs[label].items():
            reads = ", ".join(f"{k} {v}" for k, v in r["readings"].items())
            print(f"  {cid}: {r['local']} on this machine ({r['seconds']} s){'; ' + reads if reads else ''}", flush=True)
    quiet, loaded = runs.values()
    problems = compare_runs(quiet, loaded)
    print("\nsame words, or inconclusive under load; no condition changed side" if not problems
          else "\nchanged under load:\n  " + "\n  ".join(problems))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"runs": runs, "problems": problems}, f, indent=1)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
