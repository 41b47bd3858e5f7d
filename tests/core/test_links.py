"""The repository's address is written once, in pyproject's [project.urls]; the README's Binder and Colab
links and its install line use exactly that address (the notebooks' badges and first cell are checked in
test_lessons.py)."""
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def repository() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]


def test_the_repository_url_is_set_once_in_pyproject():
    url = repository()
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", url), url


def test_readme_links_use_the_repository_url_and_no_placeholder():
    text = (ROOT / "README.md").read_text()
    slug = repository().removeprefix("https://github.com/")
    assert "<owner>" not in text and "<repo>" not in text and "<URL" not in text
    binder = re.findall(r"https://mybinder\.org/v2/gh/([\w.-]+/[\w.-]+)/", text)
    colab = re.findall(r"https://colab\.research\.google\.com/github/([\w.-]+/[\w.-]+)/", text)
    installs = re.findall(r"nogradlab @ git\+https://github\.com/([\w.-]+/[\w.-]+)'", text)
    assert binder and colab and installs
    assert set(binder) | set(colab) | set(installs) == {slug}
    assert "%pip install -q 'nogradlab @ git+" + repository() + "'" in text


def test_nogradlab_links_uses_the_repository_url():
    from nogradlab import links

    assert links.REPOSITORY == repository()
    assert links.colab("02_inside_the_engine") == ("https://colab.research.google.com/github/"
                                                    f"{repository().removeprefix('https://github.com/')}"
                                                    "/blob/main/notebooks/02_inside_the_engine.ipynb")


def test_a_lone_notebook_links_its_siblings_where_it_is_opened():
    """Each relative link to a sibling in a footer or in the index's table has its Colab twin beside it: a
    notebook opened alone on Colab cannot resolve the relative one."""
    import nbformat

    from nogradlab import links

    missing = []
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(str(path), as_version=4)
        cells = [nb.cells[-1].source] + ([c.source for c in nb.cells if c.get("id") == "2"]
                                         if path.stem == "00_index" else [])
        for text in cells:
            for stem in re.findall(r"\]\((\d\d_\w+)\.ipynb\)", text):
                if f"[on Colab]({links.colab(stem)})" not in text:
                    missing.append(f"{path.stem} -> {stem}")
    assert not missing, f"relative sibling links without their Colab twin: {missing}"
