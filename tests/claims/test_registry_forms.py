"""A claim is one declaration in its nbNN module: one registration form, what generic code asks of it
declared with it (never by its id elsewhere), and knobs checked once, before any work."""
from __future__ import annotations

import ast
import dataclasses
import inspect
import re
from pathlib import Path

import pytest
import torch

from nogradlab import claims
from nogradlab.claims import measure, params
from nogradlab.claims.rules import Rule

PACKAGE = Path(claims.__file__).resolve().parents[1]
ID = re.compile(r"^[CX]\d\d$")


def _module_of(claim) -> str:
    return inspect.getmodule(claim.judge).__name__


def test_every_check_is_registered_with_the_one_form_of_the_guide():
    assert not hasattr(measure, "_check") and not hasattr(claims, "claim_check")
    for c in claims.all_claims():
        src = inspect.getsource(inspect.getmodule(c.judge))
        assert f"@{c.id}.measures\n" in src, f"{c.id}: its check is not registered with @{c.id}.measures"
    guide = (PACKAGE / "claims" / "README.md").read_text()
    assert "@C17.measures" in guide


def _bare(threads):
    return claims.Claim("T99", "test", "a test claim", None, "numeric", "nb", Rule("a rule."),
                        tiny_cpu_threads=threads)


def test_a_declared_tiny_cpu_thread_count_holds_while_the_check_runs_and_is_restored():
    before = torch.get_num_threads()
    c = _bare(1)
    c.measures(lambda ctx: {"threads": torch.get_num_threads()})
    assert c.measure(claims.Context(torch.device("cpu"), "tiny"))["threads"] == 1
    assert torch.get_num_threads() == before
    # not a tiny CPU run: torch's own count
    assert c.measure(claims.Context(torch.device("cpu"), "small"))["threads"] == before
    # a claim that declares none keeps torch's count even in a tiny run
    d = _bare(None)
    d.measures(lambda ctx: {"threads": torch.get_num_threads()})
    assert d.measure(claims.Context(torch.device("cpu"), "tiny"))["threads"] == before


def test_no_package_code_names_a_claim_id_outside_its_own_module():
    """A claim id as a whole string literal (a dict key, a comparison, an argument) appears only in
    the nbNN module that declares the claim; prose that mentions an id is not code."""
    own = {c.id: _module_of(c) for c in claims.all_claims()}
    for path in sorted(PACKAGE.rglob("*.py")):
        mod = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and ID.match(node.value):
                assert own.get(node.value) == mod, f"{mod}:{node.lineno} names {node.value!r} in code"


def test_an_unknown_knob_is_refused_naming_the_allowed_keys_before_any_work(monkeypatch):
    c = claims.get("C20")
    monkeypatch.setattr(c, "measure", lambda ctx: pytest.fail("the check ran"))
    with pytest.raises(ValueError, match=r"unknown knob 'bogus'; allowed: batch, batch_factor, .*workloads"):
        claims.check("C20", device="cpu", scale="tiny", bogus=1)
    with pytest.raises(ValueError, match=r"rounds must be an integer >= 2, got '3'"):
        claims.check("C20", device="cpu", scale="tiny", rounds="3")
    with pytest.raises(ValueError, match=r"workloads\[1\]: unknown workload 'vgg'; allowed: resnet50"):
        claims.check("C20", device="cpu", scale="tiny", workloads=["mlp", "vgg"])
    with pytest.raises(ValueError, match=r"batch_factor must be True or False"):
        claims.check("C20", device="cpu", scale="tiny", batch_factor="no")


def test_knobs_are_a_frozen_hashable_spec_read_like_a_dict():
    p = claims.Params.of({"workloads": ["mlp"], "rounds": 12})
    assert dict(p) == {"rounds": 12, "workloads": ("mlp",)}
    assert p.get("runs", 20) == 20 and "batch" not in p and p["rounds"] == 12
    assert hash(p) == hash(claims.Params.of({"rounds": 12, "workloads": ("mlp",)}))
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.values = ()
    ctx = claims.Context(torch.device("cpu"), "tiny", 0, {"reference": True})
    assert isinstance(ctx.params, claims.Params) and ctx.reference
    with pytest.raises(ValueError, match="allowed"):
        claims.Context(torch.device("cpu"), "tiny", 0, {"refrence": True})


def test_every_knob_a_check_reads_is_in_the_spec():
    read = set()
    for path in sorted((PACKAGE / "claims").glob("*.py")):
        src = path.read_text()
        read |= set(re.findall(r"ctx\.params(?:\.get\(|\[)\"(\w+)\"", src))
        read |= set(re.findall(r"_batches\(ctx, \"(\w+)\"", src))
    read |= set(measure._knobs(claims.Context(torch.device("cpu"), "tiny")))
    assert read and read <= set(params.KNOBS), sorted(read - set(params.KNOBS))


def test_claims_judged_on_estimates_declare_the_scale_of_their_estimates():
    for c in claims.all_claims():
        if c.basis in ("estimate", "mixed"):
            assert c.estimates_at == "full", c.id
    with pytest.raises(ValueError, match="estimates_at"):
        claims.declare("T98", section="x", paraphrase="p", kind="numeric", notebook="nb", rule=Rule("r."),
                       basis="estimate")
    assert "T98" not in claims.ids()


def test_checks_take_the_scale_of_their_estimates_from_their_declaration():
    for c in claims.all_claims():
        if c.estimates_at is not None:
            src = inspect.getsource(inspect.unwrap(c.measure))
            assert '"full"' not in src, f"{c.id}'s check writes the scale of its estimates as a literal"


def test_the_report_orders_key_charts_by_their_declared_rank():
    from nogradlab.run import report

    charts = report.key_charts()
    ranks = [claims.get(cid).chart_rank for cid, *_ in charts]
    assert ranks == sorted(ranks) and ranks[0] == 0
    assert report._lead_titles() == {charts[0][1]}


def test_the_shared_forward_condition_stops_at_every_declared_edge():
    """The condition's rounds go on until every claim that declares stop edges is decided: the union
    of the declarations, for a workload of the article's table and one outside it alike."""
    for name in ("mlp", "resnet50"):
        want = sorted({e for c in claims.all_claims() if c.stop_edges for e in c.stop_edges(name)})
        assert measure._condition_edges(name) == want and 1.0 in want


def test_a_knob_given_as_none_is_the_checks_default_as_a_notebook_parameter_left_at_none_passes_it():
    from nogradlab.claims.params import Params

    assert Params.of({"batches": None, "seq_lens": None, "runs": None}) == Params.of({})
    assert dict(Params.of({"batches": [1, 2], "runs": None})) == {"batches": (1, 2)}
    with pytest.raises(ValueError, match="unknown knob 'bogus'"):
        Params.of({"bogus": None})  # an unknown name is refused even when its value is None
