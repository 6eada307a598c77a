/* Mistakes ct_trainer_init finds before the first step, each named where it is: zero-initialised
 * arguments (pointing at ct_training_args_default), a dataset whose samples do not fit the model's
 * input, a classifier with fewer outputs than the data's classes, labels the loss cannot take; a
 * model built for a smaller batch than the arguments ask for is grown instead of failing later; and
 * ct_trainer_free is safe after a failed init, twice, and on a zeroed trainer. Also the contract
 * compute_loss overrides rely on (trainer.h): a penalty added as R x count to the sum and
 * dR x count to the gradients is exact under gradient accumulation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops/ops.h"
#include "core/ops/ops_optim.h"
#include "core/util.h"
#include "testlib.h"
#include "trainer/trainer.h"
#include "trainer_fixture.h"

static const char *tmp_root;

static void quiet_args(ct_training_args *a, const char *name) {
    ct_training_args_default(a);
    snprintf(a->output_dir, sizeof a->output_dir, "%s/%s", tmp_root, name);
    a->disable_tqdm = true;
    a->save_strategy = CT_INTERVAL_NO;
    a->logging_strategy = CT_INTERVAL_NO;
    a->per_device_train_batch_size = 8;
    a->per_device_eval_batch_size = 8;
    a->max_steps = 2;
}

static void mlp(ct_model *m, int64_t dim, int64_t classes, int64_t max_batch) {
    ct_fixture_mlp o = {.dim = dim, .classes = classes, .hidden = {8}, .max_batch = max_batch, .seed = 3};
    if (ct_fixture_mlp_build(&o, m) != CT_OK) abort();
}

static ct_dataset *data(int64_t dim, int64_t classes) {
    return ct_fixture_dataset(&(ct_fixture_data){.n = 32, .dim = dim, .classes = classes, .seed = ct_test_seed});
}

/* init with the given pieces; the trainer is freed (twice: the second must be harmless). */
static ct_status init(const ct_training_args *a, ct_model *m, ct_dataset *train, ct_dataset *eval, ct_loss *loss) {
    ct_trainer t;
    ct_trainer_setup in = {.model = m, .train_dataset = train, .loss = loss};
    if (eval) {
        in.n_eval = 1;
        in.eval_datasets[0] = eval;
    }
    ct_status s = ct_trainer_init(&t, NULL, a, &in);
    ct_trainer_free(&t);
    ct_trainer_free(&t);
    return s;
}

static void test_zeroed_args(void) {
    ct_model m;
    mlp(&m, 4, 3, 8);
    ct_dataset *d = data(4, 3);
    ct_training_args zero = {0};
    CHECK_ERR(init(&zero, &m, d, NULL, NULL), CT_ERR_CONFIG, "training arguments are zero-initialised",
              "ct_training_args_default(&args)");
    ct_trainer t = {0};
    ct_trainer_free(&t); /* a trainer that was never initialised */
    ct_dataset_free(d);
    ct_model_free(&m);
}

static void test_features(void) {
    ct_model m;
    mlp(&m, 4, 3, 8);
    ct_dataset *wide = data(5, 3);
    snprintf(wide->source, sizeof wide->source, "wide-data");
    ct_training_args a;
    quiet_args(&a, "features");
    CHECK_ERR(init(&a, &m, wide, NULL, NULL), CT_ERR_SHAPE,
              "train_dataset 'wide-data': samples are [N, 5] f32, but the model was built for inputs [N, 4] f32");
    ct_dataset *ok = data(4, 3);
    CHECK_ERR(init(&a, &m, ok, wide, NULL), CT_ERR_SHAPE, "eval_dataset 'wide-data': samples are [N, 5]");
    CHECK_OK(init(&a, &m, ok, ok, NULL));
    ct_dataset_free(ok);
    ct_dataset_free(wide);
    ct_training_args_free(&a);
    ct_model_free(&m);
}

static void test_classes(void) {
    ct_model m;
    mlp(&m, 4, 3, 8);
    ct_dataset *five = data(4, 5);
    snprintf(five->source, sizeof five->source, "five-classes");
    ct_training_args a;
    quiet_args(&a, "classes");
    /* A label beyond the outputs is the data's error naming the sample (exit 1), and with more classes
     * in the data than outputs, the message also says how to fix the model instead. */
    CHECK_ERR(init(&a, &m, five, NULL, NULL), CT_ERR_FORMAT,
              "train_dataset: five-classes: label ", "is not a class of the model's 3 outputs",
              "the data has 5 classes: if the model is what is wrong, give the last layer 5 outputs");
    ct_dataset_free(five);
    ct_training_args_free(&a);
    ct_model_free(&m);
}

/* Float regression targets [2] against cross-entropy's integer labels: the loss's own message. */
static void test_labels(void) {
    ct_model m;
    mlp(&m, 4, 3, 8);
    int64_t fs[2] = {6, 4}, ls[2] = {6, 2};
    ct_tensor x, y;
    CHECK_OK(ct_tensor_alloc(&x, CT_F32, CT_CPU, 2, fs));
    CHECK_OK(ct_tensor_alloc(&y, CT_F32, CT_CPU, 2, ls));
    for (int i = 0; i < 24; i++) ((float *)x.data)[i] = (float)i / 24.0f;
    for (int i = 0; i < 12; i++) ((float *)y.data)[i] = (float)i;
    ct_dataset *reg;
    CHECK_OK(ct_tensor_dataset_create(&x, &y, 0, &reg));
    snprintf(reg->source, sizeof reg->source, "regression-targets");
    ct_training_args a;
    quiet_args(&a, "labels");
    CHECK_ERR(init(&a, &m, reg, NULL, NULL), CT_ERR_DTYPE,
              "train_dataset 'regression-targets' does not fit the loss and the model's outputs: cross_entropy loss:");
    /* The same data with an MSE loss of the right width is accepted... except that the model has 3
     * outputs and the targets 2: the loss says so, at init. */
    ct_loss *mse;
    CHECK_OK(ct_mse_loss_create(&mse));
    CHECK_ERR(init(&a, &m, reg, NULL, mse), CT_ERR_SHAPE, "train_dataset 'regression-targets' does not fit", "mse loss");
    ct_loss_free(mse);
    ct_dataset_free(reg);
    ct_tensor_free(&x);
    ct_tensor_free(&y);
    ct_training_args_free(&a);
    ct_model_free(&m);
}

/* Built for batches of 2, trained with 8 and evaluated with 16: the trainer grows the model. */
static void test_max_batch(void) {
    ct_model m;
    mlp(&m, 4, 3, 2);
    ct_dataset *d = data(4, 3);
    ct_training_args a;
    quiet_args(&a, "max_batch");
    a.per_device_eval_batch_size = 16;
    a.eval_strategy = CT_INTERVAL_STEPS;
    a.eval_steps = 2;
    ct_trainer t;
    CHECK_OK(ct_trainer_init(&t, NULL, &a, &(ct_trainer_setup){.model = &m, .train_dataset = d, .n_eval = 1,
                                                                .eval_datasets = {d}}));
    CHECK(m.opts.max_batch == 16, "the model takes batches of %lld, not 16", (long long)m.opts.max_batch);
    ct_train_output out = {0};
    CHECK_OK(ct_trainer_train(&t, NULL, &out));
    ct_train_output_free(&out);
    ct_trainer_free(&t);
    ct_dataset_free(d);
    ct_training_args_free(&a);
    ct_model_free(&m);
}

/* --- an L2 penalty on top of "super", as trainer.h's compute_loss contract says ------------------ */

typedef struct l2_trainer {
    ct_trainer base;
    double l2;
} l2_trainer;

static ct_status l2_compute_loss(ct_trainer *t, const ct_batch *b, ct_loss_value *loss, ct_tensor *outputs,
                                 ct_tensor *dloss) {
    l2_trainer *w = ct_container_of(t, l2_trainer, base);
    CT_TRY(ct_trainer_default_compute_loss(t, b, loss, outputs, dloss));
    if (!dloss) return CT_OK;
    double norm = ct_op_l2_norm(&t->model->params.values);
    loss->sum += 0.5 * w->l2 * norm * norm * loss->count;
    ct_op_axpy(w->l2 * loss->count, &t->model->params.values, &t->model->params.grads);
    return CT_OK;
}

static const ct_trainer_ops l2_ops = {.size = sizeof(ct_trainer_ops), .compute_loss = l2_compute_loss};

/* Final weights (a float64 model) after 4 optimizer steps of 24 samples, as batch x accumulation. */
static void train_l2(double l2, int64_t batch, int64_t accumulation, ct_dataset *d, double *w, int64_t n) {
    ct_model m;
    ct_fixture_mlp o = {.dim = 4, .classes = 3, .hidden = {8}, .max_batch = 24, .seed = 3, .dtype = CT_F64};
    if (ct_fixture_mlp_build(&o, &m) != CT_OK) abort();
    ct_training_args a;
    quiet_args(&a, "l2");
    a.per_device_train_batch_size = batch;
    a.gradient_accumulation_steps = accumulation;
    a.max_steps = 4;
    a.learning_rate = 0.1;
    snprintf(a.lr_scheduler_type, sizeof a.lr_scheduler_type, "constant");
    l2_trainer t = {.l2 = l2};
    CHECK_OK(ct_trainer_init(&t.base, &l2_ops, &a, &(ct_trainer_setup){.model = &m, .train_dataset = d}));
    ct_train_output out = {0};
    CHECK_OK(ct_trainer_train(&t.base, NULL, &out));
    ct_train_output_free(&out);
    ct_trainer_free(&t.base);
    for (int64_t i = 0; i < n && i < ct_tensor_numel(&m.params.values); i++)
        w[i] = ((double *)m.params.values.data)[i];
    ct_training_args_free(&a);
    ct_model_free(&m);
}

static void test_l2_contract(void) {
    ct_dataset *d = ct_fixture_dataset(&(ct_fixture_data){.n = 96, .dim = 4, .classes = 3, .seed = ct_test_seed,
                                                           .dtype = CT_F64});
    enum { N = 64 };
    double one[N], three[N], none[N];
    train_l2(0.05, 24, 1, d, one, N);
    train_l2(0.05, 8, 3, d, three, N);
    train_l2(0.0, 24, 1, d, none, N);
    double diff = 0, effect = 0;
    for (int i = 0; i < N; i++) {
        diff = fmax(diff, fabs(one[i] - three[i]));
        effect = fmax(effect, fabs(one[i] - none[i]));
    }
    CHECK(diff < 1e-12, "24 x 1 and 8 x 3 with the penalty differ by %g", diff);
    CHECK(effect > 1e-4, "the penalty changed the weights by only %g", effect);
    ct_dataset_free(d);
}

int main(void) {
    ct_test_begin("test_trainer_init");
    if (!(tmp_root = ct_fixture_tmp_root("ct_trainer_init"))) return 1;
    test_zeroed_args();
    test_features();
    test_classes();
    test_labels();
    test_max_batch();
    test_l2_contract();
    ct_fixture_cleanup();
    return ct_test_finish();
}
