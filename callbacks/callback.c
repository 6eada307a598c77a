/* The callback dispatcher and list: Hugging Face's CallbackHandler. Events fire in the order the
 * callbacks were added, after the control resets CallbackHandler applies for that event
 * (on_train_begin, on_epoch_begin, on_step_begin, on_evaluate, on_save, on_log); the first failing
 * callback stops the event and its message gets "callback '<name>' <event>: " in front. Ops tables
 * may be older (shorter) than this header's: a member past ops->size is treated as NULL. */
#include "callbacks/callback.h"

#include <stdlib.h>
#include <string.h>

#include "core/vtable.h"

static const char *const event_names[CT_EVENT_COUNT] = {
    [CT_ON_INIT_END] = "on_init_end",
    [CT_ON_TRAIN_BEGIN] = "on_train_begin",
    [CT_ON_TRAIN_END] = "on_train_end",
    [CT_ON_EPOCH_BEGIN] = "on_epoch_begin",
    [CT_ON_EPOCH_END] = "on_epoch_end",
    [CT_ON_STEP_BEGIN] = "on_step_begin",
    [CT_ON_SUBSTEP_END] = "on_substep_end",
    [CT_ON_PRE_OPTIMIZER_STEP] = "on_pre_optimizer_step",
    [CT_ON_OPTIMIZER_STEP] = "on_optimizer_step",
    [CT_ON_STEP_END] = "on_step_end",
    [CT_ON_EVALUATE] = "on_evaluate",
    [CT_ON_PREDICT] = "on_predict",
    [CT_ON_SAVE] = "on_save",
    [CT_ON_LOG] = "on_log",
    [CT_ON_PREDICTION_STEP] = "on_prediction_step",
};

/* Where each event's function pointer sits in the ops table. */
static const size_t event_offsets[CT_EVENT_COUNT] = {
    [CT_ON_INIT_END] = offsetof(ct_callback_ops, on_init_end),
    [CT_ON_TRAIN_BEGIN] = offsetof(ct_callback_ops, on_train_begin),
    [CT_ON_TRAIN_END] = offsetof(ct_callback_ops, on_train_end),
    [CT_ON_EPOCH_BEGIN] = offsetof(ct_callback_ops, on_epoch_begin),
    [CT_ON_EPOCH_END] = offsetof(ct_callback_ops, on_epoch_end),
    [CT_ON_STEP_BEGIN] = offsetof(ct_callback_ops, on_step_begin),
    [CT_ON_SUBSTEP_END] = offsetof(ct_callback_ops, on_substep_end),
    [CT_ON_PRE_OPTIMIZER_STEP] = offsetof(ct_callback_ops, on_pre_optimizer_step),
    [CT_ON_OPTIMIZER_STEP] = offsetof(ct_callback_ops, on_optimizer_step),
    [CT_ON_STEP_END] = offsetof(ct_callback_ops, on_step_end),
    [CT_ON_EVALUATE] = offsetof(ct_callback_ops, on_evaluate),
    [CT_ON_PREDICT] = offsetof(ct_callback_ops, on_predict),
    [CT_ON_SAVE] = offsetof(ct_callback_ops, on_save),
    [CT_ON_LOG] = offsetof(ct_callback_ops, on_log),
    [CT_ON_PREDICTION_STEP] = offsetof(ct_callback_ops, on_prediction_step),
};

const char *ct_event_name(ct_event e) {
    CT_ASSERT(e >= 0 && e < CT_EVENT_COUNT);
    return event_names[e];
}

/* True when the ops table was written with the member at `offset` (of `size` bytes). */
static bool has_member(const ct_callback_ops *ops, size_t offset, size_t size) { return ops->size >= offset + size; }

static ct_callback_fn event_fn(const ct_callback_ops *ops, ct_event e) {
    if (!has_member(ops, event_offsets[e], sizeof(ct_callback_fn))) return NULL;
    ct_callback_fn fn;
    memcpy(&fn, (const char *)ops + event_offsets[e], sizeof fn);
    return fn;
}

const char *ct_callback_name(const ct_callback *cb) { return cb->ops->name; }

void ct_callback_free(ct_callback *cb) {
    if (!cb) return;
    if (has_member(cb->ops, offsetof(ct_callback_ops, destroy), sizeof cb->ops->destroy) && cb->ops->destroy)
        cb->ops->destroy(cb);
    else
        free(cb);
}

void ct_callback_list_free(ct_callback_list *l) {
    if (!l) return;
    for (int i = 0; i < l->n; i++) ct_callback_free(l->items[i]);
    free(l->items);
    l->items = NULL;
    l->n = l->cap = 0;
}

ct_status ct_callback_check(const ct_callback *cb) {
    if (!cb) return ct_error(CT_ERR_INVALID_ARG, "callback is NULL");
    CT_TRY(CT_OPS_CHECK_SIZE(ct_callback_ops, cb->ops, name));
    return CT_OPS_CHECK_MEMBER(ct_callback_ops, cb->ops, name,
                               "names the callback in errors, in pop/remove and in saved state");
}

ct_status ct_callback_list_add(ct_callback_list *l, ct_callback *cb) {
    CT_ASSERT(l);
    /* A table that fails the check cannot be trusted to destroy itself: the callback stays the
     * caller's then. */
    CT_TRY(ct_callback_check(cb));
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 8;
        ct_callback **items = realloc(l->items, (size_t)cap * sizeof *items);
        if (!items) {
            ct_callback_free(cb);
            return ct_error(CT_ERR_NOMEM, "callbacks: out of memory adding '%s'", cb->ops->name);
        }
        l->items = items;
        l->cap = cap;
    }
    l->items[l->n++] = cb;
    return CT_OK;
}

static int index_of(const ct_callback_list *l, const char *name) {
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->items[i]->ops->name, name) == 0) return i;
    return -1;
}

ct_callback *ct_callback_list_pop(ct_callback_list *l, const char *name) {
    int i = index_of(l, name);
    if (i < 0) return NULL;
    ct_callback *cb = l->items[i];
    memmove(l->items + i, l->items + i + 1, (size_t)(l->n - i - 1) * sizeof *l->items);
    l->n--;
    return cb;
}

bool ct_callback_list_remove(ct_callback_list *l, const char *name) {
    ct_callback *cb = ct_callback_list_pop(l, name);
    ct_callback_free(cb);
    return cb != NULL;
}

ct_callback *ct_callback_list_find(const ct_callback_list *l, const char *name) {
    int i = index_of(l, name);
    return i < 0 ? NULL : l->items[i];
}

/* CallbackHandler's resets: each event clears the flags that it, or the step it starts, answers. */
static void reset_control(ct_trainer_control *c, ct_event e) {
    switch (e) {
    case CT_ON_TRAIN_BEGIN: c->should_training_stop = false; break;
    case CT_ON_EPOCH_BEGIN: c->should_epoch_stop = false; break;
    case CT_ON_STEP_BEGIN: c->should_log = c->should_evaluate = c->should_save = false; break;
    case CT_ON_EVALUATE: c->should_evaluate = false; break;
    case CT_ON_SAVE: c->should_save = false; break;
    case CT_ON_LOG: c->should_log = false; break;
    default: break;
    }
}

ct_status ct_callbacks_fire(const ct_callback_list *l, ct_event e, const ct_callback_args *a) {
    CT_ASSERT(e >= 0 && e < CT_EVENT_COUNT && a);
    if (a->control) reset_control(a->control, e);
    for (int i = 0; i < l->n; i++) {
        ct_callback *cb = l->items[i];
        ct_callback_fn fn = event_fn(cb->ops, e);
        if (!fn) continue;
        ct_status st = fn(cb, a);
        if (st != CT_OK) return ct_error_prefix(st, "callback '%s' %s: ", cb->ops->name, event_names[e]);
    }
    return CT_OK;
}

/* --- saved state ------------------------------------------------------------------------------------ */

typedef ct_status (*save_fn)(ct_callback *, json_t **);
typedef ct_status (*load_fn)(ct_callback *, const json_t *);

static save_fn saver(const ct_callback *cb) {
    return has_member(cb->ops, offsetof(ct_callback_ops, save_state), sizeof(save_fn)) ? cb->ops->save_state : NULL;
}

static load_fn loader(const ct_callback *cb) {
    return has_member(cb->ops, offsetof(ct_callback_ops, load_state), sizeof(load_fn)) ? cb->ops->load_state : NULL;
}

ct_status ct_callbacks_save_state(const ct_callback_list *l, json_t *stateful) {
    CT_ASSERT(json_is_object(stateful));
    /* Written fresh: entries of callbacks in this list replace what an earlier save left. */
    for (int i = 0; i < l->n; i++)
        if (saver(l->items[i])) json_object_del(stateful, l->items[i]->ops->name);
    for (int i = 0; i < l->n; i++) {
        ct_callback *cb = l->items[i];
        save_fn fn = saver(cb);
        if (!fn) continue;
        json_t *st = NULL;
        ct_status s = fn(cb, &st);
        if (s != CT_OK) return ct_error_prefix(s, "callback '%s' save_state: ", cb->ops->name);
        if (!st) continue;
        const char *name = cb->ops->name;
        json_t *prev = json_object_get(stateful, name);
        int rc;
        if (!prev) {
            rc = json_object_set_new(stateful, name, st);
        } else if (json_is_array(prev)) {
            rc = json_array_append_new(prev, st);
        } else {
            /* A second callback of the same name: HF turns the entry into a list, in list order. */
            json_t *arr = json_array();
            rc = -1;
            if (arr && json_array_append(arr, prev) == 0) {
                rc = json_array_append_new(arr, st); /* takes st, also on failure */
                st = NULL;
                if (rc == 0) {
                    rc = json_object_set_new(stateful, name, arr); /* takes arr */
                    arr = NULL;
                }
            }
            json_decref(arr);
            json_decref(st);
        }
        if (rc) return ct_error(CT_ERR_NOMEM, "callback '%s' save_state: out of memory", name);
    }
    return CT_OK;
}

ct_status ct_callbacks_load_state(const ct_callback_list *l, const json_t *stateful, const char *path) {
    if (!stateful || json_is_null(stateful)) return CT_OK;
    if (!json_is_object(stateful)) return ct_error(CT_ERR_FORMAT, "%s: stateful_callbacks must be an object", path);
    const char *name;
    const json_t *data;
    json_object_foreach((json_t *)stateful, name, data) {
        /* Entries for callbacks this run does not have are ignored (HF warns and goes on); the
         * k-th saved state of a name goes to the k-th callback of that name. */
        size_t k = 0, n = json_is_array(data) ? json_array_size(data) : 1;
        for (int i = 0; i < l->n && k < n; i++) {
            ct_callback *cb = l->items[i];
            if (strcmp(cb->ops->name, name) != 0) continue;
            const json_t *st = json_is_array(data) ? json_array_get(data, k) : data;
            k++;
            load_fn fn = loader(cb);
            if (!fn) continue;
            ct_status s = fn(cb, st);
            if (s != CT_OK) return ct_error_prefix(s, "%s: stateful_callbacks.%s: ", path, name);
        }
    }
    return CT_OK;
}
