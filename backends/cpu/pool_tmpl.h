/* Pooling kernels over one real type R; included by pool.c for float and double. Every loop is
 * parallel over (sample, channel) planes: a task reads and writes only its own plane, so the
 * scatter-adds of backward never race. Window bounds are clipped to the input before the loops over
 * a window (pool_span, ct_cpu_out_span), which keeps bounds checks out of the innermost loops. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* One output row of max pooling, output by output, with PyTorch's exact rules: the first maximum
 * wins ties, a NaN wins (the last one seen, as PyTorch's `val > max || isnan(val)` does), and the
 * index starts at the window's first real element so an all -inf window still routes its gradient
 * there. The fast path below falls back to this for the rare rows it cannot settle. */
static void FN(maxpool_row_exact)(const ct_pool2d_geom *g, const R *xp, int64_t oh, R *best, int32_t *where) {
    const int64_t H = g->in_h, W = g->in_w, OW = g->out_w, KH = g->kernel[0], KW = g->kernel[1];
    const int64_t DH = g->dilation[0], DW = g->dilation[1];
    const int64_t ih0 = oh * g->stride[0] - g->padding[0];
    int64_t ki_lo, ki_hi;
    pool_span(ih0, DH, H, KH, &ki_lo, &ki_hi);
    for (int64_t ow = 0; ow < OW; ow++) {
        const int64_t iw0 = ow * g->stride[1] - g->padding[1];
        int64_t kj_lo, kj_hi;
        pool_span(iw0, DW, W, KW, &kj_lo, &kj_hi);
        R b = (R)-INFINITY;
        int64_t at_best = ki_lo < ki_hi && kj_lo < kj_hi ? (ih0 + ki_lo * DH) * W + iw0 + kj_lo * DW : -1;
        for (int64_t ki = ki_lo; ki < ki_hi; ki++)
            for (int64_t kj = kj_lo; kj < kj_hi; kj++) {
                const int64_t at = (ih0 + ki * DH) * W + iw0 + kj * DW;
                if (xp[at] > b || isnan(xp[at])) {
                    b = xp[at];
                    at_best = at;
                }
            }
        best[ow] = b;
        where[ow] = (int32_t)at_best;
    }
}

/* 2x2 windows, stride 2, no padding (nn.MaxPool2d(2), the common case): a select tournament per
 * output, a then b then c then d, where only a strictly greater value wins so ties go to the first.
 * Returns nonzero when the row holds a NaN, which maxpool_row_exact then settles. The choices are
 * all-ones/zero masks and the loop has no branch, so the compiler vectorises it (a branch or an
 * `x ? y : z` on indices kept it scalar: a sixth of a CNN step). */
static inline int FN(maxpool_row_2x2)(const R *restrict xp, int32_t W, int32_t oh, int32_t OW, R *restrict best,
                                      int32_t *restrict where) {
    const R *restrict r0 = xp + 2 * oh * W, *restrict r1 = r0 + W;
    const int32_t at0 = 2 * oh * W;
    int32_t nan = 0;
    for (int32_t ow = 0; ow < OW; ow++) {
        const R a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
        const int32_t b_wins = -(b > a), d_wins = -(d > c); /* -1 (all ones) or 0 */
        const R ab = b > a ? b : a, cd = d > c ? d : c;
        const int32_t lower_wins = -(cd > ab);
        const int32_t top = at0 + 2 * ow - b_wins, bottom = at0 + W + 2 * ow - d_wins;
        best[ow] = cd > ab ? cd : ab;
        where[ow] = (bottom & lower_wins) | (top & ~lower_wins);
        nan |= -(a != a) | -(b != b) | -(c != c) | -(d != d);
    }
    return nan != 0;
}
#ifndef MAXPOOL_ROW_2X2
#define MAXPOOL_ROW_2X2 FN(maxpool_row_2x2)
#endif

/* One plane of 2x2 / stride 2 max pooling (no padding): y[H/2, W/2] and its argmax positions in the
 * H x W plane. Also what the convolution's fused pooling runs on each output plane (cpu_impl.h). */
void FN(ct_cpu_maxpool2x2_plane)(const R *x, int64_t H, int64_t W, R *y, int32_t *idx) {
    const ct_pool2d_geom g = {.channels = 1, .in_h = H, .in_w = W, .out_h = H / 2, .out_w = W / 2,
                              .kernel = {2, 2}, .stride = {2, 2}, .dilation = {1, 1}};
    for (int64_t oh = 0; oh < H / 2; oh++) {
        R *best = y + oh * (W / 2);
        int32_t *where = idx + oh * (W / 2);
        if (__builtin_expect(MAXPOOL_ROW_2X2(x, (int32_t)W, (int32_t)oh, (int32_t)(W / 2), best, where), 0))
            FN(maxpool_row_exact)(&g, x, oh, best, where);
    }
}

/* The fast path goes tap by tap over a whole output row, so the innermost loop runs along ow with no
 * bounds checks, and uses selects rather than branches (on real data the comparison is a coin flip
 * a branch predictor loses). Each output still sees its taps in row-major order and only a strictly
 * greater value replaces the maximum, so ties go to the first maximum. A row with a NaN, or with an
 * output no tap beat -inf for, is redone by maxpool_row_exact. */
static void FN(maxpool_fwd)(const ct_pool2d_geom *g, const R *x, R *y, int32_t *idx, int64_t planes) {
    const int64_t H = g->in_h, W = g->in_w, OH = g->out_h, OW = g->out_w, KH = g->kernel[0], KW = g->kernel[1];
    const int64_t SH = g->stride[0], SW = g->stride[1], DH = g->dilation[0], DW = g->dilation[1];
    const bool is_2x2 = KH == 2 && KW == 2 && SH == 2 && SW == 2 && DH == 1 && DW == 1 && g->padding[0] == 0 &&
                        g->padding[1] == 0;
    /* The outputs each kernel column reaches depend on kj alone: computed once, not per row, since
     * the divisions in ct_cpu_out_span would otherwise cost more than a small window's comparisons. */
    int64_t span_lo[POOL_SPAN_CACHE], span_hi[POOL_SPAN_CACHE];
    for (int64_t kj = 0; kj < KW && kj < POOL_SPAN_CACHE; kj++)
        ct_cpu_out_span(kj * DW - g->padding[1], SW, W, OW, &span_lo[kj], &span_hi[kj]);
#pragma omp parallel for schedule(static) if (planes * OH * OW * KH * KW > CT_OMP_MIN)
    for (int64_t p = 0; p < planes; p++) {
        const R *xp = x + p * H * W;
        if (is_2x2) {
            FN(ct_cpu_maxpool2x2_plane)(xp, H, W, y + p * OH * OW, idx + p * OH * OW);
            continue;
        }
        for (int64_t oh = 0; oh < OH; oh++) {
            R *best = y + (p * OH + oh) * OW;
            int32_t *where = idx + (p * OH + oh) * OW;
            for (int64_t ow = 0; ow < OW; ow++) {
                best[ow] = (R)-INFINITY;
                where[ow] = -1;
            }
            const int64_t ih0 = oh * SH - g->padding[0];
            int64_t ki_lo, ki_hi;
            pool_span(ih0, DH, H, KH, &ki_lo, &ki_hi);
            int unsettled = 0;
            for (int64_t ki = ki_lo; ki < ki_hi; ki++) {
                const int64_t ih = ih0 + ki * DH;
                const R *row = xp + ih * W;
                for (int64_t kj = 0; kj < KW; kj++) {
                    const int64_t off = kj * DW - g->padding[1]; /* iw = ow * SW + off */
                    int64_t ow_lo, ow_hi;
                    if (kj < POOL_SPAN_CACHE) {
                        ow_lo = span_lo[kj];
                        ow_hi = span_hi[kj];
                    } else {
                        ct_cpu_out_span(off, SW, W, OW, &ow_lo, &ow_hi);
                    }
                    const int32_t base = (int32_t)(ih * W + off), step = (int32_t)SW;
                    for (int64_t ow = ow_lo; ow < ow_hi; ow++) {
                        const R v = row[ow * SW + off], b = best[ow];
                        const int32_t gt = -(int32_t)(v > b); /* all ones when v wins */
                        where[ow] ^= (where[ow] ^ (base + (int32_t)ow * step)) & gt;
                        best[ow] = v > b ? v : b;
                        unsettled |= v != v;
                    }
                }
            }
            for (int64_t ow = 0; ow < OW; ow++) unsettled |= where[ow] < 0;
            if (__builtin_expect(unsettled, 0)) FN(maxpool_row_exact)(g, xp, oh, best, where);
        }
    }
}

static void FN(maxpool_bwd)(const ct_pool2d_geom *g, const R *dy, const int32_t *idx, R *dx, int64_t planes) {
    const int64_t hw = g->in_h * g->in_w, ohw = g->out_h * g->out_w;
#pragma omp parallel for schedule(static) if (planes * (hw + ohw) > CT_OMP_MIN)
    for (int64_t p = 0; p < planes; p++) {
        R *dxp = dx + p * hw;
        const R *dyp = dy + p * ohw;
        const int32_t *ip = idx + p * ohw;
        memset(dxp, 0, (size_t)hw * sizeof(R));
        for (int64_t o = 0; o < ohw; o++)
            if (ip[o] >= 0) dxp[ip[o]] += dyp[o];
    }
}

static void FN(avgpool_fwd)(const ct_pool2d_geom *g, const R *x, R *y, int64_t planes) {
    const int64_t H = g->in_h, W = g->in_w, OH = g->out_h, OW = g->out_w;
#pragma omp parallel for schedule(static) if (planes * OH * OW * g->kernel[0] * g->kernel[1] > CT_OMP_MIN)
    for (int64_t p = 0; p < planes; p++) {
        const R *xp = x + p * H * W;
        R *yp = y + p * OH * OW;
        for (int64_t oh = 0; oh < OH; oh++) {
            int64_t h0, h1, hpool;
            avg_window(oh, g->stride[0], g->padding[0], g->kernel[0], H, &h0, &h1, &hpool);
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t w0, w1, wpool;
                avg_window(ow, g->stride[1], g->padding[1], g->kernel[1], W, &w0, &w1, &wpool);
                if (h0 >= h1 || w0 >= w1) { /* PyTorch writes 0 for a window with no real element */
                    yp[oh * OW + ow] = 0;
                    continue;
                }
                double sum = 0.0;
                for (int64_t ih = h0; ih < h1; ih++)
                    for (int64_t iw = w0; iw < w1; iw++) sum += xp[ih * W + iw];
                const int64_t div = g->count_include_pad ? hpool * wpool : (h1 - h0) * (w1 - w0);
                yp[oh * OW + ow] = (R)(sum / (double)div);
            }
        }
    }
}

static void FN(avgpool_bwd)(const ct_pool2d_geom *g, const R *dy, R *dx, int64_t planes) {
    const int64_t H = g->in_h, W = g->in_w, OH = g->out_h, OW = g->out_w;
#pragma omp parallel for schedule(static) if (planes * OH * OW * g->kernel[0] * g->kernel[1] > CT_OMP_MIN)
    for (int64_t p = 0; p < planes; p++) {
        R *dxp = dx + p * H * W;
        const R *dyp = dy + p * OH * OW;
        memset(dxp, 0, (size_t)(H * W) * sizeof(R));
        for (int64_t oh = 0; oh < OH; oh++) {
            int64_t h0, h1, hpool;
            avg_window(oh, g->stride[0], g->padding[0], g->kernel[0], H, &h0, &h1, &hpool);
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t w0, w1, wpool;
                avg_window(ow, g->stride[1], g->padding[1], g->kernel[1], W, &w0, &w1, &wpool);
                if (h0 >= h1 || w0 >= w1) continue;
                const int64_t div = g->count_include_pad ? hpool * wpool : (h1 - h0) * (w1 - w0);
                const R v = (R)(dyp[oh * OW + ow] / (double)div);
                for (int64_t ih = h0; ih < h1; ih++)
                    for (int64_t iw = w0; iw < w1; iw++) dxp[ih * W + iw] += v;
            }
        }
    }
}
