/* The registry of core/registry.h: a fixed table under one lock. Names are copied, so a caller's
 * buffer may go away after registering. */
#include "core/registry.h"

#include "core/json.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static int index_of(const ct_registry *r, const char *name) {
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->items[i].name, name) == 0) return i;
    return -1;
}

ct_status ct_registry_add(ct_registry *r, const char *name, ct_registry_fn fn) {
    if (!name || !name[0])
        return ct_error(CT_ERR_INVALID_ARG, "%s: the %s name is %s", r->function, r->kind, name ? "empty" : "NULL");
    if (strlen(name) >= CT_REGISTRY_NAME_MAX)
        return ct_error(CT_ERR_INVALID_ARG, "%s: the %s name '%.40s...' is longer than %d characters", r->function,
                        r->kind, name, CT_REGISTRY_NAME_MAX - 1);
    if (!fn) return ct_error(CT_ERR_INVALID_ARG, "%s: '%s': the constructor is NULL", r->function, name);
    if (r->is_builtin && r->is_builtin(name))
        return ct_error(CT_ERR_INVALID_ARG, "%s: '%s' is a built-in %s; register yours under another name",
                        r->function, name, r->kind);
    ct_status s = CT_OK;
    pthread_mutex_lock(&mu);
    int i = index_of(r, name);
    if (i >= 0 && r->items[i].fn != fn)
        s = ct_error(CT_ERR_INVALID_ARG, "%s: the %s '%s' is already registered with another constructor",
                     r->function, r->kind, name);
    else if (i < 0 && r->n == CT_REGISTRY_CAPACITY)
        s = ct_error(CT_ERR_INVALID_ARG, "%s: '%s': %d %ss are registered already, the most there is room for",
                     r->function, name, CT_REGISTRY_CAPACITY, r->kind);
    else if (i < 0) {
        strcpy(r->items[r->n].name, name);
        r->items[r->n].fn = fn;
        r->n++;
    }
    pthread_mutex_unlock(&mu);
    return s;
}

ct_registry_fn ct_registry_find(ct_registry *r, const char *name) {
    pthread_mutex_lock(&mu);
    int i = name ? index_of(r, name) : -1;
    ct_registry_fn fn = i >= 0 ? r->items[i].fn : NULL;
    pthread_mutex_unlock(&mu);
    return fn;
}

void ct_registry_names(ct_registry *r, const char **names, size_t *n, size_t cap) {
    pthread_mutex_lock(&mu);
    for (int i = 0; i < r->n && *n + 1 < cap; i++) names[(*n)++] = r->items[i].name;
    pthread_mutex_unlock(&mu);
    if (*n < cap) names[*n] = NULL;
}

ct_status ct_registry_error(ct_status s, const char *path) {
    if (s == CT_ERR_INVALID_ARG) s = CT_ERR_CONFIG;
    size_t n = strlen(path);
    const char *msg = ct_last_error();
    bool named = strncmp(msg, path, n) == 0 && (msg[n] == ':' || msg[n] == '.' || msg[n] == '[');
    return named ? s : ct_error_prefix(s, "%s: ", path);
}

ct_status ct_registry_unknown(ct_registry *r, const char *const *builtin, const char *path, const char *name) {
    const char *names[128 + CT_REGISTRY_CAPACITY];
    size_t n = 0;
    for (int i = 0; builtin && builtin[i] && n < 128; i++) names[n++] = builtin[i];
    ct_registry_names(r, names, &n, sizeof names / sizeof names[0]);
    const char *hint = ct_closest_word(name, names);
    if (hint) return ct_error(CT_ERR_CONFIG, "%s: unknown %s '%s', did you mean '%s'?", path, r->kind, name, hint);
    char known[2048] = "";
    size_t len = 0;
    for (size_t i = 0; i < n && len < sizeof known; i++)
        len += (size_t)snprintf(known + len, sizeof known - len, "%s%s", i ? ", " : "", names[i]);
    return ct_error(CT_ERR_CONFIG, "%s: unknown %s '%s' (known: %s)", path, r->kind, name, known);
}
