/* batchnorm2d_cudnn.cu — batchnorm2d's training forward and backward on
 * cuDNN's NHWC batch-norm kernels (see batchnorm2d_cudnn.h). */
#include "cuda/batchnorm2d_cudnn.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/choice_cache.h"     /* mp_cuda_deterministic */
#include "cuda/cuda_kernel_util.cuh" /* mp_cuda_raise */

enum { P_WEIGHT, P_BIAS, P_RUNNING_MEAN, P_RUNNING_VAR };

static const cudnnBatchNormMode_t MODE = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;

struct mp_bn_cudnn {
    int C;
    double eps;
    cudnnBatchNormOps_t ops;
    bool add;                                /* BN_ADD_ACTIVATION: the fused residual add (z = resid, dz = d_resid) */
    mp_dtype dt;                             /* of x, y, dy, dx and the residual: F16 or BF16 */
    cudnnTensorDescriptor_t x_desc, bn_desc; /* x, y, dy, dx: (N, C, H, W) NHWC dt; bn: (1, C, 1, 1) f32 */
    cudnnActivationDescriptor_t act;         /* the fused ReLU, or NULL */
    size_t fwd_ws, bwd_ws, reserve;          /* bytes */
    size_t dparam_off;                       /* workspace: 2C f32 for unwanted dgamma/dbeta, after cuDNN's */
    char what_fwd[200], what_bwd[200];
};

void mp_bn_cudnn_release(mp_bn_cudnn *st) {
    if (!st) return;
    if (st->act) cudnnDestroyActivationDescriptor(st->act);
    if (st->bn_desc) cudnnDestroyTensorDescriptor(st->bn_desc);
    if (st->x_desc) cudnnDestroyTensorDescriptor(st->x_desc);
    free(st);
}

static size_t round_up(size_t x) { return (x + 255) & ~(size_t)255; }

static bool is_low(mp_dtype d) { return d == MP_DTYPE_F16 || d == MP_DTYPE_BF16; }

static mp_status make_descriptors(mp_bn_cudnn *st, const mp_shape *x, bool relu, const char *what) {
    MP_CUDNN_TRY(cudnnCreateTensorDescriptor(&st->x_desc), what);
    const cudnnDataType_t dt = st->dt == MP_DTYPE_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    MP_CUDNN_TRY(cudnnSetTensor4dDescriptor(st->x_desc, CUDNN_TENSOR_NHWC, dt, x->dims[0], x->dims[1],
                                            x->dims[2], x->dims[3]),
                 what);
    MP_CUDNN_TRY(cudnnCreateTensorDescriptor(&st->bn_desc), what);
    MP_CUDNN_TRY(cudnnDeriveBNTensorDescriptor(st->bn_desc, st->x_desc, MODE), what);
    if (relu) {
        MP_CUDNN_TRY(cudnnCreateActivationDescriptor(&st->act), what);
        MP_CUDNN_TRY(cudnnSetActivationDescriptor(st->act, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0), what);
    }
    return MP_OK;
}

static mp_status query_sizes(mp_cuda_ctx *ctx, mp_bn_cudnn *st, const char *what) {
    MP_CUDNN_TRY(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(ctx->cudnn, MODE, st->ops, st->x_desc,
                                                                          st->add ? st->x_desc : NULL, st->x_desc,
                                                                          st->bn_desc, st->act, &st->fwd_ws),
                 what);
    MP_CUDNN_TRY(cudnnGetBatchNormalizationBackwardExWorkspaceSize(ctx->cudnn, MODE, st->ops, st->x_desc, st->x_desc,
                                                                   st->x_desc, st->add ? st->x_desc : NULL,
                                                                   st->x_desc, st->bn_desc, st->act, &st->bwd_ws),
                 what);
    MP_CUDNN_TRY(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(ctx->cudnn, MODE, st->ops, st->act, st->x_desc,
                                                                      &st->reserve),
                 what);
    return MP_OK;
}

mp_status mp_bn_cudnn_prepare(mp_cuda_ctx *ctx, const mp_op_desc *d, const mp_op_info *info,
                              const mp_cuda_node_cfg *cfg, bool relu, mp_bn_cudnn **out, size_t *workspace_bytes,
                              size_t *saved_bytes) {
    *out = NULL;
    const mp_shape *x = &info->in[0];
    const double eps = d->attr.bn.eps;
    /* PyTorch's limits for these kernels: 32-bit indexing, and at most
     * 880 801 samples in training */
    const bool fits_kernels = mp_shape_numel(x) < INT32_MAX && x->dims[0] <= 880801;
    const mp_dtype dt = cfg->storage;
    if (!cfg->training || x->ndim != 4 || x->dims[1] % 8 || !fits_kernels || cfg->compute != MP_DTYPE_F32 ||
        !is_low(dt) || cfg->in_dtype[0] != dt ||
        eps < CUDNN_BN_MIN_EPSILON || ctx->sync_world > 1 || mp_cuda_deterministic() ||
        (mp_env_get()->cudnn_bn == 0) || (cfg->add_after && (cfg->resid_dtype != dt || !relu)))
        return MP_OK;
    mp_bn_cudnn *st = (mp_bn_cudnn *)calloc(1, sizeof *st);
    if (!st) return mp_error(MP_ERR_NOMEM, "batchnorm2d '%s': out of host memory", d->name ? d->name : "?");
    st->C = x->dims[1];
    st->eps = eps;
    st->add = cfg->add_after;
    st->dt = dt;
    st->ops = st->add ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION
              : relu  ? CUDNN_BATCHNORM_OPS_BN_ACTIVATION
                      : CUDNN_BATCHNORM_OPS_BN;
    char shape[64];
    mp_shape_str(x, shape, sizeof shape);
    const char *name = d->name ? d->name : "?", *fused = st->add ? ", add + ReLU fused" : relu ? ", ReLU fused" : "";
    snprintf(st->what_fwd, sizeof st->what_fwd, "batchnorm2d '%.60s' forward [%.60s %s, cuDNN%s]", name, shape,
             mp_dtype_name(dt), fused);
    snprintf(st->what_bwd, sizeof st->what_bwd, "batchnorm2d '%.60s' backward [%.60s %s, cuDNN%s]", name, shape,
             mp_dtype_name(dt), fused);
    mp_status s = make_descriptors(st, x, relu, st->what_fwd);
    if (s == MP_OK) s = query_sizes(ctx, st, st->what_fwd);
    if (s != MP_OK) { /* cuDNN does not take this shape: our kernels will */
        mp_clear_error();
        mp_bn_cudnn_release(st);
        return MP_OK;
    }
    st->dparam_off = round_up(st->fwd_ws > st->bwd_ws ? st->fwd_ws : st->bwd_ws);
    mp_cuda_raise(workspace_bytes, st->dparam_off + 2 * (size_t)st->C * sizeof(float));
    mp_cuda_raise(saved_bytes, 2 * (size_t)st->C * sizeof(float) + st->reserve);
    *out = st;
    return MP_OK;
}

bool mp_bn_cudnn_fits(const mp_bn_cudnn *st, const mp_op_call *c, bool backward) {
    if (!st || !c->training || c->in[0].dtype != st->dt || c->out.dtype != st->dt) return false;
    for (int k = P_WEIGHT; k <= P_RUNNING_VAR; k++)
        if (c->param[k].dtype != MP_DTYPE_F32) return false;
    if (st->add && (!c->resid.data || c->resid.dtype != st->dt)) return false;
    /* cuDNN writes the residual's gradient, never adds to it */
    if (backward && st->add && (!c->d_resid.data || c->d_resid.dtype != st->dt || c->d_resid_add)) return false;
    if (!backward) return true;
    if (c->d_out.dtype != st->dt || !c->d_in[0].data || c->d_in[0].dtype != st->dt) return false;
    for (int k = P_WEIGHT; k <= P_BIAS; k++)
        if (c->d_param[k].data && c->d_param[k].dtype != MP_DTYPE_F32) return false;
    return true;
}

bool mp_bn_cudnn_adds_dx(const mp_bn_cudnn *st) { return st && !st->add && !mp_env_get()->no_cudnn_add_dx; }

mp_status mp_bn_cudnn_forward(mp_cuda_ctx *ctx, const mp_bn_cudnn *st, const mp_op_call *c) {
    const float one = 1.f, zero = 0.f;
    float *save_mean = (float *)c->saved, *save_invstd = save_mean + st->C;
    void *reserve = st->reserve ? (void *)(save_invstd + st->C) : NULL;
    const mp_tensor *p = c->param;
    MP_CUDNN_TRY(cudnnBatchNormalizationForwardTrainingEx(
                     ctx->cudnn, MODE, st->ops, &one, &zero, st->x_desc, c->in[0].data, st->add ? st->x_desc : NULL,
                     st->add ? c->resid.data : NULL, st->x_desc, c->out.data, st->bn_desc, p[P_WEIGHT].data, p[P_BIAS].data,
                     c->desc->attr.bn.momentum,
                     p[P_RUNNING_MEAN].data, p[P_RUNNING_VAR].data, st->eps, save_mean, save_invstd, st->act,
                     st->fwd_ws ? c->workspace : NULL, st->fwd_ws, reserve, st->reserve),
                 st->what_fwd);
    return MP_OK;
}

mp_status mp_bn_cudnn_backward(mp_cuda_ctx *ctx, const mp_bn_cudnn *st, const mp_op_call *c) {
    const float one = 1.f, zero = 0.f;
    const float *beta_dx = (c->d_in_add & 1u) ? &one : &zero; /* add into dx (mp_bn_cudnn_adds_dx) */
    const float *save_mean = (const float *)c->saved, *save_invstd = save_mean + st->C;
    void *reserve = st->reserve ? (void *)(save_invstd + st->C) : NULL;
    const mp_tensor *p = c->param;
    float *spare = (float *)((char *)c->workspace + st->dparam_off); /* dgamma/dbeta nobody asked for */
    /* y (c->out) is read for the fused ReLU only; without it the planner may
     * have reused its memory (MP_BWD_SKIPS_OUTPUT) and cuDNN ignores it */
    void *dgamma = c->d_param[P_WEIGHT].data ? c->d_param[P_WEIGHT].data : spare;
    void *dbeta = c->d_param[P_BIAS].data ? c->d_param[P_BIAS].data : spare + st->C;
    MP_CUDNN_TRY(cudnnBatchNormalizationBackwardEx(
                     ctx->cudnn, MODE, st->ops, &one, beta_dx, &one, &zero, st->x_desc, c->in[0].data, st->x_desc,
                     c->out.data, st->x_desc, c->d_out.data, st->add ? st->x_desc : NULL,
                     st->add ? c->d_resid.data : NULL, st->x_desc, c->d_in[0].data, st->bn_desc,
                     p[P_WEIGHT].data, p[P_BIAS].data, dgamma, dbeta, st->eps, save_mean, save_invstd, st->act,
                     st->bwd_ws ? c->workspace : NULL, st->bwd_ws, reserve, st->reserve),
                 st->what_bwd);
    return MP_OK;
}
