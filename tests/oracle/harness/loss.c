/* Mode "loss": build a loss from spec["loss"] (ct_loss_from_json), evaluate it on "pred" (spec
 * "dtype" f32 or f64) and "target" (spec "target_dtype": "i64", "i32" or "float" = pred's dtype), and
 * write "sum" and "count" ([1] float64) and "dpred" = backward with spec["scale"] (default 1).
 * spec["split"] = k also evaluates rows [0, k) and [k, N) separately and writes "split_sum" and
 * "split_count" ([2]) and "split_dpred" (both halves' gradients, same scale, in one tensor), which is
 * how the Trainer adds micro-batches. It also writes "fused_sum_count" ([2]) and "fused_dpred" from
 * ct_loss_forward_backward run in place on a copy of pred, the path of the Trainer's step, and
 * "rows_sum" and "rows_count" ([N]) from ct_loss_forward_rows, an evaluation's per-sample losses. */
#include <stdlib.h>
#include <string.h>

#include "model/loss.h"
#include "oracle.h"

static ct_status write_pair(hid_t out, const char *name, double a, double b, int n) {
    double v[2] = {a, b};
    int64_t shape[1] = {n};
    ct_tensor t = ct_tensor_view(v, CT_F64, CT_CPU, 1, shape);
    return ct_h5_write_tensor(out, name, &t);
}

static ct_status run(const oracle_io *io, ct_loss *l, const ct_tensor *pred, const ct_tensor *target) {
    const json_t *spec = io->spec;
    json_t *scale_json = json_object_get(spec, "scale");
    double scale = scale_json ? json_number_value(scale_json) : 1.0;
    ct_loss_value v;
    CT_TRY(ct_loss_forward(l, pred, target, &v));
    CT_TRY(write_pair(io->out, "sum", v.sum, 0, 1));
    CT_TRY(write_pair(io->out, "count", v.count, 0, 1));
    ct_tensor g;
    CT_TRY(ct_tensor_alloc(&g, pred->dtype, CT_CPU, pred->ndim, pred->shape));
    ct_status s = ct_loss_backward(l, pred, target, scale, &g);
    if (s == CT_OK) s = ct_h5_write_tensor(io->out, "dpred", &g);
    json_t *split = json_object_get(spec, "split");
    if (s == CT_OK && split) {
        int64_t k = json_integer_value(split), n = pred->shape[0];
        if (k < 0 || k > n) s = ct_error(CT_ERR_INVALID_ARG, "split %lld outside [0, %lld]", (long long)k, (long long)n);
        ct_tensor pa = ct_tensor_rows(pred, 0, k), pb = ct_tensor_rows(pred, k, n - k);
        ct_tensor ta = ct_tensor_rows(target, 0, k), tb = ct_tensor_rows(target, k, n - k);
        ct_tensor ga = ct_tensor_rows(&g, 0, k), gb = ct_tensor_rows(&g, k, n - k);
        ct_loss_value a, b;
        if (s == CT_OK) s = ct_loss_forward(l, &pa, &ta, &a);
        if (s == CT_OK) s = ct_loss_forward(l, &pb, &tb, &b);
        if (s == CT_OK) s = write_pair(io->out, "split_sum", a.sum, b.sum, 2);
        if (s == CT_OK) s = write_pair(io->out, "split_count", a.count, b.count, 2);
        if (s == CT_OK) s = ct_loss_backward(l, &pa, &ta, scale, &ga);
        if (s == CT_OK) s = ct_loss_backward(l, &pb, &tb, scale, &gb);
        if (s == CT_OK) s = ct_h5_write_tensor(io->out, "split_dpred", &g);
    }
    /* The fused path the Trainer's step takes, in place: the gradient replaces a copy of pred. */
    ct_tensor f = {0};
    ct_loss_value fv;
    if (s == CT_OK) s = ct_tensor_alloc(&f, pred->dtype, CT_CPU, pred->ndim, pred->shape);
    if (s == CT_OK) s = ct_tensor_copy_to(&f, pred);
    if (s == CT_OK) s = ct_loss_forward_backward(l, &f, target, scale, &f, &fv);
    if (s == CT_OK) s = write_pair(io->out, "fused_sum_count", fv.sum, fv.count, 2);
    if (s == CT_OK) s = ct_h5_write_tensor(io->out, "fused_dpred", &f);
    ct_tensor_free(&f);
    ct_tensor_free(&g);
    /* The per-sample losses an evaluation takes, one row of pred's first dimension each. */
    int64_t n = pred->shape[0];
    double *rs = s == CT_OK ? malloc(2 * (size_t)(n > 0 ? n : 1) * sizeof *rs) : NULL, *rc = rs ? rs + n : NULL;
    ct_loss_value *rows = s == CT_OK ? malloc((size_t)(n > 0 ? n : 1) * sizeof *rows) : NULL;
    if (s == CT_OK && (!rs || !rows)) s = ct_error(CT_ERR_NOMEM, "out of memory");
    if (s == CT_OK) s = ct_loss_forward_rows(l, pred, target, rows);
    for (int64_t i = 0; s == CT_OK && i < n; i++) {
        rs[i] = rows[i].sum;
        rc[i] = rows[i].count;
    }
    ct_tensor ts = ct_tensor_view(rs, CT_F64, CT_CPU, 1, &n), tc = ct_tensor_view(rc, CT_F64, CT_CPU, 1, &n);
    if (s == CT_OK) s = ct_h5_write_tensor(io->out, "rows_sum", &ts);
    if (s == CT_OK) s = ct_h5_write_tensor(io->out, "rows_count", &tc);
    free(rs);
    free(rows);
    return s;
}

ct_status oracle_loss(const oracle_io *io) {
    const json_t *spec = io->spec;
    ct_dtype dt = oracle_dtype(spec);
    const char *tdt = json_string_value(json_object_get(spec, "target_dtype"));
    ct_dtype target_dt = !tdt || strcmp(tdt, "float") == 0 ? dt : strcmp(tdt, "i32") == 0 ? CT_I32 : CT_I64;
    ct_loss *l;
    CT_TRY(ct_loss_from_json(json_object_get(spec, "loss"), "loss", &l));
    ct_tensor pred = {0}, target = {0};
    ct_status s = ct_h5_read_tensor_alloc(io->in, "pred", dt, &pred);
    if (s == CT_OK) s = ct_h5_read_tensor_alloc(io->in, "target", target_dt, &target);
    if (s == CT_OK) s = run(io, l, &pred, &target);
    ct_tensor_free(&pred);
    ct_tensor_free(&target);
    ct_loss_free(l);
    return s;
}
