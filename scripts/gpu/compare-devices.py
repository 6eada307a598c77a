#!/usr/bin/env python3
"""Trains the same run on the CPU and on a GPU and compares the two: the GPU check of the Trainer.

    compare-devices.py CTRAINER OUT_DIR [--steps 300] [--data DIR] [--device cuda]

For the Fashion-MNIST MLP and CNN examples (examples/configs/), STEPS optimizer steps each with a
loss logged every step and one evaluation at the end, once with --device cpu and once with --device
DEVICE. Float32 on both sides with different GEMM libraries, so the curves agree to rounding: the MLP
within 1e-4 relative at every step, the CNN (cuDNN's convolution algorithms sum in other orders, and
differences grow through training) within 1e-3, and the final eval_accuracy within 0.5 points. The MLP
then trains twice more on the GPU with an evaluation every 10 steps, synchronous and asynchronous on the
training GPU (eval_async: the evaluator on a stream of its own beside training's), which must agree to
1e-6 (a race between the two streams would not). The
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


def train(ctrainer, config, device, out, steps, data, evals=()):
    """evals: arguments that replace "--eval_strategy no" (evaluations during training)."""
    cmd = [ctrainer, "train", config, "--device", device, "--output_dir", out, "--overwrite_output_dir", "true",
           "--max_steps", str(steps), "--logging_steps", "1", *(evals or ("--eval_strategy", "no")),
           "--save_strategy", "no", "--per_device_eval_batch_size", "1000", "--set", "data.eval.limit=2000"]
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
    results["evaluations"] = [{k: v for k, v in e.items() if k.startswith("eval_") and "runtime" not in k
                               and "per_second" not in k} | {"step": e["step"]}
                              for e in history if "eval_loss" in e]
    return losses, results, seconds


def relative(x, y):
    return abs(x - y) / max(abs(x), 1e-12)


def eval_async_beside_training(a, config, report):
    """The MLP on the GPU with an evaluation every 10 steps, synchronous and then asynchronous on the
    training GPU itself (the evaluator on a stream of its own, its replica filled while training runs):
    the same training losses and the same evaluations, to rounding (1e-6), or the two streams raced."""
    evals = ("--eval_strategy", "steps", "--eval_steps", "10")
    runs = {}
    for mode, extra in (("sync", ()), ("async", ("--eval_async", "true", "--eval_async_policy", "wait"))):
        out = os.path.join(a.out, f"mlp-{a.device}-evals-{mode}")
        runs[mode] = train(a.ctrainer, config, a.device, out, a.steps, a.data, evals + extra)
    (ls, rs, ss), (la, ra, sa) = runs["sync"], runs["async"]
    worst_loss = max((relative(x, y) for x, y in zip(ls, la)), default=float("inf"))
    es, ea = rs["evaluations"], ra["evaluations"]
    worst_eval = max((relative(x[k], y[k]) for x, y in zip(es, ea) for k in x if k in y and k != "step"),
                     default=float("inf"))
    same_steps = [e["step"] for e in es] == [e["step"] for e in ea]
    passed = len(ls) == len(la) == a.steps and len(ea) > 0 and same_steps and max(worst_loss, worst_eval) <= 1e-6
    report["mlp_eval_async"] = {"evaluations": len(ea), "worst_relative_loss_difference": worst_loss,
                                "worst_relative_eval_difference": worst_eval, "seconds_sync": ss,
                                "seconds_async": sa, "passed": passed}
    print(f"mlp eval_async: {'ok' if passed else 'FAIL'}: {len(ea)} evaluations beside training on {a.device}, "
          f"worst difference from synchronous: losses {worst_loss:.2e}, evaluations {worst_eval:.2e}; "
          f"{ss:.1f} s synchronous, {sa:.1f} s asynchronous")
    return passed


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
        if name == "mlp":
            try:
                ok &= eval_async_beside_training(a, config, report)
            except RuntimeError as e:
                print(f"mlp eval_async: FAIL {e}")
                report["mlp_eval_async"] = {"error": str(e)}
                ok = False
    json.dump(report, open(os.path.join(a.out, "compare-devices.json"), "w"), indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
