"""The repository's address is written once, in pyproject's [project.urls]; the README's Binder and Colab
links and its install line use exactly that address (the notebooks' badges and first cell are checked in
test_lessons.py)."""
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
