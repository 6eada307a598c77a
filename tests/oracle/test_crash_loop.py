"""Crash loop (issue 6): a run killed with SIGKILL again and again, at random moments and while it
saves, and resumed each time with `--resume_from_checkpoint latest`, ends as the uninterrupted run,
bit for bit, and never loads a checkpoint that is not whole.

The config is test_resume_cli.py's with a checkpoint every 2 steps and save_total_limit 2, so kills
also land in the rotation that deletes old checkpoints. Each run of a sequence is killed in one of
these ways, chosen at random:
  startup  after a random delay from the start (loading data, building the model, the first steps);
  line     a random fraction of a step after the k-th log line (k random);
  save     while a checkpoint is written: right after a checkpoint-<step>.tmp directory appears, plus
           0 to 3 ms;
  commit   right after a new checkpoint-<step> directory appears (renamed into place: its rotation
           and the run's bookkeeping follow);
  end      once the training summary is logged (the final checkpoint, model and results are written).
Then the next run resumes from latest, or starts afresh when no whole checkpoint exists. Now and
then (never when it is the only one) the newest checkpoint gets a flipped byte first, as a disk might
do: `latest` must skip it with a warning naming it.

Checked: every run ends killed or with exit 0 (a resume never fails); every resumed run starts at the
step after the newest whole checkpoint as an independent reading of manifest.json finds it (so it
never loaded a corrupt or partial one); a checkpoint-<step> directory left partial is never the
newest (only the rotation's deletions may be cut short); when the run finishes, log_history,
trainer_state.json, model.h5, the results files and every whole checkpoint are the uninterrupted
run's. At least 20 kills; when a sequence finishes before that, another one starts."""
import collections
import copy
import os
import signal
import tempfile
import time

from common import RNG, check, finish
from test_resume_cli import (CONFIG, Run, busy_wait, checkpoints, compare, first_step, flip_byte, load_json,
                             newest_valid, skip_if_unavailable, step_map, step_seconds, verify, write_config)

KILLS = 20
CRASH_CONFIG = copy.deepcopy(CONFIG)
CRASH_CONFIG["training_args"].update(save_steps=2, save_total_limit=2)
MODES = ("startup", "line", "line", "save", "save", "commit", "end")


def watch_dir(run, out, appeared, delay):
    """Polls out until appeared(names) is true, then SIGKILLs the run `delay` s later. False when
    the run ended first."""
    while run.p.poll() is None:
        try:
            names = os.listdir(out)
        except FileNotFoundError:
            names = []
        if appeared(names):
            busy_wait(delay)
            run.signal(signal.SIGKILL)
            return True
    return False


def kill_after_entries(k, delay):
    seen = []

    def when(run, entry):
        if isinstance(entry, dict):
            seen.append(entry)
            if len(seen) == k:
                busy_wait(delay)
                run.signal(signal.SIGKILL)

    return when


def kill_at_summary(delay):
    def when(run, entry):
        if isinstance(entry, dict) and "train_loss" in entry:
            busy_wait(delay)
            run.signal(signal.SIGKILL)

    return when


def main():
    skip_if_unavailable()
    t_start = time.time()
    stats = collections.Counter()
    with tempfile.TemporaryDirectory() as d:
        cfg = write_config(d, CRASH_CONFIG)
        ref = os.path.join(d, "uninterrupted")
        t0 = time.perf_counter()
        base = Run(cfg, ref)
        if base.wait() != 0:
            check(False, f"the uninterrupted run failed ({base.rc}): {base.stderr.strip()[-2000:]}")
            finish()
        lifetime = time.perf_counter() - t0
        step_of = step_map(ref)
        max_steps = load_json(os.path.join(ref, "trainer_state.json"))["max_steps"]
        dt = step_seconds(base, step_of)
        first_line = next((t for t, e in base.entries if isinstance(e, dict)), lifetime / 2)
        n_entries = len(base.logs())

        kills, seq, cycle, last_injection = 0, 0, 0, 0
        while kills < KILLS:
            seq += 1
            out = os.path.join(d, f"crash{seq}")
            injected = set()  # checkpoints this test corrupted on purpose
            while True:
                step, _ = newest_valid(out)
                whole = sorted(s for s, p in checkpoints(out).items() if not verify(p))
                cycle += 1
                # About one run in six, and at least one in six before the kills run out.
                inject = RNG.random() < 0.15 or cycle - last_injection >= 6
                if step is not None and len(whole) >= 2 and kills < KILLS and inject:
                    last_injection = cycle
                    victim = os.path.join(out, f"checkpoint-{step}", str(RNG.choice(["model.h5", "optimizer.h5"])))
                    flip_byte(victim, int(RNG.integers(0, os.path.getsize(victim))))
                    injected.add(step)
                    stats["corrupted on purpose"] += 1
                    corrupted = step
                    step, _ = newest_valid(out)
                else:
                    corrupted = None
                mode = str(RNG.choice(MODES)) if kills < KILLS else None
                when = None
                if mode == "line":
                    when = kill_after_entries(int(RNG.integers(1, 9)), dt * float(RNG.uniform(0, 1.5)))
                elif mode == "end":
                    when = kill_at_summary(float(RNG.uniform(0, 0.02)))
                before = set(checkpoints(out))
                tmp_before = {n for n in os.listdir(out) if n.endswith(".tmp")} if os.path.isdir(out) else set()
                run = Run(cfg, out, resume="latest" if step is not None else None, when=when)
                stats["resumed" if step is not None else "fresh starts"] += 1
                if mode == "startup":
                    busy_wait(float(RNG.uniform(0, 1.3 * first_line)))
                    run.signal(signal.SIGKILL)
                elif mode == "save":
                    watch_dir(run, out, lambda names: any(n.endswith(".tmp") and n.startswith("checkpoint-")
                                                          for n in names), float(RNG.uniform(0, 0.003)))
                elif mode == "commit":
                    watch_dir(run, out, lambda names: any(n.startswith("checkpoint-") and not n.endswith(".tmp")
                                                          and n not in {f"checkpoint-{s}" for s in before}
                                                          for n in names), float(RNG.uniform(0, 0.001)))
                rc = run.wait()
                label = f"sequence {seq}, run {stats['resumed'] + stats['fresh starts']} ({mode or 'to the end'})"
                if rc not in (0, -signal.SIGKILL):
                    check(False, f"{label}: exit code {rc} (resumed from {step}): {run.stderr.strip()[-2000:]}")
                    finish()
                if step is not None and run.logs():
                    first = first_step(run, step_of, max_steps)
                    ok = first == step + 1 or step == max_steps and first == max_steps
                    check(ok, f"{label}: the newest whole checkpoint was {step}, the run started at step {first}"
                              f"{' (it loaded a checkpoint that is not whole)' if first and first - 1 in injected else ''}"
                              f" (first entry {run.logs()[0]})")
                    if corrupted is not None:
                        check(f"checkpoint-{corrupted}" in run.stderr,
                              f"{label}: checkpoint-{corrupted} (corrupted) was skipped without a warning naming it: "
                              f"{run.stderr.strip()[-500:]!r}")
                newest, _ = newest_valid(out)
                for s, p in checkpoints(out).items():
                    why = verify(p)
                    if why and s not in injected:
                        stats["partial checkpoints left by a kill"] += 1
                        check(newest is not None and s < newest,
                              f"{label}: checkpoint-{s} is not whole ({why}) and is the newest; only a rotation's "
                              f"deletion may leave a partial directory")
                if rc == 0:
                    compare(ref, out, f"crash sequence {seq}")
                    stats["sequences finished"] += 1
                    break
                kills += 1
                stats[f"killed: {mode}"] += 1
                tmp_after = {n for n in os.listdir(out) if n.endswith(".tmp")} if os.path.isdir(out) else set()
                stats["kills in the middle of a save (a new .tmp left)"] += bool(tmp_after - tmp_before)
        print(f"{kills} kills, {n_entries} log entries per run, {time.time() - t_start:.1f} s:")
        for k, v in sorted(stats.items()):
            print(f"  {k}: {v}")
    finish()


if __name__ == "__main__":
    main()
