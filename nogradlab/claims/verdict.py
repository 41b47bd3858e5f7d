"""The verdicts: a claim's measurements judged by today's rule (:func:`_judge_or_needs`), the reference
GPU columns in ``results/`` that decide a GPU speed claim run elsewhere (:func:`reference_entry`), their age
(:func:`_stale_words`, :func:`_aged`) and what a column that contradicts itself still decides
(:func:`_despite`, :func:`_conflicted`); a stored entry judged again (:func:`judge_entry`)."""
from __future__ import annotations

import json
from pathlib import Path

from nogradlab.core import format as _format
from nogradlab.claims.evidence import PROTOCOL, column_age, column_conflicts, conflict_text, protocol_of
from nogradlab.claims.evidence import readings as _ev_readings
from nogradlab.claims.ledger import VERDICTS, Claim, NeedsRemeasuring, get
from nogradlab.claims.result import Judgement, Measurements

#: what the allocator model's GPU estimates were validated against (README, results/h200-alloc-probe)
ESTIMATE_VALIDATION = ("nogradlab's CUDA allocator model on a virtual CUDA device, validated within 2.6 % "
                       "(median 1.35 %) of 26 largest-batch searches on an NVIDIA H200 "
                       "(results/h200-alloc-probe)")

#: the allocator model each measuring protocol's estimates came from: (words, its largest relative error
#: against the H200's 24 real largest-batch searches, results/h200-alloc-probe/allocator_vs_h200.txt:
#: column "old est" for protocol 1, "new est" for protocol 2)
ESTIMATE_VALIDATIONS = {
    1: ("the allocator model of 2026-11-30 (nogradlab up to 182a8d6) on a virtual CUDA device, whose "
        "largest-batch estimates were off by up to 30.6 % (median 5.3 %) from 24 real searches on an NVIDIA H200 "
        "(results/h200-alloc-probe/allocator_vs_h200.txt, 'old est'; today's model: within 2.6 %)", 0.306),
    2: (ESTIMATE_VALIDATION, 0.026),
    3: (ESTIMATE_VALIDATION, 0.026),  # protocol 3 changed the timing, not the allocator model
    4: (ESTIMATE_VALIDATION, 0.026),  # protocol 4 too (its clock, threads and calls per sample)
}


def estimate_validation(protocol: "int | None") -> tuple:
    """``(words, largest relative error)`` of the allocator model that made a column's estimates, by the
    column's measuring protocol (:data:`ESTIMATE_VALIDATIONS`). A column that did not record its
    protocol gets the oldest model's (largest) error: its estimates are not called validated to today's."""
    if protocol in ESTIMATE_VALIDATIONS:
        return ESTIMATE_VALIDATIONS[protocol]
    if isinstance(protocol, int) and protocol > PROTOCOL:
        return ESTIMATE_VALIDATIONS[PROTOCOL]
    words, err = ESTIMATE_VALIDATIONS[min(ESTIMATE_VALIDATIONS)]
    return (f"an allocator model of a version the column did not record (its oldest validated version: "
            f"{words})", err)


def _where_text(m: Measurements) -> str:
    return f"measured here: {m.label}"


def _scope(claim: Claim, m: Measurements, j: Judgement) -> dict:
    if j.scope:
        return dict(j.scope)
    if claim.basis == "estimate":
        return {"basis": "estimated",
                "text": f"estimated for a GPU at {claim.estimates_at} size by {estimate_validation(m.protocol)[0]}"}
    if claim.basis == "mixed" and m.on_gpu:  # the speed cells timed here; memory and batch cells are estimates
        return {"basis": "measured", "text": f"{_where_text(m)} (speed); memory and batch estimated for a GPU at "
                                             f"{claim.estimates_at} size by {estimate_validation(m.protocol)[0]}"}
    return {"basis": "measured", "text": _where_text(m)}


def _judge(claim: Claim, m: Measurements, ref: "Measurements | None" = None) -> Judgement:
    if claim.judge is None:
        raise NotImplementedError(f"claim {claim.id} has no judge registered")
    j = claim.judge(m, claim.rule, ref) if claim.basis == "mixed" else claim.judge(m, claim.rule)
    if not isinstance(j, Judgement):
        raise TypeError(f"the judge of {claim.id} returned {type(j).__name__}, not a Judgement")
    if j.verdict not in VERDICTS:
        raise RuntimeError(f"the judge of {claim.id} returned verdict {j.verdict!r}; allowed: {', '.join(VERDICTS)}")
    return j


def _needs(claim: Claim, m: Measurements, why) -> Judgement:
    return Judgement("needs re-measuring",
                     f"These measurements ({m.label}) lack what today's rule for {claim.id} reads "
                     f"({why}): measure it again with today's nogradlab.",
                     scope={"basis": "measured", "text": _where_text(m)})


#: set to 1 (as the tests do) to make a judge's own error on stored measurements raise
STRICT_ENV = "NOGRADLAB_STRICT_JUDGES"


class JudgeError(RuntimeError):
    """A judge failed on stored measurements that passed validation: a bug in the judge (raised in
    strict mode, :data:`STRICT_ENV`), or a column of the wrong shape (outside strict mode)."""


def strict() -> bool:
    """Whether a judge's own error on a stored column raises (:data:`STRICT_ENV` set to 1, as in the
    tests) rather than reading "needs re-measuring"."""
    import os

    return os.environ.get(STRICT_ENV, "") not in ("", "0")


def _judge_or_needs(claim: Claim, m: Measurements, ref: "Measurements | None" = None) -> Judgement:
    """The judge's answer on stored measurements: "needs re-measuring" when they lack what it reads
    or hold something that is no measurement (:class:`NeedsRemeasuring`, raised by the judge or by
    :class:`Measurements`' validation). Any other error is the judge's: it raises
    :class:`JudgeError` in strict mode (the tests); elsewhere the column, which today's judge cannot
    read, shows "needs re-measuring" with the error named, so that a forged or broken reference
    never crashes a run."""
    try:
        return _judge(claim, m, ref)
    except NeedsRemeasuring as e:
        return _needs(claim, m, f"{e.args[0] if e.args else e}")
    except Exception as e:  # noqa: BLE001 - a broken column must not crash a run; strict mode raises
        if strict():
            raise JudgeError(f"the judge of {claim.id} failed on {m.label}: {type(e).__name__}: {e}") from e
        return _needs(claim, m, f"today's judge cannot read this column: {type(e).__name__}: {e}")


# -------------------------------------------------------------------------------------------
# the reference GPU: the verdict of a GPU speed claim run elsewhere


_REFS: dict = {}

#: the reference columns inside an installed package (copied from the checkout's results/ into the wheel)
PACKAGED_RESULTS = Path(__file__).resolve().parents[1] / "_results"


def results_dir() -> "Path | None":
    """The reference runs' folder: ``results/`` of the source checkout this package lives in when there is
    one, else the copy an installed package carries (``nogradlab/_results``: every
    ``results/*/claims.json``, put there by the wheel build), else None."""
    d = Path(__file__).resolve().parents[2] / "results"
    if d.is_dir():
        return d
    return PACKAGED_RESULTS if PACKAGED_RESULTS.is_dir() else None


def _gpu_reference_docs() -> list:
    """``[(machine, doc)]`` for every ``results/cuda-*/claims.json`` (read once per process)."""
    if "docs" not in _REFS:
        docs = []
        root = results_dir()
        if root is not None:
            for p in sorted(root.glob("cuda-*/claims.json")):
                try:
                    if not p.is_file():
                        continue
                    doc = json.loads(p.read_text())
                    if isinstance(doc, dict) and isinstance(doc.get("meta"), dict) and \
                            isinstance(doc.get("claims"), list):
                        docs.append((p.parent.name, doc))
                except (OSError, ValueError, RecursionError):
                    continue
        _REFS["docs"] = docs
    return _REFS["docs"]


def _reference_candidates(claim_id: str) -> list:
    """``[(machine, meta, entry, conflicts)]``: every reference GPU column whose entry for the claim
    today's judge can read, best first: one that agrees with itself on what the claim reads before one
    that does not, today's measuring protocol before an older one, then the newest."""
    claim = get(claim_id)
    found = []
    for machine, doc in _gpu_reference_docs():
        meta = doc.get("meta") or {}
        claims_ = doc.get("claims") if isinstance(doc.get("claims"), list) else []
        _COLUMN_READINGS[machine] = _ev_readings(claims_, protocol_of(meta))
        for e in doc.get("claims", []):
            if not isinstance(e, dict) or e.get("id") != claim_id:
                continue
            m = _entry_measurements(e, meta)
            if not m.values:
                continue
            if _judge_or_needs(claim, m).verdict == "needs re-measuring":
                continue
            conflicts = [c for c in column_conflicts(doc) if claim_id in c["claims"]]
            found.append((machine, meta, e, conflicts))
    found.sort(key=lambda r: (bool(r[3]), column_age(r[1])["stale"], _neg(str(r[1].get("generated") or ""))))
    return found


def _neg(text: str) -> tuple:
    return tuple(-ord(ch) for ch in text)


def reference_entry(claim_id: str) -> "tuple | None":
    """``(machine, doc meta, entry)`` of the reference GPU column that decides the claim: the best one
    (:func:`_reference_candidates`) that does not contradict itself on what the claim reads, or None."""
    for machine, meta, e, conflicts in _reference_candidates(claim_id):
        if not conflicts:
            return machine, meta, e
    return None


def _entry_measurements(e: dict, meta: "dict | None" = None, column: "dict | None" = None) -> Measurements:
    meta = meta or {}
    values = e.get("measurements", e.get("evidence")) or {}
    return Measurements(values, e.get("device") or meta.get("device") or {}, e.get("scale") or meta.get("scale", ""),
                        e.get("torch") or meta.get("torch", ""), protocol=protocol_of(meta), column=column)


#: machine -> its column's readings (evidence.readings), for the reference columns :func:`_reference_candidates` read
_COLUMN_READINGS: dict = {}


def _stale_words(meta: dict) -> str:
    """A sentence for a verdict decided by a column of an older (or unrecorded) protocol; "" otherwise."""
    age = column_age(meta)
    if not age["stale"]:
        return ""
    when = f"on {age['measured_on']}" if age["measured_on"] else "on an unrecorded date"
    made = ", ".join(x for x in (f"nogradlab {age['commit']}" if age["commit"] else "",
                                 f"torch {age['torch']}" if age["torch"] else "") if x)
    p, now = age["protocol"], age["current_protocol"]
    how = (f"by a measuring protocol it did not record (today's: {now})" if p is None else
           f"by measuring protocol {p}, older than today's {now}" if p < now else
           f"by measuring protocol {p}, newer than this nogradlab's {now} (update nogradlab to judge it)")
    head = "Evidence of another protocol" if p is not None and p > now else "Older evidence"
    return (f"{head}: measured {when}{f' ({made})' if made else ''} {how}; measure it again with "
            f"today's protocol to confirm.")


def _aged(scope: dict, meta: dict) -> dict:
    """``scope`` with the column's age: ``age`` always, ``stale: true`` for an older protocol."""
    age = column_age(meta)
    scope = dict(scope, age={k: age[k] for k in ("protocol", "current_protocol", "measured_on", "commit",
                                                 "torch", "label")})
    if age["stale"]:
        scope["stale"] = True
    return scope


def _workload_of(condition) -> str:
    return str(condition).split("@")[0].split(" ")[0].split(",")[0]


def _timed_workload(row) -> "str | None":
    """The workload whose forward timing a condition row reads (``resnet50@16``, ``resnet50 speed ...``),
    None for a row that reads no timing (a table's ``resnet50 memory`` and ``resnet50 batch`` cells: estimates) or
    that does not count towards the verdict (``deciding: false``)."""
    if not isinstance(row, dict) or not row.get("deciding", True):
        return None
    name = str(row.get("condition"))
    w = _workload_of(name)
    rest = name[len(w):].strip()
    return w if rest == "" or rest.startswith("@") or rest.split(" ")[0] == "speed" else None


def _despite(claim: Claim, m: "Measurements | None", j: "Judgement | None", conflicts: list) -> tuple:
    """``(verdict or None, words)``: what a column that contradicts itself on ``conflicts`` still decides
    of the claim. A time-saving conflict makes the conditions of its workload(s) unresolved and the
    conditions are aggregated again (:func:`rules.verdict_of`); a conflicting cost (a claim that declares ``with_cost``) is read
    with each of its values. The verdict stands only when no reading in the conflict could change it (for
    conditions: when treating them as agreeing or as disagreeing gives the same word, or when the others
    already disagree, which the aggregate rule reads "does not hold" whatever unresolved ones beside them
    say); otherwise None (needs re-measuring)."""
    from nogradlab.claims.rules import verdict_of

    if j is None or m is None or j.verdict in ("needs re-measuring", "not testable"):
        return None, ""
    verdict, words = j.verdict, []
    seconds = [c for c in conflicts if c.get("workload") is None]
    saving = [c for c in conflicts if c.get("workload") is not None]
    for c in seconds:
        found = {}
        for value in c.get("values") or ():
            try:
                if claim.with_cost is None:
                    return None, ""
                v = claim.with_cost(m.values, value)
                jv = _judge(claim, Measurements(v, m.device, m.scale, m.torch, protocol=m.protocol))
            except Exception:  # noqa: BLE001 - a reading the judge cannot take decides nothing
                return None, ""
            found[value] = jv.verdict
        if len(set(found.values())) != 1 or verdict not in found.values():
            return None, (f"read with each of its values ({', '.join(_format.seconds(x) for x in found)}) "
                          f"the verdict changes ({', '.join(sorted(set(found.values())))})")
        words.append(f"read with either of its values ({', '.join(_format.seconds(x) for x in found)}) "
                     f"{claim.id} {verdict}: the conflict cannot change the verdict")
    if saving:
        rows = [r for r in j.conditions or [] if isinstance(r, dict) and r.get("reading") in
                ("agrees", "disagrees", "unresolved") and r.get("deciding", True)]
        if not rows or verdict_of(r["reading"] for r in rows) != verdict:
            return None, ""  # a verdict not made by the aggregate rule: no condition can be set apart
        doubt = {c["workload"] for c in saving}
        hit = [r for r in rows if _timed_workload(r) in doubt]
        if not hit:
            return verdict, ""
        rest = [r["reading"] for r in rows if r not in hit]
        unres = verdict_of(rest + ["unresolved"] * len(hit))
        agree = verdict_of(rest + ["agrees"] * len(hit))
        disagree = verdict_of(rest + ["disagrees"] * len(hit))
        names = ", ".join(str(r["condition"]) for r in hit)
        if agree != disagree and unres not in ("does not hold", "depends"):
            return None, (f"it cannot decide {names} (their timings are in doubt), and the verdict turns on them "
                          f"({agree} if they agreed, {disagree} if they disagreed)")
        verdict = unres
        words.append(f"it cannot decide {names} (their timings are in doubt), read unresolved: the other "
                     f"conditions decide, {verdict}")
    return verdict, "; ".join(words)


def _conflicted(claim: Claim, where: str, conflicts: list, local: "Judgement | None" = None,
                j: "Judgement | None" = None, m: "Measurements | None" = None) -> Judgement:
    """The verdict of a claim whose column contradicts itself on a quantity the claim reads: only what the
    conflict can change is withdrawn (:func:`_despite`); the claim is not decided ("needs re-measuring")
    when its verdict depends on a reading in the conflict. ``j`` is the column's own judgement of ``m``."""
    verdict, why = _despite(claim, m, j, conflicts)
    if verdict is not None:
        head = (f"{where} contradicts itself on what {claim.id} reads ({conflict_text(conflicts)}); "
                f"{why or 'no condition of the claim reads it'}. ")
        doubt = {c.get("workload") for c in conflicts if c.get("workload") is not None}
        # the judge's words below read every condition: a claim that can drop the conditions in doubt is judged
        # again without them; otherwise name those its words decide that the conflict leaves open
        touched = [str(r.get("condition")) for r in j.conditions or []
                   if _timed_workload(r) in doubt and r.get("reading") != "unresolved"]
        rest = None
        if touched and claim.without_timings is not None:
            try:
                rest = _judge(claim, Measurements(claim.without_timings(m.values, sorted(doubt)), m.device,
                                                  m.scale, m.torch, protocol=m.protocol))
            except Exception:  # noqa: BLE001 - the judge's full words, labelled, are shown instead
                rest = None
        if rest is not None and rest.verdict == verdict:
            body = (f"Without {', '.join(sorted(doubt))}'s timings (in doubt; their rows are shown unresolved): "
                    f"{rest.summary}")
        else:
            body = (f"Read as if its timings of {', '.join(sorted(doubt))} were sound (they are not: "
                    f"{', '.join(touched)} {'is' if len(touched) == 1 else 'are'} read unresolved above): {j.summary}"
                    if touched else j.summary)
        text = head + body + (f" On your machine: {local.summary}" if local is not None else "")
        rows = [dict(r, reading="unresolved", side=None, conflict=True)
                if _timed_workload(r) in doubt else r for r in j.conditions or []]
        return Judgement(verdict, text, j.reading, rows, j.scope, j.qualifier)
    text = (f"{where} contradicts itself on what {claim.id} reads ({conflict_text(conflicts)}): one physical "
            f"quantity, several values{f', and {why}' if why else ''}, so it does not decide {claim.id}; a run "
            f"with today's protocol, which times each condition once for every claim, would.")
    if local is not None:
        text += f" On your machine: {local.summary}"
    doubt = {c.get("workload") for c in conflicts if c.get("workload") is not None}
    rows = [dict(r, reading="unresolved", side=None, conflict=True) if _timed_workload(r) in doubt else r
            for r in (j.conditions or [])] if j is not None and j.conditions else None
    return Judgement("needs re-measuring", text, local.reading if local is not None else "", rows)


def _final(claim: Claim, m: Measurements) -> tuple:
    """(judgement, scope, local) for measurements ``m``: a GPU speed claim measured off a GPU takes
    its verdict from the reference GPU's measurements, ``m``'s judgement kept as ``local``. A reference
    column of an older protocol is named as such (``scope.stale``); one that contradicts itself on what
    the claim reads does not decide it (``scope.conflicts``)."""
    j = _judge_or_needs(claim, m) if m.values else _needs(claim, m, "no measurements")
    if claim.basis not in ("gpu speed", "mixed") or m.on_gpu or not m.values:
        return j, _scope(claim, m, j), None
    candidates = _reference_candidates(claim.id)
    ref = reference_entry(claim.id)
    rejected = [c for c in candidates if c[3]] if ref is None else []
    if claim.basis == "mixed":  # the judge reads this run's estimates and the reference GPU's timings
        return _final_mixed(claim, m, j, ref, rejected)
    local = {"verdict": j.verdict, "summary": j.summary, "reading": j.reading, "where": m.label}
    if ref is None and rejected:
        return _final_conflicted(claim, j, rejected[0], local)
    if ref is None:
        jr = Judgement("needs re-measuring",
                       f"{claim.id} is judged on a GPU (its rule says why), and no reference GPU measurement in results/ "
                       f"has what today's rule needs: a GPU run would decide it. On your machine: "
                       f"{j.summary}", j.reading)
        return jr, {"basis": "reference", "text": "no reference GPU measurement usable by today's rule"}, local
    return _final_reference(claim, j, ref, local)


def _final_mixed(claim: Claim, m: Measurements, j: Judgement, ref, rejected) -> tuple:
    """``_final`` for a mixed claim off a GPU: this run's estimates with the reference GPU column's timings
    (the column ``ref``, else the first ``rejected`` one for the workloads its conflicts do not touch)."""
    # a column that contradicts itself on a workload's timing is still read for the workloads the conflict
    # does not touch: its conditions of the workloads in doubt are read unresolved (_conflicted)
    used = ref if ref is not None else rejected[0][:3] if rejected else None
    rm = _entry_measurements(used[2], used[1], _COLUMN_READINGS.get(used[0])) if used else None
    jm = _judge_or_needs(claim, m, rm)
    if jm.verdict == "needs re-measuring":
        return jm, _scope(claim, m, j), None
    conflicts = rejected[0][3] if ref is None and rejected else []
    # every speed condition left unresolved because the column stored its gains without an interval
    # (an older protocol): the column is shown, it decides no speed cell
    speed_rows = [c for c in (jm.conditions or []) if " speed" in str(c.get("condition", ""))]
    pointwise = bool(speed_rows) and all("without an interval" in str(c.get("condition", "")) for c in speed_rows)
    speed = (f"measured on a reference machine, {rm.label} ({used[0]}, {column_age(used[1])['label']}), "
             + ("its gains stored without an interval, each read with the spread the column measured for that "
                "timing (at least 2 points of time saved), judged by today's rule" if pointwise else
                "judged by today's rule") + (f"; it contradicts itself on what {claim.id} reads, so its timings "
                                          f"of {', '.join(sorted({c['workload'] for c in conflicts if c.get('workload')}))} "
                                          f"are read unresolved" if conflicts else "")
             if rm is not None else "no reference GPU measurement usable by today's rule")
    text = (f"memory and batch: estimated for a GPU at {claim.estimates_at} size by "
            f"{estimate_validation(m.protocol)[0]}; "
            f"speed: {speed}"
            f"; this machine's own timings ({m.label}) shown, not counted")
    scope = {"basis": "estimated + reference", "text": text, "machine": used[0] if used else None}
    if conflicts:
        scope["conflicts"] = conflicts
        jm = _conflicted(claim, f"The reference GPU column ({rm.label}, {used[0]})", conflicts, None, jm, m)
        if jm.verdict == "needs re-measuring":
            return jm, scope, None
    if used is not None:
        scope = _aged(scope, used[1])
        stale = _stale_words(used[1])
        if stale:
            jm = Judgement(jm.verdict, f"{jm.summary} Speed cells: {stale}", jm.reading, jm.conditions,
                           jm.scope, jm.qualifier)
    return jm, scope, None


def _final_conflicted(claim: Claim, j: Judgement, rejected: tuple, local: dict) -> tuple:
    """``_final`` for a GPU speed claim whose only reference column contradicts itself on what the claim
    reads: its verdict where the conflict cannot change it, else "needs re-measuring"; ``j`` (this
    machine's) shown beside it."""
    machine, meta, e, conflicts = rejected
    rm = _entry_measurements(e, meta)
    own = _judge_or_needs(claim, rm)
    jr = _conflicted(claim, f"The reference GPU column ({rm.label}, {machine})", conflicts, None, own, rm)
    decided = jr.verdict != "needs re-measuring"
    stale = _stale_words(meta)
    head = "On the reference GPU: " if decided else ""
    jr = Judgement(jr.verdict, f"{head}{jr.summary}" + (f" {stale}" if stale else "")
                   + f" On your machine: {j.summary}",
                   (f"On the reference GPU: {jr.reading}" if jr.reading else "") if decided else j.reading,
                   jr.conditions)
    scope = _aged({"basis": "reference", "machine": machine, "conflicts": conflicts,
                   "text": (f"measured on a reference machine: {rm.label} ({machine}, {column_age(meta)['label']}), "
                            f"judged by today's rule; it contradicts itself on what {claim.id} reads, which "
                            f"cannot change this verdict" if decided else
                            f"not decided: the reference machine's column ({rm.label}, {machine}, "
                            f"{column_age(meta)['label']}) contradicts itself on what {claim.id} reads")}, meta)
    return jr, scope, local


def _final_reference(claim: Claim, j: Judgement, ref: tuple, local: dict) -> tuple:
    """``_final`` for a GPU speed claim off a GPU, decided by the reference GPU column ``ref``
    (machine, meta, entry) judged by today's rule; ``j`` (this machine's) shown beside it."""
    machine, meta, e = ref
    rm = _entry_measurements(e, meta)
    jr = _judge_or_needs(claim, rm)  # a broken reference column reads "needs re-measuring", never crashes
    age = column_age(meta)
    text = (f"measured on a reference machine: {rm.label} ({machine}, {age['label']}), judged by today's rule")
    stale = _stale_words(meta)
    summary = f"On the reference GPU: {jr.summary}" + (f" {stale}" if stale else "") + f" On your machine: {j.summary}"
    jr = Judgement(jr.verdict, summary, f"On the reference GPU: {jr.reading}" if jr.reading else "",
                   jr.conditions)
    return jr, _aged({"basis": "reference", "text": text, "machine": machine}, meta), local


def _summary_with_scope(claim: Claim, summary: str, scope: dict) -> str:
    if claim.kind in ("semantic", "historical") or not scope.get("text"):
        return summary
    return f"{summary} [Evidence: {scope['text']}.]"

def judge_entry(entry: dict, meta: "dict | None" = None, conflicts=(), readings: "dict | None" = None) -> dict:
    """A stored claims.json entry judged again by today's rule: verdict, summary, reading, scope,
    conditions and rule replaced (the stored ones kept as ``stored_verdict``); an entry without
    measurements (a claim no check reached) is returned as it is.

    The paraphrase and the article's figure are replaced by today's declaration's as well.

    ``meta`` is its column's: a column of an older measuring protocol says so in the summary and in
    ``scope.stale``/``scope.age``. ``conflicts`` are its column's (:func:`column_conflicts`): a claim
    that reads a quantity the column contradicts itself on is not decided by it ("needs re-measuring",
    ``scope.conflicts``). ``readings`` are its column's (:func:`nogradlab.claims.evidence.readings`): a reading
    the entry stored without an interval is read with the spread the column measured for it."""
    e = dict(entry)
    if e.get("verdict") is None and not (e.get("measurements") or e.get("evidence")):
        return e
    try:
        claim = get(e["id"])
    except ValueError:
        return e
    m = _entry_measurements(e, meta, readings)
    j, scope, local = _final(claim, m)
    if scope.get("text", "").startswith("measured here: "):  # a stored column: here is that machine
        scope = dict(scope, text="measured on " + scope["text"][len("measured here: "):])
    j.summary = j.summary.replace(f"[Evidence: measured here: {m.label}.]", f"[Evidence: measured on {m.label}.]")
    if meta is not None and scope.get("basis") in ("measured", "estimated", "cited"):  # decided by this column itself
        mine = [c for c in conflicts or () if claim.id in c.get("claims", ())]
        if mine and j.verdict != "needs re-measuring":
            j = _conflicted(claim, f"This column ({m.label})", mine, None, j, m)
            scope = dict(scope, conflicts=mine)
        scope = _aged(scope, meta)
        stale = _stale_words(meta)
        if stale:  # also when the column contradicts itself and still decides: it is as old either way
            j.summary = f"{j.summary} {stale}"
    elif meta is not None and scope.get("basis") == "reference" and local is not None:
        # decided by the reference GPU column (its age said before "On your machine"); this column's own
        # timings, shown and not counted, say their own age after them
        age = column_age(meta)
        local = dict(local, age={k: age[k] for k in ("protocol", "current_protocol", "measured_on", "commit",
                                                     "torch", "label")})
        stale = _stale_words(meta)
        if stale and "On your machine: " in j.summary:
            j.summary = f"{j.summary} Your machine's timings (shown, not counted) were {stale.split(': ', 1)[1]}"
    elif meta is not None and scope.get("basis") == "estimated + reference":
        # the memory and batch cells are this column's own estimates (its age: scope.age); the speed cells
        # the reference GPU column's (its age, when one was used: scope.speed_age)
        scope = dict(scope)
        if "age" in scope:
            scope["speed_age"] = scope.pop("age")
        speed_stale = scope.pop("stale", False)
        scope = _aged(scope, meta)
        if speed_stale:
            scope["stale"] = True
        stale = _stale_words(meta)
        if stale:
            j.summary = f"{j.summary} Memory and batch cells: {stale}"
    e.setdefault("stored_verdict", entry.get("verdict"))
    # what the claim says (its paraphrase, the article's figure as it gives it) is today's declaration too
    e.update(verdict=j.verdict, summary=_summary_with_scope(claim, j.summary, scope), reading=j.reading,
             scope=scope, conditions=j.conditions, local=local, rule=claim.rule.text, measurements=m.values,
             paraphrase=claim.paraphrase, figure=claim.figure)
    e.pop("evidence", None)
    if j.qualifier:  # the judge's words for the part of the claim its verdict covers (display.headline)
        e["qualifier"] = j.qualifier
    else:
        e.pop("qualifier", None)
    return e
