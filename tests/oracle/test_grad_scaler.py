#!/usr/bin/env python3
# ctrainer's loss scaler (optim/grad_scaler.h) against PyTorch's GradScaler.
#
# The defaults come from torch.cuda.amp.GradScaler's own signature. The update rule is
# torch._amp_update_scale_, GradScaler.update's kernel: where this PyTorch has it for CPU tensors
# (2.x) it is called on float32 scale and int32 tracker tensors, as GradScaler keeps them; PyTorch 1.13
# has it for CUDA only, and then its kernel (aten/src/ATen/native/cuda/AmpKernels.cu) is followed
# line by line in float32 below. Random overflow sequences, random factors (powers of two and others,
# so float32 rounding shows), intervals down to 1, and scales at float32's top (growth refused) and
# bottom.
import inspect

from common import RNG, check, finish, run  # exits 77 without numpy, h5py or torch
import numpy as np
import torch


def kernel_cpu():
    """torch._amp_update_scale_ on CPU tensors, or None where this PyTorch lacks the CPU kernel."""
    try:
        s, g, f = torch.ones(1, dtype=torch.float32), torch.zeros(1, dtype=torch.int32), torch.zeros(1)
        torch._amp_update_scale_(s, g, f.float(), 2.0, 0.5, 2)
        return True
    except (RuntimeError, NotImplementedError, AttributeError):
        return False


HAVE_KERNEL = kernel_cpu()


def torch_rule(init, growth, backoff, interval, found):
    """The scale and tracker after each step, as GradScaler.update leaves them."""
    scales, trackers = [], []
    if HAVE_KERNEL:
        s, g = torch.full((1,), init, dtype=torch.float32), torch.zeros(1, dtype=torch.int32)
        for f in found:
            torch._amp_update_scale_(s, g, torch.full((1,), float(f), dtype=torch.float32), growth, backoff, interval)
            scales.append(float(s.item()))
            trackers.append(int(g.item()))
        return scales, trackers
    # _amp_update_scale_cuda_kernel: current_scale is a float, growth_tracker an int, the factors doubles
    s, g = np.float32(init), 0
    for f in found:
        if f:
            s = np.float32(float(s) * backoff)
            g = 0
        else:
            successful = g + 1
            if successful == interval:
                new_scale = np.float32(float(s) * growth)
                if np.isfinite(new_scale):
                    s = new_scale
                g = 0
            else:
                g = successful
        scales.append(float(s))
        trackers.append(g)
    return scales, trackers


def case(label, init, growth, backoff, interval, found):
    out = run("scaler", {"init_scale": init, "growth_factor": growth, "backoff_factor": backoff,
                         "growth_interval": interval}, {"found_inf": np.asarray(found, dtype=np.float64)})
    if out is None:
        return None
    want_s, want_g = torch_rule(init, growth, backoff, interval, found)
    got_s, got_g = out["scale"].tolist(), [int(x) for x in out["growth_tracker"]]
    first = next((i for i in range(len(found)) if got_s[i] != want_s[i] or got_g[i] != want_g[i]), None)
    check(first is None, f"{label}: step {first}: ctrainer scale {got_s[first] if first is not None else ''} tracker "
                         f"{got_g[first] if first is not None else ''}, torch {want_s[first] if first is not None else ''} "
                         f"{want_g[first] if first is not None else ''}")
    return out


sig = inspect.signature(torch.cuda.amp.GradScaler.__init__).parameters
want = [sig[k].default for k in ("init_scale", "growth_factor", "backoff_factor", "growth_interval")]
out = case("defaults, no overflow for 4500 steps", *want, [0] * 4500)
if out is not None:
    check(out["defaults"].tolist() == [float(x) for x in want],
          f"defaults {out['defaults'].tolist()} are not GradScaler's {want}")
    check(out["scale"][-1] == 2.0**18, f"two growths in 4500 clean steps: {out['scale'][-1]}")
print(f"torch._amp_update_scale_ on CPU: {'called' if HAVE_KERNEL else 'absent, its CUDA kernel followed'}")

for k in range(40):
    interval = int(RNG.choice([1, 2, 3, 7, 50, 2000]))
    growth = float(RNG.choice([2.0, 1.5, 3.0, 1.0001]))
    backoff = float(RNG.choice([0.5, 0.25, 0.3, 0.9999]))
    init = float(np.float32(RNG.choice([65536.0, 1.0, 2.0**127, 2.0**-140, float(RNG.uniform(1, 1e6))])))
    p = float(RNG.uniform(0, 0.6))
    found = (RNG.random(int(RNG.integers(50, 3000))) < p).astype(int).tolist()
    case(f"case {k} (init {init:g}, growth {growth}, backoff {backoff}, interval {interval}, p {p:.2f})",
         init, growth, backoff, interval, found)

# settings GradScaler refuses are refused (named), not run
for key, value, words in (("growth_factor", 1.0, "growth_factor"), ("backoff_factor", 1.5, "backoff_factor"),
                          ("growth_interval", 0, "growth_interval"), ("init_scale", -1.0, "init_scale")):
    spec = {"init_scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000, key: value}
    rc, err = run("scaler", spec, {"found_inf": np.zeros(3)}, expect_fail=True)
    check(rc != 0 and words in err, f"{key} {value}: refused naming it: rc {rc}, {err.strip()}")

finish()
