/* One heap block per request: activation buffers are few and large, so a list is enough and keeps
 * each buffer separately visible to ASan. */
#include "core/arena.h"

#include <stdlib.h>

#include "core/tensor.h"

struct ct_arena_block {
    ct_arena_block *next;
    void *data;
};

void ct_arena_init(ct_arena *a, ct_device dev) {
    a->device = dev;
    a->blocks = NULL;
    a->bytes = 0;
}

ct_status ct_arena_alloc(ct_arena *a, size_t bytes, void **out) {
    CT_TRY(ct_device_check(a->device));
    ct_arena_block *b = malloc(sizeof *b);
    if (!b) return ct_error(CT_ERR_NOMEM, "arena: out of memory");
    ct_status s = ct_device_alloc(a->device, bytes, &b->data);
    if (s != CT_OK) {
        free(b);
        return ct_error_prefix(s, "arena: ");
    }
    b->next = a->blocks;
    a->blocks = b;
    a->bytes += bytes;
    *out = b->data;
    return CT_OK;
}

void ct_arena_reset(ct_arena *a) {
    while (a->blocks) {
        ct_arena_block *next = a->blocks->next;
        ct_device_free(a->device, a->blocks->data);
        free(a->blocks);
        a->blocks = next;
    }
    a->bytes = 0;
}
