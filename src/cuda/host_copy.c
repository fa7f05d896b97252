/* host_copy.c — host <-> device tensor copies with dtype conversion and the
 * KRSC filter order (host_copy.h). f32 tensors in the CPU layout are copied
 * straight; the others are converted / permuted on the host through one
 * staging buffer, so the device only ever sees its own layout. A (k, c, rs)
 * filter to KRSC is k transposes of (c, rs) (core/tensor.h). */
#include "cuda/host_copy.h"

#include <stdlib.h>

#include <cuda_runtime.h>

#include "core/dtype_convert.h"
#include "core/tensor.h"
#include "cuda/cuda_ctx.h"

static bool staged(const mp_host_copy *x) { return x->dt != MP_DTYPE_F32 || x->filter[2] > 0; }

/* Converting a filter goes through f32 in the CPU layout: tmp. */
static bool needs_tmp(const mp_host_copy *x) { return x->dt != MP_DTYPE_F32 && x->filter[2] > 0; }

static size_t dev_bytes(const mp_host_copy *x) { return (size_t)x->n * mp_dtype_size(x->dt); }

/* Its room in the staging buffer: 16-byte aligned slices. */
static size_t stage_room(const mp_host_copy *x) { return (dev_bytes(x) + 15) / 16 * 16; }

static const char *name_of(const mp_host_copy *x) { return x->name ? x->name : "(unnamed)"; }

/* Host f32 (CPU layout) into the device's form at stage (tmp: n f32 when needs_tmp). */
static void to_device_form(const mp_host_copy *x, void *stage, float *tmp) {
    if (x->filter[2] <= 0) { /* f16/bf16 in the CPU layout */
        mp_store_f32_known(stage, x->dt, x->host, x->n);
        return;
    }
    void *krsc = x->dt == MP_DTYPE_F32 ? stage : tmp;
    mp_transpose_batch(krsc, x->host, sizeof(float), x->filter[0], x->filter[1], x->filter[2]);
    if (krsc == tmp) mp_store_f32_known(stage, x->dt, tmp, x->n);
}

/* The device's form at stage back into host f32 (CPU layout), exactly. */
static void to_host_form(const mp_host_copy *x, const void *stage, float *tmp) {
    if (x->filter[2] <= 0) {
        mp_load_f32_known(x->host, stage, x->dt, x->n);
        return;
    }
    const void *krsc = stage;
    if (needs_tmp(x)) {
        mp_load_f32_known(tmp, stage, x->dt, x->n);
        krsc = tmp;
    }
    mp_transpose_batch(x->host, krsc, sizeof(float), x->filter[0], x->filter[2], x->filter[1]);
}

mp_status mp_cuda_host_copies(mp_cuda_ctx *ctx, const mp_host_copy *x, int count, bool to_host, const char *what) {
    size_t stage_bytes = 0, tmp_n = 0;
    for (int i = 0; i < count; i++) {
        const int *f = x[i].filter;
        if (f[2] > 0 && (int64_t)f[0] * f[1] * f[2] != x[i].n)
            return mp_error(MP_ERR_INTERNAL, "%s: '%s' is a (%d, %d, %d) filter of %lld values", what,
                            name_of(&x[i]), f[0], f[1], f[2], (long long)x[i].n);
        if (staged(&x[i])) stage_bytes += stage_room(&x[i]);
        if (needs_tmp(&x[i]) && (size_t)x[i].n > tmp_n) tmp_n = (size_t)x[i].n;
    }
    char *stage = stage_bytes ? malloc(stage_bytes) : NULL;
    float *tmp = tmp_n ? malloc(tmp_n * sizeof *tmp) : NULL;
    mp_status s = (stage_bytes && !stage) || (tmp_n && !tmp)
                      ? mp_error(MP_ERR_NOMEM, "%s: out of memory staging %zu bytes (and %zu for converting)", what,
                                 stage_bytes, tmp_n * sizeof(float))
                      : MP_OK;
    char *at = stage;
    for (int i = 0; i < count && s == MP_OK; i++) {
        const size_t bytes = dev_bytes(&x[i]);
        void *h = x[i].host;
        if (staged(&x[i])) {
            h = at;
            at += stage_room(&x[i]);
            if (!to_host) to_device_form(&x[i], h, tmp);
        }
        s = mp_cuda_check(to_host ? cudaMemcpyAsync(h, x[i].dev, bytes, cudaMemcpyDeviceToHost, ctx->stream)
                                  : cudaMemcpyAsync(x[i].dev, h, bytes, cudaMemcpyHostToDevice, ctx->stream),
                          "cudaMemcpyAsync", name_of(&x[i]));
    }
    /* waited for on failure too (no copy may still read or write the staging when it is freed), keeping
     * the first error's words */
    if (s == MP_OK) s = mp_cuda_check(cudaStreamSynchronize(ctx->stream), "cudaStreamSynchronize", what);
    else (void)cudaStreamSynchronize(ctx->stream);
    at = stage;
    for (int i = 0; i < count && s == MP_OK && to_host; i++) {
        if (!staged(&x[i])) continue;
        to_host_form(&x[i], at, tmp);
        at += stage_room(&x[i]);
    }
    free(stage);
    free(tmp);
    return s;
}
