/* The public ops (core/ops/ops*.h): the one place that dispatches on a tensor's device.
 *
 * Each entry point checks what every backend relies on (shapes, dtypes, and that the op's tensors
 * sit on one device kind; a mismatch is a bug in the calling layer and aborts with file:line), looks
 * up the backend table of its dispatching tensor's device (core/ops/backend.h) and makes one
 * indirect call. Nothing else happens here: no allocation, no pass over the data, so an op costs what
 * its kernel costs (and, with CTRAINER_OP_PROFILE set, two device synchronisations and a clock).
 * What only one backend needs (the CPU's workspace, cuDNN's index limits, CUDA's device index) the
 * backend checks itself.
 *
 * The dispatching tensor is the op's output where there is one that must live on the device
 * (ct_op_gemm's c, ct_op_copy's dst), else its first input; a backend without the op (a NULL
 * member: the fused conv + ReLU + pooling ops exist on the CPU only) aborts naming both.
 *
 * Why one file of over 600 lines: each entry point is a few lines of checks and one call through the
 * macros below, and the checks of every op family side by side are what a new backend reads to learn
 * what it may rely on; split by family, the macros would move to a header of their own for no gain. */
#include <stdint.h>

#include "core/ops/backend.h"
#include "core/ops/op_profile.h"

/* --- dispatch ---------------------------------------------------------------------------------- */

static void no_backend(const ct_tensor *t, const char *op) {
    char name[32];
    ct_abort_at(__FILE__, __LINE__, "%s: this build has no backend for device %s", op,
                ct_device_str(t->device, name, sizeof name));
}

static void no_kernel(const ct_backend_ops *b, const char *op) {
    ct_abort_at(__FILE__, __LINE__, "%s: the %s backend has no such kernel", op, b->name);
}

static inline const ct_backend_ops *backend_of(const ct_tensor *t, const char *op) {
    const ct_backend_ops *b = ct_backend_for_kind(t->device.kind);
    if (__builtin_expect(b == NULL, 0)) no_backend(t, op);
    return b;
}

/* The kernel `op` of t's backend, called on t's device (use_device) with the remaining arguments
 * between the backend's op_begin and op_end (CALL_RETURN: its value), and timed when the op profile is on
 * (core/ops/op_profile.h: one flag read otherwise). */
#define CALL(t, op, ...)                                                                                               \
    do {                                                                                                               \
        const ct_backend_ops *b_ = backend_of((t), #op);                                                               \
        if (__builtin_expect(b_->op == NULL, 0)) no_kernel(b_, #op);                                                   \
        if (b_->use_device) b_->use_device((t)->device.index);                                                         \
        double started_ = __builtin_expect(ct_op_profile_on, 0) ? ct_op_profile_begin(b_) : 0.0;                       \
        if (b_->op_begin) b_->op_begin();                                                                              \
        b_->op(__VA_ARGS__);                                                                                           \
        if (b_->op_end) b_->op_end();                                                                                  \
        if (__builtin_expect(ct_op_profile_on, 0)) ct_op_profile_end(b_, #op, started_);                               \
    } while (0)
#define CALL_RETURN(t, op, ...)                                                                                        \
    do {                                                                                                               \
        const ct_backend_ops *b_ = backend_of((t), #op);                                                               \
        if (__builtin_expect(b_->op == NULL, 0)) no_kernel(b_, #op);                                                   \
        if (b_->use_device) b_->use_device((t)->device.index);                                                         \
        double started_ = __builtin_expect(ct_op_profile_on, 0) ? ct_op_profile_begin(b_) : 0.0;                       \
        if (b_->op_begin) b_->op_begin();                                                                              \
        __typeof__(b_->op(__VA_ARGS__)) r_ = b_->op(__VA_ARGS__);                                                      \
        if (b_->op_end) b_->op_end();                                                                                  \
        if (__builtin_expect(ct_op_profile_on, 0)) ct_op_profile_end(b_, #op, started_);                               \
        return r_;                                                                                                     \
    } while (0)

/* t (when given) lives on the same kind of device as the dispatching tensor ref. */
#define SAME_KIND(ref, t) CT_ASSERT(!(t) || (t)->device.kind == (ref)->device.kind)

/* --- dense and elementwise (ops.h) ------------------------------------------------------------- */

void ct_op_gemm(bool trans_a, bool trans_b, double alpha, const ct_tensor *a, const ct_tensor *b, double beta,
                ct_tensor *c) {
    SAME_KIND(c, a);
    SAME_KIND(c, b);
    CT_ASSERT(a->ndim == 2 && b->ndim == 2 && c->ndim == 2);
    CT_ASSERT(a->dtype == b->dtype && a->dtype == c->dtype);
    int64_t m = trans_a ? a->shape[1] : a->shape[0];
    int64_t k = trans_a ? a->shape[0] : a->shape[1];
    int64_t kb = trans_b ? b->shape[1] : b->shape[0];
    int64_t n = trans_b ? b->shape[0] : b->shape[1];
    CT_ASSERT(k == kb && c->shape[0] == m && c->shape[1] == n);
    CALL(c, gemm, trans_a, trans_b, alpha, a, b, beta, c);
}

void ct_op_gemm_batched(bool trans_a, bool trans_b, double alpha, const ct_tensor *a, const ct_tensor *b,
                        double beta, ct_tensor *c) {
    SAME_KIND(c, a);
    SAME_KIND(c, b);
    CT_ASSERT(a->ndim >= 2 && b->ndim >= 2 && c->ndim >= 2);
    CT_ASSERT(a->dtype == b->dtype && a->dtype == c->dtype);
    const int64_t ar = a->shape[a->ndim - 2], ac = a->shape[a->ndim - 1];
    const int64_t br = b->shape[b->ndim - 2], bc = b->shape[b->ndim - 1];
    const int64_t cr = c->shape[c->ndim - 2], cc = c->shape[c->ndim - 1];
    const int64_t count = ct_tensor_numel(c) / (cr * cc > 0 ? cr * cc : 1);
    CT_ASSERT(ar * ac * count == ct_tensor_numel(a) && br * bc * count == ct_tensor_numel(b));
    CT_ASSERT((trans_a ? ar : ac) == (trans_b ? bc : br) && cr == (trans_a ? ac : ar) && cc == (trans_b ? br : bc));
    if (backend_of(c, "gemm_batched")->gemm_batched) {
        CALL(c, gemm_batched, trans_a, trans_b, alpha, a, b, beta, c);
        return;
    }
    /* a backend without the kernel: one GEMM per matrix, on views of each */
    const size_t es = ct_dtype_size(c->dtype);
    for (int64_t i = 0; i < count; i++) {
        ct_tensor ai = ct_tensor_view((char *)a->data + (size_t)(i * ar * ac) * es, a->dtype, a->device, 2,
                                      (int64_t[]){ar, ac});
        ct_tensor bi = ct_tensor_view((char *)b->data + (size_t)(i * br * bc) * es, b->dtype, b->device, 2,
                                      (int64_t[]){br, bc});
        ct_tensor ci = ct_tensor_view((char *)c->data + (size_t)(i * cr * cc) * es, c->dtype, c->device, 2,
                                      (int64_t[]){cr, cc});
        ct_op_gemm(trans_a, trans_b, alpha, &ai, &bi, beta, &ci);
    }
}

void ct_op_fill(ct_tensor *t, double value) { CALL(t, fill, t, value); }

void ct_op_copy(ct_tensor *dst, const ct_tensor *src) {
    SAME_KIND(dst, src);
    CT_ASSERT(dst->dtype == src->dtype && ct_tensor_numel(dst) == ct_tensor_numel(src));
    CALL(dst, copy, dst, src);
}

void ct_op_add(const ct_tensor *a, const ct_tensor *b, ct_tensor *out) {
    SAME_KIND(out, a);
    SAME_KIND(out, b);
    int64_t n = ct_tensor_numel(out);
    CT_ASSERT(ct_tensor_numel(a) == n && ct_tensor_numel(b) == n && a->dtype == out->dtype && b->dtype == out->dtype);
    CALL(out, add, a, b, out);
}

void ct_op_axpy(double alpha, const ct_tensor *x, ct_tensor *y) {
    SAME_KIND(y, x);
    CT_ASSERT(ct_tensor_numel(x) == ct_tensor_numel(y) && x->dtype == y->dtype);
    CALL(y, axpy, alpha, x, y);
}

void ct_op_scale(ct_tensor *t, double s) { CALL(t, scale, t, s); }

bool ct_op_all_finite(const ct_tensor *t) { CALL_RETURN(t, all_finite, t); }

void ct_op_bias_add(ct_tensor *y, const ct_tensor *bias, int64_t inner) {
    SAME_KIND(y, bias);
    int64_t c = ct_tensor_numel(bias);
    CT_ASSERT(c > 0 && inner > 0 && ct_tensor_numel(y) % (c * inner) == 0 && y->dtype == bias->dtype);
    CALL(y, bias_add, y, bias, inner);
}

void ct_op_linear_forward(const ct_tensor *x, const ct_tensor *weight, const ct_tensor *bias, ct_activation act,
                          ct_tensor *pre, ct_tensor *y) {
    SAME_KIND(y, x);
    SAME_KIND(y, weight);
    SAME_KIND(y, bias);
    SAME_KIND(y, pre);
    CT_ASSERT(x->ndim == 2 && weight->ndim == 2 && y->ndim == 2);
    CT_ASSERT(x->dtype == y->dtype && weight->dtype == y->dtype && (!bias || bias->dtype == y->dtype));
    CT_ASSERT(x->shape[1] == weight->shape[1] && y->shape[0] == x->shape[0] && y->shape[1] == weight->shape[0]);
    CT_ASSERT(!bias || ct_tensor_numel(bias) == weight->shape[0]);
    CT_ASSERT(act == CT_ACT_NONE || act == CT_ACT_RELU || act == CT_ACT_GELU_TANH);
    CT_ASSERT((act == CT_ACT_GELU_TANH) == (pre != NULL));
    CT_ASSERT(!pre || (pre->ndim == 2 && pre->shape[0] == y->shape[0] && pre->shape[1] == y->shape[1] &&
                       pre->dtype == y->dtype && pre->data != y->data));
    if (backend_of(y, "linear_forward")->linear_forward) {
        CALL(y, linear_forward, x, weight, bias, act, pre, y);
        return;
    }
    /* a backend without the kernel: the same values in three passes */
    ct_tensor *z = pre ? pre : y;
    ct_op_gemm(false, true, 1.0, x, weight, 0.0, z);
    if (bias) ct_op_bias_add(z, bias, 1);
    if (act != CT_ACT_NONE) ct_op_activation_forward(act, z, y);
}

void ct_op_linear_backward(const ct_tensor *dy, const ct_tensor *x, const ct_tensor *weight, ct_tensor *dweight,
                           ct_tensor *dbias, ct_tensor *dx) {
    SAME_KIND(dy, x);
    SAME_KIND(dy, weight);
    SAME_KIND(dy, dweight);
    SAME_KIND(dy, dbias);
    SAME_KIND(dy, dx);
    CT_ASSERT(dy->ndim == 2 && x->ndim == 2 && weight->ndim == 2 && dweight->ndim == 2);
    CT_ASSERT(x->dtype == dy->dtype && weight->dtype == dy->dtype && dweight->dtype == dy->dtype);
    CT_ASSERT(x->shape[0] == dy->shape[0] && weight->shape[0] == dy->shape[1] && weight->shape[1] == x->shape[1]);
    CT_ASSERT(dweight->shape[0] == weight->shape[0] && dweight->shape[1] == weight->shape[1]);
    CT_ASSERT(!dbias || (ct_tensor_numel(dbias) == dy->shape[1] && dbias->dtype == dy->dtype));
    CT_ASSERT(!dx || (dx->ndim == 2 && dx->shape[0] == x->shape[0] && dx->shape[1] == x->shape[1] &&
                      dx->dtype == dy->dtype));
    if (backend_of(dy, "linear_backward")->linear_backward) {
        CALL(dy, linear_backward, dy, x, weight, dweight, dbias, dx);
        return;
    }
    /* a backend without the kernel: the same values in three ops */
    ct_op_gemm(true, false, 1.0, dy, x, 1.0, dweight);
    if (dbias) ct_op_bias_grad(dy, dbias, 1);
    if (dx) ct_op_gemm(false, false, 1.0, dy, weight, 0.0, dx);
}

void ct_op_bias_grad(const ct_tensor *dy, ct_tensor *dbias, int64_t inner) {
    SAME_KIND(dy, dbias);
    int64_t c = ct_tensor_numel(dbias);
    CT_ASSERT(c > 0 && inner > 0 && ct_tensor_numel(dy) % (c * inner) == 0 && dy->dtype == dbias->dtype);
    CALL(dy, bias_grad, dy, dbias, inner);
}

void ct_op_activation_forward(ct_activation act, const ct_tensor *x, ct_tensor *y) {
    SAME_KIND(x, y);
    CT_ASSERT(ct_tensor_numel(x) == ct_tensor_numel(y) && x->dtype == y->dtype);
    CALL(x, activation_forward, act, x, y);
}

void ct_op_activation_backward(ct_activation act, const ct_tensor *x, const ct_tensor *y, const ct_tensor *dy,
                               ct_tensor *dx) {
    SAME_KIND(dy, dx);
    SAME_KIND(dy, x);
    SAME_KIND(dy, y);
    CT_ASSERT(ct_tensor_numel(dx) == ct_tensor_numel(dy) && dx->dtype == dy->dtype);
    CALL(dy, activation_backward, act, x, y, dy, dx);
}

/* --- convolution and pooling (ops_conv.h) ------------------------------------------------------ */

/* The shapes every conv op relies on. */
static void check_conv(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight, const ct_tensor *y) {
    SAME_KIND(x, weight);
    SAME_KIND(x, y);
    CT_ASSERT(x->ndim == 4 && x->shape[1] == g->in_channels && x->shape[2] == g->in_h && x->shape[3] == g->in_w);
    CT_ASSERT(y->ndim == 4 && y->shape[0] == x->shape[0] && y->shape[1] == g->out_channels &&
              y->shape[2] == g->out_h && y->shape[3] == g->out_w);
    CT_ASSERT(ct_tensor_numel(weight) == g->out_channels * g->in_channels * g->kernel[0] * g->kernel[1]);
    CT_ASSERT(weight->dtype == x->dtype && y->dtype == x->dtype);
    CT_ASSERT(g->stride[0] >= 1 && g->stride[1] >= 1 && g->dilation[0] >= 1 && g->dilation[1] >= 1);
    CT_ASSERT(g->out_h == ct_conv_out_size(g->in_h, g->kernel[0], g->stride[0], g->padding[0], g->dilation[0]) &&
              g->out_w == ct_conv_out_size(g->in_w, g->kernel[1], g->stride[1], g->padding[1], g->dilation[1]));
}

static void check_conv_bias(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *bias) {
    SAME_KIND(x, bias);
    CT_ASSERT(!bias || (ct_tensor_numel(bias) == g->out_channels && bias->dtype == x->dtype));
}

/* The shapes of a fused pooling's output and indices. */
static void check_pooled(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *y, const ct_tensor *indices) {
    SAME_KIND(x, y);
    SAME_KIND(x, indices);
    CT_ASSERT(g->relu && g->pool2x2);
    CT_ASSERT(y->ndim == 4 && y->shape[0] == x->shape[0] && y->shape[1] == g->out_channels &&
              y->shape[2] == g->out_h / 2 && y->shape[3] == g->out_w / 2 && y->dtype == x->dtype);
    CT_ASSERT(indices->dtype == CT_I32 && ct_shape_eq(indices, y));
    CT_ASSERT(g->out_h * g->out_w <= INT32_MAX);
}

/* The checks all backward entries share (dy: the gradient of the un-pooled output). */
static void check_conv_backward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                                const ct_tensor *dy, const ct_tensor *dweight, const ct_tensor *dbias,
                                const ct_tensor *dx) {
    check_conv(g, x, weight, dy);
    SAME_KIND(x, dweight);
    SAME_KIND(x, dbias);
    SAME_KIND(x, dx);
    CT_ASSERT(!dweight || (ct_tensor_numel(dweight) == ct_tensor_numel(weight) && dweight->dtype == x->dtype));
    CT_ASSERT(!dbias || (ct_tensor_numel(dbias) == g->out_channels && dbias->dtype == x->dtype));
    CT_ASSERT(!dx || (ct_shape_eq(dx, x) && dx->dtype == x->dtype));
}

void ct_op_conv2d_forward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                          const ct_tensor *bias, ct_tensor *y, ct_tensor *ws) {
    CT_ASSERT(!g->pool2x2);
    check_conv(g, x, weight, y);
    check_conv_bias(g, x, bias);
    CALL(x, conv2d_forward, g, x, weight, bias, y, ws);
}

void ct_op_conv2d_backward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                           const ct_tensor *dy, ct_tensor *dweight, ct_tensor *dbias, ct_tensor *dx, ct_tensor *ws) {
    CT_ASSERT(!g->relu && !g->pool2x2);
    check_conv_backward(g, x, weight, dy, dweight, dbias, dx);
    CALL(x, conv2d_backward, g, x, weight, dy, dweight, dbias, dx, ws);
}

void ct_op_conv2d_relu_backward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                                const ct_tensor *y, const ct_tensor *dy, ct_tensor *dweight, ct_tensor *dbias,
                                ct_tensor *dx, ct_tensor *ws) {
    CT_ASSERT(g->relu && !g->pool2x2);
    check_conv_backward(g, x, weight, dy, dweight, dbias, dx);
    SAME_KIND(x, y);
    CT_ASSERT(ct_shape_eq(y, dy) && y->dtype == dy->dtype);
    CALL(x, conv2d_relu_backward, g, x, weight, y, dy, dweight, dbias, dx, ws);
}

void ct_op_conv2d_relu_pool_forward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                                    const ct_tensor *bias, ct_tensor *y, ct_tensor *indices, ct_tensor *ws) {
    check_pooled(g, x, y, indices);
    /* the convolution's own checks, against its un-pooled output shape */
    int64_t yshape[4] = {x->shape[0], g->out_channels, g->out_h, g->out_w};
    ct_tensor yfull = ct_tensor_view(NULL, y->dtype, y->device, 4, yshape);
    check_conv(g, x, weight, &yfull);
    check_conv_bias(g, x, bias);
    CALL(x, conv2d_relu_pool_forward, g, x, weight, bias, y, indices, ws);
}

void ct_op_conv2d_relu_pool_backward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                                     const ct_tensor *y, const ct_tensor *indices, const ct_tensor *dy,
                                     ct_tensor *dweight, ct_tensor *dbias, ct_tensor *dx, ct_tensor *ws) {
    check_pooled(g, x, y, indices);
    SAME_KIND(x, dy);
    CT_ASSERT(ct_shape_eq(y, dy) && y->dtype == dy->dtype);
    int64_t yshape[4] = {x->shape[0], g->out_channels, g->out_h, g->out_w};
    ct_tensor dyfull = ct_tensor_view(NULL, dy->dtype, dy->device, 4, yshape);
    check_conv_backward(g, x, weight, &dyfull, dweight, dbias, dx);
    CALL(x, conv2d_relu_pool_backward, g, x, weight, y, indices, dy, dweight, dbias, dx, ws);
}

/* The shapes every pooling op relies on (in: the input or its gradient, out: the output's). */
static void check_pool(const ct_pool2d_geom *g, const ct_tensor *in, const ct_tensor *out) {
    SAME_KIND(in, out);
    CT_ASSERT(in->ndim == 4 && in->shape[1] == g->channels && in->shape[2] == g->in_h && in->shape[3] == g->in_w);
    CT_ASSERT(out->ndim == 4 && out->shape[0] == in->shape[0] && out->shape[1] == g->channels &&
              out->shape[2] == g->out_h && out->shape[3] == g->out_w);
    CT_ASSERT(in->dtype == out->dtype);
    CT_ASSERT(g->stride[0] >= 1 && g->stride[1] >= 1 && g->dilation[0] >= 1 && g->dilation[1] >= 1);
}

/* Indices are positions within one input plane, in int32 (the layer rejects larger planes). */
static void check_indices(const ct_pool2d_geom *g, const ct_tensor *indices, const ct_tensor *out) {
    SAME_KIND(out, indices);
    CT_ASSERT(indices->dtype == CT_I32 && ct_tensor_numel(indices) == ct_tensor_numel(out));
    CT_ASSERT(g->in_h * g->in_w <= INT32_MAX);
}

void ct_op_maxpool2d_forward(const ct_pool2d_geom *g, const ct_tensor *x, ct_tensor *y, ct_tensor *indices) {
    check_pool(g, x, y);
    check_indices(g, indices, y);
    CALL(x, maxpool2d_forward, g, x, y, indices);
}

void ct_op_maxpool2d_backward(const ct_pool2d_geom *g, const ct_tensor *dy, const ct_tensor *indices, ct_tensor *dx) {
    check_pool(g, dx, dy);
    check_indices(g, indices, dy);
    CALL(dy, maxpool2d_backward, g, dy, indices, dx);
}

void ct_op_avgpool2d_forward(const ct_pool2d_geom *g, const ct_tensor *x, ct_tensor *y) {
    check_pool(g, x, y);
    CALL(x, avgpool2d_forward, g, x, y);
}

void ct_op_avgpool2d_backward(const ct_pool2d_geom *g, const ct_tensor *dy, ct_tensor *dx) {
    check_pool(g, dx, dy);
    CALL(dy, avgpool2d_backward, g, dy, dx);
}

/* --- losses (ops_loss.h) ----------------------------------------------------------------------- */

/* The cross-entropy contract: logits [rows, C], one target per row, class weights of C doubles. */
static void check_xent(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o) {
    SAME_KIND(logits, target);
    SAME_KIND(logits, o->weight);
    CT_ASSERT(logits->ndim >= 1 && (target->dtype == CT_I64 || target->dtype == CT_I32));
    int64_t c = logits->shape[logits->ndim - 1];
    CT_ASSERT(c > 0);
    CT_ASSERT(ct_tensor_numel(target) == ct_tensor_numel(logits) / c);
    CT_ASSERT(!o->weight || (o->weight->dtype == CT_F64 && ct_tensor_numel(o->weight) == c));
}

int64_t ct_op_cross_entropy_forward(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o,
                                    double *sum, double *count) {
    check_xent(logits, target, o);
    CALL_RETURN(logits, cross_entropy_forward, logits, target, o, sum, count);
}

int64_t ct_op_cross_entropy_rows(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o,
                                 double *loss, double *count) {
    check_xent(logits, target, o);
    if (backend_of(logits, "cross_entropy_rows")->cross_entropy_rows)
        CALL_RETURN(logits, cross_entropy_rows, logits, target, o, loss, count);
    /* a backend without the kernel: its forward on each row, which is what the kernel must match */
    int64_t c = logits->shape[logits->ndim - 1], rows = ct_tensor_numel(logits) / c, one[2] = {1, c};
    size_t zrow = (size_t)c * ct_dtype_size(logits->dtype), trow = ct_dtype_size(target->dtype);
    for (int64_t r = 0; r < rows; r++) {
        ct_tensor z = ct_tensor_view((char *)logits->data + (size_t)r * zrow, logits->dtype, logits->device, 2, one);
        ct_tensor y = ct_tensor_view((char *)target->data + (size_t)r * trow, target->dtype, target->device, 1, one);
        if (ct_op_cross_entropy_forward(&z, &y, o, &loss[r], &count[r]) >= 0) return r;
    }
    return -1;
}

/* A host copy of t (aborting, naming the op, when it cannot be had: ops do not fail). */
static ct_tensor host_copy_or_abort(const ct_tensor *t, const char *op) {
    ct_tensor h = {0};
    if (ct_tensor_alloc(&h, t->dtype, CT_CPU, t->ndim, t->shape) != CT_OK || ct_tensor_copy_to(&h, t) != CT_OK)
        ct_abort_at(__FILE__, __LINE__, "%s: cannot copy a tensor to the host: %s", op, ct_last_error());
    return h;
}

void ct_op_token_values(const ct_tensor *logits, const ct_tensor *labels, double *nll, double *hit) {
    SAME_KIND(logits, labels);
    CT_ASSERT(logits->ndim >= 1 && (logits->dtype == CT_F32 || logits->dtype == CT_F64));
    CT_ASSERT(labels->dtype == CT_I64 || labels->dtype == CT_I32);
    int64_t c = logits->shape[logits->ndim - 1];
    CT_ASSERT(c > 0 && ct_tensor_numel(labels) == ct_tensor_numel(logits) / c);
    if (backend_of(logits, "token_values")->token_values) {
        CALL(logits, token_values, logits, labels, nll, hit);
        return;
    }
    /* a backend without the kernel: the CPU's on host copies (what the kernel must match); called
     * through the CPU's table itself, so a CPU table without it aborts naming the op, not recurses */
    ct_tensor z = host_copy_or_abort(logits, "token_values"), y = host_copy_or_abort(labels, "token_values");
    CALL(&z, token_values, &z, &y, nll, hit);
    ct_tensor_free(&z);
    ct_tensor_free(&y);
}

void ct_op_class_ranks(const ct_tensor *scores, const ct_tensor *labels, int64_t *pred, int64_t *above) {
    SAME_KIND(scores, labels);
    CT_ASSERT(scores->ndim == 2 && (scores->dtype == CT_F32 || scores->dtype == CT_F64));
    CT_ASSERT(labels->dtype == CT_I64 || labels->dtype == CT_I32);
    CT_ASSERT(scores->shape[1] > 0 && scores->shape[1] <= INT32_MAX && ct_tensor_numel(labels) == scores->shape[0]);
    if (backend_of(scores, "class_ranks")->class_ranks) {
        CALL(scores, class_ranks, scores, labels, pred, above);
        return;
    }
    /* a backend without the kernel: the CPU's on host copies, through the CPU's table itself */
    ct_tensor s = host_copy_or_abort(scores, "class_ranks"), y = host_copy_or_abort(labels, "class_ranks");
    CALL(&s, class_ranks, &s, &y, pred, above);
    ct_tensor_free(&s);
    ct_tensor_free(&y);
}

int64_t ct_op_cross_entropy_backward(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o,
                                     double scale, ct_tensor *dlogits) {
    check_xent(logits, target, o);
    SAME_KIND(logits, dlogits);
    CT_ASSERT(dlogits->dtype == logits->dtype && ct_tensor_numel(dlogits) == ct_tensor_numel(logits));
    CALL_RETURN(logits, cross_entropy_backward, logits, target, o, scale, dlogits);
}

int64_t ct_op_fused_classifier(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o,
                               double scale, double *sum, double *count, ct_tensor *dlogits) {
    check_xent(logits, target, o);
    SAME_KIND(logits, dlogits);
    CT_ASSERT(dlogits->dtype == logits->dtype && ct_tensor_numel(dlogits) == ct_tensor_numel(logits));
    CALL_RETURN(logits, fused_classifier, logits, target, o, scale, sum, count, dlogits);
}

/* Prediction and target alike; pos_weight of length 1 or the last dimension of pred. */
static void check_pointwise(const ct_pointwise_opts *o, const ct_tensor *pred, const ct_tensor *target) {
    SAME_KIND(pred, target);
    CT_ASSERT(ct_tensor_numel(target) == ct_tensor_numel(pred) && target->dtype == pred->dtype);
    if (!o || !o->pos_weight) return;
    SAME_KIND(pred, o->pos_weight);
    CT_ASSERT(o->pos_weight->dtype == CT_F64);
    int64_t npw = ct_tensor_numel(o->pos_weight);
    CT_ASSERT(npw == 1 || (pred->ndim >= 1 && npw == pred->shape[pred->ndim - 1]));
}

double ct_op_pointwise_loss_forward(ct_pointwise_loss kind, const ct_pointwise_opts *o, const ct_tensor *pred,
                                    const ct_tensor *target) {
    check_pointwise(o, pred, target);
    CALL_RETURN(pred, pointwise_loss_forward, kind, o, pred, target);
}

void ct_op_pointwise_loss_rows(ct_pointwise_loss kind, const ct_pointwise_opts *o, const ct_tensor *pred,
                               const ct_tensor *target, double *loss) {
    check_pointwise(o, pred, target);
    CT_ASSERT(pred->ndim >= 1);
    if (backend_of(pred, "pointwise_loss_rows")->pointwise_loss_rows) {
        CALL(pred, pointwise_loss_rows, kind, o, pred, target, loss);
        return;
    }
    /* a backend without the kernel: the CPU's on host copies (what the kernel must match), through
     * the CPU's table itself */
    const char *op = "pointwise_loss_rows";
    ct_tensor x = host_copy_or_abort(pred, op), y = host_copy_or_abort(target, op), w = {0};
    ct_pointwise_opts ho = o ? *o : (ct_pointwise_opts){.delta = 1.0};
    if (o && o->pos_weight) {
        w = host_copy_or_abort(o->pos_weight, op);
        ho.pos_weight = &w;
    }
    CALL(&x, pointwise_loss_rows, kind, &ho, &x, &y, loss);
    ct_tensor_free(&x);
    ct_tensor_free(&y);
    ct_tensor_free(&w);
}

void ct_op_pointwise_loss_backward(ct_pointwise_loss kind, const ct_pointwise_opts *o, const ct_tensor *pred,
                                   const ct_tensor *target, double scale, ct_tensor *dpred) {
    check_pointwise(o, pred, target);
    SAME_KIND(pred, dpred);
    CT_ASSERT(ct_tensor_numel(dpred) == ct_tensor_numel(pred) && dpred->dtype == pred->dtype);
    CALL(pred, pointwise_loss_backward, kind, o, pred, target, scale, dpred);
}

/* --- dropout and embedding (ops_misc.h) -------------------------------------------------------- */

void ct_op_dropout_forward(const ct_tensor *x, double p, const ct_dropout_ctx *ctx, ct_tensor *mask, ct_tensor *y) {
    SAME_KIND(x, mask);
    SAME_KIND(x, y);
    int64_t n = ct_tensor_numel(x);
    CT_ASSERT(p >= 0.0 && p <= 1.0 && x->ndim >= 1 && x->shape[0] > 0);
    CT_ASSERT(y->dtype == x->dtype && ct_tensor_numel(y) == n);
    CT_ASSERT(mask->dtype == CT_U8 && ct_tensor_numel(mask) == n);
    CALL(x, dropout_forward, x, p, ctx, mask, y);
}

void ct_op_dropout_backward(const ct_tensor *dy, const ct_tensor *mask, double p, ct_tensor *dx) {
    SAME_KIND(dy, mask);
    SAME_KIND(dy, dx);
    int64_t n = ct_tensor_numel(dy);
    CT_ASSERT(p >= 0.0 && p <= 1.0);
    CT_ASSERT(dx->dtype == dy->dtype && ct_tensor_numel(dx) == n);
    CT_ASSERT(mask->dtype == CT_U8 && ct_tensor_numel(mask) == n);
    CALL(dy, dropout_backward, dy, mask, p, dx);
}

int64_t ct_op_embedding_find_invalid(const ct_tensor *ids, int64_t num_embeddings) {
    CT_ASSERT(ids->dtype == CT_I64);
    CALL_RETURN(ids, embedding_find_invalid, ids, num_embeddings);
}

void ct_op_embedding_forward(const ct_tensor *ids, const ct_tensor *weight, ct_tensor *y) {
    SAME_KIND(ids, weight);
    SAME_KIND(ids, y);
    CT_ASSERT(ids->dtype == CT_I64 && weight->ndim == 2 && y->dtype == weight->dtype);
    CT_ASSERT(ct_tensor_numel(y) == ct_tensor_numel(ids) * weight->shape[1]);
    CALL(ids, embedding_forward, ids, weight, y);
}

void ct_op_embedding_backward(const ct_tensor *ids, const ct_tensor *dy, int64_t padding_idx, ct_tensor *dweight) {
    SAME_KIND(ids, dy);
    SAME_KIND(ids, dweight);
    CT_ASSERT(ids->dtype == CT_I64 && dweight->ndim == 2 && dy->dtype == dweight->dtype);
    CT_ASSERT(ct_tensor_numel(dy) == ct_tensor_numel(ids) * dweight->shape[1]);
    CALL(ids, embedding_backward, ids, dy, padding_idx, dweight);
}

/* --- attention (ops_attn.h) -------------------------------------------------------------------- */

/* The shared shape checks of split and merge: t3 is [B, T, W], t4 is [B, H, T, D]. */
static void check_heads(const ct_tensor *t3, const ct_tensor *t4, int64_t offset) {
    SAME_KIND(t3, t4);
    CT_ASSERT(t3->ndim == 3 && t4->ndim == 4 && t3->dtype == t4->dtype);
    CT_ASSERT(t3->shape[0] == t4->shape[0] && t3->shape[1] == t4->shape[2]);
    CT_ASSERT(offset >= 0 && offset + t4->shape[1] * t4->shape[3] <= t3->shape[2]);
}

void ct_op_heads_split(const ct_tensor *x, int64_t offset, ct_tensor *out) {
    check_heads(x, out, offset);
    CALL(x, heads_split, x, offset, out);
}

void ct_op_heads_merge(const ct_tensor *x, int64_t offset, ct_tensor *out) {
    check_heads(out, x, offset);
    CALL(x, heads_merge, x, offset, out);
}

/* Scores viewed as [N, Tq, Tk] with Tk >= Tq >= 1. */
static void check_scores(const ct_tensor *t) {
    CT_ASSERT(t->ndim >= 2);
    CT_ASSERT(t->shape[t->ndim - 2] >= 1 && t->shape[t->ndim - 1] >= t->shape[t->ndim - 2]);
}

void ct_op_causal_softmax_forward(const ct_tensor *x, ct_tensor *y) {
    SAME_KIND(x, y);
    check_scores(x);
    CT_ASSERT(y->dtype == x->dtype && ct_tensor_numel(y) == ct_tensor_numel(x));
    CALL(x, causal_softmax_forward, x, y);
}

void ct_op_causal_softmax_backward(const ct_tensor *y, const ct_tensor *dy, ct_tensor *dx) {
    SAME_KIND(y, dy);
    SAME_KIND(y, dx);
    check_scores(y);
    CT_ASSERT(dy->dtype == y->dtype && dx->dtype == y->dtype);
    CT_ASSERT(ct_tensor_numel(dy) == ct_tensor_numel(y) && ct_tensor_numel(dx) == ct_tensor_numel(y));
    CALL(y, causal_softmax_backward, y, dy, dx);
}

/* qkv [B, T, 3C] with C a multiple of n_head, lse [B, H, T], a [B, T, C] tensor (y or dy), and a
 * workspace of their kind and dtype. */
static void check_attention(const ct_tensor *qkv, int64_t n_head, const ct_tensor *lse, const ct_tensor *y,
                            const ct_tensor *ws) {
    SAME_KIND(qkv, lse);
    SAME_KIND(qkv, y);
    SAME_KIND(qkv, ws);
    CT_ASSERT(qkv->ndim == 3 && lse->ndim == 3 && y->ndim == 3 && n_head >= 1);
    CT_ASSERT(lse->dtype == qkv->dtype && y->dtype == qkv->dtype && ws->dtype == qkv->dtype);
    const int64_t B = qkv->shape[0], T = qkv->shape[1], C = qkv->shape[2] / 3;
    CT_ASSERT(qkv->shape[2] == 3 * C && C % n_head == 0 && C > 0 && C / n_head <= CT_FUSED_ATTENTION_MAX_HEAD_DIM);
    CT_ASSERT(lse->shape[0] == B && lse->shape[1] == n_head && lse->shape[2] == T);
    CT_ASSERT(y->shape[0] == B && y->shape[1] == T && y->shape[2] == C);
}

void ct_op_causal_attention_forward(const ct_tensor *qkv, int64_t n_head, ct_tensor *lse, ct_tensor *y,
                                    ct_tensor *ws) {
    check_attention(qkv, n_head, lse, y, ws);
    CALL(qkv, causal_attention_forward, qkv, n_head, lse, y, ws);
}

void ct_op_causal_attention_backward(const ct_tensor *qkv, int64_t n_head, const ct_tensor *y,
                                     const ct_tensor *lse, const ct_tensor *dy, ct_tensor *dqkv, ct_tensor *ws) {
    check_attention(qkv, n_head, lse, dy, ws);
    CT_ASSERT(y->ndim == 3 && y->dtype == qkv->dtype);
    SAME_KIND(qkv, y);
    SAME_KIND(qkv, dqkv);
    CT_ASSERT(dqkv->dtype == qkv->dtype && dqkv->ndim == 3);
    for (int i = 0; i < 3; i++) CT_ASSERT(dqkv->shape[i] == qkv->shape[i] && y->shape[i] == dy->shape[i]);
    CALL(qkv, causal_attention_backward, qkv, n_head, y, lse, dy, dqkv, ws);
}

/* --- normalisation (ops_norm.h) ---------------------------------------------------------------- */

/* Saved statistics: float64, at least n of each. */
static void check_stats(const ct_tensor *x, const ct_tensor *mean, const ct_tensor *rstd, int64_t n) {
    SAME_KIND(x, mean);
    SAME_KIND(x, rstd);
    CT_ASSERT(mean->dtype == CT_F64 && rstd->dtype == CT_F64);
    CT_ASSERT(ct_tensor_numel(mean) >= n && ct_tensor_numel(rstd) >= n);
}

/* x viewed as [N, C, inner]. */
static void check_bn_input(const ct_tensor *x, int64_t c) {
    int64_t total = ct_tensor_numel(x), n = x->ndim >= 1 ? x->shape[0] : 0;
    CT_ASSERT(x->ndim >= 2 && c > 0 && n > 0 && x->shape[1] == c && total % (n * c) == 0);
}

void ct_op_batchnorm_forward(const ct_tensor *x, const ct_tensor *weight, const ct_tensor *bias,
                             ct_tensor *running_mean, ct_tensor *running_var, bool training, double momentum,
                             double eps, ct_tensor *y, ct_tensor *save_mean, ct_tensor *save_rstd) {
    SAME_KIND(x, weight);
    SAME_KIND(x, bias);
    SAME_KIND(x, running_mean);
    SAME_KIND(x, running_var);
    SAME_KIND(x, y);
    int64_t c = ct_tensor_numel(running_mean), total = ct_tensor_numel(x);
    check_bn_input(x, c);
    CT_ASSERT(y->dtype == x->dtype && ct_tensor_numel(y) == total && y->data != x->data);
    CT_ASSERT(running_var->dtype == x->dtype && running_mean->dtype == x->dtype && ct_tensor_numel(running_var) == c);
    check_stats(x, save_mean, save_rstd, c);
    CT_ASSERT(ct_tensor_numel(save_mean) == c && ct_tensor_numel(save_rstd) == c);
    CT_ASSERT(!training || total / c > 1);
    CALL(x, batchnorm_forward, x, weight, bias, running_mean, running_var, training, momentum, eps, y, save_mean,
         save_rstd);
}

void ct_op_batchnorm_backward(const ct_tensor *x, const ct_tensor *dy, const ct_tensor *weight,
                              const ct_tensor *save_mean, const ct_tensor *save_rstd, bool training, ct_tensor *dx,
                              ct_tensor *dweight, ct_tensor *dbias) {
    SAME_KIND(x, dy);
    SAME_KIND(x, weight);
    SAME_KIND(x, dx);
    SAME_KIND(x, dweight);
    SAME_KIND(x, dbias);
    int64_t c = ct_tensor_numel(save_mean), total = ct_tensor_numel(x);
    check_bn_input(x, c);
    CT_ASSERT(dy->dtype == x->dtype && ct_tensor_numel(dy) == total);
    CT_ASSERT(!dx || (dx->dtype == x->dtype && ct_tensor_numel(dx) == total));
    check_stats(x, save_mean, save_rstd, c);
    CT_ASSERT(ct_tensor_numel(save_rstd) == c);
    CALL(x, batchnorm_backward, x, dy, weight, save_mean, save_rstd, training, dx, dweight, dbias);
}

void ct_op_layernorm_forward(const ct_tensor *x, const ct_tensor *residual, const ct_tensor *weight,
                             const ct_tensor *bias, double eps, ct_tensor *sum, ct_tensor *y, ct_tensor *save_mean,
                             ct_tensor *save_rstd) {
    SAME_KIND(x, weight);
    SAME_KIND(x, bias);
    SAME_KIND(x, y);
    SAME_KIND(x, residual);
    SAME_KIND(x, sum);
    CT_ASSERT(x->ndim >= 1);
    int64_t f = x->shape[x->ndim - 1], total = ct_tensor_numel(x);
    CT_ASSERT(f > 0 && y->dtype == x->dtype && ct_tensor_numel(y) == total);
    CT_ASSERT(!residual == !sum);
    CT_ASSERT(!residual || (residual->dtype == x->dtype && ct_tensor_numel(residual) == total &&
                            sum->dtype == x->dtype && ct_tensor_numel(sum) == total && sum->data != y->data));
    check_stats(x, save_mean, save_rstd, total / f);
    CALL(x, layernorm_forward, x, residual, weight, bias, eps, sum, y, save_mean, save_rstd);
}

void ct_op_layernorm_backward(const ct_tensor *x, const ct_tensor *dy, const ct_tensor *weight,
                              const ct_tensor *save_mean, const ct_tensor *save_rstd, const ct_tensor *dresidual,
                              ct_tensor *dx, ct_tensor *dweight, ct_tensor *dbias) {
    SAME_KIND(x, dy);
    SAME_KIND(x, weight);
    SAME_KIND(x, dx);
    SAME_KIND(x, dweight);
    SAME_KIND(x, dbias);
    SAME_KIND(x, dresidual);
    CT_ASSERT(x->ndim >= 1);
    int64_t f = x->shape[x->ndim - 1], total = ct_tensor_numel(x);
    CT_ASSERT(f > 0 && dy->dtype == x->dtype && ct_tensor_numel(dy) == total);
    CT_ASSERT(!dx || (dx->dtype == x->dtype && ct_tensor_numel(dx) == total));
    CT_ASSERT(!dresidual || (dx && dresidual->dtype == x->dtype && ct_tensor_numel(dresidual) == total));
    check_stats(x, save_mean, save_rstd, total / f);
    CALL(x, layernorm_backward, x, dy, weight, save_mean, save_rstd, dresidual, dx, dweight, dbias);
}

/* --- optimizer updates and norms (ops_optim.h) ------------------------------------------------- */

/* The views an update is given must be one range of equally laid out buffers. */
static void check_same(const ct_tensor *a, const ct_tensor *b) {
    CT_ASSERT(b->device.kind == a->device.kind && b->dtype == a->dtype && ct_tensor_numel(b) == ct_tensor_numel(a));
}

void ct_op_sgd_step(ct_tensor *param, ct_tensor *grad, ct_tensor *momentum_buffer, const ct_sgd_args *a) {
    check_same(param, grad);
    if (momentum_buffer) check_same(param, momentum_buffer);
    CT_ASSERT((momentum_buffer != NULL) == (a->momentum != 0));
    CALL(param, sgd_step, param, grad, momentum_buffer, a);
}

void ct_op_adam_step(ct_tensor *param, ct_tensor *grad, ct_tensor *exp_avg, ct_tensor *exp_avg_sq,
                     ct_tensor *max_exp_avg_sq, const ct_adam_args *a) {
    check_same(param, grad);
    check_same(param, exp_avg);
    check_same(param, exp_avg_sq);
    if (max_exp_avg_sq) check_same(param, max_exp_avg_sq);
    CT_ASSERT((max_exp_avg_sq != NULL) == a->amsgrad && a->step >= 1);
    CALL(param, adam_step, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, a);
}

double ct_op_sum_squares_det(const ct_tensor *t) { CALL_RETURN(t, sum_squares_det, t); }

double ct_op_l2_norm(const ct_tensor *t) { CALL_RETURN(t, l2_norm, t); }

/* --- the step's statistics on the device (ops_optim.h, core/ops/step_rule.h) -------------------- */

bool ct_op_step_stats_supported(ct_device d) {
    const ct_backend_ops *b = ct_backend_for_kind(d.kind);
    return b && b->scale_by && b->l2_norm_into && b->step_rule && b->fused_classifier_acc && b->pointwise_loss_acc;
}

/* The block: CT_STEP_SLOTS float64 on `ref`'s device, a slot inside it. */
static void check_step_block(const ct_tensor *ref, const ct_tensor *stats, int slot) {
    SAME_KIND(ref, stats);
    CT_ASSERT(stats->dtype == CT_F64 && ct_tensor_numel(stats) == CT_STEP_SLOTS && slot >= 0 && slot < CT_STEP_SLOTS);
}

void ct_op_scale_by(ct_tensor *t, const ct_tensor *stats, int slot) {
    check_step_block(t, stats, slot);
    CALL(t, scale_by, t, stats, slot);
}

void ct_op_l2_norm_into(const ct_tensor *t, ct_tensor *stats, int slot) {
    check_step_block(t, stats, slot);
    CALL(t, l2_norm_into, t, stats, slot);
}

void ct_op_step_rule(ct_tensor *stats, const ct_step_rule *rule) {
    check_step_block(stats, stats, 0);
    CALL(stats, step_rule, stats, rule);
}

void ct_op_fused_classifier_acc(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o,
                                double scale, ct_tensor *dlogits, ct_tensor *stats) {
    check_xent(logits, target, o);
    SAME_KIND(logits, dlogits);
    CT_ASSERT(dlogits->dtype == logits->dtype && ct_tensor_numel(dlogits) == ct_tensor_numel(logits));
    check_step_block(logits, stats, 0);
    CALL(logits, fused_classifier_acc, logits, target, o, scale, dlogits, stats);
}

void ct_op_pointwise_loss_acc(ct_pointwise_loss kind, const ct_pointwise_opts *o, const ct_tensor *pred,
                              const ct_tensor *target, ct_tensor *stats) {
    check_pointwise(o, pred, target);
    check_step_block(pred, stats, 0);
    CALL(pred, pointwise_loss_acc, kind, o, pred, target, stats);
}
