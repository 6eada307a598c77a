/* Metric states across processes: each field is all-reduced with its declared reduction (sum, min,
 * max), so every process ends with the state of the whole evaluation set; per-sample records are
 * gathered to the root in rank order, which is dataset order because evaluation shards are
 * contiguous. Counts are int64 and sums float64, so counts are exact and sums differ from a single
 * process's only by the order of additions. */
#include <stdlib.h>
#include <string.h>

#include "eval/metric.h"

/* The layout of a state: its field counts and record width, which every process must share. */
static ct_status check_layout(const ct_metric *m, ct_comm *c) {
    int64_t lo[3] = {m->n_counts, m->n_sums, m->samples.width}, hi[3];
    memcpy(hi, lo, sizeof lo);
    ct_comm_set_label(c, "metric '%s': state layout (minimum)", ct_metric_name(m));
    CT_TRY(ct_comm_all_reduce_i64(c, lo, 3, CT_MIN));
    ct_comm_set_label(c, "metric '%s': state layout (maximum)", ct_metric_name(m));
    CT_TRY(ct_comm_all_reduce_i64(c, hi, 3, CT_MAX));
    if (memcmp(lo, hi, sizeof lo) != 0)
        return ct_error(CT_ERR_STATE,
                        "metric '%s': its state has %lld to %lld counts, %lld to %lld sums and record width %lld to "
                        "%lld on different processes (rank %d/%d has %lld, %lld, %lld)",
                        ct_metric_name(m), (long long)lo[0], (long long)hi[0], (long long)lo[1], (long long)hi[1],
                        (long long)lo[2], (long long)hi[2], c->rank, c->world_size, (long long)m->n_counts,
                        (long long)m->n_sums, (long long)m->samples.width);
    return CT_OK;
}

static const char *reduce_name(ct_reduce op) { return op == CT_SUM ? "sum" : op == CT_MIN ? "minimum" : "maximum"; }

/* Fields of one reduction, packed into a scratch array, reduced, and unpacked. */
static ct_status reduce_counts(ct_metric *m, ct_comm *c, ct_reduce op, ct_reduce_op field_op, int64_t *scratch) {
    int64_t k = 0;
    for (int64_t i = 0; i < m->n_counts; i++)
        if (m->count_ops[i] == field_op) scratch[k++] = m->counts[i];
    if (k == 0) return CT_OK;
    ct_comm_set_label(c, "metric '%s': counts (%s)", ct_metric_name(m), reduce_name(op));
    CT_TRY(ct_comm_all_reduce_i64(c, scratch, k, op));
    k = 0;
    for (int64_t i = 0; i < m->n_counts; i++)
        if (m->count_ops[i] == field_op) m->counts[i] = scratch[k++];
    return CT_OK;
}

static ct_status reduce_sums(ct_metric *m, ct_comm *c, ct_reduce op, ct_reduce_op field_op, double *scratch) {
    int64_t k = 0;
    for (int64_t i = 0; i < m->n_sums; i++)
        if (m->sum_ops[i] == field_op) scratch[k++] = m->sums[i];
    if (k == 0) return CT_OK;
    ct_comm_set_label(c, "metric '%s': sums (%s)", ct_metric_name(m), reduce_name(op));
    CT_TRY(ct_comm_all_reduce_f64(c, scratch, k, op));
    k = 0;
    for (int64_t i = 0; i < m->n_sums; i++)
        if (m->sum_ops[i] == field_op) m->sums[i] = scratch[k++];
    return CT_OK;
}

/* Records of every process, concatenated in rank order, become the root's records. */
static ct_status gather_records(ct_metric *m, ct_comm *c, int root) {
    if (m->samples.width == 0) return CT_OK;
    int64_t n = m->samples.n * m->samples.width;
    ct_tensor mine = ct_tensor_view(m->samples.values, CT_F64, CT_CPU, 1, (int64_t[]){n}), all = {0};
    ct_comm_set_label(c, "metric '%s': per-sample records to rank %d", ct_metric_name(m), root);
    CT_TRY(ct_comm_gather_v(c, &mine, root, &all));
    if (c->rank != root) return CT_OK;
    int64_t total = ct_tensor_numel(&all) / m->samples.width;
    m->samples.n = 0;
    ct_status s = ct_metric_samples_reserve(m, total);
    if (s == CT_OK) {
        memcpy(m->samples.values, all.data, (size_t)ct_tensor_numel(&all) * sizeof(double));
        m->samples.n = total;
    }
    ct_tensor_free(&all);
    return s;
}

ct_status ct_metric_reduce(ct_metric *m, ct_comm *c, int root) {
    if (c->world_size <= 1) return CT_OK;
    CT_TRY(check_layout(m, c));
    int64_t most = m->n_counts > m->n_sums ? m->n_counts : m->n_sums;
    void *scratch = malloc((size_t)(most ? most : 1) * 8);
    if (!scratch) return ct_error(CT_ERR_NOMEM, "metric '%s': out of memory", ct_metric_name(m));
    static const struct {
        ct_reduce op;
        ct_reduce_op field;
    } pairs[] = {{CT_SUM, CT_REDUCE_SUM}, {CT_MIN, CT_REDUCE_MIN}, {CT_MAX, CT_REDUCE_MAX}};
    ct_status s = CT_OK;
    for (size_t i = 0; i < 3 && s == CT_OK; i++) {
        s = reduce_counts(m, c, pairs[i].op, pairs[i].field, scratch);
        if (s == CT_OK) s = reduce_sums(m, c, pairs[i].op, pairs[i].field, scratch);
    }
    free(scratch);
    if (s == CT_OK) s = gather_records(m, c, root);
    return s;
}

ct_status ct_metric_set_reduce(ct_metric_set *set, ct_comm *c, int root) {
    for (int i = 0; i < set->n; i++) CT_TRY(ct_metric_reduce(set->items[i], c, root));
    return CT_OK;
}
