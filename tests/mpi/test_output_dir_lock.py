"""The output_dir lock in a distributed run: only rank 0 takes it (and cleans what a dead run left);
the other ranks wait for it in one collective and never deadlock.

Usage (ctest runs it): python3 test_output_dir_lock.py PATH/TO/ctrainer

Cases (an MLP on 64 Fashion-MNIST samples, 4 steps, a checkpoint every 2):
  1. `mpirun -np 2` on an output_dir with a stale lock file (a holder that no longer runs) and the
     leftovers of a killed run (checkpoint-3.tmp, checkpoint-2.deleting): the job succeeds; exactly
     one "taking over" warning, from rank 0; the leftovers are gone, checkpoint-2 and checkpoint-4
     are whole, and no lock file is left;
  2. a one-process run that trains until it is killed holds the output_dir; `mpirun -np 2` on it
     ends non-zero well within ddp_timeout; every rank that prints an error gives the reason (rank 0
     names the holder's pid, the other rank says that the main process failed, with that message;
     the first abort may end the other rank before it prints); the holder still runs, its lock file
     and output_dir untouched; no process of the job is left."""
import json
import os
import subprocess
import tempfile
import time

from mpilib import CTRAINER, ENV, MPIRUN, check, finish

MPI = [MPIRUN, "--oversubscribe", "--bind-to", "none", "--tag-output", "-np", "2"]
TIMEOUT_S = 30  # ddp_timeout: a hang would take at least this long


def config(d, max_steps, name, save="steps"):
    path = os.path.join(d, name)
    with open(path, "w") as f:
        json.dump({"model": {"type": "mlp", "hidden": [8]},
                   "data": {"train": {"type": "fashion_mnist", "split": "train", "limit": 64}},
                   "training_args": {"max_steps": max_steps, "per_device_train_batch_size": 8,
                                     "save_strategy": save, "save_steps": 2, "report_to": [],
                                     "ddp_timeout": TIMEOUT_S}}, f)
    return path


def main():
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out")
        os.makedirs(os.path.join(out, "checkpoint-3.tmp"))
        os.makedirs(os.path.join(out, "checkpoint-2.deleting"))
        with open(os.path.join(out, ".ctrainer.lock"), "w") as f:
            f.write('{"pid": 999999999, "host": "gone-host", "started": "2020-01-02 03:04:05 UTC"}')
        p = subprocess.run(MPI + [CTRAINER, "train", config(d, 4, "run.json"), "--output_dir", out], env=ENV,
                           capture_output=True, text=True, timeout=300)
        text = p.stdout + p.stderr
        check(p.returncode == 0, f"stale lock and leftovers, 2 ranks: exit {p.returncode}: {text[-2000:]}")
        takeovers = [line for line in text.splitlines() if "taking over the lock left by pid 999999999" in line]
        check(len(takeovers) == 1 and takeovers[0].startswith("[1,0]"),
              f"expected one take-over warning, from rank 0: {takeovers}")
        names = sorted(os.listdir(out))
        check("checkpoint-3.tmp" not in names and "checkpoint-2.deleting" not in names,
              f"the leftovers stayed: {names}")
        check(".ctrainer.lock" not in names, f"the job left its lock file: {names}")
        for step in (2, 4):
            check(os.path.exists(os.path.join(out, f"checkpoint-{step}", "manifest.json")),
                  f"checkpoint-{step} is missing: {names}")

        held = os.path.join(d, "held")
        holder = subprocess.Popen([CTRAINER, "train", config(d, 100000000, "forever.json", "no"), "--output_dir", held],
                                  env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            lock = os.path.join(held, ".ctrainer.lock")
            deadline = time.time() + 120
            while time.time() < deadline and not (os.path.exists(lock) and os.path.getsize(lock) > 0):
                time.sleep(0.05)
            with open(lock) as f:
                record = f.read()
            before = sorted(os.listdir(held))
            t0 = time.time()
            p = subprocess.run(MPI + [CTRAINER, "train", config(d, 4, "run.json"), "--output_dir", held], env=ENV,
                               capture_output=True, text=True, timeout=300)
            took = time.time() - t0
            text = p.stdout + p.stderr
            check(p.returncode != 0, f"a job on a held output_dir succeeded: {text[-2000:]}")
            check(took < TIMEOUT_S, f"the refused job took {took:.1f} s (ddp_timeout {TIMEOUT_S} s): a rank waited")
            want = f"output_dir '{held}' is in use by another run: pid {holder.pid} on host"
            errors = [line for line in text.splitlines() if "ctrainer train:" in line]
            check(any(line.startswith("[1,0]") and want in line for line in errors),
                  f"rank 0 did not name the holder: {errors}")
            for line in errors:
                if line.startswith("[1,1]"):
                    check("output_dir lock: the main process (rank 0) failed:" in line and want in line,
                          f"rank 1's message: {line}")
            check(holder.poll() is None, "the holder ended")
            with open(lock) as f:
                check(f.read() == record, "the holder's lock record changed")
            after = sorted(os.listdir(held))
            check(after == before, f"the held output_dir changed: {before} -> {after}")
        finally:
            holder.kill()
            holder.wait()
        left = subprocess.run(["pgrep", "-f", "run.json --output_dir " + held], capture_output=True, text=True)
        check(not left.stdout.strip(), f"processes of the refused job are left: {left.stdout}")
    finish()


if __name__ == "__main__":
    main()
