/* scaler_cuda.cu — the loss scaler on the device: the per-step update as a
 * one-thread kernel running the host's rule (amp/scaler_rule.h) on the same
 * mp_scaler struct, and the forward-overflow checks of the loss and of the
 * batch norms' running statistics. A captured step needs no host decision. */
#include <limits.h>

#include "amp/scaler_rule.h"
#include "cuda/cuda_optim.h"
#include "cuda/float_bits.cuh"

__global__ void scaler_update_kernel(mp_scaler *s) { mp_scaler_rule_update(s); }

/* A NaN/inf loss: found_inf and every group's flag become MP_FOUND_FORWARD. */
__global__ void check_loss_kernel(const float *loss, mp_scaler *s) {
    if (!mp_dev_nonfinite(*loss)) return;
    atomicMax(&s->found_inf, (int)MP_FOUND_FORWARD);
    for (int g = 0; g < MP_SCALER_GROUPS; g++) atomicMax(&s->group_found[g], (int)MP_FOUND_FORWARD);
}

mp_status mp_cuda_check_loss(mp_cuda_ctx *ctx, const float *loss_dev, mp_scaler *s) {
    MP_ASSERT(ctx && loss_dev && s);
    check_loss_kernel<<<1, 1, 0, ctx->stream>>>(loss_dev, s);
    return mp_cuda_check(cudaGetLastError(), "check_loss_kernel", "forward overflow check");
}

/* One block per statistic: its NaN/inf values restart, and count as a
 * forward overflow of its batch norm (mp_cuda_check_running_stats). */
__global__ void check_running_stats_kernel(const mp_cuda_running_stat *stats, mp_scaler *s,
                                           mp_cuda_stats_record *rec) {
    const mp_cuda_running_stat st = stats[blockIdx.x];
    const unsigned long long key = ((unsigned long long)s->ends << 31) | (unsigned long long)(INT_MAX - st.node);
    for (int i = threadIdx.x; i < st.n; i += blockDim.x) {
        if (!mp_dev_nonfinite(st.data[i])) continue;
        st.data[i] = st.reset;
        atomicMax(&rec->last, key);
        atomicAdd(&rec->reset, 1ULL);
        atomicMax(&s->found_inf, (int)MP_FOUND_FORWARD);
        for (int g = 0; g < MP_SCALER_GROUPS; g++) atomicMax(&s->group_found[g], (int)MP_FOUND_FORWARD);
    }
}

mp_status mp_cuda_check_running_stats(mp_cuda_ctx *ctx, const mp_cuda_running_stat *stats, int n, mp_scaler *s,
                                      mp_cuda_stats_record *rec) {
    MP_ASSERT(ctx && s && rec && (stats || n == 0));
    if (n == 0) return MP_OK;
    check_running_stats_kernel<<<n, 128, 0, ctx->stream>>>(stats, s, rec);
    return mp_cuda_check(cudaGetLastError(), "check_running_stats_kernel", "running statistics check");
}

int mp_cuda_stats_record_node(const mp_cuda_stats_record *rec, long long *end) {
    *end = (long long)(rec->last >> 31);
    return rec->last ? INT_MAX - (int)(rec->last & INT_MAX) : -1;
}

mp_status mp_cuda_scaler_update(mp_cuda_ctx *ctx, mp_scaler *s) {
    MP_ASSERT(ctx && s);
    scaler_update_kernel<<<1, 1, 0, ctx->stream>>>(s);
    return mp_cuda_check(cudaGetLastError(), "scaler_update_kernel", "cuda loss scaler update");
}

mp_status mp_cuda_scaler_upload(mp_cuda_ctx *ctx, const mp_scaler *host, mp_scaler *dev) {
    MP_ASSERT(ctx && host && dev);
    if (!(host->scale > 0.0f) || host->opts.growth_interval < 1)
        return mp_error(MP_ERR_INVALID_ARG, "cuda loss scaler: the host scaler is not initialized (scale %g)",
                        (double)host->scale);
    MP_TRY(mp_cuda_check(cudaMemcpyAsync(dev, host, sizeof *host, cudaMemcpyHostToDevice, ctx->stream),
                         "cudaMemcpyAsync", "cuda loss scaler upload"));
    return mp_cuda_check(cudaStreamSynchronize(ctx->stream), "cudaStreamSynchronize", "cuda loss scaler upload");
}

mp_status mp_cuda_scaler_download(mp_cuda_ctx *ctx, const mp_scaler *dev, mp_scaler *host) {
    MP_ASSERT(ctx && host && dev);
    MP_TRY(mp_cuda_check(cudaMemcpyAsync(host, dev, sizeof *host, cudaMemcpyDeviceToHost, ctx->stream),
                         "cudaMemcpyAsync", "cuda loss scaler download"));
    return mp_cuda_check(cudaStreamSynchronize(ctx->stream), "cudaStreamSynchronize", "cuda loss scaler download");
}

mp_status mp_cuda_scaler_create(mp_cuda_ctx *ctx, const mp_scaler *host, mp_scaler **dev) {
    MP_ASSERT(ctx && host && dev);
    *dev = NULL;
    mp_scaler *d = NULL;
    MP_TRY(mp_cuda_check(cudaMalloc((void **)&d, sizeof *d), "cudaMalloc", "cuda loss scaler"));
    mp_status st = mp_cuda_scaler_upload(ctx, host, d);
    if (st != MP_OK) {
        cudaFree(d);
        return st;
    }
    *dev = d;
    return MP_OK;
}

void mp_cuda_scaler_destroy(mp_scaler *dev) {
    if (dev) cudaFree(dev);
}
