/* mpi_env.c — whether this process was started by an MPI launcher, from
 * the environment Open MPI, MPICH (PMI) and PMIx set for each rank. */
#include <stdlib.h>

#include "dist/dist.h"

bool mp_dist_mpi_launched(int *world, int *rank) {
    static const char *const sizes[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
    static const char *const ranks[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"};
    for (int i = 0; i < 3; i++) {
        const char *w = getenv(sizes[i]), *r = getenv(ranks[i]);
        if (w && r) {
            *world = atoi(w);
            *rank = atoi(r);
            return *world >= 1;
        }
    }
    return false;
}
