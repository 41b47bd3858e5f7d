"""``make book`` (scripts/book.py): the executed notebooks as a static site with the report as its front
page, built offline, read in headless Chromium with every request off this machine refused: no page asks
for anything from another site, the links between the report, the contents and the notebooks work, and
every page reads on a 390 px phone without sideways panning, no code block scrolls sideways (they wrap), and
each lesson offers its notebook for download.

By default the book is built from a small synthetic run (two of the real notebooks with outputs added, and
a report from fake results) so that the test takes seconds; NOGRADLAB_BOOK_RUN=build checks the book of a
real run (`make run` first)."""
import base64
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nogradlab import report
from test_report import CHROMIUM, CHROMIUM_ARGS, fake_doc

FRONT_NAV = ("<nav class='book-nav' style='margin:8px 0;font-size:15px'><b>This book:</b> "
             "<a href='contents.html'>the lessons, in order (contents)</a></nav>")

ROOT = Path(__file__).resolve().parents[2]
PHONE = {"width": 390, "height": 844}
pytest.importorskip("sphinx")
pytest.importorskip("myst_nb")
pytest.importorskip("furo")


def _png() -> str:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 3))
    fig.subplots().plot([1, 2, 3], [3, 1, 2])
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return base64.b64encode(buf.getvalue()).decode()


def synthetic_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "notebooks").mkdir(parents=True)
    for name in ("00_index", "06_decorators_contexts_and_autocast"):
        nb = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())
        code = next(c for c in nb["cells"] if c["cell_type"] == "code"  # a teaching cell, not the setup
                    and not "".join(c["source"]).startswith("# Setup:")
                    and "parameters" not in c.get("metadata", {}).get("tags", []))
        code["outputs"] = [
            {"output_type": "stream", "name": "stdout", "text": ["a long printed line " * 12 + "\n"]},
            {"output_type": "display_data", "metadata": {},
             "data": {"image/png": _png(), "text/plain": ["<Figure>"]}}]
        (run / "notebooks" / f"{name}.ipynb").write_text(json.dumps(nb))
    doc = fake_doc(notebooks=[{"name": "06_decorators_contexts_and_autocast", "status": "ok", "seconds": 1.0,
                               "claims": ["C28"], "ipynb": "notebooks/06_decorators_contexts_and_autocast.ipynb",
                               "html": "notebooks/06_decorators_contexts_and_autocast.html"}])
    report.write_html(doc, run)
    return run


def test_book_refuses_a_folder_it_did_not_make_and_a_run_that_is_not_there(tmp_path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("x")
    run = synthetic_run(tmp_path)
    p = subprocess.run([sys.executable, "scripts/book.py", "--run", str(run), "--out", str(foreign)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "not made by scripts/book.py" in p.stderr
    assert (foreign / "keep.txt").read_text() == "x"
    p = subprocess.run([sys.executable, "scripts/book.py", "--run", str(tmp_path / "none"),
                        "--out", str(tmp_path / "b")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "make run" in p.stderr


def _book(run, out, timeout=300):
    return subprocess.run([sys.executable, "scripts/book.py", "--run", str(run), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_a_rebuild_keeps_what_the_book_did_not_make(tmp_path):
    """A .git, a CNAME and notes put into the built site (say, to publish it) survive the next build;
    what the earlier build made is replaced."""
    run = synthetic_run(tmp_path)
    out = tmp_path / "book"
    p = _book(run, out)
    assert p.returncode == 0, p.stderr[-2000:]
    html = out / "html"
    (html / ".git").mkdir()
    (html / ".git" / "HEAD").write_text("ref: refs/heads/gh-pages\n")
    (html / "CNAME").write_text("book.example.org\n")
    (out / "notes.txt").write_text("mine")
    made = html / "notebooks" / "00_index.html"
    made.write_text("stale")  # made by the earlier build: replaced
    p = _book(run, out)
    assert p.returncode == 0, p.stderr[-2000:]
    assert (html / ".git" / "HEAD").read_text() == "ref: refs/heads/gh-pages\n"
    assert (html / "CNAME").read_text() == "book.example.org\n"
    assert (out / "notes.txt").read_text() == "mine"
    assert made.read_text() != "stale" and (html / "index.html").is_file()


def test_a_book_folder_marked_by_an_older_build_is_refused_not_emptied(tmp_path):
    """A marker that does not list what its build made: nothing is deleted, and the message says what to do."""
    run = synthetic_run(tmp_path)
    out = tmp_path / "book"
    (out / "html").mkdir(parents=True)
    (out / ".nogradlab-book").write_text("made by scripts/book.py; replaced by the next build\n")
    (out / "html" / "CNAME").write_text("x")
    p = _book(run, out)
    assert p.returncode != 0 and "--out" in p.stderr
    assert (out / "html" / "CNAME").read_text() == "x"


def test_an_interrupted_build_leaves_the_earlier_book_whole_and_the_next_build_cleans_up(tmp_path, monkeypatch):
    import importlib.util

    spec = importlib.util.spec_from_file_location("book_script", ROOT / "scripts" / "book.py")
    book = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(book)
    run = synthetic_run(tmp_path)
    out = tmp_path / "book"
    (out / "html").mkdir(parents=True)
    (out / "html" / "CNAME").write_text("x")
    with pytest.raises(SystemExit, match="not made by scripts/book.py"):
        book.build(run, out)
    (out / "html" / "CNAME").unlink()
    real = book._sphinx

    def fake_sphinx(args):  # a quick stand-in for Sphinx: one page
        Path(args[-1]).mkdir(parents=True)
        (Path(args[-1]) / "index.html").write_text("first")
        return 0
    monkeypatch.setattr(book, "_sphinx", fake_sphinx)
    book.build(run, out)  # an empty folder is taken
    (out / "html" / "CNAME").write_text("x")
    before = {f: (out / f).read_bytes() for f in book._files(out)}

    def dies(args):
        Path(args[-1]).mkdir(parents=True)
        (Path(args[-1]) / "index.html").write_text("half")
        raise KeyboardInterrupt
    monkeypatch.setattr(book, "_sphinx", dies)
    with pytest.raises(KeyboardInterrupt):
        book.build(run, out)
    assert {f: (out / f).read_bytes() for f in book._files(out)} == before
    (out / ".book-build-left").mkdir()  # as a SIGKILL would leave it
    (out / ".book-build-left" / ".nogradlab-book").write_text("in progress")
    monkeypatch.setattr(book, "_sphinx", real)
    book.build(run, out)
    assert not (out / ".book-build-left").exists() and (out / "html" / "CNAME").read_text() == "x"
    assert "first" != (out / "html" / "index.html").read_text()


def test_the_book_of_every_lesson_builds_without_warnings_opens_on_goals_and_has_a_footer(tmp_path):
    """All the lessons (as stored, without outputs): Sphinx prints no warning (links to a sibling's
    anchors included), the plumbing cells (setup, parameters, papermill's injected cell) are not shown,
    so a lesson opens on its goals, and the footer names who holds the copyright."""
    run = tmp_path / "run"
    (run / "notebooks").mkdir(parents=True)
    stems = []
    for src in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        nb = json.loads(src.read_text())
        for i, cell in enumerate(nb["cells"]):  # what papermill adds after the parameters cell
            if "parameters" in cell.get("metadata", {}).get("tags", []):
                nb["cells"].insert(i + 1, {"cell_type": "code", "id": "injected", "execution_count": None,
                                           "metadata": {"tags": ["injected-parameters"]}, "outputs": [],
                                           "source": "# Parameters\ndevice = 'cpu'\n"})
                break
        (run / "notebooks" / src.name).write_text(json.dumps(nb))
        stems.append(src.stem)
    report.write_html(fake_doc(), run)
    p = _book(run, tmp_path / "book", timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "WARNING" not in p.stderr and "WARNING" not in p.stdout, p.stderr[-3000:]
    html = tmp_path / "book" / "html"
    for s in stems:
        page = (html / "notebooks" / f"{s}.html").read_text()
        assert "# Setup:" not in page and "# Parameters" not in page, s
        assert "papermill and `make run`" not in page and 'scale = "auto"' not in page.replace("&quot;", '"'), s
        if s != "00_index":
            body = page.split("</h1>", 1)[1]
            assert body.find("Learning goals") < body.find('class="cell'), s  # opens on its goals
        # each lesson offers its notebook for download, at its top and its end, and the file is there
        assert page.count(f'<a class="book-download" href="{s}.ipynb" download>') == 2, s
        assert (html / "notebooks" / f"{s}.ipynb").read_bytes() == (run / "notebooks" / f"{s}.ipynb").read_bytes(), s
        assert "_static/book.css" in page, s  # the style that makes code blocks wrap (the browser test measures it)
    footer = (html / "contents.html").read_text()
    assert re.search(r"Copyright &#169; 2026, the nogradlab authors", footer)


def test_book_offline_navigable_and_readable_on_a_phone(tmp_path):
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium is missing (make test installs Debian's chromium package)")
    from playwright.sync_api import sync_playwright

    run = Path(os.environ["NOGRADLAB_BOOK_RUN"]) if os.environ.get("NOGRADLAB_BOOK_RUN") else synthetic_run(tmp_path)
    out = tmp_path / "book"
    p = subprocess.run([sys.executable, "scripts/book.py", "--run", str(run), "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    html = out / "html"
    stems = sorted(q.stem for q in (run / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    front = (html / "index.html").read_text()
    assert front.replace(FRONT_NAV, "") == (run / "report.html").read_text()  # the report, and a way in
    assert all((html / "notebooks" / f"{s}.html").is_file() for s in stems)
    pages = sorted(html.rglob("*.html"))
    # no badge or other image from another site made it into a page
    assert not any("colab-badge.svg" in q.read_text() or "mybinder.org/badge" in q.read_text() for q in pages)

    outside = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            ctx = browser.new_context(viewport=PHONE, device_scale_factor=1)

            def route(r):
                if r.request.url.startswith(("file:", "data:", "blob:", "about:")):
                    r.continue_()
                else:
                    outside.append(r.request.url)
                    r.abort()
            ctx.route("**/*", route)
            page = ctx.new_page()
            sideways = []  # pages with code blocks (or printed outputs) that scroll sideways inside the page
            for q in pages:
                page.goto(q.resolve().as_uri())
                page.wait_for_load_state("load")
                width = page.evaluate("Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)")
                assert width <= PHONE["width"], f"{q.relative_to(html)} is {width} px wide on a 390 px screen"
                n = page.evaluate("[...document.querySelectorAll('pre')]"
                                  ".filter(p => p.scrollWidth > p.clientWidth + 1).length")
                if n:
                    sideways.append(f"{q.relative_to(html)}: {n} block(s)")
            assert sideways == [], f"{len(sideways)} page(s) whose code blocks scroll sideways at 390 px: {sideways}"
            assert outside == [], f"requests off this machine: {sorted(set(outside))[:10]}"

            # the report's link to a notebook opens that notebook's page of the book
            page.goto((html / "index.html").resolve().as_uri())
            link = page.locator("a[href='notebooks/06_decorators_contexts_and_autocast.html']").first
            with page.expect_navigation():
                link.evaluate("a => a.click()")  # it may sit in a closed <details>
            assert page.url.endswith("notebooks/06_decorators_contexts_and_autocast.html")
            assert "autocast" in page.locator("h1").first.inner_text().lower()
            # the front page links the contents, and every lesson page links back to the front page
            page.goto((html / "index.html").resolve().as_uri())
            with page.expect_navigation():
                page.locator("a[href='contents.html']").first.click()
            assert page.url.endswith("contents.html")
            for s in stems:
                page.goto((html / "notebooks" / f"{s}.html").resolve().as_uri())
                back = page.locator("article a[href='../index.html']")
                assert back.count() >= 1 and back.first.is_visible(), s
                # and offers its notebook for download: a visible link to the .ipynb beside the page
                down = page.locator(f"article a.book-download[href='{s}.ipynb'][download]")
                assert down.count() == 2 and down.first.is_visible(), s
                assert (html / "notebooks" / f"{s}.ipynb").is_file(), s
            with page.expect_navigation():
                back.first.click()
            assert page.url.endswith("/index.html") and page.locator("#verdict-table").count() == 1
            # the contents lists every notebook, and leads back to the report
            page.goto((html / "contents.html").resolve().as_uri())
            hrefs = page.eval_on_selector_all("a", "els => els.map(e => e.getAttribute('href'))")
            assert all(f"notebooks/{s}.html" in hrefs for s in stems) and "index.html" in hrefs
            with page.expect_navigation():
                page.locator(f"article a[href='notebooks/{stems[0]}.html']").first.click()  # not the sidebar's
            assert page.url.endswith(f"notebooks/{stems[0]}.html")
            # a notebook page shows its outputs: its figures are there and loaded
            with_fig = next(s for s in stems if "_images/" in (html / "notebooks" / f"{s}.html").read_text())
            page.goto((html / "notebooks" / f"{with_fig}.html").resolve().as_uri())
            assert page.locator("img").evaluate_all("imgs => imgs.some(i => i.complete && i.naturalWidth > 0)")
            page.screenshot(path=str(tmp_path / "phone.png"), full_page=False)
            assert outside == [], f"requests off this machine: {sorted(set(outside))[:10]}"
        finally:
            browser.close()
    shutil.rmtree(out, ignore_errors=True)


@pytest.mark.parametrize("listed", ["../victim.txt", "html/../../victim.txt", "VICTIM", "victim.txt",
                                    "html/link/victim.txt", "./html/x", "html//x", ".nogradlab-book"])
def test_a_marker_listing_a_path_outside_the_books_folders_deletes_nothing(tmp_path, listed):
    """The marker is a file anyone can edit: an absolute path, ``..``, a file at the top (a build makes only folders there) or one
    reached through a link out of the folder is refused before anything is deleted."""
    run = synthetic_run(tmp_path)
    out = tmp_path / "book"
    (out / "html").mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    (out / "victim.txt").write_text("mine")
    (out / "html" / "link").symlink_to(tmp_path, target_is_directory=True)
    listed = str(victim) if listed == "VICTIM" else listed
    (out / ".nogradlab-book").write_text(json.dumps({"made_by": "scripts/book.py", "files": [listed]}))
    p = _book(run, out, timeout=60)
    assert p.returncode != 0 and "nothing was deleted" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert victim.read_text() == "mine" and (out / "victim.txt").read_text() == "mine"
