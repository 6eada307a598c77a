/* The MPI communicator under `mpirun -np N`: every collective against values each rank computes
 * locally (every rank can generate every other rank's data from the shared seed), so a wrong
 * block, a wrong root, a wrong reduction or a lost chunk shows up on the rank that received it.
 *
 * Integer-valued f32, dyadic f64 and i64 data make sums exact whatever order MPI adds in; random
 * f32 data checks the sum within rounding and that every rank got the bit-identical result (DDP
 * depends on it: ranks whose gradients differ in one bit drift apart). Also: broadcast from
 * non-zero roots, all_gather (and in place), gather_v with a rank that sends nothing, reduce-scatter,
 * non-blocking all-reduces waited in reverse order, all-reduce and broadcast split into chunks,
 * check_same with mismatching ranks, validation errors, and the timeout: rank 0 skips a barrier the
 * others enter, and they get CT_ERR_STATE after ~1 s instead of hanging. Each rank prints
 * "N passed, M failed" and exits non-zero on a failure; a collective that fails unexpectedly ends
 * the job at once (ct_comm_abort), so a broken build never leaves ranks waiting for each other. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dist/comm.h"
#include "testlib.h"

static ct_comm *comm;
static int R, W;        /* this rank, world size */
static uint64_t shared; /* rank 0's seed, the same on every rank */

/* A failing collective leaves the ranks out of step: report it and end the whole job. */
#define MUST(expr)                                                                                                   \
    do {                                                                                                             \
        ct_status m_s_ = (expr);                                                                                     \
        CHECK(m_s_ == CT_OK, "%s -> %s: %s", #expr, ct_status_str(m_s_), ct_last_error());                           \
        if (m_s_ != CT_OK) {                                                                                         \
            ct_test_finish();                                                                                        \
            ct_comm_abort(comm, 1);                                                                                  \
        }                                                                                                            \
    } while (0)

static uint64_t splitmix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Element i of rank q's data for test `tag`: a pure function of the shared seed, so every rank knows
 * every rank's data. */
static uint64_t h(uint64_t tag, int q, int64_t i) {
    return splitmix(splitmix(splitmix(shared ^ tag) + (uint64_t)q) + (uint64_t)i);
}

/* A non-zero integer in [-bound, bound]. */
static int64_t ival(uint64_t tag, int q, int64_t i, int64_t bound) {
    int64_t v = (int64_t)(h(tag, q, i) % (uint64_t)(2 * bound + 1)) - bound;
    return v ? v : 1;
}

/* A shared size in [lo, hi]. */
static int64_t shared_size(uint64_t tag, int64_t lo, int64_t hi) { return lo + (int64_t)(h(tag, -1, 0) % (uint64_t)(hi - lo + 1)); }

/* Rank q's value i for an exact test: integers that f32 sums exactly over the world (< 2^24),
 * dyadic f64 (k / 1024 with |k| < 2^40), i64 up to 2^62 / W so the sum cannot overflow. */
static double exact_value(ct_dtype dt, uint64_t tag, int q, int64_t i) {
    if (dt == CT_F32) return (double)ival(tag, q, i, (1 << 22) / W);
    if (dt == CT_F64) return (double)ival(tag, q, i, (int64_t)1 << 40) / 1024.0;
    return 0; /* i64 goes through exact_i64 */
}

static int64_t exact_i64(uint64_t tag, int q, int64_t i) { return ival(tag, q, i, ((int64_t)1 << 62) / W); }

static void fill_exact(ct_tensor *t, uint64_t tag, int q, int64_t offset) {
    int64_t n = ct_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        if (t->dtype == CT_I64)
            ((int64_t *)t->data)[i] = exact_i64(tag, q, offset + i);
        else
            ct_tensor_set(t, i, exact_value(t->dtype, tag, q, offset + i));
    }
}

static int64_t reduce_i64(int64_t a, int64_t b, ct_reduce op) {
    return op == CT_SUM ? a + b : op == CT_MIN ? (a < b ? a : b) : (a > b ? a : b);
}
static double reduce_f64(double a, double b, ct_reduce op) {
    return op == CT_SUM ? a + b : op == CT_MIN ? fmin(a, b) : fmax(a, b);
}

/* Counts elements of t that differ from the op-reduction over ranks of element offset + i. */
static int64_t count_wrong(const ct_tensor *t, uint64_t tag, ct_reduce op, int64_t offset) {
    int64_t n = ct_tensor_numel(t), wrong = 0;
    for (int64_t i = 0; i < n; i++) {
        if (t->dtype == CT_I64) {
            int64_t want = exact_i64(tag, 0, offset + i);
            for (int q = 1; q < W; q++) want = reduce_i64(want, exact_i64(tag, q, offset + i), op);
            wrong += ((int64_t *)t->data)[i] != want;
        } else {
            double want = exact_value(t->dtype, tag, 0, offset + i);
            for (int q = 1; q < W; q++) want = reduce_f64(want, exact_value(t->dtype, tag, q, offset + i), op);
            wrong += ct_tensor_get(t, i) != want;
        }
    }
    return wrong;
}

static const char *op_name(ct_reduce op) { return op == CT_SUM ? "sum" : op == CT_MIN ? "min" : "max"; }

static ct_tensor alloc1(ct_dtype dt, int64_t n) {
    if (n == 0) return ct_tensor_view(NULL, dt, CT_CPU, 1, &n);
    ct_tensor t;
    CT_ASSERT(ct_tensor_alloc(&t, dt, CT_CPU, 1, &n) == CT_OK);
    return t;
}

static void identity(void) {
    const char *size = getenv("OMPI_COMM_WORLD_SIZE"), *rank = getenv("OMPI_COMM_WORLD_RANK");
    const char *lrank = getenv("OMPI_COMM_WORLD_LOCAL_RANK"), *lsize = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    CHECK(strcmp(comm->ops->name, "mpi") == 0, "communicator '%s' under mpirun", comm->ops->name);
    CHECK(size && atoi(size) == W && rank && atoi(rank) == R, "rank %d/%d, mpirun says %s/%s", R, W,
          rank ? rank : "?", size ? size : "?");
    CHECK(lrank && atoi(lrank) == comm->local_rank && lsize && atoi(lsize) == comm->local_world_size,
          "local rank %d/%d, mpirun says %s/%s", comm->local_rank, comm->local_world_size, lrank ? lrank : "?",
          lsize ? lsize : "?");
    CHECK(W >= 2, "run this under mpirun with at least 2 ranks (world size %d)", W);
}

static void all_reduce_exact(void) {
    const ct_dtype dts[] = {CT_F32, CT_F64, CT_I64};
    const ct_reduce ops[] = {CT_SUM, CT_MIN, CT_MAX};
    for (int d = 0; d < 3; d++)
        for (int o = 0; o < 3; o++) {
            uint64_t tag = 100 + 10 * (uint64_t)d + (uint64_t)o;
            int64_t n = shared_size(tag, 1, 2000);
            ct_tensor t = alloc1(dts[d], n);
            /* 2-D when the size allows: only the element count matters. */
            if (n % 4 == 0) {
                int64_t shape[2] = {4, n / 4};
                CT_ASSERT(ct_tensor_reshape(&t, 2, shape, &t) == CT_OK);
            }
            fill_exact(&t, tag, R, 0);
            MUST(ct_comm_all_reduce(comm, &t, ops[o]));
            int64_t wrong = count_wrong(&t, tag, ops[o], 0);
            CHECK(wrong == 0, "all_reduce %s %s of %lld elements: %lld wrong", op_name(ops[o]), ct_dtype_name(dts[d]),
                  (long long)n, (long long)wrong);
            ct_tensor_free(&t);
        }
    /* The metric-state helpers. */
    double v[3];
    int64_t k[4];
    for (int i = 0; i < 3; i++) v[i] = exact_value(CT_F64, 150, R, i);
    for (int i = 0; i < 4; i++) k[i] = exact_i64(151, R, i);
    MUST(ct_comm_all_reduce_f64(comm, v, 3, CT_SUM));
    MUST(ct_comm_all_reduce_i64(comm, k, 4, CT_MIN));
    ct_tensor tv = ct_tensor_view(v, CT_F64, CT_CPU, 1, (int64_t[]){3});
    ct_tensor tk = ct_tensor_view(k, CT_I64, CT_CPU, 1, (int64_t[]){4});
    CHECK(count_wrong(&tv, 150, CT_SUM, 0) == 0 && count_wrong(&tk, 151, CT_MIN, 0) == 0, "all_reduce_f64/i64 helpers");
    MUST(ct_comm_all_reduce_f64(comm, NULL, 0, CT_MAX));
}

/* Random f32: the sum within rounding, and the same bits on every rank. */
static void all_reduce_random(void) {
    const int64_t sizes[] = {shared_size(200, 1, 64), shared_size(201, 1000, 5000), shared_size(202, 200000, 400000)};
    for (int s = 0; s < 3; s++) {
        int64_t n = sizes[s];
        ct_tensor t = alloc1(CT_F32, n);
        float *x = t.data;
        for (int64_t i = 0; i < n; i++) x[i] = (float)((double)(h(210 + s, R, i) >> 11) * 0x1p-53 * 2 - 1);
        MUST(ct_comm_all_reduce(comm, &t, CT_SUM));
        int64_t wrong = 0, worst = -1;
        for (int64_t i = 0; i < n; i++) {
            double sum = 0, abs_sum = 0;
            for (int q = 0; q < W; q++) {
                double y = (float)((double)(h(210 + s, q, i) >> 11) * 0x1p-53 * 2 - 1);
                sum += y;
                abs_sum += fabs(y);
            }
            if (!(fabs(x[i] - sum) <= 1e-6 * abs_sum)) {
                wrong++;
                worst = i;
            }
        }
        CHECK(wrong == 0, "all_reduce sum of %lld random f32: %lld beyond rounding (e.g. element %lld)", (long long)n,
              (long long)wrong, (long long)worst);
        ct_tensor all = alloc1(CT_F32, W * n);
        MUST(ct_comm_all_gather(comm, &t, &all));
        int differ = 0;
        for (int q = 1; q < W; q++) differ += memcmp(all.data, (float *)all.data + q * n, (size_t)n * sizeof(float)) != 0;
        CHECK(differ == 0, "all_reduce of %lld random f32: %d ranks got other bits than rank 0", (long long)n, differ);
        ct_tensor_free(&all);
        ct_tensor_free(&t);
    }
}

static void broadcast(void) {
    const ct_dtype dts[] = {CT_F64, CT_I64, CT_U8, CT_F32};
    const int roots[] = {W - 1, 1, W / 2, 1};
    for (int d = 0; d < 4; d++) {
        int root = roots[d];
        uint64_t tag = 300 + (uint64_t)d;
        int64_t shape[2] = {shared_size(tag, 1, 30), shared_size(tag + 50, 1, 40)};
        ct_tensor t;
        CT_ASSERT(ct_tensor_alloc(&t, dts[d], CT_CPU, 2, shape) == CT_OK);
        int64_t n = shape[0] * shape[1];
        /* Every rank starts with its own data; the root's must win. */
        for (int64_t i = 0; i < n; i++) ct_tensor_set(&t, i, (double)(1 + h(tag, R, i) % 200));
        MUST(ct_comm_broadcast(comm, &t, root));
        int64_t wrong = 0;
        for (int64_t i = 0; i < n; i++) wrong += ct_tensor_get(&t, i) != (double)(1 + h(tag, root, i) % 200);
        CHECK(wrong == 0, "broadcast of [%lld, %lld] %s from root %d: %lld elements are not the root's",
              (long long)shape[0], (long long)shape[1], ct_dtype_name(dts[d]), root, (long long)wrong);
        ct_tensor_free(&t);
    }
}

static void all_gather(void) {
    const ct_dtype dts[] = {CT_F32, CT_I64, CT_F64};
    for (int d = 0; d < 3; d++) {
        uint64_t tag = 400 + (uint64_t)d;
        int64_t n = shared_size(tag, 1, 500);
        ct_tensor in = alloc1(dts[d], n), out = alloc1(dts[d], W * n);
        fill_exact(&in, tag, R, 0);
        MUST(ct_comm_all_gather(comm, &in, &out));
        int64_t wrong = 0;
        for (int q = 0; q < W; q++) {
            ct_tensor block = ct_tensor_rows(&out, q * n, n);
            ct_tensor want = alloc1(dts[d], n);
            fill_exact(&want, tag, q, 0);
            wrong += memcmp(block.data, want.data, ct_tensor_nbytes(&want)) != 0;
            ct_tensor_free(&want);
        }
        CHECK(wrong == 0, "all_gather of %lld %s per rank: %lld blocks wrong", (long long)n, ct_dtype_name(dts[d]),
              (long long)wrong);

        /* In place, as ZeRO-1 gathers parameter shards: in is this rank's block of out. */
        for (int64_t i = 0; i < W * n; i++) ct_tensor_set(&out, i, -7.0);
        ct_tensor mine = ct_tensor_rows(&out, R * n, n);
        fill_exact(&mine, tag, R, 0);
        MUST(ct_comm_all_gather(comm, &mine, &out));
        wrong = 0;
        for (int q = 0; q < W; q++) {
            ct_tensor block = ct_tensor_rows(&out, q * n, n);
            ct_tensor want = alloc1(dts[d], n);
            fill_exact(&want, tag, q, 0);
            wrong += memcmp(block.data, want.data, ct_tensor_nbytes(&want)) != 0;
            ct_tensor_free(&want);
        }
        CHECK(wrong == 0, "in-place all_gather of %lld %s per rank: %lld blocks wrong", (long long)n,
              ct_dtype_name(dts[d]), (long long)wrong);
        ct_tensor_free(&in);
        ct_tensor_free(&out);
    }
}

/* Rank q sends counts[q] elements (rank 1 none); the root receives them in rank order. */
static void gather_v(void) {
    const ct_dtype dts[] = {CT_F64, CT_I64, CT_F32};
    const int roots[] = {0, W - 1, 1};
    for (int d = 0; d < 3; d++) {
        int root = roots[d];
        uint64_t tag = 500 + (uint64_t)d;
        int64_t total = 0, mine = 0;
        for (int q = 0; q < W; q++) {
            int64_t cq = q == 1 ? 0 : 1 + (int64_t)(h(tag, q, -1) % 9);
            if (q == R) mine = cq;
            total += cq;
        }
        ct_tensor in = alloc1(dts[d], mine), out;
        fill_exact(&in, tag, R, 0);
        MUST(ct_comm_gather_v(comm, &in, root, &out));
        if (R == root) {
            int64_t wrong = 0, off = 0;
            bool shape_ok = out.ndim == 1 && ct_tensor_numel(&out) == total && out.dtype == dts[d];
            for (int q = 0; shape_ok && q < W; q++) {
                int64_t cq = q == 1 ? 0 : 1 + (int64_t)(h(tag, q, -1) % 9);
                ct_tensor block = ct_tensor_rows(&out, off, cq), want = alloc1(dts[d], cq);
                fill_exact(&want, tag, q, 0);
                wrong += cq && memcmp(block.data, want.data, ct_tensor_nbytes(&want)) != 0;
                ct_tensor_free(&want);
                off += cq;
            }
            CHECK(shape_ok && wrong == 0, "gather_v of %s to root %d: %lld elements (want %lld), %lld blocks wrong",
                  ct_dtype_name(dts[d]), root, (long long)ct_tensor_numel(&out), (long long)total, (long long)wrong);
        } else
            CHECK(out.data == NULL && ct_tensor_numel(&out) == 0, "gather_v left %lld elements on non-root rank %d",
                  (long long)ct_tensor_numel(&out), R);
        ct_tensor_free(&out);
        ct_tensor_free(&in);
    }
    /* Nothing from anyone: an empty result. */
    ct_tensor none = alloc1(CT_I64, 0), out;
    MUST(ct_comm_gather_v(comm, &none, W - 1, &out));
    CHECK(out.data == NULL && ct_tensor_numel(&out) == 0, "empty gather_v: %lld elements", (long long)ct_tensor_numel(&out));
    /* Mismatched dtypes: every rank learns it from the counts round and fails the same way. */
    ct_tensor mixed = alloc1(R == W - 1 ? CT_F32 : CT_F64, 3);
    fill_exact(&mixed, 550, R, 0);
    char want[64];
    snprintf(want, sizeof want, "rank %d sends f32 but the root (rank 0) f64", W - 1);
    CHECK_ERR(ct_comm_gather_v(comm, &mixed, 0, &out), CT_ERR_DTYPE, "gather_v (rank ", want);
    CHECK(out.data == NULL, "failed gather_v left memory");
    ct_tensor_free(&mixed);
}

static void reduce_scatter(void) {
    const ct_dtype dts[] = {CT_F32, CT_F64, CT_I64};
    const ct_reduce ops[] = {CT_SUM, CT_MAX, CT_MIN};
    for (int d = 0; d < 3; d++)
        for (int o = 0; o < 3; o++) {
            uint64_t tag = 600 + 10 * (uint64_t)d + (uint64_t)o;
            int64_t n = shared_size(tag, 1, 700);
            ct_tensor in = alloc1(dts[d], W * n), out = alloc1(dts[d], n);
            fill_exact(&in, tag, R, 0);
            MUST(ct_comm_reduce_scatter(comm, &in, &out, ops[o]));
            int64_t wrong = count_wrong(&out, tag, ops[o], R * n);
            CHECK(wrong == 0, "reduce_scatter %s %s, block %lld: %lld wrong", op_name(ops[o]), ct_dtype_name(dts[d]),
                  (long long)n, (long long)wrong);
            ct_tensor_free(&in);
            ct_tensor_free(&out);
        }
}

/* Buckets started one after another (as backward produces them) and waited in reverse order. */
static void non_blocking(ct_comm *c, const char *label, uint64_t tag0, int64_t big) {
    enum { K = 6 };
    ct_tensor b[K];
    ct_comm_request *req[K];
    const ct_dtype dts[K] = {CT_F32, CT_F32, CT_F64, CT_F32, CT_I64, CT_F32};
    for (int k = 0; k < K; k++) {
        int64_t n = k == 3 ? 0 : shared_size(tag0 + (uint64_t)k, 1, k == 1 ? big : big / 30 + 1);
        b[k] = alloc1(dts[k], n);
        fill_exact(&b[k], tag0 + (uint64_t)k, R, 0);
        MUST(ct_comm_all_reduce_start(c, &b[k], k == 4 ? CT_MAX : CT_SUM, &req[k]));
    }
    for (int k = K - 1; k >= 0; k--) MUST(ct_comm_wait(c, req[k]));
    for (int k = 0; k < K; k++) {
        int64_t wrong = count_wrong(&b[k], tag0 + (uint64_t)k, k == 4 ? CT_MAX : CT_SUM, 0);
        CHECK(wrong == 0, "%s: bucket %d (%lld %s): %lld wrong", label, k, (long long)ct_tensor_numel(&b[k]),
              ct_dtype_name(dts[k]), (long long)wrong);
        ct_tensor_free(&b[k]);
    }
}

/* A second communicator whose MPI calls move at most 5 elements: all-reduce and broadcast must
 * split and reassemble. Destroying it must leave the first one (and MPI) working. */
static void chunked(void) {
    setenv("CT_MPI_MAX_COUNT", "5", 1);
    ct_comm *c = NULL;
    MUST(ct_comm_mpi_create(30, &c));
    unsetenv("CT_MPI_MAX_COUNT");
    ct_tensor t = alloc1(CT_F64, 23);
    fill_exact(&t, 700, R, 0);
    MUST(ct_comm_all_reduce(c, &t, CT_SUM));
    CHECK(count_wrong(&t, 700, CT_SUM, 0) == 0, "chunked all_reduce of 23 elements in 5s");
    non_blocking(c, "chunked non-blocking", 710, 60); /* 12 chunks at most */
    for (int64_t i = 0; i < 23; i++) ct_tensor_set(&t, i, (double)(h(720, R, i) % 1000));
    MUST(ct_comm_broadcast(c, &t, W - 1));
    int64_t wrong = 0;
    for (int64_t i = 0; i < 23; i++) wrong += ct_tensor_get(&t, i) != (double)(h(720, W - 1, i) % 1000);
    CHECK(wrong == 0, "chunked broadcast: %lld wrong", (long long)wrong);
    ct_tensor_free(&t);
    ct_comm_free(c);

    /* Launched by mpirun with several ranks, the default is MPI. */
    MUST(ct_comm_create_default(30, &c));
    CHECK(strcmp(c->ops->name, "mpi") == 0 && c->world_size == W && c->rank == R, "default communicator: %s %d/%d",
          c->ops->name, c->rank, c->world_size);
    MUST(ct_comm_barrier(c));
    ct_comm_free(c);
}

static void check_same(void) {
    MUST(ct_comm_check_same(comm, shared * 3 + 1, "config hash"));
    /* Rank 1 and (with 3 or more ranks) the last rank hold another value. */
    bool odd = R == 1 || (W >= 3 && R == W - 1);
    uint64_t v = odd ? shared * 3 + 2 + (uint64_t)R : shared * 3 + 1;
    char r1[64], rl[64];
    snprintf(r1, sizeof r1, "rank 1 has %#llx", (unsigned long long)(shared * 3 + 3));
    snprintf(rl, sizeof rl, "rank %d has %#llx", W - 1, (unsigned long long)(shared * 3 + 2 + (uint64_t)(W - 1)));
    char prefix[64];
    snprintf(prefix, sizeof prefix, "check_same (rank %d/%d): config hash differs between ranks: rank 0 has", R, W);
    CHECK_ERR(ct_comm_check_same(comm, v, "config hash"), CT_ERR_CONFIG, prefix, r1, rl);
}

/* Errors found before any communication, the same on every rank, so nobody is left waiting. */
static void validation(void) {
    int32_t ints[4] = {1, 2, 3, 4};
    int64_t four = 4;
    ct_tensor i32 = ct_tensor_view(ints, CT_I32, CT_CPU, 1, &four);
    char prefix[64], root[64];
    snprintf(prefix, sizeof prefix, "all_reduce (rank %d/%d): ", R, W);
    CHECK_ERR(ct_comm_all_reduce(comm, &i32, CT_SUM), CT_ERR_DTYPE, prefix, "f32, f64 or i64");
    snprintf(prefix, sizeof prefix, "broadcast (rank %d/%d): ", R, W);
    snprintf(root, sizeof root, "root %d outside [0, %d)", W, W);
    ct_tensor f = alloc1(CT_F32, 4);
    CHECK_ERR(ct_comm_broadcast(comm, &f, W), CT_ERR_INVALID_ARG, prefix, root);
    ct_tensor gpu = f;
    gpu.device = (ct_device){CT_DEVICE_CUDA, 0};
    snprintf(prefix, sizeof prefix, "all_reduce (rank %d/%d): ", R, W);
    CHECK_ERR(ct_comm_all_reduce(comm, &gpu, CT_SUM), CT_ERR_DEVICE, prefix, "cuda:0", "MPI collectives take CPU tensors");
    snprintf(prefix, sizeof prefix, "all_gather (rank %d/%d): ", R, W);
    CHECK_ERR(ct_comm_all_gather(comm, &f, &f), CT_ERR_SHAPE, prefix, "world size");
    ct_tensor_free(&f);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Rank 0 skips a barrier the others enter: they must give up after ~1 s with CT_ERR_STATE, and the
 * communicator must refuse further work. Rank 0 then enters the barrier late, which completes the
 * given-up ones, so everything can still end cleanly. */
static void timeout(void) {
    ct_comm *t = NULL;
    MUST(ct_comm_mpi_create(1.0, &t));
    if (R != 0) {
        double t0 = now_s();
        ct_status s = ct_comm_barrier(t);
        double took = now_s() - t0;
        char want[128];
        snprintf(want, sizeof want, "barrier (rank %d/%d): no answer from the other ranks within 1 s (ddp_timeout)", R, W);
        CHECK_ERR(s, CT_ERR_STATE, want);
        CHECK(took >= 0.99 && took < 3.0, "the barrier gave up after %.3f s (timeout 1 s)", took);
        ct_tensor one = alloc1(CT_F64, 1);
        CHECK_ERR(ct_comm_all_reduce(t, &one, CT_SUM), CT_ERR_STATE, "unusable", "earlier barrier was given up");
        ct_tensor_free(&one);
    }
    MUST(ct_comm_barrier(comm));
    if (R == 0) MUST(ct_comm_barrier(t));
    ct_comm_free(t);
}

int main(void) {
    ct_test_begin("test_comm_mpi");
    MUST(ct_comm_mpi_create(30, &comm));
    R = comm->rank;
    W = comm->world_size;
    int64_t seed = (int64_t)ct_test_seed;
    ct_tensor st = ct_tensor_view(&seed, CT_I64, CT_CPU, 1, (int64_t[]){1});
    MUST(ct_comm_broadcast(comm, &st, 0));
    shared = (uint64_t)seed;
    if (R == 0) printf("test_comm_mpi: %d ranks share rank 0's seed %llu\n", W, (unsigned long long)shared);

    identity();
    all_reduce_exact();
    all_reduce_random();
    broadcast();
    all_gather();
    gather_v();
    reduce_scatter();
    non_blocking(comm, "non-blocking", 800, 100000);
    chunked();
    check_same();
    validation();
    timeout();

    /* MPI still works after the given-up barrier and the extra communicators. */
    int64_t ones = 1;
    MUST(ct_comm_all_reduce_i64(comm, &ones, 1, CT_SUM));
    CHECK(ones == W, "final all_reduce: %lld, expected %d", (long long)ones, W);
    int rc = ct_test_finish();
    ct_comm_free(comm);
    return rc;
}
