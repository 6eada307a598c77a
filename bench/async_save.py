#!/usr/bin/python3
"""The save stall: how long training waits per checkpoint with synchronous saves and with save_async,
in the same run of the same training (Fashion-MNIST MLP, AdamW).

For each repeat, three `ctrainer train` runs in turn (the order rotates between repeats) over the
same steps:
  none    save_strategy "no"
  sync    a checkpoint every --save-steps steps, written on the training thread (model.h5,
          optimizer.h5, the JSON files, the manifest with every file fsync'd, the rename)
  async   the same checkpoints with save_async: the training thread copies the state and goes on, the
          writer thread writes and commits beside training
The stall per save is measured two ways:
  direct      the time the training thread spends in the save calls, summed from the Trainer's debug
              lines ("[training thread: X ms]", --log_level debug): the synchronous write; the
              snapshot copy and hand-over, and later the polls, waits for the writer and the
              rotation (the last save's wait at the end of training included)
  end to end  (time of the run with saves - time of the run without) / saves, the run's time being
              train_runtime (it stops before the end of training waits for the last asynchronous
              save) or the process's wall time (start-up is the same for all three and cancels out).
              This includes what the direct figure cannot see (the writer's CPU time and memory
              traffic taken from training, the kernel writing dirty pages back), and the noise of a
              shared machine: only repeats side by side say how far to trust it.
Medians over the repeats; the ratio is the synchronous stall over the asynchronous one (> 1:
save_async stalls less).

Training runs on --threads OpenMP threads (default 1, so that on a 2-core machine the writer has a
core of its own: the stall measured is what save_async can hide; with every core busy training,
the writer takes its CPU time from training). A save can only be hidden when the interval between
saves is longer than writing one: the script prints both.

Usage: bench/async_save.py [--repeat N] [--steps N] [--save-steps N] [--hidden 1024,1024]
                           [--threads N] [--build DIR] [--dir DIR]"""
import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile
import time

from benchlib import ctrainer_level

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--repeat", type=int, default=5, help="runs per variant; the median is reported")
ap.add_argument("--steps", type=int, default=400, help="optimizer steps per run")
ap.add_argument("--save-steps", type=int, default=40, help="a checkpoint every N steps")
ap.add_argument("--hidden", default="1024,1024", help="MLP hidden sizes (784-...-10)")
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of training")
ap.add_argument("--build", default=os.path.join(here, "..", "build"))
ap.add_argument("--dir", default=None, help="where the runs write (default: a temporary directory)")
a = ap.parse_args()
# the CPU kernels' level (CT_CPU_ISA or the CPU's best), as every benchmark reports it
print(f"ctrainer kernels: {ctrainer_level(os.path.join(a.build, 'ctrainer'), os.environ)}", flush=True)
if a.steps % a.save_steps:
    raise SystemExit("--steps must be a multiple of --save-steps (every save counted once)")

CTRAINER = os.path.join(a.build, "ctrainer")
DATA = "/usr/share/datasets/fashion-mnist"
if not os.path.exists(f"{DATA}/train-images-idx3-ubyte.gz"):
    raise SystemExit(f"Fashion-MNIST is not installed at {DATA}")
hidden = [int(h) for h in a.hidden.split(",")]
params = 0
fan_in = 784
for h in hidden + [10]:
    params += fan_in * h + h
    fan_in = h
saves = a.steps // a.save_steps


def config(d):
    c = {"model": {"type": "mlp", "hidden": hidden},
         "data": {"train": {"type": "fashion_mnist", "split": "train",
                            "transforms": [{"type": "normalize", "mean": [0.2860], "std": [0.3530]}]}},
         "loss": {"type": "cross_entropy"},
         "training_args": {"output_dir": "unused", "max_steps": a.steps, "per_device_train_batch_size": a.batch,
                           "optim": "adamw_torch", "learning_rate": 1e-3, "weight_decay": 0.01,
                           "logging_steps": a.steps, "save_steps": a.save_steps, "save_total_limit": 2,
                           "disable_tqdm": True, "seed": 1}}
    path = os.path.join(d, "config.json")
    with open(path, "w") as f:
        json.dump(c, f)
    return path


VARIANTS = {"none": ["--save_strategy", "no"],
            "sync": ["--save_strategy", "steps", "--log_level", "debug"],
            "async": ["--save_strategy", "steps", "--save_async", "true", "--log_level", "debug"]}
WAITED = re.compile(r"\[training thread: ([0-9.]+) ms\]")


def run(cfg, d, variant, rep):
    out = os.path.join(d, f"{variant}_{rep}")
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    t0 = time.perf_counter()
    p = subprocess.run([CTRAINER, "train", cfg, "--output_dir", out, "--overwrite_output_dir", "true"]
                       + VARIANTS[variant], capture_output=True,
                       text=True, env=env)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{variant}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    with open(os.path.join(out, "train_results.json")) as f:
        runtime = json.load(f)["train_runtime"]
    direct = sum(float(x) for x in WAITED.findall(p.stdout + p.stderr)) / 1e3
    if variant != "none":
        ckpts = [x for x in os.listdir(out) if x.startswith("checkpoint-")]
        if len(ckpts) != 2 or any(x.endswith(".tmp") for x in ckpts):
            raise SystemExit(f"{variant}: checkpoints {ckpts}")
        size = sum(os.path.getsize(os.path.join(out, ckpts[0], x)) for x in os.listdir(os.path.join(out, ckpts[0])))
    else:
        size = 0
    subprocess.run(["rm", "-rf", out])
    return runtime, wall, direct, size


with tempfile.TemporaryDirectory(dir=a.dir) as d:
    cfg = config(d)
    run(cfg, d, "none", "warmup")  # page cache, data decoding
    t = {v: {"runtime": [], "wall": [], "direct": []} for v in VARIANTS}
    size = 0
    order = list(VARIANTS)
    for rep in range(a.repeat):
        for v in order[rep % 3:] + order[:rep % 3]:
            runtime, wall, direct, s = run(cfg, d, v, rep)
            t[v]["runtime"].append(runtime)
            t[v]["wall"].append(wall)
            t[v]["direct"].append(direct)
            size = max(size, s)

med = {v: {k: statistics.median(x) for k, x in m.items()} for v, m in t.items()}
print(f"MLP 784-{'-'.join(map(str, hidden))}-10 ({params:,} parameters), batch {a.batch}, AdamW, {a.steps} steps, "
      f"a checkpoint every {a.save_steps} steps ({saves} saves, {size / 2**20:.1f} MiB each), "
      f"{a.threads} training thread(s), median of {a.repeat}")
step_ms = med["none"]["runtime"] / a.steps * 1e3
print(f"  a training step: {step_ms:.2f} ms; between two saves: {step_ms * a.save_steps:.0f} ms of training")
result = {"params": params, "steps": a.steps, "save_steps": a.save_steps, "saves": saves, "checkpoint_bytes": size,
          "threads": a.threads, "repeat": a.repeat, "median_s": med}
print(f"  {'':30}{'none s':>9}{'sync s':>9}{'async s':>9}{'sync stall/save ms':>20}{'async stall/save ms':>21}"
      f"{'ratio':>8}")
for k, label in (("direct", "direct (training thread)"), ("runtime", "end to end, train_runtime"),
                 ("wall", "end to end, process wall")):
    if k == "direct":
        sync_stall, async_stall = med["sync"][k] / saves, med["async"][k] / saves
    else:
        sync_stall = (med["sync"][k] - med["none"][k]) / saves
        async_stall = (med["async"][k] - med["none"][k]) / saves
    ratio = sync_stall / async_stall if async_stall > 0 else float("nan")
    print(f"  {label:30}{med['none'][k]:>9.3f}{med['sync'][k]:>9.3f}{med['async'][k]:>9.3f}"
          f"{sync_stall * 1e3:>20.1f}{async_stall * 1e3:>21.1f}{ratio:>8.2f}")
    result[f"{k}_stall_sync_ms"] = sync_stall * 1e3
    result[f"{k}_stall_async_ms"] = async_stall * 1e3
    result[f"{k}_ratio"] = ratio
spread = {v: (min(t[v]["runtime"]), max(t[v]["runtime"])) for v in VARIANTS}
print("  train_runtime spread (min-max s): " + ", ".join(f"{v} {lo:.2f}-{hi:.2f}" for v, (lo, hi) in spread.items()))
print(json.dumps(result))
