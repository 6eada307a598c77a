/* core/fs.h: the one durable atomic write and tree removal. A commit replaces the content; a write
 * failing on a "full disk" (core/io_fault.h), by bytes or through the stdio stream, leaves the old
 * file as it was and no temporary behind; discard leaves nothing; a library writing the temporary by
 * name (close_fd) is committed; a stale temporary of this host and pid is replaced; errors name the
 * file and errno's text. ct_remove_tree removes nested directories, removes a symbolic link without
 * following it (what it points at survives), and accepts a missing path. ct_write_file (the plain
 * write inside a directory committed whole) writes the whole content, and a failed write removes the
 * file it was writing. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/io_fault.h"
#include "testlib.h"

static char dir[256];

/* The whole content of path into buf (NUL-terminated); -1 when it cannot be read. */
static long slurp(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return (long)n;
}

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    CT_ASSERT(f);
    CT_ASSERT(fputs(text, f) >= 0);
    fclose(f);
}

/* Entries of d whose name contains part. */
static int count_named(const char *d, const char *part) {
    DIR *dd = opendir(d);
    if (!dd) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dd))) n += strstr(e->d_name, part) != NULL;
    closedir(dd);
    return n;
}

static void commit_replaces(void) {
    char path[512], buf[256];
    snprintf(path, sizeof path, "%s/a.txt", dir);
    CHECK_OK(ct_write_file_atomic(path, "first", 5));
    CHECK(slurp(path, buf, sizeof buf) == 5 && strcmp(buf, "first") == 0, "first content: %s", buf);
    CHECK_OK(ct_write_file_atomic(path, "the second", 10));
    CHECK(slurp(path, buf, sizeof buf) == 10 && strcmp(buf, "the second") == 0, "second content: %s", buf);
    CHECK_OK(ct_write_file_atomic(path, "", 0));
    CHECK(slurp(path, buf, sizeof buf) == 0, "an empty write empties the file");
    /* fopen's permissions (0666 less the umask), not a private 0600 */
    mode_t um = umask(0);
    umask(um);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == (0666 & ~um), "mode %o, umask %o", st.st_mode & 0777, um);
    CHECK(count_named(dir, ".tmp") == 0, "a temporary was left behind");

    /* several pieces through one open file */
    ct_atomic_file a;
    CHECK_OK(ct_atomic_file_open(&a, path));
    CHECK(strstr(a.tmp, path) == a.tmp && strstr(a.tmp, ".tmp-"), "temporary '%s' beside '%s'", a.tmp, path);
    CHECK(access(a.tmp, F_OK) == 0, "the temporary exists while writing");
    CHECK_OK(ct_atomic_file_write(&a, "ab", 2));
    CHECK_OK(ct_atomic_file_write(&a, "cd", 2));
    CHECK(slurp(path, buf, sizeof buf) == 0, "the target is unchanged before the commit");
    CHECK_OK(ct_atomic_file_commit(&a));
    ct_atomic_file_discard(&a); /* after a commit: harmless, the target stays */
    CHECK(slurp(path, buf, sizeof buf) == 4 && strcmp(buf, "abcd") == 0, "pieces: %s", buf);
    CHECK(count_named(dir, ".tmp") == 0, "a temporary was left behind");
    CHECK_ERR(ct_atomic_file_commit(&a), CT_ERR_STATE, "nothing to commit");
}

static void failed_write_keeps_old(void) {
    char path[512], buf[4096];
    snprintf(path, sizeof path, "%s/b.txt", dir);
    put(path, "old content");
    char big[3000];
    memset(big, 'x', sizeof big);
    /* the disk fills up after 100 bytes, once */
    ct_io_fault_arm(100, 1, ENOSPC);
    CHECK_ERR(ct_write_file_atomic(path, big, sizeof big), CT_ERR_IO, "b.txt", strerror(ENOSPC));
    CHECK(ct_io_fault_count() == 1, "the fault fired %lld times", (long long)ct_io_fault_count());
    ct_io_fault_disarm();
    CHECK(slurp(path, buf, sizeof buf) == 11 && strcmp(buf, "old content") == 0, "the old file changed: %s", buf);
    CHECK(count_named(dir, ".tmp") == 0, "a temporary was left behind");

    /* the same through the stdio stream: the failure is kept and reported by commit */
    for (int fail_at = 0; fail_at <= 2000; fail_at += 1000) {
        ct_io_fault_arm(fail_at, -1, EDQUOT);
        ct_atomic_file a;
        CHECK_OK(ct_atomic_file_open(&a, path));
        FILE *f = ct_atomic_file_stream(&a);
        CHECK(f != NULL, "stream: %s", ct_last_error());
        if (f) {
            for (int i = 0; i < 600; i++) fprintf(f, "line %d\n", i);
        }
        CHECK_ERR(ct_atomic_file_commit(&a), CT_ERR_IO, "b.txt", strerror(EDQUOT));
        ct_atomic_file_discard(&a);
        ct_io_fault_disarm();
        CHECK(slurp(path, buf, sizeof buf) == 11 && strcmp(buf, "old content") == 0, "stream: the old file changed");
        CHECK(count_named(dir, ".tmp") == 0, "stream: a temporary was left behind");
    }

    /* a directory that does not exist: the message names the file and the errno */
    char missing[512];
    snprintf(missing, sizeof missing, "%s/no/such/dir/c.txt", dir);
    CHECK_ERR(ct_write_file_atomic(missing, "x", 1), CT_ERR_IO, "cannot write", "no/such/dir/c.txt'",
              "cannot create", "no/such/dir/c.txt.tmp-", strerror(ENOENT));
}

static void plain_write(void) {
    char path[512], buf[4096];
    snprintf(path, sizeof path, "%s/plain.txt", dir);
    CHECK_OK(ct_write_file(path, "some text", 9));
    CHECK(slurp(path, buf, sizeof buf) == 9 && strcmp(buf, "some text") == 0, "content: %s", buf);
    CHECK_OK(ct_write_file(path, "new", 3));
    CHECK(slurp(path, buf, sizeof buf) == 3 && strcmp(buf, "new") == 0, "truncated and rewritten: %s", buf);
    CHECK(count_named(dir, "plain.txt") == 1, "no temporary beside the file");
    char big[3000];
    memset(big, 'x', sizeof big);
    ct_io_fault_arm(100, 1, ENOSPC); /* the disk fills up after 100 bytes */
    CHECK_ERR(ct_write_file(path, big, sizeof big), CT_ERR_IO, "cannot write", "plain.txt'", strerror(ENOSPC));
    ct_io_fault_disarm();
    CHECK(access(path, F_OK) != 0, "the half-written file is still there");
    char missing[512];
    snprintf(missing, sizeof missing, "%s/no/such/dir/p.txt", dir);
    CHECK_ERR(ct_write_file(missing, "x", 1), CT_ERR_IO, "cannot create", "no/such/dir/p.txt'", strerror(ENOENT));
}

static void discard_leaves_nothing(void) {
    char path[512], fresh[512], buf[256];
    snprintf(path, sizeof path, "%s/d.txt", dir);
    put(path, "kept");
    ct_atomic_file a;
    CHECK_OK(ct_atomic_file_open(&a, path));
    CHECK_OK(ct_atomic_file_write(&a, "dropped", 7));
    ct_atomic_file_discard(&a);
    ct_atomic_file_discard(&a); /* twice: harmless */
    CHECK(slurp(path, buf, sizeof buf) == 4 && strcmp(buf, "kept") == 0, "discard changed the file: %s", buf);
    snprintf(fresh, sizeof fresh, "%s/never.txt", dir);
    CHECK_OK(ct_atomic_file_open(&a, fresh));
    ct_atomic_file_discard(&a);
    CHECK(access(fresh, F_OK) != 0, "discard created the target");
    CHECK(count_named(dir, ".tmp") == 0, "a temporary was left behind");
    ct_atomic_file never = CT_ATOMIC_FILE_INIT; /* discard before open: an early exit */
    ct_atomic_file_discard(&never);
}

static void stream_and_close_fd(void) {
    char path[512], buf[256];
    snprintf(path, sizeof path, "%s/e.txt", dir);
    ct_atomic_file a;
    CHECK_OK(ct_atomic_file_open(&a, path));
    CHECK_OK(ct_atomic_file_write(&a, "raw,", 4));
    FILE *f = ct_atomic_file_stream(&a);
    CHECK(f && ct_atomic_file_stream(&a) == f, "one stream per file");
    if (f) fprintf(f, "stdio %d,", 42);
    CHECK_OK(ct_atomic_file_write(&a, "raw again", 9)); /* after the stream's bytes, in order */
    CHECK_OK(ct_atomic_file_commit(&a));
    CHECK(slurp(path, buf, sizeof buf) > 0 && strcmp(buf, "raw,stdio 42,raw again") == 0, "stream: %s", buf);

    /* a library that writes by name (HDF5, cairo): close the descriptor, write a.tmp, commit */
    CHECK_OK(ct_atomic_file_open(&a, path));
    CHECK_OK(ct_atomic_file_close_fd(&a));
    CHECK_ERR(ct_atomic_file_write(&a, "x", 1), CT_ERR_STATE, "not open");
    put(a.tmp, "written by name");
    CHECK(slurp(path, buf, sizeof buf) > 0 && strcmp(buf, "raw,stdio 42,raw again") == 0, "changed before commit");
    CHECK_OK(ct_atomic_file_commit(&a));
    CHECK(slurp(path, buf, sizeof buf) > 0 && strcmp(buf, "written by name") == 0, "close_fd: %s", buf);
    CHECK(count_named(dir, ".tmp") == 0, "a temporary was left behind");

    /* by name, then the library failed: discard removes what it wrote */
    CHECK_OK(ct_atomic_file_open(&a, path));
    CHECK_OK(ct_atomic_file_close_fd(&a));
    put(a.tmp, "half");
    ct_atomic_file_discard(&a);
    CHECK(slurp(path, buf, sizeof buf) > 0 && strcmp(buf, "written by name") == 0, "discard by name: %s", buf);
    CHECK(count_named(dir, ".tmp") == 0, "a temporary was left behind");
}

static void stale_temp_replaced(void) {
    char path[512], buf[256];
    snprintf(path, sizeof path, "%s/f.txt", dir);
    ct_atomic_file a;
    CHECK_OK(ct_atomic_file_open(&a, path));
    char tmp[sizeof a.tmp];
    snprintf(tmp, sizeof tmp, "%s", a.tmp);
    ct_atomic_file_discard(&a);
    /* what a crashed process with this pid left: longer than what comes now, read-only */
    put(tmp, "stale stale stale stale stale");
    chmod(tmp, 0444);
    CHECK_OK(ct_write_file_atomic(path, "new", 3));
    CHECK(slurp(path, buf, sizeof buf) == 3 && strcmp(buf, "new") == 0, "stale temporary leaked in: %s", buf);
    CHECK(access(tmp, F_OK) != 0, "the stale temporary is still there");
    /* a symbolic link planted under the temporary's name is not written through */
    char victim[512];
    snprintf(victim, sizeof victim, "%s/victim.txt", dir);
    put(victim, "victim");
    CHECK(symlink(victim, tmp) == 0, "symlink: %s", strerror(errno));
    CHECK_OK(ct_write_file_atomic(path, "newer", 5));
    CHECK(slurp(victim, buf, sizeof buf) == 6 && strcmp(buf, "victim") == 0, "written through a link: %s", buf);
    CHECK(slurp(path, buf, sizeof buf) == 5 && strcmp(buf, "newer") == 0, "after the link: %s", buf);
    unlink(victim);
}

static void path_helpers(void) {
    char out[256];
    ct_path_parent("a/b/c.txt", out, sizeof out);
    CHECK(strcmp(out, "a/b") == 0, "parent %s", out);
    ct_path_parent("a/b/", out, sizeof out);
    CHECK(strcmp(out, "a") == 0, "parent %s", out);
    ct_path_parent("c.txt", out, sizeof out);
    CHECK(strcmp(out, ".") == 0, "parent %s", out);
    ct_path_parent("/c.txt", out, sizeof out);
    CHECK(strcmp(out, "/") == 0, "parent %s", out);
    ct_path_parent("/", out, sizeof out);
    CHECK(strcmp(out, "/") == 0, "parent %s", out);
    CHECK_ERR(ct_make_dirs(""), CT_ERR_INVALID_ARG, "empty");
    char nested[512];
    snprintf(nested, sizeof nested, "%s/m/n/o", dir);
    CHECK_OK(ct_make_dirs(nested));
    CHECK_OK(ct_make_dirs(nested)); /* again: exists */
    CHECK_OK(ct_fsync_path(nested));
    CHECK_ERR(ct_fsync_path("/nonexistent/x"), CT_ERR_IO, "/nonexistent/x", strerror(ENOENT));
}

static void remove_tree(void) {
    char top[512], p[1024], outside[512], buf[64];
    snprintf(top, sizeof top, "%s/tree", dir);
    snprintf(p, sizeof p, "%s/a/b/c", top);
    CHECK_OK(ct_make_dirs(p));
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/a/b/c/file%d", top, i);
        put(p, "x");
    }
    snprintf(p, sizeof p, "%s/a/top_file", top);
    put(p, "y");
    snprintf(p, sizeof p, "%s/empty_dir", top);
    CHECK(mkdir(p, 0777) == 0, "mkdir");
    /* a directory outside the tree, linked from inside it */
    snprintf(outside, sizeof outside, "%s/outside", dir);
    CHECK(mkdir(outside, 0777) == 0, "mkdir outside");
    snprintf(p, sizeof p, "%s/keep.txt", outside);
    put(p, "keep");
    char link[1024];
    snprintf(link, sizeof link, "%s/a/b/link_to_outside", top);
    CHECK(symlink(outside, link) == 0, "symlink: %s", strerror(errno));
    snprintf(link, sizeof link, "%s/a/dangling", top);
    CHECK(symlink("/nonexistent/target", link) == 0, "symlink: %s", strerror(errno));

    CHECK_OK(ct_remove_tree(top));
    struct stat st;
    CHECK(lstat(top, &st) != 0 && errno == ENOENT, "the tree is still there");
    CHECK(slurp(p, buf, sizeof buf) == 4 && strcmp(buf, "keep") == 0, "the link's target was deleted");

    /* a link given as the path itself: the link goes, its target stays */
    snprintf(link, sizeof link, "%s/link_top", dir);
    CHECK(symlink(outside, link) == 0, "symlink: %s", strerror(errno));
    CHECK_OK(ct_remove_tree(link));
    CHECK(lstat(link, &st) != 0, "the link is still there");
    CHECK(slurp(p, buf, sizeof buf) == 4, "the link's target was deleted");

    /* a single file, a missing path */
    CHECK_OK(ct_remove_tree(p));
    CHECK(access(p, F_OK) != 0, "the file is still there");
    CHECK_OK(ct_remove_tree(p));
    CHECK_OK(ct_remove_tree(outside));

    /* what cannot be removed is named (root ignores permissions: skip there) */
    if (geteuid() != 0) {
        snprintf(p, sizeof p, "%s/locked/inner", dir);
        CHECK_OK(ct_make_dirs(p));
        snprintf(p, sizeof p, "%s/locked/inner/f", dir);
        put(p, "z");
        snprintf(p, sizeof p, "%s/locked/inner", dir);
        chmod(p, 0555);
        snprintf(top, sizeof top, "%s/locked", dir);
        CHECK_ERR(ct_remove_tree(top), CT_ERR_IO, "locked", "inner/f", strerror(EACCES));
        chmod(p, 0755);
        CHECK_OK(ct_remove_tree(top));
    }
}

/* The one way to open a file for reading: a regular file reads; a FIFO (no writer: open() would
 * block), a character device, a socket and a directory are refused at once, naming what they are;
 * the descriptor of a regular file reads in blocking mode. A blocking open would hang the test, so
 * an alarm turns a hang into a failure. */
static void open_read_regular_only(void) {
    char file[600], fifo[600], sock[600], missing[600];
    snprintf(file, sizeof file, "%s/plain.txt", dir);
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    snprintf(sock, sizeof sock, "%s/sock", dir);
    snprintf(missing, sizeof missing, "%s/missing", dir);
    CHECK_OK(ct_write_file_atomic(file, "abc", 3));
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo: %s", strerror(errno));
    int sfd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", sock);
    bool have_sock = sfd >= 0 && strlen(sock) < sizeof addr.sun_path &&
                     bind(sfd, (struct sockaddr *)&addr, sizeof addr) == 0;
    alarm(30);

    int fd = -1;
    CHECK_OK(ct_open_read(file, &fd));
    char buf[8] = {0};
    CHECK(fd >= 0 && read(fd, buf, sizeof buf) == 3 && memcmp(buf, "abc", 3) == 0, "the file did not read back");
    CHECK(fd >= 0 && !(fcntl(fd, F_GETFL) & O_NONBLOCK), "the descriptor is left non-blocking");
    if (fd >= 0) close(fd);
    FILE *f = NULL;
    CHECK_OK(ct_fopen_read(file, &f));
    CHECK(f && fread(buf, 1, sizeof buf, f) == 3, "the stream did not read the file");
    if (f) fclose(f);
    CHECK_OK(ct_check_regular_file(file));

    const char *fifo_msg = "cannot read: Is a FIFO (named pipe), not a regular file";
    CHECK_ERR(ct_open_read(fifo, &fd), CT_ERR_IO, fifo, fifo_msg);
    CHECK(fd == -1, "a refused open leaves descriptor %d", fd);
    CHECK_ERR(ct_fopen_read(fifo, &f), CT_ERR_IO, fifo, fifo_msg);
    CHECK(f == NULL, "a refused open leaves a stream");
    CHECK_ERR(ct_check_regular_file(fifo), CT_ERR_IO, fifo, fifo_msg);
    CHECK_ERR(ct_open_read("/dev/null", &fd), CT_ERR_IO, "/dev/null: cannot read: Is a character device");
    CHECK_ERR(ct_check_regular_file("/dev/zero"), CT_ERR_IO, "/dev/zero: cannot read: Is a character device");
    if (have_sock) {
        CHECK_ERR(ct_open_read(sock, &fd), CT_ERR_IO, sock); /* open() itself refuses a socket: ENXIO */
        CHECK_ERR(ct_check_regular_file(sock), CT_ERR_IO, sock, "cannot read: Is a socket, not a regular file");
    }
    CHECK_ERR(ct_open_read(dir, &fd), CT_ERR_IO, dir, "cannot read: Is a directory");
    CHECK_ERR(ct_check_regular_file(dir), CT_ERR_IO, dir, "cannot read: Is a directory");
    CHECK_ERR(ct_open_read(missing, &fd), CT_ERR_IO, missing, "cannot open: No such file or directory");
    CHECK_ERR(ct_check_regular_file(missing), CT_ERR_IO, missing, "cannot open: No such file or directory");
    alarm(0);
    if (sfd >= 0) close(sfd);
    unlink(sock);
    unlink(fifo);
    unlink(file);
}

int main(void) {
    ct_test_begin("test_fs");
    snprintf(dir, sizeof dir, "/tmp/ct_test_fs_XXXXXX");
    if (!mkdtemp(dir)) {
        printf("cannot create a temporary directory\n");
        return 1;
    }
    commit_replaces();
    failed_write_keeps_old();
    plain_write();
    discard_leaves_nothing();
    stream_and_close_fd();
    stale_temp_replaced();
    path_helpers();
    remove_tree();
    open_read_regular_only();
    CHECK_OK(ct_remove_tree(dir));
    CHECK(access(dir, F_OK) != 0, "the test directory is still there");
    return ct_test_finish();
}
