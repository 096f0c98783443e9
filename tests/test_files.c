/* test_files.c: the file-system helpers checkpoints use: what is at a path, removal, rename,
 * sorted directory listings, and their errors naming the path. */
#include <stdlib.h>
#include <unistd.h>

#include "check.h"

static void write_text(const char *path, const char *text) {
    CHECK_OK(lw_file_write(path, text, (int64_t)strlen(text), NULL));
}

int main(void) {
    char root[] = "/tmp/lwopt-files-XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    char path[256], other[256];

    lw_path_kind kind = LW_PATH_OTHER;
    CHECK_OK(lw_path_kind_of(root, &kind));
    CHECK_EQ(kind, LW_PATH_DIR);
    snprintf(path, sizeof path, "%s/missing", root);
    CHECK_OK(lw_path_kind_of(path, &kind));
    CHECK_EQ(kind, LW_PATH_MISSING);
    snprintf(path, sizeof path, "%s/missing/below", root); /* ENOENT in the middle */
    CHECK_OK(lw_path_kind_of(path, &kind));
    CHECK_EQ(kind, LW_PATH_MISSING);
    CHECK_OK(lw_path_kind_of("/dev/null", &kind));
    CHECK_EQ(kind, LW_PATH_OTHER);

    /* listing: sorted bytewise, no . and .., names with spaces and quotes intact */
    const char *names[] = {"step-000000010", "b'quote", "latest", "a space", "step-000000002"};
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof path, "%s/%s", root, names[i]);
        write_text(path, "x");
    }
    snprintf(path, sizeof path, "%s/sub", root);
    CHECK_OK(lw_dir_make(path));
    lw_dir_list *list = NULL;
    CHECK_OK(lw_dir_list_new(root, &list));
    CHECK_EQ(lw_dir_list_count(list), 6);
    const char *sorted[] = {"a space", "b'quote", "latest", "step-000000002", "step-000000010",
                            "sub"};
    for (int i = 0; i < 6; i++) CHECK(strcmp(lw_dir_list_name(list, i), sorted[i]) == 0);
    CHECK(lw_dir_list_name(list, 6) == NULL);
    CHECK(lw_dir_list_name(list, -1) == NULL);
    lw_dir_list_free(list);
    lw_dir_list_free(NULL);
    CHECK_EQ(lw_dir_list_count(NULL), 0);

    /* errors name the path */
    snprintf(path, sizeof path, "%s/missing", root);
    CHECK_FAILS(lw_dir_list_new(path, &list), LW_ERR_IO, "cannot list directory");
    CHECK(list == NULL);
    snprintf(path, sizeof path, "%s/latest", root);
    CHECK_FAILS(lw_dir_list_new(path, &list), LW_ERR_IO, "latest");
    snprintf(path, sizeof path, "%s/missing", root);
    CHECK_FAILS(lw_path_remove(path), LW_ERR_IO, "cannot remove");

    /* rename replaces a file; remove takes files and empty directories only */
    snprintf(path, sizeof path, "%s/latest", root);
    snprintf(other, sizeof other, "%s/latest.tmp", root);
    write_text(other, "new");
    CHECK_OK(lw_path_rename(other, path));
    CHECK_OK(lw_path_kind_of(other, &kind));
    CHECK_EQ(kind, LW_PATH_MISSING);
    int64_t bytes = 0;
    CHECK_OK(lw_file_checksum(path, &bytes, NULL));
    CHECK_EQ(bytes, 3);
    snprintf(path, sizeof path, "%s/sub", root);
    snprintf(other, sizeof other, "%s/sub/inner", root);
    write_text(other, "x");
    CHECK_FAILS(lw_path_remove(path), LW_ERR_IO, "sub");
    CHECK_OK(lw_path_remove(other));
    CHECK_OK(lw_path_remove(path));
    snprintf(other, sizeof other, "%s/missing", root);
    CHECK_FAILS(lw_path_rename(other, path), LW_ERR_IO, "cannot rename");

    CHECK_OK(lw_dir_list_new(root, &list));
    for (int32_t i = 0; i < lw_dir_list_count(list); i++) {
        snprintf(path, sizeof path, "%s/%s", root, lw_dir_list_name(list, i));
        CHECK_OK(lw_path_remove(path));
    }
    lw_dir_list_free(list);
    CHECK_OK(lw_path_remove(root));
    return check_exit("test_files");
}
