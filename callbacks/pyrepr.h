/* Python's repr() of JSON values, for the printer and the progress bar: Hugging Face prints log
 * dicts with print(logs), so users (and their scripts) expect {'loss': 0.3412, 'learning_rate':
 * 5e-05, 'epoch': 1.0}: single-quoted keys, Python's shortest round-trip floats (1.0, 5e-05,
 * 1e+16), True/False/None. Internal to callbacks/. */
#ifndef CT_PYREPR_H
#define CT_PYREPR_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* repr(float(x)) into buf (32 bytes are always enough). */
void ct_py_float_repr(double x, char *buf, size_t n);
/* repr() of a JSON value (object -> dict, array -> list, ...) written to f. */
void ct_py_repr(FILE *f, const json_t *v);
/* A log entry as Hugging Face prints it: the dict without total_flos (which HF pops), followed by
 * a newline. round_epoch rounds "epoch" to 2 decimals, as HF's ProgressCallback does. */
void ct_py_print_logs(FILE *f, const json_t *logs, bool round_epoch);

/* v as one line of JSON with the shortest round-trip floats (0.1, not jansson's
 * 0.10000000000000001), ", " and ": " separators as Python's json.dumps. Non-finite reals (which
 * jansson cannot hold anyway) are written as null. */
void ct_json_dump_line(FILE *f, const json_t *v);

#endif
