#!/usr/bin/env python3
"""Compares two runs' log histories (trainer_state.json's log_history), without the wall-clock entries
(runtimes, rates, total_flos), which no two runs share.

    compare_histories.py RUN_A RUN_B [--rtol R] [--keys PREFIX,...]

RUN_A and RUN_B are output directories. With no --rtol (0) every entry must be equal: the same
kernels in the same order give the same bits. With --rtol R, entries must have the same keys, and
each number may differ by R relative to the larger of the two (the logged loss, rounded to four
decimals as Hugging Face logs it, by 5e-5 more): two devices whose kernels sum in other orders.
--keys keeps only the keys that start with one of the prefixes (e.g. eval_ for the evaluations)
and the entries that have one, ordered by step (asynchronous evaluation logs its results when they
are done, among training's entries, and two evaluation sets' in either order). Prints the worst
difference, or the first entry that differs; exit 1 when they differ."""
import argparse
import json
import os
import sys

CLOCK = ("runtime", "per_second", "total_flos")


def history(run, prefixes):
    entries = []
    for e in json.load(open(os.path.join(run, "trainer_state.json")))["log_history"]:
        e = {k: v for k, v in e.items() if not any(c in k for c in CLOCK)}
        if prefixes:
            kept = {k: v for k, v in e.items() if k.startswith(prefixes)}
            if not kept:
                continue
            e = {"step": e.get("step"), **kept}
        entries.append(e)
    if prefixes:
        entries.sort(key=lambda e: (e["step"], sorted(e)))
    return entries


def difference(key, x, y):
    """How far y is from x, in units of the allowed difference's scale (0 when equal)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not isinstance(y, (int, float)):
        return 0.0 if x == y else float("inf")
    if x == y:
        return 0.0
    slack = 5e-5 if key == "loss" else 0.0
    return max(abs(x - y) - slack, 0.0) / max(abs(x), abs(y))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rtol", type=float, default=0.0)
    ap.add_argument("--keys", default="")
    args = ap.parse_args()
    prefixes = tuple(p for p in args.keys.split(",") if p)
    for run in (args.a, args.b):
        if not os.path.isfile(os.path.join(run, "trainer_state.json")):
            print(f"{run}: no trainer_state.json (the run failed)")
            return 1
    a, b = history(args.a, prefixes), history(args.b, prefixes)
    if len(a) != len(b) or not a:
        print(f"{len(a)} log entries in {args.a}, {len(b)} in {args.b}")
        return 1
    worst, where = 0.0, ""
    for x, y in zip(a, b):
        if x.keys() != y.keys():
            print(f"first difference (keys):\n  {x}\n  {y}")
            return 1
        for k in x:
            d = difference(k, x[k], y[k])
            if d > args.rtol:
                print(f"first difference ({k}: {x[k]} against {y[k]}, {d:.2e} relative, allowed {args.rtol}):"
                      f"\n  {x}\n  {y}")
                return 1
            if d > worst:
                worst, where = d, f" ({k} at step {x.get('step')})"
    print(f"{len(a)} log entries {'equal' if worst == 0 else f'agree, worst {worst:.2e} relative{where}'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
