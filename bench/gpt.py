#!/usr/bin/python3
"""Side-by-side benchmark of the GPT example (examples/configs/fortunes_gpt.json: 0.84M parameters,
batch 32, context 128, AdamW, clipping): ctrainer's `train` with evaluation, saving and logging off
against the PyTorch peer (shared/bench/peer_torch_gpt.py: nanoGPT's architecture from
tests/oracle/gpt_reference.py, the same settings) in the same run, on the fortunes corpus tokenized
here. Prints training samples/s of both, their ratio, each side's peak RSS, and the level ctrainer's
kernels ran at (--level sets it for both sides, as bench/fmnist.py does).

Usage: bench/gpt.py [--steps N] [--threads N] [--build DIR] [--peer PATH]
                    [--wait-policy PASSIVE|ACTIVE|default] [--openblas detect|environment] [--level best|v2|v3|v4]"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

from benchlib import add_level_arg, add_openblas_arg, ctrainer_level, level_env, openblas_env

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=30)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--build", default=os.path.join(root, "build"))
ap.add_argument("--wait-policy", default="PASSIVE", choices=["PASSIVE", "ACTIVE", "default"])
add_openblas_arg(ap)
add_level_arg(ap)
ap.add_argument("--peer", default=os.path.join(root, "..", "shared", "bench", "peer_torch_gpt.py"))
a = ap.parse_args()

env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
if a.wait_policy != "default":
    env["OMP_WAIT_POLICY"] = a.wait_policy
env, blas_note = openblas_env(env, a.openblas)
env, blas_note = level_env(env, a.level, blas_note)
if not os.path.exists(a.peer):
    sys.exit(f"PyTorch peer not found at {a.peer} (pass --peer)")
ctrainer = os.path.join(a.build, "ctrainer")
corpus = [f for f in sorted(glob.glob("/usr/share/games/fortunes/*")) if os.path.isfile(f) and not f.endswith(".dat")]
if not corpus:
    sys.exit("no fortunes corpus in /usr/share/games/fortunes (install the fortunes package)")


def run_rss(cmd):
    """Runs cmd under env; returns its stdout and the peak RSS in MiB of that process alone."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    out = p.stdout.read()
    err = p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    if status != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{err}")
    return out, usage.ru_maxrss / 1024


with tempfile.TemporaryDirectory() as tmp:
    train, val = os.path.join(tmp, "train.bin"), os.path.join(tmp, "val.bin")
    subprocess.run([ctrainer, "data", "tokenize", "--input", *corpus, "--output", train, "--val-output", val, "--eot"],
                   check=True, capture_output=True, env=env)
    isa = ctrainer_level(ctrainer, env)
    out_dir = os.path.join(tmp, "run")
    _, ours_rss = run_rss([ctrainer, "train", os.path.join(root, "examples", "configs", "fortunes_gpt.json"),
                           "--set", f'data.train.path="{train}"', "--set", f'data.eval.path="{val}"',
                           "--output_dir", out_dir, "--max_steps", str(a.steps + 3), "--eval_strategy", "no",
                           "--eval_on_start", "false", "--save_strategy", "no", "--logging_strategy", "no",
                           "--set", "training_args.report_to=[]"])
    results = json.load(open(os.path.join(out_dir, "train_results.json")))
    peer_out, peer_rss = run_rss(["/usr/bin/python3", a.peer, root, train, str(a.steps), str(a.threads), "32"])
    peer = json.loads(peer_out.strip().splitlines()[-1])

ours = results["train_samples_per_second"]
print(f"GPT example (fortunes_gpt.json), batch 32, context 128, {a.threads} threads, OMP_WAIT_POLICY={a.wait_policy}; "
      f"{blas_note}; ctrainer kernels {isa}")
print(f"{'':24}{'ctrainer':>12}{'pytorch':>12}{'ratio':>8}")
print(f"{'train_samples_per_s':24}{ours:>12.1f}{peer['train_samples_per_s']:>12.1f}{ours / peer['train_samples_per_s']:>8.2f}")
print(f"{'peak_rss_mib':24}{ours_rss:>12.0f}{peer_rss:>12.0f}{ours_rss / peer_rss:>8.2f}")
print(json.dumps({"model": "gpt", "threads": a.threads, "wait_policy": a.wait_policy, "level": a.level,
                  "ctrainer_kernels": isa, "ctrainer_train_samples_per_s": ours, "pytorch": peer,
                  "train_ratio": round(ours / peer["train_samples_per_s"], 2), "ctrainer_peak_rss_mib": round(ours_rss),
                  "pytorch_peak_rss_mib": round(peer_rss)}))
