"""`make run` beside setuptools' build/: the default output folder is one no standard tool makes, and a
refusal names the option the person typed (`make run OUT=...` from make, `--out` from the command line),
with an example that is not the folder it refused."""
import re
import subprocess
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
