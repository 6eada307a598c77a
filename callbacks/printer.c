/* PrinterCallback: each on_log prints the entry on one line as Hugging Face's print(logs) does
 * ({'loss': 0.3412, 'learning_rate': 5e-05, 'epoch': 1.0}), total_flos left out as HF pops it.
 * Evaluation metrics arrive here too, because the Trainer logs them. As HF's, it prints on each
 * node's local process zero (state->is_local_process_zero), so N ranks on one node print one copy;
 * the progress bar, by contrast, is the world's process zero's. */
#include <stdlib.h>

#include "callbacks/callback.h"
#include "callbacks/pyrepr.h"
#include "core/util.h"

typedef struct printer_cb {
    ct_callback base;
    FILE *stream;
} printer_cb;

static ct_status printer_log(ct_callback *cb, const ct_callback_args *a) {
    printer_cb *p = ct_container_of(cb, printer_cb, base);
    if (!a->state->is_local_process_zero || !a->logs || !json_is_object(a->logs)) return CT_OK;
    ct_py_print_logs(p->stream, a->logs, false);
    fflush(p->stream);
    return CT_OK;
}

static const ct_callback_ops printer_ops = {
    .size = sizeof(ct_callback_ops),
    .name = "PrinterCallback",
    .on_log = printer_log,
};

ct_status ct_printer_callback_create(FILE *stream, ct_callback **out) {
    CT_ASSERT(stream);
    printer_cb *p = calloc(1, sizeof *p);
    if (!p) return ct_error(CT_ERR_NOMEM, "PrinterCallback: out of memory");
    p->base.ops = &printer_ops;
    p->stream = stream;
    *out = &p->base;
    return CT_OK;
}
