/* cuDNN's handle and status types, for the host emulation's compile of the kernel files (which
 * declare, not call, cuDNN). */
#ifndef CT_FAKE_CUDNN_H
#define CT_FAKE_CUDNN_H
typedef struct ct_emu_cudnn *cudnnHandle_t;
typedef int cudnnStatus_t;
#endif
