/* inject.c — see inject.h. */
#include "inject.h"

#include "cuda/cuda_ctx.h"
#include "cuda/cuda_plan.h"
#include "cuda/cuda_plan_kernels.h"
#include "cuda/cuda_exec.h"
#include "graph/plan.h"
#include "train/trainer.h"

/* Graph parameter index of the first optimizer group's first parameter. */
static int first_param(const mp_trainer *t) { return t->groups[0].opt->param_index[0]; }

/* Called once per optimizer group on a step's last launch; group 0's call
 * writes (the kernel disarms the flag, so an armed step overflows once). */
static mp_status inject_hook(void *arg, mp_trainer *t, int g) {
    const gpu_inject *inj = arg;
    if (g != 0) return MP_OK;
    const int k = first_param(t);
    return mp_cuda_inject_inf(mp_cuda_plan_ctx(t->plan), inj->armed, mp_device_grad(t->plan, k),
                              mp_plan_grad_dtype(t->plan, k));
}

mp_status gpu_inject_attach(mp_trainer *t, gpu_inject *inj) {
    inj->armed = NULL;
    if (t->o.device.kind != MP_DEVICE_CUDA)
        return mp_error(MP_ERR_INVALID_ARG, "overflow injection: the trainer is not on a GPU");
    if (t->steps > 0 || t->micro > 0)
        return mp_error(MP_ERR_INVALID_ARG, "overflow injection: attach before the trainer's first step");
    if (!mp_device_grad(t->plan, first_param(t)))
        return mp_error(MP_ERR_INVALID_ARG, "overflow injection: '%s' has no device gradient",
                        t->g->params[first_param(t)].name);
    mp_cuda_ctx *ctx = mp_cuda_plan_ctx(t->plan);
    MP_CUDA_TRY(cudaMalloc((void **)&inj->armed, sizeof(int)), "overflow injection flag");
    mp_status s = mp_cuda_check(cudaMemsetAsync(inj->armed, 0, sizeof(int), ctx->stream), "cudaMemsetAsync",
                                "overflow injection flag");
    if (s == MP_OK)
        s = mp_cuda_check(cudaStreamSynchronize(ctx->stream), "cudaStreamSynchronize", "overflow injection flag");
    if (s != MP_OK) {
        gpu_inject_free(inj);
        return s;
    }
    t->after_reduce = inject_hook;
    t->after_reduce_arg = inj;
    return MP_OK;
}

mp_status gpu_inject_arm(mp_trainer *t, gpu_inject *inj) {
    static const int one = 1;
    if (!inj->armed) return mp_error(MP_ERR_INVALID_ARG, "overflow injection: not attached");
    mp_cuda_ctx *ctx = mp_cuda_plan_ctx(t->plan);
    MP_CUDA_TRY(cudaMemcpyAsync(inj->armed, &one, sizeof one, cudaMemcpyHostToDevice, ctx->stream),
                "arming the overflow injection");
    return mp_cuda_check(cudaStreamSynchronize(ctx->stream), "cudaStreamSynchronize", "arming the overflow injection");
}

void gpu_inject_free(gpu_inject *inj) {
    if (inj->armed) cudaFree(inj->armed);
    inj->armed = NULL;
}
