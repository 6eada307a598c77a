#!/usr/bin/env bash
# checked_device.sh CTRAINER SOURCE_DIR RUNS_DIR [mpi]: the Trainer's GPU path, on machines without a GPU.
# With "mpi", only the runs of two processes (ctest's mpi.checked_device); without, the others.
#
# With CTRAINER_CHECKED_DEVICE=1, "cuda" is the checked device (backends/checked/): host memory that
# faults when the host touches it outside an op, run by the CPU's kernels. Every run here is done
# twice, with --device cpu and --device cuda, and must agree bit for bit (same kernels, same order),
# so a crash means host code read device memory and a difference means the device path computes
# something else:
#   - an MLP with two eval sets, a test set and checkpoints: log history, model and optimizer state;
#   - resuming across devices, both ways: the final model equals the uninterrupted run's;
#   - asynchronous saves from the device: the checkpoints of the synchronous saves on the CPU;
#   - asynchronous evaluation on the device (eval_device auto): the same evaluations as synchronous;
#   - `ctrainer evaluate` and `predict` on the device: the same metrics and predictions; the classification
#     metrics from class ranks computed on the device, whose scores stay there (CTRAINER_CHECKED_DEVICE_REPORT);
#   - the CNN preset (fused convolution kernels) and the GPT example (attention) for a few steps, and the
#     GPT again with gradient checkpointing on the device; its token metrics from `ctrainer evaluate`,
#     which copies the logits back far less than predict does (CTRAINER_CHECKED_DEVICE_REPORT);
#   - with "mpi": two processes, DDP and ZeRO-1, each on its own checked GPU; the GPT with dropout too,
#     recomputing its blocks (gradient checkpointing) on the devices.
set -u
ctrainer=$1 src=$2 mode=${4:-single} runs=$3/checked_device_$mode
export CTRAINER_CHECKED_DEVICE=1
passed=0 failed=0
ok() { passed=$((passed + 1)); }
bad() { echo "FAIL: $1"; failed=$((failed + 1)); }
rm -rf "$runs" && mkdir -p "$runs" && cd "$runs" || exit 1

# Log histories without wall-clock entries (runtimes, rates) must be equal.
same_history() { /usr/bin/python3 "$src/tests/cli/compare_histories.py" "$1" "$2"; }

# The fortunes corpus as token files under $runs/tok, for the GPT runs; fails when it cannot be had.
tokenize_corpus() {
    local corpus
    mapfile -t corpus < <(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' 2>/dev/null | sort)
    [ "${#corpus[@]}" -gt 0 ] && "$ctrainer" data tokenize --input "${corpus[@]}" --output "$runs/tok/train.bin" \
        --val-output "$runs/tok/val.bin" --eot >tok.log 2>&1
}

mlp=$src/tests/cli/configs/tiny_sequential.json
if [ "$mode" != mpi ]; then # the single-process runs (the here-documents keep their column 0)
for dev in cpu cuda; do
    "$ctrainer" train "$mlp" --device $dev --output_dir mlp-$dev --save_strategy steps --save_steps 16 \
        >mlp-$dev.log 2>&1 || bad "MLP training on $dev: $(tail -1 mlp-$dev.log)"
done
same_history mlp-cpu mlp-cuda && ok || bad "MLP: the log histories on cpu and cuda differ"
cmp -s mlp-cpu/model.h5 mlp-cuda/model.h5 && ok || bad "MLP: the final models on cpu and cuda differ"
cmp -s mlp-cpu/checkpoint-32/optimizer.h5 mlp-cuda/checkpoint-32/optimizer.h5 && ok ||
    bad "MLP: the optimizer states at step 32 on cpu and cuda differ"
grep -q '"device": "cuda"' mlp-cuda/training_args.json && ok || bad "training_args.json does not record the device"

# A checkpoint written on one device resumes on the other and ends where the uninterrupted run does.
for pair in "cuda cpu" "cpu cuda"; do
    set -- $pair
    dir=resume-$1-to-$2
    mkdir -p $dir && cp -r mlp-$1/checkpoint-16 $dir/
    "$ctrainer" train "$mlp" --device $2 --output_dir $dir --overwrite_output_dir true --save_strategy steps \
        --save_steps 16 --resume_from_checkpoint $dir/checkpoint-16 >$dir.log 2>&1 ||
        bad "resuming a $1 checkpoint on $2: $(tail -1 $dir.log)"
    cmp -s mlp-cpu/model.h5 $dir/model.h5 && ok || bad "a $1 checkpoint resumed on $2 ends with another model"
done

# Asynchronous saves: the snapshots are downloaded without a host wait and written by another thread;
# the checkpoints hold what the synchronous saves on the CPU hold.
"$ctrainer" train "$mlp" --device cuda --output_dir save-async-cuda --save_strategy steps --save_steps 16 \
    --save_async true >save-async-cuda.log 2>&1 || bad "save_async on cuda: $(tail -1 save-async-cuda.log)"
for f in checkpoint-16/model.h5 checkpoint-16/optimizer.h5 checkpoint-32/model.h5 checkpoint-32/optimizer.h5; do
    cmp -s mlp-cpu/$f save-async-cuda/$f && ok || bad "save_async on cuda: $f differs from the CPU's"
done

# Asynchronous evaluation beside training, its replica on the training device.
"$ctrainer" train "$mlp" --device cuda --output_dir async-cuda --eval_async true --eval_async_policy wait \
    >async-cuda.log 2>&1 || bad "eval_async on cuda: $(tail -1 async-cuda.log)"
/usr/bin/python3 "$src/tests/cli/compare_histories.py" mlp-cpu async-cuda --keys eval_,test_ && ok ||
    bad "eval_async on cuda evaluates differently"

# Evaluation with the classification metrics, which read class ranks computed on the device: the
# same metrics, and the scores stay on the device.
classification='metrics=["accuracy", "top_3_accuracy", {"type": "f1", "average": "macro"}, "confusion_matrix"]'
for dev in cpu cuda; do
    CTRAINER_CHECKED_DEVICE_REPORT=1 "$ctrainer" evaluate "$mlp" --model mlp-cpu --device $dev --output_dir eval-$dev \
        --set "$classification" >eval-$dev.log 2>&1 || bad "evaluate on $dev: $(tail -1 eval-$dev.log)"
    "$ctrainer" predict "$mlp" --model mlp-cpu --device $dev --output pred-$dev.h5 --output_dir pred-$dev \
        >pred-$dev.log 2>&1 || bad "predict on $dev: $(tail -1 pred-$dev.log)"
done
/usr/bin/python3 - eval-cpu eval-cuda <<'EOF' && ok || bad "evaluate on cpu and cuda disagree"
import json, sys, glob
def load(d):
    m = json.load(open(f"{d}/eval_results.json"))
    return {k: v for k, v in m.items() if not any(c in k for c in ("runtime", "per_second"))}
a, b = load(sys.argv[1]), load(sys.argv[2])
sys.exit(0 if a == b and "eval_small_f1_macro" in a and "eval_other_confusion_matrix" in a else 1)
EOF
eval_bytes=$(sed -n 's/^checked device: \([0-9]*\) bytes copied to the host.*/\1/p' eval-cuda.log)
# the scores of the 800 evaluated samples are 800 x 10 float32: 32000 bytes
[ -n "$eval_bytes" ] && [ "$eval_bytes" -lt 32000 ] && ok ||
    bad "evaluate on cuda copied ${eval_bytes:-?} bytes to the host: the scores came back"
cmp -s pred-cpu.h5 pred-cuda.h5 && ok || bad "predictions on cpu and cuda differ"

# The CNN preset: the fused convolution + ReLU + pooling kernels on the device too.
cnn=$src/examples/configs/fashion_mnist_cnn.json
for dev in cpu cuda; do
    "$ctrainer" train "$cnn" --device $dev --output_dir cnn-$dev --set data.train.limit=256 --set data.eval.limit=64 \
        --max_steps 4 --per_device_train_batch_size 32 --per_device_eval_batch_size 32 --eval_strategy steps \
        --eval_steps 2 --logging_steps 1 --save_strategy no >cnn-$dev.log 2>&1 || bad "CNN on $dev: $(tail -1 cnn-$dev.log)"
done
same_history cnn-cpu cnn-cuda && ok || bad "CNN: the log histories on cpu and cuda differ"
cmp -s cnn-cpu/model.h5 cnn-cuda/model.h5 && ok || bad "CNN: the final models on cpu and cuda differ"

# The GPT example: embeddings, attention, layer norm, tied weights.
if tokenize_corpus; then
    for dev in cpu cuda; do
        "$ctrainer" train "$src/examples/configs/fortunes_gpt.json" --device $dev --output_dir gpt-$dev \
            --set "data.train.path=\"$runs/tok/train.bin\"" --set "data.eval.path=\"$runs/tok/val.bin\"" --set data.eval.limit=16 \
            --per_device_train_batch_size 4 --per_device_eval_batch_size 8 --max_steps 4 --eval_steps 2 \
            --logging_steps 1 --save_strategy no >gpt-$dev.log 2>&1 || bad "GPT on $dev: $(tail -1 gpt-$dev.log)"
    done
    same_history gpt-cpu gpt-cuda && ok || bad "GPT: the log histories on cpu and cuda differ"
    cmp -s gpt-cpu/model.h5 gpt-cuda/model.h5 && ok || bad "GPT: the final models on cpu and cuda differ"
    # gradient checkpointing on the device: the blocks' second forward, in backward, is the same run
    "$ctrainer" train "$src/examples/configs/fortunes_gpt.json" --device cuda --output_dir gpt-ckpt \
        --set "data.train.path=\"$runs/tok/train.bin\"" --set "data.eval.path=\"$runs/tok/val.bin\"" --set data.eval.limit=16 \
        --per_device_train_batch_size 4 --per_device_eval_batch_size 8 --max_steps 4 --eval_steps 2 \
        --logging_steps 1 --save_strategy no --gradient_checkpointing true >gpt-ckpt.log 2>&1 ||
        bad "GPT with gradient checkpointing on cuda: $(tail -1 gpt-ckpt.log)"
    same_history gpt-cpu gpt-ckpt && ok || bad "GPT: gradient checkpointing on cuda changed the log history"
    cmp -s gpt-cpu/model.h5 gpt-ckpt/model.h5 && ok || bad "GPT: gradient checkpointing on cuda changed the model"
    # The token metrics from token values computed on the device: the same metrics as on the CPU, and
    # the logits stay on the device (predict, which keeps them, copies them back).
    gpt_eval=("$src/examples/configs/fortunes_gpt.json" --model gpt-cpu --set data.eval.limit=16
              --set "data.eval.path=\"$runs/tok/val.bin\"" --per_device_eval_batch_size 8)
    for dev in cpu cuda; do
        CTRAINER_CHECKED_DEVICE_REPORT=1 "$ctrainer" evaluate "${gpt_eval[@]}" --device $dev --output_dir gpt-eval-$dev \
            >gpt-eval-$dev.log 2>&1 || bad "GPT evaluate on $dev: $(tail -1 gpt-eval-$dev.log)"
    done
    CTRAINER_CHECKED_DEVICE_REPORT=1 "$ctrainer" predict "${gpt_eval[@]}" --device cuda --output gpt-pred.h5 \
        --output_dir gpt-pred >gpt-pred.log 2>&1 || bad "GPT predict on cuda: $(tail -1 gpt-pred.log)"
    /usr/bin/python3 - gpt-eval-cpu gpt-eval-cuda <<'EOF' && ok || bad "GPT evaluate: the token metrics on cpu and cuda differ"
import json, sys
def load(d):
    m = json.load(open(f"{d}/eval_results.json"))
    return {k: v for k, v in m.items() if not any(c in k for c in ("runtime", "per_second"))}
a, b = load(sys.argv[1]), load(sys.argv[2])
sys.exit(0 if a == b and "eval_perplexity" in a and "eval_token_accuracy" in a else 1)
EOF
    to_host() { sed -n 's/^checked device: \([0-9]*\) bytes copied to the host.*/\1/p' "$1"; }
    eval_bytes=$(to_host gpt-eval-cuda.log) pred_bytes=$(to_host gpt-pred.log)
    # 16 samples of 128 positions x 257 logits: 2.1 MB that predict keeps and evaluate must not copy
    [ -n "$eval_bytes" ] && [ -n "$pred_bytes" ] && [ "$pred_bytes" -ge 2105344 ] &&
        [ $((eval_bytes * 16)) -lt "$pred_bytes" ] && ok ||
        bad "GPT evaluate on cuda copied ${eval_bytes:-?} bytes to the host (predict: ${pred_bytes:-?}): the logits came back"
else
    bad "cannot tokenize the fortunes corpus for the GPT runs: $(tail -1 tok.log 2>/dev/null)"
fi
fi

# Two processes (mpirun, where the build has MPI): each takes the checked GPU of its local rank
# (device auto); MPI takes host memory, so gradient buckets (DDP) and shards (ZeRO-1) travel through
# host copies. The runs equal the two-process CPU runs.
if [ "$mode" = mpi ]; then
    export CTRAINER_CHECKED_DEVICE=2 OMPI_MCA_rmaps_base_oversubscribe=1
    for sharding in none zero1; do
        for dev in cpu auto; do
            mpirun -np 2 "$ctrainer" train "$mlp" --device $dev --output_dir ddp-$sharding-$dev --optimizer_sharding \
                $sharding --ddp_bucket_cap_mb 1 --per_device_train_batch_size 32 --save_strategy no \
                >ddp-$sharding-$dev.log 2>&1 || bad "2 processes ($sharding) on $dev: $(tail -1 ddp-$sharding-$dev.log)"
        done
        same_history ddp-$sharding-cpu ddp-$sharding-auto && ok || bad "2 processes ($sharding): cpu and cuda differ"
        cmp -s ddp-$sharding-cpu/model.h5 ddp-$sharding-auto/model.h5 && ok ||
            bad "2 processes ($sharding): the final models on cpu and cuda differ"
    done
    # The GPT with dropout, recomputing its blocks on the devices while its gradient buckets (small)
    # are sent during backward, against the CPU runs that keep every activation.
    if tokenize_corpus; then
        for sharding in none zero1; do
            for dev in cpu auto; do
                ckpt=$([ $dev = auto ] && echo true || echo false)
                mpirun -np 2 "$ctrainer" train "$src/examples/configs/fortunes_gpt.json" --device $dev \
                    --output_dir gpt-$sharding-$dev --set "data.train.path=\"$runs/tok/train.bin\"" \
                    --set "data.eval.path=\"$runs/tok/val.bin\"" --set data.eval.limit=16 --set model.dropout=0.1 \
                    --per_device_train_batch_size 4 --per_device_eval_batch_size 8 --max_steps 4 --eval_steps 2 \
                    --logging_steps 1 --save_strategy no --optimizer_sharding $sharding --ddp_bucket_cap_mb 1 \
                    --gradient_checkpointing $ckpt >gpt-$sharding-$dev.log 2>&1 ||
                    bad "GPT, 2 processes ($sharding) on $dev: $(tail -1 gpt-$sharding-$dev.log)"
            done
            same_history gpt-$sharding-cpu gpt-$sharding-auto && ok ||
                bad "GPT, 2 processes ($sharding): checkpointing on cuda changed the log history"
            cmp -s gpt-$sharding-cpu/model.h5 gpt-$sharding-auto/model.h5 && ok ||
                bad "GPT, 2 processes ($sharding): checkpointing on cuda changed the model"
        done
    else
        bad "cannot tokenize the fortunes corpus for the GPT runs: $(tail -1 tok.log 2>/dev/null)"
    fi
    export CTRAINER_CHECKED_DEVICE=1
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
