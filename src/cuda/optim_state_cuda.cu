/* optim_state_cuda.cu — checkpoint transfer of an mp_cuda_optim: its state
 * buffers (SGD momentum, Adam m and v) and step count copied into and out of
 * a host mp_optim over the same parameters, whose state the checkpoint code
 * (train/checkpoint.c) writes and reads. The host's state is f32; f16/bf16
 * device state (SGD momentum of weights without master) goes through one
 * host staging buffer and is converted on the host, as mp_device_params_sync
 * (cuda_plan.c) does for such weights. The device buffers are overwritten in
 * place, so a CUDA graph that captured them stays valid. */
#include "cuda/optim_cuda.cuh"

#include <stdint.h>
#include <stdlib.h>

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

/* Elements of f16/bf16 state over all buffers: the host staging they go through. */
static size_t low_state_elements(const mp_cuda_optim *dev) {
    size_t n = 0;
    for (int i = 0; i < dev->n_params; i++)
        if (dev->state_dtype[i] != MP_DTYPE_F32) n += (size_t)dev->n_bufs * (size_t)dev->numel[i];
    return n;
}

/* Every state buffer one way, queued on ctx->stream (not waited for). f32
 * state is copied straight into / from the host's buffers; f16/bf16 state
 * through stage (low_state_elements long, in parameter order): uploads
 * convert the host's f32 values into it first, RNE; downloads leave the bits
 * there for stage_to_host after the stream synchronized. */
static mp_status queue_copies(mp_cuda_ctx *ctx, const mp_cuda_optim *dev, const mp_optim *host, bool to_host,
                              uint16_t *stage) {
    const char *what = to_host ? "state download" : "state upload";
    for (int i = 0; i < dev->n_params; i++) {
        float *hb[2] = {NULL, NULL};
        mp_optim_state_tensors(host, i, hb);
        const size_t n = (size_t)dev->numel[i];
        const mp_dtype dt = dev->state_dtype[i];
        for (int b = 0; b < dev->n_bufs && n > 0; b++) {
            void *d = dev->bufs[2 * i + b], *h = hb[b];
            if (dt != MP_DTYPE_F32) {
                if (!to_host) mp_store_f32(stage, dt, hb[b], (int64_t)n);
                h = stage;
                stage += n;
            }
            const size_t bytes = n * mp_dtype_size(dt);
            MP_TRY(mp_cuda_check(to_host ? cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, ctx->stream)
                                         : cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, ctx->stream),
                                 "cudaMemcpyAsync", what));
        }
    }
    return MP_OK;
}

/* After a download synchronized: the staged f16/bf16 bits into the host's
 * f32 buffers (exact). */
static void stage_to_host(const mp_cuda_optim *dev, mp_optim *host, const uint16_t *stage) {
    for (int i = 0; i < dev->n_params; i++) {
        const mp_dtype dt = dev->state_dtype[i];
        if (dt == MP_DTYPE_F32) continue;
        float *hb[2] = {NULL, NULL};
        mp_optim_state_tensors(host, i, hb);
        const size_t n = (size_t)dev->numel[i];
        for (int b = 0; b < dev->n_bufs; b++) {
            mp_load_f32(hb[b], stage, dt, (int64_t)n);
            stage += n;
        }
    }
}

/* The staging of dev's f16/bf16 state (NULL when it has none). */
static mp_status stage_alloc(const mp_cuda_optim *dev, const char *what, uint16_t **stage) {
    const size_t n = low_state_elements(dev);
    *stage = n ? (uint16_t *)malloc(n * sizeof **stage) : NULL;
    if (n && !*stage)
        return mp_error(MP_ERR_NOMEM, "cuda optimizer %s: out of memory staging %zu f16/bf16 state values", what, n);
    return MP_OK;
}

/* Frees the staging once no copy can touch it; returns s. */
static mp_status stage_free(mp_cuda_ctx *ctx, uint16_t *stage, mp_status s) {
    if (s != MP_OK && stage) (void)cudaStreamSynchronize(ctx->stream);
    free(stage);
    return s;
}

mp_status mp_cuda_optim_download(mp_cuda_ctx *ctx, const mp_cuda_optim *dev, mp_optim *host) {
    MP_ASSERT(ctx && dev && host);
    const char *what = "state download";
    MP_TRY(check_same_layout(dev, host, what));
    uint16_t *stage = NULL;
    MP_TRY(stage_alloc(dev, what, &stage));
    int64_t steps = 0;
    mp_status s = queue_copies(ctx, dev, host, true, stage);
    if (s == MP_OK) s = mp_cuda_optim_get_step_count(ctx, dev, &steps); /* waits for the copies too */
    if (s == MP_OK) {
        stage_to_host(dev, host, stage);
        s = mp_optim_set_step_count(host, steps);
    }
    return stage_free(ctx, stage, s);
}

mp_status mp_cuda_optim_upload(mp_cuda_ctx *ctx, const mp_optim *host, mp_cuda_optim *dev) {
    MP_ASSERT(ctx && dev && host);
    const char *what = "state upload";
    MP_TRY(check_same_layout(dev, host, what));
    uint16_t *stage = NULL;
    MP_TRY(stage_alloc(dev, what, &stage));
    mp_status s = queue_copies(ctx, dev, host, false, stage);
    if (s == MP_OK) s = mp_cuda_optim_set_step_count(ctx, dev, mp_optim_step_count(host)); /* waits for the copies */
    return stage_free(ctx, stage, s);
}
