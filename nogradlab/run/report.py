"""claims.json and report.html: the verdicts of one run, beside reference runs on other hardware.

    doc = report.build_doc(results, source="claims", device="cpu", scale="tiny")
    report.validate(doc)                     # against nogradlab/run/schema/claims.schema.json
    print(report.terminal_table(doc))
    report.write_html(doc, "build", refs=report.load_references("results"))

``claims.json`` lists every registered claim (id order) with its verdict, the measured summary and
evidence, the article's figure, the device and torch version it was measured with, the scale and the
notebook that checked it; a claim no check reached has verdict ``null`` and is shown as "not run".
Its ``meta`` block names the machine, the run and each notebook's outcome.

``report.html`` is one self-contained page (inline CSS, charts as base64 PNG, no scripts, nothing
fetched) that reads in a minute: at the top the article's figures that do not hold here, what ran where
(this run and each reference column of ``results/<machine>/claims.json``, with its age, protocol and
verdict counts) and the article's table against this run's figures (the claim that leads the report:
``chart_rank=0``); then one compact row per claim, the verdict display of :mod:`nogradlab.claims.display`
(id, claim, the article's figure, the first line's measured words, a verdict chip for this run and each
reference column), which opens on its picture (the conditions against the article's band, inline SVG)
with the rule, the evidence, the measured figures, the raw record and each column's reading folded
under it (``<details>``); then the other charts, the by-release view (columns of one
machine on several PyTorch releases fold into it), the notebooks with relative links, the hardware.
Text from a stored column is shown as text: it can neither end a CSS string nor drive a terminal.
"""
from __future__ import annotations

import base64
import datetime as _dt
import io
import json
import os
import re
import shutil
import textwrap
import sys
import unicodedata
from pathlib import Path

from nogradlab import __version__
from nogradlab import claims as _claims
from nogradlab.claims import display as _display
from nogradlab.core import html as _html
from nogradlab.core import device as _device
from nogradlab.core import format as _format
from nogradlab.run import outdir as _outdir

__all__ = ["SCHEMA_PATH", "NOT_RUN", "schema", "validate", "machine_slug", "build_doc", "load_doc",
           "write_json", "load_references", "missing_entry", "verdict_word", "terminal_table",
           "render_html", "write_html", "charts", "color_default", "cell_name", "rejudged", "merge_docs",
           "git_commit", "css_string", "plain_text", "shown_columns", "plain_line", "glance_line", "failing_figures",
           "by_release"]

SCHEMA_PATH = Path(__file__).with_name("schema") / "claims.schema.json"
NOT_RUN = "not run"
COLOURS = dict(_html.VERDICT_COLOURS)  # one colour per verdict, in the report and the notebook's box alike
_ANSI = {"holds": "32", "does not hold": "31", "depends": "33", "inconclusive": "35", "not testable": "90",
         "needs re-measuring": "90;3", NOT_RUN: "35;1"}


# --------------------------------------------------------------------------- claims.json

def schema() -> dict:
    """The JSON schema every claims.json follows (nogradlab/run/schema/claims.schema.json)."""
    return json.loads(SCHEMA_PATH.read_text())


def validate(doc: dict) -> None:
    """Raise ``ValueError`` naming the first problem when ``doc`` does not follow the schema.

    Uses ``jsonschema`` when installed; without it only the verdict words are checked.
    """
    try:
        import jsonschema
    except ImportError:  # a plain install without the dev extras
        for c in doc.get("claims", []):
            if c.get("verdict") not in _claims.VERDICTS + (None,):
                raise ValueError(f"claim {c.get('id')}: verdict {c.get('verdict')!r}; allowed: "
                                 f"{', '.join(_claims.VERDICTS)} or null") from None
        return
    cls = jsonschema.validators.validator_for(schema())
    errors = sorted(cls(schema()).iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        where = "/".join(str(p) for p in e.absolute_path) or "(top)"
        raise ValueError(f"claims.json does not follow the schema at {where}: {e.message} "
                         f"({len(errors)} problem(s))")


def machine_slug(info: dict) -> str:
    """A folder name for the hardware in ``info`` (``device.describe``), e.g. ``cpu-amd-epyc-2-threads``
    or ``cuda-nvidia-h200``."""
    name = info.get("name") or info.get("device") or "unknown"
    text = f"{info.get('type', 'device')} {name}"
    if info.get("type") == "cpu" and info.get("threads"):
        text += f" {info['threads']} threads"
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return re.sub(r"-+", "-", slug) or "unknown"


def missing_entry(claim, reason: str) -> dict:
    """The claims.json entry of a claim without a verdict (``reason`` says why)."""
    return {"id": claim.id, "section": claim.section, "paraphrase": claim.paraphrase, "kind": claim.kind,
            "figure": claim.figure, "verdict": None, "summary": reason, "measurements": {}, "scope": {}, "device": {},
            "torch": "", "scale": "", "notebook": "", "seconds": 0.0, "error": reason,
            "rule": _claims.rule(claim.id)}


def _entry(result) -> dict:
    from nogradlab.claims import rules as _rules

    d = dict(result.to_dict() if hasattr(result, "to_dict") else result)
    d.setdefault("error", None)
    if "measurements" not in d:
        d["measurements"] = d.pop("evidence", None) or {}
    d.pop("evidence", None)
    d.setdefault("scope", {})
    if not d.get("rule"):  # made in this run, by this code: its rule is this code's
        d["rule"] = _claims.rule(d["id"])
    d["rule_digest"] = _rules.digest(d["id"]) if d["rule"] == _claims.rule(d["id"]) else _digest_text(d["rule"])
    return d


def _digest_text(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:12]


def build_doc(results, *, source: str, device="auto", scale: str = "auto", notebooks=(),
              seconds: float = 0.0, command: str = "", interrupted: bool = False,
              missing_reason: str = "no check ran for this claim", only=None, settings=None) -> dict:
    """The claims.json document for ``results`` (``Result`` objects or their dicts; a dict with
    ``verdict`` None and an ``error`` records a check that raised).

    Every registered claim appears, in id order; a claim absent from ``results`` gets verdict None
    with ``missing_reason`` (its expected notebook is named). When one id appears several times the
    last result wins. ``notebooks`` are the per-notebook records of a run (see the schema).
    ``only`` limits the document to those claim ids (``claims --ids``). ``settings``: the run's
    :class:`nogradlab.core.settings.Settings`, resolved once at its entry (then ``device`` and ``scale``
    are not resolved again); without it they are resolved here.
    """
    if source not in ("run", "claims"):
        raise ValueError(f"source must be 'run' or 'claims', got {source!r}")
    if settings is not None:
        dev, scale = settings.device, settings.scale
    else:
        from nogradlab.core import workloads

        dev = _device.resolve(device)
        scale = workloads.resolve_scale(scale, dev)
    info = _device.describe(dev)
    by_id = {}
    for r in results:
        e = _entry(r)
        _claims.get(e["id"])  # unknown ids raise
        by_id[e["id"]] = e
    entries = []
    wanted = _claims.all_claims() if only is None else [_claims.get(c) for c in only]
    for claim in wanted:
        if claim.id in by_id:
            entries.append(by_id[claim.id])
        else:
            where = f" (expected in notebook {claim.notebook})" if source == "run" and claim.notebook else ""
            entries.append(missing_entry(claim, missing_reason + where))
    words = [verdict_word(e["verdict"]) for e in entries]
    counts = {w: words.count(w) for w in COLOURS if w in words}  # in the fixed verdict order
    nbs = [dict(n) for n in notebooks]
    # complete means every registered claim has a verdict: a run of some claims (--ids) is never complete
    complete = (not interrupted and counts.get(NOT_RUN, 0) == 0 and len(entries) == len(_claims.ids())
                and all(n["status"] == "ok" for n in nbs))
    import torch

    from nogradlab.claims import rules as _rules

    commit = git_commit()
    meta = {"schema_version": 3, "protocol": _claims.PROTOCOL, "rules_digest": _rules.digest(),
            **({"nogradlab_commit": commit} if commit else {}),
            "generated": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
            "source": source, "command": command, "device": info, "device_label": _device.label(info),
            "machine": machine_slug(info), "torch": torch.__version__, "scale": scale,
            "nogradlab": __version__, "seconds": round(float(seconds), 2), "complete": complete,
            "interrupted": bool(interrupted), "counts": counts, "notebooks": nbs}
    return {"meta": meta, "claims": entries}


def dumps(doc: dict) -> str:
    """The text of a claims.json."""
    return json.dumps(doc, indent=1, default=str) + "\n"


def git_commit(root=None) -> "str | None":
    """The git commit of the nogradlab checkout (short hash, ``+dirty`` when files differ), or None
    when it is not a git checkout or git is missing."""
    import subprocess

    root = Path(root) if root else Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10)
        return head.stdout.strip() + ("+dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def merge_docs(docs, *, names=(), note: str = "", commit: "str | None" = None) -> dict:
    """One claims.json from partial runs of the same machine and scale (e.g. a reference run split
    in two by its time budget). Per claim, the entry with a verdict wins (a later document over an
    earlier one when both have one); counts, ``complete`` and ``seconds`` are recomputed;
    ``merged_from`` lists ``names``. Documents from different machines or scales are refused.
    The result keeps the lowest ``schema_version`` of its inputs (a v1 input has no rules)."""
    docs = list(docs)
    if not docs:
        raise ValueError("merge_docs needs at least one document")
    for d in docs:
        validate(d)
    first = docs[0]["meta"]
    for d in docs[1:]:
        m = d["meta"]
        if (m["machine"], m["scale"], m["torch"]) != (first["machine"], first["scale"], first["torch"]):
            raise ValueError(f"cannot merge runs of different machines, scales or torch versions: "
                             f"{first['machine']}/{first['scale']}/{first['torch']} vs "
                             f"{m['machine']}/{m['scale']}/{m['torch']}")
    by_id = {}
    for d in docs:
        for c in d["claims"]:
            if c["id"] not in by_id or c["verdict"] is not None:  # a missing verdict never replaces one
                by_id[c["id"]] = c
    entries = [by_id[c.id] for c in _claims.all_claims() if c.id in by_id]
    words = [verdict_word(e["verdict"]) for e in entries]
    counts = {w: words.count(w) for w in COLOURS if w in words}
    meta = dict(first)
    meta.update(schema_version=min(d["meta"]["schema_version"] for d in docs),
                generated=max(d["meta"]["generated"] for d in docs),
                seconds=round(sum(d["meta"]["seconds"] for d in docs), 2), counts=counts,
                complete=counts.get(NOT_RUN, 0) == 0 and len(entries) == len(_claims.ids())
                and not any(d["meta"].get("interrupted") for d in docs),
                interrupted=any(d["meta"].get("interrupted") for d in docs),
                command=" + ".join(d["meta"].get("command", "") for d in docs),
                notebooks=[n for d in docs for n in d["meta"]["notebooks"]])
    protocols = {_claims.evidence.protocol_of(d["meta"]) for d in docs}
    meta.pop("protocol", None)  # a merge of several (or unrecorded) protocols records none: it is older evidence
    if len(protocols) == 1 and None not in protocols:
        meta["protocol"] = protocols.pop()
    if names:
        meta["merged_from"] = [str(n) for n in names]
    if note:
        meta["note"] = note
    if commit:
        meta["nogradlab_commit"] = commit
    if meta["schema_version"] < 2:
        meta.pop("rules_digest", None)
    doc = {"meta": meta, "claims": entries}
    validate(doc)
    return doc


def write_json(doc: dict, path) -> Path:
    """Validate ``doc`` and write it to ``path`` (folders created); returns the path."""
    validate(doc)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return _outdir.write_text_atomic(path, dumps(doc))


def load_doc(path) -> dict:
    """Read and validate a claims.json."""
    doc = json.loads(Path(path).read_text())
    validate(doc)
    return doc


def _reference(p: Path) -> dict:
    """One reference claims.json, or ``ValueError`` saying why it cannot be shown beside this run."""
    if not p.is_file():  # a folder, a FIFO (reading it would wait forever), a device, a dangling link
        raise ValueError("not a regular file" if p.exists() else "no such file")
    try:
        doc = _unicode(load_doc(p))
    except RecursionError:
        raise ValueError("nested too deeply to be a claims.json") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 text ({e.reason})") from None
    unknown = sorted({c["id"] for c in doc["claims"]} - set(_claims.ids()))
    if unknown:
        raise ValueError(f"unknown claim id(s) {', '.join(unknown)} (this nogradlab knows "
                         f"{_claims.ids()[0]}..{_claims.ids()[-1]})")
    ids = [c["id"] for c in doc["claims"]]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise ValueError(f"claim id(s) {', '.join(twice)} appear more than once; a column holds one entry a "
                         "claim, and which of them to show cannot be told")
    return doc


_SURROGATE = re.compile("[\ud800-\udfff]")


def _unicode(obj):
    """``obj`` with every lone surrogate in its strings (keys too) as U+FFFD: a ``"\\ud800"`` escape in a
    stored column's JSON, or a folder name's byte that is not UTF-8 (Python keeps it as one). No UTF-8
    writer (a terminal, report.html, claims.json) can encode one, so it would crash the command after its
    work; shown as the replacement character, the rest of the text reads as it is."""
    if isinstance(obj, str):
        return _SURROGATE.sub("\ufffd", obj)
    if isinstance(obj, dict):
        return {_unicode(k): _unicode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_unicode(v) for v in obj]
    return obj


def rejudged(doc: dict) -> dict:
    """``doc`` with every entry judged again by today's rules (:func:`nogradlab.claims.judge_entry`):
    a stored verdict is never shown as it is; an entry that lacks what today's rule reads becomes
    "needs re-measuring". ``meta['judged_by']`` records the rules' fingerprint, ``meta['age']`` how old the
    column is (:func:`nogradlab.claims.column_age`: ``protocol``, ``stale``, ``measured_on``, ``commit``,
    ``torch``, ``label``) and ``meta['conflicts']`` the quantities it contradicts itself on
    (:func:`nogradlab.claims.column_conflicts`)."""
    from nogradlab.claims import rules as _rules

    meta = dict(doc["meta"])
    # how old the column is and where it contradicts itself (nogradlab.claims.evidence), for the report to show
    meta["age"] = _claims.column_age(meta)
    meta["conflicts"] = conflicts = _claims.column_conflicts(doc)
    column = _claims.evidence.readings(doc["claims"], _claims.evidence.protocol_of(meta))
    entries = [_claims.judge_entry(c, meta, conflicts=conflicts, readings=column) for c in doc["claims"]]
    words = [verdict_word(e["verdict"]) for e in entries]
    meta["counts"] = {w: words.count(w) for w in COLOURS if w in words}
    meta["judged_by"] = _rules.digest()
    return {"meta": meta, "claims": entries}


def load_references(results_dir, exclude=None) -> list:
    """``[(folder name, doc)]`` for every valid ``results_dir/*/claims.json`` (sorted by folder).

    ``exclude`` is a path not to list (the run itself). A file that cannot be shown (unreadable, not
    the schema, an unknown claim id, nested too deeply, not a regular file) is skipped with a one-line
    warning on stderr naming it and the reason, rather than breaking the report; so is a
    ``results_dir`` that does not exist. Every reference is judged again by today's rules
    (:func:`rejudged`).
    """
    out = []
    root = Path(results_dir) if results_dir else None
    if root is None:
        return out
    if not root.is_dir():
        print(f"warning: no reference runs shown: {str(root)!r} "
              f"{'is not a folder' if root.exists() else 'does not exist'}", file=sys.stderr)
        return out
    skip = Path(exclude).resolve() if exclude else None
    for p in sorted(root.glob("*/claims.json")):
        if skip is not None and p.resolve() == skip:
            continue
        try:
            out.append((_unicode(p.parent.name), rejudged(_reference(p))))
        except (ValueError, OSError) as e:
            reason = " ".join(str(e).split())
            print(f"warning: skipping reference {p}: {reason[:300]}", file=sys.stderr)
    return out


def verdict_word(verdict) -> str:
    return NOT_RUN if verdict is None else verdict


# --------------------------------------------------------------------------- terminal

def _short(doc: dict) -> str:
    m = doc["meta"]
    return f"{m['device'].get('name', m['device'].get('device'))} · {m['scale']}"


# Unicode's bidirectional controls: text from a stored column must not reorder what a terminal shows
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def plain_text(text) -> str:
    """``text`` safe to print on a terminal: control characters (ESC, BEL, CR, C1 controls such as
    CSI) and bidirectional controls are shown as visible escapes (``\\x1b``) instead of being obeyed,
    so a stored column can neither clear the screen nor retitle the window nor reorder a line."""
    out = []
    for ch in str(text):
        if unicodedata.category(ch) == "Cc" or ch in _BIDI:
            out.append(f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


def terminal_table(doc: dict, refs=(), width: "int | None" = None, color: "bool | None" = None) -> str:
    """The verdict table as text: id, verdict (this run), one verdict column per reference, the
    article's figure and what was measured (the verdict display's first line, :func:`glance_line`; the
    measured summary, rule and evidence are in claims.json, report.html and ``Result.details()``),
    wrapped to the terminal width (never cut). Only the claims of ``doc`` (those asked for) are listed,
    in the reference lines too."""
    if width is None:
        width = shutil.get_terminal_size((120, 24)).columns
    if color is None:
        color = False
    vw = max(len(w) for w in COLOURS)
    heads = ["id", "this run"] + [f"ref {i}" for i in range(1, len(refs) + 1)]
    widths = [3, vw] + [vw for _ in refs]
    ref_maps = [{c["id"]: c for c in r["claims"]} for _, r in refs]

    def paint(word, pad):
        cell = word.ljust(pad)
        return f"\033[{_ANSI[word]}m{cell}\033[0m" if color else cell

    fixed = sum(widths) + 2 * len(widths) + 14
    room = width - fixed
    lines = ["  ".join(h[:w].ljust(w) for h, w in zip(heads, widths)) + "  article".ljust(16) + "measured"]
    for c in doc["claims"]:
        cells = [plain_text(c["id"]).ljust(3), paint(verdict_word(c["verdict"]), vw)]
        for m in ref_maps:
            rc = m.get(c["id"])
            cells.append(paint(verdict_word(rc["verdict"]) if rc else NOT_RUN, vw))
        figs = textwrap.wrap(plain_text(_display.figure_short(c["figure"]) or "-"), 12, break_on_hyphens=False) or ["-"]
        summ = plain_text(glance_line(c))  # the verdict display's first line: the rest is in claims.json, report.html
        indent = " " * (sum(widths) + 2 * len(widths))
        if room < 40:  # too many columns for the terminal: the summary goes under its row, at full width
            lines.append(("  ".join(cells) + "  " + " ".join(figs)).rstrip())
            lines += ["     " + w for w in textwrap.wrap(summ, max(20, width - 5), break_on_hyphens=False)]
            continue
        wrapped = textwrap.wrap(summ, room, break_long_words=True, break_on_hyphens=False) or [""]
        lines.append("  ".join(cells) + "  " + figs[0].ljust(14) + wrapped[0])
        for k in range(1, max(len(figs), len(wrapped))):
            more = (figs[k] if k < len(figs) else "").ljust(14) + (wrapped[k] if k < len(wrapped) else "")
            lines.append((indent + more).rstrip())
    counts = ", ".join(f"{n} {w}" for w, n in sorted(doc["meta"]["counts"].items()))
    lines.append(plain_text(f"{len(doc['claims'])} claims on {doc['meta']['device_label']}, "
                            f"scale {doc['meta']['scale']}: {counts}"))
    asked = {c["id"] for c in doc["claims"]}
    for i, (name, r) in enumerate(refs, 1):
        redo = [rc for rc in r["claims"] if rc.get("verdict") == "needs re-measuring" and rc["id"] in asked]
        # why each needs re-measuring: a column (its own or its reference GPU's) that contradicts itself on what
        # the claim reads, or one that lacks what today's rule reads
        torn = [rc["id"] for rc in redo if isinstance(rc.get("scope"), dict) and rc["scope"].get("conflicts")]
        lack = [rc["id"] for rc in redo if rc["id"] not in torn]
        why = "; ".join(x for x in (
            f"{', '.join(torn)}: a column that contradicts itself on what {'it reads' if len(torn) == 1 else 'they read'}"
            if torn else "",
            f"{', '.join(lack)}: the column lacks what today's rule reads" if lack else "") if x)
        commit = r["meta"].get("nogradlab_commit")
        lines.append(plain_text(
            f"ref {i} = {name}: {r['meta']['device_label']}, scale {r['meta']['scale']}, "
            f"{str(r['meta'].get('generated', ''))[:10]}" + (f", nogradlab {commit}" if commit else "")
            + f", {_protocol(r['meta'])}; judged by today's rules"
            + (f" ({len(redo)} claim(s) need re-measuring: {why})" if redo else "")))
    ref_no = {name: f"ref {i}" for i, (name, _) in enumerate(refs, 1)}
    for g in by_release(doc, refs):
        # each verdict labelled with its own column: two columns can share a release (this run and a
        # reference of the same torch), so a list of the releases would not pair with the verdicts
        cols = [f"{'this run' if name == 'this run' else ref_no.get(name, name)} torch {t}" for name, t in g["columns"]]
        changed = ", ".join(f"{c['id']} (" + " / ".join(f"{w} in {col}" for w, col in zip(c["verdicts"], cols)) + ")"
                            for c in g["changed"] if c["id"] in asked) or "none"
        lines.append(plain_text(f"by release ({g['device_type']}, scale {g['scale']}; {len(cols)} columns): "
                                f"changed: {changed}"))
    return "\n".join(lines)


# --------------------------------------------------------------------------- charts

def _png(fig, close: bool = True) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    if close:
        plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


class Chart(str):
    """A chart's data-URI PNG (a plain string, as before) and, in ``narrow``, the same chart with
    its side-by-side panels stacked one above another, which small screens show instead (None for
    a one-panel chart)."""

    narrow = None


def stacked(fig) -> bool:
    """Re-lay ``fig``'s panels, when they sit side by side on one row, into one column (each panel
    as wide as the figure, labels of shared axes shown on every panel) so that a phone shows them at
    a readable size. Returns False, leaving ``fig`` alone, for a one-panel figure or another
    layout."""
    from matplotlib.gridspec import GridSpec

    axes = [ax for ax in fig.axes if ax.get_subplotspec() is not None]
    if len(axes) < 2 or len({round(ax.get_position().y0, 3) for ax in axes}) != 1:
        return False
    k = len(axes)
    width, height = fig.get_size_inches()
    grid = GridSpec(k, 1, figure=fig)
    for i, ax in enumerate(sorted(axes, key=lambda a: a.get_position().x0)):
        ax.set_subplotspec(grid[i, 0])
        ax.tick_params(labelleft=True, labelbottom=True)
    fig.set_size_inches(max(4.5, min(6.4, width / k + 1.0)), max(height, 2.6) * k * 0.9)
    fig.tight_layout()
    return True


def _verdict_overview(doc, refs):
    """Stacked bars: how many claims got each verdict, this run and each reference."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    cols = [("this run: " + _short(doc), doc)] + [(f"{name}: {_short(r)}", r) for name, r in refs]
    words = list(COLOURS)
    fig, ax = plt.subplots(figsize=(8, 0.6 + 0.55 * len(cols)))
    for i, (_label, d) in enumerate(reversed(cols)):
        left = 0
        for w in words:
            n = d["meta"]["counts"].get(w, 0)
            if n:
                ax.barh(i, n, left=left, color=COLOURS[w], label=w if i == len(cols) - 1 else None)
                ax.text(left + n / 2, i, str(n), ha="center", va="center", color="white", fontsize=9)
                left += n
    ax.set_yticks(range(len(cols)), [c[0] for c in reversed(cols)])
    ax.set_xlabel("claims")
    ax.legend(ncols=len(words), loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False, fontsize=8)
    ax.spines[["top", "right"]].set_visible(False)
    return fig


def charts(doc: dict, refs=()) -> list:
    """``[(title, data-URI PNG or None, caption)]`` for the report.

    The overview chart is drawn here; the measurement charts come from ``nogradlab.plots`` (fed with
    the claims' evidence) when that module provides them. A chart that cannot be drawn is listed with
    None and the error as caption instead of breaking the report.
    """
    out = []
    specs = [("Verdicts by machine", lambda: _verdict_overview(doc, refs),
              "How many of the claims each verdict covers, in this run and in each reference run.")]
    specs += _plot_specs(doc)
    for title, make, caption in specs:
        try:
            fig = make()
            if fig is None:
                continue
            uri = Chart(_png(fig, close=False))
            try:  # the small-screen version: panels stacked; the wide one stands if it fails
                if stacked(fig):
                    uri.narrow = _png(fig, close=False)
            except Exception as e:  # noqa: BLE001
                print(f"warning: report chart {title!r}: no stacked version: {e}", file=sys.stderr)
            import matplotlib.pyplot as plt

            plt.close(fig)
            out.append((title, uri, caption))
        except Exception as e:  # a bad evidence dict must not cost the whole report
            out.append((title, None, f"could not draw this chart: {type(e).__name__}: {e}"))
            print(f"warning: report chart {title!r} not drawn: {type(e).__name__}: {e}", file=sys.stderr)
    return out


def key_charts() -> list:
    """``[(claim id, title, caption)]``: the claims whose declaration names a key chart, in the
    order the report shows them (by their declared ``chart_rank``, then id: the article's table leads)."""
    out = [(c.chart_rank, c.id, *c.key_chart) for c in _claims.all_claims() if c.key_chart]
    return [t[1:] for t in sorted(out, key=lambda t: (t[0], t[1]))]


def _lead_titles() -> set:
    """The titles of the key charts declared to lead the report (``chart_rank`` 0), above the columns."""
    return {c.key_chart[0] for c in _claims.all_claims() if c.key_chart and c.chart_rank == 0}


def _plot_specs(doc: dict) -> list:
    """The key measurement charts, drawn by ``nogradlab.plots`` from this run's evidence
    (claims without a verdict are left out)."""
    try:
        from nogradlab.lab import plots  # noqa: F401 (the figures need matplotlib, which plots imports)
    except ImportError:
        return []
    by_id = {c["id"]: c for c in doc["claims"]}
    specs = []
    for cid, title, caption in key_charts():
        c = by_id.get(cid)
        if c is not None and c["verdict"] is not None:
            specs.append((title, (lambda c=c: _claims.figure(c)), caption))
    return specs


# --------------------------------------------------------------------------- HTML

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1300px;
padding:16px 24px;color:#1f2328;overflow-wrap:break-word}
h1{font-size:22px;margin:4px 0}h2{font-size:17px;margin:22px 0 8px;border-bottom:1px solid #d0d7de}
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #d8dee4;padding:4px 7px;
text-align:left;vertical-align:top}th{background:#f6f8fa}
.v{display:inline-block;color:#fff;border-radius:10px;padding:1px 8px;font-size:12px;font-weight:600;
white-space:nowrap}.meta{color:#57606a;margin:4px 0}.small{font-size:12px;color:#57606a}
.status-ok{color:#1a7f37;font-weight:600}.status-failed{color:#cf222e;font-weight:700}
.banner{padding:6px 12px;border-radius:6px;margin:8px 0}.bad{background:#ffebe9;border:1px solid #cf222e}
.good{background:#dafbe1;border:1px solid #1a7f37}.banner .counts{margin-left:8px;white-space:normal}
pre{background:#f6f8fa;padding:8px;overflow:auto;font-size:12px;max-height:320px}
figure{margin:12px 0}figure img{max-width:100%;height:auto;display:block}
figcaption{color:#57606a;font-size:13px}td.id{font-weight:700;font-family:monospace}
.toc{margin:6px 0 0;font-size:13px}.toc a{color:#0969da}
.old{color:#9a6700;font-size:11px;font-weight:700;margin-left:2px}
.lead-chart figure{margin:8px 0}.lead-chart img{max-height:460px;width:auto}
/* the claims: one compact row each (a <details>: the row is its <summary>) */
.claims{--chip:152px}
.claims .row{display:grid;grid-template-columns:48px minmax(120px,2.3fr) minmax(120px,1fr) minmax(120px,2.7fr)
repeat(var(--k),var(--chip));column-gap:8px;align-items:start;padding:5px 4px;border-bottom:1px solid #d8dee4}
.claims .head{background:#f6f8fa;font-weight:600;font-size:13px;position:sticky;top:0;z-index:1}
.claims summary{cursor:pointer;list-style:none}.claims summary::-webkit-details-marker{display:none}
.claims summary:hover{background:#f6f8fa}.claims details[open]>summary{background:#eef3f8}
.cid{font-weight:700;font-family:monospace;white-space:nowrap}
.cread,.cfig{font-size:13px;color:#3b434b;display:-webkit-box;-webkit-line-clamp:3;-webkit-box-orient:vertical;
overflow:hidden}.claims details[open] .cread,.claims details[open] .cfig{-webkit-line-clamp:unset}
#columns-table td:nth-child(4){min-width:130px}#columns-table td:nth-child(5){min-width:120px}
.claims .lbl{display:none}.chip .v{max-width:100%;box-sizing:border-box;overflow:hidden;text-overflow:ellipsis}
.claims .more{padding:4px 10px 10px 56px;border-bottom:1px solid #d8dee4;font-size:13px}
.claims .more p{margin:6px 0}.refline{border-left:3px solid #d0d7de;padding-left:8px}
table.conds{width:auto;max-width:100%;font-size:12px}
/* the verdict display (nogradlab.claims.display): the row is its first line; the picture, then the rest folded */
.picture{margin:6px 0}.picture svg{display:block;max-width:100%;height:auto}.picture svg.band-chart.narrow{display:none}
@media (max-width:{NARROW}px){.picture svg.band-chart.wide{display:none}.picture svg.band-chart.narrow{display:block}}
table.cases{width:auto;max-width:100%;font-size:12px}.nopic{margin:4px 0}
details.fold>summary{cursor:pointer;color:#0969da;font-size:13px}.fold{overflow-wrap:anywhere}
table.by-release td,table.by-release th{overflow-wrap:break-word;min-width:0}
table.by-release .small{display:block}
#failing-figures ul{margin:4px 0 8px;padding-left:20px}#failing-figures li{margin:2px 0}
/* phones: each claim stacks (id and claim, the article's figure, the plain line, labelled chips),
   tables become labelled rows, charts fit the width (multi-panel charts come stacked, from a <picture>
   source): nothing needs sideways panning */
/* the claims stack below {CLAIMS_NARROW} px: their grid needs that much for three chip columns */
@media (max-width:{CLAIMS_NARROW}px){
.claims .head{display:none}
.claims summary.row{display:flex;flex-wrap:wrap;gap:2px 10px}
.claims summary .cid{flex:0 0 auto}.claims summary .ctext{flex:1 1 calc(100% - 60px);font-weight:600}
.claims .cfig,.claims .cread{flex:1 1 100%}.claims .chip{flex:0 1 auto;max-width:100%}
.claims .lbl{display:block;font-size:11px;color:#57606a}.cfig .lbl{display:inline;margin-right:4px}
.claims .more{padding:4px 4px 10px}
}
@media (max-width:{NARROW}px){
body{padding:10px 12px}h1{font-size:19px}
.lead-chart img{max-height:none;width:auto;max-width:100%}
#columns-table td:nth-child(n){min-width:0}
#columns-table td:nth-child(n+2):nth-child(-n+5){display:inline;font-size:13px}
#columns-table td:nth-child(n+3):nth-child(-n+5)::before{content:" · ";color:#57606a}
#columns-table td:nth-child(6){margin-top:2px}#columns-table td .small{display:inline}
#notebook-table thead,#columns-table thead{display:none}
#notebook-table,#notebook-table tbody,#notebook-table tr,#notebook-table td,
#columns-table,#columns-table tbody,#columns-table tr,#columns-table td{display:block;width:auto}
#notebook-table tr,#columns-table tr{border-bottom:2px solid #d0d7de;padding:6px 0}
#notebook-table td,#columns-table td{border:0;padding:2px 2px}
#notebook-table td:empty{display:none}
#notebook-table td::before{color:#57606a;font-size:12px;font-weight:400;margin-right:6px}
table.conds{display:block;overflow-x:auto}
table.by-release thead{display:none}table.by-release,table.by-release tbody,table.by-release tr{display:block}
table.by-release tr{border-bottom:2px solid #d0d7de;padding:4px 0}
table.by-release td{display:inline-block;border:0;vertical-align:top;padding:2px 6px 2px 0;max-width:100%}
table.by-release td.id,table.by-release td.ctext{display:inline}
table.by-release td[data-label]::before{content:attr(data-label);display:block;font-size:11px;color:#57606a}
pre{white-space:pre-wrap;max-width:100%}figure{margin:10px 0}
}
"""
NARROW_PX = 640  # below this width the report switches to its phone layout
CLAIMS_NARROW_PX = 1000  # below this width the claims stack (the grid needs about 1,000 px for 3 chip columns)
_CSS = _CSS.replace("{NARROW}", str(NARROW_PX)).replace("{CLAIMS_NARROW}", str(CLAIMS_NARROW_PX))


def _column_labels_css(table_id: str, labels) -> str:
    """Phone layout: each cell of ``table_id`` labelled with its column's name (the header row is
    hidden there)."""
    out = []
    for i, label in enumerate(labels, start=1):
        out.append(f'#{table_id} td:nth-child({i})::before{{content:"{css_string(label)}"}}')
    return f"@media (max-width:{NARROW_PX}px){{{''.join(out)}}}"


def css_string(text) -> str:
    """``text`` as the inside of a double-quoted CSS string that cannot end early: letters, digits,
    spaces and ``-_.,`` stay as they are, every other character becomes a CSS hex escape (``\\28 ``
    for "("), and control characters (among them \\r and \\f, which end a CSS string) become
    spaces. Nothing from a stored column can then close the string, the rule or the <style>."""
    out = []
    for ch in str(text):
        if unicodedata.category(ch) in ("Cc", "Cs", "Co", "Cn") or ch in _BIDI:
            out.append(" ")
        elif ch.isalnum() or ch in " -_.,":
            out.append(ch)
        else:
            out.append(f"\\{ord(ch):x} ")
    return "".join(out)


def _figure_html(title: str, uri: str, caption: str) -> str:
    """A chart: the stacked version for narrow screens where there is one."""
    narrow = getattr(uri, "narrow", None)
    img = f"<img src='{uri}' alt='{_e(title)}'>"
    if narrow:
        img = (f"<picture><source media='(max-width:{NARROW_PX}px)' srcset='{narrow}'>"
               f"{img}</picture>")
    return f"<figure>{img}<figcaption><b>{_e(title)}.</b> {_e(caption)}</figcaption></figure>"


_badge = _html.badge


#: HTML text of ``x``: escaped, control characters shown as visible escapes (line breaks kept)
_e = _html.esc


def by_release(doc: dict, refs=()) -> list:
    """Columns of the same kind of hardware and scale measured on different torch releases, and the
    claims whose verdict (by today's rules) differs between them: ``[{"device_type", "scale",
    "columns": [(label, torch)], "changed": [{"id", "verdicts": [...], "readings": [...]}]}]``, one
    group per (device type, scale) with at least two releases. What an instructor reads when a new
    release comes out."""
    cols = [("this run", doc)] + list(refs)
    groups: dict = {}
    for name, d in cols:
        m = d["meta"]
        groups.setdefault((m["device"].get("type", "?"), m["scale"]), []).append((name, d))
    out = []
    for (dtype, scale), members in groups.items():
        releases = {d["meta"]["torch"] for _, d in members}
        if len(releases) < 2:
            continue
        members = sorted(members, key=lambda nd: _release_key(nd[1]["meta"]["torch"]))
        maps = [{c["id"]: c for c in d["claims"]} for _, d in members]
        changed = []
        for cid in _claims.ids():
            entries = [mp.get(cid) for mp in maps]
            words = [verdict_word(e["verdict"]) if e else NOT_RUN for e in entries]
            # a claim a column did not run (a partial `claims --ids` run) is no change: compare the others
            if len({w for w in words if w != NOT_RUN}) > 1:
                changed.append({"id": cid, "verdicts": words,
                                "readings": [(e.get("reading") or e.get("summary", ""))[:300] if e else "" for e in entries]})
        out.append({"device_type": dtype, "scale": scale,
                    "columns": [(name, d["meta"]["torch"]) for name, d in members], "changed": changed})
    return out


def _release_key(version: str) -> tuple:
    nums = re.findall(r"\d+", version.split("+")[0])
    return tuple(int(n) for n in nums[:3])


def _by_release_html(doc: dict, refs=()) -> str:
    groups = by_release(doc, refs)
    if not groups:
        return ""
    parts = ["<h2 id='by-release'>By release</h2><p class='small'>Columns of the same kind of hardware and "
             "scale measured on different PyTorch releases, all judged by today's rules: the claims whose verdict "
             "changed between releases, and what each release measured (click a verdict).</p>"]
    for g in groups:
        head = "".join(f"<th>torch {_e(t)}<br><span class='small'>{_e(n)}</span></th>" for n, t in g["columns"])
        rows = []
        for c in g["changed"]:
            cells = "".join(f"<td data-label='torch {_e(t)}, {_e(n)}'><details><summary>{_badge(w)}</summary>"
                            f"<span class='small'>{_e(r)}</span></details></td>"
                            for (n, t), w, r in zip(g["columns"], c["verdicts"], c["readings"]))
            rows.append(f"<tr><td class='id'>{_e(c['id'])}</td><td class='ctext'>{_e(_claims.get(c['id']).paraphrase)}"
                        f"</td>{cells}</tr>")
        body = "".join(rows) or f"<tr><td colspan='{2 + len(g['columns'])}'>no verdict changed</td></tr>"
        parts.append(f"<p><b>{_e(g['device_type'])}, scale {_e(g['scale'])}</b></p><table class='by-release'>"
                     f"<thead><tr><th>id</th><th>claim</th>{head}</tr></thead><tbody>{body}</tbody></table>")
    return "".join(parts)


def _release_of(doc: dict) -> str:
    return str(doc["meta"].get("torch", "")).split("+")[0]


def shown_columns(refs=()) -> tuple:
    """``(shown, folded)``: the reference columns that get a chip per claim, and those folded into the
    by-release view. Columns of one machine at one scale on several PyTorch releases fold into one:
    the newest release is shown, the others are listed under "By release" (and in each claim's
    details)."""
    groups: dict = {}
    for name, r in refs:
        m = r["meta"]
        groups.setdefault((m.get("machine") or name, m.get("scale")), []).append((name, r))
    shown, folded = [], []
    for members in groups.values():
        members = sorted(members, key=lambda nd: _release_key(str(nd[1]["meta"].get("torch", ""))))
        shown.append(members[-1])
        folded += members[:-1]
    order = {name: i for i, (name, _) in enumerate(refs)}
    return sorted(shown, key=lambda nd: order[nd[0]]), sorted(folded, key=lambda nd: order[nd[0]])


def _column_name(r: dict) -> str:
    """A column's name in a few words: the device's short name, the PyTorch release, the scale."""
    m = r["meta"]
    dev = m.get("device", {})
    name = str(dev.get("name") or dev.get("device") or "?")
    short = re.sub(r"^(NVIDIA|AMD|Intel\(R\)|Intel)\s+", "", name).split(" CPU")[0]
    short = short if len(short) <= 18 else short[:17] + "…"
    return f"{short} · torch {_release_of(r)}"


def _protocol(meta: dict) -> str:
    age = meta.get("age") if isinstance(meta.get("age"), dict) else {}
    if age.get("stale") and age.get("protocol") is not None:  # nogradlab.claims.column_age
        return f"older protocol {age['protocol']} (today's: {age.get('current_protocol')})"
    p = meta.get("protocol", meta.get("protocol_version"))
    if isinstance(p, dict):
        p = p.get("version", p.get("name"))
    return f"protocol {p}" if p not in (None, "") else "protocol not recorded"


def _stale(entry: dict):
    """What a verdict's ``scope.stale`` says (None when the evidence is not labelled old)."""
    s = (entry.get("scope") or {}).get("stale") if isinstance(entry.get("scope"), dict) else None
    if not s:
        return None
    return "old evidence" if s is True else f"old evidence: {s}"


def _age(meta: dict, now: str) -> str:
    try:
        then = _dt.datetime.fromisoformat(str(meta.get("generated", ""))).date()
        ref = _dt.datetime.fromisoformat(now).date()
        days = (ref - then).days
    except (TypeError, ValueError):
        return ""
    if days <= 0:
        return "same day as this run"
    return f"{days} day{'s' if days != 1 else ''} before this run"


def glance_line(entry: dict) -> str:
    """A claim row's words: the verdict display's first line (:func:`nogradlab.claims.display.headline`)
    without the verdict and the article's figure, which the row shows in their own cells."""
    text = _display.headline(entry, verdict=False, figure=False)
    text = text[:1].upper() + text[1:] if text.startswith(("measured", "estimated")) else text
    q = entry.get("qualifier")  # the judge's words for the part of the claim its verdict covers: kept
    return f"({q}) {text}" if q else text


def plain_line(entry: dict) -> str:
    """The claim's answer in one line of plain words: its judge's reading, else the measured
    summary's first sentence."""
    text = " ".join(str(entry.get("reading") or "").split())
    if not text:
        summary = " ".join(str(entry.get("summary") or "").split())
        text = re.split(r"(?<=[.!?])\s+(?=[A-Z])", summary, maxsplit=1)[0]
    return text if len(text) <= 240 else text[:239] + "…"


def _counts_html(counts: dict) -> str:
    return " ".join(f"{_badge(w)}&nbsp;{_e(n)}" for w, n in counts.items())


def _chip(entry, label: str) -> str:
    """One column's verdict on a claim: a chip (labelled with its column on phones)."""
    word = verdict_word(entry["verdict"]) if entry else NOT_RUN
    old = _stale(entry) if entry else None
    tag = f"<sup class='old' title='{_e(old)}'>old</sup>" if old else ""
    remeasure = "1" if word == "needs re-measuring" else "0"
    return (f"<span class='cell chip' data-needs-remeasuring='{remeasure}'><span class='lbl'>{_e(label)}</span>"
            f"{_badge(word)}{tag}</span>")


_num = _format.number


_MEASUREMENTS_CHARS = 6000  # the raw measurements shown per claim; claims.json holds them all


def _claim_details(c: dict, nb_html: dict, columns, folded) -> str:
    """What opens under a claim: the verdict display's picture (:func:`nogradlab.claims.display.picture_html`:
    the conditions against the article's band, or its cases, or a line saying there is none; the row above
    is its first line), then, folded: the rule, the evidence, this run's measured figures and conditions,
    this machine's own figures, the raw measurements and each reference column's verdict and figures."""
    parts = []
    link = ""
    if c.get("notebook"):
        href = nb_html.get(c["notebook"])
        link = (f"<p>Checked in {'<a href=' + chr(39) + _e(href) + chr(39) + '>' if href else ''}"
                f"{_e(c['notebook'])}{'</a>' if href else ''}.</p>")
    if c.get("figure"):
        parts.append(f"<p><b>The article's figure.</b> {_e(c['figure'])}</p>")
    if _stale(c):
        parts.append(f"<p><b class='old'>({_e(_stale(c))})</b></p>")
    parts.append(link)
    local = c.get("local")
    if isinstance(local, dict) and local.get("verdict"):
        parts.append(f"<p><b>This machine's own figures</b> ({_badge(verdict_word(local['verdict']))}): "
                     f"{_e(local.get('summary', ''))}</p>")
    after = []
    if c.get("measurements"):
        text = json.dumps(c["measurements"], indent=1, default=str)
        cut = len(text) > _MEASUREMENTS_CHARS
        text = text[:_MEASUREMENTS_CHARS] + ("\n… (cut here: claims.json holds all of it)" if cut else "")
        after.append(f"<details class='raw'><summary>measurements (raw)</summary><pre>{_e(text)}</pre></details>")
    for label, name, _r, rc in columns + folded:
        if rc is None:
            after.append(f"<p class='refline'>{_badge(NOT_RUN)} <b>{_e(label)}</b> ({_e(name)})</p>")
            continue
        was = rc.get("stored_verdict")
        was = (f" <span class='small stored-verdict'>stored verdict, by the rule of its day: "
               f"{_e(verdict_word(was))}</span>" if was is not None and was != rc["verdict"] else "")
        old = _stale(rc)
        after.append(f"<p class='refline'>{_badge(verdict_word(rc['verdict']))} <b>{_e(label)}</b> "
                     f"<span class='small'>({_e(name)}; judged by today&#39;s rules)</span>"
                     + (f" <b class='old'>{_e(old)}</b>" if old else "")
                     + f"{was}<br><span class='small'>{_e(rc.get('summary'))}</span></p>")
    return (f"<div class='picture'>{_display.picture_html(c, narrow=True)}</div>"
            + _display.folded_html(c, before="".join(parts), after="".join(after)))


def _columns_html(doc: dict, shown, folded) -> str:
    """What ran where: this run and each reference column, with its age, protocol and verdict counts."""
    m = doc["meta"]
    now = str(m.get("generated", ""))
    rows = [f"<tr class='this'><td><b>this run</b></td><td>{_e(m['device_label'])}</td><td>{_e(m['scale'])}</td>"
            f"<td>{_e(now[:10])}</td><td>{_e(_protocol(m))}</td><td>{_counts_html(m['counts'])}</td></tr>"]
    folded_names = {n for n, _ in folded}
    for name, r in shown + folded:
        rm = r["meta"]
        commit = rm.get("nogradlab_commit")
        n_old = sum(1 for c in r["claims"] if _stale(c))
        note = []
        if name in folded_names:
            note.append("folded into <a href='#by-release'>By release</a>")
        if not rm.get("complete", True):
            note.append("incomplete")
        if n_old:
            note.append(f"<b class='old'>{n_old} claim(s) on old evidence</b>")
        rows.append(f"<tr data-column='{_e(name)}'><td><b>{_e(_column_name(r))}</b><br><span class='small'>{_e(name)}"
                    f"{', nogradlab ' + _e(commit) if commit else ''}</span></td>"
                    f"<td>{_e(rm['device_label'])}" + (f"<br><span class='small'>{'; '.join(note)}</span>" if note else "")
                    + f"</td><td>{_e(rm['scale'])}</td><td>{_e(str(rm.get('generated', ''))[:10])}<br>"
                    f"<span class='small'>{_e(_age(rm, now))}</span></td><td>{_e(_protocol(rm))}</td>"
                    f"<td>{_counts_html(rm['counts'])}</td></tr>")
    return ("<h2 id='where'>What ran where</h2><table id='columns-table'><thead><tr><th>column</th>"
            "<th>machine and PyTorch</th><th>scale</th><th>measured</th><th>protocol</th><th>verdicts</th>"
            f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
            "<p class='small'>Reference columns are the same checks run on other hardware (results/), their stored "
            "measurements judged again by today&#39;s rules. Evidence labelled <b class='old'>old</b> was "
            "measured under an earlier protocol.</p>")


def _claims_html(doc: dict, nb_html: dict, shown, folded) -> str:
    maps = [(_column_name(r), name, {c["id"]: c for c in r["claims"]}) for name, r in shown]
    fmaps = [(_column_name(r), name, {c["id"]: c for c in r["claims"]}) for name, r in folded]
    k = 1 + len(shown)
    head = ("<div class='row head' aria-hidden='true'><span class='cell'>id</span><span class='cell'>claim "
            "(paraphrased)</span><span class='cell'>article</span><span class='cell'>in plain words</span>"
            "<span class='cell'>this run</span>"
            + "".join(f"<span class='cell'>{_e(label)}</span>" for label, _, _ in maps) + "</div>")
    items = []
    for c in doc["claims"]:
        word = verdict_word(c["verdict"])
        chips = _chip(c, "this run") + "".join(_chip(mp.get(c["id"]), label) for label, _, mp in maps)
        cols = [(label, name, None, mp.get(c["id"])) for label, name, mp in maps]
        fcols = [(label, name, None, mp.get(c["id"])) for label, name, mp in fmaps]
        items.append(
            f"<details class='claim' id='claim-{_e(c['id'])}' data-claim='{_e(c['id'])}' data-verdict='{_e(word)}'>"
            f"<summary class='row'><span class='cell cid'>{_e(c['id'])}</span>"
            f"<span class='cell ctext'>{_e(c['paraphrase'])}</span>"
            f"<span class='cell cfig' title='{_e(c['figure'] or '')}'><span class='lbl'>article:</span>"
            f"{_e(_display.figure_short(c['figure']) or '—')}</span>"
            f"<span class='cell cread'>{_e(glance_line(c))}</span>{chips}</summary>"
            f"<div class='more'>{_claim_details(c, nb_html, cols, fcols)}</div></details>")
    return (f"<h2 id='claims'>The claims</h2><p class='small'>One row per claim; click a row for its picture (each "
            f"condition a dot with its interval against the article's band, shaded), and under it the rule, the "
            f"evidence, the measured figures and every column's reading. {_legend()}</p>"
            f"<div id='verdict-table' class='claims' style='--k:{k}'>{head}{''.join(items)}</div>")


def failing_figures(doc: dict) -> list:
    """The article's figures this run finds do not hold: ``[(id, figure, what was measured)]``, in id order
    (the claims with a figure of the article's and the verdict "does not hold")."""
    return [(c["id"], _display.figure_short(c["figure"]), glance_line(c)) for c in doc["claims"]
            if c.get("figure") and c.get("verdict") == "does not hold"]


def _failing_figures_html(doc: dict) -> str:
    """The page's top: the article's figures that do not hold, each linked to its row, before any table."""
    items = failing_figures(doc)
    # the claims that do not hold without a figure of the article's: named under the list, so its count and
    # the verdict count ("does not hold 8") reconcile at a glance (a reader saw 6 here and 8 there)
    others = [c["id"] for c in doc["claims"] if c.get("verdict") == "does not hold" and not c.get("figure")]
    more = ("" if not others else
            f"<p class='more-failing'>{len(items) + len(others)} claims do not hold in all: these {len(items)} "
            f"figures, and {len(others)} more claim{'s' if len(others) != 1 else ''} without a figure of the "
            f"article&#39;s: " + ", ".join(f"<a href='#claim-{_e(cid)}'><b>{_e(cid)}</b></a>" for cid in others)
            + ".</p>")
    if not items:
        return ("<div id='failing-figures'><p>Every figure of the article this run judged holds, depends or is "
                f"undecided: none is contradicted.</p>{more}</div>")
    li = "".join(f"<li><a href='#claim-{_e(cid)}'><b>{_e(cid)}</b></a> the article&#39;s <b>{_e(fig)}</b>: "
                 f"{_e(line)}</li>" for cid, fig, line in items)
    return (f"<div id='failing-figures'><p><b>The article's figures that do not hold here ({len(items)}):</b></p>"
            f"<ul>{li}</ul>{more}</div>")


def _legend() -> str:
    return ("Verdicts: holds / does not hold / depends (true under some measured conditions, false under others) / "
            "inconclusive (intervals straddle a band edge) / not testable (an unsourced statistic; its mechanism is "
            "tested) / needs re-measuring (a stored column lacks what today&#39;s rule reads).")


def _status_html(m: dict) -> str:
    """The banner under the title: complete, or why not (failed notebooks, claims not run), with the counts."""
    failed = [n for n in m["notebooks"] if n["status"] != "ok"]
    not_run = m["counts"].get(NOT_RUN, 0)
    if m["complete"]:
        status = "<div class='banner good' id='status'>Complete: every notebook ran and every claim has a verdict."
    else:
        why = []
        if m.get("interrupted"):
            why.append("the run was interrupted")
        if failed:
            why.append(f"{len(failed)} notebook(s) failed: " + ", ".join(_e(n["name"]) for n in failed))
        if not_run:
            why.append(f"{not_run} claim(s) not run")
        status = f"<div class='banner bad' id='status'>Incomplete: {'; '.join(why)}."
    return f"{status} <span class='counts'>{_counts_html(m['counts'])}</span></div>"


def _notebooks_html(notebooks: list) -> str:
    """The notebooks' table: each one's status, time, claims and error (its cell, source and traceback folded)."""
    if not notebooks:
        return ""
    parts = []
    parts.append("<h2 id='notebooks'>Notebooks</h2><table id='notebook-table'><thead><tr><th>notebook"
                 "</th><th>status</th><th>time</th><th>claims</th><th>error</th></tr></thead><tbody>")
    for n in notebooks:
        name = (f"<a href='{_e(n['html'])}'>{_e(n['name'])}</a>" if n.get("html") else _e(n["name"]))
        if n.get("ipynb"):
            name += f" <a class='small' href='{_e(n['ipynb'])}'>(.ipynb)</a>"
        if n.get("kernel_log"):
            name += f" <a class='small' href='{_e(n['kernel_log'])}'>(kernel log)</a>"
        err = ""
        if n.get("error"):
            er = n["error"]
            err = (f"<b class='err-cell'>{_e(cell_name(er))}</b>: {_e(er['ename'])}: {_e(er['evalue'])}"
                   + (f"<details><summary>cell source and traceback</summary><pre>{_e(er.get('source'))}"
                      f"</pre><pre>{_e(er.get('traceback'))}</pre></details>"
                      if er.get("source") or er.get("traceback") else ""))
        parts.append(f"<tr data-notebook='{_e(n['name'])}' data-status='{_e(n['status'])}'><td>{name}</td>"
                     f"<td class='status-{_e(n['status']).replace(' ', '-')}'>{_e(n['status'])}</td>"
                     f"<td>{n['seconds']:.1f} s</td><td>{_e(', '.join(n.get('claims', [])) or 'beyond the article: no claim')}</td>"
                     f"<td>{err}</td></tr>")
    parts.append("</tbody></table>")
    return "\n".join(parts)


def render_html(doc: dict, refs=(), chart_list=None) -> str:
    """The report page as a string (see the module docstring)."""
    m = doc["meta"]
    refs = list(refs)
    if chart_list is None:
        chart_list = charts(doc, refs)
    nb_html = {n["name"]: n.get("html") for n in m["notebooks"]}
    shown, folded = shown_columns(refs)
    phone_css = _column_labels_css("notebook-table", ["notebook", "status", "time", "claims", "error"])
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
             f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
             f"<title>nogradlab report: {_e(m['device_label'])}</title><style>{_CSS}{phone_css}</style></head><body>",
             "<h1>What <code>torch.no_grad</code> really does: the article's claims, measured</h1>",
             f"<p class='meta'>This run: <b>{_e(m['device_label'])}</b>, scale <b>{_e(m['scale'])}</b>, "
             f"nogradlab {_e(m['nogradlab'])}, {_e(m['generated'])}, {m['seconds']:.0f} s "
             f"({_e(m['source'])}).</p>"]
    parts.append(_status_html(m))

    parts.append(_failing_figures_html(doc))
    sections = [("where", "what ran where"), ("claims", "the claims")]
    lead = _lead_titles()
    charts_rest = [ch for ch in chart_list if ch[0] not in lead]
    top = [ch for ch in chart_list if ch[0] in lead]
    if charts_rest:
        sections.append(("charts", "charts"))
    if by_release(doc, refs):
        sections.append(("by-release", "by release"))
    if m["notebooks"]:
        sections.append(("notebooks", "notebooks"))
    sections.append(("hardware", "hardware"))
    parts.append("<nav class='toc'>" + " · ".join(f"<a href='#{a}'>{t}</a>" for a, t in sections) + "</nav>")
    parts.append(_columns_html(doc, shown, folded))
    for title, uri, caption in top:  # the article's table against this run's figures
        parts.append("<div class='lead-chart'>" + (_figure_html(title, uri, caption) if uri else
                     f"<p class='small'><b>{_e(title)}</b>: {_e(caption)}</p>") + "</div>")
    parts.append(_claims_html(doc, nb_html, shown, folded))

    # charts
    if charts_rest:
        parts.append("<h2 id='charts'>Charts</h2>")
    for title, uri, caption in charts_rest:
        if uri:
            parts.append(_figure_html(title, uri, caption))
        else:
            parts.append(f"<p class='small'><b>{_e(title)}</b>: {_e(caption)}</p>")
    parts.append(_by_release_html(doc, refs))

    if m["notebooks"]:
        parts.append(_notebooks_html(m["notebooks"]))
    # hardware
    parts.append("<h2 id='hardware'>Hardware</h2><ul>"
                 f"<li><b>this run</b>: {_e(m['device_label'])}, scale {_e(m['scale'])}, {_e(m['generated'])}</li>")
    for name, r in refs:
        rm = r["meta"]
        parts.append(f"<li><b>{_e(name)}</b>: {_e(rm['device_label'])}, scale {_e(rm['scale'])}, "
                     f"{_e(rm['generated'])}{'' if rm['complete'] else ' (incomplete)'}"
                     + (f", nogradlab {_e(rm['nogradlab_commit'])}" if rm.get("nogradlab_commit") else "")
                     + (f". {_e(rm['note'])}" if rm.get("note") else "") + "</li>")
    parts.append("</ul><p class='small'>Every number on this page was measured by the run it is attributed "
                 "to; the article's figures are quoted as the article gives them.</p></body></html>")
    return "\n".join(parts)


def cell_name(err: dict) -> str:
    """Where a notebook failed: ``cell 3 (In [4])``, the cell's index in the executed notebook and
    the prompt its HTML rendering shows."""
    def name(cell, ec):
        return f"cell {cell}" + (f" (In [{ec}])" if ec is not None else "")

    if err.get("cell") is None:
        return "before any cell"
    here = name(err["cell"], err.get("execution_count"))
    if err.get("after_cell") is not None:  # a dead kernel: where it died, and how far it got
        return f"{here}; the last cell that finished: {name(err['after_cell'], err.get('after_execution_count'))}"
    return here


def write_html(doc: dict, out_dir, refs=()) -> Path:
    """Write ``out_dir/report.html`` and return its path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return _outdir.write_text_atomic(out_dir / "report.html", render_html(doc, refs))


def color_default(stream) -> bool:
    """ANSI colours when ``stream`` is a terminal and NO_COLOR is unset."""
    return bool(getattr(stream, "isatty", lambda: False)()) and "NO_COLOR" not in os.environ
