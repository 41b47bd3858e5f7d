"""Issue 42: the claims wing in rooms. ``nogradlab/claims/__init__.py`` is the face (short, it re-exports);
the rooms (``ledger``, ``result``, ``verdict``) and the check modules import each other, never the face,
and only the face loads the check modules. A learner's ``nogradlab.claims.X`` is the room's own object."""
import pytest
import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLAIMS = ROOT / "nogradlab" / "claims"
SUBMODULES = {p.stem for p in CLAIMS.glob("*.py") if p.stem != "__init__"}

#: face imports allowed: none
KNOWN: set = set()


def _face_imports(path: Path) -> list:
    """``(file, what)`` for each import of the face in ``path``: ``from nogradlab import claims``,
    ``import nogradlab.claims``, or a name (not a submodule) from ``nogradlab.claims``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "nogradlab":
            found += [(path.name, "claims") for a in node.names if a.name == "claims"]
        elif isinstance(node, ast.ImportFrom) and node.module == "nogradlab.claims":
            found += [(path.name, a.name) for a in node.names if a.name not in SUBMODULES]
        elif isinstance(node, ast.Import):
            found += [(path.name, a.name) for a in node.names if a.name == "nogradlab.claims"]
    return found


def test_the_rooms_and_check_modules_never_import_the_face():
    found = [f for p in sorted(CLAIMS.glob("*.py")) if p.name != "__init__.py" for f in _face_imports(p)]
    assert sorted(set(found) - KNOWN) == []


def test_the_face_is_short_and_the_rooms_are_there():
    assert len((CLAIMS / "__init__.py").read_text().splitlines()) <= 250
    assert {"ledger", "result", "verdict"} <= SUBMODULES


@pytest.mark.integration
def test_only_the_face_loads_the_check_modules():
    code = ("import sys\n"
            "from nogradlab.claims import ledger, result, verdict\n"
            "print(sorted(m for m in sys.modules if m.startswith('nogradlab.claims.nb')))\n"
            "import nogradlab.claims as c\n"
            "print(c._LOADED, len(c.ids()), c._LOADED, ledger._LOAD.loaded)\n"
            "print(len([m for m in sys.modules if m.startswith('nogradlab.claims.nb')]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                         check=True).stdout.splitlines()
    assert out == ["[]", "False 35 True True", "9"]


def test_a_name_of_the_face_is_its_rooms_own_object_and_the_state_lives_in_one_module():
    from nogradlab import claims
    from nogradlab.claims import ledger, result, verdict

    for room in (ledger, result, verdict):
        own = [n for n, v in vars(room).items() if getattr(v, "__module__", None) == room.__name__]
        assert own, room.__name__
        for n in own:
            if hasattr(claims, n):
                assert getattr(claims, n) is getattr(room, n), (room.__name__, n)
    assert claims._CLAIMS is ledger._CLAIMS and claims._REFS is verdict._REFS
    assert claims.NOTEBOOKS is ledger.NOTEBOOKS and claims.STRICT_ENV == verdict.STRICT_ENV
    for n in claims.__all__:
        assert hasattr(claims, n), n
    assert not any(hasattr(r, "_LOADED") for r in (ledger, result, verdict)) and "_LOADED" not in vars(claims)


EXERCISES = ROOT / "nogradlab" / "lab" / "exercises"


def test_the_exercise_modules_import_the_registry_never_the_face():
    found = []
    for p in sorted(EXERCISES.glob("nb*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module in ("nogradlab.lab.exercises", "nogradlab.exercises"):
                found += [(p.name, a.name) for a in node.names if a.name != "registry"]
    assert found == []


@pytest.mark.integration
def test_only_the_exercises_face_loads_its_modules_and_the_registry_lives_in_one_module():
    code = ("import sys\n"
            "from nogradlab.lab.exercises import registry\n"
            "print(sorted(m for m in sys.modules if m.startswith('nogradlab.lab.exercises.nb')))\n"
            "import nogradlab.lab.exercises as ex\n"
            "print(ex._LOADED, len(ex.all_exercises()) > 0, ex._LOADED, ex._EXERCISES is registry._EXERCISES)\n"
            "print(all(getattr(ex, n) is getattr(registry, n) for n in ('exercise', 'get', 'all_exercises', "
            "'Exercise', 'ExerciseError', 'KINDS')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                         check=True).stdout.splitlines()
    assert out == ["[]", "False True True True", "True"]
