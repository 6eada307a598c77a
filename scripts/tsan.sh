#!/usr/bin/env bash
# The code that runs on threads of its own, under ThreadSanitizer: configures a CPU-only build with
# -fsanitize=thread in build-tsan/ (or $1), builds the ctrainer program and the unit tests of that
# code, runs each test, then short `ctrainer train` runs with eval_async (steps, continuous,
# save_strategy best, save_async) on the CLI's tiny config when Fashion-MNIST is installed. Any
# ThreadSanitizer report fails the script with exit 66; a test failing otherwise, 1.
# The tests: evaluation and checkpoint writing on background threads (test_async_eval,
# test_async_save, test_checkpoint_snapshot), gradient buckets all-reduced while backward runs (test_ddp_overlap), the data
# loader's prefetch workers (test_loader), concurrent fetches from HDF5 files and through transforms
# (test_hdf5_dataset, test_transforms), logging from many threads (test_log), ZeRO-1 with threads
# as ranks (test_zero), the memory report's sampler thread (test_memory) and the TensorBoard writer
# fed by the asynchronous evaluator (test_tensorboard, where it is built). scripts/sanitize.sh runs
# this script as part of scripts/test.sh.
#
# OMP_NUM_THREADS=1: libgomp is not built with TSan, so the synchronisation of OpenMP's own thread
# team is invisible to it and every parallel region would be reported as a race (false positives).
# With one thread the parallel regions run inline; the races that matter here are between the
# training thread and the evaluator, writer, loader or sampler threads, which are plain pthreads.
#
# Usage: scripts/tsan.sh [BUILD_DIR]     (about three minutes to build from scratch on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-tsan}
# Debug: no -O3/-DNDEBUG appended to the flags; -O1 keeps the reports' stacks readable.
cmake -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DCTRAINER_BENCH=OFF -DCTRAINER_CUDA=OFF -DCTRAINER_WERROR=OFF \
      -DCMAKE_C_FLAGS="-fsanitize=thread -g -O1" -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread \
      -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread >/dev/null
# The tests this build has (test_tensorboard only where TensorBoard is built: CTRAINER_TENSORBOARD).
targets=$(cmake --build "$dir" --target help)
tests=()
for t in test_async_eval test_async_save test_checkpoint_snapshot test_ddp_overlap test_loader test_hdf5_dataset test_transforms test_log \
         test_zero test_memory test_tensorboard; do
  grep -q "^\.\.\. $t\$" <<<"$targets" && tests+=("$t")
done
cmake --build "$dir" -j"$(nproc)" --target ctrainer "${tests[@]}"

export OMP_NUM_THREADS=1 CT_SOURCE_DIR=$PWD
export TSAN_OPTIONS="${TSAN_OPTIONS:-} halt_on_error=1 exitcode=66 second_deadlock_stack=1"
logs=$dir/tsan-logs
mkdir -p "$logs"
failed=0 raced=0

# check NAME COMMAND...: runs the command with its output in $logs/NAME.log; 77 means skipped.
check() {
  local name=$1 rc=0
  shift
  "$@" >"$logs/$name.log" 2>&1 || rc=$?
  if [ "$rc" -eq 0 ]; then
    echo "ok       $name"
  elif [ "$rc" -eq 77 ]; then
    echo "skipped  $name"
  else
    failed=1
    if [ "$rc" -eq 66 ]; then raced=1; echo "RACE     $name (ThreadSanitizer report below)"; else echo "FAILED   $name (exit $rc)"; fi
    if grep -q "WARNING: ThreadSanitizer" "$logs/$name.log"; then
      sed -n '/WARNING: ThreadSanitizer/,/^SUMMARY: ThreadSanitizer/p' "$logs/$name.log"
    else
      tail -n 30 "$logs/$name.log"
    fi
  fi
}

for t in "${tests[@]}"; do
  check "$t" "$dir/tests/$t"
done

if [ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  runs=$(mktemp -d)
  trap 'rm -rf "$runs"' EXIT
  cfg=tests/cli/configs/tiny_sequential.json
  train() { local name=$1; shift; check "cli_$name" "$dir/ctrainer" train "$cfg" --output_dir "$runs/$name" \
            --num_train_epochs 1 --eval_async true "$@"; }
  train steps --eval_strategy steps --eval_steps 4 --save_strategy steps --save_steps 4 \
        --load_best_model_at_end true --metric_for_best_model small_accuracy
  train continuous --eval_strategy continuous --save_strategy no
  train best_skip --eval_strategy steps --eval_steps 4 --eval_async_policy skip --save_strategy best \
        --metric_for_best_model small_accuracy
  train save_async --eval_strategy steps --eval_steps 4 --save_strategy steps --save_steps 4 --save_async true
else
  echo "skipped  cli_* (Fashion-MNIST is not installed)"
fi

if [ "$failed" -eq 0 ]; then
  echo "ThreadSanitizer: no report"
  exit 0
fi
echo "failures above (logs in $logs)"
[ "$raced" -eq 1 ] && exit 66
exit 1
