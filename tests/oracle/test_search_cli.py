"""`ctrainer search` end to end, on a small MLP and a few hundred Fashion-MNIST images (seconds).

  - a grid search over the optimizer (one invalid value) and the hidden size: four trials in
    itertools.product order, each in OUTPUT/trial-<k> with its train.log; the two invalid trials are
    recorded as failed with exit code 2 and train's message while the search goes on; every complete
    trial's objective is the metric in its own all_results.json; the best is the argmax; the CSV (read
    by Python's csv module) says what the JSON says; best_config.json, trained again from another
    directory, reproduces the best trial's evaluation exactly (same seed, same numbers) and its
    relative data directory still resolves;
  - a random search: values inside their distributions and on their steps, the default objective
    eval_loss, the same draws again for the same seed and other draws for another; all trials
    failing exits 1;
  - errors before any trial: an unknown key (with the reader's "did you mean"), a grid over a
    continuous distribution, usage errors: exit 2 and no trial directory;
  - SIGINT stops the search: exit 130 and the results written so far."""
import csv
import itertools
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time

from common import check, CTRAINER, finish, require_fashion_mnist, RNG

DATA = require_fashion_mnist()

SEED = int(RNG.integers(0, 2**31))
ENV = {**os.environ, "OMP_NUM_THREADS": "2"}


def run(*args, cwd=None):
    return subprocess.run([CTRAINER, *args], capture_output=True, text=True, env=ENV, cwd=cwd)


def load(path):
    with open(path) as f:
        return json.load(f)


def write(path, value):
    with open(path, "w") as f:
        json.dump(value, f, indent=1)


with tempfile.TemporaryDirectory() as d:
    # The config lives in a subdirectory and names the data directory relative to itself, so the
    # best config only works from elsewhere if the search made that path absolute.
    cfg_dir = os.path.join(d, "configs")
    os.makedirs(cfg_dir)
    rel_data = os.path.relpath(DATA, cfg_dir)
    config = {
        "model": {"type": "mlp", "hidden": [16]},
        # Both from the 10,000 test images: loading them is quicker than the 60,000 training images.
        "data": {"train": {"type": "fashion_mnist", "split": "test", "dir": rel_data, "limit": 512},
                 "eval": {"type": "fashion_mnist", "split": "test", "dir": rel_data, "limit": 256}},
        "metrics": ["accuracy"],
        "training_args": {"num_train_epochs": 1, "per_device_train_batch_size": 64, "per_device_eval_batch_size": 128,
                          "learning_rate": 0.01, "save_strategy": "no", "logging_steps": 4,
                          "eval_bootstrap_resamples": 0, "seed": SEED, "output_dir": "unused"},
    }
    cfg = os.path.join(cfg_dir, "run.json")
    write(cfg, config)

    # --- grid search with failing trials ---------------------------------------------------------
    space = {"training_args.optim": ["nonsense", "adamw_torch"], "model.hidden": [[8], [24]]}
    space_file = os.path.join(d, "grid.json")
    write(space_file, space)
    out = os.path.join(d, "grid")
    t0 = time.time()
    p = run("search", cfg, "--space", space_file, "--method", "grid", "--direction", "maximize", "--metric",
            "eval_accuracy", "--output", out, "--set", "training_args.learning_rate=0.02")
    check(p.returncode == 0, f"grid search exit {p.returncode}: {p.stderr[-2000:]}")
    print(f"grid search: {time.time() - t0:.1f} s")
    res = load(os.path.join(out, "search_results.json"))
    trials = res["trials"]
    check(len(trials) == 4 and res["n_trials"] == 4, f"{len(trials)} trials")
    expected = [dict(zip(space, values)) for values in itertools.product(*space.values())]
    check([t["params"] for t in trials] == expected, f"grid order {[t['params'] for t in trials]}")
    for k, t in enumerate(trials):
        tdir = os.path.join(out, f"trial-{k}")
        check(t["number"] == k and os.path.samefile(t["output_dir"], tdir), f"trial {k} directory {t['output_dir']}")
        check(os.path.exists(os.path.join(tdir, "train.log")), f"trial {k} has train.log")
        if t["params"]["training_args.optim"] == "nonsense":
            check(t["status"] == "failed" and t["exit_code"] == 2 and t["objective"] is None
                  and "training_args.optim: unknown value 'nonsense'" in (t["message"] or ""),
                  f"trial {k} should have failed: {t}")
        else:
            metrics = load(os.path.join(tdir, "all_results.json"))
            check(t["status"] == "complete" and t["exit_code"] == 0 and t["objective"] == metrics["eval_accuracy"],
                  f"trial {k}: objective {t['objective']} vs all_results {metrics.get('eval_accuracy')}")
            check("train_loss" in metrics and "eval_loss" in metrics, f"trial {k} metrics {metrics}")
            # The trial ran with its values: the saved config says so.
            run_cfg = load(os.path.join(tdir, "run_config.json"))
            check(run_cfg["model"]["hidden"] == t["params"]["model.hidden"]
                  and run_cfg["training_args"]["learning_rate"] == 0.02, f"trial {k} config {run_cfg}")
    complete = [t for t in trials if t["status"] == "complete"]
    best = max(complete, key=lambda t: t["objective"])  # max keeps the first of equals
    check(res["best_trial"] == best["number"] and res["best_objective"] == best["objective"]
          and res["best_params"] == best["params"] and res["direction"] == "maximize"
          and res["objective"] == "eval_accuracy", f"best {res['best_trial']}, want {best['number']}")
    check(f"best trial: {best['number']} (maximize eval_accuracy = " in p.stdout and "(2 failed)" in p.stdout,
          f"summary line: {p.stdout}")
    check("failed" in p.stdout and "complete" in p.stdout and "model.hidden" in p.stdout, f"table: {p.stdout}")
    with open(os.path.join(out, "search_results.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    check(len(rows) == 4, f"{len(rows)} CSV rows")
    for row, t in zip(rows, trials):
        check(int(row["trial"]) == t["number"] and row["status"] == t["status"]
              and json.loads(row["model.hidden"]) == t["params"]["model.hidden"]
              and row["training_args.optim"] == t["params"]["training_args.optim"]
              and (row["eval_accuracy"] == "" if t["objective"] is None else float(row["eval_accuracy"]) == t["objective"])
              and row["message"] == (t["message"] or ""), f"CSV row {row} vs {t}")

    # best_config.json trains to the reported objective, from another directory.
    best_cfg = os.path.join(out, "best_config.json")
    bc = load(best_cfg)
    check(bc["model"]["hidden"] == best["params"]["model.hidden"]
          and bc["training_args"]["optim"] == best["params"]["training_args.optim"]
          and bc["training_args"]["learning_rate"] == 0.02
          and os.path.isabs(bc["data"]["train"]["dir"]) and os.path.samefile(bc["data"]["train"]["dir"], DATA)
          and bc["training_args"]["output_dir"] == os.path.join(out, "best"), f"best_config.json {bc}")
    elsewhere = os.path.join(d, "elsewhere")
    os.makedirs(elsewhere)
    p = run("train", best_cfg, cwd=elsewhere)
    check(p.returncode == 0, f"training best_config.json: {p.stderr[-2000:]}")
    if p.returncode == 0:
        again = load(os.path.join(out, "best", "all_results.json"))
        trial = load(os.path.join(out, f"trial-{best['number']}", "all_results.json"))
        check(again["eval_accuracy"] == res["best_objective"] and again["eval_loss"] == trial["eval_loss"],
              f"rerun: eval_accuracy {again['eval_accuracy']} vs {res['best_objective']}, "
              f"eval_loss {again['eval_loss']} vs {trial['eval_loss']}")

    # --- random search ------------------------------------------------------------------------------
    space = {"training_args.learning_rate": {"type": "loguniform", "low": 1e-3, "high": 3e-2},
             "model.hidden[0]": {"type": "int", "low": 4, "high": 32, "step": 4},
             "training_args.warmup_ratio": {"type": "float", "low": 0.0, "high": 0.3, "step": 0.1}}
    space_file = os.path.join(d, "random.json")
    write(space_file, space)
    seed = int(RNG.integers(0, 2**31))
    out = os.path.join(d, "random")
    p = run("search", cfg, "--space", space_file, "--n_trials", "3", "--direction", "minimize", "--seed", str(seed),
            "--output", out)
    check(p.returncode == 0, f"random search exit {p.returncode}: {p.stderr[-2000:]}")
    res = load(os.path.join(out, "search_results.json"))
    check(res["objective"] == "eval_loss" and res["method"] == "random" and res["seed"] == seed,
          f"default objective {res['objective']}")
    params = [t["params"] for t in res["trials"]]
    for t in res["trials"]:
        lr, h, w = (t["params"][k] for k in space)
        check(1e-3 <= lr <= 3e-2 and isinstance(h, int) and 4 <= h <= 32 and h % 4 == 0
              and 0 <= w <= 0.3 + 1e-12 and abs(w * 10 - round(w * 10)) < 1e-9, f"draw {t['params']}")
        if t["status"] == "complete":
            check(t["objective"] == load(os.path.join(t["output_dir"], "all_results.json"))["eval_loss"], "eval_loss")
            check(load(os.path.join(t["output_dir"], "run_config.json"))["model"]["hidden"] == [h], "hidden[0] set")
    complete = [t for t in res["trials"] if t["status"] == "complete"]
    check(len(complete) == 3 and res["best_trial"] == min(complete, key=lambda t: t["objective"])["number"],
          f"minimize: best {res['best_trial']}")
    check(len({json.dumps(x) for x in params}) == 3, f"three different draws {params}")
    # The draws again, with a key added at the end that makes every trial fail at once (an invalid
    # optimizer: a value, so no error before the trials): a key at the end leaves the draws of the
    # keys before it alone. Also the exit code of a search in which nothing completed.
    space_file2 = os.path.join(d, "random_failing.json")
    write(space_file2, {**space, "training_args.optim": ["nonsense"]})
    out2 = os.path.join(d, "random_again")

    def draws(results):
        return [{k: v for k, v in t["params"].items() if k != "training_args.optim"} for t in results["trials"]]

    p = run("search", cfg, "--space", space_file2, "--n_trials", "3", "--direction", "minimize", "--seed", str(seed),
            "--output", out2)
    check(p.returncode == 1 and "no trial completed (3 trials, 3 failed)" in p.stdout,
          f"all failed: exit {p.returncode}: {p.stdout[-500:]} {p.stderr[-500:]}")
    if os.path.exists(os.path.join(out2, "search_results.json")):
        again = load(os.path.join(out2, "search_results.json"))
        check(draws(again) == params, f"the same seed draws the same values: {draws(again)} vs {params}")
        check(not os.path.exists(os.path.join(out2, "best_config.json")), "no best config without a complete trial")
        # a second search into the same directory replaces the first one's results only when told to
        p = run("search", cfg, "--space", space_file2, "--n_trials", "3", "--direction", "minimize", "--seed",
                str(seed + 1), "--output", out2)
        check(p.returncode == 2 and f"the search's output directory '{out2}' already holds" in p.stderr
              and "--overwrite_output_dir true" in p.stderr, f"a second search: exit {p.returncode}: {p.stderr}")
        check(load(os.path.join(out2, "search_results.json")) == again, "the refused search changed the results")
        p = run("search", cfg, "--space", space_file2, "--n_trials", "3", "--direction", "minimize", "--seed",
                str(seed + 1), "--output", out2, "--overwrite_output_dir", "true")
        other = load(os.path.join(out2, "search_results.json"))
        check(all(a != b for a, b in zip(draws(other), params)), "another seed, other draws")
    else:
        check(False, "no search_results.json for the failing search")

    # --- errors before any trial ---------------------------------------------------------------------
    def refused(name, space_value, want, *extra):
        sf = os.path.join(d, f"{name}.json")
        write(sf, space_value)
        o = os.path.join(d, name)
        p = run("search", cfg, "--space", sf, "--direction", "minimize", "--output", o, *extra)
        check(p.returncode == 2 and want in p.stderr, f"{name}: exit {p.returncode}: {p.stderr.strip()}")
        check(not os.path.exists(os.path.join(o, "trial-0")), f"{name}: a trial ran")

    refused("typo", {"training_args.learning_rat": [0.1]},
            "training_args.learning_rat: unknown key 'learning_rat', did you mean 'learning_rate'?", "--n_trials", "2")
    refused("typo_model", {"model.hiden": [[4]]},
            "model.hiden: model: unknown key 'hiden', did you mean 'hidden'?", "--n_trials", "2")
    refused("typo_data", {"data.train.limt": [100]},
            "data.train.limt: data.train: unknown key 'limt', did you mean 'limit'?", "--n_trials", "2")
    refused("continuous_grid", {"training_args.learning_rate": {"type": "uniform", "low": 0.1, "high": 0.2}},
            "grid search: 'training_args.learning_rate' is uniform", "--method", "grid")
    refused("bad_distribution", {"training_args.learning_rate": {"type": "loguniform", "low": 0, "high": 1}},
            "training_args.learning_rate: a log distribution needs low > 0", "--n_trials", "2")
    p = run("search", cfg, "--space", space_file, "--n_trials", "2")
    check(p.returncode == 2 and "--direction maximize|minimize is required" in p.stderr, f"no direction: {p.stderr}")
    p = run("search", cfg, "--space", space_file, "--direction", "up", "--n_trials", "2")
    check(p.returncode == 2 and "--direction expects maximize or minimize, got 'up'" in p.stderr, p.stderr)
    p = run("search", cfg, "--direction", "minimize", "--n_trials", "2")
    check(p.returncode == 2 and "--space SPACE.json is required" in p.stderr, p.stderr)
    p = run("search", "--help")
    check(p.returncode == 0 and "usage: ctrainer search CONFIG --space SPACE.json" in p.stdout, "--help")

    # --- SIGINT -----------------------------------------------------------------------------------------
    out = os.path.join(d, "interrupted")
    # Long enough (minutes) that the first trial is still training when SIGINT comes.
    big = dict(config, training_args=dict(config["training_args"], num_train_epochs=50000))
    big_cfg = os.path.join(cfg_dir, "long.json")
    write(big_cfg, big)
    proc = subprocess.Popen([CTRAINER, "search", big_cfg, "--space", space_file, "--n_trials", "5", "--direction",
                             "minimize", "--output", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=ENV)
    deadline = time.time() + 60
    while time.time() < deadline and not os.path.exists(os.path.join(out, "trial-0", "train.log")):
        time.sleep(0.05)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    try:
        stdout, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    check(proc.returncode == 130, f"SIGINT: exit {proc.returncode}: {stderr[-1000:]}")
    if os.path.exists(os.path.join(out, "search_results.json")):
        res = load(os.path.join(out, "search_results.json"))
        check(res["n_trials"] == 1 and res["trials"][0]["status"] == "failed", f"interrupted results {res['trials']}")
    else:
        check(False, "no search_results.json after SIGINT")
    check(not os.path.exists(os.path.join(out, "trial-1")), "a trial started after SIGINT")

finish()
