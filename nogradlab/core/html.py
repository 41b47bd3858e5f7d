"""Every piece of HTML the package shows, made in one place: escaped text, verdict chips, folded blocks,
tables, a stored record as nested tables, and the band-and-dot picture (inline SVG) a verdict is read from.

The notebook's result box (``nogradlab.claims.result``), the report (``nogradlab.run.report``) and the
widgets call these, as :mod:`nogradlab.core.format` is called for every number, so a figure, a chip or a
folded block reads the same wherever it is shown. Pictures are inline SVG: no matplotlib on the way to a
verdict, and the same markup works in a notebook, report.html and a browser with no scripts::

    >>> from nogradlab.core import html
    >>> html.value(1.153, "x"), html.value(0.234, "%")
    ('1.15×', '23%')
    >>> svg = html.band_chart([html.Point("resnet50@16", 0.09, 0.06, 0.20, "disagrees", band=(0.2, 0.4))], "%")
    >>> svg.startswith("<svg")
    True
"""
from __future__ import annotations

import html as _html
import json
import math
import textwrap
import unicodedata
from dataclasses import dataclass

from nogradlab.core import format as _format

__all__ = ["VERDICT_COLOURS", "READING_COLOURS", "esc", "badge", "details", "table", "value", "interval",
           "record", "Point", "band_chart", "legend_text", "cases_table", "cell_value"]

#: one colour per verdict word, in every display (the report's chips, the notebook's result box)
VERDICT_COLOURS = {"holds": "#1a7f37", "does not hold": "#cf222e", "depends": "#9a6700", "inconclusive": "#8250df",
                   "not testable": "#57606a", "needs re-measuring": "#6e7781", "not run": "#bf3989"}

#: one colour per condition's reading against the article's band (a picture's dots, a table of cases)
READING_COLOURS = {"agrees": "#1a7f37", "disagrees": "#cf222e", "unresolved": "#8c959f"}


#: Unicode's bidirectional controls: stored text must not reorder what a page shows
BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def esc(x) -> str:
    """``x`` as HTML text (None reads as nothing), its control characters (ESC, BEL, CR...) and
    bidirectional controls shown as visible escapes (``\\x1b``), line breaks and tabs kept: text from a
    stored column is shown as text."""
    text = "" if x is None else str(x)
    if any((unicodedata.category(ch) == "Cc" and ch not in "\n\t") or ch in BIDI for ch in text):
        text = "".join(ch if ch in "\n\t" or not (unicodedata.category(ch) == "Cc" or ch in BIDI)
                       else (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}") for ch in text)
    return _html.escape(text)


def badge(word: str, colour: "str | None" = None) -> str:
    """A verdict chip: the word in white on its colour (:data:`VERDICT_COLOURS`)."""
    colour = colour or VERDICT_COLOURS.get(word, "#000")
    return f'<span class="v" style="background:{colour}">{esc(word)}</span>'


def details(summary: str, body: str, cls: str = "", summary_is_html: bool = False) -> str:
    """A folded block: ``summary`` (escaped unless ``summary_is_html``) opens ``body`` (HTML) on click."""
    c = f" class='{esc(cls)}'" if cls else ""
    return (f"<details{c}><summary>{summary if summary_is_html else esc(summary)}</summary>{body}</details>")


def table(header, rows, cls: str = "", escape: bool = True) -> str:
    """A table of ``header`` and ``rows`` (each a sequence of cells; escaped unless ``escape`` is False)."""
    f = esc if escape else str
    c = f" class='{esc(cls)}'" if cls else ""
    head = "".join(f"<th>{f(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{f(x)}</td>" for x in r) + "</tr>" for r in rows)
    return f"<table{c}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


# ------------------------------------------------------------------------------------------ numbers

def value(v, unit: "str | None" = None) -> str:
    """A measured figure in its band's unit: ``'x'`` a factor (``'1.15×'``), ``'%'`` a fraction as a
    percentage (``'23%'``, one decimal under 10 %), ``'points'`` a change of a share in percentage points
    (``'+23 points'``), else a plain number (:func:`nogradlab.core.format.number`).
    A summary, a table and a picture all call this, so one figure reads one way."""
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
        return _format.number(v)
    if unit == "x":
        return _format.ratio(v)
    if unit == "%":
        return _format.percent(v, 1 if 0 < abs(v) < 0.1 else 0)
    if unit == "points":  # a change of a share, in percentage points (0.229: '+23 points')
        return f"{100 * v:+.0f} points"
    return _format.number(v)


def interval(ci, unit: "str | None" = None) -> str:
    """``[lo, hi]`` in the unit of :func:`value`; ``''`` when ``ci`` is not a pair of numbers."""
    if not isinstance(ci, (list, tuple)) or len(ci) != 2 or any(
            isinstance(x, bool) or not isinstance(x, (int, float)) for x in ci):
        return ""
    return _format.interval(ci[0], ci[1], lambda x: value(x, unit))


def cell_value(key: str, v) -> str:
    """A stored scalar with units taken from its key: bytes in KiB/MiB/GiB, seconds in µs/ms/s, shares
    in %, speed-ups as factors; everything else as is (never cut)."""
    k = str(key).lower()
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, (int, float)):
        if k.endswith("bytes") or k.endswith("_bytes_per_request"):
            return _format.bytes_(v)
        if k.endswith("_ms"):
            return _format.seconds(v / 1e3)
        if k.endswith("_us"):
            return _format.seconds(v / 1e6)
        if k.endswith("_s") or k in ("seconds", "median", "iqr"):
            return _format.seconds(v)
        if isinstance(v, float) and any(w in k for w in ("saved", "share", "gain", "reduction")):
            return _format.percent(v, 1)
        if isinstance(v, float) and ("speedup" in k or "factor" in k or "ratio" in k):
            return _format.ratio(v)
        if isinstance(v, float):
            return f"{v:.4g}"
    return str(v)


def _rounded(v):
    """``v`` with every float cut to 4 significant digits (for display only)."""
    if isinstance(v, float):
        return float(f"{v:.4g}")
    if isinstance(v, dict):
        return {k: _rounded(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_rounded(x) for x in v]
    return v


def record(ev, depth: int = 0, default=repr) -> str:
    """A stored record (a measurement dict) as nested tables: scalars with units (:func:`cell_value`),
    lists of flat rows as tables, deeper structures in their own folded block. Nothing is cut.
    ``default`` turns what JSON cannot hold into text."""
    if not isinstance(ev, dict):
        return f"<code>{esc(json.dumps(ev, default=default))}</code>"
    rows = []
    for k, v in ev.items():
        if isinstance(v, dict) and depth < 3:
            cell = details(f"{len(v)} entries", record(v, depth + 1, default))
        elif isinstance(v, list) and v and all(isinstance(r, dict) for r in v) and depth < 3:
            cols = list(dict.fromkeys(c for r in v for c in r))
            body = [[cell_value(c, r.get(c)) if not isinstance(r.get(c), (dict, list))
                     else json.dumps(_rounded(r.get(c)), default=default) for c in cols] for r in v]
            cell = details(f"{len(v)} rows", table(cols, body))
        elif isinstance(v, (list, tuple)) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
            cell = esc("[" + ", ".join(_format.number(x) for x in v) + "]")
        elif isinstance(v, (list, tuple, dict)):
            cell = f"<code>{esc(json.dumps(_rounded(v), default=default))}</code>"
        else:
            cell = esc(cell_value(k, v))
        rows.append(f"<tr><th style='text-align:left'>{esc(k)}</th><td>{cell}</td></tr>")
    return f"<table>{''.join(rows)}</table>"


# ------------------------------------------------------------------------------------------ pictures

@dataclass
class Point:
    """One condition in a band-and-dot picture: ``label``, ``value`` and its interval (``lo``, ``hi``;
    None for an exact value), its ``reading`` against the band (agrees / disagrees / unresolved), whether it
    is ``estimated`` (a model's figure) or measured, the article's ``band`` for it ``(low, high)``
    (``high`` None: unbounded above), and whether the rule ``counted`` it (False: shown, not counted)."""

    label: str
    value: float
    lo: "float | None" = None
    hi: "float | None" = None
    reading: str = ""
    band: "tuple | None" = None
    estimated: bool = False
    counted: bool = True


_W, _LEFT, _RIGHT, _ROW, _TOP = 560, 200, 20, 20, 8
#: the phone layout (``narrow``): 340 wide, each label on its own line(s) above its row, so the SVG is
#: drawn near 1:1 at 390 px and its 11 px text stays about 11 px (the wide one, squeezed, drew it at 5 px)
_NW, _NLEFT, _NRIGHT, _NLABEL_CHARS, _NLEGEND_CHARS = 340, 12, 18, 52, 54
#: a label's line, in characters (about what _LEFT holds at 11 px), and its lines: a longer label wraps
#: to a second line (a row one line taller) rather than losing the words that tell conditions apart
#: (``resnet50 speed (forward gain stored without an interval)``); past two lines it is cut, whole in
#: the tooltip
_LABEL_CHARS, _LABEL_LINES, _LINE = 32, 2, 11
#: a legend's line, in characters (the picture's width at 11 px)
_LEGEND_CHARS = 92
#: the colour of a condition shown and not counted: neither agreeing nor disagreeing
_SHOWN = "#57606a"


def _label_lines(label: str, chars: int = _LABEL_CHARS) -> list:
    """``label`` in at most :data:`_LABEL_LINES` lines of ``chars`` characters. A label too long for them
    whose parenthesis lists several things (``'resnet50 speed (X05's spread; no interval; same column: ...)'``)
    keeps the first (``'resnet50 speed (X05's spread …)'``): the rest is in the tooltip."""
    if len(label) > chars * _LABEL_LINES and " (" in label and ";" in label.partition(" (")[2]:
        head, _, inner = label.partition(" (")
        label = f"{head} ({inner.split(';')[0].strip()} …)"
    lines = textwrap.wrap(label, chars, break_on_hyphens=False) or [""]
    if len(lines) > _LABEL_LINES:
        rest = " ".join(lines[_LABEL_LINES - 1:])
        lines = lines[:_LABEL_LINES - 1] + [rest[:chars - 1].rstrip() + "…"]
    return lines


def legend_text(points, measured_where: str = "") -> str:
    """The words under a picture of ``points``: the band, the marks drawn (a dot, a diamond, a hollow
    mark: each named only when one is drawn) and the colours of the counted readings drawn.
    ``measured_where``: where the dots were measured, when not by this run (``' on the reference machine'``)."""
    pts = list(points)
    kinds = [k for k, seen in ((f"dot: measured{measured_where}", any(not p.estimated for p in pts)),
                               ("diamond: estimated", any(p.estimated for p in pts)),
                               ("hollow: shown, not counted", any(not p.counted for p in pts))) if seen]
    seen = [w for w in ("agrees", "disagrees", "unresolved") if any(p.reading == w and p.counted for p in pts)]
    return f"grey: the article's band; {', '.join(kinds)}; " + ", ".join(
        f"{'green' if w == 'agrees' else 'red' if w == 'disagrees' else 'grey'} {w}" for w in seen)


def _ticks(a: float, b: float) -> list:
    """Three to five round values between ``a`` and ``b`` (steps of 1, 2, 2.5 or 5 times a power of ten:
    a 0-90 % axis reads 0, 25, 50, 75 %, where it read only 0 and 50 %)."""
    span = b - a
    if span <= 0:
        return [a]
    step = 10 ** math.floor(math.log10(span / 3))
    for m in (1, 2, 2.5, 5, 10):
        if span / (step * m) <= 5:
            step *= m
            break
    first = math.ceil(a / step - 1e-9) * step
    return [round(first + i * step, 12) for i in range(int((b - first) / step + 1e-9) + 1)]


def _tick(t: float, unit: "str | None") -> str:
    """An axis label: as :func:`value`, without the decimals a round tick does not need."""
    if unit == "x":
        return f"{t:g}\u00d7"
    if unit == "%":
        return f"{round(t * 100, 6):g}%"
    return f"{t:g}"


def _axis(pts, unit) -> tuple:
    """``(low, high, ticks)`` of a picture's one axis: every figure, interval and band inside, 0 % or 1x
    in view, a tick beyond the largest figure (84 % reads against 100 %)."""
    xs = [p.value for p in pts] + [x for p in pts for x in (p.lo, p.hi) if x is not None]
    xs += [x for p in pts if p.band for x in p.band if x is not None]
    a, b = min(xs), max(xs)
    if unit == "x":
        a = min(a, 1.0)
    elif unit == "%":
        a = min(a, 0.0)
    top_value = b
    pad = (b - a) * 0.06 or abs(b) * 0.1 or 1.0
    a, b = a - pad, b + pad
    ticks = _ticks(a, b)
    if len(ticks) > 1 and ticks[-1] < top_value:
        b = ticks[-1] + (ticks[1] - ticks[0])
        ticks.append(b)
    return a, b, ticks


def _row_marks(p, ls, y: float, row_top: float, left: float, sx, unit, narrow: bool) -> list:
    """One condition's row of a picture, as SVG pieces: its label (with the whole condition in a tooltip),
    its interval's line and its mark (a circle measured, a diamond estimated; hollow when not counted);
    the group it opens is closed by the caller."""
    out = []
    colour = READING_COLOURS.get(p.reading, "#0969da") if p.counted else _SHOWN
    tip = (f"{p.label}: {value(p.value, unit)} {interval((p.lo, p.hi), unit) if p.lo is not None else ''}"
           f" {p.reading}{' (estimated)' if p.estimated else ' (measured)'}"
           f"{'' if p.counted else ', shown, not counted'}")
    if narrow:  # the label's lines above its row, from the left edge
        spans = "".join(f"<tspan x='{left - 8}' y='{row_top + _LINE * (k + 1):.1f}'>{esc(line)}</tspan>"
                        for k, line in enumerate(ls))
        out.append(f"<g><title>{esc(tip)}</title><text fill='#1f2328'>{spans}</text>")
    else:
        first = y + 4 - _LINE * (len(ls) - 1) / 2
        spans = "".join(f"<tspan x='{left - 6}' y='{first + _LINE * k:.1f}'>{esc(line)}</tspan>"
                        for k, line in enumerate(ls))
        out.append(f"<g><title>{esc(tip)}</title>"
                   f"<text text-anchor='end' fill='#1f2328'>{spans}</text>")
    if p.lo is not None and p.hi is not None:
        out.append(f"<line x1='{sx(p.lo):.1f}' x2='{sx(p.hi):.1f}' y1='{y:.1f}' y2='{y:.1f}' "
                   f"stroke='{colour}' stroke-width='2'/>")
    cx = sx(p.value)
    # filled in the reading's colour when counted; hollow (white inside, grey edge) when only shown
    fill, edge = (colour, "none") if p.counted else ("white", _SHOWN)
    if p.estimated:
        out.append(f"<path class='est' d='M{cx:.1f} {y - 6:.1f}l6 6l-6 6l-6 -6z' fill='{fill}' "
                   f"stroke='{edge}' stroke-width='2'/>")
    else:
        out.append(f"<circle class='meas' cx='{cx:.1f}' cy='{y:.1f}' r='5' fill='{fill}' stroke='{edge}' "
                   "stroke-width='2'/>")
    return out


def band_chart(points, unit: "str | None" = None, title: str = "", legend=True, narrow: bool = False,
               measured_where: str = "") -> str:
    """The band-and-dot picture as inline SVG: one row per condition, the article's band shaded behind
    it, the value a dot with its interval as a line; agreeing dots green, disagreeing red, unresolved grey;
    a measured value a circle, an estimated one a diamond; a condition shown and not counted a hollow mark
    in neither colour. One axis for all rows, in ``unit`` (see :func:`value`); with ``legend``, a line
    underneath says all this in words (:func:`legend_text`; ``legend`` may be the points it speaks for,
    when one legend serves several charts). ``narrow``: the phone layout, each label above its row
    (:data:`_NW`). Axis labels carry ``class='tick'``. ``''`` without points."""
    pts = [p for p in points if isinstance(p.value, (int, float)) and math.isfinite(p.value)]
    if not pts:
        return ""
    a, b, ticks = _axis(pts, unit)
    W, left, right, chars = (_NW, _NLEFT, _NRIGHT, _NLABEL_CHARS) if narrow else (_W, _LEFT, _RIGHT, _LABEL_CHARS)
    width = W - left - right

    def sx(v):
        return left + (min(max(v, a), b) - a) / (b - a) * width

    labels = [_label_lines(p.label, chars) for p in pts]
    # wide: a label beside its row (a second line makes the row taller); narrow: its lines above the row
    rows_h = [(_ROW + _LINE * len(ls)) if narrow else (_ROW + _LINE * (len(ls) - 1)) for ls in labels]
    body = sum(rows_h)
    # the legend's words in lines the picture's width holds (a long legend was cut at the right edge)
    words = [] if legend is False else textwrap.wrap(legend_text(pts if legend is True else legend, measured_where),
                                                     _NLEGEND_CHARS if narrow else _LEGEND_CHARS)
    h = _TOP + body + 24 + (20 + 14 * (len(words) - 1) if words else 0)
    out = [f"<svg class='band-chart {'narrow' if narrow else 'wide'}' role='img' viewBox='0 0 {W} {h}' "
           f"width='100%' style='max-width:{W}px'"
           f" xmlns='http://www.w3.org/2000/svg' font-family='system-ui,sans-serif' font-size='11'>"]
    if title:
        out.append(f"<title>{esc(title)}</title>")
    top = _TOP
    for p, ls, rh in zip(pts, labels, rows_h):
        y = top + rh - _ROW / 2 if narrow else top + rh / 2
        row_top = top
        top += rh
        if p.band:
            lo, hi = p.band
            x0, x1 = sx(lo), sx(b if hi is None else hi)
            out.append(f"<rect x='{x0:.1f}' y='{y - 7:.1f}' width='{max(x1 - x0, 1.5):.1f}' height='14' "
                       "fill='#d0d7de' opacity='0.8'/>")
        out += _row_marks(p, ls, y, row_top, left, sx, unit, narrow)
        out.append("</g>")
    axis = _TOP + body + 4
    out.append(f"<line x1='{left}' x2='{W - right}' y1='{axis}' y2='{axis}' stroke='#57606a'/>")
    for t in ticks:
        out.append(f"<text class='tick' x='{sx(t):.1f}' y='{axis + 13}' text-anchor='middle' fill='#57606a'>"
                   f"{esc(_tick(t, unit))}</text>")
    if legend is False:
        out.append("</svg>")
        return "".join(out)
    spans = "".join(f"<tspan x='4' y='{axis + 32 + 14 * k}'>{esc(line)}</tspan>" for k, line in enumerate(words))
    out.append(f"<text fill='#57606a'>{spans}</text></svg>")
    return "".join(out)


def cases_table(rows, quantity: str = "") -> str:
    """The small picture of a claim without numeric conditions: one line per case and its reading,
    coloured like the band chart's dots. ``rows``: ``(case, reading)`` pairs, or ``(case, figure,
    reading)`` triples with ``quantity`` naming the figures' column (``'largest batch, no_grad / grad'``)."""
    rows = [tuple(r) for r in rows]
    three = any(len(r) == 3 for r in rows)
    head = ("<th>case</th>" + (f"<th>{esc(quantity or 'figure')}</th>" if three else "") + "<th>reading</th>")
    body = "".join("<tr>" + "".join(f"<td>{esc(x)}</td>" for x in (r[:-1] if three else r[:1])
                                    + (("",) if three and len(r) == 2 else ()))
                   + f"<td style='color:{READING_COLOURS.get(r[-1], '#1f2328')};font-weight:600'>{esc(r[-1])}</td></tr>"
                   for r in rows)
    return f"<table class='cases'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
