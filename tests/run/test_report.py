"""claims.json (schema) and report.html (self-contained, readable in a real browser), from fake results:
no notebook and no claim check runs here."""
import json
import os
import re
from pathlib import Path

import jsonschema
import pytest

from nogradlab import claims, device, report

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "report"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]


# C14's evidence in the shape its check writes, so the report draws its chart through nogradlab.plots
GRID = [{"model_mode": m, "grad_mode": g, "max_abs_diff_vs_eval_grad": 0.5 * (m == "train"),
         "requires_grad": g == "grad", "saved_bytes": 1024 * (g == "grad"), "bn_running_stats_updated": m == "train"}
        for m in ("train", "eval") for g in ("grad", "no_grad")]


def fake_results(skip=()):
    """One Result per claim, verdicts cycling through the four words (fake: nothing measured)."""
    info = device.describe("cpu")
    out = []
    for i, c in enumerate(claims.all_claims()):
        if c.id in skip:
            continue
        evidence = {"grid": GRID} if c.id == "C14" else {"value": i}
        out.append(claims.Result(id=c.id, verdict=claims.VERDICTS[i % 4], summary=f"fake summary {i} <b>",
                                 measurements=evidence, figure=c.figure, section=c.section,
                                 kind=c.kind, paraphrase=c.paraphrase, notebook=c.notebook, device=info,
                                 torch="fake", scale="tiny", seconds=0.01))
    return out


def fake_doc(skip=(), notebooks=()):
    return report.build_doc(fake_results(skip), source="run", device="cpu", scale="tiny", notebooks=notebooks,
                            seconds=1.5)


def fake_reference(tmp_path):
    """A results/ folder holding one reference run labelled as another machine (a test fixture)."""
    doc = fake_doc(skip=("C03",))
    doc["meta"]["device"].update(device="cuda:0", type="cuda", name="Fake GPU H999")
    doc["meta"]["device_label"] = "Fake GPU H999 (cuda:0), torch fake"
    doc["meta"]["machine"] = report.machine_slug(doc["meta"]["device"])
    for c in doc["claims"]:
        if c["verdict"] == "holds":
            c["verdict"] = "does not hold"
    path = tmp_path / "results" / doc["meta"]["machine"] / "claims.json"
    report.write_json(doc, path)
    return tmp_path / "results", doc


def test_schema_file_is_a_valid_schema():
    schema = json.loads(report.SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$defs"]["claim"]["properties"]["verdict"]["enum"] == list(claims.VERDICTS) + [None]


def test_claims_json_follows_schema(tmp_path):
    doc = fake_doc()
    path = report.write_json(doc, tmp_path / "claims.json")
    loaded = json.loads(path.read_text())
    jsonschema.validate(loaded, json.loads(report.SCHEMA_PATH.read_text()))
    assert [c["id"] for c in loaded["claims"]] == claims.ids()
    assert all(c["verdict"] in claims.VERDICTS for c in loaded["claims"])
    for c in loaded["claims"]:
        assert c["device"]["type"] == "cpu" and c["torch"] and c["scale"] == "tiny" and c["notebook"]
        assert c["figure"] == claims.get(c["id"]).figure
    meta = loaded["meta"]
    assert meta["complete"] is True and sum(meta["counts"].values()) == len(claims.ids())
    assert meta["device"]["type"] == "cpu" and meta["scale"] == "tiny" and meta["machine"].startswith("cpu-")


@pytest.mark.parametrize("break_it", [
    lambda d: d["claims"][0].update(verdict="mostly"),
    lambda d: d["claims"][1].pop("measurements"),
    lambda d: d["meta"].pop("device"),
    lambda d: d["meta"].update(scale="huge"),
    lambda d: d["claims"][2].update(id="Q7"),
])
def test_schema_rejects_broken_documents(break_it):
    doc = fake_doc()
    break_it(doc)
    with pytest.raises(ValueError, match="schema"):
        report.validate(doc)


def test_claim_without_result_is_not_run():
    doc = fake_doc(skip=("C11",))
    c11 = next(c for c in doc["claims"] if c["id"] == "C11")
    assert c11["verdict"] is None and "02_inside_the_engine" in c11["summary"]
    assert doc["meta"]["counts"]["not run"] == 1 and doc["meta"]["complete"] is False
    report.validate(doc)
    page = report.render_html(doc, chart_list=[])
    assert "data-claim='C11' data-verdict='not run'" in page and "Incomplete" in page
    assert re.search(r"C11\s+not run", report.terminal_table(doc, width=100))


def test_unknown_claim_in_results_raises():
    bad = fake_results()[:1]
    bad[0].id = "C99"
    with pytest.raises(ValueError, match="allowed"):
        report.build_doc(bad, source="run", device="cpu", scale="tiny")


def test_report_is_self_contained(tmp_path):
    refs_dir, _ = fake_reference(tmp_path)
    page = report.write_html(fake_doc(), tmp_path, refs=report.load_references(refs_dir)).read_text()
    assert "<script" not in page.lower() and "<link" not in page.lower() and "@import" not in page
    assert not re.search(r"(src|href)\s*=\s*['\"]?(https?:)?//", page)
    assert not re.search(r"url\(", page)
    imgs = re.findall(r"<img src='([^']*)'", page)
    assert imgs and all(s.startswith("data:image/png;base64,") for s in imgs)
    assert "fake summary 0 &lt;b&gt;" in page  # measured text is escaped


def test_key_charts_come_from_plots_and_bad_evidence_does_not_break_the_report(capsys):
    doc = fake_doc()
    c20 = next(c for c in doc["claims"] if c["id"] == "C20")
    c20["evidence"] = {"rows": [{"workload": "mlp"}]}  # not the shape the C20 chart needs
    drawn = {title: (uri, caption) for title, uri, caption in report.charts(doc)}
    grid = next(t for t in drawn if t.startswith("C14"))
    assert drawn[grid][0].startswith("data:image/png;base64,")
    bad = next(t for t in drawn if t.startswith("C20"))
    assert drawn[bad][0] is None and "could not draw" in drawn[bad][1]
    assert "not drawn" in capsys.readouterr().err


def test_references_are_loaded_and_bad_ones_skipped(tmp_path, capsys):
    refs_dir, ref = fake_reference(tmp_path)
    (refs_dir / "broken").mkdir()
    (refs_dir / "broken" / "claims.json").write_text('{"meta": {}, "claims": []}')
    refs = report.load_references(refs_dir)
    assert [name for name, _ in refs] == [ref["meta"]["machine"]]
    assert "skipping reference" in capsys.readouterr().err
    table = report.terminal_table(fake_doc(), refs, width=120)
    assert "ref 1 = cuda-fake-gpu-h999: Fake GPU H999" in table


def test_machine_slug():
    assert report.machine_slug({"type": "cuda", "name": "NVIDIA H200", "device": "cuda:0"}) == "cuda-nvidia-h200"
    slug = report.machine_slug(device.describe("cpu"))
    assert re.fullmatch(r"cpu-[a-z0-9-]+-\d+-threads", slug)


def test_committed_reference_results_follow_the_schema():
    found = sorted((ROOT / "results").glob("*/claims.json"))
    if not found:
        pytest.skip("no reference results committed under results/")
    for path in found:
        doc = report.load_doc(path)  # raises when the file does not follow the schema
        m = doc["meta"]  # the machine's folder, or a release column of it: <machine>-torch<release>
        assert path.parent.name in (m["machine"], f"{m['machine']}-torch{m['torch'].split('+')[0]}"), path
        assert doc["meta"]["complete"], f"{path}: only complete runs belong in results/"
        assert [c["id"] for c in doc["claims"]] == claims.ids(), path


def test_unreadable_or_unknown_references_are_skipped_with_a_reason(tmp_path, capsys):
    refs_dir, ref = fake_reference(tmp_path)
    unknown = json.loads((refs_dir / ref["meta"]["machine"] / "claims.json").read_text())
    unknown["claims"][0]["id"] = "C99"
    report.validate(unknown)  # the schema allows it: only this code's registry does not know C99
    for name, write in {"unknown": lambda p: p.write_text(json.dumps(unknown)),
                        "deep": lambda p: p.write_text("[" * 100000 + "]" * 100000),
                        "fifo": lambda p: os.mkfifo(p),
                        "folder": lambda p: p.mkdir(),
                        "binary": lambda p: p.write_bytes(b"\xff\xfe\x00")}.items():
        (refs_dir / name).mkdir()
        write(refs_dir / name / "claims.json")
    refs = report.load_references(refs_dir)  # a FIFO is never opened (reading it would wait forever)
    assert [name for name, _ in refs] == [ref["meta"]["machine"]]
    err = capsys.readouterr().err.splitlines()
    why = {line.split("/")[-2]: line for line in err if line.startswith("warning: skipping reference")}
    assert sorted(why) == ["binary", "deep", "fifo", "folder", "unknown"] and len(err) == 5
    assert "unknown claim id(s) C99" in why["unknown"] and "nested too deeply" in why["deep"]
    assert "not a regular file" in why["fifo"] and "not a regular file" in why["folder"]
    assert "not UTF-8" in why["binary"]
    report.terminal_table(fake_doc(), [("m", unknown)])  # and a caller's own such reference does not crash it


def test_a_misspelled_results_folder_is_warned_about(tmp_path, capsys):
    assert report.load_references(tmp_path / "resluts") == []
    assert "does not exist" in capsys.readouterr().err


def test_by_release_lists_the_claims_whose_verdict_changed():
    """Columns of one kind of hardware on two torch releases: the view lists exactly the claims whose
    verdict differs, in release order, and the page and the terminal table show it."""
    a = fake_doc()
    b = json.loads(json.dumps(a))
    b["meta"]["torch"] = "2.9.1+cu128"
    changed = b["claims"][27]  # C28 on the older release
    changed["verdict"] = "depends" if changed["verdict"] != "depends" else "holds"
    groups = report.by_release(a, [("older", b)])
    assert len(groups) == 1 and [c["id"] for c in groups[0]["changed"]] == [changed["id"]]
    assert groups[0]["columns"][0] == ("older", "2.9.1+cu128")  # oldest release first
    page = report.render_html(a, refs=[("older", b)], chart_list=[])
    assert "id='by-release'" in page and f">{changed['id']}<" in page
    assert f"changed: {changed['id']}" in report.terminal_table(a, [("older", b)])
    assert report.by_release(a, [("same", json.loads(json.dumps(a)))]) == []  # one release: no view


HOSTILE = "\r}*{color:red}body{background:url(http://127.0.0.1:8765/x)}x{"


def hostile_reference(tmp_path, name=HOSTILE):
    """A schema-valid reference column whose device name and label try to break out of the page's CSS
    and out of a terminal's text (carriage return, form feed, quotes, backslashes, ANSI escapes)."""
    refs_dir, ref = fake_reference(tmp_path)
    path = refs_dir / ref["meta"]["machine"] / "claims.json"
    doc = json.loads(path.read_text())
    doc["meta"]["device"]["name"] = name + "\f}\"\\</style>\x1b[2J\x1b]0;pwned\x07"
    doc["meta"]["device_label"] = name + "\x1b[2J\x9b2J label"
    doc["meta"]["scale"] = "tiny"
    doc["claims"][0]["summary"] = "clears the screen \x1b[2J\x1b[H and rings \x07"
    report.validate(doc)
    path.write_text(json.dumps(doc))
    return refs_dir


def _css_strings(css):
    return re.findall(r'content:"((?:[^"\\]|\\.)*)"', css)


def test_column_labels_in_css_cannot_end_their_string_or_the_style_block():
    labels = [HOSTILE, "a\fb", "a\nb", 'say "hi"', "back\\slash", "</style><script>x</script>", "\x00\x1b[2J",
              "ordinary label (cuda-nvidia-h200)"]
    css = report._column_labels_css("t", labels)
    assert len(_css_strings(css)) == len(labels)
    for text in _css_strings(css):
        # a CSS string ends at an unescaped quote or at a newline: \n, \r or \f (CSS Syntax 4.3.5)
        assert not re.search(r'[\r\n\f"\x00-\x1f\x7f<>]', text.replace('\\"', "")), text
        assert "url(" not in text and "}" not in text and "{" not in text
    assert css.count("{") == css.count("}") == len(labels) + 1
    # the ordinary label still reads as itself on the phone: letters, digits and spaces are kept
    assert "ordinary label " in css


def test_a_hostile_reference_name_stays_text_in_the_page(tmp_path):
    refs = report.load_references(hostile_reference(tmp_path))
    page = report.render_html(fake_doc(), refs=refs, chart_list=[])
    style = page.split("<style>", 1)[1].split("</style>", 1)[0]
    assert "url(" not in style and "color:red" not in style
    assert "\r" not in style and "\f" not in style and "\x1b" not in page


def test_terminal_table_prints_a_references_control_characters_as_visible_escapes(tmp_path):
    refs = report.load_references(hostile_reference(tmp_path))
    for color in (False, True):
        table = report.terminal_table(fake_doc(), refs, width=140, color=color)
        # the only escape sequences are the table's own colours (SGR: ESC [ digits ; m)
        assert re.sub(r"\x1b\[[0-9;]*m", "", table) == re.sub(r"\x1b\[[0-9;]*m", "", table).replace("\x1b", "")
        assert "\x1b[2J" not in table and "\x07" not in table and "\x9b" not in table and "\r" not in table
        assert "\\x1b[2J" in table  # shown, not obeyed


def test_terminal_table_wraps_the_measured_column_never_cuts_it_and_names_only_the_claims_asked():
    """Issue 39: the terminal table cut "measured" at the terminal's width, and a reference line named a claim
    (C28) that was not asked for."""
    doc = fake_doc()
    long = "word " * 60 + "END"
    doc["claims"][0]["summary"] = long
    table = report.terminal_table(doc, width=80)
    assert max(len(line) for line in table.splitlines()[:20]) <= 80
    words = " ".join(line.strip() for line in table.splitlines()).split()
    # the column holds the verdict display's first line (at most 25 words; the full summary is in claims.json,
    # report.html and Result.details()), wrapped whole: none of its words is lost to the terminal's width
    first = report.glance_line(doc["claims"][0]).split()
    assert 20 <= len(first) <= 25 and words.count("word") == first.count("word") and first[-1] == "…"
    doc["claims"][0]["summary"] = "word " * 20 + "END"
    assert "END" in report.terminal_table(doc, width=80)
    # a reference whose other claims changed between releases: only the claims of this run are named
    asked = doc["claims"][:1]
    one = dict(doc, claims=asked)
    ref = json.loads(json.dumps(doc))
    for c in ref["claims"]:
        c["verdict"] = "needs re-measuring"
    text = report.terminal_table(one, [("older", ref)], width=200)
    others = [c["id"] for c in doc["claims"][1:]]
    ref_lines = [line for line in text.splitlines() if line.startswith("ref 1")]
    assert ref_lines and not any(i in ref_lines[0] for i in others)

def test_a_lone_surrogate_or_a_folder_name_not_utf8_reads_as_a_replacement_character(tmp_path):
    """A "\\ud800" escape in a column's strings, or a results folder whose name is not UTF-8: no UTF-8 writer
    can encode either, so the terminal table, the page and claims.json would crash after the checks."""
    refs_dir, ref = fake_reference(tmp_path)
    path = refs_dir / ref["meta"]["machine"] / "claims.json"
    doc = json.loads(path.read_text())
    doc["meta"]["device_label"] = "cpu \ud800 box"
    doc["meta"]["command"] = "x \udcff"
    for c in doc["claims"]:
        c["summary"] = "lone \ud800 surrogate"
        c["error"] = "e \udc80"
    path.write_text(json.dumps(doc))  # ensure_ascii: written as \\ud800 escapes, as a hostile file would be
    odd = os.fsencode(str(refs_dir)) + b"/col\xff"
    os.mkdir(odd)
    (Path(os.fsdecode(odd)) / "claims.json").write_text(json.dumps(ref))
    refs = report.load_references(refs_dir)
    assert sorted(name for name, _ in refs) == sorted([ref["meta"]["machine"], "col\ufffd"])
    report.terminal_table(fake_doc(), refs, color=False).encode("utf-8")
    report.render_html(fake_doc(), refs=refs, chart_list=[]).encode("utf-8")
    report.dumps(refs[0][1]).encode("utf-8")
    assert "cpu \ufffd box" in report.terminal_table(fake_doc(), refs, color=False, width=200)


def test_a_column_with_a_claim_twice_is_skipped_saying_so(tmp_path, capsys):
    refs_dir, ref = fake_reference(tmp_path)
    path = refs_dir / ref["meta"]["machine"] / "claims.json"
    doc = json.loads(path.read_text())
    doc["claims"].append(dict(doc["claims"][0], verdict="holds"))
    path.write_text(json.dumps(doc))
    assert report.load_references(refs_dir) == []
    assert f"claim id(s) {doc['claims'][0]['id']} appear more than once" in capsys.readouterr().err


def test_terminal_table_puts_the_summary_under_its_row_when_the_columns_leave_no_room():
    doc = fake_doc()
    refs = [(f"m{i}", doc) for i in range(4)]
    table = report.terminal_table(doc, refs, width=100)
    assert max(len(line) for line in table.splitlines() if line.startswith("     ") and line[5] != " ") <= 100
    row = next(i for i, line in enumerate(table.splitlines()) if line.startswith(doc["claims"][0]["id"]))
    assert table.splitlines()[row + 1].startswith("     ") and "fake summary" in table


def test_the_by_release_line_labels_each_verdict_with_its_column():
    """Issue 37's second audit: "torch 2.9.1 / 2.11.0 / 2.14.1: changed: C28 (depends / holds / holds / holds)"
    paired three releases with four verdicts (this run and a reference shared a release)."""
    a = fake_doc()
    b = json.loads(json.dumps(a))
    c = json.loads(json.dumps(a))
    b["meta"]["torch"], c["meta"]["torch"] = "2.9.1", a["meta"]["torch"]
    b["claims"][0]["verdict"] = "depends" if a["claims"][0]["verdict"] != "depends" else "holds"
    line = next(x for x in report.terminal_table(a, [("old", b), ("same", c)], width=200).splitlines()
                if x.startswith("by release"))
    assert "3 columns" in line and "in ref 1 torch 2.9.1" in line and f"in this run torch {a['meta']['torch']}" in line
    assert f"in ref 2 torch {a['meta']['torch']}" in line
