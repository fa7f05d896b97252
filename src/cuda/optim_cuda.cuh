/* optim_cuda.cuh — the inside of mp_cuda_optim (cuda_optim.h): the
 * multi-tensor table (param, grad, state buffers, low copy per tensor; the
 * state f32, or f16/bf16 for SGD momentum under MP_MT_STATE_LOW) and
 * the device scalars of a step. Each step is two launches: a one-thread
 * prologue decides skip / step count / learning rate / Adam's bias
 * corrections on the device, then the multi-tensor update reads them. */
#ifndef MP_CUDA_OPTIM_CUDA_CUH
#define MP_CUDA_OPTIM_CUDA_CUH

#include "cuda/float_bits.cuh"
#include "cuda/multi_tensor.cuh"

/* Element i's weight before the update: the f32 master, or where there is
 * none (no master weights and no f32 array, cuda_optim.h) its low copy. */
__device__ __forceinline__ float mp_dev_weight(const mp_mt_tensor &ten, long long i) {
    const float *param = (const float *)ten.ptr[MP_MT_PARAM];
    return param ? param[i] : mp_dev_load_low(ten.ptr[MP_MT_LOW], ten.flags & MP_MT_DTYPE_MASK, i);
}

/* Element i's gradient: f32, or (MP_MT_GRAD_LOW) in the low copy's dtype. */
__device__ __forceinline__ float mp_dev_grad(const mp_mt_tensor &ten, long long i) {
    const int dt = (ten.flags & MP_MT_GRAD_LOW) ? (ten.flags & MP_MT_DTYPE_MASK) : MP_DTYPE_F32;
    return mp_dev_load_any(ten.ptr[MP_MT_GRAD], dt, i);
}

/* After an update to p of element i: the low copy (if any) rewritten from p,
 * RNE; the f32 array (if any) takes p, or without master weights
 * (MP_MT_NO_MASTER) the low copy's value, as the CPU trainer rounds it. */
__device__ __forceinline__ void mp_dev_store_weight(const mp_mt_tensor &ten, long long i, float p) {
    const int low = ten.flags & MP_MT_DTYPE_MASK;
    float *param = (float *)ten.ptr[MP_MT_PARAM];
    const float q = low == MP_DTYPE_F32 ? p : mp_dev_store_low(ten.ptr[MP_MT_LOW], low, i, p);
    if (param) param[i] = (ten.flags & MP_MT_NO_MASTER) ? q : p;
}

/* Written by the prologue, read by the update kernels. */
typedef struct {
    int skip;                  /* found_inf was set: nothing changes */
    float lr;
    float step_size, bc2_sqrt; /* Adam: lr / (1 - beta1^t), sqrt(1 - beta2^t) */
    float l2[2];               /* Adam's L2 term, [tensor takes decay] */
    float decay_mul[2];        /* AdamW's 1 - lr * wd, [tensor takes decay] */
} mp_step_hyper;

typedef struct {
    long long steps;           /* steps taken, as mp_optim_step_count */
    mp_step_hyper hyper;
} mp_optim_scalars;

struct mp_cuda_optim {
    mp_optim_opts opts;        /* defaults applied */
    int n_params, n_bufs;
    mp_mt_table table;
    void *state;               /* device: every state buffer, each 64-byte aligned */
    void **bufs;               /* host: n_params * 2 device pointers */
    mp_dtype *state_dtype;     /* host: per parameter, its buffers' dtype (f32, or f16/bf16: SGD, MP_MT_STATE_LOW) */
    long long *numel;          /* host: elements per parameter (checkpoint checks) */
    int *filter;               /* host: per parameter its mp_cuda_param_ref.filter (3 ints; checkpoint transfers) */
    mp_optim_scalars *scalars; /* device */
};

/* The update kernels' launchers (sgd_cuda.cu, adam_cuda.cu), after the
 * prologue on the same stream. */
mp_status mp_cuda_sgd_launch(mp_cuda_ctx *ctx, const mp_cuda_optim *o);
mp_status mp_cuda_adam_launch(mp_cuda_ctx *ctx, const mp_cuda_optim *o);

#endif
