/* The GPT block and its causal multi-head self-attention (see gpt_impl.h), nanoGPT's Block and
 * CausalSelfAttention with their module names, so parameters read "h.0.attn.c_attn.weight".
 *
 * Attention, per sample of [T, C] with H heads of D = C / H:
 *   qkv = c_attn(x) [T, 3C]; q, k, v = its three [T, C] column blocks, split into heads [H, T, D];
 *   P = causal_softmax(q k^T / sqrt(D)) [H, T, T]; y = attn_dropout(P) v, heads merged back to
 *   [T, C]; out = resid_dropout(c_proj(y)).
 * Without attention dropout, on a backend that has it (heads of up to
 * CT_FUSED_ATTENTION_MAX_HEAD_DIM), one op does it all (ct_op_causal_attention_forward / _backward),
 * flash-style: heads read and written in place in qkv, y and d(qkv), no [T, T] matrix kept, only
 * each query row's log-sum-exp, from which the backward makes P again. Otherwise the heads are
 * copied apart and the scores go through one GEMM per (sample, head) on contiguous [T, D] blocks,
 * batched in one ct_op_gemm_batched; the causal softmax (core/ops/ops_attn.h) ignores the masked
 * scores and writes zeros there, so the GEMM's values above the diagonal never matter. The backward
 * is the exact chain rule of the same steps, with P (the softmax output) and the dropped P' kept
 * from the forward:
 *   dP' = dy v^T, dv = P'^T dy, dP = attn_dropout'(dP'), dS = softmax'(P, dP),
 *   dq = dS k / sqrt(D), dk = dS^T q / sqrt(D), and the heads merged into d(qkv).
 * Every buffer is reserved for the largest batch at the context length the model was built for;
 * d(qkv) and the fused backward's scratch are backward buffers (ct_reserve_backward), which the
 * blocks of a GPT share; the fused forward's scratch is one slot per thread, whatever the batch. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops/backend.h"
#include "core/ops/ops.h"
#include "core/ops/ops_attn.h"
#include "core/util.h"
#include "model/gpt_impl.h"

ct_module *ct_gpt_child(const ct_module *m, const char *local_name) {
    for (int i = 0; i < m->n_children; i++)
        if (strcmp(m->children[i]->local_name, local_name) == 0) return m->children[i];
    ct_abort_at(__FILE__, __LINE__, "gpt: module '%s' has no child '%s'", m->name, local_name);
}

/* Containers are not named by the module wrappers (their children are); errors they make name
 * themselves. */
static const char *display_name(const ct_module *m) { return m->name[0] ? m->name : "model"; }

ct_status ct_gpt_adopt(ct_module *parent, ct_module *child, const char *name, ct_module **slot) {
    ct_status s = ct_module_add_child(parent, child, name);
    if (s != CT_OK) {
        ct_module_destroy(child);
        return s;
    }
    if (slot) *slot = child;
    return CT_OK;
}

/* --- causal self-attention ------------------------------------------------------------------------ */

typedef struct attention {
    ct_module base;
    int64_t n_embd, n_head, head_dim, T;
    double dropout;
    bool fused; /* ct_op_causal_attention_* (no dropout, and the device's backend has them) */
    ct_module *c_attn, *c_proj, *attn_dropout, *resid_dropout;
    /* [max_batch, H, T, D]: the heads, their outputs, and the gradients of all four (unfused) */
    ct_tensor q, k, v, yh, dq, dk, dv, dyh;
    ct_tensor att, datt; /* [max_batch, H, T, T]: P (the softmax) and the scores' gradients (unfused) */
    ct_tensor lse;       /* [max_batch, H, T]: each query row's log-sum-exp (fused) */
    ct_tensor ym;        /* [max_batch, T, C]: heads merged, c_proj's input */
    ct_tensor dqkv;      /* [max_batch, T, 3C] */
    ct_tensor pd;        /* P after attn_dropout in the last forward (a view of P or of the dropout's output) */
    ct_tensor qkv_out;   /* c_attn's output in the last forward (fused: the backward reads the heads there) */
    ct_tensor ws, bws;   /* the fused forward's and backward's scratch */
} attention;

static attention *attn_self(ct_module *m) { return ct_container_of(m, attention, base); }

static ct_status attn_infer(ct_module *m, const ct_shape *in, ct_shape *out) {
    attention *a = attn_self(m);
    char s[96];
    if (in->ndim != 2 || in->dims[1] != a->n_embd)
        return ct_error(CT_ERR_SHAPE, "causal_self_attention '%s': input %s is not [N, T, n_embd=%lld]",
                        display_name(m), ct_sample_shape_str(in, s, sizeof s), (long long)a->n_embd);
    a->T = in->dims[0];
    ct_shape qkv, proj, scores = {.ndim = 3, .dims = {a->n_head, a->T, a->T}};
    /* Every child passes a gradient down: the projections' weights need it even when x does not. */
    a->c_attn->need_input_grad = m->need_input_grad;
    a->attn_dropout->need_input_grad = a->c_proj->need_input_grad = a->resid_dropout->need_input_grad = true;
    CT_TRY(ct_module_infer(a->c_attn, in, &qkv));
    CT_TRY(ct_module_infer(a->attn_dropout, &scores, &scores));
    CT_TRY(ct_module_infer(a->c_proj, in, &proj));
    CT_TRY(ct_module_infer(a->resid_dropout, &proj, out));
    return CT_OK;
}

static ct_status attn_reserve(ct_module *m, const ct_reserve_ctx *ctx) {
    attention *a = attn_self(m);
    const ct_shape heads = {.ndim = 3, .dims = {a->n_head, a->T, a->head_dim}};
    const ct_shape scores = {.ndim = 3, .dims = {a->n_head, a->T, a->T}};
    const ct_shape merged = {.ndim = 2, .dims = {a->T, a->n_embd}};
    const ct_shape fused = {.ndim = 2, .dims = {a->T, 3 * a->n_embd}};
    a->fused = a->dropout == 0.0 && a->head_dim <= CT_FUSED_ATTENTION_MAX_HEAD_DIM &&
               CT_BACKEND_HAS(m->device, causal_attention_forward) &&
               CT_BACKEND_HAS(m->device, causal_attention_backward);
    CT_TRY(ct_reserve_activation(ctx, m->dtype, m->device, &merged, &a->ym));
    CT_TRY(ct_reserve_backward(ctx, m->dtype, m->device, &fused, &a->dqkv));
    if (a->fused) {
        /* the scratch is a slot per thread whatever the batch: reserved as a batch of one */
        const ct_shape rows = {.ndim = 2, .dims = {a->n_head, a->T}};
        const ct_shape slots = {.ndim = 1, .dims = {ct_causal_attention_workspace_numel(a->T)}};
        ct_reserve_ctx one = *ctx;
        one.max_batch = 1;
        CT_TRY(ct_reserve_activation(ctx, m->dtype, m->device, &rows, &a->lse));
        CT_TRY(ct_reserve_activation(&one, m->dtype, m->device, &slots, &a->ws));
        return ct_reserve_backward(&one, m->dtype, m->device, &slots, &a->bws);
    }
    CT_TRY(ct_reserve_activation(ctx, m->dtype, m->device, &scores, &a->att));
    ct_tensor *per_head[] = {&a->q, &a->k, &a->v, &a->yh}, *grad_heads[] = {&a->dq, &a->dk, &a->dv, &a->dyh};
    for (size_t i = 0; i < CT_ARRAY_LEN(per_head); i++) {
        CT_TRY(ct_reserve_activation(ctx, m->dtype, m->device, &heads, per_head[i]));
        CT_TRY(ct_reserve_backward(ctx, m->dtype, m->device, &heads, grad_heads[i]));
    }
    return ct_reserve_backward(ctx, m->dtype, m->device, &scores, &a->datt);
}

static ct_status attn_forward(ct_module *m, const ct_tensor *x, ct_tensor *y) {
    attention *a = attn_self(m);
    const int64_t B = x->shape[0], D = a->head_dim, C = a->n_embd;
    const double scale = 1.0 / sqrt((double)D);
    ct_tensor qkv, proj;
    CT_TRY(ct_module_forward(a->c_attn, x, &qkv));
    ct_tensor ym = ct_tensor_rows(&a->ym, 0, B);
    if (a->fused) {
        ct_tensor lse = ct_tensor_rows(&a->lse, 0, B);
        ct_op_causal_attention_forward(&qkv, a->n_head, &lse, &ym, &a->ws);
        a->qkv_out = qkv;
        CT_TRY(ct_module_forward(a->c_proj, &ym, &proj));
        return ct_module_forward(a->resid_dropout, &proj, y);
    }
    ct_tensor q = ct_tensor_rows(&a->q, 0, B), k = ct_tensor_rows(&a->k, 0, B), v = ct_tensor_rows(&a->v, 0, B);
    ct_op_heads_split(&qkv, 0, &q);
    ct_op_heads_split(&qkv, C, &k);
    ct_op_heads_split(&qkv, 2 * C, &v);
    ct_tensor att = ct_tensor_rows(&a->att, 0, B);
    ct_op_gemm_batched(false, true, scale, &q, &k, 0.0, &att);
    ct_op_causal_softmax_forward(&att, &att);
    CT_TRY(ct_module_forward(a->attn_dropout, &att, &a->pd));
    ct_tensor yh = ct_tensor_rows(&a->yh, 0, B);
    ct_tensor pd = ct_tensor_rows(&a->pd, 0, B);
    ct_op_gemm_batched(false, false, 1.0, &pd, &v, 0.0, &yh);
    ct_op_heads_merge(&yh, 0, &ym);
    CT_TRY(ct_module_forward(a->c_proj, &ym, &proj));
    return ct_module_forward(a->resid_dropout, &proj, y);
}

static ct_status attn_backward(ct_module *m, const ct_tensor *dy, ct_tensor *dx) {
    attention *a = attn_self(m);
    const int64_t B = dy->shape[0], D = a->head_dim, C = a->n_embd;
    const double scale = 1.0 / sqrt((double)D);
    ct_tensor dproj, dym, dp;
    CT_TRY(ct_module_backward(a->resid_dropout, dy, &dproj));
    CT_TRY(ct_module_backward(a->c_proj, &dproj, &dym));
    ct_tensor dqkv = ct_tensor_rows(&a->dqkv, 0, B);
    if (a->fused) {
        ct_tensor lse = ct_tensor_rows(&a->lse, 0, B), ym = ct_tensor_rows(&a->ym, 0, B);
        ct_op_causal_attention_backward(&a->qkv_out, a->n_head, &ym, &lse, &dym, &dqkv, &a->bws);
        return ct_module_backward(a->c_attn, &dqkv, dx);
    }
    ct_tensor dyh = ct_tensor_rows(&a->dyh, 0, B), v = ct_tensor_rows(&a->v, 0, B);
    ct_tensor datt = ct_tensor_rows(&a->datt, 0, B), dv = ct_tensor_rows(&a->dv, 0, B);
    ct_op_heads_split(&dym, 0, &dyh);
    ct_tensor pd = ct_tensor_rows(&a->pd, 0, B);
    ct_op_gemm_batched(false, true, 1.0, &dyh, &v, 0.0, &datt);
    ct_op_gemm_batched(true, false, 1.0, &pd, &dyh, 0.0, &dv);
    CT_TRY(ct_module_backward(a->attn_dropout, &datt, &dp));
    /* dS overwrites datt (dp is datt itself when the dropout was the identity: allowed) */
    ct_tensor att = ct_tensor_rows(&a->att, 0, B);
    ct_op_causal_softmax_backward(&att, &dp, &datt);
    ct_tensor q = ct_tensor_rows(&a->q, 0, B), k = ct_tensor_rows(&a->k, 0, B);
    ct_tensor dq = ct_tensor_rows(&a->dq, 0, B), dk = ct_tensor_rows(&a->dk, 0, B);
    ct_op_gemm_batched(false, false, scale, &datt, &k, 0.0, &dq);
    ct_op_gemm_batched(true, false, scale, &datt, &q, 0.0, &dk);
    ct_op_heads_merge(&dq, 0, &dqkv);
    ct_op_heads_merge(&dk, C, &dqkv);
    ct_op_heads_merge(&dv, 2 * C, &dqkv);
    return ct_module_backward(a->c_attn, &dqkv, dx);
}

/* Its own products, Q K^T and P V: T x T x n_embd multiply-adds each, counted whole though the mask
 * leaves half of them out, as nanoGPT and llm.c count them (the projections are its children's). */
static double attn_forward_flops(const ct_module *m) {
    const attention *a = ct_container_of(m, attention, base);
    return 2.0 * 2.0 * (double)a->T * (double)a->T * (double)a->n_embd;
}

static const ct_module_ops attention_ops = {
    .size = sizeof(ct_module_ops),
    .type = "causal_self_attention",
    .infer = attn_infer,
    .reserve = attn_reserve,
    .forward = attn_forward,
    .backward = attn_backward,
    .forward_flops = attn_forward_flops,
};

static ct_status attention_create(const ct_gpt_config *cfg, ct_module **out) {
    attention *a = calloc(1, sizeof *a);
    if (!a) return ct_error(CT_ERR_NOMEM, "causal_self_attention: out of memory");
    ct_module_base_init(&a->base, &attention_ops);
    a->n_embd = cfg->n_embd;
    a->n_head = cfg->n_head;
    a->head_dim = cfg->n_embd / cfg->n_head;
    a->dropout = cfg->dropout;
    ct_module *c = NULL;
    ct_status s = ct_linear_create(cfg->n_embd, 3 * cfg->n_embd, cfg->bias, &c);
    if (s == CT_OK) s = ct_gpt_adopt(&a->base, c, "c_attn", &a->c_attn);
    if (s == CT_OK) s = ct_linear_create(cfg->n_embd, cfg->n_embd, cfg->bias, &c);
    if (s == CT_OK) s = ct_gpt_adopt(&a->base, c, "c_proj", &a->c_proj);
    if (s == CT_OK) s = ct_dropout_create(cfg->dropout, &c);
    if (s == CT_OK) s = ct_gpt_adopt(&a->base, c, "attn_dropout", &a->attn_dropout);
    if (s == CT_OK) s = ct_dropout_create(cfg->dropout, &c);
    if (s == CT_OK) s = ct_gpt_adopt(&a->base, c, "resid_dropout", &a->resid_dropout);
    if (s != CT_OK) {
        ct_module_destroy(&a->base);
        return s;
    }
    *out = &a->base;
    return CT_OK;
}

/* --- block ---------------------------------------------------------------------------------------- */

typedef struct block {
    ct_module base;
    ct_module *ln_1, *attn, *ln_2, *mlp;
    ct_tensor r1, out;  /* x + attn(ln_1(x)), and the block's output */
    ct_tensor d1, dinput;
} block;

static block *block_self(ct_module *m) { return ct_container_of(m, block, base); }

static ct_status block_infer(ct_module *m, const ct_shape *in, ct_shape *out) {
    block *b = block_self(m);
    ct_shape h, a;
    b->ln_1->need_input_grad = m->need_input_grad;
    b->attn->need_input_grad = b->ln_2->need_input_grad = b->mlp->need_input_grad = true;
    CT_TRY(ct_module_infer(b->ln_1, in, &h));
    CT_TRY(ct_module_infer(b->attn, &h, &a));
    CT_TRY(ct_module_infer(b->ln_2, &a, &h));
    CT_TRY(ct_module_infer(b->mlp, &h, &a));
    *out = *in;
    return CT_OK;
}

static ct_status block_reserve(ct_module *m, const ct_reserve_ctx *ctx) {
    block *b = block_self(m);
    /* r1 is read again only through ln_2's saved input, and d1 only inside this backward */
    CT_TRY(ct_reserve_scoped_activation(ctx, m->dtype, m->device, &m->in_shape, &b->r1));
    CT_TRY(ct_reserve_activation(ctx, m->dtype, m->device, &m->in_shape, &b->out));
    CT_TRY(ct_reserve_scoped_backward(ctx, m->dtype, m->device, &m->in_shape, &b->d1));
    /* the block's own input gradient outlives its backward: the block before reads it */
    if (m->need_input_grad) CT_TRY(ct_reserve_activation(ctx, m->dtype, m->device, &m->in_shape, &b->dinput));
    return CT_OK;
}

static ct_status block_forward(ct_module *m, const ct_tensor *x, ct_tensor *y) {
    block *b = block_self(m);
    const int64_t B = x->shape[0];
    ct_tensor h, a;
    CT_TRY(ct_module_forward(b->ln_1, x, &h));
    CT_TRY(ct_module_forward(b->attn, &h, &a));
    ct_tensor r1 = ct_tensor_rows(&b->r1, 0, B);
    CT_TRY(ct_module_forward_residual(b->ln_2, x, &a, &r1, &h)); /* r1 = x + a, h = ln_2(r1) */
    CT_TRY(ct_module_forward(b->mlp, &h, &a));
    *y = ct_tensor_rows(&b->out, 0, B);
    ct_op_add(&r1, &a, y);
    return CT_OK;
}

static ct_status block_backward(ct_module *m, const ct_tensor *dy, ct_tensor *dx) {
    block *b = block_self(m);
    const int64_t B = dy->shape[0];
    ct_tensor g;
    CT_TRY(ct_module_backward(b->mlp, dy, &g));
    ct_tensor d1 = ct_tensor_rows(&b->d1, 0, B);
    CT_TRY(ct_module_backward_residual(b->ln_2, &g, dy, &d1)); /* d1 = dy + ln_2's input gradient */
    CT_TRY(ct_module_backward(b->attn, &d1, &g));
    if (!dx) return ct_module_backward(b->ln_1, &g, NULL);
    *dx = ct_tensor_rows(&b->dinput, 0, B);
    return ct_module_backward_residual(b->ln_1, &g, &d1, dx); /* dx = d1 + ln_1's input gradient */
}

static const ct_module_ops block_ops = {
    .size = sizeof(ct_module_ops),
    .type = "gpt_block",
    .infer = block_infer,
    .reserve = block_reserve,
    .forward = block_forward,
    .backward = block_backward,
};

/* nanoGPT's MLP: c_fc (C -> 4C), GELU (tanh approximation, GPT-2's "gelu_new"), c_proj, dropout. */
static ct_status mlp_create(const ct_gpt_config *cfg, ct_module **out) {
    ct_module *seq, *c = NULL;
    CT_TRY(ct_sequential_create(&seq));
    ct_status s = ct_linear_create(cfg->n_embd, 4 * cfg->n_embd, cfg->bias, &c);
    if (s == CT_OK) s = ct_gpt_adopt(seq, c, "c_fc", NULL);
    if (s == CT_OK) s = ct_activation_create(CT_ACT_GELU_TANH, &c);
    if (s == CT_OK) s = ct_gpt_adopt(seq, c, "gelu", NULL);
    if (s == CT_OK) s = ct_linear_create(4 * cfg->n_embd, cfg->n_embd, cfg->bias, &c);
    if (s == CT_OK) s = ct_gpt_adopt(seq, c, "c_proj", NULL);
    if (s == CT_OK) s = ct_dropout_create(cfg->dropout, &c);
    if (s == CT_OK) s = ct_gpt_adopt(seq, c, "dropout", NULL);
    if (s != CT_OK) {
        ct_module_destroy(seq);
        return s;
    }
    *out = seq;
    return CT_OK;
}

ct_status ct_gpt_block_create(const ct_gpt_config *cfg, ct_module **out) {
    block *b = calloc(1, sizeof *b);
    if (!b) return ct_error(CT_ERR_NOMEM, "gpt_block: out of memory");
    ct_module_base_init(&b->base, &block_ops);
    b->base.shares_backward = true; /* its children's gradients are dead once its own dx is made */
    b->base.recomputable = true;    /* deterministic (dropout is keyed by the step), output its own */
    const double eps = cfg->layer_norm_epsilon;
    ct_module *c = NULL;
    ct_status s = ct_layernorm_create(cfg->n_embd, eps, true, cfg->bias, &c);
    if (s == CT_OK) s = ct_gpt_adopt(&b->base, c, "ln_1", &b->ln_1);
    if (s == CT_OK) s = attention_create(cfg, &c);
    if (s == CT_OK) s = ct_gpt_adopt(&b->base, c, "attn", &b->attn);
    if (s == CT_OK) s = ct_layernorm_create(cfg->n_embd, eps, true, cfg->bias, &c);
    if (s == CT_OK) s = ct_gpt_adopt(&b->base, c, "ln_2", &b->ln_2);
    if (s == CT_OK) s = mlp_create(cfg, &c);
    if (s == CT_OK) s = ct_gpt_adopt(&b->base, c, "mlp", &b->mlp);
    if (s != CT_OK) {
        ct_module_destroy(&b->base);
        return s;
    }
    *out = &b->base;
    return CT_OK;
}
