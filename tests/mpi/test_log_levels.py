"""Who prints what in a data-parallel run: log_level, log_level_replica and the printer's roles, as
Hugging Face's Trainer and example scripts have them, end to end through `mpirun -np 2 ctrainer train`.

Usage (ctest runs it): python3 test_log_levels.py PATH/TO/ctrainer

A tiny run (an MLP on 200 Fashion-MNIST images, batch 8 per rank, 4 steps, a log every 2) under
mpirun --tag-output, which marks each line with its rank and stream ("[1,R]<stderr>:"); the logger
prefixes its own lines with "[rank R/2] " too, and both must agree. Checked:
  - defaults (log_level passive, log_level_replica warning): the CLI gives the process that logs info
    level, so rank 0 prints HF's "***** Running training *****" block once, with the run's numbers
    (200 examples, total batch 8 x 2 ranks = 16, 4 steps, 12,730 parameters); rank 1 prints no
    logger line at all;
  - log_level_replica info: both ranks print the block, each with its own prefix;
  - log_level error: no rank prints an info line;
  - in every case the printer's metric dicts ({'loss': ...}, {'train_runtime': ...}) come once, from
    rank 0 (HF's PrinterCallback prints on the local process zero, and both ranks share a node);
  - one process without mpirun: the block once, without a rank prefix.
A fresh seed each run (CT_TEST_SEED=N repeats one)."""
import json
import os
import re
import subprocess
import tempfile

from mpilib import CTRAINER, ENV, MPIRUN, SEED, check, finish  # noqa: E402 (after the optional imports)

N_TRAIN, BATCH, MAX_STEPS, LOGGING_STEPS = 200, 8, 4, 2
# 784 -> 16 -> 10: 784 * 16 + 16 + 16 * 10 + 10 trainable parameters.
PARAMS = 784 * 16 + 16 + 16 * 10 + 10
CONFIG = {
    "model": {"type": "mlp", "hidden": [16]},
    "data": {"train": {"type": "fashion_mnist", "split": "train", "limit": N_TRAIN}},
    "loss": {"type": "cross_entropy"},
    "metrics": ["accuracy"],
    "training_args": {
        "output_dir": "unused",
        "max_steps": MAX_STEPS,
        "per_device_train_batch_size": BATCH,
        "learning_rate": 1e-3,
        "logging_strategy": "steps",
        "logging_steps": LOGGING_STEPS,
        "eval_strategy": "no",
        "save_strategy": "no",
        "seed": SEED,
    },
}
BLOCK_TITLE = "***** Running training *****"


def block(world):
    """HF's lines, in order, for this run on `world` processes."""
    return [BLOCK_TITLE, f"  Num examples = {N_TRAIN:,}", "  Num Epochs = 1",
            f"  Instantaneous batch size per device = {BATCH:,}",
            f"  Total train batch size (w. parallel, distributed & accumulation) = {BATCH * world:,}",
            "  Gradient Accumulation steps = 1", f"  Total optimization steps = {MAX_STEPS:,}",
            f"  Number of trainable parameters = {PARAMS:,}"]


TAG = re.compile(r"^\[1,(\d+)\]<(stdout|stderr)>:(.*)$")


def run(tmp, label, world, *options):
    """Runs the training; returns {(rank, stream): [lines]} (rank 0 for a plain run) and the output."""
    out_dir = os.path.join(tmp, label)
    cmd = [CTRAINER, "train", os.path.join(tmp, "run.json"), "--output_dir", out_dir, *options]
    if world:
        cmd = [MPIRUN, "--oversubscribe", "--bind-to", "none", "--tag-output", "-np", str(world)] + cmd
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=240)
    except subprocess.TimeoutExpired as e:
        check(False, f"{label}: no result after 240 s: {' '.join(cmd)}\n{e.stderr}")
        finish()
    text = f"--- stdout\n{p.stdout[-3000:]}\n--- stderr\n{p.stderr[-3000:]}"
    if not check(p.returncode == 0, f"{label}: exit code {p.returncode}: {' '.join(cmd)}\n{text}"):
        finish()
    lines = {}
    for stream, s in (("stdout", p.stdout), ("stderr", p.stderr)):
        for line in s.splitlines():
            m = TAG.match(line) if world else None
            if world and not m:
                continue  # mpirun's own lines
            rank, st, body = (int(m[1]), m[2], m[3]) if m else (0, stream, line)
            lines.setdefault((rank, st), []).append(body)
    return lines, text


def logger_lines(lines, rank, world):
    """The logger's lines from `rank`, prefix checked and taken off."""
    prefix = f"[rank {rank}/{world}] " if world > 1 else ""
    return [l[len(prefix):] for l in lines.get((rank, "stderr"), []) if l.startswith(prefix)]


def check_block(lines, rank, world, label, text):
    got = logger_lines(lines, rank, world)
    want = block(world)
    check(got.count(BLOCK_TITLE) == 1, f"{label}: rank {rank} printed the title {got.count(BLOCK_TITLE)} times\n{text}")
    if BLOCK_TITLE in got:
        i = got.index(BLOCK_TITLE)
        check(got[i:i + len(want)] == want, f"{label}: rank {rank}'s block\n got {got[i:i + len(want)]}\nwant {want}")


def check_printer(lines, world, label, text):
    """The printer's dicts: every logged step and the final summary once, on rank 0's stdout."""
    dicts = {r: [l for l in lines.get((r, "stdout"), []) if l.startswith("{'")] for r in range(world)}
    steps = [l for l in dicts[0] if l.startswith("{'loss'")]
    final = [l for l in dicts[0] if l.startswith("{'train_runtime'")]
    check(len(steps) == MAX_STEPS // LOGGING_STEPS and len(final) == 1,
          f"{label}: rank 0 printed {len(steps)} step dicts and {len(final)} final ones, expected "
          f"{MAX_STEPS // LOGGING_STEPS} and 1\n{text}")
    for r in range(1, world):
        check(not dicts[r], f"{label}: rank {r} printed metric dicts: {dicts[r][:3]}")


with tempfile.TemporaryDirectory() as tmp:
    with open(os.path.join(tmp, "run.json"), "w") as f:
        json.dump(CONFIG, f, indent=1)

    print("defaults: info on rank 0, warnings only on rank 1")
    lines, text = run(tmp, "defaults", 2)
    check_block(lines, 0, 2, "defaults", text)
    check(not any(l.startswith("[rank 1/2]") for l in lines.get((1, "stderr"), [])),
          f"defaults: rank 1 printed logger lines: {lines.get((1, 'stderr'), [])[:5]}")
    check(not any(l.startswith("[rank 1/2]") for l in lines.get((0, "stderr"), [])),
          "defaults: rank 0's stderr has rank 1's prefix")
    check_printer(lines, 2, "defaults", text)

    print("log_level_replica info: both ranks")
    lines, text = run(tmp, "replica_info", 2, "--log_level_replica", "info")
    for r in (0, 1):
        check_block(lines, r, 2, "replica info", text)
    check_printer(lines, 2, "replica info", text)

    print("log_level error: no info line anywhere")
    lines, text = run(tmp, "main_error", 2, "--log_level", "error")
    for r in (0, 1):
        got = logger_lines(lines, r, 2)
        check(not any("Running training" in l or l.startswith("  ") for l in got),
              f"log_level error: rank {r} printed info lines: {got[:5]}")
    check_printer(lines, 2, "log_level error", text)

    print("one process: the block without a rank prefix")
    lines, text = run(tmp, "single", None)
    check_block(lines, 0, 1, "one process", text)
    check(not any(l.startswith("[rank ") for l in lines.get((0, "stderr"), [])), "one process: a rank prefix")
    check_printer(lines, 1, "one process", text)

finish()
