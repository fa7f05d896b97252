/* input_file.c — see input_file.h. */
#define _GNU_SOURCE
#include "io/input_file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

const char *mp_file_kind(unsigned mode) {
    switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
    }
    return "not a regular file";
}

mp_status mp_path_error(const char *path, int err, const char *doing) {
    struct stat ln;
    if (err == ENOENT && lstat(path, &ln) == 0 && S_ISLNK(ln.st_mode))
        return mp_error(MP_ERR_IO, "%s: a symbolic link to a path that does not exist", path);
    if (err == ENOENT || err == ENOTDIR) return mp_error(MP_ERR_IO, "%s: not found", path);
    return mp_error(MP_ERR_IO, "%s: cannot %s: %s", path, doing, strerror(err));
}

mp_status mp_input_open(const char *path, int *fd, uint64_t *size) {
    *fd = -1;
    /* O_NONBLOCK: opening a FIFO without a writer returns at once; O_NOCTTY:
     * a terminal never becomes the controlling one. */
    int f = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (f < 0) return mp_path_error(path, errno, "open");
    struct stat st;
    if (fstat(f, &st) != 0) {
        int e = errno;
        close(f);
        return mp_error(MP_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        close(f);
        return mp_error(MP_ERR_IO, "%s: is a directory, expected a file", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(f);
        return mp_error(MP_ERR_IO, "%s: not a regular file (%s)", path, mp_file_kind(st.st_mode));
    }
    int fl = fcntl(f, F_GETFL);
    if (fl < 0 || fcntl(f, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(f);
        return mp_error(MP_ERR_IO, "%s: cannot open: %s", path, strerror(e));
    }
    *fd = f;
    if (size) *size = (uint64_t)st.st_size;
    return MP_OK;
}

mp_status mp_input_fopen(const char *path, FILE **f, uint64_t *size) {
    int fd;
    *f = NULL;
    MP_TRY(mp_input_open(path, &fd, size));
    *f = fdopen(fd, "rb");
    if (*f) return MP_OK;
    const int e = errno;
    close(fd);
    return mp_error(MP_ERR_IO, "%s: cannot open: %s", path, strerror(e));
}
