#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, docs/fuzzing.md) with clang into build-fuzz/ and runs each for
# SECONDS (default 30), one after the other, from its seed corpus fuzz/corpus/<target>/ plus the corpus
# grown by earlier runs (build-fuzz/corpus/<target>/, kept between runs). A crash, leak, sanitizer
# report, timeout or out-of-memory stops that target with its input saved as
# build-fuzz/crashes/<target>-<kind>-<sha1> and makes the script exit 1 after the others have run;
# the log is build-fuzz/logs/<target>.log. A summary line per target gives executions and corpus size.
#
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]     targets: checkpoint h5_flip hdf5_dataset idx run_config
#                                                  safetensors token_dataset (default: all)
#        scripts/fuzz.sh --seeds                   rewrites the seeds the targets make themselves from
#                                                  files the project writes (checkpoint, h5_flip,
#                                                  hdf5_dataset, safetensors) in fuzz/corpus/
#        scripts/fuzz.sh --merge TARGET...         minimises the grown corpus into fuzz/corpus/<target>/
#                                                  (keep the repository's corpora small: check the size)
# Environment: CC (default clang), FUZZ_BUILD_DIR (default build-fuzz), FUZZ_ARGS (extra libFuzzer
# flags, e.g. "-jobs=2 -workers=2").
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${FUZZ_BUILD_DIR:-build-fuzz}
mode=run
seconds=30
case "${1:-}" in
  --seeds) mode=seeds; shift ;;
  --merge) mode=merge; shift ;;
  [0-9]*) seconds=$1; shift ;;
esac

all=()
for f in fuzz/fuzz_*.c; do all+=("$(basename "$f" .c | sed 's/^fuzz_//')"); done
targets=("$@")
((${#targets[@]})) || targets=("${all[@]}")
for t in "${targets[@]}"; do
  [ -e "fuzz/fuzz_$t.c" ] || { echo "fuzz.sh: unknown target '$t' (have: ${all[*]})" >&2; exit 2; }
done

# Configure once with clang (CTRAINER_FUZZ refuses any other compiler); build only the targets.
if [ ! -e "$dir/CMakeCache.txt" ]; then
  CC=${CC:-clang} cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCTRAINER_FUZZ=ON -DCTRAINER_CUDA=OFF \
    -DCTRAINER_MPI=OFF -DCTRAINER_ONEDNN=OFF -DCTRAINER_TESTS=OFF -DCTRAINER_BENCH=OFF -DCTRAINER_TENSORBOARD=OFF \
    -DCTRAINER_PLOT=OFF -DCTRAINER_NATIVE=OFF >/dev/null
fi
cmake --build "$dir" -j"$(nproc)" --target "${targets[@]/#/fuzz_}"

# Leaks are reported (and fail the run); huge allocations are failures too (a size read from a file
# must be checked before it is allocated), so the allocator does not return NULL for them.
export ASAN_OPTIONS="${ASAN_OPTIONS:-} detect_leaks=1 abort_on_error=0 allocator_may_return_null=0"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-} print_stacktrace=1 halt_on_error=1"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
empty=$(mktemp)
trap 'rm -f "$empty"' EXIT

if [ "$mode" = seeds ]; then
  for t in checkpoint h5_flip hdf5_dataset safetensors; do
    mkdir -p "fuzz/corpus/$t"
    CT_FUZZ_WRITE_SEEDS="fuzz/corpus/$t" "$dir/fuzz/fuzz_$t" "$empty" >/dev/null 2>&1
    echo "seeds: fuzz/corpus/$t: $(ls "fuzz/corpus/$t" | wc -l) files"
  done
  exit 0
fi

if [ "$mode" = merge ]; then
  mkdir -p "$dir/logs"
  for t in "${targets[@]}"; do
    merged="$dir/merged/$t"
    rm -rf "$merged" && mkdir -p "$merged"
    dict=(); [ -e "fuzz/$t.dict" ] && dict=(-dict="fuzz/$t.dict")
    "$dir/fuzz/fuzz_$t" -merge=1 "${dict[@]}" "$merged" "fuzz/corpus/$t" "$dir/corpus/$t" >"$dir/logs/$t.merge.log" 2>&1
    kb=$(find "$merged" -type f -printf '%s\n' | awk '{s += $1} END {printf "%d", (s + 1023) / 1024}')
    echo "merge: $t: $(ls "$merged" | wc -l) files, $kb KB (in $merged; copy what is worth keeping)"
  done
  exit 0
fi

mkdir -p "$dir/crashes" "$dir/logs"
failed=()
printf '%-14s %8s %12s %9s %14s  %s\n' target seconds executions exec/s corpus result
for t in "${targets[@]}"; do
  corpus="$dir/corpus/$t"
  mkdir -p "$corpus"
  dict=(); [ -e "fuzz/$t.dict" ] && dict=(-dict="fuzz/$t.dict")
  log="$dir/logs/$t.log"
  rc=0
  # a target's LeakSanitizer suppressions (third-party leaks only, each with its reason): fuzz/<target>.lsan
  lsan=""; [ -e "fuzz/$t.lsan" ] && lsan="suppressions=$PWD/fuzz/$t.lsan"
  # shellcheck disable=SC2086
  LSAN_OPTIONS="${LSAN_OPTIONS:-} $lsan" "$dir/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=25 -rss_limit_mb=2048 -max_len=16384 \
    -print_final_stats=1 -artifact_prefix="$dir/crashes/$t-" "${dict[@]}" ${FUZZ_ARGS:-} \
    "$corpus" "fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
  files=$(find "$corpus" -type f | wc -l)
  kb=$(find "$corpus" -type f -printf '%s\n' | awk '{s += $1} END {printf "%d", (s + 1023) / 1024}')
  rate=$(( ${secs:-0} > 0 ? ${execs:-0} / ${secs:-1} : 0 ))
  if [ "$rc" -eq 0 ]; then
    result=ok
  else
    result="FAILED (exit $rc)"
    failed+=("$t")
  fi
  printf '%-14s %8s %12s %9s %14s  %s\n' "$t" "${secs:-?}" "${execs:-?}" "$rate" "$files/${kb}KB" "$result"
  if [ "$rc" -ne 0 ]; then
    grep -E "^==[0-9]+==ERROR|runtime error|^SUMMARY|assertion failed|Test unit written|ERROR: libFuzzer" "$log" | head -8 | sed 's/^/    /'
    echo "    log: $log"
  fi
done
if ((${#failed[@]})); then
  echo "fuzz.sh: failures in ${failed[*]}: reproduce with $dir/fuzz/fuzz_<target> <input> (docs/fuzzing.md)"
  exit 1
fi
