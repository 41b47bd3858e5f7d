"""`make run` beside setuptools' build/: the default output folder is one no standard tool makes, and a
refusal names the option the person typed (`make run OUT=...` from make, `--out` from the command line),
with an example that is not the folder it refused."""
import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nogradlab import outdir, runner
from nogradlab.__main__ import parser

ROOT = Path(__file__).resolve().parents[2]


def test_the_default_output_folder_is_not_setuptools_build():
    default = outdir.DEFAULT_OUT
    assert default not in ("build", "dist") and not default.endswith(".egg-info")
    assert parser().parse_args(["run"]).out == default
    import inspect

    assert inspect.signature(runner.run).parameters["out"].default == default
    assert re.search(rf"^OUT\s*\?=\s*{re.escape(default)}\s*$", (ROOT / "Makefile").read_text(), re.M)
    ignored = (ROOT / ".gitignore").read_text().split()
    assert f"/{default}/" in ignored and f"/{default}.*/" in ignored


def test_make_run_passes_the_folder_and_says_it_is_make():
    p = subprocess.run(["make", "-n", "run", "OUT=mine"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    line = next(x for x in p.stdout.splitlines() if "-m nogradlab run" in x)
    assert "NOGRADLAB_FROM_MAKE=1" in line and "--out mine" in line


def _foreign(tmp_path, name):
    out = tmp_path / name
    out.mkdir()
    (out / "lib").mkdir()  # what `pip wheel .` leaves in build/
    return out


def test_a_refusal_from_make_names_the_make_variable(tmp_path, monkeypatch):
    out = _foreign(tmp_path, "build")
    monkeypatch.setenv("NOGRADLAB_FROM_MAKE", "1")
    with pytest.raises(outdir.OutputError) as e:
        outdir.prepare(out)
    msg = str(e.value)
    assert "OUT=" in msg and "make run OUT=" in msg and "--out" not in msg
    assert f"make run OUT={outdir.DEFAULT_OUT}" in msg and "OUT=build" not in msg.split("e.g.")[-1]


def test_a_refusal_from_the_command_line_names_out_and_never_suggests_the_refused_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("NOGRADLAB_FROM_MAKE", raising=False)
    with pytest.raises(outdir.OutputError) as e:
        outdir.prepare(_foreign(tmp_path, "build"))
    assert "--out" in str(e.value) and "make run" not in str(e.value)
    assert str(e.value).split("e.g.")[-1].strip().rstrip(".") == f"--out {outdir.DEFAULT_OUT}"
    with pytest.raises(outdir.OutputError) as e:
        outdir.prepare(_foreign(tmp_path, outdir.DEFAULT_OUT))
    assert str(e.value).split("e.g.")[-1].strip().rstrip(".") == f"--out {outdir.DEFAULT_OUT}-2"


# -- a user's file inside the build's own folders (notebooks/) is never deleted --------------------------------------

def _build(folder, state="complete"):
    """A build as `run` leaves it: its notebooks, claims.json and its mark (listing what it wrote)."""
    (folder / "notebooks").mkdir(parents=True)
    for ext in (".ipynb", ".html"):
        (folder / "notebooks" / f"01_x{ext}").write_text("built")
    (folder / "claims.json").write_text("{}")
    outdir.write_mark(folder, run_id="r1", state=state, entries=list(outdir.BUILD_ENTRIES),
                      files=runner._written(["01_x"]))
    return folder


def _users_files(folder):
    nb = folder / "notebooks"
    (nb / "01_x-Copy1.ipynb").write_text("mine")  # a "Save As" / Duplicate in Jupyter
    (nb / ".ipynb_checkpoints").mkdir()
    (nb / ".ipynb_checkpoints" / "01_x-checkpoint.ipynb").write_text("mine too")
    return {nb / "01_x-Copy1.ipynb", nb / ".ipynb_checkpoints" / "01_x-checkpoint.ipynb"}


@pytest.mark.parametrize("where", ["out", "failed", "previous"])
def test_a_users_file_inside_notebooks_makes_the_build_foreign_and_is_kept(tmp_path, where):
    out = tmp_path / "build"
    folder = _build(tmp_path / {"out": "build", "failed": "build.failed", "previous": "build.previous"}[where])
    assert outdir.is_ours(folder)
    mine = _users_files(folder)
    assert not outdir.is_ours(folder)
    with pytest.raises(outdir.OutputError) as e:
        outdir.prepare(out)
    assert where != "out" or ("01_x-Copy1.ipynb" in str(e.value) and ".ipynb_checkpoints" in str(e.value))
    assert not outdir.remove_ours(folder)
    assert all(p.read_text().startswith("mine") for p in mine)


def test_replacing_a_build_that_gained_a_users_file_keeps_it(tmp_path):
    out = _build(tmp_path / "build")
    new = _build(tmp_path / "build.partial")
    mine = _users_files(out)  # while the new build was running
    with pytest.raises(outdir.OutputError, match="did not write"):
        outdir.replace_dir(new, out, tmp_path / "build.previous")
    assert all(p.exists() for p in mine) and outdir.is_ours(new)


def test_the_run_caches_pickles_are_the_builds_own(tmp_path):
    """A whole `run` writes one pickle per shared measurement into ledger.jsonl.timings/ (the run cache): the
    build was refused as "not a nogradlab build" when it moved into place (seen on a full `run`)."""
    out = _build(tmp_path / "build")
    (out / "ledger.jsonl.timings").mkdir()
    (out / "ledger.jsonl.timings" / "0123abcd.pkl").write_bytes(b"\x80\x04N.")
    assert outdir.is_ours(out)
    new = _build(tmp_path / "build.partial")
    outdir.replace_dir(new, out, tmp_path / "build.previous")
    assert (out / "notebooks" / "01_x.ipynb").is_file() and not new.exists()


def test_a_leftover_temporary_file_of_the_build_is_its_own(tmp_path):
    out = _build(tmp_path / "build")
    (out / "notebooks" / ".01_x.html.123-0123abcd.tmp").write_text("half")  # a write killed midway
    (out / ".claims.json.77-89abcdef.tmp").write_text("half")
    assert outdir.is_ours(out)
    (out / "notebooks" / ".mine.html.1-0123abcd.tmp").write_text("x")  # not a temporary of a listed file
    assert not outdir.is_ours(out)


def test_a_mark_from_an_earlier_release_vouches_only_for_what_its_claims_json_names(tmp_path):
    out = tmp_path / "build"
    (out / "notebooks").mkdir(parents=True)
    (out / "notebooks" / "01_x.ipynb").write_text("built")
    (out / "claims.json").write_text(json.dumps({"meta": {"notebooks": [
        {"name": "01_x", "ipynb": "notebooks/01_x.ipynb", "html": None, "kernel_log": None}]}, "claims": []}))
    outdir.write_text_atomic(out / outdir.MARKER, json.dumps(
        {"tool": "nogradlab", "state": "complete", "entries": ["claims.json", "notebooks"]}))
    assert outdir.is_ours(out)
    (out / "notebooks" / "01_x-Copy1.ipynb").write_text("mine")
    assert not outdir.is_ours(out) and not outdir.remove_ours(out)
    assert (out / "notebooks" / "01_x-Copy1.ipynb").read_text() == "mine"


# -- nothing POSIX-only on the way to claims, run or estimate ------------------------------------------------------

_NO_FCNTL = r'''
import sys
sys.modules["fcntl"] = None  # as on Windows: `import fcntl` raises ImportError
from pathlib import Path
from nogradlab.__main__ import main
from nogradlab.run import outdir, runner, report  # noqa: F401
from nogradlab.estimate import cli  # noqa: F401
tmp = Path(sys.argv[1])
lock = tmp / ".build.nogradlab-lock"
with outdir.Lock(lock, "build"):
    try:
        outdir.Lock(lock, "build").acquire()
        print("second holder got the lock")
    except outdir.OutputBusy as e:
        print("busy:", e)
assert not lock.exists()
(tmp / "nbs").mkdir()
print("run rc", main(["run", "--device", "cpu", "--notebooks", str(tmp / "nbs"), "--out", str(tmp / "out")]))
print("claims rc", main(["claims", "--device", "cpu", "--ids", "C99"]))
print("estimate rc", main(["estimate", "no_such_module_xyz:model", "--input", "3x8x8"]))
'''


@pytest.mark.integration
def test_the_commands_load_and_lock_without_fcntl(tmp_path):
    proc = subprocess.run([sys.executable, "-c", _NO_FCNTL, str(tmp_path)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "fcntl" not in proc.stderr, proc.stderr
    assert "busy: another nogradlab run" in proc.stdout, proc.stdout
    assert "run rc 2" in proc.stdout and "claims rc 2" in proc.stdout and "estimate rc 2" in proc.stdout, \
        (proc.stdout, proc.stderr)


def test_the_lock_is_dropped_when_its_holder_is_killed(tmp_path):
    import signal

    lock = tmp_path / ".build.nogradlab-lock"
    code = ("import sys, time; from nogradlab.run import outdir; held = outdir.Lock(sys.argv[1], 'build').acquire(); "
            "print('held', flush=True); time.sleep(120)")
    p = subprocess.Popen([sys.executable, "-c", code, str(lock)], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert p.stdout.readline().strip() == "held"
        with pytest.raises(outdir.OutputBusy, match=rf"pid {p.pid}"):
            outdir.Lock(lock, "build").acquire()
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    with outdir.Lock(lock, "build"):  # killed: free at once
        pass
    assert not lock.exists()
