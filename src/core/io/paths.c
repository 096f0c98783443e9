/* paths.c: what a path names in the end, so that a run can tell an output that would write over
 * one of its inputs, whatever spelling, symbolic link or hard link leads to it. Reads only. */
#define _DEFAULT_SOURCE /* realpath */
#include "base/base.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* path made absolute against the working directory, into buf (cap bytes). */
static lw_status absolute(const char *path, char *buf, size_t cap) {
    if (path[0] == '/') {
        if (strlen(path) >= cap) return lwi_fail(LW_ERR_INVALID, "files: path too long: %s", path);
        strcpy(buf, path);
        return LW_OK;
    }
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd) == NULL)
        return lwi_fail(LW_ERR_IO, "files: cannot read the working directory: %s", strerror(errno));
    if (strlen(cwd) + 1 + strlen(path) >= cap)
        return lwi_fail(LW_ERR_INVALID, "files: path too long: %s", path);
    strcpy(buf, cwd);
    strcat(buf, "/");
    strcat(buf, path);
    return LW_OK;
}

lw_status lw_path_real(const char *path, char *out, int64_t cap) {
    if (path == NULL || out == NULL || cap < 2 || path[0] == '\0')
        return lwi_fail(LW_ERR_INVALID, "files: bad arguments to lw_path_real");
    char full[PATH_MAX], head[PATH_MAX];
    lw_status st = absolute(path, full, sizeof full);
    if (st != LW_OK) return st;
    for (size_t n = strlen(full); n > 1 && full[n - 1] == '/'; n--) /* "d/" names d */
        full[n - 1] = '\0';
    /* the longest prefix that exists, resolved; the missing rest appended as it is written
     * (it is what the run would create) */
    size_t cut = strlen(full);
    for (;;) {
        memcpy(head, full, cut);
        head[cut] = '\0';
        char resolved[PATH_MAX];
        if (realpath(cut == 0 ? "/" : head, resolved) != NULL) {
            const char *rest = full + cut;
            const bool root = strcmp(resolved, "/") == 0 && rest[0] == '/';
            if (strlen(resolved) + strlen(rest) >= (size_t)cap)
                return lwi_fail(LW_ERR_INVALID, "files: path too long: %s", path);
            strcpy(out, root ? "" : resolved);
            strcat(out, rest);
            return LW_OK;
        }
        if (errno != ENOENT && errno != ENOTDIR)
            return lwi_fail(LW_ERR_IO, "files: cannot resolve %s: %s", head, strerror(errno));
        /* one component up: "a//b" is "a" and "//b" */
        while (cut > 0 && full[cut - 1] == '/')
            cut--;
        while (cut > 0 && full[cut - 1] != '/')
            cut--;
        while (cut > 1 && full[cut - 1] == '/')
            cut--;
    }
}

lw_status lw_path_same_file(const char *a, const char *b, bool *same) {
    if (a == NULL || b == NULL || same == NULL)
        return lwi_fail(LW_ERR_INVALID, "files: NULL argument");
    *same = false;
    struct stat sa, sb;
    if (stat(a, &sa) != 0 || stat(b, &sb) != 0) return LW_OK;
    *same = sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    return LW_OK;
}
