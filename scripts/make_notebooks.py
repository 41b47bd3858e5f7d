#!/usr/bin/env python
"""Write the notebooks in notebooks/ from this script, so that they stay clean (no outputs, no
execution counts), share the same first cells, and change only through reviewed Python.

    python scripts/make_notebooks.py           # (re)write every notebook
    python scripts/make_notebooks.py --check   # exit 1 if a notebook differs from what this writes

Every notebook starts with the same self-contained import cell (BOOTSTRAP), then a cell tagged
``parameters`` (papermill replaces it), then ``notebook.setup(...)``, which validates them at once.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[1]
NB_DIR = REPO / "notebooks"
sys.path.insert(0, str(REPO))

from nogradlab import claims  # noqa: E402

BOOTSTRAP = '''\
# Make `nogradlab` importable: the installed package, else the repository this notebook sits in.
import importlib.util, pathlib, sys
if importlib.util.find_spec("nogradlab") is None:
    _root = next((p for p in (pathlib.Path.cwd(), *pathlib.Path.cwd().parents)
                  if (p / "nogradlab" / "__init__.py").is_file()), None)
    if _root is None:
        raise ImportError(
            "nogradlab is not installed and this notebook is not inside a nogradlab checkout.\\n"
            "Install it once, then restart the kernel:\\n"
            "    pip install 'nogradlab @ git+<URL of the nogradlab repository>'\\n"
            "or clone the repository and run `make lab` there.")
    sys.path.insert(0, str(_root))
import nogradlab
print("nogradlab", nogradlab.__version__, "from", pathlib.Path(nogradlab.__file__).parent)'''

TITLES = {
    "00_index": "nogradlab: what torch.no_grad really does, measured",
    "01_what_no_grad_does": "What no_grad actually does",
    "02_inside_the_engine": "Inside the engine: what autograd stops saving",
    "03_scoping_no_grad": "Where to put no_grad: scope, nesting and loops",
    "04_eval_vs_no_grad": "model.eval() and no_grad: two different switches",
    "05_memory_and_speed_by_workload": "Memory and speed by workload",
    "06_decorators_contexts_and_autocast": "Decorators, contexts and autocast",
    "07_production_serving": "no_grad in a real server",
    "08_faq": "The article's FAQ, checked",
    "09_beyond_no_grad": "Beyond no_grad: inference_mode and the bigger levers",
}

SECTION = {  # the article's section each notebook answers
    "01_what_no_grad_does": "section 1", "02_inside_the_engine": "section 2",
    "03_scoping_no_grad": "section 3", "04_eval_vs_no_grad": "section 4",
    "05_memory_and_speed_by_workload": "section 5", "06_decorators_contexts_and_autocast": "section 6",
    "07_production_serving": "section 7", "08_faq": "the FAQ",
    "09_beyond_no_grad": "what the article leaves out",
}


# --------------------------------------------------------------------------------------------
# cell helpers


def md(text: str):
    return nbformat.v4.new_markdown_cell(text.strip("\n"))


def code(src: str, tags=()):
    cell = nbformat.v4.new_code_cell(src.strip("\n"))
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


def claim_md(cid: str, text: str = ""):
    """The claim as a heading: our paraphrase, the article's figure labelled as the article's."""
    c = claims.get(cid)
    fig = f"  \n*The article's figure:* **{c.figure}**" if c.figure else ""
    body = f"\n\n{text.strip()}" if text.strip() else ""
    where = {"FAQ": "the article's FAQ", "beyond": "not in the article"}.get(c.section, f"article section {c.section}")
    return md(f"## {cid} — {c.paraphrase}\n\n*{where[0].upper() + where[1:]}; kind: {c.kind}.*{fig}{body}")


def check(cid: str, extra: str = "", show: str = ""):
    """The cell that runs a claim's check in this run and shows its result."""
    var = f"r_{cid.lower()}"
    args = f'"{cid}", device=device, scale=scale, seed=seed' + (f", {extra}" if extra else "")
    tail = f"\n{show}" if show else f"\n{var}"
    return code(f"{var} = claims.check({args}){tail}")


def head(stem: str, intro: str, params: str, setup_args: str = ""):
    """Title, import cell, parameters cell and the setup cell that validates them."""
    extra = f", {setup_args}" if setup_args else ""
    return [
        md(f"# {TITLES[stem]}\n\n{intro.strip()}"),
        code(BOOTSTRAP),
        md("Parameters: `device` is `auto`, `cpu`, `cuda`, `cuda:N` or `mps`; `scale` is `auto` (full "
           "size on a GPU, tiny on a CPU), `tiny`, `small` or `full`. papermill and `make run` replace "
           "the next cell."),
        code(f'device = "auto"\nscale = "auto"\nseed = 0\n{params.strip()}'.strip(), tags=["parameters"]),
        code("import torch\nfrom nogradlab import claims, notebook, plots\n\n"
             f"device, scale = notebook.setup(device=device, scale=scale, seed=seed{extra})"),
    ]


# --------------------------------------------------------------------------------------------
# the notebooks


def nb_index():
    rows = []
    for stem, ids in claims.NOTEBOOKS.items():
        rows.append(f"| [{TITLES[stem]}]({stem}.ipynb) | {SECTION[stem]} | {', '.join(ids)} |")
    table = "\n".join(rows)
    return [
        md(f"""
# {TITLES['00_index']}

A widely shared article promises that wrapping inference in `torch.no_grad()` makes it faster and
lighter, and backs that up with figures. These notebooks take it apart claim by claim: each claim gets
an id, a check that runs on **your** hardware, and a verdict computed from that run — *holds*, *does not
hold*, *depends* (true under some measured conditions only) or *not testable* (a statistic with no
source; where a mechanism sits behind it, that mechanism is tested instead).

Nothing here is a stored number: every figure you see was measured when the notebook ran, and is
labelled with the device, the torch version and the scale it ran at. Figures quoted from the article are
marked as the article's.
"""),
        md("""
## How to run it

* `make run` — installs what is needed, executes every notebook and writes `build/report.html` with
  every verdict beside the article's figure.
* `make test` — the package's tests, then every notebook twice (nbval, and papermill on a tiny CPU
  configuration with time and memory limits).
* `make lab` — opens this collection in JupyterLab.
* **Binder / Colab** — open a notebook there and run its first cell: it imports `nogradlab` from the
  checkout it sits in, or tells you the one `pip install` command to run if the package is missing.

Every notebook has a `parameters` cell (`device`, `scale`, `seed` and what it sweeps), so papermill can
run it headless, e.g. `papermill 05_memory_and_speed_by_workload.ipynb out.ipynb -p device cuda -p scale
full`. On a CPU the default scale is tiny (models shrunk so a pass takes well under a second); on a GPU
it is the full size the article talks about.
"""),
        md(f"""
## The notebooks, in the article's order

| notebook | answers | claims checked there |
|---|---|---|
{table}

Each claim is checked in exactly one notebook. The table below is read from the package's registry
(`nogradlab.claims`), so it cannot drift from the checks.
"""),
        code(BOOTSTRAP),
        code('device = "auto"\nscale = "auto"\nseed = 0', tags=["parameters"]),
        code("import pandas as pd\nfrom nogradlab import claims, notebook\n\n"
             "device, scale = notebook.setup(device=device, scale=scale, seed=seed)\n"
             "pd.DataFrame([{\"id\": c.id, \"section\": c.section, \"claim (our words)\": c.paraphrase,\n"
             "               \"article's figure\": c.figure or \"\", \"kind\": c.kind, \"notebook\": c.notebook}\n"
             "              for c in claims.all_claims()]).set_index(\"id\")"),
    ]



def nb_01():
    stem = "01_what_no_grad_does"
    return head(stem, """
The article opens (its section 1) with a handful of promises about `torch.no_grad()`: it switches gradient
tracking off for everything in the block, no graph is built, inference gets faster and bigger batches
fit. It adds a rule about which tensors end up with `requires_grad=False`, with an example. This
notebook checks each promise on this machine.
""", "batch = None  # batch of the live-memory picture; None: the workload's default", "batch=batch") + [
        md("""
### The article's example, first by hand

A tensor that tracks gradients, multiplied inside the block. The printout shows what autograd records.
"""),
        code("""
w = torch.ones(3, requires_grad=True)
with torch.no_grad():
    y = w * 3
z = w * 3  # the same product with grad on
print("inside no_grad :", "requires_grad", y.requires_grad, "grad_fn", y.grad_fn)
print("outside        :", "requires_grad", z.requires_grad, "grad_fn", z.grad_fn)
"""),
        claim_md("C06", "The same example as a check: it records the tracking flags inside and outside the block."),
        check("C06"),
        code("""
ev = r_c06.evidence
assert ev["inside_no_grad"]["requires_grad"] is False and ev["inside_no_grad"]["grad_fn"] is None
assert ev["control_with_grad"]["grad_fn"] is not None  # the control: tracking does happen outside
"""),
        claim_md("C01", """
"Everything inside the block" needs one qualification: the grad mode is a per-thread setting. The
check runs an op, a module and a function inside the block on this thread, and the same op in a thread
started inside the block.
"""),
        check("C01"),
        code("""
ev = r_c01.evidence
assert ev["this_thread"]["grad_enabled"] is False
assert not any(ev["this_thread"][k]["requires_grad"] for k in ("op", "module", "function_call"))
print("a thread started inside the block had grad enabled:", ev["thread_started_inside_block"]["grad_enabled"])
print("verdict:", r_c01.verdict)
"""),
        claim_md("C02", """
Two witnesses that nothing is recorded: the output has no `grad_fn`, and autograd's saved-tensor hook
(called once for every tensor kept for backward) is never called.
"""),
        check("C02"),
        code("""
runs = r_c02.evidence["runs"]
assert runs["no_grad"]["grad_fn"] is None and runs["no_grad"]["saved_tensor_hook_calls"] == 0
assert runs["grad"]["saved_tensor_hook_calls"] > 0  # the control
runs
"""),
        md("""
### What "nothing is stored" looks like

Live tensor memory during one ResNet-50 forward pass at this run's scale, measured event by event. With grad
on, every layer's saved activations stay alive until the pass ends; under `no_grad` (and
`inference_mode`, see notebook 09) each intermediate is freed as soon as the next layer has used it, so
the curve saws up and down instead of climbing.
"""),
        code("""
from nogradlab import memory, workloads

wl = workloads.get("resnet50", scale)
model = wl.build(device).eval()
x = wl.make_input(batch or wl.default_batch, device)
reports = memory.measure_modes(lambda: model(x), ("grad", "no_grad", "inference_mode"), device,
                               method="storage", timeline=True)
for r in reports.values():
    print(r)
plots.timeline(reports, device=device, scale=scale, title=f"Live memory during one {wl.name} forward pass")
"""),
        claim_md("C05", """
New results of operations are untracked, as the article says. The check also tries the other half of
the sentence, tensors *modified* inside the block, plus views and factory calls.
"""),
        check("C05"),
        code("""
import pandas as pd

cases = pd.DataFrame(r_c05.evidence["cases"]).set_index("case")
assert not cases.loc["result of an op on a tracked tensor (w * 2)", "requires_grad"]
assert cases.loc["tracked leaf modified in place (w.add_(1))", "requires_grad"]  # optimizers rely on this
cases
"""),
        claim_md("C03", """
Timed as the same forward pass with grad on and off, interleaved round by round so that machine noise
hits both alike; the speedup comes with a bootstrap confidence interval. On a shared CPU the interval
is wide: read the interval, not the point.
"""),
        check("C03"),
        code("""
import pandas as pd

pd.DataFrame(r_c03.evidence["rows"])[["workload", "batch", "grad_ms", "no_grad_ms", "time_saved", "time_saved_ci",
                                      "noisy"]]
"""),
        claim_md("C04", """
Bigger batches fit when less is kept alive, as the picture above suggests. The check searches the
largest batch that fits GPU-sized budgets, for a training step, a forward with grad and a forward under
`no_grad` (on a GPU by real allocation; elsewhere exactly, from fake tensors on a virtual GPU), and
checks a small CPU budget against real runs.
"""),
        check("C04"),
        code("""
ev = r_c04.evidence
assert all(c["eval+no_grad"] >= c["grad"] for c in ev["conditions"])  # never a smaller batch under no_grad
plots.for_claim(r_c04)  # the GPU-sized budgets, full-size models
"""),
    ]


def nb_02():
    stem = "02_inside_the_engine"
    return head(stem, """
Section 2 of the article explains where the saving comes from: operators still run, but autograd stops
keeping their inputs and intermediate results for a later backward pass. It then sizes the effect on a
GPU, dates the idiom, and quotes a usage statistic. Each part is checked here.
""", "budget_gib = 12  # the article's GPU size, for the budget explorer", "budget_gib=budget_gib") + [
        claim_md("C07", """
The check runs the same forward twice, measuring every storage autograd saves for backward, and
compares the outputs.
"""),
        check("C07"),
        code("""
ev = r_c07.evidence
assert ev["max_abs_output_diff"] <= 1e-5  # the operators ran and computed the same thing
print("largest output difference, grad vs no_grad:", ev["max_abs_output_diff"])
assert ev["reports"]["grad"]["saved_bytes"] > 0 and ev["reports"]["no_grad"]["saved_bytes"] == 0
"""),
        claim_md("C08", """
Training memory is made of the parameters, their gradients, the optimizer's state and the activations
saved for backward. Which one dominates depends on the model and the batch size; the check measures
each part per workload.
"""),
        check("C08"),
        code("""
import pandas as pd

parts = pd.DataFrame(r_c08.evidence["rows"])
parts[["workload", "batch", "activation_bytes", "params_grads_optimizer_bytes", "activation_share_of_peak",
       "activations_exceed_the_rest"]]
"""),
        claim_md("C09", """
The article's figure is for a GPU with 12 GB of memory. The check finds the largest batch that fits a
budget of that size for a full training step and for an eval-mode `no_grad` forward (on a GPU by real
allocation, anywhere else exactly from fake tensors) and reports their ratio.
"""),
        check("C09"),
        code("""
plots.for_claim(r_c09)
"""),
        md("""
### Try other budgets

The budget explorer answers the same question for any budget, workload and mode (from fake-tensor
estimates, so no GPU is needed). In a live notebook it shows a slider; headless it computes once.
"""),
        code("""
from nogradlab import widgets

# full-size models: a GPU budget only means something at the article's sizes (estimates need no GPU)
widgets.budget_explorer("resnet50", scale="full", device="cuda", budget_gib=budget_gib,
                        modes=("train", "grad", "eval+no_grad"))
"""),
        claim_md("C10", "A historical claim: nothing to measure, but the check cites the sources and shows "
                 "what this torch does with the old `volatile` flag that `no_grad` replaced."),
        check("C10"),
        code("""
ev = r_c10.evidence
assert ev["torch.no_grad_exists"] and ev["no_grad_stops_tracking"]
ev["sources"]
"""),
        claim_md("C11", """
The article gives no source or method for this share. It cannot be reproduced, so the verdict is
*not testable*; the check shows the mechanism behind "framework internals use it" instead.
"""),
        check("C11"),
        code("""
assert r_c11.verdict == "not testable"
r_c11.evidence["mechanism"]
"""),
    ]


def nb_03():
    stem = "03_scoping_no_grad"
    return head(stem, """
Section 3 of the article is about scope: where the block should go, whether nesting it hurts, and how
much a wide scope gains over a narrow one. It also leaves out two things every validation loop meets:
losses accumulated as tensors, and switching grad on and off conditionally.
""", "batch_sizes = [2]\nrepeats = 5", "batch_sizes=batch_sizes, repeats=repeats") + [
        claim_md("C12", """
Nesting is legal; the question is whether it costs anything. The check times entering and leaving the
context, on its own and inside another one, against one forward pass.
"""),
        check("C12"),
        code("""
ev = r_c12.evidence
assert ev["nested_result_bitwise_equal"] and ev["grad_off_after_inner_exit"]
print(f"enter+exit inside no_grad: {ev['nested_enter_exit']['median'] * 1e6:.2f} us; "
      f"one forward: {ev['forward']['median'] * 1e3:.3f} ms")
"""),
        md("""
### Measure a cell yourself

The package's IPython extension adds two cell magics: `%%memory` (what a cell allocates, saves for
backward and leaves alive) and `%%modes` (the same cell under several grad modes, timed in interleaved
rounds). Here, a whole validation pass inside one block: what stays alive is the outputs, not a graph.
"""),
        code("""
%load_ext nogradlab
from nogradlab import workloads

wl = workloads.get("mlp", scale)
model = wl.build(device).eval()
batches = [wl.make_input(b, device) for b in batch_sizes * repeats]
"""),
        code("""
%%memory --device {device} --out scoped
with torch.no_grad():
    outputs = [model(xb) for xb in batches]
"""),
        code("""
assert scoped.saved_bytes == 0
print(scoped)
"""),
        claim_md("C13", """
The article cites an unnamed survey for this. The mechanism can be tested: the same validation loop
timed with one scope around the whole loop, one scope per batch, and redundantly nested scopes.
"""),
        check("C13"),
        code("""
ev = r_c13.evidence
assert ev["same_accuracy"]  # the scope changes the time, never the result
ev["correct"]
"""),
        claim_md("X03", """
A validation loop that sums losses as tensors (`total += loss`) keeps every iteration's graph alive
when grad is on. The check measures what stays allocated after a few iterations.
"""),
        check("X03"),
        code("""
import pandas as pd

series = r_x03.evidence["series"]
assert series["item()"]["bytes_per_iteration"] == 0
assert series["tensor"]["bytes_per_iteration"] > 0
pd.DataFrame({how: s["retained_bytes"] for how, s in series.items()}, index=series["tensor"]["iterations"])
"""),
        claim_md("X04", """
`torch.set_grad_enabled(flag)` switches by a value (handy when one function serves training and
evaluation), and `torch.enable_grad()` turns tracking back on inside a `no_grad` block.
"""),
        check("X04"),
        code("""
import pandas as pd

steps = pd.DataFrame(r_x04.evidence["nesting"])
assert list(steps["grad_enabled"]) == [False, True, False, True, False, True]
steps
"""),
    ]


def nb_04():
    stem = "04_eval_vs_no_grad"
    return head(stem, """
Section 4 of the article separates two switches that are often confused: `model.eval()` changes what
some layers compute (dropout, batch normalisation), `no_grad` changes what autograd records. It then
quotes a benchmark for each. The grid below shows the two switches are independent.
""", "runs = 20  # repeated evaluations for the spread of the metric (C16)", "runs=runs") + [
        claim_md("C14", """
A small network with `Dropout` and `BatchNorm`, run in every combination of train/eval and
grad/no_grad on the same input (same dropout mask).
"""),
        check("C14"),
        code("""
grid = r_c14.evidence["grid"]
assert all(c["max_abs_diff_vs_same_model_mode_grad"] == 0 for c in grid)  # no_grad: same outputs
assert all((c["saved_bytes"] > 0) == (c["grad_mode"] == "grad") for c in grid)  # ...but nothing saved
plots.for_claim(r_c14)
"""),
        claim_md("C15", """
Compared in eval mode, with and without `no_grad`, on the larger workloads. Equal does not
always mean bitwise equal: a model may take a different kernel when grad is off.
"""),
        check("C15"),
        code("""
import pandas as pd

models = pd.DataFrame(r_c15.evidence["models"]).set_index("workload")
assert (models["max_abs_diff"] <= 1e-4 * models["max_abs_output"].clip(lower=1.0)).all()
models
"""),
        claim_md("C16", """
The article quotes a benchmark without a source. The mechanism behind it: in train mode dropout makes
every evaluation random, in eval mode it does not. The check measures the spread of a metric over
repeated evaluations in both modes.
"""),
        check("C16", "runs=runs"),
        code("""
ev = r_c16.evidence
assert ev["std"]["eval"] == 0  # eval mode: dropout is off, every run gives the same metric
assert ev["train_no_grad_identical_to_train"]  # no_grad does not touch dropout
ev["std"]
"""),
        claim_md("C17", """
A validation loop timed eval-only and eval + `no_grad`, and the metric compared between the two.
"""),
        check("C17"),
        code("""
ev = r_c17.evidence
print("same predictions with and without no_grad:", ev["same_predictions"])
ev["accuracy"]
"""),
    ]


def nb_05():
    stem = "05_memory_and_speed_by_workload"
    return head(stem, """
Section 5 of the article is where its numbers are: a range of memory savings for feed-forward nets, a
trend for transformers, and a table of model classes measured on a GPU (the article's setting: a GPU
with 16 GB). Each figure is measured here beside the article's.
""", "batch_sizes = None  # None: each workload's own sweep (C18)\nseq_lens = None  # None: the checks' own lengths (C19, C21)",
                "batch_sizes=batch_sizes, seq_lens=seq_lens") + [
        claim_md("C18", """
Peak memory of a forward pass with grad vs under `no_grad` (eval mode in both), over a sweep of batch
sizes: measured on the models at this run's scale, and estimated exactly at the article's sizes. The
peak includes the weights and the input, which are there in both modes.
"""),
        check("C18", "batches=batch_sizes"),
        code("""
plots.for_claim(r_c18)
"""),
        md("""
The same forward pass at the article's ResNet-50 size, with `inference_mode` beside `no_grad`: exact
estimates from fake tensors on a virtual GPU, so nothing is allocated and no GPU is needed.
"""),
        code("""
from nogradlab.claims.numbers import estimate_sweep

rows = estimate_sweep("resnet50", [1, 8, 32], ("eval+grad", "eval+no_grad", "eval+inference_mode"))
plots.memory_vs_batch(rows, device="virtual CUDA device (exact estimates)", scale="full", value="total_peak_bytes",
                      title="Peak memory of one forward pass, weights and input included")
"""),
        claim_md("C19", "The saving against the sequence length, on the transformer workload."),
        check("C19", "seq_lens=seq_lens"),
        claim_md("C21", "Read off the same sweep: from which length on does the saving pass the article's mark?"),
        check("C21", "seq_lens=seq_lens"),
        code("""
plots.for_claim(r_c21)
"""),
        claim_md("C20", """
Every cell of the table is measured: memory saved, speed gained and the batch-size factor, training
step vs eval + `no_grad` forward. Memory and batch factor are exact estimates at the article's model
sizes on a GPU of the article's size; speed is timed on this run's device and scale. Note that the
table's third row calls the U-Net a recurrent CNN; a U-Net has no recurrence (it is a convolutional
encoder-decoder with skip connections).
"""),
        check("C20"),
        code("""
plots.for_claim(r_c20)  # grey: the article's bands; blue: this run
"""),
        md("""
### Explore one workload

The explorer measures memory and time of one workload under several modes. In a live notebook it has
controls and a *Measure* button; headless it measures once with the values below.
"""),
        code("""
from nogradlab import widgets

widgets.explorer("mlp", scale=scale, device=device, modes=("grad", "no_grad", "inference_mode"),
                 rounds=5, min_run_time=0.1)
"""),
    ]


def nb_06():
    stem = "06_decorators_contexts_and_autocast"
    return head(stem, """
Section 6 of the article moves from the block to other spellings: the decorator, the profiler as a
witness, and `no_grad` stacked with mixed precision. The FAQ's question on stacking the two belongs
here as well.
""", "") + [
        claim_md("C22", """
Besides an ordinary function, the check covers a helper called from the decorated function, an
exception leaving it, a decorated generator (its caller runs between resumes) and the decorator
written without parentheses.
"""),
        check("C22"),
        code("""
ev = r_c22.evidence
assert not any(ev["function"].values())  # grad off throughout the call, results untracked
assert ev["grad_after_call"] and ev["grad_after_exception"]
assert ev["generator"]["grad_inside_at_each_resume"] == [False, False]
ev["generator"]
"""),
        md("""
A decorated function ignores the grad mode its caller is in: the `%%modes` magic below runs the same
call with grad on and under `no_grad`, and autograd saves nothing in either.
"""),
        code("""
%load_ext nogradlab
from nogradlab import workloads

wl = workloads.get("mlp", scale)
model = wl.build(device).eval()
x = wl.make_input(wl.default_batch, device)

@torch.no_grad()
def predict(batch):
    return model(batch).argmax(dim=1)
"""),
        code("""
%%modes grad no_grad --device {device} --rounds 3 --min-run-time 0.05 --out decorated
labels = predict(x)
"""),
        code("""
assert all(report.saved_bytes == 0 for report in decorated.memory.values())
"""),
        claim_md("C23", """
Measured with PyTorch's profiler: the share of operator time spent in autograd bookkeeping with and
without `no_grad`, the operator counts, and a training step for reference (where backward runs).
"""),
        check("C23"),
        code("""
import pandas as pd

pd.DataFrame({(name, mode): {k: v for k, v in prof.items() if k in ("ops", "self_cpu_us", "autograd_share")}
              for name, runs in r_c23.evidence["profiles"].items() for mode, prof in runs.items()})
"""),
        claim_md("C24", """
The article spells it `torch.cuda.amp.autocast()`. The check runs that spelling and the current one,
`torch.autocast(device_type=...)`, inside `no_grad`, on the CPU (bfloat16) and on CUDA when present.
"""),
        check("C24"),
        code("""
import pandas as pd

ev = r_c24.evidence
assert all(run["ok"] for run in ev["torch.autocast"])  # low-precision outputs, no graph
pd.DataFrame(ev["torch.autocast"])
"""),
        claim_md("C28", """
With `no_grad` outside and autocast inside, inference is safe. The reverse nesting (autocast outside, a
`no_grad` forward and then a training forward inside it) once lost gradients through autocast's cache
of casted weights; the check reports what this torch does.
"""),
        check("C28"),
        code("""
ev = r_c28.evidence
assert ev["outer_no_grad_inner_autocast"]["requires_grad"] is False
print("reverse nesting, gradient intact:",
      {k: v["gradient_intact"] for k, v in ev["reverse_nesting"].items()})
"""),
    ]


def nb_07():
    stem = "07_production_serving"
    return head(stem, """
Section 7 of the article turns to serving. Its statistics have no source, but the mechanism behind
them can be exercised: a real HTTP server (Tornado, which Jupyter already ships) on this machine,
answering a bounded number of requests with and without `no_grad`.
""", "requests = 8  # requests per server variant (C25)", "requests=requests") + [
        claim_md("C25", """
The check starts a server on the loopback interface, sends it requests, and measures the memory each
request leaves behind, with the handler in `no_grad` and without, and when handler outputs are kept.
"""),
        check("C25", "requests=requests"),
        code("""
import pandas as pd

ev = r_c25.evidence
assert ev["summaries"]["no_grad"]["saved_bytes_per_request"] == 0
assert ev["summaries"]["grad"]["saved_bytes_per_request"] > 0
pd.DataFrame(ev["summaries"]).T[["requests", "saved_bytes_per_request", "retained_bytes_per_request",
                                 "held_bytes_after_last", "held_growth_per_request"]]
"""),
        claim_md("C26", """
Putting `no_grad` around the whole handler is sound advice, with one gap: grad mode is per thread, so a
handler that hands the model call to a thread pool must set the mode inside the worker.
"""),
        check("C26"),
        code("""
h = r_c26.evidence["handlers"]
assert h["handler wrapped in no_grad, model called inline"]["requires_grad"] is False
assert h["handler wrapped in no_grad, worker enters no_grad itself"]["requires_grad"] is False
print("model call in a pool worker tracked:",
      h["handler wrapped in no_grad, model call submitted to a thread pool"]["requires_grad"])
"""),
        md("""
The same gap on the real server: its handler is under `no_grad`, but hands the model call to a worker
thread, once as is and once with the worker entering `no_grad` itself.
"""),
        code("""
from nogradlab import serving

pool = serving.compare(("thread_pool", "thread_pool_fixed"), n=2, scale=scale, device=device)
pd.DataFrame({v: r.summary() for v, r in pool.items()}).T[["outputs_requiring_grad", "saved_bytes_per_request",
                                                            "model_threads"]]
"""),
        claim_md("X02", """
The general rule behind the previous check: a thread does not inherit the grad mode of the thread
that started it, and changing the mode in one thread leaves the others alone.
"""),
        check("X02"),
        code("""
ev = r_x02.evidence
assert ev["thread_started_inside_no_grad"]["grad_enabled"] is True
assert ev["main_thread_after_that"] is True
"""),
    ]


def nb_08():
    stem = "08_faq"
    return head(stem, """
The article ends with questions and answers. This notebook checks the ones on when not to use
`no_grad`, what memory it does not remove, and how factory functions behave inside it. (Whether outputs
change is checked in notebook 04, stacking with autocast in notebook 06.)
""", "") + [
        claim_md("C27", """
A gradient penalty computed inside `no_grad` still changes the loss value, but no gradient flows
through it; asking autograd for its gradient fails outright.
"""),
        check("C27"),
        code("""
ev = r_c27.evidence
assert ev["grad_change_vs_no_penalty"]["penalty_under_no_grad"] == 0
assert ev["grad_change_vs_no_penalty"]["penalty_with_grad"] > 0
ev["loss_value"]
"""),
        claim_md("C29", """
After one training step (so the optimizer has momentum buffers), the check compares the parameter and
optimizer-state bytes in both modes with the activation bytes saved for backward.
"""),
        check("C29"),
        code("""
import pandas as pd

rows = r_c29.evidence["modes"]
assert rows["grad"]["parameter_bytes"] == rows["no_grad"]["parameter_bytes"]
assert rows["grad"]["saved_for_backward_bytes"] > 0 and rows["no_grad"]["saved_for_backward_bytes"] == 0
pd.DataFrame(rows)
"""),
        claim_md("C30", "A factory call with `requires_grad=True` inside the block, and an operation on its result."),
        check("C30"),
        code("""
ev = r_c30.evidence
assert ev["factory_leaf"]["requires_grad"] and ev["factory_leaf"]["is_leaf"]
assert ev["op_on_it_inside_block"]["requires_grad"] is False
ev
"""),
    ]


def nb_09():
    stem = "09_beyond_no_grad"
    return head(stem, """
Two things the article leaves out: `torch.inference_mode`, which skips more bookkeeping than `no_grad`
at the price of a restriction, and the levers that usually matter more for inference speed than either.
""", "") + [
        claim_md("X01", """
`inference_mode` also drops version counters and view tracking. The price: tensors made under it can
never be used in a computation that autograd records later.
"""),
        check("X01"),
        code("""
ev = r_x01.evidence
assert ev["inference_tensor"]["is_inference"] and not ev["inference_tensor"]["view_is_tracked"]
assert ev["restriction"]["saved_for_backward (w * inference_tensor)"] is not None
ev["restriction"]
"""),
        claim_md("X05", """
Mixed precision, the channels-last memory layout and `torch.compile`, measured on the same workloads
as `no_grad` and ranked beside it.
"""),
        check("X05"),
        code("""
import pandas as pd

pd.DataFrame({r["workload"]: r["speedup"] for r in r_x05.evidence["rows"]}).round(2)
"""),
    ]


NOTEBOOKS = {"00_index": nb_index, "01_what_no_grad_does": nb_01, "02_inside_the_engine": nb_02,
             "03_scoping_no_grad": nb_03, "04_eval_vs_no_grad": nb_04, "05_memory_and_speed_by_workload": nb_05,
             "06_decorators_contexts_and_autocast": nb_06, "07_production_serving": nb_07, "08_faq": nb_08,
             "09_beyond_no_grad": nb_09}


def build(stem: str):
    nb = nbformat.v4.new_notebook()
    nb.cells = NOTEBOOKS[stem]()
    for i, cell in enumerate(nb.cells):
        cell.id = f"{stem[:2]}-{i:02d}"  # stable ids keep diffs small
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    nbformat.validate(nb)
    return nb


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 if a notebook differs")
    args = ap.parse_args(argv)
    NB_DIR.mkdir(exist_ok=True)
    stale = []
    for stem in NOTEBOOKS:
        text = nbformat.writes(build(stem)) + "\n"
        path = NB_DIR / f"{stem}.ipynb"
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(path.name)
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        print("notebooks differ from scripts/make_notebooks.py: " + ", ".join(stale)
              + "\nrun: python scripts/make_notebooks.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
