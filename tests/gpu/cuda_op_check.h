/* cuda_op_check.h — one op on the GPU against the CPU reference, for every op
 * kind: random inputs (tests/op_harness) rounded to the dtypes under test,
 * the same values uploaded to the device (NCHW -> NHWC, f32 -> dtype), the
 * device outputs, gradients, saved and workspace poisoned with NaN, the
 * CUDA op run forward and backward, and ||gpu - ref|| / ||ref|| reported for
 * the output, every input and parameter gradient and every buffer (BN
 * running stats). The reference is the CPU reference kernel in f64 (or f32)
 * on exactly the values the GPU saw; where the reference holds NaN/inf the
 * GPU must hold the same, anywhere else a non-finite GPU value fails.
 *
 * Emulated semantics of the executor: each input is stored in its dtype;
 * a gradient in its tensor's dtype; trainable parameters are f32 masters,
 * handed to the op as their f16/bf16 cast when it computes in f16/bf16 (the
 * reference then uses the rounded values); buffers and parameter gradients
 * are f32; a loss writes an f32 scalar and its d_out is a 1-element f32 seed.
 * Parameters keep the CPU's element order on the device (conv weights
 * (O, I, kh, kw)) unless params_channels_last asks for 4-D ones permuted
 * like activations ((O, kh, kw, I)); their gradients are read back the same way.
 * Like exec_stage.c, when the compute dtype is f16/bf16 the reference also
 * rounds f32-stored inputs to it.
 *
 * With `tangents` the case also checks second derivatives (cuda_op.h): after
 * forward and backward, random directions t_in (each input's dtype, rounded
 * like it), t_param (trainable parameters, f32 holding values rounded like
 * the parameters) and t_d_out (d_out's dtype; a loss's seed tangent is one
 * f32) go through forward_tangent and backward_tangent on both sides (the
 * node prepared with cfg.tangents), and t_out, every t_d_in and t_d_param
 * (f32) are compared like the rest, poisoned with NaN first.
 * tangent_nulls drops directions: TANGENT_NULL_IN (t_in NULL), _PARAM
 * (t_param NULL), _DOUT (t_d_out NULL). */
#ifndef MP_TESTS_GPU_CUDA_OP_CHECK_H
#define MP_TESTS_GPU_CUDA_OP_CHECK_H

#include <stdbool.h>

#include "cuda/cuda_op.h"

#define CUDA_OP_CHECK_MAX_TENSORS (2 + 2 * MP_MAX_INPUTS + 3 * MP_MAX_PARAMS)

#define TANGENT_NULL_IN 1u
#define TANGENT_NULL_PARAM 2u
#define TANGENT_NULL_DOUT 4u

typedef struct {
    const char *label;               /* shown in the result line; NULL: the op name */
    mp_op_kind kind;
    const mp_cuda_op_vtable *vt;     /* the implementation under test */
    mp_op_attr attr;
    int n_in;
    mp_shape in_shape[MP_MAX_INPUTS]; /* logical (N, C, H, W) or (N, F) */
    bool in_dtype_set;               /* false: every input stored in `storage` */
    mp_dtype in_dtype[MP_MAX_INPUTS]; /* labels are int32 whatever is set here */
    mp_dtype storage;                /* the output's dtype (losses: always f32) */
    mp_dtype compute;                /* F32, F16 or BF16 */
    bool tf32;
    bool training;
    uint64_t seed;                   /* random data; also the dropout seed */
    double tol;                      /* 0: 1e-5 fp32, 2e-3 tf32, 1e-2 with any f16/bf16 */
    bool oracle_f32;                 /* reference in f32 instead of f64 */
    bool params_channels_last;       /* 4-D parameters stored (O, kh, kw, I) on the device */
    int n_nan;                       /* NaN planted in input 0 at these NCHW indices */
    long long nan_index[4];
    bool relu_after;                 /* batchnorm2d: the ReLU reading it fused in (graph/plan_fuse.h); the
                                      * reference applies relu to out and masks d_out by it */
    bool no_param_grads;             /* parameter gradients not asked for (d_param NULL, as for a frozen layer
                                      * or a GAN's discriminator in the generator's backward): input gradients
                                      * still checked, nothing written where a gradient would be */
    bool tangents;                   /* also forward_tangent and backward_tangent (see above) */
    unsigned tangent_nulls;          /* TANGENT_NULL_*: directions left NULL (zero) */
} cuda_op_case;

typedef struct {
    int n;                                       /* tensors compared */
    char name[CUDA_OP_CHECK_MAX_TENSORS][24];    /* "out", "d_in0", "d_weight", "running_var" */
    double err[CUDA_OP_CHECK_MAX_TENSORS];       /* ||gpu - ref|| / ||ref||; inf on any mismatch */
    double worst, tol;
    bool ok;                                     /* ran, and every err <= tol */
    char error[256];                             /* why it could not run, or "" */
} cuda_op_result;

double cuda_op_default_tol(const cuda_op_case *k);

/* Run one case; MP_OK when it ran (then see r->ok), else the error (also in
 * r->error). Synchronizes ctx->stream; allocates and frees device memory. */
mp_status cuda_op_check(mp_cuda_ctx *ctx, const cuda_op_case *k, cuda_op_result *r);

/* cuda_op_check, then one line "ok   <label> <dtypes> <shape>: out 1e-07 ..." or
 * "FAIL ..." on stdout. Returns r.ok. */
bool cuda_op_check_print(mp_cuda_ctx *ctx, const cuda_op_case *k);

#endif
