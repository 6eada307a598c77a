/* Every extension point's table is checked the same way where it enters the library
 * (core/vtable.h): a table without `.size`, one smaller than its required members, or a required
 * member left NULL is CT_ERR_INVALID_ARG naming the table and the fix, never a silent default, an
 * abort or a jump to address 0. For each table: the error cases, and a correct table that is
 * accepted and actually called (so the checks cannot be passing because nothing is ever called). */
#include <stdlib.h>
#include <string.h>

#include "callbacks/callback.h"
#include "core/util.h"
#include "data/transform.h"
#include "eval/metric.h"
#include "model/layers.h"
#include "model/loss.h"
#include "optim/optimizer.h"
#include "optim/scheduler.h"
#include "testlib.h"
#include "trainer/trainer.h"
#include "trainer_fixture.h"

static const char *tmp_root;
static ct_dataset *data;

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

static void mlp(ct_model *m) {
    if (ct_fixture_mlp_build(&(ct_fixture_mlp){.dim = 4, .classes = 3, .hidden = {8}, .max_batch = 8, .seed = 1}, m) !=
        CT_OK)
        abort();
}

/* --- trainer hooks -------------------------------------------------------------------------------- */

static int loss_calls;
static ct_status counting_loss(ct_trainer *t, const ct_batch *b, ct_loss_value *l, ct_tensor *o, ct_tensor *d) {
    loss_calls++;
    return ct_trainer_default_compute_loss(t, b, l, o, d);
}

static ct_status train_with(const ct_trainer_ops *ops, const char *name) {
    ct_model m;
    mlp(&m);
    ct_training_args a;
    quiet_args(&a, name);
    ct_trainer t;
    ct_status s = ct_trainer_init(&t, ops, &a, &(ct_trainer_setup){.model = &m, .train_dataset = data});
    if (s == CT_OK) {
        ct_train_output out = {0};
        s = ct_trainer_train(&t, NULL, &out);
        ct_train_output_free(&out);
        ct_trainer_free(&t);
    }
    ct_training_args_free(&a);
    ct_model_free(&m);
    return s;
}

static void test_trainer_ops(void) {
    ct_trainer_ops no_size = {.compute_loss = counting_loss};
    loss_calls = 0;
    CHECK_ERR(train_with(&no_size, "no_size"), CT_ERR_INVALID_ARG, "trainer: ct_trainer_ops.size is 0",
              "set .size = sizeof(ct_trainer_ops)");
    CHECK(loss_calls == 0, "a refused table ran %d hooks", loss_calls);
    ct_trainer_ops tiny = {.size = 4, .compute_loss = counting_loss};
    CHECK_ERR(train_with(&tiny, "tiny"), CT_ERR_INVALID_ARG, "ct_trainer_ops.size is 4, smaller than the smallest");
    ct_trainer_ops good = {.size = sizeof good, .compute_loss = counting_loss};
    CHECK_OK(train_with(&good, "good"));
    CHECK(loss_calls == 2, "the override ran %d times in 2 steps", loss_calls);
}

/* --- datasets ------------------------------------------------------------------------------------- */

static int64_t one_length(ct_dataset *ds) {
    (void)ds;
    return 1;
}

static void test_dataset_ops(void) {
    ct_dataset ds;
    CHECK_ERR(ct_dataset_base_init(&ds, &(ct_dataset_ops){.length = one_length}), CT_ERR_INVALID_ARG,
              "ct_dataset_ops.size is 0: set .size = sizeof(ct_dataset_ops)");
    CHECK_ERR(ct_dataset_base_init(&ds, &(ct_dataset_ops){.size = sizeof(ct_dataset_ops), .length = one_length}),
              CT_ERR_INVALID_ARG, "ct_dataset_ops.get_batch is NULL: it is required", "set .get_batch");
    CHECK_ERR(ct_dataset_base_init(&ds, &(ct_dataset_ops){.size = sizeof(ct_dataset_ops)}), CT_ERR_INVALID_ARG,
              "ct_dataset_ops.length is NULL");
    CHECK_ERR(ct_dataset_base_init(&ds, NULL), CT_ERR_INVALID_ARG, "ct_dataset_ops is NULL");
    /* A dataset whose table was never checked (ops set by hand) is caught where it is used. */
    static const ct_dataset_ops no_get = {.size = sizeof(ct_dataset_ops), .name = "mine", .length = one_length};
    ct_dataset *mine = calloc(1, sizeof *mine);
    (void)ct_dataset_base_init(mine, &no_get);
    snprintf(mine->source, sizeof mine->source, "my-data");
    mine->spec = data->spec;
    ct_model m;
    mlp(&m);
    ct_training_args a;
    quiet_args(&a, "bad_dataset");
    ct_trainer t;
    CHECK_ERR(ct_trainer_init(&t, NULL, &a, &(ct_trainer_setup){.model = &m, .train_dataset = mine}),
              CT_ERR_INVALID_ARG, "dataset 'my-data': ct_dataset_ops.get_batch is NULL");
    ct_trainer_free(&t); /* safe after a failed init */
    ct_loader *l;
    CHECK_ERR(ct_loader_create(mine, &(ct_loader_config){.batch_size = 2}, &l), CT_ERR_INVALID_ARG,
              "dataset 'my-data': ct_dataset_ops.get_batch is NULL");
    ct_dataset_free(mine);
    ct_training_args_free(&a);
    ct_model_free(&m);
}

/* --- callbacks ------------------------------------------------------------------------------------ */

static int begins;
static ct_status on_begin(ct_callback *cb, const ct_callback_args *a) {
    (void)cb;
    (void)a;
    begins++;
    return CT_OK;
}

static void test_callback_ops(void) {
    static const ct_callback_ops no_size = {.name = "Mine", .on_train_begin = on_begin};
    static const ct_callback_ops no_name = {.size = sizeof(ct_callback_ops), .on_train_begin = on_begin};
    static const ct_callback_ops good = {.size = sizeof(ct_callback_ops), .name = "Mine", .on_train_begin = on_begin};
    ct_callback cb = {.ops = &no_size};
    ct_callback_list l = {0};
    CHECK_ERR(ct_callback_list_add(&l, &cb), CT_ERR_INVALID_ARG,
              "ct_callback_ops.size is 0: set .size = sizeof(ct_callback_ops)");
    cb.ops = &no_name;
    CHECK_ERR(ct_callback_list_add(&l, &cb), CT_ERR_INVALID_ARG, "ct_callback_ops.name is NULL: it is required");
    cb.ops = NULL;
    CHECK_ERR(ct_callback_list_add(&l, &cb), CT_ERR_INVALID_ARG, "ct_callback_ops is NULL");
    CHECK_ERR(ct_callback_list_add(&l, NULL), CT_ERR_INVALID_ARG, "callback is NULL");
    CHECK(l.n == 0, "refused callbacks joined the list (%d)", l.n);
    /* Through the Trainer: refused, and still the caller's (it is on the stack here). */
    ct_model m;
    mlp(&m);
    ct_training_args a;
    quiet_args(&a, "callbacks");
    ct_trainer t;
    CHECK_OK(ct_trainer_init(&t, NULL, &a, &(ct_trainer_setup){.model = &m, .train_dataset = data}));
    cb.ops = &no_size;
    CHECK_ERR(ct_trainer_add_callback(&t, &cb), CT_ERR_INVALID_ARG, "ct_callback_ops.size is 0");
    ct_callback *ok = calloc(1, sizeof *ok);
    ok->ops = &good;
    CHECK_OK(ct_trainer_add_callback(&t, ok));
    begins = 0;
    ct_train_output out = {0};
    CHECK_OK(ct_trainer_train(&t, NULL, &out));
    CHECK(begins == 1, "on_train_begin of an accepted callback ran %d times", begins);
    ct_train_output_free(&out);
    ct_trainer_free(&t);
    ct_training_args_free(&a);
    ct_model_free(&m);
}

/* --- metrics -------------------------------------------------------------------------------------- */

static ct_status m_update(ct_metric *m, const ct_eval_batch *b) {
    (void)b;
    m->counts[0]++;
    return CT_OK;
}
static ct_status m_compute(const ct_metric *m, const char *prefix, json_t *out) {
    return ct_metric_put(out, prefix, "batches", (double)m->counts[0]);
}

static void test_metric_ops(void) {
    ct_metric m = {0};
    CHECK_ERR(ct_metric_base_init(&m, &(ct_metric_ops){.name = "b", .update = m_update, .compute = m_compute}, 1, NULL,
                                  0, NULL),
              CT_ERR_INVALID_ARG, "ct_metric_ops.size is 0: set .size = sizeof(ct_metric_ops)");
    CHECK_ERR(ct_metric_base_init(&m, &(ct_metric_ops){.size = sizeof(ct_metric_ops), .name = "b", .update = m_update},
                                  1, NULL, 0, NULL),
              CT_ERR_INVALID_ARG, "ct_metric_ops.compute is NULL");
    CHECK_ERR(ct_metric_base_init(&m, &(ct_metric_ops){.size = sizeof(ct_metric_ops), .update = m_update,
                                                       .compute = m_compute},
                                  1, NULL, 0, NULL),
              CT_ERR_INVALID_ARG, "ct_metric_ops.name is NULL");
    CHECK_ERR(ct_metric_base_init(&m, &(ct_metric_ops){.size = offsetof(ct_metric_ops, update), .name = "b",
                                                       .update = m_update, .compute = m_compute},
                                  1, NULL, 0, NULL),
              CT_ERR_INVALID_ARG, "smaller than the smallest ct_metric_ops");
    /* A metric whose ops were set by hand is refused by the set, and stays the caller's. */
    static const ct_metric_ops no_size = {.name = "b", .update = m_update, .compute = m_compute};
    ct_metric_set set = {0};
    ct_metric hand = {.ops = &no_size};
    CHECK_ERR(ct_metric_set_add(&set, &hand), CT_ERR_INVALID_ARG, "ct_metric_ops.size is 0");
    CHECK(set.n == 0, "a refused metric joined the set");
    ct_metric_set_free(&set);
}

/* --- losses --------------------------------------------------------------------------------------- */

static ct_status l_forward(ct_loss *l, const ct_tensor *p, const ct_tensor *t, ct_loss_value *out) {
    (void)l;
    (void)t;
    *out = (ct_loss_value){0, (double)p->shape[0]};
    return CT_OK;
}

static void test_loss_ops(void) {
    ct_loss l;
    CHECK_ERR(ct_loss_base_init(&l, &(ct_loss_ops){.forward = l_forward}), CT_ERR_INVALID_ARG,
              "ct_loss_ops.size is 0: set .size = sizeof(ct_loss_ops)");
    CHECK_ERR(ct_loss_base_init(&l, &(ct_loss_ops){.size = sizeof(ct_loss_ops)}), CT_ERR_INVALID_ARG,
              "ct_loss_ops.forward is NULL");
    /* Without backward a loss can evaluate but not train: refused by ct_trainer_init. */
    static const ct_loss_ops eval_only = {.size = sizeof(ct_loss_ops), .name = "eval_only", .forward = l_forward};
    ct_loss *loss = calloc(1, sizeof *loss);
    CHECK_OK(ct_loss_base_init(loss, &eval_only));
    ct_model m;
    mlp(&m);
    ct_training_args a;
    quiet_args(&a, "loss");
    ct_trainer t;
    CHECK_ERR(ct_trainer_init(&t, NULL, &a, &(ct_trainer_setup){.model = &m, .loss = loss, .train_dataset = data}),
              CT_ERR_INVALID_ARG, "eval_only loss: ct_loss_ops.backward is NULL: training needs it");
    CHECK_OK(ct_trainer_init(&t, NULL, &a,
                             &(ct_trainer_setup){.model = &m, .loss = loss, .n_eval = 1, .eval_datasets = {data}}));
    ct_trainer_free(&t);
    /* Set by hand without a size: refused at init too. */
    static const ct_loss_ops no_size = {.forward = l_forward};
    ct_loss hand = {.ops = &no_size};
    CHECK_ERR(ct_trainer_init(&t, NULL, &a, &(ct_trainer_setup){.model = &m, .loss = &hand, .n_eval = 1,
                                                                 .eval_datasets = {data}}),
              CT_ERR_INVALID_ARG, "ct_loss_ops.size is 0");
    ct_loss_free(loss);
    ct_training_args_free(&a);
    ct_model_free(&m);
}

/* --- modules -------------------------------------------------------------------------------------- */

static ct_status id_forward(ct_module *m, const ct_tensor *x, ct_tensor *y) {
    (void)m;
    *y = *x;
    return CT_OK;
}

static void test_module_ops(void) {
    static const ct_module_ops no_size = {.type = "mine", .forward = id_forward};
    static const ct_module_ops no_type = {.size = sizeof(ct_module_ops), .forward = id_forward};
    static const ct_module_ops no_forward = {.size = sizeof(ct_module_ops), .type = "mine"};
    const ct_module_ops *tables[] = {&no_size, &no_type, &no_forward};
    const char *want[] = {"ct_module_ops.size is 0: set .size = sizeof(ct_module_ops)", "ct_module_ops.type is NULL",
                          "ct_module_ops.forward is NULL"};
    for (int i = 0; i < 3; i++) {
        ct_module *seq, *lin, *bad = calloc(1, sizeof *bad);
        CHECK_OK(ct_sequential_create(&seq));
        CHECK_OK(ct_linear_create(0, 4, true, &lin));
        CHECK_OK(ct_module_add_child(seq, lin, NULL));
        ct_module_base_init(bad, tables[i]);
        CHECK_OK(ct_module_add_child(seq, bad, NULL));
        ct_model m;
        ct_shape in = {.ndim = 1, .dims = {4}};
        CHECK_ERR(ct_model_build(&m, seq, &in, &(ct_model_options){.max_batch = 4}), CT_ERR_INVALID_ARG,
                  "layer '1': ", want[i]);
    }
}

/* --- optimizers and schedulers -------------------------------------------------------------------- */

static void opt_update(ct_optimizer *o, const ct_param_group *g, int64_t offset, int64_t count, double lr) {
    (void)o;
    (void)g;
    (void)offset;
    (void)count;
    (void)lr;
}

static double flat_lambda(const ct_scheduler *s, int64_t step) {
    (void)s;
    (void)step;
    return 1.0;
}

static void test_optim_ops(void) {
    ct_model m;
    mlp(&m);
    ct_optim_config cfg = ct_optim_config_default();
    ct_optimizer o;
    CHECK_ERR(ct_optimizer_base_init(&o, &(ct_optimizer_ops){.name = "mine", .update = opt_update}, &cfg, &m.params),
              CT_ERR_INVALID_ARG, "ct_optimizer_ops.size is 0: set .size = sizeof(ct_optimizer_ops)");
    CHECK_ERR(ct_optimizer_base_init(&o, &(ct_optimizer_ops){.size = sizeof(ct_optimizer_ops), .name = "mine"}, &cfg,
                                     &m.params),
              CT_ERR_INVALID_ARG, "ct_optimizer_ops.step and .update are both NULL");
    CHECK_ERR(ct_optimizer_base_init(&o, &(ct_optimizer_ops){.size = sizeof(ct_optimizer_ops), .update = opt_update},
                                     &cfg, &m.params),
              CT_ERR_INVALID_ARG, "ct_optimizer_ops.name is NULL");
    ct_scheduler s;
    CHECK_ERR(ct_scheduler_base_init(&s, &(ct_scheduler_ops){.name = "mine", .lr_lambda = flat_lambda}, 0.1, 10, 0),
              CT_ERR_INVALID_ARG, "ct_scheduler_ops.size is 0: set .size = sizeof(ct_scheduler_ops)");
    CHECK_ERR(ct_scheduler_base_init(&s, &(ct_scheduler_ops){.size = sizeof(ct_scheduler_ops), .lr_lambda = flat_lambda},
                                     0.1, 10, 0),
              CT_ERR_INVALID_ARG, "ct_scheduler_ops.name is NULL");
    CHECK_OK(ct_scheduler_base_init(&s, &(ct_scheduler_ops){.size = sizeof(ct_scheduler_ops), .name = "mine",
                                                             .lr_lambda = flat_lambda},
                                    0.1, 10, 0));
    ct_model_free(&m);
}

/* --- transforms ----------------------------------------------------------------------------------- */

static void test_transform_ops(void) {
    static const ct_transform_ops no_size = {.name = "mine"};
    ct_transform *tr = calloc(1, sizeof *tr);
    tr->ops = &no_size;
    ct_dataset *base = ct_fixture_dataset(&(ct_fixture_data){.n = 4, .dim = 4, .classes = 3, .seed = 2});
    ct_dataset *out;
    CHECK_ERR(ct_transformed_dataset_create(base, &tr, 1, &out), CT_ERR_INVALID_ARG,
              "transform 0: ct_transform_ops.size is 0: set .size = sizeof(ct_transform_ops)");
}

int main(void) {
    ct_test_begin("test_vtables");
    if (!(tmp_root = ct_fixture_tmp_root("ct_vtables"))) return 1;
    data = ct_fixture_dataset(&(ct_fixture_data){.n = 32, .dim = 4, .classes = 3, .seed = ct_test_seed});
    test_trainer_ops();
    test_dataset_ops();
    test_callback_ops();
    test_metric_ops();
    test_loss_ops();
    test_module_ops();
    test_optim_ops();
    test_transform_ops();
    ct_dataset_free(data);
    ct_fixture_cleanup();
    return ct_test_finish();
}
