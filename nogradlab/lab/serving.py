"""A real (small) inference server, to see what no_grad changes per request.

    from nogradlab import serving
    r = serving.run("keep_outputs", n=20)      # start, send 20 requests, stop
    r.summary(), r.to_frame()

``InferenceServer`` serves one workload (tiny scale by default) with Tornado on 127.0.0.1 (an
ephemeral port), from a background thread with its own event loop; ``stop()`` shuts it down and
joins the thread. ``GET /predict`` runs the model once on a fixed input batch and answers JSON.
The handler comes in ``VARIANTS``:

* ``"grad"``: no no_grad anywhere (the request thread tracks gradients, as every thread does by
  default);
* ``"no_grad"``: the whole handler under ``torch.no_grad()``;
* ``"keep_outputs"``: like ``"grad"``, and the handler appends every output to a list (a cache, a
  log, a metrics buffer...), as buggy servers do: each output keeps its autograd graph alive;
* ``"thread_pool"``: the handler is under ``torch.no_grad()`` but hands the model call to a
  ``ThreadPoolExecutor``. Grad mode is per thread, so the worker still tracks gradients;
* ``"thread_pool_fixed"``: the same, with ``torch.no_grad()`` entered inside the worker;
* ``"keep_outputs_no_grad"``: keeps every output like ``"keep_outputs"``, under ``torch.no_grad()``:
  what it holds is the outputs alone, so beside ``"keep_outputs"`` it gives the graphs' share.

``workers > 1`` runs the handler in a pool of that many threads, so that requests from concurrent
clients (``send_concurrent``, or ``run(..., clients=k)``) are served at the same time; each answer
then also says how many outputs were alive just before its own was dropped (``alive_outputs``,
its own included): the requests in flight together, and what they held (``in_flight_bytes``).

Memory per request is measured with ``nogradlab.memory.measure`` around the model call, in the
thread that runs it (its hooks are per thread): ``peak_bytes``, ``saved_bytes`` (saved for
backward), ``retained_bytes`` (alive when the call returns: the output and its graph). After each
request the handler reports ``held_bytes``: the retained bytes of the earlier outputs that are still
alive (checked with weak references), i.e. what the server keeps between requests.

``send_requests`` is the client: N sequential GETs (N capped at ``MAX_REQUESTS``, a timeout on each,
loopback addresses only), each with its latency. ``send_concurrent`` sends them from several client
threads at once (at most ``MAX_CLIENTS``), bounded in time by a deadline.
"""
from __future__ import annotations

import asyncio
import json
import statistics
import threading
import time
import urllib.parse
import urllib.request
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

import torch

from nogradlab.core import device as _device
from nogradlab.core import memory as _memory
from nogradlab.core import workloads as _workloads

__all__ = ["VARIANTS", "MAX_REQUESTS", "MAX_CLIENTS", "InferenceServer", "ServingResult", "send_requests",
           "send_concurrent", "run", "compare"]

VARIANTS = ("grad", "no_grad", "keep_outputs", "thread_pool", "thread_pool_fixed", "keep_outputs_no_grad")
MAX_REQUESTS = 1000
MAX_CLIENTS = 16
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


class _State:
    """What the handler needs: the model, its input, the worker pool, and what it keeps."""

    def __init__(self, variant, wl, dev, batch, seed):
        self.variant, self.device = variant, dev
        with torch.random.fork_rng(devices=[]):  # seeded, leaving the caller's RNG alone
            torch.manual_seed(seed)
            self.model = wl.build(dev).eval()
            self.x = wl.make_input(batch, dev)
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="model-worker")
        self.kept = []  # keep_outputs: every output, as a buggy server keeps them
        self.outputs = []  # (weakref to each output, its retained bytes)
        self.lock = threading.Lock()
        self.active = 0  # model calls running right now (several under concurrent clients)

    def call(self, no_grad_inside=False):
        """Run the model once in the current thread, measured; returns (report, output, facts),
        facts being the grad mode the model call saw and the thread it ran in."""
        facts = {"thread": threading.current_thread().name}

        def forward():
            if no_grad_inside:
                with torch.no_grad():
                    facts["grad_enabled"] = torch.is_grad_enabled()
                    return self.model(self.x)
            facts["grad_enabled"] = torch.is_grad_enabled()
            return self.model(self.x)

        # measured in the thread that serves the request; other requests' tensors, made meanwhile in
        # their own threads, are theirs (each is measured where it runs)
        report, out = _memory.measure(forward, self.device, return_result=True, other_threads="ignore")
        return report, out, facts

    def _call_variant(self, v):
        if v in ("grad", "keep_outputs"):
            report, out, facts = self.call()
        elif v in ("no_grad", "keep_outputs_no_grad"):
            with torch.no_grad():
                report, out, facts = self.call()
        else:  # the thread pools: no_grad here, in the request thread only
            with torch.no_grad():
                report, out, facts = self.pool.submit(self.call, v == "thread_pool_fixed").result()
        return report, out, facts

    def handle(self) -> dict:
        t0 = time.perf_counter()
        v = self.variant
        with self.lock:
            self.active += 1
            concurrent = self.active
        try:
            report, out, facts = self._call_variant(v)
        finally:
            with self.lock:
                self.active -= 1
        facts["concurrent_calls"] = concurrent
        with self.lock:  # from here until the answer is built, this output is in flight
            self.outputs.append((weakref.ref(out), report.retained_bytes))
            if v.startswith("keep_outputs"):
                self.kept.append(out)
        answer = {"prediction": out.argmax(dim=-1).flatten()[:8].tolist(),
                  "requires_grad": out.requires_grad,
                  "grad_fn": type(out.grad_fn).__name__ if out.grad_fn is not None else None,
                  "peak_bytes": report.peak_bytes, "saved_bytes": report.saved_bytes,
                  "retained_bytes": report.retained_bytes, "memory_method": report.method,
                  **facts}
        with self.lock:
            alive = [n for ref, n in self.outputs if ref() is not None]  # this one and any in flight
            answer["in_flight_bytes"] = sum(alive)
            answer["alive_outputs"] = len(alive)
            del out
            answer["held_bytes"] = sum(n for ref, n in self.outputs if ref() is not None)
            answer["kept_outputs"] = len(self.kept)
        answer["server_s"] = time.perf_counter() - t0
        return answer


def _handler_class():
    import tornado.ioloop
    import tornado.web

    class PredictHandler(tornado.web.RequestHandler):
        def initialize(self, state, executor=None):
            self.state = state
            self.executor = executor

        async def get(self):
            if self.executor is None:
                answer = self.state.handle()
            else:  # concurrent requests are served at the same time, one per worker thread
                answer = await tornado.ioloop.IOLoop.current().run_in_executor(self.executor, self.state.handle)
            self.set_header("Content-Type", "application/json")
            self.write(json.dumps(answer))

    return PredictHandler


class _ThreadedServer:
    """A Tornado application on 127.0.0.1 (a free port) served from a background thread with its own
    asyncio event loop; a context manager (start/stop). Subclasses give ``_application()`` and may
    use ``_before_start()`` / ``_after_stop()``."""

    _thread_name = "tornado"

    def __init__(self):
        self.port = None
        self._thread = None
        self._loop = None
        self._stopping = None
        self._ready = threading.Event()
        self._error = None

    def _application(self):
        raise NotImplementedError

    def _before_start(self):
        pass

    def _after_stop(self):
        pass

    def start(self, timeout: float = 30.0):
        if self._thread is not None:
            raise RuntimeError("server already started; stop() it before starting it again")
        self._ready.clear()  # a server that was stopped starts afresh
        self._error = None
        self._before_start()
        self._thread = threading.Thread(target=self._main, name=self._thread_name, daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout) or self._error is not None:
            self.stop()
            raise RuntimeError(f"the server did not start: {self._error!r}")
        return self

    def _main(self):
        try:
            asyncio.run(self._serve())
        except BaseException as e:  # noqa: BLE001 - reported to start()
            self._error = e
            self._ready.set()

    async def _serve(self):
        import tornado.httpserver
        import tornado.netutil

        app = self._application()
        sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
        server = tornado.httpserver.HTTPServer(app)
        server.add_sockets(sockets)
        self.port = sockets[0].getsockname()[1]
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        self._ready.set()
        try:
            await self._stopping.wait()
        finally:
            server.stop()
            await server.close_all_connections()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop serving and join the thread (then ``_after_stop``); safe to call twice."""
        if self._loop is not None and self._stopping is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise RuntimeError("the server thread did not stop")
            self._thread = None
        self._after_stop()
        self._loop = self._stopping = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False


class InferenceServer(_ThreadedServer):
    """A Tornado server on 127.0.0.1 in a background thread; a context manager (start/stop).

    Each measured request makes two full garbage collections (``memory.measure``); inside
    ``nogradlab.core.session.frozen_gc()`` (as ``run`` does) they only walk what the requests create."""

    def __init__(self, variant: str = "no_grad", workload: str = "mlp", scale: str = "tiny",
                 device="cpu", batch: "int | None" = None, seed: int = 0, workers: int = 1):
        if variant not in VARIANTS:
            raise ValueError(f"unknown variant {variant!r}; allowed: {', '.join(VARIANTS)}")
        if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_CLIENTS:
            raise ValueError(f"workers must be an integer in [1, {MAX_CLIENTS}], got {workers!r}")
        self.workers = workers
        self._executor = None
        self.wl = _workloads.get(workload, scale)
        self.device = _device.resolve(device)
        self.batch = _workloads.check_batch(batch if batch is not None else self.wl.default_batch)
        self.variant, self.seed = variant, seed
        self.state = None
        self._thread_name = f"tornado-{variant}"
        super().__init__()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/predict"

    def _before_start(self):
        self.state = _State(self.variant, self.wl, self.device, self.batch, self.seed)

    def _application(self):
        import tornado.web

        if self.workers > 1:
            self._executor = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="request-worker")
        return tornado.web.Application([(r"/predict", _handler_class(),
                                         {"state": self.state, "executor": self._executor})])

    def _after_stop(self):
        """Shut the model's pool and the worker pool down."""
        if self.state is not None:
            self.state.pool.shutdown(wait=True)
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None


def send_requests(url: str, n: int, *, timeout: float = 10.0) -> list:
    """Send ``n`` sequential GET requests to ``url`` (loopback only, ``n <= MAX_REQUESTS``); returns
    the answers, each with its client-side ``latency_s`` and ``index``."""
    host = urllib.parse.urlparse(url).hostname
    if host not in _LOOPBACK:
        raise ValueError(f"only loopback addresses are allowed ({', '.join(_LOOPBACK)}), got {host!r}")
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_REQUESTS:
        raise ValueError(f"n must be an integer in [1, {MAX_REQUESTS}], got {n!r}")
    if not timeout > 0:
        raise ValueError(f"timeout must be positive seconds, got {timeout!r}")
    answers = []
    for i in range(n):
        t0 = time.perf_counter()
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            body = json.loads(resp.read())
        body.update(index=i, latency_s=time.perf_counter() - t0)
        answers.append(body)
    return answers


def send_concurrent(url: str, n: int, clients: int, *, timeout: float = 10.0, deadline_s: float = 60.0) -> list:
    """Send ``n`` GET requests to ``url`` from ``clients`` threads at once (loopback only,
    ``n <= MAX_REQUESTS``, ``clients <= MAX_CLIENTS``, a timeout per request and ``deadline_s`` for
    all: requests not started by then are not sent). Returns the answers in the order they were
    sent (``index``), each with its ``latency_s`` and the ``client`` that sent it."""
    host = urllib.parse.urlparse(url).hostname
    if host not in _LOOPBACK:
        raise ValueError(f"only loopback addresses are allowed ({', '.join(_LOOPBACK)}), got {host!r}")
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_REQUESTS:
        raise ValueError(f"n must be an integer in [1, {MAX_REQUESTS}], got {n!r}")
    if isinstance(clients, bool) or not isinstance(clients, int) or not 1 <= clients <= MAX_CLIENTS:
        raise ValueError(f"clients must be an integer in [1, {MAX_CLIENTS}], got {clients!r}")
    if not timeout > 0 or not deadline_s > 0:
        raise ValueError(f"timeout and deadline_s must be positive seconds, got {timeout!r}, {deadline_s!r}")
    lock = threading.Lock()
    counter = iter(range(n))
    answers = []
    end = time.perf_counter() + deadline_s

    def client(c):
        while time.perf_counter() < end:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            t0 = time.perf_counter()
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                body = json.loads(resp.read())
            body.update(index=i, client=c, latency_s=time.perf_counter() - t0)
            with lock:
                answers.append(body)

    with ThreadPoolExecutor(max_workers=clients, thread_name_prefix="client") as pool:
        for f in [pool.submit(client, c) for c in range(clients)]:
            f.result()
    return sorted(answers, key=lambda a: a["index"])


@dataclass
class ServingResult:
    """Per-request facts of one variant (``requests``: the answers, in order)."""

    variant: str
    workload: str
    scale: str
    batch: int
    device: str
    requests: list
    memory_method: str = ""
    clients: int = 1
    seconds: float = 0.0
    notes: list = field(default_factory=list)

    def summary(self) -> dict:
        r = self.requests
        n = len(r)
        return {
            "variant": self.variant, "requests": n,
            "saved_bytes_per_request": statistics.median(x["saved_bytes"] for x in r),
            "peak_bytes_per_request": statistics.median(x["peak_bytes"] for x in r),
            "retained_bytes_per_request": statistics.median(x["retained_bytes"] for x in r),
            "held_bytes_after_last": r[-1]["held_bytes"],
            "held_growth_per_request": (r[-1]["held_bytes"] - r[0]["held_bytes"]) / max(n - 1, 1),
            "outputs_requiring_grad": sum(x["requires_grad"] for x in r),
            "model_threads": sorted({x["thread"] for x in r}),
            "clients": self.clients,
            "max_alive_outputs": max(x.get("alive_outputs", 0) for x in r),
            "max_concurrent_calls": max(x.get("concurrent_calls", 1) for x in r),
            "max_in_flight_bytes": max(x.get("in_flight_bytes", 0) for x in r),
            "median_latency_s": statistics.median(x["latency_s"] for x in r),
        }

    def to_dict(self) -> dict:
        d = asdict(self)
        d["summary"] = self.summary()
        return d

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame(self.requests)


def run(variant: str, n: int = 20, *, workload: str = "mlp", scale: str = "tiny", device="cpu",
        batch: "int | None" = None, timeout: float = 10.0, seed: int = 0, clients: int = 1,
        deadline_s: float = 60.0) -> ServingResult:
    """Start a server in ``variant``, send ``n`` requests (from ``clients`` concurrent clients,
    served by as many worker threads), stop it; the per-request facts."""
    from nogradlab.core.session import frozen_gc

    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_REQUESTS:
        raise ValueError(f"n must be an integer in [1, {MAX_REQUESTS}], got {n!r}")
    if isinstance(clients, bool) or not isinstance(clients, int) or not 1 <= clients <= MAX_CLIENTS:
        raise ValueError(f"clients must be an integer in [1, {MAX_CLIENTS}], got {clients!r}")
    t0 = time.perf_counter()
    # frozen: the two full collections per measured call only walk what the requests create
    with frozen_gc(), InferenceServer(variant, workload, scale, device, batch, seed, workers=clients) as srv:
        if clients == 1:
            answers = send_requests(srv.url, n, timeout=timeout)
        else:
            answers = send_concurrent(srv.url, n, clients, timeout=timeout, deadline_s=deadline_s)
    return ServingResult(variant=variant, workload=srv.wl.name, scale=scale, batch=srv.batch,
                         device=str(srv.device), requests=answers,
                         memory_method=answers[0]["memory_method"],
                         seconds=round(time.perf_counter() - t0, 3), clients=clients)


def compare(variants=VARIANTS, n: int = 10, **kwargs) -> dict:
    """``{variant: ServingResult}`` for several variants (validated before any server starts)."""
    variants = list(variants)
    for v in variants:
        if v not in VARIANTS:
            raise ValueError(f"unknown variant {v!r}; allowed: {', '.join(VARIANTS)}")
    return {v: run(v, n, **kwargs) for v in variants}


# --------------------------------------------------------------------------------------------
# Serving handlers that the caller writes (notebook 07: async handlers and grad mode)
#
#     class Predict(tornado.web.RequestHandler):
#         async def get(self):
#             ...
#     with serving.LoopbackServer([("/predict", Predict)]) as srv:
#         answers = serving.fetch_concurrently([srv.url("/predict")] * 8, clients=4)
#
# ``LoopbackServer`` runs any Tornado routes on 127.0.0.1 (ephemeral port) from a background thread
# with its own event loop, so that the lesson's handler code stays in the notebook. Every request
# handler of that server runs in that one thread, as in a real single-process Tornado or FastAPI
# server: grad mode, being per thread, is shared by all the coroutines the loop interleaves.
# ``fetch_concurrently`` is a bounded client: each URL fetched once, by at most ``MAX_FETCH_CLIENTS``
# threads, each request with a timeout, loopback addresses only.

MAX_FETCH_CLIENTS = 16
MAX_DELAY_S = 60.0


def _check_loopback(url: str) -> None:
    host = urllib.parse.urlparse(url).hostname
    if host not in _LOOPBACK:
        raise ValueError(f"only loopback addresses are allowed ({', '.join(_LOOPBACK)}), got {host!r} in {url!r}")


class LoopbackServer(_ThreadedServer):
    """Serve Tornado ``routes`` (``[(pattern, RequestHandler subclass[, kwargs]), ...]``) on
    127.0.0.1 from a background thread with its own asyncio event loop; a context manager.

    ``url(path)`` gives a request URL; ``loop_grad_enabled()`` asks the loop's thread for
    ``torch.is_grad_enabled()`` now (what the next request handler on that loop will start with);
    ``stop()`` shuts the server down and joins the thread (the thread's grad mode goes with it)."""

    def __init__(self, routes):
        import tornado.web

        routes = list(routes) if isinstance(routes, (list, tuple)) else routes
        if not isinstance(routes, list) or not routes:
            raise ValueError("routes must be a non-empty list of (pattern, RequestHandler subclass[, kwargs]) "
                             f"tuples, got {routes!r}")
        for r in routes:
            ok = (isinstance(r, tuple) and len(r) in (2, 3) and isinstance(r[0], str)
                  and isinstance(r[1], type) and issubclass(r[1], tornado.web.RequestHandler)
                  and (len(r) == 2 or isinstance(r[2], dict)))
            if not ok:
                raise ValueError("each route must be (pattern: str, RequestHandler subclass[, kwargs: dict]), "
                                 f"got {r!r}")
        self.routes = routes
        self._thread_name = "tornado-loopback"
        super().__init__()

    def _application(self):
        import tornado.web

        return tornado.web.Application(self.routes)

    def url(self, path: str = "/") -> str:
        if self.port is None:
            raise RuntimeError("the server is not started")
        if not path.startswith("/"):
            raise ValueError(f"path must start with '/', got {path!r}")
        return f"http://127.0.0.1:{self.port}{path}"

    def loop_grad_enabled(self, timeout: float = 10.0) -> bool:
        """``torch.is_grad_enabled()`` in the event loop's thread, between requests."""
        if not self.running or self._loop is None:
            raise RuntimeError("the server is not running")

        async def ask():
            return torch.is_grad_enabled()
        return asyncio.run_coroutine_threadsafe(ask(), self._loop).result(timeout)


def fetch_concurrently(urls, *, clients: int = 4, timeout: float = 10.0, delays=None) -> list:
    """GET each of ``urls`` once, from up to ``clients`` threads at the same time; returns the JSON
    answers in the order of ``urls``, each with ``index``, ``path``, ``sent_s`` (when it was sent,
    seconds after the first) and ``latency_s``.

    ``delays`` (optional, one per URL, each in [0, MAX_DELAY_S]): wait that long after the start
    before sending that request, to make requests overlap in a known order. Bounded: at most
    ``MAX_REQUESTS`` URLs and ``MAX_FETCH_CLIENTS`` clients, a timeout on each request, loopback only.
    Raises ``RuntimeError`` naming the failed requests once all have finished."""
    urls = list(urls)
    if not 1 <= len(urls) <= MAX_REQUESTS:
        raise ValueError(f"urls must hold 1 to {MAX_REQUESTS} URLs, got {len(urls)}")
    for u in urls:
        if not isinstance(u, str):
            raise ValueError(f"each URL must be a string, got {u!r}")
        _check_loopback(u)
    if isinstance(clients, bool) or not isinstance(clients, int) or not 1 <= clients <= MAX_FETCH_CLIENTS:
        raise ValueError(f"clients must be an integer in [1, {MAX_FETCH_CLIENTS}], got {clients!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be positive seconds, got {timeout!r}")
    if delays is None:
        delays = [0.0] * len(urls)
    delays = list(delays)
    if len(delays) != len(urls):
        raise ValueError(f"delays must have one value per URL ({len(urls)}), got {len(delays)}")
    for d in delays:
        if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0 <= d <= MAX_DELAY_S:
            raise ValueError(f"each delay must be seconds in [0, {MAX_DELAY_S}], got {d!r}")

    t0 = time.perf_counter()

    def fetch(i):
        wait = delays[i] - (time.perf_counter() - t0)
        if wait > 0:
            time.sleep(wait)
        sent = time.perf_counter()
        try:
            with urllib.request.urlopen(urls[i], timeout=timeout) as resp:
                body = json.loads(resp.read())
        except Exception as e:  # noqa: BLE001 - collected and raised below
            return {"index": i, "error": f"{type(e).__name__}: {e}"}
        if not isinstance(body, dict):
            body = {"answer": body}
        body.update(index=i, path=urllib.parse.urlparse(urls[i]).path, sent_s=round(sent - t0, 4),
                    latency_s=time.perf_counter() - sent)
        return body

    # requests are started in the order of their delays, so a pool smaller than the number of
    # URLs still sends the early ones first
    order = sorted(range(len(urls)), key=lambda i: delays[i])
    with ThreadPoolExecutor(max_workers=min(clients, len(urls)), thread_name_prefix="client") as ex:
        futures = {i: ex.submit(fetch, i) for i in order}
        answers = [futures[i].result() for i in range(len(urls))]
    failed = [a for a in answers if "error" in a]
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(answers)} requests failed: "
                           + "; ".join(f"#{a['index']} {urls[a['index']]}: {a['error']}" for a in failed[:5]))
    return answers

__all__ += ["MAX_FETCH_CLIENTS", "LoopbackServer", "fetch_concurrently"]
