"""A stored column holding something that is no measurement (NaN, an infinity, a 401-digit integer,
a negative byte count, a string or a list where a number was stored) is judged "needs re-measuring"
or judged as before (the judge never read that value): never a crash, never a confident verdict
drawn from the bad value. A judge's own error on a well-formed column raises in strict mode.

Every numeric leaf of the committed CPU and H200 columns is replaced in turn (one element of each
list: they share a shape), and the column judged again with today's judges (cheap: no torch work).
"""
import copy
import json
import math
from pathlib import Path

import pytest

from nogradlab import claims
from nogradlab.claims import Measurements, not_a_measurement

# claim checks run end to end (seconds per test): not in the quick unit pass
pytestmark = pytest.mark.integration

RESULTS = Path(__file__).resolve().parents[2] / "results"
COLUMNS = ["cpu-amd-epyc-2-threads", "cuda-nvidia-h200"]
#: values that are no measurement wherever they stand
NEVER = {"10**400": 10 ** 400, "nan": math.nan, "inf": math.inf, "-inf": -math.inf}
#: values of the wrong type (or sign) for a stored number
WRONG = {"-1": -1, "str": "12", "list": [1.0], "dict": {"v": 1}, "bool": True, "none": None}


def _leaves(v, path=()):
    """Paths to the numeric leaves of ``v``: every key of a dict, the first and last element of a
    list of numbers, the first and last row of a list of rows."""
    if isinstance(v, dict):
        for k, x in v.items():
            yield from _leaves(x, path + (k,))
    elif isinstance(v, list):
        for i in sorted({0, len(v) - 1}) if v else ():
            yield from _leaves(v[i], path + (i,))
    elif isinstance(v, (int, float)) and not isinstance(v, bool):
        yield path


def _put(d, path, value):
    for p in path[:-1]:
        d = d[p]
    d[path[-1]] = value


def _name(path) -> str:
    return next(str(p) for p in reversed(path) if not isinstance(p, int))


def _verdicts(entry, meta):
    j = claims.judge_entry(entry, meta)
    return j["verdict"], (j.get("local") or {}).get("verdict")


def _column(name):
    doc = json.loads((RESULTS / name / "claims.json").read_text())
    return doc["meta"], doc["claims"]


def _cases(name, bad):
    meta, entries = _column(name)
    for e in entries:
        key = "measurements" if "measurements" in e else "evidence"
        for path in _leaves(e[key]):
            for label, value in bad.items():
                f = copy.deepcopy(e)
                _put(f[key], path, value)
                yield e, f, meta, f"{e['id']} {'.'.join(map(str, path))} = {label}", label, path


@pytest.mark.parametrize("column", COLUMNS)
def test_a_non_finite_or_oversized_number_reads_needs_re_measuring_never_a_verdict(column, monkeypatch):
    # strict: the validation must catch these, not a judge's accidental error
    monkeypatch.setenv(claims.STRICT_ENV, "1")
    base, n = {}, 0
    for e, f, meta, where, _, _ in _cases(column, NEVER):
        if e["id"] not in base:
            base[e["id"]] = _verdicts(copy.deepcopy(e), meta)
        got = _verdicts(f, meta)
        assert all(g in ("needs re-measuring", w) for g, w in zip(got, base[e["id"]])), (where, got)
        n += 1
    assert n > 500


@pytest.mark.parametrize("column", COLUMNS)
def test_a_wrong_type_or_sign_never_crashes_and_never_decides(column, monkeypatch):
    monkeypatch.delenv(claims.STRICT_ENV, raising=False)  # a learner's run: a broken column must not crash it
    base, changed = {}, []
    for e, f, meta, where, label, path in _cases(column, WRONG):
        if e["id"] not in base:
            base[e["id"]] = _verdicts(copy.deepcopy(e), meta)
        got = _verdicts(f, meta)  # never raises
        if label == "none" or (label == "-1" and not claims._non_negative(_name(path))):
            continue  # None is "not measured" and -1 a legitimate signed value: they may decide
        if not all(g in ("needs re-measuring", w) for g, w in zip(got, base[e["id"]])):
            changed.append((where, got, base[e["id"]]))
    assert not changed, changed[:5]


def test_the_overflowing_integer_of_the_report_reads_needs_re_measuring(monkeypatch):
    monkeypatch.setenv(claims.STRICT_ENV, "1")
    meta, entries = _column("cpu-amd-epyc-2-threads")
    e = copy.deepcopy(next(x for x in entries if x["id"] == "C07"))
    key = "measurements" if "measurements" in e else "evidence"
    e[key]["reports"]["grad"]["saved_bytes"] = 10 ** 400
    j = claims.judge_entry(e, meta)
    assert j["verdict"] == "needs re-measuring" and "reports.grad.saved_bytes" in j["summary"]


def test_validation_names_the_place_and_the_reason():
    assert not_a_measurement({"rows": [{"time_saved": -0.2, "ci": [-0.3, -0.1]}]}) is None
    assert "rows[0].time_saved" in not_a_measurement({"rows": [{"time_saved": math.nan}]})
    assert "negative" in not_a_measurement({"saved_bytes": -1})
    assert "not a number" in not_a_measurement({"saved_bytes": "12"})
    assert "bits" in not_a_measurement({"x": 10 ** 5000})
    assert not_a_measurement({"definitions": {"saved_bytes": "what it means"}}) is None
    assert not_a_measurement({"times": [1e-6, None]}) is None


def test_reading_a_key_validates_it_and_get_never_falls_back_to_its_default():
    m = Measurements({"a": 1.0, "b": {"c": math.inf}})
    assert m["a"] == 1.0 and "b" in m and m.get("missing", 3) == 3
    with pytest.raises(claims.NeedsRemeasuring):
        m["b"]
    with pytest.raises(claims.NeedsRemeasuring):
        m.get("b", {})


def test_a_judge_error_on_a_well_formed_column_raises_in_strict_mode(monkeypatch):
    c = claims.get("C06")
    m = Measurements({"inside_no_grad": {"requires_grad": False, "grad_fn": None}, "control_with_grad": 3},
                     {"type": "cpu", "device": "cpu", "name": "x", "threads": 2, "torch": "t"}, "tiny", "t")
    monkeypatch.setenv(claims.STRICT_ENV, "1")
    with pytest.raises(claims.JudgeError):  # the judge indexes a number: its error, not a missing key
        claims._judge_or_needs(c, m)
    monkeypatch.setenv(claims.STRICT_ENV, "0")
    j = claims._judge_or_needs(c, m)
    assert j.verdict == "needs re-measuring" and "TypeError" in j.summary


@pytest.mark.parametrize("cid,path,value", [
    ("C02", ("runs", "grad", "saved_tensor_hook_calls"), math.inf),  # "the hook fired inf times"
    ("C07", ("reports", "no_grad", "saved_bytes"), math.nan),  # "saved nan TiB under no_grad"
    ("C04", ("conditions", 0, "eval+no_grad"), -math.inf),  # flipped "depends" to "holds"
])
def test_a_non_finite_value_never_reaches_a_summary(cid, path, value, monkeypatch):
    monkeypatch.setenv(claims.STRICT_ENV, "1")
    meta, entries = _column("cpu-amd-epyc-2-threads")
    e = copy.deepcopy(next(x for x in entries if x["id"] == cid))
    key = "measurements" if "measurements" in e else "evidence"
    _put(e[key], path, value)
    j = claims.judge_entry(e, meta)
    assert j["verdict"] == "needs re-measuring", j["summary"]
    assert "not a finite number" in j["summary"] and " inf times" not in j["summary"]


@pytest.mark.parametrize("bad", ["x", [1, 2], 3, None])
def test_measurements_that_are_not_an_object_read_needs_re_measuring(bad, monkeypatch):
    monkeypatch.setenv(claims.STRICT_ENV, "1")
    meta, entries = _column("cpu-amd-epyc-2-threads")
    e = copy.deepcopy(next(x for x in entries if x["id"] == "C07"))
    e.pop("evidence", None)
    e["measurements"] = bad
    assert claims.judge_entry(e, meta)["verdict"] in ("needs re-measuring", None)


def _flag_leaves(v, path=()):
    """Paths to the yes/no leaves (bools) of ``v``, as :func:`_leaves` walks it."""
    if isinstance(v, dict):
        for k, x in v.items():
            yield from _flag_leaves(x, path + (k,))
    elif isinstance(v, list):
        for i in sorted({0, len(v) - 1}) if v else ():
            yield from _flag_leaves(v[i], path + (i,))
    elif isinstance(v, bool):
        yield path


@pytest.mark.parametrize("column", COLUMNS)
def test_a_yes_no_observation_that_is_no_bool_never_decides(column, monkeypatch):
    # C06 read requires_grad = "x" (or 1, or [1]) as False and said "does not hold"
    monkeypatch.delenv(claims.STRICT_ENV, raising=False)
    meta, entries = _column(column)
    changed, n = [], 0
    for e in entries:
        key = "measurements" if "measurements" in e else "evidence"
        base = _verdicts(copy.deepcopy(e), meta)
        for path in _flag_leaves(e[key]):
            if not claims._flag_name(_name(path)):
                continue
            for value in ("x", 1, [1]):
                f = copy.deepcopy(e)
                _put(f[key], path, value)
                got = _verdicts(f, meta)
                n += 1
                if not all(g in ("needs re-measuring", w) for g, w in zip(got, base)):
                    changed.append((e["id"], ".".join(map(str, path)), value, got, base))
    assert n > 20 and not changed, changed[:5]
    c06 = copy.deepcopy(next(x for x in entries if x["id"] == "C06"))
    c06["measurements" if "measurements" in c06 else "evidence"]["inside_no_grad"]["requires_grad"] = "x"
    assert claims.judge_entry(c06, meta)["verdict"] == "needs re-measuring"
