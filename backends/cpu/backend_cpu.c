/* The CPU backend's table (core/ops/backend.h): host memory and the kernels of every op.
 *
 * The family files are included here rather than compiled on their own, so the kernels stay static
 * and this table is the backend's one door (besides the CPU's own knobs of ops.h and ops_conv.h:
 * thread count, denormals, the convolution workspace). Memory is the host's: 64-byte aligned and
 * zeroed (ct_host_alloc), counted by the kernel rather than here, so the peak statistics are NULL and
 * trainer/memory.c reads the process's resident set instead. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "core/ops/backend.h"

#include "backends/cpu/attn.c"
#include "backends/cpu/blas.c"
#include "backends/cpu/conv.c"
#include "backends/cpu/elementwise.c"
#include "backends/cpu/loss.c"
#include "backends/cpu/misc.c"
#include "backends/cpu/norm.c"
#include "backends/cpu/optim.c"
#include "backends/cpu/pool.c"

static int cpu_device_count(void) { return 1; }
                            
                            static ct_status cpu_alloc(int index, size_t bytes, void **out) {
    (void)index;
    *out = ct_host_alloc(bytes);
    return *out ? CT_OK : ct_error(CT_ERR_NOMEM, "cpu: cannot allocate %zu bytes", bytes);
}

static void cpu_free(int index, void *p) {
    (void)index;
    ct_host_free(p);
}

static ct_status cpu_copy_bytes(void *dst, ct_device dd, const void *src, ct_device sd, size_t bytes) {
    (void)dd;
    (void)sd;
    if (bytes) memmove(dst, src, bytes);
    return CT_OK;
}

static void cpu_memset_zero(int index, void *dst, size_t bytes) {
    (void)index;
    if (bytes) memset(dst, 0, bytes);
}

/* Host ops have finished when they return. */
static ct_status cpu_synchronize(void) { return CT_OK; }
                                 
                                 static void cpu_describe(int index, char *buf, size_t cap) {
    (void)index;
    snprintf(buf, cap, "%d OpenMP thread(s), %s", omp_get_max_threads(), openblas_get_config());
}

const ct_backend_ops ct_backend_cpu = {
    .size = sizeof(ct_backend_ops),
    .name = "cpu",
    .device_count = cpu_device_count,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_bytes = cpu_copy_bytes,
    .memset_zero = cpu_memset_zero,
    .synchronize = cpu_synchronize,
    .peak_allocated = NULL,
    .reset_peak = NULL,
    .describe = cpu_describe,

    .gemm = cpu_gemm,
    .fill = cpu_fill,
    .copy = cpu_copy,
    .add = cpu_add,
    .axpy = cpu_axpy,
    .scale = cpu_scale,
    .all_finite = cpu_all_finite,
    .bias_add = cpu_bias_add,
    .bias_grad = cpu_bias_grad,
    .activation_forward = cpu_activation_forward,
    .activation_backward = cpu_activation_backward,

    .conv2d_forward = cpu_conv2d_forward,
    .conv2d_backward = cpu_conv2d_backward,
    .conv2d_relu_backward = cpu_conv2d_relu_backward,
    .conv2d_relu_pool_forward = cpu_conv2d_relu_pool_forward,
    .conv2d_relu_pool_backward = cpu_conv2d_relu_pool_backward,
    .maxpool2d_forward = cpu_maxpool2d_forward,
    .maxpool2d_backward = cpu_maxpool2d_backward,
    .avgpool2d_forward = cpu_avgpool2d_forward,
    .avgpool2d_backward = cpu_avgpool2d_backward,

    .cross_entropy_forward = cpu_cross_entropy_forward,
    .cross_entropy_backward = cpu_cross_entropy_backward,
    .pointwise_loss_forward = cpu_pointwise_loss_forward,
    .pointwise_loss_backward = cpu_pointwise_loss_backward,

    .dropout_forward = cpu_dropout_forward,
    .dropout_backward = cpu_dropout_backward,
    .embedding_find_invalid = cpu_embedding_find_invalid,
    .embedding_forward = cpu_embedding_forward,
    .embedding_backward = cpu_embedding_backward,

    .heads_split = cpu_heads_split,
    .heads_merge = cpu_heads_merge,
    .causal_softmax_forward = cpu_causal_softmax_forward,
    .causal_softmax_backward = cpu_causal_softmax_backward,

    .batchnorm_forward = cpu_batchnorm_forward,
    .batchnorm_backward = cpu_batchnorm_backward,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,

    .sgd_step = cpu_sgd_step,
    .adam_step = cpu_adam_step,
    .sum_squares_det = cpu_sum_squares_det,
    .l2_norm = cpu_l2_norm,
};
