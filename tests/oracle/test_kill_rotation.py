"""Killed during rotation (issue 22): a run with save_total_limit 2, synchronous and with save_async,
SIGKILLed at the exact moments of a checkpoint's commit and rotation, then resumed with
`--resume_from_checkpoint latest`, loses no checkpoint, leaves nothing behind and ends as the
uninterrupted run, bit for bit.

The config is test_resume_cli.py's (an MLP on Fashion-MNIST, evaluation every 5 steps) with a
checkpoint every 2 steps and save_total_limit 2. The kills come from tests/oracle/kill_shim.c
(LD_PRELOAD), which SIGKILLs the process right after the k-th (random) matching call:
  commit    the rename of checkpoint-<step>.tmp into place, before rotation ran;
  aside     the rename of rotation's victim to checkpoint-<step>.deleting, before its files go;
  deleting  the first file deleted inside a `.deleting` directory (a victim half deleted).
After each kill: every checkpoint-<step> directory is whole (a manifest that checks out), the newest
two saves are there (rotation keeps them), and for aside / deleting a `.deleting` directory is there
(the kill landed in the rotation). The resumed run must start right after the newest checkpoint,
say that it took over the dead run's lock and deleted its leftovers, and end with no `.deleting`,
`.tmp` or lock file, the uninterrupted run's checkpoints (the same steps, the same files) and its
log_history, trainer_state.json, model.h5 and results files."""
import copy
import os
import re
import signal
import tempfile

from common import HARNESS, RNG, check, finish
from test_resume_cli import (CONFIG, ENV, Run, checkpoints, compare, first_step, load_json, newest_valid,
                             skip_if_unavailable, step_map, verify, write_config)

KILL_CONFIG = copy.deepcopy(CONFIG)
KILL_CONFIG["training_args"].update(save_steps=2, save_total_limit=2)
SHIM = os.environ.get("CT_KILL_SHIM") or os.path.join(os.path.dirname(os.path.abspath(HARNESS)), "libct_kill_shim.so")
POINTS = {"commit": "rename_from:.tmp", "aside": "rename_to:.deleting", "deleting": "remove_in:.deleting/"}


def shim_env(spec):
    env = dict(ENV, LD_PRELOAD=SHIM, CT_KILL_AFTER=spec)
    # a sanitizer build's runtime must otherwise come first among the loaded libraries
    env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS"), "verify_asan_link_order=0"]))
    return env


def leftovers(out):
    return sorted(n for n in os.listdir(out) if n.endswith((".deleting", ".tmp", ".old")) or n == ".ctrainer.lock")


def main():
    skip_if_unavailable()
    if not os.path.exists(SHIM):
        check(False, f"no kill shim at {SHIM}")
        finish()
    with tempfile.TemporaryDirectory() as d:
        cfg = write_config(d, KILL_CONFIG)
        for save_async in (False, True):
            extra = ("--save_async", "true" if save_async else "false")
            mode = "save_async" if save_async else "synchronous"
            ref = os.path.join(d, f"ref-{mode}")
            base = Run(cfg, ref, extra=extra)
            if base.wait() != 0:
                check(False, f"{mode}: the uninterrupted run failed ({base.rc}): {base.stderr[-2000:]}")
                continue
            step_of = step_map(ref)
            max_steps = load_json(os.path.join(ref, "trainer_state.json"))["max_steps"]
            saves = max_steps // 2
            for point, spec in POINTS.items():
                # the k-th event: commits happen at every save, rotations from the third save on
                k = int(RNG.integers(2, saves - 2))
                label = f"{mode}, killed at {point} #{k}"
                out = os.path.join(d, f"{mode}-{point}")
                rc = Run(cfg, out, extra=extra, env=shim_env(f"{spec}:{k}")).wait()
                check(rc == -signal.SIGKILL, f"{label}: exit code {rc}, expected SIGKILL")
                if rc != -signal.SIGKILL:
                    continue
                found = checkpoints(out)
                for s, p in sorted(found.items()):
                    why = verify(p)
                    check(not why, f"{label}: checkpoint-{s} is not whole: {why}")
                newest, _ = newest_valid(out)
                check(newest is not None and newest - 2 in found,
                      f"{label}: a checkpoint rotation keeps was lost: {sorted(found)} (newest {newest})")
                left = leftovers(out)
                if point != "commit":
                    check(any(n.endswith(".deleting") for n in left), f"{label}: no .deleting: the kill missed "
                                                                      f"the rotation ({sorted(os.listdir(out))})")
                resumed = Run(cfg, out, resume="latest", extra=extra)
                check(resumed.wait() == 0, f"{label}: the resumed run failed ({resumed.rc}): {resumed.stderr[-2000:]}")
                if resumed.rc != 0:
                    continue
                first = first_step(resumed, step_of, max_steps)
                check(first == newest + 1, f"{label}: resumed at step {first}, the newest checkpoint is {newest}")
                check("taking over the lock left by" in resumed.stderr,
                      f"{label}: no warning about the dead run's lock: {resumed.stderr[-1000:]}")
                for name in left:
                    if name != ".ctrainer.lock":
                        check(re.search(re.escape(name) + r": deleted, a leftover", resumed.stderr),
                              f"{label}: {name} was not reported as deleted: {resumed.stderr[-1000:]}")
                check(not leftovers(out), f"{label}: left behind after the resumed run: {leftovers(out)}")
                check(sorted(checkpoints(out)) == sorted(checkpoints(ref)),
                      f"{label}: checkpoints {sorted(checkpoints(out))}, the uninterrupted run has "
                      f"{sorted(checkpoints(ref))}")
                compare(ref, out, label)
    finish()


if __name__ == "__main__":
    main()
