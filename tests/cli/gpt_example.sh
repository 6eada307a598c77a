#!/usr/bin/env bash
# gpt_example.sh CTRAINER CONFIG RUNS_DIR: the README's two commands for the GPT example, short:
# tokenize the fortunes corpus (Debian's `fortunes` package), then train examples/configs/
# fortunes_gpt.json for a few steps on it. Passes when both succeed, the outputs are there (token
# files, checkpoint, model, trainer_state.json, results) and the validation loss fell from the
# first evaluation (before training) to the last.
ctrainer=$1 config=$2 runs=$3
corpus=/usr/share/games/fortunes
out=$runs/fortunes_gpt
fail() { echo "$1"; echo "0 passed, 1 failed"; exit 1; }

# The corpus: the text files (not the .dat indexes strfile writes, not the .u8 links to the same texts).
mapfile -t files < <(find "$corpus" -maxdepth 1 -type f ! -name '*.dat' 2>/dev/null | sort)
[ "${#files[@]}" -gt 0 ] || fail "no text files in $corpus: install the fortunes package (scripts/setup.sh lists it)"
rm -rf "$out"
"$ctrainer" data tokenize --input "${files[@]}" --output "$out/data/train.bin" --val-output "$out/data/val.bin" \
    --eot || fail "data tokenize failed"
[ -s "$out/data/train.bin" ] && [ -s "$out/data/val.bin" ] || fail "no token files in $out/data"

"$ctrainer" train "$config" --set "data.train.path=\"$out/data/train.bin\"" \
    --set "data.eval.path=\"$out/data/val.bin\"" --set data.eval.limit=32 --output_dir "$out/run" \
    --per_device_train_batch_size 8 --per_device_eval_batch_size 32 --max_steps 6 --eval_steps 3 --save_steps 6 \
    --logging_steps 2 || fail "train failed"

for f in checkpoint-6/model.h5 trainer_state.json model.h5 all_results.json train_results.json; do
    [ -e "$out/run/$f" ] || fail "train wrote no $out/run/$f"
done
/usr/bin/python3 - "$out/run/trainer_state.json" <<'EOF' || fail "the validation loss did not fall"
import json, sys
evals = [e for e in json.load(open(sys.argv[1]))["log_history"] if "eval_token_loss" in e]
first, last = evals[0], evals[-1]
print(f"eval_token_loss {first['eval_token_loss']:.4f} at step {first['step']} -> {last['eval_token_loss']:.4f} "
      f"at step {last['step']}, perplexity {last['eval_perplexity']:.2f}, token accuracy {last['eval_token_accuracy']:.3f}")
sys.exit(0 if len(evals) >= 3 and first["step"] == 0 and last["eval_token_loss"] < first["eval_token_loss"] else 1)
EOF
echo "1 passed, 0 failed"
