"""What every Python test script here (tests/mpi/, tests/soak/) ends with: check() counts a condition and
prints FAIL with its message when it does not hold, finish() prints "N passed, M failed" and exits with
the test's code (1 on any failure), as the C tests' testlib does. Also rel() for comparisons and
test_seed(), a fresh seed per run that CT_TEST_SEED repeats. Scripts outside tests/ add this folder to
sys.path before importing it (tests/mpi/mpilib.py, tests/soak/test_soak.py)."""
import os
import sys
import time

_count = {"passed": 0, "failed": 0}


def check(cond, msg):
    _count["passed" if cond else "failed"] += 1
    if not cond:
        print("FAIL", msg)
    return cond


def finish():
    print(f"{_count['passed']} passed, {_count['failed']} failed")
    sys.exit(1 if _count["failed"] else 0)


def rel(a, b):
    """|a - b| / |b| (0 when equal)."""
    a, b = float(a), float(b)
    if a == b:
        return 0.0
    return abs(a - b) / max(abs(b), 1e-300)


def test_seed():
    """CT_TEST_SEED or a fresh one, printed so that a failing run can be repeated."""
    seed = int(os.environ.get("CT_TEST_SEED", time.time_ns() % (2**31)))
    print(f"{os.path.basename(sys.argv[0])}: seed {seed} (rerun with CT_TEST_SEED={seed})")
    return seed
