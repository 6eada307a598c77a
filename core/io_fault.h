/* The write(2) of the files a save produces, with a fault-injection hook for tests.
 *
 * Checkpoint files (model.h5, optimizer.h5, the JSON files, the manifest) reach the disk through
 * ct_io_write, which is write() unless a fault is armed. A TEST HOOK, compiled into every build so
 * that the tests exercise the shipped code: it lets them make "the disk" fill up at a chosen byte
 * and free up again, which a real full disk cannot be made to do on demand without privileges.
 *
 * Armed (ct_io_fault_arm, or the environment variable CT_IO_FAULT read at the first write), the
 * hook lets `after_bytes` more bytes through, writes a short piece up to that boundary as a full
 * disk does, and then fails the next `failures` calls with errno `err` (ENOSPC, EIO, EROFS, EFBIG,
 * EDQUOT...; failures < 0: every call from then on). After those the writes succeed again: the space
 * came back. Disarmed, ct_io_write costs one relaxed atomic load more than write().
 *
 *   CT_IO_FAULT=AFTER_BYTES[:FAILURES[:ERRNO]]   e.g. CT_IO_FAULT=150000:1:ENOSPC
 *
 * ERRNO is a name from the list above or a number; FAILURES defaults to -1 (forever), ERRNO to
 * ENOSPC. A malformed value is reported once on stderr and ignored. Thread-safe: the asynchronous
 * checkpoint writer and the training thread may write at the same time. */
#ifndef CT_IO_FAULT_H
#define CT_IO_FAULT_H

#include <stdint.h>
#include <sys/types.h>

/* write(fd, buf, n), or the armed fault: -1 with errno set, or a short count at the boundary. */
ssize_t ct_io_write(int fd, const void *buf, size_t n);
/* All n bytes through ct_io_write (short writes continued, EINTR retried): 0, or the errno of the
 * failure (EIO for a write that made no progress). */
int ct_io_write_all(int fd, const void *buf, size_t n);

/* Arms the hook (see above); after_bytes < 0 disarms it. Replaces any earlier setting, including
 * the environment's. */
void ct_io_fault_arm(int64_t after_bytes, int64_t failures, int err);
void ct_io_fault_disarm(void);
/* Writes the hook has failed since it was last armed. */
int64_t ct_io_fault_count(void);

#endif
