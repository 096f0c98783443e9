/* files.c: the durable-file primitives checkpoints are built from: write-and-fsync with a
 * checksum, a file's CRC32C, directory fsync (so renames survive a crash) and mkdir -p; and
 * truncation, which takes a half-written record off the end of a log. */
#include "base/base.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

lw_status lw_file_write(const char *path, const void *data, int64_t n, uint32_t *crc) {
    if (path == NULL || n < 0 || (n > 0 && data == NULL))
        return lwi_fail(LW_ERR_INVALID, "files: bad arguments to write");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return lwi_fail(LW_ERR_IO, "files: cannot create %s: %s", path, strerror(errno));
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
    int fd = open(path, O_RDONLY);
    if (fd < 0) return lwi_fail(LW_ERR_IO, "files: cannot open %s: %s", path, strerror(errno));
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

lw_status lw_dir_sync(const char *path) {
    if (path == NULL) return lwi_fail(LW_ERR_INVALID, "files: NULL path");
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return lwi_fail(LW_ERR_IO, "files: cannot open directory %s: %s", path, strerror(errno));
    lw_status st = fsync(fd) == 0 ? LW_OK
                                  : lwi_fail(LW_ERR_IO, "files: fsync %s: %s", path, strerror(errno));
    close(fd);
    return st;
}

lw_status lw_dir_make(const char *path) {
    if (path == NULL || path[0] == '\0') return lwi_fail(LW_ERR_INVALID, "files: empty path");
    size_t n = strlen(path);
    char *p = malloc(n + 1);
    if (p == NULL) return lwi_fail(LW_ERR_NOMEM, "files: out of memory");
    memcpy(p, path, n + 1);
    lw_status st = LW_OK;
    for (size_t i = 1; i <= n && st == LW_OK; i++) {
        if (p[i] != '/' && p[i] != '\0') continue;
        char keep = p[i];
        p[i] = '\0';
        struct stat info;
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            st = lwi_fail(LW_ERR_IO, "files: cannot create directory %s: %s", p, strerror(errno));
        else if (stat(p, &info) != 0 || !S_ISDIR(info.st_mode))
            st = lwi_fail(LW_ERR_IO, "files: %s exists and is not a directory", p);
        p[i] = keep;
    }
    free(p);
    return st;
}

lw_status lw_path_kind_of(const char *path, lw_path_kind *kind) {
    if (path == NULL || kind == NULL) return lwi_fail(LW_ERR_INVALID, "files: NULL argument");
    struct stat info;
    if (stat(path, &info) != 0) {
        if (errno != ENOENT && errno != ENOTDIR)
            return lwi_fail(LW_ERR_IO, "files: cannot look at %s: %s", path, strerror(errno));
        *kind = LW_PATH_MISSING;
    } else if (S_ISREG(info.st_mode)) {
        *kind = LW_PATH_FILE;
    } else {
        *kind = S_ISDIR(info.st_mode) ? LW_PATH_DIR : LW_PATH_OTHER;
    }
    return LW_OK;
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
