"""Async request handlers on a real Tornado server (``serving.LoopbackServer``) and the bounded
concurrent client (``serving.fetch_concurrently``): what notebook 07 teaches about grad mode in
``async def`` handlers. Loopback only, a few requests, every server stops by itself."""
import asyncio
import threading
import urllib.request

import pytest
import torch
import tornado.web

from nogradlab import serving

W = torch.randn(4, 3, requires_grad=True)
X = torch.randn(2, 4)
HOLD_S = 0.6  # how long a handler awaits inside its block; the probes arrive well inside it


def _facts(out, grad_at_call):
    return {"grad_at_model_call": grad_at_call, "requires_grad": out.requires_grad,
            "thread": threading.current_thread().name}


class Decorated(tornado.web.RequestHandler):
    @torch.no_grad()  # returns the coroutine, and leaves no_grad, before the body runs
    async def get(self):
        await asyncio.sleep(0)
        grad = torch.is_grad_enabled()
        self.write(_facts(X @ W, grad))


class HeldAcrossAwait(tornado.web.RequestHandler):
    async def get(self):
        with torch.no_grad():
            await asyncio.sleep(HOLD_S)
            grad = torch.is_grad_enabled()
            out = X @ W
        self.write(_facts(out, grad))


class SyncBlock(tornado.web.RequestHandler):
    async def get(self):
        await asyncio.sleep(HOLD_S)
        with torch.inference_mode():  # no await inside
            grad = torch.is_grad_enabled()
            out = X @ W
        self.write(_facts(out, grad))


class Probe(tornado.web.RequestHandler):
    """A handler that needs grad (e.g. input-gradient saliency)."""

    async def get(self):
        self.write({"grad_enabled": torch.is_grad_enabled()})


def _server_threads():
    return [t for t in threading.enumerate() if t.name == "tornado-loopback"]


def test_start_answer_stop():
    srv = serving.LoopbackServer([("/probe", Probe)])
    with pytest.raises(RuntimeError):
        srv.url("/probe")  # not started
    with srv:
        assert srv.running and srv.url("/probe").startswith("http://127.0.0.1:")
        with urllib.request.urlopen(srv.url("/probe"), timeout=10) as resp:
            assert resp.status == 200
        assert srv.loop_grad_enabled() is True  # a new thread starts with grad on
        url = srv.url("/probe")
    assert not srv.running
    srv.stop()  # twice is fine
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=2)
    assert _server_threads() == []


def test_decorator_on_async_handler_does_not_cover_its_body():
    with serving.LoopbackServer([("/decorated", Decorated)]) as srv:
        answers = serving.fetch_concurrently([srv.url("/decorated")] * 3, clients=3)
    assert [a["grad_at_model_call"] for a in answers] == [True] * 3
    assert [a["requires_grad"] for a in answers] == [True] * 3
    assert {a["thread"] for a in answers} == {"tornado-loopback"}


def test_no_grad_held_across_await_leaks_into_other_coroutines():
    routes = [("/held", HeldAcrossAwait), ("/probe", Probe)]
    with serving.LoopbackServer(routes) as srv:
        assert srv.loop_grad_enabled() is True
        held, probe = srv.url("/held"), srv.url("/probe")
        # two overlapping held requests (A enters, B enters, A leaves, B leaves), probes inside them
        answers = serving.fetch_concurrently([held, held, probe], clients=3, delays=[0, 0.1, 0.3])
        after = srv.loop_grad_enabled()
        late_probe = serving.fetch_concurrently([probe])[0]
    a, b, p = answers
    assert p["grad_enabled"] is False  # another coroutine ran with grad off
    assert a["grad_at_model_call"] is False
    # B entered with grad already off and left last: it "restored" off, for good
    assert after is False and late_probe["grad_enabled"] is False
    # A left first and restored grad on while B was still inside its own no_grad block
    assert b["grad_at_model_call"] is True and b["requires_grad"] is True


def test_mode_around_the_synchronous_call_only_leaves_other_coroutines_alone():
    routes = [("/sync", SyncBlock), ("/probe", Probe)]
    with serving.LoopbackServer(routes) as srv:
        sync, probe = srv.url("/sync"), srv.url("/probe")
        answers = serving.fetch_concurrently([sync, sync, probe], clients=3, delays=[0, 0.1, 0.3])
        assert srv.loop_grad_enabled() is True
    assert [x["requires_grad"] for x in answers[:2]] == [False, False]
    assert [x["grad_at_model_call"] for x in answers[:2]] == [False, False]
    assert answers[2]["grad_enabled"] is True


def test_fetch_concurrently_overlaps_and_keeps_order():
    with serving.LoopbackServer([("/sync", SyncBlock)]) as srv:
        answers = serving.fetch_concurrently([srv.url("/sync")] * 3, clients=3)
    assert [a["index"] for a in answers] == [0, 1, 2]
    assert all(a["path"] == "/sync" for a in answers)
    # concurrent: all three waited HOLD_S at the same time, not one after the other
    first_done = min(a["sent_s"] + a["latency_s"] for a in answers)
    assert max(a["sent_s"] for a in answers) < first_done


@pytest.mark.parametrize("kwargs, match", [
    ({"urls": ["http://example.com/x"]}, "loopback"),
    ({"urls": []}, "1 to"),
    ({"urls": ["http://127.0.0.1:1/x"], "clients": 0}, "clients"),
    ({"urls": ["http://127.0.0.1:1/x"], "clients": serving.MAX_FETCH_CLIENTS + 1}, "clients"),
    ({"urls": ["http://127.0.0.1:1/x"], "timeout": 0}, "timeout"),
    ({"urls": ["http://127.0.0.1:1/x"], "delays": [0, 1]}, "one value per URL"),
    ({"urls": ["http://127.0.0.1:1/x"], "delays": [-1]}, "delay"),
])
def test_fetch_concurrently_rejects_bad_input(kwargs, match):
    urls = kwargs.pop("urls")
    with pytest.raises(ValueError, match=match):
        serving.fetch_concurrently(urls, **kwargs)


def test_failed_requests_raise_after_all_finished():
    with serving.LoopbackServer([("/probe", Probe)]) as srv:
        with pytest.raises(RuntimeError, match="1 of 2 requests failed"):
            serving.fetch_concurrently([srv.url("/probe"), srv.url("/missing")], clients=2, timeout=5)


@pytest.mark.parametrize("routes", [[], [("/x", object)], [("/x",)], "nope", [("/x", Probe, 3)]])
def test_server_rejects_bad_routes(routes):
    with pytest.raises(ValueError, match="route"):
        serving.LoopbackServer(routes)
