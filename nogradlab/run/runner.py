"""Execute the notebook collection (``python -m nogradlab run``) or the claim checks alone
(``python -m nogradlab claims``) and write claims.json and report.html.

    outcome = runner.run(device="cpu", scale="tiny", out="nogradlab-run")
    outcome.ok, outcome.path, outcome.doc

How the verdicts travel: before each notebook starts, the runner sets ``NOGRADLAB_LEDGER`` (a
JSON-lines file in the build folder) and ``NOGRADLAB_NOTEBOOK`` (the notebook's name); papermill's
kernel inherits them, and every ``claims.check`` inside the notebook appends its Result there.

A run builds into ``<out>.partial`` beside the output folder. Only when every notebook ran and
every claim got a verdict does it replace ``<out>``; otherwise it becomes ``<out>.failed`` (with a
``FAILED.txt`` naming the run and what happened) and an earlier complete report in ``<out>`` is left as
it was. Ctrl-C and SIGTERM end a run the same way; one that arrives while the report is being written
waits until it is written. Where a run may write, the lock against a second run and what it may delete
are ``nogradlab.outdir``'s rules: only folders it made, never anything it did not write.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import torch

from nogradlab import claims as _claims
from nogradlab.core import device as _device
from nogradlab.run import outdir as _outdir
from nogradlab.run import report as _report
from nogradlab.core import settings as _settings

__all__ = ["REPO", "discover", "run", "check_claims", "parse_ids", "default_dir", "notebooks_dir", "references",
           "RunOutcome", "is_checkout"]

REPO = Path(__file__).resolve().parents[2]
_NB_RE = re.compile(r"^\d\d_.+\.ipynb$")
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def is_checkout(root) -> bool:
    """True when ``root`` is a nogradlab checkout: the package's source beside a pyproject.toml naming it. A
    user's own project with a ``notebooks/`` or ``results/`` folder is not one."""
    root = Path(root)
    try:
        return (root / "nogradlab" / "__init__.py").is_file() and bool(
            re.search(r'^name\s*=\s*["\']nogradlab["\']\s*$', (root / "pyproject.toml").read_text(), re.M))
    except (OSError, UnicodeDecodeError):
        return False


def default_dir(name: str) -> Path:
    """``./name`` when the current folder is a nogradlab checkout, else the one beside the package. For
    ``results``, an installed package's own copy of the reference columns when there is no checkout
    (:func:`nogradlab.claims.results_dir`). Never a folder of that name in a user's own project."""
    here = Path.cwd() / name
    if here.is_dir() and is_checkout(Path.cwd()):
        return here
    if name == "results":
        return _claims.results_dir() or REPO / name
    return REPO / name


def notebooks_dir(notebooks=None) -> Path:
    """The notebooks ``run`` executes: ``notebooks`` when given, else the collection's own (a checkout's
    ``notebooks/``: the current folder's when it is a checkout, else the one beside the package). A
    ``notebooks/`` folder of the user's own project is never run unasked (its notebooks may write the user's
    files). An installed package carries no notebooks: without a checkout this raises FileNotFoundError
    saying what ``run`` needs, in one line."""
    if notebooks:
        return Path(notebooks)
    d = default_dir("notebooks")
    if not d.is_dir() or not is_checkout(d.parent):
        from nogradlab import _URL

        if (Path.cwd() / "notebooks").is_dir():
            raise FileNotFoundError(
                "run executes the lesson notebooks of a nogradlab checkout, and this folder is none: its ./notebooks "
                f"is not nogradlab's collection and was not run. Clone {_URL} and run it there, or pass "
                "--notebooks notebooks to run these; 'python -m nogradlab claims' runs the claim checks without "
                "notebooks")
        raise FileNotFoundError(
            "run executes the lesson notebooks of a nogradlab checkout, and there is none here (no ./notebooks; "
            f"an installed package carries none): clone {_URL} and run it there, or pass --notebooks DIR; "
            "'python -m nogradlab claims' runs the claim checks without notebooks")
    return d


def discover(notebooks_dir) -> list:
    """The notebooks to run: ``NN_*.ipynb`` in ``notebooks_dir``, sorted; raises when there are none."""
    d = Path(notebooks_dir)
    if not d.is_dir():
        raise FileNotFoundError(f"notebooks folder {str(d)!r} does not exist")
    found = sorted(p for p in d.iterdir() if _NB_RE.match(p.name))
    if not found:
        raise FileNotFoundError(f"no notebooks named NN_*.ipynb in {str(d)!r}")
    return found


def references(results=None, *, explicit: bool = True) -> list:
    """The reference runs shown beside a run's verdicts, each judged again by today's rules
    (:func:`nogradlab.report.load_references`), read before any work. ``explicit``: ``results`` was asked
    for (a missing folder is warned about); otherwise it is read only when it exists.

    A column whose entry holds something that is no measurement (NaN, an infinity, a 401-digit integer, a
    wrong type) reads "needs re-measuring" there, and an unreadable file is skipped with a warning (both
    ``load_references``'). Whatever else goes wrong judging them costs the reference columns, never the
    run: a one-line warning, no columns. In strict mode (:func:`nogradlab.claims.strict`, the tests) that
    error raises instead: it is a bug in nogradlab, found before any work.
    """
    if results is None or not (explicit or Path(results).is_dir()):
        return []
    try:
        return _report.load_references(results)
    except Exception as e:  # noqa: BLE001 - a reference never crashes a run; strict mode raises
        if _claims.strict():
            raise
        why = " ".join(f"{type(e).__name__}: {e}".split())
        print(f"warning: no reference runs shown: judging {str(results)!r} failed ({why[:300]})", file=sys.stderr)
        return []


def parse_ids(text: "str | None") -> "list | None":
    """``"C01,C02"`` -> ``["C01", "C02"]`` (checked against the registry); None -> None (all claims).

    An empty list, an empty item (``"C01,,C02"``) or an id given twice (``"C06,c06"``) raises ValueError.
    """
    if text is None:
        return None
    items = [t.strip().upper() for t in text.split(",")]
    if not any(items):
        raise ValueError("--ids is empty; give claim ids such as C01,C02, or leave --ids out for all claims")
    if not all(items):
        raise ValueError(f"--ids {text!r} has an empty item; separate claim ids with single commas, e.g. C01,C02")
    seen = set()
    for c in items:
        _claims.get(c)  # raises naming the allowed ids
        if c in seen:
            raise ValueError(f"--ids names {c} twice ({text!r}); give each claim once")
        seen.add(c)
    return items


@dataclass
class RunOutcome:
    ok: bool
    path: Path  # the folder holding this run's report: <out> on success, <out>.failed otherwise
    doc: dict
    refs: list
    reason: str = ""  # why the run failed, when it did


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
        err = {"cell": None, "execution_count": None, "ename": type(e).__name__, "evalue": str(e),
               "source": "", "traceback": ""}
        if dst.exists():  # say how far it got: the cell it died in, the last cell that finished
            err.update(_where_it_died(dst))
        return err
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
    body = offline_html(body)
    return _outdir.write_text_atomic(ipynb.with_suffix(".html"), body)


_REMOTE_SCRIPT = re.compile(r"<script\b[^>]*\bsrc\s*=\s*[\"'](?:https?:)?//[^>]*>\s*</script>\s*", re.I)
_REMOTE_LINK = re.compile(r"<link\b[^>]*\bhref\s*=\s*[\"'](?:https?:)?//[^>]*>\s*", re.I)
_MATHJAX_CONFIG = re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->\s*", re.S)


def offline_html(body: str) -> str:
    """An nbconvert page that opens fully offline: without the scripts and style sheets it would load from
    a CDN (require.js, MathJax, the widget renderer). Plain links in the text stay; TeX shows as source."""
    body = _MATHJAX_CONFIG.sub("", body)
    body = _REMOTE_SCRIPT.sub("", body)
    return _REMOTE_LINK.sub("", body)


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


class Terminated(KeyboardInterrupt):
    """SIGTERM, turned into an interrupt so that the run ends the way Ctrl-C ends it."""


@contextlib.contextmanager
def _signals(handler):
    """Route SIGINT and SIGTERM to ``handler`` inside the block (main thread only), then restore."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in old:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _raise_interrupt(signum, frame):
    import signal

    if signum == signal.SIGTERM:
        raise Terminated("terminated (SIGTERM)")
    raise KeyboardInterrupt


def _where_it_died(ipynb: Path) -> dict:
    """For a notebook whose kernel died: the cell it died in (the last one papermill started; papermill marks
    it "completed" all the same) and the last cell that finished before it."""
    try:
        import nbformat

        nb = nbformat.read(str(ipynb), as_version=4)
    except Exception:
        return {}
    started = [(i, c) for i, c in enumerate(nb.cells)
               if c.cell_type == "code" and c.get("metadata", {}).get("papermill", {}).get("start_time")]
    if not started:
        return {}
    i, c = started[-1]
    where = {"cell": i, "execution_count": c.get("execution_count"), "source": c.get("source", "")}
    if len(started) > 1:
        j, prev = started[-2]
        where.update(after_cell=j, after_execution_count=prev.get("execution_count"))
    return where


def run(device="auto", scale="auto", out="nogradlab-run", notebooks=None, results=None, progress: bool = True,
        command: str = "", *, settings: "_settings.Settings | None" = None) -> RunOutcome:
    """Execute every notebook, gather the verdicts, write claims.json, the executed notebooks with
    their HTML, and report.html. See the module docstring for where the output lands.

    ``device`` and ``scale`` are resolved once, here; a caller that resolved them already (the command
    line) passes its ``settings`` instead. Raises :class:`~nogradlab.outdir.OutputError` (before any work)
    for an output folder it may not use.
    """
    settings = _settings.given(settings, device, scale)  # bad input fails here, before any work
    nb_dir = notebooks_dir(notebooks)
    nbs = discover(nb_dir)
    results_dir = Path(results) if results else default_dir("results")
    protect = [nb_dir, results_dir, REPO / "nogradlab"]
    if Path(out).expanduser().absolute().parent == Path(out).expanduser().absolute():
        _outdir.prepare(out, protect=protect)  # refuses a filesystem root, naming it
    lock_path = _outdir.lock_path(out)
    if not lock_path.parent.is_dir():  # prepare() creates the missing folders, after its checks
        lock_path = _outdir.prepare(out, protect=protect).lock
    with _outdir.Lock(lock_path, repr(str(lock_path.parent / Path(out).name))):  # a second run stops here
        lay = _outdir.prepare(out, protect=protect)
        # an explicit --results is read (a misspelled one is warned about); the default only when it exists
        refs = references(results_dir, explicit=bool(results))
        # Ctrl-C and SIGTERM: while notebooks run they stop the run (an interrupt); once the report is being
        # written they are noted and honoured after it, so that no signal can leave half a build behind.
        state = {"phase": "running", "pending": []}

        def on_signal(signum, frame):
            if state["phase"] == "running":
                _raise_interrupt(signum, frame)
            if not state["pending"]:
                print("\nfinishing the report first (a second or two)...", file=sys.stderr)
            state["pending"].append(signum)

        with _signals(on_signal):
            return _run_locked(lay, settings, nb_dir, nbs, refs, progress, command, state)


def _run_locked(lay, settings, nb_dir, nbs, refs, progress, command, state) -> RunOutcome:
    dev, scale = settings.device, settings.scale
    run_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
    started = time.strftime("%Y-%m-%d %H:%M:%S %z")
    work = lay.partial
    _outdir.remove_ours(work)  # a partial build left by a run that died (the lock is free: nobody is writing)
    (work / "notebooks").mkdir(parents=True)
    _outdir.write_mark(work, run_id=run_id, started=started, state="running", command=command,
                       entries=list(_outdir.BUILD_ENTRIES), files=_written([p.stem for p in nbs]))
    ledger = work / "ledger.jsonl"
    params = {"device": str(dev), "scale": scale}
    records = [{"name": p.stem, "status": "not run", "seconds": 0.0, "ipynb": None, "html": None,
                "kernel_log": None, "claims": [], "error": None} for p in nbs]

    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    interrupted = None
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
        state["phase"] = "finishing"
    except KeyboardInterrupt as e:
        state["phase"] = "finishing"
        interrupted = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted (Ctrl-C)"
        if current["status"] == "not run":
            current.update(status="failed", error={"cell": None, "execution_count": None,
                                                   "ename": type(e).__name__, "evalue": interrupted})
    finally:
        state["phase"] = "finishing"
        bar.close()
    return _finish(lay, run_id, started, command, settings, records, ledger, refs, t0, interrupted,
                   state["pending"])


def _written(stems) -> list:
    """What a run may write below its folder's top level, named in its mark from the start (so that whatever
    else turns up there, a user's copy or ``.ipynb_checkpoints``, is never taken for its own and deleted)."""
    return ["notebooks"] + [f"notebooks/{s}{ext}" for s in stems for ext in (".ipynb", ".html", ".kernel.log")]


def _finish(lay, run_id, started, command, settings, records, ledger, refs, t0, interrupted, pending):
    work, out, failed_dir = lay.partial, lay.out, lay.failed
    mark = {"run_id": run_id, "started": started, "command": command, "entries": list(_outdir.BUILD_ENTRIES),
            "files": _written([r["name"] for r in records])}
    write_error = None
    doc = None
    try:
        ledger_results = _read_ledger(ledger)
        for rec in records:
            rec["claims"] = sorted({r["id"] for r in ledger_results if r.get("notebook") == rec["name"]})
        doc = _report.build_doc(ledger_results, source="run", settings=settings, notebooks=records,
                                seconds=time.perf_counter() - t0, command=command, interrupted=bool(interrupted),
                                missing_reason="not run: no notebook checked this claim")
        _report.write_json(doc, work / "claims.json")
        _report.write_html(doc, work, refs)
    except OSError as e:  # a full disk, a folder turned read-only, ...
        write_error = f"could not write the report: {e}"
    except Exception as e:  # noqa: BLE001 - a bug in the report step: the notebooks' work still lands in .failed
        write_error = f"could not write the report: {type(e).__name__}: {e}"
    if doc is None:
        doc = {"meta": {"complete": False, "interrupted": bool(interrupted), "notebooks": records, "counts": {}},
               "claims": []}
    complete = doc["meta"]["complete"] and write_error is None and not interrupted
    if pending and complete:
        note = "a Ctrl-C or SIGTERM arrived while the finished report was being written; it was completed first"
        print(note, file=sys.stderr)
    try:
        if complete:
            _outdir.write_mark(work, state="complete", **mark)
            _outdir.replace_dir(work, out, lay.previous)
            _outdir.remove_ours(failed_dir)  # an earlier failure this run supersedes
            return RunOutcome(True, out, doc, refs)
        reasons = ([interrupted] if interrupted else []) + ([write_error] if write_error else [])
        failed = [n["name"] for n in records if n["status"] == "failed"]
        if failed:
            reasons.append(f"{len(failed)} notebook(s) failed: {', '.join(failed)}")
        missing = doc["meta"].get("counts", {}).get(_report.NOT_RUN, 0)
        if missing:
            reasons.append(f"{missing} claim(s) without a verdict")
        reason = "; ".join(reasons) or "incomplete"
        try:
            _outdir.write_text_atomic(work / "FAILED.txt",
                                      f"nogradlab run {run_id}, started {started}, ended "
                                      f"{time.strftime('%Y-%m-%d %H:%M:%S %z')}\n"
                                      f"command: {command or '(python API)'}\nwhat happened: {reason}\n")
        except OSError:
            pass
        try:
            _outdir.write_mark(work, state="failed", reason=reason, **mark)
        except OSError:
            pass
        _outdir.replace_dir(work, failed_dir, failed_dir.with_name(failed_dir.name + ".previous"))
        doc["meta"]["failure"] = reason
        return RunOutcome(False, failed_dir, doc, refs, reason=reason)
    except (OSError, _outdir.OutputError) as e:
        reason = f"could not move the build into place: {e}"
        return RunOutcome(False, work, doc, refs, reason=reason)


def check_claims(claim_ids=None, device="auto", scale="auto", seed: int = 0, progress: bool = True,
                 command: str = "", *, settings: "_settings.Settings | None" = None) -> dict:
    """Run the claim checks alone (no notebooks) and return the claims.json document.

    Like ``claims.check_all`` with a progress bar, except that a check that raises is recorded
    (verdict None, the error in ``error``) and the rest still run. ``device``, ``scale`` and ``seed`` are
    resolved once, here, or given resolved as ``settings`` (the command line), and handed to every check.
    """
    settings = _settings.given(settings, device, scale, seed)
    dev, scale = settings.device, settings.scale
    chosen = list(claim_ids) if claim_ids else _claims.ids()
    for c in chosen:
        _claims.get(c)
    _claims.ledger_path()  # a bad NOGRADLAB_LEDGER fails here, not as every check's error
    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    results = []
    bar = tqdm(chosen, desc="claims", unit="claim", disable=not progress, file=sys.stderr)
    for cid in bar:
        bar.set_postfix_str(cid)
        t = time.perf_counter()
        try:
            results.append(_claims.check(cid, settings=settings))
        except Exception as e:
            entry = _report.missing_entry(_claims.get(cid), f"the check raised {type(e).__name__}: {e}")
            entry.update(device=_device.describe(dev), torch=torch.__version__, scale=scale,
                         seconds=round(time.perf_counter() - t, 3))
            results.append(entry)
    bar.close()
    return _report.build_doc(results, source="claims", settings=settings,
                             seconds=time.perf_counter() - t0, command=command, only=chosen)
