/* mpi_env.c — whether this process was started by an MPI launcher, from
 * the environment Open MPI, MPICH (PMI) and PMIx set for each rank. */
#include <limits.h>
#include <stdlib.h>

#include "dist/dist.h"
#include "io/ckpt_meta.h"

mp_status mp_dist_mpi_env(bool *launched, int *world, int *rank) {
    static const char *const sizes[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
    static const char *const ranks[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"};
    if (!launched || !world || !rank) return mp_error(MP_ERR_INVALID_ARG, "mp_dist_mpi_env: null output");
    *launched = false;
    for (int i = 0; i < 3; i++) {
        const char *w = getenv(sizes[i]), *r = getenv(ranks[i]);
        if (!w || !r) continue;
        /* whole decimal integers, 0 <= rank < world: anything else is no launch a rank could join */
        int64_t nw, nr;
        char q[64];
        if (!mp_meta_parse_int(w, 1, INT_MAX, &nw)) {
            mp_meta_quote(w, q, sizeof q);
            return mp_error(MP_ERR_INVALID_ARG, "the MPI launch environment: %s='%s' must be a world size in [1, %d]",
                            sizes[i], q, INT_MAX);
        }
        if (!mp_meta_parse_int(r, 0, nw - 1, &nr)) {
            mp_meta_quote(r, q, sizeof q);
            return mp_error(MP_ERR_INVALID_ARG, "the MPI launch environment: %s='%s' must be a rank in [0, %lld] "
                            "(%s=%lld)", ranks[i], q, (long long)nw - 1, sizes[i], (long long)nw);
        }
        *launched = true;
        *world = (int)nw;
        *rank = (int)nr;
        return MP_OK;
    }
    return MP_OK;
}

bool mp_dist_mpi_launched(int *world, int *rank) {
    bool launched = false;
    int w, r;
    if (!world || !rank || mp_dist_mpi_env(&launched, &w, &r) != MP_OK || !launched) return false;
    *world = w, *rank = r;
    return true;
}
