/* The communicator conformance suite (see comm_conformance.h): the checks every communicator's test
 * runs, written once against dist/comm.h. Data is generated on the host from the shared seed, copied
 * to the tensor's device for the collective and read back to be compared, so the same check runs on
 * CPU tensors (single, MPI) and on GPU tensors (NCCL). */
#include "comm_conformance.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const ct_comm_test_sizes ct_comm_test_host_sizes = {
    .all_reduce_max = 2000,
    .random = {{1, 64}, {1000, 5000}, {200000, 400000}},
    .broadcast_rows = 30,
    .broadcast_cols = 40,
    .all_gather_max = 500,
    .gather_v_max = 9,
    .reduce_scatter_max = 700,
    .non_blocking_big = 100000,
};

const ct_comm_test_sizes ct_comm_test_gpu_sizes = {
    .all_reduce_max = 300000,
    .random = {{100000, 300000}},
    .broadcast_rows = 300,
    .broadcast_cols = 400,
    .all_gather_max = 5000,
    .gather_v_max = 900,
    .reduce_scatter_max = 7000,
    .non_blocking_big = 1000000,
};

static uint64_t splitmix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* A pure function of the shared seed, so every rank knows every rank's data. */
uint64_t ct_comm_test_hash(const ct_comm_test *ct, uint64_t tag, int q, int64_t i) {
    return splitmix(splitmix(splitmix(ct->shared ^ tag) + (uint64_t)q) + (uint64_t)i);
}

/* A non-zero integer in [-bound, bound]. */
static int64_t ival(const ct_comm_test *ct, uint64_t tag, int q, int64_t i, int64_t bound) {
    /* in uint64: with one rank the i64 bound is 2^62, and 2 * bound + 1 is past INT64_MAX */
    int64_t v = (int64_t)(ct_comm_test_hash(ct, tag, q, i) % (2 * (uint64_t)bound + 1)) - bound;
    return v ? v : 1;
}

int64_t ct_comm_test_size(const ct_comm_test *ct, uint64_t tag, int64_t lo, int64_t hi) {
    return lo + (int64_t)(ct_comm_test_hash(ct, tag, -1, 0) % (uint64_t)(hi - lo + 1));
}

/* Rank q's value i for an exact test: integers that f32 sums exactly over the world (< 2^24),
 * dyadic f64 (k / 1024 with |k| < 2^40), i64 up to 2^62 / W so the sum cannot overflow. */
static double exact_value(const ct_comm_test *ct, ct_dtype dt, uint64_t tag, int q, int64_t i) {
    if (dt == CT_F32) return (double)ival(ct, tag, q, i, (1 << 22) / ct->W);
    return (double)ival(ct, tag, q, i, (int64_t)1 << 40) / 1024.0;
}

static int64_t exact_i64(const ct_comm_test *ct, uint64_t tag, int q, int64_t i) {
    return ival(ct, tag, q, i, ((int64_t)1 << 62) / ct->W);
}

void ct_comm_test_fill(const ct_comm_test *ct, ct_tensor *t, uint64_t tag, int q, int64_t offset) {
    int64_t n = ct_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        if (t->dtype == CT_I64)
            ((int64_t *)t->data)[i] = exact_i64(ct, tag, q, offset + i);
        else
            ct_tensor_set(t, i, exact_value(ct, t->dtype, tag, q, offset + i));
    }
}

static int64_t reduce_i64(int64_t a, int64_t b, ct_reduce op) {
    return op == CT_SUM ? a + b : op == CT_MIN ? (a < b ? a : b) : (a > b ? a : b);
}
static double reduce_f64(double a, double b, ct_reduce op) {
    return op == CT_SUM ? a + b : op == CT_MIN ? fmin(a, b) : fmax(a, b);
}

int64_t ct_comm_test_wrong(const ct_comm_test *ct, const ct_tensor *t, uint64_t tag, ct_reduce op, int64_t offset) {
    int64_t n = ct_tensor_numel(t), wrong = 0;
    for (int64_t i = 0; i < n; i++) {
        if (t->dtype == CT_I64) {
            int64_t want = exact_i64(ct, tag, 0, offset + i);
            for (int q = 1; q < ct->W; q++) want = reduce_i64(want, exact_i64(ct, tag, q, offset + i), op);
            wrong += ((int64_t *)t->data)[i] != want;
        } else {
            double want = exact_value(ct, t->dtype, tag, 0, offset + i);
            for (int q = 1; q < ct->W; q++) want = reduce_f64(want, exact_value(ct, t->dtype, tag, q, offset + i), op);
            wrong += ct_tensor_get(t, i) != want;
        }
    }
    return wrong;
}

const char *ct_comm_test_op_name(ct_reduce op) { return op == CT_SUM ? "sum" : op == CT_MIN ? "min" : "max"; }

ct_tensor ct_comm_test_host(ct_dtype dt, int64_t n) {
    if (n == 0) return ct_tensor_view(NULL, dt, CT_CPU, 1, &n);
    ct_tensor t;
    CT_ASSERT(ct_tensor_alloc(&t, dt, CT_CPU, 1, &n) == CT_OK);
    return t;
}

/* A copy of t on dev (an empty view when t has no elements). */
static ct_tensor copy_on(ct_comm_test *ct, const ct_tensor *t, ct_device dev) {
    ct_tensor c;
    if (ct_tensor_numel(t) == 0) return ct_tensor_view(NULL, t->dtype, dev, t->ndim, t->shape);
    CT_COMM_MUST(ct, ct_tensor_alloc(&c, t->dtype, dev, t->ndim, t->shape));
    CT_COMM_MUST(ct, ct_tensor_copy_to(&c, t));
    return c;
}

ct_tensor ct_comm_test_to_device(ct_comm_test *ct, const ct_tensor *host) { return copy_on(ct, host, ct->device); }
ct_tensor ct_comm_test_to_host(ct_comm_test *ct, const ct_tensor *t) { return copy_on(ct, t, CT_CPU); }

/* A zeroed 1-D tensor of n elements on the test's device. */
static ct_tensor device1(ct_comm_test *ct, ct_dtype dt, int64_t n) {
    if (n == 0) return ct_tensor_view(NULL, dt, ct->device, 1, &n);
    ct_tensor t;
    CT_COMM_MUST(ct, ct_tensor_alloc(&t, dt, ct->device, 1, &n));
    return t;
}

double ct_comm_test_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void ct_comm_test_init(ct_comm_test *ct, ct_comm *c, ct_device device, const ct_comm_test_sizes *sizes,
                       ct_status (*create)(double timeout_s, ct_comm **out)) {
    memset(ct, 0, sizeof *ct);
    ct->comm = c;
    ct->device = device;
    ct->sizes = sizes;
    ct->create = create;
    ct->R = c->rank;
    ct->W = c->world_size;
    if (device.kind != CT_DEVICE_CPU) {
        char dev[16];
        snprintf(ct->where, sizeof ct->where, " on %s", ct_device_str(device, dev, sizeof dev));
    }
    int64_t seed = (int64_t)ct_test_seed;
    ct_tensor st = ct_tensor_view(&seed, CT_I64, CT_CPU, 1, (int64_t[]){1});
    CT_COMM_MUST(ct, ct_comm_broadcast(c, &st, 0));
    ct->shared = (uint64_t)seed;
    if (ct->R == 0)
        printf("%s communicator: %d rank(s) share rank 0's seed %llu; tensors on %s\n", c->ops->name, ct->W,
               (unsigned long long)ct->shared, ct->where[0] ? ct->where + 4 : "cpu");
}

void ct_comm_test_identity(ct_comm_test *ct) {
    ct_comm *c = ct->comm;
    CHECK(c->world_size >= 1 && c->rank >= 0 && c->rank < c->world_size, "%s: rank %d of %d", c->ops->name, c->rank,
          c->world_size);
    CHECK(c->local_world_size >= 1 && c->local_world_size <= c->world_size && c->local_rank >= 0 &&
              c->local_rank < c->local_world_size,
          "%s: local rank %d of %d (world %d)", c->ops->name, c->local_rank, c->local_world_size, c->world_size);
    CHECK(c->timeout_s > 0, "%s: timeout %g", c->ops->name, c->timeout_s);
}

void ct_comm_test_all_reduce_exact(ct_comm_test *ct) {
    const ct_dtype dts[] = {CT_F32, CT_F64, CT_I64};
    const ct_reduce ops[] = {CT_SUM, CT_MIN, CT_MAX};
    for (int d = 0; d < 3; d++)
        for (int o = 0; o < 3; o++) {
            uint64_t tag = 100 + 10 * (uint64_t)d + (uint64_t)o;
            int64_t n = ct_comm_test_size(ct, tag, 1, ct->sizes->all_reduce_max);
            ct_tensor t = ct_comm_test_host(dts[d], n);
            /* 2-D when the size allows: only the element count matters. */
            if (n % 4 == 0) {
                int64_t shape[2] = {4, n / 4};
                CT_ASSERT(ct_tensor_reshape(&t, 2, shape, &t) == CT_OK);
            }
            ct_comm_test_fill(ct, &t, tag, ct->R, 0);
            ct_tensor g = ct_comm_test_to_device(ct, &t);
            CT_COMM_MUST(ct, ct_comm_all_reduce(ct->comm, &g, ops[o]));
            ct_tensor back = ct_comm_test_to_host(ct, &g);
            int64_t wrong = ct_comm_test_wrong(ct, &back, tag, ops[o], 0);
            CHECK(wrong == 0, "all_reduce %s %s of %lld elements%s: %lld wrong", ct_comm_test_op_name(ops[o]),
                  ct_dtype_name(dts[d]), (long long)n, ct->where, (long long)wrong);
            ct_tensor_free(&back);
            ct_tensor_free(&g);
            ct_tensor_free(&t);
        }
    /* The metric-state helpers (host memory whatever the communicator). */
    double v[3];
    int64_t k[4];
    for (int i = 0; i < 3; i++) v[i] = exact_value(ct, CT_F64, 150, ct->R, i);
    for (int i = 0; i < 4; i++) k[i] = exact_i64(ct, 151, ct->R, i);
    CT_COMM_MUST(ct, ct_comm_all_reduce_f64(ct->comm, v, 3, CT_SUM));
    CT_COMM_MUST(ct, ct_comm_all_reduce_i64(ct->comm, k, 4, CT_MIN));
    ct_tensor tv = ct_tensor_view(v, CT_F64, CT_CPU, 1, (int64_t[]){3});
    ct_tensor tk = ct_tensor_view(k, CT_I64, CT_CPU, 1, (int64_t[]){4});
    CHECK(ct_comm_test_wrong(ct, &tv, 150, CT_SUM, 0) == 0 && ct_comm_test_wrong(ct, &tk, 151, CT_MIN, 0) == 0,
          "all_reduce_f64/i64 helpers on the %s communicator", ct->comm->ops->name);
    CT_COMM_MUST(ct, ct_comm_all_reduce_f64(ct->comm, NULL, 0, CT_MAX));
}

static double random_value(const ct_comm_test *ct, uint64_t tag, int q, int64_t i) {
    return (float)((double)(ct_comm_test_hash(ct, tag, q, i) >> 11) * 0x1p-53 * 2 - 1);
}

void ct_comm_test_all_reduce_random(ct_comm_test *ct) {
    for (int s = 0; s < 3; s++) {
        const int64_t *range = ct->sizes->random[s];
        if (range[1] == 0) continue;
        int64_t n = ct_comm_test_size(ct, 200 + (uint64_t)s, range[0], range[1]);
        uint64_t tag = 210 + (uint64_t)s;
        ct_tensor t = ct_comm_test_host(CT_F32, n);
        float *x = t.data;
        for (int64_t i = 0; i < n; i++) x[i] = (float)random_value(ct, tag, ct->R, i);
        ct_tensor g = ct_comm_test_to_device(ct, &t);
        CT_COMM_MUST(ct, ct_comm_all_reduce(ct->comm, &g, CT_SUM));
        ct_tensor back = ct_comm_test_to_host(ct, &g);
        const float *y = back.data;
        int64_t wrong = 0, worst = -1;
        for (int64_t i = 0; i < n; i++) {
            double sum = 0, abs_sum = 0;
            for (int q = 0; q < ct->W; q++) {
                double v = random_value(ct, tag, q, i);
                sum += v;
                abs_sum += fabs(v);
            }
            if (!(fabs(y[i] - sum) <= 1e-6 * abs_sum)) {
                wrong++;
                worst = i;
            }
        }
        CHECK(wrong == 0, "all_reduce sum of %lld random f32%s: %lld beyond rounding (e.g. element %lld)",
              (long long)n, ct->where, (long long)wrong, (long long)worst);
        ct_tensor all = device1(ct, CT_F32, ct->W * n);
        CT_COMM_MUST(ct, ct_comm_all_gather(ct->comm, &g, &all));
        ct_tensor all_h = ct_comm_test_to_host(ct, &all);
        int differ = 0;
        for (int q = 1; q < ct->W; q++)
            differ += memcmp(all_h.data, (float *)all_h.data + q * n, (size_t)n * sizeof(float)) != 0;
        CHECK(differ == 0, "all_reduce of %lld random f32%s: %d ranks got other bits than rank 0", (long long)n,
              ct->where, differ);
        ct_tensor ts[5] = {t, g, back, all, all_h};
        for (int i = 0; i < 5; i++) ct_tensor_free(&ts[i]);
    }
}

void ct_comm_test_broadcast(ct_comm_test *ct) {
    const ct_dtype dts[] = {CT_F64, CT_I64, CT_U8, CT_F32};
    const int W = ct->W, roots[] = {W - 1, 1 % W, W / 2, 1 % W};
    for (int d = 0; d < 4; d++) {
        int root = roots[d];
        uint64_t tag = 300 + (uint64_t)d;
        int64_t shape[2] = {ct_comm_test_size(ct, tag, 1, ct->sizes->broadcast_rows),
                            ct_comm_test_size(ct, tag + 50, 1, ct->sizes->broadcast_cols)};
        ct_tensor t;
        CT_ASSERT(ct_tensor_alloc(&t, dts[d], CT_CPU, 2, shape) == CT_OK);
        int64_t n = shape[0] * shape[1];
        /* Every rank starts with its own data; the root's must win. */
        for (int64_t i = 0; i < n; i++) ct_tensor_set(&t, i, (double)(1 + ct_comm_test_hash(ct, tag, ct->R, i) % 200));
        ct_tensor g = ct_comm_test_to_device(ct, &t);
        CT_COMM_MUST(ct, ct_comm_broadcast(ct->comm, &g, root));
        ct_tensor back = ct_comm_test_to_host(ct, &g);
        int64_t wrong = 0;
        for (int64_t i = 0; i < n; i++)
            wrong += ct_tensor_get(&back, i) != (double)(1 + ct_comm_test_hash(ct, tag, root, i) % 200);
        CHECK(wrong == 0, "broadcast of [%lld, %lld] %s from root %d%s: %lld elements are not the root's",
              (long long)shape[0], (long long)shape[1], ct_dtype_name(dts[d]), root, ct->where, (long long)wrong);
        ct_tensor_free(&back);
        ct_tensor_free(&g);
        ct_tensor_free(&t);
    }
}

/* Blocks of the gathered host tensor that are not rank q's data. */
static int64_t blocks_wrong(const ct_comm_test *ct, const ct_tensor *out_h, ct_dtype dt, uint64_t tag, int64_t n) {
    int64_t wrong = 0;
    for (int q = 0; q < ct->W; q++) {
        ct_tensor block = ct_tensor_rows(out_h, q * n, n);
        ct_tensor want = ct_comm_test_host(dt, n);
        ct_comm_test_fill(ct, &want, tag, q, 0);
        wrong += memcmp(block.data, want.data, ct_tensor_nbytes(&want)) != 0;
        ct_tensor_free(&want);
    }
    return wrong;
}

void ct_comm_test_all_gather(ct_comm_test *ct) {
    const ct_dtype dts[] = {CT_F32, CT_I64, CT_F64};
    for (int d = 0; d < 3; d++) {
        uint64_t tag = 400 + (uint64_t)d;
        int64_t n = ct_comm_test_size(ct, tag, 1, ct->sizes->all_gather_max), wn = ct->W * n;
        ct_tensor in = ct_comm_test_host(dts[d], n);
        ct_comm_test_fill(ct, &in, tag, ct->R, 0);
        ct_tensor gin = ct_comm_test_to_device(ct, &in), gout = device1(ct, dts[d], wn);
        CT_COMM_MUST(ct, ct_comm_all_gather(ct->comm, &gin, &gout));
        ct_tensor out_h = ct_comm_test_to_host(ct, &gout);
        int64_t wrong = blocks_wrong(ct, &out_h, dts[d], tag, n);
        CHECK(wrong == 0, "all_gather of %lld %s per rank%s: %lld blocks wrong", (long long)n, ct_dtype_name(dts[d]),
              ct->where, (long long)wrong);
        ct_tensor_free(&out_h);

        /* In place, as ZeRO-1 gathers parameter shards: in is this rank's block of out. */
        ct_tensor junk = ct_comm_test_host(dts[d], wn);
        for (int64_t i = 0; i < wn; i++) ct_tensor_set(&junk, i, -7.0);
        ct_tensor mine = ct_tensor_rows(&junk, ct->R * n, n);
        ct_comm_test_fill(ct, &mine, tag, ct->R, 0);
        CT_COMM_MUST(ct, ct_tensor_copy_to(&gout, &junk));
        ct_tensor gmine = ct_tensor_rows(&gout, ct->R * n, n);
        CT_COMM_MUST(ct, ct_comm_all_gather(ct->comm, &gmine, &gout));
        out_h = ct_comm_test_to_host(ct, &gout);
        wrong = blocks_wrong(ct, &out_h, dts[d], tag, n);
        CHECK(wrong == 0, "in-place all_gather of %lld %s per rank%s: %lld blocks wrong", (long long)n,
              ct_dtype_name(dts[d]), ct->where, (long long)wrong);
        ct_tensor ts[5] = {in, gin, gout, out_h, junk};
        for (int i = 0; i < 5; i++) ct_tensor_free(&ts[i]);
    }
}

static int64_t gv_count(const ct_comm_test *ct, uint64_t tag, int q) {
    return q == 1 ? 0 : 1 + (int64_t)(ct_comm_test_hash(ct, tag, q, -1) % (uint64_t)ct->sizes->gather_v_max);
}

void ct_comm_test_gather_v(ct_comm_test *ct) {
    const ct_dtype dts[] = {CT_F64, CT_I64, CT_F32};
    const int W = ct->W, R = ct->R, roots[] = {0, W - 1, 1 % W};
    for (int d = 0; d < 3; d++) {
        int root = roots[d];
        uint64_t tag = 500 + (uint64_t)d;
        int64_t total = 0, mine = gv_count(ct, tag, R);
        for (int q = 0; q < W; q++) total += gv_count(ct, tag, q);
        ct_tensor in = ct_comm_test_host(dts[d], mine), out;
        ct_comm_test_fill(ct, &in, tag, R, 0);
        ct_tensor gin = ct_comm_test_to_device(ct, &in);
        CT_COMM_MUST(ct, ct_comm_gather_v(ct->comm, &gin, root, &out));
        if (R == root) {
            bool ok = out.ndim == 1 && ct_tensor_numel(&out) == total && out.dtype == dts[d] &&
                      ct_device_eq(out.device, ct->device);
            int64_t wrong = 0, off = 0;
            ct_tensor out_h = ok ? ct_comm_test_to_host(ct, &out) : (ct_tensor){0};
            for (int q = 0; ok && q < W; q++) {
                int64_t cq = gv_count(ct, tag, q);
                ct_tensor block = ct_tensor_rows(&out_h, off, cq), want = ct_comm_test_host(dts[d], cq);
                ct_comm_test_fill(ct, &want, tag, q, 0);
                wrong += cq && memcmp(block.data, want.data, ct_tensor_nbytes(&want)) != 0;
                ct_tensor_free(&want);
                off += cq;
            }
            CHECK(ok && wrong == 0, "gather_v of %s to root %d%s: %lld elements (want %lld), %lld blocks wrong",
                  ct_dtype_name(dts[d]), root, ct->where, (long long)ct_tensor_numel(&out), (long long)total,
                  (long long)wrong);
            ct_tensor_free(&out_h);
        } else
            CHECK(out.data == NULL && ct_tensor_numel(&out) == 0, "gather_v left %lld elements on non-root rank %d",
                  (long long)ct_tensor_numel(&out), R);
        ct_tensor_free(&out);
        ct_tensor_free(&gin);
        ct_tensor_free(&in);
    }
    /* Nothing from anyone (host tensors): an empty result. */
    ct_tensor none = ct_comm_test_host(CT_I64, 0), out;
    CT_COMM_MUST(ct, ct_comm_gather_v(ct->comm, &none, W - 1, &out));
    CHECK(out.data == NULL && ct_tensor_numel(&out) == 0, "empty gather_v: %lld elements",
          (long long)ct_tensor_numel(&out));
    /* Mismatched dtypes: every rank learns it from the counts round and fails the same way. */
    if (W < 2) return;
    ct_tensor mixed = ct_comm_test_host(R == W - 1 ? CT_F32 : CT_F64, 3);
    ct_comm_test_fill(ct, &mixed, 550, R, 0);
    ct_tensor gmixed = ct_comm_test_to_device(ct, &mixed);
    char want[64];
    snprintf(want, sizeof want, "rank %d sends f32 but the root (rank 0) f64", W - 1);
    CHECK_ERR(ct_comm_gather_v(ct->comm, &gmixed, 0, &out), CT_ERR_DTYPE, "gather_v (rank ", want);
    CHECK(out.data == NULL, "failed gather_v left memory");
    ct_tensor_free(&gmixed);
    ct_tensor_free(&mixed);
}

void ct_comm_test_reduce_scatter(ct_comm_test *ct) {
    const ct_dtype dts[] = {CT_F32, CT_F64, CT_I64};
    const ct_reduce ops[] = {CT_SUM, CT_MAX, CT_MIN};
    for (int d = 0; d < 3; d++)
        for (int o = 0; o < 3; o++) {
            uint64_t tag = 600 + 10 * (uint64_t)d + (uint64_t)o;
            int64_t n = ct_comm_test_size(ct, tag, 1, ct->sizes->reduce_scatter_max);
            ct_tensor in = ct_comm_test_host(dts[d], ct->W * n);
            ct_comm_test_fill(ct, &in, tag, ct->R, 0);
            ct_tensor gin = ct_comm_test_to_device(ct, &in), gout = device1(ct, dts[d], n);
            CT_COMM_MUST(ct, ct_comm_reduce_scatter(ct->comm, &gin, &gout, ops[o]));
            ct_tensor out_h = ct_comm_test_to_host(ct, &gout);
            int64_t wrong = ct_comm_test_wrong(ct, &out_h, tag, ops[o], ct->R * n);
            CHECK(wrong == 0, "reduce_scatter %s %s%s, block %lld: %lld wrong", ct_comm_test_op_name(ops[o]),
                  ct_dtype_name(dts[d]), ct->where, (long long)n, (long long)wrong);
            ct_tensor ts[4] = {in, gin, gout, out_h};
            for (int i = 0; i < 4; i++) ct_tensor_free(&ts[i]);
        }
}

void ct_comm_test_non_blocking(ct_comm_test *ct, ct_comm *c, const char *label, uint64_t tag0, int64_t big) {
    enum { K = 6 };
    ct_tensor b[K];
    ct_comm_request *req[K];
    const ct_dtype dts[K] = {CT_F32, CT_F32, CT_F64, CT_F32, CT_I64, CT_F32};
    for (int k = 0; k < K; k++) {
        int64_t n = k == 3 ? 0 : ct_comm_test_size(ct, tag0 + (uint64_t)k, 1, k == 1 ? big : big / 30 + 1);
        ct_tensor h0 = ct_comm_test_host(dts[k], n);
        ct_comm_test_fill(ct, &h0, tag0 + (uint64_t)k, ct->R, 0);
        b[k] = ct_comm_test_to_device(ct, &h0);
        ct_tensor_free(&h0);
        CT_COMM_MUST(ct, ct_comm_all_reduce_start(c, &b[k], k == 4 ? CT_MAX : CT_SUM, &req[k]));
    }
    for (int k = K - 1; k >= 0; k--) CT_COMM_MUST(ct, ct_comm_wait(c, req[k]));
    for (int k = 0; k < K; k++) {
        ct_tensor back = ct_comm_test_to_host(ct, &b[k]);
        int64_t wrong = ct_comm_test_wrong(ct, &back, tag0 + (uint64_t)k, k == 4 ? CT_MAX : CT_SUM, 0);
        CHECK(wrong == 0, "%s: bucket %d (%lld %s%s): %lld wrong", label, k, (long long)ct_tensor_numel(&back),
              ct_dtype_name(dts[k]), ct->where, (long long)wrong);
        ct_tensor_free(&back);
        ct_tensor_free(&b[k]);
    }
}

void ct_comm_test_check_same(ct_comm_test *ct) {
    const int R = ct->R, W = ct->W;
    const uint64_t shared = ct->shared;
    CT_COMM_MUST(ct, ct_comm_check_same(ct->comm, shared * 3 + 1, "config hash"));
    if (W < 2) return;
    /* Rank 1 and (with 3 or more ranks) the last rank hold another value. */
    bool odd = R == 1 || (W >= 3 && R == W - 1);
    uint64_t v = odd ? shared * 3 + 2 + (uint64_t)R : shared * 3 + 1;
    char r1[64], rl[64];
    snprintf(r1, sizeof r1, "rank 1 has %#llx", (unsigned long long)(shared * 3 + 3));
    snprintf(rl, sizeof rl, "rank %d has %#llx", W - 1, (unsigned long long)(shared * 3 + 2 + (uint64_t)(W - 1)));
    char prefix[96];
    snprintf(prefix, sizeof prefix, "check_same (rank %d/%d): config hash differs between ranks: rank 0 has", R, W);
    CHECK_ERR(ct_comm_check_same(ct->comm, v, "config hash"), CT_ERR_CONFIG, prefix, r1, rl);
}

void ct_comm_test_validation(ct_comm_test *ct) {
    const int R = ct->R, W = ct->W;
    int32_t ints[4] = {1, 2, 3, 4};
    int64_t four = 4;
    ct_tensor i32_h = ct_tensor_view(ints, CT_I32, CT_CPU, 1, &four);
    ct_tensor i32 = ct_comm_test_to_device(ct, &i32_h);
    char prefix[64], root[64];
    snprintf(prefix, sizeof prefix, "all_reduce (rank %d/%d): ", R, W);
    CHECK_ERR(ct_comm_all_reduce(ct->comm, &i32, CT_SUM), CT_ERR_DTYPE, prefix, "f32, f64 or i64");
    snprintf(prefix, sizeof prefix, "broadcast (rank %d/%d): ", R, W);
    snprintf(root, sizeof root, "root %d outside [0, %d)", W, W);
    ct_tensor f = device1(ct, CT_F32, 4);
    CHECK_ERR(ct_comm_broadcast(ct->comm, &f, W), CT_ERR_INVALID_ARG, prefix, root);
    if (W > 1) { /* over one rank, out = in is the right shape */
        snprintf(prefix, sizeof prefix, "all_gather (rank %d/%d): ", R, W);
        CHECK_ERR(ct_comm_all_gather(ct->comm, &f, &f), CT_ERR_SHAPE, prefix, "world size");
    }
    ct_tensor_free(&f);
    ct_tensor_free(&i32);
}

void ct_comm_test_timeout(ct_comm_test *ct) {
    const int R = ct->R, W = ct->W;
    if (!ct->create || W < 2) return;
    ct_comm *t = NULL;
    CT_COMM_MUST(ct, ct->create(1.0, &t));
    CT_COMM_MUST(ct, ct_comm_barrier(t)); /* everyone has it (NCCL sets up on first use) */
    if (R != 0) {
        double t0 = ct_comm_test_now();
        ct_status s = ct_comm_barrier(t);
        double took = ct_comm_test_now() - t0;
        char want[128];
        snprintf(want, sizeof want, "barrier (rank %d/%d): no answer from the other ranks within 1 s (ddp_timeout)", R,
                 W);
        CHECK_ERR(s, CT_ERR_STATE, want);
        CHECK(took >= 0.99 && took < 3.0, "the barrier gave up after %.3f s (timeout 1 s)", took);
        ct_tensor h = ct_comm_test_host(CT_F64, 1), g = ct_comm_test_to_device(ct, &h);
        CHECK_ERR(ct_comm_all_reduce(t, &g, CT_SUM), CT_ERR_STATE, "unusable", "earlier barrier was given up");
        ct_tensor_free(&g);
        ct_tensor_free(&h);
    }
    CT_COMM_MUST(ct, ct_comm_barrier(ct->comm));
    if (R == 0) CT_COMM_MUST(ct, ct_comm_barrier(t));
    ct_comm_free(t);
}

void ct_comm_test_run(ct_comm_test *ct) {
    ct_comm_test_identity(ct);
    ct_comm_test_all_reduce_exact(ct);
    ct_comm_test_all_reduce_random(ct);
    ct_comm_test_broadcast(ct);
    ct_comm_test_all_gather(ct);
    ct_comm_test_gather_v(ct);
    ct_comm_test_reduce_scatter(ct);
    ct_comm_test_non_blocking(ct, ct->comm, "non-blocking", 800, ct->sizes->non_blocking_big);
    ct_comm_test_check_same(ct);
    ct_comm_test_validation(ct);
    CT_COMM_MUST(ct, ct_comm_barrier(ct->comm));
    ct_comm_test_timeout(ct);
    /* Still working after the given-up barrier and the extra communicator. */
    int64_t ones = 1;
    CT_COMM_MUST(ct, ct_comm_all_reduce_i64(ct->comm, &ones, 1, CT_SUM));
    CHECK(ones == ct->W, "final all_reduce: %lld, expected %d", (long long)ones, ct->W);
}
