/* Mode "optim": placeholder until this area lands. */
#include "oracle.h"

ct_status oracle_optim(const oracle_io *io) {
    (void)io;
    return ct_error(CT_ERR_UNSUPPORTED, "oracle mode 'optim' is not available yet");
}
