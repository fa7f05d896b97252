/* second_order.h — the inside of a second-order plan (opts.second_order,
 * mixprec/penalty.h): tangent buffers beside the arena, the nodes the
 * input-gradient backward visits, and what has run since the last forward
 * (the tangent pass must follow the forward and backward it differentiates).
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
    size_t bytes;        /* all of the above */
    /* what ran since the last forward */
    bool forwarded;      /* a forward ran */
    bool tangent_forwarded; /* mp_plan_forward_tangent ran after it */
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

/* tangent_exec.c: f32 staging of node i's primal tensors for a tangent call. */
mp_op_call mp_so_primal_f32(const mp_plan *p, int i, char **cur);

#endif
