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
    assert diamonds[0].get("fill") == html.READING_COLOURS["unresolved"]  # filled: a hollow mark is not counted
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
    assert "hollow" not in legend  # every condition here is counted


def test_a_condition_shown_not_counted_is_hollow_and_uncoloured():
    pts = [html.Point("resnet50@16", 0.30, 0.25, 0.35, "agrees", band=(0.2, 0.4)),
           html.Point("mlp@256", 0.05, 0.01, 0.09, "disagrees", band=(0.2, 0.4), counted=False),
           html.Point("tiny (estimate)", 0.5, reading="disagrees", band=(0.2, 0.4), estimated=True, counted=False)]
    root = ET.fromstring(html.band_chart(pts, "%"))
    circles, diamonds = root.findall(f".//{SVG}circle"), root.findall(f".//{SVG}path")
    assert [c.get("fill") for c in circles] == [html.READING_COLOURS["agrees"], "white"]
    assert circles[1].get("stroke") == diamonds[0].get("stroke") == "#57606a" and diamonds[0].get("fill") == "white"
    lines = root.findall(f".//{SVG}line")  # the hollow one's interval is not red either
    assert lines[1].get("stroke") == "#57606a"
    legend = " ".join(" ".join(root.itertext()).split())
    assert "hollow: shown, not counted" in legend and "diamond: estimated" in legend
    assert "red disagrees" not in legend  # only the counted readings' colours are named


def test_legend_names_the_diamond_only_when_one_is_drawn():
    measured = [html.Point("a", 0.3, reading="agrees", band=(0.2, 0.4))]
    text = " ".join(ET.fromstring(html.band_chart(measured, "%")).itertext())
    assert "dot: measured" in text and "diamond" not in text and "hollow" not in text
    # one legend for several charts names what all of them draw
    est = [html.Point("b", 2.0, reading="agrees", band=(1.5, 3.0), estimated=True)]
    assert "diamond: estimated" in " ".join(ET.fromstring(html.band_chart(measured, "%", legend=measured + est)).itertext())
    assert "diamond" not in " ".join(ET.fromstring(html.band_chart(est, "x", legend=False)).itertext())


def test_a_long_label_wraps_to_two_lines_and_keeps_what_tells_it_apart():
    names = ["resnet50 speed (forward gain stored without an interval)",
             "transformer_base speed (forward gain stored without an interval) at batch 64", "unet memory"]
    pts = [html.Point(n, 0.1 * i, reading="agrees", band=(0.0, 0.5)) for i, n in enumerate(names)]
    root = ET.fromstring(html.band_chart(pts, "%"))
    texts = [t for t in root.findall(f".//{SVG}g/{SVG}text")]
    shown = [" ".join(s.text for s in t.findall(f"{SVG}tspan")) for t in texts]
    assert shown[0] == names[0] and shown[2] == "unet memory"  # 56 characters: whole, on two lines
    assert len(texts[0].findall(f"{SVG}tspan")) == 2 and len(texts[2].findall(f"{SVG}tspan")) == 1
    assert shown[1].startswith("transformer_base speed") and shown[1].endswith("…")  # past two lines: cut
    assert all(len(s.text) <= 32 for t in texts for s in t.findall(f"{SVG}tspan"))
    # a two-line row is taller: the rows do not overlap
    ys = [float(s.get("y")) for t in texts for s in t.findall(f"{SVG}tspan")]
    assert ys == sorted(ys) and min(b - a for a, b in zip(ys, ys[1:])) >= 10


def test_record_and_table_escape_and_keep_units():
    page = html.record({"peak_bytes": 3 * 2 ** 20, "rows": [{"a_ms": 0.25, "note": "<b>"}], "xs": [1.0, 2.5]})
    assert "3.00 MiB" in page and "250 \u00b5s" in page and "&lt;b&gt;" in page and "[1, 2.5]" in page
    assert html.table(["h"], [["<i>"]]) == "<table><thead><tr><th>h</th></tr></thead><tbody><tr><td>&lt;i&gt;</td></tr></tbody></table>"
    assert html.badge("holds").startswith('<span class="v" style="background:#1a7f37">')


def test_stored_text_is_shown_as_text():
    assert html.esc("a\x1b[2J\u202eb\n\tc<") == "a\\x1b[2J\\u202eb\n\tc&lt;"
    assert html.esc(None) == ""


def _tick_labels(svg):
    return [t.text for t in ET.fromstring(svg).iter(f"{SVG}text") if t.get("class") == "tick"]


def test_the_axis_has_ticks_around_every_figure():
    """C18's axis read only 0% and 50%, so its 84% had no tick near it."""
    pts = [html.Point("mlp", 0.0, -0.053, 0.051, "disagrees", band=(0.2, 0.4)),
           html.Point("resnet50", 0.84, 0.832, 0.848, "disagrees", band=(0.2, 0.4))]
    assert _tick_labels(html.band_chart(pts, "%")) == ["0%", "25%", "50%", "75%", "100%"]
    for top in (0.07, 0.9, 3.0, 24.9, 180.0):  # every axis: three or more ticks, the last at or past the largest figure
        svg = html.band_chart([html.Point("a", top, band=(1.0, 2.0))], "x")
        ticks = [float(t.rstrip("\u00d7")) for t in _tick_labels(svg)]
        assert len(ticks) >= 3 and ticks[-1] >= top, (top, ticks)


def test_the_phone_layout_puts_labels_above_rows_in_a_narrow_picture():
    """At 390 px the 560-wide picture was drawn at half size (5 px labels); the narrow one is 340 wide, its
    labels on their own lines above the rows, so it is drawn near 1:1."""
    pts = [html.Point("resnet50 speed (forward gain stored without an interval)", 0.31, 0.18, 0.40, "unresolved",
                      band=(0.25, 0.30)), html.Point("mlp@256", 0.0, reading="disagrees", band=(0.1, 0.15))]
    wide, narrow = html.band_chart(pts, "%"), html.band_chart(pts, "%", narrow=True)
    root = ET.fromstring(narrow)
    assert root.get("viewBox").split()[2] == "340" and "narrow" in root.get("class") and "wide" in wide
    labels = [t for t in root.iter(f"{SVG}text") if t.get("class") != "tick" and t.find(f"{SVG}tspan") is not None][:2]
    spans = [s for t in labels for s in t.findall(f"{SVG}tspan")]
    assert all(float(s.get("x")) < 10 for s in spans)  # from the left edge, not right-aligned beside the row
    first_mark = root.find(f".//{SVG}circle")
    assert max(float(s.get("y")) for s in labels[0].findall(f"{SVG}tspan")) < float(first_mark.get("cy")) - 4
    assert "".join(s.text for s in labels[0].findall(f"{SVG}tspan")).startswith("resnet50 speed (forward gain stored")


def test_a_label_too_long_for_two_lines_keeps_the_first_of_its_parenthesis():
    label = ("resnet50 speed (X05's spread; forward gain stored without an interval; same column: "
             "X05 +15% [+5%, +22%] at batch 32, C03 +10% at 16, +0% at 64)")
    assert html._label_lines(label) == ["resnet50 speed (X05's spread …)"]
    svg = html.band_chart([html.Point(label, 0.31, 0.18, 0.40, "unresolved", (0.25, 0.30))], "%")
    assert "same column: X05 +15%" in svg  # whole in the tooltip


def test_a_change_of_a_share_reads_in_points():
    assert html.value(0.229, "points") == "+23 points" and html.value(-0.05, "points") == "-5 points"
