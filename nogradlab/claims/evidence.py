"""What a stored column of measurements is worth: how old it is, and whether it agrees with itself.

**Protocol.** :data:`PROTOCOL` is the version of the measuring protocol: how the checks measure (which
cases, batches and timings; how intervals are made and when a comparison stops), as far as it changes what
a stored measurement means. It is bumped whenever a change alters what a measurement means (a judge
reading the same measurement differently is a rule change, not a protocol change). Every claims.json made
by today's code records it as ``meta.protocol``. A column of an older protocol is *stale*: a verdict it
decides says so in words and carries ``scope.stale: true`` with ``scope.age`` (the column's date, commit
and torch release, :func:`column_age`). :data:`PROTOCOLS` says what each version was.

**One quantity, one value.** Within one column, several claims read the same physical quantity (no_grad's
time saving for one workload and batch is read by claims of notebooks 01, 04, 05 and 09; the cost of entering
and leaving ``no_grad`` by two of notebook 03). Each claim declares what it reads (``shared_readings``).
Today's checks share one timing per condition (:data:`nogradlab.claims.runcache.RUN`), so their
readings are the same number; an older column may hold several that contradict each other.
:func:`column_conflicts` finds the quantities whose readings do not overlap; such a column does not decide
the claims that read them (:func:`conflicts_for`), and, for a workload's forward timing, no claim that reads
any timing of that workload (at any batch): the column's timings of that workload are in doubt together.

A reading's interval is its stored 95 % interval. A reading stored without one has an unknown spread: it
is read as if it had been measured as well as the column measured the same quantity, i.e. it borrows the
widest distances below and above the value among the column's stored intervals of that quantity, and never
less than :data:`POINT_TOLERANCE` (2 percentage points for a time saving, 25 % for a time). A point can
then contradict an interval only by more than that interval's own spread. Different
quantities are not read as one: protocol 1 timed notebook 04's validation loop whole, without a sync per
batch (not a forward): that is its own quantity (``loop time saving``), in doubt with its workload's other
timings. Protocol 1 stored the article table's forward-vs-forward gain without an interval: it is read as
such a reading (with the column's own spread for it), as notebook 03's modelled cost is.
What such a conflict still leaves decided is ``claims._despite``'s.
"""
from __future__ import annotations

import math

from nogradlab.core import format as _format

__all__ = ["PROTOCOL", "PROTOCOLS", "POINT_TOLERANCE", "protocol_of", "column_age", "age_label", "readings",
           "column_conflicts", "conflicts_for", "conflict_text"]

#: the measuring protocol of today's code (bump it when a change alters what a measurement means)
PROTOCOL = 4

#: what each protocol version was
PROTOCOLS = {
    1: "before 2026-12-01 (nogradlab up to 182a8d6): each check timed its own conditions, so one quantity "
       "could be measured several times with different settings; the article table's speed cells timed a training step against "
       "a no_grad forward, and its forward-vs-forward gain was stored without an interval; protocols were not yet "
       "recorded (schema_version 1)",
    2: "2026-12-01 on: one shared timing per condition and run (timing.RUN), read by every check that needs it; "
       "the article table's speed cells time forward against forward; the transformer's no_grad timed with its fused fast path off and on",
    3: "2026-12-01 night on: each round runs the cases in a random order; a speedup is the typical paired "
       "per-round ratio (Hodges-Lehmann) with a Wilcoxon signed-rank interval, read at 1 - 0.05/looks at the "
       "looks 10/15/20/30/40 rounds (valid when the rounds stop), where protocol 2 read a percentile "
       "bootstrap of the ratio of medians after every block; the cases are calibrated together",
    4: "2026-12-05 on: on a CPU each sample is read from the timed thread's CPU time (the process's with several "
       "threads; wall time where a case waits), wall time kept beside it; one thread by default where the CPUs are "
       "2 or fewer or busier than their count; cases whose costs lie within 1.2x get the same calls per sample. "
       "Protocol 3's A/A intervals excluded the truth in 22 of 50 runs beside bursty neighbours on a 2-core CPU "
       "(benchmarks/README-coverage.md, table (c))",
}

#: the half-width of the interval given to a reading stored without one, per kind of quantity:
#: ("abs", x) an absolute width, ("rel", x) a fraction of the value
POINT_TOLERANCE = {"time saving": ("abs", 0.02), "loop time saving": ("abs", 0.02), "seconds": ("rel", 0.25)}

#: the kinds of quantity that are timings of a workload (a conflict on one puts all of that workload's in doubt)
TIMED = ("time saving", "loop time saving")


def protocol_of(meta: "dict | None") -> "int | None":
    """The protocol a column was measured by: ``meta.protocol``; 1 for a column made before protocols
    were recorded (``schema_version`` 1); None when it is not known."""
    meta = meta or {}
    p = meta.get("protocol")
    if isinstance(p, int) and not isinstance(p, bool) and p >= 1:
        return p
    if meta.get("schema_version") == 1:
        return 1
    return None


def column_age(meta: "dict | None") -> dict:
    """How old a column is: ``protocol`` (None: not recorded), ``current_protocol``, ``stale`` (made by
    another protocol than today's, or by an unrecorded one), ``measured_on`` (the date it was written,
    YYYY-MM-DD), ``commit`` (nogradlab's, when recorded), ``torch`` and ``label`` (:func:`age_label`)."""
    meta = meta or {}
    p = protocol_of(meta)
    age = {"protocol": p, "current_protocol": PROTOCOL, "stale": p != PROTOCOL,
           "measured_on": str(meta.get("generated") or "")[:10] or None,
           "commit": (str(meta["nogradlab_commit"]) if meta.get("nogradlab_commit") else None),
           "torch": str(meta.get("torch") or (meta.get("device") or {}).get("torch") or "") or None}
    age["label"] = age_label(meta, age)
    return age


def age_label(meta: "dict | None", age: "dict | None" = None) -> str:
    """One line saying how old a column is, e.g. ``"older protocol 1 (today's: 2): measured 2026-11-30,
    nogradlab 182a8d6, torch 2.11.0+cu130"`` or ``"today's protocol 2: measured 2026-12-01, ..."``."""
    a = age or column_age(meta)
    p = a["protocol"]
    head = (f"today's protocol {p}" if p == PROTOCOL else
            f"protocol not recorded (today's: {PROTOCOL})" if p is None else
            f"older protocol {p} (today's: {PROTOCOL})" if p < PROTOCOL else
            f"newer protocol {p} (this nogradlab's: {PROTOCOL})")
    parts = [f"measured {a['measured_on'] or 'on an unrecorded date'}",
             f"nogradlab {a['commit']}" if a["commit"] else "nogradlab commit not recorded"]
    if a["torch"]:
        parts.append(f"torch {a['torch']}")
    return f"{head}: " + ", ".join(parts)


# ------------------------------------------------------------------------ one quantity, one value

def _num(x) -> "float | None":
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    try:
        x = float(x)
    except OverflowError:
        return None
    return x if math.isfinite(x) else None


def _ci(c) -> "tuple | None":
    if isinstance(c, (list, tuple)) and len(c) == 2:
        lo, hi = _num(c[0]), _num(c[1])
        if lo is not None and hi is not None and lo <= hi:
            return lo, hi
    return None


def _saving(speedup) -> "float | None":
    """time saving 1 - t_case / t_grad from a speedup t_grad / t_case."""
    s = _num(speedup)
    return 1.0 - 1.0 / s if s is not None and s > 0 else None


def _saving_ci(ci) -> "tuple | None":
    c = _ci(ci)
    if c is None or c[0] <= 0:
        return None
    return 1.0 - 1.0 / c[0], 1.0 - 1.0 / c[1]


def _rows(values) -> list:
    rows = values.get("rows") if isinstance(values, dict) else None
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def _key_saving(workload, batch, case) -> "tuple | None":
    if not isinstance(workload, str) or isinstance(batch, bool) or not isinstance(batch, int):
        return None
    return ("time saving", workload, batch, case or "no_grad")


def _key_loop_saving(workload, batch) -> "tuple | None":
    """The key of a whole loop's time saving (no sync per batch): another quantity than a forward's."""
    k = _key_saving(workload, batch, None)
    return None if k is None else ("loop time saving",) + k[1:]


#: the helpers a claim's ``shared_readings`` (declared in its nbNN module) reads a stored column with
num, ci, saving, saving_ci, rows, key_saving = _num, _ci, _saving, _saving_ci, _rows, _key_saving
key_loop_saving = _key_loop_saving


#: claim id -> its declared ``shared_readings`` (None: it reads no shared quantity); given by
#: ``nogradlab.claims.ledger`` when it is imported, so that this module imports no other part of the ledger
_READERS: dict = {"of": lambda claim_id: None}


def use_readers(reader_of) -> None:
    """Called once by ``nogradlab.claims``: ``reader_of(claim_id)`` -> the claim's ``shared_readings``
    or None (also for an id no claim has)."""
    _READERS["of"] = reader_of


def _reader(claim_id):
    return _READERS["of"](claim_id)


def readings(claims, protocol: "int | None" = None) -> dict:
    """quantity key -> ``[{"claim", "value", "interval", "stored_interval"}]`` over a column's entries
    (``doc["claims"]``): every reading of a physical quantity that several claims measure. ``protocol``
    is the column's (:func:`protocol_of`): what a measurement means depends on it."""
    out: dict = {}
    for e in claims or []:
        reader = _reader(e.get("id")) if isinstance(e, dict) and isinstance(e.get("id"), str) else None
        if reader is None:
            continue
        values = e.get("measurements", e.get("evidence"))
        if not isinstance(values, dict):
            continue
        try:
            found = list(reader(values, protocol))
        except (TypeError, ValueError, AttributeError, KeyError, ZeroDivisionError, OverflowError):
            continue  # a malformed entry reads nothing (its judge says what it lacks)
        for key, value, ci in found:
            if key is None or value is None:
                continue
            if ci is not None and not ci[0] <= value <= ci[1]:
                ci = (min(ci[0], value), max(ci[1], value))
            out.setdefault(key, []).append({"claim": e["id"], "value": value, "ci": ci})
    for key, rs in out.items():
        # a reading without an interval borrows the spread the column measured for the same quantity
        # (the widest distances below and above the value among its stored intervals), never less than
        # POINT_TOLERANCE: it is read as if measured as well as the column measured that quantity
        below = max((r["value"] - r["ci"][0] for r in rs if r["ci"] is not None), default=0.0)
        above = max((r["ci"][1] - r["value"] for r in rs if r["ci"] is not None), default=0.0)
        kind, width = POINT_TOLERANCE[key[0]]
        for r in rs:
            value, ci = r.pop("value"), r.pop("ci")
            if ci is None:
                w = width if kind == "abs" else abs(value) * width
                interval, stored = (value - max(w, below), value + max(w, above)), False
            else:
                interval, stored = ci, True
            r.update(value=value, interval=list(interval), stored_interval=stored)
    return out


def _describe(key) -> str:
    if key[0] == "time saving":
        case = "" if key[3] == "no_grad" else f" ({key[3]})"
        return f"no_grad's time saving{case} for {key[1]} at batch {key[2]}"
    if key[0] == "loop time saving":
        return f"no_grad's time saving over a whole loop (no sync per batch) for {key[1]} at batch {key[2]}"
    return f"the cost of {key[1]}"


def _fmt(key, r) -> str:
    v, (lo, hi) = r["value"], r["interval"]
    if key[0] in TIMED:
        text = (_format.percent_ci(v, lo, hi, 2, noisy=False) if r["stored_interval"]
                else f"{_format.percent(v, 2)} (no interval stored)")
    else:
        def us(x):
            return _format.seconds(x, ("\u00b5s", 1e-6))

        text = us(v) + (f" {_format.interval(lo, hi, us)}" if r["stored_interval"] else " (no interval stored)")
    return f"{text} in {r['claim']}"


def column_conflicts(doc: "dict | None") -> list:
    """The quantities a column reads several times with intervals that do not overlap:
    ``[{"quantity", "measured_by", "claims", "readings", "text"}]`` (``measured_by`` every claim that
    reads that quantity; ``claims`` those and, for a time saving, every claim that reads any forward
    timing of the same workload: a column whose timings of a workload contradict each other decides
    no timing of that workload, at any batch)."""
    claims = (doc or {}).get("claims") if isinstance(doc, dict) else None
    meta = doc.get("meta") if isinstance(doc, dict) and isinstance(doc.get("meta"), dict) else None
    found = readings(claims if isinstance(claims, list) else [], protocol_of(meta))
    by_workload: dict = {}
    for key, rs in found.items():
        if key[0] in TIMED:
            by_workload.setdefault(key[1], set()).update(r["claim"] for r in rs)
    out = []
    for key, rs in found.items():
        measured_by = {r["claim"] for r in rs}
        if len(measured_by) < 2:
            continue
        disjoint = any(a["interval"][1] < b["interval"][0] or b["interval"][1] < a["interval"][0]
                       for i, a in enumerate(rs) for b in rs[i + 1:] if a["claim"] != b["claim"])
        if disjoint:
            text = f"{_describe(key)} reads " + ", ".join(_fmt(key, r) for r in rs)
            also = sorted(by_workload.get(key[1], set()) - measured_by) if key[0] in TIMED else []
            if also:
                text += (f"; so its other forward timings of {key[1]} decide nothing either "
                         f"({', '.join(also)} read{'s' if len(also) == 1 else ''} them)")
            out.append({"quantity": _describe(key), "workload": key[1] if key[0] in TIMED else None,
                        "values": sorted({r["value"] for r in rs}), "measured_by": sorted(measured_by),
                        "claims": sorted(measured_by | set(also)), "readings": rs, "text": text})
    return out


def conflicts_for(claim_id: str, conflicts) -> list:
    """The conflicts (of :func:`column_conflicts`) that involve a claim."""
    return [c for c in conflicts or () if claim_id in c.get("claims", ())]


def conflict_text(conflicts) -> str:
    """The conflicts in words, one clause each."""
    return "; ".join(c["text"] for c in conflicts)
