"""Every check's verdict rule, in one place, as data.

A :class:`Rule` names what the check compares and how the measured values become a verdict: the
article's band, a tolerance, a threshold, the minimum number of timing samples, what counts as a
tie, and how values are rounded before they are compared with a band. The checks read their
numbers from here (``RULES["C09"].band``...), so the sentence a reader sees and the code that
decides cannot drift apart; every :class:`~nogradlab.claims.Result` carries ``rule.text`` as its
``rule``, and ``claims.json`` stores it, so a reference column made by another rule can be marked.

General rules, shared by every timed comparison:

* **Ties.** Two timed cases whose 95 % confidence intervals overlap are a tie: neither is ranked
  above the other, and a speed ratio whose interval contains 1 reads "no clear difference".
* **Bands.** A value is compared with a band after rounding it the way the summary prints it
  (``rounding``), so a printed "1.4x" is inside "1.2-1.4x".
"""
from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass

__all__ = ["Rule", "RULES", "TIE", "get", "digest", "in_band", "rounded"]

#: what counts as a tie between two timed cases, in every check that ranks or compares timings
TIE = "overlapping 95 % confidence intervals are a tie (no ranking, 'no clear difference')"


@dataclass(frozen=True)
class Rule:
    text: str  # the rule as one short human sentence (shown in reports and notebooks)
    band: "tuple | None" = None  # the article's band the value is compared with
    tolerance: "float | None" = None  # an absolute or relative tolerance, as ``text`` says
    threshold: "float | None" = None  # a cut-off, as ``text`` says
    min_samples: "int | None" = None  # timing rounds (paired samples) per case, at least
    tie: str = ""  # what counts as a tie
    rounding: str = ""  # how a value is rounded before the band test ("pct0": whole %, "x1": 0.1x)
    lower_bound: bool = False  # the article's figure is a lower bound: above the band agrees too

    def to_dict(self) -> dict:
        return asdict(self)


def rounded(value: float, rounding: str) -> float:
    """``value`` as the summary prints it: ``"pct0"`` a fraction to whole percent (0.2049 -> 0.20),
    ``"x1"`` a factor to one decimal (1.4028 -> 1.4), ``"x2"`` to two decimals, ``""`` unchanged."""
    if rounding == "pct0":
        return round(value * 100) / 100
    if rounding == "x1":
        return round(value, 1)
    if rounding == "x2":
        return round(value, 2)
    if rounding == "":
        return value
    raise ValueError(f"unknown rounding {rounding!r}; allowed: pct0, x1, x2, ''")


def in_band(value: float, band: tuple, rounding: str = "", lower_bound: bool = False) -> bool:
    """Whether ``value``, rounded as printed, lies in ``band`` (or above it for a lower bound)."""
    v = rounded(value, rounding)
    lo, hi = (rounded(b, rounding) for b in band)
    return v >= lo and (lower_bound or v <= hi)


_ABOUT = "'about X %' is read as X +- 5 percentage points"
_SEMANTIC = ("holds when every probed case behaves as the article says; does not hold when the "
             "central case contradicts it")

RULES = {
    "C01": Rule("Holds when every tensor op, module call and function call on the thread that entered "
                "no_grad comes out untracked and a thread started inside does too; depends when only the "
                "entering thread is covered (grad mode is per thread); does not hold otherwise."),
    "C02": Rule("Holds when a no_grad forward has no grad_fn and fires the saved-tensor hook 0 times "
                "while the grad forward fires it; otherwise does not hold."),
    "C03": Rule("Per workload x batch, time saved = 1 - t(no_grad forward)/t(grad forward), eval mode, "
                "one shared timing per condition; a condition agrees when its 95 % CI reaches 20 % "
                "(above 40 % also agrees: 'cuts by 20-40 %'); holds if all agree, does not hold if none, "
                "depends otherwise. The transformer's fused fast path is reported separately.",
                band=(0.20, 0.40), min_samples=5, tie=TIE, rounding="pct0", lower_bound=True),
    "C04": Rule("Per workload and budget, the largest eval+no_grad batch is compared with the largest "
                "grad-enabled forward batch; holds when it is larger everywhere, depends when only in "
                "some conditions, does not hold when nowhere."),
    "C05": Rule("Holds when every tensor created or modified inside no_grad has requires_grad False; "
                "does not hold when any case keeps requires_grad True (e.g. an in-place op on a leaf's view)."),
    "C06": Rule("Holds when the article's literal example gives requires_grad False and grad_fn None."),
    "C07": Rule("Holds when operators run under no_grad (same outputs) and record no graph and no "
                "saved tensors."),
    "C08": Rule("Per workload and batch, activation bytes saved for backward are compared with "
                "parameter + gradient + optimizer-state bytes; holds when activations are larger "
                "everywhere, does not hold when nowhere, depends otherwise."),
    "C09": Rule("Holds when largest eval+no_grad batch / largest training batch under 12 GiB, printed to "
                "two decimals, lies in 2.0-3.0x ('about 2.5x' read as 2.5 +- 20 %); otherwise does not hold.",
                band=(2.0, 3.0), tolerance=0.2, rounding="x2"),
    "C10": Rule("Holds when torch.no_grad exists, works, and Variable(volatile=True) is ignored with a "
                "warning, as after the 0.4.0 migration; otherwise does not hold."),
    "C11": Rule("Not testable: an unsourced survey share; the mechanism (how often installed packages "
                "use no_grad) is counted as evidence only."),
    "C12": Rule("Holds when nesting changes the result or the mode (harmful); does not hold when nesting "
                "is harmless and one nested enter+exit costs under 5 % of the workload's forward; "
                "depends when it costs 5 % or more.", threshold=0.05),
    "C13": Rule("The survey behind it cannot be checked; the mechanism is judged: the throughput a "
                "whole-loop scope can gain over a per-batch one, (n-1) x t(enter+exit) / t(loop), printed to "
                f"whole %, holds when it reaches 'about 30 %' ({_ABOUT}), does not hold below; the direct "
                "loop timing with its CI is the cross-check.",
                band=(0.25, 0.35), rounding="pct0", tie=TIE),
    "C14": Rule("Holds when eval() changes outputs without touching grad mode and no_grad changes "
                "tracking without touching dropout/BatchNorm behaviour (a 2x2 grid); otherwise does not hold."),
    "C15": Rule("Holds when eval-mode outputs with and without no_grad agree within 1e-5 relative to the "
                "output's scale and predicted classes match (bitwise equality reported beside it); does "
                "not hold beyond that tolerance.", tolerance=1e-5),
    "C16": Rule("Not testable: '7 %' comes from an unnamed benchmark; the mechanism (eval() turns "
                "dropout off) is shown, and the share of variability it removes depends only on how "
                "much variance dropout caused, so it is no evidence for or against 7 %."),
    "C17": Rule("Time saved = 1 - t(no_grad forward)/t(grad forward) of the validation loop's forward "
                f"(the shared timing), against 'about 35 %' ({_ABOUT}) by its 95 % CI; does not hold if "
                "the loop's predictions differ with no_grad.",
                band=(0.30, 0.40), min_samples=5, tie=TIE, rounding="pct0"),
    "C18": Rule("Per feed-forward workload and batch, memory saved = 1 - total peak(no_grad)/total "
                "peak(grad forward); a condition agrees when it lies in 20-40 % (printed to whole %); "
                "above 40 % is counted separately, not as agreement; holds if all agree, does not "
                "hold if none, depends otherwise.", band=(0.20, 0.40), rounding="pct0"),
    "C19": Rule("Holds when the memory saved by no_grad grows with sequence length in every measured or "
                "estimated series; does not hold when in none; depends otherwise."),
    "C20": Rule("Each cell of the article's table: memory and batch factor (estimates at full size, 16 GiB "
                "virtual CUDA) must lie in the band as printed (whole %, 0.1x); speed = forward with grad "
                "vs forward without grad (shared timing) agrees when its 95 % CI overlaps the band. Holds "
                "if all cells agree, does not hold if none, depends otherwise; the training-step "
                "comparison is reported beside it and does not count.",
                band=None, rounding="pct0", tie=TIE, min_samples=5),
    "C21": Rule("Holds when, at the longest sequence of every series, the memory saved exceeds 40 % "
                "(printed to whole %); does not hold when in none; depends otherwise.",
                band=(0.40, 1.0), rounding="pct0", lower_bound=True),
    "C22": Rule("Holds when @torch.no_grad() covers the whole function, helpers, generator resumes and "
                "the bare decorator form; depends when only plain functions are covered."),
    "C23": Rule("Not testable for the 28 % / 10 % figures (no profiler reports 'autograd-related operator "
                "time' in a forward); the mechanism, total operator time with grad vs without, is measured "
                "with a 95 % CI.", tie=TIE, min_samples=5),
    "C24": Rule("Holds when autocast inside no_grad gives low-precision, untracked outputs with "
                "torch.autocast(device_type=...); a deprecation warning on the article's spelling is "
                "reported, not counted; depends only when the article's spelling fails or does nothing "
                "on a device where it should work; does not hold when the stacking itself fails."),
    "C25": Rule("Not testable: '87 %' and '2.1x' are unsourced survey figures; the mechanism (memory "
                "kept per request with and without no_grad, under several concurrent clients and when "
                "outputs are kept) is measured on a loopback server."),
    "C26": Rule("Holds when no_grad around the handler also covers worker threads; depends when it "
                "covers only the handler's own thread (workers must enter it themselves); does not hold "
                "when the handler's own call is tracked."),
    "C27": Rule("Holds when a gradient penalty or adversarial step computed under no_grad has no "
                "gradient (and works without it); otherwise does not hold."),
    "C28": Rule("Holds when no_grad outside autocast gives low-precision untracked outputs and the "
                "reverse nesting leaves later gradients intact; depends when only the outer form is safe."),
    "C29": Rule("Holds when no_grad leaves parameters, their .grad and optimizer state byte-identical "
                "while removing activation storage; otherwise does not hold."),
    "C30": Rule("Holds when a factory call with requires_grad=True inside no_grad creates a leaf that "
                "requires grad; otherwise does not hold."),
    "X01": Rule("Holds when inference_mode tensors skip version counting and cannot be saved for a later "
                "backward, as documented; otherwise does not hold."),
    "X02": Rule("Holds when a thread or pool worker started under no_grad runs with grad enabled "
                "(grad mode is thread-local); otherwise does not hold."),
    "X03": Rule("Holds when memory retained by a loop that accumulates loss tensors grows with the number "
                "of steps and .item() keeps it flat; otherwise does not hold."),
    "X04": Rule("Holds when set_grad_enabled(flag) and enable_grad() nest and restore as documented; "
                "otherwise does not hold."),
    "X05": Rule("Per workload and batch, forward speedups over grad (shared timing, eval mode) with 95 % "
                "CIs; a lever beats plain no_grad only when its CI lies wholly above no_grad's (overlap "
                "is a tie) and it is at least 5 % faster. Holds when a lever beats no_grad in every "
                "condition, does not hold in none, depends otherwise.", threshold=0.05, min_samples=5, tie=TIE),
}


def get(claim_id: str) -> Rule:
    try:
        return RULES[claim_id]
    except KeyError:
        raise ValueError(f"no rule for claim {claim_id!r}; allowed: {', '.join(RULES)}") from None


def digest(claim_id: "str | None" = None) -> str:
    """A short fingerprint of one claim's rule sentence (or of all of them): a reference made by
    another rule has another fingerprint."""
    text = RULES[claim_id].text if claim_id else "\n".join(f"{k}: {r.text}" for k, r in sorted(RULES.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:12]
