/* Token-weighted language-model loss across processes and gradient accumulation, under
 * `mpirun -np N`: a tiny GPT trained on token windows whose labels are partly ignore_index (-100; the
 * number of counted tokens varies from 0 to T per window, as with padding), by
 *   (a) one process with a global batch of N x B windows (the reference, run on every rank alone),
 *   (b) N processes with B windows each,
 *   (c) N processes with B/2 windows and 2 accumulation steps.
 * Every step's logged loss is the sum of token losses over the global batch divided by its counted
 * tokens, so (b) and (c) must give (a)'s losses and weights to rounding (float64: 1e-9 relative), and the
 * evaluation (eval_loss, token_loss, perplexity, token_accuracy) must agree as well. As a check
 * that the data can tell, the mean of per-window losses (what averaging per-process or per-batch
 * means would give) is computed too and must differ from token_loss by more than 1e-3.
 * Each rank prints "N passed, M failed". */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/json.h"
#include "dist/comm.h"
#include "testlib.h"
#include "trainer/trainer.h"
#include "trainer_fixture.h"

#define N_TRAIN 48
#define N_EVAL 21
#define T 9
#define VOCAB 11
#define STEPS 6

static ct_comm *comm;
static int R, W;

static ct_dataset *windows(int64_t n, uint64_t seed) {
    ct_rng rng;
    ct_rng_init(&rng, seed, 0, CT_RNG_USER);
    ct_tensor x, y;
    int64_t shape[2] = {n, T};
    if (ct_tensor_alloc(&x, CT_I64, CT_CPU, 2, shape) != CT_OK || ct_tensor_alloc(&y, CT_I64, CT_CPU, 2, shape) != CT_OK)
        abort();
    int64_t *xi = x.data, *yi = y.data;
    for (int64_t r = 0; r < n; r++) {
        /* Padding-like: a window's last `pad` labels are ignored (some windows entirely). Windows with
         * many labels follow a rule the model learns (the next id), the others are noise: per-window
         * losses then depend on the number of tokens, and weighting matters. */
        int64_t pad = (int64_t)ct_rng_below(&rng, T + 1);
        for (int64_t t = 0; t < T; t++) {
            int64_t id = (int64_t)ct_rng_below(&rng, VOCAB);
            xi[r * T + t] = id;
            yi[r * T + t] = t >= T - pad ? -100 : pad <= T / 3 ? (id + 1) % VOCAB : (int64_t)ct_rng_below(&rng, VOCAB);
        }
    }
    ct_dataset *ds;
    if (ct_tensor_dataset_create(&x, &y, 0, &ds) != CT_OK) abort();
    ct_tensor_free(&x);
    ct_tensor_free(&y);
    return ds;
}

static ct_status gpt(int64_t max_batch, ct_model *m) {
    ct_fixture_gpt g = {.vocab = VOCAB, .positions = T, .n_embd = 16, .n_head = 2, .n_layer = 2, .dtype = CT_F64,
                        .max_batch = max_batch, .seed = 11};
    return ct_fixture_gpt_build(&g, m);
}

typedef struct result {
    double losses[STEPS];
    double eval[4];
    ct_tensor weights;
} result;

static void run(ct_comm *c, int64_t batch, int64_t accumulation, const char *name, result *out) {
    ct_training_args a;
    ct_training_args_default(&a);
    /* The same on every rank of a distributed run (the ranks check that their arguments agree). */
    snprintf(a.output_dir, sizeof a.output_dir, "/tmp/ct_token_loss_%d_%s_%d", W, name, c == comm ? 0 : R);
    a.disable_tqdm = true;
    a.save_strategy = CT_INTERVAL_NO;
    a.logging_strategy = CT_INTERVAL_STEPS;
    a.logging_steps = 1;
    a.learning_rate = 3e-2;
    a.max_steps = STEPS;
    a.per_device_train_batch_size = batch;
    a.per_device_eval_batch_size = 4;
    a.gradient_accumulation_steps = accumulation;
    a.eval_bootstrap_resamples = 0;
    a.log_level = CT_LOG_WARNING;
    ct_dataset *train = windows(N_TRAIN, 1234), *eval = windows(N_EVAL, 99);
    ct_model m;
    CHECK_OK(gpt(batch > 4 ? batch : 4, &m));
    json_t *metrics = json_pack("[s, s, s]", "token_loss", "perplexity", "token_accuracy");
    ct_trainer_setup s = {.model = &m, .train_dataset = train, .n_eval = 1, .metrics = metrics, .comm = c};
    s.eval_datasets[0] = eval;
    ct_trainer t;
    CHECK_OK(ct_trainer_init(&t, NULL, &a, &s));
    ct_train_output o;
    CHECK_OK(ct_trainer_train(&t, NULL, &o));
    int k = 0;
    for (size_t i = 0; i < json_array_size(t.state.log_history) && k < STEPS; i++) {
        const json_t *loss = json_object_get(json_array_get(t.state.log_history, i), "loss");
        if (loss) out->losses[k++] = json_number_value(loss);
    }
    CHECK(k == STEPS, "%s: %d logged losses", name, k);
    json_t *e = NULL;
    CHECK_OK(ct_trainer_evaluate(&t, NULL, "eval", &e));
    const char *keys[4] = {"eval_loss", "eval_token_loss", "eval_perplexity", "eval_token_accuracy"};
    for (int i = 0; i < 4; i++) out->eval[i] = json_number_value(json_object_get(e, keys[i]));
    json_decref(e);
    CHECK_OK(ct_tensor_alloc(&out->weights, CT_F64, CT_CPU, 1, (int64_t[]){ct_tensor_numel(&m.params.values)}));
    memcpy(out->weights.data, m.params.values.data, (size_t)ct_tensor_numel(&m.params.values) * sizeof(double));
    ct_train_output_free(&o);
    ct_trainer_free(&t);
    ct_model_free(&m);
    ct_dataset_free(train);
    ct_dataset_free(eval);
    json_decref(metrics);
    ct_training_args_free(&a);
}

/* The mean over evaluation windows of each window's mean token loss: what a mean of means gives. */
static double mean_of_window_means(ct_model *m) {
    ct_dataset *eval = windows(N_EVAL, 99);
    ct_tensor x, y, out;
    CHECK_OK(ct_dataset_alloc_batch(eval, N_EVAL, &x, &y));
    int64_t idx[N_EVAL];
    for (int i = 0; i < N_EVAL; i++) idx[i] = i;
    CHECK_OK(ct_dataset_get_batch(eval, idx, N_EVAL, &(ct_fetch_ctx){0}, &x, &y));
    ct_model_train(m, false);
    double sum = 0;
    int windows_counted = 0;
    for (int r = 0; r < N_EVAL; r++) {
        ct_tensor xr = ct_tensor_rows(&x, r, 1);
        CHECK_OK(ct_model_forward(m, &xr, &out));
        const double *lg = out.data;
        const int64_t *lab = (const int64_t *)y.data + r * T;
        double s = 0;
        int n = 0;
        for (int t = 0; t < T; t++) {
            if (lab[t] < 0) continue;
            double mx = -INFINITY, z = 0;
            for (int v = 0; v < VOCAB; v++) mx = fmax(mx, lg[t * VOCAB + v]);
            for (int v = 0; v < VOCAB; v++) z += exp(lg[t * VOCAB + v] - mx);
            s += mx + log(z) - lg[t * VOCAB + lab[t]];
            n++;
        }
        if (n) sum += s / n, windows_counted++;
    }
    ct_tensor_free(&x);
    ct_tensor_free(&y);
    ct_dataset_free(eval);
    return sum / windows_counted;
}

static double rel(double a, double b) { return a == b ? 0 : fabs(a - b) / fmax(fabs(b), 1e-300); }

static void compare(const char *name, const result *got, const result *want) {
    for (int k = 0; k < STEPS; k++)
        CHECK(rel(got->losses[k], want->losses[k]) < 1e-9, "rank %d %s: step %d loss %.17g vs one process %.17g", R,
              name, k + 1, got->losses[k], want->losses[k]);
    for (int i = 0; i < 4; i++)
        CHECK(rel(got->eval[i], want->eval[i]) < 1e-9, "rank %d %s: eval value %d %.17g vs one process %.17g", R, name,
              i, got->eval[i], want->eval[i]);
    const double *g = got->weights.data, *w = want->weights.data;
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < ct_tensor_numel(&want->weights); i++) scale = fmax(scale, fabs(w[i]));
    for (int64_t i = 0; i < ct_tensor_numel(&want->weights); i++) worst = fmax(worst, fabs(g[i] - w[i]) / scale);
    CHECK(worst < 1e-9, "rank %d %s: weights differ from one process's by %.3g (relative to the largest)", R, name,
          worst);
}

int main(void) {
    ct_test_begin("test_token_loss_mpi");
    if (ct_comm_mpi_create(60, &comm) != CT_OK) {
        fprintf(stderr, "%s\n", ct_last_error());
        return 1;
    }
    R = comm->rank;
    W = comm->world_size;
    const int64_t B = 4; /* per process; the global batch is W * B */
    ct_comm *single;
    CHECK_OK(ct_comm_single_create(&single));
    result ref = {0}, ddp = {0}, acc = {0};
    run(single, W * B, 1, "reference", &ref);
    run(comm, B, 1, "ddp", &ddp);
    run(comm, B / 2, 2, "ddp_accumulation", &acc);
    compare("DDP", &ddp, &ref);
    compare("DDP with accumulation", &acc, &ref);
    /* The data can tell a token-weighted loss from a mean of means. */
    ct_model m;
    CHECK_OK(gpt(4, &m));
    memcpy(m.params.values.data, ref.weights.data, (size_t)ct_tensor_numel(&m.params.values) * sizeof(double));
    double means = mean_of_window_means(&m);
    CHECK(rel(means, ref.eval[1]) > 1e-3, "mean of window means %.6f is too close to token_loss %.6f for the test to "
          "tell them apart", means, ref.eval[1]);
    CHECK(rel(ref.eval[0], ref.eval[1]) < 1e-12, "eval_loss %.17g == token_loss %.17g", ref.eval[0], ref.eval[1]);
    ct_model_free(&m);
    ct_tensor_free(&ref.weights);
    ct_tensor_free(&ddp.weights);
    ct_tensor_free(&acc.weights);
    ct_comm_free(single);
    int code = ct_test_finish();
    ct_comm_free(comm);
    return code;
}
