"""nogradlab.core.html: one markup for every display, and the band-and-dot picture as inline SVG."""
import xml.etree.ElementTree as ET

from nogradlab.core import html

SVG = "{http://www.w3.org/2000/svg}"


def test_a_figure_reads_in_its_bands_unit():
    assert html.value(1.153, "x") == "1.15\u00d7" and html.value(0.234, "%") == "23%"
    assert html.value(0.094, "%") == "9.4%" and html.value(0.0, "%") == "0%"
    assert html.value(1.153) == "1.15" and html.value(None, "x") == ""
    assert html.interval([1.05, 1.22], "x") == "[1.05\u00d7, 1.22\u00d7]" and html.interval(None, "x") == ""


def test_band_chart_draws_each_condition_against_its_band():
    pts = [html.Point("resnet50@16", 0.09, 0.06, 0.20, "disagrees", band=(0.2, 0.4)),
           html.Point("unet@8", 0.30, 0.25, 0.33, "agrees", band=(0.2, 0.4)),
           html.Point("mlp@256 (estimate)", 0.45, None, None, "unresolved", band=(0.2, 0.4), estimated=True),
           html.Point("<script>", 0.5, reading="disagrees", band=(0.6, None))]
    svg = html.band_chart(pts, "%", title="t")
    root = ET.fromstring(svg)  # well-formed: the labels are escaped
    circles = root.findall(f".//{SVG}circle")
    diamonds = root.findall(f".//{SVG}path")
    assert len(circles) == 3 and len(diamonds) == 1  # measured dots, one estimated diamond
    assert {c.get("fill") for c in circles} == {html.READING_COLOURS["agrees"], html.READING_COLOURS["disagrees"]}
    assert diamonds[0].get("stroke") == html.READING_COLOURS["unresolved"]
    assert len(root.findall(f".//{SVG}rect")) == 4  # one shaded band a row
    assert len(root.findall(f".//{SVG}line")) == 2 + 1  # two intervals and the axis
    legend = "".join(root.itertext())
    assert "grey: the article's band" in legend and "diamond: estimated" in legend and "red disagrees" in legend
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    # the dot lies left of its band when below it, inside it when it agrees
    rects = root.findall(f".//{SVG}rect")
    assert float(circles[0].get("cx")) < float(rects[0].get("x"))
    assert float(rects[1].get("x")) <= float(circles[1].get("cx")) <= float(rects[1].get("x")) + float(rects[1].get("width"))
    assert html.band_chart([], "%") == ""


def test_record_and_table_escape_and_keep_units():
    page = html.record({"peak_bytes": 3 * 2 ** 20, "rows": [{"a_ms": 0.25, "note": "<b>"}], "xs": [1.0, 2.5]})
    assert "3.00 MiB" in page and "250 \u00b5s" in page and "&lt;b&gt;" in page and "[1, 2.5]" in page
    assert html.table(["h"], [["<i>"]]) == "<table><thead><tr><th>h</th></tr></thead><tbody><tr><td>&lt;i&gt;</td></tr></tbody></table>"
    assert html.badge("holds").startswith('<span class="v" style="background:#1a7f37">')


def test_stored_text_is_shown_as_text():
    assert html.esc("a\x1b[2J\u202eb\n\tc<") == "a\\x1b[2J\\u202eb\n\tc&lt;"
    assert html.esc(None) == ""
