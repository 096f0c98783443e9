/* file_lock.c: an exclusive lock on a file for the life of a process (flock), so that two jobs
 * never write into one checkpoint directory at once. The kernel drops the lock when its holder
 * ends, however it ends (kill -9 included), so a lock is never left stale; the file keeps the
 * holder's host and pid, for the message the next job gets while it is held. A symbolic link
 * or anything but a regular file at its name is refused, never written through. */
#define _DEFAULT_SOURCE /* flock, gethostname */
#include "base/base.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

struct lw_file_lock {
    int fd; /* [owned] open on the locked file */
};

/* The holder's line in a locked file ("host h, pid p"), into text; "" when unreadable. */
static void read_holder(int fd, char *text, size_t cap) {
    ssize_t n = pread(fd, text, cap - 1, 0);
    text[n > 0 ? n : 0] = '\0';
    char *end = strchr(text, '\n');
    if (end) *end = '\0';
}

lw_status lw_file_lock_new(const char *path, lw_file_lock **out) {
    if (path == NULL || out == NULL) return lwi_fail(LW_ERR_INVALID, "files: NULL argument");
    *out = NULL;
    /* never through a link (its target would be written) nor into a FIFO or device; a lock
     * file is never replaced either: another job may hold its lock on this very file */
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (fd < 0 && errno == ELOOP)
        return lwi_fail(LW_ERR_IO, "files: %s is a symbolic link, not a lock file lwopt made: "
                        "remove it", path);
    if (fd < 0) return lwi_fail(LW_ERR_IO, "files: cannot open %s: %s", path, strerror(errno));
    struct stat info;
    if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
        close(fd);
        return lwi_fail(LW_ERR_IO, "files: %s is not a regular file, not a lock file lwopt made: "
                        "remove it", path);
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        char holder[256];
        read_holder(fd, holder, sizeof holder);
        close(fd);
        if (err == EWOULDBLOCK)
            return lwi_fail(LW_ERR_STATE, "files: %s is locked by another process (%s)", path,
                            holder[0] ? holder : "which did not say who it is");
        return lwi_fail(LW_ERR_IO, "files: cannot lock %s: %s", path, strerror(err));
    }
    char host[256] = "unknown host";
    if (gethostname(host, sizeof host) != 0) strcpy(host, "unknown host");
    host[sizeof host - 1] = '\0';
    char line[320];
    const int n = snprintf(line, sizeof line, "host %s, pid %ld\n", host, (long)getpid());
    /* the holder's line is for messages only: a failure to write it leaves the lock held */
    if (ftruncate(fd, 0) == 0 && pwrite(fd, line, (size_t)n, 0) != n) {
        const int cleared = ftruncate(fd, 0); /* a torn line helps nobody; nothing else to do */
        (void)cleared;
    }
    lw_file_lock *lock = malloc(sizeof *lock);
    if (lock == NULL) {
        close(fd);
        return lwi_fail(LW_ERR_NOMEM, "files: out of memory");
    }
    lock->fd = fd;
    *out = lock;
    return LW_OK;
}

void lw_file_lock_free(lw_file_lock *lock) {
    if (lock == NULL) return;
    close(lock->fd); /* releases the lock */
    free(lock);
}
