/* conv_own.cu — see conv_own.h: the family of a pass, its run and its
 * timing. */
#include "cuda/conv_own.h"

#include <stdint.h>

#include "cuda/choice_cache.h" /* mp_median_ms */
#include "cuda/conv_depthwise.h"
#include "cuda/conv_stem.h"

mp_own_family mp_own_family_of(const mp_conv_geom *g, mp_dtype cd, mp_conv_pass pass) {
    if (mp_dw_applies(g, cd)) return MP_OWN_DEPTHWISE;
    if (pass != MP_CONV_BWD_DATA && mp_stem_applies(g, cd)) return MP_OWN_STEM;
    return MP_OWN_NONE;
}

const char *mp_own_family_name(mp_own_family f) {
    return f == MP_OWN_DEPTHWISE ? "depthwise" : f == MP_OWN_STEM ? "stem" : "none";
}

size_t mp_own_workspace(const mp_cuda_ctx *ctx, const mp_conv_geom *g, mp_dtype cd, mp_conv_pass pass) {
    switch (mp_own_family_of(g, cd, pass)) {
    case MP_OWN_DEPTHWISE: return mp_dw_workspace(ctx, g, cd, pass);
    case MP_OWN_STEM: return mp_stem_workspace(ctx, g, cd, pass);
    case MP_OWN_NONE: break;
    }
    return 0;
}

mp_status mp_own_run(mp_cuda_ctx *ctx, const mp_conv_geom *g, mp_dtype cd, mp_conv_pass pass, void *x, const void *w,
                     void *y, bool add, void *ws, size_t ws_bytes, const char *what) {
    const mp_own_family f = mp_own_family_of(g, cd, pass);
    if (f == MP_OWN_DEPTHWISE) {
        if (pass == MP_CONV_FWD) return mp_dw_forward(ctx, g, cd, x, NULL, w, y, what);
        if (pass == MP_CONV_BWD_DATA) return mp_dw_backward_data(ctx, g, cd, y, w, x, add, what);
        return mp_dw_backward_filter(ctx, g, cd, x, NULL, y, (void *)w, ws, ws_bytes, what);
    }
    if (f == MP_OWN_STEM) {
        if (pass == MP_CONV_FWD) return mp_stem_forward(ctx, g, cd, x, w, y, what);
        return mp_stem_backward_filter(ctx, g, cd, x, y, (void *)w, ws, ws_bytes, what);
    }
    return mp_error(MP_ERR_INTERNAL,
                    "%s: none of our kernels takes pass %d of this convolution (groups %d, %d -> %d channels, "
                    "kernel %d stride %d, %s)",
                    what, (int)pass, g->groups, g->cx, g->cy, g->k, g->stride, mp_dtype_name(cd));
}

mp_status mp_own_refuse(const mp_conv_geom *g, mp_dtype cd, const char *family, const char *what) {
    return mp_error(MP_ERR_INTERNAL,
                    "%s: the %s kernels do not take this convolution (groups %d, %d -> %d channels, kernel %d "
                    "stride %d dilation %d padding %d, %s)",
                    what, family, g->groups, g->cx, g->cy, g->k, g->stride, g->dil, g->pad, mp_dtype_name(cd));
}

mp_status mp_own_aligned(const void *a, const void *b, const char *family, const char *what) {
    if (((uintptr_t)a | (uintptr_t)b) % 16)
        return mp_error(MP_ERR_INTERNAL, "%s: a %s kernel's tensors must be 16-byte aligned", what, family);
    return MP_OK;
}

mp_status mp_own_time(mp_cuda_ctx *ctx, const mp_conv_geom *g, mp_dtype cd, mp_conv_pass pass, void *x, void *w,
                      void *y, void *ws, size_t ws_bytes, float *ms, const char *what) {
    enum { TRIALS = 3, RUNS = 4 };
    cudaEvent_t ev[2] = {NULL, NULL};
    MP_CUDA_TRY(cudaEventCreate(&ev[0]), what);
    mp_status s = mp_cuda_check(cudaEventCreate(&ev[1]), "cudaEventCreate", what);
    float t[TRIALS];
    if (s == MP_OK) s = mp_own_run(ctx, g, cd, pass, x, w, y, false, ws, ws_bytes, what); /* warm-up */
    for (int k = 0; k < TRIALS && s == MP_OK; k++) {
        s = mp_cuda_check(cudaEventRecord(ev[0], ctx->stream), "cudaEventRecord", what);
        for (int r = 0; r < RUNS && s == MP_OK; r++)
            s = mp_own_run(ctx, g, cd, pass, x, w, y, false, ws, ws_bytes, what);
        if (s == MP_OK) s = mp_cuda_check(cudaEventRecord(ev[1], ctx->stream), "cudaEventRecord", what);
        if (s == MP_OK) s = mp_cuda_check(cudaEventSynchronize(ev[1]), "cudaEventSynchronize", what);
        if (s == MP_OK) s = mp_cuda_check(cudaEventElapsedTime(&t[k], ev[0], ev[1]), "cudaEventElapsedTime", what);
        t[k] /= RUNS;
    }
    if (s == MP_OK) *ms = mp_median_ms(t, TRIALS);
    cudaEventDestroy(ev[0]);
    if (ev[1]) cudaEventDestroy(ev[1]);
    return s;
}
