/* The unit tests' trainer fixture (trainer_fixture.h): data sets, MLPs, the temporary root and the
 * record of a run, which the tests that train used to define each for themselves. */
#include "trainer_fixture.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "core/rng.h"
#include "model/layers.h"
#include "testlib.h"
#include "trainer/trainer_impl.h" /* the progress record */

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

ct_dataset *ct_fixture_small_data(int64_t n, uint64_t seed) {
    return ct_fixture_dataset(&(ct_fixture_data){.n = n, .dim = 6, .classes = 3, .seed = seed});
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

ct_status ct_fixture_gpt_build(const ct_fixture_gpt *o, ct_model *m) {
    ct_gpt_config c = ct_gpt_config_default();
    c.vocab_size = o->vocab;
    c.padded_vocab_size = o->padded_vocab;
    c.n_positions = o->positions;
    c.n_embd = o->n_embd;
    c.n_head = o->n_head;
    c.n_layer = o->n_layer;
    ct_module *root;
    CT_TRY(ct_gpt_create(&c, &root));
    ct_model_options mo = {.dtype = o->dtype, .device = o->device, .max_batch = o->max_batch, .seed = o->seed};
    return ct_model_build(m, root, &(ct_shape){.ndim = 1, .dims = {o->positions}}, &mo);
}

void ct_fixture_args(ct_training_args *a, const char *root, const char *name) {
    ct_training_args_default(a);
    snprintf(a->output_dir, sizeof a->output_dir, "%s/%s", root, name);
    a->disable_tqdm = true;
}

bool ct_fixture_train(ct_trainer *t, const ct_trainer_ops *ops, const ct_training_args *a,
                      const ct_trainer_setup *setup, const char *resume, ct_fixture_run *r) {
    *r = (ct_fixture_run){.optimizer_steps = -1};
    r->status = ct_trainer_init(t, ops, a, setup);
    if (r->status != CT_OK) {
        snprintf(r->message, sizeof r->message, "%s", ct_last_error());
        return false;
    }
    ct_train_output out;
    r->status = ct_trainer_train(t, resume, &out);
    snprintf(r->message, sizeof r->message, "%s", ct_last_error());
    if (r->status == CT_OK) {
        r->metrics = json_deep_copy(out.metrics);
        ct_train_output_free(&out);
    }
    r->log = ct_fixture_without_timings(t->state.log_history);
    r->global_step = t->state.global_step;
    if (t->optimizer) r->optimizer_steps = t->optimizer->step;
    r->progress = t->priv->progress;
    snprintf(r->best_model_checkpoint, sizeof r->best_model_checkpoint, "%s", t->state.best_model_checkpoint);
    const ct_tensor *w = &t->model->params.values;
    if (ct_tensor_alloc(&r->weights, w->dtype, CT_CPU, w->ndim, w->shape) != CT_OK ||
        ct_tensor_copy_to(&r->weights, w) != CT_OK)
        abort();
    return true;
}

void ct_fixture_run_free(ct_fixture_run *r) {
    json_decref(r->log);
    json_decref(r->metrics);
    ct_tensor_free(&r->weights);
    *r = (ct_fixture_run){0};
}

json_t *ct_fixture_without_timings(const json_t *log_history) {
    json_t *out = json_array();
    size_t i;
    json_t *e;
    json_array_foreach(log_history, i, e) {
        json_t *c = json_object();
        const char *k;
        json_t *v;
        json_object_foreach(e, k, v) if (!strstr(k, "runtime") && !strstr(k, "per_second")) json_object_set(c, k, v);
        json_array_append_new(out, c);
    }
    return out;
}

bool ct_fixture_same_bits(const ct_tensor *a, const ct_tensor *b) {
    return a->data && b->data && ct_tensor_nbytes(a) == ct_tensor_nbytes(b) &&
           memcmp(a->data, b->data, ct_tensor_nbytes(a)) == 0;
}

bool ct_fixture_check_same_log(const char *label, const json_t *want, const json_t *got) {
    size_t n = json_array_size(want), i = 0;
    CHECK(json_array_size(got) == n, "%s: %zu log entries, expected %zu", label, json_array_size(got), n);
    if (json_array_size(got) != n) return false;
    while (i < n && json_equal(json_array_get(want, i), json_array_get(got, i))) i++;
    if (i == n) return true;
    char *ws = json_dumps(json_array_get(want, i), JSON_SORT_KEYS);
    char *gs = json_dumps(json_array_get(got, i), JSON_SORT_KEYS);
    CHECK(false, "%s: log entry %zu differs:\n  got  %s\n  want %s", label, i, gs, ws);
    free(ws);
    free(gs);
    return false;
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
