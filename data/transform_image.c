/* The built-in transforms (see transform.h): per-channel normalisation, random crop with zero
 * padding, random horizontal flip.
 *
 * All three work in place on the batch the dataset just filled and keep no state after creation,
 * so apply is reentrant and a transformed dataset is as thread-safe as its base. The crop needs no
 * padded copy of the image: cutting an H x W window at offset (dy, dx) out of the image padded by p
 * is the image shifted by (dy - p, dx - p) with zeros shifted in, and a shift can be done in place
 * by visiting rows in the order that reads every source row before it is overwritten (memmove
 * covers the overlap within one row). Crop and flip only move elements, so they work for any
 * element type (zero bytes are zero in every type we have); normalisation needs f32 or f64. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "data/transform.h"
#include "data/transform_random.h"

/* Largest padding accepted: keeps 2p+1 far inside 32 bits and any sane image. */
#define CT_MAX_CROP_PADDING (1 << 20)

/* One sample's shape, "[3, 32, 32]" (ct_sample_shape_str would print the batch dimension too). */
static const char *shape_str(const ct_shape *s, char *buf, size_t cap) {
    return ct_shape_str(s->ndim, s->dims, buf, cap);
}

/* --- normalize ---------------------------------------------------------------------------------- */

typedef struct normalize_t {
    ct_transform base;
    int64_t n;    /* 1: one value for all channels */
    double *mean; /* n values, then std: n values (stored after the struct) */
    double *std;
} normalize_t;

static ct_status normalize_check(ct_transform *t, const ct_sample_spec *in, ct_sample_spec *out) {
    normalize_t *nt = ct_container_of(t, normalize_t, base);
    char buf[96];
    if (in->feature_dtype != CT_F32 && in->feature_dtype != CT_F64)
        return ct_error(CT_ERR_DTYPE, "normalize: features are %s, expected f32 or f64",
                        ct_dtype_name(in->feature_dtype));
    if (nt->n > 1 && in->feature_shape.ndim < 1)
        return ct_error(CT_ERR_SHAPE,
                        "normalize: %lld mean/std values but scalar samples have no channels (give one value)",
                        (long long)nt->n);
    if (nt->n > 1 && in->feature_shape.dims[0] != nt->n)
        return ct_error(CT_ERR_SHAPE, "normalize: %lld mean/std values but samples %s have %lld channels (dimension 0)",
                        (long long)nt->n, shape_str(&in->feature_shape, buf, sizeof buf),
                        (long long)in->feature_shape.dims[0]);
    *out = *in;
    return CT_OK;
}

/* (x - mean) / std in the tensor's own type, the operations and rounding of torchvision's
 * Normalize (sub then div), so results agree bit for bit. */
#define NORMALIZE_LOOP(R)                                                                                              \
    do {                                                                                                               \
        R *x = features->data;                                                                                         \
        for (int64_t r = 0; r < n; r++)                                                                                \
            for (int64_t c = 0; c < channels; c++) {                                                                   \
                int64_t k = nt->n == 1 ? 0 : c;                                                                        \
                const R m = (R)nt->mean[k], s = (R)nt->std[k];                                                         \
                R *p = x + r * per_sample + c * per_channel;                                                           \
                for (int64_t i = 0; i < per_channel; i++) p[i] = (p[i] - m) / s;                                       \
            }                                                                                                          \
    } while (0)

static ct_status normalize_apply(ct_transform *t, ct_tensor *features, const int64_t *indices, int64_t n,
                                 const ct_fetch_ctx *ctx, uint32_t salt) {
    (void)indices, (void)ctx, (void)salt;
    normalize_t *nt = ct_container_of(t, normalize_t, base);
    if (features->dtype != CT_F32 && features->dtype != CT_F64)
        return ct_error(CT_ERR_DTYPE, "normalize: features are %s, expected f32 or f64",
                        ct_dtype_name(features->dtype));
    if (features->ndim < 1 || features->shape[0] < n ||
        (nt->n > 1 && (features->ndim < 2 || features->shape[1] != nt->n))) {
        char buf[96];
        return ct_error(CT_ERR_SHAPE, "normalize: cannot apply %lld channel values to %lld samples of %s",
                        (long long)nt->n, (long long)n, ct_tensor_str(features, buf, sizeof buf));
    }
    const int64_t per_sample = ct_tensor_row_numel(features);
    const int64_t channels = nt->n == 1 ? 1 : nt->n;
    const int64_t per_channel = per_sample / channels;
    if (features->dtype == CT_F32)
        NORMALIZE_LOOP(float);
    else
        NORMALIZE_LOOP(double);
    return CT_OK;
}

static const ct_transform_ops normalize_ops = {
    .size = sizeof(ct_transform_ops),
    .name = "normalize",
    .check = normalize_check,
    .apply = normalize_apply,
};

ct_status ct_normalize_create(const double *mean, const double *std, int64_t n, ct_transform **out) {
    CT_ASSERT(out);
    *out = NULL;
    if (n < 1) return ct_error(CT_ERR_INVALID_ARG, "normalize: %lld mean/std values (need at least 1)", (long long)n);
    CT_ASSERT(mean && std);
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(mean[i]))
            return ct_error(CT_ERR_INVALID_ARG, "normalize: mean[%lld] = %g is not finite", (long long)i, mean[i]);
        if (!(std[i] > 0) || !isfinite(std[i]))
            return ct_error(CT_ERR_INVALID_ARG, "normalize: std[%lld] = %g must be a finite value > 0", (long long)i,
                            std[i]);
    }
    normalize_t *nt = calloc(1, sizeof *nt + 2 * (size_t)n * sizeof(double));
    if (!nt) return ct_error(CT_ERR_NOMEM, "normalize: out of memory for %lld values", (long long)n);
    nt->base.ops = &normalize_ops;
    nt->n = n;
    nt->mean = (double *)(nt + 1);
    nt->std = nt->mean + n;
    memcpy(nt->mean, mean, (size_t)n * sizeof(double));
    memcpy(nt->std, std, (size_t)n * sizeof(double));
    *out = &nt->base;
    return CT_OK;
}

/* --- random crop -------------------------------------------------------------------------------- */

typedef struct crop_t {
    ct_transform base;
    int64_t padding;
} crop_t;

static ct_status crop_check(ct_transform *t, const ct_sample_spec *in, ct_sample_spec *out) {
    (void)t;
    if (in->feature_shape.ndim != 3) {
        char buf[96];
        return ct_error(CT_ERR_SHAPE, "random_crop: samples %s are not images [C, H, W]",
                        shape_str(&in->feature_shape, buf, sizeof buf));
    }
    *out = *in;
    return CT_OK;
}

/* Moves every plane of a [C, H, W] image (elements of es bytes) so that out[y][x] = in[y+oy][x+ox],
 * zero where y+oy or x+ox falls outside. Rows are visited so that each source row is read before
 * it is written: ascending when reading from below (oy > 0), descending otherwise. */
static void shift_image(unsigned char *img, int64_t C, int64_t H, int64_t W, size_t es, int64_t oy, int64_t ox) {
    const size_t row = (size_t)W * es;
    const int64_t ax = ox < 0 ? -ox : ox;
    const int64_t count = ax < W ? W - ax : 0;      /* columns that come from the image */
    const int64_t x0 = ox < 0 ? CT_MIN(-ox, W) : 0; /* first such destination column */
    for (int64_t c = 0; c < C; c++) {
        unsigned char *plane = img + (size_t)(c * H) * row;
        for (int64_t k = 0; k < H; k++) {
            int64_t y = oy > 0 ? k : H - 1 - k;
            int64_t sy = y + oy;
            unsigned char *dst = plane + (size_t)y * row;
            if (sy < 0 || sy >= H || count == 0) {
                memset(dst, 0, row);
                continue;
            }
            /* Same row when oy == 0: memmove, and zero the margins only after moving. */
            memmove(dst + (size_t)x0 * es, plane + (size_t)sy * row + (size_t)(x0 + ox) * es, (size_t)count * es);
            memset(dst, 0, (size_t)x0 * es);
            memset(dst + (size_t)(x0 + count) * es, 0, (size_t)(W - x0 - count) * es);
        }
    }
}

static ct_status crop_apply(ct_transform *t, ct_tensor *features, const int64_t *indices, int64_t n,
                            const ct_fetch_ctx *ctx, uint32_t salt) {
    crop_t *ct = ct_container_of(t, crop_t, base);
    if (features->ndim != 4 || features->shape[0] < n) {
        char buf[96];
        return ct_error(CT_ERR_SHAPE, "random_crop: %s does not hold %lld images [C, H, W]",
                        ct_tensor_str(features, buf, sizeof buf), (long long)n);
    }
    if (ct->padding == 0) return CT_OK;
    const int64_t C = features->shape[1], H = features->shape[2], W = features->shape[3];
    const size_t es = ct_dtype_size(features->dtype);
    const uint32_t choices = (uint32_t)(2 * ct->padding + 1);
    for (int64_t r = 0; r < n; r++) {
        uint32_t w[4];
        ct_augment_random(ctx, salt, indices[r], w);
        int64_t oy = (int64_t)ct_augment_below(w[0], choices) - ct->padding;
        int64_t ox = (int64_t)ct_augment_below(w[1], choices) - ct->padding;
        if (oy == 0 && ox == 0) continue;
        shift_image((unsigned char *)features->data + (size_t)(r * C * H * W) * es, C, H, W, es, oy, ox);
    }
    return CT_OK;
}

static const ct_transform_ops crop_ops = {
    .size = sizeof(ct_transform_ops),
    .name = "random_crop",
    .check = crop_check,
    .apply = crop_apply,
};

ct_status ct_random_crop_create(int64_t padding, ct_transform **out) {
    CT_ASSERT(out);
    *out = NULL;
    if (padding < 0 || padding > CT_MAX_CROP_PADDING)
        return ct_error(CT_ERR_INVALID_ARG, "random_crop: padding %lld must be in [0, %d]", (long long)padding,
                        CT_MAX_CROP_PADDING);
    crop_t *ct = calloc(1, sizeof *ct);
    if (!ct) return ct_error(CT_ERR_NOMEM, "random_crop: out of memory");
    ct->base.ops = &crop_ops;
    ct->padding = padding;
    *out = &ct->base;
    return CT_OK;
}

/* --- random horizontal flip --------------------------------------------------------------------- */

typedef struct hflip_t {
    ct_transform base;
    double p;
} hflip_t;

static ct_status hflip_check(ct_transform *t, const ct_sample_spec *in, ct_sample_spec *out) {
    (void)t;
    if (in->feature_shape.ndim < 2) {
        char buf[96];
        return ct_error(CT_ERR_SHAPE, "random_hflip: samples %s have no H and W dimensions (expected [..., H, W])",
                        shape_str(&in->feature_shape, buf, sizeof buf));
    }
    *out = *in;
    return CT_OK;
}

/* Reverses each of `rows` runs of W elements of es bytes. */
static void mirror_rows(unsigned char *p, int64_t rows, int64_t W, size_t es) {
    for (int64_t r = 0; r < rows; r++, p += (size_t)W * es)
        for (int64_t a = 0, b = W - 1; a < b; a++, b--) {
            unsigned char tmp[16];
            unsigned char *pa = p + (size_t)a * es, *pb = p + (size_t)b * es;
            memcpy(tmp, pa, es);
            memcpy(pa, pb, es);
            memcpy(pb, tmp, es);
        }
}

static ct_status hflip_apply(ct_transform *t, ct_tensor *features, const int64_t *indices, int64_t n,
                             const ct_fetch_ctx *ctx, uint32_t salt) {
    hflip_t *ht = ct_container_of(t, hflip_t, base);
    if (features->ndim < 3 || features->shape[0] < n) {
        char buf[96];
        return ct_error(CT_ERR_SHAPE, "random_hflip: %s does not hold %lld samples [..., H, W]",
                        ct_tensor_str(features, buf, sizeof buf), (long long)n);
    }
    const int64_t per_sample = ct_tensor_row_numel(features), W = features->shape[features->ndim - 1];
    const size_t es = ct_dtype_size(features->dtype);
    CT_ASSERT(es <= 16);
    if (W == 0) return CT_OK;
    for (int64_t r = 0; r < n; r++) {
        uint32_t w[4];
        ct_augment_random(ctx, salt, indices[r], w);
        if (ct_augment_bernoulli(w[0], ht->p))
            mirror_rows((unsigned char *)features->data + (size_t)(r * per_sample) * es, per_sample / W, W, es);
    }
    return CT_OK;
}

static const ct_transform_ops hflip_ops = {
    .size = sizeof(ct_transform_ops),
    .name = "random_hflip",
    .check = hflip_check,
    .apply = hflip_apply,
};

ct_status ct_random_hflip_create(double p, ct_transform **out) {
    CT_ASSERT(out);
    *out = NULL;
    if (!(p >= 0 && p <= 1)) return ct_error(CT_ERR_INVALID_ARG, "random_hflip: p = %g must be in [0, 1]", p);
    hflip_t *ht = calloc(1, sizeof *ht);
    if (!ht) return ct_error(CT_ERR_NOMEM, "random_hflip: out of memory");
    ht->base.ops = &hflip_ops;
    ht->p = p;
    *out = &ht->base;
    return CT_OK;
}
