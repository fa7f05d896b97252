/* optim_state_cuda.cu — checkpoint transfer of an mp_cuda_optim: its state
 * buffers (SGD momentum, Adam m and v) and step count copied into and out of
 * a host mp_optim over the same parameters, whose state the checkpoint code
 * (train/checkpoint.c) writes and reads. The host's state is f32 in the CPU
 * layout; f16/bf16 device state (SGD momentum of weights without master)
 * and the state of filters the device keeps in KRSC are converted and
 * permuted on the host (host_copy.h), as the parameters themselves are. The
 * device buffers are overwritten in place, so a CUDA graph that captured
 * them stays valid. */
#include "cuda/optim_cuda.cuh"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda/host_copy.h"

/* The same kind, parameter count and, per parameter, element and state
 * buffer counts on both sides. */
static mp_status check_same_layout(const mp_cuda_optim *dev, const mp_optim *host, const char *what) {
    const int n = mp_optim_param_count(host);
    const mp_optim_kind kind = mp_optim_options(host).kind;
    if (kind != dev->opts.kind)
        return mp_error(MP_ERR_INVALID_ARG, "cuda optimizer %s: the host optimizer is %s, the device's %s", what,
                        mp_optim_kind_name(kind), mp_optim_kind_name(dev->opts.kind));
    if (n != dev->n_params)
        return mp_error(MP_ERR_INVALID_ARG, "cuda optimizer %s: the host optimizer has %d parameters, the device's %d",
                        what, n, dev->n_params);
    for (int i = 0; i < n; i++) {
        const mp_param_ref *ref = mp_optim_param(host, i);
        const int bufs = mp_optim_state_tensors(host, i, NULL);
        if (ref->n != dev->numel[i] || bufs != dev->n_bufs)
            return mp_error(MP_ERR_INVALID_ARG,
                            "cuda optimizer %s: parameter %d '%s' has %lld elements and %d state buffers on the host, "
                            "%lld and %d on the device",
                            what, i, ref->name ? ref->name : "(unnamed)", (long long)ref->n, bufs, dev->numel[i],
                            dev->n_bufs);
    }
    return MP_OK;
}

/* Every state buffer as a host copy (host_copy.h), in parameter order: f32
 * or f16/bf16 (SGD momentum of weights without master), in KRSC order for a
 * filter the device keeps so. NULL with an error when out of memory. */
static mp_host_copy *state_copies(const mp_cuda_optim *dev, const mp_optim *host, int *count, const char *what) {
    mp_host_copy *x = (mp_host_copy *)calloc((size_t)dev->n_params * dev->n_bufs + 1, sizeof *x);
    if (!x) {
        mp_error(MP_ERR_NOMEM, "cuda optimizer %s: out of memory", what);
        return NULL;
    }
    int n = 0;
    for (int i = 0; i < dev->n_params; i++) {
        float *hb[2] = {NULL, NULL};
        mp_optim_state_tensors(host, i, hb);
        const int *f = dev->filter + 3 * i;
        for (int b = 0; b < dev->n_bufs && dev->numel[i] > 0; b++)
            x[n++] = (mp_host_copy){.host = hb[b], .dev = dev->bufs[2 * i + b], .dt = dev->state_dtype[i],
                                    .n = dev->numel[i], .filter = {f[0], f[1], f[2]}, .name = "optimizer state"};
    }
    *count = n;
    return x;
}

static mp_status transfer(mp_cuda_ctx *ctx, const mp_cuda_optim *dev, const mp_optim *host, bool to_host,
                          const char *what) {
    MP_TRY(check_same_layout(dev, host, what));
    int n = 0;
    mp_host_copy *x = state_copies(dev, host, &n, what);
    if (!x) return MP_ERR_NOMEM;
    char msg[64];
    snprintf(msg, sizeof msg, "cuda optimizer %s", what);
    const mp_status s = mp_cuda_host_copies(ctx, x, n, to_host, msg);
    free(x);
    return s;
}

mp_status mp_cuda_optim_download(mp_cuda_ctx *ctx, const mp_cuda_optim *dev, mp_optim *host) {
    MP_ASSERT(ctx && dev && host);
    MP_TRY(transfer(ctx, dev, host, true, "state download"));
    int64_t steps = 0;
    MP_TRY(mp_cuda_optim_get_step_count(ctx, dev, &steps));
    return mp_optim_set_step_count(host, steps);
}

mp_status mp_cuda_optim_upload(mp_cuda_ctx *ctx, const mp_optim *host, mp_cuda_optim *dev) {
    MP_ASSERT(ctx && dev && host);
    MP_TRY(transfer(ctx, dev, host, false, "state upload"));
    return mp_cuda_optim_set_step_count(ctx, dev, mp_optim_step_count(host)); /* waits for the stream */
}
