/* conv_own.h — our own convolution kernels as one choice of conv_cudnn.h's
 * passes, whichever family takes the geometry: the depthwise kernels
 * (conv_depthwise.h: every pass) or the stem kernels (conv_stem.h: forward
 * and backward-filter of few input channels). The families' geometries do
 * not overlap. Passes take the tensors in the roles of conv_engine.h (x, w,
 * y): forward y = x (*) w, backward-data x = (or +=, add) y (*) w flipped,
 * backward-filter w = dW of x and dy = y.
 *
 * conv_algo_cache.cu times them beside cuDNN's choice, on the same scratch,
 * and keeps the faster (mp_conv_algo.own); MIXPREC_CONV_OWN=0: never,
 * =force: wherever they apply (tests). */
#ifndef MP_CUDA_CONV_OWN_H
#define MP_CUDA_CONV_OWN_H

#include "cuda/conv_cudnn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MP_OWN_NONE = 0, MP_OWN_DEPTHWISE, MP_OWN_STEM } mp_own_family;

/* The family that runs pass of geometry g in dtype cd, or MP_OWN_NONE. */
mp_own_family mp_own_family_of(const mp_conv_geom *g, mp_dtype cd, mp_conv_pass pass);
/* The family's name for messages ("depthwise", "stem", "none"). */
const char *mp_own_family_name(mp_own_family f);

/* Workspace bytes of the pass on ctx (0 where no family takes it). */
size_t mp_own_workspace(const mp_cuda_ctx *ctx, const mp_conv_geom *g, mp_dtype cd, mp_conv_pass pass);

/* Run the pass (roles above; add: backward-data only); an error where no
 * family takes it. */
mp_status mp_own_run(mp_cuda_ctx *ctx, const mp_conv_geom *g, mp_dtype cd, mp_conv_pass pass, void *x, const void *w,
                     void *y, bool add, void *ws, size_t ws_bytes, const char *what);

/* The error of a family's kernels given a geometry they do not take
 * (family: "depthwise", "stem"). */
mp_status mp_own_refuse(const mp_conv_geom *g, mp_dtype cd, const char *family, const char *what);
/* MP_OK when a and b are 16-byte aligned (the kernels' vector loads and
 * stores), else the error naming the family. */
mp_status mp_own_aligned(const void *a, const void *b, const char *family, const char *what);

/* GPU milliseconds of one run of the pass: a warm-up, then the median of 3
 * trials of 4 runs queued back to back (as the graph API's engines are
 * timed). */
mp_status mp_own_time(mp_cuda_ctx *ctx, const mp_conv_geom *g, mp_dtype cd, mp_conv_pass pass, void *x, void *w,
                      void *y, void *ws, size_t ws_bytes, float *ms, const char *what);

#ifdef __cplusplus
}
#endif
#endif
