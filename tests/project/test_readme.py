"""The README is a page of routes: short, the lessons each in a line, the three ways in (Colab, Binder,
local) before anything else, the article named by its title; the measurement notes live beside the code
they describe (benchmarks/README.md, also a page of the book)."""
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
WORDS = README.split()


def test_the_readme_reads_in_a_few_minutes():
    assert len(WORDS) <= 1500, len(WORDS)


def test_the_readme_names_the_article_and_lists_every_lesson_by_its_notebook():
    article = (Path("/work/shared/article.txt") if Path("/work/shared/article.txt").is_file() else None)
    title = "PyTorch No_grad Optimization That Actually Speeds Up Inference"
    if article is not None:
        assert article.read_text().splitlines()[0].strip() == title
    assert title in README
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        if json.loads(nb.read_text()).get("cells"):
            assert re.search(rf"^\| `{nb.stem}` \| .+ \|$", README, re.M), nb.stem


def test_the_three_routes_come_first():
    first = " ".join(WORDS[:700])
    for route in ("colab.research.google.com", "mybinder.org", "make run", "make test"):
        assert route in first, route


def test_the_measurement_notes_moved_beside_the_benchmarks():
    notes = (ROOT / "benchmarks" / "README.md").read_text()
    for heading in ("## How things are measured", "## Session budgets", "## PyTorch releases"):
        assert heading in notes and heading not in README
    assert "benchmarks/README.md" in README


def test_the_first_command_comes_within_the_first_200_words_and_pip_is_a_route():
    """Issue 39: the first command came at word 318-348, and there was no plain `pip install` route."""
    first = " ".join(WORDS[:200])
    assert "make run" in first and "pip install" in first
    assert "python -m nogradlab claims" in " ".join(WORDS[:260])


def test_the_colab_paragraph_says_what_the_first_cell_does():
    """On Colab the setup cell installs the package itself and goes on (it stops with the %pip line only
    elsewhere): the README says so, and the cell does."""
    cell = "".join(json.loads((ROOT / "notebooks" / "01_what_no_grad_does.ipynb").read_text())["cells"][1]["source"])
    assert "google.colab" in cell and "pip\", \"install\"" in cell.replace("'", '"')
    assert "installs the package itself" in " ".join(README.split())
