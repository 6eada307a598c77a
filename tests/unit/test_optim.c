/* Optimizers and gradient clipping without PyTorch (tests/oracle/test_optim.py compares with it):
 * a checkpoint-style state round trip (10 steps, save through HDF5, load into a fresh optimizer,
 * 10 more == 20 uninterrupted steps, bit for bit), results independent of the thread count, the
 * parameter groups, padding and buffers never touched, first steps computed by hand, a subclass
 * through the vtable, the step that clears the gradients as it reads them (the same bits as a step and
 * then zero_grad), configuration errors, and clipping (norm, scaling, overflow, inf/NaN).
 *
 * Why one file of over 600 lines: the optimizers and clipping share the parameter stores, the
 * steps computed by hand and the round trip written here. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/format/h5io.h"
#include "core/ops/ops.h"
#include "core/util.h"
#include "model/params.h"
#include "optim/clip.h"
#include "optim/optimizer.h"
#include "testlib.h"

/* --- a random parameter store ------------------------------------------------------------------- */

#define MAX_TENSORS 16

typedef struct store {
    ct_param_store ps;
    ct_tensor values[MAX_TENSORS], grads[MAX_TENSORS];
} store;

/* Tensors of random sizes (one above the OpenMP threshold when big), alternately with and without
 * weight decay, plus a buffer; values from the generator. Same rng state -> same store. */
static void make_store(store *st, ct_dtype dt, ct_rng *rng, bool big) {
    static const ct_module root;
    ct_params_init(&st->ps, dt, CT_CPU);
    int n = 3 + (int)ct_rng_below(rng, 4);
    for (int i = 0; i < n; i++) {
        int64_t shape[2] = {1 + (int64_t)ct_rng_below(rng, 9), 1 + (int64_t)ct_rng_below(rng, 13)};
        if (big && i == 1) shape[0] = 40000 / shape[1] + 1;
        char name[32];
        snprintf(name, sizeof name, "p%d", i);
        CHECK_OK(ct_params_declare(&st->ps, &root, name, i % 2 ? 1 : 2, i % 2 ? shape + 1 : shape,
                                   i % 2 ? CT_PARAM_NO_DECAY : 0u, &st->values[i], &st->grads[i]));
    }
    int64_t bshape = 5;
    CHECK_OK(ct_params_declare(&st->ps, &root, "buf", 1, &bshape, CT_PARAM_BUFFER, &st->values[n], NULL));
    CHECK_OK(ct_params_finalize(&st->ps));
    for (int i = 0; i < st->ps.count; i++)
        for (int64_t j = 0; j < st->ps.items[i].numel; j++)
            ct_tensor_set(st->ps.items[i].value, j, ct_rng_normal(rng));
}

/* Gradients of step k: a pure function of (seed, k), so two runs see the same ones. */
static void set_grads(store *st, int k) {
    ct_params_zero_grad(&st->ps);
    uint32_t key[2] = {(uint32_t)ct_test_seed, (uint32_t)(ct_test_seed >> 32)};
    for (int i = 0; i < st->ps.count; i++) {
        ct_param *p = &st->ps.items[i];
        if (p->flags & CT_PARAM_BUFFER) continue;
        for (int64_t j = 0; j < p->numel; j++) {
            uint32_t ctr[4] = {(uint32_t)j, (uint32_t)i, (uint32_t)k, 7}, out[4];
            ct_philox4x32(ctr, key, out);
            ct_tensor_set(p->grad, j, (double)ct_u32_to_unit_float(out[0]) * 2.0 - 1.0 + 0.01);
        }
    }
}

static double lr_of_step(const ct_optim_config *cfg, int k) { return cfg->learning_rate * (1.0 + 0.1 * (k % 7)); }

/* The largest |x| of a flat buffer outside every parameter (NaN counts as inf). */
static double padding_max(const store *st, const ct_tensor *flat) {
    int64_t n = ct_tensor_numel(flat);
    char *inside = calloc((size_t)n + 1, 1);
    for (int i = 0; i < st->ps.count; i++)
        if (!(st->ps.items[i].flags & CT_PARAM_BUFFER))
            memset(inside + st->ps.items[i].offset, 1, (size_t)st->ps.items[i].numel);
    double worst = 0;
    for (int64_t j = 0; j < n; j++) {
        double v = ct_tensor_get(flat, j);
        if (!inside[j]) worst = fmax(worst, isnan(v) ? INFINITY : fabs(v));
    }
    free(inside);
    return worst;
}

static ct_optim_config config(ct_optim_kind kind, bool amsgrad) {
    ct_optim_config c = ct_optim_config_default();
    c.optim = kind;
    c.learning_rate = 0.01;
    c.weight_decay = 0.05;
    c.amsgrad = amsgrad;
    if (kind == CT_OPTIM_SGD) {
        c.momentum = 0.9;
        c.nesterov = true;
    }
    return c;
}

/* --- state round trip and determinism --------------------------------------------------------- */

static void run_steps(ct_optimizer *opt, store *st, int from, int to) {
    for (int k = from; k < to; k++) {
        set_grads(st, k);
        CHECK_OK(ct_optimizer_step(opt, lr_of_step(&opt->config, k)));
    }
}

/* Writes every state tensor and the step count to an HDF5 file, as a checkpoint would. */
static void save_state(ct_optimizer *opt, const char *path) {
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(f >= 0, "cannot create %s", path);
    for (int i = 0; i < ct_optimizer_state_count(opt); i++) {
        const char *name;
        ct_tensor *t;
        CHECK_OK(ct_optimizer_state_get(opt, i, &name, &t));
        CHECK_OK(ct_h5_write_tensor(f, name, t));
    }
    char step[32];
    snprintf(step, sizeof step, "%lld", (long long)ct_optimizer_step_count(opt));
    CHECK_OK(ct_h5_write_string_attr(f, "step", step));
    H5Fclose(f);
}

static void load_state(ct_optimizer *opt, const char *path) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK(f >= 0, "cannot open %s", path);
    for (int i = 0; i < ct_optimizer_state_count(opt); i++) {
        const char *name;
        ct_tensor *t;
        CHECK_OK(ct_optimizer_state_get(opt, i, &name, &t));
        CHECK_OK(ct_h5_read_into(f, name, t));
    }
    char *step = NULL;
    CHECK_OK(ct_h5_read_string_attr(f, "step", &step));
    CHECK_OK(ct_optimizer_set_step_count(opt, step ? atoll(step) : -1));
    free(step);
    H5Fclose(f);
}

static bool same_bytes(const ct_tensor *a, const ct_tensor *b) {
    return ct_tensor_nbytes(a) == ct_tensor_nbytes(b) && memcmp(a->data, b->data, ct_tensor_nbytes(a)) == 0;
}

/* Both optimizers' parameters and every state tensor equal bit for bit. */
static void check_identical(const char *label, ct_optimizer *a, const store *sa, ct_optimizer *b, const store *sb) {
    CHECK(same_bytes(&sa->ps.values, &sb->ps.values), "%s: parameters differ", label);
    CHECK(ct_optimizer_step_count(a) == ct_optimizer_step_count(b), "%s: step counts %lld and %lld", label,
          (long long)ct_optimizer_step_count(a), (long long)ct_optimizer_step_count(b));
    CHECK(ct_optimizer_state_count(a) == ct_optimizer_state_count(b), "%s: state counts differ", label);
    for (int i = 0; i < ct_optimizer_state_count(a); i++) {
        const char *name;
        ct_tensor *t;
        CHECK_OK(ct_optimizer_state_get(a, i, &name, &t));
        ct_tensor *u = ct_optimizer_state_find(b, name);
        CHECK(u && same_bytes(t, u), "%s: state '%s' differs", label, name);
    }
}

static void round_trip(ct_optim_kind kind, bool amsgrad, ct_dtype dt) {
    ct_optim_config cfg = config(kind, amsgrad);
    char label[96];
    snprintf(label, sizeof label, "round trip %s%s %s",
             kind == CT_OPTIM_SGD    ? "sgd"
             : kind == CT_OPTIM_ADAM ? "adam"
                                     : "adamw",
             amsgrad ? " amsgrad" : "", ct_dtype_name(dt));
    ct_rng r1, r2;
    ct_rng_init(&r1, ct_test_seed, 0, CT_RNG_USER);
    r2 = r1;
    store sa, sb;
    make_store(&sa, dt, &r1, true);
    make_store(&sb, dt, &r2, true);
    ct_optimizer *a, *b;
    CHECK_OK(ct_optimizer_create(&cfg, &sa.ps, &a));
    CHECK_OK(ct_optimizer_create(&cfg, &sb.ps, &b));
    if (!a || !b) return;
    run_steps(a, &sa, 0, 20);

    run_steps(b, &sb, 0, 10);
    char path[] = "/tmp/ct_test_optim_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    save_state(b, path);
    ct_optimizer_destroy(b);
    CHECK_OK(ct_optimizer_create(&cfg, &sb.ps, &b));
    load_state(b, path);
    unlink(path);
    CHECK(ct_optimizer_step_count(b) == 10, "%s: restored step count %lld", label,
          (long long)ct_optimizer_step_count(b));
    run_steps(b, &sb, 10, 20);
    check_identical(label, a, &sa, b, &sb);
    CHECK(padding_max(&sa, &sa.ps.values) == 0 && padding_max(&sa, &sa.ps.grads) == 0, "%s: padding changed", label);
    for (int i = 0; i < ct_optimizer_state_count(a); i++) {
        const char *name;
        ct_tensor *t;
        CHECK_OK(ct_optimizer_state_get(a, i, &name, &t));
        CHECK(padding_max(&sa, t) == 0, "%s: padding of state '%s' changed", label, name);
    }

    /* Without the state the continuation must differ, or the comparison above proves nothing. */
    store sc;
    ct_rng r3;
    ct_rng_init(&r3, ct_test_seed, 0, CT_RNG_USER);
    make_store(&sc, dt, &r3, true);
    ct_optimizer *c;
    CHECK_OK(ct_optimizer_create(&cfg, &sc.ps, &c));
    run_steps(c, &sc, 0, 10);
    ct_optimizer_destroy(c);
    CHECK_OK(ct_optimizer_create(&cfg, &sc.ps, &c));
    run_steps(c, &sc, 10, 20);
    CHECK(!same_bytes(&sa.ps.values, &sc.ps.values), "%s: a restart without state gives the same parameters", label);
    ct_optimizer_destroy(c);
    ct_params_free(&sc.ps);

    ct_optimizer_destroy(a);
    ct_optimizer_destroy(b);
    ct_params_free(&sa.ps);
    ct_params_free(&sb.ps);
}

/* Elementwise updates and the fixed-order norm give the same bits for 1 and 2 threads. */
static void thread_independence(void) {
    int saved = ct_get_num_threads();
    ct_optim_config cfg = config(CT_OPTIM_ADAMW, true);
    store s[2];
    ct_optimizer *o[2];
    double norms[2];
    for (int t = 0; t < 2; t++) {
        ct_set_num_threads(t + 1);
        ct_rng r;
        ct_rng_init(&r, ct_test_seed, 1, CT_RNG_USER);
        make_store(&s[t], CT_F32, &r, true);
        CHECK_OK(ct_optimizer_create(&cfg, &s[t].ps, &o[t]));
        run_steps(o[t], &s[t], 0, 5);
        norms[t] = ct_op_l2_norm(&s[t].ps.values);
    }
    ct_set_num_threads(saved);
    check_identical("1 vs 2 threads", o[0], &s[0], o[1], &s[1]);
    CHECK(memcmp(&norms[0], &norms[1], sizeof norms[0]) == 0, "norm with 1 and 2 threads: %.17g vs %.17g", norms[0],
          norms[1]);
    for (int t = 0; t < 2; t++) {
        ct_optimizer_destroy(o[t]);
        ct_params_free(&s[t].ps);
    }
}

/* --- the step and zero_grad in one pass ---------------------------------------------------------- */

/* The largest |g| of the whole flat gradient buffer, padding included (NaN counts as inf). */
static double grads_max(const store *st) {
    double worst = 0;
    for (int64_t j = 0; j < ct_tensor_numel(&st->ps.grads); j++) {
        double v = ct_tensor_get(&st->ps.grads, j);
        worst = fmax(worst, isnan(v) ? INFINITY : fabs(v));
    }
    return worst;
}

/* ct_optimizer_step_zero_grad against ct_optimizer_step then ct_params_zero_grad, on two copies of a
 * store (one tensor above the OpenMP threshold, so the kernels run threaded): the same parameters and
 * state, bit for bit, after every step, and every gradient zero; the kernels' own clearing (clear_grad)
 * leaves the results of the update unchanged. */
static void step_zero_grad(ct_optim_kind kind, bool amsgrad, ct_dtype dt) {
    ct_optim_config cfg = config(kind, amsgrad);
    char label[96];
    snprintf(label, sizeof label, "step_zero_grad %s%s %s", ct_optim_kind_name(kind), amsgrad ? " amsgrad" : "",
             ct_dtype_name(dt));
    store s[2];
    ct_optimizer *o[2];
    for (int t = 0; t < 2; t++) {
        ct_rng r;
        ct_rng_init(&r, ct_test_seed, 4, CT_RNG_USER);
        make_store(&s[t], dt, &r, true);
        CHECK_OK(ct_optimizer_create(&cfg, &s[t].ps, &o[t]));
    }
    for (int k = 0; k < 4; k++) {
        for (int t = 0; t < 2; t++) set_grads(&s[t], k);
        CHECK(grads_max(&s[1]) > 0, "%s: no gradient to clear", label);
        const double lr = lr_of_step(&cfg, k);
        CHECK_OK(ct_optimizer_step(o[0], lr));
        ct_params_zero_grad(&s[0].ps);
        CHECK_OK(ct_optimizer_step_zero_grad(o[1], lr));
        check_identical(label, o[0], &s[0], o[1], &s[1]);
        CHECK(grads_max(&s[1]) == 0, "%s step %d: a gradient of up to %g left", label, k, grads_max(&s[1]));
    }
    /* an invalid rate: the error of ct_optimizer_step, and nothing cleared */
    set_grads(&s[1], 9);
    CHECK_ERR(ct_optimizer_step_zero_grad(o[1], NAN), CT_ERR_INVALID_ARG, "learning rate");
    CHECK(grads_max(&s[1]) > 0 && ct_optimizer_step_count(o[1]) == 4, "%s: a refused step cleared or counted", label);
    for (int t = 0; t < 2; t++) {
        ct_optimizer_destroy(o[t]);
        ct_params_free(&s[t].ps);
    }
}

/* --- groups, padding, buffers ------------------------------------------------------------------ */

static void groups(void) {
    ct_rng r;
    ct_rng_init(&r, ct_test_seed, 2, CT_RNG_USER);
    store st;
    make_store(&st, CT_F32, &r, false);
    ct_optim_config cfg = config(CT_OPTIM_ADAMW, false);
    ct_optimizer *opt;
    CHECK_OK(ct_optimizer_create(&cfg, &st.ps, &opt));
    CHECK(opt->n_groups == 2 && opt->groups[0].weight_decay == cfg.weight_decay && opt->groups[1].weight_decay == 0,
          "groups: decay %g / %g", opt->groups[0].weight_decay, opt->groups[1].weight_decay);
    for (int i = 0; i < st.ps.count; i++) {
        const ct_param *p = &st.ps.items[i];
        if (p->flags & CT_PARAM_BUFFER) continue; /* offsets into another flat buffer; checked below */
        int in_group[2] = {0, 0};
        for (int g = 0; g < 2; g++)
            for (int k = 0; k < opt->groups[g].n_ranges; k++) {
                const ct_optim_range *rg = &opt->groups[g].ranges[k];
                in_group[g] += p->offset >= rg->offset && p->offset + p->numel <= rg->offset + rg->count;
            }
        int in_decay = in_group[0], in_no_decay = in_group[1];
        if (p->flags & CT_PARAM_NO_DECAY)
            CHECK(in_no_decay == 1 && in_decay == 0, "%s (no decay) in decay %d, no_decay %d", p->name, in_decay,
                  in_no_decay);
        else
            CHECK(in_decay == 1 && in_no_decay == 0, "%s in decay %d, no_decay %d", p->name, in_decay, in_no_decay);
    }
    CHECK(opt->groups[0].numel + opt->groups[1].numel == ct_params_count(&st.ps), "groups hold %lld of %lld elements",
          (long long)(opt->groups[0].numel + opt->groups[1].numel), (long long)ct_params_count(&st.ps));

    /* Buffers untouched; padding untouched even where touching it would write NaN: Adam with eps = 0
     * turns a zero gradient into 0/0. */
    ct_optimizer_destroy(opt);
    cfg.adam_epsilon = 0;
    CHECK_OK(ct_optimizer_create(&cfg, &st.ps, &opt));
    ct_tensor before;
    CHECK_OK(ct_tensor_alloc(&before, st.ps.buffers.dtype, CT_CPU, 1, st.ps.buffers.shape));
    ct_op_copy(&before, &st.ps.buffers);
    run_steps(opt, &st, 0, 3);
    CHECK(same_bytes(&before, &st.ps.buffers), "the optimizer changed a buffer");
    CHECK(padding_max(&st, &st.ps.values) == 0, "parameter padding became %g", padding_max(&st, &st.ps.values));
    for (int i = 0; i < ct_optimizer_state_count(opt); i++) {
        const char *name;
        ct_tensor *t;
        CHECK_OK(ct_optimizer_state_get(opt, i, &name, &t));
        CHECK(padding_max(&st, t) == 0, "padding of '%s' became %g", name, padding_max(&st, t));
    }
    CHECK(ct_op_all_finite(&st.ps.values), "eps = 0 with nonzero gradients gave non-finite parameters");
    ct_tensor_free(&before);
    ct_optimizer_destroy(opt);
    ct_params_free(&st.ps);

    /* Adjacent parameters with no padding between them (16 floats = 64 bytes) share one range. */
    static const ct_module root;
    ct_tensor v[3], g[3];
    ct_param_store ps;
    ct_params_init(&ps, CT_F32, CT_CPU);
    int64_t n16 = 16, n5 = 5;
    CHECK_OK(ct_params_declare(&ps, &root, "a", 1, &n16, 0, &v[0], &g[0]));
    CHECK_OK(ct_params_declare(&ps, &root, "b", 1, &n5, 0, &v[1], &g[1]));
    CHECK_OK(ct_params_declare(&ps, &root, "c", 1, &n5, 0, &v[2], &g[2]));
    CHECK_OK(ct_params_finalize(&ps));
    CHECK_OK(ct_optimizer_create(&cfg, &ps, &opt));
    CHECK(opt->groups[0].n_ranges == 2 && opt->groups[0].ranges[0].count == 21 && opt->groups[1].n_ranges == 0,
          "merged ranges: %d ranges, first of %lld", opt->groups[0].n_ranges,
          (long long)opt->groups[0].ranges[0].count);
    ct_optimizer_destroy(opt);
    ct_params_free(&ps);

    /* A model without trainable parameters: nothing to do, no error. */
    int64_t nb = 3;
    ct_params_init(&ps, CT_F64, CT_CPU);
    CHECK_OK(ct_params_declare(&ps, &root, "only_buffer", 1, &nb, CT_PARAM_BUFFER, &v[0], NULL));
    CHECK_OK(ct_params_finalize(&ps));
    CHECK_OK(ct_optimizer_create(&cfg, &ps, &opt));
    if (opt) CHECK_OK(ct_optimizer_step(opt, 0.1));
    ct_optimizer_destroy(opt);
    ct_params_free(&ps);
}

/* --- first steps by hand ------------------------------------------------------------------------- */

static void by_hand(void) {
    static const ct_module root;
    ct_tensor v[2], g[2];
    ct_param_store ps;
    ct_params_init(&ps, CT_F64, CT_CPU);
    int64_t n = 3;
    CHECK_OK(ct_params_declare(&ps, &root, "w", 1, &n, 0, &v[0], &g[0]));
    CHECK_OK(ct_params_declare(&ps, &root, "b", 1, &n, CT_PARAM_NO_DECAY, &v[1], &g[1]));
    CHECK_OK(ct_params_finalize(&ps));
    const double p0[2][3] = {{0.5, -1.0, 2.0}, {0.25, 3.0, -0.75}};
    const double g0[2][3] = {{0.1, -0.2, 0.3}, {-0.4, 0.5, 0.6}};
    const double g1[2][3] = {{-0.3, 0.1, 0.2}, {0.2, -0.1, 0.4}};
    const double lr = 0.1, wd = 0.2, mom = 0.9, damp = 0.25, lr2 = 0.05;

    /* SGD with momentum, dampening and decay: buf = d (step 1), then mom * buf + (1 - damp) * d. */
    ct_optim_config cfg = ct_optim_config_default();
    cfg.optim = CT_OPTIM_SGD;
    cfg.momentum = mom;
    cfg.dampening = damp;
    cfg.weight_decay = wd;
    ct_optimizer *opt;
    for (int t = 0; t < 2; t++) ct_tensor_copy_from_f64(&v[t], p0[t]), ct_tensor_copy_from_f64(&g[t], g0[t]);
    CHECK_OK(ct_optimizer_create(&cfg, &ps, &opt));
    CHECK_OK(ct_optimizer_step(opt, lr));
    for (int t = 0; t < 2; t++) ct_tensor_copy_from_f64(&g[t], g1[t]);
    CHECK_OK(ct_optimizer_step(opt, lr2));
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < 3; i++) {
            double w = t ? 0 : wd;
            double d1 = g0[t][i] + w * p0[t][i], p1 = p0[t][i] - lr * d1;
            double d2 = g1[t][i] + w * p1, buf = mom * d1 + (1 - damp) * d2, p2 = p1 - lr2 * buf;
            CHECK_NEAR(ct_tensor_get(&v[t], i), p2, 1e-15);
        }
    ct_optimizer_destroy(opt);

    /* Adam's first step moves each weight by lr * g / (|g| + eps) (bias correction cancels the
     * betas); AdamW shrinks it by 1 - lr * wd first. */
    for (int kind = CT_OPTIM_ADAM; kind <= CT_OPTIM_ADAMW; kind++) {
        cfg = ct_optim_config_default();
        cfg.optim = (ct_optim_kind)kind;
        cfg.weight_decay = wd;
        cfg.adam_epsilon = 1e-3;
        for (int t = 0; t < 2; t++) ct_tensor_copy_from_f64(&v[t], p0[t]), ct_tensor_copy_from_f64(&g[t], g0[t]);
        CHECK_OK(ct_optimizer_create(&cfg, &ps, &opt));
        CHECK_OK(ct_optimizer_step(opt, lr));
        for (int t = 0; t < 2; t++)
            for (int i = 0; i < 3; i++) {
                double w = t ? 0 : wd, p = p0[t][i], gr = g0[t][i];
                if (kind == CT_OPTIM_ADAM)
                    gr += w * p;
                else
                    p *= 1 - lr * w;
                CHECK_NEAR(ct_tensor_get(&v[t], i), p - lr * gr / (fabs(gr) + 1e-3), 1e-14);
            }
        ct_optimizer_destroy(opt);
    }
    ct_params_free(&ps);
}

/* --- subclassing through the vtable ------------------------------------------------------------ */

/* Sign descent: p -= lr * sign(g), counting range updates and steps. */
typedef struct sign_opt {
    ct_optimizer base;
    int updates, steps;
    ct_tensor *last_sign;
} sign_opt;

static void sign_update(ct_optimizer *opt, const ct_param_group *group, int64_t offset, int64_t count, double lr) {
    sign_opt *s = ct_container_of(opt, sign_opt, base);
    s->updates++;
    for (int64_t i = offset; i < offset + count; i++) {
        double g = ct_tensor_get(&opt->grads, i), sg = (g > 0) - (g < 0);
        ct_tensor_set(&opt->params, i, ct_tensor_get(&opt->params, i) - lr * sg);
        ct_tensor_set(s->last_sign, i, sg);
    }
}

static ct_status sign_step(ct_optimizer *opt, double lr) {
    ct_container_of(opt, sign_opt, base)->steps++;
    return ct_optimizer_default_step(opt, lr); /* "super" */
}

static ct_status count_step(ct_optimizer *opt, double lr) {
    ct_container_of(opt, sign_opt, base)->steps++;
    return CT_OK;
}

static void subclass(void) {
    static const ct_optimizer_ops ops = {
        .size = sizeof ops, .name = "sign", .step = sign_step, .update = sign_update};
    ct_rng r;
    ct_rng_init(&r, ct_test_seed, 3, CT_RNG_USER);
    store st;
    make_store(&st, CT_F64, &r, false);
    ct_optim_config cfg = ct_optim_config_default();
    sign_opt *s = calloc(1, sizeof *s);
    CHECK_OK(ct_optimizer_base_init(&s->base, &ops, &cfg, &st.ps));
    CHECK_OK(ct_optimizer_add_state(&s->base, "last_sign", &s->last_sign));
    ct_tensor before;
    CHECK_OK(ct_tensor_alloc(&before, CT_F64, CT_CPU, 1, st.ps.values.shape));
    ct_op_copy(&before, &st.ps.values);
    set_grads(&st, 0);
    CHECK_OK(ct_optimizer_step(&s->base, 0.5));
    int ranges = s->base.groups[0].n_ranges + s->base.groups[1].n_ranges;
    CHECK(s->steps == 1 && s->updates == ranges, "subclass: %d steps, %d updates for %d ranges", s->steps, s->updates,
          ranges);
    CHECK(strcmp(ct_optimizer_name(&s->base), "sign") == 0 && ct_optimizer_state_count(&s->base) == 1 &&
              ct_optimizer_state_find(&s->base, "last_sign") == s->last_sign,
          "subclass: name or default state enumeration wrong");
    double worst = 0;
    for (int i = 0; i < st.ps.count; i++) {
        const ct_param *p = &st.ps.items[i];
        if (p->flags & CT_PARAM_BUFFER) continue;
        for (int64_t j = p->offset; j < p->offset + p->numel; j++) {
            double g = ct_tensor_get(&st.ps.grads, j);
            worst = fmax(worst, fabs(ct_tensor_get(&st.ps.values, j) -
                                     (ct_tensor_get(&before, j) - 0.5 * ((g > 0) - (g < 0)))));
        }
    }
    CHECK(worst == 0, "subclass update wrong by %g", worst);
    const char *name;
    ct_tensor *t;
    CHECK_ERR(ct_optimizer_state_get(&s->base, 1, &name, &t), CT_ERR_INVALID_ARG, "state index 1");

    /* A table written before `update` existed (its size ends after step) steps through its own hook
     * and gets the default state enumeration. */
    static const ct_optimizer_ops old_ops = {
        .size = offsetof(ct_optimizer_ops, update), .name = "old", .step = count_step};
    s->base.ops = &old_ops;
    CHECK_OK(ct_optimizer_step(&s->base, 0.5));
    CHECK(s->steps == 2 && ct_optimizer_state_count(&s->base) == 1, "old table: %d steps", s->steps);

    /* An update that does not clear as it reads (no update_clears_grads), through its own step and
     * through the default one: ct_optimizer_step_zero_grad clears after the step. */
    static const ct_optimizer_ops default_step_ops = {.size = sizeof ops, .name = "sign", .update = sign_update};
    for (int v = 0; v < 2; v++) {
        s->base.ops = v ? &default_step_ops : &ops;
        set_grads(&st, 1 + v);
        ct_op_copy(&before, &st.ps.values);
        CHECK_OK(ct_optimizer_step_zero_grad(&s->base, 0.25));
        CHECK(grads_max(&st) == 0, "subclass %d: step_zero_grad left a gradient of %g", v, grads_max(&st));
        double moved = 0;
        for (int64_t j = 0; j < ct_tensor_numel(&before); j++)
            moved = fmax(moved, fabs(ct_tensor_get(&st.ps.values, j) - ct_tensor_get(&before, j)));
        CHECK(fabs(moved - 0.25) < 1e-12, "subclass %d: step_zero_grad moved parameters by up to %.17g, not 0.25", v,
              moved);
    }
    ct_tensor_free(&before);
    ct_optimizer_destroy(&s->base); /* default destroy frees the state and the struct */
    ct_params_free(&st.ps);
}

/* --- configuration errors ------------------------------------------------------------------------ */

static ct_status from_text(const char *text, ct_optim_config *cfg) {
    json_error_t err;
    json_t *j = json_loads(text, 0, &err);
    CT_ASSERT(j);
    ct_status s = ct_optim_config_from_json(j, "args", cfg);
    json_decref(j);
    return s;
}

static void config_errors(void) {
    ct_optim_config c;
    CHECK_OK(from_text("{}", &c));
    CHECK(c.optim == CT_OPTIM_ADAMW && c.learning_rate == 5e-5 && c.adam_beta1 == 0.9 && c.adam_beta2 == 0.999 &&
              c.adam_epsilon == 1e-8 && c.weight_decay == 0,
          "Hugging Face defaults not kept");
    CHECK_OK(from_text("{\"optim\": \"sgd\", \"learning_rate\": 0.1, \"momentum\": 0.9, \"nesterov\": true, "
                       "\"adam_beta1\": 7, \"foo\": 1}",
                       &c));
    CHECK(c.optim == CT_OPTIM_SGD && c.momentum == 0.9 && c.nesterov && c.learning_rate == 0.1,
          "sgd settings not read");
    CHECK_OK(from_text("{\"optim\": \"adamw_torch\", \"amsgrad\": true, \"adam_epsilon\": 0}", &c));
    CHECK(c.optim == CT_OPTIM_ADAMW && c.amsgrad, "adamw_torch alias");

    CHECK_ERR(from_text("{\"optim\": \"adam\", \"learning_rate\": -0.1}", &c), CT_ERR_CONFIG, "learning_rate",
              "-0.1");
    CHECK_ERR(from_text("{\"optim\": \"sgd\", \"weight_decay\": -1}", &c), CT_ERR_CONFIG, "weight_decay", "-1");
    CHECK_ERR(from_text("{\"optim\": \"adam\", \"adam_beta1\": 1.0}", &c), CT_ERR_CONFIG, "adam_beta1", "= 1 ",
              "[0, 1)");
    CHECK_ERR(from_text("{\"optim\": \"adamw\", \"adam_beta2\": -0.5}", &c), CT_ERR_CONFIG, "adam_beta2", "-0.5");
    CHECK_ERR(from_text("{\"optim\": \"adamw\", \"adam_epsilon\": -1e-8}", &c), CT_ERR_CONFIG, "adam_epsilon",
              "-1e-08");
    CHECK_ERR(from_text("{\"optim\": \"sgd\", \"momentum\": -0.9}", &c), CT_ERR_CONFIG, "momentum", "-0.9");
    CHECK_ERR(from_text("{\"optim\": \"sgd\", \"momentum\": 0.9, \"dampening\": 1.5}", &c), CT_ERR_CONFIG,
              "dampening", "1.5");
    CHECK_ERR(from_text("{\"optim\": \"sgd\", \"nesterov\": true}", &c), CT_ERR_CONFIG, "nesterov", "momentum = 0");
    CHECK_ERR(from_text("{\"optim\": \"sgd\", \"nesterov\": true, \"momentum\": 0.9, \"dampening\": 0.1}", &c),
              CT_ERR_CONFIG, "nesterov", "dampening = 0.1");
    CHECK_ERR(from_text("{\"optim\": \"adamx\"}", &c), CT_ERR_CONFIG, "args.optim", "'adamx'", "did you mean");
    CHECK_ERR(from_text("{\"optim\": \"lion\"}", &c), CT_ERR_CONFIG, "'lion'", "sgd, adam or adamw");
    CHECK_ERR(from_text("{\"learning_rate\": \"fast\"}", &c), CT_ERR_CONFIG, "args.learning_rate", "a number");
    CHECK_ERR(from_text("{\"amsgrad\": 1}", &c), CT_ERR_CONFIG, "args.amsgrad");
    CHECK_ERR(from_text("[]", &c), CT_ERR_CONFIG, "args");

    /* The C struct is validated too, NaN and inf included. */
    c = ct_optim_config_default();
    c.adam_beta2 = NAN;
    CHECK_ERR(ct_optim_config_validate(&c), CT_ERR_CONFIG, "adam_beta2", "nan");
    c = ct_optim_config_default();
    c.learning_rate = INFINITY;
    CHECK_ERR(ct_optim_config_validate(&c), CT_ERR_CONFIG, "learning_rate", "inf");

    /* Construction and stepping errors. */
    static const ct_module root;
    ct_tensor v, g;
    ct_param_store ps;
    ct_params_init(&ps, CT_F32, CT_CPU);
    int64_t n = 4;
    CHECK_OK(ct_params_declare(&ps, &root, "w", 1, &n, 0, &v, &g));
    ct_optimizer *opt = (ct_optimizer *)&ps; /* must be reset to NULL on failure */
    c = ct_optim_config_default();
    CHECK_ERR(ct_optimizer_create(&c, &ps, &opt), CT_ERR_STATE, "not finalized");
    CHECK(opt == NULL, "failed create left *out set");
    CHECK_OK(ct_params_finalize(&ps));
    c.adam_beta1 = 2;
    CHECK_ERR(ct_optimizer_create(&c, &ps, &opt), CT_ERR_CONFIG, "adam_beta1");
    c = ct_optim_config_default();
    CHECK_OK(ct_optimizer_create(&c, &ps, &opt));
    ct_tensor_fill(&v, 1.0);
    ct_tensor_fill(&g, 0.5);
    CHECK_ERR(ct_optimizer_step(opt, -1e-3), CT_ERR_INVALID_ARG, "adamw", "learning rate -0.001");
    CHECK_ERR(ct_optimizer_step(opt, NAN), CT_ERR_INVALID_ARG, "learning rate nan");
    CHECK(ct_optimizer_step_count(opt) == 0 && ct_tensor_get(&v, 0) == 1.0, "a rejected step changed something");
    CHECK_ERR(ct_optimizer_set_step_count(opt, -3), CT_ERR_INVALID_ARG, "-3");
    CHECK_OK(ct_optimizer_step(opt, 0.0));
    CHECK(ct_optimizer_step_count(opt) == 1 && ct_tensor_get(&v, 0) == 1.0, "lr = 0 moved a parameter");
    ct_optimizer_destroy(opt);
    ct_optimizer_destroy(NULL);
    c.optim = CT_OPTIM_SGD;
    CHECK_ERR(ct_adam_create(&c, &ps, &opt), CT_ERR_CONFIG, "another optimizer");
    ct_params_free(&ps);
}

/* --- clipping ----------------------------------------------------------------------------------- */

static void clipping(void) {
    ct_rng r;
    ct_rng_init(&r, ct_test_seed, 4, CT_RNG_USER);
    for (int d = 0; d < 2; d++) {
        ct_dtype dt = d ? CT_F64 : CT_F32;
        int64_t n = 50000 + (int64_t)ct_rng_below(&r, 1000); /* above the OpenMP threshold */
        ct_tensor g, orig;
        CHECK_OK(ct_tensor_alloc(&g, dt, CT_CPU, 1, &n));
        CHECK_OK(ct_tensor_alloc(&orig, dt, CT_CPU, 1, &n));
        for (int64_t i = 0; i < n; i++) ct_tensor_set(&orig, i, ct_rng_normal(&r) * 0.01);
        long double ss = 0;
        for (int64_t i = 0; i < n; i++) ss += (long double)ct_tensor_get(&orig, i) * ct_tensor_get(&orig, i);
        double want = sqrtl(ss), norm = -1;

        ct_op_copy(&g, &orig);
        CHECK_OK(ct_clip_grad_norm(&g, 0.0, &norm));
        CHECK_NEAR(norm, want, 1e-13);
        CHECK(same_bytes(&g, &orig), "max_norm = 0 changed the gradients");
        CHECK_OK(ct_clip_grad_norm(&g, 2 * want, &norm));
        CHECK(same_bytes(&g, &orig), "a norm below max_norm changed the gradients");

        double max_norm = want * 0.3;
        CHECK_OK(ct_clip_grad_norm(&g, max_norm, &norm));
        double coef = max_norm / (want + 1e-6), after = ct_op_l2_norm(&g);
        CHECK_NEAR(after, want * coef, dt == CT_F32 ? 1e-6 : 1e-13);
        for (int64_t i = 0; i < n; i += 997)
            CHECK_NEAR(ct_tensor_get(&g, i), (dt == CT_F32 ? (double)(float)coef : coef) * ct_tensor_get(&orig, i),
                       dt == CT_F32 ? 1e-7 : 1e-15);

        /* inf and NaN: norm returned, gradients unchanged, CT_ERR_NUMERIC, even with max_norm = 0. */
        for (int bad = 0; bad < 2; bad++) {
            ct_op_copy(&g, &orig);
            ct_tensor_set(&g, (int64_t)ct_rng_below(&r, (uint64_t)n), bad ? NAN : -INFINITY);
            ct_tensor keep;
            CHECK_OK(ct_tensor_alloc(&keep, dt, CT_CPU, 1, &n));
            ct_op_copy(&keep, &g);
            for (int m = 0; m < 2; m++) {
                CHECK_ERR(ct_clip_grad_norm(&g, m ? 1.0 : 0.0, &norm), CT_ERR_NUMERIC, bad ? "nan" : "inf",
                          "unchanged");
                CHECK(bad ? isnan(norm) : norm == INFINITY, "non-finite norm reported as %g", norm);
                CHECK(same_bytes(&g, &keep), "non-finite gradients were changed");
            }
            ct_tensor_free(&keep);
        }
        CHECK_ERR(ct_clip_grad_norm_apply(&g, 1.0, NAN), CT_ERR_NUMERIC, "nan");
        ct_tensor_free(&g);
        ct_tensor_free(&orig);
    }

    /* f64 values whose squares overflow: the norm is still finite and right. */
    int64_t n = 1000;
    ct_tensor g;
    CHECK_OK(ct_tensor_alloc(&g, CT_F64, CT_CPU, 1, &n));
    for (int64_t i = 0; i < n; i++) ct_tensor_set(&g, i, (i % 2 ? -3e200 : 4e200));
    double norm;
    CHECK_OK(ct_clip_grad_norm(&g, 1.0, &norm));
    CHECK_NEAR(norm, 5e200 * sqrt(500.0), 1e-13);
    CHECK_NEAR(ct_op_l2_norm(&g), 1.0, 1e-12);
    ct_tensor_free(&g);

    int64_t three = 3;
    ct_tensor ints;
    CHECK_OK(ct_tensor_alloc(&ints, CT_I32, CT_CPU, 1, &three));
    CHECK_ERR(ct_clip_grad_norm(&ints, 1.0, NULL), CT_ERR_DTYPE, "clip_grad_norm", "i32");
    ct_tensor_free(&ints);
}

int main(void) {
    ct_test_begin("test_optim");
    ct_h5_quiet();
    for (int d = 0; d < 2; d++) {
        ct_dtype dt = d ? CT_F64 : CT_F32;
        round_trip(CT_OPTIM_SGD, false, dt);
        round_trip(CT_OPTIM_ADAM, true, dt);
        round_trip(CT_OPTIM_ADAMW, false, dt);
        round_trip(CT_OPTIM_ADAMW, true, dt);
    }
    thread_independence();
    for (int d = 0; d < 2; d++) {
        ct_dtype dt = d ? CT_F64 : CT_F32;
        step_zero_grad(CT_OPTIM_SGD, false, dt);
        step_zero_grad(CT_OPTIM_ADAM, true, dt);
        step_zero_grad(CT_OPTIM_ADAMW, false, dt);
    }
    groups();
    by_hand();
    subclass();
    config_errors();
    clipping();
    return ct_test_finish();
}
