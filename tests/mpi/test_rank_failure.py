"""A distributed run where one rank goes wrong ends everywhere, with a non-zero exit and a message,
instead of leaving the other ranks waiting in a collective.

Usage (ctest runs it): python3 test_rank_failure.py PATH/TO/ctrainer

Cases, each under `mpirun --oversubscribe`:
  1. config mismatch (MPMD: `-np 1 ctrainer ... : -np 1 ctrainer ... --learning_rate 0.1`, and a
     3-rank job whose rank 2 has another model): exit code 2 (a config error), and EVERY rank prints
     the check's message naming the rank that differs, before any training;
  2. a rank killed mid-training (SIGKILL to rank 2 of 3, then to rank 0 of 3): mpirun exits non-zero
     within 30 s and no ctrainer process of the job remains;
  3. a rank that hangs (SIGSTOP to rank 1 of 3, ddp_timeout 5): the others give up after ddp_timeout
     with "no answer from the other ranks", the job ends non-zero within ddp_timeout + 30 s and no
     process remains (the stopped one included);
  4. SIGTERM to rank 1 of 3 (pre-emption): every rank stops at the same step with one checkpoint
     holding every rank's progress file, exit 143;
  5. a rank whose own step fails (rank 2 started in another working directory, so the relative
     output_dir it writes its checkpoint progress file into does not exist there, as on a node
     without the shared file system): the job ends non-zero with rank 2's message, and no checkpoint
     is committed without rank 2's file.
The processes are found by scanning /proc for the ctrainer descendants of mpirun (their rank from
OMPI_COMM_WORLD_RANK in their environment). Whatever this script started is killed at the end."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

CTRAINER = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else "build/ctrainer"
DATA = "/usr/share/datasets/fashion-mnist"
MPIRUN = shutil.which("mpirun")
if not MPIRUN:
    print("skipped: mpirun is not installed")
    sys.exit(77)
if not os.path.exists(f"{DATA}/train-images-idx3-ubyte.gz"):
    print(f"skipped: Fashion-MNIST is not installed at {DATA}")
    sys.exit(77)

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
MPI = [MPIRUN, "--oversubscribe", "--bind-to", "none"]
END_WITHIN_S = 30  # after the failure, for mpirun to notice and end the job

passed = failed = 0
started = []  # every Popen and PID this script started or found, killed at the end


def check(cond, msg):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL", msg)
    return cond


def finish():
    cleanup()
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


def alive(pid):
    """Running or stopped, not gone and not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def cleanup():
    for x in started:
        pid = x.pid if isinstance(x, subprocess.Popen) else x
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if isinstance(x, subprocess.Popen):
            try:
                x.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


def children():
    """pid -> parent pid of every process."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                out[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            pass
    return out


def ranks_of(mpirun_pid):
    """rank -> pid of the ctrainer processes under mpirun (any depth)."""
    parent = children()
    found = {}
    for pid in parent:
        p, depth = pid, 0
        while p in parent and p != mpirun_pid and p > 1 and depth < 8:
            p, depth = parent[p], depth + 1
        if p != mpirun_pid or pid == mpirun_pid:
            continue
        try:
            if os.path.basename(os.readlink(f"/proc/{pid}/exe")) != "ctrainer":
                continue
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        for kv in env:
            if kv.startswith(b"OMPI_COMM_WORLD_RANK="):
                found[int(kv.split(b"=", 1)[1])] = pid
    return found


def config(tmp, **args):
    ta = {"output_dir": os.path.join(tmp, "unused"), "max_steps": 1000000, "per_device_train_batch_size": 8,
          "learning_rate": 1e-3, "logging_steps": 20, "eval_strategy": "no", "save_strategy": "no",
          "report_to": "jsonl", "seed": 7}
    ta.update(args)
    c = {"model": {"type": "mlp", "hidden": [32]},
         "data": {"train": {"type": "fashion_mnist", "split": "train", "limit": 1993}},
         "loss": {"type": "cross_entropy"}, "metrics": ["accuracy"], "training_args": ta}
    path = os.path.join(tmp, f"run{len(os.listdir(tmp))}.json")
    with open(path, "w") as f:
        json.dump(c, f)
    return path


def run_to_end(cmd, limit, label, cwd=None):
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV, cwd=cwd)
    started.append(p)
    try:
        out, _ = p.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        check(False, f"{label}: still running after {limit} s: {' '.join(cmd)}")
        finish()
    return p.returncode, out, time.time() - t0


def wait_training(p, out_dir, world, label, console, lines=2, limit=90):
    """Waits until rank 0 has logged `lines` entries and every rank's process is there."""
    t0 = time.time()
    log = os.path.join(out_dir, "log.jsonl")
    while time.time() - t0 < limit:
        if p.poll() is not None:
            check(False, f"{label}: the job ended (exit {p.returncode}) before training was under way:\n"
                         f"{open(console.name).read()[-3000:]}")
            finish()
        n = sum(1 for _ in open(log)) if os.path.exists(log) else 0
        ranks = ranks_of(p.pid)
        if n >= lines and len(ranks) == world:
            started.extend(ranks.values())
            return ranks
        time.sleep(0.2)
    check(False, f"{label}: training not under way after {limit} s")
    finish()


def after_failure(p, ranks, limit, label):
    """Waits for mpirun to end; checks its exit code, the time and that no rank's process is left."""
    t0 = time.time()
    try:
        p.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        check(False, f"{label}: the job still runs {limit} s after the failure (ranks alive: "
                     f"{[r for r, pid in ranks.items() if alive(pid)]})")
        finish()
    took = time.time() - t0
    check(p.returncode != 0, f"{label}: mpirun exited with 0")
    time.sleep(0.5)
    left = [r for r, pid in ranks.items() if alive(pid)]
    check(not left, f"{label}: ranks {left} still run after mpirun ended")
    print(f"  {label}: mpirun exit {p.returncode} {took:.1f} s after the failure")
    return took


def mismatch_cases(tmp):
    cfg = config(tmp, max_steps=20, output_dir=os.path.join(tmp, "mismatch"))
    base = [CTRAINER, "train", cfg]
    rc, out, took = run_to_end(MPI + ["-np", "1"] + base + [":", "-np", "1"] + base + ["--learning_rate", "0.1"],
                               60, "mismatch of 2")
    print(f"  mismatch of 2 ranks: exit {rc} after {took:.1f} s")
    check(rc == 2, f"mismatch of 2: exit code {rc}, expected 2 (a config error)\n{out[-2000:]}")
    for r in (0, 1):
        check(f"check_same (rank {r}/2)" in out and "differs between ranks" in out,
              f"mismatch of 2: no message from rank {r}:\n{out[-2000:]}")
    check("rank 1 has" in out, f"mismatch of 2: the message does not name rank 1:\n{out[-2000:]}")
    check("'loss'" not in out, "mismatch of 2: training ran before the check")

    # Repeated: whether a slow rank gets to print before mpirun ends the job is a race.
    for attempt in range(4):
        lab = f"mismatch of 3 (attempt {attempt + 1})"
        rc, out, took = run_to_end(MPI + ["-np", "2"] + base + [":", "-np", "1"] + base + ["--set", "model.hidden=[16]"],
                                   60, lab)
        print(f"  {lab}, rank 2 has another model: exit {rc} after {took:.1f} s")
        check(rc == 2, f"{lab}: exit code {rc}, expected 2\n{out[-2000:]}")
        for r in (0, 1, 2):
            check(f"check_same (rank {r}/3)" in out, f"{lab}: no message from rank {r}:\n{out[-2000:]}")
        check("rank 2 has" in out and "rank 1 has" not in out and "1 of 3 ranks differ" in out,
              f"{lab}: the message does not name exactly rank 2:\n{out[-2000:]}")


def kill_case(tmp, victim, sig, label, **args):
    out_dir = os.path.join(tmp, label)
    cfg = config(tmp, output_dir=out_dir, **args)
    # Output to a file: a pipe nobody reads while training runs would fill and stall rank 0.
    with open(os.path.join(tmp, label + ".out"), "w+") as console:
        p = subprocess.Popen(MPI + ["-np", "3", CTRAINER, "train", cfg], stdout=console, stderr=subprocess.STDOUT,
                             env=ENV)
        started.append(p)
        ranks = wait_training(p, out_dir, 3, label, console)
        os.kill(ranks[victim], sig)
        took = after_failure(p, ranks, END_WITHIN_S + args.get("ddp_timeout", 0), label)
        console.seek(0)
        return console.read(), took


def sigterm_checks(tmp, out):
    """All ranks stop at the same step boundary, with one checkpoint holding every rank's file."""
    import re
    label = "SIGTERM rank 1 of 3"
    steps = set(re.findall(r"stopped by signal 15 at step (\d+)", out))
    check(len(steps) == 1, f"{label}: ranks stopped at steps {steps}:\n{out[-2000:]}")
    check("Exit code:    143" in out or "exit code 143" in out.lower(),
          f"{label}: no rank exited with 143 (128 + SIGTERM):\n{out[-2000:]}")
    if len(steps) == 1:
        ckpt = os.path.join(tmp, label, f"checkpoint-{steps.pop()}")
        files = sorted(os.listdir(ckpt)) if os.path.isdir(ckpt) else []
        check(all(f"rng_state_{r}.json" in files for r in range(3)) and "manifest.json" in files,
              f"{label}: the checkpoint {ckpt} has {files}")


def error_on_one_rank(tmp):
    """Rank 2 runs in a directory where the relative output_dir does not exist."""
    label = "checkpoint error on rank 2"
    main_dir, other_dir = os.path.join(tmp, "node_a"), os.path.join(tmp, "node_b")
    os.makedirs(main_dir)
    os.makedirs(other_dir)
    cfg = config(tmp, output_dir="out", max_steps=60, save_strategy="steps", save_steps=20, ddp_timeout=20)
    cmd = MPI + ["-np", "2", "--wdir", main_dir, CTRAINER, "train", cfg, ":",
                 "-np", "1", "--wdir", other_dir, CTRAINER, "train", cfg]
    rc, out, took = run_to_end(cmd, 20 + END_WITHIN_S + 30, label)
    print(f"  {label}: exit {rc} after {took:.1f} s")
    check(rc != 0, f"{label}: the job exited 0:\n{out[-2000:]}")
    check("rank 2/3" in out, f"{label}: no message from rank 2:\n{out[-3000:]}")
    ckpt = os.path.join(main_dir, "out", "checkpoint-20")
    if os.path.isdir(ckpt):
        files = sorted(os.listdir(ckpt))
        check("rng_state_2.json" in files,
              f"{label}: checkpoint-20 was committed without rank 2's progress file (it has {files}):\n{out[-2000:]}")
    else:
        check(True, "")
    check(not any(d.startswith("checkpoint-40") for d in os.listdir(os.path.join(main_dir, "out"))),
          f"{label}: training went on after rank 2 failed")


try:
    with tempfile.TemporaryDirectory() as tmp:
        print("config mismatch")
        mismatch_cases(tmp)
        print("a rank killed mid-training")
        kill_case(tmp, 2, signal.SIGKILL, "SIGKILL rank 2 of 3")
        kill_case(tmp, 0, signal.SIGKILL, "SIGKILL rank 0 of 3")
        print("a rank that hangs")
        out, took = kill_case(tmp, 1, signal.SIGSTOP, "SIGSTOP rank 1 of 3", ddp_timeout=5)
        check("no answer from the other ranks within 5 s (ddp_timeout)" in out,
              f"SIGSTOP rank 1 of 3: no ddp_timeout message:\n{out[-3000:]}")
        check(took >= 4.5, f"SIGSTOP rank 1 of 3: the job ended after {took:.1f} s, before ddp_timeout (5 s)")
        print("SIGTERM to one rank (pre-emption)")
        out, took = kill_case(tmp, 1, signal.SIGTERM, "SIGTERM rank 1 of 3")
        sigterm_checks(tmp, out)
        print("a rank whose step fails")
        error_on_one_rank(tmp)
finally:
    cleanup()
finish()
