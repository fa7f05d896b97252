/* sgd_cuda.cu — fused multi-tensor SGD over f32 master weights, as
 * optim/sgd.c operation for operation (torch.optim.SGD, dampening 0, L2
 * weight decay, momentum buffer starting at zero, Nesterov; under
 * MP_MT_STATE_LOW the buffer is f16/bf16, b rounded RNE and the rounded b
 * used), followed by the RNE refresh of each tensor's f16/bf16 copy; skipped
 * on the device flag. */
#include "cuda/float_bits.cuh"
#include "cuda/optim_cuda.cuh"

__global__ void __launch_bounds__(MP_MT_THREADS)
    sgd_kernel(mp_mt_table t, const mp_step_hyper *h, float mu, float weight_decay, bool nesterov) {
    if (h->skip) return;
    const float lr = h->lr;
    mp_mt_for_each(t, [&](const mp_mt_tensor &ten, long long i) {
        const float wd = (ten.flags & MP_MT_DECAY) ? weight_decay : 0.0f;
        float p = mp_dev_weight(ten, i);
        const float g = MP_FADD(mp_dev_grad(ten, i), MP_FMUL(wd, p));
        if (mu == 0.0f) {
            p = MP_FSUB(p, MP_FMUL(lr, g));
        } else {
            void *buf = ten.ptr[MP_MT_BUF0];
            const int sdt = (ten.flags & MP_MT_STATE_LOW) ? (ten.flags & MP_MT_DTYPE_MASK) : MP_DTYPE_F32;
            /* the value stored (rounded under MP_MT_STATE_LOW) is the b used, as on the CPU */
            const float b = mp_dev_store_any(buf, sdt, i, MP_FADD(MP_FMUL(mu, mp_dev_load_any(buf, sdt, i)), g));
            p = MP_FSUB(p, MP_FMUL(lr, nesterov ? MP_FADD(g, MP_FMUL(mu, b)) : b));
        }
        mp_dev_store_weight(ten, i, p);
    });
}

mp_status mp_cuda_sgd_launch(mp_cuda_ctx *ctx, const mp_cuda_optim *o) {
    if (o->table.grid == 0) return MP_OK;
    sgd_kernel<<<o->table.grid, MP_MT_THREADS, 0, ctx->stream>>>(o->table, &o->scalars->hyper, o->opts.momentum,
                                                                 o->opts.weight_decay, o->opts.nesterov);
    return mp_mt_launched("sgd_kernel");
}
