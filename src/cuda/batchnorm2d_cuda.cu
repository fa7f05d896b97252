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
 * partials in a fixed order. Forward keeps the batch mean, 1/std and the
 * scale and shift it applied (f32, BN_SAVED per channel) in saved; the
 * workspace holds the partials and per-channel coefficients.
 * Fused with the ReLU that reads it (cfg->relu_after, graph/plan_fuse.h),
 * forward stores relu(y) and backward masks dy where that output is <= 0,
 * with activation_cuda.cu's relu semantics (NaN passes). With a residual
 * add fused in as well (cfg->add_after; with or without that ReLU), the
 * elementwise passes are bn_add_relu_cuda.h's: forward stores
 * relu(bn(x) + resid) (or bn(x) + resid), backward writes dx and the
 * residual's gradient from one read of dy (and the mask).
 * Fused into the depthwise conv2d or the average pool reading that ReLU
 * (cfg->feeds_loader, graph/plan_fuse.h), a training forward under
 * mp_op_call.skip_out computes the statistics and coefficients but stores
 * no output (the conv or pool applies them as it loads x), on our kernels
 * only: the backward's mask is recomputed from x, and under a pool it reads
 * the pool's output gradient (mp_op_call.pool_dy) in place of dy.
 * Where every activation of a call has one dtype and C fits, the streaming
 * passes run batchnorm2d_fast.h's kernels (the same partials and finalize),
 * and a training pass may run as one cooperative kernel instead
 * (batchnorm2d_persist.h: the same block code, its own finalize phase);
 * training in f16/bf16 may run on cuDNN's NHWC kernels instead where they
 * apply (batchnorm2d_cudnn.h). Timing picks among these per layer
 * (batchnorm2d_pick.h). */
#include <stdio.h>
#include <stdlib.h>

#include "cuda/batchnorm2d_cudnn.h"
#include "cuda/batchnorm2d_fast.h"
#include "cuda/batchnorm2d_finalize.cuh"
#include "cuda/batchnorm2d_math.cuh"
#include "cuda/batchnorm2d_persist.h"
#include "cuda/batchnorm2d_pick.h"
#include "cuda/bn_add_relu_cuda.h"
#include "cuda/cuda_kernel_util.cuh"
#include "cuda/tangent_cuda.h"
#include "dist/dist.h"

enum { P_WEIGHT, P_BIAS, P_RUNNING_MEAN, P_RUNNING_VAR };

/* Saved from forward to backward, per channel (f32): the batch mean, 1/std,
 * and the scale and shift the forward applied. */
enum { BN_SAVED = 4 };

/* ---- geometry ----------------------------------------------------------- */

typedef struct {
    long long M;   /* rows */
    int C;
    int G;         /* row chunks of the reductions */
    long long R;   /* rows per chunk (the last may be shorter) */
} bn_dims;

/* The general kernels' chunks: at least 64 rows each, at most four per SM. */
static bn_dims bn_dims_of(const mp_cuda_ctx *ctx, const mp_shape *x) {
    bn_dims d = {.M = mp_cuda_rows(x), .C = mp_cuda_channels(x), .G = 0, .R = 0};
    mp_bn_row_chunks(d.M, 64, 4LL * (ctx->sm_count > 0 ? ctx->sm_count : 1), &d.G, &d.R);
    return d;
}

/* The fast kernels' chunks (batchnorm2d_fast.h), rpp rows per pass. */
static bn_dims bn_fast_dims(const mp_cuda_ctx *ctx, const mp_shape *x, int rpp) {
    bn_dims d = {.M = mp_cuda_rows(x), .C = mp_cuda_channels(x), .G = 0, .R = 0};
    mp_bn_fast_chunks(d.M, rpp, ctx->sm_count, &d.G, &d.R);
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
                mp_bn_chan_merge(na, s_mean[t * VEC + k], s_m2[t * VEC + k], s_n[o], s_mean[o * VEC + k],
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
        for (int k = 0; k < VEC; k++) v[k] = mp_bn_affine(v[k], mu[k], sc[k], sh[k]);
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

/* add: dx += that (one rounding), for a dx another consumer wrote first. */
template <int VEC>
__global__ void bn_dx_kernel(const void *x, mp_dtype xdt, const void *dy, mp_dtype dydt, const void *y, mp_dtype ydt,
                             void *dx, mp_dtype dxdt, bool add, long long M, int C, const float *coef) {
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
        if (add) {
            float ov[VEC];
            mp_ldv<VEC>(dx, dxdt, at, ov);
#pragma unroll
            for (int k = 0; k < VEC; k++) gv[k] += ov[k];
        }
        mp_stv<VEC>(dx, dxdt, at, gv);
    }
}

/* ---- host side ---------------------------------------------------------- */

typedef struct {
    bool relu;          /* the ReLU reading this node is fused in */
    bool add;           /* ...with the residual add before it (mp_op_call.resid) */
    bool persist;       /* training passes on the fast kernels as one cooperative kernel each */
    bool feeds_loader;  /* a depthwise conv or average pool applies it (cfg->feeds_loader): our kernels, the mask
                           from x */
    mp_bn_cudnn *cudnn; /* cuDNN's kernels for training, or NULL */
} bn_state;

static bool feeds_loader(const mp_op_call *c) { return c->state && ((const bn_state *)c->state)->feeds_loader; }

void mp_cuda_bn_saved_coef(const void *saved, int C, const float **mu, const float **scale, const float **shift) {
    const float *f = (const float *)saved; /* mean, 1/std, scale, shift (BN_SAVED) */
    *mu = f, *scale = f + 2 * (size_t)C, *shift = f + 3 * (size_t)C;
}

/* The fused ReLU, unless the call leaves it out (the forward's overflow
 * replay runs a fused residual add's chain apart: graph/exec.c). */
static bool fused_relu(const mp_op_call *c) {
    return c->state && ((const bn_state *)c->state)->relu && c->relu_after;
}
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

static mp_status bn_forward(mp_cuda_ctx *ctx, const mp_op_call *c);
static mp_status bn_backward(mp_cuda_ctx *ctx, const mp_op_call *c);

/* The device launches cooperative kernels (asked once, by the first
 * caller: a process's GPUs are of one kind). */
static bool persist_supported(void) {
    static const bool supported = mp_bn_persist_supported();
    return supported;
}

static mp_status bn_prepare(mp_cuda_ctx *ctx, const mp_op_desc *d, const mp_op_info *info,
                            const mp_cuda_node_cfg *cfg, void **state, size_t *workspace_bytes,
                            size_t *saved_bytes) {
    *state = NULL;
    MP_TRY(mp_cuda_op_check_dtypes(d, info, cfg, -1));
    bn_dims dm = bn_dims_of(ctx, &info->in[0]);
    if (cfg->training && dm.M < 2) return bn_batch_error(d, &info->in[0]);
    const int rpp = mp_bn_fast_rows_per_pass(cfg->storage, dm.C);
    if (rpp) { /* the fast kernels' chunks may be more or fewer */
        const bn_dims fd = bn_fast_dims(ctx, &info->in[0], rpp);
        if (fd.G > dm.G) dm = fd;
    }
    /* our kernels' needs, then cuDNN's on top where its kernels apply */
    size_t ws = bn_workspace_floats(&dm, cfg->training ? ctx->sync_world : 1) * sizeof(float);
    size_t saved = BN_SAVED * (size_t)dm.C * sizeof(float);
    if (cfg->tangents) mp_cuda_raise(&ws, mp_cuda_bn_tangent_workspace(ctx, info));
    size_t ws_cudnn = ws, saved_cudnn = saved;
    mp_bn_cudnn *cudnn = NULL; /* not under a loader: cuDNN's forward leaves no scale and shift */
    if (!cfg->feeds_loader)
        MP_TRY(mp_bn_cudnn_prepare(ctx, d, info, cfg, cfg->relu_after, &cudnn, &ws_cudnn, &saved_cudnn));
    bn_state *st = (bn_state *)calloc(1, sizeof *st);
    if (!st) {
        mp_bn_cudnn_release(cudnn);
        return mp_error(MP_ERR_NOMEM, "batchnorm2d '%s': out of host memory", d->name ? d->name : "?");
    }
    st->relu = cfg->relu_after;
    st->add = cfg->add_after;
    st->feeds_loader = cfg->feeds_loader;
    const mp_env *env = mp_env_get();
    /* our one-kernel passes: training on the fast kernels, one rank, the device launches them; timed
       unless forced, or deterministic runs, or cuDNN's kernels are forced (ours then run only the calls
       theirs do not take) */
    const bool one_ok = cfg->training && rpp && ctx->sync_world <= 1 && env->bn_persist != 0 && !env->no_bn_fast &&
                        persist_supported();
    const bool one_forced = one_ok && env->bn_persist == 1;
    const bool one_timed = one_ok && env->bn_persist == 2 && !env->deterministic && !(cudnn && env->cudnn_bn == 1);
    const bool cudnn_timed = cudnn && env->cudnn_bn == 2;
    st->persist = one_forced;
    if (cudnn_timed || one_timed) { /* timed (batchnorm2d_pick.h) */
        bn_state three = *st, one = *st, theirs = *st;
        three.persist = false, one.persist = true;
        theirs.cudnn = cudnn;
        const mp_bn_candidates cand = {bn_forward,          bn_backward, one_forced ? NULL : &three,
                                       one_ok ? &one : NULL, cudnn_timed ? &theirs : NULL,
                                       ws_cudnn,            saved_cudnn};
        const mp_bn_choice pick = mp_bn_pick(ctx, d, info, cfg, &cand);
        if (cudnn_timed && pick.run != MP_BN_RUN_CUDNN) {
            mp_bn_cudnn_release(cudnn);
            cudnn = NULL;
        }
        st->persist = pick.ours_one;
    }
    st->cudnn = cudnn;
    *state = st;
    if (cfg->add_after && mp_env_get()->cudnn_debug) {
        char s[64];
        fprintf(stderr, "mixprec: batchnorm2d '%s' %s %s: residual add (%s)%s fused, training on %s\n",
                d->name ? d->name : "?", mp_shape_str(&info->in[0], s, sizeof s), mp_dtype_name(cfg->storage),
                mp_dtype_name(cfg->resid_dtype), cfg->relu_after ? " + ReLU" : "",
                cudnn ? "cuDNN's BN_ADD_ACTIVATION kernels (ours where a call does not fit)" : "our kernels");
    }
    mp_cuda_raise(workspace_bytes, cudnn ? ws_cudnn : ws);
    mp_cuda_raise(saved_bytes, cudnn ? saved_cudnn : saved);
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

/* The fast kernels' rows per pass for this call (batchnorm2d_fast.h), or 0:
 * one dtype for every activation it touches, every pointer 16-byte aligned. */
static int fast_rows(const mp_op_call *c, const mp_tensor *const *ts, int n) {
    if (mp_env_get()->no_bn_fast) return 0;
    const mp_dtype dt = c->in[0].dtype;
    for (int i = 0; i < n; i++)
        if (ts[i] && ts[i]->data && (ts[i]->dtype != dt || !mp_cuda_aligned16(ts[i]->data))) return 0;
    return mp_bn_fast_rows_per_pass(dt, mp_cuda_channels(&c->in[0].shape));
}

/* One cooperative kernel per pass (batchnorm2d_persist.h): where the pick
 * chose it (which takes one rank's statistics only) and the context still
 * has one rank. */
static bool persist_on(const mp_cuda_ctx *ctx, const mp_op_call *c) {
    return c->state && ((const bn_state *)c->state)->persist && ctx->sync_world <= 1;
}

static int fast_forward_rows(const mp_op_call *c) {
    const mp_tensor *ts[] = {&c->in[0], &c->out, fused_add(c) ? &c->resid : NULL};
    return fast_rows(c, ts, 3);
}

static mp_status bn_forward(mp_cuda_ctx *ctx, const mp_op_call *c) {
    MP_TRY(bn_param_check(c));
    bn_dims dm = bn_dims_of(ctx, &c->in[0].shape);
    if (c->training && dm.M < 2) return bn_batch_error(c->desc, &c->in[0].shape);
    if (const mp_bn_cudnn *cudnn = on_cudnn(c, false)) return mp_bn_cudnn_forward(ctx, cudnn, c);
    const mp_tensor *x = &c->in[0], *y = &c->out, *p = c->param;
    const int rpp = fast_forward_rows(c);
    if (rpp) dm = bn_fast_dims(ctx, &x->shape, rpp);
    /* no output: a depthwise conv or average pool applies the coefficients saved below (the training ones) */
    const bool store = !c->skip_out;
    if (!store && (!c->training || !feeds_loader(c)))
        return mp_error(MP_ERR_INTERNAL, "batchnorm2d '%s': asked to skip its output outside a training step fused "
                        "into a depthwise convolution or average pool", c->desc->name ? c->desc->name : "?");
    const int C = dm.C;
    float *ws = (float *)c->workspace, *coef = ws + 2 * (size_t)dm.G * C;
    float *save_mean = (float *)c->saved, *save_invstd = save_mean + C;
    const float eps = c->desc->attr.bn.eps, mom = c->desc->attr.bn.momentum;
    const bn_block b = bn_block_of(C, mp_cuda_aligned16(x->data) && mp_cuda_aligned16(y->data) &&
                                          (!fused_add(c) || mp_cuda_aligned16(c->resid.data)));
    const dim3 block(b.bx, b.by);
    const bool relu = fused_relu(c);
    if (c->training) {
        float *pmean = ws, *pm2 = ws + (size_t)dm.G * C;
        const mp_bn_fwd_out out = {p[P_WEIGHT].data, p[P_BIAS].data, p[P_WEIGHT].dtype, p[P_BIAS].dtype,
                                   (float *)p[P_RUNNING_MEAN].data, (float *)p[P_RUNNING_VAR].data, eps, mom,
                                   save_mean, save_invstd, coef};
        if (rpp && persist_on(ctx, c)) { /* one kernel (batchnorm2d_persist.h), or the three below where none fits */
            const cudaError_t e = mp_bn_persist_forward(ctx->stream, ctx->sm_count, x->dtype, x->data,
                                                        fused_add(c) ? c->resid.data : NULL, store ? y->data : NULL,
                                                        dm.M, C, dm.G, pmean, pm2, out, relu);
            if (e != cudaErrorCooperativeLaunchTooLarge) return mp_cuda_op_status(c, "forward", e);
        }
        if (rpp)
            MP_TRY(mp_cuda_op_status(c, "forward",
                                     mp_bn_fast_stats(ctx->stream, x->dtype, x->data, dm.M, C, dm.G, dm.R, pmean, pm2)));
        else if (b.vec == 8)
            bn_stats_kernel<8><<<dim3(b.gx, dm.G), block, 0, ctx->stream>>>(x->data, x->dtype, dm.M, C, dm.R, pmean, pm2);
        else
            bn_stats_kernel<1><<<dim3(b.gx, dm.G), block, 0, ctx->stream>>>(x->data, x->dtype, dm.M, C, dm.R, pmean, pm2);
        long long stride = C, M = dm.M, R = dm.R;
        int G = dm.G;
        if (ctx->sync_world > 1) { /* merge this rank's partials, gather every rank's, merge those */
            float *local = coef + 4 * (size_t)C, *all = local + 2 * (size_t)C;
            MP_TRY(mp_cuda_op_status(c, "forward", mp_bn_finalize_forward(ctx->stream, pmean, pm2, C, dm.G, dm.M, dm.R,
                                                                          C, out, local)));
            MP_TRY(bn_gather(ctx, c, local, all, C));
            pmean = all, pm2 = all + C, stride = 2LL * C, G = ctx->sync_world, R = dm.M, M = dm.M * ctx->sync_world;
        }
        MP_TRY(mp_cuda_op_status(
            c, "forward", mp_bn_finalize_forward(ctx->stream, pmean, pm2, stride, G, M, R, C, out, NULL)));
    } else {
        bn_eval_coef_kernel<<<(C + 255) / 256, 256, 0, ctx->stream>>>(
            C, p[P_WEIGHT].data, p[P_WEIGHT].dtype, p[P_BIAS].data, p[P_BIAS].dtype,
            (const float *)p[P_RUNNING_MEAN].data, (const float *)p[P_RUNNING_VAR].data, eps, coef);
    }
    if (!store) return mp_cuda_op_status(c, "forward", cudaSuccess);
    if (rpp)
        return mp_cuda_op_status(c, "forward",
                                 mp_bn_fast_apply(ctx->stream, x->dtype, x->data, fused_add(c) ? c->resid.data : NULL,
                                                  y->data, dm.M, C, dm.G, dm.R, coef, relu));
    const dim3 grid(b.gx, bn_rows_grid(ctx, &dm, &b));
    if (fused_add(c))
        return mp_cuda_op_status(
            c, "forward", mp_bn_add_relu_apply(ctx->stream, grid, block, b.vec, x, &c->resid, y, dm.M, C, coef, relu));
    if (b.vec == 8)
        bn_apply_kernel<8><<<grid, block, 0, ctx->stream>>>(x->data, x->dtype, y->data, y->dtype, dm.M, C, coef, relu);
    else
        bn_apply_kernel<1><<<grid, block, 0, ctx->stream>>>(x->data, x->dtype, y->data, y->dtype, dm.M, C, coef, relu);
    return mp_cuda_op_status(c, "forward", cudaSuccess);
}

static mp_status bn_backward(mp_cuda_ctx *ctx, const mp_op_call *c) {
    MP_TRY(bn_param_check(c));
    /* a fused average pool's output gradient, read in place of dy (mp_op_call.pool_dy) */
    const bool pooled = c->pool_dy.data != NULL;
    const mp_tensor *x = &c->in[0], *dy = pooled ? &c->pool_dy : &c->d_out, *dx = &c->d_in[0], *p = c->param;
    const mp_tensor *dg = &c->d_param[P_WEIGHT], *db = &c->d_param[P_BIAS];
    const bool add = fused_add(c);
    void *dr = add ? c->d_resid.data : NULL; /* the fused add's gradient to its residual input */
    if (!dx->data && !dg->data && !db->data && !dr) return MP_OK;
    if (const mp_bn_cudnn *cudnn = on_cudnn(c, true)) return mp_bn_cudnn_backward(ctx, cudnn, c);
    const mp_tensor *y = &c->out; /* with a fused ReLU: its output, the mask of dy */
    const mp_tensor *ts[] = {x, dy, dx, fused_relu(c) ? y : NULL, add ? &c->d_resid : NULL};
    const int rpp = fast_rows(c, ts, 5);
    if ((feeds_loader(c) || pooled) && (!rpp || !c->training)) /* the general kernels would read the mask from y */
        return mp_error(MP_ERR_INTERNAL, "batchnorm2d '%s': fused into a depthwise convolution or average pool, its "
                        "backward needs the fast kernels and batch statistics", c->desc->name ? c->desc->name : "?");
    const bool add_dx = (c->d_in_add & 1u) != 0;
    if (add_dx && (add || !dx->data))
        return mp_error(MP_ERR_INTERNAL, "batchnorm2d '%s': asked to add into dx, which a fused residual add's "
                        "backward (or one without dx) cannot", c->desc->name ? c->desc->name : "?");
    const bn_dims dm = rpp ? bn_fast_dims(ctx, &x->shape, rpp) : bn_dims_of(ctx, &x->shape);
    const int C = dm.C;
    float *ws = (float *)c->workspace, *coef = ws + 2 * (size_t)dm.G * C;
    float *psdy = ws, *psdyx = ws + (size_t)dm.G * C;
    const float *save_mean = (const float *)c->saved, *save_invstd = save_mean + C;
    const float *rmean = (const float *)p[P_RUNNING_MEAN].data, *rvar = (const float *)p[P_RUNNING_VAR].data;
    const bool batch_stats = c->training;
    const void *mask = fused_relu(c) ? y->data : NULL;
    const bool aligned = mp_cuda_aligned16(x->data) && mp_cuda_aligned16(dy->data) &&
                         (!dx->data || mp_cuda_aligned16(dx->data)) && (!mask || mp_cuda_aligned16(mask)) &&
                         (!dr || mp_cuda_aligned16(dr));
    const bn_block b = bn_block_of(C, aligned);
    const dim3 block(b.bx, b.by);
    /* inference with only dx wanted needs no sums: a = b = 0 */
    const bool reduce = batch_stats || dg->data || db->data;
    const float *mu = batch_stats ? save_mean : rmean;
    mp_bn_fast_mask fm = {mask, NULL, NULL, NULL, 0, 0, 0};
    /* a fused ReLU alone: its mask recomputed from x and what our forward
     * saved (not cuDNN's, whose forward leaves no scale and shift) */
    if (mask && !add && batch_stats && !on_cudnn(c, false))
        fm = (mp_bn_fast_mask){NULL, save_mean, save_invstd + C, NULL, 0, 0, 0};
    if (pooled) { /* the pool's window over x's (H, W) */
        if (!fm.fwd_mu)
            return mp_error(MP_ERR_INTERNAL, "batchnorm2d '%s': reads a fused average pool's gradient without its "
                            "ReLU's recomputed mask", c->desc->name ? c->desc->name : "?");
        fm.pooled = c->pool_dy.data, fm.H = x->shape.dims[2], fm.W = x->shape.dims[3], fm.k = c->pool_k;
    }
    mp_bn_bwd_out out = {batch_stats, save_mean, save_invstd, rmean, rvar, c->desc->attr.bn.eps, p[P_WEIGHT].data,
                         p[P_WEIGHT].dtype, dg->data, db->data, dg->dtype, db->dtype, coef};
    if (rpp && batch_stats && persist_on(ctx, c)) { /* one kernel, as the forward's */
        const cudaError_t e = mp_bn_persist_backward(ctx->stream, ctx->sm_count, x->dtype, x->data, dy->data, fm, dm.M,
                                                     C, dm.G, psdy, psdyx, out, dx->data, add_dx, dr, c->d_resid_add);
        if (e != cudaErrorCooperativeLaunchTooLarge) return mp_cuda_op_status(c, "backward", e);
    }
    if (reduce && rpp)
        MP_TRY(mp_cuda_op_status(c, "backward",
                                 mp_bn_fast_bwd_reduce(ctx->stream, x->dtype, x->data, dy->data, fm, mu, dm.M, C, dm.G,
                                                       dm.R, psdy, psdyx)));
    else if (reduce) {
        if (b.vec == 8)
            bn_bwd_reduce_kernel<8><<<dim3(b.gx, dm.G), block, 0, ctx->stream>>>(
                x->data, x->dtype, dy->data, dy->dtype, mask, y->dtype, mu, dm.M, C, dm.R, psdy, psdyx);
        else
            bn_bwd_reduce_kernel<1><<<dim3(b.gx, dm.G), block, 0, ctx->stream>>>(
                x->data, x->dtype, dy->data, dy->dtype, mask, y->dtype, mu, dm.M, C, dm.R, psdy, psdyx);
    }
    long long stride = C, M = dm.M;
    int G = reduce ? dm.G : 0;
    if (batch_stats && ctx->sync_world > 1) { /* this rank's sums (and its dgamma, dbeta), then every rank's */
        float *local = coef + 4 * (size_t)C, *all = local + 2 * (size_t)C;
        MP_TRY(mp_cuda_op_status(c, "backward", mp_bn_finalize_backward(ctx->stream, psdy, psdyx, C, dm.G, dm.M, C,
                                                                            out, local)));
        MP_TRY(bn_gather(ctx, c, local, all, C));
        psdy = all, psdyx = all + C, stride = 2LL * C, G = ctx->sync_world, M = dm.M * ctx->sync_world;
        out.dgamma = out.dbeta = NULL;
    }
    MP_TRY(mp_cuda_op_status(
        c, "backward", mp_bn_finalize_backward(ctx->stream, psdy, psdyx, stride, G, M, C, out, NULL)));
    if (rpp && (dx->data || dr))
        return mp_cuda_op_status(c, "backward",
                                 mp_bn_fast_dx(ctx->stream, x->dtype, x->data, dy->data, fm, dx->data, add_dx, dr,
                                               c->d_resid_add, dm.M, C, dm.G, dm.R, coef));
    if (add && (dx->data || dr)) {
        const dim3 grid(b.gx, bn_rows_grid(ctx, &dm, &b));
        return mp_cuda_op_status(c, "backward",
                                 mp_bn_add_relu_dx(ctx->stream, grid, block, b.vec, x, dy, fused_relu(c) ? y : NULL,
                                                   dx->data, dx->dtype, dr,
                                                   c->d_resid.dtype, c->d_resid_add, dm.M, C, coef));
    }
    if (dx->data) {
        const dim3 grid(b.gx, bn_rows_grid(ctx, &dm, &b));
        if (b.vec == 8)
            bn_dx_kernel<8><<<grid, block, 0, ctx->stream>>>(x->data, x->dtype, dy->data, dy->dtype, mask, y->dtype,
                                                             dx->data, dx->dtype, add_dx, dm.M, C, coef);
        else
            bn_dx_kernel<1><<<grid, block, 0, ctx->stream>>>(x->data, x->dtype, dy->data, dy->dtype, mask, y->dtype,
                                                             dx->data, dx->dtype, add_dx, dm.M, C, coef);
    }
    return mp_cuda_op_status(c, "backward", cudaSuccess);
}

/* Tangents (batchnorm2d_tangent_cuda.cu), from the statistics forward saved
 * (training; ours and cuDNN's kernels both keep the f32 mean and 1/std
 * there) or the running ones (eval), the fused ReLU's mask read from the
 * stored output. The fused residual add (add_after) has none. */
static mp_status bn_tangent(mp_cuda_ctx *ctx, const mp_op_call *c, bool backward) {
    const bn_state *st = (const bn_state *)c->state;
    if (st && st->add)
        return mp_error(MP_ERR_UNSUPPORTED,
                        "batchnorm2d '%s' on the GPU: %s: the fused residual add (add_after) has no "
                        "tangent; plan second derivatives without fusing it",
                        c->desc->name ? c->desc->name : "?", backward ? "backward_tangent" : "forward_tangent");
    MP_TRY(bn_param_check(c));
    return mp_cuda_bn_tangent(ctx, c, fused_relu(c), backward);
}
static mp_status bn_forward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c) { return bn_tangent(ctx, c, false); }
static mp_status bn_backward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c) { return bn_tangent(ctx, c, true); }

/* dx added into another consumer's gradient (cuDNN's kernels and ours;
 * not with the residual add fused in, whose dx kernel writes two gradients). */
static bool bn_adds_input_grad(const void *state, int k) {
    const bn_state *st = (const bn_state *)state;
    if (k != 0 || !st || st->add) return false;
    return st->cudnn ? mp_bn_cudnn_adds_dx(st->cudnn) : !mp_env_get()->no_cudnn_add_dx;
}

extern "C" const mp_cuda_op_vtable mp_cuda_batchnorm2d_vt = {"batchnorm2d",      bn_prepare,
                                                             bn_release,         bn_forward,
                                                             bn_backward,        bn_forward_tangent,
                                                             bn_backward_tangent, bn_adds_input_grad};
