/* HDF5 tensor I/O (see h5io.h). */
#include "core/format/h5io.h"

#include "core/format/h5_check.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static hid_t mem_type(ct_dtype dt) {
    switch (dt) {
    case CT_F32: return H5T_NATIVE_FLOAT;
    case CT_F64: return H5T_NATIVE_DOUBLE;
    case CT_I32: return H5T_NATIVE_INT32;
    case CT_I64: return H5T_NATIVE_INT64;
    case CT_U8: return H5T_NATIVE_UINT8;
    case CT_BF16: return H5T_NATIVE_UINT16; /* raw bits */
    }
    return H5T_NATIVE_FLOAT;
}

/* ct_h5_file_create's format and properties; with increment > 0 in memory (the core driver, its
 * buffer managed by callbacks when given). */
static ct_status file_create(const char *path, size_t increment, const H5FD_file_image_callbacks_t *callbacks,
                             hid_t *out) {
    *out = -1;
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), fcpl = H5Pcreate(H5P_FILE_CREATE);
    bool ok = fapl >= 0 && fcpl >= 0 && H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110) >= 0 &&
              H5Pset_obj_track_times(fcpl, 0) >= 0 && (increment == 0 || H5Pset_fapl_core(fapl, increment, 0) >= 0) &&
              (!callbacks || H5Pset_file_image_callbacks(fapl, (H5FD_file_image_callbacks_t *)callbacks) >= 0);
    if (ok) *out = H5Fcreate(path, H5F_ACC_TRUNC, fcpl, fapl);
    if (fcpl >= 0) H5Pclose(fcpl);
    if (fapl >= 0) H5Pclose(fapl);
    if (*out < 0) return ct_error(CT_ERR_IO, "hdf5: cannot create '%s'", path);
    return CT_OK;
}

ct_status ct_h5_file_create(const char *path, hid_t *out) { return file_create(path, 0, NULL, out); }

ct_status ct_h5_file_create_in_memory(const char *name, size_t increment,
                                      const H5FD_file_image_callbacks_t *callbacks, hid_t *out) {
    CT_ASSERT(increment > 0);
    return file_create(name, increment, callbacks, out);
}

void ct_h5_quiet(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

static pthread_mutex_t h5_mutex;
static pthread_once_t h5_mutex_once = PTHREAD_ONCE_INIT;

static void h5_mutex_init(void) {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&h5_mutex, &attr);
    pthread_mutexattr_destroy(&attr);
}

void ct_h5_lock(void) {
    pthread_once(&h5_mutex_once, h5_mutex_init);
    pthread_mutex_lock(&h5_mutex);
}

void ct_h5_unlock(void) { pthread_mutex_unlock(&h5_mutex); }

bool ct_h5_exists(hid_t file, const char *name) {
    /* H5Lexists must be asked for each prefix of the path. */
    char buf[1024];
    if (strlen(name) >= sizeof buf) return false;
    snprintf(buf, sizeof buf, "%s", name);
    for (char *p = buf; (p = strchr(p + 1, '/'));) {
        *p = '\0';
        if (H5Lexists(file, buf, H5P_DEFAULT) <= 0) return false;
        *p = '/';
    }
    return H5Lexists(file, buf, H5P_DEFAULT) > 0;
}

/* A host tensor shaped like t (a device tensor): libhdf5 reads and writes host memory only, so
 * device tensors pass through one. */
static ct_status host_stage(const char *name, const ct_tensor *t, ct_tensor *host) {
    ct_status s = ct_tensor_alloc(host, t->dtype, CT_CPU, t->ndim, t->shape);
    return s == CT_OK ? s : ct_error_prefix(s, "hdf5: '%s': ", name);
}

ct_status ct_h5_write_tensor(hid_t file, const char *name, const ct_tensor *t) {
    if (t->device.kind != CT_DEVICE_CPU) {
        ct_tensor host = {0};
        CT_TRY(host_stage(name, t, &host));
        ct_status s = ct_tensor_copy_to(&host, t);
        if (s == CT_OK) s = ct_h5_write_tensor(file, name, &host);
        ct_tensor_free(&host);
        return s;
    }
    hsize_t dims[CT_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) dims[i] = (hsize_t)t->shape[i];
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t space = H5Screate_simple(t->ndim, dims, NULL);
    /* No modification times in the file: the same tensors give the same bytes (checkpoints compare). */
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_obj_track_times(dcpl, 0);
    hid_t ds = H5Dcreate2(file, name, mem_type(t->dtype), space, lcpl, dcpl, H5P_DEFAULT);
    herr_t rc = ds < 0 ? -1 : H5Dwrite(ds, mem_type(t->dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, t->data);
    if (ds >= 0) H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Pclose(lcpl);
    if (rc < 0) return ct_error(CT_ERR_IO, "hdf5: cannot write dataset '%s'", name);
    return CT_OK;
}

static ct_status open_dataset(hid_t file, const char *name, hid_t *ds, int *ndim, int64_t *shape) {
    if (!ct_h5_exists(file, name)) return ct_error(CT_ERR_FORMAT, "hdf5: no dataset '%s'", name);
    *ds = H5Dopen2(file, name, H5P_DEFAULT);
    if (*ds < 0) return ct_error(CT_ERR_FORMAT, "hdf5: '%s' is not a dataset", name);
    ct_status s = ct_h5_check_dataset(*ds, name);
    if (s != CT_OK) {
        H5Dclose(*ds);
        return ct_error_prefix(s, "hdf5: ");
    }
    hid_t space = H5Dget_space(*ds);
    int nd = H5Sget_simple_extent_ndims(space);
    if (nd < 0 || nd > CT_MAX_DIMS) {
        H5Sclose(space);
        H5Dclose(*ds);
        return ct_error(CT_ERR_FORMAT, "hdf5: dataset '%s' has %d dimensions (at most %d)", name, nd, CT_MAX_DIMS);
    }
    hsize_t dims[CT_MAX_DIMS];
    H5Sget_simple_extent_dims(space, dims, NULL);
    H5Sclose(space);
    for (int i = 0; i < nd; i++) shape[i] = (int64_t)dims[i];
    *ndim = nd;
    return CT_OK;
}

static ct_status read_all(hid_t ds, const char *name, ct_tensor *t) {
    if (t->device.kind != CT_DEVICE_CPU) {
        ct_tensor host = {0};
        ct_status s = host_stage(name, t, &host);
        if (s != CT_OK) {
            H5Dclose(ds);
            return s;
        }
        s = read_all(ds, name, &host);
        if (s == CT_OK) s = ct_tensor_copy_to(t, &host);
        ct_tensor_free(&host);
        return s;
    }
    herr_t rc = H5Dread(ds, mem_type(t->dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, t->data);
    H5Dclose(ds);
    if (rc < 0) return ct_error(CT_ERR_FORMAT, "hdf5: cannot read dataset '%s' as %s", name, ct_dtype_name(t->dtype));
    return CT_OK;
}

ct_status ct_h5_read_tensor_alloc(hid_t file, const char *name, ct_dtype dt, ct_tensor *out) {
    hid_t ds;
    int ndim;
    int64_t shape[CT_MAX_DIMS];
    CT_TRY(open_dataset(file, name, &ds, &ndim, shape));
    ct_status s = ct_tensor_alloc(out, dt, CT_CPU, ndim, shape);
    if (s != CT_OK) {
        H5Dclose(ds);
        return s;
    }
    s = read_all(ds, name, out);
    if (s != CT_OK) ct_tensor_free(out);
    return s;
}

ct_status ct_h5_read_into(hid_t file, const char *name, ct_tensor *t) {
    hid_t ds;
    int ndim;
    int64_t shape[CT_MAX_DIMS];
    CT_TRY(open_dataset(file, name, &ds, &ndim, shape));
    ct_tensor want = ct_tensor_view(NULL, t->dtype, t->device, ndim, shape);
    if (!ct_shape_eq(&want, t)) {
        H5Dclose(ds);
        char a[96], b[96];
        return ct_error(CT_ERR_SHAPE, "hdf5: dataset '%s' has shape %s, expected %s", name,
                        ct_shape_str(ndim, shape, a, sizeof a), ct_shape_str(t->ndim, t->shape, b, sizeof b));
    }
    return read_all(ds, name, t);
}

ct_status ct_h5_write_string_attr(hid_t file, const char *name, const char *value) {
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, strlen(value) + 1);
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t attr = H5Acreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = attr < 0 ? -1 : H5Awrite(attr, type, value);
    if (attr >= 0) H5Aclose(attr);
    H5Sclose(space);
    H5Tclose(type);
    if (rc < 0) return ct_error(CT_ERR_IO, "hdf5: cannot write attribute '%s'", name);
    return CT_OK;
}

ct_status ct_h5_read_string_attr(hid_t file, const char *name, char **value) {
    if (H5Aexists(file, name) <= 0) return ct_error(CT_ERR_FORMAT, "hdf5: no attribute '%s'", name);
    hid_t attr = H5Aopen(file, name, H5P_DEFAULT);
    if (attr < 0) return ct_error(CT_ERR_FORMAT, "hdf5: cannot open attribute '%s'", name);
    hid_t ftype = H5Aget_type(attr), space = H5Aget_space(attr);
    /* One string: H5Aread writes every element of the attribute, so an array of strings would
     * overflow the one-string buffer below. */
    hssize_t count = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
    if (space >= 0) H5Sclose(space);
    ct_status s = CT_OK;
    if (H5Tget_class(ftype) != H5T_STRING) {
        s = ct_error(CT_ERR_FORMAT, "hdf5: attribute '%s' is not a string", name);
    } else if (count != 1) {
        s = ct_error(CT_ERR_FORMAT, "hdf5: attribute '%s' holds %lld strings, expected one", name, (long long)count);
    } else if (H5Tis_variable_str(ftype) > 0) {
        hid_t mtype = H5Tcopy(H5T_C_S1);
        H5Tset_size(mtype, H5T_VARIABLE);
        H5Tset_cset(mtype, H5Tget_cset(ftype)); /* h5py writes UTF-8; HDF5 will not convert charsets */
        char *tmp = NULL;
        if (H5Aread(attr, mtype, &tmp) < 0 || !tmp) s = ct_error(CT_ERR_FORMAT, "hdf5: cannot read '%s'", name);
        else {
            *value = strdup(tmp);
            H5free_memory(tmp);
            if (!*value) s = ct_error(CT_ERR_NOMEM, "hdf5: out of memory reading '%s'", name);
        }
        H5Tclose(mtype);
    } else {
        size_t n = H5Tget_size(ftype);
        char *buf = calloc(1, n + 1);
        if (!buf) {
            H5Tclose(ftype);
            H5Aclose(attr);
            return ct_error(CT_ERR_NOMEM, "hdf5: out of memory reading '%s'", name);
        }
        hid_t mtype = H5Tcopy(H5T_C_S1);
        H5Tset_size(mtype, n);
        H5Tset_cset(mtype, H5Tget_cset(ftype));
        if (H5Aread(attr, mtype, buf) < 0) {
            free(buf);
            s = ct_error(CT_ERR_FORMAT, "hdf5: cannot read '%s'", name);
        } else
            *value = buf;
        H5Tclose(mtype);
    }
    H5Tclose(ftype);
    H5Aclose(attr);
    return s;
}
