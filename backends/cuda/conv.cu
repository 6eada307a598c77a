/* 2-D convolution on CUDA (the twin of backends/cpu/conv.c; contract in core/ops/ops_conv.h): cuDNN's legacy convolution API
 * for the three products, and two small kernels of our own for the bias (added after the convolution, and its
 * gradient summed in double as the CPU does, so dbias agrees with the CPU to the last float bit or so and is
 * deterministic).
 *
 * Algorithms: the first deterministic one cuDNN's heuristics rank for the geometry, among those whose math type the
 * thread's math mode allows (ct_cuda_math_mode): exact float32 needs CUDNN_FMA_MATH, because cuDNN's default math
 * lets float32 convolutions run on TF32 tensor cores on Ampere and newer. Parameter gradients accumulate (beta = 1),
 * input gradients are overwritten (beta = 0).
 *
 * Descriptors and the chosen algorithms are cached per thread, keyed by the whole geometry (batch included), dtype,
 * math mode and device; the cache is small and replaced round-robin.
 *
 * The CPU's im2col workspace (`ws`) is not used here: cuDNN's scratch comes from ct_cuda_workspace. */
#include <cstdint>
#include <cstring>

#include "backends/cuda/block_sum.cuh"
#include "backends/cuda/cuda_handles.h"
#include "backends/cuda/ops_cuda.h"

namespace {

/* Everything that decides the descriptors and the algorithms. */
struct conv_key {
    int64_t dims[13]; /* batch, C, H, W, O, kh, kw, stride h/w, padding h/w, dilation h/w */
    int dtype, math, device;
    bool operator==(const conv_key &o) const {
        return memcmp(dims, o.dims, sizeof dims) == 0 && dtype == o.dtype && math == o.math && device == o.device;
    }
};

struct conv_plan {
    bool used;
    conv_key key;
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    cudnnMathType_t fwd_math, data_math, filter_math; /* the math type each algorithm runs with */
    size_t fwd_ws, data_ws, filter_ws;                /* workspace bytes of each */
};

#define CONV_PLAN_CACHE 64
thread_local conv_plan plans[CONV_PLAN_CACHE];
thread_local int plan_victim;

#define BIAS_GRAD_THREADS 256

/* What the math mode lets a convolution of this dtype use. float64 ignores the mode: it is the reference path, and no
 * math type reduces its precision (TF32 and down-conversion apply to float32 data only; double tensor cores compute
 * in IEEE double), so it takes whatever cuDNN ranks best. */
cudnnMathType_t wanted_math(ct_dtype dt) {
    if (dt == CT_F64) return CUDNN_DEFAULT_MATH;
    switch (ct_cuda_math_mode()) {
    case CT_MATH_F32:
        return CUDNN_FMA_MATH;
    /* TF32 tensor cores (float32 range and a 10-bit mantissa). bf16 mode gets TF32 too: cuDNN's down-conversion of
     * float32 data would be to fp16, whose range bf16 training does not guard. */
    case CT_MATH_TF32:
    case CT_MATH_BF16:
        return CUDNN_DEFAULT_MATH;
    /* fp16 training runs with a loss scaler that catches overflow. */
    case CT_MATH_FP16:
        return CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    }
    return CUDNN_FMA_MATH;
}

/* Whether an algorithm that runs with math type `got` respects the math mode that asked for `want`. */
bool math_ok(cudnnMathType_t got, cudnnMathType_t want) {
    if (got == CUDNN_FMA_MATH) return true; /* plain float arithmetic is always allowed */
    switch (want) {
    case CUDNN_FMA_MATH:
        return false;
    case CUDNN_DEFAULT_MATH:
    case CUDNN_TENSOR_OP_MATH:
        return got == CUDNN_DEFAULT_MATH || got == CUDNN_TENSOR_OP_MATH;
    default:
        return true;
    }
}

int as_int(int64_t v) {
    CT_ASSERT(v >= 0 && v <= INT32_MAX);
    return (int)v;
}

cudnnDataType_t dnn_type(ct_dtype dt) {
    if (dt == CT_F32) return CUDNN_DATA_FLOAT;
    if (dt == CT_F64) return CUDNN_DATA_DOUBLE;
    ct_abort_at(__FILE__, __LINE__, "conv2d (cuda): unsupported dtype %s", ct_dtype_name(dt));
}

/* The three algorithm choices (forward, backward data, backward filter) are one: the first candidate of
 * cuDNN's ranking that works, is deterministic and keeps to the math mode; else `fallback`, which is
 * deterministic and supports every geometry and dtype. rank(count, &n, perf) is the direction's heuristic,
 * size(algo, &bytes) its workspace query (named by size_name when it fails); the choice goes to *algo, *math
 * and *ws. */
template <int COUNT, typename Perf, typename Algo, typename Rank, typename Size>
void choose_algo(cudnnConvolutionDescriptor_t conv, cudnnMathType_t want, Rank rank, Size size, const char *size_name,
                 Algo fallback, Algo *algo, cudnnMathType_t *math, size_t *ws) {
    Perf perf[COUNT];
    int n = 0;
    CT_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, want));
    if (rank(COUNT, &n, perf) != CUDNN_STATUS_SUCCESS) n = 0; /* no ranking for this geometry: the fallback */
    for (int i = 0; i < n; i++) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].determinism != CUDNN_DETERMINISTIC ||
            !math_ok(perf[i].mathType, want))
            continue;
        size_t bytes = 0;
        CT_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, perf[i].mathType));
        if (size(perf[i].algo, &bytes) != CUDNN_STATUS_SUCCESS) continue;
        *algo = perf[i].algo;
        *math = perf[i].mathType;
        *ws = bytes;
        return;
    }
    *algo = fallback;
    *math = want;
    CT_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, want));
    ct_cudnn_check_at(size(fallback, ws), size_name, __FILE__, __LINE__);
}

void choose_fwd(cudnnHandle_t h, conv_plan *p, cudnnMathType_t want) {
    choose_algo<CUDNN_CONVOLUTION_FWD_ALGO_COUNT, cudnnConvolutionFwdAlgoPerf_t>(
        p->conv, want,
        [&](int count, int *n, cudnnConvolutionFwdAlgoPerf_t *perf) {
            return cudnnGetConvolutionForwardAlgorithm_v7(h, p->x, p->w, p->conv, p->y, count, n, perf);
        },
        [&](cudnnConvolutionFwdAlgo_t algo, size_t *bytes) {
            return cudnnGetConvolutionForwardWorkspaceSize(h, p->x, p->w, p->conv, p->y, algo, bytes);
        },
        "cudnnGetConvolutionForwardWorkspaceSize", CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, &p->fwd, &p->fwd_math,
        &p->fwd_ws);
}

void choose_bwd_data(cudnnHandle_t h, conv_plan *p, cudnnMathType_t want) {
    choose_algo<CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, cudnnConvolutionBwdDataAlgoPerf_t>(
        p->conv, want,
        [&](int count, int *n, cudnnConvolutionBwdDataAlgoPerf_t *perf) {
            return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p->w, p->y, p->conv, p->x, count, n, perf);
        },
        [&](cudnnConvolutionBwdDataAlgo_t algo, size_t *bytes) {
            return cudnnGetConvolutionBackwardDataWorkspaceSize(h, p->w, p->y, p->conv, p->x, algo, bytes);
        },
        "cudnnGetConvolutionBackwardDataWorkspaceSize", CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, &p->bwd_data, &p->data_math,
        &p->data_ws);
}

void choose_bwd_filter(cudnnHandle_t h, conv_plan *p, cudnnMathType_t want) {
    choose_algo<CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, cudnnConvolutionBwdFilterAlgoPerf_t>(
        p->conv, want,
        [&](int count, int *n, cudnnConvolutionBwdFilterAlgoPerf_t *perf) {
            return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p->x, p->y, p->conv, p->w, count, n, perf);
        },
        [&](cudnnConvolutionBwdFilterAlgo_t algo, size_t *bytes) {
            return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p->x, p->y, p->conv, p->w, algo, bytes);
        },
        "cudnnGetConvolutionBackwardFilterWorkspaceSize", CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, &p->bwd_filter,
        &p->filter_math, &p->filter_ws);
}

/* The cached plan for this call, made (descriptors set, algorithms chosen) on a miss. */
conv_plan *get_plan(cudnnHandle_t h, const ct_conv2d_geom *g, int64_t batch, ct_dtype dt) {
    cudnnMathType_t want = wanted_math(dt);
    conv_key key;
    memset(&key, 0, sizeof key);
    const int64_t dims[13] = {batch,         g->in_channels, g->in_h,       g->in_w,      g->out_channels,
                              g->kernel[0],  g->kernel[1],   g->stride[0],  g->stride[1], g->padding[0],
                              g->padding[1], g->dilation[0], g->dilation[1]};
    memcpy(key.dims, dims, sizeof dims);
    key.dtype = (int)dt;
    key.math = (int)want;
    key.device = ct_cuda_current_device();
    for (int i = 0; i < CONV_PLAN_CACHE; i++)
        if (plans[i].used && plans[i].key == key) return &plans[i];

    conv_plan *p = &plans[plan_victim];
    plan_victim = (plan_victim + 1) % CONV_PLAN_CACHE;
    if (!p->used) {
        CT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->x));
        CT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->y));
        CT_CUDNN_CHECK(cudnnCreateFilterDescriptor(&p->w));
        CT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&p->conv));
        p->used = true;
    }
    p->key = key;
    const cudnnDataType_t t = dnn_type(dt);
    CT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NCHW, t, as_int(batch), as_int(g->in_channels),
                                              as_int(g->in_h), as_int(g->in_w)));
    CT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NCHW, t, as_int(batch), as_int(g->out_channels),
                                              as_int(g->out_h), as_int(g->out_w)));
    CT_CUDNN_CHECK(cudnnSetFilter4dDescriptor(p->w, t, CUDNN_TENSOR_NCHW, as_int(g->out_channels),
                                              as_int(g->in_channels), as_int(g->kernel[0]), as_int(g->kernel[1])));
    /* PyTorch's convolution is cross-correlation (no kernel flip), like the CPU's im2col. */
    CT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p->conv, as_int(g->padding[0]), as_int(g->padding[1]),
                                                   as_int(g->stride[0]), as_int(g->stride[1]), as_int(g->dilation[0]),
                                                   as_int(g->dilation[1]), CUDNN_CROSS_CORRELATION, t));
    CT_CUDNN_CHECK(cudnnSetConvolutionGroupCount(p->conv, 1));
    choose_fwd(h, p, want);
    choose_bwd_data(h, p, want);
    choose_bwd_filter(h, p, want);
    return p;
}

/* y[b][o][:] += bias[o] */
template <typename T>
__global__ void bias_add_kernel(T *y, const T *bias, int64_t out_channels, int64_t ohw, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] += bias[(i / ohw) % out_channels];
}

/* dbias[o] += sum over samples and positions of dy[b][o][:], in double (one block per channel). */
template <typename T>
__global__ void bias_grad_kernel(const T *dy, T *dbias, int64_t batch, int64_t out_channels, int64_t ohw) {
    __shared__ double shm[BIAS_GRAD_THREADS];
    for (int64_t o = blockIdx.x; o < out_channels; o += gridDim.x) {
        double acc = 0.0;
        for (int64_t i = threadIdx.x; i < batch * ohw; i += BIAS_GRAD_THREADS) {
            const int64_t b = i / ohw, p = i - b * ohw;
            acc += (double)dy[(b * out_channels + o) * ohw + p];
        }
        const double total = ct_block_sum<BIAS_GRAD_THREADS>(acc, shm);
        if (threadIdx.x == 0) dbias[o] += (T)total;
    }
}

unsigned channel_blocks(int64_t channels) { return (unsigned)(channels < 65535 * 8 ? channels : 65535 * 8); }

bool on_this_gpu(const ct_tensor *t) {
    return t->device.kind == CT_DEVICE_CUDA && t->device.index == ct_cuda_current_device();
}

/* The shapes and devices every conv op relies on; a mismatch is a bug in the calling layer. */
void check_conv(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight, const ct_tensor *y) {
    CT_ASSERT(on_this_gpu(x) && on_this_gpu(weight) && on_this_gpu(y));
    CT_ASSERT(x->ndim == 4 && x->shape[1] == g->in_channels && x->shape[2] == g->in_h && x->shape[3] == g->in_w);
    CT_ASSERT(y->ndim == 4 && y->shape[0] == x->shape[0] && y->shape[1] == g->out_channels && y->shape[2] == g->out_h &&
              y->shape[3] == g->out_w);
    CT_ASSERT(ct_tensor_numel(weight) == g->out_channels * g->in_channels * g->kernel[0] * g->kernel[1]);
    CT_ASSERT(weight->dtype == x->dtype && y->dtype == x->dtype);
    CT_ASSERT(g->stride[0] >= 1 && g->stride[1] >= 1 && g->dilation[0] >= 1 && g->dilation[1] >= 1);
    CT_ASSERT(g->out_h == ct_conv_out_size(g->in_h, g->kernel[0], g->stride[0], g->padding[0], g->dilation[0]) &&
              g->out_w == ct_conv_out_size(g->in_w, g->kernel[1], g->stride[1], g->padding[1], g->dilation[1]));
}

template <typename T>
void conv_forward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight, const ct_tensor *bias,
                  ct_tensor *y) {
    const int64_t batch = x->shape[0];
    cudnnHandle_t h = ct_cudnn_handle();
    conv_plan *p = get_plan(h, g, batch, x->dtype);
    void *ws = ct_cuda_workspace(p->fwd_ws);
    const T one = 1, zero = 0;
    CT_CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, p->fwd_math));
    CT_CUDNN_CHECK(cudnnConvolutionForward(h, &one, p->x, x->data, p->w, weight->data, p->conv, p->fwd, ws, p->fwd_ws,
                                           &zero, p->y, y->data));
    if (bias) {
        const int64_t n = ct_tensor_numel(y);
        bias_add_kernel<T><<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, ct_cuda_stream_t()>>>(
            (T *)y->data, (const T *)bias->data, g->out_channels, g->out_h * g->out_w, n);
        CT_CUDA_LAUNCHED();
    }
}

template <typename T>
void conv_backward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight, const ct_tensor *dy,
                   ct_tensor *dweight, ct_tensor *dbias, ct_tensor *dx) {
    const int64_t batch = x->shape[0];
    if (dbias) {
        bias_grad_kernel<T><<<channel_blocks(g->out_channels), BIAS_GRAD_THREADS, 0, ct_cuda_stream_t()>>>(
            (const T *)dy->data, (T *)dbias->data, batch, g->out_channels, g->out_h * g->out_w);
        CT_CUDA_LAUNCHED();
    }
    if (!dweight && !dx) return;
    cudnnHandle_t h = ct_cudnn_handle();
    conv_plan *p = get_plan(h, g, batch, x->dtype);
    /* One workspace for both products: they run one after the other on the same stream. */
    size_t need = 0;
    if (dweight && p->filter_ws > need) need = p->filter_ws;
    if (dx && p->data_ws > need) need = p->data_ws;
    void *ws = ct_cuda_workspace(need);
    const T one = 1, zero = 0;
    if (dweight) {
        CT_CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, p->filter_math));
        CT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &one, p->x, x->data, p->y, dy->data, p->conv, p->bwd_filter,
                                                      ws, p->filter_ws, &one, p->w, dweight->data));
    }
    if (dx) {
        CT_CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, p->data_math));
        CT_CUDNN_CHECK(cudnnConvolutionBackwardData(h, &one, p->w, weight->data, p->y, dy->data, p->conv, p->bwd_data,
                                                    ws, p->data_ws, &zero, p->x, dx->data));
    }
}

} // namespace

extern "C" void ct_cuda_op_conv2d_forward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                                          const ct_tensor *bias, ct_tensor *y, ct_tensor *ws) {
    (void)ws; /* cuDNN's scratch is the library workspace */
    CT_ASSERT(!g->relu && !g->pool2x2); /* cuDNN's path runs the activation as a layer of its own */
    check_conv(g, x, weight, y);
    CT_ASSERT(!bias || (ct_tensor_numel(bias) == g->out_channels && bias->dtype == x->dtype && on_this_gpu(bias)));
    if (x->shape[0] == 0) return;
    if (x->dtype == CT_F32)
        conv_forward<float>(g, x, weight, bias, y);
    else if (x->dtype == CT_F64)
        conv_forward<double>(g, x, weight, bias, y);
    else
        ct_abort_at(__FILE__, __LINE__, "conv2d (cuda): unsupported dtype %s", ct_dtype_name(x->dtype));
}

extern "C" void ct_cuda_op_conv2d_backward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                                           const ct_tensor *dy, ct_tensor *dweight, ct_tensor *dbias, ct_tensor *dx,
                                           ct_tensor *ws) {
    (void)ws;
    check_conv(g, x, weight, dy);
    CT_ASSERT(!dweight || (ct_tensor_numel(dweight) == ct_tensor_numel(weight) && dweight->dtype == x->dtype &&
                           on_this_gpu(dweight)));
    CT_ASSERT(!dbias || (ct_tensor_numel(dbias) == g->out_channels && dbias->dtype == x->dtype && on_this_gpu(dbias)));
    CT_ASSERT(!dx || (ct_shape_eq(dx, x) && dx->dtype == x->dtype && on_this_gpu(dx)));
    if (x->shape[0] == 0) return;
    if (x->dtype == CT_F32)
        conv_backward<float>(g, x, weight, dy, dweight, dbias, dx);
    else if (x->dtype == CT_F64)
        conv_backward<double>(g, x, weight, dy, dweight, dbias, dx);
    else
        ct_abort_at(__FILE__, __LINE__, "conv2d (cuda): unsupported dtype %s", ct_dtype_name(x->dtype));
}
