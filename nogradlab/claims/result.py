"""What a check measured and what a judge answers: :class:`Measurements` (validated on reading),
:class:`Judgement`, :class:`Result`, and how they are shown (text, HTML, JSON)."""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import torch

from nogradlab.core import device as _device
from nogradlab.core import format as _format
from nogradlab.core import html as _html
from nogradlab.claims import display as _display
from nogradlab.claims.evidence import PROTOCOL
from nogradlab.claims.ledger import NeedsRemeasuring

#: the largest magnitude of an integer a measurement may hold (a signed 64-bit integer: every byte
#: count, batch and round count a check makes fits; a larger one is a corrupted or forged column)
MAX_INT = 2 ** 63 - 1

#: key names whose numbers cannot be negative: byte sizes, durations, counts
_NON_NEGATIVE_SUFFIXES = ("bytes", "_s", "_ms", "_us", "median", "iqr", "mean", "times")
_NON_NEGATIVE_NAMES = frozenset((
    "batch", "rounds", "runs", "calls", "ops", "distinct_ops", "n_batches", "requests", "seq_len", "iterations",
    "saved_tensors", "saved_tensor_hook_calls", "files", "mentioning_no_grad", "trials", "clients", "repeats",
    "max_alive_outputs", "max_concurrent_calls", "speed_rounds", "speed_batch", "memory_batch", "weight_casts",
    "number_per_sample", "threads", "max_rounds", "warmup", "min_run_time", "cells", "cells_in_band",
    "params_with_grad_after_forward", "outputs_requiring_grad", "version_after_one_inplace", "speedup",
    "speedup_ci", "no_grad_over_grad", "no_grad_over_train", "batch_factor", "max_abs_diff", "max_abs_output",
    "max_abs_output_diff", "max_logit_diff", "budget_gib", "budgets_gib"))


#: name fragments of signed measured quantities (a fraction saved, a ratio, a CI): a bool there is
#: no measurement (a string may be an error message, and fails where the judge formats it)
_NUMBER_FRAGMENTS = ("saved", "ratio", "share", "gain", "speedup", "factor", "diff", "band", "_ci")


def _number_name(name: str) -> bool:
    return name in ("ci", "value") or any(f in name for f in _NUMBER_FRAGMENTS)


#: names of yes/no observations (``requires_grad``, ``same_predictions``, ``is_leaf``): only a bool is one
#: (a string or a number there would read as a confident verdict: ``not "x"`` is False)
_FLAG_NAMES = frozenset(("requires_grad", "grad_enabled", "volatile_ignored"))


def _flag_name(name: str) -> bool:
    return name in _FLAG_NAMES or name.startswith(("is_", "same_", "has_"))


#: subtrees that describe (text or flags keyed by a quantity's name), never measure
_DESCRIPTIVE = frozenset(("definitions", "in_band"))


def _non_negative(name: str) -> bool:
    return name in _NON_NEGATIVE_NAMES or name.endswith(_NON_NEGATIVE_SUFFIXES) or name.startswith("max_abs")


def not_a_measurement(v, path: str = "") -> "str | None":
    """Why ``v`` (a stored measurement, nested dicts and lists) holds something that is no
    measurement, naming its place (``rows[2].time_saved: nan is not a finite number``), or None when
    every number in it is finite and fits in 64 bits, and every value under a name that counts,
    sizes or times something (:data:`_NON_NEGATIVE_NAMES`, names ending in ``bytes``, ``_s``,
    ``_ms``...) is a number that is not negative (or None: not measured). JSON reads ``NaN``,
    ``Infinity`` and integers of any length: none is a measurement."""
    import numbers

    stack = [(v, path, path.rsplit(".", 1)[-1])]
    while stack:
        x, where, name = stack.pop()
        if x is None:
            continue
        if isinstance(x, dict):
            if name not in _DESCRIPTIVE:
                stack.extend((y, f"{where}.{k}" if where else str(k), str(k)) for k, y in x.items())
        elif isinstance(x, (list, tuple)):
            if any(isinstance(y, bool) for y in x) and any(
                    isinstance(y, numbers.Real) and not isinstance(y, bool) for y in x):
                return f"{where}: a list of numbers holds a bool"
            stack.extend((y, f"{where}[{i}]", name) for i, y in enumerate(x))
        elif _flag_name(name) and not isinstance(x, bool):
            return f"{where}: {x!r} is not true or false, and {name!r} is a yes/no observation"
        elif isinstance(x, (bool, str)) or not isinstance(x, numbers.Real):
            if _non_negative(name) and isinstance(x, (bool, str)):
                return f"{where}: {x!r} is not a number, and {name!r} counts, sizes or times something"
            if _number_name(name) and isinstance(x, bool):
                return f"{where}: {x!r} is not a number, and {name!r} is a measured quantity"
        elif isinstance(x, numbers.Integral):
            if abs(int(x)) > MAX_INT:
                return f"{where}: an integer of {int(x).bit_length()} bits is no measurement"
            if x < 0 and _non_negative(name):
                return f"{where}: {int(x)} is negative, and {name!r} counts, sizes or times something"
        else:
            f = float(x)
            if f != f or f in (float("inf"), float("-inf")):
                return f"{where}: {f} is not a finite number"
            if f < 0 and _non_negative(name):
                return f"{where}: {f:g} is negative, and {name!r} counts, sizes or times something"
    return None


def number(x, what: str = "a measurement"):
    """``x`` when it is a number (int or float, not bool), else :class:`NeedsRemeasuring`: for a
    judge that compares a stored count with ``==``, where a list or a string would compare False
    and read as a confident verdict. (:class:`Measurements` has already refused non-finite ones.)"""
    import numbers

    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise NeedsRemeasuring(f"{what}: {x!r} is not a number")
    return x


class _Stored(dict):
    """A stored measurement's dict as a judge reads it: a missing key raises
    :class:`NeedsRemeasuring` naming its place (a column made before the key existed), not a bare
    KeyError that strict mode would take for the judge's bug."""

    __slots__ = ("_where",)

    def __missing__(self, k):
        where = getattr(self, "_where", "")  # a copy (copy.deepcopy, dataclasses.asdict) has none
        raise NeedsRemeasuring(f"{where}.{k}" if where else str(k))


def _stored(v, where: str = ""):
    """``v`` with every dict in it a :class:`_Stored` (lists and tuples become lists)."""
    if isinstance(v, dict):
        d = _Stored((k, _stored(x, f"{where}.{k}" if where else str(k))) for k, x in v.items())
        d._where = where
        return d
    if isinstance(v, (list, tuple)):
        return [_stored(x, f"{where}[{i}]") for i, x in enumerate(v)]
    return v


class Measurements(Mapping):
    """What a check measured (``values``, read like a dict) and where: ``device``
    (:func:`nogradlab.device.describe`), ``scale``, ``torch``. A judge reads nothing else.

    Reading a key validates everything stored under it (:func:`not_a_measurement`): a key that is
    missing, or whose values hold something that is no measurement (NaN, an infinity, an integer
    beyond 64 bits, a negative count, byte size or duration), raises :class:`NeedsRemeasuring`, so
    every judge reads only finite, plausible numbers; so does a key missing from a dict inside it. ``in`` and ``get`` see a key holding an invalid
    value as present: reading it raises, never falls back to a default."""

    def __init__(self, values: dict, device: "dict | None" = None, scale: str = "", torch_version: str = "",
                 protocol: "int | None" = PROTOCOL, column: "dict | None" = None):
        # a column whose measurements or device are not objects has none that a judge can read
        self.values = dict(values) if isinstance(values, Mapping) else {}
        #: the measuring protocol the values were made by (today's for a fresh run; a stored column's
        #: ``meta.protocol``, None when it did not record one): it says which allocator model made the
        #: estimates (:func:`estimate_validation`)
        self.protocol = protocol
        #: for a stored column's entry, the column's readings of the quantities several claims measure
        #: (:func:`nogradlab.claims.evidence.readings`): a reading stored without an interval is read there with
        #: the spread the column measured for it; None for a fresh run's own measurements
        self.column = column
        self.device = dict(device) if isinstance(device, Mapping) else {}
        self.scale = scale
        self.torch = torch_version
        self._valid: dict = {}  # key -> its validated value, dicts reading missing keys as NeedsRemeasuring

    def __getitem__(self, k):
        try:
            v = self.values[k]
        except KeyError:
            raise NeedsRemeasuring(k) from None
        if k not in self._valid:
            why = not_a_measurement(v, str(k))
            if why:
                raise NeedsRemeasuring(why)
            self._valid[k] = _stored(v, str(k))
        return self._valid[k]

    def __contains__(self, k):
        return k in self.values

    def get(self, k, default=None):
        return self[k] if k in self.values else default

    def __iter__(self):
        return iter(self.values)

    def __len__(self):
        return len(self.values)

    @property
    def on_gpu(self) -> bool:
        return self.device.get("type") == "cuda"

    @property
    def tiny_cpu(self) -> bool:
        return not self.on_gpu and self.scale == "tiny"

    @property
    def label(self) -> str:
        where = _device.label(self.device) if self.device else "unknown device"
        return f"{where}, scale {self.scale}" if self.scale else where


@dataclass
class Judgement:
    """A judge's answer: ``verdict`` (one of :data:`VERDICTS`), ``summary`` (the measured figures in
    one or two sentences), ``reading`` (one line that follows from them), ``conditions`` (one row
    per judged condition: ``condition``, ``value``, ``ci``, ``reading``), ``scope`` (what the verdict
    stands on, when the judge knows better than the claim's basis: ``{"basis", "text"}``), ``qualifier`` (a
    few words the first line puts after the verdict word, when the verdict covers part of the claim only:
    ``"second half only"``)."""

    verdict: str
    summary: str
    reading: str = ""
    conditions: list = field(default_factory=list)
    scope: "dict | None" = None
    qualifier: str = ""


@dataclass
class Result:
    """One claim's result: the verdict its judge gave on its measurements, with what it stands on.

    ``measurements`` is what the check measured (``evidence`` is the same dict), ``scope`` what
    the verdict stands on (``basis``: measured / estimated / cited / reference, and ``text``), ``local`` the
    judgement of this machine's own measurements when the verdict stands on another machine's
    (a GPU speed claim run on a CPU), ``conditions`` the judged conditions."""

    id: str
    verdict: str
    summary: str
    measurements: dict
    figure: "str | None" = None
    section: str = ""
    kind: str = ""
    paraphrase: str = ""
    notebook: str = ""
    device: dict = field(default_factory=dict)
    torch: str = ""
    scale: str = ""
    seconds: float = 0.0
    rule: str = ""
    reading_text: str = ""
    scope: dict = field(default_factory=dict)
    conditions: list = field(default_factory=list)
    local: "dict | None" = None
    qualifier: str = ""  # the judge's (Judgement.qualifier): the first line's words after the verdict

    @property
    def evidence(self) -> dict:
        return self.measurements

    def to_dict(self) -> dict:
        d = json.loads(json.dumps(asdict(self), default=_jsonable))
        d["reading"] = d.pop("reading_text")
        return d

    def __str__(self) -> str:
        """The first line of the verdict display (:func:`nogradlab.claims.display.headline`), at most 25 words
        after the id: the verdict, the article's figure, what was measured. ``r.details()`` holds the rest."""
        return f"{self.id} {_display.headline(self.to_dict())}"

    def details(self) -> str:
        """Everything about the verdict as plain text, for a terminal: the first line, each condition's figure,
        reading and band (the picture's content), the reading, the rule, the measured summary, the evidence
        and where it was measured (:func:`nogradlab.claims.display.details_text`)."""
        where = _device.label(self.device) if self.device else ""
        return _display.details_text(self.to_dict(), f"{where}, scale {self.scale}; measurements: .measurements")

    def __repr__(self) -> str:
        return self.details()

    @property
    def reading(self) -> str:
        """One sentence that follows from the printed numbers: the judge's own, else the measured
        summary's first sentence."""
        if self.reading_text:
            return self.reading_text
        import re

        first = re.split(r"(?<=[.!?])\s+(?=[A-Z])", " ".join(self.summary.split()), maxsplit=1)[0]
        return first if len(first) <= 240 else first[:239] + "\u2026"

    def _meta(self) -> list:
        """The small print: what the verdict stands on, this machine's own verdict, where and how long."""
        e = _html.esc
        small = []
        basis = (self.scope or {}).get("basis")
        if basis:
            small.append({"measured": "measured here", "estimated": "estimated for a GPU", "cited": "cited sources",
                          "reference": (f"on the reference GPU ({e(str(self.scope['machine']))}"
                                        + (f", older evidence: {e(str((self.scope.get('age') or {}).get('measured_on') or 'undated'))}"
                                           if self.scope.get("stale") else "") + ")"
                                        if (self.scope or {}).get("machine") else "no reference GPU measurement"),
                          "estimated + reference": "estimated + reference GPU"}.get(basis, e(basis)))
        if self.local:
            small.append(f"on your machine: {e(self.local.get('verdict', ''))}")
        where = e(_device.label(self.device)) if self.device else ""
        small.append(f"{where}, scale {e(self.scale)}, {self.seconds:.1f} s")
        return small

    def _repr_html_(self) -> str:
        """The verdict display (:mod:`nogradlab.claims.display`): the first line (the verdict, the article's
        figure, what was measured), one picture of the conditions against the article's band (or the table
        of cases, or a line saying there is none), and folded underneath: what the verdict stands on, the
        rule, the measured summary, the conditions and the measurements (rounded, never wider than the cell)."""
        entry = self.to_dict()
        colour = _html.VERDICT_COLOURS.get(self.verdict, "#000")
        box = ("max-width:100%;box-sizing:border-box;overflow-wrap:anywhere;"
               f"border-left:4px solid {colour};padding:4px 8px;line-height:1.4")
        style = ("<style>.nogradlab-result .v{display:inline-block;color:#fff;border-radius:10px;padding:0 7px;"
                 "font-size:85%;font-weight:600}.nogradlab-result .fold{max-width:100%;overflow-x:auto;font-size:90%}"
                 ".nogradlab-result summary{cursor:pointer;font-size:85%}.nogradlab-result table.cases{font-size:85%}.nogradlab-result .small{font-size:85%;"
                 "color:#57606a}.nogradlab-result p{margin:3px 0}</style>")
        meta = f"<p class='nogradlab-result-meta small'>{' &middot; '.join(self._meta())}</p>"
        record = _html.details("measurements", _evidence_html(self.measurements))
        return (f"<div class='nogradlab-result' style='{box}'>{_display.glance_html(entry)}"
                f"{_display.folded_html(entry, before=meta, after=record)}{style}</div>")


_fmt_num = _format.number


def _fmt_ci(ci) -> str:
    if not ci or not isinstance(ci, (list, tuple)) or len(ci) != 2:
        return ""
    return _format.interval(ci[0], ci[1])


# --------------------------------------------------------------------------------------------
# numbers as a reader wants them


def format_ratio(point: float, lo: "float | None" = None, hi: "float | None" = None) -> str:
    """A speed ratio with its CI: ``1.15× [1.05×, 1.22×]``; a CI spanning 1 (both a slowdown and a
    speedup) reads ``no clear difference (noisy): 1.02× [0.95×, 1.08×]`` (:func:`~nogradlab.core.format.ratio_ci`)."""
    return _format.ratio_ci(point, lo, hi)


def format_saved(point: float, lo: "float | None" = None, hi: "float | None" = None) -> str:
    """A fraction saved with its CI: ``23% [18%, 27%]``; a CI spanning 0 reads ``no clear
    difference (noisy): ...`` (:func:`~nogradlab.core.format.percent_ci`)."""
    return _format.percent_ci(point, lo, hi)


#: a scalar with units taken from its key (:func:`nogradlab.core.html.cell_value`)
_fmt_value = _html.cell_value

_time_text = _format.seconds
_rounded = _html._rounded


def _evidence_html(ev, depth: int = 0) -> str:
    """Evidence as nested tables (:func:`nogradlab.core.html.record`). Nothing is cut."""
    return _html.record(ev, depth, default=_jsonable)


def _jsonable(o):
    if isinstance(o, (torch.device, torch.dtype)):
        return str(o)
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if isinstance(o, (set, tuple)):
        return list(o)
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
    except ImportError:
        pass
    return repr(o)
