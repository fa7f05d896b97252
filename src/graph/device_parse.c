/* device_parse.c — device names on the command line and in the API:
 * "cpu", "cuda", "cuda:N", "auto". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "mixprec.h"

#ifdef MP_HAVE_CUDA
int mp_cuda_device_count(void); /* src/cuda/cuda_ctx.cu */
#endif

mp_status mp_device_parse(const char *text, mp_device *out) {
    if (!out) return mp_error(MP_ERR_INVALID_ARG, "--device: no output pointer");
    *out = (mp_device){MP_DEVICE_CPU, 0};
    if (!text) return mp_error(MP_ERR_INVALID_ARG, "--device: missing value (cpu, cuda, cuda:N or auto)");
    if (!strcmp(text, "cpu")) return MP_OK;
    if (!strcmp(text, "auto")) {
#ifdef MP_HAVE_CUDA
        if (mp_cuda_device_count() > 0) out->kind = MP_DEVICE_CUDA;
#endif
        return MP_OK;
    }
    if (!strncmp(text, "cuda", 4)) {
        const char *rest = text + 4;
        out->kind = MP_DEVICE_CUDA;
        if (!*rest) return MP_OK;
        char *end = NULL;
        long idx = rest[0] == ':' && rest[1] >= '0' && rest[1] <= '9' ? strtol(rest + 1, &end, 10) : -1;
        if (idx >= 0 && idx < 1024 && end && !*end) {
            out->index = (int)idx;
            return MP_OK;
        }
    }
    *out = (mp_device){MP_DEVICE_CPU, 0};
    return mp_error(MP_ERR_INVALID_ARG, "--device '%s': expected cpu, cuda, cuda:N or auto", text);
}

const char *mp_device_name(mp_device d, char *buf, size_t len) {
    if (d.kind == MP_DEVICE_CPU) snprintf(buf, len, "cpu");
    else snprintf(buf, len, "cuda:%d", d.index);
    return buf;
}

int mp_device_gpu_count(void) {
#ifdef MP_HAVE_CUDA
    return mp_cuda_device_count();
#else
    return 0;
#endif
}
