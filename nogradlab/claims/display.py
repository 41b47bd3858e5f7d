"""One verdict display, read at a glance, for every place a verdict is shown: the notebook's result
(:class:`nogradlab.claims.Result`: ``str(r)``, ``r.details()``, its rich HTML), the report's opened row and
the terminal table (``nogradlab.run.report``).

It works on a claims.json entry (``Result.to_dict()`` is one) and shows three things, in this order:

1. **a first line** of at most :data:`MAX_WORDS` words (:func:`headline`): the verdict word, the article's
   figure, what was measured (the conditions' figures in the band's unit and how many agree, else the
   judge's one-line reading);
2. **one picture** (:func:`picture_html`): the conditions against the article's band, as C20's chart
   draws them (each condition a dot with its interval, the band shaded, agreeing and disagreeing told
   apart by colour, an estimate a diamond, a measurement a dot, a condition the rule shows and does not
   count hollow and in neither colour); a claim whose conditions carry no
   figure to set against a band gets a table of its cases; one without conditions gets none, and the
   display says so (:func:`no_picture_reason`);
3. **the rest folded**: the rule, the evidence, the measured summary, the conditions and the raw record
   (:func:`folded_html`, an HTML ``<details>``; :func:`details_text` in a terminal).

The HTML pieces (chips, tables, the SVG) come from :mod:`nogradlab.core.html`; every figure reads through
:func:`nogradlab.core.html.value`, so a speed-up reads ``1.15×`` in the first line, the picture and the
table beneath alike."""
from __future__ import annotations

import math
import re

from nogradlab.core import html as _html
from nogradlab.claims import rules as _rules

__all__ = ["MAX_WORDS", "headline", "verb", "side", "measured_text", "points", "picture_html", "picture_text", "no_picture_reason",
           "conditions_html", "figure_short", "folded_html", "details_text", "glance_html", "value_of"]

#: the first line's length, in words
MAX_WORDS = 25


def _words_cap(text: str, n: int) -> str:
    words = text.split()
    return " ".join(words) if len(words) <= n else " ".join(words[:n - 1]) + " …"


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _band(entry: dict, cond: dict) -> "tuple | None":
    """``((low, high), unit)`` of the article's band a condition is read against: its own (``band``,
    C20's per workload and quantity), else its claim's rule's (today's rule: stored columns are judged by
    it); None when there is none."""
    b = cond.get("band")
    if isinstance(b, dict):  # a stored column's: only two numbers (the upper one may be open) make a band
        edges = b.get("edges")
        if (isinstance(edges, (list, tuple)) and len(edges) == 2 and _number(edges[0])
                and (edges[1] is None or _number(edges[1])) and b.get("unit") in ("%", "x")):
            return (tuple(edges), b["unit"])
        return None
    try:
        rule = _rules.RULES[entry.get("id")]
    except (KeyError, TypeError):
        return None
    if rule.band is None:
        return None
    return (rule.band.edges, rule.band.unit)


def _estimated(entry: dict, cond: dict) -> bool:
    """Whether a condition's figure is a model's estimate, not a measurement: said by the condition
    (``estimated``: every judge says it, :func:`nogradlab.claims.rules.read_conditions`); for a stored
    row that predates the flag, guessed from the verdict's basis (``estimated``) or the row's name
    (``(estimate)``, the virtual CUDA device or the fake-tensor estimator)."""
    if isinstance(cond.get("estimated"), bool):
        return cond["estimated"]
    scope = entry.get("scope") if isinstance(entry.get("scope"), dict) else {}
    if scope.get("basis") == "estimated":
        return True
    name = str(cond.get("condition", "")).lower()
    return any(w in name for w in ("estimate", "virtual cuda", "fake "))


def _conditions(entry: dict) -> list:
    return [c for c in entry.get("conditions") or [] if isinstance(c, dict)]


def _counted(cond: dict) -> bool:
    """Whether the rule counts a condition (a judge marks one it shows and does not count ``deciding:
    False``: C03's MLP, C21's series on your machine)."""
    return cond.get("deciding") is not False


#: what a condition's figure means, and its unit, where the claim has no article's band to read it in
#: (the judges' own quantities: nb01's ``no_grad_over_grad``, nb02's activation bytes over parameter,
#: gradient and momentum bytes, nb04's ``max_abs_diff``); a case table read "unet 12 GiB: 4.36"
def _case_quantity(entry: dict) -> tuple:
    """``(what a case's figure is, its unit)``, as the claim declares it (``case_quantity``), else ``('', None)``."""
    from nogradlab.claims import ledger

    try:
        return ledger.get(entry.get("id")).case_quantity or ("", None)
    except ValueError:  # an id this release does not know (a stored column of another)
        return ("", None)


def value_of(entry: dict, cond: dict) -> "tuple[str, str]":
    """A condition's figure and interval as text, in its band's unit (``('9.4%', '[5.9%, 20%]')``), else
    in its claim's case quantity's (the claim's ``case_quantity``)."""
    band = _band(entry, cond)
    unit = band[1] if band else _case_quantity(entry)[1]
    return _html.value(cond.get("value"), unit), _html.interval(cond.get("ci"), unit)


def _case_figure(entry: dict, cond: dict) -> str:
    """A case's figure with what it means (``'largest batch, no_grad / grad 4.36×'``), else the figure alone."""
    v, ci = value_of(entry, cond)
    name = _case_quantity(entry)[0] if _band(entry, cond) is None else ""
    return " ".join(x for x in (name, v, ci) if x)


def points(entry: dict) -> "dict[str, list]":
    """``{unit: [Point]}``: the conditions that have a figure and an article's band, grouped by the
    band's unit (C20 reads a percentage and a factor: two axes)."""
    out: dict = {}
    for c in _conditions(entry):
        band = _band(entry, c)
        if band is None or not _number(c.get("value")):
            continue
        ci = c.get("ci")
        lo, hi = (ci if isinstance(ci, (list, tuple)) and len(ci) == 2 and all(_number(x) for x in ci)
                  else (None, None))
        out.setdefault(band[1], []).append(_html.Point(
            label=str(c.get("condition", "")), value=float(c["value"]), lo=lo, hi=hi,
            reading=str(c.get("reading", "")), band=tuple(band[0]), estimated=_estimated(entry, c),
            counted=_counted(c)))
    return out


def _count_text(conds, band: bool = True) -> str:
    readings = [c.get("reading") for c in conds]
    sides = [c.get("side") for c in conds if c.get("reading") == "disagrees"]
    parts = []
    if readings.count("agrees"):
        parts.append(f"{readings.count('agrees')} {'in the band' if band else 'agree'}")
    for s in ("below", "above"):
        if sides.count(s):
            parts.append(f"{sides.count(s)} {s}")
    other = readings.count("disagrees") - sides.count("below") - sides.count("above")
    if other:
        parts.append(f"{other} {'outside' if band else 'disagree'}")
    if readings.count("unresolved"):
        parts.append(f"{readings.count('unresolved')} unresolved")
    return ", ".join(parts)


def measured_text(entry: dict) -> str:
    """What was measured, in a few words: one condition's figure and interval; several conditions'
    range and how many lie in, below or above the band; ``''`` when no condition has a reading. Only the
    conditions the rule counts are read here (one shown and not counted is in the picture, hollow)."""
    groups = {u: [p for p in pts if p.counted] for u, pts in points(entry).items()}
    groups = {u: pts for u, pts in groups.items() if pts}
    conds = [c for c in _conditions(entry) if _counted(c)]
    if len(groups) == 1:
        unit, pts = next(iter(groups.items()))
        if len(pts) == 1:
            p = pts[0]
            ci = _html.interval((p.lo, p.hi), unit) if p.lo is not None else ""
            return f"{_html.value(p.value, unit)}{' ' + ci if ci else ''} ({p.label}), {p.reading}"
        lo, hi = min(p.value for p in pts), max(p.value for p in pts)
        return (f"{_html.value(lo, unit)} to {_html.value(hi, unit)} over {len(pts)} conditions "
                f"({_count_text([c for c in conds if _band(entry, c) and _number(c.get('value'))])})")
    if len(groups) > 1 or (conds and all(c.get("reading") for c in conds)):
        judged = [c for c in conds if c.get("reading")]
        return f"{len(judged)} conditions: {_count_text(judged, band=bool(groups))}"
    return ""


def _reading(entry: dict) -> str:
    """The judge's one-line reading, else the measured summary's first sentence."""
    text = " ".join(str(entry.get("reading") or "").split())
    if not text:
        text = " ".join(str(entry.get("summary") or "").split())
    return re.split(r"(?<=[.!?])\s+(?=[A-Z])", text, maxsplit=1)[0]


def figure_short(figure) -> str:
    text = " ".join(str(figure or "").split())
    if len(text.split()) > 6:
        text = _words_cap(text.split(";")[0], 6)
    return text


def verb(entry: dict) -> str:
    """How the counted conditions' figures were had, from their ``estimated`` flags: ``'measured'``,
    ``'estimated'`` (all a model's) or ``'measured and estimated'``."""
    conds = [c for c in _conditions(entry) if _counted(c) and (c.get("reading") or _number(c.get("value")))]
    flags = {_estimated(entry, c) for c in conds}
    return "measured and estimated" if flags == {True, False} else "estimated" if flags == {True} else "measured"


def side(entry: dict) -> str:
    """Where the figures of a claim that does not hold lie against the article's: ``'above'``,
    ``'below'``, ``'above and below'``, from the counted disagreeing conditions' sides (the judge's);
    ``''`` for any other verdict, or when no side is known."""
    if entry.get("verdict") != "does not hold":
        return ""
    sides = {c.get("side") for c in _conditions(entry) if _counted(c) and c.get("reading") == "disagrees"}
    sides &= {"above", "below"}
    return " and ".join(s for s in ("above", "below") if s in sides)


def headline(entry: dict, verdict: bool = True, figure: bool = True) -> str:
    """The first line, at most :data:`MAX_WORDS` words: ``'does not hold: measured below the article's figure
    (20-40 %): 0.1% to 9% over 4 conditions (4 below)'``; for another verdict ``'holds: article 20-40 %;
    measured 25% ...'``. The verb follows the conditions' ``estimated`` flags (:func:`verb`), the side
    the judge's readings (:func:`side`). Without ``verdict`` or ``figure``, the line a report's row shows
    beside its own verdict and figure cells."""
    word = entry.get("verdict") or "not run"
    if entry.get("qualifier"):  # the judge's: the part of the claim the verdict covers ("second half only")
        word = f"{word} ({entry['qualifier']})"
    fig = figure_short(entry.get("figure")) if figure else ""
    measured = measured_text(entry)
    where = side(entry) if measured else ""
    head = f"{word}: " if verdict else ""
    if where:
        measured = measured[:-len(", disagrees")] if measured.endswith(", disagrees") else measured
        line = f"{head}{verb(entry)} {where} the article's figure ({fig}): {measured}" if fig else ""
        if not line or len(line.split()) > MAX_WORDS:  # a long figure (C20's table) is in its own cell
            line = f"{head}{verb(entry)} {where} the article's figure: {measured}"
        return _words_cap(line, MAX_WORDS)
    if re.match(r"\d+ conditions: ", measured):  # a count without a range: 'estimated over 2 conditions: ...'
        measured = "over " + measured
    line = (head + (f"article {fig}; " if fig else "")
            + (f"{verb(entry)} {measured}" if measured else _reading(entry)))
    return _words_cap(line, MAX_WORDS)


def no_picture_reason(entry: dict) -> "str | None":
    """Why a claim gets no band picture (None when it gets one)."""
    if points(entry):
        return None
    if _conditions(entry):
        if not entry.get("figure"):
            return "no chart: the article gives no figure to draw a band from"
        return "no chart: no case has a figure to set against the article's band"
    return "no picture: the verdict rests on observations, not on figures against an article's band"


def picture_html(entry: dict, narrow: bool = False) -> str:
    """The one picture (see the module's docstring), or a small line saying there is none. With ``narrow``,
    the band charts twice: the wide layout and the phone's (``class='band-chart narrow'``), for a page
    whose stylesheet shows one by width (the report's)."""
    groups = points(entry)
    if groups:  # one axis per unit (C20: a percentage and a factor), the legend once, under the last, for all
        last = len(groups) - 1
        every = [p for pts in groups.values() for p in pts]
        scope = entry.get("scope") if isinstance(entry.get("scope"), dict) else {}
        where = " on the reference machine (the line above names it)" if scope.get("basis") == "reference" else ""
        return "".join(_html.band_chart(pts, unit, title=f"{entry.get('id', '')}: the conditions against the "
                                        "article's band", legend=every if i == last else False, narrow=n,
                                        measured_where=where)
                       for n in ((False, True) if narrow else (False,))
                       for i, (unit, pts) in enumerate(groups.items()))
    conds = _conditions(entry)
    if conds:
        rows = []
        figures = any(_number(c.get("value")) for c in conds)  # a column of figures, headed by what they mean
        for c in conds:
            name = str(c.get("condition", ""))
            reading = str(c.get("reading", "")) + ("" if _counted(c) else " (shown, not counted)")  # uncoloured
            v, ci = value_of(entry, c)
            rows.append((name, f"{v} {ci}".strip() if _number(c.get("value")) else "", reading) if figures
                        else (name, reading))
        quantity = _case_quantity(entry)[0] or "figure"
        return (f"<p class='small nopic'>{_html.esc(no_picture_reason(entry))}.</p>"
                + _html.cases_table(rows, quantity=quantity))
    return f"<p class='small nopic'>{_html.esc(no_picture_reason(entry))}.</p>"


def picture_text(entry: dict) -> list:
    """The picture's content as text lines for a terminal: each condition's figure, interval, reading and band."""
    lines = []
    for c in _conditions(entry):
        v, ci = value_of(entry, c)
        band = _band(entry, c)
        edge = ""
        if band:
            a, b = band[0]
            edge = (f"; band {_html.value(a, band[1])} to {_html.value(b, band[1])}" if b is not None
                    else f"; band: above {_html.value(a, band[1])}")
        side = f" ({c['side']})" if c.get("side") else ""
        est = (", estimated" if _estimated(entry, c) else "") + ("" if _counted(c) else ", shown, not counted")
        fig = (f"{v} {ci}".strip() if band else _case_figure(entry, c)) if _number(c.get("value")) else ""
        lines.append(f"  {c.get('condition', '')}: {fig}{' ' if fig else ''}{c.get('reading', '')}{side}{est}{edge}")
    return lines


def conditions_html(entry: dict) -> str:
    """The judged conditions as a table, each figure in its band's unit."""
    rows = []
    for c in _conditions(entry):
        v, ci = value_of(entry, c)
        rows.append((c.get("condition", ""), v if c.get("value") is not None else "", ci,
                     str(c.get("reading", "")) + (f" ({c['side']})" if c.get("side") else "")
                     + ("" if _counted(c) else " (shown, not counted)")))
    if not rows:
        return ""
    return _html.table(("condition", "value", "95 % CI", "reading"), rows, cls="conds")


def folded_html(entry: dict, before: str = "", after: str = "") -> str:
    """The rule, the evidence, the measured summary, the conditions and ``after`` (the raw record, other
    columns), folded under one ``<details>``; ``before`` opens it (a meta line)."""
    e = _html.esc
    scope = entry.get("scope") if isinstance(entry.get("scope"), dict) else {}
    body = [before]
    if entry.get("paraphrase"):
        body.append(f"<p><i>{e(entry['paraphrase'])}</i></p>")
    if entry.get("rule"):
        body.append(f"<p class='rule'><b>Rule.</b> {e(entry['rule'])}</p>")
    body.append(f"<p><b>Measured.</b> {e(entry.get('summary'))}</p>")
    if scope.get("text"):
        body.append(f"<p><b>Evidence.</b> {e(scope['text'])}</p>")
    body.append(conditions_html(entry))
    body.append(after)
    return _html.details("rule, evidence, measured figures and the raw record",
                         f"<div class='fold'>{''.join(body)}</div>", cls="fold")


def glance_html(entry: dict, with_id: bool = True) -> str:
    """The first line (a chip and the words) and the picture, unfolded."""
    verdict = entry.get("verdict") or "not run"
    words = headline(entry)
    q = entry.get("qualifier")
    head = f"{verdict} ({q}):" if q else f"{verdict}:"  # the chip says the verdict; the qualifier stays in words
    words = (f"({q}) " if q else "") + words[len(head):].lstrip() if words.startswith(head) else words
    who = f"<b>{_html.esc(entry.get('id', ''))}</b> " if with_id else ""
    return (f"<p class='glance'>{who}{_html.badge(verdict)} {_html.esc(words)}</p>"
            f"<div class='picture'>{picture_html(entry)}</div>")


def details_text(entry: dict, where: str = "") -> str:
    """Everything about a verdict as plain text, for a terminal: the first line, the conditions (the
    picture's content), the rule, the measured summary, the evidence and where it was measured."""
    lines = [f"{entry.get('id', '')} {headline(entry)}"]
    if entry.get("paraphrase"):
        lines.append(f"  claim: {entry['paraphrase']}")
    if entry.get("figure"):
        lines.append(f"  article's figure: {entry['figure']}")
    conds = picture_text(entry)
    if conds:
        lines.append("  conditions:")
        lines += ["  " + x for x in conds]
    lines.append(f"  reading: {entry.get('reading') or ''}".rstrip())
    lines.append(f"  rule: {entry.get('rule') or ''}".rstrip())
    lines.append(f"  measured: {entry.get('summary') or ''}".rstrip())
    scope = entry.get("scope") if isinstance(entry.get("scope"), dict) else {}
    if scope.get("text"):
        lines.append(f"  evidence: {scope['text']}")
    if where:
        lines.append(f"  ({where})")
    return "\n".join(lines)
