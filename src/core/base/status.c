/* status.c: the thread's last error message and the library version. */
#include "base/base.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char last_error[1024];

lw_status lwi_fail(lw_status status, const char *fmt, ...) {
    /* formatted aside first: a message may quote the previous one (lw_last_error()) */
    char message[sizeof last_error];
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    const int n = vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    /* A message too long to keep whole (a path of thousands of characters) loses its middle,
     * not its end: the reason comes last ("...: File name too long"). */
    char *whole = n >= (int)sizeof message ? malloc((size_t)n + 1) : NULL;
    if (whole != NULL) {
        vsnprintf(whole, (size_t)n + 1, fmt, again);
        const char gap[] = " [...] ";
        const size_t keep = sizeof message - sizeof gap, head = keep / 3, tail = keep - head;
        memcpy(message, whole, head);
        memcpy(message + head, gap, sizeof gap - 1);
        memcpy(message + head + sizeof gap - 1, whole + n - tail, tail + 1);
        free(whole);
    }
    va_end(again);
    memcpy(last_error, message, sizeof last_error);
    return status;
}

const char *lw_last_error(void) { return last_error; }

const char *lw_version(void) { return "0.1.0"; }
