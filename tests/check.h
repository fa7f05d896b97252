/* check.h — minimal test assertions: every CHECK counts, failures print the
 * file, line and a message, and test_summary() returns the exit code. */
#ifndef MP_TESTS_CHECK_H
#define MP_TESTS_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixprec.h"

static int check_passed, check_failed;

#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        if (cond) {                                                       \
            check_passed++;                                               \
        } else {                                                          \
            check_failed++;                                               \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                 \
            fputc('\n', stderr);                                          \
        }                                                                 \
    } while (0)

/* Expect status s from `call` and every needle string in its message
 * (MP_TEST_VERBOSE=1 prints each message). */
#define CHECK_ERR(call, s, ...)                                                                      \
    do {                                                                                           \
        mp_status st_ = (call);                                                                    \
        CHECK(st_ == (s), "status %s, expected %s: %s", mp_status_name(st_), mp_status_name(s),    \
              mp_last_error());                                                                    \
        if (getenv("MP_TEST_VERBOSE")) printf("  [%s] %s\n", mp_status_name(st_), mp_last_error()); \
        const char *needles_[] = {NULL, __VA_ARGS__};                                              \
        for (size_t i_ = 1; i_ < sizeof needles_ / sizeof needles_[0]; i_++)                       \
            CHECK(strstr(mp_last_error(), needles_[i_]), "message lacks '%s': %s", needles_[i_],   \
                  mp_last_error());                                                                \
    } while (0)

/* `bytes` of 0xFF (NaN in f32, bf16 and f64), 64-byte aligned and exactly
 * that long, so that a sanitizer sees a kernel write past the end; aborts
 * when memory runs out. */
static inline void *check_alloc_poisoned(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 1) != 0 || !p) {
        fprintf(stderr, "check_alloc_poisoned: out of memory for %zu bytes\n", bytes);
        abort();
    }
    memset(p, 0xFF, bytes);
    return p;
}

static inline int test_summary(const char *name) {
    printf("%s: %d passed, %d failed\n", name, check_passed, check_failed);
    return check_failed ? 1 : 0;
}

#endif
