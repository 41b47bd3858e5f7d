"""The exercises' registry: :class:`Exercise`, the :func:`exercise` decorator that declares one, and
:func:`get`/:func:`all_exercises`. The registry (``_EXERCISES``) lives here and only here; the notebook
modules (``nb01`` ... ``nb10``) declare into it when the face, :mod:`nogradlab.lab.exercises`, loads them
(:func:`use_loader`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from nogradlab.core.loader import Loader

KINDS = ("code", "predict", "value")


class ExerciseError(AssertionError):
    """A reference solution that no longer passes its own check."""


@dataclass
class Exercise:
    """One exercise: its id (``"01.2"``: notebook 01, exercise 2), kind, reference solution (a
    function: for ``code`` exercises the answer itself, otherwise called with no arguments to make
    the answer), judge (``answer -> None | message``) and plausible wrong answers."""

    id: str
    kind: str
    reference: Callable
    wrong: list = field(default_factory=list)
    judge_fn: "Callable | None" = None
    solution_is_function: bool = False

    def judge(self, fn: Callable) -> Callable:
        """Decorator registering ``fn(answer) -> None | str`` (None: right; else what is wrong)."""
        self.judge_fn = fn
        return fn

    def answer(self):
        """The reference answer: the solution function itself for a code exercise, else its value."""
        return self.reference if self.solution_is_function else self.reference()


_EXERCISES: dict = {}


def exercise(id: str, *, kind: str, wrong=(), returns_function: "bool | None" = None):
    """Declare an exercise whose reference solution is the decorated function. For ``kind="code"``
    the function is the answer; for the other kinds it is called to make the answer (set
    ``returns_function`` to override)."""
    if kind not in KINDS:
        raise ValueError(f"exercise {id}: kind {kind!r}; allowed: {', '.join(KINDS)}")

    def deco(fn):
        if id in _EXERCISES:
            raise RuntimeError(f"exercise {id} is declared twice")
        is_fn = (kind == "code") if returns_function is None else returns_function
        ex = Exercise(id, kind, fn, list(wrong), None, is_fn)
        _EXERCISES[id] = ex
        return ex

    return deco


#: imports the notebook modules (each declares its exercises), through the import the face gives when it is
#: imported (:func:`use_loader`): only the face loads them
_LOAD = Loader("nogradlab.lab.exercises")
use_loader = _LOAD.use


def _load() -> None:
    _LOAD()


def get(exercise_id: str) -> Exercise:
    _load()
    try:
        return _EXERCISES[exercise_id]
    except KeyError:
        raise ValueError(f"unknown exercise {exercise_id!r}; allowed: {', '.join(sorted(_EXERCISES))}") from None


def all_exercises() -> list:
    _load()
    return [_EXERCISES[k] for k in sorted(_EXERCISES)]
