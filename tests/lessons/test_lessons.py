"""The notebooks are lessons: the structure every notebook shares, checked on the stored .ipynb files.

Each notebook 01-09 opens with learning goals and prerequisites; teaches each of its claims as
"The article says / See it (plain PyTorch) / Measure it (claims.check) / In your code"; and ends with
a Summary, an "In your code" recipe, two or three exercises from the bank in nogradlab/lab/exercises
(answer cell, check cell, collapsed solution cell that the papermill tests run; at least one "code"
and one "predict" exercise per notebook) and references to the PyTorch documentation. Plain-PyTorch
code cells outnumber the cells that call nogradlab, and every lesson draws at least one concept
diagram. Every notebook 00-09 starts with the same short setup cell, carries Colab/Binder badges for
the repository named in pyproject.toml, and has nothing but the title, that cell and the parameters
before its goals. Headings are words; claim ids sit in small print after them. Glossary links point
at anchors in 00_index. (Execution itself is tested in test_notebooks.py.)
"""
from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import nbformat
import pytest

from nogradlab import claims, exercises

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

REPO = Path(__file__).resolve().parents[2]
NB_DIR = REPO / "notebooks"
LESSONS = list(claims.NOTEBOOKS)  # 01 .. 09
#: lessons beyond the article's claims (listed in the index, linked in order, no claim of their own)
BEYOND = ["10_your_model"]
ALL = ["00_index"] + LESSONS + BEYOND
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


EX_CHECK_RE = re.compile(r"""^exercises\.check\(\s*["'](\d\d\.\d+)["']\s*,\s*answer_(\d+)\s*\);?\s*$""", re.M)
EX_SOLUTION_RE = re.compile(r"""^\s*exercises\.solution\(\s*["'](\d\d\.\d+)["']\s*\)\s*;?\s*$""")


def _code_lines(src: str) -> str:
    """The source without comment lines, blank lines and `from nogradlab import exercises`."""
    return "\n".join(ln for ln in src.split("\n") if ln.strip() and not ln.lstrip().startswith("#")
                     and ln.strip() != "from nogradlab import exercises")


def exercise_problems(nb, prefix: str) -> list:
    """What is wrong with a notebook's `## Exercises` section ([] when nothing). Each `### Exercise N: title`
    sub-section holds, in order, the learner's cell (tag `exercise`, `answer_N = ...`), the check (tag
    `exercise-check`, only `exercises.check("NN.k", answer_N)`), optional cells to run after predicting
    (tag `exercise-run`) and the collapsed solution (tag `solution`, only `exercises.solution("NN.k")`).
    Every exercise is declared in the bank under this notebook's prefix, and every declared one is used."""
    s, e = _section(nb, "## Exercises")
    cells = nb.cells[s:e]
    starts = [i for i, c in enumerate(cells) if c.cell_type == "markdown"
              and re.match(r"### Exercise \d+: \S", c.source.lstrip())]
    problems = [] if 2 <= len(starts) <= 3 else [f"{len(starts)} '### Exercise N: title' sub-sections; need 2-3"]
    if "exercises.show(" not in cells[0].source:
        problems.append("the '## Exercises' cell must tell the learner about exercises.show(...)")
    used = []
    for k, i in enumerate(starts):
        n = re.match(r"### Exercise (\d+)", cells[i].source.lstrip()).group(1)
        sub = cells[i + 1: starts[k + 1] if k + 1 < len(starts) else len(cells)]
        kinds = [next((t for t in ("exercise", "exercise-check", "exercise-run", "solution") if t in _tags(c)), None)
                 for c in sub]
        if kinds.count("exercise") != 1 or kinds.count("exercise-check") != 1 or kinds.count("solution") != 1:
            problems.append(f"exercise {n}: needs one cell each tagged exercise, exercise-check, solution; "
                            f"found {kinds}")
            continue
        ans, chk, sol = (sub[kinds.index(t)] for t in ("exercise", "exercise-check", "solution"))
        if not kinds.index("exercise") < kinds.index("exercise-check") < kinds.index("solution"):
            problems.append(f"exercise {n}: order must be exercise, exercise-check, solution")
        if any(t == "exercise-run" and not kinds.index("exercise-check") < j < kinds.index("solution")
               for j, t in enumerate(kinds)):
            problems.append(f"exercise {n}: a cell to run after predicting sits between the check and the solution")
        if not re.search(rf"^answer_{n}\s*=\s*\.\.\.", ans.source, re.M):
            problems.append(f"exercise {n}: the exercise cell must start the answer as `answer_{n} = ...`")
        m = EX_CHECK_RE.search(_code_lines(chk.source))
        if not m or m.group(2) != n or _code_lines(chk.source).count("\n") > 0:
            problems.append(f"exercise {n}: the check cell holds only exercises.check('{prefix}.k', answer_{n})")
            continue
        eid = m.group(1)
        if not eid.startswith(prefix + "."):
            problems.append(f"exercise {n}: {eid} is not one of notebook {prefix}'s exercises")
        sm = EX_SOLUTION_RE.fullmatch(_code_lines(sol.source))
        if not sm or sm.group(1) != eid:
            problems.append(f"exercise {n}: the solution cell holds only exercises.solution('{eid}')")
        if sol.get("metadata", {}).get("jupyter", {}).get("source_hidden") is not True:
            problems.append(f"exercise {n}: the solution cell must be collapsed (jupyter.source_hidden true)")
        used.append(eid)
    declared = sorted(ex.id for ex in exercises.all_exercises() if ex.id.startswith(prefix + "."))
    if sorted(used) != declared:
        problems.append(f"the notebook uses exercises {sorted(used)}; the bank declares {declared} for {prefix}")
    kinds = {exercises.get(x).kind for x in used if x in declared}
    for kind in ("code", "predict"):
        if kind not in kinds:
            problems.append(f"no {kind!r} exercise (kinds used: {sorted(kinds)})")
    return problems


@pytest.mark.parametrize("stem", LESSONS)
def test_exercises_come_from_the_bank_with_code_and_predict(stem):
    problems = exercise_problems(_nb(stem), stem[:2])
    assert not problems, f"{stem}:\n" + "\n".join(problems)


def _exercise_nb(solution_meta=None, solution_src='exercises.solution("01.{n}")', check_src=None):
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    cells = [md("## Exercises\n\n`exercises.show(\"01.1\")` prints a solution.")]
    for n in (1, 2, 3):
        a = code(f"answer_{n} = ...")
        c = code(check_src.format(n=n) if check_src else f'exercises.check("01.{n}", answer_{n})')
        s = code(solution_src.format(n=n))
        a.metadata["tags"], c.metadata["tags"], s.metadata["tags"] = ["exercise"], ["exercise-check"], ["solution"]
        s.metadata["jupyter"] = {"source_hidden": True} if solution_meta is None else solution_meta
        cells += [md(f"### Exercise {n}: two"), a, c, s]
    return nbformat.v4.new_notebook(cells=cells + [md("## References")])


def test_exercise_problems_catches_what_it_should():
    assert exercise_problems(_exercise_nb(), "01") == []
    assert any("collapsed" in p for p in exercise_problems(_exercise_nb(solution_meta={}), "01"))
    assert any("only exercises.solution" in p for p in exercise_problems(_exercise_nb(
        solution_src='exercises.solution("01.{n}")\nprint("the answer")'), "01"))
    # the old form, a test written in the notebook
    assert any("only exercises.check" in p for p in exercise_problems(_exercise_nb(
        check_src='def test_{n}(a):\n    return a == 2\nexercises.check("{n}", answer_{n}, test_{n})'), "01"))
    assert any("bank declares" in p for p in exercise_problems(_exercise_nb(), "02"))


def test_every_lesson_has_code_and_predict_exercises_in_the_bank():
    kinds: dict = {}
    for ex in exercises.all_exercises():
        kinds.setdefault(ex.id[:2], set()).add(ex.kind)
    missing = {stem: sorted({"code", "predict"} - kinds.get(stem[:2], set())) for stem in LESSONS}
    missing = {k: v for k, v in missing.items() if v}
    assert not missing, f"exercise kinds missing in nogradlab/lab/exercises: {missing}"


# --------------------------------------------------------------------------------------------
# lessons 01-09: each claim taught before it is measured


SMALL_IDS = re.compile(r"<small>\(([CX]\d\d(?:, [CX]\d\d)*)\)</small>\s*$")


def _heading_ids(heading: str) -> list:
    """The claim ids a heading names in small print at its end: '## Words <small>(C01, C02)</small>'."""
    m = SMALL_IDS.search(heading)
    return m.group(1).split(", ") if m else []


def heading_problems(nb) -> list:
    """`## ` and `### ` headings that start with a claim id, or name one outside the small print."""
    out = []
    for c in nb.cells:
        if c.cell_type != "markdown":
            continue
        for ln in c.source.split("\n"):
            if re.match(r"#{2,3} ", ln):
                words = SMALL_IDS.sub("", ln)
                if re.search(r"\b[CX]\d\d\b", words):
                    out.append(ln)
    return out


@pytest.mark.parametrize("stem", LESSONS)
def test_headings_are_words_with_claim_ids_in_small_print(stem):
    bad = heading_problems(_nb(stem))
    assert not bad, f"{stem}: headings must be words, the claim ids in small print at the end: {bad}"


def claim_problems(nb, claim_ids) -> list:
    """For each claim: a `## ` section naming it in small print (`<small>(C01)</small>`); in it, before the check, the article's words and a plain-
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
        if not sec or cid not in _heading_ids(sec[0][0]):
            problems.append(f"{cid}: its check must sit in a section headed '## A question in words <small>({cid})</small>'")
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

    good = nb(md("## Two claims <small>(C01, C02)</small>"), article(), see(), code("y = torch.ones(2) * 3\nprint(y.grad_fn)"),
              measure(), code("claims.check('C01', device=device)"), see(), code("print(torch.is_grad_enabled())"),
              measure(), code("claims.check('C02', device=device)"), yours())
    assert claim_problems(good, ["C01", "C02"]) == []
    # C02's only torch cell sits before C01's check: C02 is not taught in its own part
    shared = nb(md("## Two claims <small>(C01, C02)</small>"), article(), see(), code("y = torch.ones(2) * 3"), measure(),
                code("claims.check('C01', device=device)"), see(), measure(),
                code("claims.check('C02', device=device)"), yours())
    assert any(p.startswith("C02: no plain-PyTorch") for p in claim_problems(shared, ["C01", "C02"]))
    # a cell that calls claims does not count as plain PyTorch
    via_claims = nb(md("## One <small>(C01)</small>"), article(), see(), code("r = claims.get('C01'); torch.ones(1)"), measure(),
                    code("claims.check('C01', device=device)"), yours())
    assert any("no plain-PyTorch" in p for p in claim_problems(via_claims, ["C01"]))
    assert any("section headed" in p for p in claim_problems(
        nb(md("## Something"), code("torch.ones(1)"), code("claims.check('C01')")), ["C01"]))
    assert any("section headed" in p for p in claim_problems(   # the id at the front: not the small print
        nb(md("## C01: something"), code("torch.ones(1)"), code("claims.check('C01')")), ["C01"]))
    assert heading_problems(nb(md("## C01: words"), md("## Words <small>(C01)</small>"))) == ["## C01: words"]


# --------------------------------------------------------------------------------------------
# no test scaffolding in front of the learner

VERDICT_ASSERT = re.compile(r"^\s*assert\b.*\.(verdict|evidence)\b", re.M)


def verdict_asserts(nb) -> list:
    """(cell index, line) of every `assert` on a check's verdict or evidence in a code cell, exercise
    checks (cells that call exercises.check) left out. A learner on another PyTorch release must see
    the verdict, not an AssertionError; the lessons' expected verdicts live in
    tests/claims/test_lesson_verdicts.py."""
    return [(i, m.group(0).strip()) for i, c in enumerate(nb.cells)
            if c.cell_type == "code" and "exercises.check" not in c.source
            for m in VERDICT_ASSERT.finditer(c.source)]


@pytest.mark.parametrize("stem", ALL)
def test_no_verdict_asserts_in_notebooks(stem):
    found = verdict_asserts(_nb(stem))
    assert not found, f"{stem}: cells assert a check's result: {found}. Show the result (`r_cXX`) and move " \
        "the expectation to tests/claims/test_lesson_verdicts.py"


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

TIME_RE = re.compile(r"^Time: about (\d+) s on a quiet 2-core CPU \(tiny scale\), up to about (\d+) s on a busy one\.",
                     re.M)
#: the stored session benchmark the headers' times come from (one papermill pass on a quiet machine)
SESSION = json.loads((REPO / "results" / "cpu-amd-epyc-2-threads" / "session.json").read_text())
#: a learner's read on a busy 2-core machine took 1.3 to 3.4 times the quiet figures (issue 40)
BUSY_FACTOR = 3.5


def _up5(seconds: float) -> int:
    return 5 * math.ceil(seconds / 5)


def _header_seconds(stem: str) -> "tuple | None":
    m = TIME_RE.search(_nb(stem).cells[0].source)
    return (int(m.group(1)), int(m.group(2))) if m else None


@pytest.mark.parametrize("stem", ALL)
def test_header_says_how_long_it_takes(stem):
    """A range, not one figure: the quiet machine's time from the stored session benchmark, rounded up to
    5 s, and 3.5 times that for a busy one."""
    stated = _header_seconds(stem)  # the text a learner reads
    assert stated is not None, f"{stem}: the title cell needs a line 'Time: about N s on a quiet 2-core CPU " \
        "(tiny scale), up to about M s on a busy one.'"
    measured = SESSION["papermill"]["notebooks"][stem]["seconds"]
    assert stated == (_up5(measured), _up5(BUSY_FACTOR * _up5(measured))), \
        f"{stem}: session.json has {measured} s: say about {_up5(measured)} s, up to about " \
        f"{_up5(BUSY_FACTOR * _up5(measured))} s; the header says {stated}"


def test_index_lists_the_same_times():
    text = "\n".join(c.source for c in _nb("00_index").cells if c.cell_type == "markdown")
    listed = re.findall(r"^\|[^|]*\| \[[^\]]+\]\(([0-9]{2}_\w+)\.ipynb\).*\| (\d+)-(\d+) s \|$", text, re.M)
    assert {s: (int(a), int(b)) for s, a, b in listed} == {s: _header_seconds(s) for s in LESSONS + BEYOND}


@pytest.mark.parametrize("stem", ALL)
def test_ends_with_a_link_to_the_next_notebook(stem):
    nxt = ALL[(ALL.index(stem) + 1) % len(ALL)]
    last = _nb(stem).cells[-1]
    assert last.cell_type == "markdown" and re.search(rf"\]\({nxt}\.ipynb\)", last.source), \
        f"{stem}: the last cell must be a markdown line linking {nxt}.ipynb"


# --------------------------------------------------------------------------------------------
# PyTorch in front: plain-PyTorch cells outnumber the cells that call nogradlab

IMPORT_RE = re.compile(r"^\s*from nogradlab(?:\.\w+)* import ([\w, ()]+)", re.M)
TORCH_RE = re.compile(r"\b(torch|torchvision|nn|F)\.\w")


def _package_names(nb) -> set:
    """The names a notebook imports from nogradlab (`from nogradlab import claims, plots` ...)."""
    names = set()
    for c in nb.cells:
        if c.cell_type == "code":
            for m in IMPORT_RE.finditer(c.source):
                names |= {n.strip(" ()") for n in m.group(1).split(",") if n.strip(" ()")}
    return names


def _is_exercise_plumbing(cell) -> bool:
    return bool({"exercise-check", "solution"} & set(_tags(cell))) or \
        "exercises.check(" in cell.source or "exercises.solution(" in cell.source


def cell_counts(nb) -> tuple:
    """(plain-PyTorch code cells, code cells that call nogradlab), exercise checks and solutions left out.
    A cell calls nogradlab when it names the package, loads or uses its magics, or uses a name imported
    from it. Every other code cell is plain PyTorch, except the parameters and the learner's answer
    cells, which count only when they use torch themselves (torch., nn., torchvision.)."""
    names = _package_names(nb)
    name_re = re.compile(r"\b(" + "|".join(map(re.escape, sorted(names))) + r")\s*[.(]") if names else None
    plain = package = 0
    for c in nb.cells:
        if c.cell_type != "code" or _is_exercise_plumbing(c):
            continue
        src = c.source
        calls = ("nogradlab" in src or re.search(r"^%%?(memory|modes)\b", src, re.M)
                 or (name_re is not None and name_re.search(src)))
        if calls:
            package += 1
        elif TORCH_RE.search(src) or not ({"parameters", "exercise"} & set(_tags(c))):
            plain += 1
    return plain, package


def test_cell_counts_sees_what_it_should():
    code = nbformat.v4.new_code_cell
    nb = nbformat.v4.new_notebook(cells=[
        code("from nogradlab import claims, plots\nfrom nogradlab.show import size"),   # package
        code("y = torch.ones(2) * 3"),                                                # plain
        code("print(size(torch.ones(2).nbytes))"),                                    # package: size()
        code("%%memory --device cpu\nout = net(x)"),                                  # package: the magic
        code("r = claims.check('C01')\nr"),                                           # package
        code("exercises.check('01.1', answer_1)"),                                    # left out
        code("answer_1 = ..."),                                                        # neither (below)
        code("model = nn.Sequential(nn.Linear(2, 2))"),                               # plain
        code("loss = model(x).sum()\nloss.backward()"),                               # plain
        code('device = "cpu"'),                                                        # neither (below)
    ])
    nb.cells[6].metadata["tags"], nb.cells[9].metadata["tags"] = ["exercise"], ["parameters"]
    assert cell_counts(nb) == (3, 4)


@pytest.mark.parametrize("stem", LESSONS)
def test_plain_pytorch_cells_outnumber_package_cells(stem):
    plain, package = cell_counts(_nb(stem))
    assert plain > package, f"{stem}: {plain} plain-PyTorch code cells, {package} cells calling nogradlab " \
        "(exercise checks and solutions not counted); show more in plain PyTorch"


# --------------------------------------------------------------------------------------------
# a picture for each idea

DIAGRAM_RE = re.compile(r"\bdiagrams\.\w+\(|\bplt\.\w+\(|\.add_subplot\(|\bsubplots\(")


@pytest.mark.parametrize("stem", LESSONS)
def test_every_lesson_draws_a_concept_diagram(stem):
    drawn = [i for i, c in enumerate(_nb(stem).cells) if c.cell_type == "code" and DIAGRAM_RE.search(c.source)
             and not _is_exercise_plumbing(c)]
    assert drawn, f"{stem}: no code cell draws a concept diagram (nogradlab.diagrams.* or matplotlib)"


def test_diagrams_draw_from_plain_pytorch_objects():
    import threading

    import torch

    from nogradlab import allocator, diagrams

    lin = torch.nn.Linear(4, 3)
    x = torch.randn(2, 4)
    y = torch.relu(lin(x))
    with torch.no_grad():
        y2 = torch.relu(lin(x))
    nodes = diagrams.graph_nodes(y)
    assert [n for _, n, _, _ in nodes][:2] == ["ReluBackward0", "AddmmBackward0"]
    assert nodes[0][2][0][:2] == ("result", (2, 3)) and diagrams.graph_nodes(y2) == []
    figs = [diagrams.autograd_graph(grad_on=y, no_grad=y2),
            diagrams.grad_mode_timeline([(threading.current_thread().name, "here", True), ("w", "there", False)]),
            diagrams.eval_grad_grid({(m, g): y for m in ("train", "eval") for g in (True, False)})]
    a = allocator.Allocator()
    b = [a.malloc(5 * 2**20) for _ in range(4)]
    a.free(b[0])
    figs.append(diagrams.allocator_segments(a.snapshot()))
    for f in figs:
        assert f._repr_png_()[:4] == b"\x89PNG"


def test_allocator_steps_draws_one_panel_per_step_and_names_each():
    """02's live picture: a short sequence of requests replayed through the allocator's model, one panel
    per step, each with its caption; the large-pool split it shows is the source's (should_split: a
    block is split when more than 1 MiB would remain)."""
    from nogradlab import allocator, diagrams

    mib = 2 ** 20
    a, steps = allocator.Allocator(), []
    held = {k: a.malloc(5 * mib) for k in "abcd"}
    steps.append(("four 5 MiB tensors", a.snapshot()))
    a.free(held.pop("a"))
    a.free(held.pop("c"))
    held["x"] = a.malloc(8 * mib)
    held["y"] = a.malloc(21 * mib // 2)  # 10.5 MiB: the 12 MiB hole, split (1.5 MiB > 1 MiB left)
    steps.append(("split", a.snapshot()))
    held["z"] = a.malloc(5 * mib // 4)  # 1.25 MiB: the whole 1.5 MiB block (0.25 MiB is too little to split)
    steps.append(("whole block", a.snapshot()))
    assert [(b / mib, used) for b, used in a.snapshot()[0].blocks] == [(8, True), (10.5, True), (1.5, True)]
    fig = diagrams.allocator_steps(steps)
    assert len(fig.axes) == 3 and [ax.get_title() for ax in fig.axes] == ["four 5 MiB tensors", "split",
                                                                          "whole block"]
    assert fig._repr_png_()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="at least one"):
        diagrams.allocator_steps([])


# --------------------------------------------------------------------------------------------
# the opening: title, one setup cell, the parameters, then the goals


@pytest.mark.parametrize("stem", LESSONS)
def test_nothing_but_setup_and_parameters_before_the_goals(stem):
    nb = _nb(stem)
    goals = next(i for i, c in enumerate(nb.cells) if _h2(c) == "## Learning goals")
    before = nb.cells[1:goals]
    kinds = ["parameters" if "parameters" in _tags(c) else c.cell_type for c in before]
    assert kinds == ["code", "parameters"], f"{stem}: before the goals come the title, one setup cell and the " \
        f"parameters; found {kinds}"
    setup = before[0].source
    # 12: the checkout or installed package, Colab's own install (two lines), the message naming the pip line
    assert len(setup.split("\n")) <= 12, f"{stem}: the setup cell is {len(setup.splitlines())} lines; keep it short"
    assert not re.search(r"^\s*print\(", setup, re.M), f"{stem}: the setup cell prints nothing until it is needed"


# --------------------------------------------------------------------------------------------
# the glossary in 00_index, linked from the lessons

GLOSSARY_LINK = re.compile(r"\]\(00_index\.ipynb#([\w-]+)\)")
ANCHOR = re.compile(r"<a id=\"([\w-]+)\"")


def _anchors() -> set:
    return {a for c in _nb("00_index").cells if c.cell_type == "markdown" for a in ANCHOR.findall(c.source)}


def test_index_has_a_glossary_with_anchors():
    nb = _nb("00_index")
    s, e = _section(nb, "## Glossary")
    text = "\n".join(c.source for c in nb.cells[s:e])
    found = set(ANCHOR.findall(text))
    for term in ("fake-tensor", "virtual-cuda-device", "distinct-storages", "iqr", "paired-interval",
                 "scale-tiny", "caching-allocator", "inference-mode"):
        assert term in found, f"the glossary has no <a id=\"{term}\"> entry"


@pytest.mark.parametrize("stem", LESSONS)
def test_glossary_links_resolve(stem):
    anchors = _anchors()
    links = {a for c in _nb(stem).cells if c.cell_type == "markdown" for a in GLOSSARY_LINK.findall(c.source)}
    assert links <= anchors, f"{stem}: links to glossary entries that do not exist: {sorted(links - anchors)}"
