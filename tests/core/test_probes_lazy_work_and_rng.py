"""Probes do not lie about lazy work, and leave the global random number generators alone."""
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from nogradlab import device, memory, timing, widgets

ROOT = Path(__file__).resolve().parents[2]


# --- lazy work ---------------------------------------------------------------------------

def _gen():
    for _ in range(3):
        yield torch.ones(1024)  # 4 KiB each, but only once someone iterates


@pytest.mark.parametrize("fn, kind", [
    (_gen, "a generator"),
    (lambda: map(lambda i: torch.ones(1024), range(3)), "lazy map"),
    (lambda: iter([torch.ones(4)]), "an iterator"),
])
def test_measure_of_lazy_work_warns_and_notes_it(fn, kind):
    with pytest.warns(memory.LazyResultWarning, match="list") as w:
        r = memory.measure(fn)
    assert kind in str(w[0].message) and "nothing was measured" in str(w[0].message)
    assert any(kind in n for n in r.notes)
    assert w[0].filename == __file__  # the warning points at the caller's line


def test_consumed_lazy_work_is_measured_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = memory.measure(lambda: list(_gen()))
        for ok in (lambda: torch.ones(8), lambda: None, lambda: [1, 2], lambda: {"a": 1}):
            memory.measure(ok)
    assert r.peak_bytes >= 3 * 1024 * 4 and r.notes == []


def test_measure_modes_passes_the_warning_on():
    with pytest.warns(memory.LazyResultWarning):
        reports = memory.measure_modes(_gen, ["grad", "no_grad"])
    assert all(any("generator" in n for n in r.notes) for r in reports.values())


# --- the global RNG ----------------------------------------------------------------------

FIRST_PROBE = """
import sys, torch
from nogradlab import memory, timing, widgets, batch
torch.manual_seed(1)
before = torch.get_rng_state().clone()
f = lambda: torch.ones(3) * 2
probe = sys.argv[1]
if probe == "measure":
    memory.measure(f)
elif probe == "measure_modes":
    memory.measure_modes(f, ["grad", "no_grad"])
elif probe == "estimate":
    memory.estimate("mlp", 2)
elif probe == "compare":
    timing.compare({"a": f, "b": f}, rounds=2, min_run_time=0.01, warmup=1)
elif probe == "batch":
    batch.largest_batch("mlp", "eval+no_grad", 2**20, "cpu", scale="tiny", method="estimate")
print("RNG", "same" if torch.equal(before, torch.get_rng_state()) else "advanced")
"""


@pytest.mark.integration
@pytest.mark.parametrize("probe", ["measure", "measure_modes", "estimate", "compare", "batch"])
def test_first_probe_in_a_process_leaves_the_rng_alone(probe):
    """The first memory probe warms torch up on a throw-away model, whose initialisation drew
    from the global generator: the learner's next torch.randn differed with and without it."""
    out = subprocess.run([sys.executable, "-c", FIRST_PROBE, probe], capture_output=True,
                         text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "RNG same" in out.stdout


def _draws(fn):
    """torch.rand after fn() vs without it, same seed."""
    torch.manual_seed(7)
    expected = torch.rand(4)
    torch.manual_seed(7)
    fn()
    return expected, torch.rand(4)


@pytest.mark.parametrize("probe", [
    lambda f: memory.measure(f),
    lambda f: memory.measure_modes(f, ["grad", "no_grad"]),
    lambda f: timing.measure(f, min_run_time=0.01, warmup=1),
    lambda f: timing.compare({"a": f, "b": f}, rounds=2, min_run_time=0.01, warmup=1),
    lambda f: widgets.measure_modes(f, ["grad", "no_grad"], "cpu", rounds=2, min_run_time=0.01),
], ids=["measure", "memory.measure_modes", "timing.measure", "compare", "widgets.measure_modes"])
def test_probes_restore_the_rng_even_after_the_code_draws(probe):
    """Timing calls the code a calibrated, varying number of times: without the restore the
    generator's state after a probe would differ from run to run."""
    expected, got = _draws(lambda: probe(lambda: torch.randn(16)))
    assert torch.equal(expected, got)


def test_rng_restored_when_the_measured_code_raises():
    def boom():
        torch.randn(100)
        raise KeyError("inside")

    for probe in (memory.measure, lambda f: timing.measure(f, min_run_time=0.01)):
        def run():
            with pytest.raises(KeyError, match="inside"):
                probe(boom)
        expected, got = _draws(run)
        assert torch.equal(expected, got)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_generator_restored():
    def draw():
        torch.cuda.manual_seed(3)
        return torch.rand(4, device="cuda")

    expected = draw()
    torch.cuda.manual_seed(3)
    memory.measure(lambda: torch.randn(1000, device="cuda"), "cuda")
    timing.measure(lambda: torch.randn(1000, device="cuda"), "cuda", min_run_time=0.01)
    memory.estimate("mlp", 4, "cuda", mode="no_grad")
    # the explorer builds its model and input on the GPU: seeded, then the generator put back
    widgets.explorer("mlp", "tiny", batch=4, device="cuda", interactive=False, rounds=2,
                     min_run_time=0.01)
    assert torch.equal(expected, torch.rand(4, device="cuda"))


def test_rng_preserved_saves_only_what_exists():
    with device.rng_preserved("cpu"):
        torch.rand(3)
    with device.rng_preserved(None):
        torch.rand(3)
    assert device.leaves_rng_alone(lambda device=None: torch.rand(1))(device="cpu").shape == (1,)


# --- the timers do not time lazy work as if it were done ------------------------------

def _pool_future():
    import concurrent.futures

    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        yield lambda: pool.submit(lambda: torch.ones(10 ** 5).sum())
    finally:
        pool.shutdown()


@pytest.mark.parametrize("make, kind", [
    (lambda m, x: (m(x) for _ in range(1)), "a generator"),
    (lambda m, x: iter([x]), "an iterator"),
    (lambda m, x: map(m, [x]), "lazy map"),
    ("future", "a future"),
])
def test_timers_warn_on_lazy_results(make, kind):
    m, x = torch.nn.Linear(64, 64), torch.ones(8, 64)
    futures = _pool_future()
    lazy = next(futures) if make == "future" else (lambda: make(m, x))
    try:
        with pytest.warns(memory.LazyResultWarning, match="consumed") as w:
            timing.compare({"eager": lambda: m(x), "lazy": lazy}, rounds=2, min_run_time=0.002, warmup=1)
        assert kind in str(w[0].message) and "case 'lazy'" in str(w[0].message)
        assert w[0].filename == __file__ and len(w) == 1
        for warmup in (0, 2):
            with pytest.warns(memory.LazyResultWarning, match=kind):
                timing.measure(lazy, min_run_time=0.002, warmup=warmup)
    finally:
        futures.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        timing.measure(lambda: list(make(m, x)) if make != "future" else m(x), min_run_time=0.002)


# --- memory.measure says what it cannot see ---------------------------------------------

def _in_a_pool():
    import concurrent.futures

    pool = concurrent.futures.ThreadPoolExecutor(1)
    pool.submit(lambda: None).result()  # the worker thread exists before the call
    return (lambda: pool.submit(lambda: torch.ones(10 ** 6).sum()).result()), pool.shutdown


def _in_a_thread():
    import threading

    def fn():
        t = threading.Thread(target=lambda: torch.ones(10 ** 6).sum())
        t.start()
        t.join()
    return fn, lambda: None


@pytest.mark.parametrize("make", [_in_a_pool, _in_a_thread])
def test_work_in_other_threads_is_named_not_reported_as_zero(make):
    import concurrent.futures.thread as cft
    import threading

    before = (threading.Thread.run, cft._WorkItem.run)
    fn, done = make()
    try:
        with pytest.warns(UserWarning, match="another thread made tensors") as w:
            r = memory.measure(fn, "cpu")
        assert w[0].filename == __file__
        assert any("another thread" in n for n in r.notes)
    finally:
        done()
    assert (threading.Thread.run, cft._WorkItem.run) == before  # the watch is removed again
    with warnings.catch_warnings():  # the same work in the calling thread: counted, no note
        warnings.simplefilter("error")
        r = memory.measure(lambda: torch.ones(10 ** 6).sum(), "cpu")
    assert r.peak_bytes >= 4 * 10 ** 6 and r.notes == []


def test_sparse_tensors_are_named_as_not_counted(capsys):
    with pytest.warns(UserWarning, match="sparse_coo"):
        r = memory.measure(lambda: torch.ones(10 ** 5).to_sparse(), "cpu")
    assert any("sparse_coo" in n and "not counted" in n for n in r.notes)


def test_a_server_measuring_each_request_in_its_thread_may_ignore_the_others():
    """other_threads="ignore": a caller that measures each thread's own work where it runs (the
    serving demo) gets no warning for the work other threads do meanwhile; bad values are refused."""
    import threading
    import warnings

    import torch

    from nogradlab import memory

    def work():
        t = threading.Thread(target=lambda: torch.ones(10 ** 5).sum())
        t.start()
        t.join()
        return torch.ones(10)

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        quiet = memory.measure(work, "cpu", other_threads="ignore")
    assert not any("another thread" in str(w.message) for w in seen)
    assert not any("another thread" in n for n in quiet.notes)
    with pytest.warns(UserWarning, match="another thread made tensors"):
        memory.measure(work, "cpu")
    with pytest.raises(ValueError, match="other_threads must be one of warn, ignore"):
        memory.measure(work, "cpu", other_threads="no")
