/* output_path.c — see output_path.h. */
#define _GNU_SOURCE
#include "io/output_path.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "io/input_file.h"

/* "<option> <path>" or "<path>", for message prefixes. */
static const char *who(const char *option, const char *path, char *buf, size_t cap) {
    if (option) snprintf(buf, cap, "%s %s", option, path);
    else snprintf(buf, cap, "%s", path);
    return buf;
}

/* The directory part of path ("." when it has none) into buf. */
static void parent_of(const char *path, char *buf, size_t cap) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(buf, cap, ".");
    else if (slash == path) snprintf(buf, cap, "/");
    else snprintf(buf, cap, "%.*s", (int)(slash - path), path);
}

/* dir is an existing directory this process may create files in. */
static mp_status writable_dir(const char *dir, const char *w) {
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return mp_error(MP_ERR_IO, "%s: directory %s does not exist", w, dir);
        return mp_error(MP_ERR_IO, "%s: directory %s: %s", w, dir, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) return mp_error(MP_ERR_IO, "%s: %s is not a directory", w, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return mp_error(MP_ERR_IO, "%s: cannot write in directory %s: %s", w, dir, strerror(errno));
    return MP_OK;
}

mp_status mp_output_path_check(const char *path, const char *option) {
    char w[4200], dir[4096];
    who(option, path ? path : "", w, sizeof w);
    if (!path || !*path) return mp_error(MP_ERR_INVALID_ARG, "%s: empty output path", option ? option : "output");
    if (strlen(path) >= sizeof dir) return mp_error(MP_ERR_INVALID_ARG, "%s: path too long", w);
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return mp_error(MP_ERR_IO, "%s: is a directory, expected a file", w);
        if (!S_ISREG(st.st_mode))
            return mp_error(MP_ERR_IO, "%s: is %s, not a regular file; write to a regular file or a new path", w,
                            mp_file_kind(st.st_mode));
        if (access(path, W_OK) != 0) return mp_error(MP_ERR_IO, "%s: cannot write: %s", w, strerror(errno));
    } else if (errno != ENOENT) {
        return mp_error(MP_ERR_IO, "%s: %s", w, strerror(errno));
    }
    parent_of(path, dir, sizeof dir);
    return writable_dir(dir, w);
}

mp_status mp_output_dir_check(const char *dir, const char *option) {
    char w[4200], at[4096];
    who(option, dir ? dir : "", w, sizeof w);
    if (!dir || !*dir) return mp_error(MP_ERR_INVALID_ARG, "%s: empty directory path", option ? option : "output");
    if (strlen(dir) >= sizeof at) return mp_error(MP_ERR_INVALID_ARG, "%s: path too long", w);
    snprintf(at, sizeof at, "%s", dir);
    /* the folder itself, or the nearest part of it that exists */
    for (;;) {
        struct stat st;
        if (stat(at, &st) == 0) {
            if (!S_ISDIR(st.st_mode))
                return mp_error(MP_ERR_IO, "%s: %s is %s, not a directory", w, at, mp_file_kind(st.st_mode));
            if (access(at, W_OK | X_OK) != 0)
                return mp_error(MP_ERR_IO, "%s: cannot write in directory %s: %s", w, at, strerror(errno));
            return MP_OK;
        }
        /* ENOTDIR: a file stands where a directory should; going up finds it */
        if (errno != ENOENT && errno != ENOTDIR) return mp_error(MP_ERR_IO, "%s: %s: %s", w, at, strerror(errno));
        char parent[4096];
        parent_of(at, parent, sizeof parent);
        if (!strcmp(parent, at)) return mp_error(MP_ERR_IO, "%s: %s does not exist", w, at);
        snprintf(at, sizeof at, "%s", parent);
    }
}

/* The canonical form of path's directory and its last part into buf: what
 * the file would be called once created. */
static bool canonical(const char *path, char *buf, size_t cap) {
    char dir[4096];
    if (strlen(path) >= sizeof dir) return false;
    parent_of(path, dir, sizeof dir);
    const char *slash = strrchr(path, '/');
    char *real = realpath(dir, NULL);
    if (!real) return false;
    int n = snprintf(buf, cap, "%s/%s", real, slash ? slash + 1 : path);
    free(real);
    return n >= 0 && (size_t)n < cap;
}

bool mp_output_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    char ca[8200], cb[8200];
    if (!canonical(a, ca, sizeof ca) || !canonical(b, cb, sizeof cb)) return !strcmp(a, b);
    return !strcmp(ca, cb);
}

mp_status mp_output_open(const char *path, const char *option, bool append, FILE **out) {
    *out = NULL;
    char w[4200];
    MP_TRY(mp_output_path_check(path, option));
    who(option, path, w, sizeof w);
    /* O_NONBLOCK: a FIFO that appeared since the check fails at once instead
     * of waiting for a reader; nothing is truncated before fstat says it is a
     * regular file. */
    int fd = open(path, O_WRONLY | O_CREAT | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | (append ? O_APPEND : 0), 0666);
    if (fd < 0) return mp_error(MP_ERR_IO, "%s: cannot open for writing: %s", w, strerror(errno));
    struct stat st;
    int fl;
    const char *fail = NULL;
    if (fstat(fd, &st) != 0) fail = strerror(errno);
    else if (!S_ISREG(st.st_mode)) fail = mp_file_kind(st.st_mode);
    else if (!append && ftruncate(fd, 0) != 0) fail = strerror(errno);
    else if ((fl = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) fail = strerror(errno);
    FILE *f = fail ? NULL : fdopen(fd, append ? "a" : "w");
    if (!f) {
        if (!fail) fail = strerror(errno);
        close(fd);
        return mp_error(MP_ERR_IO, "%s: cannot open for writing: %s", w, fail);
    }
    *out = f;
    return MP_OK;
}

mp_status mp_output_flush(FILE *f, const char *path, const char *option) {
    errno = 0;
    if (fflush(f) == 0 && !ferror(f)) return MP_OK;
    int e = errno ? errno : EIO;
    char w[4200];
    return mp_error(MP_ERR_IO, "%s: write failed: %s", who(option, path, w, sizeof w), strerror(e));
}

mp_status mp_output_close(FILE *f, const char *path, const char *option) {
    mp_status s = mp_output_flush(f, path, option);
    errno = 0;
    if (fclose(f) != 0 && s == MP_OK) {
        char w[4200];
        s = mp_error(MP_ERR_IO, "%s: write failed: %s", who(option, path, w, sizeof w),
                     strerror(errno ? errno : EIO));
    }
    return s;
}

static int write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        const ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* A new file tmp: with the permission bits of the file `path` it will
 * replace (made 0600 first, so that its bytes are never readable by more
 * than that file allows), or a new file's (0666 less the umask). */
static int create_tmp(const char *path, const char *tmp) {
    unlink(tmp); /* a leftover of an earlier process with this pid */
    struct stat st;
    const bool replaces = stat(path, &st) == 0;
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOCTTY | O_CLOEXEC | O_NOFOLLOW, replaces ? 0600 : 0666);
    if (fd >= 0 && replaces && fchmod(fd, st.st_mode & 07777) != 0) {
        const int err = errno;
        close(fd);
        unlink(tmp);
        errno = err;
        return -1;
    }
    return fd;
}

/* Write tmp and rename it over path: NULL when done, else the step that
 * failed, with errno set and tmp removed. */
static const char *commit(const char *path, const char *tmp, const void *data, size_t n) {
    const int fd = create_tmp(path, tmp);
    if (fd < 0) return "creating";
    const char *step = write_all(fd, data, n) ? "writing" : fsync(fd) ? "syncing" : NULL;
    int err = errno;
    if (close(fd) != 0 && !step) step = "closing", err = errno;
    if (!step && rename(tmp, path) != 0) step = "renaming", err = errno;
    if (step) unlink(tmp);
    errno = err;
    return step;
}

int mp_output_sync_parent_dir(const char *path) {
    char dir[4096];
    parent_of(path, dir, sizeof dir);
    const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    const int r = fsync(fd), err = errno;
    close(fd);
    errno = err;
    return r == 0 || err == EINVAL || err == ENOTSUP || err == EOPNOTSUPP ? 0 : -1;
}

mp_status mp_output_write_atomic(const char *given, const char *option, const void *data, size_t n) {
    MP_TRY(mp_output_path_check(given, option)); /* given is shorter than 4096 bytes */
    char w[4200], tmp[4200], target[PATH_MAX];
    who(option, given, w, sizeof w);
    /* an existing path's real file is the one replaced: a symbolic link keeps pointing at the new bytes */
    const char *path = realpath(given, target) ? target : given;
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    mp_output_remove_stale_tmp(path);
    const char *step = commit(path, tmp, data, n);
    if (step)
        return mp_error(MP_ERR_IO, "%s: write failed: %s (%s the temporary file %s)", w, strerror(errno), step, tmp);
    if (mp_output_sync_parent_dir(path) != 0)
        return mp_error(MP_ERR_IO, "%s: written, but syncing its directory failed: %s", w, strerror(errno));
    return MP_OK;
}

void mp_output_remove_stale_tmp(const char *path) {
    char dir[4096];
    if (strlen(path) >= sizeof dir) return;
    parent_of(path, dir, sizeof dir);
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t blen = strlen(base);
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        const char *n = e->d_name;
        if (strncmp(n, base, blen) || strncmp(n + blen, ".tmp.", 5)) continue;
        const char *digits = n + blen + 5;
        if (!*digits || strspn(digits, "0123456789") != strlen(digits) || strlen(digits) > 9) continue;
        long pid = strtol(digits, NULL, 10);
        if (pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        struct stat st;
        char full[8200];
        snprintf(full, sizeof full, "%s/%s", dir, n);
        if (lstat(full, &st) == 0 && S_ISREG(st.st_mode)) unlink(full);
    }
    closedir(d);
}
