/* Gradient checkpointing on the GPU: a GPT on cuda:0 that recomputes its blocks against the same GPT
 * that keeps every activation (both built from one seed), over two accumulated micro-batches with
 * dropout and an evaluation forward in between. The second forward runs the same kernels on the same
 * inputs, so the outputs and the accumulated gradients must be the same bits, as on the CPU
 * (unit.test_gradient_checkpointing); the model reserves less device memory. */
#include <string.h>

#include "cuda_testlib.h"
#include "model/layers.h"
#include "model/model.h"

static const ct_device GPU = {CT_DEVICE_CUDA, 0};
static ct_rng rng;

static ct_status build(const ct_gpt_config *c, int64_t B, bool checkpointing, ct_model *model) {
    ct_module *m;
    CT_TRY(ct_gpt_create(c, &m));
    ct_shape in = {1, {c->n_positions}};
    CT_TRY(ct_model_build(model, m, &in, &(ct_model_options){.dtype = CT_F32, .device = GPU, .max_batch = B,
                                                             .seed = ct_test_seed}));
    return ct_model_set_gradient_checkpointing(model, checkpointing);
}

/* Two GPU tensors, compared on the host. */
static void same_bits(const char *what, const ct_tensor *got, const ct_tensor *want) {
    ct_tensor host = ct_ct_to_cpu(want);
    ct_ct_check_equal(what, got, &host);
    ct_tensor_free(&host);
}

/* The same forward (and in training the same backward) on both; their outputs must match bit for bit. */
static void step_both(ct_model *m[2], const ct_gpt_config *c, int64_t B, uint64_t step, bool training) {
    int64_t shape[2] = {B, c->n_positions};
    ct_tensor ids_cpu = ct_ct_rand(&rng, CT_I64, 2, shape, 0, (double)c->vocab_size);
    ct_tensor ids = ct_ct_to_gpu(&ids_cpu), y[2], dy_cpu = {0}, dy = {0};
    for (int i = 0; i < 2; i++) {
        ct_model_train(m[i], training);
        ct_model_set_step(m[i], step, 0);
        CHECK_OK(ct_model_forward(m[i], &ids, &y[i]));
    }
    same_bits("logits with checkpointing", &y[1], &y[0]);
    if (training) {
        dy_cpu = ct_ct_rand(&rng, CT_F32, y[0].ndim, y[0].shape, -1, 1);
        dy = ct_ct_to_gpu(&dy_cpu);
        for (int i = 0; i < 2; i++) CHECK_OK(ct_model_backward(m[i], &dy));
    }
    ct_tensor *all[] = {&ids_cpu, &ids, &dy_cpu, &dy};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]->data) ct_tensor_free(all[i]);
}

int main(void) {
    ct_cuda_test_begin("test_cuda_gradient_checkpointing");
    ct_rng_init(&rng, ct_test_seed, 1, CT_RNG_USER);
    for (int rep = 0; rep < 3; rep++) {
        ct_gpt_config c = ct_gpt_config_default();
        c.vocab_size = ct_test_between(&rng, 20, 300);
        c.n_head = ct_test_between(&rng, 1, 4);
        c.n_embd = c.n_head * ct_test_between(&rng, 4, 32);
        c.n_layer = ct_test_between(&rng, 2, 4);
        c.n_positions = ct_test_between(&rng, 8, 64);
        c.dropout = rep == 0 ? 0.0 : 0.2;
        int64_t B = ct_test_between(&rng, 1, 6);
        ct_model plain, ckpt;
        CHECK_OK(build(&c, B, false, &plain));
        CHECK_OK(build(&c, B, true, &ckpt));
        CHECK(ckpt.arena.bytes < plain.arena.bytes, "checkpointing reserves %zu bytes, keeping everything %zu",
              ckpt.arena.bytes, plain.arena.bytes);
        ct_model *m[2] = {&plain, &ckpt};
        ct_model_zero_grad(&plain);
        ct_model_zero_grad(&ckpt);
        step_both(m, &c, B, 1, true);
        step_both(m, &c, B, 2, false);
        step_both(m, &c, ct_test_between(&rng, 1, B), 3, true);
        same_bits("accumulated gradients with checkpointing", &ckpt.params.grads, &plain.params.grads);
        ct_model_free(&plain);
        ct_model_free(&ckpt);
    }
    return ct_test_finish();
}
