/* The shared fixture of the unit tests that train: small labelled data sets in memory, an MLP built
 * from its JSON spec, a temporary root directory for output_dir (made once per test program,
 * removed at its end), and the record of a training run that the tests comparing runs (exact
 * resume, failed saves, NaN policies, loss scaling, asynchronous saves) check against each other.
 * Each data kind reproduces, draw for draw, what one family of tests has always trained on, so
 * moving a test onto the fixture changes none of its numbers. */
#ifndef CT_TRAINER_FIXTURE_H
#define CT_TRAINER_FIXTURE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "checkpoint/snapshot.h" /* ct_train_progress */
#include "core/device.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "data/dataset.h"
#include "model/model.h"
#include "trainer/trainer.h"

/* How the features and labels are drawn (from `rng` when given, which goes on from where it stands,
 * else from a ct_rng seeded with `seed`, stream 0). */
typedef enum ct_fixture_data_kind {
    /* features U(-1, 1) (all of them first), then labels uniform over the classes */
    CT_FIXTURE_UNIFORM = 0,
    /* as UNIFORM, but each label is -100 (ignore_index) with probability `ignored`: one draw decides,
     * a second gives the class of a label not ignored; features in `dtype` */
    CT_FIXTURE_IGNORED,
    /* row by row: the features U(-1, 1), a uniform class, then with probability 0.6 the label is
     * whether the first feature is positive instead (so accuracy moves while training) */
    CT_FIXTURE_SIGNAL,
    /* no randomness: feature i = ((i * 37) % 11) / 11 - 0.4, label i = i % classes */
    CT_FIXTURE_PATTERN,
    /* a learnable rule over 6 features U(-1, 1), row by row: the class (of 3) of the largest of
     * x0 + x1, x2 - x3, x4 + x5 / 2 */
    CT_FIXTURE_RULE,
} ct_fixture_data_kind;

typedef struct ct_fixture_data {
    ct_fixture_data_kind kind;
    int64_t n, dim, classes;
    uint64_t seed;
    ct_dtype dtype; /* of the features: CT_F32 (0, the default) or CT_F64 */
    double ignored; /* CT_FIXTURE_IGNORED's fraction of ignored labels */
    ct_rng *rng;    /* NULL: a fresh one from seed */
} ct_fixture_data;

/* A tensor data set ([n, dim] features, [n] i64 labels); aborts when out of memory. */
ct_dataset *ct_fixture_dataset(const ct_fixture_data *d);
/* The trainers' tests' usual problem: n samples of 6 features with 3 classes (CT_FIXTURE_UNIFORM). */
ct_dataset *ct_fixture_small_data(int64_t n, uint64_t seed);

/* An MLP dim -> hidden... -> classes (JSON spec {"type": "mlp", "hidden": [...], "num_classes": C,
 * "dropout": p when p > 0}). */
typedef struct ct_fixture_mlp {
    int64_t dim, classes;
    int64_t hidden[4]; /* layer widths, ended by 0 or the fourth */
    double dropout;    /* 0: no "dropout" key */
    ct_dtype dtype;    /* CT_F32 (0, the default) or CT_F64 */
    ct_device device;  /* CT_CPU (all zero, the default) */
    int64_t max_batch;
    uint64_t seed;
} ct_fixture_mlp;

ct_status ct_fixture_mlp_build(const ct_fixture_mlp *o, ct_model *m);

/* A small GPT (ct_gpt_create) over inputs of `positions` token ids, also its n_positions; GPT-2's
 * defaults for what is not given (no dropout, biases, epsilon 1e-5). */
typedef struct ct_fixture_gpt {
    int64_t vocab, padded_vocab; /* padded_vocab 0: none */
    int64_t positions, n_embd, n_head, n_layer;
    ct_dtype dtype;   /* CT_F32 (0, the default) or CT_F64 */
    ct_device device; /* CT_CPU (all zero, the default) */
    int64_t max_batch;
    uint64_t seed;
} ct_fixture_gpt;

ct_status ct_fixture_gpt_build(const ct_fixture_gpt *o, ct_model *m);

/* Hugging Face's defaults, no progress bar, output_dir <root>/<name>. */
void ct_fixture_args(ct_training_args *a, const char *root, const char *name);

/* What one training run leaves. */
typedef struct ct_fixture_run {
    ct_status status;   /* ct_trainer_init's, else ct_trainer_train's */
    char message[4096]; /* ct_last_error() after it */
    json_t *log;        /* log_history without timings (ct_fixture_without_timings) */
    json_t *metrics;    /* the train output's metrics (CT_OK only) */
    ct_tensor weights;  /* host copy of the final flat parameters */
    int64_t global_step;
    int64_t optimizer_steps; /* the optimizer's own count (-1: none was made) */
    ct_train_progress progress;
    char best_model_checkpoint[1024];
} ct_fixture_run;

/* ct_trainer_init(t, ops, a, setup) and, when it succeeds, ct_trainer_train(t, resume), recorded in
 * *r (zeroed first). Returns whether t is initialised: the caller then takes back what else it
 * wants (its callbacks) and frees t. */
bool ct_fixture_train(ct_trainer *t, const ct_trainer_ops *ops, const ct_training_args *a,
                      const ct_trainer_setup *setup, const char *resume, ct_fixture_run *r);
void ct_fixture_run_free(ct_fixture_run *r);

/* A copy of a log_history without its timings (the keys with "runtime" or "per_second"): what two
 * runs that must agree may differ in. */
json_t *ct_fixture_without_timings(const json_t *log_history);
/* Whether a and b both hold data and are equal bit for bit. */
bool ct_fixture_same_bits(const ct_tensor *a, const ct_tensor *b);
/* CHECKs that two logs are equal entry by entry, printing the first entry that differs; returns
 * whether they are. */
bool ct_fixture_check_same_log(const char *label, const json_t *want, const json_t *got);

/* The test program's temporary root, /tmp/<name>_XXXXXX, made by the first call (NULL on failure);
 * later calls return it whatever name they give. */
const char *ct_fixture_tmp_root(const char *name);
/* rm -rf dir (a message on stderr when that fails). */
void ct_fixture_remove(const char *dir);
/* Removes the temporary root, if one was made. */
void ct_fixture_cleanup(void);

#endif
