/* The lock a run holds on its output directory, so that two runs never write into one.
 *
 * An fcntl write lock on DIR/.ctrainer.lock, a small JSON file that names its holder (pid, host, start
 * time) for the message a second run prints. fcntl, because NFS carries it to the server; an open
 * file description lock where the kernel has one (Linux 3.15+), so that two trainers of one process
 * exclude each other too and closing another descriptor of the file never drops it; POSIX's
 * record lock elsewhere. The kernel (or the NFS server) drops a lock when its holder dies, so a lock
 * file whose lock is free was left by a process that ended without releasing it (killed, crashed):
 * the next run takes it over with a warning naming that holder. A clean release deletes the file
 * while still holding the lock; a process that opened the old file and locks it afterwards sees that
 * the name no longer leads to its file and tries again, so two processes never both hold "the" lock. */
#ifndef CT_DIR_LOCK_H
#define CT_DIR_LOCK_H

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CT_DIR_LOCK_NAME ".ctrainer.lock"

typedef struct ct_dir_lock ct_dir_lock;

/* Locks dir (made if missing) for this process; `what` names it in messages ("output_dir").
 * Held by someone else: CT_ERR_STATE "output_dir 'DIR' is in use by another run: pid P on host H,
 * started T (lock file DIR/.ctrainer.lock); ...". A symbolic link or anything but a regular file at
 * the lock file's name: CT_ERR_STATE naming it (never followed, never replaced). A directory that
 * cannot be made (under a file, a dangling link, a name too long) is CT_ERR_IO naming it: nothing
 * could be written there, and a run would find out only at its first save. Where no lock can be
 * taken in a directory that exists (the lock file cannot be created, a file system without locks),
 * CT_OK with *out NULL after a warning saying that the directory is not locked and why: the caller
 * goes on. */
ct_status ct_dir_lock_acquire(const char *dir, const char *what, ct_dir_lock **out);

/* Deletes the lock file (when its name still leads to this lock's file) and releases the lock.
 * NULL: nothing. */
void ct_dir_lock_release(ct_dir_lock *lock);

/* The directory as it was given to ct_dir_lock_acquire. */
const char *ct_dir_lock_dir(const ct_dir_lock *lock);

#ifdef __cplusplus
}
#endif

#endif
