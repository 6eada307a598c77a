/* TensorBoard event files (callbacks/tensorboard.h, core/format/crc32c.h):
 *  - CRC-32C against published vectors (RFC 3720 B.4, the "123456789" check value) and a bitwise
 *    reference on random data, split anywhere (extend);
 *  - the writer's files read back here, independently of the writer: the name, every record's
 *    framing (length, masked CRCs of length and data, nothing left over) and its Event decoded with
 *    protobuf-c's generated unpacker (file_version first, scalars as float32 at their steps and
 *    wall times, text as a DT_STRING [1] tensor of the text plugin, the HParams plugin's session
 *    start and end), on random tags, values and steps; records readable before close (flushed);
 *  - a corrupted byte is caught by the reader (the CRCs are real);
 *  - the callback without a Trainer: nothing off the world's process zero, HF's tags for every
 *    logged number and string, the args text equal to the arguments' JSON, errors naming the
 *    logging_dir; rewrite_logs and the default logging_dir's shape. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "callbacks/tensorboard.h"
#include "callbacks/tensorboard.pb-c.h"
#include "callbacks/tensorboard_hparams.pb-c.h"
#include "core/format/crc32c.h"
#include "testlib.h"

/* --- CRC-32C -------------------------------------------------------------------------------------- */

static uint32_t crc_bitwise(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
    }
    return ~c;
}

static void test_crc32c(ct_rng *rng) {
    CHECK(ct_crc32c("123456789", 9) == 0xE3069283u, "crc32c(123456789) = %08x", ct_crc32c("123456789", 9));
    CHECK(ct_crc32c("", 0) == 0, "crc32c of nothing");
    uint8_t b[32];
    memset(b, 0, sizeof b);
    CHECK(ct_crc32c(b, 32) == 0x8A9136AAu, "32 zero bytes: %08x", ct_crc32c(b, 32));
    memset(b, 0xFF, sizeof b);
    CHECK(ct_crc32c(b, 32) == 0x62A8AB43u, "32 0xFF bytes: %08x", ct_crc32c(b, 32));
    for (int i = 0; i < 32; i++) b[i] = (uint8_t)i;
    CHECK(ct_crc32c(b, 32) == 0x46DD794Eu, "32 incrementing bytes: %08x", ct_crc32c(b, 32));
    for (int i = 0; i < 32; i++) b[i] = (uint8_t)(31 - i);
    CHECK(ct_crc32c(b, 32) == 0x113FDB5Cu, "32 decrementing bytes: %08x", ct_crc32c(b, 32));
    /* RFC 3720 B.4: an iSCSI read command PDU. */
    static const uint8_t pdu[48] = {0x01, 0xc0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x14, 0, 0, 0, 0, 0, 0x04, 0,
                                    0, 0, 0, 0x14, 0, 0, 0, 0x18, 0x28, 0, 0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0, 0, 0, 0, 0};
    CHECK(ct_crc32c(pdu, 48) == 0xD9963A56u, "iSCSI PDU: %08x", ct_crc32c(pdu, 48));
    for (int t = 0; t < 20; t++) {
        uint8_t d[300];
        size_t n = (size_t)ct_rng_below(rng, sizeof d + 1), cut = (size_t)ct_rng_below(rng, n + 1);
        for (size_t i = 0; i < n; i++) d[i] = (uint8_t)ct_rng_u32(rng);
        uint32_t want = crc_bitwise(d, n);
        CHECK(ct_crc32c(d, n) == want, "random %zu bytes: %08x vs bitwise %08x", n, ct_crc32c(d, n), want);
        CHECK(ct_crc32c_extend(ct_crc32c(d, cut), d + cut, n - cut) == want, "extend at %zu of %zu", cut, n);
    }
    /* TFRecord's mask: a rotation right by 15 plus a constant, so it is undone exactly. */
    CHECK(ct_tfrecord_mask_crc(0) == 0xa282ead8u, "mask(0)");
    uint32_t c = ct_crc32c("123456789", 9), m = ct_tfrecord_mask_crc(c) - 0xa282ead8u;
    CHECK(((m << 15) | (m >> 17)) == c, "mask undone");
}

/* --- reading event files back --------------------------------------------------------------------- */

/* TFRecord's mask, restated here so the reader does not share the writer's code. */
static uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

typedef struct events {
    Tensorflow__Event *ev[64];
    int n;
    bool framing_ok;
} events;

static void events_free(events *e) {
    for (int i = 0; i < e->n; i++) tensorflow__event__free_unpacked(e->ev[i], NULL);
    e->n = 0;
}

static uint64_t get_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* Parses a whole file's bytes as TFRecords of Events; framing_ok false on any mismatch. */
static void parse_records(const uint8_t *data, size_t size, events *e) {
    e->n = 0;
    e->framing_ok = true;
    size_t at = 0;
    while (at < size) {
        if (size - at < 12 || e->n == 64) {
            e->framing_ok = false;
            return;
        }
        uint64_t len = get_le(data + at, 8);
        if ((uint32_t)get_le(data + at + 8, 4) != masked(crc_bitwise(data + at, 8)) ||
            len > size - at - 16) {
            e->framing_ok = false;
            return;
        }
        const uint8_t *body = data + at + 12;
        if ((uint32_t)get_le(body + len, 4) != masked(crc_bitwise(body, (size_t)len))) {
            e->framing_ok = false;
            return;
        }
        Tensorflow__Event *ev = tensorflow__event__unpack(NULL, (size_t)len, body);
        if (!ev) {
            e->framing_ok = false;
            return;
        }
        e->ev[e->n++] = ev;
        at += (size_t)len + 16;
    }
}

static uint8_t *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    uint8_t *buf = malloc(1 << 20);
    *size = buf ? fread(buf, 1, 1 << 20, f) : 0;
    fclose(f);
    return buf;
}

static void read_events(const char *path, events *e) {
    size_t size = 0;
    uint8_t *data = read_file(path, &size);
    CHECK(data != NULL, "cannot read %s", path);
    if (data) parse_records(data, size, e);
    free(data);
    CHECK(e->framing_ok, "%s: framing or decoding failed", path);
}

/* The single event file in dir (its path into out); the count of event files is returned. */
static int find_event_files(const char *dir, char *out, size_t n) {
    DIR *d = opendir(dir);
    int count = 0;
    if (!d) return 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strncmp(de->d_name, "events.out.tfevents.", 20) == 0) {
            count++;
            snprintf(out, n, "%s/%s", dir, de->d_name);
        }
    closedir(d);
    return count;
}

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    char p[1024];
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) remove_tree(p);
        else remove(p);
    }
    closedir(d);
    rmdir(dir);
}

static const Tensorflow__Summary__Value *single_value(const Tensorflow__Event *ev) {
    if (ev->what_case != TENSORFLOW__EVENT__WHAT_SUMMARY || ev->summary->n_value != 1) return NULL;
    return ev->summary->value[0];
}

/* A text summary: its tag and text, or false. */
static bool text_of(const Tensorflow__Event *ev, const char **tag, const char **text, size_t *len) {
    const Tensorflow__Summary__Value *v = single_value(ev);
    if (!v || v->value_case != TENSORFLOW__SUMMARY__VALUE__VALUE_TENSOR || !v->metadata || !v->metadata->plugin_data ||
        strcmp(v->metadata->plugin_data->plugin_name, "text") != 0)
        return false;
    const Tensorflow__TensorProto *t = v->tensor;
    if (t->dtype != TENSORFLOW__DATA_TYPE__DT_STRING || !t->tensor_shape || t->tensor_shape->n_dim != 1 ||
        t->tensor_shape->dim[0]->size != 1 || t->n_string_val != 1)
        return false;
    *tag = v->tag;
    *text = (const char *)t->string_val[0].data;
    *len = t->string_val[0].len;
    return true;
}

/* The HParams plugin data of an event (unpacked; free it), or NULL. */
static Tensorboard__Hparams__HParamsPluginData *hparams_of(const Tensorflow__Event *ev, const char *tag) {
    const Tensorflow__Summary__Value *v = single_value(ev);
    if (!v || strcmp(v->tag, tag) != 0 || !v->metadata || !v->metadata->plugin_data ||
        strcmp(v->metadata->plugin_data->plugin_name, "hparams") != 0)
        return NULL;
    const ProtobufCBinaryData *c = &v->metadata->plugin_data->content;
    return tensorboard__hparams__hparams_plugin_data__unpack(NULL, c->len, c->data);
}

/* --- the writer ----------------------------------------------------------------------------------- */

static void test_writer(ct_rng *rng) {
    char dir[] = "/tmp/ct_test_tensorboard_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
    char logdir[512];
    snprintf(logdir, sizeof logdir, "%s/a/b", dir); /* parents are created */
    ct_tb_writer *w = NULL;
    CHECK_OK(ct_tb_writer_open(logdir, &w));
    if (!w) return;
    /* The name: events.out.tfevents.<10 digits>.<host>.<pid>.<n> */
    const char *base = strrchr(ct_tb_writer_path(w), '/') + 1;
    char host[256] = "";
    gethostname(host, sizeof host);
    char want_tail[400];
    snprintf(want_tail, sizeof want_tail, ".%s.%ld.", host, (long)getpid());
    CHECK(strncmp(base, "events.out.tfevents.", 20) == 0 && strspn(base + 20, "0123456789") == 10 &&
              strncmp(base + 30, want_tail, strlen(want_tail)) == 0,
          "event file name %s", base);
    long long secs = atoll(base + 20);
    CHECK(llabs(secs - (long long)time(NULL)) <= 5, "time in the name %lld", secs);

    /* Random scalars, flushed: readable before close. */
    enum { NS = 12 };
    char tags[NS][32];
    double values[NS], walls[NS];
    int64_t steps[NS];
    for (int i = 0; i < NS; i++) {
        snprintf(tags[i], sizeof tags[i], "%s/m%d", i % 3 == 0 ? "eval" : "train", (int)ct_rng_below(rng, 1000));
        values[i] = (ct_rng_uniform(rng) - 0.5) * pow(10.0, (double)ct_rng_below(rng, 12) - 6.0);
        steps[i] = (int64_t)ct_rng_below(rng, 1u << 30) * (i == 5 ? 16 : 1); /* one beyond 32 bits */
        walls[i] = 1.7e9 + ct_rng_uniform(rng) * 1e8;
        CHECK_OK(ct_tb_writer_add_scalar(w, tags[i], values[i], steps[i], walls[i]));
    }
    CHECK_OK(ct_tb_writer_flush(w));
    events e = {0};
    read_events(ct_tb_writer_path(w), &e);
    CHECK(e.n == NS + 1, "before close: %d records, expected %d", e.n, NS + 1);
    events_free(&e);

    const char *text = "{\n  \"learning_rate\": 5e-05,\n  \"caf\xc3\xa9\": \"\xc3\xa9t\xc3\xa9\"\n}";
    CHECK_OK(ct_tb_writer_add_text(w, "args", text, 3, 1.5e9));
    json_t *hp = json_pack("{s:f,s:i,s:b,s:s,s:n,s:[i,i],s:{s:i}}", "learning_rate", 3e-4, "seed", 42, "fp16", 1,
                           "optim", "adamw_torch", "eval_steps", "report_to", 1, 2, "kw", "a", 1);
    CHECK_OK(ct_tb_writer_add_hparams(w, hp, 1.6e9));
    CHECK_OK(ct_tb_writer_add_session_end(w, true, 1.7e9));
    char path[4096];
    snprintf(path, sizeof path, "%s", ct_tb_writer_path(w));
    CHECK_OK(ct_tb_writer_close(w));

    read_events(path, &e);
    CHECK(e.n == NS + 4, "%d records, expected %d", e.n, NS + 4);
    if (e.n == NS + 4) {
        const Tensorflow__Event *v0 = e.ev[0];
        CHECK(v0->what_case == TENSORFLOW__EVENT__WHAT_FILE_VERSION && !strcmp(v0->file_version, "brain.Event:2"),
              "first event is file_version brain.Event:2");
        CHECK(fabs(v0->wall_time - ct_tb_wall_time()) < 60, "file_version wall_time %.3f", v0->wall_time);
        for (int i = 0; i < NS; i++) {
            const Tensorflow__Event *ev = e.ev[1 + i];
            const Tensorflow__Summary__Value *v = single_value(ev);
            CHECK(v && !strcmp(v->tag, tags[i]) && v->value_case == TENSORFLOW__SUMMARY__VALUE__VALUE_SIMPLE_VALUE &&
                      v->simple_value == (float)values[i] && !v->metadata,
                  "scalar %d: %s = %.9g", i, v ? v->tag : "?", v ? (double)v->simple_value : 0.0);
            CHECK(ev->step == steps[i] && ev->wall_time == walls[i], "scalar %d at step %lld, wall %.6f", i,
                  (long long)ev->step, ev->wall_time);
        }
        const char *tag, *got;
        size_t len;
        CHECK(text_of(e.ev[NS + 1], &tag, &got, &len) && !strcmp(tag, "args/text_summary") && len == strlen(text) &&
                  !memcmp(got, text, len) && e.ev[NS + 1]->step == 3,
              "text summary");
        Tensorboard__Hparams__HParamsPluginData *d = hparams_of(e.ev[NS + 2], "_hparams_/session_start_info");
        CHECK(d && d->version == 0 &&
                  d->data_case == TENSORBOARD__HPARAMS__HPARAMS_PLUGIN_DATA__DATA_SESSION_START_INFO,
              "session_start_info");
        if (d && d->data_case == TENSORBOARD__HPARAMS__HPARAMS_PLUGIN_DATA__DATA_SESSION_START_INFO) {
            const Tensorboard__Hparams__SessionStartInfo *s = d->session_start_info;
            CHECK(s->n_hparams == 6 && s->start_time_secs == 1.6e9, "%zu hparams (null left out)", s->n_hparams);
            int seen = 0;
            for (size_t i = 0; i < s->n_hparams; i++) {
                const char *k = s->hparams[i]->key;
                const Tensorboard__Hparams__Value *v = s->hparams[i]->value;
                if (!strcmp(k, "learning_rate"))
                    seen += v->kind_case == TENSORBOARD__HPARAMS__VALUE__KIND_NUMBER_VALUE && v->number_value == 3e-4;
                else if (!strcmp(k, "seed"))
                    seen += v->kind_case == TENSORBOARD__HPARAMS__VALUE__KIND_NUMBER_VALUE && v->number_value == 42;
                else if (!strcmp(k, "fp16"))
                    seen += v->kind_case == TENSORBOARD__HPARAMS__VALUE__KIND_BOOL_VALUE && v->bool_value;
                else if (!strcmp(k, "optim"))
                    seen += v->kind_case == TENSORBOARD__HPARAMS__VALUE__KIND_STRING_VALUE &&
                            !strcmp(v->string_value, "adamw_torch");
                else if (!strcmp(k, "report_to"))
                    seen += v->kind_case == TENSORBOARD__HPARAMS__VALUE__KIND_STRING_VALUE &&
                            !strcmp(v->string_value, "[1,2]");
                else if (!strcmp(k, "kw"))
                    seen += v->kind_case == TENSORBOARD__HPARAMS__VALUE__KIND_STRING_VALUE &&
                            !strcmp(v->string_value, "{\"a\":1}");
            }
            CHECK(seen == 6, "hparams values: %d of 6 right", seen);
        }
        if (d) tensorboard__hparams__hparams_plugin_data__free_unpacked(d, NULL);
        d = hparams_of(e.ev[NS + 3], "_hparams_/session_end_info");
        CHECK(d && d->data_case == TENSORBOARD__HPARAMS__HPARAMS_PLUGIN_DATA__DATA_SESSION_END_INFO &&
                  d->session_end_info->status == TENSORBOARD__HPARAMS__STATUS__STATUS_SUCCESS &&
                  d->session_end_info->end_time_secs == 1.7e9,
              "session_end_info");
        if (d) tensorboard__hparams__hparams_plugin_data__free_unpacked(d, NULL);
    }
    events_free(&e);
    json_decref(hp);

    /* Every single flipped byte anywhere in the file is caught by a CRC (or breaks the framing). */
    size_t size = 0;
    uint8_t *data = read_file(path, &size);
    int caught = 0, tries = 40;
    for (int t = 0; data && t < tries; t++) {
        size_t at = (size_t)ct_rng_below(rng, size);
        uint8_t old = data[at];
        data[at] ^= (uint8_t)(1u << ct_rng_below(rng, 8));
        parse_records(data, size, &e);
        caught += !e.framing_ok;
        events_free(&e);
        data[at] = old;
    }
    CHECK(caught == tries, "corrupted files caught: %d of %d", caught, tries);
    free(data);

    /* A second writer in the same directory gets a file of its own. */
    CHECK_OK(ct_tb_writer_open(logdir, &w));
    CHECK(w && strcmp(ct_tb_writer_path(w), path) != 0, "second file name differs");
    CHECK_OK(ct_tb_writer_close(w));

    /* Errors name the directory. */
    char blocked[600], under[700];
    snprintf(blocked, sizeof blocked, "%s/file", dir);
    FILE *f = fopen(blocked, "w");
    if (f) fclose(f);
    snprintf(under, sizeof under, "%s/logs", blocked);
    w = NULL;
    CHECK_ERR(ct_tb_writer_open(under, &w), CT_ERR_IO, "cannot use logging_dir", under);
    CHECK(w == NULL, "no writer on failure");
    CHECK_ERR(ct_tb_writer_open("", &w), CT_ERR_INVALID_ARG, "log directory");
    if (geteuid() != 0) { /* root writes anywhere */
        char ro[600];
        snprintf(ro, sizeof ro, "%s/readonly", dir);
        mkdir(ro, 0555);
        CHECK_ERR(ct_tb_writer_open(ro, &w), CT_ERR_IO, "cannot create the event file", ro);
    }
    remove_tree(dir);
}

/* --- the callback --------------------------------------------------------------------------------- */

static void test_callback(ct_rng *rng) {
    char dir[] = "/tmp/ct_test_tensorboard_cb_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
    ct_training_args args;
    ct_training_args_default(&args);
    snprintf(args.logging_dir, sizeof args.logging_dir, "%s/tb", dir);
    snprintf(args.output_dir, sizeof args.output_dir, "%s/out-caf\xc3\xa9\t\xe2\x98\x83\xf0\x9f\x98\x80", dir);
    ct_trainer_state st;
    CHECK_OK(ct_trainer_state_init(&st));
    ct_trainer_control c = {0};
    ct_callback_list l = {0};
    ct_callback *cb;
    CHECK_OK(ct_tensorboard_callback_create(&cb));
    CHECK(!strcmp(ct_callback_name(cb), "TensorBoardCallback"), "name");
    CHECK_OK(ct_callback_list_add(&l, cb));
    ct_callback_args a = {.args = &args, .state = &st, .control = &c};

    double loss = 0.5 + ct_rng_uniform(rng), acc = ct_rng_uniform(rng);
    json_t *logs = json_pack("{s:f,s:f,s:f,s:f,s:f,s:s,s:b,s:[i]}", "loss", loss, "learning_rate", 3e-4, "epoch", 0.25,
                             "eval_accuracy", acc, "test_loss", 1.25, "note", "hi", "flag", 1, "bad", 1);
    a.logs = logs;
    /* Another rank: nothing at all. */
    st.is_world_process_zero = false;
    CHECK_OK(ct_callbacks_fire(&l, CT_ON_TRAIN_BEGIN, &a));
    CHECK_OK(ct_callbacks_fire(&l, CT_ON_LOG, &a));
    struct stat sb;
    CHECK(stat(args.logging_dir, &sb) != 0, "no logging_dir off process zero");

    st.is_world_process_zero = true;
    st.global_step = (int64_t)ct_rng_below(rng, 1000) + 1;
    CHECK_OK(ct_callbacks_fire(&l, CT_ON_TRAIN_BEGIN, &a));
    CHECK_OK(ct_callbacks_fire(&l, CT_ON_LOG, &a));
    char path[1024];
    CHECK(find_event_files(args.logging_dir, path, sizeof path) == 1, "one event file in logging_dir");
    events e = {0};
    read_events(path, &e); /* before train end: flushed at each log */
    /* file_version, args text, hparams, then 7 values (the list is dropped with a warning). */
    CHECK(e.n == 3 + 7, "%d records after one log", e.n);
    if (e.n == 10) {
        const char *tag, *text;
        size_t len;
        CHECK(text_of(e.ev[1], &tag, &text, &len) && !strcmp(tag, "args/text_summary"), "args text first");
        if (text_of(e.ev[1], &tag, &text, &len)) {
            char *copy = strndup(text, len); /* protobuf bytes end without a NUL */
            json_error_t err;
            json_t *parsed = json_loadb(text, len, 0, &err), *want = NULL;
            CHECK_OK(ct_training_args_to_json(&args, &want));
            CHECK(parsed && want && json_equal(parsed, want), "the args text is the arguments' JSON: %.200s", copy);
            CHECK(copy && !strncmp(copy, "{\n  \"", 5), "indented as json.dumps(indent=2): %.20s", copy ? copy : "");
            /* json.dumps' ensure_ascii: the output_dir's tab, e-acute, snowman and emoji */
            const char *od = copy ? strstr(copy, "\"output_dir\": \"") : NULL;
            CHECK(od && strstr(od, "/out-caf\\u00e9\\t\\u2603\\ud83d\\ude00\",\n"),
                  "output_dir escaped as Python does: %.300s", od ? od : "(none)");
            free(copy);
            json_decref(parsed);
            json_decref(want);
        }
        Tensorboard__Hparams__HParamsPluginData *d = hparams_of(e.ev[2], "_hparams_/session_start_info");
        CHECK(d != NULL, "hparams after the args");
        if (d) tensorboard__hparams__hparams_plugin_data__free_unpacked(d, NULL);
        const char *want_tags[] = {"train/loss", "train/learning_rate", "train/epoch", "eval/accuracy", "test/loss",
                                   "train/note/text_summary", "train/flag"};
        const double want_vals[] = {loss, 3e-4, 0.25, acc, 1.25, 0, 1};
        for (int i = 0; i < 7; i++) {
            const Tensorflow__Summary__Value *v = single_value(e.ev[3 + i]);
            CHECK(v && !strcmp(v->tag, want_tags[i]) && e.ev[3 + i]->step == st.global_step, "value %d: %s", i,
                  v ? v->tag : "?");
            if (i == 5)
                CHECK(text_of(e.ev[3 + i], &tag, &text, &len) && len == 2 && !memcmp(text, "hi", 2), "string as text");
            else
                CHECK(v && v->value_case == TENSORFLOW__SUMMARY__VALUE__VALUE_SIMPLE_VALUE &&
                          v->simple_value == (float)want_vals[i],
                      "value %d = %.9g", i, v ? (double)v->simple_value : 0.0);
        }
    }
    events_free(&e);
    CHECK_OK(ct_callbacks_fire(&l, CT_ON_TRAIN_END, &a));
    read_events(path, &e);
    CHECK(e.n == 11, "session end written at train end (%d records)", e.n);
    Tensorboard__Hparams__HParamsPluginData *d = e.n == 11 ? hparams_of(e.ev[10], "_hparams_/session_end_info") : NULL;
    CHECK(d != NULL, "session_end_info last");
    if (d) tensorboard__hparams__hparams_plugin_data__free_unpacked(d, NULL);
    events_free(&e);
    /* A log after training (the final evaluation) opens a second file in the same directory. */
    CHECK_OK(ct_callbacks_fire(&l, CT_ON_LOG, &a));
    CHECK(find_event_files(args.logging_dir, path, sizeof path) == 2, "a second event file after train end");
    ct_callback_list_free(&l);

    /* Unset logging_dir: output_dir/runs/<Mon>DD_HH-MM-SS_<host>, as Hugging Face. */
    args.logging_dir[0] = '\0';
    CHECK_OK(ct_tensorboard_callback_create(&cb));
    CHECK_OK(ct_callback_list_add(&l, cb));
    CHECK_OK(ct_callbacks_fire(&l, CT_ON_TRAIN_BEGIN, &a));
    CHECK_OK(ct_callbacks_fire(&l, CT_ON_TRAIN_END, &a));
    CHECK_OK(ct_callbacks_fire(&l, CT_ON_LOG, &a)); /* same directory again, not a new timestamp */
    ct_callback_list_free(&l);
    char runs[1024];
    snprintf(runs, sizeof runs, "%s/runs", args.output_dir);
    DIR *rd = opendir(runs);
    int nruns = 0;
    char sub[1024] = "";
    struct dirent *de;
    while (rd && (de = readdir(rd)))
        if (de->d_name[0] != '.') {
            nruns++;
            snprintf(sub, sizeof sub, "%s/%s", runs, de->d_name);
        }
    if (rd) closedir(rd);
    CHECK(nruns == 1 && find_event_files(sub, path, sizeof path) == 2, "one default run directory, two files: %d %s",
          nruns, sub);

    /* An unusable logging_dir: the error names the callback, the event and the directory. */
    char blocked[600];
    snprintf(blocked, sizeof blocked, "%s/file", dir);
    FILE *f = fopen(blocked, "w");
    if (f) fclose(f);
    snprintf(args.logging_dir, sizeof args.logging_dir, "%s/tb", blocked);
    CHECK_OK(ct_tensorboard_callback_create(&cb));
    CHECK_OK(ct_callback_list_add(&l, cb));
    CHECK_ERR(ct_callbacks_fire(&l, CT_ON_TRAIN_BEGIN, &a), CT_ERR_IO, "TensorBoardCallback", "on_train_begin",
              args.logging_dir);
    ct_callback_list_free(&l);

    json_decref(logs);
    ct_trainer_state_free(&st);
    ct_training_args_free(&args);
    remove_tree(dir);
}

static void test_helpers(void) {
    char out[64];
    const char *cases[][2] = {{"eval_loss", "eval/loss"}, {"eval_small_accuracy", "eval/small_accuracy"},
                              {"test_top_3_accuracy", "test/top_3_accuracy"}, {"loss", "train/loss"},
                              {"train_runtime", "train/train_runtime"}, {"evaluation", "train/evaluation"},
                              {"eval", "train/eval"}, {"testing_x", "train/testing_x"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ct_tb_rewrite_key(cases[i][0], out, sizeof out);
        CHECK(!strcmp(out, cases[i][1]), "rewrite %s -> %s, expected %s", cases[i][0], out, cases[i][1]);
    }
    char dir[1024], host[256] = "";
    gethostname(host, sizeof host);
    CHECK_OK(ct_tb_default_logdir("out/put", dir, sizeof dir));
    /* out/put/runs/Jan05_14-03-22_host */
    const char *s = dir + strlen("out/put/runs/");
    static const char *months = "JanFebMarAprMayJunJulAugSepOctNovDec";
    bool month = strlen(s) > 3 && strstr(months, (char[4]){s[0], s[1], s[2], 0}) != NULL;
    bool shape = !strncmp(dir, "out/put/runs/", 13) && month && isdigit((unsigned char)s[3]) &&
                 isdigit((unsigned char)s[4]) && s[5] == '_' && s[8] == '-' && s[11] == '-' && s[14] == '_' &&
                 !strcmp(s + 15, host);
    CHECK(shape, "default logging_dir %s", dir);
}

int main(void) {
    ct_test_begin("tensorboard");
    ct_rng rng;
    ct_rng_init(&rng, ct_test_seed, 0, 0);
    test_crc32c(&rng);
    test_writer(&rng);
    test_callback(&rng);
    test_helpers();
    return ct_test_finish();
}
