/* nccl_dist.h — what the NCCL side of data parallelism shares inside
 * src/nccl: the communicator of a rank and the one-line NCCL error. */
#ifndef MP_NCCL_NCCL_DIST_H
#define MP_NCCL_NCCL_DIST_H

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "dist/dist.h"
#include "mixprec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The rank's communicator (NULL after an abort). */
ncclComm_t mp_dist_comm(const mp_dist *d);
/* MP_OK, or "<what>: <call> failed: <NCCL's message>". */
mp_status mp_nccl_check(ncclResult_t r, const char *call, const char *what);
#define MP_NCCL_TRY(call, what) MP_TRY(mp_nccl_check((call), #call, (what)))
/* After a collective call on d's (non-blocking) communicator: MP_OK once
 * it is queued on its stream, or the error. */
mp_status mp_nccl_enqueued(const mp_dist *d, ncclResult_t r, const char *call, const char *what);
#define MP_NCCL_QUEUE(d, call, what) MP_TRY(mp_nccl_enqueued((d), (call), #call, (what)))
/* ncclFloat32 / ncclFloat16 / ncclBfloat16 for a float dtype. */
ncclDataType_t mp_nccl_dtype(mp_dtype dt);

#ifdef __cplusplus
}
#endif
#endif
