#!/usr/bin/python3
"""The whole `ctrainer train` run against its pure training loop, for the Fashion-MNIST MLP example
(examples/configs/fashion_mnist_mlp.json: evaluation, checkpoint and logging every epoch, the model
card and curves at the end). Target: the whole run within 15% of the loop.

- whole: wall time of the `ctrainer train` process from start to exit (start-up, loading the data,
  the steps, evaluation, logging, checkpointing, the final model, the model card).
- loop: the same config's training steps alone, the run's own train_runtime with evaluation, saving
  and logging turned off (the same model, data, transforms, clipping and optimizer: only what the
  issue counts as overhead is gone).
- For reference, the bare loop of `ctrainer demo` (the same layers, loss and optimizer straight on
  the ops: no Trainer, no gradient clipping, no normalisation transform), in the same run.

Also prints where the rest goes, from the whole run's own metrics (train_runtime, evaluation runtimes).

Usage: bench/run_overhead.py [--epochs N] [--threads N] [--build DIR] [--repeat N] [--openblas detect|environment]"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from benchlib import add_openblas_arg, ctrainer_level, openblas_env, run_json

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--epochs", type=int, default=12, help="the example's own number of epochs by default")
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--repeat", type=int, default=2)
ap.add_argument("--build", default=os.path.join(here, "..", "build"))
add_openblas_arg(ap)
a = ap.parse_args()
# the CPU kernels' level (CT_CPU_ISA or the CPU's best), as every benchmark reports it
print(f"ctrainer kernels: {ctrainer_level(os.path.join(a.build, 'ctrainer'), os.environ)}", flush=True)
ctrainer = os.path.join(a.build, "ctrainer")
config = os.path.join(here, "..", "examples", "configs", "fashion_mnist_mlp.json")
env, blas_note = openblas_env(dict(os.environ, OMP_NUM_THREADS=str(a.threads), OMP_WAIT_POLICY="PASSIVE"), a.openblas)
print(blas_note)


def train(*overrides):
    """Runs the example with overrides; returns (wall seconds, all_results, trainer_state)."""
    out = tempfile.mkdtemp(prefix="ct_overhead_")
    try:
        t0 = time.monotonic()
        p = subprocess.run([ctrainer, "train", config, "--num_train_epochs", str(a.epochs), "--output_dir", out,
                            "--overwrite_output_dir", "true",
                            "--disable_tqdm", "true", *overrides], env=env, capture_output=True, text=True)
        wall = time.monotonic() - t0
        if p.returncode != 0:
            sys.exit(f"ctrainer train failed: {p.stderr}")
        return (wall, json.load(open(os.path.join(out, "all_results.json"))),
                json.load(open(os.path.join(out, "trainer_state.json"))))
    finally:
        shutil.rmtree(out)


rows = []
for rep in range(a.repeat):
    _, bare, _ = train("--eval_strategy", "no", "--save_strategy", "no", "--logging_strategy", "no")
    loop_s = bare["train_runtime"]
    whole_s, results, state = train()
    evals = sum(e.get("eval_runtime", 0) for e in state["log_history"])
    demo = run_json([ctrainer, "demo", "--json", "--model", "mlp", "--epochs", str(a.epochs), "--batch", "128",
                     "--threads", str(a.threads), "--lr", "1e-3", "--weight-decay", "0.01"], env)
    demo_s = a.epochs * 60000 / demo["train_samples_per_s"]
    rows.append((loop_s, whole_s, demo_s))
    print(f"run {rep + 1}: training loop {loop_s:.2f} s ({a.epochs} epochs); whole `ctrainer train` {whole_s:.2f} s "
          f"= {whole_s / loop_s:.3f}x (its train_runtime {results['train_runtime']:.2f} s incl. {evals:.2f} s of "
          f"evaluation; start-up, loading and the final saves {whole_s - results['train_runtime']:.2f} s); "
          f"bare `ctrainer demo` loop {demo_s:.2f} s: whole run {whole_s / demo_s:.3f}x of it")
print(json.dumps({"epochs": a.epochs, "threads": a.threads, "loop_s": [round(r[0], 3) for r in rows],
                  "whole_s": [round(r[1], 3) for r in rows], "ratio": [round(r[1] / r[0], 3) for r in rows],
                  "demo_loop_s": [round(r[2], 3) for r in rows],
                  "ratio_to_demo": [round(r[1] / r[2], 3) for r in rows], "target": 1.15}))
