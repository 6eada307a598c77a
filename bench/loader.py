#!/usr/bin/python3
"""Can the data loader keep training fed? Runs, in the same run, the loader benchmark (one shuffled
epoch of Fashion-MNIST through ct_loader, batch 128, bench/bench_loader) and one epoch of training
(`ctrainer demo --json --epochs 1`), and prints both throughputs and their ratio. The loader should
deliver at least 10x the samples/s that training consumes, so that it never becomes the bottleneck
and its worker costs the training threads little.

Usage: bench/loader.py [--workers N] [--batch N] [--threads N] [--repeat N] [--build DIR] [--data DIR]"""
import argparse
import json
import os

from benchlib import ctrainer_level, run_json

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--workers", type=int, default=1, help="loader worker threads")
ap.add_argument("--batch", type=int, default=128)
ap.add_argument("--threads", type=int, default=2, help="training threads of the demo")
ap.add_argument("--repeat", type=int, default=3, help="loader runs; the median is reported")
ap.add_argument("--build", default=os.path.join(here, "..", "build"))
ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
a = ap.parse_args()
# the CPU kernels' level (CT_CPU_ISA or the CPU's best), as every benchmark reports it
print(f"ctrainer kernels: {ctrainer_level(os.path.join(a.build, 'ctrainer'), os.environ)}", flush=True)


# As bench/fmnist.py: passive OpenMP waiting, so that idle training threads do not spin on the
# machine's two cores.
env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), OMP_WAIT_POLICY="PASSIVE")
loader_runs = [run_json([os.path.join(a.build, "bench", "bench_loader"), a.data, str(a.workers), str(a.batch)], env)
               for _ in range(a.repeat)]
loader_runs.sort(key=lambda r: r["loader_samples_per_s"])
loader = loader_runs[len(loader_runs) // 2]
train = run_json([os.path.join(a.build, "ctrainer"), "demo", "--json", "--epochs", "1", "--batch", str(a.batch),
                  "--threads", str(a.threads), "--data", a.data], env)

ratio = loader["loader_samples_per_s"] / train["train_samples_per_s"]
print(f"Fashion-MNIST, batch {a.batch}: loader with {a.workers} worker(s) vs MLP training on {a.threads} threads")
print(f"{'loader samples/s':28}{loader['loader_samples_per_s']:>12.0f}  "
      f"(median of {a.repeat}: {', '.join(str(int(r['loader_samples_per_s'])) for r in loader_runs)})")
print(f"{'training samples/s':28}{train['train_samples_per_s']:>12.0f}")
print(f"{'ratio':28}{ratio:>12.1f}  ({'meets' if ratio >= 10 else 'BELOW'} the 10x target)")
print(json.dumps({"batch": a.batch, "workers": a.workers, "threads": a.threads, "loader": loader, "train": train,
                  "ratio": round(ratio, 2), "target": 10}))
