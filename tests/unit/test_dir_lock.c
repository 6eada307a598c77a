/* The output_dir lock (core/dir_lock.h): one holder at a time, within a process and across
 * processes; a second taker is refused with the holder's pid, host and start time; a lock whose
 * holder died (SIGKILL) or that a dead run left behind is taken over with a warning naming that
 * holder; a clean release deletes the file (and never someone else's); a symbolic link or a
 * directory at the lock file's name is refused and left as it is; a directory that cannot be made
 * is reported by a warning, not an error. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/dir_lock.h"
#include "core/fs.h"
#include "testlib.h"

static char root[] = "/tmp/ct_test_dir_lock_XXXXXX";

static bool exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

static char *read_all(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char *buf = calloc(1, 4096);
    size_t n = fread(buf, 1, 4095, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void write_all(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CT_ASSERT(f);
    fputs(text, f);
    fclose(f);
}

/* One acquisition with its stderr, for the warnings. */
typedef struct attempt {
    const char *dir;
    ct_status status;
    char message[2048];
    ct_dir_lock *lock;
} attempt;

static void do_acquire(void *arg) {
    attempt *a = arg;
    a->status = ct_dir_lock_acquire(a->dir, "output_dir", &a->lock);
    snprintf(a->message, sizeof a->message, "%s", a->status == CT_OK ? "" : ct_last_error());
}

static char *acquire(attempt *a, const char *dir) {
    memset(a, 0, sizeof *a);
    a->dir = dir;
    return ct_test_capture_stderr(do_acquire, a);
}

/* Within one process: a second trainer is refused; release deletes the file; a later run is silent. */
static void test_one_process(void) {
    char dir[512], file[600], pid[32];
    snprintf(dir, sizeof dir, "%s/a/b/run", root); /* parents made too */
    snprintf(file, sizeof file, "%s/" CT_DIR_LOCK_NAME, dir);
    snprintf(pid, sizeof pid, "pid %ld on host ", (long)getpid());
    attempt a, b;
    char *err = acquire(&a, dir);
    CHECK(a.status == CT_OK && a.lock && !err[0], "first lock: %s %s", a.message, err);
    free(err);
    char *text = read_all(file);
    char want[64];
    snprintf(want, sizeof want, "\"pid\":%ld", (long)getpid());
    CHECK(text && strstr(text, want) && strstr(text, "\"host\"") && strstr(text, "UTC"), "holder record: %s",
          text ? text : "(none)");
    free(text);
    err = acquire(&b, dir);
    CHECK(b.status == CT_ERR_STATE && !b.lock && strstr(b.message, "is in use by another run") &&
              strstr(b.message, pid) && strstr(b.message, "started") && strstr(b.message, file) &&
              strstr(b.message, "another trainer of this very process"),
          "second lock in the same process: %s", b.message);
    free(err);
    CHECK(exists(file), "a refused lock removed the holder's file");
    CHECK(strcmp(ct_dir_lock_dir(a.lock), dir) == 0, "lock dir '%s'", ct_dir_lock_dir(a.lock));
    ct_dir_lock_release(a.lock);
    CHECK(!exists(file), "release left %s", file);
    err = acquire(&a, dir);
    CHECK(a.status == CT_OK && a.lock && !strstr(err, "taking over"), "lock after a clean release: %s %s", a.message,
          err);
    free(err);
    /* A name that leads to another file now is someone else's lock: release leaves it. */
    CT_ASSERT(unlink(file) == 0);
    write_all(file, "{}");
    ct_dir_lock_release(a.lock);
    CHECK(exists(file), "release deleted a lock file that was not its own");
    unlink(file);
}

/* Across processes: a child holds the lock; the parent is refused naming it; SIGKILL drops the lock
 * and the parent takes it over with a warning naming the dead child. */
static void test_other_process(void) {
    char dir[512], file[600];
    snprintf(dir, sizeof dir, "%s/shared", root);
    snprintf(file, sizeof file, "%s/" CT_DIR_LOCK_NAME, dir);
    int ready[2], hold[2];
    CT_ASSERT(pipe(ready) == 0 && pipe(hold) == 0);
    pid_t child = fork();
    CT_ASSERT(child >= 0);
    if (child == 0) {
        ct_dir_lock *l;
        char ok = ct_dir_lock_acquire(dir, "output_dir", &l) == CT_OK && l ? 'y' : 'n';
        if (write(ready[1], &ok, 1) != 1) _exit(1);
        char c;
        (void)read(hold[0], &c, 1); /* until killed */
        _exit(0);
    }
    char ok = 0;
    CHECK(read(ready[0], &ok, 1) == 1 && ok == 'y', "the child could not take the lock");
    char pid[64];
    snprintf(pid, sizeof pid, "pid %ld on host ", (long)child);
    attempt a;
    char *err = acquire(&a, dir);
    CHECK(a.status == CT_ERR_STATE && !a.lock && strstr(a.message, pid) && strstr(a.message, "started") &&
              !strstr(a.message, "this very process"),
          "lock held by process %ld: %s", (long)child, a.message);
    free(err);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    CHECK(exists(file), "the killed holder's lock file is gone (nothing to take over)");
    err = acquire(&a, dir);
    CHECK(a.status == CT_OK && a.lock && strstr(err, "taking over the lock left by") && strstr(err, pid) &&
              strstr(err, "no longer runs"),
          "taking over from the killed process %ld: %s %s", (long)child, a.message, err);
    free(err);
    ct_dir_lock_release(a.lock);
    close(ready[0]), close(ready[1]), close(hold[0]), close(hold[1]);
}

/* Lock files that dead runs left: a holder record (maybe of another host), or garbage. */
static void test_stale_files(void) {
    char dir[512], file[600];
    snprintf(dir, sizeof dir, "%s/stale", root);
    snprintf(file, sizeof file, "%s/" CT_DIR_LOCK_NAME, dir);
    CHECK_OK(ct_make_dirs(dir));
    write_all(file, "{\"pid\": 4242, \"host\": \"far-away\", \"started\": \"2020-01-02 03:04:05 UTC\"}");
    attempt a;
    char *err = acquire(&a, dir);
    CHECK(a.status == CT_OK && a.lock && strstr(err, "taking over the lock left by pid 4242 on host far-away, started "
                                                     "2020-01-02 03:04:05 UTC"),
          "stale record: %s %s", a.message, err);
    free(err);
    char *text = read_all(file), want[64];
    snprintf(want, sizeof want, "\"pid\":%ld", (long)getpid());
    CHECK(text && strstr(text, want) && !strstr(text, "4242"), "the record after the take-over: %s", text);
    free(text);
    ct_dir_lock_release(a.lock);
    write_all(file, "not json\nat all");
    err = acquire(&a, dir);
    CHECK(a.status == CT_OK && a.lock && strstr(err, "taking over") && strstr(err, "unreadable holder record 'not json "
                                                                                    "at all'"),
          "garbage record: %s %s", a.message, err);
    free(err);
    ct_dir_lock_release(a.lock);
}

/* What is not a lock file is refused and left alone; a directory that cannot be made is an error. */
static void test_refusals(void) {
    char dir[512], file[600], target[600];
    snprintf(dir, sizeof dir, "%s/odd", root);
    snprintf(file, sizeof file, "%s/" CT_DIR_LOCK_NAME, dir);
    snprintf(target, sizeof target, "%s/precious.txt", root);
    CHECK_OK(ct_make_dirs(dir));
    write_all(target, "keep me");
    CT_ASSERT(symlink(target, file) == 0);
    attempt a;
    char *err = acquire(&a, dir);
    CHECK(a.status == CT_ERR_STATE && !a.lock && strstr(a.message, "is a symbolic link") && strstr(a.message, file),
          "symbolic link: %s", a.message);
    free(err);
    char *text = read_all(target);
    CHECK(text && strcmp(text, "keep me") == 0 && exists(file), "the link or its target changed: '%s'", text);
    free(text);
    unlink(file);
    CT_ASSERT(mkdir(file, 0755) == 0);
    err = acquire(&a, dir);
    CHECK(a.status == CT_ERR_STATE && !a.lock && strstr(a.message, "is not a regular file"), "a directory: %s",
          a.message);
    free(err);
    CHECK(exists(file), "the directory at the lock's name was removed");
    rmdir(file);
    /* under a regular file, or behind a dangling link: nothing can be written there, which the run
     * learns now rather than at its first save */
    char under[700], dangling[700], target_of[720];
    snprintf(under, sizeof under, "%s/out", target);
    err = acquire(&a, under);
    CHECK(a.status == CT_ERR_IO && !a.lock && strstr(a.message, under) && strstr(a.message, "Not a directory"),
          "directory that cannot be made: %s %s", a.message, err);
    free(err);
    snprintf(dangling, sizeof dangling, "%s.dangling", dir);
    snprintf(target_of, sizeof target_of, "%s.nowhere/deeper", dir);
    CT_ASSERT(symlink(target_of, dangling) == 0);
    err = acquire(&a, dangling);
    CHECK(a.status == CT_ERR_IO && !a.lock && strstr(a.message, dangling), "a dangling link: %s %s", a.message, err);
    free(err);
    unlink(dangling);
}

int main(void) {
    ct_test_begin("test_dir_lock");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    test_one_process();
    test_other_process();
    test_stale_files();
    test_refusals();
    CHECK_OK(ct_remove_tree(root));
    return ct_test_finish();
}
