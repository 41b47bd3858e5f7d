"""Self-checking exercises for the notebooks.

Each exercise in a notebook has three code cells:

1. the learner's cell, which starts as ``answer_1 = ...`` (Python's Ellipsis: "not answered yet");
2. a check cell::

       def test_1(a):            # True when the answer is right
           return a is None
       exercises.check("1", answer_1, test_1, hint="what does a factory function return under no_grad?")

   It prints feedback and never raises, so a learner can run it as often as they like;
3. a solution cell, collapsed in JupyterLab (``"jupyter": {"source_hidden": true}`` in its metadata, tagged
   ``solution``), that computes the answer and checks it with ``strict=True``. The tests run every notebook from
   top to bottom, so each solution is executed and checked on every run: an exercise cannot rot.
"""
from __future__ import annotations

from typing import Any, Callable

__all__ = ["check", "ExerciseError"]


class ExerciseError(AssertionError):
    """A solution (``strict=True``) that no longer passes its own check."""


def check(name: str, answer: Any, test: Callable[[Any], bool], hint: str = "", *, strict: bool = False) -> "bool | None":
    """Say whether ``answer`` passes ``test``: True (right), False (wrong, with the hint), None (not answered).

    ``strict=True`` (used by the solution cells) raises :class:`ExerciseError` unless the answer is right.
    """
    if not callable(test):
        raise TypeError(f"exercise {name}: test must be a function answer -> bool, got {type(test).__name__}")
    if answer is Ellipsis:
        if strict:
            raise ExerciseError(f"exercise {name}: the solution left the answer as ...")
        print(f"Exercise {name}: not answered yet. Replace the ... with your answer and run the check again.")
        return None
    try:
        ok = bool(test(answer))
        problem = ""
    except Exception as e:  # a wrong type of answer: feedback, not a traceback
        ok, problem = False, f" (checking it raised {type(e).__name__}: {e})"
    if ok:
        print(f"Exercise {name}: correct.")
        return True
    msg = f"Exercise {name}: not yet{problem}." + (f" Hint: {hint}" if hint else "")
    if strict:
        raise ExerciseError(msg)
    print(msg)
    return False
