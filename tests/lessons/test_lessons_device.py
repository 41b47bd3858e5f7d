"""The learner's own measuring cells run on the notebook's `device`.

A hand cell that measures (times with `torch.utils.benchmark`, counts what autograd saves with saved-tensor hooks,
reads the CUDA allocator's counters, or calls a function of the notebook that does) follows the notebook's
`device` parameter, so that on Colab with a GPU the learner's cells show GPU memory and GPU time, not only the
package's checks. Following `device` is checked statically: the cell uses the name `device` in its code (to place
tensors, or to say where it measured), or it says why it stays on the CPU in a `# stays on the CPU: <reason>`
comment. Cells that only define functions, and the learner's exercise cells, are not measuring cells. A notebook
whose hand cells measure memory reads both `max_memory_allocated` and `max_memory_reserved` on CUDA. The tests run
every notebook at `device="cpu"` (test_notebooks.py); these checks hold the GPU path in place without a GPU."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest

from nogradlab import claims

NB_DIR = Path(__file__).resolve().parents[2] / "notebooks"
LESSONS = list(claims.NOTEBOOKS)
PRIMITIVES = re.compile(r"benchmark\.Timer|saved_tensors_hooks|torch\.cuda\.(?:max_)?memory_(?:allocated|reserved)")
MEMORY = re.compile(r"saved_tensors_hooks|torch\.cuda\.(?:max_)?memory_(?:allocated|reserved)")
STAYS = re.compile(r"#\s*stays on the CPU:\s*\S")
NOT_HAND = {"exercise", "exercise-check", "solution"}


def _code(src: str) -> str:
    """The cell without IPython magics and shell lines, so that ast can parse it."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in src.split("\n"))


def _tree(src: str) -> "ast.Module | None":
    try:
        return ast.parse(_code(src))
    except SyntaxError:
        return None


def _definitions_only(tree: ast.Module) -> bool:
    return all(isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Expr))
               and not (isinstance(n, ast.Expr) and not isinstance(n.value, ast.Constant)) for n in tree.body)


def _names_used(tree: ast.Module) -> set:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}


def _called(tree: ast.Module) -> set:
    return {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}


def measuring_cells(cells) -> list:
    """[(cell id, source, measures memory)] of the hand cells that measure, from (source, tags, id) triples:
    a cell that uses a measuring primitive, or calls a function defined in the notebook that does (followed
    through helpers that call such functions)."""
    trees = [(_tree(src), src, tags, cid) for src, tags, cid in cells]
    measuring_fns: dict = {}  # name -> measures memory
    changed = True
    while changed:
        changed = False
        for tree, src, _, _ in trees:
            if tree is None:
                continue
            for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
                body = ast.get_source_segment(_code(src), fn) or ""
                calls = {n.func.id for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
                memory = bool(MEMORY.search(body)) or any(measuring_fns.get(c) for c in calls)
                if (PRIMITIVES.search(body) or calls & set(measuring_fns)) and measuring_fns.get(fn.name) != memory:
                    if fn.name not in measuring_fns or memory:
                        measuring_fns[fn.name] = memory
                        changed = True
    found = []
    for tree, src, tags, cid in trees:
        if tree is None or set(tags) & NOT_HAND or _definitions_only(tree):
            continue
        calls = _called(tree) & set(measuring_fns)
        if PRIMITIVES.search(src) or calls:
            found.append((cid, src, bool(MEMORY.search(src)) or any(measuring_fns[c] for c in calls)))
    return found


def follows_device(src: str) -> bool:
    tree = _tree(src)
    return bool(STAYS.search(src)) or (tree is not None and "device" in _names_used(tree))


def _cells(stem: str) -> list:
    nb = nbformat.read(str(NB_DIR / f"{stem}.ipynb"), as_version=4)
    return [(c.source, c.metadata.get("tags", []), c.get("id")) for c in nb.cells if c.cell_type == "code"]


@pytest.mark.parametrize("stem", LESSONS)
def test_every_measuring_hand_cell_follows_device_or_says_why_not(stem):
    cells = _cells(stem)
    bad = [cid for cid, src, _ in measuring_cells(cells) if not follows_device(src)]
    assert not bad, (f"{stem}: measuring hand cells {bad} neither use `device` nor say "
                     f"'# stays on the CPU: <reason>'")


@pytest.mark.parametrize("stem", LESSONS)
def test_hand_memory_measurements_read_allocated_and_reserved_on_cuda(stem):
    cells = _cells(stem)
    memory = [cid for cid, src, mem in measuring_cells(cells) if mem and not STAYS.search(src)]
    if not memory:
        pytest.skip(f"{stem} measures no memory by hand on `device`")
    text = "\n".join(src for src, _, _ in cells)
    assert "max_memory_allocated()" in text and "max_memory_reserved()" in text, \
        f"{stem}: cells {memory} measure memory by hand, but no cell reads the CUDA allocator's peaks"


def test_the_rule_sees_what_it_should():
    helper = ("def saved(fn):\n    with torch.autograd.graph.saved_tensors_hooks(p, u):\n        return fn()", [], "h")
    cells = [
        helper,
        ("x = torch.randn(3)\nsaved(lambda: x * 2)", [], "cpu-call"),                    # calls the helper: measures
        ("x = torch.randn(3, device=device)\nsaved(lambda: x * 2)", [], "dev-call"),
        ("# stays on the CPU: a thread demo\nt = benchmark.Timer('f()').timeit(1)", [], "stays"),
        ("t = benchmark.Timer('f()').timeit(1)  # device is not named in code", [], "comment-only"),
        ("def wrap():\n    return saved(lambda: 1)", [], "wrapper-def"),               # definitions only
        ("wrap()", [], "wrapper-call"),                                                # measures through wrap
        ("answer = saved(lambda: 1)", ["exercise"], "learner"),                        # the learner's cell
        ("%%modes grad no_grad\nprint(1)", [], "magic"),
        ("y = torch.ones(2) * 2", [], "plain"),
    ]
    found = {cid: mem for cid, _, mem in measuring_cells(cells)}
    assert set(found) == {"cpu-call", "dev-call", "stays", "comment-only", "wrapper-call"}
    assert found["cpu-call"] and not found["stays"]
    verdicts = {cid: follows_device(src) for src, _, cid in cells if cid in found}
    assert verdicts == {"cpu-call": False, "dev-call": True, "stays": True, "comment-only": False,
                        "wrapper-call": False}
