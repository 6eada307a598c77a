#!/usr/bin/python3
"""Bootstrap confidence intervals: ctrainer against lm-evaluation-harness's way, in the same run.

The task (issue 5): 100000 bootstrap resamples of accuracy and of macro-F1 over 10000 samples and
10 classes. Both sides get the same (label, prediction) pairs, written here and read by the C side.

ctrainer (build/bench/bench_bootstrap): metrics from their JSON specs, fed in batches of 256, then
ct_metric_uncertainty with 100000 resamples. Both statistics come from the confusion matrix, so a
resample is one multinomial draw of n over its C x C cells, O(resamples x C^2); accuracy is
bootstrapped as micro-F1 (equal to accuracy for single-label data; the "accuracy" metric itself
uses its closed form and resamples nothing).

lm-evaluation-harness (lm_eval/api/metrics.py, bootstrap_stderr with DISABLE_MULTIPROC set, i.e.
_bootstrap_internal_no_mp): chunks of min(1000, iters) resamples, chunk i drawing from
random.Random(i), each resample `rnd.choices(xs, k=len(xs))` over the per-sample list and the
aggregation recomputed on it in pure Python; the standard error is the sample standard deviation
of the resampled values. Accuracy is lm-eval's "mean" aggregation over per-sample 0/1 scores;
macro-F1 is recomputed from (gold, pred) pairs in pure Python (lm-eval's own "f1" aggregation calls
scikit-learn's f1_score per resample, which is slower still: --sklearn times it too). The Python
side is timed for --python-resamples resamples (default 1000: one lm-eval chunk) and scaled
linearly to the full count, which is exact for a loop of identical resamples; the output says so.
With --processes N the Python side runs lm-eval's default path instead (a multiprocessing.Pool of
N workers over the chunks, _bootstrap_internal).

Fair comparison: one thread each by default (ctrainer with OMP_NUM_THREADS=1, lm-eval without
multiprocessing); --threads sets ctrainer's threads.

Usage: bench/bootstrap.py [--n 10000] [--classes 10] [--resamples 100000] [--python-resamples 1000]
                          [--threads 1] [--processes 0] [--sklearn] [--build DIR] [--seed S]"""
import argparse
import json
import math
import multiprocessing as mp
import os
import random
import struct
import sys
import tempfile
import time

from benchlib import ctrainer_level, run_json

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--n", type=int, default=10000)
ap.add_argument("--classes", type=int, default=10)
ap.add_argument("--resamples", type=int, default=100000)
ap.add_argument("--python-resamples", type=int, default=1000,
                help="resamples actually run on the Python side (scaled linearly to --resamples)")
ap.add_argument("--threads", type=int, default=1, help="ctrainer's OpenMP threads")
ap.add_argument("--processes", type=int, default=0,
                help="run lm-eval's multiprocessing path with this many workers (0: DISABLE_MULTIPROC path)")
ap.add_argument("--sklearn", action="store_true",
                help="also time lm-eval's own f1 aggregation (scikit-learn f1_score per resample)")
ap.add_argument("--build", default=os.path.join(here, "..", "build"))
ap.add_argument("--seed", type=int, default=1234)
a = ap.parse_args()
# the CPU kernels' level (CT_CPU_ISA or the CPU's best), as every benchmark reports it
print(f"ctrainer kernels: {ctrainer_level(os.path.join(a.build, 'ctrainer'), os.environ)}", flush=True)


# --- lm-evaluation-harness's bootstrap, reproduced (lm_eval/api/metrics.py) ----------------------

def mean(arr):
    return sum(arr) / len(arr)


def sample_stddev(arr):
    mu = mean(arr)
    return math.sqrt(sum([(x - mu) ** 2 for x in arr]) / (len(arr) - 1))


class _bootstrap_internal:
    """Pool worker: (i, xs) -> n bootstrap replicates of f(xs) using a RNG seeded with i."""

    def __init__(self, f, n):
        self.f = f
        self.n = n

    def __call__(self, v):
        i, xs = v
        rnd = random.Random()
        rnd.seed(i)
        res = []
        for _ in range(self.n):
            res.append(self.f(rnd.choices(xs, k=len(xs))))
        return res


def _bootstrap_internal_no_mp(f, xs, iters):
    """Single-process path: iters // chunk_size chunks of chunk_size = min(1000, iters) draws."""
    res = []
    chunk_size = min(1000, iters)
    for i in range(iters // chunk_size):
        rnd = random.Random(i)
        for _ in range(chunk_size):
            res.append(f(rnd.choices(xs, k=len(xs))))
    return res


def bootstrap_stderr(f, xs, iters, processes):
    """lm-eval's bootstrap_stderr (its tqdm progress bar and print left out); also returns the
    resampled values, for the interval."""
    if processes:
        res = []
        chunk_size = min(1000, iters)
        with mp.Pool(processes) as pool:
            for bootstrap in pool.imap(_bootstrap_internal(f, chunk_size), [(i, xs) for i in range(iters // chunk_size)]):
                res.extend(bootstrap)
    else:
        res = _bootstrap_internal_no_mp(f, xs, iters)
    return sample_stddev(res), res


def macro_f1(items):
    """Macro-F1 of (gold, pred) pairs in pure Python, as scikit-learn's f1_score(average="macro"):
    the mean over the labels seen in golds or preds of 2 tp / (2 tp + fp + fn)."""
    tp, fp, fn = {}, {}, {}
    for gold, pred in items:
        if gold == pred:
            tp[gold] = tp.get(gold, 0) + 1
        else:
            fp[pred] = fp.get(pred, 0) + 1
            fn[gold] = fn.get(gold, 0) + 1
    labels = set(tp) | set(fp) | set(fn)
    total = 0.0
    for c in labels:
        t = tp.get(c, 0)
        total += 2 * t / (2 * t + fp.get(c, 0) + fn.get(c, 0))
    return total / len(labels)


def sklearn_f1_macro(items):
    """lm-eval's f1 aggregation (f1_score on the unzipped pairs), with average="macro"."""
    from sklearn.metrics import f1_score
    golds, preds = list(zip(*items))
    return f1_score(golds, preds, average="macro")


def percentile(values, q):
    """numpy's default ("linear") quantile, as ctrainer's interval."""
    x = sorted(values)
    h = (len(x) - 1) * q
    f = math.floor(h)
    return x[f] if f + 1 >= len(x) else x[f] + (h - f) * (x[f + 1] - x[f])


def timed_bootstrap(f, xs, iters):
    t0 = time.perf_counter()
    se, res = bootstrap_stderr(f, xs, iters, a.processes)
    return time.perf_counter() - t0, se, res


# --- data: labels uniform, predictions right 70% of the time ------------------------------------

rnd = random.Random(a.seed)
golds = [rnd.randrange(a.classes) for _ in range(a.n)]
preds = [g if rnd.random() < 0.7 else rnd.randrange(a.classes) for g in golds]

with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "samples.bin")
    with open(path, "wb") as f:
        f.write(struct.pack(f"<{a.n}q", *golds))
        f.write(struct.pack(f"<{a.n}q", *preds))
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), OMP_WAIT_POLICY="PASSIVE")
    ours = run_json([os.path.join(a.build, "bench", "bench_bootstrap"), str(a.n), str(a.classes), str(a.resamples),
                     str(a.seed), path], env)

py_iters = min(a.python_resamples, a.resamples)
if py_iters >= 1000 and py_iters % 1000:
    sys.exit("--python-resamples: use a multiple of 1000 (lm-eval's chunk size) or fewer than 1000")
scale = a.resamples / py_iters
acc_items = [1.0 if g == p else 0.0 for g, p in zip(golds, preds)]  # lm-eval's per-sample acc
f1_items = list(zip(golds, preds))
py = {"accuracy": timed_bootstrap(mean, acc_items, py_iters), "f1_macro": timed_bootstrap(macro_f1, f1_items, py_iters)}
if a.sklearn:
    sk_iters = min(100, py_iters)
    py["f1_macro_sklearn"] = timed_bootstrap(sklearn_f1_macro, f1_items, sk_iters)

# --- report -------------------------------------------------------------------------------------

# (label, ctrainer's entry, its value key, the Python statistic)
rows = [("accuracy (2-cell table)", "accuracy_cells", "accuracy", "accuracy"),
        ("accuracy as micro-F1 (CxC)", "f1_micro", "f1_micro", "accuracy"),
        ("macro-F1 (CxC)", "f1_macro", "f1_macro", "f1_macro")]
print(f"Bootstrap of {a.resamples} resamples, {a.n} samples, {a.classes} classes; ctrainer on {ours['threads']} "
      f"thread(s), lm-eval's way {'with a Pool of %d processes' % a.processes if a.processes else 'in one process'}")
print(f"Python timed for {py_iters} resamples and scaled x{scale:g} to {a.resamples} (linear: every resample costs "
      f"the same)")
print(f"{'':28}{'ctrainer s':>11}{'python s':>10}{'ratio':>8}   {'stderr c / py':>17}   interval ctrainer | python")
result = {"n": a.n, "classes": a.classes, "resamples": a.resamples, "python_resamples": py_iters,
          "threads": ours["threads"], "processes": a.processes, "ctrainer": ours, "python": {}}
seconds = {}
for label, entry, vkey, pkey in rows:
    c_s = ours[entry]["seconds"]
    p_s, se, res = py[pkey]
    p_full = p_s * scale
    seconds[entry] = (c_s, p_full)
    v = ours[entry]["values"]
    lo, hi = percentile(res, 0.025), percentile(res, 0.975)
    print(f"{label:28}{c_s:>11.3f}{p_full:>10.1f}{p_full / c_s:>7.0f}x   {v[vkey + '_stderr']:.5f} / {se:.5f}"
          f"   [{v[vkey + '_ci_low']:.4f}, {v[vkey + '_ci_high']:.4f}] | [{lo:.4f}, {hi:.4f}]")
    result["python"][pkey] = {"seconds_measured": round(p_s, 4), "seconds_scaled": round(p_full, 2), "stderr": se,
                              "ci_low": lo, "ci_high": hi}


def both(label, entries):
    c_s = sum(seconds[e][0] for e in entries)
    p_s = sum(seconds[e][1] for e in entries)
    ratio = p_s / c_s
    print(f"{label:28}{c_s:>11.3f}{p_s:>10.1f}{ratio:>7.0f}x   ({'meets' if ratio >= 100 else 'BELOW'} the 100x target)")
    return round(ratio, 1)


# Each statistic resampled through its own sufficient statistic (the design of issue 5), and the
# conservative variant where accuracy goes through the C x C table like macro-F1.
result["ratio"] = both("both, each from its table", ["accuracy_cells", "f1_macro"])
result["ratio_metric_api"] = both("both through the CxC table", ["f1_micro", "f1_macro"])
acc = ours["accuracy"]["values"]
print(f"accuracy's closed form (what the accuracy metric reports; Wilson): stderr {acc['accuracy_stderr']:.5f}, "
      f"[{acc['accuracy_ci_low']:.4f}, {acc['accuracy_ci_high']:.4f}] in {ours['accuracy']['seconds'] * 1e6:.0f} us")
if a.sklearn:
    p_s, se, _ = py["f1_macro_sklearn"]
    sk_full = p_s * a.resamples / min(100, py_iters)
    print(f"lm-eval's own f1 aggregation (scikit-learn f1_score per resample, timed for {min(100, py_iters)}): "
          f"{sk_full:.0f} s scaled, {sk_full / ours['f1_macro']['seconds']:.0f}x ctrainer's macro-F1")
    result["python"]["f1_macro_sklearn"] = {"seconds_measured": round(p_s, 4), "seconds_scaled": round(sk_full, 1)}
result["target"] = 100
print(json.dumps(result))
