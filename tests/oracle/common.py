"""Shared helpers of the oracle tests: fresh seeds, the ct_oracle round trip through HDF5, and
relative-error checks that count and report like the C tests ("N passed, N failed").

Each test script is run by ctest as `python3 test_x.py PATH/TO/ct_oracle`. The reference is
computed by PyTorch in float64 from the same float32 inputs, so the bound (1e-5 for float32)
measures ctrainer's error, not PyTorch's."""
import json
import os
import subprocess
import sys
import tempfile
import time

try:
    import h5py
    import numpy as np
    import torch
except ImportError as e:  # the project's setup installs them; without them the test is skipped
    print(f"skipped: {e}")
    sys.exit(77)

HARNESS = sys.argv[1] if len(sys.argv) > 1 else "build/tests/ct_oracle"
# The CLI sits two levels above the harness (build/tests/ct_oracle -> build/ctrainer); the tests' small
# Fashion-MNIST run config lives with the CLI tests.
CTRAINER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(HARNESS))), "ctrainer")
TINY_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli", "configs", "tiny_sequential.json")
FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


def built_with(part):
    """Whether the ctrainer under test has an optional part: "TensorBoard" (protobuf-c) or "plots"
    (cairo), as its `ctrainer version` says ("TensorBoard: yes (...)" / "plots: no (...)")."""
    out = subprocess.run([CTRAINER, "version"], capture_output=True, text=True, check=True).stdout
    return f"\n{part}: yes" in f"\n{out}"


def require_built_with(part):
    """Skips the test (exit 77) when the ctrainer under test was built without `part` (see built_with)."""
    if not built_with(part):
        print(f"skipped: this ctrainer was built without {part} (see `{CTRAINER} version`)")
        sys.exit(77)


def require_fashion_mnist():
    """The Fashion-MNIST directory; skips the test (exit 77) when Debian's package is not installed."""
    if not os.path.exists(f"{FASHION_MNIST}/t10k-images-idx3-ubyte.gz"):
        print(f"skipped: Fashion-MNIST is not installed at {FASHION_MNIST}")
        sys.exit(77)
    return FASHION_MNIST
SEED = int(os.environ.get("CT_TEST_SEED", time.time_ns() % (2**31)))
RNG = np.random.default_rng(SEED)
torch.manual_seed(SEED)
torch.set_default_dtype(torch.float64)
print(f"{os.path.basename(sys.argv[0])}: seed {SEED} (rerun with CT_TEST_SEED={SEED})")

passed = 0
failed = 0


def check(cond, msg):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL", msg)


def rel_err(got, want):
    """max |got - want| / max |want|: the error relative to the tensor's scale."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return float("inf")
    scale = np.max(np.abs(want)) if want.size else 0.0
    diff = np.max(np.abs(got - want)) if want.size else 0.0
    return 0.0 if diff == 0 else diff / max(scale, 1e-30)


def check_close(label, got, want, tol=1e-5):
    """Within tol relative to the reference's scale; a NaN or infinity of the reference must be at the
    same place in got (PyTorch's propagation), and got has none elsewhere."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        check(False, f"{label}: shape {got.shape} != {want.shape}")
        return
    odd = ~np.isfinite(want)
    same = np.array_equal(got[odd], want[odd], equal_nan=True) and np.isfinite(got[~odd]).all()
    check(same, f"{label}: non-finite values at {int((~np.isfinite(got)).sum())} places, the reference has "
                f"{int(odd.sum())} (first difference at flat index "
                f"{int(np.argmax((np.isnan(got) != np.isnan(want)) | (np.isinf(got) != np.isinf(want))))})")
    if not same:
        return
    got, want = got[~odd], want[~odd]
    e = rel_err(got, want)
    check(e < tol, f"{label}: relative error {e:.3g} >= {tol:g}")
    check(want.size == 0 or odd.any() or np.max(np.abs(want)) > 0,
          f"{label}: reference is all zero, the check proves nothing")


def check_close_f32(label, got, want, want_f32, tol=1e-5, slack=4):
    """check_close for a float32 result where the case itself may be too ill-conditioned for float32 to
    reach tol: an independent float32 computation of the same inputs (PyTorch's, want_f32) measures what
    float32 can do, and the bound is tol or slack times that error, whichever is larger. Two float32
    implementations' errors differ by a random factor (a few times at most over thousands of tensors),
    so slack covers that spread; a well-conditioned case keeps the bound tol. want_f32 may be a list of
    such computations summing in different orders (PyTorch on one thread and on two): one order's error
    is one draw of that random factor, and a lucky draw alone would set the bar below float32's."""
    alternatives = want_f32 if isinstance(want_f32, list) else [want_f32]
    check_close(label, got, want, tol=max([tol] + [slack * rel_err(w, want) for w in alternatives]))


def f32(a):
    """Rounds to float32 (what ctrainer sees) and returns float64 for the reference."""
    return np.asarray(a, dtype=np.float32).astype(np.float64)


def run(mode, spec, tensors, expect_fail=False):
    """Writes spec and tensors to an HDF5 file, runs the harness, returns the output file's datasets
    (as a flat dict "group/name" -> array) or, with expect_fail, the harness's error text."""
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in.h5"), os.path.join(d, "out.h5")
        with h5py.File(src, "w") as f:
            f.attrs["spec"] = json.dumps(spec)
            for k, v in tensors.items():
                v = np.asarray(v)
                if v.dtype == np.float64 and spec.get("dtype", "f32") == "f32":
                    v = v.astype(np.float32)
                f.create_dataset(k, data=v)
        p = subprocess.run([HARNESS, mode, src, dst], capture_output=True, text=True)
        if expect_fail:
            return p.returncode, p.stderr
        if p.returncode != 0:
            check(False, f"harness failed ({mode}): {p.stderr.strip()}")
            return None
        out = {}
        with h5py.File(dst, "r") as f:
            f.visititems(lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
        return out


def finish():
    if failed:
        print(f"seed was {SEED}")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
