/* batchnorm2d_tangent_cuda.cu — the tangents of batch normalization on the
 * GPU, batchnorm2d_tangent_ref.inc's formulas over NHWC (M rows of C
 * channels; (N, C) is M = N rows). Per channel, with mu and is = 1/std
 * (training: the f32 batch statistics forward saved, bs = 1; eval: the
 * running ones, constants, bs = 0), xh = (x - mu) is, g = dy masked where
 * the fused ReLU's stored output y <= 0:
 *   ta = bs mean(t_x), tb = bs mean(xh t_x), t_xh = is (t_x - ta - xh tb)
 *   t_y      = gamma t_xh + t_gamma xh + t_beta                 (masked as y)
 *   t_dx     = is (t_gamma - gamma is tb) (g - bs (mean(g) + xh mean(g xh)))
 *            + gamma is (t_g - bs (mean(t_g) + t_xh mean(g xh) + xh tB))
 *   t_dgamma = sum(t_g xh) + sum(g t_xh) = M tB,  t_dbeta = sum(t_g)
 * with t_g = t_dy masked as g. The per-channel sums are deterministic: G row
 * chunks (fixed by M and the SM count) each give one partial per channel in
 * double (a fixed tree over the block's rows), and one thread per channel
 * adds the G partials in order and turns them into coefficients (f32); an
 * elementwise pass then writes t_y or t_dx in its dtype. Workspace: the
 * partials (G x 7 x C doubles) and the coefficients (7 x C floats). */
#include <math.h>

#include "cuda/cuda_kernel_util.cuh"
#include "cuda/lib_kernels.h" /* MP_CUDA_WS_SLACK */
#include "cuda/tangent_cuda.h"

enum { P_WEIGHT, P_BIAS, P_RUNNING_MEAN, P_RUNNING_VAR };

#define TBX 32 /* channels per block */
#define TBY 8  /* rows in parallel per block */
#define NSUM 7 /* backward's sums; forward uses the first 2 slots */

typedef struct {
    long long M, R; /* rows; rows per chunk */
    int C, G;       /* channels; chunks */
} bnt_dims;

static bnt_dims dims_of(const mp_cuda_ctx *ctx, const mp_shape *x) {
    bnt_dims d;
    d.M = mp_cuda_rows(x);
    d.C = mp_cuda_channels(x);
    long long g = (d.M + 255) / 256, cap = 4LL * (ctx->sm_count > 0 ? ctx->sm_count : 1);
    if (g > cap) g = cap;
    if (g < 1) g = 1;
    d.R = (d.M + g - 1) / g;
    d.G = (int)((d.M + d.R - 1) / d.R);
    return d;
}

extern "C" size_t mp_cuda_bn_tangent_workspace(const mp_cuda_ctx *ctx, const mp_op_info *info) {
    const bnt_dims d = dims_of(ctx, &info->in[0]);
    return (size_t)d.G * NSUM * d.C * sizeof(double) + 256 + (size_t)NSUM * d.C * sizeof(float) + MP_CUDA_WS_SLACK;
}

/* What every kernel reads: the primal tensors, the tangents, the statistics. */
typedef struct {
    const void *x, *y, *dy, *tx, *tdy; /* y: the fused ReLU's stored output, or NULL */
    mp_dtype xdt, ydt, dydt, txdt, tdydt;
    const void *gamma, *tgamma, *tbeta;
    mp_dtype gdt, tgdt, tbdt;
    const float *mean, *invstd, *rmean, *rvar; /* saved batch statistics; running ones */
    float eps;
    bool bs; /* batch statistics (training) */
    long long M;
    int C;
} bnt_args;

__device__ __forceinline__ void bnt_stats(const bnt_args &a, int c, float &mu, float &is) {
    if (a.bs) {
        mu = a.mean[c], is = a.invstd[c];
    } else {
        mu = a.rmean[c], is = (float)(1.0 / sqrt((double)a.rvar[c] + (double)a.eps));
    }
}

__device__ __forceinline__ float bnt_keep(const bnt_args &a, long long i) {
    return !a.y || mp_ld(a.y, a.ydt, i) > 0.f ? 1.f : 0.f;
}

/* part[(chunk * NSUM + k) * C + c]: forward the sums of t_x and t_x xh;
 * backward those of g, g xh, t_x, t_x xh, t_g, t_g xh, g t_x. */
template <bool BWD>
__global__ void bnt_reduce_kernel(bnt_args a, long long R, double *part) {
    constexpr int K = BWD ? NSUM : 2;
    __shared__ double sh[TBY][TBX][K];
    const int c = blockIdx.x * TBX + threadIdx.x;
    const long long r0 = (long long)blockIdx.y * R, r1 = r0 + R < a.M ? r0 + R : a.M;
    double s[K];
#pragma unroll
    for (int k = 0; k < K; k++) s[k] = 0;
    if (c < a.C) {
        float mu, is;
        bnt_stats(a, c, mu, is);
        for (long long r = r0 + threadIdx.y; r < r1; r += TBY) {
            const long long i = r * a.C + c;
            const double xh = (double)((mp_ld(a.x, a.xdt, i) - mu) * is);
            const double t = a.tx ? (double)mp_ld(a.tx, a.txdt, i) : 0.0;
            if (!BWD) {
                s[0] += t;
                s[1] += t * xh;
            } else {
                const double keep = bnt_keep(a, i), g = keep * (double)mp_ld(a.dy, a.dydt, i);
                const double tg = a.tdy ? keep * (double)mp_ld(a.tdy, a.tdydt, i) : 0.0;
                s[0] += g;
                s[1] += g * xh;
                s[2 % K] += t;
                s[3 % K] += t * xh;
                s[4 % K] += tg;
                s[5 % K] += tg * xh;
                s[6 % K] += g * t;
            }
        }
    }
#pragma unroll
    for (int k = 0; k < K; k++) sh[threadIdx.y][threadIdx.x][k] = s[k];
    __syncthreads();
    for (int h = TBY / 2; h > 0; h >>= 1) {
        if ((int)threadIdx.y < h)
#pragma unroll
            for (int k = 0; k < K; k++) sh[threadIdx.y][threadIdx.x][k] += sh[threadIdx.y + h][threadIdx.x][k];
        __syncthreads();
    }
    if (threadIdx.y == 0 && c < a.C)
#pragma unroll
        for (int k = 0; k < K; k++) part[((long long)blockIdx.y * NSUM + k) * a.C + c] = sh[0][threadIdx.x][k];
}

/* One thread per channel: the G partials in order, then coef[k * C + c]:
 * forward (ta, tb); backward (ta, tb, A, B, tA, tB, tk) and t_dgamma,
 * t_dbeta. */
__global__ void bnt_finalize_kernel(bnt_args a, const double *part, int G, bool bwd, float *coef, void *tdgamma,
                                    mp_dtype tdgdt, void *tdbeta, mp_dtype tdbdt) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= a.C) return;
    double s[NSUM] = {0, 0, 0, 0, 0, 0, 0};
    const int K = bwd ? NSUM : 2;
    for (int g = 0; g < G; g++)
        for (int k = 0; k < K; k++) s[k] += part[((long long)g * NSUM + k) * a.C + c];
    const double M = (double)a.M, bs = a.bs ? 1.0 : 0.0;
    const int C = a.C;
    if (!bwd) {
        coef[c] = (float)(bs * s[0] / M);
        coef[C + c] = (float)(bs * s[1] / M);
        return;
    }
    float muf, isf;
    bnt_stats(a, c, muf, isf);
    const double is = isf, sg = s[0], sgh = s[1], stx = s[2], stxh = s[3], stg = s[4], stgh = s[5], sgtx = s[6];
    const double ta = bs * stx / M, tb = bs * stxh / M;
    const double sg_txh = is * (sgtx - ta * sg - tb * sgh); /* sum(g t_xh) */
    const double tB = (stgh + sg_txh) / M;
    if (tdgamma) mp_st(tdgamma, tdgdt, c, (float)(stgh + sg_txh));
    if (tdbeta) mp_st(tdbeta, tdbdt, c, (float)stg);
    const double gm = mp_ld(a.gamma, a.gdt, c), tgm = a.tgamma ? (double)mp_ld(a.tgamma, a.tgdt, c) : 0.0;
    const double v[NSUM] = {ta, tb, sg / M, sgh / M, stg / M, tB, is * (tgm - gm * is * tb)};
    for (int k = 0; k < NSUM; k++) coef[(long long)k * C + c] = (float)v[k];
}

/* t_y (coef NULL: ta = tb = 0, eval) */
__global__ void bnt_fwd_kernel(bnt_args a, const float *coef, void *ty, mp_dtype tydt) {
    const long long n = a.M * a.C;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const int c = (int)(i % a.C);
        float mu, is;
        bnt_stats(a, c, mu, is);
        const float ta = coef ? coef[c] : 0.f, tb = coef ? coef[a.C + c] : 0.f;
        const float xh = (mp_ld(a.x, a.xdt, i) - mu) * is;
        const float txh = a.tx ? is * (mp_ld(a.tx, a.txdt, i) - ta - xh * tb) : 0.f;
        const float tg = a.tgamma ? mp_ld(a.tgamma, a.tgdt, c) : 0.f, tbe = a.tbeta ? mp_ld(a.tbeta, a.tbdt, c) : 0.f;
        const float r = mp_ld(a.gamma, a.gdt, c) * txh + tg * xh + tbe;
        mp_st(ty, tydt, i, bnt_keep(a, i) != 0.f ? r : 0.f);
    }
}

__global__ void bnt_dx_kernel(bnt_args a, const float *coef, void *tdx, mp_dtype tdxdt) {
    const long long n = a.M * a.C;
    const float bs = a.bs ? 1.f : 0.f;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const int c = (int)(i % a.C), C = a.C;
        float mu, is;
        bnt_stats(a, c, mu, is);
        const float ta = coef[c], tb = coef[C + c], A = coef[2 * C + c], B = coef[3 * C + c];
        const float tA = coef[4 * C + c], tB = coef[5 * C + c], tk = coef[6 * C + c];
        const float keep = bnt_keep(a, i), xh = (mp_ld(a.x, a.xdt, i) - mu) * is;
        const float g = keep * mp_ld(a.dy, a.dydt, i), tg = a.tdy ? keep * mp_ld(a.tdy, a.tdydt, i) : 0.f;
        const float txh = is * ((a.tx ? mp_ld(a.tx, a.txdt, i) : 0.f) - ta - xh * tb);
        const float gm = mp_ld(a.gamma, a.gdt, c);
        mp_st(tdx, tdxdt, i, tk * (g - bs * (A + xh * B)) + gm * is * (tg - bs * (tA + txh * B + xh * tB)));
    }
}

extern "C" mp_status mp_cuda_bn_tangent(mp_cuda_ctx *ctx, const mp_op_call *c, bool relu, bool backward) {
    const char *which = backward ? "backward_tangent" : "forward_tangent";
    MP_TRY(mp_cuda_tangent_check(c, which));
    const mp_tensor *ty = &c->t_out, *tdx = &c->t_d_in[0], *tdg = &c->t_d_param[P_WEIGHT], *tdb = &c->t_d_param[P_BIAS];
    if (!backward && !ty->data) return MP_OK;
    if (backward && !tdx->data && !tdg->data && !tdb->data) return MP_OK;
    if (c->training && ctx->sync_world > 1)
        return mp_error(MP_ERR_UNSUPPORTED,
                        "batchnorm2d '%s' on the GPU: %s with synchronized BatchNorm (%d ranks) is not supported",
                        c->desc->name ? c->desc->name : "?", which, ctx->sync_world);
    const bnt_dims d = dims_of(ctx, &c->in[0].shape);
    const mp_tensor *p = c->param, *tp = c->t_param;
    const int C = d.C;
    bnt_args a;
    a.x = c->in[0].data, a.xdt = c->in[0].dtype;
    a.y = relu ? c->out.data : NULL, a.ydt = c->out.dtype;
    a.dy = c->d_out.data, a.dydt = c->d_out.dtype;
    a.tx = c->t_in[0].data, a.txdt = c->t_in[0].dtype;
    a.tdy = c->t_d_out.data, a.tdydt = c->t_d_out.dtype;
    a.gamma = p[P_WEIGHT].data, a.gdt = p[P_WEIGHT].dtype;
    a.tgamma = tp[P_WEIGHT].data, a.tgdt = tp[P_WEIGHT].dtype;
    a.tbeta = tp[P_BIAS].data, a.tbdt = tp[P_BIAS].dtype;
    a.mean = (const float *)c->saved, a.invstd = a.mean + C;
    a.rmean = (const float *)p[P_RUNNING_MEAN].data, a.rvar = (const float *)p[P_RUNNING_VAR].data;
    a.eps = c->desc->attr.bn.eps;
    a.bs = c->training;
    a.M = d.M, a.C = C;
    if (backward && !a.dy)
        return mp_error(MP_ERR_INVALID_ARG, "batchnorm2d '%s' on the GPU: backward_tangent needs d_out",
                        c->desc->name ? c->desc->name : "?");
    double *part = (double *)c->workspace;
    float *coef = (float *)(((uintptr_t)(part + (size_t)d.G * NSUM * C) + 255) & ~(uintptr_t)255);
    const dim3 rgrid((C + TBX - 1) / TBX, d.G), rblock(TBX, TBY);
    const unsigned fgrid = (unsigned)((C + 127) / 128);
    const unsigned egrid = mp_cuda_grid(ctx, d.M * C);
    if (!backward) {
        const bool sums = a.bs && a.tx;
        if (sums) {
            bnt_reduce_kernel<false><<<rgrid, rblock, 0, ctx->stream>>>(a, d.R, part);
            bnt_finalize_kernel<<<fgrid, 128, 0, ctx->stream>>>(a, part, d.G, false, coef, NULL, MP_DTYPE_F32, NULL,
                                                                MP_DTYPE_F32);
        }
        bnt_fwd_kernel<<<egrid, MP_CUDA_THREADS, 0, ctx->stream>>>(a, sums ? coef : NULL, ty->data, ty->dtype);
        return mp_cuda_op_status(c, which, cudaSuccess);
    }
    bnt_reduce_kernel<true><<<rgrid, rblock, 0, ctx->stream>>>(a, d.R, part);
    bnt_finalize_kernel<<<fgrid, 128, 0, ctx->stream>>>(a, part, d.G, true, coef, tdg->data, tdg->dtype, tdb->data,
                                                        tdb->dtype);
    if (tdx->data) bnt_dx_kernel<<<egrid, MP_CUDA_THREADS, 0, ctx->stream>>>(a, coef, tdx->data, tdx->dtype);
    return mp_cuda_op_status(c, which, cudaSuccess);
}
