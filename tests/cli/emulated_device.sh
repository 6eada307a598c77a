#!/usr/bin/env bash
# emulated_device.sh CTRAINER SOURCE_DIR RUNS_DIR: the Trainer on the CUDA backend's own kernels, without a GPU.
#
# CTRAINER_CUDA_MODULE names libctrainer_cuda_emulated.so (tests/cuda/emulated/): the CUDA backend's
# table and kernels, compiled for the host, on host memory, with the CPU's GEMMs in cuBLAS's place.
# Where checked_device.sh checks the Trainer's device path with the CPU's kernels (bit for bit), this
# runs it with the kernels a GPU would run (losses, norms, optimizer, mixed-precision casts, the loss
# scaler's overflow check, attention), through the Trainer's order of calls; so they agree with the
# CPU to rounding, as a GPU would (scripts/gpu/compare-devices.py's check, rehearsed in CI):
#   - an MLP with two eval sets, a test set and checkpoints, in float32 (1e-4 relative), and in bf16
#     and fp16 with loss scaling, whose GEMMs round their inputs as tensor cores do (5e-2 from float32);
#   - resuming across devices, both ways: the evaluations of the uninterrupted run;
#   - asynchronous evaluation on the device: the same bits as synchronous evaluation there; and on a
#     second device beside the training one (two emulated devices);
#   - `ctrainer evaluate` and `predict` on the device;
#   - device memory: what 1000 steps leave allocated equals what 100 leave;
#   - the CNN preset and the GPT example for a few steps; the GPT again with gradient checkpointing on
#     the device (the same bits: the recomputed forward is the same kernels' run), in bf16 and in fp16
#     (whose first steps overflow and are skipped).
set -u
ctrainer=$1 src=$2 runs=$3/emulated_device
if [ ! -r "${CTRAINER_CUDA_MODULE:-}" ]; then
    echo "CTRAINER_CUDA_MODULE must name the emulated CUDA module (libctrainer_cuda_emulated.so)"
    exit 1
fi
passed=0 failed=0
ok() { passed=$((passed + 1)); }
bad() { echo "FAIL: $1"; failed=$((failed + 1)); }
rm -rf "$runs" && mkdir -p "$runs" && cd "$runs" || exit 1

# compare RUN_A RUN_B [--rtol R] [--keys PREFIXES]: the log histories (tests/cli/compare_histories.py)
compare() { /usr/bin/python3 "$src/tests/cli/compare_histories.py" "$@"; }

mlp=$src/tests/cli/configs/tiny_sequential.json
for run in fp32-cpu fp32-cuda bf16-cuda fp16-cuda; do
    precision=${run%-*} dev=${run#*-} flags=()
    [ $precision != fp32 ] && flags=(--$precision true)
    "$ctrainer" train "$mlp" --device $dev --output_dir mlp-$run --save_strategy steps --save_steps 16 "${flags[@]}" \
        >mlp-$run.log 2>&1 || bad "MLP ($precision) on $dev: $(tail -1 mlp-$run.log)"
done
compare mlp-fp32-cpu mlp-fp32-cuda --rtol 1e-4 && ok ||
    bad "MLP: the log histories on cpu and cuda differ by more than 1e-4"
# bf16 and fp16 round every GEMM input to 8 or 11 significant bits: 64 steps of it move the losses and
# gradient norms about 1.5% from float32's (accuracies, counts of samples, may move by whole samples)
for precision in bf16 fp16; do
    compare mlp-fp32-cpu mlp-$precision-cuda --rtol 5e-2 --keys loss,grad_norm,eval_small_loss,eval_other_loss && ok ||
        bad "MLP: $precision on cuda is more than 5e-2 from float32 on cpu"
done

# A checkpoint written on one device resumes on the other and evaluates as the uninterrupted run does.
for pair in "cuda cpu" "cpu cuda"; do
    set -- $pair
    dir=resume-$1-to-$2
    mkdir -p $dir && cp -r mlp-fp32-$1/checkpoint-16 $dir/
    "$ctrainer" train "$mlp" --device $2 --output_dir $dir --overwrite_output_dir true --save_strategy steps \
        --save_steps 16 --resume_from_checkpoint $dir/checkpoint-16 >$dir.log 2>&1 ||
        bad "resuming a $1 checkpoint on $2: $(tail -1 $dir.log)"
    compare mlp-fp32-$2 $dir --rtol 1e-4 --keys eval_,test_ && ok ||
        bad "a $1 checkpoint resumed on $2 evaluates otherwise than the uninterrupted run"
done

# Asynchronous evaluation beside training, its replica on the training device, with the same kernels.
"$ctrainer" train "$mlp" --device cuda --output_dir async-cuda --save_strategy steps --save_steps 16 --eval_async true \
    --eval_async_policy wait >async-cuda.log 2>&1 || bad "eval_async on cuda: $(tail -1 async-cuda.log)"
compare mlp-fp32-cuda async-cuda --keys eval_,test_ && ok || bad "eval_async on cuda evaluates differently"
# The request the project started from, on two devices: training on cuda:1, evaluation on cuda:0 beside
# it. Each thread's ops must run on their tensors' device (the emulation aborts on a kernel given
# another device's memory): the evaluator's snapshot copies make cuda:0 current on the training thread.
CTRAINER_EMULATED_DEVICES=2 "$ctrainer" train "$mlp" --device cuda:1 --eval_device cuda:0 --output_dir two-gpus \
    --save_strategy steps --save_steps 16 --eval_async true --eval_async_policy wait >two-gpus.log 2>&1 ||
    bad "training on cuda:1 with eval_async on cuda:0: $(tail -1 two-gpus.log)"
compare mlp-fp32-cuda two-gpus --keys loss,grad_norm && compare mlp-fp32-cuda two-gpus --keys eval_,test_ && ok ||
    bad "training on cuda:1, evaluating on cuda:0 differs from one device"

for dev in cpu cuda; do
    "$ctrainer" evaluate "$mlp" --model mlp-fp32-cpu --device $dev --output_dir eval-$dev >eval-$dev.log 2>&1 ||
        bad "evaluate on $dev: $(tail -1 eval-$dev.log)"
    "$ctrainer" predict "$mlp" --model mlp-fp32-cpu --device $dev --output pred-$dev.h5 --output_dir pred-$dev \
        >pred-$dev.log 2>&1 || bad "predict on $dev: $(tail -1 pred-$dev.log)"
done
/usr/bin/python3 - eval-cpu/eval_results.json eval-cuda/eval_results.json pred-cpu.h5 pred-cuda.h5 <<'EOF' && ok ||
import json, sys
import h5py, numpy as np
clock = ("runtime", "per_second")
a, b = (json.load(open(p)) for p in sys.argv[1:3])
keys = [k for k in a if not any(c in k for c in clock)]
assert keys and sorted(keys) == sorted(k for k in b if not any(c in k for c in clock)), (a, b)
for k in keys:
    assert abs(a[k] - b[k]) <= 1e-4 * max(abs(a[k]), abs(b[k])), f"evaluate: {k} {a[k]} on cpu, {b[k]} on cuda"
with h5py.File(sys.argv[3]) as p, h5py.File(sys.argv[4]) as q:
    names = []
    p.visit(lambda n: names.append(n) if isinstance(p[n], h5py.Dataset) else None)
    assert names and all(n in q for n in names), (names, list(q))
    for n in names:
        x, y = p[n][()], q[n][()]
        assert x.shape == y.shape and x.dtype == y.dtype, (n, x.shape, y.shape)
        if x.dtype.kind == "f":
            assert np.allclose(x, y, rtol=1e-4, atol=1e-5 * np.abs(x).max()), f"predict: {n} differs"
        else:
            assert np.array_equal(x, y), f"predict: {n} differs"
print(f"evaluate: {len(keys)} values agree; predict: {', '.join(names)} agree")
EOF
    bad "evaluate or predict on cpu and cuda disagree"

# Device memory does not grow with steps: what 1000 steps leave allocated (HF's train_mem_gpu_alloc_delta,
# from the module's own count) is what 100 leave.
for n in 100 1000; do
    "$ctrainer" train "$mlp" --device cuda --output_dir soak-$n --max_steps $n --per_device_train_batch_size 8 \
        --eval_strategy no --save_strategy no --logging_steps 100 --skip_memory_metrics false >soak-$n.log 2>&1 ||
        bad "$n steps on cuda: $(tail -1 soak-$n.log)"
done
/usr/bin/python3 - soak-100/train_results.json soak-1000/train_results.json <<'EOF' && ok ||
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
key = "train_mem_gpu_alloc_delta"
print(f"device memory left by training: {a[key]} bytes after 100 steps, {b[key]} after 1000")
sys.exit(0 if a[key] == b[key] else 1)
EOF
    bad "device memory grows with the steps"

# The CNN preset: the fused convolution + ReLU + pooling path; cuDNN's convolutions are the CPU's here.
cnn=$src/examples/configs/fashion_mnist_cnn.json
for dev in cpu cuda; do
    "$ctrainer" train "$cnn" --device $dev --output_dir cnn-$dev --set data.train.limit=128 --set data.eval.limit=64 \
        --max_steps 4 --per_device_train_batch_size 32 --per_device_eval_batch_size 32 --eval_strategy steps \
        --eval_steps 2 --logging_steps 1 --save_strategy no >cnn-$dev.log 2>&1 ||
        bad "CNN on $dev: $(tail -1 cnn-$dev.log)"
done
compare cnn-cpu cnn-cuda --rtol 1e-3 && ok || bad "CNN: the log histories on cpu and cuda differ by more than 1e-3"

# The GPT example: embeddings, flash-style attention, layer norm, tied weights; with gradient
# checkpointing, the blocks' forward again in backward.
corpus=()
mapfile -t corpus < <(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' 2>/dev/null | sort)
if [ "${#corpus[@]}" -gt 0 ] && "$ctrainer" data tokenize --input "${corpus[@]}" --output tok/train.bin \
    --val-output tok/val.bin --eot >tok.log 2>&1; then
    gpt() { # gpt NAME DEVICE [FLAGS...]
        local name=$1 dev=$2 && shift 2
        "$ctrainer" train "$src/examples/configs/fortunes_gpt.json" --device $dev --output_dir $name \
            --set "data.train.path=\"$runs/tok/train.bin\"" --set "data.eval.path=\"$runs/tok/val.bin\"" \
            --set data.eval.limit=8 --per_device_train_batch_size 4 --per_device_eval_batch_size 8 --max_steps 4 \
            --eval_steps 2 --logging_steps 1 --save_strategy no "$@" >$name.log 2>&1 ||
            bad "GPT $name: $(tail -1 $name.log)"
    }
    gpt gpt-cpu cpu
    gpt gpt-cuda cuda
    gpt gpt-ckpt cuda --gradient_checkpointing true
    gpt gpt-bf16 cuda --bf16 true
    gpt gpt-fp16 cuda --fp16 true
    compare gpt-cpu gpt-cuda --rtol 1e-3 && ok || bad "GPT: the log histories on cpu and cuda differ by more than 1e-3"
    compare gpt-cpu gpt-bf16 --rtol 5e-2 --keys loss,grad_norm,eval_loss && ok ||
        bad "GPT: bf16 on cuda is more than 5e-2 from float32 on cpu"
    # fp16's first steps overflow here (gradients beyond 65504 in a GEMM's input) and are skipped, with
    # no grad_norm logged and no scheduler step, while the loss scale comes down: finite losses throughout
    /usr/bin/python3 - gpt-fp16/trainer_state.json <<'EOF' && ok || bad "GPT: fp16 on cuda logs a non-finite loss"
import json, math, sys
h = json.load(open(sys.argv[1]))["log_history"]
steps = [e for e in h if "loss" in e]
losses = [e["loss"] for e in steps] + [e["eval_loss"] for e in h if "eval_loss" in e]
print(f"fp16: {sum('grad_norm' not in e for e in steps)} of {len(steps)} steps skipped on overflow")
sys.exit(0 if steps and all(math.isfinite(x) for x in losses) else 1)
EOF
    compare gpt-cuda gpt-ckpt && ok || bad "GPT: gradient checkpointing on cuda changed the log history"
else
    bad "cannot tokenize the fortunes corpus for the GPT runs: $(tail -1 tok.log 2>/dev/null)"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
