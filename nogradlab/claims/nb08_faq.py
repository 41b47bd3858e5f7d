"""Notebook 08, faq: the declarations and checks of C27, C29, C30.

Each claim is declared once here (``declare``) beside its check (``@C.measures``) and its judge
(``@C.judges``); see ``nogradlab/claims/README.md``.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from nogradlab.core import memory
from nogradlab.core import modes
from nogradlab.claims.ledger import declare
from nogradlab.claims.result import Judgement, number
from nogradlab.claims.probes import _error_text, _max_abs_diff, _tracking, _workload
from nogradlab.claims.rules import Rule
from nogradlab.estimate import fake

NOTEBOOK = "08_faq"


C27 = declare(
    "C27", section='FAQ', kind='semantic', notebook=NOTEBOOK,
    paraphrase='do not use no_grad where backward is needed, e.g. gradient penalties or adversarial attacks',
    figure=None,
    rule=Rule("Holds when a gradient penalty or adversarial step computed under no_grad has no "
                "gradient (and works without it); otherwise does not hold."))


@C27.measures
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
    return evidence


_C27_WEIGHT = "autograd.grad(penalty made under no_grad, weight)"
_C27_INPUT = "autograd.grad(output made under no_grad, input) (gradient penalty / adversarial)"


@C27.judges
def judge_c27(m, rule):
    v, change = m["loss_value"], m["grad_change_vs_no_penalty"]
    weight_err, input_err = m[_C27_WEIGHT], m[_C27_INPUT]
    for k in ("penalty_under_no_grad", "no_penalty"):
        number(v[k], f"loss_value.{k}")
    for k in ("penalty_under_no_grad", "penalty_with_grad"):
        number(change[k], f"grad_change_vs_no_penalty.{k}")
    ok = (v["penalty_under_no_grad"] != v["no_penalty"] and change["penalty_under_no_grad"] == 0
          and change["penalty_with_grad"] > 0 and weight_err is not None and input_err is not None)
    summary = (f"An L2 penalty under no_grad raised the loss from {v['no_penalty']:.4f} to "
               f"{v['penalty_under_no_grad']:.4f} but changed the gradient by {change['penalty_under_no_grad']:.3g} "
               f"(the same penalty with grad on: {change['penalty_with_grad']:.3g}); "
               f"autograd.grad through it raised: {weight_err}")
    return Judgement("holds" if ok else "does not hold", summary)


C29 = declare(
    "C29", section='FAQ', kind='semantic+numeric', notebook=NOTEBOOK,
    paraphrase='no_grad removes activation storage but not parameters or optimizer state',
    figure=None,
    rule=Rule("Holds when no_grad leaves parameters, their .grad and optimizer state byte-identical "
                "while removing activation storage; otherwise does not hold."))


@C29.measures
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
    est = {m: fake.estimate(wl, x.shape[0], ctx.device.type, mode=m, scale=ctx.scale).saved_bytes
           for m in ("grad", "no_grad")}
    return {"workload": wl.name, "batch": x.shape[0], "optimizer": "SGD(momentum=0.9)", "modes": rows,
            "estimate_saved_bytes": est}


@C29.judges
def judge_c29(m, rule):
    rows, est = m["modes"], m["estimate_saved_bytes"]
    g, ng = rows["grad"], rows["no_grad"]
    for r in (g, ng):
        for k in ("parameter_bytes", "optimizer_state_bytes", "saved_for_backward_bytes"):
            number(r[k], k)
    ok = (g["parameter_bytes"] == ng["parameter_bytes"]
          and g["optimizer_state_bytes"] == ng["optimizer_state_bytes"]
          and all(r["optimizer_state_unchanged"] and r["parameters_unchanged"] for r in rows.values())
          and g["saved_for_backward_bytes"] > 0 and ng["saved_for_backward_bytes"] == 0)
    summary = (f"{m['workload']} ({m.scale}): parameters {memory.format_bytes(g['parameter_bytes'])} and momentum "
               f"state {memory.format_bytes(g['optimizer_state_bytes'])} in both modes, "
               + ("unchanged by the forward" if all(r["optimizer_state_unchanged"] and r["parameters_unchanged"]
                                                    for r in rows.values()) else "CHANGED by a forward")
               + f"; saved for backward {memory.format_bytes(g['saved_for_backward_bytes'])} with grad (activations, "
               "and the input batch where the first layer saves it) vs "
               f"{memory.format_bytes(ng['saved_for_backward_bytes'])} under no_grad (fake-tensor estimate: "
               f"{memory.format_bytes(est['grad'])} vs {memory.format_bytes(est['no_grad'])}); parameters holding "
               f".grad after a forward: {g['params_with_grad_after_forward']} (grad), "
               f"{ng['params_with_grad_after_forward']} (no_grad): gradients come from backward, not forward.")
    return Judgement("holds" if ok else "does not hold", summary)


C30 = declare(
    "C30", section='FAQ', kind='semantic', notebook=NOTEBOOK,
    paraphrase='factory functions called with requires_grad=True inside no_grad still create tracking leaves',
    figure=None,
    rule=Rule("Holds when a factory call with requires_grad=True inside no_grad creates a leaf that "
                "requires grad; otherwise does not hold."))


@C30.measures
def c30(ctx):
    """torch.ones(..., requires_grad=True) inside no_grad is a tracking leaf; ops on it inside the
    block are untracked; outside, it backpropagates."""
    with torch.no_grad():
        t = torch.ones(3, device=ctx.device, requires_grad=True)
        inside = t * 2
    outside = (t * 2).sum()
    outside.backward()
    return {"factory_leaf": _tracking(t), "op_on_it_inside_block": _tracking(inside),
            "grad_after_backward_outside": t.grad.tolist() if t.grad is not None else None}


@C30.judges
def judge_c30(m, rule):
    t, inside, grad = m["factory_leaf"], m["op_on_it_inside_block"], m["grad_after_backward_outside"]
    ok = t["requires_grad"] and t["is_leaf"] and not inside["requires_grad"] and grad is not None
    summary = (f"torch.ones(3, requires_grad=True) inside no_grad: requires_grad {t['requires_grad']}, leaf "
               f"{t['is_leaf']}; t * 2 inside the block: requires_grad {inside['requires_grad']}; used after the "
               f"block it received gradient {grad}.")
    return Judgement("holds" if ok else "does not hold", summary)

