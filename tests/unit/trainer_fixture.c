/* The unit tests' trainer fixture (trainer_fixture.h): data sets, MLPs and the temporary root that
 * the tests which train used to define each for themselves. */
#include "trainer_fixture.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "core/rng.h"
#include "model/layers.h"

ct_dataset *ct_fixture_dataset(const ct_fixture_data *d) {
    const int64_t n = d->n, dim = d->dim;
    ct_rng own, *rng = d->rng ? d->rng : &own;
    if (!d->rng) ct_rng_init(&own, d->seed, 0, CT_RNG_USER);
    ct_tensor x, y;
    int64_t xs[2] = {n, dim}, ys[1] = {n};
    if (ct_tensor_alloc(&x, d->dtype, CT_CPU, 2, xs) != CT_OK || ct_tensor_alloc(&y, CT_I64, CT_CPU, 1, ys) != CT_OK)
        abort();
    int64_t *label = y.data;
    switch (d->kind) {
    case CT_FIXTURE_UNIFORM:
    case CT_FIXTURE_IGNORED:
        for (int64_t i = 0; i < n * dim; i++) {
            double v = ct_rng_uniform(rng) * 2 - 1;
            if (d->dtype == CT_F64)
                ((double *)x.data)[i] = v;
            else
                ((float *)x.data)[i] = (float)v;
        }
        for (int64_t i = 0; i < n; i++) {
            if (d->kind == CT_FIXTURE_IGNORED && ct_rng_uniform(rng) < d->ignored)
                label[i] = -100;
            else
                label[i] = (int64_t)(ct_rng_uniform(rng) * (double)d->classes);
        }
        break;
    case CT_FIXTURE_SIGNAL:
        for (int64_t i = 0; i < n; i++) {
            float *row = (float *)x.data + i * dim;
            for (int64_t j = 0; j < dim; j++) row[j] = (float)(ct_rng_uniform(rng) * 2 - 1);
            int64_t c = (int64_t)(ct_rng_uniform(rng) * (double)d->classes);
            label[i] = ct_rng_uniform(rng) < 0.6 ? (row[0] > 0) : c;
        }
        break;
    case CT_FIXTURE_RULE:
        CT_ASSERT(dim >= 6 && d->classes == 3);
        for (int64_t i = 0; i < n; i++) {
            float *row = (float *)x.data + i * dim;
            for (int64_t j = 0; j < dim; j++) row[j] = (float)(2 * ct_rng_uniform(rng) - 1);
            float s0 = row[0] + row[1], s1 = row[2] - row[3], s2 = row[4] + 0.5f * row[5];
            label[i] = s0 > s1 && s0 > s2 ? 0 : s1 > s2 ? 1 : 2;
        }
        break;
    case CT_FIXTURE_PATTERN:
        for (int64_t i = 0; i < n * dim; i++) ((float *)x.data)[i] = (float)((i * 37) % 11) / 11.0f - 0.4f;
        for (int64_t i = 0; i < n; i++) label[i] = i % d->classes;
        break;
    }
    ct_dataset *ds;
    if (ct_tensor_dataset_create(&x, &y, d->classes, &ds) != CT_OK) abort();
    ct_tensor_free(&x);
    ct_tensor_free(&y);
    return ds;
}

ct_status ct_fixture_mlp_build(const ct_fixture_mlp *o, ct_model *m) {
    json_t *hidden = json_array();
    for (int i = 0; i < 4 && o->hidden[i] > 0; i++)
        json_array_append_new(hidden, json_integer((json_int_t)o->hidden[i]));
    json_t *spec = json_pack("{s:s, s:o, s:I}", "type", "mlp", "hidden", hidden, "num_classes", (json_int_t)o->classes);
    if (!spec) return ct_error(CT_ERR_NOMEM, "cannot build the MLP's spec");
    if (o->dropout > 0) json_object_set_new(spec, "dropout", json_real(o->dropout));
    ct_module *root;
    ct_status s = ct_module_from_json(spec, "model", &root);
    json_decref(spec);
    CT_TRY(s);
    ct_shape in = {.ndim = 1, .dims = {o->dim}};
    ct_model_options mo = {.dtype = o->dtype, .device = o->device, .max_batch = o->max_batch, .seed = o->seed};
    return ct_model_build(m, root, &in, &mo);
}

static char tmp_root[256];

const char *ct_fixture_tmp_root(const char *name) {
    if (tmp_root[0]) return tmp_root;
    snprintf(tmp_root, sizeof tmp_root, "/tmp/%s_XXXXXX", name);
    if (!mkdtemp(tmp_root)) {
        perror("mkdtemp");
        tmp_root[0] = 0;
        return NULL;
    }
    return tmp_root;
}

void ct_fixture_remove(const char *dir) {
    if (ct_remove_tree(dir) != CT_OK) fprintf(stderr, "could not remove %s: %s\n", dir, ct_last_error());
}

void ct_fixture_cleanup(void) {
    if (!tmp_root[0]) return;
    ct_fixture_remove(tmp_root);
    tmp_root[0] = 0;
}
