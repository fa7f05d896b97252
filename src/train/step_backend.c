/* step_backend.c — which step backend runs a trainer on which device: the
 * one place that knows whether this build has the CUDA backend. */
#include "core/error.h"
#include "train/step_backend.h"

#ifdef MP_HAVE_CUDA
extern const mp_step_backend mp_step_backend_cuda;
#endif

mp_status mp_step_backend_for(mp_device device, const mp_step_backend **out) {
    *out = NULL;
    switch (device.kind) {
    case MP_DEVICE_CPU: *out = &mp_step_backend_host; return MP_OK;
    case MP_DEVICE_CUDA:
#ifdef MP_HAVE_CUDA
        *out = &mp_step_backend_cuda;
        return MP_OK;
#else
        return mp_error(MP_ERR_UNSUPPORTED, "device cuda:%d: this build of mixprec has no CUDA backend (built without "
                        "nvcc/cuDNN); use --device cpu", device.index);
#endif
    }
    return mp_error(MP_ERR_INVALID_ARG, "device kind %d is not a device", (int)device.kind);
}
