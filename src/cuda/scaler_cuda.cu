/* scaler_cuda.cu — the loss scaler in device memory: upload/download of an
 * mp_scaler's rules and state, and the per-iteration update as a one-thread
 * kernel, a line-for-line port of mp_scaler_update (amp/scaler.c): same
 * double products stored as float, same min/max clamps, same DeepSpeed
 * hysteresis; and forward overflows (a non-finite loss) counted as
 * mp_scaler_forward_overflow does. A captured step needs no host decision. */
#include "cuda/cuda_optim.h"
#include "cuda/float_bits.cuh"

#include <math.h>
#include <stdlib.h>

static mp_cuda_scaler_state to_device_layout(const mp_scaler *h) {
    mp_cuda_scaler_state d;
    d.dynamic = h->opts.dynamic;
    d.growth_interval = h->opts.growth_interval;
    d.hysteresis = h->opts.hysteresis;
    d.consecutive_hysteresis = h->opts.consecutive_hysteresis;
    d.growth_factor = h->opts.growth_factor;
    d.backoff_factor = h->opts.backoff_factor;
    d.min_scale = h->min_scale;
    d.max_scale = h->max_scale;
    d.scale = h->scale;
    d.growth_tracker = h->growth_tracker;
    d.hysteresis_left = h->hysteresis_left;
    d.last_overflow_step = h->last_overflow_step;
    d.step = h->step;
    d.skipped_steps = h->skipped_steps;
    d.forward_overflows = h->forward_overflows;
    d.consecutive_forward_overflows = h->consecutive_forward_overflows;
    d.found_inf = h->found_inf;
    d.ends = 0;
    d.last_skip_end = -1;
    d.last_found = 0;
    d.last_skip_scale = h->scale;
    d.forward_peak = h->consecutive_forward_overflows;
    d.forward_peak_end = -1;
    return d;
}

mp_status mp_cuda_scaler_create(mp_cuda_ctx *ctx, const mp_scaler *host, mp_cuda_scaler_state **dev) {
    MP_ASSERT(ctx && host && dev);
    *dev = NULL;
    mp_cuda_scaler_state *d = NULL;
    MP_TRY(mp_cuda_check(cudaMalloc((void **)&d, sizeof *d), "cudaMalloc", "cuda loss scaler"));
    mp_status st = mp_cuda_scaler_upload(ctx, host, d);
    if (st != MP_OK) {
        cudaFree(d);
        return st;
    }
    *dev = d;
    return MP_OK;
}

void mp_cuda_scaler_destroy(mp_cuda_scaler_state *dev) {
    if (dev) cudaFree(dev);
}

mp_status mp_cuda_scaler_upload(mp_cuda_ctx *ctx, const mp_scaler *host, mp_cuda_scaler_state *dev) {
    MP_ASSERT(ctx && host && dev);
    if (!(host->scale > 0.0f) || host->opts.growth_interval < 1)
        return mp_error(MP_ERR_INVALID_ARG, "cuda loss scaler: the host scaler is not initialized (scale %g)",
                        (double)host->scale);
    const mp_cuda_scaler_state d = to_device_layout(host);
    MP_TRY(mp_cuda_check(cudaMemcpyAsync(dev, &d, sizeof d, cudaMemcpyHostToDevice, ctx->stream), "cudaMemcpyAsync",
                         "cuda loss scaler upload"));
    return mp_cuda_check(cudaStreamSynchronize(ctx->stream), "cudaStreamSynchronize", "cuda loss scaler upload");
}

mp_status mp_cuda_scaler_download(mp_cuda_ctx *ctx, const mp_cuda_scaler_state *dev, mp_scaler *host) {
    MP_ASSERT(ctx && host && dev);
    mp_cuda_scaler_state d;
    MP_TRY(mp_cuda_check(cudaMemcpyAsync(&d, dev, sizeof d, cudaMemcpyDeviceToHost, ctx->stream), "cudaMemcpyAsync",
                         "cuda loss scaler download"));
    MP_TRY(mp_cuda_check(cudaStreamSynchronize(ctx->stream), "cudaStreamSynchronize", "cuda loss scaler download"));
    host->scale = d.scale;
    host->growth_tracker = d.growth_tracker;
    host->hysteresis_left = d.hysteresis_left;
    host->last_overflow_step = d.last_overflow_step;
    host->step = d.step;
    host->skipped_steps = d.skipped_steps;
    host->forward_overflows = d.forward_overflows;
    host->consecutive_forward_overflows = d.consecutive_forward_overflows;
    host->found_inf = d.found_inf != 0;
    return MP_OK;
}

/* ---- the update, as amp/scaler.c ------------------------------------------ */

__device__ static void back_off(mp_cuda_scaler_state *s) {
    float next = (float)((double)s->scale * (double)s->backoff_factor);
    if (!(next >= s->min_scale)) next = s->min_scale;
    s->scale = next;
}

__device__ static void grow(mp_cuda_scaler_state *s) {
    float next = (float)((double)s->scale * (double)s->growth_factor);
    if (next > s->max_scale) next = s->max_scale;
    if (!mp_dev_nonfinite(next)) s->scale = next;
}

__device__ static void update_plain(mp_cuda_scaler_state *s, bool overflow) {
    if (overflow) {
        back_off(s);
        s->growth_tracker = 0;
    } else {
        int successful = s->growth_tracker + 1;
        if (successful == s->growth_interval) {
            grow(s);
            s->growth_tracker = 0;
        } else {
            s->growth_tracker = successful;
        }
    }
}

__device__ static void update_hysteresis(mp_cuda_scaler_state *s, bool overflow) {
    const int h = s->hysteresis;
    if (overflow) {
        if (s->hysteresis_left == 1) back_off(s);
        else s->hysteresis_left -= 1;
        s->growth_tracker = 0;
    } else {
        if (s->consecutive_hysteresis) s->hysteresis_left = h;
        s->growth_tracker += 1;
        if ((s->step - s->last_overflow_step) % s->growth_interval == 0) {
            if (!s->consecutive_hysteresis) s->hysteresis_left = h;
            grow(s);
            s->growth_tracker = 0;
        }
    }
}

__global__ void scaler_update_kernel(mp_cuda_scaler_state *s) {
    const int found = s->found_inf;
    const long long end = s->ends++;
    s->found_inf = 0;
    if (found) {
        s->last_skip_end = end;
        s->last_found = found;
        s->last_skip_scale = s->scale;
    }
    if (found >= MP_CUDA_FOUND_FORWARD) { /* as mp_scaler_forward_overflow */
        s->skipped_steps++;
        s->forward_overflows++;
        if (s->consecutive_forward_overflows < 0x7fffffff) s->consecutive_forward_overflows++;
        if (s->consecutive_forward_overflows > s->forward_peak) {
            s->forward_peak = s->consecutive_forward_overflows;
            s->forward_peak_end = end;
        }
        return;
    }
    s->consecutive_forward_overflows = 0; /* mp_scaler_forward_ok */
    const bool skip = found != 0;
    if (s->dynamic) {
        if (s->hysteresis > 1) update_hysteresis(s, skip);
        else update_plain(s, skip);
    }
    if (skip) {
        s->skipped_steps++;
        s->last_overflow_step = s->step;
    }
    s->step++;
}

__global__ void check_loss_kernel(const float *loss, mp_cuda_scaler_state *s) {
    if (mp_dev_nonfinite(*loss)) atomicMax(&s->found_inf, (int)MP_CUDA_FOUND_FORWARD);
}

mp_status mp_cuda_check_loss(mp_cuda_ctx *ctx, const float *loss_dev, mp_cuda_scaler_state *s) {
    MP_ASSERT(ctx && loss_dev && s);
    check_loss_kernel<<<1, 1, 0, ctx->stream>>>(loss_dev, s);
    return mp_cuda_check(cudaGetLastError(), "check_loss_kernel", "forward overflow check");
}

mp_status mp_cuda_scaler_update(mp_cuda_ctx *ctx, mp_cuda_scaler_state *s) {
    MP_ASSERT(ctx && s);
    scaler_update_kernel<<<1, 1, 0, ctx->stream>>>(s);
    return mp_cuda_check(cudaGetLastError(), "scaler_update_kernel", "cuda loss scaler update");
}
