/* The callback machinery (callbacks/callback.h): the control reset rules of each event, dispatch
 * order, a failing callback, an older and shorter ops table whose later members are never read, the
 * callback list (add, pop, remove, destroy) and callbacks built from JSON specs. Hugging Face's flow
 * callback and early stopping are test_callbacks.c's, the output callbacks test_callback_output.c's. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "callbacks/callback.h"
#include "callbacks/state.h"
#include "config/args.h"
#include "core/util.h"
#include "testlib.h"

/* --- a recording callback ------------------------------------------------------------------------ */

typedef struct rec_cb {
    ct_callback base;
    char tag;
    char *trace;             /* shared: "A:on_log B:on_log ..." */
    ct_trainer_control seen; /* the control as the last event found it */
    int fail_on;             /* event that fails, or -1 */
    int *destroyed;
} rec_cb;

static ct_status rec_event(ct_callback *cb, const ct_callback_args *a, ct_event e) {
    rec_cb *r = ct_container_of(cb, rec_cb, base);
    size_t n = strlen(r->trace);
    snprintf(r->trace + n, 4096 - n, "%c:%s ", r->tag, ct_event_name(e));
    if (a->control) r->seen = *a->control;
    if ((int)e == r->fail_on) return ct_error(CT_ERR_STATE, "boom %c", r->tag);
    return CT_OK;
}

#define REC_FN(ev, EV)                                                                                                 \
    static ct_status rec_##ev(ct_callback *cb, const ct_callback_args *a) { return rec_event(cb, a, EV); }
REC_FN(init_end, CT_ON_INIT_END)
REC_FN(train_begin, CT_ON_TRAIN_BEGIN)
REC_FN(train_end, CT_ON_TRAIN_END)
REC_FN(epoch_begin, CT_ON_EPOCH_BEGIN)
REC_FN(epoch_end, CT_ON_EPOCH_END)
REC_FN(step_begin, CT_ON_STEP_BEGIN)
REC_FN(substep_end, CT_ON_SUBSTEP_END)
REC_FN(pre_opt, CT_ON_PRE_OPTIMIZER_STEP)
REC_FN(opt, CT_ON_OPTIMIZER_STEP)
REC_FN(step_end, CT_ON_STEP_END)
REC_FN(evaluate, CT_ON_EVALUATE)
REC_FN(predict, CT_ON_PREDICT)
REC_FN(save, CT_ON_SAVE)
REC_FN(log, CT_ON_LOG)
REC_FN(prediction_step, CT_ON_PREDICTION_STEP)

static void rec_destroy(ct_callback *cb) {
    rec_cb *r = ct_container_of(cb, rec_cb, base);
    if (r->destroyed) (*r->destroyed)++;
    free(r);
}

#define REC_OPS_BODY                                                                                                   \
    .on_init_end = rec_init_end, .on_train_begin = rec_train_begin, .on_train_end = rec_train_end,                     \
    .on_epoch_begin = rec_epoch_begin, .on_epoch_end = rec_epoch_end, .on_step_begin = rec_step_begin,                 \
    .on_substep_end = rec_substep_end, .on_pre_optimizer_step = rec_pre_opt, .on_optimizer_step = rec_opt,             \
    .on_step_end = rec_step_end, .on_evaluate = rec_evaluate, .on_predict = rec_predict, .on_save = rec_save,          \
    .on_log = rec_log, .on_prediction_step = rec_prediction_step, .destroy = rec_destroy

static const ct_callback_ops rec_ops_a = {.size = sizeof(ct_callback_ops), .name = "A", REC_OPS_BODY};
static const ct_callback_ops rec_ops_b = {.size = sizeof(ct_callback_ops), .name = "B", REC_OPS_BODY};
static const ct_callback_ops rec_ops_c = {.size = sizeof(ct_callback_ops), .name = "C", REC_OPS_BODY};
/* An older, shorter table: written before on_log existed. Its on_log and destroy must never be
 * read (they are set here only to prove that). */
static const ct_callback_ops rec_ops_old = {.size = offsetof(ct_callback_ops, on_log), .name = "Old", REC_OPS_BODY};

static rec_cb *make_rec(const ct_callback_ops *ops, char tag, char *trace, int *destroyed) {
    rec_cb *r = calloc(1, sizeof *r);
    CT_ASSERT(r);
    r->base.ops = ops;
    r->tag = tag;
    r->trace = trace;
    r->fail_on = -1;
    r->destroyed = destroyed;
    return r;
}

/* --- (a) control resets ----------------------------------------------------------------------------- */

static void test_control_resets(void) {
    ct_training_args args;
    ct_training_args_default(&args);
    ct_trainer_state st;
    CHECK_OK(ct_trainer_state_init(&st));
    static char trace[4096];
    ct_callback_list l = {0};
    rec_cb *r = make_rec(&rec_ops_a, 'A', trace, NULL);
    CHECK_OK(ct_callback_list_add(&l, &r->base));
    for (int e = 0; e < CT_EVENT_COUNT; e++) {
        ct_trainer_control c = {true, true, true, true, true};
        ct_callback_args a = {.args = &args, .state = &st, .control = &c};
        trace[0] = 0;
        CHECK_OK(ct_callbacks_fire(&l, (ct_event)e, &a));
        ct_trainer_control want = {true, true, true, true, true};
        switch (e) {
        case CT_ON_TRAIN_BEGIN: want.should_training_stop = false; break;
        case CT_ON_EPOCH_BEGIN: want.should_epoch_stop = false; break;
        case CT_ON_STEP_BEGIN: want.should_log = want.should_evaluate = want.should_save = false; break;
        case CT_ON_EVALUATE: want.should_evaluate = false; break;
        case CT_ON_SAVE: want.should_save = false; break;
        case CT_ON_LOG: want.should_log = false; break;
        default: break;
        }
        CHECK(memcmp(&c, &want, sizeof c) == 0, "%s: flags after = stop %d epoch %d save %d eval %d log %d",
              ct_event_name((ct_event)e), c.should_training_stop, c.should_epoch_stop, c.should_save, c.should_evaluate,
              c.should_log);
        /* The reset happens before the callbacks run: they see the cleared flags. */
        CHECK(memcmp(&r->seen, &want, sizeof want) == 0, "%s: callback saw flags before the reset",
              ct_event_name((ct_event)e));
    }
    /* A flag a callback raises in the event that resets it survives (the reset comes first). */
    ct_callback *flow;
    CHECK_OK(ct_flow_callback_create(&flow));
    ct_callback_list fl = {0};
    CHECK_OK(ct_callback_list_add(&fl, flow));
    ct_trainer_control c = {0};
    st.max_steps = 1;
    st.global_step = 1;
    ct_callback_args a = {.args = &args, .state = &st, .control = &c};
    CHECK_OK(ct_callbacks_fire(&fl, CT_ON_STEP_END, &a));
    CHECK(c.should_training_stop && c.should_save, "flow at max_steps: stop and save");
    CHECK_OK(ct_callbacks_fire(&fl, CT_ON_TRAIN_BEGIN, &a));
    CHECK(!c.should_training_stop && c.should_save, "train begin clears only should_training_stop");
    /* NULL control: events still dispatch (the reset has nothing to do). */
    ct_callback_args nc = {.args = &args, .state = &st};
    CHECK_OK(ct_callbacks_fire(&l, CT_ON_PREDICTION_STEP, &nc));
    ct_callback_list_free(&l);
    ct_callback_list_free(&fl);
    ct_trainer_state_free(&st);
}

/* --- (b) dispatch order, errors, older tables -------------------------------------------------------- */

static void test_dispatch(void) {
    ct_training_args args;
    ct_training_args_default(&args);
    ct_trainer_state st;
    CHECK_OK(ct_trainer_state_init(&st));
    ct_trainer_control c = {0};
    ct_callback_args a = {.args = &args, .state = &st, .control = &c};
    static char trace[4096];
    int destroyed = 0;
    ct_callback_list l = {0};
    rec_cb *ra = make_rec(&rec_ops_a, 'A', trace, &destroyed);
    rec_cb *rb = make_rec(&rec_ops_b, 'B', trace, &destroyed);
    rec_cb *rc = make_rec(&rec_ops_c, 'C', trace, &destroyed);
    rec_cb *ro = make_rec(&rec_ops_old, 'O', trace, &destroyed);
    CHECK_OK(ct_callback_list_add(&l, &rb->base));
    CHECK_OK(ct_callback_list_add(&l, &ra->base));
    CHECK_OK(ct_callback_list_add(&l, &ro->base));
    CHECK_OK(ct_callback_list_add(&l, &rc->base));
    trace[0] = 0;
    ct_event seq[] = {CT_ON_TRAIN_BEGIN, CT_ON_EPOCH_BEGIN, CT_ON_STEP_BEGIN, CT_ON_STEP_END, CT_ON_LOG, CT_ON_SAVE};
    for (size_t i = 0; i < CT_ARRAY_LEN(seq); i++) CHECK_OK(ct_callbacks_fire(&l, seq[i], &a));
    const char *want = "B:on_train_begin A:on_train_begin O:on_train_begin C:on_train_begin "
                       "B:on_epoch_begin A:on_epoch_begin O:on_epoch_begin C:on_epoch_begin "
                       "B:on_step_begin A:on_step_begin O:on_step_begin C:on_step_begin "
                       "B:on_step_end A:on_step_end O:on_step_end C:on_step_end "
                       "B:on_log A:on_log C:on_log "
                       "B:on_save A:on_save O:on_save C:on_save ";
    CHECK(strcmp(trace, want) == 0, "dispatch order:\n got  %s\n want %s", trace, want);

    /* The first failure stops the event and names the callback and the event. */
    ra->fail_on = CT_ON_STEP_END;
    trace[0] = 0;
    CHECK_ERR(ct_callbacks_fire(&l, CT_ON_STEP_END, &a), CT_ERR_STATE, "callback 'A' on_step_end: boom A");
    CHECK(strcmp(trace, "B:on_step_end A:on_step_end ") == 0, "callbacks after a failure do not run: %s", trace);

    /* An older table's callback is freed with free(), not its (unreadable) destroy. */
    ct_callback_list_free(&l);
    CHECK(destroyed == 3, "destroy called for the 3 current tables, got %d", destroyed);
    CHECK(l.n == 0 && l.items == NULL, "list emptied");

    /* Event names: Hugging Face's method names, all distinct. */
    for (int e = 0; e < CT_EVENT_COUNT; e++) {
        CHECK(strncmp(ct_event_name((ct_event)e), "on_", 3) == 0, "event %d name %s", e, ct_event_name((ct_event)e));
        for (int f = 0; f < e; f++)
            CHECK(strcmp(ct_event_name((ct_event)e), ct_event_name((ct_event)f)) != 0, "names %d and %d equal", e, f);
    }
    CHECK(strcmp(ct_event_name(CT_ON_PRE_OPTIMIZER_STEP), "on_pre_optimizer_step") == 0, "pre-optimizer name");
    CHECK(strcmp(ct_event_name(CT_ON_PREDICTION_STEP), "on_prediction_step") == 0, "prediction step name");
    ct_trainer_state_free(&st);
}

/* --- (c) the list ------------------------------------------------------------------------------------- */

static void test_list(void) {
    static char trace[4096];
    int destroyed = 0;
    ct_callback_list l = {0};
    rec_cb *a1 = make_rec(&rec_ops_a, '1', trace, &destroyed);
    rec_cb *b = make_rec(&rec_ops_b, 'b', trace, &destroyed);
    rec_cb *a2 = make_rec(&rec_ops_a, '2', trace, &destroyed);
    CHECK_OK(ct_callback_list_add(&l, &a1->base));
    CHECK_OK(ct_callback_list_add(&l, &b->base));
    CHECK_OK(ct_callback_list_add(&l, &a2->base));
    /* Past the initial capacity. */
    for (int i = 0; i < 20; i++)
        CHECK_OK(ct_callback_list_add(&l, &make_rec(&rec_ops_c, 'c', trace, &destroyed)->base));
    CHECK(l.n == 23, "23 callbacks, got %d", l.n);
    CHECK(ct_callback_list_find(&l, "A") == &a1->base, "find returns the first of a name");
    CHECK(ct_callback_list_find(&l, "Z") == NULL, "find of a missing name");
    CHECK(strcmp(ct_callback_name(&b->base), "B") == 0, "name");
    ct_callback *p = ct_callback_list_pop(&l, "A");
    CHECK(p == &a1->base && l.n == 22 && l.items[0] == &b->base && l.items[1] == &a2->base, "pop takes the first A");
    CHECK(destroyed == 0, "pop does not destroy");
    CHECK(ct_callback_list_find(&l, "A") == &a2->base, "the second A is found next");
    CHECK(ct_callback_list_remove(&l, "B") && destroyed == 1 && l.n == 21 && l.items[0] == &a2->base,
          "remove destroys and shifts");
    CHECK(!ct_callback_list_remove(&l, "B") && destroyed == 1, "remove of a missing name");
    CHECK(ct_callback_list_pop(&l, "nothing") == NULL, "pop of a missing name");
    ct_callback_free(p);
    CHECK(destroyed == 2, "ct_callback_free destroys");
    ct_callback_free(NULL);
    ct_callback_list_free(&l);
    CHECK(destroyed == 23, "list_free destroys all, got %d", destroyed);
    ct_callback_list_free(&l); /* twice is harmless */
}

/* --- callbacks from JSON ----------------------------------------------------------------------------- */

static void test_from_json(void) {
    json_t *spec;
    ct_callback *cb = NULL;
#define FROM(text) (spec = json_loads(text, 0, NULL), ct_callback_from_json(spec, "callbacks[1]", &cb))
    CHECK_OK(FROM("{\"type\": \"early_stopping\"}"));
    json_t *s = NULL;
    if (cb) CHECK_OK(cb->ops->save_state(cb, &s));
    json_int_t pat = 0;
    double thr = -1;
    json_unpack(s, "{s:{s:I,s:F}}", "args", "early_stopping_patience", &pat, "early_stopping_threshold", &thr);
    CHECK(pat == 1 && thr == 0.0, "HF's defaults: patience %lld, threshold %g", (long long)pat, thr);
    CHECK(strcmp(ct_callback_name(cb), CT_EARLY_STOPPING_CALLBACK_NAME) == 0, "name");
    json_decref(s);
    ct_callback_free(cb);
    json_decref(spec);
    CHECK_OK(FROM("{\"type\": \"early_stopping\", \"early_stopping_patience\": 4, "
                  "\"early_stopping_threshold\": 0.01}"));
    s = NULL;
    if (cb) CHECK_OK(cb->ops->save_state(cb, &s));
    json_unpack(s, "{s:{s:I,s:F}}", "args", "early_stopping_patience", &pat, "early_stopping_threshold", &thr);
    CHECK(pat == 4 && thr == 0.01, "patience %lld, threshold %g", (long long)pat, thr);
    json_decref(s);
    ct_callback_free(cb);
    json_decref(spec);
    CHECK_OK(FROM("{\"type\": \"jsonl\", \"path\": \"/tmp/x.jsonl\"}"));
    CHECK(cb && strcmp(ct_callback_name(cb), CT_JSONL_CALLBACK_NAME) == 0, "jsonl");
    ct_callback_free(cb);
    json_decref(spec);
    CHECK_OK(FROM("{\"type\": \"printer\"}"));
    CHECK(cb && strcmp(ct_callback_name(cb), CT_PRINTER_CALLBACK_NAME) == 0, "printer");
    ct_callback_free(cb);
    json_decref(spec);
    CHECK_OK(FROM("{\"type\": \"progress\"}"));
    CHECK(cb && strcmp(ct_callback_name(cb), CT_PROGRESS_CALLBACK_NAME) == 0, "progress");
    ct_callback_free(cb);
    json_decref(spec);

    CHECK_ERR(FROM("{\"type\": \"early_stoping\"}"), CT_ERR_CONFIG,
              "callbacks[1].type: unknown callback 'early_stoping', did you mean 'early_stopping'?");
    json_decref(spec);
    CHECK_ERR(FROM("{\"type\": \"tensorboard\"}"), CT_ERR_CONFIG, "unknown callback 'tensorboard'",
              "(known: early_stopping, jsonl, printer, progress)");
    json_decref(spec);
    CHECK_ERR(FROM("{\"type\": \"early_stopping\", \"early_stopping_patiense\": 2}"), CT_ERR_CONFIG,
              "callbacks[1]: unknown key 'early_stopping_patiense', did you mean 'early_stopping_patience'?");
    json_decref(spec);
    CHECK_ERR(FROM("{\"type\": \"early_stopping\", \"early_stopping_patience\": 0}"), CT_ERR_CONFIG,
              "callbacks[1].early_stopping_patience: must be at least 1, got 0");
    json_decref(spec);
    CHECK_ERR(FROM("{\"type\": \"early_stopping\", \"early_stopping_threshold\": \"big\"}"), CT_ERR_CONFIG,
              "callbacks[1].early_stopping_threshold: expected a number");
    json_decref(spec);
    CHECK_ERR(FROM("{\"type\": \"jsonl\"}"), CT_ERR_CONFIG, "callbacks[1]: missing required key 'path'");
    json_decref(spec);
    CHECK_ERR(FROM("{\"type\": \"jsonl\", \"path\": \"\"}"), CT_ERR_CONFIG, "callbacks[1].path: must not be empty");
    json_decref(spec);
    CHECK_ERR(FROM("{\"type\": \"printer\", \"stream\": \"stdout\"}"), CT_ERR_CONFIG,
              "callbacks[1]: unknown key 'stream'");
    json_decref(spec);
    CHECK_ERR(FROM("[1]"), CT_ERR_CONFIG, "callbacks[1]: expected an object");
    json_decref(spec);
    CHECK_ERR(FROM("{\"kind\": \"printer\"}"), CT_ERR_CONFIG, "callbacks[1]: missing required key 'type'");
    json_decref(spec);
#undef FROM
}

int main(void) {
    ct_test_begin("test_callback_dispatch");
    test_control_resets();
    test_dispatch();
    test_list();
    test_from_json();
    return ct_test_finish();
}
