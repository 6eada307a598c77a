/* The backend interface: what a device kind (the CPU, CUDA) provides to the rest of ctrainer, as one
 * const table per kind, ggml's way.
 *
 * A backend is its device memory (allocation, copies, statistics) and one kernel per op of
 * core/ops/ops*.h. The public ct_op_* entry points (core/ops/dispatch.c) are the one place that
 * dispatches on a tensor's device: they run the checks every backend shares, look the table up by the
 * device kind and make one indirect call. The device functions of core/device.h (alloc, free, copy,
 * check) go through the same table (core/ops/backend.c), so nothing outside backends/ names a
 * backend's own functions. backends/cpu/ defines ct_backend_cpu (every build); backends/cuda/ defines
 * ct_backend_cuda (builds with CUDA only), and core/ops/backend.c registers them by kind.
 *
 * The table is versioned by its size: `size` is sizeof the struct the backend was compiled with,
 * members are only ever appended, and a NULL member means the backend does not have it (an op
 * aborts with the op's and the backend's name; a memory statistic reads as unknown). Kernel members
 * take the op's arguments unchanged and keep its contract (see the op headers): accumulate into
 * parameter gradients, overwrite input gradients, never allocate. */
#ifndef CT_BACKEND_H
#define CT_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/device.h"
#include "core/ops/ops.h"
#include "core/ops/ops_attn.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_backend_ops {
    size_t size; /* sizeof(ct_backend_ops) as the backend was compiled */
    const char *name; /* the device kind's spelling: "cpu", "cuda" */

    /* --- device memory (index: the device's index within its kind) ----------------------------- */
    /* Devices of this kind visible to the process (0: none, the backend is compiled in but unusable). */
    int (*device_count)(void);
    /* Zeroed memory (64-byte aligned on the host); CT_ERR_NOMEM naming the device when it fails. */
    ct_status (*alloc)(int index, size_t bytes, void **out);
    void (*free)(int index, void *p);
    /* bytes from src on sd to dst on dd, where one side (at least) is this backend's; a copy that ends
     * on the host has finished when this returns. */
    ct_status (*copy_bytes)(void *dst, ct_device dd, const void *src, ct_device sd, size_t bytes);
    void (*memset_zero)(int index, void *dst, size_t bytes);
    /* Waits until every op the calling thread enqueued has run. */
    ct_status (*synchronize)(void);
    /* Bytes allocated through alloc at their peak since the start or the last reset_peak, and the
     * reset, which makes the peak the current count (how the current count is read). */
    size_t (*peak_allocated)(int index);
    void (*reset_peak)(int index);
    /* One line saying what device `index` is (`ctrainer version`), written into buf. */
    void (*describe)(int index, char *buf, size_t cap);

    /* --- kernels: one per op of core/ops (same names without ct_op_, same arguments) ----------- */
    void (*gemm)(bool trans_a, bool trans_b, double alpha, const ct_tensor *a, const ct_tensor *b, double beta,
                 ct_tensor *c);
    void (*fill)(ct_tensor *t, double value);
    void (*copy)(ct_tensor *dst, const ct_tensor *src);
    void (*add)(const ct_tensor *a, const ct_tensor *b, ct_tensor *out);
    void (*axpy)(double alpha, const ct_tensor *x, ct_tensor *y);
    void (*scale)(ct_tensor *t, double s);
    bool (*all_finite)(const ct_tensor *t);
    void (*bias_add)(ct_tensor *y, const ct_tensor *bias, int64_t inner);
    void (*bias_grad)(const ct_tensor *dy, ct_tensor *dbias, int64_t inner);
    void (*activation_forward)(ct_activation act, const ct_tensor *x, ct_tensor *y);
    void (*activation_backward)(ct_activation act, const ct_tensor *x, const ct_tensor *y, const ct_tensor *dy,
                                ct_tensor *dx);

    void (*conv2d_forward)(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                           const ct_tensor *bias, ct_tensor *y, ct_tensor *ws);
    void (*conv2d_backward)(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                            const ct_tensor *dy, ct_tensor *dweight, ct_tensor *dbias, ct_tensor *dx, ct_tensor *ws);
    void (*conv2d_relu_backward)(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                                 const ct_tensor *y, const ct_tensor *dy, ct_tensor *dweight, ct_tensor *dbias,
                                 ct_tensor *dx, ct_tensor *ws);
    void (*conv2d_relu_pool_forward)(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                                     const ct_tensor *bias, ct_tensor *y, ct_tensor *indices, ct_tensor *ws);
    void (*conv2d_relu_pool_backward)(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                                      const ct_tensor *y, const ct_tensor *indices, const ct_tensor *dy,
                                      ct_tensor *dweight, ct_tensor *dbias, ct_tensor *dx, ct_tensor *ws);
    void (*maxpool2d_forward)(const ct_pool2d_geom *g, const ct_tensor *x, ct_tensor *y, ct_tensor *indices);
    void (*maxpool2d_backward)(const ct_pool2d_geom *g, const ct_tensor *dy, const ct_tensor *indices,
                               ct_tensor *dx);
    void (*avgpool2d_forward)(const ct_pool2d_geom *g, const ct_tensor *x, ct_tensor *y);
    void (*avgpool2d_backward)(const ct_pool2d_geom *g, const ct_tensor *dy, ct_tensor *dx);

    int64_t (*cross_entropy_forward)(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o,
                                     double *sum, double *count);
    int64_t (*cross_entropy_backward)(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o,
                                      double scale, ct_tensor *dlogits);
    double (*pointwise_loss_forward)(ct_pointwise_loss kind, const ct_pointwise_opts *o, const ct_tensor *pred,
                                     const ct_tensor *target);
    void (*pointwise_loss_backward)(ct_pointwise_loss kind, const ct_pointwise_opts *o, const ct_tensor *pred,
                                    const ct_tensor *target, double scale, ct_tensor *dpred);

    void (*dropout_forward)(const ct_tensor *x, double p, const ct_dropout_ctx *ctx, ct_tensor *mask, ct_tensor *y);
    void (*dropout_backward)(const ct_tensor *dy, const ct_tensor *mask, double p, ct_tensor *dx);
    int64_t (*embedding_find_invalid)(const ct_tensor *ids, int64_t num_embeddings);
    void (*embedding_forward)(const ct_tensor *ids, const ct_tensor *weight, ct_tensor *y);
    void (*embedding_backward)(const ct_tensor *ids, const ct_tensor *dy, int64_t padding_idx, ct_tensor *dweight);

    void (*heads_split)(const ct_tensor *x, int64_t offset, ct_tensor *out);
    void (*heads_merge)(const ct_tensor *x, int64_t offset, ct_tensor *out);
    void (*causal_softmax_forward)(const ct_tensor *x, ct_tensor *y);
    void (*causal_softmax_backward)(const ct_tensor *y, const ct_tensor *dy, ct_tensor *dx);

    void (*batchnorm_forward)(const ct_tensor *x, const ct_tensor *weight, const ct_tensor *bias,
                              ct_tensor *running_mean, ct_tensor *running_var, bool training, double momentum,
                              double eps, ct_tensor *y, ct_tensor *save_mean, ct_tensor *save_rstd);
    void (*batchnorm_backward)(const ct_tensor *x, const ct_tensor *dy, const ct_tensor *weight,
                               const ct_tensor *save_mean, const ct_tensor *save_rstd, bool training, ct_tensor *dx,
                               ct_tensor *dweight, ct_tensor *dbias);
    void (*layernorm_forward)(const ct_tensor *x, const ct_tensor *residual, const ct_tensor *weight,
                              const ct_tensor *bias, double eps, ct_tensor *sum, ct_tensor *y, ct_tensor *save_mean,
                              ct_tensor *save_rstd);
    void (*layernorm_backward)(const ct_tensor *x, const ct_tensor *dy, const ct_tensor *weight,
                               const ct_tensor *save_mean, const ct_tensor *save_rstd, const ct_tensor *dresidual,
                               ct_tensor *dx, ct_tensor *dweight, ct_tensor *dbias);

    void (*sgd_step)(ct_tensor *param, ct_tensor *grad, ct_tensor *momentum_buffer, const ct_sgd_args *a);
    void (*adam_step)(ct_tensor *param, ct_tensor *grad, ct_tensor *exp_avg, ct_tensor *exp_avg_sq,
                      ct_tensor *max_exp_avg_sq, const ct_adam_args *a);
    double (*sum_squares_det)(const ct_tensor *t);
    double (*l2_norm)(const ct_tensor *t);

    /* --- around every kernel (NULL: nothing) ---------------------------------------------------- */
    /* The dispatch calls op_begin before and op_end after each kernel it runs on this backend, from
     * any thread, nested when a kernel runs other ops: the checked device opens its memory there. */
    void (*op_begin)(void);
    void (*op_end)(void);

    /* The communicator that moves this device's memory between processes itself ("nccl" for
     * CUDA); NULL: collectives stage it through host memory (dist/comm.h). */
    const char *collectives;

    /* --- appended kernels (members added after the table's first release) ------------------------ */
    int64_t (*fused_classifier)(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o,
                                double scale, double *sum, double *count, ct_tensor *dlogits);

    /* --- precision (NULL: float32 only) ---------------------------------------------------------- */
    /* What the calling thread's GEMMs and convolutions may compute with (core/device.h). */
    void (*set_math_mode)(ct_math_mode m);

    /* --- appended: the device's dense peak in FLOP/s with math mode m (ct_device_peak_flops); 0 or
     * NULL: not known (the CPU's depends on clocks and load that nothing reports reliably) --------- */
    double (*peak_flops)(int index, ct_math_mode m);

    /* --- appended: fused (flash-style) causal self-attention (core/ops/ops_attn.h) ---------------- */
    void (*causal_attention_forward)(const ct_tensor *qkv, int64_t n_head, ct_tensor *lse, ct_tensor *y,
                                     ct_tensor *ws);
    void (*causal_attention_backward)(const ct_tensor *qkv, int64_t n_head, const ct_tensor *y,
                                      const ct_tensor *lse, const ct_tensor *dy, ct_tensor *dqkv, ct_tensor *ws);

    /* --- appended: a linear layer's forward with its epilogue (NULL: gemm, bias_add and
     * activation_forward one after the other) ---------------------------------------------------- */
    void (*linear_forward)(const ct_tensor *x, const ct_tensor *weight, const ct_tensor *bias, ct_activation act,
                           ct_tensor *pre, ct_tensor *y);

    /* --- appended: a batch of GEMMs (NULL: the op's callers loop over gemm; see ct_op_gemm_batched) -- */
    void (*gemm_batched)(bool trans_a, bool trans_b, double alpha, const ct_tensor *a, const ct_tensor *b,
                         double beta, ct_tensor *c);

    /* --- appended: a linear layer's backward, its GEMMs and bias gradient together (NULL: gemm,
     * bias_grad and gemm one after the other; see ct_op_linear_backward) ------------------------- */
    void (*linear_backward)(const ct_tensor *dy, const ct_tensor *x, const ct_tensor *weight, ct_tensor *dweight,
                            ct_tensor *dbias, ct_tensor *dx);

    /* --- appended: asynchronous copies to the device (NULL: none; ct_device_upload then copies with
     * copy_bytes, and the events are no-ops) ------------------------------------------------------ *
     * An event is a point in a thread's order of device work; the host or a copy can wait for it. */
    ct_status (*event_create)(int index, void **out);
    void (*event_destroy)(void *event);
    /* Marks the point the calling thread's device work has reached (everything enqueued so far). */
    ct_status (*event_record)(void *event);
    /* Waits on the host until the work before the event's last record has run. */
    ct_status (*event_wait)(void *event);
    /* Page-locked host memory, which an asynchronous copy reads at full bus speed, and its release. */
    ct_status (*pinned_alloc)(size_t bytes, void **out);
    void (*pinned_free)(void *p);
    /* bytes from pinned host memory src to device memory dst, on the calling thread's copy stream, not
     * waiting: the copy starts once `after` has passed (NULL: at once), `done` (required) is recorded
     * when it has read src, and the calling thread's device work enqueued afterwards runs after it.
     * src must stay untouched until `done`; dst must not be in use by work enqueued after `after`. */
    ct_status (*upload)(int index, void *dst, const void *src, size_t bytes, void *after, void *done);

    /* --- appended: makes device `index` the calling thread's current one, where kernels are launched
     * and events recorded (NULL: nothing). The dispatch calls it before each kernel with the device of
     * the op's tensors, as PyTorch's device guard, so a thread works on any device it is handed. */
    void (*use_device)(int index);

    /* --- appended: a stream of the calling thread's own on device `index` (NULL: the device has one
     * order). stream_begin creates it, orders it after everything enqueued on the device's shared
     * stream so far, and makes it the thread's current one; stream_end waits for its work, returns
     * the thread to the shared stream and releases what the thread kept on the device (its copy
     * stream, library handles, workspace: made again if it works on). */
    ct_status (*stream_begin)(int index, void **out);
    void (*stream_end)(int index, void *stream);

    /* --- appended: an asynchronous copy to the host (NULL: ct_device_download copies with copy_bytes)
     * bytes from device memory src to pinned host memory dst, on the calling thread's current stream
     * (after the work enqueued before it, before the work enqueued after it), not waiting: `done`
     * (required) is recorded when dst holds them. The host leaves dst alone until `done` has passed. */
    ct_status (*download)(int index, void *dst, const void *src, size_t bytes, void *done);

    /* --- appended: cross-entropy row by row (NULL: ct_op_cross_entropy_rows calls
     * cross_entropy_forward on each row); see ops_loss.h ----------------------------------------- */
    int64_t (*cross_entropy_rows)(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o,
                                  double *loss, double *count);

    /* --- appended: a language model's per-token NLL and argmax hit (NULL: ct_op_token_values copies
     * the logits and labels to the host and runs the CPU's); see ops_loss.h ---------------------- */
    void (*token_values)(const ct_tensor *logits, const ct_tensor *labels, double *nll, double *hit);

    /* --- appended: an elementwise loss row by row (NULL: ct_op_pointwise_loss_rows copies pred and
     * target to the host and runs the CPU's); see ops_loss.h ------------------------------------- */
    void (*pointwise_loss_rows)(ct_pointwise_loss kind, const ct_pointwise_opts *o, const ct_tensor *pred,
                                const ct_tensor *target, double *loss);

    /* --- appended: the step's statistics on the device, without waits (ops_optim.h, ops_loss.h);
     * all NULL or all set: a backend without them trains with the host's step ------------------- */
    void (*scale_by)(ct_tensor *t, const ct_tensor *stats, int slot);
    void (*l2_norm_into)(const ct_tensor *t, ct_tensor *stats, int slot);
    void (*step_rule)(ct_tensor *stats, const ct_step_rule *rule);
    void (*fused_classifier_acc)(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o,
                                 double scale, ct_tensor *dlogits, ct_tensor *stats);
    void (*pointwise_loss_acc)(ct_pointwise_loss kind, const ct_pointwise_opts *o, const ct_tensor *pred,
                               const ct_tensor *target, ct_tensor *stats);

    /* --- appended: a classifier's per-row argmax and label rank (NULL: ct_op_class_ranks copies the
     * scores and labels to the host and runs the CPU's); see ops_loss.h ------------------------- */
    void (*class_ranks)(const ct_tensor *scores, const ct_tensor *labels, int64_t *pred, int64_t *above);
} ct_backend_ops;

/* The backends' tables. The CUDA backend's (ct_backend_cuda) is not in the library: builds with CUDA
 * make it a module of its own, libctrainer_cuda.so, with the CUDA libraries behind it, which
 * core/ops/backend.c opens the first time the CUDA kind is looked up (so a run on the CPU never maps
 * cuBLAS or cuDNN); reach it through ct_backend_for_kind, which answers NULL where a kind is not
 * compiled in or its module could not be loaded. ct_backend_checked
 * (backends/checked/) serves the CUDA kind instead when CTRAINER_CHECKED_DEVICE is set: host memory
 * the host may not touch outside ops, run by the CPU's kernels, so that tests catch host access to
 * device memory on machines without a GPU. */
extern const ct_backend_ops ct_backend_cpu;
const ct_backend_ops *ct_backend_checked(void);

/* The CPU's tables are one per instruction-set level its kernels are compiled for: ct_backend_cpu
 * is the baseline copy's (the build's own flags), and x86-64 builds add x86-64-v2, v3 and v4
 * (backends/cpu/isa.c). ct_backend_cpu_select reads CT_CPU_ISA and the CPU's features and returns
 * the table to register; core/ops/backend.c calls it once, when the library loads.
 * ct_cpu_isa_choose is its rule: the level CT_CPU_ISA's value `want` (NULL or "": unset) asks of a
 * CPU whose best is `best` (0 in a build without levels), in *level; on an error *level is `best`.
 * ct_cpu_isa_level_name names a level (0 to 4). */
const ct_backend_ops *ct_backend_cpu_select(void);
ct_status ct_cpu_isa_choose(const char *want, int best, int *level);
const char *ct_cpu_isa_level_name(int level);

/* The float GEMMs' engines (backends/cpu/sgemm.c, gemm_engine.c): ctrainer's own kernels, OpenBLAS's
 * sgemm, oneDNN's. */
typedef enum { CT_GEMM_BUILTIN, CT_GEMM_OPENBLAS, CT_GEMM_ONEDNN } ct_cpu_gemm_kind;

/* The rule for the float GEMMs' engine (backends/cpu/gemm_engine.c), applied by
 * ct_backend_cpu_select once the level is known: what CT_CPU_GEMM's value `want` (NULL or "":
 * unset, "builtin", "openblas", "onednn") gets at the kernels' `level` (0 to 4), in *engine. Unset is
 * the built-in engine; oneDNN needs a build with it and a level other than 1 (its kernels need
 * SSE4.1). On an error *engine is CT_GEMM_BUILTIN. */
ct_status ct_cpu_gemm_engine_choose(const char *want, int level, ct_cpu_gemm_kind *engine);

/* The registry, indexed by device kind (core/ops/backend.c): NULL where a kind is not compiled in
 * or its module is not loaded yet. The CPU's entry is settled when the library loads
 * (CTRAINER_CHECKED_DEVICE is read then, and puts the checked device in CUDA's); a module's entry is
 * set once, by ct_backend_load, and never changed after. */
extern const ct_backend_ops *ct_backends[CT_DEVICE_KINDS];

/* A kind served by a module (CUDA): its table, loading the module the first time (thread-safe; one
 * attempt per process). NULL when the build has no such module, when the machine shows no device of
 * the kind (then nothing is loaded: see core/ops/backend.c), or when loading failed;
 * ct_backend_load_error says which, as a sentence (empty once the table is there).
 * ct_backend_symbol finds another entry point of a kind's module (NULL without it). */
const ct_backend_ops *ct_backend_load(ct_device_kind kind);
const char *ct_backend_load_error(ct_device_kind kind);
/* Whether a module for the kind was there (found, or named by CTRAINER_CUDA_MODULE) and failed to
 * load: a broken install or module, not a machine without the device. */
bool ct_backend_module_failed(ct_device_kind kind);
void *ct_backend_symbol(ct_device_kind kind, const char *name);

/* The table of a device kind, or NULL when this build has no backend for it. */
static inline const ct_backend_ops *ct_backend_for_kind(ct_device_kind kind) {
    if ((unsigned)kind >= CT_DEVICE_KINDS) return NULL;
    const ct_backend_ops *b = __atomic_load_n(&ct_backends[kind], __ATOMIC_ACQUIRE); /* a module's is set late */
    return b ? b : ct_backend_load(kind);
}

/* The table of a device's kind (NULL as above). */
static inline const ct_backend_ops *ct_backend_for(ct_device d) { return ct_backend_for_kind(d.kind); }

/* Whether device d's backend has the kernel `member`: layers ask before choosing a fused op that
 * only some backends have. */
#define CT_BACKEND_HAS(d, member) (ct_backend_for(d) != NULL && ct_backend_for(d)->member != NULL)

#ifdef __cplusplus
}
#endif

#endif
