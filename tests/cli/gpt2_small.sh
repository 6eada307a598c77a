#!/usr/bin/env bash
# gpt2_small.sh CTRAINER CONFIG RUNS_DIR SRC_DIR: examples/configs/gpt2_small.json (GPT-2 124M, its
# vocabulary padded to 50304) for three optimizer steps on the CPU at a context of 32 tokens, on byte
# tokens of the repository's own docs. Passes when the run finishes with its outputs and the first
# logged loss is that of a uniform guess over the 50257 real tokens, ln(50257) = 10.825 (GPT-2's
# initialisation gives near-uniform logits), within 0.3.
ctrainer=$1 config=$2 runs=$3 src=$4
out=$runs/gpt2_small
fail() { echo "$1"; echo "0 passed, 1 failed"; exit 1; }

rm -rf "$out"
"$ctrainer" data tokenize --input "$src/README.md" "$src/docs/ARCHITECTURE.md" --output "$out/data/train.bin" \
    --val-output "$out/data/val.bin" --eot || fail "data tokenize failed"
"$ctrainer" train "$config" --set "data.train.path=\"$out/data/train.bin\"" \
    --set "data.eval.path=\"$out/data/val.bin\"" --set data.train.context=32 --set data.eval.context=32 \
    --set data.eval.stride=32 --set data.eval.limit=4 --output_dir "$out/run" --per_device_train_batch_size 2 \
    --gradient_accumulation_steps 2 --per_device_eval_batch_size 4 --max_steps 3 --eval_steps 3 --save_steps 3 \
    --logging_steps 1 --warmup_steps 1 || fail "train failed"
for f in checkpoint-3/model.h5 model.h5 trainer_state.json train_results.json; do
    [ -e "$out/run/$f" ] || fail "train wrote no $out/run/$f"
done
/usr/bin/python3 - "$out/run/trainer_state.json" <<'PY' || fail "the first loss is not ln(50257)"
import json, math, sys
losses = [e["loss"] for e in json.load(open(sys.argv[1]))["log_history"] if "loss" in e]
print(f"losses {losses}, ln(50257) = {math.log(50257):.4f}")
sys.exit(0 if len(losses) == 3 and all(map(math.isfinite, losses)) and abs(losses[0] - math.log(50257)) < 0.3 else 1)
PY
echo "1 passed, 0 failed"
