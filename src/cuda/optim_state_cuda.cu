/* optim_state_cuda.cu — checkpoint transfer of an mp_cuda_optim: its state
 * buffers (SGD momentum, Adam m and v) and step count copied into and out of
 * a host mp_optim over the same parameters, whose state the checkpoint code
 * (train/checkpoint.c) writes and reads. The device buffers are overwritten
 * in place, so a CUDA graph that captured them stays valid. */
#include "cuda/optim_cuda.cuh"

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

/* Every state buffer one way after the layout check, queued on
 * ctx->stream (not waited for). */
static mp_status copy_buffers(mp_cuda_ctx *ctx, const mp_cuda_optim *dev, const mp_optim *host, bool to_host) {
    const char *what = to_host ? "state download" : "state upload";
    MP_TRY(check_same_layout(dev, host, what));
    for (int i = 0; i < dev->n_params; i++) {
        float *hb[2] = {NULL, NULL};
        mp_optim_state_tensors(host, i, hb);
        const size_t bytes = (size_t)dev->numel[i] * sizeof(float);
        for (int b = 0; b < dev->n_bufs && bytes > 0; b++) {
            float *d = dev->bufs[2 * i + b];
            MP_TRY(mp_cuda_check(to_host ? cudaMemcpyAsync(hb[b], d, bytes, cudaMemcpyDeviceToHost, ctx->stream)
                                         : cudaMemcpyAsync(d, hb[b], bytes, cudaMemcpyHostToDevice, ctx->stream),
                                 "cudaMemcpyAsync", what));
        }
    }
    return MP_OK;
}

mp_status mp_cuda_optim_download(mp_cuda_ctx *ctx, const mp_cuda_optim *dev, mp_optim *host) {
    MP_ASSERT(ctx && dev && host);
    MP_TRY(copy_buffers(ctx, dev, host, true));
    int64_t steps = 0;
    MP_TRY(mp_cuda_optim_get_step_count(ctx, dev, &steps)); /* waits for the copies too */
    mp_optim_set_step_count(host, steps);
    return MP_OK;
}

mp_status mp_cuda_optim_upload(mp_cuda_ctx *ctx, const mp_optim *host, mp_cuda_optim *dev) {
    MP_ASSERT(ctx && dev && host);
    MP_TRY(copy_buffers(ctx, dev, host, false));
    return mp_cuda_optim_set_step_count(ctx, dev, mp_optim_step_count(host)); /* waits for the copies too */
}
