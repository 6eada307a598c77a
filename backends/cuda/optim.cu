/* Optimizer updates and the deterministic gradient norm on the GPU: the twins of backends/cpu/optim.c
 * (see core/ops/ops_optim.h for the contract).
 *
 * The updates are the loop bodies of backends/cpu/optim_tmpl.h run once per element: the scalar
 * coefficients are rounded to the element type on the host by the same expressions, and each element
 * goes through the same operations in the same order. Every a * b + c is an explicit fused
 * multiply-add, placed where GCC contracts the CPU loops when the target has FMA (checked: a copy of
 * optim_tmpl.h with these fmaf calls gives the same bits as GCC -O3 -march=native), so nvcc cannot
 * choose another contraction and the GPU gives the CPU's bits on such builds; on a CPU build
 * without FMA the two differ by the rounding of the fused products.
 *
 * The sum of squares is deterministic: the tensor is cut into fixed chunks of SQ_CHUNK elements;
 * in a chunk, thread t sums (in double, in increasing order) elements t, t + 256, ..., and a fixed
 * binary tree adds the 256 partial sums; a second kernel adds the chunk sums the same way. The
 * decomposition depends only on the element count, so the result never depends on timing or grid
 * size. It differs from the CPU's (another fixed order) by float64 rounding only. */
#include <cmath>
#include <cstdint>

#include "backends/cuda/cuda_handles.h"
#include "backends/cuda/ops_cuda.h"

#define GRID_LOOP(i, n)                                                                            \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* The CPU's RSQRT: sqrtf for float (correctly rounded without --use_fast_math), sqrt for double. */
__device__ static inline float root(float v) { return sqrtf(v); }
__device__ static inline double root(double v) { return sqrt(v); }
/* a * b + c rounded once. */
__device__ static inline float fmadd(float a, float b, float c) { return fmaf(a, b, c); }
__device__ static inline double fmadd(double a, double b, double c) { return fma(a, b, c); }

/* Same device, dtype and element count: the views of one range of equally laid out buffers. */
static void check_same(const ct_tensor *a, const ct_tensor *b) {
    CT_ASSERT(b->device.kind == a->device.kind && b->dtype == a->dtype && ct_tensor_numel(b) == ct_tensor_numel(a));
}

/* --- SGD ----------------------------------------------------------------------------------------- */

template <typename R> struct sgd_coef {
    R lr, wd, mom, keep;
    bool decay, nesterov, first, clear;
};

/* A closed gate (ops_optim.h: *gate == 0) skips the update; the gradient is still cleared. */
__device__ static inline bool gated_off(const double *gate) { return gate && *gate == 0.0; }

template <typename R> __global__ void sgd_k(R *p, R *g, R *buf, int64_t n, sgd_coef<R> c, const double *gate) {
    const bool off = gated_off(gate);
    GRID_LOOP(i, n) {
        /* d = g + wd * p;  b = buf * mom + keep * d;  d = d + mom * b;  p = p - lr * d */
        R d = g[i];
        if (c.clear) g[i] = 0;
        if (off) continue;
        if (c.decay) d = fmadd(c.wd, p[i], d);
        if (buf) {
            R b = c.first ? d : fmadd(buf[i], c.mom, c.keep * d);
            buf[i] = b;
            d = c.nesterov ? fmadd(c.mom, b, d) : b;
        }
        p[i] = fmadd(-c.lr, d, p[i]);
    }
}

template <typename R> static void sgd_launch(void *p, void *g, void *buf, int64_t n, const ct_sgd_args *a) {
    sgd_coef<R> c;
    c.lr = (R)a->lr;
    c.wd = (R)a->weight_decay;
    c.mom = (R)a->momentum;
    c.keep = (R)(1.0 - a->dampening);
    c.decay = a->weight_decay != 0;
    c.nesterov = a->nesterov;
    c.first = a->first_step;
    c.clear = a->clear_grad;
    sgd_k<R><<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, ct_cuda_stream_t()>>>((R *)p, (R *)g, (R *)buf, n, c, a->gate);
    CT_CUDA_LAUNCHED();
}

extern "C" void ct_cuda_op_sgd_step(ct_tensor *param, ct_tensor *grad, ct_tensor *momentum_buffer,
                                    const ct_sgd_args *a) {
    CT_ASSERT(param->device.kind == CT_DEVICE_CUDA);
    check_same(param, grad);
    if (momentum_buffer) check_same(param, momentum_buffer);
    CT_ASSERT((momentum_buffer != NULL) == (a->momentum != 0));
    int64_t n = ct_tensor_numel(param);
    if (n == 0) return;
    void *buf = momentum_buffer ? momentum_buffer->data : NULL;
    if (param->dtype == CT_F32)
        sgd_launch<float>(param->data, grad->data, buf, n, a);
    else if (param->dtype == CT_F64)
        sgd_launch<double>(param->data, grad->data, buf, n, a);
    else
        ct_abort_at(__FILE__, __LINE__, "sgd: unsupported dtype %s", ct_dtype_name(param->dtype));
}

/* --- Adam / AdamW -------------------------------------------------------------------------------- */

template <typename R> struct adam_coef {
    R b1, b2, one_b1, one_b2, wd, shrink, eps, step_size, bc2_sqrt;
    bool l2, decoupled, clear;
};

template <typename R>
__global__ void adam_k(R *p, R *g, R *m, R *v, R *vmax, int64_t n, adam_coef<R> c, const double *gate) {
    const bool off = gated_off(gate);
    GRID_LOOP(i, n) {
        /* g = g + wd * p;  m = m * b1 + (1 - b1) * g;  v = v * b2 + (1 - b2) * g * g */
        R gi = g[i], pi = p[i];
        if (c.clear) g[i] = 0;
        if (off) continue;
        if (c.l2) gi = fmadd(c.wd, pi, gi);
        if (c.decoupled) pi = pi * c.shrink;
        R mi = fmadd(m[i], c.b1, c.one_b1 * gi);
        R vi = fmadd(v[i], c.b2, c.one_b2 * gi * gi);
        m[i] = mi;
        v[i] = vi;
        R second = vi;
        if (vmax) {
            /* torch.maximum: NaN wins, and a NaN already kept stays. */
            R old = vmax[i];
            second = (vi > old || vi != vi) ? vi : old;
            vmax[i] = second;
        }
        R denom = root(second) / c.bc2_sqrt + c.eps;
        p[i] = fmadd(-c.step_size, mi / denom, pi); /* p + (-step_size) * (m / denom) */
    }
}

template <typename R>
static void adam_launch(void *p, void *g, void *m, void *v, void *vmax, int64_t n, const ct_adam_args *a) {
    adam_coef<R> c;
    c.b1 = (R)a->beta1;
    c.b2 = (R)a->beta2;
    c.one_b1 = (R)(1.0 - a->beta1);
    c.one_b2 = (R)(1.0 - a->beta2);
    c.wd = (R)a->weight_decay;
    c.shrink = (R)(1.0 - a->lr * a->weight_decay);
    c.eps = (R)a->eps;
    /* The bias corrections as PyTorch computes them: Python floats, then one rounding to R. */
    const double bc1 = 1.0 - pow(a->beta1, (double)a->step), bc2 = 1.0 - pow(a->beta2, (double)a->step);
    c.step_size = (R)(a->lr / bc1);
    c.bc2_sqrt = (R)sqrt(bc2);
    c.l2 = !a->decoupled_decay && a->weight_decay != 0;
    c.decoupled = a->decoupled_decay && a->weight_decay != 0;
    c.clear = a->clear_grad;
    adam_k<R><<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, ct_cuda_stream_t()>>>((R *)p, (R *)g, (R *)m, (R *)v,
                                                                            (R *)vmax, n, c, a->gate);
    CT_CUDA_LAUNCHED();
}

extern "C" void ct_cuda_op_adam_step(ct_tensor *param, ct_tensor *grad, ct_tensor *exp_avg,
                                     ct_tensor *exp_avg_sq, ct_tensor *max_exp_avg_sq, const ct_adam_args *a) {
    CT_ASSERT(param->device.kind == CT_DEVICE_CUDA);
    check_same(param, grad);
    check_same(param, exp_avg);
    check_same(param, exp_avg_sq);
    if (max_exp_avg_sq) check_same(param, max_exp_avg_sq);
    CT_ASSERT((max_exp_avg_sq != NULL) == a->amsgrad && a->step >= 1);
    int64_t n = ct_tensor_numel(param);
    if (n == 0) return;
    void *vmax = max_exp_avg_sq ? max_exp_avg_sq->data : NULL;
    if (param->dtype == CT_F32)
        adam_launch<float>(param->data, grad->data, exp_avg->data, exp_avg_sq->data, vmax, n, a);
    else if (param->dtype == CT_F64)
        adam_launch<double>(param->data, grad->data, exp_avg->data, exp_avg_sq->data, vmax, n, a);
    else
        ct_abort_at(__FILE__, __LINE__, "adam: unsupported dtype %s", ct_dtype_name(param->dtype));
}

/* --- sum of squares, max |x|, L2 norm ------------------------------------------------------------ */

#define SQ_THREADS 256 /* a power of two: the tree below halves it */
#define SQ_PER_THREAD 16
#define SQ_CHUNK (SQ_THREADS * SQ_PER_THREAD)

/* Adds the SQ_THREADS values of s by a fixed binary tree into s[0] (all threads of the block call it). */
__device__ static void tree_sum(double *s) {
    for (int w = SQ_THREADS / 2; w > 0; w >>= 1) {
        __syncthreads();
        if ((int)threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    }
    __syncthreads();
}

/* part[c] = sum over chunk c of (x * inv_scale)^2, for every chunk (grid-stride over chunks). */
template <typename R>
__global__ void sumsq_chunks_k(const R *x, int64_t n, double inv_scale, int64_t chunks, double *part) {
    __shared__ double s[SQ_THREADS];
    for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
        const int64_t base = c * SQ_CHUNK;
        double acc = 0.0;
        for (int k = 0; k < SQ_PER_THREAD; k++) {
            int64_t i = base + (int64_t)k * SQ_THREADS + threadIdx.x;
            if (i < n) {
                double e = (double)x[i] * inv_scale;
                acc += e * e;
            }
        }
        s[threadIdx.x] = acc;
        tree_sum(s);
        if (threadIdx.x == 0) part[c] = s[0];
        __syncthreads(); /* s[0] is read before the next chunk overwrites s */
    }
}

/* *out = sum of part[0..m), one block: thread t adds part[t], part[t + 256], ... in order, then the tree. */
__global__ void sum_parts_k(const double *part, int64_t m, double *out) {
    __shared__ double s[SQ_THREADS];
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < m; i += SQ_THREADS) acc += part[i];
    s[threadIdx.x] = acc;
    tree_sum(s);
    if (threadIdx.x == 0) *out = s[0];
}

/* Largest |x| per chunk (NaNs ignored, as the CPU's `e > best` does); max is exact, so any order
 * gives the same value. */
template <typename R> __global__ void max_abs_chunks_k(const R *x, int64_t n, int64_t chunks, double *part) {
    __shared__ double s[SQ_THREADS];
    for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
        const int64_t base = c * SQ_CHUNK;
        double best = 0.0;
        for (int k = 0; k < SQ_PER_THREAD; k++) {
            int64_t i = base + (int64_t)k * SQ_THREADS + threadIdx.x;
            if (i < n) {
                double e = fabs((double)x[i]);
                if (e > best) best = e;
            }
        }
        s[threadIdx.x] = best;
        for (int w = SQ_THREADS / 2; w > 0; w >>= 1) {
            __syncthreads();
            if ((int)threadIdx.x < w && s[threadIdx.x + w] > s[threadIdx.x]) s[threadIdx.x] = s[threadIdx.x + w];
        }
        __syncthreads();
        if (threadIdx.x == 0) part[c] = s[0];
        __syncthreads();
    }
}

__global__ void max_parts_k(const double *part, int64_t m, double *out) {
    __shared__ double s[SQ_THREADS];
    double best = 0.0;
    for (int64_t i = threadIdx.x; i < m; i += SQ_THREADS)
        if (part[i] > best) best = part[i];
    s[threadIdx.x] = best;
    for (int w = SQ_THREADS / 2; w > 0; w >>= 1) {
        __syncthreads();
        if ((int)threadIdx.x < w && s[threadIdx.x + w] > s[threadIdx.x]) s[threadIdx.x] = s[threadIdx.x + w];
    }
    __syncthreads();
    if (threadIdx.x == 0) *out = s[0];
}

/* Copies the one double the final kernel left at *d to the host (waits for the stream). */
static double fetch(const double *d, ct_device dev) {
    double host = 0.0;
    if (ct_cuda_memcpy(&host, CT_CPU, d, dev, sizeof host) != CT_OK)
        ct_abort_at(__FILE__, __LINE__, "sum of squares: %s", ct_last_error());
    return host;
}

static int64_t chunk_count(int64_t n) { return (n + SQ_CHUNK - 1) / SQ_CHUNK; }
static unsigned chunk_grid(int64_t chunks) { return (unsigned)(chunks < 65535 * 8 ? chunks : 65535 * 8); }

static double sumsq_scaled(const ct_tensor *t, double inv_scale) {
    int64_t n = ct_tensor_numel(t);
    if (n == 0) return 0.0;
    int64_t chunks = chunk_count(n);
    /* Workspace: the chunk sums, then the total. */
    double *part = (double *)ct_cuda_workspace((size_t)(chunks + 1) * sizeof(double));
    cudaStream_t st = ct_cuda_stream_t();
    if (t->dtype == CT_F32)
        sumsq_chunks_k<float><<<chunk_grid(chunks), SQ_THREADS, 0, st>>>((const float *)t->data, n, inv_scale,
                                                                         chunks, part);
    else if (t->dtype == CT_F64)
        sumsq_chunks_k<double><<<chunk_grid(chunks), SQ_THREADS, 0, st>>>((const double *)t->data, n, inv_scale,
                                                                          chunks, part);
    else
        ct_abort_at(__FILE__, __LINE__, "sum of squares: unsupported dtype %s", ct_dtype_name(t->dtype));
    CT_CUDA_LAUNCHED();
    sum_parts_k<<<1, SQ_THREADS, 0, st>>>(part, chunks, part + chunks);
    CT_CUDA_LAUNCHED();
    return fetch(part + chunks, t->device);
}

static double max_abs(const ct_tensor *t) {
    int64_t n = ct_tensor_numel(t);
    if (n == 0) return 0.0;
    int64_t chunks = chunk_count(n);
    double *part = (double *)ct_cuda_workspace((size_t)(chunks + 1) * sizeof(double));
    cudaStream_t st = ct_cuda_stream_t();
    if (t->dtype == CT_F32)
        max_abs_chunks_k<float><<<chunk_grid(chunks), SQ_THREADS, 0, st>>>((const float *)t->data, n, chunks, part);
    else
        max_abs_chunks_k<double><<<chunk_grid(chunks), SQ_THREADS, 0, st>>>((const double *)t->data, n, chunks,
                                                                            part);
    CT_CUDA_LAUNCHED();
    max_parts_k<<<1, SQ_THREADS, 0, st>>>(part, chunks, part + chunks);
    CT_CUDA_LAUNCHED();
    return fetch(part + chunks, t->device);
}

extern "C" double ct_cuda_op_sum_squares_det(const ct_tensor *t) {
    CT_ASSERT(t->device.kind == CT_DEVICE_CUDA);
    return sumsq_scaled(t, 1.0);
}

extern "C" double ct_cuda_op_l2_norm(const ct_tensor *t) {
    CT_ASSERT(t->device.kind == CT_DEVICE_CUDA);
    double ss = sumsq_scaled(t, 1.0);
    if (!std::isinf(ss)) return sqrt(ss);
    /* inf: either an infinite element (the norm is inf) or finite squares that overflowed. */
    double big = max_abs(t);
    if (std::isinf(big)) return INFINITY;
    return big * sqrt(sumsq_scaled(t, 1.0 / big));
}

/* --- the step's statistics (core/ops/step_rule.h): the block in device memory, no waits ----------- */

template <typename R> __global__ void scale_by_k(R *t, int64_t n, const double *s) {
    const R f = (R)*s; /* the factor ct_cuda_op_scale would round to R */
    GRID_LOOP(i, n) t[i] *= f;
}

extern "C" void ct_cuda_op_scale_by(ct_tensor *t, const ct_tensor *stats, int slot) {
    CT_ASSERT(t->device.kind == CT_DEVICE_CUDA && stats->device.index == t->device.index);
    int64_t n = ct_tensor_numel(t);
    if (n == 0) return;
    const double *s = (const double *)stats->data + slot;
    cudaStream_t st = ct_cuda_stream_t();
    if (t->dtype == CT_F32)
        scale_by_k<float><<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, st>>>((float *)t->data, n, s);
    else if (t->dtype == CT_F64)
        scale_by_k<double><<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, st>>>((double *)t->data, n, s);
    else
        ct_abort_at(__FILE__, __LINE__, "scale_by: unsupported dtype %s", ct_dtype_name(t->dtype));
    CT_CUDA_LAUNCHED();
}

__global__ void sqrt_into_k(const double *ss, double *out) { *out = sqrt(*ss); }

/* float32 squares cannot overflow the float64 sum, so its root is the norm, on the device. A float64
 * tensor may hold finite values whose squares overflow: ct_cuda_op_l2_norm's rescaled second pass
 * decides on the host there (a wait; float64 training is the reference path, not the fast one). */
extern "C" void ct_cuda_op_l2_norm_into(const ct_tensor *t, ct_tensor *stats, int slot) {
    CT_ASSERT(t->device.kind == CT_DEVICE_CUDA && stats->device.index == t->device.index);
    double *out = (double *)stats->data + slot;
    cudaStream_t st = ct_cuda_stream_t();
    int64_t n = ct_tensor_numel(t);
    if (t->dtype == CT_F64 || n == 0) {
        double norm = ct_cuda_op_l2_norm(t);
        if (ct_cuda_memcpy(out, t->device, &norm, CT_CPU, sizeof norm) != CT_OK)
            ct_abort_at(__FILE__, __LINE__, "l2_norm_into: %s", ct_last_error());
        return;
    }
    CT_ASSERT(t->dtype == CT_F32);
    int64_t chunks = chunk_count(n);
    double *part = (double *)ct_cuda_workspace((size_t)(chunks + 1) * sizeof(double));
    sumsq_chunks_k<float><<<chunk_grid(chunks), SQ_THREADS, 0, st>>>((const float *)t->data, n, 1.0, chunks, part);
    CT_CUDA_LAUNCHED();
    sum_parts_k<<<1, SQ_THREADS, 0, st>>>(part, chunks, part + chunks);
    CT_CUDA_LAUNCHED();
    sqrt_into_k<<<1, 1, 0, st>>>(part + chunks, out);
    CT_CUDA_LAUNCHED();
}

__global__ void step_rule_k(double *s, ct_step_rule r) { ct_step_rule_apply(s, &r); }

extern "C" void ct_cuda_op_step_rule(ct_tensor *stats, const ct_step_rule *rule) {
    CT_ASSERT(stats->device.kind == CT_DEVICE_CUDA);
    step_rule_k<<<1, 1, 0, ct_cuda_stream_t()>>>((double *)stats->data, *rule);
    CT_CUDA_LAUNCHED();
}
