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
 * Writing a column row is a row copy per output row with the padded ends zeroed (one block copy for
 * a "same" convolution, see rows_line_up), so no inner loop does bounds checks or index division. A 1x1 convolution with stride 1 and no padding needs no
 * columns at all: the sample's input planes are its column matrix. */
#include <stdint.h>
#include <string.h>

/* Stride 1 with output rows as wide as input rows (a "same" convolution: 3x3 with padding 1, ...):
 * a column row's valid rows are then one run of the input plane shifted by a constant, so im2col
 * and col2im move each as one block instead of an image row at a time. The block's first and last
 * elements may fall before or after the plane; they are padded positions, clipped here to
 * [*lo, *hi) of the run's n elements. */
static bool FN(rows_line_up)(const ct_conv2d_geom *g) {
    return g->stride[0] == 1 && g->stride[1] == 1 && g->out_w == g->in_w;
}

static void FN(clip_run)(int64_t start, int64_t n, int64_t plane, int64_t *lo, int64_t *hi) {
    *lo = start < 0 ? (-start < n ? -start : n) : 0;
    *hi = plane - start < n ? plane - start : n;
    if (*hi < *lo) *hi = *lo;
}

/* Zeroes the padded columns [0, ow_lo) and [ow_hi, OW) of rows [oh_lo, oh_hi) of a column row. */
static void FN(zero_pad_columns)(R *row, int64_t OW, int64_t oh_lo, int64_t oh_hi, int64_t ow_lo, int64_t ow_hi) {
    for (int64_t oh = oh_lo; oh < oh_hi; oh++) {
        R *d = row + oh * OW;
        for (int64_t ow = 0; ow < ow_lo; ow++) d[ow] = 0;
        for (int64_t ow = ow_hi; ow < OW; ow++) d[ow] = 0;
    }
}

/* The column matrix of one sample x[C, H, W]. */
static void FN(im2col)(const ct_conv2d_geom *g, const R *x, R *col) {
    const int64_t H = g->in_h, W = g->in_w, OH = g->out_h, OW = g->out_w;
    const int64_t KH = g->kernel[0], KW = g->kernel[1], SH = g->stride[0], SW = g->stride[1];
    const int64_t ohw = OH * OW, rows = g->in_channels * KH * KW;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t c = r / (KH * KW), ki = (r / KW) % KH, kj = r % KW;
        const int64_t ih_off = ki * g->dilation[0] - g->padding[0], iw_off = kj * g->dilation[1] - g->padding[1];
        int64_t oh_lo, oh_hi, ow_lo, ow_hi;
        ct_cpu_out_span(ih_off, SH, H, OH, &oh_lo, &oh_hi);
        ct_cpu_out_span(iw_off, SW, W, OW, &ow_lo, &ow_hi);
        const R *plane = x + c * H * W;
        R *dst = col + r * ohw;
        memset(dst, 0, (size_t)(oh_lo * OW) * sizeof(R));
        if (FN(rows_line_up)(g)) {
            const int64_t d0 = oh_lo * OW, n = (oh_hi - oh_lo) * OW, s0 = (oh_lo + ih_off) * W + iw_off;
            int64_t lo, hi;
            FN(clip_run)(s0, n, H * W, &lo, &hi);
            memset(dst + d0, 0, (size_t)lo * sizeof(R));
            memcpy(dst + d0 + lo, plane + s0 + lo, (size_t)(hi - lo) * sizeof(R));
            memset(dst + d0 + hi, 0, (size_t)(n - hi) * sizeof(R));
            /* the padded columns picked up the neighbouring rows' ends */
            FN(zero_pad_columns)(dst, OW, oh_lo, oh_hi, ow_lo, ow_hi);
            memset(dst + oh_hi * OW, 0, (size_t)((OH - oh_hi) * OW) * sizeof(R));
            continue;
        }
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
 * from (overwrites dx). col is scratch: its padded positions may be zeroed on the way. */
static void FN(col2im)(const ct_conv2d_geom *g, R *col, R *dx) {
    const int64_t C = g->in_channels, H = g->in_h, W = g->in_w, OH = g->out_h, OW = g->out_w;
    const int64_t KH = g->kernel[0], KW = g->kernel[1], SH = g->stride[0], SW = g->stride[1];
    const int64_t ohw = OH * OW;
    memset(dx, 0, (size_t)(C * H * W) * sizeof(R));
    for (int64_t c = 0; c < C; c++) {
        R *plane = dx + c * H * W;
        for (int64_t ki = 0; ki < KH; ki++)
            for (int64_t kj = 0; kj < KW; kj++) {
                const int64_t ih_off = ki * g->dilation[0] - g->padding[0];
                const int64_t iw_off = kj * g->dilation[1] - g->padding[1];
                int64_t oh_lo, oh_hi, ow_lo, ow_hi;
                ct_cpu_out_span(ih_off, SH, H, OH, &oh_lo, &oh_hi);
                ct_cpu_out_span(iw_off, SW, W, OW, &ow_lo, &ow_hi);
                R *src = col + ((c * KH + ki) * KW + kj) * ohw;
                if (FN(rows_line_up)(g)) {
                    /* padded columns zeroed, the valid rows are one run added in one loop */
                    FN(zero_pad_columns)(src, OW, oh_lo, oh_hi, ow_lo, ow_hi);
                    const int64_t d0 = oh_lo * OW, n = (oh_hi - oh_lo) * OW, s0 = (oh_lo + ih_off) * W + iw_off;
                    int64_t lo, hi;
                    FN(clip_run)(s0, n, H * W, &lo, &hi);
                    R *restrict d = plane + s0;
                    const R *restrict s = src + d0;
                    for (int64_t j = lo; j < hi; j++) d[j] += s[j];
                    continue;
                }
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

/* The threads of a kernel: no more than the workspace has slots for, and one (whose GEMMs OpenBLAS
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
        R *col = mine + conv_col_offset(g);
#pragma omp for schedule(static)
        for (int64_t b = 0; b < B; b++) {
            const R *xb = (const R *)x->data + b * in_numel;
            /* with pooling the sample's output planes stay in the slot, and only the pooled ones leave */
            R *yb = idx ? mine + conv_relu_offset(g) : (R *)y->data + b * O * ohw;
            if (!direct) FN(im2col)(g, xb, col);
            /* the bias is the GEMM's starting value, so the output is written once */
            if (b_)
                for (int64_t o = 0; o < O; o++)
                    for (int64_t p = 0; p < ohw; p++) yb[o * ohw + p] = b_[o];
            GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)O, (int)ohw, (int)rows, 1, w, (int)rows,
                 direct ? xb : col, (int)ohw, b_ ? 1 : 0, yb, (int)ohw);
            if (g->relu)
                for (int64_t i = 0; i < O * ohw; i++) yb[i] = yb[i] > 0 ? yb[i] : 0;
            if (idx)
                for (int64_t o = 0; o < O; o++)
                    FN(ct_cpu_maxpool2x2_plane)(yb + o * ohw, g->out_h, g->out_w,
                                                (R *)y->data + (b * O + o) * pooled, idx + (b * O + o) * pooled);
        }
    }
}

/* y: the forward's output after a fused ReLU (g->relu), else NULL; idx: with a fused pooling
 * (g->pool2x2) its argmax positions, and y and dy are the pooled output and its gradient. */
static void FN(conv_backward)(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight, const void *y,
                              const int32_t *idx, const ct_tensor *dy, ct_tensor *dweight, ct_tensor *dbias,
                              ct_tensor *dx, ct_tensor *ws) {
    const int64_t B = dy->shape[0], O = g->out_channels, ohw = g->out_h * g->out_w, rows = conv_rows(g);
    const int64_t in_numel = g->in_channels * g->in_h * g->in_w, slot = conv_slot_numel(g);
    const int64_t pooled = (g->out_h / 2) * (g->out_w / 2);
    const bool direct = conv_is_pointwise(g);
    const R *w = weight->data;
    const int nt = FN(conv_threads)(g, ws, B);
#pragma omp parallel num_threads(nt)
    {
        R *mine = (R *)ws->data + omp_get_thread_num() * slot;
        double *db = (double *)mine; /* float64 sums: a bias sees every output position of the batch */
        R *dw = mine + conv_dw_offset(g), *col = mine + conv_col_offset(g), *masked = mine + conv_relu_offset(g);
        if (dbias) memset(db, 0, (size_t)O * sizeof(double));
        if (dweight) memset(dw, 0, (size_t)(O * rows) * sizeof(R));
#pragma omp for schedule(static)
        for (int64_t b = 0; b < B; b++) {
            const R *xb = (const R *)x->data + b * in_numel;
            const R *dyb = idx ? NULL : (const R *)dy->data + b * O * ohw;
            if (idx) {
                /* back through the pooling and the ReLU: a window's gradient goes to its argmax when
                 * the ReLU let that value through (the pooled value is it), the rest of the plane is 0 */
                const R *yb = (const R *)y + b * O * pooled, *dpb = (const R *)dy->data + b * O * pooled;
                const int32_t *ib = idx + b * O * pooled;
                memset(masked, 0, (size_t)(O * ohw) * sizeof(R));
                for (int64_t o = 0; o < O; o++)
                    for (int64_t j = 0; j < pooled; j++)
                        if (yb[o * pooled + j] > 0) masked[o * ohw + ib[o * pooled + j]] = dpb[o * pooled + j];
                dyb = masked;
            } else if (y) {
                /* through the ReLU: where it let the value through (as ct_op_activation_backward) */
                const R *yb = (const R *)y + b * O * ohw;
                for (int64_t i = 0; i < O * ohw; i++) masked[i] = yb[i] > 0 ? dyb[i] : 0;
                dyb = masked;
            }
            if (dbias)
                for (int64_t o = 0; o < O; o++) db[o] += FN(sum_f64)(dyb + o * ohw, ohw);
            if (dweight) {
                /* dW[O, rows] += dY[O, ohw] @ col[rows, ohw]^T */
                if (!direct) FN(im2col)(g, xb, col);
                GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)O, (int)rows, (int)ohw, 1, dyb, (int)ohw,
                     direct ? xb : col, (int)ohw, 1, dw, (int)rows);
            }
            if (dx) {
                /* dcol[rows, ohw] = W[O, rows]^T @ dY[O, ohw], folded back onto the input planes */
                R *dxb = (R *)dx->data + b * in_numel;
                GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)rows, (int)ohw, (int)O, 1, w, (int)rows, dyb,
                     (int)ohw, 0, direct ? dxb : col, (int)ohw);
                if (!direct) FN(col2im)(g, col, dxb);
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
            for (int64_t i = 0; i < O * rows; i++) out[i] += dw[i];
        }
}
