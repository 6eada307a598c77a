/* Registries of an application's own types, by the name a run config gives them.
 *
 * Layers, datasets, metrics, losses and callbacks are read from JSON specs with a "type"; each kind
 * has its built-in types and one registry where an application adds its own (ct_register_module_type,
 * ct_register_dataset_type, ct_register_metric_type, ct_register_loss_type,
 * ct_register_callback_type). This is the one table behind all of them, so they refuse the same
 * mistakes the same way: a NULL or empty name, a name longer than CT_REGISTRY_NAME_MAX - 1, a NULL
 * constructor, a built-in name (a config naming it would silently change meaning), a name already
 * registered with another constructor (registering the same pair again is harmless) and a full table.
 * Registration and lookup are thread-safe; entries are never removed, so a found constructor stays
 * valid for the life of the program. */
#ifndef CT_REGISTRY_H
#define CT_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"

#define CT_REGISTRY_NAME_MAX 64
#define CT_REGISTRY_CAPACITY 64

/* A constructor of any signature; each kind casts it back to its own type (C allows the round trip). */
typedef void (*ct_registry_fn)(void);

typedef struct ct_registry {
    const char *kind;                     /* "dataset type": says what a name is, in messages */
    const char *function;                 /* "ct_register_dataset_type": the caller, in messages */
    bool (*is_builtin)(const char *name); /* the kind's built-in names, which are never replaced */
    int n;
    struct {
        char name[CT_REGISTRY_NAME_MAX];
        ct_registry_fn fn;
    } items[CT_REGISTRY_CAPACITY];
} ct_registry;

/* A registry for a kind: CT_REGISTRY_INIT("dataset type", "ct_register_dataset_type", is_builtin). */
#define CT_REGISTRY_INIT(kind, function, is_builtin) {(kind), (function), (is_builtin), 0, {{{0}, 0}}}

/* Adds name -> fn; CT_ERR_INVALID_ARG, naming the function and the name, for the mistakes above. */
ct_status ct_registry_add(ct_registry *r, const char *name, ct_registry_fn fn);
/* The constructor registered under name, or NULL. */
ct_registry_fn ct_registry_find(ct_registry *r, const char *name);
/* Appends the registered names to names[*n ..] (at most cap - 1 in all, then a NULL), for the
 * "did you mean" of an unknown name and the lists of known ones. */
void ct_registry_names(ct_registry *r, const char **names, size_t *n, size_t cap);

/* The error for an unknown name at `path` (the "type" key's JSON path): CT_ERR_CONFIG "<path>: unknown
 * <kind> '<name>', did you mean '<closest>'?", or, when nothing is close, the list of known names
 * (the built-in ones, NULL-terminated, then the registered ones). */
ct_status ct_registry_unknown(ct_registry *r, const char *const *builtin, const char *path, const char *name);
/* What a registered constructor's failure becomes: a value it refused (CT_ERR_INVALID_ARG) is the
 * config's mistake (CT_ERR_CONFIG); the message starts with `path` (the spec's JSON path, so a run
 * config can point at the line) unless it already does. Other statuses keep their kind. */
ct_status ct_registry_error(ct_status s, const char *path);

#endif
