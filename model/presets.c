/* The model presets of run configs: "mlp" and "cnn", written as a few numbers and expanded into the
 * equivalent "sequential" spec, so they have PyTorch nn.Sequential's parameter names
 * (layers.0.weight, ...) and every layer's own validation.
 *
 *   {"type": "mlp", "hidden": [256, 128], "num_classes": 10, "activation": "relu", "dropout": 0}
 *       flatten, then Linear + activation (+ dropout) per hidden size, then Linear(num_classes)
 *   {"type": "cnn", "channels": [32, 64], "kernel_size": 3, "batch_norm": false, "hidden": [128],
 *    "num_classes": 10, "activation": "relu", "dropout": 0}
 *       per channel count: Conv2d (same padding) [+ BatchNorm2d] + activation + MaxPool2d(2), then
 *       flatten and the mlp head. */
#include <stdio.h>
#include <string.h>

#include "core/json.h"
#include "model/layers.h"

static const char *const ACTIVATIONS[] = {"relu", "gelu", "tanh", "sigmoid", NULL};

/* Reads a list of positive integers at spec[key]; *out is a borrowed array. */
static ct_status positive_list(const json_t *spec, const char *path, const char *key, bool required,
                               const json_t **out) {
    const json_t *v = json_object_get(spec, key);
    *out = v;
    if (!v) return required ? ct_error(CT_ERR_CONFIG, "%s: missing required key '%s'", path, key) : CT_OK;
    if (!json_is_array(v)) return ct_error(CT_ERR_CONFIG, "%s.%s: expected a list of positive integers", path, key);
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *e = json_array_get(v, i);
        if (!json_is_integer(e) || json_integer_value(e) <= 0)
            return ct_error(CT_ERR_CONFIG, "%s.%s[%zu]: expected a positive integer", path, key, i);
    }
    return CT_OK;
}

static ct_status append(json_t *layers, json_t *layer) {
    if (!layer || json_array_append_new(layers, layer) != 0) return ct_error(CT_ERR_NOMEM, "model preset: out of memory");
    return CT_OK;
}

/* The classifier head shared by both presets: hidden Linear + activation (+ dropout), then the output. */
static ct_status add_head(json_t *layers, const json_t *spec, const char *path, const char *activation) {
    const json_t *hidden;
    int64_t classes;
    double dropout;
    CT_TRY(positive_list(spec, path, "hidden", false, &hidden));
    CT_TRY(ct_json_int(spec, path, "num_classes", true, 0, &classes));
    CT_TRY(ct_json_real(spec, path, "dropout", false, 0.0, &dropout));
    if (classes <= 0) return ct_error(CT_ERR_CONFIG, "%s.num_classes: expected a positive integer", path);
    if (!(dropout >= 0 && dropout < 1)) return ct_error(CT_ERR_CONFIG, "%s.dropout: expected a value in [0, 1)", path);
    for (size_t i = 0; hidden && i < json_array_size(hidden); i++) {
        CT_TRY(append(layers, json_pack("{s:s, s:O}", "type", "linear", "out_features", json_array_get(hidden, i))));
        CT_TRY(append(layers, json_pack("{s:s}", "type", activation)));
        if (dropout > 0) CT_TRY(append(layers, json_pack("{s:s, s:f}", "type", "dropout", "p", dropout)));
    }
    return append(layers, json_pack("{s:s, s:I}", "type", "linear", "out_features", (json_int_t)classes));
}

static ct_status activation_of(const json_t *spec, const char *path, const char **out) {
    CT_TRY(ct_json_string(spec, path, "activation", false, "relu", out));
    for (int i = 0; ACTIVATIONS[i]; i++)
        if (strcmp(*out, ACTIVATIONS[i]) == 0) return CT_OK;
    const char *hint = ct_closest_word(*out, ACTIVATIONS);
    return ct_error(CT_ERR_CONFIG, "%s.activation: unknown activation '%s'%s%s%s", path, *out,
                    hint ? ", did you mean '" : " (relu, gelu, tanh or sigmoid)", hint ? hint : "", hint ? "'?" : "");
}

/* Builds the sequential spec and the module from it. Takes `layers`. */
static ct_status build(json_t *layers, const char *path, ct_status s, ct_module **out) {
    if (s != CT_OK) {
        json_decref(layers);
        return s;
    }
    json_t *seq = json_pack("{s:s, s:o}", "type", "sequential", "layers", layers);
    if (!seq) return ct_error(CT_ERR_NOMEM, "model preset: out of memory");
    s = ct_sequential_from_json(seq, path, out);
    json_decref(seq);
    return s;
}

ct_status ct_mlp_from_json(const json_t *spec, const char *path, ct_module **out) {
    static const char *const keys[] = {"type", "hidden", "num_classes", "activation", "dropout", NULL};
    CT_TRY(ct_json_check_keys(spec, path, keys));
    const char *activation;
    CT_TRY(activation_of(spec, path, &activation));
    json_t *layers = json_array();
    if (!layers) return ct_error(CT_ERR_NOMEM, "model preset: out of memory");
    ct_status s = append(layers, json_pack("{s:s}", "type", "flatten"));
    if (s == CT_OK) s = add_head(layers, spec, path, activation);
    return build(layers, path, s, out);
}

ct_status ct_cnn_from_json(const json_t *spec, const char *path, ct_module **out) {
    static const char *const keys[] = {"type",       "channels", "kernel_size", "batch_norm", "hidden",
                                       "num_classes", "activation", "dropout",   NULL};
    CT_TRY(ct_json_check_keys(spec, path, keys));
    const char *activation;
    const json_t *channels;
    int64_t k;
    bool bn;
    CT_TRY(activation_of(spec, path, &activation));
    CT_TRY(positive_list(spec, path, "channels", true, &channels));
    CT_TRY(ct_json_int(spec, path, "kernel_size", false, 3, &k));
    CT_TRY(ct_json_bool(spec, path, "batch_norm", false, false, &bn));
    if (k <= 0 || k % 2 == 0)
        return ct_error(CT_ERR_CONFIG, "%s.kernel_size: expected a positive odd integer (same padding), got %lld", path,
                        (long long)k);
    if (json_array_size(channels) == 0) return ct_error(CT_ERR_CONFIG, "%s.channels: expected at least one layer", path);
    json_t *layers = json_array();
    if (!layers) return ct_error(CT_ERR_NOMEM, "model preset: out of memory");
    ct_status s = CT_OK;
    for (size_t i = 0; s == CT_OK && i < json_array_size(channels); i++) {
        s = append(layers, json_pack("{s:s, s:O, s:I, s:I}", "type", "conv2d", "out_channels",
                                     json_array_get(channels, i), "kernel_size", (json_int_t)k, "padding",
                                     (json_int_t)(k / 2)));
        if (s == CT_OK && bn) s = append(layers, json_pack("{s:s}", "type", "batchnorm2d"));
        if (s == CT_OK) s = append(layers, json_pack("{s:s}", "type", activation));
        if (s == CT_OK) s = append(layers, json_pack("{s:s, s:i}", "type", "maxpool2d", "kernel_size", 2));
    }
    if (s == CT_OK) s = append(layers, json_pack("{s:s}", "type", "flatten"));
    if (s == CT_OK) s = add_head(layers, spec, path, activation);
    return build(layers, path, s, out);
}
