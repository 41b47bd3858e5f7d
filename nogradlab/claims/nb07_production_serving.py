"""Notebook 07, production serving: the declarations and checks of C25, C26, X02.

Each claim is declared once here (``declare``) beside its check (``@C.measures``) and its judge
(``@C.judges``); see ``nogradlab/claims/README.md``.
"""
from __future__ import annotations

import concurrent.futures

import torch

from nogradlab.core import memory
from nogradlab.lab import serving
from nogradlab.core import workloads
from nogradlab.claims.ledger import declare
from nogradlab.claims.result import Judgement
from nogradlab.claims.probes import _in_new_thread, _tracking, _workload
from nogradlab.claims.rules import Rule
from nogradlab.claims.searches import _quick

NOTEBOOK = "07_production_serving"


C26 = declare(
    "C26", section='7', kind='semantic', notebook=NOTEBOOK,
    paraphrase='apply no_grad at the highest level, e.g. around the whole request handler',
    figure=None,
    rule=Rule("Holds when no_grad around the handler also covers worker threads; depends when it "
                "covers only the handler's own thread (workers must enter it themselves); does not hold "
                "when the handler's own call is tracked."))


@C26.measures
def c26(ctx):
    """no_grad around the whole handler covers its own thread only: a handler that hands the model
    call to a thread pool gets a tracked output unless the worker sets the mode itself."""
    wl, model, x = _workload(ctx)

    def model_call(t):
        return torch.is_grad_enabled(), model(t)

    def in_worker_no_grad(t):
        with torch.no_grad():
            return model_call(t)

    results = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        handlers = {
            "handler wrapped in no_grad, model called inline": lambda t: model_call(t),
            "handler wrapped in no_grad, model call submitted to a thread pool":
                lambda t: pool.submit(model_call, t).result(),
            "handler wrapped in no_grad, worker enters no_grad itself":
                lambda t: pool.submit(in_worker_no_grad, t).result(),
        }
        for name, handler in handlers.items():
            with torch.no_grad():
                grad_in_model_call, out = handler(x)
            results[name] = {"grad_enabled_where_model_ran": grad_in_model_call, **_tracking(out)}
    return {"workload": wl.name, "handlers": results}


_C26_HANDLERS = ("handler wrapped in no_grad, model called inline",
                 "handler wrapped in no_grad, model call submitted to a thread pool",
                 "handler wrapped in no_grad, worker enters no_grad itself")


@C26.judges
def judge_c26(m, rule):
    h = m["handlers"]
    inline, pooled, fixed = (h[k]["requires_grad"] for k in _C26_HANDLERS)
    summary = (f"With no_grad around the handler the output was tracked: inline {inline}, in a pool worker "
               f"{pooled}, in a worker that enters no_grad itself {fixed}.")
    if inline:
        return Judgement("does not hold", summary)
    if pooled:  # the handler's own thread only, whatever the worker that enters no_grad itself shows
        return Judgement("depends", summary + (" Highest level works per thread: set the mode inside the worker."
                                               if not fixed else " Even a worker entering no_grad itself was tracked."))
    return Judgement("holds", summary)


X02 = declare(
    "X02", section='beyond', kind='semantic', notebook=NOTEBOOK,
    paraphrase='grad mode is thread-local: thread pools and worker threads do not inherit it',
    figure=None,
    rule=Rule("Holds when a thread or pool worker started under no_grad runs with grad enabled "
                "(grad mode is thread-local); otherwise does not hold."))


@X02.measures
def x02(ctx):
    """Grad mode is thread-local: a thread started inside no_grad computes with grad on, and a
    thread switching grad off does not affect the main thread."""
    x = torch.randn(3, device=ctx.device, requires_grad=True)
    with torch.no_grad():
        child = _in_new_thread(lambda: {"grad_enabled": torch.is_grad_enabled(), "op": _tracking(x * 2)})
        main_inside = torch.is_grad_enabled()

    def switch_off():
        torch.set_grad_enabled(False)
        return torch.is_grad_enabled()

    child_off = _in_new_thread(switch_off)
    main_after = torch.is_grad_enabled()
    return {"main_thread_inside_no_grad": main_inside, "thread_started_inside_no_grad": child,
            "thread_that_set_grad_off": child_off, "main_thread_after_that": main_after}


@X02.judges
def judge_x02(m, rule):
    child, main_inside, main_after = (m["thread_started_inside_no_grad"], m["main_thread_inside_no_grad"],
                                      m["main_thread_after_that"])
    ok = child["grad_enabled"] and child["op"]["requires_grad"] and not main_inside and main_after
    summary = (f"A thread started inside no_grad had grad enabled ({child['grad_enabled']}) and tracked x * 2 "
               f"(grad_fn {child['op']['grad_fn']}); a thread calling set_grad_enabled(False) left the main "
               f"thread's mode {'on' if main_after else 'OFF'} ({main_after}).")
    return Judgement("holds" if ok else "does not hold", summary)


C25 = declare(
    "C25", section='7', kind='unsourced statistic, testable mechanism', notebook=NOTEBOOK,
    paraphrase='87 % of serving projects wrap endpoints in no_grad; those without are 2.1x likelier to hit memory limits',
    figure='87 % / 2.1x',
    rule=Rule("Not testable: '87 %' and '2.1x' are unsourced survey figures; the mechanism (memory "
              "kept per request with and without no_grad, under several concurrent clients and when "
              "outputs are kept) is measured on a loopback server. No measured quantity is of the figures' "
              "kind (a share of projects, a likelihood of hitting a limit), so no proxy is read against them."))


@C25.measures
def c25(ctx):
    """The survey figures (87 % / 2.1x) have no source: not testable. The mechanism is tested on a
    real Tornado server on 127.0.0.1: memory per request without no_grad, with no_grad, when the
    handler keeps its outputs (with grad and under no_grad: the difference is the graphs' share),
    and "under load": several concurrent clients (bounded in count and time) served by as many
    worker threads, grad vs no_grad.

    Knobs: ``requests`` per variant (8 on a quick CPU run, else 25; under load as many, spread
    over the clients, at least two each), ``clients`` (4; at most ``serving.MAX_CLIENTS``),
    ``workload`` ("mlp"), ``batch``, ``deadline_s`` (60).
    """
    n = int(ctx.params.get("requests", 8 if _quick(ctx) else 25))
    k = int(ctx.params.get("clients", 4))
    deadline = float(ctx.params.get("deadline_s", 60))
    name = ctx.params.get("workload", "mlp")
    workloads.get(name, ctx.scale)
    if not 1 <= k <= serving.MAX_CLIENTS:
        raise ValueError(f"clients must be in [1, {serving.MAX_CLIENTS}], got {k}")
    variants = ("grad", "no_grad", "keep_outputs", "keep_outputs_no_grad")
    res = serving.compare(variants, n=n, workload=name, scale=ctx.scale, device=ctx.device,
                          batch=ctx.params.get("batch"))
    load = {v: serving.run(v, max(n, 2 * k), workload=name, scale=ctx.scale, device=ctx.device,
                           batch=ctx.params.get("batch"), clients=k, deadline_s=deadline)
            for v in ("grad", "no_grad")}
    s = {v: r.summary() for v, r in res.items()}
    sl = {v: r.summary() for v, r in load.items()}
    grow_g = s["keep_outputs"]["held_growth_per_request"]
    grow_ng = s["keep_outputs_no_grad"]["held_growth_per_request"]
    graph_share = 1 - grow_ng / grow_g if grow_g else None
    series = {v: {"request": [a["index"] for a in r.requests],
                  "held_bytes": [a["held_bytes"] for a in r.requests],
                  "saved_bytes": [a["saved_bytes"] for a in r.requests],
                  "peak_bytes": [a["peak_bytes"] for a in r.requests],
                  "latency_s": [a["latency_s"] for a in r.requests]} for v, r in res.items()}
    return {"statistic": {"figures": "87 % / 2.1x", "testable": False,
                              "why": "survey with no named source, sample or method"},
                "memory_method": res["grad"].memory_method + " (memory.measure around the model "
                                 "call, in the thread that runs it)",
                "summaries": s, "series": series, "workload": name, "scale": ctx.scale,
                "batch": res["grad"].batch, "requests": n,
                "under_load": {"clients": k, "deadline_s": deadline, "summaries": sl,
                               "alive_outputs": {v: [a["alive_outputs"] for a in r.requests] for v, r in load.items()},
                               "concurrent_calls": {v: [a["concurrent_calls"] for a in r.requests]
                                                    for v, r in load.items()},
                               "in_flight_bytes": {v: [a["in_flight_bytes"] for a in r.requests] for v, r in load.items()}},
                "graph_share_of_kept_growth": graph_share,
                "definitions": {"graph_share_of_kept_growth": "1 - growth per request(keep_outputs under no_grad) / "
                                                             "growth per request(keep_outputs with grad)",
                                "max_in_flight_bytes": "the largest sum, at any answer, of the bytes retained by "
                                                       "outputs alive at that moment (its own and those of "
                                                       "requests in flight beside it)"}}


def _outputs(n) -> str:
    """``'1 output'``, ``'2 outputs'``."""
    return f"{n} output{'' if n == 1 else 's'}"


@C25.judges
def judge_c25(m, rule):
    s, fmt = m["summaries"], memory.format_bytes
    name, n = m["workload"], m.get("requests")
    grow_g = s["keep_outputs"]["held_growth_per_request"]
    grow_ng = (s.get("keep_outputs_no_grad") or {}).get("held_growth_per_request")  # older columns lack it
    graph_share = m.get("graph_share_of_kept_growth")
    summary = (
        "Not testable: the 87 % share and the 2.1x risk come from an unnamed survey, and nothing measured here "
        "is of their kind (a share of projects, a likelihood), so no proxy is read against them. The mechanism, "
        f"measured on a Tornado server on 127.0.0.1 ({name}, {m.label}): one request at a time, "
        f"without no_grad autograd keeps references to {fmt(s['grad']['saved_bytes_per_request'])} per request for a "
        "backward that never comes (activations, and the input batch where the first layer saves it, alive during "
        f"the call either way; freed after the response), with no_grad {fmt(s['no_grad']['saved_bytes_per_request'])}. ")
    load = m.get("under_load")
    if load:
        sl, k = load["summaries"], load["clients"]
        n_load = len((load.get("alive_outputs") or {}).get("grad", []))
        summary += (
            f"Under load ({k} concurrent clients, {n_load} requests, {k} worker threads): up to "
            f"{sl['grad']['max_concurrent_calls']} model calls ran at once without no_grad, each keeping references to "
            f"{fmt(sl['grad']['saved_bytes_per_request'])} for backward while it ran (the input batch among them) "
            f"({fmt(sl['no_grad']['saved_bytes_per_request'])} with no_grad, {sl['no_grad']['max_concurrent_calls']} at once); at most "
            f"{_outputs(sl['grad']['max_alive_outputs'])} alive at once, holding up to "
            f"{fmt(sl['grad']['max_in_flight_bytes'])} without no_grad (each output drags its graph), against "
            f"{_outputs(sl['no_grad']['max_alive_outputs'])} holding {fmt(sl['no_grad']['max_in_flight_bytes'])} in all "
            "with it. ")
    summary += (
        f"A handler that keeps its outputs grows by {fmt(grow_g)} per request with grad"
        + (f" and {fmt(grow_ng)} under no_grad" if grow_ng is not None else "") + (f" over {n} requests" if n else "")
        + (f": the graphs are {graph_share:.0%} of that growth, the outputs the rest" if graph_share is not None else "")
        + ". Kept outputs, not the missing no_grad alone, grow until memory runs out; no_grad shrinks what "
        "each kept output drags along.")
    return Judgement("not testable", summary, "The survey figures have no source to test; the mechanism, memory "
                                              "kept per request, is measured.")

