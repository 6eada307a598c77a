/* A run's lock on its output directory (see dir_lock.h): the fcntl lock, the holder record, taking
 * over a stale lock and the clean release. */
#define _GNU_SOURCE /* F_OFD_SETLK */
#include "core/dir_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/log.h"

/* A lock file replaced under us this many times in a row is someone else's game: give up. */
#define MAX_TRIES 16

struct ct_dir_lock {
    int fd;
    dev_t dev;
    ino_t ino;
    char dir[4096];
    char path[4200];
};

/* F_OFD_SETLK / F_OFD_GETLK, or the POSIX record lock on kernels without OFD locks (EINVAL). */
static int lock_call(int fd, int ofd_cmd, int posix_cmd, struct flock *fl) {
    fl->l_pid = 0; /* OFD locks require it */
    int rc = fcntl(fd, ofd_cmd, fl);
    if (rc != 0 && errno == EINVAL) rc = fcntl(fd, posix_cmd, fl);
    return rc;
}

static int try_lock(int fd) {
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    return lock_call(fd, F_OFD_SETLK, F_SETLK, &fl);
}

/* 1 when another holder has a lock on fd's file, 0 when none, -1 when the file system cannot say. */
static int probe_lock(int fd) {
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (lock_call(fd, F_OFD_GETLK, F_GETLK, &fl) != 0) return -1;
    return fl.l_type != F_UNLCK;
}

/* "pid P on host H, started T" from the lock file's content (its first 4 KiB), or a description of
 * what it holds instead. */
static void describe_holder(int fd, char *out, size_t cap) {
    char buf[4096];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0) {
        snprintf(out, cap, "its holder has not recorded itself yet");
        return;
    }
    buf[n] = '\0';
    json_t *o = json_loads(buf, 0, NULL);
    json_t *pid = json_object_get(o, "pid");
    const char *host = json_string_value(json_object_get(o, "host"));
    const char *started = json_string_value(json_object_get(o, "started"));
    if (json_is_integer(pid) && host && started) {
        char me[256] = "";
        gethostname(me, sizeof me - 1);
        bool self = json_integer_value(pid) == (json_int_t)getpid() && strcmp(host, me) == 0;
        snprintf(out, cap, "pid %lld on host %s, started %s%s", (long long)json_integer_value(pid), host, started,
                 self ? " (another trainer of this very process)" : "");
    } else {
        for (char *p = buf; *p; p++)
            if (*p == '\n' || *p == '\r') *p = ' ';
        snprintf(out, cap, "an unreadable holder record '%.80s'", buf);
    }
    json_decref(o);
}

/* This process as the holder: {"pid": P, "host": H, "started": "YYYY-MM-DD HH:MM:SS UTC"}. Only
 * messages read it, so a failed write costs nothing but a vaguer message for a second run. */
static void record_holder(int fd) {
    char host[256] = "", started[64] = "";
    gethostname(host, sizeof host - 1);
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(started, sizeof started, "%Y-%m-%d %H:%M:%S UTC", &tm);
    json_t *o = json_pack("{s:I, s:s, s:s}", "pid", (json_int_t)getpid(), "host", host, "started", started);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (text && ftruncate(fd, 0) == 0) {
        size_t len = strlen(text);
        if (pwrite(fd, text, len, 0) != (ssize_t)len)
            ct_log_debug("cannot record this process in its lock file: %s", strerror(errno));
    }
    free(text);
}

static ct_status not_locked(const char *what, const char *dir, const char *why) {
    ct_log_warning("%s '%s' is not locked (%s): nothing stops another run from writing into it at the same "
                   "time", what, dir, why);
    return CT_OK;
}

static ct_status in_use(int fd, const char *what, const char *dir, const char *path) {
    char holder[512];
    describe_holder(fd, holder, sizeof holder);
    close(fd);
    return ct_error(CT_ERR_STATE,
                    "%s '%s' is in use by another run: %s (lock file %s); wait for it to end or give this run "
                    "another %s",
                    what, dir, holder, path, what);
}

ct_status ct_dir_lock_acquire(const char *dir, const char *what, ct_dir_lock **out) {
    *out = NULL;
    char path[4200], why[4400];
    if (snprintf(path, sizeof path, "%s/" CT_DIR_LOCK_NAME, dir) >= (int)sizeof path)
        return ct_error(CT_ERR_INVALID_ARG, "%s '%s': path too long", what, dir);
    if (ct_make_dirs(dir) != CT_OK) return ct_error_prefix(CT_ERR_IO, "%s '%s': ", what, dir);
    for (int tries = 0; tries < MAX_TRIES; tries++) {
        /* O_NOFOLLOW: a link planted at the name is refused, never followed to a file elsewhere */
        int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
        int err = errno;
        if (fd < 0 && err == EACCES) {
            /* another user's run may hold it: read-only is enough to ask */
            int rd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
            if (rd >= 0 && probe_lock(rd) == 1) return in_use(rd, what, dir, path);
            if (rd >= 0) close(rd);
        }
        if (fd < 0) {
            if (err == ELOOP)
                return ct_error(CT_ERR_STATE, "%s '%s': its lock file %s is a symbolic link; remove it if it is "
                                "not yours to keep", what, dir, path);
            if (err != EISDIR) {
                snprintf(why, sizeof why, "cannot open '%s': %s", path, strerror(err));
                return not_locked(what, dir, why);
            }
        }
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            if (fd >= 0) close(fd);
            return ct_error(CT_ERR_STATE, "%s '%s': its lock file %s is not a regular file; remove it if it is "
                            "not yours to keep", what, dir, path);
        }
        if (try_lock(fd) != 0) {
            err = errno;
            if (err == EAGAIN || err == EACCES) return in_use(fd, what, dir, path);
            close(fd);
            snprintf(why, sizeof why, "cannot lock '%s': %s", path, strerror(err));
            return not_locked(what, dir, why);
        }
        /* Locked: but the holder before us may have deleted the name between our open and our lock. */
        struct stat now;
        if (stat(path, &now) != 0 || now.st_dev != st.st_dev || now.st_ino != st.st_ino) {
            close(fd);
            continue;
        }
        ct_dir_lock *l = calloc(1, sizeof *l);
        if (!l) {
            close(fd);
            return ct_error(CT_ERR_NOMEM, "%s lock: out of memory", what);
        }
        if (st.st_size > 0) {
            char holder[512];
            describe_holder(fd, holder, sizeof holder);
            ct_log_warning("%s '%s': taking over the lock left by %s, which no longer runs (it ended without "
                           "releasing it: killed or crashed)", what, dir, holder);
        }
        record_holder(fd);
        l->fd = fd;
        l->dev = st.st_dev;
        l->ino = st.st_ino;
        snprintf(l->dir, sizeof l->dir, "%s", dir);
        snprintf(l->path, sizeof l->path, "%s", path);
        *out = l;
        return CT_OK;
    }
    return ct_error(CT_ERR_STATE, "%s '%s': its lock file %s was replaced %d times while this run tried to take "
                    "it", what, dir, path, MAX_TRIES);
}

void ct_dir_lock_release(ct_dir_lock *l) {
    if (!l) return;
    /* Only our own file: a name that leads elsewhere now is someone else's lock. */
    struct stat st;
    if (stat(l->path, &st) == 0 && st.st_dev == l->dev && st.st_ino == l->ino && unlink(l->path) != 0)
        ct_log_warning("cannot delete the lock file '%s': %s", l->path, strerror(errno));
    close(l->fd); /* drops the lock */
    free(l);
}

const char *ct_dir_lock_dir(const ct_dir_lock *l) { return l->dir; }
