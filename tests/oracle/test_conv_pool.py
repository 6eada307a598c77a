"""Conv2d, MaxPool2d and AvgPool2d against PyTorch on fresh random shapes and hyperparameters
each run, plus the Fashion-MNIST CNN stack; outputs, input gradients and all parameter gradients."""
from common import RNG, check, f32, finish, run  # first: skips the test when torch is missing
from layer_check import check_layer
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F


def ri(lo, hi):
    """Uniform integer in [lo, hi]."""
    return int(RNG.integers(lo, hi + 1))


def draw(lo, hi):
    """An int or an [h, w] list in [lo, hi] (JSON accepts both, as PyTorch does)."""
    return [ri(lo, hi), ri(lo, hi)] if RNG.random() < 0.5 else ri(lo, hi)


def hw(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def input_size(kernel, dilation, padding, extra):
    """Per dimension: at least the dilated kernel minus the padding (and >= 1), plus up to `extra`."""
    return [max(1, d * (k - 1) + 1 - 2 * p) + ri(0, extra) for k, d, p in zip(kernel, dilation, padding)]


def reads_input(n, k, s, p, d):
    """Whether some kernel tap of some output lands on a real input element (not only padding)."""
    out = (n + 2 * p - d * (k - 1) - 1) // s + 1
    return any(0 <= o * s - p + j * d < n for o in range(out) for j in range(k))


# --- Conv2d: random everything, PyTorch's JSON keys. --------------------------------------------
for t in range(8):
    while True:  # redraw the rare configurations whose outputs see only padding (all-zero gradients)
        kernel, stride, dilation = draw(1, 5), draw(1, 3), draw(1, 2)
        padding = draw(0, 2)
        kh, sh, dh, ph = hw(kernel), hw(stride), hw(dilation), hw(padding)
        H, W = input_size(kh, dh, ph, 7)
        if all(reads_input(*a) for a in zip((H, W), kh, sh, ph, dh)):
            break
    B, C, O, bias = ri(1, 4), ri(1, 4), ri(1, 6), bool(RNG.random() < 0.7)
    spec = {"type": "conv2d", "in_channels": C, "out_channels": O, "kernel_size": kernel, "stride": stride,
            "padding": padding, "dilation": dilation, "bias": bias}
    if RNG.random() < 0.3:
        del spec["in_channels"]  # inferred from the input
    label = f"conv2d B={B} C={C} O={O} {H}x{W} k={kernel} s={stride} p={padding} d={dilation} bias={bias}"
    check_layer(label, spec, nn.Conv2d(C, O, kernel, stride=stride, padding=padding, dilation=dilation, bias=bias),
                RNG.normal(size=(B, C, H, W)))

# Batches big enough to be split over the threads (OMP_NUM_THREADS=2 here), a 3x3 and a 1x1 layer.
for kernel, padding in ((3, 1), (1, 0)):
    check_layer(f"conv2d threaded k={kernel}", {"type": "conv2d", "out_channels": 12, "kernel_size": kernel,
                                                "padding": padding},
                nn.Conv2d(8, 12, kernel, padding=padding), RNG.normal(size=(9, 8, 12, 11)))

# conv -> ReLU pairs, which the CPU kernels fuse (the ReLU applied per sample right after the GEMM,
# its mask applied to the gradient before the backward GEMMs), in a sequence as the CNN example has.
# Enough channels that no draw leaves every ReLU of a layer inactive (with 5 after 6, one in a few
# hundred seeds did, and all-zero outputs prove nothing).
check_layer("conv2d + relu fused", {"type": "sequential", "layers": [
    {"type": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1}, {"type": "relu"},
    {"type": "maxpool2d", "kernel_size": 2},
    {"type": "conv2d", "out_channels": 12, "kernel_size": 3, "padding": 1}, {"type": "relu"},
    {"type": "conv2d", "out_channels": 16, "kernel_size": 1}, {"type": "relu"}]},
    nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 12, 3, padding=1),
                  nn.ReLU(), nn.Conv2d(12, 16, 1), nn.ReLU()),
    RNG.normal(size=(7, 3, 12, 10)))

# conv -> ReLU -> 2x2 max pooling, which the CPU kernels fuse; with 16 and 48 input channels backward
# sums over the windows' argmaxes alone (the sparse path), on odd sizes that leave a row and a column
# no window covers, and with a stride that makes the taps skip.
for C, (H, W), stride in ((16, (11, 9), 1), (48, (9, 12), (1, 2))):
    check_layer(f"conv2d + relu + maxpool fused, {C} channels", {"type": "sequential", "layers": [
        {"type": "conv2d", "out_channels": 7, "kernel_size": 3, "padding": 1, "stride": stride}, {"type": "relu"},
        {"type": "maxpool2d", "kernel_size": 2}]},
        nn.Sequential(nn.Conv2d(C, 7, 3, padding=1, stride=stride), nn.ReLU(), nn.MaxPool2d(2)),
        RNG.normal(size=(5, C, H, W)))

# The float64 path against PyTorch in float64: rounding only.
k, d, p = (3, 2), (2, 1), (1, 2)
H, W = input_size(k, d, p, 5)
check_layer("conv2d f64", {"type": "conv2d", "out_channels": 3, "kernel_size": list(k), "stride": [2, 1],
                           "padding": list(p), "dilation": list(d)},
            nn.Conv2d(2, 3, k, stride=(2, 1), padding=p, dilation=d), RNG.normal(size=(3, 2, H, W)),
            dtype="f64", tol=1e-9)

# --- MaxPool2d / AvgPool2d: random everything within PyTorch's rules (padding <= kernel/2). ------
for t in range(8):
    kernel, dilation = draw(1, 4), draw(1, 2)
    kh, dh = hw(kernel), hw(dilation)
    padding = [ri(0, k // 2) for k in kh]
    stride = draw(1, 3) if RNG.random() < 0.7 else None
    B, C = ri(1, 4), ri(1, 4)
    # Inputs at least as large as the dilated kernel, so no window lies wholly in the padding.
    H, W = [d * (k - 1) + 1 + ri(0, 7) for k, d in zip(kh, dh)]
    x = RNG.normal(size=(B, C, H, W))
    spec = {"type": "maxpool2d", "kernel_size": kernel, "padding": padding, "dilation": dilation}
    if stride is not None:
        spec["stride"] = stride
    check_layer(f"maxpool2d B={B} C={C} {H}x{W} k={kernel} s={stride} p={padding} d={dilation}", spec,
                nn.MaxPool2d(kernel, stride=stride, padding=padding, dilation=dilation), x)

    include = bool(RNG.random() < 0.5)
    H, W = [k + ri(0, 7) - 2 * p for k, p in zip(kh, padding)]
    H, W = max(H, 1), max(W, 1)
    x = RNG.normal(size=(B, C, H, W))
    spec = {"type": "avgpool2d", "kernel_size": kernel, "padding": padding, "count_include_pad": include}
    if stride is not None:
        spec["stride"] = stride
    check_layer(f"avgpool2d B={B} C={C} {H}x{W} k={kernel} s={stride} p={padding} count_include_pad={include}", spec,
                nn.AvgPool2d(kernel, stride=stride, padding=padding, count_include_pad=include), x)

# --- The Fashion-MNIST CNN. ---------------------------------------------------------------------
cnn_spec = {"type": "sequential", "layers": [
    {"type": "conv2d", "in_channels": 1, "out_channels": 32, "kernel_size": 3, "padding": 1}, {"type": "relu"},
    {"type": "maxpool2d", "kernel_size": 2},
    {"type": "conv2d", "in_channels": 32, "out_channels": 64, "kernel_size": 3, "padding": 1}, {"type": "relu"},
    {"type": "maxpool2d", "kernel_size": 2},
    {"type": "flatten"}, {"type": "linear", "in_features": 3136, "out_features": 128}, {"type": "relu"},
    {"type": "linear", "in_features": 128, "out_features": 10}]}
cnn = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, padding=1),
                    nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))


def kinks_resolved(model, x, factor=10.0):
    """Whether float32 rounding cannot flip a ReLU (input near 0) or a max-pool choice (two window
    values near-equal) on this input: at such a point the gradient jumps, so float32 ctrainer and the
    float64 reference may both be right and still differ by O(1), as finite differences do at a kink.
    The margin is `factor` times PyTorch's own float32 error on the same layer input."""
    def inputs_seen(m, xin):
        seen = []
        for mod in m.modules():
            if isinstance(mod, (nn.ReLU, nn.MaxPool2d)):
                mod.register_forward_hook(lambda mod, inp, out: seen.append((mod, inp[0].detach().double())))
        m(xin)
        return seen
    m64 = copy.deepcopy(model).double()
    with torch.no_grad():
        for p in m64.parameters():
            p.copy_(torch.from_numpy(f32(p.numpy())))
    m32 = copy.deepcopy(m64).float()
    with torch.no_grad():
        x64 = torch.from_numpy(f32(x))
        for (mod, a64), (_, a32) in zip(inputs_seen(m64, x64), inputs_seen(m32, x64.float())):
            margin = factor * float((a32 - a64).abs().max())
            if isinstance(mod, nn.ReLU) and bool((a64.abs() < margin).any()):
                return False
            if isinstance(mod, nn.MaxPool2d):
                b, c = a64.shape[:2]
                windows = F.unfold(a64, mod.kernel_size, stride=mod.stride).view(b, c, mod.kernel_size ** 2, -1)
                top = windows.topk(2, dim=2).values
                if bool(((top[:, :, 0] > 0) & (top[:, :, 0] - top[:, :, 1] < margin)).any()):
                    return False
    return True


for draw_no in range(50):
    x = RNG.uniform(0, 1, size=(4, 1, 28, 28))
    if kinks_resolved(cnn, x):
        break
out = check_layer("fashion-mnist cnn", cnn_spec, cnn, x)
check(out is None or all(f"grads/{n}" in out for n in ("0.weight", "0.bias", "3.weight", "9.bias")),
      "cnn: gradients named like PyTorch's state dict")

# --- Bad input: the harness reports the layer, in_channels and the input shape. -------------------
rc, err = run("layer", {"module": {"type": "sequential", "layers": [cnn_spec["layers"][0]]}, "input_shape": [3, 28, 28],
                        "batch": 2, "dtype": "f32"}, {"x": RNG.normal(size=(2, 3, 28, 28))}, expect_fail=True)
check(rc != 0 and "conv2d '0'" in err and "in_channels=1" in err and "[N, 3, 28, 28]" in err,
      f"wrong channel count: rc={rc}, message: {err.strip()}")
finish()
