/* status.c: the thread's last error message and the library version. */
#include "base/base.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[1024];

lw_status lwi_fail(lw_status status, const char *fmt, ...) {
    /* formatted aside first: a message may quote the previous one (lw_last_error()) */
    char message[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    memcpy(last_error, message, sizeof last_error);
    return status;
}

const char *lw_last_error(void) { return last_error; }

const char *lw_version(void) { return "0.1.0"; }
