/* exec_backend.h — where a plan's nodes run, as a table of functions chosen
 * when the plan is made: the host's (exec_host.c: the CPU kernels, oneDNN
 * primitives and the staged f32 emulation of low-precision nodes) and the
 * GPU's (cuda/exec_backend_cuda.c over cuda_plan.c). The planner and the
 * executor (plan.c, exec.c) stay one: shapes, the backward set and the
 * arena's lifetime plan are computed once, and these hooks prepare each
 * node, place the arena and the parameters, and run nodes. */
#ifndef MP_GRAPH_EXEC_BACKEND_H
#define MP_GRAPH_EXEC_BACKEND_H

#include "graph/plan.h"

struct mp_exec_backend {
    const char *name;
    /* Memory planning: each node's workspace and gradient scratch are its
     * own arena buffers, alive only while it runs (a device's caching
     * allocator behaves so), instead of one shared workspace and scratch;
     * and training plans may keep parameter gradients in the arena. */
    bool per_node_buffers;
    bool grads_in_arena;
    /* Whether batch norm i's backward, as this backend runs it, reads every
     * value of dy before it writes dx's at the same place (plan_inplace.h
     * may then give them one buffer); NULL: never. */
    bool (*bn_dx_over_dy_safe)(const mp_plan *p, int i);
    /* Whether add i's backward, as this backend runs it, hands its output
     * gradient over where an input's gradient is that memory (its copy
     * skipped), on the arena's memory itself (plan_grad_alias.h); NULL: never. */
    bool (*add_grads_alias_safe)(const mp_plan *p, int i);
    /* Set-up: the plan's device side (parameters' copies, context); node i's
     * ops for its shapes and dtypes (may raise the shared workspace *ws,
     * *scratch and *stage bytes); the arena (zeroed); where parameter k's
     * gradient lives in the arena; node i's parameter pointers. */
    mp_status (*open)(mp_plan *p);
    void (*close)(mp_plan *p);
    mp_status (*node_prepare)(mp_plan *p, int i, size_t *ws, size_t *scratch, size_t *stage);
    /* Optional, after every node's prepare: the activations' storage layouts
     * (plan_layout.h; nodes prepared again, *ws and *stage raised). NULL: NCHW. */
    mp_status (*choose_layout)(mp_plan *p, size_t *ws, size_t *stage);
    mp_status (*arena_alloc)(mp_plan *p, size_t bytes, char **arena);
    void (*arena_free)(mp_plan *p);
    void (*grad_place)(mp_plan *p, int k, void *where);
    void (*bind_params)(mp_plan *p, int i);
    /* Running: before a forward (weight casts), node i's forward and
     * backward (taken/fresh as exec_stage.h says), the gradients of
     * trainable parameters no path reached (zeroed), the seed of a backward. */
    mp_status (*forward_begin)(mp_plan *p);
    mp_status (*forward)(mp_plan *p, int i);
    mp_status (*backward)(mp_plan *p, int i, const bool *taken, const bool *fresh);
    mp_status (*zero_unreached_grads)(mp_plan *p);
    mp_status (*set_loss_seed)(mp_plan *p, int node, mp_seed seed);
    /* Data in and out (host arrays, f32 NCHW or int32 labels). */
    mp_status (*set_input)(mp_plan *p, int node, const float *data, size_t n);
    mp_status (*set_labels)(mp_plan *p, int node, const int32_t *labels, size_t n);
    mp_status (*read)(const mp_plan *p, int node, float *dst, size_t n);
    /* Provenance: whether tensor t (an activation or gradient) holds a
     * NaN/inf; parameter k's gradient as the backend holds it. */
    mp_status (*tensor_nonfinite)(const mp_plan *p, const mp_tensor *t, bool *found);
    void *(*param_grad)(const mp_plan *p, int k);
    /* Parameters (masters, gradients) to or from the graph's host copies. */
    mp_status (*params_sync)(mp_plan *p, bool to_host);
    /* Bytes of the parameters' device copies: [0] masters, [1] f16/bf16
     * casts, [2] gradients outside the arena, [3] the convolutions' KRSC
     * filter copies. */
    void (*param_bytes)(const mp_plan *p, size_t bytes[4]);
    /* Wait for queued work before reading a clock (opts.profile). */
    void (*profile_sync)(const mp_plan *p);

    /* ---- second order (graph/second_order.h) ---- */
    /* The host stages every primal tensor of a tangent call in f32 (its
     * tangent kernels are the f32 ones); a GPU's read them as stored. */
    bool tangent_stages_primals;
    /* Zeroed memory for the tangent buffers (f32; device memory on a GPU). */
    mp_status (*so_alloc)(mp_plan *p, size_t bytes, void **out);
    void (*so_free)(mp_plan *p, void *mem);
    /* Node i's call with its primal tensors as its tangent kernels read
     * them, staged at *stage where the backend stages (advanced past what
     * it used); tangent and gradient fields cleared. */
    mp_op_call (*tangent_primal)(const mp_plan *p, int i, char **stage);
    /* Node i's forward_tangent or (backward) backward_tangent on c; an op
     * without one is an error naming it (mp_so_no_tangent). */
    mp_status (*tangent_run)(mp_plan *p, int i, const mp_op_call *c, bool backward);
    /* dst += src over n f32 values of the backend's memory. */
    mp_status (*tangent_add)(mp_plan *p, float *dst, const float *src, int64_t n);
    /* A tensor of the backend's (any float dtype, its layout) from or to a
     * host f32 array in the graph's layout (NCHW); every element = value. */
    mp_status (*tensor_from_host)(mp_plan *p, const mp_tensor *t, const float *src, size_t n);
    mp_status (*tensor_to_host)(const mp_plan *p, const mp_tensor *t, float *dst, size_t n);
    mp_status (*tensor_fill)(mp_plan *p, const mp_tensor *t, float value);
};

extern const mp_exec_backend mp_exec_backend_host;
/* The backend for a device (the host's for the CPU; the CUDA backend's when
 * this build has it, else an error naming the device). */
mp_status mp_exec_backend_for(mp_device device, const mp_exec_backend **out);

#endif
