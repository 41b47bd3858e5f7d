"""Exercises that make a learner think: the answers, their checks and the solutions live here, out of
the learner's view; a notebook holds only the prompt, the learner's cell and one call.

In a notebook, an exercise is three cells::

    # the learner's cell: write code, or predict before running the next cell
    def predict(model, x): ...            # or: prediction_1 = ...   (Python's Ellipsis: not answered yet)

    exercises.check("01.2", predict)      # feedback that names the mistake; never raises, never a traceback

    exercises.solution("01.2")            # collapsed, tagged "solution": runs the reference solution
                                          # through the same check, silently (an exercise cannot rot)

``exercises.show("01.2")`` prints the reference solution's code when the learner wants it.

An exercise is declared once, in the module of its notebook (``nogradlab/lab/exercises/nb01.py`` ...)::

    @exercise("01.2", kind="code", wrong=[(lambda m, x: m(x), "runs with grad on"), ...])
    def predict(model, x):                # the reference solution
        with torch.no_grad():
            return model(x)

    @predict.judge
    def _(answer):                        # None when right, else the message naming the mistake
        ...

``kind`` is ``"code"`` (write or fix a function), ``"predict"`` (a prediction made before running
a cell) or ``"value"`` (a value read from an experiment the learner runs). ``wrong`` lists plausible
wrong answers (or functions making them) with a fragment of the message each must get: the tests
check that every judge rejects them, each with its own message.
"""
from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import sys
import warnings
from dataclasses import dataclass, field  # noqa: F401 (kept on the face: its names of before the split)
from typing import Any, Callable  # noqa: F401

from nogradlab.lab.exercises import registry as _registry
from nogradlab.lab.exercises.registry import (  # noqa: F401 (the face re-exports the registry's names)
    _EXERCISES, KINDS, Exercise, ExerciseError, _load, all_exercises, exercise, get)

__all__ = ["check", "solution", "show", "exercise", "get", "all_exercises", "ExerciseError", "KINDS"]
_MODULES = ("nb01", "nb02", "nb03", "nb04", "nb05", "nb06", "nb07", "nb08", "nb09", "nb10")


def _import_modules() -> None:
    """Import the notebook modules: each declares its exercises into the registry (only the face loads them)."""
    for m in _MODULES:
        try:
            importlib.import_module(f"{__name__}.{m}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{m}":
                raise


_registry.use_loader(_import_modules)


__getattr__, __dir__ = _registry._LOAD.face_names(__name__)  # _LOADED: the room's flag


def _verdict(ex: Exercise, answer) -> "str | None":
    """None when ``answer`` is right, else the judge's message; nothing it does reaches the learner's
    screen but that message (its prints, warnings and exceptions are caught)."""
    if inspect.iscoroutine(answer):
        answer.close()
        return ("that is a coroutine, not its result: an async function's call only creates it; "
                "`await` it inside an async function, or run it with asyncio.run(...)")
    if ex.judge_fn is None:
        raise RuntimeError(f"exercise {ex.id} has no judge")
    out = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        warnings.simplefilter("ignore")
        old_hook = getattr(sys, "unraisablehook", None)
        try:
            import threading

            old_thread_hook = threading.excepthook
            threading.excepthook = lambda args: None  # a learner's thread that raises: a message, not a traceback
            sys.unraisablehook = lambda u: None
            try:
                return ex.judge_fn(answer)
            except Exception as e:  # an answer of the wrong shape: feedback, not a traceback
                return f"checking it raised {type(e).__name__}: {e}"
        finally:
            threading.excepthook = old_thread_hook
            if old_hook is not None:
                sys.unraisablehook = old_hook


def check(exercise_id: str, answer: Any) -> "bool | None":
    """Feedback on the learner's answer: True (right), False (wrong: the message names the mistake),
    None (not answered yet). Never raises, whatever the answer."""
    ex = get(exercise_id)
    if answer is Ellipsis:
        print(f"Exercise {exercise_id}: not answered yet. Replace the ... with your answer and run this cell again.")
        return None
    msg = _verdict(ex, answer)
    if msg is None:
        print(f"Exercise {exercise_id}: correct.")
        return True
    print(f"Exercise {exercise_id}: not yet: {msg}")
    return False


def solution(exercise_id: str) -> None:
    """Run the reference solution through the exercise's own check, silently; :class:`ExerciseError`
    when it no longer passes (so every run of the notebooks tests its exercises)."""
    ex = get(exercise_id)
    msg = _verdict(ex, ex.answer())
    if msg is not None:
        raise ExerciseError(f"exercise {exercise_id}: the reference solution fails its check: {msg}")


def show(exercise_id: str) -> None:
    """Print the reference solution's code."""
    ex = get(exercise_id)
    print(inspect.getsource(ex.reference))
