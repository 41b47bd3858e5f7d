"""environment.yml, binder/ and pyproject.toml name the same packages with the same lower bounds,
so a conda, Binder and pip install give the same lab."""
import os
import re
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")
try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]

# conda-forge name -> PyPI name; None: a conda-only entry with no PyPI counterpart
CONDA_TO_PYPI = {
    "pytorch": "torch",
    "pytorch-cpu": None,  # metapackage that selects pytorch's CPU build
    "python": None,
    "pip": None,
}
# PyPI requirements deliberately left out of the conda files, with the reason
NOT_IN_CONDA = {
    "playwright": "only the JupyterLab browser test needs it, and it skips without it",
}
_REQ = re.compile(r"^\s*([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?\s*(.*)$")


def _split(spec: str):
    """'torch>=2.3' -> ('torch', '>=2.3'); conda's 'pytorch >=2.3' and '=2.3' forms too."""
    m = _REQ.match(spec.replace(" ", ""))
    assert m, spec
    return m.group(1).lower().replace("_", "-"), m.group(2)


def _pyproject():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = data["project"]
    reqs = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        reqs += [r for r in extra if not r.startswith(project["name"])]
    return dict(_split(r) for r in reqs)


def _conda(path: Path):
    env = yaml.safe_load(path.read_text())
    assert env["channels"] == ["conda-forge"], f"{path}: use conda-forge only"
    out, pip = {}, []
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            pip += dep.get("pip", [])
            continue
        name, bound = _split(dep)
        pypi = CONDA_TO_PYPI.get(name, name)
        if pypi is not None:
            out[pypi] = bound
    return env, out, pip


@pytest.fixture(scope="module")
def pyproject():
    return _pyproject()


@pytest.mark.parametrize("path", ["environment.yml", "binder/environment.yml"])
def test_conda_files_name_the_pyproject_packages_with_the_same_bounds(pyproject, path):
    env, conda, _ = _conda(ROOT / path)
    expected = {k: v for k, v in pyproject.items() if k not in NOT_IN_CONDA}
    assert set(conda) == set(expected), (
        f"{path} vs pyproject.toml: missing {sorted(set(expected) - set(conda))}, "
        f"extra {sorted(set(conda) - set(expected))}")
    for name, bound in expected.items():
        assert conda[name] == bound, f"{path}: {name} {conda[name]!r}, pyproject {bound!r}"
    names = [d.split(">")[0].split("=")[0].strip() for d in env["dependencies"]
             if isinstance(d, str)]
    assert "pytorch-cpu" in names, "the CPU build of pytorch is selected explicitly"
    assert len(names) == len(set(names)), f"{path} repeats a package"


def test_excluded_packages_really_are_in_pyproject(pyproject):
    assert set(NOT_IN_CONDA) <= set(pyproject)


def test_root_environment_installs_the_package_itself():
    _, _, pip = _conda(ROOT / "environment.yml")
    assert [p.split("#")[0].strip() for p in pip] == ["-e ."]


def test_binder_installs_the_package_in_postbuild():
    _, _, pip = _conda(ROOT / "binder" / "environment.yml")
    assert pip == []  # repo2docker builds the environment before the repository is copied in
    post = ROOT / "binder" / "postBuild"
    lines = [line for line in post.read_text().splitlines() if line.strip()]
    assert lines[0].startswith("#!") and lines[1].strip() == "set -e"
    assert any(re.search(r"pip install .*-e \.", line) for line in lines)
    assert os.access(post, os.X_OK), "postBuild must be executable"


def test_both_environments_list_the_same_conda_packages():
    a = yaml.safe_load((ROOT / "environment.yml").read_text())["dependencies"]
    b = yaml.safe_load((ROOT / "binder" / "environment.yml").read_text())["dependencies"]
    assert [d for d in a if isinstance(d, str)] == [d for d in b if isinstance(d, str)]
