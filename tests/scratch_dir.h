/* scratch_dir.h — a private temporary folder for a test's files, under
 * $MP_TEST_DATA (set by CTest) or /tmp, removed with everything in it. */
#ifndef MP_TESTS_SCRATCH_DIR_H
#define MP_TESTS_SCRATCH_DIR_H

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Create "<base>/<name>.XXXXXX" into buf; exits the test with 2 on failure. */
static inline void scratch_dir_create(char *buf, size_t len, const char *name) {
    const char *base = getenv("MP_TEST_DATA");
    if (!base || !*base) base = "/tmp";
    mkdir(base, 0755);
    snprintf(buf, len, "%s/%s.XXXXXX", base, name);
    if (!mkdtemp(buf)) {
        fprintf(stderr, "%s: cannot create a temp dir under %s: %s\n", name, base, strerror(errno));
        exit(2);
    }
}

/* "<dir>/<name>"; every returned path stays valid for the whole run. */
static inline const char *scratch_path(const char *dir, const char *name) {
    static char buf[256][4300];
    static int k;
    if (k == 256) {
        fprintf(stderr, "scratch_path: out of slots\n");
        exit(2);
    }
    char *p = buf[k++];
    snprintf(p, sizeof buf[0], "%s/%s", dir, name);
    return p;
}

static inline int scratch_dir_rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

static inline void scratch_dir_remove(const char *dir) {
    nftw(dir, scratch_dir_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

#endif
