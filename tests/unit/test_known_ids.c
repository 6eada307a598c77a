/* Token ids whose range the host knows (ct_model_set_known_ids, trainer/device_batch.c), on the
 * checked device (CTRAINER_CHECKED_DEVICE: the CPU's kernels on memory the host may not touch outside
 * ops).
 *
 * The Trainer finds the range of a batch's integer features on the host as it uploads them, so a
 * GPT's embedding and its padded-vocabulary check need not read the ids back from the device (a wait
 * for the device on a GPU, twice a micro-batch). Checked: a GPT (padded vocabulary, and not) trained
 * on the device agrees bit for bit with the CPU (log history, weights), and on the device no
 * embedding_find_invalid ran (on the CPU one or two a micro-batch); a batch with a bad id (in the
 * padding, past it, negative) still fails with the CPU's message, naming the id and its position.
 * And ct_module_ids_known_below itself: only for the recorded memory, dtype and count, and a range
 * inside [0, limit). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops/op_profile.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "testlib.h"
#include "trainer/trainer.h"
#include "trainer_fixture.h"

static const ct_device GPU = {CT_DEVICE_CUDA, 0};
static const char *tmp_root;

enum { SAMPLES = 22, T = 8, VOCAB = 11, BATCH = 4 };

/* SAMPLES sequences of T ids below VOCAB and their next-token labels, the same for every run; the id
 * at flat position bad_at set to bad_id (bad_at -1: none). */
static ct_dataset *token_data(int64_t bad_at, int64_t bad_id) {
    ct_rng r;
    ct_rng_init(&r, ct_test_seed, 0, 0);
    ct_tensor x, y;
    if (ct_tensor_alloc(&x, CT_I64, CT_CPU, 2, (int64_t[]){SAMPLES, T}) != CT_OK) abort();
    if (ct_tensor_alloc(&y, CT_I64, CT_CPU, 2, (int64_t[]){SAMPLES, T}) != CT_OK) abort();
    int64_t *xi = x.data, *yi = y.data;
    for (int64_t i = 0; i < SAMPLES * T; i++) {
        xi[i] = (int64_t)ct_rng_below(&r, VOCAB);
        yi[i] = (int64_t)ct_rng_below(&r, VOCAB);
    }
    if (bad_at >= 0) xi[bad_at] = bad_id;
    ct_dataset *d;
    if (ct_tensor_dataset_create(&x, &y, 0, &d) != CT_OK) abort();
    ct_tensor_free(&x);
    ct_tensor_free(&y);
    return d;
}

/* A few steps of a small GPT on dev; *checks: the embedding_find_invalid calls it made. */
static void train_gpt(ct_device dev, int64_t padded, int64_t bad_at, int64_t bad_id, const char *name,
                      ct_fixture_run *r, long long *checks) {
    ct_training_args a;
    ct_fixture_args(&a, tmp_root, name);
    a.max_steps = 4;
    a.gradient_accumulation_steps = 2;
    a.per_device_train_batch_size = BATCH;
    a.logging_steps = 1;
    a.save_strategy = CT_INTERVAL_NO;
    a.learning_rate = 1e-2;
    a.seed = 5;
    ct_dataset *d = token_data(bad_at, bad_id);
    ct_model m;
    ct_fixture_gpt g = {.vocab = VOCAB, .padded_vocab = padded, .positions = T, .n_embd = 8, .n_head = 2,
                        .n_layer = 1, .device = dev, .max_batch = BATCH, .seed = ct_test_seed};
    CHECK_OK(ct_fixture_gpt_build(&g, &m));
    ct_trainer_setup setup = {.model = &m, .train_dataset = d};
    ct_trainer t;
    ct_op_profile_reset();
    ct_op_profile_enable(true);
    if (ct_fixture_train(&t, NULL, &a, &setup, NULL, r)) ct_trainer_free(&t);
    ct_op_profile_enable(false);
    *checks = ct_op_profile_calls("embedding_find_invalid");
    ct_model_free(&m);
    ct_dataset_free(d);
    ct_training_args_free(&a);
}

/* Good ids: the same run on both, and no check on the device. */
static void same_run(int64_t padded) {
    ct_fixture_run cpu, dev;
    long long cc, dc;
    char label[64];
    snprintf(label, sizeof label, "gpt, padded vocabulary %lld", (long long)padded);
    train_gpt(CT_CPU, padded, -1, 0, "cpu", &cpu, &cc);
    train_gpt(GPU, padded, -1, 0, "dev", &dev, &dc);
    CHECK(cpu.status == CT_OK && dev.status == CT_OK, "%s: runs failed: '%s' / '%s'", label, cpu.message,
          dev.message);
    if (cpu.status == CT_OK && dev.status == CT_OK) {
        ct_fixture_check_same_log(label, cpu.log, dev.log);
        CHECK(ct_fixture_same_bits(&cpu.weights, &dev.weights), "%s: final weights differ", label);
    }
    /* 4 steps of 2 micro-batches: the embedding's check each, and the padded vocabulary's */
    long long micro = 4 * 2, per = padded ? 2 : 1;
    CHECK(cc == micro * per, "%s: %lld id checks on the CPU, expected %lld", label, cc, micro * per);
    CHECK(dc == 0, "%s: %lld id checks read the ids back on the device, expected none", label, dc);
    ct_fixture_run_free(&cpu);
    ct_fixture_run_free(&dev);
}

/* A bad id at position 5 of the third sample (in whichever row of its batch the shuffle puts it): the
 * device's run fails as the CPU's does, with its message. */
static void bad_id(int64_t padded, int64_t id, const char *want) {
    ct_fixture_run cpu, dev;
    long long cc, dc;
    const int64_t at = 2 * T + 5; /* sample 2, position 5 */
    train_gpt(CT_CPU, padded, at, id, "cpu_bad", &cpu, &cc);
    train_gpt(GPU, padded, at, id, "dev_bad", &dev, &dc);
    CHECK(cpu.status != CT_OK && dev.status != CT_OK, "id %lld (padded %lld): a run took it", (long long)id,
          (long long)padded);
    CHECK(strcmp(cpu.message, dev.message) == 0, "id %lld (padded %lld): the device says '%s', the CPU '%s'",
          (long long)id, (long long)padded, dev.message, cpu.message);
    CHECK(strstr(dev.message, want) && strstr(dev.message, ", 5] is outside [0, 11)"),
          "id %lld (padded %lld): message '%s' lacks '%s' or the position and range", (long long)id, (long long)padded,
          dev.message, want);
    CHECK(dc > 0, "id %lld (padded %lld): the device's run did not check the ids it could not trust", (long long)id,
          (long long)padded);
    ct_fixture_run_free(&cpu);
    ct_fixture_run_free(&dev);
}

/* The record is trusted only for the memory, dtype and count it names, and a range in [0, limit). */
static void known_below(void) {
    ct_model m;
    ct_fixture_gpt g = {.vocab = VOCAB, .positions = T, .n_embd = 8, .n_head = 2, .n_layer = 1, .max_batch = BATCH,
                        .seed = ct_test_seed};
    CHECK_OK(ct_fixture_gpt_build(&g, &m));
    ct_tensor x;
    CHECK_OK(ct_tensor_alloc(&x, CT_I64, CT_CPU, 2, (int64_t[]){BATCH, T}));
    const ct_module *root = m.root;
    CHECK(!ct_module_ids_known_below(root, &x, VOCAB), "no record, yet known");
    ct_model_set_known_ids(&m, &x, 0, VOCAB - 1);
    CHECK(ct_module_ids_known_below(root, &x, VOCAB), "the recorded ids not known");
    CHECK(!ct_module_ids_known_below(root, &x, VOCAB - 1), "known below a limit the range reaches");
    ct_tensor fewer = ct_tensor_rows(&x, 0, BATCH - 1), other_dtype = ct_tensor_view(x.data, CT_I32, CT_CPU, 2,
                                                                                      (int64_t[]){BATCH, 2 * T});
    CHECK(!ct_module_ids_known_below(root, &fewer, VOCAB), "known for a part of the recorded ids");
    CHECK(!ct_module_ids_known_below(root, &other_dtype, VOCAB), "known for the memory read as another dtype");
    ct_tensor y;
    CHECK_OK(ct_tensor_alloc(&y, CT_I64, CT_CPU, 2, (int64_t[]){BATCH, T}));
    CHECK(!ct_module_ids_known_below(root, &y, VOCAB), "known for other memory");
    ct_model_set_known_ids(&m, &x, -1, 3);
    CHECK(!ct_module_ids_known_below(root, &x, VOCAB), "known with a negative id");
    ct_model_set_known_ids(&m, NULL, 0, 0);
    CHECK(!ct_module_ids_known_below(root, &x, VOCAB), "known after the record was forgotten");
    ct_tensor_free(&x);
    ct_tensor_free(&y);
    ct_model_free(&m);
}

int main(int argc, char **argv) {
    (void)argc;
    if (!ct_test_use_checked_device(argv, "1")) return 1;
    ct_test_begin("test_known_ids");
    if (!(tmp_root = ct_fixture_tmp_root("ct_test_known_ids"))) return 1;
    same_run(0);
    same_run(16);
    bad_id(0, VOCAB, "token id 11 at position [");
    bad_id(0, -3, "token id -3 at position [");
    bad_id(16, 13, "token id 13 at position [");
    bad_id(16, 40, "token id 40 at position [");
    known_below();
    ct_op_profile_reset();
    ct_fixture_cleanup();
    return ct_test_finish();
}
