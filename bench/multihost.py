#!/usr/bin/python3
"""Data parallelism across hosts with a slow link: what one link delay costs an optimizer step.

Each "host" is a network namespace of this machine with one TAP interface; a switch in this program
forwards Ethernet frames between them, holding each frame for --delay-ms before it passes it on (a
link with that one-way delay; the kernel's netem qdisc would do the same, but it is often not built
into the kernels of virtual machines). `mpirun` runs in the first namespace and starts one rank in
each of the others through a launch agent that enters the namespace (what ssh does between hosts);
MPI's traffic goes over TCP on the TAP interfaces only.

For each host count the Fashion-MNIST MLP (examples/configs/fashion_mnist_mlp.json, no evaluation, no
checkpoints) trains --steps optimizer steps without and with the delay. A step's extra time divided by
the delay is the number of link delays on a step's critical path: the round trips its collectives
make in sequence. A step of DDP needs the gradient all-reduce (its buckets overlap the backward pass
and each other) and the step's one agreement (loss totals, nan_inf_policy verdict, stop signal in one
all-reduce); each further small collective per step would add its own delays here.

Needs root (namespaces, TAP devices). Everything it creates is named ctmh<pid>-* and removed at exit.
Usage: bench/multihost.py [--hosts 2 3] [--delay-ms 20] [--steps 40] [--repeat 2] [--build DIR]"""
import argparse
import atexit
import collections
import fcntl
import json
import os
import select
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

from benchlib import ctrainer_level

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--hosts", type=int, nargs="+", default=[2, 3])
ap.add_argument("--delay-ms", type=float, default=20.0, help="one-way delay of every frame")
ap.add_argument("--steps", type=int, default=40, help="optimizer steps per run")
ap.add_argument("--repeat", type=int, default=2)
ap.add_argument("--build", default=os.path.join(here, "..", "build"))
ap.add_argument("--config", default=os.path.join(here, "..", "examples", "configs", "fashion_mnist_mlp.json"))
ap.add_argument("--batch", type=int, default=64, help="per_device_train_batch_size of each rank")
ap.add_argument("--iterations", type=int, default=20, help="collectives timed by bench_allreduce")
a = ap.parse_args()

ctrainer = os.path.abspath(os.path.join(a.build, "ctrainer"))
allreduce = os.path.abspath(os.path.join(a.build, "bench", "bench_allreduce"))
mpirun = shutil.which("mpirun")
for path, what in ((ctrainer, "ctrainer"), (allreduce, "bench_allreduce (configure with -DCTRAINER_BENCH=ON)")):
    if not os.path.exists(path):
        sys.exit(f"{what} not found at {path} (pass --build)")
if not mpirun or not shutil.which("ip"):
    sys.exit("needs mpirun and ip (iproute2)")
if os.geteuid() != 0:
    sys.exit("needs root: it creates network namespaces and TAP devices")
print(f"ctrainer kernels: {ctrainer_level(ctrainer, os.environ)}", flush=True)

PREFIX = f"ctmh{os.getpid()}"
SUBNET = "10.77.0"
MTU = 9000


def ip(*args):
    subprocess.run(["ip", *args], check=True)


class Switch:
    """A hub with MAC learning between TAP devices, every frame delivered delay seconds after it
    arrived. The delay is constant, so one FIFO in arrival order is also the delivery order."""

    def __init__(self, delay):
        self.delay, self.fds, self.where = delay, [], {}
        self.queue, self.lock, self.stop = collections.deque(), threading.Lock(), False

    def add_tap(self, name):
        fd = os.open("/dev/net/tun", os.O_RDWR)
        IFF_TAP, IFF_NO_PI, TUNSETIFF = 0x0002, 0x1000, 0x400454CA
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TAP | IFF_NO_PI))
        self.fds.append(fd)

    def run(self):
        while not self.stop:
            timeout = 0.05
            if self.queue:
                timeout = max(0.0, self.queue[0][0] - time.monotonic())
            ready, _, _ = select.select(self.fds, [], [], timeout)
            now = time.monotonic()
            for fd in ready:
                frame = os.read(fd, 65536)
                self.where[frame[6:12]] = fd  # the source MAC lives behind this port
                self.queue.append((now + self.delay, fd, frame))
            while self.queue and self.queue[0][0] <= time.monotonic():
                _, src, frame = self.queue.popleft()
                dst = self.where.get(frame[0:6])
                for fd in [dst] if dst is not None else self.fds:
                    if fd != src:
                        try:
                            os.write(fd, frame)
                        except OSError:
                            pass  # a port that went away drops the frame, as a cable would


def make_hosts(n, switch):
    """Namespaces PREFIX-h1..hn, each with a TAP of the switch as eth0 at SUBNET.k."""
    for k in range(1, n + 1):
        ns, tap = f"{PREFIX}-h{k}", f"{PREFIX}t{k}"  # at most 15 characters, as interface names are
        ip("netns", "add", ns)
        switch.add_tap(tap)
        ip("link", "set", tap, "netns", ns)
        ip("-n", ns, "link", "set", tap, "name", "eth0")
        ip("-n", ns, "link", "set", "eth0", "mtu", str(MTU))
        ip("-n", ns, "addr", "add", f"{SUBNET}.{k}/24", "dev", "eth0")
        ip("-n", ns, "link", "set", "eth0", "up")
        ip("-n", ns, "link", "set", "lo", "up")


def remove_hosts():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(PREFIX + "-"):  # only the ones this run made
            subprocess.run(["ip", "netns", "del", name])


def launch_agent(tmp):
    """What mpirun runs instead of ssh: `agent HOST COMMAND...` runs COMMAND in HOST's namespace,
    under a host name of its own (MPI tells hosts apart by name)."""
    path = os.path.join(tmp, "agent.sh")
    with open(path, "w") as f:
        f.write(f'#!/bin/sh\nk=${{1##*.}}\nshift\n'
                f'exec ip netns exec {PREFIX}-h$k unshare --uts sh -c "hostname {PREFIX}-h$k; $*"\n')
    os.chmod(path, 0o755)
    return path


def mpirun_hosts(n, agent, argv):
    """argv under mpirun with one rank on each of hosts 1..n (MPI over their TAP interfaces only)."""
    hosts = ",".join(f"{SUBNET}.{k}:1" for k in range(1, n + 1))
    cmd = ["ip", "netns", "exec", f"{PREFIX}-h1", "unshare", "--uts", "sh", "-c",
           f"hostname {PREFIX}-h1 && exec \"$0\" \"$@\"", mpirun, "--host", hosts, "--bind-to", "none",
           "--mca", "plm_rsh_agent", agent, "--mca", "btl", "tcp,self",
           "--mca", "btl_tcp_if_include", f"{SUBNET}.0/24", "--mca", "oob_tcp_if_include", f"{SUBNET}.0/24",
           "-x", "OMP_NUM_THREADS=1", "-x", "PATH", "-x", "LD_LIBRARY_PATH", *argv]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=os.path.join(here, ".."))
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r.stdout


def train_step_ms(tmp, n, agent, label):
    out = os.path.join(tmp, label)
    mpirun_hosts(n, agent, [
        ctrainer, "train", a.config, "--output_dir", out, "--overwrite_output_dir", "true", "--max_steps", str(a.steps),
        "--per_device_train_batch_size", str(a.batch), "--eval_strategy", "no", "--save_strategy", "no",
        "--logging_steps", "100000", "--report_to", "none", "--log_level", "warning"])
    with open(os.path.join(out, "train_results.json")) as f:
        res = json.load(f)
    shutil.rmtree(out)
    return 1000.0 / res["train_steps_per_second"]


def collectives_ms(n, agent):
    """bench_allreduce's figures (ms): the MLP's gradient all-reduce the Trainer's way, and the step's
    one agreement."""
    out = mpirun_hosts(n, agent, [allreduce, "235146", str(a.iterations)])
    r = json.loads(out.strip().splitlines()[-1])
    return {"gradients": r["ct_comm_allreduce_s"] * 1e3, "agreement": r["ct_comm_small_s"] * 1e3}


def with_hosts(n, delay, fn):
    """fn() while hosts 1..n are up behind a switch of the given one-way delay (ms)."""
    switch = Switch(delay / 1000.0)
    make_hosts(n, switch)
    thread = threading.Thread(target=switch.run, daemon=True)
    thread.start()
    try:
        return fn()
    finally:
        switch.stop = True
        thread.join()
        remove_hosts()
        for fd in switch.fds:
            os.close(fd)


def delays(fast, slow):
    return (statistics.median(slow) - statistics.median(fast)) / a.delay_ms


def main():
    tmp = tempfile.mkdtemp(prefix="ct-multihost-")
    atexit.register(shutil.rmtree, tmp, True)
    atexit.register(remove_hosts)
    agent = launch_agent(tmp)
    print(f"{a.steps} steps of the MLP, batch {a.batch} per rank, 1 rank per host, one-way delay {a.delay_ms} ms")
    for n in a.hosts:
        step = {0.0: [], a.delay_ms: []}
        comm = {0.0: [], a.delay_ms: []}
        for rep in range(a.repeat):
            for d in step:
                step[d].append(with_hosts(n, d, lambda: train_step_ms(tmp, n, agent, f"h{n}-d{d}-r{rep}")))
                comm[d].append(with_hosts(n, d, lambda: collectives_ms(n, agent)))
        fast, slow = step[0.0], step[a.delay_ms]
        print(f"{n} hosts: optimizer step {statistics.median(fast):.1f} ms {[round(x, 1) for x in fast]} "
              f"-> {statistics.median(slow):.1f} ms {[round(x, 1) for x in slow]} with the delay: "
              f"{delays(fast, slow):.2f} link delays per step", flush=True)
        for what in ("gradients", "agreement"):
            fast = [c[what] for c in comm[0.0]]
            slow = [c[what] for c in comm[a.delay_ms]]
            print(f"  {'gradient all-reduce' if what == 'gradients' else 'step agreement':20s} "
                  f"{statistics.median(fast):7.2f} ms -> {statistics.median(slow):7.1f} ms: "
                  f"{delays(fast, slow):.2f} link delays", flush=True)


main()
