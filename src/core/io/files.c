/* files.c: the durable-file primitives checkpoints are built from: write-and-fsync with a
 * checksum into a newly created file, a regular file's CRC32C and contents (never blocking on a
 * FIFO or reading a device forever), directory fsync (so renames survive a crash), mkdir -p that
 * leaves nothing behind when it fails; and truncation, which takes a half-written record off the
 * end of a log. Nothing here follows a symbolic link where it creates or removes. */
#define _DEFAULT_SOURCE /* O_NOFOLLOW, O_CLOEXEC */
#include "io/io.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int lwi_open_regular(const char *what, const char *path, bool follow) {
    /* O_NONBLOCK: opening a FIFO that has no writer returns at once instead of waiting */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
    if (fd < 0) {
        if (errno == ELOOP && !follow)
            lwi_fail(LW_ERR_IO, "%s: %s is a symbolic link, not a file lwopt wrote", what, path);
        else
            lwi_fail(LW_ERR_IO, "%s: cannot open %s: %s", what, path, strerror(errno));
        return -1;
    }
    struct stat info;
    if (fstat(fd, &info) != 0) {
        lwi_fail(LW_ERR_IO, "%s: cannot look at %s: %s", what, path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(info.st_mode)) {
        lwi_fail(LW_ERR_IO, "%s: %s is not a regular file (%s)", what, path,
                 S_ISDIR(info.st_mode)    ? "a directory"
                 : S_ISFIFO(info.st_mode) ? "a FIFO"
                 : S_ISCHR(info.st_mode) || S_ISBLK(info.st_mode) ? "a device"
                                                                   : "not a plain file");
        close(fd);
        return -1;
    }
    /* reads block as usual from here on: a regular file never makes them wait */
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0) (void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return fd;
}

int lwi_create_new(const char *what, const char *path) {
    struct stat info;
    if (lstat(path, &info) == 0) {
        if (S_ISDIR(info.st_mode)) {
            lwi_fail(LW_ERR_IO, "%s: cannot create %s: a directory is there", what, path);
            return -1;
        }
        if (unlink(path) != 0 && errno != ENOENT) {
            lwi_fail(LW_ERR_IO, "%s: cannot replace %s: %s", what, path, strerror(errno));
            return -1;
        }
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) lwi_fail(LW_ERR_IO, "%s: cannot create %s: %s", what, path, strerror(errno));
    return fd;
}

lw_status lw_file_write(const char *path, const void *data, int64_t n, uint32_t *crc) {
    if (path == NULL || n < 0 || (n > 0 && data == NULL))
        return lwi_fail(LW_ERR_INVALID, "files: bad arguments to write");
    int fd = lwi_create_new("files", path);
    if (fd < 0) return LW_ERR_IO;
    const char *p = data;
    int64_t left = n;
    lw_status st = LW_OK;
    while (left > 0 && st == LW_OK) {
        ssize_t w = write(fd, p, (size_t)(left > (1 << 30) ? (1 << 30) : left));
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) st = lwi_fail(LW_ERR_IO, "files: writing %s: %s", path, strerror(errno));
        else p += w, left -= w;
    }
    if (st == LW_OK && fsync(fd) != 0)
        st = lwi_fail(LW_ERR_IO, "files: fsync %s: %s", path, strerror(errno));
    if (close(fd) != 0 && st == LW_OK)
        st = lwi_fail(LW_ERR_IO, "files: closing %s: %s", path, strerror(errno));
    if (st == LW_OK && crc) *crc = lw_crc32c(0, data, n);
    return st;
}

lw_status lw_file_checksum(const char *path, int64_t *bytes, uint32_t *crc) {
    if (path == NULL) return lwi_fail(LW_ERR_INVALID, "files: NULL path");
    /* a checkpoint's files are lwopt's own: a link in their place is not one of them */
    int fd = lwi_open_regular("files", path, false);
    if (fd < 0) return LW_ERR_IO;
    enum { CHUNK = 1 << 20 };
    unsigned char *buf = malloc(CHUNK);
    if (buf == NULL) {
        close(fd);
        return lwi_fail(LW_ERR_NOMEM, "files: out of memory");
    }
    uint32_t sum = 0;
    int64_t total = 0;
    lw_status st = LW_OK;
    for (;;) {
        ssize_t r = read(fd, buf, CHUNK);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            st = lwi_fail(LW_ERR_IO, "files: reading %s: %s", path, strerror(errno));
            break;
        }
        if (r == 0) break;
        sum = lw_crc32c(sum, buf, r);
        total += r;
    }
    free(buf);
    close(fd);
    if (st == LW_OK) {
        if (bytes) *bytes = total;
        if (crc) *crc = sum;
    }
    return st;
}

lw_status lw_file_read(const char *path, int64_t max_bytes, bool follow, void **data,
                       int64_t *n) {
    if (path == NULL || data == NULL || n == NULL || max_bytes < 0)
        return lwi_fail(LW_ERR_INVALID, "files: bad arguments to read");
    *data = NULL;
    *n = 0;
    int fd = lwi_open_regular("files", path, follow);
    if (fd < 0) return LW_ERR_IO;
    struct stat info;
    lw_status st = LW_OK;
    if (fstat(fd, &info) != 0) {
        st = lwi_fail(LW_ERR_IO, "files: cannot look at %s: %s", path, strerror(errno));
    } else if ((int64_t)info.st_size > max_bytes) {
        st = lwi_fail(LW_ERR_INVALID, "files: %s has %lld bytes, more than the %lld expected", path,
                      (long long)info.st_size, (long long)max_bytes);
    }
    /* one byte more than the size read: a file that grew meanwhile is seen, never overrun */
    const int64_t cap = st == LW_OK ? (int64_t)info.st_size + 1 : 0;
    char *buf = st == LW_OK ? malloc((size_t)cap + 1) : NULL;
    if (st == LW_OK && buf == NULL) st = lwi_fail(LW_ERR_NOMEM, "files: out of memory");
    int64_t got = 0;
    while (st == LW_OK && got < cap) {
        ssize_t r = read(fd, buf + got, (size_t)(cap - got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) st = lwi_fail(LW_ERR_IO, "files: reading %s: %s", path, strerror(errno));
        else if (r == 0) break;
        else got += r;
    }
    if (st == LW_OK && got > max_bytes)
        st = lwi_fail(LW_ERR_INVALID, "files: %s grew past the %lld bytes expected while read",
                      path, (long long)max_bytes);
    close(fd);
    if (st != LW_OK) {
        free(buf);
        return st;
    }
    buf[got] = '\0';
    *data = buf;
    *n = got;
    return LW_OK;
}

void lw_file_read_free(void *data) { free(data); }

lw_status lw_dir_sync(const char *path) {
    if (path == NULL) return lwi_fail(LW_ERR_INVALID, "files: NULL path");
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return lwi_fail(LW_ERR_IO, "files: cannot open directory %s: %s", path, strerror(errno));
    lw_status st = fsync(fd) == 0 ? LW_OK
                                  : lwi_fail(LW_ERR_IO, "files: fsync %s: %s", path, strerror(errno));
    close(fd);
    return st;
}

/* A path no system call takes (PATH_MAX counts the terminating NUL), refused before anything is
 * created for it. */
static lw_status check_length(const char *path) {
    const size_t n = strlen(path);
    if (n >= PATH_MAX)
        return lwi_fail(LW_ERR_INVALID, "files: %s: the path has %zu characters, more than this "
                        "system takes (%d)", path, n, PATH_MAX - 1);
    return LW_OK;
}

lw_status lw_dir_make(const char *path) {
    if (path == NULL || path[0] == '\0') return lwi_fail(LW_ERR_INVALID, "files: empty path");
    lw_status st = check_length(path);
    if (st != LW_OK) return st;
    size_t n = strlen(path);
    char *p = malloc(n + 1);
    /* where each directory this call created ends in p, to take them back if a later one fails */
    size_t *made = malloc(sizeof(size_t) * (n + 1));
    if (p == NULL || made == NULL) {
        free(p);
        free(made);
        return lwi_fail(LW_ERR_NOMEM, "files: out of memory");
    }
    memcpy(p, path, n + 1);
    size_t count = 0;
    for (size_t i = 1; i <= n && st == LW_OK; i++) {
        if (p[i] != '/' && p[i] != '\0') continue;
        if (p[i - 1] == '/') continue; /* "a//b" */
        char keep = p[i];
        p[i] = '\0';
        struct stat info;
        if (mkdir(p, 0755) == 0)
            made[count++] = i;
        else if (errno != EEXIST)
            st = lwi_fail(LW_ERR_IO, "files: cannot create directory %s: %s", p, strerror(errno));
        else if (stat(p, &info) != 0 || !S_ISDIR(info.st_mode))
            st = lwi_fail(LW_ERR_IO, "files: %s exists and is not a directory", p);
        p[i] = keep;
    }
    /* a failure leaves no directory of this call behind, deepest first */
    for (size_t k = count; st != LW_OK && k > 0; k--) {
        p[made[k - 1]] = '\0';
        (void)rmdir(p);
    }
    free(made);
    free(p);
    return st;
}

lw_status lw_dir_make_new(const char *path) {
    if (path == NULL || path[0] == '\0') return lwi_fail(LW_ERR_INVALID, "files: empty path");
    lw_status st = check_length(path);
    if (st != LW_OK) return st;
    if (mkdir(path, 0755) != 0)
        return lwi_fail(LW_ERR_IO, "files: cannot create directory %s: %s", path,
                        errno == EEXIST ? "something else is there already" : strerror(errno));
    return LW_OK;
}

static lw_path_kind kind_of_mode(mode_t mode) {
    if (S_ISREG(mode)) return LW_PATH_FILE;
    if (S_ISDIR(mode)) return LW_PATH_DIR;
    return S_ISLNK(mode) ? LW_PATH_LINK : LW_PATH_OTHER;
}

/* What is at path, links followed or not: a missing path is not an error. */
static lw_status kind_at(const char *path, bool follow, lw_path_kind *kind) {
    if (path == NULL || kind == NULL) return lwi_fail(LW_ERR_INVALID, "files: NULL argument");
    struct stat info;
    if ((follow ? stat(path, &info) : lstat(path, &info)) != 0) {
        if (errno != ENOENT && errno != ENOTDIR)
            return lwi_fail(LW_ERR_IO, "files: cannot look at %s: %s", path, strerror(errno));
        *kind = LW_PATH_MISSING;
        return LW_OK;
    }
    *kind = kind_of_mode(info.st_mode);
    return LW_OK;
}

lw_status lw_path_kind_of(const char *path, lw_path_kind *kind) {
    return kind_at(path, true, kind);
}

lw_status lw_path_entry_kind(const char *path, lw_path_kind *kind) {
    return kind_at(path, false, kind);
}

lw_status lw_path_remove(const char *path) {
    if (path == NULL) return lwi_fail(LW_ERR_INVALID, "files: NULL path");
    if (remove(path) != 0)
        return lwi_fail(LW_ERR_IO, "files: cannot remove %s: %s", path, strerror(errno));
    return LW_OK;
}

lw_status lw_path_rename(const char *from, const char *to) {
    if (from == NULL || to == NULL) return lwi_fail(LW_ERR_INVALID, "files: NULL path");
    if (rename(from, to) != 0)
        return lwi_fail(LW_ERR_IO, "files: cannot rename %s to %s: %s", from, to,
                        strerror(errno));
    return LW_OK;
}

lw_status lw_file_truncate(const char *path, int64_t bytes) {
    if (path == NULL || bytes < 0)
        return lwi_fail(LW_ERR_INVALID, "files: bad arguments to truncate");
    if (truncate(path, (off_t)bytes) != 0)
        return lwi_fail(LW_ERR_IO, "files: cannot truncate %s to %lld bytes: %s", path,
                        (long long)bytes, strerror(errno));
    return LW_OK;
}
