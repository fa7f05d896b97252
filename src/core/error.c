/* error.c — thread-local last-error message and the assertion handler. */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char last_error[1024];

/* The message is formatted aside first, so an argument may be
 * mp_last_error() itself (to prefix it), and is kept to one line: control
 * characters that came from a file (a tensor name, a metadata key) become
 * '?', so an error is always one line on stderr. */
mp_status mp_error(mp_status s, const char *fmt, ...) {
    char msg[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (char *p = msg; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
    memcpy(last_error, msg, sizeof msg);
    return s;
}

void mp_clear_error(void) { last_error[0] = '\0'; }

const char *mp_last_error(void) { return last_error; }

const char *mp_status_name(mp_status s) {
    switch (s) {
    case MP_OK: return "ok";
    case MP_ERR_INVALID_ARG: return "invalid argument";
    case MP_ERR_IO: return "i/o error";
    case MP_ERR_FORMAT: return "bad format";
    case MP_ERR_SHAPE: return "bad shape";
    case MP_ERR_NOMEM: return "out of memory";
    case MP_ERR_NONFINITE: return "non-finite value";
    case MP_ERR_UNSUPPORTED: return "unsupported";
    case MP_ERR_INTERNAL: return "internal library error";
    }
    return "unknown status";
}

void mp_assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "mixprec: internal assertion failed: %s (%s:%d)\n", expr, file, line);
    abort();
}
