/* TensorBoard logging in a ctrainer built without protobuf-c (CTRAINER_TENSORBOARD=OFF, or AUTO
 * where it was not found; cmake/CtrainerTensorboard.cmake compiles this file instead of
 * tensorboard.c). The API of tensorboard.h stays, so programs build and link the same way: what
 * would write answers CT_ERR_UNSUPPORTED, and report_to "tensorboard" fails when the Trainer is made,
 * before any training, with a message saying how to build it in. */
#include "callbacks/tensorboard.h"

#define CT_TB_OFF                                                                                                  \
    "this ctrainer was built without TensorBoard support (protobuf-c; configure with -DCTRAINER_TENSORBOARD=ON)"

static ct_status unsupported(void) { return ct_error(CT_ERR_UNSUPPORTED, "TensorBoard: " CT_TB_OFF); }

const char *ct_tb_protobuf_c_version(void) { return NULL; }

ct_status ct_tensorboard_callback_create(ct_callback **out) {
    *out = NULL;
    return ct_error(CT_ERR_UNSUPPORTED, "report_to tensorboard: " CT_TB_OFF);
}

ct_status ct_tb_writer_open(const char *logdir, ct_tb_writer **out) {
    *out = NULL;
    return unsupported();
}

/* No writer can exist in this build: the functions that take one are never reached with one. */
const char *ct_tb_writer_path(const ct_tb_writer *w) { return ""; }
ct_status ct_tb_writer_add_scalar(ct_tb_writer *w, const char *tag, double value, int64_t step, double wall_time) {
    return unsupported();
}
ct_status ct_tb_writer_add_text(ct_tb_writer *w, const char *tag, const char *text, int64_t step, double wall_time) {
    return unsupported();
}
ct_status ct_tb_writer_add_hparams(ct_tb_writer *w, const json_t *hparams, double wall_time) { return unsupported(); }
ct_status ct_tb_writer_add_session_end(ct_tb_writer *w, bool success, double wall_time) { return unsupported(); }
ct_status ct_tb_writer_flush(ct_tb_writer *w) { return unsupported(); }
ct_status ct_tb_writer_close(ct_tb_writer *w) { return CT_OK; }

ct_status ct_tb_default_logdir(const char *output_dir, char *out, size_t n) {
    if (n) out[0] = '\0';
    return unsupported();
}
