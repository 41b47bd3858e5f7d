"""report.html, built from fake results as tests/run/test_report.py builds it, read in headless Chromium:
every claim's row is visible, a claim's rule and readings open on click, every image loads, a failed
notebook names its cell."""
import shutil

import pytest

from nogradlab import claims, report
from test_report import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, fake_doc, fake_reference


def test_report_in_headless_chromium(tmp_path):
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium is missing (make test installs Debian's chromium package)")
    from playwright.sync_api import sync_playwright

    refs_dir, ref = fake_reference(tmp_path)
    notebooks = [{"name": "01_what_no_grad_does", "status": "ok", "seconds": 2.0, "claims": ["C01"],
                  "ipynb": "notebooks/01_what_no_grad_does.ipynb", "html": "notebooks/01_what_no_grad_does.html",
                  "error": None},
                 {"name": "02_inside_the_engine", "status": "failed", "seconds": 1.0, "claims": [], "ipynb": None,
                  "html": None, "error": {"cell": 3, "execution_count": 2, "ename": "ValueError", "evalue": "boom"}}]
    doc = fake_doc(skip=("C10",), notebooks=notebooks)
    if ARTIFACTS.exists():
        shutil.rmtree(ARTIFACTS)
    path = report.write_html(doc, ARTIFACTS, refs=report.load_references(refs_dir))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 900})
            page.goto(path.resolve().as_uri())
            for cid in claims.ids():
                row = page.locator(f"#verdict-table [data-claim='{cid}']")
                assert row.count() == 1 and row.is_visible(), cid
            assert page.locator("[data-claim='C10']").get_attribute("data-verdict") == "not run"
            assert page.locator("[data-claim='C10'] .v").first.inner_text() == "not run"
            header = page.locator("#verdict-table .head").inner_text()
            assert "Fake GPU H999" in header
            assert ref["meta"]["machine"] in page.locator("#columns-table").inner_text()
            # a claim opens on its picture (or a line saying it has none); its rule, measured figures and each
            # column's reading are one more click away, folded, on the same page
            row = page.locator("#verdict-table [data-claim='C01']")
            assert not row.locator(".rule").is_visible()
            row.locator("summary.row").click()
            assert row.locator(".picture").is_visible() and not row.locator(".rule").is_visible()
            row.locator("details.fold > summary").click()
            assert row.locator(".rule").is_visible() and "fake summary 0 <b>" in row.locator(".more").inner_text()
            assert "Fake GPU H999" in row.locator(".refline").first.inner_text()
            imgs = page.locator("img")
            assert imgs.count() >= 2  # the verdict overview and C14's grid (nogradlab.plots)
            assert page.locator("img[alt^='C14']").count() == 1
            for i in range(imgs.count()):
                img = imgs.nth(i)
                img.scroll_into_view_if_needed()
                assert img.is_visible() and img.evaluate("e => e.complete && e.naturalWidth") > 0
            failed = page.locator("tr[data-notebook='02_inside_the_engine']")
            assert failed.get_attribute("data-status") == "failed"
            assert "cell 3 (In [2]): ValueError: boom" in failed.inner_text()
            link = page.locator("tr[data-notebook='01_what_no_grad_does'] a").first
            assert link.get_attribute("href") == "notebooks/01_what_no_grad_does.html"
            page.screenshot(path=str(ARTIFACTS / "report.png"), full_page=True)
        finally:
            browser.close()
    assert (ARTIFACTS / "report.png").stat().st_size > 10_000
