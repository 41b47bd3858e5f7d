"""Lessons 05-09 as a learner meets them: plain PyTorch in front, exercises from the bank (a
code exercise and a predict-then-run in each, solutions hidden and silent), a concept diagram drawn by
each notebook's own code, headings in words with the claim ids in small print. Checked on the stored
.ipynb files; the diagrams are drawn once each (execution itself is tested in test_notebooks.py)."""
from __future__ import annotations

import re
import warnings
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn as nn

from nogradlab import claims, diagrams, exercises
from nogradlab.plots import Figure

NB_DIR = Path(__file__).resolve().parents[2] / "notebooks"
STEMS = [s for s in claims.NOTEBOOKS if s[:2] in ("05", "06", "07", "08", "09")]
EXERCISE_TAGS = {"exercise", "exercise-check", "solution"}
CHECK = re.compile(r"""exercises\.check\(\s*["'](\d\d\.\d)["']""")


def _nb(stem):
    return nbformat.read(str(NB_DIR / f"{stem}.ipynb"), as_version=4)


def _package_names(nb) -> set:
    """Names a notebook binds from nogradlab (`from nogradlab import a, b`, `from nogradlab.x import y`)."""
    names = set()
    for c in nb.cells:
        if c.cell_type == "code":
            for m in re.finditer(r"^\s*from\s+nogradlab(?:\.\w+)*\s+import\s+([\w, ]+)", c.source, re.M):
                names |= {n.strip().split(" as ")[-1] for n in m.group(1).split(",") if n.strip()}
    return names


def cell_counts(nb) -> tuple:
    """(plain PyTorch code cells, cells calling nogradlab): exercise cells and the parameters cell left
    out; a cell calls nogradlab when it names the package, a name imported from it, or one of its
    magics."""
    names = _package_names(nb)
    pat = re.compile(r"nogradlab|%%memory|%%modes" + "".join(rf"|\b{re.escape(n)}\b" for n in sorted(names)))
    plain = pkg = 0
    for c in nb.cells:
        tags = set(c.metadata.get("tags", []))
        if c.cell_type != "code" or "parameters" in tags or tags & EXERCISE_TAGS or "exercises." in c.source:
            continue
        if pat.search(c.source):
            pkg += 1
        else:
            plain += 1
    return plain, pkg


def test_cell_counts_sees_what_it_should():
    code = nbformat.v4.new_code_cell
    nb = nbformat.v4.new_notebook(cells=[
        code("from nogradlab import claims, plots"), code("r = claims.check('C18')"), code("%%memory\nmodel(x)"),
        code("model = nn.Linear(2, 2)"), code("print(torch.ones(1))"), code("exercises.check('05.1', answer_1)"),
    ])
    assert cell_counts(nb) == (2, 3)


@pytest.mark.parametrize("stem", STEMS)
def test_plain_pytorch_outnumbers_package_cells(stem):
    plain, pkg = cell_counts(_nb(stem))
    assert plain > pkg, f"{stem}: {plain} plain-PyTorch code cells, {pkg} calling nogradlab"


@pytest.mark.parametrize("stem", STEMS)
def test_exercises_come_from_the_bank_with_a_code_and_a_prediction(stem):
    nb = _nb(stem)
    ids = [m for c in nb.cells if c.cell_type == "code" for m in CHECK.findall(c.source)]
    assert 2 <= len(ids) <= 3 and all(i.startswith(stem[:2] + ".") for i in ids), (stem, ids)
    kinds = {exercises.get(i).kind for i in ids}
    assert {"code", "predict"} <= kinds, f"{stem}: exercise kinds {kinds}"
    solutions = [c for c in nb.cells if "solution" in c.metadata.get("tags", [])]
    assert len(solutions) == len(ids)
    for c, i in zip(solutions, ids):
        assert c.metadata.get("jupyter", {}).get("source_hidden") is True
        assert re.fullmatch(rf"""exercises\.solution\(["']{re.escape(i)}["']\)(\s*#.*)?""", c.source.strip()), c.source
    for c in nb.cells:
        if "exercise" in c.metadata.get("tags", []):  # the learner's cell gives nothing away
            assert re.search(r"^answer_\d\s*=\s*\.\.\.", c.source, re.M), c.source
            assert "e.g." not in c.source and "solution" not in c.source, c.source
    prompts = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown" and "### Exercise" in c.source)
    for i in ids:
        assert f'exercises.show("{i}")' in prompts, f"{stem}: the prompt of {i} says how to see a solution"


@pytest.mark.parametrize("stem", STEMS)
def test_a_diagram_drawn_by_the_notebook(stem):
    src = "\n".join(c.source for c in _nb(stem).cells if c.cell_type == "code")
    assert re.search(r"\bdiagrams\.\w+\(", src), f"{stem} draws no concept diagram"


@pytest.mark.parametrize("stem", STEMS)
def test_claim_headings_are_words_with_ids_in_small_print(stem):
    for c in _nb(stem).cells:
        first = c.source.lstrip().split("\n", 1)[0] if c.cell_type == "markdown" else ""
        if first.startswith("## ") and re.search(r"\b[CX]\d\d\b", first):
            assert not re.match(r"## [CX]\d\d", first), first
            assert re.search(r"<small>\(([CX]\d\d(, )?)+\)</small>$", first), first


def test_a_coroutine_for_the_handler_exercise_is_a_message(capsys):
    import asyncio

    @torch.no_grad()
    async def handle_request(x):
        await asyncio.sleep(0)
        return x

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a "never awaited" warning would fail here
        assert exercises.check("07.1", handle_request(torch.ones(1))) is False
    out = capsys.readouterr()
    assert "coroutine" in out.out and "Traceback" not in out.out + out.err


def test_the_diagrams_draw():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    x = torch.randn(8, 16)
    loss = mlp(x.requires_grad_()).pow(2).sum()
    figs = [diagrams.where_memory_goes(mlp, x.detach()), diagrams.autocast_grid(nn.Linear(8, 4), torch.randn(2, 8)),
            diagrams.request_timeline([("A", 0, 0.02, "no_grad"), ("B", 0.01, 0, None)]),
            diagrams.named_graph(loss, names={p: n for n, p in mlp.named_parameters()}),
            diagrams.named_graph(loss.detach()), diagrams.inference_rules()]
    assert all(isinstance(f, Figure) for f in figs)
