/* The names of one instruction-set level's copy of the CPU kernels.
 *
 * x86-64 builds compile the kernel files of backends/cpu/ once at the library's flags (the baseline
 * copy, whose table is ct_backend_cpu) and again for each of x86-64-v2, v3 and v4 (CMake defines
 * CT_CPU_ISA_LEVEL=2..4 for those: backends/cpu/CMakeLists.txt). So that the copies link side by
 * side, every symbol with external linkage a kernel file defines takes the level's suffix here
 * (ct_cpu_gemm_v3, ct_backend_cpu_v3); backends/cpu/isa.c picks one copy's table when the library
 * loads. A kernel file that gains an external symbol adds it to this list: a missing one is a
 * duplicate definition when the shared library links. Included first by cpu_impl.h. */
#ifndef CT_CPU_ISA_NAMES_H
#define CT_CPU_ISA_NAMES_H

#if defined(CT_CPU_ISA_LEVEL) && CT_CPU_ISA_LEVEL >= 2
#define CT_CPU_ISA_CAT_(a, b) a##b
#define CT_CPU_ISA_CAT(a, b) CT_CPU_ISA_CAT_(a, b)
/* name -> name_vN: a macro's own name is not expanded again inside it, so each define below refers
 * to the symbol it renames. */
#define CT_CPU_ISA_NAME(name) CT_CPU_ISA_CAT(CT_CPU_ISA_CAT(name, _v), CT_CPU_ISA_LEVEL)

#define ct_backend_cpu CT_CPU_ISA_NAME(ct_backend_cpu)
#define ct_cpu_activation_backward CT_CPU_ISA_NAME(ct_cpu_activation_backward)
#define ct_cpu_activation_forward CT_CPU_ISA_NAME(ct_cpu_activation_forward)
#define ct_cpu_adam_step CT_CPU_ISA_NAME(ct_cpu_adam_step)
#define ct_cpu_add CT_CPU_ISA_NAME(ct_cpu_add)
#define ct_cpu_all_finite CT_CPU_ISA_NAME(ct_cpu_all_finite)
#define ct_cpu_avgpool2d_backward CT_CPU_ISA_NAME(ct_cpu_avgpool2d_backward)
#define ct_cpu_avgpool2d_forward CT_CPU_ISA_NAME(ct_cpu_avgpool2d_forward)
#define ct_cpu_axpy CT_CPU_ISA_NAME(ct_cpu_axpy)
#define ct_cpu_batchnorm_backward CT_CPU_ISA_NAME(ct_cpu_batchnorm_backward)
#define ct_cpu_batchnorm_forward CT_CPU_ISA_NAME(ct_cpu_batchnorm_forward)
#define ct_cpu_bias_add CT_CPU_ISA_NAME(ct_cpu_bias_add)
#define ct_cpu_bias_grad CT_CPU_ISA_NAME(ct_cpu_bias_grad)
#define ct_cpu_bias_grad_linear CT_CPU_ISA_NAME(ct_cpu_bias_grad_linear)
#define ct_cpu_causal_attention_backward CT_CPU_ISA_NAME(ct_cpu_causal_attention_backward)
#define ct_cpu_causal_attention_forward CT_CPU_ISA_NAME(ct_cpu_causal_attention_forward)
#define ct_cpu_causal_softmax_backward CT_CPU_ISA_NAME(ct_cpu_causal_softmax_backward)
#define ct_cpu_causal_softmax_forward CT_CPU_ISA_NAME(ct_cpu_causal_softmax_forward)
#define ct_cpu_class_ranks CT_CPU_ISA_NAME(ct_cpu_class_ranks)
#define ct_cpu_conv2d_backward CT_CPU_ISA_NAME(ct_cpu_conv2d_backward)
#define ct_cpu_conv2d_forward CT_CPU_ISA_NAME(ct_cpu_conv2d_forward)
#define ct_cpu_conv2d_relu_backward CT_CPU_ISA_NAME(ct_cpu_conv2d_relu_backward)
#define ct_cpu_conv2d_relu_pool_backward CT_CPU_ISA_NAME(ct_cpu_conv2d_relu_pool_backward)
#define ct_cpu_conv2d_relu_pool_forward CT_CPU_ISA_NAME(ct_cpu_conv2d_relu_pool_forward)
#define ct_cpu_copy CT_CPU_ISA_NAME(ct_cpu_copy)
#define ct_cpu_cross_entropy_backward CT_CPU_ISA_NAME(ct_cpu_cross_entropy_backward)
#define ct_cpu_cross_entropy_forward CT_CPU_ISA_NAME(ct_cpu_cross_entropy_forward)
#define ct_cpu_cross_entropy_rows CT_CPU_ISA_NAME(ct_cpu_cross_entropy_rows)
#define ct_cpu_dropout_backward CT_CPU_ISA_NAME(ct_cpu_dropout_backward)
#define ct_cpu_dropout_forward CT_CPU_ISA_NAME(ct_cpu_dropout_forward)
#define ct_cpu_embedding_backward CT_CPU_ISA_NAME(ct_cpu_embedding_backward)
#define ct_cpu_embedding_find_invalid CT_CPU_ISA_NAME(ct_cpu_embedding_find_invalid)
#define ct_cpu_embedding_forward CT_CPU_ISA_NAME(ct_cpu_embedding_forward)
#define ct_cpu_fill CT_CPU_ISA_NAME(ct_cpu_fill)
#define ct_cpu_fused_classifier CT_CPU_ISA_NAME(ct_cpu_fused_classifier)
#define ct_cpu_fused_classifier_acc CT_CPU_ISA_NAME(ct_cpu_fused_classifier_acc)
#define ct_cpu_gelu_tanh_span_f32 CT_CPU_ISA_NAME(ct_cpu_gelu_tanh_span_f32)
#define ct_cpu_gelu_tanh_span_f64 CT_CPU_ISA_NAME(ct_cpu_gelu_tanh_span_f64)
#define ct_cpu_gemm CT_CPU_ISA_NAME(ct_cpu_gemm)
#define ct_cpu_gemm_batched CT_CPU_ISA_NAME(ct_cpu_gemm_batched)
#define ct_cpu_heads_merge CT_CPU_ISA_NAME(ct_cpu_heads_merge)
#define ct_cpu_heads_split CT_CPU_ISA_NAME(ct_cpu_heads_split)
#define ct_cpu_l2_norm CT_CPU_ISA_NAME(ct_cpu_l2_norm)
#define ct_cpu_l2_norm_into CT_CPU_ISA_NAME(ct_cpu_l2_norm_into)
#define ct_cpu_layernorm_backward CT_CPU_ISA_NAME(ct_cpu_layernorm_backward)
#define ct_cpu_layernorm_forward CT_CPU_ISA_NAME(ct_cpu_layernorm_forward)
#define ct_cpu_linear_backward CT_CPU_ISA_NAME(ct_cpu_linear_backward)
#define ct_cpu_linear_forward CT_CPU_ISA_NAME(ct_cpu_linear_forward)
#define ct_cpu_maxpool2d_backward CT_CPU_ISA_NAME(ct_cpu_maxpool2d_backward)
#define ct_cpu_maxpool2d_forward CT_CPU_ISA_NAME(ct_cpu_maxpool2d_forward)
#define ct_cpu_maxpool2x2_plane_f32 CT_CPU_ISA_NAME(ct_cpu_maxpool2x2_plane_f32)
#define ct_cpu_maxpool2x2_plane_f64 CT_CPU_ISA_NAME(ct_cpu_maxpool2x2_plane_f64)
#define ct_cpu_pointwise_loss_acc CT_CPU_ISA_NAME(ct_cpu_pointwise_loss_acc)
#define ct_cpu_pointwise_loss_backward CT_CPU_ISA_NAME(ct_cpu_pointwise_loss_backward)
#define ct_cpu_pointwise_loss_forward CT_CPU_ISA_NAME(ct_cpu_pointwise_loss_forward)
#define ct_cpu_pointwise_loss_rows CT_CPU_ISA_NAME(ct_cpu_pointwise_loss_rows)
#define ct_cpu_scale CT_CPU_ISA_NAME(ct_cpu_scale)
#define ct_cpu_scale_by CT_CPU_ISA_NAME(ct_cpu_scale_by)
#define ct_cpu_sgd_step CT_CPU_ISA_NAME(ct_cpu_sgd_step)
#define ct_cpu_sgemm CT_CPU_ISA_NAME(ct_cpu_sgemm)
#define ct_cpu_sgemm_linear CT_CPU_ISA_NAME(ct_cpu_sgemm_linear)
#define ct_cpu_sgemm_weight_grad CT_CPU_ISA_NAME(ct_cpu_sgemm_weight_grad)
#define ct_cpu_step_rule CT_CPU_ISA_NAME(ct_cpu_step_rule)
#define ct_cpu_sum_squares_det CT_CPU_ISA_NAME(ct_cpu_sum_squares_det)
#define ct_cpu_token_values CT_CPU_ISA_NAME(ct_cpu_token_values)
#endif

#endif
