/* conv_cudnn.h — the cuDNN machinery shared by conv2d_cuda.cu and
 * conv_transpose2d_cuda.cu. Both ops are described in the conv view of
 * mp_conv_geom (ops/conv_onednn.h): x is the input of a direct convolution,
 * y its output, weights (cy, cx/groups, k, k). conv2d runs the passes
 *   forward = FWD(x = in),  d_in = BWD_DATA(dy = d_out),  dW = BWD_FILTER(in, d_out)
 * and conv_transpose2d the same passes exchanged:
 *   forward = BWD_DATA(dy = in),  d_in = FWD(x = d_out),  dW = BWD_FILTER(d_out, in).
 *
 * Layouts. Activations are NHWC (CUDNN_TENSOR_NHWC); the filter is KRSC
 * (cy, k, k, cx/groups), what cuDNN's NHWC tensor-core kernels read. A
 * plan's conv2d nodes mostly get their weight (f32 master, or its f16/bf16
 * cast for low-precision nodes) and its gradient in KRSC already
 * (mp_op_call.param_krsc): forward and backward read the weight as it is,
 * and cuDNN writes dW straight into the gradient when its dtype is the
 * gradient's, else into the workspace and cast. Otherwise the executor
 * passes the weight in the CPU layout (cy, cx/groups, k, k), with a KRSC
 * copy made for every forward in one launch for all such nodes
 * (mp_op_call.weight_krsc, filter_krsc_batch.h); without one (tests,
 * conv_transpose2d), forward() and backward() each permute (and cast) it
 * into a KRSC slice of the workspace, and the KRSC filter gradient is
 * computed into the workspace and permuted into the (cy, cx/groups, k, k)
 * gradient. dW is in the compute dtype (cuDNN's fast kernels round their f32 sums
 * to it), or under cfg.weight_grad_unrounded (mp_plan_opts.f32_weight_grads)
 * in f32, never rounded: an f32 backward-filter (st->dw32, TF32 tensor
 * cores: exact products of f16/bf16 values, f32 sums) on f32 copies of x and
 * dy. Then how the batch is split (ranks, micro-batches) moves dW only by
 * f32 summation order; rounding each split's sum is a bf16 ulp.
 *
 * Dtypes. cuDNN runs in the node's compute dtype cd (f32, f16 or bf16, f32
 * accumulation). Inputs stored in another dtype are cast into the workspace
 * first; results are written in place when their dtype is cd, else into the
 * workspace and cast once. Math: f32 -> CUDNN_FMA_MATH (no TF32), tf32 ->
 * CUDNN_DEFAULT_MATH (TF32 allowed), f16/bf16 -> CUDNN_TENSOR_OP_MATH.
 *
 * Algorithms are searched once per (device, pass, geometry, dtype, math) in
 * prepare (conv_algo_cache.cu: cudnnFind*AlgorithmEx on scratch buffers, then
 * the graph API's engines timed against that choice (conv_engine.h);
 * cudnnGet*_v7 when the scratch cannot be allocated) and kept in a
 * process-wide table, so equal layers search once. */
#ifndef MP_CUDA_CONV_CUDNN_H
#define MP_CUDA_CONV_CUDNN_H

#include "cuda/cuda_op.h"
#include "cuda/filter_krsc_batch.h"
#include "cuda/lib_kernels.h" /* mp_cuda_ws */
#include "ops/conv_onednn.h" /* mp_conv_geom, mp_conv_geom_of */

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MP_CONV_FWD = 0, MP_CONV_BWD_DATA, MP_CONV_BWD_FILTER, MP_CONV_NPASS } mp_conv_pass;

typedef struct {
    int algo;                 /* cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t */
    cudnnMathType_t math;     /* the math type the algorithm was timed with */
    size_t workspace;         /* bytes */
    bool deterministic;       /* cuDNN calls it deterministic (no atomics) */
    float ms;                 /* the search's median GPU time; < 0: not timed */
    /* engine_mode >= 0: a graph-API engine (conv_engine.h) replaces algo:
     * number engine_index of heuristic mode engine_mode's list, cuDNN's
     * engine engine_id */
    int engine_mode, engine_index;
    long long engine_id;
    bool own;                 /* our kernels (conv_own.h: depthwise or stem) replace algo and engine */
} mp_conv_algo;

typedef struct mp_conv_cudnn_s {
    mp_conv_geom g;           /* conv view */
    mp_op_kind kind;          /* CONV2D or CONV_TRANSPOSE2D */
    bool training;
    mp_dtype cd;              /* compute dtype: F32, F16, BF16 */
    cudnnMathType_t math;     /* requested math type (see above) */
    char what_fwd[320], what_bwd[320]; /* error context: op, node, shapes, dtypes */
    cudnnTensorDescriptor_t x_desc, y_desc;  /* conv view, NHWC, cd */
    cudnnFilterDescriptor_t w_desc;          /* KRSC, cd */
    mp_dtype dw_dt;           /* backward-filter's dW: cd, or F32 (weight_grad_unrounded) */
    struct mp_conv_cudnn_s *dw32; /* F32 dW from a low cd: that pass in f32 on f32 copies */
    cudnnConvolutionDescriptor_t conv[MP_CONV_NPASS]; /* one per pass: math types differ */
    bool has[MP_CONV_NPASS];                 /* pass prepared */
    mp_conv_algo algo[MP_CONV_NPASS];
    cudnnBackendDescriptor_t plan[MP_CONV_NPASS]; /* engine passes: the context's plan (not owned) */
    bool adds_dx;             /* conv2d backward-data can add into dx (legacy beta 1, or plan_add_dx) */
    cudnnBackendDescriptor_t plan_add_dx; /* an engine's backward-data with beta 1 (not owned) */
    size_t w_bytes;           /* the KRSC filter (cy, k, k, cx/g) in cd */
    size_t dw_bytes;          /* its gradient in dw_dt */
    size_t in_cast_bytes, out_cast_bytes;    /* workspace slices for dtype staging */
    size_t dw32_bytes;        /* dw32's f32 copies of x and dy and its cuDNN workspace */
    size_t ws_total;          /* workspace bytes one call may use (the prepare() report) */
    bool bn_input;            /* conv2d prepared for cfg->bn_relu_input: forward and backward-filter on our
                                 depthwise kernels, untimed, applying mp_op_call.bn_x's batch norm */
} mp_conv_cudnn;

/* Descriptors and algorithm search for the passes `need` (indexed by
 * mp_conv_pass); raises *workspace_bytes. */
mp_status mp_conv_cudnn_prepare(mp_cuda_ctx *ctx, const mp_op_desc *d, const mp_op_info *info,
                                const mp_cuda_node_cfg *cfg, const bool need[MP_CONV_NPASS], mp_conv_cudnn **out,
                                size_t *workspace_bytes);
void mp_conv_cudnn_release(void *state);

/* The passes, on device pointers in st->cd (conv view; w_krsc the KRSC
 * filter). ws/ws_bytes: cuDNN workspace of at least st->algo[pass].workspace. */
mp_status mp_conv_cudnn_fwd(mp_cuda_ctx *ctx, const mp_conv_cudnn *st, const void *x, const void *w_krsc, void *y,
                            void *ws, size_t ws_bytes, const char *what);
mp_status mp_conv_cudnn_bwd_data(mp_cuda_ctx *ctx, const mp_conv_cudnn *st, const void *dy, const void *w_krsc,
                                 void *dx, void *ws, size_t ws_bytes, const char *what);
/* The same, adding the result into what dx holds (st->adds_dx). */
mp_status mp_conv_cudnn_bwd_data_add(mp_cuda_ctx *ctx, const mp_conv_cudnn *st, const void *dy, const void *w_krsc,
                                     void *dx, void *ws, size_t ws_bytes, const char *what);
/* A conv2d node's filter as a job of its plan's KRSC batch: fills k, c, rs
 * and ddt (its compute dtype); false for any other state. */
bool mp_conv2d_krsc_job(const void *state, mp_krsc_job *job);
/* adds_input_grad of conv2d's vtable: input 0 when adds_dx. */
bool mp_conv_cudnn_adds_input_grad(const void *state, int k);
mp_status mp_conv_cudnn_bwd_filter(mp_cuda_ctx *ctx, const mp_conv_cudnn *st, const void *x, const void *dy,
                                   void *dw_krsc, void *ws, size_t ws_bytes, const char *what);

/* dW (f32, KRSC) = st->dw32's backward-filter of f32 copies of x and dy
 * (conv view, in cd), through slices of ws (st->dw32_bytes). */
mp_status mp_conv_cudnn_bwd_filter_f32(mp_cuda_ctx *ctx, const mp_conv_cudnn *st, const void *x, const void *dy,
                                       void *dw, mp_cuda_ws *ws, const char *what);

/* The workspace bytes of both ops' tangents (conv_tangent_cuda.cu); prepare
 * raises st->ws_total and *workspace_bytes to it under cfg->tangents. */
size_t mp_conv_tangent_workspace(const mp_conv_cudnn *st, const mp_op_info *info);

/* forward()/backward() of both ops: the pass mapping in the header comment. */
mp_status mp_conv_cudnn_forward(mp_cuda_ctx *ctx, const mp_op_call *c);
mp_status mp_conv_cudnn_backward(mp_cuda_ctx *ctx, const mp_op_call *c);

/* Algorithm search with the process-wide cache (conv_algo_cache.cu). */
mp_status mp_conv_algo_choose(mp_cuda_ctx *ctx, mp_conv_cudnn *st, mp_conv_pass pass, const char *what);
/* Our kernels (conv_own.h) as pass's choice, timed at ms (< 0: not timed). */
mp_conv_algo mp_conv_algo_own(const mp_cuda_ctx *ctx, const mp_conv_cudnn *st, mp_conv_pass pass, float ms);
/* Whether conv2d state (prepared) reads its input as a fused batch norm's (mp_conv_cudnn.bn_input). */
bool mp_conv2d_reads_bn_input(const void *state);

#ifdef __cplusplus
}
#endif
#endif
