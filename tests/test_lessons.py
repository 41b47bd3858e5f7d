"""The notebooks are lessons: the structure every notebook shares, checked on the stored .ipynb files.

Each notebook 01-09 opens with learning goals and prerequisites; teaches each of its claims as
"The article says / See it (plain PyTorch) / Measure it (claims.check) / In your code"; and ends with
a Summary, an "In your code" recipe, two or three exercises (answer cell, check cell, collapsed
solution cell that the papermill tests run) and references to the PyTorch documentation. Every
notebook 00-09 starts with the same first code cell and carries Colab/Binder badges for the
repository named in pyproject.toml. (Execution itself is tested in test_notebooks.py.)
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat
import pytest

from nogradlab import claims

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

REPO = Path(__file__).resolve().parents[1]
NB_DIR = REPO / "notebooks"
LESSONS = list(claims.NOTEBOOKS)  # 01 .. 09
ALL = ["00_index"] + LESSONS
REPOSITORY = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["urls"]["Repository"]

CHECK_RE = re.compile(r"""claims\.check\(\s*["']([CX]\d\d)["']""")
END_SECTIONS = ["## Summary", "## In your code", "## Exercises", "## References"]
LEAD_INS = ("**The article says.**", "**See it.**", "**Measure it.**", "**In your code.**")
DOCS = re.compile(r"https://pytorch\.org/docs/[^\s)\]>\"']+")


def _nb(stem: str):
    return nbformat.read(str(NB_DIR / f"{stem}.ipynb"), as_version=4)


def _tags(cell) -> list:
    return list(cell.get("metadata", {}).get("tags", []))


def _h2(cell) -> "str | None":
    """The `## ` heading a markdown cell opens with, if any."""
    if cell.cell_type != "markdown":
        return None
    first = cell.source.lstrip().split("\n", 1)[0].strip()
    return first if first.startswith("## ") else None


def _sections(nb) -> list:
    """[(heading, start index, end index)] for each `## ` heading; a section runs to the next one."""
    starts = [(i, _h2(c)) for i, c in enumerate(nb.cells) if _h2(c)]
    return [(h, i, starts[k + 1][0] if k + 1 < len(starts) else len(nb.cells)) for k, (i, h) in enumerate(starts)]


def _section(nb, heading: str):
    found = [(s, e) for h, s, e in _sections(nb) if h == heading or h.startswith(heading + ":")]
    assert len(found) == 1, f"expected one '{heading}' section, found {len(found)}"
    return found[0]


def _uses_torch_plainly(cell) -> bool:
    src = cell.source
    return cell.cell_type == "code" and bool(re.search(r"\btorch\.\w", src)) and "claims" not in src


# --------------------------------------------------------------------------------------------
# all notebooks: the shared first cell, badges, repository URL


def _first_code(nb) -> str:
    return next(c.source for c in nb.cells if c.cell_type == "code")


def test_first_code_cell_is_shared_and_names_the_repository():
    firsts = {stem: _first_code(_nb(stem)) for stem in ALL}
    assert len(set(firsts.values())) == 1, "every notebook must start with the same first code cell: " + \
        ", ".join(s for s, src in firsts.items() if src != firsts["01_what_no_grad_does"])
    src = firsts["00_index"]
    assert f"git+{REPOSITORY}'" in src, f"the first cell's %pip install line must use {REPOSITORY}"
    other = set(re.findall(r"https?://[^\s'\"]+", src)) - {REPOSITORY}
    assert not other, f"the first cell names other URLs: {other}"


def expected_badges(stem: str, repository: str = REPOSITORY) -> str:
    m = re.fullmatch(r"https://github\.com/([^/]+)/([^/]+?)/?", repository)
    assert m, f"[project.urls].Repository must be a GitHub URL, got {repository}"
    slug = f"{m.group(1)}/{m.group(2)}"
    return (f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
            f"(https://colab.research.google.com/github/{slug}/blob/main/notebooks/{stem}.ipynb) "
            f"[![Binder](https://mybinder.org/badge_logo.svg)]"
            f"(https://mybinder.org/v2/gh/{slug}/HEAD?urlpath=lab/tree/notebooks/{stem}.ipynb)")


@pytest.mark.parametrize("stem", ALL)
def test_title_cell_has_title_then_badges(stem):
    title = _nb(stem).cells[0]
    lines = title.source.split("\n")
    assert title.cell_type == "markdown" and lines[0].startswith("# "), f"{stem}: the first cell is the title"
    assert len(lines) > 1 and lines[1] == expected_badges(stem), \
        f"{stem}: the title's second line must be the Colab/Binder badge line for {REPOSITORY}"


def test_badges_follow_the_repository():
    line = expected_badges("01_x", "https://github.com/someone/fork")
    assert "github/someone/fork/blob/main/notebooks/01_x.ipynb" in line and "gh/someone/fork/HEAD" in line
    with pytest.raises(AssertionError):
        expected_badges("01_x", "https://gitlab.com/a/b")


def test_index_links_every_lesson():
    text = "\n".join(c.source for c in _nb("00_index").cells if c.cell_type == "markdown")
    missing = [s for s in LESSONS if f"({s}.ipynb)" not in text]
    assert not missing, f"00_index does not link {missing}"


# --------------------------------------------------------------------------------------------
# lessons 01-09: opening, closing parts


@pytest.mark.parametrize("stem", LESSONS)
def test_learning_goals_and_prerequisites(stem):
    nb = _nb(stem)
    start, end = _section(nb, "## Learning goals")
    text = "\n".join(c.source for c in nb.cells[start:end] if c.cell_type == "markdown")
    goals = [ln for ln in text.split("\n") if re.match(r"\s*[-*] ", ln)]
    assert 2 <= len(goals) <= 4, f"{stem}: {len(goals)} learning goals; write 2-4 bullets"
    assert re.search(r"^\*\*Prerequisites:\*\*", text, re.M), f"{stem}: a line starting **Prerequisites:**"
    first_check = min(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and CHECK_RE.search(c.source))
    assert start < first_check, f"{stem}: learning goals must come before the first claim"


@pytest.mark.parametrize("stem", LESSONS)
def test_ends_with_summary_recipe_exercises_references(stem):
    nb = _nb(stem)
    heads = [h for h, _, _ in _sections(nb)]
    tail = [h.split(":")[0] for h in heads[-len(END_SECTIONS):]]
    assert tail == END_SECTIONS, f"{stem}: the last sections must be {END_SECTIONS}, found {tail}"
    s, e = _section(nb, "## Summary")
    assert any(re.search(r"^\s*[-*] ", c.source, re.M) for c in nb.cells[s:e] if c.cell_type == "markdown"), \
        f"{stem}: the Summary is a list of bullets"
    s, e = _section(nb, "## In your code")
    recipe = [c for c in nb.cells[s:e] if c.cell_type == "code"]
    assert recipe and any(re.search(r"\btorch\.", c.source) for c in recipe), \
        f"{stem}: 'In your code' needs a runnable code cell with the recipe"
    s, e = _section(nb, "## References")
    links = {u for c in nb.cells[s:e] for u in DOCS.findall(c.source)}
    assert len(links) >= 2, f"{stem}: References link {len(links)} PyTorch documentation page(s); need >= 2"


def exercise_problems(nb) -> list:
    """What is wrong with a notebook's `## Exercises` section ([] when nothing)."""
    s, e = _section(nb, "## Exercises")
    cells = nb.cells[s:e]
    starts = [i for i, c in enumerate(cells) if c.cell_type == "markdown"
              and re.match(r"### Exercise \d+: \S", c.source.lstrip())]
    problems = [] if 2 <= len(starts) <= 3 else [f"{len(starts)} '### Exercise N: title' sub-sections; need 2-3"]
    for k, i in enumerate(starts):
        n = re.match(r"### Exercise (\d+)", cells[i].source.lstrip()).group(1)
        sub = cells[i + 1: starts[k + 1] if k + 1 < len(starts) else len(cells)]
        kinds = [next((t for t in ("exercise", "exercise-check", "solution") if t in _tags(c)), None) for c in sub]
        if kinds.count("exercise") != 1 or kinds.count("exercise-check") != 1 or kinds.count("solution") != 1:
            problems.append(f"exercise {n}: needs one cell each tagged exercise, exercise-check, solution; "
                            f"found {kinds}")
            continue
        ans, chk, sol = (sub[kinds.index(t)] for t in ("exercise", "exercise-check", "solution"))
        if not kinds.index("exercise") < kinds.index("exercise-check") < kinds.index("solution"):
            problems.append(f"exercise {n}: order must be exercise, exercise-check, solution")
        if not re.search(rf"^answer_{n}\s*=\s*\.\.\.", ans.source, re.M):
            problems.append(f"exercise {n}: the exercise cell must start the answer as `answer_{n} = ...`")
        if not re.search(rf"def test_{n}\(", chk.source) or \
                not re.search(rf"""exercises\.check\(\s*["']{n}["']\s*,\s*answer_{n}\s*,\s*test_{n}""", chk.source):
            problems.append(f"exercise {n}: the check cell defines test_{n} and calls "
                            f"exercises.check('{n}', answer_{n}, test_{n}, hint=...)")
        if sol.get("metadata", {}).get("jupyter", {}).get("source_hidden") is not True:
            problems.append(f"exercise {n}: the solution cell must be collapsed (jupyter.source_hidden true)")
        if not sol.source.startswith("# Solution (click to expand)") or not re.search(
                rf"""exercises\.check\(\s*["']{n}["']\s*,\s*solution_{n}\s*,\s*test_{n}\s*,\s*strict=True""",
                sol.source):
            problems.append(f"exercise {n}: the solution starts '# Solution (click to expand)' and calls "
                            f"exercises.check('{n}', solution_{n}, test_{n}, strict=True)")
    return problems


@pytest.mark.parametrize("stem", LESSONS)
def test_exercises_have_answer_check_and_collapsed_solution(stem):
    problems = exercise_problems(_nb(stem))
    assert not problems, f"{stem}:\n" + "\n".join(problems)


def _exercise_nb(solution_meta=None, solution_src="# Solution (click to expand)\nsolution_1 = 2\n"
                 "exercises.check('1', solution_1, test_1, strict=True)"):
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    cells = [md("## Exercises")]
    for n in (1, 2):
        a, c = code(f"answer_{n} = ..."), code(f"def test_{n}(a):\n    return a == 2\n"
                                               f"exercises.check('{n}', answer_{n}, test_{n}, hint='2')")
        s = code(solution_src.replace("_1", f"_{n}").replace("'1'", f"'{n}'"))
        a.metadata["tags"], c.metadata["tags"], s.metadata["tags"] = ["exercise"], ["exercise-check"], ["solution"]
        s.metadata["jupyter"] = {"source_hidden": True} if solution_meta is None else solution_meta
        cells += [md(f"### Exercise {n}: two"), a, c, s]
    return nbformat.v4.new_notebook(cells=cells + [md("## References")])


def test_exercise_problems_catches_what_it_should():
    assert exercise_problems(_exercise_nb()) == []
    assert any("collapsed" in p for p in exercise_problems(_exercise_nb(solution_meta={})))
    assert any("strict=True" in p for p in exercise_problems(_exercise_nb(
        solution_src="# Solution (click to expand)\nsolution_1 = 2")))


# --------------------------------------------------------------------------------------------
# lessons 01-09: each claim taught before it is measured


def claim_problems(nb, claim_ids) -> list:
    """For each claim: a `## ` section naming it; in it, before the check, the article's words and a plain-
    PyTorch code cell (torch used directly, nogradlab.claims not called) placed after the previous claim's
    check; the four lead-ins in order; the check itself."""
    problems = []
    checks = {}
    for i, c in enumerate(nb.cells):
        if c.cell_type == "code":
            for cid in CHECK_RE.findall(c.source):
                checks.setdefault(cid, i)
    sections = _sections(nb)
    for cid in claim_ids:
        if cid not in checks:
            problems.append(f"{cid}: no claims.check('{cid}', ...) cell")
            continue
        at = checks[cid]
        sec = [(h, s, e) for h, s, e in sections if s < at < e]
        if not sec or not re.search(rf"\b{cid}\b", sec[0][0].split(":")[0]):
            problems.append(f"{cid}: its check must sit in a section headed '## {cid}: ...' (or '## ..., {cid}: ...')")
            continue
        _, s, e = sec[0]
        before = [checks[o] for o in checks if s < checks[o] < at]
        # this claim's own part: after the previous claim's check in the section, else the whole section so far
        lo = max(before) + 1 if before else s
        own = nb.cells[lo:at]
        if not any(_uses_torch_plainly(c) for c in own):
            problems.append(f"{cid}: no plain-PyTorch code cell (uses torch., does not call claims) between "
                            f"cell {lo} and its check (cell {at})")
        md_before = "\n".join(c.source for c in nb.cells[s:at] if c.cell_type == "markdown")
        md_own = "\n".join(c.source for c in own if c.cell_type == "markdown")
        md_after = "\n".join(c.source for c in nb.cells[at + 1:e] if c.cell_type == "markdown")
        if LEAD_INS[0] not in md_before:
            problems.append(f"{cid}: '{LEAD_INS[0]}' missing before the check")
        for lead in LEAD_INS[1:3]:
            if lead not in md_own:
                problems.append(f"{cid}: '{lead}' missing between the previous check and this one")
        if LEAD_INS[1] in md_own and LEAD_INS[2] in md_own and md_own.index(LEAD_INS[1]) > md_own.index(LEAD_INS[2]):
            problems.append(f"{cid}: '{LEAD_INS[1]}' must come before '{LEAD_INS[2]}'")
        if LEAD_INS[3] not in md_after:
            problems.append(f"{cid}: '{LEAD_INS[3]}' missing after the check, in its section")
    return problems


@pytest.mark.parametrize("stem", LESSONS)
def test_each_claim_is_taught_then_measured(stem):
    problems = claim_problems(_nb(stem), claims.NOTEBOOKS[stem])
    assert not problems, f"{stem}:\n" + "\n".join(problems)


def test_claim_problems_needs_a_plain_torch_cell_per_claim():
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell

    def article():
        return md(LEAD_INS[0])

    def see():
        return md(LEAD_INS[1])

    def measure():
        return md(LEAD_INS[2])

    def yours():
        return md(LEAD_INS[3])

    def nb(*cells):
        return nbformat.v4.new_notebook(cells=[md("# t"), *cells, md("## Summary")])

    good = nb(md("## C01, C02: two claims"), article(), see(), code("y = torch.ones(2) * 3\nprint(y.grad_fn)"),
              measure(), code("claims.check('C01', device=device)"), see(), code("print(torch.is_grad_enabled())"),
              measure(), code("claims.check('C02', device=device)"), yours())
    assert claim_problems(good, ["C01", "C02"]) == []
    # C02's only torch cell sits before C01's check: C02 is not taught in its own part
    shared = nb(md("## C01, C02: two claims"), article(), see(), code("y = torch.ones(2) * 3"), measure(),
                code("claims.check('C01', device=device)"), see(), measure(),
                code("claims.check('C02', device=device)"), yours())
    assert any(p.startswith("C02: no plain-PyTorch") for p in claim_problems(shared, ["C01", "C02"]))
    # a cell that calls claims does not count as plain PyTorch
    via_claims = nb(md("## C01: one"), article(), see(), code("r = claims.get('C01'); torch.ones(1)"), measure(),
                    code("claims.check('C01', device=device)"), yours())
    assert any("no plain-PyTorch" in p for p in claim_problems(via_claims, ["C01"]))
    assert any("section headed" in p for p in claim_problems(
        nb(md("## Something"), code("torch.ones(1)"), code("claims.check('C01')")), ["C01"]))


# --------------------------------------------------------------------------------------------
# no test scaffolding in front of the learner

VERDICT_ASSERT = re.compile(r"^\s*assert\b.*\.(verdict|evidence)\b", re.M)


def verdict_asserts(nb) -> list:
    """(cell index, line) of every `assert` on a check's verdict or evidence in a code cell, exercise
    checks (cells that call exercises.check) left out. A learner on another PyTorch release must see
    the verdict, not an AssertionError; the lessons' expected verdicts live in
    tests/test_lesson_verdicts.py."""
    return [(i, m.group(0).strip()) for i, c in enumerate(nb.cells)
            if c.cell_type == "code" and "exercises.check" not in c.source
            for m in VERDICT_ASSERT.finditer(c.source)]


@pytest.mark.parametrize("stem", ALL)
def test_no_verdict_asserts_in_notebooks(stem):
    found = verdict_asserts(_nb(stem))
    assert not found, f"{stem}: cells assert a check's result: {found}. Show the result (`r_cXX`) and move " \
        "the expectation to tests/test_lesson_verdicts.py"


def test_verdict_asserts_sees_what_it_should():
    code = nbformat.v4.new_code_cell
    nb = nbformat.v4.new_notebook(cells=[
        code('r = claims.check("C22", device=device, scale=scale, seed=seed)\nassert r.verdict == "holds"\nr'),
        code("assert r_c06.verdict in claims.VERDICTS"),
        code("assert r.evidence['x'] > 0"),
        code("assert x == 1\nprint(r.verdict)"),
        code("assert ok.verdict\nexercises.check('1', answer_1, test_1)"),
    ])
    assert [i for i, _ in verdict_asserts(nb)] == [0, 1, 2]


# --------------------------------------------------------------------------------------------
# finding the way: the time a notebook takes, and the next one

TIME_RE = re.compile(r"^Time: about (\d+) s on a 2-core CPU \(tiny scale\)\.?$", re.M)


def _header_seconds(stem: str) -> "int | None":
    m = TIME_RE.search(_nb(stem).cells[0].source)
    return int(m.group(1)) if m else None


@pytest.mark.parametrize("stem", ALL)
def test_header_says_how_long_it_takes(stem):
    stated = _header_seconds(stem)  # the text a learner reads, not a measured time
    assert stated is not None, f"{stem}: the title cell needs a line 'Time: about N s on a 2-core CPU (tiny scale)'"
    assert stated > 0 and stated % 5 == 0, f"{stem}: round the time up to 5 s, got {stated}"


def test_index_lists_the_same_times():
    text = "\n".join(c.source for c in _nb("00_index").cells if c.cell_type == "markdown")
    listed = dict(re.findall(r"^\|[^|]*\| \[[^\]]+\]\(([0-9]{2}_\w+)\.ipynb\).*\| about (\d+) s \|$", text, re.M))
    assert {s: int(v) for s, v in listed.items()} == {s: _header_seconds(s) for s in LESSONS}


@pytest.mark.parametrize("stem", ALL)
def test_ends_with_a_link_to_the_next_notebook(stem):
    nxt = ALL[(ALL.index(stem) + 1) % len(ALL)]
    last = _nb(stem).cells[-1]
    assert last.cell_type == "markdown" and re.search(rf"\]\({nxt}\.ipynb\)", last.source), \
        f"{stem}: the last cell must be a markdown line linking {nxt}.ipynb"
