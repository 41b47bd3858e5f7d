"""benchmarks/session.py --memory-limit: each notebook through papermill's command line in a memory
cgroup (tools.procmem.MemoryLimit). Starts a Jupyter kernel, hence the ``notebooks`` marker; the
run in a real cgroup skips where the machine gives none (Linux, root)."""
from __future__ import annotations

import pytest
from test_procmem import needs_cgroup


def _session_benchmark():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "session.py"
    spec = importlib.util.spec_from_file_location("session_benchmark", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_benchmark_says_when_the_machine_gives_no_cgroup(monkeypatch, capsys):
    import tools.procmem as procmem

    def unavailable(*a, **k):
        raise procmem.MemoryLimitUnavailable("no writable memory cgroup: (stand-in)")

    monkeypatch.setattr(procmem, "MemoryLimit", unavailable)
    out = _session_benchmark().run_boxed(["00"], 1e9)
    assert out == {"error": "no writable memory cgroup: (stand-in)"}
    assert "not available here (no writable memory cgroup" in capsys.readouterr().out


@needs_cgroup
def test_the_benchmark_runs_a_notebook_in_a_cgroup_and_reports_it():
    """The index notebook through papermill's command line inside a 1 GB cgroup (warm page cache:
    nothing here is dropped): it fits, and the figures name both client and kernel."""
    out = _session_benchmark().run_boxed(["00"], 1e9, cold=False, timeout=300)
    row = out["notebooks"]["00_index"]
    assert row["outcome"] == "ok" and out["all_fit"] is True
    assert row["oom_kills"] == 0 and row["limit_bytes"] == 10**9
    assert 0 < row["anon_peak_bytes"] <= 10**9 and 0 < row["kernel_peak_rss_bytes"]


@pytest.mark.parametrize("value", ["-5", "0", "1e3", "inf"])
def test_a_bad_memory_limit_is_refused_before_any_work(value, capsys, monkeypatch):
    mod = _session_benchmark()
    ran = []
    monkeypatch.setattr(mod, "import_floor", lambda *a, **k: ran.append("floor"))
    monkeypatch.setattr(mod, "run_claims", lambda *a, **k: ran.append("claims"))
    with pytest.raises(SystemExit) as e:
        mod.main(["--memory-limit", value])
    assert e.value.code == 2 and ran == []
    assert "--memory-limit: limit_bytes must be a number of bytes >= 1 MiB (e.g. 1e9)" in capsys.readouterr().err
