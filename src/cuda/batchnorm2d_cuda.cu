/* batchnorm2d_cuda.cu — batch normalization on the GPU over NHWC (N, C, H, W)
 * or (N, C) activations in f32/f16/bf16, statistics and parameters in f32,
 * with batchnorm2d_ref.inc's semantics: training normalizes with the batch
 * mean and biased variance and moves the running stats towards the batch
 * mean and UNBIASED variance by momentum; inference uses the running stats;
 * backward (ref: bn_bwd) with or without batch statistics.
 *
 * The activation is viewed as M = N*H*W rows of C channels. Per-channel
 * reductions are deterministic: G row chunks (fixed by M and the SM count)
 * each give one partial per channel (Welford within a thread, Chan's merge
 * across threads, fixed tree order), and a finalize kernel merges the G
 * partials in a fixed order. Forward keeps the batch mean and 1/std (f32) in
 * saved; the workspace holds the partials and per-channel coefficients.
 * Fused with the ReLU that reads it (cfg->relu_after, graph/plan_fuse.h),
 * forward stores relu(y) and backward masks dy where that output is <= 0,
 * with activation_cuda.cu's relu semantics (NaN passes). With a residual
 * add fused in as well (cfg->add_relu_after), the elementwise passes are
 * bn_add_relu_cuda.h's: forward stores relu(bn(x) + resid), backward writes
 * dx and the residual's gradient from one read of dy and the mask.
 * Training in f16 runs on cuDNN's NHWC kernels where they apply
 * (batchnorm2d_cudnn.h). */
#include <stdio.h>
#include <stdlib.h>

#include "cuda/batchnorm2d_cudnn.h"
#include "cuda/bn_add_relu_cuda.h"
#include "cuda/cuda_kernel_util.cuh"
#include "cuda/tangent_cuda.h"
#include "dist/dist.h"

enum { P_WEIGHT, P_BIAS, P_RUNNING_MEAN, P_RUNNING_VAR };

#define FIN_BX 32 /* finalize: channels per block */
#define FIN_BY 8  /* finalize: partial chunks read in parallel per channel */

/* ---- geometry ----------------------------------------------------------- */

typedef struct {
    long long M;   /* rows */
    int C;
    int G;         /* row chunks of the reductions */
    long long R;   /* rows per chunk (the last may be shorter) */
} bn_dims;

static bn_dims bn_dims_of(const mp_cuda_ctx *ctx, const mp_shape *x) {
    bn_dims d;
    d.M = mp_cuda_rows(x);
    d.C = mp_cuda_channels(x);
    long long g = (d.M + 63) / 64, cap = 4LL * (ctx->sm_count > 0 ? ctx->sm_count : 1);
    if (g > cap) g = cap;
    if (g < 1) g = 1;
    d.R = (d.M + g - 1) / g;
    d.G = (int)((d.M + d.R - 1) / d.R); /* no empty chunk */
    return d;
}

/* Block of VEC-channel groups (x) by rows (y), 256 threads. */
typedef struct {
    int vec, bx, by;
    unsigned gx;
} bn_block;

static bn_block bn_block_of(int C, bool vec_ok) {
    bn_block b;
    b.vec = vec_ok && C % 8 == 0 ? 8 : 1;
    int cg = C / b.vec;
    b.bx = 1;
    while (b.bx < cg && b.bx < 32) b.bx <<= 1;
    b.by = MP_CUDA_THREADS / b.bx;
    b.gx = (unsigned)((cg + b.bx - 1) / b.bx);
    return b;
}

/* Workspace: two (G, C) partial arrays, (4, C) coefficients, then for
 * synchronized BatchNorm this rank's (2, C) share and every rank's. */
static size_t bn_workspace_floats(const bn_dims *d, int world) {
    return (2 * (size_t)d->G + 4 + (world > 1 ? 2 + 2 * (size_t)world : 0)) * (size_t)d->C;
}

/* Synchronized BatchNorm: the (2, C) per-channel shares of every rank, in
 * rank order, into all (world, 2, C). */
static mp_status bn_gather(mp_cuda_ctx *ctx, const mp_op_call *c, const float *local, float *all, int C) {
    mp_status s = mp_dist_allgather_f32((mp_dist *)ctx->dist, local, all, 2 * (size_t)C, ctx->stream);
    if (s != MP_OK)
        return mp_error(s, "batchnorm2d '%s': synchronizing the statistics: %s", c->desc->name ? c->desc->name : "?",
                        mp_last_error());
    return MP_OK;
}

/* ---- device helpers ----------------------------------------------------- */

/* (na, ma, m2a) += (nb, mb, m2b): Chan et al.'s pairwise update. */
__device__ __forceinline__ void chan_merge(float &na, float &ma, float &m2a, float nb, float mb, float m2b) {
    if (nb == 0.f) return;
    float n = na + nb, d = mb - ma, w = nb / n;
    ma += d * w;
    m2a += m2b + d * d * na * w;
    na = n;
}

/* ---- forward: statistics ------------------------------------------------ */

/* Block (bx, by) at (blockIdx.x, chunk blockIdx.y): per-channel mean and sum
 * of squared deviations of the chunk's rows -> pmean/pm2 (G, C). */
template <int VEC>
__global__ void bn_stats_kernel(const void *x, mp_dtype xdt, long long M, int C, long long R, float *pmean,
                                float *pm2) {
    __shared__ float s_mean[MP_CUDA_THREADS * VEC], s_m2[MP_CUDA_THREADS * VEC], s_n[MP_CUDA_THREADS];
    const int g = blockIdx.x * blockDim.x + threadIdx.x, cg = C / VEC;
    const long long r0 = (long long)blockIdx.y * R, r1 = r0 + R < M ? r0 + R : M;
    float mean[VEC], m2[VEC];
#pragma unroll
    for (int k = 0; k < VEC; k++) mean[k] = m2[k] = 0.f;
    int n = 0;
    if (g < cg) {
#pragma unroll 4
        for (long long r = r0 + threadIdx.y; r < r1; r += blockDim.y) {
            float v[VEC];
            mp_ldv<VEC>(x, xdt, r * C + (long long)g * VEC, v);
            n++;
            float inv = 1.f / (float)n;
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                float d = v[k] - mean[k];
                mean[k] += d * inv;
                m2[k] += d * (v[k] - mean[k]);
            }
        }
    }
    const int t = threadIdx.y * blockDim.x + threadIdx.x;
#pragma unroll
    for (int k = 0; k < VEC; k++) s_mean[t * VEC + k] = mean[k], s_m2[t * VEC + k] = m2[k];
    s_n[t] = (float)n;
    __syncthreads();
    for (int s = blockDim.y / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.y < s) {
            const int o = t + s * blockDim.x;
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                float na = s_n[t];
                chan_merge(na, s_mean[t * VEC + k], s_m2[t * VEC + k], s_n[o], s_mean[o * VEC + k],
                           s_m2[o * VEC + k]);
            }
            s_n[t] += s_n[o];
        }
        __syncthreads();
    }
    if (threadIdx.y == 0 && g < cg)
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            long long at = (long long)blockIdx.y * C + (long long)g * VEC + k;
            pmean[at] = s_mean[t * VEC + k];
            pm2[at] = s_m2[t * VEC + k];
        }
}

/* Per channel: merge the G partials (fixed order; partial p is at
 * p * stride, of min(R, M - p * R) rows), save mean and 1/std, update the
 * running stats, write the coefficients (mu, scale, shift). With `local`:
 * only write the merged (mean, m2) to local[c], local[C + c] (a rank's
 * share of synchronized BatchNorm, merged again over the ranks). */
__global__ void bn_finalize_fwd_kernel(const float *pmean, const float *pm2, long long stride, int G, long long M,
                                       long long R, int C, const void *gamma, mp_dtype gdt, const void *beta,
                                       mp_dtype bdt, float *rmean, float *rvar, float eps, float mom,
                                       float *save_mean, float *save_invstd, float *coef, float *local) {
    __shared__ float s_n[FIN_BY][FIN_BX], s_mean[FIN_BY][FIN_BX], s_m2[FIN_BY][FIN_BX];
    const int c = blockIdx.x * FIN_BX + threadIdx.x, tx = threadIdx.x, ty = threadIdx.y;
    float n = 0.f, mean = 0.f, m2 = 0.f;
    if (c < C)
        for (int p = ty; p < G; p += FIN_BY) {
            long long rows = (p + 1LL) * R < M ? R : M - p * R;
            chan_merge(n, mean, m2, (float)rows, pmean[(long long)p * stride + c], pm2[(long long)p * stride + c]);
        }
    s_n[ty][tx] = n, s_mean[ty][tx] = mean, s_m2[ty][tx] = m2;
    __syncthreads();
    for (int s = FIN_BY / 2; s > 0; s >>= 1) {
        if (ty < s) {
            float na = s_n[ty][tx];
            chan_merge(na, s_mean[ty][tx], s_m2[ty][tx], s_n[ty + s][tx], s_mean[ty + s][tx], s_m2[ty + s][tx]);
            s_n[ty][tx] = na;
        }
        __syncthreads();
    }
    if (ty != 0 || c >= C) return;
    mean = s_mean[0][tx], m2 = s_m2[0][tx];
    if (local) {
        local[c] = mean, local[C + c] = m2;
        return;
    }
    float invstd = 1.f / sqrtf(m2 / (float)M + eps);
    save_mean[c] = mean;
    save_invstd[c] = invstd;
    rmean[c] = (1.f - mom) * rmean[c] + mom * mean;
    rvar[c] = (1.f - mom) * rvar[c] + mom * (m2 / (float)(M - 1));
    coef[c] = mean;
    coef[C + c] = mp_ld(gamma, gdt, c) * invstd;
    coef[2 * C + c] = mp_ld(beta, bdt, c);
}

/* Inference: the running stats give the coefficients (mu, scale, shift). */
__global__ void bn_eval_coef_kernel(int C, const void *gamma, mp_dtype gdt, const void *beta, mp_dtype bdt,
                                    const float *rmean, const float *rvar, float eps, float *coef) {
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x) {
        coef[c] = rmean[c];
        coef[C + c] = mp_ld(gamma, gdt, c) / sqrtf(rvar[c] + eps);
        coef[2 * C + c] = mp_ld(beta, bdt, c);
    }
}

/* relu's forward and backward (activation_cuda.cu): NaN passes both. */
__device__ __forceinline__ float relu_of(float v) { return v < 0.f ? 0.f : v; }
__device__ __forceinline__ float relu_grad(float y, float dy) { return y <= 0.f ? 0.f : dy; }

/* dy, masked by a fused ReLU's output y where there is one (y != NULL). */
template <int VEC>
__device__ __forceinline__ void load_dy(const void *dy, mp_dtype dydt, const void *y, mp_dtype ydt, long long at,
                                        float (&gv)[VEC]) {
    mp_ldv<VEC>(dy, dydt, at, gv);
    if (!y) return;
    float yv[VEC];
    mp_ldv<VEC>(y, ydt, at, yv);
#pragma unroll
    for (int k = 0; k < VEC; k++) gv[k] = relu_grad(yv[k], gv[k]);
}

/* y = (x - mu) * scale + shift, coef = (mu, scale, shift) per channel;
 * relu(y) when a ReLU is fused. */
template <int VEC>
__global__ void bn_apply_kernel(const void *x, mp_dtype xdt, void *y, mp_dtype ydt, long long M, int C,
                                const float *coef, bool relu) {
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= C / VEC) return;
    float mu[VEC], sc[VEC], sh[VEC];
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        int c = g * VEC + k;
        mu[k] = coef[c], sc[k] = coef[C + c], sh[k] = coef[2 * C + c];
    }
    for (long long r = (long long)blockIdx.y * blockDim.y + threadIdx.y; r < M; r += (long long)gridDim.y * blockDim.y) {
        const long long at = r * C + (long long)g * VEC;
        float v[VEC];
        mp_ldv<VEC>(x, xdt, at, v);
#pragma unroll
        for (int k = 0; k < VEC; k++) v[k] = (v[k] - mu[k]) * sc[k] + sh[k];
        if (relu)
#pragma unroll
            for (int k = 0; k < VEC; k++) v[k] = relu_of(v[k]);
        mp_stv<VEC>(y, ydt, at, v);
    }
}

/* ---- backward ----------------------------------------------------------- */

/* Per chunk and channel: sum(dy) and sum(dy * (x - mu)) -> psdy/psdyx (G, C);
 * dy masked by y, a fused ReLU's output, unless NULL. */
template <int VEC>
__global__ void bn_bwd_reduce_kernel(const void *x, mp_dtype xdt, const void *dy, mp_dtype dydt, const void *y,
                                     mp_dtype ydt, const float *mu, long long M, int C, long long R, float *psdy,
                                     float *psdyx) {
    __shared__ float s_a[MP_CUDA_THREADS * VEC], s_b[MP_CUDA_THREADS * VEC];
    const int g = blockIdx.x * blockDim.x + threadIdx.x, cg = C / VEC;
    const long long r0 = (long long)blockIdx.y * R, r1 = r0 + R < M ? r0 + R : M;
    float sa[VEC], sb[VEC], m[VEC];
#pragma unroll
    for (int k = 0; k < VEC; k++) sa[k] = sb[k] = 0.f, m[k] = g < cg ? mu[g * VEC + k] : 0.f;
    if (g < cg) {
#pragma unroll 4
        for (long long r = r0 + threadIdx.y; r < r1; r += blockDim.y) {
            const long long at = r * C + (long long)g * VEC;
            float xv[VEC], gv[VEC];
            mp_ldv<VEC>(x, xdt, at, xv);
            load_dy<VEC>(dy, dydt, y, ydt, at, gv);
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                sa[k] += gv[k];
                sb[k] += gv[k] * (xv[k] - m[k]);
            }
        }
    }
    const int t = threadIdx.y * blockDim.x + threadIdx.x;
#pragma unroll
    for (int k = 0; k < VEC; k++) s_a[t * VEC + k] = sa[k], s_b[t * VEC + k] = sb[k];
    __syncthreads();
    for (int s = blockDim.y / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.y < s) {
            const int o = t + s * blockDim.x;
#pragma unroll
            for (int k = 0; k < VEC; k++) s_a[t * VEC + k] += s_a[o * VEC + k], s_b[t * VEC + k] += s_b[o * VEC + k];
        }
        __syncthreads();
    }
    if (threadIdx.y == 0 && g < cg)
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            long long at = (long long)blockIdx.y * C + (long long)g * VEC + k;
            psdy[at] = s_a[t * VEC + k];
            psdyx[at] = s_b[t * VEC + k];
        }
}

/* Per channel: sum the G partials (fixed order, partial p at p * stride);
 * dgamma = sum(dy*xhat), dbeta = sum(dy); coefficients (mu, k, a, b) of
 * dx = k * (dy - a - (x - mu) * b), k = gamma/std, and with batch stats
 * a = mean(dy), b = mean(dy * (x - mu)) / var (else a = b = 0) over M rows.
 * With `local`: write the sums to local[c], local[C + c] (and dgamma,
 * dbeta, which stay this rank's own: data parallelism averages them) and
 * stop; synchronized BatchNorm then sums the ranks' sums for a and b. */
__global__ void bn_finalize_bwd_kernel(const float *psdy, const float *psdyx, long long stride, int G, long long M,
                                       int C, float *local,
                                       bool batch_stats, const float *mean, const float *invstd, const float *rmean,
                                       const float *rvar, float eps, const void *gamma, mp_dtype gdt, void *dgamma,
                                       mp_dtype dgdt, void *dbeta, mp_dtype dbdt, float *coef) {
    __shared__ float s_a[FIN_BY][FIN_BX], s_b[FIN_BY][FIN_BX];
    const int c = blockIdx.x * FIN_BX + threadIdx.x, tx = threadIdx.x, ty = threadIdx.y;
    float sa = 0.f, sb = 0.f;
    if (c < C)
        for (int p = ty; p < G; p += FIN_BY) sa += psdy[(long long)p * stride + c], sb += psdyx[(long long)p * stride + c];
    s_a[ty][tx] = sa, s_b[ty][tx] = sb;
    __syncthreads();
    for (int s = FIN_BY / 2; s > 0; s >>= 1) {
        if (ty < s) s_a[ty][tx] += s_a[ty + s][tx], s_b[ty][tx] += s_b[ty + s][tx];
        __syncthreads();
    }
    if (ty != 0 || c >= C) return;
    sa = s_a[0][tx], sb = s_b[0][tx];
    float mu = batch_stats ? mean[c] : rmean[c];
    float is = batch_stats ? invstd[c] : 1.f / sqrtf(rvar[c] + eps);
    if (dgamma) mp_st(dgamma, dgdt, c, sb * is);
    if (dbeta) mp_st(dbeta, dbdt, c, sa);
    if (local) {
        local[c] = sa, local[C + c] = sb;
        return;
    }
    coef[c] = mu;
    coef[C + c] = mp_ld(gamma, gdt, c) * is;
    coef[2 * C + c] = batch_stats ? sa / (float)M : 0.f;
    coef[3 * C + c] = batch_stats ? sb * is * is / (float)M : 0.f;
}

template <int VEC>
__global__ void bn_dx_kernel(const void *x, mp_dtype xdt, const void *dy, mp_dtype dydt, const void *y, mp_dtype ydt,
                             void *dx, mp_dtype dxdt, long long M, int C, const float *coef) {
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= C / VEC) return;
    float mu[VEC], kk[VEC], a[VEC], b[VEC];
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        int c = g * VEC + k;
        mu[k] = coef[c], kk[k] = coef[C + c], a[k] = coef[2 * C + c], b[k] = coef[3 * C + c];
    }
    for (long long r = (long long)blockIdx.y * blockDim.y + threadIdx.y; r < M; r += (long long)gridDim.y * blockDim.y) {
        const long long at = r * C + (long long)g * VEC;
        float xv[VEC], gv[VEC];
        mp_ldv<VEC>(x, xdt, at, xv);
        load_dy<VEC>(dy, dydt, y, ydt, at, gv);
#pragma unroll
        for (int k = 0; k < VEC; k++) gv[k] = kk[k] * (gv[k] - a[k] - (xv[k] - mu[k]) * b[k]);
        mp_stv<VEC>(dx, dxdt, at, gv);
    }
}

/* ---- host side ---------------------------------------------------------- */

typedef struct {
    bool relu;          /* the ReLU reading this node is fused in */
    bool add;           /* ...with the residual add before it (mp_op_call.resid) */
    mp_bn_cudnn *cudnn; /* cuDNN's kernels for training, or NULL */
} bn_state;

static bool fused_relu(const mp_op_call *c) { return c->state && ((const bn_state *)c->state)->relu; }
/* A residual add fused in too (its input bound: plan.c). */
static bool fused_add(const mp_op_call *c) {
    return c->state && ((const bn_state *)c->state)->add && c->resid.data;
}

/* cuDNN's state when it runs this call (batchnorm2d_cudnn.h), else NULL. */
static const mp_bn_cudnn *on_cudnn(const mp_op_call *c, bool backward) {
    const bn_state *st = (const bn_state *)c->state;
    return st && st->cudnn && mp_bn_cudnn_fits(st->cudnn, c, backward) ? st->cudnn : NULL;
}

static void bn_release(void *state) {
    bn_state *st = (bn_state *)state;
    if (st) mp_bn_cudnn_release(st->cudnn);
    free(st);
}

static mp_status bn_batch_error(const mp_op_desc *d, const mp_shape *x) {
    char s[64];
    return mp_error(MP_ERR_SHAPE, "batchnorm2d '%s': training needs more than one value per channel (input %s)",
                    d->name ? d->name : "?", mp_shape_str(x, s, sizeof s));
}

static mp_status bn_prepare(mp_cuda_ctx *ctx, const mp_op_desc *d, const mp_op_info *info,
                            const mp_cuda_node_cfg *cfg, void **state, size_t *workspace_bytes,
                            size_t *saved_bytes) {
    *state = NULL;
    MP_TRY(mp_cuda_op_check_dtypes(d, info, cfg, -1));
    bn_dims dm = bn_dims_of(ctx, &info->in[0]);
    if (cfg->training && dm.M < 2) return bn_batch_error(d, &info->in[0]);
    mp_bn_cudnn *cudnn = NULL;
    MP_TRY(mp_bn_cudnn_prepare(ctx, d, info, cfg, cfg->relu_after, &cudnn, workspace_bytes, saved_bytes));
    if (cfg->add_relu_after && mp_env_get()->cudnn_debug) {
        char s[64];
        fprintf(stderr, "mixprec: batchnorm2d '%s' %s %s: residual add (%s) + ReLU fused, training on %s\n",
                d->name ? d->name : "?", mp_shape_str(&info->in[0], s, sizeof s), mp_dtype_name(cfg->storage),
                mp_dtype_name(cfg->resid_dtype),
                cudnn ? "cuDNN's BN_ADD_ACTIVATION kernels (ours where a call does not fit)" : "our kernels");
    }
    if (cfg->relu_after || cudnn) {
        bn_state *st = (bn_state *)calloc(1, sizeof *st);
        if (!st) {
            mp_bn_cudnn_release(cudnn);
            return mp_error(MP_ERR_NOMEM, "batchnorm2d '%s': out of host memory", d->name ? d->name : "?");
        }
        st->relu = cfg->relu_after;
        st->add = cfg->add_relu_after;
        st->cudnn = cudnn;
        *state = st;
    }
    mp_cuda_raise(workspace_bytes, bn_workspace_floats(&dm, cfg->training ? ctx->sync_world : 1) * sizeof(float));
    mp_cuda_raise(saved_bytes, 2 * (size_t)dm.C * sizeof(float));
    if (cfg->tangents) mp_cuda_raise(workspace_bytes, mp_cuda_bn_tangent_workspace(ctx, info));
    return MP_OK;
}

/* Rows of the grid for the elementwise passes: a few waves over the SMs. */
static unsigned bn_rows_grid(const mp_cuda_ctx *ctx, const bn_dims *d, const bn_block *b) {
    long long want = (d->M + b->by - 1) / b->by, cap = 8LL * (ctx->sm_count > 0 ? ctx->sm_count : 1) / b->gx + 1;
    if (want > cap) want = cap;
    return (unsigned)(want < 65535 ? want : 65535);
}

static mp_status bn_param_check(const mp_op_call *c) {
    if (c->param[P_RUNNING_MEAN].dtype == MP_DTYPE_F32 && c->param[P_RUNNING_VAR].dtype == MP_DTYPE_F32)
        return MP_OK;
    return mp_error(MP_ERR_UNSUPPORTED, "batchnorm2d '%s' on the GPU: running stats must be f32 (got %s, %s)",
                    c->desc->name ? c->desc->name : "?", mp_dtype_name(c->param[P_RUNNING_MEAN].dtype),
                    mp_dtype_name(c->param[P_RUNNING_VAR].dtype));
}

static mp_status bn_forward(mp_cuda_ctx *ctx, const mp_op_call *c) {
    MP_TRY(bn_param_check(c));
    const bn_dims dm = bn_dims_of(ctx, &c->in[0].shape);
    if (c->training && dm.M < 2) return bn_batch_error(c->desc, &c->in[0].shape);
    if (const mp_bn_cudnn *cudnn = on_cudnn(c, false)) return mp_bn_cudnn_forward(ctx, cudnn, c);
    const mp_tensor *x = &c->in[0], *y = &c->out, *p = c->param;
    const int C = dm.C;
    float *ws = (float *)c->workspace, *coef = ws + 2 * (size_t)dm.G * C;
    float *save_mean = (float *)c->saved, *save_invstd = save_mean + C;
    const float eps = c->desc->attr.bn.eps, mom = c->desc->attr.bn.momentum;
    const bn_block b = bn_block_of(C, mp_cuda_aligned16(x->data) && mp_cuda_aligned16(y->data) &&
                                          (!fused_add(c) || mp_cuda_aligned16(c->resid.data)));
    const dim3 block(b.bx, b.by), fin_grid((C + FIN_BX - 1) / FIN_BX);
    if (c->training) {
        float *pmean = ws, *pm2 = ws + (size_t)dm.G * C;
        if (b.vec == 8)
            bn_stats_kernel<8><<<dim3(b.gx, dm.G), block, 0, ctx->stream>>>(x->data, x->dtype, dm.M, C, dm.R, pmean, pm2);
        else
            bn_stats_kernel<1><<<dim3(b.gx, dm.G), block, 0, ctx->stream>>>(x->data, x->dtype, dm.M, C, dm.R, pmean, pm2);
        long long stride = C, M = dm.M, R = dm.R;
        int G = dm.G;
        if (ctx->sync_world > 1) { /* merge this rank's partials, gather every rank's, merge those */
            float *local = coef + 4 * (size_t)C, *all = local + 2 * (size_t)C;
            bn_finalize_fwd_kernel<<<fin_grid, dim3(FIN_BX, FIN_BY), 0, ctx->stream>>>(
                pmean, pm2, C, dm.G, dm.M, dm.R, C, NULL, MP_DTYPE_F32, NULL, MP_DTYPE_F32, NULL, NULL, eps, mom, NULL,
                NULL, NULL, local);
            MP_TRY(bn_gather(ctx, c, local, all, C));
            pmean = all, pm2 = all + C, stride = 2LL * C, G = ctx->sync_world, R = dm.M, M = dm.M * ctx->sync_world;
        }
        bn_finalize_fwd_kernel<<<fin_grid, dim3(FIN_BX, FIN_BY), 0, ctx->stream>>>(
            pmean, pm2, stride, G, M, R, C, p[P_WEIGHT].data, p[P_WEIGHT].dtype, p[P_BIAS].data, p[P_BIAS].dtype,
            (float *)p[P_RUNNING_MEAN].data, (float *)p[P_RUNNING_VAR].data, eps, mom, save_mean, save_invstd, coef,
            NULL);
    } else {
        bn_eval_coef_kernel<<<(C + 255) / 256, 256, 0, ctx->stream>>>(
            C, p[P_WEIGHT].data, p[P_WEIGHT].dtype, p[P_BIAS].data, p[P_BIAS].dtype,
            (const float *)p[P_RUNNING_MEAN].data, (const float *)p[P_RUNNING_VAR].data, eps, coef);
    }
    const dim3 grid(b.gx, bn_rows_grid(ctx, &dm, &b));
    const bool relu = fused_relu(c);
    if (fused_add(c))
        return mp_cuda_op_status(
            c, "forward", mp_bn_add_relu_apply(ctx->stream, grid, block, b.vec, x, &c->resid, y, dm.M, C, coef));
    if (b.vec == 8)
        bn_apply_kernel<8><<<grid, block, 0, ctx->stream>>>(x->data, x->dtype, y->data, y->dtype, dm.M, C, coef, relu);
    else
        bn_apply_kernel<1><<<grid, block, 0, ctx->stream>>>(x->data, x->dtype, y->data, y->dtype, dm.M, C, coef, relu);
    return mp_cuda_op_status(c, "forward", cudaSuccess);
}

static mp_status bn_backward(mp_cuda_ctx *ctx, const mp_op_call *c) {
    MP_TRY(bn_param_check(c));
    const mp_tensor *x = &c->in[0], *dy = &c->d_out, *dx = &c->d_in[0], *p = c->param;
    const mp_tensor *dg = &c->d_param[P_WEIGHT], *db = &c->d_param[P_BIAS];
    const bool add = fused_add(c);
    void *dr = add ? c->d_resid.data : NULL; /* the fused add's gradient to its residual input */
    if (!dx->data && !dg->data && !db->data && !dr) return MP_OK;
    if (const mp_bn_cudnn *cudnn = on_cudnn(c, true)) return mp_bn_cudnn_backward(ctx, cudnn, c);
    if (c->d_in_add)
        return mp_error(MP_ERR_INTERNAL, "batchnorm2d '%s': backward adding into dx needs cuDNN's kernels, which this "
                        "call does not fit", c->desc->name ? c->desc->name : "?");
    const bn_dims dm = bn_dims_of(ctx, &x->shape);
    const int C = dm.C;
    float *ws = (float *)c->workspace, *coef = ws + 2 * (size_t)dm.G * C;
    float *psdy = ws, *psdyx = ws + (size_t)dm.G * C;
    const float *save_mean = (const float *)c->saved, *save_invstd = save_mean + C;
    const float *rmean = (const float *)p[P_RUNNING_MEAN].data, *rvar = (const float *)p[P_RUNNING_VAR].data;
    const bool batch_stats = c->training;
    const mp_tensor *y = &c->out; /* with a fused ReLU: its output, the mask of dy */
    const void *mask = fused_relu(c) ? y->data : NULL;
    const bool aligned = mp_cuda_aligned16(x->data) && mp_cuda_aligned16(dy->data) &&
                         (!dx->data || mp_cuda_aligned16(dx->data)) && (!mask || mp_cuda_aligned16(mask)) &&
                         (!dr || mp_cuda_aligned16(dr));
    const bn_block b = bn_block_of(C, aligned);
    const dim3 block(b.bx, b.by);
    /* inference with only dx wanted needs no sums: a = b = 0 */
    const bool reduce = batch_stats || dg->data || db->data;
    const float *mu = batch_stats ? save_mean : rmean;
    if (reduce) {
        if (b.vec == 8)
            bn_bwd_reduce_kernel<8><<<dim3(b.gx, dm.G), block, 0, ctx->stream>>>(
                x->data, x->dtype, dy->data, dy->dtype, mask, y->dtype, mu, dm.M, C, dm.R, psdy, psdyx);
        else
            bn_bwd_reduce_kernel<1><<<dim3(b.gx, dm.G), block, 0, ctx->stream>>>(
                x->data, x->dtype, dy->data, dy->dtype, mask, y->dtype, mu, dm.M, C, dm.R, psdy, psdyx);
    }
    const unsigned fin_blocks = (C + FIN_BX - 1) / FIN_BX;
    void *dgamma = dg->data, *dbeta = db->data;
    long long stride = C, M = dm.M;
    int G = reduce ? dm.G : 0;
    if (batch_stats && ctx->sync_world > 1) { /* this rank's sums (and its dgamma, dbeta), then every rank's */
        float *local = coef + 4 * (size_t)C, *all = local + 2 * (size_t)C;
        bn_finalize_bwd_kernel<<<fin_blocks, dim3(FIN_BX, FIN_BY), 0, ctx->stream>>>(
            psdy, psdyx, C, dm.G, dm.M, C, local, batch_stats, save_mean, save_invstd, rmean, rvar,
            c->desc->attr.bn.eps, p[P_WEIGHT].data, p[P_WEIGHT].dtype, dgamma, dg->dtype, dbeta, db->dtype, coef);
        MP_TRY(bn_gather(ctx, c, local, all, C));
        psdy = all, psdyx = all + C, stride = 2LL * C, G = ctx->sync_world, M = dm.M * ctx->sync_world;
        dgamma = dbeta = NULL;
    }
    bn_finalize_bwd_kernel<<<fin_blocks, dim3(FIN_BX, FIN_BY), 0, ctx->stream>>>(
        psdy, psdyx, stride, G, M, C, NULL, batch_stats, save_mean, save_invstd, rmean, rvar, c->desc->attr.bn.eps,
        p[P_WEIGHT].data, p[P_WEIGHT].dtype, dgamma, dg->dtype, dbeta, db->dtype, coef);
    if (add && (dx->data || dr)) {
        const dim3 grid(b.gx, bn_rows_grid(ctx, &dm, &b));
        return mp_cuda_op_status(c, "backward",
                                 mp_bn_add_relu_dx(ctx->stream, grid, block, b.vec, x, dy, y, dx->data, dx->dtype, dr,
                                                   c->d_resid.dtype, c->d_resid_add, dm.M, C, coef));
    }
    if (dx->data) {
        const dim3 grid(b.gx, bn_rows_grid(ctx, &dm, &b));
        if (b.vec == 8)
            bn_dx_kernel<8><<<grid, block, 0, ctx->stream>>>(x->data, x->dtype, dy->data, dy->dtype, mask, y->dtype,
                                                             dx->data, dx->dtype, dm.M, C, coef);
        else
            bn_dx_kernel<1><<<grid, block, 0, ctx->stream>>>(x->data, x->dtype, dy->data, dy->dtype, mask, y->dtype,
                                                             dx->data, dx->dtype, dm.M, C, coef);
    }
    return mp_cuda_op_status(c, "backward", cudaSuccess);
}

/* Tangents (batchnorm2d_tangent_cuda.cu), from the statistics forward saved
 * (training; ours and cuDNN's kernels both keep the f32 mean and 1/std
 * there) or the running ones (eval), the fused ReLU's mask read from the
 * stored output. The fused residual add (add_relu_after) has none. */
static mp_status bn_tangent(mp_cuda_ctx *ctx, const mp_op_call *c, bool backward) {
    const bn_state *st = (const bn_state *)c->state;
    if (st && st->add)
        return mp_error(MP_ERR_UNSUPPORTED,
                        "batchnorm2d '%s' on the GPU: %s: the fused residual add + ReLU (add_relu_after) has no "
                        "tangent; plan second derivatives without fusing it",
                        c->desc->name ? c->desc->name : "?", backward ? "backward_tangent" : "forward_tangent");
    MP_TRY(bn_param_check(c));
    return mp_cuda_bn_tangent(ctx, c, fused_relu(c), backward);
}
static mp_status bn_forward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c) { return bn_tangent(ctx, c, false); }
static mp_status bn_backward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c) { return bn_tangent(ctx, c, true); }

/* dx added into another consumer's gradient: on cuDNN's kernels only. */
static bool bn_adds_input_grad(const void *state, int k) {
    const bn_state *st = (const bn_state *)state;
    return k == 0 && st && mp_bn_cudnn_adds_dx(st->cudnn);
}

extern "C" const mp_cuda_op_vtable mp_cuda_batchnorm2d_vt = {"batchnorm2d",      bn_prepare,
                                                             bn_release,         bn_forward,
                                                             bn_backward,        bn_forward_tangent,
                                                             bn_backward_tangent, bn_adds_input_grad};
