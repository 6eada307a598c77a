/* Rank 0's JSON (an evaluation's metrics, a stop message) to every process, so that decisions taken
 * from it (best model, early stopping, a plateau scheduler) agree everywhere. */
#include <stdlib.h>
#include <string.h>

#include "trainer/trainer_impl.h"

/* Rank 0 computed the metrics (it holds the gathered records); every process gets its values.
 * One broadcast of a fixed block carries the text's length and its first SHARE_INLINE bytes (a
 * metrics message fits); only a longer text takes a second one for the rest. Across hosts each
 * collective costs a link delay, and this runs at every evaluation. */
enum { SHARE_BLOCK = 4096, SHARE_INLINE = SHARE_BLOCK - 8 };

ct_status ct_trainer_share_json(ct_trainer *t, json_t **m) {
    if (t->world_size <= 1) return CT_OK;
    char *text = t->rank == 0 ? json_dumps(*m, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
    if (t->rank == 0 && !text) return ct_error(CT_ERR_NOMEM, "out of memory");
    int64_t words = SHARE_BLOCK / 8;
    ct_tensor head = {0}, rest = {0};
    ct_status s = ct_tensor_alloc(&head, CT_I64, CT_CPU, 1, &words);
    int64_t *len = head.data;
    if (s == CT_OK && text) {
        *len = (int64_t)strlen(text) + 1;
        memcpy(len + 1, text, (size_t)(*len < SHARE_INLINE ? *len : SHARE_INLINE));
    }
    if (s == CT_OK) ct_comm_set_label(t->comm, "metrics from rank 0");
    if (s == CT_OK) s = ct_comm_broadcast(t->comm, &head, 0);
    char *got = NULL;
    if (s == CT_OK && *len > SHARE_INLINE) {
        int64_t more = (*len - SHARE_INLINE + 7) / 8;
        s = ct_tensor_alloc(&rest, CT_I64, CT_CPU, 1, &more);
        if (s == CT_OK && text) memcpy(rest.data, text + SHARE_INLINE, (size_t)(*len - SHARE_INLINE));
        if (s == CT_OK) ct_comm_set_label(t->comm, "metrics from rank 0 (the rest)");
        if (s == CT_OK) s = ct_comm_broadcast(t->comm, &rest, 0);
        if (s == CT_OK && t->rank != 0 && !(got = malloc((size_t)*len))) s = ct_error(CT_ERR_NOMEM, "out of memory");
        if (got) {
            memcpy(got, len + 1, SHARE_INLINE);
            memcpy(got + SHARE_INLINE, rest.data, (size_t)(*len - SHARE_INLINE));
        }
    }
    free(text);
    if (s == CT_OK && t->rank != 0) {
        const char *in = got ? got : (const char *)(len + 1);
        json_error_t err;
        json_t *shared = *len >= 1 && in[*len - 1] == 0 ? json_loads(in, 0, &err) : NULL;
        if (!shared) s = ct_error(CT_ERR_FORMAT, "the metrics broadcast from rank 0 do not parse");
        else {
            json_decref(*m);
            *m = shared;
        }
    }
    free(got);
    ct_tensor_free(&head);
    ct_tensor_free(&rest);
    return s;
}
