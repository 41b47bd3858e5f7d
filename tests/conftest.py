"""Shared pytest set-up: the markers of every test, by folder; and the papermill pass's times and memory,
printed at the end of the session (and written to test-artifacts/papermill/times.json). They are
figures, not limits: a slower machine takes longer; `make bench` prints them beside the budgets.

The folders follow the code: tests/core, tests/estimate, tests/lab, tests/claims and tests/run guard the
package's five wings (tests/claims/test_nb05.py: every check and judge of notebook 05's claims);
tests/lessons reads the stored notebooks as lessons; tests/tools guards tools/; tests/project the
packaging, environment files and README; tests/notebooks and tests/browser hold what starts a kernel or a
browser.

Markers (registered in pyproject.toml), given here by folder rather than in every test file:
* ``notebooks``: everything in tests/notebooks (executes notebooks or a Jupyter kernel/server: nbval,
  papermill, ``nogradlab run``, ``make lab``); the nbval items of notebooks/*.ipynb too;
* ``browser``: everything in tests/browser (drives headless Chromium: the report, JupyterLab, the book);
* ``gpu``: needs a CUDA GPU (skipped without one; found by the skip's reason), or rehearses the GPU
  reference run (GPU_FILES);
* ``integration``: runs claim checks, largest-batch searches or whole workloads end to end (seconds per
  test): marked at the test (``@pytest.mark.integration``, or a module's ``pytestmark``), every test that
  took about a second or more in ``pytest -m unit --durations`` on a 2-core CPU;
* ``unit``: everything else: the package's own tests, no kernel, no browser, no GPU, each well under a
  second. ``make unit`` (``pytest -m unit`` on two processes) is the quick pass: under a minute on a 2-core
  CPU.

``make test`` runs the tests on two processes (pytest-xdist, ``--dist loadfile``): most tests wait on a
notebook kernel, a browser or one single-threaded check, so the second core would idle. A file's tests stay
together on one process, in order: its module fixtures run once, and nbval runs a notebook's cells in one
kernel (nbval's own advice for xdist). The papermill figures are gathered from the processes.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

# a judge's own error on a stored column raises in every test (nogradlab.claims.strict), also in the
# notebooks' kernels, which inherit the environment; outside the tests it reads "needs re-measuring"
os.environ.setdefault("NOGRADLAB_STRICT_JUDGES", "1")
# allocation programs (nogradlab.estimate.programs) kept in a folder of this session's own, shared by its
# processes and notebook kernels: the user's cache is neither read nor written, and the test session
# starts from nothing (a test that counts traces would find them kept from an earlier run)
if "NOGRADLAB_CACHE_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    _CACHE = tempfile.mkdtemp(prefix="nogradlab-test-cache-")
    os.environ["NOGRADLAB_CACHE_DIR"] = _CACHE
    atexit.register(shutil.rmtree, _CACHE, True)  # the folder this process made

TESTS = Path(__file__).resolve().parent
# folder (under tests/) -> marker of every test in it
FOLDER_MARKERS = {"notebooks": "notebooks", "browser": "browser"}
# the files and tests below are named by their path under tests/
GPU_FILES = {"run/test_gpu_reference.py"}
# a list that names a file no longer there would mark nothing, silently: refuse it
_missing = sorted(f for f in GPU_FILES if not (TESTS / f).is_file())
if _missing:
    raise RuntimeError(f"tests/conftest.py names test files that do not exist: {_missing}")


def _kind(item) -> str:
    path = Path(str(item.fspath)).resolve()
    if path.suffix == ".ipynb":
        return "notebooks"
    try:
        rel = path.relative_to(TESTS).as_posix()
    except ValueError:  # outside tests/
        rel = path.name
    folder = rel.split("/")[0] if "/" in rel else ""
    if folder in FOLDER_MARKERS:
        return FOLDER_MARKERS[folder]
    # the same marker on every machine: by the skip's reason, whatever its condition is here
    needs_gpu = any("CUDA GPU" in str(m.kwargs.get("reason", "")) for m in item.iter_markers("skipif"))
    if rel in GPU_FILES or needs_gpu:
        return "gpu"
    if item.get_closest_marker("integration") is not None:  # marked at the test, or its module's pytestmark
        return "integration"
    return "unit"


def pytest_collection_modifyitems(config, items):
    for item in items:
        item.add_marker(getattr(pytest.mark, _kind(item)))


def _papermill_runs() -> dict:
    import sys

    mod = sys.modules.get("test_notebooks") or sys.modules.get("tests.notebooks.test_notebooks")
    return dict(getattr(mod, "RUNS", None) or {})


_WORKER_RUNS: dict = {}


def pytest_sessionfinish(session):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: hand the papermill figures to the controller
        import json

        workeroutput["papermill_runs"] = json.dumps(_papermill_runs())


def pytest_testnodedown(node, error):  # the controller, as each xdist worker finishes
    import json

    _WORKER_RUNS.update(json.loads(getattr(node, "workeroutput", {}).get("papermill_runs", "{}")))


def pytest_terminal_summary(terminalreporter):
    runs = {**_papermill_runs(), **_WORKER_RUNS}
    if not runs:
        return
    runs = dict(sorted(runs.items()))
    tr = terminalreporter
    tr.section("notebooks through papermill (device=cpu, scale=tiny)")
    for stem, r in runs.items():
        above = f"   {r['above_floor'] / 1e6:+5.0f} MB over the import floor" if "above_floor" in r else ""
        anon = f", anonymous {r['anon_peak'] / 1e6:5.0f} MB" if r.get("anon_peak") else ""
        tr.write_line(f"{stem:<40} {r['seconds']:7.1f} s   kernel peak RSS {r['peak_rss'] / 1e6:7.0f} MB{above}{anon}")
    total = sum(r["seconds"] for r in runs.values())
    peak = max(r["peak_rss"] for r in runs.values())
    tr.write_line(f"{'total':<40} {total:7.1f} s   highest peak RSS {peak / 1e6:7.0f} MB")
    try:
        import json

        from nogradlab.run.outdir import write_text_atomic

        out = TESTS.parent / "test-artifacts" / "papermill" / "times.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out, json.dumps({"total_seconds": total, "notebooks": runs}, indent=1))
    except (OSError, AttributeError):
        pass
