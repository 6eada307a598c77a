"""The model card `ctrainer train` writes (output_dir/README.md), against the run's own files and,
where transformers is importable, against Hugging Face's model card code (transformers.modelcard:
extract_hyperparameters_from_trainer, parse_log_history, make_markdown_table, _maybe_round).

Three short trainings of tests/cli/configs/tiny_sequential.json with fresh random hyperparameters
(learning rate, seed, batch size, epochs, scheduler, warmup, accumulation, weight decay):
  A. two named evaluation sets and a test set;
  B. one unnamed evaluation set (Hugging Face's own case);
  C. nothing logged during training (no curves; the card says so and draws no figure).
For each card:
  - YAML front matter (library_name, tags, datasets, metrics, model-index with the run's name), the
    title, the image link with a valid PNG (and SVG) next to the card;
  - the hyperparameters: Hugging Face's list item for item (same names, same order, Python's
    float formatting: repr(0.0023456), 2.0, 1e-08), then ctrainer's additions;
  - the final metrics with their intervals equal eval_results.json / test_results.json /
    all_results.json, rounded as Hugging Face rounds (4 decimals when there are more);
  - the "Training results" table equals make_markdown_table(parse_log_history(history)) for B
    (the interval columns left out, as the card documents), and has one row per evaluation and set
    with the latest training loss for A;
  - the model's type and parameter count, the data table (spec and sample counts), the framework
    versions (ctrainer's from `ctrainer version`).
In a ctrainer built without cairo (`ctrainer version`: "plots: no") the cards of A and B must say
that the curves need it, with no figure and no cairo version, and everything else as above."""
import json
import os
import re
import subprocess
import sys
import tempfile
import warnings

from common import built_with, check, CTRAINER, finish, require_fashion_mnist, RNG, TINY_CONFIG
import png_check

DATA = require_fashion_mnist()
PLOTS = built_with("plots")  # CTRAINER_PLOT

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = TINY_CONFIG

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
try:
    import torch
    import torch.optim.lr_scheduler as lrs

    if not hasattr(lrs, "LRScheduler"):  # transformers >= 4.49 imports torch 2.0's name
        lrs.LRScheduler = lrs._LRScheduler
    import transformers.training_args as hf_ta
    from transformers import TrainingArguments
    from transformers.modelcard import (_maybe_round, extract_hyperparameters_from_trainer, make_markdown_table,
                                        parse_log_history)

    hf_ta.TrainingArguments._setup_devices = property(lambda self: torch.device("cpu"))
    hf_ta.TrainingArguments.n_gpu = property(lambda self: 0)
    warnings.simplefilter("ignore")
    HF = True
except ImportError as e:
    print(f"transformers is not importable ({e}): the comparisons with Hugging Face's card code are skipped")
    HF = False

    def _maybe_round(v, decimals=4):  # transformers.modelcard._maybe_round, for the checks without it
        if isinstance(v, float) and len(str(v).split(".")) > 1 and len(str(v).split(".")[1]) > decimals:
            return f"{v:.{decimals}f}"
        return str(v)


def ctrainer(*args):
    p = subprocess.run([CTRAINER, *args], capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "2"})
    check(p.returncode == 0, f"ctrainer {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    return p.stdout


def load(path):
    with open(path) as f:
        return json.load(f)


def section(card, title):
    """The text under a '#...# title' heading up to the next heading."""
    m = re.search(rf"^#+ {re.escape(title)}\n(.*?)(?=^#+ |\Z)", card, re.S | re.M)
    return m.group(1) if m else ""


def display(metric):
    return " ".join(p.capitalize() for p in metric.split("_"))


NOT_METRICS = ("_runtime", "_samples_per_second", "_steps_per_second", "_stderr", "_ci_low", "_ci_high")


def metric_lines(results, prefix, confidence):
    """{set name or None: [expected '- Name: value (95% CI [lo, hi])' lines]} of a results file."""
    sets = sorted({k[len(prefix) + 1:-len("_loss")] for k in results
                   if k.startswith(prefix + "_") and k.endswith("_loss") and k != f"{prefix}_loss"})
    out = {}
    for k, v in results.items():
        if not k.startswith(prefix + "_") or k.endswith(NOT_METRICS) or k == "epoch":
            continue
        rest = k[len(prefix) + 1:]
        name = next((s for s in sets if rest.startswith(s + "_")), None)
        metric = rest[len(name) + 1:] if name else rest
        line = f"- {display(metric)}: {_maybe_round(v)}"
        if f"{k}_ci_low" in results and results[f"{k}_ci_low"] is not None:
            line += (f" ({confidence:g}% CI [{_maybe_round(float(results[k + '_ci_low']))}, "
                     f"{_maybe_round(float(results[k + '_ci_high']))}])")
        out.setdefault(name, []).append(line)
    return out


def parse_table(text):
    rows = [ln for ln in text.splitlines() if ln.startswith("|")]
    if len(rows) < 2:
        return [], []
    cells = lambda ln: [c.strip() for c in ln.strip().strip("|").split("|")]
    header = cells(rows[0])
    return header, [dict(zip(header, cells(r))) for r in rows[2:]]


def table_text(card):
    body = section(card, "Training results")
    return "".join(ln + "\n" for ln in body.splitlines() if ln.startswith("|"))


def hf_hyperparameters(args, out):
    a = TrainingArguments(output_dir=out, report_to="none", **args)
    a.distributed_state = None  # what _setup_devices would set on one CPU process

    class FakeTrainer:
        pass

    t = FakeTrainer()
    t.args, t.use_apex = a, False
    lines = [f"- {k}: {v}" for k, v in extract_hyperparameters_from_trainer(t).items()]
    # Python 3.11 formats a str-Enum member by its name ("OptimizerNames.ADAMW_TORCH"); the card means
    # its value, which is what Python 3.10 printed and what ctrainer writes.
    return [ln.replace(str(a.optim), a.optim.value) for ln in lines]


def check_card(label, out, hp, expect_curves, named_sets):
    card_path = os.path.join(out, "README.md")
    if not os.path.exists(card_path):
        check(False, f"{label}: no README.md in {out}")
        return
    with open(card_path) as f:
        card = f.read()
    name = os.path.basename(out)
    eval_results, all_results = load(os.path.join(out, "eval_results.json")), load(os.path.join(out, "all_results.json"))
    test_results = load(os.path.join(out, "test_results.json"))
    state = load(os.path.join(out, "trainer_state.json"))
    args = load(os.path.join(out, "training_args.json"))

    # front matter, title, figure
    front = card.split("---\n")[1] if card.startswith("---\n") else ""
    for want in ("library_name: ctrainer\n", "- generated_from_trainer\n", "datasets:\n- fashion_mnist\n",
                 "metrics:\n- accuracy\n- top_3_accuracy\n", f"model-index:\n- name: {name}\n  results: []\n"):
        check(want in front, f"{label}: front matter lacks {want!r}")
    check(f"\n# {name}\n" in card, f"{label}: title '# {name}'")
    check("This model was trained from scratch on the fashion_mnist dataset." in card, f"{label}: the opening sentence")
    png, svg = os.path.join(out, "training_curves.png"), os.path.join(out, "training_curves.svg")
    if expect_curves and not PLOTS:
        check("![Training curves]" not in card and "No training curves: drawing them needs a ctrainer built with cairo"
              in card, f"{label}: a card of a build without cairo says the curves need it")
        check(not os.path.exists(png) and not os.path.exists(svg), f"{label}: no figure without cairo")
    elif expect_curves:
        check("![Training curves](training_curves.png)" in card, f"{label}: the image link")
        try:
            w, h, _, _ = png_check.read(png, pixels=False)
            check(w >= 600 and h >= 400, f"{label}: figure {w}x{h}")
        except (png_check.PngError, OSError) as e:
            check(False, f"{label}: {png}: {e}")
        check(os.path.exists(svg), f"{label}: {svg}")
    else:
        check("![Training curves]" not in card and "No training curves: nothing was logged" in card,
              f"{label}: a card without curves says so")
        check(not os.path.exists(png), f"{label}: no figure without logged values")

    # hyperparameters
    lines = [ln for ln in section(card, "Training hyperparameters").splitlines() if ln.startswith("- ")]
    got = dict(ln[2:].split(": ", 1) for ln in lines)
    want = {"learning_rate": repr(hp["learning_rate"]), "train_batch_size": str(hp["per_device_train_batch_size"]),
            "eval_batch_size": "128", "seed": str(hp["seed"]), "lr_scheduler_type": hp["lr_scheduler_type"]}
    if "max_steps" in hp:
        want["training_steps"] = str(hp["max_steps"])
    else:
        want["num_epochs"] = repr(float(hp["num_train_epochs"]))
    if hp["gradient_accumulation_steps"] > 1:
        want["gradient_accumulation_steps"] = str(hp["gradient_accumulation_steps"])
        want["total_train_batch_size"] = str(hp["per_device_train_batch_size"] * hp["gradient_accumulation_steps"])
    if hp["warmup_steps"]:
        want["lr_scheduler_warmup_steps"] = str(hp["warmup_steps"])
    if hp["weight_decay"]:
        want["weight_decay"] = repr(hp["weight_decay"])
    for k, v in want.items():
        check(got.get(k) == v, f"{label}: hyperparameter {k} = {got.get(k)!r}, expected {v!r}")
    check(got.get("optimizer", "").startswith(f"Use {args['optim']} with betas=({args['adam_beta1']!r},"
                                              f"{args['adam_beta2']!r}) and epsilon={args['adam_epsilon']!r}"),
          f"{label}: optimizer line {got.get('optimizer')!r}")
    if HF:
        # Hugging Face's arguments from the run's resolved ones (training_args.json)
        keys = ("learning_rate", "per_device_train_batch_size", "per_device_eval_batch_size", "seed",
                "gradient_accumulation_steps", "optim", "adam_beta1", "adam_beta2", "adam_epsilon", "lr_scheduler_type",
                "warmup_ratio", "warmup_steps", "max_steps", "num_train_epochs", "weight_decay")
        hf_args = {k: args[k] for k in keys}
        if hf_args["warmup_steps"] == int(hf_args["warmup_steps"]):
            hf_args["warmup_steps"] = int(hf_args["warmup_steps"])  # an int in TrainingArguments
        hf = hf_hyperparameters(hf_args, out)
        check(lines[:len(hf)] == hf, f"{label}: Hugging Face's hyperparameter lines\n  {hf}\nvs ctrainer's\n  {lines}")

    # final metrics, with intervals, equal to the results files
    conf = args["eval_confidence_level"] * 100
    for k, v in eval_results.items():
        check(all_results.get(k) == v, f"{label}: all_results.json[{k}] = {all_results.get(k)} vs eval_results {v}")
    for prefix, results in (("eval", eval_results), ("test", test_results)):
        expected = metric_lines(results, prefix, conf)
        check(sum(len(v) for v in expected.values()) >= 3, f"{label}: {prefix} metrics found in the results file")
        for set_name, want_lines in expected.items():
            for ln in want_lines:
                check(ln + "\n" in card, f"{label}: {prefix} {set_name or ''} line {ln!r} not in the card")
            if set_name:
                check(f"\n**{set_name}**\n" in card, f"{label}: heading of set {set_name}")
    check("It achieves the following results on the test set:" in card, f"{label}: test results")

    # the training results table
    history = state["log_history"]
    header, rows = parse_table(table_text(card))
    evals = [e for e in history if any(k.startswith("eval_") and k.endswith("_loss") for k in e)]
    check(len(rows) == len(evals), f"{label}: {len(rows)} table rows for {len(evals)} evaluations")
    if named_sets and evals:
        check(header[:5] == ["Training Loss", "Epoch", "Step", "Eval Set", "Validation Loss"], f"{label}: header {header}")
        train_loss, i = "No log", 0
        for e in history:
            if "train_runtime" in e:
                break
            if "loss" in e:
                train_loss = _maybe_round(e["loss"])
            keys = [k for k in e if k.startswith("eval_") and k.endswith("_loss")]
            if not keys or i >= len(rows):
                continue
            s = keys[0][5:-5]
            row = rows[i]
            i += 1
            want = {"Training Loss": train_loss, "Epoch": repr(float(e["epoch"])), "Step": str(e["step"]),
                    "Eval Set": s, "Validation Loss": _maybe_round(e[f"eval_{s}_loss"]),
                    "Accuracy": _maybe_round(e[f"eval_{s}_accuracy"]),
                    "Top 3 Accuracy": _maybe_round(e[f"eval_{s}_top_3_accuracy"])}
            check(row == want, f"{label}: table row {i}: {row} != {want}")
    elif HF:
        trimmed = []
        for e in history:
            e = {k: v for k, v in e.items() if not k.endswith(("_stderr", "_ci_low", "_ci_high"))}
            # the card's columns: the validation loss first, then the metrics
            if "eval_loss" in e:
                e = {"eval_loss": e.pop("eval_loss"), **dict(sorted(e.items()))}
            trimmed.append(e)
        _, lines_hf, _ = parse_log_history(trimmed)
        check(table_text(card) == make_markdown_table(lines_hf),
              f"{label}: the table differs from Hugging Face's\n{make_markdown_table(lines_hf)}vs\n{table_text(card)}")

    # model, data, versions
    check("A `sequential` model with 25,450 trainable parameters (float32)" in card, f"{label}: model line")
    check("| train | `fashion_mnist` (split: train, limit: 2048) | 2,048 |" in card, f"{label}: train data row")
    if named_sets:
        check("| eval: small | `fashion_mnist` (split: test, limit: 500) | 500 |" in card, f"{label}: eval data row")
    version = ctrainer("version").split()[1]
    check(f"### Framework versions\n\n- ctrainer {version}\n" in card, f"{label}: ctrainer version {version}")
    check(re.search(r"\n- OpenBLAS \d+\.\d+", card) and re.search(r"\n- HDF5 \d+\.\d+\.\d+\n", card),
          f"{label}: library versions")
    check(bool(re.search(r"\n- cairo \d+\.\d+\.\d+\n", card)) == PLOTS,
          f"{label}: the cairo version {'missing' if PLOTS else 'in a build without cairo'}")


def random_hp():
    hp = {"learning_rate": float(f"{10 ** RNG.uniform(-3.3, -2.2):.5g}"), "seed": int(RNG.integers(0, 2**31)),
          "per_device_train_batch_size": int(RNG.choice([32, 64])), "num_train_epochs": int(RNG.integers(1, 3)),
          "lr_scheduler_type": str(RNG.choice(["linear", "cosine", "constant_with_warmup"])),
          "warmup_steps": int(RNG.integers(0, 4)), "gradient_accumulation_steps": int(RNG.choice([1, 2])),
          "weight_decay": float(RNG.choice([0.0, round(float(RNG.uniform(0.001, 0.1)), 4)])),
          "logging_steps": int(RNG.integers(2, 6))}
    return hp


def train(out, hp, *extra):
    args = []
    for k, v in hp.items():
        args += [f"--{k}", str(v)]
    ctrainer("train", CONFIG, "--output_dir", out, "--save_strategy", "no", *args, *extra)


with tempfile.TemporaryDirectory() as d:
    hp = random_hp()
    out = os.path.join(d, "run-named-sets")
    train(out, hp)
    check_card("A (named sets)", out, hp, expect_curves=True, named_sets=True)

    hp = random_hp()
    out = os.path.join(d, "run_one_set")
    one = json.dumps({"type": "fashion_mnist", "split": "test", "limit": 400})
    train(out, hp, "--set", f"data.eval={one}")
    check_card("B (one set)", out, hp, expect_curves=True, named_sets=False)

    hp = random_hp()
    hp.update(max_steps=3, logging_steps=1000)
    del hp["num_train_epochs"]
    out = os.path.join(d, "run_nothing_logged")
    train(out, hp, "--eval_strategy", "no")
    check_card("C (nothing logged)", out, hp, expect_curves=False, named_sets=True)

finish()
