/* Status codes and the thread-local error message.
 *
 * Every public function that can fail returns a ct_status. On failure it also leaves a message in
 * thread-local storage (ct_last_error) that says what went wrong with its context: the layer, the
 * shapes, the file, the JSON key. Callers that add context prepend it with ct_error_prefix, so the
 * message a user finally reads names every level that knew something useful.
 *
 * Programmer errors (a NULL where the API forbids one, a broken invariant) are not statuses: they
 * abort through CT_ASSERT with file:line, because no caller could do anything sensible with them. */
#ifndef CT_STATUS_H
#define CT_STATUS_H

#include <stdarg.h>
#ifdef __cplusplus
#define CT_NORETURN [[noreturn]]
#else
#include <stdnoreturn.h>
#define CT_NORETURN noreturn
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ct_status {
    CT_OK = 0,
    CT_ERR_INVALID_ARG = -1, /* a value outside what the function accepts */
    CT_ERR_SHAPE = -2,       /* tensor shapes that do not fit together */
    CT_ERR_DTYPE = -3,       /* wrong element type */
    CT_ERR_DEVICE = -4,      /* tensor on the wrong device, or a device that is not available */
    CT_ERR_NOMEM = -5,       /* an allocation failed */
    CT_ERR_IO = -6,          /* a file could not be read or written */
    CT_ERR_CONFIG = -7,      /* a malformed or inconsistent configuration */
    CT_ERR_FORMAT = -8,      /* a file whose content is not what its format promises */
    CT_ERR_UNSUPPORTED = -9, /* a valid request this build or backend cannot serve */
    CT_ERR_NUMERIC = -10,    /* NaN or inf where a finite value is required */
    CT_ERR_STATE = -11,      /* a call made in the wrong order (e.g. forward before setup) */
    CT_ERR_INTERRUPTED = -12, /* stopped on request (SIGTERM, SIGINT) after saving what resuming needs */
} ct_status;

/* A short, stable name for a status ("shape mismatch"), never NULL. */
const char *ct_status_str(ct_status s);

/* The message left by the last failing call on this thread ("" when none). */
const char *ct_last_error(void);

/* Sets the thread's message and returns s, so a failure reads `return ct_error(CT_ERR_SHAPE, ...)`. */
ct_status ct_error(ct_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
ct_status ct_verror(ct_status s, const char *fmt, va_list ap);

/* Prepends context to the current message ("linear 'layers.0': " + message) and returns s. */
ct_status ct_error_prefix(ct_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Clears the thread's message. */
void ct_error_clear(void);

CT_NORETURN void ct_abort_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define CT_ASSERT(cond)                                                                            \
    do {                                                                                           \
        if (!(cond)) ct_abort_at(__FILE__, __LINE__, "assertion failed: %s", #cond);               \
    } while (0)

/* Propagates a failing status to the caller. */
#define CT_TRY(expr)                                                                               \
    do {                                                                                           \
        ct_status ct_try_s_ = (expr);                                                              \
        if (ct_try_s_ != CT_OK) return ct_try_s_;                                                  \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
