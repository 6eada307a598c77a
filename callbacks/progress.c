/* ProgressCallback: a one-line progress bar, redrawn in place with \r, in the spirit of the tqdm
 * bar Hugging Face shows:
 *    37%|███████▍            | 37/100 [00:12<00:21, 2.95it/s, loss=0.3412]
 * Log entries are written above the bar (as HF's tqdm.write does), epoch rounded to 2 decimals.
 * Only on the world's process zero, only when the stream is a terminal, and not with disable_tqdm:
 * redirected output stays free of control characters (the Trainer installs the printer instead).
 * Redraws are limited to ten a second so a fast loop does not spend its time on the terminal. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "callbacks/callback.h"
#include "callbacks/pyrepr.h"
#include "core/util.h"

typedef struct progress_cb {
    ct_callback base;
    FILE *stream;
    bool active;               /* a bar is being shown for this training run */
    int64_t total, start_step; /* max_steps; global_step at train begin (resumed runs) */
    int64_t current;
    double start_time, last_draw;
    bool has_loss;
    double loss;
} progress_cb;

/* tqdm's format: MM:SS, or H:MM:SS from an hour on. */
static void fmt_time(double s, char *buf, size_t n) {
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, n, "%02ld:%02ld", t / 60, t % 60);
}

static int terminal_columns(FILE *f) {
    struct winsize ws;
    if (ioctl(fileno(f), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    return 80;
}

static void draw(progress_cb *p) {
    double elapsed = ct_monotonic_seconds() - p->start_time;
    int64_t done = p->current - p->start_step;
    char el[32], rem[32] = "?", rate[32] = "?it/s", right[160];
    fmt_time(elapsed, el, sizeof el);
    if (done > 0 && elapsed > 0) {
        double r = (double)done / elapsed;
        if (r >= 1)
            snprintf(rate, sizeof rate, "%.2fit/s", r);
        else
            snprintf(rate, sizeof rate, "%.2fs/it", 1 / r);
        fmt_time((double)(p->total - p->current) / r, rem, sizeof rem);
    }
    char loss[48] = "";
    if (p->has_loss) snprintf(loss, sizeof loss, ", loss=%.4g", p->loss);
    double frac = p->total > 0 ? fmin(1.0, (double)p->current / (double)p->total) : 0.0;
    snprintf(right, sizeof right, "| %lld/%lld [%s<%s, %s%s]", (long long)p->current, (long long)p->total, el, rem,
             rate, loss);
    char left[16];
    snprintf(left, sizeof left, "%3d%%|", (int)(100 * frac));

    /* The bar takes what the terminal leaves (one column spare, so the line never wraps). */
    int width = terminal_columns(p->stream) - (int)strlen(left) - (int)strlen(right) - 1;
    if (width > 50) width = 50;
    fputs("\r\033[K", p->stream);
    if (width >= 4) {
        static const char *const partial[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
        int eighths = (int)(frac * width * 8);
        int full = eighths / 8, cells = 0;
        fputs(left, p->stream);
        for (; cells < full; cells++) fputs("█", p->stream);
        if (cells < width && eighths % 8) {
            fputs(partial[eighths % 8], p->stream);
            cells++;
        }
        for (; cells < width; cells++) fputc(' ', p->stream);
        fputs(right, p->stream);
    } else {
        /* Too narrow for a bar: the counts alone. */
        fprintf(p->stream, "%3d%% %s", (int)(100 * frac), right + 2);
    }
    fflush(p->stream);
    p->last_draw = ct_monotonic_seconds();
}

static ct_status progress_train_begin(ct_callback *cb, const ct_callback_args *a) {
    progress_cb *p = ct_container_of(cb, progress_cb, base);
    p->active = a->state->is_world_process_zero && !a->args->disable_tqdm && isatty(fileno(p->stream));
    if (!p->active) return CT_OK;
    p->total = a->state->max_steps;
    p->start_step = p->current = a->state->global_step;
    p->start_time = ct_monotonic_seconds();
    p->has_loss = false;
    draw(p);
    return CT_OK;
}

static ct_status progress_step_end(ct_callback *cb, const ct_callback_args *a) {
    progress_cb *p = ct_container_of(cb, progress_cb, base);
    if (!p->active) return CT_OK;
    p->current = a->state->global_step;
    if (p->current >= p->total || ct_monotonic_seconds() - p->last_draw >= 0.1) draw(p);
    return CT_OK;
}

static ct_status progress_log(ct_callback *cb, const ct_callback_args *a) {
    progress_cb *p = ct_container_of(cb, progress_cb, base);
    if (!p->active || !a->logs || !json_is_object(a->logs)) return CT_OK;
    const json_t *loss = json_object_get(a->logs, "loss");
    if (loss && json_is_number(loss)) {
        p->has_loss = true;
        p->loss = json_number_value(loss);
    }
    /* The entry goes above the bar: clear the bar's line, print, draw the bar again below. */
    fputs("\r\033[K", p->stream);
    ct_py_print_logs(p->stream, a->logs, true);
    draw(p);
    return CT_OK;
}

static ct_status progress_train_end(ct_callback *cb, const ct_callback_args *a) {
    progress_cb *p = ct_container_of(cb, progress_cb, base);
    if (!p->active) return CT_OK;
    p->current = a->state->global_step;
    draw(p);
    fputc('\n', p->stream);
    fflush(p->stream);
    p->active = false;
    return CT_OK;
}

static const ct_callback_ops progress_ops = {
    .size = sizeof(ct_callback_ops),
    .name = "ProgressCallback",
    .on_train_begin = progress_train_begin,
    .on_step_end = progress_step_end,
    .on_log = progress_log,
    .on_train_end = progress_train_end,
};

ct_status ct_progress_callback_create(FILE *stream, ct_callback **out) {
    CT_ASSERT(stream);
    progress_cb *p = calloc(1, sizeof *p);
    if (!p) return ct_error(CT_ERR_NOMEM, "ProgressCallback: out of memory");
    p->base.ops = &progress_ops;
    p->stream = stream;
    *out = &p->base;
    return CT_OK;
}
