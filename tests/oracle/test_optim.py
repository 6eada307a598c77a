"""Optimizers (SGD, Adam, AdamW with every option) and global-norm gradient clipping against
torch.optim and torch.nn.utils.clip_grad_norm_, on fresh random parameter sets.

Each optimizer case runs 20 steps on several tensors, some marked no-decay, with fresh random
gradients per step given to both sides and a learning rate that changes every step. PyTorch gets
Hugging Face's two parameter groups (weight decay, and 0 for no-decay tensors). Parameters and every
state tensor are compared after the last step, each as the flat buffer the optimizer owns (see
check_flat): relative error < 1e-5 in f32 (reference in float64 from the float32-rounded inputs),
< 1e-9 in f64. Buffers must come back unchanged and the padding between parameters zero. The f64 run restarts half way through the state
API (what a checkpoint does), so the round trip is checked against the uninterrupted PyTorch run.
Sensitivity checks prove the comparisons can fail: a reference that decays the no-decay tensors too,
or that keeps the first learning rate, must be far from ctrainer's result."""
import numpy as np
import torch

from common import RNG, check, check_close, f32, finish, rel_err, run

STEPS = 20
CT_ERR_NUMERIC = -10


def random_params():
    """3-6 tensors of random shapes (sizes rarely multiples of the 64-byte alignment, so there is
    padding between them), at least one with and one without weight decay, plus a buffer."""
    n = int(RNG.integers(3, 7))
    params = []
    for i in range(n):
        shape = [int(RNG.integers(1, 9)) for _ in range(int(RNG.integers(1, 4)))]
        no_decay = bool(RNG.integers(0, 2)) if 0 < i < n - 1 else i == n - 1
        params.append({"name": f"layers.{i}.{'bias' if no_decay else 'weight'}", "shape": shape,
                       "no_decay": no_decay})
    buffers = [{"name": "norm.running_mean", "shape": [int(RNG.integers(1, 20))]}]
    return params, buffers


def torch_run(settings, params, init, grads, lrs, decay_all=False):
    """The PyTorch side: returns (values, state) dicts by parameter name."""
    tensors = {p["name"]: torch.tensor(init[p["name"]], requires_grad=True) for p in params}
    wd = settings.get("weight_decay", 0.0)
    decay = [tensors[p["name"]] for p in params if decay_all or not p["no_decay"]]
    no_decay = [tensors[p["name"]] for p in params if not decay_all and p["no_decay"]]
    groups = [{"params": decay, "weight_decay": wd}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    kind = settings["optim"]
    if kind == "sgd":
        opt = torch.optim.SGD(groups, lr=lrs[0], momentum=settings.get("momentum", 0.0),
                              dampening=settings.get("dampening", 0.0), nesterov=settings.get("nesterov", False),
                              foreach=False)
    else:
        cls = torch.optim.Adam if kind == "adam" else torch.optim.AdamW
        opt = cls(groups, lr=lrs[0], betas=(settings["adam_beta1"], settings["adam_beta2"]),
                  eps=settings["adam_epsilon"], amsgrad=settings.get("amsgrad", False), foreach=False)
    for k, lr in enumerate(lrs):
        for g in opt.param_groups:
            g["lr"] = lr
        for p in params:
            tensors[p["name"]].grad = torch.tensor(grads[k][p["name"]])
        opt.step()
    values = {name: t.detach().numpy().copy() for name, t in tensors.items()}
    state = {}
    for name, t in tensors.items():
        for key, v in opt.state[t].items():
            if v is not None:
                state.setdefault(key, {})[name] = v.detach().numpy().copy()
    return values, state


def check_flat(label, out, prefix, want, tol):
    """Compares tensors as the one flat buffer the optimizer works on: max |got - want| over all of
    them relative to max |want| over all of them (the message names the worst tensor). A tensor's own
    scale is not the right one in float32: exp_avg is a sum of gradients of both signs, and a small
    tensor whose sum happens to cancel would carry the rounding of terms much larger than itself."""
    names = [n for n in want if prefix + n in out]
    check(len(names) == len(want), f"{label}: ctrainer lacks {sorted(set(want) - set(names))}")
    if not names:
        return
    got_flat = np.concatenate([np.asarray(out[prefix + n], dtype=np.float64).reshape(-1) for n in names])
    want_flat = np.concatenate([np.asarray(want[n], dtype=np.float64).reshape(-1) for n in names])
    shapes_ok = all(np.shape(out[prefix + n]) == np.shape(want[n]) for n in names)
    check(shapes_ok, f"{label}: shapes differ from PyTorch's")
    if not shapes_ok:
        return
    worst = max(names, key=lambda n: np.max(np.abs(np.asarray(out[prefix + n], dtype=np.float64) - want[n])))
    check_close(f"{label} (worst: {worst})", got_flat, want_flat, tol)


def optimizer_case(label, settings, dtype):
    params, buffers = random_params()
    rnd = f32 if dtype == "f32" else (lambda a: np.asarray(a, dtype=np.float64))
    init = {p["name"]: rnd(RNG.normal(size=p["shape"])) for p in params}
    buf_init = {b["name"]: rnd(RNG.normal(size=b["shape"])) for b in buffers}
    grads = [{p["name"]: rnd(RNG.normal(scale=RNG.uniform(0.1, 2.0), size=p["shape"])) for p in params}
             for _ in range(STEPS)]
    base_lr = settings["learning_rate"]
    lrs = [float(base_lr * RNG.uniform(0.2, 1.5)) for _ in range(STEPS)]
    tol = 1e-5 if dtype == "f32" else 1e-9
    restart = int(RNG.integers(1, STEPS)) if dtype == "f64" else -1
    spec = {"task": "step", "dtype": dtype, "params": params, "buffers": buffers, "optimizer": settings,
            "lrs": lrs, "restart_at": restart}
    tensors = {f"init/{k}": v for k, v in init.items()}
    tensors.update({f"buffers/{k}": v for k, v in buf_init.items()})
    for k, g in enumerate(grads):
        tensors.update({f"grads/{k}/{name}": v for name, v in g.items()})
    label = f"{label} [{dtype}{', restart at %d' % restart if restart > 0 else ''}]"
    out = run("optim", spec, tensors)
    if out is None:
        return
    want_values, want_state = torch_run(settings, params, init, grads, lrs)
    check_flat(f"{label}: parameters", out, "values/", want_values, tol)
    got_state = sorted({k.split("/")[1] for k in out if k.startswith("state/")})
    want_names = sorted(k for k in want_state if k != "step")
    check(got_state == want_names, f"{label}: state {got_state}, PyTorch has {want_names}")
    for key in want_names:
        check_flat(f"{label}: {key}", out, f"state/{key}/", want_state[key], tol)
    if "step" in want_state:
        steps = {float(v) for v in want_state["step"].values()}
        check(steps == {float(out["step"][0])}, f"{label}: step {out['step'][0]}, PyTorch {steps}")
    check(int(out["step"][0]) == STEPS, f"{label}: step count {out['step'][0]} after {STEPS} steps")
    for name, v in buf_init.items():
        check(np.array_equal(out[f"buffers/{name}"], v.astype(out[f"buffers/{name}"].dtype)),
              f"{label}: the optimizer changed buffer {name}")
    check(out["padding"][0] == 0, f"{label}: padding between parameters became {out['padding'][0]}")

    # The comparisons above would notice a wrong grouping or an ignored per-step learning rate.
    def far(wrong):
        return max(rel_err(out[f"values/{n}"], w) for n, w in wrong.items()) > 20 * tol
    if settings.get("weight_decay", 0) > 0:
        check(far(torch_run(settings, params, init, grads, lrs, decay_all=True)[0]),
              f"{label}: decaying the no-decay tensors too changes nothing measurable")
    check(far(torch_run(settings, params, init, grads, [lrs[0]] * STEPS)[0]),
          f"{label}: a constant learning rate changes nothing measurable")


def sgd_cases():
    mom = float(RNG.uniform(0.5, 0.95))
    wd = float(RNG.uniform(0.02, 0.2))
    base = {"optim": "sgd", "learning_rate": float(RNG.uniform(0.01, 0.1))}
    return [("sgd", dict(base)),
            ("sgd weight_decay", dict(base, weight_decay=wd)),
            ("sgd momentum", dict(base, momentum=mom)),
            ("sgd momentum dampening weight_decay", dict(base, momentum=mom, dampening=float(RNG.uniform(0.1, 0.6)),
                                                        weight_decay=wd)),
            ("sgd nesterov weight_decay", dict(base, momentum=mom, nesterov=True, weight_decay=wd))]


def adam_cases():
    cases = []
    for optim in ("adam", "adamw"):
        for amsgrad in (False, True):
            settings = {"optim": optim, "learning_rate": float(RNG.uniform(0.005, 0.05)),
                        "weight_decay": float(RNG.uniform(0.02, 0.2)), "adam_beta1": float(RNG.uniform(0.8, 0.95)),
                        "adam_beta2": float(RNG.uniform(0.95, 0.999)), "adam_epsilon": float(10 ** RNG.uniform(-8, -6)),
                        "amsgrad": amsgrad}
            cases.append((f"{optim}{' amsgrad' if amsgrad else ''}", settings))
    cases.append(("adamw without decay", {"optim": "adamw", "learning_rate": 0.01, "adam_beta1": 0.9,
                                          "adam_beta2": 0.999, "adam_epsilon": 1e-8}))
    return cases


def clip_case(label, dtype, mode):
    params, buffers = random_params()
    rnd = f32 if dtype == "f32" else (lambda a: np.asarray(a, dtype=np.float64))
    grads = {p["name"]: rnd(RNG.normal(scale=RNG.uniform(0.1, 3.0), size=p["shape"])) for p in params}
    norm = float(np.sqrt(sum(np.sum(g * g) for g in grads.values())))
    if mode == "clip":
        max_norm = norm * float(RNG.uniform(0.05, 0.9))
    elif mode == "no clip":
        max_norm = norm * float(RNG.uniform(1.1, 3.0))
    elif mode == "norm only":
        max_norm = 0.0
    else:  # "inf" or "nan": one element of one tensor
        max_norm = norm * 0.5
        victim = grads[params[int(RNG.integers(0, len(params)))]["name"]].reshape(-1)
        victim[int(RNG.integers(0, victim.size))] = np.inf if mode == "inf" else np.nan
    spec = {"task": "clip", "dtype": dtype, "params": params, "buffers": buffers, "max_norm": max_norm}
    tensors = {f"init/{p['name']}": rnd(RNG.normal(size=p["shape"])) for p in params}
    tensors.update({f"buffers/{b['name']}": rnd(RNG.normal(size=b["shape"])) for b in buffers})
    tensors.update({f"grads/{k}": v for k, v in grads.items()})
    label = f"clip {label} [{dtype}]"
    out = run("optim", spec, tensors)
    if out is None:
        return
    tol = 1e-5 if dtype == "f32" else 1e-9
    ts = [torch.zeros(p["shape"], requires_grad=True) for p in params]
    for t, p in zip(ts, params):
        t.grad = torch.tensor(grads[p["name"]])
    want_norm = float(torch.nn.utils.clip_grad_norm_(ts, max_norm if max_norm > 0 else float("inf")))
    got_norm = float(out["total_norm"][0])
    status = int(out["status"][0])
    if mode in ("inf", "nan"):
        want_nan = mode == "nan"
        check(np.isnan(got_norm) == want_nan and (want_nan or got_norm == np.inf),
              f"{label}: total norm {got_norm}, expected {mode}")
        check(np.isnan(want_norm) == want_nan, f"{label}: PyTorch's norm {want_norm}")
        check(status == CT_ERR_NUMERIC, f"{label}: status {status}, expected CT_ERR_NUMERIC")
        for k, v in grads.items():
            check(np.array_equal(out[f"grads/{k}"], v, equal_nan=True), f"{label}: gradient {k} changed")
        return
    check(status == 0, f"{label}: status {status}")
    check(abs(got_norm - want_norm) <= tol * want_norm, f"{label}: norm {got_norm} vs PyTorch {want_norm}")
    for t, p in zip(ts, params):
        check_close(f"{label}: gradient {p['name']}", out[f"grads/{p['name']}"], t.grad.numpy(), tol)
        if mode != "clip":
            check(np.array_equal(out[f"grads/{p['name']}"], grads[p["name"]]), f"{label}: {p['name']} was scaled")
    check(out["padding"][0] == 0, f"{label}: gradient padding became {out['padding'][0]}")


for dtype in ("f32", "f64"):
    for label, settings in sgd_cases() + adam_cases():
        optimizer_case(label, settings, dtype)
    for mode in ("clip", "no clip", "norm only", "inf", "nan"):
        clip_case(mode, dtype, mode)
finish()
