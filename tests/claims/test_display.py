"""The one verdict display (nogradlab.claims.display): a first line of at most 25 words, one picture of the
conditions against the article's band, the rest folded; the same in the notebook's Result, the report and
the terminal, and a figure reads the same in each."""
import statistics

import pytest

from nogradlab import claims
from nogradlab.claims import display
from nogradlab.run import report
from test_shared_conditions_and_rules import ROOT

COLUMNS = sorted((ROOT / "results").glob("*/claims.json"))


def _c09(value, ci=None):
    return claims.Result(id="C09", verdict="does not hold", figure="up to ~2.5x", summary="measured 1.15x",
                         measurements={"x": 1}, rule=claims.rule("C09"), scale="tiny",
                         conditions=[{"condition": "resnet50 12 GiB", "value": value, "ci": ci,
                                      "reading": "disagrees", "side": "below"}])


@pytest.mark.parametrize("path", COLUMNS, ids=[p.parent.name for p in COLUMNS])
def test_every_stored_entrys_first_line_holds_the_verdict_in_25_words(path):
    doc = report.rejudged(report.load_doc(path))
    lengths = []
    for c in doc["claims"]:
        line = display.headline(c)
        qualifier = f" ({c['qualifier']})" if c.get("qualifier") else ""  # the judge's: C19's "second half only"
        assert line.startswith(f"{c['verdict'] or 'not run'}{qualifier}: "), line
        assert len(line.split()) <= display.MAX_WORDS, line
        if c.get("figure"):  # the figure, or (a claim that does not hold) the side of it the figures lie
            assert (f"article {display.figure_short(c['figure'])}" in line
                    or display.side(c) and f"{display.side(c)} the article's figure" in line), line
        lengths.append(len(line.split()))
        text = display.details_text(c)
        assert text.splitlines()[0] == f"{c['id']} {line}" and c["rule"] in text
    assert statistics.median(lengths) <= display.MAX_WORDS


def test_a_speed_up_reads_the_same_in_the_first_line_the_picture_and_the_tables():
    """It read '1.15x' in a claim's summary and '1.15' in the conditions table beneath it."""
    r = _c09(1.15, [1.05, 1.22])
    assert "1.15\u00d7 [1.05\u00d7, 1.22\u00d7]" in str(r)
    box = r._repr_html_()
    assert "<td>1.15\u00d7</td><td>[1.05\u00d7, 1.22\u00d7]</td>" in box and "<td>1.15</td>" not in box
    doc = report.build_doc([r], source="claims", device="cpu", scale="tiny", only=["C09"])
    page = report.render_html(doc, chart_list=[])
    assert "<td>1.15\u00d7</td><td>[1.05\u00d7, 1.22\u00d7]</td>" in page and "<td>1.15</td>" not in page
    assert "1.15\u00d7 [1.05\u00d7, 1.22\u00d7]" in report.terminal_table(doc, width=200)


def test_the_result_shows_line_picture_then_the_folded_rest():
    r = _c09(1.15, [1.05, 1.22])
    box = r._repr_html_()
    first, picture, fold = box.index("class='glance'"), box.index("<svg"), box.index("<details class='fold'>")
    assert first < picture < fold < box.index("<b>Rule.</b>") and box.count("<svg") == 1
    assert len(str(r).split()) <= 1 + display.MAX_WORDS and "\n" not in str(r)
    assert claims.rule("C09") in r.details() and "resnet50 12 GiB: 1.15\u00d7 [1.05\u00d7, 1.22\u00d7] disagrees (below)" \
        in r.details()


def test_a_claim_without_figures_against_a_band_says_so_or_lists_its_cases():
    plain = claims.Result(id="C06", verdict="holds", summary="x * 3 inside no_grad: requires_grad False.",
                          measurements={}, rule=claims.rule("C06"))
    box = plain._repr_html_()
    assert "<svg" not in box and "no picture: the verdict rests on observations" in box
    cases = claims.Result(id="C15", verdict="holds", summary="s", measurements={}, rule=claims.rule("C15"),
                          conditions=[{"condition": "resnet50", "value": 0.0, "ci": None, "reading": "agrees"}])
    box = cases._repr_html_()
    assert "<svg" not in box and "<table class='cases'>" in box and "<th>largest difference" in box


def test_estimated_conditions_are_marked_apart_from_measured_ones():
    entry = {"id": "C18", "verdict": "does not hold", "scope": {"basis": "estimated + reference"},
             "conditions": [{"condition": "mlp@256 (estimate)", "value": 0.0, "ci": None, "reading": "disagrees"},
                            {"condition": "resnet50@32", "value": 0.3, "ci": [0.25, 0.35], "reading": "agrees"}]}
    (pts,) = display.points(entry).values()
    assert [p.estimated for p in pts] == [True, False]
    svg = display.picture_html(entry)
    assert svg.count("<path") == 1 and svg.count("<circle") == 1 and "diamond: estimated" in svg


def test_a_stored_columns_odd_conditions_are_shown_without_a_crash():
    """A stored column is read as it is: conditions that are no dict, figures that are no number, a band
    whose edges are no numbers are left out of the picture (shown as cases), never a traceback."""
    entry = {"id": "C03", "verdict": "needs re-measuring", "figure": "20-40 %", "summary": "s",
             "conditions": ["x", None, {"condition": None, "value": "9", "ci": ["a", "b"], "reading": 3},
                            {"condition": "c", "value": True, "ci": [True, False]},
                            {"condition": "d", "value": 0.3, "ci": [0.2], "band": {"edges": ["a", None], "unit": "%"}},
                            {"condition": "e", "value": 0.3, "band": {"edges": [0.2, 0.4], "unit": "?"}}]}
    assert display.points(entry) == {}
    assert len(display.headline(entry).split()) <= display.MAX_WORDS
    page = display.glance_html(entry) + display.folded_html(entry) + display.details_text(entry)
    assert "<svg" not in page and "<table class='cases'>" in page
    (pts,) = display.points(dict(entry, conditions=[{"condition": "f", "value": 0.3, "ci": [0.2, 0.4],
                                                     "reading": "agrees"}])).values()
    assert pts[0].band == (0.2, 0.4) and (pts[0].lo, pts[0].hi) == (0.2, 0.4)  # the rule's band


def test_the_terminal_row_is_the_first_line_with_a_long_figure_shortened():
    r = _c09(1.15, [1.05, 1.22])
    r.figure = "ResNet-50 30-35 % / 25-30 % / 1.8-2.2x; Transformer-base 25-30 % / 20-25 % / 1.6-1.9x"
    doc = report.build_doc([r], source="claims", device="cpu", scale="tiny", only=["C09"])
    rows = report.terminal_table(doc, width=120).splitlines()[1:-1]
    assert "Transformer" not in "\n".join(rows) and len(rows) <= 3, rows
    line = display.headline(r.to_dict())
    assert line.startswith("does not hold: measured below the article's figure (ResNet-50 30-35 % / 25-30 …)")
    assert line.endswith(": 1.15\u00d7 [1.05\u00d7, 1.22\u00d7] (resnet50 12 GiB)")


def _entry(doc, cid):
    return next(c for c in doc["claims"] if c["id"] == cid)


@pytest.mark.parametrize("path", COLUMNS, ids=[p.parent.name for p in COLUMNS])
def test_every_judged_condition_says_whether_it_is_estimated(path):
    """Every judge says where each condition's figure comes from (rules.read_conditions asks for it);
    the display reads the flag, not a guess from the verdict's basis or the row's name."""
    doc = report.rejudged(report.load_doc(path))
    for c in doc["claims"]:
        for cond in c.get("conditions") or []:
            assert isinstance(cond.get("estimated"), bool), (c["id"], cond.get("condition"))
    c08 = _entry(doc, "C08")  # the allocator model's estimates, wherever judged
    assert c08["conditions"] and all(x["estimated"] for x in c08["conditions"])
    x05 = _entry(doc, "X05")  # timed
    assert x05["conditions"] and not any(x["estimated"] for x in x05["conditions"])
    c20 = _entry(doc, "C20")  # memory and batch estimated on a virtual CUDA device, speed timed
    for x in c20["conditions"]:
        assert x["estimated"] == (" speed" not in x["condition"]), x["condition"]


def test_c20s_memory_and_batch_cells_are_diamonds_and_its_speed_cells_dots():
    """The H200 column's verdict basis is 'measured', and its memory and batch rows were drawn as
    measured dots; they are the allocator model's estimates."""
    e = _entry(report.rejudged(report.load_doc(ROOT / "results" / "cuda-nvidia-h200" / "claims.json")), "C20")
    assert e["scope"]["basis"] == "measured"
    pts = [p for ps in display.points(e).values() for p in ps]
    assert {p.label.split(" ")[1]: p.estimated for p in pts} == {"memory": True, "batch": True, "speed": False}
    svg = display.picture_html(e)
    assert svg.count("class='est'") == 8 and svg.count("class='meas'") == 4
    assert svg.count("diamond: estimated") == 1 and "dot: measured" in svg  # one legend, under the last chart


def test_the_flag_wins_over_the_guess_and_a_stored_row_without_it_is_guessed():
    cond = {"condition": "resnet50@16 (estimate)", "value": 0.3, "ci": None, "reading": "agrees"}
    old = {"id": "C18", "verdict": "holds", "scope": {"basis": "measured"}, "conditions": [cond]}
    assert [p.estimated for p in display.points(old)["%"]] == [True]  # from its name
    flagged = dict(old, conditions=[dict(cond, estimated=False)])
    assert [p.estimated for p in display.points(flagged)["%"]] == [False]
    assert "diamond" not in display.picture_html(flagged) and "<path" not in display.picture_html(flagged)
    basis = {"id": "C18", "verdict": "holds", "scope": {"basis": "estimated"},
             "conditions": [dict(cond, condition="resnet50@16"), dict(cond, condition="unet@8", estimated=False)]}
    assert [p.estimated for p in display.points(basis)["%"]] == [True, False]


@pytest.mark.parametrize("path", COLUMNS, ids=[p.parent.name for p in COLUMNS])
def test_a_stored_column_as_written_still_displays(path):
    """The stored claims.json, not judged again: its rows predate the flag and are guessed; nothing fails."""
    for c in report.load_doc(path)["claims"]:
        assert len(display.headline(c).split()) <= display.MAX_WORDS
        page = display.glance_html(c) + display.folded_html(c) + display.details_text(c)
        if display.points(c):
            assert "<svg" in page and "grey: the article&#x27;s band" in page


def test_conditions_shown_and_not_counted_are_hollow_and_left_out_of_the_count():
    e = _entry(report.rejudged(report.load_doc(ROOT / "results" / "cuda-nvidia-h200" / "claims.json")), "C03")
    shown = [x for x in e["conditions"] if x.get("deciding") is False]
    assert shown and all(x["condition"].startswith("mlp@") for x in shown)
    svg = display.picture_html(e)
    assert "hollow: shown, not counted" in svg and svg.count("fill='white' stroke='#57606a'") == len(shown)
    counted = len(e["conditions"]) - len(shown)
    assert f"over {counted} conditions" in display.measured_text(e)
    assert "(shown, not counted)" in display.conditions_html(e) and ", shown, not counted" in display.details_text(e)
    # C21's series on this machine (tiny, real runs) is a row now, shown and not counted
    c21 = _entry(report.rejudged(report.load_doc(COLUMNS[0])), "C21")
    local = [x for x in c21["conditions"] if x.get("deciding") is False]
    assert local and all(x["condition"].startswith("measured") and not x["estimated"] for x in local)
    assert "hollow: shown, not counted" in display.picture_html(c21)
    assert f"over {len(c21['conditions']) - len(local)} conditions" in display.measured_text(c21)


def test_a_figure_that_does_not_hold_says_on_which_side_it_lies():
    """A reader saw "does not hold" on C09 (6.28x against ~2.5x) and could not tell more from less; the
    first line now says which side of the article's figure the disagreeing conditions lie."""
    doc = report.rejudged(report.load_doc(COLUMNS[0]))
    assert display.headline(_entry(doc, "C09")).startswith(
        "does not hold: estimated above the article's figure (up to ~2.5x): 6.28\u00d7 (resnet50 12 GiB)")
    assert display.headline(_entry(doc, "C18")).startswith(
        "does not hold: estimated above and below the article's figure (20-40 %): 0% to 84%")
    below = _c09(1.15, [1.05, 1.22]).to_dict()
    assert display.headline(below).startswith("does not hold: measured below the article's figure (up to ~2.5x)")
    # a verdict that is no "does not hold" keeps its plain form
    assert display.headline(dict(below, verdict="inconclusive")).startswith("inconclusive: article up to ~2.5x; ")


def test_the_first_lines_verb_follows_the_conditions_estimated_flags():
    """C18's first line said "Measured" over a picture of diamonds ("diamond: estimated")."""
    doc = report.rejudged(report.load_doc(COLUMNS[0]))
    c18, c20, c04 = _entry(doc, "C18"), _entry(doc, "C20"), _entry(doc, "C04")
    assert "measured" not in display.headline(c18) and report.glance_line(c18).startswith("Estimated above")
    assert display.headline(c20).startswith("does not hold: measured and estimated above and below")
    assert len(display.headline(c20).split()) <= display.MAX_WORDS and "unresolved" in display.headline(c20)
    assert display.headline(c04) == "depends: estimated over 2 conditions: 1 agree, 1 below"
    timed = dict(c18, conditions=[dict(x, estimated=False) for x in c18["conditions"]])
    assert display.headline(timed).startswith("does not hold: measured above and below")


def test_a_case_without_a_band_carries_its_quantity_and_says_why_there_is_no_chart():
    """C04's cases read "unet 12 GiB: 4.36" with no unit, and nothing said why there was no chart."""
    doc = report.rejudged(report.load_doc(COLUMNS[0]))
    pic = display.picture_html(_entry(doc, "C04"))
    assert "<th>case</th><th>largest batch, no_grad / grad</th><th>reading</th>" in pic
    assert "<td>unet 12 GiB</td><td>4.36\u00d7</td>" in pic and "<td>mlp 12 GiB</td><td>1.00\u00d7</td>" in pic
    assert pic.index("no chart: the article gives no figure") < pic.index("<table class='cases'>")
    assert "largest batch, no_grad / grad 4.36\u00d7" in display.details_text(_entry(doc, "C04"))


def test_an_open_band_reads_above_its_edge_in_a_terminal():
    entry = {"id": "C21", "verdict": "holds", "conditions": [
        {"condition": "long sequences", "value": 0.55, "ci": None, "reading": "agrees",
         "band": {"kind": "more than", "edges": [0.4, None], "unit": "%"}}]}
    text = "\n".join(display.picture_text(entry))
    assert "band: above 40" in text and "to up" not in text


def test_a_picture_decided_by_a_reference_column_says_where_its_dots_were_measured():
    """C03's dots on a CPU run are the reference GPU's timings: the legend said 'dot: measured' under a hand
    cell that had just timed this machine (a learner's sixth read)."""
    doc = report.rejudged(report.load_doc(ROOT / "results" / "cpu-amd-epyc-2-threads" / "claims.json"))
    c03 = next(c for c in doc["claims"] if c["id"] == "C03")
    assert c03["scope"]["basis"] == "reference"
    assert "dot: measured on the reference machine" in display.picture_html(c03)


def test_c25_counts_its_outputs_in_words_that_agree():
    from nogradlab.claims.nb07_production_serving import _outputs

    assert (_outputs(1), _outputs(2)) == ("1 output", "2 outputs")


def test_c19s_case_figure_says_points_and_c10_names_its_warnings():
    doc = report.rejudged(report.load_doc(ROOT / "results" / "cpu-amd-epyc-2-threads" / "claims.json"))
    c19 = next(c for c in doc["claims"] if c["id"] == "C19")
    assert "rise of the share saved +23 points agrees" in "\n".join(display.picture_text(c19))
    c10 = claims.check("C10", device="cpu", scale="tiny")
    assert "reading its .volatile: UserWarning: volatile was removed" in c10.summary
    assert "warning(s)" not in c10.summary
