#!/usr/bin/python3
"""Checkpoint save and load time and size: ctrainer (bench/bench_checkpoint: model.h5 + optimizer.h5
through model/model_io.h and checkpoint/checkpoint_io.h) against torch.save / torch.load of the same
training state (model.state_dict() + optimizer.state_dict() of AdamW after one step) in the same
run, for the Fashion-MNIST MLP (784-256-128-10, examples/configs/fashion_mnist_mlp.json) and CNN
(examples/configs/fashion_mnist_cnn.json). Each figure is the median of --repeat runs, files in the
page cache, one thread each.

  save         the two files / torch.save to a file
  crash-safe   a checkpoint as a crash may not tear it: ctrainer writes the files into a .tmp
               directory, the manifest (sizes and CRC-32s) with every file fsync'd, fsyncs and renames
               the directory (the Trainer's path); PyTorch: torch.save to a temporary file, fsync,
               rename, fsync of the directory (what a careful training script does)
  load         the files read into a fresh model and optimizer / torch.load + load_state_dict of both
  verified     ctrainer checks the manifest (reads and checksums every file) before loading; the
               PyTorch figure is its plain load (its zip reader checks nothing comparable)
Ratios are PyTorch's time over ctrainer's (> 1: ctrainer is faster) and ctrainer's size over
PyTorch's.

Usage: bench/checkpoint.py [--repeat N] [--model mlp|cnn|both] [--build DIR] [--dir DIR]"""
import argparse
import json
import os
import statistics
import tempfile
import time

from benchlib import ctrainer_level, run_json

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--repeat", type=int, default=20, help="runs per figure; the median is reported")
ap.add_argument("--model", choices=["mlp", "cnn", "both"], default="both")
ap.add_argument("--build", default=os.path.join(here, "..", "build"))
ap.add_argument("--dir", default=None, help="where the files go (default: a temporary directory)")
a = ap.parse_args()
# the CPU kernels' level (CT_CPU_ISA or the CPU's best), as every benchmark reports it
print(f"ctrainer kernels: {ctrainer_level(os.path.join(a.build, 'ctrainer'), os.environ)}", flush=True)

os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch  # noqa: E402  (after OMP_NUM_THREADS, which it reads at import)
from torch import nn  # noqa: E402

torch.set_num_threads(1)


def model_spec(name):
    with open(os.path.join(here, "..", "examples", "configs", f"fashion_mnist_{name}.json")) as f:
        spec = json.load(f)["model"]
    spec.setdefault("num_classes", 10)
    return spec


def torch_model(spec):
    """The preset as model/presets.c expands it, in nn.Sequential (same layers, same sizes)."""
    act = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}[spec.get("activation", "relu")]
    layers, features = [], 28 * 28
    if spec["type"] == "cnn":
        k, c_in, side = spec.get("kernel_size", 3), 1, 28
        for c in spec["channels"]:
            layers += [nn.Conv2d(c_in, c, k, padding=k // 2)]
            if spec.get("batch_norm"):
                layers += [nn.BatchNorm2d(c)]
            layers += [act(), nn.MaxPool2d(2)]
            c_in, side = c, side // 2
        features = c_in * side * side
    layers += [nn.Flatten()]
    for h in spec.get("hidden", []):
        layers += [nn.Linear(features, h), act()]
        if spec.get("dropout", 0) > 0:
            layers += [nn.Dropout(spec["dropout"])]
        features = h
    layers += [nn.Linear(features, spec["num_classes"])]
    return nn.Sequential(*layers)


def torch_state(spec):
    """model and AdamW (lr 1e-3, weight decay 0.01) after one step on a random batch."""
    torch.manual_seed(0)
    model = torch_model(spec)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    x, y = torch.randn(32, 1, 28, 28), torch.randint(0, spec["num_classes"], (32,))
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    return model, opt


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def bench_torch(spec, d, repeat):
    model, opt = torch_state(spec)
    fresh, fresh_opt = torch_state(spec)  # another instance to load into
    path, tmp = os.path.join(d, "torch_state.pt"), os.path.join(d, "torch_state.pt.tmp")
    t = {"save": [], "crash-safe": [], "load": []}
    for _ in range(repeat):
        t0 = time.perf_counter()
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, path)
        t["save"].append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        with open(tmp, "wb") as f:
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(d)
        t["crash-safe"].append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        state = torch.load(path)
        fresh.load_state_dict(state["model"])
        fresh_opt.load_state_dict(state["optimizer"])
        t["load"].append(time.perf_counter() - t0)
    for k, v in model.state_dict().items():
        assert torch.equal(v, fresh.state_dict()[k]), f"torch: {k} differs after loading"
    params = sum(p.numel() for p in model.parameters())
    return params, {k: statistics.median(v) for k, v in t.items()}, os.path.getsize(path)


def report(name, spec, d):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    ct_dir = os.path.join(d, f"ctrainer_{name}")
    os.makedirs(ct_dir, exist_ok=True)
    ct = run_json([os.path.join(a.build, "bench", "bench_checkpoint"), json.dumps(spec), ct_dir, str(a.repeat)], env)
    params, pt, pt_bytes = bench_torch(spec, d, a.repeat)
    if params != ct["params"]:
        raise SystemExit(f"{name}: PyTorch's model has {params} parameters, ctrainer's {ct['params']}: not the same model")
    ct_bytes = ct["model_bytes"] + ct["optimizer_bytes"]
    rows = [("save", ct["save_s"], pt["save"]), ("crash-safe save", ct["save_synced_s"], pt["crash-safe"]),
            ("load", ct["load_s"], pt["load"]), ("verified load", ct["load_verified_s"], pt["load"])]
    print(f"\n{name.upper()} ({params:,} parameters; weights + AdamW state after one step), median of {a.repeat}")
    print(f"  {'':18}{'ctrainer ms':>12}{'PyTorch ms':>12}{'ratio':>8}")
    for label, c, p in rows:
        print(f"  {label:18}{c * 1e3:>12.2f}{p * 1e3:>12.2f}{p / c:>8.2f}")
    print(f"  {'bytes':18}{ct_bytes:>12,}{pt_bytes:>12,}{ct_bytes / pt_bytes:>8.3f}"
          f"   (model.h5 {ct['model_bytes']:,} + optimizer.h5 {ct['optimizer_bytes']:,}; manifest {ct['manifest_bytes']})")
    return {"model": name, "params": params, "ctrainer": ct,
            "torch": {"save_s": pt["save"], "save_synced_s": pt["crash-safe"], "load_s": pt["load"], "bytes": pt_bytes},
            "ratio_save": pt["save"] / ct["save_s"], "ratio_save_synced": pt["crash-safe"] / ct["save_synced_s"],
            "ratio_load": pt["load"] / ct["load_s"], "ratio_load_verified": pt["load"] / ct["load_verified_s"],
            "size_ratio": ct_bytes / pt_bytes}


with tempfile.TemporaryDirectory(dir=a.dir) as d:
    results = [report(name, model_spec(name), d) for name in (["mlp", "cnn"] if a.model == "both" else [a.model])]
print(json.dumps(results))
