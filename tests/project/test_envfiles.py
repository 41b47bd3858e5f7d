"""environment.yml, binder/ and pyproject.toml name the same packages with the same lower bounds,
so a conda, Binder and pip install give the same lab. The root environment.yml holds everything
(dependencies, `lab` and `dev` extras); Binder holds only what a learner needs (dependencies and the
`lab` extra), with Python pinned the way repo2docker reads it and matplotlib without Qt."""
import os
import re
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")
try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[2]

# conda-forge name -> PyPI name; None: a conda-only entry with no PyPI counterpart
CONDA_TO_PYPI = {
    "pytorch": "torch",
    "matplotlib-base": "matplotlib",  # matplotlib without the Qt backends (and Qt itself)
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


def _pyproject(extras=None):
    """{PyPI name: bound} of the dependencies plus ``extras`` (None: every extra)."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = data["project"]
    reqs = list(project["dependencies"])
    for name, extra in project.get("optional-dependencies", {}).items():
        if extras is None or name in extras:
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


# which extras each conda file holds (None: all of them)
EXTRAS = {"environment.yml": None, "binder/environment.yml": ("lab",)}


@pytest.mark.parametrize("path", list(EXTRAS))
def test_conda_files_name_the_pyproject_packages_with_the_same_bounds(path):
    env, conda, _ = _conda(ROOT / path)
    expected = {k: v for k, v in _pyproject(EXTRAS[path]).items() if k not in NOT_IN_CONDA}
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


def test_binder_is_the_root_environment_without_the_dev_tools():
    a = yaml.safe_load((ROOT / "environment.yml").read_text())["dependencies"]
    b = yaml.safe_load((ROOT / "binder" / "environment.yml").read_text())["dependencies"]
    dev = {_split(r)[0] for r in _pyproject(("dev",))} - set(_pyproject(("lab",)))
    root = [d for d in a if isinstance(d, str) and _split(d)[0] not in dev]
    assert [d for d in b if isinstance(d, str)] == root


@pytest.mark.parametrize("path", list(EXTRAS))
def test_python_is_pinned_the_way_repo2docker_reads_it(path):
    """repo2docker takes the Python version from a `python=X.Y` entry only; `python>=3.10` leaves
    it on its own default, whatever that is the day the image is built."""
    deps = yaml.safe_load((ROOT / path).read_text())["dependencies"]
    pins = [d for d in deps if isinstance(d, str) and d.replace(" ", "").startswith("python")]
    assert len(pins) == 1 and re.fullmatch(r"python=3\.1[0-9]", pins[0].replace(" ", "")), pins
    minimum = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert minimum.startswith(">=") and tuple(map(int, pins[0].split("=")[1].split("."))) >= \
        tuple(map(int, minimum[2:].split(".")))


@pytest.mark.parametrize("path", list(EXTRAS))
def test_matplotlib_without_qt(path):
    names = [_split(d)[0] for d in yaml.safe_load((ROOT / path).read_text())["dependencies"]
             if isinstance(d, str)]
    assert "matplotlib-base" in names and "matplotlib" not in names


def test_binder_holds_no_dev_tools():
    names = {_split(d)[0] for d in
             yaml.safe_load((ROOT / "binder" / "environment.yml").read_text())["dependencies"]
             if isinstance(d, str)}
    for tool in ("pytest", "nbval", "jupytext", "nbstripout", "playwright", "psutil"):
        assert tool not in names, f"binder/environment.yml installs the dev tool {tool}"
