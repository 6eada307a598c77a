"""What the distributed Trainer tests (tests/mpi/test_*.py) share: the program under test, skipping
(exit 77) where mpirun or Fashion-MNIST is missing, the seed, the environment mpirun needs on a
2-core machine run as root, and the check/finish counters that end a test with its exit code."""
import os
import shutil
import sys
import time

CTRAINER = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else "build/ctrainer"
DATA = "/usr/share/datasets/fashion-mnist"
MPIRUN = shutil.which("mpirun")
if not MPIRUN:
    print("skipped: mpirun is not installed")
    sys.exit(77)
if not os.path.exists(f"{DATA}/train-images-idx3-ubyte.gz"):
    print(f"skipped: Fashion-MNIST is not installed at {DATA}")
    sys.exit(77)

SEED = int(os.environ.get("CT_TEST_SEED", time.time_ns() % (2**31)))
print(f"{os.path.basename(sys.argv[0])}: seed {SEED} (rerun with CT_TEST_SEED={SEED})")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
       "OMPI_MCA_rmaps_base_oversubscribe": "1"}

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
