/* ZeRO-1 under `mpirun -np N` with the MPI communicator: on every rank, a plain DDP run (full
 * gradients all-reduced, scaled, clipped, one full optimizer) and a ZeRO-1 run (dist/zero.h) side
 * by side over 50 steps of random per-rank gradients, for SGD with momentum, Adam and AdamW with
 * AMSGrad, in f32 and f64, with small staging (many chunks a step) and the default:
 *   - the ZeRO-1 parameters within 1e-6 of the DDP ones, relative to the largest magnitude (MPI's
 *     reduce-scatter and all-reduce may add the ranks in different orders, so the runs agree to
 *     rounding, not bit for bit), and bit-identical on every rank; the same grad norms;
 *   - the state gathered on a root equals the DDP optimizer's within 1e-6;
 *   - checkpoints: ZeRO-1's optimizer.h5 loads into a plain optimizer, DDP's loads into the shards,
 *     and both continued runs agree with DDP for 10 more steps;
 *   - failures on every rank alike: a NaN gradient on one rank (CT_ERR_NUMERIC everywhere, nothing
 *     changed) and an optimizer.h5 of another optimizer (CT_ERR_CONFIG everywhere).
 * Layouts whose size P the world does not divide where it can (the 64-byte padding makes P even).
 * Each rank prints "N passed, M failed" and exits non-zero on a failure; a collective that fails
 * unexpectedly ends the job (ct_comm_abort), so ranks never wait for each other forever. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

#define MAX_TENSORS 8
#define STEPS 50

static ct_comm *comm;
static int R, W;
static uint64_t shared; /* rank 0's seed */

#define MUST(expr)                                                                                                   \
    do {                                                                                                             \
        ct_status m_s_ = (expr);                                                                                     \
        CHECK(m_s_ == CT_OK, "rank %d: %s -> %s: %s", R, #expr, ct_status_str(m_s_), ct_last_error());               \
        if (m_s_ != CT_OK) {                                                                                         \
            ct_test_finish();                                                                                        \
            ct_comm_abort(comm, 1);                                                                                  \
        }                                                                                                            \
    } while (0)

typedef struct store {
    ct_param_store ps;
    ct_tensor values[MAX_TENSORS + 1], grads[MAX_TENSORS + 1];
} store;

typedef struct layout {
    int n;
    int64_t numel[MAX_TENSORS];
    ct_dtype dtype;
} layout;

/* The same on every rank (drawn from the shared seed); P not divisible by W where it can be. */
static layout make_layout(uint32_t tag, ct_dtype dt, bool big) {
    ct_rng rng;
    ct_rng_init(&rng, shared, 0, tag);
    layout L = {.dtype = dt};
    int64_t align = 64 / (int64_t)ct_dtype_size(dt);
    for (int tries = 0; tries < 1000; tries++) {
        L.n = 2 + (int)ct_rng_below(&rng, 5);
        int64_t P = 0;
        for (int i = 0; i < L.n; i++) {
            L.numel[i] = 1 + (int64_t)ct_rng_below(&rng, 200);
            if (big && i == 0) L.numel[i] = 40000 + (int64_t)ct_rng_below(&rng, 3000);
            P += (L.numel[i] + align - 1) / align * align;
        }
        if (W % 2 == 0 || P % W != 0) break;
    }
    return L;
}

/* Identical initial values on every rank (as after DDP's broadcast). */
static void make_store(store *st, const layout *L) {
    static const ct_module root;
    ct_params_init(&st->ps, L->dtype, CT_CPU);
    for (int i = 0; i < L->n; i++) {
        char name[32];
        snprintf(name, sizeof name, "p%d", i);
        MUST(ct_params_declare(&st->ps, &root, name, 1, &L->numel[i], i % 2 ? CT_PARAM_NO_DECAY : 0u, &st->values[i],
                               &st->grads[i]));
    }
    MUST(ct_params_finalize(&st->ps));
    ct_rng rng;
    ct_rng_init(&rng, shared, 0, 99);
    for (int i = 0; i < st->ps.count; i++)
        for (int64_t j = 0; j < st->ps.items[i].numel; j++)
            ct_tensor_set(st->ps.items[i].value, j, ct_rng_normal(&rng));
}

/* This rank's gradient sums at step k; every third step large, so clipping bites. */
static void set_grads(store *st, int k) {
    ct_params_zero_grad(&st->ps);
    uint32_t key[2] = {(uint32_t)shared, (uint32_t)(shared >> 32)};
    double amp = k % 3 == 0 ? 40.0 : 1.0;
    for (int i = 0; i < st->ps.count; i++) {
        ct_param *p = &st->ps.items[i];
        for (int64_t j = 0; j < p->numel; j++) {
            uint32_t ctr[4] = {(uint32_t)j, (uint32_t)i, (uint32_t)k, (uint32_t)R}, out[4];
            ct_philox4x32(ctr, key, out);
            ct_tensor_set(p->grad, j, amp * ((double)ct_u32_to_unit_float(out[0]) * 2.0 - 1.0 + 0.05));
        }
    }
}

static double lr_of(int k) { return 0.01 * (1.0 + 0.1 * (k % 7)); }
static double scale_of(int k) { return 1.0 / (double)(W * (3 + k % 5)); }

/* max |a - b| / max |b|. */
static double rel_diff(const ct_tensor *a, const ct_tensor *b) {
    if (!a || !b || ct_tensor_numel(a) != ct_tensor_numel(b)) return INFINITY;
    double d = 0, m = 0;
    for (int64_t i = 0; i < ct_tensor_numel(a); i++) {
        double x = ct_tensor_get(a, i), y = ct_tensor_get(b, i);
        if (isnan(x) != isnan(y)) return INFINITY;
        d = fmax(d, fabs(x - y));
        m = fmax(m, fabs(y));
    }
    return d == 0 ? 0 : m > 0 ? d / m : INFINITY;
}

/* FNV-1a of a tensor's bytes: equal on every rank iff (almost surely) the bytes are. */
static uint64_t hash_of(const ct_tensor *t) {
    uint64_t h = 1469598103934665603ull;
    const unsigned char *p = t->data;
    for (size_t i = 0; i < ct_tensor_nbytes(t); i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* One plain DDP step. */
static void ddp_step(ct_optimizer *opt, store *st, int k, double max_norm, double *norm) {
    MUST(ct_comm_all_reduce(comm, &st->ps.grads, CT_SUM));
    ct_op_scale(&st->ps.grads, scale_of(k));
    MUST(ct_clip_grad_norm(&st->ps.grads, max_norm, norm));
    MUST(ct_optimizer_step(opt, lr_of(k)));
}

static void compare_params(const char *label, const store *z, const store *d) {
    double rel = rel_diff(&z->ps.values, &d->ps.values);
    CHECK(rel <= 1e-6, "rank %d %s: ZeRO-1 parameters differ from DDP by %.3g relative", R, label, rel);
    char what[160];
    snprintf(what, sizeof what, "%s: ZeRO-1 parameters", label);
    CHECK(ct_comm_check_same(comm, hash_of(&z->ps.values), what) == CT_OK, "rank %d: %s", R, ct_last_error());
}

/* Root's gathered state against root's DDP optimizer. */
static void compare_gathered(const char *label, ct_optimizer *z, ct_optimizer *ddp, int root) {
    ct_optimizer *full = NULL;
    MUST(ct_zero1_gather_state(z, comm, root, &full));
    CHECK((R == root) == (full != NULL), "rank %d %s: gathered state %s", R, label, full ? "off root" : "missing");
    if (!full) return;
    CHECK(ct_optimizer_step_count(full) == ct_optimizer_step_count(ddp), "%s: gathered step count %lld vs %lld",
          label, (long long)ct_optimizer_step_count(full), (long long)ct_optimizer_step_count(ddp));
    CHECK(ct_optimizer_state_count(full) == ct_optimizer_state_count(ddp), "%s: state counts", label);
    for (int i = 0; i < ct_optimizer_state_count(ddp); i++) {
        const char *name;
        ct_tensor *t;
        MUST(ct_optimizer_state_get(ddp, i, &name, &t));
        double rel = rel_diff(ct_optimizer_state_find(full, name), t);
        CHECK(rel <= 1e-6, "rank %d %s: gathered '%s' differs from DDP's by %.3g relative", R, label, name, rel);
    }
    ct_optimizer_destroy(full);
}

static const char *kind_str(ct_optim_kind k) {
    return k == CT_OPTIM_SGD ? "sgd" : k == CT_OPTIM_ADAM ? "adam" : "adamw";
}

static void against_ddp(int trial, ct_optim_config cfg, ct_dtype dt, int64_t staging, double max_norm, bool big) {
    char label[160];
    snprintf(label, sizeof label, "trial %d %s%s %s staging %lld max_norm %g", trial, kind_str(cfg.optim),
             cfg.amsgrad ? "+amsgrad" : "", ct_dtype_name(dt), (long long)staging, max_norm);
    layout L = make_layout(10 + (uint32_t)trial, dt, big);
    store zs, ds;
    make_store(&zs, &L);
    make_store(&ds, &L);
    ct_optimizer *z, *ddp;
    MUST(ct_zero1_create_staged(&cfg, &zs.ps, comm, staging, &z));
    MUST(ct_optimizer_create(&cfg, &ds.ps, &ddp));
    bool norms_ok = true;
    for (int k = 0; k < STEPS; k++) {
        double zn, dn;
        set_grads(&zs, k);
        set_grads(&ds, k);
        MUST(ct_zero1_step(z, comm, &zs.ps.grads, &zs.ps.values, lr_of(k), scale_of(k), max_norm, &zn));
        ddp_step(ddp, &ds, k, max_norm, &dn);
        norms_ok &= fabs(zn - dn) <= 1e-6 * dn;
    }
    CHECK(norms_ok, "rank %d %s: grad norms differ from DDP's", R, label);
    compare_params(label, &zs, &ds);
    compare_gathered(label, z, ddp, trial % W);
    ct_optimizer_destroy(z);
    ct_optimizer_destroy(ddp);
    ct_params_free(&zs.ps);
    ct_params_free(&ds.ps);
}

/* Checkpoints both ways, then 10 more steps of each continued run against DDP. */
static void checkpoints(const char *dir) {
    char zfile[512], dfile[512], sfile[512];
    snprintf(zfile, sizeof zfile, "%s/zero1.h5", dir);
    snprintf(dfile, sizeof dfile, "%s/ddp.h5", dir);
    snprintf(sfile, sizeof sfile, "%s/sgd.h5", dir);
    ct_optim_config cfg = ct_optim_config_default();
    cfg.learning_rate = 0.01;
    cfg.weight_decay = 0.05;
    cfg.amsgrad = true;
    layout L = make_layout(3, CT_F32, false);
    store zs, ds;
    make_store(&zs, &L);
    make_store(&ds, &L);
    ct_optimizer *z, *ddp;
    MUST(ct_zero1_create_staged(&cfg, &zs.ps, comm, 200, &z));
    MUST(ct_optimizer_create(&cfg, &ds.ps, &ddp));
    double norm;
    for (int k = 0; k < 20; k++) {
        set_grads(&zs, k);
        set_grads(&ds, k);
        MUST(ct_zero1_step(z, comm, &zs.ps.grads, &zs.ps.values, lr_of(k), scale_of(k), 0.5, &norm));
        ddp_step(ddp, &ds, k, 0.5, &norm);
    }
    int root = W - 1;
    MUST(ct_zero1_save_h5(z, comm, root, zfile));
    if (R == 0) MUST(ct_optimizer_save_h5(ddp, dfile));
    MUST(ct_comm_barrier(comm));

    /* ZeRO-1's file in a plain optimizer (every rank reads it: the directory is shared here). */
    store ps_;
    make_store(&ps_, &L);
    ct_optimizer *plain;
    MUST(ct_optimizer_create(&cfg, &ps_.ps, &plain));
    MUST(ct_optimizer_load_h5(plain, zfile));
    CHECK(ct_optimizer_step_count(plain) == 20, "rank %d: loaded step count %lld", R,
          (long long)ct_optimizer_step_count(plain));
    for (int i = 0; i < ct_optimizer_state_count(ddp); i++) {
        const char *name;
        ct_tensor *t;
        MUST(ct_optimizer_state_get(ddp, i, &name, &t));
        double rel = rel_diff(ct_optimizer_state_find(plain, name), t);
        CHECK(rel <= 1e-6, "rank %d: ZeRO-1 checkpoint '%s' loaded plain differs from DDP's by %.3g", R, name, rel);
    }
    /* DDP's file into fresh shards; the parameters travel separately (model.h5). */
    store zs2;
    make_store(&zs2, &L);
    memcpy(zs2.ps.values.data, zs.ps.values.data, ct_tensor_nbytes(&zs.ps.values));
    ct_optimizer *z2;
    MUST(ct_zero1_create(&cfg, &zs2.ps, comm, &z2));
    MUST(ct_zero1_load_h5(z2, comm, 0, dfile));
    CHECK(ct_optimizer_step_count(z2) == 20, "rank %d: shards loaded step count %lld", R,
          (long long)ct_optimizer_step_count(z2));
    compare_gathered("DDP checkpoint loaded by ZeRO-1", z2, ddp, 0);
    /* Continue: z2 (resumed ZeRO-1) and plain-loaded-from-ZeRO (as DDP) against DDP uninterrupted. */
    memcpy(ps_.ps.values.data, zs.ps.values.data, ct_tensor_nbytes(&zs.ps.values));
    for (int k = 20; k < 30; k++) {
        set_grads(&zs2, k);
        set_grads(&ds, k);
        set_grads(&ps_, k);
        MUST(ct_zero1_step(z2, comm, &zs2.ps.grads, &zs2.ps.values, lr_of(k), scale_of(k), 0.5, &norm));
        ddp_step(ddp, &ds, k, 0.5, &norm);
        ddp_step(plain, &ps_, k, 0.5, &norm);
    }
    compare_params("resumed from DDP's checkpoint", &zs2, &ds);
    double rel = rel_diff(&ps_.ps.values, &ds.ps.values);
    CHECK(rel <= 1e-6, "rank %d: DDP resumed from ZeRO-1's checkpoint differs by %.3g", R, rel);

    /* Another optimizer's file: every rank fails, nothing changes. */
    if (R == 0) {
        ct_optim_config sgd = ct_optim_config_default();
        sgd.optim = CT_OPTIM_SGD;
        sgd.momentum = 0.9;
        ct_optimizer *o;
        MUST(ct_optimizer_create(&sgd, &ps_.ps, &o));
        MUST(ct_optimizer_save_h5(o, sfile));
        ct_optimizer_destroy(o);
    }
    MUST(ct_comm_barrier(comm));
    ct_status s = ct_zero1_load_h5(z2, comm, 0, sfile);
    const char *want = R == 0 ? "holds 'sgd' state, this run uses 'adamw'" : "failed on rank 0: see its log";
    CHECK(s == CT_ERR_CONFIG && strstr(ct_last_error(), want), "rank %d: loading sgd state -> %s: %s", R,
          ct_status_str(s), ct_last_error());
    CHECK(ct_optimizer_step_count(z2) == 30, "rank %d: a failed load changed the step count", R);

    /* A NaN in rank W-1's gradient: CT_ERR_NUMERIC on every rank, parameters unchanged. */
    ct_tensor before;
    MUST(ct_tensor_alloc(&before, CT_F32, CT_CPU, 1, (int64_t[]){ct_tensor_numel(&zs2.ps.values)}));
    memcpy(before.data, zs2.ps.values.data, ct_tensor_nbytes(&before));
    set_grads(&zs2, 30);
    if (R == W - 1) ct_tensor_set(zs2.ps.items[0].grad, 0, NAN);
    s = ct_zero1_step(z2, comm, &zs2.ps.grads, &zs2.ps.values, 0.01, 0.5, 1.0, &norm);
    CHECK(s == CT_ERR_NUMERIC && isnan(norm), "rank %d: NaN gradient -> %s, norm %g: %s", R, ct_status_str(s), norm,
          ct_last_error());
    CHECK(memcmp(before.data, zs2.ps.values.data, ct_tensor_nbytes(&before)) == 0 && ct_optimizer_step_count(z2) == 30,
          "rank %d: a failed step changed the parameters or the step count", R);
    ct_tensor_free(&before);

    ct_optimizer_destroy(z);
    ct_optimizer_destroy(z2);
    ct_optimizer_destroy(ddp);
    ct_optimizer_destroy(plain);
    ct_params_free(&zs.ps);
    ct_params_free(&zs2.ps);
    ct_params_free(&ds.ps);
    ct_params_free(&ps_.ps);
}

int main(void) {
    ct_test_begin("test_zero_mpi");
    ct_h5_quiet();
    MUST(ct_comm_mpi_create(60, &comm));
    R = comm->rank;
    W = comm->world_size;
    int64_t seed = (int64_t)ct_test_seed;
    ct_tensor st = ct_tensor_view(&seed, CT_I64, CT_CPU, 1, (int64_t[]){1});
    MUST(ct_comm_broadcast(comm, &st, 0));
    shared = (uint64_t)seed;
    if (R == 0) printf("test_zero_mpi: %d ranks share rank 0's seed %llu\n", W, (unsigned long long)shared);

    int trial = 0;
    for (int d = 0; d < 2; d++) {
        ct_dtype dt = d ? CT_F64 : CT_F32;
        ct_optim_config sgd = ct_optim_config_default(), adam = ct_optim_config_default(),
                        adamw = ct_optim_config_default();
        sgd.optim = CT_OPTIM_SGD;
        sgd.learning_rate = 0.01;
        sgd.momentum = 0.9;
        sgd.nesterov = true;
        sgd.weight_decay = 0.05;
        adam.optim = CT_OPTIM_ADAM;
        adam.learning_rate = 0.01;
        adam.weight_decay = 0.05;
        adamw.learning_rate = 0.01;
        adamw.weight_decay = 0.05;
        adamw.amsgrad = true;
        against_ddp(trial++, sgd, dt, 48, 0.5, false);
        against_ddp(trial++, adam, dt, CT_ZERO1_STAGING_BYTES, 0.0, false);
        against_ddp(trial++, adamw, dt, 1000, 0.5, d == 0);
        against_ddp(trial++, adamw, dt, 1, 1e9, false);
    }

    /* A directory every rank sees (one machine): rank 0's name, from the shared seed. */
    char dir[256];
    snprintf(dir, sizeof dir, "/tmp/ct_test_zero_mpi_%llu_%d", (unsigned long long)shared, W);
    if (R == 0) CHECK(mkdir(dir, 0700) == 0, "mkdir %s", dir);
    MUST(ct_comm_barrier(comm));
    checkpoints(dir);
    MUST(ct_comm_barrier(comm));
    if (R == 0) {
        static const char *files[] = {"zero1.h5", "ddp.h5", "sgd.h5"};
        for (int i = 0; i < 3; i++) {
            char p[512];
            snprintf(p, sizeof p, "%s/%s", dir, files[i]);
            unlink(p);
        }
        rmdir(dir);
    }
    int rc = ct_test_finish();
    ct_comm_free(comm);
    return rc;
}
