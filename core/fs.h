/* File-system helpers shared by every area that writes files (checkpoints, models, logs, results,
 * data caches, plots): directory creation, THE durable atomic file write, and removal of a tree;
 * and the one way every area opens a file to read it (regular files only, never blocking).
 *
 * Atomic write: the bytes go to a temporary file beside the target (same directory, so the rename
 * is atomic), named after the host and process so that writers on several nodes of a shared file
 * system never collide; it is fsync'd, renamed over the target, and the directory is fsync'd, so
 * after a crash or power loss the target is either the old file or the whole new one. On any
 * failure the temporary is removed and the target left as it was. Bytes written through
 * ct_atomic_file_write or its stdio stream pass ct_io_write (core/io_fault.h), so tests can make the
 * disk "fill up".
 *
 * Not for the files of a checkpoint: they are written into <dir>.tmp with ct_write_file, and the
 * directory is synced and renamed as a whole (checkpoint/checkpoint_io.h). */
#ifndef CT_FS_H
#define CT_FS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* mkdir -p: creates dir and its missing parents; CT_ERR_IO naming the part that failed. */
ct_status ct_make_dirs(const char *dir);

/* The last component of a path into buf, trailing slashes ignored; "." and ".." become the name of
 * the directory they stand for (what a person calls a run's output_dir). */
void ct_path_base_name(const char *path, char *buf, size_t cap);
/* The directory holding path ("." for a bare name), trailing slashes ignored. */
void ct_path_parent(const char *path, char *out, size_t cap);

/* fsync of a file or a directory by path (a file system that cannot sync directories is no error). */
ct_status ct_fsync_path(const char *path);

/* One atomic replacement of `path` in progress. Open it, then either write bytes through it
 * (ct_atomic_file_write, or the stdio stream of ct_atomic_file_stream), or let a library that writes
 * by file name (HDF5, cairo) write the file named `tmp` (after ct_atomic_file_close_fd); then commit
 * or discard. Discard after a failed commit is harmless, so `commit, on error discard` and
 * `discard on every early exit` both work. */
typedef struct ct_atomic_file {
    int fd;       /* open on tmp until commit or close_fd; -1 after */
    FILE *stream; /* over fd, once asked for: its writes also pass ct_io_write */
    int err;      /* the errno of the stream's first failed write, reported by commit */
    char path[4096];
    char tmp[4352];
} ct_atomic_file;

/* A state that discard accepts before open was called: `ct_atomic_file a = CT_ATOMIC_FILE_INIT;`. */
#define CT_ATOMIC_FILE_INIT {.fd = -1}

/* Creates the temporary (mode 0666 less the umask, as fopen would); a temporary of this host and pid
 * left by a crashed process is replaced. On failure nothing is left, and the message names both
 * files and the errno: "cannot write 'PATH': cannot create 'TMP': No such file or directory". */
ct_status ct_atomic_file_open(ct_atomic_file *a, const char *path);
/* "cannot write 'PATH': <errno text>" on failure; the caller then discards. */
ct_status ct_atomic_file_write(ct_atomic_file *a, const void *data, size_t n);
/* The temporary as a stdio stream (owned by a: do not fclose it); NULL with the error set. Its
 * failed writes are remembered and reported by commit with their errno. */
FILE *ct_atomic_file_stream(ct_atomic_file *a);
/* Closes the descriptor (and stream) so that another library can open a->tmp by name. */
ct_status ct_atomic_file_close_fd(ct_atomic_file *a);
/* Flushes, fsyncs and closes the temporary, renames it to path and fsyncs the directory. On failure
 * the temporary is still there: discard it. */
ct_status ct_atomic_file_commit(ct_atomic_file *a);
/* Closes and removes the temporary; path is untouched. */
void ct_atomic_file_discard(ct_atomic_file *a);

/* Whether a directory entry's name is the temporary of an atomic write that this host's process
 * left when it died (a crash between open and commit): "<target>.tmp-<this host>-<pid>" with no
 * process of that pid running. A temporary of another host is never called an orphan: no one here
 * can tell whether its writer still runs. */
bool ct_atomic_file_is_orphan(const char *name);

/* The whole of data as the new content of path, atomically and durably (the above in one call). */
ct_status ct_write_file_atomic(const char *path, const void *data, size_t n);
/* The whole of data as the content of path (created, or truncated), with plain write(): neither
 * atomic nor synced, so only for a file inside a directory that is itself synced and committed as a
 * whole (a checkpoint's <dir>.tmp: the manifest fsyncs every file, then the directory is renamed
 * into place). CT_ERR_IO with errno's text ("cannot write 'PATH': No space left on device"); a file
 * this call created or truncated and could not finish is removed. The bytes pass ct_io_write. */
ct_status ct_write_file(const char *path, const void *data, size_t n);

/* Opening a file to read it: every path ctrainer reads (configs, data, tokenizer input, checkpoint
 * files and manifests, models, safetensors, JSON state) goes through one of these, so that a path
 * naming a FIFO, a device or a socket is refused instead of read: open() of a FIFO without a writer
 * blocks forever, and a device may never end. The file is opened with O_NONBLOCK (which keeps
 * open() itself from blocking), fstat'd, refused unless it is a regular file, and only then
 * switched back to blocking reads. Messages: "PATH: cannot open: No such file or directory",
 * "PATH: cannot read: Is a directory", "PATH: cannot read: Is a FIFO (named pipe), not a regular
 * file" (a character or block device, a socket likewise), CT_ERR_IO. */
ct_status ct_open_read(const char *path, int *fd);
/* The same as a stdio stream opened "rb" (the caller fcloses it). */
ct_status ct_fopen_read(const char *path, FILE **f);
/* The same check for libraries that open by name (HDF5, zlib, jansson), without opening: stat()
 * never blocks. Call it right before handing them the path. */
ct_status ct_check_regular_file(const char *path);

/* rm -rf path without following symbolic links; a path that does not exist is no error. Callers
 * decide what they own: this never looks at what it deletes. */
ct_status ct_remove_tree(const char *path);

#ifdef __cplusplus
}
#endif

#endif
