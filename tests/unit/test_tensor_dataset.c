/* The dataset over tensors in memory (ct_tensor_dataset_create): its samples are the rows it was given
 * (copied: the caller's tensors may change or go afterwards), in any order asked, with the spec of
 * their shapes and dtypes; and what bad arguments get: a NULL tensor, rows that differ, a tensor with
 * no rows dimension, each an error naming it (never a crash), *out NULL. */
#include <string.h>

#include "data/dataset.h"
#include "testlib.h"

static ct_rng rng;

static void rows_come_back(void) {
    const int64_t n = 9;
    ct_tensor x = ct_test_alloc(CT_F32, 3, (int64_t[]){n, 2, 3}), y = ct_test_alloc(CT_I64, 1, (int64_t[]){n});
    for (int64_t i = 0; i < n * 6; i++) ct_tensor_set(&x, i, ct_rng_uniform(&rng));
    for (int64_t i = 0; i < n; i++) ct_tensor_set(&y, i, (double)ct_rng_below(&rng, 4));
    ct_dataset *d;
    CHECK_OK(ct_tensor_dataset_create(&x, &y, 4, &d));
    ct_tensor want_x = ct_test_alloc(CT_F32, 3, (int64_t[]){n, 2, 3}), want_y = ct_test_alloc(CT_I64, 1, (int64_t[]){n});
    memcpy(want_x.data, x.data, ct_tensor_nbytes(&x));
    memcpy(want_y.data, y.data, ct_tensor_nbytes(&y));
    ct_tensor_fill(&x, -1.0); /* the dataset holds its own copy */
    CHECK(ct_dataset_length(d) == n, "length %lld, expected %lld", (long long)ct_dataset_length(d), (long long)n);
    const ct_sample_spec *s = &d->spec;
    CHECK(s->feature_shape.ndim == 2 && s->feature_shape.dims[0] == 2 && s->feature_shape.dims[1] == 3 &&
              s->feature_dtype == CT_F32 && s->label_shape.ndim == 0 && s->label_dtype == CT_I64 && s->num_classes == 4,
          "the spec does not describe the rows");
    int64_t order[5] = {8, 0, 3, 3, 5};
    ct_tensor bx = ct_test_alloc(CT_F32, 3, (int64_t[]){5, 2, 3}), by = ct_test_alloc(CT_I64, 1, (int64_t[]){5});
    CHECK_OK(d->ops->get_batch(d, order, 5, &(ct_fetch_ctx){0}, &bx, &by));
    for (int k = 0; k < 5; k++) {
        CHECK(memcmp((float *)bx.data + 6 * k, (float *)want_x.data + 6 * order[k], 6 * sizeof(float)) == 0,
              "batch row %d is not sample %lld's features", k, (long long)order[k]);
        CHECK(((int64_t *)by.data)[k] == ((int64_t *)want_y.data)[order[k]], "batch row %d: not sample %lld's label", k,
              (long long)order[k]);
    }
    ct_dataset_free(d);
    ct_tensor ts[] = {x, y, want_x, want_y, bx, by};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) ct_tensor_free(&ts[i]);
}

static void refused(const ct_tensor *x, const ct_tensor *y, ct_status want, const char *message) {
    ct_dataset *d = (ct_dataset *)&rng; /* anything but NULL: it must come back NULL */
    CHECK_ERR(ct_tensor_dataset_create(x, y, 0, &d), want, message);
    CHECK(d == NULL, "a refused dataset left *out set");
}

static void bad_arguments(void) {
    ct_tensor x = ct_test_alloc(CT_F32, 2, (int64_t[]){4, 3}), y = ct_test_alloc(CT_I64, 1, (int64_t[]){4}),
              y5 = ct_test_alloc(CT_I64, 1, (int64_t[]){5});
    ct_tensor scalar = ct_tensor_view(y.data, CT_I64, CT_CPU, 0, NULL);
    refused(&x, NULL, CT_ERR_INVALID_ARG, "tensor dataset: labels is NULL");
    refused(NULL, &y, CT_ERR_INVALID_ARG, "tensor dataset: features is NULL");
    refused(&x, &y5, CT_ERR_SHAPE, "features and labels need the same number of rows (4, 5)");
    refused(&x, &scalar, CT_ERR_SHAPE, "features and labels need the same number of rows (4, -1)");
    ct_tensor_free(&x);
    ct_tensor_free(&y);
    ct_tensor_free(&y5);
}

int main(void) {
    ct_test_begin("test_tensor_dataset");
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    rows_come_back();
    bad_arguments();
    return ct_test_finish();
}
