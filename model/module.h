/* Modules: the layer vtable, and the one wrapper through which the core calls every layer.
 *
 * A layer is a struct whose first member is a ct_module; its `ops` table says how it behaves. The
 * lifecycle, driven by ct_model_build (model.h), is:
 *   infer   - given the per-sample input shape, check it and compute the per-sample output shape;
 *   declare - name its parameters and buffers (shapes now known); the store lays them out in one
 *             flat parameter buffer and one flat gradient buffer and binds each declared tensor;
 *   init    - PyTorch's default initialisation (reset_parameters), from a seeded generator;
 *   reserve - allocate its output and input-gradient buffers for the largest batch from the arena;
 *   forward / backward - per batch, no allocation; backward ACCUMULATES parameter gradients.
 * A NULL member means "nothing to do" (or, for forward/backward of a container, "run the children").
 *
 * The table starts with its size and members are only ever appended, so a layer compiled against an
 * older header keeps working. `size` and `type` are required, and `forward` for a layer without
 * children: ct_model_build checks every module of the tree first (ct_module_check). Applications add layers by writing such a table (see examples/). */
#ifndef CT_MODULE_H
#define CT_MODULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/arena.h"
#include "core/rng.h"
#include "core/tensor.h"

typedef struct ct_module ct_module;
struct ct_pool2d_geom; /* core/ops/ops_conv.h */
struct json_t;          /* jansson.h */
typedef struct ct_param_store ct_param_store;

/* Called after the backward of a module that has parameters (m->grad_lo, m->grad_hi give where
 * its subtree's gradients lie in the flat buffer); a non-OK status stops the backward pass. */
typedef ct_status (*ct_grads_ready_fn)(void *ctx, const ct_module *m);

/* Per-step context shared by every module of a model: what counter-based randomness is keyed by,
 * and who wants to know when gradients are done (data parallelism sends them while backward goes on). */
typedef struct ct_step_ctx {
    uint64_t seed;          /* run seed */
    uint64_t step;          /* global step (or evaluation call) */
    int64_t sample_offset;  /* global position of row 0 of this batch in the epoch's order */
    ct_grads_ready_fn grads_ready; /* NULL: nobody listens */
    void *grads_ready_ctx;
    /* Integer model inputs whose range the host knows (ct_model_set_known_ids): numel ids of dtype
     * at data on the model's device, all in [min, max]. data NULL: none. */
    struct ct_known_ids {
        const void *data;
        ct_dtype dtype;
        int64_t numel, min, max;
    } known_ids;
} ct_step_ctx;

/* Buffers placed after the tree is reserved, for two kinds of module whose descendants' buffers
 * need not outlive them, so that all such modules' descendants share one region:
 *  - below a module that sets shares_backward (a GPT block), backward buffers (ct_reserve_backward)
 *    are written and read only inside their module's backward pass, or passed to the module before
 *    it (an input gradient), so their lifetimes end with the sharing module's backward;
 *  - below a module that gradient checkpointing recomputes (`recompute` below), activations
 *    (ct_reserve_activation) are made again by the module's second forward before its backward.
 * While ct_module_reserve reserves such a module's children, their buffers of that kind get offsets
 * in the pool's current scope instead of arena memory, and ct_buffer_pool_bind, once the tree is
 * reserved, takes the largest scope from the arena and points every pending tensor into it. What a
 * framework that frees between layers gains, for a model whose buffers are reserved once. */
typedef struct ct_buffer_pool {
    bool open;          /* reserving the children of a sharing (or recomputed) module */
    const ct_module *owner; /* that module: its own buffers stay out of the scope unless it asks */
    size_t offset;      /* the open scope's next free byte */
    size_t size;        /* the largest scope's bytes */
    struct ct_buffer_pending *pending;
    int n_pending, cap_pending;
    const char *base;   /* the region, once bound */
} ct_buffer_pool;

/* Gradient checkpointing's state, one per model (ct_model_set_gradient_checkpointing): which
 * recomputed module's forward the shared activation region holds now, so that the last module's
 * backward, run right after its own forward, need not make it again. */
typedef struct ct_recompute_state {
    const ct_module *holder; /* NULL: nobody's (a backward consumed them, or nothing ran yet) */
    const char *base;        /* the region [base, base + size): a recomputed module's output must */
    size_t size;             /* lie outside it, or the next module's forward would overwrite it */
} ct_recompute_state;

/* What `reserve` needs: where to get memory, what type and device, how large a batch. */
typedef struct ct_reserve_ctx {
    ct_arena *arena;
    int64_t max_batch;
    ct_buffer_pool *backward;   /* NULL: backward buffers come from the arena, one each */
    ct_buffer_pool *recompute;  /* NULL: activations come from the arena, one each */
    const ct_module *module;    /* whose reserve runs (set by ct_module_reserve) */
} ct_reserve_ctx;

typedef struct ct_module_ops {
    size_t size; /* sizeof(ct_module_ops) when the table was written */
    const char *type;
    ct_status (*infer)(ct_module *m, const ct_shape *in, ct_shape *out);
    ct_status (*declare)(ct_module *m, ct_param_store *ps);
    void (*init)(ct_module *m, ct_rng *rng);
    ct_status (*reserve)(ct_module *m, const ct_reserve_ctx *ctx);
    /* y: a view of the module's output for x's batch (the module owns the memory). */
    ct_status (*forward)(ct_module *m, const ct_tensor *x, ct_tensor *y);
    /* dy: gradient of the output; dx (NULL when the caller needs none): a view of the gradient of x. */
    ct_status (*backward)(ct_module *m, const ct_tensor *dy, ct_tensor *dx);
    void (*destroy)(ct_module *m);
    /* Asked by a Sequential, after infer, for the activation module that follows this one: return
     * true when this layer applies `act` to its output itself (forward writes act(y), backward takes
     * the gradient of act(y)), while the output is still in cache, so the activation module only
     * passes it through. CT_ACT_NONE undoes it. NULL: the layer never does. */
    bool (*fuse_activation)(ct_module *m, int act);
    /* Asked by a Sequential, after fuse_activation, for a max-pooling layer that follows this one
     * (past an activation this layer applies itself): return true when this layer pools its output
     * with `pool` itself, so its output (and output gradient) take the pooled shape and the pooling
     * module only passes them through. NULL: the layer never does. */
    bool (*fuse_maxpool)(ct_module *m, const struct ct_pool2d_geom *pool);
    /* The layer's JSON spec, which its registered reader (model/layers.h) builds the same layer from:
     * {"type": ..., its keys}; containers list their children's (ct_module_to_json). Saved models
     * store the model's (model/model_io.h), so ct_model_from_pretrained rebuilds any model made of
     * layers that have it, built from JSON or from C. NULL: the model is saved without its
     * architecture. */
    ct_status (*to_json)(const ct_module *m, struct json_t **out);
    /* FLOPs of the matrix products of one forward pass over one sample (2 per multiply-add), known
     * after infer, not counting the children's (ct_module_forward_flops adds those). What MFU figures
     * count (llm.c, nanoGPT: a training step is three forward passes' worth, 6N per token plus
     * attention): elementwise work, norms and pooling are left out. NULL: none of its own. */
    double (*forward_flops)(const ct_module *m);
    /* forward on x + residual, writing the sum to *sum (a buffer of the caller's, x's shape) too: a
     * residual stream's add done by the layer that reads the new stream, in its own pass over it. The
     * same results as ct_op_add into sum and forward on sum. NULL: the layer has no such pass
     * (ct_module_forward_residual then does the two). */
    ct_status (*forward_residual)(ct_module *m, const ct_tensor *x, const ct_tensor *residual, ct_tensor *sum,
                                  ct_tensor *y);
    /* backward that writes dx = dresidual + the gradient of the input to *dx (a buffer of the
     * caller's): the gradient the stream's sum gets by the residual path too, added as the layer
     * writes its own. The same results as backward and ct_op_add after it. NULL: as forward_residual. */
    ct_status (*backward_residual)(ct_module *m, const ct_tensor *dy, const ct_tensor *dresidual, ct_tensor *dx);
    /* How many leading entries of the output's last dimension are classes a label may name, where the
     * others are padding no label may name (a GPT's padded vocabulary: vocab_size of its
     * padded_vocab_size logits, the rest -inf). Asked of a model's root after infer
     * (ct_model_output_classes). NULL: every entry is a class. */
    int64_t (*output_classes)(const ct_module *m);
} ct_module_ops;

struct ct_module {
    const ct_module_ops *ops;
    char local_name[48];  /* name inside its parent ("0", "fc1"); "" for a model's root */
    char name[256];       /* dotted path from the root, set by ct_model_build ("layers.0") */
    bool training;
    ct_module **children; /* owned; containers fill them */
    int n_children;
    /* Set before infer: */
    ct_dtype dtype;       /* compute dtype of the model (f32, or f64 for reference checks) */
    ct_device device;
    ct_dtype in_dtype;    /* dtype the input must have; infer may change it (embedding takes ids) */
    const ct_step_ctx *step_ctx;
    /* Set by ct_module_infer: */
    ct_shape in_shape, out_shape;
    int64_t max_batch;
    bool need_input_grad; /* false where nothing before it can use a gradient (the first layer): skip dx */
    int64_t batch;        /* rows of the last forward, which backward must match */
    /* Set by ct_module_declare and ct_model_build: the parameters this subtree declared (indices
     * into the store) and the element range of their gradients in the flat buffer (lo == hi: none). */
    int param_first, param_end;
    int64_t grad_lo, grad_hi;
    /* Set by a layer's constructor: the backward buffers of its descendants live only during its own
     * backward, so they may share memory with other such modules' (see ct_buffer_pool). Its own
     * buffers are reserved as usual. */
    bool shares_backward;
    /* Set by a layer's constructor: running its forward a second time on the same input, with the
     * same step context, before its backward gives the same output and the same saved state, its
     * output is a buffer of its own (not a descendant's), and nothing but its own backward reads its
     * descendants' activations. Gradient checkpointing may then keep only its input and output and
     * make its descendants' activations again in its backward (a GPT block; a batch norm's running
     * statistics would be updated twice, so a module with one below it must not set this). */
    bool recomputable;
    /* Set by ct_model_set_gradient_checkpointing on the outermost recomputable modules: the model's
     * state, and the input of the last forward, which its backward runs the forward on again. */
    ct_recompute_state *recompute;
    struct ct_recompute_input {
        ct_tensor x;
        bool training;
        uint64_t seed, step;
        int64_t sample_offset;
    } recompute_input; /* what its last forward ran on, and in which mode and step */
};

/* y = m(x + residual), with x + residual written to sum (x's shape, the caller's buffer): m's
 * forward_residual, or ct_op_add and ct_module_forward where m has none (and where gradient
 * checkpointing recomputes m, which keeps one input). Checked and recorded as ct_module_forward. */
ct_status ct_module_forward_residual(ct_module *m, const ct_tensor *x, const ct_tensor *residual, ct_tensor *sum,
                                     ct_tensor *y);
/* dx = dresidual + the gradient of m's input (the caller's buffer), after
 * ct_module_forward_residual: m's backward_residual, or ct_module_backward and ct_op_add. Checked
 * and reported (DDP's gradients-ready) as ct_module_backward. */
ct_status ct_module_backward_residual(ct_module *m, const ct_tensor *dy, const ct_tensor *dresidual, ct_tensor *dx);
/* m's fuse_activation, or false when its table has none (or predates the member). */
bool ct_module_fuse_activation(ct_module *m, int act);
/* m's fuse_maxpool, likewise. */
bool ct_module_fuse_maxpool(ct_module *m, const struct ct_pool2d_geom *pool);
/* m's output_classes, or -1 when its table has none (or predates the member). */
int64_t ct_module_output_classes(const ct_module *m);
/* Whether m or a descendant may hold parameters (its table declares some): a gradient that reaches
 * only modules for which this is false has nobody to update. */
bool ct_module_may_have_params(const ct_module *m);
/* The matrix-product FLOPs of one forward pass over one sample through m and its descendants (see
 * forward_flops above); after infer. */
double ct_module_forward_flops(const ct_module *m);
/* Initialises the base of a new module (call from a layer's constructor). */
void ct_module_base_init(ct_module *m, const ct_module_ops *ops);
/* Checks the table of m and of every descendant (core/vtable.h): CT_ERR_INVALID_ARG naming the layer,
 * the table and the fix when ops is NULL, its size is 0 or too small, type is NULL, or a leaf has no
 * forward. */
ct_status ct_module_check(const ct_module *m);
/* Appends a child (taking ownership) under the given local name (NULL: its index). */
ct_status ct_module_add_child(ct_module *parent, ct_module *child, const char *local_name);

/* The wrappers: validate, call the hook, prefix errors with "<type> '<name>': ". */
ct_status ct_module_infer(ct_module *m, const ct_shape *in, ct_shape *out);
ct_status ct_module_declare(ct_module *m, ct_param_store *ps);
void ct_module_init(ct_module *m, ct_rng *rng);
ct_status ct_module_reserve(ct_module *m, const ct_reserve_ctx *ctx);
ct_status ct_module_forward(ct_module *m, const ct_tensor *x, ct_tensor *y);
/* Whether every id of ids, given to m, is known to lie in [0, limit) without reading it: ids is the
 * model input whose range the host recorded (ct_model_set_known_ids; same memory and count). A layer
 * that must check its ids (an embedding) skips its device check then, which on a GPU would wait for
 * the device; otherwise it checks as before. */
bool ct_module_ids_known_below(const ct_module *m, const ct_tensor *ids, int64_t limit);
ct_status ct_module_backward(ct_module *m, const ct_tensor *dy, ct_tensor *dx);
void ct_module_destroy(ct_module *m);
/* Marks m and its descendants as having no activation buffers (after a failed reserve). */
void ct_module_reserve_clear(ct_module *m);
/* Sets training mode on m and all its descendants. */
void ct_module_train(ct_module *m, bool training);
/* Sets dtype, device and step context on m and all its descendants. */
void ct_module_configure(ct_module *m, ct_dtype dt, ct_device dev, const ct_step_ctx *ctx);
/* Assigns dotted names from local names, starting at m (whose full name is prefix). */
void ct_module_assign_names(ct_module *m, const char *prefix);

/* Reserves an activation tensor of [max_batch, shape...]: from the arena, or, inside the subtree of a
 * module that gradient checkpointing recomputes, in the shared region placed when the tree is
 * reserved (out->data is NULL until then). */
ct_status ct_reserve_activation(const ct_reserve_ctx *ctx, ct_dtype dt, ct_device dev, const ct_shape *shape,
                                ct_tensor *out);
/* Reserves a backward buffer of [max_batch, shape...]: a tensor that only the module's backward writes
 * and that nothing reads after the backward of the module before it (input gradients, scratch of
 * the backward). Inside a sharing module's subtree its memory is placed when the tree is reserved
 * (out->data is NULL until then), else it is ct_reserve_activation's. */
ct_status ct_reserve_backward(const ct_reserve_ctx *ctx, ct_dtype dt, ct_device dev, const ct_shape *shape,
                              ct_tensor *out);
/* A module's own buffers that live only inside its subtree's time, for a module that opens a scope:
 *  - ct_reserve_scoped_activation: an activation of its own that only its own forward writes and
 *    that nothing reads after its backward (say a residual sum a child normalises, which the child
 *    keeps as its input): in the shared region when gradient checkpointing recomputes the module,
 *    else as ct_reserve_activation places it;
 *  - ct_reserve_scoped_backward: a buffer its own backward writes and reads and nothing reads after
 *    (never its input gradient): in its sharing scope when it shares_backward, else as
 *    ct_reserve_backward places it. */
ct_status ct_reserve_scoped_activation(const ct_reserve_ctx *ctx, ct_dtype dt, ct_device dev, const ct_shape *shape,
                                       ct_tensor *out);
ct_status ct_reserve_scoped_backward(const ct_reserve_ctx *ctx, ct_dtype dt, ct_device dev, const ct_shape *shape,
                                     ct_tensor *out);
/* After the whole tree is reserved: takes the shared region from arena and points every pending
 * buffer into it. */
ct_status ct_buffer_pool_bind(ct_buffer_pool *pool, ct_arena *arena);
/* Releases the pool's bookkeeping (its memory is the arena's). */
void ct_buffer_pool_free(ct_buffer_pool *pool);

#endif
