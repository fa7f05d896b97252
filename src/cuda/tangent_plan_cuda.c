/* tangent_plan_cuda.c — the CUDA backend's second-order hooks
 * (graph/exec_backend.h): tangent buffers in device memory (f32, 4-D
 * tangents channels-last like the tensors they belong to) and tangent calls
 * on the GPU ops' forward_tangent / backward_tangent (cuda_op.h), which read
 * the primal tensors as stored: under an f16/bf16 policy the tangent
 * arithmetic runs on the activations, weight casts and gradients the step
 * holds, the library calls in the node's compute dtype with f32
 * accumulation, where the host widens them to f32 first. Nothing here
 * synchronizes or allocates per call, so a step with tangent passes is
 * captured into a CUDA graph like any other. */
#include "cuda/cuda_exec.h"
#include "cuda/cuda_op.h"
#include "cuda/cuda_plan.h"
#include "cuda/cuda_plan_kernels.h"
#include "graph/second_order.h"

mp_status mp_device_so_alloc(mp_plan *p, size_t bytes, void **out) {
    *out = NULL;
    if (cudaMalloc(out, bytes ? bytes : 64) != cudaSuccess) {
        (void)cudaGetLastError();
        *out = NULL;
        return mp_error(MP_ERR_NOMEM, "cuda:%d: out of memory for %zu bytes of tangent buffers",
                        p->o.device.index, bytes);
    }
    MP_CUDA_TRY(cudaMemsetAsync(*out, 0, bytes ? bytes : 64, mp_cuda_plan_ctx(p)->stream), "tangent buffers");
    return MP_OK;
}

void mp_device_so_free(mp_plan *p, void *mem) {
    mp_cuda_ctx *ctx = mp_cuda_plan_ctx(p);
    if (ctx) cudaStreamSynchronize(ctx->stream);
    cudaFree(mem);
}

mp_op_call mp_device_tangent_primal(const mp_plan *p, int i, char **stage) {
    (void)stage; /* nothing staged: the GPU's tangent kernels read every dtype */
    mp_op_call c = p->nodes[i].call;
    mp_so_clear_call(&c);
    c.workspace = p->arena + p->nodes[i].ws_bwd_off; /* prepared with cfg.tangents: room for them too */
    return c;
}

mp_status mp_device_tangent_run(mp_plan *p, int i, const mp_op_call *c, bool backward) {
    const mp_cuda_op_vtable *vt = mp_cuda_op_lookup(p->g->nodes[i].desc.kind);
    mp_status (*fn)(mp_cuda_ctx *, const mp_op_call *) = !vt ? NULL
                                                         : backward ? vt->backward_tangent
                                                                    : vt->forward_tangent;
    if (!fn) return mp_so_no_tangent(p, i, backward ? "backward" : "forward");
    return fn(mp_cuda_plan_ctx(p), c);
}

mp_status mp_device_tangent_add(mp_plan *p, float *dst, const float *src, int64_t n) {
    return mp_cuda_accumulate(mp_cuda_plan_ctx(p), MP_DTYPE_F32, dst, src, n);
}

mp_status mp_device_tensor_fill(mp_plan *p, const mp_tensor *t, float value) {
    return mp_cuda_fill(mp_cuda_plan_ctx(p), t->dtype, t->data, mp_tensor_numel(t), value, NULL, 1.0);
}
