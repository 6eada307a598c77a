"""Memory reports: the keys `ctrainer train` writes with skip_memory_metrics false are the ones
Hugging Face's TrainerMemoryTracker produces for the same sequence of calls.

HF's tracker (transformers 4.51, from the oracle venv) is driven by a stand-in Trainer whose methods
carry HF's names, which is how the tracker tells stages apart (it reads its caller's name): __init__,
then train with an evaluation nested in it (eval_strategy epoch), then evaluate and predict, as the
CLI and HF's example scripts do. The numbers depend on the process (a Python interpreter is not a C
program), so the oracle is the key set of each result: train_results.json, eval_results.json,
test_results.json, all_results.json and the logged train metrics (HF logs train's report, while an
evaluation's joins its metrics after they were logged). tests/unit/test_memory.c checks the values.
Skips (77) when transformers or psutil is missing."""
import json
import os
import subprocess
import sys
import tempfile

from common import check, CTRAINER, finish, require_fashion_mnist, RNG, TINY_CONFIG

try:
    from transformers.trainer_utils import TrainerMemoryTracker
    import psutil  # noqa: F401  (HF's tracker silently skips without it)
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

DATA = require_fashion_mnist()

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = TINY_CONFIG
SEED = int(RNG.integers(0, 2**31))


def memory_keys(metrics):
    return sorted(k for k in metrics if "_mem_" in k or k.startswith("before_init_mem"))


class Trainer:
    """HF's calls of the tracker in Trainer.__init__, train (_inner_training_loop), evaluate, predict."""

    def __init__(self):
        self.log_history = []
        self._memory_tracker = TrainerMemoryTracker(skip_memory_metrics=False)
        self._memory_tracker.start()
        self._memory_tracker.stop_and_update_metrics()

    def log(self, metrics):
        self.log_history.append(dict(metrics))

    def train(self):
        self._memory_tracker.start()
        for _ in range(2):  # eval_strategy epoch, two epochs
            self.evaluate()
        metrics = {"train_runtime": 0.1, "train_loss": 1.0}
        self._memory_tracker.stop_and_update_metrics(metrics)
        self.log(metrics)
        return metrics

    def evaluate(self):
        self._memory_tracker.start()
        metrics = {"eval_loss": 1.0}
        self.log(metrics)
        self._memory_tracker.stop_and_update_metrics(metrics)
        return metrics

    def predict(self):
        self._memory_tracker.start()
        metrics = {"test_loss": 1.0}
        self._memory_tracker.stop_and_update_metrics(metrics)
        return metrics


hf = Trainer()
hf_train = hf.train()
hf_logs = list(hf.log_history)  # trainer_state.json is saved here (HF's scripts and ctrainer's CLI)
hf_eval = hf.evaluate()
hf_test = hf.predict()
hf_all = {**hf_train, **hf_eval, **hf_test}
check(len(memory_keys(hf_train)) > 0, f"HF's tracker reported nothing: {hf_train}")


def ctrainer(*args):
    p = subprocess.run([CTRAINER, *args], capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "2"})
    if p.returncode != 0:
        check(False, f"ctrainer {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()}")
        finish()
    return p.stdout


def results(d, name):
    return json.load(open(os.path.join(d, f"{name}_results.json")))


small = ["--set", "data.train.limit=512", "--set", "data.eval.small.limit=100", "--set", "data.eval.other.limit=60",
         "--set", "data.test.limit=90", "--save_strategy", "no", "--seed", str(SEED)]
with tempfile.TemporaryDirectory() as d:
    on, off = os.path.join(d, "on"), os.path.join(d, "off")
    printed = ctrainer("train", CONFIG, "--output_dir", on, "--skip_memory_metrics", "false", *small)
    ctrainer("train", CONFIG, "--output_dir", off, *small)  # the default: skip_memory_metrics true
    got = {name: results(on, name) for name in ("train", "eval", "test", "all")}
    got_off = {name: results(off, name) for name in ("train", "eval", "test", "all")}
    logs = json.load(open(os.path.join(on, "trainer_state.json")))["log_history"]
    logs_off = json.load(open(os.path.join(off, "trainer_state.json")))["log_history"]

for name, ref in (("train", hf_train), ("eval", hf_eval), ("test", hf_test), ("all", hf_all)):
    check(memory_keys(got[name]) == memory_keys(ref),
          f"{name}_results.json: memory keys {memory_keys(got[name])}, HF's {memory_keys(ref)}")
    check(memory_keys(got_off[name]) == [], f"skip_memory_metrics true: {name}_results.json has "
          f"{memory_keys(got_off[name])}")
    for k in memory_keys(got[name]):
        check(isinstance(got[name][k], int), f"{name}_results.json: {k} = {got[name][k]!r} is not an integer (bytes)")
# log_history: HF logs train's report (with init's); evaluations are logged before theirs is added
ct_train_logs = [memory_keys(e) for e in logs if "train_loss" in e]
hf_train_logs = [memory_keys(e) for e in hf_logs if "train_loss" in e]
check(ct_train_logs == hf_train_logs, f"logged train metrics: {ct_train_logs}, HF's {hf_train_logs}")
# the two evaluations during training (one per epoch): no memory keys, as HF's
ct_evals = [memory_keys(e) for e in logs if "eval_small_loss" in e]
hf_evals = [memory_keys(e) for e in hf_logs if "eval_loss" in e]
check(ct_evals == hf_evals == [[], []], f"logged evaluations' memory keys: {ct_evals}, HF's {hf_evals}")
check(all(memory_keys(e) == [] for e in logs_off), "skip_memory_metrics true: memory keys in the log")
check("train_mem_cpu_alloc_delta" in printed, "the printed train metrics lack train_mem_cpu_alloc_delta")
finish()
