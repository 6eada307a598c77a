/* File-system helpers (see fs.h): directories, the one durable atomic write, tree removal. */
#define _GNU_SOURCE /* nftw, fopencookie */
#include "core/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/io_fault.h"

ct_status ct_make_dirs(const char *dir) {
    char path[4096];
    if (!dir[0]) return ct_error(CT_ERR_INVALID_ARG, "cannot create a directory with an empty name");
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return ct_error(CT_ERR_INVALID_ARG, "path too long: %s", dir);
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char c = *p;
        *p = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return ct_error(CT_ERR_IO, "cannot create directory '%s': %s", path, strerror(errno));
        *p = c;
        if (!c) break;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return ct_error(CT_ERR_IO, "'%s' is not a directory", dir);
    return CT_OK;
}

void ct_path_base_name(const char *path, char *buf, size_t cap) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t start = n;
    while (start > 0 && path[start - 1] != '/') start--;
    snprintf(buf, cap, "%.*s", (int)(n - start), path + start);
    char resolved[PATH_MAX];
    if ((strcmp(buf, ".") == 0 || strcmp(buf, "..") == 0) && realpath(path, resolved) && strcmp(resolved, "/") != 0)
        snprintf(buf, cap, "%s", strrchr(resolved, '/') + 1);
}

void ct_path_parent(const char *path, char *out, size_t cap) {
    snprintf(out, cap, "%s", path);
    size_t n = strlen(out);
    while (n > 1 && out[n - 1] == '/') out[--n] = '\0';
    char *slash = strrchr(out, '/');
    if (!slash)
        snprintf(out, cap, ".");
    else if (slash == out)
        out[1] = '\0';
    else
        *slash = '\0';
}

ct_status ct_fsync_path(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ct_error(CT_ERR_IO, "cannot open '%s' to sync it: %s", path, strerror(errno));
    /* EINVAL: a file system that cannot sync this kind of file (some do not for directories); there
     * is nothing more we could do for it. */
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    if (rc != 0 && err != EINVAL) return ct_error(CT_ERR_IO, "cannot sync '%s': %s", path, strerror(err));
    return CT_OK;
}

/* --- opening to read ----------------------------------------------------------------------------- */

/* CT_OK for a regular file; otherwise the refusal, naming what path is. */
static ct_status regular_or_refuse(const char *path, mode_t mode) {
    if (S_ISREG(mode)) return CT_OK;
    if (S_ISDIR(mode)) return ct_error(CT_ERR_IO, "%s: cannot read: %s", path, strerror(EISDIR));
    const char *what = S_ISFIFO(mode)  ? "a FIFO (named pipe)"
                       : S_ISCHR(mode) ? "a character device"
                       : S_ISBLK(mode) ? "a block device"
                       : S_ISSOCK(mode) ? "a socket"
                                        : "not a file";
    return ct_error(CT_ERR_IO, "%s: cannot read: Is %s, not a regular file", path, what);
}

ct_status ct_open_read(const char *path, int *fd) {
    *fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (*fd < 0) return ct_error(CT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    ct_status s = fstat(*fd, &st) != 0 ? ct_error(CT_ERR_IO, "%s: cannot read: %s", path, strerror(errno))
                                       : regular_or_refuse(path, st.st_mode);
    int flags = s == CT_OK ? fcntl(*fd, F_GETFL) : -1;
    if (s == CT_OK && (flags < 0 || fcntl(*fd, F_SETFL, flags & ~O_NONBLOCK) != 0))
        s = ct_error(CT_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    if (s != CT_OK) {
        close(*fd);
        *fd = -1;
    }
    return s;
}

ct_status ct_fopen_read(const char *path, FILE **f) {
    int fd;
    *f = NULL;
    CT_TRY(ct_open_read(path, &fd));
    if (!(*f = fdopen(fd, "rb"))) {
        int err = errno;
        close(fd);
        return ct_error(CT_ERR_IO, "%s: cannot read: %s", path, strerror(err));
    }
    return CT_OK;
}

ct_status ct_check_regular_file(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return ct_error(CT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    return regular_or_refuse(path, st.st_mode);
}

/* --- the atomic write --------------------------------------------------------------------------- */

/* This host's name as the temporaries carry it: no '/' or '.', which a file name cannot hold or
 * would make ambiguous. */
static void tmp_host(char *host, size_t cap) {
    if (gethostname(host, cap) != 0) snprintf(host, cap, "host");
    host[cap - 1] = '\0';
    for (char *p = host; *p; p++)
        if (*p == '/' || *p == '.') *p = '_';
}

bool ct_atomic_file_is_orphan(const char *name) {
    const char *tag = strstr(name, ".tmp-");
    if (!tag) return false;
    char host[256];
    tmp_host(host, sizeof host);
    size_t n = strlen(host);
    const char *rest = tag + 5;
    if (strncmp(rest, host, n) != 0 || rest[n] != '-' || !rest[n + 1]) return false;
    char *end;
    long pid = strtol(rest + n + 1, &end, 10);
    if (*end || pid <= 0 || rest[n + 1] < '0' || rest[n + 1] > '9') return false;
    /* EPERM: it runs (as someone else); only ESRCH says that nobody writes this file any more */
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

ct_status ct_atomic_file_open(ct_atomic_file *a, const char *path) {
    a->fd = -1;
    a->stream = NULL;
    a->err = 0;
    a->tmp[0] = '\0';
    if (snprintf(a->path, sizeof a->path, "%s", path) >= (int)sizeof a->path)
        return ct_error(CT_ERR_INVALID_ARG, "path too long: %s", path);
    char host[256];
    tmp_host(host, sizeof host);
    /* beside the target (rename within one directory is atomic), unique per host and process;
     * O_EXCL: never write through a link somebody planted under this name */
    if (snprintf(a->tmp, sizeof a->tmp, "%s.tmp-%s-%ld", path, host, (long)getpid()) >= (int)sizeof a->tmp)
        return ct_error(CT_ERR_INVALID_ARG, "path too long: %s", path);
    /* 0666 less the umask: the permissions fopen gives, which the files written before had */
    a->fd = open(a->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (a->fd < 0 && errno == EEXIST) { /* left by a crash of an earlier process with this pid */
        unlink(a->tmp);
        a->fd = open(a->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    }
    if (a->fd < 0) {
        int err = errno;
        ct_status s = ct_error(CT_ERR_IO, "cannot write '%s': cannot create '%s': %s", path, a->tmp, strerror(err));
        a->tmp[0] = '\0';
        return s;
    }
    return CT_OK;
}

ct_status ct_atomic_file_write(ct_atomic_file *a, const void *data, size_t n) {
    if (a->fd < 0) return ct_error(CT_ERR_STATE, "'%s': the temporary file is not open", a->path);
    if (a->stream) { /* keep the order of what was written through the stream */
        if (fwrite(data, 1, n, a->stream) != n) {
            int err = a->err ? a->err : errno;
            return ct_error(CT_ERR_IO, "cannot write '%s': %s", a->path, strerror(err));
        }
        return CT_OK;
    }
    int err = ct_io_write_all(a->fd, data, n);
    return err ? ct_error(CT_ERR_IO, "cannot write '%s': %s", a->path, strerror(err)) : CT_OK;
}

/* The stream's writes go through ct_io_write_all, so that the fault hook covers stdio writers too (JSON
 * dumps, cairo, fprintf) and the errno of a failure is kept for commit to report. */
static ssize_t stream_write(void *cookie, const char *buf, size_t n) {
    ct_atomic_file *a = cookie;
    int err = ct_io_write_all(a->fd, buf, n);
    if (!err) return (ssize_t)n;
    if (!a->err) a->err = err;
    errno = err;
    return 0; /* fopencookie: 0 is the error return */
}

FILE *ct_atomic_file_stream(ct_atomic_file *a) {
    if (!a->stream && a->fd >= 0) {
        /* a must stay where it is while the stream is open: the stream points at it */
        a->stream = fopencookie(a, "wb", (cookie_io_functions_t){.write = stream_write});
        if (!a->stream) ct_error(CT_ERR_IO, "cannot write '%s': %s", a->path, strerror(errno));
    } else if (!a->stream) {
        ct_error(CT_ERR_STATE, "'%s': the temporary file is not open", a->path);
    }
    return a->stream;
}

/* Flushes the stream (if any), syncs when asked, and closes the descriptor; 0 or an errno (the
 * first failure: a write the stream failed earlier counts). */
static int close_tmp(ct_atomic_file *a, bool sync) {
    int err = a->err;
    if (a->stream) {
        if (fflush(a->stream) != 0 && !err) err = a->err ? a->err : errno;
        if (ferror(a->stream) && !err) err = a->err ? a->err : EIO;
        fclose(a->stream); /* the cookie's close is a no-op: the descriptor is closed below */
        a->stream = NULL;
    }
    if (!err && sync && a->fd >= 0 && fsync(a->fd) != 0 && errno != EINVAL) err = errno;
    if (a->fd >= 0 && close(a->fd) != 0 && !err) err = errno;
    a->fd = -1;
    a->err = 0;
    return err;
}

ct_status ct_atomic_file_close_fd(ct_atomic_file *a) {
    int err = close_tmp(a, false);
    return err ? ct_error(CT_ERR_IO, "cannot write '%s': %s", a->path, strerror(err)) : CT_OK;
}

ct_status ct_atomic_file_commit(ct_atomic_file *a) {
    if (!a->tmp[0]) return ct_error(CT_ERR_STATE, "'%s': nothing to commit", a->path);
    bool had_fd = a->fd >= 0;
    int err = close_tmp(a, true);
    if (err) return ct_error(CT_ERR_IO, "cannot write '%s': %s", a->path, strerror(err));
    if (!had_fd) CT_TRY(ct_fsync_path(a->tmp)); /* written by name by another library */
    if (rename(a->tmp, a->path) != 0)
        return ct_error(CT_ERR_IO, "cannot rename '%s' to '%s': %s", a->tmp, a->path, strerror(errno));
    a->tmp[0] = '\0';
    /* the rename itself is durable only once the directory is */
    char dir[4096];
    ct_path_parent(a->path, dir, sizeof dir);
    return ct_fsync_path(dir);
}

void ct_atomic_file_discard(ct_atomic_file *a) {
    (void)close_tmp(a, false);
    if (a->tmp[0]) unlink(a->tmp); /* no partial file is left to be mistaken for a whole one */
    a->tmp[0] = '\0';
}

ct_status ct_write_file(const char *path, const void *data, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ct_error(CT_ERR_IO, "cannot create '%s': %s", path, strerror(errno));
    int err = ct_io_write_all(fd, data, n); /* write(), or a test's fault */
    if (close(fd) != 0 && !err) err = errno;
    if (err) {
        unlink(path);
        return ct_error(CT_ERR_IO, "cannot write '%s': %s", path, strerror(err));
    }
    return CT_OK;
}

ct_status ct_write_file_atomic(const char *path, const void *data, size_t n) {
    ct_atomic_file a;
    CT_TRY(ct_atomic_file_open(&a, path));
    ct_status s = ct_atomic_file_write(&a, data, n);
    if (s == CT_OK) s = ct_atomic_file_commit(&a);
    if (s != CT_OK) ct_atomic_file_discard(&a);
    return s;
}

/* --- removal ------------------------------------------------------------------------------------ */

/* nftw's callback has no context argument: the first entry that could not be removed, per thread. */
static _Thread_local struct {
    char path[4096];
    int err;
} remove_failure;

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    if (remove(path) == 0 || errno == ENOENT) return 0; /* gone already (another deleter): fine */
    remove_failure.err = errno;
    snprintf(remove_failure.path, sizeof remove_failure.path, "%s", path);
    return 1; /* stop: the directories above it cannot be removed either */
}

ct_status ct_remove_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return CT_OK;
        return ct_error(CT_ERR_IO, "cannot delete '%s': %s", path, strerror(errno));
    }
    remove_failure.err = 0;
    /* FTW_PHYS: a symbolic link is removed, never followed; FTW_DEPTH: contents before their directory */
    int rc = nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (rc == 1) {
        if (strcmp(remove_failure.path, path) == 0)
            return ct_error(CT_ERR_IO, "cannot delete '%s': %s", path, strerror(remove_failure.err));
        return ct_error(CT_ERR_IO, "cannot delete '%s': '%s': %s", path, remove_failure.path,
                        strerror(remove_failure.err));
    }
    if (rc != 0 && errno != ENOENT) return ct_error(CT_ERR_IO, "cannot delete '%s': %s", path, strerror(errno));
    return CT_OK;
}
