/* dropout_cuda.cu — inverted dropout on the GPU with the CPU's mask
 * (dropout_ref.inc): element i of the LOGICAL NCHW order is kept when
 * mp_hash64(seed, i) >> 11 >= p * 2^53, so for the same seed the GPU drops
 * exactly the elements the CPU drops, whatever the layout (4-D tensors are
 * NHWC here: each element's NCHW index is computed). Kept values are
 * x * (float)(1/(1-p)); the 1-byte mask (NHWC order) stays in saved for
 * backward. Inference is the identity. */
#include <math.h>

#include "cuda/cuda_kernel_util.cuh"
#include "cuda/tangent_cuda.h"

/* mp_hash64 of core/rng.h (splitmix64 of key ^ counter * K), on the device. */
__device__ __forceinline__ unsigned long long dev_hash64(unsigned long long key, unsigned long long counter) {
    unsigned long long z = (key ^ (counter * 0xD1B54A32D192ED03ull)) + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct {
    long long C, HW; /* NHWC geometry; C = 0 for tensors stored in logical order */
    unsigned long long seed, thr;
    float scale;
} drop_args;

/* Logical (NCHW) index of physical element j and the logical stride between
 * channels c and c + 1 of the same pixel. */
template <typename I>
__device__ __forceinline__ I logical_index(I j, const drop_args &a, I &chan_stride) {
    if (a.C == 0) {
        chan_stride = 1;
        return j;
    }
    const I C = (I)a.C, HW = (I)a.HW, c = j % C, pix = j / C;
    chan_stride = HW;
    return ((pix / HW) * C + c) * HW + pix % HW;
}

template <int VEC, typename I>
__global__ void dropout_fwd_kernel(const void *x, mp_dtype xdt, void *y, mp_dtype ydt, uint8_t *mask, drop_args a,
                                   I items) {
    for (I t = (I)blockIdx.x * blockDim.x + threadIdx.x; t < items; t += (I)gridDim.x * blockDim.x) {
        const I j = t * VEC;
        I stride;
        const I li = logical_index(j, a, stride);
        float v[VEC];
        uint8_t keep[VEC];
        mp_ldv<VEC>(x, xdt, j, v);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            keep[k] = (dev_hash64(a.seed, (unsigned long long)(li + (I)k * stride)) >> 11) >= a.thr;
            v[k] *= keep[k] ? a.scale : 0.f; /* multiply, so NaN/inf propagate */
        }
        mp_stv<VEC>(y, ydt, j, v);
        if constexpr (VEC == 8) {
            uint2 m;
            m.x = keep[0] | keep[1] << 8 | keep[2] << 16 | (uint32_t)keep[3] << 24;
            m.y = keep[4] | keep[5] << 8 | keep[6] << 16 | (uint32_t)keep[7] << 24;
            *reinterpret_cast<uint2 *>(mask + j) = m;
        } else {
#pragma unroll
            for (int k = 0; k < VEC; k++) mask[j + k] = keep[k];
        }
    }
}

template <int VEC, typename I>
__global__ void dropout_bwd_kernel(const uint8_t *mask, const void *dy, mp_dtype dydt, void *dx, mp_dtype dxdt,
                                   float scale, I items) {
    for (I t = (I)blockIdx.x * blockDim.x + threadIdx.x; t < items; t += (I)gridDim.x * blockDim.x) {
        const I j = t * VEC;
        float v[VEC];
        uint8_t keep[VEC];
        if constexpr (VEC == 8) {
            uint2 m = *reinterpret_cast<const uint2 *>(mask + j);
#pragma unroll
            for (int k = 0; k < 4; k++) keep[k] = (m.x >> (8 * k)) & 0xFF, keep[4 + k] = (m.y >> (8 * k)) & 0xFF;
        } else {
#pragma unroll
            for (int k = 0; k < VEC; k++) keep[k] = mask[j + k];
        }
        mp_ldv<VEC>(dy, dydt, j, v);
#pragma unroll
        for (int k = 0; k < VEC; k++) v[k] *= keep[k] ? scale : 0.f;
        mp_stv<VEC>(dx, dxdt, j, v);
    }
}

#define DROP_LAUNCH(KERNEL, vec8, small, items, ...)                                                              \
    do {                                                                                                          \
        const unsigned grid_ = mp_cuda_grid(ctx, items);                                                          \
        if ((vec8) && (small))                                                                                    \
            KERNEL<8, unsigned><<<grid_, MP_CUDA_THREADS, 0, ctx->stream>>>(__VA_ARGS__, (unsigned)(items));      \
        else if (vec8)                                                                                            \
            KERNEL<8, unsigned long long><<<grid_, MP_CUDA_THREADS, 0, ctx->stream>>>(__VA_ARGS__,                \
                                                                                     (unsigned long long)(items)); \
        else if (small)                                                                                           \
            KERNEL<1, unsigned><<<grid_, MP_CUDA_THREADS, 0, ctx->stream>>>(__VA_ARGS__, (unsigned)(items));      \
        else                                                                                                      \
            KERNEL<1, unsigned long long><<<grid_, MP_CUDA_THREADS, 0, ctx->stream>>>(__VA_ARGS__,                \
                                                                                     (unsigned long long)(items)); \
    } while (0)

static float drop_scale(const mp_op_call *c) { return (float)(1.0 / (1.0 - (double)c->desc->attr.p)); }

static mp_status dropout_prepare(mp_cuda_ctx *ctx, const mp_op_desc *d, const mp_op_info *info,
                                 const mp_cuda_node_cfg *cfg, void **state, size_t *workspace_bytes,
                                 size_t *saved_bytes) {
    (void)ctx, (void)workspace_bytes;
    *state = NULL;
    MP_TRY(mp_cuda_op_check_dtypes(d, info, cfg, -1));
    mp_cuda_raise(saved_bytes, (size_t)mp_shape_numel(&info->out));
    return MP_OK;
}

static mp_status dropout_forward(mp_cuda_ctx *ctx, const mp_op_call *c) {
    const mp_tensor *x = &c->in[0], *y = &c->out;
    const long long n = mp_tensor_numel(y);
    if (!c->training)
        return mp_cuda_op_status(c, "forward", mp_cuda_copy_convert(ctx, x->data, x->dtype, y->data, y->dtype, n));
    if (n == 0) return MP_OK;
    const mp_shape *s = &y->shape;
    drop_args a;
    const bool nhwc = s->ndim == 4 && s->dims[1] > 1 && (long long)s->dims[2] * s->dims[3] > 1;
    a.C = nhwc ? s->dims[1] : 0;
    a.HW = nhwc ? (long long)s->dims[2] * s->dims[3] : 1;
    a.seed = c->seed;
    a.thr = (unsigned long long)ldexp((double)c->desc->attr.p, 53); /* exact: p has 24 bits */
    a.scale = drop_scale(c);
    uint8_t *mask = (uint8_t *)c->saved;
    const bool vec8 = (!nhwc ? n % 8 == 0 : a.C % 8 == 0) && mp_cuda_aligned16(x->data) &&
                      mp_cuda_aligned16(y->data) && ((uintptr_t)mask & 7u) == 0;
    const bool small = n < (1LL << 31);
    const long long items = vec8 ? n / 8 : n;
    DROP_LAUNCH(dropout_fwd_kernel, vec8, small, items, x->data, x->dtype, y->data, y->dtype, mask, a);
    return mp_cuda_op_status(c, "forward", cudaSuccess);
}

static mp_status dropout_backward(mp_cuda_ctx *ctx, const mp_op_call *c) {
    const mp_tensor *dy = &c->d_out, *dx = &c->d_in[0];
    if (!dx->data) return MP_OK;
    const long long n = mp_tensor_numel(dy);
    if (!c->training)
        return mp_cuda_op_status(c, "backward",
                                 mp_cuda_copy_convert(ctx, dy->data, dy->dtype, dx->data, dx->dtype, n));
    if (n == 0) return MP_OK;
    const uint8_t *mask = (const uint8_t *)c->saved;
    const bool vec8 = n % 8 == 0 && mp_cuda_aligned16(dy->data) && mp_cuda_aligned16(dx->data) &&
                      ((uintptr_t)mask & 7u) == 0;
    const bool small = n < (1LL << 31);
    const long long items = vec8 ? n / 8 : n;
    DROP_LAUNCH(dropout_bwd_kernel, vec8, small, items, mask, dy->data, dy->dtype, dx->data, dx->dtype,
                drop_scale(c));
    return mp_cuda_op_status(c, "backward", cudaSuccess);
}

/* Tangents (cuda_op.h): with the saved mask held fixed dropout is a diagonal
 * linear map, which backward applies: both tangents are backward. */
static mp_status dropout_forward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c) {
    return mp_cuda_tangent_forward_by_backward(ctx, c, dropout_backward);
}
static mp_status dropout_backward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c) {
    return mp_cuda_tangent_backward_linear(ctx, c, dropout_backward);
}

extern "C" const mp_cuda_op_vtable mp_cuda_dropout_vt = {"dropout",       dropout_prepare,  NULL,
                                                         dropout_forward, dropout_backward, dropout_forward_tangent,
                                                         dropout_backward_tangent, NULL};
