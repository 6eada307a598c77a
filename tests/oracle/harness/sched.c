/* Mode "sched": placeholder until this area lands. */
#include "oracle.h"

ct_status oracle_sched(const oracle_io *io) {
    (void)io;
    return ct_error(CT_ERR_UNSUPPORTED, "oracle mode 'sched' is not available yet");
}
