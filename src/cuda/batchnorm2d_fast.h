/* batchnorm2d_fast.h — batchnorm2d's streaming passes at memory speed, for
 * batchnorm2d_cuda.cu: the training statistics, the apply, the backward
 * sums and dx over channels-last rows of C channels where every activation
 * of the call has one dtype T (f32, f16 or bf16), C is a multiple of
 * VEC = 16 / sizeof(T) and at most 256 * VEC, and every pointer is 16-byte
 * aligned. CUDA only (C-callable, for the tests). Same arithmetic as batchnorm2d_cuda.cu's general kernels (Welford
 * within a thread, Chan's merge in a fixed order, f32 sums), so the same
 * finalize kernels merge their partials (batchnorm2d_persist.h runs the same
 * block code in one kernel with a finalize phase of its own); what differs is how they move
 * bytes: the dtype is a template parameter (no per-element dispatch), a
 * block's threads cover whole rows (consecutive threads read consecutive
 * 16 bytes, whatever C is), each thread loads four rows (dx: two) as a
 * group and (but in the statistics' own kernel, where it measured slower)
 * issues the next group's loads before it computes on the current one
 * (MIXPREC_BN_PIPELINE=0: after; the same values either way), the second
 * pass over a chunk walks it backwards (its last rows are still in L2), and
 * the backward of a fused ReLU recomputes its mask from x and the forward's
 * coefficients instead of reading the output.
 *
 * Each pass splits the M rows into G chunks of R rows (the last may be
 * shorter), one block each; the reductions write one partial per chunk and
 * channel into (G, C) arrays as the general kernels do. */
#ifndef MP_CUDA_BATCHNORM2D_FAST_H
#define MP_CUDA_BATCHNORM2D_FAST_H

#include <cuda_runtime.h>

#include "mixprec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rows per block pass for dtype dt and C channels, or 0 where these
 * kernels do not apply (dtype, C not a multiple of VEC or above 256 * VEC). */
int mp_bn_fast_rows_per_pass(mp_dtype dt, int C);

/* Row chunks (blocks) of a reduction over M >= 1 rows: one per min_rows
 * rows, at most most and at least 1; *R rows each (the last may be
 * shorter), *G of them, none empty. */
void mp_bn_row_chunks(long long M, long long min_rows, long long most, int *G, long long *R);

/* These kernels' chunks over M rows at rpp rows per pass on a GPU of
 * sm_count SMs: at least eight passes each, at most two per SM. Of 1, 2, 4
 * and 8 per SM, bench/gpu/bn_pass_rate measured the four passes together
 * fastest at 2 on 7 of the 8 layer shapes of the peer's resnet18 and
 * mobilenetv2 (the eighth within 3 %), 6 % less time than at 4 over all
 * eight (NOTES v0.26). */
void mp_bn_fast_chunks(long long M, int rpp, int sm_count, int *G, long long *R);

/* Per chunk and channel: mean and sum of squared deviations -> pmean/pm2 (G, C). */
cudaError_t mp_bn_fast_stats(cudaStream_t st, mp_dtype dt, const void *x, long long M, int C, int G, long long R,
                             float *pmean, float *pm2);

/* y = bn(x) = (x - mu) * scale + shift with coef = (mu, scale, shift), C
 * each; relu: y = relu(bn(x)); resid (non-NULL): y = round(bn(x)) + resid,
 * relu(round(bn(x)) + resid) with relu, the unfused add's rounding kept. */
cudaError_t mp_bn_fast_apply(cudaStream_t st, mp_dtype dt, const void *x, const void *resid, void *y, long long M,
                             int C, int G, long long R, const float *coef, bool relu);

/* The dy a batch norm's backward sees: dy itself (all NULL), dy where the
 * stored output y > 0 (y_mask, a fused add + ReLU's), or dy where
 * round(bn(x)) > 0 with the forward's mu (fwd_mu[c]), scale
 * (fwd_scale[c]) and shift (fwd_scale[C + c]) (a fused ReLU's, recomputed:
 * the stored output's sign, bit for bit). NaN passes either mask, as
 * relu's backward.
 * pooled (non-NULL, with the recomputed mask only): the ReLU's only reader
 * is a k x k average pool of stride k and no padding fused in
 * (graph/plan_fuse.h), and dy is not read: row (n, h, w) of the H x W
 * image takes the pool's output gradient pooled[n, h / k, w / k] (an
 * (N, C, H / k, W / k) NHWC tensor) / k^2, rounded to the dtype as the
 * pool's backward stores it, 0 past the last window: what the pool's
 * backward would have written, bit for bit, without writing it. */
typedef struct {
    const void *y_mask;
    const float *fwd_mu, *fwd_scale;
    const void *pooled;
    int H, W, k;
} mp_bn_fast_mask;

/* Whether the kernels take a pooled dy (mp_bn_fast_mask.pooled) over an
 * (N, C, H, W) input of dtype dt and a k x k pool: C as
 * mp_bn_fast_rows_per_pass takes it, H, W >= k >= 1 and N * H * W < 2^31
 * (its rows are 32-bit). */
bool mp_bn_fast_pooled_ok(mp_dtype dt, long long N, int C, int H, int W, int k);

/* Whether the kernels take mask over M rows of C channels of dtype dt: a
 * pooled dy also needs the recomputed mask, M a whole number of H x W
 * images and mp_bn_fast_pooled_ok. */
bool mp_bn_fast_mask_ok(mp_dtype dt, mp_bn_fast_mask mask, long long M, int C);

/* Per chunk and channel: sum(g) and sum(g * (x - mu)) -> psdy/psdyx (G, C),
 * g the masked dy. */
cudaError_t mp_bn_fast_bwd_reduce(cudaStream_t st, mp_dtype dt, const void *x, const void *dy, mp_bn_fast_mask mask,
                                  const float *mu, long long M, int C, int G, long long R, float *psdy,
                                  float *psdyx);

/* dx = k * (g - a - (x - mu) * b) with coef = (mu, k, a, b), C each, g the
 * masked dy, when dx is non-NULL (dx_add: dx + that, one rounding); the
 * fused add's residual gradient dr = g when dr is non-NULL (dr_add: dr + g). */
cudaError_t mp_bn_fast_dx(cudaStream_t st, mp_dtype dt, const void *x, const void *dy, mp_bn_fast_mask mask,
                          void *dx, bool dx_add, void *dr, bool dr_add, long long M, int C, int G, long long R,
                          const float *coef);

#ifdef __cplusplus
}
#endif

#endif
