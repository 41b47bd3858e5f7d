"""A run never deletes what it did not write, two runs never share an output folder, every way a run ends
leaves the earlier report (or the new one) and a ``.failed`` of its own, and bad output paths fail before
any work with exit 2 and no traceback."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from nogradlab import outdir, report, runner
from nogradlab.__main__ import main

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).parent))
from test_cli import FAKE_LEDGER, write_notebook  # noqa: E402


def cli(*argv, cwd, timeout=900):
    return subprocess.run([sys.executable, "-m", "nogradlab", *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd,
                          env={**os.environ, "NOGRADLAB_LEDGER": "", "NOGRADLAB_NOTEBOOK": "",
                               "PYTHONPATH": str(ROOT)})


def good_notebooks(tmp_path):
    write_notebook(tmp_path / "good", "01_fake_ledger", FAKE_LEDGER)
    return tmp_path / "good"


def run_args(nbs, out, tmp_path):
    return ["run", "--device", "cpu", "--scale", "tiny", "--notebooks", str(nbs), "--out", str(out),
            "--results", str(tmp_path / "no-results"), "--no-progress"]


def tree(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(folder.rglob("*"))}


# -- nothing of the user's is deleted -------------------------------------------------------------------------------

def test_a_users_folder_with_an_entry_named_notebooks_is_refused(tmp_path, capsys):
    d = tmp_path / "d"
    (d / "notebooks").mkdir(parents=True)
    (d / "data").mkdir()
    (d / "thesis.tex").write_text("x")
    before = tree(d)
    rc = main(run_args(good_notebooks(tmp_path), d, tmp_path))
    err = capsys.readouterr().err
    assert rc == 2 and "not made by nogradlab" in err and "Traceback" not in err
    assert tree(d) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "good"]


def test_the_repository_root_as_out_is_refused(tmp_path):
    proc = cli(*run_args(good_notebooks(tmp_path), ".", tmp_path), cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "which nogradlab reads" in proc.stderr
    assert (ROOT / ".git").exists() and (ROOT / "pyproject.toml").exists()
    assert not (ROOT.parent / f"{ROOT.name}.partial").exists()
    # and without the package inside: any checkout (.git, .venv) is "not made by nogradlab"
    other = tmp_path / "checkout"
    (other / ".git").mkdir(parents=True)
    (other / ".venv").mkdir()
    proc = cli(*run_args(tmp_path / "good", ".", tmp_path), cwd=other)
    assert proc.returncode == 2 and "nothing in it was touched" in proc.stderr, proc.stderr
    assert sorted(p.name for p in other.iterdir()) == [".git", ".venv"]


def test_a_marked_folder_that_now_holds_a_users_file_is_refused(tmp_path, capsys):
    nbs, out = good_notebooks(tmp_path), tmp_path / "build"
    assert main(run_args(nbs, out, tmp_path)) == 0
    assert outdir.read_mark(out)["state"] == "complete"
    (out / "my_notes.txt").write_text("mine")
    before = tree(out)
    assert main(run_args(nbs, out, tmp_path)) == 2
    assert "my_notes.txt" in capsys.readouterr().err
    assert tree(out) == before


def test_a_users_folder_named_like_our_siblings_is_never_deleted(tmp_path, capsys):
    nbs = good_notebooks(tmp_path)
    mine = tmp_path / "build.partial"
    mine.mkdir()
    (mine / "keep.txt").write_text("keep")
    assert main(run_args(nbs, tmp_path / "build", tmp_path)) == 2
    assert "build.partial" in capsys.readouterr().err and (mine / "keep.txt").read_text() == "keep"


def test_a_run_replaces_its_own_earlier_report_and_an_empty_folder(tmp_path):
    nbs, out = good_notebooks(tmp_path), tmp_path / "build"
    out.mkdir()  # an empty folder the user made for it
    assert main(run_args(nbs, out, tmp_path)) == 0
    first = outdir.read_mark(out)["run_id"]
    assert main(run_args(nbs, out, tmp_path)) == 0
    second = outdir.read_mark(out)
    assert second["run_id"] != first and set(second["entries"]) >= {"claims.json", "report.html", "notebooks"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build", "good"]  # no lock, partial or previous left


# -- two runs into one --out ---------------------------------------------------------------

def test_a_second_run_into_the_same_folder_is_refused_at_once(tmp_path):
    slow = tmp_path / "slow"
    go = tmp_path / "go"  # the first run's notebook waits for this file: no race against a clock
    write_notebook(slow, "01_slow", "import pathlib, time\n"
                   f"for _ in range(6000):\n    if pathlib.Path({str(go)!r}).exists(): break\n    time.sleep(0.1)",
                   FAKE_LEDGER)
    out = tmp_path / "build"
    first = subprocess.Popen([sys.executable, "-m", "nogradlab", *run_args(slow, out, tmp_path)],
                             cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "NOGRADLAB_LEDGER": "", "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.time() + 300  # a hang guard
        while not (tmp_path / "build.partial").exists() and time.time() < deadline:
            time.sleep(0.2)
        assert (tmp_path / "build.partial").exists(), "the first run did not start"
        second = cli(*run_args(good_notebooks(tmp_path), out, tmp_path), cwd=tmp_path)
        assert second.returncode == 2 and "another nogradlab run" in second.stderr, second.stderr
        # refused at once, not after running anything: the first run, whose notebook waits for `go`, is still going
        assert first.poll() is None, "the second run returned only after the first one had ended"
        assert "01_fake_ledger" not in second.stdout
        assert "Traceback" not in second.stderr
    finally:
        go.touch()
        stdout, stderr = first.communicate(timeout=900)
    assert first.returncode == 0, stderr
    doc = report.load_doc(out / "claims.json")
    assert [n["name"] for n in doc["meta"]["notebooks"]] == ["01_slow"]
    ids = [c["id"] for c in doc["claims"]]
    assert len(ids) == len(set(ids))


def test_lock_refuses_a_second_holder_and_is_removed_on_release(tmp_path):
    path = tmp_path / ".x.nogradlab-lock"
    with outdir.Lock(path, "x"):
        with pytest.raises(outdir.OutputBusy, match="another nogradlab run .*pid"):
            outdir.Lock(path, "x").acquire()
    assert not path.exists()
    with outdir.Lock(path, "x"):  # free again
        pass


# -- SIGTERM and a late Ctrl-C -------------------------------------------------------------

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_mid_run_keeps_the_earlier_report_and_writes_this_runs_failed(tmp_path, sig):
    nbs, out = good_notebooks(tmp_path), tmp_path / "build"
    assert main(run_args(nbs, out, tmp_path)) == 0
    earlier = tree(out)
    slow = tmp_path / "slow"
    write_notebook(slow, "01_slow", "import time; time.sleep(60)", FAKE_LEDGER)
    proc = subprocess.Popen([sys.executable, "-m", "nogradlab", *run_args(slow, out, tmp_path)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "NOGRADLAB_LEDGER": "", "PYTHONPATH": str(ROOT)})
    deadline = time.time() + 300  # a hang guard
    while not list((tmp_path / "build.partial" / "notebooks").glob("*.ipynb")) and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert tree(out) == earlier
    failed = tmp_path / "build.failed"
    text = (failed / "FAILED.txt").read_text()
    mark = outdir.read_mark(failed)
    assert mark["state"] == "failed" and mark["run_id"] in text
    assert ("SIGTERM" if sig == signal.SIGTERM else "Ctrl-C") in text
    assert not (tmp_path / "build.partial").exists()
    assert not list(tmp_path.glob(".build.nogradlab-lock"))


def test_a_ctrl_c_while_the_report_is_written_is_honoured_after_it(tmp_path, monkeypatch):
    nbs, out = good_notebooks(tmp_path), tmp_path / "build"
    real = report.write_html

    def write_then_interrupt(doc, folder, refs=()):
        os.kill(os.getpid(), signal.SIGINT)  # arrives in the last seconds of the run
        time.sleep(0.2)
        return real(doc, folder, refs)

    monkeypatch.setattr(runner._report, "write_html", write_then_interrupt)
    outcome = runner.run("cpu", "tiny", out, nbs, tmp_path / "no-results", progress=False)
    assert outcome.ok and (out / "report.html").exists() and outdir.read_mark(out)["state"] == "complete"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build", "good"]


def test_a_stale_failed_build_is_replaced_by_this_runs(tmp_path):
    nbs, out = good_notebooks(tmp_path), tmp_path / "build"
    bad = tmp_path / "bad"
    write_notebook(bad, "01_boom", "raise ValueError('boom')")
    o1 = runner.run("cpu", "tiny", out, bad, tmp_path / "no-results", progress=False)
    o2 = runner.run("cpu", "tiny", out, bad, tmp_path / "no-results", progress=False)
    assert not o1.ok and not o2.ok
    assert outdir.read_mark(tmp_path / "build.failed")["run_id"] in (tmp_path / "build.failed" / "FAILED.txt").read_text()
    assert "ValueError" not in o2.reason and "01_boom" in o2.reason
    assert runner.run("cpu", "tiny", out, nbs, tmp_path / "no-results", progress=False).ok
    assert not (tmp_path / "build.failed").exists()  # superseded by the good run


# -- bad output paths ----------------------------------------------------------------------

def test_claims_json_into_a_folder_fails_before_the_checks(tmp_path):
    proc = cli("claims", "--device", "cpu", "--scale", "tiny", "--ids", "C01", "--json", str(tmp_path),
               cwd=tmp_path)
    assert proc.returncode == 2 and "is a folder" in proc.stderr and "Traceback" not in proc.stderr
    assert "C01" not in proc.stdout and "claims:" not in proc.stderr  # no check ran, no progress bar began


def test_claims_json_never_overwrites_a_users_file(tmp_path, capsys):
    mine = tmp_path / "results.json"
    mine.write_text('{"my": "data"}')
    assert main(["claims", "--device", "cpu", "--ids", "C01", "--json", str(mine), "--no-progress"]) == 2
    assert "not a claims.json written by nogradlab" in capsys.readouterr().err
    assert mine.read_text() == '{"my": "data"}'


def test_unwritable_or_missing_locations_fail_with_exit_2(tmp_path, capsys, monkeypatch):
    # a parent that cannot be created (a file is in the way)
    (tmp_path / "afile").write_text("x")
    assert main(run_args(good_notebooks(tmp_path), tmp_path / "afile" / "sub" / "out", tmp_path)) == 2
    assert "cannot create" in capsys.readouterr().err
    # a --json in a folder that does not exist
    assert main(["claims", "--device", "cpu", "--ids", "C01", "--json", str(tmp_path / "no" / "c.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_a_read_only_out_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    nbs, out = good_notebooks(tmp_path), tmp_path / "build"
    assert main(run_args(nbs, out, tmp_path)) == 0
    earlier = tree(out)
    real_write_bytes = Path.write_bytes

    def read_only(self, data):  # as a read-only filesystem answers (root ignores chmod)
        if self.parent == out:
            raise PermissionError(13, "Permission denied", str(self))
        return real_write_bytes(self, data)

    monkeypatch.setattr(Path, "write_bytes", read_only)
    ran = []
    monkeypatch.setattr(runner, "_execute", lambda *a, **k: ran.append(a))
    assert main(run_args(nbs, out, tmp_path)) == 2
    err = capsys.readouterr().err
    assert "cannot write to the output folder" in err and "Permission denied" in err
    assert not ran and tree(out) == earlier


def test_a_full_disk_while_writing_keeps_the_earlier_report(tmp_path, monkeypatch, capsys):
    nbs, out = good_notebooks(tmp_path), tmp_path / "build"
    assert main(run_args(nbs, out, tmp_path)) == 0
    earlier = tree(out)

    def full(doc, folder, refs=()):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(runner._report, "write_html", full)
    assert main(run_args(nbs, out, tmp_path)) == 1
    err = capsys.readouterr().err
    assert "No space left on device" in err and "left as it was" in err and "Traceback" not in err
    assert tree(out) == earlier
    assert "No space left" in (tmp_path / "build.failed" / "FAILED.txt").read_text()


# -- claim ids, a dead kernel --------------------------------------------------

@pytest.mark.parametrize("ids, words", [("", "empty"), (" , ", "empty"), ("C06,c06", "C06 twice"),
                                        ("C01,,C02", "empty item")])
def test_empty_or_duplicated_ids_are_rejected(ids, words, capsys):
    assert main(["claims", "--device", "cpu", "--ids", ids]) == 2
    assert words in capsys.readouterr().err


def test_a_dead_kernel_is_reported_with_the_last_cell_that_finished(tmp_path):
    nbs = tmp_path / "dies"
    write_notebook(nbs, "01_dies", "a = 1", "b = 2", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    outcome = runner.run("cpu", "tiny", tmp_path / "build", nbs, tmp_path / "no-results", progress=False)
    err = outcome.doc["meta"]["notebooks"][0]["error"]
    # cells: parameters, papermill's injected parameters, a = 1, b = 2, the one that kills the kernel
    assert not outcome.ok and err["ename"] == "DeadKernelError"
    # (whether papermill saved the dying cell's prompt number before the kernel died varies)
    assert err["cell"] == 4 and err["execution_count"] in (5, None) and "SIGKILL" in err["source"]
    assert (err["after_cell"], err["after_execution_count"]) == (3, 4)
    assert report.cell_name(err).startswith("cell 4")
    assert report.cell_name(err).endswith("; the last cell that finished: cell 3 (In [4])")
    assert "the last cell that finished: cell 3 (In [4])" in (tmp_path / "build.failed" / "report.html").read_text()


def test_executed_notebook_pages_open_offline(tmp_path):
    nbs = tmp_path / "nb"
    write_notebook(nbs, "01_math", "print(1)")
    nb = nbformat.read(str(nbs / "01_math.ipynb"), as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell("$x^2$ and [the docs](https://pytorch.org/docs/stable/)"))
    nbformat.write(nb, str(nbs / "01_math.ipynb"))
    runner.run("cpu", "tiny", tmp_path / "build", nbs, tmp_path / "no-results", progress=False)
    page = next((tmp_path).glob("build*/notebooks/01_math.html")).read_text()
    import re
    remote = re.findall(r"<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)\s*=\s*[\"'](?:https?:)?//[^\"']*", page)
    assert remote == []
    assert "https://pytorch.org/docs/stable/" in page  # a link in the text is not a resource


# -- a kill or a full disk during a write keeps the earlier file ----------------------

_WRITERS = {  # what writes results/<machine>/claims.json, a --json file, build/report.html, a notebook page
    "write_json": "report.write_json(doc, target)",
    "json_file": "outdir.write_text_atomic(target, report.dumps(doc))",
    "write_html": "report.write_html(doc, target.parent)",
}


def _earlier(tmp_path, kind):
    from test_report import fake_doc

    doc = fake_doc()
    target = tmp_path / ("report.html" if kind == "write_html" else "claims.json")
    if kind == "write_html":
        report.write_html(doc, tmp_path)
    else:
        report.write_json(doc, target)
    return target, target.read_bytes()


@pytest.mark.parametrize("kind", sorted(_WRITERS))
def test_sigkill_mid_write_leaves_the_earlier_file_intact(tmp_path, kind):
    target, before = _earlier(tmp_path, kind)
    # the child writes a new version and is killed with SIGKILL after the bytes are written, before the
    # rename (os.fsync is where it waits)
    code = f"""
import os, sys, time
sys.path.insert(0, {str(ROOT / 'tests' / 'run')!r})
from pathlib import Path
from nogradlab import outdir, report
from test_report import fake_doc
doc = fake_doc(skip={{"C01"}})
target = Path({str(target)!r})
def stall(fd):
    print("writing", flush=True)
    time.sleep(60)
os.fsync = stall
{_WRITERS[kind]}
"""
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert p.stdout.readline().strip() == "writing"
        tmp_files = [f for f in tmp_path.iterdir() if f.name.endswith(".tmp")]
        assert tmp_files and tmp_files[0].stat().st_size > 0  # the new text is on its way
        p.send_signal(signal.SIGKILL)
    finally:
        p.wait(timeout=30)
    assert p.returncode == -signal.SIGKILL
    assert target.read_bytes() == before
    if kind != "write_html":
        report.load_doc(target)  # still parses and follows the schema


@pytest.mark.parametrize("kind", sorted(_WRITERS))
def test_a_full_disk_mid_write_leaves_the_earlier_file_intact(tmp_path, kind, monkeypatch):
    import errno

    from test_report import fake_doc

    target, before = _earlier(tmp_path, kind)
    doc = fake_doc(skip={"C01"})
    written = []

    def full(fd):  # part of the data reached the temporary file, then the disk filled up
        written.append(os.fstat(fd).st_size)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        eval(_WRITERS[kind], {"report": report, "outdir": outdir, "doc": doc, "target": target})
    assert written and written[0] > 0
    assert target.read_bytes() == before
    assert sorted(f.name for f in tmp_path.iterdir()) == [target.name]  # no temporary file left behind


# -- a bad reference never costs the run its output ----------------------------------

def _unknown_reference(tmp_path):
    from test_report import fake_reference

    refs_dir, ref = fake_reference(tmp_path)
    path = refs_dir / ref["meta"]["machine"] / "claims.json"
    doc = json.loads(path.read_text())
    doc["claims"][0]["id"] = "C99"
    path.write_text(json.dumps(doc))
    return refs_dir


def test_a_reference_with_an_unknown_claim_is_skipped_by_run_and_claims(tmp_path, capsys):
    refs = _unknown_reference(tmp_path)
    nbs, out = good_notebooks(tmp_path), tmp_path / "build"
    argv = run_args(nbs, out, tmp_path)
    argv[argv.index("--results") + 1] = str(refs)
    assert main(argv) == 0
    assert "skipping reference" in capsys.readouterr().err and (out / "report.html").exists()
    f = tmp_path / "c.json"
    rc = main(["claims", "--device", "cpu", "--scale", "tiny", "--ids", "C30", "--json", str(f),
               "--results", str(refs), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 0 and "unknown claim id(s) C99" in err and "Traceback" not in err
    assert report.load_doc(f)["claims"][0]["id"] == "C30"


def test_a_crash_in_the_report_step_still_leaves_failed_and_failed_txt(tmp_path, monkeypatch, capsys):
    nbs, out = good_notebooks(tmp_path), tmp_path / "build"

    def broken(doc, folder, refs=()):
        raise ValueError("a bug in the report step")

    monkeypatch.setattr(runner._report, "write_html", broken)
    assert main(run_args(nbs, out, tmp_path)) == 1
    err = capsys.readouterr().err
    assert "a bug in the report step" in err and "Traceback" not in err
    failed = tmp_path / "build.failed"
    assert "ValueError: a bug in the report step" in (failed / "FAILED.txt").read_text()
    assert (failed / "notebooks" / "01_fake_ledger.ipynb").exists() and not (tmp_path / "build.partial").exists()


# -- --json to something that is not a regular file ------------------------------------------------------

@pytest.mark.parametrize("cmd", ["claims", "estimate"])
def test_json_to_a_fifo_without_a_reader_is_refused_at_once_not_waited_on(tmp_path, cmd):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    args = (["claims", "--device", "cpu", "--scale", "tiny", "--ids", "C01"] if cmd == "claims" else
            ["estimate", "torchvision.models:resnet18", "--input", "3x32x32", "--gpu", "1GiB"])
    proc = cli(*args, "--json", str(fifo), "--no-progress", cwd=tmp_path, timeout=60)  # a hang fails here
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr.strip()
    assert "not a regular file" in err and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert fifo.exists() and not fifo.is_file()  # left as it was


@pytest.mark.parametrize("target", ["/dev/zero", "/dev/null"])
def test_json_to_a_device_is_refused_without_reading_it(target, tmp_path):
    t0 = time.monotonic()
    with pytest.raises(outdir.OutputError, match="not a regular file"):
        outdir.check_file_target(target)  # /dev/zero would be read until memory runs out
    assert time.monotonic() - t0 < 10


def test_json_to_dev_stdout_piped_into_another_process_is_refused(tmp_path):
    code = ("import sys; from nogradlab.__main__ import main; "
            "sys.exit(main(['claims', '--device', 'cpu', '--ids', 'C01', '--json', '/dev/stdout', '--no-progress']))")
    p1 = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        out, err = p1.communicate(timeout=120)
    finally:
        if p1.poll() is None:
            p1.kill()
    assert p1.returncode == 2 and b"not a regular file" in err, err
