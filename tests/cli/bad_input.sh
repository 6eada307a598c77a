#!/usr/bin/env bash
# bad_input.sh CTRAINER CASE: one row of docs/bad_inputs.md that needs files made first (a damaged
# data file, a damaged or foreign checkpoint, an odd environment). Makes them in a temporary
# directory, runs CTRAINER and passes only if it exits with the row's code and its output matches the
# row's message (tests/cli/expect.sh does the check). The rows that need no files are ct_cli_test
# lines in tests/CMakeLists.txt. `bad_input.sh --list` prints the cases.
# The data files are synthetic (a few bytes written here); the checkpoint rows train the CLI's tiny
# config on Fashion-MNIST for two steps first.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cases=(config_empty config_not_object config_no_model config_no_data config_duplicate_key config_bom
       env_cpu_isa_unknown env_cpu_gemm_unknown env_cpu_gemm_library_missing
       idx_truncated idx_not_idx idx_labels_as_images hdf5_no_dataset hdf5_truncated hdf5_label_out_of_range
       hdf5_eval_label_beyond_model hdf5_test_label_beyond_model hdf5_float_labels idx_label_beyond_model
       tokens_beyond_vocab tokens_beyond_model_vocab tokens_odd_size dataset_cache_full convert_csv_disk_full
       checkpoint_truncated checkpoint_flipped_byte checkpoint_latest_skips_damaged checkpoint_other_model
       checkpoint_other_optimizer checkpoint_other_global_batch checkpoint_is_a_file evaluate_corrupt_model
       evaluate_other_model evaluate_flipped_byte predict_flipped_byte export_flipped_byte init_from_not_safetensors
       init_from_nan_weights checkpoint_resigned_metadata checkpoint_resume_other_output_dir
       env_omp_threads_garbage env_omp_threads_huge env_hdf5_cache_garbage output_dir_under_a_file output_dir_in_use
       output_dir_stale_lock output_dir_leftovers output_dir_is_a_file output_dir_not_empty
       predict_output_is_model predict_output_is_data resume_from_output_dir evaluate_other_activation
       checkpoint_other_train_size checkpoint_other_data_seed checkpoint_resume_earlier generate_output_is_input convert_output_is_input tokenize_output_is_input
       export_into_other_model
       config_fifo hdf5_fifo idx_device tokens_fifo checkpoint_manifest_fifo evaluate_model_fifo init_from_fifo)
if [ "${1:-}" = --list ]; then printf '%s\n' "${cases[@]}"; exit 0; fi
ctrainer=$1 case=$2
tmp=$(mktemp -d)
holder=  # a run that holds the output_dir (output_dir_in_use), ended with the test
trap '[ -n "$holder" ] && kill -9 "$holder" 2>/dev/null && wait "$holder" 2>/dev/null; rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
tiny=$here/configs/tiny_sequential.json
expect() { "$here/expect.sh" "$@"; }

# run_config FILE MODEL TRAIN_DATA: a config that trains MODEL on TRAIN_DATA for two steps, nothing saved.
run_config() {
  printf '{"model": %s, "data": {"train": %s},\n "training_args": {"max_steps": 2, "per_device_train_batch_size": 8, "output_dir": "out", "save_strategy": "no", "report_to": []}}\n' \
         "$2" "$3" >"$1"
}
mlp='{"type": "mlp", "hidden": [8]}'
gpt='{"type": "gpt", "vocab_size": 257, "n_positions": 16, "n_embd": 16, "n_layer": 1, "n_head": 2}'

# idx_images N H W BYTES: an IDX header for N u8 images of HxW followed by BYTES random bytes.
idx_images() {
  printf "\\0\\0\\10\\3$(be32 "$1")$(be32 "$2")$(be32 "$3")"
  head -c "$4" /dev/urandom
}
# idx_labels N: N u8 labels 0..9.
idx_labels() {
  printf "\\0\\0\\10\\1$(be32 "$1")"
  for ((i = 0; i < $1; i++)); do printf "\\$(printf %o $((i % 10)))"; done
}
be32() { printf '\\%o\\%o\\%o\\%o' $(($1 >> 24 & 255)) $(($1 >> 16 & 255)) $(($1 >> 8 & 255)) $(($1 & 255)); }
# tokens FILE N BAD_AT BAD_ID: N uint16 little-endian token ids 0..49, BAD_ID at position BAD_AT.
tokens() {
  for ((i = 0; i < $2; i++)); do
    local id=$((i % 50))
    [ "$i" -eq "$3" ] && id=$4
    printf "\\$(printf %o $((id & 255)))\\$(printf %o $((id >> 8)))"
  done >"$1"
}
# csv_h5 FILE: an HDF5 file from 64 CSV rows (3 features, labels 0..2) through `ctrainer data convert`.
csv_h5() {
  for ((i = 0; i < 64; i++)); do echo "$((i % 7)),$((i % 5)),$((i % 3)),$((i % 3))"; done >t.csv
  "$ctrainer" data convert --csv t.csv -o "$1" >/dev/null || { echo "data convert failed"; exit 1; }
}
# labels_h5 FILE BAD_AT BAD_LABEL: csv_h5's data with BAD_LABEL as the label of sample BAD_AT.
labels_h5() {
  for ((i = 0; i < 64; i++)); do echo "$((i % 7)),$((i % 5)),$((i % 3)),$((i == $2 ? $3 : i % 3))"; done >l.csv
  "$ctrainer" data convert --csv l.csv -o "$1" >/dev/null || { echo "data convert failed"; exit 1; }
}
# untrained DIR: fails unless DIR is missing or holds no trace of training (the refusal came first).
untrained() {
  if [ -e "$1/trainer_state.json" ] || compgen -G "$1/checkpoint-*" >/dev/null; then echo "$1: trained anyway"; exit 1; fi
}
# flip FILE: one byte in the middle of FILE inverted.
flip() {
  local size byte
  size=$(stat -c %s "$1")
  byte=$(od -An -tu1 -j $((size / 2)) -N1 "$1" | tr -d ' ')
  printf "\\$(printf %o $((byte ^ 255)))" | dd of="$1" bs=1 seek=$((size / 2)) conv=notrunc status=none
}
# resign DIR FILE: FILE's size and CRC-32 (gzip's trailer holds zlib's) put in DIR/manifest.json, as
# a tool that edits a checkpoint and rewrites its manifest would.
resign() {
  local size crc
  size=$(stat -c %s "$1/$2")
  crc=$(gzip -c "$1/$2" | tail -c8 | od -An -tx4 -N4 | tr -d ' ')
  sed -i "/\"$2\": {/,/}/{s/\"crc32\": \"[0-9a-f]*\"/\"crc32\": \"$crc\"/; s/\"size\": [0-9]*/\"size\": $size/}" "$1/manifest.json"
}
# checkpoint DIR: DIR/checkpoint-2 and DIR/checkpoint-4 from 4 steps of the tiny config.
checkpoint() {
  "$ctrainer" train "$tiny" --output_dir "$1" --max_steps 4 --save_strategy steps --save_steps 2 --eval_strategy no \
      --set data.train.limit=256 --set data.eval.small.limit=64 --set data.eval.other.limit=64 \
      --set data.test.limit=64 --report_to none >train.log 2>&1 || { cat train.log; echo "training failed"; exit 1; }
}
resume=(train "$tiny" --set data.train.limit=256 --set data.eval.small.limit=64 --set data.eval.other.limit=64
        --set data.test.limit=64 --report_to none)

case $case in
# --- config ---
config_empty)
  : >empty.json
  expect 2 "empty.json:1:1: '\\[' or '\\{' expected near end of file" "$ctrainer" train empty.json ;;
config_not_object)
  echo '[1, 2]' >list.json
  expect 2 "list.json:1:1: a run config must be a JSON object \\(with sections model, data, ...\\), got a list" \
         "$ctrainer" train list.json ;;
config_no_model)
  echo '{"data": {"train": {"type": "fashion_mnist", "split": "train"}}}' >nomodel.json
  expect 2 'nomodel.json: the run config has no "model" section' "$ctrainer" train nomodel.json ;;
config_no_data)
  echo '{"model": {"type": "mlp", "hidden": [8]}}' >nodata.json
  expect 2 'nodata.json: the run config has no "data" section' "$ctrainer" train nodata.json ;;
config_duplicate_key)
  printf '{"model": {"type": "mlp"},\n "model": {"type": "mlp", "hidden": [8]}}\n' >dup.json
  expect 2 "dup.json:2:2: duplicate object key near '\"model\"'" "$ctrainer" train dup.json ;;
config_bom)
  printf '\xef\xbb\xbf{"model": {"type": "mlp"}}\n' >bom.json
  expect 2 "bom.json:1:1: the file starts with a UTF-8 byte-order mark, which JSON does not allow; save it without one" \
         "$ctrainer" train bom.json ;;
# --- data ---
idx_truncated)
  { idx_images 100 28 28 100; } >img.idx
  idx_labels 100 >lab.idx
  run_config run.json "$mlp" '{"type": "idx", "images": "img.idx", "labels": "lab.idx", "num_classes": 10}'
  expect 1 "data.train.images: img.idx: truncated IDX data \\(the header claims 78400 bytes, the file holds 100\\)" \
         "$ctrainer" train run.json ;;
idx_not_idx)
  echo "these are not images" >img.idx
  idx_labels 100 >lab.idx
  run_config run.json "$mlp" '{"type": "idx", "images": "img.idx", "labels": "lab.idx", "num_classes": 10}'
  expect 1 "data.train.images: img.idx: not an IDX file \\(bad magic number\\)" "$ctrainer" train run.json ;;
idx_labels_as_images)
  idx_labels 100 >lab.idx
  run_config run.json "$mlp" '{"type": "idx", "images": "lab.idx", "labels": "lab.idx", "num_classes": 10}'
  expect 1 "data.train.images: lab.idx: expected images of rank 2 to 4 \\(\\[N, D\\] or \\[N, H, W\\] or \\[N, C, H, W\\]\\), got \\[100\\] u8" \
         "$ctrainer" train run.json ;;
hdf5_no_dataset)
  csv_h5 data.h5
  run_config run.json "$mlp" '{"type": "hdf5", "path": "data.h5", "features": "images"}'
  expect 1 "data.train.path: data.h5: no dataset 'images' \\(expected the features there\\); the file has 'features' \\[64, 3\\] f32, 'labels' \\[64\\] i64" \
         "$ctrainer" train run.json ;;
hdf5_truncated)
  csv_h5 data.h5
  head -c 1500 data.h5 >cut.h5
  run_config run.json "$mlp" '{"type": "hdf5", "path": "cut.h5"}'
  expect 1 "data.train.path: cut.h5: cannot open as HDF5 \\(truncated or corrupt file\\?\\): truncated file" \
         "$ctrainer" train run.json ;;
hdf5_label_out_of_range)
  csv_h5 data.h5
  run_config run.json "$mlp" '{"type": "hdf5", "path": "data.h5", "num_classes": 2}'
  expect 1 "data.h5: label 2 of sample [0-9]+ in dataset 'labels' is outside \\[0, 2\\) \\(num_classes from num_classes of the config\\)" \
         "$ctrainer" train run.json ;;
hdf5_eval_label_beyond_model)
  # The last-but-some sample of the evaluation set holds class 3 of a 3-class model (the file's own
  # num_classes attribute says 4): refused at init, before the first step, not after training.
  csv_h5 train.h5
  labels_h5 val.h5 40 3
  printf '{"model": %s, "data": {"train": {"type": "hdf5", "path": "train.h5"}, "eval": {"val": {"type": "hdf5", "path": "val.h5"}}},\n "training_args": {"max_steps": 4, "per_device_train_batch_size": 8, "output_dir": "out", "eval_strategy": "steps", "eval_steps": 4, "save_strategy": "no", "report_to": []}}\n' \
         "$mlp" >run.json
  expect 1 "ctrainer train: eval_dataset 'val': val.h5: label 3 of sample 40 in dataset 'labels' is not a class of the model's 3 outputs: the cross_entropy loss expects an integer in \\[0, 3\\) or its ignore_index -100" \
         "$ctrainer" train run.json && untrained out ;;
hdf5_test_label_beyond_model)
  # The test set of a trained model, for every command that reads it: train (predicted at the end,
  # checked at the start), evaluate (the test set stands in for the missing eval set) and predict.
  csv_h5 train.h5
  "$ctrainer" data convert --csv t.csv -o test.h5 >/dev/null
  printf '{"model": %s, "data": {"train": {"type": "hdf5", "path": "train.h5"}, "test": {"type": "hdf5", "path": "test.h5"}},\n "training_args": {"max_steps": 2, "per_device_train_batch_size": 8, "output_dir": "model", "save_strategy": "no", "report_to": []}}\n' \
         '{"type": "mlp", "hidden": [8], "num_classes": 3}' >run.json
  "$ctrainer" train run.json >/dev/null 2>&1 || { echo "training the model failed"; exit 1; }
  labels_h5 test.h5 63 5
  msg="test.h5: label 5 of sample 63 in dataset 'labels' is not a class of the model's 3 outputs"
  expect 1 "ctrainer train: test_dataset: $msg" "$ctrainer" train run.json --output_dir again && untrained again &&
    expect 1 "ctrainer evaluate: eval_dataset: $msg" "$ctrainer" evaluate run.json --model model &&
    expect 1 "ctrainer predict: test_dataset: $msg" "$ctrainer" predict run.json --model model --output p.h5 &&
    { [ ! -e p.h5 ] || { echo "p.h5 written anyway"; exit 1; }; } ;;
hdf5_float_labels)
  # Float labels (one of them 2.5) in a file a classifier trains on: the data is named, not the model.
  for ((i = 0; i < 64; i++)); do echo "$((i % 7)),$((i % 5)),$((i % 3)),$((i % 3)).$((i == 20 ? 5 : 0))"; done >f.csv
  "$ctrainer" data convert --csv f.csv -o data.h5 >/dev/null
  run_config run.json '{"type": "mlp", "hidden": [8], "num_classes": 3}' '{"type": "hdf5", "path": "data.h5"}'
  expect 1 "ctrainer train: train_dataset: data.h5: dataset 'labels' holds f32 labels, but the cross_entropy loss expects integer class ids in \\[0, 3\\), the classes of the model's 3 outputs: store them with an integer type \\(u8, i32 or i64, say\\); label 2.5 of sample 20 is no class id at all" \
         "$ctrainer" train run.json && untrained out ;;
idx_label_beyond_model)
  # IDX labels 0..9 (num_classes 10 in the data) for a model of 5 outputs: the labels file and the
  # first sample whose label has no output.
  idx_images 100 4 4 1600 >img.idx
  idx_labels 100 >lab.idx
  run_config run.json '{"type": "mlp", "hidden": [8], "num_classes": 5}' '{"type": "idx", "images": "img.idx", "labels": "lab.idx", "num_classes": 10}'
  expect 1 "ctrainer train: train_dataset: lab.idx: label 5 of sample 5 is not a class of the model's 5 outputs" \
         "$ctrainer" train run.json && untrained out ;;
tokens_beyond_vocab)
  tokens tok.bin 200 10 300
  run_config run.json "$gpt" '{"type": "tokens", "path": "tok.bin", "context": 16, "vocab_size": 257}'
  expect 1 "data.train.path: tok.bin: token id 300 at position 10 is outside the vocabulary \\[0, 257\\)" \
         "$ctrainer" train run.json ;;
tokens_beyond_model_vocab)
  # No vocab_size in the data: ct_trainer_init reads every window's labels before any step; the id
  # sits in the last window (tokens 177..192 are its labels), far from the first.
  tokens tok.bin 200 190 300
  run_config run.json "$gpt" '{"type": "tokens", "path": "tok.bin", "context": 16}'
  expect 1 "ctrainer train: train_dataset: tok.bin: label 300 of sample 11 \\(element 13, the token at position 190\\) is not a class of the model's 257 outputs" \
         "$ctrainer" train run.json && untrained out ;;
dataset_cache_full)
  # The disk is full when the cache is written (the fault hook fails that one write, as a full disk
  # would): a warning, the IDX files read instead, the very losses of a run without the cache, and
  # nothing of the cache left, not even the directory made for it.
  idx_images 200 4 4 3200 >img.idx
  idx_labels 200 >lab.idx
  run_config plain.json "$mlp" '{"type": "idx", "images": "img.idx", "labels": "lab.idx"}'
  run_config cached.json "$mlp" '{"type": "idx", "images": "img.idx", "labels": "lab.idx", "cache": "cache/c.h5"}'
  "$ctrainer" train plain.json --output_dir plain --logging_steps 1 >plain.log 2>&1 || { echo "the run without cache failed"; exit 1; }
  CT_IO_FAULT=0:1:ENOSPC expect 0 "warning: data.train.cache: the cache cache/c.h5 cannot be written \\(cache/c.h5: cannot build the cache: cannot write 'cache/c.h5': No space left on device\\); reading img.idx and lab.idx instead" \
         "$ctrainer" train cached.json --output_dir cached --logging_steps 1 | tee cached.log || exit 1
  [ ! -e cache ] || { echo "the cache's directory or files are left"; exit 1; }
  grep "'loss'" plain.log >a && grep "'loss'" cached.log >b && [ -s a ] && cmp -s a b || { echo "the losses differ from the run without cache"; diff a b; exit 1; } ;;
convert_csv_disk_full)
  # `data convert --csv` onto a full disk (the fault hook fails its one write, as a full disk would):
  # the reason with errno's text, exit 1, no output and no temporary file, and no crash at exit.
  awk 'BEGIN { srand(3); for (i = 0; i < 3000; i++) printf "%.4f,%.4f,%.4f,%d\n", rand(), rand(), rand(), i % 3 }' >t.csv
  CT_IO_FAULT=0:1:ENOSPC expect 1 "cannot write 'out.h5': No space left on device" \
         "$ctrainer" data convert --csv t.csv -o out.h5 || exit 1
  [ -z "$(ls -A . | grep -v '^t.csv$')" ] || { echo "left behind:"; ls -A; exit 1; }
  "$ctrainer" data convert --csv t.csv -o out.h5 >/dev/null || { echo "the same conversion fails with room"; exit 1; } ;;
tokens_odd_size)
  tokens tok.bin 200 -1 0
  printf 'x' >>tok.bin
  run_config run.json "$gpt" '{"type": "tokens", "path": "tok.bin", "context": 16}'
  expect 1 "data.train.path: tok.bin: size 401 bytes is not a multiple of 2 bytes per token" "$ctrainer" train run.json ;;
# --- checkpoints ---
checkpoint_truncated)
  checkpoint run
  truncate -s 1000 run/checkpoint-4/model.h5
  expect 1 "resume_from_checkpoint 'run/checkpoint-4': run/checkpoint-4: model.h5 is 1000 bytes, the manifest says [0-9]+ \\(truncated\\?\\)" \
         "$ctrainer" "${resume[@]}" --output_dir run --resume_from_checkpoint run/checkpoint-4 ;;
checkpoint_flipped_byte)
  checkpoint run
  flip run/checkpoint-4/optimizer.h5
  expect 1 "run/checkpoint-4: optimizer.h5 does not match its checksum \\(crc32 [0-9a-f]{8}, the manifest says [0-9a-f]{8}\\)" \
         "$ctrainer" "${resume[@]}" --output_dir run --resume_from_checkpoint run/checkpoint-4 ;;
checkpoint_latest_skips_damaged)
  checkpoint run
  truncate -s 1000 run/checkpoint-4/model.h5
  expect 0 "warning: skipping invalid checkpoint: run/checkpoint-4: model.h5 is 1000 bytes.*Resuming from run/checkpoint-2: step 2" \
         bash -c '"$@" 2>&1 | tr "\n" " "; exit "${PIPESTATUS[0]}"' _ "$ctrainer" "${resume[@]}" --output_dir run \
         --max_steps 4 --resume_from_checkpoint latest ;;
checkpoint_other_model)
  checkpoint run
  expect 1 "resume from run/checkpoint-4: load model 'run/checkpoint-4/model.h5': tensor '1.weight': hdf5: dataset '1.weight' has shape \\[32, 784\\], expected \\[16, 784\\]" \
         "$ctrainer" "${resume[@]}" --output_dir run --resume_from_checkpoint latest --set 'model.layers[1].out_features=16' ;;
checkpoint_other_optimizer)
  checkpoint run
  expect 2 "resume from run/checkpoint-4: load optimizer: run/checkpoint-4/optimizer.h5 holds 'adamw' state, this run uses 'sgd'" \
         "$ctrainer" "${resume[@]}" --output_dir run --resume_from_checkpoint latest --optim sgd ;;
checkpoint_other_global_batch)
  # What another world size with the same per-device batch amounts to (mpi.ddp_equivalence and the
  # unit tests resume on other world sizes with the same global batch).
  checkpoint run
  expect 2 "rng_state_0.json: the checkpoint was taken with a global batch of 64 samples \\(per_device_train_batch_size x processes\\), this run has 32 \\(32 x 1\\)" \
         "$ctrainer" "${resume[@]}" --output_dir run --resume_from_checkpoint latest --per_device_train_batch_size 32 ;;
checkpoint_other_train_size)
  # the position counts batches of an epoch of 256 samples (4 of 64); 512 would make it other samples
  checkpoint run
  expect 2 "rng_state_0.json: the checkpoint was taken with 4 batches per epoch, this run has 8 \\(a training set of another size, or another dataloader_drop_last\\)" \
         "$ctrainer" "${resume[@]}" --output_dir run --resume_from_checkpoint latest --set data.train.limit=512 ;;
checkpoint_other_data_seed)
  # checkpoint-2 is inside an epoch shuffled with seed 42: data_seed 7 would reorder the rest of it
  checkpoint run
  cp -r run/checkpoint-2 kept
  expect 2 "rng_state_0.json: the checkpoint's epoch was shuffled with data seed 42 \\(data_seed, else seed\\), this run has 7: its position would skip samples and repeat others" \
         "$ctrainer" "${resume[@]}" --output_dir run --resume_from_checkpoint run/checkpoint-2 --data_seed 7 || exit 1
  diff -r run/checkpoint-2 kept >/dev/null || { echo "the refused resume changed the checkpoint"; exit 1; }
  # starting the interrupted epoch again in the new order is allowed
  expect 0 "train_loss" "$ctrainer" "${resume[@]}" --output_dir run --resume_from_checkpoint run/checkpoint-2 \
         --seed 7 --ignore_data_skip true ;;
checkpoint_resume_earlier)
  # checkpoint-4 exists: a run resumed from checkpoint-2 saves its own step 4 over it, and says so first
  checkpoint run
  expect 0 "warning: output_dir 'run' holds 1 checkpoint of later steps than 2 \\(the newest: run/checkpoint-4\\): a checkpoint this run saves at such a step replaces the one there" \
         "$ctrainer" "${resume[@]}" --output_dir run --resume_from_checkpoint run/checkpoint-2 ;;
checkpoint_resigned_metadata)
  # the bytes check out (re-signed), what they say does not: the checkpoint's meaning is checked too
  checkpoint run
  sed -i 's/"global_step": 4,/"global_step": -5,/' run/checkpoint-4/trainer_state.json
  resign run/checkpoint-4 trainer_state.json
  expect 1 "resume from run/checkpoint-4: run/checkpoint-4/trainer_state.json: global_step: -5 is negative" \
         "$ctrainer" "${resume[@]}" --output_dir run --resume_from_checkpoint run/checkpoint-4 ;;
checkpoint_is_a_file)
  checkpoint run
  expect 1 "resume_from_checkpoint 'run/checkpoint-4/model.h5': run/checkpoint-4/model.h5: not a directory" \
         "$ctrainer" "${resume[@]}" --output_dir run --resume_from_checkpoint run/checkpoint-4/model.h5 ;;
evaluate_corrupt_model)
  checkpoint run
  truncate -s 1000 run/model.h5
  expect 1 "ctrainer evaluate: run: model.h5 is 1000 bytes, the manifest says [0-9]+ \\(truncated\\?\\)" \
         "$ctrainer" evaluate "$tiny" --model run --set data.eval.small.limit=64 --set data.eval.other.limit=64 ;;
evaluate_other_model)
  checkpoint run
  expect 1 "ctrainer evaluate: load model 'run/model.h5': tensor '1.weight': hdf5: dataset '1.weight' has shape \\[32, 784\\], expected \\[16, 784\\]" \
         "$ctrainer" evaluate "$tiny" --model run --set 'model.layers[1].out_features=16' ;;
checkpoint_resume_other_output_dir)
  # run a keeps only its best checkpoint (learning rate 0: the first evaluation stays the best); a
  # run resumed from it into b must not take that best's name as a licence to delete b's checkpoints
  "$ctrainer" "${resume[@]}" --output_dir a --max_steps 4 --learning_rate 0 --eval_strategy steps --eval_steps 1 \
      --save_strategy steps --save_steps 1 --save_total_limit 1 --load_best_model_at_end true \
      --metric_for_best_model small_loss >train.log 2>&1 || { cat train.log; echo "training failed"; exit 1; }
  expect 0 "the best checkpoint 'a/checkpoint-1' is not one of output_dir 'b''s checkpoints, so all 2 of those are kept" \
         "$ctrainer" "${resume[@]}" --output_dir b --max_steps 3 --learning_rate 0 --eval_strategy steps --eval_steps 1 \
         --save_strategy steps --save_steps 1 --save_total_limit 1 --load_best_model_at_end true \
         --metric_for_best_model small_loss --resume_from_checkpoint a/checkpoint-1 || exit 1
  [ -d b/checkpoint-2 ] && [ -d b/checkpoint-3 ] && [ -d a/checkpoint-1 ] || { ls a b; echo "a checkpoint was lost"; exit 1; } ;;
# Every reader of a saved model verifies its manifest first (checkpoint/checkpoint_io.h's
# ct_checkpoint_load_model): a flipped bit in the weights never evaluates to a huge loss.
evaluate_flipped_byte)
  checkpoint run
  flip run/checkpoint-4/model.h5
  expect 1 "ctrainer evaluate: run/checkpoint-4: model.h5 does not match its checksum \\(crc32 [0-9a-f]{8}, the manifest says [0-9a-f]{8}\\)" \
         "$ctrainer" evaluate "$tiny" --model run/checkpoint-4 --set data.eval.small.limit=64 --set data.eval.other.limit=64 ;;
predict_flipped_byte)
  checkpoint run
  flip run/model.h5
  expect 1 "ctrainer predict: run: model.h5 does not match its checksum \\(crc32 [0-9a-f]{8}, the manifest says [0-9a-f]{8}\\)" \
         "$ctrainer" predict "$tiny" --model run --output p.h5 --set data.test.limit=64 ;;
export_flipped_byte)
  checkpoint run
  flip run/checkpoint-2/model.h5
  expect 1 "ctrainer export: run/checkpoint-2: model.h5 does not match its checksum \\(crc32 [0-9a-f]{8}, the manifest says [0-9a-f]{8}\\)" \
         "$ctrainer" export --model run/checkpoint-2 --output hf ;;
init_from_not_safetensors)
  echo "these are not weights" >junk.safetensors
  printf '{"model": %s, "init_from": "junk.safetensors",\n "data": {"eval": {"type": "fashion_mnist", "split": "test", "limit": 64}}}\n' \
         "$mlp" >run.json
  expect 1 "ctrainer evaluate: init_from: ./junk.safetensors: header size [0-9]+ exceeds the format's limit of 100000000 bytes \\(not a safetensors file\\?\\)" \
         "$ctrainer" evaluate run.json ;;
init_from_nan_weights)
  # a NaN written over the first float of the data (the first tensor by name, element 0)
  checkpoint run
  "$ctrainer" export --model run --output hf >/dev/null || { echo "export failed"; exit 1; }
  header=$(od -An -tu8 -N8 hf/model.safetensors | tr -d ' ')
  printf '\0\0\300\177' | dd of=hf/model.safetensors bs=1 seek=$((8 + header)) conv=notrunc status=none
  printf '{"model": %s, "init_from": "hf/model.safetensors",\n "data": {"eval": {"type": "fashion_mnist", "split": "test", "limit": 64}}}\n' \
         '{"type": "sequential", "layers": [{"type": "flatten"}, {"type": "linear", "out_features": 32}, {"type": "relu"}, {"type": "linear", "out_features": 10}]}' >run.json
  expect 1 "ctrainer evaluate: init_from: ./hf/model.safetensors: tensor '[0-9a-z_.]+': holds 1 non-finite value, the first nan at element 0 of [0-9]+" \
         "$ctrainer" evaluate run.json ;;
# --- not regular files: refused at once, never read (a FIFO without a writer would block for ever;
# `timeout` turns a hang into a failure of the test instead of a stuck suite) ---
config_fifo)
  mkfifo run.json
  expect 2 "ctrainer train: run.json: cannot read: Is a FIFO \\(named pipe\\), not a regular file" \
         timeout 60 "$ctrainer" train run.json ;;
hdf5_fifo)
  mkfifo data.h5
  run_config run.json "$mlp" '{"type": "hdf5", "path": "data.h5"}'
  expect 1 "data.train.path: data.h5: cannot read: Is a FIFO \\(named pipe\\), not a regular file" \
         timeout 60 "$ctrainer" train run.json ;;
idx_device)
  idx_labels 100 >lab.idx
  run_config run.json "$mlp" '{"type": "idx", "images": "/dev/zero", "labels": "lab.idx"}'
  expect 1 "data.train.images: /dev/zero: cannot read: Is a character device, not a regular file" \
         timeout 60 "$ctrainer" train run.json ;;
tokens_fifo)
  mkfifo tok.bin
  run_config run.json "$gpt" '{"type": "tokens", "path": "tok.bin", "context": 8}'
  expect 1 "data.train.path: tok.bin: cannot read: Is a FIFO \\(named pipe\\), not a regular file" \
         timeout 60 "$ctrainer" train run.json ;;
checkpoint_manifest_fifo)
  checkpoint run
  rm run/checkpoint-4/manifest.json && mkfifo run/checkpoint-4/manifest.json
  expect 1 "resume_from_checkpoint 'run/checkpoint-4': run/checkpoint-4: run/checkpoint-4/manifest.json: cannot read: Is a FIFO \\(named pipe\\), not a regular file" \
         timeout 60 "$ctrainer" "${resume[@]}" --output_dir run --resume_from_checkpoint run/checkpoint-4 ;;
evaluate_model_fifo)
  checkpoint run
  rm run/model.h5 && mkfifo run/model.h5
  expect 1 "ctrainer evaluate: run: model.h5 is not a regular file" \
         timeout 60 "$ctrainer" evaluate "$tiny" --model run --set data.eval.small.limit=64 --set data.eval.other.limit=64 ;;
init_from_fifo)
  mkfifo w.safetensors
  printf '{"model": %s, "init_from": "w.safetensors",\n "data": {"eval": {"type": "fashion_mnist", "split": "test", "limit": 64}}}\n' \
         "$mlp" >run.json
  expect 1 "ctrainer evaluate: init_from: ./w.safetensors: cannot read: Is a FIFO \\(named pipe\\), not a regular file" \
         timeout 60 "$ctrainer" evaluate run.json ;;
# --- environment ---
env_omp_threads_garbage)
  # libgomp's warning, then training on its default thread count
  run_config run.json "$mlp" '{"type": "fashion_mnist", "split": "train", "limit": 64}'
  expect 0 "libgomp: Invalid value for environment variable OMP_NUM_THREADS" \
         env OMP_NUM_THREADS=lots "$ctrainer" train run.json ;;
env_omp_threads_huge)
  # a team of 100000 threads: refused with the reason, before libgomp crashes creating it
  run_config run.json "$mlp" '{"type": "fashion_mnist", "split": "train", "limit": 64}'
  expect 2 "ctrainer: OMP_NUM_THREADS asks for 100000 threads on a machine of [0-9]+ CPUs \\(at most [0-9]+ are accepted" \
         env OMP_NUM_THREADS=100000 "$ctrainer" train run.json || exit 1
  [ ! -e out ] || { echo "the refused run made its output_dir"; exit 1; } ;;
env_cpu_isa_unknown)
  # a level name that is none (the instruction sets go by x86-64 level): refused before anything
  # runs or is written, rather than a run on another path than the one asked for
  run_config run.json "$mlp" '{"type": "fashion_mnist", "split": "train", "limit": 64}'
  expect 2 "^ctrainer: CT_CPU_ISA='avx2' is not a level: use v1 \(x86-64, SSE2\), v2 \(SSE4\.2\), v3 \(AVX2, FMA\) or v4 \(AVX-512\)" \
         env CT_CPU_ISA=avx2 "$ctrainer" train run.json || exit 1
  [ ! -e out ] || { echo "the refused run made its output_dir"; exit 1; } ;;
env_cpu_gemm_unknown)
  # a GEMM engine that is none: refused before anything runs or is written, rather than a run on
  # another library than the one asked for
  run_config run.json "$mlp" '{"type": "fashion_mnist", "split": "train", "limit": 64}'
  expect 2 "^ctrainer: CT_CPU_GEMM='mkl' is not a GEMM engine: use builtin, openblas or onednn, or unset it" \
         env CT_CPU_GEMM=mkl "$ctrainer" train run.json || exit 1
  [ ! -e out ] || { echo "the refused run made its output_dir"; exit 1; } ;;
env_cpu_gemm_library_missing)
  # oneDNN asked for where its library cannot be opened (the package removed after the build):
  # refused before anything runs or is written. The removal is an empty file bind-mounted over the
  # library in a mount namespace of this test's own (private: nothing outside sees it). Skipped (77)
  # in a build without oneDNN, where no libdnnl.so.2 is installed, or where no mount namespace may be
  # made (not root, or a container that forbids it).
  lib=$(ldconfig -p | awk '/^[[:space:]]*libdnnl\.so\.2 .*x86-64/ {print $NF; exit}')
  [ -n "$lib" ] || { echo "no libdnnl.so.2 installed: skipped"; exit 77; }
  env CT_CPU_GEMM=onednn "$ctrainer" version >/dev/null 2>&1 || { echo "a build without oneDNN: skipped"; exit 77; }
  : >empty
  : >probe
  unshare -m sh -c 'mount --bind "$1" "$2"' sh "$tmp/empty" "$tmp/probe" 2>/dev/null ||
    { echo "no mount namespace here: skipped"; exit 77; }
  run_config run.json "$mlp" '{"type": "fashion_mnist", "split": "train", "limit": 64}'
  expect 2 "^ctrainer: CT_CPU_GEMM=onednn: cannot open libdnnl\.so\.2 \(.+\); install libdnnl2, or unset it" \
         unshare -m sh -c 'mount --bind "$1" "$2" && exec env CT_CPU_GEMM=onednn "$3" train run.json' \
         sh "$tmp/empty" "$lib" "$ctrainer" || exit 1
  [ ! -e out ] || { echo "the refused run made its output_dir"; exit 1; } ;;
env_hdf5_cache_garbage)
  # not a positive number of MiB: the default block cache, silently
  csv_h5 data.h5
  run_config run.json "$mlp" '{"type": "hdf5", "path": "data.h5"}'
  expect 0 "train_loss" env CTRAINER_HDF5_CACHE_MB=much "$ctrainer" train run.json ;;
output_dir_under_a_file)
  # nothing could be saved there: refused before the first step, not found out at the first save
  echo "a file" >blocker
  run_config run.json "$mlp" '{"type": "fashion_mnist", "split": "train", "limit": 64}'
  expect 1 "ctrainer train: output_dir 'blocker/out': cannot create directory 'blocker/out': Not a directory" \
         "$ctrainer" train run.json --output_dir blocker/out --save_strategy no || exit 1
  "$ctrainer" train run.json --output_dir blocker/out --save_strategy no 2>&1 | grep -q "train_loss" &&
    { echo "the run trained into a directory it could not make"; exit 1; }
  ln -s nowhere/deeper dangling
  expect 1 "ctrainer train: output_dir 'dangling': " "$ctrainer" train run.json --output_dir dangling ;;
output_dir_in_use)
  # a run that trains until it is killed holds out; a second run on out is refused at its start
  printf '{"model": %s, "data": {"train": {"type": "fashion_mnist", "split": "train", "limit": 64}},\n "training_args": {"max_steps": 100000000, "per_device_train_batch_size": 8, "output_dir": "out", "save_strategy": "no", "report_to": []}}\n' \
         "$mlp" >forever.json
  "$ctrainer" train forever.json >holder.log 2>&1 &
  holder=$!
  for _ in $(seq 600); do [ -s out/.ctrainer.lock ] && break; sleep 0.1; done
  run_config run.json "$mlp" '{"type": "fashion_mnist", "split": "train", "limit": 64}'
  expect 1 "output_dir 'out' is in use by another run: pid $holder on host [^ ]+, started [0-9-]+ [0-9:]+ UTC \\(lock file out/.ctrainer.lock\\)" \
         "$ctrainer" train run.json || exit 1
  # evaluate and predict write their results there too: refused before they evaluate
  "$ctrainer" train run.json --output_dir m >/dev/null 2>&1 || { echo "training m failed"; exit 1; }
  small='{"type": "fashion_mnist", "split": "test", "limit": 16}'
  expect 1 "output_dir 'out' is in use by another run: pid $holder" \
         "$ctrainer" evaluate run.json --model m --set "data.eval=$small" || exit 1
  expect 1 "output_dir 'out' is in use by another run: pid $holder" \
         "$ctrainer" predict run.json --model m --set "data.test=$small" --output p.h5 || exit 1
  [ ! -e out/eval_results.json ] && [ ! -e out/test_results.json ] && [ ! -e p.h5 ] ||
    { echo "a refused command wrote its results"; exit 1; }
  kill -0 "$holder" || { cat holder.log; echo "the run holding out ended"; exit 1; } ;;
output_dir_stale_lock)
  # the lock file of a run that was killed: taken over with a warning that names it
  mkdir out
  echo '{"pid": 999999999, "host": "gone-host", "started": "2020-01-02 03:04:05 UTC"}' >out/.ctrainer.lock
  run_config run.json "$mlp" '{"type": "fashion_mnist", "split": "train", "limit": 64}'
  expect 0 "warning: output_dir 'out': taking over the lock left by pid 999999999 on host gone-host, started 2020-01-02 03:04:05 UTC, which no longer runs" \
         "$ctrainer" train run.json || exit 1
  [ ! -e out/.ctrainer.lock ] || { echo "the run left its lock file"; exit 1; } ;;
output_dir_leftovers)
  # what a killed run left (a save not committed, rotation's victims renamed aside) goes at the start
  mkdir -p out/checkpoint-6.tmp out/checkpoint-2.deleting
  echo partial >out/checkpoint-6.tmp/model.h5
  run_config run.json "$mlp" '{"type": "fashion_mnist", "split": "train", "limit": 64}'
  expect 0 "out/checkpoint-2.deleting: deleted, a leftover of a run that did not end cleanly" \
         "$ctrainer" train run.json || exit 1
  [ ! -e out/checkpoint-6.tmp ] && [ ! -e out/checkpoint-2.deleting ] || { ls out; echo "leftovers stayed"; exit 1; } ;;
output_dir_not_empty)
  # a fresh run into a directory of the user's: refused, nothing written; written into only when asked
  mkdir out && echo "# my notes" >out/README.md
  run_config run.json "$mlp" '{"type": "fashion_mnist", "split": "train", "limit": 64}'
  expect 2 "training_args.output_dir: 'out' already holds 1 entry \\('README.md'\\), which this run's files would replace; continue its run with --resume_from_checkpoint latest, write into it anyway with --overwrite_output_dir true, or choose another output_dir" \
         "$ctrainer" train run.json || exit 1
  [ "$(cat out/README.md)" = "# my notes" ] && [ "$(ls -A out)" = README.md ] || { ls -A out; echo "the refused run wrote into out"; exit 1; }
  expect 0 "Saving model checkpoint to out|train_runtime" "$ctrainer" train run.json --overwrite_output_dir true ;;
predict_output_is_model)
  # predictions written over the model they come from would destroy it
  checkpoint run
  cp run/model.h5 kept.h5
  expect 2 "ctrainer predict: --output run/model.h5 is 'run/model.h5', which this command reads; write to another file" \
         "$ctrainer" predict "$tiny" --model run --output run/model.h5 --set data.test.limit=64 || exit 1
  cmp -s run/model.h5 kept.h5 || { echo "the refused predict changed the model"; exit 1; } ;;
predict_output_is_data)
  csv_h5 data.h5
  cp data.h5 kept.h5
  printf '{"model": %s, "data": {"train": {"type": "hdf5", "path": "data.h5"}, "test": {"type": "hdf5", "path": "data.h5"}},\n "training_args": {"max_steps": 2, "per_device_train_batch_size": 8, "output_dir": "out", "save_strategy": "no", "report_to": []}}\n' \
         "$mlp" >run.json
  "$ctrainer" train run.json >train.log 2>&1 || { cat train.log; echo "training failed"; exit 1; }
  expect 2 "ctrainer predict: --output \\./data.h5 is 'data.h5', which this command reads; write to another file" \
         "$ctrainer" predict run.json --model out --output ./data.h5 || exit 1
  cmp -s data.h5 kept.h5 || { echo "the refused predict changed the data"; exit 1; } ;;
generate_output_is_input)
  # the texts never land on the model, the config, the data or another file of the saved model
  checkpoint run
  cp run/model.h5 kept.h5
  cp "$tiny" tiny.json
  expect 2 "ctrainer generate: --output run/model.h5 is 'run/model.h5', which this command reads; write to another file" \
         "$ctrainer" generate "$tiny" --model run --prompt ab --output run/model.h5 || exit 1
  expect 2 "ctrainer generate: --output tiny.json is 'tiny.json', which this command reads" \
         "$ctrainer" generate tiny.json --model run --prompt ab --output tiny.json || exit 1
  expect 2 "ctrainer generate: --output run/training_args.json is a file of the saved model in 'run' \\(its manifest.json lists it\\)" \
         "$ctrainer" generate "$tiny" --model run --prompt ab --output run/training_args.json || exit 1
  cmp -s run/model.h5 kept.h5 && cmp -s tiny.json "$tiny" || { echo "a refused generate changed its input"; exit 1; } ;;
convert_output_is_input)
  for ((i = 0; i < 16; i++)); do echo "$((i % 7)),$((i % 5)),$((i % 3))"; done >t.csv
  cp t.csv kept.csv
  expect 2 "ctrainer data convert: -o t.csv is 't.csv', which this command reads; write to another file" \
         "$ctrainer" data convert --csv t.csv -o t.csv || exit 1
  idx_images 4 2 2 16 >img.idx
  idx_labels 4 >lab.idx
  cp lab.idx kept.idx
  expect 2 "ctrainer data convert: -o \\./lab.idx is 'lab.idx', which this command reads" \
         "$ctrainer" data convert --images img.idx --labels lab.idx -o ./lab.idx || exit 1
  cmp -s t.csv kept.csv && cmp -s lab.idx kept.idx || { echo "a refused convert changed its input"; exit 1; } ;;
tokenize_output_is_input)
  printf 'some text to tokenize\n' >a.txt
  cp a.txt kept.txt
  ln -s a.txt link.txt
  expect 2 "ctrainer data tokenize: --output link.txt is 'a.txt', which this command reads" \
         "$ctrainer" data tokenize --input a.txt --output link.txt || exit 1
  expect 2 "ctrainer data tokenize: --val-output a.txt is 'a.txt', which this command reads" \
         "$ctrainer" data tokenize --input a.txt --output t.bin --val-fraction 0.5 --val-output a.txt || exit 1
  cmp -s a.txt kept.txt || { echo "a refused tokenize changed its input"; exit 1; }
  [ ! -e t.bin ] || { echo "a refused tokenize wrote its training tokens"; exit 1; } ;;
export_into_other_model)
  # another run's model.safetensors is that run's weights
  checkpoint run
  mkdir other && cp -r run/checkpoint-2/. other/
  cp other/model.h5 kept.h5
  expect 2 "ctrainer export: --output other holds another saved model \\(its manifest.json\\)" \
         "$ctrainer" export --model run --output other || exit 1
  [ ! -e other/model.safetensors ] && cmp -s other/model.h5 kept.h5 || { echo "the refused export wrote"; exit 1; }
  expect 0 "exported [0-9]+ tensors to run/model.safetensors" "$ctrainer" export --model run ;;
evaluate_other_activation)
  # weights of the same shapes load into another network: said, with both specs
  checkpoint run
  expect 0 "warning: the config's model \\{.*\"type\":\"tanh\".*\\} is not the one run/model.h5 was saved with, \\{.*\"type\":\"relu\".*\\}: its weights are loaded into the config's" \
         "$ctrainer" evaluate "$tiny" --model run --set 'model.layers[2].type="tanh"' --set data.eval.small.limit=64 \
         --set data.eval.other.limit=64 ;;
resume_from_output_dir)
  checkpoint run
  expect 1 "run is a run's output_dir, not a checkpoint: resume from one of its checkpoints \\('run/checkpoint-4' is the newest\\), or with --output_dir run --resume_from_checkpoint latest" \
         "$ctrainer" "${resume[@]}" --output_dir run --resume_from_checkpoint run ;;
output_dir_is_a_file)
  echo "a file" >blocker
  run_config run.json "$mlp" '{"type": "fashion_mnist", "split": "train", "limit": 64}'
  expect 1 "training_args.output_dir: 'blocker' is a regular file, not a directory" \
         "$ctrainer" train run.json --output_dir blocker ;;
*)
  echo "bad_input.sh: unknown case '$case' (bad_input.sh --list)"
  exit 2 ;;
esac
