"""The learner's-session budgets, measured on this machine (run by hand: `make bench` runs it).

Prints, beside each budget, what this machine measured:
1. every notebook through papermill at device=cpu, scale=tiny: seconds, the kernel's peak resident
   memory (the kernel and what it starts, high-water marks from /proc) and its slowest cells;
2. `python -m nogradlab claims --device cpu --scale tiny`: seconds in all and per claim;
3. with --make-run: `python -m nogradlab run --device cpu --scale tiny` into a temporary folder;
4. with --fresh-clone: `make test` in a fresh clone of this checkout, install included;
5. with --memory-limit 1e9: every notebook again, papermill and kernel in a memory cgroup of that
   size (Linux, root; tools.procmem.MemoryLimit): whether it fits a container's cap such as
   mybinder.org's 1 GB guarantee, and what fitting costs (seconds, file pages read back).

Memory: a kernel's peak RSS includes what importing PyTorch costs, which depends on the build: the CUDA
wheels from PyPI map their CUDA libraries at import (torch 2.14.1+cu130: 0.53 GB for `import torch`
alone; the CPU wheel torch 2.13.0+cpu: 0.24 GB, both measured on this machine). So the benchmark also
measures the import floor (a kernel that only imports) and prints each notebook's figure above it.
Much of a kernel's RSS is clean file-backed pages, which a capped container drops and reads back:
--memory-limit measures whether a notebook fits such a cap, beside what it touched.

6. with --widget: notebook 02's budget slider, a new budget after the first (ResNet-50, the four modes);
7. with --estimate: `python -m nogradlab estimate` of a model no run has seen (torchvision's swin_t);
8. with --unit: `make unit`'s tests (`pytest -m unit` on two processes).

Budgets (issue 38, on the 2-core EPYC, quiet): a notebook <= 30 s and no cell over 8 s, the papermill pass
<= 120 s, claims <= 30 s, run <= 150 s, a new budget in 02's widget <= 2 s, an unseen model's estimate
<= 10 s, make unit <= 60 s; every kernel's peak RSS <= 1.0 GB and notebook 10's anonymous peak <= 0.64 GB.
--neighbour runs one busy neighbour process (a pure-Python loop on one core) the whole time: each figure
at most twice its quiet one. `--bursty N` runs N neighbours that work as other users do instead (single-threaded
torch work in bursts of 20 ms to 1 s, pauses of 10-500 ms: benchmarks/coverage.py's, 6 of them load a 2-core
machine to about twice its cores): printed, no budget. `--table QUIET.json BUSY.json [BURSTY.json]` prints the
columns beside the budgets.

Allocation programs and memory rows are kept between runs (nogradlab.estimate.programs): the benchmark
uses a cache folder of its own, empty at the start (a learner's first session: the notebooks, claims and
run share it, in that order), unless --cache DIR names one (a second run: warm).
They are printed, never asserted in a test: machines differ by 2-3x in speed. --json FILE writes every
figure (with the machine it ran on) for results/.

    python benchmarks/session.py [--notebooks 01,05] [--no-claims] [--make-run] [--fresh-clone]
                                [--widget] [--estimate] [--unit] [--neighbour | --bursty N] [--cache DIR]
                                [--memory-limit 1e9 [--warm-cache]] [--json FILE]
    python benchmarks/session.py --table QUIET.json BUSY.json [BURSTY.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tools.procmem import PeakRSS, import_floor  # noqa: E402

BUDGETS = {"notebook_s": 30.0, "cell_s": 8.0, "papermill_total_s": 120.0, "claims_s": 30.0, "run_s": 150.0,
           "widget_new_budget_s": 2.0, "estimate_unseen_s": 10.0, "unit_s": 60.0,
           "kernel_peak_rss_bytes": 1.0e9, "nb10_anon_peak_bytes": 0.64e9}
#: beside one busy neighbour process, each figure at most this many times its quiet one (issue 38)
NEIGHBOUR_FACTOR = 2.0


def machine() -> dict:
    # torch's version from a child process: this one must not map torch's libraries, or a kernel in
    # --memory-limit's cgroup would share pages charged to this process and look smaller than it is
    torch_version = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True).stdout.strip() or "not importable"
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "python": platform.python_version(), "torch": torch_version,
            "load_avg_at_start": os.getloadavg() if hasattr(os, "getloadavg") else None}


def mark(value, budget) -> str:
    return "ok  " if value <= budget else "OVER"


def notebook_paths(stems) -> list:
    """The notebooks to run: all of them, or those whose number or stem is in ``stems``."""
    paths = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    return [p for p in paths if p.stem[:2] in stems or p.stem in stems] if stems else paths


def run_notebooks(stems, cells: int, floor: int = 0) -> dict:
    with tempfile.TemporaryDirectory(prefix="nogradlab-bench-") as d:  # the executed copies go with it
        return _run_notebooks(stems, cells, floor, Path(d))


def _run_notebooks(stems, cells: int, floor: int, out_dir: Path) -> dict:
    import nbformat
    import papermill as pm

    paths = notebook_paths(stems)
    rows = {}
    print(f"\n== 1. notebooks through papermill (device=cpu, scale=tiny); budget {BUDGETS['notebook_s']:.0f} s "
          f"and {BUDGETS['kernel_peak_rss_bytes'] / 1e9:.1f} GB each")
    for p in paths:
        t0 = time.perf_counter()
        error = None
        with PeakRSS(kernels_only=True) as rss:
            try:
                pm.execute_notebook(str(p), str(out_dir / p.name), parameters={"device": "cpu", "scale": "tiny"},
                                    kernel_name="python3", cwd=str(p.parent), progress_bar=False, log_output=False)
            except Exception as e:  # a failing notebook is reported, the others still run
                error = f"{type(e).__name__}: {str(e)[:200]}"
        seconds = time.perf_counter() - t0
        slow = []
        try:
            nb = nbformat.read(str(out_dir / p.name), as_version=4)
            for i, c in enumerate(nb.cells):
                d = c.get("metadata", {}).get("papermill", {}).get("duration")
                if c.cell_type == "code" and d is not None:
                    slow.append((round(float(d), 2), i, c.source.splitlines()[0][:60] if c.source else ""))
        except Exception:
            pass
        checks = 0.0
        try:
            checks = sum(float(c.metadata.papermill.duration or 0) for c in nb.cells
                         if c.cell_type == "code" and "claims.check(" in c.source)
        except Exception:
            pass
        slow.sort(reverse=True)
        rows[p.stem] = {"seconds": round(seconds, 2), "check_cells_seconds": round(checks, 2),
                        "peak_rss_bytes": rss.peak, "anon_peak_bytes": rss.anon_peak, "error": error,
                        "slowest_cells": [{"seconds": s, "cell": i, "first_line": t} for s, i, t in slow[:cells]]}
        rows[p.stem]["above_import_floor_bytes"] = rss.peak - floor
        print(f"  {mark(seconds, BUDGETS['notebook_s'])} {p.stem:<40} {seconds:6.1f} s   "
              f"{mark(rss.peak, BUDGETS['kernel_peak_rss_bytes'])} peak RSS {rss.peak / 1e6:6.0f} MB "
              f"({(rss.peak - floor) / 1e6:+5.0f} MB over the import floor; anonymous {rss.anon_peak / 1e6:4.0f} MB)"
              + (f"   FAILED {error}" if error else ""))
        for s, i, t in slow[:cells]:
            print(f"    {mark(s, BUDGETS['cell_s'])} cell {i:3d} {s:6.2f} s  {t}")
    total = sum(r["seconds"] for r in rows.values())
    peak = max((r["peak_rss_bytes"] for r in rows.values()), default=0)
    if len(rows) == len(sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))):
        print(f"  {mark(total, BUDGETS['papermill_total_s'])} {'whole pass':<40} {total:6.1f} s   "
              f"(budget {BUDGETS['papermill_total_s']:.0f} s); highest peak RSS {peak / 1e6:.0f} MB")
    return {"notebooks": rows, "total_seconds": round(total, 2), "highest_peak_rss_bytes": peak}


def run_boxed(stems, limit: float, cold: bool = True, timeout: float = 300.0) -> dict:
    """Each notebook through papermill's command line in a memory cgroup capped at ``limit`` bytes,
    papermill (the client, as the Jupyter server would be on Binder) and its kernel both inside: does
    it fit, and at what cost (the seconds, the file pages read back)? A cold page cache before each
    notebook makes the libraries' pages count against the cap, as in a fresh container."""
    from tools.procmem import MemoryLimit, MemoryLimitUnavailable

    try:
        MemoryLimit(limit)
    except MemoryLimitUnavailable as e:
        print(f"\n== 1b. notebooks in a memory cgroup: not available here ({e})")
        return {"error": str(e)}
    with tempfile.TemporaryDirectory(prefix="nogradlab-boxed-") as d:
        return _run_boxed(notebook_paths(stems), limit, cold, timeout, Path(d))


def _run_boxed(paths, limit, cold, timeout, out_dir) -> dict:
    from tools.procmem import MemoryLimit, drop_page_cache

    print(f"\n== 1b. notebooks through papermill in a memory cgroup of {limit / 1e9:.2f} GB, papermill and the "
          f"kernel inside{', from a cold page cache' if cold else ''} (device=cpu, scale=tiny)")
    rows = {}
    for p in paths:
        if cold:
            drop_page_cache()
        cmd = [sys.executable, "-m", "papermill", str(p), str(out_dir / p.name), "-p", "device", "cpu",
               "-p", "scale", "tiny", "-k", "python3", "--cwd", str(p.parent), "--no-progress-bar"]
        t0 = time.perf_counter()
        with PeakRSS(kernels_only=True) as rss, MemoryLimit(limit) as box:
            try:
                proc = box.run(cmd, timeout=timeout, capture_output=True, text=True)
                outcome = "ok" if proc.returncode == 0 else f"exit {proc.returncode}"
            except subprocess.TimeoutExpired:
                outcome = f"timed out after {timeout:.0f} s"
            seconds = time.perf_counter() - t0
            st = box.stats()
        if st["oom_kills"]:
            outcome = f"killed for memory ({st['oom_kills']}x)"
        rows[p.stem] = {"outcome": outcome, "seconds": round(seconds, 2), "kernel_peak_rss_bytes": rss.peak, **st}
        print(f"  {'ok  ' if outcome == 'ok' else 'FAIL'} {p.stem:<40} {seconds:6.1f} s   anonymous memory "
              f"{st['anon_peak_bytes'] / 1e6:5.0f} MB (client and kernel), kernel RSS {rss.peak / 1e6:5.0f} MB, "
              f"{st['refault_bytes'] / 1e6:6.0f} MB of file pages read back" + ("" if outcome == "ok" else f"   {outcome}"))
    return {"limit_bytes": int(limit), "cold_page_cache": cold, "timeout_s": timeout, "notebooks": rows,
            "all_fit": all(r["outcome"] == "ok" for r in rows.values())}


def run_claims() -> dict:
    print(f"\n== 2. python -m nogradlab claims --device cpu --scale tiny; budget {BUDGETS['claims_s']:.0f} s")
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "claims.json"
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "nogradlab", "claims", "--device", "cpu", "--scale", "tiny",
                               "--no-progress", "--json", str(out)], cwd=ROOT, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        per = {}
        if out.exists():
            per = {c["id"]: c.get("seconds", 0.0) for c in json.loads(out.read_text())["claims"]}
    print(f"  {mark(seconds, BUDGETS['claims_s'])} claims (process, import included) {seconds:6.1f} s"
          + ("" if proc.returncode == 0 else f"   exit {proc.returncode}: {proc.stderr[-300:]}"))
    for cid, s in sorted(per.items(), key=lambda kv: -kv[1]):
        if s >= 0.5:
            print(f"         {cid} {s:6.2f} s")
    rest = sum(s for s in per.values() if s < 0.5)
    print(f"         the other {sum(1 for s in per.values() if s < 0.5)} claims together {rest:.2f} s")
    return {"seconds": round(seconds, 2), "exit": proc.returncode, "per_claim_seconds": per}


def run_fresh_clone() -> dict:
    print("\n== 4. make test on a fresh clone of this checkout (install included); budget 15 min")
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(["git", "clone", "-q", str(ROOT), str(Path(d) / "clone")], check=True)
        t0 = time.perf_counter()
        proc = subprocess.run(["make", "test"], cwd=Path(d) / "clone", capture_output=True, text=True)
        seconds = time.perf_counter() - t0
    tail = proc.stdout.strip().splitlines()[-1:] if proc.stdout.strip() else []
    print(f"  {mark(seconds, 900)} make test {seconds / 60:6.1f} min, exit {proc.returncode} {' '.join(tail)}")
    return {"seconds": round(seconds, 1), "exit": proc.returncode}


def run_make_run() -> dict:
    print(f"\n== 3. python -m nogradlab run --device cpu --scale tiny; budget {BUDGETS['run_s']:.0f} s")
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "nogradlab", "run", "--device", "cpu", "--scale", "tiny",
                               "--no-progress", "--out", str(Path(d) / "build")], cwd=ROOT, capture_output=True,
                              text=True)
        seconds = time.perf_counter() - t0
    print(f"  {mark(seconds, BUDGETS['run_s'])} run {seconds:6.1f} s" +
          ("" if proc.returncode == 0 else f"   exit {proc.returncode}: {proc.stderr[-300:]}"))
    return {"seconds": round(seconds, 2), "exit": proc.returncode}


def run_widget() -> dict:
    print(f"\n== 6. notebook 02's budget slider: a new budget (13.5 GiB after 12 GiB), ResNet-50, four modes; "
          f"budget {BUDGETS['widget_new_budget_s']:.0f} s")
    code = ("import time, json\nfrom nogradlab.lab import widgets\n"
            "t=time.perf_counter(); widgets.largest_batches('resnet50','full','cuda',12); first=time.perf_counter()-t\n"
            "t=time.perf_counter(); widgets.largest_batches('resnet50','full','cuda',13.5); new=time.perf_counter()-t\n"
            "print(json.dumps({'first_s': round(first, 2), 'new_budget_s': round(new, 2)}))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    try:
        r = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        print(f"  FAIL widget: {proc.stderr[-300:]}")
        return {"error": proc.stderr[-300:]}
    print(f"  {mark(r['new_budget_s'], BUDGETS['widget_new_budget_s'])} a new budget {r['new_budget_s']:6.2f} s "
          f"(the first budget, making the programs: {r['first_s']:.2f} s)")
    return r


def run_estimate(model: str = "torchvision.models:swin_t") -> dict:
    print(f"\n== 7. python -m nogradlab estimate {model} (four modes); budget {BUDGETS['estimate_unseen_s']:.0f} s")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "nogradlab", "estimate", model, "--input", "3x224x224",
                           "--no-progress"], cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    print(f"  {mark(seconds, BUDGETS['estimate_unseen_s'])} estimate {seconds:6.1f} s"
          + ("" if proc.returncode == 0 else f"   exit {proc.returncode}: {proc.stderr[-300:]}"))
    return {"model": model, "seconds": round(seconds, 2), "exit": proc.returncode}


def run_unit() -> dict:
    print(f"\n== 8. make unit's tests (pytest -m unit, two processes); budget {BUDGETS['unit_s']:.0f} s")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-m", "unit", "-q", "-n", "2", "--dist", "loadfile",
                           "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    tail = proc.stdout.strip().splitlines()[-1:] if proc.stdout.strip() else []
    print(f"  {mark(seconds, BUDGETS['unit_s'])} make unit {seconds:6.1f} s  {' '.join(tail)}")
    return {"seconds": round(seconds, 2), "exit": proc.returncode, "summary": " ".join(tail)}


class Neighbour:
    """One busy neighbour process for the block: a pure-Python loop that keeps one core busy."""

    def __enter__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", "while True:\n    pass"])
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()


def bursty(count: int):
    """``count`` neighbours doing bursts of torch work (benchmarks/coverage.py's, loaded by path: the name
    ``coverage`` is also coverage.py's package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("nogradlab_bench_coverage", ROOT / "benchmarks" / "coverage.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.bursty_neighbours(count, 3 * 3600)


def figures(d: dict) -> dict:
    """The budgeted figures of one --json file: name -> (value, budget)."""
    out = {}
    nbs = (d.get("papermill") or {}).get("notebooks", {})
    for stem, r in nbs.items():
        out[f"notebook {stem[:2]}"] = (r["seconds"], BUDGETS["notebook_s"])
    if nbs:
        out["slowest cell"] = (max((c["seconds"] for r in nbs.values() for c in r["slowest_cells"]), default=0.0),
                               BUDGETS["cell_s"])
        out["papermill pass"] = (d["papermill"]["total_seconds"], BUDGETS["papermill_total_s"])
        if any(k.startswith("10_") for k in nbs):
            out["notebook 10 anonymous peak (GB)"] = (
                next(r["anon_peak_bytes"] for k, r in nbs.items() if k.startswith("10_")) / 1e9,
                BUDGETS["nb10_anon_peak_bytes"] / 1e9)
    for key, name, budget in (("claims", "claims", "claims_s"), ("run", "run", "run_s"),
                              ("estimate", "estimate (unseen model)", "estimate_unseen_s"),
                              ("unit", "make unit", "unit_s")):
        if key in d and "seconds" in d[key]:
            out[name] = (d[key]["seconds"], BUDGETS[budget])
    if "widget" in d and "new_budget_s" in d["widget"]:
        out["widget: a new budget"] = (d["widget"]["new_budget_s"], BUDGETS["widget_new_budget_s"])
    return out


def table(quiet_path: str, busy_path: str, bursty_path: "str | None" = None) -> str:
    """Markdown: each budgeted figure quiet and beside one busy neighbour, with the budget and whether the
    busy figure stays within twice the quiet one; beside bursty neighbours too, when given (no budget)."""
    q, b = (json.loads(Path(p).read_text()) for p in (quiet_path, busy_path))
    r = json.loads(Path(bursty_path).read_text()) if bursty_path else None
    fq, fb, fr = figures(q), figures(b), figures(r) if r else {}

    def load(d):
        start, end = d["machine"]["load_avg_at_start"][0], (d.get("load_avg_at_end") or [None])[0]
        return f"load {start:.1f}" + (f" at the start, {end:.1f} at the end" if end is not None else "")

    extra = f" beside {r.get('bursty', '?')} bursty torch neighbours ({load(r)}) | x quiet |" if r else ""
    lines = [f"| figure | budget | quiet ({load(q)}) | beside one busy neighbour ({load(b)}) | busy / quiet |" + extra,
             "|---|---|---|---|---|" + ("---|---|" if r else "")]
    for name, (v, budget) in fq.items():
        w = fb.get(name, (None,))[0]
        unit = "" if "GB" in name else " s"
        ratio = f"{w / v:.2f}x {'ok' if w <= NEIGHBOUR_FACTOR * v else 'OVER'}" if w is not None and v else "-"
        line = (f"| {name} | {budget:g}{unit} | {v:.2f}{unit} {'ok' if v <= budget else 'OVER'} | "
                + (f"{w:.2f}{unit}" if w is not None else "-") + f" | {ratio} |")
        if r:
            z = fr.get(name, (None,))[0]
            line += (f" {z:.2f}{unit} | {z / v:.2f}x |" if z is not None and v else " - | - |")
        lines.append(line)
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--notebooks", default="", help="comma-separated notebook numbers or stems (default all)")
    ap.add_argument("--no-notebooks", action="store_true")
    ap.add_argument("--no-claims", action="store_true")
    ap.add_argument("--make-run", action="store_true", help="also time `python -m nogradlab run` (about 3 min)")
    ap.add_argument("--fresh-clone", action="store_true",
                    help="also time `make test` in a fresh clone, install included (10-15 min)")
    ap.add_argument("--memory-limit", type=float, default=None, metavar="BYTES",
                    help="also run each notebook in a memory cgroup of BYTES (e.g. 1e9, Binder's guarantee), "
                         "papermill and kernel inside; Linux, root")
    ap.add_argument("--warm-cache", action="store_true",
                    help="with --memory-limit: keep the page cache (by default it is dropped before each notebook)")
    ap.add_argument("--cells", type=int, default=3, help="slowest cells shown per notebook")
    ap.add_argument("--widget", action="store_true", help="also time a new budget in notebook 02's slider")
    ap.add_argument("--estimate", action="store_true", help="also time `nogradlab estimate` of an unseen model")
    ap.add_argument("--unit", action="store_true", help="also time make unit's tests")
    ap.add_argument("--neighbour", action="store_true", help="one busy neighbour process the whole time")
    ap.add_argument("--bursty", type=int, default=0, metavar="N",
                    help="N neighbours doing bursts of torch work the whole time (6: a load of about 4 on 2 cores)")
    ap.add_argument("--cache", default=None, metavar="DIR",
                    help="the folder programs are kept in (default: a new, empty one: a first session)")
    ap.add_argument("--table", nargs="+", default=None, metavar="FILE",
                    help="QUIET.json BUSY.json [BURSTY.json]: the figures of --json files side by side, beside the "
                         "budgets")
    ap.add_argument("--json", default=None, metavar="FILE")
    args = ap.parse_args(argv)
    if args.memory_limit is not None:  # a bad value is refused now, not after minutes of notebooks
        from tools.procmem import MemoryLimit, MemoryLimitUnavailable

        try:
            MemoryLimit(args.memory_limit)
        except ValueError as e:
            ap.error(f"--memory-limit: {e}")
        except MemoryLimitUnavailable:
            pass  # said in its section; the other figures still come
    if args.table:
        if len(args.table) not in (2, 3):
            print(f"error: --table takes QUIET.json BUSY.json [BURSTY.json], got {len(args.table)} file(s)",
                  file=sys.stderr)
            return 2
        print(table(*args.table))
        return 0
    import contextlib

    cache = args.cache or tempfile.mkdtemp(prefix="nogradlab-bench-cache-")
    os.environ["NOGRADLAB_CACHE_DIR"] = cache  # the kernels, claims and run inherit it
    if args.neighbour and args.bursty:
        ap_error = "--neighbour and --bursty are two different columns: give one"
        print(f"error: {ap_error}", file=sys.stderr)
        return 2
    if args.bursty < 0:
        print(f"error: --bursty must be 0 or more, got {args.bursty}", file=sys.stderr)
        return 2
    with Neighbour() if args.neighbour else bursty(args.bursty) if args.bursty else contextlib.nullcontext():
        return _main(args, cache)


def _main(args, cache) -> int:
    m = machine()
    print(f"machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}, torch {m['torch']}, "
          f"load average at start {m['load_avg_at_start']}")
    out = {"machine": m, "budgets": BUDGETS, "neighbour": bool(args.neighbour), "bursty": args.bursty, "cache": cache,
           "cache_was_empty": not any(Path(cache).glob("programs/*.json"))}
    if not args.no_notebooks:
        floor = import_floor()
        out["import_floor_rss_bytes"] = floor
        print(f"\nimport floor: a kernel that only imports torch, torchvision, pandas, matplotlib and nogradlab "
              f"peaks at {floor / 1e6:.0f} MB with this PyTorch build ({out['machine']['torch']})")
        out["papermill"] = run_notebooks([s for s in args.notebooks.split(",") if s], args.cells, floor)
    if args.memory_limit is not None:
        out["memory_limit"] = run_boxed([s for s in args.notebooks.split(",") if s], args.memory_limit,
                                        cold=not args.warm_cache)
    if not args.no_claims:
        out["claims"] = run_claims()
    if args.make_run:
        out["run"] = run_make_run()
    if args.widget:
        out["widget"] = run_widget()
    if args.estimate:
        out["estimate"] = run_estimate()
    if args.unit:
        out["unit"] = run_unit()
    if args.fresh_clone:
        out["fresh_clone_make_test"] = run_fresh_clone()
    out["load_avg_at_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    if args.json:
        from nogradlab.outdir import write_text_atomic

        write_text_atomic(Path(args.json).absolute(), json.dumps(out, indent=1))
        print(f"\nwritten: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
