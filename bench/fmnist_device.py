#!/usr/bin/python3
"""Fashion-MNIST MLP and CNN training on one device (a GPU by default): ctrainer's Trainer against
PyTorch eager, in the same run, on the same device. The models are those of
examples/configs/fashion_mnist_mlp.json and fashion_mnist_cnn.json (MLP 784-256-128-10 with ReLU;
CNN conv 32 and 64 with ReLU and 2x2 max pooling, a 128 hidden layer, dropout 0.25, 10 outputs), at
batch 128, AdamW (lr 1e-3, weight decay 0.01), inputs normalised the same way. Precision: float32 on
both sides (PyTorch's TF32 switched off, as ctrainer's float32 math computes exactly), or with --bf16
ctrainer's bf16 and PyTorch's bf16 autocast.

Timing: W warm-up steps, then N timed ones. ctrainer runs twice, for W and for W + N steps; the
difference of the two runs' train_runtime (train_results.json) is the time of the N steps, so the
start-up and the first steps cancel (a one-step run before them makes the data cache both read).
PyTorch times its N steps after the W, the device synchronised at both ends. Each side draws its
batches at random from the data set held in host memory and copies each one to the device. That copy
comes from pinned memory on a GPU: ctrainer's loader does the same.

Peak device memory: ctrainer's from Hugging Face's memory metrics (memory in use before init, plus the
init and train alloc deltas, plus the train peaked delta); PyTorch's is torch.cuda.max_memory_allocated.
On the CPU there is none.

Prints a table per model and one JSON line each.

Usage: bench/fmnist_device.py [--device cuda|cpu] [--models mlp,cnn] [--warmup 20] [--steps 300] [--bf16]
                              [--build DIR] [--python PY] [--data DIR]"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)

PEER = r"""
import gzip, json, sys, time
import numpy as np
import torch
import torch.nn as nn
device, kind, data, warmup, steps, bf16 = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), \
    int(sys.argv[5]), sys.argv[6] == "1"
cuda = device.startswith("cuda")
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.manual_seed(42)
def idx(name, offset):
    with gzip.open(f"{data}/{name}") as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)
x = torch.tensor(idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28), dtype=torch.float32)
x = (x / 255 - 0.2860) / 0.3530
y = torch.tensor(idx("train-labels-idx1-ubyte.gz", 8), dtype=torch.long)
if cuda:
    x, y = x.pin_memory(), y.pin_memory()
if kind == "mlp":
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                          nn.Linear(128, 10))
else:
    model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10))
model = model.to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
loss_fn = nn.CrossEntropyLoss()
batch = 128
sync = torch.cuda.synchronize if cuda else (lambda: None)
def step():
    i = torch.randint(0, len(x), (batch,))
    xb, yb = x[i].to(device, non_blocking=True), y[i].to(device, non_blocking=True)
    opt.zero_grad(set_to_none=True)
    with torch.autocast(device_type="cuda" if cuda else "cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = loss_fn(model(xb), yb)
    loss.backward()
    opt.step()
    return loss
for _ in range(warmup):
    step()
sync()
if cuda:
    torch.cuda.reset_peak_memory_stats()
t0 = time.perf_counter()
for _ in range(steps):
    loss = step()
sync()
seconds = time.perf_counter() - t0
print(json.dumps({"torch": torch.__version__, "train_samples_per_s": steps * batch / seconds,
                  "peak_mib": torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
                  "last_loss": float(loss)}))
"""


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return p.stdout


def ctrainer_run(a, model, steps, out_dir, cache_dir):
    """train_results.json of `ctrainer train` on the model's example config for `steps` steps."""
    config = os.path.join(root, "examples", "configs", f"fashion_mnist_{model}.json")
    cmd = [os.path.join(a.build, "ctrainer"), "train", config, "--device", a.device, "--max_steps", str(steps),
           "--output_dir", out_dir, "--overwrite_output_dir", "true", "--eval_strategy", "no",
           "--eval_on_start", "false", "--save_strategy", "no",
           "--logging_strategy", "no", "--set", "training_args.report_to=[]",
           "--set", f'data.train.cache="{cache_dir}/train.h5"', "--set", f'data.eval.cache="{cache_dir}/test.h5"',
           "--set", f'data.train.dir="{a.data}"', "--set", f'data.eval.dir="{a.data}"']
    if a.bf16:
        cmd += ["--bf16", "true"]
    run(cmd)
    with open(os.path.join(out_dir, "train_results.json")) as f:
        return json.load(f)


def peak_mib(results):
    """What the process had allocated on the device at its peak in training, from HF's memory keys."""
    keys = ("before_init_mem_gpu", "init_mem_gpu_alloc_delta", "train_mem_gpu_alloc_delta",
            "train_mem_gpu_peaked_delta")
    if "train_mem_gpu_peaked_delta" not in results:
        return None
    return sum(results.get(k, 0) for k in keys) / 2**20


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--build", default=os.path.join(root, "build"))
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    a = ap.parse_args()
    precision = "bf16" if a.bf16 else "float32"
    with tempfile.TemporaryDirectory() as tmp:
        for model in a.models.split(","):
            ctrainer_run(a, model, 1, os.path.join(tmp, f"{model}_prime"), tmp)  # the data cache, made once
            short = ctrainer_run(a, model, a.warmup, os.path.join(tmp, f"{model}_short"), tmp)
            full = ctrainer_run(a, model, a.warmup + a.steps, os.path.join(tmp, f"{model}_full"), tmp)
            seconds = full["train_runtime"] - short["train_runtime"]
            if not seconds > 0:
                sys.exit(f"{model}: the longer run took no longer ({full['train_runtime']} s against "
                         f"{short['train_runtime']} s); give more --steps")
            ours = {"train_samples_per_s": a.steps * 128 / seconds, "peak_mib": peak_mib(full),
                    "last_loss": full.get("train_loss")}
            peer = json.loads(run([a.python, "-c", PEER, a.device, model, a.data, str(a.warmup), str(a.steps),
                                   "1" if a.bf16 else "0"]).strip().splitlines()[-1])
            ratio = ours["train_samples_per_s"] / peer["train_samples_per_s"]
            print(f"Fashion-MNIST {model}, batch 128, {precision}, {a.device}, {a.steps} timed steps "
                  f"after {a.warmup}; PyTorch {peer['torch']} eager")
            print(f"{'':24}{'ctrainer':>12}{'PyTorch':>12}{'ratio':>8}")
            print(f"{'train_samples_per_s':24}{ours['train_samples_per_s']:>12.0f}"
                  f"{peer['train_samples_per_s']:>12.0f}{ratio:>8.2f}")
            if ours["peak_mib"] is not None and peer["peak_mib"] is not None:
                print(f"{'peak_device_mib':24}{ours['peak_mib']:>12.1f}{peer['peak_mib']:>12.1f}"
                      f"{ours['peak_mib'] / peer['peak_mib']:>8.2f}")
            print(json.dumps({"model": model, "device": a.device, "precision": precision, "steps": a.steps,
                              "ctrainer": ours, "pytorch": peer, "train_ratio": round(ratio, 3)}))


if __name__ == "__main__":
    main()
