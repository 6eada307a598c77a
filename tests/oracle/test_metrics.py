"""Metrics (eval/metric.h) against scikit-learn on fresh random data: accuracy against
accuracy_score of numpy's argmax, top-k accuracy against top_k_accuracy_score (ties broken its way:
the data includes integer scores with many ties), and the loss metric against the mean of the real
rows' losses. Every case goes through `test_metrics --compute` (the unit test's program) with a
random batch size, dealt round-robin to a random number of metric sets that are then merged, a
random mask whose padding rows carry labels no metric would accept, float32 or float64 outputs and
int64 or int32 labels. Counts make accuracies exact ratios, so they must match to the last bit.

scikit-learn treats two classes as a binary problem with 1-d scores, so for C <= 2 the reference is
its multiclass rule written out with numpy (stable argsort, reversed). Bad input must exit 1 with
the metric's message. The program sits beside ct_oracle in the build tree (override with
CT_TEST_METRICS)."""
import json
import os
import subprocess
import sys
import tempfile
import warnings

from common import RNG, check, finish, h5py, np

try:
    from sklearn.exceptions import UndefinedMetricWarning
    from sklearn.metrics import accuracy_score, top_k_accuracy_score
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

warnings.simplefilter("ignore", UndefinedMetricWarning)  # k >= C is tested on purpose
PROGRAM = os.environ.get("CT_TEST_METRICS") or os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])),
                                                            "test_metrics")


def compute(spec, outputs, labels, mask, losses):
    """Runs the C metrics; returns (exit code, parsed JSON or stderr text)."""
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "in.h5")
        with h5py.File(src, "w") as f:
            f.attrs["spec"] = json.dumps(spec)
            f.create_dataset("outputs", data=outputs)
            f.create_dataset("labels", data=labels)
            if mask is not None:
                f.create_dataset("mask", data=mask.astype(np.uint8))
            f.create_dataset("losses", data=losses.astype(np.float64))
        p = subprocess.run([PROGRAM, "--compute", src], capture_output=True, text=True)
        if p.returncode != 0:
            return p.returncode, p.stderr
        return 0, json.loads(p.stdout)


def top_k_numpy(y, scores, k):
    """scikit-learn's multiclass top-k rule, for the C <= 2 cases it does not treat as multiclass."""
    order = np.argsort(scores, axis=1, kind="mergesort")[:, ::-1][:, :k]
    return float(np.mean((order == y[:, None]).any(axis=1)))


def random_scores(n, c, kind):
    if kind == "ties":
        return RNG.integers(0, 3, size=(n, c)).astype(np.float64)
    return RNG.normal(0, 3, size=(n, c))


def key(prefix, name):
    return f"{prefix}_{name}" if prefix else name


def case(i):
    c = int(RNG.choice([1, 2, 3, 5, 10, int(RNG.integers(3, 40))]))
    n = int(RNG.integers(1, 600)) if i % 5 else int(RNG.integers(3000, 9000))
    kind = "ties" if i % 2 else "normal"
    dtype = "f64" if i % 3 == 0 else "f32"
    label_dtype = "i32" if i % 4 == 1 else "i64"
    ks = sorted({int(RNG.integers(1, c + 1)), int(RNG.integers(1, c + 1))})  # k <= C; above C is refused
    prefix = str(RNG.choice(["eval", "test", ""]))
    masked = i % 3 == 1

    scores = random_scores(n, c, kind)
    scores = scores.astype(np.float32) if dtype == "f32" else scores
    y = RNG.integers(0, c, size=n)
    mask = RNG.random(n) >= 0.3 if masked else np.ones(n, dtype=bool)
    if not mask.any():
        mask[0] = True
    y_c = np.where(mask, y, np.where(RNG.random(n) < 0.5, -1, c + 5))  # padding rows: labels out of range
    losses = RNG.random(n) * 5 + 0.01

    metrics = ["accuracy"] + [{"type": "top_k_accuracy", "k": k} if j % 2 else f"top_{k}_accuracy"
                              for j, k in enumerate(ks)]
    if RNG.random() < 0.5:
        metrics.insert(int(RNG.integers(0, len(metrics) + 1)), "loss")
    spec = {"metrics": metrics, "prefix": prefix, "dtype": dtype, "label_dtype": label_dtype,
            "batch_size": int(RNG.integers(1, n + 1)), "ranks": int(RNG.integers(1, 5))}
    rc, got = compute(spec, scores, y_c.astype(np.int32 if label_dtype == "i32" else np.int64),
                      mask if masked else None, losses)
    label = f"case {i} (n {n} C {c} {kind} {dtype} {label_dtype} k {ks} masked {masked} " \
            f"batch {spec['batch_size']} ranks {spec['ranks']})"
    if rc != 0:
        check(False, f"{label}: exit {rc}: {got}")
        return

    s64, yr = scores[mask].astype(np.float64), y[mask]
    want = {key(prefix, "loss"): None, key(prefix, "accuracy"): accuracy_score(yr, np.argmax(s64, axis=1))}
    for k in ks:
        if c >= 3:
            want[key(prefix, f"top_{k}_accuracy")] = top_k_accuracy_score(yr, s64, k=k, labels=np.arange(c))
        else:
            want[key(prefix, f"top_{k}_accuracy")] = top_k_numpy(yr, s64, k)
    check(set(got) == set(want), f"{label}: keys {sorted(got)}, expected {sorted(want)}")
    for name, value in want.items():
        if name == key(prefix, "loss"):
            ref = float(np.mean(losses[mask]))
            g = got.get(name)
            check(g is not None and abs(g - ref) <= 1e-12 * ref, f"{label}: {name} {g} vs {ref}")
        else:
            check(got.get(name) == float(value), f"{label}: {name} {got.get(name)!r} vs scikit-learn {value!r}")


def errors():
    scores = RNG.normal(size=(6, 4)).astype(np.float32)
    y = np.array([0, 1, 2, 3, 7, 1])
    rc, text = compute({"metrics": ["accuracy"], "batch_size": 4}, scores, y, None, np.ones(6))
    check(rc == 1 and "metric 'accuracy': label 7 at row 0 of the batch is outside [0, 4)" in text,
          f"bad label: exit {rc}: {text}")
    rc, text = compute({"metrics": ["acuracy"]}, scores, y, None, np.ones(6))
    check(rc == 1 and "metrics[0]: unknown metric 'acuracy', did you mean 'accuracy'?" in text,
          f"bad name: exit {rc}: {text}")
    mask = np.array([1, 1, 1, 1, 0, 1], dtype=bool)  # the bad label is padding: fine
    rc, got = compute({"metrics": ["accuracy"], "batch_size": 4}, scores, y, mask, np.ones(6))
    check(rc == 0 and isinstance(got, dict) and "eval_accuracy" in got, f"masked bad label: exit {rc}: {got}")


if not os.path.exists(PROGRAM):
    print(f"FAIL: {PROGRAM} not found (build the test_metrics target or set CT_TEST_METRICS)")
    sys.exit(1)
for i in range(40):
    case(i)
errors()
finish()
