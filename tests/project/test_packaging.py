"""Installing nogradlab prints no setuptools deprecation (the license is an SPDX
string, the form setuptools asks for from 2027-02-18 on)."""
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_license_uses_the_current_pyproject_form():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT" and (ROOT / "LICENSE").is_file()


def test_building_the_metadata_prints_no_deprecation(tmp_path):
    code = ("import warnings; warnings.simplefilter('always')\n"
            "from setuptools import build_meta\n"
            f"print(build_meta.prepare_metadata_for_build_wheel({str(tmp_path)!r}))")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "eprecat" not in p.stdout + p.stderr, (p.stdout + p.stderr)[-3000:]
    meta = next(tmp_path.glob("*.dist-info")) / "METADATA"
    assert "License-Expression: MIT" in meta.read_text()


# -- an installed package carries the reference evidence ------------------------------------------------

import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import zipfile  # noqa: E402

import pytest  # noqa: E402


def test_every_package_folder_is_named_in_pyproject():
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {".".join(p.relative_to(ROOT).parts) for p in (ROOT / "nogradlab").rglob("*")
               if p.is_dir() and p.name != "__pycache__" and any(f.is_file() for f in p.iterdir())}
    folders.add("nogradlab")
    assert folders | {"nogradlab._results"} == set(tool["packages"])
    assert tool["package-dir"] == {"nogradlab._results": "results"}


def _env(pythonpath):
    env = {k: v for k, v in os.environ.items() if k not in ("NOGRADLAB_LEDGER", "NOGRADLAB_NOTEBOOK")}
    env["PYTHONPATH"] = str(pythonpath)
    return env


@pytest.fixture(scope="module")
def wheel_site(tmp_path_factory):
    """The wheel, built from a copy of the checkout (its build/ stays untouched) with the venv's setuptools
    (offline), installed with --target outside the checkout; torch and the rest come from the venv."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "nogradlab", src / "nogradlab", ignore=ignore)
    shutil.copytree(ROOT / "results", src / "results", ignore=ignore)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    p = subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(tmp / "dist"),
                        str(src)], capture_output=True, text=True, timeout=600, cwd=tmp)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    whl = next((tmp / "dist").glob("nogradlab-*.whl"))
    site = tmp / "site"
    p = subprocess.run([*pip, "install", "--no-deps", "--no-index", "--target", str(site), str(whl)],
                       capture_output=True, text=True, timeout=600, cwd=tmp)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    empty = tmp / "empty"
    empty.mkdir()
    where = subprocess.run([sys.executable, "-c", "import nogradlab, nogradlab.claims as c; "
                            "print(nogradlab.__file__); print(c.results_dir())"],
                           capture_output=True, text=True, timeout=120, cwd=empty, env=_env(site))
    assert where.returncode == 0, where.stderr
    module, results = where.stdout.split()
    assert Path(module).is_relative_to(site), module  # the installed copy, not the checkout
    assert Path(results) == site / "nogradlab" / "_results"
    return whl, site, empty


@pytest.mark.integration
def test_the_wheel_carries_every_reference_column(wheel_site):
    whl, site, _ = wheel_site
    names = set(zipfile.ZipFile(whl).namelist())
    for p in (ROOT / "results").glob("*/claims.json"):
        assert f"nogradlab/_results/{p.parent.name}/claims.json" in names, p
        assert (site / "nogradlab" / "_results" / p.parent.name / "claims.json").read_bytes() == p.read_bytes()
    assert "nogradlab/run/schema/claims.schema.json" in names and "nogradlab/estimate/data/gpu_workspaces.json" in names
    # the project's own tooling (tools/: the GPU plan, the process-memory watcher) is not shipped to learners
    assert not any(n.startswith("tools/") or "plan_h200" in n or n.endswith("procmem.py") for n in names)


@pytest.mark.integration
def test_an_installed_package_judges_gpu_speed_claims_by_the_reference_gpu_as_the_checkout_does(wheel_site):
    _, site, empty = wheel_site
    out = empty.parent / "claims.json"
    p = subprocess.run([sys.executable, "-m", "nogradlab", "claims", "--device", "cpu", "--scale", "tiny", "--ids",
                        "C03,C17,X05", "--json", str(out), "--no-progress"], capture_output=True, text=True,
                       timeout=900, cwd=empty, env=_env(site))
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    assert "reference GPU ()" not in p.stdout + p.stderr
    assert "cuda-nvidia-h200" in p.stdout  # the reference columns are shown beside the verdicts
    doc = json.loads(out.read_text())
    from nogradlab import claims

    for e in doc["claims"]:
        assert e["scope"]["basis"] == "reference" and e["scope"]["machine"] == "cuda-nvidia-h200", e["scope"]
        assert "needs re-measuring" != e["verdict"] or e["scope"].get("conflicts"), e["summary"]
        here = claims.judge_entry(e, doc["meta"])  # the same measurements judged in the checkout
        assert (here["verdict"], here["scope"]) == (e["verdict"], e["scope"]), e["id"]
        assert here["summary"] == e["summary"]


@pytest.mark.integration
def test_run_from_an_installed_package_says_what_it_needs(wheel_site):
    _, site, empty = wheel_site
    p = subprocess.run([sys.executable, "-m", "nogradlab", "run", "--device", "cpu", "--scale", "tiny"],
                       capture_output=True, text=True, timeout=300, cwd=empty, env=_env(site))
    err = p.stderr.strip()
    assert p.returncode == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "--notebooks" in err and "checkout" in err and "claims" in err
    assert list(empty.iterdir()) == []
