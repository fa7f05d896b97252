/* cuda_op_util.cu — what several op files share: error lines (a failed
 * launch or an unsupported dtype becomes one mp_error naming the op kind,
 * the node, the shapes and the dtypes of its tensors) and the fixed-order
 * sum that ends the losses. */
#include <stdio.h>
#include <string.h>

#include "cuda/cuda_kernel_util.cuh"

static const char *op_name(const mp_op_desc *d) {
    const mp_op_vtable *vt = mp_op_lookup(d->kind);
    return vt ? vt->name : "op";
}

/* "in (2, 3, 4, 5) bf16, (2, 3, 4, 5) f32, out (2, 3, 4, 5) f32" */
static void describe(const mp_op_call *c, char *buf, size_t len) {
    size_t at = 0;
    char s[64];
    for (int i = 0; i < c->n_in && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%s %s", i ? ", " : "in ",
                               mp_shape_str(&c->in[i].shape, s, sizeof s), mp_dtype_name(c->in[i].dtype));
    if (at < len)
        snprintf(buf + at, len - at, "%sout %s %s", at ? ", " : "", mp_shape_str(&c->out.shape, s, sizeof s),
                 mp_dtype_name(c->out.dtype));
}

mp_status mp_cuda_op_status(const mp_op_call *c, const char *phase, cudaError_t e) {
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e == cudaSuccess) return MP_OK;
    char what[384], tensors[256];
    describe(c, tensors, sizeof tensors);
    snprintf(what, sizeof what, "%s '%s' %s (%s)", op_name(c->desc), c->desc->name ? c->desc->name : "?", phase,
             tensors);
    return mp_cuda_check(e, "kernel launch", what);
}

mp_status mp_cuda_op_check_dtypes(const mp_op_desc *d, const mp_op_info *info, const mp_cuda_node_cfg *cfg,
                                  int labels_input) {
    for (int i = 0; i < info->n_in; i++) {
        mp_dtype dt = cfg->in_dtype[i];
        if (i == labels_input ? dt == MP_DTYPE_I32 : mp_cuda_float_dtype(dt)) continue;
        char s[64];
        return mp_error(MP_ERR_UNSUPPORTED, "%s '%s' on the GPU: input %d %s is %s; %s", op_name(d),
                        d->name ? d->name : "?", i, mp_shape_str(&info->in[i], s, sizeof s), mp_dtype_name(dt),
                        i == labels_input ? "labels must be int32" : "activations must be f32, f16 or bf16");
    }
    if (!mp_cuda_float_dtype(cfg->storage))
        return mp_error(MP_ERR_UNSUPPORTED, "%s '%s' on the GPU: output dtype %s (must be f32, f16 or bf16)",
                        op_name(d), d->name ? d->name : "?", mp_dtype_name(cfg->storage));
    return MP_OK;
}

mp_status mp_cuda_prepare_stateless(mp_cuda_ctx *ctx, const mp_op_desc *d, const mp_op_info *info,
                                    const mp_cuda_node_cfg *cfg, void **state, size_t *workspace_bytes,
                                    size_t *saved_bytes) {
    (void)ctx, (void)workspace_bytes, (void)saved_bytes;
    *state = NULL;
    return mp_cuda_op_check_dtypes(d, info, cfg, -1);
}

#define SUM_THREADS 1024

/* One block: out[0] = sum(v[0..count)) / divisor, a fixed-order tree in double. */
__global__ void mp_sum_to_scalar_kernel(const double *v, long long count, double divisor, void *out,
                                        mp_dtype out_dt) {
    __shared__ double s[SUM_THREADS];
    double acc = 0;
    for (long long i = threadIdx.x; i < count; i += SUM_THREADS) acc += v[i];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int k = SUM_THREADS / 2; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) mp_st(out, out_dt, 0, (float)(s[0] / divisor));
}

cudaError_t mp_cuda_sum_to_scalar(mp_cuda_ctx *ctx, const double *v, long long count, double divisor, void *out,
                                  mp_dtype out_dt) {
    mp_sum_to_scalar_kernel<<<1, SUM_THREADS, 0, ctx->stream>>>(v, count, divisor, out, out_dt);
    return cudaGetLastError();
}
