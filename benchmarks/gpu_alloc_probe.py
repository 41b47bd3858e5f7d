"""What the CUDA caching allocator and the libraries really do, measured on a GPU (run by hand).

    PYTHONPATH=. python benchmarks/gpu_alloc_probe.py --out results/alloc-probe

Three kinds of job, each in a fresh process (a pool of them runs side by side: the caps are per
process and the GPU has room for several):

* ``probe``: every aten operator of one step (the real search's step: eval+no_grad, eval+grad,
  training step with SGD) runs under a ``TorchDispatchMode`` that reads the allocator's counters
  around it: bytes allocated before and after, and the peak inside. ``peak - after`` is what the
  operator allocated for itself and freed again (cuDNN workspaces, copies); ``after - before`` its
  outputs and anything it keeps (cuBLAS workspaces). Batches: powers of two and the default batch.
* ``trace``: ``torch.cuda.memory._record_memory_history`` from the start of a fresh process: build,
  warm-up at batch 1, ``empty_cache``, a cap (as ``batch.memory_cap``), steps at given batches
  (OOMs caught), then the allocator's own trace and segments (``_snapshot``), for
  ``nogradlab.allocator`` to replay.
* ``search``: ``batch.largest_batch(method="search")`` in a fresh process, the cases of
  ``largest_batch.json`` (and two with ``expandable_segments:True``).

Writes env.json, probes.json.gz, traces.json.gz, searches.json and log.txt under ``--out``.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import gc
import gzip
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from nogradlab.outdir import write_text_atomic as _atomic  # noqa: E402

GiB = 2 ** 30
DEV = "cuda:0"  # the tests of this script set "cpu" with the counters patched
MODES = ("eval+no_grad", "grad", "train")
SETTINGS = {"grad": "eval+grad", "eval+no_grad": "eval+no_grad"}


def _pow2(lo, hi):
    b, out = lo, []
    while b <= hi:
        out.append(b)
        b *= 2
    return out


# batches for the operator probe: powers of two (not the searches' answers), plus the default
PROBE_BATCHES = {
    "resnet50": {"eval+no_grad": _pow2(1, 1024), "grad": _pow2(1, 256), "train": _pow2(1, 256)},
    "unet": {"eval+no_grad": _pow2(1, 256), "grad": _pow2(1, 64), "train": _pow2(1, 64)},
    "transformer_base": {"eval+no_grad": [1, 16, 64, 256, 1024], "grad": [1, 16, 64],
                         "train": [1, 16, 32]},
    "mlp": {"eval+no_grad": [1, 256, 4096, 65536], "grad": [1, 256, 4096, 65536],
            "train": [1, 256, 4096, 65536]},
}


# ----------------------------------------------------------------------------------------------
# helpers run inside the job processes


def _describe(x):
    import torch

    if isinstance(x, torch.Tensor):
        return {"shape": list(x.shape), "stride": list(x.stride()), "dtype": str(x.dtype).replace("torch.", ""),
                "contig": x.is_contiguous()}
    if isinstance(x, (list, tuple)):
        return [_describe(v) for v in x]
    if isinstance(x, (int, float, bool, str)) or x is None:
        return x
    return str(x)


def _step_fn(wl, model, mode, dev):
    import torch

    from nogradlab import memory, modes

    def step(b):
        x = wl.make_input(b, dev)
        if mode == "train":
            y = wl.make_target(b, dev)
            opt = memory._OPTIMIZERS["sgd"](model.parameters())
            memory.train_step(model, x, y, wl.loss, opt)
            del opt, y
        else:
            with modes.setting(SETTINGS[mode], model=model, device=dev):
                out = model(x)
            del out
        del x
        model.zero_grad(set_to_none=True)
        if dev.type == "cuda":
            torch.cuda.synchronize()

    return step


def job_probe(name):
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from nogradlab import workloads

    dev = torch.device(DEV)
    wl = workloads.get(name, "full")
    torch.manual_seed(0)
    model = wl.build(dev)

    class Probe(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []
            self.main = threading.get_ident()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            a0 = torch.cuda.memory_allocated(dev)
            torch.cuda.reset_peak_memory_stats(dev)
            out = func(*args, **kwargs)
            a1 = torch.cuda.memory_allocated(dev)
            pk = torch.cuda.max_memory_allocated(dev)
            fname = str(func)
            rec = [fname, a0, a1, pk, threading.get_ident() == self.main]
            if pk > a1 or "conv" in fname or "attention" in fname or "transformer" in fname:
                rec.append(_describe(list(args)))
                rec.append(_describe({k: v for k, v in kwargs.items()}))
            self.ops.append(rec)
            return out

    res = {"workload": name, "cases": []}
    for mode in MODES:
        step = _step_fn(wl, model, mode, dev)
        # the first step of this mode in the process, at batch 1 (what the real search's warm-up does)
        for b in [1] + PROBE_BATCHES[name][mode]:
            gc.collect()
            torch.cuda.empty_cache()
            base = torch.cuda.memory_allocated(dev)
            p = Probe()
            t0 = time.perf_counter()
            try:
                with p:
                    step(b)
                err = None
            except torch.cuda.OutOfMemoryError as e:
                err = str(e)[:200]
            res["cases"].append({"mode": mode, "batch": b, "base": base, "ops": p.ops, "error": err,
                                 "seconds": round(time.perf_counter() - t0, 3)})
            del p
    return res


def job_trace(spec):
    """spec: {name, workload, mode, steps: [batch...], cap_gib, expandable}"""
    import torch

    from nogradlab import workloads

    dev = torch.device(DEV)
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                              max_entries=2_000_000)
    marks = []

    def mark(what, *extra):
        n = len(torch.cuda.memory._snapshot()["device_traces"][0])
        marks.append([n, what, *extra])

    wl = workloads.get(spec["workload"], "full")
    torch.manual_seed(0)
    mark("build")
    model = wl.build(dev)
    step = _step_fn(wl, model, spec["mode"], dev)
    mark("warmup", 1)
    step(1)
    gc.collect()
    mark("empty_cache")
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(dev).total_memory
    if spec.get("cap_gib"):
        cap = int(spec["cap_gib"] * GiB)
        torch.cuda.set_per_process_memory_fraction(cap / total, dev)
        mark("cap", cap)
    outcomes = []
    for b in spec["steps"]:
        torch.cuda.reset_peak_memory_stats(dev)
        mark("step", b)
        try:
            step(b)
            ok = True
        except torch.cuda.OutOfMemoryError:
            ok = False
        model.zero_grad(set_to_none=True)
        gc.collect()
        outcomes.append({"batch": b, "fits": ok, "max_allocated": torch.cuda.max_memory_allocated(dev),
                         "max_reserved": torch.cuda.max_memory_reserved(dev)})
        mark("empty_cache")
        torch.cuda.empty_cache()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    trace = [[e["action"], e.get("addr", 0), e.get("size", 0)] for e in snap["device_traces"][0]]
    segs = [{"address": s["address"], "total_size": s["total_size"], "segment_type": s["segment_type"],
             "blocks": [[b["size"], b["state"]] for b in s["blocks"]]} for s in snap["segments"]]
    return {"spec": spec, "marks": marks, "trace": trace, "segments_end": segs, "outcomes": outcomes,
            "allocator_settings": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}


def job_search(spec):
    import torch

    from nogradlab import batch

    out = []
    for gib in spec["budgets_gib"]:
        t0 = time.perf_counter()
        r = batch.largest_batch(spec["workload"], spec["mode"], int(gib * GiB), "cuda", method="search",
                                scale="full")
        d = r.to_dict()
        d["wall"] = round(time.perf_counter() - t0, 2)
        d["allocator"] = "expandable_segments" if "expandable_segments:True" in os.environ.get(
            "PYTORCH_CUDA_ALLOC_CONF", "") else "native"
        d["max_reserved_process"] = torch.cuda.max_memory_reserved()
        out.append(d)
        gc.collect()
        torch.cuda.empty_cache()
    return out


def job_env(_=None):
    import torch

    p = torch.cuda.get_device_properties(0)
    return {"torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(), "device": p.name,
            "capability": f"{p.major}.{p.minor}", "total_memory": p.total_memory,
            "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
            "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG", ""),
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            "sdp": {"flash": torch.backends.cuda.flash_sdp_enabled(),
                    "mem_efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
                    "math": torch.backends.cuda.math_sdp_enabled(),
                    "cudnn": getattr(torch.backends.cuda, "cudnn_sdp_enabled", lambda: None)()}}


JOBS = {"probe": job_probe, "trace": job_trace, "search": job_search, "env": job_env}


def _child(kind, arg, path):
    t0 = time.perf_counter()
    try:
        result = {"ok": True, "result": JOBS[kind](arg)}
    except Exception as e:  # noqa: BLE001 - reported, the other jobs go on
        import traceback

        result = {"ok": False, "error": f"{type(e).__name__}: {e}", "tb": traceback.format_exc()[-3000:]}
    result.update(kind=kind, arg=arg, seconds=round(time.perf_counter() - t0, 2))
    _atomic(path, json.dumps(result))


# ----------------------------------------------------------------------------------------------
# the parent


def plan(quick=False):
    jobs = [("env", None, {})]
    names = ["resnet50", "unet", "transformer_base", "mlp"]
    for n in names:
        jobs.append(("probe", n, {}))
    es = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    jobs += [
        ("trace", {"name": "resnet50-train-32", "workload": "resnet50", "mode": "train", "steps": [32]}, {}),
        ("trace", {"name": "resnet50-eval-cap12", "workload": "resnet50", "mode": "eval+no_grad",
                   "steps": [880, 892, 905, 920, 950], "cap_gib": 12}, {}),
        ("trace", {"name": "unet-eval-cap12", "workload": "unet", "mode": "eval+no_grad",
                   "steps": [185, 193, 200], "cap_gib": 12}, {}),
        ("trace", {"name": "mlp-train-cap12", "workload": "mlp", "mode": "train",
                   "steps": [84672, 85760, 86500], "cap_gib": 12}, {}),
        ("trace", {"name": "resnet50-eval-cap12-es", "workload": "resnet50", "mode": "eval+no_grad",
                   "steps": [1140, 1152, 1165], "cap_gib": 12}, es),
        ("trace", {"name": "mlp-train-cap12-es", "workload": "mlp", "mode": "train",
                   "steps": [108500, 109528, 110500], "cap_gib": 12}, es),
    ]
    for n in names:
        for m in MODES:
            jobs.append(("search", {"workload": n, "mode": m, "budgets_gib": [12, 16]}, {}))
    jobs.append(("search", {"workload": "resnet50", "mode": "eval+no_grad", "budgets_gib": [12]}, es))
    jobs.append(("search", {"workload": "mlp", "mode": "train", "budgets_gib": [12]}, es))
    return jobs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--workers", type=int, default=5)
    ap.add_argument("--job-timeout", type=int, default=240)
    ap.add_argument("--deadline", type=float, default=290, help="seconds: no job starts after "
                    "deadline - 40, and running ones are stopped at the deadline")
    ap.add_argument("--only", default="", help="comma-separated job kinds to run")
    ap.add_argument("--child", nargs=3, metavar=("KIND", "ARG_JSON", "PATH"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        kind, arg, path = a.child
        _child(kind, json.loads(arg), path)
        return 0
    os.makedirs(a.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="allocprobe-")
    jobs = plan()
    if a.only:
        keep = set(a.only.split(","))
        jobs = [j for j in jobs if j[0] in keep]
    log = open(os.path.join(a.out, "log.txt"), "w")
    t_start = time.perf_counter()

    def run(i, job):
        kind, arg, env_extra = job
        path = os.path.join(tmp, f"{i:03d}-{kind}.json")
        env = dict(os.environ, **env_extra)
        t0 = time.perf_counter()
        left = a.deadline - (t0 - t_start)
        if left < 40:
            log.write(f"skipped (deadline) {kind} {json.dumps(arg)}\n")
            return path
        try:
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--out", a.out, "--child", kind,
                                json.dumps(arg), path], env=env, capture_output=True, text=True,
                               timeout=min(a.job_timeout, left))
            rc, err = p.returncode, p.stderr[-2000:]
        except subprocess.TimeoutExpired:
            rc, err = "timeout", ""
        msg = f"[{time.perf_counter() - t_start:6.1f}s] {kind} {json.dumps(arg)[:90]} {env_extra or ''}: rc {rc} in {time.perf_counter() - t0:.1f}s"
        print(msg, flush=True)
        log.write(msg + "\n" + (err if rc != 0 else "") + "\n")
        log.flush()
        return path

    with cf.ThreadPoolExecutor(a.workers) as ex:
        paths = list(ex.map(lambda ij: run(*ij), enumerate(jobs)))
    merged = {"env": None, "probe": [], "trace": [], "search": []}
    for path in paths:
        if not os.path.exists(path):
            continue
        with open(path) as f:
            r = json.load(f)
        if not r["ok"]:
            log.write(f"FAILED {r['kind']} {r['arg']}: {r['error']}\n{r.get('tb', '')}\n")
            print(f"FAILED {r['kind']} {r['arg']}: {r['error']}", flush=True)
        if r["kind"] == "env":
            merged["env"] = r
        else:
            merged[r["kind"]].append(r)
    # each file through a temporary one, renamed into place: a kill or a full disk keeps the earlier file
    _atomic(os.path.join(a.out, "env.json"), json.dumps(merged["env"], indent=1))
    _atomic(os.path.join(a.out, "probes.json.gz"), gzip.compress(json.dumps(merged["probe"]).encode()))
    _atomic(os.path.join(a.out, "traces.json.gz"), gzip.compress(json.dumps(merged["trace"]).encode()))
    _atomic(os.path.join(a.out, "searches.json"), json.dumps(merged["search"], indent=1))
    log.write(f"total {time.perf_counter() - t_start:.1f}s\n")
    log.close()
    print(f"done in {time.perf_counter() - t_start:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
