/* pool2d_cuda.cu — 2-D max and average pooling on NHWC activations with
 * pool2d_ref.inc's rules: square kernel k, stride s, padding p; max takes
 * the first maximum of the row-major window scan and a NaN wins (the last
 * one seen), keeping its index h*W + w as int32 in saved (NHWC order);
 * average divides by k*k (padding counts). One thread per output pixel and
 * group of 8 channels (or 1 when C % 8 != 0). Backward gathers: each input
 * element sums, in output order, the windows that reach it, so no atomics
 * and the same summation order as the CPU scatter. An average pool with a
 * batch norm + ReLU fused in (mp_op_call.bn_x, graph/plan_fuse.h) applies
 * them to the batch norm's input as it loads (the values the batch norm
 * would have stored), and its backward runs in the batch norm's. */
#include "cuda/batchnorm2d_math.cuh"
#include "cuda/cuda_kernel_util.cuh"
#include "cuda/tangent_cuda.h"

typedef struct {
    int C, H, W, OH, OW, k, s, p;
} pool_geom;

static pool_geom geom_of(const mp_op_call *c) {
    const mp_shape *x = &c->in[0].shape, *y = &c->out.shape;
    const mp_pool_opts *o = &c->desc->attr.pool;
    return pool_geom{x->dims[1], x->dims[2], x->dims[3], y->dims[2], y->dims[3], o->kernel, o->stride, o->padding};
}

/* Clipped window of output (oh, ow): rows [h0, h1), cols [w0, w1). */
struct window {
    int h0, h1, w0, w1;
};
__device__ __forceinline__ window window_of(const pool_geom &g, int oh, int ow) {
    window r;
    r.h0 = oh * g.s - g.p, r.w0 = ow * g.s - g.p;
    r.h1 = min(r.h0 + g.k, g.H), r.w1 = min(r.w0 + g.k, g.W);
    r.h0 = max(r.h0, 0), r.w0 = max(r.w0, 0);
    return r;
}

/* Outputs whose windows contain input row h: [lo, hi] (empty when lo > hi). */
__device__ __forceinline__ void reaching(int h, int k, int s, int p, int OH, int &lo, int &hi) {
    int a = h + p - k + 1;
    lo = a <= 0 ? 0 : (a + s - 1) / s;
    hi = min((h + p) / s, OH - 1);
}

/* Item t -> (n, row, col, channel group) of an (N, rows, cols, C) NHWC tensor. */
template <typename I>
__device__ __forceinline__ void split(I t, I cg, int rows, int cols, I &n, int &r, int &q, int &gi) {
    gi = (int)(t % cg);
    I pix = t / cg;
    q = (int)(pix % (I)cols);
    pix /= (I)cols;
    r = (int)(pix % (I)rows);
    n = pix / (I)rows;
}

template <int VEC, typename I>
__global__ void maxpool_fwd_kernel(const void *x, mp_dtype xdt, void *y, mp_dtype ydt, int32_t *arg, pool_geom g,
                                   I total) {
    const I cg = (I)(g.C / VEC);
    for (I t = (I)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (I)gridDim.x * blockDim.x) {
        I n;
        int oh, ow, gi;
        split(t, cg, g.OH, g.OW, n, oh, ow, gi);
        const window wd = window_of(g, oh, ow);
        const I plane = n * (I)g.H * (I)g.W, c0 = (I)gi * VEC;
        float m[VEC], nanv[VEC];
        int best[VEC], nan_at[VEC];
        mp_ldv<VEC>(x, xdt, (plane + (I)wd.h0 * g.W + wd.w0) * g.C + c0, m);
#pragma unroll
        for (int k = 0; k < VEC; k++) best[k] = wd.h0 * g.W + wd.w0, nan_at[k] = -1, nanv[k] = 0.f;
        for (int h = wd.h0; h < wd.h1; h++)
            for (int w = wd.w0; w < wd.w1; w++) {
                const int idx = h * g.W + w;
                float v[VEC];
                mp_ldv<VEC>(x, xdt, (plane + (I)idx) * g.C + c0, v);
#pragma unroll
                for (int k = 0; k < VEC; k++) {
                    if (v[k] != v[k]) nan_at[k] = idx, nanv[k] = v[k];
                    best[k] = v[k] > m[k] ? idx : best[k];
                    m[k] = v[k] > m[k] ? v[k] : m[k];
                }
            }
#pragma unroll
        for (int k = 0; k < VEC; k++)
            if (nan_at[k] >= 0) best[k] = nan_at[k], m[k] = nanv[k];
        const I o = t * VEC; /* output (n, oh, ow, c0) in NHWC */
        mp_stv<VEC>(y, ydt, o, m);
        if constexpr (VEC == 8) {
            int4 *a4 = reinterpret_cast<int4 *>(arg + o);
            a4[0] = make_int4(best[0], best[1], best[2], best[3]);
            a4[1] = make_int4(best[4], best[5], best[6], best[7]);
        } else {
#pragma unroll
            for (int k = 0; k < VEC; k++) arg[o + k] = best[k];
        }
    }
}

template <int VEC, typename I>
__global__ void maxpool_bwd_kernel(const void *dy, mp_dtype dydt, const int32_t *arg, void *dx, mp_dtype dxdt,
                                   pool_geom g, I total) {
    const I cg = (I)(g.C / VEC);
    for (I t = (I)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (I)gridDim.x * blockDim.x) {
        I n;
        int h, w, gi;
        split(t, cg, g.H, g.W, n, h, w, gi);
        int oh0, oh1, ow0, ow1;
        reaching(h, g.k, g.s, g.p, g.OH, oh0, oh1);
        reaching(w, g.k, g.s, g.p, g.OW, ow0, ow1);
        const int me = h * g.W + w;
        const I oplane = n * (I)g.OH * (I)g.OW, c0 = (I)gi * VEC;
        float acc[VEC];
#pragma unroll
        for (int k = 0; k < VEC; k++) acc[k] = 0.f;
        for (int oh = oh0; oh <= oh1; oh++)
            for (int ow = ow0; ow <= ow1; ow++) {
                const I o = (oplane + (I)oh * g.OW + ow) * g.C + c0;
                int a[VEC];
                if constexpr (VEC == 8) {
                    const int4 *a4 = reinterpret_cast<const int4 *>(arg + o);
                    int4 u = a4[0], v = a4[1];
                    a[0] = u.x, a[1] = u.y, a[2] = u.z, a[3] = u.w, a[4] = v.x, a[5] = v.y, a[6] = v.z, a[7] = v.w;
                } else {
#pragma unroll
                    for (int k = 0; k < VEC; k++) a[k] = arg[o + k];
                }
                bool any = false;
#pragma unroll
                for (int k = 0; k < VEC; k++) any |= a[k] == me;
                if (!any) continue;
                float gv[VEC];
                mp_ldv<VEC>(dy, dydt, o, gv);
#pragma unroll
                for (int k = 0; k < VEC; k++)
                    if (a[k] == me) acc[k] += gv[k];
            }
        mp_stv<VEC>(dx, dxdt, t * VEC, acc);
    }
}

/* A batch norm + ReLU fused in (mp_op_call.bn_x): the per-channel
 * coefficients applied to x as it loads, each value rounded to dtype dt as
 * the batch norm's apply would have stored it (batchnorm2d_fast.cuh). */
struct bn_relu_in {
    const float *mu, *scale, *shift;
    mp_dtype dt;
};

template <int VEC, bool BN, typename I>
__device__ __forceinline__ void avgpool_fwd_body(const void *x, mp_dtype xdt, const bn_relu_in &bn, void *y,
                                                 mp_dtype ydt, const pool_geom &g, I total) {
    const I cg = (I)(g.C / VEC);
    const float inv = 1.f / (float)(g.k * g.k);
    for (I t = (I)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (I)gridDim.x * blockDim.x) {
        I n;
        int oh, ow, gi;
        split(t, cg, g.OH, g.OW, n, oh, ow, gi);
        const window wd = window_of(g, oh, ow);
        const I plane = n * (I)g.H * (I)g.W, c0 = (I)gi * VEC;
        float acc[VEC], mu[VEC], sc[VEC], sh[VEC];
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            acc[k] = 0.f;
            if (BN) mu[k] = bn.mu[c0 + k], sc[k] = bn.scale[c0 + k], sh[k] = bn.shift[c0 + k];
        }
        for (int h = wd.h0; h < wd.h1; h++)
            for (int w = wd.w0; w < wd.w1; w++) {
                float v[VEC];
                mp_ldv<VEC>(x, xdt, (plane + (I)h * g.W + w) * g.C + c0, v);
#pragma unroll
                for (int k = 0; k < VEC; k++) {
                    if (BN) {
                        const float b = mp_bn_affine(v[k], mu[k], sc[k], sh[k]);
                        v[k] = mp_round_as(bn.dt, b < 0.f ? 0.f : b); /* NaN passes */
                    }
                    acc[k] += v[k];
                }
            }
#pragma unroll
        for (int k = 0; k < VEC; k++) acc[k] *= inv;
        mp_stv<VEC>(y, ydt, t * VEC, acc);
    }
}

template <int VEC, typename I>
__global__ void avgpool_fwd_kernel(const void *x, mp_dtype xdt, void *y, mp_dtype ydt, pool_geom g, I total) {
    avgpool_fwd_body<VEC, false>(x, xdt, bn_relu_in{}, y, ydt, g, total);
}

template <int VEC, typename I>
__global__ void avgpool_bn_fwd_kernel(const void *x, mp_dtype xdt, bn_relu_in bn, void *y, mp_dtype ydt, pool_geom g,
                                      I total) {
    avgpool_fwd_body<VEC, true>(x, xdt, bn, y, ydt, g, total);
}

template <int VEC, typename I>
__global__ void avgpool_bwd_kernel(const void *dy, mp_dtype dydt, void *dx, mp_dtype dxdt, pool_geom g, I total) {
    const I cg = (I)(g.C / VEC);
    const float inv = 1.f / (float)(g.k * g.k);
    for (I t = (I)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (I)gridDim.x * blockDim.x) {
        I n;
        int h, w, gi;
        split(t, cg, g.H, g.W, n, h, w, gi);
        int oh0, oh1, ow0, ow1;
        reaching(h, g.k, g.s, g.p, g.OH, oh0, oh1);
        reaching(w, g.k, g.s, g.p, g.OW, ow0, ow1);
        const I oplane = n * (I)g.OH * (I)g.OW, c0 = (I)gi * VEC;
        float acc[VEC];
#pragma unroll
        for (int k = 0; k < VEC; k++) acc[k] = 0.f;
        for (int oh = oh0; oh <= oh1; oh++)
            for (int ow = ow0; ow <= ow1; ow++) {
                float gv[VEC];
                mp_ldv<VEC>(dy, dydt, (oplane + (I)oh * g.OW + ow) * g.C + c0, gv);
#pragma unroll
                for (int k = 0; k < VEC; k++) acc[k] = __fmaf_rn(gv[k], inv, acc[k]); /* as batchnorm2d_fast.cuh */
            }
        mp_stv<VEC>(dx, dxdt, t * VEC, acc);
    }
}

/* Launch KERNEL<VEC, I> over `items` groups of VEC channels; VEC = 8 when the
 * channels and every pointer allow 16-byte accesses, I = 32-bit indices when
 * every tensor has fewer than 2^31 elements. */
#define POOL_LAUNCH(KERNEL, vec8, small, numel, ...)                                                          \
    do {                                                                                                      \
        const long long items_ = (numel) / ((vec8) ? 8 : 1);                                                  \
        const unsigned grid_ = mp_cuda_grid(ctx, items_);                                                     \
        if ((vec8) && (small))                                                                                \
            KERNEL<8, unsigned><<<grid_, MP_CUDA_THREADS, 0, ctx->stream>>>(__VA_ARGS__, (unsigned)items_);   \
        else if (vec8)                                                                                        \
            KERNEL<8, unsigned long long><<<grid_, MP_CUDA_THREADS, 0, ctx->stream>>>(__VA_ARGS__,            \
                                                                                     (unsigned long long)items_); \
        else if (small)                                                                                       \
            KERNEL<1, unsigned><<<grid_, MP_CUDA_THREADS, 0, ctx->stream>>>(__VA_ARGS__, (unsigned)items_);   \
        else                                                                                                  \
            KERNEL<1, unsigned long long><<<grid_, MP_CUDA_THREADS, 0, ctx->stream>>>(__VA_ARGS__,            \
                                                                                     (unsigned long long)items_); \
    } while (0)

static bool small_indices(const mp_op_call *c) {
    const long long lim = 1LL << 31;
    return mp_tensor_numel(&c->in[0]) < lim && mp_tensor_numel(&c->out) < lim;
}

static mp_status pool_prepare(mp_cuda_ctx *ctx, const mp_op_desc *d, const mp_op_info *info,
                              const mp_cuda_node_cfg *cfg, void **state, size_t *workspace_bytes,
                              size_t *saved_bytes) {
    (void)ctx, (void)workspace_bytes;
    *state = NULL;
    MP_TRY(mp_cuda_op_check_dtypes(d, info, cfg, -1));
    if (d->kind == MP_OP_MAXPOOL2D) mp_cuda_raise(saved_bytes, (size_t)mp_shape_numel(&info->out) * sizeof(int32_t));
    return MP_OK;
}

static mp_status pool_forward(mp_cuda_ctx *ctx, const mp_op_call *c) {
    const pool_geom g = geom_of(c);
    const mp_tensor *x = &c->in[0], *y = &c->out;
    const bool small = small_indices(c);
    bool vec8 = g.C % 8 == 0 && mp_cuda_aligned16(x->data) && mp_cuda_aligned16(y->data);
    const long long n = mp_tensor_numel(y);
    if (c->desc->kind == MP_OP_MAXPOOL2D) {
        int32_t *arg = (int32_t *)c->saved;
        vec8 = vec8 && mp_cuda_aligned16(arg);
        POOL_LAUNCH(maxpool_fwd_kernel, vec8, small, n, x->data, x->dtype, y->data, y->dtype, arg, g);
    } else if (c->bn_x.data) { /* a batch norm + ReLU fused in: x is its input (graph/plan_fuse.h) */
        const mp_tensor *bx = &c->bn_x;
        vec8 = vec8 && mp_cuda_aligned16(bx->data);
        const bn_relu_in bn = {c->bn_mu, c->bn_scale, c->bn_shift, x->dtype};
        POOL_LAUNCH(avgpool_bn_fwd_kernel, vec8, small, n, bx->data, bx->dtype, bn, y->data, y->dtype, g);
    } else {
        POOL_LAUNCH(avgpool_fwd_kernel, vec8, small, n, x->data, x->dtype, y->data, y->dtype, g);
    }
    return mp_cuda_op_status(c, "forward", cudaSuccess);
}

static mp_status pool_backward(mp_cuda_ctx *ctx, const mp_op_call *c) {
    const mp_tensor *dy = &c->d_out, *dx = &c->d_in[0];
    if (!dx->data) return MP_OK;
    const pool_geom g = geom_of(c);
    const bool small = small_indices(c);
    bool vec8 = g.C % 8 == 0 && mp_cuda_aligned16(dy->data) && mp_cuda_aligned16(dx->data);
    const long long n = mp_tensor_numel(dx);
    if (c->desc->kind == MP_OP_MAXPOOL2D) {
        const int32_t *arg = (const int32_t *)c->saved;
        vec8 = vec8 && mp_cuda_aligned16(arg);
        POOL_LAUNCH(maxpool_bwd_kernel, vec8, small, n, dy->data, dy->dtype, arg, dx->data, dx->dtype, g);
    } else {
        POOL_LAUNCH(avgpool_bwd_kernel, vec8, small, n, dy->data, dy->dtype, dx->data, dx->dtype, g);
    }
    return mp_cuda_op_status(c, "backward", cudaSuccess);
}

/* Tangents (cuda_op.h). Average pooling is linear; max pooling is linear with
 * its argmax (saved by forward) held fixed: its forward tangent gathers t_in
 * at the argmax (pool2d_tangent_cuda.cu), and backward on t_d_out scatters
 * there. */
static mp_status avgpool_forward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c) {
    return mp_cuda_tangent_forward_linear(ctx, c, pool_forward, false);
}
static mp_status pool_backward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c) {
    return mp_cuda_tangent_backward_linear(ctx, c, pool_backward);
}

extern "C" const mp_cuda_op_vtable mp_cuda_maxpool2d_vt = {"maxpool2d",  pool_prepare,  NULL,
                                                           pool_forward, pool_backward, mp_cuda_maxpool_forward_tangent,
                                                           pool_backward_tangent, NULL};
extern "C" const mp_cuda_op_vtable mp_cuda_avgpool2d_vt = {"avgpool2d",  pool_prepare,  NULL,
                                                           pool_forward, pool_backward, avgpool_forward_tangent,
                                                           pool_backward_tangent, NULL};
