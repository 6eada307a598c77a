/* Run configs (see run_config.h): loading, --set overrides, and turning JSON paths back into file
 * positions.
 *
 * jansson forgets where values were once it has parsed them, so the loader keeps the text and a
 * small scanner walks it again on demand: it follows objects, arrays, strings (with escapes),
 * numbers and literals just far enough to find the value a path names, counting lines and
 * characters (UTF-8 aware, like jansson's own columns). That costs nothing until an error is to be
 * reported, and it keeps every reader of the config free of position bookkeeping: they only name
 * the path of what they complain about, and ct_run_config_annotate adds "file:line:column".
 *
 * Why one long file: the loader, the --set override parser and the position scanner share the
 * scanner's JSON walk (a --set path is resolved the way an error path is located). */
#include "config/run_config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "core/json.h"

static const char *const sections[] = {"model",     "data",       "loss",      "metrics", "training_args",
                                       "callbacks", "generation", "init_from", NULL};

/* --- paths: "model.layers[2].out_features" -------------------------------------------------------- */

#define PATH_MAX_COMPS 64
#define PATH_KEY_MAX 256

typedef struct comp {
    bool is_index;
    long index;
    char key[PATH_KEY_MAX];
    size_t end; /* offset in the path text just past this component */
} comp;

/* Splits path[0, len) into components. strict: keys are [A-Za-z0-9_-] only (what annotate accepts
 * as "a path at the start of a message"); otherwise any byte but '.', '[', ']'. On failure, *why
 * says what is wrong. */
static bool parse_path(const char *path, size_t len, bool strict, comp *comps, int *n, const char **why) {
    *n = 0;
    size_t i = 0;
    if (len == 0) return true;
    for (;;) {
        if (*n >= PATH_MAX_COMPS) {
            *why = "too many components";
            return false;
        }
        /* a key */
        size_t start = i;
        while (i < len && path[i] != '.' && path[i] != '[' && path[i] != ']') {
            char ch = path[i];
            bool ok = strict ? (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                                   ch == '_' || ch == '-'
                             : ch != '\0';
            if (!ok) {
                *why = "unexpected character";
                return false;
            }
            i++;
        }
        if (i == start) {
            *why = "empty key";
            return false;
        }
        if (i - start >= PATH_KEY_MAX) {
            *why = "key too long";
            return false;
        }
        comp *c = &comps[(*n)++];
        c->is_index = false;
        memcpy(c->key, path + start, i - start);
        c->key[i - start] = '\0';
        c->end = i;
        /* indices */
        while (i < len && path[i] == '[') {
            if (*n >= PATH_MAX_COMPS) {
                *why = "too many components";
                return false;
            }
            size_t d = ++i;
            long v = 0;
            while (i < len && path[i] >= '0' && path[i] <= '9' && i - d < 9) v = v * 10 + (path[i++] - '0');
            if (i == d || i >= len || path[i] != ']') {
                *why = "expected [index] with a non-negative integer";
                return false;
            }
            i++;
            comp *x = &comps[(*n)++];
            x->is_index = true;
            x->index = v;
            x->key[0] = '\0';
            x->end = i;
        }
        if (i == len) return true;
        if (path[i] != '.') {
            *why = "expected '.' or '[' after a key";
            return false;
        }
        i++;
    }
}

/* --- the scanner ------------------------------------------------------------------------------------ */

typedef struct scan {
    const char *p;
    int line, col; /* of *p, 1-based */
} scan;

static void adv(scan *s) {
    unsigned char c = (unsigned char)*s->p;
    if (!c) return;
    s->p++;
    if (c == '\n') {
        s->line++;
        s->col = 1;
    } else if ((c & 0xC0) != 0x80) {
        s->col++; /* one column per character: continuation bytes add none */
    }
}

static void ws(scan *s) {
    while (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r') adv(s);
}

static int hex4(const char *p) {
    int v = 0;
    for (int k = 0; k < 4; k++) {
        char ch = p[k];
        int d = ch >= '0' && ch <= '9'   ? ch - '0'
                : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                         : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Appends code point cp as UTF-8 to buf (len tracked; overflow marks *over). */
static void put_utf8(char *buf, size_t cap, size_t *len, bool *over, unsigned cp) {
    char t[4];
    size_t n;
    if (cp < 0x80) {
        t[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        t[0] = (char)(0xC0 | (cp >> 6));
        t[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        t[0] = (char)(0xE0 | (cp >> 12));
        t[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        t[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        t[0] = (char)(0xF0 | (cp >> 18));
        t[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        t[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        t[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    if (*len + n >= cap) {
        *over = true;
        return;
    }
    memcpy(buf + *len, t, n);
    *len += n;
}

/* Reads the string at s (on its opening quote), decoding escapes into buf. False when malformed;
 * *over when it did not fit (it then matches no key). */
static bool read_string(scan *s, char *buf, size_t cap, bool *over) {
    size_t len = 0;
    *over = false;
    if (*s->p != '"') return false;
    adv(s);
    for (;;) {
        unsigned char c = (unsigned char)*s->p;
        if (c == '\0') return false;
        if (c == '"') {
            adv(s);
            buf[len] = '\0';
            return true;
        }
        if (c != '\\') {
            if (len + 1 >= cap)
                *over = true;
            else
                buf[len++] = (char)c;
            adv(s);
            continue;
        }
        adv(s);
        char e = *s->p;
        if (e == '\0') return false;
        unsigned cp;
        switch (e) {
        case '"': cp = '"'; break;
        case '\\': cp = '\\'; break;
        case '/': cp = '/'; break;
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'u': {
            int h = hex4(s->p + 1);
            if (h < 0) return false;
            for (int k = 0; k < 4; k++) adv(s);
            cp = (unsigned)h;
            /* a surrogate pair: \uD83D\uDE00 */
            if (cp >= 0xD800 && cp < 0xDC00 && s->p[1] == '\\' && s->p[2] == 'u') {
                int lo = hex4(s->p + 3);
                if (lo >= 0xDC00 && lo < 0xE000) {
                    for (int k = 0; k < 6; k++) adv(s);
                    cp = 0x10000 + ((cp - 0xD800) << 10) + ((unsigned)lo - 0xDC00);
                }
            }
            break;
        }
        default: return false;
        }
        put_utf8(buf, cap, &len, over, cp);
        adv(s);
    }
}

static bool skip_string(scan *s) {
    if (*s->p != '"') return false;
    adv(s);
    for (;;) {
        char c = *s->p;
        if (c == '\0') return false;
        adv(s);
        if (c == '"') return true;
        if (c == '\\') {
            if (*s->p == '\0') return false;
            adv(s);
        }
    }
}

#define SCAN_MAX_DEPTH 2048 /* jansson's own nesting limit */

/* Skips the value at s (after whitespace). False on malformed text. */
static bool skip_value(scan *s, int depth) {
    if (depth > SCAN_MAX_DEPTH) return false;
    ws(s);
    char c = *s->p;
    if (c == '"') return skip_string(s);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        adv(s);
        ws(s);
        if (*s->p == close) {
            adv(s);
            return true;
        }
        for (;;) {
            if (c == '{') {
                ws(s);
                if (!skip_string(s)) return false;
                ws(s);
                if (*s->p != ':') return false;
                adv(s);
            }
            if (!skip_value(s, depth + 1)) return false;
            ws(s);
            if (*s->p == ',') {
                adv(s);
                continue;
            }
            if (*s->p == close) {
                adv(s);
                return true;
            }
            return false;
        }
    }
    /* a number or a literal */
    const char *start = s->p;
    while ((*s->p >= '0' && *s->p <= '9') || (*s->p >= 'a' && *s->p <= 'z') || (*s->p >= 'A' && *s->p <= 'Z') ||
           *s->p == '.' || *s->p == '+' || *s->p == '-')
        adv(s);
    return s->p != start;
}

/* Moves s (at a value) to the member `key` of the object there, or to element `index` of the array
 * there. False when there is no such member or element. */
static bool step_into(scan *s, const comp *c) {
    ws(s);
    if (!c->is_index) {
        if (*s->p != '{') return false;
        adv(s);
        ws(s);
        if (*s->p == '}') return false;
        for (;;) {
            char key[PATH_KEY_MAX];
            bool over;
            ws(s);
            if (!read_string(s, key, sizeof key, &over)) return false;
            ws(s);
            if (*s->p != ':') return false;
            adv(s);
            ws(s);
            if (!over && strcmp(key, c->key) == 0) return true;
            if (!skip_value(s, 0)) return false;
            ws(s);
            if (*s->p != ',') return false;
            adv(s);
        }
    }
    if (*s->p != '[') return false;
    adv(s);
    ws(s);
    if (*s->p == ']') return false;
    for (long k = 0; k < c->index; k++) {
        if (!skip_value(s, 0)) return false;
        ws(s);
        if (*s->p != ',') return false;
        adv(s);
    }
    ws(s);
    return *s->p != '\0' && *s->p != ']';
}

/* The position of the value at comps[0, n) in text. */
static bool locate_comps(const char *text, const comp *comps, int n, int *line, int *column) {
    scan s = {text, 1, 1};
    ws(&s);
    for (int k = 0; k < n; k++)
        if (!step_into(&s, &comps[k])) return false;
    ws(&s);
    if (*s.p == '\0') return false;
    *line = s.line;
    *column = s.col;
    return true;
}

bool ct_run_config_locate(const ct_run_config *c, const char *path, int *line, int *column) {
    if (!c || !c->text || !path) return false;
    comp *comps = malloc(sizeof(comp) * PATH_MAX_COMPS);
    if (!comps) return false;
    int n;
    const char *why;
    int l, col;
    bool ok = parse_path(path, strlen(path), false, comps, &n, &why) && locate_comps(c->text, comps, n, &l, &col);
    free(comps);
    if (ok) {
        if (line) *line = l;
        if (column) *column = col;
    }
    return ok;
}

/* Line and column of byte offset `pos` of text. */
static void position_of(const char *text, size_t pos, int *line, int *column) {
    scan s = {text, 1, 1};
    while (*s.p && (size_t)(s.p - text) < pos) adv(&s);
    *line = s.line;
    *column = s.col;
}

/* --- loading ---------------------------------------------------------------------------------------- */

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

void ct_run_config_free(ct_run_config *c) {
    if (!c) return;
    json_decref(c->root);
    free(c->text);
    free(c->file);
    free(c->base_dir);
    memset(c, 0, sizeof *c);
}

/* "file:line:column: message" for a jansson syntax error. jansson's position is just past the last
 * byte it read; its message ends with "near '<token>'" when it had one, so the token's first byte
 * is where the reader should look. */
static ct_status syntax_error(const char *text, const char *name, const json_error_t *err) {
    size_t pos = err->position > 0 ? (size_t)err->position : 0;
    size_t tlen = strlen(text);
    if (pos > tlen) pos = tlen;
    const char *near = strstr(err->text, " near '");
    size_t msg_len = strlen(err->text);
    if (near && msg_len >= 2 && err->text[msg_len - 1] == '\'') {
        size_t tok = (size_t)(err->text + msg_len - 1 - (near + 7));
        pos = tok <= pos ? pos - tok : 0;
    } else if (!strstr(err->text, "near end of file") && pos > 0) {
        pos--; /* the last byte read */
    }
    int line, col;
    position_of(text, pos, &line, &col);
    return ct_error(CT_ERR_CONFIG, "%s:%d:%d: %s", name, line, col, err->text);
}

static const char *json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "a list";
    case JSON_STRING: return "a string";
    case JSON_INTEGER:
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "a value";
}

static ct_status check_sections(const ct_run_config *c) {
    const char *key;
    json_t *value;
    json_object_foreach(c->root, key, value) {
        bool known = false;
        for (int k = 0; sections[k] && !known; k++) known = strcmp(sections[k], key) == 0;
        if (known) continue;
        comp one = {.is_index = false};
        snprintf(one.key, sizeof one.key, "%s", key);
        int line = 0, col = 0;
        char where[64] = "";
        if (strlen(key) < PATH_KEY_MAX && locate_comps(c->text, &one, 1, &line, &col))
            snprintf(where, sizeof where, "%d:%d:", line, col);
        const char *hint = ct_closest_word(key, sections);
        if (hint)
            return ct_error(CT_ERR_CONFIG, "%s:%s unknown section '%s', did you mean '%s'?", c->file, where, key, hint);
        return ct_error(CT_ERR_CONFIG,
                        "%s:%s unknown section '%s' (sections: model, data, loss, metrics, training_args, callbacks)",
                        c->file, where, key);
    }
    return CT_OK;
}

/* Parses text (a copy is kept) with `name` and `base_dir` for messages and relative paths. */
static ct_status parse_as(const char *text, const char *name, const char *base_dir, ct_run_config *out) {
    memset(out, 0, sizeof *out);
    /* invisible in an editor and in jansson's "near '...'": named as what it is */
    if (strncmp(text, "\xef\xbb\xbf", 3) == 0)
        return ct_error(CT_ERR_CONFIG, "%s:1:1: the file starts with a UTF-8 byte-order mark, which JSON does not "
                        "allow; save it without one", name);
    json_error_t err;
    json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &err);
    if (!root) return syntax_error(text, name, &err);
    out->root = root;
    out->text = dup_str(text);
    out->file = dup_str(name);
    out->base_dir = dup_str(base_dir);
    if (!out->text || !out->file || !out->base_dir) {
        ct_run_config_free(out);
        return ct_error(CT_ERR_NOMEM, "%s: out of memory", name);
    }
    ct_status s = CT_OK;
    if (!json_is_object(root)) {
        int line = 1, col = 1;
        locate_comps(text, NULL, 0, &line, &col);
        s = ct_error(CT_ERR_CONFIG,
                     "%s:%d:%d: a run config must be a JSON object (with sections model, data, ...), "
                     "got %s",
                     name, line, col, json_kind(root));
    } else {
        s = check_sections(out);
    }
    if (s != CT_OK) ct_run_config_free(out);
    return s;
}

ct_status ct_run_config_parse(const char *text, const char *name, ct_run_config *out) {
    CT_ASSERT(text && out);
    return parse_as(text, name ? name : "<memory>", ".", out);
}

ct_status ct_run_config_load(const char *file, ct_run_config *out) {
    CT_ASSERT(file && out);
    memset(out, 0, sizeof *out);
    FILE *f;
    CT_TRY(ct_fopen_read(file, &f)); /* a regular file: never a FIFO that would block */
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            fclose(f);
            return ct_error(CT_ERR_NOMEM, "%s: out of memory reading it", file);
        }
        len += fread(buf + len, 1, cap - len - 1, f);
        if (len < cap - 1) break;
        char *grown = realloc(buf, cap * 2);
        if (!grown) free(buf);
        buf = grown;
        cap *= 2;
    }
    bool failed = ferror(f);
    int e = errno;
    fclose(f);
    if (failed) {
        free(buf);
        return ct_error(CT_ERR_IO, "%s: cannot read: %s", file, strerror(e));
    }
    buf[len] = '\0';
    if (memchr(buf, '\0', len)) {
        int line, col;
        position_of(buf, (size_t)((char *)memchr(buf, '\0', len) - buf), &line, &col);
        free(buf);
        return ct_error(CT_ERR_CONFIG, "%s:%d:%d: NUL byte in the file (a run config is JSON text)", file, line, col);
    }
    /* Relative paths inside the config are relative to its directory. */
    char *dir = dup_str(file);
    if (!dir) {
        free(buf);
        return ct_error(CT_ERR_NOMEM, "%s: out of memory", file);
    }
    char *slash = strrchr(dir, '/');
    if (!slash)
        strcpy(dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    ct_status s = parse_as(buf, file, dir, out);
    free(dir);
    free(buf);
    return s;
}

json_t *ct_run_config_section(const ct_run_config *c, const char *name) {
    if (!c || !c->root || !name) return NULL;
    return json_object_get(c->root, name);
}

/* --- --set ------------------------------------------------------------------------------------------ */

ct_status ct_run_config_set(ct_run_config *c, const char *assignment) {
    CT_ASSERT(c && assignment);
    if (!c->root) {
        c->root = json_object();
        if (!c->root) return ct_error(CT_ERR_NOMEM, "--set: out of memory");
    }
    const char *eq = strchr(assignment, '=');
    if (!eq) return ct_error(CT_ERR_CONFIG, "--set '%s': expected KEY=VALUE (e.g. training_args.seed=3)", assignment);
    size_t klen = (size_t)(eq - assignment);
    comp *comps = malloc(sizeof(comp) * PATH_MAX_COMPS);
    if (!comps) return ct_error(CT_ERR_NOMEM, "--set: out of memory");
    int n = 0;
    const char *why = "";
    ct_status s = CT_OK;
    json_t *value = NULL;
    if (klen == 0) {
        s = ct_error(CT_ERR_CONFIG, "--set '%s': missing the key before '='", assignment);
        goto done;
    }
    if (!parse_path(assignment, klen, false, comps, &n, &why)) {
        s = ct_error(CT_ERR_CONFIG, "--set '%s': bad key '%.*s': %s", assignment, (int)klen, assignment, why);
        goto done;
    }
    bool known = false;
    for (int k = 0; sections[k] && !known; k++) known = strcmp(sections[k], comps[0].key) == 0;
    if (!known) {
        const char *hint = ct_closest_word(comps[0].key, sections);
        if (hint)
            s = ct_error(CT_ERR_CONFIG, "--set '%s': unknown section '%s', did you mean '%s'?", assignment,
                         comps[0].key, hint);
        else
            s = ct_error(CT_ERR_CONFIG,
                         "--set '%s': unknown section '%s' (sections: model, data, loss, metrics, "
                         "training_args, callbacks)",
                         assignment, comps[0].key);
        goto done;
    }
    const char *text = eq + 1;
    if (!*text) {
        s = ct_error(CT_ERR_CONFIG, "--set '%s': missing the value after '='", assignment);
        goto done;
    }
    json_error_t err;
    value = json_loads(text, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &err);
    if (!value) {
        /* A bare word is a string (--set training_args.optim=sgd); what looks like JSON must be JSON. */
        const char *t = text + strspn(text, " \t");
        if (*t == '[' || *t == '{' || *t == '"') {
            s = ct_error(CT_ERR_CONFIG, "--set '%s': the value is not valid JSON: %s (column %d)", assignment, err.text,
                         err.column);
            goto done;
        }
        value = json_string(text);
        if (!value) {
            s = ct_error(CT_ERR_CONFIG, "--set '%s': the value is not valid UTF-8", assignment);
            goto done;
        }
    }
    json_t *node = c->root;
    for (int k = 0; k < n; k++) {
        const comp *cp = &comps[k];
        bool last = k == n - 1;
        /* the path so far, for messages: "model.layers" */
        int so_far = k ? (int)comps[k - 1].end : 0;
        if (!cp->is_index) {
            if (!json_is_object(node)) {
                s = ct_error(CT_ERR_CONFIG, "--set '%s': '%.*s' is %s, not an object", assignment, so_far, assignment,
                             json_kind(node));
                goto done;
            }
            if (last) {
                json_object_set_new(node, cp->key, value);
                value = NULL;
                break;
            }
            json_t *child = json_object_get(node, cp->key);
            if (!child) {
                if (comps[k + 1].is_index) {
                    s = ct_error(CT_ERR_CONFIG, "--set '%s': '%.*s' does not exist, so it has no element [%ld]",
                                 assignment, (int)cp->end, assignment, comps[k + 1].index);
                    goto done;
                }
                child = json_object();
                if (!child || json_object_set_new(node, cp->key, child) != 0) {
                    s = ct_error(CT_ERR_NOMEM, "--set '%s': out of memory", assignment);
                    goto done;
                }
            }
            node = child;
        } else {
            if (!json_is_array(node)) {
                s = ct_error(CT_ERR_CONFIG, "--set '%s': '%.*s' is %s, not a list", assignment, so_far, assignment,
                             json_kind(node));
                goto done;
            }
            if ((size_t)cp->index >= json_array_size(node)) {
                s = ct_error(CT_ERR_CONFIG, "--set '%s': index %ld is out of range: '%.*s' has %zu elements",
                             assignment, cp->index, so_far, assignment, json_array_size(node));
                goto done;
            }
            if (last) {
                json_array_set_new(node, (size_t)cp->index, value);
                value = NULL;
                break;
            }
            node = json_array_get(node, (size_t)cp->index);
        }
    }
    c->modified = true;
done:
    json_decref(value);
    free(comps);
    return s;
}

/* --- annotate --------------------------------------------------------------------------------------- */

ct_status ct_run_config_annotate(const ct_run_config *c, ct_status s) {
    if (s != CT_ERR_CONFIG || !c || !c->file) return s;
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", ct_last_error());
    size_t flen = strlen(c->file);
    if (strncmp(msg, c->file, flen) == 0 && msg[flen] == ':') return s; /* already has its position */
    const char *colon = strstr(msg, ": ");
    if (!colon) return s;
    comp *comps = malloc(sizeof(comp) * (PATH_MAX_COMPS + 1));
    if (!comps) return s;
    int n;
    const char *why;
    size_t plen = (size_t)(colon - msg);
    bool is_path = parse_path(msg, plen, true, comps, &n, &why) && n > 0 && !comps[0].is_index;
    if (is_path) {
        bool known = false;
        for (int k = 0; sections[k] && !known; k++) known = strcmp(sections[k], comps[0].key) == 0;
        is_path = known;
    }
    if (!is_path) {
        free(comps);
        return s;
    }
    /* "path: unknown key 'k'" (core/json.h's key check) is about path.k: point at that key. */
    const char *uk = "unknown key '";
    if (strncmp(colon + 2, uk, strlen(uk)) == 0 && n < PATH_MAX_COMPS) {
        const char *k0 = colon + 2 + strlen(uk), *k1 = strchr(k0, '\'');
        if (k1 && (size_t)(k1 - k0) < PATH_KEY_MAX) {
            comp extra = {.is_index = false};
            memcpy(extra.key, k0, (size_t)(k1 - k0));
            extra.key[k1 - k0] = '\0';
            comps[n] = extra;
            int line, col;
            if (c->text && locate_comps(c->text, comps, n + 1, &line, &col)) {
                free(comps);
                return ct_error(s, "%s:%d:%d: %s", c->file, line, col, msg);
            }
        }
    }
    /* The value itself, or the nearest enclosing one that is in the file. */
    for (int m = n; m > 0; m--) {
        int line, col;
        if (c->text && locate_comps(c->text, comps, m, &line, &col)) {
            free(comps);
            return ct_error(s, "%s:%d:%d: %s", c->file, line, col, msg);
        }
    }
    free(comps);
    return ct_error(s, "%s: %s", c->file, msg);
}
