/* Gradient checkpointing (ct_model_set_gradient_checkpointing): a GPT that recomputes its blocks
 * against the same GPT that keeps every activation, built from the same seed. Over training steps
 * with dropout (masks keyed by the step, so the second forward must draw the same ones), batches of
 * different sizes, gradient accumulation and an evaluation in between (which leaves another
 * block's activations in the shared region), every output and the accumulated gradients are the
 * same bits. The activation memory no longer grows with the blocks' whole activations per layer; a
 * bigger batch afterwards and turning it off again keep the bits. Refused with an error that says
 * so: a backward after the step or the training mode changed since its forward, a model without
 * recomputable modules, and a recomputable module whose output lies in the shared region. */
#include <stdlib.h>
#include <string.h>

#include "model/layers.h"
#include "model/model.h"
#include "testlib.h"

static ct_rng rng;

static ct_gpt_config random_config(void) {
    ct_gpt_config c = ct_gpt_config_default();
    c.vocab_size = ct_test_between(&rng, 5, 40);
    c.n_head = ct_test_between(&rng, 1, 3);
    c.n_embd = c.n_head * ct_test_between(&rng, 2, 6);
    c.n_layer = ct_test_between(&rng, 2, 4);
    c.n_positions = ct_test_between(&rng, 3, 12);
    c.bias = ct_rng_below(&rng, 4) != 0;
    c.dropout = ct_rng_below(&rng, 3) == 0 ? 0.0 : 0.1 + 0.3 * ct_rng_uniform(&rng);
    return c;
}

static ct_status build(const ct_gpt_config *c, int64_t max_batch, bool checkpointing, ct_model *model) {
    ct_module *m;
    CT_TRY(ct_gpt_create(c, &m));
    ct_shape in = {1, {c->n_positions}};
    ct_model_options mo = {.dtype = CT_F32, .max_batch = max_batch, .seed = ct_test_seed};
    CT_TRY(ct_model_build(model, m, &in, &mo));
    return ct_model_set_gradient_checkpointing(model, checkpointing);
}

static void fill_ids(ct_tensor *ids, int64_t vocab) {
    int64_t *id = ids->data;
    for (int64_t i = 0; i < ct_tensor_numel(ids); i++) id[i] = (int64_t)ct_rng_below(&rng, (uint64_t)vocab);
}

static void fill_normal(ct_tensor *t) {
    for (int64_t i = 0; i < ct_tensor_numel(t); i++) ((float *)t->data)[i] = (float)ct_rng_normal(&rng);
}

/* One forward on both models (the same ids), and, in training, one backward of the same random
 * output gradient; the outputs must be the same bits. */
static void step_both(ct_model *plain, ct_model *ckpt, const ct_gpt_config *c, int64_t batch, uint64_t step,
                      bool training, const char *what) {
    int64_t shape[2] = {batch, c->n_positions};
    ct_tensor ids, dy;
    ct_tensor_alloc(&ids, CT_I64, CT_CPU, 2, shape);
    fill_ids(&ids, c->vocab_size);
    ct_model *models[2] = {plain, ckpt};
    ct_tensor y[2];
    for (int i = 0; i < 2; i++) {
        ct_model_train(models[i], training);
        ct_model_set_step(models[i], step, 17 * (int64_t)step);
        CHECK_OK(ct_model_forward(models[i], &ids, &y[i]));
    }
    CHECK(memcmp(y[0].data, y[1].data, ct_tensor_nbytes(&y[0])) == 0, "%s: outputs differ with checkpointing", what);
    if (training) {
        ct_tensor_alloc(&dy, CT_F32, CT_CPU, y[0].ndim, y[0].shape);
        fill_normal(&dy);
        for (int i = 0; i < 2; i++) CHECK_OK(ct_model_backward(models[i], &dy));
        ct_tensor_free(&dy);
    }
    ct_tensor_free(&ids);
}

static void same_grads(const ct_model *plain, const ct_model *ckpt, const char *what) {
    const ct_tensor *a = &plain->params.grads, *b = &ckpt->params.grads;
    CHECK(ct_tensor_nbytes(a) == ct_tensor_nbytes(b) && memcmp(a->data, b->data, ct_tensor_nbytes(a)) == 0,
          "%s: gradients differ with checkpointing", what);
}

static void same_bits(void) {
    ct_gpt_config c = random_config();
    int64_t B = ct_test_between(&rng, 1, 4);
    char what[160];
    snprintf(what, sizeof what, "V=%lld C=%lld H=%lld L=%lld T=%lld dropout %.2f bias %d B=%lld",
             (long long)c.vocab_size, (long long)c.n_embd, (long long)c.n_head, (long long)c.n_layer,
             (long long)c.n_positions, c.dropout, c.bias, (long long)B);
    ct_model plain, ckpt;
    CHECK_OK(build(&c, B, false, &plain));
    CHECK_OK(build(&c, B, true, &ckpt));
    CHECK(ckpt.arena.bytes < plain.arena.bytes, "%s: checkpointing reserves %zu bytes, keeping everything %zu", what,
          ckpt.arena.bytes, plain.arena.bytes);
    /* two micro-batches accumulated, an evaluation, then a third micro-batch of another size */
    ct_model_zero_grad(&plain);
    ct_model_zero_grad(&ckpt);
    step_both(&plain, &ckpt, &c, B, 3, true, what);
    step_both(&plain, &ckpt, &c, ct_test_between(&rng, 1, B), 3, true, what);
    same_grads(&plain, &ckpt, what);
    step_both(&plain, &ckpt, &c, B, 4, false, what);
    step_both(&plain, &ckpt, &c, ct_test_between(&rng, 1, B), 4, true, what);
    same_grads(&plain, &ckpt, what);

    /* a larger batch keeps it on; turning it off gives back the plain model's layout */
    CHECK_OK(ct_model_set_max_batch(&plain, B + 2));
    CHECK_OK(ct_model_set_max_batch(&ckpt, B + 2));
    CHECK(ckpt.gradient_checkpointing && ckpt.arena.bytes < plain.arena.bytes, "%s: a new max_batch dropped it", what);
    ct_model_zero_grad(&plain);
    ct_model_zero_grad(&ckpt);
    step_both(&plain, &ckpt, &c, B + 2, 5, true, what);
    same_grads(&plain, &ckpt, what);
    CHECK_OK(ct_model_set_gradient_checkpointing(&ckpt, false));
    CHECK(ckpt.arena.bytes == plain.arena.bytes, "%s: off again, %zu bytes against %zu", what, ckpt.arena.bytes,
          plain.arena.bytes);
    step_both(&plain, &ckpt, &c, B + 1, 6, true, what);
    same_grads(&plain, &ckpt, what);
    ct_model_free(&plain);
    ct_model_free(&ckpt);
}

/* What a block keeps with checkpointing is a few [T, C] buffers of its own; without, its
 * activations (qkv, the attention's [H, T, T] probabilities, the MLP's 4C ones, ...) as well. */
static void memory_per_layer(void) {
    ct_gpt_config c = ct_gpt_config_default();
    c.vocab_size = 32;
    c.n_embd = 32;
    c.n_head = 4;
    c.n_positions = 16;
    c.dropout = 0.1;
    size_t bytes[2][2];
    for (int layers = 0; layers < 2; layers++)
        for (int ck = 0; ck < 2; ck++) {
            c.n_layer = layers ? 8 : 2;
            ct_model m;
            CHECK_OK(build(&c, 4, ck, &m));
            bytes[layers][ck] = m.arena.bytes;
            ct_model_free(&m);
        }
    size_t plain_per = (bytes[1][0] - bytes[0][0]) / 6, ckpt_per = (bytes[1][1] - bytes[0][1]) / 6;
    /* per token of a block: about 23 C + 3 H T floats of activations against 4 C kept */
    CHECK(ckpt_per * 4 < plain_per, "each block adds %zu bytes with checkpointing, %zu without", ckpt_per, plain_per);
}

/* The second forward must run in the first one's mode and step, or the gradients would be of other
 * activations (other dropout masks, or none): a change between forward and backward is refused. */
static void changed_between(void) {
    ct_gpt_config c = random_config();
    c.dropout = 0.2;
    ct_model model;
    CHECK_OK(build(&c, 2, true, &model));
    int64_t shape[2] = {2, c.n_positions};
    ct_tensor ids, y, dy;
    ct_tensor_alloc(&ids, CT_I64, CT_CPU, 2, shape);
    fill_ids(&ids, c.vocab_size);
    ct_model_train(&model, true);
    ct_model_set_step(&model, 1, 0);
    CHECK_OK(ct_model_forward(&model, &ids, &y));
    ct_tensor_alloc(&dy, CT_F32, CT_CPU, y.ndim, y.shape);
    fill_normal(&dy);
    ct_model_set_step(&model, 2, 0);
    CHECK_ERR(ct_model_backward(&model, &dy), CT_ERR_STATE, "gpt_block 'transformer.h.", "the step changed");
    ct_model_set_step(&model, 1, 0);
    CHECK_OK(ct_model_forward(&model, &ids, &y));
    ct_model_train(&model, false);
    CHECK_ERR(ct_model_backward(&model, &dy), CT_ERR_STATE, "the training mode changed");
    ct_model_train(&model, true);
    CHECK_OK(ct_model_forward(&model, &ids, &y));
    CHECK_OK(ct_model_backward(&model, &dy));
    ct_tensor_free(&ids);
    ct_tensor_free(&dy);
    ct_model_free(&model);
}

static void refused(void) {
    /* an MLP has no recomputable module */
    ct_module *seq, *lin, *act;
    CHECK_OK(ct_sequential_create(&seq));
    CHECK_OK(ct_linear_create(3, 4, true, &lin));
    CHECK_OK(ct_module_add_child(seq, lin, NULL));
    CHECK_OK(ct_activation_create(CT_ACT_RELU, &act));
    CHECK_OK(ct_module_add_child(seq, act, NULL));
    ct_model model;
    ct_shape in = {1, {3}};
    CHECK_OK(ct_model_build(&model, seq, &in, &(ct_model_options){.max_batch = 2, .seed = 1}));
    CHECK_ERR(ct_model_set_gradient_checkpointing(&model, true), CT_ERR_INVALID_ARG, "gradient checkpointing",
              "has none");
    CHECK(!model.gradient_checkpointing, "a refused request leaves it off");
    /* a module that says it is recomputable but hands out its child's buffer as its output */
    model.root->recomputable = true;
    CHECK_OK(ct_model_set_gradient_checkpointing(&model, true));
    int64_t shape[2] = {2, 3};
    ct_tensor x, y;
    ct_tensor_alloc(&x, CT_F32, CT_CPU, 2, shape);
    fill_normal(&x);
    CHECK_ERR(ct_model_forward(&model, &x, &y), CT_ERR_STATE, "sequential", "shared activation region",
              "buffer of its own");
    ct_tensor_free(&x);
    ct_model_free(&model);
}

int main(void) {
    ct_test_begin("test_gradient_checkpointing");
    ct_rng_init(&rng, ct_test_seed, 1, CT_RNG_USER);
    for (int i = 0; i < 8; i++) same_bits();
    memory_per_layer();
    changed_between();
    refused();
    return ct_test_finish();
}
