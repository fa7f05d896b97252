/* filter_krsc_batch.h — every conv2d filter of a GPU plan permuted to the
 * KRSC layout cuDNN's NHWC convolutions read, in one kernel launch per step.
 *
 * Used where a plan keeps conv2d filters in the graph's (K, C, R, S) order
 * on the device: second-order plans, filters a non-conv2d node shares, and
 * MIXPREC_CONV_WEIGHTS_KRSC=0 (every other filter lives in KRSC there,
 * cuda_plan.c: choose_krsc, and needs no copy). Why: then each convolution's forward
 * and backward used to permute its own filter into the workspace: two small
 * kernels per layer and step (39 launches for resnet18, ~0.16 ms of a 6 ms
 * step on an H200, bench notes v0.20). The plan instead keeps one KRSC copy
 * per conv2d node in a slab, refreshed by a single launch at the start of
 * every forward pass (mp_device_forward_begin, after the weights' casts, and
 * again after an optimizer group's update when another group follows), and
 * hands it to the node in mp_op_call.weight_krsc; forward and backward read
 * it as it is. */
#ifndef MP_CUDA_FILTER_KRSC_BATCH_H
#define MP_CUDA_FILTER_KRSC_BATCH_H

#include "cuda/cuda_ctx.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest rs (kernel height x width) a batch takes; a convolution with
 * a larger kernel permutes its own filter (mp_op_call.weight_krsc NULL). */
#define MP_KRSC_BATCH_MAX_RS 4096

/* One filter: src (k, c, rs) in sdt -> dst (k, rs, c) in ddt. */
typedef struct {
    const void *src;
    void *dst;
    int k, c, rs;
    mp_dtype sdt, ddt;
} mp_krsc_job;

/* One block's share of a job, a tile of at most 4096 elements: output
 * channels k0 .. k0 + nk - 1, input channels c0 .. c0 + nc - 1 of each
 * (nk > 1 only where nc is all of c). Made by mp_krsc_batch_build. */
typedef struct {
    int job, k0, nk, c0, nc;
} mp_krsc_unit;

typedef struct {
    mp_krsc_job *jobs;    /* device copy of the job list (NULL when empty) */
    mp_krsc_unit *units;  /* device, in the jobs' allocation: one thread block each */
    int n, n_units;
} mp_krsc_batch;

/* Cuts the n jobs into tiles and copies both lists to the device;
 * synchronizes ctx->stream (set-up time only). Dtypes f32, f16, bf16. */
mp_status mp_krsc_batch_build(mp_cuda_ctx *ctx, const mp_krsc_job *jobs, int n, mp_krsc_batch *out, const char *what);
/* Runs every job in one launch on ctx->stream (nothing when empty). */
mp_status mp_krsc_batch_run(mp_cuda_ctx *ctx, const mp_krsc_batch *b);
void mp_krsc_batch_free(mp_krsc_batch *b);

#ifdef __cplusplus
}
#endif
#endif
