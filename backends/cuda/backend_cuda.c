/* The CUDA backend's table (core/ops/backend.h): device memory of backends/cuda/cuda_rt.h and the
 * kernels of backends/cuda/ops_cuda.h, reached by the rest of the library only through it (registered
 * by core/ops/backend.c in builds with CUDA). Plain C, compiled with the library's C objects; the
 * functions it points to are the .cu files'. The fused conv + ReLU (+ max-pooling) ops are CPU
 * cache optimisations with no CUDA kernel: the layers use them only on the CPU. */
#include "backends/cuda/cuda_rt.h"
#include "backends/cuda/ops_cuda.h"
#include "core/ops/backend.h"

const ct_backend_ops ct_backend_cuda = {
    .size = sizeof(ct_backend_ops),
    .name = "cuda",
    .device_count = ct_cuda_device_count,
    .alloc = ct_cuda_malloc,
    .free = ct_cuda_free,
    .copy_bytes = ct_cuda_memcpy,
    .memset_zero = ct_cuda_memset_zero,
    .synchronize = ct_cuda_stream_synchronize,
    .peak_allocated = ct_cuda_peak_allocated,
    .set_math_mode = ct_cuda_set_math_mode,
    .reset_peak = ct_cuda_reset_peak,
    .describe = ct_cuda_describe,
    .collectives = "nccl",
    .event_create = ct_cuda_event_create,
    .event_destroy = ct_cuda_event_destroy,
    .event_record = ct_cuda_event_record,
    .event_wait = ct_cuda_event_wait,
    .pinned_alloc = ct_cuda_host_alloc,
    .pinned_free = ct_cuda_host_free,
    .upload = ct_cuda_upload,
    .download = ct_cuda_download,
    .cross_entropy_rows = ct_cuda_op_cross_entropy_rows,
    .token_values = ct_cuda_op_token_values,
    .pointwise_loss_rows = ct_cuda_op_pointwise_loss_rows,
    .scale_by = ct_cuda_op_scale_by,
    .l2_norm_into = ct_cuda_op_l2_norm_into,
    .step_rule = ct_cuda_op_step_rule,
    .fused_classifier_acc = ct_cuda_op_fused_classifier_acc,
    .pointwise_loss_acc = ct_cuda_op_pointwise_loss_acc,
    .class_ranks = ct_cuda_op_class_ranks,
    .use_device = ct_cuda_use_device,
    .stream_begin = ct_cuda_thread_stream_begin,
    .stream_end = ct_cuda_thread_stream_end,

    .gemm = ct_cuda_op_gemm,
    .linear_forward = ct_cuda_op_linear_forward,
    .linear_backward = ct_cuda_op_linear_backward,
    .fill = ct_cuda_op_fill,
    .copy = ct_cuda_op_copy,
    .add = ct_cuda_op_add,
    .axpy = ct_cuda_op_axpy,
    .scale = ct_cuda_op_scale,
    .all_finite = ct_cuda_op_all_finite,
    .bias_add = ct_cuda_op_bias_add,
    .bias_grad = ct_cuda_op_bias_grad,
    .activation_forward = ct_cuda_op_activation_forward,
    .activation_backward = ct_cuda_op_activation_backward,

    .conv2d_forward = ct_cuda_op_conv2d_forward,
    .conv2d_backward = ct_cuda_op_conv2d_backward,
    .conv2d_relu_backward = NULL,
    .conv2d_relu_pool_forward = NULL,
    .conv2d_relu_pool_backward = NULL,
    .maxpool2d_forward = ct_cuda_op_maxpool2d_forward,
    .maxpool2d_backward = ct_cuda_op_maxpool2d_backward,
    .avgpool2d_forward = ct_cuda_op_avgpool2d_forward,
    .avgpool2d_backward = ct_cuda_op_avgpool2d_backward,

    .cross_entropy_forward = ct_cuda_op_cross_entropy_forward,
    .cross_entropy_backward = ct_cuda_op_cross_entropy_backward,
    .pointwise_loss_forward = ct_cuda_op_pointwise_loss_forward,
    .pointwise_loss_backward = ct_cuda_op_pointwise_loss_backward,

    .dropout_forward = ct_cuda_op_dropout_forward,
    .dropout_backward = ct_cuda_op_dropout_backward,
    .embedding_find_invalid = ct_cuda_op_embedding_find_invalid,
    .embedding_forward = ct_cuda_op_embedding_forward,
    .embedding_backward = ct_cuda_op_embedding_backward,

    .heads_split = ct_cuda_op_heads_split,
    .heads_merge = ct_cuda_op_heads_merge,
    .causal_softmax_forward = ct_cuda_op_causal_softmax_forward,
    .causal_softmax_backward = ct_cuda_op_causal_softmax_backward,
    .causal_attention_forward = ct_cuda_op_causal_attention_forward,
    .causal_attention_backward = ct_cuda_op_causal_attention_backward,

    .batchnorm_forward = ct_cuda_op_batchnorm_forward,
    .batchnorm_backward = ct_cuda_op_batchnorm_backward,
    .layernorm_forward = ct_cuda_op_layernorm_forward,
    .layernorm_backward = ct_cuda_op_layernorm_backward,

    .sgd_step = ct_cuda_op_sgd_step,
    .adam_step = ct_cuda_op_adam_step,
    .sum_squares_det = ct_cuda_op_sum_squares_det,
    .l2_norm = ct_cuda_op_l2_norm,

    .fused_classifier = ct_cuda_op_fused_classifier,
    .peak_flops = ct_cuda_peak_flops,
};
