"""Language-model token metrics (eval/metrics_lm.c) against PyTorch on fresh random data:
token_loss against torch.nn.functional.cross_entropy(logits, labels, ignore_index=...) (the mean
over non-ignored tokens) in float64 from the same float32/float64 logits, perplexity against its
exp, token_accuracy against (argmax == label) over the same tokens (an exact ratio of counts, so
to the last bit). Every case goes through `test_metrics_lm --compute` (the unit test's program)
with random [N, T, V] shapes (V up to a few thousand), logits of scale 3 or 1000 (where a naive
exp overflows) or tied integers (argmax: the first maximum, as torch.argmax), int64 or int32
labels, ignore_index -100, -1 or a real token id, a random batch size dealt round-robin to a random
number of metric states that are then merged, and a random mask whose padding rows carry labels
out of range and NaN logits (counting one would fail or show). Every token ignored: no keys.

Uncertainty, over sequences (the rows): with resamples = 0 the closed form for a ratio over
clusters, n/(n-1) sum (a_i - R b_i)^2 / (sum b)^2 with a_i the row's NLL sum (or correct count) and
b_i its token count, written here with numpy (within a bound from the data's conditioning: the
metric expands the square into mergeable sums); with resamples > 0 by distribution against an
independent numpy bootstrap over the sequences (2000 resamples each: standard errors within 15%, each
interval end a quantile of numpy's resamples at the right level within 0.035 in probability), and
perplexity's interval = exp of token_loss's."""
import json
import math
import os
import subprocess
import sys
import tempfile
from statistics import NormalDist

from common import RNG, check, finish, h5py, np, torch

import torch.nn.functional as F

PROGRAM = os.environ.get("CT_TEST_METRICS_LM") or os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])),
                                                               "test_metrics_lm")
NAMES = ["token_loss", "perplexity", "token_accuracy"]


def compute(spec, logits, labels, mask):
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "in.h5")
        with h5py.File(src, "w") as f:
            f.attrs["spec"] = json.dumps(spec)
            f.create_dataset("outputs", data=logits)
            f.create_dataset("labels", data=labels)
            if mask is not None:
                f.create_dataset("mask", data=mask.astype(np.uint8))
        p = subprocess.run([PROGRAM, "--compute", src], capture_output=True, text=True)
        if p.returncode != 0:
            return p.returncode, p.stderr
        return 0, json.loads(p.stdout)


def key(prefix, name):
    return f"{prefix}_{name}" if prefix else name


def close(got, want, rel):
    return got is not None and (got == want or abs(got - want) <= rel * max(abs(got), abs(want)))


def token_nll(x, y):
    """Each token's cross-entropy in float64: F.cross_entropy's, except where the label's logit leads
    the others by far (logsumexp over j != y of x_j - x_y below -20: a loss under 2e-9), where
    F.cross_entropy rounds 1 + tiny to 1 (log(1 + 1e-85) is 0 in float64) and the metric does not:
    there softplus of that logsumexp, which is the same quantity computed without the rounding. A
    sequence of such tokens must not look constant to the bootstrap when it is not."""
    d = x - x.gather(1, y[:, None])
    others = torch.logsumexp(d.scatter(1, y[:, None], float("-inf")), dim=1)
    return torch.where(others < -20, F.softplus(others), F.cross_entropy(x, y, reduction="none"))


def per_sequence(logits, labels, ignore):
    """(NLL sum, correct count, tokens) of each sequence with a token, from torch in float64."""
    x = torch.from_numpy(logits.astype(np.float64))
    y = torch.from_numpy(labels.astype(np.int64))
    valid = y != ignore
    nll = token_nll(x.reshape(-1, x.shape[-1]), (y.reshape(-1).clamp(min=0) * valid.reshape(-1))).reshape(y.shape)
    hit = (x.argmax(dim=-1) == y) & valid
    a = torch.where(valid, nll, torch.zeros_like(nll)).sum(dim=1).numpy()
    c = hit.sum(dim=1).numpy().astype(np.float64)
    b = valid.sum(dim=1).numpy().astype(np.float64)
    keep = b > 0
    return a[keep], c[keep], b[keep]


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


def check_uncertainty(label, got, prefix, logits, labels, ignore, conf, resamples):
    a, c, b = per_sequence(logits, labels, ignore)
    n = len(b)
    z = NormalDist().inv_cdf(0.5 + conf / 2)
    for name, num in (("token_loss", a), ("token_accuracy", c)):
        R = num.sum() / b.sum()
        g = {s: got.get(key(prefix, f"{name}_{s}")) for s in ("stderr", "ci_low", "ci_high")}
        if resamples == 0:
            if n < 2:
                check(g["stderr"] is None, f"{label}: one sequence: {name}_stderr {g['stderr']} should be null")
                continue
            ss = ((num - R * b) ** 2).sum()
            se = np.sqrt(n / (n - 1) * ss) / b.sum()
            lo, hi = R - z * se, R + z * se
            if name == "token_accuracy":
                lo, hi = max(lo, 0.0), min(hi, 1.0)
            # The metric expands ss into mergeable sums (sum a^2 - 2 R sum a b + R^2 sum b^2), which
            # costs a few eps * sum a^2 / ss: the bound follows the data's conditioning.
            tol = 1e-12 + 64 * np.finfo(np.float64).eps * ((num ** 2).sum() / ss if ss > 0 else 1.0)
            check(close(g["stderr"], se, tol) or (g["stderr"] is not None and abs(g["stderr"] - se) < 1e-15 * R),
                  f"{label}: closed form {name}_stderr {g['stderr']} vs {se} (tolerance {tol:.3g})")
            for end, want in (("ci_low", lo), ("ci_high", hi)):
                check(g[end] is not None and abs(g[end] - want) <= z * se * tol + 1e-12 * abs(R),
                      f"{label}: closed form {name}_{end} {g[end]} vs {want}")
        else:
            vals = np.empty(2000)
            for r in range(len(vals)):
                w = np.bincount(RNG.integers(0, n, n), minlength=n)
                vals[r] = (w * num).sum() / (w * b).sum()
            se = vals.std(ddof=1)
            tail = (1 - conf) / 2
            lo, hi = np.quantile(vals, tail), np.quantile(vals, 1 - tail)
            # floor: ct_bootstrap_stderr's mean of 2000 values carries ~2000 eps |R| of rounding, which
            # shows when the resamples barely vary (one sequence)
            check(g["stderr"] is not None and abs(g["stderr"] - se) <= 0.15 * se + 1e-12 * abs(R),
                  f"{label}: {name}_stderr {g['stderr']} vs numpy's bootstrap over sequences {se}")
            for end, q in (("ci_low", tail), ("ci_high", 1 - tail)):
                check(quantile_ok(vals, g[end], q), f"{label}: {name}_{end} {g[end]} is not a {q} quantile of "
                      f"numpy's bootstrap (P(<) {np.mean(vals < (g[end] or 0)):.4f}, P(<=) "
                      f"{np.mean(vals <= (g[end] or 0)):.4f})")
    for end in ("ci_low", "ci_high"):  # exp of token_loss's ends (C's and Python's exp: within an ulp)
        tl, pp = got.get(key(prefix, f"token_loss_{end}")), got.get(key(prefix, f"perplexity_{end}"))
        try:  # undefined (one sequence, closed form) or overflowing (above log(DBL_MAX) = 709.78...): null
            want = None if tl is None else math.exp(tl)
        except OverflowError:
            want = None
        if want is None:
            check(pp is None, f"{label}: perplexity_{end} {pp}: exp({tl}) is null")
        else:
            check(close(pp, want, 1e-15), f"{label}: perplexity_{end} {pp} != exp({tl})")


def case(i, all_ignored=False):
    n, t = int(RNG.integers(1, 60)), int(RNG.integers(1, 30))
    v = int(RNG.choice([2, 5, 50, int(RNG.integers(2, 1000))]))
    kind = ["normal", "large", "ties"][i % 3]
    dtype, label_dtype = ("f64" if i % 4 == 0 else "f32"), ("i32" if i % 5 == 1 else "i64")
    ignore = int(RNG.choice([-100, -100, -1, 0]))
    prefix = str(RNG.choice(["eval", "test", ""]))
    masked = i % 3 == 1
    if kind == "ties":
        logits = RNG.integers(0, 3, size=(n, t, v)).astype(np.float64)
    else:
        logits = RNG.normal(0, 1000 if kind == "large" else 3, size=(n, t, v))
    logits = logits.astype(np.float32 if dtype == "f32" else np.float64)
    labels = RNG.integers(0, v, size=(n, t))
    labels[RNG.random((n, t)) < RNG.uniform(0, 0.5)] = ignore
    if all_ignored:
        labels[:] = ignore
    mask = RNG.random(n) >= 0.3 if masked else np.ones(n, dtype=bool)
    if not mask.any():
        mask[0] = True
    labels_in, logits_in = labels.copy(), logits.copy()
    labels_in[~mask] = v + 7  # padding rows: neither a token nor ignore_index
    logits_in[~mask] = np.nan
    ldt = np.int32 if label_dtype == "i32" else np.int64

    metrics = []
    for name in NAMES:
        form = RNG.integers(0, 2)
        metrics.append({"type": name, "ignore_index": ignore} if form or ignore != -100 else name)
    RNG.shuffle(metrics)
    conf = float(RNG.choice([0.9, 0.95]))
    resamples = int(RNG.choice([0, 2000]))
    spec = {"metrics": metrics, "prefix": prefix, "dtype": dtype, "label_dtype": label_dtype,
            "batch_size": int(RNG.integers(1, n + 1)), "ranks": int(RNG.integers(1, 5)),
            "uncertainty": {"resamples": resamples, "confidence": conf, "seed": int(RNG.integers(0, 2**62))}}
    rc, got = compute(spec, logits_in, labels_in.astype(ldt), mask if masked else None)
    label = (f"case {i} (N {n} T {t} V {v} {kind} {dtype}/{label_dtype} ignore {ignore} masked {masked} "
             f"batch {spec['batch_size']} ranks {spec['ranks']} resamples {resamples})")
    if rc != 0:
        check(False, f"{label}: exit {rc}: {got}")
        return
    lr, yr = logits[mask], labels[mask]
    valid = yr != ignore
    if not valid.any():
        check(got == {}, f"{label}: every token ignored: keys {sorted(got)}, expected none")
        return
    x = torch.from_numpy(lr.astype(np.float64)).reshape(-1, v)
    y = torch.from_numpy(yr.astype(np.int64)).reshape(-1)
    loss = float(F.cross_entropy(x, y, ignore_index=ignore))
    acc = float((x.argmax(dim=1) == y)[y != ignore].double().mean())
    keys = {key(prefix, m) for m in NAMES} | {key(prefix, f"{m}_{s}") for m in NAMES
                                              for s in ("stderr", "ci_low", "ci_high")}
    check(set(got) == keys, f"{label}: keys {sorted(got)}, expected {sorted(keys)}")
    g = got.get(key(prefix, "token_loss"))
    check(close(g, loss, 1e-12) or (g is not None and abs(g - loss) < 1e-15),
          f"{label}: token_loss {g} vs torch {loss!r}")
    try:
        ppl = math.exp(loss)
    except OverflowError:
        ppl = None
    g = got.get(key(prefix, "perplexity"))
    if ppl is None:
        check(g is None, f"{label}: perplexity {g}, exp({loss}) overflows: null")
    else:
        check(close(g, ppl, 1e-12 * max(1.0, loss)), f"{label}: perplexity {g} vs exp(torch) {ppl!r}")
    g = got.get(key(prefix, "token_accuracy"))
    check(g == acc, f"{label}: token_accuracy {g!r} vs torch {acc!r} (exact)")
    if ppl is not None:
        check_uncertainty(label, got, prefix, lr, yr, ignore, conf, resamples)


def errors():
    logits = RNG.normal(size=(3, 4, 5)).astype(np.float32)
    labels = np.array([[0, 1, 2, 3], [4, -100, 5, 1], [0, 0, 0, 0]])
    rc, text = compute({"metrics": ["perplexity"], "batch_size": 2}, logits, labels, None)
    check(rc == 1 and "metric 'perplexity': label 5 at row 1, position 2 of the batch is outside [0, 5)" in text,
          f"bad label: exit {rc}: {text}")
    rc, text = compute({"metrics": ["perplexity"], "batch_size": 2}, logits, labels, np.array([1, 0, 1], dtype=bool))
    check(rc == 0 and "eval_perplexity" in text, f"the bad label is padding: exit {rc}: {text}")
    rc, text = compute({"metrics": [{"type": "token_accuracy", "ignore_index": 5}], "batch_size": 3}, logits, labels,
                       None)
    check(rc == 1 and "label -100 at row 1, position 1" in text and "ignore_index 5" in text,
          f"ignore_index 5 makes -100 a bad label: exit {rc}: {text}")
    rc, text = compute({"metrics": ["token_los"]}, logits, labels, None)
    check(rc == 1 and "metrics[0]: unknown metric 'token_los', did you mean 'token_loss'?" in text,
          f"bad name: exit {rc}: {text}")


if not os.path.exists(PROGRAM):
    print(f"FAIL: {PROGRAM} not found (build the test_metrics_lm target or set CT_TEST_METRICS_LM)")
    sys.exit(1)
for i in range(36):
    case(i)
case(99, all_ignored=True)
errors()
finish()
