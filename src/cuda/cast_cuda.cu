/* cast_cuda.cu — the f32 -> f16/bf16 weight casts as one multi-tensor pass
 * (slot 0 the f32 master, slot 1 the copy, the dtype in the flags), RNE bit
 * for bit as the CPU's mp_convert_f32_to_{f16,bf16}. */
#include "cuda/float_bits.cuh"
#include "cuda/multi_tensor.cuh"

#include <stdlib.h>

struct mp_cuda_casts {
    mp_mt_table table;
};

mp_status mp_cuda_casts_create(mp_cuda_ctx *ctx, const mp_cuda_cast_ref *pairs, int n, mp_cuda_casts **out) {
    MP_ASSERT(ctx && out);
    *out = NULL;
    if (n < 0 || (n > 0 && !pairs)) return mp_error(MP_ERR_INVALID_ARG, "cuda weight casts: bad list (%d pairs)", n);
    for (int i = 0; i < n; i++) {
        const mp_cuda_cast_ref *r = &pairs[i];
        if (r->n < 0 || (r->n > 0 && (!r->src || !r->dst)))
            return mp_error(MP_ERR_INVALID_ARG, "cuda weight casts: pair %d has n = %lld, src %p, dst %p", i,
                            (long long)r->n, (const void *)r->src, r->dst);
        if (r->dtype != MP_DTYPE_F16 && r->dtype != MP_DTYPE_BF16)
            return mp_error(MP_ERR_INVALID_ARG, "cuda weight casts: pair %d casts to %s (f16 or bf16 expected)", i,
                            mp_dtype_name(r->dtype));
    }
    mp_cuda_casts *c = (mp_cuda_casts *)calloc(1, sizeof *c);
    mp_mt_tensor *rec = (mp_mt_tensor *)calloc(n > 0 ? (size_t)n : 1, sizeof *rec);
    mp_status st = c && rec ? MP_OK : mp_error(MP_ERR_NOMEM, "cuda weight casts: out of host memory");
    for (int i = 0; st == MP_OK && i < n; i++) {
        rec[i].ptr[0] = (void *)pairs[i].src;
        rec[i].ptr[1] = pairs[i].dst;
        rec[i].numel = pairs[i].n;
        rec[i].flags = (int)pairs[i].dtype;
    }
    if (st == MP_OK) st = mp_mt_table_build(ctx, rec, n, "cuda weight casts", &c->table);
    free(rec);
    if (st != MP_OK) {
        mp_cuda_casts_destroy(c);
        return st;
    }
    *out = c;
    return MP_OK;
}

void mp_cuda_casts_destroy(mp_cuda_casts *c) {
    if (!c) return;
    mp_mt_table_free(&c->table);
    free(c);
}

__global__ void __launch_bounds__(MP_MT_THREADS) cast_kernel(mp_mt_table t, const int *found_inf) {
    if (found_inf && *found_inf) return;
    mp_mt_for_each(t, [&](const mp_mt_tensor &ten, long long i) {
        mp_dev_store_low(ten.ptr[1], ten.flags & MP_MT_DTYPE_MASK, i, ((const float *)ten.ptr[0])[i]);
    });
}

mp_status mp_cuda_cast_weights(mp_cuda_ctx *ctx, const mp_cuda_casts *c, const int *found_inf) {
    MP_ASSERT(ctx && c);
    const unsigned grid = mp_mt_kernel_grid(ctx, c->table, (const void *)cast_kernel);
    if (grid == 0) return MP_OK;
    cast_kernel<<<grid, MP_MT_THREADS, 0, ctx->stream>>>(c->table, found_inf);
    return mp_mt_launched("cast_kernel");
}
