#!/usr/bin/python3
"""Data parallelism on one machine: an epoch of the Fashion-MNIST MLP
(examples/configs/fashion_mnist_mlp.json) trained by 1 rank x 2 OpenMP threads (batch 128) and by
2 MPI ranks x 1 thread (`mpirun -np 2`, batch 64 each: the same global batch of 128), both through
`ctrainer train` with no evaluation and no checkpoints; prints train_samples_per_second of both and
their ratio. Then the communication share of a 2-rank step: bench_allreduce (under mpirun -np 2)
times the all-reduce of the MLP's 235146 gradient floats and the step's one small agreement (6
float64: loss totals, stop signals, non-finite bits) the way the Trainer does them, divided by the 2-rank run's measured step time (1 / train_steps_per_second).

The runs alternate (1 rank, 2 ranks, all-reduce) --repeat times and every figure is reported as
median and range: the machine is shared and noisy, and only figures from the same round compare.

Usage: bench/ddp.py [--repeat 3] [--epochs 1] [--build DIR] [--wait-policy PASSIVE|ACTIVE|default]"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from benchlib import ctrainer_level, run_json

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--repeat", type=int, default=3)
ap.add_argument("--epochs", type=int, default=1)
ap.add_argument("--build", default=os.path.join(here, "..", "build"))
ap.add_argument("--config", default=os.path.join(here, "..", "examples", "configs", "fashion_mnist_mlp.json"))
ap.add_argument("--wait-policy", default="PASSIVE", choices=["PASSIVE", "ACTIVE", "default"],
                help="OMP_WAIT_POLICY of the 2-thread run (see bench/README.md); irrelevant with 1 thread")
ap.add_argument("--iterations", type=int, default=200, help="all-reduces timed by bench_allreduce")
a = ap.parse_args()
# the CPU kernels' level (CT_CPU_ISA or the CPU's best), as every benchmark reports it
print(f"ctrainer kernels: {ctrainer_level(os.path.join(a.build, 'ctrainer'), os.environ)}", flush=True)

ctrainer = os.path.abspath(os.path.join(a.build, "ctrainer"))
allreduce = os.path.abspath(os.path.join(a.build, "bench", "bench_allreduce"))
mpirun = shutil.which("mpirun")
for path, what in ((ctrainer, "ctrainer"), (allreduce, "bench_allreduce (configure with -DCTRAINER_BENCH=ON)")):
    if not os.path.exists(path):
        sys.exit(f"{what} not found at {path} (pass --build)")
if not mpirun:
    sys.exit("mpirun not found")

base_env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
MPI = [mpirun, "-np", "2", "--bind-to", "none"]
GLOBAL_BATCH = 128


def train(tmp, label, ranks, threads):
    env = dict(base_env, OMP_NUM_THREADS=str(threads))
    if a.wait_policy != "default":
        env["OMP_WAIT_POLICY"] = a.wait_policy
    out = os.path.join(tmp, label)
    cmd = (MPI if ranks > 1 else []) + [
        ctrainer, "train", a.config, "--output_dir", out, "--overwrite_output_dir", "true",
        "--num_train_epochs", str(a.epochs),
        "--per_device_train_batch_size", str(GLOBAL_BATCH // ranks), "--eval_strategy", "no",
        "--save_strategy", "no", "--logging_steps", "100000", "--report_to", "none"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-3000:]}")
    with open(os.path.join(out, "train_results.json")) as f:
        return json.load(f)


rows = {"1x2": [], "2x1": [], "comm": []}
with tempfile.TemporaryDirectory() as tmp:
    for i in range(a.repeat):
        one = train(tmp, f"r{i}_1x2", 1, 2)
        two = train(tmp, f"r{i}_2x1", 2, 1)
        comm = run_json(MPI + [allreduce, "235146", str(a.iterations)], dict(base_env, OMP_NUM_THREADS="1"))
        step_s = 1.0 / two["train_steps_per_second"]
        rows["1x2"].append(one)
        rows["2x1"].append(two)
        rows["comm"].append(dict(comm, step_s=step_s, share=comm["step_comm_s"] / step_s))
        print(f"round {i + 1}: 1 rank x 2 threads {one['train_samples_per_second']:.0f} samples/s, "
              f"2 ranks x 1 thread {two['train_samples_per_second']:.0f} samples/s "
              f"(ratio {two['train_samples_per_second'] / one['train_samples_per_second']:.2f}), "
              f"step {step_s * 1e3:.2f} ms, all-reduce {comm['step_comm_s'] * 1e3:.2f} ms "
              f"({comm['step_comm_s'] / step_s:.0%} of the step)", flush=True)


def summary(values, fmt):
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


s1 = [r["train_samples_per_second"] for r in rows["1x2"]]
s2 = [r["train_samples_per_second"] for r in rows["2x1"]]
ratios = [b / x for x, b in zip(s1, s2)]
print(f"\nFashion-MNIST MLP, {a.epochs} epoch(s), global batch {GLOBAL_BATCH}, AdamW; median (range) of {a.repeat} rounds")
print(f"  1 rank x 2 threads (batch 128):   {summary(s1, '{:.0f}')} train samples/s")
print(f"  2 ranks x 1 thread (batch 64x2):  {summary(s2, '{:.0f}')} train samples/s")
print(f"  ratio 2 ranks / 1 rank:           {summary(ratios, '{:.2f}')}")
c = rows["comm"]
print(f"  2-rank step time:                 {summary([x['step_s'] * 1e3 for x in c], '{:.3f}')} ms")
print(f"  all-reduce of 235146 floats:      MPI_Allreduce {summary([x['mpi_allreduce_s'] * 1e3 for x in c], '{:.3f}')} ms, "
      f"Trainer's path {summary([x['ct_comm_allreduce_s'] * 1e3 for x in c], '{:.3f}')} ms")
print(f"  + the step's agreement:           {summary([x['ct_comm_small_s'] * 1e6 for x in c], '{:.1f}')} us")
print(f"  communication share of a step:    {summary([x['share'] for x in c], '{:.1%}')}")
print(json.dumps({"epochs": a.epochs, "global_batch": GLOBAL_BATCH, "wait_policy": a.wait_policy,
                  "train_samples_per_second_1x2": s1, "train_samples_per_second_2x1": s2, "ratio": ratios,
                  "comm": c}))
