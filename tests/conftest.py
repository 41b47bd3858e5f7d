"""Shared pytest set-up: the markers of every test, by file; and the papermill pass's times and memory,
printed at the end of the session (and written to test-artifacts/papermill/times.json). They are
figures, not limits: a slower machine takes longer; `make bench` prints them beside the budgets.

Markers (registered in pyproject.toml), given here by file rather than in every test file:
* ``notebooks``: executes notebooks or a Jupyter kernel/server (nbval, papermill, ``nogradlab run``,
  ``make lab``); the nbval items of notebooks/*.ipynb too;
* ``browser``: drives headless Chromium (the report, JupyterLab);
* ``gpu``: needs a CUDA GPU (skipped without one), or rehearses the GPU reference run;
* ``integration``: runs claim checks, largest-batch searches or whole workloads end to end (seconds per
  test): the claims' tests, and the slowest package tests, by name (measured on a 2-core CPU);
* ``unit``: everything else: the package's own tests, no kernel, no browser, no GPU, each well under a
  second. ``pytest -m unit`` (``make unit``) is the quick pass: under a minute on a 2-core CPU.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

# a judge's own error on a stored column raises in every test (nogradlab.claims.strict), also in the
# notebooks' kernels, which inherit the environment; outside the tests it reads "needs re-measuring"
os.environ.setdefault("NOGRADLAB_STRICT_JUDGES", "1")

NOTEBOOK_FILES = {"test_notebooks.py", "test_cli.py", "test_output_safety.py", "test_make_lab.py",
                  "test_session_bench.py"}
BROWSER_FILES = {"test_browser_lab.py", "test_report_mobile.py", "test_book.py"}
GPU_FILES = {"test_gpu_reference.py"}
INTEGRATION_FILES = {"test_claims_numbers.py", "test_claims_semantics.py", "test_verdicts.py",
                     "test_lesson_verdicts.py", "test_stored_columns_fuzz.py"}
# file -> tests (without parameters) that take seconds: measured with --durations on a 2-core AMD EPYC
# (torch 2.14.1), 2 s to 21 s each (all parameters together)
INTEGRATION_TESTS = {
    "test_own_model.py": {"test_cpu_estimate_equals_measure_to_the_byte",
                          "test_built_in_workloads_get_exactly_what_they_got_before"},
    "test_cudamodel.py": {"test_largest_batch_brackets_the_h200_searches",
                          "test_largest_batch_under_inference_mode_is_no_grads"},
    "test_probe_honesty.py": {"test_first_probe_in_a_process_leaves_the_rng_alone"},
    "test_batch.py": {"test_c04_check_compares_modes_and_agrees_with_real_cpu_runs"},
    "test_workloads.py": {"test_tiny_forward_backward"},
    "test_memory.py": {"test_agrees_with_memtracker_and_estimate"},
    "test_your_model.py": {"test_the_estimate_is_the_commands_document_also_through_the_loop_for_several_inputs",
                           "test_measure_here_times_each_mode_with_an_interval_around_its_ratio"},
}
# file -> tests (without parameters) that execute notebooks, in files that are otherwise unit tests
NOTEBOOK_TESTS = {"test_your_model.py": {"test_notebook_runs_on_models_it_does_not_name"}}


def _kind(item) -> str:
    path = Path(str(item.fspath))
    if path.suffix == ".ipynb":
        return "notebooks"
    if path.name in BROWSER_FILES or "chromium" in item.name:
        return "browser"
    if path.name in NOTEBOOK_FILES or getattr(item, "originalname", item.name) in NOTEBOOK_TESTS.get(path.name, ()):
        return "notebooks"
    # the same marker on every machine: by the skip's reason, whatever its condition is here
    needs_gpu = any("CUDA GPU" in str(m.kwargs.get("reason", "")) for m in item.iter_markers("skipif"))
    if path.name in GPU_FILES or needs_gpu:
        return "gpu"
    if path.name in INTEGRATION_FILES or getattr(item, "originalname", item.name) in INTEGRATION_TESTS.get(path.name, ()):
        return "integration"
    return "unit"


def pytest_collection_modifyitems(config, items):
    for item in items:
        item.add_marker(getattr(pytest.mark, _kind(item)))


def pytest_terminal_summary(terminalreporter):
    import sys

    mod = sys.modules.get("test_notebooks") or sys.modules.get("tests.test_notebooks")
    runs = getattr(mod, "RUNS", None)
    if not runs:
        return
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

        from nogradlab.outdir import write_text_atomic

        out = mod.OUT_DIR / "times.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out, json.dumps({"total_seconds": total, "notebooks": runs}, indent=1))
    except (OSError, AttributeError):
        pass
