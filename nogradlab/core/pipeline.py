"""The run pipeline's side inside a notebook kernel: the one place that reads its environment.

``python -m nogradlab run`` executes each notebook in its own kernel and sets two variables for it:
``NOGRADLAB_LEDGER`` (a JSON-lines file every ``claims.check`` appends its result to: that is how the
notebooks' verdicts reach ``claims.json``) and ``NOGRADLAB_NOTEBOOK`` (the notebook's name). The
run's shared measurements (:data:`nogradlab.claims.runcache.RUN`) are kept beside the ledger, so a notebook
reads what an earlier notebook of the same run measured. Nothing else in the package reads them.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["LEDGER", "NOTEBOOK", "ledger_path", "notebook_name", "in_run", "record"]

LEDGER = "NOGRADLAB_LEDGER"
NOTEBOOK = "NOGRADLAB_NOTEBOOK"


def ledger_path() -> "str | None":
    """The file ``NOGRADLAB_LEDGER`` names (None when unset or empty); ``ValueError`` naming the variable
    when results cannot be appended there (a folder, a missing folder, not a regular file)."""
    path = os.environ.get(LEDGER)
    if not path:
        return None
    p = Path(path)
    why = None
    if p.is_dir():
        why = "is a folder"
    elif p.exists() and not p.is_file():
        why = "is not a regular file"
    elif not p.parent.is_dir():
        why = f"is in a folder that does not exist ({str(p.parent)!r})"
    elif not os.access(p if p.exists() else p.parent, os.W_OK):
        why = "is not writable"
    if why:
        raise ValueError(f"{LEDGER}={path!r} {why}; set it to a JSON-lines file (it is appended to) "
                         f"or unset it")
    return path


def notebook_name() -> str:
    """The notebook this kernel runs for the pipeline ('' outside a run)."""
    return os.environ.get(NOTEBOOK, "")


def in_run() -> bool:
    """Whether this process is a notebook kernel of ``python -m nogradlab run``."""
    return LEDGER in os.environ


def record(entry: dict) -> None:
    """Append one claim result (its dict) to the run's ledger, when a run is collecting them."""
    path = ledger_path()
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(entry) + "\n")


