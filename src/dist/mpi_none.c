/* mpi_none.c — mpi_bootstrap.h in a build without MPI: mpirun launches are
 * refused with the way to get them. */
#include "dist/mpi_bootstrap.h"

static mp_status no_mpi(void) {
    return mp_error(MP_ERR_UNSUPPORTED, "started by mpirun, but this build of mixprec has no MPI support (install "
                                        "libopenmpi-dev, or scripts/setup.sh, and rebuild)");
}

mp_status mp_mpi_start(int *rank, int *world, int *local_rank) {
    *rank = 0, *world = 1, *local_rank = 0;
    return no_mpi();
}

mp_status mp_mpi_bcast_bytes(void *buf, int n, int root) {
    (void)buf, (void)n, (void)root;
    return no_mpi();
}

void mp_mpi_finish(void) {}
