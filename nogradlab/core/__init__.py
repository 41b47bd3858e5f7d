"""core: the probes. Devices and gradient modes, the workloads, your own model's adapter, memory
measured on the device, timings with intervals that hold, one formatting of figures, and the
session helpers (the garbage collector held still, the run pipeline's environment).
Imports nothing else of nogradlab (the layers contract in pyproject.toml)."""
