/* tree.c: removing a directory and everything below it without ever following a symbolic link:
 * a link is removed as the link it is, its target untouched, so that a link planted in a
 * directory lwopt prunes (a shared file system) cannot make it empty another one. The walk
 * goes through descriptors (openat with O_NOFOLLOW, unlinkat), so a directory swapped for a link
 * while it runs is not followed either. */
#define _DEFAULT_SOURCE /* O_NOFOLLOW, O_DIRECTORY, fdopendir */
#include "io/io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Deepest nesting removed: beyond it the walk stops with an error instead of running out of
 * descriptors or stack. */
enum { MAX_DEPTH = 256 };

/* Empties the directory open as fd (taken: closed here); path names it in messages. */
static lw_status empty_dir(int fd, const char *path, int depth) {
    DIR *dir = fdopendir(fd);
    if (dir == NULL) {
        close(fd);
        return lwi_fail(LW_ERR_IO, "files: cannot list directory %s: %s", path, strerror(errno));
    }
    lw_status st = LW_OK;
    for (;;) {
        errno = 0;
        struct dirent *e = readdir(dir);
        if (e == NULL) {
            if (errno != 0)
                st = lwi_fail(LW_ERR_IO, "files: reading directory %s: %s", path,
                              strerror(errno));
            break;
        }
        const char *name = e->d_name;
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) continue;
        struct stat info;
        if (fstatat(dirfd(dir), name, &info, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno == ENOENT) continue; /* gone meanwhile */
            st = lwi_fail(LW_ERR_IO, "files: cannot look at %s/%s: %s", path, name,
                          strerror(errno));
            break;
        }
        if (S_ISDIR(info.st_mode)) {
            if (depth >= MAX_DEPTH) {
                st = lwi_fail(LW_ERR_IO, "files: %s is nested more than %d directories deep",
                              path, MAX_DEPTH);
                break;
            }
            int sub = openat(dirfd(dir), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub < 0) {
                st = lwi_fail(LW_ERR_IO, "files: cannot open directory %s/%s: %s", path, name,
                              strerror(errno));
                break;
            }
            st = empty_dir(sub, name, depth + 1);
            if (st != LW_OK) break;
            if (unlinkat(dirfd(dir), name, AT_REMOVEDIR) != 0 && errno != ENOENT) {
                st = lwi_fail(LW_ERR_IO, "files: cannot remove %s/%s: %s", path, name,
                              strerror(errno));
                break;
            }
        } else if (unlinkat(dirfd(dir), name, 0) != 0 && errno != ENOENT) {
            st = lwi_fail(LW_ERR_IO, "files: cannot remove %s/%s: %s", path, name,
                          strerror(errno));
            break;
        }
    }
    closedir(dir); /* closes fd */
    return st;
}

lw_status lw_path_remove_tree(const char *path) {
    if (path == NULL || path[0] == '\0') return lwi_fail(LW_ERR_INVALID, "files: empty path");
    struct stat info;
    if (lstat(path, &info) != 0) {
        if (errno == ENOENT) return LW_OK;
        return lwi_fail(LW_ERR_IO, "files: cannot look at %s: %s", path, strerror(errno));
    }
    if (!S_ISDIR(info.st_mode)) { /* a file, or a link: the name alone goes */
        if (unlink(path) != 0 && errno != ENOENT)
            return lwi_fail(LW_ERR_IO, "files: cannot remove %s: %s", path, strerror(errno));
        return LW_OK;
    }
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return lwi_fail(LW_ERR_IO, "files: cannot open directory %s: %s", path, strerror(errno));
    lw_status st = empty_dir(fd, path, 0);
    if (st == LW_OK && rmdir(path) != 0 && errno != ENOENT)
        st = lwi_fail(LW_ERR_IO, "files: cannot remove %s: %s", path, strerror(errno));
    return st;
}
