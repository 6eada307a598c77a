#!/usr/bin/env python3
"""Trains the same run on the CPU and on a GPU and compares the two: the GPU check of the Trainer.

    compare-devices.py CTRAINER OUT_DIR [--steps 300] [--data DIR] [--device cuda]

For the Fashion-MNIST MLP and CNN examples (examples/configs/), STEPS optimizer steps each with a
loss logged every step and one evaluation at the end, once with --device cpu and once with --device
DEVICE. Float32 on both sides with different GEMM libraries, so the curves agree to rounding: the MLP
within 1e-4 relative at every step, the CNN (cuDNN's convolution algorithms sum in other orders, and
differences grow through training) within 1e-3, and the final eval_accuracy within 0.5 points. The
figures (steps/s on each device, worst relative difference) go to OUT_DIR/compare-devices.json and
one line per model to stdout; the exit status is 1 when a comparison fails.

--data DIR: the directory with the Fashion-MNIST .gz files (when they are not in the default place).
With CTRAINER_CHECKED_DEVICE=1 and no GPU the check runs against the checked device, where both
sides run the CPU's kernels and agree exactly."""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = {"mlp": ("fashion_mnist_mlp.json", 1e-4), "cnn": ("fashion_mnist_cnn.json", 1e-3)}


def train(ctrainer, config, device, out, steps, data):
    cmd = [ctrainer, "train", config, "--device", device, "--output_dir", out, "--overwrite_output_dir", "true",
           "--max_steps", str(steps), "--logging_steps", "1", "--eval_strategy", "no", "--save_strategy", "no",
           "--per_device_eval_batch_size", "1000", "--set", "data.eval.limit=2000"]
    for split in ("train", "eval"):
        # the examples keep their HDF5 cache under the repository's runs/; here it is OUT_DIR's
        cache = os.path.join(os.path.dirname(os.path.abspath(out)), f"fashion_mnist_{split}.h5")
        cmd += ["--set", f"data.{split}.cache={json.dumps(cache)}"]
        if data:
            cmd += ["--set", f"data.{split}.dir={json.dumps(data)}"]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.time() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{device}: exit {p.returncode}: {p.stderr.strip().splitlines()[-1:]}")
    history = json.load(open(os.path.join(out, "trainer_state.json")))["log_history"]
    losses = [e["loss"] for e in history if "loss" in e]
    results = json.load(open(os.path.join(out, "all_results.json")))
    return losses, results, seconds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ctrainer")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--data", default="")
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    report, ok = {}, True
    for name, (config_file, tol) in MODELS.items():
        config = os.path.join(ROOT, "examples", "configs", config_file)
        try:
            cpu = train(a.ctrainer, config, "cpu", os.path.join(a.out, f"{name}-cpu"), a.steps, a.data)
            gpu = train(a.ctrainer, config, a.device, os.path.join(a.out, f"{name}-{a.device}"), a.steps, a.data)
        except RuntimeError as e:
            print(f"{name}: FAIL {e}")
            report[name] = {"error": str(e)}
            ok = False
            continue
        (lc, rc, sc), (lg, rg, sg) = cpu, gpu
        worst = max((abs(x - y) / max(abs(x), 1e-12) for x, y in zip(lc, lg)), default=float("inf"))
        acc_c, acc_g = rc.get("eval_accuracy", float("nan")), rg.get("eval_accuracy", float("nan"))
        passed = len(lc) == len(lg) == a.steps and worst <= tol and abs(acc_c - acc_g) <= 0.005
        ok &= passed
        report[name] = {"steps": a.steps, "worst_relative_loss_difference": worst, "tolerance": tol,
                        "eval_accuracy_cpu": acc_c, "eval_accuracy_gpu": acc_g, "seconds_cpu": sc, "seconds_gpu": sg,
                        "passed": passed}
        print(f"{name}: {'ok' if passed else 'FAIL'}: {len(lg)} steps, worst loss difference {worst:.2e} "
              f"(tolerance {tol:g}), eval_accuracy cpu {acc_c:.4f} {a.device} {acc_g:.4f}, "
              f"{sc:.1f} s on cpu, {sg:.1f} s on {a.device} (start-up and evaluation included)")
    json.dump(report, open(os.path.join(a.out, "compare-devices.json"), "w"), indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
