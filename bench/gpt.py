#!/usr/bin/python3
"""Side-by-side benchmark of the GPT example (examples/configs/fortunes_gpt.json: 0.84M parameters,
batch 32, context 128, AdamW, clipping): ctrainer's `train` with evaluation, saving and logging off
against the PyTorch peer (shared/bench/peer_torch_gpt.py: nanoGPT's architecture from
tests/oracle/gpt_reference.py, the same settings) and, with --llmc, llm.c's CPU trainer
(train_gpt2.c of the checkout given, compiled here with its Makefile's flags; bench/llmc_peer.py)
on a randomly initialised model of the same shape, in the same run, on the fortunes corpus
tokenized here. Prints training samples/s of ctrainer and PyTorch and their ratio, the median
milliseconds per step after --warmup steps of ctrainer and llm.c and their ratio (llm.c / ctrainer),
each side's peak RSS, the level ctrainer's kernels ran at (--level sets it for every side, as
bench/fmnist.py does), and what the target (training 2x PyTorch) would take of that level's
multiply-add peak on these threads (bench_sgemm measures it; the model's FLOPs alone). --rounds N
repeats the measurement, the sides' order reversed every other round, so that neither always runs
after the other on a machine whose load changes.

Step times are the intervals between the arrivals of successive step lines (ctrainer logs every
step for this; llm.c's driver flushes a line per step), so both are measured the same way,
including whatever each does between steps.

Usage: bench/gpt.py [--steps N] [--warmup N] [--rounds N] [--threads N] [--build DIR] [--peer PATH]
                    [--llmc LLMC_CHECKOUT_OR_TRAIN_GPT2_C]
                    [--wait-policy PASSIVE|ACTIVE|default] [--openblas detect|environment] [--level best|v2|v3|v4]"""
import argparse
import ast
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import llmc_peer
from benchlib import (TARGETS, add_level_arg, add_openblas_arg, ctrainer_level, level_env, openblas_env,
                      run_json, share_of_peak)

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=30, help="timed steps of each side")
ap.add_argument("--warmup", type=int, default=3, help="steps before the timed ones")
ap.add_argument("--rounds", type=int, default=1)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--build", default=os.path.join(root, "build"))
ap.add_argument("--wait-policy", default="PASSIVE", choices=["PASSIVE", "ACTIVE", "default"])
add_openblas_arg(ap)
add_level_arg(ap)
ap.add_argument("--peer", default=os.path.join(root, "..", "shared", "bench", "peer_torch_gpt.py"))
ap.add_argument("--llmc", help="an llm.c checkout (or its train_gpt2.c): adds llm.c's CPU trainer as a peer")
a = ap.parse_args()
for name in ("steps", "warmup", "rounds", "threads"):
    if getattr(a, name) < 1:
        ap.error(f"--{name} must be at least 1")

env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
if a.wait_policy != "default":
    env["OMP_WAIT_POLICY"] = a.wait_policy
env, blas_note = openblas_env(env, a.openblas)
env, blas_note = level_env(env, a.level, blas_note)
if not os.path.exists(a.peer):
    sys.exit(f"PyTorch peer not found at {a.peer} (pass --peer)")
ctrainer = os.path.join(a.build, "ctrainer")
if not os.access(ctrainer, os.X_OK):
    sys.exit(f"no ctrainer program at {ctrainer} (build it, or pass --build DIR)")
try:
    llmc_src = llmc_peer.source(a.llmc) if a.llmc else None
except ValueError as e:
    ap.error(str(e))
if not llmc_src:
    print("llm.c peer skipped: give --llmc LLMC_CHECKOUT (github.com/karpathy/llm.c) to run its CPU trainer too")
corpus = [f for f in sorted(glob.glob("/usr/share/games/fortunes/*")) if os.path.isfile(f) and not f.endswith(".dat")]
if not corpus:
    sys.exit("no fortunes corpus in /usr/share/games/fortunes (install the fortunes package)")
config_path = os.path.join(root, "examples", "configs", "fortunes_gpt.json")
config = json.load(open(config_path))
model, targs = config["model"], config["training_args"]
batch, context = targs["per_device_train_batch_size"], config["data"]["train"]["context"]
# Training FLOPs per sample, the fewest the model needs: every linear layer's multiply-adds (the
# attention's four d x d maps, the MLP's d x 4d and 4d x d, the LM head's d x vocabulary) and the
# causal attention's (query t against keys 0..t, scores and the weighted sum), three times over
# (forward, input gradient, weight gradient).
d, layers = model["n_embd"], model["n_layer"]
macs_per_token = layers * 12 * d * d + d * model["vocab_size"] + layers * (context + 1) * d
train_flops_per_sample = 2 * 3 * context * macs_per_token
TARGET = TARGETS["train"]["gpt"]
if llmc_src and (not model.get("bias", True) or model.get("dropout", 0.0) != 0.0):
    sys.exit(f"{config_path}: llm.c's GPT-2 has biases and no dropout; this model has bias={model.get('bias', True)}, "
             f"dropout={model.get('dropout', 0.0)}")


def run_timed(cmd, marker=None):
    """Runs cmd under env and times the arrival of each stdout line that starts with marker (one
    a training step), if given. Returns (stdout, stderr, the arrival times, the peak RSS in MiB of
    that process alone); exits with its output if it fails."""
    with tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        lines, arrivals = [], []
        for line in iter(p.stdout.readline, ""):
            if marker and line.startswith(marker):
                arrivals.append(time.monotonic())
            lines.append(line)
        _, status, usage = os.wait4(p.pid, 0)  # its rusage alone, which Popen.wait does not give
        p.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        errors = err.read()
    if p.returncode != 0:
        how = f"killed by signal {-p.returncode}" if p.returncode < 0 else f"exit status {p.returncode}"
        sys.exit(f"failed ({how}): {' '.join(cmd)}\n{''.join(lines[-20:])}{errors}")
    return "".join(lines), errors, arrivals, usage.ru_maxrss / 1024


def median_step_ms(arrivals, what):
    """The median interval between step lines after the warm-up steps (line k arrives when step k
    ends, so interval k is step k + 1), in milliseconds."""
    intervals = [b - t for t, b in zip(arrivals, arrivals[1:])][a.warmup:]
    if len(intervals) < a.steps:
        sys.exit(f"{what}: {len(arrivals)} step lines, expected {a.warmup + a.steps + 1}")
    return 1000 * statistics.median(intervals)


def run_ctrainer(out_dir, train, val):
    out, err, arrivals, rss = run_timed(
        [ctrainer, "train", config_path, "--set", f'data.train.path="{train}"', "--set", f'data.eval.path="{val}"',
         "--output_dir", out_dir, "--overwrite_output_dir", "true", "--max_steps", str(a.warmup + a.steps + 1),
         "--eval_strategy", "no", "--eval_on_start", "false", "--save_strategy", "no",
         "--logging_strategy", "steps", "--logging_steps", "1", "--set", "training_args.report_to=[]"], "{'loss'")
    results = json.load(open(os.path.join(out_dir, "train_results.json")))
    params = next((int(line.split("=")[1].replace(",", "")) for line in err.splitlines()
                   if "Number of trainable parameters" in line), None)
    losses = [ast.literal_eval(line)["loss"] for line in out.splitlines() if line.startswith("{'loss'")]
    return {"train_samples_per_s": results["train_samples_per_second"], "ms_per_step": median_step_ms(arrivals, "ctrainer"),
            "peak_rss_mib": rss, "parameters": params, "loss_first": losses[0], "loss_last": losses[-1]}


def run_pytorch(train):
    out, _, _, rss = run_timed(["/usr/bin/python3", a.peer, root, train, str(a.steps), str(a.threads), str(batch)])
    return dict(json.loads(out.strip().splitlines()[-1]), peak_rss_mib=rss)


def run_llmc(exe, checkpoint, tokens):
    out, _, arrivals, rss = run_timed(
        [exe, checkpoint, tokens, str(batch), str(context), str(a.warmup + a.steps + 1), str(targs["learning_rate"]),
         str(targs.get("adam_beta1", 0.9)), str(targs.get("adam_beta2", 0.999)), str(targs.get("adam_epsilon", 1e-8)),
         str(targs.get("weight_decay", 0.0))], "step ")
    steps = llmc_peer.step_lines(out)
    # llm.c's own clock around each step, as a check on the arrival times.
    own = statistics.median(ms for _, _, ms in steps[a.warmup + 1:])
    return {"ms_per_step": median_step_ms(arrivals, "llm.c"), "own_ms_per_step": own, "peak_rss_mib": rss,
            "parameters": llmc_peer.num_parameters(out), "loss_first": steps[0][1], "loss_last": steps[-1][1]}


with tempfile.TemporaryDirectory() as tmp:
    train, val = os.path.join(tmp, "train.bin"), os.path.join(tmp, "val.bin")
    subprocess.run([ctrainer, "data", "tokenize", "--input", *corpus, "--output", train, "--val-output", val, "--eot"],
                   check=True, capture_output=True, env=env)
    isa = ctrainer_level(ctrainer, env)
    peak = run_json([os.path.join(a.build, "bench", "bench_sgemm"), str(a.threads)], env)["peak_gflops"]
    sides = {"ctrainer": lambda: run_ctrainer(tempfile.mkdtemp(dir=tmp), train, val), "pytorch": lambda: run_pytorch(train)}
    if llmc_src:
        exe, llmc_flags = llmc_peer.build(llmc_src, a.level, tmp)
        checkpoint, tokens = os.path.join(tmp, "gpt_llmc.bin"), os.path.join(tmp, "train_llmc.bin")
        llmc_params = llmc_peer.write_checkpoint(checkpoint, model, targs.get("seed", 42))
        llmc_peer.write_tokens(train, tokens)
        sides["llmc"] = lambda: run_llmc(exe, checkpoint, tokens)
        print(f"llm.c: {llmc_src}, built with {llmc_flags}")
    print(f"GPT example (fortunes_gpt.json), batch {batch}, context {context}, {a.threads} threads, "
          f"OMP_WAIT_POLICY={a.wait_policy}; {blas_note}; ctrainer kernels {isa}")
    for r in range(a.rounds):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        res = {name: sides[name]() for name in order}
        ours, torch = res["ctrainer"], res["pytorch"]
        if "llmc" in res and not ours["parameters"] == res["llmc"]["parameters"] == llmc_params:
            sys.exit(f"the models differ: ctrainer has {ours['parameters']} parameters, llm.c read "
                     f"{res['llmc']['parameters']} of the {llmc_params} written")
        print(f"round {r + 1} of {a.rounds} (order: {', '.join(order)})")
        print(f"{'':24}{'ctrainer':>12}{'pytorch':>12}{'ratio':>8}")
        print(f"{'train_samples_per_s':24}{ours['train_samples_per_s']:>12.1f}{torch['train_samples_per_s']:>12.1f}"
              f"{ours['train_samples_per_s'] / torch['train_samples_per_s']:>8.2f}")
        print(f"{'peak_rss_mib':24}{ours['peak_rss_mib']:>12.0f}{torch['peak_rss_mib']:>12.0f}"
              f"{ours['peak_rss_mib'] / torch['peak_rss_mib']:>8.2f}")
        share = TARGET * share_of_peak(torch["train_samples_per_s"], train_flops_per_sample, peak * 1e9)
        print(f"{TARGET:g}x PyTorch would take {share:.0%} of the level's multiply-add peak ({peak:.0f} GFLOP/s, "
              f"{train_flops_per_sample / 1e6:.0f} MFLOP a sample); ctrainer reached "
              f"{share_of_peak(ours['train_samples_per_s'], train_flops_per_sample, peak * 1e9):.0%}")
        record = {"model": "gpt", "threads": a.threads, "wait_policy": a.wait_policy, "level": a.level,
                  "ctrainer_kernels": isa, "round": r + 1, "order": order,
                  "ctrainer_train_samples_per_s": ours["train_samples_per_s"],
                  "pytorch": {k: v for k, v in torch.items() if k != "peak_rss_mib"},
                  "train_ratio": round(ours["train_samples_per_s"] / torch["train_samples_per_s"], 2),
                  "ctrainer_peak_rss_mib": round(ours["peak_rss_mib"]), "pytorch_peak_rss_mib": round(torch["peak_rss_mib"]),
                  "ctrainer_ms_per_step": round(ours["ms_per_step"], 1), "peak_gflops": peak,
                  "train_mflop_per_sample": round(train_flops_per_sample / 1e6, 1),
                  "train_target_share_of_peak": round(share, 3)}
        if "llmc" in res:
            llmc = res["llmc"]
            print(f"{'':24}{'ctrainer':>12}{'llm.c':>12}{'llm.c/ct':>10}")
            print(f"{'ms_per_step (median)':24}{ours['ms_per_step']:>12.1f}{llmc['ms_per_step']:>12.1f}"
                  f"{llmc['ms_per_step'] / ours['ms_per_step']:>10.2f}")
            print(f"{'peak_rss_mib':24}{ours['peak_rss_mib']:>12.0f}{llmc['peak_rss_mib']:>12.0f}"
                  f"{llmc['peak_rss_mib'] / ours['peak_rss_mib']:>10.2f}")
            print(f"{'loss, first -> last':24}{ours['loss_first']:>6.2f} ->{ours['loss_last']:.2f}"
                  f"{llmc['loss_first']:>6.2f} ->{llmc['loss_last']:.2f}")
            print(f"llm.c's own clock around its step: {llmc['own_ms_per_step']:.1f} ms (median)")
            record.update(llmc_ms_per_step=round(llmc["ms_per_step"], 1),
                          llmc_own_ms_per_step=round(llmc["own_ms_per_step"], 1),
                          llmc_peak_rss_mib=round(llmc["peak_rss_mib"]),
                          llmc_step_ratio=round(llmc["ms_per_step"] / ours["ms_per_step"], 2), llmc_flags=llmc_flags)
        print(json.dumps(record))
