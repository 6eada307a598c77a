#!/usr/bin/python3
"""Asynchronous evaluation (eval_async) against blocking evaluation: the Fashion-MNIST MLP
(examples/configs/fashion_mnist_mlp.json, batch 128, AdamW) trained for --steps optimizer steps by
`ctrainer train` with OMP_NUM_THREADS=1, so that training holds one core and the evaluator thread
has the other (a 2-core machine; the GPU case of the issue is "train on the GPU, evaluate on the
CPU"). Four runs per round, every one with the same steps, no checkpoints and no logging between:

  none        eval_strategy no: the training throughput without evaluation;
  blocking    eval_strategy steps every --eval-steps steps, synchronous: training stops for each;
  async       the same evaluations with eval_async (policy --policy, "wait" by default, so that
              both runs evaluate the same steps: a snapshot waits for the evaluator rather than
              being replaced);
  continuous  eval_strategy continuous with eval_async: the next evaluation starts on the newest
              weights as soon as the last one ended.

Figures: train_runtime of each run (the training loop from its first step to the end of the last
evaluation: the blocking run's evaluations and the asynchronous runs' final drain included) and
train_samples_per_second (steps x batch / train_runtime, nothing excluded). The evaluation cost is
eval_runtime from the blocking run's log (the forward passes; the per-evaluation cost in wall time,
(blocking - none) / evaluations, which adds the metrics' bootstrap, is printed beside it); the
default --eval-steps and --eval-limit make it about half of the blocking run's interval between
two evaluations (training of --eval-steps steps + one evaluation), the issue's setting.

Targets (issue 9): wall time blocking / async >= 1.5; continuous throughput >= 90% of none.
The runs alternate --repeat times (default 3); every figure is the median and range over the
rounds: the machine is shared and noisy, only figures from the same round compare. Each round also
says how many cores other processes took while its runs ran (from /proc/stat less this script's
children): the comparison needs the second core free for the evaluator.

Usage: bench/async_eval.py [--repeat 3] [--steps 1000] [--eval-steps 25] [--eval-limit 9000]
                           [--policy wait|latest|skip] [--wait-idle SECONDS] [--build DIR]"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import ctrainer_level

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--repeat", type=int, default=3)
ap.add_argument("--steps", type=int, default=1000, help="optimizer steps of each run (batch 128)")
ap.add_argument("--eval-steps", type=int, default=25, help="steps between two evaluations")
ap.add_argument("--eval-limit", type=int, default=9000, help="evaluation samples (Fashion-MNIST test set)")
ap.add_argument("--policy", default="wait", choices=["wait", "latest", "skip"], help="eval_async_policy")
ap.add_argument("--wait-idle", type=float, default=0, metavar="SECONDS",
                help="before each round, wait up to this long for the machine to be idle (other processes "
                     "using < 0.15 cores over 3 s)")
ap.add_argument("--build", default=os.path.join(here, "..", "build"))
ap.add_argument("--config", default=os.path.join(here, "..", "examples", "configs", "fashion_mnist_mlp.json"))
a = ap.parse_args()
# the CPU kernels' level (CT_CPU_ISA or the CPU's best), as every benchmark reports it
print(f"ctrainer kernels: {ctrainer_level(os.path.join(a.build, 'ctrainer'), os.environ)}", flush=True)

ctrainer = os.path.abspath(os.path.join(a.build, "ctrainer"))
if not os.path.exists(ctrainer):
    sys.exit(f"ctrainer not found at {ctrainer} (pass --build)")
# One OpenMP thread for training (the evaluator thread's own kernels then run on the other core);
# PASSIVE as in the other benchmarks (bench/README.md), irrelevant with one thread.
env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE")
COMMON = ["--max_steps", str(a.steps), "--save_strategy", "no", "--logging_steps", "1000000", "--report_to", "none",
          "--set", f"data.eval.limit={a.eval_limit}"]
RUNS = {
    "none": ["--eval_strategy", "no"],
    "blocking": ["--eval_strategy", "steps", "--eval_steps", str(a.eval_steps)],
    "async": ["--eval_strategy", "steps", "--eval_steps", str(a.eval_steps), "--eval_async", "true",
              "--eval_async_policy", a.policy],
    "continuous": ["--eval_strategy", "continuous", "--eval_async", "true"],
}


def busy_seconds():
    """CPU seconds the whole machine spent outside idle so far (/proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def children_seconds():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def train(tmp, label, extra):
    out = os.path.join(tmp, label)
    cmd = [ctrainer, "train", a.config, "--output_dir", out, "--overwrite_output_dir", "true"] + COMMON + extra
    t0, b0, c0 = time.time(), busy_seconds(), children_seconds()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.time() - t0
    # The machine is shared: the cores other processes took while this run ran, which the
    # evaluator thread then did not have.
    others = max(0.0, (busy_seconds() - b0) - (children_seconds() - c0)) / wall
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-3000:]}")
    with open(os.path.join(out, "trainer_state.json")) as f:
        history = json.load(f)["log_history"]
    final = [e for e in history if "train_runtime" in e][-1]
    evals = [e for e in history if "eval_loss" in e]
    return {"train_runtime": final["train_runtime"], "samples_per_second": final["train_samples_per_second"],
            "evaluations": len(evals), "eval_steps": [e["step"] for e in evals],
            "eval_runtime": statistics.median([e["eval_runtime"] for e in evals]) if evals else 0.0,
            "process_wall": wall, "other_cores": others}


def wait_idle(limit):
    t_end = time.time() + limit
    while time.time() < t_end:
        b0 = busy_seconds()
        time.sleep(3)
        if (busy_seconds() - b0) / 3 < 0.15:
            return
    print(f"  (the machine was not idle within {limit:.0f} s; measuring anyway)", flush=True)


rounds = []
with tempfile.TemporaryDirectory() as tmp:
    for i in range(a.repeat):
        if a.wait_idle > 0:
            wait_idle(a.wait_idle)
        r = {name: train(tmp, f"r{i}_{name}", extra) for name, extra in RUNS.items()}
        n = r["blocking"]["evaluations"]
        r["eval_wall"] = (r["blocking"]["train_runtime"] - r["none"]["train_runtime"]) / max(n, 1)
        r["interval_train"] = r["none"]["train_runtime"] / a.steps * a.eval_steps
        r["speedup"] = r["blocking"]["train_runtime"] / r["async"]["train_runtime"]
        r["throughput"] = r["continuous"]["samples_per_second"] / r["none"]["samples_per_second"]
        rounds.append(r)
        print(f"round {i + 1}: none {r['none']['train_runtime']:.2f} s, blocking {r['blocking']['train_runtime']:.2f} s "
              f"({n} evaluations), async {r['async']['train_runtime']:.2f} s ({r['async']['evaluations']}), "
              f"continuous {r['continuous']['train_runtime']:.2f} s ({r['continuous']['evaluations']}); "
              f"wall ratio {r['speedup']:.2f}, continuous throughput {r['throughput']:.1%} of none; other processes "
              f"took {max(x['other_cores'] for x in r.values() if isinstance(x, dict)):.2f} cores at most",
              flush=True)


def col(f):
    return [f(r) for r in rounds]


def summary(values, fmt):
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


ev_rt = col(lambda r: r["blocking"]["eval_runtime"])
ev_wall = col(lambda r: r["eval_wall"])
interval = col(lambda r: r["interval_train"])
share = [e / (t + e) for e, t in zip(ev_rt, interval)]
speedups, throughputs = col(lambda r: r["speedup"]), col(lambda r: r["throughput"])
print(f"\nFashion-MNIST MLP 784-256-128-10, batch 128, AdamW, {a.steps} steps; evaluation of {a.eval_limit} samples "
      f"(accuracy with its bootstrap interval) every {a.eval_steps} steps")
print(f"OMP_NUM_THREADS=1 for training: the training thread holds one core, the evaluator thread the other "
      f"({os.cpu_count()} cores here). eval_async_policy {a.policy}. Median (range) of {a.repeat} rounds.\n")
rows = [
    ("evaluation (eval_runtime, forward passes)", summary([x * 1e3 for x in ev_rt], "{:.1f}") + " ms"),
    ("evaluation (wall, with the metrics)", summary([x * 1e3 for x in ev_wall], "{:.1f}") + " ms"),
    (f"training of {a.eval_steps} steps", summary([x * 1e3 for x in interval], "{:.1f}") + " ms"),
    ("evaluation's share of the blocking interval", summary(share, "{:.0%}")),
    ("", ""),
]
for name in RUNS:
    rows.append((f"{name}: train_runtime", summary(col(lambda r: r[name]["train_runtime"]), "{:.2f}") + " s"))
    rows.append((f"{name}: train samples/s", summary(col(lambda r: r[name]["samples_per_second"]), "{:.0f}")))
    if name != "none":
        rows.append((f"{name}: evaluations", summary(col(lambda r: r[name]["evaluations"]), "{:.0f}")))
rows += [("", ""),
         ("wall time blocking / async (target >= 1.5)", summary(speedups, "{:.2f}") + "x"),
         ("continuous / none throughput (target >= 90%)", summary(throughputs, "{:.1%}"))]
width = max(len(k) for k, _ in rows)
for k, v in rows:
    print(f"  {k:<{width}}  {v}" if k else "")
rows_busy = [max(x["other_cores"] for x in r.values() if isinstance(x, dict)) for r in rounds]
print(f"\n  other processes on the machine: up to {summary(rows_busy, '{:.2f}')} cores during a round's runs "
      "(near 0 for figures that mean anything on a 2-core machine)")
ok_wall = statistics.median(speedups) >= 1.5
ok_tp = statistics.median(throughputs) >= 0.9
print(f"\n  targets: wall time {'met' if ok_wall else 'NOT met'}, throughput {'met' if ok_tp else 'NOT met'}")
if any(r["async"]["evaluations"] != r["blocking"]["evaluations"] for r in rounds):
    print("  note: the asynchronous run evaluated fewer steps than the blocking one (policy "
          f"{a.policy} dropped snapshots): its wall time covers less work")
print(json.dumps({"steps": a.steps, "eval_steps": a.eval_steps, "eval_limit": a.eval_limit, "policy": a.policy,
                  "rounds": [{k: v for k, v in r.items()} for r in rounds]}))
