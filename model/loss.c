/* The loss wrappers (the single place every loss call is validated and its errors get the loss's
 * name) and ct_loss_from_json, which dispatches to the per-family readers in loss_xent.c and
 * loss_pointwise.c. */
#include "model/loss.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/registry.h"
#include "core/vtable.h"
#include "core/util.h"
#include "model/loss_impl.h"

/* A member is usable when the table is recent enough to have it and it is set. */
#define HAS_OP(ops, member) CT_OPS_HAS(ops, ct_loss_ops, member)

static ct_status check_ops(const ct_loss_ops *ops) {
    CT_TRY(CT_OPS_CHECK_SIZE(ct_loss_ops, ops, forward));
    return CT_OPS_CHECK_MEMBER(ct_loss_ops, ops, forward, "computes the loss's (sum, count)");
}

ct_status ct_loss_base_init(ct_loss *l, const ct_loss_ops *ops) {
    CT_ASSERT(l);
    l->ops = ops;
    return check_ops(ops);
}

ct_status ct_loss_check(const ct_loss *l, bool training) {
    if (!l) return ct_error(CT_ERR_INVALID_ARG, "loss is NULL");
    CT_TRY(check_ops(l->ops));
    if (training && !HAS_OP(l->ops, backward))
        return ct_error(CT_ERR_INVALID_ARG, "%s loss: ct_loss_ops.backward is NULL: training needs it (it writes the "
                        "gradient of the sum); set .backward, or only evaluate with this loss", ct_loss_name(l));
    return CT_OK;
}

const char *ct_loss_name(const ct_loss *l) {
    return HAS_OP(l->ops, name) ? l->ops->name : "custom";
}

static ct_status named(const ct_loss *l, ct_status s) {
    if (s == CT_OK) return s;
    return ct_error_prefix(s, "%s loss: ", ct_loss_name(l));
}

/* What every loss needs of its tensors; the loss checks target dtype and shape itself. */
static ct_status check_common(const ct_tensor *pred, const ct_tensor *target) {
    char a[128], b[128];
    if (pred->dtype != CT_F32 && pred->dtype != CT_F64)
        return ct_error(CT_ERR_DTYPE, "predictions %s must be f32 or f64", ct_tensor_str(pred, a, sizeof a));
    if (!ct_device_eq(pred->device, target->device))
        return ct_error(CT_ERR_DEVICE, "target %s is not on the device of the predictions %s",
                        ct_tensor_str(target, b, sizeof b), ct_tensor_str(pred, a, sizeof a));
    return CT_OK;
}

ct_status ct_loss_forward(ct_loss *l, const ct_tensor *pred, const ct_tensor *target, ct_loss_value *out) {
    CT_ASSERT(l && pred && target && out);
    *out = (ct_loss_value){0.0, 0.0};
    if (!HAS_OP(l->ops, forward)) return named(l, ct_error(CT_ERR_UNSUPPORTED, "has no forward"));
    CT_TRY(named(l, check_common(pred, target)));
    return named(l, l->ops->forward(l, pred, target, out));
}

/* What a backward needs besides check_common: dpred like pred, a finite scale. */
static ct_status check_backward(const ct_tensor *pred, const ct_tensor *dpred, double scale) {
    if (!ct_shape_eq(pred, dpred) || pred->dtype != dpred->dtype || !ct_device_eq(pred->device, dpred->device)) {
        char a[128], b[128];
        return ct_error(CT_ERR_SHAPE, "gradient %s does not match the predictions %s",
                        ct_tensor_str(dpred, b, sizeof b), ct_tensor_str(pred, a, sizeof a));
    }
    if (!isfinite(scale)) return ct_error(CT_ERR_INVALID_ARG, "gradient scale %g is not finite", scale);
    return CT_OK;
}

ct_status ct_loss_backward(ct_loss *l, const ct_tensor *pred, const ct_tensor *target, double scale,
                           ct_tensor *dpred) {
    CT_ASSERT(l && pred && target && dpred);
    if (!HAS_OP(l->ops, backward)) return named(l, ct_error(CT_ERR_UNSUPPORTED, "has no backward"));
    CT_TRY(named(l, check_common(pred, target)));
    CT_TRY(named(l, check_backward(pred, dpred, scale)));
    return named(l, l->ops->backward(l, pred, target, scale, dpred));
}

ct_status ct_loss_forward_backward(ct_loss *l, const ct_tensor *pred, const ct_tensor *target, double scale,
                                   ct_tensor *dpred, ct_loss_value *out) {
    CT_ASSERT(l && pred && target && dpred && out);
    *out = (ct_loss_value){0.0, 0.0};
    if (!HAS_OP(l->ops, forward_backward)) {
        CT_TRY(ct_loss_forward(l, pred, target, out));
        return ct_loss_backward(l, pred, target, scale, dpred);
    }
    CT_TRY(named(l, check_common(pred, target)));
    CT_TRY(named(l, check_backward(pred, dpred, scale)));
    return named(l, l->ops->forward_backward(l, pred, target, scale, dpred, out));
}

bool ct_loss_accumulates(const ct_loss *l) { return HAS_OP(l->ops, forward_backward_acc); }

ct_status ct_loss_forward_backward_acc(ct_loss *l, const ct_tensor *pred, const ct_tensor *target, double scale,
                                       ct_tensor *dpred, ct_tensor *stats) {
    CT_ASSERT(l && pred && target && dpred && stats && ct_loss_accumulates(l));
    CT_TRY(named(l, check_common(pred, target)));
    CT_TRY(named(l, check_backward(pred, dpred, scale)));
    return named(l, l->ops->forward_backward_acc(l, pred, target, scale, dpred, stats));
}

ct_status ct_loss_forward_rows(ct_loss *l, const ct_tensor *pred, const ct_tensor *target, ct_loss_value *rows) {
    CT_ASSERT(l && pred && target && (rows || pred->ndim < 1 || pred->shape[0] == 0));
    if (pred->ndim < 1 || target->ndim < 1 || target->shape[0] != pred->shape[0]) {
        char a[128], b[128];
        return named(l, ct_error(CT_ERR_SHAPE, "per-row losses: target %s and predictions %s do not have the same "
                                 "rows", ct_tensor_str(target, b, sizeof b), ct_tensor_str(pred, a, sizeof a)));
    }
    if (HAS_OP(l->ops, forward_rows)) {
        CT_TRY(named(l, check_common(pred, target)));
        return named(l, l->ops->forward_rows(l, pred, target, rows));
    }
    for (int64_t i = 0; i < pred->shape[0]; i++) {
        ct_tensor p = ct_tensor_rows(pred, i, 1), y = ct_tensor_rows(target, i, 1);
        CT_TRY(ct_loss_forward(l, &p, &y, &rows[i]));
    }
    return CT_OK;
}

void ct_loss_default_destroy(ct_loss *l) { free(l); }

void ct_loss_free(ct_loss *l) {
    if (!l) return;
    if (HAS_OP(l->ops, destroy))
        l->ops->destroy(l);
    else
        ct_loss_default_destroy(l);
}

ct_status ct_loss_json_reals(const json_t *spec, const char *path, const char *key, bool allow_scalar,
                             double min_value, double **vals, int64_t *n) {
    *vals = NULL;
    *n = 0;
    json_t *v = json_object_get(spec, key);
    if (!v) return CT_OK;
    bool scalar = json_is_number(v);
    if (!json_is_array(v) && !(allow_scalar && scalar))
        return ct_error(CT_ERR_CONFIG, "%s.%s: expected %s", path, key,
                        allow_scalar ? "a number or a list of numbers" : "a list of numbers");
    size_t len = scalar ? 1 : json_array_size(v);
    if (len == 0) return ct_error(CT_ERR_CONFIG, "%s.%s: expected at least one number", path, key);
    double *out = malloc(len * sizeof *out);
    if (!out) return ct_error(CT_ERR_NOMEM, "%s.%s: out of memory", path, key);
    for (size_t i = 0; i < len; i++) {
        json_t *e = scalar ? v : json_array_get(v, i);
        char where[64] = "";
        if (!scalar) snprintf(where, sizeof where, "[%zu]", i);
        if (!json_is_number(e)) {
            free(out);
            return ct_error(CT_ERR_CONFIG, "%s.%s%s: expected a number", path, key, where);
        }
        out[i] = json_number_value(e);
        if (!isfinite(out[i]) || out[i] < min_value) {
            double bad = out[i];
            free(out);
            return ct_error(CT_ERR_CONFIG, "%s.%s%s: %g must be a finite number >= %g", path, key, where, bad,
                            min_value);
        }
    }
    *vals = out;
    *n = (int64_t)len;
    return CT_OK;
}

ct_status ct_loss_copy_reals(const char *who, const double *vals, int64_t n, ct_tensor *out) {
    int64_t shape[1] = {n};
    ct_status s = ct_tensor_alloc(out, CT_F64, CT_CPU, 1, shape);
    if (s != CT_OK) return ct_error_prefix(s, "%s: ", who);
    memcpy(out->data, vals, (size_t)n * sizeof *vals);
    return CT_OK;
}

static const char *const loss_types[] = {"cross_entropy", "mse", "l1", "huber", "bce_with_logits", NULL};

static bool is_builtin(const char *type) {
    for (const char *const *t = loss_types; *t; t++)
        if (strcmp(type, *t) == 0) return true;
    return false;
}

static ct_registry user = CT_REGISTRY_INIT("loss", "ct_register_loss_type", is_builtin);

ct_status ct_register_loss_type(const char *type, ct_loss_from_json_fn fn) {
    return ct_registry_add(&user, type, (ct_registry_fn)fn);
}

/* An application's loss from its registered reader, checked before anything else uses it. */
static ct_status registered(ct_loss_from_json_fn fn, const json_t *spec, const char *path, ct_loss **out) {
    ct_status s = fn(spec, path, out);
    if (s != CT_OK) {
        *out = NULL;
        return ct_registry_error(s, path);
    }
    if (!*out) return ct_error(CT_ERR_INVALID_ARG, "%s: the loss's reader returned CT_OK but no loss", path);
    if ((s = ct_loss_check(*out, false)) != CT_OK) {
        *out = NULL; /* a table that fails its check cannot be trusted to free itself either */
        return ct_error_prefix(s, "%s: ", path);
    }
    return CT_OK;
}

ct_status ct_loss_from_json(const json_t *spec, const char *path, ct_loss **out) {
    *out = NULL;
    if (json_is_string(spec)) {
        /* "mse" is short for {"type": "mse"} */
        json_t *obj = json_pack("{s:O}", "type", (json_t *)spec);
        if (!obj) return ct_error(CT_ERR_NOMEM, "%s: out of memory", path);
        ct_status s = ct_loss_from_json(obj, path, out);
        json_decref(obj);
        return s;
    }
    if (!json_is_object(spec))
        return ct_error(CT_ERR_CONFIG, "%s: expected a loss name or an object with a \"type\"", path);
    const char *type;
    CT_TRY(ct_json_string(spec, path, "type", true, NULL, &type));
    if (strcmp(type, "cross_entropy") == 0) return ct_cross_entropy_loss_from_json(spec, path, out);
    for (const char *const *t = loss_types; *t; t++)
        if (strcmp(type, *t) == 0) return ct_pointwise_loss_from_json(spec, path, out);
    ct_loss_from_json_fn fn = (ct_loss_from_json_fn)ct_registry_find(&user, type);
    if (fn) return registered(fn, spec, path, out);
    char type_path[512];
    snprintf(type_path, sizeof type_path, "%s.type", path);
    return ct_registry_unknown(&user, loss_types, type_path, type);
}
