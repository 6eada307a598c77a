#!/usr/bin/python3
"""GPT-2 small pretraining throughput on one GPU: ctrainer against PyTorch, eager and torch.compile,
in the same run on the same device (examples/configs/gpt2_small.json: vocabulary 50257 padded to
50304, context 1024, 768 wide, 12 layers and heads; bf16 on a GPU; AdamW, clipping at 1.0).

Both sides train on one file of random token ids (the speed of a step does not depend on the text).
ctrainer runs `ctrainer train` twice, --short and --steps optimizer steps, with evaluation, saving and
logging off: the difference of the two runs is the steps' own time, without start-up and the first
steps' tuning. Its train_results.json gives the MFU (train_mfu: three forward passes' matrix-product
FLOPs per token over the GPU's stated peak in bf16, as llm.c and nanoGPT count them) and the peak
memory (the memory report's train_mem_gpu_* figures). The PyTorch peer (bench/peer_torch_gpt2.py:
nanoGPT's model from tests/oracle/gpt_reference.py, its fused attention, bf16 autocast, fused AdamW)
times --steps steps after --warmup; its MFU is ctrainer's scaled by the two throughputs (the same
model FLOPs per token, the same peak). Prints tokens/s, MFU and peak memory of each side and the
ratios to ctrainer.

--gradient-checkpointing turns on activation recomputation on both sides (ctrainer's
gradient_checkpointing, torch.utils.checkpoint around each of the peer's blocks, as Hugging Face does).
On the CPU the peak memory is each process's peak RSS (ctrainer's longer run).

--profile runs ctrainer once more for --short steps with CTRAINER_OP_PROFILE=1 (core/ops/op_profile.h) and
prints its table of op times: where a step's time goes, op by op.

--tiny trains a small GPT of the same shape family (2 layers, 128 wide, context 128) so the script
itself can be checked on any machine; on the CPU there is no MFU (no stated peak) and no bf16.

Usage: bench/gpt2.py [--device cuda|cpu] [--steps 20] [--short 5] [--batch 16] [--accum 1]
                     [--warmup 5] [--no-compile] [--tiny] [--context T] [--gradient-checkpointing] [--build DIR]
                     [--python PY] [--profile]"""
import argparse
import array
import json
import os
import random
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
ap = argparse.ArgumentParser()
ap.add_argument("--device", default="cuda")
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--short", type=int, default=5, help="steps of the shorter ctrainer run (start-up and tuning)")
ap.add_argument("--batch", type=int, default=16)
ap.add_argument("--accum", type=int, default=1, help="gradient_accumulation_steps of both sides")
ap.add_argument("--warmup", type=int, default=5, help="PyTorch steps before the timed ones")
ap.add_argument("--no-compile", action="store_true", help="leave out the torch.compile run")
ap.add_argument("--tiny", action="store_true")
ap.add_argument("--context", type=int, help="tokens per sequence (default: the model's n_positions)")
ap.add_argument("--gradient-checkpointing", action="store_true", help="recompute each block's activations, both sides")
ap.add_argument("--build", default=os.path.join(root, "build"))
ap.add_argument("--python", default=sys.executable, help="the Python with torch for the peer")
ap.add_argument("--profile", action="store_true",
                help="afterwards, --short steps once more with CTRAINER_OP_PROFILE=1, and print its op table")
a = ap.parse_args()
if a.steps <= a.short or a.short < 1:
    sys.exit("--steps must exceed --short, which must be at least 1")
ctrainer = os.path.join(a.build, "ctrainer")
if not os.path.exists(ctrainer):
    sys.exit(f"ctrainer not found at {ctrainer} (pass --build)")
gpu = a.device.startswith("cuda")

config = json.load(open(os.path.join(root, "examples", "configs", "gpt2_small.json")))
model = config["model"]
if a.tiny:
    model.update(n_positions=128, n_embd=128, n_layer=2, n_head=4)
T = a.context or model["n_positions"]
if not 1 <= T <= model["n_positions"]:
    sys.exit(f"--context must be between 1 and the model's n_positions, {model['n_positions']}")
tmp_dir = tempfile.TemporaryDirectory(prefix="ct-gpt2-")  # removed at exit
tmp = tmp_dir.name
tokens = os.path.join(tmp, "tokens.bin")
need = (a.steps + a.warmup + 2) * a.accum * a.batch * T * 2 + T + 1
draw = random.Random(0)
with open(tokens, "wb") as f:
    array.array("H", (draw.randrange(model["vocab_size"]) for _ in range(need))).tofile(f)
config["data"] = {"train": {"type": "tokens", "path": tokens, "context": T, "vocab_size": model["vocab_size"]}}
config["metrics"] = []
args = config["training_args"]
for key in ("eval_steps", "save_steps", "save_total_limit", "warmup_steps", "max_steps"):
    args.pop(key, None)
args.update(eval_strategy="no", save_strategy="no", logging_strategy="no", report_to="none",
            per_device_train_batch_size=a.batch, gradient_accumulation_steps=a.accum,
            include_tokens_per_second=True, skip_memory_metrics=False, disable_tqdm=True,
            gradient_checkpointing=a.gradient_checkpointing)
config_path = os.path.join(tmp, "gpt2.json")
json.dump(config, open(config_path, "w"))


def run_ctrainer(steps, profile=False):
    out = os.path.join(tmp, f"ct{steps}{'-profile' if profile else ''}")
    cmd = [ctrainer, "train", config_path, "--output_dir", out, "--overwrite_output_dir", "true",
           "--max_steps", str(steps), "--device", a.device]
    if gpu:
        cmd += ["--bf16", "true"]
    env = dict(os.environ, CTRAINER_OP_PROFILE="1") if profile else None
    with tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True, env=env)
        _, status, usage = os.wait4(p.pid, 0)  # its own peak RSS, which subprocess.run does not give
        err.seek(0)
        text = err.read()
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"failed: {' '.join(cmd)}\n{text[-3000:]}")
    if profile:  # the op table printed at exit
        return text[text.find("op profile"):] if "op profile" in text else "no op profile printed"
    return dict(json.load(open(os.path.join(out, "train_results.json"))), peak_rss_bytes=usage.ru_maxrss * 1024)


def run_peer(compiled):
    cmd = [a.python, os.path.join(here, "peer_torch_gpt2.py"), root, config_path, tokens, a.device, str(a.batch),
           str(T), str(a.accum), str(a.steps), str(a.warmup), "1" if compiled else "0",
           "1" if a.gradient_checkpointing else "0"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


short, long = run_ctrainer(a.short), run_ctrainer(a.steps)
tokens_per_step = a.batch * a.accum * T
seconds = long["train_runtime"] - short["train_runtime"]
ct_tps = (a.steps - a.short) * tokens_per_step / seconds if seconds > 0 else long["train_tokens_per_second"]
# train_mfu covers the whole long run; scaled to the steps' own throughput
ct_mfu = long.get("train_mfu")
if ct_mfu is not None:
    ct_mfu *= ct_tps / long["train_tokens_per_second"]
# the memory report's deltas from before the trainer was built: what the model and its buffers took at
# init, what training added and kept, and its peak above that
ct_mem = sum(long.get(f"{k}", 0) for k in ("init_mem_gpu_alloc_delta", "train_mem_gpu_alloc_delta",
                                           "train_mem_gpu_peaked_delta")) if gpu else long["peak_rss_bytes"]
rows = [("ctrainer", ct_tps, ct_mfu, ct_mem)]
for compiled in ([False] if a.no_compile else [False, True]):
    p = run_peer(compiled)
    mfu = ct_mfu * p["tokens_per_s"] / ct_tps if ct_mfu is not None else None
    rows.append((f"{p['peer']} ({p['attention']} attention)", p["tokens_per_s"], mfu, p["peak_memory_bytes"]))

print(f"GPT-2 {'tiny' if a.tiny else 'small'} on {a.device}: batch {a.batch} x {T} tokens, accumulation {a.accum}, "
      f"{a.steps} steps{', bf16' if gpu else ''}{', gradient checkpointing' if a.gradient_checkpointing else ''}")
for name, tps, mfu, mem in rows:
    mfu_text = f"MFU {100 * mfu:5.1f}%" if mfu is not None else "MFU n/a"
    mem_text = f"peak memory {mem / 2**30:6.2f} GiB" if mem else "peak memory n/a"
    ratio = f"ctrainer / this {ct_tps / tps:5.2f}x" if name != "ctrainer" else ""
    print(f"  {name:56s} {tps:12.0f} tokens/s  {mfu_text}  {mem_text}  {ratio}")
print(json.dumps({"device": a.device, "tiny": a.tiny, "gradient_checkpointing": a.gradient_checkpointing, "rows": [
    {"name": n, "tokens_per_s": t, "mfu": m, "peak_memory_bytes": mem} for n, t, m, mem in rows]}))
if a.profile:
    print(f"ctrainer, {a.short} steps with every op timed between synchronisations (start-up included):")
    print(run_ctrainer(a.short, profile=True))
