/* sgd_cuda.cu — fused multi-tensor SGD over f32 master weights, as
 * optim/sgd.c operation for operation (torch.optim.SGD, dampening 0, L2
 * weight decay, momentum buffer starting at zero, Nesterov; under
 * MP_MT_STATE_LOW the buffer is f16/bf16, b rounded RNE and the rounded b
 * used), followed by the RNE refresh of each tensor's f16/bf16 copy; skipped
 * on the device flag. A chunk of the common kind (f32 master, gradient and
 * buffer, 16-byte aligned) moves four elements per thread and access
 * (vector loads and stores: the update is memory-bound); any other chunk,
 * and a chunk's last len % 4 elements, goes element by element. Both do the
 * same rounded operations, so both give the same bits. */
#include "cuda/float_bits.cuh"
#include "cuda/optim_cuda.cuh"

typedef struct {
    float lr, mu, weight_decay;
    bool nesterov;
} sgd_hyper;

/* The gradient with L2 decay, the new buffer b = mu * b + g (the value
 * stored is the one used), and the weight it gives: one element. */
__device__ __forceinline__ float sgd_decayed_grad(float grad, float p, float wd) {
    return MP_FADD(grad, MP_FMUL(wd, p));
}
__device__ __forceinline__ float sgd_new_buffer(float b, float g, const sgd_hyper &h) {
    return MP_FADD(MP_FMUL(h.mu, b), g);
}
__device__ __forceinline__ float sgd_new_weight(float p, float g, float b, const sgd_hyper &h) {
    if (h.mu == 0.0f) return MP_FSUB(p, MP_FMUL(h.lr, g));
    return MP_FSUB(p, MP_FMUL(h.lr, h.nesterov ? MP_FADD(g, MP_FMUL(h.mu, b)) : b));
}

__device__ __forceinline__ void sgd_element(const mp_mt_tensor &ten, long long i, const sgd_hyper &h) {
    const float wd = (ten.flags & MP_MT_DECAY) ? h.weight_decay : 0.0f;
    const float p = mp_dev_weight(ten, i);
    const float g = sgd_decayed_grad(mp_dev_grad(ten, i), p, wd);
    float b = 0.0f;
    if (h.mu != 0.0f) {
        void *buf = ten.ptr[MP_MT_BUF0];
        const int sdt = (ten.flags & MP_MT_STATE_LOW) ? (ten.flags & MP_MT_DTYPE_MASK) : MP_DTYPE_F32;
        b = mp_dev_store_any(buf, sdt, i, sgd_new_buffer(mp_dev_load_any(buf, sdt, i), g, h));
    }
    mp_dev_store_weight(ten, i, sgd_new_weight(p, g, b, h));
}

/* Whether a chunk starting at start takes the four-wide path: f32 master
 * and (with momentum) buffer at 16 bytes, the gradient at 16 (f32) or 8
 * (MP_MT_GRAD_LOW: in the low copy's dtype), the low copy (if any) at 8. */
__device__ __forceinline__ bool sgd_vector_chunk(const mp_mt_tensor &ten, long long start, const sgd_hyper &h) {
    const int low = ten.flags & MP_MT_DTYPE_MASK;
    const bool grad_low = (ten.flags & MP_MT_GRAD_LOW) != 0;
    if (!ten.ptr[MP_MT_PARAM] || (ten.flags & (MP_MT_STATE_LOW | MP_MT_NO_MASTER))) return false;
    if (low != MP_DTYPE_F32 && low != MP_DTYPE_F16 && low != MP_DTYPE_BF16) return false;
    return mp_mt_aligned(ten.ptr[MP_MT_PARAM], start, 4, 16) &&
           (grad_low ? mp_mt_aligned(ten.ptr[MP_MT_GRAD], start, 2, 8)
                     : mp_mt_aligned(ten.ptr[MP_MT_GRAD], start, 4, 16)) &&
           (h.mu == 0.0f || mp_mt_aligned(ten.ptr[MP_MT_BUF0], start, 4, 16)) &&
           (low == MP_DTYPE_F32 || mp_mt_aligned(ten.ptr[MP_MT_LOW], start, 2, 8));
}

/* Four gradients from start + 4 q: one 16-byte f32 load, or one 8-byte load
 * of f16/bf16 values (MP_MT_GRAD_LOW) widened exactly. */
__device__ __forceinline__ void sgd_four_grads(const mp_mt_tensor &ten, long long start, int q, float *g) {
    if (!(ten.flags & MP_MT_GRAD_LOW)) {
        *(float4 *)g = ((const float4 *)((const float *)ten.ptr[MP_MT_GRAD] + start))[q];
        return;
    }
    __align__(8) unsigned short bits[4];
    *(uint2 *)bits = ((const uint2 *)((const unsigned short *)ten.ptr[MP_MT_GRAD] + start))[q];
    for (int l = 0; l < 4; l++) g[l] = mp_dev_low_bits_to_f32(bits[l], ten.flags & MP_MT_DTYPE_MASK);
}

/* Four elements from start + 4 q: the element path's operations, lane by lane. */
__device__ __forceinline__ void sgd_four(const mp_mt_tensor &ten, long long start, int q, const sgd_hyper &h) {
    const float wd = (ten.flags & MP_MT_DECAY) ? h.weight_decay : 0.0f;
    const int low = ten.flags & MP_MT_DTYPE_MASK;
    float4 *pp = (float4 *)((float *)ten.ptr[MP_MT_PARAM] + start) + q;
    float4 *bp = h.mu != 0.0f ? (float4 *)((float *)ten.ptr[MP_MT_BUF0] + start) + q : NULL;
    __align__(16) float p[4], g[4], b[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    *(float4 *)p = *pp;
    sgd_four_grads(ten, start, q, g);
    if (bp) *(float4 *)b = *bp;
    for (int l = 0; l < 4; l++) {
        g[l] = sgd_decayed_grad(g[l], p[l], wd);
        if (bp) b[l] = sgd_new_buffer(b[l], g[l], h);
        p[l] = sgd_new_weight(p[l], g[l], b[l], h);
    }
    if (bp) *bp = *(float4 *)b;
    *pp = *(float4 *)p;
    if (low == MP_DTYPE_F32) return;
    __align__(8) unsigned short bits[4];
    for (int l = 0; l < 4; l++)
        bits[l] = low == MP_DTYPE_F16 ? mp_dev_f32_to_f16_bits(p[l]) : mp_dev_f32_to_bf16_bits(p[l]);
    ((uint2 *)((unsigned short *)ten.ptr[MP_MT_LOW] + start))[q] = *(uint2 *)bits;
}

__global__ void __launch_bounds__(MP_MT_THREADS) sgd_kernel(mp_mt_table t, const mp_step_hyper *hy, sgd_hyper h) {
    if (hy->skip) return;
    h.lr = hy->lr;
    mp_mt_for_each_chunk(t, [&](const mp_mt_tensor &ten, long long start, int len) {
        int done = 0;
        if (sgd_vector_chunk(ten, start, h)) {
            const int quads = len / 4;
            for (int q = threadIdx.x; q < quads; q += blockDim.x) sgd_four(ten, start, q, h);
            done = quads * 4;
        }
        for (long long i = start + done + threadIdx.x; i < start + len; i += blockDim.x) sgd_element(ten, i, h);
    });
}

mp_status mp_cuda_sgd_launch(mp_cuda_ctx *ctx, const mp_cuda_optim *o) {
    const unsigned grid = mp_mt_kernel_grid(ctx, o->table, (const void *)sgd_kernel);
    if (grid == 0) return MP_OK;
    const sgd_hyper h = {0.0f, o->opts.momentum, o->opts.weight_decay, o->opts.nesterov};
    sgd_kernel<<<grid, MP_MT_THREADS, 0, ctx->stream>>>(o->table, &o->scalars->hyper, h);
    return mp_mt_launched("sgd_kernel");
}
