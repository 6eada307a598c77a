"""Asynchronous checkpoint saving (save_async) with several processes: `mpirun -np 2 ctrainer train`.

Usage (ctest runs it): python3 test_async_save.py PATH/TO/ctrainer

Cases:
  1. the same 2-rank run with synchronous saves and with save_async (plain DDP, and ZeRO-1, whose
     optimizer state is gathered to rank 0 when the snapshot is taken) writes the same checkpoints:
     the same directories (rotation with save_total_limit), the same files, byte for byte, except
     training_args.json (and run_config.json), which say save_async, and the HDF5 files, compared
     dataset by dataset and attribute by attribute with h5py while HDF5 stamps object times into
     them (byte for byte otherwise); both ranks' progress files are there and every checkpoint
     verifies against its manifest;
  2. resuming 2 ranks from an asynchronously written checkpoint in the middle of the run ends with the
     uninterrupted run's model and log history (timings aside);
  3. a rank whose write fails (rank 1 started in another working directory, where the relative
     output_dir does not exist, so its writer cannot create its progress file): the job ends non-zero
     on every rank, rank 1 with its message, rank 0 saying another process failed, nothing is
     committed and training stops at the next step boundaries instead of going on.
A fresh seed each run (CT_TEST_SEED=N repeats one)."""
import json
import os
import subprocess
import sys
import tempfile
import time
import zlib

try:
    import h5py
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

from mpilib import CTRAINER, ENV, MPIRUN, SEED, check, finish  # noqa: E402 (after the optional imports)
MPI = [MPIRUN, "--oversubscribe", "--bind-to", "none"]
SPEED_KEYS = ("_runtime", "_per_second")
MAX_STEPS, SAVE_STEPS = 30, 5

def config(tmp, name, **args):
    ta = {"output_dir": "unused", "max_steps": MAX_STEPS, "per_device_train_batch_size": 16,
          "learning_rate": 2e-3, "lr_scheduler_type": "linear", "warmup_steps": 3, "logging_steps": 3,
          "eval_strategy": "no", "save_strategy": "steps", "save_steps": SAVE_STEPS, "save_total_limit": 3,
          "seed": SEED, "disable_tqdm": True}
    ta.update(args)
    c = {"model": {"type": "mlp", "hidden": [64, 32], "dropout": 0.1},
         "data": {"train": {"type": "fashion_mnist", "split": "train", "limit": 1993,
                            "transforms": [{"type": "normalize", "mean": [0.2860], "std": [0.3530]}]}},
         "loss": {"type": "cross_entropy"}, "metrics": ["accuracy"], "training_args": ta}
    path = os.path.join(tmp, f"{name}.json")
    with open(path, "w") as f:
        json.dump(c, f)
    return path


def run(cmd, label, timeout=240, cwd=None):
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=timeout, cwd=cwd)
    except subprocess.TimeoutExpired as e:
        check(False, f"{label}: no result after {timeout} s: {' '.join(cmd)}\n{e.stdout}\n{e.stderr}")
        finish()
    return p.returncode, p.stdout + p.stderr, time.time() - t0


def train(cfg, out, label, *extra):
    rc, text, took = run(MPI + ["-np", "2", CTRAINER, "train", cfg, "--output_dir", out] + list(extra), label)
    check(rc == 0, f"{label}: exit code {rc}\n{text[-3000:]}")
    print(f"  {label}: {took:.1f} s")
    return text


def normalized(v):
    if isinstance(v, dict):
        return {k: normalized(x) for k, x in v.items() if k != "save_async" and not k.endswith(SPEED_KEYS)}
    if isinstance(v, list):
        return [normalized(x) for x in v]
    return v


def same_h5(a, b):
    """Same datasets (dtype, shape, bytes) and root attributes."""
    with h5py.File(a, "r") as x, h5py.File(b, "r") as y:
        if sorted(x.keys()) != sorted(y.keys()) or not x.keys():
            return "other datasets"
        for k in x:
            u, v = x[k][()], y[k][()]
            if u.dtype != v.dtype or u.shape != v.shape or u.tobytes() != v.tobytes():
                return f"dataset {k} differs"
        if sorted(x.attrs.keys()) != sorted(y.attrs.keys()):
            return "other attributes"
        for k in x.attrs:
            if str(x.attrs[k]) != str(y.attrs[k]):
                return f"attribute {k} differs"
    return None


def crc_ok(ckpt):
    """Every file the manifest lists has its size and CRC-32."""
    with open(os.path.join(ckpt, "manifest.json")) as f:
        files = json.load(f)["files"]
    for name, e in files.items():
        data = open(os.path.join(ckpt, name), "rb").read()
        if len(data) != e["size"] or f"{zlib.crc32(data) & 0xffffffff:08x}" != e["crc32"]:
            return False
    return True


def same_checkpoints(label, sync_out, async_out):
    cs = sorted(d for d in os.listdir(sync_out) if d.startswith("checkpoint-"))
    ca = sorted(d for d in os.listdir(async_out) if d.startswith("checkpoint-"))
    check(cs == ca and len(cs) == 3, f"{label}: checkpoints {cs} synchronously, {ca} asynchronously")
    byte_files = content_files = 0
    for c in cs:
        if c not in ca:
            continue
        ds, da = os.path.join(sync_out, c), os.path.join(async_out, c)
        fs, fa = sorted(os.listdir(ds)), sorted(os.listdir(da))
        check(fs == fa, f"{label}: {c}: files {fs} vs {fa}")
        check("rng_state_0.json" in fa and "rng_state_1.json" in fa and "optimizer.h5" in fa,
              f"{label}: {c} lacks a rank's progress file or the optimizer: {fa}")
        check(crc_ok(da), f"{label}: {c} does not match its manifest")
        for name in fs:
            if name not in fa:
                continue
            ps, pa = os.path.join(ds, name), os.path.join(da, name)
            bs, ba = open(ps, "rb").read(), open(pa, "rb").read()
            if name.startswith("rng_state_"):
                # the same progress; the identity is each run's own, one for all its ranks
                js, ja = json.loads(bs), json.loads(ba)
                for side, d, j in (("sync", ds, js), ("async", da, ja)):
                    with open(os.path.join(d, "rng_state_0.json")) as f0:
                        check(j.get("run_id") is not None and j.get("run_id") == json.load(f0).get("run_id"),
                              f"{label}: {c}/{name}: the {side} run's ranks name other runs")
                js.pop("run_id", None)
                ja.pop("run_id", None)
                check(js == ja, f"{label}: {c}/{name} differs beyond the run's identity")
                content_files += 1
            elif name in ("training_args.json", "run_config.json"):
                js, ja = json.loads(bs), json.loads(ba)
                check(normalized(js) == normalized(ja), f"{label}: {c}/{name} differs beyond save_async")
                if name == "training_args.json":
                    check(js.get("save_async") is False and ja.get("save_async") is True,
                          f"{label}: {c}/{name}: save_async {js.get('save_async')} / {ja.get('save_async')}")
                content_files += 1
            elif name == "manifest.json":
                ms, ma = json.loads(bs)["files"], json.loads(ba)["files"]
                check(sorted(ms) == sorted(ma), f"{label}: {c}: the manifests list other files")
                for f in ms:
                    if f in ma and f not in ("training_args.json", "run_config.json") and not f.startswith("rng_"):
                        check(ms[f]["size"] == ma[f]["size"], f"{label}: {c}: {f}: other size in the manifest")
                        if not f.endswith(".h5") or bs_h5_equal(ds, da, f):
                            check(ms[f]["crc32"] == ma[f]["crc32"], f"{label}: {c}: {f}: other checksum")
            elif name.endswith(".h5") and bs != ba:
                why = same_h5(ps, pa)
                check(why is None, f"{label}: {c}/{name}: {why}")
                content_files += 1
            else:
                check(bs == ba, f"{label}: {c}/{name} is not byte-identical")
                byte_files += 1
    print(f"  {label}: {len(cs)} checkpoints; {byte_files} files byte for byte, {content_files} by content")


def bs_h5_equal(ds, da, f):
    return open(os.path.join(ds, f), "rb").read() == open(os.path.join(da, f), "rb").read()


def log_history(out):
    with open(os.path.join(out, "trainer_state.json")) as f:
        return normalized(json.load(f)["log_history"])


def same_files_case(tmp, label, **args):
    cfg = config(tmp, label.replace(" ", "_"), **args)
    out = os.path.join(tmp, label.replace(" ", "_"))
    train(cfg, out, f"{label}, synchronous")
    os.rename(out, out + ".sync")
    train(cfg, out, f"{label}, save_async", "--save_async", "true")
    same_checkpoints(label, out + ".sync", out)
    check(not [d for d in os.listdir(out) if d.endswith((".tmp", ".deleting"))],
          f"{label}: a temporary or half-rotated directory was left: {os.listdir(out)}")
    check(log_history(out) == log_history(out + ".sync"), f"{label}: the log histories differ")
    why = same_h5(os.path.join(out + ".sync", "model.h5"), os.path.join(out, "model.h5"))
    check(why is None, f"{label}: the final models differ: {why}")
    return cfg, out


def resume_case(tmp, cfg, out):
    """From the asynchronous run's checkpoint-20 (of 30) to the end, on 2 ranks, with save_async."""
    resumed = out + ".resumed"
    ckpt = os.path.join(out, "checkpoint-20")
    train(cfg, resumed, "resumed from checkpoint-20", "--save_async", "true", "--resume_from_checkpoint", ckpt)
    why = same_h5(os.path.join(out, "model.h5"), os.path.join(resumed, "model.h5"))
    check(why is None, f"resume: the final model differs from the uninterrupted run's: {why}")
    check(log_history(resumed) == log_history(out), "resume: the log history differs from the uninterrupted run's")
    check(sorted(d for d in os.listdir(resumed) if d.startswith("checkpoint-")) ==
          ["checkpoint-25", "checkpoint-30"], f"resume: checkpoints {os.listdir(resumed)}")


def failing_rank_case(tmp):
    label = "rank 1's write fails"
    main_dir, other_dir = os.path.join(tmp, "node_a"), os.path.join(tmp, "node_b")
    os.makedirs(main_dir)
    os.makedirs(other_dir)
    cfg = config(tmp, "failing", output_dir="out", max_steps=200, save_async=True, ddp_timeout=60)
    cmd = MPI + ["-np", "1", "--wdir", main_dir, CTRAINER, "train", cfg, ":",
                 "-np", "1", "--wdir", other_dir, CTRAINER, "train", cfg]
    rc, out, took = run(cmd, label, timeout=120)
    print(f"  {label}: exit {rc} after {took:.1f} s")
    check(rc != 0, f"{label}: the job exited 0:\n{out[-3000:]}")
    check("asynchronous save of out/checkpoint-5" in out and "rng_state_1.json" in out,
          f"{label}: no message from rank 1 naming the checkpoint and its file:\n{out[-3000:]}")
    check("another process failed while writing its part" in out,
          f"{label}: rank 0 does not say another process failed:\n{out[-3000:]}")
    left = os.listdir(os.path.join(main_dir, "out")) if os.path.isdir(os.path.join(main_dir, "out")) else []
    check("checkpoint-5" not in left, f"{label}: checkpoint-5 was committed without rank 1's part: {left}")
    check(not any(d.startswith("checkpoint-") and not d.endswith(".tmp") for d in left),
          f"{label}: training went on and committed {left}")


with tempfile.TemporaryDirectory() as tmp:
    print("same files, plain DDP")
    cfg, out = same_files_case(tmp, "ddp")
    print("same files, ZeRO-1")
    same_files_case(tmp, "zero1", optimizer_sharding="zero1")
    print("resume from an asynchronous checkpoint")
    resume_case(tmp, cfg, out)
    print("a rank whose write fails")
    failing_rank_case(tmp)
finish()
