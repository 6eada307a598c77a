#!/usr/bin/python3
"""The whole `ctrainer train` run against its pure training loop, for the Fashion-MNIST MLP example
(examples/configs/fashion_mnist_mlp.json: evaluation, checkpoint and logging every epoch, the model
card at the end): wall time of the process from start to exit, against the time the same number of
optimizer steps take in a bare loop of the same layers, loss and optimizer (`ctrainer demo`, no
evaluation, logging or saving), measured in the same run. Target: the whole run within 15% of the
loop. Also prints where the rest goes, from the run's own metrics (train_runtime, evaluation
runtimes).

Usage: bench/run_overhead.py [--epochs N] [--threads N] [--build DIR] [--repeat N]"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from benchlib import run_json

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--epochs", type=int, default=12, help="the example's own number of epochs by default")
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--repeat", type=int, default=2)
ap.add_argument("--build", default=os.path.join(here, "..", "build"))
a = ap.parse_args()
ctrainer = os.path.join(a.build, "ctrainer")
config = os.path.join(here, "..", "examples", "configs", "fashion_mnist_mlp.json")
env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), OMP_WAIT_POLICY="PASSIVE")

rows = []
for rep in range(a.repeat):
    loop = run_json([ctrainer, "demo", "--json", "--model", "mlp", "--epochs", str(a.epochs), "--batch", "128",
                     "--threads", str(a.threads), "--lr", "1e-3", "--weight-decay", "0.01"], env)
    steps_per_epoch = -(-60000 // 128)
    loop_s = a.epochs * 60000 / loop["train_samples_per_s"]
    out = tempfile.mkdtemp(prefix="ct_overhead_")
    t0 = time.monotonic()
    p = subprocess.run([ctrainer, "train", config, "--num_train_epochs", str(a.epochs), "--output_dir", out,
                        "--disable_tqdm", "true"], env=env, capture_output=True, text=True)
    whole_s = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit(f"ctrainer train failed: {p.stderr}")
    results = json.load(open(os.path.join(out, "all_results.json")))
    state = json.load(open(os.path.join(out, "trainer_state.json")))
    evals = sum(e.get("eval_runtime", 0) for e in state["log_history"])
    shutil.rmtree(out)
    rows.append((loop_s, whole_s, results["train_runtime"], evals))
    print(f"run {rep + 1}: bare loop {loop_s:.2f} s ({a.epochs} epochs, {a.epochs * steps_per_epoch} steps); "
          f"whole `ctrainer train` {whole_s:.2f} s = {whole_s / loop_s:.3f}x "
          f"(train_runtime {results['train_runtime']:.2f} s incl. {evals:.2f} s of evaluation)")
print(json.dumps({"epochs": a.epochs, "threads": a.threads, "loop_s": [round(r[0], 3) for r in rows],
                  "whole_s": [round(r[1], 3) for r in rows],
                  "ratio": [round(r[1] / r[0], 3) for r in rows], "target": 1.15}))
