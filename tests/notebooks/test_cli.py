"""``python -m nogradlab run`` / ``claims`` on tiny synthetic notebooks (never the real collection):
argument errors, a complete run replacing the output folder, and a failing notebook that must not
destroy the earlier report."""
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from nogradlab import claims, report
from nogradlab.__main__ import main

ROOT = Path(__file__).resolve().parents[2]

PARAMS = 'device = "auto"\nscale = "auto"'
FAKE_LEDGER = '''import json, os
from nogradlab import claims, device as _device
info = _device.describe(device)
with open(os.environ["NOGRADLAB_LEDGER"], "a") as f:
    for i, c in enumerate(claims.all_claims()):  # fake entries: nothing is measured here
        r = claims.Result(id=c.id, verdict=claims.VERDICTS[i % 4], summary="fake ledger entry", measurements={},
                          figure=c.figure, section=c.section, kind=c.kind, paraphrase=c.paraphrase,
                          notebook=os.environ["NOGRADLAB_NOTEBOOK"], device=info, torch="fake", scale=scale)
        f.write(json.dumps(r.to_dict()) + "\\n")
'''


def check_cell(cid):
    return (f'from nogradlab import claims\nr = claims.check("{cid}", device=device, scale=scale)\n'
            f'print(r)')


def write_notebook(folder: Path, name: str, *cells: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = nbformat.v4.new_code_cell(PARAMS)
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params] + [nbformat.v4.new_code_cell(c) for c in cells]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.ipynb"
    nbformat.write(nb, str(path))
    return path


@pytest.mark.parametrize("argv, words", [
    (["run", "--device", "tpu"], ["unknown device 'tpu'", "allowed", "cuda:N"]),
    (["run", "--device", "cpu", "--scale", "huge"], ["unknown scale 'huge'", "tiny, small, full"]),
    (["claims", "--device", "cpu", "--ids", "C01,C99"], ["unknown claim id 'C99'", "allowed", "X05"]),
    (["run", "--device", "cpu", "--notebooks", "/nonexistent/notebooks"], ["does not exist"]),
])
def test_bad_arguments_fail_before_any_work(argv, words, capsys, tmp_path):
    assert main(argv + (["--out", str(tmp_path / "out")] if argv[0] == "run" else [])) == 2
    err = capsys.readouterr().err
    for w in words:
        assert w in err
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


def test_run_refuses_to_replace_a_folder_that_is_not_a_build(tmp_path, capsys):
    write_notebook(tmp_path / "nbs", "01_one", "x = 1")
    precious = tmp_path / "mydata"
    precious.mkdir()
    (precious / "thesis.txt").write_text("keep me")
    assert main(["run", "--device", "cpu", "--notebooks", str(tmp_path / "nbs"), "--out", str(precious)]) == 2
    assert "was not made by nogradlab" in capsys.readouterr().err
    assert (precious / "thesis.txt").read_text() == "keep me" and len(list(tmp_path.iterdir())) == 2


def test_claims_command_writes_valid_json(tmp_path, capsys):
    out = tmp_path / "claims.json"
    rc = main(["claims", "--device", "cpu", "--scale", "tiny", "--ids", "c06,C10", "--json", str(out),
               "--no-progress"])
    doc = report.load_doc(out)
    assert [c["id"] for c in doc["claims"]] == ["C06", "C10"]
    for c in doc["claims"]:
        assert c["verdict"] in claims.VERDICTS, c["summary"]
    # exit 0: every claim asked for has a verdict; not complete: complete means every claim
    assert rc == 0 and doc["meta"]["source"] == "claims" and doc["meta"]["complete"] is False
    printed = capsys.readouterr().out
    assert "C06" in printed and "C10" in printed and str(out.resolve()) in printed


def test_failed_notebook_is_reported_and_earlier_report_kept(tmp_path):
    out = tmp_path / "build"
    # 1. a complete run (one notebook writing fake ledger entries for every claim) builds the report
    good = tmp_path / "good"
    write_notebook(good, "01_fake_ledger", FAKE_LEDGER)
    assert main(["run", "--device", "cpu", "--scale", "tiny", "--notebooks", str(good), "--out", str(out),
                 "--results", str(tmp_path / "no-results"), "--no-progress"]) == 0
    earlier = {p.name: p.read_bytes() for p in (out / "report.html", out / "claims.json")}
    doc = report.load_doc(out / "claims.json")
    assert doc["meta"]["complete"] and doc["meta"]["notebooks"][0]["status"] == "ok"
    assert (out / "notebooks" / "01_fake_ledger.html").exists()
    assert "href='notebooks/01_fake_ledger.html'" in earlier["report.html"].decode()
    assert not (tmp_path / "build.partial").exists() and not (tmp_path / "build.failed").exists()

    # 2. a run whose middle notebook raises: the others still run, the command fails
    bad = tmp_path / "bad"
    write_notebook(bad, "01_check_c06", check_cell("C06"))
    write_notebook(bad, "02_boom", "x = 1", "raise ValueError('boom in the middle')", "print('never')")
    write_notebook(bad, "03_check_c10", check_cell("C10"))
    proc = subprocess.run([sys.executable, "-m", "nogradlab", "run", "--device", "cpu", "--scale", "tiny",
                           "--notebooks", str(bad), "--out", str(out), "--results", str(tmp_path / "no-results")],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path,
                          env={**os.environ, "NOGRADLAB_LEDGER": "", "NOGRADLAB_NOTEBOOK": ""})
    assert proc.returncode == 1, proc.stderr
    assert "build.failed" in proc.stderr and "left as it was" in proc.stderr
    assert "FAILED 02_boom" in proc.stdout and "ValueError: boom in the middle" in proc.stdout
    assert "ok     01_check_c06" in proc.stdout and "ok     03_check_c10" in proc.stdout

    # the earlier report is untouched; the failed build sits beside it
    assert {p.name: p.read_bytes() for p in (out / "report.html", out / "claims.json")} == earlier
    failed = report.load_doc(tmp_path / "build.failed" / "claims.json")
    nbs = {n["name"]: n for n in failed["meta"]["notebooks"]}
    assert [nbs[n]["status"] for n in ("01_check_c06", "02_boom", "03_check_c10")] == ["ok", "failed", "ok"]
    err = nbs["02_boom"]["error"]
    assert err["ename"] == "ValueError" and err["evalue"] == "boom in the middle"
    assert "raise ValueError" in err["source"] and err["cell"] is not None
    by_id = {c["id"]: c for c in failed["claims"]}
    assert by_id["C06"]["verdict"] in claims.VERDICTS and by_id["C06"]["notebook"] == "01_check_c06"
    assert by_id["C10"]["verdict"] in claims.VERDICTS and by_id["C10"]["notebook"] == "03_check_c10"
    assert by_id["C01"]["verdict"] is None and failed["meta"]["complete"] is False
    page = (tmp_path / "build.failed" / "report.html").read_text()
    assert "data-notebook='02_boom' data-status='failed'" in page
    assert report.cell_name(err) in page and "boom in the middle" in page
    executed = json.loads((tmp_path / "build.failed" / "notebooks" / "02_boom.ipynb").read_text())
    assert not any("never" in "".join(o.get("text", "")) for c in executed["cells"] for o in c.get("outputs", []))


def test_replace_moves_the_new_build_into_place(tmp_path):
    from nogradlab import outdir

    new, out = tmp_path / "build.partial", tmp_path / "build"
    for d, text in ((new, "new"), (out, "old")):
        (d / "notebooks").mkdir(parents=True)
        (d / "report.html").write_text(text)
        outdir.write_mark(d, state="complete")
    outdir.replace_dir(new, out, tmp_path / "build.previous")
    assert (out / "report.html").read_text() == "new" and (out / "notebooks").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build"]


def test_replace_never_deletes_a_folder_that_is_not_ours(tmp_path):
    from nogradlab import outdir

    new, out = tmp_path / "build.partial", tmp_path / "build"
    (new / "notebooks").mkdir(parents=True)
    outdir.write_mark(new, state="complete")
    out.mkdir()
    (out / "thesis.tex").write_text("mine")
    with pytest.raises(outdir.OutputError, match="did not write"):
        outdir.replace_dir(new, out, tmp_path / "build.previous")
    assert (out / "thesis.tex").read_text() == "mine" and new.is_dir()


# ------------------------------------------------------------------ broken reference columns
CPU_REF = ROOT / "results" / "cpu-amd-epyc-2-threads" / "claims.json"


def _broken_results(tmp_path, mutate) -> Path:
    """A results folder holding the committed CPU column with ``mutate(doc)`` applied (or, when
    ``mutate`` returns a str, that text as the file)."""
    doc = json.loads(CPU_REF.read_text())
    text = mutate(doc)
    (tmp_path / "results" / "broken").mkdir(parents=True)
    (tmp_path / "results" / "broken" / "claims.json").write_text(json.dumps(doc) if text is None else text)
    return tmp_path / "results"


def _entry(doc, cid):
    e = next(c for c in doc["claims"] if c["id"] == cid)
    return e.setdefault("measurements", e.pop("evidence", {}))


def _huge(doc):  # the report's case: a 401-digit integer, in C07 and in the C06 the run shows
    _entry(doc, "C07")["reports"]["grad"]["saved_bytes"] = 10 ** 400
    _entry(doc, "C06")["inside_no_grad"]["requires_grad"] = 10 ** 400


def _non_finite(word):  # written as JSON text that Python's json reads as a float
    def mutate(doc):
        _entry(doc, "C06")["inside_no_grad"]["requires_grad"] = "@@"
        return json.dumps(doc).replace('"@@"', word)
    return mutate


def _wrong_type(doc):  # the judge indexes a string: its error, read as "needs re-measuring" in a learner's run
    _entry(doc, "C06")["inside_no_grad"] = "x"


BROKEN_COLUMNS = {"10**400": _huge, "NaN": _non_finite("NaN"), "Infinity": _non_finite("Infinity"),
                  "-Infinity": _non_finite("-Infinity"), "wrong type": _wrong_type}


def _c06_row(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("C06"))


@pytest.mark.parametrize("case", sorted(BROKEN_COLUMNS))
def test_claims_judges_a_broken_reference_column_needs_re_measuring_and_writes_its_json(case, tmp_path, capsys,
                                                                                        monkeypatch):
    if case == "wrong type":  # a learner's run: a judge's error on a column of the wrong shape never crashes it
        monkeypatch.delenv(claims.STRICT_ENV, raising=False)
    results = _broken_results(tmp_path, BROKEN_COLUMNS[case])
    out = tmp_path / "claims.json"
    rc = main(["claims", "--device", "cpu", "--scale", "tiny", "--ids", "C06", "--results", str(results),
               "--json", str(out), "--no-progress"])
    printed = capsys.readouterr().out
    assert rc == 0 and report.load_doc(out)["claims"][0]["verdict"] == "holds"
    row = _c06_row(printed)  # this run's verdict, then the broken column's
    assert row.split()[1] == "holds" and "needs re-measuring" in row, row
    assert "ref 1 = broken" in printed


@pytest.mark.parametrize("case", ["truncated", "directory", "not the schema", "measurements not an object"])
def test_claims_skips_an_unreadable_reference_with_a_warning_and_writes_its_json(case, tmp_path, capsys):
    if case == "directory":
        (tmp_path / "results" / "broken" / "claims.json").mkdir(parents=True)
        results = tmp_path / "results"
    elif case == "truncated":
        results = _broken_results(tmp_path, lambda doc: CPU_REF.read_text()[:5000])
    elif case == "not the schema":
        results = _broken_results(tmp_path, lambda doc: doc["meta"].update(device=5))
    else:
        results = _broken_results(tmp_path, lambda doc: next(c for c in doc["claims"] if c["id"] == "C06")
                                  .update(measurements=[1, 2], evidence=[1, 2]))
    out = tmp_path / "claims.json"
    rc = main(["claims", "--device", "cpu", "--scale", "tiny", "--ids", "C06", "--results", str(results),
               "--json", str(out), "--no-progress"])
    captured = capsys.readouterr()
    assert rc == 0 and report.load_doc(out)["claims"][0]["verdict"] == "holds"
    assert "skipping reference" in captured.err and "broken" in captured.err
    assert "Traceback" not in captured.err


def test_claims_judges_the_references_before_any_check(tmp_path, capsys, monkeypatch):
    from nogradlab import runner

    results = _broken_results(tmp_path, _huge)
    seen = []
    real_load, real_check = report.load_references, runner.check_claims
    monkeypatch.setattr(report, "load_references", lambda *a, **k: seen.append("references") or real_load(*a, **k))
    monkeypatch.setattr(runner, "check_claims", lambda *a, **k: seen.append("checks") or real_check(*a, **k))
    assert main(["claims", "--device", "cpu", "--scale", "tiny", "--ids", "C06", "--results", str(results),
                 "--no-progress"]) == 0
    assert seen == ["references", "checks"]
    assert "needs re-measuring" in _c06_row(capsys.readouterr().out)


def test_claims_survives_a_reference_that_breaks_the_judging_itself(tmp_path, capsys, monkeypatch):
    # whatever goes wrong judging a reference (outside strict mode) costs its column, never the run
    monkeypatch.delenv(claims.STRICT_ENV, raising=False)
    results = _broken_results(tmp_path, _huge)

    def broken(doc):
        raise OverflowError("int too large to convert to float")
    monkeypatch.setattr(report, "rejudged", broken)
    out = tmp_path / "claims.json"
    assert main(["claims", "--device", "cpu", "--scale", "tiny", "--ids", "C06", "--results", str(results),
                 "--json", str(out), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert out.exists() and "OverflowError" in err and "Traceback" not in err


def test_in_strict_mode_a_judge_error_on_a_reference_stops_claims_before_any_check(tmp_path, capsys, monkeypatch):
    from nogradlab import runner

    monkeypatch.setenv(claims.STRICT_ENV, "1")  # the tests' mode: a judge's own error is a bug, said in one line
    results = _broken_results(tmp_path, _wrong_type)
    monkeypatch.setattr(runner, "check_claims", lambda *a, **k: pytest.fail("a check ran"))
    out = tmp_path / "claims.json"
    assert main(["claims", "--device", "cpu", "--scale", "tiny", "--ids", "C06", "--results", str(results),
                 "--json", str(out), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "JudgeError" in err and "C06" in err and len(err.strip().splitlines()) == 1 and not out.exists()


def test_in_strict_mode_a_judge_error_on_a_reference_stops_run_before_any_notebook(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(claims.STRICT_ENV, "1")
    results = _broken_results(tmp_path, _wrong_type)
    write_notebook(tmp_path / "nbs", "01_never", "raise SystemExit('a notebook ran')")
    out = tmp_path / "build"
    assert main(["run", "--device", "cpu", "--scale", "tiny", "--notebooks", str(tmp_path / "nbs"),
                 "--out", str(out), "--results", str(results), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "judging the reference runs failed" in err and "C06" in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nbs", "results"]  # nothing built, nothing left


def test_run_starts_and_finishes_beside_a_broken_reference_column(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(claims.STRICT_ENV, raising=False)
    results = _broken_results(tmp_path, lambda doc: (_huge(doc), _wrong_type(doc)) and None)
    write_notebook(tmp_path / "nbs", "01_fake_ledger", FAKE_LEDGER)
    out = tmp_path / "build"
    assert main(["run", "--device", "cpu", "--scale", "tiny", "--notebooks", str(tmp_path / "nbs"),
                 "--out", str(out), "--results", str(results), "--no-progress"]) == 0
    assert "needs re-measuring" in _c06_row(capsys.readouterr().out)
    assert (out / "report.html").exists() and report.load_doc(out / "claims.json")["meta"]["complete"]


# ------------------------------------------------------------------ Ctrl-C while starting


def test_ctrl_c_while_starting_prints_one_line_and_exits_130(tmp_path):
    import signal
    import time

    interrupted = 0
    seen = []
    for delay in (0.5, 1.0, 1.5, 2.5, 4.0):
        # the child starts with SIGINT's default action, as from a terminal: a test process can have it ignored
        # (an ignored disposition is inherited across exec), and a command started that way rightly ignores Ctrl-C
        proc = subprocess.Popen([sys.executable, "-m", "nogradlab", "claims", "--device", "cpu", "--scale", "tiny",
                                 "--ids", "C06", "--no-results", "--no-progress"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=600)
        seen.append((delay, proc.returncode))
        assert "Traceback" not in err, (delay, err)
        if proc.returncode == -signal.SIGINT and err.strip().splitlines()[-1:] == ["interrupted"]:
            # interrupted, said in one line, and the interpreter then ended by SIGINT's default action (seen in a
            # busy CI run, the signal landing in an import): a shell reports 130 for both endings
            interrupted += 1
            continue
        if proc.returncode == -signal.SIGINT:  # it arrived while the finished interpreter shut down (SIGINT's
            assert "1 claims on" in out and not err, (delay, out, err)  # default action then): no traceback
            continue
        assert proc.returncode in (0, 130), (delay, proc.returncode, out, err)
        if proc.returncode == 130:
            assert err.strip().splitlines()[-1] == "interrupted", err
            interrupted += 1
    assert interrupted, (seen, signal.getsignal(signal.SIGINT))  # at least one landed before the command finished


def test_ctrl_c_while_the_modules_load_is_acted_on_once_they_have_loaded():
    """No KeyboardInterrupt inside an import (a library that catches it leaves a module half-imported): the
    press is noted, and raised once the modules are loaded; the default handler is back afterwards."""
    import signal

    from nogradlab.__main__ import _Loading

    # as in a terminal (a test worker may run with SIGINT ignored, and a command started so rightly leaves it)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        loading = _Loading()
        assert loading.active and signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        signal.raise_signal(signal.SIGINT)  # noted, nothing raised
        assert loading.hits == 1
        with pytest.raises(KeyboardInterrupt):
            loading.loaded()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler and not loading.active
        quiet = _Loading()
        quiet.loaded()  # nothing pressed: nothing raised
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        assert not _Loading().active  # ignored by whoever started us: left ignored
    finally:
        signal.signal(signal.SIGINT, before)
