/* grads_cuda.cu — gradient lists (mp_cuda_grads; f32, or f16/bf16 for a
 * plan's low_grads) and the fused unscale + inf/NaN check: one multi-tensor
 * pass that multiplies by the inverse of the device loss scale and ORs the
 * non-finite bit tests into found_inf. */
#include "amp/scaler_rule.h"
#include "cuda/float_bits.cuh"
#include "cuda/grads_cuda.cuh"

#include <stdlib.h>

mp_status mp_cuda_grads_create(mp_cuda_ctx *ctx, float *const *grads, const int64_t *numel, int n,
                               mp_cuda_grads **out) {
    return mp_cuda_grads_create_typed(ctx, (void *const *)grads, NULL, numel, n, out);
}

mp_status mp_cuda_grads_create_typed(mp_cuda_ctx *ctx, void *const *grads, const mp_dtype *dtypes,
                                     const int64_t *numel, int n, mp_cuda_grads **out) {
    *out = NULL;
    if (n < 0 || (n > 0 && (!grads || !numel)))
        return mp_error(MP_ERR_INVALID_ARG, "cuda gradient list: bad list (%d tensors)", n);
    mp_mt_tensor *rec = (mp_mt_tensor *)calloc(n > 0 ? (size_t)n : 1, sizeof *rec);
    mp_cuda_grads *g = (mp_cuda_grads *)calloc(1, sizeof *g);
    if (!rec || !g) {
        free(rec);
        free(g);
        return mp_error(MP_ERR_NOMEM, "cuda gradient list: out of host memory");
    }
    mp_status st = MP_OK;
    for (int i = 0; i < n && st == MP_OK; i++) {
        if (numel[i] < 0 || (numel[i] > 0 && !grads[i]))
            st = mp_error(MP_ERR_INVALID_ARG, "cuda gradient list: tensor %d has %lld elements at %p", i,
                          (long long)numel[i], (void *)grads[i]);
        const mp_dtype dt = dtypes ? dtypes[i] : MP_DTYPE_F32;
        if (st == MP_OK && dt != MP_DTYPE_F32 && dt != MP_DTYPE_F16 && dt != MP_DTYPE_BF16)
            st = mp_error(MP_ERR_INVALID_ARG, "cuda gradient list: tensor %d has dtype %s (f32, f16 or bf16)", i,
                          mp_dtype_name(dt));
        rec[i].ptr[0] = grads[i];
        rec[i].numel = numel[i];
        rec[i].flags = (int)dt;
    }
    if (st == MP_OK) st = mp_mt_table_build(ctx, rec, n, "cuda gradient list", &g->table);
    if (st == MP_OK)
        st = mp_cuda_check(cudaMalloc((void **)&g->scratch, sizeof *g->scratch), "cudaMalloc", "cuda gradient list");
    free(rec);
    if (st != MP_OK) {
        mp_cuda_grads_destroy(g);
        return st;
    }
    *out = g;
    return MP_OK;
}

void mp_cuda_grads_destroy(mp_cuda_grads *g) {
    if (!g) return;
    mp_mt_table_free(&g->table);
    if (g->scratch) cudaFree(g->scratch);
    free(g);
}

/* GradScaler.unscale_: inv = (float)(1 / (double)scale); no multiply at 1.
 * A chunk at 16 bytes goes 16 bytes per access (four f32 or eight f16/bf16
 * elements: the pass is memory-bound), its last elements and any other chunk
 * element by element; the same multiply and rounding either way, and the
 * check of the value stored. */
__device__ __forceinline__ unsigned unscale_check_low8(uint4 *v, int dt, bool mul, float inv) {
    __align__(16) unsigned short b[8];
    *(uint4 *)b = *v;
    unsigned bad = 0;
    for (int l = 0; l < 8; l++) {
        if (mul) b[l] = mp_dev_f32_to_low_bits(MP_FMUL(mp_dev_low_bits_to_f32(b[l], dt), inv), dt);
        bad |= mp_dev_nonfinite(mp_dev_low_bits_to_f32(b[l], dt));
    }
    if (mul) *v = *(uint4 *)b;
    return bad;
}

__global__ void __launch_bounds__(MP_MT_THREADS) unscale_check_kernel(mp_mt_table t, mp_scaler *s, int group) {
    const float scale = s->scale;
    const float inv = mp_scaler_inverse(scale);
    const bool mul = scale != 1.0f;
    unsigned bad = 0;
    mp_mt_for_each_chunk(t, [&](const mp_mt_tensor &ten, long long start, int len) {
        const int dt = ten.flags & MP_MT_DTYPE_MASK;
        int done = 0;
        if (dt == MP_DTYPE_F32 && mp_mt_aligned(ten.ptr[0], start, 4, 16)) {
            float4 *v = (float4 *)((float *)ten.ptr[0] + start);
            const int quads = len / 4;
            for (int q = threadIdx.x; q < quads; q += blockDim.x) {
                float4 y = v[q];
                if (mul) {
                    y = make_float4(MP_FMUL(y.x, inv), MP_FMUL(y.y, inv), MP_FMUL(y.z, inv), MP_FMUL(y.w, inv));
                    v[q] = y;
                }
                bad |= mp_dev_nonfinite(y.x) | mp_dev_nonfinite(y.y) | mp_dev_nonfinite(y.z) | mp_dev_nonfinite(y.w);
            }
            done = quads * 4;
        } else if ((dt == MP_DTYPE_F16 || dt == MP_DTYPE_BF16) && mp_mt_aligned(ten.ptr[0], start, 2, 16)) {
            uint4 *v = (uint4 *)((unsigned short *)ten.ptr[0] + start);
            const int octs = len / 8;
            for (int q = threadIdx.x; q < octs; q += blockDim.x) bad |= unscale_check_low8(v + q, dt, mul, inv);
            done = octs * 8;
        }
        for (long long i = start + done + threadIdx.x; i < start + len; i += blockDim.x) {
            float y = mp_dev_load_any(ten.ptr[0], dt, i);
            if (mul) y = mp_dev_store_any(ten.ptr[0], dt, i, MP_FMUL(y, inv));
            bad |= mp_dev_nonfinite(y);
        }
    });
    if (__syncthreads_or(bad) && threadIdx.x == 0) {
        atomicMax(&s->group_found[group], (int)MP_FOUND_GRADIENT);
        atomicMax(&s->found_inf, (int)MP_FOUND_GRADIENT);
    }
}

mp_status mp_cuda_unscale_check(mp_cuda_ctx *ctx, mp_scaler *s, int group, const mp_cuda_grads *g) {
    MP_ASSERT(ctx && s && g && group >= 0 && group < MP_SCALER_GROUPS);
    const unsigned grid = mp_mt_kernel_grid(ctx, g->table, (const void *)unscale_check_kernel);
    if (grid == 0) return MP_OK;
    unscale_check_kernel<<<grid, MP_MT_THREADS, 0, ctx->stream>>>(g->table, s, group);
    return mp_mt_launched("unscale_check_kernel");
}
