"""benchmarks/gpu_reference.py rehearsed on the CPU (tiny scale, two claims, one workload): it runs
end to end, skips the CUDA allocator parts with a printed reason, and writes claims.json (the
report's schema), gpu_reference.json and summary.md."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from nogradlab import report

ROOT = Path(__file__).resolve().parents[2]
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
    c09 = by_id["C09"]["measurements"]
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
    assert mod.params_for("C04")["real_search"] == "all" == mod.params_for("C09")["real_search"]
    assert all(mod.params_for(c)["reference"] for c in ("C03", "C19", "X05"))
    # the reference run times with its own, longer settings on a GPU; a CPU rehearsal keeps the tiny ones
    assert mod.params_for("C03", "cuda")["rounds"] == 20 and mod.params_for("C03", "cuda")["min_run_time"] == 0.4
    assert "rounds" not in mod.params_for("C03", "cpu") and "rounds" not in mod.params_for("C03")


# -- --resume keeps every earlier measurement, bad inputs are refused before any work ----------

def _load_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_reference_inproc", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _copy(folder, dst):
    import shutil

    return Path(shutil.copytree(folder, dst / folder.name))


def _resume_args(folder, out):
    return ["--device", "cpu", "--scale", "tiny", "--out", str(out), "--claims", "C06,C09",
            "--workloads", "mlp", "--time-budget", "0", "--resume", str(folder / "claims.json")]


def test_resume_keeps_every_earlier_section(rehearsal, tmp_path):
    _, first = rehearsal
    folder = _copy(first, tmp_path)
    before = json.loads((folder / "gpu_reference.json").read_text())
    verdicts = {c["id"]: c["verdict"] for c in report.load_doc(folder / "claims.json")["claims"]}
    p = _run(*_resume_args(folder, tmp_path))  # a short budget: nothing left to measure in it
    assert p.returncode == 0, p.stdout + p.stderr
    assert "kept from" in p.stdout and "6 largest-batch rows kept" in p.stdout
    assert "x)" not in p.stdout.split("4. claims")[0]  # no row of section 3 was measured again
    after = json.loads((folder / "gpu_reference.json").read_text())
    assert after["largest_batch"] == before["largest_batch"] and len(after["largest_batch"]) == 6
    assert after["estimate_vs_real"] == before["estimate_vs_real"]
    md = (folder / "summary.md").read_text()
    assert "skipped: not run" not in md and "| mlp |" in md
    doc = report.load_doc(folder / "claims.json")
    assert {c["id"]: c["verdict"] for c in doc["claims"]} == verdicts and None not in verdicts.values()


def _doctored(folder, tmp_path, **meta):
    folder = _copy(folder, tmp_path)
    doc = json.loads((folder / "claims.json").read_text())
    doc["meta"].update(meta)
    (folder / "claims.json").write_text(json.dumps(doc))
    return folder


@pytest.mark.parametrize("meta, words", [({"machine": "cuda-nvidia-h200"}, "another machine's run"),
                                         ({"scale": "full"}, "ran at scale full"),
                                         ({"torch": "1.0.0"}, "ran with torch 1.0.0")])
def test_a_mismatched_resume_is_refused_before_any_work(rehearsal, tmp_path, meta, words):
    folder = _doctored(rehearsal[1], tmp_path, **meta)
    before = (folder / "claims.json").read_bytes()
    p = _run(*_resume_args(folder, tmp_path / "out"), timeout=60)
    assert p.returncode == 2 and words in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert "1. probes" not in p.stdout and not (tmp_path / "out").exists()
    assert (folder / "claims.json").read_bytes() == before


def test_unreadable_resume_and_merge_inputs_exit_2(rehearsal, tmp_path):
    good = rehearsal[1] / "claims.json"
    trunc = tmp_path / "trunc.json"
    trunc.write_bytes(good.read_bytes()[:len(good.read_bytes()) // 2])
    other = _doctored(rehearsal[1], tmp_path, machine="cuda-x", scale="full") / "claims.json"
    cases = [("--resume", [trunc], "not a readable claims.json"),
             ("--resume", [tmp_path / "missing.json"], "no such file"),
             ("--resume", [tmp_path], "not a regular file"),
             ("--merge", [good, trunc], "not a readable claims.json"),
             ("--merge", [good, tmp_path / "missing.json"], "no such file"),
             ("--merge", [good, other], "cannot merge runs of different machines")]
    for flag, files, words in cases:
        extra = ["--device", "cpu", "--scale", "tiny"] if flag == "--resume" else []
        p = _run(*extra, "--out", str(tmp_path / "out"), flag, *map(str, files), timeout=60)
        assert p.returncode == 2 and words in p.stderr and "Traceback" not in p.stderr, (flag, p.stderr)
        assert "1. probes" not in p.stdout and not (tmp_path / "out").exists()


def test_a_full_disk_or_a_failed_rename_keeps_every_earlier_file(rehearsal, tmp_path, monkeypatch,
                                                                          capsys):
    import errno
    import os

    folder = _copy(rehearsal[1], tmp_path)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    mod = _load_script()

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError, match="No space left"):
        mod.main(_resume_args(folder, tmp_path))
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # no temporary file left either


@pytest.mark.parametrize("args, words", [
    (["--device", "tpu"], "allowed"),
    (["--device", "cuda:7"], ""),
    (["--claims", "C99"], "allowed"),
    (["--claims", "C06", "--workloads", "nosuch"], ""),
    (["--scale", "huge"], ""),
])
def test_bad_arguments_give_one_line_and_exit_2_before_any_work(tmp_path, args, words):
    p = _run("--out", str(tmp_path), *(["--device", "cpu"] if "--device" not in args else []), *args, timeout=300)
    err = p.stderr.strip()
    assert p.returncode == 2, p.stdout + p.stderr
    assert "Traceback" not in err and len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert words in err
    assert list(tmp_path.iterdir()) == []


def test_a_fifo_beside_the_resumed_file_is_refused_not_waited_on(tmp_path):
    import os

    a = _partial(tmp_path, "a", "C06")
    os.mkfifo(a.with_name("gpu_reference.json"))
    p = _run("--device", "cpu", "--scale", "tiny", "--out", str(tmp_path / "out"), "--claims", "C06,C30",
             "--workloads", "mlp", "--resume", str(a), timeout=120)
    assert p.returncode == 2 and "not a regular file" in p.stderr, p.stdout + p.stderr
