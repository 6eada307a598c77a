"""Every learning-rate scheduler against Hugging Face's transformers.optimization.get_scheduler (and
torch 1.13's LambdaLR / ReduceLROnPlateau under it), at every step of each schedule.

Each run draws fresh settings: for every scheduler type, several random warmups (warmup_steps,
warmup_ratio or both) and random lr_scheduler_kwargs, over a 1000-step schedule plus a few short
ones (where warmup may outlast training), each followed past its end. The rate ctrainer gives for
optimizer step k must match the rate the optimizer holds at step k under Hugging Face's scheduler
(read, then optimizer.step(), then lr_scheduler.step(), as the Trainer does) to 1e-9 relative, both
from the running scheduler and from ct_scheduler_lr_at(k). Most cases also checkpoint the scheduler
(state through JSON), rebuild and restore it mid-run (plateau ones at a third of their steps).
reduce_lr_on_plateau gets the same random metric sequence (with plateaus, noise and the odd NaN) on
both sides, every (mode, threshold_mode) pair each run, and its final counters must agree too.
Invalid settings that Hugging Face rejects must be rejected by ctrainer, with messages naming the key.

Needs transformers (scripts/oracle-requirements.txt); exits 77 (skipped) without it."""
import math
import os
import sys
import warnings
from types import SimpleNamespace

from common import RNG, check, finish, run  # exits 77 without numpy, h5py or torch
import numpy as np

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
try:
    import torch
    import torch.optim.lr_scheduler as lrs

    # transformers >= 4.49 imports LRScheduler, torch 2.0's public name for 1.13's _LRScheduler.
    if not hasattr(lrs, "LRScheduler"):
        lrs.LRScheduler = lrs._LRScheduler
    import transformers
    from transformers.optimization import get_inverse_sqrt_schedule, get_scheduler
    from transformers.trainer_utils import SchedulerType
    from transformers.training_args import TrainingArguments
except ImportError as e:
    print(f"skipped: Hugging Face transformers is not importable ({e}). Install scripts/oracle-requirements.txt "
          "into a virtualenv (scripts/oracle-venv.sh does) and configure with -DCT_PYTHON=<venv>/bin/python.")
    sys.exit(77)

warnings.simplefilter("ignore")  # lr_scheduler.step() order and num_stable_steps notices
print(f"transformers {transformers.__version__}, torch {torch.__version__}")

TOL = 1e-9
TYPES = [t.value for t in SchedulerType]
MINE = ["linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup", "inverse_sqrt",
        "reduce_lr_on_plateau", "cosine_with_min_lr", "warmup_stable_decay"]
check(set(MINE) <= set(TYPES), f"this transformers lacks schedulers: {set(MINE) - set(TYPES)}")


def hf_warmup(sched, total):
    """TrainingArguments.get_warmup_steps itself, on a stand-in for the arguments."""
    ns = SimpleNamespace(warmup_steps=sched.get("warmup_steps", 0), warmup_ratio=sched.get("warmup_ratio", 0.0))
    return TrainingArguments.get_warmup_steps(ns, total)


def hf_schedule(spec, metrics):
    """The rate of each step under Hugging Face's scheduler, and its final state (plateau)."""
    sched, total, lr = spec["scheduler"], spec["num_training_steps"], spec["learning_rate"]
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=lr)
    name = sched.get("lr_scheduler_type", "linear")
    kwargs = dict(sched.get("lr_scheduler_kwargs", {}))
    warmup = hf_warmup(sched, total)
    if name == "inverse_sqrt" and "timescale" in kwargs:
        # get_scheduler never passes timescale on; ctrainer takes it, as get_inverse_sqrt_schedule does.
        s = get_inverse_sqrt_schedule(opt, warmup, timescale=kwargs["timescale"])
    else:
        s = get_scheduler(name, opt, num_warmup_steps=warmup, num_training_steps=total,
                          scheduler_specific_kwargs=kwargs)
    plateau = isinstance(s, torch.optim.lr_scheduler.ReduceLROnPlateau)
    lrs_ = []
    for k in range(spec["steps"]):
        lrs_.append(opt.param_groups[0]["lr"])
        if plateau:
            s.step(float(metrics[k]))
        else:
            opt.step()
            s.step()
    state = None
    if plateau:
        state = [s.last_epoch, opt.param_groups[0]["lr"], s.best, s.num_bad_epochs, s.cooldown_counter]
    return lrs_, state, warmup


def pointwise_rel(got, want):
    """Largest |got - want| / |want| over the steps; a zero reference demands an exact zero."""
    worst, at = 0.0, -1
    for k, (g, w) in enumerate(zip(got, want)):
        if g == w:
            continue
        e = abs(g - w) / abs(w) if w != 0 else math.inf
        if not e <= worst:
            worst, at = e, k
    return worst, at


def random_warmup(total):
    kind = RNG.integers(0, 4)
    hi = max(1, int(total * 0.4))
    if kind == 0:
        return {}
    if kind == 1:
        return {"warmup_steps": int(RNG.integers(1, hi + 1))}
    if kind == 2:
        return {"warmup_ratio": float(RNG.uniform(0, 0.4))}
    return {"warmup_steps": int(RNG.integers(1, hi + 1)), "warmup_ratio": float(RNG.uniform(0, 0.4))}


def maybe(p):
    return RNG.uniform() < p


def random_kwargs(name, lr, total, warmup, case):
    kw = {}
    if name in ("cosine", "cosine_with_min_lr") and maybe(0.7):
        kw["num_cycles"] = float(RNG.uniform(0.1, 3.0))
    if name == "cosine_with_restarts" and maybe(0.8):
        kw["num_cycles"] = int(RNG.integers(1, 7)) if maybe(0.7) else float(RNG.uniform(0.3, 5.0))
    if name == "polynomial":
        if maybe(0.8):
            kw["power"] = float(RNG.uniform(0.2, 4.0))
        if maybe(0.8):
            kw["lr_end"] = float(lr * RNG.uniform(0, 0.9))
    if name == "inverse_sqrt" and maybe(0.7):
        kw["timescale"] = int(RNG.integers(1, 2 * total + 2))
    if name == "cosine_with_min_lr":
        if maybe(0.5):
            kw["min_lr"] = float(lr * RNG.uniform(0, 1))
        else:
            kw["min_lr_rate"] = float(RNG.uniform(0, 1))
    if name == "warmup_stable_decay":
        room = max(0, total - warmup)
        kw["num_decay_steps"] = int(RNG.integers(0, room + 1))
        if maybe(0.4):  # explicit stable phase, which may leave a tail at min_lr_ratio or overrun
            kw["num_stable_steps"] = int(RNG.integers(0, total + 1))
        if maybe(0.7):
            kw["min_lr_ratio"] = float(RNG.uniform(0, 0.6))
        if maybe(0.8):
            kw["warmup_type"] = str(RNG.choice(["linear", "cosine", "1-sqrt"]))
        if maybe(0.8):
            kw["decay_type"] = str(RNG.choice(["linear", "cosine", "1-sqrt"]))
        if maybe(0.4):
            kw["num_cycles"] = float(RNG.uniform(0.1, 2.0))
    if name == "reduce_lr_on_plateau":
        # every (mode, threshold_mode) in turn; "rel" sometimes by default
        kw["mode"] = ["min", "max"][case % 2]
        if case % 4 >= 2:
            kw["threshold_mode"] = "abs"
        elif maybe(0.5):
            kw["threshold_mode"] = "rel"
        if maybe(0.8):
            kw["factor"] = float(RNG.uniform(0.05, 0.95))
        kw["patience"] = int(RNG.integers(0, 12))
        if maybe(0.7):
            kw["threshold"] = float(RNG.uniform(0, 0.02))
        if maybe(0.7):
            kw["cooldown"] = int(RNG.integers(0, 6))
        if maybe(0.6):
            kw["min_lr"] = float(lr * RNG.uniform(0, 0.05))
        if maybe(0.3):
            kw["eps"] = float(lr * RNG.uniform(0, 1e-3))
    return kw


def random_metrics(n, mode):
    """A noisy loss-like curve that improves, stalls and wobbles; flipped for mode max."""
    t = RNG.uniform(0.2, 3.0) / (1.0 + np.arange(n) / RNG.uniform(5, 200))
    stall = RNG.uniform(size=n) < 0.5
    t = np.where(stall, np.maximum.accumulate(t[::-1])[::-1], t)  # plateaus
    m = t + RNG.normal(0, RNG.uniform(1e-4, 0.05), n)
    m[RNG.uniform(size=n) < 0.01] = np.nan
    return -m if mode == "max" else m



def one_case(name, total, extra, case):
    """Checks one random setting; False (nothing checked) when its rate is 0 at every step."""
    lr = float(10 ** RNG.uniform(-5, -0.5))
    sched = {"lr_scheduler_type": name, **random_warmup(total)}
    warmup = hf_warmup(sched, total)
    kw = random_kwargs(name, lr, total, warmup, case)
    if kw:
        sched["lr_scheduler_kwargs"] = kw
    steps = total + 1 + extra
    spec = {"scheduler": sched, "learning_rate": lr, "num_training_steps": total, "steps": steps, "dtype": "f64"}
    if name == "reduce_lr_on_plateau":  # its counters change at many steps: restore at a third of them
        spec["resume_at"] = [k for k in range(1, steps) if maybe(0.3)]
    elif maybe(0.6):
        spec["resume_at"] = sorted(set(int(k) for k in RNG.integers(1, steps, size=RNG.integers(1, 4))))
    metrics = random_metrics(steps, kw.get("mode", "min")) if name == "reduce_lr_on_plateau" else None
    label = f"{name} T={total} lr={lr:.3g} {sched}"
    if "resume_at" in spec:
        label += f" resumed {len(spec['resume_at'])}x"
    try:
        want, want_state, _ = hf_schedule(spec, metrics)
    except Exception as e:  # a setting Hugging Face rejects is a bug in this generator
        check(False, f"{label}: transformers rejected the settings: {e!r}")
        return True
    if max(abs(w) for w in want) == 0:
        # a rate that is 0 at every step (e.g. warmup_stable_decay over 2 steps: warmup from 0, no
        # stable or decay steps) would match anything: draw another case instead
        return False
    out = run("sched", spec, {"metrics": metrics} if metrics is not None else {})
    if out is None:
        print("  case:", label)
        return True
    check(int(out["warmup"][0]) == warmup, f"{label}: warmup {out['warmup'][0]} != {warmup}")
    keys = ["lr"] if name == "reduce_lr_on_plateau" else ["lr", "lr_at"]
    for key in keys:
        got = out[key]
        e, at = pointwise_rel(got, want)
        check(len(got) == len(want) and e < TOL,
              f"{label}: {key} relative error {e:.3g} at step {at}: got {got[at]!r}, want {want[at]!r}")
    if want_state is not None:
        got_state = list(out["state"])
        ok = got_state[0] == want_state[0] and got_state[3:] == want_state[3:] and got_state[1] == want_state[1] and \
            (got_state[2] == want_state[2])
        check(ok, f"{label}: final state [step, lr, best, bad, cooldown] {got_state} != {want_state}")
        if name == "reduce_lr_on_plateau":
            reductions[0] += sum(1 for a, b in zip(want, want[1:]) if b < a)
    return True


def case_that_proves_something(name, short, case):
    """one_case with fresh draws until its reference rate is not 0 everywhere (20 draws at most)."""
    for _ in range(20):
        total = int(RNG.integers(2, 30)) if short else 1000
        extra = int(RNG.integers(1, 30)) if short else int(RNG.integers(1, 60))
        if one_case(name, total, extra, case):
            return
    check(False, f"{name}: 20 random settings in a row gave a rate of 0 at every step")


reductions = [0]
for name in MINE:
    # reduce_lr_on_plateau has the most branches (mode x threshold_mode, cooldown, min_lr, eps)
    n_long, n_short = (12, 4) if name == "reduce_lr_on_plateau" else (4, 2)
    for i in range(n_long):
        case_that_proves_something(name, False, i)
    for i in range(n_short):  # short runs: warmup can reach or pass the end
        case_that_proves_something(name, True, i)
check(reductions[0] > 0, "reduce_lr_on_plateau never reduced the rate in any case: the metrics prove nothing")


# --- settings Hugging Face rejects are rejected here too, naming the key -----------------------------

def rejected(label, sched, want_in_msg, lr=1e-3, total=100):
    spec = {"scheduler": sched, "learning_rate": lr, "num_training_steps": total, "steps": 3, "dtype": "f64"}
    try:
        hf_schedule(spec, np.ones(3))
        hf_ok = True
    except (ValueError, TypeError, KeyError):
        hf_ok = False
    check(not hf_ok, f"{label}: transformers accepted it, so ctrainer should too")
    rc, err = run("sched", spec, {}, expect_fail=True)
    check(rc == 1, f"{label}: ct_oracle exit code {rc} (wanted 1): {err.strip()}")
    for w in want_in_msg:
        check(w in err, f"{label}: message lacks {w!r}: {err.strip()}")


rejected("misspelt name", {"lr_scheduler_type": "cosin"},
         ["scheduler.lr_scheduler_type", "unknown scheduler 'cosin'", "did you mean 'cosine'"])
rejected("misspelt kwarg", {"lr_scheduler_type": "cosine", "lr_scheduler_kwargs": {"num_cycle": 2}},
         ["scheduler.lr_scheduler_kwargs", "'num_cycle'", "did you mean 'num_cycles'"])
rejected("kwarg of another scheduler", {"lr_scheduler_type": "linear", "lr_scheduler_kwargs": {"num_cycles": 2}},
         ["scheduler.lr_scheduler_kwargs", "'num_cycles'", "'linear'"])
rejected("both min_lr and min_lr_rate",
         {"lr_scheduler_type": "cosine_with_min_lr", "lr_scheduler_kwargs": {"min_lr": 1e-5, "min_lr_rate": 0.1}},
         ["scheduler.lr_scheduler_kwargs.min_lr", "only one"])
rejected("neither min_lr nor min_lr_rate", {"lr_scheduler_type": "cosine_with_min_lr"},
         ["scheduler.lr_scheduler_kwargs.min_lr", "needs min_lr or min_lr_rate"])
rejected("lr_end above lr", {"lr_scheduler_type": "polynomial", "lr_scheduler_kwargs": {"lr_end": 2e-3}},
         ["scheduler.lr_scheduler_kwargs.lr_end", "smaller than the initial learning rate"])
rejected("plateau factor 1", {"lr_scheduler_type": "reduce_lr_on_plateau", "lr_scheduler_kwargs": {"factor": 1.0}},
         ["scheduler.lr_scheduler_kwargs.factor", "[0, 1)"])
rejected("plateau mode", {"lr_scheduler_type": "reduce_lr_on_plateau", "lr_scheduler_kwargs": {"mode": "mn"}},
         ["scheduler.lr_scheduler_kwargs.mode", "did you mean 'min'"])
rejected("plateau threshold_mode",
         {"lr_scheduler_type": "reduce_lr_on_plateau", "lr_scheduler_kwargs": {"threshold_mode": "relative"}},
         ["scheduler.lr_scheduler_kwargs.threshold_mode", "'relative'"])
rejected("wsd decay_type", {"lr_scheduler_type": "warmup_stable_decay",
                            "lr_scheduler_kwargs": {"num_decay_steps": 10, "decay_type": "sqrt"}},
         ["scheduler.lr_scheduler_kwargs.decay_type", "'sqrt'"])
rejected("wsd without num_decay_steps", {"lr_scheduler_type": "warmup_stable_decay"},
         ["scheduler.lr_scheduler_kwargs.num_decay_steps", "needs num_decay_steps"])
rejected("wrong kwarg type", {"lr_scheduler_type": "polynomial", "lr_scheduler_kwargs": {"power": "two"}},
         ["scheduler.lr_scheduler_kwargs.power", "expected a number"])
finish()
