/* dist.h — data-parallel training's communicator: one rank per GPU, NCCL for
 * the collectives, launched either as threads of one process (`--gpus N`,
 * an mp_dist_group shares the NCCL unique id) or as processes under mpirun
 * (the unique id goes out through MPI). This header includes no CUDA or
 * NCCL header; the implementation is src/nccl (built with CUDA and NCCL) and
 * dist_none.c otherwise (every call reports the missing support).
 *
 * No hang: communicators are created non-blocking and polled; a watchdog
 * thread aborts every communicator of the process when a rank fails, when
 * NCCL reports an asynchronous error, or when a rank has waited on the GPU
 * longer than the timeout (a peer that died), so blocked ranks return an
 * error instead of waiting forever. */
#ifndef MP_DIST_DIST_H
#define MP_DIST_DIST_H

#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"

#ifdef __cplusplus
extern "C" { /* the CUDA ops (synchronized BatchNorm) call in */
#endif

typedef struct mp_dist mp_dist;             /* one rank */
typedef struct mp_dist_group mp_dist_group; /* the ranks of one process (thread mode) */

/* Thread mode: `world` ranks in this process on GPUs 0..world-1; timeout_s
 * bounds any wait on another rank (<= 0: 300 s). */
mp_status mp_dist_group_create(int world, double timeout_s, mp_dist_group **out);
/* Called by rank `rank`'s own thread: opens its communicator on GPU
 * `device` (returns once every rank joined, or with an error when one
 * failed or the timeout passed). */
mp_status mp_dist_group_join(mp_dist_group *g, int rank, int device, mp_dist **out);
/* After every rank's thread finished (joined threads). */
void mp_dist_group_destroy(mp_dist_group *g);
/* The rank that failed first in the group, -1 if none. */
int mp_dist_group_failed_rank(const mp_dist_group *g);
/* Rank `rank` of the group never started (e.g. its thread could not be
 * created): the ranks already joining stop instead of waiting for it. */
void mp_dist_group_fail(mp_dist_group *g, int rank, mp_status s);

/* Process mode (mpirun): true when this process was started by an MPI
 * launcher (Open MPI / PMIx environment); *world and *rank from it. */
bool mp_dist_mpi_launched(int *world, int *rank);
/* MPI_Init, the unique id from rank 0, this rank's communicator on the GPU
 * of its local rank. */
mp_status mp_dist_mpi_create(double timeout_s, mp_dist **out);

int mp_dist_rank(const mp_dist *d);
int mp_dist_world(const mp_dist *d);
int mp_dist_device(const mp_dist *d);
/* This rank failed with `s`: the others are stopped (communicators
 * aborted) instead of waiting for it. */
void mp_dist_fail(mp_dist *d, mp_status s);
/* MP_OK, or the error that stopped the group (another rank failed, a NCCL
 * error, the timeout). */
mp_status mp_dist_check(mp_dist *d);
/* Around host waits on the GPU (reading the loss, syncing parameters): the
 * watchdog aborts the group when one lasts longer than the timeout. */
void mp_dist_wait_begin(mp_dist *d);
void mp_dist_wait_end(mp_dist *d);
/* Around queueing GPU work that uses the communicator: an abort waits for
 * it to finish, and no work is queued after an abort (MP_ERR_... then). */
mp_status mp_dist_enqueue_begin(mp_dist *d);
void mp_dist_enqueue_end(mp_dist *d);
/* Releases the communicator (and, for MPI, finalizes MPI). */
void mp_dist_destroy(mp_dist *d);
/* recv (world x n floats, rank order) = every rank's send (n floats), on
 * `stream` (a cudaStream_t), inside or outside a CUDA graph capture. */
mp_status mp_dist_allgather_f32(mp_dist *d, const float *send, float *recv, size_t n, void *stream);

#ifdef __cplusplus
}
#endif

#endif
