/* Fuzz target: the safetensors reader (core/format/safetensors.h) and the strict state-dict loader on top
 * of it (model/model_safetensors.h, a run config's "init_from").
 *
 * The whole input is a safetensors file image. It is opened in memory (ct_st_open_memory) and every
 * tensor it lists is read raw and, for the float dtypes, converted to f32 and f64; then it is
 * written to a file and loaded into two tiny fixed models: a CNN with a batch norm (PyTorch's extra
 * num_batches_tracked) and a GPT (the tied lm_head, metadata aliases, skipped attention masks), and
 * once through "init_from". Errors are expected for almost every input; crashes, leaks, UB and
 * assertions are the bugs. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "core/format/safetensors.h"
#include "model/layers.h"
#include "model/model_safetensors.h"

/* Bytes of tensor data read per tensor at most (inputs are far smaller; this bounds conversion). */
#define MAX_READ ((uint64_t)1 << 20)

static ct_model cnn, gpt;

static void build(ct_model *m, const char *spec_text, ct_shape in) {
    json_error_t err;
    json_t *spec = json_loads(spec_text, 0, &err);
    if (!spec) {
        fprintf(stderr, "fuzz: bad model spec: %s\n", err.text);
        abort();
    }
    ct_module *root;
    fz_check(ct_module_from_json(spec, "model", &root), "model spec");
    json_decref(spec);
    ct_model_options o = {.dtype = CT_F32, .device = CT_CPU, .max_batch = 2, .seed = 1};
    fz_check(ct_model_build(m, root, &in, &o), "model build");
}

static void setup(void) {
    fz_init();
    build(&cnn,
          "{\"type\": \"sequential\", \"layers\": [{\"type\": \"conv2d\", \"out_channels\": 2, \"kernel_size\": 3},"
          "{\"type\": \"batchnorm2d\"}, {\"type\": \"relu\"}, {\"type\": \"flatten\"},"
          "{\"type\": \"linear\", \"out_features\": 3}]}",
          (ct_shape){3, {1, 4, 4}});
    build(&gpt,
          "{\"type\": \"gpt\", \"vocab_size\": 5, \"n_positions\": 4, \"n_embd\": 4, \"n_layer\": 1, \"n_head\": 2}",
          (ct_shape){1, {4}});
    if (fz_writing_seeds()) {
        /* what `ctrainer export` writes for both models, in their own dtype and in F16 and BF16 */
        static const struct {
            const char *name;
            ct_st_dtype dt;
        } kinds[] = {{"f32", CT_ST_NUM_DTYPES}, {"f16", CT_ST_F16}, {"bf16", CT_ST_BF16}};
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
            for (int m = 0; m < 2; m++) {
                char path[512], name[64];
                snprintf(name, sizeof name, "%s_%s.safetensors", m ? "gpt" : "cnn", kinds[k].name);
                fz_check(ct_model_save_safetensors(m ? &gpt : &cnn, kinds[k].dt, fz_path(path, sizeof path, name)),
                         "writing a seed");
                size_t n;
                uint8_t *bytes = fz_read_file(path, &n);
                fz_seed(name, bytes, n);
                free(bytes);
            }
    }
}

/* Every tensor of f: raw bytes, then float conversion where the dtype allows it. */
static void read_all(ct_st_file *f) {
    for (int i = 0; i < ct_st_count(f); i++) {
        const ct_st_tensor *t = ct_st_get(f, i);
        if (t != ct_st_find(f, t->name)) abort(); /* names are unique: find must give the same entry */
        uint64_t bytes = t->end - t->begin;
        if (bytes > MAX_READ) continue;
        void *raw = malloc(bytes ? bytes : 1);
        if (!raw) continue;
        ct_st_read_raw(f, t, raw);
        free(raw);
        if (t->numel > (int64_t)MAX_READ) continue;
        for (int d = 0; d < 2; d++) {
            ct_tensor dst;
            if (ct_tensor_alloc(&dst, d ? CT_F64 : CT_F32, CT_CPU, 1, (int64_t[]){t->numel}) != CT_OK) continue;
            ct_st_read_float(f, t, &dst);
            ct_tensor_free(&dst);
        }
    }
    const json_t *meta = ct_st_metadata(f);
    if (meta && !json_is_object(meta)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static bool ready;
    if (!ready) {
        setup();
        ready = true;
    }
    ct_st_file *f;
    if (fz_report("ct_st_open_memory", ct_st_open_memory(data, size, "fuzz.safetensors", &f)) == CT_OK) {
        read_all(f);
        ct_st_close(f);
    }
    char path[512];
    fz_path(path, sizeof path, "model.safetensors");
    fz_write_file(path, data, size);
    if (fz_report("ct_st_open", ct_st_open(path, &f)) == CT_OK) {
        read_all(f);
        ct_st_close(f);
    }
    fz_report("load into the cnn", ct_model_load_safetensors(&cnn, path));
    fz_report("load into the gpt", ct_model_load_safetensors(&gpt, path));
    json_t *init = json_string("model.safetensors");
    fz_report("init_from", ct_model_init_from_json(&cnn, init, fz_tmpdir()));
    json_decref(init);
    ct_error_clear();
    return 0;
}
