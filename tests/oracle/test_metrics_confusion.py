"""Confusion-matrix metrics (eval/metrics_confusion.c) and their uncertainty against scikit-learn
and numpy, through `test_metrics_confusion --compute` (the unit test's program).

Values: confusion_matrix, precision_recall_fscore_support for every average (micro, macro and
weighted with labels=None, per class with labels=range(C)), matthews_corrcoef and
balanced_accuracy_score, all with zero_division=0, on fresh random data: random scores or scores
built to hit chosen predictions, classes left out of the labels or of the predictions, all correct,
all wrong, a single sample, C = 1, masks whose padding rows carry labels no metric would accept,
float32/float64 outputs, random batch sizes dealt round-robin to a random number of merged metric
sets. Counts must match exactly; ratios to 1e-12 (scikit-learn's F1 is 2PR/(P+R) and its means are
numpy's pairwise sums: a few ulps apart).

Uncertainty:
- keys: every metric but the confusion matrix gets _stderr/_ci_low/_ci_high (lists for per_class),
  none at all with resamples = 0; the reported stderr and interval are numpy's std(ddof=1) and
  percentile (linear rule) of the bootstrap values the program dumps.
- the distribution (required by the issue): resampling the confusion-matrix cells (one multinomial
  per resample) must give the same distribution of macro-F1 and MCC as resampling the samples one by
  one with numpy (indices with replacement). With R resamples on each side (fixed bootstrap seeds):
  means within 5 Monte-Carlo standard errors (sd sqrt(2/R)), standard deviations within 5 times
  their relative error sqrt(1/R) (each side ~ sqrt(1/(2R))), and the two-sample Kolmogorov-Smirnov
  statistic below its critical value at level 1e-6, sqrt(-ln(1e-6/2)/2) sqrt(2/R) (~0.027 for
  R = 20000): a real difference in the law (a wrong cell probability, a resample of the wrong size,
  a biased binomial) moves D far beyond that (the unit test's mutation runs show it), while two
  draws of the same law exceed it with probability 1e-6.
- closed forms: accuracy's stderr sqrt(p(1-p)/n) and Wilson endpoints (checked by the score
  equation |p - p0| = z sqrt(p0(1-p0)/n)); the loss's delta-method stderr from per-row losses
  against its direct formula and against a numpy bootstrap over rows (within 6%: Monte-Carlo error
  1.6% at R = 4000, delta-method vs bootstrap O(1/n))."""
import json
import os
import subprocess
import sys
import tempfile
import warnings

from common import RNG, check, finish, h5py, np

try:
    from sklearn.metrics import (balanced_accuracy_score, confusion_matrix, matthews_corrcoef,
                                 precision_recall_fscore_support)
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

warnings.simplefilter("ignore")  # scikit-learn warns about classes missing on one side: tested on purpose
PROGRAM = os.environ.get("CT_TEST_METRICS_CONFUSION") or os.path.join(
    os.path.dirname(os.path.abspath(sys.argv[1])), "test_metrics_confusion")
Z = {0.9: 1.6448536269514722, 0.95: 1.959963984540054}


def compute(spec, outputs, labels, mask=None, sample_loss=None, sample_weight=None):
    """Runs the C metrics; returns (exit code, parsed JSON or stderr text)."""
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "in.h5")
        with h5py.File(src, "w") as f:
            f.attrs["spec"] = json.dumps(spec)
            f.create_dataset("outputs", data=outputs)
            f.create_dataset("labels", data=labels.astype(np.int64))
            if mask is not None:
                f.create_dataset("mask", data=mask.astype(np.uint8))
            if sample_loss is not None:
                f.create_dataset("sample_loss", data=sample_loss.astype(np.float64))
                f.create_dataset("sample_weight", data=sample_weight.astype(np.float64))
        p = subprocess.run([PROGRAM, "--compute", src], capture_output=True, text=True)
        if p.returncode != 0:
            return p.returncode, p.stderr
        return 0, json.loads(p.stdout)


def key(prefix, name):
    return f"{prefix}_{name}" if prefix else name


def close(a, b, tol=1e-12):
    if a is None or b is None:
        return False
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.all(np.abs(a - b) <= tol * np.maximum(1.0, np.abs(b))))


def scores_for(pred, c, dtype):
    """Scores whose argmax is pred (the winner is clearly above the rest)."""
    s = RNG.uniform(-1, 1, size=(len(pred), c))
    s[np.arange(len(pred)), pred] = 2 + RNG.random(len(pred))
    return s.astype(dtype)


AVERAGES = ["micro", "macro", "weighted", "per_class"]


def random_specs():
    """Every confusion metric once, in a random order and random spellings; returns (specs, names)."""
    items = [("confusion_matrix", "confusion_matrix"), ("mcc", "mcc"),
             ({"type": "balanced_accuracy"} if RNG.random() < 0.5 else "balanced_accuracy", "balanced_accuracy")]
    for kind in ["precision", "recall", "f1"]:
        for avg in AVERAGES:
            r = RNG.random()
            if avg == "macro" and r < 0.3:
                spec = kind if r < 0.15 else {"type": kind}
            elif r < 0.6:
                spec = {"type": kind, "average": avg}
            else:
                spec = f"{kind}_{avg}"
            items.append((spec, f"{kind}_{avg}"))
    order = RNG.permutation(len(items))
    return [items[i][0] for i in order], [items[i][1] for i in order]


def references(y, p, c):
    want = {"confusion_matrix": confusion_matrix(y, p, labels=np.arange(c)),
            "mcc": matthews_corrcoef(y, p), "balanced_accuracy": balanced_accuracy_score(y, p)}
    for avg in ["micro", "macro", "weighted"]:
        pr, rc, f1, _ = precision_recall_fscore_support(y, p, average=avg, zero_division=0)
        want[f"precision_{avg}"], want[f"recall_{avg}"], want[f"f1_{avg}"] = pr, rc, f1
    pr, rc, f1, _ = precision_recall_fscore_support(y, p, labels=np.arange(c), average=None, zero_division=0)
    want["precision_per_class"], want["recall_per_class"], want["f1_per_class"] = pr, rc, f1
    return want


def make_case(i):
    """Labels, predictions and scores for case i; returns (kind, c, y, scores, dtype)."""
    kinds = ["random", "never_predicted", "never_present", "all_correct", "all_wrong", "single", "one_class",
             "designed"]
    kind = kinds[i % len(kinds)]
    c = int(RNG.choice([2, 3, 5, 10, int(RNG.integers(3, 30))]))
    n = int(RNG.integers(1, 600)) if i % 7 else int(RNG.integers(3000, 9000))
    dtype = np.float64 if i % 3 == 0 else np.float32
    if kind == "single":
        n = 1
    if kind == "one_class":
        c = 1
    y = RNG.integers(0, c, size=n)
    if kind == "random":
        return kind, c, y, RNG.normal(0, 3, size=(n, c)).astype(dtype), dtype
    if kind == "never_present":  # some classes never in the labels (but predicted)
        keep = max(1, c // 2)
        y = RNG.integers(0, keep, size=n)
        pred = RNG.integers(0, c, size=n)
    elif kind == "never_predicted":
        keep = max(1, c // 2)
        pred = np.where(RNG.random(n) < 0.5, np.minimum(y, keep - 1), RNG.integers(0, keep, size=n))
    elif kind == "all_correct":
        pred = y.copy()
    elif kind == "all_wrong":
        pred = (y + RNG.integers(1, c, size=n)) % c if c > 1 else y.copy()
    else:
        pred = np.where(RNG.random(n) < RNG.random(), y, RNG.integers(0, c, size=n))
    return kind, c, y, scores_for(pred, c, dtype), dtype


def case(i):
    kind, c, y, scores, dtype = make_case(i)
    n = len(y)
    prefix = str(RNG.choice(["eval", "test", ""]))
    masked = i % 3 == 1 and n > 1
    mask = RNG.random(n) >= 0.3 if masked else np.ones(n, dtype=bool)
    if not mask.any():
        mask[0] = True
    y_c = np.where(mask, y, np.where(RNG.random(n) < 0.5, -1, c + 5))
    specs, names = random_specs()
    resamples = int(RNG.choice([0, 50, 200]))
    spec = {"metrics": specs, "prefix": prefix, "dtype": "f64" if dtype == np.float64 else "f32",
            "batch_size": int(RNG.integers(1, n + 1)), "ranks": int(RNG.integers(1, 5)),
            "uncertainty": {"resamples": resamples, "confidence": 0.95, "seed": int(RNG.integers(0, 2**62))},
            "dump_bootstrap": resamples > 0}
    rc, got = compute(spec, scores, y_c, mask if masked else None)
    label = f"case {i} ({kind} n {n} C {c} masked {masked} batch {spec['batch_size']} ranks {spec['ranks']} " \
            f"resamples {resamples})"
    if rc != 0:
        check(False, f"{label}: exit {rc}: {got}")
        return
    yr, pr = y[mask], np.argmax(scores[mask].astype(np.float64), axis=1)
    want = references(yr, pr, c)
    boot = got.pop("__bootstrap__", {})
    expected_keys = {key(prefix, nm) for nm in names}
    if resamples > 0:
        for nm in names:
            if nm != "confusion_matrix":
                expected_keys |= {key(prefix, f"{nm}_{s}") for s in ["stderr", "ci_low", "ci_high"]}
    check(set(got) == expected_keys, f"{label}: keys {sorted(set(got) ^ expected_keys)} differ")
    for nm in names:
        g = got.get(key(prefix, nm))
        if nm == "confusion_matrix":
            check(g == want[nm].tolist(), f"{label}: confusion matrix {g} vs {want[nm].tolist()}")
        else:
            check(close(g, want[nm]), f"{label}: {nm} {g} vs scikit-learn {want[nm]}")
        if resamples == 0 or nm == "confusion_matrix":
            continue
        # the summaries are numpy's std(ddof=1) and linear percentiles of the dumped values
        v = np.asarray(boot.get(nm, []), dtype=np.float64)
        per = nm.endswith("per_class")
        if v.size != resamples * (c if per else 1):
            check(False, f"{label}: {nm}: {v.size} bootstrap values")
            continue
        v = v.reshape((c if per else 1), resamples)
        se = np.std(v, axis=1, ddof=1) if resamples > 1 else np.full(v.shape[0], np.nan)
        lo, hi = np.percentile(v, [2.5, 97.5], axis=1)
        for suffix, ref in [("stderr", se), ("ci_low", lo), ("ci_high", hi)]:
            g = got.get(key(prefix, f"{nm}_{suffix}"))
            g = np.asarray(g if per else [g], dtype=np.float64)
            check(close(g, ref, 1e-10), f"{label}: {nm}_{suffix} {g} vs numpy {ref}")


# --- the bootstrap's distribution ---------------------------------------------------------------

def macro_f1_mcc(cms):
    """Macro F1 (classes seen in labels or predictions) and MCC of a stack of confusion matrices."""
    tp = np.einsum("rkk->rk", cms).astype(np.float64)
    t, p = cms.sum(axis=2).astype(np.float64), cms.sum(axis=1).astype(np.float64)
    den = t + p
    f1 = np.divide(2 * tp, den, out=np.zeros_like(tp), where=den > 0)
    present = den > 0
    macro = f1.sum(axis=1) / present.sum(axis=1)
    s = t.sum(axis=1)
    cov_tp = tp.sum(axis=1) * s - (t * p).sum(axis=1)
    cov_pp = s * s - (p * p).sum(axis=1)
    cov_tt = s * s - (t * t).sum(axis=1)
    den2 = np.sqrt(cov_tt * cov_pp)
    mcc = np.divide(cov_tp, den2, out=np.zeros_like(cov_tp), where=den2 > 0)
    return macro, mcc


def numpy_bootstrap(y, p, c, resamples, seed):
    """Resampling the samples one by one: n indices with replacement per resample."""
    rng = np.random.default_rng(seed)
    n, out_f1, out_mcc = len(y), [], []
    cell = y * c + p
    for start in range(0, resamples, 500):
        r = min(500, resamples - start)
        idx = rng.integers(0, n, size=(r, n))
        flat = (np.arange(r)[:, None] * (c * c) + cell[idx]).ravel()
        cms = np.bincount(flat, minlength=r * c * c).reshape(r, c, c)
        f1, mcc = macro_f1_mcc(cms)
        out_f1.append(f1)
        out_mcc.append(mcc)
    return np.concatenate(out_f1), np.concatenate(out_mcc)


def ks_statistic(a, b):
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    return float(np.max(np.abs(np.searchsorted(a, grid, side="right") / len(a) -
                               np.searchsorted(b, grid, side="right") / len(b))))


def distribution(trial):
    c = int(RNG.choice([3, 5, 10]))
    n = int(RNG.choice([300, 2000, 10000]))
    y = RNG.integers(0, c, size=n)
    pred = np.where(RNG.random(n) < 0.6, y, RNG.integers(0, c, size=n))
    if trial == 1:  # an unbalanced problem with a rare class
        y = np.minimum(RNG.geometric(0.45, size=n) - 1, c - 1)
        pred = np.where(RNG.random(n) < 0.7, y, RNG.integers(0, c, size=n))
    R = 20000
    spec = {"metrics": ["f1_macro", "mcc"], "batch_size": 997, "ranks": 2, "dtype": "f64",
            "uncertainty": {"resamples": R, "confidence": 0.95, "seed": 20240611 + trial}, "dump_bootstrap": True}
    rc, got = compute(spec, scores_for(pred, c, np.float64), y)
    label = f"distribution {trial} (n {n} C {c})"
    if rc != 0:
        check(False, f"{label}: exit {rc}: {got}")
        return
    cells = {"f1_macro": np.asarray(got["__bootstrap__"]["f1_macro"]), "mcc": np.asarray(got["__bootstrap__"]["mcc"])}
    samples = dict(zip(["f1_macro", "mcc"], numpy_bootstrap(y, pred, c, R, 777 + trial)))
    crit = np.sqrt(-np.log(1e-6 / 2) / 2) * np.sqrt(2 / R)
    for nm in ["f1_macro", "mcc"]:
        a, b = cells[nm], samples[nm]
        sa, sb = np.std(a, ddof=1), np.std(b, ddof=1)
        check(abs(a.mean() - b.mean()) < 5 * np.sqrt(2 / R) * sb,
              f"{label}: {nm} bootstrap means {a.mean():.6f} (cells) vs {b.mean():.6f} (samples)")
        check(abs(sa / sb - 1) < 5 / np.sqrt(R), f"{label}: {nm} bootstrap stds {sa:.6f} (cells) vs {sb:.6f} (samples)")
        d = ks_statistic(a, b)
        check(d < crit, f"{label}: {nm} two-sample KS {d:.4f} >= {crit:.4f}")
        # the reported interval against the samples' percentile interval: a 2.5% quantile of R
        # draws has standard error about 2.7 sd / sqrt(R) (near-normal law), the difference of two
        # such estimates 3.8 sd / sqrt(R); 20 sd / sqrt(R) is over 5 of those
        lo, hi = np.percentile(b, [2.5, 97.5])
        check(abs(got[f"eval_{nm}_ci_low"] - lo) < 20 * sb / np.sqrt(R) and
              abs(got[f"eval_{nm}_ci_high"] - hi) < 20 * sb / np.sqrt(R),
              f"{label}: {nm} interval [{got[f'eval_{nm}_ci_low']:.5f}, {got[f'eval_{nm}_ci_high']:.5f}] vs numpy's "
              f"[{lo:.5f}, {hi:.5f}]")


# --- closed forms ---------------------------------------------------------------------------------

def closed_forms(trial):
    n, c = int(RNG.integers(500, 5000)), int(RNG.integers(2, 8))
    y = RNG.integers(0, c, size=n)
    pred = np.where(RNG.random(n) < RNG.random(), y, RNG.integers(0, c, size=n))
    w = RNG.integers(0, 20, size=n).astype(np.float64)  # tokens per row, some rows with none
    per_token = RNG.gamma(2.0, 1.0, size=n) + 0.3 * (y == pred)
    s = w * per_token  # the row's loss sum
    conf = 0.9 if trial % 2 else 0.95
    spec = {"metrics": ["accuracy", "loss"], "batch_size": int(RNG.integers(1, 300)), "ranks": int(RNG.integers(1, 4)),
            "dtype": "f32", "uncertainty": {"resamples": 0, "confidence": conf, "seed": 0}}
    rc, got = compute(spec, scores_for(pred, c, np.float32), y, None, s, w)
    label = f"closed forms {trial} (n {n})"
    if rc != 0:
        check(False, f"{label}: exit {rc}: {got}")
        return
    z = Z[conf]
    p = float(np.mean(y == pred))
    check(close(got["eval_accuracy_stderr"], np.sqrt(p * (1 - p) / n), 1e-13), f"{label}: accuracy stderr")
    for end in ["ci_low", "ci_high"]:
        p0 = got[f"eval_accuracy_{end}"]
        check(close(abs(p - p0), z * np.sqrt(p0 * (1 - p0) / n), 1e-9), f"{label}: Wilson {end} {p0} off the score equation")
    L = s.sum() / w.sum()
    se = np.sqrt(n / (n - 1) * np.sum((s - L * w) ** 2)) / w.sum()
    check(close(got["eval_loss"], L, 1e-12), f"{label}: loss {got['eval_loss']} vs {L}")
    check(close(got["eval_loss_stderr"], se, 1e-9), f"{label}: loss stderr {got['eval_loss_stderr']} vs {se}")
    check(close(got["eval_loss_ci_high"] - got["eval_loss"], z * se, 1e-8), f"{label}: loss interval")
    rng = np.random.default_rng(99 + trial)
    R = 4000
    boot = np.empty(R)
    for r in range(R):
        idx = rng.integers(0, n, size=n)
        boot[r] = s[idx].sum() / w[idx].sum()
    sb = np.std(boot, ddof=1)
    check(abs(se / sb - 1) < 0.06, f"{label}: loss delta-method stderr {se:.6g} vs row bootstrap {sb:.6g}")


def errors():
    scores = RNG.normal(size=(6, 4)).astype(np.float32)
    y = np.array([0, 1, 2, 3, 1, 1])
    rc, text = compute({"metrics": [{"type": "f1", "average": "samples"}]}, scores, y)
    check(rc == 1 and "metrics[0].average: unknown average 'samples'" in text, f"bad average: exit {rc}: {text}")
    rc, text = compute({"metrics": ["f1_macr"]}, scores, y)
    check(rc == 1 and "metrics[0]: unknown metric 'f1_macr'" in text, f"bad name: exit {rc}: {text}")
    y_bad = np.array([0, 1, 2, 4, 1, 1])
    rc, text = compute({"metrics": ["mcc"], "batch_size": 4}, scores, y_bad)
    check(rc == 1 and "metric 'mcc': label 4 at row 3 of the batch is outside [0, 4)" in text, f"bad label: {text}")


if not os.path.exists(PROGRAM):
    print(f"FAIL: {PROGRAM} not found (build the test_metrics_confusion target or set CT_TEST_METRICS_CONFUSION)")
    sys.exit(1)
for i in range(48):
    case(i)
for t in range(2):
    distribution(t)
for t in range(2):
    closed_forms(t)
errors()
finish()
