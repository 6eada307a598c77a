/* Learning-rate schedulers: hand-computed values of every built-in (the oracle test compares them
 * with Hugging Face at every step; these hold without it), checkpoint/restore mid-schedule equal to
 * the uninterrupted run for every type with random settings, a user-defined scheduler through the
 * vtable (including an older, shorter ops table), and the errors bad names, kwargs and states get.
 *
 * Why one file of over 600 lines: every scheduler type goes through the same table of hand-
 * computed values and the same checkpoint round trip. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/util.h"
#include "optim/scheduler.h"
#include "testlib.h"

static ct_rng rng;

static ct_scheduler_config named(const char *name) {
    ct_scheduler_config c = ct_scheduler_config_default();
    snprintf(c.lr_scheduler_type, sizeof c.lr_scheduler_type, "%s", name);
    return c;
}

static ct_scheduler *make(const ct_scheduler_config *c, double lr, int64_t total) {
    ct_scheduler *s = NULL;
    ct_status st = ct_scheduler_create(c, lr, total, &s);
    CHECK(st == CT_OK, "create '%s': %s", c->lr_scheduler_type, ct_last_error());
    return s;
}

/* lr_at(step) / base against a hand-computed multiplier. */
static void expect_lambda(const ct_scheduler *s, int64_t step, double want) {
    double got = ct_scheduler_lr_at(s, step) / s->base_lr;
    CHECK(fabs(got - want) <= 1e-12 * fmax(1.0, fabs(want)), "%s: lambda(%lld) = %.17g, want %.17g",
          ct_scheduler_name(s), (long long)step, got, want);
}

static void known_values(void) {
    ct_scheduler_config c = named("linear");
    c.warmup_steps = 10;
    ct_scheduler *s = make(&c, 0.1, 110);
    if (s) {
        expect_lambda(s, 0, 0.0);
        expect_lambda(s, 5, 0.5);
        expect_lambda(s, 10, 1.0);
        expect_lambda(s, 60, 0.5);
        expect_lambda(s, 110, 0.0);
        expect_lambda(s, 500, 0.0);
        CHECK(ct_scheduler_lr(s) == 0.0, "linear starts at 0 with warmup");
        for (int i = 0; i < 5; i++) ct_scheduler_step(s);
        CHECK_NEAR(ct_scheduler_lr(s), 0.05, 1e-15);
        CHECK(ct_scheduler_get_state(s).step == 5, "steps counted");
    }
    ct_scheduler_destroy(s);

    c = named("cosine");
    s = make(&c, 0.1, 100);
    if (s) {
        expect_lambda(s, 0, 1.0);
        expect_lambda(s, 50, 0.5);
        expect_lambda(s, 100, 0.0);
    }
    ct_scheduler_destroy(s);

    c = named("cosine_with_restarts");
    c.kwargs.num_cycles = 2;
    s = make(&c, 0.1, 100);
    if (s) {
        expect_lambda(s, 25, 0.5);
        expect_lambda(s, 50, 1.0); /* the restart */
        expect_lambda(s, 75, 0.5);
        expect_lambda(s, 100, 0.0);
    }
    ct_scheduler_destroy(s);
    c = named("cosine_with_restarts"); /* num_cycles defaults to 1 here, not 0.5 */
    s = make(&c, 0.1, 100);
    if (s) expect_lambda(s, 50, 0.5);
    ct_scheduler_destroy(s);

    c = named("polynomial");
    c.kwargs.lr_end = 0.1;
    c.kwargs.power = 2;
    s = make(&c, 1.0, 10);
    if (s) {
        expect_lambda(s, 5, 0.9 * 0.25 + 0.1);
        expect_lambda(s, 10, 0.1);
        expect_lambda(s, 11, 0.1);
    }
    ct_scheduler_destroy(s);
    c = named("polynomial"); /* warmup == total: Hugging Face divides by zero at the last step */
    c.warmup_steps = 10;
    c.kwargs.lr_end = 0.25;
    s = make(&c, 1.0, 10);
    if (s) {
        expect_lambda(s, 5, 0.5);
        expect_lambda(s, 10, 0.25);
    }
    ct_scheduler_destroy(s);

    c = named("constant");
    s = make(&c, 0.3, 0); /* needs no step count */
    if (s) {
        expect_lambda(s, 0, 1.0);
        expect_lambda(s, 12345, 1.0);
    }
    ct_scheduler_destroy(s);

    c = named("constant_with_warmup");
    c.warmup_steps = 4;
    s = make(&c, 0.3, 0);
    if (s) {
        expect_lambda(s, 2, 0.5);
        expect_lambda(s, 4, 1.0);
    }
    ct_scheduler_destroy(s);

    c = named("inverse_sqrt");
    c.warmup_steps = 4; /* timescale defaults to the warmup */
    s = make(&c, 0.3, 0);
    if (s) {
        expect_lambda(s, 2, 0.5);
        expect_lambda(s, 4, 1.0);
        expect_lambda(s, 12, 1.0 / sqrt(3.0));
    }
    ct_scheduler_destroy(s);
    c = named("inverse_sqrt"); /* no warmup: timescale 10000 */
    s = make(&c, 0.3, 0);
    if (s) {
        expect_lambda(s, 0, 1.0);
        expect_lambda(s, 30000, 0.5);
    }
    ct_scheduler_destroy(s);

    c = named("cosine_with_min_lr");
    c.kwargs.min_lr_rate = 0.1;
    s = make(&c, 0.2, 100);
    if (s) {
        expect_lambda(s, 50, 0.55);
        expect_lambda(s, 100, 0.1);
    }
    ct_scheduler_destroy(s);
    c = named("cosine_with_min_lr");
    c.kwargs.min_lr = 0.02; /* the same, as an absolute rate */
    s = make(&c, 0.2, 100);
    if (s) expect_lambda(s, 100, 0.1);
    ct_scheduler_destroy(s);

    c = named("warmup_stable_decay");
    c.warmup_steps = 10;
    c.kwargs.num_decay_steps = 20;
    c.kwargs.min_lr_ratio = 0.2;
    s = make(&c, 0.1, 100); /* stable = 100 - 10 - 20 */
    if (s) {
        expect_lambda(s, 0, 0.2);
        expect_lambda(s, 5, 0.5 * 0.8 + 0.2);
        expect_lambda(s, 50, 1.0);
        expect_lambda(s, 79, 1.0);
        expect_lambda(s, 90, 0.5 * 0.8 + 0.2);
        expect_lambda(s, 100, 0.2);
    }
    ct_scheduler_destroy(s);
    snprintf(c.kwargs.decay_type, sizeof c.kwargs.decay_type, "1-sqrt");
    snprintf(c.kwargs.warmup_type, sizeof c.kwargs.warmup_type, "cosine");
    c.kwargs.min_lr_ratio = 0;
    s = make(&c, 0.1, 100);
    if (s) {
        expect_lambda(s, 5, 0.5);   /* 0.5 * (1 - cos(pi / 2)) */
        expect_lambda(s, 85, 0.5);  /* 1 - sqrt(0.25) */
    }
    ct_scheduler_destroy(s);

    /* Plateau: patience 2, halve, cooldown 1, threshold 0 (any decrease is an improvement). */
    c = named("reduce_lr_on_plateau");
    c.kwargs.patience = 2;
    c.kwargs.factor = 0.5;
    c.kwargs.cooldown = 1;
    c.kwargs.threshold = 0;
    s = make(&c, 0.1, 0);
    if (s) {
        CHECK(ct_scheduler_needs_metric(s), "plateau needs a metric");
        CHECK(isinf(ct_scheduler_get_state(s).best) && ct_scheduler_get_state(s).best > 0, "best starts at +inf");
        const double want[8] = {0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05, 0.025};
        for (int i = 0; i < 8; i++) {
            ct_scheduler_step(s); /* ignored: only metrics move it */
            CHECK_OK(ct_scheduler_step_metric(s, 1.0));
            CHECK(ct_scheduler_lr(s) == want[i], "plateau after %d metrics: lr %g, want %g", i + 1, ct_scheduler_lr(s),
                  want[i]);
        }
        CHECK(ct_scheduler_lr_at(s, 3) == ct_scheduler_lr(s), "lr_at of a plateau scheduler is its current lr");
        CHECK_OK(ct_scheduler_step_metric(s, 0.5));
        CHECK(ct_scheduler_get_state(s).best == 0.5 && ct_scheduler_get_state(s).num_bad_epochs == 0, "improvement");
        CHECK_OK(ct_scheduler_step_metric(s, NAN)); /* like torch: not better */
        CHECK(ct_scheduler_get_state(s).best == 0.5 && ct_scheduler_get_state(s).num_bad_epochs == 1, "NaN metric");
    }
    ct_scheduler_destroy(s);
    c = named("reduce_lr_on_plateau");
    snprintf(c.kwargs.mode, sizeof c.kwargs.mode, "max");
    c.kwargs.min_lr = 0.03;
    c.kwargs.patience = 0;
    s = make(&c, 0.1, 0);
    if (s) {
        CHECK(ct_scheduler_get_state(s).best == -INFINITY, "mode max: best starts at -inf");
        CHECK_OK(ct_scheduler_step_metric(s, 1.0));
        CHECK_OK(ct_scheduler_step_metric(s, 0.5)); /* worse: reduce to max(0.01, 0.03) */
        CHECK(ct_scheduler_lr(s) == 0.03, "clamped to min_lr: %g", ct_scheduler_lr(s));
        CHECK_OK(ct_scheduler_step_metric(s, 0.5));
        CHECK(ct_scheduler_lr(s) == 0.03, "stays at min_lr: %g", ct_scheduler_lr(s));
    }
    ct_scheduler_destroy(s);

    /* A step-driven scheduler ignores metrics. */
    c = named("linear");
    s = make(&c, 0.1, 10);
    if (s) {
        CHECK(!ct_scheduler_needs_metric(s), "linear needs no metric");
        CHECK_OK(ct_scheduler_step_metric(s, 3.0));
        CHECK(ct_scheduler_get_state(s).step == 0 && ct_scheduler_lr(s) == 0.1, "metric ignored");
    }
    ct_scheduler_destroy(s);

    CHECK(ct_scheduler_warmup_steps(1000, 0, 0.1) == 100, "ratio 0.1 of 1000");
    CHECK(ct_scheduler_warmup_steps(999, 0, 0.1) == 100, "ratio rounds up");
    CHECK(ct_scheduler_warmup_steps(1000, 7, 0.5) == 7, "steps win over ratio");
    CHECK(ct_scheduler_warmup_steps(1000, 0, 0.0) == 0, "no warmup");
}

static double unif(double a, double b) { return a + (b - a) * ct_rng_uniform(&rng); }
static int64_t below(int64_t n) { return (int64_t)ct_rng_below(&rng, (uint64_t)n); }

/* A random valid configuration of type `name` for `total` steps. */
static ct_scheduler_config random_config(const char *name, int64_t total, double lr) {
    ct_scheduler_config c = named(name);
    if (below(2)) c.warmup_steps = below(total / 3 + 1);
    if (below(2)) c.warmup_ratio = unif(0, 0.3);
    int64_t warmup = ct_scheduler_warmup_steps(total, c.warmup_steps, c.warmup_ratio);
    ct_scheduler_kwargs *k = &c.kwargs;
    if (!strcmp(name, "cosine") || !strcmp(name, "cosine_with_restarts")) k->num_cycles = unif(0.2, 4);
    if (!strcmp(name, "polynomial")) {
        k->power = unif(0.2, 3);
        k->lr_end = lr * unif(0, 0.5);
    }
    if (!strcmp(name, "inverse_sqrt") && below(2)) k->timescale = 1 + below(total);
    if (!strcmp(name, "cosine_with_min_lr")) k->min_lr_rate = unif(0, 1);
    if (!strcmp(name, "warmup_stable_decay")) {
        k->num_decay_steps = below(total - warmup + 1);
        k->min_lr_ratio = unif(0, 0.5);
        static const char *const shapes[] = {"linear", "cosine", "1-sqrt"};
        snprintf(k->warmup_type, sizeof k->warmup_type, "%s", shapes[below(3)]);
        snprintf(k->decay_type, sizeof k->decay_type, "%s", shapes[below(3)]);
    }
    if (!strcmp(name, "reduce_lr_on_plateau")) {
        snprintf(k->mode, sizeof k->mode, "%s", below(2) ? "min" : "max");
        snprintf(k->threshold_mode, sizeof k->threshold_mode, "%s", below(2) ? "rel" : "abs");
        k->factor = unif(0.1, 0.9);
        k->patience = below(5);
        k->cooldown = below(4);
        k->threshold = unif(0, 0.01);
        k->min_lr = lr * unif(0, 0.01);
    }
    return c;
}

/* Interrupted at random steps (a fifth of them: state through JSON text into a new scheduler) ==
 * uninterrupted, bit for bit, for every built-in. */
static void resume_equals_uninterrupted(void) {
    enum { N = 400 };
    double metric[N];
    for (int i = 0; i < N; i++) metric[i] = 1.0 / (1 + i / 50.0) + 0.02 * ct_rng_normal(&rng);
    for (const char *const *name = ct_scheduler_names; *name; name++) {
        for (int rep = 0; rep < 3; rep++) {
            int64_t total = 10 + below(N);
            double lr = pow(10, unif(-5, -1));
            ct_scheduler_config c = random_config(*name, total, lr);
            ct_scheduler *a = make(&c, lr, total), *b = make(&c, lr, total);
            if (!a || !b) {
                ct_scheduler_destroy(a);
                ct_scheduler_destroy(b);
                continue;
            }
            bool metric_driven = ct_scheduler_needs_metric(a);
            int mismatches = 0, cuts = 0;
            for (int64_t k = 0; k < N; k++) {
                if (k > 0 && below(5) == 0) {
                    cuts++;
                    ct_scheduler_state st = ct_scheduler_get_state(b);
                    json_t *j = ct_scheduler_state_to_json(&st);
                    char *text = json_dumps(j, 0);
                    json_decref(j);
                    ct_scheduler_destroy(b);
                    b = make(&c, lr, total);
                    json_t *back = json_loads(text, 0, NULL);
                    ct_scheduler_state st2;
                    CHECK_OK(ct_scheduler_state_from_json(back, "state", &st2));
                    CHECK(memcmp(&st, &st2, sizeof st) == 0, "%s: state JSON round trip changed it: %s", *name, text);
                    CHECK_OK(ct_scheduler_set_state(b, &st2));
                    json_decref(back);
                    free(text);
                    if (!b) break;
                }
                mismatches += ct_scheduler_lr(a) != ct_scheduler_lr(b);
                if (metric_driven) {
                    ct_scheduler_step_metric(a, metric[k]);
                    ct_scheduler_step_metric(b, metric[k]);
                } else {
                    ct_scheduler_step(a);
                    ct_scheduler_step(b);
                }
            }
            CHECK(mismatches == 0, "%s: resumed %d times, differs from the uninterrupted run at %d steps", *name, cuts,
                  mismatches);
            if (b) {
                ct_scheduler_state sa = ct_scheduler_get_state(a), sb = ct_scheduler_get_state(b);
                CHECK(memcmp(&sa, &sb, sizeof sa) == 0, "%s: final states differ", *name);
            }
            ct_scheduler_destroy(a);
            ct_scheduler_destroy(b);
        }
    }
}

/* --- a user-defined scheduler through the vtable ------------------------------------------------ */

typedef struct exp_scheduler {
    ct_scheduler base;
    double gamma;
    int *destroyed;
} exp_scheduler;

static double exp_lambda(const ct_scheduler *s, int64_t step) {
    return pow(ct_container_of(s, const exp_scheduler, base)->gamma, (double)step);
}

static void exp_destroy(ct_scheduler *s) {
    exp_scheduler *e = ct_container_of(s, exp_scheduler, base);
    (*e->destroyed)++;
    free(e);
}

static int bogus_calls;
static ct_status bogus_on_metric(ct_scheduler *s, double m) {
    (void)s;
    (void)m;
    bogus_calls++;
    return CT_ERR_STATE;
}

static const ct_scheduler_ops exp_ops = {
    .size = sizeof(ct_scheduler_ops), .name = "exponential", .lr_lambda = exp_lambda, .destroy = exp_destroy};
/* A table written when ct_scheduler_ops ended at lr_lambda: what lies past `size` must read as NULL. */
static const ct_scheduler_ops old_ops = {.size = offsetof(ct_scheduler_ops, on_metric),
                                         .name = "old",
                                         .lr_lambda = exp_lambda,
                                         .on_metric = bogus_on_metric,
                                         .destroy = exp_destroy};

static void custom_scheduler(void) {
    int destroyed = 0;
    exp_scheduler *e = calloc(1, sizeof *e);
    e->gamma = 0.5;
    e->destroyed = &destroyed;
    ct_scheduler_base_init(&e->base, &exp_ops, 0.8, 0, 0);
    ct_scheduler *s = &e->base;
    CHECK(!strcmp(ct_scheduler_name(s), "exponential"), "name");
    CHECK(ct_scheduler_lr(s) == 0.8, "step 0");
    ct_scheduler_step(s);
    ct_scheduler_step(s);
    CHECK(ct_scheduler_lr(s) == 0.2, "step 2: %g", ct_scheduler_lr(s));
    CHECK(ct_scheduler_lr_at(s, 3) == 0.1, "lr_at(3)");
    ct_scheduler_destroy(s);
    CHECK(destroyed == 1, "custom destroy called once");

    /* The old table: on_metric and destroy lie beyond its size, so metrics are ignored and
     * destroy falls back to free(). */
    e = calloc(1, sizeof *e);
    e->gamma = 0.9;
    e->destroyed = &destroyed;
    ct_scheduler_base_init(&e->base, &old_ops, 1.0, 0, 0);
    CHECK_OK(ct_scheduler_step_metric(&e->base, 1.0));
    CHECK(bogus_calls == 0, "a member past the table's size was called");
    ct_scheduler_destroy(&e->base);
    CHECK(destroyed == 1, "a destroy past the table's size was called");
}

/* --- errors ------------------------------------------------------------------------------------- */

static void bad_configs(void) {
    ct_scheduler *s = (ct_scheduler *)&s; /* must be reset to NULL on failure */
    ct_scheduler_config c = named("cosin");
    CHECK_ERR(ct_scheduler_create(&c, 0.1, 100, &s), CT_ERR_CONFIG, "lr_scheduler_type", "'cosin'",
              "did you mean 'cosine'");
    CHECK(s == NULL, "out set to NULL on failure");
    c = named("exponential_decay_schedule");
    CHECK_ERR(ct_scheduler_create(&c, 0.1, 100, &s), CT_ERR_CONFIG, "unknown scheduler", "known: linear, cosine");

    c = named("linear");
    c.kwargs.num_cycles = 2;
    CHECK_ERR(ct_scheduler_create(&c, 0.1, 100, &s), CT_ERR_CONFIG, "lr_scheduler_kwargs.num_cycles",
              "'linear' takes no such setting", "it takes: none");
    c = named("reduce_lr_on_plateau");
    c.kwargs.timescale = 5;
    CHECK_ERR(ct_scheduler_create(&c, 0.1, 100, &s), CT_ERR_CONFIG, "lr_scheduler_kwargs.timescale", "mode, factor");
    c = named("constant_with_warmup");
    snprintf(c.kwargs.decay_type, sizeof c.kwargs.decay_type, "linear");
    CHECK_ERR(ct_scheduler_create(&c, 0.1, 100, &s), CT_ERR_CONFIG, "lr_scheduler_kwargs.decay_type");

    c = named("linear");
    CHECK_ERR(ct_scheduler_create(&c, 0.1, 0, &s), CT_ERR_CONFIG, "num_training_steps", "'linear' needs");
    CHECK_ERR(ct_scheduler_create(&c, NAN, 10, &s), CT_ERR_CONFIG, "learning_rate");
    CHECK_ERR(ct_scheduler_create(&c, -1, 10, &s), CT_ERR_CONFIG, "learning_rate", "-1");
    CHECK_ERR(ct_scheduler_create(&c, 0.1, -5, &s), CT_ERR_CONFIG, "num_training_steps", "-5");
    c.warmup_ratio = 1.5;
    CHECK_ERR(ct_scheduler_create(&c, 0.1, 10, &s), CT_ERR_CONFIG, "warmup_ratio", "[0, 1]", "1.5");
    c.warmup_ratio = NAN;
    CHECK_ERR(ct_scheduler_create(&c, 0.1, 10, &s), CT_ERR_CONFIG, "warmup_ratio");
    c = named("constant_with_warmup");
    c.warmup_ratio = 0.1;
    CHECK_ERR(ct_scheduler_create(&c, 0.1, 0, &s), CT_ERR_CONFIG, "warmup_ratio", "number of training steps");
    c.warmup_ratio = 0;
    c.warmup_steps = -3;
    CHECK_ERR(ct_scheduler_create(&c, 0.1, 10, &s), CT_ERR_CONFIG, "warmup_steps", "-3");

    c = named("cosine");
    c.kwargs.num_cycles = 0;
    CHECK_ERR(ct_scheduler_create(&c, 0.1, 10, &s), CT_ERR_CONFIG, "lr_scheduler_kwargs.num_cycles", "> 0");
    c = named("polynomial");
    c.kwargs.lr_end = 0.1;
    CHECK_ERR(ct_scheduler_create(&c, 0.1, 10, &s), CT_ERR_CONFIG, "lr_scheduler_kwargs.lr_end",
              "smaller than the initial learning rate");
    c = named("polynomial");
    c.kwargs.power = -1;
    CHECK_ERR(ct_scheduler_create(&c, 0.1, 10, &s), CT_ERR_CONFIG, "lr_scheduler_kwargs.power");
    c = named("inverse_sqrt");
    c.kwargs.timescale = 0;
    CHECK_ERR(ct_scheduler_create(&c, 0.1, 10, &s), CT_ERR_CONFIG, "lr_scheduler_kwargs.timescale", ">= 1");
    c = named("cosine_with_min_lr");
    CHECK_ERR(ct_scheduler_create(&c, 0.1, 10, &s), CT_ERR_CONFIG, "lr_scheduler_kwargs.min_lr",
              "needs min_lr or min_lr_rate");
    c.kwargs.min_lr = 0.01;
    c.kwargs.min_lr_rate = 0.1;
    CHECK_ERR(ct_scheduler_create(&c, 0.1, 10, &s), CT_ERR_CONFIG, "only one of min_lr and min_lr_rate");
    c.kwargs.min_lr_rate = NAN;
    c.kwargs.min_lr = 0.2;
    CHECK_ERR(ct_scheduler_create(&c, 0.1, 10, &s), CT_ERR_CONFIG, "lr_scheduler_kwargs.min_lr", "0.2");

    c = named("warmup_stable_decay");
    CHECK_ERR(ct_scheduler_create(&c, 0.1, 10, &s), CT_ERR_CONFIG, "lr_scheduler_kwargs.num_decay_steps",
              "needs num_decay_steps");
    c.warmup_steps = 4;
    c.kwargs.num_decay_steps = 7;
    CHECK_ERR(ct_scheduler_create(&c, 0.1, 10, &s), CT_ERR_CONFIG, "num_decay_steps", "do not fit", "10 training");
    c.kwargs.num_decay_steps = 3;
    snprintf(c.kwargs.decay_type, sizeof c.kwargs.decay_type, "cosin");
    CHECK_ERR(ct_scheduler_create(&c, 0.1, 10, &s), CT_ERR_CONFIG, "lr_scheduler_kwargs.decay_type",
              "did you mean 'cosine'");
    c.kwargs.decay_type[0] = '\0';
    c.kwargs.num_stable_steps = 2; /* an explicit stable phase needs no step count */
    CHECK_OK(ct_scheduler_create(&c, 0.1, 0, &s));
    ct_scheduler_destroy(s);
    c.kwargs.min_lr_ratio = 1.5;
    CHECK_ERR(ct_scheduler_create(&c, 0.1, 10, &s), CT_ERR_CONFIG, "lr_scheduler_kwargs.min_lr_ratio");

    c = named("reduce_lr_on_plateau");
    c.kwargs.factor = 1.0;
    CHECK_ERR(ct_scheduler_create(&c, 0.1, 0, &s), CT_ERR_CONFIG, "lr_scheduler_kwargs.factor", "[0, 1)");
    c = named("reduce_lr_on_plateau");
    snprintf(c.kwargs.mode, sizeof c.kwargs.mode, "mx");
    CHECK_ERR(ct_scheduler_create(&c, 0.1, 0, &s), CT_ERR_CONFIG, "lr_scheduler_kwargs.mode", "did you mean 'max'");
    c = named("reduce_lr_on_plateau");
    snprintf(c.kwargs.threshold_mode, sizeof c.kwargs.threshold_mode, "xyz");
    CHECK_ERR(ct_scheduler_create(&c, 0.1, 0, &s), CT_ERR_CONFIG, "lr_scheduler_kwargs.threshold_mode",
              "expected one of: rel, abs");
    c = named("reduce_lr_on_plateau");
    c.kwargs.patience = -1;
    CHECK_ERR(ct_scheduler_create(&c, 0.1, 0, &s), CT_ERR_CONFIG, "lr_scheduler_kwargs.patience");
    c = named("reduce_lr_on_plateau");
    c.kwargs.eps = INFINITY;
    CHECK_ERR(ct_scheduler_create(&c, 0.1, 0, &s), CT_ERR_CONFIG, "lr_scheduler_kwargs.eps");
}

static json_t *parse(const char *text) {
    json_error_t err;
    json_t *j = json_loads(text, 0, &err);
    CT_ASSERT(j);
    return j;
}

/* from_json: errors name the JSON path; null kwargs mean "default" as Python's None does. */
static void json_configs(void) {
    static const struct {
        const char *json;
        const char *want[3];
    } bad[] = {
        {"{\"lr_scheduler_type\": \"cosine\", \"lr_scheduler_kwargs\": {\"num_cycels\": 1}}",
         {"args.lr_scheduler_kwargs: unknown key 'num_cycels', did you mean 'num_cycles'?"}},
        {"{\"lr_scheduler_type\": \"lnear\"}", {"args.lr_scheduler_type", "did you mean 'linear'"}},
        {"{\"lr_scheduler_type\": 3}", {"args.lr_scheduler_type: expected a string"}},
        {"{\"lr_scheduler_kwargs\": {\"power\": 2}}",
         {"args.lr_scheduler_kwargs", "unexpected key 'power'", "'linear'"}},
        {"{\"lr_scheduler_type\": \"reduce_lr_on_plateau\", \"lr_scheduler_kwargs\": {\"patience\": 2.5}}",
         {"args.lr_scheduler_kwargs.patience: expected an integer"}},
        {"{\"lr_scheduler_type\": \"reduce_lr_on_plateau\", \"lr_scheduler_kwargs\": {\"factor\": 2}}",
         {"args.lr_scheduler_kwargs.factor", "[0, 1)", "2"}},
        {"{\"lr_scheduler_type\": \"reduce_lr_on_plateau\", \"lr_scheduler_kwargs\": {\"mode\": 1}}",
         {"args.lr_scheduler_kwargs.mode: expected a string"}},
        {"{\"lr_scheduler_type\": \"warmup_stable_decay\", \"lr_scheduler_kwargs\": {\"num_decay_steps\": 5, "
         "\"decay_type\": \"a-very-long-shape-name\"}}",
         {"args.lr_scheduler_kwargs.decay_type", "a-very-long-shape-name"}},
        {"{\"lr_scheduler_type\": \"cosine\", \"lr_scheduler_kwargs\": [1]}",
         {"args.lr_scheduler_kwargs: expected an object"}},
        {"{\"warmup_ratio\": \"0.1\"}", {"args.warmup_ratio: expected a number"}},
        {"{\"warmup_steps\": 1.5}", {"args.warmup_steps: expected an integer"}},
        {"{\"warmup_ratio\": 2}", {"args.warmup_ratio", "[0, 1]"}},
        {"{\"lr_scheduler_type\": \"cosine_with_min_lr\", \"lr_scheduler_kwargs\": {\"min_lr\": 1e-5, "
         "\"min_lr_rate\": 0.5}}",
         {"args.lr_scheduler_kwargs.min_lr", "only one"}},
        {"[]", {"args: expected an object"}},
    };
    for (size_t i = 0; i < CT_ARRAY_LEN(bad); i++) {
        json_t *j = parse(bad[i].json);
        ct_scheduler *s = NULL;
        ct_status st = ct_scheduler_from_json(j, "args", 0.1, 100, &s);
        CHECK(st == CT_ERR_CONFIG && s == NULL, "%s accepted (%s)", bad[i].json, ct_status_str(st));
        for (int k = 0; k < 3 && bad[i].want[k]; k++)
            CHECK(strstr(ct_last_error(), bad[i].want[k]) != NULL, "%s: message lacks '%s': %s", bad[i].json,
                  bad[i].want[k], ct_last_error());
        ct_scheduler_destroy(s);
        json_decref(j);
    }

    json_t *j = parse("{\"lr_scheduler_type\": \"cosine_with_min_lr\", \"warmup_ratio\": 0.1, \"learning_rate\": 3,"
                      " \"lr_scheduler_kwargs\": {\"min_lr\": null, \"min_lr_rate\": 0.1, \"num_cycles\": 1}}");
    ct_scheduler *s = NULL;
    CHECK_OK(ct_scheduler_from_json(j, "args", 0.5, 200, &s)); /* other keys are the schema's business */
    if (s) {
        CHECK(!strcmp(ct_scheduler_name(s), "cosine_with_min_lr") && s->num_warmup_steps == 20, "parsed");
        expect_lambda(s, 10, 0.5);
        expect_lambda(s, 20, 1.0);
        expect_lambda(s, 110, 0.1); /* one full cycle: halfway is the bottom */
    }
    ct_scheduler_destroy(s);
    json_decref(j);

    j = parse("{}");
    CHECK_OK(ct_scheduler_from_json(j, "args", 0.5, 200, &s)); /* Hugging Face's default: linear */
    if (s) CHECK(!strcmp(ct_scheduler_name(s), "linear") && s->num_warmup_steps == 0, "defaults");
    ct_scheduler_destroy(s);
    json_decref(j);

    ct_scheduler_kwargs kw = ct_scheduler_kwargs_unset();
    j = parse("{\"mode\": \"max\", \"factor\": 0.5, \"patience\": 3.0}");
    CHECK_OK(ct_scheduler_kwargs_from_json(j, "kw", "reduce_lr_on_plateau", &kw));
    CHECK(!strcmp(kw.mode, "max") && kw.factor == 0.5 && kw.patience == 3 && isnan(kw.threshold), "kwargs parsed");
    CHECK_ERR(ct_scheduler_kwargs_from_json(j, "kw", "plateau", &kw), CT_ERR_CONFIG, "unknown scheduler 'plateau'");
    json_decref(j);
}

static void bad_states(void) {
    ct_scheduler_config c = named("linear");
    ct_scheduler *s = make(&c, 0.1, 10);
    ct_scheduler_config pc = named("reduce_lr_on_plateau");
    ct_scheduler *p = make(&pc, 0.1, 0);
    if (!s || !p) return;
    ct_scheduler_state st = {.step = -1};
    CHECK_ERR(ct_scheduler_set_state(s, &st), CT_ERR_INVALID_ARG, "scheduler 'linear'", "step -1");
    st = (ct_scheduler_state){.step = 4, .lr = 123.0};
    CHECK_OK(ct_scheduler_set_state(s, &st));
    CHECK(ct_scheduler_lr(s) == ct_scheduler_lr_at(s, 4), "a step-driven scheduler recomputes lr from step");
    st = (ct_scheduler_state){.step = 2, .lr = NAN, .best = 1};
    CHECK_ERR(ct_scheduler_set_state(p, &st), CT_ERR_INVALID_ARG, "reduce_lr_on_plateau", "lr");
    st = (ct_scheduler_state){.step = 2, .lr = 0.1, .best = 1, .cooldown_counter = -2};
    CHECK_ERR(ct_scheduler_set_state(p, &st), CT_ERR_INVALID_ARG, "cooldown_counter -2");
    st = (ct_scheduler_state){.step = 2, .lr = 0.1, .best = NAN};
    CHECK_ERR(ct_scheduler_set_state(p, &st), CT_ERR_INVALID_ARG, "best is NaN");
    CHECK(ct_scheduler_get_state(p).step == 0 && ct_scheduler_lr(p) == 0.1, "a rejected state changes nothing");

    st = (ct_scheduler_state){.step = 7, .lr = 0.025, .best = -INFINITY, .num_bad_epochs = 2, .cooldown_counter = 1};
    json_t *j = ct_scheduler_state_to_json(&st);
    ct_scheduler_state back;
    CHECK_OK(ct_scheduler_state_from_json(j, "state", &back));
    CHECK(memcmp(&st, &back, sizeof st) == 0, "state JSON round trip with -inf");
    json_object_set_new(j, "num_bad_epoch", json_integer(1));
    CHECK_ERR(ct_scheduler_state_from_json(j, "state", &back), CT_ERR_CONFIG, "did you mean 'num_bad_epochs'");
    json_object_del(j, "num_bad_epoch");
    json_object_del(j, "lr");
    CHECK_ERR(ct_scheduler_state_from_json(j, "state", &back), CT_ERR_CONFIG, "state", "'lr'");
    json_object_set_new(j, "lr", json_string("fast"));
    CHECK_ERR(ct_scheduler_state_from_json(j, "state", &back), CT_ERR_CONFIG, "state.lr: expected a number");
    json_decref(j);
    ct_scheduler_destroy(s);
    ct_scheduler_destroy(p);
    ct_scheduler_destroy(NULL);
}

int main(void) {
    ct_test_begin("test_scheduler");
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    known_values();
    resume_equals_uninterrupted();
    custom_scheduler();
    bad_configs();
    json_configs();
    bad_states();
    return ct_test_finish();
}
