/* test_signals.c: stop requests (lw_stop_watch): SIGTERM, SIGUSR1 and SIGINT are recorded for the
 * training loop instead of ending the process, the first one kept; a second SIGINT ends it at
 * once with one line; the deadline after a request ends a process that does not stop in time,
 * unless the request was reset; and a write past the file-size limit fails with EFBIG instead of
 * killing the process. The cases that end a process run in a child of their own. */
#define _DEFAULT_SOURCE
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "lw_host.h"

typedef void child_fn(void);

/* Runs fn in a child with its stderr captured into text; returns its wait status. */
static int in_child(child_fn *fn, char *text, size_t cap) {
    int pipe_fds[2];
    CHECK(pipe(pipe_fds) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(pipe_fds[0]);
        dup2(pipe_fds[1], STDERR_FILENO);
        fn();
        _exit(0);
    }
    close(pipe_fds[1]);
    size_t got = 0;
    ssize_t r;
    while (got + 1 < cap && (r = read(pipe_fds[0], text + got, cap - 1 - got)) > 0) got += (size_t)r;
    text[got] = '\0';
    close(pipe_fds[0]);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    return status;
}

static void requested_then_slow(void) {
    if (lw_stop_watch(0.2, 75) != LW_OK) _exit(2);
    raise(SIGTERM);
    sleep(30); /* a step that never ends: the deadline ends the process */
}

static void requested_then_reset(void) {
    if (lw_stop_watch(0.2, 75) != LW_OK) _exit(2);
    raise(SIGUSR1);
    lw_stop_reset(); /* handled: the deadline is off */
    sleep(1);
}

static void interrupted_twice(void) {
    if (lw_stop_watch(0, 75) != LW_OK) _exit(2);
    raise(SIGINT);
    if (lw_stop_requested() != SIGINT) _exit(3);
    raise(SIGINT);
    _exit(4); /* not reached */
}

static void past_size_limit(void) {
    struct rlimit limit = {4096, 4096};
    if (setrlimit(RLIMIT_FSIZE, &limit) != 0) _exit(2);
    lw_file_size_limit_as_error();
    static char data[8192];
    char path[] = "/tmp/lwopt-fsize-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) _exit(2);
    close(fd);
    const lw_status st = lw_file_write(path, data, sizeof data, NULL);
    unlink(path);
    fprintf(stderr, "%s\n", lw_last_error());
    _exit(st == LW_ERR_IO && strstr(lw_last_error(), "File too large") ? 0 : 5);
}

int main(void) {
    /* the children first: a fork copies no thread, the deadline's included */
    char text[512];
    int status = in_child(requested_then_slow, text, sizeof text);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 75);
    CHECK(strstr(text, "lwopt: still running 0.2 s after SIGTERM (the --timeout): ending now") !=
          NULL);
    status = in_child(requested_then_reset, text, sizeof text);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    status = in_child(interrupted_twice, text, sizeof text);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 130);
    CHECK(strcmp(text, "lwopt: interrupted again: ending now, without waiting for the step to "
                       "end\n") == 0);
    status = in_child(past_size_limit, text, sizeof text);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0); /* not killed by SIGXFSZ */
    CHECK(strstr(text, "File too large") != NULL);
    /* in this process: requests recorded, the first one kept, reset forgets */
    CHECK_EQ(lw_stop_requested(), 0);
    CHECK_FAILS(lw_stop_watch(-1, 75), LW_ERR_INVALID, "grace -1 s");
    CHECK_FAILS(lw_stop_watch(0, 300), LW_ERR_INVALID, "status 300");
    CHECK_OK(lw_stop_watch(0, 75));
    raise(SIGTERM);
    CHECK_EQ(lw_stop_requested(), SIGTERM);
    raise(SIGUSR1);
    CHECK_EQ(lw_stop_requested(), SIGTERM);
    lw_stop_reset();
    CHECK_EQ(lw_stop_requested(), 0);
    raise(SIGUSR1);
    CHECK_EQ(lw_stop_requested(), SIGUSR1);
    lw_stop_reset();
    raise(SIGINT); /* the first Ctrl-C is a request like the others */
    CHECK_EQ(lw_stop_requested(), SIGINT);
    lw_stop_reset();

    return check_exit("test_signals");
}
