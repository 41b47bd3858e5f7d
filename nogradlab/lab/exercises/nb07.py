"""Notebook 07's exercises (no_grad in a real server). The reference solutions and their checks.

Each check runs the learner's code in a fresh thread with its own event loop, as a server would; the
learner's handler calls the notebook's ``model`` (``nn.Linear(256, ...)`` first), so the checks feed
it batches of 256 features."""
from __future__ import annotations

import asyncio
import inspect
import threading
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn as nn

from nogradlab.lab.exercises.registry import exercise

with torch.random.fork_rng():  # the learner's random state is left alone
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)).eval()  # as in the notebook


def _in_fresh_thread(fn, timeout=10.0):
    """fn() in a new thread (grad on, like a server's); its result, or the exception it raised."""
    box = {}

    def run():
        try:
            box["result"] = fn()
        except BaseException as e:  # noqa: BLE001 (handed back to the judge)
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise TimeoutError(f"it did not finish within {timeout:.0f} s")
    if "error" in box:
        raise box["error"]
    return box["result"]


# ----------------------------------------------------------------------------- 07.1: fix the handler


@torch.no_grad()
async def _decorated(x):
    await asyncio.sleep(0)
    return model(x)


async def _held(x):
    with torch.no_grad():
        await asyncio.sleep(0)
        return model(x)


def _sync(x):
    with torch.inference_mode():
        return model(x)


@exercise("07.1", kind="code", wrong=[(_decorated, "creation of the coroutine"), (_held, "await inside"),
                                      (_sync, "async def")])
async def handle_request(x):
    await asyncio.sleep(0)
    with torch.inference_mode():  # around the synchronous model call only: no await inside
        return model(x)


@handle_request.judge
def _(fn):
    if not callable(fn):
        return f"the answer should be an async def function of x, not a {type(fn).__name__}"
    probe = fn(torch.randn(1, 256))
    if inspect.iscoroutine(probe):
        probe.close()
    else:
        return ("that is a plain function: a server awaits its handler, so write `async def` and keep the "
                "`await asyncio.sleep(0)`")

    def two_requests():
        async def both():
            outs = await asyncio.gather(fn(torch.randn(4, 256)), fn(torch.randn(4, 256)))
            return outs, torch.is_grad_enabled()
        return asyncio.run(both())

    outs, grad_after = _in_fresh_thread(two_requests)
    if not all(isinstance(o, torch.Tensor) for o in outs):
        return f"the handler returned a {type(outs[0]).__name__}; return model(x)"
    tracked = [o.requires_grad for o in outs]
    if all(tracked):
        return ("every output is tracked: @torch.no_grad() on an async def covers only the creation of the "
                "coroutine, not its body; put the mode inside the body, around the model call")
    if any(tracked) or not grad_after:
        return ("with two requests at once one output is tracked (or the loop is left with grad off): the "
                "no_grad block has an await inside, so the other request runs in its mode and restores the "
                "wrong one; await first, then enter the mode around model(x) only")
    return None


# ----------------------------------------------------------------------------- 07.2: predict, then run


def _three_requests():
    x = torch.randn(4, 256)

    async def held(start, wait):
        await asyncio.sleep(start)
        with torch.no_grad():
            await asyncio.sleep(wait)
            return model(x).requires_grad

    async def plain(start):
        await asyncio.sleep(start)
        return model(x).requires_grad

    async def run():
        return list(await asyncio.gather(held(0, 0.01), held(0.005, 0.03), plain(0.06)))

    return _in_fresh_thread(lambda: asyncio.run(run()))


@exercise("07.2", kind="predict", wrong=[
    (lambda: [False, False, False], "first request left"),
    (lambda: [False, False, True], "entered with grad already off"),
    (lambda: [True, True, True], "inside its own no_grad block"),
])
def three_requests():
    return [False, True, False]  # A: its own block; B: after A restored "on"; C: the loop left "off" by B


@three_requests.judge
def _(a):
    try:
        a = [bool(v) for v in a]
    except TypeError:
        return f"answer with a list of three booleans, [A, B, C], not a {type(a).__name__}"
    if len(a) != 3:
        return f"answer with three booleans, one per request (A, B, C); got {len(a)}"
    truth = _three_requests()
    if a == truth:
        return None
    if a[0] != truth[0]:
        return ("A's model call runs inside its own no_grad block, before any other request has left "
                "its block: grad is off there")
    if a[2] != truth[2]:
        return ("C runs alone, last, with no block of its own, but B entered with grad already off (A was "
                "waiting) and restored that when it left: the loop's thread stays off, so C's output is "
                "untracked")
    return ("B's model call comes after the first request left its block, and leaving restored the "
            "mode A saw on entry, grad on: B's call runs with grad on, in B's own no_grad block")


# ----------------------------------------------------------------------------- 07.3: the worker's mode


def _plain(x):
    return model(x)


def _switch_off(x):
    torch.set_grad_enabled(False)
    return model(x)


@exercise("07.3", kind="code", wrong=[(_plain, "another thread"), (_switch_off, "left the worker")])
@torch.inference_mode()
def predict_in_worker(x):
    return model(x)


@predict_in_worker.judge
def _(fn):
    if not callable(fn):
        return f"the answer should be a function of x, not a {type(fn).__name__}"

    def run():
        x = torch.randn(4, 256)
        with torch.no_grad(), ThreadPoolExecutor(max_workers=1) as pool:
            out = pool.submit(fn, x).result()
            worker_grad_after = pool.submit(torch.is_grad_enabled).result()
        return x, out, worker_grad_after

    x, out, worker_grad_after = _in_fresh_thread(run)
    if not isinstance(out, torch.Tensor):
        return f"it returned a {type(out).__name__}; return model(x)"
    if out.requires_grad:
        return ("the output is tracked: the worker is another thread, with grad on whatever the caller's "
                "mode; set the mode in the function the worker runs (@torch.inference_mode())")
    if not worker_grad_after:
        return ("it left the worker thread with grad off: torch.set_grad_enabled(False) stays set for the "
                "next task that worker runs; a decorator or a with block restores the mode")
    return None
