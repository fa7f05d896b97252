/* mpi_bootstrap.h — the little MPI that data parallelism needs under mpirun:
 * start (rank, world size, rank within the host), broadcast the NCCL unique
 * id, finish. Implemented with Open MPI in src/mpi (built when CMake finds
 * MPI) and by mpi_none.c otherwise. The collectives themselves run on NCCL. */
#ifndef MP_DIST_MPI_BOOTSTRAP_H
#define MP_DIST_MPI_BOOTSTRAP_H

#include "core/error.h"

/* MPI_Init (once); *local_rank: this rank's index among the ranks of its host. */
mp_status mp_mpi_start(int *rank, int *world, int *local_rank);
mp_status mp_mpi_bcast_bytes(void *buf, int n, int root);
/* MPI_Finalize after a clean run (a failed rank exits without it, so that
 * mpirun stops the job). */
void mp_mpi_finish(void);

#endif
