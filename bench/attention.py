#!/usr/bin/python3
"""The fused causal attention, forward and backward, against PyTorch's scaled_dot_product_attention
(is_causal, the flash or memory-efficient kernel it picks; before torch 2.0, nanoGPT's explicit
attention) on the same device in the same run.

ctrainer: bench_attention (bench/bench_attention.c), float32 tensors under each math mode; on CUDA
float32 runs the CUDA cores' kernels and bf16 the tensor cores' (bf16 inputs, float32 accumulation).
PyTorch: float32 tensors, and bf16 tensors against ctrainer's bf16 mode. Both count FLOPs as
FlashAttention does (causal: 2 B H T^2 D forward, 2.5 times that backward). Prints milliseconds and
TFLOP/s per side and pass and the ratio of PyTorch's time to ctrainer's (above 1: ctrainer faster).

Usage: bench/attention.py [--device cuda|cpu] [--batch 16] [--context 1024] [--heads 12] [--head-dim 64]
                          [--seconds 2] [--build DIR] [--python PY]
Defaults are GPT-2 small's attention at batch 16 on a GPU; on the CPU, --batch 2 is a better size."""
import argparse
import json
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)

PEER = r"""
import json, sys, time
import torch
import torch.nn.functional as F
device, B, T, H, D, dtype_name, seconds = sys.argv[1], *map(int, sys.argv[2:6]), sys.argv[6], float(sys.argv[7])
dtype = getattr(torch, dtype_name)
torch.manual_seed(1)
q, k, v = (torch.rand(B, H, T, D, device=device, dtype=dtype).mul_(2).sub_(1).requires_grad_() for _ in range(3))
dy = torch.rand(B, H, T, D, device=device, dtype=dtype).mul_(2).sub_(1)
sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
if hasattr(F, "scaled_dot_product_attention"):
    kind = "sdpa"
    def attention(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
else:  # torch before 2.0: nanoGPT's explicit attention
    kind = "explicit"
    visible = torch.ones(T, T, dtype=torch.bool, device=device).tril()
    def attention(q, k, v):
        s = (q @ k.transpose(-2, -1)) * D ** -0.5
        return s.masked_fill(~visible, float("-inf")).softmax(-1) @ v
for _ in range(2):
    attention(q, k, v).backward(dy)
sync()
fwd = bwd = 0.0
reps = 0
while fwd + bwd < seconds:
    t0 = time.perf_counter()
    y = attention(q, k, v)
    sync()
    t1 = time.perf_counter()
    y.backward(dy)
    sync()
    fwd += t1 - t0
    bwd += time.perf_counter() - t1
    reps += 1
flops = 4.0 * B * H * T * T * D / 2
print(json.dumps({"torch": torch.__version__, "attention": kind, "dtype": dtype_name, "reps": reps,
                  "forward_ms": 1e3 * fwd / reps,
                  "backward_ms": 1e3 * bwd / reps, "forward_tflops": flops * reps / fwd * 1e-12,
                  "backward_tflops": 2.5 * flops * reps / bwd * 1e-12}))
"""


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {cmd[0]} {cmd[1] if cmd[1] != '-c' else '(the PyTorch peer)'}\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--build", default=os.path.join(root, "build"))
    ap.add_argument("--python", default=sys.executable, help="the Python with torch for the peer")
    a = ap.parse_args()
    bench = os.path.join(a.build, "bench", "bench_attention")
    if not os.path.exists(bench):
        sys.exit(f"bench_attention not found at {bench} (pass --build)")
    shape = [str(x) for x in (a.batch, a.context, a.heads, a.head_dim)]
    gpu = a.device.startswith("cuda")
    # (ctrainer's math mode, PyTorch's dtype)
    pairs = [("float32", "float32")] + ([("bf16", "bfloat16")] if gpu else [])
    print(f"causal attention, B={a.batch} T={a.context} H={a.heads} D={a.head_dim}, {a.device}")
    print(f"{'pass':9} {'ctrainer':>22} {'PyTorch':>22} {'ratio':>6}")
    for math, dtype in pairs:
        ours = run([bench, a.device] + shape + [math, str(a.seconds)])
        peer = run([a.python, "-c", PEER, a.device] + shape + [dtype, str(a.seconds)])
        for p in ("forward", "backward"):
            o, t = ours[f"{p}_ms"], peer[f"{p}_ms"]
            print(f"{p:9} {o:9.3f} ms {ours[f'{p}_tflops']:6.2f} TF/s {t:9.3f} ms {peer[f'{p}_tflops']:6.2f} TF/s "
                  f"{t / o:6.2f}  ({math} / torch {peer['torch']} {dtype}, {peer['attention']})")
        print(json.dumps({"ctrainer": ours, "torch": peer}))


if __name__ == "__main__":
    main()
