"""Checks of the semantic claims: what ``torch.no_grad`` does and does not do, asserted on the
running torch and device. Each check returns ``(verdict, summary, evidence)`` computed from what
it observes here; none asserts anything itself (a behaviour that differs on another torch version
shows up as a different verdict, not as an exception).

Covered: C01 C02 C05 C06 C07 C10 C11 C12 C14 C15 C22 C24 C26 C27 C28 C29 C30 X01 X02 X03 X04.
Every check builds its models on ``ctx.device`` and runs in about a second at ``scale="tiny"``.
"""
from __future__ import annotations

import concurrent.futures
import copy
import threading
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from .. import memory, modes, timing, workloads
from . import claim_check
from .rules import RULES

MIGRATION_GUIDE = "https://pytorch.org/blog/pytorch-0_4_0-migration-guide/"
RELEASE_NOTES = "https://github.com/pytorch/pytorch/releases/tag/v0.4.0"
AUTOCAST_CACHE_ISSUES = {
    "112583": "https://github.com/pytorch/pytorch/issues/112583",
    "113685 (fix: redo a cached cast that lacks gradient history)":
        "https://github.com/pytorch/pytorch/pull/113685",
    "165068 (fix of 158232: cached casts always made with grad enabled)":
        "https://github.com/pytorch/pytorch/pull/165068",
}


# --------------------------------------------------------------------------------------------
# small helpers


def _tracking(t: torch.Tensor) -> dict:
    """How autograd sees ``t``: requires_grad, grad_fn name, is_leaf."""
    return {"requires_grad": bool(t.requires_grad),
            "grad_fn": type(t.grad_fn).__name__ if t.grad_fn is not None else None,
            "is_leaf": bool(t.is_leaf)}


def _workload(ctx, default: str = "mlp"):
    """(workload, model in eval mode on ctx.device, input batch) for ``ctx.params['workload']``."""
    wl = workloads.get(ctx.params.get("workload", default), ctx.scale)
    model = wl.build(ctx.device).eval()
    x = wl.make_input(ctx.params.get("batch", wl.default_batch), ctx.device)
    return wl, model, x


def _in_new_thread(fn):
    """Run ``fn()`` in a fresh ``threading.Thread``; return its result (re-raise its error)."""
    box = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed back to the caller
            box["error"] = e

    th = threading.Thread(target=target)
    th.start()
    th.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


class _SavedHookCalls:
    """Counts how often autograd's pack hook fires (every tensor saved for backward)."""

    def __init__(self):
        self.calls = 0

    def _pack(self, t):
        self.calls += 1
        return t

    def __enter__(self):
        self._cm = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._cm.__enter__()
        return self

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)


class _OpRecorder(TorchDispatchMode):
    """Records the ATen operators that reach the dispatcher's Python key: (name, first arg shape)."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        self.ops.append((func.__name__, tuple(first.shape) if first is not None else None))
        return func(*args, **(kwargs or {}))


def _max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.detach().float() - b.detach().float()).abs().max().item())


def _error_text(fn) -> "str | None":
    """The message of the exception ``fn()`` raises (``"Type: message"``), or None."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the text is the evidence
        return f"{type(e).__name__}: {str(e).splitlines()[0]}"
    return None


def _low_precision(device: torch.device) -> torch.dtype:
    """The autocast dtype this check uses on ``device``: float16 on CUDA, bfloat16 elsewhere."""
    return torch.float16 if device.type == "cuda" else torch.bfloat16


# --------------------------------------------------------------------------------------------
# section 1


@claim_check("C01")
def c01(ctx):
    """Grad mode off for every op in the block, on this thread; a thread started in the block
    computes with grad on (grad mode is thread-local)."""
    dev = ctx.device
    w = torch.randn(4, 4, device=dev, requires_grad=True)
    lin = nn.Linear(4, 4, device=dev)
    with torch.no_grad():
        here = {"grad_enabled": torch.is_grad_enabled(), "op": _tracking(w * 2),
                "module": _tracking(lin(torch.randn(2, 4, device=dev))),
                "function_call": _tracking(F.softmax(w, dim=0))}
        there = _in_new_thread(lambda: {"grad_enabled": torch.is_grad_enabled(), "op": _tracking(w * 2)})
    off_here = not here["grad_enabled"] and not any(here[k]["requires_grad"]
                                                    for k in ("op", "module", "function_call"))
    tracked_there = there["op"]["requires_grad"]
    evidence = {"this_thread": here, "thread_started_inside_block": there}
    if not off_here:
        return "does not hold", "Tracking was still on for some operation inside no_grad.", evidence
    if tracked_there:
        return ("depends", "On the thread that entered no_grad every operation (tensor op, module, "
                "function) came out untracked; a thread started inside the block computed w*2 with "
                f"grad on (requires_grad True, grad_fn {there['op']['grad_fn']}): grad mode is per "
                "thread, so 'everything inside the block' means everything on this thread.", evidence)
    return "holds", "Tracking was off inside the block, also in a thread started there.", evidence


@claim_check("C02")
def c02(ctx):
    """No graph under no_grad: the output's grad_fn is None and autograd's saved-tensor pack hook
    fires zero times (it fires for every saved tensor with grad on, the control)."""
    wl, model, x = _workload(ctx)
    runs = {}
    for mode in ("grad", "no_grad"):
        with _SavedHookCalls() as hook, modes.get(mode)():
            out = model(x)
        runs[mode] = {**_tracking(out), "saved_tensor_hook_calls": hook.calls}
    ng, g = runs["no_grad"], runs["grad"]
    ok = ng["grad_fn"] is None and ng["saved_tensor_hook_calls"] == 0 and g["saved_tensor_hook_calls"] > 0
    summary = (f"{wl.name} forward: with grad the output has grad_fn {g['grad_fn']} and the saved-tensor "
               f"hook fired {g['saved_tensor_hook_calls']} times; under no_grad grad_fn is "
               f"{ng['grad_fn']} and the hook fired {ng['saved_tensor_hook_calls']} times.")
    return ("holds" if ok else "does not hold"), summary, {"workload": wl.name, "runs": runs}


@claim_check("C05")
def c05(ctx):
    """'Every tensor created or modified inside no_grad has requires_grad=False', case by case."""
    dev = ctx.device
    w = torch.randn(3, device=dev, requires_grad=True)  # a leaf, like a parameter
    h = w * 2  # a non-leaf built with grad on
    p = nn.Parameter(torch.randn(3, device=dev))
    opt = torch.optim.SGD([p], lr=0.1)
    p.grad = torch.ones_like(p)
    cases = []

    def case(name, t, note=""):
        cases.append({"case": name, **_tracking(t), "as_claimed": not t.requires_grad, "note": note})

    with torch.no_grad():
        case("result of an op on a tracked tensor (w * 2)", w * 2)
        case("view of a tracked tensor (w[:2])", w[:2],
             "requires_grad True but a leaf of its own: backward through it never reaches w, and an "
             "in-place change to it later with grad on raises")
        case("factory call without requires_grad (torch.zeros)", torch.zeros(3, device=dev))
        case("factory call with requires_grad=True (torch.ones)",
             torch.ones(3, device=dev, requires_grad=True))
        w.add_(1)
        case("tracked leaf modified in place (w.add_(1))", w)
        h.mul_(3)
        case("tracked non-leaf modified in place (h.mul_(3))", h)
    opt.step()  # optimizers update parameters in place with grad off
    case("parameter after optimizer.step() (in-place update with grad off)", p,
         "optimizers rely on this: parameters stay trainable")
    wrong = [c["case"] for c in cases if not c["as_claimed"]]
    evidence = {"cases": cases}
    if wrong:
        return ("does not hold", f"New results are untracked ({len(cases) - len(wrong)} of {len(cases)} cases "
                f"as claimed), but {len(wrong)} keep requires_grad=True: " + "; ".join(wrong) + ".", evidence)
    return "holds", f"All {len(cases)} cases have requires_grad=False.", evidence


@claim_check("C06")
def c06(ctx):
    """The article's example, literally: x (requires_grad) * 3 inside no_grad."""
    x = torch.randn(3, device=ctx.device, requires_grad=True)
    with torch.no_grad():
        y = x * 3
    control = x * 3
    evidence = {"inside_no_grad": _tracking(y), "control_with_grad": _tracking(control)}
    ok = not y.requires_grad and y.grad_fn is None
    return (("holds" if ok else "does not hold"),
            f"x * 3 inside no_grad: requires_grad {y.requires_grad}, grad_fn {y.grad_fn}; the same "
            f"product outside has grad_fn {type(control.grad_fn).__name__}.", evidence)


# --------------------------------------------------------------------------------------------
# section 2


@claim_check("C07")
def c07(ctx):
    """Operators still run (same output) but save nothing for backward: saved bytes > 0 with
    grad, 0 under no_grad (nogradlab.memory.measure)."""
    wl, model, x = _workload(ctx)
    reports, outs = {}, {}
    for mode in ("grad", "no_grad"):
        def fn(mode=mode):
            with modes.get(mode)():
                return model(x)
        reports[mode], outs[mode] = memory.measure(fn, ctx.device, return_result=True, label=mode)
    diff = _max_abs_diff(outs["grad"], outs["no_grad"])
    g, ng = reports["grad"], reports["no_grad"]
    ok = g.saved_bytes > 0 and ng.saved_bytes == 0 and torch.allclose(outs["grad"], outs["no_grad"])
    evidence = {"workload": wl.name, "batch": x.shape[0], "max_abs_output_diff": diff,
                "reports": {m: r.to_dict() for m, r in reports.items()}}
    summary = (f"{wl.name} ({ctx.scale}, batch {x.shape[0]}): the same forward computed the same output "
               f"(max diff {diff:.3g}); autograd saved {memory.format_bytes(g.saved_bytes)} "
               f"({g.saved_tensors} storages) with grad and {memory.format_bytes(ng.saved_bytes)} under "
               "no_grad.")
    return ("holds" if ok else "does not hold"), summary, evidence


@claim_check("C10")
def c10(ctx):
    """Historical: PyTorch 0.4.0 replaced ``volatile=True`` Variables by torch.no_grad. Checked here:
    no_grad exists, and ``Variable(x, volatile=True)`` warns and has no effect."""
    x = torch.randn(3, device=ctx.device, requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        v = torch.autograd.Variable(torch.randn(3, device=ctx.device), volatile=True)
        y = x * v  # before 0.4 one volatile input made the whole result untracked
        volatile_attr = getattr(v, "volatile", None)
    messages = sorted({f"{w.category.__name__}: {w.message}" for w in caught})
    volatile_ignored = y.requires_grad and y.grad_fn is not None
    has_no_grad = hasattr(torch, "no_grad") and hasattr(torch, "set_grad_enabled")
    with torch.no_grad():
        no_grad_works = not (x * 2).requires_grad
    evidence = {
        "sources": {"PyTorch 0.4.0 migration guide, 'Deprecation of the volatile flag'": MIGRATION_GUIDE,
                    "PyTorch v0.4.0 release notes": RELEASE_NOTES},
        "what_the_sources_say": "0.4.0 merged Variable into Tensor and deprecated the volatile flag, "
                                "replacing it by the context managers torch.no_grad() and "
                                "torch.set_grad_enabled(mode)",
        "torch": torch.__version__, "torch.no_grad_exists": has_no_grad, "no_grad_stops_tracking": no_grad_works,
        "Variable(volatile=True)": {"type": type(v).__name__, "volatile_attribute": volatile_attr,
                                    "warnings": messages,
                                    "x_requiring_grad_times_volatile_v": _tracking(y)},
    }
    ok = has_no_grad and no_grad_works and volatile_ignored and bool(messages)
    summary = (f"The 0.4.0 migration guide deprecated volatile=True in favour of torch.no_grad(); in torch "
               f"{torch.__version__} Variable(x, volatile=True) returns a plain {type(v).__name__}, warns "
               f"({len(messages)} warning(s)) and has no effect (x * volatile_v still has grad_fn "
               f"{_tracking(y)['grad_fn']}). "
               + ("The article's date holds; " if ok else "This run does not support the article's date; ")
               + "what no_grad replaced was the volatile flag more than the detach/clone workarounds it "
               "names.")
    return ("holds" if ok else "does not hold"), summary, evidence


def _files_mentioning(package: str, needle: str = "no_grad") -> "dict | None":
    """How many .py files of an installed package contain ``needle``."""
    import importlib.util
    import pathlib

    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        return None
    files = list(pathlib.Path(spec.origin).parent.rglob("*.py"))
    hits = sum(1 for f in files if needle in f.read_text(errors="ignore"))
    return {"files": len(files), "mentioning_no_grad": hits,
            "share": round(hits / len(files), 4) if files else None}


@claim_check("C11")
def c11(ctx):
    """Unsourced survey figure (>60 % of tutorials and internals): not testable. The mechanism
    behind 'internals use no_grad' is shown on framework helpers that must not be recorded."""
    w = torch.randn(4, 4, device=ctx.device, requires_grad=True)
    nn.init.normal_(w)  # runs its in-place fill under no_grad internally
    p = nn.Parameter(torch.randn(4, device=ctx.device))
    p.grad = torch.full_like(p, 10.0)
    nn.utils.clip_grad_norm_([p], max_norm=1.0)
    internals = {
        "nn.init.normal_ on a leaf with grad on": {**_tracking(w), "as_expected": w.is_leaf and w.grad_fn is None},
        "clip_grad_norm_ rescales .grad without a graph": {"grad_requires_grad": bool(p.grad.requires_grad),
                                                            "grad_norm_after": float(p.grad.norm())},
    }
    scan = {pkg: _files_mentioning(pkg) for pkg in ("torch", "torchvision")}
    evidence = {"reason": "the article cites no survey, population or method for '>60 % of tutorials and "
                          "framework-internal methods (2021-2022)'; there is nothing to reproduce",
                "mechanism": internals, "installed_source_scan": scan,
                "scan_caveat": "a share of files that mention no_grad in the installed packages, not the "
                               "article's (unknown) population of tutorials and trainer loops"}
    t = scan.get("torch") or {}
    summary = ("Not testable: no source or method is given for the >60 % figure. Mechanism: torch's own "
               "helpers (nn.init, clip_grad_norm_) run with grad off, leaving no graph; for scale, "
               f"{t.get('mentioning_no_grad')} of {t.get('files')} Python files of the installed torch "
               "mention no_grad (a different population).")
    return "not testable", summary, evidence


# --------------------------------------------------------------------------------------------
# section 3


@claim_check("C12")
def c12(ctx):
    """Redundant nesting is legal and gives the same result; entering and leaving the context costs
    microseconds (nogradlab.timing.measure) against one tiny forward."""
    wl, model, x = _workload(ctx)
    from .numbers import _knobs, enter_exit

    rule = RULES["C12"]
    with torch.no_grad():
        flat = model(x)
        with torch.no_grad():
            with torch.no_grad():
                nested = model(x)
            still_off = not torch.is_grad_enabled()
    same = torch.equal(flat, nested)

    def forward():
        with torch.no_grad():
            model(x)

    k = _knobs(ctx)
    enter = enter_exit(ctx)  # shared with C13
    nested_enter = enter_exit(ctx, nested=True)
    fwd = timing.measure(forward, ctx.device, min_run_time=k["min_run_time"], num_threads=k["num_threads"],
                         label=f"{wl.name} forward")
    ratio = nested_enter.median / fwd.median
    evidence = {"workload": wl.name, "batch": x.shape[0], "nested_result_bitwise_equal": same,
                "grad_off_after_inner_exit": still_off, "enter_exit": enter.to_dict(),
                "nested_enter_exit": nested_enter.to_dict(), "forward": fwd.to_dict(),
                "cost_ratio_nested_vs_forward": ratio}
    summary = (f"Nesting works (same output: {same}; grad still off after the inner block exits: {still_off}). "
               f"Entering and leaving no_grad costs {nested_enter.median * 1e6:.2f} µs when already inside one "
               f"({enter.median * 1e6:.2f} µs from grad mode), vs {fwd.median * 1e3:.3f} ms for one {wl.name} "
               f"{ctx.scale} forward ({ratio:.2%}).")
    if not (same and still_off):
        return "holds", summary + " Nesting changed the result or the mode: it is harmful here.", evidence
    evidence["threshold"] = rule.threshold
    if ratio < rule.threshold:
        return "does not hold", summary + (f" Redundant but harmless: under the {rule.threshold:.0%} threshold "
                                           "(of one forward) for a measurable anti-pattern."), evidence
    return "depends", summary + (f" The context cost reaches the {rule.threshold:.0%} threshold (of one "
                                 "forward) here: not negligible next to this forward."), evidence


# --------------------------------------------------------------------------------------------
# section 4


def _bn_dropout_net(device) -> nn.Module:
    """A small classifier with BatchNorm and Dropout: the two layers train/eval changes."""
    return nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.5),
                         nn.Linear(32, 4)).to(device)


@claim_check("C14")
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
    by = {(c["model_mode"], c["grad_mode"]): c for c in grid}
    no_grad_output_same = all(c["max_abs_diff_vs_same_model_mode_grad"] == 0 for c in grid)
    eval_changes = by[("train", "grad")]["max_abs_diff_vs_eval_grad"] > 0
    tracking_ok = all(c["requires_grad"] == (c["grad_mode"] == "grad") for c in grid)
    memory_ok = all((c["saved_bytes"] > 0) == (c["grad_mode"] == "grad") for c in grid)
    evidence = {"model": "Linear(16,32)-BatchNorm1d-ReLU-Dropout(0.5)-Linear(32,4)", "batch": 8,
                "grid": grid}
    t_g, t_ng, e_g, e_ng = (by[k] for k in (("train", "grad"), ("train", "no_grad"),
                                             ("eval", "grad"), ("eval", "no_grad")))
    summary = (f"eval vs train changed the outputs (max diff {t_g['max_abs_diff_vs_eval_grad']:.3g}); "
               f"no_grad vs grad left them {'bitwise equal' if no_grad_output_same else 'DIFFERENT'} in both "
               f"model modes and only changed tracking and memory: saved for backward "
               f"{e_g['saved_bytes']} B -> {e_ng['saved_bytes']} B (eval), {t_g['saved_bytes']} B -> "
               f"{t_ng['saved_bytes']} B (train). In train mode BatchNorm updated its running stats even "
               f"under no_grad: {t_ng['bn_running_stats_updated']}.")
    ok = no_grad_output_same and eval_changes and tracking_ok and memory_ok
    return ("holds" if ok else "does not hold"), summary, evidence


@claim_check("C15")
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
    tol = RULES["C15"].tolerance
    for r in rows:
        r["tolerance"] = tol * max(1.0, r["max_abs_output"])
        r["within_tolerance"] = r["max_abs_diff"] <= r["tolerance"]
    differ = [r for r in rows if not r["bitwise_equal"]]
    close = all(r["within_tolerance"] and r.get("same_argmax", True) for r in rows)
    parts = [f"{r['workload']} " + ("bitwise equal" if r["bitwise_equal"] else
                                    f"max difference {r['max_abs_diff']:.2g} (tolerance {r['tolerance']:.2g})")
             for r in rows]
    evidence = {"device": str(ctx.device), "scale": ctx.scale, "models": rows,
                "tolerance": f"{tol:g} x max(1, max |output|): float32 rounding when kernels sum in another order"}
    summary = (f"Eval-mode outputs with grad vs under no_grad on {ctx.device.type} (tolerance {tol:g} relative "
               "to the output's scale): " + "; ".join(parts) + ".")
    for r in differ:
        if r.get("ops_only_under_no_grad"):
            summary += (f" {r['workload']} ran {', '.join(r['ops_only_under_no_grad'])} only under no_grad "
                        "(kernels taken only with grad off), so its floats differ in rounding only.")
    if close:
        summary += (" Predictions are the same up to float rounding" +
                    (f"; bitwise equal in {len(rows) - len(differ)} of {len(rows)}." if differ else
                     ", bitwise equal everywhere."))
        return "holds", summary, evidence
    return "does not hold", summary + " A difference beyond float rounding: no_grad changed the outputs.", evidence


# --------------------------------------------------------------------------------------------
# section 6


@claim_check("C22")
def c22(ctx):
    """``@torch.no_grad()`` covers the whole function (also helpers it calls, and restores on
    error); generators get the mode re-applied on each resume; bare ``@torch.no_grad`` works."""
    x = torch.randn(3, device=ctx.device, requires_grad=True)

    def helper(t):
        return torch.is_grad_enabled(), (t * 2).requires_grad

    @torch.no_grad()
    def predict(t):
        first = torch.is_grad_enabled()
        y = t * 2
        in_helper = helper(t)
        last = torch.is_grad_enabled()
        return {"grad_at_start": first, "grad_in_called_helper": in_helper[0],
                "helper_result_requires_grad": in_helper[1], "grad_at_end": last,
                "result_requires_grad": bool(y.requires_grad)}

    @torch.no_grad()
    def failing():
        raise ValueError("boom")

    @torch.no_grad()
    def gen():
        for _ in range(2):
            yield torch.is_grad_enabled()

    decorated = predict(x)
    after_call = torch.is_grad_enabled()
    _error_text(failing)
    after_error = torch.is_grad_enabled()
    g = gen()
    resumes, caller_between = [], []
    for mode_inside in g:
        resumes.append(mode_inside)
        caller_between.append(torch.is_grad_enabled())
    try:
        @torch.no_grad
        def bare(t):
            return torch.is_grad_enabled(), bool((t * 2).requires_grad)
        bare_result = {"works": True, "grad_inside": bare(x)[0], "result_requires_grad": bare(x)[1]}
    except Exception as e:  # noqa: BLE001 - an older torch refuses the bare form
        bare_result = {"works": False, "error": f"{type(e).__name__}: {e}"}
    evidence = {"function": decorated, "grad_after_call": after_call, "grad_after_exception": after_error,
                "generator": {"grad_inside_at_each_resume": resumes, "caller_grad_between_resumes": caller_between},
                "bare_decorator": bare_result}
    whole = (not any(decorated.values())) and after_call and after_error
    gen_ok = resumes == [False, False] and all(caller_between)
    bare_ok = bare_result["works"] and not bare_result["grad_inside"] and not bare_result["result_requires_grad"]
    summary = (f"Inside @torch.no_grad() grad was off from first to last line and in the helper it called; "
               f"restored after return ({after_call}) and after an exception ({after_error}). A decorated "
               f"generator had grad off at each resume {resumes} while its caller had it on between them "
               f"{caller_between}. Bare @torch.no_grad: "
               + ("works the same." if bare_ok else f"{bare_result}."))
    if whole and gen_ok and bare_ok:
        return "holds", summary, evidence
    if whole:
        return "depends", summary, evidence
    return "does not hold", summary, evidence


@claim_check("C24")
def c24(ctx):
    """The article's ``torch.cuda.amp.autocast()`` inside no_grad: that spelling is deprecated;
    ``torch.autocast(device_type=...)`` gives low-precision outputs and no graph."""
    dev = ctx.device
    lin = nn.Linear(16, 16, device=dev)
    lin_cpu = lin if dev.type == "cpu" else nn.Linear(16, 16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            old_cm = torch.cuda.amp.autocast()
            err = None
        except Exception as e:  # noqa: BLE001 - recorded
            old_cm, err = None, f"{type(e).__name__}: {e}"
        old_run = None
        if old_cm is not None:
            with torch.no_grad(), old_cm:
                y = lin(torch.randn(4, 16, device=dev))
            old_run = {"device": str(dev), "dtype": str(y.dtype), **_tracking(y)}
    old_warnings = [{"category": w.category.__name__, "message": str(w.message)} for w in caught]
    deprecated = any(issubclass(w.category, (FutureWarning, DeprecationWarning)) and "deprecat" in
                     str(w.message).lower() for w in caught)

    def modern(device_type, model, dtype):
        x = torch.randn(4, 16, device=next(model.parameters()).device)
        with torch.no_grad(), torch.autocast(device_type=device_type, dtype=dtype):
            y = model(x)
        return {"device_type": device_type, "autocast_dtype": str(dtype), "output_dtype": str(y.dtype),
                **_tracking(y), "ok": y.dtype == dtype and not y.requires_grad and y.grad_fn is None}

    runs = [modern("cpu", lin_cpu, torch.bfloat16)]
    if ctx.on_gpu:
        runs.append(modern("cuda", lin, torch.float16))
    evidence = {"torch.cuda.amp.autocast()": {"constructed": old_cm is not None, "error": err,
                                              "warnings": old_warnings, "deprecated": deprecated,
                                              "run_inside_no_grad": old_run},
                "torch.autocast": runs, "cuda_tested": ctx.on_gpu}
    modern_ok = all(r["ok"] for r in runs)
    summary = ("torch.autocast inside no_grad: " + "; ".join(
        f"{r['device_type']} -> {r['output_dtype']} outputs, requires_grad {r['requires_grad']}" for r in runs)
        + ("" if ctx.on_gpu else " (CUDA not tested: no GPU here)") + ". The article's "
        f"torch.cuda.amp.autocast() spelling {'is deprecated (FutureWarning)' if deprecated else 'did not warn'}"
        + (f"; on this {dev.type} device it gave {old_run['dtype']} outputs" if old_run else "")
        + (" because autocast disabled itself without CUDA" if old_run and not torch.cuda.is_available()
           else "") + ".")
    # the article's spelling is judged only where it can work: on a CUDA device it must give fp16
    old_works = old_run is not None and (not ctx.on_gpu or old_run["dtype"] == "torch.float16")
    evidence["article_spelling_works"] = old_works if ctx.on_gpu else None
    if not modern_ok:
        return "does not hold", summary, evidence
    if ctx.on_gpu and (err or not old_works):
        return "depends", summary + (" The article's spelling failed here; the stacking works with "
                                     "torch.autocast(device_type=...)."), evidence
    note = (" The stacking holds; the deprecation only asks for torch.autocast('cuda') instead."
            if deprecated else " The stacking holds.")
    if not ctx.on_gpu:
        note += " The article's CUDA spelling itself needs a GPU to be tested."
    return "holds", summary + note, evidence


# --------------------------------------------------------------------------------------------
# section 7


@claim_check("C26")
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
    inline, pooled, fixed = (r["requires_grad"] for r in results.values())
    evidence = {"workload": wl.name, "handlers": results}
    summary = (f"With no_grad around the handler the output was tracked: inline {inline}, in a pool worker "
               f"{pooled}, in a worker that enters no_grad itself {fixed}.")
    if inline:
        return "does not hold", summary, evidence
    if pooled and not fixed:
        return "depends", summary + " Highest level works per thread: set the mode inside the worker.", evidence
    return "holds", summary, evidence


# --------------------------------------------------------------------------------------------
# FAQ


@claim_check("C27")
def c27(ctx):
    """A penalty computed under no_grad changes the loss value but not the gradient, and
    autograd.grad through it (or through an input-gradient penalty) raises."""
    dev = ctx.device
    lin = nn.Linear(8, 1, device=dev)
    x, y = torch.randn(16, 8, device=dev), torch.randn(16, 1, device=dev)
    lam = 0.1

    def step(penalty_mode):
        lin.zero_grad(set_to_none=True)
        loss = F.mse_loss(lin(x), y)
        if penalty_mode is not None:
            with modes.get(penalty_mode)():
                penalty = lam * sum(p.pow(2).sum() for p in lin.parameters())
            loss = loss + penalty  # added with grad on: only the penalty was computed under the mode
        loss.backward()
        return loss.item(), torch.cat([p.grad.flatten() for p in lin.parameters()]).clone()

    base_v, base_g = step(None)
    grad_v, grad_g = step("grad")
    ng_v, ng_g = step("no_grad")
    with torch.no_grad():
        pen = sum(p.pow(2).sum() for p in lin.parameters())
    weight_grad_error = _error_text(lambda: torch.autograd.grad(pen, lin.weight))
    xi = x.clone().requires_grad_()
    with torch.no_grad():
        out = lin(xi)
    input_grad_error = _error_text(lambda: torch.autograd.grad(out.sum(), xi, create_graph=True))
    evidence = {"loss_value": {"no_penalty": base_v, "penalty_with_grad": grad_v, "penalty_under_no_grad": ng_v},
                "grad_change_vs_no_penalty": {"penalty_with_grad": _max_abs_diff(grad_g, base_g),
                                              "penalty_under_no_grad": _max_abs_diff(ng_g, base_g)},
                "autograd.grad(penalty made under no_grad, weight)": weight_grad_error,
                "autograd.grad(output made under no_grad, input) (gradient penalty / adversarial)": input_grad_error}
    ok = (ng_v != base_v and torch.equal(ng_g, base_g) and not torch.equal(grad_g, base_g)
          and weight_grad_error is not None and input_grad_error is not None)
    summary = (f"An L2 penalty under no_grad raised the loss from {base_v:.4f} to {ng_v:.4f} but changed the "
               f"gradient by {evidence['grad_change_vs_no_penalty']['penalty_under_no_grad']:.3g} (the same penalty "
               f"with grad on: {evidence['grad_change_vs_no_penalty']['penalty_with_grad']:.3g}); "
               f"autograd.grad through it raised: {weight_grad_error}")
    return ("holds" if ok else "does not hold"), summary, evidence


def _weight_casts(rec: _OpRecorder, shape) -> int:
    return sum(1 for n, s in rec.ops if n.startswith("_to_copy") and s == tuple(shape))


@claim_check("C28")
def c28(ctx):
    """Outer no_grad + inner autocast is safe for inference. Reverse nesting (autocast outside, a
    no_grad forward then a grad forward in the same region, where the autocast weight-cast cache
    could hand the grad forward a cast made without history: pytorch/pytorch#112583): does the
    gradient still reach the weights, equal to a clean run?"""
    dev = ctx.device
    dtype = _low_precision(dev)
    lin = nn.Linear(8, 8, device=dev)
    x = torch.randn(4, 8, device=dev)
    with torch.no_grad(), torch.autocast(dev.type, dtype=dtype):
        inf = lin(x)
    outer = {"output_dtype": str(inf.dtype), **_tracking(inf)}

    def grad_run(first_mode):
        """In one autocast region: an optional forward under ``first_mode``, then one with grad."""
        lin.zero_grad(set_to_none=True)
        with _OpRecorder() as rec, torch.autocast(dev.type, dtype=dtype):
            cache_on = torch.is_autocast_cache_enabled()
            if first_mode is not None:
                with modes.get(first_mode)():
                    lin(x)
            out = lin(x)
        if out.requires_grad:
            out.float().sum().backward()
        grad = None if lin.weight.grad is None else lin.weight.grad.detach().clone()
        return {"cache_enabled": cache_on, "weight_casts": _weight_casts(rec, lin.weight.shape),
                "output_requires_grad": bool(out.requires_grad)}, grad

    clean, ref = grad_run(None)
    reverse = {}
    for first in ("no_grad", "inference_mode"):
        info, grad = grad_run(first)
        info["weight_grad_is_none"] = grad is None
        info["weight_grad_max_abs_diff_vs_clean"] = None if grad is None else _max_abs_diff(grad, ref)
        info["gradient_intact"] = grad is not None and torch.allclose(grad, ref, rtol=1e-3, atol=1e-6)
        reverse[f"autocast{{ {first} forward; grad forward }}"] = info
    outer_ok = inf.dtype == dtype and not inf.requires_grad
    reverse_ok = all(r["gradient_intact"] for r in reverse.values())
    evidence = {"device": str(dev), "autocast_dtype": str(dtype), "torch": torch.__version__,
                "outer_no_grad_inner_autocast": outer, "clean_grad_run": clean, "reverse_nesting": reverse,
                "references": AUTOCAST_CACHE_ISSUES}
    ng = reverse["autocast{ no_grad forward; grad forward }"]
    im = reverse["autocast{ inference_mode forward; grad forward }"]
    summary = (f"no_grad outside autocast: {outer['output_dtype']} output, no graph. Reverse nesting in torch "
               f"{torch.__version__} on {dev.type} (autocast cache {'on' if ng['cache_enabled'] else 'off'}; "
               f"weight cast {ng['weight_casts']} time(s) for two forwards): the grad forward after a no_grad "
               f"forward gave a weight gradient {'equal to' if ng['gradient_intact'] else 'MISSING or unlike'} "
               f"that of a clean run; after an inference_mode forward: {'equal' if im['gradient_intact'] else 'BROKEN'}.")
    if outer_ok and reverse_ok:
        return "holds", summary, evidence
    if outer_ok:
        return "depends", summary + " Safe as outer no_grad; the reverse nesting breaks training here.", evidence
    return "does not hold", summary, evidence


@claim_check("C29")
def c29(ctx):
    """no_grad removes the activations saved for backward, not parameters or optimizer state; and
    a forward pass never stores .grad in either mode."""
    wl, model, x = _workload(ctx)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    memory.train_step(model, x, wl.make_target(x.shape[0], ctx.device), wl.loss, opt)  # creates momentum
    model.eval()

    def _all_equal(xs, ys):
        return all(torch.equal(a, b) for a, b in zip(xs, ys))

    def nbytes(ts):
        return sum(t.numel() * t.element_size() for t in ts)

    def opt_state():
        return [t.detach().clone() for s in opt.state.values() for t in s.values() if torch.is_tensor(t)]

    params_before = [p.detach().clone() for p in model.parameters()]
    state_before = opt_state()
    rows = {}
    for mode in ("grad", "no_grad"):
        def fn(mode=mode):
            with modes.get(mode)():
                return model(x)
        rep = memory.measure(fn, ctx.device, label=mode)
        rows[mode] = {"parameter_bytes": nbytes(model.parameters()),
                      "optimizer_state_bytes": nbytes(opt_state()),
                      "params_with_grad_after_forward": sum(p.grad is not None for p in model.parameters()),
                      "optimizer_state_unchanged": _all_equal(opt_state(), state_before),
                      "parameters_unchanged": _all_equal(model.parameters(), params_before),
                      "saved_for_backward_bytes": rep.saved_bytes, "peak_bytes": rep.peak_bytes}
    est = {m: memory.estimate(wl, x.shape[0], ctx.device.type, mode=m, scale=ctx.scale).saved_bytes
           for m in ("grad", "no_grad")}
    g, ng = rows["grad"], rows["no_grad"]
    ok = (g["parameter_bytes"] == ng["parameter_bytes"]
          and g["optimizer_state_bytes"] == ng["optimizer_state_bytes"]
          and all(r["optimizer_state_unchanged"] and r["parameters_unchanged"] for r in rows.values())
          and g["saved_for_backward_bytes"] > 0 and ng["saved_for_backward_bytes"] == 0)
    evidence = {"workload": wl.name, "batch": x.shape[0], "optimizer": "SGD(momentum=0.9)", "modes": rows,
                "estimate_saved_bytes": est}
    summary = (f"{wl.name} ({ctx.scale}): parameters {memory.format_bytes(g['parameter_bytes'])} and momentum "
               f"state {memory.format_bytes(g['optimizer_state_bytes'])} in both modes, unchanged by the forward; "
               f"activations saved for backward {memory.format_bytes(g['saved_for_backward_bytes'])} with grad vs "
               f"{memory.format_bytes(ng['saved_for_backward_bytes'])} under no_grad (fake-tensor estimate: "
               f"{memory.format_bytes(est['grad'])} vs {memory.format_bytes(est['no_grad'])}); parameters holding "
               f".grad after a forward: {g['params_with_grad_after_forward']} (grad), "
               f"{ng['params_with_grad_after_forward']} (no_grad): gradients come from backward, not forward.")
    return ("holds" if ok else "does not hold"), summary, evidence


@claim_check("C30")
def c30(ctx):
    """torch.ones(..., requires_grad=True) inside no_grad is a tracking leaf; ops on it inside the
    block are untracked; outside, it backpropagates."""
    with torch.no_grad():
        t = torch.ones(3, device=ctx.device, requires_grad=True)
        inside = t * 2
    outside = (t * 2).sum()
    outside.backward()
    evidence = {"factory_leaf": _tracking(t), "op_on_it_inside_block": _tracking(inside),
                "grad_after_backward_outside": t.grad.tolist() if t.grad is not None else None}
    ok = t.requires_grad and t.is_leaf and not inside.requires_grad and t.grad is not None
    summary = (f"torch.ones(3, requires_grad=True) inside no_grad: requires_grad {t.requires_grad}, leaf "
               f"{t.is_leaf}; t * 2 inside the block: requires_grad {inside.requires_grad}; used after the "
               f"block it received gradient {evidence['grad_after_backward_outside']}.")
    return ("holds" if ok else "does not hold"), summary, evidence


# --------------------------------------------------------------------------------------------
# what the article leaves out


@claim_check("X01")
def x01(ctx):
    """inference_mode: no version counter, no view tracking, a measured gain over no_grad
    (nogradlab.timing.compare), and inference tensors cannot be saved for backward."""
    dev = ctx.device
    with torch.no_grad():
        a = torch.ones(4, 4, device=dev)
        v = a[0]
        a.add_(1)
    ng = {"is_inference": a.is_inference(), "version_after_one_inplace": a._version,
          "view_is_tracked": v._is_view() and v._base is a}
    with torch.inference_mode():
        b = torch.ones(4, 4, device=dev)
        vb = b[0]
        b.add_(1)
    inf = {"is_inference": b.is_inference(), "version_counter": _error_text(lambda: b._version),
           "view_is_tracked": vb._is_view()}
    w = torch.randn(4, 4, device=dev, requires_grad=True)
    restriction = {"saved_for_backward (w * inference_tensor)": _error_text(lambda: (w * b).sum()),
                   "inplace_outside_inference_mode": _error_text(lambda: b.add_(1)),
                   "clone_is_a_normal_tensor": not b.clone().is_inference()}
    wl, model, x = _workload(ctx)

    def run(mode):
        def f():
            with modes.get(mode)():
                model(x)
        return f

    cmp = timing.compare({"no_grad": run("no_grad"), "inference_mode": run("inference_mode")},
                         baseline="no_grad", device=dev, rounds=int(ctx.params.get("rounds", 10)),
                         min_run_time=float(ctx.params.get("min_run_time", 0.3)), seed=ctx.seed)
    speedup, (lo, hi) = cmp.speedup["inference_mode"], cmp.ci["inference_mode"]
    evidence = {"no_grad_tensor": ng, "inference_tensor": inf, "restriction": restriction,
                "timing": {"workload": wl.name, "batch": x.shape[0], **cmp.to_dict()}}
    saved_err = restriction["saved_for_backward (w * inference_tensor)"]
    ok = (inf["is_inference"] and inf["version_counter"] is not None and not inf["view_is_tracked"]
          and ng["view_is_tracked"] and saved_err is not None)
    summary = (f"Under inference_mode tensors are inference tensors with no version counter "
               f"({inf['version_counter']}) and untracked views, where no_grad keeps both (version "
               f"{ng['version_after_one_inplace']} after one in-place op). Saving one for backward raised: "
               f"{(saved_err or 'nothing').split('. ')[0]}. "
               f"Gain over no_grad on {wl.name} {ctx.scale}: {speedup:.3f}x (95 % CI {lo:.3f}-{hi:.3f})")
    if lo <= 1 <= hi:
        summary += ": no difference resolved"
    if any(t.noisy for t in cmp.timings.values()):
        summary += " (noisy timings: IQR over 10 % of the median; rerun on a quiet machine)"
    summary += "."
    return ("holds" if ok else "does not hold"), summary, evidence


@claim_check("X02")
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
    evidence = {"main_thread_inside_no_grad": main_inside, "thread_started_inside_no_grad": child,
                "thread_that_set_grad_off": child_off, "main_thread_after_that": main_after}
    ok = child["grad_enabled"] and child["op"]["requires_grad"] and not main_inside and main_after
    summary = (f"A thread started inside no_grad had grad enabled ({child['grad_enabled']}) and tracked x * 2 "
               f"(grad_fn {child['op']['grad_fn']}); a thread calling set_grad_enabled(False) left the main "
               f"thread's mode on ({main_after}).")
    return ("holds" if ok else "does not hold"), summary, evidence


@claim_check("X03")
def x03(ctx):
    """``total += loss`` (a tensor) keeps every iteration's graph alive; ``loss.item()`` keeps
    nothing. Retained bytes after k iterations (nogradlab.memory.measure)."""
    wl, model, _ = _workload(ctx)
    batch = ctx.params.get("batch", wl.default_batch)
    ks = tuple(ctx.params.get("iterations", (1, 2, 4)))
    if len(ks) < 2 or any(workloads.check_batch(k) >= k2 for k, k2 in zip(ks, ks[1:])):
        raise ValueError(f"iterations must be at least two increasing positive integers, got {ks!r}")

    def loop(k, how):
        total = 0.0
        for _ in range(k):
            loss = wl.loss(model(wl.make_input(batch, ctx.device)), wl.make_target(batch, ctx.device))
            if how == "tensor, backward each step":
                loss.backward()
            total = total + (loss.item() if how == "item()" else loss)
        return total

    def retained_after(k, how):
        model.zero_grad(set_to_none=True)  # .grad made inside the probe: the same bytes for every k
        return memory.measure(lambda: loop(k, how), ctx.device).retained_bytes

    series = {}
    for how in ("tensor", "item()", "tensor, backward each step"):
        retained = [retained_after(k, how) for k in ks]
        per_iter = (retained[-1] - retained[0]) / (ks[-1] - ks[0])
        series[how] = {"iterations": list(ks), "retained_bytes": retained, "bytes_per_iteration": per_iter}
    model.zero_grad(set_to_none=True)
    t, it, bw = series["tensor"], series["item()"], series["tensor, backward each step"]
    grows = all(b > a for a, b in zip(t["retained_bytes"], t["retained_bytes"][1:]))
    ok = grows and t["bytes_per_iteration"] > 0 and it["retained_bytes"] == [0] * len(ks)
    evidence = {"workload": wl.name, "batch": batch, "mode": "grad on, no backward (a validation loop "
                "without no_grad)", "series": series}
    summary = (f"{wl.name} {ctx.scale} batch {batch}, grad on: accumulating the loss tensor retained "
               f"{memory.format_bytes(t['bytes_per_iteration'])} per iteration ({t['retained_bytes']} B after "
               f"{list(ks)} iterations); with .item() {memory.format_bytes(it['bytes_per_iteration'])} per "
               "iteration. "
               f"If backward runs each step (freeing the saved activations) the tensor sum retains "
               f"{memory.format_bytes(bw['bytes_per_iteration'])} per iteration.")
    return ("holds" if ok else "does not hold"), summary, evidence


@claim_check("X04")
def x04(ctx):
    """set_grad_enabled(flag) switches by a value; enable_grad inside no_grad re-enables
    tracking; every exit restores the mode that was there before."""
    x = torch.randn(3, device=ctx.device, requires_grad=True)
    conditional = {}
    for flag in (True, False):
        with torch.set_grad_enabled(flag):
            conditional[str(flag)] = bool((x * 2).requires_grad)
    trace = []
    with torch.no_grad():
        trace.append(("no_grad", torch.is_grad_enabled(), bool((x * 2).requires_grad)))
        with torch.enable_grad():
            trace.append(("enable_grad inside no_grad", torch.is_grad_enabled(), bool((x * 2).requires_grad)))
            with torch.no_grad():
                trace.append(("no_grad inside that", torch.is_grad_enabled(), bool((x * 2).requires_grad)))
            trace.append(("after inner no_grad exits", torch.is_grad_enabled(), bool((x * 2).requires_grad)))
        trace.append(("after enable_grad exits", torch.is_grad_enabled(), bool((x * 2).requires_grad)))
    trace.append(("after no_grad exits", torch.is_grad_enabled(), bool((x * 2).requires_grad)))
    previous = torch.is_grad_enabled()
    torch.set_grad_enabled(False)  # the function form: a global switch, no automatic restore
    function_form = torch.is_grad_enabled()
    torch.set_grad_enabled(previous)
    expected = [False, True, False, True, False, True]
    evidence = {"set_grad_enabled(flag) -> result requires_grad": conditional,
                "nesting": [{"step": s, "grad_enabled": g, "result_requires_grad": r} for s, g, r in trace],
                "set_grad_enabled(False) as a plain call stays off until switched back": not function_form}
    ok = conditional == {"True": True, "False": False} and [g for _, g, _ in trace] == expected \
        and [r for _, _, r in trace] == expected
    summary = (f"set_grad_enabled(True/False) gave requires_grad {conditional['True']}/{conditional['False']}; "
               "nesting no_grad > enable_grad > no_grad gave grad " + " > ".join(str(g) for _, g, _ in trace)
               + ", each exit restoring the previous mode.")
    return ("holds" if ok else "does not hold"), summary, evidence
