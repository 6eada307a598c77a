"""Exact resume from the command line (issue 6): an interrupted-then-resumed run is the uninterrupted run.

One small config (Fashion-MNIST, 1500 training samples, MLP 784-32-10 with dropout 0.1 so keyed
randomness is exercised, batch 32 x 2 accumulation steps, a log every step, an evaluation every 5 and
a checkpoint every 3 steps, 2 epochs of 24 optimizer steps, the last step of an epoch a short
accumulation group) runs once uninterrupted with a fresh seed. Then the same run is interrupted:
  (a) mid-epoch, (b) at an epoch boundary, (c) inside a gradient-accumulation cycle: SIGKILL once the
      log line of a chosen step has appeared on stdout (the printer flushes one dict per log entry;
      `--max_steps K` would be another run, its schedule ends elsewhere), a fraction of a step later
      for (c);
  (d) SIGTERM and (e) SIGINT inside a step: the run must save a checkpoint at the next step boundary,
      name it, log no step after it and exit with 128 + the signal (143, 130);
and resumed with `--resume_from_checkpoint latest`; (f) a finished run resumed must train nothing.
Each resumed run must start right after the newest whole checkpoint (checked with an independent
reading of manifest.json: sizes and zlib CRC-32s), write none of the checkpoints that existed again
(the uninterrupted run saved each once), and end with the uninterrupted run's log_history (every loss, learning_rate, grad_norm and eval value, all
but the *_runtime / *_per_second keys), trainer_state.json, final model.h5 tensors, results files and
every checkpoint's model, optimizer, scheduler and RNG/loader files, bit for bit. A checkpoint named
explicitly resumes the same way; one with a flipped byte named explicitly is an error naming the file.

The helpers here (Run, verify, compare) are shared with test_crash_loop.py."""
import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zlib

from common import check, CTRAINER, finish, h5py, np, RNG

DATA = "/usr/share/datasets/fashion-mnist"
SEED = int(RNG.integers(0, 2**31))
# Bit-identity holds for the same thread count: every run of a test gets the same.
ENV = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
TIMEOUT = 300

CONFIG = {
    "model": {"type": "mlp", "hidden": [32], "dropout": 0.1},
    "data": {
        "train": {"type": "fashion_mnist", "split": "train", "limit": 1500},
        "eval": {"type": "fashion_mnist", "split": "test", "limit": 300},
    },
    "metrics": ["accuracy"],
    "training_args": {
        "num_train_epochs": 2,
        "per_device_train_batch_size": 32,
        "per_device_eval_batch_size": 100,
        "gradient_accumulation_steps": 2,
        "learning_rate": 0.003,
        "weight_decay": 0.01,
        "lr_scheduler_type": "linear",
        "warmup_steps": 4,
        "max_grad_norm": 1.0,
        "logging_steps": 1,
        "eval_strategy": "steps",
        "eval_steps": 5,
        "save_strategy": "steps",
        "save_steps": 3,
    },
}
# Files every checkpoint holds (checkpoint/checkpoint_io.h); rng_state_<rank>.json per rank.
CHECKPOINT_FILES = {"model.h5", "optimizer.h5", "scheduler.json", "trainer_state.json", "rng_state_0.json",
                    "training_args.json", "run_config.json", "manifest.json"}
# Files of a checkpoint that must be the same in any run reaching its step. The others name the
# run's output_dir (training_args.json, run_config.json) or checksum those (manifest.json).
SAME_IN_EVERY_RUN = ("model.h5", "optimizer.h5", "scheduler.json", "trainer_state.json", "rng_state_0.json")


def skip_if_unavailable():
    if not os.path.exists(f"{DATA}/train-images-idx3-ubyte.gz"):
        print(f"skipped: Fashion-MNIST is not installed at {DATA}")
        sys.exit(77)
    if not os.access(CTRAINER, os.X_OK):
        check(False, f"no ctrainer at {CTRAINER}")
        finish()


def write_config(d, config, name="run.json"):
    path = os.path.join(d, name)
    with open(path, "w") as f:
        json.dump(config, f, indent=1)
    return path


# --- one process, watched line by line ------------------------------------------------------------

NON_FINITE = re.compile(r"(?<=[:,\[] )(-?)(nan|inf)(?=[,}\]])")


def parse_line(raw):
    """A printed log entry (Python's repr of a dict) as a dict; other lines (metric tables) as str."""
    text = raw.decode("utf-8", "replace")
    if text.startswith("{"):
        try:
            # Python prints non-finite floats as bare nan / inf, which literal_eval does not read;
            # these entries only serve to find steps, so nan may become None.
            return ast.literal_eval(NON_FINITE.sub(lambda m: "None" if m.group(2) == "nan" else m.group(1) + "1e999", text))
        except (ValueError, SyntaxError):
            pass
    return text


def busy_wait(seconds):
    """Sub-millisecond delays: time.sleep overshoots by more than a step of this model takes."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class Run:
    """One `ctrainer train` process. Its stdout is read as it comes, one printed log entry per line,
    in a thread; `when(entry)` is called there for each entry, before anything else happens, so a
    signal sent from it lands as close to that point of the run as a pipe read allows."""

    def __init__(self, config_path, out, resume=None, when=None, extra=(), env=None):
        self.cmd = [CTRAINER, "train", config_path, "--output_dir", out, "--seed", str(SEED), *extra]
        if resume:
            self.cmd += ["--resume_from_checkpoint", resume]
        self.out = out
        self.when = when
        self.entries = []  # (seconds since start, dict or str)
        self._err = tempfile.TemporaryFile()
        self.t0 = time.perf_counter()
        self.p = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=self._err, env=env or ENV)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        self.rc = None
        self.stderr = ""

    def _read(self):
        fd, buf = self.p.stdout.fileno(), b""
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                raw, buf = buf.split(b"\n", 1)
                entry = parse_line(raw)
                if self.when:
                    self.when(self, entry)
                self.entries.append((time.perf_counter() - self.t0, entry))

    def signal(self, sig):
        try:
            os.kill(self.p.pid, sig)
        except ProcessLookupError:
            pass

    def wait(self, timeout=TIMEOUT):
        try:
            self.rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.rc = self.p.wait()
            check(False, f"{' '.join(self.cmd)} did not finish in {timeout} s")
        self._thread.join()
        self.p.stdout.close()
        self._err.seek(0)
        self.stderr = self._err.read().decode("utf-8", "replace")
        self._err.close()
        return self.rc

    def logs(self):
        return [e for _, e in self.entries if isinstance(e, dict)]

    def text(self):
        return "\n".join(str(e) for _, e in self.entries) + "\n" + self.stderr


def kill_at(step_of, step, sig=signal.SIGKILL, delay=0.0):
    """A `when` that sends sig `delay` seconds after the log line of optimizer step `step` appeared."""
    fired = []

    def when(run, entry):
        if not fired and isinstance(entry, dict) and step_of(entry) is not None and step_of(entry) >= step:
            fired.append(entry)
            busy_wait(delay)
            run.signal(sig)
            run.signalled_after = step_of(entry)

    return when


# --- checkpoints, read independently of the C code --------------------------------------------------

def checkpoints(out):
    """{step: path} of the checkpoint-<step> directories of out (never the .tmp ones)."""
    found = {}
    for name in os.listdir(out) if os.path.isdir(out) else []:
        m = re.fullmatch(r"checkpoint-(\d+)", name)
        if m and os.path.isdir(os.path.join(out, name)):
            found[int(m.group(1))] = os.path.join(out, name)
    return found


def verify(ckpt):
    """'' when ckpt is whole by checkpoint_io.h's definition (manifest.json parses and every file it
    lists has the listed size and zlib CRC-32), else why not."""
    try:
        with open(os.path.join(ckpt, "manifest.json")) as f:
            manifest = json.load(f)
    except FileNotFoundError:
        return "no manifest.json"
    except (ValueError, OSError) as e:
        return f"manifest.json unreadable: {e}"
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if manifest.get("format") != "ctrainer-checkpoint" or not isinstance(files, dict) or not files:
        return f"manifest.json is not a ctrainer-checkpoint manifest: {manifest}"
    for name, want in files.items():
        try:
            with open(os.path.join(ckpt, name), "rb") as f:
                data = f.read()
        except OSError as e:
            return f"{name}: {e}"
        if len(data) != want.get("size"):
            return f"{name} is {len(data)} bytes, the manifest says {want.get('size')}"
        if f"{zlib.crc32(data):08x}" != str(want.get("crc32")).lower():
            return f"{name}: CRC-32 {zlib.crc32(data):08x}, the manifest says {want.get('crc32')}"
    return ""


def flip_byte(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x10]))


def newest_valid(out):
    """(step, path) of the newest whole checkpoint of out, or (None, None)."""
    for step, path in sorted(checkpoints(out).items(), reverse=True):
        if not verify(path):
            return step, path
    return None, None


def check_all_whole(out, label):
    """Without rotation every checkpoint-<step> directory ever renamed into place must be whole, hold
    the contract's files and have a manifest that covers all of them."""
    for step, path in sorted(checkpoints(out).items()):
        why = verify(path)
        check(not why, f"{label}: checkpoint-{step} is not whole after the interruption: {why}")
        if why:
            continue
        names = set(os.listdir(path))
        check(CHECKPOINT_FILES <= names, f"{label}: checkpoint-{step} lacks {sorted(CHECKPOINT_FILES - names)}")
        with open(os.path.join(path, "manifest.json")) as f:
            listed = set(json.load(f)["files"])
        check(listed == names - {"manifest.json"},
              f"{label}: checkpoint-{step}'s manifest lists {sorted(listed)}, the directory has {sorted(names)}")


# --- comparisons ------------------------------------------------------------------------------------

def timing_key(k):
    return k.endswith("_runtime") or k.endswith("_per_second")


def strip(entry):
    return {k: v for k, v in entry.items() if not timing_key(k)}


def strip_state(state):
    state = dict(state)
    state["log_history"] = [strip(e) for e in state.get("log_history", [])]
    return state


def load_json(path):
    with open(path) as f:
        return json.load(f)


def h5_contents(path):
    """{name: array} of every dataset and {name: attribute} of every attribute (root and datasets)."""
    tensors, attrs = {}, {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                tensors[name] = obj[()]
            for k, v in obj.attrs.items():
                attrs[f"{name}@{k}"] = v

        f.visititems(visit)
        for k, v in f.attrs.items():
            attrs[f"@{k}"] = v
    return tensors, attrs


def same_value(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def diff_h5(want_path, got_path):
    """'' when both files hold the same datasets bit for bit and the same attributes, else the first
    difference."""
    want_t, want_a = h5_contents(want_path)
    got_t, got_a = h5_contents(got_path)
    if set(want_t) != set(got_t):
        return f"datasets {sorted(got_t)} != {sorted(want_t)}"
    for name in sorted(want_t):
        if not same_value(want_t[name], got_t[name]):
            w, g = np.asarray(want_t[name]), np.asarray(got_t[name])
            if w.shape == g.shape and w.dtype.kind == "f":
                n = int(np.sum(w != g))
                return f"{name}: {n} of {w.size} values differ (max |diff| {np.max(np.abs(w.astype(np.float64) - g)):.3g})"
            return f"{name}: {g.dtype}{g.shape} != {w.dtype}{w.shape} or values differ"
    if set(want_a) != set(got_a):
        return f"attributes {sorted(got_a)} != {sorted(want_a)}"
    for name in sorted(want_a):
        if not same_value(want_a[name], got_a[name]):
            return f"attribute {name}: {got_a[name]!r} != {want_a[name]!r}"
    return ""


def diff_history(want, got):
    """'' when the two log histories are equal but for timing keys, else the first difference."""
    want, got = [strip(e) for e in want], [strip(e) for e in got]
    for i, (w, g) in enumerate(zip(want, got)):
        if w != g:
            keys = sorted(k for k in set(w) | set(g) if w.get(k, "<absent>") != g.get(k, "<absent>"))
            return (f"entry {i} (step {w.get('step')}) differs in {keys}: "
                    + ", ".join(f"{k}: {g.get(k, '<absent>')!r} != {w.get(k, '<absent>')!r}" for k in keys[:4]))
    if len(want) != len(got):
        return f"{len(got)} entries, the uninterrupted run has {len(want)}"
    return ""


def diff_json(want, got):
    if want == got:
        return ""
    if isinstance(want, dict) and isinstance(got, dict):
        keys = sorted(k for k in set(want) | set(got) if want.get(k, "<absent>") != got.get(k, "<absent>"))
        return ", ".join(f"{k}: {got.get(k, '<absent>')!r} != {want.get(k, '<absent>')!r}" for k in keys[:4])
    return f"{got!r} != {want!r}"


def compare(ref, out, label):
    """Checks that output_dir `out` holds the uninterrupted run `ref`'s results, bit for bit."""
    state_path = os.path.join(out, "trainer_state.json")
    if not os.path.exists(state_path):
        check(False, f"{label}: no trainer_state.json in the output directory")
        return
    want, got = load_json(os.path.join(ref, "trainer_state.json")), load_json(state_path)
    d = diff_history(want["log_history"], got["log_history"])
    check(not d, f"{label}: log_history: {d}")
    if not d:
        d = diff_json(strip_state(want), strip_state(got))
        check(not d, f"{label}: trainer_state.json: {d}")
    d = diff_h5(os.path.join(ref, "model.h5"), os.path.join(out, "model.h5"))
    check(not d, f"{label}: final model.h5: {d}")
    for name in ("train_results.json", "eval_results.json", "all_results.json"):
        if os.path.exists(os.path.join(ref, name)):
            if not os.path.exists(os.path.join(out, name)):
                check(False, f"{label}: no {name}")
                continue
            d = diff_json(strip(load_json(os.path.join(ref, name))), strip(load_json(os.path.join(out, name))))
            check(not d, f"{label}: {name}: {d}")
    # Every checkpoint both runs have: those written before the interruption too, and those after it.
    mine, theirs = checkpoints(out), checkpoints(ref)
    for step in sorted(set(mine) & set(theirs)):
        if verify(mine[step]):
            continue  # a partial one left by a crash (rotation); its files are not a result
        for name in SAME_IN_EVERY_RUN:
            w, g = os.path.join(theirs[step], name), os.path.join(mine[step], name)
            if not os.path.exists(g):
                check(False, f"{label}: checkpoint-{step} has no {name}")
                continue
            if name.endswith(".h5"):
                d = diff_h5(w, g)
            elif name == "trainer_state.json":
                d = diff_json(strip_state(load_json(w)), strip_state(load_json(g)))
            elif name == "rng_state_0.json":
                # the same state; the identity is each run's own (compared below)
                d = diff_json(without_run_id(load_json(w)), without_run_id(load_json(g)))
            else:
                d = diff_json(load_json(w), load_json(g))
            check(not d, f"{label}: checkpoint-{step}/{name}: {d}")
    # One run, however often interrupted and resumed: one identity in all its checkpoints (rotation
    # deletes only the checkpoints of the run's own identity).
    ids = run_ids(out)
    check(len(ids) <= 1 and all(isinstance(i, str) and re.fullmatch("[0-9a-f]{32}", i) for i in ids),
          f"{label}: the checkpoints' run_id: {sorted(map(str, ids))}, expected one of 32 hex digits")


def run_ids(out):
    """The run_id values of out's whole checkpoints."""
    return {load_json(os.path.join(path, "rng_state_0.json")).get("run_id") for path in checkpoints(out).values()
            if not verify(path) and os.path.exists(os.path.join(path, "rng_state_0.json"))}


def without_run_id(progress):
    progress = dict(progress)
    progress.pop("run_id", None)
    return progress


def first_step(run, step_of, max_steps):
    """The optimizer step of the first entry a (resumed) run logged; max_steps when it logged only
    the training summary; None when it logged nothing."""
    for e in run.logs():
        s = step_of(e)
        if s is not None:
            return s
        if "train_loss" in e:
            return max_steps
        return -1  # an evaluation or anything else before the first step: wrong either way
    return None


def step_map(ref):
    """step_of(entry): the optimizer step of a printed loss entry, found by its epoch (unique per
    step: epoch + steps done in the epoch / steps per epoch) in the uninterrupted run's history."""
    history = load_json(os.path.join(ref, "trainer_state.json"))["log_history"]
    by_epoch = {e["epoch"]: e["step"] for e in history if "loss" in e}

    def step_of(entry):
        if isinstance(entry, dict) and "loss" in entry and "learning_rate" in entry:
            return by_epoch.get(entry.get("epoch"), -1)
        return None

    return step_of


def step_seconds(run, step_of):
    """Median time between two consecutive step log lines of a run (at least 0.1 ms)."""
    times = [t for t, e in run.entries if step_of(e) is not None]
    gaps = sorted(b - a for a, b in zip(times, times[1:]))
    return max(gaps[len(gaps) // 2] if gaps else 1e-3, 1e-4)


# --- the scenarios ----------------------------------------------------------------------------------

def identity(path):
    """What changes when a checkpoint directory is written again: its inode (a new directory is
    renamed into place) and its manifest's modification time."""
    st, m = os.stat(path), os.stat(os.path.join(path, "manifest.json"))
    return st.st_ino, m.st_mtime_ns


def resume_and_compare(cfg, out, ref, step_of, max_steps, label, newest, resume="latest"):
    """Resumes the run in out, checks where it started and that it wrote no checkpoint the
    uninterrupted run had already written by then, and compares its results with ref's."""
    before = {s: identity(p) for s, p in checkpoints(out).items() if not verify(p)}
    resumed = Run(cfg, out, resume=resume)
    rc = resumed.wait()
    check(rc == 0, f"{label}: the resumed run failed ({rc}): {resumed.stderr.strip()[-2000:]}")
    if rc != 0:
        return
    first = first_step(resumed, step_of, max_steps)
    logs = resumed.logs()
    check(newest is not None and first == newest + 1 or newest == max_steps and first == max_steps,
          f"{label}: the newest whole checkpoint was {newest}, the resumed run's first step is {first} "
          f"(first entry {logs[0] if logs else None})")
    for s, ident in sorted(before.items()):
        p = os.path.join(out, f"checkpoint-{s}")
        check(not os.path.isdir(p) or verify(p) or identity(p) == ident,
              f"{label}: the resumed run wrote checkpoint-{s} again (it resumed from checkpoint-{newest}); the "
              f"uninterrupted run saved it once")
    compare(ref, out, label)


def interrupt_and_resume(d, cfg, ref, step_of, max_steps, label, at, sig, delay, want_ckpt=None, attempts=3):
    """Interrupts a run with sig `delay` s after step `at` was logged, resumes it from latest and
    compares. want_ckpt: the checkpoint the interruption should leave as the newest (SIGKILL); the
    run is repeated (at most `attempts` times) when the process outran the signal past it."""
    for attempt in range(attempts):
        out = os.path.join(d, f"{label}.{attempt}")
        run = Run(cfg, out, when=kill_at(step_of, at, sig, delay))
        rc = run.wait()
        newest, _ = newest_valid(out)
        if sig == signal.SIGKILL:
            if rc != -signal.SIGKILL:
                check(False, f"{label}: expected the run to die of SIGKILL, rc {rc}: {run.stderr[-2000:]}")
                return
            check_all_whole(out, label)
            if want_ckpt is not None and newest != want_ckpt:
                print(f"{label}: attempt {attempt + 1}: the newest checkpoint is {newest}, not {want_ckpt}; again")
                continue
        else:
            if rc is not None and rc < 0:
                check(False, f"{label}: the run died of signal {-rc} instead of exiting {128 + sig}")
                return
            check(rc == 128 + sig, f"{label}: exit code {rc}, expected {128 + sig}: {run.stderr[-2000:]}")
            check(newest is not None, f"{label}: no whole checkpoint after {signal.Signals(sig).name}")
            if newest is None:
                return
            check_all_whole(out, label)
            named = set(int(n) for n in re.findall(r"checkpoint-(\d+)", run.text()))
            check(newest in named, f"{label}: the exit message does not name checkpoint-{newest}: "
                                   f"{run.stderr.strip()[-500:]!r}")
            sent_after = getattr(run, "signalled_after", None)
            check(sent_after is not None and newest >= sent_after,
                  f"{label}: signal sent after step {sent_after}, but the newest checkpoint is {newest}")
            logged = [step_of(e) for e in run.logs() if step_of(e) is not None]
            check(logged and max(logged) == newest,
                  f"{label}: steps logged up to {max(logged) if logged else None}, checkpoint at {newest}: "
                  f"the run must stop at the step boundary it saved")
            state = load_json(os.path.join(out, f"checkpoint-{newest}", "trainer_state.json"))
            check(state.get("global_step") == newest, f"{label}: checkpoint-{newest} says global_step "
                                                       f"{state.get('global_step')}")
        break
    else:
        check(False, f"{label}: {attempts} runs all outran the signal past checkpoint-{want_ckpt}")
        return
    resume_and_compare(cfg, out, ref, step_of, max_steps, label, newest)
    print(f"{label}: interrupted after step {getattr(run, 'signalled_after', '?')} by "
          f"{signal.Signals(sig).name}, resumed from checkpoint-{newest}")


def main():
    skip_if_unavailable()
    t_start = time.time()
    with tempfile.TemporaryDirectory() as d:
        cfg = write_config(d, CONFIG)
        ref = os.path.join(d, "uninterrupted")
        run = Run(cfg, ref)
        if run.wait() != 0:
            check(False, f"the uninterrupted run failed ({run.rc}): {run.stderr.strip()[-2000:]}")
            finish()
        step_of = step_map(ref)
        state = load_json(os.path.join(ref, "trainer_state.json"))
        max_steps, save_steps = state["max_steps"], CONFIG["training_args"]["save_steps"]
        # The run's shape, which the scenarios stand on.
        epoch_end = [e["step"] for e in state["log_history"] if "loss" in e and e["epoch"] == 1.0]
        check(epoch_end and epoch_end[0] % save_steps == 0 and epoch_end[0] < max_steps,
              f"the config must save at the end of the first epoch (step {epoch_end}, every {save_steps})")
        logged = [e["step"] for e in state["log_history"] if "loss" in e]
        check(logged == list(range(1, max_steps + 1)), f"loss logged at {logged}, expected every step")
        again = os.path.join(d, "uninterrupted.again")
        if Run(cfg, again).wait() == 0:
            compare(ref, again, "a second uninterrupted run")  # determinism itself, before resume
            check(not (run_ids(ref) & run_ids(again)), "two fresh runs have one run_id")
        check_all_whole(ref, "uninterrupted")
        dt = step_seconds(run, step_of)
        E = epoch_end[0] if epoch_end else 24
        mid = 3 * save_steps  # a checkpoint in the first epoch, not at its start
        inside = 2 * save_steps * ((E + max_steps) // (4 * save_steps))  # in the second epoch

        # (a) mid-epoch: the line of step mid + 1 is printed after checkpoint-mid is complete.
        interrupt_and_resume(d, cfg, ref, step_of, max_steps, "mid-epoch", mid + 1, signal.SIGKILL, 0, mid)
        # (b) at the epoch boundary: checkpoint-E is the last step of the first epoch.
        interrupt_and_resume(d, cfg, ref, step_of, max_steps, "epoch-boundary", E + 1, signal.SIGKILL, 0, E)
        # (c) inside an accumulation cycle: a fraction of a step after step inside + 1 was logged.
        interrupt_and_resume(d, cfg, ref, step_of, max_steps, "inside-accumulation", inside + 1, signal.SIGKILL,
                             dt * float(RNG.uniform(0.2, 0.7)), inside)
        # (d), (e): the run itself saves at the next step boundary.
        interrupt_and_resume(d, cfg, ref, step_of, max_steps, "sigterm", mid + 4, signal.SIGTERM,
                             dt * float(RNG.uniform(0.2, 0.7)))
        interrupt_and_resume(d, cfg, ref, step_of, max_steps, "sigint", E + 5, signal.SIGINT,
                             dt * float(RNG.uniform(0.2, 0.7)))
        # SIGTERM right as a step is logged, when it evaluates (step 5k): saved after the evaluation.
        interrupt_and_resume(d, cfg, ref, step_of, max_steps, "sigterm-at-evaluation", 4 * 5, signal.SIGTERM, 0)

        # A finished run resumed: nothing left to train (checkpoint-max_steps is the newest).
        out = os.path.join(d, "finished")
        shutil.copytree(ref, out)
        resume_and_compare(cfg, out, ref, step_of, max_steps, "after-the-end", max_steps)

        # A checkpoint named explicitly, copied into a fresh output directory.
        out = os.path.join(d, "explicit")
        os.makedirs(out)
        src = os.path.join(out, f"checkpoint-{E}")
        shutil.copytree(os.path.join(ref, f"checkpoint-{E}"), src)
        resume_and_compare(cfg, out, ref, step_of, max_steps, "explicit checkpoint", E, resume=src)

        # ... and a corrupt one named explicitly: an error naming the file, not a warning.
        out = os.path.join(d, "corrupt")
        os.makedirs(out)
        src = os.path.join(out, f"checkpoint-{mid}")
        shutil.copytree(os.path.join(ref, f"checkpoint-{mid}"), src)
        victim = os.path.join(src, "optimizer.h5")
        if not os.path.exists(victim):
            check(False, f"corrupt: checkpoint-{mid} has no optimizer.h5")
            finish()
        flip_byte(victim, os.path.getsize(victim) // 2)
        r = Run(cfg, out, resume=src)
        rc = r.wait()
        check(rc == 1, f"corrupt: resuming from a checkpoint with a flipped byte: exit code {rc}, expected 1")
        check("optimizer.h5" in r.stderr and f"checkpoint-{mid}" in r.stderr,
              f"corrupt: the error does not name checkpoint-{mid}/optimizer.h5: {r.stderr.strip()[-500:]!r}")
        check(not r.logs(), "corrupt: the run trained from a corrupt checkpoint")
    print(f"resume scenarios: {time.time() - t_start:.1f} s")
    finish()


if __name__ == "__main__":
    main()
