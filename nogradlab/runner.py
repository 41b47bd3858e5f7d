"""Execute the notebook collection (``python -m nogradlab run``) or the claim checks alone
(``python -m nogradlab claims``) and write claims.json and report.html.

    outcome = runner.run(device="cpu", scale="tiny", out="build")
    outcome.ok, outcome.path, outcome.doc

How the verdicts travel: before each notebook starts, the runner sets ``NOGRADLAB_LEDGER`` (a
JSON-lines file in the build folder) and ``NOGRADLAB_NOTEBOOK`` (the notebook's name); papermill's
kernel inherits them, and every ``claims.check`` inside the notebook appends its Result there.

A run builds into ``<out>.partial`` beside the output folder. Only when every notebook ran and
every claim got a verdict does it replace ``<out>``; otherwise it becomes ``<out>.failed`` and an
earlier complete report in ``<out>`` is left as it was.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from . import claims as _claims
from . import device as _device
from . import report as _report
from . import workloads as _workloads

__all__ = ["REPO", "discover", "run", "check_claims", "parse_ids", "default_dir", "RunOutcome"]

REPO = Path(__file__).resolve().parents[1]
_NB_RE = re.compile(r"^\d\d_.+\.ipynb$")
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_BUILD_MARKERS = ("claims.json", "report.html", "ledger.jsonl", "notebooks")


def default_dir(name: str) -> Path:
    """``./name`` when it exists (running from a checkout), else the one beside the package."""
    here = Path.cwd() / name
    return here if here.is_dir() else REPO / name


def discover(notebooks_dir) -> list:
    """The notebooks to run: ``NN_*.ipynb`` in ``notebooks_dir``, sorted; raises when there are none."""
    d = Path(notebooks_dir)
    if not d.is_dir():
        raise FileNotFoundError(f"notebooks folder {str(d)!r} does not exist")
    found = sorted(p for p in d.iterdir() if _NB_RE.match(p.name))
    if not found:
        raise FileNotFoundError(f"no notebooks named NN_*.ipynb in {str(d)!r}")
    return found


def parse_ids(text: "str | None") -> "list | None":
    """``"C01,C02"`` -> ``["C01", "C02"]`` (checked against the registry); None/"" -> None (all)."""
    if not text:
        return None
    chosen = [t.strip().upper() for t in text.split(",") if t.strip()]
    for c in chosen:
        _claims.get(c)  # raises naming the allowed ids
    return chosen


@dataclass
class RunOutcome:
    ok: bool
    path: Path  # the folder holding this run's report: <out> on success, <out>.failed otherwise
    doc: dict
    refs: list


def _check_out(out: Path) -> None:
    """Refuse to replace a folder that does not look like one of our builds."""
    if out.exists():
        if not out.is_dir():
            raise FileExistsError(f"output {str(out)!r} exists and is not a folder")
        entries = {p.name for p in out.iterdir()}
        if entries and not entries & set(_BUILD_MARKERS):
            raise FileExistsError(f"output folder {str(out)!r} is not empty and holds no earlier report "
                                  f"(claims.json / report.html); choose another --out")


def _kernel_manager(log):
    """A kernel manager class whose kernel process writes its own stdout/stderr (C++ warnings,
    profiler chatter: not the cells' output, which the notebook keeps) to the open file ``log``."""
    from jupyter_client import AsyncKernelManager

    class LoggedKernelManager(AsyncKernelManager):
        async def start_kernel(self, **kw):
            kw.setdefault("stdout", log)
            kw.setdefault("stderr", log)
            return await super().start_kernel(**kw)

    return LoggedKernelManager


def _execute(src: Path, dst: Path, params: dict, cwd: Path, ledger: Path) -> "dict | None":
    """Run one notebook with papermill into ``dst`` (the kernel's own process output goes to
    ``<dst>.kernel.log``, removed when empty); return None or the error record."""
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    log_path = dst.with_suffix(".kernel.log")
    log = open(log_path, "wb")
    saved = {k: os.environ.get(k) for k in ("NOGRADLAB_LEDGER", "NOGRADLAB_NOTEBOOK")}
    os.environ["NOGRADLAB_LEDGER"] = str(ledger)
    os.environ["NOGRADLAB_NOTEBOOK"] = src.stem
    try:
        pm.execute_notebook(str(src), str(dst), parameters=params, kernel_name="python3", language="python",
                            cwd=str(cwd), progress_bar=False, log_output=False,
                            kernel_manager_class=_kernel_manager(log),
                            extra_arguments=["--IPKernelApp.log_level=CRITICAL"])  # quiet kernel start
        return None
    except PapermillExecutionError as e:
        return {"cell": e.cell_index, "execution_count": e.exec_count, "ename": e.ename,
                "evalue": _ANSI_RE.sub("", str(e.evalue)), "source": e.source,
                "traceback": _ANSI_RE.sub("", "\n".join(e.traceback or []))}
    except Exception as e:  # kernel died, unreadable notebook, missing kernel, ...
        return {"cell": None, "execution_count": None, "ename": type(e).__name__, "evalue": str(e),
                "source": "", "traceback": ""}
    finally:
        log.close()
        if log_path.stat().st_size == 0:
            log_path.unlink()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _to_html(ipynb: Path) -> "Path | None":
    """Render an executed notebook to HTML beside it (images embedded); None when it cannot."""
    if not ipynb.exists():
        return None
    import nbformat
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="lab", embed_images=True)
    body, _ = exporter.from_notebook_node(nbformat.read(str(ipynb), as_version=4))
    out = ipynb.with_suffix(".html")
    out.write_text(body, encoding="utf-8")
    return out


def _read_ledger(path: Path) -> list:
    results = []
    if not path.exists():
        return results
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            results.append(json.loads(line))
        except json.JSONDecodeError:
            print(f"warning: ledger line {n} is not JSON; skipped", file=sys.stderr)
    return results


def _replace(src: Path, dst: Path) -> None:
    """Move folder ``src`` to ``dst``, replacing what was there only after the move succeeded."""
    old = dst.with_name(dst.name + ".previous")
    if old.exists():
        shutil.rmtree(old)
    if dst.exists():
        dst.rename(old)
    src.rename(dst)
    if old.exists():
        shutil.rmtree(old)


def run(device="auto", scale="auto", out="build", notebooks=None, results=None, progress: bool = True,
        command: str = "") -> RunOutcome:
    """Execute every notebook, gather the verdicts, write claims.json, the executed notebooks with
    their HTML, and report.html. See the module docstring for where the output lands."""
    dev = _device.resolve(device)  # bad input fails here, before any work
    scale = _workloads.resolve_scale(scale, dev)
    nb_dir = Path(notebooks) if notebooks else default_dir("notebooks")
    nbs = discover(nb_dir)
    out = Path(out).resolve()
    _check_out(out)
    results_dir = Path(results) if results else default_dir("results")
    refs = _report.load_references(results_dir)

    work = out.with_name(out.name + ".partial")
    failed_dir = out.with_name(out.name + ".failed")
    if work.exists():
        shutil.rmtree(work)
    (work / "notebooks").mkdir(parents=True)
    ledger = work / "ledger.jsonl"
    params = {"device": str(dev), "scale": scale}
    records = [{"name": p.stem, "status": "not run", "seconds": 0.0, "ipynb": None, "html": None,
                "kernel_log": None, "claims": [], "error": None} for p in nbs]

    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    interrupted = False
    current = records[0]
    bar = tqdm(total=len(nbs), desc="notebooks", unit="nb", disable=not progress, file=sys.stderr)
    try:
        for src, rec in zip(nbs, records):
            current = rec
            bar.set_postfix_str(src.stem)
            dst = work / "notebooks" / src.name
            t = time.perf_counter()
            err = _execute(src, dst, params, nb_dir.resolve(), ledger.resolve())
            rec["seconds"] = round(time.perf_counter() - t, 2)
            rec["status"] = "failed" if err else "ok"
            rec["error"] = err
            if dst.with_suffix(".kernel.log").exists():
                rec["kernel_log"] = f"notebooks/{dst.stem}.kernel.log"
            if dst.exists():
                rec["ipynb"] = f"notebooks/{dst.name}"
                try:
                    if _to_html(dst):
                        rec["html"] = f"notebooks/{dst.stem}.html"
                except Exception as e:  # a rendering problem is reported, not fatal
                    print(f"warning: could not render {dst.name} to HTML: {e}", file=sys.stderr)
            mark = "ok    " if not err else "FAILED"
            where = "" if not err else f"  ({_report.cell_name(err)}: {err['ename']}: {err['evalue'][:120]})"
            bar.write(f"{mark} {src.stem:<45} {rec['seconds']:7.1f} s{where}", file=sys.stdout)
            bar.update(1)
    except KeyboardInterrupt:
        interrupted = True
        if current["status"] == "not run":
            current.update(status="failed", error={"cell": None, "execution_count": None,
                                                   "ename": "KeyboardInterrupt", "evalue": "interrupted"})
    finally:
        bar.close()

    ledger_results = _read_ledger(ledger)
    for rec in records:
        rec["claims"] = sorted({r["id"] for r in ledger_results if r.get("notebook") == rec["name"]})
    doc = _report.build_doc(ledger_results, source="run", device=dev, scale=scale, notebooks=records,
                            seconds=time.perf_counter() - t0, command=command, interrupted=interrupted,
                            missing_reason="not run: no notebook checked this claim")
    _report.write_json(doc, work / "claims.json")
    _report.write_html(doc, work, refs)
    if doc["meta"]["complete"]:
        _replace(work, out)
        if failed_dir.exists():  # stale: this run supersedes it
            shutil.rmtree(failed_dir)
        return RunOutcome(True, out, doc, refs)
    _replace(work, failed_dir)
    return RunOutcome(False, failed_dir, doc, refs)


def check_claims(claim_ids=None, device="auto", scale="auto", seed: int = 0, progress: bool = True,
                 command: str = "") -> dict:
    """Run the claim checks alone (no notebooks) and return the claims.json document.

    Like ``claims.check_all`` with a progress bar, except that a check that raises is recorded
    (verdict None, the error in ``error``) and the rest still run.
    """
    dev = _device.resolve(device)
    scale = _workloads.resolve_scale(scale, dev)
    chosen = list(claim_ids) if claim_ids else _claims.ids()
    for c in chosen:
        _claims.get(c)
    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    results = []
    bar = tqdm(chosen, desc="claims", unit="claim", disable=not progress, file=sys.stderr)
    for cid in bar:
        bar.set_postfix_str(cid)
        t = time.perf_counter()
        try:
            results.append(_claims.check(cid, device=dev, scale=scale, seed=seed))
        except Exception as e:
            entry = _report.missing_entry(_claims.get(cid), f"the check raised {type(e).__name__}: {e}")
            entry.update(device=_device.describe(dev), torch=torch.__version__, scale=scale,
                         seconds=round(time.perf_counter() - t, 3))
            results.append(entry)
    bar.close()
    return _report.build_doc(results, source="claims", device=dev, scale=scale,
                             seconds=time.perf_counter() - t0, command=command, only=chosen)
