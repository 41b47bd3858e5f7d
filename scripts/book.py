"""Build the book: a static site of a run's executed notebooks (outputs and figures as the run left them),
with the run's report as its front page. ``make book`` calls it after ``make run``; offline: Sphinx,
myst-nb and the Furo theme come from the `dev` extra and fetch nothing.

    python scripts/book.py --run build --out book/_build     # writes book/_build/html/index.html

The run folder must hold ``report.html`` and ``notebooks/NN_*.ipynb`` (what ``python -m nogradlab run``
writes). The sources are assembled in ``<out>/src`` (conf.py and contents.md from book/, the executed
notebooks with their Colab/Binder badges turned into plain links, since a badge is an image from another
site) and built into ``<out>/html``: ``index.html`` is the report, ``contents.html`` the table of contents,
``notebooks/NN_*.html`` each notebook, where the report's links point.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
MARK = ".nogradlab-book"  # marks an output folder this script made (and may replace)
# [![alt](image on another site)](link) -> [alt](link)
_BADGE = re.compile(r"\[!\[([^\]]*)\]\((?:https?:)?//[^)]*\)\]\(([^)]*)\)")
_REMOTE_IMAGE = re.compile(r"!\[([^\]]*)\]\((?:https?:)?//[^)]*\)")


def _local_markdown(text: str) -> str:
    """Badges become plain links; any other image from another site becomes its alt text."""
    return _REMOTE_IMAGE.sub(r"\1", _BADGE.sub(r"[\1](\2)", text))


def _notebook(src: Path, dst: Path) -> None:
    nb = json.loads(src.read_text())
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            cell["source"] = _local_markdown(text)
    dst.write_text(json.dumps(nb, indent=1, ensure_ascii=False))


def assemble(run: Path, out: Path) -> Path:
    report = run / "report.html"
    notebooks = sorted((run / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if not report.is_file() or not notebooks:
        raise SystemExit(f"{run} holds no complete run (report.html and notebooks/NN_*.ipynb): "
                         "run `make run` (or `python -m nogradlab run --out DIR`) first")
    if out.exists():
        if not (out / MARK).is_file():
            raise SystemExit(f"{out} exists and was not made by scripts/book.py: choose another --out")
        shutil.rmtree(out)
    src = out / "src"
    (src / "notebooks").mkdir(parents=True)
    (src / "_extra" / "notebooks").mkdir(parents=True)
    (out / MARK).write_text("made by scripts/book.py; replaced by the next build\n")
    shutil.copy2(BOOK / "conf.py", src / "conf.py")
    toc = "\n".join(f"notebooks/{p.stem}" for p in notebooks)
    (src / "contents.md").write_text((BOOK / "contents.md").read_text().replace("NOTEBOOKS", toc))
    for p in notebooks:
        _notebook(p, src / "notebooks" / p.name)
        shutil.copy2(p, src / "_extra" / "notebooks" / p.name)  # the report links the .ipynb too
    shutil.copy2(report, src / "_extra" / "index.html")
    return src


def build(run: Path, out: Path, quiet: bool = True) -> Path:
    from sphinx.cmd.build import build_main

    src = assemble(run, out)
    html = out / "html"
    args = ["-b", "html", "--keep-going", str(src), str(html)]
    if quiet:
        args.insert(0, "-q")
    rc = build_main(args)
    if rc != 0:
        raise SystemExit(f"sphinx-build failed (exit {rc})")
    return html


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, default=ROOT / "build", help="a run's output folder (default: build)")
    ap.add_argument("--out", type=Path, default=BOOK / "_build", help="where the book goes (default: book/_build)")
    a = ap.parse_args(argv)
    html = build(a.run, a.out)
    print(f"book: {html / 'index.html'} (the report; contents: {html / 'contents.html'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
