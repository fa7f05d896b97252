/* output_path.h — every file a run writes (checkpoints, logs, CSVs, report
 * folders) goes through these checks, so that bad output paths fail before
 * any training starts, never replace a device node or a FIFO, never hang on
 * one, and a full disk is an error rather than a silently empty file.
 *
 * Messages start with "<option> <path>: " when `option` is given (the CLI
 * option that named the path, e.g. "--save"), else with "<path>: ". */
#ifndef MP_IO_OUTPUT_PATH_H
#define MP_IO_OUTPUT_PATH_H

#include <stdbool.h>
#include <stdio.h>

#include "mixprec.h"

/* The file `path` can be written: its directory exists and is writable, and
 * `path` is absent or a regular file (symbolic links followed) that may be
 * written. Anything else (a directory, a character device, a FIFO, a
 * socket, a missing or read-only directory) is MP_ERR_IO. */
mp_status mp_output_path_check(const char *path, const char *option);

/* The folder `dir` can hold output: it is a writable directory, or it does
 * not exist and its nearest existing ancestor is a writable directory (it
 * will be created). */
mp_status mp_output_dir_check(const char *dir, const char *option);

/* Whether two output paths name the same file (existing or to be created),
 * however spelled ("x", "./x", a symbolic link to it): two outputs written
 * to one file would overwrite each other. */
bool mp_output_same_file(const char *a, const char *b);

/* Check `path` as above and open it for writing without blocking on a FIFO
 * or device: truncated, or appended to when `append`. */
mp_status mp_output_open(const char *path, const char *option, bool append, FILE **out);

/* Flush f and report any write error so far: "<option> <path>: write
 * failed: <system error>" (a full disk: "No space left on device"). */
mp_status mp_output_flush(FILE *f, const char *path, const char *option);

/* mp_output_flush, then fclose, whose failure is reported too; f is closed
 * in every case. */
mp_status mp_output_close(FILE *f, const char *path, const char *option);

/* fsync the directory holding path, so that a rename into it is durable: 0,
 * or -1 with errno (file systems that cannot sync a directory count as done). */
int mp_output_sync_parent_dir(const char *path);
/* Write the n bytes at data to `path` whole or not at all, as checkpoints
 * are written: `path` checked as by mp_output_path_check, the bytes written
 * to "<path>.tmp.<pid>" in the same directory (with the mode of the file it
 * replaces), synced, then renamed over `path` (over the file a symbolic link
 * `path` points to: the link stays). On failure `path` is as it
 * was, the temporary file is gone and the message gives the system's reason:
 * "<option> <path>: write failed: <why> (<step> the temporary file <tmp>)". */
mp_status mp_output_write_atomic(const char *path, const char *option, const void *data, size_t n);

/* Remove "<path>.tmp.<pid>" files (an atomic writer's temporary files) left
 * by processes that no longer run, e.g. a save killed mid-write. Files of
 * running processes, and anything not a regular file, are left alone. */
void mp_output_remove_stale_tmp(const char *path);

#endif
