/* Vtables: the one check of an ops table where it enters the library, and the test for a member.
 *
 * Every extension point (trainer hooks, datasets, callbacks, metrics, losses, layers, optimizers,
 * schedulers, transforms) is a const table whose first member is its size: members are only ever
 * appended, and a member past `size` is treated as NULL, so a table compiled against an older header
 * keeps working. That rule makes a forgotten `.size` silent (every member looks absent), so each
 * table is checked once where it is registered, the same way for all: a NULL table, a size of 0 or
 * one smaller than the smallest table the library accepts (its required members), or a required
 * member left NULL is CT_ERR_INVALID_ARG with a message naming the table, the member and the fix,
 * e.g. "ct_trainer_ops.size is 0: set .size = sizeof(ct_trainer_ops)". */
#ifndef CT_VTABLE_H
#define CT_VTABLE_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"

/* The end of `member` in table type `type`: the smallest size of a table that has it. */
#define CT_OPS_END(type, member) (offsetof(type, member) + sizeof(((const type *)0)->member))
/* Whether table `ops` of type `type` was written with `member` and set it. */
#define CT_OPS_HAS(ops, type, member) ((ops)->size >= CT_OPS_END(type, member) && (ops)->member)

/* Checks a table's size: `ops` (NULL is an error), its `size`, and `min_size`, the end of the
 * smallest table accepted. `table` is the type's name ("ct_dataset_ops"); the message starts with
 * it, and the caller prefixes what owns the table (the dataset's source, the callback's name). */
ct_status ct_ops_check_size(const char *table, const void *ops, size_t size, size_t min_size);
/* Checks a required member: `set` is whether the table has it (CT_OPS_HAS); `what` says what the
 * member is for, ending the message ("fetches the samples"). */
ct_status ct_ops_check_member(const char *table, const char *member, bool set, const char *what);

/* Both checks for the common case: the table's size, then each listed required member. */
#define CT_OPS_CHECK_SIZE(type, ops, min_member)                                                    \
    ct_ops_check_size(#type, (ops), (ops) ? (ops)->size : 0, CT_OPS_END(type, min_member))
#define CT_OPS_CHECK_MEMBER(type, ops, member, what)                                                \
    ct_ops_check_member(#type, #member, CT_OPS_HAS(ops, type, member), (what))

#endif
