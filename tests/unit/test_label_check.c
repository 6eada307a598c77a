/* Every label of every dataset against the model's classes at the start of a run (issue 22, class
 * 11; data/label_check.c, the check_labels members, trainer/setup_check.c):
 *   - a label outside [0, C) that is not ignore_index, a non-integer float label, float labels at
 *     all, in any sample (drawn at random, also the last), is CT_ERR_FORMAT naming the source, the
 *     sample (and the element of a sequence label) and the value; ignore_index and good data pass;
 *   - for each kind of dataset: in-memory tensors (i64, f32, sequence labels), an application's
 *     dataset without check_labels (fetched whole), a subset (only its samples count), HDF5 (labels
 *     read past the cache; a file's num_classes or float labels named with the dataset; a u64
 *     2^64-1 label with its own value, never -1), token windows (stride 1, each token read once,
 *     blamed on the first window whose labels hold it);
 *   - ct_trainer_init refuses a bad train, eval or test set, naming its role, before any step; a
 *     set given only to ct_trainer_predict is checked before its first batch;
 *   - a GPT's padded vocabulary: a label among the padding logits is no class. */
#include <hdf5.h>
#include <hdf5_hl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/format/h5io.h"
#include "data/dataset.h"
#include "testlib.h"
#include "trainer/trainer.h"
#include "trainer_fixture.h"

static ct_rng rng;
static const char *tmp_root;

static int64_t draw(int64_t lo, int64_t hi) { return lo + (int64_t)(ct_rng_uniform(&rng) * (double)(hi - lo)); }

static const ct_label_rule *rule_of(int64_t classes) {
    static ct_label_rule r;
    static char of[64];
    snprintf(of, sizeof of, "the model's %lld outputs", (long long)classes);
    r = (ct_label_rule){.classes = classes, .ignore_index = -100, .of = of, .loss = "cross_entropy"};
    return &r;
}

/* Labels [n, per] (per 0: [n]) of dtype dt, classes drawn from [0, c). */
static void labelled(int64_t n, int64_t per, int64_t c, ct_dtype dt, ct_tensor *l) {
    int64_t shape[2] = {n, per};
    CT_ASSERT(ct_tensor_alloc(l, dt, CT_CPU, per ? 2 : 1, shape) == CT_OK);
    for (int64_t i = 0; i < ct_tensor_numel(l); i++) ct_tensor_set(l, i, (double)draw(0, c));
}

static ct_dataset *tensors(const ct_tensor *labels, int64_t classes) {
    int64_t fshape[2] = {labels->shape[0], 2};
    ct_tensor f;
    CT_ASSERT(ct_tensor_alloc(&f, CT_F32, CT_CPU, 2, fshape) == CT_OK);
    for (int64_t i = 0; i < ct_tensor_numel(&f); i++) ct_tensor_set(&f, i, ct_rng_uniform(&rng));
    ct_dataset *ds = NULL;
    CT_ASSERT(ct_tensor_dataset_create(&f, labels, classes, &ds) == CT_OK);
    ct_tensor_free(&f);
    return ds;
}

/* --- in-memory tensors ---------------------------------------------------------------------------- */

static void test_tensors(void) {
    for (int round = 0; round < 20; round++) {
        int64_t n = draw(1, 300), c = draw(2, 20), k = round % 4 == 0 ? n - 1 : draw(0, n);
        ct_tensor l;
        labelled(n, 0, c, CT_I64, &l);
        ct_dataset *ds = tensors(&l, c);
        CHECK_OK(ct_dataset_check_labels(ds, rule_of(c)));
        ((int64_t *)l.data)[k] = -100; /* ignore_index */
        ct_dataset_free(ds);
        ds = tensors(&l, c);
        CHECK_OK(ct_dataset_check_labels(ds, rule_of(c)));
        ct_dataset_free(ds);
        int64_t bad = round % 2 ? c + draw(0, 5) : -draw(1, 99);
        ((int64_t *)l.data)[k] = bad;
        ds = tensors(&l, c);
        char want[96], cls[64];
        snprintf(want, sizeof want, "tensors in memory: label %lld of sample %lld is not a class of", (long long)bad,
                 (long long)k);
        snprintf(cls, sizeof cls, "expects an integer in [0, %lld) or its ignore_index -100", (long long)c);
        CHECK_ERR(ct_dataset_check_labels(ds, rule_of(c)), CT_ERR_FORMAT, want, cls);
        /* the same labels fit a model with more outputs (a negative one never) */
        if (bad >= 0) CHECK_OK(ct_dataset_check_labels(ds, rule_of(bad + 1)));
        ct_dataset_free(ds);
        ct_tensor_free(&l);
    }
    /* float labels: a non-integer value is named; whole values are refused by their type */
    ct_tensor l;
    labelled(50, 0, 4, CT_F32, &l);
    ct_dataset *ds = tensors(&l, 0);
    CHECK_ERR(ct_dataset_check_labels(ds, rule_of(4)), CT_ERR_FORMAT, "tensors in memory: the labels are f32",
              "expects integer class ids");
    ct_dataset_free(ds);
    ((float *)l.data)[37] = 2.5f;
    ds = tensors(&l, 0);
    CHECK_ERR(ct_dataset_check_labels(ds, rule_of(4)), CT_ERR_FORMAT, "label 2.5 of sample 37 is not a class");
    ct_dataset_free(ds);
    ct_tensor_free(&l);
    /* sequence labels [n, T]: the element is named */
    labelled(40, 7, 9, CT_I64, &l);
    ((int64_t *)l.data)[23 * 7 + 5] = 9;
    ds = tensors(&l, 9);
    CHECK_ERR(ct_dataset_check_labels(ds, rule_of(9)), CT_ERR_FORMAT, "label 9 of sample 23 (element 5) is not");
    /* a subset of the first 23 samples does not hold it, one of 24 does */
    ct_dataset *sub = NULL;
    CHECK_OK(ct_subset_dataset_create(ds, 23, &sub));
    CHECK_OK(ct_dataset_check_labels(sub, rule_of(9)));
    ct_dataset_free(sub);
    ds = tensors(&l, 9);
    CHECK_OK(ct_subset_dataset_create(ds, 24, &sub));
    CHECK_ERR(ct_dataset_check_labels(sub, rule_of(9)), CT_ERR_FORMAT, "label 9 of sample 23 (element 5)");
    ct_dataset_free(sub);
    ct_tensor_free(&l);
}

/* --- an application's dataset without check_labels: fetched whole ------------------------------------ */

typedef struct plain {
    ct_dataset base;
    int64_t n, bad_at, fetched;
} plain;

static int64_t plain_length(ct_dataset *ds) { return ((plain *)ds)->n; }

static ct_status plain_get(ct_dataset *ds, const int64_t *idx, int64_t n, const ct_fetch_ctx *ctx, ct_tensor *f,
                           ct_tensor *l) {
    (void)ctx;
    plain *p = (plain *)ds;
    for (int64_t i = 0; i < n; i++) {
        ((float *)f->data)[i] = (float)idx[i];
        ((int64_t *)l->data)[i] = idx[i] == p->bad_at ? 77 : idx[i] % 3;
    }
    p->fetched += n;
    return CT_OK;
}

static const ct_dataset_ops plain_ops = {
    .size = sizeof(ct_dataset_ops), .name = "plain", .length = plain_length, .get_batch = plain_get};

static void test_fetched_whole(void) {
    plain p;
    CHECK_OK(ct_dataset_base_init(&p.base, &plain_ops));
    snprintf(p.base.source, sizeof p.base.source, "mine://data");
    p.base.spec.feature_shape = (ct_shape){.ndim = 1, .dims = {1}};
    p.n = draw(5000, 9000); /* more than one block of fetches */
    p.bad_at = -1;
    p.fetched = 0;
    CHECK_OK(ct_dataset_check_labels(&p.base, rule_of(3)));
    CHECK(p.fetched == p.n, "fetched %lld samples of %lld", (long long)p.fetched, (long long)p.n);
    p.bad_at = p.n - 1 - draw(0, 3);
    char want[96];
    snprintf(want, sizeof want, "mine://data: label 77 of sample %lld is not a class", (long long)p.bad_at);
    CHECK_ERR(ct_dataset_check_labels(&p.base, rule_of(3)), CT_ERR_FORMAT, want);
}

/* --- HDF5 ------------------------------------------------------------------------------------------- */

/* features [n, 2] f32 and labels [n] of type `type` from `labels`; a num_classes attribute when > 0. */
static void write_h5(const char *path, int64_t n, hid_t type, const void *labels, int64_t num_classes) {
    ct_h5_lock();
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    float *x = calloc((size_t)n * 2, sizeof *x);
    hsize_t fd[2] = {(hsize_t)n, 2}, ld[1] = {(hsize_t)n};
    CT_ASSERT(H5LTmake_dataset(f, "features", 2, fd, H5T_NATIVE_FLOAT, x) >= 0);
    CT_ASSERT(H5LTmake_dataset(f, "labels", 1, ld, type, labels) >= 0);
    long long nc = (long long)num_classes;
    if (nc > 0) CT_ASSERT(H5LTset_attribute_long_long(f, "labels", "num_classes", &nc, 1) >= 0);
    H5Fclose(f);
    ct_h5_unlock();
    free(x);
}

static void test_hdf5(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/l.h5", tmp_root);
    int64_t n = draw(100, 3000), k = draw(0, n);
    int64_t *ids = malloc((size_t)n * sizeof *ids);
    for (int64_t i = 0; i < n; i++) ids[i] = draw(0, 5);
    ct_dataset *ds = NULL;
    /* counted at open (max label + 1 = 5): nothing to read for a model of 5 or more outputs */
    write_h5(path, n, H5T_NATIVE_INT64, ids, 0);
    CHECK_OK(ct_hdf5_dataset_create(&(ct_hdf5_dataset_config){.path = path}, &ds));
    CHECK_OK(ct_dataset_check_labels(ds, rule_of(5)));
    ct_dataset_free(ds);
    /* a file that says 10 classes, a model of 4 outputs: the first label of 4 or more is named */
    ids[k] = 4 + draw(0, 6);
    int64_t first = k;
    for (int64_t i = 0; i < k; i++)
        if (ids[i] >= 4) {
            first = i;
            break;
        }
    write_h5(path, n, H5T_NATIVE_INT64, ids, 10);
    CHECK_OK(ct_hdf5_dataset_create(&(ct_hdf5_dataset_config){.path = path}, &ds));
    char want[160];
    snprintf(want, sizeof want, "l.h5: label %lld of sample %lld in dataset 'labels' is not a class of the model's 4",
             (long long)ids[first], (long long)first);
    CHECK_ERR(ct_dataset_check_labels(ds, rule_of(4)), CT_ERR_FORMAT, want);
    CHECK_OK(ct_dataset_check_labels(ds, rule_of(10)));
    ct_dataset_free(ds);
    /* a label beyond the file's own num_classes: the dataset's message, at the start */
    ids[k] = 12;
    write_h5(path, n, H5T_NATIVE_INT64, ids, 10);
    CHECK_OK(ct_hdf5_dataset_create(&(ct_hdf5_dataset_config){.path = path}, &ds));
    snprintf(want, sizeof want, "label 12 of sample %lld in dataset 'labels' is outside [0, 10)", (long long)k);
    CHECK_ERR(ct_dataset_check_labels(ds, rule_of(100)), CT_ERR_FORMAT, want);
    ct_dataset_free(ds);
    /* u64 2^64-1 is reported as what it is, never as -1 */
    uint64_t *u = malloc((size_t)n * sizeof *u);
    for (int64_t i = 0; i < n; i++) u[i] = (uint64_t)(i % 3);
    u[k] = UINT64_MAX;
    write_h5(path, n, H5T_NATIVE_UINT64, u, 3);
    CHECK_OK(ct_hdf5_dataset_create(&(ct_hdf5_dataset_config){.path = path}, &ds));
    snprintf(want, sizeof want, "label 18446744073709551615 of sample %lld in dataset 'labels' is too large",
             (long long)k);
    CHECK_ERR(ct_dataset_check_labels(ds, rule_of(3)), CT_ERR_FORMAT, want);
    CHECK(strstr(ct_last_error(), "-1") == NULL, "2^64-1 reported as -1: %s", ct_last_error());
    ct_dataset_free(ds);
    free(u);
    /* float labels blame the data: the dataset, its type, what was expected; a whole-valued file
     * says a cast will do, one with 0.5 names it */
    double *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = (double)(i % 3);
    write_h5(path, n, H5T_NATIVE_DOUBLE, v, 0);
    CHECK_OK(ct_hdf5_dataset_create(&(ct_hdf5_dataset_config){.path = path}, &ds));
    CHECK_ERR(ct_dataset_check_labels(ds, rule_of(3)), CT_ERR_FORMAT,
              "l.h5: dataset 'labels' holds f64 labels, but the cross_entropy loss expects integer class ids in "
              "[0, 3)",
              "store them with an integer type", "every value is a whole class id, so a cast will do");
    ct_dataset_free(ds);
    v[k] = 0.5;
    write_h5(path, n, H5T_NATIVE_DOUBLE, v, 0);
    CHECK_OK(ct_hdf5_dataset_create(&(ct_hdf5_dataset_config){.path = path}, &ds));
    snprintf(want, sizeof want, "label 0.5 of sample %lld is no class id at all", (long long)k);
    CHECK_ERR(ct_dataset_check_labels(ds, rule_of(3)), CT_ERR_FORMAT, "holds f64 labels", want);
    ct_dataset_free(ds);
    free(v);
    free(ids);
}

/* --- token windows ------------------------------------------------------------------------------------ */

static void test_tokens(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/t.bin", tmp_root);
    for (int round = 0; round < 6; round++) {
        int64_t count = draw(200, 2000), context = draw(2, 20), stride = round < 3 ? 1 : draw(1, 30);
        if (count < context + 1 + stride) count = context + 1 + stride;
        uint16_t *tok = malloc((size_t)count * sizeof *tok);
        for (int64_t i = 0; i < count; i++) tok[i] = (uint16_t)draw(0, 50);
        int64_t samples = (count - context - 1) / stride + 1;
        /* a position some window's labels hold: a random window, a random element */
        int64_t w = draw(0, samples), e = draw(0, context), p = w * stride + 1 + e;
        tok[p] = 50;
        FILE *fp = fopen(path, "wb");
        fwrite(tok, sizeof *tok, (size_t)count, fp);
        fclose(fp);
        ct_dataset *ds = NULL;
        CHECK_OK(ct_token_dataset_create(
            &(ct_token_dataset_config){.path = path, .bytes_per_token = 2, .context = context, .stride = stride}, &ds));
        /* the first window whose labels hold p */
        int64_t first = p - context <= 0 ? 0 : (p - context + stride - 1) / stride;
        char want[160];
        snprintf(want, sizeof want, "label 50 of sample %lld (element %lld, the token at position %lld) is not a class",
                 (long long)first, (long long)(p - first * stride - 1), (long long)p);
        CHECK_ERR(ct_dataset_check_labels(ds, rule_of(50)), CT_ERR_FORMAT, want);
        CHECK_OK(ct_dataset_check_labels(ds, rule_of(51)));
        ct_dataset_free(ds);
        free(tok);
    }
}

/* --- the trainer ------------------------------------------------------------------------------------ */

static void test_trainer(void) {
    ct_model m;
    CT_ASSERT(ct_fixture_mlp_build(&(ct_fixture_mlp){.dim = 2, .classes = 4, .hidden = {8}, .max_batch = 16, .seed = 3},
                                   &m) == CT_OK);
    ct_training_args a;
    ct_training_args_default(&a);
    snprintf(a.output_dir, sizeof a.output_dir, "%s/run", tmp_root);
    a.disable_tqdm = true;
    a.save_strategy = CT_INTERVAL_NO;
    a.logging_strategy = CT_INTERVAL_NO;
    a.max_steps = 2;
    ct_tensor good, bad;
    labelled(64, 0, 4, CT_I64, &good);
    labelled(64, 0, 4, CT_I64, &bad);
    int64_t k = draw(0, 64);
    ((int64_t *)bad.data)[k] = 4;
    char want[96];
    snprintf(want, sizeof want, "label 4 of sample %lld is not a class of the model's 4 outputs", (long long)k);
    const char *roles[] = {"train_dataset: ", "eval_dataset 'b': ", "test_dataset: "};
    for (int role = 0; role < 3; role++) {
        ct_dataset *tr = tensors(&good, 4), *e1 = tensors(&good, 4), *e2 = tensors(role == 1 ? &bad : &good, 4);
        ct_dataset *te = tensors(role == 2 ? &bad : &good, 4);
        if (role == 0) {
            ct_dataset_free(tr);
            tr = tensors(&bad, 4);
        }
        ct_trainer_setup s = {.model = &m, .train_dataset = tr, .n_eval = 2, .eval_datasets = {e1, e2},
                              .eval_names = {"a", "b"}, .test_dataset = te};
        ct_trainer t;
        CHECK_ERR(ct_trainer_init(&t, NULL, &a, &s), CT_ERR_FORMAT, roles[role], want);
        ct_trainer_free(&t);
        ct_dataset_free(tr);
        ct_dataset_free(e1);
        ct_dataset_free(e2);
        ct_dataset_free(te);
    }
    /* a metric the model's classes make meaningless: top_k_accuracy with k above them */
    {
        ct_dataset *tr = tensors(&good, 4);
        json_t *list = json_loads("[\"accuracy\", \"top_5_accuracy\"]", 0, NULL);
        ct_trainer t;
        CHECK_ERR(ct_trainer_init(&t, NULL, &a, &(ct_trainer_setup){.model = &m, .train_dataset = tr, .metrics = list}),
                  CT_ERR_INVALID_ARG, "metrics: metric 'top_k_accuracy': k = 5 is more than the 4 classes");
        ct_trainer_free(&t);
        json_decref(list);
        list = json_loads("[\"top_4_accuracy\"]", 0, NULL);
        CHECK_OK(ct_trainer_init(&t, NULL, &a, &(ct_trainer_setup){.model = &m, .train_dataset = tr, .metrics = list}));
        ct_trainer_free(&t);
        json_decref(list);
        ct_dataset_free(tr);
    }
    /* a set init never saw: predict checks it before its first batch */
    ct_dataset *tr = tensors(&good, 4), *other = tensors(&bad, 4);
    ct_trainer t;
    CHECK_OK(ct_trainer_init(&t, NULL, &a, &(ct_trainer_setup){.model = &m, .train_dataset = tr}));
    ct_prediction_output p;
    CHECK_ERR(ct_trainer_predict(&t, other, "test", &p), CT_ERR_FORMAT, "test_dataset: ", want);
    json_t *metrics = NULL;
    CHECK_ERR(ct_trainer_evaluate(&t, other, "eval", &metrics), CT_ERR_FORMAT, "eval_dataset: ", want);
    ct_trainer_free(&t);
    ct_dataset_free(tr);
    ct_dataset_free(other);
    ct_tensor_free(&good);
    ct_tensor_free(&bad);
    ct_training_args_free(&a);
    ct_model_free(&m);
}

/* A GPT with a padded vocabulary: its extra logits are -inf padding, so a label there is refused as no
 * class (the loss would be infinite), at init and for a set only predict sees; the last real token
 * passes. */
static void test_padded_vocab(void) {
    const int64_t n = 16, T = 4, V = draw(5, 40), Vp = V + draw(1, 10);
    ct_model m;
    ct_fixture_gpt g = {.vocab = V, .padded_vocab = Vp, .positions = T, .n_embd = 8, .n_head = 2, .n_layer = 1,
                        .max_batch = 8};
    CHECK_OK(ct_fixture_gpt_build(&g, &m));
    CHECK(ct_model_output_classes(&m) == V, "the padded GPT's classes: %lld, expected %lld",
          (long long)ct_model_output_classes(&m), (long long)V);
    ct_tensor ids, good, bad;
    labelled(n, T, V, CT_I64, &ids);
    labelled(n, T, V, CT_I64, &good);
    labelled(n, T, V, CT_I64, &bad);
    ((int64_t *)good.data)[draw(0, n * T)] = V - 1;
    const int64_t k = draw(0, n * T), label = draw(V, Vp);
    ((int64_t *)bad.data)[k] = label;
    ct_dataset *tr, *other;
    CT_ASSERT(ct_tensor_dataset_create(&ids, &good, 0, &tr) == CT_OK);
    CT_ASSERT(ct_tensor_dataset_create(&ids, &bad, 0, &other) == CT_OK);
    char want[200];
    snprintf(want, sizeof want, "label %lld of sample %lld (element %lld) is not a class of the model's %lld classes "
             "(of its %lld outputs, the others padding)", (long long)label, (long long)(k / T), (long long)(k % T),
             (long long)V, (long long)Vp);
    ct_training_args a;
    ct_training_args_default(&a);
    snprintf(a.output_dir, sizeof a.output_dir, "%s/padded", tmp_root);
    a.disable_tqdm = true;
    a.save_strategy = CT_INTERVAL_NO;
    ct_trainer t;
    CHECK_ERR(ct_trainer_init(&t, NULL, &a, &(ct_trainer_setup){.model = &m, .train_dataset = other}), CT_ERR_FORMAT,
              "train_dataset: ", want);
    ct_trainer_free(&t);
    CHECK_OK(ct_trainer_init(&t, NULL, &a, &(ct_trainer_setup){.model = &m, .train_dataset = tr}));
    ct_prediction_output p;
    CHECK_ERR(ct_trainer_predict(&t, other, "test", &p), CT_ERR_FORMAT, "test_dataset: ", want);
    ct_trainer_free(&t);
    ct_dataset_free(tr);
    ct_dataset_free(other);
    ct_tensor *all[] = {&ids, &good, &bad};
    for (int i = 0; i < 3; i++) ct_tensor_free(all[i]);
    ct_training_args_free(&a);
    ct_model_free(&m);
}

int main(void) {
    ct_test_begin("test_label_check");
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    ct_h5_quiet();
    tmp_root = ct_fixture_tmp_root("ct_label_check");
    CT_ASSERT(tmp_root);
    test_tensors();
    test_fetched_whole();
    test_hdf5();
    test_tokens();
    test_trainer();
    test_padded_vocab();
    ct_fixture_cleanup();
    return ct_test_finish();
}
