/* pool2d_cpu.c — see pool2d_cpu.h. The reference walks each 2x2 window with
 * two nested loops of two and converts bf16 one value at a time; here a row
 * of windows is one vector loop. */
#if defined(__GNUC__) && !defined(__clang__) /* see cpu_fast.h */
#pragma GCC optimize("no-trapping-math")
#endif
#include "ops/pool2d_cpu.h"

#include "ops/batchnorm2d_cpu_math.h"
#include "ops/cpu_fast.h"

#define MP_REF_TEMPLATE "pool2d_cpu_kernels.inc"
#include "instantiate_fast.inc"
#define MP_REF_TEMPLATE "pool2d_nhwc_kernels.inc"
#include "instantiate_fast.inc"

bool mp_pool_cpu_window(const mp_op_desc *d) {
    const mp_pool_opts *o = &d->attr.pool;
    return d->kind == MP_OP_AVGPOOL2D && o->kernel == 2 && o->stride == 2 && o->padding == 0;
}

bool mp_pool_cpu_applies(const mp_op_call *c) { return mp_pool_cpu_window(c->desc) && mp_fast_use(c, c->out.dtype); }

void mp_pool_cpu_forward(const mp_op_call *c) {
    const int *x = c->in[0].shape.dims, *y = c->out.shape.dims;
    if (c->info->nhwc && c->bn_x.data) { /* a batch norm + ReLU fused in (graph/plan_fuse.h) */
        mp_avgpool2_bn_fwd_cpu_nhwc(c->out.dtype, c->bn_x.data, c->out.data, c->bn_mu, c->bn_scale, c->bn_shift, x[0],
                                    x[1], x[2], x[3]);
        return;
    }
    if (c->info->nhwc) { /* channels-last (graph/plan_layout.h) */
        mp_avgpool2_fwd_cpu_nhwc(c->out.dtype, c->in[0].data, c->out.data, x[0], x[1], x[2], x[3]);
        return;
    }
    MP_FAST_CALL(c->out.dtype, avgpool2_fwd, c->in[0].data, c->out.data, (int64_t)x[0] * x[1], x[2], x[3], y[2], y[3]);
}

void mp_pool_cpu_backward(const mp_op_call *c) {
    const int *x = c->in[0].shape.dims, *y = c->out.shape.dims;
    if (c->info->nhwc) {
        mp_avgpool2_bwd_cpu_nhwc(c->out.dtype, c->d_out.data, c->d_in[0].data, x[0], x[1], x[2], x[3]);
        return;
    }
    MP_FAST_CALL(c->out.dtype, avgpool2_bwd, c->d_out.data, c->d_in[0].data, (int64_t)x[0] * x[1], x[2], x[3], y[2],
                 y[3]);
}

void mp_avgpool2_fwd_cpu_nhwc(mp_dtype dt, const void *x, void *y, int N, int C, int H, int W) {
    MP_FAST_CALL(dt, avgpool2n_fwd, x, y, N, C, H, W);
}

void mp_avgpool2_bwd_cpu_nhwc(mp_dtype dt, const void *dy, void *dx, int N, int C, int H, int W) {
    MP_FAST_CALL(dt, avgpool2n_bwd, dy, dx, N, C, H, W);
}

void mp_avgpool2_bn_fwd_cpu_nhwc(mp_dtype dt, const void *bn_x, void *y, const float *mu, const float *scale,
                                 const float *shift, int N, int C, int H, int W) {
    MP_FAST_CALL(dt, avgpool2n_bn_fwd, bn_x, y, mu, scale, shift, N, C, H, W);
}
