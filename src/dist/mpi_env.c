/* mpi_env.c — whether this process was started by an MPI launcher, from
 * the environment Open MPI, MPICH (PMI) and PMIx set for each rank. */
#include <limits.h>
#include <stdlib.h>

#include "dist/dist.h"
#include "io/ckpt_meta.h"

bool mp_dist_mpi_launched(int *world, int *rank) {
    static const char *const sizes[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
    static const char *const ranks[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"};
    if (!world || !rank) return false;
    for (int i = 0; i < 3; i++) {
        const char *w = getenv(sizes[i]), *r = getenv(ranks[i]);
        if (w && r) { /* whole decimal integers, 0 <= rank < world, or no launch a rank could join */
            int64_t nw, nr;
            if (!mp_meta_parse_int(w, 1, INT_MAX, &nw) || !mp_meta_parse_int(r, 0, nw - 1, &nr)) return false;
            *world = (int)nw;
            *rank = (int)nr;
            return true;
        }
    }
    return false;
}
