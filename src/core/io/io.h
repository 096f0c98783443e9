/* io.h: what the files of io/ share (lwi_ prefix; not public API): opening a file to read only
 * when it is a regular one, and creating one without following or writing through what is
 * already at its name. */
#ifndef LW_IO_H
#define LW_IO_H

#include "base/base.h"

/* Opens path for reading when it is a regular file: a FIFO, device or directory is refused
 * without blocking on it (a FIFO with no writer, /dev/zero read forever), and with follow false
 * so is a symbolic link. Returns the descriptor, or -1 with lw_last_error() naming the path
 * and why ("files: x is not a regular file"); what names the caller ("files", "safetensors"). */
int lwi_open_regular(const char *what, const char *path, bool follow);

/* Creates a new file at path for writing (mode 0644), replacing what is there without following
 * it: a file or symbolic link at path is unlinked first, so that neither a link's target nor a
 * hard link's other names are written; then the name is created exclusively (O_EXCL |
 * O_NOFOLLOW), so that nothing put there meanwhile is written through either. Returns the
 * descriptor, or -1 with lw_last_error() naming the path. */
int lwi_create_new(const char *what, const char *path);

#endif
