/* Sequential: children applied in order (nn.Sequential); children are named by index, so the
 * parameters of a "layers" Sequential read "layers.0.weight" as in PyTorch, unless a layer's spec
 * (or the C code that built it) names it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "model/layers.h"

static ct_status infer(ct_module *m, const ct_shape *in, ct_shape *out) {
    ct_shape cur = *in;
    /* A child needs its input's gradient when a module before it may hold parameters or the sequence's
     * caller wants its own: a first linear layer after a flatten computes no dx (a third of the MLP's
     * backward), and the parameter-free layers ahead of it keep no gradient buffers. */
    bool grad_flows = m->need_input_grad;
    for (int i = 0; i < m->n_children; i++) {
        ct_module *c = m->children[i];
        c->need_input_grad = grad_flows;
        grad_flows = grad_flows || ct_module_may_have_params(c);
        if (i > 0) c->in_dtype = c->dtype; /* only the first child sees the model's input dtype */
        CT_TRY(ct_module_infer(c, &cur, &cur));
    }
    /* A layer that applies the activation after it itself does so while its output is in cache, and
     * may then pool it too: the modules in between pass the pooled output (and its gradient) through. */
    for (int i = 0; i + 1 < m->n_children; i++) ct_activation_fuse(m->children[i], m->children[i + 1]);
    for (int i = 0; i + 1 < m->n_children; i++) {
        int p = i + 1;
        if (ct_activation_is_fused(m->children[p]) && p + 1 < m->n_children) p++;
        if (!ct_maxpool2d_fuse(m->children[i], m->children[p])) continue;
        for (int k = i + 1; k <= p; k++) m->children[k]->in_shape = m->children[p]->out_shape;
        for (int k = i + 1; k < p; k++) m->children[k]->out_shape = m->children[p]->out_shape;
        i = p; /* the pooling layer is taken: asking it of the activation would undo this */
    }
    /* The input dtype of a sequence is that of its first child (token ids for an embedding). */
    if (m->n_children > 0) m->in_dtype = m->children[0]->in_dtype;
    *out = cur;
    return CT_OK;
}

static ct_status forward(ct_module *m, const ct_tensor *x, ct_tensor *y) {
    /* Separate input and output structs: a module may set *y before it has read *x. */
    ct_tensor cur = *x, next;
    for (int i = 0; i < m->n_children; i++) {
        CT_TRY(ct_module_forward(m->children[i], &cur, &next));
        cur = next;
    }
    *y = cur;
    return CT_OK;
}

static ct_status backward(ct_module *m, const ct_tensor *dy, ct_tensor *dx) {
    ct_tensor cur = *dy, next;
    for (int i = m->n_children - 1; i >= 0; i--) {
        /* the children before one that needs no input gradient hold no parameters (infer) */
        if (!m->children[i]->need_input_grad) return ct_module_backward(m->children[i], &cur, NULL);
        CT_TRY(ct_module_backward(m->children[i], &cur, &next));
        cur = next;
    }
    if (dx) *dx = cur;
    return CT_OK;
}

/* Whether a child's name is the index a sequence gives by default. */
static bool index_named(const ct_module *child, int i) {
    char index[16];
    snprintf(index, sizeof index, "%d", i);
    return strcmp(child->local_name, index) == 0;
}

/* {"type": "sequential", "layers": [each child's spec]}; a child named in C (ct_module_add_child's
 * "fc1") keeps its name as "name" in its spec, so the saved model rebuilds with its parameter names. */
static ct_status to_json(const ct_module *m, json_t **out) {
    json_t *layers = json_array();
    *out = json_pack("{s:s, s:o}", "type", "sequential", "layers", layers);
    if (!*out) return ct_error(CT_ERR_NOMEM, "out of memory");
    for (int i = 0; i < m->n_children; i++) {
        json_t *child;
        ct_status s = ct_module_to_json(m->children[i], &child);
        if (s == CT_OK && !index_named(m->children[i], i) &&
            json_object_set_new(child, "name", json_string(m->children[i]->local_name)) != 0)
            s = ct_error(CT_ERR_NOMEM, "out of memory");
        if (s == CT_OK && json_array_append_new(layers, child) != 0) s = ct_error(CT_ERR_NOMEM, "out of memory");
        if (s != CT_OK) {
            json_decref(*out);
            *out = NULL;
            return s;
        }
    }
    return CT_OK;
}

static const ct_module_ops sequential_ops = {
    .size = sizeof(ct_module_ops), .type = "sequential", .infer = infer, .forward = forward, .backward = backward,
    .to_json = to_json};

ct_status ct_sequential_create(ct_module **out) {
    ct_module *m = calloc(1, sizeof *m);
    if (!m) return ct_error(CT_ERR_NOMEM, "sequential: out of memory");
    ct_module_base_init(m, &sequential_ops);
    *out = m;
    return CT_OK;
}

/* A layer spec's optional "name" (a child named in C, as to_json writes it) into name ("" when
 * absent), and *rest a copy of the spec without it. The name is what parameter names are made of: a
 * word of letters, digits and '_', not an index of another child's, unique in the sequence. */
static ct_status layer_name(const ct_module *seq, const json_t *spec, const char *path, char *name, size_t cap,
                            json_t **rest) {
    name[0] = '\0';
    *rest = NULL;
    const json_t *v = json_is_object(spec) ? json_object_get(spec, "name") : NULL;
    if (!v) return CT_OK;
    const char *text = json_string_value(v);
    size_t n = text ? strlen(text) : 0;
    static const char word[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_";
    if (!text || n == 0 || n >= cap || strspn(text, word) != n)
        return ct_error(CT_ERR_CONFIG, "%s.name: expected a name of 1 to %zu letters, digits or '_'", path, cap - 1);
    if (strspn(text, "0123456789") == n)
        return ct_error(CT_ERR_CONFIG, "%s.name: '%s' is a number, which names a layer by its place", path, text);
    for (int i = 0; i < seq->n_children; i++)
        if (strcmp(seq->children[i]->local_name, text) == 0)
            return ct_error(CT_ERR_CONFIG, "%s.name: '%s' names layer %d too", path, text, i);
    if (!(*rest = json_deep_copy(spec)) || json_object_del(*rest, "name") != 0) {
        json_decref(*rest);
        *rest = NULL;
        return ct_error(CT_ERR_NOMEM, "out of memory");
    }
    snprintf(name, cap, "%s", text);
    return CT_OK;
}

ct_status ct_sequential_from_json(const json_t *spec, const char *path, ct_module **out) {
    static const char *const keys[] = {"type", "layers", NULL};
    CT_TRY(ct_json_check_keys(spec, path, keys));
    json_t *layers = json_object_get(spec, "layers");
    if (!json_is_array(layers)) return ct_error(CT_ERR_CONFIG, "%s.layers: expected a list of layers", path);
    ct_module *seq;
    CT_TRY(ct_sequential_create(&seq));
    for (size_t i = 0; i < json_array_size(layers); i++) {
        char child_path[512];
        snprintf(child_path, sizeof child_path, "%s.layers[%zu]", path, i);
        const json_t *layer = json_array_get(layers, i);
        char name[sizeof seq->local_name];
        json_t *rest = NULL; /* the spec less its "name", for the layer's own reader */
        ct_status s = layer_name(seq, layer, child_path, name, sizeof name, &rest);
        ct_module *child = NULL;
        if (s == CT_OK) s = ct_module_from_json(rest ? rest : layer, child_path, &child);
        json_decref(rest);
        if (s == CT_OK && (s = ct_module_add_child(seq, child, name[0] ? name : NULL)) != CT_OK)
            ct_module_destroy(child); /* not the sequence's yet */
        if (s != CT_OK) {
            ct_module_destroy(seq);
            return s;
        }
    }
    *out = seq;
    return CT_OK;
}
