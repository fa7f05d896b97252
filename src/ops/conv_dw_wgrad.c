/* conv_dw_wgrad.c — see conv_dw_wgrad.h. */
#if defined(__GNUC__) && !defined(__clang__) /* see cpu_fast.h */
#pragma GCC optimize("no-trapping-math")
#endif
#include "ops/conv_dw_wgrad.h"

#include <omp.h>

#include "ops/cpu_fast.h"

#define MP_REF_TEMPLATE "conv_dw_wgrad_kernels.inc"
#include "instantiate_fast.inc"

/* C rounded up to 16 floats: each tap's sums start 64-byte aligned. */
static int64_t cpad(int C) { return ((int64_t)C + 15) / 16 * 16; }

static int taps(const mp_op_desc *d) { return d->attr.conv.kernel * d->attr.conv.kernel; }

bool mp_dw_wgrad_applies(const mp_op_desc *d, const mp_op_info *info, mp_dtype dt) {
    const mp_conv_opts *o = &d->attr.conv;
    if (dt != MP_DTYPE_BF16 || d->kind != MP_OP_CONV2D || o->bias || info->in[0].ndim != 4 || info->out.ndim != 4)
        return false;
    const int C = info->in[0].dims[1];
    return o->groups == C && info->out.dims[1] == C && mp_info_nhwc_in(info, 0) && mp_info_nhwc_out(info) &&
           mp_fast_isa_current() != MP_FAST_NONE;
}

size_t mp_dw_wgrad_workspace_bytes(const mp_op_desc *d, const mp_op_info *info) {
    return (size_t)MP_DW_WGRAD_MAX_THREADS * (size_t)taps(d) * (size_t)cpad(info->in[0].dims[1]) *
           (sizeof(double) + sizeof(float));
}

void mp_dw_wgrad_run(mp_dtype dt, const mp_op_desc *d, const mp_op_info *info, const void *x, const void *dy,
                     float *dw, void *ws) {
    const mp_conv_opts *o = &d->attr.conv;
    const int *in = info->in[0].dims, *out = info->out.dims;
    const int t = omp_get_max_threads(), procs = omp_get_num_procs(), T0 = t < procs ? t : procs;
    const int T = T0 < MP_DW_WGRAD_MAX_THREADS ? T0 : MP_DW_WGRAD_MAX_THREADS;
    MP_FAST_CALL(dt, dw_wgrad, x, dy, dw, in[0], in[2], in[3], in[1], out[2], out[3], o->kernel, o->kernel,
                 o->stride ? o->stride : 1, o->padding, o->dilation ? o->dilation : 1, T, cpad(in[1]), ws);
}
