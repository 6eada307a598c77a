#!/usr/bin/python3
"""The per-level table of bench/README.md in one command: bench/fmnist.py (MLP and CNN) and
bench/gpt.py at every x86-64 level this CPU offers (v2, v3 and, on an AVX-512 machine, v4) under
both OpenMP wait policies, --rounds times each, and one markdown table of the ratios against
PyTorch with each figure checked against its target (CNN training >= 2x, MLP training >= 1.5x and
>= 70% of the GEMM-bound limit at the MLP's sgemm shapes, evaluation of both >= 1.5x, GPT training
>= 2x with a peak RSS no larger than PyTorch's). A figure that misses its target is marked with
"(below)", with the share of the level's multiply-add peak the target would take where the model's
FLOPs give one (a target near or above the whole peak is out of any kernel's reach on that CPU), and
the run exits 1 if any did, so the same command tells a machine of another kind
whether the targets hold there.

Each child benchmark runs with the same options it would take alone; its own output goes to
stderr, and the table to stdout.

Usage: bench/levels.py [--rounds N] [--levels v2,v3,v4] [--policies PASSIVE,default]
                       [--models mlp,cnn,gpt] [--threads N] [--gpt-steps N] [--build DIR]"""
import argparse
import json
import os
import subprocess
import sys

from benchlib import LEVELS, TARGETS

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--rounds", type=int, default=2, help="measurements of each cell (issue targets ask for two)")
ap.add_argument("--levels", default="", help="comma-separated levels; default: every level this CPU offers")
ap.add_argument("--policies", default="PASSIVE,default", help="OMP_WAIT_POLICY values to measure")
ap.add_argument("--models", default="mlp,cnn,gpt")
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--gpt-steps", type=int, default=20)
ap.add_argument("--build", default=os.path.join(here, "..", "build"))
a = ap.parse_args()



def cpu_levels():
    """The levels whose instructions /proc/cpuinfo lists, lowest first (x86-64 Linux)."""
    try:
        flags = next(line.split(":", 1)[1].split() for line in open("/proc/cpuinfo") if line.startswith("flags"))
    except (OSError, StopIteration):
        return ["v2"]
    need = {"v2": {"sse4_2", "popcnt"}, "v3": {"avx2", "fma", "bmi2"},
            "v4": {"avx512f", "avx512bw", "avx512dq", "avx512vl"}}
    levels = []
    for name in ("v2", "v3", "v4"):
        if not need[name] <= set(flags):
            break
        levels.append(name)
    return levels


def last_json(cmd):
    """Runs a benchmark, passing its report to stderr; returns the JSON objects it printed."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    sys.stderr.write(p.stdout)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}")
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]


def mark(text, ok, share=None):
    """A figure as printed, marked when it misses its target; with the share of the level's multiply-add
    peak that the target would take (the model's FLOPs at the target's rate), where there is one."""
    if ok:
        return text
    return text + (" (below)" if share is None else f" (below; the target takes {share:.0%} of the peak)")


levels = a.levels.split(",") if a.levels else [lv for lv in cpu_levels() if lv in LEVELS]
rows, missed = [], 0
for level in levels:
    for policy in a.policies.split(","):
        for model in a.models.split(","):
            cells = []
            for _ in range(a.rounds):
                common = ["--threads", str(a.threads), "--build", a.build, "--level", level, "--wait-policy", policy]
                if model == "gpt":
                    r = last_json([sys.executable, os.path.join(here, "gpt.py"), "--steps", str(a.gpt_steps)] + common)[-1]
                    cells.append({"train": r["train_ratio"], "rss": (r["ctrainer_peak_rss_mib"], r["pytorch_peak_rss_mib"]),
                                  "kernels": r["ctrainer_kernels"], "train_share": r["train_target_share_of_peak"]})
                else:
                    r = last_json([sys.executable, os.path.join(here, "fmnist.py"), "--model", model] + common)[-1]
                    cells.append({"train": r["train_ratio"], "eval": r["eval_ratio"], "kernels": r["ctrainer_kernels"],
                                  "limit": r.get("fraction_of_limit_sgemm_gflops_mlp_shapes"),
                                  "train_share": r["train_target_share_of_peak"],
                                  "eval_share": r["eval_target_share_of_peak"]})
            checks = [[(f"{c['train']:.2f}", c["train"] >= TARGETS["train"][model], c["train_share"]) for c in cells]]
            if model == "gpt":
                checks.append([(f"{c['rss'][0]} / {c['rss'][1]}", c["rss"][0] <= c["rss"][1], None) for c in cells])
            else:
                checks.append([(f"{c['eval']:.2f}", c["eval"] >= TARGETS["eval"], c["eval_share"]) for c in cells])
            checks.append([(f"{c['limit']:.0%}", c["limit"] >= TARGETS["mlp_limit"], None) for c in cells]
                          if model == "mlp" else [])
            missed += sum(not ok for column in checks for _, ok, _ in column)
            train, other, limit = (", ".join(mark(*figure) for figure in column) for column in checks)
            rows.append((cells[0]["kernels"], policy, model, train, other, limit))

print("| kernels | wait policy | model | train ratio | eval ratio (GPT: peak RSS MiB, ctrainer / PyTorch) "
      "| MLP: fraction of the GEMM-bound limit |")
print("|---|---|---|---|---|---|")
for row in rows:
    print("| " + " | ".join(row) + " |")
print(f"{missed} figure(s) below target" if missed else "every figure at or above its target")
sys.exit(1 if missed else 0)
