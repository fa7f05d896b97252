/* concat_cuda.cu — concatenation of 2..8 tensors along channels on the GPU
 * (concat.c): in NHWC every pixel is a row, so 4-D (N, C, H, W) and 2-D
 * (N, F) are both rows x channels, and part i fills channels
 * [offset_i, offset_i + C_i) of each row. One kernel moves every part
 * (whole -> parts in backward, NULL gradients skipped), converting dtypes
 * when a part's dtype differs from the whole's; 8 channels per thread when
 * every part's width allows 16-byte accesses. */
#include "cuda/cuda_kernel_util.cuh"
#include "cuda/tangent_cuda.h"

typedef struct {
    void *data[MP_MAX_INPUTS]; /* NULL: skipped (backward) */
    mp_dtype dtype[MP_MAX_INPUTS];
    int width[MP_MAX_INPUTS];
    int offset[MP_MAX_INPUTS];
    int n;
} concat_parts;

template <int VEC, typename I>
__global__ void concat_kernel(concat_parts parts, void *whole, mp_dtype wdt, int C, I total, bool to_whole) {
    const I cg = (I)(C / VEC);
    for (I t = (I)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (I)gridDim.x * blockDim.x) {
        const int c = (int)(t % cg) * VEC;
        const I row = t / cg;
        int i = 0;
        while (i + 1 < parts.n && parts.offset[i + 1] <= c) i++;
        void *part = parts.data[i];
        if (!part) continue;
        const I at = row * (I)parts.width[i] + (I)(c - parts.offset[i]);
        float v[VEC];
        if (to_whole) {
            mp_ldv<VEC>(part, parts.dtype[i], at, v);
            mp_stv<VEC>(whole, wdt, t * VEC, v);
        } else {
            mp_ldv<VEC>(whole, wdt, t * VEC, v);
            mp_stv<VEC>(part, parts.dtype[i], at, v);
        }
    }
}

static mp_status concat_prepare(mp_cuda_ctx *ctx, const mp_op_desc *d, const mp_op_info *info,
                                const mp_cuda_node_cfg *cfg, void **state, size_t *workspace_bytes,
                                size_t *saved_bytes) {
    (void)ctx, (void)workspace_bytes, (void)saved_bytes;
    *state = NULL;
    return mp_cuda_op_check_dtypes(d, info, cfg, -1);
}

/* forward: parts = inputs, whole = out; backward: parts = d_in, whole = d_out. */
static cudaError_t concat_move(mp_cuda_ctx *ctx, const mp_op_call *c, bool forward) {
    const mp_tensor *whole = forward ? &c->out : &c->d_out;
    const mp_tensor *part = forward ? c->in : c->d_in;
    concat_parts parts;
    parts.n = c->n_in;
    bool vec8 = mp_cuda_aligned16(whole->data);
    int off = 0;
    for (int i = 0; i < c->n_in; i++) {
        parts.data[i] = part[i].data;
        parts.dtype[i] = part[i].dtype;
        parts.width[i] = c->in[i].shape.dims[1];
        parts.offset[i] = off;
        off += parts.width[i];
        vec8 = vec8 && parts.width[i] % 8 == 0 && mp_cuda_aligned16(part[i].data);
    }
    const int C = whole->shape.dims[1];
    const long long total = mp_cuda_rows(&whole->shape) * C / (vec8 ? 8 : 1);
    const unsigned grid = mp_cuda_grid(ctx, total);
    const bool small = mp_tensor_numel(whole) < (1LL << 31);
    cudaStream_t st = ctx->stream;
    if (vec8 && small)
        concat_kernel<8, unsigned><<<grid, MP_CUDA_THREADS, 0, st>>>(parts, whole->data, whole->dtype, C,
                                                                     (unsigned)total, forward);
    else if (vec8)
        concat_kernel<8, unsigned long long><<<grid, MP_CUDA_THREADS, 0, st>>>(parts, whole->data, whole->dtype, C,
                                                                               (unsigned long long)total, forward);
    else if (small)
        concat_kernel<1, unsigned><<<grid, MP_CUDA_THREADS, 0, st>>>(parts, whole->data, whole->dtype, C,
                                                                     (unsigned)total, forward);
    else
        concat_kernel<1, unsigned long long><<<grid, MP_CUDA_THREADS, 0, st>>>(parts, whole->data, whole->dtype, C,
                                                                               (unsigned long long)total, forward);
    return cudaGetLastError();
}

static mp_status concat_forward(mp_cuda_ctx *ctx, const mp_op_call *c) {
    return mp_cuda_op_status(c, "forward", concat_move(ctx, c, true));
}

static mp_status concat_backward(mp_cuda_ctx *ctx, const mp_op_call *c) {
    bool any = false;
    for (int i = 0; i < c->n_in; i++) any = any || c->d_in[i].data;
    if (!any) return MP_OK;
    return mp_cuda_op_status(c, "backward", concat_move(ctx, c, false));
}

/* Tangents (cuda_op.h): data movement, linear; a NULL part's tangent is zero
 * (t_out zeroed first, the move skips that part). */
static mp_status concat_forward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c) {
    return mp_cuda_tangent_forward_linear(ctx, c, concat_forward, true);
}
static mp_status concat_backward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c) {
    return mp_cuda_tangent_backward_linear(ctx, c, concat_backward);
}

extern "C" const mp_cuda_op_vtable mp_cuda_concat_vt = {"concat",        concat_prepare,  NULL,
                                                        concat_forward,  concat_backward, concat_forward_tangent,
                                                        concat_backward_tangent, NULL};
