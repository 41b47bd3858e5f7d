"""Verdict rules as data: :class:`Rule` (one sentence and its numbers) and :class:`Band` (the one
reading of an article's figure that every claim uses).

A rule is declared once, beside its claim's check (``nogradlab/claims/nb*.py``); the verdict is a
pure function of the check's measurements and the rule, so a stored column is judged again by
today's rule whenever it is shown (:func:`nogradlab.claims.judge`).

How a measured value meets an article's figure (:meth:`Band.read`), for every claim alike:

* **"X-Y %"** (``Band("range", X, Y)``): the value lies in [X, Y]. Above Y disagrees as much as
  below X: the article gave a range, not a floor.
* **"at least X"** (``Band("at least", X)``): the value is X or more; **"more than X"** (``Band("more than",
  X)``): the value exceeds X (an interval that reaches X from below does not agree).
* **"about X"** (``Band("about", X)``): within 20 % of X either way, [0.8 X, 1.2 X] (about 30 % is
  24-36 %, about 2.5x is 2.0-3.0x).

Each condition (a workload, a batch) is then one of three: it **agrees** when its whole 95 %
confidence interval lies on the agreeing side of every edge, **disagrees** when the whole interval
lies on the other side, and is **unresolved** when the interval straddles an edge. The decision is
made on unrounded values; rounding is for display only. A value without an interval (bytes, an
estimate) is its own interval. A disagreeing condition says which way (``side``: ``"above"`` or
``"below"`` the band). The claim (:data:`AGGREGATE`, :func:`verdict_of`): all agree, ``holds``;
some agree and some disagree, ``depends``; none agrees and some disagree, ``does not hold`` (an
unresolved condition beside them could only turn it into ``depends``, never into ``holds``: the
summary counts them); none disagrees and some are unresolved, ``inconclusive``, with the number of
timing rounds that would decide it (:func:`rounds_to_decide`: an interval narrows as one over the
square root of the rounds).

Ties between two timed cases: overlapping 95 % confidence intervals are a tie (:data:`TIE`).
"""
from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from nogradlab.core import format as _format

__all__ = ["RULES", "Rule", "Band", "TIE", "ABOUT", "READINGS", "AGGREGATE", "SELF_CONTRADICTION", "SIDES", "get", "digest", "verdict_of",
           "rounds_to_decide", "MIN_BOOTSTRAP_ROUNDS", "direction_text", "proxy_text", "OLD_PROTOCOL_AA",
           "OLD_PROTOCOL_WIDENING", "coverage_widening", "widening"]

#: what counts as a tie between two timed cases, in every check that ranks or compares timings
TIE = "overlapping 95 % confidence intervals are a tie (no ranking, 'no clear difference')"

#: "about X" reads as X within this share of X, either way
ABOUT = 0.20

#: the three readings of one condition against a band
READINGS = ("agrees", "disagrees", "unresolved")

#: which way a disagreeing condition lies from the article's figure
SIDES = ("above", "below")

#: how the conditions' readings make the claim's verdict (:func:`verdict_of`), in the words every
#: rule sentence that judges several conditions uses
AGGREGATE = ("holds if every condition agrees; depends if some agree and some disagree; does not hold if none "
             "agrees and some disagree; inconclusive if none disagrees and some are unresolved")

#: the case every rule sentence of a claim reading a quantity several claims share (a workload's forward
#: timing, the cost of entering and leaving no_grad) names: a stored column that measured the quantity
#: several times with values that contradict each other does not decide the claim (claims.evidence)
SELF_CONTRADICTION = (" A column that contradicts itself on a quantity this claim reads (one quantity, several values "
                      "that do not overlap; for a workload's forward timing, at any batch of that workload) does "
                      "not decide what the conflict touches (that workload's conditions are unresolved; a cost is "
                      "read with each of its values): needs re-measuring, unless it cannot change the verdict.")

#: the fewest paired rounds a timed condition's interval is read from: the claim checks' first look
#: (nogradlab.timing.looks). The signed-rank interval is exact at any number of rounds, but read at
#: 99 % (the first of five looks) over fewer than 10 rounds it spans most of their range
#: (the name is from the bootstrap interval it replaced)
MIN_BOOTSTRAP_ROUNDS = 10

#: the first protocol whose timed intervals hold their 95 % at the stopping time, on a busy machine too
#: (nogradlab.claims.evidence): protocol 3's held on a quiet one (1-3 % of A/A runs excluded the truth) but not
#: beside bursty neighbours (22 of 50, benchmarks/README-coverage.md table (c)); no stored column is of protocol 3
VALID_INTERVALS_SINCE = 4

#: the measured coverage of the protocols before :data:`VALID_INTERVALS_SINCE` (1 and 2: a percentile bootstrap
#: read after every block of rounds, each case calibrated from one timing), as the claim checks ran them: A/A
#: runs on the shared 2-core CPU (benchmarks/README-coverage.md, table (a), its three "before" rows: 37, 43
#: and 36 of 100) whose 95 % interval excluded the true ratio: (runs that excluded it, runs)
OLD_PROTOCOL_AA = (116, 300)


def _binomial_upper(k: int, n: int, alpha: float = 0.05) -> float:
    """The one-sided ``1 - alpha`` upper Clopper-Pearson bound of a rate seen ``k`` times in ``n``."""
    if not 0 <= k <= n or n < 1:
        raise ValueError(f"need 0 <= k <= n and n >= 1, got k={k!r}, n={n!r}")
    if k == n:
        return 1.0

    def cdf(p):  # P(X <= k) for X ~ Binomial(n, p), in logs (n of several hundred overflows floats)
        return sum(math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
                            + i * math.log(p) + (n - i) * math.log1p(-p)) for i in range(k + 1))

    lo, hi = k / n, 1.0
    for _ in range(60):  # cdf falls as p grows: the bound is where it reaches alpha
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) > alpha else (lo, mid)
    return hi


def coverage_widening(misses: int, runs: int) -> float:
    """How many times wider about its point a nominal 95 % interval must be read to cover at 95 %, when
    intervals made the same way excluded the truth in ``misses`` of ``runs``: with ``p`` that rate's one-sided
    95 % upper bound (:func:`_binomial_upper`), such an interval's half-width is ``z(1 - p/2)`` standard errors
    instead of ``z(0.975)`` under a normal-error model, so the factor is their ratio. The model reads the misses
    as a too-narrow interval; the old protocols' misses came partly from a bias (a case calibrated from one
    timing read faster than itself), which no factor on a width measures: a lower bound on the doubt, not
    its whole."""
    p = _binomial_upper(misses, runs)
    if p >= 1:
        raise ValueError(f"{misses} misses in {runs} runs: no interval width can be derived")
    normal = statistics.NormalDist()
    return normal.inv_cdf(0.975) / normal.inv_cdf(1 - p / 2)


#: the factor (about 2.5) a timed interval of a protocol before :data:`VALID_INTERVALS_SINCE` is widened by about
#: its point before it is read against a band edge (:func:`widening`), derived from :data:`OLD_PROTOCOL_AA`: an
#: interval that, read so, crosses an edge gives no side (resnet50@16's time saving in the H200 column,
#: 9.4 % [5.9 %, 19.992 %], ends 0.008 points under 20 %)
OLD_PROTOCOL_WIDENING = coverage_widening(*OLD_PROTOCOL_AA)


def widening(protocol: "int | None") -> float:
    """:data:`OLD_PROTOCOL_WIDENING` for a column of a protocol before :data:`VALID_INTERVALS_SINCE` (or of an
    unrecorded one), 1 for today's (its intervals hold their 95 %: benchmarks/README-coverage.md)."""
    return OLD_PROTOCOL_WIDENING if protocol is None or protocol < VALID_INTERVALS_SINCE else 1.0


def _widened(point: float, lo: float, hi: float, factor: float) -> tuple:
    """``(lo, hi)`` each moved ``factor`` times as far from ``point``."""
    return point - factor * (point - lo), point + factor * (hi - point)


def widened_text(factor: float) -> str:
    """How an older protocol's interval is read, in words (the rule sentences of the claims that read one)."""
    k, n = OLD_PROTOCOL_AA
    return (f"read {factor:.1f} times as wide about its point, the width at which intervals that excluded the "
            f"truth in {k} of {n} A/A runs (benchmarks/README-coverage.md) would cover at 95 %")


@dataclass(frozen=True)
class Band:
    """The article's figure as an interval a measured value is read against.

    ``kind`` is ``"range"`` (``low``-``high``), ``"at least"`` (``low`` or more), ``"more than"`` (over
    ``low``: the article's "over X", ">X", "can exceed X") or ``"about"``
    (``low`` within :data:`ABOUT` of itself). ``unit`` is ``"%"`` (values are fractions: 0.2 is
    20 %) or ``"x"`` (a factor), for display."""

    kind: str
    low: float
    high: "float | None" = None
    unit: str = "%"

    def __post_init__(self):
        if self.kind not in ("range", "at least", "more than", "about"):
            raise ValueError(f"band kind {self.kind!r}; allowed: range, at least, more than, about")
        if self.kind == "range" and (self.high is None or self.high < self.low):
            raise ValueError("a range band needs high >= low")
        if self.unit not in ("%", "x"):
            raise ValueError(f"band unit {self.unit!r}; allowed: %, x")

    @property
    def edges(self) -> tuple:
        """(lowest agreeing value, highest agreeing value or None when unbounded)."""
        if self.kind == "range":
            return (self.low, self.high)
        if self.kind == "about":
            return (self.low * (1 - ABOUT), self.low * (1 + ABOUT))
        return (self.low, None)

    def read(self, point: float, lo: "float | None" = None, hi: "float | None" = None) -> str:
        """``"agrees"``, ``"disagrees"`` or ``"unresolved"`` for a value and its 95 % CI (unrounded)."""
        lo = point if lo is None else lo
        hi = point if hi is None else hi
        a, b = self.edges
        if self.kind == "more than":
            return "agrees" if lo > a else "disagrees" if hi <= a else "unresolved"
        if lo >= a and (b is None or hi <= b):
            return "agrees"
        if hi < a or (b is not None and lo > b):
            return "disagrees"
        return "unresolved"

    def side(self, point: float, lo: "float | None" = None, hi: "float | None" = None) -> "str | None":
        """``"above"`` or ``"below"`` the band for a disagreeing value and its CI, else None."""
        lo = point if lo is None else lo
        hi = point if hi is None else hi
        a, b = self.edges
        if hi < a or (self.kind == "more than" and hi <= a):
            return "below"
        if b is not None and lo > b:
            return "above"
        return None

    def _fmt(self, v: float) -> str:
        return f"{v * 100:.4g} %" if self.unit == "%" else f"{v:.3g}x"

    def text(self) -> str:
        a, b = self.edges
        if self.kind == "range":
            return f"{self._fmt(a)} to {self._fmt(b)}"
        if self.kind == "about":
            return f"about {self._fmt(self.low)} ({self._fmt(a)} to {self._fmt(b)})"
        return f"{self.kind} {self._fmt(a)}"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "low": self.low, "high": self.high, "unit": self.unit, "edges": list(self.edges)}


def verdict_of(readings) -> str:
    """The claim's verdict from its conditions' readings (see the module's docstring)."""
    readings = list(readings)
    if not readings:
        raise ValueError("verdict_of needs at least one reading")
    bad = [r for r in readings if r not in READINGS]
    if bad:
        raise ValueError(f"reading {bad[0]!r}; allowed: {', '.join(READINGS)}")
    if all(r == "agrees" for r in readings):
        return "holds"
    if "disagrees" in readings:
        return "depends" if "agrees" in readings else "does not hold"
    return "inconclusive"


def rounds_to_decide(point: float, lo: float, hi: float, edges, rounds: int) -> "int | None":
    """How many rounds in all would move an interval off the edge it straddles, assuming its width
    shrinks as one over the square root of the rounds and its point stays: ``None`` when the point
    lies on the edge (no number of rounds decides it) or the interval straddles nothing. (Every look
    of one comparison reads its interval at the same confidence, ``nogradlab.timing.look_confidence``,
    so the square-root rule holds across its looks; more looks, a larger ``max_rounds``, widen each.)"""
    worst = 0
    for e in edges:
        if e is None or not (lo < e < hi or (lo <= e <= hi and lo != hi)):
            continue
        need = abs(point - e)
        have = (hi - point) if e > point else (point - lo)
        if need <= 0:
            return None
        worst = max(worst, math.ceil(rounds * (have / need) ** 2))
    return worst or None


@dataclass(frozen=True)
class Rule:
    """A claim's verdict rule: ``text`` (one human sentence, shown beside every verdict) and the
    numbers the judge reads, so the sentence and the decision cannot drift apart.

    ``band`` is the article's figure (:class:`Band`), ``tolerance`` and ``threshold`` are cut-offs
    as ``text`` says, ``min_samples`` the fewest timing rounds per case the rule accepts, ``tie``
    what counts as a tie between timed cases."""

    text: str
    band: "Band | None" = None
    tolerance: "float | None" = None
    threshold: "float | None" = None
    min_samples: "int | None" = None
    tie: str = ""

    def to_dict(self) -> dict:
        d = asdict(self)
        d["band"] = self.band.to_dict() if self.band else None
        return d


#: the registry's lookups, given by ``nogradlab.claims.ledger`` when it is imported (this module imports no other
#: part of the ledger: the registry reads rules, rules do not read the registry)
_REGISTRY: dict = {"get": None, "ids": lambda: ()}


def use_registry(get, ids) -> None:
    """Called once by ``nogradlab.claims.ledger``: ``get(claim_id)`` -> its Claim, ``ids()`` -> every id."""
    _REGISTRY.update(get=get, ids=ids)


class _Rules(Mapping):
    """claim id -> its :class:`Rule`, read from the claims' declarations."""

    def __getitem__(self, claim_id):
        try:
            return _REGISTRY["get"](claim_id).rule
        except (ValueError, TypeError):
            raise KeyError(claim_id) from None

    def __iter__(self):
        return iter(_REGISTRY["ids"]())

    def __len__(self):
        return len(_REGISTRY["ids"]())


#: claim id -> its rule (from the declarations)
RULES = _Rules()


def get(claim_id: str) -> Rule:
    try:
        return RULES[claim_id]
    except KeyError:
        raise ValueError(f"no rule for claim {claim_id!r}; allowed: {', '.join(RULES)}") from None


def digest(claim_id: "str | None" = None) -> str:
    """A short fingerprint of one claim's rule sentence (or of all of them): a reference made by
    another rule has another fingerprint."""
    text = RULES[claim_id].text if claim_id else "\n".join(f"{k}: {r.text}" for k, r in sorted(RULES.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def read_conditions(items, band: Band, min_rounds: int = MIN_BOOTSTRAP_ROUNDS, widen: float = 1.0, *,
                    estimated) -> tuple:
    """``(verdict, rows)`` for conditions read against ``band``.

    ``estimated`` says where each figure comes from, and every judge must say it (no default: a display
    draws an estimate and a measurement differently, and a guess would draw one as the other): True for a
    model's estimate (fake tensors, the virtual CUDA device, the allocator model), False for a measurement;
    one bool for all ``items`` or one per item.

    ``items`` are ``(name, point, ci_low, ci_high, rounds)``; ``ci_low``/``ci_high`` None for an exact
    value (bytes, an estimate), ``rounds`` the paired timing rounds behind the interval (None when
    untimed). A timed condition with fewer than ``min_rounds`` rounds is unresolved whatever its
    interval says (the checks' first look is at 10 rounds: fewer were never looked at). A timed interval is
    read ``widen`` times as wide about its point (:func:`widening`: an older protocol's, which under-covers);
    one that decides as stored but crosses an edge so widened is unresolved, its row marked ``near_edge``
    with the ``widened_ci`` it was read by. Each row: ``condition``,
    ``value``, ``ci``, ``reading``, ``side`` (``"above"``/``"below"`` the band when it disagrees, else
    None), ``rounds``, ``rounds_to_decide`` (an unresolved timed condition's estimate, see
    :func:`rounds_to_decide`), ``estimated``."""
    items = list(items)
    flags = [estimated] * len(items) if isinstance(estimated, bool) else list(estimated)
    if len(flags) != len(items) or not all(isinstance(f, bool) for f in flags):
        raise ValueError(f"estimated must be True, False or one of them per item ({len(items)}), not {estimated!r}")
    rows = []
    for (name, p, lo, hi, n), est in zip(items, flags):
        near, wide = False, None
        if n is not None and lo is not None and n < min_rounds:
            r, more = "unresolved", min_rounds
        else:
            r = band.read(p, lo, hi)
            if r != "unresolved" and n is not None and lo is not None and widen > 1:
                wide = _widened(p, lo, hi, widen)
                if band.read(p, *wide) == "unresolved":
                    r, near = "unresolved", True
            more = (rounds_to_decide(p, lo, hi, band.edges, n)
                    if r == "unresolved" and n and lo is not None and not near else None)
        row = {"condition": name, "value": p, "ci": None if lo is None else [lo, hi], "reading": r,
               "side": band.side(p, lo, hi) if r == "disagrees" else None,
               "rounds": n, "rounds_to_decide": more, "estimated": est}
        if near:
            row["near_edge"] = True
            row["widened_ci"] = list(wide)
            row["widening"] = widen
        rows.append(row)
    return verdict_of(r["reading"] for r in rows), rows


def readings_text(rows, fmt=lambda v: _format.percent(v, 0)) -> str:
    """``agree: a (23 %), ...; disagree: ...; unresolved: ...`` with how many rounds would decide."""
    parts = []
    for word, key in (("agree", "agrees"), ("disagree", "disagrees"), ("unresolved", "unresolved")):
        names = [f"{r['condition']} ({fmt(r['value'])})" for r in rows if r["reading"] == key]
        if names:
            parts.append(f"{word}: {', '.join(names)}")
    text = "; ".join(parts)
    near = [r for r in rows if r.get("near_edge")]
    open_ = [r for r in rows if r["reading"] == "unresolved" and not r.get("near_edge")]
    if near:
        text += (f" ({', '.join(str(r['condition']) for r in near)}: an interval of an older protocol, which "
                 f"under-covers, {widened_text(near[0]['widening'])}: so read it crosses a band edge, no evidence "
                 f"of a side)")
    if open_:
        more = [r["rounds_to_decide"] for r in open_ if r["rounds_to_decide"]]
        if more:
            text += (f" (their intervals straddle a band edge; about {max(more)} timing rounds per case "
                     f"would decide {'them' if len(open_) > 1 else 'it'}, where {max(r['rounds'] or 0 for r in open_)} were run)")
        elif any(r["rounds"] for r in open_):
            text += " (their intervals straddle a band edge and their point lies on it)"
        elif any(r["ci"] for r in open_):
            text += " (untimed values within their stated error, such as an estimate's validation error, of a band edge)"
        else:
            text += " (exact values on a band edge)"
    return text


def _pct0(v: float) -> str:
    return _format.percent(v, 0)


def _by_workload(rows, fmt, group: bool = True) -> str:
    """``resnet50 (76% to 86%) and unet (53% to 68%)``: conditions grouped by their workload (the
    name before ``@`` or a space; ``group=False``: each condition by its own name), each with its
    value or the range of its values."""
    groups: dict = {}
    for r in rows:
        name = str(r["condition"])
        groups.setdefault(name.split("@")[0].split(" ")[0] if group else name, []).append(r["value"])
    parts = [f"{k} ({fmt(min(v))}" + (f" to {fmt(max(v))})" if len(v) > 1 and fmt(min(v)) != fmt(max(v)) else ")")
             for k, v in groups.items()]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def direction_text(rows, more: str, less: str, fmt=_pct0, nothing: "str | None" = None,
                   group: bool = True) -> str:
    """The plain conclusion of the disagreeing rows, which way first, by workload: ``"<more> for
    resnet50 (84%) and unet (68%); <nothing> for mlp (0%)"``. ``more``, ``less`` and ``nothing``
    are whole phrases ("no_grad saves more memory than the article says"); ``nothing`` replaces
    ``less`` for a row whose value is 0 or less, or whose CI reaches 0 (no clear saving). Empty when no row disagrees. A summary leads with
    it, before its numbers."""
    above = [r for r in rows if r.get("reading") == "disagrees" and r.get("side") == "above"]
    below = [r for r in rows if r.get("reading") == "disagrees" and r.get("side") == "below"]
    zero = [r for r in below if nothing and r["value"] is not None
            and (r["value"] <= 0 or (r.get("ci") is not None and r["ci"][0] <= 0))]
    below = [r for r in below if r not in zero]
    return "; ".join(f"{phrase} for {_by_workload(rs, fmt, group)}"
                     for phrase, rs in ((more, above), (less, below), (nothing, zero)) if rs)


def proxy_text(band: Band, value: float, lo: "float | None" = None, hi: "float | None" = None,
               widen: float = 1.0) -> str:
    """Where a measured proxy of an untestable figure lies against the article's band, in words:
    ``"inside the article's about 28 % (22.4 % to 33.6 %)"``, ``"above ..."``, ``"below ..."`` or
    ``"across an edge of ..."``; an interval read ``widen`` times as wide (:func:`widening`: an older
    protocol's, which under-covers) that then crosses an edge is ``"across an edge once widened 2.5x (no side)
    of ..."``. Shown, never deciding (nogradlab/claims/README.md, "Unsourced statistics and proxies")."""
    r = band.read(value, lo, hi)
    if r != "unresolved" and lo is not None and hi is not None and widen > 1 \
            and band.read(value, *_widened(value, lo, hi, widen)) == "unresolved":
        return (f"across an edge once widened {widen:.1f}x for an older protocol's under-coverage (no side) of "
                f"the article's {band.text()}")
    where = {"agrees": "inside", "unresolved": "across an edge of"}.get(r) or band.side(value, lo, hi)
    return f"{where} the article's {band.text()}"
