"""What the distributed Trainer tests (tests/mpi/test_*.py) share: the program under test, skipping
(exit 77) where mpirun or Fashion-MNIST is missing, the seed, the environment mpirun needs on a
2-core machine run as root; the check/finish counters that end a test with its exit code come from
tests/checklib.py, which the other Python tests share."""
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checklib import check, finish, rel, test_seed  # noqa: E402,F401 (re-exported to the tests)

CTRAINER = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else "build/ctrainer"
DATA = "/usr/share/datasets/fashion-mnist"
MPIRUN = shutil.which("mpirun")
if not MPIRUN:
    print("skipped: mpirun is not installed")
    sys.exit(77)
if not os.path.exists(f"{DATA}/train-images-idx3-ubyte.gz"):
    print(f"skipped: Fashion-MNIST is not installed at {DATA}")
    sys.exit(77)

SEED = test_seed()
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
       "OMPI_MCA_rmaps_base_oversubscribe": "1"}
