/** @file mixprec/core.h
 * Status codes and error messages, dtypes and their conversions, devices,
 * and process set-up. */
#ifndef MIXPREC_CORE_H
#define MIXPREC_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "mixprec/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status and errors -------------------------------------------------- */

/** What a fallible call returns; MP_OK is 0. */
typedef enum {
    MP_OK = 0,
    MP_ERR_INVALID_ARG,  /**< a bad option or argument, or a call out of order */
    MP_ERR_IO,           /**< a file could not be opened, read or written */
    MP_ERR_FORMAT,       /**< a file is corrupt or not of the expected format */
    MP_ERR_SHAPE,        /**< impossible or mismatched shapes */
    MP_ERR_NOMEM,        /**< out of memory (host or device) */
    MP_ERR_NONFINITE,    /**< NaN or inf where finite numbers are required (a diverged run) */
    MP_ERR_UNSUPPORTED,  /**< a valid request this build or machine cannot do */
    MP_ERR_INTERNAL,     /**< a library (oneDNN, cuDNN, zlib, ...) failed */
} mp_status;

/** The message of the last error on this thread ("" if none): what failed,
 * naming the file, option, op, tensor or shape. */
MP_API const char *mp_last_error(void);
/** "MP_OK", "MP_ERR_IO", ... */
MP_API const char *mp_status_name(mp_status s);

/* ---- dtypes and storage types ------------------------------------------- */

/** Element types of tensors. */
typedef enum {
    MP_DTYPE_F32 = 0,
    MP_DTYPE_F16,
    MP_DTYPE_BF16,
    MP_DTYPE_F64,
    MP_DTYPE_I32, /**< class labels */
    MP_DTYPE_COUNT
} mp_dtype;

/** IEEE binary16 bits. */
typedef struct {
    uint16_t bits; /**< the 16 bits: sign, 5 exponent, 10 mantissa */
} mp_f16;
/** bfloat16 bits (the top half of an f32). */
typedef struct {
    uint16_t bits; /**< the 16 bits: sign, 8 exponent, 7 mantissa */
} mp_bf16;

/** "f32", "f16", "bf16", "f64", "i32" ("?" for anything else). */
MP_API const char *mp_dtype_name(mp_dtype t);
/** Bytes per element (0 for an unknown dtype). */
MP_API size_t mp_dtype_size(mp_dtype t);
/** True for F16 and BF16, the dtypes mixed precision computes in. */
MP_API bool mp_dtype_is_low(mp_dtype t);

/** f32 to f16, round to nearest even, IEEE NaN/inf/subnormal rules. */
MP_API mp_f16 mp_f32_to_f16(float x);
/** f16 to f32 (exact). */
MP_API float mp_f16_to_f32(mp_f16 h);
/** f32 to bf16, round to nearest even (NaN stays NaN). */
MP_API mp_bf16 mp_f32_to_bf16(float x);
/** bf16 to f32 (exact). */
MP_API float mp_bf16_to_f32(mp_bf16 b);
/** n values f32 -> f16; vectorized (F16C/AVX-512) when the CPU has it,
 * bit-identical to mp_f32_to_f16. */
MP_API void mp_convert_f32_to_f16(const float *src, mp_f16 *dst, size_t n);
/** n values f16 -> f32, as mp_f16_to_f32. */
MP_API void mp_convert_f16_to_f32(const mp_f16 *src, float *dst, size_t n);
/** n values f32 -> bf16, as mp_f32_to_bf16. */
MP_API void mp_convert_f32_to_bf16(const float *src, mp_bf16 *dst, size_t n);
/** n values bf16 -> f32, as mp_bf16_to_f32. */
MP_API void mp_convert_bf16_to_f32(const mp_bf16 *src, float *dst, size_t n);
/** Round n f32 values in place to dtype's precision (f16/bf16: nearest even;
 * any other dtype: unchanged). */
MP_API void mp_round_f32(float *x, int64_t n, mp_dtype dtype);
/** n elements of a float dtype (F32, F16, BF16, F64: rounded to nearest)
 * into f32. MP_ERR_INVALID_ARG, dst untouched, for another dtype, n < 0 or a
 * null buffer where n > 0. */
MP_API mp_status mp_load_f32(float *dst, const void *src, mp_dtype src_dtype, int64_t n);
/** n f32 values into a float dtype (F32, F16, BF16: rounded to nearest
 * even; F64: exact). Errors as mp_load_f32. */
MP_API mp_status mp_store_f32(void *dst, mp_dtype dst_dtype, const float *src, int64_t n);

/* ---- devices -------------------------------------------------------------- */

/** Where plans and trainers run. */
typedef enum { MP_DEVICE_CPU = 0, MP_DEVICE_CUDA = 1 } mp_device_kind;

/** A device; zero-initialized means the CPU. */
typedef struct {
    mp_device_kind kind; /**< CPU or CUDA */
    int index;           /**< CUDA device number */
} mp_device;

/** Parse "cpu", "cuda" (= cuda:0), "cuda:N" or "auto" (cuda:0 when this build
 * has the CUDA backend and a GPU is present, else the CPU). Errors name the
 * text; a missing GPU is reported when a plan opens it. */
MP_API mp_status mp_device_parse(const char *text, mp_device *out);
/** "cpu", "cuda:0", ... written into buf; returns buf. */
MP_API const char *mp_device_name(mp_device d, char *buf, size_t len);
/** GPUs this build can use here (0 without the CUDA backend, a driver or a GPU). */
MP_API int mp_device_gpu_count(void);

/* ---- process set-up ------------------------------------------------------ */

/** Re-execute the program once with OMP_WAIT_POLICY=passive unless the
 * environment already sets it (idle OpenMP threads then sleep instead of
 * spinning, which matters on small shared machines). Call first in main(). */
MP_API void mp_prefer_passive_openmp(char **argv);

/** Environment variables the library reads, once per process, at the first
 * call that needs them (the README lists each with its effect): setting one
 * later in the process changes nothing. */
typedef struct {
    bool deterministic;        /**< MIXPREC_DETERMINISTIC=1: cuDNN/cuBLASLt heuristics, deterministic algorithms; no
                                    timed choice of a CPU conv's data-gradient form */
    bool no_fusion;            /**< MIXPREC_NO_FUSION=1: batch norm and ReLU kept apart */
    bool cudnn_debug;          /**< MIXPREC_CUDNN_DEBUG=1: print every timed convolution search */
    int cudnn_engines;         /**< MIXPREC_CUDNN_ENGINES: 1 (default) graph-API engines, 0 legacy only, 2 "force" */
    int cudnn_engine_candidates; /**< MIXPREC_CUDNN_ENGINE_CANDIDATES=N (default 12) */
    int cudnn_bn;              /**< MIXPREC_CUDNN_BN: 0 our batch-norm kernels only, 1 cuDNN's f16/bf16 ones wherever
                                    they apply, 2 (unset or any other value) timed per layer between the two */
    bool no_bn_fast;           /**< MIXPREC_BN_FAST=0: GPU batch norm on our general kernels only, not the fast
                                    one-dtype ones */
    int bn_persist;            /**< MIXPREC_BN_PERSIST: our fast GPU batch norm's training passes 0 as three kernels
                                    each, 1 as one cooperative kernel each (also under MIXPREC_DETERMINISTIC=1:
                                    both are deterministic), 2 (unset or any other value) timed per layer with
                                    cuDNN's as a third candidate where they apply; three kernels where the one
                                    kernel cannot run (synchronized batch norm, MIXPREC_BN_FAST=0, no cooperative
                                    launch) and under MIXPREC_DETERMINISTIC=1 */
    double cudnn_workspace_mb; /**< MIXPREC_CUDNN_WORKSPACE_MB (0: default ceiling) */
    int cudnn_find_trials;     /**< MIXPREC_CUDNN_FIND_TRIALS=N timed runs per candidate (0: default 3) */
    bool cudnn_find_off;       /**< MIXPREC_CUDNN_FIND=0: cuDNN's heuristic choice without timing */
    bool lt_debug;             /**< MIXPREC_LT_DEBUG=1: print every cuBLASLt GEMM choice */
    int poison_arena;          /**< MIXPREC_POISON_ARENA: 1 NaN bytes, 2 "uninit" (not set at all) */
    bool dist_debug;           /**< MIXPREC_DIST_DEBUG=1: print the communicators' progress */
    int native_bf16;           /**< MIXPREC_NATIVE_BF16: -1 unset, 0 every bf16 CPU node emulated, 1 as unset */
    bool force_scalar;         /**< MIXPREC_FORCE_SCALAR=1: no AVX2/AVX-512 code of ours (conversions, ReLU, BN, pooling) */
    bool no_bn_add_relu_fusion; /**< MIXPREC_FUSE_BN_ADD_RELU=0: batch norm, residual add (and ReLU) kept apart */
    bool bn_dw_fusion;         /**< MIXPREC_FUSE_BN_DW=1: a GPU batch norm + ReLU fused into the depthwise
                                    convolution reading it (mp_plan_opts.bn_dw_fusion) */
    bool no_bn_pool_fusion;    /**< MIXPREC_FUSE_BN_POOL=0: a batch norm + ReLU and the average pool reading
                                    it kept apart (mp_plan_opts.no_bn_pool_fusion) */
    bool no_channels_last;     /**< MIXPREC_CPU_CHANNELS_LAST=0: CPU plans keep every activation NCHW */
    bool no_cudnn_add_dx;      /**< MIXPREC_CUDNN_ADD_DX=0: a GPU input gradient with two consumers is summed by a
                                    kernel of its own, not by the convolution's backward-data or cuDNN's batch-norm
                                    backward (beta 1) */
    bool no_conv_krsc_copies;  /**< MIXPREC_CONV_KRSC_COPIES=0: a GPU convolution whose filter the plan keeps in KCRS
                                    (MIXPREC_CONV_WEIGHTS_KRSC=0, second-order plans) permutes its own (twice a step)
                                    instead of reading the plan's copy made in one launch per forward */
    bool no_conv_weights_krsc; /**< MIXPREC_CONV_WEIGHTS_KRSC=0: a GPU plan keeps conv2d filters (masters, casts,
                                    gradients, optimizer state) in the CPU's KCRS order and permutes them every
                                    step, not in the KRSC order cuDNN reads */
    int conv_own;              /**< MIXPREC_CONV_OWN: 1 (default) our convolution kernels (depthwise 3x3, and
                                    stems' forward and backward-filter) timed beside cuDNN's choice for each pass,
                                    the faster kept; 0 never; 2 "force": ours wherever they apply (tests) */
    bool no_dw_quad;           /**< MIXPREC_DW_QUAD=0: the depthwise forward and backward-data at stride 1 in
                                    f16/bf16 on their 8-channel kernel instead of the 4-channel one (comparisons;
                                    a forward with a batch norm fused in runs the 8-channel kernel either way) */
    bool no_low_conv_grads;    /**< MIXPREC_LOW_CONV_GRADS=0: a GPU plan with mp_plan_opts.low_grads keeps a conv
                                    filter with an fp32 master's gradient f32 (cuDNN's f16/bf16 values cast into it)
                                    instead of in the compute dtype (comparisons) */
    bool no_bn_pipeline;       /**< MIXPREC_BN_PIPELINE=0: the GPU batch norm's streaming passes wait for a group of
                                    rows' loads before issuing the next group's, instead of keeping the next group's
                                    loads in flight while they compute (comparisons; the same values either way) */
    int cpu_wgrad_gemm;        /**< MIXPREC_CPU_WGRAD_GEMM: a CPU bf16 conv2d's weight gradient as im2col + oneDNN
                                    matmul (src/ops/conv_wgrad_onednn.h) 0 never, 1 wherever it can run, -1 (unset)
                                    where measured faster than oneDNN's AMX backward-weights kernel */
    int cpu_dgrad_fwd;         /**< MIXPREC_CPU_DGRAD_FWD: a CPU conv2d's data gradient (stride 1, groups 1) as the
                                    forward convolution of its transposed, reversed filter
                                    (src/ops/conv_dgrad_onednn.h) 0 never, 1 wherever it can run, -1 (unset) timed
                                    against oneDNN's AMX backward-data kernel per shape, the faster kept */
    bool no_bn_pooled_windows; /**< MIXPREC_BN_POOLED_WINDOWS=0: the dx pass of a GPU batch norm fused into an
                                    average pool walks x's rows (four index divisions each) instead of the pool's
                                    windows (comparisons; the same values either way) */
    bool no_bn_dx_over_dy;     /**< MIXPREC_BN_DX_OVER_DY=0: a CPU batch norm's backward writes its input gradient
                                    in its own buffer, not over its output gradient (mp_plan_opts.no_bn_dx_over_dy) */
    bool no_add_grad_alias;    /**< MIXPREC_ADD_GRAD_ALIAS=0: a residual add copies its output gradient into its
                                    inputs' on every plan, not handing over its memory (src/graph/plan_grad_alias.h,
                                    mp_plan_opts.no_add_grad_alias) */
    bool no_graph_memset_kernels; /**< MIXPREC_GRAPH_MEMSET_KERNELS=0: the GPU training step's CUDA graph keeps the
                                       memset nodes its capture recorded (cuDNN's), not kernel nodes doing the same
                                       fills (comparisons; the same values either way) */
} mp_env;
/** The environment as read at the first call (the same struct for the process). */
MP_API const mp_env *mp_env_get(void);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_CORE_H */
