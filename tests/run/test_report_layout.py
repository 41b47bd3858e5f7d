"""report.html measured in headless Chromium, built from the committed reference columns (results/) as a
real `make run` on the 2-core CPU shows them: the page reads in a minute. At 1280 px no visible cell of
four or more words is squeezed under 120 px and every claim is listed within the first 4,000 px; at 390 px
nothing scrolls sideways, with every claim opened too. Columns of one machine on several PyTorch releases
fold into the by-release view; each column's age and protocol are shown."""
import contextlib
import json

import pytest

from nogradlab import claims, report
from test_report import CHROMIUM, CHROMIUM_ARGS, ROOT, fake_doc, fake_reference


@contextlib.contextmanager
def _opened(path, width: int = 1280, height: int = 900):
    """A headless Chromium page at ``width`` x ``height`` on the report at ``path`` (skipped without Chromium)."""
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium is missing (make test installs Debian's chromium package)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height}, device_scale_factor=1)
            page.goto(path.resolve().as_uri())
            yield page
        finally:
            browser.close()

CPU = ROOT / "results" / "cpu-amd-epyc-2-threads" / "claims.json"

# the visible cells of the page: table cells and the claim rows' cells, each with its width and words
CELLS = """() => [...document.querySelectorAll('td, th, .cell')].filter(e => e.offsetParent !== null &&
  getComputedStyle(e).visibility !== 'hidden').map(e => ({text: e.innerText.trim(), width: e.getBoundingClientRect().width,
  tag: e.tagName + '.' + e.className}))"""


@pytest.fixture(scope="module")
def stored_report(tmp_path_factory):
    if not CPU.is_file():
        pytest.skip("no committed CPU reference column")
    out = tmp_path_factory.mktemp("report")
    doc = report.rejudged(report.load_doc(CPU))  # this run: the 2-core CPU column, as `make run` made it
    refs = report.load_references(ROOT / "results")
    return report.write_html(doc, out, refs=refs), doc, refs


@pytest.mark.integration
def test_one_machine_on_several_releases_folds_into_the_by_release_view(stored_report):
    _, doc, refs = stored_report
    shown, folded = report.shown_columns(refs)
    machines = [r["meta"]["machine"] for _, r in shown]
    assert len(machines) == len(set(machines))  # one chip column per machine and scale
    cpu = [(n, r["meta"]["torch"]) for n, r in refs if r["meta"]["machine"] == "cpu-amd-epyc-2-threads"]
    if len(cpu) > 1:
        newest = max(cpu, key=lambda nt: report._release_key(nt[1]))[0]
        assert newest in [n for n, _ in shown] and all(n in [f for f, _ in folded] for n, _ in cpu if n != newest)
    page = report.render_html(doc, refs, chart_list=[])
    assert page.count("<details class='claim'") == len(claims.ids())
    assert page.count("class='cell chip'") == len(claims.ids()) * (1 + len(shown))


def test_a_columns_age_protocol_and_old_evidence_are_shown_and_their_absence_tolerated(tmp_path):
    refs_dir, _ = fake_reference(tmp_path)
    path = next(refs_dir.glob("*/claims.json"))
    ref = json.loads(path.read_text())
    ref["meta"].pop("protocol", None)  # a column from before protocols were recorded
    path.write_text(json.dumps(ref))
    page = report.render_html(fake_doc(), report.load_references(refs_dir), chart_list=[])
    assert "protocol not recorded" in page and "same day as this run" in page
    ref["meta"]["protocol"] = claims.PROTOCOL  # today's protocol
    ref["meta"]["generated"] = "2026-01-10T10:00:00+00:00"
    this = fake_doc()
    this["meta"]["generated"] = "2026-01-13T09:00:00+00:00"
    judged = report.rejudged(ref)
    judged["claims"][0]["scope"] = {"text": "measured long ago", "stale": "protocol 1, before warm-up was fixed"}
    page = report.render_html(this, [("old-gpu", judged)], chart_list=[])
    assert f"protocol {claims.PROTOCOL}" in page and "3 days before this run" in page
    n_old = sum(1 for c in judged["claims"] if report._stale(c))  # this one, and any decided by an older column
    assert n_old >= 1 and f"{n_old} claim(s) on old evidence" in page and "protocol 1, before warm-up was fixed" in page
    assert "<sup class='old'" in page


@pytest.mark.integration
def test_report_reads_in_a_minute_at_1280_and_fits_a_390px_phone(stored_report):
    path, _, _ = stored_report
    with _opened(path, 1280, 900) as page:
        squeezed = [c for c in page.evaluate(CELLS) if len(c["text"].split()) >= 4 and c["width"] < 120]
        assert squeezed == [], squeezed[:5]
        bottoms = page.eval_on_selector_all(
            "#verdict-table details.claim > summary",
            "els => els.map(e => e.getBoundingClientRect().bottom + window.scrollY)")
        assert len(bottoms) == len(claims.ids())
        assert max(bottoms) <= 4000, f"the last claim ends at {max(bottoms):.0f} px"
        # the article's table against this run leads, above the claims
        lead = page.locator(".lead-chart img")
        if lead.count():
            assert lead.bounding_box()["y"] < page.locator("#claims").bounding_box()["y"]

        width = "Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)"
        for w in (1920, 1024, 800):  # wider and narrower desktops: nothing squeezed, nothing sideways
            page.set_viewport_size({"width": w, "height": 900})
            squeezed = [c for c in page.evaluate(CELLS) if len(c["text"].split()) >= 4 and c["width"] < 120]
            assert page.evaluate(width) <= w and (w < 1024 or squeezed == []), (w, squeezed[:3])
        page.set_viewport_size({"width": 390, "height": 844})
        page.reload()
        width = "Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)"
        assert page.evaluate(width) <= 390
        page.eval_on_selector_all("details", "ds => ds.forEach(d => d.open = true)")
        assert page.evaluate(width) <= 390


# an opened claim's words outside its folded parts: innerText skips the contents of a closed <details>
# (an axis's numbers, class 'tick', are not words to read: a chart with ticks that cover its figures has more)
OPENED_WORDS = """() => [...document.querySelectorAll('#verdict-table details.claim')].map(d => { d.open = true;
  const ticks = [...d.querySelectorAll('.picture text.tick')].filter(t => t.getClientRects().length).length;
  const n = d.innerText.split(/\\s+/).filter(w => w).length - ticks; d.open = false;
  return {id: d.dataset.claim, words: n, picture: !!d.querySelector('.picture svg')}; })"""


@pytest.mark.integration
def test_an_opened_row_reads_in_120_words_with_its_picture_and_the_failing_figures_lead(stored_report):
    """Each opened claim of the committed columns reads at most 120 words outside its folded record (it read
    a median of 654 and up to 3,871 when everything lay open); every claim whose conditions have figures
    against an article's band shows them as a picture; the top names the article's figures that do not hold."""
    import statistics

    from nogradlab.claims import display

    path, doc, _ = stored_report
    with _opened(path, 1280, 900) as page:
        rows = page.evaluate(OPENED_WORDS)
        top = page.locator("#failing-figures").bounding_box()["y"]
        assert top < page.locator("#where").bounding_box()["y"]
        failing = page.locator("#failing-figures").inner_text()
    assert len(rows) == len(claims.ids())
    words = [r["words"] for r in rows]
    assert max(words) <= 120, sorted(rows, key=lambda r: -r["words"])[:3]
    assert statistics.median(words) <= 80, statistics.median(words)
    by_id = {c["id"]: c for c in doc["claims"]}
    with_band = {r["id"] for r in rows if display.points(by_id[r["id"]])}
    assert with_band and {r["id"] for r in rows if r["picture"]} == with_band
    for cid, fig, _line in report.failing_figures(doc):
        assert by_id[cid]["verdict"] == "does not hold" and cid in failing and fig in failing


def test_the_tops_failing_figures_and_the_verdict_count_reconcile(stored_report):
    """The top listed 6 of the article's figures that do not hold, the verdict count said 8 "does not
    hold": the top now names the other claims that do not hold (they have no figure of the article's)."""
    path, doc, _ = stored_report
    page = path.read_text()
    top = page[page.index("id='failing-figures'"):page.index("id='where'")]
    n = doc["meta"]["counts"]["does not hold"]
    figures = report.failing_figures(doc)
    others = [c["id"] for c in doc["claims"] if c["verdict"] == "does not hold" and not c.get("figure")]
    assert others and len(figures) + len(others) == n
    assert f"({len(figures)}):" in top and f"{n} claims do not hold in all: these {len(figures)} figures" in top
    assert all(f"href='#claim-{cid}'" in top for cid in others)


# each visible label of the opened claims' pictures: its drawn font size (the SVG's scale times its 11 px)
LABEL_PX = """() => [...document.querySelectorAll('#verdict-table .picture svg text')].filter(t =>
  t.getClientRects().length).map(t => ({text: t.textContent.slice(0, 30),
  px: t.ownerSVGElement.getScreenCTM().a * parseFloat(getComputedStyle(t).fontSize)}))"""


def test_a_pictures_text_stays_readable_on_a_390px_phone(stored_report):
    """At 390 px C18's labels were drawn about 5 px tall (the 560-wide picture squeezed to half size)."""
    path, _, _ = stored_report
    with _opened(path, 390, 844) as page:
        page.eval_on_selector_all("#verdict-table details.claim", "ds => ds.forEach(d => d.open = true)")
        labels = page.evaluate(LABEL_PX)
        width = page.evaluate("Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)")
        page.set_viewport_size({"width": 1280, "height": 900})
        wide = page.evaluate(LABEL_PX)
    assert len(labels) > 50 and width <= 390
    small = sorted(labels, key=lambda t: t["px"])[:3]
    assert small[0]["px"] >= 9.5, small
    assert min(t["px"] for t in wide) >= 10.5  # the wide layout at 1280 px: drawn at its own size
