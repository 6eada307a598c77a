/* Mode "loss": placeholder until this area lands. */
#include "oracle.h"

ct_status oracle_loss(const oracle_io *io) {
    (void)io;
    return ct_error(CT_ERR_UNSUPPORTED, "oracle mode 'loss' is not available yet");
}
