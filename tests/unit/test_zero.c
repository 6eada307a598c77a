/* ZeRO-1 (dist/zero.h, checkpoint/checkpoint_zero.h) without MPI: the partition; shard optimizers
 * (groups intersected with the shard, state of the shard's size); with the single communicator, a
 * ZeRO-1 step bit-identical to the plain scale-clip-step; and several ranks simulated by threads of
 * one process over a communicator written here (each rank its own parameter store; the collectives
 * sum in rank order, as the reference does), compared with plain DDP over 50 steps of random
 * gradients: every rank's parameters within 1e-6 relative of the reference (element by element) and
 * identical between ranks, the state gathered on root within 1e-6 of the plain optimizer's, world
 * sizes 1 to 7 with P not divisible by world (and ranks that own nothing), staging from a few
 * elements (many chunks per step) to the default. Checkpoints: saved by W ranks, loaded by a plain
 * optimizer and by another world size, and the other way round, the continued run matching the
 * uninterrupted one. Errors: non-finite gradients (every rank fails, nothing changes), bad
 * arguments, a shard of another world, an optimizer.h5 of another optimizer (every rank fails).
 *
 * Why one file of over 600 lines: every check runs over the communicator of threads written here
 * and compares with the same plain-DDP reference. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint/checkpoint_io.h"
#include "checkpoint/checkpoint_zero.h"
#include "core/format/h5io.h"
#include "core/ops/ops.h"
#include "dist/comm.h"
#include "dist/zero.h"
#include "model/params.h"
#include "optim/clip.h"
#include "optim/optimizer.h"
#include "testlib.h"

#define MAX_WORLD 8
#define MAX_TENSORS 16
#define STEPS 50

/* --- a threaded communicator: W ranks of one process ------------------------------------------ */

/* Every collective: each rank posts its buffers, all meet (barrier 1), each reads what it needs and
 * writes only its own output, all meet again (barrier 2) before anyone posts the next one. */
typedef struct fake_world {
    int world;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int waiting;
    uint64_t generation;
    const void *in[MAX_WORLD];
    int64_t n[MAX_WORLD];
    int unlabelled;            /* collectives made without ct_comm_set_label (none may be) */
    char first_unlabelled[32]; /* ...and the first one's name */
} fake_world;

static void world_init(fake_world *w, int world) {
    memset(w, 0, sizeof *w);
    w->world = world;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
}

static void world_destroy(fake_world *w) {
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
}

/* A barrier that gives up: ranks that disagree on the sequence of collectives (a rank that returned
 * early) would otherwise hang the test; after 60 s the test fails and exits. */
static void world_wait(fake_world *w, int rank) {
    pthread_mutex_lock(&w->mu);
    uint64_t gen = w->generation;
    if (++w->waiting == w->world) {
        w->waiting = 0;
        w->generation++;
        pthread_cond_broadcast(&w->cv);
    } else {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 60;
        while (w->generation == gen)
            if (pthread_cond_timedwait(&w->cv, &w->mu, &until) != 0 && w->generation == gen) {
                fprintf(stderr, "FAIL: rank %d of %d waited 60 s in a collective the other ranks never reached\n",
                        rank, w->world);
                exit(1);
            }
    }
    pthread_mutex_unlock(&w->mu);
}

typedef struct fake_comm {
    ct_comm base;
    fake_world *w;
} fake_comm;

/* Every collective of the library says what it is for (its timeout names it): counts those without. */
static fake_world *world_of_call(ct_comm *c, const char *collective) {
    fake_world *w = ((fake_comm *)c)->w;
    if (!c->label[0]) {
        pthread_mutex_lock(&w->mu);
        if (!w->unlabelled++) snprintf(w->first_unlabelled, sizeof w->first_unlabelled, "%s", collective);
        pthread_mutex_unlock(&w->mu);
    }
    return w;
}

/* dst[i] = op over ranks q = 0..W-1 of src_q[off + i], in rank order, in the element type. */
#define REDUCE(T)                                                                                                    \
    for (int64_t i = 0; i < n; i++) {                                                                                \
        T acc = ((const T *)w->in[0])[off + i];                                                                      \
        for (int q = 1; q < w->world; q++) {                                                                         \
            T v = ((const T *)w->in[q])[off + i];                                                                    \
            acc = op == CT_SUM ? acc + v : op == CT_MIN ? (v < acc ? v : acc) : (v > acc ? v : acc);                 \
        }                                                                                                            \
        ((T *)dst)[i] = acc;                                                                                         \
    }

static void reduce_into(fake_world *w, ct_dtype dt, int64_t off, int64_t n, void *dst, ct_reduce op) {
    if (dt == CT_F32) {
        REDUCE(float)
    } else if (dt == CT_F64) {
        REDUCE(double)
    } else {
        REDUCE(int64_t)
    }
}

static ct_status fake_all_reduce(ct_comm *c, ct_tensor *t, ct_reduce op) {
    fake_world *w = world_of_call(c, "all_reduce");
    size_t bytes = ct_tensor_nbytes(t);
    void *tmp = malloc(bytes ? bytes : 1);
    w->in[c->rank] = t->data;
    world_wait(w, c->rank);
    reduce_into(w, t->dtype, 0, ct_tensor_numel(t), tmp, op);
    world_wait(w, c->rank);
    memcpy(t->data, tmp, bytes);
    free(tmp);
    return CT_OK;
}

static ct_status fake_all_reduce_start(ct_comm *c, ct_tensor *t, ct_reduce op, ct_comm_request **req) {
    *req = (ct_comm_request *)c;
    return fake_all_reduce(c, t, op);
}

static ct_status fake_wait(ct_comm *c, ct_comm_request *req) { return CT_OK; }

static ct_status fake_broadcast(ct_comm *c, ct_tensor *t, int root) {
    fake_world *w = world_of_call(c, "broadcast");
    w->in[c->rank] = t->data;
    world_wait(w, c->rank);
    if (c->rank != root) memcpy(t->data, w->in[root], ct_tensor_nbytes(t));
    world_wait(w, c->rank);
    return CT_OK;
}

static ct_status fake_all_gather(ct_comm *c, const ct_tensor *in, ct_tensor *out) {
    fake_world *w = world_of_call(c, "all_gather");
    size_t bytes = ct_tensor_nbytes(in);
    w->in[c->rank] = in->data;
    world_wait(w, c->rank);
    /* In place (in is this rank's own block of out, as ZeRO-1 gathers its parameter shards): that
     * block is already there, and copying it onto itself would write memory the other ranks read. */
    for (int q = 0; q < w->world; q++) {
        char *dst = (char *)out->data + (size_t)q * bytes;
        if (bytes && dst != (const char *)w->in[q]) memmove(dst, w->in[q], bytes);
    }
    world_wait(w, c->rank);
    return CT_OK;
}

static ct_status fake_gather_v(ct_comm *c, const ct_tensor *in, int root, ct_tensor *out) {
    fake_world *w = world_of_call(c, "gather_v");
    w->in[c->rank] = in->data;
    w->n[c->rank] = ct_tensor_numel(in);
    world_wait(w, c->rank);
    ct_status s = CT_OK;
    if (c->rank == root) {
        int64_t total = 0;
        for (int q = 0; q < w->world; q++) total += w->n[q];
        if (total > 0) s = ct_tensor_alloc(out, in->dtype, CT_CPU, 1, &total);
        size_t es = ct_dtype_size(in->dtype), at = 0;
        for (int q = 0; s == CT_OK && q < w->world; q++) {
            if (w->n[q]) memcpy((char *)out->data + at, w->in[q], (size_t)w->n[q] * es);
            at += (size_t)w->n[q] * es;
        }
    }
    world_wait(w, c->rank);
    return s;
}

static ct_status fake_reduce_scatter(ct_comm *c, const ct_tensor *in, ct_tensor *out, ct_reduce op) {
    fake_world *w = world_of_call(c, "reduce_scatter");
    int64_t n = ct_tensor_numel(out);
    w->in[c->rank] = in->data;
    world_wait(w, c->rank);
    reduce_into(w, in->dtype, (int64_t)c->rank * n, n, out->data, op);
    world_wait(w, c->rank);
    return CT_OK;
}

static ct_status fake_barrier(ct_comm *c) {
    world_wait(world_of_call(c, "barrier"), c->rank);
    return CT_OK;
}

static void fake_abort(ct_comm *c, int code) { exit(code); }

static const ct_comm_ops fake_ops = {
    .size = sizeof(ct_comm_ops),
    .name = "threads",
    .all_reduce = fake_all_reduce,
    .all_reduce_start = fake_all_reduce_start,
    .wait = fake_wait,
    .broadcast = fake_broadcast,
    .all_gather = fake_all_gather,
    .gather_v = fake_gather_v,
    .reduce_scatter = fake_reduce_scatter,
    .barrier = fake_barrier,
    .abort = fake_abort,
};

/* --- parameter stores and gradients ----------------------------------------------------------- */

typedef struct store {
    ct_param_store ps;
    ct_tensor values[MAX_TENSORS], grads[MAX_TENSORS];
} store;

/* A model layout: tensor sizes and flags, and the seed of the initial values. */
typedef struct layout {
    int n;
    int64_t numel[MAX_TENSORS];
    ct_dtype dtype;
    uint64_t seed;
} layout;

/* Random sizes (one above the OpenMP threshold when big), alternately with and without decay; redrawn
 * until world does not divide the flat size P where it can (P is a multiple of the 64-byte alignment,
 * so world 2 and 4 always divide it). */
static layout random_layout(ct_rng *rng, ct_dtype dt, int world, bool big) {
    layout L = {.dtype = dt, .seed = ct_rng_u64(rng)};
    int64_t align = 64 / (int64_t)ct_dtype_size(dt);
    for (int tries = 0; tries < 1000; tries++) {
        L.n = 2 + (int)ct_rng_below(rng, 5);
        int64_t P = 0;
        for (int i = 0; i < L.n; i++) {
            L.numel[i] = 1 + (int64_t)ct_rng_below(rng, 150);
            if (big && i == 1) L.numel[i] = 30000 + (int64_t)ct_rng_below(rng, 5000);
            P += (L.numel[i] + align - 1) / align * align;
        }
        if (world % 2 == 0 || P % world != 0) break;
    }
    return L;
}

/* The store of a layout; thread-safe (no CHECK inside: rank threads call it). */
static ct_status make_store_s(store *st, const layout *L) {
    static const ct_module root;
    ct_params_init(&st->ps, L->dtype, CT_CPU);
    for (int i = 0; i < L->n; i++) {
        char name[32];
        snprintf(name, sizeof name, "p%d", i);
        CT_TRY(ct_params_declare(&st->ps, &root, name, 1, &L->numel[i], i % 2 ? CT_PARAM_NO_DECAY : 0u,
                                 &st->values[i], &st->grads[i]));
    }
    int64_t bshape = 5;
    CT_TRY(ct_params_declare(&st->ps, &root, "buf", 1, &bshape, CT_PARAM_BUFFER, &st->values[L->n], NULL));
    CT_TRY(ct_params_finalize(&st->ps));
    ct_rng rng;
    ct_rng_init(&rng, L->seed, 0, 1);
    for (int i = 0; i < st->ps.count; i++)
        for (int64_t j = 0; j < st->ps.items[i].numel; j++)
            ct_tensor_set(st->ps.items[i].value, j, ct_rng_normal(&rng));
    return CT_OK;
}

static void make_store(store *st, const layout *L) { CHECK_OK(make_store_s(st, L)); }

/* The gradient sums of rank r at step k: a pure function of (seed, r, k), zero in the padding. Some
 * steps are large, so that clipping bites on them. */
static void set_grads(store *st, int rank, int k) {
    ct_params_zero_grad(&st->ps);
    uint32_t key[2] = {(uint32_t)ct_test_seed, (uint32_t)(ct_test_seed >> 32)};
    double amp = k % 3 == 0 ? 40.0 : 1.0;
    for (int i = 0; i < st->ps.count; i++) {
        ct_param *p = &st->ps.items[i];
        if (p->flags & CT_PARAM_BUFFER) continue;
        for (int64_t j = 0; j < p->numel; j++) {
            uint32_t ctr[4] = {(uint32_t)j, (uint32_t)i, (uint32_t)k, (uint32_t)rank}, out[4];
            ct_philox4x32(ctr, key, out);
            ct_tensor_set(p->grad, j, amp * ((double)ct_u32_to_unit_float(out[0]) * 2.0 - 1.0 + 0.05));
        }
    }
}

/* The step's hyper-parameters, the same on every rank: lr, 1 / global sample count, clipping. */
static double lr_of(const ct_optim_config *cfg, int k) { return cfg->learning_rate * (1.0 + 0.1 * (k % 7)); }
static double scale_of(int world, int k) { return 1.0 / (double)(world * (3 + k % 5)); }

/* Element-wise: |a - b| <= rel * max(|a|, |b|) everywhere; returns the worst ratio. */
static double worst_rel(const ct_tensor *a, const ct_tensor *b) {
    int64_t n = ct_tensor_numel(a);
    double worst = ct_tensor_numel(b) == n ? 0 : INFINITY;
    for (int64_t i = 0; i < n && worst < INFINITY; i++) {
        double x = ct_tensor_get(a, i), y = ct_tensor_get(b, i);
        double d = fabs(x - y), m = fmax(fabs(x), fabs(y));
        if (d > 0) worst = fmax(worst, m > 0 ? d / m : INFINITY);
        if (isnan(x) != isnan(y)) worst = INFINITY;
    }
    return worst;
}

static bool same_bytes(const ct_tensor *a, const ct_tensor *b) {
    return ct_tensor_nbytes(a) == ct_tensor_nbytes(b) && memcmp(a->data, b->data, ct_tensor_nbytes(a)) == 0;
}

/* The largest |x| of a flat buffer outside every parameter (padding). */
static double padding_max(const store *st, const ct_tensor *flat) {
    int64_t n = ct_tensor_numel(flat);
    char *inside = calloc((size_t)n + 1, 1);
    for (int i = 0; i < st->ps.count; i++)
        if (!(st->ps.items[i].flags & CT_PARAM_BUFFER))
            memset(inside + st->ps.items[i].offset, 1, (size_t)st->ps.items[i].numel);
    double worst = 0;
    for (int64_t j = 0; j < n; j++)
        if (!inside[j]) worst = fmax(worst, fabs(ct_tensor_get(flat, j)));
    free(inside);
    return worst;
}

/* --- the plain DDP reference: the ranks' gradients summed in rank order, one full optimizer --- */

typedef struct reference {
    store st, tmp;
    ct_optimizer *opt;
    double norms[STEPS];
} reference;

static void reference_init(reference *ref, const layout *L, const ct_optim_config *cfg) {
    make_store(&ref->st, L);
    make_store(&ref->tmp, L);
    CHECK_OK(ct_optimizer_create(cfg, &ref->st.ps, &ref->opt));
}

/* Steps [from, to) of plain DDP with world ranks. */
static void reference_run(reference *ref, int world, int from, int to, double max_norm) {
    for (int k = from; k < to; k++) {
        ct_tensor *g = &ref->st.ps.grads;
        set_grads(&ref->st, 0, k);
        for (int r = 1; r < world; r++) {
            set_grads(&ref->tmp, r, k);
            if (g->dtype == CT_F32)
                for (int64_t i = 0; i < ct_tensor_numel(g); i++)
                    ((float *)g->data)[i] += ((float *)ref->tmp.ps.grads.data)[i];
            else
                for (int64_t i = 0; i < ct_tensor_numel(g); i++)
                    ((double *)g->data)[i] += ((double *)ref->tmp.ps.grads.data)[i];
        }
        ct_op_scale(g, scale_of(world, k));
        CHECK_OK(ct_clip_grad_norm(g, max_norm, &ref->norms[k]));
        CHECK_OK(ct_optimizer_step(ref->opt, lr_of(&ref->opt->config, k)));
    }
}

static void reference_free(reference *ref) {
    ct_optimizer_destroy(ref->opt);
    ct_params_free(&ref->st.ps);
    ct_params_free(&ref->tmp.ps);
}

/* --- a ZeRO-1 job: W rank threads ------------------------------------------------------------- */

typedef struct job {
    int world, root;
    layout L;
    ct_optim_config cfg;
    int64_t staging;      /* bytes */
    double max_norm;      /* clipping */
    int from, to;         /* steps run */
    const ct_tensor *init; /* parameters to start from (a resumed run), or NULL */
    const char *load, *save; /* optimizer.h5 to resume from / to write at the end, or NULL */
    fake_world fw;
} job;

/* What one rank saw; checked by the main thread (CHECK is not thread-safe). */
typedef struct rank_out {
    job *job;
    fake_comm comm;
    store st;
    ct_optimizer *opt;  /* the shard optimizer */
    ct_optimizer *full; /* the gathered state, on root */
    double norms[STEPS];
    ct_status status;
    char error[512];
    int64_t offset, count;
} rank_out;

static void *rank_main(void *arg) {
    rank_out *o = arg;
    job *J = o->job;
    ct_comm *c = &o->comm.base;
    ct_status s = make_store_s(&o->st, &J->L);
    if (s == CT_OK && J->init) memcpy(o->st.ps.values.data, J->init->data, ct_tensor_nbytes(&o->st.ps.values));
    if (s == CT_OK) s = ct_zero1_create_staged(&J->cfg, &o->st.ps, c, J->staging, &o->opt);
    if (s == CT_OK) {
        o->offset = o->opt->shard_offset;
        o->count = ct_tensor_numel(&o->opt->params);
    }
    if (s == CT_OK && J->load) s = ct_zero1_load_h5(o->opt, c, J->root, J->load);
    for (int k = J->from; s == CT_OK && k < J->to; k++) {
        set_grads(&o->st, c->rank, k);
        s = ct_zero1_step(o->opt, c, &o->st.ps.grads, &o->st.ps.values, lr_of(&J->cfg, k), scale_of(J->world, k),
                          J->max_norm, &o->norms[k]);
    }
    if (s == CT_OK && J->save) s = ct_zero1_save_h5(o->opt, c, J->root, J->save);
    if (s == CT_OK) s = ct_zero1_gather_state(o->opt, c, J->root, &o->full);
    o->status = s;
    if (s != CT_OK) snprintf(o->error, sizeof o->error, "%s", ct_last_error());
    return NULL;
}

static void job_run(job *J, rank_out *out) {
    world_init(&J->fw, J->world);
    pthread_t th[MAX_WORLD];
    for (int r = 0; r < J->world; r++) {
        memset(&out[r], 0, sizeof out[r]);
        out[r].job = J;
        out[r].comm = (fake_comm){.base = {.ops = &fake_ops,
                                           .rank = r,
                                           .world_size = J->world,
                                           .local_rank = r,
                                           .local_world_size = J->world,
                                           .timeout_s = 60},
                                  .w = &J->fw};
        pthread_create(&th[r], NULL, rank_main, &out[r]);
    }
    for (int r = 0; r < J->world; r++) pthread_join(th[r], NULL);
    CHECK(J->fw.unlabelled == 0, "world %d: %d collectives without a label, the first a %s", J->world, J->fw.unlabelled,
          J->fw.first_unlabelled);
    world_destroy(&J->fw);
}

static void job_free(job *J, rank_out *out) {
    for (int r = 0; r < J->world; r++) {
        ct_optimizer_destroy(out[r].opt);
        ct_optimizer_destroy(out[r].full);
        ct_params_free(&out[r].st.ps);
    }
}

/* Every rank succeeded, covered the buffer in rank order, holds the reference's parameters (and the
 * same bytes as rank 0); root's gathered state is the reference optimizer's. */
static void check_job(const char *label, job *J, rank_out *out, reference *ref) {
    int64_t at = 0;
    for (int r = 0; r < J->world; r++) {
        rank_out *o = &out[r];
        CHECK(o->status == CT_OK, "%s rank %d: %s", label, r, o->error);
        if (o->status != CT_OK) return;
        CHECK(o->offset == at, "%s rank %d: shard at %lld, expected %lld", label, r, (long long)o->offset,
              (long long)at);
        at += o->count;
        double rel = worst_rel(&o->st.ps.values, &ref->st.ps.values);
        CHECK(rel <= 1e-6, "%s rank %d: parameters differ from plain DDP by %.3g relative", label, r, rel);
        CHECK(same_bytes(&o->st.ps.values, &out[0].st.ps.values), "%s rank %d: parameters differ from rank 0's",
              label, r);
        CHECK(padding_max(&o->st, &o->st.ps.values) == 0, "%s rank %d: padding of the parameters is not zero", label,
              r);
        for (int k = J->from; k < J->to; k++)
            if (!(fabs(o->norms[k] - ref->norms[k]) <= 1e-12 * ref->norms[k])) {
                CHECK(false, "%s rank %d step %d: grad norm %.17g, plain DDP %.17g", label, r, k, o->norms[k],
                      ref->norms[k]);
                break;
            }
        CHECK(o->opt->step == ref->opt->step, "%s rank %d: %lld steps, reference %lld", label, r,
              (long long)o->opt->step, (long long)ref->opt->step);
        CHECK((r == J->root) == (o->full != NULL), "%s rank %d: gathered state %s", label, r,
              o->full ? "off root" : "missing on root");
    }
    CHECK(at == ct_tensor_numel(&ref->st.ps.values), "%s: shards cover %lld of %lld elements", label, (long long)at,
          (long long)ct_tensor_numel(&ref->st.ps.values));
    ct_optimizer *full = out[J->root].full;
    if (!full) return;
    CHECK(strcmp(ct_optimizer_name(full), ct_optimizer_name(ref->opt)) == 0, "%s: gathered '%s', reference '%s'",
          label, ct_optimizer_name(full), ct_optimizer_name(ref->opt));
    CHECK(ct_optimizer_step_count(full) == ct_optimizer_step_count(ref->opt), "%s: gathered step count %lld", label,
          (long long)ct_optimizer_step_count(full));
    int n = ct_optimizer_state_count(ref->opt);
    CHECK(ct_optimizer_state_count(full) == n, "%s: %d gathered state tensors, reference %d", label,
          ct_optimizer_state_count(full), n);
    for (int i = 0; i < n; i++) {
        const char *name;
        ct_tensor *t;
        CHECK_OK(ct_optimizer_state_get(ref->opt, i, &name, &t));
        ct_tensor *u = ct_optimizer_state_find(full, name);
        CHECK(u != NULL, "%s: no gathered state '%s'", label, name);
        if (!u) continue;
        double rel = worst_rel(u, t);
        CHECK(rel <= 1e-6, "%s: gathered state '%s' differs from plain DDP by %.3g relative", label, name, rel);
    }
}

static const char *kind_str(ct_optim_kind k) {
    return k == CT_OPTIM_SGD ? "sgd" : k == CT_OPTIM_ADAM ? "adam" : "adamw";
}

static ct_optim_config config(ct_optim_kind kind, bool amsgrad, int variant) {
    ct_optim_config c = ct_optim_config_default();
    c.optim = kind;
    c.learning_rate = 0.01;
    c.weight_decay = 0.05;
    c.amsgrad = amsgrad;
    if (kind == CT_OPTIM_SGD) {
        c.momentum = variant ? 0.9 : 0.0;
        c.nesterov = variant == 1;
        c.dampening = variant == 2 ? 0.1 : 0.0;
    }
    return c;
}

/* --- the tests ----------------------------------------------------------------------------------- */

static void partition(ct_rng *rng) {
    /* The example of zero.h. */
    int64_t want[7][2] = {{0, 3}, {3, 3}, {6, 3}, {9, 3}, {12, 3}, {15, 1}, {16, 0}};
    for (int r = 0; r < 7; r++) {
        ct_zero1_shard s = ct_zero1_partition(16, 7, r);
        CHECK(s.offset == want[r][0] && s.count == want[r][1] && s.shard_size == 3,
              "partition(16, 7, %d) = [%lld, +%lld) S %lld", r, (long long)s.offset, (long long)s.count,
              (long long)s.shard_size);
    }
    for (int trial = 0; trial < 500; trial++) {
        int world = 1 + (int)ct_rng_below(rng, 12);
        int64_t P = (int64_t)ct_rng_below(rng, trial < 250 ? 40 : 100000);
        int64_t S = (P + world - 1) / world, at = 0;
        bool ok = true;
        for (int r = 0; r < world; r++) {
            ct_zero1_shard s = ct_zero1_partition(P, world, r);
            ok &= s.shard_size == S && s.offset == at && s.count >= 0 && s.count <= S;
            ok &= s.count == S || s.offset + s.count == P; /* only the tail is short */
            ok &= s.offset == (int64_t)r * S || s.offset == P;
            at += s.count;
        }
        CHECK(ok && at == P, "partition of %lld over %d ranks", (long long)P, world);
    }
}

/* Shard optimizers of random ranges: groups = the full groups intersected with the range, state of
 * the range's size; stepping one never writes outside its range; the whole range == the plain one. */
static void shard_optimizer(ct_rng *rng) {
    for (int trial = 0; trial < 20; trial++) {
        layout L = random_layout(rng, trial % 2 ? CT_F64 : CT_F32, 1, false);
        store st;
        make_store(&st, &L);
        ct_optim_config cfg = config(trial % 3 == 0 ? CT_OPTIM_SGD : CT_OPTIM_ADAMW, trial % 4 == 1, 1);
        ct_optimizer *full, *sh;
        CHECK_OK(ct_optimizer_create(&cfg, &st.ps, &full));
        int64_t P = ct_tensor_numel(&st.ps.values);
        int64_t off = (int64_t)ct_rng_below(rng, (uint64_t)P + 1);
        int64_t cnt = (int64_t)ct_rng_below(rng, (uint64_t)(P - off) + 1);
        if (trial == 0) off = 0, cnt = P;
        CHECK_OK(ct_optimizer_create_shard(&cfg, &st.ps, off, cnt, &sh));
        if (!sh) {
            ct_optimizer_destroy(full);
            ct_params_free(&st.ps);
            continue;
        }
        CHECK(sh->shard_offset == off && sh->full_numel == P && ct_tensor_numel(&sh->params) == cnt &&
                  (char *)sh->params.data == (char *)st.ps.values.data + off * ct_dtype_size(L.dtype) &&
                  (char *)sh->grads.data == (char *)st.ps.grads.data + off * ct_dtype_size(L.dtype),
              "shard [%lld, +%lld): views", (long long)off, (long long)cnt);
        CHECK(full->shard_offset == 0 && full->full_numel == P, "plain optimizer: shard fields");
        for (int g = 0; g < 2; g++) {
            /* Element membership: in a range of the shard's group g <=> in the full group g and the shard. */
            char *mark = calloc((size_t)P + 1, 1);
            for (int r = 0; r < full->groups[g].n_ranges; r++)
                for (int64_t j = 0; j < full->groups[g].ranges[r].count; j++)
                    mark[full->groups[g].ranges[r].offset + j] |= 1;
            int64_t numel = 0;
            for (int r = 0; r < sh->groups[g].n_ranges; r++) {
                numel += sh->groups[g].ranges[r].count;
                for (int64_t j = 0; j < sh->groups[g].ranges[r].count; j++)
                    mark[off + sh->groups[g].ranges[r].offset + j] |= 2;
            }
            bool ok = numel == sh->groups[g].numel && sh->groups[g].weight_decay == full->groups[g].weight_decay;
            for (int64_t j = 0; j < P; j++) {
                bool in_shard = j >= off && j < off + cnt;
                ok &= (mark[j] == 3) == ((mark[j] & 1) && in_shard) && (mark[j] != 2);
            }
            CHECK(ok, "shard [%lld, +%lld) of %lld: group '%s' is not the intersection", (long long)off,
                  (long long)cnt, (long long)P, full->groups[g].name);
            free(mark);
        }
        CHECK(ct_optimizer_state_count(sh) == ct_optimizer_state_count(full), "shard: state count");
        for (int i = 0; i < ct_optimizer_state_count(sh); i++) {
            const char *name;
            ct_tensor *t;
            CHECK_OK(ct_optimizer_state_get(sh, i, &name, &t));
            CHECK(ct_tensor_numel(t) == cnt, "shard state '%s' has %lld elements, expected %lld", name,
                  (long long)ct_tensor_numel(t), (long long)cnt);
        }
        /* Steps of the shard change the shard only, and exactly as the plain optimizer changes it. */
        store st2;
        make_store(&st2, &L);
        ct_optimizer *full2;
        CHECK_OK(ct_optimizer_create(&cfg, &st2.ps, &full2));
        for (int k = 0; k < 5; k++) {
            set_grads(&st, 0, k);
            set_grads(&st2, 0, k);
            CHECK_OK(ct_optimizer_step(sh, 0.01));
            CHECK_OK(ct_optimizer_step(full2, 0.01));
        }
        size_t es = ct_dtype_size(L.dtype);
        store fresh;
        make_store(&fresh, &L);
        bool outside_same = memcmp(st.ps.values.data, fresh.ps.values.data, (size_t)off * es) == 0 &&
                            memcmp((char *)st.ps.values.data + (off + cnt) * es,
                                   (char *)fresh.ps.values.data + (off + cnt) * es, (size_t)(P - off - cnt) * es) == 0;
        /* Not bit for bit: the update kernel may round an element differently in its vectorised body
         * and its scalar remainder (FMA contraction), and the shard moves elements between the two. */
        ct_tensor in_sh = ct_optimizer_range(&st.ps.values, off, cnt);
        ct_tensor in_full = ct_optimizer_range(&st2.ps.values, off, cnt);
        double rel = worst_rel(&in_sh, &in_full);
        bool inside_same = rel <= (L.dtype == CT_F64 ? 1e-13 : 1e-6);
        CHECK(outside_same, "shard [%lld, +%lld): parameters outside the shard changed", (long long)off,
              (long long)cnt);
        int64_t first_diff = -1;
        for (int64_t j = off; j < off + cnt && first_diff < 0; j++)
            if (ct_tensor_get(&st.ps.values, j) != ct_tensor_get(&st2.ps.values, j)) first_diff = j;
        CHECK(inside_same,
              "shard [%lld, +%lld) of %lld, %s%s %s: the shard's parameters differ from the plain optimizer's by "
              "%.3g relative, first at %lld: %.17g vs %.17g",
              (long long)off, (long long)cnt, (long long)P, kind_str(cfg.optim), cfg.amsgrad ? "+amsgrad" : "",
              ct_dtype_name(L.dtype), rel, (long long)first_diff,
              first_diff >= 0 ? ct_tensor_get(&st.ps.values, first_diff) : 0.0,
              first_diff >= 0 ? ct_tensor_get(&st2.ps.values, first_diff) : 0.0);
        ct_optimizer_destroy(full);
        ct_optimizer_destroy(full2);
        ct_optimizer_destroy(sh);
        ct_params_free(&st.ps);
        ct_params_free(&st2.ps);
        ct_params_free(&fresh.ps);
    }
    /* Bad ranges. */
    layout L = random_layout(rng, CT_F32, 1, false);
    store st;
    make_store(&st, &L);
    ct_optim_config cfg = config(CT_OPTIM_ADAMW, false, 0);
    ct_optimizer *sh;
    int64_t P = ct_tensor_numel(&st.ps.values);
    CHECK_ERR(ct_optimizer_create_shard(&cfg, &st.ps, 1, P, &sh), CT_ERR_INVALID_ARG, "outside the");
    CHECK(sh == NULL, "a failed create_shard left an optimizer");
    CHECK_ERR(ct_optimizer_create_shard(&cfg, &st.ps, -1, 2, &sh), CT_ERR_INVALID_ARG, "[-1, 1)");
    ct_params_free(&st.ps);
}

/* The single communicator: one rank, the step is bit for bit the plain scale + clip + step. */
static void single_rank(ct_rng *rng) {
    ct_comm *c;
    CHECK_OK(ct_comm_single_create(&c));
    for (int trial = 0; trial < 6; trial++) {
        layout L = random_layout(rng, trial % 2 ? CT_F64 : CT_F32, 1, trial == 2);
        ct_optim_config cfg = config(trial < 2 ? CT_OPTIM_SGD : trial < 4 ? CT_OPTIM_ADAM : CT_OPTIM_ADAMW,
                                     trial == 3, 1);
        store st;
        make_store(&st, &L);
        ct_optimizer *z;
        CHECK_OK(ct_zero1_create(&cfg, &st.ps, c, &z));
        if (!z) continue;
        reference ref;
        reference_init(&ref, &L, &cfg);
        double max_norm = trial % 3 == 0 ? 0.0 : 0.5;
        bool same_norms = true;
        for (int k = 0; k < 20; k++) {
            set_grads(&st, 0, k);
            double norm;
            CHECK_OK(ct_zero1_step(z, c, &st.ps.grads, &st.ps.values, lr_of(&cfg, k), scale_of(1, k), max_norm,
                                   &norm));
            reference_run(&ref, 1, k, k + 1, max_norm);
            same_norms &= norm == ref.norms[k];
        }
        CHECK(same_norms, "single rank %s: grad norms differ from the plain path", kind_str(cfg.optim));
        CHECK(same_bytes(&st.ps.values, &ref.st.ps.values), "single rank %s %s: parameters differ from the plain step",
              kind_str(cfg.optim), ct_dtype_name(L.dtype));
        for (int i = 0; i < ct_optimizer_state_count(z); i++) {
            const char *name;
            ct_tensor *t;
            CHECK_OK(ct_optimizer_state_get(z, i, &name, &t));
            ct_tensor *u = ct_optimizer_state_find(ref.opt, name);
            CHECK(u && same_bytes(t, u), "single rank: state '%s' differs", name);
        }
        ct_optimizer *full;
        CHECK_OK(ct_zero1_gather_state(z, c, 0, &full));
        CHECK(full && ct_optimizer_step_count(full) == 20, "single rank: gathered state");
        CHECK_ERR(ct_optimizer_step(full, 0.1), CT_ERR_UNSUPPORTED, "cannot step");
        ct_optimizer_destroy(full);
        ct_optimizer_destroy(z);
        reference_free(&ref);
        ct_params_free(&st.ps);
    }
    ct_comm_free(c);
}

/* W threads vs plain DDP: 50 steps, every optimizer, f32 and f64, several stagings. */
static void many_ranks(ct_rng *rng) {
    static const int worlds[] = {2, 3, 4, 5, 7};
    int t = 0;
    for (size_t wi = 0; wi < sizeof worlds / sizeof *worlds; wi++)
        for (int kind = 0; kind < 4; kind++, t++) {
            job J = {.world = worlds[wi], .from = 0, .to = STEPS};
            J.root = (int)ct_rng_below(rng, (uint64_t)J.world);
            ct_dtype dt = t % 2 ? CT_F64 : CT_F32;
            J.L = random_layout(rng, dt, J.world, t % 5 == 1);
            if (kind == 3 && J.world == 7) { /* a model smaller than the world: trailing ranks own nothing */
                J.L.n = 1;
                J.L.numel[0] = 3;
            }
            J.cfg = kind == 0   ? config(CT_OPTIM_SGD, false, 1 + t % 2)
                    : kind == 1 ? config(CT_OPTIM_ADAM, t % 2, 0)
                    : kind == 2 ? config(CT_OPTIM_ADAMW, false, 0)
                                : config(CT_OPTIM_ADAMW, true, 0);
            /* Staging of one element per block (many chunks a step) up to the default. */
            static const int64_t stagings[] = {1, 40, 1000, CT_ZERO1_STAGING_BYTES};
            J.staging = t % 5 == 1 ? 65536 : stagings[t % 4]; /* the big model: tens of chunks, not thousands */
            J.max_norm = t % 3 == 0 ? 0.0 : t % 3 == 1 ? 0.3 : 1e9;
            reference ref;
            reference_init(&ref, &J.L, &J.cfg);
            reference_run(&ref, J.world, 0, STEPS, J.max_norm);
            rank_out out[MAX_WORLD];
            job_run(&J, out);
            char label[160];
            snprintf(label, sizeof label, "world %d (root %d) %s%s %s P %lld staging %lld max_norm %g", J.world,
                     J.root, kind_str(J.cfg.optim), J.cfg.amsgrad ? "+amsgrad" : "", ct_dtype_name(dt),
                     (long long)ct_tensor_numel(&ref.st.ps.values), (long long)J.staging, J.max_norm);
            check_job(label, &J, out, &ref);
            job_free(&J, out);
            reference_free(&ref);
        }
}

/* optimizer.h5 across world sizes and against the plain optimizer: the continued run equals the
 * uninterrupted one. */
static void checkpoints(ct_rng *rng) {
    char dir[] = "/tmp/ct_test_zero_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char path[256], plain_path[256];
    snprintf(path, sizeof path, "%s/optimizer.h5", dir);
    snprintf(plain_path, sizeof plain_path, "%s/plain.h5", dir);
    static const int pairs[][2] = {{3, 2}, {2, 5}, {1, 3}, {5, 1}};
    for (int p = 0; p < 4; p++) {
        int wa = pairs[p][0], wb = pairs[p][1];
        ct_dtype dt = p % 2 ? CT_F64 : CT_F32;
        layout L = random_layout(rng, dt, 3, false);
        ct_optim_config cfg = p == 2 ? config(CT_OPTIM_SGD, false, 1) : config(CT_OPTIM_ADAMW, p == 1, 0);
        double max_norm = 0.3;
        /* Reference: 25 steps with wa ranks, then 25 with wb (the scale depends on the world). */
        reference ref;
        reference_init(&ref, &L, &cfg);
        reference_run(&ref, wa, 0, STEPS / 2, max_norm);
        CHECK_OK(ct_optimizer_save_h5(ref.opt, plain_path));
        ct_tensor mid;
        int64_t P = ct_tensor_numel(&ref.st.ps.values);
        CHECK_OK(ct_tensor_alloc(&mid, dt, CT_CPU, 1, &P));
        memcpy(mid.data, ref.st.ps.values.data, ct_tensor_nbytes(&mid));

        /* A: wa ranks, 25 steps, save. */
        job A = {.world = wa, .root = wa - 1, .L = L, .cfg = cfg, .staging = 100, .max_norm = max_norm,
                 .from = 0, .to = STEPS / 2, .save = path};
        rank_out out[MAX_WORLD];
        job_run(&A, out);
        char label[128];
        snprintf(label, sizeof label, "checkpoint %d -> %d, first half", wa, wb);
        check_job(label, &A, out, &ref);
        job_free(&A, out);

        /* The file is an ordinary optimizer.h5: a plain optimizer loads it and holds the reference state. */
        store st;
        make_store(&st, &L);
        ct_optimizer *plain;
        CHECK_OK(ct_optimizer_create(&cfg, &st.ps, &plain));
        CHECK_OK(ct_optimizer_load_h5(plain, path));
        CHECK(ct_optimizer_step_count(plain) == STEPS / 2, "checkpoint %d: step count %lld", wa,
              (long long)ct_optimizer_step_count(plain));
        for (int i = 0; i < ct_optimizer_state_count(plain); i++) {
            const char *name;
            ct_tensor *t;
            CHECK_OK(ct_optimizer_state_get(plain, i, &name, &t));
            double rel = worst_rel(t, ct_optimizer_state_find(ref.opt, name));
            CHECK(rel <= 1e-6, "checkpoint of %d ranks, loaded plain: state '%s' off by %.3g", wa, name, rel);
        }
        ct_optimizer_destroy(plain);
        ct_params_free(&st.ps);

        reference_run(&ref, wb, STEPS / 2, STEPS, max_norm);
        /* B: wb ranks resume from A's file; C: wb ranks resume from the plain optimizer's file. */
        for (int from_plain = 0; from_plain < 2; from_plain++) {
            job B = {.world = wb, .root = 0, .L = L, .cfg = cfg, .staging = 64, .max_norm = max_norm,
                     .from = STEPS / 2, .to = STEPS, .init = &mid, .load = from_plain ? plain_path : path};
            job_run(&B, out);
            snprintf(label, sizeof label, "checkpoint %s -> %d ranks, second half", from_plain ? "plain" : "zero1", wb);
            check_job(label, &B, out, &ref);
            job_free(&B, out);
        }
        ct_tensor_free(&mid);
        reference_free(&ref);
    }
    unlink(path);
    unlink(plain_path);
    rmdir(dir);
}

/* A step fails on every rank alike: non-finite gradients on one rank, a bad learning rate; an
 * optimizer.h5 of another optimizer fails on every rank; shards of another world are refused. */
typedef struct err_out {
    fake_comm comm;
    store st;
    ct_optimizer *opt;
    const layout *L;
    const char *file;
    ct_status nan_step, lr_step, load;
    char nan_msg[512], load_msg[512];
    bool unchanged;
} err_out;

static void *err_main(void *arg) {
    err_out *o = arg;
    ct_comm *c = &o->comm.base;
    if (make_store_s(&o->st, o->L) != CT_OK) return NULL;
    ct_optim_config cfg = config(CT_OPTIM_ADAMW, false, 0);
    if (ct_zero1_create_staged(&cfg, &o->st.ps, c, 32, &o->opt) != CT_OK) return NULL;
    ct_tensor before;
    int64_t P = ct_tensor_numel(&o->st.ps.values);
    ct_tensor_alloc(&before, o->st.ps.dtype, CT_CPU, 1, &P);
    set_grads(&o->st, c->rank, 0);
    ct_zero1_step(o->opt, c, &o->st.ps.grads, &o->st.ps.values, 0.01, 0.5, 1.0, NULL);
    memcpy(before.data, o->st.ps.values.data, ct_tensor_nbytes(&before));
    set_grads(&o->st, c->rank, 1);
    if (c->rank == 1) ct_tensor_set(o->st.ps.items[0].grad, 0, NAN); /* one rank's gradient */
    double norm = 0;
    o->nan_step = ct_zero1_step(o->opt, c, &o->st.ps.grads, &o->st.ps.values, 0.01, 0.5, 0.0, &norm);
    snprintf(o->nan_msg, sizeof o->nan_msg, "%s", ct_last_error());
    o->lr_step = ct_zero1_step(o->opt, c, &o->st.ps.grads, &o->st.ps.values, -1.0, 0.5, 0.0, NULL);
    o->unchanged = same_bytes(&before, &o->st.ps.values) && o->opt->step == 1 && isnan(norm);
    ct_tensor_free(&before);
    o->load = ct_zero1_load_h5(o->opt, c, 0, o->file);
    snprintf(o->load_msg, sizeof o->load_msg, "%s", ct_last_error());
    o->unchanged &= o->opt->step == 1;
    return NULL;
}

static void errors(ct_rng *rng) {
    /* In threads: world 3. */
    char dir[] = "/tmp/ct_test_zero_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char file[256];
    snprintf(file, sizeof file, "%s/sgd.h5", dir);
    layout L = random_layout(rng, CT_F32, 3, false);
    {
        store st;
        make_store(&st, &L);
        ct_optim_config sgd = config(CT_OPTIM_SGD, false, 1);
        ct_optimizer *o;
        CHECK_OK(ct_optimizer_create(&sgd, &st.ps, &o));
        CHECK_OK(ct_optimizer_save_h5(o, file));
        ct_optimizer_destroy(o);
        ct_params_free(&st.ps);
    }
    fake_world fw;
    world_init(&fw, 3);
    err_out out[3];
    pthread_t th[3];
    for (int r = 0; r < 3; r++) {
        memset(&out[r], 0, sizeof out[r]);
        out[r].comm = (fake_comm){.base = {.ops = &fake_ops, .rank = r, .world_size = 3, .timeout_s = 60}, .w = &fw};
        out[r].L = &L;
        out[r].file = file;
        pthread_create(&th[r], NULL, err_main, &out[r]);
    }
    for (int r = 0; r < 3; r++) pthread_join(th[r], NULL);
    world_destroy(&fw);
    for (int r = 0; r < 3; r++) {
        CHECK(out[r].opt != NULL, "errors: rank %d has no optimizer", r);
        CHECK(out[r].nan_step == CT_ERR_NUMERIC && strstr(out[r].nan_msg, "nan") && strstr(out[r].nan_msg, "zero1"),
              "errors rank %d: NaN gradient -> %s: %s", r, ct_status_str(out[r].nan_step), out[r].nan_msg);
        CHECK(out[r].lr_step == CT_ERR_INVALID_ARG, "errors rank %d: lr -1 -> %s", r, ct_status_str(out[r].lr_step));
        CHECK(out[r].unchanged, "errors rank %d: a failed step or load changed the parameters or state", r);
        CHECK(out[r].load == CT_ERR_CONFIG, "errors rank %d: loading sgd state -> %s", r, ct_status_str(out[r].load));
        const char *want = r == 0 ? "holds 'sgd' state, this run uses 'adamw'" : "failed on rank 0: see its log";
        CHECK(strstr(out[r].load_msg, want) != NULL, "errors rank %d: load message lacks '%s': %s", r, want,
              out[r].load_msg);
        ct_optimizer_destroy(out[r].opt);
        ct_params_free(&out[r].st.ps);
    }
    unlink(file);
    rmdir(dir);

    /* Single process: misuse. */
    ct_comm *c;
    CHECK_OK(ct_comm_single_create(&c));
    store st, other;
    make_store(&st, &L);
    make_store(&other, &L);
    ct_optim_config cfg = config(CT_OPTIM_ADAMW, false, 0);
    ct_optimizer *z, *plain, *shard;
    CHECK_OK(ct_zero1_create(&cfg, &st.ps, c, &z));
    CHECK_OK(ct_optimizer_create(&cfg, &st.ps, &plain));
    int64_t P = ct_tensor_numel(&st.ps.values);
    CHECK_OK(ct_optimizer_create_shard(&cfg, &st.ps, 0, P / 3 + 1, &shard));
    CHECK_ERR(ct_zero1_step(plain, c, &st.ps.grads, &st.ps.values, 0.1, 1, 0, NULL), CT_ERR_STATE,
              "no ZeRO-1 staging memory");
    CHECK_ERR(ct_zero1_step(shard, c, &st.ps.grads, &st.ps.values, 0.1, 1, 0, NULL), CT_ERR_STATE,
              "but rank 0 of 1 owns", "another rank or world size");
    CHECK_ERR(ct_zero1_step(z, c, &other.ps.grads, &st.ps.values, 0.1, 1, 0, NULL), CT_ERR_INVALID_ARG,
              "grads is not the flat buffer");
    CHECK_ERR(ct_zero1_step(z, c, &st.ps.grads, &st.ps.items[0].value[0], 0.1, 1, 0, NULL), CT_ERR_INVALID_ARG,
              "params", "flat buffer");
    CHECK_ERR(ct_zero1_step(z, c, &st.ps.grads, &st.ps.values, NAN, 1, 0, NULL), CT_ERR_INVALID_ARG, "learning rate");
    CHECK_ERR(ct_zero1_step(z, c, &st.ps.grads, &st.ps.values, 0.1, 0, 0, NULL), CT_ERR_INVALID_ARG, "grad_scale 0");
    CHECK(z->step == 0, "failed steps counted");
    ct_optimizer *full = NULL;
    CHECK_ERR(ct_zero1_gather_state(z, c, 1, &full), CT_ERR_INVALID_ARG, "root 1");
    CHECK_ERR(ct_zero1_scatter_state(z, c, 0, NULL), CT_ERR_INVALID_ARG, "no full state");
    ct_optimizer *sgd_full;
    ct_optim_config sgd = config(CT_OPTIM_SGD, false, 1);
    CHECK_OK(ct_optimizer_create(&sgd, &other.ps, &sgd_full));
    CHECK_ERR(ct_zero1_scatter_state(z, c, 0, sgd_full), CT_ERR_CONFIG, "no state tensor 'exp_avg'");
    CHECK_ERR(ct_zero1_load_h5(z, c, 0, "/nonexistent/optimizer.h5"), CT_ERR_IO, "/nonexistent/optimizer.h5");
    CHECK_ERR(ct_zero1_save_h5(z, c, 0, "/nonexistent/optimizer.h5"), CT_ERR_IO, "/nonexistent/optimizer.h5");
    ct_optimizer_destroy(sgd_full);
    ct_optimizer *bad;
    CHECK_ERR(ct_zero1_create_staged(&cfg, &st.ps, c, 0, &bad), CT_ERR_INVALID_ARG, "staging of 0 bytes");
    ct_optimizer_destroy(shard);
    ct_optimizer_destroy(plain);
    ct_optimizer_destroy(z);
    ct_params_free(&st.ps);
    ct_params_free(&other.ps);
    ct_comm_free(c);
}

int main(void) {
    ct_test_begin("test_zero");
    ct_h5_quiet();
    ct_rng rng;
    ct_rng_init(&rng, ct_test_seed, 0, 0);
    partition(&rng);
    shard_optimizer(&rng);
    single_rank(&rng);
    many_ranks(&rng);
    checkpoints(&rng);
    errors(&rng);
    return ct_test_finish();
}
