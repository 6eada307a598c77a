/* Private helpers of the CPU backend.
 *
 * The backend is one translation unit (backend_cpu.c includes the family files: blas.c, conv.c, ...),
 * so every kernel is static and the rest of the library reaches it only through ct_backend_cpu, after
 * core/ops/dispatch.c has checked the op's arguments. Kernels are written once over a real type and
 * instantiated for float and double by including a *_tmpl.h file twice with R (the type) and FN (the
 * name suffixer) defined; CT_REAL_DISPATCH picks the instance by the dtype of a tensor. OpenMP loops
 * start only above CT_OMP_MIN elements, where waking the thread team costs less than it saves. */
#ifndef CT_CPU_IMPL_H
#define CT_CPU_IMPL_H

#include "core/status.h"
#include "core/tensor.h"

#define CT_OMP_MIN 32768

#define CT_REAL_DISPATCH(t, fn, ...)                                                                \
    do {                                                                                           \
        if ((t)->dtype == CT_F32)                                                                  \
            fn##_f32(__VA_ARGS__);                                                                 \
        else if ((t)->dtype == CT_F64)                                                             \
            fn##_f64(__VA_ARGS__);                                                                 \
        else                                                                                       \
            ct_abort_at(__FILE__, __LINE__, "%s: unsupported dtype %s", #fn, ct_dtype_name((t)->dtype)); \
    } while (0)

#define CT_CHECK_CPU(t) CT_ASSERT((t)->device.kind == CT_DEVICE_CPU)

/* One plane x[H, W] max-pooled with 2x2 windows, stride 2 (nn.MaxPool2d(2)): y[H/2, W/2] and each
 * window's argmax position in the plane, with ct_op_maxpool2d_forward's rules (backends/cpu/pool.c). */
static void ct_cpu_maxpool2x2_plane_f32(const float *x, int64_t H, int64_t W, float *y, int32_t *idx);
static void ct_cpu_maxpool2x2_plane_f64(const double *x, int64_t H, int64_t W, double *y, int32_t *idx);

/* Sliding windows (convolution, pooling): outputs o in [*lo, *hi) of [0, out) read the input
 * position o*stride + off inside [0, n); the rest fall in the padding. Always 0 <= *lo <= *hi <= out.
 * Computing the span once keeps bounds checks out of the innermost loops. */
static inline void ct_cpu_out_span(int64_t off, int64_t stride, int64_t n, int64_t out, int64_t *lo, int64_t *hi) {
    int64_t l = off >= 0 ? 0 : (-off + stride - 1) / stride;
    int64_t h = n - off <= 0 ? 0 : (n - off + stride - 1) / stride;
    if (l > out) l = out;
    if (h > out) h = out;
    if (h < l) h = l;
    *lo = l;
    *hi = h;
}

#endif
