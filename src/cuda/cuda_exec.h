/* cuda_exec.h — the CUDA backend's execution functions (cuda_plan.c,
 * plan_nonfinite.cu), which exec_backend_cuda.c collects into the table
 * graph/exec_backend.h describes: each node's GPU op, the arena and the
 * parameters in device memory, nodes run there. The rest of the CUDA
 * backend (the step, the all-reduce) calls some of them directly. */
#ifndef MP_CUDA_CUDA_EXEC_H
#define MP_CUDA_CUDA_EXEC_H

#include "graph/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Open the device, give every parameter a device master copy and gradient
 * (uploaded from the graph's host copies) and the low-precision casts that
 * low-precision nodes read. */
mp_status mp_device_plan_open(mp_plan *p);
/* Release node states, the arena, parameters and the device context. */
void mp_device_plan_close(mp_plan *p);
/* Build node i's GPU op for its shapes and dtypes; may raise node i's saved
 * bytes (its workspace and scratch are buffers of their own: the shared
 * sizes are left alone). */
mp_status mp_device_node_prepare(mp_plan *p, int i, size_t *ws, size_t *scratch, size_t *stage);
/* Device memory for the arena (zeroed), and the conv filters' KRSC copies
 * with the batch that makes them (filter_krsc_batch.h: every node is
 * prepared by then); freed by mp_device_plan_close. */
mp_status mp_device_arena_alloc(mp_plan *p, size_t bytes, char **arena);
void mp_device_arena_free(mp_plan *p);
/* Parameter k's device gradient is at `where` (a plan keeping its gradients
 * in the arena, mp_plan_grads_in_arena). */
void mp_device_grad_place(mp_plan *p, int k, void *where);
/* Point node i's parameters and their gradients at the device copies. */
void mp_device_bind_params(mp_plan *p, int i);

/* The weights as forward and backward read them: the low-precision casts
 * (unless the optimizer refreshes them), then the conv filters' KRSC copies;
 * again after an optimizer group's update when another group follows. */
mp_status mp_device_forward_begin(mp_plan *p);
mp_status mp_device_forward(mp_plan *p, int i);
/* taken/fresh as for the CPU (exec_stage.h). */
mp_status mp_device_backward(mp_plan *p, int i, const bool *taken, const bool *fresh);
/* Zero the gradients of trainable parameters no backward path reached. */
mp_status mp_device_zero_unreached_grads(mp_plan *p);
/* d(loss) = seed (a host value or a device scalar) for the backward from
 * loss node `node`. */
mp_status mp_device_set_loss_seed(mp_plan *p, int node, mp_seed seed);

mp_status mp_device_set_input(mp_plan *p, int node, const float *host_nchw, size_t n);
/* Any device tensor of the plan (float dtype, its device layout) from or to
 * a host f32 array in the graph's layout (NCHW; other ranks as they lie);
 * n must be its element count. to_host synchronizes. */
mp_status mp_device_tensor_from_host(mp_plan *p, const mp_tensor *t, const float *host_nchw, size_t n);
mp_status mp_device_tensor_to_host(const mp_plan *p, const mp_tensor *t, float *host_nchw, size_t n);
mp_status mp_device_set_labels(mp_plan *p, int node, const int32_t *host, size_t n);
mp_status mp_device_read(const mp_plan *p, int node, float *host_nchw, size_t n);
/* Whether a device tensor of the plan (an activation or a gradient) holds a
 * NaN/inf: bit-tested on the device, one flag read back (synchronizes;
 * provenance only). */
mp_status mp_device_tensor_nonfinite(const mp_plan *p, const mp_tensor *t, bool *found);
/* The device gradient of graph parameter k (NULL for buffers), of dtype
 * mp_plan_grad_dtype(p, k); the GPU step and the gradient all-reduce use it
 * too. */
void *mp_device_grad(const mp_plan *p, int k);
/* Parameters (masters, and gradients) between the device and the graph's
 * host copies: to_host after training steps (checkpoints, CPU evaluation),
 * to the device after the host copies changed (a resumed checkpoint). */
mp_status mp_device_params_sync(mp_plan *p, bool to_host);
/* Bytes of the parameters' device copies: [0] fp32 masters, [1] f16/bf16
 * casts, [2] gradients outside the arena, [3] the conv filters' KRSC copies
 * (filter_krsc_batch.h) (all 0 without a device). */
void mp_device_param_bytes(const mp_plan *p, size_t bytes[4]);
/* Wait for the plan's queued work, unless its stream is being captured into
 * a graph (then nothing): per-node timing (opts.profile) on a device. */
void mp_device_profile_sync(const mp_plan *p);

/* ---- second order (tangent_plan_cuda.c; graph/second_order.h) ---------- */
mp_status mp_device_so_alloc(mp_plan *p, size_t bytes, void **out);
void mp_device_so_free(mp_plan *p, void *mem);
mp_op_call mp_device_tangent_primal(const mp_plan *p, int i, char **stage);
mp_status mp_device_tangent_run(mp_plan *p, int i, const mp_op_call *c, bool backward);
mp_status mp_device_tangent_add(mp_plan *p, float *dst, const float *src, int64_t n);
mp_status mp_device_tensor_fill(mp_plan *p, const mp_tensor *t, float value);

#ifdef __cplusplus
}
#endif
#endif
