/* GPT: a GPT-2-style decoder-only language model, nanoGPT's GPT (github.com/karpathy/nanoGPT,
 * model.py) with its module tree and therefore its parameter names:
 *
 *   transformer.wte.weight [vocab, C]      token embedding, also the LM head's weight (tied)
 *   transformer.wpe.weight [n_positions, C] learned position embedding
 *   transformer.h.<i>.ln_1.{weight,bias}   transformer.h.<i>.attn.c_attn.{weight [3C, C], bias [3C]}
 *   transformer.h.<i>.attn.c_proj.{weight [C, C], bias}   transformer.h.<i>.ln_2.{weight,bias}
 *   transformer.h.<i>.mlp.c_fc.{weight [4C, C], bias}     transformer.h.<i>.mlp.c_proj.{weight [C, 4C], bias}
 *   transformer.ln_f.{weight,bias}
 *
 * Linear weights are [out, in] as nn.Linear (Hugging Face's GPT-2 checkpoints store Conv1D weights
 * [in, out]: transpose those when loading them). There is no lm_head.weight: the head multiplies by
 * wte's weight and adds its gradient into wte's (nanoGPT's state_dict lists lm_head.weight as the
 * same tensor; skip it when loading one).
 *
 * forward(ids [B, T]) = lm_head(ln_f(h_{L-1}(... h_0(drop(wte(ids) + wpe(0..T-1)))))) [B, T, Vp],
 * each block pre-LayerNorm (model/gpt_block.c). T is the model's input length, fixed when it is
 * built, from 1 to n_positions. Dropout layers (transformer.drop, attn.attn_dropout,
 * attn.resid_dropout, mlp.dropout) are ordinary Dropout modules, keyed by their names.
 *
 * Vp is padded_vocab_size (llm.c's), vocab_size when not set: wte gets Vp rows so that the head's
 * GEMM has a round width (50304 = 393 * 128 for GPT-2's 50257). The padding is never a token: ids
 * must be below vocab_size (checked before the embedding), the padding rows of wte start at 0, and
 * the head adds a mask of 0 for the real columns and -inf for the padding ones to its logits, so
 * every softmax downstream (the loss, the metrics, generation) gives the padding probability 0, its
 * logits' gradient is 0 and so is the padding rows' gradient: they stay 0 under weight decay too.
 *
 * Initialisation is GPT-2's, as nanoGPT applies it: every Linear and Embedding weight N(0, 0.02),
 * the residual projections (attn.c_proj and mlp.c_proj weights) N(0, 0.02 / sqrt(2 * n_layer)),
 * biases 0, LayerNorm weights 1 and biases 0. The children's own PyTorch-default inits run first
 * (ct_module_init visits a module before its children); the head, the last module visited, then
 * initialises the whole model.
 *
 * Gradients and data parallelism (model.h, ct_model_set_grads_ready): parameters are laid out in
 * forward order (wte first) and backward runs in reverse, ending with wpe and then wte, so only
 * wte's ancestors (transformer, the model) report after it, and the head's contribution to wte's
 * gradient is added before it, at the start of backward; the head itself has no parameters and
 * reports nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/ops/ops.h"
#include "core/util.h"
#include "model/gpt_impl.h"
#include "model/params.h"

static const char *display_name(const ct_module *m) { return m->name[0] ? m->name : "model"; }

/* The rows of wte and the columns of the logits: padded_vocab_size, or vocab_size when it is 0. */
static int64_t padded_vocab(const ct_gpt_config *c) {
    return c->padded_vocab_size > 0 ? c->padded_vocab_size : c->vocab_size;
}

/* --- transformer: embeddings, blocks, final LayerNorm --------------------------------------------- */

typedef struct transformer {
    ct_module base;
    int64_t T;
    ct_module *wte, *wpe, *drop, *h, *ln_f;
    ct_tensor pos; /* I64 [max_batch, T]: 0 .. T-1 in every row, wpe's input */
    ct_tensor emb; /* wte(ids) + wpe(pos) */
} transformer;

static transformer *tr_self(ct_module *m) { return ct_container_of(m, transformer, base); }

static ct_status tr_infer(ct_module *m, const ct_shape *in, ct_shape *out) {
    transformer *t = tr_self(m);
    m->in_dtype = CT_I64;
    t->T = in->dims[0];
    ct_shape e, p;
    t->wte->need_input_grad = t->wpe->need_input_grad = false; /* token ids have no gradient */
    t->drop->need_input_grad = t->h->need_input_grad = t->ln_f->need_input_grad = true;
    CT_TRY(ct_module_infer(t->wte, in, &e));
    CT_TRY(ct_module_infer(t->wpe, in, &p));
    CT_TRY(ct_module_infer(t->drop, &e, &e));
    CT_TRY(ct_module_infer(t->h, &e, &e));
    return ct_module_infer(t->ln_f, &e, out);
}

static ct_status tr_reserve(ct_module *m, const ct_reserve_ctx *ctx) {
    transformer *t = tr_self(m);
    CT_TRY(ct_reserve_activation(ctx, m->dtype, m->device, &t->ln_f->in_shape, &t->emb));
    CT_TRY(ct_reserve_activation(ctx, CT_I64, m->device, &m->in_shape, &t->pos));
    /* The positions never change: written once here, through the host for any device. */
    ct_tensor host;
    CT_TRY(ct_tensor_alloc(&host, CT_I64, CT_CPU, t->pos.ndim, t->pos.shape));
    int64_t *p = host.data;
    for (int64_t i = 0; i < ct_tensor_numel(&host); i++) p[i] = i % t->T;
    ct_status s = ct_tensor_copy_to(&t->pos, &host);
    ct_tensor_free(&host);
    return s;
}

static ct_status tr_forward(ct_module *m, const ct_tensor *x, ct_tensor *y) {
    transformer *t = tr_self(m);
    const int64_t B = x->shape[0];
    ct_tensor te, pe, h;
    CT_TRY(ct_module_forward(t->wte, x, &te));
    ct_tensor pos = ct_tensor_rows(&t->pos, 0, B);
    CT_TRY(ct_module_forward(t->wpe, &pos, &pe));
    ct_tensor emb = ct_tensor_rows(&t->emb, 0, B);
    ct_op_add(&te, &pe, &emb);
    CT_TRY(ct_module_forward(t->drop, &emb, &h));
    CT_TRY(ct_module_forward(t->h, &h, &h));
    return ct_module_forward(t->ln_f, &h, y);
}

static ct_status tr_backward(ct_module *m, const ct_tensor *dy, ct_tensor *dx) {
    transformer *t = tr_self(m);
    if (dx) return ct_error(CT_ERR_STATE, "gpt_transformer '%s': token ids have no gradient", display_name(m));
    ct_tensor g;
    CT_TRY(ct_module_backward(t->ln_f, dy, &g));
    CT_TRY(ct_module_backward(t->h, &g, &g));
    CT_TRY(ct_module_backward(t->drop, &g, &g));
    /* wpe before wte: wte's parameters come first in the flat buffer, so it must report last. */
    CT_TRY(ct_module_backward(t->wpe, &g, NULL));
    return ct_module_backward(t->wte, &g, NULL);
}

static const ct_module_ops transformer_ops = {
    .size = sizeof(ct_module_ops),
    .type = "gpt_transformer",
    .infer = tr_infer,
    .reserve = tr_reserve,
    .forward = tr_forward,
    .backward = tr_backward,
};

static ct_status transformer_create(const ct_gpt_config *cfg, ct_module **out) {
    transformer *t = calloc(1, sizeof *t);
    if (!t) return ct_error(CT_ERR_NOMEM, "gpt: out of memory");
    ct_module_base_init(&t->base, &transformer_ops);
    t->base.in_dtype = CT_I64;
    ct_module *c = NULL;
    ct_status s = ct_embedding_create(padded_vocab(cfg), cfg->n_embd, -1, &c);
    if (s == CT_OK) s = ct_gpt_adopt(&t->base, c, "wte", &t->wte);
    if (s == CT_OK) s = ct_embedding_create(cfg->n_positions, cfg->n_embd, -1, &c);
    if (s == CT_OK) ct_embedding_trust_ids(c); /* its ids are the positions below, made here */
    if (s == CT_OK) s = ct_gpt_adopt(&t->base, c, "wpe", &t->wpe);
    if (s == CT_OK) s = ct_dropout_create(cfg->dropout, &c);
    if (s == CT_OK) s = ct_gpt_adopt(&t->base, c, "drop", &t->drop);
    /* nanoGPT's ModuleList: blocks named 0 .. n_layer-1, applied in order. */
    if (s == CT_OK) s = ct_sequential_create(&c);
    if (s == CT_OK) s = ct_gpt_adopt(&t->base, c, "h", &t->h);
    for (int64_t i = 0; s == CT_OK && i < cfg->n_layer; i++) {
        s = ct_gpt_block_create(cfg, &c);
        if (s == CT_OK) s = ct_gpt_adopt(t->h, c, NULL, NULL);
    }
    if (s == CT_OK) s = ct_layernorm_create(cfg->n_embd, cfg->layer_norm_epsilon, true, cfg->bias, &c);
    if (s == CT_OK) s = ct_gpt_adopt(&t->base, c, "ln_f", &t->ln_f);
    if (s != CT_OK) {
        ct_module_destroy(&t->base);
        return s;
    }
    *out = &t->base;
    return CT_OK;
}

/* --- the model and its tied head ----------------------------------------------------------------- */

typedef struct gpt {
    ct_module base;
    ct_gpt_config cfg;
    ct_module *transformer, *lm_head;
    ct_param_store *ps; /* the store of the build in progress, for the head's lookups and the init */
} gpt;

static gpt *gpt_self(ct_module *m) { return ct_container_of(m, gpt, base); }

typedef struct lm_head {
    ct_module base;
    gpt *model;
    int64_t vocab, n_embd; /* vocab: the padded width of the logits */
    int64_t real_vocab;    /* columns from here on are padding */
    ct_tensor *weight, *dweight; /* transformer.wte's, found in the store */
    ct_tensor out, dinput;
    ct_tensor mask; /* [vocab]: 0 for real tokens, -inf for the padding (allocated only with padding) */
    ct_tensor x;
} lm_head;

static lm_head *head_self(ct_module *m) { return ct_container_of(m, lm_head, base); }

static ct_status head_infer(ct_module *m, const ct_shape *in, ct_shape *out) {
    lm_head *h = head_self(m);
    *out = *in;
    out->dims[out->ndim - 1] = h->vocab;
    return CT_OK;
}

/* No parameters of its own: it borrows wte's weight, declared (by the transformer, visited first)
 * before this runs, and bound to its memory when the store is finalized. */
static ct_status head_declare(ct_module *m, ct_param_store *ps) {
    lm_head *h = head_self(m);
    char name[sizeof m->name + 16];
    snprintf(name, sizeof name, "%s.weight", ct_gpt_child(h->model->transformer, "wte")->name);
    const ct_param *p = ct_params_find(ps, name);
    if (!p) return ct_error(CT_ERR_STATE, "the tied head finds no parameter '%s'", name);
    h->weight = p->value;
    h->dweight = p->grad;
    return CT_OK;
}

static ct_status head_reserve(ct_module *m, const ct_reserve_ctx *ctx) {
    lm_head *h = head_self(m);
    CT_TRY(ct_reserve_activation(ctx, m->dtype, m->device, &m->out_shape, &h->out));
    if (m->need_input_grad) CT_TRY(ct_reserve_backward(ctx, m->dtype, m->device, &m->in_shape, &h->dinput));
    if (h->vocab == h->real_vocab) return CT_OK;
    void *mem;
    CT_TRY(ct_arena_alloc(ctx->arena, (size_t)h->vocab * ct_dtype_size(m->dtype), &mem));
    h->mask = ct_tensor_view(mem, m->dtype, m->device, 1, &h->vocab);
    /* Written once, through the host for any device, as the transformer's positions. */
    ct_tensor host;
    CT_TRY(ct_tensor_alloc(&host, m->dtype, CT_CPU, 1, h->mask.shape));
    for (int64_t j = 0; j < h->vocab; j++) ct_tensor_set(&host, j, j < h->real_vocab ? 0.0 : -INFINITY);
    ct_status s = ct_tensor_copy_to(&h->mask, &host);
    ct_tensor_free(&host);
    return s;
}

static ct_tensor as_matrix(const ct_tensor *t, int64_t cols) {
    int64_t shape[2] = {ct_tensor_numel(t) / cols, cols};
    return ct_tensor_view(t->data, t->dtype, t->device, 2, shape);
}

static ct_status head_forward(ct_module *m, const ct_tensor *x, ct_tensor *y) {
    lm_head *h = head_self(m);
    h->x = *x;
    *y = ct_tensor_rows(&h->out, 0, x->shape[0]);
    ct_tensor xm = as_matrix(x, h->n_embd), ym = as_matrix(y, h->vocab);
    /* logits = x wte^T, plus the mask as a bias (the padding's logits become -inf), which the
     * backends add while the GEMM's rows are in cache instead of in a pass of its own over them */
    ct_op_linear_forward(&xm, h->weight, h->mask.data ? &h->mask : NULL, CT_ACT_NONE, NULL, &ym);
    return CT_OK;
}

static ct_status head_backward(ct_module *m, const ct_tensor *dy, ct_tensor *dx) {
    lm_head *h = head_self(m);
    ct_tensor dym = as_matrix(dy, h->vocab), xm = as_matrix(&h->x, h->n_embd);
    ct_tensor dxm;
    if (dx) {
        CT_ASSERT(m->need_input_grad);
        *dx = ct_tensor_rows(&h->dinput, 0, dy->shape[0]);
        dxm = as_matrix(dx, h->n_embd);
    }
    /* wte's gradient += dy^T x; dx = dy wte */
    ct_op_linear_backward(&dym, &xm, h->weight, h->dweight, NULL, dx ? &dxm : NULL);
    return CT_OK;
}

/* Fills the parameters module m declared: biases 0; weights N(0, std), or 1 when std is 0 (norms). */
static void init_module(const ct_param_store *ps, const ct_module *m, double std, ct_rng *rng) {
    for (int i = m->param_first; i < m->param_end; i++) {
        const ct_param *p = &ps->items[i];
        size_t len = strlen(p->name);
        bool bias = len >= 5 && strcmp(p->name + len - 5, ".bias") == 0;
        for (int64_t j = 0; j < p->numel; j++)
            ct_tensor_set(p->value, j, bias ? 0.0 : std > 0 ? std * ct_rng_normal(rng) : 1.0);
    }
}

/* GPT-2's initialisation of the whole model (see the top of the file). */
static void head_init(ct_module *m, ct_rng *rng) {
    gpt *g = head_self(m)->model;
    const ct_param_store *ps = g->ps;
    const double std = 0.02, proj_std = 0.02 / sqrt(2.0 * (double)g->cfg.n_layer);
    ct_module *t = g->transformer, *h = ct_gpt_child(t, "h");
    ct_module *wte = ct_gpt_child(t, "wte");
    init_module(ps, wte, std, rng);
    /* The padding rows start at 0, as llm.c's: nothing but weight decay ever touches them. */
    ct_tensor *w = ps->items[wte->param_first].value;
    for (int64_t j = g->cfg.vocab_size * g->cfg.n_embd; j < ct_tensor_numel(w); j++) ct_tensor_set(w, j, 0.0);
    init_module(ps, ct_gpt_child(t, "wpe"), std, rng);
    for (int i = 0; i < h->n_children; i++) {
        ct_module *b = h->children[i], *attn = ct_gpt_child(b, "attn"), *mlp = ct_gpt_child(b, "mlp");
        init_module(ps, ct_gpt_child(b, "ln_1"), 0.0, rng);
        init_module(ps, ct_gpt_child(attn, "c_attn"), std, rng);
        init_module(ps, ct_gpt_child(attn, "c_proj"), proj_std, rng);
        init_module(ps, ct_gpt_child(b, "ln_2"), 0.0, rng);
        init_module(ps, ct_gpt_child(mlp, "c_fc"), std, rng);
        init_module(ps, ct_gpt_child(mlp, "c_proj"), proj_std, rng);
    }
    init_module(ps, ct_gpt_child(t, "ln_f"), 0.0, rng);
}

/* The logits of every position: x wte^T over the padded vocabulary, which the GEMM computes. */
static double head_forward_flops(const ct_module *m) {
    const lm_head *h = ct_container_of(m, lm_head, base);
    return 2.0 * (double)ct_shape_numel(&m->in_shape) * (double)h->vocab;
}

static const ct_module_ops head_ops = {
    .size = sizeof(ct_module_ops),
    .type = "tied_lm_head",
    .infer = head_infer,
    .declare = head_declare,
    .init = head_init,
    .reserve = head_reserve,
    .forward = head_forward,
    .backward = head_backward,
    .forward_flops = head_forward_flops,
};

static ct_status gpt_infer(ct_module *m, const ct_shape *in, ct_shape *out) {
    gpt *g = gpt_self(m);
    m->in_dtype = CT_I64;
    char s[96];
    if (in->ndim != 1)
        return ct_error(CT_ERR_SHAPE, "gpt '%s': input %s is not a sequence of token ids [N, T]", display_name(m),
                        ct_sample_shape_str(in, s, sizeof s));
    if (in->dims[0] > g->cfg.n_positions)
        return ct_error(CT_ERR_SHAPE, "gpt '%s': input %s has %lld positions, more than n_positions=%lld",
                        display_name(m), ct_sample_shape_str(in, s, sizeof s), (long long)in->dims[0],
                        (long long)g->cfg.n_positions);
    ct_shape h;
    g->transformer->need_input_grad = false;
    g->lm_head->need_input_grad = true;
    CT_TRY(ct_module_infer(g->transformer, in, &h));
    return ct_module_infer(g->lm_head, &h, out);
}

static ct_status gpt_declare(ct_module *m, ct_param_store *ps) {
    gpt_self(m)->ps = ps;
    return CT_OK;
}

static ct_status gpt_forward(ct_module *m, const ct_tensor *x, ct_tensor *y) {
    gpt *g = gpt_self(m);
    if (padded_vocab(&g->cfg) > g->cfg.vocab_size && !ct_module_ids_known_below(m, x, g->cfg.vocab_size)) {
        /* wte has rows up to the padding's end, so its own check would let padding ids through */
        int64_t bad = ct_op_embedding_find_invalid(x, g->cfg.vocab_size);
        if (bad >= 0)
            return ct_error(CT_ERR_INVALID_ARG, "gpt '%s': token id %lld at position [%lld, %lld] is outside [0, %lld) "
                            "(vocab_size=%lld; the rows up to padded_vocab_size=%lld are padding, not tokens)",
                            display_name(m), (long long)ct_tensor_item(x, bad), (long long)(bad / x->shape[1]),
                            (long long)(bad % x->shape[1]), (long long)g->cfg.vocab_size,
                            (long long)g->cfg.vocab_size, (long long)g->cfg.padded_vocab_size);
    }
    ct_tensor h;
    CT_TRY(ct_module_forward(g->transformer, x, &h));
    return ct_module_forward(g->lm_head, &h, y);
}

static ct_status gpt_backward(ct_module *m, const ct_tensor *dy, ct_tensor *dx) {
    gpt *g = gpt_self(m);
    if (dx) return ct_error(CT_ERR_STATE, "gpt '%s': token ids have no gradient", display_name(m));
    ct_tensor dh;
    CT_TRY(ct_module_backward(g->lm_head, dy, &dh));
    return ct_module_backward(g->transformer, &dh, NULL);
}

/* The GPT2Config keys ct_gpt_from_json reads (padded_vocab_size only when there is padding, so an
 * unpadded model's spec stays GPT2Config's): the inner modules are the architecture's, not listed. */
static ct_status gpt_to_json(const ct_module *m, json_t **out) {
    const ct_gpt_config *c = &ct_container_of(m, gpt, base)->cfg;
    *out = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:f, s:b, s:f}", "type", "gpt", "vocab_size",
                     (json_int_t)c->vocab_size, "n_positions", (json_int_t)c->n_positions, "n_embd",
                     (json_int_t)c->n_embd, "n_layer", (json_int_t)c->n_layer, "n_head", (json_int_t)c->n_head,
                     "dropout", c->dropout, "bias", c->bias, "layer_norm_epsilon", c->layer_norm_epsilon);
    if (*out && padded_vocab(c) > c->vocab_size &&
        json_object_set_new(*out, "padded_vocab_size", json_integer((json_int_t)padded_vocab(c))) != 0) {
        json_decref(*out);
        *out = NULL;
    }
    return *out ? CT_OK : ct_error(CT_ERR_NOMEM, "out of memory");
}

/* A label is a token id: the padded vocabulary's extra logits are never one. */
static int64_t gpt_output_classes(const ct_module *m) { return ct_container_of(m, gpt, base)->cfg.vocab_size; }

static const ct_module_ops gpt_ops = {
    .size = sizeof(ct_module_ops),
    .type = "gpt",
    .infer = gpt_infer,
    .declare = gpt_declare,
    .forward = gpt_forward,
    .backward = gpt_backward,
    .to_json = gpt_to_json,
    .output_classes = gpt_output_classes,
};

ct_gpt_config ct_gpt_config_default(void) {
    return (ct_gpt_config){.vocab_size = 50257, .n_positions = 1024, .n_embd = 768, .n_layer = 12, .n_head = 12,
                           .dropout = 0.0, .bias = true, .layer_norm_epsilon = 1e-5};
}

static ct_status check_config(const ct_gpt_config *c) {
    const struct {
        const char *name;
        int64_t v;
    } sizes[] = {{"vocab_size", c->vocab_size}, {"n_positions", c->n_positions}, {"n_embd", c->n_embd},
                 {"n_layer", c->n_layer},       {"n_head", c->n_head}};
    for (size_t i = 0; i < CT_ARRAY_LEN(sizes); i++)
        if (sizes[i].v < 1)
            return ct_error(CT_ERR_INVALID_ARG, "gpt: %s=%lld (need >= 1)", sizes[i].name, (long long)sizes[i].v);
    if (c->padded_vocab_size < 0 || (c->padded_vocab_size > 0 && c->padded_vocab_size < c->vocab_size))
        return ct_error(CT_ERR_INVALID_ARG, "gpt: padded_vocab_size=%lld is smaller than vocab_size=%lld (need "
                        "padded_vocab_size >= vocab_size, or 0 for no padding)", (long long)c->padded_vocab_size,
                        (long long)c->vocab_size);
    if (c->n_embd % c->n_head != 0)
        return ct_error(CT_ERR_INVALID_ARG, "gpt: n_embd=%lld is not a multiple of n_head=%lld", (long long)c->n_embd,
                        (long long)c->n_head);
    /* 3 * n_embd and 4 * n_embd columns and the products of sizes stay far from overflow. */
    const int64_t limit = (int64_t)1 << 31;
    if (padded_vocab(c) > limit || c->n_positions > limit || c->n_embd > limit / 4 || c->n_layer > 100000)
        return ct_error(CT_ERR_INVALID_ARG, "gpt: sizes vocab_size=%lld n_positions=%lld n_embd=%lld n_layer=%lld are "
                        "beyond what is supported", (long long)padded_vocab(c), (long long)c->n_positions,
                        (long long)c->n_embd, (long long)c->n_layer);
    if (!(c->dropout >= 0.0 && c->dropout < 1.0))
        return ct_error(CT_ERR_INVALID_ARG, "gpt: dropout=%g (need 0 <= dropout < 1)", c->dropout);
    if (!(c->layer_norm_epsilon > 0.0))
        return ct_error(CT_ERR_INVALID_ARG, "gpt: layer_norm_epsilon=%g (need > 0)", c->layer_norm_epsilon);
    return CT_OK;
}

ct_status ct_gpt_create(const ct_gpt_config *cfg, ct_module **out) {
    CT_ASSERT(cfg && out);
    CT_TRY(check_config(cfg));
    gpt *g = calloc(1, sizeof *g);
    lm_head *h = calloc(1, sizeof *h);
    if (!g || !h) {
        free(g);
        free(h);
        return ct_error(CT_ERR_NOMEM, "gpt: out of memory");
    }
    ct_module_base_init(&g->base, &gpt_ops);
    g->base.in_dtype = CT_I64;
    g->cfg = *cfg;
    ct_module_base_init(&h->base, &head_ops);
    h->model = g;
    h->vocab = padded_vocab(cfg);
    h->real_vocab = cfg->vocab_size;
    h->n_embd = cfg->n_embd;
    ct_module *t = NULL;
    ct_status s = transformer_create(cfg, &t);
    if (s == CT_OK) s = ct_gpt_adopt(&g->base, t, "transformer", &g->transformer);
    if (s == CT_OK) {
        s = ct_gpt_adopt(&g->base, &h->base, "lm_head", &g->lm_head);
    } else {
        free(h);
    }
    if (s != CT_OK) {
        ct_module_destroy(&g->base);
        return s;
    }
    *out = &g->base;
    return CT_OK;
}

/* {"type": "gpt", "vocab_size": 257, "padded_vocab_size": 320, "n_positions": 128, "n_embd": 128, "n_layer": 4, "n_head": 4,
 *  "dropout": 0.0, "bias": true, "layer_norm_epsilon": 1e-5}: vocab_size is required (it must match
 * the tokenizer); the sizes default to GPT-2 124M's. */
ct_status ct_gpt_from_json(const json_t *spec, const char *path, ct_module **out) {
    static const char *const keys[] = {"type",    "vocab_size", "padded_vocab_size", "n_positions",
                                       "n_embd",  "n_layer",    "n_head",            "dropout",
                                       "bias",    "layer_norm_epsilon", NULL};
    CT_TRY(ct_json_check_keys(spec, path, keys));
    ct_gpt_config c = ct_gpt_config_default();
    CT_TRY(ct_json_int(spec, path, "vocab_size", true, 0, &c.vocab_size));
    CT_TRY(ct_json_int(spec, path, "padded_vocab_size", false, 0, &c.padded_vocab_size));
    CT_TRY(ct_json_int(spec, path, "n_positions", false, c.n_positions, &c.n_positions));
    CT_TRY(ct_json_int(spec, path, "n_embd", false, c.n_embd, &c.n_embd));
    CT_TRY(ct_json_int(spec, path, "n_layer", false, c.n_layer, &c.n_layer));
    CT_TRY(ct_json_int(spec, path, "n_head", false, c.n_head, &c.n_head));
    CT_TRY(ct_json_real(spec, path, "dropout", false, c.dropout, &c.dropout));
    CT_TRY(ct_json_bool(spec, path, "bias", false, c.bias, &c.bias));
    CT_TRY(ct_json_real(spec, path, "layer_norm_epsilon", false, c.layer_norm_epsilon, &c.layer_norm_epsilon));
    ct_status s = ct_gpt_create(&c, out);
    return s == CT_OK ? s : ct_error_prefix(s == CT_ERR_INVALID_ARG ? CT_ERR_CONFIG : s, "%s: ", path);
}
