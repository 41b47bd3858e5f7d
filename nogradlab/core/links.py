"""Where the collection lives on the web, derived from one address: the repository's (the same as
``[project.urls].Repository`` in pyproject.toml; a test holds them equal).

A relative link to a sibling (``02_inside_the_engine.ipynb``) works in JupyterLab, on Binder, in the book and on
GitHub, and on Colab for a notebook opened from the repository (Colab opens the sibling from the same repository in
a new tab: googlecolab/colabtools#3877, a regression of that behaviour fixed in 2023-08). A notebook uploaded to
Colab or opened from Drive has no repository to resolve against, so the notebooks' footers and the index's table
also carry, beside the relative link, the sibling's Colab address built here.
"""
from __future__ import annotations

__all__ = ["REPOSITORY", "BRANCH", "github", "colab", "colab_link"]

REPOSITORY = "https://github.com/nogradlab/nogradlab"
BRANCH = "main"


def _slug() -> str:
    return REPOSITORY.removeprefix("https://github.com/")


def github(stem: str) -> str:
    """The notebook ``notebooks/<stem>.ipynb`` on GitHub."""
    return f"{REPOSITORY}/blob/{BRANCH}/notebooks/{stem}.ipynb"


def colab(stem: str) -> str:
    """The notebook ``notebooks/<stem>.ipynb`` opened in Colab, straight from the repository."""
    return f"https://colab.research.google.com/github/{_slug()}/blob/{BRANCH}/notebooks/{stem}.ipynb"


def colab_link(stem: str) -> str:
    """The Markdown twin put beside a relative link to ``stem``: `([on Colab](...))`."""
    return f"([on Colab]({colab(stem)}))"
