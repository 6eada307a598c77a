"""Soak test (issue 13): a long `ctrainer train` with evaluation and saving every 100 steps must hold
its resident memory and open file descriptors flat and leave no checkpoint beyond save_total_limit.

Usage (ctest runs it): python3 test_soak.py PATH/TO/ctrainer [--steps N] [--variant sync|async|all]
                       [--keep DIR] [--samples PREFIX]

The run is tests/cli/configs/tiny_sequential.json (an MLP on Fashion-MNIST, two evaluation sets, two
metrics with bootstrap intervals, a JSONL callback) for N steps (10000 by default) with batch 16 on
1024 samples, logging, evaluation and saving every 100 steps and save_total_limit 2, in two variants:
  sync:  synchronous evaluation and saves;
  async: eval_async and save_async: the evaluator and writer threads, their snapshots and results
         (where a buffer or a descriptor kept per evaluation or save would hide).
While it runs, a sampler thread reads the process's VmRSS (/proc/PID/status) and counts its open
descriptors (/proc/PID/fd) every 5 ms; each sample is tagged with the last step the trainer logged
(its output is read as it comes: the printer flushes every log line). The first 10% of the steps are
warm-up (allocator arenas, the evaluator's replica, the writer's reused buffers); the rest, up to the
last log, is cut into thirds by step. Checks per variant:
  - RSS: the median of the last third exceeds the first third's by at most RSS_BOUND, and so does the
    largest sample. What legitimately grows is the log history, kept in memory for every save's
    trainer_state.json: 300 entries (the two sets' evaluations carry 17 values each), +6 KiB of heap
    per 100 steps (valgrind massif: all of it in ct_trainer_state_log), which the allocator turns into
    +14 KiB (sync) to +23 KiB (async: more threads, more arenas) of RSS per 100 steps, linear to
    30000 steps: 0.8 and 1.4 MiB between the thirds. The bound, 3 MiB (3% of the ~90 MiB the process
    holds, most of it the Fashion-MNIST arrays), is twice that. It caught every planted leak of a
    realistic size: 32 KiB per log entry (+6.6 MiB), the asynchronous evaluation's weight snapshot
    (~100 KiB per evaluation, +7.6 MiB), the asynchronous save's trainer_state.json text (+7.6 MiB),
    512 bytes per training step (+3.7 MiB); 256 bytes per step (+2.5 MiB) is below it (steps allocate
    nothing at all: unit.test_no_alloc), as are leaks of a few KiB per save (LeakSanitizer's and
    valgrind's job). docs/soak.md has the figures;
  - descriptors: between saves the process holds stdin/out/err and the events file; a save in flight
    adds the file being written (or a directory synced or deleted). The least and the most count of
    the later thirds may exceed the first third's by that one descriptor at most (one descriptor kept
    per save adds ~30 per third);
  - checkpoints: at the end exactly the last two (checkpoint-N-100 and checkpoint-N), each whole (every
    file its manifest lists with its size and CRC-32), no *.tmp or *.deleting directory, and while
    running never more committed at once than the limit plus the newest before rotation;
  - the final model.h5 (an HDF5 file); N/100 loss entries and N/100 evaluations of each evaluation set
    in trainer_state.json's log history, at steps 100, 200, ..., N (an asynchronous evaluation that a
    newer snapshot replaced, which the trainer logs at log_level info, is expected missing), and the
    same evaluations in the JSONL callback's events file.
The figures (RSS at the first log, per third, at the end, peak; descriptors; checkpoints; run time) are
printed for every variant. A ctrainer built with a sanitizer (scripts/sanitize.sh's ASan pass runs
the whole suite) gets every check but the RSS bound: AddressSanitizer's quarantine of freed blocks
grows RSS by ~20 MiB here, and LeakSanitizer judges leaks at exit instead. Exit 77 (skipped) without
Debian's Fashion-MNIST package."""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from checklib import check, finish  # noqa: E402 (the folder above is on the path only now)

CONFIG = os.path.join(HERE, "..", "cli", "configs", "tiny_sequential.json")
DATA = "/usr/share/datasets/fashion-mnist"
LOG_EVERY = 100
SAVE_TOTAL_LIMIT = 2
EVAL_SETS = ("small", "other")
MiB = 1 << 20
RSS_BOUND = 3 * MiB
SAMPLE_EVERY = 0.005
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
CTRAINER = SANITIZER = None  # set by main()


def mib(n):
    return f"{n / MiB:.2f} MiB"


def short(names, keep=4):
    """A long list of names as its ends and its length (for messages)."""
    return str(names) if len(names) <= 2 * keep else f"{names[:keep]} ... {names[-keep:]} ({len(names)})"


def read_rss(pid):
    """(VmRSS, VmHWM) in bytes, or None once the process is gone or a zombie (no Vm lines)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            text = f.read()
    except OSError:
        return None
    rss = re.search(r"^VmRSS:\s+(\d+) kB", text, re.M)
    hwm = re.search(r"^VmHWM:\s+(\d+) kB", text, re.M)
    return (int(rss.group(1)) * 1024, int(hwm.group(1)) * 1024) if rss and hwm else None


def count_fds(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def fd_targets(pid):
    """What the process has open (for the message when the count grows)."""
    out = []
    try:
        for fd in sorted(os.listdir(f"/proc/{pid}/fd"), key=int):
            try:
                out.append(f"{fd}->{os.readlink(f'/proc/{pid}/fd/{fd}')}")
            except OSError:
                pass
    except OSError:
        pass
    return out


def committed_checkpoints(out):
    try:
        return sorted((d for d in os.listdir(out) if re.fullmatch(r"checkpoint-\d+", d)),
                      key=lambda d: int(d.split("-")[1]))
    except OSError:
        return []


class Run:
    """One `ctrainer train` with its output read line by line and a sampler thread beside it."""

    def __init__(self, cmd, out, timeout):
        self.out = out
        self.step = 0           # the last logged step (0 before the first log)
        self.training = True    # False once the train metrics are out (final save, test, plots)
        self.samples = []       # (step, training, rss, hwm, fds)
        self.lines = []
        self.max_checkpoints = 0
        self.fds_first = self.fds_last = None  # what is open at the first and the last loss log
        self.timed_out = False
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     bufsize=1, env={**os.environ, "OMP_NUM_THREADS": "1"})
        self.killer = threading.Timer(timeout, self._kill)
        self.killer.start()
        self.sampler = threading.Thread(target=self._sample, daemon=True)
        self.sampler.start()

    def _kill(self):
        self.timed_out = True
        self.proc.kill()

    def _sample(self):
        pid = self.proc.pid
        n = 0
        while self.proc.poll() is None:
            mem = read_rss(pid)
            fds = count_fds(pid)
            if mem is not None and fds is not None:
                self.samples.append((self.step, self.training, mem[0], mem[1], fds))
            n += 1
            if n % 10 == 0:  # a directory listing of the output costs more than /proc: every 10th
                self.max_checkpoints = max(self.max_checkpoints, len(committed_checkpoints(self.out)))
            time.sleep(SAMPLE_EVERY)

    def wait(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.startswith("{'loss'"):
                self.step += LOG_EVERY
                self.fds_last = fd_targets(self.proc.pid)
                if self.fds_first is None:
                    self.fds_first = self.fds_last
            elif line.startswith("{'train_runtime'"):
                self.training = False
        rc = self.proc.wait()
        self.killer.cancel()
        self.sampler.join()
        return rc


def thirds(samples, warm, steps):
    """The training samples after warm-up, cut into three by step. Those after the last log are left
    out: the end of training (its last evaluation and save, the events file closed) is no steady state."""
    span = (steps - warm) / 3
    parts = [[], [], []]
    for step, training, rss, hwm, fds in samples:
        if training and warm <= step < steps:
            parts[min(2, int((step - warm) // span))].append((rss, fds))
    return parts


def manifest_ok(ckpt):
    """Every file the manifest lists has its size and CRC-32 (the checkpoint is whole)."""
    try:
        with open(os.path.join(ckpt, "manifest.json")) as f:
            files = json.load(f)["files"]
        for name, e in files.items():
            with open(os.path.join(ckpt, name), "rb") as f:
                data = f.read()
            if len(data) != e["size"] or f"{zlib.crc32(data) & 0xffffffff:08x}" != e["crc32"]:
                return False
        return bool(files)
    except (OSError, ValueError, KeyError, TypeError):
        return False


def check_log(label, out, steps, missing):
    """N/100 loss entries and N/100 evaluations per set, less those a newer snapshot replaced. (The
    synchronous evaluation logs each set's entry; the asynchronous one logs one entry with both.)"""
    want = list(range(LOG_EVERY, steps + 1, LOG_EVERY))
    with open(os.path.join(out, "trainer_state.json")) as f:
        history = json.load(f)["log_history"]
    loss_steps = [e.get("step") for e in history if "loss" in e]
    check(loss_steps == want, f"{label}: loss logged at {len(loss_steps)} steps, not at every {LOG_EVERY}: "
          f"{short(loss_steps)}")
    with open(os.path.join(out, "events.jsonl")) as f:
        events = [json.loads(line) for line in f if line.strip()]
    expected = [s for s in want if s not in missing]
    counts = []
    for name in EVAL_SETS:
        key = f"eval_{name}_loss"
        got = [e.get("step") for e in history if key in e]
        counts.append(len(got))
        check(got == expected, f"{label}: {len(got)} evaluations of '{name}' in the log history, "
              f"{len(expected)} expected ({len(missing)} replaced): {short(got)}")
        # after training, the final evaluation of the run config (at step N) is logged once more
        in_events = [e.get("step") for e in events if key in e]
        check(in_events[:len(expected)] == expected and len(in_events) == len(expected) + 1,
              f"{label}: {len(in_events)} evaluations of '{name}' in the events file, "
              f"{len(expected)} + the final one expected: {short(in_events)}")
    return len(loss_steps), counts


def soak(tmp, variant, steps, samples_prefix):
    label = f"{variant}, {steps} steps"
    out = os.path.join(tmp, variant)
    shutil.rmtree(out, ignore_errors=True)  # --keep: a fresh run, not a resumed or appended one
    cmd = [CTRAINER, "train", CONFIG, "--output_dir", out, "--max_steps", str(steps),
           "--per_device_train_batch_size", "16", "--set", "data.train.limit=1024",
           "--logging_steps", str(LOG_EVERY), "--eval_strategy", "steps", "--eval_steps", str(LOG_EVERY),
           "--save_strategy", "steps", "--save_steps", str(LOG_EVERY),
           "--save_total_limit", str(SAVE_TOTAL_LIMIT), "--disable_tqdm", "true", "--log_level", "info"]
    if variant == "async":
        cmd += ["--eval_async", "true", "--save_async", "true"]
    t0 = time.time()
    run = Run(cmd, out, timeout=max(300, steps * 0.03))  # ~10 s here, ~40 s under ASan
    rc = run.wait()
    took = time.time() - t0
    text = "".join(run.lines)
    if samples_prefix:
        with open(f"{samples_prefix}.{variant}.csv", "w") as f:
            f.write("step,training,rss,hwm,fds\n")
            for smp in run.samples:
                f.write(",".join(str(int(x)) for x in smp) + "\n")
    if not check(rc == 0 and not run.timed_out,
                 f"{label}: exit code {rc}{' (killed: too slow)' if run.timed_out else ''}\n{text[-4000:]}"):
        return
    replaced = {int(m) for m in re.findall(r"replaces the waiting one of step (\d+)", text)}
    skipped = {int(m) for m in re.findall(r"step (\d+) skipped", text)}

    warm = max(LOG_EVERY, (steps // 10) // LOG_EVERY * LOG_EVERY)
    parts = thirds(run.samples, warm, steps)
    logged = [s for s in run.samples if s[1] and s[0] >= LOG_EVERY]
    if not check(all(parts) and logged, f"{label}: too few samples ({len(run.samples)}) to judge"):
        return
    rss = [[r for r, _ in p] for p in parts]
    fds = [[f for _, f in p] for p in parts]
    med = [statistics.median(r) for r in rss]
    top = [max(r) for r in rss]
    hwm = max(s[3] for s in run.samples)
    print(f"  {label}: {took:.1f} s, {len(run.samples)} samples ({len(logged)} while training after the first log)")
    print(f"    RSS: at the first log {mib(logged[0][2])}, after warm-up (step {warm}) {mib(parts[0][0][0])}, "
          f"median per third {' / '.join(mib(m) for m in med)}, end of training {mib(logged[-1][2])}, "
          f"max while training {mib(max(s[2] for s in logged))}, peak (VmHWM, whole run) {mib(hwm)}")
    print(f"    RSS growth, last third against the first: median {(med[2] - med[0]) / 1024:+.0f} KiB, "
          f"max {(top[2] - top[0]) / 1024:+.0f} KiB (bound {RSS_BOUND / 1024:.0f} KiB)")
    print("    descriptors per third (min-max, share of samples at the min): " + " | ".join(
        f"{min(f)}-{max(f)}, {100 * f.count(min(f)) / len(f):.0f}%" for f in fds))
    print(f"    checkpoints: at most {run.max_checkpoints} committed at once, at the end "
          f"{short(committed_checkpoints(out))}")
    if replaced or skipped:
        print(f"    asynchronous evaluations replaced by a newer snapshot: {len(replaced)}, skipped: {len(skipped)}")

    if SANITIZER:
        print(f"    RSS not judged: this ctrainer is built with {SANITIZER}, whose quarantine of freed blocks "
              f"and shadow memory grow it (LeakSanitizer judges leaks at exit, through the exit code)")
    else:
        check(med[2] - med[0] <= RSS_BOUND, f"{label}: resident memory grew by {mib(med[2] - med[0])} "
              f"(median of the last third against the first), more than {mib(RSS_BOUND)}")
        check(top[2] - top[0] <= RSS_BOUND, f"{label}: the largest resident memory grew by "
              f"{mib(top[2] - top[0])} (last third against the first), more than {mib(RSS_BOUND)}")
    # One descriptor of slack either way: a third in which the writer was never idle when sampled
    # (asynchronous saves back to back on a slow disk), or one whose saves were all too quick to be
    # seen (a fast disk), moves its least or its most by the one file a save holds open.
    flat = all(min(f) <= min(fds[0]) + 1 and max(f) <= max(fds[0]) + 1 for f in fds[1:])
    check(flat, f"{label}: open descriptors not flat (min, max per third {[(min(f), max(f)) for f in fds]})"
          f"\n  at the first log: {run.fds_first}\n  at the last log: {run.fds_last}")

    want = [f"checkpoint-{s}" for s in range(steps - LOG_EVERY * (SAVE_TOTAL_LIMIT - 1), steps + 1, LOG_EVERY)]
    ckpts = committed_checkpoints(out)
    check(ckpts == want, f"{label}: checkpoints {short(ckpts)} at the end, expected {want}")
    stray = [d for d in sorted(os.listdir(out)) if d.startswith("checkpoint") and d not in ckpts]
    check(not stray, f"{label}: temporary or partial checkpoint directories left: {short(stray)}")
    for c in want:
        check(manifest_ok(os.path.join(out, c)), f"{label}: {c} is missing or does not match its manifest")
    check(run.max_checkpoints <= SAVE_TOTAL_LIMIT + 1,
          f"{label}: {run.max_checkpoints} checkpoints at once while training (limit {SAVE_TOTAL_LIMIT})")
    model = os.path.join(out, "model.h5")
    head = b""
    if os.path.exists(model):
        with open(model, "rb") as f:
            head = f.read(len(HDF5_SIGNATURE))
    check(head == HDF5_SIGNATURE, f"{label}: no final model (an HDF5 file) at {model}")
    n_loss, n_eval = check_log(label, out, steps, replaced | skipped)
    print(f"    log history: {n_loss} loss entries, evaluations per set {n_eval}")


def sanitizer(path):
    """The sanitizer the program is built with (its runtime's entry point among its symbols), or None."""
    with open(path, "rb") as f:
        image = f.read()
    for symbol, name in ((b"__asan_init", "AddressSanitizer"), (b"__tsan_init", "ThreadSanitizer"),
                         (b"__msan_init", "MemorySanitizer")):
        if symbol in image:
            return name
    return None


def main():
    global CTRAINER, SANITIZER
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ctrainer")
    ap.add_argument("--steps", type=int, default=10000)
    ap.add_argument("--variant", choices=("sync", "async", "all"), default="all")
    ap.add_argument("--keep", help="run in this directory and keep it (default: a temporary one)")
    ap.add_argument("--samples", help="write each variant's samples to SAMPLES.<variant>.csv "
                    "(step, training, rss, hwm, fds)")
    a = ap.parse_args()
    CTRAINER = os.path.abspath(a.ctrainer)
    SANITIZER = sanitizer(CTRAINER)
    if a.steps < 10 * LOG_EVERY or a.steps % LOG_EVERY:
        ap.error(f"--steps must be a multiple of {LOG_EVERY} and at least {10 * LOG_EVERY}")
    if not os.path.exists(f"{DATA}/train-images-idx3-ubyte.gz"):
        print(f"skipped: Fashion-MNIST is not installed at {DATA}")
        sys.exit(77)
    variants = ("sync", "async") if a.variant == "all" else (a.variant,)
    if a.keep:
        os.makedirs(a.keep, exist_ok=True)
        for v in variants:
            soak(a.keep, v, a.steps, a.samples)
    else:
        with tempfile.TemporaryDirectory(prefix="ct_soak_") as tmp:
            for v in variants:
                soak(tmp, v, a.steps, a.samples)
    finish()


if __name__ == "__main__":
    main()
