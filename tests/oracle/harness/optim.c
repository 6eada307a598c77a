/* Mode "optim": optimizers and gradient clipping on a parameter store built from the spec.
 *
 * spec: {"task": "step" | "clip", "dtype": "f32" | "f64",
 *        "params": [{"name", "shape", "no_decay"}...], "buffers": [{"name", "shape"}...],
 *        step: "optimizer" (JSON settings, optim/optimizer.h), "lrs" (one learning rate per step),
 *              "restart_at" (optional: after that many steps the state is copied into a fresh
 *              optimizer through the state API, as a checkpoint would, and the run goes on);
 *        clip: "max_norm"}
 * inputs: init/<name> (parameters), buffers/<name>, and per step k grads/<k>/<name> (clip: grads/<name>).
 * outputs: values/<name>, buffers/<name>, state/<state>/<name>, "step" (the step count), "padding"
 *          (largest |x| over the alignment padding of the parameter, gradient and state buffers);
 *          clip: grads/<name>, "total_norm" and "status" (the ct_status returned). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "model/params.h"
#include "optim/clip.h"
#include "optim/optimizer.h"
#include "oracle.h"

typedef struct store {
    ct_param_store ps;
    ct_tensor *values, *grads; /* what the store binds, one per declared tensor */
    int n;
} store;

static ct_status declare_list(store *st, const json_t *list, const char *what, unsigned base_flags) {
    static const ct_module root; /* owner with an empty name: parameter names are used as given */
    for (size_t i = 0; i < json_array_size(list); i++) {
        const json_t *item = json_array_get(list, i);
        const char *name;
        int64_t shape[CT_MAX_DIMS];
        json_t *shape_json = json_object_get(item, "shape");
        int ndim = (int)json_array_size(shape_json);
        if (ndim < 1 || ndim > CT_MAX_DIMS) return ct_error(CT_ERR_CONFIG, "%s[%zu]: bad shape", what, i);
        CT_TRY(ct_json_string(item, what, "name", true, NULL, &name));
        for (int d = 0; d < ndim; d++) shape[d] = json_integer_value(json_array_get(shape_json, (size_t)d));
        bool no_decay;
        CT_TRY(ct_json_bool(item, what, "no_decay", false, false, &no_decay));
        unsigned flags = base_flags | (no_decay ? CT_PARAM_NO_DECAY : 0u);
        CT_TRY(ct_params_declare(&st->ps, &root, name, ndim, shape, flags, &st->values[st->n], &st->grads[st->n]));
        st->n++;
    }
    return CT_OK;
}

static ct_status build_store(store *st, const oracle_io *io) {
    const json_t *params = json_object_get(io->spec, "params"), *buffers = json_object_get(io->spec, "buffers");
    size_t total = json_array_size(params) + json_array_size(buffers);
    ct_params_init(&st->ps, oracle_dtype(io->spec), CT_CPU);
    st->values = calloc(total + 1, sizeof *st->values);
    st->grads = calloc(total + 1, sizeof *st->grads);
    if (!st->values || !st->grads) return ct_error(CT_ERR_NOMEM, "oracle optim: out of memory");
    CT_TRY(declare_list(st, params, "params", 0));
    CT_TRY(declare_list(st, buffers, "buffers", CT_PARAM_BUFFER));
    CT_TRY(ct_params_finalize(&st->ps));
    for (int i = 0; i < st->ps.count; i++) {
        ct_param *p = &st->ps.items[i];
        char name[300];
        bool buffer = (p->flags & CT_PARAM_BUFFER) != 0;
        snprintf(name, sizeof name, "%s/%s", buffer ? "buffers" : "init", p->name);
        CT_TRY(ct_h5_read_into(io->in, name, p->value));
    }
    return CT_OK;
}

static void free_store(store *st) {
    ct_params_free(&st->ps);
    free(st->values);
    free(st->grads);
}

/* Reads the gradients of step k (k < 0: the unnumbered grads/<name>). */
static ct_status read_grads(store *st, const oracle_io *io, int k) {
    ct_params_zero_grad(&st->ps);
    for (int i = 0; i < st->ps.count; i++) {
        ct_param *p = &st->ps.items[i];
        if (p->flags & CT_PARAM_BUFFER) continue;
        char name[300];
        if (k < 0)
            snprintf(name, sizeof name, "grads/%s", p->name);
        else
            snprintf(name, sizeof name, "grads/%d/%s", k, p->name);
        CT_TRY(ct_h5_read_into(io->in, name, p->grad));
    }
    return CT_OK;
}

/* Largest |x| of a flat buffer outside every parameter's elements. */
static double padding_max(const store *st, const ct_tensor *flat) {
    int64_t n = ct_tensor_numel(flat);
    char *inside = calloc((size_t)n + 1, 1);
    for (int i = 0; i < st->ps.count; i++) {
        const ct_param *p = &st->ps.items[i];
        if (!(p->flags & CT_PARAM_BUFFER)) memset(inside + p->offset, 1, (size_t)p->numel);
    }
    double worst = 0;
    for (int64_t j = 0; j < n; j++)
        if (!inside[j]) worst = fmax(worst, isnan(ct_tensor_get(flat, j)) ? INFINITY : fabs(ct_tensor_get(flat, j)));
    free(inside);
    return worst;
}

static ct_status write_scalar(hid_t file, const char *name, ct_dtype dt, double v) {
    int64_t one = 1;
    ct_tensor t;
    CT_TRY(ct_tensor_alloc(&t, dt, CT_CPU, 1, &one));
    ct_tensor_set(&t, 0, v);
    ct_status s = ct_h5_write_tensor(file, name, &t);
    ct_tensor_free(&t);
    return s;
}

/* What a checkpoint does: copy every state tensor and the step count into a fresh optimizer. */
static ct_status restart(ct_optimizer **opt, const json_t *settings, ct_param_store *ps) {
    ct_optimizer *fresh;
    CT_TRY(ct_optimizer_from_json(settings, "optimizer", ps, &fresh));
    ct_status s = ct_optimizer_state_count(fresh) == ct_optimizer_state_count(*opt)
                      ? CT_OK
                      : ct_error(CT_ERR_STATE, "restart: state counts differ");
    for (int i = 0; s == CT_OK && i < ct_optimizer_state_count(*opt); i++) {
        const char *name;
        ct_tensor *src, *dst;
        s = ct_optimizer_state_get(*opt, i, &name, &src);
        if (s == CT_OK) {
            dst = ct_optimizer_state_find(fresh, name);
            if (!dst)
                s = ct_error(CT_ERR_STATE, "restart: the fresh optimizer lacks state '%s'", name);
            else
                memcpy(dst->data, src->data, ct_tensor_nbytes(src));
        }
    }
    if (s == CT_OK) s = ct_optimizer_set_step_count(fresh, ct_optimizer_step_count(*opt));
    ct_optimizer_destroy(s == CT_OK ? *opt : fresh);
    if (s == CT_OK) *opt = fresh;
    return s;
}

static ct_status run_steps(store *st, const oracle_io *io) {
    const json_t *settings = json_object_get(io->spec, "optimizer");
    const json_t *lrs = json_object_get(io->spec, "lrs");
    int64_t restart_at;
    CT_TRY(ct_json_int(io->spec, "spec", "restart_at", false, -1, &restart_at));
    ct_optimizer *opt;
    CT_TRY(ct_optimizer_from_json(settings, "optimizer", &st->ps, &opt));
    ct_status s = CT_OK;
    for (int k = 0; s == CT_OK && k < (int)json_array_size(lrs); k++) {
        if (k == restart_at) s = restart(&opt, settings, &st->ps);
        if (s == CT_OK) s = read_grads(st, io, k);
        if (s == CT_OK) s = ct_optimizer_step(opt, json_number_value(json_array_get(lrs, (size_t)k)));
    }
    double pad = padding_max(st, &st->ps.values);
    pad = fmax(pad, padding_max(st, &st->ps.grads));
    for (int i = 0; s == CT_OK && i < ct_optimizer_state_count(opt); i++) {
        const char *sname;
        ct_tensor *t;
        s = ct_optimizer_state_get(opt, i, &sname, &t);
        if (s != CT_OK) break;
        pad = fmax(pad, padding_max(st, t));
        for (int j = 0; s == CT_OK && j < st->ps.count; j++) {
            ct_param *p = &st->ps.items[j];
            if (p->flags & CT_PARAM_BUFFER) continue;
            char name[400];
            snprintf(name, sizeof name, "state/%s/%s", sname, p->name);
            /* The state of one parameter: its range of the flat state, in the parameter's shape. */
            ct_tensor view = ct_optimizer_range(t, p->offset, p->numel);
            view.ndim = p->ndim;
            memcpy(view.shape, p->shape, sizeof view.shape);
            s = ct_h5_write_tensor(io->out, name, &view);
        }
    }
    if (s == CT_OK) s = write_scalar(io->out, "step", CT_I64, (double)ct_optimizer_step_count(opt));
    if (s == CT_OK) s = write_scalar(io->out, "padding", CT_F64, pad);
    ct_optimizer_destroy(opt);
    return s;
}

static ct_status run_clip(store *st, const oracle_io *io) {
    double max_norm, norm = 0;
    CT_TRY(ct_json_real(io->spec, "spec", "max_norm", true, 0, &max_norm));
    CT_TRY(read_grads(st, io, -1));
    ct_status cs = ct_clip_grad_norm(&st->ps.grads, max_norm, &norm);
    if (cs != CT_OK) fprintf(stderr, "clip: %s\n", ct_last_error());
    CT_TRY(write_scalar(io->out, "total_norm", CT_F64, norm));
    CT_TRY(write_scalar(io->out, "status", CT_I64, (double)cs));
    CT_TRY(write_scalar(io->out, "padding", CT_F64, padding_max(st, &st->ps.grads)));
    for (int i = 0; i < st->ps.count; i++) {
        ct_param *p = &st->ps.items[i];
        if (p->flags & CT_PARAM_BUFFER) continue;
        char name[300];
        snprintf(name, sizeof name, "grads/%s", p->name);
        CT_TRY(ct_h5_write_tensor(io->out, name, p->grad));
    }
    return CT_OK;
}

ct_status oracle_optim(const oracle_io *io) {
    const char *task;
    CT_TRY(ct_json_string(io->spec, "spec", "task", false, "step", &task));
    store st = {0};
    ct_status s = build_store(&st, io);
    if (s == CT_OK) {
        if (strcmp(task, "clip") == 0)
            s = run_clip(&st, io);
        else if (strcmp(task, "step") == 0)
            s = run_steps(&st, io);
        else
            s = ct_error(CT_ERR_CONFIG, "spec.task: unknown task '%s' (step or clip)", task);
    }
    for (int i = 0; s == CT_OK && i < st.ps.count; i++) {
        ct_param *p = &st.ps.items[i];
        char name[300];
        snprintf(name, sizeof name, "%s/%s", (p->flags & CT_PARAM_BUFFER) ? "buffers" : "values", p->name);
        s = ct_h5_write_tensor(io->out, name, p->value);
    }
    free_store(&st);
    return s;
}
