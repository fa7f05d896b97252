/* error.h — the two error tiers: mp_status with a thread-local message for
 * anything a user can cause, MP_ASSERT (abort) for programmer bugs. */
#ifndef MP_CORE_ERROR_H
#define MP_CORE_ERROR_H

#include "mixprec.h"

#ifdef __cplusplus
extern "C" { /* the CUDA backend (C++) includes these headers */
#endif

/* Record a message for mp_last_error() and return `s`, so callers can write
 * `return mp_error(MP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));` */
mp_status mp_error(mp_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mp_clear_error(void);

void mp_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));
#define MP_ASSERT(e) ((e) ? (void)0 : mp_assert_fail(#e, __FILE__, __LINE__))

/* Propagate a non-OK status. */
#define MP_TRY(call)                      \
    do {                                  \
        mp_status mp_try_s_ = (call);     \
        if (mp_try_s_ != MP_OK) return mp_try_s_; \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
