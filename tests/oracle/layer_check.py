"""Runs one layer through ct_oracle and compares its output, input gradient and parameter
gradients (and buffers) with a PyTorch module holding the same parameters."""
import numpy as np
import torch

from common import check, check_close, f32, run, RNG


def check_layer(label, spec_module, torch_module, x, dy=None, training=True, tol=1e-5, dtype="f32",
                int_input=False, seed=0):
    """x: numpy input [B, ...]; dy: output gradient (random when None). torch_module's parameters
    and buffers are sent to ctrainer by their state_dict names, so names must match PyTorch's."""
    torch_module = torch_module.double()
    torch_module.train(training)
    params = {}
    for name, t in torch_module.state_dict().items():
        if name.endswith("num_batches_tracked"):
            continue
        v = f32(t.detach().numpy()) if dtype == "f32" else t.detach().numpy()
        params[name] = v
        with torch.no_grad():
            t.copy_(torch.from_numpy(v))
    xt = torch.from_numpy(x if int_input else (f32(x) if dtype == "f32" else x))
    if not int_input:
        xt.requires_grad_(True)
    y = torch_module(xt)
    if dy is None:
        dy = RNG.uniform(-1, 1, size=y.shape)
    dy = f32(dy) if dtype == "f32" else dy
    y.backward(torch.from_numpy(dy))
    spec = {"module": spec_module, "input_shape": list(x.shape[1:]), "batch": int(x.shape[0]), "dtype": dtype,
            "training": training, "seed": seed}
    tensors = {"x": x if int_input else x.astype(np.float64), "dy": dy}
    tensors.update({f"params/{k}": v for k, v in params.items()})
    out = run("layer", spec, tensors)
    if out is None:
        return None
    check_close(f"{label}: output", out["y"], y.detach().numpy(), tol)
    if not int_input:
        check_close(f"{label}: input gradient", out["dx"], xt.grad.numpy(), tol)
    check_grads_and_buffers(label, torch_module, out, tol)
    return out


def check_grads_and_buffers(label, torch_module, out, tol, after=""):
    """Every parameter gradient and buffer of torch_module against ctrainer's, matched by name."""
    for name, p in torch_module.named_parameters():
        check(f"grads/{name}" in out, f"{label}: ctrainer has no parameter named {name}")
        if f"grads/{name}" in out:
            check_close(f"{label}: gradient of {name}{after}", out[f"grads/{name}"], p.grad.numpy(), tol)
    for name, b in torch_module.named_buffers():
        if name.endswith("num_batches_tracked"):
            continue
        check(f"buffers/{name}" in out, f"{label}: ctrainer has no buffer named {name}")
        if f"buffers/{name}" in out:
            check_close(f"{label}: buffer {name}{after}", out[f"buffers/{name}"], b.numpy(), tol)


def away_from_kinks(module, x, margin=1e-4):
    """The rows of x whose inputs to every ReLU of the nn.Sequential `module` are at least `margin`
    from 0, or not finite, run in float64 with the parameters rounded to float32 values (in place, as
    check_layer rounds them too). Nearer 0, float32's rounding can put a value on the other side of
    the kink than the float64 reference, and the unit then passes or blocks a whole gradient."""
    module.double()
    h = torch.from_numpy(f32(x))
    keep = torch.ones(h.shape[0], dtype=torch.bool)
    with torch.no_grad():
        for t in module.state_dict().values():
            t.copy_(torch.from_numpy(f32(t.numpy())))
        for layer in module:
            if isinstance(layer, torch.nn.ReLU):
                ok = (h.abs() >= margin) | ~torch.isfinite(h)
                keep &= ok.reshape(h.shape[0], -1).all(dim=1)
            h = layer(h)
    return x[keep.numpy()]


def drawn_away_from_kinks(module, draw, margin=1e-4):
    """away_from_kinks(module, draw()), drawn again while it keeps no row: with a few rows of many
    values each, every row can have a value at a kink (a batch of 0 rows would test nothing)."""
    while True:
        x = away_from_kinks(module, draw(), margin)
        if len(x) > 0:
            return x
