"""Probes in several threads at once: the thread watch a CPU probe installs (``threading.Thread.run``
and the thread pool's work items) is shared, and the last probe out puts the originals back, exactly,
whatever order the probes leave in."""
import concurrent.futures.thread as cft
import threading
import warnings

import pytest
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

from nogradlab import memory

# the probes' own warnings about other threads' tensors are checked through their notes
pytestmark = pytest.mark.filterwarnings("ignore:memory.measure. another thread")

# upper bounds only (a passing run never waits them out); generous, as the first probe of a process
# imports parts of torch, which takes seconds on a loaded 2-core machine
WAIT = 120

ORIGINAL = (threading.Thread.__dict__["run"], cft._WorkItem.__dict__["run"])


def _patched():
    return (threading.Thread.__dict__["run"], cft._WorkItem.__dict__["run"])


def _modes_in_a_new_thread():
    seen = []
    t = threading.Thread(target=lambda: seen.append(list(_get_current_dispatch_mode_stack())))
    t.start()
    t.join(WAIT)
    return seen[0]


def _overlap(first_out: str):
    """Probes A and B in two threads: A enters, B enters, then ``first_out`` leaves first."""
    a_in, b_in, first_done = threading.Event(), threading.Event(), threading.Event()
    reports, errors = {}, []
    second = "B" if first_out == "A" else "A"
    running = threading.Barrier(2)  # both threads run before either probe starts (else one watches the other)

    def body(me):
        (a_in if me == "A" else b_in).set()
        assert a_in.wait(WAIT) and b_in.wait(WAIT), "the probes did not overlap"
        if me == second:
            assert first_done.wait(WAIT)
        return torch.ones(1000)

    def worker(me):
        try:
            running.wait(WAIT)
            if me == "B":
                assert a_in.wait(WAIT)  # A's probe is in before B's
            reports[me] = memory.measure(lambda: body(me), "cpu")
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            errors.append(e)
        finally:
            if me == first_out:
                first_done.set()

    threads = [threading.Thread(target=worker, args=(me,)) for me in ("A", "B")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(2 * WAIT)
    assert not errors, errors
    return reports


def test_overlapping_probes_in_two_threads_restore_thread_run_exactly():
    assert _patched() == ORIGINAL
    for first_out in ("A", "B"):  # A leaves first (the order that left a dead probe's patch), then B
        reports = _overlap(first_out)
        assert _patched() == ORIGINAL, f"{first_out} left first: the thread watch was not removed"
        assert _modes_in_a_new_thread() == []  # a later thread runs under no probe's dispatch mode
        assert reports["A"].peak_bytes == reports["B"].peak_bytes == 4000
        assert reports["A"].notes == reports["B"].notes == []


def test_a_probe_keeps_watching_after_an_overlapping_probe_left():
    """A enters, B enters, A leaves; then B starts a thread that makes tensors: B still sees it and
    says so (the probe that left first took the only watch with it before), and A's report has no note."""
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    running = threading.Barrier(2)
    reports, errors = {}, []

    def a_body():
        a_in.set()
        assert b_in.wait(WAIT)
        return None

    def b_body():
        b_in.set()
        assert a_out.wait(WAIT)
        t = threading.Thread(target=lambda: torch.ones(10 ** 5).sum())
        t.start()
        t.join(WAIT)
        return None

    def worker(name, body):
        try:
            running.wait(WAIT)
            if name == "B":
                assert a_in.wait(WAIT)
            with warnings.catch_warnings(record=True):
                warnings.simplefilter("always")
                reports[name] = memory.measure(body, "cpu")
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            errors.append(e)
        finally:
            if name == "A":
                a_out.set()

    threads = [threading.Thread(target=worker, args=args) for args in (("A", a_body), ("B", b_body))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(2 * WAIT)
    assert not errors, errors
    assert any("another thread made tensors" in n for n in reports["B"].notes)
    assert reports["A"].notes == []
    assert _patched() == ORIGINAL
    assert _modes_in_a_new_thread() == []


def test_a_probe_that_raises_takes_its_thread_watch_away():
    class Boom(Exception):
        pass

    try:
        memory.measure(lambda: (_ for _ in ()).throw(Boom()), "cpu")
    except Boom:
        pass
    assert _patched() == ORIGINAL
    assert _modes_in_a_new_thread() == []
