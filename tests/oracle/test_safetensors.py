"""safetensors interchange with PyTorch, both ways, through the CLI, with safetensors' own reader and
writer (the PyPI package; the test is skipped without it) and PyTorch modules written here.

ctrainer -> PyTorch: a tiny MLP (the "mlp" preset), a tiny CNN with BatchNorm (the "cnn" preset) and
a tiny GPT are trained for a few steps on fresh random data with `ctrainer train`, exported with
`ctrainer export`, and loaded with model.load_state_dict(safetensors.torch.load_file(...)) (strict)
into nn.Sequential / nanoGPT modules of the same architecture. Their logits in float64 on the same
inputs must match what `ctrainer predict --model` wrote (relative error < 1e-5). config.json must
describe the model; `export --dtype f16|bf16` must give PyTorch's own .half() / .bfloat16() of the
saved weights, bit for bit.

PyTorch -> ctrainer: freshly initialised PyTorch modules (BatchNorm running statistics made
non-trivial, weights in float32, float64, float16 or bfloat16) saved with safetensors' save_file (for
the GPT with save_model, which keeps one name of the tied pair and records the other in the
metadata) are read through a run config's "init_from" by `ctrainer predict` (no --model) and by
`ctrainer train` with learning rate 0: the logits match PyTorch's on the same inputs and the trained
model's parameters are the file's, bit for bit. Mismatched files fail with their names."""
import json
import os
import subprocess
import sys
import tempfile

from common import check, check_close, CTRAINER, finish, h5py, np, RNG, SEED, torch

try:
    from safetensors.torch import load_file, save_file, save_model
except ImportError as e:
    print(f"skipped: the safetensors package is not installed ({e}); scripts/oracle-venv.sh installs it")
    sys.exit(77)

from gpt_reference import GPT

nn = torch.nn


def ctrainer(*args, fail=False):
    p = subprocess.run([CTRAINER, *args], capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "2"})
    if fail:
        return p
    if p.returncode != 0:
        check(False, f"ctrainer {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()}")
        finish()
    return p.stdout


# --- the three architectures: ctrainer spec, PyTorch module, data ---------------------------------

def mlp_case():
    d, h, c = int(RNG.integers(3, 20)), int(RNG.integers(2, 16)), int(RNG.integers(2, 6))
    spec = {"type": "mlp", "hidden": [h], "activation": "tanh"}

    def module():
        return nn.Sequential(nn.Flatten(), nn.Linear(d, h), nn.Tanh(), nn.Linear(h, c))

    def data(n):
        return RNG.normal(size=(n, d)).astype(np.float32), RNG.integers(0, c, size=n).astype(np.int64)
    return "mlp", spec, module, data, c


def cnn_case():
    ch, k, hw, hid, c = int(RNG.integers(1, 3)), int(RNG.choice([1, 3])), 2 * int(RNG.integers(2, 5)), \
        int(RNG.integers(2, 8)), int(RNG.integers(2, 5))
    filters = int(RNG.integers(2, 5))
    spec = {"type": "cnn", "channels": [filters], "kernel_size": k, "batch_norm": True, "hidden": [hid]}

    def module():
        return nn.Sequential(nn.Conv2d(ch, filters, k, padding=k // 2), nn.BatchNorm2d(filters), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Flatten(), nn.Linear(filters * (hw // 2) ** 2, hid), nn.ReLU(),
                             nn.Linear(hid, c))

    def data(n):
        return RNG.normal(size=(n, ch, hw, hw)).astype(np.float32), RNG.integers(0, c, size=n).astype(np.int64)
    return "cnn", spec, module, data, c


def gpt_case():
    n_head = int(RNG.integers(1, 3))
    spec = {"type": "gpt", "vocab_size": int(RNG.integers(8, 40)), "n_positions": int(RNG.integers(4, 9)),
            "n_embd": 4 * n_head * int(RNG.integers(1, 3)), "n_layer": int(RNG.integers(1, 3)), "n_head": n_head,
            "bias": bool(RNG.integers(0, 2)), "dropout": 0.0}

    def module():
        return GPT(spec)
    return "gpt", spec, module, None, spec["vocab_size"]


def write_data(d, name, case, n):
    """The data files and the run config's "data" section: hdf5 features/labels, or token ids."""
    kind, spec, _, data, _ = case
    if kind == "gpt":
        T = spec["n_positions"]
        path = os.path.join(d, f"{name}.bin")
        ids = RNG.integers(0, spec["vocab_size"], size=n * T + 1).astype(np.uint16)
        ids.tofile(path)
        return {"type": "tokens", "path": path, "context": T, "vocab_size": spec["vocab_size"]}, \
            ids[:n * T].reshape(n, T).astype(np.int64)
    x, y = data(n)
    path = os.path.join(d, f"{name}.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("features", data=x)
        f.create_dataset("labels", data=y)
        f.attrs["num_classes"] = case[4]
    return {"type": "hdf5", "path": path}, x


def run_config(d, case, extra=None):
    train, _ = write_data(d, "train", case, 24)
    test, x_test = write_data(d, "test", case, int(RNG.integers(3, 12)))
    cfg = {"model": case[1], "data": {"train": train, "test": test},
           "training_args": {"max_steps": 3, "per_device_train_batch_size": 8, "per_device_eval_batch_size": 16,
                             "learning_rate": 0.01, "save_strategy": "no", "eval_strategy": "no",
                             "logging_strategy": "no", "seed": int(RNG.integers(0, 2**31))}}
    cfg.update(extra or {})
    path = os.path.join(d, "run.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path, x_test


def torch_logits(net, x):
    net.eval()
    with torch.no_grad():
        return net(torch.from_numpy(x.astype(np.int64) if x.dtype == np.int64 else x.astype(np.float64))).numpy()


def predicted(d, cfg, *args):
    out = os.path.join(d, "pred.h5")
    ctrainer("predict", cfg, "--output", out, "--output_dir", os.path.join(d, "predict"), *args)
    with h5py.File(out, "r") as f:
        return f["logits"][()]


# --- ctrainer -> PyTorch -----------------------------------------------------------------------

def export_case(case):
    kind, spec, module, _, classes = case
    with tempfile.TemporaryDirectory() as d:
        cfg, x = run_config(d, case)
        out, exp = os.path.join(d, "out"), os.path.join(d, "exported")
        ctrainer("train", cfg, "--output_dir", out)
        msg = ctrainer("export", "--model", out, "--format", "safetensors", "--output", exp)
        check("model.safetensors" in msg, f"{kind}: export said {msg!r}")
        state = load_file(os.path.join(exp, "model.safetensors"))
        config = json.load(open(os.path.join(exp, "config.json")))
        with h5py.File(os.path.join(out, "model.h5"), "r") as f:
            saved = {k: f[k][()] for k in f.keys()}
        net = module()
        want = net.state_dict()
        check(set(state) == set(want), f"{kind}: exported names {sorted(set(state) ^ set(want))} differ from "
              "PyTorch's state_dict")
        for k, v in want.items():
            if k in state:
                check(tuple(state[k].shape) == tuple(v.shape), f"{kind}: {k} shape {tuple(state[k].shape)} != "
                      f"{tuple(v.shape)}")
        for k, v in saved.items():  # every saved tensor, bit for bit
            check(k in state and np.array_equal(state[k].numpy(), v), f"{kind}: {k} differs from model.h5")
        try:
            net.load_state_dict(state)  # strict
        except RuntimeError as e:
            check(False, f"{kind}: strict load_state_dict failed: {e}")
            return
        if kind == "cnn":
            check(all(state[k].dtype == torch.int64 and state[k].dim() == 0 for k in state if
                      k.endswith("num_batches_tracked")), "cnn: num_batches_tracked is not an int64 scalar")
        if kind == "gpt":
            check(torch.equal(state["lm_head.weight"], state["transformer.wte.weight"]), "gpt: lm_head != wte")
            check(config == {**spec, "layer_norm_epsilon": 1e-5}, f"gpt: config.json {config}")
        else:
            check(config == {**spec, "num_classes": classes}, f"{kind}: config.json {config}")
        check_close(f"{kind}: exported model's logits in PyTorch vs `ctrainer predict`",
                    predicted(d, cfg, "--model", out), torch_logits(net, x))
        # --dtype: PyTorch's own rounding of the saved weights
        for dt, tdt in (("f16", torch.float16), ("bf16", torch.bfloat16)):
            ctrainer("export", "--model", out, "--output", exp, "--dtype", dt)
            half = load_file(os.path.join(exp, "model.safetensors"))
            bad = [k for k, v in saved.items() if half[k].dtype != tdt or
                   not torch.equal(half[k].view(torch.int16), torch.from_numpy(v).to(tdt).view(torch.int16))]
            check(not bad, f"{kind}: --dtype {dt} differs from PyTorch's conversion in {bad}")
        # config.json + init_from rebuild the same model: predictions equal bit for bit
        cfg2 = json.load(open(cfg))
        cfg2["model"] = config
        cfg2["init_from"] = "exported/model.safetensors"
        ctrainer("export", "--model", out, "--output", exp)  # back to float32
        path2 = os.path.join(d, "again.json")
        json.dump(cfg2, open(path2, "w"))
        check(np.array_equal(predicted(d, path2), predicted(d, cfg, "--model", out)),
              f"{kind}: config.json + init_from do not rebuild the exported model")


# --- PyTorch -> ctrainer -----------------------------------------------------------------------

def import_case(case):
    kind, spec, module, _, _ = case
    with tempfile.TemporaryDirectory() as d:
        net = module().float()
        with torch.no_grad():
            for name, b in net.named_buffers():
                if name.endswith("running_mean"):
                    b.copy_(torch.randn_like(b))
                elif name.endswith("running_var"):
                    b.copy_(torch.rand_like(b) + 0.5)
                elif name.endswith("num_batches_tracked"):
                    b.fill_(int(RNG.integers(0, 100)))
            for p in net.parameters():  # trained-looking weights, biases and norm weights off 0 and 1
                p.add_(0.1 * torch.randn_like(p))
        dtype = [torch.float32, torch.float64, torch.float16, torch.bfloat16][int(RNG.integers(0, 4))]
        net = net.to(dtype)
        file = os.path.join(d, "torch.safetensors")
        if kind == "gpt":
            save_model(net, file)  # drops one name of the tied pair, records it in the metadata
        else:
            save_file(net.state_dict(), file)
        net = net.double()  # the reference: the file's values, in float64
        cfg, x = run_config(d, case, {"init_from": "torch.safetensors"})
        check_close(f"{kind} from PyTorch ({dtype}): `ctrainer predict` with init_from vs PyTorch",
                    predicted(d, cfg), torch_logits(net, x))
        # training starts from the file: with learning rate 0 the parameters stay the file's
        out = os.path.join(d, "out")
        ctrainer("train", cfg, "--output_dir", out, "--learning_rate", "0", "--weight_decay", "0")
        params = dict(net.named_parameters())
        with h5py.File(os.path.join(out, "model.h5"), "r") as f:
            bad = [k for k in f.keys() if k in params and
                   not np.array_equal(f[k][()], params[k].detach().float().numpy())]
            check(not bad and len(f.keys()) > 0, f"{kind}: training with init_from did not start from the file: {bad}")


def mismatch_cases():
    with tempfile.TemporaryDirectory() as d:
        case = mlp_case()
        net = case[2]()
        state = {("model." + k if i == 0 else k): v for i, (k, v) in enumerate(net.state_dict().items())}
        save_file(state, os.path.join(d, "torch.safetensors"))
        cfg, _ = run_config(d, case, {"init_from": "torch.safetensors"})
        p = ctrainer("predict", cfg, "--output", os.path.join(d, "p.h5"), fail=True)
        check(p.returncode == 1 and "init_from: " in p.stderr and "missing from the file: '1.weight'" in p.stderr and
              "did you mean '1.weight'?" in p.stderr, f"renamed tensor: exit {p.returncode}: {p.stderr.strip()}")
        bigger = {k: torch.zeros(v.shape[0] + 1, *v.shape[1:]) for k, v in net.state_dict().items()}
        save_file(bigger, os.path.join(d, "torch.safetensors"))
        p = ctrainer("predict", cfg, "--output", os.path.join(d, "p.h5"), fail=True)
        check(p.returncode == 1 and "in the file, but the model's is" in p.stderr,
              f"wrong shape: exit {p.returncode}: {p.stderr.strip()}")
        cfg, _ = run_config(d, case)
        p = ctrainer("evaluate", cfg, fail=True)
        check(p.returncode == 2 and "--model DIR is required (a directory with model.h5), unless the config has "
              "\"init_from\"" in p.stderr, f"evaluate without --model or init_from: exit {p.returncode}: {p.stderr}")


def export_usage():
    for args, code, text in ((["--help"], 0, "model.load_state_dict(load_file("),
                             ([], 2, "--model DIR is required"),
                             (["--model", "x", "--format", "onnx"], 2, "unknown format 'onnx' (supported: safetensors)"),
                             (["--model", "x", "--dtype", "f8"], 2, "unknown dtype 'f8' (f32, f64, bf16 or f16)"),
                             (["--model", "/nonexistent/run"], 1, "/nonexistent/run: cannot open: No such file or directory"),
                             (["--model", "x", "--colour"], 2, "unknown option '--colour'"),
                             (["--model"], 2, "--model needs a value"),
                             (["--model", "x", "a.json", "b.json"], 2, "unexpected argument 'b.json'")):
        p = ctrainer("export", *args, fail=True)
        out = p.stdout + p.stderr
        check(p.returncode == code and text in out, f"export {args}: exit {p.returncode} (want {code}), {out.strip()!r}")


export_usage()
for make in (mlp_case, cnn_case, gpt_case):
    export_case(make())
for make in (mlp_case, cnn_case, gpt_case):
    import_case(make())
mismatch_cases()
finish()
