"""Losses against torch.nn.functional on fresh random shapes, options and inputs: ctrainer's sum
against reduction='sum', sum / count against reduction='mean', and the gradient (backward with a
random scale) against autograd, both from the separate forward and backward and from the fused
forward_backward run in place (the gradient overwriting the predictions, as the Trainer's step
calls it). Then the Trainer's property through the harness: evaluating a batch
in two uneven parts and adding (sum, count) gives the whole batch's mean and the same gradients.

float32 predictions are compared with PyTorch in float64 on the same rounded values: sums are
accumulated in double, so they must agree to 1e-9; gradients are stored as float32 (bound 1e-5)."""
import numpy as np
import torch
import torch.nn.functional as F

from common import RNG, check, check_close, f32, finish, run

SUM_TOL = {"f32": 1e-9, "f64": 1e-9}
GRAD_TOL = {"f32": 1e-5, "f64": 1e-9}


def rnd(lo, hi):
    return float(RNG.uniform(lo, hi))


def as_input(a, dtype):
    return f32(a) if dtype == "f32" else np.asarray(a, dtype=np.float64)


def compare(label, spec_loss, torch_loss, pred, target, dtype="f32", target_dtype="float", split=None):
    """torch_loss(pred_tensor, target_tensor, reduction) -> scalar, evaluated in float64."""
    pred = as_input(pred, dtype)
    if target_dtype == "float":
        target = as_input(target, dtype)
    scale = rnd(0.05, 2.0)
    spec = {"loss": spec_loss, "dtype": dtype, "target_dtype": target_dtype, "scale": scale}
    if split is not None:
        spec["split"] = int(split)
    tensors = {"pred": pred, "target": target.astype(np.int32) if target_dtype == "i32" else target}
    out = run("loss", spec, tensors)
    if out is None:
        return
    tt = torch.from_numpy(target).long() if target_dtype != "float" else torch.from_numpy(target)
    pt = torch.from_numpy(pred).requires_grad_(True)
    ref_sum = torch_loss(pt, tt, "sum")
    (scale * ref_sum).backward()
    with torch.no_grad():
        ref_mean = torch_loss(pt, tt, "mean").item()
    got_sum, got_count = out["sum"][0], out["count"][0]
    check_close(f"{label}: sum", got_sum, ref_sum.item(), SUM_TOL[dtype])
    check_close(f"{label}: sum / count vs mean", got_sum / got_count, ref_mean, SUM_TOL[dtype])
    check_close(f"{label}: gradient", out["dpred"], pt.grad.numpy(), GRAD_TOL[dtype])
    fused_sum, fused_count = out["fused_sum_count"]
    check_close(f"{label}: fused in place: sum", fused_sum, ref_sum.item(), SUM_TOL[dtype])
    check_close(f"{label}: fused in place: sum / count vs mean", fused_sum / fused_count, ref_mean, SUM_TOL[dtype])
    check_close(f"{label}: fused in place: gradient", out["fused_dpred"], pt.grad.numpy(), GRAD_TOL[dtype])
    # per sample (the first dimension): reduction='none' summed over the sample's other dimensions; a
    # count is the sample's own denominator, so each sample's sum / count is its own mean
    ref_rows = torch_loss(pt.detach(), tt, "none")
    ref_rows = ref_rows.reshape(ref_rows.shape[0], -1).sum(dim=1).numpy()
    check_close(f"{label}: per-sample sums", out["rows_sum"], ref_rows, SUM_TOL[dtype])
    check(abs(out["rows_count"].sum() - got_count) <= 1e-12 * abs(got_count),
          f"{label}: per-sample counts add up to {out['rows_count'].sum()}, not {got_count}")
    if split is not None:
        s, c = out["split_sum"], out["split_count"]
        check_close(f"{label}: halves' (sum, count) added vs whole-batch mean", (s[0] + s[1]) / (c[0] + c[1]),
                    ref_mean, SUM_TOL[dtype])
        check(abs((c[0] + c[1]) - got_count) <= 1e-12 * abs(got_count),
              f"{label}: halves' counts {c} do not add up to {got_count}")
        check(np.array_equal(out["split_dpred"], out["dpred"]),
              f"{label}: gradients of the halves differ from the whole batch's")
        if c[0] > 0 and c[1] > 0 and c[0] != c[1]:
            naive = 0.5 * (s[0] / c[0] + s[1] / c[1])
            check(abs(naive - ref_mean) > 1e-9 * abs(ref_mean),
                  f"{label}: averaging the halves' means also gives the mean; the split check proves nothing")
    return out


def xent_case(label, tokens, weighted, smoothing, ignore, dtype="f32", target_dtype="i64", big=False):
    n = int(RNG.integers(2, 9)) if not big else int(RNG.integers(8, 12))
    t = int(RNG.integers(1, 6)) if not big else 64
    c = int(RNG.integers(2, 12)) if not big else int(RNG.integers(60, 120))
    ignore_index = int(RNG.choice([-100, -1, 0, c - 1])) if ignore else -100
    shape = (n, t, c) if tokens else (n, c)
    logits = RNG.normal(scale=rnd(0.5, 4.0), size=shape)
    y = RNG.integers(0, c, size=shape[:-1])
    if ignore:
        y[RNG.uniform(size=y.shape) < 0.3] = ignore_index
        first = (0, 0) if tokens else (0,)
        if y[first] == ignore_index:
            y[first] = (ignore_index + 1) % c  # never all ignored
    spec = {"type": "cross_entropy"}
    kw = {}
    if weighted:
        w = f32(RNG.uniform(0.1, 3.0, size=c))
        spec["weight"] = [float(v) for v in w]
        kw["weight"] = torch.from_numpy(w)
    if smoothing:
        spec["label_smoothing"] = smoothing
        kw["label_smoothing"] = smoothing
    if ignore:
        spec["ignore_index"] = ignore_index
        kw["ignore_index"] = ignore_index

    def loss(p, tt, reduction):
        if tokens:  # PyTorch's own multi-dimensional layout: classes in dimension 1
            p = p.permute(0, 2, 1)
        return F.cross_entropy(p, tt, reduction=reduction, **kw)

    compare(f"{label} {list(shape)}", spec, loss, logits, y, dtype, target_dtype, split=int(RNG.integers(1, n)))


smooth = round(rnd(0.05, 0.5), 3)
xent_case("cross_entropy", False, False, 0.0, False)
xent_case("cross_entropy int32 targets", False, False, 0.0, False, target_dtype="i32")
xent_case("cross_entropy tokens", True, False, 0.0, False)
xent_case("cross_entropy weight", False, True, 0.0, False)
xent_case("cross_entropy label_smoothing", True, False, smooth, False)
xent_case("cross_entropy ignore_index", True, False, 0.0, True)
xent_case("cross_entropy weight+smoothing", False, True, smooth, False)
xent_case("cross_entropy weight+smoothing+ignore_index", True, True, smooth, True)
xent_case("cross_entropy weight+smoothing+ignore_index f64", True, True, smooth, True, dtype="f64")
xent_case("cross_entropy weight+smoothing+ignore_index i32 f64", False, True, smooth, True, dtype="f64",
          target_dtype="i32")
xent_case("cross_entropy large (threaded)", True, True, smooth, True, big=True)

# Elementwise losses on [N, ..., C].
for dtype in ("f32", "f64"):
    shape = tuple(int(v) for v in RNG.integers(1, 7, size=int(RNG.integers(1, 4))))
    shape = (int(RNG.integers(2, 9)),) + shape
    x = RNG.normal(scale=2.0, size=shape)
    y = RNG.normal(scale=2.0, size=shape)
    split = int(RNG.integers(1, shape[0]))
    compare(f"mse {dtype} {list(shape)}", {"type": "mse"},
            lambda p, t, r: F.mse_loss(p, t, reduction=r), x, y, dtype, split=split)
    compare(f"l1 {dtype} {list(shape)}", "l1",
            lambda p, t, r: F.l1_loss(p, t, reduction=r), x, y, dtype, split=split)
    delta = round(rnd(0.2, 3.0), 3)
    compare(f"huber delta={delta} {dtype} {list(shape)}", {"type": "huber", "delta": delta},
            lambda p, t, r: F.huber_loss(p, t, reduction=r, delta=delta), x, y, dtype, split=split)
    compare(f"huber default {dtype} {list(shape)}", {"type": "huber"},
            lambda p, t, r: F.huber_loss(p, t, reduction=r), x, y, dtype, split=split)
    soft = RNG.uniform(0, 1, size=shape)
    hard = (RNG.uniform(size=shape) < 0.5).astype(np.float64)
    logits = RNG.normal(scale=3.0, size=shape)
    compare(f"bce_with_logits soft targets {dtype} {list(shape)}", {"type": "bce_with_logits"},
            lambda p, t, r: F.binary_cross_entropy_with_logits(p, t, reduction=r), logits, soft, dtype, split=split)
    pw = f32(RNG.uniform(0.2, 5.0, size=shape[-1]))
    compare(f"bce_with_logits pos_weight {dtype} {list(shape)}",
            {"type": "bce_with_logits", "pos_weight": [float(v) for v in pw]},
            lambda p, t, r: F.binary_cross_entropy_with_logits(p, t, reduction=r, pos_weight=torch.from_numpy(pw)),
            logits, hard, dtype, split=split)
    pws = float(f32(rnd(0.2, 5.0)))
    compare(f"bce_with_logits scalar pos_weight {dtype} {list(shape)}",
            {"type": "bce_with_logits", "pos_weight": pws},
            lambda p, t, r: F.binary_cross_entropy_with_logits(p, t, reduction=r,
                                                              pos_weight=torch.tensor([pws])),
            logits, soft, dtype, split=split)

# Extreme logits: the stable formulas must stay finite where naive ones overflow.
big = np.array([[80.0, -80.0, 30.0], [-90.0, 95.0, 0.5]]) * rnd(1.0, 1.2)
compare("cross_entropy extreme logits", {"type": "cross_entropy", "label_smoothing": 0.2},
        lambda p, t, r: F.cross_entropy(p, t, reduction=r, label_smoothing=0.2), big, np.array([1, 0]),
        target_dtype="i64")
compare("bce_with_logits extreme logits", "bce_with_logits",
        lambda p, t, r: F.binary_cross_entropy_with_logits(p, t, reduction=r), big,
        (RNG.uniform(size=big.shape) < 0.5).astype(np.float64))

# Bad input: a message naming the loss, the value and its position, not a crash.
c = int(RNG.integers(3, 9))
y = RNG.integers(0, c, size=(4, 5))
y[2, 3] = c + 2
rc, err = run("loss", {"loss": "cross_entropy", "target_dtype": "i64"},
              {"pred": RNG.normal(size=(4, 5, c)), "target": y}, expect_fail=True)
check(rc == 1 and f"target {c + 2} at [2, 3]" in err and "cross_entropy loss" in err and f"[0, {c})" in err,
      f"out-of-range target: rc {rc}, message {err.strip()!r}")
rc, err = run("loss", {"loss": "mse"}, {"pred": RNG.normal(size=(4, 3)), "target": RNG.normal(size=(4, 2))},
              expect_fail=True)
check(rc == 1 and "mse loss" in err and "[4, 2]" in err and "[4, 3]" in err,
      f"shape mismatch: rc {rc}, message {err.strip()!r}")
rc, err = run("loss", {"loss": {"type": "cross_entropy", "label_smoothing": 1.5}},
              {"pred": RNG.normal(size=(4, 3)), "target": np.zeros(4, dtype=np.int64)}, expect_fail=True)
check(rc == 1 and "loss.label_smoothing" in err, f"bad config: rc {rc}, message {err.strip()!r}")
finish()
