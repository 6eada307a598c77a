/* TensorBoard event files and Hugging Face's TensorBoardCallback (see tensorboard.h).
 *
 * The writer packs each tensorflow.Event with protobuf-c's generated code (never by hand), frames
 * it as a TFRecord with CRC-32C (core/format/crc32c.h) and appends it to the file, reusing one buffer.
 * The callback turns the Trainer's events into records as Hugging Face's TensorBoardCallback does
 * through PyTorch's SummaryWriter, so a run of ctrainer and one of transformers look alike in
 * TensorBoard (same tags, same steps, same text summaries). Built with protobuf-c only
 * (CTRAINER_TENSORBOARD, cmake/CtrainerTensorboard.cmake; tensorboard_off.c stands in without it);
 * the helpers that need no protobuf-c are in tensorboard_util.c. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "callbacks/pyrepr.h"
#include "callbacks/tensorboard.h"
#include "callbacks/tensorboard.pb-c.h"
#include "callbacks/tensorboard_hparams.pb-c.h"
#include "core/format/crc32c.h"
#include "core/fs.h"
#include "core/log.h"
#include "core/util.h"

/* --- the writer ----------------------------------------------------------------------------------- */

struct ct_tb_writer {
    FILE *f;
    char path[4096];
    uint8_t *buf; /* a record being framed: header, event, footer */
    size_t cap;
};

/* The files this process opened: the last part of their names, as TensorBoard's _global_uid. */
static atomic_int files_opened;

const char *ct_tb_protobuf_c_version(void) { return protobuf_c_version(); }

static void put_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void hostname(char *out, size_t n) {
    if (gethostname(out, n) != 0 || !out[0]) snprintf(out, n, "localhost");
    out[n - 1] = '\0';
}

/* One record: length, its masked CRC, the packed event, its masked CRC. */
static ct_status write_event(ct_tb_writer *w, const Tensorflow__Event *ev) {
    size_t len = tensorflow__event__get_packed_size(ev);
    size_t need = len + CT_TFRECORD_OVERHEAD;
    if (need > w->cap) {
        uint8_t *b = realloc(w->buf, need);
        if (!b) return ct_error(CT_ERR_NOMEM, "TensorBoard: out of memory for a record of %zu bytes", len);
        w->buf = b;
        w->cap = need;
    }
    uint8_t *p = w->buf;
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)((uint64_t)len >> (8 * i));
    put_le32(p + 8, ct_tfrecord_mask_crc(ct_crc32c(p, 8)));
    size_t packed = tensorflow__event__pack(ev, p + 12);
    CT_ASSERT(packed == len);
    put_le32(p + 12 + len, ct_tfrecord_mask_crc(ct_crc32c(p + 12, len)));
    if (fwrite(p, 1, need, w->f) != need)
        return ct_error(CT_ERR_IO, "TensorBoard: %s: cannot write: %s", w->path, strerror(errno));
    return CT_OK;
}

/* An Event holding a Summary with one value. */
static ct_status write_value(ct_tb_writer *w, Tensorflow__Summary__Value *v, int64_t step, double wall_time) {
    Tensorflow__Summary summary = TENSORFLOW__SUMMARY__INIT;
    Tensorflow__Summary__Value *values[1] = {v};
    summary.n_value = 1;
    summary.value = values;
    Tensorflow__Event ev = TENSORFLOW__EVENT__INIT;
    ev.wall_time = wall_time;
    ev.step = step;
    ev.what_case = TENSORFLOW__EVENT__WHAT_SUMMARY;
    ev.summary = &summary;
    return write_event(w, &ev);
}

ct_status ct_tb_writer_open(const char *logdir, ct_tb_writer **out) {
    *out = NULL;
    if (!logdir || !logdir[0]) return ct_error(CT_ERR_INVALID_ARG, "TensorBoard: the log directory must not be empty");
    ct_status s = ct_make_dirs(logdir);
    if (s != CT_OK) return ct_error_prefix(s, "TensorBoard: cannot use logging_dir '%s': ", logdir);
    ct_tb_writer *w = calloc(1, sizeof *w);
    if (!w) return ct_error(CT_ERR_NOMEM, "TensorBoard: out of memory");
    char host[256];
    hostname(host, sizeof host);
    int n = snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%010lld.%s.%ld.%d", logdir,
                     (long long)time(NULL), host, (long)getpid(), atomic_fetch_add(&files_opened, 1));
    if (n < 0 || (size_t)n >= sizeof w->path) {
        free(w);
        return ct_error(CT_ERR_INVALID_ARG, "TensorBoard: the logging_dir '%s' is too long", logdir);
    }
    w->f = fopen(w->path, "wb");
    if (!w->f) {
        s = ct_error(CT_ERR_IO, "TensorBoard: cannot create the event file '%s' in logging_dir '%s': %s", w->path,
                     logdir, strerror(errno));
        free(w);
        return s;
    }
    Tensorflow__Event ev = TENSORFLOW__EVENT__INIT;
    ev.wall_time = ct_tb_wall_time();
    ev.what_case = TENSORFLOW__EVENT__WHAT_FILE_VERSION;
    ev.file_version = "brain.Event:2";
    s = write_event(w, &ev);
    if (s == CT_OK) s = ct_tb_writer_flush(w);
    if (s != CT_OK) {
        ct_tb_writer_close(w);
        return s;
    }
    *out = w;
    return CT_OK;
}

const char *ct_tb_writer_path(const ct_tb_writer *w) { return w->path; }

ct_status ct_tb_writer_add_scalar(ct_tb_writer *w, const char *tag, double value, int64_t step, double wall_time) {
    Tensorflow__Summary__Value v = TENSORFLOW__SUMMARY__VALUE__INIT;
    v.tag = (char *)tag;
    v.value_case = TENSORFLOW__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
    v.simple_value = (float)value;
    return write_value(w, &v, step, wall_time);
}

/* A summary whose metadata names `plugin` (with `content`) and whose value is `tensor`. */
static ct_status write_plugin_tensor(ct_tb_writer *w, const char *tag, const char *plugin, ProtobufCBinaryData content,
                                     Tensorflow__TensorProto *tensor, int64_t step, double wall_time) {
    Tensorflow__SummaryMetadata__PluginData pd = TENSORFLOW__SUMMARY_METADATA__PLUGIN_DATA__INIT;
    pd.plugin_name = (char *)plugin;
    pd.content = content;
    Tensorflow__SummaryMetadata md = TENSORFLOW__SUMMARY_METADATA__INIT;
    md.plugin_data = &pd;
    Tensorflow__Summary__Value v = TENSORFLOW__SUMMARY__VALUE__INIT;
    v.tag = (char *)tag;
    v.metadata = &md;
    v.value_case = TENSORFLOW__SUMMARY__VALUE__VALUE_TENSOR;
    v.tensor = tensor;
    return write_value(w, &v, step, wall_time);
}

ct_status ct_tb_writer_add_text(ct_tb_writer *w, const char *tag, const char *text, int64_t step, double wall_time) {
    char full[1024];
    if (snprintf(full, sizeof full, "%s/text_summary", tag) >= (int)sizeof full)
        return ct_error(CT_ERR_INVALID_ARG, "TensorBoard: the tag '%.64s...' is too long", tag);
    /* PyTorch's summary.text(): a DT_STRING tensor of shape [1]; TextPluginData(version=0) packs to
     * nothing, so the plugin content is empty. */
    Tensorflow__TensorShapeProto__Dim dim = TENSORFLOW__TENSOR_SHAPE_PROTO__DIM__INIT;
    dim.size = 1;
    Tensorflow__TensorShapeProto__Dim *dims[1] = {&dim};
    Tensorflow__TensorShapeProto shape = TENSORFLOW__TENSOR_SHAPE_PROTO__INIT;
    shape.n_dim = 1;
    shape.dim = dims;
    ProtobufCBinaryData str = {.len = strlen(text), .data = (uint8_t *)text};
    Tensorflow__TensorProto tensor = TENSORFLOW__TENSOR_PROTO__INIT;
    tensor.dtype = TENSORFLOW__DATA_TYPE__DT_STRING;
    tensor.tensor_shape = &shape;
    tensor.n_string_val = 1;
    tensor.string_val = &str;
    return write_plugin_tensor(w, full, "text", (ProtobufCBinaryData){0, NULL}, &tensor, step, wall_time);
}

/* HParamsPluginData packed into a fresh buffer (*out, to free), for a plugin content. */
static ct_status pack_hparams(const Tensorboard__Hparams__HParamsPluginData *d, ProtobufCBinaryData *out) {
    out->len = tensorboard__hparams__hparams_plugin_data__get_packed_size(d);
    out->data = malloc(out->len ? out->len : 1);
    if (!out->data) return ct_error(CT_ERR_NOMEM, "TensorBoard: out of memory");
    tensorboard__hparams__hparams_plugin_data__pack(d, out->data);
    return CT_OK;
}

/* The hparams plugin's summaries carry their data in the metadata; the tensor is an empty float
 * tensor of shape [0], as TensorBoard's own writer (metadata.NULL_TENSOR) makes it. */
static ct_status write_hparams_summary(ct_tb_writer *w, const char *tag,
                                       const Tensorboard__Hparams__HParamsPluginData *d, double wall_time) {
    ProtobufCBinaryData content;
    CT_TRY(pack_hparams(d, &content));
    Tensorflow__TensorShapeProto__Dim dim = TENSORFLOW__TENSOR_SHAPE_PROTO__DIM__INIT;
    Tensorflow__TensorShapeProto__Dim *dims[1] = {&dim};
    Tensorflow__TensorShapeProto shape = TENSORFLOW__TENSOR_SHAPE_PROTO__INIT;
    shape.n_dim = 1;
    shape.dim = dims;
    Tensorflow__TensorProto tensor = TENSORFLOW__TENSOR_PROTO__INIT;
    tensor.dtype = TENSORFLOW__DATA_TYPE__DT_FLOAT;
    tensor.tensor_shape = &shape;
    ct_status s = write_plugin_tensor(w, tag, "hparams", content, &tensor, 0, wall_time);
    free(content.data);
    return s;
}

ct_status ct_tb_writer_add_hparams(ct_tb_writer *w, const json_t *hparams, double wall_time) {
    if (!json_is_object(hparams)) return ct_error(CT_ERR_INVALID_ARG, "TensorBoard: hparams must be a JSON object");
    size_t cap = json_object_size(hparams);
    Tensorboard__Hparams__SessionStartInfo__HparamsEntry *entries = calloc(cap ? cap : 1, sizeof *entries);
    Tensorboard__Hparams__SessionStartInfo__HparamsEntry **ptrs = calloc(cap ? cap : 1, sizeof *ptrs);
    Tensorboard__Hparams__Value *values = calloc(cap ? cap : 1, sizeof *values);
    char **texts = calloc(cap ? cap : 1, sizeof *texts); /* JSON text of lists and objects */
    ct_status s = entries && ptrs && values && texts ? CT_OK : ct_error(CT_ERR_NOMEM, "TensorBoard: out of memory");
    size_t n = 0;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)hparams, key, v) {
        if (s != CT_OK) break;
        if (json_is_null(v)) continue;
        Tensorboard__Hparams__Value *hv = &values[n];
        tensorboard__hparams__value__init(hv);
        if (json_is_number(v)) {
            hv->kind_case = TENSORBOARD__HPARAMS__VALUE__KIND_NUMBER_VALUE;
            hv->number_value = json_number_value(v);
        } else if (json_is_boolean(v)) {
            hv->kind_case = TENSORBOARD__HPARAMS__VALUE__KIND_BOOL_VALUE;
            hv->bool_value = json_is_true(v);
        } else if (json_is_string(v)) {
            hv->kind_case = TENSORBOARD__HPARAMS__VALUE__KIND_STRING_VALUE;
            hv->string_value = (char *)json_string_value(v);
        } else {
            texts[n] = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
            if (!texts[n]) {
                s = ct_error(CT_ERR_NOMEM, "TensorBoard: out of memory");
                break;
            }
            hv->kind_case = TENSORBOARD__HPARAMS__VALUE__KIND_STRING_VALUE;
            hv->string_value = texts[n];
        }
        tensorboard__hparams__session_start_info__hparams_entry__init(&entries[n]);
        entries[n].key = (char *)key;
        entries[n].value = hv;
        ptrs[n] = &entries[n];
        n++;
    }
    if (s == CT_OK) {
        Tensorboard__Hparams__SessionStartInfo start = TENSORBOARD__HPARAMS__SESSION_START_INFO__INIT;
        start.n_hparams = n;
        start.hparams = ptrs;
        start.start_time_secs = wall_time;
        Tensorboard__Hparams__HParamsPluginData d = TENSORBOARD__HPARAMS__HPARAMS_PLUGIN_DATA__INIT;
        d.data_case = TENSORBOARD__HPARAMS__HPARAMS_PLUGIN_DATA__DATA_SESSION_START_INFO;
        d.session_start_info = &start;
        s = write_hparams_summary(w, "_hparams_/session_start_info", &d, wall_time);
    }
    if (texts)
        for (size_t i = 0; i < cap; i++) free(texts[i]);
    free(texts);
    free(values);
    free(ptrs);
    free(entries);
    return s;
}

ct_status ct_tb_writer_add_session_end(ct_tb_writer *w, bool success, double wall_time) {
    Tensorboard__Hparams__SessionEndInfo end = TENSORBOARD__HPARAMS__SESSION_END_INFO__INIT;
    end.status = success ? TENSORBOARD__HPARAMS__STATUS__STATUS_SUCCESS : TENSORBOARD__HPARAMS__STATUS__STATUS_FAILURE;
    end.end_time_secs = wall_time;
    Tensorboard__Hparams__HParamsPluginData d = TENSORBOARD__HPARAMS__HPARAMS_PLUGIN_DATA__INIT;
    d.data_case = TENSORBOARD__HPARAMS__HPARAMS_PLUGIN_DATA__DATA_SESSION_END_INFO;
    d.session_end_info = &end;
    return write_hparams_summary(w, "_hparams_/session_end_info", &d, wall_time);
}

ct_status ct_tb_writer_flush(ct_tb_writer *w) {
    if (fflush(w->f) != 0 || ferror(w->f))
        return ct_error(CT_ERR_IO, "TensorBoard: %s: cannot write: %s", w->path, strerror(errno));
    return CT_OK;
}

ct_status ct_tb_writer_close(ct_tb_writer *w) {
    if (!w) return CT_OK;
    ct_status s = CT_OK;
    if (w->f) {
        bool bad = fflush(w->f) != 0 || ferror(w->f);
        int e = errno;
        if (fclose(w->f) != 0 && !bad) {
            bad = true;
            e = errno;
        }
        if (bad) s = ct_error(CT_ERR_IO, "TensorBoard: %s: cannot write: %s", w->path, strerror(e));
    }
    free(w->buf);
    free(w);
    return s;
}

/* --- Hugging Face's helpers ----------------------------------------------------------------------- */

ct_status ct_tb_default_logdir(const char *output_dir, char *out, size_t n) {
    time_t now = time(NULL);
    struct tm tm;
    char stamp[64], host[256];
    if (!localtime_r(&now, &tm) || strftime(stamp, sizeof stamp, "%b%d_%H-%M-%S", &tm) == 0)
        return ct_error(CT_ERR_INVALID_ARG, "TensorBoard: cannot format the local time");
    hostname(host, sizeof host);
    int k = snprintf(out, n, "%s/runs/%s_%s", output_dir[0] ? output_dir : ".", stamp, host);
    if (k < 0 || (size_t)k >= n)
        return ct_error(CT_ERR_INVALID_ARG, "TensorBoard: output_dir '%s' is too long", output_dir);
    return CT_OK;
}

static int cmp_keys(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* A JSON string as Python's json.dumps (ensure_ascii) writes it: the short escapes for quote,
 * backslash, \n, \r, \t, \b and \f, every other control character and every non-ASCII code point
 * as lowercase \uXXXX (a surrogate pair above U+FFFF). jansson's strings are valid UTF-8. */
static void py_dump_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        unsigned c = *p;
        int extra = c < 0x80 ? 0 : c < 0xE0 ? 1 : c < 0xF0 ? 2 : 3;
        if (extra) c &= 0x3Fu >> extra;
        p++;
        for (int k = 0; k < extra && *p; k++) c = (c << 6) | (*p++ & 0x3Fu);
        const char *esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                        : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
        if (esc) fputs(esc, f);
        else if (c >= 0x20 && c < 0x7F) fputc((int)c, f);
        else if (c < 0x10000) fprintf(f, "\\u%04x", c);
        else fprintf(f, "\\u%04x\\u%04x", 0xD800 + ((c - 0x10000) >> 10), 0xDC00 + ((c - 0x10000) & 0x3FF));
    }
    fputc('"', f);
}

/* json.dumps(v, indent=2, sort_keys=sort) as Python writes it: Python's float repr, "," at line
 * ends and ": " after keys, "{}" and "[]" for empty containers, non-ASCII escaped. False when out
 * of memory. */
static bool py_dump_indent(FILE *f, const json_t *v, int depth, bool sort) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        size_t n = json_object_size(v);
        if (!n) return fputs("{}", f) >= 0;
        const char **keys = malloc(n * sizeof *keys);
        if (!keys) return false;
        size_t i = 0;
        const char *key;
        json_t *item;
        json_object_foreach((json_t *)v, key, item) keys[i++] = key;
        if (sort) qsort(keys, n, sizeof *keys, cmp_keys); /* UTF-8 byte order is code-point order, Python's */
        bool ok = true;
        fputs("{", f);
        for (i = 0; i < n && ok; i++) {
            fprintf(f, "%s\n%*s", i ? "," : "", 2 * (depth + 1), "");
            py_dump_string(f, keys[i]);
            fputs(": ", f);
            ok = py_dump_indent(f, json_object_get(v, keys[i]), depth + 1, sort);
        }
        fprintf(f, "\n%*s}", 2 * depth, "");
        free(keys);
        return ok;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(v);
        if (!n) return fputs("[]", f) >= 0;
        bool ok = true;
        fputs("[", f);
        for (size_t i = 0; i < n && ok; i++) {
            fprintf(f, "%s\n%*s", i ? "," : "", 2 * (depth + 1), "");
            ok = py_dump_indent(f, json_array_get(v, i), depth + 1, sort);
        }
        fprintf(f, "\n%*s]", 2 * depth, "");
        return ok;
    }
    case JSON_STRING:
        py_dump_string(f, json_string_value(v));
        return true;
    case JSON_REAL: {
        char buf[32];
        ct_py_float_repr(json_real_value(v), buf, sizeof buf);
        fputs(buf, f);
        return true;
    }
    case JSON_INTEGER:
        fprintf(f, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return true;
    case JSON_TRUE:
        fputs("true", f);
        return true;
    case JSON_FALSE:
        fputs("false", f);
        return true;
    default:
        fputs("null", f);
        return true;
    }
}

/* That text in a new string (NULL when out of memory). */
static char *py_json_text(const json_t *v, bool sort, bool newline) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    bool ok = py_dump_indent(f, v, 0, sort);
    if (newline) fputc('\n', f);
    if (fclose(f) != 0 || !ok) {
        free(text);
        return NULL;
    }
    return text;
}

/* --- the callback --------------------------------------------------------------------------------- */

typedef struct tb_cb {
    ct_callback base;
    ct_tb_writer *w;
    char logdir[4096];      /* where the file is (or was last) */
    char default_dir[4096]; /* the default logging_dir, once resolved ("" before) */
    char default_for[4096]; /* the output_dir it was resolved for */
} tb_cb;

/* Opens a new event file in logging_dir. Unset, it is Hugging Face's default under output_dir,
 * resolved once (HF resolves it when the arguments are made): the logs after training (the final
 * evaluation) then go to a second file in the same directory, as with HF, whose writer is closed
 * at train end and reopened by the next log. Only a change of output_dir resolves it anew. */
static ct_status open_writer(tb_cb *c, const ct_training_args *args) {
    if (c->w) return CT_OK;
    const char *dir = args->logging_dir;
    if (!dir[0]) {
        if (!c->default_dir[0] || strcmp(c->default_for, args->output_dir) != 0) {
            CT_TRY(ct_tb_default_logdir(args->output_dir, c->default_dir, sizeof c->default_dir));
            snprintf(c->default_for, sizeof c->default_for, "%s", args->output_dir);
        }
        dir = c->default_dir;
    }
    snprintf(c->logdir, sizeof c->logdir, "%s", dir);
    CT_TRY(ct_tb_writer_open(c->logdir, &c->w));
    ct_log_info("TensorBoard: writing %s", ct_tb_writer_path(c->w));
    return CT_OK;
}

/* The resolved training arguments with the directory actually used as logging_dir, as Hugging
 * Face's to_json_string shows the one __post_init__ resolved. */
static ct_status args_json(const tb_cb *c, const ct_training_args *args, json_t **out) {
    CT_TRY(ct_training_args_to_json(args, out));
    if (json_object_get(*out, "logging_dir") && json_object_set_new(*out, "logging_dir", json_string(c->logdir)) != 0) {
        json_decref(*out);
        *out = NULL;
        return ct_error(CT_ERR_NOMEM, "TensorBoard: out of memory");
    }
    return CT_OK;
}

static ct_status add_json_text(ct_tb_writer *w, const char *tag, const json_t *v, bool sort, bool newline, double now) {
    char *text = py_json_text(v, sort, newline);
    if (!text) return ct_error(CT_ERR_NOMEM, "TensorBoard: out of memory");
    ct_status s = ct_tb_writer_add_text(w, tag, text, 0, now);
    free(text);
    return s;
}

/* HF: add_text("args", args.to_json_string()) (json.dumps(indent=2)) and, when the model has a
 * config, add_text("model_config", config.to_json_string()) (indent=2, sorted keys, a final
 * newline), both at step 0. Then the HParams plugin's session start with the same arguments. */
static ct_status tb_train_begin(ct_callback *cb, const ct_callback_args *a) {
    tb_cb *c = ct_container_of(cb, tb_cb, base);
    if (!a->state->is_world_process_zero) return CT_OK;
    CT_TRY(open_writer(c, a->args));
    double now = ct_tb_wall_time();
    json_t *args;
    CT_TRY(args_json(c, a->args, &args));
    ct_status s = add_json_text(c->w, "args", args, false, false, now);
    const json_t *model = a->config ? json_object_get(a->config, "model") : NULL;
    if (s == CT_OK && model) s = add_json_text(c->w, "model_config", model, true, true, now);
    if (s == CT_OK) s = ct_tb_writer_add_hparams(c->w, args, now);
    json_decref(args);
    CT_TRY(s);
    return ct_tb_writer_flush(c->w);
}

/* HF's on_log: rewrite_logs, then numbers as scalars and strings as text at the global step;
 * anything else is dropped with HF's warning. Flushed at once. */
static ct_status tb_log(ct_callback *cb, const ct_callback_args *a) {
    tb_cb *c = ct_container_of(cb, tb_cb, base);
    if (!a->state->is_world_process_zero || !a->logs) return CT_OK;
    if (!json_is_object(a->logs)) return ct_error(CT_ERR_INVALID_ARG, "TensorBoard: logs must be a JSON object");
    CT_TRY(open_writer(c, a->args));
    double now = ct_tb_wall_time();
    int64_t step = a->state->global_step;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)a->logs, key, v) {
        char tag[512];
        ct_tb_rewrite_key(key, tag, sizeof tag);
        if (json_is_number(v)) {
            CT_TRY(ct_tb_writer_add_scalar(c->w, tag, json_number_value(v), step, now));
        } else if (json_is_boolean(v)) { /* Python's bools are ints: HF logs them as 0 / 1 */
            CT_TRY(ct_tb_writer_add_scalar(c->w, tag, json_is_true(v) ? 1.0 : 0.0, step, now));
        } else if (json_is_string(v)) {
            CT_TRY(ct_tb_writer_add_text(c->w, tag, json_string_value(v), step, now));
        } else {
            char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
            ct_log_warning("Trainer is attempting to log a value of \"%s\" for key \"%s\" as a scalar. This invocation "
                           "of Tensorboard's writer.add_scalar() is incorrect so we dropped this attribute.",
                           text ? text : "?", tag);
            free(text);
        }
    }
    return ct_tb_writer_flush(c->w);
}

static ct_status tb_train_end(ct_callback *cb, const ct_callback_args *a) {
    tb_cb *c = ct_container_of(cb, tb_cb, base);
    if (!c->w) return CT_OK;
    ct_status s = ct_tb_writer_add_session_end(c->w, true, ct_tb_wall_time());
    ct_status s2 = ct_tb_writer_close(c->w);
    c->w = NULL;
    return s != CT_OK ? s : s2;
}

static void tb_destroy(ct_callback *cb) {
    tb_cb *c = ct_container_of(cb, tb_cb, base);
    ct_tb_writer_close(c->w);
    free(c);
}

static const ct_callback_ops tb_ops = {
    .size = sizeof(ct_callback_ops),
    .name = CT_TENSORBOARD_CALLBACK_NAME,
    .on_train_begin = tb_train_begin,
    .on_log = tb_log,
    .on_train_end = tb_train_end,
    .destroy = tb_destroy,
};

ct_status ct_tensorboard_callback_create(ct_callback **out) {
    tb_cb *c = calloc(1, sizeof *c);
    if (!c) return ct_error(CT_ERR_NOMEM, "TensorBoardCallback: out of memory");
    c->base.ops = &tb_ops;
    *out = &c->base;
    return CT_OK;
}
