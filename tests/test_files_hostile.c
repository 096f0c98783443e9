/* test_files_hostile.c: the file helpers in a directory other people and jobs also write (a
 * shared file system): removal and creation never follow a symbolic link, reads take regular
 * files only and never wait on a FIFO nor read a device forever, mkdir -p leaves nothing behind
 * when it fails, and a message with a path of thousands of characters keeps its reason. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "lw_host.h"

/* A victim directory outside the one lwopt writes, holding one file; and the file's text. */
static void make_victim(const char *root, char *victim, size_t cap, char *precious, size_t pcap) {
    snprintf(victim, cap, "%s/victim", root);
    CHECK(mkdir(victim, 0755) == 0);
    snprintf(precious, pcap, "%s/precious.txt", victim);
    CHECK_OK(lw_file_write(precious, "keep me", 7, NULL));
}

static bool holds(const char *path, const char *text) {
    void *data = NULL;
    int64_t n = 0;
    if (lw_file_read(path, 1 << 20, true, &data, &n) != LW_OK) return false;
    const bool same = n == (int64_t)strlen(text) && memcmp(data, text, (size_t)n) == 0;
    lw_file_read_free(data);
    return same;
}

/* A tree with links to the victim at its top, inside it and deeper, removed: the links go, the
 * victim stays whole. A link given as the tree itself is removed as a link. */
static void check_remove_tree(const char *root) {
    char victim[256], precious[300], tree[256], path[400];
    make_victim(root, victim, sizeof victim, precious, sizeof precious);
    snprintf(tree, sizeof tree, "%s/step-000000001", root);
    snprintf(path, sizeof path, "%s/deeper/still", tree);
    CHECK_OK(lw_dir_make(path));
    snprintf(path, sizeof path, "%s/evil", tree);
    CHECK(symlink(victim, path) == 0);
    snprintf(path, sizeof path, "%s/deeper/still/evil", tree);
    CHECK(symlink(victim, path) == 0);
    snprintf(path, sizeof path, "%s/deeper/file", tree);
    CHECK(symlink(precious, path) == 0);
    CHECK_OK(lw_path_remove_tree(tree));
    lw_path_kind kind = LW_PATH_OTHER;
    CHECK_OK(lw_path_entry_kind(tree, &kind));
    CHECK_EQ(kind, LW_PATH_MISSING);
    CHECK(holds(precious, "keep me"));

    snprintf(path, sizeof path, "%s/step-000000002.tmp", root); /* the link is the tree */
    CHECK(symlink(victim, path) == 0);
    CHECK_OK(lw_path_entry_kind(path, &kind));
    CHECK_EQ(kind, LW_PATH_LINK);
    CHECK_OK(lw_path_kind_of(path, &kind));
    CHECK_EQ(kind, LW_PATH_DIR);
    CHECK_OK(lw_path_remove_tree(path));
    CHECK_OK(lw_path_entry_kind(path, &kind));
    CHECK_EQ(kind, LW_PATH_MISSING);
    CHECK(holds(precious, "keep me"));
    CHECK_OK(lw_path_remove_tree(path)); /* missing: fine */
}

/* A file written where a link, a hard link or a file stands replaces the name, never the
 * target; a directory there is refused; a new directory is refused where anything stands. */
static void check_create(const char *root) {
    char victim[256], precious[300], path[400], hard[400];
    snprintf(path, sizeof path, "%s/second", root);
    CHECK(mkdir(path, 0755) == 0);
    make_victim(path, victim, sizeof victim, precious, sizeof precious);
    snprintf(path, sizeof path, "%s/latest.tmp", root);
    CHECK(symlink(precious, path) == 0);
    CHECK_OK(lw_file_write(path, "step-000000003\n", 15, NULL));
    CHECK(holds(precious, "keep me"));
    CHECK(holds(path, "step-000000003\n"));
    lw_path_kind kind = LW_PATH_OTHER;
    CHECK_OK(lw_path_entry_kind(path, &kind));
    CHECK_EQ(kind, LW_PATH_FILE);

    snprintf(hard, sizeof hard, "%s/hard", root); /* another name of the victim's file */
    CHECK(link(precious, hard) == 0);
    CHECK_OK(lw_file_write(hard, "new", 3, NULL));
    CHECK(holds(precious, "keep me"));

    snprintf(path, sizeof path, "%s/manifest.json", root);
    CHECK(mkdir(path, 0755) == 0);
    CHECK_FAILS(lw_file_write(path, "x", 1, NULL), LW_ERR_IO, "a directory is there");

    snprintf(path, sizeof path, "%s/step-000000004.tmp", root);
    CHECK(symlink(victim, path) == 0);
    CHECK_FAILS(lw_dir_make_new(path), LW_ERR_IO, "something else is there already");
    CHECK_OK(lw_path_remove_tree(path));
    CHECK_OK(lw_dir_make_new(path));
    CHECK_OK(lw_path_entry_kind(path, &kind));
    CHECK_EQ(kind, LW_PATH_DIR);

    /* the lock never goes through a link, nor into anything but a regular file */
    snprintf(path, sizeof path, "%s/.lwopt-lock", root);
    CHECK(symlink(precious, path) == 0);
    lw_file_lock *lock = NULL;
    CHECK_FAILS(lw_file_lock_new(path, &lock), LW_ERR_IO, "is a symbolic link");
    CHECK(lock == NULL);
    CHECK(holds(precious, "keep me"));
    CHECK(unlink(path) == 0);
    CHECK(mkfifo(path, 0644) == 0);
    CHECK_FAILS(lw_file_lock_new(path, &lock), LW_ERR_IO, "is not a regular file");
}

/* Reads and checksums: a FIFO with no writer and a device are refused at once (a test that
 * regressed would hang here, and ctest's timeout fails it), a link refused where asked. */
static void check_reads(const char *root) {
    char fifo[300], path[300];
    snprintf(fifo, sizeof fifo, "%s/fifo", root);
    CHECK(mkfifo(fifo, 0644) == 0);
    void *data = NULL;
    int64_t n = -1;
    CHECK_FAILS(lw_file_read(fifo, 64, true, &data, &n), LW_ERR_IO, "is not a regular file (a FIFO)");
    CHECK(data == NULL);
    CHECK_FAILS(lw_file_checksum(fifo, &n, NULL), LW_ERR_IO, "is not a regular file (a FIFO)");
    CHECK_FAILS(lw_file_read("/dev/zero", 64, true, &data, &n), LW_ERR_IO, "(a device)");
    CHECK_FAILS(lw_file_checksum("/dev/zero", &n, NULL), LW_ERR_IO, "(a device)");
    CHECK_FAILS(lw_file_read(root, 64, true, &data, &n), LW_ERR_IO, "(a directory)");
    lw_safetensors *st = NULL;
    CHECK_FAILS(lw_safetensors_open(fifo, &st), LW_ERR_IO, "is not a regular file (a FIFO)");
    CHECK_FAILS(lw_safetensors_open("/dev/zero", &st), LW_ERR_IO, "(a device)");

    snprintf(path, sizeof path, "%s/latest", root);
    CHECK(symlink("/dev/zero", path) == 0);
    CHECK_FAILS(lw_file_read(path, 64, false, &data, &n), LW_ERR_IO, "is a symbolic link");
    CHECK_FAILS(lw_file_checksum(path, &n, NULL), LW_ERR_IO, "is a symbolic link");
    CHECK(unlink(path) == 0);

    CHECK_OK(lw_file_write(path, "step-000000007\n", 15, NULL));
    CHECK_OK(lw_file_read(path, 64, false, &data, &n));
    CHECK_EQ(n, 15);
    CHECK(data != NULL && strcmp(data, "step-000000007\n") == 0); /* NUL-terminated */
    lw_file_read_free(data);
    CHECK_FAILS(lw_file_read(path, 8, false, &data, &n), LW_ERR_INVALID, "more than the 8");
    CHECK_OK(lw_file_read(path, 15, false, &data, &n));
    lw_file_read_free(data);
}

/* A path longer than the system takes: refused before anything is made, its reason kept at the
 * end of the message; a failure half-way down a path takes back what it made. */
static void check_long_paths(const char *root) {
    const size_t n = 5000;
    char *path = malloc(n + 1);
    CHECK(path != NULL);
    if (path == NULL) return;
    int at = snprintf(path, n + 1, "%s/long", root);
    for (size_t i = (size_t)at; i < n; i++) path[i] = i % 100 == 0 ? '/' : 'a';
    path[n] = '\0';
    CHECK_FAILS(lw_dir_make(path), LW_ERR_INVALID, "more than this system takes (4095)");
    const char *message = lw_last_error();
    CHECK(strlen(message) < 1024);
    CHECK(strstr(message, "files: /") == message); /* the head kept, the middle dropped */
    CHECK(strstr(message, " [...] ") != NULL);
    char first[300];
    snprintf(first, sizeof first, "%s/long", root);
    lw_path_kind kind = LW_PATH_OTHER;
    CHECK_OK(lw_path_entry_kind(first, &kind));
    CHECK_EQ(kind, LW_PATH_MISSING);
    free(path);

    /* a name too long half-way down (ENAMETOOLONG after two new levels): both taken back */
    char deep[700], made[300];
    at = snprintf(deep, sizeof deep, "%s/made/b/", root);
    for (int i = 0; i < 300; i++) deep[at + i] = 'n';
    snprintf(deep + at + 300, sizeof deep - (size_t)at - 300, "/x");
    CHECK_FAILS(lw_dir_make(deep), LW_ERR_IO, ": File name too long");
    snprintf(made, sizeof made, "%s/made", root);
    CHECK_OK(lw_path_entry_kind(made, &kind));
    CHECK_EQ(kind, LW_PATH_MISSING);
    /* an existing directory above is kept: only what the call made goes */
    CHECK_OK(lw_dir_make(made));
    CHECK_FAILS(lw_dir_make(deep), LW_ERR_IO, ": File name too long");
    CHECK_OK(lw_path_entry_kind(made, &kind));
    CHECK_EQ(kind, LW_PATH_DIR);
    snprintf(made, sizeof made, "%s/made/b", root);
    CHECK_OK(lw_path_entry_kind(made, &kind));
    CHECK_EQ(kind, LW_PATH_MISSING);
}

int main(void) {
    char root[] = "/tmp/lwopt-hostile-XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    check_remove_tree(root);
    check_create(root);
    check_reads(root);
    check_long_paths(root);
    CHECK_OK(lw_path_remove_tree(root));
    return check_exit("test_files_hostile");
}
