/* test_files.c: the file-system helpers checkpoints use: what is at a path, removal, rename,
 * sorted directory listings, and their errors naming the path; real paths and same-file checks
 * (an output must not be an input), truncation, and the lock a checkpoint directory takes. */
#include <stdlib.h>
#include <unistd.h>

#include "check.h"

static void write_text(const char *path, const char *text) {
    CHECK_OK(lw_file_write(path, text, (int64_t)strlen(text), NULL));
}

/* Real paths through a symbolic link, a relative path, a missing tail and "d/"; hard links as
 * one file; truncation; a lock refused to a second holder with the first one's pid. */
static void check_paths_and_lock(void) {
    char root[] = "/tmp/lwopt-paths-XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    char real_root[512], dir[300], sym[300], file[300], hard[300], via[300], out[512];
    CHECK_OK(lw_path_real(root, real_root, sizeof real_root));
    snprintf(dir, sizeof dir, "%s/d", root);
    CHECK_OK(lw_dir_make(dir));
    snprintf(sym, sizeof sym, "%s/l", root);
    CHECK(symlink(dir, sym) == 0);
    snprintf(file, sizeof file, "%s/d/f.txt", root);
    write_text(file, "corpus");

    char want[600];
    snprintf(via, sizeof via, "%s/l/f.txt", root);
    CHECK_OK(lw_path_real(via, out, sizeof out));
    snprintf(want, sizeof want, "%s/d/f.txt", real_root);
    CHECK(strcmp(out, want) == 0);
    snprintf(via, sizeof via, "%s/l/new/deeper.jsonl", root); /* missing below the link */
    CHECK_OK(lw_path_real(via, out, sizeof out));
    snprintf(want, sizeof want, "%s/d/new/deeper.jsonl", real_root);
    CHECK(strcmp(out, want) == 0);
    snprintf(via, sizeof via, "%s/l/", root);
    CHECK_OK(lw_path_real(via, out, sizeof out));
    snprintf(want, sizeof want, "%s/d", real_root);
    CHECK(strcmp(out, want) == 0);
    char cwd[512];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    CHECK(chdir(dir) == 0);
    CHECK_OK(lw_path_real("f.txt", out, sizeof out));
    snprintf(want, sizeof want, "%s/d/f.txt", real_root);
    CHECK(strcmp(out, want) == 0);
    CHECK(chdir(cwd) == 0);
    CHECK_FAILS(lw_path_real(file, out, 8), LW_ERR_INVALID, "too long");

    bool same = true;
    snprintf(hard, sizeof hard, "%s/hard.txt", root);
    CHECK(link(file, hard) == 0);
    CHECK_OK(lw_path_same_file(hard, file, &same));
    CHECK(same);
    CHECK_OK(lw_path_same_file(hard, dir, &same));
    CHECK(!same);
    snprintf(via, sizeof via, "%s/missing", root);
    CHECK_OK(lw_path_same_file(via, via, &same));
    CHECK(!same);

    CHECK_OK(lw_file_truncate(file, 3));
    int64_t bytes = 0;
    CHECK_OK(lw_file_checksum(file, &bytes, NULL));
    CHECK_EQ(bytes, 3);
    CHECK_FAILS(lw_file_truncate(via, 0), LW_ERR_IO, "missing");

    /* a second open of the lock file is another holder, even in this process */
    char lock_path[300], pid[32];
    snprintf(lock_path, sizeof lock_path, "%s/.lock", root);
    lw_file_lock *first = NULL, *second = NULL;
    CHECK_OK(lw_file_lock_new(lock_path, &first));
    snprintf(pid, sizeof pid, ", pid %ld)", (long)getpid());
    CHECK_FAILS(lw_file_lock_new(lock_path, &second), LW_ERR_STATE, pid);
    CHECK(second == NULL);
    CHECK_FAILS(lw_file_lock_new(lock_path, &second), LW_ERR_STATE, "is locked by another process");
    lw_file_lock_free(first);
    CHECK_OK(lw_file_lock_new(lock_path, &second)); /* released with its holder */
    lw_file_lock_free(second);
    lw_file_lock_free(NULL);
    snprintf(via, sizeof via, "%s/missing/.lock", root);
    CHECK_FAILS(lw_file_lock_new(via, &second), LW_ERR_IO, "cannot open");

    const char *made[] = {lock_path, hard, file, sym, dir, root};
    for (int i = 0; i < 6; i++) CHECK_OK(lw_path_remove(made[i]));
}

int main(void) {
    check_paths_and_lock();
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
