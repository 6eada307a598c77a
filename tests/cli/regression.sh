#!/usr/bin/env bash
# regression.sh CTRAINER RUNS: a regression model from the command line alone, as a user builds one:
# `ctrainer data convert --csv` of a table with a float target column (labels [N] float32), a model
# whose last layer has one output ([N, 1] predictions), the mse loss and the regression metrics. The
# predictions and the targets are compared value by value (Hugging Face squeezes both), so the run
# learns the table's linear rule: eval_r2 above 0.95, eval_mse as the loss.
set -u
ctrainer=$1 runs=$2/regression
rm -rf "$runs" && mkdir -p "$runs" && cd "$runs" || exit 1
awk 'BEGIN { print "a,b,target"
            for (i = 0; i < 256; i++) { a = (i * 37) % 101 / 100; b = (i * 53) % 97 / 100
                                        printf "%.2f,%.2f,%.6f\n", a, b, 2 * a - b + 0.1 } }' >table.csv
"$ctrainer" data convert --csv table.csv --label-column target -o table.h5 >convert.log 2>&1 ||
    { cat convert.log; echo "FAIL: data convert"; exit 1; }
cat >run.json <<'JSON'
{"model": {"type": "sequential", "layers": [{"type": "linear", "out_features": 16}, {"type": "relu"},
                                           {"type": "linear", "out_features": 1}]},
 "data": {"train": {"type": "hdf5", "path": "table.h5"}, "eval": {"type": "hdf5", "path": "table.h5"}},
 "loss": {"type": "mse"},
 "metrics": ["mse", "r2"],
 "training_args": {"num_train_epochs": 30, "per_device_train_batch_size": 16, "learning_rate": 0.01, "seed": 3,
                   "eval_strategy": "no", "save_strategy": "no", "report_to": []}}
JSON
"$ctrainer" train run.json --output_dir out >train.log 2>&1 || { tail -3 train.log; echo "FAIL: training"; exit 1; }
/usr/bin/python3 - out/eval_results.json <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
ok = m.get("eval_r2", 0) > 0.95 and abs(m["eval_mse"] - m["eval_loss"]) <= 1e-12 * max(1.0, m["eval_loss"])
print("eval_r2", m.get("eval_r2"), "eval_mse", m.get("eval_mse"), "eval_loss", m.get("eval_loss"))
sys.exit(0 if ok else 1)
PY
