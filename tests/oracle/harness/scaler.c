/* ct_oracle scaler: optim/grad_scaler.h's update rule over a sequence of steps.
 *
 * spec: {"init_scale", "growth_factor", "backoff_factor", "growth_interval"}; input "found_inf" (one
 * value per step, non-zero: the step overflowed). Output: "scale" and "growth_tracker" after each
 * step's update, and "defaults" (init_scale, growth_factor, backoff_factor, growth_interval of
 * ct_grad_scaler_default_opts). */
#include <stdlib.h>

#include "core/json.h"
#include "optim/grad_scaler.h"
#include "oracle.h"

static ct_status write_f64(hid_t out, const char *name, double *data, int64_t n) {
    ct_tensor t = ct_tensor_view(data, CT_F64, CT_CPU, 1, &n);
    return ct_h5_write_tensor(out, name, &t);
}

ct_status oracle_scaler(const oracle_io *io) {
    ct_grad_scaler_opts o;
    CT_TRY(ct_json_real(io->spec, "spec", "init_scale", true, 0, &o.init_scale));
    CT_TRY(ct_json_real(io->spec, "spec", "growth_factor", true, 0, &o.growth_factor));
    CT_TRY(ct_json_real(io->spec, "spec", "backoff_factor", true, 0, &o.backoff_factor));
    CT_TRY(ct_json_int(io->spec, "spec", "growth_interval", true, 0, &o.growth_interval));
    CT_TRY(ct_grad_scaler_opts_check(&o));
    ct_tensor found = {0};
    CT_TRY(ct_h5_read_tensor_alloc(io->in, "found_inf", CT_F64, &found));
    int64_t n = ct_tensor_numel(&found);
    double *scale = malloc((size_t)(n + 1) * sizeof *scale), *tracker = malloc((size_t)(n + 1) * sizeof *tracker);
    ct_status s = scale && tracker ? CT_OK : ct_error(CT_ERR_NOMEM, "out of memory");
    ct_grad_scaler_state st = ct_grad_scaler_start(&o);
    const double *f = found.data;
    for (int64_t i = 0; s == CT_OK && i < n; i++) {
        ct_grad_scaler_update(&o, &st, f[i] != 0);
        scale[i] = st.scale;
        tracker[i] = (double)st.growth_tracker;
    }
    if (s == CT_OK) s = write_f64(io->out, "scale", scale, n);
    if (s == CT_OK) s = write_f64(io->out, "growth_tracker", tracker, n);
    ct_grad_scaler_opts d = ct_grad_scaler_default_opts();
    double defaults[4] = {d.init_scale, d.growth_factor, d.backoff_factor, (double)d.growth_interval};
    if (s == CT_OK) s = write_f64(io->out, "defaults", defaults, 4);
    free(scale);
    free(tracker);
    ct_tensor_free(&found);
    return s;
}
