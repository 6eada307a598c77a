/* ct_comm_nccl_create, the library's entry to the NCCL communicator. The communicator itself
 * (dist/nccl/comm_nccl.c) is built into the CUDA backend's module with the CUDA libraries and NCCL
 * (backends/cuda/CMakeLists.txt), so this finds it there, loading the module if no GPU op has yet;
 * where the build or the machine has no module, it says which part is missing. */
#include "core/ops/backend.h"
#include "dist/comm.h"

typedef ct_status (*nccl_create_fn)(double timeout_s, int device, ct_comm **out);

ct_status ct_comm_nccl_create(double timeout_s, int device, ct_comm **out) {
    *out = NULL;
#ifndef CT_HAVE_MPI
    (void)timeout_s;
    (void)device;
    return ct_error(CT_ERR_UNSUPPORTED, "nccl communicator: this build has no MPI, which starts NCCL's ranks "
                                        "(configure with -DCTRAINER_MPI=ON)");
#else
    nccl_create_fn create = (nccl_create_fn)ct_backend_symbol(CT_DEVICE_CUDA, "ct_cuda_module_nccl_create");
    if (!create) {
        const char *why = ct_backend_load_error(CT_DEVICE_CUDA);
        return ct_error(CT_ERR_UNSUPPORTED, "nccl communicator: %s",
                        *why ? why : "the CUDA backend in use has no NCCL communicator");
    }
    return create(timeout_s, device, out);
#endif
}
