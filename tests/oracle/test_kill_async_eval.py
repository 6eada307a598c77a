"""Killed while an asynchronous evaluation runs (issue 22): `ctrainer train` with eval_async,
SIGKILLed in the middle of an evaluation on the evaluator's thread, then resumed with
`--resume_from_checkpoint latest`, ends as the uninterrupted run: every evaluation that had no
recorded result is done again, none is lost or done twice, and training is the same bit for bit.

The config is test_resume_cli.py's (an MLP on Fashion-MNIST, a log every step, an evaluation every
5 and a checkpoint every 3 optimizer steps) with eval_async and the "wait" policy, so that every due
evaluation runs in any run, however fast the evaluator is. The kill comes from
tests/oracle/kill_shim.c (LD_PRELOAD, gemm_off_main): the k-th matrix multiply of a thread other
than the main one and not an OpenMP worker (which run the other blocks of a GEMM split over the
thread team), which in this model of linear layers only the evaluator runs (its forward passes), so
the process dies inside an evaluation; k is drawn over all of the run's evaluations (the
first comes after the first checkpoint).

Checked: the run died of SIGKILL (the kill landed); the resumed run exits 0 and its training starts
right after the newest whole checkpoint; its log_history holds the uninterrupted run's training
entries in order and its evaluation entries, each once, with the same values (where an asynchronous
result lands among the training entries depends on when the evaluator finishes, in any run, so
evaluations are compared by their step); the final model.h5, the results files and every
checkpoint's model, optimizer and scheduler files are the uninterrupted run's, bit for bit."""
import copy
import os
import signal
import tempfile

from common import RNG, check, finish
from test_kill_rotation import SHIM, shim_env
from test_resume_cli import (CONFIG, Run, checkpoints, diff_h5, diff_history, diff_json, load_json, newest_valid,
                             skip_if_unavailable, step_map, strip, verify, write_config)

ASYNC_CONFIG = copy.deepcopy(CONFIG)
ASYNC_CONFIG["training_args"].update(eval_async=True, eval_async_policy="wait")
KILLS = 4


def split(history):
    """(training entries in order, evaluation entries by step)."""
    train = [e for e in history if "eval_loss" not in e]
    evals = sorted((e for e in history if "eval_loss" in e), key=lambda e: e["step"])
    return train, evals


def compare_async(ref, out, label):
    want, got = load_json(os.path.join(ref, "trainer_state.json")), load_json(os.path.join(out, "trainer_state.json"))
    (wt, we), (gt, ge) = split(want["log_history"]), split(got["log_history"])
    d = diff_history(wt, gt)
    check(not d, f"{label}: training entries: {d}")
    d = diff_history(we, ge)
    check(not d, f"{label}: evaluations: {d} (steps {[e['step'] for e in ge]}, "
                 f"the uninterrupted run's {[e['step'] for e in we]})")
    rest = lambda s: {k: v for k, v in s.items() if k != "log_history"}
    d = diff_json(rest(want), rest(got))
    check(not d, f"{label}: trainer_state.json: {d}")
    d = diff_h5(os.path.join(ref, "model.h5"), os.path.join(out, "model.h5"))
    check(not d, f"{label}: final model.h5: {d}")
    for name in ("train_results.json", "eval_results.json", "all_results.json"):
        if os.path.exists(os.path.join(ref, name)):
            d = diff_json(strip(load_json(os.path.join(ref, name))), strip(load_json(os.path.join(out, name))))
            check(not d, f"{label}: {name}: {d}")
    mine, theirs = checkpoints(out), checkpoints(ref)
    check(sorted(mine) == sorted(theirs), f"{label}: checkpoints {sorted(mine)}, expected {sorted(theirs)}")
    for step in sorted(set(mine) & set(theirs)):
        why = verify(mine[step])
        check(not why, f"{label}: checkpoint-{step} is not whole: {why}")
        for name in ("model.h5", "optimizer.h5"):
            d = diff_h5(os.path.join(theirs[step], name), os.path.join(mine[step], name))
            check(not d, f"{label}: checkpoint-{step}/{name}: {d}")
        d = diff_json(load_json(os.path.join(theirs[step], "scheduler.json")),
                      load_json(os.path.join(mine[step], "scheduler.json")))
        check(not d, f"{label}: checkpoint-{step}/scheduler.json: {d}")


def main():
    skip_if_unavailable()
    if not os.path.exists(SHIM):
        check(False, f"no kill shim at {SHIM}")
        finish()
    with tempfile.TemporaryDirectory() as d:
        cfg = write_config(d, ASYNC_CONFIG)
        ref = os.path.join(d, "ref")
        base = Run(cfg, ref)
        if base.wait() != 0:
            check(False, f"the uninterrupted run failed ({base.rc}): {base.stderr[-2000:]}")
            finish()
        history = load_json(os.path.join(ref, "trainer_state.json"))["log_history"]
        evaluations = sum(1 for e in history if "eval_loss" in e)
        args = ASYNC_CONFIG["training_args"]
        eval_set = ASYNC_CONFIG["data"]["eval"]["limit"]
        # forward GEMMs of one evaluation: one per linear layer and evaluation batch
        per_eval = (len(ASYNC_CONFIG["model"]["hidden"]) + 1) * -(-eval_set // args["per_device_eval_batch_size"])
        check(evaluations >= 3, f"the uninterrupted run evaluated {evaluations} times; the test needs a few")
        step_of = step_map(ref)
        for i in range(KILLS):
            k = int(RNG.integers(1, evaluations * per_eval + 1))
            label = f"killed at the evaluator's GEMM {k} of {evaluations * per_eval} (evaluation {(k - 1) // per_eval + 1})"
            out = os.path.join(d, f"kill-{i}")
            killed = Run(cfg, out, env=shim_env(f"gemm_off_main::{k}"))
            rc = killed.wait()
            check(rc == -signal.SIGKILL, f"{label}: exit code {rc}, expected SIGKILL: {killed.stderr[-1000:]}")
            if rc != -signal.SIGKILL:
                continue
            newest, _ = newest_valid(out)
            resumed = Run(cfg, out, resume="latest")
            check(resumed.wait() == 0, f"{label}: the resumed run failed ({resumed.rc}): {resumed.stderr[-2000:]}")
            if resumed.rc != 0:
                continue
            # the first training entry (an evaluation the checkpoint had no result of may come first)
            first = next((s for s in map(step_of, resumed.logs()) if s is not None), None)
            check(newest is not None and first == newest + 1,
                  f"{label}: resumed at step {first}, the newest checkpoint is {newest}")
            compare_async(ref, out, label)
            print(f"{label}: resumed from checkpoint-{newest}")
    finish()


if __name__ == "__main__":
    main()
