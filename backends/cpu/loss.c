/* Loss kernels on the CPU (see ops_loss.h); the type-generic code is in loss_tmpl.h. Tensors on a
 * CUDA device go to the twins in backends/cuda/loss.cu.
 *
 * Reductions split their range into CT_LOSS_CHUNKS fixed chunks, sum each chunk in double (in
 * parallel when large), then add the chunk sums in order. The split depends only on the size, never
 * on the thread count, so a loss is bit-identical for any OMP_NUM_THREADS, unlike an OpenMP
 * `reduction`, whose combination order is unspecified. */
#include <stdbool.h>
#include <stdint.h>

#include "backends/cpu/cpu_impl.h"
#include "core/ops/ops.h"

#define CT_LOSS_CHUNKS 64

/* First index of chunk k of [0, n): the first n % CHUNKS chunks get one extra element. */
static inline int64_t chunk_lo(int64_t n, int k) {
    int64_t extra = n % CT_LOSS_CHUNKS;
    return n / CT_LOSS_CHUNKS * k + (k < extra ? k : extra);
}

static inline int64_t target_at(const void *t, bool t64, int64_t r) {
    return t64 ? ((const int64_t *)t)[r] : (int64_t)((const int32_t *)t)[r];
}

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

/* Checks the op's contract (caller bugs abort) and returns rows and classes. */
static void xent_dims(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o, int64_t *rows,
                      int64_t *c) {
    CT_CHECK_CPU(logits);
    CT_CHECK_CPU(target);
    CT_ASSERT(!o->weight || o->weight->device.kind == CT_DEVICE_CPU);
    CT_ASSERT(logits->ndim >= 1 && (target->dtype == CT_I64 || target->dtype == CT_I32));
    *c = logits->shape[logits->ndim - 1];
    CT_ASSERT(*c > 0);
    *rows = ct_tensor_numel(logits) / *c;
    CT_ASSERT(ct_tensor_numel(target) == *rows);
    CT_ASSERT(!o->weight || (o->weight->dtype == CT_F64 && ct_tensor_numel(o->weight) == *c));
}

int64_t ct_op_cross_entropy_forward(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o,
                                    double *sum, double *count) {
    CT_ON_CUDA_RETURN(logits, ct_cuda_op_cross_entropy_forward(logits, target, o, sum, count));
    int64_t rows, c;
    xent_dims(logits, target, o, &rows, &c);
    const double *w = o->weight ? o->weight->data : NULL;
    bool t64 = target->dtype == CT_I64;
    if (logits->dtype == CT_F32)
        return xent_fwd_f32(logits->data, target->data, t64, rows, c, w, o->label_smoothing, o->ignore_index, sum,
                            count);
    CT_ASSERT(logits->dtype == CT_F64);
    return xent_fwd_f64(logits->data, target->data, t64, rows, c, w, o->label_smoothing, o->ignore_index, sum, count);
}

int64_t ct_op_cross_entropy_backward(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o,
                                     double scale, ct_tensor *dlogits) {
    CT_ON_CUDA_RETURN(logits, ct_cuda_op_cross_entropy_backward(logits, target, o, scale, dlogits));
    int64_t rows, c;
    xent_dims(logits, target, o, &rows, &c);
    CT_CHECK_CPU(dlogits);
    CT_ASSERT(dlogits->dtype == logits->dtype && ct_tensor_numel(dlogits) == rows * c);
    const double *w = o->weight ? o->weight->data : NULL;
    bool t64 = target->dtype == CT_I64;
    if (logits->dtype == CT_F32)
        return xent_bwd_f32(logits->data, target->data, t64, rows, c, w, o->label_smoothing, o->ignore_index, scale,
                            dlogits->data);
    CT_ASSERT(logits->dtype == CT_F64);
    return xent_bwd_f64(logits->data, target->data, t64, rows, c, w, o->label_smoothing, o->ignore_index, scale,
                        dlogits->data);
}

/* pos_weight as (data, length), checking that its length is 1 or the last dimension of pred. */
static const double *pos_weight(const ct_pointwise_opts *o, const ct_tensor *pred, int64_t *npw) {
    *npw = 1;
    if (!o || !o->pos_weight) return NULL;
    CT_ASSERT(o->pos_weight->dtype == CT_F64 && o->pos_weight->device.kind == CT_DEVICE_CPU);
    *npw = ct_tensor_numel(o->pos_weight);
    CT_ASSERT(*npw == 1 || (pred->ndim >= 1 && *npw == pred->shape[pred->ndim - 1]));
    return o->pos_weight->data;
}

double ct_op_pointwise_loss_forward(ct_pointwise_loss kind, const ct_pointwise_opts *o, const ct_tensor *pred,
                                    const ct_tensor *target) {
    CT_ON_CUDA_RETURN(pred, ct_cuda_op_pointwise_loss_forward(kind, o, pred, target));
    CT_CHECK_CPU(target);
    int64_t n = ct_tensor_numel(pred), npw;
    CT_ASSERT(ct_tensor_numel(target) == n && target->dtype == pred->dtype);
    const double *pw = pos_weight(o, pred, &npw);
    double delta = o ? o->delta : 1.0;
    if (pred->dtype == CT_F32) return pointwise_fwd_f32(kind, delta, pw, npw, pred->data, target->data, n);
    CT_ASSERT(pred->dtype == CT_F64);
    return pointwise_fwd_f64(kind, delta, pw, npw, pred->data, target->data, n);
}

void ct_op_pointwise_loss_backward(ct_pointwise_loss kind, const ct_pointwise_opts *o, const ct_tensor *pred,
                                   const ct_tensor *target, double scale, ct_tensor *dpred) {
    CT_ON_CUDA(pred, ct_cuda_op_pointwise_loss_backward(kind, o, pred, target, scale, dpred));
    CT_CHECK_CPU(target);
    CT_CHECK_CPU(dpred);
    int64_t n = ct_tensor_numel(pred), npw;
    CT_ASSERT(ct_tensor_numel(target) == n && target->dtype == pred->dtype);
    CT_ASSERT(ct_tensor_numel(dpred) == n && dpred->dtype == pred->dtype);
    const double *pw = pos_weight(o, pred, &npw);
    double delta = o ? o->delta : 1.0;
    CT_REAL_DISPATCH(pred, pointwise_bwd, kind, delta, pw, npw, pred->data, target->data, n, scale, dpred->data);
}
