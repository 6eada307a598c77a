/* The float GEMM every CPU kernel calls (ct_cpu_sgemm, CBLAS's prototype, row-major), and the
 * built-in engine behind it: blocked like BLIS and OpenBLAS (op(B) packed into panels of NR columns,
 * all of K for as many columns as fit a 1 MiB block, or one K block where K is long and C small, and
 * a register tile of MR x NR elements of C), written with the compiler's vector types and compiled
 * once per instruction-set level like every kernel file here (x86-64-v4: 14 x 32 tiles of AVX-512
 * FMAs; v3: 6 x 16 of AVX2 FMAs; v2 and the baseline: 6 x 8 of SSE multiplies and adds).
 * CT_CPU_GEMM=openblas|onednn hands every call to that library instead (gemm_engine.c).
 *
 * Why our own: OpenBLAS 0.3.21's kernels leave a third of an AVX-512 core unused at the example
 * models' shapes and pack both operands of every call; oneDNN's are faster but round a row by the
 * row count of the call (bench/README.md). Here op(A) is read where it lies (a row-major A) or
 * copied into MR-row panels (a transposed one; with SSE, either, each element filling a vector: see
 * A_LANES), and the packing of a transposed B transposes W x W blocks in registers.
 *
 * How it rounds: every element of C is, for each K block of 256 from k = 0, one chain of
 * multiply-adds over the block's k in order from zero, s_b = fma(a_ik, alpha b_kj, s_b) (a multiply
 * then an add at levels without FMA), added to the running sum of the earlier blocks, s = s + s_b,
 * kept in C or a buffer (storing and reloading a float changes nothing), and then C = s (beta 0) or
 * fma(beta, C, s) (s + beta C without FMA; beta 1: s + C). Summing a long K in blocks rather than in
 * one chain keeps its rounding near a library's: one chain over a K of thousands lost up to five times
 * PyTorch's float32 accuracy on an ill-conditioned GPT gradient (tests/oracle/test_gpt.py). So an
 * element's bits depend on its row of op(A), its column of op(B), alpha, beta and the level's
 * arithmetic, and on nothing else: not on M or N, not on where the row sits in the call, not on how
 * blas.c splits a product between threads or how many threads there are. A sample's outputs are the
 * same bits whatever evaluation batch holds it, the v3 and v4 copies (both FMA) agree bit for bit,
 * and a gradient accumulated with beta 1 (g + s) is the sum an all-reduce of the two makes. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_impl.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#define W 16
#define MR 14 /* 28 accumulators, two B vectors and a broadcast: 31 of the 32 registers */
#define VFMA(s, b, acc) ((vf)_mm512_fmadd_ps((__m512)(s), (__m512)(b), (__m512)(acc)))
#elif defined(__FMA__) && defined(__AVX__)
#include <immintrin.h>
#define W 8
#define MR 6 /* 12 accumulators of the 16 registers */
#define VFMA(s, b, acc) ((vf)_mm256_fmadd_ps((__m256)(s), (__m256)(b), (__m256)(acc)))
#else
#define W 4
#define MR 6
#define VFMA(s, b, acc) ((acc) + (s) * (b))
#endif
#define NR (2 * W)
#define KC 256      /* the K block: a row tile's KC steps of op(A) (14 KiB at v4) stay in L1 */
#define MC (MR * 8) /* rows of A per pass over a packed B block */
/* Floats a packed element of op(A) takes. SSE has no broadcast from memory, so a tile that reads op(A)
 * where it lies spends a shuffle on each element, on the ports its multiplies and adds need (a third
 * of the kernel's speed on a core with AVX-512 running the SSE copy); at W 4 op(A) is therefore always
 * packed, each element repeated across a vector that the tile loads as it is. */
#define A_LANES (W == 4 ? W : 1)

typedef float vf __attribute__((vector_size(W * 4)));
typedef float vf_unaligned __attribute__((vector_size(W * 4), aligned(4)));
typedef int vi __attribute__((vector_size(W * 4)));

static inline vf vload(const float *p) { return *(const vf_unaligned *)p; }
static inline void vstore(float *p, vf v) { *(vf_unaligned *)p = v; }
/* Lanes of x (0 to W-1) and y (W to 2W-1) picked by mask: GCC's shuffle builtin; clang (the fuzz
 * build) lacks it and gets the same lanes from a loop. */
#if defined(__GNUC__) && !defined(__clang__)
#define SHUFFLE2(x, y, mask) __builtin_shuffle(x, y, mask)
#else
static inline vf shuffle2(vf x, vf y, vi mask) {
    vf r;
    for (int l = 0; l < W; l++) r[l] = mask[l] < W ? x[mask[l]] : y[mask[l] - W];
    return r;
}
#define SHUFFLE2(x, y, mask) shuffle2(x, y, mask)
#endif

static inline vf vset1(float x) {
    vf v = {x}; /* lane 0 to every lane: one broadcast (x + (vf){0} would turn -0 into +0) */
    return SHUFFLE2(v, v, (vi){0});
}

/* Where a tile's block sums go, and how they end. */
typedef struct tile_io {
    const float *from; /* the running sums of the earlier K blocks, added to this one's (from_ld floats a
                        * row); NULL: the first block */
    int64_t from_ld;
    float *to; /* where this block's sums go (to_ld floats a row) */
    int64_t to_ld;
    bool finish; /* the last K block of a product with beta != 0: to = sums + beta to (one rounding with FMA) */
    float beta;
    const float *bias; /* the last K block of a linear layer's forward: + bias[j] (NR of them), */
    bool relu;         /* then max(., 0) as ct_op_activation_forward's ReLU (NaN and -0 pass) */
} tile_io;

/* kc steps of the chains of a tile of mr rows and NR columns: op(A)'s element (i, k) at
 * a[i * rs + k * cs], the packed B panel b[k * NR + j]. mr is a constant in each instance kernel()
 * calls, so the accumulators are registers. */
static inline __attribute__((always_inline)) void tile(const int mr, int kc, const float *restrict a, int64_t rs,
                                                       int64_t cs, const float *restrict b, const tile_io *io) {
    vf acc[MR][2];
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++) acc[i][0] = acc[i][1] = (vf){0};
    for (int k = 0; k < kc; k++) {
        vf b0 = *(const vf *)(b + k * NR), b1 = *(const vf *)(b + k * NR + W);
        const float *ak = a + k * cs;
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++) {
            const vf s = A_LANES == W ? *(const vf *)(ak + i * rs) : vset1(ak[i * rs]);
            acc[i][0] = VFMA(s, b0, acc[i][0]);
            acc[i][1] = VFMA(s, b1, acc[i][1]);
        }
    }
    if (io->from) {
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++) {
            acc[i][0] += vload(io->from + i * io->from_ld);
            acc[i][1] += vload(io->from + i * io->from_ld + W);
        }
    }
    float *to = io->to;
    const int64_t ld = io->to_ld;
    if (io->finish) {
        const vf beta = vset1(io->beta);
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++) {
            acc[i][0] = VFMA(beta, vload(to + i * ld), acc[i][0]);
            acc[i][1] = VFMA(beta, vload(to + i * ld + W), acc[i][1]);
        }
    }
    if (io->bias) {
        const vf bias0 = vload(io->bias), bias1 = vload(io->bias + W);
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++) {
            acc[i][0] += bias0;
            acc[i][1] += bias1;
        }
    }
    if (io->relu) {
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++)
            for (int h = 0; h < 2; h++) acc[i][h] = (vf)((vi)acc[i][h] & ~(acc[i][h] < (vf){0}));
    }
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++) {
        vstore(to + i * ld, acc[i][0]);
        vstore(to + i * ld + W, acc[i][1]);
    }
}

#define TILE_ROWS(r)                                                                                                  \
    case r: tile(r, kc, a, rs, cs, b, io); break;
static void kernel(int mr, int kc, const float *a, int64_t rs, int64_t cs, const float *b, const tile_io *io) {
    switch (mr) {
        TILE_ROWS(1) TILE_ROWS(2) TILE_ROWS(3) TILE_ROWS(4) TILE_ROWS(5) TILE_ROWS(6)
#if MR > 6
        TILE_ROWS(7) TILE_ROWS(8) TILE_ROWS(9) TILE_ROWS(10) TILE_ROWS(11) TILE_ROWS(12) TILE_ROWS(13) TILE_ROWS(14)
#endif
    default: ct_abort_at(__FILE__, __LINE__, "sgemm: a tile of %d rows", mr);
    }
}

/* Transposes the W x W block r (r[i] its row i) in place: at each step s = W/2, ..., 1 the two
 * off-diagonal s x s blocks of every 2s x 2s block trade places, two shuffles a pair of rows. */
static inline __attribute__((always_inline)) void transpose(vf r[W]) {
#pragma GCC unroll 8
    for (int s = W / 2; s >= 1; s /= 2) {
        vi lo, hi; /* lane l of the new row i, and of row i + s, from rows i (lanes < W) and i + s (>= W) */
        for (int l = 0; l < W; l++) {
            lo[l] = (l & s) ? W + l - s : l;
            hi[l] = (l & s) ? W + l : l + s;
        }
#pragma GCC unroll 16
        for (int i = 0; i < W; i++) {
            if (i & s) continue;
            vf x = r[i], y = r[i + s];
            r[i] = SHUFFLE2(x, y, lo);
            r[i + s] = SHUFFLE2(x, y, hi);
        }
    }
}

/* The panels of op(B)'s columns [j0, j0 + nc) and k in [k0, k0 + kc), one per NR columns: panel p at
 * dst + p * NR * kc, its element (k, j) alpha op(B)[k][j] at [k * NR + j], zero in the columns past
 * nc (their products are computed and not stored). */
static void pack_b(bool tb, const float *b, int64_t ldb, int64_t j0, int nc, int64_t k0, int kc, float alpha,
                   float *dst) {
    if (!tb) { /* op(B)[k][j] = b[k * ldb + j]: each row's nc elements read once and in order */
        for (int k = 0; k < kc; k++) {
            const float *s = b + (k0 + k) * ldb + j0;
            int jr = 0;
            for (; jr + NR <= nc; jr += NR) {
                float *d = dst + (size_t)jr * kc + k * NR;
                vstore(d, vload(s + jr) * alpha);
                vstore(d + W, vload(s + jr + W) * alpha);
            }
            if (jr < nc) {
                float *d = dst + (size_t)jr * kc + k * NR;
                for (int j = 0; j < NR; j++) d[j] = jr + j < nc ? alpha * s[jr + j] : 0.0f;
            }
        }
        return;
    }
    /* op(B)[k][j] = b[j * ldb + k]: W columns by W k at a time, transposed in registers */
    for (int jr = 0; jr < nc; jr += NR) {
        const int nr = nc - jr < NR ? nc - jr : NR;
        const float *bj = b + (j0 + jr) * ldb + k0;
        float *d = dst + (size_t)jr * kc;
        int k = 0;
        for (; k + W <= kc; k += W)
            for (int h = 0; h < NR; h += W) {
                vf r[W];
#pragma GCC unroll 16
                for (int j = 0; j < W; j++) r[j] = h + j < nr ? vload(bj + (h + j) * ldb + k) : (vf){0};
                transpose(r);
#pragma GCC unroll 16
                for (int t = 0; t < W; t++) vstore(d + (k + t) * NR + h, r[t] * alpha);
            }
        for (; k < kc; k++)
            for (int j = 0; j < NR; j++) d[k * NR + j] = j < nr ? alpha * bj[j * ldb + k] : 0.0f;
    }
}

/* A packed element: x itself, or x in every lane where A_LANES is W. */
static inline void put_a(float *d, float x) {
    if (A_LANES == W)
        *(vf *)d = vset1(x);
    else
        *d = x;
}

/* The panels of rows [i0, i0 + mc) of op(A) and k in [k0, k0 + kc), one per MR rows: panel p at
 * dst + p * MR * kc * A_LANES, its element (i, k) at [(k * MR + i) * A_LANES]. A transposed A is read a
 * row (its mc elements) at a time, in order, and each row added to sums[i] where sums is not NULL; a
 * row-major A (packed only where A_LANES > 1; otherwise the tiles read it in place) a row of op(A) at a
 * time. */
static void pack_a(bool ta, const float *a, int64_t lda, int64_t i0, int mc, int64_t k0, int kc, float *dst,
                   double *restrict sums) {
    if (!ta) {
        for (int i = 0; i < mc; i++) {
            const float *row = a + (i0 + i) * lda + k0;
            float *d = dst + ((size_t)(i / MR) * MR * kc + i % MR) * A_LANES;
            for (int k = 0; k < kc; k++) put_a(d + (size_t)k * MR * A_LANES, row[k]);
        }
        return;
    }
    for (int k = 0; k < kc; k++) {
        const float *row = a + (k0 + k) * lda + i0;
        if (A_LANES == 1) {
            int ir = 0;
            for (; ir + MR <= mc; ir += MR) /* a copy of constant size: a few vector moves, not a call */
                memcpy(dst + (size_t)ir * kc + k * MR, row + ir, sizeof(float) * MR);
            if (ir < mc) memcpy(dst + (size_t)ir * kc + k * MR, row + ir, sizeof(float) * (size_t)(mc - ir));
        } else {
            for (int ir = 0; ir < mc; ir += MR) { /* panel by panel: no division by MR per element */
                float *d = dst + ((size_t)ir * kc + (size_t)k * MR) * A_LANES;
                const int mr = mc - ir < MR ? mc - ir : MR;
                for (int i = 0; i < mr; i++) put_a(d + i * A_LANES, row[ir + i]);
            }
        }
        if (sums)
            for (int i = 0; i < mc; i++) sums[i] += row[i];
    }
}

/* Each thread's buffers (packed B, packed A, running sums, an edge tile), kept between calls, grown
 * when a call needs more, and freed when the thread ends. */
typedef struct thread_buffer {
    float *data;
    size_t floats;
} thread_buffer;
static pthread_key_t buffer_key;
static pthread_once_t buffer_once = PTHREAD_ONCE_INIT;
static void buffer_free(void *p) {
    thread_buffer *t = p;
    free(t->data);
    free(t);
}
static void buffer_key_make(void) {
    if (pthread_key_create(&buffer_key, buffer_free) != 0) ct_abort_at(__FILE__, __LINE__, "sgemm: no thread key");
}
static float *buffer_of(size_t floats) {
    pthread_once(&buffer_once, buffer_key_make);
    thread_buffer *t = pthread_getspecific(buffer_key);
    if (!t) {
        t = calloc(1, sizeof *t);
        if (!t || pthread_setspecific(buffer_key, t) != 0) ct_abort_at(__FILE__, __LINE__, "sgemm: out of memory");
    }
    if (t->floats < floats) {
        floats = (floats + 15) / 16 * 16; /* aligned_alloc wants a multiple of the alignment */
        free(t->data);
        t->data = aligned_alloc(64, floats * sizeof(float));
        if (!t->data)
            ct_abort_at(__FILE__, __LINE__, "sgemm: out of memory for %zu bytes of packing buffers",
                        floats * sizeof(float));
        t->floats = floats;
    }
    return t->data;
}

#define B_FLOATS (256 * 1024) /* a packed block of B: all of K, as many columns as fit (1 MiB) */
#define NC_K_OUTER 512          /* columns of a block of B that holds one K block (512 KiB at most) */
#define C_K_OUTER (128 * 1024)  /* elements of C (or of running sums) revisited once per K block */

/* C = beta C where the product contributes nothing (k or alpha 0): BLAS's meaning, in which beta 0
 * clears C without reading it and A and B are not read. */
static void scale_c(int64_t m, int64_t n, float beta, float *c, int64_t ldc) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
}

/* One call's operands, options and buffers. */
typedef struct gemm_call {
    bool ta, tb;
    int64_t m, n, k;
    float alpha, beta;
    const float *a, *b;
    int64_t lda, ldb;
    float *c;
    int64_t ldc;
    const float *bias; /* a linear layer's forward: bias and ReLU in the last K block's tiles */
    bool relu;
    float *a_sums_to; /* where op(A)'s row sums over k are added, rounded (a transposed A), or NULL */
    double *a_sums;   /* those sums, taken while the first block of columns packs op(A) */
    int64_t rs, cs;   /* op(A)'s element (i, k) of a tile at at[i * rs + k * cs] */
    bool sums_buffer; /* beta != 0 and more than one K block: the running sums wait in `sums` */
    bool k_outer;     /* a block of B holds one K block, and every row of C passes it (sgemm_builtin) */
    bool a_packed;    /* op(A) is packed (a transposed A, or any A where A_LANES > 1), not read in place */
    float *bp, *ap, *sums, *edge, *edge_bias;
} gemm_call;

/* The tile of C at (row, col), mr x nr, for K block [pc, pc + kc) from op(A)'s rows at `at` and the B
 * panel `panel`; st: its running sums in the buffer (st_ld floats a row) where the call has one. */
static void one_tile(const gemm_call *g, const float *at, const float *panel, int64_t row, int64_t col, int mr, int nr,
                     int kc, bool first, bool last, float *st, int64_t st_ld) {
    float *ct = g->c + row * g->ldc + col;
    tile_io io = {NULL, 0, ct, g->ldc, last && g->beta != 0.0f, g->beta, NULL, last && g->relu};
    if (last && g->bias) {
        io.bias = g->bias + col;
        if (nr < NR) { /* the last columns' bias, padded */
            memcpy(g->edge_bias, io.bias, sizeof(float) * (size_t)nr);
            io.bias = g->edge_bias;
        }
    }
    if (!first) { /* the running sums: in C (beta 0) or in the buffer */
        io.from = g->sums_buffer ? st : ct;
        io.from_ld = g->sums_buffer ? st_ld : g->ldc;
    }
    if (!last && g->sums_buffer) {
        io.to = st;
        io.to_ld = st_ld;
    }
    if (nr == NR || io.to != ct) {
        kernel(mr, kc, at, g->rs, g->cs, panel, &io);
        return;
    }
    /* C's last columns: the tile runs on a copy, of which the first nr columns return */
    const size_t row_bytes = sizeof(float) * (size_t)nr;
    if (io.from == ct || io.finish)
        for (int i = 0; i < mr; i++) memcpy(g->edge + i * NR, ct + i * g->ldc, row_bytes);
    if (io.from == ct) {
        io.from = g->edge;
        io.from_ld = NR;
    }
    io.to = g->edge;
    io.to_ld = NR;
    kernel(mr, kc, at, g->rs, g->cs, panel, &io);
    for (int i = 0; i < mr; i++) memcpy(ct + i * g->ldc, g->edge + i * NR, row_bytes);
}

/* Rows [ic, ic + mc) of C against the packed block of B's columns [jc, jc + nc) (nc_pad wide) and its
 * K range [pb, pb + kb): every K block in turn, each row tile's rows of op(A) staying in L1 while the
 * block's B panels stream past them. */
static void row_block(const gemm_call *g, int64_t ic, int mc, int64_t jc, int nc, int64_t nc_pad, int64_t pb,
                      int64_t kb) {
    float *sums = g->sums + (g->k_outer ? ic : 0) * nc_pad; /* this block's running sums, where kept */
    for (int64_t pc = pb; pc < pb + kb; pc += KC) {
        const int kc = (int)(pb + kb - pc < KC ? pb + kb - pc : KC);
        const bool first = pc == 0, last = pc + kc >= g->k;
        ct_cpu_sse_work_start(); /* each block: a thread preempted within a call comes back dirty too */
        if (g->a_packed)
            pack_a(g->ta, g->a, g->lda, ic, mc, pc, kc, g->ap, jc == 0 && g->a_sums ? g->a_sums + ic : NULL);
        for (int ir = 0; ir < mc; ir += MR) {
            const float *at = g->a_packed ? g->ap + (size_t)ir * kc * A_LANES : g->a + (ic + ir) * g->lda + pc;
            for (int jr = 0; jr < nc; jr += NR)
                one_tile(g, at, g->bp + (pc - pb) * nc_pad + jr * kc, ic + ir, jc + jr, mc - ir < MR ? mc - ir : MR,
                         nc - jr < NR ? nc - jr : NR, kc, first, last,
                         g->sums_buffer ? sums + (size_t)ir * nc_pad + jr : NULL, nc_pad);
        }
    }
}

/* Every element: the chain of multiply-adds over k from zero, through C (beta 0) or the buffer of
 * running sums (beta != 0) between K blocks, then beta C added at the end. A block of B holds all of
 * K for as many columns as fit B_FLOATS, so the sums of an MC-row block of C are all the buffer keeps,
 * and op(A) is read once per block of columns. Where that would read op(A) more than once (a long K,
 * as in a weight gradient over thousands of rows) and C is small, a block of B holds one K block of
 * up to NC_K_OUTER columns instead and all rows of C pass it before the next: op(A) is read once, and
 * C's (or the sums') elements, which stay in cache, once per K block. */
static void sgemm_builtin(gemm_call *g) {
    if (g->m <= 0 || g->n <= 0) return;
    ct_cpu_sse_work_start();
    if (g->k <= 0 || g->alpha == 0.0f) {
        scale_c(g->m, g->n, g->beta, g->c, g->ldc);
        return;
    }
    const int64_t n_pad = (g->n + NR - 1) / NR * NR;
    int64_t nc_max = B_FLOATS / g->k / NR * NR;
    if (nc_max < NR) nc_max = NR;
    const int64_t nc_k_outer = n_pad < NC_K_OUTER ? n_pad : NC_K_OUTER;
    g->k_outer = g->k > KC && n_pad > nc_max && g->m * nc_k_outer <= C_K_OUTER;
    if (g->k_outer) nc_max = nc_k_outer;
    if (nc_max > n_pad) nc_max = n_pad;
    const int64_t kb = g->k_outer ? KC : g->k; /* a block of B's K extent */
    g->sums_buffer = g->beta != 0.0f && g->k > KC;
    g->a_packed = g->ta || A_LANES > 1;
    const size_t b_floats = (size_t)(kb * nc_max), a_floats = g->a_packed ? (size_t)MC * KC * A_LANES : 0;
    const size_t s_floats = g->sums_buffer ? (size_t)((g->k_outer ? g->m : MC) * nc_max) : 0;
    const size_t doubles_at = (b_floats + a_floats + s_floats + MR * NR + NR + 1) / 2 * 2; /* 8-byte aligned */
    g->bp = buffer_of(doubles_at + (g->a_sums_to ? 2 * (size_t)g->m : 0));
    g->ap = g->bp + b_floats;
    g->sums = g->ap + a_floats;
    g->edge = g->sums + s_floats;
    g->edge_bias = g->edge + MR * NR;
    if (g->a_sums_to) {
        g->a_sums = (double *)(void *)(g->bp + doubles_at);
        memset(g->a_sums, 0, sizeof(double) * (size_t)g->m);
    }
    g->rs = g->a_packed ? A_LANES : g->lda;
    g->cs = g->a_packed ? MR * A_LANES : 1;
    for (int64_t jc = 0; jc < g->n; jc += nc_max) {
        const int nc = (int)(g->n - jc < nc_max ? g->n - jc : nc_max);
        const int64_t nc_pad = (nc + NR - 1) / NR * NR;
        for (int64_t pb = 0; pb < g->k; pb += kb) {
            const int64_t kbl = g->k - pb < kb ? g->k - pb : kb;
            for (int64_t pc = pb; pc < pb + kbl; pc += KC) { /* K block pc at bp + (pc - pb) * nc_pad */
                const int kc = (int)(pb + kbl - pc < KC ? pb + kbl - pc : KC);
                pack_b(g->tb, g->b, g->ldb, jc, nc, pc, kc, g->alpha, g->bp + (pc - pb) * nc_pad);
            }
            for (int64_t ic = 0; ic < g->m; ic += MC)
                row_block(g, ic, (int)(g->m - ic < MC ? g->m - ic : MC), jc, nc, nc_pad, pb, kbl);
        }
    }
    if (g->a_sums_to)
        for (int64_t i = 0; i < g->m; i++) g->a_sums_to[i] += (float)g->a_sums[i];
}

void ct_cpu_sgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
                  const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc) {
    if (ct_cpu_gemm_engine_kind() != CT_GEMM_BUILTIN) {
        ct_cpu_sgemm_library(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    if (order != CblasRowMajor) ct_abort_at(__FILE__, __LINE__, "ct_cpu_sgemm: row-major only");
    gemm_call g = {.ta = ta != CblasNoTrans, .tb = tb != CblasNoTrans, .m = m, .n = n, .k = k, .alpha = alpha,
                   .beta = beta, .a = a, .b = b, .lda = lda, .ldb = ldb, .c = c, .ldc = ldc};
    sgemm_builtin(&g);
}

bool ct_cpu_sgemm_linear(int m, int n, int k, const float *x, int ldx, const float *w, int ldw, const float *bias,
                         bool relu, float *y, int ldy) {
    if (ct_cpu_gemm_engine_kind() != CT_GEMM_BUILTIN || k <= 0) return false; /* k 0: the bias alone, there */
    gemm_call g = {.tb = true, .m = m, .n = n, .k = k, .alpha = 1.0f, .a = x, .b = w, .lda = ldx, .ldb = ldw, .c = y,
                   .ldc = ldy, .bias = bias, .relu = relu};
    sgemm_builtin(&g);
    return true;
}

bool ct_cpu_sgemm_weight_grad(int m, int n, int k, const float *dy, int lddy, const float *x, int ldx, float *dw,
                              int lddw, float *dbias) {
    if (ct_cpu_gemm_engine_kind() != CT_GEMM_BUILTIN || m <= 0 || n <= 0 || k <= 0) return false;
    gemm_call g = {.ta = true, .m = m, .n = n, .k = k, .alpha = 1.0f, .beta = 1.0f, .a = dy, .b = x, .lda = lddy,
                   .ldb = ldx, .c = dw, .ldc = lddw, .a_sums_to = dbias};
    sgemm_builtin(&g);
    return true;
}
