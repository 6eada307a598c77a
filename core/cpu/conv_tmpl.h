/* Convolution kernels over one real type R; included by conv.c for float and double.
 *
 * The column matrix of a chunk of nb samples is [C*kh*kw, nb*OH*OW]: row r = (c, ki, kj), and
 * within a row the samples one after another, each an OH x OW block. Writing it is a row copy per
 * (r, sample, oh) with the padded ends zeroed, so no inner loop does bounds checks or index
 * division. */
#include <stdint.h>
#include <string.h>

/* Fills col for nb samples starting at x (already offset to the chunk's first sample). Parallel over
 * (row, sample): every task writes its own block of col. */
static void FN(im2col)(const ct_conv2d_geom *g, const R *x, int64_t nb, R *col) {
    const int64_t C = g->in_channels, H = g->in_h, W = g->in_w, OH = g->out_h, OW = g->out_w;
    const int64_t KH = g->kernel[0], KW = g->kernel[1], SH = g->stride[0], SW = g->stride[1];
    const int64_t ohw = OH * OW, n = nb * ohw, rows = C * KH * KW;
#pragma omp parallel for collapse(2) schedule(static) if (rows * n > CT_OMP_MIN)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < nb; b++) {
            const int64_t c = r / (KH * KW), ki = (r / KW) % KH, kj = r % KW;
            const int64_t ih_off = ki * g->dilation[0] - g->padding[0], iw_off = kj * g->dilation[1] - g->padding[1];
            int64_t oh_lo, oh_hi, ow_lo, ow_hi;
            ct_cpu_out_span(ih_off, SH, H, OH, &oh_lo, &oh_hi);
            ct_cpu_out_span(iw_off, SW, W, OW, &ow_lo, &ow_hi);
            const R *plane = x + (b * C + c) * H * W;
            R *dst = col + r * n + b * ohw;
            memset(dst, 0, (size_t)(oh_lo * OW) * sizeof(R));
            for (int64_t oh = oh_lo; oh < oh_hi; oh++) {
                R *d = dst + oh * OW;
                const R *src = plane + (oh * SH + ih_off) * W;
                for (int64_t ow = 0; ow < ow_lo; ow++) d[ow] = 0;
                if (SW == 1)
                    memcpy(d + ow_lo, src + ow_lo + iw_off, (size_t)(ow_hi - ow_lo) * sizeof(R));
                else
                    for (int64_t ow = ow_lo; ow < ow_hi; ow++) d[ow] = src[ow * SW + iw_off];
                for (int64_t ow = ow_hi; ow < OW; ow++) d[ow] = 0;
            }
            memset(dst + oh_hi * OW, 0, (size_t)((OH - oh_hi) * OW) * sizeof(R));
        }
}

/* dx = the sum of col's entries back at the input positions they were copied from (overwrites dx).
 * Parallel over (sample, channel) planes: each task owns one plane of dx, so the += never races. */
static void FN(col2im)(const ct_conv2d_geom *g, const R *col, int64_t nb, R *dx) {
    const int64_t C = g->in_channels, H = g->in_h, W = g->in_w, OH = g->out_h, OW = g->out_w;
    const int64_t KH = g->kernel[0], KW = g->kernel[1], SH = g->stride[0], SW = g->stride[1];
    const int64_t ohw = OH * OW, n = nb * ohw;
#pragma omp parallel for collapse(2) schedule(static) if (C * KH * KW * n > CT_OMP_MIN)
    for (int64_t b = 0; b < nb; b++)
        for (int64_t c = 0; c < C; c++) {
            R *plane = dx + (b * C + c) * H * W;
            memset(plane, 0, (size_t)(H * W) * sizeof(R));
            for (int64_t ki = 0; ki < KH; ki++)
                for (int64_t kj = 0; kj < KW; kj++) {
                    const int64_t ih_off = ki * g->dilation[0] - g->padding[0];
                    const int64_t iw_off = kj * g->dilation[1] - g->padding[1];
                    int64_t oh_lo, oh_hi, ow_lo, ow_hi;
                    ct_cpu_out_span(ih_off, SH, H, OH, &oh_lo, &oh_hi);
                    ct_cpu_out_span(iw_off, SW, W, OW, &ow_lo, &ow_hi);
                    const R *src = col + ((c * KH + ki) * KW + kj) * n + b * ohw;
                    for (int64_t oh = oh_lo; oh < oh_hi; oh++) {
                        R *d = plane + (oh * SH + ih_off) * W + iw_off;
                        const R *s = src + oh * OW;
                        if (SW == 1)
                            for (int64_t ow = ow_lo; ow < ow_hi; ow++) d[ow] += s[ow];
                        else
                            for (int64_t ow = ow_lo; ow < ow_hi; ow++) d[ow * SW] += s[ow];
                    }
                }
        }
}

/* y[b][o][:] = tmp[o][b*ohw : (b+1)*ohw] + bias[o]: the GEMM's [O, nb*ohw] result back to NCHW. */
static void FN(unpack_output)(const R *tmp, const R *bias, int64_t nb, int64_t O, int64_t ohw, R *y) {
#pragma omp parallel for collapse(2) schedule(static) if (nb * O * ohw > CT_OMP_MIN)
    for (int64_t b = 0; b < nb; b++)
        for (int64_t o = 0; o < O; o++) {
            const R *s = tmp + o * nb * ohw + b * ohw;
            R *d = y + (b * O + o) * ohw;
            if (bias) {
                const R v = bias[o];
                for (int64_t p = 0; p < ohw; p++) d[p] = s[p] + v;
            } else {
                memcpy(d, s, (size_t)ohw * sizeof(R));
            }
        }
}

/* tmp[o][b*ohw : (b+1)*ohw] = dy[b][o][:], and dbias[o] += the sum of those (when dbias is given).
 * Parallel over o: each task owns its dbias[o]. */
static void FN(pack_grad)(const R *dy, int64_t nb, int64_t O, int64_t ohw, R *tmp, R *dbias) {
#pragma omp parallel for schedule(static) if (nb * O * ohw > CT_OMP_MIN)
    for (int64_t o = 0; o < O; o++) {
        double acc = 0.0;
        for (int64_t b = 0; b < nb; b++) {
            const R *s = dy + (b * O + o) * ohw;
            R *d = tmp + o * nb * ohw + b * ohw;
            memcpy(d, s, (size_t)ohw * sizeof(R));
            if (dbias)
                for (int64_t p = 0; p < ohw; p++) acc += s[p];
        }
        if (dbias) dbias[o] += (R)acc;
    }
}

static int64_t FN(chunk_samples)(const ct_conv2d_geom *g, const ct_tensor *ws) {
    int64_t chunk = ct_tensor_numel(ws) / conv_sample_ws(g);
    CT_ASSERT(chunk >= 1);
    return chunk;
}

static void FN(conv_forward)(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                             const ct_tensor *bias, ct_tensor *y, ct_tensor *ws) {
    const int64_t B = x->shape[0], O = g->out_channels, ohw = g->out_h * g->out_w;
    const int64_t rows = g->in_channels * g->kernel[0] * g->kernel[1], in_numel = g->in_channels * g->in_h * g->in_w;
    const int64_t chunk = FN(chunk_samples)(g, ws);
    const ct_tensor wm = matrix(weight, O, rows);
    for (int64_t b0 = 0; b0 < B; b0 += chunk) {
        const int64_t nb = B - b0 < chunk ? B - b0 : chunk;
        R *col = ws->data, *tmp = col + rows * nb * ohw;
        FN(im2col)(g, (const R *)x->data + b0 * in_numel, nb, col);
        ct_tensor colm = matrix_at(ws, col, rows, nb * ohw), tmpm = matrix_at(ws, tmp, O, nb * ohw);
        ct_op_gemm(false, false, 1.0, &wm, &colm, 0.0, &tmpm);
        FN(unpack_output)(tmp, bias ? (const R *)bias->data : NULL, nb, O, ohw, (R *)y->data + b0 * O * ohw);
    }
}

static void FN(conv_backward)(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                              const ct_tensor *dy, ct_tensor *dweight, ct_tensor *dbias, ct_tensor *dx,
                              ct_tensor *ws) {
    const int64_t B = dy->shape[0], O = g->out_channels, ohw = g->out_h * g->out_w;
    const int64_t rows = g->in_channels * g->kernel[0] * g->kernel[1], in_numel = g->in_channels * g->in_h * g->in_w;
    const int64_t chunk = FN(chunk_samples)(g, ws);
    const ct_tensor wm = matrix(weight, O, rows);
    ct_tensor dwm = dweight ? matrix(dweight, O, rows) : wm;
    for (int64_t b0 = 0; b0 < B; b0 += chunk) {
        const int64_t nb = B - b0 < chunk ? B - b0 : chunk;
        R *col = ws->data, *tmp = col + rows * nb * ohw;
        ct_tensor colm = matrix_at(ws, col, rows, nb * ohw), tmpm = matrix_at(ws, tmp, O, nb * ohw);
        FN(pack_grad)((const R *)dy->data + b0 * O * ohw, nb, O, ohw, tmp, dbias ? (R *)dbias->data : NULL);
        if (dweight) {
            /* dW[O, rows] += dY[O, n] @ col[rows, n]^T */
            FN(im2col)(g, (const R *)x->data + b0 * in_numel, nb, col);
            ct_op_gemm(false, true, 1.0, &tmpm, &colm, 1.0, &dwm);
        }
        if (dx) {
            /* dcol[rows, n] = W[O, rows]^T @ dY[O, n], then folded back onto the input planes. */
            ct_op_gemm(true, false, 1.0, &wm, &tmpm, 0.0, &colm);
            FN(col2im)(g, col, nb, (R *)dx->data + b0 * in_numel);
        }
    }
}
