"""largest_batch: the generic search against a predicate with a known answer, the estimate path
against memory.estimate, and the CUDA path's OOM recovery and cap restoration with a scripted fake
of the torch.cuda functions it calls (so it runs without a GPU)."""
import gc
import math
import types
import weakref

import pytest
import torch

from nogradlab import batch, memory

KIB = 1024


# --- the search, generic over a predicate -----------------------------------------------------

@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 7, 8, 64, 100, 1000, 4097, 65535, 65536])
def test_search_exact_and_few_trials(n):
    calls = []

    def fits(b):
        calls.append(b)
        return b <= n

    found, trials = batch.search(fits, max_batch=65536)
    assert found == n
    assert len(trials) == len(calls) and len(set(calls)) == len(calls)  # no batch tried twice
    assert calls[0] == 1
    if n >= 1:
        assert len(trials) <= 2 * math.log2(n) + 2
        assert len(trials) <= batch.max_trials(n)
    else:
        assert len(trials) == 1
    # what the search saw agrees with the predicate
    assert all(ok == (b <= n) for b, ok in trials)


@pytest.mark.parametrize("start", [1, 2, 9, 50, 999, 5000])
@pytest.mark.parametrize("n", [0, 1, 7, 64, 1000])
def test_search_from_any_start(n, start):
    found, trials = batch.search(lambda b: b <= n, max_batch=4096, start=start)
    assert found == n
    assert trials[0][0] == min(start, 4096)


def test_search_respects_max_batch():
    found, trials = batch.search(lambda b: True, max_batch=100)
    assert found == 100
    assert max(b for b, _ in trials) == 100


def test_search_bad_arguments():
    with pytest.raises(ValueError, match="max_batch"):
        batch.search(lambda b: True, max_batch=0)
    with pytest.raises(ValueError, match="start"):
        batch.search(lambda b: True, start=True)


# --- the estimate path ------------------------------------------------------------------------

@pytest.mark.parametrize("mode", batch.MODES)
def test_estimate_path_fits_and_next_does_not(mode):
    budget = 3 * 1024 * KIB
    r = batch.largest_batch("mlp", mode, budget, "cpu", scale="tiny")
    assert r.method == "estimate" and r.device == "cpu" and r.mode == mode
    assert r.batch > 1
    kw = dict(step="train") if mode == "train" else dict(mode=batch._SETTINGS[mode])
    fit = memory.estimate("mlp", r.batch, "cpu", scale="tiny", **kw).total_peak_bytes
    over = memory.estimate("mlp", r.batch + 1, "cpu", scale="tiny", **kw).total_peak_bytes
    assert fit <= budget < over
    assert r.bytes_at(r.batch) == fit
    assert len(r.trials) <= 8
    assert r.to_dict()["trials"][0][:2] == [1, True]


def test_guessed_start_agrees_with_plain_doubling():
    budget = 4 * 1024 * KIB
    a = batch.largest_batch("mlp", "train", budget, "cpu", scale="tiny")
    b = batch.largest_batch("mlp", "train", budget, "cpu", scale="tiny", start=1)
    assert a.batch == b.batch > 0
    assert len(b.trials) <= batch.max_trials(b.batch)
    for hint in (1, a.batch, a.batch + 1, 3 * a.batch):  # a hint changes the trials, not the answer
        assert batch.largest_batch("mlp", "train", budget, "cpu", scale="tiny", hint=hint).batch == a.batch
    with pytest.raises(ValueError, match="hint"):
        batch.largest_batch("mlp", "train", budget, "cpu", scale="tiny", hint=0)


def test_estimate_on_virtual_cuda_models_the_allocator():
    from nogradlab import allocator

    budget = 64 * 1024 * KIB
    r = batch.largest_batch("mlp", "eval+no_grad", budget, "cuda", scale="tiny")
    assert r.method == "estimate" and r.device.startswith("cuda") and r.allocator == "native"
    assert 0 < r.batch < 65536
    fit = memory.estimate("mlp", r.batch, "cuda", "eval+no_grad", scale="tiny")
    over = memory.estimate("mlp", r.batch + 1, "cuda", "eval+no_grad", scale="tiny")
    assert fit.total_peak_bytes % memory.CUDA_BLOCK == 0
    # the answer is where the allocator's model starts to run out of memory under the cap
    assert not allocator.simulate(fit.events, "native", budget).oom
    assert allocator.simulate(over.events, "native", budget).oom
    if not torch.cuda.is_available():
        assert any("virtual" in n for n in r.notes)
    # the cuBLAS workspace (32 MiB on the reference GPU) is part of the answer: 3 MiB fits nothing
    assert batch.largest_batch("mlp", "eval+no_grad", 3 * 1024 * KIB, "cuda", scale="tiny").batch == 0


def test_estimate_allocator_modes_and_bad_values():
    budget = 128 * 1024 * KIB  # a training step keeps two cuBLAS workspaces (forward, backward)
    es = batch.largest_batch("mlp", "train", budget, "cuda", scale="tiny", allocator="expandable_segments")
    nat = batch.largest_batch("mlp", "train", budget, "cuda", scale="tiny")
    assert es.allocator == "expandable_segments" and es.batch >= nat.batch > 0
    held = batch.largest_batch("mlp", "train", budget, "cuda", scale="tiny", held_bytes=8 * 1024 * KIB)
    assert held.batch < nat.batch
    with pytest.raises(ValueError, match="allocator"):
        batch.largest_batch("mlp", "train", budget, "cuda", scale="tiny", allocator="caching")
    with pytest.raises(ValueError, match="held_bytes"):
        batch.largest_batch("mlp", "train", budget, "cuda", scale="tiny", held_bytes=-1)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="search"):
            batch.largest_batch("mlp", "train", budget, "cuda", method="search")


def test_nothing_fits_gives_zero():
    r = batch.largest_batch("mlp", "eval+no_grad", 1000, "cpu", scale="tiny")
    assert r.batch == 0 and r.trials == [(1, False, r.trials[0][2])]


def test_no_grad_fits_more_than_training():
    budget = 64 * 1024 * KIB
    rs = batch.largest_batches("unet", budget, "cpu", scale="tiny", modes=("train", "eval+no_grad"))
    assert rs["eval+no_grad"].batch > rs["train"].batch > 0


def test_max_batch_reached_is_noted():
    r = batch.largest_batch("mlp", "eval+no_grad", 2 ** 30, "cpu", scale="tiny", max_batch=50)
    assert r.batch == 50 and r.at_limit


def test_gc_freeze_is_restored():
    assert gc.get_freeze_count() == 0
    batch.largest_batch("mlp", "grad", 2 * 1024 * KIB, "cpu", scale="tiny")
    assert gc.get_freeze_count() == 0


@pytest.mark.parametrize("kwargs, match", [
    (dict(workload="vgg"), "allowed: resnet50"),
    (dict(mode="no_grad"), "allowed: train, grad, eval\\+no_grad, inference_mode"),
    (dict(method="guess"), "allowed: auto, estimate, search"),
    (dict(budget_bytes=0), "positive"),
    (dict(budget_bytes=-5), "positive"),
    (dict(max_batch=0), "max_batch"),
    (dict(scale="huge"), "allowed: tiny, small, full"),
    (dict(device="tpu"), "allowed: auto, cpu"),
    (dict(device="cuda:x"), "allowed: auto, cpu"),
    (dict(method="search"), "CUDA"),
])
def test_validation_names_allowed_values(kwargs, match):
    args = dict(workload="mlp", mode="grad", budget_bytes=2 ** 20, device="cpu", scale="tiny")
    args.update(kwargs)
    with pytest.raises((ValueError, RuntimeError), match=match):
        batch.largest_batch(args.pop("workload"), args.pop("mode"), args.pop("budget_bytes"), **args)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a GPU")
def test_search_on_virtual_cuda_is_refused():
    with pytest.raises(RuntimeError, match="real CUDA device"):
        batch.largest_batch("mlp", "grad", 2 ** 20, "cuda", scale="tiny", method="search")


# --- the CUDA search path, with a scripted fake torch.cuda ------------------------------------

class FakeCuda:
    """Records the calls the search makes; empty_cache checks that no tensor of a failed attempt
    is still alive when it runs (they must be freed before the cache is emptied)."""

    TOTAL = 100 * 2 ** 30

    def __init__(self):
        self.fraction = 0.7  # a cap the caller had set before
        self.fractions = []
        self.empty_calls = 0
        self.alive_at_empty = []
        self.failed = []  # weakrefs to the tensors of failed attempts

    def install(self, monkeypatch):
        c = torch.cuda
        monkeypatch.setattr(c, "get_device_properties",
                            lambda d=None: types.SimpleNamespace(total_memory=self.TOTAL))
        monkeypatch.setattr(c, "get_per_process_memory_fraction", lambda d=None: self.fraction)
        monkeypatch.setattr(c, "set_per_process_memory_fraction", self.set_fraction)
        monkeypatch.setattr(c, "empty_cache", self.empty_cache)

    def set_fraction(self, f, device=None):
        assert 0 < f <= 1
        self.fraction = f
        self.fractions.append(f)

    def empty_cache(self):
        self.empty_calls += 1
        self.alive_at_empty.append(sum(r() is not None for r in self.failed))


def _oom_run(fake, n, per_sample=2 ** 20):
    """A step that "allocates" a CPU tensor and raises an OOM above batch ``n``; the tensor is
    held by the traceback's frame until the exception is released."""

    def run(batch_size):
        held = torch.empty(batch_size * 16)
        if batch_size > n:
            fake.failed.append(weakref.ref(held))
            raise torch.cuda.OutOfMemoryError(f"fake OOM at batch {batch_size}")
        return 10 * 2 ** 20 + batch_size * per_sample

    return run


@pytest.mark.parametrize("n", [0, 1, 3, 37, 500])
@pytest.mark.parametrize("start", [1, "auto"])
def test_cuda_search_recovers_from_oom_and_restores_cap(monkeypatch, n, start):
    fake = FakeCuda()
    fake.install(monkeypatch)
    budget = 10 * 2 ** 20 + n * 2 ** 20
    seen, resets = [], []
    found = batch.search_on_cuda(_oom_run(fake, n), budget, "cuda:0", max_batch=4096, start=start,
                                 reset=lambda: resets.append(1),
                                 on_trial=lambda b, ok, nbytes: seen.append((b, ok, nbytes)))
    assert found == n
    assert fake.fractions[0] == pytest.approx(budget / FakeCuda.TOTAL)  # the cap during the search
    assert fake.fraction == 0.7  # the previous cap is back
    assert fake.failed and all(a == 0 for a in fake.alive_at_empty)  # freed before empty_cache
    assert len(resets) == len(seen)  # reset after every attempt
    assert all(nbytes is None for _, ok, nbytes in seen if not ok)
    assert all(ok == (b <= n) for b, ok, _ in seen)
    assert len({b for b, _, _ in seen}) == len(seen)


def test_cuda_search_restores_cap_when_something_else_raises(monkeypatch):
    fake = FakeCuda()
    fake.install(monkeypatch)

    def broken(b):
        if b > 4:
            raise RuntimeError("a bug, not an OOM")
        return 1

    with pytest.raises(RuntimeError, match="a bug"):
        batch.search_on_cuda(broken, 2 ** 30, "cuda:0")
    assert fake.fraction == 0.7 and len(fake.fractions) == 2


def test_cuda_search_refuses_budget_above_device(monkeypatch):
    fake = FakeCuda()
    fake.install(monkeypatch)
    with pytest.raises(ValueError, match="exceeds"):
        batch.search_on_cuda(lambda b: 1, FakeCuda.TOTAL + 1, "cuda:0")
    assert fake.fractions == []


@pytest.mark.integration
def test_real_search_path_end_to_end_with_fake_allocator(monkeypatch):
    """_search_real with real mlp steps on the CPU; the fake allocator needs 1 MiB + 4 KiB per
    sample, and the input allocation "runs out of memory" above the cap, or above batch 300."""
    from nogradlab import workloads

    fake = FakeCuda()
    fake.install(monkeypatch)
    last, limit, base, per = {}, 300, 2 ** 20, 4 * KIB
    original = workloads.Workload.make_input

    def make_input(self, b, device="cpu", dtype=torch.float32):
        last["b"] = b
        if b > limit or base + per * b > fake.fraction * FakeCuda.TOTAL:
            raise torch.cuda.OutOfMemoryError(f"fake OOM at batch {b}")
        return original(self, b, device, dtype)

    monkeypatch.setattr(workloads.Workload, "make_input", make_input)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda d=None: None)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d=None: base + per * last["b"])
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda d=None: 12345)
    wl = workloads.get("mlp", "tiny")
    # (mode, budget, answer, most trials): the guess from the bytes of batches 1 and 2 is exact when
    # the cap is what stops the batch; an OOM far below the guess costs a longer walk down
    for mode, budget, expect, most in [("train", base + per * 120, 120, 5),
                                       ("eval+no_grad", 10 ** 9, limit, 2 * 12 + 2),
                                       ("grad", base - 1, 0, 1)]:
        r = batch.BatchResult(wl.name, mode, budget, 0, [], "search", "cpu")
        got = batch._search_real(wl, mode, torch.device("cpu"), budget, 4096, "auto",
                                 lambda b, ok, n: r.trials.append((b, ok, n)), r)
        assert got == expect
        assert fake.fraction == 0.7
        assert r.allocated_before == r.allocated_after == 12345
        assert not any("changed" in n for n in r.notes)
        assert any("allocated before the search" in n for n in r.notes)
        assert all(ok == (b <= min(limit, (budget - base) // per)) for b, ok, _ in r.trials)
        assert len(r.trials) <= most


@pytest.mark.integration
def test_c04_check_compares_modes_and_agrees_with_real_cpu_runs():
    from nogradlab import claims

    r = claims.check("C04", device="cpu", scale="tiny", workloads=["unet"], budgets_gib=[12])
    conds = r.evidence["conditions"]
    unet = next(c for c in conds if c["workload"] == "unet")
    assert unet["eval+no_grad"] > unet["grad"] > 0 and unet["eval+no_grad"] > unet["train"] > 0
    assert all(v["real_agrees"] for v in r.evidence["cpu_check"].values())
    # the GPU-sized conditions decide; the tiny CPU search is shown "on your machine"
    larger = [c["larger_than_grad"] for c in conds if c.get("device") != "cpu"]
    assert r.verdict == ("holds" if all(larger) else "does not hold" if not any(larger) else "depends")
    assert "On your machine" in r.summary and r.scope["basis"] == "estimated"
    with pytest.raises(ValueError, match="allowed"):
        claims.check("C04", device="cpu", scale="tiny", workloads=["vgg"])


def test_real_search_reports_bytes_left_allocated(monkeypatch):
    from nogradlab import workloads

    FakeCuda().install(monkeypatch)
    readings = iter([1000, 5000])  # before the search, after it: 4000 bytes leaked
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda d=None: next(readings))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda d=None: None)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d=None: 1)
    wl = workloads.get("mlp", "tiny")
    r = batch.BatchResult(wl.name, "grad", 10, 0, [], "search", "cpu")
    assert batch._search_real(wl, "grad", torch.device("cpu"), 10, 4, 1, lambda *a: None, r) == 4
    assert (r.allocated_before, r.allocated_after) == (1000, 5000)
    assert any("changed" in n for n in r.notes)


def test_the_guess_survives_batches_that_reserve_the_same_bytes():
    # on virtual CUDA batches 1 and 2 of the MLP reserve the same bytes (one segment holds both): the
    # secant had no slope and the search stepped up from batch 2 (37 trials); the bracket between the
    # allocated and the reserved lines finds the same answer in fewer (a trial count is not a speed:
    # it is the same on every machine)
    kw = dict(scale="full", method="estimate", max_batch=2 ** 22)
    r = batch.largest_batch("mlp", "grad", 12 * 2 ** 30, "cuda", **kw)
    assert r.bytes_at(1) == r.bytes_at(r.trials[1][0]) or r.trials[1][0] == 2
    plain = batch.largest_batch("mlp", "grad", 12 * 2 ** 30, "cuda", start=1, **kw)
    assert r.batch == plain.batch > 0
    assert len(r.trials) <= 18 < len(plain.trials)
