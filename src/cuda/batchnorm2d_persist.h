/* batchnorm2d_persist.h — a training batch norm's forward, or its backward,
 * as ONE cooperative kernel over batchnorm2d_fast.h's rows (same dtype,
 * channel and alignment rules): every block reduces its chunk, a grid-wide
 * barrier, every block finalizes a share of the channels (sums in a fixed
 * order: deterministic), a second barrier, then every block makes its
 * chunk's output from its last rows back (still in L2). One launch instead
 * of three: at small layers the launches and their tails, not the bytes,
 * are the cost; at large ones the three kernels' wider grids stream faster
 * (batchnorm2d_pick.h times both per layer).
 * All blocks must be resident at once (cooperative launch: it is refused,
 * not hung, where they cannot be); a pass takes one block per SM. For batchnorm2d_cuda.cu; C-callable for the tests. */
#ifndef MP_CUDA_BATCHNORM2D_PERSIST_H
#define MP_CUDA_BATCHNORM2D_PERSIST_H

#include <cuda_runtime.h>

#include "cuda/batchnorm2d_fast.h"
#include "cuda/batchnorm2d_finalize.h"

#ifdef __cplusplus
extern "C" {
#endif

/* True where the current device launches cooperative kernels. */
bool mp_bn_persist_supported(void);

/* Training forward of M rows of C channels: the per-chunk statistics into
 * pmean/pm2 (scratch of max_blocks * C floats each), the merged ones to
 * out (batchnorm2d_finalize.h), then y = bn(x) (relu: relu(bn(x)); resid
 * non-NULL: round(bn(x)) + resid, under relu if relu) as mp_bn_fast_apply; y NULL: no
 * output (the coefficients only, for a consumer that applies them). At most
 * max_blocks blocks, and at most what sm_count SMs hold at once.
 * cudaErrorCooperativeLaunchTooLarge: none fit (take the three kernels). */
cudaError_t mp_bn_persist_forward(cudaStream_t st, int sm_count, mp_dtype dt, const void *x, const void *resid,
                                  void *y, long long M, int C, int max_blocks, float *pmean, float *pm2,
                                  mp_bn_fwd_out out, bool relu);

/* Training backward: the sums of the masked dy (mask as mp_bn_fast_bwd_reduce,
 * with out.save_mean as mu) into psdy/psdyx (scratch as above), the merged
 * ones to out, then dx and the residual's gradient as mp_bn_fast_dx (where
 * dx or dr is non-NULL). Blocks and refusal as the forward. */
cudaError_t mp_bn_persist_backward(cudaStream_t st, int sm_count, mp_dtype dt, const void *x, const void *dy,
                                   mp_bn_fast_mask mask, long long M, int C, int max_blocks, float *psdy,
                                   float *psdyx, mp_bn_bwd_out out, void *dx, bool dx_add, void *dr, bool dr_add);

#ifdef __cplusplus
}
#endif

#endif
