/* Loss kernels on the CPU (see ops_loss.h); the type-generic code is in loss_tmpl.h. Members of
 * ct_backend_cpu (backend_cpu.c); the CUDA twins are in backends/cuda/loss.cu.
 *
 * Reductions split their range into CT_LOSS_CHUNKS fixed chunks, sum each chunk in double (in
 * parallel when large), then add the chunk sums in order. The split depends only on the size, never
 * on the thread count, so a loss is bit-identical for any OMP_NUM_THREADS, unlike an OpenMP
 * `reduction`, whose combination order is unspecified. */
#include <stdbool.h>
#include <stdint.h>

#include "backends/cpu/cpu_impl.h"
#include "backends/cpu/expf.h"
#include "core/ops/ops.h"

#define CT_LOSS_CHUNKS 64

/* First index of chunk k of [0, n): the first n % CHUNKS chunks get one extra element. */
static inline int64_t chunk_lo(int64_t n, int k) {
    int64_t extra = n % CT_LOSS_CHUNKS;
    return n / CT_LOSS_CHUNKS * k + (k < extra ? k : extra);
}

/* for (int k = 0; k < CT_LOSS_CHUNKS; k++) BODY, on the thread team only when `big`. A false `if`
 * clause on `omp parallel` still has libgomp set up and tear down a team of one (about 0.7 us),
 * which an evaluation's per-row losses (trainer/evaluate.c) would pay on every row. */
#define CT_LOSS_FOR_CHUNKS(big, k, ...)                                                                 \
    do {                                                                                               \
        if (big) {                                                                                     \
            _Pragma("omp parallel for") for (int k = 0; k < CT_LOSS_CHUNKS; k++) __VA_ARGS__           \
        } else {                                                                                       \
            for (int k = 0; k < CT_LOSS_CHUNKS; k++) __VA_ARGS__                                       \
        }                                                                                              \
    } while (0)

static inline int64_t target_at(const void *t, bool t64, int64_t r) {
    return t64 ? ((const int64_t *)t)[r] : (int64_t)((const int32_t *)t)[r];
}

/* e^(z - m) in double for z <= m (a logit less its row's maximum or log-sum-exp) through the exp the
 * compiler vectorises (expf.h, about 1 ulp); a NaN, or z and m the same infinity, gives NaN. */
static inline double exp_shifted_f32(float z, double m) { return ct_cpu_exp_neg((double)z - m); }
static inline double exp_shifted_f64(double z, double m) { return ct_cpu_exp_neg(z - m); }

#define R float
#define FN(name) name##_f32
#include "backends/cpu/loss_tmpl.h"
#undef R
#undef FN
#define R double
#define FN(name) name##_f64
#include "backends/cpu/loss_tmpl.h"
#undef R
#undef FN

/* Rows and classes of the logits (core/ops/dispatch.c checked the op's contract). */
static void xent_dims(const ct_tensor *logits, int64_t *rows, int64_t *c) {
    *c = logits->shape[logits->ndim - 1];
    *rows = ct_tensor_numel(logits) / *c;
}

int64_t ct_cpu_cross_entropy_forward(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o,
                                     double *sum, double *count) {
    int64_t rows, c;
    xent_dims(logits, &rows, &c);
    const double *w = o->weight ? o->weight->data : NULL;
    bool t64 = target->dtype == CT_I64;
    if (logits->dtype == CT_F32)
        return xent_fwd_f32(logits->data, target->data, t64, rows, c, w, o->label_smoothing, o->ignore_index, sum,
                            count);
    CT_ASSERT(logits->dtype == CT_F64);
    return xent_fwd_f64(logits->data, target->data, t64, rows, c, w, o->label_smoothing, o->ignore_index, sum, count);
}

int64_t ct_cpu_cross_entropy_rows(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o,
                                  double *loss, double *count) {
    int64_t rows, c;
    xent_dims(logits, &rows, &c);
    const double *w = o->weight ? o->weight->data : NULL;
    bool t64 = target->dtype == CT_I64;
    if (logits->dtype == CT_F32)
        return xent_rows_f32(logits->data, target->data, t64, rows, c, w, o->label_smoothing, o->ignore_index, loss,
                             count);
    CT_ASSERT(logits->dtype == CT_F64);
    return xent_rows_f64(logits->data, target->data, t64, rows, c, w, o->label_smoothing, o->ignore_index, loss,
                         count);
}

void ct_cpu_token_values(const ct_tensor *logits, const ct_tensor *labels, double *nll, double *hit) {
    int64_t rows, c;
    xent_dims(logits, &rows, &c);
    bool t64 = labels->dtype == CT_I64;
    if (logits->dtype == CT_F32)
        token_values_f32(logits->data, labels->data, t64, rows, c, nll, hit);
    else
        token_values_f64(logits->data, labels->data, t64, rows, c, nll, hit);
}

void ct_cpu_class_ranks(const ct_tensor *scores, const ct_tensor *labels, int64_t *pred, int64_t *above) {
    int64_t rows, c;
    xent_dims(scores, &rows, &c);
    bool t64 = labels->dtype == CT_I64;
    if (scores->dtype == CT_F32)
        class_ranks_f32(scores->data, labels->data, t64, rows, c, pred, above);
    else
        class_ranks_f64(scores->data, labels->data, t64, rows, c, pred, above);
}

int64_t ct_cpu_cross_entropy_backward(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o,
                                      double scale, ct_tensor *dlogits) {
    int64_t rows, c;
    xent_dims(logits, &rows, &c);
    const double *w = o->weight ? o->weight->data : NULL;
    bool t64 = target->dtype == CT_I64;
    if (logits->dtype == CT_F32)
        return xent_bwd_f32(logits->data, target->data, t64, rows, c, w, o->label_smoothing, o->ignore_index, scale,
                            dlogits->data);
    CT_ASSERT(logits->dtype == CT_F64);
    return xent_bwd_f64(logits->data, target->data, t64, rows, c, w, o->label_smoothing, o->ignore_index, scale,
                        dlogits->data);
}

int64_t ct_cpu_fused_classifier(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o, double scale,
                                double *sum, double *count, ct_tensor *dlogits) {
    int64_t rows, c;
    xent_dims(logits, &rows, &c);
    const double *w = o->weight ? o->weight->data : NULL;
    bool t64 = target->dtype == CT_I64;
    if (logits->dtype == CT_F32)
        return xent_fused_f32(logits->data, target->data, t64, rows, c, w, o->label_smoothing, o->ignore_index, scale,
                              sum, count, dlogits->data);
    CT_ASSERT(logits->dtype == CT_F64);
    return xent_fused_f64(logits->data, target->data, t64, rows, c, w, o->label_smoothing, o->ignore_index, scale, sum,
                          count, dlogits->data);
}

/* The step's block (host memory here): the fused classifier's sum and count added, or its first
 * invalid target's row kept. */
void ct_cpu_fused_classifier_acc(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o, double scale,
                                 ct_tensor *dlogits, ct_tensor *stats) {
    double sum, count, *s = stats->data;
    int64_t bad = ct_cpu_fused_classifier(logits, target, o, scale, &sum, &count, dlogits);
    if (bad >= 0) {
        if (s[CT_STEP_BAD_LABEL] == 0) s[CT_STEP_BAD_LABEL] = (double)bad + 1;
        return;
    }
    s[CT_STEP_LOSS_SUM] += sum;
    s[CT_STEP_LOSS_COUNT] += count;
}

/* pos_weight as (data, length) (its length, 1 or the last dimension of pred, was checked). */
static const double *pos_weight(const ct_pointwise_opts *o, int64_t *npw) {
    *npw = 1;
    if (!o || !o->pos_weight) return NULL;
    *npw = ct_tensor_numel(o->pos_weight);
    return o->pos_weight->data;
}

double ct_cpu_pointwise_loss_forward(ct_pointwise_loss kind, const ct_pointwise_opts *o, const ct_tensor *pred,
                                     const ct_tensor *target) {
    int64_t n = ct_tensor_numel(pred), npw;
    const double *pw = pos_weight(o, &npw);
    double delta = o ? o->delta : 1.0;
    if (pred->dtype == CT_F32) return pointwise_fwd_f32(kind, delta, pw, npw, pred->data, target->data, n);
    CT_ASSERT(pred->dtype == CT_F64);
    return pointwise_fwd_f64(kind, delta, pw, npw, pred->data, target->data, n);
}

void ct_cpu_pointwise_loss_acc(ct_pointwise_loss kind, const ct_pointwise_opts *o, const ct_tensor *pred,
                                const ct_tensor *target, ct_tensor *stats) {
    double *s = stats->data;
    s[CT_STEP_LOSS_SUM] += ct_cpu_pointwise_loss_forward(kind, o, pred, target);
    s[CT_STEP_LOSS_COUNT] += (double)ct_tensor_numel(pred);
}

void ct_cpu_pointwise_loss_rows(ct_pointwise_loss kind, const ct_pointwise_opts *o, const ct_tensor *pred,
                                const ct_tensor *target, double *loss) {
    int64_t n = ct_tensor_numel(pred), rows = pred->shape[0], npw;
    if (rows == 0) return;
    const double *pw = pos_weight(o, &npw);
    double delta = o ? o->delta : 1.0;
    if (pred->dtype == CT_F32) {
        pointwise_rows_f32(kind, delta, pw, npw, pred->data, target->data, rows, n / rows, loss);
        return;
    }
    CT_ASSERT(pred->dtype == CT_F64);
    pointwise_rows_f64(kind, delta, pw, npw, pred->data, target->data, rows, n / rows, loss);
}

void ct_cpu_pointwise_loss_backward(ct_pointwise_loss kind, const ct_pointwise_opts *o, const ct_tensor *pred,
                                    const ct_tensor *target, double scale, ct_tensor *dpred) {
    int64_t n = ct_tensor_numel(pred), npw;
    const double *pw = pos_weight(o, &npw);
    double delta = o ? o->delta : 1.0;
    CT_REAL_DISPATCH(pred, pointwise_bwd, kind, delta, pw, npw, pred->data, target->data, n, scale, dpred->data);
}
