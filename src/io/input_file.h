/* input_file.h — opening a user-given path for reading without ever
 * blocking: a FIFO, a terminal or a device node would make open() or read()
 * wait forever (or read something endless), so the path is opened
 * non-blocking, checked to be a regular file on the open descriptor (no
 * race with a rename between a check and the open), and only then switched
 * back to blocking reads. */
#ifndef MP_IO_INPUT_FILE_H
#define MP_IO_INPUT_FILE_H

#include <stdint.h>
#include <stdio.h>

#include "mixprec.h"

/* Open `path` read-only; *fd is a blocking descriptor of a regular file and
 * *size (may be NULL) its size. Errors (MP_ERR_IO, *fd = -1) name the path:
 * "<path>: not found", "a symbolic link to a path that does not exist",
 * "is a directory", "not a regular file (a FIFO)", or the system error. */
mp_status mp_input_open(const char *path, int *fd, uint64_t *size);

/* mp_input_open as a stdio stream ("rb"), for reading with fread/getc;
 * *f NULL on error. */
mp_status mp_input_fopen(const char *path, FILE **f, uint64_t *size);

/* The error for `path` that open() or stat() refused with errno err
 * (MP_ERR_IO, naming it, `doing` the failed step: "open", "stat"): "a
 * symbolic link to a path that does not exist" for a dangling link, "not
 * found" for a path that is not there, else the system's reason. */
mp_status mp_path_error(const char *path, int err, const char *doing);

/* "a FIFO", "a character device", ... for st_mode's file type. */
const char *mp_file_kind(unsigned mode);

#endif
