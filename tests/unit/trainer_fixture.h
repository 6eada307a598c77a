/* The shared fixture of the unit tests that train: small labelled data sets in memory, an MLP built
 * from its JSON spec, and a temporary root directory for output_dir (made once per test program,
 * removed at its end). Each data kind reproduces, draw for draw, what one family of tests has always
 * trained on, so moving a test onto the fixture changes none of its numbers. */
#ifndef CT_TRAINER_FIXTURE_H
#define CT_TRAINER_FIXTURE_H

#include <stdint.h>

#include "core/device.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "data/dataset.h"
#include "model/model.h"

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

/* The test program's temporary root, /tmp/<name>_XXXXXX, made by the first call (NULL on failure);
 * later calls return it whatever name they give. */
const char *ct_fixture_tmp_root(const char *name);
/* rm -rf dir (a message on stderr when that fails). */
void ct_fixture_remove(const char *dir);
/* Removes the temporary root, if one was made. */
void ct_fixture_cleanup(void);

#endif
