/* step_backend.c — which step backend runs a trainer on which device; which
 * devices this build runs is the execution backends' choice (exec_backend.c). */
#include "core/error.h"
#include "graph/exec_backend.h"
#include "train/step_backend.h"

#ifdef MP_HAVE_CUDA
extern const mp_step_backend mp_step_backend_cuda;
#endif

mp_status mp_step_backend_for(mp_device device, const mp_step_backend **out) {
    const mp_exec_backend *exec;
    *out = NULL;
    MP_TRY(mp_exec_backend_for(device, &exec)); /* the device kind is valid and built in */
#ifdef MP_HAVE_CUDA
    if (device.kind == MP_DEVICE_CUDA) {
        *out = &mp_step_backend_cuda;
        return MP_OK;
    }
#endif
    *out = &mp_step_backend_host;
    return MP_OK;
}
