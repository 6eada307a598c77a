#!/usr/bin/python3
"""PyTorch peer of bench/gpt2.py: nanoGPT's GPT (tests/oracle/gpt_reference.py, with
F.scaled_dot_product_attention's fused causal attention where the installed torch has it, as nanoGPT
uses it) trained on a uint16 token file as nanoGPT's train.py does: bf16 autocast on a GPU, fused
AdamW where available, clipping at 1.0, optionally under torch.compile. The vocabulary is the config's
padded_vocab_size (nanoGPT's 50304). With CHECKPOINTING 1, each block runs under
torch.utils.checkpoint (use_reentrant=False), as Hugging Face's gradient_checkpointing does. Prints one
JSON line: tokens per second over the timed steps and the peak memory (the GPU's allocator, else the
process's peak RSS).

Usage: peer_torch_gpt2.py CHECKOUT CONFIG.json TOKENS.bin DEVICE BATCH CONTEXT ACCUM STEPS WARMUP COMPILE(0|1)
                          [CHECKPOINTING(0|1)]"""
import json
import math
import resource
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

checkout, config, tokens_path, device = sys.argv[1:5]
B, T, accum, steps, warmup, compile_it = (int(x) for x in sys.argv[5:11])
checkpointing = len(sys.argv) > 11 and sys.argv[11] == "1"
sys.path.insert(0, checkout + "/tests/oracle")
import gpt_reference  # noqa: E402

if checkpointing:
    from torch.utils.checkpoint import checkpoint
    block_forward = gpt_reference.Block.forward
    gpt_reference.Block.forward = lambda self, x: checkpoint(block_forward, self, x, use_reentrant=False)

cfg = dict(json.load(open(config))["model"])
cfg["vocab_size"] = cfg.get("padded_vocab_size") or cfg["vocab_size"]
cfg["n_positions"] = max(cfg["n_positions"], T)
flash = hasattr(F, "scaled_dot_product_attention")
if flash:
    def attention(self, x):
        Bx, Tx, C = x.size()
        q, k, v = (t.view(Bx, Tx, self.n_head, C // self.n_head).transpose(1, 2) for t in self.c_attn(x).split(C, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=0.0, is_causal=True)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(Bx, Tx, C)))
    gpt_reference.CausalSelfAttention.forward = attention

torch.manual_seed(42)
cuda = device.startswith("cuda")
model = gpt_reference.GPT(cfg).to(device)
fused = cuda and "fused" in torch.optim.AdamW.__init__.__code__.co_varnames
opt = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8,
                        **({"fused": True} if fused else {}))
step_model = torch.compile(model) if compile_it else model
tokens = np.fromfile(tokens_path, dtype=np.uint16).astype(np.int64)
rng = np.random.default_rng(0)
autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else torch.autocast("cpu", enabled=False)


def batch():
    ix = rng.integers(0, len(tokens) - T - 1, B)
    x = torch.from_numpy(np.stack([tokens[i:i + T] for i in ix]))
    y = torch.from_numpy(np.stack([tokens[i + 1:i + T + 1] for i in ix]))
    return x.to(device, non_blocking=True), y.to(device, non_blocking=True)


def step():
    for _ in range(accum):
        x, y = batch()
        with autocast:
            logits = step_model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1)) / accum
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item() * accum


def sync():
    if cuda:
        torch.cuda.synchronize()


for _ in range(warmup):
    step()
sync()
if cuda:
    torch.cuda.reset_peak_memory_stats()
t0 = time.perf_counter()
for _ in range(steps):
    last = step()
sync()
dt = time.perf_counter() - t0
peak = torch.cuda.max_memory_allocated() if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"peer": "torch-" + torch.__version__ + (" compile" if compile_it else " eager")
                  + (" checkpointed" if checkpointing else ""),
                  "attention": "sdpa" if flash else "explicit", "fused_adamw": fused,
                  "tokens_per_s": steps * accum * B * T / dt, "peak_memory_bytes": peak,
                  "last_loss": last if math.isfinite(last) else None}))
