/* dnnl_check.h — what the oneDNN timing programs under dev/ share: CK(call)
 * ends the program with the call's text and status when a oneDNN call
 * fails. Included by each (they build alone: cc dev/<tool>.c -ldnnl). */
#ifndef MP_DEV_DNNL_CHECK_H
#define MP_DEV_DNNL_CHECK_H

#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                                 \
    do {                                                                                      \
        dnnl_status_t s_ = (x);                                                               \
        if (s_ != dnnl_success) {                                                             \
            fprintf(stderr, "%s:%d: %s failed (%d)\n", __FILE__, __LINE__, #x, (int)s_); \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

#endif
