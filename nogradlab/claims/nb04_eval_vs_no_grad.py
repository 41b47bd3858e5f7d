"""Notebook 04, eval vs no grad: the declarations and checks of C14, C15, C16, C17.

Each claim is declared once here (``declare``) beside its check (``@C.measures``) and its judge
(``@C.judges``); see ``nogradlab/claims/README.md``.
"""
from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn as nn

from nogradlab.core import memory
from nogradlab.core import modes
from nogradlab.core import workloads
from nogradlab.lab import plots
from nogradlab.claims.ledger import declare
from nogradlab.claims.result import Judgement, format_saved, number
from nogradlab.claims import evidence as _ev
from nogradlab.claims.measure import _build, _pct, _samples_note, _speed_batch, forward_condition
from nogradlab.claims.probes import _OpRecorder, _max_abs_diff, _tracking
from nogradlab.claims.rules import Band, MIN_BOOTSTRAP_ROUNDS, Rule, SELF_CONTRADICTION, TIE, OLD_PROTOCOL_WIDENING, direction_text, proxy_text, read_conditions, readings_text, widened_text, widening
from nogradlab.claims.searches import _quick

_ABOUT = "'about X %' is read as X +- 5 percentage points"

NOTEBOOK = "04_eval_vs_no_grad"


def _bn_dropout_net(device) -> nn.Module:
    """A small classifier with BatchNorm and Dropout: the two layers train/eval changes."""
    return nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.5),
                         nn.Linear(32, 4)).to(device)


C14 = declare(
    "C14", section='3/4', kind='semantic', notebook=NOTEBOOK,
    chart_rank=4,
    key_chart=("C14: eval() and no_grad are independent",
               "eval changes the outputs; no_grad changes only what is tracked and saved."),
    paraphrase='model.eval() and no_grad are independent of each other',
    figure=None,
    rule=Rule("Holds when eval() changes outputs without touching grad mode and no_grad changes "
                "tracking without touching dropout/BatchNorm behaviour (a 2x2 grid); otherwise does not hold."))


@C14.measures
def c14(ctx):
    """2x2 grid train/eval x grad/no_grad on a model with Dropout and BatchNorm: eval changes the
    outputs; no_grad changes only tracking and memory. ``evidence['grid']`` is one dict per cell."""
    dev = ctx.device
    model = _bn_dropout_net(dev)
    x = torch.randn(8, 16, device=dev)
    state = copy.deepcopy(model.state_dict())
    bn = model[1]
    outs, grid = {}, []
    fork_devices = [dev] if dev.type == "cuda" else []
    with torch.random.fork_rng(devices=fork_devices):
        for model_mode in ("train", "eval"):
            for grad_mode in ("grad", "no_grad"):
                model.load_state_dict(state)
                spec = f"{model_mode}+{grad_mode}"

                def fn(spec=spec):
                    torch.manual_seed(ctx.seed + 1)  # the same dropout mask in both grad modes
                    with modes.setting(spec, model=model, device=dev):
                        return model(x)

                rep, out = memory.measure(fn, dev, return_result=True, label=spec)
                outs[(model_mode, grad_mode)] = out
                grid.append({"model_mode": model_mode, "grad_mode": grad_mode, **_tracking(out),
                             "checksum": float(out.detach().double().sum()),
                             "saved_bytes": rep.saved_bytes, "peak_bytes": rep.peak_bytes,
                             "retained_bytes": rep.retained_bytes,
                             "bn_running_stats_updated": not torch.equal(bn.running_mean,
                                                                         state["1.running_mean"])})
    model.load_state_dict(state)
    ref = outs[("eval", "grad")]
    for cell in grid:
        key = (cell["model_mode"], cell["grad_mode"])
        cell["max_abs_diff_vs_eval_grad"] = _max_abs_diff(outs[key], ref)
        cell["max_abs_diff_vs_same_model_mode_grad"] = _max_abs_diff(outs[key], outs[(key[0], "grad")])
    return {"model": "Linear(16,32)-BatchNorm1d-ReLU-Dropout(0.5)-Linear(32,4)", "batch": 8, "grid": grid}


@C14.judges
def judge_c14(m, rule):
    grid = m["grid"]
    by = {(c["model_mode"], c["grad_mode"]): c for c in grid}
    no_grad_output_same = all(number(c["max_abs_diff_vs_same_model_mode_grad"]) == 0 for c in grid)
    eval_changes = by[("train", "grad")]["max_abs_diff_vs_eval_grad"] > 0
    tracking_ok = all(c["requires_grad"] == (c["grad_mode"] == "grad") for c in grid)
    memory_ok = all((number(c["saved_bytes"]) > 0) == (c["grad_mode"] == "grad") for c in grid)
    t_g, t_ng, e_g, e_ng = (by[k] for k in (("train", "grad"), ("train", "no_grad"),
                                             ("eval", "grad"), ("eval", "no_grad")))
    summary = (f"eval vs train changed the outputs (max diff {t_g['max_abs_diff_vs_eval_grad']:.3g}); "
               f"no_grad vs grad left them {'bitwise equal' if no_grad_output_same else 'DIFFERENT'} in both "
               f"model modes and {'only changed' if tracking_ok and memory_ok else 'did NOT cleanly change'} "
               f"tracking and memory: saved for backward "
               f"{e_g['saved_bytes']} B -> {e_ng['saved_bytes']} B (eval), {t_g['saved_bytes']} B -> "
               f"{t_ng['saved_bytes']} B (train). In train mode BatchNorm updated its running stats even "
               f"under no_grad: {t_ng['bn_running_stats_updated']}.")
    ok = no_grad_output_same and eval_changes and tracking_ok and memory_ok
    return Judgement("holds" if ok else "does not hold", summary)


C15 = declare(
    "C15", case_quantity=("largest difference, no_grad against without", None),
    section='4', kind='semantic', notebook=NOTEBOOK,
    paraphrase="no_grad never changes a model's predictions",
    figure=None,
    rule=Rule("Holds when eval-mode outputs with and without no_grad agree within 1e-5 relative to the "
                "output's scale and predicted classes match (bitwise equality reported beside it); does "
                "not hold beyond that tolerance.", tolerance=1e-5))


@C15.measures
def c15(ctx):
    """Outputs with and without no_grad, eval mode: conv nets (resnet50, unet) and the
    transformer encoder, whose eval fast path is only taken when grad is off."""
    wls = [workloads.get(n, ctx.scale) for n in ctx.params.get("workloads", ("resnet50", "unet",
                                                                                 "transformer_base"))]
    rows = []
    for wl in wls:
        name = wl.name
        model = wl.build(ctx.device).eval()
        x = wl.make_input(wl.default_batch, ctx.device)
        out_g = model(x).detach()
        with torch.no_grad():
            out_ng = model(x)
        row = {"workload": name, "batch": wl.default_batch, "bitwise_equal": torch.equal(out_g, out_ng),
               "max_abs_diff": _max_abs_diff(out_g, out_ng),
               "max_abs_output": float(out_g.abs().max())}
        if out_g.dim() == 2:  # classifier logits: do the predicted classes agree?
            row["same_argmax"] = bool(torch.equal(out_g.argmax(1), out_ng.argmax(1)))
        if not row["bitwise_equal"]:
            # control: is grad mode itself deterministic? and which operators differ?
            row["grad_vs_grad_bitwise_equal"] = torch.equal(out_g, model(x).detach())
            ops = {}
            for mode in ("grad", "no_grad"):
                with _OpRecorder() as rec, modes.get(mode)():
                    model(x)
                ops[mode] = {n for n, _ in rec.ops}
            row["ops_only_under_no_grad"] = sorted(ops["no_grad"] - ops["grad"])
            row["ops_only_with_grad"] = sorted(ops["grad"] - ops["no_grad"])
        rows.append(row)
        del model
    return {"device": str(ctx.device), "scale": ctx.scale, "models": rows}


@C15.judges
def judge_c15(m, rule):
    rows, tol = m["models"], rule.tolerance
    conds = []
    for r in rows:
        allowed = tol * max(1.0, r["max_abs_output"])
        conds.append({"condition": r["workload"], "value": r["max_abs_diff"], "ci": None,
                      "tolerance": allowed, "within_tolerance": r["max_abs_diff"] <= allowed,
                      "same_argmax": r.get("same_argmax"),
                      "reading": "agrees" if r["max_abs_diff"] <= allowed and r.get("same_argmax", True)
                      else "disagrees", "estimated": False})
        conds[-1]["side"] = "above" if conds[-1]["reading"] == "disagrees" else None  # beyond the tolerance
    differ = [r for r in rows if not r["bitwise_equal"]]
    close = all(c["reading"] == "agrees" for c in conds)
    parts = [f"{r['workload']} " + ("bitwise equal" if r["bitwise_equal"] else
                                    f"max difference {r['max_abs_diff']:.2g} (tolerance {c['tolerance']:.2g})")
             for r, c in zip(rows, conds)]
    summary = (f"Eval-mode outputs with grad vs under no_grad on {m['device'].split(':')[0]} (tolerance {tol:g} "
               "x max(1, max |output|): float32 rounding when kernels sum in another order): "
               + "; ".join(parts) + ".")
    for r in differ:
        if r.get("ops_only_under_no_grad"):
            summary += (f" {r['workload']} ran {', '.join(r['ops_only_under_no_grad'])} only under no_grad "
                        "(kernels taken only with grad off), so its floats differ in rounding only.")
    if close:
        summary += (" Predictions are the same up to float rounding" +
                    (f"; bitwise equal in {len(rows) - len(differ)} of {len(rows)}." if differ else
                     ", bitwise equal everywhere."))
        return Judgement("holds", summary, conditions=conds)
    return Judgement("does not hold", summary + " A difference beyond float rounding: no_grad changed the outputs.",
                     conditions=conds)


def _dropout_classifier(device, seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 10)).to(device)


C16 = declare(
    "C16", section='4', kind='unsourced statistic, testable mechanism', notebook=NOTEBOOK,
    tiny_cpu_threads=1,  # its check times or traces models: one thread in a tiny CPU run
    paraphrase='eval() alone cut metric variability by about 7 %',
    figure='~7 %',
    rule=Rule("Not testable: '7 %' comes from an unnamed benchmark; the mechanism (eval() turns dropout off) is "
              "shown, and the share of variability it removes is set only by how much variance dropout caused. "
              "The proxy, the share of the run-to-run spread eval() removes here, is read against 'about 7 %' "
              "and shown first, never deciding: here it is total by construction.",
              band=Band("about", 0.07)))


@C16.measures
def c16(ctx):
    """Accuracy of one fixed model on one fixed data set over repeated runs (a different RNG state
    each run), in train mode (dropout active) and eval mode; also train mode under no_grad with
    the same seeds. Knobs: ``runs``."""
    runs = int(ctx.params.get("runs", 20))
    model = _dropout_classifier(ctx.device, ctx.seed)
    g = torch.Generator().manual_seed(ctx.seed + 1)
    x = torch.randn(512, 32, generator=g).to(ctx.device)
    with torch.no_grad():
        y = model.eval()(x).argmax(1)
    flip = torch.rand(512, generator=g).to(ctx.device) < 0.3
    y = torch.where(flip, torch.randint(0, 10, (512,), generator=g).to(ctx.device), y)

    def accuracies(train: bool, grad_mode):
        model.train(train)
        out = []
        for r in range(runs):
            torch.manual_seed(ctx.seed + 1000 + r)
            with grad_mode():
                out.append(float((model(x).argmax(1) == y).float().mean()))
        return out

    acc = {"train": accuracies(True, torch.enable_grad), "eval": accuracies(False, torch.enable_grad),
           "train+no_grad": accuracies(True, torch.no_grad)}
    model.eval()
    spread = {k: float(np.std(v)) for k, v in acc.items()}
    return {"runs": runs, "accuracy": acc, "std": spread,
            "spread_reduction": 1.0 - spread["eval"] / spread["train"] if spread["train"] > 0 else None,
            "train_no_grad_identical_to_train": acc["train"] == acc["train+no_grad"],
            "by_construction": "dropout is the only randomness (fixed model, fixed data): eval removes "
                               "all of the spread whatever the benchmark's share would be",
            "model": "Linear(32,64)-ReLU-Dropout(0.1)-Linear(64,10), 512 fixed samples; labels: "
                     "its own eval predictions with 30 % replaced at random",
            "note": "the article's ~7 % comes from an unnamed benchmark: not testable. Eval "
                    "mode makes dropout the identity, so dropout's share of the variability "
                    "goes to zero; BatchNorm in train mode adds batch-composition dependence."}


@C16.judges
def judge_c16(m, rule):
    spread, runs, cut = m["std"], m["runs"], m["spread_reduction"]
    proxy = (f"Proxy, not deciding: eval() removed {_pct(cut)} of the run-to-run spread here, "
             f"{proxy_text(rule.band, cut)}, by construction (see below). " if cut is not None else "")
    summary = (f"Not testable: the article's 7 % comes from an unnamed benchmark. {proxy}The mechanism, shown: over "
               f"{runs} runs of one fixed model on one fixed data set, the accuracy's standard deviation was "
               f"{spread['train']:.4f} in train mode (dropout 0.1) and {spread['eval']:.4f} in eval mode. Here "
               "dropout is the only source of run-to-run randomness, so eval() removing "
               f"{_pct(cut) if cut is not None else 'all'} of it is true by construction and is no evidence for or against 7 %: "
               "in a real benchmark the share depends on how much of the variance dropout (and BatchNorm's batch "
               "statistics) caused, beside data order and initialisation. no_grad left the train-mode values "
               + ("identical." if m["train_no_grad_identical_to_train"] else "different (unexpected)."))
    return Judgement("not testable", summary)


def _c17_speedup_edges(workload) -> list:
    """The speedups over grad at which C17's band of time saved changes its reading (any workload)."""
    lo, hi = C17.rule.band.edges
    return [1.0 / (1.0 - e) for e in (lo, hi) if e is not None and e < 1]


def _c17_stop_edges(workload) -> list:
    """A shared forward condition's rounds go on until they decide whether no_grad is faster at all."""
    return [1.0]


def _c17_readings(v, protocol=None):
    """C17's reading of no_grad's time saving at its workload and batch (:func:`evidence.readings`)."""
    if protocol == 1:  # protocol 1 timed a whole validation loop without a sync per batch: another quantity
        # than a forward's time saving (never compared with one), but a timing of the same workload on the same
        # machine, so a column whose timings of that workload contradict each other puts it in doubt too
        yield _ev.key_loop_saving(v.get("workload"), v.get("batch")), _ev.num(v.get("time_saved")), _ev.ci(v.get("ci"))
        return
    k = _ev.key_saving(v.get("workload"), v.get("batch"), None)
    yield k, _ev.num(v.get("time_saved")), _ev.ci(v.get("ci"))


C17 = declare(
    "C17", section='4', kind='numeric', notebook=NOTEBOOK, basis="gpu speed",
    tiny_cpu_threads=1,  # its check times or traces models: one thread in a tiny CPU run
    speedup_edges=_c17_speedup_edges, stop_edges=_c17_stop_edges, shared_readings=_c17_readings,
    paraphrase='adding no_grad to eval cut validation time by about 35 % with the same accuracy',
    figure='~35 %',
    rule=Rule("Time saved = 1 - t(no_grad forward)/t(grad forward) of the validation loop's forward (the "
              "shared timing), read against 'about 35 %' (28-42 %, within 20 % of 35 %) by its 95 % CI "
              "(at least 10 rounds): holds when it lies inside, does not hold when it lies outside, "
              "inconclusive across an edge (an older protocol's interval, which under-covers, is "
              + widened_text(OLD_PROTOCOL_WIDENING) + ", and inconclusive if it then crosses one); does not hold either if the loop's predictions differ with no_grad. A column of "
              "protocol 1 timed the whole loop with no sync per batch instead: that loop time is read, as another "
              "quantity than a synced forward's (never compared with one), and a conflict on the same model's "
              "forward timings in that column puts it in doubt too. The article's sentence names no device: its "
              "benchmark on ImageNet-style workflows is read as a GPU's (where such validation runs; the "
              "article's other measured figures are for 12 GB and 16 GB GPUs), an assumption, not the article's "
              "word: off a GPU the reference GPU's measurements decide and this machine's are shown beside them."
              + SELF_CONTRADICTION,
              band=Band("about", 0.35), tie=TIE, min_samples=MIN_BOOTSTRAP_ROUNDS))


@C17.measures
def c17(ctx):
    """An eval-mode validation loop (ResNet-50 by default), grad on vs no_grad. Its speed is the
    shared forward timing of (workload, scale, batch, device) (:func:`forward_condition`: a loop
    step on data already on the device is one forward plus an argmax); its accuracy and
    predictions come from running the loop both ways over ``n_batches`` batches whose labels are
    drawn independently of the model. Knobs: ``workload``, ``n_batches``, ``batch``."""
    name = ctx.params.get("workload", "resnet50")
    if name not in ("mlp", "resnet50"):
        raise ValueError(f"C17 needs a classifier workload; allowed: mlp, resnet50 (got {name!r})")
    wl = workloads.get(name, ctx.scale)
    b = _speed_batch(ctx, wl)
    n = int(ctx.params.get("n_batches", 8 if _quick(ctx) else 20))
    if n < 1:
        raise ValueError(f"n_batches must be a positive integer, got {n}")
    wl, model, _, _ = _build(name, ctx.scale, ctx.device, b, ctx.seed)
    g = torch.Generator().manual_seed(ctx.seed + 17)
    xs = [wl.make_input(b, ctx.device) for _ in range(n)]
    ncls = int(wl.params.get("num_classes", wl.params.get("classes", 0)) or 0)
    with torch.no_grad():
        ncls = ncls or int(model(xs[0][:1]).shape[1])
    # labels drawn from their own generator: independent of the model, so accuracy is free to move
    ys = [torch.randint(0, ncls, (b,), generator=g).to(ctx.device) for _ in range(n)]

    def loop(grad_mode, model=model, xs=xs):
        logits = []
        with grad_mode():
            for x in xs:
                logits.append(model(x).detach())
        return logits

    l_grad, l_ng = loop(torch.enable_grad), loop(torch.no_grad)
    p_grad, p_ng = [v.argmax(1) for v in l_grad], [v.argmax(1) for v in l_ng]
    acc = {k: float(sum(int((p == y).sum()) for p, y in zip(ps, ys)) / (n * b))
           for k, ps in (("eval", p_grad), ("eval+no_grad", p_ng))}
    same_preds = all(torch.equal(a, c) for a, c in zip(p_grad, p_ng))
    max_diff = max(float((a - c).abs().max()) for a, c in zip(l_grad, l_ng))
    distinct = len({int(v) for p in p_grad for v in p})
    # the loop's defaults hold the model too: all of them go before the timing builds its own (a
    # second ResNet-50, 102 MB, beside the first was a quarter of notebook 04's peak)
    del model, xs, loop
    c = forward_condition(ctx, wl, b)
    t = c.triple("no_grad")
    return {"workload": name, "batch": b, "n_batches": n, "time_saved": t[0], "ci": list(t[1:]),
            "grad_ms": c.ms("grad"), "no_grad_ms": c.ms("no_grad"), "rounds": c.comparison.rounds,
            "accuracy": acc, "same_predictions": same_preds,
            "max_logit_diff": max_diff, "distinct_predicted_classes": distinct,
            "labels": "uniform random classes from torch.Generator(seed + 17), independent of the model",
            "comparison": c.comparison.to_dict(),
            "timing": "shared per condition (forward_condition): the same numbers as C03/C20/X05",
            "metric": "time_saved = 1 - t(eval+no_grad forward)/t(eval forward) per loop step",
            "provisional": _samples_note(ctx, "C17", [c]).strip()}


@C17.judges
def judge_c17(m, rule):
    name, b, n = m["workload"], m["batch"], m["n_batches"]
    lo, hi = m["ci"]
    rounds = m.get("rounds") or (m.get("comparison") or {}).get("rounds")
    verdict, rows = read_conditions([(f"{name}@{b}", m["time_saved"], lo, hi, rounds)], rule.band,
                                    widen=widening(m.protocol), estimated=False)
    acc, same = m["accuracy"], m["same_predictions"]
    if acc["eval"] != acc["eval+no_grad"] or not same:
        verdict = "does not hold"
    timing = (f" ({m['grad_ms']:.3g} ms with grad, {m['no_grad_ms']:.3g} ms without)" if "grad_ms" in m else "")
    # a column with per-step timing ("timing") synchronised each batch; one without (protocol 1) timed the
    # whole loop at once, with no per-batch sync
    cut = "each step's forward" if "timing" in m else "the whole loop's time"
    loop = ("" if "timing" in m else
            " The loop was timed at once, with no sync per batch: another quantity than a synced forward's time "
            "saving (a loop that runs ahead of the GPU can hide autograd's CPU cost), read as such.")
    lead = direction_text(rows, "no_grad saves more time than the article says", "no_grad saves less time than the article says",
                          nothing="no_grad saves nothing clear")
    summary = ((f"{lead[0].upper()}{lead[1:]}. " if lead else "")
               + f"Validation loop of the {name} in eval mode ({n} batches of {b}, {m.label}): adding no_grad cut "
               f"{cut} by {format_saved(m['time_saved'], lo, hi)}{timing}; article: about 35 %, "
               f"read as {rule.band.text()}: {readings_text(rows)}.{loop} Predictions over {n * b} inputs "
               + ("identical" if same else "DIFFERENT")
               + (f" (largest logit difference {m['max_logit_diff']:.2g})" if "max_logit_diff" in m else "")
               + f", so the accuracy is the same for any labels: {acc['eval']:.3f} vs {acc['eval+no_grad']:.3f}"
               + (" on labels drawn independently of the model (an untrained model's accuracy is chance; only the "
                  "identity of the predictions is evidence)" if "labels" in m else
                  " (only the identity of the predictions is evidence)")
               + ". The data is already on the device: a loader or "
               "host-to-device copies would add the same time to both.")
    if m.get("provisional"):
        summary += " " + m["provisional"]
    what = ("Time saved per loop step" if "timing" in m else
            "Time saved over the whole loop (timed at once, no sync per batch)")
    reading = (f"{what}: {format_saved(m['time_saved'], lo, hi)} against the article's about "
               "35 %; " + ("same predictions." if same else "predictions differ."))
    return Judgement(verdict, summary, reading, rows)


# --------------------------------------------------------------------------------------------
# figures: each claim's measurements drawn with nogradlab.plots


@C14.draws
def _figure_c14(ev, device, scale):
    cells = {(g["model_mode"], g["grad_mode"]): {"output differs from eval+grad by": g["max_abs_diff_vs_eval_grad"],
                                                 "requires_grad": g["requires_grad"], "saved_bytes": g["saved_bytes"],
                                                 "BN stats updated": g["bn_running_stats_updated"]}
             for g in ev["grid"]}
    return plots.eval_grid(cells, device=device, scale=scale)
