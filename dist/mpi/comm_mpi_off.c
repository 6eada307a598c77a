/* The MPI communicator of a build without MPI (-DCTRAINER_MPI=OFF, or AUTO where no MPI was
 * found): compiled instead of comm_mpi.c beside it, so a single-process library still links
 * everywhere, and whoever asks for several processes learns why there are none. ct_comm_create_default (dist/comm.c) refuses a job that
 * mpirun/srun started with several ranks for the same reason: each rank would otherwise train alone,
 * N times over. */
#include "dist/comm.h"

ct_status ct_comm_mpi_create(double timeout_s, ct_comm **out) {
    (void)timeout_s;
    *out = NULL;
    return ct_error(CT_ERR_UNSUPPORTED, "mpi communicator: this build has no MPI (configure with -DCTRAINER_MPI=ON)");
}
