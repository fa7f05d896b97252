/* conv_engine.h — convolution passes through cuDNN's graph (backend) API.
 *
 * Why: the legacy entry points (cudnnFind*Algorithm, cudnnConvolution*) reach
 * only the engines behind their eight algorithm enums. The graph API lists
 * every engine cuDNN's heuristics rank for a pass, among them the Hopper
 * kernels PyTorch reaches through cudnn_frontend (it times them all under
 * cudnn.benchmark). conv_algo_cache.cu times the best of those candidates
 * (heuristic mode A's first 12, MIXPREC_CUDNN_ENGINE_CANDIDATES; the
 * fallback list only when none of those runs) beside the legacy choice and
 * keeps the faster. Timing all 64 of mode A's picked the same engines for
 * resnet18 at batch 2048 (bench notes v0.11). Each config is timed with the
 * knob values the heuristic gave it: walking every knob of the first configs
 * over its range (dev/conv_wgrad_knobs_timing.cu) found nothing faster than
 * mode A's first for the 3x3 backward-filters of resnet18, resnet50 and
 * wrn-28-10 (bench notes v0.58).
 *
 * An engine choice is (heuristic mode, index in that mode's list, cuDNN's
 * global engine index as a check): the same graph on the same GPU model and
 * cuDNN gets the same list, so the choice is cached like a legacy algorithm
 * and turned into an execution plan once per context (the plans live in the
 * context, shared by equal layers and by every plan built on it, and go with
 * mp_cuda_ctx_destroy).
 *
 * Tensors, in the conv view of conv_cudnn.h and in its compute dtype: X
 * (n, cx, hx, wx) and Y (n, cy, hy, wy) NHWC, W (cy, cx/groups, k, k) KRSC,
 * 16-byte aligned. A pass runs on (x, w, y) in those roles: forward reads x,
 * w and writes y; backward-data reads y (dy), w and writes x (dx);
 * backward-filter reads x, y (dy) and writes w (dw). */
#ifndef MP_CUDA_CONV_ENGINE_H
#define MP_CUDA_CONV_ENGINE_H

#include "cuda/conv_cudnn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Times the candidates (GPU time: a warm-up, median of 3 trials of 4 runs
 * queued back to back) on the scratch buffers x, w, y and workspace ws
 * (ws_bytes; candidates needing more are out). Never taken: engines that
 * reduce in reduced precision or down-convert their inputs, and with
 * fma_only (f32 without TF32) tensor-core ones. The search runs only where
 * timing may choose (not under MIXPREC_DETERMINISTIC). *found: whether any
 * candidate ran; then *out holds the choice (engine_mode >= 0, engine_index,
 * engine_id, workspace, deterministic, ms). */
mp_status mp_conv_engine_search(mp_cuda_ctx *ctx, const mp_conv_cudnn *st, mp_conv_pass pass, void *x, void *w,
                                void *y, void *ws, size_t ws_bytes, bool fma_only, mp_conv_algo *out, bool *found,
                                const char *what);

/* The execution plan of choice a for this pass on ctx, built on first use
 * under key (key_len bytes, compared with memcmp; the caller's key tells
 * betas apart) and owned by ctx. beta 0: the pass writes its output; 1: it
 * adds its result to what the output holds (one rounding of the sum), with
 * a's engine: an error when no listed config of that engine takes beta
 * there (MP_ERR_UNSUPPORTED) or it needs more workspace than a. */
mp_status mp_conv_engine_plan(mp_cuda_ctx *ctx, const mp_conv_cudnn *st, mp_conv_pass pass, const mp_conv_algo *a,
                              float beta, const void *key, size_t key_len, cudnnBackendDescriptor_t *plan,
                              const char *what);

/* Runs a plan on (x, w, y) as above with workspace ws. */
mp_status mp_conv_engine_run(mp_cuda_ctx *ctx, cudnnBackendDescriptor_t plan, const void *x, const void *w,
                             const void *y, void *ws, const char *what);

/* Frees the plans mp_conv_engine_plan built on ctx (mp_cuda_ctx_destroy). */
void mp_conv_engine_free_plans(mp_cuda_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif
