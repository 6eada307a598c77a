"""NaN and infinity through every activation, pooling and norm layer (and the CNN's fused
conv + ReLU + max-pool path) against PyTorch: outputs, input gradients and parameter gradients must
be NaN or infinite exactly where PyTorch's are, and close elsewhere, so that a poisoned input or
weight reaches the loss and nan_inf_policy instead of disappearing (max(x, 0) mapped NaN to 0)."""
from common import RNG, check, finish  # first: skips the test when torch is missing
from layer_check import away_from_kinks, check_layer

import numpy as np
import torch.nn as nn


def poisoned(shape, n_bad=3):
    """Normal values with NaN, +inf and -inf at a few random places (at least one NaN)."""
    x = RNG.normal(size=shape)
    flat = x.reshape(-1)
    at = RNG.choice(flat.size, size=min(n_bad, flat.size), replace=False)
    flat[at] = RNG.choice([np.nan, np.inf, -np.inf], size=at.size)
    flat[at[0]] = np.nan
    return x


def run_layer(label, spec, module, x, **kw):
    out = check_layer(label, spec, module, x, **kw)
    if out is not None:  # the poison must be visible in the output, or the check proves nothing
        check(not np.isfinite(out["y"]).all(), f"{label}: no NaN or inf reached the output")


B = int(RNG.integers(2, 6))
acts = [({"type": "relu"}, nn.ReLU()), ({"type": "gelu"}, nn.GELU()),
        ({"type": "gelu", "approximate": "tanh"}, nn.GELU(approximate="tanh")),
        ({"type": "tanh"}, nn.Tanh()), ({"type": "sigmoid"}, nn.Sigmoid())]
for spec, mod in acts:
    run_layer("nan " + spec["type"] + spec.get("approximate", ""), spec, mod, poisoned((B, 3, 5)))

# Max pooling: the 2x2 fast path and the general path (padding, dilation); average pooling.
run_layer("nan maxpool 2x2", {"type": "maxpool2d", "kernel_size": 2}, nn.MaxPool2d(2), poisoned((B, 2, 6, 8)))
run_layer("nan maxpool 3x3 s2 p1", {"type": "maxpool2d", "kernel_size": 3, "stride": 2, "padding": 1},
          nn.MaxPool2d(3, stride=2, padding=1), poisoned((B, 2, 7, 9)))
run_layer("nan avgpool 2x2", {"type": "avgpool2d", "kernel_size": 2}, nn.AvgPool2d(2), poisoned((B, 2, 6, 8)))

# The CNN's conv + ReLU + 2x2 max pool, fused on the CPU; 16 input channels take the sparse backward.
for cin in (3, 16):
    seq = {"type": "sequential", "layers": [{"type": "conv2d", "out_channels": 4, "kernel_size": 3, "padding": 1},
                                            {"type": "relu"}, {"type": "maxpool2d", "kernel_size": 2}]}
    ref = nn.Sequential(nn.Conv2d(cin, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
    run_layer(f"nan conv+relu+maxpool C={cin}", seq, ref, poisoned((B, cin, 6, 6), n_bad=1))
    seq_relu = {"type": "sequential", "layers": [{"type": "conv2d", "out_channels": 4, "kernel_size": 3},
                                                 {"type": "relu"}]}
    run_layer(f"nan conv+relu C={cin}", seq_relu, nn.Sequential(nn.Conv2d(cin, 4, 3), nn.ReLU()),
              poisoned((B, cin, 5, 5), n_bad=1))

# Norms and a linear layer: a NaN in one sample reaches what PyTorch's reaches (batch norm's batch
# statistics, hence every sample of that channel, and its running statistics).
run_layer("nan linear", {"type": "linear", "out_features": 6}, nn.Linear(5, 6), poisoned((B, 5), n_bad=1))
# The linear layer that applies the ReLU after it (fused on the CPU), on few rows and on enough to
# be split over the threads.
# Rows with a value next to the kink are left out (away_from_kinks), the poisoned one kept.
for rows in (B, 96):
    seq_lin = {"type": "sequential", "layers": [{"type": "linear", "out_features": 64}, {"type": "relu"}]}
    ref_lin = nn.Sequential(nn.Linear(64, 64), nn.ReLU())
    run_layer(f"nan linear+relu rows={rows}", seq_lin, ref_lin, away_from_kinks(ref_lin, poisoned((rows, 64), n_bad=1)))
run_layer("nan layernorm", {"type": "layernorm", "normalized_shape": 5}, nn.LayerNorm(5), poisoned((B, 3, 5), n_bad=1))
run_layer("nan batchnorm2d", {"type": "batchnorm2d"}, nn.BatchNorm2d(3), poisoned((B, 3, 4, 4), n_bad=1))
finish()
