/* The documentation of the built-in layer types: what docs/models.md says, generated from here.
 *
 * One entry per type of the layer registry (model/registry.c): a summary, an example spec that
 * builds, and every key its reader takes with type, default and meaning. ct_layer_docs_markdown
 * writes the page in the registry's order and fails on a built-in type without an entry;
 * unit.test_layer_docs checks that the page is current, that each example builds, and that each
 * reader accepts exactly the keys documented here (so a key added to a reader without a line here
 * fails the test). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/layers.h"

#define END {NULL, NULL, NULL, NULL}

static const ct_layer_key_doc no_keys[] = {END};

static const ct_layer_key_doc sequential_keys[] = {
    {"layers", "list of layers", "required",
     "The layers, applied in order; each is a spec of this page. A layer's optional `\"name\"` (letters, digits, "
     "`_`; what a layer named in C saves as) replaces its index in its parameters' names (`fc1.weight`)."},
    END};

static const ct_layer_key_doc residual_keys[] = {
    {"module", "layer", "one of module or layers", "f in y = x + f(x); its output shape must equal its input's."},
    {"layers", "list of layers", "one of module or layers", "f as a sequential of these layers."},
    END};

static const ct_layer_key_doc linear_keys[] = {
    {"in_features", "int", "inferred", "Input features (the last dimension); inferred from the input when left out."},
    {"out_features", "int", "required", "Output features."},
    {"bias", "bool", "true", "Learn an additive bias."},
    END};

static const ct_layer_key_doc gelu_keys[] = {
    {"approximate", "string", "\"none\"", "\"none\": x * Phi(x), exact; \"tanh\": the tanh approximation (GPT-2's)."},
    END};

static const ct_layer_key_doc embedding_keys[] = {
    {"num_embeddings", "int", "required", "Size of the vocabulary: ids must lie in [0, num_embeddings)."},
    {"embedding_dim", "int", "required", "Size of each embedding vector."},
    {"padding_idx", "int", "none", "An id whose vector stays zero and gets no gradient."},
    END};

static const ct_layer_key_doc conv2d_keys[] = {
    {"in_channels", "int", "inferred", "Input channels; inferred from the input when left out."},
    {"out_channels", "int", "required", "Output channels (filters)."},
    {"kernel_size", "int or [h, w]", "required", "Filter size."},
    {"stride", "int or [h, w]", "1", "Step between filter positions."},
    {"padding", "int or [h, w]", "0", "Zeros added on each side."},
    {"dilation", "int or [h, w]", "1", "Spacing between filter taps."},
    {"bias", "bool", "true", "Learn a bias per output channel."},
    {"groups", "int", "1", "Channel groups (1: every output sees every input channel)."},
    END};

static const ct_layer_key_doc maxpool2d_keys[] = {
    {"kernel_size", "int or [h, w]", "required", "Window size."},
    {"stride", "int or [h, w]", "kernel_size", "Step between windows (null: the kernel size)."},
    {"padding", "int or [h, w]", "0", "Implicit -inf padding on each side."},
    {"dilation", "int or [h, w]", "1", "Spacing between window taps."},
    {"ceil_mode", "bool", "false", "Round the output size up instead of down."},
    END};

static const ct_layer_key_doc avgpool2d_keys[] = {
    {"kernel_size", "int or [h, w]", "required", "Window size."},
    {"stride", "int or [h, w]", "kernel_size", "Step between windows (null: the kernel size)."},
    {"padding", "int or [h, w]", "0", "Implicit zero padding on each side."},
    {"ceil_mode", "bool", "false", "Round the output size up instead of down."},
    {"count_include_pad", "bool", "true", "Count padded zeros in each window's average."},
    END};

static const ct_layer_key_doc batchnorm2d_keys[] = {
    {"num_features", "int", "inferred", "Channels; inferred from the input when left out."},
    {"eps", "float", "1e-05", "Added to the variance before its square root."},
    {"momentum", "float", "0.1", "Weight of the current batch in the running statistics."},
    {"affine", "bool", "true", "Learn a scale and shift per channel."},
    END};

static const ct_layer_key_doc layernorm_keys[] = {
    {"normalized_shape", "int or [n]", "inferred", "Size of the last dimension, which is normalised."},
    {"eps", "float", "1e-05", "Added to the variance before its square root."},
    {"elementwise_affine", "bool", "true", "Learn a scale (and bias) per feature."},
    {"bias", "bool", "true", "With elementwise_affine, learn the bias too."},
    END};

static const ct_layer_key_doc dropout_keys[] = {
    {"p", "float", "0.5", "Probability of zeroing an element in training (the rest scaled by 1 / (1 - p))."},
    END};

static const ct_layer_key_doc mlp_keys[] = {
    {"hidden", "list of int", "[]", "Sizes of the hidden layers (flatten, then Linear + activation per size)."},
    {"num_classes", "int", "required", "Outputs of the last Linear; a run config fills it from the data."},
    {"activation", "string", "\"relu\"", "relu, gelu, tanh or sigmoid."},
    {"dropout", "float", "0", "Dropout after each hidden activation (0: none)."},
    END};

static const ct_layer_key_doc cnn_keys[] = {
    {"channels", "list of int", "required", "Output channels of each conv block (conv, activation, 2x2 max pool)."},
    {"kernel_size", "int", "3", "Odd filter size, padded to keep the size."},
    {"batch_norm", "bool", "false", "BatchNorm2d after each convolution."},
    {"hidden", "list of int", "[]", "Sizes of the hidden Linear layers after flattening."},
    {"num_classes", "int", "required", "Outputs of the last Linear; a run config fills it from the data."},
    {"activation", "string", "\"relu\"", "relu, gelu, tanh or sigmoid."},
    {"dropout", "float", "0", "Dropout after each hidden activation (0: none)."},
    END};

static const ct_layer_key_doc gpt_keys[] = {
    {"vocab_size", "int", "required", "Token ids lie in [0, vocab_size); the output has a logit per id."},
    {"padded_vocab_size", "int", "vocab_size", "Rows of the embedding and logits, rounded up for fast kernels (llm.c's "
     "50304 for 50257); the padding logits are -inf, so they get no probability and no gradient; labels "
     "must stay below vocab_size (checked at the start of a run)."},
    {"n_positions", "int", "1024", "Longest context (learned position embeddings)."},
    {"n_embd", "int", "768", "Width of the residual stream."},
    {"n_layer", "int", "12", "Transformer blocks."},
    {"n_head", "int", "12", "Attention heads (n_embd must be a multiple)."},
    {"dropout", "float", "0", "Dropout on embeddings, attention and MLP outputs."},
    {"bias", "bool", "true", "Biases in the Linear layers and layer norms."},
    {"layer_norm_epsilon", "float", "1e-05", "The layer norms' eps."},
    END};

static const struct {
    const char *type;
    ct_layer_doc doc;
} docs[] = {
    {"sequential",
     {"Layers applied one after the other (nn.Sequential); parameters named `<index>.<name>`, or "
      "`<layer name>.<name>` for a named layer.",
      "{\"type\": \"sequential\", \"layers\": [{\"type\": \"flatten\"}, {\"type\": \"linear\", \"out_features\": 10}]}",
      sequential_keys}},
    {"residual",
     {"A residual connection: y = x + f(x).",
      "{\"type\": \"residual\", \"layers\": [{\"type\": \"linear\", \"out_features\": 8}, {\"type\": \"relu\"}]}",
      residual_keys}},
    {"linear", {"y = x W^T + b over the last dimension (nn.Linear).", "{\"type\": \"linear\", \"out_features\": 8}",
                linear_keys}},
    {"relu", {"max(x, 0), NaN propagated (nn.ReLU).", "{\"type\": \"relu\"}", no_keys}},
    {"gelu", {"x * Phi(x) (nn.GELU).", "{\"type\": \"gelu\", \"approximate\": \"tanh\"}", gelu_keys}},
    {"tanh", {"tanh(x) (nn.Tanh).", "{\"type\": \"tanh\"}", no_keys}},
    {"sigmoid", {"1 / (1 + exp(-x)) (nn.Sigmoid).", "{\"type\": \"sigmoid\"}", no_keys}},
    {"flatten", {"Every dimension after the batch into one (nn.Flatten).", "{\"type\": \"flatten\"}", no_keys}},
    {"embedding",
     {"A lookup table from integer ids to vectors (nn.Embedding).",
      "{\"type\": \"embedding\", \"num_embeddings\": 16, \"embedding_dim\": 8}", embedding_keys}},
    {"conv2d",
     {"2-D convolution over [C, H, W] samples (nn.Conv2d).",
      "{\"type\": \"conv2d\", \"out_channels\": 4, \"kernel_size\": 3, \"padding\": 1}", conv2d_keys}},
    {"maxpool2d", {"2-D max pooling (nn.MaxPool2d).", "{\"type\": \"maxpool2d\", \"kernel_size\": 2}", maxpool2d_keys}},
    {"avgpool2d", {"2-D average pooling (nn.AvgPool2d).", "{\"type\": \"avgpool2d\", \"kernel_size\": 2}", avgpool2d_keys}},
    {"batchnorm2d",
     {"Batch normalisation per channel with running statistics (nn.BatchNorm2d).", "{\"type\": \"batchnorm2d\"}",
      batchnorm2d_keys}},
    {"layernorm", {"Normalisation over the last dimension (nn.LayerNorm).", "{\"type\": \"layernorm\"}", layernorm_keys}},
    {"dropout", {"Zeroes elements in training (nn.Dropout); the identity in evaluation.", "{\"type\": \"dropout\", \"p\": 0.1}",
                 dropout_keys}},
    {"mlp",
     {"Preset: flatten, then Linear + activation (+ dropout) per hidden size, then Linear(num_classes).",
      "{\"type\": \"mlp\", \"hidden\": [256, 128], \"num_classes\": 10}", mlp_keys}},
    {"cnn",
     {"Preset: conv blocks (conv, activation, 2x2 max pool), flatten, hidden Linear layers, Linear(num_classes).",
      "{\"type\": \"cnn\", \"channels\": [8, 16], \"hidden\": [32], \"num_classes\": 10}", cnn_keys}},
    {"gpt",
     {"A GPT-2 style decoder (nanoGPT's): token and position embeddings, pre-norm blocks of causal attention and "
      "MLP, a final layer norm, the output tied to the token embedding. Input: token ids [T] (i64); output: logits "
      "[T, vocab_size].",
      "{\"type\": \"gpt\", \"vocab_size\": 257, \"n_positions\": 64, \"n_embd\": 32, \"n_layer\": 2, \"n_head\": 4}",
      gpt_keys}},
};

const ct_layer_doc *ct_layer_doc_of(const char *type) {
    for (size_t i = 0; i < sizeof docs / sizeof *docs; i++)
        if (strcmp(docs[i].type, type) == 0) return &docs[i].doc;
    return NULL;
}

ct_status ct_layer_docs_markdown(char **out) {
    *out = NULL;
    const char *types[64];
    int n = ct_module_builtin_types(types, 64);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len); /* the page grows in memory */
    if (!f) return ct_error(CT_ERR_NOMEM, "layer docs: out of memory");
    fputs("# Model reference\n\n"
          "The `model` section of a run config is one layer spec: a JSON object with a `\"type\"` and "
          "that type's keys. Containers (`sequential`, `residual`) hold further specs, so a model is a "
          "tree of them; the presets (`mlp`, `cnn`, `gpt`) build a whole model from a few sizes. Sizes "
          "marked \"inferred\" come from the input shape, which the data gives. Parameter names are "
          "PyTorch's module names (`0.weight`, `layers.2.bias`), so weights move to and from PyTorch "
          "as safetensors. Applications add their own types with `ct_register_module_type` "
          "(model/layers.h, examples/custom_layer.c). Errors name the key and its line in the file.\n\n"
          "This file is generated from the layer registry (`model/layer_docs.c`: `build/tests/"
          "test_layer_docs --markdown > docs/models.md`); the unit test `test_layer_docs` fails when it "
          "is out of date or when a reader takes a key this page does not list.\n",
          f);
    for (int i = 0; i < n; i++) {
        const ct_layer_doc *d = ct_layer_doc_of(types[i]);
        if (!d) {
            fclose(f);
            free(buf);
            return ct_error(CT_ERR_STATE, "layer type '%s' has no entry in model/layer_docs.c", types[i]);
        }
        fprintf(f, "\n## `%s`\n\n%s\n\n```json\n%s\n```\n", types[i], d->summary, d->example);
        if (d->keys[0].key) fputs("\n| Key | Type | Default | Meaning |\n|---|---|---|---|\n", f);
        for (const ct_layer_key_doc *k = d->keys; k->key; k++)
            fprintf(f, "| `%s` | %s | %s | %s |\n", k->key, k->type, k->default_value, k->meaning);
    }
    bool ok = !ferror(f);
    if (fclose(f) != 0 || !ok) {
        free(buf);
        return ct_error(CT_ERR_NOMEM, "layer docs: out of memory");
    }
    *out = buf;
    return CT_OK;
}
