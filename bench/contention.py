#!/usr/bin/python3
"""Robustness under a competing load: the same benchmark run quiet and with a load this program
starts and stops itself, and each side's slowdown factor (loaded time / quiet time).

The load is --load cores of busy work in separate processes: one process per started core, each
busy for its share of every --load-period milliseconds and asleep for the rest (1.3 = one process
always busy, one busy 30% of the time), as a build or another job sharing the machine would take
it. The processes run at the benchmark's own priority and are stopped (and their CPU time read)
before the next quiet measurement; the figure printed is the cores they really took.

The measurements are those of bench/gpt.py (GPT example: ctrainer, the PyTorch peer and, with
--llmc, llm.c's CPU trainer; median ms per step, PyTorch's from its samples/s) and bench/fmnist.py
(the MLP or CNN: training samples/s), run as they are with the options given here; --rounds N
repeats quiet and loaded, the order reversed every other round.

Usage: bench/contention.py [--workload gpt|mlp|cnn] [--load CORES] [--load-period MS] [--rounds N]
                           [--threads N] [--steps N] [--epochs N] [--build DIR] [--llmc DIR]
                           [--wait-policy PASSIVE|ACTIVE|default] [--level best|v2|v3|v4]"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--workload", default="gpt", choices=["gpt", "mlp", "cnn"])
ap.add_argument("--load", type=float, default=1.3, help="cores the competing load keeps busy (default 1.3)")
ap.add_argument("--load-period", type=float, default=20.0,
                help="milliseconds of one busy-then-idle cycle of a partly busy load process (default 20)")
ap.add_argument("--rounds", type=int, default=2)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--steps", type=int, default=20, help="timed steps of the GPT sides")
ap.add_argument("--epochs", type=int, default=1, help="epochs of the MLP or CNN")
ap.add_argument("--build", default=os.path.join(here, "..", "build"))
ap.add_argument("--llmc", help="an llm.c checkout: adds llm.c's CPU trainer to the GPT workload")
ap.add_argument("--wait-policy", default="PASSIVE", choices=["PASSIVE", "ACTIVE", "default"])
ap.add_argument("--level", default="best", choices=["best", "v2", "v3", "v4"])
a = ap.parse_args()
if a.load <= 0:
    ap.error("--load must be more than 0 cores")
if a.load_period <= 0:
    ap.error("--load-period must be more than 0 ms")
for name in ("rounds", "threads", "steps", "epochs"):
    if getattr(a, name) < 1:
        ap.error(f"--{name} must be at least 1")
if a.llmc and a.workload != "gpt":
    ap.error("--llmc applies to the GPT workload only")


def busy(duty, period, parent):
    """A load process's body: busy for duty of every period seconds, asleep for the rest, until
    stopped or its parent is gone (a benchmark killed by a signal leaves no load behind)."""
    while os.getppid() == parent:
        start = time.monotonic()
        while time.monotonic() - start < duty * period:
            pass
        if duty < 1:
            time.sleep((1 - duty) * period)


class Load:
    """--load cores of busy processes, started on enter and stopped on exit; .cores is the CPU
    time they took over the wall time they ran."""

    def __enter__(self):
        self.start = time.monotonic()
        self.pids = []
        whole, part = int(a.load), a.load - int(a.load)
        parent = os.getpid()
        for duty in [1.0] * whole + ([part] if part > 1e-3 else []):
            pid = os.fork()
            if pid == 0:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                try:
                    busy(duty, a.load_period / 1000, parent)
                finally:
                    os._exit(0)
            self.pids.append(pid)
        return self

    def __exit__(self, *exc):
        cpu = 0.0
        for pid in self.pids:
            os.kill(pid, signal.SIGTERM)
            _, _, usage = os.wait4(pid, 0)
            cpu += usage.ru_utime + usage.ru_stime
        self.cores = cpu / (time.monotonic() - self.start)
        return False


def measure():
    """One run of the workload's benchmark; returns {side: step time in ms} (GPT) or {side: ms per
    1000 training samples} (MLP, CNN), so that larger is slower for every side."""
    common = ["--threads", str(a.threads), "--build", a.build, "--wait-policy", a.wait_policy, "--level", a.level]
    if a.workload == "gpt":
        cmd = ["/usr/bin/python3", os.path.join(here, "gpt.py"), "--steps", str(a.steps), "--rounds", "1", *common]
        if a.llmc:
            cmd += ["--llmc", a.llmc]
    else:
        cmd = ["/usr/bin/python3", os.path.join(here, "fmnist.py"), "--model", a.workload, "--epochs", str(a.epochs),
               *common]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stdout}{out.stderr}")
    lines = out.stdout.strip().splitlines()
    rec = json.loads(lines[-1])
    if a.workload == "gpt":
        res = {"ctrainer": rec["ctrainer_ms_per_step"],
               "pytorch": 1000 * rec["pytorch"]["batch"] / rec["pytorch"]["train_samples_per_s"]}
        if "llmc_ms_per_step" in rec:
            res["llm.c"] = rec["llmc_ms_per_step"]
        return res, lines[0] if a.llmc else None, rec["ctrainer_kernels"]
    return ({"ctrainer": 1e6 / rec["ctrainer"]["train_samples_per_s"],
             "pytorch": 1e6 / rec["pytorch"]["train_samples_per_s"]}, None, rec["ctrainer_kernels"])


unit = "ms per step" if a.workload == "gpt" else "ms per 1000 samples"
ncpu = os.cpu_count()
print(f"{a.workload} workload, {a.threads} threads, OMP_WAIT_POLICY={a.wait_policy}, level {a.level}; "
      f"competing load {a.load:g} cores (period {a.load_period:g} ms) on {ncpu} CPUs; load average "
      f"{os.getloadavg()[0]:.2f} at the start")
rows = []
for r in range(a.rounds):
    order = ["quiet", "loaded"] if r % 2 == 0 else ["loaded", "quiet"]
    got = {}
    for cond in order:
        load_avg = os.getloadavg()[0]
        if cond == "loaded":
            with Load() as load:
                got[cond], note, isa = measure()
            cores = load.cores
        else:
            got[cond], note, isa = measure()
            cores = 0.0
        got[cond + "_load_cores"], got[cond + "_load_average"] = cores, load_avg
    if r == 0:
        print(f"ctrainer kernels {isa}" + (f"; {note}" if note else ""))
    sides = list(got["quiet"])
    print(f"round {r + 1} of {a.rounds} (order: {', '.join(order)}; the load took {got['loaded_load_cores']:.2f} "
          f"cores; load average {got['quiet_load_average']:.2f} before quiet, {got['loaded_load_average']:.2f} "
          f"before loaded)")
    print(f"{unit:24}" + "".join(f"{s:>12}" for s in sides))
    for cond in ("quiet", "loaded"):
        print(f"{cond:24}" + "".join(f"{got[cond][s]:>12.2f}" for s in sides))
    slow = {s: got["loaded"][s] / got["quiet"][s] for s in sides}
    print(f"{'slowdown (loaded/quiet)':24}" + "".join(f"{slow[s]:>12.2f}" for s in sides))
    rows.append(slow)
    print(json.dumps({"workload": a.workload, "threads": a.threads, "wait_policy": a.wait_policy, "level": a.level,
                      "ctrainer_kernels": isa, "load": a.load, "load_period_ms": a.load_period, "round": r + 1,
                      "order": order, "load_cores_taken": round(got["loaded_load_cores"], 2),
                      "quiet": {s: round(v, 2) for s, v in got["quiet"].items()},
                      "loaded": {s: round(v, 2) for s, v in got["loaded"].items()},
                      "slowdown": {s: round(v, 2) for s, v in slow.items()}}))
if a.rounds > 1:
    print("median slowdown: " + ", ".join(f"{s} {statistics.median(r[s] for r in rows):.2f}" for s in rows[0]))
