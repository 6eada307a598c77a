/* Dynamic loss scaling: GradScaler's update rule (optim/grad_scaler.h). */
#include "optim/grad_scaler.h"

#include <math.h>

ct_grad_scaler_opts ct_grad_scaler_default_opts(void) {
    return (ct_grad_scaler_opts){.init_scale = 65536.0, .growth_factor = 2.0, .backoff_factor = 0.5,
                                 .growth_interval = 2000};
}

/* Doubles from here round to a finite float32 (converting any other is undefined in C; PyTorch's
 * cast makes them infinite): below FLT_MAX plus half its last place, which rounds up to infinity. */
#define BELOW_FLOAT_INF 0x1.ffffffp127

/* The scale lives in a float32 tensor in PyTorch: every value it takes is a float. */
static bool is_scale(double v) {
    if (!(v > 0 && v < BELOW_FLOAT_INF)) return false;
    ct_grad_scaler_state as_float = {.scale = (float)v};
    return (double)as_float.scale == v;
}

ct_status ct_grad_scaler_opts_check(const ct_grad_scaler_opts *o) {
    if (!is_scale(o->init_scale))
        return ct_error(CT_ERR_INVALID_ARG, "grad scaler: init_scale %g must be a finite float32 > 0", o->init_scale);
    if (!(o->growth_factor > 1) || !isfinite(o->growth_factor))
        return ct_error(CT_ERR_INVALID_ARG, "grad scaler: growth_factor %g must be finite and > 1", o->growth_factor);
    if (!(o->backoff_factor > 0 && o->backoff_factor < 1))
        return ct_error(CT_ERR_INVALID_ARG, "grad scaler: backoff_factor %g must be in (0, 1)", o->backoff_factor);
    if (o->growth_interval < 1)
        return ct_error(CT_ERR_INVALID_ARG, "grad scaler: growth_interval %lld must be >= 1",
                        (long long)o->growth_interval);
    return CT_OK;
}

ct_grad_scaler_state ct_grad_scaler_start(const ct_grad_scaler_opts *o) {
    return (ct_grad_scaler_state){.scale = (float)o->init_scale, .growth_tracker = 0};
}

void ct_grad_scaler_update(const ct_grad_scaler_opts *o, ct_grad_scaler_state *s, bool found_inf) {
    if (found_inf) {
        s->scale = (float)(s->scale * o->backoff_factor); /* the product in double, as PyTorch's kernel */
        s->growth_tracker = 0;
        return;
    }
    if (s->growth_tracker + 1 < o->growth_interval) {
        s->growth_tracker++;
        return;
    }
    /* PyTorch does not grow the scale past float32's range; the tracker restarts either way */
    double grown = s->scale * o->growth_factor;
    if (grown < BELOW_FLOAT_INF) s->scale = (float)grown;
    s->growth_tracker = 0;
}

ct_status ct_grad_scaler_state_check(const ct_grad_scaler_opts *o, const ct_grad_scaler_state *s, const char *where) {
    /* about 150 overflows in a row take the scale down to 0, which the rule then keeps: a state it
     * can reach is loaded */
    if (!(isfinite(s->scale) && s->scale >= 0))
        return ct_error(CT_ERR_FORMAT, "%s: grad_scaler.scale: %g is not finite and >= 0", where, (double)s->scale);
    if (s->growth_tracker < 0 || s->growth_tracker >= o->growth_interval)
        return ct_error(CT_ERR_FORMAT, "%s: grad_scaler.growth_tracker: %lld is outside [0, %lld) (growth_interval %lld)",
                        where, (long long)s->growth_tracker, (long long)o->growth_interval,
                        (long long)o->growth_interval);
    return CT_OK;
}
