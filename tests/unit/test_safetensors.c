/* The safetensors reader and writer (core/format/safetensors.h) and models as PyTorch state_dicts in it
 * (model/model_safetensors.h):
 *   - round trips of random tensors of every dtype (scalars and empty tensors included), in memory
 *     and through a file, and the reference writer's exact bytes for its own test vectors;
 *   - every validation error with its message naming the file and the tensor;
 *   - corrupted files (flipped bytes, truncations, random header sizes, random headers) never crash:
 *     they open and read, or fail with CT_ERR_FORMAT;
 *   - float16/bfloat16 conversions: every half round-trips, rounding is to nearest even;
 *   - a model saved and loaded into a model of the same architecture with other weights is equal
 *     bit for bit; batch-norm counters, the GPT's tied head and its aliases; strict name, shape and
 *     dtype errors with "did you mean".
 *
 * Why one file of over 600 lines: the reader, the writer and a model's state_dict files are one
 * format, checked with the same random tensors and damaged images. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/format/safetensors.h"
#include "model/layers.h"
#include "model/model.h"
#include "model/model_safetensors.h"
#include "testlib.h"

static ct_rng rng;

/* A file image with the given header text (padded with spaces to a multiple of 8 unless raw) and
 * data_len bytes of data; *size gets its length. */
static unsigned char *image(const char *header, size_t data_len, bool pad, size_t *size) {
    size_t n = strlen(header), padded = pad ? (n + 7) / 8 * 8 : n;
    *size = 8 + padded + data_len;
    unsigned char *b = malloc(*size);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(b + 8, header, n);
    memset(b + 8 + n, ' ', padded - n);
    for (size_t i = 0; i < data_len; i++) b[8 + padded + i] = (unsigned char)(i * 7 + 1);
    return b;
}

static ct_status open_header(const char *header, size_t data_len) {
    size_t size;
    unsigned char *b = image(header, data_len, true, &size);
    ct_st_file *f = NULL;
    ct_status s = ct_st_open_memory(b, size, "bad.safetensors", &f);
    ct_st_close(f);
    free(b);
    return s;
}

/* --- round trips -------------------------------------------------------------------------------- */

typedef struct rand_tensor {
    char name[32];
    ct_st_dtype dtype;
    int ndim;
    int64_t shape[4];
    unsigned char *data;
    size_t bytes;
} rand_tensor;

static const ct_st_dtype SOME[] = {CT_ST_F32, CT_ST_F64,  CT_ST_BF16, CT_ST_F16, CT_ST_I64, CT_ST_I32,
                                   CT_ST_U8,  CT_ST_BOOL, CT_ST_I8,   CT_ST_U16, CT_ST_C64, CT_ST_F4};

static void random_tensor(rand_tensor *t, int i) {
    snprintf(t->name, sizeof t->name, "layer.%d.w%llu", i, (unsigned long long)ct_rng_below(&rng, 1000));
    t->dtype = SOME[ct_rng_below(&rng, sizeof SOME / sizeof SOME[0])];
    t->ndim = (int)ct_rng_below(&rng, 5);
    int64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        t->shape[d] = (int64_t)ct_rng_below(&rng, 5) + (ct_rng_below(&rng, 10) == 0 ? 0 : 1);
        numel *= t->shape[d];
    }
    if (t->dtype == CT_ST_F4 && numel % 2) { /* half-byte elements come in pairs */
        t->ndim = 1;
        t->shape[0] = 2 * (int64_t)ct_rng_below(&rng, 4);
        numel = t->shape[0];
    }
    t->bytes = (size_t)numel * (size_t)ct_st_dtype_bits(t->dtype) / 8;
    t->data = malloc(t->bytes ? t->bytes : 1);
    for (size_t k = 0; k < t->bytes; k++) t->data[k] = (unsigned char)ct_rng_u32(&rng);
}

static void check_same(const ct_st_file *f, ct_st_file *fw, const rand_tensor *ts, int n) {
    CHECK(ct_st_count(f) == n, "count %d != %d", ct_st_count(f), n);
    for (int i = 0; i < n; i++) {
        const ct_st_tensor *t = ct_st_find(f, ts[i].name);
        CHECK(t != NULL, "tensor %s not found", ts[i].name);
        if (!t) continue;
        CHECK(t->dtype == ts[i].dtype && t->ndim == ts[i].ndim, "%s: dtype or ndim differ", ts[i].name);
        for (int d = 0; d < t->ndim && d < ts[i].ndim; d++)
            CHECK(t->shape[d] == ts[i].shape[d], "%s: shape", ts[i].name);
        CHECK(t->end - t->begin == ts[i].bytes, "%s: %llu bytes", ts[i].name, (unsigned long long)(t->end - t->begin));
        unsigned char *got = malloc(ts[i].bytes + 1);
        CHECK_OK(ct_st_read_raw(fw, t, got));
        CHECK(memcmp(got, ts[i].data, ts[i].bytes) == 0, "%s: data differ", ts[i].name);
        free(got);
    }
    /* name order, and no tensor the writer was not given */
    for (int i = 1; i < ct_st_count(f); i++)
        CHECK(strcmp(ct_st_get(f, i - 1)->name, ct_st_get(f, i)->name) < 0, "tensors not in name order");
}

static void test_round_trip(void) {
    for (int rep = 0; rep < 30; rep++) {
        int n = (int)ct_rng_below(&rng, 9);
        rand_tensor ts[8];
        ct_st_entry e[8];
        for (int i = 0; i < n; i++) {
            random_tensor(&ts[i], i);
            e[i] = (ct_st_entry){ts[i].name, ts[i].dtype, ts[i].ndim, ts[i].shape, ts[i].data};
        }
        json_t *meta = rep % 2 ? json_pack("{s:s, s:s}", "format", "pt", "note", "d\xc3\xa9j\xc3\xa0 vu") : NULL;
        void *buf;
        size_t size;
        CHECK_OK(ct_st_serialize(e, n, meta, &buf, &size));
        const unsigned char *b = buf;
        uint64_t hn = 0;
        for (int i = 7; i >= 0; i--) hn = hn << 8 | b[i];
        CHECK(hn % 8 == 0 && b[8] == '{', "header size %llu not a multiple of 8 or no '{'", (unsigned long long)hn);
        const char *meta_first = "{\"__metadata__\":{\"format\":\"pt\",\"note\":";
        CHECK(!meta || strncmp((const char *)b + 8, meta_first, strlen(meta_first)) == 0,
              "metadata not first and sorted: %.60s", (const char *)b + 8);
        ct_st_file *f;
        CHECK_OK(ct_st_open_memory(buf, size, "mem", &f));
        check_same(f, f, ts, n);
        /* data laid out by dtype, widest (highest in the enum) first, then by name */
        int order[8];
        for (int i = 0; i < n; i++) order[i] = i;
        for (int i = 1; i < n; i++)
            for (int j = i; j > 0; j--) {
                const rand_tensor *x = &ts[order[j - 1]], *y = &ts[order[j]];
                if (x->dtype > y->dtype || (x->dtype == y->dtype && strcmp(x->name, y->name) < 0)) break;
                int k = order[j];
                order[j] = order[j - 1];
                order[j - 1] = k;
            }
        uint64_t at = 0;
        for (int i = 0; i < n; i++) {
            const ct_st_tensor *t = ct_st_find(f, ts[order[i]].name);
            CHECK(t && t->begin == at && t->end == at + ts[order[i]].bytes, "rep %d: '%s' not at [%llu, %llu)", rep,
                  ts[order[i]].name, (unsigned long long)at, (unsigned long long)(at + ts[order[i]].bytes));
            at += ts[order[i]].bytes;
        }
        CHECK(size == 8 + hn + at, "rep %d: image of %zu bytes", rep, size);
        if (meta) {
            const json_t *m = ct_st_metadata(f);
            CHECK(m && strcmp(json_string_value(json_object_get(m, "note")), "d\xc3\xa9j\xc3\xa0 vu") == 0, "metadata");
        } else {
            CHECK(ct_st_metadata(f) == NULL, "metadata where none was written");
        }
        ct_st_close(f);
        /* The same through a file: byte-identical to the image. */
        char path[] = "/tmp/ct_st_XXXXXX";
        int fd = mkstemp(path);
        close(fd);
        CHECK_OK(ct_st_write(path, e, n, meta));
        FILE *fp = fopen(path, "rb");
        unsigned char *disk = malloc(size + 16);
        size_t got = fread(disk, 1, size + 16, fp);
        fclose(fp);
        CHECK(got == size && memcmp(disk, buf, size) == 0, "file differs from the serialized image");
        free(disk);
        CHECK_OK(ct_st_open(path, &f));
        check_same(f, f, ts, n);
        ct_st_close(f);
        unlink(path);
        free(buf);
        json_decref(meta);
        for (int i = 0; i < n; i++) free(ts[i].data);
    }
}

/* The reference writer's own test vectors (safetensors/src/tensor.rs: test_serialization,
 * test_empty, test_serialization_forced_alignement). */
static void test_reference_bytes(void) {
    float v[6] = {0, 1, 2, 3, 4, 5};
    int64_t shape3[3] = {1, 2, 3}, shape4[4] = {1, 1, 2, 3};
    ct_st_entry e = {"attn.0", CT_ST_F32, 3, shape3, v};
    void *buf;
    size_t size;
    CHECK_OK(ct_st_serialize(&e, 1, NULL, &buf, &size));
    const char *want = "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}";
    CHECK(size == 8 + 64 + 24 && ((unsigned char *)buf)[0] == 64 && memcmp((char *)buf + 8, want, 64) == 0 &&
              memcmp((char *)buf + 72, v, 24) == 0,
          "test_serialization bytes differ: %.72s", (char *)buf + 8);
    free(buf);
    e = (ct_st_entry){"attn0", CT_ST_F32, 4, shape4, v};
    CHECK_OK(ct_st_serialize(&e, 1, NULL, &buf, &size));
    want = "{\"attn0\":{\"dtype\":\"F32\",\"shape\":[1,1,2,3],\"data_offsets\":[0,24]}}       ";
    CHECK(size == 8 + 72 + 24 && ((unsigned char *)buf)[0] == 72 && memcmp((char *)buf + 8, want, 72) == 0,
          "forced alignment bytes differ: %.80s", (char *)buf + 8);
    free(buf);
    CHECK_OK(ct_st_serialize(NULL, 0, NULL, &buf, &size));
    CHECK(size == 16 && ((unsigned char *)buf)[0] == 8 && memcmp((char *)buf + 8, "{}      ", 8) == 0, "empty file");
    free(buf);
    json_t *meta = json_pack("{s:s}", "framework", "pt");
    CHECK_OK(ct_st_serialize(NULL, 0, meta, &buf, &size));
    want = "{\"__metadata__\":{\"framework\":\"pt\"}}     ";
    CHECK(size == 48 && ((unsigned char *)buf)[0] == 40 && memcmp((char *)buf + 8, want, 40) == 0,
          "empty file with metadata: %.40s", (char *)buf + 8);
    free(buf);
    json_decref(meta);
}

static void test_writer_errors(void) {
    float v[2] = {1, 2};
    int64_t two = 2, neg = -1, three = 3;
    void *buf;
    size_t size;
    ct_st_entry dup[2] = {{"a", CT_ST_F32, 1, &two, v}, {"a", CT_ST_F16, 1, &two, v}};
    CHECK_ERR(ct_st_serialize(dup, 2, NULL, &buf, &size), CT_ERR_INVALID_ARG, "two tensors are named 'a'");
    ct_st_entry reserved = {"__metadata__", CT_ST_F32, 1, &two, v};
    CHECK_ERR(ct_st_serialize(&reserved, 1, NULL, &buf, &size), CT_ERR_INVALID_ARG, "'__metadata__' is reserved");
    ct_st_entry negative = {"w", CT_ST_F32, 1, &neg, v};
    CHECK_ERR(ct_st_serialize(&negative, 1, NULL, &buf, &size), CT_ERR_INVALID_ARG, "'w'", "negative size -1");
    ct_st_entry odd = {"q", CT_ST_F4, 1, &three, v};
    CHECK_ERR(ct_st_serialize(&odd, 1, NULL, &buf, &size), CT_ERR_INVALID_ARG, "'q'", "whole number of bytes");
    ct_st_entry nodata = {"n", CT_ST_F32, 1, &two, NULL};
    CHECK_ERR(ct_st_serialize(&nodata, 1, NULL, &buf, &size), CT_ERR_INVALID_ARG, "'n' has no data");
    ct_st_entry bad_utf8 = {"\xff\xfe", CT_ST_F32, 1, &two, v};
    CHECK_ERR(ct_st_serialize(&bad_utf8, 1, NULL, &buf, &size), CT_ERR_INVALID_ARG, "not valid UTF-8");
    json_t *meta = json_pack("{s:i}", "epochs", 3);
    ct_st_entry ok = {"w", CT_ST_F32, 1, &two, v};
    CHECK_ERR(ct_st_serialize(&ok, 1, meta, &buf, &size), CT_ERR_INVALID_ARG, "metadata 'epochs' must be a string");
    json_decref(meta);
    CHECK_ERR(ct_st_write("/nonexistent/dir/x.safetensors", &ok, 1, NULL), CT_ERR_IO, "/nonexistent/dir/x.safetensors");
}

/* --- validation --------------------------------------------------------------------------------- */

#define T(name, dtype, shape, b, e)                                                                                    \
    "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" b "," e "]}"

static void test_validation(void) {
    const char *file = "bad.safetensors";
    unsigned char small[7] = {0};
    ct_st_file *f;
    CHECK_ERR(ct_st_open_memory(small, 7, file, &f), CT_ERR_FORMAT, file, "7 bytes: too short");
    unsigned char big[16] = {0x01, 0xe1, 0xf5, 0x05, 0, 0, 0, 0, '{', '}'}; /* 100000001 */
    CHECK_ERR(ct_st_open_memory(big, 16, file, &f), CT_ERR_FORMAT, file, "header size 100000001 exceeds", "100000000");
    unsigned char huge[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'};
    CHECK_ERR(ct_st_open_memory(huge, 16, file, &f), CT_ERR_FORMAT, file, "exceeds the format's limit");
    unsigned char past[16] = {9, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '};
    CHECK_ERR(ct_st_open_memory(past, 16, file, &f), CT_ERR_FORMAT, file,
              "header size 9 runs past the end of the file (16 bytes)");
    unsigned char zero[8] = {0};
    CHECK_ERR(ct_st_open_memory(zero, 8, file, &f), CT_ERR_FORMAT, file, "does not start with '{'");
    CHECK_ERR(open_header(" {}", 0), CT_ERR_FORMAT, file, "does not start with '{'");
    CHECK_ERR(open_header("{\"a\": ", 0), CT_ERR_FORMAT, file, "not valid JSON");
    CHECK_ERR(open_header("{} x", 0), CT_ERR_FORMAT, file, "not valid JSON");
    size_t size;
    unsigned char with_nul[16] = {8, 0, 0, 0, 0, 0, 0, 0, '{', '}', 0, 0, 0, 0, 0, 0};
    CHECK_ERR(ct_st_open_memory(with_nul, 16, file, &f), CT_ERR_FORMAT, file, "not valid JSON");
    CHECK_ERR(open_header("{\"\xff\":1}", 0), CT_ERR_FORMAT, file, "not valid JSON");
    CHECK_ERR(open_header("{" T("w", "F32", "[1]", "0", "4") "," T("w", "F32", "[1]", "4", "8") "}", 8), CT_ERR_FORMAT,
              file, "names a tensor twice", "\"w\"");
    CHECK_ERR(open_header("{\"__metadata__\":[1]}", 0), CT_ERR_FORMAT, file, "\"__metadata__\" must be an object");
    CHECK_ERR(open_header("{\"__metadata__\":{\"k\":1}}", 0), CT_ERR_FORMAT, file, "the value of 'k' must be a string");
    CHECK_ERR(open_header("{\"w\":[]}", 0), CT_ERR_FORMAT, file, "tensor 'w': expected an object, got a list");
    CHECK_ERR(open_header("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4), CT_ERR_FORMAT,
              file, "tensor 'w': unknown key 'x'");
    CHECK_ERR(open_header("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4), CT_ERR_FORMAT, file,
              "tensor 'w': missing 'dtype'");
    CHECK_ERR(open_header("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4), CT_ERR_FORMAT, file,
              "tensor 'w': missing 'shape'");
    CHECK_ERR(open_header("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4), CT_ERR_FORMAT, file,
              "tensor 'w': missing 'data_offsets'");
    CHECK_ERR(open_header("{\"w\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}", 4), CT_ERR_FORMAT, file,
              "tensor 'w': dtype must be a string");
    CHECK_ERR(open_header("{" T("w", "F17", "[1]", "0", "4") "}", 4), CT_ERR_FORMAT, file,
              "tensor 'w': unknown dtype 'F17'");
    CHECK_ERR(open_header("{" T("w", "f32", "[1]", "0", "4") "}", 4), CT_ERR_FORMAT, file, "unknown dtype 'f32'");
    CHECK_ERR(open_header("{\"w\":{\"dtype\":\"F32\",\"shape\":3,\"data_offsets\":[0,12]}}", 12), CT_ERR_FORMAT, file,
              "tensor 'w': shape must be a list");
    CHECK_ERR(open_header("{" T("w", "F32", "[2,-1]", "0", "4") "}", 4), CT_ERR_FORMAT, file,
              "tensor 'w': shape[1] must be a non-negative integer");
    CHECK_ERR(open_header("{" T("w", "F32", "[2.0]", "0", "8") "}", 8), CT_ERR_FORMAT, file, "shape[0] must be");
    CHECK_ERR(open_header("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4), CT_ERR_FORMAT, file,
              "tensor 'w': data_offsets must be a list of two non-negative integers");
    CHECK_ERR(open_header("{" T("w", "F32", "[1]", "-4", "0") "}", 4), CT_ERR_FORMAT, file,
              "tensor 'w': data_offsets must");
    CHECK_ERR(open_header("{" T("w", "F32", "[1]", "8", "4") "}", 8), CT_ERR_FORMAT, file,
              "tensor 'w': data_offsets [8, 4] end before they begin");
    CHECK_ERR(open_header("{" T("w", "F32", "[2,3]", "0", "20") "}", 20), CT_ERR_FORMAT, file,
              "tensor 'w': shape [2, 3] of F32 is 24 bytes, but data_offsets [0, 20] hold 20");
    CHECK_ERR(open_header("{" T("w", "F32", "[4294967296,4294967296]", "0", "4") "}", 4), CT_ERR_FORMAT, file,
              "tensor 'w': shape [4294967296, 4294967296] has more elements than fit in 64 bits");
    CHECK_ERR(open_header("{" T("w", "U64", "[2305843009213693952]", "0", "4") "}", 4), CT_ERR_FORMAT, file,
              "tensor 'w'", "not a whole number of bytes (or overflow)");
    CHECK_ERR(open_header("{" T("w", "F4", "[3]", "0", "2") "}", 2), CT_ERR_FORMAT, file,
              "tensor 'w': 3 elements of F4 are not a whole number of bytes");
    CHECK_ERR(open_header("{" T("w", "F32", "[3]", "0", "12") "}", 8), CT_ERR_FORMAT, file,
              "tensor 'w': data_offsets [0, 12] run past the end of the data (8 bytes after the header)");
    CHECK_ERR(open_header("{" T("a", "F32", "[1]", "0", "4") "," T("b", "F32", "[1]", "8", "12") "}", 12),
              CT_ERR_FORMAT, file, "tensor 'b': its data starts at byte 8, but 'a' ends at 4 (a gap of 4 bytes)");
    CHECK_ERR(open_header("{" T("a", "F32", "[2]", "0", "8") "," T("b", "F32", "[1]", "4", "8") "}", 8), CT_ERR_FORMAT,
              file, "tensor 'b': its data [4, 8) overlaps 'a', which ends at 8");
    CHECK_ERR(open_header("{" T("a", "F32", "[1]", "4", "8") "}", 8), CT_ERR_FORMAT, file,
              "tensor 'a': the first tensor's data starts at byte 4, not 0");
    CHECK_ERR(open_header("{" T("a", "F32", "[1]", "0", "4") "}", 6), CT_ERR_FORMAT, file,
              "the tensors' data ends at byte 4, but 6 bytes follow the header (2 trailing bytes)");
    CHECK_ERR(open_header("{}", 3), CT_ERR_FORMAT, file, "the header lists no tensors, but 3 bytes follow it");
    CHECK_ERR(ct_st_open("/nonexistent/x.safetensors", &f), CT_ERR_IO, "/nonexistent/x.safetensors", "cannot open");
    CHECK_ERR(ct_st_open("/tmp", &f), CT_ERR_IO, "/tmp", "cannot read: Is a directory");

    /* What the format allows: empty and scalar tensors, any order of entries in the header, several
     * empty tensors at one offset, an unpadded header, other whitespace after the JSON. */
    CHECK_OK(open_header("{" T("b", "F32", "[0,5]", "4", "4") "," T("s", "I64", "[]", "4", "12") "," T(
                             "a", "F32", "[1]", "0", "4") "," T("e", "BF16", "[0]", "4", "4") "}",
                         12));
    unsigned char *raw = image("{" T("a", "U8", "[3]", "0", "3") "}\t\n", 3, false, &size);
    CHECK_OK(ct_st_open_memory(raw, size, file, &f));
    const ct_st_tensor *t = ct_st_find(f, "a");
    unsigned char got[3];
    CHECK(t && ct_st_read_raw(f, t, got) == CT_OK && got[0] == 1 && got[1] == 8 && got[2] == 15,
          "unpadded header data");
    CHECK(ct_st_find(f, "b") == NULL, "found a tensor that is not there");
    ct_st_close(f);
    free(raw);
}

/* --- corrupted files ---------------------------------------------------------------------------- */

/* Opens an image; if it opens, reads every tensor (raw, and as floats where it can). */
static void survive(const unsigned char *b, size_t size, int *opened) {
    ct_st_file *f;
    ct_status s = ct_st_open_memory(b, size, "fuzz", &f);
    CHECK(s == CT_OK || s == CT_ERR_FORMAT, "corrupted image -> %s: %s", ct_status_str(s), ct_last_error());
    if (s != CT_OK) {
        CHECK(strncmp(ct_last_error(), "fuzz: ", 6) == 0, "message does not name the file: %s", ct_last_error());
        return;
    }
    (*opened)++;
    for (int i = 0; i < ct_st_count(f); i++) {
        const ct_st_tensor *t = ct_st_get(f, i);
        CHECK(t->end <= size && t->begin <= t->end, "tensor '%s' outside the image", t->name);
        unsigned char *raw = malloc(t->end - t->begin + 1);
        CHECK_OK(ct_st_read_raw(f, t, raw));
        free(raw);
        if (ct_st_dtype_is_float(t->dtype) && t->numel < 100000) {
            ct_tensor v;
            int64_t n = t->numel;
            if (ct_tensor_alloc(&v, CT_F64, CT_CPU, 1, &n) == CT_OK) {
                CHECK_OK(ct_st_read_float(f, t, &v));
                ct_tensor_free(&v);
            }
        }
    }
    ct_st_close(f);
}

static void test_fuzz(void) {
    /* a valid image to corrupt */
    float a[6] = {1, 2, 3, 4, 5, 6};
    double b[2] = {7, 8};
    uint16_t h[3] = {0x3c00, 0x4000, 0xc000};
    int64_t sa[2] = {2, 3}, sb[1] = {2}, sh[1] = {3};
    ct_st_entry e[3] = {{"x.weight", CT_ST_F32, 2, sa, a}, {"x.bias", CT_ST_F64, 1, sb, b}, {"y", CT_ST_F16, 1, sh, h}};
    json_t *meta = json_pack("{s:s}", "format", "pt");
    void *buf;
    size_t size;
    CHECK_OK(ct_st_serialize(e, 3, meta, &buf, &size));
    json_decref(meta);
    unsigned char *work = malloc(size + 64);
    size_t hn = 0;
    for (int i = 7; i >= 0; i--) hn = hn << 8 | ((unsigned char *)buf)[i];
    int opened = 0;
    int before = ct_test_failed;
    for (int rep = 0; rep < 4000 && ct_test_failed == before; rep++) {
        memcpy(work, buf, size);
        size_t n = size;
        switch (rep % 5) {
        case 0: /* flip bytes anywhere */
            for (int k = 0, flips = 1 + (int)ct_rng_below(&rng, 4); k < flips; k++)
                work[ct_rng_below(&rng, n)] ^= (unsigned char)(1u << ct_rng_below(&rng, 8));
            break;
        case 1: /* truncate */ n = (size_t)ct_rng_below(&rng, size); break;
        case 2: /* a random header size */
            for (int k = 0; k < 8; k++)
                work[k] = k < 2 || ct_rng_below(&rng, 4) == 0 ? (unsigned char)ct_rng_u32(&rng) : 0;
            break;
        case 3: { /* a header digit changed: shapes and offsets */
            unsigned char *hdr = work + 8;
            size_t pos = (size_t)ct_rng_below(&rng, hn);
            for (size_t k = pos; k < hn; k++)
                if (hdr[k] >= '0' && hdr[k] <= '9') {
                    hdr[k] = (unsigned char)('0' + ct_rng_below(&rng, 10));
                    break;
                }
            break;
        }
        default: /* a header character replaced by a JSON token character */
            work[8 + ct_rng_below(&rng, hn)] = (unsigned char)"{}[]\",:-1 e."[ct_rng_below(&rng, 12)];
            break;
        }
        survive(work, n, &opened);
    }
    CHECK(opened > 50, "only %d of the corrupted images opened: the corruptions never reach the checks", opened);
    /* random headers built from pieces */
    const char *dts[] = {"F32", "F16", "U8", "F4", "I64", "BOOL", "C64"};
    for (int rep = 0; rep < 2000 && ct_test_failed == before; rep++) {
        char hdr[1024] = "{";
        int n = (int)ct_rng_below(&rng, 4);
        uint64_t at = 0;
        for (int i = 0; i < n; i++) {
            int64_t d0 = (int64_t)ct_rng_below(&rng, 4), len = (int64_t)ct_rng_below(&rng, 12);
            uint64_t begin = ct_rng_below(&rng, 3) == 0 ? ct_rng_below(&rng, 20) : at;
            snprintf(hdr + strlen(hdr), sizeof hdr - strlen(hdr),
                     "%s\"t%d\":{\"dtype\":\"%s\",\"shape\":[%lld],"
                     "\"data_offsets\":[%llu,%llu]}",
                     i ? "," : "", i, dts[ct_rng_below(&rng, 7)], (long long)d0, (unsigned long long)begin,
                     (unsigned long long)(begin + (uint64_t)len));
            at = begin + (uint64_t)len;
        }
        strcat(hdr, "}");
        unsigned char *img = image(hdr, (size_t)at + ct_rng_below(&rng, 2), true, &size);
        survive(img, size, &opened);
        free(img);
    }
    free(work);
    free(buf);
}

/* --- conversions -------------------------------------------------------------------------------- */

static uint16_t nearest_by_search(float x, float (*to_f32)(uint16_t), uint16_t got) {
    /* got's neighbours must not be nearer; at a tie the even one wins */
    double dx = x, best = fabs(dx - to_f32(got));
    for (int step = -1; step <= 1; step += 2) {
        uint16_t nb = (uint16_t)(got + step);
        if ((nb & 0x7fff) == 0x7fff || ((got & 0x7fff) == 0 && step < 0)) continue;
        float v = to_f32(nb);
        if (isnan(v) || isinf(v)) continue;
        double d = fabs(dx - v);
        if (d < best || (d == best && (nb & 1) == 0)) return nb;
    }
    return got;
}

static void test_conversions(void) {
    int bad16 = 0, badbf = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float v = ct_f16_to_f32((uint16_t)h);
        bool nan = ((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff);
        if (nan)
            bad16 += !isnan(v) || ct_f32_to_f16(v) != (uint16_t)((h & 0x8000) | 0x7e00);
        else
            bad16 += ct_f32_to_f16(v) != h;
        float w = ct_bf16_to_f32((uint16_t)h);
        if (!isnan(w)) badbf += ct_f32_to_bf16(w) != h;
    }
    CHECK(bad16 == 0, "%d float16 values do not round-trip", bad16);
    CHECK(badbf == 0, "%d bfloat16 values do not round-trip", badbf);
    CHECK(ct_f16_to_f32(0x3c00) == 1.0f && ct_f16_to_f32(0xc000) == -2.0f && ct_f16_to_f32(0x7bff) == 65504.0f &&
              ct_f16_to_f32(0x0001) == 0x1p-24f && ct_f16_to_f32(0x0400) == 0x1p-14f && isinf(ct_f16_to_f32(0x7c00)),
          "float16 reference values");
    CHECK(ct_f32_to_f16(65519.99f) == 0x7bff && ct_f32_to_f16(65520.0f) == 0x7c00 && ct_f32_to_f16(-1e9f) == 0xfc00 &&
              ct_f32_to_f16(0x1p-25f) == 0 && ct_f32_to_f16(0x1.8p-25f) == 1 && ct_f32_to_f16(1 + 0x1p-11f) == 0x3c00 &&
              ct_f32_to_f16(1 + 0x1.8p-10f) == 0x3c02,
          "float16 rounding at the edges");
    CHECK(ct_f32_to_bf16(NAN) == 0x7fc0 && ct_f32_to_bf16(1 + 0x1p-8f) == 0x3f80 &&
              ct_f32_to_bf16(1 + 0x1.8p-7f) == 0x3f82,
          "bfloat16 rounding");
    int wrong = 0;
    for (int i = 0; i < 200000; i++) {
        /* random floats over float16's range, subnormals included */
        float x = (float)(ldexp(ct_rng_uniform(&rng) + 0.5, (int)ct_rng_below(&rng, 44) - 28) *
                          (ct_rng_below(&rng, 2) ? 1 : -1));
        if (i % 7 == 0)
            x = ct_f16_to_f32((uint16_t)ct_rng_below(&rng, 0x7c00)) +
                0.5f * (ct_f16_to_f32(1) * (float)ct_rng_below(&rng, 3));
        uint16_t h = ct_f32_to_f16(x);
        if (fabsf(x) < 65504.0f && nearest_by_search(x, ct_f16_to_f32, h) != h) wrong++;
        uint16_t b = ct_f32_to_bf16(x);
        if (nearest_by_search(x, ct_bf16_to_f32, b) != b) wrong++;
    }
    CHECK(wrong == 0, "%d conversions are not to the nearest (even) value", wrong);
    /* reading converts every float dtype */
    float src[5];
    for (int i = 0; i < 5; i++) src[i] = (float)ct_rng_normal(&rng);
    uint16_t h16[5], hb[5];
    double d64[5];
    ct_st_convert_from(src, CT_F32, CT_ST_F16, h16, 5);
    ct_st_convert_from(src, CT_F32, CT_ST_BF16, hb, 5);
    ct_st_convert_from(src, CT_F32, CT_ST_F64, d64, 5);
    int64_t five = 5;
    ct_st_entry e[4] = {{"h", CT_ST_F16, 1, &five, h16},
                        {"b", CT_ST_BF16, 1, &five, hb},
                        {"d", CT_ST_F64, 1, &five, d64},
                        {"f", CT_ST_F32, 1, &five, src}};
    void *buf;
    size_t size;
    CHECK_OK(ct_st_serialize(e, 4, NULL, &buf, &size));
    ct_st_file *f;
    CHECK_OK(ct_st_open_memory(buf, size, "conv", &f));
    ct_tensor v32, v64;
    CHECK_OK(ct_tensor_alloc(&v32, CT_F32, CT_CPU, 1, &five));
    CHECK_OK(ct_tensor_alloc(&v64, CT_F64, CT_CPU, 1, &five));
    const float *o32 = v32.data;
    const double *o64 = v64.data;
    CHECK_OK(ct_st_read_float(f, ct_st_find(f, "h"), &v32));
    for (int i = 0; i < 5; i++)
        CHECK(o32[i] == ct_f16_to_f32(h16[i]) && fabsf(o32[i] - src[i]) <= fabsf(src[i]) * 1e-3f, "f16 -> f32");
    CHECK_OK(ct_st_read_float(f, ct_st_find(f, "b"), &v64));
    for (int i = 0; i < 5; i++) CHECK(o64[i] == ct_bf16_to_f32(hb[i]), "bf16 -> f64");
    CHECK_OK(ct_st_read_float(f, ct_st_find(f, "d"), &v32));
    for (int i = 0; i < 5; i++) CHECK(o32[i] == src[i], "f64 -> f32");
    CHECK_OK(ct_st_read_float(f, ct_st_find(f, "f"), &v64));
    for (int i = 0; i < 5; i++) CHECK(o64[i] == (double)src[i], "f32 -> f64");
    ct_tensor_free(&v32);
    ct_tensor_free(&v64);
    ct_st_close(f);
    free(buf);
    int64_t one = 1;
    int64_t iv = 3;
    ct_st_entry ie = {"steps", CT_ST_I64, 1, &one, &iv};
    CHECK_OK(ct_st_serialize(&ie, 1, NULL, &buf, &size));
    CHECK_OK(ct_st_open_memory(buf, size, "int.safetensors", &f));
    CHECK_OK(ct_tensor_alloc(&v32, CT_F32, CT_CPU, 1, &one));
    CHECK_ERR(ct_st_read_float(f, ct_st_find(f, "steps"), &v32), CT_ERR_DTYPE, "int.safetensors", "'steps' is I64");
    ct_tensor_free(&v32);
    ct_st_close(f);
    free(buf);
}

/* --- models ------------------------------------------------------------------------------------- */

static ct_status build(const char *json, const ct_shape *in, uint64_t seed, ct_model *m) {
    json_error_t err;
    json_t *spec = json_loads(json, 0, &err);
    CT_ASSERT(spec);
    ct_module *root;
    ct_status s = ct_module_from_json(spec, "model", &root);
    json_decref(spec);
    CT_TRY(s);
    ct_model_options o = {.dtype = CT_F32, .device = CT_CPU, .max_batch = 2, .seed = seed};
    return ct_model_build(m, root, in, &o);
}

/* Every parameter and buffer equal bit for bit (the flat buffers' alignment padding aside). */
static bool same_weights(const ct_model *a, const ct_model *b) {
    if (a->params.count != b->params.count) return false;
    for (int i = 0; i < a->params.count; i++) {
        const ct_tensor *x = a->params.items[i].value, *y = b->params.items[i].value;
        if (!ct_shape_eq(x, y) || memcmp(x->data, y->data, ct_tensor_nbytes(x)) != 0) return false;
    }
    return true;
}

static void randomize(ct_model *m) {
    float *v = m->params.values.data, *bf = m->params.buffers.data;
    for (int64_t i = 0; i < ct_tensor_numel(&m->params.values); i++) v[i] = (float)ct_rng_normal(&rng);
    for (int64_t i = 0; i < ct_tensor_numel(&m->params.buffers); i++) bf[i] = (float)ct_rng_uniform(&rng) + 0.5f;
}

static char tmpdir[64];

static const char *tmp(const char *name) {
    static char path[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(path[k], sizeof path[k], "%s/%s", tmpdir, name);
    return path[k];
}

static const char *CNN =
    "{\"type\": \"cnn\", \"channels\": [3], \"batch_norm\": true, \"hidden\": [5], \"num_classes\": 4}";

static void test_model_round_trip(void) {
    ct_shape in = {3, {1, 6, 6}};
    ct_model a, b;
    CHECK_OK(build(CNN, &in, 1, &a));
    CHECK_OK(build(CNN, &in, 2, &b));
    randomize(&a);
    CHECK(!same_weights(&a, &b), "two models start equal: the test proves nothing");
    const char *file = tmp("cnn.safetensors");
    CHECK_OK(ct_model_save_safetensors(&a, CT_ST_NUM_DTYPES, file));
    ct_st_file *f;
    CHECK_OK(ct_st_open(file, &f));
    const ct_st_tensor *nbt = ct_st_find(f, "1.num_batches_tracked");
    CHECK(nbt && nbt->dtype == CT_ST_I64 && nbt->ndim == 0, "no I64 scalar 1.num_batches_tracked");
    CHECK(ct_st_count(f) == a.params.count + 1, "%d tensors for %d parameters and buffers + 1 counter", ct_st_count(f),
          a.params.count);
    const ct_st_tensor *w = ct_st_find(f, "0.weight");
    CHECK(w && w->dtype == CT_ST_F32 && w->ndim == 4 && w->shape[0] == 3 && w->shape[1] == 1, "0.weight [3, 1, 3, 3]");
    CHECK(ct_st_find(f, "1.running_var") != NULL, "1.running_var missing");
    CHECK(strcmp(json_string_value(json_object_get(ct_st_metadata(f), "format")), "pt") == 0, "format metadata");
    ct_st_close(f);
    CHECK_OK(ct_model_load_safetensors(&b, file));
    CHECK(same_weights(&a, &b), "weights differ after save and load");
    /* in bf16: loads rounded */
    CHECK_OK(ct_model_save_safetensors(&a, CT_ST_BF16, file));
    CHECK_OK(ct_model_load_safetensors(&b, file));
    int off = 0;
    for (int k = 0; k < a.params.count; k++) {
        const float *va = a.params.items[k].value->data, *vb = b.params.items[k].value->data;
        for (int64_t i = 0; i < a.params.items[k].numel; i++) off += vb[i] != ct_bf16_to_f32(ct_f32_to_bf16(va[i]));
    }
    CHECK(off == 0, "%d values are not the bf16 rounding", off);

    /* strictness: a wrapper's prefix, a missing tensor, a wrong shape, an integer dtype */
    int n = a.params.count;
    ct_named_tensor items[16];
    char names[16][64];
    for (int i = 0; i < n; i++) {
        snprintf(names[i], sizeof names[i], "model.%s", a.params.items[i].name);
        items[i] = (ct_named_tensor){names[i], *a.params.items[i].value};
    }
    CHECK_OK(ct_state_dict_save_safetensors("sequential", items, n, CT_ST_NUM_DTYPES, file));
    CHECK_ERR(ct_model_load_safetensors(&b, file), CT_ERR_FORMAT, file, "the file does not fit the model",
              "of the model's tensors are missing from the file: '0.weight', '0.bias'",
              "('model.0.weight': did you mean '0.weight'?)");
    for (int i = 0; i < n; i++) items[i].name = a.params.items[i].name;
    CHECK_OK(ct_state_dict_save_safetensors("sequential", items, n - 1, CT_ST_NUM_DTYPES, file));
    CHECK_ERR(ct_model_load_safetensors(&b, file), CT_ERR_FORMAT,
              "1 of the model's tensors is missing from the file: '7.bias'");
    items[n - 1].name = "7.bais";
    CHECK_OK(ct_state_dict_save_safetensors("sequential", items, n, CT_ST_NUM_DTYPES, file));
    CHECK_ERR(ct_model_load_safetensors(&b, file), CT_ERR_FORMAT, "the file has 1 tensor the model does not: '7.bais'",
              "did you mean '7.bias'?");
    items[n - 1].name = "7.bias";
    ct_tensor wrong = items[0].value;
    wrong.shape[1] = 1;
    wrong.shape[2] = 9; /* [3, 1, 3, 3] -> [3, 1, 9, 1] would be the same size: also caught */
    wrong.shape[3] = 1;
    items[0].value = wrong;
    CHECK_OK(ct_state_dict_save_safetensors("sequential", items, n, CT_ST_NUM_DTYPES, file));
    CHECK_ERR(ct_model_load_safetensors(&b, file), CT_ERR_FORMAT, "tensor '0.weight'",
              "shape [3, 1, 9, 1] in the file, but the model's is [3, 1, 3, 3]");
    items[0].value = *a.params.items[0].value;
    /* an integer tensor where a parameter is */
    ct_st_entry e[16];
    int32_t ints[64] = {0};
    for (int i = 0; i < n; i++)
        e[i] = (ct_st_entry){a.params.items[i].name, i == 1 ? CT_ST_I32 : CT_ST_F32, a.params.items[i].ndim,
                             a.params.items[i].shape, i == 1 ? (void *)ints : a.params.items[i].value->data};
    CHECK_OK(ct_st_write(file, e, n, NULL));
    randomize(&b);
    ct_model before;
    CHECK_OK(build(CNN, &in, 2, &before));
    memcpy(before.params.values.data, b.params.values.data, ct_tensor_nbytes(&b.params.values));
    memcpy(before.params.buffers.data, b.params.buffers.data, ct_tensor_nbytes(&b.params.buffers));
    CHECK_ERR(ct_model_load_safetensors(&b, file), CT_ERR_FORMAT, "tensor '0.bias' is I32 in the file");
    CHECK(same_weights(&b, &before), "a failed load changed the model");
    ct_model_free(&before);
    CHECK_ERR(ct_model_load_safetensors(&b, tmp("missing.safetensors")), CT_ERR_IO, "missing.safetensors",
              "cannot open");
    /* init_from */
    json_t *v = json_integer(3);
    CHECK_ERR(ct_model_init_from_json(&b, v, "."), CT_ERR_CONFIG,
              "init_from: expected the path of a .safetensors file");
    json_decref(v);
    CHECK_OK(ct_model_save_safetensors(&a, CT_ST_NUM_DTYPES, file));
    v = json_string("cnn.safetensors");
    CHECK_OK(ct_model_init_from_json(&b, v, tmpdir));
    CHECK(same_weights(&a, &b), "init_from did not load the weights");
    CHECK_ERR(ct_model_init_from_json(&b, v, "/nonexistent"), CT_ERR_IO, "init_from: /nonexistent/cnn.safetensors");
    json_decref(v);
    ct_model_free(&a);
    ct_model_free(&b);
}

static const char *GPT = "{\"type\": \"gpt\", \"vocab_size\": 11, \"n_positions\": 6, \"n_embd\": 8, \"n_layer\": 2, "
                         "\"n_head\": 2}";

static void test_gpt(void) {
    ct_shape in = {1, {6}};
    ct_model a, b;
    CHECK_OK(build(GPT, &in, 1, &a));
    CHECK_OK(build(GPT, &in, 2, &b));
    randomize(&a);
    const char *file = tmp("gpt.safetensors");
    CHECK_OK(ct_model_save_safetensors(&a, CT_ST_NUM_DTYPES, file));
    ct_st_file *f;
    CHECK_OK(ct_st_open(file, &f));
    const ct_st_tensor *head = ct_st_find(f, "lm_head.weight"), *wte = ct_st_find(f, "transformer.wte.weight");
    CHECK(head && wte && head->ndim == 2 && head->shape[0] == 11 && head->shape[1] == 8, "lm_head.weight [11, 8]");
    float *x = malloc(11 * 8 * sizeof *x), *y = malloc(11 * 8 * sizeof *y);
    CHECK(head && wte && ct_st_read_raw(f, head, x) == CT_OK && ct_st_read_raw(f, wte, y) == CT_OK &&
              memcmp(x, y, 11 * 8 * sizeof *x) == 0,
          "lm_head.weight is not a copy of wte");
    CHECK(ct_st_count(f) == a.params.count + 1, "tensors: %d", ct_st_count(f));
    ct_st_close(f);
    CHECK_OK(ct_model_load_safetensors(&b, file));
    CHECK(same_weights(&a, &b), "gpt weights differ after save and load");

    /* the file's tensors with edits: untied head; only the head (save_model's choice); the metadata
     * alias; nanoGPT's mask buffers */
    int n = a.params.count;
    ct_st_entry *e = calloc((size_t)n + 4, sizeof *e);
    int wi = -1;
    for (int i = 0; i < n; i++) {
        const ct_param *p = &a.params.items[i];
        e[i] = (ct_st_entry){p->name, CT_ST_F32, p->ndim, p->shape, p->value->data};
        if (strcmp(p->name, "transformer.wte.weight") == 0) wi = i;
    }
    CHECK(wi >= 0, "no transformer.wte.weight");
    memcpy(y, e[wi].data, 11 * 8 * sizeof *y);
    y[17] += 1;
    e[n] = (ct_st_entry){"lm_head.weight", CT_ST_F32, 2, e[wi].shape, y};
    CHECK_OK(ct_st_write(file, e, n + 1, NULL));
    CHECK_ERR(ct_model_load_safetensors(&b, file), CT_ERR_FORMAT,
              "'lm_head.weight' differs from 'transformer.wte.weight'");
    randomize(&b);
    e[n].data = e[wi].data;
    ct_st_entry keep = e[wi];
    e[wi] = e[n]; /* lm_head.weight in wte's place, no wte */
    CHECK_OK(ct_st_write(file, e, n, NULL));
    CHECK_OK(ct_model_load_safetensors(&b, file));
    CHECK(same_weights(&a, &b), "wte not read from lm_head.weight");
    e[wi] = keep;
    e[wi].name = "tok_emb";
    json_t *meta = json_pack("{s:s, s:s}", "format", "pt", "transformer.wte.weight", "tok_emb");
    int64_t mask_shape[4] = {1, 1, 6, 6};
    float *mask = calloc(36, sizeof *mask);
    e[n] = (ct_st_entry){"transformer.h.0.attn.bias", CT_ST_F32, 4, mask_shape, mask};
    e[n + 1] = (ct_st_entry){"transformer.h.1.attn.bias", CT_ST_F32, 4, mask_shape, mask};
    CHECK_OK(ct_st_write(file, e, n + 2, meta));
    randomize(&b);
    CHECK_OK(ct_model_load_safetensors(&b, file));
    CHECK(same_weights(&a, &b), "wte not read through the metadata's alias");
    json_decref(meta);
    e[wi] = keep;
    e[n] = (ct_st_entry){"transformer.h.7.attn.bias", CT_ST_F32, 4, mask_shape, mask};
    e[n + 1] = (ct_st_entry){"transformer.h.0.attn.bias", CT_ST_F32, 1, mask_shape + 2, mask};
    CHECK_OK(ct_st_write(file, e, n + 2, NULL));
    /* a mask of any layer is skipped; a 1-D tensor of that name is not a mask */
    CHECK_ERR(ct_model_load_safetensors(&b, file), CT_ERR_FORMAT, "the model does not: 'transformer.h.0.attn.bias'");
    /* every name under a wrapper's prefix: said once */
    char(*prefixed)[96] = malloc(sizeof *prefixed * (size_t)n);
    for (int i = 0; i < n; i++) {
        snprintf(prefixed[i], sizeof prefixed[i], "model.%s", a.params.items[i].name);
        e[i].name = prefixed[i];
    }
    CHECK_OK(ct_st_write(file, e, n, NULL));
    CHECK_ERR(ct_model_load_safetensors(&b, file), CT_ERR_FORMAT, "the file does not fit the model",
              "(the model's names with the prefix 'model.': a wrapper's state_dict? strip the prefix)");
    CHECK(strstr(ct_last_error(), "did you mean") == NULL, "one prefix, yet hints per name: %s", ct_last_error());
    free(prefixed);
    free(mask);
    free(e);
    free(x);
    free(y);
    ct_model_free(&a);
    ct_model_free(&b);
}

int main(void) {
    ct_test_begin("test_safetensors");
    ct_rng_init(&rng, ct_test_seed, 0, 11);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ct_st_test_XXXXXX");
    CT_ASSERT(mkdtemp(tmpdir));
    test_round_trip();
    test_reference_bytes();
    test_writer_errors();
    test_validation();
    test_fuzz();
    test_conversions();
    test_model_round_trip();
    test_gpt();
    const char *files[] = {"cnn.safetensors", "gpt.safetensors"};
    for (int i = 0; i < 2; i++) unlink(tmp(files[i]));
    rmdir(tmpdir);
    return ct_test_finish();
}
