/* The vtable checks of core/vtable.h: one wording for every table, so a user who forgot `.size` in
 * one table recognises the same message in another. */
#include "core/vtable.h"

ct_status ct_ops_check_size(const char *table, const void *ops, size_t size, size_t min_size) {
    if (!ops) return ct_error(CT_ERR_INVALID_ARG, "%s is NULL: pass a table (static const %s my_ops = {.size = "
                              "sizeof(%s), ...})", table, table, table);
    if (size == 0)
        return ct_error(CT_ERR_INVALID_ARG, "%s.size is 0: set .size = sizeof(%s)", table, table);
    if (size < min_size)
        return ct_error(CT_ERR_INVALID_ARG, "%s.size is %zu, smaller than the smallest %s (%zu bytes, up to its "
                        "required members): set .size = sizeof(%s)", table, size, table, min_size, table);
    return CT_OK;
}

ct_status ct_ops_check_member(const char *table, const char *member, bool set, const char *what) {
    if (set) return CT_OK;
    return ct_error(CT_ERR_INVALID_ARG, "%s.%s is NULL: it is required (it %s); set .%s", table, member, what,
                    member);
}
