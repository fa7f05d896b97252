/* plan_fuse.h — fusing a ReLU into the batchnorm2d that feeds it, on GPU
 * and CPU plans: the batch norm applies max(0, .) as it stores (forward) and
 * masks its incoming gradient where the ReLU's output is 0 (backward: read
 * from that output, or on the CPU's channels-last kernels computed again
 * from the batch norm's input, batchnorm2d_nhwc_kernels.inc); the ReLU
 * node runs nothing and shares the batch norm's output and gradient memory.
 * The same values as the two nodes apart (rounding keeps the sign, and NaN
 * passes as in relu), two elementwise passes fewer each way. On the CPU the
 * op call carries it (mp_op_call.relu_after) to the batch norm's kernels,
 * staged (emulated) ones included. MIXPREC_NO_FUSION=1 turns it off (for
 * comparisons).
 *
 * Plans also fuse a batch norm -> residual add -> ReLU (a ResNet block's
 * tail), and a batch norm -> residual add with no ReLU after it (a
 * MobileNetV2 block's), unless told not to (mp_plan_opts.no_bn_add_relu_fusion,
 * MIXPREC_FUSE_BN_ADD_RELU=0, or no fusion at all):
 * the batch norm stores relu(bn(x) + r) (or bn(x) + r), r the add's other
 * input (its mp_op_call.resid), and its backward masks dy with that output
 * (with the ReLU), writes the add's gradient to r (d_resid) and its own dx in
 * the same pass; the add and the ReLU run nothing. Without the ReLU the
 * add's gradient is the batch norm's dy and the add's output its output, which
 * mp_plan_read reads. Where r's producer has other consumers none may run
 * between the batch norm and the add (the batch norm's backward then writes
 * r's gradient, or adds to what consumers after the add wrote, before those
 * before it add theirs); with two batch norms feeding the add (a projection shortcut)
 * the later one takes the other's output as r. On CPU plans the three must
 * run natively on the channels-last vector kernels (f32, or bf16 storage);
 * the host backend undoes the others once the layouts are chosen
 * (mp_plan_unfuse_bn_add). Where the chain's output holds a NaN/inf, the
 * forward's overflow replay runs the batch norm alone and then the add
 * (graph/exec.c) to name the op an unfused plan names: a sum that overflows
 * where bn(x) and r do not is the add's (not on plans whose batch norms
 * gather statistics across ranks, sync_bn: there the batch norm's). A -inf
 * of bn(x) or of the sum that the ReLU turns into 0, with nothing else
 * non-finite in the chain's output, is not seen (it leaves the loss finite
 * either way; MIXPREC_FUSE_BN_ADD_RELU=0 keeps the three apart to trace it).
 *
 * GPU training plans may go one step further where a fused batch norm +
 * ReLU's output feeds only a 3x3 depthwise conv2d (MobileNet's expansion
 * into its filtering layer), when asked (mp_plan_opts.bn_dw_fusion,
 * MIXPREC_FUSE_BN_DW=1; not under MIXPREC_BN_FAST=0 or no fusion at all;
 * off by default: measured slower, bench/NOTES.md v0.29): the
 * conv's forward and backward-filter read the batch norm's input and apply
 * its coefficients and the ReLU as they load it (cuda/conv_depthwise.h:
 * the same bits the batch norm would store), the batch norm computes its
 * statistics but writes no output (mp_op_call.skip_out), and its backward
 * recomputes the ReLU's mask from its input as it does already. The output
 * keeps its memory: it is written while an overflow is traced or numerics
 * are collected (mp_plan_fused_output_stored), which read it. Both pn get
 * dw_fused (each other's index); the conv's prepare may decline (its
 * kernels do not take the shape or dtype: mp_plan_unfuse_bn_dw).
 *
 * Training plans likewise fuse a batch norm + ReLU whose output only a
 * k x k average pool of stride k and no padding reads (cnn10's stage ends;
 * on CPU plans 2x2 pools, where both nodes run natively on the channels-last
 * vector kernels in f32 or bf16: the host backend undoes the others once the
 * layouts are chosen), unless told not to (mp_plan_opts.no_bn_pool_fusion,
 * MIXPREC_FUSE_BN_POOL=0, no fusion at all; on GPUs also MIXPREC_BN_FAST=0
 * and MIXPREC_CUDNN_BN=1): the pool's
 * forward applies the batch norm's coefficients and the ReLU to its input
 * as it loads it (the values the batch norm would store), the batch norm
 * writes no output
 * (skip_out), the pool's backward runs nothing, and the batch norm's
 * backward reads the pool's output gradient spread over each window
 * (mp_op_call.pool_dy: what the pool's backward would have written, bit for
 * bit) with the ReLU's mask recomputed from its input. Per step that skips
 * writing and reading the full-size activation and its gradient once each
 * way. While an overflow is traced (a forward or a checked backward
 * replayed) or numerics are collected, the batch norm writes its output
 * and the pool's backward its input gradient, and the batch norm's backward
 * reads that (mp_plan_fused_output_stored), for the checks to read (the
 * pool's forward still applies the batch norm itself: the same values).
 * Both pn get
 * pool_fused (each other's index); where the batch norm's fast kernels do
 * not take its shape the device undoes it (mp_plan_unfuse_bn_pool). */
#ifndef MP_GRAPH_PLAN_FUSE_H
#define MP_GRAPH_PLAN_FUSE_H

#include "graph/arena_plan.h"
#include "graph/plan.h"

/* Mark the pairs (pn->relu_fused on the batch norm, pn->fused_away on the
 * ReLU); after mark_backward, before the nodes are prepared; the
 * executor then skips the ReLU's forward and backward on every device
 * (mp_plan_fuse_before_forward / _backward), as it does a fused add's. */
void mp_plan_fuse_bn_relu(mp_plan *p);
/* The arena buffers of the plan's 3 per node (out, grad, saved): the fused
 * nodes share the batch norm's output buffer (with a ReLU alive until the
 * batch norm's backward, which may read it for the mask) and the last one's
 * (the ReLU's, or a ReLU-less add's) gradient buffer; an average pool with
 * a batch norm fused in keeps its output gradient until that batch norm's
 * backward, which reads it. */
void mp_plan_fuse_buffers(const mp_plan *p, mp_arena_buf *b);
/* After placement: point the shared tensors at one another's offsets. */
void mp_plan_fuse_offsets(mp_plan *p);
/* Undo the batch norm + depthwise conv fusion of conv k (its prepare
 * declined it): the batch norm stores its output again (the device then
 * prepares it again, as an unfused one). */
void mp_plan_unfuse_bn_dw(mp_plan *p, int k);
/* Undo the residual add (+ ReLU) fusion of batch norm i: the three run
 * apart (before the plan's memory is laid out). */
void mp_plan_unfuse_bn_add(mp_plan *p, int i);
/* Undo the batch norm + average pool fusion of batch norm i. */
void mp_plan_unfuse_bn_pool(mp_plan *p, int i);
/* Whether a batch norm fused into a depthwise conv or average pool stores
 * its output in this forward (and the pool writes its input gradient in
 * this backward): while numerics are observed or an overflow is replayed. */
bool mp_plan_fused_output_stored(const mp_plan *p);
/* Before node i's forward, on every device: whether it runs at all (a
 * fused-away ReLU or add does not: its batch norm computes it); a batch
 * norm fused into the depthwise conv or average pool reading it stores its
 * output only where mp_plan_fused_output_stored says so (its call's
 * skip_out). */
bool mp_plan_fuse_before_forward(mp_plan *p, int i);
/* Before node i's backward, its gradients bound (taken: which input
 * gradients hold a value already), on every device: whether it runs at all.
 * A fused-away node does not (a fused add binds the residual's gradient to
 * its batch norm's call first: d_resid, d_resid_add); nor does an average
 * pool with a batch norm fused in, unless its input gradient is stored this
 * backward; that batch norm then reads the pool's output gradient (its
 * call's pool_dy and pool_k, set before each of its backwards; pool_dy
 * empty when it reads its own dy, and left set between steps otherwise). */
bool mp_plan_fuse_before_backward(mp_plan *p, int i, const bool *taken);
/* The batch norm that runs fused-away node i (a ReLU, or an add), or -1. */
int mp_plan_fused_producer(const mp_plan *p, int i);
/* Whether fused-away node i's value is in its producer's tensors (output
 * and output gradient): when i ends the chain (the ReLU, or an add with no
 * ReLU after it). An add between a batch norm and its fused ReLU (GPU plans)
 * is never stored. */
bool mp_plan_fused_value_stored(const mp_plan *p, int i);
/* Batch norm i with an add fused in: the add's input index of the residual
 * (0 or 1), else -1. */
int mp_plan_fused_resid(const mp_plan *p, int i);

#endif
