/* Elementwise ops, bias and activations on the GPU: the twins of backends/cpu/elementwise.c (see
 * core/ops/ops.h for the contract). Each kernel is the CPU loop body run once per element over a
 * grid-stride loop, with the same arithmetic in the same order and the same precision (activations
 * other than relu evaluate in double and round once, as the CPU does), so float32 results agree with
 * the CPU's to the last bit or so. The float multiply-adds that GCC fuses on targets with FMA (axpy,
 * tanh's 1 - y * y) are explicit fused multiply-adds here, so nvcc cannot round them differently. bias_grad is a deterministic reduction: one block per channel,
 * each thread summing a fixed subset in double, then a fixed tree; no atomics. */
#include <cstdint>
#include <cstring>

#include "backends/cuda/cuda_handles.h"
#include "backends/cuda/ops_cuda.h"

/* Every index i in [0, n) once, whatever the grid (ct_cuda_blocks caps it). */
#define GRID_LOOP(i, n)                                                                            \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

static void check_gpu(const ct_tensor *t) { CT_ASSERT(t->device.kind == CT_DEVICE_CUDA); }

/* --- fill, copy, add, axpy, scale ---------------------------------------------------------------- */

template <typename T> __global__ void fill_k(T *t, int64_t n, T v) {
    GRID_LOOP(i, n) t[i] = v;
}

template <typename T> static void fill_launch(void *t, int64_t n, T v) {
    fill_k<T><<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, ct_cuda_stream_t()>>>((T *)t, n, v);
    CT_CUDA_LAUNCHED();
}

extern "C" void ct_cuda_op_fill(ct_tensor *t, double value) {
    check_gpu(t);
    int64_t n = ct_tensor_numel(t);
    if (n == 0) return;
    if (value == 0.0) { /* +0 of every dtype is all zero bytes */
        CT_CUDA_CHECK(cudaMemsetAsync(t->data, 0, ct_tensor_nbytes(t), ct_cuda_stream_t()));
        return;
    }
    /* The conversions of ct_tensor_set, so a GPU tensor holds what a CPU one would. */
    switch (t->dtype) {
    case CT_F32: fill_launch<float>(t->data, n, (float)value); break;
    case CT_F64: fill_launch<double>(t->data, n, value); break;
    case CT_I32: fill_launch<int32_t>(t->data, n, (int32_t)value); break;
    case CT_I64: fill_launch<int64_t>(t->data, n, (int64_t)value); break;
    case CT_U8: fill_launch<uint8_t>(t->data, n, (uint8_t)value); break;
    case CT_BF16: {
        float f = (float)value;
        uint32_t bits;
        memcpy(&bits, &f, sizeof bits);
        bits += 0x7FFF + ((bits >> 16) & 1); /* round to nearest even */
        fill_launch<uint16_t>(t->data, n, (uint16_t)(bits >> 16));
        break;
    }
    default: ct_abort_at(__FILE__, __LINE__, "fill: unsupported dtype %s", ct_dtype_name(t->dtype));
    }
}

extern "C" void ct_cuda_op_copy(ct_tensor *dst, const ct_tensor *src) {
    check_gpu(dst);
    check_gpu(src);
    CT_ASSERT(dst->dtype == src->dtype && ct_tensor_numel(dst) == ct_tensor_numel(src));
    if (dst->data == src->data) return;
    size_t nb = ct_tensor_nbytes(src);
    /* cudaMemcpy has no memmove semantics: partly overlapping views would be a caller's bug. */
    const char *d = (const char *)dst->data, *s = (const char *)src->data;
    CT_ASSERT(d + nb <= s || s + nb <= d);
    if (nb) CT_CUDA_CHECK(cudaMemcpyAsync(dst->data, src->data, nb, cudaMemcpyDeviceToDevice, ct_cuda_stream_t()));
}

template <typename R> __global__ void add_k(const R *a, const R *b, R *out, int64_t n) {
    GRID_LOOP(i, n) out[i] = a[i] + b[i];
}

/* y + alpha * x rounded once, as GCC contracts the CPU loop on targets with FMA. */
__device__ static inline float fmadd(float a, float b, float c) { return fmaf(a, b, c); }
__device__ static inline double fmadd(double a, double b, double c) { return fma(a, b, c); }

template <typename R> __global__ void axpy_k(R alpha, const R *x, R *y, int64_t n) {
    GRID_LOOP(i, n) y[i] = fmadd(alpha, x[i], y[i]);
}

template <typename R> __global__ void scale_k(R *t, int64_t n, R s) {
    GRID_LOOP(i, n) t[i] *= s;
}

extern "C" void ct_cuda_op_add(const ct_tensor *a, const ct_tensor *b, ct_tensor *out) {
    check_gpu(a);
    check_gpu(b);
    check_gpu(out);
    int64_t n = ct_tensor_numel(out);
    CT_ASSERT(ct_tensor_numel(a) == n && ct_tensor_numel(b) == n && a->dtype == out->dtype && b->dtype == out->dtype);
    if (n == 0) return;
    cudaStream_t st = ct_cuda_stream_t();
    if (out->dtype == CT_F32)
        add_k<float><<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, st>>>((const float *)a->data, (const float *)b->data,
                                                                    (float *)out->data, n);
    else if (out->dtype == CT_F64)
        add_k<double><<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, st>>>((const double *)a->data,
                                                                     (const double *)b->data, (double *)out->data, n);
    else
        ct_abort_at(__FILE__, __LINE__, "add: unsupported dtype %s", ct_dtype_name(out->dtype));
    CT_CUDA_LAUNCHED();
}

extern "C" void ct_cuda_op_axpy(double alpha, const ct_tensor *x, ct_tensor *y) {
    check_gpu(x);
    check_gpu(y);
    int64_t n = ct_tensor_numel(y);
    CT_ASSERT(ct_tensor_numel(x) == n && x->dtype == y->dtype);
    if (n == 0) return;
    cudaStream_t st = ct_cuda_stream_t();
    /* alpha rounded to the element type once, as the CPU kernel's R parameter does. */
    if (y->dtype == CT_F32)
        axpy_k<float><<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, st>>>((float)alpha, (const float *)x->data,
                                                                     (float *)y->data, n);
    else if (y->dtype == CT_F64)
        axpy_k<double><<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, st>>>(alpha, (const double *)x->data,
                                                                      (double *)y->data, n);
    else
        ct_abort_at(__FILE__, __LINE__, "axpy: unsupported dtype %s", ct_dtype_name(y->dtype));
    CT_CUDA_LAUNCHED();
}

extern "C" void ct_cuda_op_scale(ct_tensor *t, double s) {
    check_gpu(t);
    int64_t n = ct_tensor_numel(t);
    if (n == 0) return;
    cudaStream_t st = ct_cuda_stream_t();
    if (t->dtype == CT_F32)
        scale_k<float><<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, st>>>((float *)t->data, n, (float)s);
    else if (t->dtype == CT_F64)
        scale_k<double><<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, st>>>((double *)t->data, n, s);
    else
        ct_abort_at(__FILE__, __LINE__, "scale: unsupported dtype %s", ct_dtype_name(t->dtype));
    CT_CUDA_LAUNCHED();
}

/* --- all_finite ----------------------------------------------------------------------------------- */

/* Any thread that sees a non-finite element sets the flag; they all write the same value, so the
 * race is harmless and the answer does not depend on which thread wins. */
template <typename R> __global__ void all_finite_k(const R *t, int64_t n, int *bad) {
    bool found = false;
    GRID_LOOP(i, n) found |= !isfinite(t[i]);
    if (found) *bad = 1;
}

extern "C" bool ct_cuda_op_all_finite(const ct_tensor *t) {
    check_gpu(t);
    int64_t n = ct_tensor_numel(t);
    if (n == 0) return true;
    cudaStream_t st = ct_cuda_stream_t();
    int *bad = (int *)ct_cuda_workspace(sizeof(int));
    CT_CUDA_CHECK(cudaMemsetAsync(bad, 0, sizeof(int), st));
    if (t->dtype == CT_F32)
        all_finite_k<float><<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, st>>>((const float *)t->data, n, bad);
    else if (t->dtype == CT_F64)
        all_finite_k<double><<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, st>>>((const double *)t->data, n, bad);
    else
        ct_abort_at(__FILE__, __LINE__, "all_finite: unsupported dtype %s", ct_dtype_name(t->dtype));
    CT_CUDA_LAUNCHED();
    int host = 0;
    /* Waits for the kernel: the one place this op touches the host. */
    if (ct_cuda_memcpy(&host, CT_CPU, bad, t->device, sizeof host) != CT_OK)
        ct_abort_at(__FILE__, __LINE__, "all_finite: %s", ct_last_error());
    return host == 0;
}

/* --- bias ------------------------------------------------------------------------------------------ */

/* y viewed as [rows, c, inner]: element i belongs to channel (i / inner) % c. */
template <typename R> __global__ void bias_add_k(R *y, const R *bias, int64_t n, int64_t c, int64_t inner) {
    GRID_LOOP(i, n) y[i] += bias[(i / inner) % c];
}

/* One block per channel j (grid-stride over channels): thread t sums, in double and in increasing
 * order, the elements t, t + 256, ... of the channel's rows * inner values (row-major over (row,
 * position)); the 256 partial sums are then added by a fixed binary tree. The result depends only on
 * the shape, never on timing. */
template <typename R> __global__ void bias_grad_k(const R *dy, R *db, int64_t rows, int64_t c, int64_t inner) {
    __shared__ double part[CT_CUDA_THREADS];
    const int64_t per = rows * inner;
    const int tid = threadIdx.x;
    for (int64_t j = blockIdx.x; j < c; j += gridDim.x) {
        double acc = 0.0;
        for (int64_t e = tid; e < per; e += CT_CUDA_THREADS) {
            int64_t r = e / inner, s = e - r * inner;
            acc += (double)dy[(r * c + j) * inner + s];
        }
        part[tid] = acc;
        __syncthreads();
        for (int w = CT_CUDA_THREADS / 2; w > 0; w >>= 1) {
            if (tid < w) part[tid] += part[tid + w];
            __syncthreads();
        }
        if (tid == 0) db[j] += (R)part[0];
        __syncthreads(); /* part[0] is read before the next channel overwrites it */
    }
}

extern "C" void ct_cuda_op_bias_add(ct_tensor *y, const ct_tensor *bias, int64_t inner) {
    check_gpu(y);
    check_gpu(bias);
    int64_t c = ct_tensor_numel(bias), n = ct_tensor_numel(y);
    CT_ASSERT(c > 0 && inner > 0 && n % (c * inner) == 0 && y->dtype == bias->dtype);
    if (n == 0) return;
    cudaStream_t st = ct_cuda_stream_t();
    if (y->dtype == CT_F32)
        bias_add_k<float><<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, st>>>((float *)y->data,
                                                                         (const float *)bias->data, n, c, inner);
    else if (y->dtype == CT_F64)
        bias_add_k<double><<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, st>>>((double *)y->data,
                                                                          (const double *)bias->data, n, c, inner);
    else
        ct_abort_at(__FILE__, __LINE__, "bias_add: unsupported dtype %s", ct_dtype_name(y->dtype));
    CT_CUDA_LAUNCHED();
}

extern "C" void ct_cuda_op_bias_grad(const ct_tensor *dy, ct_tensor *dbias, int64_t inner) {
    check_gpu(dy);
    check_gpu(dbias);
    int64_t c = ct_tensor_numel(dbias), n = ct_tensor_numel(dy);
    CT_ASSERT(c > 0 && inner > 0 && n % (c * inner) == 0 && dy->dtype == dbias->dtype);
    int64_t rows = n / (c * inner);
    if (rows == 0) return; /* an empty sum adds nothing */
    unsigned grid = (unsigned)(c < 65535 * 8 ? c : 65535 * 8);
    cudaStream_t st = ct_cuda_stream_t();
    if (dy->dtype == CT_F32)
        bias_grad_k<float><<<grid, CT_CUDA_THREADS, 0, st>>>((const float *)dy->data, (float *)dbias->data, rows, c,
                                                             inner);
    else if (dy->dtype == CT_F64)
        bias_grad_k<double><<<grid, CT_CUDA_THREADS, 0, st>>>((const double *)dy->data, (double *)dbias->data, rows,
                                                              c, inner);
    else
        ct_abort_at(__FILE__, __LINE__, "bias_grad: unsupported dtype %s", ct_dtype_name(dy->dtype));
    CT_CUDA_LAUNCHED();
}

/* --- activations ----------------------------------------------------------------------------------- */

/* The formulas of backends/cpu/elementwise_tmpl.h, element by element. */
template <typename R> __global__ void act_fwd_k(ct_activation act, const R *x, R *y, int64_t n) {
    GRID_LOOP(i, n) {
        switch (act) {
        case CT_ACT_NONE: y[i] = x[i]; break;
        case CT_ACT_RELU: y[i] = x[i] < 0 ? (R)0 : x[i]; break;
        case CT_ACT_GELU: {
            double v = x[i];
            y[i] = (R)(0.5 * v * (1.0 + erf(v * M_SQRT1_2)));
            break;
        }
        case CT_ACT_GELU_TANH: {
            double v = x[i];
            double inner = sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v);
            y[i] = (R)(0.5 * v * (1.0 + tanh(inner)));
            break;
        }
        case CT_ACT_TANH: y[i] = (R)tanh((double)x[i]); break;
        case CT_ACT_SIGMOID: {
            /* Split by sign so exp never overflows. */
            double v = x[i];
            y[i] = (R)(v >= 0 ? 1.0 / (1.0 + exp(-v)) : exp(v) / (1.0 + exp(v)));
            break;
        }
        }
    }
}

/* relu, tanh and sigmoid read y; the gelus read x (the other may be NULL). */
template <typename R>
__global__ void act_bwd_k(ct_activation act, const R *x, const R *y, const R *dy, R *dx, int64_t n) {
    GRID_LOOP(i, n) {
        switch (act) {
        case CT_ACT_NONE: dx[i] = dy[i]; break;
        case CT_ACT_RELU: dx[i] = y[i] <= 0 ? (R)0 : dy[i]; break;
        case CT_ACT_GELU: {
            double v = x[i];
            double cdf = 0.5 * (1.0 + erf(v * M_SQRT1_2));
            double pdf = exp(-0.5 * v * v) * (0.5 * M_2_SQRTPI * M_SQRT1_2);
            dx[i] = (R)(dy[i] * (cdf + v * pdf));
            break;
        }
        case CT_ACT_GELU_TANH: {
            double v = x[i];
            double k = sqrt(2.0 / M_PI);
            double inner = k * (v + 0.044715 * v * v * v);
            double t = tanh(inner);
            double dinner = k * (1.0 + 3.0 * 0.044715 * v * v);
            dx[i] = (R)(dy[i] * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * dinner));
            break;
        }
        case CT_ACT_TANH: dx[i] = dy[i] * fmadd(-y[i], y[i], (R)1); break; /* dy * (1 - y * y), fused as on the CPU */
        case CT_ACT_SIGMOID: dx[i] = dy[i] * y[i] * (1 - y[i]); break;
        }
    }
}

static bool known_activation(ct_activation act) {
    return act == CT_ACT_NONE || act == CT_ACT_RELU || act == CT_ACT_GELU || act == CT_ACT_GELU_TANH ||
           act == CT_ACT_TANH || act == CT_ACT_SIGMOID;
}

extern "C" void ct_cuda_op_activation_forward(ct_activation act, const ct_tensor *x, ct_tensor *y) {
    check_gpu(x);
    check_gpu(y);
    int64_t n = ct_tensor_numel(x);
    CT_ASSERT(ct_tensor_numel(y) == n && x->dtype == y->dtype && known_activation(act));
    if (n == 0) return;
    if (act == CT_ACT_NONE) {
        ct_cuda_op_copy(y, x);
        return;
    }
    cudaStream_t st = ct_cuda_stream_t();
    if (x->dtype == CT_F32)
        act_fwd_k<float><<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, st>>>(act, (const float *)x->data,
                                                                        (float *)y->data, n);
    else if (x->dtype == CT_F64)
        act_fwd_k<double><<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, st>>>(act, (const double *)x->data,
                                                                         (double *)y->data, n);
    else
        ct_abort_at(__FILE__, __LINE__, "activation %d: unsupported dtype %s", (int)act, ct_dtype_name(x->dtype));
    CT_CUDA_LAUNCHED();
}

extern "C" void ct_cuda_op_activation_backward(ct_activation act, const ct_tensor *x, const ct_tensor *y,
                                               const ct_tensor *dy, ct_tensor *dx) {
    check_gpu(dy);
    check_gpu(dx);
    int64_t n = ct_tensor_numel(dy);
    CT_ASSERT(ct_tensor_numel(dx) == n && dx->dtype == dy->dtype && known_activation(act));
    /* The tensor the derivative is computed from must be there (and match). */
    const ct_tensor *need = act == CT_ACT_GELU || act == CT_ACT_GELU_TANH ? x : act == CT_ACT_NONE ? dy : y;
    CT_ASSERT(need != NULL);
    check_gpu(need);
    CT_ASSERT(ct_tensor_numel(need) == n && need->dtype == dy->dtype);
    if (n == 0) return;
    if (act == CT_ACT_NONE) {
        ct_cuda_op_copy(dx, dy);
        return;
    }
    const void *xd = x ? x->data : NULL, *yd = y ? y->data : NULL;
    cudaStream_t st = ct_cuda_stream_t();
    if (dy->dtype == CT_F32)
        act_bwd_k<float><<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, st>>>(
            act, (const float *)xd, (const float *)yd, (const float *)dy->data, (float *)dx->data, n);
    else if (dy->dtype == CT_F64)
        act_bwd_k<double><<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, st>>>(
            act, (const double *)xd, (const double *)yd, (const double *)dy->data, (double *)dx->data, n);
    else
        ct_abort_at(__FILE__, __LINE__, "activation %d: unsupported dtype %s", (int)act, ct_dtype_name(dy->dtype));
    CT_CUDA_LAUNCHED();
}
