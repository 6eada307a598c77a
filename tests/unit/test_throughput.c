/* The throughput figures of a training run: the model FLOPs MFU is computed from and the metrics.
 *  - ct_module_forward_flops counts the matrix products of one forward pass per sample: an MLP's
 *    linear layers and a convolution by their textbook formulas, and a GPT (random sizes, padded
 *    vocabulary) against nanoGPT's MFU count counted independently from the parameter store: a
 *    training step per token is 6 x (the weights of its matrix products, wte's padded rows in, wpe
 *    out) + 12 x n_layer x n_embd x T, and three forward passes must equal that exactly;
 *  - train_tokens_per_second appears with include_tokens_per_second (this process's input elements
 *    per second: samples/s x features) and not without it on the CPU, whose peak is unknown, where
 *    train_mfu never appears;
 *  - with a device whose backend states a peak (the CPU table given one, as a GPU's is), train_mfu is
 *    3 x forward FLOPs x samples trained per second / peak, and tokens per second come with it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops/backend.h"
#include "model/layers.h"
#include "testlib.h"
#include "trainer/trainer.h"
#include "trainer_fixture.h"

static ct_rng rng;

static void test_mlp_and_conv(void) {
    ct_model m;
    CHECK_OK(ct_fixture_mlp_build(&(ct_fixture_mlp){.dim = 784, .classes = 10, .hidden = {256, 128}, .max_batch = 4},
                                  &m));
    double want = 2.0 * (784 * 256 + 256 * 128 + 128 * 10);
    CHECK(ct_module_forward_flops(m.root) == want, "MLP: %.0f forward FLOPs per sample, want %.0f",
          ct_module_forward_flops(m.root), want);
    ct_model_free(&m);

    /* conv 3 -> 8, 5x4 kernel, stride 2, padding 1 on 3 x 17 x 12: output 8 x 8 x 6 */
    ct_module *root, *conv;
    CHECK_OK(ct_sequential_create(&root));
    CHECK_OK(ct_conv2d_create(&(ct_conv2d_config){.in_channels = 3, .out_channels = 8, .kernel = {5, 4},
                                                   .stride = {2, 2}, .padding = {1, 1}, .bias = true},
                              &conv));
    CHECK_OK(ct_module_add_child(root, conv, NULL));
    ct_shape in = {3, {3, 17, 12}};
    CHECK_OK(ct_model_build(&m, root, &in, &(ct_model_options){.max_batch = 2, .seed = 1}));
    int64_t oh = (17 + 2 - 5) / 2 + 1, ow = (12 + 2 - 4) / 2 + 1;
    want = 2.0 * (3 * 5 * 4) * (double)(8 * oh * ow);
    CHECK(m.out_shape.dims[1] == oh && m.out_shape.dims[2] == ow, "conv output %lld x %lld",
          (long long)m.out_shape.dims[1], (long long)m.out_shape.dims[2]);
    CHECK(ct_module_forward_flops(m.root) == want, "conv: %.0f forward FLOPs per sample, want %.0f",
          ct_module_forward_flops(m.root), want);
    ct_model_free(&m);
}

static void test_gpt(void) {
    for (int round = 0; round < 4; round++) {
        int64_t H = 1 + (int64_t)ct_rng_below(&rng, 4), E = H * (4 + (int64_t)ct_rng_below(&rng, 5) * 2);
        ct_gpt_config c = {.vocab_size = 37 + (int64_t)ct_rng_below(&rng, 60), .n_positions = 32, .n_embd = E,
                           .n_layer = 1 + (int64_t)ct_rng_below(&rng, 3), .n_head = H, .bias = round % 2 == 0,
                           .layer_norm_epsilon = 1e-5};
        c.padded_vocab_size = round < 2 ? 0 : (c.vocab_size + 63) / 64 * 64;
        int64_t T = 1 + (int64_t)ct_rng_below(&rng, 32);
        ct_module *g;
        CHECK_OK(ct_gpt_create(&c, &g));
        ct_model m;
        CHECK_OK(ct_model_build(&m, g, &(ct_shape){1, {T}}, &(ct_model_options){.max_batch = 2, .seed = 2}));
        double weights = 0;
        for (int i = 0; i < m.params.count; i++) {
            const ct_param *p = &m.params.items[i];
            if (p->value->ndim == 2 && !strstr(p->name, "wpe")) weights += (double)ct_tensor_numel(p->value);
        }
        double per_token = 6.0 * weights + 12.0 * (double)(c.n_layer * E * T);
        double got = 3.0 * ct_module_forward_flops(m.root) / (double)T;
        CHECK(got == per_token, "GPT L%lld H%lld E%lld V%lld/%lld T%lld: %.0f training FLOPs per token, nanoGPT's "
              "count %.0f", (long long)c.n_layer, (long long)H, (long long)E, (long long)c.vocab_size,
              (long long)c.padded_vocab_size, (long long)T, got, per_token);
        ct_model_free(&m);
    }
}

static double fake_peak_value;
static double fake_peak(int index, ct_math_mode mode) {
    (void)index;
    return mode == CT_MATH_F32 ? fake_peak_value : 0.0;
}

/* Trains 12 steps of 8 samples of 10 features; the run's final metrics. */
static json_t *train(bool tokens_per_second) {
    ct_dataset *data = ct_fixture_dataset(&(ct_fixture_data){.n = 96, .dim = 10, .classes = 3, .seed = 5});
    ct_model model;
    CHECK_OK(ct_fixture_mlp_build(&(ct_fixture_mlp){.dim = 10, .classes = 3, .hidden = {32}, .max_batch = 8},
                                  &model));
    ct_training_args a;
    ct_training_args_default(&a);
    snprintf(a.output_dir, sizeof a.output_dir, "%s/run", ct_fixture_tmp_root("test_throughput"));
    a.disable_tqdm = true;
    a.save_strategy = CT_INTERVAL_NO;
    a.per_device_train_batch_size = 8;
    a.max_steps = 12;
    a.include_tokens_per_second = tokens_per_second;
    ct_trainer t;
    json_t *metrics = NULL;
    if (ct_trainer_init(&t, NULL, &a, &(ct_trainer_setup){.model = &model, .train_dataset = data}) == CT_OK) {
        ct_train_output out;
        if (ct_trainer_train(&t, NULL, &out) == CT_OK) {
            metrics = json_incref(out.metrics);
            ct_train_output_free(&out);
        }
        ct_trainer_free(&t);
    }
    CHECK(metrics != NULL, "the run trains: %s", metrics ? "" : ct_last_error());
    ct_training_args_free(&a);
    ct_model_free(&model);
    ct_dataset_free(data);
    ct_fixture_remove(ct_fixture_tmp_root(NULL));
    return metrics;
}

static double number(const json_t *m, const char *key) { return json_number_value(json_object_get(m, key)); }

static void test_metrics(void) {
    json_t *m = train(false);
    CHECK(m && !json_object_get(m, "train_tokens_per_second") && !json_object_get(m, "train_mfu"),
          "on the CPU, without include_tokens_per_second: neither figure");
    json_decref(m);

    m = train(true);
    double tokens = number(m, "train_tokens_per_second"), samples = number(m, "train_samples_per_second");
    CHECK(m && tokens > 0 && fabs(tokens - 10 * samples) <= 1e-3 * tokens && !json_object_get(m, "train_mfu"),
          "include_tokens_per_second: %g tokens/s = 10 features x %g samples/s, no MFU on the CPU", tokens, samples);
    json_decref(m);

    /* A peak for the CPU's table: the figure any GPU's table gives. */
    static ct_backend_ops with_peak;
    const ct_backend_ops *cpu = ct_backends[CT_DEVICE_CPU];
    with_peak = *cpu;
    with_peak.peak_flops = fake_peak;
    fake_peak_value = 1e9;
    ct_backends[CT_DEVICE_CPU] = &with_peak;
    m = train(false);
    ct_backends[CT_DEVICE_CPU] = cpu;
    /* samples/s is the 96 samples over the same runtime, with more digits than train_runtime keeps */
    double rate = number(m, "train_samples_per_second"), mfu = number(m, "train_mfu");
    double want = 3.0 * 2.0 * (10 * 32 + 32 * 3) * rate / fake_peak_value;
    CHECK(m && json_object_get(m, "train_mfu") && fabs(mfu - want) <= 1e-3 * want + 1e-4,
          "MFU %g: 3 x forward FLOPs x %g samples/s / 1 GFLOP/s = %g", mfu, rate, want);
    CHECK(m && fabs(number(m, "train_tokens_per_second") - 10 * number(m, "train_samples_per_second")) <=
                   1e-3 * number(m, "train_tokens_per_second"),
          "with a known peak, tokens per second come too");
    json_decref(m);
}

int main(void) {
    ct_test_begin("test_throughput");
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    test_mlp_and_conv();
    test_gpt();
    test_metrics();
    ct_fixture_cleanup();
    return ct_test_finish();
}
