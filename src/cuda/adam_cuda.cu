/* adam_cuda.cu — fused multi-tensor Adam / AdamW over f32 master weights,
 * as optim/adam.c operation for operation (bias-corrected moments; Adam's L2
 * term, AdamW's decoupled p *= 1 - lr*wd), the per-step scalars coming from
 * the device prologue; then the RNE refresh of the f16/bf16 copy. */
#include "cuda/float_bits.cuh"
#include "cuda/optim_cuda.cuh"

__global__ void __launch_bounds__(MP_MT_THREADS)
    adam_kernel(mp_mt_table t, const mp_step_hyper *h, float beta1, float beta2, float eps) {
    if (h->skip) return;
    const float b1c = 1.0f - beta1, b2c = 1.0f - beta2;
    const float ss = h->step_size, bc2s = h->bc2_sqrt;
    const float l2_on = h->l2[1], l2_off = h->l2[0], dm_on = h->decay_mul[1], dm_off = h->decay_mul[0];
    mp_mt_for_each(t, [&](const mp_mt_tensor &ten, long long i) {
        float *m = (float *)ten.ptr[MP_MT_BUF0];
        float *v = (float *)ten.ptr[MP_MT_BUF1];
        const bool decay = ten.flags & MP_MT_DECAY;
        const float l2 = decay ? l2_on : l2_off, dm = decay ? dm_on : dm_off;
        const float pj = MP_FMUL(mp_dev_weight(ten, i), dm);
        const float g = MP_FADD(mp_dev_grad(ten, i), MP_FMUL(l2, pj));
        const float m0 = m[i];
        const float mj = MP_FADD(m0, MP_FMUL(b1c, MP_FSUB(g, m0)));
        const float vj = MP_FADD(MP_FMUL(beta2, v[i]), MP_FMUL(MP_FMUL(b2c, g), g));
        const float denom = MP_FADD(MP_FDIV(__fsqrt_rn(vj), bc2s), eps);
        const float p = MP_FSUB(pj, MP_FMUL(ss, MP_FDIV(mj, denom)));
        m[i] = mj;
        v[i] = vj;
        mp_dev_store_weight(ten, i, p);
    });
}

mp_status mp_cuda_adam_launch(mp_cuda_ctx *ctx, const mp_cuda_optim *o) {
    const unsigned grid = mp_mt_kernel_grid(ctx, o->table, (const void *)adam_kernel);
    if (grid == 0) return MP_OK;
    adam_kernel<<<grid, MP_MT_THREADS, 0, ctx->stream>>>(o->table, &o->scalars->hyper, o->opts.beta1,
                                                                  o->opts.beta2, o->opts.eps);
    return mp_mt_launched("adam_kernel");
}
