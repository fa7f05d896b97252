/* second_order.h — the inside of a second-order plan (opts.second_order,
 * mixprec/penalty.h): tangent buffers beside the arena, the nodes the
 * input-gradient backward visits, and what has run since the last forward
 * (the tangent pass must follow the forward and backward it differentiates).
 *
 * The buffers are f32 in the backend's memory and layout (host arrays, or
 * device memory with 4-D tensors channels-last on a GPU); the exec
 * backend's second-order hooks allocate them and run the tangent calls.
 *
 * Forward-over-reverse, one mechanism: no backward nodes are added to the
 * graph; each op has a forward_tangent and a backward_tangent beside its
 * forward and backward (ops/op.h), and these traversals call them in node
 * order and in reverse node order, accumulating tangents where a tensor has
 * several consumers exactly as run_backward accumulates gradients. */
#ifndef MP_GRAPH_SECOND_ORDER_H
#define MP_GRAPH_SECOND_ORDER_H

#include "graph/plan.h"

typedef struct mp_plan_so {
    float **t_out;       /* per node: f32 tangent of its output (NULL: labels) */
    float **t_dout;      /* per node: f32 tangent of its output gradient */
    bool *t_zero;        /* per node: its output's tangent is zero in this pass */
    bool *t_dwritten;    /* per node: t_dout holds a value in this tangent backward */
    float **t_param;     /* per graph parameter: f32 direction (trainable ones) */
    bool *t_param_set;   /* per graph parameter: the direction is not zero */
    float **t_dparam;    /* per graph parameter: f32 tangent of its gradient */
    bool *t_dparam_written;
    bool input_dir_set;  /* the direction on opts.input_grad_wrt is not zero */
    bool *root_reach;    /* per node: visited by the input-gradient backward */
    char *stage;         /* f32 widening and accumulation scratch of one tangent call */
    size_t stage_bytes;
    void *slab;          /* the one allocation (exec backend's so_alloc) every buffer above lies in */
    size_t bytes;        /* its size */
    /* what ran since the last forward */
    bool forwarded;      /* a forward ran */
    bool tangent_forwarded; /* mp_plan_forward_tangent ran after it */
    bool tangent_backwarded; /* mp_plan_backward_tangent completed after it */
    int last_root;       /* the root of the last backward, -1: none since the forward */
    bool last_input_grad; /* ...which was mp_plan_backward_input_grad */
} mp_plan_so;

/* At plan creation, after mark_backward: checks the second-order options,
 * computes root_reach and marks its nodes (and input_grad_wrt) in_backward. */
mp_status mp_so_mark(mp_plan *p);
/* After the arena is bound: the tangent buffers. */
mp_status mp_so_create(mp_plan *p);
void mp_so_free(mp_plan *p);

/* Bookkeeping hooks from exec.c. */
void mp_so_note_forward(mp_plan *p);
void mp_so_note_backward(mp_plan *p, int root);

/* The backward from opts.input_grad_of down to opts.input_grad_wrt over
 * root_reach, its output gradient already seeded (mp_plan_backward_input_grad
 * seeds it from the host, a GPU step from the device's loss scale). */
mp_status mp_so_input_grad_backward(mp_plan *p);

/* The next f32 tensor of shape s at *cur (64-byte steps). */
static inline float *mp_so_take(char **cur, const mp_shape *s) {
    float *f = (float *)*cur;
    *cur += MP_ALIGN64((size_t)mp_shape_numel(s) * sizeof(float));
    return f;
}

/* tangent_exec.c: the error for node i's op without a `which` ("forward",
 * "backward") tangent on this plan's device. */
mp_status mp_so_no_tangent(const mp_plan *p, int i, const char *which);

/* tangent_host.c: the host's second-order hooks (exec_backend.h). */
void mp_so_clear_call(mp_op_call *c);
mp_op_call mp_so_primal_f32(const mp_plan *p, int i, char **cur);
mp_status mp_so_host_alloc(mp_plan *p, size_t bytes, void **out);
void mp_so_host_free(mp_plan *p, void *mem);
mp_status mp_so_host_run(mp_plan *p, int i, const mp_op_call *c, bool backward);
mp_status mp_so_host_add(mp_plan *p, float *dst, const float *src, int64_t n);
mp_status mp_so_host_from(mp_plan *p, const mp_tensor *t, const float *src, size_t n);
mp_status mp_so_host_to(const mp_plan *p, const mp_tensor *t, float *dst, size_t n);
mp_status mp_so_host_fill(mp_plan *p, const mp_tensor *t, float value);

#endif
