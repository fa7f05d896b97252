/* test_io_paths.c — user paths that are not plain files: reading one never
 * blocks (io/input_file.h), and output paths are checked, opened without
 * blocking, their write errors reported (a full disk: /dev/full), written
 * whole or not at all (a file size limit) and a killed save's temporary files
 * removed (io/output_path.h). */
#define _GNU_SOURCE /* nftw in scratch_dir.h */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "io/input_file.h"
#include "io/output_path.h"
#include "scratch_dir.h"

static char tmp[4096];
static const char *tpath(const char *name) { return scratch_path(tmp, name); }

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "test_io_paths: a FIFO blocked (hang)\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(3);
}

static void test_input(void) {
    const char *fifo = tpath("fifo"), *file = tpath("file"), *missing = tpath("missing");
    mkfifo(fifo, 0600);
    FILE *f = fopen(file, "w");
    fputs("abc", f);
    fclose(f);
    int fd = 7;
    uint64_t size = 0;
    CHECK_ERR(mp_input_open(fifo, &fd, &size), MP_ERR_IO, fifo, "not a regular file (a FIFO)");
    CHECK(fd == -1, "fd %d after an error", fd);
    CHECK_ERR(mp_input_open("/dev/zero", &fd, &size), MP_ERR_IO, "/dev/zero: not a regular file (a character device)");
    CHECK_ERR(mp_input_open(tmp, &fd, &size), MP_ERR_IO, "is a directory");
    CHECK_ERR(mp_input_open(missing, &fd, &size), MP_ERR_IO, missing, "not found");
    CHECK_ERR(mp_input_open(file, &fd, &size), MP_OK);
    char buf[4] = "";
    CHECK(fd >= 0 && size == 3 && read(fd, buf, 3) == 3 && !memcmp(buf, "abc", 3), "regular file: fd %d size %llu",
          fd, (unsigned long long)size);
    if (fd >= 0) close(fd);
}

static void test_output_check(void) {
    const char *fifo = tpath("fifo"), *file = tpath("file");
    char nodir[4200];
    snprintf(nodir, sizeof nodir, "%s/no/such/x.log", tmp);
    CHECK_ERR(mp_output_path_check(tpath("new.log"), "--log"), MP_OK);
    CHECK_ERR(mp_output_path_check(file, "--log"), MP_OK);
    CHECK_ERR(mp_output_path_check("/dev/null", "--save"), MP_ERR_IO,
              "--save /dev/null: is a character device, not a regular file");
    CHECK_ERR(mp_output_path_check(fifo, NULL), MP_ERR_IO, fifo, "is a FIFO");
    CHECK_ERR(mp_output_path_check(tmp, "--log"), MP_ERR_IO, "is a directory");
    CHECK_ERR(mp_output_path_check(nodir, "--log"), MP_ERR_IO, "--log", "does not exist");
    CHECK_ERR(mp_output_path_check("", "--log"), MP_ERR_INVALID_ARG, "--log: empty output path");
    CHECK_ERR(mp_output_dir_check(tmp, "--out"), MP_OK);
    CHECK_ERR(mp_output_dir_check(tpath("a/b/c"), "--out"), MP_OK);
    CHECK_ERR(mp_output_dir_check(tpath("file/sub"), "--out"), MP_ERR_IO, "file is a regular file, not a directory");
    CHECK_ERR(mp_output_dir_check(fifo, "--out"), MP_ERR_IO, "is a FIFO, not a directory");
}

static void test_output_open(void) {
    const char *fifo = tpath("fifo"), *file = tpath("file");
    FILE *f = NULL;
    /* a FIFO never blocks the open, with or without a reader */
    signal(SIGALRM, on_alarm);
    alarm(20);
    CHECK_ERR(mp_output_open(fifo, "--log", false, &f), MP_ERR_IO, "is a FIFO");
    alarm(0);
    CHECK(f == NULL, "FILE after an error");
    /* appending keeps, truncating replaces */
    CHECK_ERR(mp_output_open(file, "--log", true, &f), MP_OK);
    if (f) {
        fputs("def", f);
        CHECK_ERR(mp_output_close(f, file, "--log"), MP_OK);
    }
    struct stat st;
    CHECK(stat(file, &st) == 0 && st.st_size == 6, "append: %lld bytes", (long long)st.st_size);
    CHECK_ERR(mp_output_open(file, "--log", false, &f), MP_OK);
    if (f) CHECK_ERR(mp_output_close(f, file, "--log"), MP_OK);
    CHECK(stat(file, &st) == 0 && st.st_size == 0, "truncate: %lld bytes", (long long)st.st_size);
    /* a full disk: the flush fails and says so; the close still reports it
     * after the stream dropped the unwritten bytes */
    FILE *full = fopen("/dev/full", "w");
    if (!full) return;
    fputs("{\"epoch\":1}\n", full);
    CHECK_ERR(mp_output_flush(full, "/dev/full", "--log"), MP_ERR_IO, "--log /dev/full: write failed: No space left on device");
    CHECK_ERR(mp_output_close(full, "/dev/full", "--log"), MP_ERR_IO, "--log /dev/full: write failed");
    full = fopen("/dev/full", "w");
    fputs("x", full);
    CHECK_ERR(mp_output_close(full, "/dev/full", NULL), MP_ERR_IO, "/dev/full: write failed: No space left on device");
}

/* The bytes of file path into buf (at most cap); -1 when it cannot be read. */
static long read_back(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    const size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return (long)n;
}

/* Whether the scratch folder holds a "<name>.tmp.*" file. */
static bool tmp_left(const char *name) {
    DIR *d = opendir(tmp);
    bool found = false;
    for (struct dirent *e; d && (e = readdir(d));)
        found |= !strncmp(e->d_name, name, strlen(name)) && !strncmp(e->d_name + strlen(name), ".tmp.", 5);
    if (d) closedir(d);
    return found;
}

static void test_write_atomic(void) {
    const char *model = tpath("model.onnx"), *fresh = tpath("fresh.onnx");
    char buf[8192], big[8192];
    memset(big, 'x', sizeof big);
    CHECK_ERR(mp_output_write_atomic(model, "-o", "first", 5), MP_OK);
    CHECK(read_back(model, buf, sizeof buf) == 5 && !memcmp(buf, "first", 5), "new file not written");
    /* a replaced file keeps its permission bits */
    chmod(model, 0600);
    CHECK_ERR(mp_output_write_atomic(model, "-o", "second", 6), MP_OK);
    struct stat st;
    CHECK(stat(model, &st) == 0 && (st.st_mode & 0777) == 0600, "mode %o after a replace", st.st_mode & 0777);
    CHECK(read_back(model, buf, sizeof buf) == 6 && !memcmp(buf, "second", 6), "file not replaced");
    CHECK_ERR(mp_output_write_atomic(tpath("fifo"), "-o", "x", 1), MP_ERR_IO, "is a FIFO");
    /* through a symbolic link: the file it points to is replaced, the link stays a link */
    const char *link = tpath("link.onnx");
    CHECK(symlink(model, link) == 0, "symlink: %s", strerror(errno));
    CHECK_ERR(mp_output_write_atomic(link, "-o", "third", 5), MP_OK);
    CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode), "the link was replaced by a file");
    CHECK(read_back(model, buf, sizeof buf) == 5 && !memcmp(buf, "third", 5), "the link's target was not written");
    CHECK(!tmp_left("model.onnx") && !tmp_left("link.onnx"), "a temporary file was left");
    CHECK_ERR(mp_output_write_atomic(model, "-o", "second", 6), MP_OK);
    /* a file size limit (as a full disk) fails the write: the old file stays whole, no new or temporary one */
    struct rlimit old, low = {.rlim_cur = 4096, .rlim_max = 0};
    getrlimit(RLIMIT_FSIZE, &old);
    low.rlim_max = old.rlim_max;
    void (*was)(int) = signal(SIGXFSZ, SIG_IGN);
    if (setrlimit(RLIMIT_FSIZE, &low) == 0) {
        CHECK_ERR(mp_output_write_atomic(model, "-o", big, sizeof big), MP_ERR_IO,
                  "-o ", "model.onnx: write failed: File too large (writing the temporary file ", ".tmp.");
        CHECK_ERR(mp_output_write_atomic(fresh, NULL, big, sizeof big), MP_ERR_IO, "write failed: File too large");
        setrlimit(RLIMIT_FSIZE, &old);
        CHECK(read_back(model, buf, sizeof buf) == 6 && !memcmp(buf, "second", 6), "a failed write changed the file");
        CHECK(access(fresh, F_OK) != 0, "a failed write left a new file");
        CHECK(!tmp_left("model.onnx") && !tmp_left("fresh.onnx"), "a failed write left its temporary file");
    }
    signal(SIGXFSZ, was);
}

static void test_stale_tmp(void) {
    const char *target = tpath("run.safetensors");
    char dead[4300], live[4300], other[4300], odd[4300];
    snprintf(dead, sizeof dead, "%s.tmp.4194301", target); /* above any pid (pid_max <= 2^22) */
    snprintf(live, sizeof live, "%s.tmp.%ld", target, (long)getppid());
    snprintf(other, sizeof other, "%s.bak.4194301", target);
    snprintf(odd, sizeof odd, "%s.tmp.12x", target);
    const char *all[] = {dead, live, other, odd};
    for (int i = 0; i < 4; i++) {
        FILE *f = fopen(all[i], "w");
        if (f) fclose(f);
    }
    mp_output_remove_stale_tmp(target);
    CHECK(access(dead, F_OK) != 0, "a dead process's temporary file is left");
    CHECK(access(live, F_OK) == 0 && access(other, F_OK) == 0 && access(odd, F_OK) == 0,
          "a live process's or an unrelated file was removed");
}

int main(void) {
    scratch_dir_create(tmp, sizeof tmp, "test_io_paths");
    test_input();
    test_output_check();
    test_output_open();
    test_write_atomic();
    test_stale_tmp();
    scratch_dir_remove(tmp);
    return test_summary("test_io_paths");
}
