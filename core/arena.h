/* Arena: bump allocation of activation buffers, released all at once.
 *
 * Modules reserve their activation and workspace buffers from the model's arena when the model is
 * set up for its largest batch. Nothing is allocated after that, so the training step itself never
 * calls malloc. Blocks never move, so pointers handed out stay valid until ct_arena_reset. */
#ifndef CT_ARENA_H
#define CT_ARENA_H

#include <stddef.h>

#include "core/device.h"
#include "core/status.h"

typedef struct ct_arena_block ct_arena_block;

typedef struct ct_arena {
    ct_device device;
    ct_arena_block *blocks;
    size_t bytes; /* total handed out, for memory reports */
} ct_arena;

void ct_arena_init(ct_arena *a, ct_device dev);
/* Zeroed, 64-byte aligned memory that lives until reset. */
ct_status ct_arena_alloc(ct_arena *a, size_t bytes, void **out);
/* Frees every block. */
void ct_arena_reset(ct_arena *a);

#endif
