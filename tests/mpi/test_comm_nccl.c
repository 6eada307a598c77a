/* The NCCL communicator under `mpirun -np N`, one GPU per rank: every collective on GPU tensors
 * against values each rank computes locally (every rank can generate every rank's data from the
 * shared seed), as tests/mpi/test_comm_mpi.c does for MPI.
 *
 * Checked: all-reduce (f32/f64/i64 x sum/min/max, exact data; random f32 within rounding and
 * bit-identical on every rank), broadcast from non-zero roots (f64, i64, u8, f32), all-gather (and in
 * place), gather_v with a rank that sends nothing (the root's result on its GPU), reduce-scatter,
 * non-blocking all-reduces started one after another and waited in reverse order, with the stream
 * ordering that DDP relies on: each bucket is written by a kernel on the caller's stream right before
 * its start (the collective must see it) and read by a kernel right after its wait (which must see
 * the reduced values) - with buckets of millions of elements, so a missing dependency shows; CPU
 * tensors through the same communicator (MPI underneath: metric helpers, check_same, non-blocking);
 * validation errors (a GPU tensor of another device, CPU and GPU mixed); and the timeout: rank 0
 * skips a barrier, the others get CT_ERR_STATE after ~1 s and the communicator refuses further work.
 *
 * One rank (np 1, what a one-GPU machine can run) checks the same code paths with trivial results;
 * the cross-rank parts (mismatched dtypes, the timeout) need two.
 *
 * `test_comm_nccl watchdog T` is the failure of a non-blocking all-reduce: rank 1 never joins (alone,
 * rank 0 holds its own stream with a sleeping host function, so the all-reduce never starts), rank
 * 0 waits for it on the GPU and then blocks reading the result back; the watchdog must end the job
 * after the T s timeout with "all_reduce (rank 0/N): no answer ... ending the job" (ctest looks for it).
 *
 * Exits 77 (skipped) in builds without CUDA and where this node has fewer GPUs than ranks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/ops/ops.h"
#include "dist/comm.h"
#include "testlib.h"

#ifdef CT_HAVE_CUDA /* the whole test; without CUDA, main only says it is skipped */
#include <cuda_runtime_api.h>

#include "backends/cuda/cuda_rt.h"

static ct_comm *comm;
static int R, W;        /* this rank, world size */
static ct_device GPU;   /* this rank's GPU */
static uint64_t shared; /* rank 0's seed, the same on every rank */

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

static uint64_t h(uint64_t tag, int q, int64_t i) {
    return splitmix(splitmix(splitmix(shared ^ tag) + (uint64_t)q) + (uint64_t)i);
}

static int64_t ival(uint64_t tag, int q, int64_t i, int64_t bound) {
    int64_t v = (int64_t)(h(tag, q, i) % (uint64_t)(2 * bound + 1)) - bound;
    return v ? v : 1;
}

static int64_t shared_size(uint64_t tag, int64_t lo, int64_t hi) {
    return lo + (int64_t)(h(tag, -1, 0) % (uint64_t)(hi - lo + 1));
}

/* Exact data: integer f32 (sums below 2^24), dyadic f64, i64 that cannot overflow over W ranks. */
static double exact_value(ct_dtype dt, uint64_t tag, int q, int64_t i) {
    if (dt == CT_F32) return (double)ival(tag, q, i, (1 << 22) / W);
    return (double)ival(tag, q, i, (int64_t)1 << 40) / 1024.0;
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

/* Elements of the CPU tensor t that differ from the reduction over ranks (exact data). */
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

static ct_tensor host1(ct_dtype dt, int64_t n) {
    ct_tensor t;
    CT_ASSERT(ct_tensor_alloc(&t, dt, CT_CPU, 1, &n) == CT_OK);
    return t;
}

static ct_tensor on_gpu(const ct_tensor *cpu) {
    ct_tensor g;
    MUST(ct_tensor_alloc(&g, cpu->dtype, GPU, cpu->ndim, cpu->shape));
    MUST(ct_tensor_copy_to(&g, cpu));
    return g;
}

static ct_tensor on_host(const ct_tensor *gpu) {
    ct_tensor c;
    MUST(ct_tensor_alloc(&c, gpu->dtype, CT_CPU, gpu->ndim, gpu->shape));
    MUST(ct_tensor_copy_to(&c, gpu));
    return c;
}

static void identity(void) {
    const char *size = getenv("OMPI_COMM_WORLD_SIZE"), *rank = getenv("OMPI_COMM_WORLD_RANK");
    CHECK(strcmp(comm->ops->name, "nccl") == 0, "communicator '%s'", comm->ops->name);
    CHECK(size && atoi(size) == W && rank && atoi(rank) == R, "rank %d/%d, mpirun says %s/%s", R, W,
          rank ? rank : "?", size ? size : "?");
}

static void all_reduce_exact(void) {
    const ct_dtype dts[] = {CT_F32, CT_F64, CT_I64};
    const ct_reduce ops[] = {CT_SUM, CT_MIN, CT_MAX};
    for (int d = 0; d < 3; d++)
        for (int o = 0; o < 3; o++) {
            uint64_t tag = 100 + 10 * (uint64_t)d + (uint64_t)o;
            int64_t n = shared_size(tag, 1, 300000);
            ct_tensor t = host1(dts[d], n);
            fill_exact(&t, tag, R, 0);
            ct_tensor g = on_gpu(&t);
            MUST(ct_comm_all_reduce(comm, &g, ops[o]));
            ct_tensor back = on_host(&g);
            int64_t wrong = count_wrong(&back, tag, ops[o], 0);
            CHECK(wrong == 0, "all_reduce %s %s of %lld elements on the GPU: %lld wrong", op_name(ops[o]),
                  ct_dtype_name(dts[d]), (long long)n, (long long)wrong);
            ct_tensor_free(&back);
            ct_tensor_free(&g);
            ct_tensor_free(&t);
        }
}

/* Random f32: the sum within rounding, and the same bits on every rank. */
static void all_reduce_random(void) {
    int64_t n = shared_size(200, 100000, 300000);
    ct_tensor t = host1(CT_F32, n);
    float *x = t.data;
    for (int64_t i = 0; i < n; i++) x[i] = (float)((double)(h(210, R, i) >> 11) * 0x1p-53 * 2 - 1);
    ct_tensor g = on_gpu(&t);
    MUST(ct_comm_all_reduce(comm, &g, CT_SUM));
    ct_tensor back = on_host(&g);
    const float *y = back.data;
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; i++) {
        double sum = 0, abs_sum = 0;
        for (int q = 0; q < W; q++) {
            double v = (float)((double)(h(210, q, i) >> 11) * 0x1p-53 * 2 - 1);
            sum += v;
            abs_sum += fabs(v);
        }
        wrong += !(fabs(y[i] - sum) <= 1e-6 * abs_sum);
    }
    CHECK(wrong == 0, "all_reduce of %lld random f32 on the GPU: %lld beyond rounding", (long long)n, (long long)wrong);
    ct_tensor all;
    int64_t wn = W * n;
    MUST(ct_tensor_alloc(&all, CT_F32, GPU, 1, &wn));
    MUST(ct_comm_all_gather(comm, &g, &all));
    ct_tensor all_h = on_host(&all);
    int differ = 0;
    for (int q = 1; q < W; q++)
        differ += memcmp(all_h.data, (float *)all_h.data + q * n, (size_t)n * sizeof(float)) != 0;
    CHECK(differ == 0, "all_reduce of random f32 on the GPU: %d ranks got other bits than rank 0", differ);
    ct_tensor ts[5] = {t, g, back, all, all_h};
    for (int i = 0; i < 5; i++) ct_tensor_free(&ts[i]);
}

static void broadcast(void) {
    const ct_dtype dts[] = {CT_F64, CT_I64, CT_U8, CT_F32};
    const int roots[] = {W - 1, 1 % W, W / 2, 1 % W};
    for (int d = 0; d < 4; d++) {
        int root = roots[d];
        uint64_t tag = 300 + (uint64_t)d;
        int64_t shape[2] = {shared_size(tag, 1, 300), shared_size(tag + 50, 1, 400)};
        ct_tensor t;
        CT_ASSERT(ct_tensor_alloc(&t, dts[d], CT_CPU, 2, shape) == CT_OK);
        int64_t n = shape[0] * shape[1];
        for (int64_t i = 0; i < n; i++) ct_tensor_set(&t, i, (double)(1 + h(tag, R, i) % 200));
        ct_tensor g = on_gpu(&t);
        MUST(ct_comm_broadcast(comm, &g, root));
        ct_tensor back = on_host(&g);
        int64_t wrong = 0;
        for (int64_t i = 0; i < n; i++) wrong += ct_tensor_get(&back, i) != (double)(1 + h(tag, root, i) % 200);
        CHECK(wrong == 0, "broadcast of %s from root %d on the GPU: %lld elements are not the root's",
              ct_dtype_name(dts[d]), root, (long long)wrong);
        ct_tensor_free(&back);
        ct_tensor_free(&g);
        ct_tensor_free(&t);
    }
}

static int64_t blocks_wrong(const ct_tensor *out_h, ct_dtype dt, uint64_t tag, int64_t n) {
    int64_t wrong = 0;
    for (int q = 0; q < W; q++) {
        ct_tensor block = ct_tensor_rows(out_h, q * n, n);
        ct_tensor want = host1(dt, n);
        fill_exact(&want, tag, q, 0);
        wrong += memcmp(block.data, want.data, ct_tensor_nbytes(&want)) != 0;
        ct_tensor_free(&want);
    }
    return wrong;
}

static void all_gather(void) {
    const ct_dtype dts[] = {CT_F32, CT_I64, CT_F64};
    for (int d = 0; d < 3; d++) {
        uint64_t tag = 400 + (uint64_t)d;
        int64_t n = shared_size(tag, 1, 5000), wn = W * n;
        ct_tensor in = host1(dts[d], n);
        fill_exact(&in, tag, R, 0);
        ct_tensor gin = on_gpu(&in), gout;
        MUST(ct_tensor_alloc(&gout, dts[d], GPU, 1, &wn));
        MUST(ct_comm_all_gather(comm, &gin, &gout));
        ct_tensor out_h = on_host(&gout);
        CHECK(blocks_wrong(&out_h, dts[d], tag, n) == 0, "all_gather of %lld %s per rank on the GPU", (long long)n,
              ct_dtype_name(dts[d]));
        ct_tensor_free(&out_h);

        /* in place: in is this rank's block of out (ZeRO-1's parameter shards) */
        ct_tensor junk = host1(dts[d], wn);
        for (int64_t i = 0; i < wn; i++) ct_tensor_set(&junk, i, -7.0);
        ct_tensor mine = ct_tensor_rows(&junk, R * n, n);
        fill_exact(&mine, tag, R, 0);
        MUST(ct_tensor_copy_to(&gout, &junk));
        ct_tensor gmine = ct_tensor_rows(&gout, R * n, n);
        MUST(ct_comm_all_gather(comm, &gmine, &gout));
        out_h = on_host(&gout);
        CHECK(blocks_wrong(&out_h, dts[d], tag, n) == 0, "in-place all_gather of %lld %s per rank on the GPU",
              (long long)n, ct_dtype_name(dts[d]));
        ct_tensor ts[5] = {in, gin, gout, out_h, junk};
        for (int i = 0; i < 5; i++) ct_tensor_free(&ts[i]);
    }
}

static int64_t gv_count(uint64_t tag, int q) { return q == 1 ? 0 : 1 + (int64_t)(h(tag, q, -1) % 900); }

static void gather_v(void) {
    const ct_dtype dts[] = {CT_F64, CT_I64, CT_F32};
    const int roots[] = {0, W - 1, 1 % W};
    for (int d = 0; d < 3; d++) {
        int root = roots[d];
        uint64_t tag = 500 + (uint64_t)d;
        int64_t total = 0, mine = gv_count(tag, R);
        for (int q = 0; q < W; q++) total += gv_count(tag, q);
        ct_tensor in, out;
        MUST(ct_tensor_alloc(&in, dts[d], CT_CPU, 1, &mine));
        fill_exact(&in, tag, R, 0);
        ct_tensor gin = on_gpu(&in);
        MUST(ct_comm_gather_v(comm, &gin, root, &out));
        if (R == root) {
            bool ok = out.ndim == 1 && ct_tensor_numel(&out) == total && out.dtype == dts[d] &&
                      ct_device_eq(out.device, GPU);
            int64_t wrong = 0, off = 0;
            ct_tensor out_h = ok ? on_host(&out) : (ct_tensor){0};
            for (int q = 0; ok && q < W; q++) {
                int64_t cq = gv_count(tag, q);
                ct_tensor block = ct_tensor_rows(&out_h, off, cq), want = host1(dts[d], cq);
                fill_exact(&want, tag, q, 0);
                wrong += cq && memcmp(block.data, want.data, ct_tensor_nbytes(&want)) != 0;
                ct_tensor_free(&want);
                off += cq;
            }
            CHECK(ok && wrong == 0,
                  "gather_v of %s to root %d on the GPU: %lld elements (want %lld), %lld blocks wrong",
                  ct_dtype_name(dts[d]), root, (long long)ct_tensor_numel(&out), (long long)total, (long long)wrong);
            ct_tensor_free(&out_h);
        } else
            CHECK(out.data == NULL && ct_tensor_numel(&out) == 0, "gather_v left %lld elements on non-root rank %d",
                  (long long)ct_tensor_numel(&out), R);
        ct_tensor_free(&out);
        ct_tensor_free(&gin);
        ct_tensor_free(&in);
    }
    /* mismatched dtypes: every rank learns it from the counts and fails the same way */
    if (W < 2) return;
    ct_tensor mixed = host1(R == W - 1 ? CT_F32 : CT_F64, 3), out;
    fill_exact(&mixed, 550, R, 0);
    ct_tensor gmixed = on_gpu(&mixed);
    char want[64];
    snprintf(want, sizeof want, "rank %d sends f32 but the root (rank 0) f64", W - 1);
    CHECK_ERR(ct_comm_gather_v(comm, &gmixed, 0, &out), CT_ERR_DTYPE, "gather_v (rank ", want);
    CHECK(out.data == NULL, "failed gather_v left memory");
    ct_tensor_free(&gmixed);
    ct_tensor_free(&mixed);
}

static void reduce_scatter(void) {
    const ct_dtype dts[] = {CT_F32, CT_F64, CT_I64};
    const ct_reduce ops[] = {CT_SUM, CT_MAX, CT_MIN};
    for (int d = 0; d < 3; d++)
        for (int o = 0; o < 3; o++) {
            uint64_t tag = 600 + 10 * (uint64_t)d + (uint64_t)o;
            int64_t n = shared_size(tag, 1, 7000), wn = W * n;
            ct_tensor in = host1(dts[d], wn);
            fill_exact(&in, tag, R, 0);
            ct_tensor gin = on_gpu(&in), gout;
            MUST(ct_tensor_alloc(&gout, dts[d], GPU, 1, &n));
            MUST(ct_comm_reduce_scatter(comm, &gin, &gout, ops[o]));
            ct_tensor out_h = on_host(&gout);
            int64_t wrong = count_wrong(&out_h, tag, ops[o], R * n);
            CHECK(wrong == 0, "reduce_scatter %s %s on the GPU, block %lld: %lld wrong", op_name(ops[o]),
                  ct_dtype_name(dts[d]), (long long)n, (long long)wrong);
            ct_tensor ts[4] = {in, gin, gout, out_h};
            for (int i = 0; i < 4; i++) ct_tensor_free(&ts[i]);
        }
}

/* A copy by a kernel on the caller's stream: dropout with p = 0 writes y = x * 1 (exact). */
static void kernel_copy(const ct_tensor *x, ct_tensor *y, ct_tensor *mask) {
    ct_dropout_ctx ctx = {{1, 2}, 3, 0};
    ct_op_dropout_forward(x, 0.0, &ctx, mask, y);
}

/* Buckets as DDP makes them: written by a kernel right before the start, read by a kernel right
 * after the wait; started in order, waited in reverse. */
static void non_blocking(void) {
    enum { K = 6 };
    const ct_dtype dts[K] = {CT_F32, CT_F32, CT_F64, CT_F32, CT_F64, CT_F32};
    ct_tensor src[K], bucket[K], after[K], mask[K];
    ct_comm_request *req[K];
    for (int k = 0; k < K; k++) {
        uint64_t tag = 800 + (uint64_t)k;
        int64_t n = k == 3 ? 0 : k == 1 ? shared_size(tag, 3000000, 5000000) : shared_size(tag, 1, 200000);
        ct_tensor h0 = host1(dts[k], n);
        fill_exact(&h0, tag, R, 0);
        src[k] = on_gpu(&h0);
        ct_tensor_free(&h0);
        MUST(ct_tensor_alloc(&bucket[k], dts[k], GPU, 1, &n));
        MUST(ct_tensor_alloc(&after[k], dts[k], GPU, 1, &n));
        MUST(ct_tensor_alloc(&mask[k], CT_U8, GPU, 1, &n));
    }
    for (int k = 0; k < K; k++) {
        if (ct_tensor_numel(&src[k])) kernel_copy(&src[k], &bucket[k], &mask[k]);
        MUST(ct_comm_all_reduce_start(comm, &bucket[k], CT_SUM, &req[k]));
    }
    for (int k = K - 1; k >= 0; k--) {
        MUST(ct_comm_wait(comm, req[k]));
        if (ct_tensor_numel(&src[k])) kernel_copy(&bucket[k], &after[k], &mask[k]);
    }
    for (int k = 0; k < K; k++) {
        ct_tensor back = on_host(&after[k]);
        int64_t wrong = count_wrong(&back, 800 + (uint64_t)k, CT_SUM, 0);
        CHECK(wrong == 0, "non-blocking bucket %d (%lld %s): %lld wrong after the wait", k,
              (long long)ct_tensor_numel(&back), ct_dtype_name(dts[k]), (long long)wrong);
        ct_tensor ts[5] = {back, src[k], bucket[k], after[k], mask[k]};
        for (int i = 0; i < 5; i++) ct_tensor_free(&ts[i]);
    }
}

/* CPU tensors through the NCCL communicator go through its MPI side. */
static void cpu_tensors(void) {
    double v[3];
    int64_t k[4];
    for (int i = 0; i < 3; i++) v[i] = exact_value(CT_F64, 150, R, i);
    for (int i = 0; i < 4; i++) k[i] = exact_i64(151, R, i);
    MUST(ct_comm_all_reduce_f64(comm, v, 3, CT_SUM));
    MUST(ct_comm_all_reduce_i64(comm, k, 4, CT_MIN));
    ct_tensor tv = ct_tensor_view(v, CT_F64, CT_CPU, 1, (int64_t[]){3});
    ct_tensor tk = ct_tensor_view(k, CT_I64, CT_CPU, 1, (int64_t[]){4});
    CHECK(count_wrong(&tv, 150, CT_SUM, 0) == 0 && count_wrong(&tk, 151, CT_MIN, 0) == 0,
          "all_reduce_f64/i64 helpers on the NCCL communicator");
    ct_tensor c = host1(CT_F32, 1000);
    fill_exact(&c, 160, R, 0);
    ct_comm_request *req;
    MUST(ct_comm_all_reduce_start(comm, &c, CT_MAX, &req));
    MUST(ct_comm_wait(comm, req));
    CHECK(count_wrong(&c, 160, CT_MAX, 0) == 0, "non-blocking all_reduce of a CPU tensor");
    ct_tensor_free(&c);
    MUST(ct_comm_check_same(comm, shared * 5 + 1, "config hash"));
}

static void validation(void) {
    ct_tensor h = host1(CT_F32, 4), g = on_gpu(&h);
    ct_tensor elsewhere = g;
    elsewhere.device.index = GPU.index + 1; /* refused before anything touches it */
    char prefix[64], dev[32];
    snprintf(prefix, sizeof prefix, "all_reduce (rank %d/%d): ", R, W);
    snprintf(dev, sizeof dev, "works on cuda:%d", GPU.index);
    CHECK_ERR(ct_comm_all_reduce(comm, &elsewhere, CT_SUM), CT_ERR_DEVICE, prefix, dev);
    ct_tensor out = host1(CT_F32, 4 * (int64_t)W);
    snprintf(prefix, sizeof prefix, "all_gather (rank %d/%d): ", R, W);
    CHECK_ERR(ct_comm_all_gather(comm, &g, &out), CT_ERR_DEVICE, prefix, "both CPU tensors or both GPU tensors");
    int32_t ints[4] = {1, 2, 3, 4};
    ct_tensor i32 = ct_tensor_view(ints, CT_I32, CT_CPU, 1, (int64_t[]){4});
    ct_tensor gi32 = on_gpu(&i32);
    snprintf(prefix, sizeof prefix, "all_reduce (rank %d/%d): ", R, W);
    CHECK_ERR(ct_comm_all_reduce(comm, &gi32, CT_SUM), CT_ERR_DTYPE, prefix, "f32, f64 or i64");
    ct_tensor ts[4] = {h, g, out, gi32};
    for (int i = 0; i < 4; i++) ct_tensor_free(&ts[i]);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Rank 0 skips a barrier the others enter: they give up after ~1 s, and the communicator is then
 * unusable. Rank 0 enters late, which lets the given-up barriers finish on the GPU before destroy. */
static void timeout(void) {
    ct_comm *t = NULL;
    MUST(ct_comm_nccl_create(1.0, -1, &t));
    MUST(ct_comm_barrier(t));
    if (R != 0) {
        double t0 = now_s();
        ct_status s = ct_comm_barrier(t);
        double took = now_s() - t0;
        char want[128];
        snprintf(want, sizeof want, "barrier (rank %d/%d): no answer from the other ranks within 1 s (ddp_timeout)", R,
                 W);
        CHECK_ERR(s, CT_ERR_STATE, want);
        CHECK(took >= 0.99 && took < 3.0, "the barrier gave up after %.3f s (timeout 1 s)", took);
        ct_tensor h = host1(CT_F64, 1), g = on_gpu(&h);
        CHECK_ERR(ct_comm_all_reduce(t, &g, CT_SUM), CT_ERR_STATE, "unusable", "earlier barrier was given up");
        ct_tensor_free(&g);
        ct_tensor_free(&h);
    }
    MUST(ct_comm_barrier(comm));
    if (R == 0) MUST(ct_comm_barrier(t));
    ct_comm_free(t);
}

/* Holds the caller's stream (a host function on it) far beyond the timeout. */
static void CUDART_CB hold_stream(void *arg) { sleep((unsigned)(*(double *)arg * 10 + 10)); }

/* Rank 1 never starts its all-reduce (alone, rank 0 holds its own stream before starting, so the
 * all-reduce cannot begin either); rank 0's host blocks reading the result back, and only the
 * watchdog can end the job. */
static int watchdog(double timeout_s) {
    MUST(ct_comm_nccl_create(timeout_s, -1, &comm));
    R = comm->rank;
    W = comm->world_size;
    GPU = (ct_device){CT_DEVICE_CUDA, comm->local_rank};
    int64_t n = 1000;
    ct_tensor h = host1(CT_F32, n), g = on_gpu(&h);
    MUST(ct_comm_barrier(comm));
    if (R == 1) {
        sleep((unsigned)(10 * timeout_s + 10));
        printf("rank 1: the job is still running %g s after the timeout\n", 10 * timeout_s);
        return 1;
    }
    if (W == 1 && cudaLaunchHostFunc((cudaStream_t)ct_cuda_stream(), hold_stream, &timeout_s) != cudaSuccess) {
        printf("rank 0: cannot hold the stream\n");
        return 1;
    }
    ct_comm_request *req;
    MUST(ct_comm_all_reduce_start(comm, &g, CT_SUM, &req));
    MUST(ct_comm_wait(comm, req));
    ct_tensor back = on_host(&g); /* blocks until the watchdog ends the job */
    printf("rank %d: read the result back although rank 1 never joined\n", R);
    ct_tensor_free(&back);
    return 1;
}

/* This node's rank count from the launcher, before MPI starts. */
static int local_ranks(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"};
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 0) return atoi(v);
    }
    return 1;
}

#endif /* CT_HAVE_CUDA */

int main(int argc, char **argv) {
#ifndef CT_HAVE_CUDA
    (void)argc;
    (void)argv;
    printf("test_comm_nccl: skipped (this build has no CUDA backend)\n");
    return 77;
#else
    int gpus = ct_cuda_device_count(), need = local_ranks();
    if (gpus < need) {
        printf("test_comm_nccl: skipped (%d CUDA device(s) for %d ranks on this node)\n", gpus, need);
        return 77;
    }
    if (argc == 3 && strcmp(argv[1], "watchdog") == 0) return watchdog(atof(argv[2]));

    ct_test_begin("test_comm_nccl");
    MUST(ct_comm_nccl_create(30, -1, &comm));
    R = comm->rank;
    W = comm->world_size;
    GPU = (ct_device){CT_DEVICE_CUDA, comm->local_rank};
    int64_t seed = (int64_t)ct_test_seed;
    ct_tensor st = ct_tensor_view(&seed, CT_I64, CT_CPU, 1, (int64_t[]){1});
    MUST(ct_comm_broadcast(comm, &st, 0));
    shared = (uint64_t)seed;
    if (R == 0) printf("test_comm_nccl: %d ranks share rank 0's seed %llu\n", W, (unsigned long long)shared);

    identity();
    all_reduce_exact();
    all_reduce_random();
    broadcast();
    all_gather();
    gather_v();
    reduce_scatter();
    non_blocking();
    cpu_tensors();
    validation();
    MUST(ct_comm_barrier(comm));
    if (W >= 2) timeout(); /* one rank cannot be left waiting for another */

    int64_t ones = 1;
    MUST(ct_comm_all_reduce_i64(comm, &ones, 1, CT_SUM));
    CHECK(ones == W, "final all_reduce: %lld, expected %d", (long long)ones, W);
    int rc = ct_test_finish();
    ct_comm_free(comm);
    return rc;
#endif
}
