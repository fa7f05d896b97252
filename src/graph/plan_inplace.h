/* plan_inplace.h — a CPU batch norm's backward writing its input gradient
 * (dx) over its output gradient (dy), in one arena buffer.
 *
 * Why: in a training step batch norm's CPU passes stream from memory, and a
 * pass writing a fresh buffer first reads each line it writes (read for
 * ownership). Written over dy, dx goes into lines the pass has just read:
 * 4-16 % off the backward, cold (bench/NOTES.md v0.50).
 *
 * Where: a training plan's batchnorm2d whose backward, as its backend runs
 * it, reads each value of dy before it writes dx's (exec_backend.h's
 * bn_dx_over_dy_safe: on the CPU, natively on the channels-last kernels;
 * not on a GPU), whose input has no
 * other consumer (its gradient is then written, not added to), with no
 * residual add or average pool fused in (a residual's gradient is written
 * in the same pass; a pool's dy is smaller), dy and dx of one dtype and
 * size, and dy read by nothing after the batch norm's backward. Not with
 * second_order, input_grad or repeat_backward (each reads gradients
 * later), nor when told not to (mp_plan_opts.no_bn_dx_over_dy,
 * MIXPREC_BN_DX_OVER_DY=0). The same values, bit for bit. */
#ifndef MP_GRAPH_PLAN_INPLACE_H
#define MP_GRAPH_PLAN_INPLACE_H

#include "graph/arena_plan.h"
#include "graph/plan.h"

/* After mp_plan_fuse_buffers: mark the batch norms (pn->dx_over_dy) and
 * give each one's dx no buffer of its own, its dy's lasting as long. */
void mp_plan_inplace_buffers(mp_plan *p, mp_arena_buf *b);
/* After mp_plan_fuse_offsets: point each such dx at its dy. */
void mp_plan_inplace_offsets(mp_plan *p);
/* The node whose gradient buffer holds batch norm i's dy: its fused ReLU
 * (the chain's tail, which stores the value), else i itself. */
int mp_plan_bn_dy_node(const mp_plan *p, int i);

#endif
