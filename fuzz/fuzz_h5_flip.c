/* Fuzz target: HDF5 files the project writes, with bytes flipped, read by every HDF5 reader that a
 * user's file reaches: the HDF5 data set (ct_hdf5_dataset_create and every sample of it), a model
 * (ct_model_load_h5, what `evaluate --model` and a resume read, and ct_export_safetensors's reader)
 * and an optimizer's state (ct_optimizer_load_h5, a resume).
 *
 * The other HDF5 targets describe files (fuzz/h5gen.h) so that libhdf5 always writes a well-formed
 * one; this one is the complement: the damage a disk, a transfer or a hostile user does to a real
 * file, one byte here and there, which libhdf5 then decodes. libhdf5 trusts what it decodes (a
 * chunk shape made larger than the dataset by one flipped byte made H5Dread copy out of bounds), so
 * the readers validate each dataset before reading it (core/format/h5_check.h); this target checks
 * that nothing a few flips can make crashes, leaks or hangs. A checkpoint's files are protected by
 * the manifest's checksums, but a hostile user rewrites the manifest too, and a saved model's
 * directory (`evaluate --model`) has none: the loaders get the flipped file directly.
 *
 * At start-up the target writes its templates: an IDX pair converted to HDF5 (u8 images [N, 1, 4,
 * 4], chunked, shuffled and deflated), a CSV converted without compression (f32 [N, 3]), a model
 * (an MLP's model.h5, contiguous datasets) and its AdamW state after one step (optimizer.h5). Input:
 * a u8 choosing the template, then up to 64 flips of 5 bytes each: a u32 offset (modulo the file's
 * size) and a u8 XORed into the byte there. With CT_FUZZ_WRITE_SEEDS set, one seed per template
 * with no flip. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/checkpoint_io.h"
#include "common.h"
#include "data/convert.h"
#include "data/dataset.h"
#include "model/export.h"
#include "model/layers.h"
#include "model/model_io.h"

enum { T_IDX, T_CSV, T_MODEL, T_OPTIMIZER, N_TEMPLATES };
static const char *const template_names[] = {"idx_data.h5", "csv_data.h5", "model.h5", "optimizer.h5"};
static uint8_t *template[N_TEMPLATES];
static size_t template_size[N_TEMPLATES];

#define MAX_FLIPS 64

static ct_model model;
static ct_optimizer *optimizer;

static void write_templates(void) {
    char images[512], labels[512], csv[512], path[512];
    /* 24 images of 4x4 pixels, labels 0..2, in chunks of 5 rows: several chunks, a partial last one */
    uint8_t img[16 + 24 * 16] = {0, 0, 8, 3, 0, 0, 0, 24, 0, 0, 0, 4, 0, 0, 0, 4};
    uint8_t lab[8 + 24] = {0, 0, 8, 1, 0, 0, 0, 24};
    for (int i = 0; i < 24 * 16; i++) img[16 + i] = (uint8_t)(i * 37 % 251);
    for (int i = 0; i < 24; i++) lab[8 + i] = (uint8_t)(i % 3);
    fz_write_file(fz_path(images, sizeof images, "images.idx"), img, sizeof img);
    fz_write_file(fz_path(labels, sizeof labels, "labels.idx"), lab, sizeof lab);
    fz_check(ct_convert_idx_to_hdf5(images, labels, fz_path(path, sizeof path, template_names[T_IDX]), 5, 4),
             "converting the IDX template");
    static const char text[] = "a,b,c,label\n0.5,1.5,2.25,1\n-1,2,0.125,0\n3,4,-7,2\n1,1,1,1\n2,2,2,0\n";
    fz_write_file(fz_path(csv, sizeof csv, "data.csv"), text, sizeof text - 1);
    fz_check(ct_convert_csv_to_hdf5(csv, NULL, -1, fz_path(path, sizeof path, template_names[T_CSV]), 2, 0),
             "converting the CSV template");

    json_t *spec = json_pack("{s:s, s:[i], s:i}", "type", "mlp", "hidden", 4, "num_classes", 3);
    ct_module *root;
    fz_check(ct_module_from_json(spec, "model", &root), "model spec");
    ct_model_options o = {.dtype = CT_F32, .device = CT_CPU, .max_batch = 4, .seed = 5};
    fz_check(ct_model_build(&model, root, &(ct_shape){1, {6}}, &o), "model");
    fz_check(ct_model_save_h5(&model, spec, fz_path(path, sizeof path, template_names[T_MODEL])), "saving the model");
    json_decref(spec);
    json_t *ospec = json_pack("{s:s}", "optim", "adamw");
    fz_check(ct_optimizer_from_json(ospec, "training_args", &model.params, &optimizer), "optimizer");
    json_decref(ospec);
    for (int64_t i = 0; i < model.params.grads.shape[0]; i++) ((float *)model.params.grads.data)[i] = 0.01f;
    fz_check(ct_optimizer_step(optimizer, 1e-3), "optimizer step");
    fz_check(ct_optimizer_save_h5(optimizer, fz_path(path, sizeof path, template_names[T_OPTIMIZER])),
             "saving the optimizer");

    for (int t = 0; t < N_TEMPLATES; t++) {
        template[t] = fz_read_file(fz_path(path, sizeof path, template_names[t]), &template_size[t]);
        if (fz_writing_seeds()) {
            uint8_t seed = (uint8_t)t;
            char name[64];
            snprintf(name, sizeof name, "template_%s", template_names[t]);
            fz_seed(name, &seed, 1);
        }
    }
}

/* Every sample of the data set, in batches of 4 (the templates are small). */
static void read_data(const char *path) {
    ct_hdf5_dataset_config cfg = {.path = path};
    ct_dataset *ds = NULL;
    if (fz_report("ct_hdf5_dataset_create", ct_hdf5_dataset_create(&cfg, &ds)) != CT_OK) return;
    int64_t n = ct_dataset_length(ds);
    ct_tensor f, l;
    if (n > 0 && n <= 4096 && ct_dataset_alloc_batch(ds, 4, &f, &l) == CT_OK) {
        ct_fetch_ctx ctx = {.seed = 1, .epoch = 0};
        for (int64_t i = 0; i < n; i += 4) {
            int64_t idx[4], rows = n - i < 4 ? n - i : 4;
            for (int64_t k = 0; k < rows; k++) idx[k] = i + k;
            if (fz_report("batch", ct_dataset_get_batch(ds, idx, rows, &ctx, &f, &l)) != CT_OK) break;
        }
        ct_tensor_free(&f);
        ct_tensor_free(&l);
    }
    ct_dataset_free(ds);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static bool ready;
    if (!ready) {
        fz_init();
        write_templates();
        fz_h5_mark_handles();
        ready = true;
    }
    fz_input in = {data, size};
    int t = fz_u8(&in) % N_TEMPLATES;
    uint8_t *bytes = malloc(template_size[t]);
    if (!bytes) abort();
    memcpy(bytes, template[t], template_size[t]);
    for (int i = 0; i < MAX_FLIPS && in.n >= 5; i++) {
        uint32_t at = fz_u32(&in);
        bytes[at % template_size[t]] ^= fz_u8(&in);
    }
    char path[512];
    fz_write_file(fz_path(path, sizeof path, "flipped.h5"), bytes, template_size[t]);
    free(bytes);

    if (t == T_IDX || t == T_CSV) {
        read_data(path);
    } else if (t == T_MODEL) {
        fz_report("ct_model_load_h5", ct_model_load_h5(&model, path));
        char dir[512], out[512];
        fz_path(dir, sizeof dir, "model_dir");
        fz_path(out, sizeof out, "export");
        fz_remove_tree(dir);
        fz_remove_tree(out);
        char target[600];
        snprintf(target, sizeof target, "%s/model.h5", dir);
        if (mkdir(dir, 0700) == 0 && rename(path, target) == 0) {
            ct_export_options o = {.model_dir = dir, .output_dir = out};
            fz_report("ct_export_safetensors", ct_export_safetensors(&o, NULL));
        }
        fz_remove_tree(dir);
        fz_remove_tree(out);
    } else {
        fz_report("ct_optimizer_load_h5", ct_optimizer_load_h5(optimizer, path));
    }
    fz_h5_check_handles();
    ct_error_clear();
    return 0;
}
