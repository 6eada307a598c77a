/* The step's statistics on the device (core/ops/step_rule.h) on the GPU against the CPU: the ops a
 * Trainer step runs when its numbers stay on the device, in the order it runs them, on one block per
 * backend.
 *
 * Each round: a fresh block (RESET, with a loss to log carried in), one to three micro-batches whose
 * cross-entropy (class weights, ignored targets) or elementwise loss adds into it, PREPARE (1 /
 * count), the gradients scaled by it, their norm into it, DECIDE (clipping at a max_norm drawn below
 * or above the norm, the verdict, the loss to log), the clip applied, and an AdamW or SGD update
 * gated by it; then the parameters, gradients and every slot agree (the sums to 1e-12 relative,
 * the verdict exactly). The CPU's slots are also checked against the same arithmetic done here on
 * the host from the plain ops (ct_op_fused_classifier's sums, ct_op_l2_norm, torch's clip
 * coefficient). Bad steps: a NaN logit (the loss), an infinite gradient with a finite loss (the
 * norm), a target outside the classes (the label's row): each closes the gate on both backends, the
 * update changes no parameter and clears the gradient, and a good step after it leaves the first bad
 * step and the closed gate as they were. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops/ops.h"
#include "cuda_testlib.h"

#ifdef CT_HAVE_CUDA

static ct_rng rng;

static double urand(double lo, double hi) { return lo + (hi - lo) * ct_rng_uniform(&rng); }
static int64_t irand(int64_t lo, int64_t hi) { return lo + (int64_t)ct_rng_below(&rng, (uint64_t)(hi - lo + 1)); }

/* The block's values, from either backend. */
static void block_values(const ct_tensor *blk, double *out) {
    int64_t n = CT_STEP_SLOTS;
    ct_tensor h = ct_tensor_view(out, CT_F64, CT_CPU, 1, &n);
    if (ct_tensor_copy_to(&h, blk) != CT_OK) ct_test_fail(__FILE__, __LINE__, "cannot read a block");
}

static const char *slot_name(int i) {
    static const char *names[] = {"loss_sum", "loss_count", "bad_label", "grad_scale", "norm", "clip",
                                  "gate", "bad_step", "bad_kind", "bad_value", "log_loss"};
    return names[i];
}

/* Slots alike on both backends: the verdict's exactly, the sums to float64 rounding. */
static void same_blocks(const char *what, const ct_tensor *gpu, const ct_tensor *cpu) {
    double g[CT_STEP_SLOTS], c[CT_STEP_SLOTS];
    block_values(gpu, g);
    block_values(cpu, c);
    for (int i = 0; i < CT_STEP_SLOTS; i++) {
        bool exact = i == CT_STEP_BAD_LABEL || i == CT_STEP_GATE || i == CT_STEP_BAD_STEP || i == CT_STEP_BAD_KIND;
        bool same = (isnan(g[i]) && isnan(c[i])) || g[i] == c[i] ||
                    (!exact && fabs(g[i] - c[i]) <= 1e-12 * fmax(fabs(c[i]), 1e-300));
        CHECK(same, "%s: slot %s gpu %.17g, cpu %.17g", what, slot_name(i), g[i], c[i]);
    }
}

/* What one micro-batch adds on a backend (`blk` and the tensors on it); host: its (sum, count) from
 * the op that returns them, on the CPU. */
typedef struct micro {
    ct_tensor logits, target, weight, dlogits; /* cross-entropy */
    bool pointwise;
    ct_tensor pred, ptarget;
} micro;

static void micro_acc(const micro *m, ct_tensor *blk, bool cpu_side, double *sum, double *count) {
    ct_tensor w = m->weight;
    ct_xent_opts o = {.weight = w.data ? &w : NULL, .label_smoothing = 0.0, .ignore_index = -100};
    if (m->pointwise) {
        ct_op_pointwise_loss_acc(CT_LOSS_HUBER, &(ct_pointwise_opts){.delta = 0.7}, &m->pred, &m->ptarget, blk);
        if (cpu_side) {
            *sum += ct_op_pointwise_loss_forward(CT_LOSS_HUBER, &(ct_pointwise_opts){.delta = 0.7}, &m->pred,
                                                 &m->ptarget);
            *count += (double)ct_tensor_numel(&m->pred);
        }
        return;
    }
    ct_tensor d = m->dlogits;
    ct_op_fused_classifier_acc(&m->logits, &m->target, &o, 1.0, &d, blk);
    if (cpu_side) {
        double s, k;
        ct_tensor scratch = ct_ct_zeros(m->logits.dtype, m->logits.ndim, m->logits.shape);
        if (ct_op_fused_classifier(&m->logits, &m->target, &o, 1.0, &s, &k, &scratch) < 0) {
            *sum += s;
            *count += k;
        }
        ct_tensor_free(&scratch);
    }
}

typedef enum { GOOD, NAN_LOGIT, INF_GRAD, BAD_TARGET } plant;

/* One round on both backends; returns nothing, CHECKs everything. */
static void round_case(int round, plant what, bool adam, bool then_good) {
    const int64_t np = irand(1, 9000), rows = irand(2, 40), classes = irand(2, 30), micro_n = irand(1, 3);
    const bool pointwise = what == GOOD && irand(0, 2) == 0;
    char label[160];
    snprintf(label, sizeof label, "round %d (%s, %s, %lld parameters, %lld micro-batches%s)", round,
             what == GOOD ? "good" : what == NAN_LOGIT ? "nan logit" : what == INF_GRAD ? "inf gradient" : "bad target",
             adam ? "adamw" : "sgd", (long long)np, (long long)micro_n, pointwise ? ", huber" : "");
    int64_t slots = CT_STEP_SLOTS;
    ct_tensor cblk = ct_ct_zeros(CT_F64, 1, &slots), gblk = ct_ct_to_gpu(&cblk);
    double log_loss = urand(0, 3);
    ct_step_rule reset = {.phase = CT_STEP_RESET, .log_loss = log_loss};
    ct_op_step_rule(&cblk, &reset);
    ct_op_step_rule(&gblk, &reset);
    /* the micro-batches: the same inputs on both */
    double sum = 0, count = 0;
    for (int64_t k = 0; k < micro_n; k++) {
        micro c = {.pointwise = pointwise}, g = {.pointwise = pointwise};
        if (pointwise) {
            int64_t shape[2] = {rows, 3};
            c.pred = ct_ct_rand(&rng, CT_F32, 2, shape, -2, 2);
            c.ptarget = ct_ct_rand(&rng, CT_F32, 2, shape, -2, 2);
            g.pred = ct_ct_to_gpu(&c.pred);
            g.ptarget = ct_ct_to_gpu(&c.ptarget);
        } else {
            int64_t shape[2] = {rows, classes};
            c.logits = ct_ct_rand(&rng, CT_F32, 2, shape, -4, 4);
            c.target = ct_ct_rand(&rng, CT_I64, 1, &rows, 0, (double)classes);
            for (int64_t r = 0; r < rows; r++)
                if (irand(0, 4) == 0) ct_tensor_set(&c.target, r, -100);
            if (k == 0 && what == NAN_LOGIT) { /* in a row that counts: an ignored row's logits add nothing */
                int64_t at = irand(0, rows * classes - 1);
                ct_tensor_set(&c.logits, at, NAN);
                ct_tensor_set(&c.target, at / classes, (double)irand(0, classes - 1));
            }
            if (k == micro_n - 1 && what == BAD_TARGET) ct_tensor_set(&c.target, rows - 1, (double)classes + 2);
            if (irand(0, 1)) c.weight = ct_ct_rand(&rng, CT_F64, 1, &classes, 0.2, 2.0);
            c.dlogits = ct_ct_zeros(CT_F32, 2, shape);
            g.logits = ct_ct_to_gpu(&c.logits);
            g.target = ct_ct_to_gpu(&c.target);
            if (c.weight.data) g.weight = ct_ct_to_gpu(&c.weight);
            g.dlogits = ct_ct_to_gpu(&c.dlogits);
        }
        micro_acc(&c, &cblk, true, &sum, &count);
        micro_acc(&g, &gblk, false, NULL, NULL);
        ct_tensor ts[12] = {c.logits, c.target, c.weight, c.dlogits, c.pred, c.ptarget,
                            g.logits, g.target, g.weight, g.dlogits, g.pred, g.ptarget};
        for (int i = 0; i < 12; i++) ct_tensor_free(&ts[i]);
    }
    double v[CT_STEP_SLOTS];
    block_values(&cblk, v);
    if (what != BAD_TARGET) {
        CHECK(v[CT_STEP_LOSS_SUM] == sum || (isnan(sum) && isnan(v[CT_STEP_LOSS_SUM])),
              "%s: the block's loss sum %.17g, the ops' %.17g", label, v[CT_STEP_LOSS_SUM], sum);
        CHECK(v[CT_STEP_LOSS_COUNT] == count, "%s: count %g, the ops' %g", label, v[CT_STEP_LOSS_COUNT], count);
    } else {
        CHECK(v[CT_STEP_BAD_LABEL] == (double)rows, "%s: bad label slot %g, expected row %lld + 1", label,
              v[CT_STEP_BAD_LABEL], (long long)rows - 1);
    }
    same_blocks(label, &gblk, &cblk);

    /* gradients, scaled, normed, decided, clipped */
    ct_tensor cg = ct_ct_rand(&rng, CT_F32, 1, &np, -3, 3), cp = ct_ct_rand(&rng, CT_F32, 1, &np, -1, 1);
    if (what == INF_GRAD) ct_tensor_set(&cg, irand(0, np - 1), INFINITY);
    ct_tensor gg = ct_ct_to_gpu(&cg), gp = ct_ct_to_gpu(&cp), p0 = ct_ct_to_gpu(&cp);
    ct_step_rule prep = {.phase = CT_STEP_PREPARE};
    ct_op_step_rule(&cblk, &prep);
    ct_op_step_rule(&gblk, &prep);
    ct_op_scale_by(&cg, &cblk, CT_STEP_GRAD_SCALE);
    ct_op_scale_by(&gg, &gblk, CT_STEP_GRAD_SCALE);
    ct_op_l2_norm_into(&cg, &cblk, CT_STEP_NORM);
    ct_op_l2_norm_into(&gg, &gblk, CT_STEP_NORM);
    double norm = ct_op_l2_norm(&cg), max_norm = irand(0, 3) == 0 ? 0.0 : norm * urand(0.3, 1.7);
    ct_step_rule decide = {.phase = CT_STEP_DECIDE, .max_norm = max_norm, .step = round + 1, .nan_filter = true,
                           .steps_since_log = 3};
    ct_op_step_rule(&cblk, &decide);
    ct_op_step_rule(&gblk, &decide);
    block_values(&cblk, v);
    double want_scale = count > 0 ? 1.0 / count : 1.0, coef = max_norm / (norm + 1e-6);
    CHECK(v[CT_STEP_GRAD_SCALE] == want_scale && v[CT_STEP_NORM] == norm,
          "%s: scale %.17g (want %.17g), norm %.17g (want %.17g)", label, v[CT_STEP_GRAD_SCALE], want_scale,
          v[CT_STEP_NORM], norm);
    CHECK(v[CT_STEP_CLIP] == (max_norm > 0 && isfinite(norm) && coef < 1 ? coef : 1.0), "%s: clip %.17g", label,
          v[CT_STEP_CLIP]);
    bool bad = what != GOOD;
    int kind = what == NAN_LOGIT ? CT_STEP_BAD_LOSS : what == INF_GRAD ? CT_STEP_BAD_NORM : CT_STEP_BAD_LABEL_KIND;
    CHECK(v[CT_STEP_GATE] == (bad ? 0.0 : 1.0) && v[CT_STEP_BAD_STEP] == (bad ? round + 1 : 0) &&
              (!bad || v[CT_STEP_BAD_KIND] == kind),
          "%s: gate %g, bad step %g, kind %g", label, v[CT_STEP_GATE], v[CT_STEP_BAD_STEP], v[CT_STEP_BAD_KIND]);
    double mean = sum / count;
    double want_log = isfinite(mean) ? log_loss + mean : log_loss + log_loss / 3;
    CHECK(what == BAD_TARGET || v[CT_STEP_LOG_LOSS] == want_log, "%s: log loss %.17g, want %.17g", label,
          v[CT_STEP_LOG_LOSS], want_log);
    CHECK(v[CT_STEP_LOSS_SUM] == 0 && v[CT_STEP_LOSS_COUNT] == 0 && v[CT_STEP_BAD_LABEL] == 0,
          "%s: the step's sums were not reset", label);
    same_blocks(label, &gblk, &cblk);
    ct_op_scale_by(&cg, &cblk, CT_STEP_CLIP);
    ct_op_scale_by(&gg, &gblk, CT_STEP_CLIP);
    ct_ct_check_close("clipped gradients", &gg, &cg, 1e-6, 1e-30);

    /* the gated update: one state buffer (momentum) or two (Adam's moments) */
    ct_tensor cm = ct_ct_zeros(CT_F32, 1, &np), cv = ct_ct_zeros(CT_F32, 1, &np);
    ct_tensor gm = ct_ct_to_gpu(&cm), gv = ct_ct_to_gpu(&cv);
    const double *cgate = (const double *)cblk.data + CT_STEP_GATE, *ggate = (const double *)gblk.data + CT_STEP_GATE;
    if (adam) {
        ct_adam_args a = {.lr = 1e-2, .weight_decay = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                          .decoupled_decay = true, .step = 1, .clear_grad = true};
        a.gate = cgate;
        ct_op_adam_step(&cp, &cg, &cm, &cv, NULL, &a);
        a.gate = ggate;
        ct_op_adam_step(&gp, &gg, &gm, &gv, NULL, &a);
    } else {
        ct_sgd_args a = {.lr = 0.1, .weight_decay = 0.01, .momentum = 0.9, .first_step = true, .clear_grad = true};
        a.gate = cgate;
        ct_op_sgd_step(&cp, &cg, &cm, &a);
        a.gate = ggate;
        ct_op_sgd_step(&gp, &gg, &gm, &a);
    }
    /* as test_cuda_optim: a multiply-add fused on one side only is an ulp of the buffer's size */
    ct_ct_check_close("parameters after the gated update", &gp, &cp, 1e-5, ct_ct_rms(&cp) / 10);
    ct_tensor zeros = ct_ct_zeros(CT_F32, 1, &np);
    ct_ct_check_equal("gradients cleared", &gg, &zeros);
    ct_ct_check_equal("gradients cleared (cpu)", &cg, &zeros);
    if (bad) {
        ct_tensor back = ct_ct_to_cpu(&p0);
        ct_ct_check_equal("a closed gate changes no parameter", &gp, &back);
        ct_ct_check_equal("a closed gate changes no parameter (cpu)", &cp, &back);
        ct_tensor_free(&back);
    }
    if (bad && then_good) {
        /* a good step after: the verdict stays */
        ct_step_rule next = decide;
        next.step = round + 2;
        ct_op_step_rule(&cblk, &next);
        ct_op_step_rule(&gblk, &next);
        block_values(&cblk, v);
        CHECK(v[CT_STEP_GATE] == 0 && v[CT_STEP_BAD_STEP] == round + 1, "%s: the verdict did not stay", label);
        same_blocks(label, &gblk, &cblk);
    }
    ct_step_rule log_reset = {.phase = CT_STEP_LOG_RESET};
    ct_op_step_rule(&gblk, &log_reset);
    block_values(&gblk, v);
    CHECK(v[CT_STEP_LOG_LOSS] == 0, "%s: log loss %g after its reset", label, v[CT_STEP_LOG_LOSS]);
    ct_tensor ts[12] = {cblk, gblk, cg, cp, gg, gp, p0, cm, cv, gm, gv, zeros};
    for (int i = 0; i < 12; i++) ct_tensor_free(&ts[i]);
}

#endif

int main(void) {
    ct_cuda_test_begin("test_cuda_step_stats");
#ifdef CT_HAVE_CUDA
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    int round = 0;
    for (int i = 0; i < 12; i++, round++) round_case(round, GOOD, i % 2, false);
    const plant bad[] = {NAN_LOGIT, INF_GRAD, BAD_TARGET};
    for (int i = 0; i < 6; i++, round++) round_case(round, bad[i % 3], i % 2, i >= 3);
#endif
    return ct_test_finish();
}
