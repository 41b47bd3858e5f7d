"""A partial run (``claims --ids``, ``gpu_reference.py --claims``) never calls itself complete, and never
replaces a complete claims.json without an explicit ``--force``."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nogradlab import claims, device, report
from nogradlab.__main__ import main

ROOT = Path(__file__).resolve().parents[2]
COMPLETE = ROOT / "results" / "cpu-amd-epyc-2-threads" / "claims.json"


def _entry(cid, verdict="holds"):
    e = report.missing_entry(claims.get(cid), "")
    e.update(verdict=verdict, summary="fake", error=None)
    return e


def test_a_document_of_some_claims_is_not_complete():
    doc = report.build_doc([_entry("C06")], source="claims", device="cpu", scale="tiny", only=["C06"])
    assert [c["id"] for c in doc["claims"]] == ["C06"] and doc["meta"]["complete"] is False
    full = report.build_doc([_entry(c) for c in claims.ids()], source="claims", device="cpu", scale="tiny")
    assert full["meta"]["complete"] is True
    every = report.build_doc([_entry(c) for c in claims.ids()], source="claims", device="cpu", scale="tiny",
                             only=claims.ids())
    assert every["meta"]["complete"] is True


@pytest.fixture
def complete_copy(tmp_path):
    target = tmp_path / "claims.json"
    shutil.copyfile(COMPLETE, target)
    assert json.loads(target.read_text())["meta"]["complete"]
    return target


def test_claims_ids_refuses_to_replace_a_complete_document_before_any_check(complete_copy, capsys, monkeypatch):
    before = complete_copy.read_bytes()
    monkeypatch.setattr(claims, "check", lambda *a, **k: pytest.fail("a check ran"))
    rc = main(["claims", "--device", "cpu", "--scale", "tiny", "--ids", "C06", "--json", str(complete_copy),
               "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "complete" in err and "--force" in err and len(err.splitlines()) == 1, err
    assert complete_copy.read_bytes() == before


def test_claims_ids_with_force_replaces_it_and_says_partial(complete_copy, capsys):
    rc = main(["claims", "--device", "cpu", "--scale", "tiny", "--ids", "C06", "--json", str(complete_copy),
               "--no-progress", "--force"])
    doc = report.load_doc(complete_copy)
    assert rc == 0 and [c["id"] for c in doc["claims"]] == ["C06"] and doc["meta"]["complete"] is False


def test_a_partial_document_may_replace_a_partial_one(tmp_path, capsys):
    target = tmp_path / "claims.json"
    assert main(["claims", "--device", "cpu", "--scale", "tiny", "--ids", "C06", "--json", str(target),
                 "--no-progress"]) == 0
    assert main(["claims", "--device", "cpu", "--scale", "tiny", "--ids", "C10", "--json", str(target),
                 "--no-progress"]) == 0
    assert [c["id"] for c in report.load_doc(target)["claims"]] == ["C10"]


def test_a_full_run_with_a_failed_check_keeps_a_complete_document(complete_copy, capsys, monkeypatch):
    """Not foreseeable from the arguments: the write itself refuses, naming --force."""
    from nogradlab import runner

    real = runner.check_claims

    def some_fail(ids, *a, **k):  # every claim, two of them without a verdict
        doc = real(["C06", "C10"], *a, **k)
        good = {c["id"]: c for c in doc["claims"]}
        return report.build_doc([good.get(c) or dict(_entry(c), verdict=None) for c in claims.ids()],
                                source="claims", device="cpu", scale="tiny")

    monkeypatch.setattr(runner, "check_claims", some_fail)
    before = complete_copy.read_bytes()
    rc = main(["claims", "--device", "cpu", "--scale", "tiny", "--json", str(complete_copy), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1 and "--force" in err and complete_copy.read_bytes() == before


def _gpu_ref(*args, timeout=300):
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_reference.py"), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.integration
def test_gpu_reference_claims_refuses_to_replace_a_complete_column_before_any_work(tmp_path):
    folder = tmp_path / report.machine_slug(device.describe(device.resolve("cpu")))
    folder.mkdir()
    shutil.copyfile(COMPLETE, folder / "claims.json")
    before = (folder / "claims.json").read_bytes()
    p = _gpu_ref("--device", "cpu", "--scale", "tiny", "--out", str(tmp_path), "--claims", "C06",
                 "--workloads", "mlp")
    err = p.stderr.strip()
    assert p.returncode == 2 and "--force" in err and len(err.splitlines()) == 1, p.stdout + p.stderr
    assert "probes" not in p.stdout  # nothing measured
    assert sorted(f.name for f in folder.iterdir()) == ["claims.json"]
    assert (folder / "claims.json").read_bytes() == before


@pytest.mark.integration
def test_gpu_reference_merge_of_parts_refuses_to_replace_a_complete_column(tmp_path):
    parts = []
    for cid in ("C06", "C30"):
        doc = report.build_doc([_entry(cid)], source="claims", device="cpu", scale="tiny", only=[cid])
        parts.append(report.write_json(doc, tmp_path / cid / "claims.json"))
    folder = tmp_path / "out" / report.machine_slug(device.describe(device.resolve("cpu")))
    folder.mkdir(parents=True)
    shutil.copyfile(COMPLETE, folder / "claims.json")
    before = (folder / "claims.json").read_bytes()
    p = _gpu_ref("--merge", *map(str, parts), "--out", str(tmp_path / "out"))
    assert p.returncode == 2 and "--force" in p.stderr and "2 of 35" in p.stderr, p.stdout + p.stderr
    assert (folder / "claims.json").read_bytes() == before
    (folder / "claims.json").unlink()
    os.mkfifo(folder / "claims.json")
    p = _gpu_ref("--merge", *map(str, parts), "--out", str(tmp_path / "out"), timeout=120)
    assert p.returncode == 2 and "not a regular file" in p.stderr, p.stdout + p.stderr
