"""Notebook 08's exercises (the article's FAQ). The reference solutions and their checks."""
from __future__ import annotations

import torch
import torch.nn as nn

from nogradlab.lab.exercises.registry import exercise


def _critic():
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


# ----------------------------------------------------------------------------- 08.1: a gradient penalty


def _no_enable_grad(critic, x):
    x = x.detach().requires_grad_()
    (g,) = torch.autograd.grad(critic(x).sum(), x, create_graph=True)
    return ((g.norm(2, dim=1) - 1) ** 2).mean()


def _no_create_graph(critic, x):
    with torch.enable_grad():
        x = x.detach().requires_grad_()
        (g,) = torch.autograd.grad(critic(x).sum(), x)
        return ((g.norm(2, dim=1) - 1) ** 2).mean()


def _with_backward(critic, x):
    with torch.enable_grad():
        x = x.detach().requires_grad_()
        critic(x).sum().backward(create_graph=True)
        return ((x.grad.norm(2, dim=1) - 1) ** 2).mean()


@exercise("08.1", kind="code", wrong=[(_no_enable_grad, "enable_grad"), (_no_create_graph, "create_graph"),
                                      (_with_backward, "autograd.grad")])
def gradient_penalty(critic, x):
    with torch.enable_grad():  # the caller may be under no_grad (an evaluation loop)
        x = x.detach().requires_grad_()
        (grad_x,) = torch.autograd.grad(critic(x).sum(), x, create_graph=True)  # a graph of the gradient
        return ((grad_x.norm(2, dim=1) - 1) ** 2).mean()


@gradient_penalty.judge
def _(fn):
    if not callable(fn):
        return f"the answer should be a function gradient_penalty(critic, x), not a {type(fn).__name__}"
    critic, x = _critic(), torch.randn(6, 4, generator=torch.Generator().manual_seed(1))
    want = gradient_penalty.reference(critic, x)
    (want_g,) = torch.autograd.grad(want, critic[0].weight)
    critic.zero_grad(set_to_none=True)
    try:
        with torch.no_grad():  # called from an evaluation loop
            got = fn(critic, x)
    except RuntimeError as e:
        return ("called inside no_grad (as from an evaluation loop) it raised: the critic's forward "
                "recorded nothing, so there is no gradient to take; wrap the body in torch.enable_grad() "
                f"({str(e).split('.')[0]})")
    if any(p.grad is not None for p in critic.parameters()):
        return ("it filled the critic's .grad: .backward() accumulates into every parameter; take the "
                "input's gradient with torch.autograd.grad(out, x, create_graph=True)")
    if not isinstance(got, torch.Tensor) or got.numel() != 1:
        return "return the penalty as a one-element tensor: ((grad_x.norm(2, dim=1) - 1) ** 2).mean()"
    if not got.requires_grad:
        return ("the penalty has no graph: without create_graph=True, torch.autograd.grad returns the "
                "gradient as a constant, so backward of the penalty never reaches the critic's weights")
    if not torch.allclose(got.detach(), want.detach(), atol=1e-6):
        return (f"the penalty is {got.item():.4f}, expected {want.item():.4f}: the gradient of critic(x).sum() "
                "with respect to x, its norm per row (dim=1), minus 1, squared, averaged")
    (g,) = torch.autograd.grad(got, critic[0].weight)
    if not torch.allclose(g, want_g, atol=1e-6):
        return "the penalty's gradient with respect to the critic's weights is not the expected one"
    return None


# ----------------------------------------------------------------------------- 08.2: predict, then run


def _truth_08_2():
    p = torch.ones(3, requires_grad=True)
    with torch.no_grad():
        q = p * 2
    q.requires_grad_()
    (q * 3).sum().backward()
    return p.grad


@exercise("08.2", kind="predict", wrong=[
    (lambda: torch.full((3,), 6.0), "not recorded"),
    (lambda: torch.full((3,), 3.0), "q.grad"),
    (lambda: "error", "new leaf"),
])
def p_grad():
    return None  # p * 2 was not recorded; q.requires_grad_() made q a leaf of its own


@p_grad.judge
def _(a):
    truth = _truth_08_2()
    if a is None and truth is None:
        return None
    if isinstance(a, str):
        return ("it does not raise: q has no grad_fn, so q.requires_grad_() is allowed and makes q a new "
                "leaf; backward fills q.grad, and stops there")
    if isinstance(a, torch.Tensor):
        if torch.allclose(a.float(), torch.full((3,), 3.0)):
            return "3s are q.grad, the gradient of (q * 3).sum() with respect to q; the question is p.grad"
        return ("p * 2 ran inside no_grad: it was not recorded, so nothing links q back to p, and "
                "backward never reaches p; p.grad stays None")
    return "answer with a tensor, None, or the string \"error\""
