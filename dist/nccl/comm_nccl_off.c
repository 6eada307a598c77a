/* ct_comm_nccl_create in a build without CUDA or without MPI (NCCL's ranks are started and
 * bootstrapped through MPI): compiled instead of comm_nccl.c, so the library links everywhere and
 * whoever asks for NCCL learns which part the build lacks. */
#include "dist/comm.h"

ct_status ct_comm_nccl_create(double timeout_s, int device, ct_comm **out) {
    (void)timeout_s;
    (void)device;
    *out = NULL;
#ifdef CT_HAVE_MPI
    return ct_error(CT_ERR_UNSUPPORTED, "nccl communicator: this build has no CUDA backend (configure with "
                                        "-DCTRAINER_CUDA=ON)");
#else
    return ct_error(CT_ERR_UNSUPPORTED, "nccl communicator: this build has no MPI, which starts NCCL's ranks "
                                        "(configure with -DCTRAINER_MPI=ON)");
#endif
}
