"""Issue 12, finding 12: installing nogradlab prints no setuptools deprecation (the license is an SPDX
string, the form setuptools asks for from 2027-02-18 on)."""
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
