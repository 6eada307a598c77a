/* Transforms around datasets (see transform.h): the vtable wrappers, JSON construction, the keyed
 * randomness (transform_random.h) and the transformed dataset, which fetches from its base and then
 * runs each transform in place on the batch, with salt = the transform's position in the list.
 *
 * The transformed dataset allocates nothing per fetch: transforms work in place on the batch
 * tensors the caller passed. That is why a transform must keep the sample's shape and type (the
 * base fills those very tensors); check() is asked at wrap time and a change is refused there. A
 * transformed dataset is thread-safe when its base is, so a transform's apply must be reentrant
 * (the built-ins keep no state after creation). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/rng.h"
#include "core/util.h"
#include "core/vtable.h"
#include "data/transform.h"
#include "data/transform_random.h"

/* --- keyed randomness --------------------------------------------------------------------------- */

/* splitmix64's finaliser: a bijection that spreads every input bit over the output. */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void ct_augment_random(const ct_fetch_ctx *ctx, uint32_t salt, int64_t index, uint32_t out[4]) {
    uint64_t k = mix64(ctx->seed ^ mix64((uint64_t)salt + 0x9E3779B97F4A7C15ull * CT_RNG_AUGMENT));
    uint32_t key[2] = {(uint32_t)k, (uint32_t)(k >> 32)};
    uint64_t i = (uint64_t)index;
    uint32_t ctr[4] = {(uint32_t)i, (uint32_t)(i >> 32), (uint32_t)ctx->epoch, (uint32_t)(ctx->epoch >> 32)};
    ct_philox4x32(ctr, key, out);
}

/* --- vtable wrappers ---------------------------------------------------------------------------- */

/* Members appended to ct_transform_ops later are absent from tables written earlier. */
#define HAS_OP(ops, member) CT_OPS_HAS(ops, ct_transform_ops, member)

static const char *transform_name(const ct_transform *t) { return HAS_OP(t->ops, name) ? t->ops->name : "transform"; }

void ct_transform_free(ct_transform *t) {
    if (!t) return;
    if (t->ops && HAS_OP(t->ops, destroy))
        t->ops->destroy(t);
    else
        free(t);
}

/* --- JSON --------------------------------------------------------------------------------------- */

/* A number or a non-empty list of numbers, into a malloc'd array. */
static ct_status read_numbers(const json_t *obj, const char *path, const char *key, double **out, int64_t *count) {
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v) return ct_error(CT_ERR_CONFIG, "%s: missing required key '%s'", path, key);
    if (json_is_number(v)) {
        *count = 1;
        *out = malloc(sizeof(double));
        if (!*out) return ct_error(CT_ERR_NOMEM, "%s.%s: out of memory", path, key);
        (*out)[0] = json_number_value(v);
        return CT_OK;
    }
    if (!json_is_array(v) || json_array_size(v) == 0)
        return ct_error(CT_ERR_CONFIG, "%s.%s: expected a number or a non-empty list of numbers", path, key);
    *count = (int64_t)json_array_size(v);
    *out = malloc((size_t)*count * sizeof(double));
    if (!*out) return ct_error(CT_ERR_NOMEM, "%s.%s: out of memory", path, key);
    for (int64_t i = 0; i < *count; i++) {
        json_t *e = json_array_get(v, (size_t)i);
        if (!json_is_number(e)) {
            free(*out);
            *out = NULL;
            return ct_error(CT_ERR_CONFIG, "%s.%s[%lld]: expected a number", path, key, (long long)i);
        }
        (*out)[i] = json_number_value(e);
    }
    return CT_OK;
}

static ct_status normalize_from_json(const json_t *spec, const char *path, ct_transform **out) {
    static const char *const keys[] = {"type", "mean", "std", NULL};
    CT_TRY(ct_json_check_keys(spec, path, keys));
    double *mean = NULL, *std = NULL;
    int64_t nm = 0, ns = 0;
    ct_status s = read_numbers(spec, path, "mean", &mean, &nm);
    if (s == CT_OK) s = read_numbers(spec, path, "std", &std, &ns);
    if (s == CT_OK && nm != ns && nm != 1 && ns != 1)
        s = ct_error(CT_ERR_CONFIG, "%s: mean has %lld values but std has %lld (give one value, or one per channel)",
                     path, (long long)nm, (long long)ns);
    /* One value of either list applies to every channel of the other. */
    if (s == CT_OK && nm != ns) {
        int64_t n = nm > ns ? nm : ns;
        double **one = nm == 1 ? &mean : &std;
        double *wide = malloc((size_t)n * sizeof(double));
        if (!wide)
            s = ct_error(CT_ERR_NOMEM, "%s: out of memory", path);
        else {
            for (int64_t i = 0; i < n; i++) wide[i] = (*one)[0];
            free(*one);
            *one = wide;
            nm = ns = n;
        }
    }
    if (s == CT_OK && (s = ct_normalize_create(mean, std, nm, out)) != CT_OK) ct_error_prefix(s, "%s: ", path);
    free(mean);
    free(std);
    return s;
}

static ct_status random_crop_from_json(const json_t *spec, const char *path, ct_transform **out) {
    static const char *const keys[] = {"type", "padding", NULL};
    CT_TRY(ct_json_check_keys(spec, path, keys));
    int64_t padding;
    CT_TRY(ct_json_int(spec, path, "padding", true, 0, &padding));
    ct_status s = ct_random_crop_create(padding, out);
    return s == CT_OK ? s : ct_error_prefix(s, "%s: ", path);
}

static ct_status random_hflip_from_json(const json_t *spec, const char *path, ct_transform **out) {
    static const char *const keys[] = {"type", "p", NULL};
    CT_TRY(ct_json_check_keys(spec, path, keys));
    double p;
    CT_TRY(ct_json_real(spec, path, "p", false, 0.5, &p));
    ct_status s = ct_random_hflip_create(p, out);
    return s == CT_OK ? s : ct_error_prefix(s, "%s: ", path);
}

ct_status ct_transform_from_json(const json_t *spec, const char *path, ct_transform **out) {
    CT_ASSERT(out);
    *out = NULL;
    if (!path) path = "transform";
    if (!json_is_object(spec)) return ct_error(CT_ERR_CONFIG, "%s: expected an object with a \"type\"", path);
    static const struct {
        const char *type;
        ct_status (*fn)(const json_t *, const char *, ct_transform **);
    } types[] = {{"normalize", normalize_from_json},
                 {"random_crop", random_crop_from_json},
                 {"random_hflip", random_hflip_from_json}};
    const char *type;
    CT_TRY(ct_json_string(spec, path, "type", true, NULL, &type));
    const char *names[CT_ARRAY_LEN(types) + 1];
    for (size_t i = 0; i < CT_ARRAY_LEN(types); i++) {
        if (strcmp(types[i].type, type) == 0) return types[i].fn(spec, path, out);
        names[i] = types[i].type;
    }
    names[CT_ARRAY_LEN(types)] = NULL;
    const char *hint = ct_closest_word(type, names);
    if (hint)
        return ct_error(CT_ERR_CONFIG, "%s.type: unknown transform type '%s', did you mean '%s'?", path, type, hint);
    return ct_error(CT_ERR_CONFIG, "%s.type: unknown transform type '%s' (known: normalize, random_crop, random_hflip)",
                    path, type);
}

/* --- the transformed dataset -------------------------------------------------------------------- */

typedef struct transformed_t {
    ct_dataset base;
    ct_dataset *inner;
    int n;
    ct_transform **transforms;
} transformed_t;

static int64_t transformed_length(ct_dataset *ds) {
    return ct_dataset_length(ct_container_of(ds, transformed_t, base)->inner);
}

static ct_status transformed_get_batch(ct_dataset *ds, const int64_t *indices, int64_t n, const ct_fetch_ctx *ctx,
                                       ct_tensor *features, ct_tensor *labels) {
    transformed_t *td = ct_container_of(ds, transformed_t, base);
    /* The base's errors already start with its source, which is also ours: no second prefix. */
    CT_TRY(ct_dataset_get_batch(td->inner, indices, n, ctx, features, labels));
    for (int i = 0; i < td->n; i++) {
        ct_transform *t = td->transforms[i];
        if (!HAS_OP(t->ops, apply)) continue;
        ct_status s = t->ops->apply(t, features, indices, n, ctx, (uint32_t)i);
        if (s != CT_OK) return ct_error_prefix(s, "transform %d (%s): ", i, transform_name(t));
    }
    return CT_OK;
}

/* Transforms change features only: the labels are the base's. */
static ct_status transformed_check_labels(ct_dataset *ds, int64_t first, int64_t n, const ct_label_rule *rule) {
    return ct_dataset_check_label_range(ct_container_of(ds, transformed_t, base)->inner, first, n, rule);
}

static void transformed_destroy(ct_dataset *ds) {
    transformed_t *td = ct_container_of(ds, transformed_t, base);
    for (int i = 0; i < td->n; i++) ct_transform_free(td->transforms[i]);
    free(td->transforms);
    ct_dataset_free(td->inner);
    free(td);
}

static const ct_dataset_ops transformed_ops = {
    .size = sizeof(ct_dataset_ops),
    .name = "transformed",
    .length = transformed_length,
    .get_batch = transformed_get_batch,
    .destroy = transformed_destroy,
    .check_labels = transformed_check_labels,
};

static bool same_shape(const ct_shape *a, const ct_shape *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i]) return false;
    return true;
}

ct_status ct_transformed_dataset_create(ct_dataset *base, ct_transform **transforms, int n, ct_dataset **out) {
    CT_ASSERT(base && out && n >= 0 && (n == 0 || transforms));
    *out = NULL;
    for (int i = 0; i < n; i++) {
        ct_status s = transforms[i] ? CT_OPS_CHECK_SIZE(ct_transform_ops, transforms[i]->ops, name)
                                    : ct_error(CT_ERR_INVALID_ARG, "is NULL");
        if (s != CT_OK) {
            ct_error_prefix(s, "%s: transform %d: ", base->source, i);
            for (int j = 0; j < n; j++) ct_transform_free(transforms[j]);
            ct_dataset_free(base);
            return s;
        }
    }
    transformed_t *td = calloc(1, sizeof *td);
    ct_transform **list = n ? calloc((size_t)n, sizeof *list) : NULL;
    if (!td || (n && !list)) {
        free(td);
        free(list);
        for (int i = 0; i < n; i++) ct_transform_free(transforms[i]);
        ct_dataset_free(base);
        return ct_error(CT_ERR_NOMEM, "transformed dataset: out of memory");
    }
    ct_dataset_base_init(&td->base, &transformed_ops);
    td->inner = base;
    td->n = n;
    td->transforms = list;
    for (int i = 0; i < n; i++) list[i] = transforms[i];
    memcpy(td->base.source, base->source, sizeof td->base.source);
    td->base.thread_safe = base->thread_safe;

    /* Each transform sees the spec the previous one produced. */
    ct_sample_spec spec = base->spec;
    for (int i = 0; i < n; i++) {
        ct_transform *t = list[i];
        ct_sample_spec next = spec;
        ct_status s = HAS_OP(t->ops, check) ? t->ops->check(t, &spec, &next) : CT_OK;
        if (s == CT_OK &&
            (!same_shape(&next.feature_shape, &spec.feature_shape) || next.feature_dtype != spec.feature_dtype ||
             !same_shape(&next.label_shape, &spec.label_shape) || next.label_dtype != spec.label_dtype)) {
            char a[96], b[96];
            s = ct_error(CT_ERR_UNSUPPORTED,
                         "it turns samples %s %s into %s %s; transforms work in place and must keep the sample's shape "
                         "and type",
                         ct_shape_str(spec.feature_shape.ndim, spec.feature_shape.dims, a, sizeof a),
                         ct_dtype_name(spec.feature_dtype),
                         ct_shape_str(next.feature_shape.ndim, next.feature_shape.dims, b, sizeof b),
                         ct_dtype_name(next.feature_dtype));
        }
        if (s != CT_OK) {
            ct_error_prefix(s, "%s: transform %d (%s): ", base->source, i, transform_name(t));
            transformed_destroy(&td->base);
            return s;
        }
        spec = next;
    }
    td->base.spec = spec;
    *out = &td->base;
    return CT_OK;
}
