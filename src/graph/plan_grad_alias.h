/* plan_grad_alias.h — a residual add's backward handing its output
 * gradient to its inputs without copying it: their gradients are the add's
 * output gradient's memory.
 *
 * Why: an add's backward is d_in = d_out for both inputs. Run as copies it
 * moves the full gradient tensor twice per add (on an H100, wrn-28-10 at
 * batch 128: 24 device copies, 0.369 ms a step; shared, the step went
 * 11.64 -> 11.27 ms; bench/NOTES.md v0.57). A pre-activation
 * ResNet's adds are not fused into a batch norm (plan_fuse.h fuses a batch
 * norm -> add (-> ReLU) tail), so every block pays them.
 *
 * Where: training plans (not with second_order, input_grad,
 * repeat_backward or several losses: each reads gradients later), an add
 * that runs (not fused away) whose backward the backend runs on the
 * arena's memory as it is (exec_backend.h: add_grads_alias_safe), whose
 * output gradient has a buffer of its own (not a CPU batch norm's dy,
 * plan_inplace.h) that nothing reads after the add's backward, and an
 * input whose producer is not fused away or fused with another node nor a
 * batch norm writing its dx over its dy, of the add's storage dtype and
 * size, and whose gradient the add writes first (no consumer after the add
 * in the forward writes it before).
 * Both inputs share the memory where no gradient sharing it is modified (a
 * later consumer adding its part, in place or through scratch) while
 * another that shares it is still to be read: in a pre-activation block
 * add(conv2(a), x), conv2's gradient is read by conv2's backward before the
 * block's first batch norm adds its part to x's; where that does not hold,
 * one input shares it and the other is copied. Chains of adds (a stage of
 * blocks) share one buffer. Not when told not to
 * (mp_plan_opts.no_add_grad_alias, MIXPREC_ADD_GRAD_ALIAS=0). The same
 * values, bit for bit. */
#ifndef MP_GRAPH_PLAN_GRAD_ALIAS_H
#define MP_GRAPH_PLAN_GRAD_ALIAS_H

#include "graph/arena_plan.h"
#include "graph/plan.h"

/* After mp_plan_inplace_buffers: mark the adds (pn->grad_alias: bit k for
 * input k), give each shared input gradient no buffer of its own and the
 * add's output gradient the union of their lifetimes. */
void mp_plan_grad_alias_buffers(mp_plan *p, mp_arena_buf *b);
/* After mp_plan_inplace_offsets: point each shared input gradient at its
 * add's output gradient (chains resolved). */
void mp_plan_grad_alias_offsets(mp_plan *p);

#endif
