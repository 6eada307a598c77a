"""ctrainer's training arguments against Hugging Face's TrainingArguments (transformers 4.51.3), in
its Seq2SeqTrainingArguments form (TrainingArguments plus predict_with_generate and generation_*).

1. Defaults: every argument ctrainer has must exist in TrainingArguments under the same name, with
   the same default (after __post_init__). The one deliberate difference: report_to defaults to
   "none" here (Hugging Face's None means "every installed integration"), so the reference is built
   with report_to="none"; logging_dir's None is resolved by Hugging Face at construction.
2. Validation: fresh random combinations of the arguments the cross-argument rules are about
   (strategies, steps as counts and ratios, load_best_model_at_end, metric_for_best_model,
   greater_is_better, lr_scheduler_type, warmups, seeds) go through both. Whatever Hugging Face
   rejects (TrainingArguments.__post_init__, plus Trainer.__init__'s metric_for_best_model check)
   ctrainer must reject, and what it accepts ctrainer must accept, except the documented stricter
   rules (predicted by `stricter` below). When both accept, the values __post_init__ derives
   (metric_for_best_model, greater_is_better, eval_steps) must agree, and data_seed must be
   Hugging Face's data_seed or, unset, its seed (which is what its sampler uses then).

ctrainer's side is the unit-test binary tests/test_args (modes --dump-defaults and --validate), next
to the ct_oracle harness whose path ctest passes as argv[1]. Needs transformers
(scripts/oracle-requirements.txt); exits 77 (skipped) without it. accelerate is not needed:
TrainingArguments only asks it for the device, which is stubbed to the CPU here."""
import json
import math
import os
import random
import subprocess
import sys
import time
import warnings

HARNESS = sys.argv[1] if len(sys.argv) > 1 else "build/tests/ct_oracle"
TEST_ARGS = os.path.join(os.path.dirname(os.path.abspath(HARNESS)), "test_args")
SEED = int(os.environ.get("CT_TEST_SEED", time.time_ns() % (2**31)))
RNG = random.Random(SEED)
print(f"{os.path.basename(sys.argv[0])}: seed {SEED} (rerun with CT_TEST_SEED={SEED})")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
try:
    import torch
    import torch.optim.lr_scheduler as lrs

    # transformers >= 4.49 imports LRScheduler, torch 2.0's public name for 1.13's _LRScheduler.
    if not hasattr(lrs, "LRScheduler"):
        lrs.LRScheduler = lrs._LRScheduler
    import transformers
    import transformers.training_args as hf_ta
    from transformers import Seq2SeqTrainingArguments as TrainingArguments
except ImportError as e:
    print(f"skipped: Hugging Face transformers is not importable ({e}). Install scripts/oracle-requirements.txt "
          "into a virtualenv (scripts/oracle-venv.sh does) and configure with -DCT_PYTHON=<venv>/bin/python.")
    sys.exit(77)

# __post_init__ touches self.device, which needs accelerate; the rules under test do not.
hf_ta.TrainingArguments._setup_devices = property(lambda self: torch.device("cpu"))
hf_ta.TrainingArguments.n_gpu = property(lambda self: 0)
warnings.simplefilter("ignore")
transformers.logging.set_verbosity_warning()  # disable_tqdm's default reads the level
print(f"transformers {transformers.__version__}, torch {torch.__version__}")

passed = 0
failed = 0


def check(cond, msg):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL", msg)


def hf_args(**kw):
    try:
        return TrainingArguments(report_to="none", **kw)
    except ImportError as e:
        print(f"skipped: TrainingArguments cannot be built here ({e})")
        sys.exit(77)


if not os.path.exists(TEST_ARGS):
    print(f"FAIL {TEST_ARGS} does not exist (build the tests first)")
    sys.exit(1)


def same(ours, theirs):
    if isinstance(theirs, bool) or isinstance(ours, bool):
        return ours is theirs
    if isinstance(theirs, (int, float)) and isinstance(ours, (int, float)):
        return float(ours) == float(theirs)
    if hasattr(theirs, "value"):  # an enum
        theirs = theirs.value
    return ours == theirs


# --- 1. defaults ------------------------------------------------------------------------------------
p = subprocess.run([TEST_ARGS, "--dump-defaults"], capture_output=True, text=True)
check(p.returncode == 0, f"test_args --dump-defaults failed: {p.stderr}")
ours = json.loads(p.stdout) if p.returncode == 0 else {}
hf = hf_args().to_dict()
check(len(ours) >= 40, f"only {len(ours)} arguments dumped")
# ctrainer's own arguments: they must NOT collide with a Hugging Face name, and keep their defaults.
CTRAINER_ONLY = {"eval_bootstrap_resamples": 1000, "eval_confidence_level": 0.95, "optimizer_sharding": "none",
                 "eval_async": False, "eval_device": "auto", "device": "auto", "eval_async_policy": "latest", "save_async": False,
                 "nan_inf_policy": "error", "on_save_error": "stop"}
for name, value in CTRAINER_ONLY.items():
    check(name not in hf, f"{name}: ctrainer's own argument now clashes with a Hugging Face field")
    check(ours.get(name) == value, f"{name}: default {ours.get(name)!r}, expected {value!r}")
for name, value in ours.items():
    if name in CTRAINER_ONLY:
        continue
    check(name in hf, f"{name}: not a Hugging Face TrainingArguments field")
    if name == "logging_dir":  # Hugging Face resolves None at construction: output_dir/runs/<date>_<host>
        check(value is None and os.path.basename(os.path.dirname(hf[name])) == "runs",
              f"logging_dir: default {value!r}, Hugging Face {hf[name]!r}")
    elif name in hf:
        check(same(value, hf[name]), f"{name}: default {value!r}, Hugging Face {hf[name]!r}")

# Every other field of Hugging Face's arguments is refused with a reason when it asks for something,
# and ignored at its default (a config written for Hugging Face runs).
import dataclasses  # noqa: E402

others = [f for f in dataclasses.fields(TrainingArguments) if f.init and f.name not in ours]
check(len(others) > 50, f"only {len(others)} Hugging Face fields outside ctrainer's schema")
lines = "".join(json.dumps({f.name: "__something__"}) + "\n" for f in others)
lines += "".join(json.dumps({f.name: f.default}) + "\n" for f in others
                 if f.default is not dataclasses.MISSING and not callable(f.default))
p = subprocess.run([TEST_ARGS, "--validate"], input=lines, capture_output=True, text=True)
check(p.returncode == 0, f"test_args --validate failed: {p.stderr}")
out = [json.loads(line) for line in p.stdout.splitlines()] if p.returncode == 0 else []
for f, r in zip(others, out):
    check(not r["ok"] and "is not supported by ctrainer (" in r["error"],
          f"{f.name}: a value is not refused with a reason: {r}")
for r, line in zip(out[len(others):], lines.splitlines()[len(others):]):
    check(r["ok"], f"{line}: Hugging Face's default is refused: {r}")

# --- 2. validation ---------------------------------------------------------------------------------


def steps_value():
    r = RNG.random()
    if r < 0.45:
        return RNG.choice([1, 5, 10, 20, 50, 100, 250, 500, 1000])
    if r < 0.75:
        return RNG.choice([0.05, 0.1, 0.2, 0.25, 0.3, 0.5, 0.6, 0.999])
    if r < 0.85:
        return RNG.choice([2.5, 10.5, 1.25])  # not whole: rejected above 1
    if r < 0.92:
        return 0
    return RNG.choice([-1, -0.5])


def random_case():
    kw = {}
    kw["eval_strategy"] = RNG.choice(["no", "steps", "epoch"])
    kw["save_strategy"] = RNG.choice(["no", "steps", "epoch", "best"])
    kw["logging_strategy"] = RNG.choice(["no", "steps", "epoch"])
    if RNG.random() < 0.7:
        kw["eval_steps"] = None if RNG.random() < 0.2 else steps_value()
    if RNG.random() < 0.7:
        kw["save_steps"] = steps_value()
    if RNG.random() < 0.7:
        kw["logging_steps"] = steps_value()
    kw["load_best_model_at_end"] = RNG.random() < 0.5
    if RNG.random() < 0.5:
        kw["metric_for_best_model"] = RNG.choice(["accuracy", "eval_loss", "loss", "f1", "cross_entropy_loss"])
    if RNG.random() < 0.3:
        kw["greater_is_better"] = RNG.random() < 0.5
    if RNG.random() < 0.3:
        kw["lr_scheduler_type"] = RNG.choice(["linear", "cosine", "reduce_lr_on_plateau", "constant"])
    if RNG.random() < 0.3:
        kw["warmup_ratio"] = RNG.choice([0.0, 0.1, 0.5, 1.0, 1.5, -0.1])
    if RNG.random() < 0.3:
        kw["warmup_steps"] = RNG.choice([0, 1, 10, 100, -1])
    if RNG.random() < 0.3:
        kw["seed"] = RNG.randrange(0, 10**6)
    if RNG.random() < 0.3:
        kw["data_seed"] = RNG.randrange(0, 10**6)
    return kw


def hf_verdict(kw):
    """(args, None) when Hugging Face accepts, (None, message) when it raises."""
    # data_seed asks accelerate for its version (and nothing else): it is compared separately.
    hf_kw = {k: v for k, v in kw.items() if k != "data_seed"}
    try:
        a = hf_args(**hf_kw)
    except ValueError as e:
        return None, str(e)
    # Trainer.__init__'s check, which runs before any training.
    if (a.save_strategy.value == "best" or a.load_best_model_at_end) and a.metric_for_best_model is None:
        return None, "metric_for_best_model must be provided"
    return a, None


def stricter(kw):
    """The reason ctrainer rejects what Hugging Face accepts, or None: ctrainer's deliberate extra rules."""
    def val(name, default):
        return kw.get(name, default) if kw.get(name, default) is not None else default

    if kw["logging_strategy"] == "steps" and val("logging_steps", 500) < 0:
        return "negative logging_steps"
    if kw["save_strategy"] == "steps" and val("save_steps", 500) <= 0:
        return "save_steps <= 0"
    if val("eval_steps", 0) < 0:
        return "negative eval_steps"
    return None


# At least 600 cases, drawn on until every outcome has 20 (the stricter rules are the rarest: about 25
# in 600, so a fixed 600 fell short of 20 now and then); 6000 draws without them means the draw is broken.
cases, verdicts = [], []
counts = {"both accept": 0, "both reject": 0, "stricter": 0}
while len(cases) < 600 or (min(counts.values()) < 20 and len(cases) < 6000):
    kw = random_case()
    a, hf_err = hf_verdict(kw)
    extra = stricter(kw)
    counts["both reject" if hf_err is not None else "stricter" if extra is not None else "both accept"] += 1
    cases.append(kw)
    verdicts.append((a, hf_err, extra))
lines = "".join(json.dumps(c) + "\n" for c in cases)
p = subprocess.run([TEST_ARGS, "--validate"], input=lines, capture_output=True, text=True)
check(p.returncode == 0, f"test_args --validate failed: {p.stderr}")
results = [json.loads(line) for line in p.stdout.splitlines()] if p.returncode == 0 else []
check(len(results) == len(cases), f"{len(results)} results for {len(cases)} cases")
for kw, res, (a, hf_err, extra) in zip(cases, results, verdicts):
    if hf_err is not None:
        check(not res["ok"], f"{kw}: Hugging Face rejects ({hf_err.splitlines()[0]}), ctrainer accepts")
        if not res["ok"]:
            check(res["error"].startswith("training_args."), f"{kw}: message without the argument's path: {res['error']}")
        continue
    if extra is not None:
        check(not res["ok"], f"{kw}: ctrainer should reject ({extra}) but accepts")
        continue
    check(res["ok"], f"{kw}: Hugging Face accepts, ctrainer rejects: {res.get('error')}")
    if not res["ok"]:
        continue
    r = res["args"]
    check(r["metric_for_best_model"] == a.metric_for_best_model,
          f"{kw}: metric_for_best_model {r['metric_for_best_model']!r}, Hugging Face {a.metric_for_best_model!r}")
    check(r["greater_is_better"] == a.greater_is_better,
          f"{kw}: greater_is_better {r['greater_is_better']!r}, Hugging Face {a.greater_is_better!r}")
    hf_eval = a.eval_steps if a.eval_steps not in (None, 0) else None
    check(same(r["eval_steps"], hf_eval) if hf_eval is not None else r["eval_steps"] is None,
          f"{kw}: eval_steps {r['eval_steps']!r}, Hugging Face {a.eval_steps!r}")
    for name in ("save_steps", "logging_steps", "warmup_ratio", "warmup_steps", "seed"):
        check(same(r[name], getattr(a, name)), f"{kw}: {name} {r[name]!r}, Hugging Face {getattr(a, name)!r}")
    want_seed = kw.get("data_seed", a.seed)
    check(r["data_seed"] == want_seed, f"{kw}: data_seed {r['data_seed']}, want {want_seed}")
print(f"validation cases: {counts}")
# The draw must exercise all three outcomes, or it proves less than it claims.
check(all(v >= 20 for v in counts.values()), f"too few cases of some outcome: {counts}")

if failed:
    print(f"seed was {SEED}")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
