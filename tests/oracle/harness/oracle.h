/* The oracle harness: runs one ctrainer computation described by an HDF5 file that a Python test
 * wrote (a JSON "spec" attribute plus input tensors) and writes the results to another HDF5 file,
 * which the test compares against PyTorch. One mode per area (layer, loss, optim, sched, scaler). */
#ifndef CT_ORACLE_H
#define CT_ORACLE_H

#include <hdf5.h>
#include <jansson.h>

#include "core/format/h5io.h"
#include "core/status.h"

typedef struct oracle_io {
    hid_t in, out;
    json_t *spec;
} oracle_io;

ct_status oracle_layer(const oracle_io *io);
ct_status oracle_loss(const oracle_io *io);
ct_status oracle_optim(const oracle_io *io);
ct_status oracle_sched(const oracle_io *io);
ct_status oracle_scaler(const oracle_io *io);

/* "f32" or "f64" from spec["dtype"] (default f32). */
ct_dtype oracle_dtype(const json_t *spec);

#endif
