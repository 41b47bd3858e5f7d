"""Environment variables, seeds, budgets and sizes are checked before any work
with an error naming the variable or the allowed values; small things that printed a wrong number."""
import math
from pathlib import Path

import numpy as np
import pytest

from nogradlab import allocator, batch, claims, cudamodel, memory, notebook, runner, widgets
from nogradlab.__main__ import main

ROOT = Path(__file__).resolve().parents[2]


# -- the environment ----------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["-5", "lots", "1.5"])
def test_a_bad_cublaslt_workspace_size_names_the_variable(monkeypatch, value):
    monkeypatch.setenv("CUBLASLT_WORKSPACE_SIZE", value)
    with pytest.raises(ValueError, match=r"CUBLASLT_WORKSPACE_SIZE=.*non-negative whole number of KiB"):
        memory.estimate("mlp", 4, "cuda")
    monkeypatch.setenv("CUBLASLT_WORKSPACE_SIZE", "0")
    assert cudamodel.profile().cublaslt_workspace == 0


@pytest.mark.parametrize("where", ["folder", "missing folder"])
def test_a_bad_ledger_path_fails_before_the_checks(tmp_path, monkeypatch, capsys, where):
    path = tmp_path if where == "folder" else tmp_path / "nope" / "ledger.jsonl"
    monkeypatch.setenv("NOGRADLAB_LEDGER", str(path))
    ran = []
    for c in claims.all_claims():  # no check may start
        monkeypatch.setattr(c, "measure", lambda ctx: ran.append(1) or {})
    rc = main(["claims", "--device", "cpu", "--scale", "tiny", "--ids", "C30", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "NOGRADLAB_LEDGER" in err and "Traceback" not in err and not ran
    for call in (lambda: claims.check("C30", device="cpu", scale="tiny"),
                 lambda: runner.check_claims(["C30"], "cpu", "tiny", progress=False)):
        with pytest.raises(ValueError, match="NOGRADLAB_LEDGER"):
            call()
    assert not ran
    monkeypatch.setenv("NOGRADLAB_LEDGER", str(tmp_path / "ledger.jsonl"))  # a new file is fine
    assert claims.ledger_path() == str(tmp_path / "ledger.jsonl")


# -- tracebacks where a clear error belongs -------------------------------------------------------

def test_run_out_root_is_refused_without_a_traceback(capsys, tmp_path):
    from test_run_keeps_earlier_outputs import good_notebooks

    rc = main(["run", "--device", "cpu", "--scale", "tiny", "--notebooks", str(good_notebooks(tmp_path)),
               "--out", "/", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "filesystem root" in err and "Traceback" not in err


@pytest.mark.parametrize("seed", ["99999999999999999999", str(2 ** 63), str(-(2 ** 63) - 1)])
def test_a_seed_out_of_range_exits_2_before_any_work(seed, capsys, monkeypatch):
    ran = []
    for c in claims.all_claims():  # no check may start
        monkeypatch.setattr(c, "measure", lambda ctx: ran.append(1) or {})
    assert main(["claims", "--device", "cpu", "--scale", "tiny", "--seed", seed, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--seed" in err and "out of range" in err and str(2 ** 63 - 1) in err and not ran
    for call in (lambda: notebook.setup(seed=int(seed)), lambda: claims.check("C30", "cpu", "tiny", int(seed))):
        with pytest.raises(ValueError, match="out of range"):
            call()
    assert not ran


@pytest.mark.parametrize("gib", [math.inf, math.nan, -1.0, 0.0, 2 ** -31])
def test_budgets_are_finite_and_at_least_one_byte(gib):
    with pytest.raises(ValueError, match="budget_gib must be a positive, finite number"):
        widgets.budget_explorer("mlp", "tiny", "cpu", budget_gib=gib, interactive=False)
    if gib > 0:
        with pytest.raises(ValueError, match="budget_bytes must be a positive, finite number of bytes, at least 1"):
            batch.largest_batch("mlp", "train", gib, "cpu", scale="tiny")
    if not gib < math.inf:  # what papermill passes as -p budget_gib inf: stopped at setup
        with pytest.raises(ValueError, match="budget_gib must be positive finite numbers"):
            notebook.setup(device="cpu", scale="tiny", budget_gib=gib)


# -- smaller ----------------------------------------------------------------------------------

def test_half_a_byte_is_not_a_budget():
    with pytest.raises(ValueError, match="at least 1"):
        batch.largest_batch("mlp", "eval+no_grad", 0.5, "cpu", scale="tiny")


def test_simulate_takes_numpy_integers():
    ev = [("alloc", "a", np.int64(10)), ("free", "a")]
    got = allocator.simulate(ev, limit_bytes=np.int64(2 ** 30))
    want = allocator.simulate([("alloc", "a", 10), ("free", "a")], limit_bytes=2 ** 30)
    assert got.allocated_peak_bytes == want.allocated_peak_bytes == 512
    assert got.reserved_peak_bytes == want.reserved_peak_bytes > 0


def test_version_and_progress_only_on_a_terminal(capsys, monkeypatch):
    """Issue 39: `--version`; a progress bar only where standard error is a terminal (not into a log)."""
    import argparse
    import io

    import nogradlab
    from nogradlab import __main__ as cli

    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"nogradlab {nogradlab.__version__}"
    monkeypatch.setattr("sys.stderr", io.StringIO())  # a log file: not a terminal
    assert cli._progress(argparse.Namespace(no_progress=False)) is False

    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr("sys.stderr", Tty())
    assert cli._progress(argparse.Namespace(no_progress=False)) is True
    assert cli._progress(argparse.Namespace(no_progress=True)) is False
    help_text = cli.parser()._subparsers._group_actions[0].choices["claims"].format_help()
    assert "installed with the package" in " ".join(help_text.split())

# -- run executes the collection's notebooks, never a user's own notebooks/ unasked ---------------------------------

def _users_project(tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "01_train.ipynb").write_text("{}")  # would overwrite the user's model.pt
    (tmp_path / "results").mkdir()
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "myproject"\n')
    return tmp_path


def test_run_in_a_users_project_runs_the_collections_notebooks_not_theirs(tmp_path, monkeypatch):
    monkeypatch.chdir(_users_project(tmp_path))
    assert runner.notebooks_dir() == ROOT / "notebooks"  # this checkout's, beside the package
    assert runner.default_dir("results") != tmp_path / "results"
    assert runner.notebooks_dir("notebooks") == Path("notebooks")  # asked for: theirs


def test_run_in_a_users_project_without_a_checkout_refuses_naming_notebooks(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(_users_project(tmp_path))
    monkeypatch.setattr(runner, "REPO", tmp_path / "site-packages")  # an installed package: no checkout
    with pytest.raises(FileNotFoundError, match=r"not nogradlab's collection and was not run.*--notebooks notebooks"):
        runner.notebooks_dir()
    assert main(["run", "--device", "cpu", "--out", str(tmp_path / "out")]) == 2
    assert "was not run" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_run_in_a_checkout_uses_its_notebooks(monkeypatch):
    monkeypatch.chdir(ROOT)
    assert runner.is_checkout(ROOT) and runner.notebooks_dir() == Path.cwd() / "notebooks"
