"""`ctrainer train`, `evaluate` and `predict` end to end, checked by tools nobody here wrote.

A small MLP is trained from tests/cli/configs/tiny_sequential.json (two named eval sets, a test
set, accuracy and top-3 metrics) with a fresh seed. Then:
  - model.h5 read with h5py has PyTorch's state_dict names and shapes, and the model's config;
  - PyTorch, loaded with those weights, reproduces the logits `predict` wrote (float64 reference
    from the same float32 weights and pixels), predictions are their argmax, labels are the IDX
    file's in dataset order;
  - scikit-learn's accuracy_score / top_k_accuracy_score and PyTorch's cross-entropy on those logits
    give the metrics `evaluate` and `predict` report;
  - `evaluate` of the saved model reproduces the end-of-training evaluation exactly;
  - trainer_state.json's log history has Hugging Face's entries at the expected steps."""
import gzip
import json
import os
import subprocess
import sys
import tempfile

from common import check, CTRAINER, finish, h5py, np, rel_err, require_fashion_mnist, RNG, TINY_CONFIG, torch

try:
    from sklearn.metrics import accuracy_score, top_k_accuracy_score
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

DATA = require_fashion_mnist()

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = TINY_CONFIG
SEED = int(RNG.integers(0, 2**31))


def ctrainer(*args):
    p = subprocess.run([CTRAINER, *args], capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "2"})
    if p.returncode != 0:
        check(False, f"ctrainer {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()}")
        finish()
    return p.stdout


def idx(name):
    with gzip.open(f"{DATA}/{name}", "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


with tempfile.TemporaryDirectory() as d:
    out, ev = os.path.join(d, "train"), os.path.join(d, "eval")
    ctrainer("train", CONFIG, "--output_dir", out, "--seed", str(SEED), "--save_strategy", "no")
    ctrainer("evaluate", CONFIG, "--model", out, "--output_dir", ev)
    pred_file = os.path.join(d, "pred.h5")
    ctrainer("predict", CONFIG, "--model", out, "--output", pred_file, "--output_dir", ev)
    train_eval = json.load(open(os.path.join(out, "eval_results.json")))
    again = json.load(open(os.path.join(ev, "eval_results.json")))
    test = json.load(open(os.path.join(ev, "test_results.json")))
    state = json.load(open(os.path.join(out, "trainer_state.json")))
    with h5py.File(os.path.join(out, "model.h5"), "r") as f:
        weights = {k: f[k][()] for k in f.keys()}
        model_config = json.loads(f.attrs["config"])
    with h5py.File(pred_file, "r") as f:
        logits, predictions, labels = f["logits"][()], f["predictions"][()], f["labels"][()]

# --- the saved model ---------------------------------------------------------------------------
shapes = {k: v.shape for k, v in weights.items()}
check(shapes == {"1.weight": (32, 784), "1.bias": (32,), "3.weight": (10, 32), "3.bias": (10,)},
      f"model.h5 tensors {shapes}")
check(model_config == json.load(open(CONFIG))["model"], "model.h5's config attribute is not the config's model")
net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
# The names are nn.Sequential's own: the file loads into PyTorch as a state_dict, unchanged.
net.load_state_dict({k: torch.from_numpy(v.astype(np.float64)) for k, v in weights.items()})

images = idx("t10k-images-idx3-ubyte.gz").astype(np.float32) / np.float32(255)
true_labels = idx("t10k-labels-idx1-ubyte.gz").astype(np.int64)


def reference(n):
    with torch.no_grad():
        z = net(torch.from_numpy(images[:n].astype(np.float64)))
        loss = torch.nn.functional.cross_entropy(z, torch.from_numpy(true_labels[:n])).item()
    return z.numpy(), loss


# --- predict: logits, predictions, labels in dataset order --------------------------------------
want, test_loss = reference(700)
check(logits.shape == (700, 10) and logits.dtype == np.float32, f"logits {logits.shape} {logits.dtype}")
check(rel_err(logits, want) < 1e-5, f"logits vs PyTorch: relative error {rel_err(logits, want):.3g}")
check(np.array_equal(predictions, logits.argmax(axis=1)), "predictions are not the argmax of the logits")
check(np.array_equal(labels, true_labels[:700]), "labels are not the test set's first 700, in order")
check(test["test_accuracy"] == accuracy_score(labels, predictions), "test_accuracy differs from scikit-learn's")
check(abs(test["test_loss"] - test_loss) < 1e-6 * test_loss, f"test_loss {test['test_loss']} vs PyTorch {test_loss}")
check(abs(test["test_top_3_accuracy"] - top_k_accuracy_score(labels, want, k=3, labels=range(10))) < 1e-12,
      "test_top_3_accuracy differs from scikit-learn's")

# --- evaluate: both named sets, and the same numbers as at the end of training -----------------
for name, n in (("small", 500), ("other", 300)):
    z, loss = reference(n)
    acc = accuracy_score(true_labels[:n], z.argmax(axis=1))
    check(again[f"eval_{name}_accuracy"] == acc, f"eval_{name}_accuracy {again[f'eval_{name}_accuracy']} vs {acc}")
    check(abs(again[f"eval_{name}_loss"] - loss) < 1e-6 * loss, f"eval_{name}_loss vs PyTorch")
    for key in ("accuracy", "loss", "top_3_accuracy"):
        k = f"eval_{name}_{key}"
        check(again[k] == train_eval[k], f"{k}: evaluate of the saved model {again[k]} != end of training {train_eval[k]}")
check(train_eval["eval_small_accuracy"] > 0.5, f"the model did not learn: accuracy {train_eval['eval_small_accuracy']}")

# --- trainer_state.json ---------------------------------------------------------------------------
hist = state["log_history"]
loss_steps = [e["step"] for e in hist if "loss" in e]
eval_steps = [e["step"] for e in hist if "eval_small_loss" in e]
check(loss_steps == list(range(8, 65, 8)), f"loss logged at {loss_steps}")
check(eval_steps == [32, 64], f"evaluations at {eval_steps}")
other_steps = [e["step"] for e in hist if "eval_other_loss" in e]
check(other_steps == [32, 64], f"evaluations of the second set at {other_steps}")
check(state["global_step"] == 64 and state["max_steps"] == 64 and state["epoch"] == 2.0,
      f"global_step {state['global_step']}, max_steps {state['max_steps']}, epoch {state['epoch']}")
check("train_loss" in hist[-1] and hist[-1]["step"] == 64, "the last entry is not the training summary")
first = hist[0]
check(set(first) == {"loss", "grad_norm", "learning_rate", "epoch", "step"} and first["epoch"] == 0.25,
      f"first entry {first}")
finish()
