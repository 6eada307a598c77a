/* The "mlp" and "cnn" model presets: the layers they expand into (parameter names and shapes as the
 * equivalent nn.Sequential would have them), a forward pass of the right shape, and every config
 * error with its path. */
#include <string.h>

#include "model/layers.h"
#include "model/model.h"
#include "testlib.h"

static ct_status build(const char *json, const ct_shape *in, ct_model *m) {
    json_error_t err;
    json_t *spec = json_loads(json, 0, &err);
    if (!spec) return ct_error(CT_ERR_CONFIG, "bad test JSON: %s", err.text);
    ct_module *root;
    ct_status s = ct_module_from_json(spec, "model", &root);
    json_decref(spec);
    CT_TRY(s);
    ct_model_options o = {.dtype = CT_F32, .device = CT_CPU, .max_batch = 4, .seed = 1};
    return ct_model_build(m, root, in, &o);
}

static void expect_param(const ct_model *m, const char *name, int ndim, const int64_t *shape) {
    const ct_param *p = ct_params_find(&m->params, name);
    CHECK(p != NULL, "no parameter '%s'", name);
    if (!p) return;
    bool same = p->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = p->shape[i] == shape[i];
    CHECK(same, "'%s' has the wrong shape", name);
}

static void test_mlp(void) {
    ct_shape in = {.ndim = 3, .dims = {1, 28, 28}};
    ct_model m;
    CHECK_OK(build("{\"type\": \"mlp\", \"hidden\": [64, 32], \"num_classes\": 10, \"dropout\": 0.1}", &in, &m));
    /* flatten, linear, relu, dropout, linear, relu, dropout, linear */
    expect_param(&m, "1.weight", 2, (int64_t[]){64, 784});
    expect_param(&m, "1.bias", 1, (int64_t[]){64});
    expect_param(&m, "4.weight", 2, (int64_t[]){32, 64});
    expect_param(&m, "7.weight", 2, (int64_t[]){10, 32});
    CHECK(ct_params_count(&m.params) == 784 * 64 + 64 + 64 * 32 + 32 + 32 * 10 + 10, "mlp parameter count %lld",
          (long long)ct_params_count(&m.params));
    CHECK(m.out_shape.ndim == 1 && m.out_shape.dims[0] == 10, "mlp output shape");
    ct_model_free(&m);
    CHECK_OK(build("{\"type\": \"mlp\", \"num_classes\": 3, \"activation\": \"gelu\"}", &in, &m));
    expect_param(&m, "1.weight", 2, (int64_t[]){3, 784}); /* no hidden layers: a linear model */
    ct_model_free(&m);
}

static void test_cnn(void) {
    ct_shape in = {.ndim = 3, .dims = {1, 28, 28}};
    ct_model m;
    CHECK_OK(build("{\"type\": \"cnn\", \"channels\": [8, 16], \"kernel_size\": 5, \"batch_norm\": true,"
                   " \"hidden\": [32], \"num_classes\": 10}",
                   &in, &m));
    /* conv, bn, relu, pool, conv, bn, relu, pool, flatten, linear, relu, linear */
    expect_param(&m, "0.weight", 4, (int64_t[]){8, 1, 5, 5});
    expect_param(&m, "1.weight", 1, (int64_t[]){8});
    expect_param(&m, "1.running_mean", 1, (int64_t[]){8});
    expect_param(&m, "4.weight", 4, (int64_t[]){16, 8, 5, 5});
    expect_param(&m, "9.weight", 2, (int64_t[]){32, 16 * 7 * 7});
    expect_param(&m, "11.weight", 2, (int64_t[]){10, 32});
    ct_tensor x, y;
    CHECK_OK(ct_tensor_alloc(&x, CT_F32, CT_CPU, 4, (int64_t[]){2, 1, 28, 28}));
    for (int i = 0; i < 2 * 784; i++) ((float *)x.data)[i] = (float)(i % 17) / 17.0f;
    CHECK_OK(ct_model_forward(&m, &x, &y));
    CHECK(y.ndim == 2 && y.shape[0] == 2 && y.shape[1] == 10, "cnn output shape");
    ct_tensor_free(&x);
    ct_model_free(&m);
}

static void test_errors(void) {
    ct_shape in = {.ndim = 3, .dims = {1, 28, 28}};
    ct_model m;
    CHECK_ERR(build("{\"type\": \"mlp\", \"hidden\": [64]}", &in, &m), CT_ERR_CONFIG,
              "model: missing required key 'num_classes'");
    CHECK_ERR(build("{\"type\": \"mlp\", \"hidden\": [64, 0], \"num_classes\": 10}", &in, &m), CT_ERR_CONFIG,
              "model.hidden[1]: expected a positive integer");
    CHECK_ERR(build("{\"type\": \"mlp\", \"hidden\": 64, \"num_classes\": 10}", &in, &m), CT_ERR_CONFIG,
              "model.hidden: expected a list of positive integers");
    CHECK_ERR(build("{\"type\": \"mlp\", \"num_classes\": 10, \"activation\": \"relu6\"}", &in, &m), CT_ERR_CONFIG,
              "model.activation: unknown activation 'relu6', did you mean 'relu'?");
    CHECK_ERR(build("{\"type\": \"mlp\", \"num_classes\": 10, \"dropout\": 1.0}", &in, &m), CT_ERR_CONFIG,
              "model.dropout: expected a value in [0, 1)");
    CHECK_ERR(build("{\"type\": \"mlp\", \"num_classes\": 10, \"hiden\": [3]}", &in, &m), CT_ERR_CONFIG,
              "unknown key 'hiden', did you mean 'hidden'?");
    CHECK_ERR(build("{\"type\": \"cnn\", \"num_classes\": 10}", &in, &m), CT_ERR_CONFIG,
              "model: missing required key 'channels'");
    CHECK_ERR(build("{\"type\": \"cnn\", \"channels\": [], \"num_classes\": 10}", &in, &m), CT_ERR_CONFIG,
              "model.channels: expected at least one layer");
    CHECK_ERR(build("{\"type\": \"cnn\", \"channels\": [4], \"kernel_size\": 4, \"num_classes\": 10}", &in, &m),
              CT_ERR_CONFIG, "model.kernel_size: expected a positive odd integer (same padding), got 4");
    /* five 2x2 poolings do not fit a 28x28 image: the pooling layer says so, with its path */
    CHECK(build("{\"type\": \"cnn\", \"channels\": [2, 2, 2, 2, 2], \"num_classes\": 10}", &in, &m) != CT_OK,
          "a CNN that pools 28x28 five times was built");
}

int main(void) {
    ct_test_begin("test_presets");
    test_mlp();
    test_cnn();
    test_errors();
    return ct_test_finish();
}
