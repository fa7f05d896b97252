/* grad_allreduce.h — data parallelism's gradient exchange on the GPU: the
 * trainable fp32 gradients of a CUDA training plan, grouped in buckets of
 * about bucket_bytes (in backward order), are averaged over the ranks with
 * NCCL all-reduce in comm_dtype (f32, or f16/bf16 — the optimizer then
 * takes them back into fp32). Each bucket starts on a separate stream as
 * soon as backward has finished its last gradient, so communication
 * overlaps the rest of the backward pass; mp_grad_allreduce_finish makes
 * the plan's stream wait for all of it. Everything is stream-ordered and
 * can be captured in a CUDA graph. This header includes no CUDA header. */
#ifndef MP_DIST_GRAD_ALLREDUCE_H
#define MP_DIST_GRAD_ALLREDUCE_H

#include "dist/dist.h"
#include "graph/plan.h"

typedef struct mp_grad_allreduce mp_grad_allreduce;

/* 4 MiB of wire bytes: on two H200s (NVLink) resnet18 amp-bf16 at batch 512
 * per GPU scales 1.50x with one 22 MB bucket (no overlap) and 1.91x with
 * buckets of 2 or 8 MiB (bench/NOTES.md). */
#define MP_DEFAULT_BUCKET_BYTES ((size_t)4 << 20)

/* Installs p's grad_ready hook. bucket_bytes 0 -> MP_DEFAULT_BUCKET_BYTES. */
mp_status mp_grad_allreduce_create(mp_dist *d, mp_plan *p, mp_dtype comm_dtype, size_t bucket_bytes,
                                   mp_grad_allreduce **out);
/* After the backward pass: queue the buckets not started yet, then make the
 * plan's stream wait for every bucket. */
mp_status mp_grad_allreduce_finish(mp_grad_allreduce *a);
int mp_grad_allreduce_buckets(const mp_grad_allreduce *a);
void mp_grad_allreduce_destroy(mp_grad_allreduce *a);

/* Rank 0's parameters and buffers (fp32 masters, BN statistics) to every
 * rank, on the plan's stream: all ranks start from the same weights. */
mp_status mp_dist_broadcast_params(mp_dist *d, mp_plan *p);
/* flags[i] = max over ranks of flags[i] for n device ints (the scaler's
 * found-inf flags), on the plan's stream: every rank skips the same steps. */
mp_status mp_dist_allreduce_flags(mp_dist *d, mp_plan *p, int *flags_dev, int n);

#endif
