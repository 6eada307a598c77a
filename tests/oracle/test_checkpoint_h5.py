"""Checkpoint files read back by tools nobody here wrote: h5py (and h5dump) for optimizer.h5, Python's
zlib for the manifest, PyTorch for what the optimizer state must hold.

`test_checkpoint_io --write DIR` (next to the ct_oracle harness) trains a random parameter set for a
few steps with SGD (momentum), Adam, AdamW with AMSGrad (float32) and AdamW (float64), and commits
DIR/<case>/checkpoint-<steps>/ (optimizer.h5, scheduler.json, a random blob, manifest.json) the way
the Trainer does, with DIR/<case>/oracle.json holding the initial values, gradients and learning
rates it used. This test then checks:
- manifest.json: format, version, exactly the directory's files, and each size and CRC-32 equal to
  os.path.getsize and zlib.crc32 of the file;
- optimizer.h5 through h5py: attributes optim, step (an integer) and config (JSON equal to the
  settings used), one 1-D dataset per state tensor with torch.optim's names, as long as the flat
  parameter buffer, in the run's dtype; h5dump reads it;
- the state itself against torch.optim run on the same inputs (relative error < 1e-5 in float32,
  < 1e-9 in float64), zero in the padding between parameters, and a state one step short must fail
  the same comparison (the check can fail);
- scheduler.json: the type, and the step and rate of Hugging Face's cosine schedule with warmup."""
import json
import math
import os
import shutil
import subprocess
import tempfile
import zlib

from common import HARNESS, SEED, check, finish, rel_err  # first: it skips the test without h5py/torch

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

WRITER = os.path.join(os.path.dirname(os.path.abspath(HARNESS)), "test_checkpoint_io")
STATE_NAMES = {"sgd": ["momentum_buffer"], "adam": ["exp_avg", "exp_avg_sq"]}


def torch_state(settings, params, init, grads, lrs):
    """torch.optim on Hugging Face's two groups; returns {state key: {param name: array}}."""
    trainable = [p for p in params if not p["buffer"]]
    tensors = {p["name"]: torch.tensor(np.asarray(init[p["name"]], dtype=np.float64).reshape(p["shape"]),
                                       requires_grad=True) for p in trainable}
    groups = [{"params": [tensors[p["name"]] for p in trainable if not p["no_decay"]],
               "weight_decay": settings["weight_decay"]},
              {"params": [tensors[p["name"]] for p in trainable if p["no_decay"]], "weight_decay": 0.0}]
    groups = [g for g in groups if g["params"]]
    if settings["optim"] == "sgd":
        opt = torch.optim.SGD(groups, lr=lrs[0], momentum=settings["momentum"], dampening=settings["dampening"],
                              nesterov=settings["nesterov"], foreach=False)
    else:
        cls = torch.optim.Adam if settings["optim"] == "adam" else torch.optim.AdamW
        opt = cls(groups, lr=lrs[0], betas=(settings["adam_beta1"], settings["adam_beta2"]),
                  eps=settings["adam_epsilon"], amsgrad=settings["amsgrad"], foreach=False)
    for k, lr in enumerate(lrs):
        for g in opt.param_groups:
            g["lr"] = lr
        for p in trainable:
            tensors[p["name"]].grad = torch.tensor(np.asarray(grads[k][p["name"]], dtype=np.float64).reshape(p["shape"]))
        opt.step()
    state = {}
    for name, t in tensors.items():
        for key, v in opt.state[t].items():
            if torch.is_tensor(v):
                state.setdefault(key, {})[name] = v.detach().numpy().copy()
    return state


def flat_error(flat, params, want):
    """max |flat slice - want| over all parameters relative to max |want| (the optimizer's own view:
    one flat buffer), as in test_optim.py."""
    got = np.concatenate([flat[p["offset"]:p["offset"] + p["numel"]] for p in params])
    ref = np.concatenate([np.asarray(want[p["name"]], dtype=np.float64).reshape(-1) for p in params])
    return rel_err(got, ref)


def check_manifest(label, ckpt):
    with open(os.path.join(ckpt, "manifest.json")) as f:
        m = json.load(f)
    check(m.get("format") == "ctrainer-checkpoint" and m.get("version") == 1, f"{label}: manifest header {m}")
    files = m.get("files", {})
    on_disk = sorted(n for n in os.listdir(ckpt) if n != "manifest.json")
    check(sorted(files) == on_disk, f"{label}: manifest lists {sorted(files)}, the directory has {on_disk}")
    for name, entry in files.items():
        path = os.path.join(ckpt, name)
        if not os.path.exists(path):
            continue
        with open(path, "rb") as f:
            data = f.read()
        check(entry["size"] == os.path.getsize(path) == len(data),
              f"{label}: {name}: manifest size {entry['size']}, file {os.path.getsize(path)}")
        want = "%08x" % (zlib.crc32(data) & 0xFFFFFFFF)
        check(entry["crc32"] == want, f"{label}: {name}: manifest crc32 {entry['crc32']}, zlib {want}")


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def check_optimizer(label, ckpt, o):
    settings, params = o["settings"], o["params"]
    trainable = [p for p in params if not p["buffer"]]
    kind = "sgd" if settings["optim"] == "sgd" else "adam"
    names = STATE_NAMES[kind] + (["max_exp_avg_sq"] if kind == "adam" and settings["amsgrad"] else [])
    dtype = np.float32 if o["dtype"] == "f32" else np.float64
    path = os.path.join(ckpt, "optimizer.h5")
    with h5py.File(path, "r") as f:
        check(text(f.attrs.get("optim", b"")) == settings["optim"], f"{label}: optim attribute {f.attrs.get('optim')}")
        step = f.attrs.get("step")
        check(step is not None and np.issubdtype(np.asarray(step).dtype, np.integer) and int(step) == o["steps"],
              f"{label}: step attribute {step!r}, want {o['steps']}")
        config = json.loads(text(f.attrs.get("config", b"{}")))
        check(config == settings, f"{label}: config attribute {config} != {settings}")
        check(sorted(f.keys()) == sorted(names), f"{label}: datasets {sorted(f.keys())}, want {sorted(names)}")
        data = {}
        for n in names:
            if n not in f:
                continue
            d = f[n]
            check(d.shape == (o["flat_numel"],) and d.dtype == dtype,
                  f"{label}: {n} is {d.shape} {d.dtype}, want ({o['flat_numel']},) {np.dtype(dtype)}")
            data[n] = d[()].astype(np.float64)
    if shutil.which("h5dump"):
        p = subprocess.run(["h5dump", "-H", path], capture_output=True, text=True)
        check(p.returncode == 0 and f'DATASET "{names[0]}"' in p.stdout,
              f"{label}: h5dump -H failed: {p.stderr.strip()}")

    tol = 1e-5 if o["dtype"] == "f32" else 1e-9
    want = torch_state(settings, params, o["init"], o["grads"], o["lrs"])
    short = torch_state(settings, params, o["init"], o["grads"][:-1], o["lrs"][:-1])
    inside = np.zeros(o["flat_numel"], dtype=bool)
    for p in trainable:
        inside[p["offset"]:p["offset"] + p["numel"]] = True
    for n in names:
        if n not in data or n not in want:
            check(False, f"{label}: state {n} missing (ctrainer {n in data}, torch {n in want})")
            continue
        e = flat_error(data[n], trainable, want[n])
        check(e < tol, f"{label}: {n} relative error {e:.3g} >= {tol:g} against torch.optim")
        e_short = flat_error(data[n], trainable, short[n])
        check(e_short > 1e3 * tol, f"{label}: {n} one step short is within {e_short:.3g}: the check proves nothing")
        check(np.all(data[n][~inside] == 0), f"{label}: {n} is not zero in the padding")
        check(np.any(data[n] != 0), f"{label}: {n} is all zero")
    if kind == "adam":
        tsteps = {float(v) for v in want.get("step", {}).values()}
        check(tsteps == {float(o["steps"])}, f"{label}: torch step {tsteps} vs {o['steps']}")


def check_scheduler(label, ckpt, o):
    with open(os.path.join(ckpt, "scheduler.json")) as f:
        s = json.load(f)
    sch = o["scheduler"]
    check(s.get("lr_scheduler_type") == sch["type"], f"{label}: lr_scheduler_type {s.get('lr_scheduler_type')}")
    st = s.get("state", {})
    check(st.get("step") == o["steps"], f"{label}: scheduler step {st.get('step')}, want {o['steps']}")
    # transformers' get_cosine_schedule_with_warmup (num_cycles 0.5) at the next step.
    k, w, total = o["steps"], sch["warmup_steps"], sch["num_training_steps"]
    lam = k / max(1, w) if k < w else max(0.0, 0.5 * (1.0 + math.cos(math.pi * 2.0 * 0.5 * (k - w) / max(1, total - w))))
    lr = st.get("lr", float("nan"))
    check(abs(lr - sch["base_lr"] * lam) <= 1e-12 * sch["base_lr"], f"{label}: scheduler lr {lr}, want {sch['base_lr'] * lam}")


def main():
    if not os.path.exists(WRITER):
        check(False, f"{WRITER} does not exist (build the tests)")
        finish()
    with tempfile.TemporaryDirectory() as d:
        p = subprocess.run([WRITER, "--write", d], capture_output=True, text=True,
                           env=dict(os.environ, CT_TEST_SEED=str(SEED)))
        check(p.returncode == 0, f"test_checkpoint_io --write failed: {p.stdout[-2000:]} {p.stderr[-2000:]}")
        cases = sorted(os.listdir(d))
        check(cases == ["adam", "adamw_amsgrad", "adamw_f64", "sgd_momentum"], f"cases written: {cases}")
        for case in cases:
            base = os.path.join(d, case)
            with open(os.path.join(base, "oracle.json")) as f:
                o = json.load(f)
            ckpts = [n for n in os.listdir(base) if n.startswith("checkpoint-")]
            check(ckpts == [f"checkpoint-{o['steps']}"], f"{case}: directories {ckpts} (a .tmp left behind?)")
            if not ckpts:
                continue
            ckpt = os.path.join(base, ckpts[0])
            check_manifest(case, ckpt)
            check_optimizer(case, ckpt, o)
            check_scheduler(case, ckpt, o)
    finish()


main()
