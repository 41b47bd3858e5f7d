"""benchmarks/gpu_reference.py rehearsed on the CPU (tiny scale, two claims, one workload): it runs
end to end, skips the CUDA allocator parts with a printed reason, and writes claims.json (the
report's schema), gpu_reference.json and summary.md."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from nogradlab import report

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_reference.py"


def _run(*args, timeout=900):  # a hang guard, far above any machine's time
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    p = _run("--device", "cpu", "--scale", "tiny", "--out", str(out), "--claims", "C06,C09",
             "--workloads", "mlp")
    assert p.returncode == 0, p.stdout + p.stderr
    folders = list(out.iterdir())
    assert len(folders) == 1
    return p.stdout, folders[0]


def test_rehearsal_writes_the_three_files(rehearsal):
    stdout, folder = rehearsal
    assert sorted(f.name for f in folder.iterdir()) == ["claims.json", "gpu_reference.json", "summary.md"]
    assert folder.name == report.machine_slug(report.load_doc(folder / "claims.json")["meta"]["device"])
    assert stdout.count("skipped: no CUDA device") == 2  # probes and the OOM check, with the reason


def test_claims_json_follows_the_report_schema(rehearsal):
    _, folder = rehearsal
    doc = report.load_doc(folder / "claims.json")  # validates
    assert doc["meta"]["scale"] == "tiny" and doc["meta"]["device"]["type"] == "cpu"
    by_id = {c["id"]: c for c in doc["claims"]}
    assert sorted(by_id) == ["C06", "C09"]
    assert by_id["C06"]["verdict"] == "holds"
    c09 = by_id["C09"]["evidence"]
    b = c09["batches"]
    assert b["eval+no_grad"] > b["train"] > 0
    assert c09["no_grad_over_train"] == pytest.approx(b["eval+no_grad"] / b["train"])
    factor_ok = 2.0 <= c09["no_grad_over_train"] <= 3.0
    assert by_id["C09"]["verdict"] == ("holds" if factor_ok else "does not hold")


def test_measurements_in_gpu_reference_json(rehearsal):
    _, folder = rehearsal
    d = json.loads((folder / "gpu_reference.json").read_text())
    assert set(d["skipped"]) == {"probes", "oom_leak"}
    rows = d["estimate_vs_real"]
    assert {r["mode"] for r in rows} == {"grad", "eval+no_grad", "train"}
    # on a CPU the estimate and the storage-tracked real run count the same bytes
    assert all(r["estimate_bytes"] == r["real_bytes"] > 0 for r in rows)
    lb = d["largest_batch"]
    assert len(lb) == 2 * 3 and all(r["method"] == "estimate" and r["batch"] > 0 for r in lb)
    by = {(r["budget_bytes"], r["mode"]): r["batch"] for r in lb}
    assert by[(16 * 2 ** 30, "train")] > by[(12 * 2 ** 30, "train")]
    assert d["failures"] == [] and d["errors"] == {}
    md = (folder / "summary.md").read_text()
    for heading in ("## Claims", "## Estimate vs real total peak", "## Largest batch", "## OOM leak check"):
        assert heading in md


def test_bad_claim_id_fails_before_work(tmp_path):
    p = _run("--device", "cpu", "--scale", "tiny", "--out", str(tmp_path), "--claims", "C99")
    assert p.returncode != 0 and "allowed" in p.stderr
    assert list(tmp_path.iterdir()) == []


def _partial(tmp_path, name, cid):
    from nogradlab import claims

    doc = report.build_doc([claims.check(cid, device="cpu", scale="tiny")], source="claims", device="cpu",
                           scale="tiny", only=["C06", "C30"])
    return report.write_json(doc, tmp_path / name / "claims.json")


def test_merge_partial_runs_without_measuring(tmp_path):
    a, b = _partial(tmp_path, "a", "C06"), _partial(tmp_path, "b", "C30")
    out = tmp_path / "out"
    p = _run("--merge", str(a), str(b), "--out", str(out), "--note", "two halves")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "probes" not in p.stdout  # nothing measured
    folder = next(out.iterdir())
    doc = report.load_doc(folder / "claims.json")
    assert {c["id"]: c["verdict"] for c in doc["claims"]} == {"C06": "holds", "C30": "holds"}
    assert doc["meta"]["merged_from"] == ["claims.json", "claims.json"] and doc["meta"]["note"] == "two halves"
    assert all(c["rule"] for c in doc["claims"])


def test_resume_runs_only_the_claims_without_a_verdict(tmp_path):
    a = _partial(tmp_path, "a", "C06")
    out = tmp_path / "out"
    p = _run("--device", "cpu", "--scale", "tiny", "--out", str(out), "--claims", "C06,C30",
             "--workloads", "mlp", "--resume", str(a))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 verdicts kept, 1 claims to run" in p.stdout
    assert "  C30 [" in p.stdout and "  C06 [" not in p.stdout
    doc = report.load_doc(next(out.iterdir()) / "claims.json")
    assert {c["id"]: c["verdict"] for c in doc["claims"]} == {"C06": "holds", "C30": "holds"}


def test_reference_run_searches_every_batch_for_real():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_reference", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.REFERENCE_PARAMS["C04"]["real_search"] == "all" == mod.REFERENCE_PARAMS["C09"]["real_search"]
