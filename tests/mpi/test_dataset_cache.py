"""Dataset caches in a distributed run: `mpirun -np W ctrainer train` with a "cache" on the train and
eval data builds each cache once (the CLI builds the datasets with main_process_first: local rank 0
first, then the others, which find the cache built), and later runs reuse it.

Usage (ctest runs it): python3 test_dataset_cache.py PATH/TO/ctrainer

Cases (small IDX files written here, gzip'd u8 images and labels; an MLP, 12 steps):
  1. 2 ranks, no cache yet: exactly one "data.train.cache: building" and one "data.eval.cache:
     building" line over all ranks, both from rank 0; the caches hold the record of their sources;
     no temporary build files are left; the run's log history (losses, grad norms, eval loss) is
     identical to the same run without caches (the cached samples are bit-identical);
  2. 3 ranks, then 1 process without mpirun: no "building" line, the caches not rewritten (inode
     and mtime), the same log history;
  3. the train labels touched (newer than the cache): one "building" line, for the train cache only;
  4. the eval cache replaced by a file ctrainer did not write: the job (3 ranks) ends non-zero
     within the timeout; every rank that prints an error (the first abort may end the others first)
     gives the reason: rank 0 "data.eval.cache: ... not a dataset cache written by ctrainer", the
     others "building datasets: the main process (rank 0) failed:" and that message; the file is
     left as it was; no process is left.
A fresh seed each run (CT_TEST_SEED=N repeats one)."""
import gzip
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

try:
    import h5py
    import numpy as np
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

CTRAINER = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else "build/ctrainer"
MPIRUN = shutil.which("mpirun")
if not MPIRUN:
    print("skipped: mpirun is not installed")
    sys.exit(77)

SEED = int(os.environ.get("CT_TEST_SEED", time.time_ns() % (2**31)))
print(f"{os.path.basename(sys.argv[0])}: seed {SEED} (rerun with CT_TEST_SEED={SEED})")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
       "OMPI_MCA_rmaps_base_oversubscribe": "1"}
MPI = [MPIRUN, "--oversubscribe", "--bind-to", "none", "--tag-output"]
SPEED_KEYS = ("_runtime", "_samples_per_second", "_steps_per_second")

passed = failed = 0


def check(cond, msg):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL", msg)
    return cond


def finish(work):
    shutil.rmtree(work, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


def write_idx(path, a):
    code = {np.dtype(np.uint8): 0x08}[a.dtype]
    header = bytes([0, 0, code, a.ndim]) + b"".join(struct.pack(">I", d) for d in a.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + a.tobytes())


def run(cmd, label, timeout=180):
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        check(False, f"{label}: no result after {timeout} s: {' '.join(cmd)}\n{e.stderr}")
        return None
    print(f"  {label}: exit {p.returncode}, {time.time() - t0:.1f} s")
    return p


def building_lines(p, key):
    return [l for l in (p.stdout + p.stderr).splitlines() if f"{key}: building " in l]


def history(out_dir):
    with open(os.path.join(out_dir, "trainer_state.json")) as f:
        h = json.load(f)["log_history"]
    return [{k: v for k, v in e.items() if not k.endswith(SPEED_KEYS)} for e in h]


def version(path):
    st = os.stat(path)
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def ctrainer_processes():
    """ctrainer processes of this test still alive (their command line names this test's config)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if state != "Z" and any(CTRAINER.encode() == c for c in cmd) and any(b"cache_run" in c for c in cmd):
            found.append(int(pid))
    return found


def main():
    work = tempfile.mkdtemp(prefix="ct_cache_mpi_")
    rng = np.random.default_rng(SEED)
    n = int(rng.integers(500, 700))
    write_idx(f"{work}/img.idx.gz", rng.integers(0, 256, (n, 6, 6), dtype=np.uint8))
    labels = rng.integers(0, 5, n, dtype=np.uint8)
    labels[0] = 4
    write_idx(f"{work}/lab.idx.gz", labels)

    def config(name, cache):
        train = {"type": "idx", "images": "img.idx.gz", "labels": "lab.idx.gz",
                 "transforms": [{"type": "normalize", "mean": [0.5], "std": [0.29]}]}
        ev = {"type": "idx", "images": "img.idx.gz", "labels": "lab.idx.gz", "limit": 101}
        if cache:
            train["cache"] = "cache/train.h5"
            ev["cache"] = "cache/eval.h5"
        cfg = {"model": {"type": "mlp", "hidden": [16]},
               "data": {"train": train, "eval": ev},
               "training_args": {"output_dir": f"{work}/out_{name}", "max_steps": 12,
                                 "per_device_train_batch_size": 8, "per_device_eval_batch_size": 16,
                                 "learning_rate": 1e-2, "logging_steps": 1, "eval_strategy": "steps",
                                 "eval_steps": 6, "save_strategy": "no", "seed": SEED}}
        path = f"{work}/cache_run_{name}.json"
        with open(path, "w") as f:
            json.dump(cfg, f)
        return path, cfg["training_args"]["output_dir"]

    os.makedirs(f"{work}/cache")
    train_h5, eval_h5 = f"{work}/cache/train.h5", f"{work}/cache/eval.h5"

    # 0. The reference: 2 ranks without caches.
    cfg, out = config("plain", False)
    p = run(MPI + ["-np", "2", CTRAINER, "train", cfg], "2 ranks, no cache")
    if not p or not check(p.returncode == 0, f"uncached run failed:\n{p.stderr[-3000:]}"):
        finish(work)
    ref = history(out)

    # 1. 2 ranks, the caches built once.
    cfg, out = config("w2", True)
    p = run(MPI + ["-np", "2", CTRAINER, "train", cfg], "2 ranks, caches missing")
    if not p or not check(p.returncode == 0, f"cached run failed:\n{p.stderr[-3000:]}"):
        finish(work)
    for key in ("data.train.cache", "data.eval.cache"):
        lines = building_lines(p, key)
        check(len(lines) == 1 and lines[0].startswith("[1,0]"), f"{key}: {len(lines)} building lines: {lines}")
    for h5 in (train_h5, eval_h5):
        with h5py.File(h5, "r") as f:
            rec = f.attrs.get("ctrainer_cache_of")
            rec = rec.decode() if isinstance(rec, bytes) else rec
            check(rec is not None and "img.idx.gz" in rec and "lab.idx.gz" in rec, f"{h5}: record {rec!r}")
            check(f["features"].shape == (n, 1, 6, 6) and f["labels"].shape == (n,), f"{h5}: shapes")
    leftovers = [x for x in os.listdir(f"{work}/cache") if ".build-" in x or ".tmp-" in x]
    check(not leftovers, f"temporary files left: {leftovers}")
    check(history(out) == ref, "the log history with caches differs from the one without")
    v_train, v_eval = version(train_h5), version(eval_h5)

    # 2. Reused by 3 ranks and by one process.
    cfg, out = config("w3", True)
    p = run(MPI + ["-np", "3", CTRAINER, "train", cfg], "3 ranks, caches fresh")
    if p and check(p.returncode == 0, f"3-rank run failed:\n{p.stderr[-3000:]}"):
        check(not building_lines(p, "data.train.cache") and not building_lines(p, "data.eval.cache"),
              f"fresh caches rebuilt by 3 ranks:\n{p.stderr[-2000:]}")
        check(version(train_h5) == v_train and version(eval_h5) == v_eval, "fresh caches rewritten by 3 ranks")
    cfg, out = config("w1", True)
    p = run([CTRAINER, "train", cfg], "1 process, caches fresh")
    if p and check(p.returncode == 0, f"1-process run failed:\n{p.stderr[-3000:]}"):
        check(not building_lines(p, "data.train.cache"), "a fresh cache rebuilt by one process")
        check(version(train_h5) == v_train, "a fresh cache rewritten by one process")

    # 3. A newer source: the train cache only is rebuilt, once.
    st = os.stat(train_h5)
    os.utime(f"{work}/lab.idx.gz", ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    cfg, out = config("touched", True)
    p = run(MPI + ["-np", "2", CTRAINER, "train", cfg], "2 ranks, labels touched")
    if p and check(p.returncode == 0, f"run after touching failed:\n{p.stderr[-3000:]}"):
        # Both caches have lab.idx.gz as a source: both are rebuilt, each once, by rank 0.
        for key in ("data.train.cache", "data.eval.cache"):
            lines = building_lines(p, key)
            check(len(lines) == 1 and lines[0].startswith("[1,0]"), f"{key} after touching: {lines}")
        check(version(train_h5) != v_train, "the train cache was not rebuilt")

    # 4. A file ctrainer did not write at the eval cache's path: the job fails with its message.
    with open(eval_h5, "w") as f:
        f.write("not a cache\n")
    before = version(eval_h5)
    cfg, out = config("bad", True)
    p = run(MPI + ["-np", "3", CTRAINER, "train", cfg], "3 ranks, a foreign file as the eval cache", timeout=60)
    if p:
        text = p.stdout + p.stderr
        check(p.returncode != 0, "the job with a foreign eval cache succeeded")
        # Whichever rank aborts first ends the job, so not every rank gets to print; every rank that
        # does prints the reason: rank 0 its own, the others rank 0's.
        errors = [l for l in text.splitlines() if "ctrainer train:" in l]
        check(errors, f"no rank printed an error:\n{text[-3000:]}")
        for l in errors:
            own = l.startswith("[1,0]")
            check("data.eval.cache:" in l and "not a dataset cache written by ctrainer" in l and
                  (own or "building datasets: the main process (rank 0) failed:" in l), f"error line: {l}")
        check(version(eval_h5) == before, "the foreign file was touched")
    time.sleep(1)
    check(not ctrainer_processes(), f"processes left: {ctrainer_processes()}")
    finish(work)


main()
