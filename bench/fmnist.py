#!/usr/bin/python3
"""Side-by-side benchmark on Fashion-MNIST: ctrainer (`ctrainer demo --json`) and the PyTorch peer
(shared/bench/peer_torch_fmnist.py) train the same model with the same batch size, optimizer and
thread count in the same run; prints both, their ratio, and the fraction of the GEMM-bound limit (the
model's training FLOPs per sample against the sgemm GFLOP/s of ctrainer's GEMM engine measured in
this run: its own by default, OpenBLAS's or oneDNN's under CT_CPU_GEMM=openblas|onednn); and what
the targets (training 2x PyTorch for the CNN and 1.5x for the MLP, evaluation 1.5x) would take of
the multiply-add peak of ctrainer's instruction-set level on these threads (bench_sgemm measures it):
a target above about 90% of it cannot be met by any GEMM, whatever else the step does.

Usage: bench/fmnist.py [--model mlp|cnn] [--epochs N] [--batch N] [--threads N] [--build DIR] [--peer PATH]
                      [--wait-policy PASSIVE|ACTIVE|default] [--openblas detect|environment]
                      [--level best|v2|v3|v4]"""
import argparse
import json
import os
import sys

from benchlib import (TARGETS, add_level_arg, add_openblas_arg, ctrainer_level, level_env, openblas_env,
                      run_json, share_of_peak)

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--model", default="mlp", choices=["mlp", "cnn"])
ap.add_argument("--epochs", type=int, default=1)
ap.add_argument("--batch", type=int, default=128)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--build", default=os.path.join(here, "..", "build"))
ap.add_argument("--wait-policy", default="PASSIVE", choices=["PASSIVE", "ACTIVE", "default"],
                help="OMP_WAIT_POLICY for both sides; on shared 2-vCPU machines spinning OpenMP threads "
                     "steal the core from the working one and slow both frameworks several-fold")
add_openblas_arg(ap)
add_level_arg(ap)
ap.add_argument("--peer", default=os.path.join(here, "..", "..", "shared", "bench", "peer_torch_fmnist.py"))
a = ap.parse_args()


env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
if a.wait_policy != "default":
    env["OMP_WAIT_POLICY"] = a.wait_policy
env, blas_note = openblas_env(env, a.openblas)
env, blas_note = level_env(env, a.level, blas_note)
if not os.path.exists(a.peer):
    sys.exit(f"PyTorch peer not found at {a.peer} (pass --peer)")
isa = ctrainer_level(os.path.join(a.build, "ctrainer"), env)
sgemm = run_json([os.path.join(a.build, "bench", "bench_sgemm"), str(a.threads)], env)
ours = run_json([os.path.join(a.build, "ctrainer"), "demo", "--json", "--model", a.model, "--epochs", str(a.epochs),
                 "--batch", str(a.batch), "--threads", str(a.threads)], env)
peer = run_json(["/usr/bin/python3", a.peer, a.model, str(a.epochs), str(a.batch), str(a.threads)], env)

print(f"Fashion-MNIST {a.model}, batch {a.batch}, {a.epochs} epoch(s), {a.threads} threads, AdamW, "
      f"OMP_WAIT_POLICY={a.wait_policy}; {blas_note}; OpenBLAS {sgemm['openblas_core']} kernels; "
      f"ctrainer kernels {isa}")
print(f"{'':24}{'ctrainer':>12}{'pytorch':>12}{'ratio':>8}")
for key in ("train_samples_per_s", "eval_samples_per_s"):
    print(f"{key:24}{ours[key]:>12.0f}{peer[key]:>12.0f}{ours[key] / peer[key]:>8.2f}")
print(f"{'test_accuracy':24}{ours['test_accuracy']:>12.4f}{peer['test_accuracy']:>12.4f}")
result = {"model": a.model, "batch": a.batch, "threads": a.threads, "wait_policy": a.wait_policy,
          "openblas": blas_note, "level": a.level, "ctrainer_kernels": isa, "ctrainer": ours, "pytorch": peer,
          "train_ratio": round(ours["train_samples_per_s"] / peer["train_samples_per_s"], 2),
          "eval_ratio": round(ours["eval_samples_per_s"] / peer["eval_samples_per_s"], 2), "sgemm": sgemm}
# Multiply-adds per sample of each layer's forward; training does each again for the weight gradient
# and, for every layer but the first, once more for the input gradient.
if a.model == "mlp":
    macs = [784 * 256, 256 * 128, 128 * 10]
    limits = ("sgemm_gflops_mlp_shapes", "sgemm_gflops_1024")
else:  # conv 1->32 3x3 on 28x28, conv 32->64 3x3 on 14x14 (after 2x2 pooling), fc 3136->128, fc 128->10
    macs = [32 * 9 * 28 * 28, 64 * 32 * 9 * 14 * 14, 64 * 7 * 7 * 128, 128 * 10]
    limits = ("sgemm_gflops_1024",)
flops = sum(2 * m * (2 if k == 0 else 3) for k, m in enumerate(macs))
eval_flops = sum(2 * m for m in macs)
result["train_mflop_per_sample"] = round(flops / 1e6, 3)
result["eval_mflop_per_sample"] = round(eval_flops / 1e6, 3)
# The targets as shares of the level's multiply-add peak: the FLOPs alone, at the rate they ask for.
peak = sgemm["peak_gflops"] * 1e9
for key, target, per_sample in (("train", TARGETS["train"][a.model], flops), ("eval", TARGETS["eval"], eval_flops)):
    share = target * share_of_peak(peer[f"{key}_samples_per_s"], per_sample, peak)
    result[f"{key}_target_share_of_peak"] = round(share, 3)
    print(f"{key}: {target:g}x PyTorch would take {share:.0%} of the level's multiply-add peak "
          f"({sgemm['peak_gflops']:.0f} GFLOP/s; ctrainer reached "
          f"{share_of_peak(ours[f'{key}_samples_per_s'], per_sample, peak):.0%})")
target = TARGETS["train"][a.model]
for name in limits:
    limit = sgemm[name] * 1e9 / flops
    frac = ours["train_samples_per_s"] / limit
    result[f"fraction_of_limit_{name}"] = round(frac, 3)
    peer_frac = peer["train_samples_per_s"] / limit
    result[f"pytorch_fraction_of_limit_{name}"] = round(peer_frac, 3)
    print(f"GEMM-bound limit at {name} ({sgemm[name]:.1f} GFLOP/s): {limit:.0f} samples/s, reached {frac:.0%} "
          f"(PyTorch {peer_frac:.0%}; {target:g}x PyTorch would take {target * peer_frac:.0%})")
print(json.dumps(result))
