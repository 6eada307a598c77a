"""BatchNorm2d, LayerNorm, Embedding, Residual and Dropout against PyTorch on fresh random shapes.

BatchNorm2d runs three training steps through the harness (spec["steps"]): outputs and input
gradients of every step, gradients accumulated over the steps, and the running statistics after
them; eval mode uses random running statistics. Dropout's masks cannot match PyTorch's generator,
so train mode is checked against the mask its own output implies (exact scale 1/(1-p), backward
through the same mask, drop rate within 6 standard errors of p, a new mask each step); eval mode
is compared with PyTorch directly."""
from common import RNG, check, check_close, f32, finish, run  # first: it skips the test without torch
from layer_check import check_grads_and_buffers, check_layer

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def randomize(module, lo=-1.0, hi=1.0):
    """Moves parameters off their init (ones and zeros would hide swapped or missing terms)."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.from_numpy(RNG.uniform(lo, hi, size=tuple(p.shape))))
    return module


def run_steps(label, spec_module, torch_module, xs, dys, tol=1e-5, dtype="f32", training=True):
    """Several forward/backward steps on one model (ctrainer: spec["steps"]); compares each step's
    output and input gradient, the gradients accumulated over all steps, and the final buffers."""
    torch_module = torch_module.double()
    torch_module.train(training)
    rnd = f32 if dtype == "f32" else (lambda a: np.array(a, dtype=np.float64))  # a copy: torch updates buffers in place
    params = {}
    for name, t in torch_module.state_dict().items():
        if name.endswith("num_batches_tracked"):
            continue
        params[f"params/{name}"] = rnd(t.numpy())
        with torch.no_grad():
            t.copy_(torch.from_numpy(params[f"params/{name}"]))
    tensors = dict(params)
    want = []
    for k, (x, dy) in enumerate(zip(xs, dys)):
        xt = torch.from_numpy(rnd(x)).requires_grad_(True)
        y = torch_module(xt)
        y.backward(torch.from_numpy(rnd(dy)))
        want.append((y.detach().numpy().copy(), xt.grad.numpy().copy()))
        tensors[f"x_{k}"] = rnd(x)
        tensors[f"dy_{k}"] = rnd(dy)
    spec = {"module": spec_module, "input_shape": list(xs[0].shape[1:]), "batch": int(xs[0].shape[0]),
            "dtype": dtype, "training": training, "steps": len(xs), "seed": int(RNG.integers(0, 2**31))}
    out = run("layer", spec, tensors)
    if out is None:
        return
    for k, (y, dx) in enumerate(want):
        check_close(f"{label}: step {k} output", out[f"y_{k}"], y, tol)
        check_close(f"{label}: step {k} input gradient", out[f"dx_{k}"], dx, tol)
    check_grads_and_buffers(label, torch_module, out, tol, after=f" after {len(xs)} steps")


# --- BatchNorm2d -------------------------------------------------------------------------------------
B, C = int(RNG.integers(2, 7)), int(RNG.integers(1, 6))
H, W = int(RNG.integers(1, 6)), int(RNG.integers(2, 6))
eps = float(10 ** RNG.uniform(-6, -2))
momentum = float(RNG.uniform(0.05, 0.9))
for affine in (True, False):
    spec = {"type": "batchnorm2d", "eps": eps, "momentum": momentum, "affine": affine}
    if affine:
        spec["num_features"] = C  # and inferred when absent
    xs = [RNG.normal(loc=RNG.uniform(-3, 3), scale=RNG.uniform(0.5, 3), size=(B, C, H, W)) for _ in range(3)]
    dys = [RNG.uniform(-1, 1, size=(B, C, H, W)) for _ in range(3)]
    for dtype, tol in (("f32", 1e-5), ("f64", 1e-9)):
        bn = nn.BatchNorm2d(C, eps=eps, momentum=momentum, affine=affine)
        randomize(bn, 0.5, 1.5)
        run_steps(f"batchnorm2d train affine={affine} {dtype}", spec, bn, xs, dys, tol=tol, dtype=dtype)
    # Eval with random running statistics.
    bn = randomize(nn.BatchNorm2d(C, eps=eps, momentum=momentum, affine=affine), 0.5, 1.5)
    with torch.no_grad():
        bn.running_mean.copy_(torch.from_numpy(RNG.uniform(-1, 1, size=C)))
        bn.running_var.copy_(torch.from_numpy(RNG.uniform(0.2, 3, size=C)))
    check_layer(f"batchnorm2d eval affine={affine}", spec, bn, RNG.normal(size=(B, C, H, W)), training=False)
# One training step through the single-step path (running statistics compared after it).
check_layer("batchnorm2d one training step", {"type": "batchnorm2d", "momentum": momentum},
            randomize(nn.BatchNorm2d(C, momentum=momentum), 0.5, 1.5), RNG.normal(loc=1.0, size=(B, C, H, W)))

# --- LayerNorm ---------------------------------------------------------------------------------------


class LayerNormNoBias(nn.Module):
    """nn.LayerNorm(bias=False) of PyTorch >= 2.1, for torch 1.13."""

    def __init__(self, features, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(features))
        self.eps = eps

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.weight, None, self.eps)


feat, T = int(RNG.integers(3, 40)), int(RNG.integers(1, 7))
ln_eps = float(10 ** RNG.uniform(-6, -3))
for shape in ((B, feat), (B, T, feat), (B, 2, T, feat)):
    x = RNG.normal(loc=RNG.uniform(-2, 2), scale=RNG.uniform(0.5, 2), size=shape)
    check_layer(f"layernorm {list(shape)}", {"type": "layernorm", "normalized_shape": feat, "eps": ln_eps},
                randomize(nn.LayerNorm(feat, eps=ln_eps)), x)
x = RNG.normal(size=(B, T, feat))
check_layer("layernorm no affine", {"type": "layernorm", "elementwise_affine": False, "eps": ln_eps},
            nn.LayerNorm(feat, eps=ln_eps, elementwise_affine=False), x)
check_layer("layernorm no bias", {"type": "layernorm", "normalized_shape": [feat], "bias": False, "eps": ln_eps},
            randomize(LayerNormNoBias(feat, ln_eps)), x)
check_layer("layernorm f64", {"type": "layernorm"}, randomize(nn.LayerNorm(feat)), x, dtype="f64", tol=1e-9)

# --- Embedding ---------------------------------------------------------------------------------------
# dim >= 3: a layer norm over 1 or 2 features is degenerate (its weight gradient is rounding noise).
num, dim = int(RNG.integers(2, 50)), int(RNG.integers(3, 20))
pad = int(RNG.integers(0, num))
ids = RNG.integers(0, num, size=(B, T)).astype(np.int64)
ids[0, 0] = pad  # the padding row is used at least once: its gradient must stay zero
ids[B - 1, T - 1] = (pad + 1) % num  # and some other row too, or output and gradient are all zero
check_layer("embedding", {"type": "embedding", "num_embeddings": num, "embedding_dim": dim},
            nn.Embedding(num, dim), ids, int_input=True)
out = check_layer("embedding padding_idx", {"type": "embedding", "num_embeddings": num, "embedding_dim": dim,
                                           "padding_idx": pad}, nn.Embedding(num, dim, padding_idx=pad), ids,
                  int_input=True)
if out is not None:
    check(np.all(out["grads/weight"][pad] == 0), "embedding padding_idx: the padding row got a gradient")
ids3 = RNG.integers(0, num, size=(B, 2, T)).astype(np.int64)
check_layer("embedding [B, 2, T]", {"type": "embedding", "num_embeddings": num, "embedding_dim": dim},
            nn.Embedding(num, dim), ids3, int_input=True)
bad = ids.copy()
bad[B - 1, T - 1] = num + 3
spec = {"module": {"type": "embedding", "num_embeddings": num, "embedding_dim": dim}, "input_shape": [T],
        "batch": B, "dtype": "f32", "training": True, "seed": 0}
rc, err = run("layer", spec, {"x": bad}, expect_fail=True)
check(rc == 1 and f"token id {num + 3}" in err and f"[{B - 1}, {T - 1}]" in err and f"num_embeddings={num}" in err,
      f"out-of-range id: rc {rc}, message {err.strip()!r}")

# --- Residual ----------------------------------------------------------------------------------------


class Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return x + self.fn(x)


# At least 8 hidden units: with fewer, every ReLU may be inactive on all B samples (1 unit and 2
# samples: a chance in 4), leaving all-zero reference gradients that would prove nothing.
hidden = int(RNG.integers(8, 30))
x = RNG.normal(size=(B, feat))
mlp = {"type": "sequential", "layers": [{"type": "linear", "out_features": hidden}, {"type": "relu"},
                                        {"type": "linear", "out_features": feat}]}
check_layer("residual(linear, relu, linear)", {"type": "residual", "module": mlp},
            Residual(nn.Sequential(nn.Linear(feat, hidden), nn.ReLU(), nn.Linear(hidden, feat))), x)
check_layer("residual layers=[...]", {"type": "residual", "layers": mlp["layers"]},
            Residual(nn.Sequential(nn.Linear(feat, hidden), nn.ReLU(), nn.Linear(hidden, feat))), x)
# A pre-norm transformer-style block on [B, T, F], behind a linear so the input gradient crosses it.
block = {"type": "sequential", "layers": [
    {"type": "linear", "out_features": feat},
    {"type": "residual", "layers": [{"type": "layernorm"}, {"type": "linear", "out_features": hidden},
                                    {"type": "gelu"}, {"type": "linear", "out_features": feat}]},
    {"type": "residual", "module": {"type": "layernorm"}}]}
torch_block = nn.Sequential(
    nn.Linear(feat, feat),
    Residual(nn.Sequential(nn.LayerNorm(feat), nn.Linear(feat, hidden), nn.GELU(), nn.Linear(hidden, feat))),
    Residual(nn.LayerNorm(feat)))
for m in torch_block.modules():
    if isinstance(m, nn.LayerNorm):
        randomize(m)
check_layer("linear, residual(pre-norm mlp), residual(layernorm)", block, torch_block, RNG.normal(size=(B, T, feat)))
# Token ids -> embedding -> residual block, as a language model starts.
emb_model = nn.Sequential(nn.Embedding(num, dim), Residual(nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim))))
emb_spec = {"type": "sequential", "layers": [
    {"type": "embedding", "num_embeddings": num, "embedding_dim": dim},
    {"type": "residual", "layers": [{"type": "layernorm"}, {"type": "linear", "out_features": dim}]}]}
check_layer("embedding, residual(layernorm, linear)", emb_spec, emb_model, ids, int_input=True)

# --- Dropout -----------------------------------------------------------------------------------------
p = float(RNG.uniform(0.05, 0.9))
Bd, Fd = int(RNG.integers(16, 64)), int(RNG.integers(200, 600))
x = RNG.normal(size=(Bd, Fd))
check_layer("dropout eval", {"type": "dropout", "p": p}, nn.Dropout(p), x, training=False)

steps = 3
xs = [RNG.normal(size=(Bd, 3, Fd // 3)) for _ in range(steps)]
dys = [RNG.uniform(-1, 1, size=xs[0].shape) for _ in range(steps)]
tensors = {}
for k in range(steps):
    tensors[f"x_{k}"] = f32(xs[k])
    tensors[f"dy_{k}"] = f32(dys[k])
spec = {"module": {"type": "dropout", "p": p}, "input_shape": list(xs[0].shape[1:]), "batch": Bd, "dtype": "f32",
        "training": True, "steps": steps, "seed": int(RNG.integers(0, 2**31))}
out = run("layer", spec, tensors)
if out is not None:
    masks = []
    for k in range(steps):
        y, dx = out[f"y_{k}"].astype(np.float64), out[f"dx_{k}"].astype(np.float64)
        xk, dyk = f32(xs[k]), f32(dys[k])
        mask = y != 0  # x is never exactly 0
        masks.append(mask)
        # PyTorch's definition given the mask: x * mask / (1 - p), and the gradient through it.
        xt = torch.from_numpy(xk).requires_grad_(True)
        yt = xt * torch.from_numpy(mask.astype(np.float64)) / (1 - p)
        yt.backward(torch.from_numpy(dyk))
        check_close(f"dropout train step {k}: output given its mask", y, yt.detach().numpy())
        check_close(f"dropout train step {k}: input gradient through the same mask", dx, xt.grad.numpy())
        n = mask.size
        frac = 1 - mask.mean()
        se = np.sqrt(p * (1 - p) / n)
        check(abs(frac - p) < 6 * se, f"dropout step {k}: dropped fraction {frac:.4f} vs p={p:.4f} (6 SE {6 * se:.4f})")
        # PyTorch's own mask on the same shape has the same rate, to the same bound.
        tfrac = float((F.dropout(torch.ones(xk.shape), p, training=True) == 0).double().mean())
        check(abs(tfrac - frac) < 6 * np.sqrt(2) * se, f"dropout step {k}: rate {frac:.4f} vs PyTorch's {tfrac:.4f}")
    differ = np.mean(masks[0] != masks[1])
    check(abs(differ - 2 * p * (1 - p)) < 6 * np.sqrt(2 * p * (1 - p) / masks[0].size),
          f"dropout: steps 0 and 1 masks differ in {differ:.4f} of elements, expected {2 * p * (1 - p):.4f}")
rc, err = run("layer", dict(spec, module={"type": "dropout", "p": 1.5}), tensors, expect_fail=True)
check(rc == 1 and "p=1.5" in err and "module" in err, f"dropout p=1.5: rc {rc}, message {err.strip()!r}")

finish()
