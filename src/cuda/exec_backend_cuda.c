/* exec_backend_cuda.c — the CUDA backend's execution table
 * (graph/exec_backend.h) over cuda_plan.c and plan_nonfinite.cu: each node
 * and workspace gets memory of its own in the arena (as a caching
 * allocator's), gradients may live in the arena, and batch norm kernels
 * apply the ReLU after them; tangent passes run on the GPU ops' tangents
 * (tangent_plan_cuda.c). */
#include "cuda/cuda_exec.h"
#include "graph/exec_backend.h"

/* Every add reads and writes the arena's tensors; add_cuda.cu's backward
 * skips a copy onto itself. */
static bool add_on_arena(const mp_plan *p, int i) {
    (void)p, (void)i;
    return true;
}

const mp_exec_backend mp_exec_backend_cuda = {
    .name = "cuda",
    .per_node_buffers = true,
    .grads_in_arena = true,
    .bn_dx_over_dy_safe = NULL, /* the cooperative kernels' second phase is not checked for it */
    .add_grads_alias_safe = add_on_arena,
    .open = mp_device_plan_open,
    .close = mp_device_plan_close,
    .node_prepare = mp_device_node_prepare,
    .arena_alloc = mp_device_arena_alloc,
    .arena_free = mp_device_arena_free,
    .grad_place = mp_device_grad_place,
    .bind_params = mp_device_bind_params,
    .forward_begin = mp_device_forward_begin,
    .forward = mp_device_forward,
    .backward = mp_device_backward,
    .zero_unreached_grads = mp_device_zero_unreached_grads,
    .set_loss_seed = mp_device_set_loss_seed,
    .set_input = mp_device_set_input,
    .set_labels = mp_device_set_labels,
    .read = mp_device_read,
    .tensor_nonfinite = mp_device_tensor_nonfinite,
    .param_grad = mp_device_grad,
    .params_sync = mp_device_params_sync,
    .param_bytes = mp_device_param_bytes,
    .profile_sync = mp_device_profile_sync,
    .tangent_stages_primals = false,
    .so_alloc = mp_device_so_alloc,
    .so_free = mp_device_so_free,
    .tangent_primal = mp_device_tangent_primal,
    .tangent_run = mp_device_tangent_run,
    .tangent_add = mp_device_tangent_add,
    .tensor_from_host = mp_device_tensor_from_host,
    .tensor_to_host = mp_device_tensor_to_host,
    .tensor_fill = mp_device_tensor_fill,
};
