"""report.html on a 390 px phone: no sideways panning, tables as stacked rows, multi-panel charts
stacked. Headless Chromium, as tests/run/test_report.py."""
import pytest
from matplotlib.figure import Figure

from nogradlab import plots, report
from test_report import CHROMIUM, CHROMIUM_ARGS, fake_doc, fake_reference

PHONE = {"width": 390, "height": 844}

# three workloads side by side: the kind of chart that is unreadable squeezed into 390 px
ROWS = [{"workload": w, "mode": m, "batch": b, "total_bytes": (b + 1) * 2**20 * (2 if m == "grad" else 1)}
        for w in ("mlp", "resnet50", "transformer_base") for m in ("grad", "no_grad")
        for b in (1, 2, 4, 8)]


def _wide_chart_spec(monkeypatch):
    specs = report._plot_specs

    def more(doc):
        return specs(doc) + [("three panels", lambda: plots.memory_vs_batch(ROWS, device="cpu"),
                              "memory against batch, one panel per workload")]
    monkeypatch.setattr(report, "_plot_specs", more)


def test_side_by_side_panels_are_restacked():
    fig = plots.memory_vs_batch(ROWS, device="cpu")
    w, h = fig.get_size_inches()
    assert w > 2 * h  # 1 x 3 panels
    assert report.stacked(fig)
    w2, h2 = fig.get_size_inches()
    assert h2 > w2
    xs = {round(ax.get_position().x0, 2) for ax in fig.axes}
    ys = {round(ax.get_position().y0, 2) for ax in fig.axes}
    assert len(xs) == 1 and len(ys) == 3  # one column
    one = Figure()
    one.subplots()
    assert not report.stacked(one)


def test_charts_carry_a_stacked_version_only_for_multi_panel_ones(monkeypatch):
    _wide_chart_spec(monkeypatch)
    out = {title: uri for title, uri, _ in report.charts(fake_doc())}
    assert out["three panels"].narrow.startswith("data:image/png;base64,")
    assert out["three panels"].narrow != out["three panels"]
    assert out["Verdicts by machine"].narrow is None
    page = report.render_html(fake_doc())
    assert "<picture><source media='(max-width:640px)'" in page


def test_report_on_a_390px_phone(tmp_path, monkeypatch):
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium is missing (make test installs Debian's chromium package)")
    from playwright.sync_api import sync_playwright

    _wide_chart_spec(monkeypatch)
    refs_dir, _ = fake_reference(tmp_path)
    notebooks = [{"name": "02_inside_the_engine", "status": "failed", "seconds": 1.0, "claims": [],
                  "ipynb": None, "html": None,
                  "error": {"cell": 3, "execution_count": 2, "ename": "ValueError",
                            "evalue": "boom " + "x" * 300, "source": "y = f(x)  # " + "z" * 400,
                            "traceback": "Traceback: " + "frame " * 200}}]
    doc = fake_doc(notebooks=notebooks)
    path = report.write_html(doc, tmp_path / "out", refs=report.load_references(refs_dir))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport=PHONE, device_scale_factor=1)
            page.goto(path.resolve().as_uri())
            page.locator("#notebook-table details").first.evaluate("d => d.open = true")
            assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
            assert page.evaluate("document.body.scrollWidth") <= PHONE["width"]
            # every claim lies within the screen, its chips labelled with their column; opened, too
            row = page.locator("#verdict-table [data-claim='C01']")
            row.locator("summary.row").click()
            assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
            for part in [row] + row.locator(".cell").all():
                box = part.bounding_box()
                assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"]
            labels = [x.inner_text() for x in row.locator(".chip .lbl").all()]
            assert labels[0] == "this run" and "Fake GPU" in labels[1]
            assert all(x.is_visible() for x in row.locator(".chip .lbl").all())
            # charts fit, and the multi-panel one comes stacked (taller than wide)
            for img in page.locator("figure img").all():
                img.scroll_into_view_if_needed()
                b = img.bounding_box()
                assert b["x"] >= 0 and b["x"] + b["width"] <= PHONE["width"]
            three = page.locator("img[alt='three panels']")
            assert three.evaluate("e => e.currentSrc !== e.src")
            assert three.evaluate("e => e.naturalHeight > e.naturalWidth")
            page.screenshot(path=str(tmp_path / "phone.png"), full_page=True)
            # on a desktop the wide chart and the table header are back
            page.set_viewport_size({"width": 1300, "height": 900})
            page.reload()
            assert three.evaluate("e => e.currentSrc === e.src")
            assert page.locator("#verdict-table .head").is_visible()
            assert not page.locator("#verdict-table .chip .lbl").first.is_visible()
        finally:
            browser.close()


def test_a_hostile_reference_name_neither_restyles_the_phone_page_nor_fetches_anything(tmp_path):
    """A schema-valid reference whose device name holds a carriage return and CSS: on a phone the page
    keeps its white background and asks for nothing beyond the file itself (it is promised offline)."""
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium is missing (make test installs Debian's chromium package)")
    from playwright.sync_api import sync_playwright

    from test_report import hostile_reference

    refs = report.load_references(hostile_reference(tmp_path))
    path = report.write_html(fake_doc(), tmp_path / "out", refs=refs)
    asked = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            ctx = browser.new_context(viewport=PHONE, device_scale_factor=1)

            def route(r):
                if not r.request.url.startswith(("file:", "data:")):
                    asked.append(r.request.url)
                    return r.abort()
                return r.continue_()
            ctx.route("**/*", route)
            page = ctx.new_page()
            page.goto(path.resolve().as_uri())
            page.wait_for_load_state("load")
            assert page.evaluate("getComputedStyle(document.body).backgroundImage") == "none"
            assert page.evaluate("getComputedStyle(document.body).color") != "rgb(255, 0, 0)"
        finally:
            browser.close()
    assert asked == []


def test_the_by_release_table_fits_at_1280_and_390_px(tmp_path):
    """The "By release" table of the committed columns (one CPU on three PyTorch releases): no cell scrolls
    sideways and the table is no wider than its box, at 1280 and 390 px (its "this run" column was off-screen)."""
    from test_report import ROOT

    cpu = ROOT / "results" / "cpu-amd-epyc-2-threads" / "claims.json"
    if not CHROMIUM.exists() or not cpu.is_file():
        pytest.skip("needs /usr/bin/chromium and the committed CPU column")
    from playwright.sync_api import sync_playwright

    doc = report.rejudged(report.load_doc(cpu))
    refs = report.load_references(ROOT / "results")
    if not report.by_release(doc, refs):
        pytest.skip("no machine on several releases among the committed columns")
    path = report.write_html(doc, tmp_path, refs=refs)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900}, device_scale_factor=1)
            page.goto(path.resolve().as_uri())
            for w in (1280, 390):
                page.set_viewport_size({"width": w, "height": 900})
                page.eval_on_selector_all("table.by-release details", "ds => ds.forEach(d => d.open = true)")
                tables = page.eval_on_selector_all("table.by-release", """ts => ts.map(t => ({
                    scroll: t.scrollWidth, client: t.clientWidth, right: t.getBoundingClientRect().right}))""")
                assert tables, "no By release table"
                for t in tables:
                    assert t["scroll"] <= t["client"] and t["right"] <= w, (w, t)
                width = page.evaluate("Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)")
                assert width <= w, (w, width)
        finally:
            browser.close()
