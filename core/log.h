/* The library's diagnostic messages: a tiny process-wide logger, in the manner of Python's logging
 * as transformers uses it.
 *
 * Levels are Python's numbers (debug 10 < info 20 < warning 30 < error 40 < critical 50; the values
 * of ct_log_level in config/args.h). A message prints when its level is at least the threshold,
 * which starts at warning, as transformers' logging does; so a library user sees warnings and errors
 * and nothing else until the Trainer (log_level / log_level_replica) or the program says otherwise.
 * Each call writes one line to stderr with a single fwrite, so lines from threads do not interleave:
 * info lines as they are, the others after "debug: ", "warning: ", "error: " or "critical: ". In a
 * job of several processes (ct_log_set_rank with world > 1) every line starts with "[rank R/W] ".
 *
 * Data-parallel roles (Hugging Face's TrainingArguments.should_log and get_process_log_level): the
 * process that logs is the node's first (log_on_each_node) or the world's first; it takes log_level,
 * the others log_level_replica, and "passive" (CT_LOG_LEVEL_PASSIVE) leaves the threshold alone.
 *
 * The threshold and the rank are atomics: reading them never races, and setting them is meant for
 * start-up. Lines longer than CT_LOG_LINE_MAX are cut (and end in "..."). Nothing allocates. */
#ifndef CT_LOG_H
#define CT_LOG_H

#include <stdarg.h>
#include <stdbool.h>

#define CT_LOG_LEVEL_PASSIVE (-1)
#define CT_LOG_LEVEL_DEBUG 10
#define CT_LOG_LEVEL_INFO 20
#define CT_LOG_LEVEL_WARNING 30
#define CT_LOG_LEVEL_ERROR 40
#define CT_LOG_LEVEL_CRITICAL 50

#define CT_LOG_LINE_MAX 2048

#ifdef __cplusplus
extern "C" {
#endif

/* The threshold: messages below it are dropped. A negative level (passive) changes nothing. */
void ct_log_set_level(int level);
int ct_log_get_level(void);
bool ct_log_enabled(int level);

/* This process's place in the job; world > 1 prefixes every line with "[rank R/W] ". */
void ct_log_set_rank(int rank, int world);

/* One line at `level` (printf-style; no trailing newline needed). */
void ct_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ct_logv(int level, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
void ct_log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void ct_log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void ct_log_warning(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void ct_log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void ct_log_critical(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Hugging Face's should_log: log_on_each_node ? local_rank == 0 : rank == 0. */
bool ct_log_should_log(int rank, int local_rank, bool log_on_each_node);
/* Hugging Face's get_process_log_level: should_log ? log_level : log_level_replica, where passive
 * stands for the current threshold. */
int ct_log_process_level(bool should_log, int log_level, int log_level_replica);

#ifdef __cplusplus
}
#endif

#endif
