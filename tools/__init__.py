"""The project's own tooling, outside the installed package: what only tests and benchmarks use.

* ``plan``: how long each notebook's checks take on a GPU, planned from the reference H200 run
  (``plan_h200.json``; ``benchmarks/plan_data.py`` refreshes it);
* ``procmem``: a process's peak resident memory and a container-like memory cap, for the session
  benchmarks (``benchmarks/session.py``).
"""
