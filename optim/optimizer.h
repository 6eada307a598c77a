/* Optimizers: the vtable, the parameter groups, named state, and the built-in SGD, Adam and AdamW.
 *
 * An optimizer steps over a model's FLAT parameter and gradient buffers (model/params.h). At creation
 * it splits the trainable parameters into groups the way Hugging Face's Trainer does: parameters
 * without CT_PARAM_NO_DECAY get the configured weight decay, those with it (biases, LayerNorm
 * weights) get none. Buffers (CT_PARAM_BUFFER) live in another flat buffer and are never seen. A group is a list
 * of (offset, count) ranges of the flat buffers, built once; ranges cover exactly the parameters'
 * elements, so the alignment padding between parameters is never read or written and stays zero.
 *
 * State tensors ("exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer") are flat tensors laid
 * out like the parameter buffer, allocated zeroed at creation; with the step count they are all a
 * checkpoint needs: enumerate them with ct_optimizer_state_count/_get, write or read them in place,
 * and restore the count with ct_optimizer_set_step_count. ct_optimizer_step never allocates.
 *
 * The learning rate is an argument of every step, so a scheduler (or the caller) decides it per step;
 * config.learning_rate is the base rate schedulers start from.
 *
 * A shard optimizer (ct_optimizer_create_shard; ZeRO-1, dist/zero.h) is the same thing over one
 * contiguous range of the flat buffers: its params and grads are views of the range, its groups the
 * parameters' ranges within it, its state tensors the range's size (shard_offset, full_numel).
 *
 * Subclassing: embed ct_optimizer as the FIRST member of your struct and give it a const
 * ct_optimizer_ops table. Every member but size and name may be NULL, meaning the exported default:
 * the default step (ct_optimizer_default_step) calls ops->update once per range of each group, so most
 * optimizers only write `update`; the default state enumeration lists the tensors added with
 * ct_optimizer_add_state; the default destroy frees what the base owns and then the struct itself
 * (which must come from malloc). Members are only ever appended; `size` says how many a table has.
 * Recover your struct inside a hook with ct_container_of(opt, my_optimizer, base). */
#ifndef CT_OPTIMIZER_H
#define CT_OPTIMIZER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "core/tensor.h"
#include "model/params.h"

typedef struct ct_optimizer ct_optimizer;

/* --- configuration (Hugging Face TrainingArguments names) ------------------------------------- */

typedef enum ct_optim_kind {
    CT_OPTIM_SGD = 0,
    CT_OPTIM_ADAM = 1,  /* L2 penalty added to the gradient (torch.optim.Adam) */
    CT_OPTIM_ADAMW = 2, /* decoupled weight decay (torch.optim.AdamW) */
} ct_optim_kind;

/* "sgd", "adam" or "adamw" (what optimizer.h5 and messages call it). */
const char *ct_optim_kind_name(ct_optim_kind k);

typedef struct ct_optim_config {
    ct_optim_kind optim;  /* JSON "optim": "sgd" | "adam" | "adamw" (alias "adamw_torch") */
    double learning_rate; /* base rate (>= 0); each step takes its own */
    double weight_decay;  /* >= 0; applies to parameters without CT_PARAM_NO_DECAY */
    double adam_beta1;    /* [0, 1) */
    double adam_beta2;    /* [0, 1) */
    double adam_epsilon;  /* >= 0 */
    bool amsgrad;
    double momentum;  /* SGD, >= 0 */
    double dampening; /* SGD, [0, 1] */
    bool nesterov;    /* SGD; needs momentum > 0 and dampening == 0 */
} ct_optim_config;

/* Hugging Face's defaults: adamw, learning_rate 5e-5, weight_decay 0, betas (0.9, 0.999), epsilon
 * 1e-8; PyTorch's for the rest (momentum 0, dampening 0, no nesterov, no amsgrad). */
ct_optim_config ct_optim_config_default(void);

/* Fills cfg from the keys above found in obj (others are ignored: the training-arguments schema
 * checks unknown keys), starting from ct_optim_config_default(). Wrong types, an unknown optim
 * name (with a "did you mean") and invalid values are CT_ERR_CONFIG naming path.key and the value. */
ct_status ct_optim_config_from_json(const json_t *obj, const char *path, ct_optim_config *cfg);

/* CT_ERR_CONFIG naming the key and the value for anything torch.optim would reject (negative rates,
 * betas outside [0, 1), nesterov without momentum, ...) and for non-finite values. Only the keys
 * the chosen optimizer uses are checked. */
ct_status ct_optim_config_validate(const ct_optim_config *cfg);

/* Builds the optimizer cfg->optim names over the trainable parameters of a finalized store. The
 * store must outlive the optimizer (its flat buffers are used in place). */
ct_status ct_optimizer_create(const ct_optim_config *cfg, ct_param_store *ps, ct_optimizer **out);
/* ct_optim_config_from_json + ct_optimizer_create. */
ct_status ct_optimizer_from_json(const json_t *obj, const char *path, ct_param_store *ps, ct_optimizer **out);

/* Like ct_optimizer_create, over the elements [offset, offset + count) of the store's flat buffers
 * only (a ZeRO shard, see dist/zero.h for the partition): the groups are the parameters' ranges
 * intersected with the shard, the state tensors have `count` elements (element i belongs to flat
 * element offset + i), and a step reads and writes nothing outside the shard. The range may cut
 * through parameters and padding, and may be empty. offset == 0 and count == numel(ps->values) give
 * an optimizer equal to ct_optimizer_create's. CT_ERR_INVALID_ARG for a range outside the buffers. */
ct_status ct_optimizer_create_shard(const ct_optim_config *cfg, ct_param_store *ps, int64_t offset, int64_t count,
                                    ct_optimizer **out);

/* The built-in constructors (cfg->optim must match: SGD, or ADAM/ADAMW). */
ct_status ct_sgd_create(const ct_optim_config *cfg, ct_param_store *ps, ct_optimizer **out);
ct_status ct_adam_create(const ct_optim_config *cfg, ct_param_store *ps, ct_optimizer **out);

/* --- the vtable --------------------------------------------------------------------------------- */

/* A contiguous run of elements in the flat buffers. */
typedef struct ct_optim_range {
    int64_t offset, count;
} ct_optim_range;

/* Parameters sharing hyper-parameters: "decay" and "no_decay", as Hugging Face groups them. */
typedef struct ct_param_group {
    const char *name;
    double weight_decay;
    ct_optim_range *ranges; /* owned, ascending offsets, adjacent parameters merged */
    int n_ranges;
    int64_t numel; /* elements over all ranges */
} ct_param_group;

typedef struct ct_optimizer_ops {
    size_t size; /* sizeof(ct_optimizer_ops) when the table was written */
    const char *name;
    /* One optimizer step with learning rate lr (validated, finite and >= 0). opt->step was already
     * incremented: it is the number of this step, 1 for the first. NULL: ct_optimizer_default_step. */
    ct_status (*step)(ct_optimizer *opt, double lr);
    /* Updates elements [offset, offset + count) of one group; what the default step calls. */
    void (*update)(ct_optimizer *opt, const ct_param_group *group, int64_t offset, int64_t count, double lr);
    /* Named state tensors. NULL: ct_optimizer_default_state_count/_get. */
    int (*state_count)(const ct_optimizer *opt);
    ct_status (*state_get)(ct_optimizer *opt, int i, const char **name, ct_tensor **tensor);
    /* Releases everything. NULL: ct_optimizer_default_destroy. */
    void (*destroy)(ct_optimizer *opt);
    /* Whether update sets each gradient it reads to zero while opt->clear_grads is set (the built-in
     * SGD, Adam and AdamW do, in their one pass); ct_optimizer_step_zero_grad clears them itself for an
     * optimizer without it. */
    bool update_clears_grads;
    /* Whether update skips itself where opt->gate is set and 0 (the built-ins pass it to their op:
     * ops_optim.h), so that the Trainer's step on a GPU can decide on the device whether it applies. */
    bool honours_gate;
} ct_optimizer_ops;

#define CT_OPTIM_MAX_STATE 8

typedef struct ct_optim_state {
    char name[32];
    ct_tensor tensor; /* owned; 1-D, laid out like the flat parameter buffer (like params: the shard's part) */
} ct_optim_state;

struct ct_optimizer {
    const ct_optimizer_ops *ops;
    ct_optim_config config;
    ct_tensor params, grads;  /* the store's flat buffers (views, not owned) */
    ct_param_group groups[2]; /* [0] decay, [1] no_decay */
    int n_groups;
    int64_t step;   /* steps taken (PyTorch's state["step"]) */
    double last_lr; /* the rate of the last step */
    bool clear_grads; /* inside ct_optimizer_step_zero_grad's step: see ct_optimizer_ops.update_clears_grads */
    /* NULL, or a float64 in the parameters' device memory: an update where it is 0 changes nothing
     * (ops_optim.h); set by the Trainer when the step's verdict stays on the device */
    const double *gate;
    ct_optim_state state[CT_OPTIM_MAX_STATE];
    int n_state;
    /* Sharding (ZeRO-1, dist/zero.h). params, grads and every state tensor cover the elements
     * [shard_offset, shard_offset + numel(params)) of the store's flat buffers, which hold full_numel
     * elements; group ranges are offsets into params (so into the shard). An ordinary optimizer has
     * shard_offset 0 and full_numel == numel(params). */
    int64_t shard_offset, full_numel;
    /* Working memory of sharded steps (dist/zero.c's staging for the collectives), allocated once,
     * owned and freed with the base; data is NULL when there is none. */
    ct_tensor scratch;
};

/* Initialises the base of a new optimizer: ops, config, flat views and the groups from the store
 * (weight decay cfg->weight_decay for parameters without CT_PARAM_NO_DECAY, 0 for the others). The
 * store itself is not retained, only views of its flat buffers (ct_optimizer_create_shard relies on
 * this). */
ct_status ct_optimizer_base_init(ct_optimizer *opt, const ct_optimizer_ops *ops, const ct_optim_config *cfg,
                                 ct_param_store *ps);
/* Allocates a zeroed state tensor shaped like the flat parameter buffer, named `name`; *out points
 * at it (valid until destroy). */
ct_status ct_optimizer_add_state(ct_optimizer *opt, const char *name, ct_tensor **out);
/* A view of elements [offset, offset + count) of a flat tensor. */
ct_tensor ct_optimizer_range(const ct_tensor *flat, int64_t offset, int64_t count);

/* --- the wrappers: the only way the core calls an optimizer ----------------------------------- */

/* Increments the step count and updates the parameters from the gradients with learning rate lr.
 * CT_ERR_INVALID_ARG (nothing changed) for a negative or non-finite lr. */
ct_status ct_optimizer_step(ct_optimizer *opt, double lr);
/* ct_optimizer_step, then the gradients it read (opt->grads: the store's whole gradient buffer, or a
 * ZeRO shard's part) set to zero, as ct_params_zero_grad would: in the same pass over them where the
 * step is the default one over every gradient element and the update clears as it reads
 * (update_clears_grads: SGD, Adam, AdamW), so a training loop that clears its gradients after every
 * step reads them once instead of twice. Parameters and state come out as ct_optimizer_step's, bit for
 * bit; on an error (what ct_optimizer_step returns) nothing is cleared. */
ct_status ct_optimizer_step_zero_grad(ct_optimizer *opt, double lr);
/* Whether opt's step skips itself through opt->gate (its default step's update honours it). */
bool ct_optimizer_honours_gate(const ct_optimizer *opt);
const char *ct_optimizer_name(const ct_optimizer *opt);
int ct_optimizer_state_count(const ct_optimizer *opt);
/* The i-th state tensor and its name; write into *tensor to restore a checkpoint. */
ct_status ct_optimizer_state_get(ct_optimizer *opt, int i, const char **name, ct_tensor **tensor);
/* The state tensor called name, or NULL. */
ct_tensor *ct_optimizer_state_find(ct_optimizer *opt, const char *name);
int64_t ct_optimizer_step_count(const ct_optimizer *opt);
/* Restores the step count of a checkpoint (CT_ERR_INVALID_ARG when negative). */
ct_status ct_optimizer_set_step_count(ct_optimizer *opt, int64_t step);
/* NULL is a no-op. */
void ct_optimizer_destroy(ct_optimizer *opt);

/* --- the defaults, for overrides that call "super" ------------------------------------------- */

ct_status ct_optimizer_default_step(ct_optimizer *opt, double lr);
int ct_optimizer_default_state_count(const ct_optimizer *opt);
ct_status ct_optimizer_default_state_get(ct_optimizer *opt, int i, const char **name, ct_tensor **tensor);
void ct_optimizer_default_destroy(ct_optimizer *opt);

#endif
