"""Run all on Colab needs no manual step: the notebooks' shared first cell installs nogradlab when it runs on Colab
and the package is missing, then goes on without a restart when nothing the session had imported was replaced,
and says to restart when something was. Outside Colab a missing package stops the cell with the one `%pip install`
line to run. Each case runs the stored first cell itself, with Colab, pip and the installed versions simulated."""
from __future__ import annotations

import importlib.metadata
import importlib.util
import subprocess
import sys
import types
from pathlib import Path

import nbformat
import pytest

NB = Path(__file__).resolve().parents[2] / "notebooks" / "00_index.ipynb"
URL = "nogradlab @ git+https://github.com/nogradlab/nogradlab"


def _first_cell() -> str:
    return next(c.source for c in nbformat.read(str(NB), as_version=4).cells if c.cell_type == "code")


@pytest.fixture
def simulated(monkeypatch, tmp_path):
    """A session where nogradlab is not importable until a (recorded, simulated) pip install, away from any
    checkout; `torch` stands for what the session has already imported."""
    monkeypatch.chdir(tmp_path)  # no checkout above the working directory
    running = sys.modules["torch"].__version__
    state = {"installed": False, "pip": [], "versions": {"torch": running}, "after_install": {}}
    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        if name == "nogradlab" and not state["installed"]:
            return None
        return real_find_spec(name, *args, **kwargs)

    def run(cmd, check=False, **kwargs):
        state["pip"].append(list(cmd))
        state["installed"] = True
        state["versions"].update(state["after_install"])
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    monkeypatch.setattr(subprocess, "run", run)
    real_version = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda dist: state["versions"].get(dist) or real_version(dist))
    assert "torch" in sys.modules  # imported by the test session, as a Colab session may have
    return state


def _colab(monkeypatch, on: bool):
    if on:
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)


def test_on_colab_a_missing_package_is_installed_and_the_notebook_goes_on(simulated, monkeypatch, capsys):
    _colab(monkeypatch, True)
    namespace: dict = {}
    exec(_first_cell(), namespace)  # torch already imported and not replaced: no restart, no error
    assert simulated["pip"] == [[sys.executable, "-m", "pip", "install", "-q", URL]]
    assert namespace["nogradlab"].__name__ == "nogradlab"
    assert capsys.readouterr().out == ""


def test_on_colab_a_replaced_import_asks_for_a_restart(simulated, monkeypatch):
    _colab(monkeypatch, True)
    simulated["after_install"] = {"torch": "2.9.1"}  # pip replaced a torch this session had imported
    with pytest.raises(RuntimeError, match=r"replaced torch \(running .*, installed 2\.9\.1\).*restart the session"):
        exec(_first_cell(), {})
    assert len(simulated["pip"]) == 1


def test_on_colab_an_installed_package_is_not_installed_again(simulated, monkeypatch):
    _colab(monkeypatch, True)
    simulated["installed"] = True
    exec(_first_cell(), {})
    assert simulated["pip"] == []


def test_outside_colab_a_missing_package_names_the_pip_line_and_installs_nothing(simulated, monkeypatch):
    _colab(monkeypatch, False)
    with pytest.raises(ImportError) as e:
        exec(_first_cell(), {})
    assert f"%pip install -q '{URL}'" in str(e.value) and "restart the kernel" in str(e.value)
    assert simulated["pip"] == []
