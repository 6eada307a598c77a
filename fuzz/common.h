/* What the fuzz targets share: a reader that takes numbers and byte ranges off the front of a fuzz
 * input (libFuzzer's FuzzedDataProvider, in C) and its inverse for seeds, a private temporary
 * directory for readers that only take a path, the check that no HDF5 handle stays open, and the
 * one-time set-up every target needs (quiet logs, one thread).
 *
 * A target is a file fuzz/fuzz_<name>.c defining LLVMFuzzerTestOneInput; see docs/fuzzing.md. The
 * rule they check: whatever the bytes, the library answers with a status (errors are fine) and never
 * crashes, leaks, reads or writes out of bounds, or hits undefined behaviour or a CT_ASSERT. */
#ifndef CT_FUZZ_COMMON_H
#define CT_FUZZ_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

/* A cursor over the fuzz input. Reads past the end give zeros (and empty ranges), so any input is a
 * valid encoding of something. */
typedef struct fz_input {
    const uint8_t *p;
    size_t n;
} fz_input;

uint8_t fz_u8(fz_input *in);
uint16_t fz_u16(fz_input *in);
uint32_t fz_u32(fz_input *in);
uint64_t fz_u64(fz_input *in);
bool fz_bool(fz_input *in);
/* A value in [lo, hi] (inclusive). */
int64_t fz_range(fz_input *in, int64_t lo, int64_t hi);
/* One of n choices (0 .. n-1). */
int fz_pick(fz_input *in, int n);
/* A double from 8 raw bytes: any bit pattern, NaN and infinities included. */
double fz_f64(fz_input *in);
/* The next up-to-`max` bytes as a range of the input (length from one byte of the input). */
const uint8_t *fz_bytes(fz_input *in, size_t max, size_t *len);
/* Everything left. */
const uint8_t *fz_rest(fz_input *in, size_t *len);

/* The other direction, for seeds: bytes that the readers above decode to the given values, so a
 * target can write inputs that describe valid files (CT_FUZZ_WRITE_SEEDS, below). */
typedef struct fz_output {
    uint8_t *p;
    size_t n, cap;
} fz_output;

void fzo_u8(fz_output *o, uint8_t v);
void fzo_u16(fz_output *o, uint16_t v);
void fzo_u32(fz_output *o, uint32_t v);
void fzo_u64(fz_output *o, uint64_t v);
/* What fz_range(in, lo, hi) reads as v (lo <= v <= hi). */
void fzo_range(fz_output *o, int64_t lo, int64_t hi, int64_t v);
/* What fz_bytes(in, max, ...) reads as these len bytes (len <= max). */
void fzo_bytes(fz_output *o, size_t max, const void *data, size_t len);
/* Raw bytes (for fz_rest, or a target's own framing). */
void fzo_raw(fz_output *o, const void *data, size_t len);
void fzo_free(fz_output *o);

/* Seeds a target makes itself (from files the project writes, so they stay valid as formats
 * evolve): when the environment variable CT_FUZZ_WRITE_SEEDS names a directory, fz_seed writes the
 * bytes there as `name`; otherwise it does nothing. scripts/fuzz.sh --seeds uses it. */
bool fz_writing_seeds(void);
void fz_seed(const char *name, const void *data, size_t n);
/* The whole content of a file (malloc'd, *n bytes; aborts on failure: harness files only). */
uint8_t *fz_read_file(const char *path, size_t *n);

/* The process's temporary directory (on /dev/shm when it is writable: memory, no disk), made on the
 * first call and removed with its contents at exit. */
const char *fz_tmpdir(void);
/* dir/name into buf (aborts when it does not fit: a harness bug). */
const char *fz_path(char *buf, size_t cap, const char *name);
/* Writes the bytes to path, replacing it (aborts on failure: the harness's own I/O must work). */
void fz_write_file(const char *path, const void *data, size_t n);
/* Removes every file in the temporary directory (between inputs). */
void fz_clean_tmpdir(void);
/* Removes a directory and everything in it (nothing when it does not exist). */
void fz_remove_tree(const char *dir);

/* Logs off below errors, OpenMP and OpenBLAS on one thread, HDF5's error printing off. Idempotent. */
void fz_init(void);

/* HDF5 handles left open: after an input every file, group, dataset, attribute, datatype, dataspace
 * and property list the library opened must be closed again. An open handle is no leak to
 * LeakSanitizer (HDF5's tables still point at it), but over a long run it is one: memory grows with
 * every file read. fz_h5_mark_handles records the counts (fz_init does, and a target whose set-up
 * keeps handles open calls it after); fz_h5_check_handles aborts naming the kind that grew since. */
void fz_h5_mark_handles(void);
void fz_h5_check_handles(void);

/* With the environment variable CT_FUZZ_VERBOSE set, prints what a call answered (to check by hand
 * what an input reaches: `CT_FUZZ_VERBOSE=1 build-fuzz/fuzz/fuzz_x input`). Returns s. */
ct_status fz_report(const char *what, ct_status s);

/* A status the harness itself cannot go on without (say, building its fixed model): prints the
 * message and aborts, which libFuzzer reports. Only for set-up, never for the input's answers. */
void fz_check(ct_status s, const char *what);

#endif
