"""Build the book: a static site of a run's executed notebooks (outputs and figures as the run left them),
with the run's report as its front page. ``make book`` calls it after ``make run``; offline: Sphinx,
myst-nb and the Furo theme come from the `dev` extra and fetch nothing.

    python scripts/book.py --run nogradlab-run --out book/_build     # writes book/_build/html/index.html

The run folder must hold ``report.html`` and ``notebooks/NN_*.ipynb`` (what ``python -m nogradlab run``
writes). The sources are assembled in ``<out>/src`` (conf.py and contents.md from book/, the executed
notebooks with their Colab/Binder badges turned into plain links, since a badge is an image from another
site) and built into ``<out>/html``: ``index.html`` is the report, ``contents.html`` the table of contents,
``notebooks/NN_*.html`` each notebook, where the report's links point.

A rebuild replaces only what the earlier build made (``<out>/.nogradlab-book`` lists it): a ``.git``, a
``CNAME`` or notes put beside the book are kept, and a folder this script did not make is refused. The
build runs in a staging folder inside ``<out>``, so an interrupted one leaves the earlier book whole.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
MARK = ".nogradlab-book"  # marks an output folder this script made, listing the files it made
STAGE = ".book-build-"  # a build in progress, inside the output folder
# [![alt](image on another site)](link) -> [alt](link)
_BADGE = re.compile(r"\[!\[([^\]]*)\]\((?:https?:)?//[^)]*\)\]\(([^)]*)\)")
_REMOTE_IMAGE = re.compile(r"!\[([^\]]*)\]\((?:https?:)?//[^)]*\)")
# [text](NN_name.ipynb#anchor)
_ANCHOR_LINK = re.compile(r"\[([^\]]+)\]\((?:\./)?(\d\d_[\w-]+)\.ipynb#([\w-]+)\)")


def _local_markdown(text: str) -> str:
    """Badges become plain links; any other image from another site becomes its alt text; a link to
    an anchor in a sibling notebook (``00_index.ipynb#scale-tiny``, an ``<a id>`` of that notebook,
    which Sphinx cannot check) becomes an HTML link to that anchor on the sibling's page."""
    text = _REMOTE_IMAGE.sub(r"\1", _BADGE.sub(r"[\1](\2)", text))
    return _ANCHOR_LINK.sub(r'<a href="\2.html#\3">\1</a>', text)


# plumbing: the setup cell (install/import nogradlab), papermill's parameters and the cell it injects
_PLUMBING_TAGS = {"parameters", "injected-parameters"}


def plumbing(cell: dict) -> bool:
    """A cell that sets a notebook up rather than teaches: the setup cell, the parameters, papermill's
    injected parameters."""
    if cell.get("cell_type") != "code":
        return False
    tags = set(cell.get("metadata", {}).get("tags") or ())
    text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
    return bool(tags & _PLUMBING_TAGS) or text.lstrip().startswith("# Setup:")


NAV = ('<p class="book-nav"><a href="../index.html">\u2190 The report</a> \u00b7 '
       '<a href="../contents.html">All lessons</a></p>')


def nav(stem: str) -> str:
    """A lesson's line back to the report and the contents, with a link to download its notebook: the run's
    executed ``<stem>.ipynb``, which the book keeps beside the lesson's page (:func:`assemble`)."""
    return NAV.replace("</p>", f' \u00b7 <a class="book-download" href="{stem}.ipynb" download>'
                               f'Download this notebook (.ipynb)</a></p>')


def _notebook(src: Path, dst: Path) -> None:
    """A run's executed notebook as the book shows it: plumbing cells removed (Jupyter Book's
    ``remove-cell`` tag, which myst-nb honours), so that a lesson opens on its goals; a line back to
    the report and the contents, with a link to download the notebook, under its title and at its end;
    links made local."""
    nb = json.loads(src.read_text())
    first_title = True
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            text = _local_markdown(text)
            if first_title and text.startswith("# "):
                title, _, rest = text.partition("\n")
                text = f"{title}\n\n{nav(src.stem)}\n\n{rest}"
                first_title = False
            cell["source"] = text
        elif plumbing(cell):
            tags = cell.setdefault("metadata", {}).setdefault("tags", [])
            if "remove-cell" not in tags:
                tags.append("remove-cell")
    nb.setdefault("cells", []).append({"cell_type": "markdown", "id": "book-nav-back", "metadata": {}, "source": nav(src.stem)})
    dst.write_text(json.dumps(nb, indent=1, ensure_ascii=False))


FRONT_NAV = ("<nav class='book-nav' style='margin:8px 0;font-size:15px'><b>This book:</b> "
             "<a href='contents.html'>the lessons, in order (contents)</a></nav>")


def front_page(report_html: str) -> str:
    """The run's report as the book's front page: a link to the contents under its title."""
    if "</h1>" in report_html:
        return report_html.replace("</h1>", "</h1>" + FRONT_NAV, 1)
    return report_html.replace("<body>", "<body>" + FRONT_NAV, 1)


def _run_files(run: Path):
    report = run / "report.html"
    notebooks = sorted((run / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if not report.is_file() or not notebooks:
        raise SystemExit(f"{run} holds no complete run (report.html and notebooks/NN_*.ipynb): "
                         "run `make run` (or `python -m nogradlab run --out DIR`) first")
    return report, notebooks


def assemble(run: Path, src: Path) -> Path:
    """The book's sources in the new folder ``src``: conf.py, contents.md and _static/ (its CSS) from book/, the
    executed notebooks (badges made plain links) and, as extra files, the .ipynb (each lesson's download, and
    the report's link) and the report."""
    report, notebooks = _run_files(run)
    (src / "notebooks").mkdir(parents=True)
    (src / "_extra" / "notebooks").mkdir(parents=True)
    shutil.copy2(BOOK / "conf.py", src / "conf.py")
    shutil.copytree(BOOK / "_static", src / "_static")
    toc = "\n".join(f"notebooks/{p.stem}" for p in notebooks)
    (src / "contents.md").write_text((BOOK / "contents.md").read_text().replace("NOTEBOOKS", toc))
    notes = ROOT / "benchmarks" / "README.md"  # the measurement notes, a page of the book too
    if notes.is_file():
        (src / "measurement.md").write_text(notes.read_text())
    for p in notebooks:
        _notebook(p, src / "notebooks" / p.name)
        shutil.copy2(p, src / "_extra" / "notebooks" / p.name)  # the report links the .ipynb too
    (src / "_extra" / "index.html").write_text(front_page(report.read_text()))
    return src


def _files(root: Path) -> list:
    """Every file under ``root`` (links not followed), as sorted relative paths."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() or p.is_symlink())


def _inside(out: Path, rel: str) -> bool:
    """True for a path a build may have made: relative, ``/``-separated, with no ``..``, ``.`` or empty part,
    inside a folder (a build makes only folders at the top: ``src/``, ``html/``, ``jupyter_execute/``) that is no
    staging folder, and inside ``out`` once links in its folders are followed."""
    parts = rel.split("/")
    if (not rel or "\\" in rel or ":" in rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts)
            or len(parts) < 2 or parts[0].startswith(STAGE)):
        return False
    try:
        return (out / rel).parent.resolve().is_relative_to(out.resolve())
    except (OSError, RuntimeError, ValueError):
        return False


def _made_before(out: Path) -> list:
    """The files an earlier build made in ``out`` (its marker lists them), or [] for a folder that is
    not there or empty; refuses, deleting nothing, a folder this script did not make or one whose
    marker does not list its files. Staging folders of interrupted builds are removed."""
    if not out.exists() and not out.is_symlink():
        return []
    if out.is_symlink() or not out.is_dir():
        raise SystemExit(f"{out} is not a folder: choose another --out")
    marker = out / MARK
    if not marker.is_file():
        if _files(out):  # empty folders hold nothing to lose
            raise SystemExit(f"{out} exists and was not made by scripts/book.py: choose another --out")
        return []
    try:
        made = json.loads(marker.read_text())["files"]
        assert isinstance(made, list) and all(isinstance(f, str) for f in made)
    except (ValueError, KeyError, TypeError, AssertionError, RecursionError):
        raise SystemExit(f"{out} was made by an older scripts/book.py that did not list the files it made, so "
                         f"nothing in it is deleted: check it and remove it yourself, or choose another --out") from None
    outside = [f for f in made if not _inside(out, f)]
    if outside:
        raise SystemExit(f"{marker} lists {', '.join(map(repr, outside[:3]))}{' ...' if len(outside) > 3 else ''}, "
                         f"which is not a file inside {out} that a build makes; nothing was deleted. Check the "
                         f"folder and remove it yourself, or choose another --out")
    for stage in out.glob(STAGE + "*"):  # an interrupted build's: ours when it holds our marker
        if stage.is_dir() and not stage.is_symlink() and (stage / MARK).is_file():
            shutil.rmtree(stage)
    return made


def _sphinx(args: list) -> int:
    from sphinx.cmd.build import build_main

    return build_main(args)


def build(run: Path, out: Path, quiet: bool = True) -> Path:
    """Build the book in a staging folder inside ``out``, then put its files in place: the files the
    earlier build made (the marker lists them) are replaced or removed, every other file is kept, and a
    file of someone else's where the book would write stops the build before anything changes."""
    _run_files(run)
    old = set(_made_before(out))
    out.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=STAGE, dir=out))
    try:
        (stage / MARK).write_text("a build of scripts/book.py in progress; removed by the next build\n")
        src = assemble(run, stage / "src")
        args = ["-b", "html", "--keep-going", str(src), str(stage / "html")]
        if quiet:
            args.insert(0, "-q")
        rc = _sphinx(args)
        if rc != 0:
            raise SystemExit(f"sphinx-build failed (exit {rc})")
        new = [f for f in _files(stage) if f != MARK]
        clash = [f for f in new if f not in old and ((out / f).exists() or (out / f).is_symlink())]
        if clash:
            raise SystemExit(f"{out} holds files the book would overwrite but did not make: "
                             f"{', '.join(clash[:5])}{' ...' if len(clash) > 5 else ''}: move them or choose another --out")
        for f in sorted(old - set(new)):
            target = out / f
            if target.is_file() or target.is_symlink():
                target.unlink()
        for f in new:
            (out / f).parent.mkdir(parents=True, exist_ok=True)
            os.replace(stage / f, out / f)
        for f in sorted(old - set(new), key=lambda f: -f.count("/")):  # folders they leave empty
            for parent in (out / f).parents:
                if parent == out or not parent.is_dir() or any(parent.iterdir()):
                    break
                parent.rmdir()
        _outdir_write(out / MARK, json.dumps({"made_by": "scripts/book.py", "files": new}, indent=0) + "\n")
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return out / "html"


def _outdir_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, default=ROOT / "nogradlab-run",
                    help="a run's output folder (default: nogradlab-run)")
    ap.add_argument("--out", type=Path, default=BOOK / "_build", help="where the book goes (default: book/_build)")
    a = ap.parse_args(argv)
    html = build(a.run, a.out)
    print(f"book: {html / 'index.html'} (the report; contents: {html / 'contents.html'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
