/* Gradient buckets sent while backward runs (dist/strategy_ddp.c), seen through a recording communicator
 * that plays rank 0 of 2 and mirrors itself as rank 1 (every SUM doubles, MIN/MAX keep the value):
 *  - the buckets cover the flat gradient buffer exactly once, from its end down, cut at parameter
 *    boundaries, the first one at most 1 MiB (unless one parameter is larger) and the others about
 *    ddp_bucket_cap_mb;
 *  - they start during backward: when every bucket but the last starts, the first layer's gradient
 *    is still what it was before the micro-batch (its backward has not run); every bucket starts once per optimizer step, only in the
 *    step's last micro-batch (accumulation), in order;
 *  - nothing writes into a bucket after its all-reduce started (its contents at the wait equal the
 *    snapshot taken at the start);
 *  - the step's update is the one the summed gradients give: the trained weights equal those of
 *    the same run with the all-reduces done after backward, one bucket at a time (PyTorch's
 *    non-overlapped DDP), bit for bit;
 *  - a training step that runs backward twice in the last micro-batch gets a clear error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/rng.h"
#include "core/util.h"
#include "model/layers.h"
#include "testlib.h"
#include "trainer_fixture.h"
#include "trainer/trainer.h"

/* --- the mirror communicator ------------------------------------------------------------------- */

#define MAX_STARTS 4096

struct ct_comm_request {
    ct_tensor view;
    void *snapshot;
    size_t bytes;
};

typedef struct mirror {
    ct_comm base;
    const float *first_grad; /* the first layer's weight gradient, watched at each start */
    float *first_before;     /* ...and its value before the current micro-batch */
    int64_t first_numel;
    int n_starts, n_late_writes, n_started_before_first;
    int64_t lo[MAX_STARTS], hi[MAX_STARTS];
    const float *grads_base;
} mirror;

static ct_status m_all_reduce(ct_comm *c, ct_tensor *t, ct_reduce op) {
    (void)c;
    if (op == CT_SUM) ct_test_mirror_sum(t);
    return CT_OK;
}

static ct_status m_start(ct_comm *c, ct_tensor *t, ct_reduce op, ct_comm_request **req) {
    mirror *m = (mirror *)c;
    if (op != CT_SUM || t->dtype != CT_F32) return ct_error(CT_ERR_INVALID_ARG, "mirror: f32 sums only");
    m->n_started_before_first += memcmp(m->first_grad, m->first_before, (size_t)m->first_numel * 4) == 0;
    if (m->n_starts < MAX_STARTS) {
        m->lo[m->n_starts] = (const float *)t->data - m->grads_base;
        m->hi[m->n_starts] = m->lo[m->n_starts] + ct_tensor_numel(t);
    }
    m->n_starts++;
    ct_comm_request *r = calloc(1, sizeof *r);
    r->view = *t;
    r->bytes = (size_t)ct_tensor_numel(t) * sizeof(float);
    r->snapshot = malloc(r->bytes ? r->bytes : 1);
    memcpy(r->snapshot, t->data, r->bytes);
    *req = r;
    return CT_OK;
}

static ct_status m_wait(ct_comm *c, ct_comm_request *r) {
    mirror *m = (mirror *)c;
    m->n_late_writes += memcmp(r->snapshot, r->view.data, r->bytes) != 0;
    ct_test_mirror_sum(&r->view);
    free(r->snapshot);
    free(r);
    return CT_OK;
}

static ct_status m_broadcast(ct_comm *c, ct_tensor *t, int root) {
    (void)c, (void)t, (void)root;
    return CT_OK;
}

/* Rank 1 holds what rank 0 holds. */
static ct_status m_all_gather(ct_comm *c, const ct_tensor *in, ct_tensor *out) {
    (void)c;
    size_t bytes = (size_t)ct_tensor_numel(in) * ct_dtype_size(in->dtype);
    for (int r = 0; r < 2; r++)
        if ((char *)out->data + r * bytes != (char *)in->data) memmove((char *)out->data + r * bytes, in->data, bytes);
    return CT_OK;
}

static const ct_comm_ops mirror_ops = {.size = sizeof(ct_comm_ops), .name = "mirror", .all_reduce = m_all_reduce,
                                       .all_reduce_start = m_start, .wait = m_wait, .broadcast = m_broadcast,
                                       .all_gather = m_all_gather};

static void mirror_init(mirror *m) {
    memset(m, 0, sizeof *m);
    m->base = (ct_comm){.ops = &mirror_ops, .rank = 0, .world_size = 2, .local_rank = 0, .local_world_size = 2,
                        .timeout_s = 60};
}

/* --- the run ------------------------------------------------------------------------------------ */

static const char *tmp_root; /* the fixture's temporary root */

static ct_dataset *make_data(int64_t n, int64_t dim, int64_t classes, uint64_t seed) {
    return ct_fixture_dataset(&(ct_fixture_data){.n = n, .dim = dim, .classes = classes, .seed = seed});
}

/* An MLP dim -> 512 -> 512 -> 512 -> classes: 8 parameters; with dim 256 the 1 MiB first bucket
 * closes at the last hidden weight (exactly 1 MiB), so 1 MiB buckets give 3 and 25 MiB give 2. */
static ct_status make_model(ct_model *m, int64_t dim, int64_t classes) {
    ct_fixture_mlp o = {.dim = dim, .classes = classes, .hidden = {512, 512, 512}, .max_batch = 64, .seed = 11};
    return ct_fixture_mlp_build(&o, m);
}

typedef struct run_opts {
    int64_t ga, bucket_mb, steps;
    bool backward_twice;
    bool non_overlapped; /* reference: all-reduces after backward, bucket by bucket */
} run_opts;

/* Notes the first layer's gradient before each micro-batch's backward. */
static mirror *watched;

static ct_status watching_training_step(ct_trainer *t, const ct_batch *b, ct_loss_value *loss) {
    memcpy(watched->first_before, watched->first_grad, (size_t)watched->first_numel * 4);
    return ct_trainer_default_training_step(t, b, loss);
}

static ct_status twice_training_step(ct_trainer *t, const ct_batch *b, ct_loss_value *loss) {
    CT_TRY(ct_trainer_default_training_step(t, b, loss));
    ct_loss_value again;
    return ct_trainer_default_training_step(t, b, &again);
}

/* The reference: no overlap, PyTorch's DDP without hooks (one all-reduce per bucket after the
 * backward, through ordinary blocking calls with the same bucket boundaries). */
static ct_status after_backward_training_step(ct_trainer *t, const ct_batch *b, ct_loss_value *loss) {
    memcpy(watched->first_before, watched->first_grad, (size_t)watched->first_numel * 4);
    ct_grads_ready_fn fn = t->model->step.grads_ready;
    void *ctx = t->model->step.grads_ready_ctx;
    ct_model_set_grads_ready(t->model, NULL, NULL); /* backward without reports... */
    ct_status s = ct_trainer_default_training_step(t, b, loss);
    ct_model_set_grads_ready(t->model, fn, ctx);    /* ...and the Trainer starts every bucket after it */
    return s;
}

typedef struct run_result {
    ct_status status;
    char error[512];
    float *weights;
    int64_t n_weights, numel;
    int n_buckets;
    mirror comm;
    int64_t param_lo[16], param_hi[16];
    int n_params;
} run_result;

static void run(const run_opts *o, ct_dataset *train, int64_t dim, int64_t classes, run_result *r) {
    memset(r, 0, sizeof *r);
    ct_model model;
    if (make_model(&model, dim, classes) != CT_OK) {
        fprintf(stderr, "model: %s\n", ct_last_error());
        abort();
    }
    mirror_init(&r->comm);
    const ct_param *first = ct_params_find(&model.params, "1.weight") /* after the flatten */;
    if (!first) abort();
    r->comm.first_grad = (const float *)model.params.grads.data + first->offset;
    r->comm.first_numel = first->numel;
    r->comm.first_before = calloc((size_t)first->numel, sizeof(float));
    watched = &r->comm;
    r->comm.grads_base = model.params.grads.data;
    r->numel = ct_tensor_numel(&model.params.grads);
    for (int i = 0; i < model.params.count && i < 16; i++, r->n_params++) {
        r->param_lo[i] = model.params.items[i].offset;
        r->param_hi[i] = model.params.items[i].offset + model.params.items[i].numel;
    }
    ct_training_args a;
    ct_training_args_default(&a);
    snprintf(a.output_dir, sizeof a.output_dir, "%s/run", tmp_root);
    a.disable_tqdm = true;
    a.save_strategy = CT_INTERVAL_NO;
    a.logging_strategy = CT_INTERVAL_NO;
    a.learning_rate = 1e-2;
    a.per_device_train_batch_size = 8;
    a.gradient_accumulation_steps = o->ga;
    a.max_steps = o->steps;
    a.ddp_bucket_cap_mb = o->bucket_mb;
    ct_trainer_ops ops = {.size = sizeof ops, .training_step = watching_training_step};
    if (o->backward_twice) ops.training_step = twice_training_step;
    if (o->non_overlapped) ops.training_step = after_backward_training_step;
    ct_trainer_setup setup = {.model = &model, .train_dataset = train, .comm = &r->comm.base};
    ct_trainer t;
    r->status = ct_trainer_init(&t, &ops, &a, &setup);
    if (r->status == CT_OK) {
        ct_train_output out;
        ct_error_clear();
        r->status = ct_trainer_train(&t, NULL, &out);
        if (r->status == CT_OK) ct_train_output_free(&out);
        else snprintf(r->error, sizeof r->error, "%s", ct_last_error());
        ct_trainer_free(&t);
    } else {
        snprintf(r->error, sizeof r->error, "%s", ct_last_error());
    }
    r->n_weights = ct_tensor_numel(&model.params.values);
    r->weights = malloc((size_t)r->n_weights * sizeof(float));
    memcpy(r->weights, model.params.values.data, (size_t)r->n_weights * sizeof(float));
    ct_model_free(&model);
    free(r->comm.first_before);
    r->comm.first_before = NULL;
}

/* The starts of each step tile [0, numel) from the top down, cut at parameter starts. */
static void check_buckets(const run_result *r, int64_t steps, int64_t cap_bytes, const char *what) {
    int per_step = steps > 0 ? r->comm.n_starts / (int)steps : 0;
    CHECK(per_step > 0 && per_step * steps == r->comm.n_starts, "%s: %d starts over %lld steps", what,
          r->comm.n_starts, (long long)steps);
    bool tiled = true, cut_at_params = true, sizes_ok = true, same_each_step = true;
    for (int k = 0; k < r->comm.n_starts && k < MAX_STARTS; k++) {
        int b = k % per_step;
        int64_t expect_hi = b == 0 ? r->numel : r->comm.lo[k - 1];
        tiled = tiled && r->comm.hi[k] == expect_hi && r->comm.lo[k] < r->comm.hi[k];
        if (b == per_step - 1) tiled = tiled && r->comm.lo[k] == 0;
        bool at_param = false;
        for (int i = 0; i < r->n_params; i++) at_param = at_param || r->param_lo[i] == r->comm.lo[k];
        cut_at_params = cut_at_params && at_param;
        if (k >= per_step) same_each_step = same_each_step && r->comm.lo[k] == r->comm.lo[k - per_step];
        /* Size: the bucket minus its lowest parameter is below the cap (it closed at the parameter
         * that filled it); the first bucket's cap is 1 MiB. */
        int64_t cap = b == 0 ? (cap_bytes < (1 << 20) ? cap_bytes : (1 << 20)) : cap_bytes;
        int64_t lowest_end = 0;
        for (int i = 0; i < r->n_params; i++)
            if (r->param_lo[i] == r->comm.lo[k]) lowest_end = r->param_hi[i];
        if (b < per_step - 1) sizes_ok = sizes_ok && (r->comm.hi[k] - lowest_end) * 4 < cap;
    }
    CHECK(tiled, "%s: buckets tile the gradient buffer from the end down, once per step", what);
    CHECK(cut_at_params, "%s: buckets start at parameter boundaries", what);
    CHECK(sizes_ok, "%s: buckets close at the parameter that fills them", what);
    CHECK(same_each_step, "%s: the same buckets every step", what);
}

int main(void) {
    ct_test_begin("test_ddp_overlap");
    if (!(tmp_root = ct_fixture_tmp_root("ct_ddp_overlap"))) return 1;
    uint64_t seed = ct_test_seed;
    const int64_t dim = 256, classes = 10, n = 8 * 2 * 6 + 5; /* a short last global batch */
    ct_dataset *train = make_data(n, dim, classes, seed);

    /* 1 MiB buckets (3 per step) and PyTorch's 25 MiB (a 1 MiB first bucket, then the rest). */
    const int64_t caps[] = {1, 25};
    for (int c = 0; c < 2; c++) {
        for (int64_t ga = 1; ga <= 3; ga += 2) {
            run_opts o = {.ga = ga, .bucket_mb = caps[c], .steps = 4};
            run_result r, ref;
            run(&o, train, dim, classes, &r);
            o.non_overlapped = true;
            run(&o, train, dim, classes, &ref);
            char what[96];
            snprintf(what, sizeof what, "cap %lld MiB, accumulation %lld", (long long)caps[c], (long long)ga);
            CHECK(r.status == CT_OK && ref.status == CT_OK, "%s: runs (%s%s)", what, r.error, ref.error);
            check_buckets(&r, o.steps, caps[c] << 20, what);
            check_buckets(&ref, o.steps, caps[c] << 20, what);
            int per_step = r.comm.n_starts / (int)o.steps;
            CHECK(per_step == (c == 0 ? 3 : 2), "%s: %d buckets per step", what, per_step);
            /* Every bucket but the one holding layer 0 starts before layer 0's backward. */
            CHECK(r.comm.n_started_before_first == (per_step - 1) * o.steps,
                  "%s: %d of %d starts happened before the first layer's backward (want %lld)", what,
                  r.comm.n_started_before_first, r.comm.n_starts, (long long)((per_step - 1) * o.steps));
            CHECK(ref.comm.n_started_before_first == 0, "%s: the reference starts after backward", what);
            CHECK(r.comm.n_late_writes == 0 && ref.comm.n_late_writes == 0,
                  "%s: no gradient changed after its all-reduce started (%d)", what, r.comm.n_late_writes);
            CHECK(r.n_weights == ref.n_weights &&
                      memcmp(r.weights, ref.weights, (size_t)r.n_weights * sizeof(float)) == 0,
                  "%s: overlapped and after-backward all-reduce train the same weights", what);
            free(r.weights);
            free(ref.weights);
        }
    }

    /* Two backward passes in the last micro-batch. */
    run_opts o = {.ga = 1, .bucket_mb = 1, .steps = 2, .backward_twice = true};
    run_result r;
    run(&o, train, dim, classes, &r);
    CHECK(r.status == CT_ERR_STATE, "backward twice: CT_ERR_STATE (got %d: %s)", r.status, r.error);
    CHECK(strstr(r.error, "backward ran twice in the last micro-batch of a step") != NULL, "backward twice: '%s'",
          r.error);
    free(r.weights);

    ct_dataset_free(train);
    ct_fixture_cleanup();
    return ct_test_finish();
}
