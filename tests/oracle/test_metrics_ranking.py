"""Ranking metrics (eval/metrics_ranking.c) against scikit-learn on fresh random data: "auroc"
against roc_auc_score and "average_precision" against average_precision_score, binary (scores [N],
[N, 1], or two logits [N, 2] whose score is logit1 - logit0) and multiclass one-vs-rest (macro and
weighted, roc_auc_score(multi_class="ovr") on the softmax probabilities, average_precision_score on
label_binarize'd labels), on continuous scores and on heavily tied integer scores. Every case goes
through `test_metrics_ranking --compute` (the unit test's program) with a random batch size, dealt
round-robin to a random number of states that are then merged, a random mask whose padding rows
carry labels no metric would accept, float32 or float64 outputs and int64 or int32 labels.

The multiclass reference probabilities are computed the way ctrainer does (max-shifted math.exp,
which is the C library's exp, summed in class order), so both sides rank exactly the same float64
numbers and tied probabilities stay tied on both; on continuous data scipy's softmax must give the
same values too. Where scikit-learn raises ValueError (AUROC with one class present) ctrainer
writes null; where it warns "No positive class found in y_true" and returns AP 0, ctrainer writes
null for the binary and the macro value (the weighted mean gives such a class weight 0 on both).

The bootstrap is checked against a bootstrap written here (numpy indices, scikit-learn on each
resample): the standard errors and interval ends agree within Monte Carlo noise, and a seed gives
the same interval twice. The program sits beside ct_oracle in the build tree (override with
CT_TEST_METRICS_RANKING)."""
import json
import math
import os
import subprocess
import sys
import tempfile
import warnings

from common import RNG, check, finish, h5py, np

try:
    from scipy.special import softmax
    from sklearn.exceptions import UndefinedMetricWarning
    from sklearn.metrics import average_precision_score, roc_auc_score
    from sklearn.preprocessing import label_binarize
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

warnings.simplefilter("ignore", UndefinedMetricWarning)
warnings.simplefilter("ignore", UserWarning)  # "No positive class found in y_true": tested on purpose
PROGRAM = os.environ.get("CT_TEST_METRICS_RANKING") or os.path.join(
    os.path.dirname(os.path.abspath(sys.argv[1])), "test_metrics_ranking")
SPECS = [("auroc", "auroc"), ({"type": "auroc", "average": "weighted"}, "auroc_weighted"),
         ("average_precision", "average_precision"),
         ({"type": "average_precision", "average": "weighted"}, "average_precision_weighted")]


def compute(spec, outputs, labels, mask):
    """Runs the C metrics; returns (exit code, parsed JSON or stderr text)."""
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "in.h5")
        with h5py.File(src, "w") as f:
            f.attrs["spec"] = json.dumps(spec)
            f.create_dataset("outputs", data=outputs)
            f.create_dataset("labels", data=labels)
            if mask is not None:
                f.create_dataset("mask", data=mask.astype(np.uint8))
        p = subprocess.run([PROGRAM, "--compute", src], capture_output=True, text=True)
        if p.returncode != 0:
            return p.returncode, p.stderr
        return 0, json.loads(p.stdout)


def c_softmax(logits):
    """ctrainer's float64 softmax, operation for operation: exp(l - max) with the C library's exp,
    summed in class order, then divided."""
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.vectorize(math.exp, otypes=[np.float64])(z) if z.size else z
    s = e[:, 0].copy()
    for j in range(1, e.shape[1]):
        s = s + e[:, j]
    return e / s[:, None]


def reference(outputs, y, name):
    """scikit-learn's value for the metric key `name` (None where ctrainer writes null)."""
    o = outputs.astype(np.float64)
    weighted = name.endswith("_weighted")
    auroc = name.startswith("auroc")
    if o.ndim == 1 or o.shape[1] <= 2:
        s = o if o.ndim == 1 else o[:, 0] if o.shape[1] == 1 else o[:, 1] - o[:, 0]
        if auroc:
            if len(np.unique(y)) < 2:
                try:
                    roc_auc_score(y, s)
                    check(False, "scikit-learn gave an AUROC for one class; the null rule needs a look")
                except ValueError:
                    pass
                return None
            return roc_auc_score(y, s)
        if not (y == 1).any():
            return None  # scikit-learn: 0 and a warning
        return average_precision_score(y, s)
    c = o.shape[1]
    p = c_softmax(o)
    average = "weighted" if weighted else "macro"
    if auroc:
        try:
            return roc_auc_score(y, p, multi_class="ovr", average=average, labels=np.arange(c))
        except ValueError:
            return None
    if not weighted and len(np.unique(y)) < c:
        return None  # scikit-learn averages in the 0 placeholder of the absent class
    return average_precision_score(label_binarize(y, classes=np.arange(c)), p, average=average)


def random_outputs(n, width, kind):
    shape = (n,) if width == 0 else (n, width)
    if kind == "ties":
        return RNG.integers(0, 4, size=shape).astype(np.float64)
    if kind == "heavy_ties":
        return RNG.integers(0, 2, size=shape).astype(np.float64)
    return RNG.normal(0, 2, size=shape)


def key(prefix, name):
    return f"{prefix}_{name}" if prefix else name


def run_case(label, outputs, y, mask, spec_extra=None, dtype="f64", label_dtype="i64"):
    n = len(y)
    k = 2 if outputs.ndim == 1 or outputs.shape[1] <= 2 else outputs.shape[1]
    y_c = y if mask is None else np.where(mask, y, np.where(RNG.random(n) < 0.5, -1, k + 5))
    order = RNG.permutation(len(SPECS))
    prefix = str(RNG.choice(["eval", "test", ""]))
    spec = {"metrics": [SPECS[i][0] for i in order], "prefix": prefix, "dtype": dtype, "label_dtype": label_dtype,
            "batch_size": int(RNG.integers(1, max(n, 1) + 1)), "ranks": int(RNG.integers(1, 5))}
    spec.update(spec_extra or {})
    prefix = spec["prefix"]
    outputs = outputs.astype(np.float32) if dtype == "f32" else outputs
    rc, got = compute(spec, outputs, y_c.astype(np.int32 if label_dtype == "i32" else np.int64), mask)
    label = f"{label} (batch {spec['batch_size']} ranks {spec['ranks']})"
    if rc != 0:
        check(False, f"{label}: exit {rc}: {got}")
        return None, None
    real = np.ones(n, dtype=bool) if mask is None else mask
    o, yr = outputs[real], y[real]
    want = {}
    if real.any():
        for _, name in SPECS:
            want[key(prefix, name)] = reference(o, yr, name)
    value_keys = {k_ for k_ in got if not k_.endswith(("_stderr", "_ci_low", "_ci_high"))}
    check(value_keys == set(want), f"{label}: keys {sorted(value_keys)}, expected {sorted(want)}")
    for name, ref in want.items():
        g = got.get(name)
        if ref is None:
            check(g is None and name in got, f"{label}: {name} {g!r}, expected null")
        else:
            check(g is not None and abs(g - ref) <= 1e-12 * max(1.0, abs(ref)),
                  f"{label}: {name} {g!r} vs scikit-learn {ref!r}")
    return got, prefix


def case(i):
    width = int(RNG.choice([0, 1, 2, 2, 3, 4, 5, 10, int(RNG.integers(3, 30))]))
    n = int(RNG.integers(1, 400)) if i % 5 else int(RNG.integers(2000, 6000))
    kind = ["normal", "ties", "heavy_ties"][i % 3]
    dtype = "f64" if i % 4 == 0 else "f32"
    label_dtype = "i32" if i % 4 == 1 else "i64"
    masked = i % 3 == 1
    k = 2 if width <= 2 else width
    outputs = random_outputs(n, width, kind)
    y = RNG.integers(0, k, size=n)
    if i % 7 == 3:  # unbalanced: a rare class, sometimes absent
        y = np.where(RNG.random(n) < 0.9, 0, y)
    mask = RNG.random(n) >= 0.3 if masked else None
    if mask is not None and not mask.any():
        mask[0] = True
    run_case(f"case {i} (n {n} width {width} {kind} {dtype} {label_dtype} masked {masked})", outputs, y, mask,
             dtype=dtype, label_dtype=label_dtype)
    if kind == "normal" and width >= 3 and n >= 2:
        # scipy's softmax (numpy's exp, pairwise sums) differs from ctrainer's in the last bits only,
        # which cannot reorder continuous scores: the same AUROC
        o = outputs.astype(np.float32).astype(np.float64) if dtype == "f32" else outputs
        real = np.ones(n, dtype=bool) if mask is None else mask
        p = softmax(o[real], axis=1)
        try:
            natural = roc_auc_score(y[real], p, multi_class="ovr", labels=np.arange(width))
            exact = reference(o[real], y[real], "auroc")
            check(abs(natural - exact) <= 1e-12, f"case {i}: scipy softmax AUROC {natural} vs {exact}")
        except ValueError:
            pass


def edge_cases():
    s = np.array([0.1, 0.4, 0.35, 0.8])
    for label, y in [("all correct", np.array([0, 0, 0, 1])), ("all wrong", np.array([1, 1, 1, 0])),
                     ("one class", np.array([1, 1, 1, 1])), ("no positives", np.array([0, 0, 0, 0]))]:
        run_case(f"binary {label}", s, y, None)
    run_case("single sample", np.array([0.3]), np.array([1]), None)
    run_case("all scores equal", np.full(9, 2.5), RNG.integers(0, 2, 9), None)
    logits = RNG.normal(size=(12, 4))
    run_case("class 3 never present", logits, RNG.integers(0, 3, 12), None)
    y = np.arange(12) % 4
    right = np.eye(4)[y] * 5.0
    got, prefix = run_case("multiclass all correct", right, y, None)
    check(got is not None and got.get(key(prefix, "auroc")) == 1.0 and got.get(key(prefix, "average_precision")) == 1.0,
          f"all correct: {got}")
    run_case("multiclass all wrong", np.eye(4)[(y + 1) % 4] * 5.0, y, None)
    run_case("multiclass all tied", np.zeros((10, 3)), np.arange(10) % 3, None)
    run_case("two-logit heavy ties", RNG.integers(0, 2, size=(300, 2)).astype(np.float64), RNG.integers(0, 2, 300),
             None)


def bootstrap_case(label, outputs, y, resamples=2000, python_resamples=400):
    seed = int(RNG.integers(0, 2**31))
    extra = {"uncertainty": {"resamples": resamples, "confidence": 0.95, "seed": seed}, "prefix": "eval"}
    got, _ = run_case(label, outputs, y, None, spec_extra=extra)
    again, _ = run_case(label, outputs, y, None, spec_extra=extra)
    check(got is not None and got == again, f"{label}: the same seed gave another result")
    extra["uncertainty"]["seed"] = seed + 1
    other, _ = run_case(label, outputs, y, None, spec_extra=extra)
    check(got is not None and other is not None and other != got, f"{label}: another seed gave the same result")
    if got is None:
        return
    n = len(y)
    for _, name in SPECS:
        vals = []
        for _ in range(python_resamples):
            idx = RNG.integers(0, n, n)
            v = reference(outputs[idx], y[idx], name)
            if v is not None:
                vals.append(v)
        vals = np.array(vals)
        se = vals.std(ddof=1)
        lo, hi = np.quantile(vals, [0.025, 0.975])
        k = f"eval_{name}"
        g_se, g_lo, g_hi = got.get(k + "_stderr"), got.get(k + "_ci_low"), got.get(k + "_ci_high")
        check(None not in (g_se, g_lo, g_hi), f"{label}: {k}: missing uncertainty {got}")
        if None in (g_se, g_lo, g_hi):
            continue
        # Monte Carlo noise: stderr estimates ~4% apart (1 sd), interval ends ~0.15 se apart
        check(abs(g_se / se - 1) < 0.25, f"{label}: {k}_stderr {g_se:.5f} vs scikit-learn bootstrap {se:.5f}")
        check(abs(g_lo - lo) < 0.75 * se and abs(g_hi - hi) < 0.75 * se,
              f"{label}: {k} interval [{g_lo:.5f}, {g_hi:.5f}] vs [{lo:.5f}, {hi:.5f}] (se {se:.5f})")
        check(g_lo <= got[k] <= g_hi, f"{label}: {k} = {got[k]} outside its interval [{g_lo}, {g_hi}]")


def bootstrap_cases():
    n = 500
    y = RNG.integers(0, 2, n)
    s = RNG.normal(size=(n, 2))
    s[:, 1] += 1.2 * y
    bootstrap_case("bootstrap binary", s, y)
    c = 4
    y = RNG.integers(0, c, n)
    logits = RNG.integers(0, 3, size=(n, c)).astype(np.float64)  # ties
    logits[np.arange(n), y] += 1.0
    bootstrap_case("bootstrap multiclass", logits, y, python_resamples=250)


def errors():
    scores = RNG.normal(size=(6, 2))
    y = np.array([0, 1, 1, 0, 2, 1])
    rc, text = compute({"metrics": ["auroc"], "batch_size": 4}, scores, y, None)
    check(rc == 1 and "metric 'auroc': label 2 at row 0 of the batch; binary scores" in text,
          f"bad label: exit {rc}: {text}")
    rc, text = compute({"metrics": ["aurco"]}, scores, y, None)
    check(rc == 1 and "metrics[0]: unknown metric 'aurco', did you mean 'auroc'?" in text,
          f"bad name: exit {rc}: {text}")
    mask = np.array([1, 1, 1, 1, 0, 1], dtype=bool)  # the bad label is padding: fine
    rc, got = compute({"metrics": ["auroc"], "batch_size": 4}, scores, y, mask)
    check(rc == 0 and isinstance(got, dict) and "eval_auroc" in got, f"masked bad label: exit {rc}: {got}")


if not os.path.exists(PROGRAM):
    print(f"FAIL: {PROGRAM} not found (build the test_metrics_ranking target or set CT_TEST_METRICS_RANKING)")
    sys.exit(1)
for i in range(45):
    case(i)
edge_cases()
bootstrap_cases()
errors()
finish()
