"""Regression metrics (eval/metrics_regression.c) against scikit-learn on fresh random data:
mean_squared_error, its root (root_mean_squared_error where scikit-learn has it, else
mean_squared_error(squared=False): both average the per-output roots), mean_absolute_error and
r2_score, all with multioutput="uniform_average", for [N] and [N, k] targets. Every case goes
through `test_metrics_regression --compute` (the unit test's program) with a random batch size,
dealt round-robin to a random number of metric states that are then merged, a random mask whose
padding rows hold NaN (counting one would show), float32 or float64 outputs and targets, and metric
specs as names or objects (with and without "num_outputs").

Edge cases: a constant target column (a dyadic constant, whose mean numpy computes exactly, so
scikit-learn's rule is well defined: 1.0 when predicted perfectly, else 0.0), perfect predictions,
a single row (r2 NaN -> JSON null).

Tolerances: mse, rmse and mae within 1e-12 relative (float64 sums of the same float64 values);
r2's 1 - r2 within a bound derived from the data's conditioning (the metric's one-pass
SST = sum y^2 - (sum y)^2 / n loses about eps * sum y^2 / SST).

Uncertainty, checked by distribution against an independent bootstrap written here with numpy
(rows drawn one by one with replacement): rmse's and r2's bootstrap standard errors within 15%, and
each end of their percentile intervals a quantile of numpy's resamples at the right level within
0.035 in probability (2000 resamples on each side: the noise is ~2% and ~0.007); mse's and mae's
closed forms (standard error of the per-row terms, normal interval cut at 0) within 1e-9 of the
textbook formula."""
import json
import os
import subprocess
import sys
import tempfile
import warnings
from statistics import NormalDist

from common import RNG, check, finish, h5py, np

try:
    from sklearn.exceptions import UndefinedMetricWarning
    from sklearn.metrics import mean_absolute_error, mean_squared_error, r2_score
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)
try:
    from sklearn.metrics import root_mean_squared_error
except ImportError:  # scikit-learn < 1.4
    def root_mean_squared_error(y, p):
        return mean_squared_error(y, p, squared=False)

warnings.simplefilter("ignore", UndefinedMetricWarning)  # one-row r2 is tested on purpose
PROGRAM = os.environ.get("CT_TEST_METRICS_REGRESSION") or os.path.join(
    os.path.dirname(os.path.abspath(sys.argv[1])), "test_metrics_regression")
EPS = np.finfo(np.float64).eps
NAMES = ["mse", "rmse", "mae", "r2"]


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


def key(prefix, name):
    return f"{prefix}_{name}" if prefix else name


def r2_tolerance(y):
    """1e-13 plus 64 eps times the worst sum y^2 / SST over the outputs."""
    y = y.reshape(len(y), -1).astype(np.float64)
    sst = ((y - y.mean(axis=0)) ** 2).sum(axis=0)
    syy = (y ** 2).sum(axis=0)
    kappa = max([1.0] + [float(a / b) for a, b in zip(syy, sst) if b > 0])
    return 1e-13 + 64 * EPS * kappa


def close(got, want, rel):
    if want is None or (isinstance(want, float) and np.isnan(want)):
        return got is None
    return got is not None and (got == want or abs(got - want) <= rel * max(abs(got), abs(want)))


def sklearn_values(y, p):
    n = len(y)
    return {"mse": float(mean_squared_error(y, p)), "rmse": float(root_mean_squared_error(y, p)),
            "mae": float(mean_absolute_error(y, p)), "r2": float(r2_score(y, p)) if n >= 2 else float("nan")}


def stat_np(y, p, counts):
    """rmse and r2 (scikit-learn's rules) of a resample given each row's multiplicity."""
    y2, p2 = y.reshape(len(y), -1), p.reshape(len(p), -1)
    w = counts[:, None].astype(np.float64)
    n = counts.sum()
    e2 = (y2 - p2) ** 2
    sse = (w * e2).sum(axis=0)
    rmse = float(np.mean(np.sqrt(sse / n)))
    mean = (w * y2).sum(axis=0) / n
    sst = (w * (y2 - mean) ** 2).sum(axis=0)
    drawn = counts > 0
    const = (y2[drawn] == y2[drawn][0]).all(axis=0)
    r2 = np.where(sse == 0, 1.0, np.where(const, 0.0, 1 - sse / np.where(sst > 0, sst, 1)))
    return rmse, float(np.mean(r2))


def bootstrap_np(y, p, resamples):
    n = len(y)
    vals = np.empty((resamples, 2))
    for b in range(resamples):
        counts = np.bincount(RNG.integers(0, n, n), minlength=n)
        vals[b] = stat_np(y, p, counts)
    return vals


def quantile_ok(vals, x, q, slack=0.035):
    """x is a q-quantile of the sample vals up to slack in probability: P(V < x) <= q + slack and
    P(V <= x) >= q - slack, with "<" and "<=" taken 1e-9 relative wide (the C code and numpy round
    the same resample differently). Judged in probability, not in value, because a bootstrap of few
    rows, sequences or correct tokens is a discrete law whose quantiles jump between atoms. Each side's
    2000 resamples make the probabilities uncertain by about 0.005 (0.007 for the difference), so
    0.035 is 5 standard deviations."""
    if x is None:
        return False
    d = 1e-9 * max(abs(x), 1e-300)
    return np.mean(vals < x - d) - slack <= q <= np.mean(vals <= x + d) + slack


def check_uncertainty(label, got, prefix, y, p, conf):
    z = NormalDist().inv_cdf(0.5 + conf / 2)
    e = (y - p).reshape(len(y), -1)
    for name, terms in (("mse", (e ** 2).mean(axis=1)), ("mae", np.abs(e).mean(axis=1))):
        m, se = terms.mean(), terms.std(ddof=1) / np.sqrt(len(terms))
        for suffix, want in (("stderr", se), ("ci_low", max(0.0, m - z * se)), ("ci_high", m + z * se)):
            g = got.get(key(prefix, f"{name}_{suffix}"))
            check(close(g, float(want), 1e-9), f"{label}: {name}_{suffix} {g} vs {want}")
    vals = bootstrap_np(y, p, 2000)
    tail = (1 - conf) / 2
    for j, name in enumerate(("rmse", "r2")):
        v = vals[:, j]
        se = v.std(ddof=1)
        lo, hi = np.quantile(v, tail), np.quantile(v, 1 - tail)
        gse = got.get(key(prefix, f"{name}_stderr"))
        glo, ghi = got.get(key(prefix, f"{name}_ci_low")), got.get(key(prefix, f"{name}_ci_high"))
        floor = 1e-12 * abs(got.get(key(prefix, name)) or 0)  # ct_bootstrap_stderr's summation rounding
        check(gse is not None and abs(gse - se) <= 0.15 * se + floor,
              f"{label}: {name}_stderr {gse} vs numpy's bootstrap {se}")
        for g, q in ((glo, tail), (ghi, 1 - tail)):
            check(quantile_ok(v, g, q), f"{label}: {name} interval end {g} is not a {q} quantile of numpy's bootstrap "
                  f"(P(<) {np.mean(v < (g or 0)):.4f}, P(<=) {np.mean(v <= (g or 0)):.4f}; numpy's [{lo}, {hi}])")


def case(i, edge=None):
    k = int(RNG.choice([1, 1, 2, 3, 5]))
    flat = k == 1 and RNG.random() < 0.5
    n = int(RNG.integers(1, 400)) if i % 5 else int(RNG.integers(2000, 5000))
    dtype, label_dtype = str(RNG.choice(["f32", "f64"])), str(RNG.choice(["f32", "f64"]))
    prefix = str(RNG.choice(["eval", "test", ""]))
    masked = i % 3 == 1
    offset, scale = RNG.normal(0, 10, k), RNG.uniform(0.2, 4, k)
    y = offset + scale * RNG.normal(size=(n, k))
    p = y + RNG.normal(0, 0.5, k) + RNG.uniform(0.05, 1.5) * scale * RNG.normal(size=(n, k))
    if edge == "constant":
        c = int(RNG.integers(0, k))
        y[:, c] = RNG.integers(-40, 40) / 8  # dyadic: numpy's mean of it is exact
        if RNG.random() < 0.5:
            p[:, c] = y[:, c]  # perfectly predicted: r2 1.0, else 0.0
    elif edge == "perfect":
        p = y.copy()
    elif edge == "one_row":
        n = 1
        y, p = y[:1], p[:1]
    y = y.astype(np.float32 if label_dtype == "f32" else np.float64)
    p = p.astype(np.float32 if dtype == "f32" else np.float64)
    if flat:
        y, p = y[:, 0], p[:, 0]
    mask = RNG.random(n) >= 0.3 if masked else np.ones(n, dtype=bool)
    if not mask.any():
        mask[0] = True
    if edge == "one_row" and masked:
        mask[:] = True
    y_in, p_in = y.copy(), p.copy()
    y_in[~mask] = np.nan  # padding rows: NaN, so counting one would show
    p_in[~mask] = np.nan

    metrics = []
    for name in NAMES:
        form = RNG.integers(0, 3)
        metrics.append(name if form == 0 else {"type": name} if form == 1 else {"type": name, "num_outputs": k})
    RNG.shuffle(metrics)
    conf = float(RNG.choice([0.9, 0.95]))
    uncertain = edge is None and int(mask.sum()) >= 30 and i % 2 == 0
    spec = {"metrics": metrics, "prefix": prefix, "dtype": dtype, "label_dtype": label_dtype,
            "batch_size": int(RNG.integers(1, n + 1)), "ranks": int(RNG.integers(1, 5))}
    if uncertain:
        spec["uncertainty"] = {"resamples": 2000, "confidence": conf, "seed": int(RNG.integers(0, 2**62))}
    rc, got = compute(spec, p_in, y_in, mask if masked else None)
    label = (f"case {i} {edge or ''} (n {n} k {k} flat {flat} {dtype}/{label_dtype} masked {masked} "
             f"batch {spec['batch_size']} ranks {spec['ranks']})")
    if rc != 0:
        check(False, f"{label}: exit {rc}: {got}")
        return
    yr, pr = y[mask].astype(np.float64), p[mask].astype(np.float64)
    want = sklearn_values(yr, pr)
    keys = {key(prefix, m) for m in NAMES}
    if uncertain:
        keys |= {key(prefix, f"{m}_{s}") for m in NAMES for s in ("stderr", "ci_low", "ci_high")}
    check(set(got) == keys, f"{label}: keys {sorted(got)}, expected {sorted(keys)}")
    for name in ("mse", "rmse", "mae"):
        g = got.get(key(prefix, name))
        check(close(g, want[name], 1e-12), f"{label}: {name} {g} vs scikit-learn {want[name]!r}")
    g, w = got.get(key(prefix, "r2")), want["r2"]
    if np.isnan(w):
        check(g is None, f"{label}: r2 {g}, scikit-learn nan (null)")
    elif edge in ("constant", "perfect") and (w == 1.0 or w == 0.0) and k == 1:
        check(g == w, f"{label}: r2 {g} vs scikit-learn {w!r} exactly")
    else:
        check(g is not None and close(1 - g, 1 - w, r2_tolerance(yr)), f"{label}: r2 {g} vs scikit-learn {w!r}")
    if uncertain:
        check_uncertainty(label, got, prefix, yr, pr, conf)


def constant_rules():
    """scikit-learn's rules on constant targets, exactly: 1.0 perfect, 0.0 otherwise, averaged."""
    y = np.array([[2.5, 1.0], [2.5, 2.0], [2.5, 3.0], [2.5, 5.0]])
    for perfect in (True, False):
        p = y.copy()
        p[:, 1] += [0.5, -0.25, 0.0, 1.0]
        if not perfect:
            p[2, 0] = 2.0
        rc, got = compute({"metrics": ["r2"], "batch_size": 3, "ranks": 2, "dtype": "f64", "label_dtype": "f64"},
                          p, y, None)
        want = float(r2_score(y, p))
        check(rc == 0 and got.get("eval_r2") == want, f"constant column (perfect {perfect}): {got} vs {want!r}")


def errors():
    y = RNG.normal(size=(6, 2)).astype(np.float32)
    rc, text = compute({"metrics": ["r2"], "batch_size": 4}, y[:, :1], y, None)
    check(rc == 1 and "metric 'r2': outputs [4, 1] f32 cpu and labels [4, 2] f32 cpu" in text,
          f"shape mismatch: exit {rc}: {text}")
    rc, text = compute({"metrics": [{"type": "rmse", "num_outputs": 3}]}, y, y, None)
    check(rc == 1 and "\"num_outputs\": 3" in text, f"num_outputs mismatch: exit {rc}: {text}")
    rc, text = compute({"metrics": ["r_2"]}, y, y, None)
    check(rc == 1 and "metrics[0]: unknown metric 'r_2', did you mean 'r2'?" in text,
          f"bad name: exit {rc}: {text}")


if not os.path.exists(PROGRAM):
    print(f"FAIL: {PROGRAM} not found (build the test_metrics_regression target or set CT_TEST_METRICS_REGRESSION)")
    sys.exit(1)
for i in range(30):
    case(i)
for i, edge in enumerate(["constant"] * 6 + ["perfect"] * 3 + ["one_row"] * 3):
    case(100 + i, edge)
constant_rules()
errors()
finish()
