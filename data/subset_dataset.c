/* The first n samples of a dataset (max_train_samples / max_eval_samples, as in Hugging Face's
 * example scripts): same spec, shorter length, fetches passed through. */
#include <stdio.h>
#include <stdlib.h>

#include "core/util.h"
#include "data/dataset.h"

typedef struct subset {
    ct_dataset base;
    ct_dataset *inner;
    int64_t n;
} subset;

static subset *self(ct_dataset *ds) { return ct_container_of(ds, subset, base); }

static int64_t length(ct_dataset *ds) { return self(ds)->n; }

static ct_status get_batch(ct_dataset *ds, const int64_t *indices, int64_t n, const ct_fetch_ctx *ctx,
                           ct_tensor *features, ct_tensor *labels) {
    return ct_dataset_get_batch(self(ds)->inner, indices, n, ctx, features, labels);
}

/* The first n of the base's labels, however many it has. */
static ct_status check_labels(ct_dataset *ds, int64_t first, int64_t n, const ct_label_rule *rule) {
    return ct_dataset_check_label_range(self(ds)->inner, first, n, rule);
}

static void destroy(ct_dataset *ds) {
    ct_dataset_free(self(ds)->inner);
    free(self(ds));
}

static const ct_dataset_ops subset_ops = {.size = sizeof(ct_dataset_ops),
                                          .name = "subset",
                                          .length = length,
                                          .get_batch = get_batch,
                                          .destroy = destroy,
                                          .check_labels = check_labels};

ct_status ct_subset_dataset_create(ct_dataset *base, int64_t n, ct_dataset **out) {
    int64_t len = ct_dataset_length(base);
    if (n < 0) {
        ct_dataset_free(base);
        return ct_error(CT_ERR_INVALID_ARG, "subset: %lld samples requested", (long long)n);
    }
    subset *s = calloc(1, sizeof *s);
    if (!s) {
        ct_dataset_free(base);
        return ct_error(CT_ERR_NOMEM, "subset: out of memory");
    }
    ct_dataset_base_init(&s->base, &subset_ops);
    s->base.spec = base->spec;
    s->base.thread_safe = base->thread_safe;
    snprintf(s->base.source, sizeof s->base.source, "%s", base->source);
    s->inner = base;
    s->n = n < len ? n : len; /* like Hugging Face: a limit above the length keeps everything */
    *out = &s->base;
    return CT_OK;
}
