"""The package's steps stay open to the learner: a notebook loads the `%load_ext nogradlab` magics only where it uses
one, imports only the package's public modules (no `nogradlab.claims.<internal>`), and an exercise check prints its
feedback without echoing the True/False it returns (the call ends with `;`)."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from nogradlab import claims

NB_DIR = Path(__file__).resolve().parents[2] / "notebooks"
ALL = ["00_index"] + list(claims.NOTEBOOKS) + ["10_your_model"]
MAGIC_USE = re.compile(r"^%%?(?:memory|modes)\b", re.M)
INTERNAL = re.compile(r"\bfrom\s+nogradlab\.claims\.\w+\s+import|\bnogradlab\.claims\.\w+\.|\bclaims\.(?:measure|searches|judges?|_\w+)\.")
CHECK_LINE = re.compile(r"^exercises\.check\(.*\)\s*;?\s*$", re.M)


def _code(stem: str) -> list:
    nb = nbformat.read(str(NB_DIR / f"{stem}.ipynb"), as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "code"]


def load_ext_problems(cells: list) -> list:
    loads = any("%load_ext nogradlab" in src for src in cells)
    uses = any(MAGIC_USE.search(src) for src in cells)
    if loads and not uses:
        return ["loads the nogradlab magics but uses none"]
    if uses and not loads:
        return ["uses a nogradlab magic without %load_ext nogradlab"]
    return []


@pytest.mark.parametrize("stem", ALL)
def test_load_ext_only_where_a_magic_is_used(stem):
    assert not load_ext_problems(_code(stem)), f"{stem}: {load_ext_problems(_code(stem))}"


@pytest.mark.parametrize("stem", ALL)
def test_notebooks_import_only_the_public_api(stem):
    bad = [src.split("\n")[0] for src in _code(stem) if INTERNAL.search(src)]
    assert not bad, f"{stem}: cells reach into nogradlab.claims' internals: {bad}"


@pytest.mark.parametrize("stem", ALL)
def test_exercise_checks_do_not_echo_true_or_false(stem):
    echoing = [m.group(0) for src in _code(stem) for m in CHECK_LINE.finditer(src) if not m.group(0).rstrip().endswith(";")]
    assert not echoing, f"{stem}: end these with ';' so the cell shows the feedback, not True/False: {echoing}"


def test_the_rules_see_what_they_should():
    assert load_ext_problems(["%load_ext nogradlab", "x = 1"]) == ["loads the nogradlab magics but uses none"]
    assert load_ext_problems(["%load_ext nogradlab", "%%modes grad no_grad\nf()"]) == []
    assert load_ext_problems(["%%memory\nf()"]) == ["uses a nogradlab magic without %load_ext nogradlab"]
    assert INTERNAL.search("from nogradlab.claims.measure import estimate_sweep")
    assert INTERNAL.search("rows = claims.measure.estimate_sweep('mlp', [1])")
    assert not INTERNAL.search("from nogradlab import claims, memory\nr = claims.check('C01')")
    assert CHECK_LINE.search('exercises.check("01.1", answer_1)')


def test_the_modes_table_is_found_by_running_each_way():
    from nogradlab import diagrams

    rows = {}
    for line in diagrams.modes_table().data.split("\n")[2:]:
        label, *cells = [c.strip() for c in line.strip("|").split("|")]
        rows[re.sub(r"^\[(.*)\]\(.*\)$", r"\1", label)] = [re.sub(r"^\[(.*)\]\(.*\)$", r"\1", c) for c in cells]
    # columns: grad on, requires_grad_(False), no_grad(), inference_mode(), model.eval()
    assert rows["records a graph (`grad_fn`)"] == ["yes", "no", "no", "no", "yes"]
    assert rows["saves tensors for backward"] == ["yes", "no", "no", "no", "yes"]
    assert rows["what it makes has a version counter (bumped in place)"] == ["yes", "yes", "yes", "no", "yes"]
    assert rows["tracks views of what it makes"] == ["yes", "yes", "yes", "no", "yes"]
    assert rows["forward-mode AD"] == ["yes", "yes", "yes", "no", "yes"]  # the inference_mode docs' note
    assert rows["its results usable in training later"][3].startswith("no")
    assert rows["changes layers (Dropout, BatchNorm)"] == ["no", "no", "no", "no", "yes"]
    assert rows["a thread started inside sees it"] == ["", "yes", "no", "no", "yes"]
