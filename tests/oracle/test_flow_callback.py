"""Hugging Face's own callbacks against ctrainer's, on random configurations drawn fresh each run.

1. DefaultFlowCallback: transformers' DefaultFlowCallback, behind its CallbackHandler (so HF's
   control resets too), is driven through a simulation of Trainer._inner_training_loop's events
   (set_initial_training_values' step counts, TrainerState.compute_steps, epochs x batches with
   gradient accumulation and a partial last window, on_step_begin / on_substep_end / on_step_end,
   _maybe_log_save_evaluate's on_log / on_evaluate / on_save, on_epoch_end, the stop checks). The
   same loop runs in C (`test_callbacks --flow-schedule`) with ctrainer's flow callback and
   dispatcher; the flags each on_step_end and on_epoch_end leave raised, the resolved intervals and
   where training stops must be identical. Strategies, counts, ratios of max_steps, eval_delay in
   steps and epochs, logging_first_step, max_steps against epochs and accumulation are all random.
2. EarlyStoppingCallback: random metric sequences (plateaus, small and large moves around the
   threshold), both directions, optionally restored from saved state halfway; the counter after
   every evaluation and the stopping point must match HF's (state.best_metric updated after each
   on_evaluate as Trainer._determine_best_metric does).
3. PrinterCallback: random log dicts printed by HF's print(logs) and by ctrainer's printer.

The C side is the test_callbacks program next to the ct_oracle harness (or $CT_TEST_CALLBACKS).
Needs transformers (scripts/oracle-requirements.txt); exits 77 (skipped) without it."""
import dataclasses
import io
import json
import math
import os
import subprocess
import sys
import tempfile
import warnings
from contextlib import redirect_stdout
from types import SimpleNamespace

from common import HARNESS, RNG, check, finish  # exits 77 without numpy, h5py or torch

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
try:
    import torch.optim.lr_scheduler as lrs

    # transformers >= 4.49 imports LRScheduler, torch 2.0's public name for 1.13's _LRScheduler.
    if not hasattr(lrs, "LRScheduler"):
        lrs.LRScheduler = lrs._LRScheduler
    import transformers
    from transformers.trainer_callback import (CallbackHandler, DefaultFlowCallback, EarlyStoppingCallback,
                                               PrinterCallback, TrainerControl, TrainerState)
    from transformers.trainer_utils import IntervalStrategy, SaveStrategy
except ImportError as e:
    print(f"skipped: Hugging Face transformers is not importable ({e}). Install scripts/oracle-requirements.txt "
          "into a virtualenv (scripts/oracle-venv.sh does) and configure with -DCT_PYTHON=<venv>/bin/python.")
    sys.exit(77)

warnings.simplefilter("ignore")
print(f"transformers {transformers.__version__}")

PROGRAM = os.environ.get("CT_TEST_CALLBACKS", os.path.join(os.path.dirname(os.path.abspath(HARNESS)),
                                                            "test_callbacks"))
if not os.path.exists(PROGRAM):
    print(f"FAIL cannot find the test_callbacks program at {PROGRAM} (set CT_TEST_CALLBACKS)")
    sys.exit(1)


def c_run(mode, payload):
    p = subprocess.run([PROGRAM, mode, json.dumps(payload)], capture_output=True, text=True)
    if p.returncode != 0:
        check(False, f"test_callbacks {mode} failed: {p.stderr.strip()}")
        return None
    return p.stdout


# --- 1. the flow callback ------------------------------------------------------------------------


def ns_args(cfg):
    """The TrainingArguments fields the flow callback and compute_steps read, after __post_init__:
    an unset eval_steps under the "steps" strategy takes logging_steps; counts above 1 are ints."""
    def count(v):
        return int(v) if v is not None and v > 1 else v

    eval_steps = cfg.get("eval_steps")
    if cfg["eval_strategy"] == "steps" and not eval_steps:
        eval_steps = cfg["logging_steps"]
    return SimpleNamespace(
        logging_strategy=IntervalStrategy(cfg["logging_strategy"]),
        logging_steps=count(cfg["logging_steps"]),
        logging_first_step=cfg["logging_first_step"],
        eval_strategy=IntervalStrategy(cfg["eval_strategy"]),
        eval_steps=count(eval_steps),
        eval_delay=cfg["eval_delay"],
        save_strategy=SaveStrategy(cfg["save_strategy"]),
        save_steps=count(cfg["save_steps"]),
        max_steps=cfg["max_steps"],
        num_train_epochs=cfg["num_train_epochs"],
        gradient_accumulation_steps=cfg["gradient_accumulation_steps"],
    )


def hf_schedule(cfg):
    args = ns_args(cfg)
    length, ga = cfg["len_dataloader"], cfg["gradient_accumulation_steps"]
    # Trainer.set_initial_training_values
    nupe = max(length // ga, 1)
    if args.max_steps > 0:
        max_steps = args.max_steps
        num_train_epochs = max_steps // nupe + int(max_steps % nupe > 0)
    else:
        max_steps = math.ceil(args.num_train_epochs * nupe)
        num_train_epochs = math.ceil(args.num_train_epochs)
    state = TrainerState()
    state.compute_steps(args, max_steps)
    state.max_steps, state.num_train_epochs = max_steps, num_train_epochs
    control = TrainerControl()
    handler = CallbackHandler([DefaultFlowCallback()], None, None, None, None)
    res = {"max_steps": max_steps, "num_train_epochs": num_train_epochs, "logging_steps": state.logging_steps,
           "eval_steps": state.eval_steps, "save_steps": state.save_steps, "log": [], "evaluate": [], "save": []}
    last_logged = 0

    def record(where):
        tag = f"{where}{state.global_step}"
        for flag, key in (("should_log", "log"), ("should_evaluate", "evaluate"), ("should_save", "save")):
            if getattr(control, flag):
                res[key].append(tag)

    def maybe_log_save_evaluate():
        nonlocal control, last_logged
        if control.should_log and state.global_step > last_logged:
            last_logged = state.global_step
            control = handler.on_log(args, state, control, {"loss": 0.5})
        if control.should_evaluate:
            metrics = {"eval_loss": 0.25}
            control = handler.on_log(args, state, control, metrics)  # evaluate() logs its metrics
            control = handler.on_evaluate(args, state, control, metrics)
        if control.should_save:
            control = handler.on_save(args, state, control)

    control = handler.on_train_begin(args, state, control)
    for epoch in range(num_train_epochs):
        steps_in_epoch = length
        control = handler.on_epoch_begin(args, state, control)
        for step in range(steps_in_epoch):
            do_sync_step = (step + 1) % ga == 0 or (step + 1) == steps_in_epoch
            if step % ga == 0:
                control = handler.on_step_begin(args, state, control)
            if do_sync_step:
                control = handler.on_pre_optimizer_step(args, state, control)
                control = handler.on_optimizer_step(args, state, control)
                state.global_step += 1
                state.epoch = epoch + (step + 1) / steps_in_epoch
                control = handler.on_step_end(args, state, control)
                record("s")
                maybe_log_save_evaluate()
            else:
                control = handler.on_substep_end(args, state, control)
            if control.should_epoch_stop or control.should_training_stop:
                break
        control = handler.on_epoch_end(args, state, control)
        record("e")
        maybe_log_save_evaluate()
        if control.should_training_stop:
            break
    handler.on_train_end(args, state, control)
    res["global_step"] = state.global_step
    res["epoch"] = state.epoch
    return res


def interval(strategies):
    return str(RNG.choice(strategies))


def steps_value():
    """A count, a ratio of max_steps (rounded up by HF), or the default 500."""
    r = RNG.random()
    if r < 0.5:
        return int(RNG.integers(1, 13))
    if r < 0.9:
        # (never 0: HF would divide by it)
        return max(round(float(RNG.uniform(0.01, 0.99)), int(RNG.integers(1, 4))), 0.01)
    return 500


def random_config():
    cfg = {
        "len_dataloader": int(RNG.integers(1, 31)),
        "gradient_accumulation_steps": int(RNG.choice([1, 1, 2, 3, 4, 5, 8])),
        "num_train_epochs": float(RNG.integers(1, 5)) if RNG.random() < 0.6 else round(float(RNG.uniform(0.2, 3.5)), 2),
        "max_steps": -1 if RNG.random() < 0.6 else int(RNG.integers(1, 41)),
        "logging_strategy": interval(["no", "steps", "steps", "epoch"]),
        "logging_steps": steps_value(),
        "logging_first_step": bool(RNG.random() < 0.3),
        "eval_strategy": interval(["no", "steps", "steps", "epoch"]),
        "eval_steps": None if RNG.random() < 0.3 else steps_value(),
        "save_strategy": interval(["no", "steps", "steps", "epoch", "best"]),
        "save_steps": steps_value(),
    }
    # eval_delay counts steps under "steps" and (fractional) epochs under "epoch".
    if RNG.random() < 0.4:
        cfg["eval_delay"] = 0
    elif cfg["eval_strategy"] == "epoch":
        cfg["eval_delay"] = round(float(RNG.uniform(0, 3)), 1)
    else:
        cfg["eval_delay"] = int(RNG.integers(0, 16))
    return cfg


configs = [random_config() for _ in range(400)]
out = c_run("--flow-schedule", configs)
if out is not None:
    got = json.loads(out)
    check(len(got) == len(configs), f"{len(got)} schedules for {len(configs)} configs")
    shown = 0
    for cfg, g in zip(configs, got):
        want = hf_schedule(cfg)
        same = all(g[k] == want[k] for k in want if k != "epoch") and abs(g["epoch"] - want["epoch"]) == 0
        check(same, f"flow schedule differs for {json.dumps(cfg)}")
        if not same and shown < 3:
            shown += 1
            for k in want:
                if g.get(k) != want[k]:
                    print(f"  {k}: ctrainer {g.get(k)}  hf {want[k]}")
    # The configs must exercise what they are meant to (else the comparison proves little).
    flat = [hf_schedule(c) for c in configs[:100]]
    check(sum(bool(f["evaluate"]) for f in flat) > 10, "some schedules evaluate")
    check(sum(any(t.startswith("e") for t in f["save"]) for f in flat) > 5, "some save at epoch ends")
    check(sum(c["gradient_accumulation_steps"] > 1 and c["len_dataloader"] % c["gradient_accumulation_steps"] != 0
              for c in configs) > 20, "some configs end epochs with a partial accumulation window")
    check(sum(any(t.startswith("e") for t in f["log"]) for f in flat) > 5, "some log at epoch ends")

# --- 2. early stopping -----------------------------------------------------------------------------


def hf_early(spec):
    args = SimpleNamespace(metric_for_best_model=spec["metric_for_best_model"],
                           greater_is_better=spec["greater_is_better"], load_best_model_at_end=True,
                           eval_strategy=IntervalStrategy.STEPS)
    if args.greater_is_better is None:  # TrainingArguments.__post_init__
        args.greater_is_better = not args.metric_for_best_model.endswith("loss")
    cb = EarlyStoppingCallback(spec["patience"], spec["threshold"])
    state, control = TrainerState(), TrainerControl()
    cb.on_train_begin(args, state, control)
    counters, stop = [], -1
    for i, v in enumerate(spec["values"]):
        if i == spec["restore_at"]:
            saved = json.loads(json.dumps(cb.state()))  # through trainer_state.json
            cb = EarlyStoppingCallback(spec["patience"] + 5, spec["threshold"] + 1)
            cb = type(cb).from_state(saved)
        cb.on_evaluate(args, state, control, metrics={spec["key"]: v, "eval_other": 123.0})
        # Trainer._determine_best_metric, after on_evaluate
        if state.best_metric is None:
            state.best_metric = float("-inf") if args.greater_is_better else float("inf")
        if (v > state.best_metric) if args.greater_is_better else (v < state.best_metric):
            state.best_metric = v
        counters.append(cb.early_stopping_patience_counter)
        if control.should_training_stop and stop < 0:
            stop = i
    return {"counters": counters, "stop": stop}


def random_sequence(n, threshold):
    v, out = float(RNG.uniform(-2, 2)), []
    for _ in range(n):
        r = RNG.random()
        if r < 0.25:
            pass  # plateau
        elif r < 0.5:
            v += float(RNG.choice([-1, 1])) * threshold * float(RNG.uniform(0.5, 1.5))  # near the threshold
        else:
            v += float(RNG.normal()) * 0.3
        out.append(v)
    return out


specs = []
for _ in range(200):
    metric = str(RNG.choice(["loss", "eval_loss", "accuracy", "eval_f1", "perplexity_loss"]))
    threshold = 0.0 if RNG.random() < 0.3 else round(float(RNG.uniform(0, 0.3)), 3)
    n = int(RNG.integers(1, 25))
    specs.append({
        "patience": int(RNG.integers(1, 5)),
        "threshold": threshold,
        "metric_for_best_model": metric,
        "greater_is_better": None if RNG.random() < 0.5 else bool(RNG.random() < 0.5),
        "key": metric if metric.startswith("eval_") else "eval_" + metric,
        "values": random_sequence(n, threshold if threshold else 0.1),
        "restore_at": -1 if RNG.random() < 0.5 else int(RNG.integers(0, n)),
    })
# A few whose metric the evaluation lacks: HF skips them.
for s in specs[:10]:
    s["key"] = "eval_missing"
out = c_run("--early-stopping", specs)
if out is not None:
    got = json.loads(out)
    for spec, g in zip(specs, got):
        want = hf_early(spec)
        check(g == want, f"early stopping differs: ctrainer {g}, hf {want} for {json.dumps(spec)}")
    check(sum(hf_early(s)["stop"] >= 0 for s in specs) > 20, "some sequences stop early")

# --- 3. the printer ---------------------------------------------------------------------------------


def random_float():
    r = RNG.random()
    if r < 0.2:
        return float(RNG.integers(-5, 6))  # 1.0, -3.0
    if r < 0.3:
        return round(float(RNG.uniform(0, 5)), int(RNG.integers(1, 5)))
    return float(RNG.uniform(-1, 1)) * 10.0 ** int(RNG.integers(-30, 31))


def random_logs():
    keys = ["loss", "grad_norm", "learning_rate", "epoch", "eval_loss", "eval_accuracy", "total_flos",
            "train_runtime", "eval_samples_per_second"]
    logs = {}
    for k in RNG.permutation(keys)[: int(RNG.integers(1, len(keys) + 1))]:
        logs[str(k)] = random_float()
    if RNG.random() < 0.3:
        logs["step"] = int(RNG.integers(0, 10**6))
    if RNG.random() < 0.2:
        logs["note"] = str(RNG.choice(["plain", "it's", 'say "hi"', "both ' and \"", "back\\slash", "tab\there"]))
    if RNG.random() < 0.1:
        logs["flag"] = bool(RNG.random() < 0.5)
    return logs


logs_list = [random_logs() for _ in range(300)]
out = c_run("--print-logs", logs_list)
if out is not None:
    lines = out.split("\n")
    for i, logs in enumerate(logs_list):
        buf = io.StringIO()
        with redirect_stdout(buf):
            PrinterCallback().on_log(None, TrainerState(), TrainerControl(), logs=dict(logs))
        want = buf.getvalue().rstrip("\n")
        got_line = lines[i] if i < len(lines) else None
        check(got_line == want, f"printer line {i}:\n  ctrainer {got_line}\n  hf       {want}")

# --- 4. trainer_state.json ---------------------------------------------------------------------------
# A state written by HF's TrainerState.save_to_json is read by ctrainer and written back; HF's
# load_from_json of ctrainer's file must give the same state (and the same keys, in HF's order).
for trial in range(20):
    es = EarlyStoppingCallback(int(RNG.integers(1, 6)), float(RNG.uniform(0, 0.5)))
    es.early_stopping_patience_counter = int(RNG.integers(0, 4))
    ctl = TrainerControl(should_save=bool(RNG.random() < 0.5), should_log=bool(RNG.random() < 0.5))
    st = TrainerState(stateful_callbacks=[es, ctl])
    st.epoch = float(RNG.uniform(0, 10)) if trial else None
    st.global_step = int(RNG.integers(0, 10**6))
    st.max_steps = st.global_step + int(RNG.integers(0, 1000))
    st.logging_steps, st.eval_steps, st.save_steps = (int(RNG.integers(1, 1000)) for _ in range(3))
    st.train_batch_size = int(RNG.integers(1, 512)) if RNG.random() < 0.8 else None
    st.num_train_epochs = int(RNG.integers(1, 10))
    st.num_input_tokens_seen = int(RNG.integers(0, 2**40))
    st.total_flos = float(RNG.uniform(0, 1e18))
    st.log_history = [{"loss": random_float(), "grad_norm": random_float(), "learning_rate": random_float(),
                       "epoch": float(RNG.uniform(0, 3)), "step": i} for i in range(int(RNG.integers(0, 5)))]
    if RNG.random() < 0.6:
        st.best_metric = random_float()
        st.best_global_step = int(RNG.integers(1, 1000))
        st.best_model_checkpoint = f"out/checkpoint-{st.best_global_step}"
    st.is_local_process_zero = bool(RNG.random() < 0.5)
    st.is_hyper_param_search = bool(RNG.random() < 0.2)
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "hf.json"), os.path.join(d, "ct.json")
        st.save_to_json(src)
        p = subprocess.run([PROGRAM, "--state-roundtrip", src, dst], capture_output=True, text=True)
        if p.returncode != 0:
            check(False, f"--state-roundtrip failed: {p.stderr.strip()}")
            continue
        back = TrainerState.load_from_json(dst)
        want = dataclasses.asdict(st)
        if want["epoch"] is None:
            want["epoch"] = 0.0  # ctrainer's epoch is always a number
        got = dataclasses.asdict(back)
        check(got == want, f"trainer_state.json round trip differs:\n  ctrainer {got}\n  hf       {want}")
        with open(src) as f:
            hf_keys = list(json.load(f))
        with open(dst) as f:
            text = f.read()
        check(list(json.loads(text)) == hf_keys and text.endswith("}\n"), "same keys in HF's order, final newline")

finish()
