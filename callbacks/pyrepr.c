/* Python's repr() of floats, strings and containers (see pyrepr.h). Floats follow CPython's
 * float_repr_style "short": the fewest significant digits that read back to the same double,
 * in fixed notation when the decimal exponent is in [-4, 16), else d.ddde+XX. */
#include "callbacks/pyrepr.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void ct_py_float_repr(double x, char *buf, size_t n) {
    if (isnan(x)) {
        snprintf(buf, n, "nan");
        return;
    }
    if (isinf(x)) {
        snprintf(buf, n, x < 0 ? "-inf" : "inf");
        return;
    }
    const char *sign = signbit(x) ? "-" : "";
    double ax = fabs(x);
    if (ax == 0) {
        snprintf(buf, n, "%s0.0", sign);
        return;
    }
    /* Shortest round trip: digits d.ddd and the decimal exponent from %.*e. */
    char e[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, ax);
        if (strtod(e, NULL) == ax) break;
    }
    char digits[24];
    int nd = 0;
    const char *c = e;
    for (; *c && *c != 'e'; c++)
        if (*c != '.') digits[nd++] = *c;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    int exp10 = atoi(c + 1);

    if (exp10 < -4 || exp10 >= 16) {
        snprintf(buf, n, "%s%c%s%.*se%c%02d", sign, digits[0], nd > 1 ? "." : "", nd - 1, digits + 1,
                 exp10 < 0 ? '-' : '+', abs(exp10));
        return;
    }
    char out[64];
    int k = 0;
    int decpt = exp10 + 1; /* digits before the decimal point */
    if (decpt <= 0) {
        out[k++] = '0';
        out[k++] = '.';
        for (int i = 0; i < -decpt; i++) out[k++] = '0';
        for (int i = 0; i < nd; i++) out[k++] = digits[i];
    } else if (decpt >= nd) {
        for (int i = 0; i < nd; i++) out[k++] = digits[i];
        for (int i = nd; i < decpt; i++) out[k++] = '0';
        out[k++] = '.';
        out[k++] = '0';
    } else {
        for (int i = 0; i < decpt; i++) out[k++] = digits[i];
        out[k++] = '.';
        for (int i = decpt; i < nd; i++) out[k++] = digits[i];
    }
    out[k] = 0;
    snprintf(buf, n, "%s%s", sign, out);
}

static void str_repr(FILE *f, const char *s) {
    /* Python picks double quotes only when the text has a single quote and no double quote. */
    char q = strchr(s, '\'') && !strchr(s, '"') ? '"' : '\'';
    fputc(q, f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '\\' || *p == (unsigned char)q)
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p == '\r')
            fputs("\\r", f);
        else if (*p == '\t')
            fputs("\\t", f);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\x%02x", *p);
        else
            fputc(*p, f);
    }
    fputc(q, f);
}

/* The two notations the walker writes: Python's repr (the printer's lines, as Hugging Face prints
 * logs) and one-line JSON (the JSON-lines logger). They differ only in how strings, literals and
 * non-finite floats come out. */
typedef struct notation {
    void (*string)(FILE *f, const char *s);
    const char *true_text, *false_text, *none_text;
    bool nonfinite_as_none; /* JSON has no NaN or infinity */
} notation;

static void write_value(FILE *f, const json_t *v, const notation *n) {
    char buf[48];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        fputc('{', f);
        const char *key;
        const json_t *val;
        int i = 0;
        json_object_foreach((json_t *)v, key, val) {
            if (i++) fputs(", ", f);
            n->string(f, key);
            fputs(": ", f);
            write_value(f, val, n);
        }
        fputc('}', f);
        break;
    }
    case JSON_ARRAY: {
        fputc('[', f);
        size_t i;
        const json_t *val;
        json_array_foreach(v, i, val) {
            if (i) fputs(", ", f);
            write_value(f, val, n);
        }
        fputc(']', f);
        break;
    }
    case JSON_STRING: n->string(f, json_string_value(v)); break;
    case JSON_INTEGER: fprintf(f, "%" JSON_INTEGER_FORMAT, json_integer_value(v)); break;
    case JSON_REAL:
        if (n->nonfinite_as_none && !isfinite(json_real_value(v))) {
            fputs(n->none_text, f);
            break;
        }
        ct_py_float_repr(json_real_value(v), buf, sizeof buf);
        fputs(buf, f);
        break;
    case JSON_TRUE: fputs(n->true_text, f); break;
    case JSON_FALSE: fputs(n->false_text, f); break;
    case JSON_NULL: fputs(n->none_text, f); break;
    }
}

static void json_str(FILE *f, const char *s) {
    json_t *t = json_string(s);
    char *text = t ? json_dumps(t, JSON_ENCODE_ANY) : NULL;
    fputs(text ? text : "\"\"", f);
    free(text);
    json_decref(t);
}

static const notation PYTHON = {str_repr, "True", "False", "None", false};
static const notation JSON_LINE = {json_str, "true", "false", "null", true};

void ct_py_repr(FILE *f, const json_t *v) {
    if (!v) {
        fputs("None", f);
        return;
    }
    write_value(f, v, &PYTHON);
}

void ct_py_print_logs(FILE *f, const json_t *logs, bool round_epoch) {
    fputc('{', f);
    const char *key;
    const json_t *val;
    int i = 0;
    json_object_foreach((json_t *)logs, key, val) {
        if (strcmp(key, "total_flos") == 0) continue;
        if (i++) fputs(", ", f);
        str_repr(f, key);
        fputs(": ", f);
        if (round_epoch && strcmp(key, "epoch") == 0 && json_is_real(val)) {
            /* Python's round(x, 2): the decimal nearest to x's exact value, which %.2f also gives. */
            char r[64], buf[48];
            snprintf(r, sizeof r, "%.2f", json_real_value(val));
            ct_py_float_repr(strtod(r, NULL), buf, sizeof buf);
            fputs(buf, f);
        } else {
            ct_py_repr(f, val);
        }
    }
    fputs("}\n", f);
}

void ct_json_dump_line(FILE *f, const json_t *v) { write_value(f, v, &JSON_LINE); }
