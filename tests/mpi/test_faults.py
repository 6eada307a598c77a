"""nan_inf_policy and on_save_error with several processes: `mpirun -np 2 ctrainer train`.

Usage (ctest runs it): python3 test_faults.py PATH/TO/ctrainer

The data is a small HDF5 file written here with h5py; one sample (drawn from the seed) has a NaN
feature, so the loss or the gradient goes NaN on ONE rank only, in the steps whose global batch holds
that sample. The global sampler does not depend on the number of processes, so one process with the
same global batch meets the poison at the same steps: it is the reference.
  1. error: the job ends non-zero (no rank left waiting); every message names the same step, the loss
     and the same rank; the step is the reference's first poisoned step;
  2. skip (plain DDP and ZeRO-1; the NaN feature, which makes the loss NaN, and the same feature +inf,
     which saturates the tanh so that the loss stays finite while its gradient (0 * inf) goes NaN,
     without clipping): the job ends normally, the warnings name
     the reference's steps, nan_inf_skipped is the reference's count, and the weights are the
     reference's up to summation order;
  3. stop (also with save_async): the job ends non-zero naming the step and the checkpoint of the last
     good step, which holds both ranks' progress files and verifies; with the sample repaired the job
     resumes from it and ends with the weights and log of a job that never met the poison, bit for bit.
Saving into a full disk (the write fault hook of core/io_fault.h, armed for ONE rank through CT_IO_FAULT
in an MPMD command line), on clean data:
  4. rank 0 runs out of space in the second checkpoint, on_save_error stop: the job ends non-zero with
     "No space left on device" naming model.h5 and checkpoint-8; checkpoint-4 is intact and resumes to
     the clean job's weights; nothing of checkpoint-8 is left;
  5. rank 1 runs out of space writing its progress file of the second checkpoint, on_save_error
     continue (synchronous and save_async): the job ends normally on every rank without checkpoint-8
     and with the clean job's weights; checkpoints 4 and 12 verify.
A fresh seed each run (CT_TEST_SEED=N repeats one)."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zlib

try:
    import h5py
    import numpy as np
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checklib import check, finish, test_seed  # noqa: E402 (after the optional imports)

CTRAINER = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else "build/ctrainer"
MPIRUN = shutil.which("mpirun")
if not MPIRUN:
    print("skipped: mpirun is not installed")
    sys.exit(77)
SEED = test_seed()
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
       "OMPI_MCA_rmaps_base_oversubscribe": "1"}
ENV.pop("CT_IO_FAULT", None)
MPI = [MPIRUN, "--oversubscribe", "--bind-to", "none"]
RNG = np.random.default_rng(SEED)
N, FEATURES, CLASSES, BATCH, MAX_STEPS = 96, 8, 3, 8, 12  # 2 ranks x 8: 6 steps per epoch, 2 epochs


def write_data(path, x, y):
    with h5py.File(path, "w") as f:
        f["features"] = x
        f["labels"] = y


def config(tmp, name, data, activation, **args):
    ta = {"max_steps": MAX_STEPS, "per_device_train_batch_size": BATCH, "learning_rate": 1e-2, "warmup_steps": 2,
          "logging_steps": 2, "save_strategy": "steps", "save_steps": 4, "seed": SEED, "disable_tqdm": True,
          "ddp_timeout": 60}
    ta.update(args)
    c = {"model": {"type": "mlp", "hidden": [16], "activation": activation},
         "data": {"train": {"type": "hdf5", "path": data}}, "loss": {"type": "cross_entropy"}, "training_args": ta}
    path = os.path.join(tmp, f"{name}.json")
    with open(path, "w") as f:
        json.dump(c, f)
    return path


def run(cmd, label, timeout=180):
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        check(False, f"{label}: no end after {timeout} s (a rank left waiting?): {' '.join(cmd)}\n{e.stdout}\n{e.stderr}")
        finish()
    print(f"  {label}: exit {p.returncode} in {time.time() - t0:.1f} s")
    return p.returncode, p.stdout + p.stderr


def train(cfg, out, np_, label, *extra):
    cmd = ([CTRAINER] if np_ == 1 else MPI + ["-np", str(np_), CTRAINER]) + ["train", cfg, "--output_dir", out]
    return run(cmd + list(extra), label)


def mpmd(cfg, out, fault_rank, fault, label, *extra):
    """2 ranks, CT_IO_FAULT=fault for rank fault_rank only."""
    cmd = MPI[:]
    for r in range(2):
        if r:
            cmd.append(":")
        cmd += ["-np", "1"]
        if r == fault_rank:
            cmd += ["-x", f"CT_IO_FAULT={fault}"]
        cmd += [CTRAINER, "train", cfg, "--output_dir", out] + list(extra)
    return run(cmd, label)


def weights(out):
    with h5py.File(os.path.join(out, "model.h5"), "r") as f:
        names = []
        f.visit(lambda n: names.append(n) if isinstance(f[n], h5py.Dataset) else None)
        return {n: np.array(f[n]) for n in names}


def same_weights(a, b):
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def close_weights(a, b):
    worst = max(float(np.max(np.abs(a[k] - b[k]))) / max(float(np.max(np.abs(b[k]))), 1e-30) for k in b)
    return a.keys() == b.keys() and worst <= 1e-5, worst


def history(out):
    with open(os.path.join(out, "trainer_state.json")) as f:
        hist = json.load(f)["log_history"]
    return [{k: v for k, v in e.items() if not k.endswith(("_runtime", "_per_second"))} for e in hist]


def verify(ckpt):
    """The checkpoint's manifest: every listed file with its size and CRC-32."""
    try:
        with open(os.path.join(ckpt, "manifest.json")) as f:
            files = json.load(f)["files"]
        for name, e in files.items():
            with open(os.path.join(ckpt, name), "rb") as g:
                data = g.read()
            if len(data) != e["size"] or f"{zlib.crc32(data):08x}" != e["crc32"]:
                return f"{name} does not match the manifest"
        return None
    except (OSError, ValueError, KeyError) as e:
        return str(e)


def no_trace(out, step, label):
    left = [d for d in os.listdir(out) if d == f"checkpoint-{step}" or d.endswith((".tmp", ".deleting"))]
    check(not left, f"{label}: left behind in {out}: {left}")


STEP_RE = re.compile(r"optimizer step (\d+) \(epoch \d+\): the (loss|gradient norm) is (\w+)")


def bad_steps(text):
    """The steps the warnings of nan_inf_policy skip name, in order."""
    return [int(m.group(1)) for line in text.splitlines() if "its update is skipped" in line
            for m in [STEP_RE.search(line)] if m]


# --- nan_inf_policy --------------------------------------------------------------------------------


def nan_cases(tmp):
    x = RNG.standard_normal((N, FEATURES)).astype(np.float32)
    y = RNG.integers(0, CLASSES, N)
    poison = int(RNG.integers(0, N))
    bad = x.copy()
    bad[poison, int(RNG.integers(0, FEATURES))] = np.nan
    data = os.path.join(tmp, "poisoned.h5")
    write_data(data, bad, y)
    saturating = np.where(np.isnan(bad), np.float32(np.inf), bad)
    data_inf = os.path.join(tmp, "poisoned_inf.h5")
    write_data(data_inf, saturating, y)
    print(f"sample {poison} has a NaN (or +inf) feature")
    poisons = {"nan": data, "inf": data_inf}

    # the references: one process, the same global batch
    refs = {}
    for kind in ("nan", "inf"):
        cfg = config(tmp, f"ref_{kind}", poisons[kind], "tanh", nan_inf_policy="skip",
                     max_grad_norm=1.0 if kind == "nan" else 0.0)
        out = os.path.join(tmp, f"ref_{kind}")
        rc, text = train(cfg, out, 1, f"reference, {kind}, 1 process", "--per_device_train_batch_size", str(2 * BATCH))
        steps = bad_steps(text)
        check(rc == 0 and len(steps) >= 1, f"reference {kind}: exit {rc}, skipped steps {steps}\n{text[-2000:]}")
        quantity = "loss" if kind == "nan" else "gradient norm"
        check(all(m.group(2) == quantity for m in STEP_RE.finditer(text)),
              f"reference {kind}: the poison should show in the {quantity}:\n{text[-2000:]}")
        refs[kind] = (steps, weights(out) if rc == 0 else None)
    first = refs["nan"][0][0] if refs["nan"][0] else -1

    # 1. error
    cfg = config(tmp, "error", data, "tanh")
    rc, text = train(cfg, os.path.join(tmp, "error"), 2, "error, 2 ranks")
    lines = [l for l in text.splitlines() if "nan_inf_policy 'error'" in l]
    check(rc != 0 and lines, f"error: exit {rc}, messages {lines}\n{text[-3000:]}")
    named = {(int(m.group(1)), r.group(1)) for l in lines
             for m, r in [(STEP_RE.search(l), re.search(r"first on rank (\d) of 2", l))] if m and r}
    check(len(named) == 1 and next(iter(named))[0] == first,
          f"error: the ranks name {named}; the reference's first poisoned step is {first}:\n" + "\n".join(lines))

    # 2. skip
    for kind, sharding, clip in (("nan", "none", 1.0), ("nan", "zero1", 1.0), ("inf", "none", 0.0)):
        label = f"skip, {kind}, {sharding}, max_grad_norm {clip}"
        cfg = config(tmp, f"skip_{kind}_{sharding}", poisons[kind], "tanh", nan_inf_policy="skip",
                     optimizer_sharding=sharding, max_grad_norm=clip)
        out = os.path.join(tmp, f"skip_{kind}_{sharding}")
        rc, text = train(cfg, out, 2, label)
        if not check(rc == 0, f"{label}: exit {rc}\n{text[-3000:]}"):
            continue
        steps, ref_w = refs[kind]
        check(bad_steps(text) == steps, f"{label}: skipped {bad_steps(text)}, the reference {steps}")
        if kind == "nan":
            check(all(re.search(r"first on rank [01] of 2", l) for l in text.splitlines() if "is skipped" in l),
                  f"{label}: a warning does not name the rank:\n{text[-2000:]}")
        else:
            check("while the loss is finite (gradients summed over the 2 processes)" in text,
                  f"{label}: the warning does not say the gradient:\n{text[-2000:]}")
        with open(os.path.join(out, "all_results.json")) as f:
            skipped = json.load(f).get("nan_inf_skipped")
        check(skipped == len(steps), f"{label}: nan_inf_skipped {skipped}, the reference skipped {len(steps)}")
        ok, worst = close_weights(weights(out), ref_w)
        check(ok, f"{label}: the weights differ from one process's by {worst:.3g} relative")

    # 3. stop, then the sample repaired and the job resumed
    fixed = os.path.join(tmp, "fixed.h5")
    write_data(fixed, x, y)
    clean_cfg = config(tmp, "clean", fixed, "tanh")
    clean_out = os.path.join(tmp, "clean")
    rc, text = train(clean_cfg, clean_out, 2, "clean, 2 ranks")
    check(rc == 0, f"clean: exit {rc}\n{text[-2000:]}")
    for save_async in (False, True):
        label = f"stop{', save_async' if save_async else ''}"
        name = label.replace(", ", "_")
        cfg = config(tmp, name, data, "tanh", nan_inf_policy="stop", save_async=save_async)
        out = os.path.join(tmp, name)
        rc, text = train(cfg, out, 2, label)
        ckpt = os.path.join(out, f"checkpoint-{first - 1}")
        check(rc != 0 and f"optimizer step {first} " in text and "nan_inf_policy 'stop'" in text and ckpt in text,
              f"{label}: exit {rc}; expected step {first} and {ckpt} named:\n{text[-3000:]}")
        files = sorted(os.listdir(ckpt)) if os.path.isdir(ckpt) else []
        check("rng_state_0.json" in files and "rng_state_1.json" in files and verify(ckpt) is None,
              f"{label}: {ckpt} holds {files}: {verify(ckpt)}")
        cfg = config(tmp, name + "_resumed", fixed, "tanh", nan_inf_policy="stop", save_async=save_async)
        rc, text = train(cfg, out, 2, f"{label}, resumed with the sample repaired", "--resume_from_checkpoint",
                         "latest")
        if check(rc == 0, f"{label}, resumed: exit {rc}\n{text[-3000:]}"):
            check(same_weights(weights(out), weights(clean_out)), f"{label}, resumed: the weights differ from clean")
            check(history(out) == history(clean_out), f"{label}, resumed: the log differs from clean's")


# --- on_save_error ---------------------------------------------------------------------------------


def save_cases(tmp):
    x = RNG.standard_normal((N, FEATURES)).astype(np.float32)
    y = RNG.integers(0, CLASSES, N)
    data = os.path.join(tmp, "clean_save.h5")
    write_data(data, x, y)
    cfg = config(tmp, "save_clean", data, "tanh")
    clean_out = os.path.join(tmp, "save_clean")
    rc, text = train(cfg, clean_out, 2, "clean, 2 ranks")
    if not check(rc == 0, f"save clean: exit {rc}\n{text[-2000:]}"):
        return
    clean_w = weights(clean_out)
    first = os.path.join(clean_out, "checkpoint-4")
    rank0_bytes = sum(os.path.getsize(os.path.join(first, f)) for f in os.listdir(first) if f != "rng_state_1.json")
    rank1_bytes = os.path.getsize(os.path.join(first, "rng_state_1.json"))

    # 4. rank 0 out of space inside the second checkpoint's model.h5, stop
    label = "rank 0 out of space, stop"
    cfg = config(tmp, "full0", data, "tanh")
    out = os.path.join(tmp, "full0")
    rc, text = mpmd(cfg, out, 0, f"{rank0_bytes + 300}:-1:ENOSPC", label)
    ck8, ck4 = os.path.join(out, "checkpoint-8"), os.path.join(out, "checkpoint-4")
    check(rc != 0 and "No space left on device" in text and "model.h5" in text and ck8 in text and
          "on_save_error 'stop'" in text, f"{label}: exit {rc}\n{text[-3000:]}")
    no_trace(out, 8, label)
    check(verify(ck4) is None, f"{label}: {ck4}: {verify(ck4)}")
    rc, text = train(cfg, out, 2, f"{label}, resumed", "--resume_from_checkpoint", "latest")
    if check(rc == 0, f"{label}, resumed: exit {rc}\n{text[-3000:]}"):
        check(same_weights(weights(out), clean_w), f"{label}, resumed: the weights differ from clean")

    # 5. rank 1 out of space in its progress file of the second checkpoint, continue
    for save_async in (False, True):
        label = f"rank 1 out of space, continue{', save_async' if save_async else ''}"
        name = f"full1_{int(save_async)}"
        cfg = config(tmp, name, data, "tanh", on_save_error="continue", save_async=save_async)
        out = os.path.join(tmp, name)
        rc, text = mpmd(cfg, out, 1, f"{rank1_bytes + 20}:1:ENOSPC", label)
        if not check(rc == 0, f"{label}: exit {rc}\n{text[-3000:]}"):
            continue
        check("could not be saved" in text and "No space left on device" in text and "rng_state_1.json" in text and
              "training continues (on_save_error 'continue')" in text, f"{label}: no warning:\n{text[-3000:]}")
        no_trace(out, 8, label)
        for s in (4, 12):
            ck = os.path.join(out, f"checkpoint-{s}")
            check(verify(ck) is None, f"{label}: {ck}: {verify(ck)}")
        check(same_weights(weights(out), clean_w), f"{label}: the weights differ from clean")


with tempfile.TemporaryDirectory() as tmp:
    print("nan_inf_policy")
    nan_cases(tmp)
    print("on_save_error")
    save_cases(tmp)
finish()
