/* Checkpoint files and directories (checkpoint/checkpoint_io.h): optimizer state through HDF5 bit for bit
 * (SGD with momentum, Adam, AdamW, AMSGrad, in f32 and f64) with the continued run equal to the
 * uninterrupted one; mismatches (another optimizer, other betas, another parameter count, a foreign
 * or damaged file) named and leaving the optimizer as it was; scheduler state through JSON; the
 * manifest (every kind of damage detected and named); commit replacing an older checkpoint; latest
 * skipping invalid checkpoints with warnings; resolve.
 *
 * `test_checkpoint_io --write DIR` instead writes checkpoints and the inputs that produced them for
 * tests/oracle/test_checkpoint_h5.py, which reads them with h5py and recomputes them with PyTorch.
 *
 * Why one file of over 600 lines: it tests one header (checkpoint/checkpoint_io.h), and the
 * --write mode its oracle reads uses the same writers of optimizers and damaged files. */
#define _GNU_SOURCE /* nftw */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <hdf5.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "checkpoint/checkpoint_io.h"
#include "core/format/h5io.h"
#include "core/fs.h"
#include "model/params.h"
#include "optim/optimizer.h"
#include "optim/scheduler.h"
#include "testlib.h"

static ct_rng rng;
static char root_dir[] = "/tmp/ct_test_ckpt_XXXXXX";

/* --- files -------------------------------------------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void rm_tree(const char *path) { nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static bool exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "cannot create %s: %s", path, strerror(errno));
    if (!f) return;
    CHECK(fwrite(data, 1, n, f) == n, "cannot write %s", path);
    fclose(f);
}

static unsigned char *random_bytes(size_t n) {
    unsigned char *b = malloc(n + 1);
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)ct_rng_u32(&rng);
    return b;
}

/* --- a random parameter store (see test_optim.c) ------------------------------------------------- */

#define MAX_TENSORS 16

typedef struct store {
    ct_param_store ps;
    ct_tensor values[MAX_TENSORS], grads[MAX_TENSORS];
} store;

/* 3-6 tensors of random sizes, alternately with and without weight decay, plus `extra` more tensors
 * of 100 elements (a store with a different parameter count) and a buffer. Same rng state -> same
 * store. */
static void make_store(store *st, ct_dtype dt, ct_rng *r, int extra) {
    static const ct_module root;
    ct_params_init(&st->ps, dt, CT_CPU);
    int n = 3 + (int)ct_rng_below(r, 4);
    for (int i = 0; i < n + extra; i++) {
        int64_t shape[2] = {1 + (int64_t)ct_rng_below(r, 9), 1 + (int64_t)ct_rng_below(r, 13)};
        if (i >= n) shape[0] = 10, shape[1] = 10;
        bool no_decay = i % 2 == 1;
        char name[32];
        snprintf(name, sizeof name, "layers.%d.%s", i, no_decay ? "bias" : "weight");
        CHECK_OK(ct_params_declare(&st->ps, &root, name, no_decay ? 1 : 2, no_decay ? shape + 1 : shape,
                                   no_decay ? CT_PARAM_NO_DECAY : 0u, &st->values[i], &st->grads[i]));
    }
    int64_t bshape = 5;
    CHECK_OK(ct_params_declare(&st->ps, &root, "norm.running_mean", 1, &bshape, CT_PARAM_BUFFER, &st->values[n + extra],
                               NULL));
    CHECK_OK(ct_params_finalize(&st->ps));
    for (int i = 0; i < st->ps.count; i++)
        for (int64_t j = 0; j < st->ps.items[i].numel; j++) ct_tensor_set(st->ps.items[i].value, j, ct_rng_normal(r));
}

/* Gradients of step k: a pure function of (seed, k), so two stores see the same ones. */
static void set_grads(store *st, int k) {
    ct_params_zero_grad(&st->ps);
    uint32_t key[2] = {(uint32_t)ct_test_seed, (uint32_t)(ct_test_seed >> 32)};
    for (int i = 0; i < st->ps.count; i++) {
        ct_param *p = &st->ps.items[i];
        if (p->flags & CT_PARAM_BUFFER) continue;
        for (int64_t j = 0; j < p->numel; j++) {
            uint32_t ctr[4] = {(uint32_t)j, (uint32_t)i, (uint32_t)k, 11}, out[4];
            ct_philox4x32(ctr, key, out);
            ct_tensor_set(p->grad, j, (double)ct_u32_to_unit_float(out[0]) * 2.0 - 1.0 + 0.01);
        }
    }
}

static double lr_of_step(const ct_optim_config *cfg, int k) { return cfg->learning_rate * (1.0 + 0.1 * (k % 7)); }

static void run_steps(ct_optimizer *opt, store *st, int from, int to) {
    for (int k = from; k < to; k++) {
        set_grads(st, k);
        CHECK_OK(ct_optimizer_step(opt, lr_of_step(&opt->config, k)));
    }
}

static bool same_bytes(const ct_tensor *a, const ct_tensor *b) {
    return ct_tensor_nbytes(a) == ct_tensor_nbytes(b) && memcmp(a->data, b->data, ct_tensor_nbytes(a)) == 0;
}

/* Parameters, step counts and every state tensor equal bit for bit. */
static bool identical(ct_optimizer *a, const store *sa, ct_optimizer *b, const store *sb, const char *label) {
    bool ok = same_bytes(&sa->ps.values, &sb->ps.values);
    CHECK(ok, "%s: parameters differ", label);
    CHECK(ct_optimizer_step_count(a) == ct_optimizer_step_count(b), "%s: step counts %lld and %lld", label,
          (long long)ct_optimizer_step_count(a), (long long)ct_optimizer_step_count(b));
    ok = ok && ct_optimizer_step_count(a) == ct_optimizer_step_count(b);
    CHECK(ct_optimizer_state_count(a) == ct_optimizer_state_count(b), "%s: state counts differ", label);
    for (int i = 0; i < ct_optimizer_state_count(a); i++) {
        const char *name;
        ct_tensor *t;
        CHECK_OK(ct_optimizer_state_get(a, i, &name, &t));
        ct_tensor *u = ct_optimizer_state_find(b, name);
        bool same = u && same_bytes(t, u);
        CHECK(same, "%s: state '%s' differs", label, name);
        ok = ok && same;
    }
    return ok;
}

/* A copy of an optimizer's state and step count, to prove a failed load changed nothing. */
typedef struct snapshot {
    int n;
    ct_tensor t[CT_OPTIM_MAX_STATE];
    int64_t step;
} snapshot;

static void take_snapshot(ct_optimizer *opt, snapshot *s) {
    s->n = ct_optimizer_state_count(opt);
    s->step = ct_optimizer_step_count(opt);
    for (int i = 0; i < s->n; i++) {
        const char *name;
        ct_tensor *t;
        CHECK_OK(ct_optimizer_state_get(opt, i, &name, &t));
        CHECK_OK(ct_tensor_alloc(&s->t[i], t->dtype, CT_CPU, t->ndim, t->shape));
        memcpy(s->t[i].data, t->data, ct_tensor_nbytes(t));
    }
}

static void check_unchanged(ct_optimizer *opt, snapshot *s, const char *label) {
    CHECK(ct_optimizer_step_count(opt) == s->step, "%s: step count changed to %lld", label,
          (long long)ct_optimizer_step_count(opt));
    for (int i = 0; i < s->n; i++) {
        const char *name;
        ct_tensor *t;
        CHECK_OK(ct_optimizer_state_get(opt, i, &name, &t));
        CHECK(same_bytes(t, &s->t[i]), "%s: state '%s' changed by a failed load", label, name);
        ct_tensor_free(&s->t[i]);
    }
}

static ct_optim_config config(ct_optim_kind kind, bool amsgrad, double momentum) {
    ct_optim_config c = ct_optim_config_default();
    c.optim = kind;
    c.learning_rate = 0.01;
    c.weight_decay = 0.05;
    c.amsgrad = amsgrad;
    c.adam_beta1 = 0.8 + 0.15 * ct_rng_uniform(&rng);
    c.adam_beta2 = 0.99 + 0.009 * ct_rng_uniform(&rng);
    c.momentum = momentum;
    if (kind == CT_OPTIM_SGD && momentum > 0 && ct_rng_below(&rng, 2)) c.dampening = 0.1;
    return c;
}

/* --- optimizer round trip ---------------------------------------------------------------------- */

static void optimizer_round_trip(const char *label, ct_optim_config cfg, ct_dtype dt) {
    ct_rng r1;
    ct_rng_init(&r1, ct_test_seed, 1, CT_RNG_USER);
    ct_rng r2 = r1, r3 = r1;
    store sa, sb, sc;
    make_store(&sa, dt, &r1, 0);
    make_store(&sb, dt, &r2, 0);
    make_store(&sc, dt, &r3, 0);
    ct_optimizer *a = NULL, *b = NULL, *c = NULL;
    CHECK_OK(ct_optimizer_create(&cfg, &sa.ps, &a));
    CHECK_OK(ct_optimizer_create(&cfg, &sb.ps, &b));
    CHECK_OK(ct_optimizer_create(&cfg, &sc.ps, &c));
    if (!a || !b || !c) return;
    int k = 2 + (int)ct_rng_below(&rng, 6);
    run_steps(a, &sa, 0, k);
    char path[256];
    snprintf(path, sizeof path, "%s/optimizer.h5", root_dir);
    CHECK_OK(ct_optimizer_save_h5(a, path));
    /* b resumes: the parameters come with model.h5 (here a copy), the rest with optimizer.h5. */
    memcpy(sb.ps.values.data, sa.ps.values.data, ct_tensor_nbytes(&sa.ps.values));
    memcpy(sc.ps.values.data, sa.ps.values.data, ct_tensor_nbytes(&sa.ps.values));
    CHECK_OK(ct_optimizer_load_h5(b, path));
    CHECK(ct_optimizer_step_count(b) == k, "%s: restored step count %lld, want %d", label,
          (long long)ct_optimizer_step_count(b), k);
    CHECK(ct_optimizer_state_count(a) > 0 || cfg.optim == CT_OPTIM_SGD, "%s: no state", label);
    char what[160];
    snprintf(what, sizeof what, "%s after load", label);
    identical(a, &sa, b, &sb, what);
    int more = 1 + (int)ct_rng_below(&rng, 4);
    run_steps(a, &sa, k, k + more);
    run_steps(b, &sb, k, k + more);
    snprintf(what, sizeof what, "%s continued", label);
    identical(a, &sa, b, &sb, what);
    /* A continuation without the state must differ, or the comparison proves nothing. */
    run_steps(c, &sc, k, k + more);
    CHECK(!same_bytes(&sa.ps.values, &sc.ps.values), "%s: a fresh optimizer continues the same way", label);
    ct_optimizer_destroy(a);
    ct_optimizer_destroy(b);
    ct_optimizer_destroy(c);
    ct_params_free(&sa.ps);
    ct_params_free(&sb.ps);
    ct_params_free(&sc.ps);
    unlink(path);
}

/* --- optimizer mismatches ------------------------------------------------------------------------ */

/* Loads `path` into a fresh optimizer over a store made from the same seed (plus `extra` tensors),
 * stepped a few times first so its state is not zero; expects `want` and the substrings, and the
 * optimizer unchanged. With want == CT_OK the load must succeed. */
static void expect_load(const char *label, const char *path, ct_optim_config cfg, int extra, ct_status want,
                        const char *sub1, const char *sub2) {
    ct_rng r;
    ct_rng_init(&r, ct_test_seed, 2, CT_RNG_USER);
    store st;
    make_store(&st, CT_F32, &r, extra);
    ct_optimizer *opt = NULL;
    CHECK_OK(ct_optimizer_create(&cfg, &st.ps, &opt));
    if (!opt) return;
    run_steps(opt, &st, 0, 2);
    snapshot snap;
    take_snapshot(opt, &snap);
    ct_status s = ct_optimizer_load_h5(opt, path);
    CHECK(s == want, "%s: load -> %s, want %s: %s", label, ct_status_str(s), ct_status_str(want), ct_last_error());
    if (want != CT_OK) {
        const char *subs[] = {sub1, sub2, path};
        for (int i = 0; i < 3; i++)
            if (subs[i])
                CHECK(strstr(ct_last_error(), subs[i]), "%s: message lacks '%s': %s", label, subs[i], ct_last_error());
        check_unchanged(opt, &snap, label);
    } else {
        for (int i = 0; i < snap.n; i++) ct_tensor_free(&snap.t[i]);
        CHECK(ct_optimizer_step_count(opt) == 5, "%s: step count %lld after load", label,
              (long long)ct_optimizer_step_count(opt));
    }
    ct_optimizer_destroy(opt);
    ct_params_free(&st.ps);
}

typedef struct load_call {
    const char *label, *path;
    ct_optim_config cfg;
    ct_status want;
} load_call;

static void call_expect_load(void *arg) {
    load_call *c = arg;
    expect_load(c->label, c->path, c->cfg, 0, c->want, NULL, NULL);
}

static void optimizer_mismatches(void) {
    ct_optim_config adamw = config(CT_OPTIM_ADAMW, false, 0);
    ct_rng r;
    ct_rng_init(&r, ct_test_seed, 2, CT_RNG_USER);
    store st;
    make_store(&st, CT_F32, &r, 0);
    ct_optimizer *opt = NULL;
    CHECK_OK(ct_optimizer_create(&adamw, &st.ps, &opt));
    if (!opt) return;
    run_steps(opt, &st, 0, 5);
    char path[256], sgd_path[256];
    snprintf(path, sizeof path, "%s/adamw.h5", root_dir);
    CHECK_OK(ct_optimizer_save_h5(opt, path));
    ct_optimizer_destroy(opt);
    ct_params_free(&st.ps);

    /* Allowed changes: the learning rate, weight decay and epsilon, each named in a warning (a
     * Hugging Face resume would keep the checkpoint's); an unchanged or refused load warns of none. */
    ct_optim_config changed = adamw;
    changed.learning_rate = 0.03;
    changed.weight_decay = 0.2;
    changed.adam_epsilon = 1e-6;
    load_call call = {"new lr and weight decay", path, changed, CT_OK};
    char *err = ct_test_capture_stderr(call_expect_load, &call);
    const char *named[] = {"learning_rate = 0.03", "weight_decay = 0.2", "adam_epsilon = 1e-06",
                           "keep the checkpoint's"};
    for (int i = 0; i < 4; i++)
        CHECK(err && strstr(err, named[i]), "changed rates: the warnings lack '%s': %s", named[i], err ? err : "");
    free(err);
    call = (load_call){"same config", path, adamw, CT_OK};
    err = ct_test_capture_stderr(call_expect_load, &call);
    CHECK(err && !strstr(err, "saved with"), "an unchanged load warns: %s", err ? err : "");
    free(err);
    call = (load_call){"other beta2 with new lr", path, changed, CT_ERR_CONFIG};
    call.cfg.adam_beta2 = 0.95;
    err = ct_test_capture_stderr(call_expect_load, &call);
    CHECK(err && !strstr(err, "saved with learning_rate"), "a refused load warns: %s", err ? err : "");
    free(err);

    ct_optim_config other = config(CT_OPTIM_SGD, false, 0.9);
    expect_load("sgd from adamw", path, other, 0, CT_ERR_CONFIG, "holds 'adamw' state", "this run uses 'sgd'");
    other = adamw;
    other.optim = CT_OPTIM_ADAM;
    expect_load("adam from adamw", path, other, 0, CT_ERR_CONFIG, "holds 'adamw' state", "this run uses 'adam'");
    other = adamw;
    other.adam_beta2 = 0.95;
    expect_load("other beta2", path, other, 0, CT_ERR_CONFIG, "this run uses adam_beta2 = 0.95", "adam_beta2 = 0.99");
    other = adamw;
    other.adam_beta1 = 0.5;
    expect_load("other beta1", path, other, 0, CT_ERR_CONFIG, "adam_beta1", "this run uses adam_beta1 = 0.5");
    other = adamw;
    other.amsgrad = true;
    expect_load("amsgrad", path, other, 0, CT_ERR_CONFIG, "amsgrad = false", "this run uses amsgrad = true");
    expect_load("more parameters", path, adamw, 1, CT_ERR_CONFIG, "state tensor 'exp_avg' has", "another model?");

    /* SGD: momentum and dampening change what the buffer holds; nesterov does not. */
    ct_optim_config sgd = config(CT_OPTIM_SGD, false, 0.9);
    sgd.dampening = 0;
    ct_rng_init(&r, ct_test_seed, 2, CT_RNG_USER);
    make_store(&st, CT_F32, &r, 0);
    CHECK_OK(ct_optimizer_create(&sgd, &st.ps, &opt));
    if (!opt) return;
    run_steps(opt, &st, 0, 5);
    snprintf(sgd_path, sizeof sgd_path, "%s/sgd.h5", root_dir);
    CHECK_OK(ct_optimizer_save_h5(opt, sgd_path));
    ct_optimizer_destroy(opt);
    ct_params_free(&st.ps);
    other = sgd;
    other.nesterov = true;
    expect_load("sgd nesterov", sgd_path, other, 0, CT_OK, NULL, NULL);
    other = sgd;
    other.momentum = 0.5;
    expect_load("sgd momentum", sgd_path, other, 0, CT_ERR_CONFIG, "was saved with momentum = 0.9,",
                "this run uses momentum = 0.5");
    other = sgd;
    other.dampening = 0.3;
    expect_load("sgd dampening", sgd_path, other, 0, CT_ERR_CONFIG, "dampening = 0", "this run uses dampening = 0.3");
    expect_load("adamw from sgd", sgd_path, adamw, 0, CT_ERR_CONFIG, "holds 'sgd' state", "this run uses 'adamw'");

    /* Damaged and foreign files. */
    char bad[256];
    snprintf(bad, sizeof bad, "%s/missing.h5", root_dir);
    expect_load("missing file", bad, adamw, 0, CT_ERR_IO, "cannot read", NULL);
    snprintf(bad, sizeof bad, "%s/garbage.h5", root_dir);
    unsigned char *junk = random_bytes(3000);
    write_bytes(bad, junk, 3000);
    free(junk);
    expect_load("garbage file", bad, adamw, 0, CT_ERR_FORMAT, "not an HDF5 file", NULL);
    /* A dataset gone: exp_avg is read before exp_avg_sq fails, and must not have been copied. */
    size_t n;
    unsigned char *orig = (unsigned char *)ct_test_read_file(path, &n);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    CHECK(f >= 0 && H5Ldelete(f, "exp_avg_sq", H5P_DEFAULT) >= 0, "cannot delete exp_avg_sq");
    if (f >= 0) H5Fclose(f);
    expect_load("missing exp_avg_sq", path, adamw, 0, CT_ERR_FORMAT, "no state tensor 'exp_avg_sq'", NULL);
    write_bytes(path, orig, n);
    /* An extra dataset: state this optimizer does not have. */
    f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    int64_t three = 3;
    ct_tensor t;
    CHECK_OK(ct_tensor_alloc(&t, CT_F32, CT_CPU, 1, &three));
    ct_tensor_fill(&t, 1.5);
    CHECK_OK(ct_h5_write_tensor(f, "bogus_state", &t));
    ct_tensor_free(&t);
    H5Fclose(f);
    expect_load("extra dataset", path, adamw, 0, CT_ERR_CONFIG, "holds state 'bogus_state'", "'adamw'");
    write_bytes(path, orig, n);
    /* No attributes. */
    f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    CHECK(f >= 0 && H5Adelete(f, "step") >= 0, "cannot delete the step attribute");
    if (f >= 0) H5Fclose(f);
    expect_load("no step attribute", path, adamw, 0, CT_ERR_FORMAT, "no attribute 'step'", NULL);
    write_bytes(path, orig, n);
    /* A NaN or infinity in a state tensor (a moment that would poison every later update without a
     * bad step to report) is refused, naming the tensor and the element, and nothing is copied. */
    const char *states[] = {"exp_avg", "exp_avg_sq"};
    const char *state = states[ct_rng_below(&rng, 2)];
    const double bad_values[] = {NAN, INFINITY, -INFINITY};
    double bad_value = bad_values[ct_rng_below(&rng, 3)];
    f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    CHECK_OK(ct_h5_read_tensor_alloc(f, state, CT_F32, &t));
    int64_t at = (int64_t)ct_rng_below(&rng, (uint64_t)ct_tensor_numel(&t));
    ct_tensor_set(&t, at, bad_value);
    CHECK(H5Ldelete(f, state, H5P_DEFAULT) >= 0, "cannot replace %s", state);
    CHECK_OK(ct_h5_write_tensor(f, state, &t));
    ct_tensor_free(&t);
    H5Fclose(f);
    char where[96], which[64];
    snprintf(which, sizeof which, "state tensor '%s': holds 1 non-finite value", state);
    snprintf(where, sizeof where, "the first %s at element %lld of", isnan(bad_value) ? "nan" : bad_value > 0 ? "inf" : "-inf",
             (long long)at);
    expect_load("non-finite state", path, adamw, 0, CT_ERR_FORMAT, which, where);
    write_bytes(path, orig, n);
    expect_load("restored file", path, adamw, 0, CT_OK, NULL, NULL);
    free(orig);
}

/* --- scheduler --------------------------------------------------------------------------------- */

static ct_scheduler *make_scheduler(const char *type, double base_lr) {
    ct_scheduler_config c = ct_scheduler_config_default();
    snprintf(c.lr_scheduler_type, sizeof c.lr_scheduler_type, "%s", type);
    if (strcmp(type, "reduce_lr_on_plateau") == 0)
        c.kwargs.patience = 1;
    else
        c.warmup_steps = 3;
    ct_scheduler *s = NULL;
    CHECK_OK(ct_scheduler_create(&c, base_lr, strcmp(type, "reduce_lr_on_plateau") == 0 ? 0 : 40, &s));
    return s;
}

static void scheduler_round_trip(const char *type) {
    char path[256];
    snprintf(path, sizeof path, "%s/scheduler.json", root_dir);
    ct_scheduler *a = make_scheduler(type, 0.1), *b = make_scheduler(type, 0.1);
    if (!a || !b) return;
    int k = 3 + (int)ct_rng_below(&rng, 15);
    for (int i = 0; i < k; i++) {
        ct_scheduler_step(a);
        CHECK_OK(ct_scheduler_step_metric(a, 1.0 + 0.1 * i * ct_rng_uniform(&rng)));
    }
    CHECK_OK(ct_scheduler_save_json(a, path));
    CHECK_OK(ct_scheduler_load_json(b, path));
    ct_scheduler_state x = ct_scheduler_get_state(a), y = ct_scheduler_get_state(b);
    CHECK(x.step == y.step && x.lr == y.lr && x.best == y.best && x.num_bad_epochs == y.num_bad_epochs &&
              x.cooldown_counter == y.cooldown_counter,
          "%s: restored state (%lld, %.17g, %g, %lld) != (%lld, %.17g, %g, %lld)", type, (long long)y.step, y.lr,
          y.best, (long long)y.num_bad_epochs, (long long)x.step, x.lr, x.best, (long long)x.num_bad_epochs);
    CHECK(x.step == k, "%s: step %lld after %d steps or metrics", type,
          (long long)x.step, k);
    for (int i = 0; i < 5; i++) {
        double m = 2.0 + ct_rng_uniform(&rng);
        ct_scheduler_step(a);
        ct_scheduler_step(b);
        CHECK_OK(ct_scheduler_step_metric(a, m));
        CHECK_OK(ct_scheduler_step_metric(b, m));
        CHECK(ct_scheduler_lr(a) == ct_scheduler_lr(b), "%s: continued lr %.17g != %.17g", type, ct_scheduler_lr(b),
              ct_scheduler_lr(a));
    }
    ct_scheduler_destroy(a);
    ct_scheduler_destroy(b);
}

static void scheduler_errors(void) {
    char path[256], bad[256];
    snprintf(path, sizeof path, "%s/scheduler.json", root_dir);
    ct_scheduler *a = make_scheduler("cosine", 0.1), *b = make_scheduler("linear", 0.1);
    if (!a || !b) return;
    for (int i = 0; i < 7; i++) ct_scheduler_step(a);
    ct_scheduler_step(b);
    CHECK_OK(ct_scheduler_save_json(a, path));
    ct_scheduler_state before = ct_scheduler_get_state(b);
    CHECK_ERR(ct_scheduler_load_json(b, path), CT_ERR_CONFIG, "holds 'cosine' state",
              "this run uses lr_scheduler_type 'linear'", path);
    ct_scheduler_state after = ct_scheduler_get_state(b);
    CHECK(before.step == after.step && before.lr == after.lr, "linear: state changed by a failed load");
    snprintf(bad, sizeof bad, "%s/missing.json", root_dir);
    CHECK_ERR(ct_scheduler_load_json(a, bad), CT_ERR_IO, "cannot read", "missing.json");
    snprintf(bad, sizeof bad, "%s/garbage.json", root_dir);
    write_bytes(bad, "{\"lr_scheduler_type\": \"cosine\", ", 32);
    CHECK_ERR(ct_scheduler_load_json(a, bad), CT_ERR_FORMAT, "garbage.json:1:");
    const char *neg = "{\"lr_scheduler_type\": \"cosine\", \"state\": {\"step\": -4, \"lr\": 0.1, \"best\": 0, "
                      "\"num_bad_epochs\": 0, \"cooldown_counter\": 0}}";
    write_bytes(bad, neg, strlen(neg));
    CHECK_ERR(ct_scheduler_load_json(a, bad), CT_ERR_FORMAT, "garbage.json", "step -4");
    const char *nostate = "{\"lr_scheduler_type\": \"cosine\"}";
    write_bytes(bad, nostate, strlen(nostate));
    CHECK_ERR(ct_scheduler_load_json(a, bad), CT_ERR_FORMAT, "garbage.json", "state");
    CHECK(ct_scheduler_get_state(a).step == 7, "cosine: state changed by failed loads");
    ct_scheduler_destroy(a);
    ct_scheduler_destroy(b);
}

/* --- manifest ---------------------------------------------------------------------------------- */

#define N_FILES 4
static const char *const file_names[N_FILES] = {"model.h5", "optimizer.h5", "trainer_state.json", "empty.bin"};

/* A directory of random files (model.h5 over 1 MiB, so the checksum runs over several chunks) with
 * its manifest; expect_crc[i] and sizes[i] are zlib's view of them. */
static void make_dir(const char *dir, bool manifest, uint32_t *crc, size_t *sizes) {
    rm_tree(dir);
    CHECK(mkdir(dir, 0755) == 0, "mkdir %s: %s", dir, strerror(errno));
    size_t sz[N_FILES] = {(1u << 20) + 1 + ct_rng_below(&rng, 300000), 1 + ct_rng_below(&rng, 5000),
                          1 + ct_rng_below(&rng, 400), 0};
    for (int i = 0; i < N_FILES; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, file_names[i]);
        unsigned char *b = random_bytes(sz[i]);
        write_bytes(path, b, sz[i]);
        if (crc) crc[i] = (uint32_t)crc32(crc32(0L, Z_NULL, 0), b, (uInt)sz[i]);
        if (sizes) sizes[i] = sz[i];
        free(b);
    }
    if (manifest) CHECK_OK(ct_checkpoint_write_manifest(dir));
}

static void check_manifest_content(const char *dir, const uint32_t *crc, const size_t *sizes) {
    char path[512];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    json_error_t err;
    json_t *m = json_load_file(path, 0, &err);
    CHECK(m != NULL, "manifest.json does not parse: %s", err.text);
    if (!m) return;
    CHECK(strcmp(json_string_value(json_object_get(m, "format")) ? json_string_value(json_object_get(m, "format")) : "",
                 "ctrainer-checkpoint") == 0,
          "manifest format");
    CHECK(json_integer_value(json_object_get(m, "version")) == 1, "manifest version");
    json_t *files = json_object_get(m, "files");
    CHECK(json_object_size(files) == N_FILES, "manifest lists %zu files, want %d", json_object_size(files), N_FILES);
    for (int i = 0; i < N_FILES; i++) {
        json_t *e = json_object_get(files, file_names[i]);
        char hex[9];
        snprintf(hex, sizeof hex, "%08x", crc[i]);
        const char *got = json_string_value(json_object_get(e, "crc32"));
        CHECK(got && strcmp(got, hex) == 0, "%s: manifest crc32 %s, zlib says %s", file_names[i], got ? got : "(none)",
              hex);
        CHECK(json_integer_value(json_object_get(e, "size")) == (json_int_t)sizes[i],
              "%s: manifest size %lld, want %zu", file_names[i],
              (long long)json_integer_value(json_object_get(e, "size")), sizes[i]);
    }
    json_decref(m);
}

static void manifest(void) {
    char dir[256], path[512];
    snprintf(dir, sizeof dir, "%s/checkpoint-40", root_dir);
    uint32_t crc[N_FILES];
    size_t sizes[N_FILES];
    make_dir(dir, true, crc, sizes);
    CHECK_OK(ct_checkpoint_verify(dir));
    check_manifest_content(dir, crc, sizes);
    /* Files the manifest does not list do not matter, nor do subdirectories. */
    snprintf(path, sizeof path, "%s/notes.txt", dir);
    write_bytes(path, "x", 1);
    snprintf(path, sizeof path, "%s/sub", dir);
    CHECK(mkdir(path, 0755) == 0, "mkdir sub");
    CHECK_OK(ct_checkpoint_verify(dir));

    /* Truncated. */
    make_dir(dir, true, NULL, sizes);
    snprintf(path, sizeof path, "%s/model.h5", dir);
    off_t cut = (off_t)(sizes[0] - 1 - ct_rng_below(&rng, sizes[0] / 2));
    CHECK(truncate(path, cut) == 0, "truncate");
    char want[160];
    snprintf(want, sizeof want, "model.h5 is %lld bytes, the manifest says %zu (truncated?)", (long long)cut, sizes[0]);
    CHECK_ERR(ct_checkpoint_verify(dir), CT_ERR_FORMAT, "checkpoint-40: ", want);

    /* Grown. */
    make_dir(dir, true, NULL, sizes);
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    FILE *f = fopen(path, "ab");
    fputc('}', f);
    fclose(f);
    CHECK_ERR(ct_checkpoint_verify(dir), CT_ERR_FORMAT, "checkpoint-40: trainer_state.json is", "bytes");

    /* One byte flipped in the middle of each file in turn. */
    for (int i = 0; i < 3; i++) {
        make_dir(dir, true, NULL, sizes);
        snprintf(path, sizeof path, "%s/%s", dir, file_names[i]);
        size_t n;
        unsigned char *b = (unsigned char *)ct_test_read_file(path, &n);
        b[n / 2] ^= (unsigned char)(1u << ct_rng_below(&rng, 8));
        write_bytes(path, b, n);
        free(b);
        snprintf(want, sizeof want, "checkpoint-40: %s does not match its checksum", file_names[i]);
        CHECK_ERR(ct_checkpoint_verify(dir), CT_ERR_FORMAT, want);
    }

    /* Deleted. */
    make_dir(dir, true, NULL, NULL);
    snprintf(path, sizeof path, "%s/optimizer.h5", dir);
    unlink(path);
    CHECK_ERR(ct_checkpoint_verify(dir), CT_ERR_FORMAT, "checkpoint-40: optimizer.h5 is missing");

    /* A garbage manifest, a foreign one, an old version, one that points outside the directory. */
    make_dir(dir, true, NULL, NULL);
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    unsigned char *junk = random_bytes(200);
    junk[0] = '{';
    write_bytes(path, junk, 200);
    free(junk);
    CHECK_ERR(ct_checkpoint_verify(dir), CT_ERR_FORMAT, "checkpoint-40: manifest.json is not valid JSON");
    const char *foreign = "{\"files\": {}}";
    write_bytes(path, foreign, strlen(foreign));
    CHECK_ERR(ct_checkpoint_verify(dir), CT_ERR_FORMAT, "manifest.json is not a ctrainer checkpoint manifest");
    const char *v2 = "{\"format\": \"ctrainer-checkpoint\", \"version\": 2, \"files\": {}}";
    write_bytes(path, v2, strlen(v2));
    CHECK_ERR(ct_checkpoint_verify(dir), CT_ERR_FORMAT, "manifest.json has version another");
    const char *outside =
        "{\"format\": \"ctrainer-checkpoint\", \"version\": 1, \"files\": {\"../x\": {\"size\": 0, \"crc32\": "
        "\"00000000\"}}}";
    write_bytes(path, outside, strlen(outside));
    CHECK_ERR(ct_checkpoint_verify(dir), CT_ERR_FORMAT, "lists '../x', which is not a file name");
    const char *bad_entry = "{\"format\": \"ctrainer-checkpoint\", \"version\": 1, \"files\": {\"model.h5\": "
                            "{\"size\": 3, \"crc32\": \"xyz\"}}}";
    write_bytes(path, bad_entry, strlen(bad_entry));
    CHECK_ERR(ct_checkpoint_verify(dir), CT_ERR_FORMAT, "malformed entry for 'model.h5'");

    /* No manifest: a save that did not finish. */
    make_dir(dir, true, NULL, NULL);
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    unlink(path);
    CHECK_ERR(ct_checkpoint_verify(dir), CT_ERR_FORMAT, "checkpoint-40: no manifest.json (an incomplete save)");

    /* Not there at all, or not a directory. */
    snprintf(path, sizeof path, "%s/checkpoint-99", root_dir);
    CHECK_ERR(ct_checkpoint_verify(path), CT_ERR_IO, "checkpoint-99: cannot open");
    snprintf(path, sizeof path, "%s/model.h5", dir);
    CHECK_ERR(ct_checkpoint_verify(path), CT_ERR_FORMAT, "model.h5: not a directory");
    CHECK_ERR(ct_fsync_path("/nonexistent/x"), CT_ERR_IO, "/nonexistent/x");
    CHECK_OK(ct_fsync_path(dir));
    CHECK_OK(ct_fsync_path(path));
    rm_tree(dir);
}

/* --- commit ------------------------------------------------------------------------------------ */

static void commit(void) {
    char dir[256], tmp[300], path[512];
    snprintf(dir, sizeof dir, "%s/checkpoint-7", root_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", dir);
    size_t sizes[N_FILES];
    make_dir(tmp, true, NULL, sizes);
    CHECK_OK(ct_checkpoint_commit(tmp, dir));
    CHECK(!exists(tmp), "commit left %s", tmp);
    CHECK_OK(ct_checkpoint_verify(dir));

    /* Replacing a checkpoint of the same step: the new one's files, nothing left behind. */
    size_t new_sizes[N_FILES];
    make_dir(tmp, true, NULL, new_sizes);
    snprintf(path, sizeof path, "%s/marker", tmp);
    write_bytes(path, "new", 3);
    CHECK_OK(ct_checkpoint_commit(tmp, dir));
    CHECK(!exists(tmp), "commit left %s", tmp);
    snprintf(path, sizeof path, "%s.old", dir);
    CHECK(!exists(path), "commit left %s", path);
    snprintf(path, sizeof path, "%s/marker", dir);
    CHECK(exists(path), "the replaced checkpoint is not the new one");
    CHECK_OK(ct_checkpoint_verify(dir));
    struct stat st;
    snprintf(path, sizeof path, "%s/model.h5", dir);
    CHECK(stat(path, &st) == 0 && (size_t)st.st_size == new_sizes[0], "model.h5 is not the new one");

    CHECK_ERR(ct_checkpoint_commit(tmp, dir), CT_ERR_IO, "checkpoint-7.tmp", "is not a directory");
    CHECK_OK(ct_checkpoint_verify(dir));
    rm_tree(dir);
}

/* --- latest and resolve ------------------------------------------------------------------------ */

typedef struct latest_call {
    const char *output_dir, *spec;
    size_t cap; /* of out: sizeof out when 0 */
    char out[512];
    ct_status s;
    char msg[2048];
} latest_call;

static void call_find_latest(void *arg) {
    latest_call *c = arg;
    c->s = ct_checkpoint_find_latest(c->output_dir, c->out, c->cap ? c->cap : sizeof c->out);
    snprintf(c->msg, sizeof c->msg, "%s", ct_last_error());
}

static void call_resolve(void *arg) {
    latest_call *c = arg;
    c->s = ct_checkpoint_resolve(c->output_dir, c->spec, c->out, sizeof c->out);
    snprintf(c->msg, sizeof c->msg, "%s", ct_last_error());
}

static void latest(void) {
    char out_dir[256], path[512];
    snprintf(out_dir, sizeof out_dir, "%s/run", root_dir);
    rm_tree(out_dir);
    CHECK(mkdir(out_dir, 0755) == 0, "mkdir run");
    /* checkpoint-5 and -10 valid, -20 corrupt, -30 without manifest, -40.tmp not a checkpoint name. */
    const char *names[] = {"checkpoint-5", "checkpoint-10", "checkpoint-20", "checkpoint-30", "checkpoint-40.tmp"};
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof path, "%s/%s", out_dir, names[i]);
        make_dir(path, i != 3, NULL, NULL);
    }
    snprintf(path, sizeof path, "%s/checkpoint-20/optimizer.h5", out_dir);
    size_t n;
    unsigned char *b = (unsigned char *)ct_test_read_file(path, &n);
    b[n / 2] ^= 0x10;
    write_bytes(path, b, n);
    free(b);

    latest_call c = {.output_dir = out_dir};
    char *err = ct_test_capture_stderr(call_find_latest, &c);
    char want[512];
    snprintf(want, sizeof want, "%s/checkpoint-10", out_dir);
    CHECK(c.s == CT_OK && strcmp(c.out, want) == 0, "latest -> %s '%s': %s", ct_status_str(c.s), c.out, c.msg);
    CHECK(strstr(err, "checkpoint-30: no manifest.json") != NULL, "no warning about checkpoint-30: %s", err);
    CHECK(strstr(err, "checkpoint-20: optimizer.h5 does not match its checksum") != NULL,
          "no warning about checkpoint-20: %s", err);
    CHECK(strstr(err, "warning") != NULL && !strstr(err, "checkpoint-10") && !strstr(err, "checkpoint-5") &&
              !strstr(err, "checkpoint-40"),
          "unexpected warnings: %s", err);
    CHECK(strstr(err, "checkpoint-30") < strstr(err, "checkpoint-20"), "warnings not newest first: %s", err);
    free(err);

    c.spec = "latest";
    err = ct_test_capture_stderr(call_resolve, &c);
    CHECK(c.s == CT_OK && strcmp(c.out, want) == 0, "resolve latest -> %s '%s': %s", ct_status_str(c.s), c.out, c.msg);
    free(err);
    snprintf(path, sizeof path, "%s/checkpoint-5", out_dir);
    c.spec = path;
    err = ct_test_capture_stderr(call_resolve, &c);
    CHECK(c.s == CT_OK && strcmp(c.out, path) == 0 && !err[0], "resolve %s -> %s '%s': %s", path, ct_status_str(c.s),
          c.out, c.msg);
    free(err);
    /* Named explicitly, an invalid checkpoint is an error, not a warning. */
    snprintf(path, sizeof path, "%s/checkpoint-20", out_dir);
    c.spec = path;
    c.out[0] = 0;
    err = ct_test_capture_stderr(call_resolve, &c);
    CHECK(c.s == CT_ERR_FORMAT && !c.out[0], "resolve corrupt -> %s", ct_status_str(c.s));
    CHECK(strstr(c.msg, "resume_from_checkpoint '") && strstr(c.msg, "checkpoint-20: optimizer.h5 does not match"),
          "resolve corrupt message: %s", c.msg);
    CHECK(!err[0], "resolve printed: %s", err);
    free(err);
    snprintf(path, sizeof path, "%s/checkpoint-30", out_dir);
    c.spec = path;
    free(ct_test_capture_stderr(call_resolve, &c));
    CHECK(c.s == CT_ERR_FORMAT && strstr(c.msg, "checkpoint-30: no manifest.json"), "resolve incomplete -> %s: %s",
          ct_status_str(c.s), c.msg);
    snprintf(path, sizeof path, "%s/checkpoint-77", out_dir);
    c.spec = path;
    free(ct_test_capture_stderr(call_resolve, &c));
    CHECK(c.s == CT_ERR_IO && strstr(c.msg, "checkpoint-77: cannot open"), "resolve missing -> %s: %s",
          ct_status_str(c.s), c.msg);
    c.cap = 8;
    free(ct_test_capture_stderr(call_find_latest, &c));
    CHECK(c.s == CT_ERR_INVALID_ARG && strstr(c.msg, "checkpoint-10' is longer than 7"), "small buffer -> %s: %s",
          ct_status_str(c.s), c.msg);
    c.cap = 0;

    /* Only invalid ones: an error that lists them. */
    snprintf(path, sizeof path, "%s/checkpoint-5", out_dir);
    rm_tree(path);
    snprintf(path, sizeof path, "%s/checkpoint-10/model.h5", out_dir);
    CHECK(truncate(path, 100) == 0, "truncate");
    c.spec = "latest";
    err = ct_test_capture_stderr(call_resolve, &c);
    CHECK(c.s == CT_ERR_IO, "latest of invalid ones -> %s", ct_status_str(c.s));
    snprintf(want, sizeof want, "resume_from_checkpoint 'latest': no checkpoint in '%s' (every one is invalid: ",
             out_dir);
    CHECK(strstr(c.msg, want) && strstr(c.msg, "checkpoint-10: model.h5 is 100 bytes") &&
              strstr(c.msg, "checkpoint-20: optimizer.h5") && strstr(c.msg, "checkpoint-30: no manifest"),
          "message: %s", c.msg);
    CHECK(strstr(err, "checkpoint-10") && strstr(err, "checkpoint-20") && strstr(err, "checkpoint-30"),
          "warnings: %s", err);
    free(err);

    /* Nothing at all. */
    snprintf(path, sizeof path, "%s/empty", root_dir);
    CHECK(mkdir(path, 0755) == 0, "mkdir empty");
    c.output_dir = path;
    free(ct_test_capture_stderr(call_find_latest, &c));
    snprintf(want, sizeof want, "no checkpoint in '%s'", path);
    CHECK(c.s == CT_ERR_IO && strcmp(c.msg, want) == 0, "empty -> %s: %s", ct_status_str(c.s), c.msg);
    snprintf(path, sizeof path, "%s/does-not-exist", root_dir);
    c.output_dir = path;
    free(ct_test_capture_stderr(call_find_latest, &c));
    CHECK(c.s == CT_ERR_IO && strstr(c.msg, "no checkpoint in"), "missing dir -> %s: %s", ct_status_str(c.s), c.msg);
    rm_tree(out_dir);
}

/* --- --write DIR: checkpoints for the h5py / PyTorch oracle -------------------------------------- */

static json_t *tensor_json(const ct_tensor *t) {
    json_t *a = json_array();
    for (int64_t i = 0; i < ct_tensor_numel(t); i++) json_array_append_new(a, json_real(ct_tensor_get(t, i)));
    return a;
}

static json_t *settings_json(const ct_optim_config *c) {
    static const char *const kinds[] = {"sgd", "adam", "adamw"};
    return json_pack("{sssfsfsfsfsfsbsfsfsb}", "optim", kinds[c->optim], "learning_rate", c->learning_rate,
                     "weight_decay", c->weight_decay, "adam_beta1", c->adam_beta1, "adam_beta2", c->adam_beta2,
                     "adam_epsilon", c->adam_epsilon, "amsgrad", (int)c->amsgrad, "momentum", c->momentum,
                     "dampening", c->dampening, "nesterov", (int)c->nesterov);
}

/* DIR/<label>/checkpoint-<steps>/ with optimizer.h5, scheduler.json, a random blob and the manifest,
 * committed from a .tmp directory as the Trainer does; DIR/<label>/oracle.json with the inputs. */
static void write_case(const char *out, const char *label, ct_optim_config cfg, ct_dtype dt) {
    char base[512], tmp[600], dir[600], path[700];
    snprintf(base, sizeof base, "%s/%s", out, label);
    mkdir(base, 0755);
    ct_rng r;
    ct_rng_init(&r, ct_test_seed, 3, CT_RNG_USER);
    store st;
    make_store(&st, dt, &r, 0);
    ct_optimizer *opt = NULL;
    CHECK_OK(ct_optimizer_create(&cfg, &st.ps, &opt));
    if (!opt) return;
    json_t *params = json_array(), *init = json_object(), *grads = json_array(), *lrs = json_array();
    for (int i = 0; i < st.ps.count; i++) {
        const ct_param *p = &st.ps.items[i];
        json_t *shape = json_array();
        for (int d = 0; d < p->ndim; d++) json_array_append_new(shape, json_integer(p->shape[d]));
        json_array_append_new(params, json_pack("{sssosIsIsbsb}", "name", p->name, "shape", shape, "offset",
                                                (json_int_t)p->offset, "numel", (json_int_t)p->numel, "no_decay",
                                                (int)((p->flags & CT_PARAM_NO_DECAY) != 0), "buffer",
                                                (int)((p->flags & CT_PARAM_BUFFER) != 0)));
        if (!(p->flags & CT_PARAM_BUFFER)) json_object_set_new(init, p->name, tensor_json(p->value));
    }
    ct_scheduler *sched = make_scheduler("cosine", cfg.learning_rate);
    int steps = 3 + (int)ct_rng_below(&rng, 5);
    for (int k = 0; k < steps; k++) {
        set_grads(&st, k);
        json_t *g = json_object();
        for (int i = 0; i < st.ps.count; i++)
            if (!(st.ps.items[i].flags & CT_PARAM_BUFFER))
                json_object_set_new(g, st.ps.items[i].name, tensor_json(st.ps.items[i].grad));
        json_array_append_new(grads, g);
        double lr = lr_of_step(&cfg, k);
        json_array_append_new(lrs, json_real(lr));
        CHECK_OK(ct_optimizer_step(opt, lr));
        if (sched) ct_scheduler_step(sched);
    }
    snprintf(dir, sizeof dir, "%s/checkpoint-%d", base, steps);
    snprintf(tmp, sizeof tmp, "%s.tmp", dir);
    rm_tree(tmp);
    CHECK(mkdir(tmp, 0755) == 0, "mkdir %s: %s", tmp, strerror(errno));
    snprintf(path, sizeof path, "%s/optimizer.h5", tmp);
    CHECK_OK(ct_optimizer_save_h5(opt, path));
    snprintf(path, sizeof path, "%s/scheduler.json", tmp);
    if (sched) CHECK_OK(ct_scheduler_save_json(sched, path));
    snprintf(path, sizeof path, "%s/blob.bin", tmp);
    size_t blob = ct_rng_below(&rng, 3u << 20);
    unsigned char *b = random_bytes(blob);
    write_bytes(path, b, blob);
    free(b);
    CHECK_OK(ct_checkpoint_write_manifest(tmp));
    CHECK_OK(ct_checkpoint_commit(tmp, dir));
    CHECK_OK(ct_checkpoint_verify(dir));

    json_t *o = json_pack("{sosssIsIsosososos{sssfsIsI}}", "settings", settings_json(&cfg), "dtype",
                          dt == CT_F32 ? "f32" : "f64", "flat_numel", (json_int_t)ct_tensor_numel(&st.ps.values),
                          "steps", (json_int_t)steps, "params", params, "init", init, "grads", grads, "lrs", lrs,
                          "scheduler", "type", "cosine", "base_lr", cfg.learning_rate, "warmup_steps", (json_int_t)3,
                          "num_training_steps", (json_int_t)40);
    snprintf(path, sizeof path, "%s/oracle.json", base);
    CHECK(o && json_dump_file(o, path, JSON_REAL_PRECISION(17)) == 0, "cannot write %s", path);
    json_decref(o);
    ct_scheduler_destroy(sched);
    ct_optimizer_destroy(opt);
    ct_params_free(&st.ps);
}

static int write_mode(const char *out) {
    mkdir(out, 0755);
    ct_optim_config c = config(CT_OPTIM_SGD, false, 0.9);
    c.nesterov = c.dampening == 0;
    write_case(out, "sgd_momentum", c, CT_F32);
    write_case(out, "adam", config(CT_OPTIM_ADAM, false, 0), CT_F32);
    write_case(out, "adamw_amsgrad", config(CT_OPTIM_ADAMW, true, 0), CT_F32);
    write_case(out, "adamw_f64", config(CT_OPTIM_ADAMW, false, 0), CT_F64);
    return ct_test_finish();
}

int main(int argc, char **argv) {
    ct_test_begin("test_checkpoint_io");
    ct_h5_quiet();
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    if (argc == 3 && strcmp(argv[1], "--write") == 0) return write_mode(argv[2]);
    if (argc != 1) {
        fprintf(stderr, "usage: test_checkpoint_io [--write DIR]\n");
        return 2;
    }
    if (!mkdtemp(root_dir)) {
        perror("mkdtemp");
        return 1;
    }
    for (int d = 0; d < 2; d++) {
        ct_dtype dt = d ? CT_F64 : CT_F32;
        optimizer_round_trip("sgd momentum", config(CT_OPTIM_SGD, false, 0.9), dt);
        ct_optim_config nesterov = config(CT_OPTIM_SGD, false, 0.9);
        nesterov.dampening = 0;
        nesterov.nesterov = true;
        optimizer_round_trip("sgd nesterov", nesterov, dt);
        optimizer_round_trip("adam", config(CT_OPTIM_ADAM, false, 0), dt);
        optimizer_round_trip("adam amsgrad", config(CT_OPTIM_ADAM, true, 0), dt);
        optimizer_round_trip("adamw", config(CT_OPTIM_ADAMW, false, 0), dt);
        optimizer_round_trip("adamw amsgrad", config(CT_OPTIM_ADAMW, true, 0), dt);
    }
    optimizer_mismatches();
    scheduler_round_trip("cosine");
    scheduler_round_trip("linear");
    scheduler_round_trip("reduce_lr_on_plateau");
    scheduler_errors();
    manifest();
    commit();
    latest();
    rm_tree(root_dir);
    return ct_test_finish();
}
