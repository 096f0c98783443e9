/* dir_list.c: the sorted names in a directory, for checkpoint discovery and pruning (instead of
 * running `ls`, which breaks on unusual names and hides errors). */
#include "base/base.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct lw_dir_list {
    char **names; /* [owned] count names, each [owned] */
    int32_t count;
};

static int by_bytes(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void lw_dir_list_free(lw_dir_list *list) {
    if (list == NULL) return;
    for (int32_t i = 0; i < list->count; i++) free(list->names[i]);
    free(list->names);
    free(list);
}

lw_status lw_dir_list_new(const char *path, lw_dir_list **out) {
    if (path == NULL || out == NULL) return lwi_fail(LW_ERR_INVALID, "files: NULL argument");
    *out = NULL;
    DIR *dir = opendir(path);
    if (dir == NULL)
        return lwi_fail(LW_ERR_IO, "files: cannot list directory %s: %s", path, strerror(errno));
    lw_dir_list *list = calloc(1, sizeof *list);
    int32_t capacity = 0;
    lw_status st = list ? LW_OK : lwi_fail(LW_ERR_NOMEM, "files: out of memory");
    for (;;) {
        if (st != LW_OK) break;
        errno = 0;
        struct dirent *e = readdir(dir);
        if (e == NULL) {
            if (errno != 0)
                st = lwi_fail(LW_ERR_IO, "files: reading directory %s: %s", path, strerror(errno));
            break;
        }
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (list->count == capacity) {
            int32_t grown_capacity = capacity ? 2 * capacity : 16;
            char **grown = realloc(list->names, sizeof(char *) * (size_t)grown_capacity);
            if (grown == NULL) {
                st = lwi_fail(LW_ERR_NOMEM, "files: out of memory");
                break;
            }
            list->names = grown;
            capacity = grown_capacity;
        }
        size_t n = strlen(e->d_name) + 1;
        char *name = malloc(n);
        if (name == NULL) {
            st = lwi_fail(LW_ERR_NOMEM, "files: out of memory");
            break;
        }
        memcpy(name, e->d_name, n);
        list->names[list->count++] = name;
    }
    closedir(dir);
    if (st != LW_OK) {
        lw_dir_list_free(list);
        return st;
    }
    if (list->count > 1) qsort(list->names, (size_t)list->count, sizeof(char *), by_bytes);
    *out = list;
    return LW_OK;
}

int32_t lw_dir_list_count(const lw_dir_list *list) { return list ? list->count : 0; }

const char *lw_dir_list_name(const lw_dir_list *list, int32_t i) {
    return list && i >= 0 && i < list->count ? list->names[i] : NULL;
}
