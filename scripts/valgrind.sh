#!/usr/bin/env bash
# Short runs of the ctrainer program under valgrind's memcheck: any invalid read or write, any use of
# an uninitialised value and any definite leak in them fails the script. The runs cover what a user's
# job does: train with evaluation, checkpoints, TensorBoard, JSONL and the model card; resume from the
# checkpoint; train again with evaluation and saving on their background threads (eval_async,
# save_async); evaluate and predict from the saved model; tokenize a text, train a small GPT on it and
# generate from it.
#
# It builds its own tree (build-valgrind/, or $1): valgrind cannot run -march=native code (it stops
# with SIGILL at the first AVX-512 instruction), so this build has CTRAINER_NATIVE=OFF, and it has no
# sanitizers (valgrind and ASan do not mix). Only `possibly lost` blocks are allowed: libgomp keeps
# its worker threads (and their thread-local blocks) until the process exits. Third-party reports
# are suppressed in scripts/sanitizers/valgrind.supp, each with its reason.
#
# Needs Fashion-MNIST (dataset-fashion-mnist); without it the script says so and exits 77 (skipped).
# Usage: scripts/valgrind.sh [BUILD_DIR]     (about a minute to build, two to three to run, on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-valgrind}
if ! command -v valgrind >/dev/null; then echo "valgrind.sh: valgrind is not installed (scripts/setup.sh)"; exit 1; fi
if [ ! -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  echo "valgrind.sh: skipped (Fashion-MNIST is not installed)"
  exit 77
fi
cmake -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCTRAINER_NATIVE=OFF -DCTRAINER_SANITIZE=OFF -DCTRAINER_CUDA=OFF \
      -DCTRAINER_BENCH=OFF -DCTRAINER_TESTS=OFF -DCTRAINER_WERROR=ON >/dev/null
cmake --build "$dir" -j"$(nproc)" --target ctrainer

ctrainer=$PWD/$dir/ctrainer
logs=$dir/valgrind-logs
runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
rm -rf "$logs"
mkdir -p "$logs"
# Two OpenMP threads: the parallel loops run on a team, as in real use (valgrind serialises them).
# Serialised, a thread that spins (GNU OpenMP's default wait at a barrier) can keep the others from
# running for good: a run with an evaluator thread starting its own team once hung for 12 minutes.
# So idle OpenMP threads sleep at once, valgrind hands its lock round in turn (--fair-sched), and a
# run that still takes over CT_VALGRIND_TIMEOUT seconds (default 600) fails instead of holding CI.
export OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE
limit=${CT_VALGRIND_TIMEOUT:-600}
failed=0

# check NAME ARGS...: `ctrainer ARGS` under memcheck, its output in $logs/NAME.log. Exit 99 is
# memcheck's (an error or a definite leak); any other failure is the command's own.
check() {
  local name=$1 rc=0 start=$SECONDS
  shift
  timeout "$limit" valgrind --fair-sched=yes --error-exitcode=99 --leak-check=full \
           --errors-for-leak-kinds=definite --show-leak-kinds=definite --track-origins=yes --num-callers=40 \
           --suppressions=scripts/sanitizers/valgrind.supp \
           "$ctrainer" "$@" >"$logs/$name.log" 2>&1 || rc=$?
  if [ "$rc" -eq 0 ]; then
    echo "ok       $name ($((SECONDS - start)) s)"
  else
    failed=1
    if [ "$rc" -eq 99 ]; then
      echo "MEMCHECK $name (report below)"
    elif [ "$rc" -eq 124 ]; then
      echo "TIMEOUT  $name (over $limit s)"
    else
      echo "FAILED   $name (exit $rc)"
    fi
    grep -E '^==[0-9]+== ' "$logs/$name.log" | head -n 80 || true
    [ "$rc" -eq 99 ] || tail -n 20 "$logs/$name.log"
  fi
}

cfg=tests/cli/configs/tiny_sequential.json
small=(--set data.train.limit=512 --set data.eval.small.limit=100 --set data.eval.other.limit=100
       --set data.test.limit=100 --per_device_train_batch_size 32 --logging_steps 1)
tb=()
"$ctrainer" version | grep -q "TensorBoard: yes" && tb=(--report_to tensorboard)
check train train "$cfg" --output_dir "$runs/mlp" "${small[@]}" "${tb[@]}" --max_steps 6 \
      --eval_strategy steps --eval_steps 3 --save_strategy steps --save_steps 3 --save_total_limit 1
check resume train "$cfg" --output_dir "$runs/mlp" "${small[@]}" --max_steps 8 --eval_strategy steps --eval_steps 4 \
      --save_strategy steps --save_steps 4 --resume_from_checkpoint latest
check train_async train "$cfg" --output_dir "$runs/async" "${small[@]}" --max_steps 6 --eval_strategy steps \
      --eval_steps 2 --save_strategy steps --save_steps 4 --eval_async true --save_async true \
      --load_best_model_at_end true --metric_for_best_model small_accuracy
check evaluate evaluate "$cfg" --model "$runs/mlp" "${small[@]}"
check predict predict "$cfg" --model "$runs/mlp" --output "$runs/predictions.h5" "${small[@]}"

# A small GPT on the fortunes corpus when it is installed, else on this repository's documentation.
text=(/usr/share/games/fortunes/fortunes)
[ -e "${text[0]}" ] || text=(README.md docs/ARCHITECTURE.md)
check tokenize data tokenize --input "${text[@]}" --output "$runs/gpt/train.bin" --val-output "$runs/gpt/val.bin" --eot
gpt=(examples/configs/fortunes_gpt.json --set "data.train.path=\"$runs/gpt/train.bin\""
     --set "data.eval.path=\"$runs/gpt/val.bin\"" --set data.eval.limit=4
     --set model.n_positions=32 --set model.n_embd=32 --set model.n_layer=1 --set data.train.context=32
     --set data.eval.context=32 --set data.eval.stride=32)
check train_gpt train "${gpt[@]}" --output_dir "$runs/gpt/run" --per_device_train_batch_size 4 \
      --per_device_eval_batch_size 4 --max_steps 3 --eval_steps 3 --save_steps 3 --eval_on_start false --logging_steps 1
check generate generate "${gpt[@]}" --model "$runs/gpt/run" --prompt "The " --max_new_tokens 8 --seed 1

if [ "$failed" -eq 0 ]; then
  echo "valgrind: no errors, no definite leaks"
  exit 0
fi
echo "failures above (logs in $logs)"
exit 1
