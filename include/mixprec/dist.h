/** @file mixprec/dist.h
 * Data-parallel training over GPUs: one rank per GPU and a communicator
 * each (NCCL), launched as threads of one process or as processes under
 * mpirun. A rank's communicator goes into mp_trainer_opts.dist. No hang: a
 * watchdog stops every rank when one fails or stops answering. */
#ifndef MIXPREC_DIST_H
#define MIXPREC_DIST_H

#include "mixprec/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The ranks of one process (thread mode; opaque). */
typedef struct mp_dist_group mp_dist_group;

/** Thread mode: `world` ranks in this process on GPUs 0..world-1; timeout_s
 * bounds any wait on another rank (<= 0: 300 s). out must not be NULL. */
MP_API mp_status mp_dist_group_create(int world, double timeout_s, mp_dist_group **out);
/** Called from rank `rank`'s own thread: its communicator on GPU `device`,
 * once every rank joined (or an error when one failed or the timeout passed).
 * out must not be NULL. */
MP_API mp_status mp_dist_group_join(mp_dist_group *g, int rank, int device, mp_dist **out);
/** After every rank's thread was joined. */
MP_API void mp_dist_group_destroy(mp_dist_group *g);
/** The rank that failed first, -1 if none. */
MP_API int mp_dist_group_failed_rank(const mp_dist_group *g);
/** Rank `rank` never started: the others stop instead of waiting for it. */
MP_API void mp_dist_group_fail(mp_dist_group *g, int rank, mp_status s);
/** Whether an MPI launcher (Open MPI, MPICH's PMI, PMIx) started this
 * process, from the first of the pairs OMPI_COMM_WORLD_SIZE/_RANK,
 * PMI_SIZE/PMI_RANK and PMIX_SIZE/PMIX_RANK whose two variables are both
 * set (a lone one is no launch). Such a pair must be whole decimal integers
 * with 0 <= rank < world: MP_OK, *launched true and *world and *rank
 * written. No pair: MP_OK, *launched false, *world and *rank untouched. A
 * malformed pair (e.g. size 2, rank 5): MP_ERR_INVALID_ARG, one line naming
 * the variable and its value, *launched false, *world and *rank untouched.
 * NULL outputs: MP_ERR_INVALID_ARG. */
MP_API mp_status mp_dist_mpi_env(bool *launched, int *world, int *rank);
/** mp_dist_mpi_env as a yes/no: true when it found a launch (written to
 * *world and *rank); false for no launch, a malformed one (which it cannot
 * tell apart: call mp_dist_mpi_env to refuse that) or a NULL output, with
 * the outputs untouched. */
MP_API bool mp_dist_mpi_launched(int *world, int *rank);
/** Process mode: this rank's communicator on the GPU of its local rank (out
 * must not be NULL). */
MP_API mp_status mp_dist_mpi_create(double timeout_s, mp_dist **out);
/** This communicator's rank. */
MP_API int mp_dist_rank(const mp_dist *d);
/** Ranks in the communicator. */
MP_API int mp_dist_world(const mp_dist *d);
/** The CUDA device of this rank. */
MP_API int mp_dist_device(const mp_dist *d);
/** This rank failed with s: the others stop instead of waiting for it. */
MP_API void mp_dist_fail(mp_dist *d, mp_status s);
/** Releases the communicator (and, for MPI, finalizes MPI). */
MP_API void mp_dist_destroy(mp_dist *d);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_DIST_H */
