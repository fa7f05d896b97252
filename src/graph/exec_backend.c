/* exec_backend.c — which execution backend runs a plan on which device:
 * the one place that knows whether this build has the CUDA backend. */
#include "graph/exec_backend.h"

#ifdef MP_HAVE_CUDA
extern const mp_exec_backend mp_exec_backend_cuda;
#endif

mp_status mp_exec_backend_for(mp_device device, const mp_exec_backend **out) {
    *out = NULL;
    switch (device.kind) {
    case MP_DEVICE_CPU: *out = &mp_exec_backend_host; return MP_OK;
    case MP_DEVICE_CUDA:
#ifdef MP_HAVE_CUDA
        *out = &mp_exec_backend_cuda;
        return MP_OK;
#else
        return mp_error(MP_ERR_UNSUPPORTED, "device cuda:%d: this build of mixprec has no CUDA backend (built without "
                        "nvcc/cuDNN); use --device cpu", device.index);
#endif
    }
    return mp_error(MP_ERR_INVALID_ARG, "device kind %d is not a device", (int)device.kind);
}
