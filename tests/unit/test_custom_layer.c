/* The layer an application defines in examples/swish_layer.c (Swish with a learnable slope per
 * feature): its backward, the part a layer's author gets wrong, against central finite differences
 * in float64 for the input and the slope, on [B, F] and [B, T, F] inputs and with slopes of either
 * sign; its JSON reader registered with ct_register_module_type and used by name inside a
 * "sequential", and named in the "did you mean" of a misspelt type. The example's training run is
 * example.custom_layer. */
#include <string.h>

#include "model/layers.h"
#include "model/model.h"
#include "swish_layer.h"
#include "testlib.h"

static ct_rng rng;

static void gradients(void) {
    const double betas[] = {1.0, 0.37, -1.6};
    for (size_t i = 0; i < sizeof betas / sizeof betas[0]; i++) {
        ct_gradcheck_opts o = ct_gradcheck_defaults(2 + (int64_t)ct_rng_below(&rng, 4));
        o.input_scale = 3; /* into the sigmoid's curved part and its tails */
        ct_module *m;
        CHECK_OK(swish_create(0, betas[i], &m));
        ct_shape in = {.ndim = 1, .dims = {7}};
        char label[64];
        snprintf(label, sizeof label, "swish [B, 7], beta %g", betas[i]);
        ct_gradcheck_module(label, m, &in, &o);
        CHECK_OK(swish_create(5, betas[i], &m));
        ct_shape seq = {.ndim = 2, .dims = {3, 5}};
        snprintf(label, sizeof label, "swish [B, 3, 5], beta %g", betas[i]);
        ct_gradcheck_module(label, m, &seq, &o);
    }
}

static void registration(void) {
    json_error_t err;
    json_t *spec = json_loads("{\"type\": \"sequential\", \"layers\": [{\"type\": \"linear\", \"out_features\": 6},"
                              " {\"type\": \"swish\", \"beta\": 0.5}, {\"type\": \"linear\", \"out_features\": 3}]}",
                              0, &err);
    CT_ASSERT(spec);
    ct_module *m = NULL;
    CHECK_ERR(ct_module_from_json(spec, "model", &m), CT_ERR_CONFIG, "unknown layer type 'swish'");
    CHECK_OK(ct_register_module_type("swish", swish_from_json));
    CHECK_OK(ct_module_from_json(spec, "model", &m));
    if (m) {
        CHECK(m->n_children == 3 && strcmp(m->children[1]->ops->type, "swish") == 0, "the sequential's layers");
        ct_module_destroy(m);
    }
    json_decref(spec);
    spec = json_loads("{\"type\": \"swsh\"}", 0, &err);
    CHECK_ERR(ct_module_from_json(spec, "model.layers[1]", &m), CT_ERR_CONFIG, "did you mean 'swish'");
    json_decref(spec);
    spec = json_loads("{\"type\": \"swish\", \"betta\": 2}", 0, &err);
    CHECK_ERR(ct_module_from_json(spec, "model.layers[1]", &m), CT_ERR_CONFIG, "betta", "beta");
    json_decref(spec);
}

int main(void) {
    ct_test_begin("test_custom_layer");
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    gradients();
    registration();
    return ct_test_finish();
}
