"""The reference run on one GPU: every claim at full scale, and the measurements behind the memory
figures checked against the CUDA caching allocator itself. Meant to finish within 8 minutes.

    python benchmarks/gpu_reference.py                         # on the GPU machine
    python benchmarks/gpu_reference.py --device cpu --scale tiny --out /tmp/rehearsal --claims C06,C09

Sections (each prints what it does, or why it is skipped):

1. **probes** (CUDA only): ``memory.measure(method="allocator")`` of a grad and a no_grad forward
   of every workload against ``torch.cuda.max_memory_allocated`` read directly around the same call.
2. **OOM leak** (CUDA only): a training step far over a 1 GiB cap, recovered by the search's OOM
   guard; ``torch.cuda.memory_allocated`` after must equal before.
3. **estimate vs real**: the fake-tensor estimate (``batch`` module, virtual CUDA on a GPU) against
   the real total peak (``batch.measured_bytes``: the allocator on CUDA, live storages on a CPU) for
   each workload at its default batch: grad forward, eval+no_grad forward, training step.
4. **claims**: every claim check (``nogradlab.claims.check``, one at a time so that one failure
   does not stop the others) at ``--scale`` on ``--device``.
5. **largest batch**: under 12 and 16 GiB for every workload, real OOM search (CUDA) beside the
   estimate; taken from C04's evidence when C04 ran on this GPU, else run here. Each real search
   must leave ``memory_allocated`` as it found it.

Writes ``<out>/<machine>/claims.json`` (the report's schema, ``nogradlab.report``),
``<out>/<machine>/gpu_reference.json`` (sections 1-3 and 5) and ``<out>/<machine>/summary.md``.
Exits 1 when a CUDA check failed (probe mismatch, leaked bytes), after writing everything.
A time budget (``--time-budget``, 480 s) skips what would start after it, with a printed reason.
C04 and C09 run with ``real_search="all"`` here: every largest batch is searched for real (a
notebook's default checks only one).

Partial runs (a run split by its time budget, or one that stopped):

    python benchmarks/gpu_reference.py --resume results/cuda-nvidia-h200/claims.json
        # runs only the claims without a verdict there, then writes the merged claims.json
    python benchmarks/gpu_reference.py --merge part1/claims.json part2/claims.json --out results
        # no measurement: merges finished partial runs (same machine, scale, torch) into one

A partial run (``--claims`` a subset, or a check that failed) never replaces a complete
``<out>/<machine>/claims.json`` unasked: ``--claims`` is refused before any work, and a run whose check
failed writes ``claims.partial.json`` beside the complete file; ``--force`` replaces it.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from nogradlab import batch, claims, memory, modes, report, workloads  # noqa: E402
from nogradlab import device as nd  # noqa: E402
from nogradlab.outdir import OutputError, check_not_partial_over_complete, write_text_atomic  # noqa: E402

GiB = 2 ** 30
FMT = memory.format_bytes
MODES = ("grad", "eval+no_grad", "train")


def log(msg: str) -> None:
    print(msg, flush=True)


class Clock:
    def __init__(self, budget_s: float):
        self.t0 = time.perf_counter()
        self.budget = budget_s

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def left(self, need_s: float = 0.0) -> bool:
        return self.elapsed + need_s < self.budget


# ------------------------------------------------------------------------------------ sections

def probes(dev, names, scale) -> list:
    """memory.measure(method='allocator') against max_memory_allocated read around the same call."""
    rows = []
    for name in names:
        wl = workloads.get(name, scale)
        torch.manual_seed(0)
        model = wl.build(dev)
        x = wl.make_input(wl.default_batch, dev)
        for setting in ("eval+grad", "eval+no_grad"):
            def fn(setting=setting, model=model, x=x):  # bound now: `del model, x` below
                with modes.setting(setting, model=model, device=dev):
                    return model(x)

            fn()  # warm-up: library workspaces, kernels chosen
            nd.synchronize(dev)
            rep = memory.measure(fn, dev, method="allocator")
            gc.collect()
            nd.synchronize(dev)
            before = torch.cuda.memory_allocated(dev)
            torch.cuda.reset_peak_memory_stats(dev)
            out = fn()
            nd.synchronize(dev)
            direct = torch.cuda.max_memory_allocated(dev) - before
            del out
            rows.append({"workload": name, "setting": setting, "batch": wl.default_batch,
                         "probe_peak_bytes": rep.peak_bytes, "direct_peak_bytes": direct,
                         "saved_bytes": rep.saved_bytes, "agree": rep.peak_bytes == direct})
            log(f"  {name:16s} {setting:13s} probe {FMT(rep.peak_bytes):>11s}  direct {FMT(direct):>11s}"
                f"  {'ok' if rows[-1]['agree'] else 'MISMATCH'}")
        del model, x
        gc.collect()
        torch.cuda.empty_cache()
    return rows


def oom_leak(dev) -> dict:
    """A ResNet-50 training step at batch 256 under a 1 GiB cap, through the search's OOM guard: it
    must run out of memory, and leave ``memory_allocated`` as it was (read with the model alive,
    after a warm-up step at batch 1 without the cap)."""
    run, reset, model = batch._real_runner(workloads.get("resnet50", "full"), "train", dev)
    guarded = None
    try:
        guarded = batch._oom_guarded(run, reset)
        guarded(1)
        nd.synchronize(dev)
        before = torch.cuda.memory_allocated(dev)
        with batch.memory_cap(GiB, dev):
            fits, _ = guarded(256)
        nd.synchronize(dev)
        after = torch.cuda.memory_allocated(dev)
    finally:
        del guarded, run, reset, model
        gc.collect()
        torch.cuda.empty_cache()
    r = {"cap_bytes": GiB, "batch": 256, "oom": not fits, "allocated_before": before,
         "allocated_after": after, "leak_free": before == after and not fits}
    log(f"  ResNet-50 training step, batch 256, 1 GiB cap: {'OOM' if not fits else 'fitted (?)'}; "
        f"allocated before {before}, after {after}: {'ok' if r['leak_free'] else 'FAILED'}")
    return r


def estimate_vs_real(dev, names, scale) -> list:
    est_dev = str(dev) if dev.type == "cuda" else "cpu"
    rows = []
    for name in names:
        b = workloads.get(name, scale).default_batch
        for mode in MODES:
            est, notes = batch._estimated_bytes(name, scale, mode, b, est_dev)
            real = batch.measured_bytes(name, mode, b, dev, scale=scale)
            rows.append({"workload": name, "mode": mode, "batch": b, "estimate_bytes": est,
                         "real_bytes": real, "ratio": est / real if real else None,
                         "estimate_notes": list(notes),
                         "real_method": "allocator" if dev.type == "cuda" else "storage"})
            log(f"  {name:16s} {mode:13s} batch {b:4d}: estimate {FMT(est):>11s}  real {FMT(real):>11s}"
                f"  ({est / real:.3f}x)")
            if dev.type == "cuda":
                gc.collect()
                torch.cuda.empty_cache()
    return rows


#: knobs the reference run passes to checks (the full, slow variant of what a notebook does)
# the reference run measures what a learner's notebook leaves out to stay within its minute (see
# nogradlab.claims.Context.reference): the compute-bound batch and the levers there, every largest batch
# by a real OOM search under both budgets, torch.compile in X05, the longer sequence sweep
REFERENCE_PARAMS = {"C04": {"real_search": "all"}, "C09": {"real_search": "all"}}

#: the timing knobs of the reference run on a GPU (nogradlab.claims.measure._knobs reads them from the
#: params): twice a learner's minimum rounds and 4x their sample length (20 ms), looks at 20, 30, 40, 60
#: and 80 rounds, up to 4 s of rounds a condition; a learner's GPU notebook takes 10 rounds of 10 ms, 1.5 s
REFERENCE_TIMING = {"rounds": 20, "min_run_time": 0.4, "max_rounds": 80, "time_budget": 4.0}


def params_for(cid: str, dev=None) -> dict:
    """The params of a check in the reference run: the reference's own timing knobs on a CUDA device
    (a CPU rehearsal keeps the tiny run's)."""
    timing_knobs = REFERENCE_TIMING if dev is not None and torch.device(dev).type == "cuda" else {}
    return {"reference": True, **timing_knobs, **REFERENCE_PARAMS.get(cid, {})}


def run_claims(ids, dev, scale, clock) -> list:
    results = []
    for cid in ids:
        if not clock.left(20):
            log(f"  {cid}: skipped, time budget spent ({clock.elapsed:.0f} s)")
            results.append(report.missing_entry(claims.get(cid), "skipped: time budget spent"))
            continue
        try:
            r = claims.check(cid, device=str(dev), scale=scale, **params_for(cid, dev))
            results.append(r)
            log(f"  {cid} [{r.verdict}] {r.seconds:.1f} s: {r.summary[:160]}")
        except Exception as e:  # noqa: BLE001 - one failing check must not stop the reference run
            reason = f"{type(e).__name__}: {e}"
            log(f"  {cid}: ERROR {reason}")
            traceback.print_exc()
            results.append(report.missing_entry(claims.get(cid), reason))
    return results


def _row_key(r) -> tuple:
    return (r["workload"], r["budget_bytes"], r["mode"], r["method"], r["scale"])


def largest_batches(dev, names, budgets, scale, c04, clock, earlier=()) -> list:
    """Rows (workload, budget, mode, method, batch, ...): from C04's evidence where it has them, else
    from ``earlier`` (a resumed run's rows, kept as they were), else searched here."""
    have = {}
    for r in earlier:
        have[_row_key(r)] = r
    if c04 is not None and c04.get("verdict") is not None:
        for r in (c04.get("measurements") or c04.get("evidence") or {}).get("searches", []):
            have.setdefault(_row_key(r), dict(r, source="C04"))
    methods = ("search", "estimate") if dev.type == "cuda" else ("estimate",)
    target = str(dev) if dev.type == "cuda" else "cuda"
    rows = []
    for name in names:
        for gib in budgets:
            for mode in MODES:
                for method in methods:
                    key = (name, int(gib * GiB), mode, method, scale)
                    if key in have:
                        rows.append(dict(have[key]))
                    elif clock.left(30):
                        r = batch.largest_batch(name, mode, int(gib * GiB), target, scale=scale,
                                                method=method, max_batch=2 ** 22)
                        rows.append(dict(r.to_dict(), trials=len(r.trials),
                                         bytes_at_batch=r.bytes_at(r.batch), source="here"))
                    else:
                        log(f"  {name} {gib:g} GiB {mode} {method}: skipped, time budget spent")
                        continue
                    r = rows[-1]
                    leak = (r.get("allocated_before") is not None
                            and r["allocated_before"] != r["allocated_after"])
                    r["leak_free"] = not leak
                    log(f"  {name:16s} {gib:4g} GiB {mode:13s} {method:8s} batch {r['batch']:7d} "
                        f"({r['trials']} trials{', LEAK' if leak else ''}) [{r['source']}]")
    return rows


# ------------------------------------------------------------------------------------ output

def summary_md(meta, doc, sections) -> str:
    lines = [f"# GPU reference run: {meta['device_label']}", "",
             f"scale {meta['scale']}, torch {meta['torch']}, {meta['date']}, "
             f"{meta['seconds']:.0f} s", "", "## Claims", "", "| id | verdict | measured |", "|---|---|---|"]
    for c in doc["claims"]:
        text = (c.get("summary") or "").replace("|", "/").replace("\n", " ")
        lines.append(f"| {c['id']} | {c['verdict'] or 'not run'} | {text[:300]} |")
    for title, key, cols in (
            ("Probes: measure(allocator) vs max_memory_allocated", "probes",
             ("workload", "setting", "probe_peak_bytes", "direct_peak_bytes", "agree")),
            ("Estimate vs real total peak", "estimate_vs_real",
             ("workload", "mode", "batch", "estimate_bytes", "real_bytes", "ratio")),
            ("Largest batch", "largest_batch",
             ("workload", "budget_bytes", "mode", "method", "batch", "trials", "leak_free"))):
        rows = sections.get(key)
        lines += ["", f"## {title}", ""]
        if not rows:
            lines.append(f"skipped: {sections.get('skipped', {}).get(key, 'not run')}")
            continue
        lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for r in rows:
            cells = [FMT(r[c]) if c.endswith("bytes") and isinstance(r[c], int) else
                     f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in cols]
            lines.append("| " + " | ".join(cells) + " |")
    oom = sections.get("oom_leak")
    lines += ["", "## OOM leak check", "",
              json.dumps(oom) if oom else f"skipped: {sections.get('skipped', {}).get('oom_leak')}"]
    failures = sections.get("failures") or []
    lines += ["", "## Checks (probes agree, nothing left allocated, no section crashed)", "",
              "all passed" if not failures else
              "FAILED: " + "; ".join(failures), ""]
    return "\n".join(lines)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="auto", help=f"one of {', '.join(nd.ALLOWED)}")
    p.add_argument("--scale", default="auto", help="auto, tiny, small or full")
    p.add_argument("--out", default="results", help="results folder (a subfolder per machine)")
    p.add_argument("--claims", default="", help="comma-separated claim ids (default: all)")
    p.add_argument("--workloads", default="", help="comma-separated workloads for sections 1, 3, 5 "
                                                   f"(default: {', '.join(workloads.names())})")
    p.add_argument("--budgets-gib", default="12,16", help="budgets for section 5")
    p.add_argument("--time-budget", type=float, default=480.0, help="seconds; later work is skipped")
    p.add_argument("--resume", default=None, metavar="CLAIMS_JSON",
                   help="an earlier (partial) claims.json of this machine: its verdicts are kept, only the "
                        "claims without one run, and the merged file is written")
    p.add_argument("--merge", nargs="+", default=None, metavar="CLAIMS_JSON",
                   help="merge these partial claims.json files (same machine, scale, torch) into "
                        "<out>/<machine>/claims.json and exit; nothing is measured")
    p.add_argument("--note", default="", help="a note on how the file was made (kept in meta.note)")
    p.add_argument("--commit", default="", help="the nogradlab commit that made the merged runs, when known")
    p.add_argument("--force", action="store_true",
                   help="let a partial run (--claims, or a check that failed) replace a complete "
                        "<out>/<machine>/claims.json (without it a partial run is refused, or written beside it)")
    return p.parse_args(argv)


class Refused(Exception):
    """An input the run will not use (checked before any work; the command exits 2 with the message)."""


def _load_input(path, what) -> dict:
    """A claims.json given to ``--resume``/``--merge``, read and validated, or :class:`Refused`."""
    p = Path(path)
    if not p.is_file():
        raise Refused(f"{what} {path}: {'not a regular file' if p.exists() else 'no such file'}")
    try:
        return report.load_doc(p)
    except (ValueError, OSError, RecursionError, UnicodeDecodeError) as e:
        raise Refused(f"{what} {path} is not a readable claims.json ({type(e).__name__}: {e})") from None


def _earlier_sections(resume, meta) -> dict:
    """The sections of the ``gpu_reference.json`` beside ``resume`` (``{}`` when there is none); refused
    when it is unreadable or another machine's, scale's or torch's."""
    p = Path(resume).with_name("gpu_reference.json")
    if not p.exists():
        return {}
    if not p.is_file():  # a FIFO would be waited on forever, a device read without end
        raise Refused(f"--resume: {p} is not a regular file; move it away to measure its sections again")
    try:
        d = json.loads(p.read_text())
        if not isinstance(d, dict) or not isinstance(d.get("meta"), dict):
            raise ValueError("no meta block")
    except (ValueError, OSError, RecursionError, UnicodeDecodeError) as e:
        raise Refused(f"--resume: {p} is not a readable gpu_reference.json ({type(e).__name__}: {e}); "
                      f"move it away to measure its sections again") from None
    m = d["meta"]
    for k in ("device_label", "scale", "torch"):
        if m.get(k) != meta[k]:
            raise Refused(f"--resume: {p} was measured with {k} {m.get(k)!r}, this run's is {meta[k]!r}")
    return d


def _check_resume(doc, path, machine, scale) -> None:
    m = doc["meta"]
    if m["machine"] != machine:
        raise Refused(f"--resume {path} is another machine's run ({m['machine']}; this is {machine})")
    if m["scale"] != scale:
        raise Refused(f"--resume {path} ran at scale {m['scale']}; this run's is {scale} (give --scale {m['scale']})")
    if m["torch"] != torch.__version__:
        raise Refused(f"--resume {path} ran with torch {m['torch']}; this is torch {torch.__version__}")


def merge_main(a) -> int:
    """``--merge``: one claims.json from finished partial runs; refuses to overwrite a file that is
    not a claims.json of the same machine."""
    docs = [_load_input(f, "--merge") for f in a.merge]
    try:
        doc = report.merge_docs(docs, names=[Path(f).name for f in a.merge], note=a.note,
                                commit=a.commit or None)
    except ValueError as e:
        raise Refused(f"--merge: {e}") from None
    target = Path(a.out) / doc["meta"]["machine"] / "claims.json"
    if target.exists() and not target.is_file():  # a FIFO would be waited on forever
        raise Refused(f"refusing to replace {target}: not a regular file")
    if not a.force:  # a partial merge never replaces a complete column unasked
        try:
            check_not_partial_over_complete(target, not doc["meta"]["complete"],
                                            what=f"the merge covers {len(doc['claims'])} of {len(claims.ids())} claims")
        except OutputError as e:
            raise Refused(str(e)) from None
    if target.exists() and target.resolve() not in {Path(f).resolve() for f in a.merge}:
        try:
            old = report.load_doc(target)
        except (ValueError, OSError, RecursionError) as e:
            raise Refused(f"refusing to replace {target}: not a valid claims.json ({e})") from None
        if old["meta"]["machine"] != doc["meta"]["machine"]:
            raise Refused(f"refusing to replace {target}: it is another machine's")
    report.write_json(doc, target)
    c = doc["meta"]["counts"]
    log(f"merged {len(docs)} runs into {target}: " + ", ".join(f"{n} {w}" for w, n in c.items()))
    return 0


def main(argv=None) -> int:
    try:
        return _main(argv)
    except Refused as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


#: the sections a resumed run keeps from the earlier gpu_reference.json when they were measured there
RESUMABLE = ("probes", "oom_leak", "estimate_vs_real")


def _main(argv=None) -> int:
    a = parse_args(argv)
    if a.merge:
        return merge_main(a)
    try:  # bad input: one line naming what is allowed, exit 2, before any work
        dev = nd.resolve(a.device)
        scale = workloads.resolve_scale(a.scale, dev)
        ids = [c.strip().upper() for c in a.claims.split(",") if c.strip()] or claims.ids()
        for c in ids:
            claims.get(c)
        for w in (w.strip() for w in a.workloads.split(",")):
            if w:
                workloads.get(w, scale)
    except (ValueError, RuntimeError) as e:
        raise Refused(" ".join(str(e).split())) from None
    info = nd.describe(dev)
    machine = report.machine_slug(info)
    earlier = None
    old = {}  # the earlier run's sections (--resume), kept where they were measured
    if a.resume:  # every check on the earlier files before any measuring
        earlier = _load_input(a.resume, "--resume")
        _check_resume(earlier, a.resume, machine, scale)
        old = _earlier_sections(a.resume, {"device_label": nd.label(info), "scale": scale,
                                           "torch": torch.__version__})
        done = {c["id"] for c in earlier["claims"] if c["verdict"] is not None}
        kept = [c for c in ids if c in done]
        ids = [c for c in ids if c not in done]
        log(f"resuming {a.resume}: {len(kept)} verdicts kept, {len(ids)} claims to run")
    target = Path(a.out) / machine / "claims.json"
    covered = set(ids) | ({c["id"] for c in earlier["claims"] if c["verdict"] is not None} if earlier else set())
    if not a.force:  # a partial run never replaces a complete column unasked: refused before any work
        try:
            check_not_partial_over_complete(target, covered != set(claims.ids()),
                                            what=f"this run covers {len(covered)} of {len(claims.ids())} claims")
        except OutputError as e:
            raise Refused(str(e)) from None
    names = [w.strip() for w in a.workloads.split(",") if w.strip()] or list(workloads.names())
    for w in names:
        workloads.get(w, scale)
    try:
        budgets = [float(b) for b in a.budgets_gib.split(",") if b.strip()]
    except ValueError:
        budgets = []
    if not budgets or not all(0 < b < float("inf") for b in budgets):
        raise Refused("--budgets-gib needs positive numbers")
    clock = Clock(a.time_budget)
    cuda = dev.type == "cuda"
    log(f"gpu_reference: {nd.label(info)}, scale {scale}, {len(ids)} claims, workloads {', '.join(names)}")
    sections = {"skipped": {}}
    no_cuda = f"no CUDA device ({dev}): the allocator checks need one"

    errors = sections["errors"] = {}

    def section(key, title, fn, needs_cuda=False):
        """Run one section; a crash is recorded (and fails the run) instead of ending it."""
        log(title)
        if key in RESUMABLE and old.get(key):
            sections[key] = old[key]
            log(f"  kept from {Path(a.resume).with_name('gpu_reference.json')} (measured there)")
            return
        if needs_cuda and not cuda:
            log(f"  skipped: {no_cuda}")
            sections["skipped"][key] = no_cuda
            return
        try:
            sections[key] = fn()
        except Exception as e:  # noqa: BLE001 - the other sections still run
            traceback.print_exc()
            errors[key] = f"{type(e).__name__}: {e}"
            sections["skipped"][key] = f"crashed: {errors[key]}"
            log(f"  ERROR {errors[key]}")

    section("probes", "1. probes: measure(method='allocator') vs torch.cuda.max_memory_allocated",
            lambda: probes(dev, names, scale), needs_cuda=True)
    section("oom_leak", "2. OOM leak check", lambda: oom_leak(dev), needs_cuda=True)
    section("estimate_vs_real", "3. estimate vs real total peak",
            lambda: estimate_vs_real(dev, names, scale))
    log("4. claims")
    results = run_claims(ids, dev, scale, clock)
    c04 = next((r.to_dict() if hasattr(r, "to_dict") else r for r in results
                if (r.id if hasattr(r, "id") else r["id"]) == "C04"), None)
    if c04 is None and earlier is not None:  # C04's verdict kept from the earlier run
        c04 = next((c for c in earlier["claims"] if c["id"] == "C04"), None)
    old_rows = [r for r in old.get("largest_batch") or [] if isinstance(r, dict)]
    if old_rows:
        log(f"  {len(old_rows)} largest-batch rows kept from the earlier run")
    section("largest_batch", "5. largest batch under " + ", ".join(f"{b:g} GiB" for b in budgets)
            + ("" if cuda else " (estimates only: " + no_cuda + ")"),
            lambda: largest_batches(dev, names, budgets, scale, c04, clock, earlier=old_rows))
    if old_rows:  # rows of the earlier run outside this run's workloads or budgets stay too
        here = {_row_key(r) for r in sections.get("largest_batch") or []}
        sections["largest_batch"] = (sections.get("largest_batch") or []) + [
            r for r in old_rows if _row_key(r) not in here]

    failures = [f"section {k} crashed" for k in errors]
    failures += [f"probe {r['workload']} {r['setting']}" for r in sections.get("probes", [])
                 if not r["agree"]]
    if "oom_leak" in sections and not sections["oom_leak"]["leak_free"]:
        failures.append("memory left allocated after an OOM (or no OOM)")
    failures += [f"leak in search {r['workload']} {r['mode']}"
                 for r in sections.get("largest_batch", []) if not r["leak_free"]]
    sections["failures"] = failures

    doc = report.build_doc(results, source="claims", device=str(dev), scale=scale,
                           seconds=clock.elapsed, command="benchmarks/gpu_reference.py "
                           + " ".join(argv if argv is not None else sys.argv[1:]),
                           only=ids if (a.claims or earlier is not None) else None)
    if earlier is not None:
        doc = report.merge_docs([earlier, doc], names=[str(a.resume), "this run"], note=a.note)
    meta = dict(doc["meta"], date=_dt.datetime.now(_dt.timezone.utc).date().isoformat(),
                seconds=clock.elapsed)
    folder = Path(a.out) / doc["meta"]["machine"]
    # every file through a temporary one renamed into place: a kill or a full disk keeps the earlier file
    written = folder / "claims.json"
    if not doc["meta"]["complete"] and not a.force:
        try:  # some check failed: the complete column there stays, this run's document goes beside it
            check_not_partial_over_complete(written, True)
        except OutputError:
            written = folder / "claims.partial.json"
            log(f"kept the complete {folder / 'claims.json'}: this run's document is partial (some claims "
                f"without a verdict); it is in {written} (--force replaces the complete one)")
    report.write_json(doc, written)
    write_text_atomic(folder / "gpu_reference.json", json.dumps(
        {"meta": {k: meta[k] for k in ("device", "device_label", "torch", "scale", "date", "seconds")},
         **{k: v for k, v in sections.items()}}, indent=1, default=str) + "\n")
    write_text_atomic(folder / "summary.md", summary_md(meta, doc, sections))
    log(f"wrote {written}, {folder}/gpu_reference.json, summary.md in {clock.elapsed:.0f} s")
    if failures:
        log("CUDA checks FAILED: " + "; ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
