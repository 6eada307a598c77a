/* Built-in layers: constructors for C callers and the JSON registry for configs.
 *
 * Every constructor allocates a module the caller owns until it is handed to a container or a
 * model. Shapes that can be inferred from the input (in_features, in_channels, num_features) may
 * be given as 0. Parameter names and layouts are PyTorch's, so state dicts map one to one. */
#ifndef CT_LAYERS_H
#define CT_LAYERS_H

#include <jansson.h>

#include "core/ops/ops.h"
#include "model/module.h"

/* --- containers -------------------------------------------------------------------------------- */
ct_status ct_sequential_create(ct_module **out);
/* y = x + inner(x); inner's output shape must equal its input shape. Takes ownership of inner. */
ct_status ct_residual_create(ct_module *inner, ct_module **out);

/* --- dense and shape --------------------------------------------------------------------------- */
ct_status ct_linear_create(int64_t in_features, int64_t out_features, bool bias, ct_module **out);
ct_status ct_activation_create(ct_activation act, ct_module **out);
/* When `next` is an activation module and `prev` can apply its function itself
 * (ct_module_fuse_activation), makes `next` pass its input through; otherwise leaves both applying
 * their own. Sequential calls it for each pair of neighbours after infer. */
void ct_activation_fuse(ct_module *prev, ct_module *next);
/* True when m is an activation module that the layer before it applies (a pass-through). */
bool ct_activation_is_fused(const ct_module *m);
/* Flattens every dimension after the batch (nn.Flatten()). */
ct_status ct_flatten_create(ct_module **out);
ct_status ct_embedding_create(int64_t num_embeddings, int64_t embedding_dim, int64_t padding_idx, ct_module **out);
/* The embedding m's ids come from the module that owns it, which makes them in [0, num_embeddings)
 * itself (a GPT's positions, 0 .. T-1 with T <= n_positions checked at infer): its forward trusts them
 * rather than reading them back to check (on a GPU, a wait for the device each forward). */
void ct_embedding_trust_ids(ct_module *m);

/* --- convolution and pooling ------------------------------------------------------------------- */
typedef struct ct_conv2d_config {
    int64_t in_channels, out_channels;
    int64_t kernel[2], stride[2], padding[2], dilation[2];
    bool bias;
} ct_conv2d_config;
ct_status ct_conv2d_create(const ct_conv2d_config *cfg, ct_module **out);

typedef struct ct_pool2d_config {
    int64_t kernel[2], stride[2], padding[2];
    int64_t dilation[2];      /* max pooling only */
    bool count_include_pad;   /* average pooling only (PyTorch's default: true) */
} ct_pool2d_config;
ct_status ct_maxpool2d_create(const ct_pool2d_config *cfg, ct_module **out);
/* When `pool` is a max-pooling layer and `prev` can pool its output itself
 * (ct_module_fuse_maxpool), makes `pool` pass its input through and returns true; otherwise leaves
 * both as they are. Sequential calls it after ct_activation_fuse, with the layer before the pooling
 * or, past an activation fused into that layer, the one before it. */
bool ct_maxpool2d_fuse(ct_module *prev, ct_module *pool);
ct_status ct_avgpool2d_create(const ct_pool2d_config *cfg, ct_module **out);

/* --- normalisation and regularisation ---------------------------------------------------------- */
ct_status ct_batchnorm2d_create(int64_t num_features, double eps, double momentum, bool affine, ct_module **out);
/* Normalises over the last dimension (normalized_shape = [features]). */
ct_status ct_layernorm_create(int64_t features, double eps, bool elementwise_affine, bool bias, ct_module **out);
ct_status ct_dropout_create(double p, ct_module **out);

/* --- language models ---------------------------------------------------------------------------- */

/* A GPT-2-style decoder (model/gpt.c), nanoGPT's GPT with the names of Hugging Face's GPT2Config:
 * token ids [B, T] (int64, 1 <= T <= n_positions) -> logits [B, T, padded_vocab_size]. */
typedef struct ct_gpt_config {
    int64_t vocab_size;
    /* llm.c's padded_vocab_size (0: vocab_size): the embedding and the head get this many rows, a
     * multiple of 64 or 128 that GEMMs run faster on (50257 -> 50304 for GPT-2); the padding rows
     * start at 0, token ids must stay below vocab_size, and their logits are -inf, so that every
     * softmax (the loss's, a metric's, generation's) gives them probability 0. */
    int64_t padded_vocab_size;
    int64_t n_positions; /* context length (nanoGPT's block_size): the size of the position table */
    int64_t n_embd, n_layer, n_head; /* n_embd a multiple of n_head */
    double dropout;      /* of the embeddings, the attention probabilities and both residual branches */
    bool bias;           /* biases in every Linear and LayerNorm (GPT-2: true) */
    double layer_norm_epsilon;
} ct_gpt_config;
/* GPT-2 124M's sizes (vocab_size 50257, n_positions 1024, n_embd 768, n_layer 12, n_head 12),
 * dropout 0, bias true, layer_norm_epsilon 1e-5. */
ct_gpt_config ct_gpt_config_default(void);
ct_status ct_gpt_create(const ct_gpt_config *cfg, ct_module **out);

/* --- JSON -------------------------------------------------------------------------------------- */

/* Builds a module from its JSON spec ({"type": "linear", "out_features": 10, ...}); errors name
 * the path, e.g. "model.layers[2]". */
ct_status ct_module_from_json(const json_t *spec, const char *path, ct_module **out);

/* m's spec through its to_json member: CT_ERR_UNSUPPORTED naming the layer and its type when m or a
 * descendant has none (an application's layer without to_json). */
ct_status ct_module_to_json(const ct_module *m, json_t **out);

typedef ct_status (*ct_module_from_json_fn)(const json_t *spec, const char *path, ct_module **out);
/* Registers an application's layer type for ct_module_from_json, under a name that is not a built-in
 * one (core/registry.h lists what is refused). Call it before reading configs; fn receives the spec
 * and its JSON path, and its errors should start with that path so run configs can point at them. */
ct_status ct_register_module_type(const char *type, ct_module_from_json_fn fn);

/* The built-in layer types in the registry's order (at most cap names; the count is returned). */
int ct_module_builtin_types(const char **names, int cap);

/* The documentation of a built-in layer type (model/layer_docs.c): a summary, an example spec that
 * builds, and each key its reader takes; docs/models.md is generated from these. */
typedef struct ct_layer_key_doc {
    const char *key, *type, *default_value, *meaning;
} ct_layer_key_doc;
typedef struct ct_layer_doc {
    const char *summary, *example;
    const ct_layer_key_doc *keys; /* ends with a NULL key */
} ct_layer_doc;
/* NULL for a type without an entry (an application's). */
const ct_layer_doc *ct_layer_doc_of(const char *type);
/* docs/models.md's text (*out malloc'd); an error names a built-in type without an entry. */
ct_status ct_layer_docs_markdown(char **out);

/* Each built-in layer's JSON reader (used by the registry). */
ct_status ct_sequential_from_json(const json_t *spec, const char *path, ct_module **out);
/* The presets (model/presets.c): "mlp" and "cnn", expanded into a sequential. */
ct_status ct_mlp_from_json(const json_t *spec, const char *path, ct_module **out);
ct_status ct_cnn_from_json(const json_t *spec, const char *path, ct_module **out);
ct_status ct_residual_from_json(const json_t *spec, const char *path, ct_module **out);
ct_status ct_linear_from_json(const json_t *spec, const char *path, ct_module **out);
ct_status ct_activation_from_json(const json_t *spec, const char *path, ct_module **out);
ct_status ct_flatten_from_json(const json_t *spec, const char *path, ct_module **out);
ct_status ct_embedding_from_json(const json_t *spec, const char *path, ct_module **out);
ct_status ct_conv2d_from_json(const json_t *spec, const char *path, ct_module **out);
ct_status ct_maxpool2d_from_json(const json_t *spec, const char *path, ct_module **out);
ct_status ct_avgpool2d_from_json(const json_t *spec, const char *path, ct_module **out);
ct_status ct_batchnorm2d_from_json(const json_t *spec, const char *path, ct_module **out);
ct_status ct_layernorm_from_json(const json_t *spec, const char *path, ct_module **out);
ct_status ct_dropout_from_json(const json_t *spec, const char *path, ct_module **out);
ct_status ct_gpt_from_json(const json_t *spec, const char *path, ct_module **out);

#endif
