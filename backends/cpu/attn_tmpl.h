/* Attention kernels over one real type R (EXP: its exponential); included by attn.c for float and
 * double. */
#include <stdint.h>
#include <string.h>

static void FN(heads_split)(const R *x, R *out, int64_t B, int64_t T, int64_t W, int64_t off, int64_t H, int64_t D) {
#pragma omp parallel for collapse(2) schedule(static) if (B * H * T * D > CT_OMP_MIN)
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            const R *src = x + b * T * W + off + h * D;
            R *dst = out + (b * H + h) * T * D;
            for (int64_t t = 0; t < T; t++) memcpy(dst + t * D, src + t * W, (size_t)D * sizeof(R));
        }
}

static void FN(heads_merge)(const R *x, R *out, int64_t B, int64_t T, int64_t W, int64_t off, int64_t H, int64_t D) {
#pragma omp parallel for collapse(2) schedule(static) if (B * H * T * D > CT_OMP_MIN)
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            const R *src = x + (b * H + h) * T * D;
            R *dst = out + b * T * W + off + h * D;
            for (int64_t t = 0; t < T; t++) memcpy(dst + t * W, src + t * D, (size_t)D * sizeof(R));
        }
}

/* One row per iteration; row r is query i = r % Tq, which sees keys [0, i + shift]. */
static void FN(causal_softmax_fwd)(const R *x, R *y, int64_t rows, int64_t Tq, int64_t Tk) {
    const int64_t shift = Tk - Tq;
#pragma omp parallel for schedule(static) if (rows * Tk > CT_OMP_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t len = r % Tq + shift + 1;
        const R *p = x + r * Tk;
        R *q = y + r * Tk;
        R m = p[0];
        for (int64_t j = 1; j < len; j++) m = p[j] > m ? p[j] : m;
        double sum = 0.0;
        /* y may alias x: element j is read before it is written, and never read again */
        for (int64_t j = 0; j < len; j++) {
            R e = EXP(p[j] - m);
            q[j] = e;
            sum += (double)e;
        }
        const R inv = (R)(1.0 / sum);
        for (int64_t j = 0; j < len; j++) q[j] *= inv;
        for (int64_t j = len; j < Tk; j++) q[j] = (R)0;
    }
}

static void FN(causal_softmax_bwd)(const R *y, const R *dy, R *dx, int64_t rows, int64_t Tq, int64_t Tk) {
    const int64_t shift = Tk - Tq;
#pragma omp parallel for schedule(static) if (rows * Tk > CT_OMP_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t len = r % Tq + shift + 1;
        const R *p = y + r * Tk, *g = dy + r * Tk;
        R *o = dx + r * Tk;
        double dot = 0.0;
        for (int64_t j = 0; j < len; j++) dot += (double)p[j] * (double)g[j];
        /* dx may alias dy: the dot product is complete before the first write */
        for (int64_t j = 0; j < len; j++) o[j] = (R)((double)p[j] * ((double)g[j] - dot));
        for (int64_t j = len; j < Tk; j++) o[j] = (R)0;
    }
}
