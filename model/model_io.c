/* Model weights to and from HDF5 (see model_io.h for the format). */
#include <errno.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/format/h5_image.h"
#include "core/format/h5io.h"
#include "core/fs.h"
#include "core/ops/ops.h"
#include "model/layers.h"
#include "model/model_io.h"

/* values / buffers NULL: the model's own; else flat copies laid out like the model's buffers. */
static ct_status write_all(hid_t f, const ct_model *m, const ct_tensor *values, const ct_tensor *buffers,
                           const json_t *spec) {
    for (int i = 0; i < m->params.count; i++) {
        const ct_param *p = &m->params.items[i];
        const ct_tensor *flat = p->flags & CT_PARAM_BUFFER ? buffers : values;
        /* A copy is described by the store's metadata only (name, shape, offset: fixed once the
         * store is finalized) and the copy's own dtype and device: a writer thread then reads
         * nothing the training thread writes. */
        ct_tensor v = flat ? ct_tensor_view((char *)flat->data + (size_t)p->offset * ct_dtype_size(flat->dtype),
                                            flat->dtype, flat->device, p->ndim, p->shape)
                           : *p->value;
        CT_TRY(ct_h5_write_tensor(f, p->name, &v));
    }
    /* The architecture: the spec given (a run config's "model", presets unexpanded), else the layers'
     * own (ct_module_to_json), so a model built in C reloads too; none when a layer cannot say. */
    json_t *own = NULL;
    if (!spec && ct_module_to_json(m->root, &own) == CT_OK) spec = own;
    ct_error_clear();
    /* The per-sample input, which ct_model_from_pretrained builds the model for. */
    json_t *input = json_array();
    for (int i = 0; input && i < m->in_shape.ndim; i++) json_array_append_new(input, json_integer(m->in_shape.dims[i]));
    char *text = spec ? json_dumps(spec, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    char *shape = input ? json_dumps(input, JSON_COMPACT) : NULL;
    json_decref(own);
    json_decref(input);
    ct_status s = (spec && !text) || !shape ? ct_error(CT_ERR_NOMEM, "out of memory") : CT_OK;
    if (s == CT_OK && text) s = ct_h5_write_string_attr(f, "config", text);
    if (s == CT_OK) s = ct_h5_write_string_attr(f, "input_shape", shape);
    if (s == CT_OK) s = ct_h5_write_string_attr(f, "input_dtype", ct_dtype_name(m->in_dtype));
    free(text);
    free(shape);
    return s;
}

ct_status ct_model_read_h5_architecture(const char *file, json_t **spec, ct_shape *in_shape, ct_dtype *in_dtype) {
    *spec = NULL;
    CT_TRY(ct_check_regular_file(file)); /* a FIFO would block HDF5's open */
    char *config = NULL, *shape = NULL, *dtype = NULL;
    ct_h5_lock();
    ct_h5_quiet();
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    ct_status s = f < 0 ? ct_error(CT_ERR_FORMAT, "not an HDF5 file (or corrupt)") : CT_OK;
    if (s == CT_OK && (H5Aexists(f, "config") <= 0 || H5Aexists(f, "input_shape") <= 0))
        s = ct_error(CT_ERR_FORMAT, "the file holds weights but not the architecture (saved from a model with a layer "
                     "that has no to_json, or by an older ctrainer); build the model and use ct_model_load_h5");
    if (s == CT_OK) s = ct_h5_read_string_attr(f, "config", &config);
    if (s == CT_OK) s = ct_h5_read_string_attr(f, "input_shape", &shape);
    if (s == CT_OK && H5Aexists(f, "input_dtype") > 0) s = ct_h5_read_string_attr(f, "input_dtype", &dtype);
    if (f >= 0) H5Fclose(f);
    ct_h5_unlock();
    json_t *dims = NULL;
    if (s == CT_OK && !(*spec = json_loads(config, 0, NULL)))
        s = ct_error(CT_ERR_FORMAT, "its \"config\" attribute is not JSON");
    if (s == CT_OK && (!(dims = json_loads(shape, 0, NULL)) || !json_is_array(dims) ||
                       json_array_size(dims) + 1 > CT_MAX_DIMS))
        s = ct_error(CT_ERR_FORMAT, "its \"input_shape\" attribute is not a list of up to %d sizes", CT_MAX_DIMS - 1);
    if (s == CT_OK) {
        in_shape->ndim = (int)json_array_size(dims);
        for (int i = 0; s == CT_OK && i < in_shape->ndim; i++) {
            json_t *d = json_array_get(dims, (size_t)i);
            if (!json_is_integer(d) || json_integer_value(d) < 1)
                s = ct_error(CT_ERR_FORMAT, "its \"input_shape\" has a size that is not a positive integer");
            else
                in_shape->dims[i] = json_integer_value(d);
        }
    }
    *in_dtype = CT_F32;
    bool known = !dtype;
    for (int d = 0; s == CT_OK && dtype && d <= CT_U8; d++)
        if (strcmp(ct_dtype_name((ct_dtype)d), dtype) == 0) {
            *in_dtype = (ct_dtype)d;
            known = true;
        }
    if (s == CT_OK && !known) s = ct_error(CT_ERR_FORMAT, "its \"input_dtype\" '%s' is not a dtype", dtype);
    json_decref(dims);
    free(config);
    free(shape);
    free(dtype);
    if (s != CT_OK) {
        json_decref(*spec);
        *spec = NULL;
        return ct_error_prefix(s, "%s: ", file);
    }
    return CT_OK;
}

ct_status ct_model_save_h5(const ct_model *m, const json_t *spec, const char *file) {
    return ct_model_save_h5_values(m, NULL, NULL, spec, file);
}

ct_status ct_model_save_h5_values(const ct_model *m, const ct_tensor *values, const ct_tensor *buffers,
                                  const json_t *spec, const char *file) {
    if ((values && ct_tensor_numel(values) != ct_tensor_numel(&m->params.values)) ||
        (buffers && ct_tensor_numel(buffers) != ct_tensor_numel(&m->params.buffers)))
        return ct_error(CT_ERR_SHAPE, "save model '%s': the weights given are not laid out like the model's", file);
    /* built in memory, written without the HDF5 lock (core/format/h5_image.h) */
    void *image = NULL;
    size_t size = 0;
    ct_h5_lock();
    ct_h5_quiet();
    ct_h5_image im;
    ct_status s = ct_h5_image_create(ct_tensor_nbytes(&m->params.values) + ct_tensor_nbytes(&m->params.buffers), &im);
    if (s == CT_OK) {
        s = write_all(im.file, m, values, buffers, spec);
        if (s == CT_OK)
            s = ct_h5_image_finish(&im, &image, &size);
        else
            ct_h5_image_discard(&im);
    }
    ct_h5_unlock();
    /* a reader (a resumed run, `ctrainer evaluate`) sees the old file or the whole new one */
    if (s == CT_OK) s = ct_write_file_atomic(file, image, size);
    free(image);
    if (s != CT_OK) return ct_error_prefix(s, "save model '%s': ", file);
    return CT_OK;
}

/* Counts the root's datasets, to find tensors the model does not have. */
static herr_t count_link(hid_t g, const char *name, const H5L_info_t *info, void *data) {
    (void)g, (void)name, (void)info;
    (*(int *)data)++;
    return 0;
}

/* The first root link that is not a tensor of m, or NULL. */
typedef struct extra_search {
    const ct_model *m;
    char name[256];
} extra_search;

static herr_t find_extra(hid_t g, const char *name, const H5L_info_t *info, void *data) {
    (void)g, (void)info;
    extra_search *e = data;
    if (ct_params_find(&e->m->params, name)) return 0;
    snprintf(e->name, sizeof e->name, "%s", name);
    return 1;
}

static ct_status read_all(hid_t f, ct_model *m) {
    for (int i = 0; i < m->params.count; i++) {
        ct_param *p = &m->params.items[i];
        if (!ct_h5_exists(f, p->name))
            return ct_error(CT_ERR_FORMAT, "the model's tensor '%s' is missing from the file", p->name);
        ct_status s = ct_h5_read_into(f, p->name, p->value);
        /* a NaN weight must not train "fine": checked where the weights are (a GPU's copied back only to
         * say which element is wrong) */
        if (s == CT_OK && !ct_op_all_finite(p->value)) s = ct_tensor_check_finite(p->value);
        if (s != CT_OK) return ct_error_prefix(s, "tensor '%s': ", p->name);
    }
    int links = 0;
    H5Literate(f, H5_INDEX_NAME, H5_ITER_NATIVE, NULL, count_link, &links);
    if (links != m->params.count) {
        extra_search e = {.m = m};
        H5Literate(f, H5_INDEX_NAME, H5_ITER_NATIVE, NULL, find_extra, &e);
        return ct_error(CT_ERR_FORMAT, "the file has a tensor '%s' the model does not have (a different model?)",
                        e.name[0] ? e.name : "?");
    }
    return CT_OK;
}

ct_status ct_model_load_h5(ct_model *m, const char *file) {
    if (access(file, R_OK) != 0) return ct_error(CT_ERR_IO, "load model: cannot read '%s': %s", file, strerror(errno));
    ct_status rs = ct_check_regular_file(file); /* HDF5 would block on a FIFO */
    if (rs != CT_OK) return ct_error_prefix(rs, "load model: ");
    ct_h5_lock();
    ct_h5_quiet();
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    ct_status s = f < 0 ? ct_error(CT_ERR_FORMAT, "not an HDF5 file (or corrupt)") : read_all(f, m);
    if (f >= 0) H5Fclose(f);
    ct_h5_unlock();
    if (s != CT_OK) return ct_error_prefix(s, "load model '%s': ", file);
    return CT_OK;
}
