/* Hyperparameter search: Hugging Face's Trainer.hyperparameter_search, for C and for run configs.
 *
 * A search draws trials from a space (search/hp_space.h), runs each one as a fresh run in its own
 * directory (output_dir/trial-<k>), takes an objective from the trial's final metrics, and keeps a
 * results table. One driver, ct_hp_search_run, does this for every caller: it samples, names the
 * directories, times the trials, computes objectives, picks the best, prints progress and the table,
 * and rewrites output_dir/search_results.json and .csv after every trial (an interrupted search
 * keeps what it did). Callers give it only "how to run one trial":
 *  - ct_trainer_hyperparameter_search (below) runs trials in this process with a model_init hook
 *    that builds a fresh model per trial, as Trainer(model_init=...) does;
 *  - `ctrainer search` (cli/search.c) runs each trial as a `ctrainer train` subprocess of a run
 *    config, with the trial's values applied as --set assignments; the helpers at the end of this
 *    header check a space's keys against a run config and write the best trial's config.
 *
 * A failing trial (a value that makes the config invalid, a diverging run, a crash) is recorded as
 * failed with its message and the search goes on; a non-finite objective counts as a failure, as in
 * Optuna. */
#ifndef CT_HP_SEARCH_H
#define CT_HP_SEARCH_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "config/run_config.h"
#include "search/hp_space.h"
#include "trainer/trainer.h"

typedef enum ct_hp_direction { CT_HP_MINIMIZE = 0, CT_HP_MAXIMIZE = 1 } ct_hp_direction;
typedef enum ct_hp_method { CT_HP_RANDOM = 0, CT_HP_GRID = 1 } ct_hp_method;

typedef struct ct_hp_trial {
    int64_t number;        /* 0, 1, ... */
    json_t *params;        /* {key: value} drawn for it (owned) */
    char output_dir[CT_ARGS_PATH_MAX]; /* <search output_dir>/trial-<number> */
    bool failed;
    double objective;      /* NaN when failed */
    json_t *metrics;       /* the run's final metrics (train_*, eval_*, ...; owned), NULL when none */
    char *message;         /* why it failed (owned), NULL otherwise */
    int exit_code;         /* a subprocess trial's exit status (128 + signal when killed); 0 in process */
    double seconds;        /* wall time */
} ct_hp_trial;

typedef struct ct_hp_results {
    ct_hp_direction direction;
    ct_hp_method method;
    uint64_t seed;
    char objective_name[CT_ARGS_NAME_MAX + 8]; /* the metric, or "objective" for a compute_objective */
    int64_t n_trials;       /* trials run (may be fewer than asked when the search was stopped) */
    ct_hp_trial *trials;
    int64_t best;           /* index of the best complete trial (first of equals), -1 when none */
} ct_hp_results;
void ct_hp_results_free(ct_hp_results *r);

/* Hugging Face's compute_objective: metrics -> the number to minimize or maximize. */
typedef ct_status (*ct_hp_objective_fn)(void *ctx, const json_t *metrics, double *out);

/* Builds a fresh model for a trial (Hugging Face's model_init(trial)): params are the trial's values
 * (every key, training_args.* included), max_batch and device as ct_trainer_setup.make_model. */
typedef ct_status (*ct_hp_model_init_fn)(void *ctx, const json_t *params, int64_t max_batch, ct_device device,
                                         ct_model *out);

typedef struct ct_hp_search_opts {
    ct_hp_method method;
    int64_t n_trials;         /* random: > 0; grid: the first n_trials points (0 or more than the grid: all) */
    ct_hp_direction direction;
    uint64_t seed;            /* random search's draws */
    /* The objective: compute_objective when set, else the metric named `metric` (NULL: see
     * ct_hp_default_metric). A metric missing from a complete trial's metrics stops the search with
     * CT_ERR_CONFIG (every trial would miss it), naming the metrics the trial has. */
    const char *metric;
    ct_hp_objective_fn compute_objective;
    void *objective_ctx;
    const char *output_dir;   /* trial directories and results; NULL: the base arguments' output_dir */
    bool quiet;               /* no progress lines on stderr, no table on stdout */
    /* ct_trainer_hyperparameter_search only: */
    ct_hp_model_init_fn model_init; /* NULL: setup->make_model (which cannot see the trial's values) */
    void *model_init_ctx;
    const ct_trainer_ops *ops;      /* the trainer's ops for every trial (NULL: defaults) */
} ct_hp_search_opts;

/* The objective a search uses when none is named: metric_for_best_model when set ("eval_" put in
 * front unless it is there, as Hugging Face does), else "eval_loss". */
void ct_hp_default_metric(const ct_training_args *a, char *buf, size_t cap);

/* Runs trial->params as one trial with its output_dir. Returns CT_OK with trial->metrics set when the
 * run completed; any other status marks the trial failed with ct_last_error() as its message (the
 * function may set trial->exit_code). CT_ERR_INTERRUPTED also stops the search. */
typedef ct_status (*ct_hp_trial_fn)(void *ctx, ct_hp_trial *trial);

/* The driver (see the top of this file). Validates opts (CT_ERR_INVALID_ARG / CT_ERR_CONFIG for a
 * grid over a continuous key, ...), then runs the trials. *out is filled with what ran also when the
 * search stops early (CT_ERR_INTERRUPTED, a missing metric, a results file that cannot be written);
 * free it with ct_hp_results_free in every case. All trials failing is CT_OK with best = -1. */
ct_status ct_hp_search_run(const ct_hp_space *space, const ct_hp_search_opts *opts, ct_hp_trial_fn run_trial,
                           void *ctx, ct_hp_results *out);

/* The results as JSON: direction, method, seed, objective, best_trial, best_objective, best_params
 * and trials [{number, status "complete"|"failed", objective, params, metrics, seconds, exit_code,
 * message, output_dir}] (a new object). */
json_t *ct_hp_results_to_json(const ct_hp_results *r);
/* Writes dir/search_results.json and dir/search_results.csv (through temporary names). The CSV has
 * one row per trial: trial, status, objective, seconds, exit_code, one column per key, message. */
ct_status ct_hp_results_write(const ct_hp_results *r, const ct_hp_space *space, const char *dir);
/* Writes v to file, indented, keys in their order, through a temporary name. */
ct_status ct_hp_write_json(const json_t *v, const char *file);
/* The table (trial, status, objective, time, one column per key) and the summary line naming the
 * best trial. */
void ct_hp_results_print(const ct_hp_results *r, const ct_hp_space *space, FILE *f);

/* Hugging Face's hyperparameter_search in this process. Each trial: base's arguments with the
 * trial's training_args.<name> values applied and output_dir = <output_dir>/trial-<k>, validated; a
 * fresh model from opts->model_init (or setup->make_model); a trainer from setup (its datasets, loss
 * and metrics are shared by the trials; its callbacks must be empty: a trainer takes them over);
 * train, evaluate the evaluation sets, save the model and the metrics in the trial's directory. The
 * objective comes from the train and eval metrics together. Keys other than training_args.<name>
 * are for model_init alone: without one they are refused up front, as are unknown training
 * arguments and training_args.output_dir (the search sets it). setup->n_eval must be > 0 unless
 * a compute_objective or a train_* metric says otherwise. */
ct_status ct_trainer_hyperparameter_search(const ct_trainer_setup *setup, const ct_training_args *base,
                                           const ct_hp_space *space, const ct_hp_search_opts *opts,
                                           ct_hp_results *out);

/* --- searches over run configs (search/hp_run_config.c) ------------------------------------------ */

/* Checks, before any trial runs, that every key of the space names something the config's readers
 * know: the section exists, the path can be set (an index inside its list, objects along the way),
 * and no reader of the section calls the key (or a key on its path) unknown, for any of the key's
 * candidate values. training_args.output_dir is refused (the search sets it). Values the readers
 * refuse are not errors here: a trial with such a value fails on its own. CT_ERR_CONFIG
 * "<space name>: <key>: <the reader's message>". */
ct_status ct_hp_check_config_keys(const ct_hp_space *space, const char *space_name, const ct_run_config *base);
/* "key=<value as compact JSON>": the --set assignment of one value (caller frees). */
char *ct_hp_assignment(const char *key, const json_t *value);
/* Applies params to c as --set assignments. */
ct_status ct_hp_apply_params(ct_run_config *c, const json_t *params);
/* Writes base with params applied to `file`, loadable by `ctrainer train` from the file's directory:
 * relative dataset file names under "data" (idx: images, labels, cache; fashion_mnist: dir, cache;
 * hdf5 and tokens: path) are made absolute against base's directory. */
ct_status ct_hp_write_best_config(const ct_run_config *base, const json_t *params, const char *file);

#endif
