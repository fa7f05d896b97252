/* mpi_bootstrap.c — mpi_bootstrap.h over MPI (Open MPI from Debian). */
#include "dist/mpi_bootstrap.h"

#include <mpi.h>

static int started;

static mp_status check(int rc, const char *call) {
    if (rc == MPI_SUCCESS) return MP_OK;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return mp_error(MP_ERR_INTERNAL, "mpi: %s failed: %s", call, msg);
}

mp_status mp_mpi_start(int *rank, int *world, int *local_rank) {
    int init = 0;
    MPI_Initialized(&init);
    if (!init) MP_TRY(check(MPI_Init(NULL, NULL), "MPI_Init"));
    started = 1;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MP_TRY(check(MPI_Comm_rank(MPI_COMM_WORLD, rank), "MPI_Comm_rank"));
    MP_TRY(check(MPI_Comm_size(MPI_COMM_WORLD, world), "MPI_Comm_size"));
    MPI_Comm host;
    MP_TRY(check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, *rank, MPI_INFO_NULL, &host),
                 "MPI_Comm_split_type"));
    mp_status s = check(MPI_Comm_rank(host, local_rank), "MPI_Comm_rank (host)");
    MPI_Comm_free(&host);
    return s;
}

mp_status mp_mpi_bcast_bytes(void *buf, int n, int root) {
    return check(MPI_Bcast(buf, n, MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
}

void mp_mpi_finish(void) {
    int done = 0;
    MPI_Finalized(&done);
    if (started && !done) MPI_Finalize();
}
