"""The GPT model against a PyTorch reference implementation of the same architecture (nanoGPT's
model.py, written out below), on random sizes, fresh random token ids and targets each run: the
logits, the mean cross-entropy and the gradient of that mean with respect to every parameter, in
float32 against the reference computed in float64 from the same float32 weights (relative error
< 1e-5). The weights are either ctrainer's own GPT-2 initialisation (read back from the harness
and loaded into the reference by name) or random values of a trained model's scale sent to
ctrainer by name; parameter names must be nanoGPT's, one to one, with the head tied to wte. Dropout
> 0 is checked in eval mode, where both are the identity."""
import math

from common import RNG, check, check_close, f32, finish, run  # first: skips the test when torch is missing
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class LayerNorm(nn.Module):
    """nanoGPT's LayerNorm with an optional bias (torch 1.13's nn.LayerNorm always has one)."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_attn = nn.Linear(c["n_embd"], 3 * c["n_embd"], bias=c["bias"])
        self.c_proj = nn.Linear(c["n_embd"], c["n_embd"], bias=c["bias"])
        self.attn_dropout = nn.Dropout(c["dropout"])
        self.resid_dropout = nn.Dropout(c["dropout"])
        self.n_head = c["n_head"]
        n = c["n_positions"]
        self.register_buffer("mask", torch.tril(torch.ones(n, n)).view(1, 1, n, n), persistent=False)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c["n_embd"], 4 * c["n_embd"], bias=c["bias"])
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * c["n_embd"], c["n_embd"], bias=c["bias"])
        self.dropout = nn.Dropout(c["dropout"])

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = LayerNorm(c["n_embd"], c["bias"])
        self.attn = CausalSelfAttention(c)
        self.ln_2 = LayerNorm(c["n_embd"], c["bias"])
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c["vocab_size"], c["n_embd"]),
            wpe=nn.Embedding(c["n_positions"], c["n_embd"]),
            drop=nn.Dropout(c["dropout"]),
            h=nn.ModuleList([Block(c) for _ in range(c["n_layer"])]),
            ln_f=LayerNorm(c["n_embd"], c["bias"])))
        self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied, as nanoGPT and GPT-2

    def forward(self, idx):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def random_config():
    # At least 4 features: LayerNorm over 2 is a sign function whose steep middle turns float32
    # rounding of its input into large gradient errors, in any implementation.
    n_head = int(RNG.integers(1, 5))
    c = {"type": "gpt", "vocab_size": int(RNG.integers(20, 300)), "n_head": n_head,
         "n_embd": n_head * int(RNG.integers(max(2, -(-4 // n_head)), 17)), "n_layer": int(RNG.integers(1, 4)),
         "bias": bool(RNG.integers(0, 4) != 0), "dropout": 0.0}
    T = int(RNG.integers(1, 25))
    c["n_positions"] = T + int(RNG.integers(0, 6))
    return c, T


def random_weights(model):
    """A trained model's scale: weights N(0, s) for a random s per tensor, norm weights near 1,
    biases non-zero, so that no term hides behind a zero or a one."""
    params = {}
    for name, p in model.named_parameters():
        if ".ln_" in name:
            v = 1 + 0.2 * RNG.normal(size=p.shape) if name.endswith("weight") else 0.1 * RNG.normal(size=p.shape)
        elif name.endswith("bias"):
            v = 0.05 * RNG.normal(size=p.shape)
        else:
            v = RNG.uniform(0.02, 0.2) * RNG.normal(size=p.shape)
        params[name] = f32(v)
    return params


def one_case(label, c, T, ours, training=True, ignore=False):
    B = int(RNG.integers(1, 5))
    ref = GPT(c).double()
    names = {n for n, _ in ref.named_parameters()}
    ids = RNG.integers(0, c["vocab_size"], size=(B, T)).astype(np.int64)
    target = RNG.integers(0, c["vocab_size"], size=(B, T)).astype(np.int64)
    if ignore:  # some ignored positions: the mean is over the others
        target[RNG.uniform(size=(B, T)) < 0.25] = -100
        target[0, 0] = int(RNG.integers(0, c["vocab_size"]))
    spec = {"module": {k: v for k, v in c.items()}, "input_shape": [T], "batch": B, "dtype": "f32",
            "training": training, "seed": int(RNG.integers(0, 2**31)), "loss": {"type": "cross_entropy"}}
    tensors = {"x": ids, "target": target}
    params = None if ours else random_weights(ref)
    if params:
        tensors.update({f"params/{k}": v for k, v in params.items()})
    out = run("layer", spec, tensors)
    if out is None:
        return
    got_names = {k[len("values/"):] for k in out if k.startswith("values/")}
    check(got_names == names, f"{label}: parameter names differ from nanoGPT's: only ctrainer "
          f"{sorted(got_names - names)}, only PyTorch {sorted(names - got_names)}")
    if params is None:  # ctrainer's initialisation, read back
        params = {n: out[f"values/{n}"].astype(np.float64) for n in names if f"values/{n}" in out}
    with torch.no_grad():
        for n, p in ref.named_parameters():
            if n in params:
                p.copy_(torch.from_numpy(params[n]))
    ref.train(training)
    logits = ref(torch.from_numpy(ids))
    loss = F.cross_entropy(logits.reshape(-1, c["vocab_size"]), torch.from_numpy(target).reshape(-1),
                           ignore_index=-100, reduction="sum")
    count = int((target != -100).sum())
    (loss / count).backward()
    check_close(f"{label}: logits", out["y"], logits.detach().numpy())
    check_close(f"{label}: loss sum", out["loss"][:1], [loss.item()])
    check(out["loss"][1] == count, f"{label}: loss count {out['loss'][1]} != {count}")
    for n, p in ref.named_parameters():
        if f"grads/{n}" in out:
            check_close(f"{label}: gradient of {n}", out[f"grads/{n}"], p.grad.numpy())


for rep in range(6):
    c, T = random_config()
    desc = (f"V={c['vocab_size']} C={c['n_embd']} H={c['n_head']} L={c['n_layer']} P={c['n_positions']} T={T} "
            f"bias={c['bias']}")
    one_case(f"gpt {desc}, ctrainer's init", c, T, ours=True, ignore=rep % 2 == 1)
    one_case(f"gpt {desc}, random weights", c, T, ours=False, ignore=rep % 2 == 0)
    c["dropout"] = float(RNG.uniform(0.05, 0.5))
    one_case(f"gpt {desc}, dropout {c['dropout']:.2f} in eval", c, T, ours=False, training=False)

# A longer context with more heads: the attention's softmax rows get long.
c = {"type": "gpt", "vocab_size": 257, "n_positions": 96, "n_embd": 48, "n_layer": 2, "n_head": 4, "bias": True,
     "dropout": 0.0}
one_case("gpt V=257 C=48 H=4 L=2 T=96", c, 96, ours=False)
finish()
