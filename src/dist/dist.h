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

/* mp_dist, mp_dist_group and their creation, rank queries, mp_dist_fail and
 * mp_dist_destroy are public (mixprec/dist.h); the rest is the library's. */

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
/* recv (world x n floats, rank order) = every rank's send (n floats), on
 * `stream` (a cudaStream_t), inside or outside a CUDA graph capture. */
mp_status mp_dist_allgather_f32(mp_dist *d, const float *send, float *recv, size_t n, void *stream);

#ifdef __cplusplus
}
#endif

#endif
