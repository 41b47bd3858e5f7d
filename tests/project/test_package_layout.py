"""The five wings: the layers contract holds, `import nogradlab` stays light, and the names the notebooks
import (`from nogradlab import memory`, `import nogradlab.notebook`) give each wing's own module object."""
import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_each_wing_imports_only_the_wings_below_it():
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if exe is None:
        pytest.skip("import-linter is not installed (pip install -e '.[dev]')")
    p = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert "1 kept, 0 broken" in p.stdout


def test_import_nogradlab_imports_no_wing_and_no_torch():
    code = ("import sys, nogradlab; print(sorted(m for m in sys.modules if m.startswith('nogradlab'))); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                         check=True).stdout.splitlines()
    assert out == ["['nogradlab']", "False"]


@pytest.mark.parametrize("old, new", [("notebook", "lab.notebook"), ("plots", "lab.plots"),
                                      ("exercises", "lab.exercises"), ("timing", "core.timing"),
                                      ("estimate_cmd", "estimate.cli"), ("report", "run.report")])
def test_an_old_name_is_the_wings_own_module(old, new):
    import nogradlab

    a = importlib.import_module(f"nogradlab.{old}")
    b = importlib.import_module(f"nogradlab.{new}")
    assert a is b and getattr(nogradlab, old) is b
    assert b.__name__ == b.__spec__.name == f"nogradlab.{new}"  # its own name and spec, not the alias's


def test_a_submodule_of_an_old_package_name_is_not_loaded_twice():
    a = importlib.import_module("nogradlab.exercises.nb05")
    b = importlib.import_module("nogradlab.lab.exercises.nb05")
    assert a is b


def test_the_lessons_memory_measures_with_core_and_estimates_with_the_estimate_wing():
    from nogradlab import memory
    from nogradlab.core import memory as core_memory
    from nogradlab.estimate import fake, sweep

    assert memory.measure is core_memory.measure and memory.MemoryReport is core_memory.MemoryReport
    assert memory.estimate is fake.estimate and memory.estimate_sweep is sweep.estimate_sweep
    assert memory._Templates is fake._Templates  # a wing's private name reads through, unchanged
    with pytest.raises(AttributeError, match="nogradlab.memory.*no_such_name"):
        _ = memory.no_such_name


def test_an_unknown_name_is_refused():
    import nogradlab

    with pytest.raises(AttributeError, match="no attribute 'plan'"):
        _ = nogradlab.plan  # the GPU plan is project tooling (tools/plan.py), not shipped
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("nogradlab.procmem")


def test_no_module_imports_itself_back_through_others():
    """No circle in the import graph, module by module (inside a wing too): the registry gives rules and
    evidence its lookups at import instead of their importing it."""
    grimp = pytest.importorskip("grimp")
    g = grimp.build_graph("nogradlab")
    circles = [(m, t) for m in sorted(g.modules) for t in g.find_modules_directly_imported_by(m)
               if g.chain_exists(importer=t, imported=m)]
    assert circles == []


@pytest.mark.parametrize("line", ["from nogradlab import runner", "import nogradlab.runner",
                                  "from nogradlab.timing import compare"])
def test_a_flat_alias_import_inside_the_package_fails_lint(tmp_path, line):
    """Issue 42: a copy of the package with `from nogradlab import runner` inside claims/ passed
    lint-imports (the layers contract sees only wing paths). `make lint`'s ruff (banned-api, TID251) now
    refuses every flat alias inside the package; the unchanged copy passes."""
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed")
    root = Path(__file__).resolve().parents[2]
    shutil.copytree(root / "nogradlab", tmp_path / "nogradlab", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(root / "pyproject.toml", tmp_path / "pyproject.toml")
    clean = subprocess.run([ruff, "check", "--no-cache", "nogradlab"], cwd=tmp_path, capture_output=True, text=True)
    assert clean.returncode == 0, clean.stdout
    probes = tmp_path / "nogradlab" / "claims" / "probes.py"
    text = probes.read_text()
    head, _, rest = text.partition("\nimport ")
    probes.write_text(head + f"\n{line}  # noqa: F401\nimport " + rest)
    dirty = subprocess.run([ruff, "check", "--no-cache", "nogradlab"], cwd=tmp_path, capture_output=True, text=True)
    assert dirty.returncode != 0 and "TID251" in dirty.stdout, dirty.stdout
