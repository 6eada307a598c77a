/* The CPU backend's table (core/ops/backend.h): host memory and the kernels of every op.
 *
 * The kernels live in the family files (blas.c, conv.c, ...; declared in cpu_impl.h); this table is
 * the backend's one door (besides the CPU's own knobs of ops.h and ops_conv.h: thread count,
 * denormals, the convolution workspace). Memory is the host's: 64-byte aligned and zeroed
 * (ct_host_alloc), counted by the kernel rather than here, so the peak statistics are NULL and
 * trainer/memory.c reads the process's resident set instead. Compiled once per instruction-set
 * level (isa_names.h), so there is one such table per level; isa.c picks the one that runs. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "backends/cpu/cpu_impl.h"
#include "core/ops/backend.h"

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

/* The level this table's kernels are compiled for and the CPU's best (isa.c), and the float GEMMs'
 * engine (gemm_engine.c), so that `ctrainer version` and the benchmarks say which path ran. */
static void cpu_describe(int index, char *buf, size_t cap) {
    (void)index;
    int best = ct_cpu_isa_best();
    snprintf(buf, cap, "%d OpenMP thread(s), kernels %s%s%s, %s, BLAS: %s", omp_get_max_threads(),
             ct_cpu_isa_level_name(CT_CPU_ISA_LEVEL), CT_CPU_ISA_LEVEL < best ? " of this CPU's " : "",
             CT_CPU_ISA_LEVEL < best ? ct_cpu_isa_level_name(best) : "", ct_cpu_gemm_engine(), openblas_get_config());
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

    .gemm = ct_cpu_gemm,
    .fill = ct_cpu_fill,
    .copy = ct_cpu_copy,
    .add = ct_cpu_add,
    .axpy = ct_cpu_axpy,
    .scale = ct_cpu_scale,
    .all_finite = ct_cpu_all_finite,
    .bias_add = ct_cpu_bias_add,
    .bias_grad = ct_cpu_bias_grad,
    .activation_forward = ct_cpu_activation_forward,
    .activation_backward = ct_cpu_activation_backward,

    .conv2d_forward = ct_cpu_conv2d_forward,
    .conv2d_backward = ct_cpu_conv2d_backward,
    .conv2d_relu_backward = ct_cpu_conv2d_relu_backward,
    .conv2d_relu_pool_forward = ct_cpu_conv2d_relu_pool_forward,
    .conv2d_relu_pool_backward = ct_cpu_conv2d_relu_pool_backward,
    .maxpool2d_forward = ct_cpu_maxpool2d_forward,
    .maxpool2d_backward = ct_cpu_maxpool2d_backward,
    .avgpool2d_forward = ct_cpu_avgpool2d_forward,
    .avgpool2d_backward = ct_cpu_avgpool2d_backward,

    .cross_entropy_forward = ct_cpu_cross_entropy_forward,
    .cross_entropy_backward = ct_cpu_cross_entropy_backward,
    .pointwise_loss_forward = ct_cpu_pointwise_loss_forward,
    .pointwise_loss_backward = ct_cpu_pointwise_loss_backward,

    .dropout_forward = ct_cpu_dropout_forward,
    .dropout_backward = ct_cpu_dropout_backward,
    .embedding_find_invalid = ct_cpu_embedding_find_invalid,
    .embedding_forward = ct_cpu_embedding_forward,
    .embedding_backward = ct_cpu_embedding_backward,

    .heads_split = ct_cpu_heads_split,
    .heads_merge = ct_cpu_heads_merge,
    .causal_softmax_forward = ct_cpu_causal_softmax_forward,
    .causal_softmax_backward = ct_cpu_causal_softmax_backward,

    .batchnorm_forward = ct_cpu_batchnorm_forward,
    .batchnorm_backward = ct_cpu_batchnorm_backward,
    .layernorm_forward = ct_cpu_layernorm_forward,
    .layernorm_backward = ct_cpu_layernorm_backward,

    .sgd_step = ct_cpu_sgd_step,
    .adam_step = ct_cpu_adam_step,
    .sum_squares_det = ct_cpu_sum_squares_det,
    .l2_norm = ct_cpu_l2_norm,

    .fused_classifier = ct_cpu_fused_classifier,
    .causal_attention_forward = ct_cpu_causal_attention_forward,
    .causal_attention_backward = ct_cpu_causal_attention_backward,
    .linear_forward = ct_cpu_linear_forward,
    .gemm_batched = ct_cpu_gemm_batched,
    .linear_backward = ct_cpu_linear_backward,
    .cross_entropy_rows = ct_cpu_cross_entropy_rows,
    .token_values = ct_cpu_token_values,
    .pointwise_loss_rows = ct_cpu_pointwise_loss_rows,
    .scale_by = ct_cpu_scale_by,
    .l2_norm_into = ct_cpu_l2_norm_into,
    .step_rule = ct_cpu_step_rule,
    .fused_classifier_acc = ct_cpu_fused_classifier_acc,
    .pointwise_loss_acc = ct_cpu_pointwise_loss_acc,
    .class_ranks = ct_cpu_class_ranks,
};
