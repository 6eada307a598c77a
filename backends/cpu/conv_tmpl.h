/* Convolution kernels over one real type R; included by conv.c for float and double, with GEMM the
 * matching CBLAS routine.
 *
 * The batch is split over the threads, a sample at a time, and each sample is three single-threaded
 * GEMMs in NCHW as it is: its column matrix [C*kh*kw, OH*OW] (row r = (c, ki, kj)) is small enough
 * to stay in the thread's cache between im2col and the GEMM that reads it, the forward GEMM writes
 * the sample's output planes in place (no unpacking of a batch-wide result), and the backward GEMMs
 * read dy's planes as they are. A thread owns a slot of the workspace: its column matrix, and its
 * partial sums of dweight and dbias, added up in slot order at the end of backward. A fused ReLU
 * (g->relu) is applied to each sample's output right after its GEMM, and backward masks the
 * sample's output gradient into the slot before the GEMMs read it: no pass over the whole batch.
 *
 * A fused 2x2 max pooling (g->pool2x2) pools each output plane while it is in the slot, so only
 * the pooled planes and their argmax indices leave it. Its output gradient is then one in four at
 * most: with a multiple of 16 input channels backward sums over those alone (sparse_backward),
 * without im2col, col2im or GEMMs.
 *
 * Writing a column row is a row copy per output row with the padded ends zeroed (one masked select
 * over the whole row for a "same" convolution, see conv_masks), so no inner loop does bounds checks
 * or index division. A 1x1 convolution with stride 1 and no padding needs no columns at all: the
 * sample's input planes are its column matrix. */
#include <math.h>
#include <stdint.h>
#include <string.h>

/* The "same" convolution case (stride 1, output rows as wide as the input's: 3x3 with padding 1,
 * ...): the column row of tap (c, ki, kj) is then the input plane shifted by one constant,
 * col[p] = x[p + shift] where the tap lands inside the plane, else 0. Which positions p those are
 * depends on the tap alone, so a 0/1 mask per tap (conv_masks, in the thread's slot) turns im2col and
 * col2im into one flat select loop per column row, which vectorises: no row-by-row copies of 14
 * elements, no calls. shift is (ki*DH - PH)*W + kj*DW - PW, and p + shift stays inside the plane on
 * [lo, hi) (clip_run); outside it every position is padding. */
static void FN(clip_run)(int64_t shift, int64_t n, int64_t plane, int64_t *lo, int64_t *hi) {
    *lo = shift < 0 ? (-shift < n ? -shift : n) : 0;
    *hi = plane - shift < n ? plane - shift : n;
    if (*hi < *lo) *hi = *lo;
}

/* The taps' masks: masks[(ki*KW + kj)*OH*OW + oh*OW + ow] = 1 where the tap reads a real input. */
static void FN(conv_masks)(const ct_conv2d_geom *g, R *masks) {
    const int64_t H = g->in_h, W = g->in_w, OH = g->out_h, OW = g->out_w;
    for (int64_t ki = 0; ki < g->kernel[0]; ki++)
        for (int64_t kj = 0; kj < g->kernel[1]; kj++) {
            R *m = masks + (ki * g->kernel[1] + kj) * OH * OW;
            const int64_t ih_off = ki * g->dilation[0] - g->padding[0], iw_off = kj * g->dilation[1] - g->padding[1];
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    const int64_t ih = oh + ih_off, iw = ow + iw_off;
                    m[oh * OW + ow] = ih >= 0 && ih < H && iw >= 0 && iw < W;
                }
        }
}

/* The column matrix of one sample x[C, H, W]; masks from conv_masks where conv_lines_up(g). */
static void FN(im2col)(const ct_conv2d_geom *g, const R *x, const R *masks, R *col) {
    const int64_t H = g->in_h, W = g->in_w, OH = g->out_h, OW = g->out_w;
    const int64_t KH = g->kernel[0], KW = g->kernel[1], SH = g->stride[0], SW = g->stride[1];
    const int64_t ohw = OH * OW, rows = g->in_channels * KH * KW;
    const bool lines_up = conv_lines_up(g);
    for (int64_t r = 0; r < rows; r++) {
        const int64_t c = r / (KH * KW), ki = (r / KW) % KH, kj = r % KW;
        const int64_t ih_off = ki * g->dilation[0] - g->padding[0], iw_off = kj * g->dilation[1] - g->padding[1];
        const R *plane = x + c * H * W;
        R *restrict dst = col + r * ohw;
        if (lines_up) {
            const int64_t shift = ih_off * W + iw_off;
            const R *restrict m = masks + (ki * KW + kj) * ohw, *restrict src = plane + shift;
            int64_t lo, hi;
            FN(clip_run)(shift, ohw, H * W, &lo, &hi);
            for (int64_t p = 0; p < lo; p++) dst[p] = 0;
            for (int64_t p = lo; p < hi; p++) {
                const R v = src[p]; /* read unconditionally, so the select vectorises */
                dst[p] = m[p] != 0 ? v : 0;
            }
            for (int64_t p = hi; p < ohw; p++) dst[p] = 0;
            continue;
        }
        int64_t oh_lo, oh_hi, ow_lo, ow_hi;
        ct_cpu_out_span(ih_off, SH, H, OH, &oh_lo, &oh_hi);
        ct_cpu_out_span(iw_off, SW, W, OW, &ow_lo, &ow_hi);
        memset(dst, 0, (size_t)(oh_lo * OW) * sizeof(R));
        for (int64_t oh = oh_lo; oh < oh_hi; oh++) {
            R *d = dst + oh * OW;
            const R *src = plane + (oh * SH + ih_off) * W + iw_off;
            for (int64_t ow = 0; ow < ow_lo; ow++) d[ow] = 0;
            if (SW == 1)
                memcpy(d + ow_lo, src + ow_lo, (size_t)(ow_hi - ow_lo) * sizeof(R));
            else
                for (int64_t ow = ow_lo; ow < ow_hi; ow++) d[ow] = src[ow * SW];
            for (int64_t ow = ow_hi; ow < OW; ow++) d[ow] = 0;
        }
        memset(dst + oh_hi * OW, 0, (size_t)((OH - oh_hi) * OW) * sizeof(R));
    }
}

/* dx[C, H, W] of one sample = the sum of col's entries back at the input positions they were copied
 * from (overwrites dx); masks as for im2col. */
static void FN(col2im)(const ct_conv2d_geom *g, const R *col, const R *masks, R *dx) {
    const int64_t C = g->in_channels, H = g->in_h, W = g->in_w, OH = g->out_h, OW = g->out_w;
    const int64_t KH = g->kernel[0], KW = g->kernel[1], SH = g->stride[0], SW = g->stride[1];
    const int64_t ohw = OH * OW;
    const bool lines_up = conv_lines_up(g);
    memset(dx, 0, (size_t)(C * H * W) * sizeof(R));
    for (int64_t c = 0; c < C; c++) {
        R *plane = dx + c * H * W;
        for (int64_t ki = 0; ki < KH; ki++)
            for (int64_t kj = 0; kj < KW; kj++) {
                const int64_t ih_off = ki * g->dilation[0] - g->padding[0];
                const int64_t iw_off = kj * g->dilation[1] - g->padding[1];
                const R *src = col + ((c * KH + ki) * KW + kj) * ohw;
                if (lines_up) {
                    const int64_t shift = ih_off * W + iw_off;
                    const R *restrict m = masks + (ki * KW + kj) * ohw, *restrict s = src;
                    R *restrict d = plane + shift;
                    int64_t lo, hi;
                    FN(clip_run)(shift, ohw, H * W, &lo, &hi);
                    for (int64_t p = lo; p < hi; p++) d[p] += m[p] != 0 ? s[p] : 0;
                    continue;
                }
                int64_t oh_lo, oh_hi, ow_lo, ow_hi;
                ct_cpu_out_span(ih_off, SH, H, OH, &oh_lo, &oh_hi);
                ct_cpu_out_span(iw_off, SW, W, OW, &ow_lo, &ow_hi);
                for (int64_t oh = oh_lo; oh < oh_hi; oh++) {
                    R *restrict d = plane + (oh * SH + ih_off) * W + iw_off;
                    const R *restrict s = src + oh * OW;
                    if (SW == 1)
                        for (int64_t ow = ow_lo; ow < ow_hi; ow++) d[ow] += s[ow];
                    else
                        for (int64_t ow = ow_lo; ow < ow_hi; ow++) d[ow * SW] += s[ow];
                }
            }
    }
}

/* The float64 sum of v[0, n), in eight interleaved partial sums: one running sum would make every
 * addition wait for the one before it. */
static double FN(sum_f64)(const R *v, int64_t n) {
    double part[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) part[k] += v[i + k];
    double acc = 0;
    for (; i < n; i++) acc += v[i];
    for (int k = 0; k < 8; k++) acc += part[k];
    return acc;
}

/* The slot's parts for sparse_backward (conv.c's SPARSE_* list). */
typedef struct FN(sparse_ws) {
    const int32_t *base, *inv;
    const R *wt;
    R *xt, *dxt, *grads, *ent_g;
    int32_t *ent_o, *start;
} FN(sparse_ws);

static FN(sparse_ws) FN(sparse_parts)(const ct_conv2d_geom *g, R *slot) {
    return (FN(sparse_ws)){.base = (const int32_t *)(slot + conv_sparse_offset(g, SPARSE_BASE)),
                           .inv = (const int32_t *)(slot + conv_sparse_offset(g, SPARSE_INV)),
                           .wt = slot + conv_sparse_offset(g, SPARSE_WT),
                           .xt = slot + conv_sparse_offset(g, SPARSE_XT),
                           .dxt = slot + conv_sparse_offset(g, SPARSE_DXT),
                           .grads = slot + conv_sparse_offset(g, SPARSE_GRADS),
                           .ent_g = slot + conv_sparse_offset(g, SPARSE_ENT_G),
                           .ent_o = (int32_t *)(slot + conv_sparse_offset(g, SPARSE_ENT_O)),
                           .start = (int32_t *)(slot + conv_sparse_offset(g, SPARSE_START))};
}

/* What every sample of a call shares, made once per thread: where each output's window starts in
 * the zero-padded input (tap t then reads base[p] + (ki*DH)*Wp + kj*DW, no table and no bounds
 * check), which output each tap's read of an input position belongs to (inv, -1: none), and the
 * weight tap-major ([taps][O][C]). */
static void FN(sparse_prepare)(const ct_conv2d_geom *g, const R *w, R *slot) {
    const int64_t C = g->in_channels, H = g->in_h, W = g->in_w, O = g->out_channels, T = g->kernel[0] * g->kernel[1];
    const int64_t OH = g->out_h, OW = g->out_w, Wp = W + 2 * g->padding[1];
    int32_t *base = (int32_t *)(slot + conv_sparse_offset(g, SPARSE_BASE));
    int32_t *inv = (int32_t *)(slot + conv_sparse_offset(g, SPARSE_INV));
    R *wt = slot + conv_sparse_offset(g, SPARSE_WT);
    for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) base[oh * OW + ow] = (int32_t)(oh * g->stride[0] * Wp + ow * g->stride[1]);
    for (int64_t i = 0; i < T * H * W; i++) inv[i] = -1;
    for (int64_t ki = 0; ki < g->kernel[0]; ki++)
        for (int64_t kj = 0; kj < g->kernel[1]; kj++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    const int64_t ih = oh * g->stride[0] - g->padding[0] + ki * g->dilation[0];
                    const int64_t iw = ow * g->stride[1] - g->padding[1] + kj * g->dilation[1];
                    if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                        inv[(ki * g->kernel[1] + kj) * H * W + ih * W + iw] = (int32_t)(oh * OW + ow);
                }
    for (int64_t o = 0; o < O; o++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t t = 0; t < T; t++) wt[(t * O + o) * C + c] = w[(o * C + c) * T + t];
}

/* sparse_backward's sums run over blocks of channels held in registers: nv (1, 2 or 4) vectors of
 * the widest kind the level this copy is compiled for has (CT_CPU_VEC_BYTES), two interleaved chains
 * of them so that one FMA need not wait for the last. Vectors wider than the level's registers
 * would be split by the compiler through memory, which made this path several times slower than
 * the dense one on AVX2. always_inline with a constant nv, so that the accumulators are registers. */
typedef R FN(vec) __attribute__((vector_size(CT_CPU_VEC_BYTES)));
enum { FN(LANES) = CT_CPU_VEC_BYTES / sizeof(R) };

/* d[0, nv*LANES) = (add ? d : 0) + sum_{k < n} coef[k] * src[idx[k] * stride + 0, nv*LANES): the one sum of
 * sparse_backward (the weight gradient's over a channel's windows, the input gradient's over the
 * gradients at an output position). */
static inline __attribute__((always_inline)) void FN(sparse_sum)(const R *src, int64_t stride, const int32_t *idx,
                                                                 const R *coef, int64_t n, bool add, R *d,
                                                                 const int nv) {
    FN(vec) a[4] = {0}, b[4] = {0};
    int64_t k = 0;
    for (; k + 2 <= n; k += 2) {
        const R *pa = src + idx[k] * stride, *pb = src + idx[k + 1] * stride;
        const R ca = coef[k], cb = coef[k + 1];
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) {
            FN(vec) xa, xb;
            memcpy(&xa, pa + v * FN(LANES), sizeof xa);
            a[v] += ca * xa;
            memcpy(&xb, pb + v * FN(LANES), sizeof xb);
            b[v] += cb * xb;
        }
    }
    if (k < n)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) {
            FN(vec) xa;
            memcpy(&xa, src + idx[k] * stride + v * FN(LANES), sizeof xa);
            a[v] += coef[k] * xa;
        }
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) {
        FN(vec) dv = {0};
        if (add) memcpy(&dv, d + v * FN(LANES), sizeof dv);
        dv += a[v] + b[v];
        memcpy(d + v * FN(LANES), &dv, sizeof dv);
    }
}

/* sparse_sum with nv as a constant of each call, so that its accumulators are registers. */
static inline __attribute__((always_inline)) void FN(sparse_block)(const R *src, int64_t stride, const int32_t *idx,
                                                                   const R *coef, int64_t n, bool add, R *d, int nv) {
    if (nv == 4)
        FN(sparse_sum)(src, stride, idx, coef, n, add, d, 4);
    else if (nv == 2)
        FN(sparse_sum)(src, stride, idx, coef, n, add, d, 2);
    else
        FN(sparse_sum)(src, stride, idx, coef, n, add, d, 1);
}

/* The gradients of one sample of a pooled convolution (conv_sparse_backward). Only a window's argmax
 * has an output gradient, and only where the ReLU let it through: with g_j that gradient of o's
 * window j (0 where the pooled value is not positive) and p_j its argmax,
 *   dbias[o] = sum_j g_j,   dW[o, c, t] = sum_j g_j x[c, tap t of p_j],
 *   dx[c, q] = sum_t sum over the (o, j) with p_j = inv[t][q] of g_j W[o, c, t],
 * a quarter of the dense GEMMs' terms at most. The input (zero-padded) and its gradient are
 * transposed to [positions][C] so that a term is a contiguous run of channels, a block of up to
 * four vectors (sparse_sum; C is a multiple of 16, so the blocks tile it),
 * and every sum runs in registers: dW over o's windows, dx over the non-zero gradients at an output
 * position, which are first grouped by position (ent_*, start). dw is the slot's partial sum,
 * [O][taps][C] (un-permuted when the slots are added up); dx is overwritten. */
static void FN(sparse_backward)(const ct_conv2d_geom *g, const R *xb, const R *yb, const int32_t *ib, const R *dpb,
                                const FN(sparse_ws) *s, double *db, R *dw, R *dxb) {
    const int64_t C = g->in_channels, HW = g->in_h * g->in_w, O = g->out_channels, T = g->kernel[0] * g->kernel[1];
    const int64_t ohw = g->out_h * g->out_w, P = (g->out_h / 2) * (g->out_w / 2);
    /* channels per block: 32 where C allows, 16 else, but at most four vectors */
    int64_t step = C % 32 == 0 ? 32 : 16;
    if (step > 4 * FN(LANES)) step = 4 * FN(LANES);
    const int nv = (int)(step / FN(LANES));
    R *grads = s->grads;
    for (int64_t i = 0; i < O * P; i++) grads[i] = yb[i] <= 0 ? 0 : dpb[i];
    if (db)
        for (int64_t o = 0; o < O; o++) db[o] += FN(sum_f64)(grads + o * P, P);
    if (dw) {
        const int64_t PH = g->padding[0], PW = g->padding[1], Wp = g->in_w + 2 * PW;
        const int64_t padded = (g->in_h + 2 * PH) * Wp;
        R *xt = s->xt;
        memset(xt, 0, (size_t)(padded * C) * sizeof(R));
        for (int64_t c = 0; c < C; c++)
            for (int64_t ih = 0; ih < g->in_h; ih++)
                for (int64_t iw = 0; iw < g->in_w; iw++)
                    xt[((ih + PH) * Wp + iw + PW) * C + c] = xb[c * HW + ih * g->in_w + iw];
        int32_t row[256]; /* the windows' argmax positions in the padded input */
        for (int64_t o = 0; o < O; o++)
            for (int64_t j0 = 0; j0 < P; j0 += 256) {
                const int64_t n = P - j0 < 256 ? P - j0 : 256;
                const R *go = grads + o * P + j0;
                const int32_t *io = ib + o * P + j0;
                for (int64_t j = 0; j < n; j++) row[j] = s->base[io[j]];
                for (int64_t t = 0; t < T; t++) {
                    const int64_t ki = t / g->kernel[1], kj = t % g->kernel[1];
                    const int64_t tap = (ki * g->dilation[0] * Wp + kj * g->dilation[1]) * C;
                    R *d = dw + (o * T + t) * C;
                    for (int64_t c0 = 0; c0 < C; c0 += step)
                        FN(sparse_block)(xt + tap + c0, C, row, go, n, true, d + c0, nv);
                }
            }
    }
    if (!dxb) return;
    /* The non-zero gradients grouped by the output position of their argmax (a counting sort,
     * channels ascending within a position): position p's are [p ? start[p-1] : 0, start[p]). */
    int32_t *start = s->start, *ent_o = s->ent_o;
    R *ent_g = s->ent_g;
    memset(start, 0, (size_t)(ohw + 1) * sizeof(int32_t));
    for (int64_t i = 0; i < O * P; i++) start[ib[i] + 1] += grads[i] != 0;
    for (int64_t p = 0; p < ohw; p++) start[p + 1] += start[p];
    for (int64_t o = 0; o < O; o++)
        for (int64_t j = 0; j < P; j++)
            if (grads[o * P + j] != 0) {
                const int32_t at = start[ib[o * P + j]]++;
                ent_o[at] = (int32_t)o;
                ent_g[at] = grads[o * P + j];
            }
    R *dxt = s->dxt;
    for (int64_t t = 0; t < T; t++) {
        const int32_t *inv = s->inv + t * HW;
        const R *wtt = s->wt + t * O * C;
        for (int64_t q = 0; q < HW; q++) {
            const int32_t p = inv[q];
            const int32_t e0 = p > 0 ? start[p - 1] : 0, e1 = p >= 0 ? start[p] : 0;
            for (int64_t c0 = 0; c0 < C; c0 += step)
                FN(sparse_block)(wtt + c0, C, ent_o + e0, ent_g + e0, e1 - e0, t > 0, dxt + q * C + c0, nv);
        }
    }
    for (int64_t c = 0; c < C; c++)
        for (int64_t q = 0; q < HW; q++) dxb[c * HW + q] = dxt[q * C + c];
}

/* The threads of a kernel: no more than the workspace has slots for, and one (whose GEMMs the engine
 * then runs on all the threads) when the batch has fewer samples than that, or the work does not pay
 * for a team (below CT_OMP_MIN multiply-adds). */
static int FN(conv_threads)(const ct_conv2d_geom *g, const ct_tensor *ws, int64_t B) {
    const int64_t slots = ct_tensor_numel(ws) / conv_slot_numel(g);
    CT_ASSERT(slots >= 1);
    int64_t n = omp_get_max_threads();
    if (n > slots) n = slots;
    const int64_t work = B * conv_rows(g) * g->out_channels * g->out_h * g->out_w;
    return work > CT_OMP_MIN && B >= n ? (int)n : 1;
}

/* idx: the argmax positions of a fused 2x2 max pooling (g->pool2x2), else NULL. */
static void FN(conv_forward)(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                             const ct_tensor *bias, ct_tensor *y, int32_t *idx, ct_tensor *ws) {
    const int64_t B = x->shape[0], O = g->out_channels, ohw = g->out_h * g->out_w, rows = conv_rows(g);
    const int64_t in_numel = g->in_channels * g->in_h * g->in_w, slot = conv_slot_numel(g);
    const int64_t pooled = (g->out_h / 2) * (g->out_w / 2);
    const bool direct = conv_is_pointwise(g);
    const R *w = weight->data, *b_ = bias ? (const R *)bias->data : NULL;
#pragma omp parallel num_threads(FN(conv_threads)(g, ws, B))
    {
        R *mine = (R *)ws->data + omp_get_thread_num() * slot;
        R *col = mine + conv_col_offset(g), *masks = mine + conv_mask_offset(g);
        if (conv_lines_up(g) && !direct) FN(conv_masks)(g, masks);
#pragma omp for schedule(static)
        for (int64_t b = 0; b < B; b++) {
            const R *xb = (const R *)x->data + b * in_numel;
            /* with pooling the sample's output planes stay in the slot, and only the pooled ones leave */
            R *yb = idx ? mine + conv_relu_offset(g) : (R *)y->data + b * O * ohw;
            if (!direct) FN(im2col)(g, xb, masks, col);
            /* the bias is the GEMM's starting value, so the output is written once */
            if (b_)
                for (int64_t o = 0; o < O; o++)
                    for (int64_t p = 0; p < ohw; p++) yb[o * ohw + p] = b_[o];
            GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)O, (int)ohw, (int)rows, 1, w, (int)rows,
                 direct ? xb : col, (int)ohw, b_ ? 1 : 0, yb, (int)ohw);
            if (g->relu) /* as ct_op_activation_forward: a NaN passes */
                for (int64_t i = 0; i < O * ohw; i++) yb[i] = yb[i] < 0 ? 0 : yb[i];
            if (idx)
                for (int64_t o = 0; o < O; o++)
                    FN(ct_cpu_maxpool2x2_plane)(yb + o * ohw, g->out_h, g->out_w,
                                                (R *)y->data + (b * O + o) * pooled, idx + (b * O + o) * pooled);
        }
    }
}

/* Whether every element is finite. The sparse backward leaves out the terms of zero gradients, which
 * PyTorch's dense GEMMs multiply (0 * NaN is NaN): an input or weight holding a NaN or an infinity
 * takes the dense path, so that the gradients are NaN where PyTorch's are. */
static bool FN(conv_finite)(const R *x, int64_t n) {
    int ok = 1;
#pragma omp parallel for reduction(& : ok) if (n > CT_OMP_MIN)
    for (int64_t i = 0; i < n; i++) ok &= isfinite(x[i]) != 0;
    return ok;
}

/* y: the forward's output after a fused ReLU (g->relu), else NULL; idx: with a fused pooling
 * (g->pool2x2) its argmax positions, and y and dy are the pooled output and its gradient. */
static void FN(conv_backward)(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight, const void *y,
                              const int32_t *idx, const ct_tensor *dy, ct_tensor *dweight, ct_tensor *dbias,
                              ct_tensor *dx, ct_tensor *ws) {
    const int64_t B = dy->shape[0], O = g->out_channels, ohw = g->out_h * g->out_w, rows = conv_rows(g);
    const int64_t in_numel = g->in_channels * g->in_h * g->in_w, slot = conv_slot_numel(g);
    const int64_t pooled = (g->out_h / 2) * (g->out_w / 2);
    const R *w = weight->data;
    const bool direct = conv_is_pointwise(g);
    const bool sparse = idx && conv_sparse_backward(g) && FN(conv_finite)(w, O * rows) &&
                        FN(conv_finite)((const R *)x->data, B * in_numel);
    const int nt = FN(conv_threads)(g, ws, B);
#pragma omp parallel num_threads(nt)
    {
        R *mine = (R *)ws->data + omp_get_thread_num() * slot;
        double *db = (double *)mine; /* float64 sums: a bias sees every output position of the batch */
        R *dw = mine + conv_dw_offset(g), *col = mine + conv_col_offset(g), *masked = mine + conv_relu_offset(g);
        R *masks = mine + conv_mask_offset(g);
        if (conv_lines_up(g) && !direct && !sparse) FN(conv_masks)(g, masks);
        if (sparse) FN(sparse_prepare)(g, w, mine);
        const FN(sparse_ws) parts = FN(sparse_parts)(g, mine);
        if (dbias) memset(db, 0, (size_t)O * sizeof(double));
        if (dweight) memset(dw, 0, (size_t)(O * rows) * sizeof(R));
#pragma omp for schedule(static)
        for (int64_t b = 0; b < B; b++) {
            const R *xb = (const R *)x->data + b * in_numel;
            if (sparse) {
                FN(sparse_backward)(g, xb, (const R *)y + b * O * pooled, idx + b * O * pooled,
                                    (const R *)dy->data + b * O * pooled, &parts, dbias ? db : NULL,
                                    dweight ? dw : NULL, dx ? (R *)dx->data + b * in_numel : NULL);
                continue;
            }
            const R *dyb = idx ? NULL : (const R *)dy->data + b * O * ohw;
            if (idx) {
                /* back through the pooling and the ReLU: a window's gradient goes to its argmax when
                 * the ReLU let that value through (the pooled value is it), the rest of the plane is 0.
                 * The gradients are selected in a vectorised pass and then scattered: a branch on the
                 * ReLU (which the compiler makes of a select next to a scattered store) is a coin flip
                 * on real data. */
                const R *yb = (const R *)y + b * O * pooled, *dpb = (const R *)dy->data + b * O * pooled;
                const int32_t *ib = idx + b * O * pooled;
                memset(masked, 0, (size_t)(O * ohw) * sizeof(R));
                for (int64_t o = 0; o < O; o++) {
                    R *plane = masked + o * ohw;
                    for (int64_t j0 = 0; j0 < pooled; j0 += 256) {
                        const int64_t n = pooled - j0 < 256 ? pooled - j0 : 256;
                        const R *yo = yb + o * pooled + j0, *dpo = dpb + o * pooled + j0;
                        const int32_t *io = ib + o * pooled + j0;
                        R through[256];
                        for (int64_t j = 0; j < n; j++) through[j] = yo[j] <= 0 ? 0 : dpo[j];
                        for (int64_t j = 0; j < n; j++) plane[io[j]] = through[j];
                    }
                }
                dyb = masked;
            } else if (y) {
                /* through the ReLU: where it let the value through (as ct_op_activation_backward) */
                const R *yb = (const R *)y + b * O * ohw;
                for (int64_t i = 0; i < O * ohw; i++) masked[i] = yb[i] <= 0 ? 0 : dyb[i];
                dyb = masked;
            }
            if (dbias)
                for (int64_t o = 0; o < O; o++) db[o] += FN(sum_f64)(dyb + o * ohw, ohw);
            if (dweight) {
                /* dW[O, rows] += dY[O, ohw] @ col[rows, ohw]^T */
                if (!direct) FN(im2col)(g, xb, masks, col);
                GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)O, (int)rows, (int)ohw, 1, dyb, (int)ohw,
                     direct ? xb : col, (int)ohw, 1, dw, (int)rows);
            }
            if (dx) {
                /* dcol[rows, ohw] = W[O, rows]^T @ dY[O, ohw], folded back onto the input planes */
                R *dxb = (R *)dx->data + b * in_numel;
                GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)rows, (int)ohw, (int)O, 1, w, (int)rows, dyb,
                     (int)ohw, 0, direct ? dxb : col, (int)ohw);
                if (!direct) FN(col2im)(g, col, masks, dxb);
            }
        }
    }
    /* The slots' partial sums, in slot order (the bias's in float64 until the end). */
    if (dbias)
        for (int64_t o = 0; o < O; o++) {
            double acc = 0;
            for (int t = 0; t < nt; t++) acc += ((const double *)((const R *)ws->data + t * slot))[o];
            ((R *)dbias->data)[o] += (R)acc;
        }
    if (dweight)
        for (int t = 0; t < nt; t++) {
            const R *dw = (const R *)ws->data + t * slot + conv_dw_offset(g);
            R *out = dweight->data;
            if (!sparse) {
                for (int64_t i = 0; i < O * rows; i++) out[i] += dw[i];
                continue;
            }
            /* sparse_backward's sums are [O][taps][C]; the weight is [O][C][taps] */
            const int64_t C = g->in_channels, T = g->kernel[0] * g->kernel[1];
            for (int64_t o = 0; o < O; o++)
                for (int64_t c = 0; c < C; c++)
                    for (int64_t k = 0; k < T; k++) out[(o * C + c) * T + k] += dw[(o * T + k) * C + c];
        }
}
