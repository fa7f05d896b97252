/* fuzz_input.h — what the libFuzzer harnesses share: the fuzz input made a
 * file the loaders can open by path, without touching the disk (an
 * anonymous memory file, reached through /proc/self/fd/N). */
#ifndef MP_FUZZ_INPUT_H
#define MP_FUZZ_INPUT_H

#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct {
    int fd;
    char path[64];
} fuzz_file;

/* Created once per process; exits on failure (a broken harness, not a finding). */
static inline void fuzz_file_init(fuzz_file *f, const char *name) {
    f->fd = memfd_create(name, MFD_CLOEXEC);
    if (f->fd < 0) {
        perror("memfd_create");
        exit(2);
    }
    snprintf(f->path, sizeof f->path, "/proc/self/fd/%d", f->fd);
}

/* The file's content becomes data[0, n). */
static inline void fuzz_file_set(fuzz_file *f, const uint8_t *data, size_t n) {
    if (ftruncate(f->fd, 0) != 0 || (n && pwrite(f->fd, data, n, 0) != (ssize_t)n)) {
        perror("fuzz_file_set");
        exit(2);
    }
}

#endif
