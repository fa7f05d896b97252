/** @file mixprec/numerics.h
 * Numerics statistics: what fp16 and bf16 would do to a tensor's values.
 *
 * For one tensor, in one pass: the largest magnitude, the smallest non-zero
 * magnitude, NaN/inf/zero counts, how many values would overflow, round to
 * zero or become subnormal when rounded (nearest even) to fp16 and to bf16,
 * and a histogram of magnitudes by octave (floor(log2 |x|)), from which the
 * same shares follow for any power-of-two loss scale.
 *
 * A trainer collects them, on request every N optimizer steps, for chosen
 * nodes' outputs and output gradients and for parameters and parameter
 * gradients (mp_trainer_numerics_enable, then mp_trainer_numerics after a
 * step). Gradients are measured as the low-precision backward sees them:
 * scaled by the loss scale the step ran with (the record says which), so an
 * fp16 share of a gradient is the share that scale would lose.
 *
 * Devices: the CPU measures each tensor with a host pass as the step writes
 * it (activations die early in the arena). A GPU does not stall the step: a
 * collecting step replays a CUDA graph of its own, the same step with one
 * reduction kernel queued after each observed tensor is written (counts by
 * atomics, amax/amin as atomic max on the f32 bits, the same classification
 * rule as the CPU's, so both give equal statistics for equal values); the
 * results are copied to pinned host memory at the step's end and
 * mp_trainer_numerics returns them once that copy is seen finished, usually
 * a step later (mp_trainer_wait makes the newest one available). A node
 * fused into its producer (a ReLU applied by its batch norm) is measured
 * as that producer's output (and output gradient), which holds the fused
 * result, on both devices; its records carry its own node and name, also
 * when it is selected without its producer. Plans also fuse a residual add
 * between a batch norm and its ReLU (CPU plans where the three run natively
 * on the channels-last vector kernels; mp_plan_opts.no_bn_add_relu_fusion);
 * that sum is never stored, so the add has no records (naming it in
 * mp_numerics_opts.nodes is refused). On a GPU
 * the loss scale a gradient record carries is the host's view of it when the
 * step was queued. */
#ifndef MIXPREC_NUMERICS_H
#define MIXPREC_NUMERICS_H

#include "mixprec/train.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The low-precision formats a tensor is measured against. */
typedef enum {
    MP_NUMERICS_FP16 = 0, /**< IEEE binary16: max 65504, min normal 2^-14, min subnormal 2^-24 */
    MP_NUMERICS_BF16 = 1, /**< bfloat16: max 3.39e38, min normal 2^-126, min subnormal 2^-133 */
    MP_NUMERICS_FORMATS = 2
} mp_numerics_format;

/** Lowest octave of the magnitude histogram: bin b counts finite non-zero
 * |x| in [2^(MP_NUMERICS_HIST_MIN + b), 2^(MP_NUMERICS_HIST_MIN + b + 1)). */
#define MP_NUMERICS_HIST_MIN (-150)
/** Octaves of the histogram: 2^-150 .. 2^130 hold every finite non-zero f32. */
#define MP_NUMERICS_HIST_BINS 280

/** One tensor's statistics. Shares are counts over numel. */
typedef struct {
    int64_t numel;        /**< values */
    int64_t nan;          /**< NaN values */
    int64_t inf;          /**< +-inf values */
    int64_t zero;         /**< exact zeros */
    double amax;          /**< largest finite |x| (0 when none) */
    double amin;          /**< smallest finite non-zero |x| (0 when none) */
    /** Finite values that round to +-inf in the format. */
    int64_t overflow[MP_NUMERICS_FORMATS];
    /** Non-zero finite values that round to +-0 in the format. */
    int64_t underflow[MP_NUMERICS_FORMATS];
    /** Values that round to a non-zero subnormal of the format. */
    int64_t subnormal[MP_NUMERICS_FORMATS];
    /** Finite non-zero |x| by octave (see MP_NUMERICS_HIST_MIN). */
    int64_t hist[MP_NUMERICS_HIST_BINS];
} mp_tensor_stats;

/** Statistics of n values of dtype F32, F16 or BF16 (the dtypes activations,
 * gradients and parameters are stored in). */
MP_API mp_status mp_tensor_stats_compute(const void *data, mp_dtype dtype, int64_t n, mp_tensor_stats *out);

/** Values of s whose magnitude times 2^log2_scale is below 2^below_log2,
 * counted from the histogram (exact when the bound is a power of two); any
 * int exponents, however large; 0 for a NULL s. */
MP_API int64_t mp_tensor_stats_below(const mp_tensor_stats *s, int log2_scale, int below_log2);

/** What a record measures (flags, combinable in mp_numerics_opts.kinds). */
typedef enum {
    MP_NUMERICS_OUTPUT = 1,     /**< a node's forward output */
    MP_NUMERICS_GRAD = 2,       /**< the gradient of a node's output (loss-scaled) */
    MP_NUMERICS_PARAM = 4,      /**< a trainable parameter as the forward used it */
    MP_NUMERICS_PARAM_GRAD = 8, /**< a trainable parameter's gradient (loss-scaled, before unscaling) */
    MP_NUMERICS_ALL = 15
} mp_numerics_kind;

/** One measured tensor of one step. */
typedef struct {
    mp_numerics_kind kind; /**< what it is */
    mp_node node;          /**< the node (a parameter's owner) */
    int param;             /**< graph parameter index, or -1 */
    const char *name;      /**< node or parameter name (valid while the graph lives) */
    mp_dtype dtype;        /**< the dtype the values were stored in */
    float scale;           /**< the loss scale the values carry (gradients), else 1 */
    mp_tensor_stats stats; /**< the statistics */
} mp_numerics_record;

/** Which tensors to measure, and when. */
typedef struct {
    int every;          /**< collect on optimizer steps (1-based) divisible by this; 0 -> 1 */
    unsigned kinds;     /**< mp_numerics_kind flags; 0 -> MP_NUMERICS_ALL */
    const char *nodes;  /**< comma-separated node names ("fc1,conv2", no empty name); NULL or "": every node */
} mp_numerics_opts;

/** Start collecting statistics on t's steps (again with new options, or
 * o = NULL to stop). Unknown node names are an error naming them. With
 * accumulation, the step's last micro-batch is measured. CPU and GPU
 * trainers (see the file comment). */
MP_API mp_status mp_trainer_numerics_enable(mp_trainer *t, const mp_numerics_opts *o);

/** The newest finished collection: *records (owned by the trainer, valid
 * until the trainer's next step or next mp_trainer_numerics_enable call,
 * which frees them), *n of them and the optimizer step (1-based) they
 * belong to; *step = 0 and *n = 0 before any. On a GPU a collection not yet
 * returned is returned before a newer one replaces it, so a caller asking
 * after every step sees each collection once, a step late (never waits). */
MP_API mp_status mp_trainer_numerics(mp_trainer *t, const mp_numerics_record **records, int *n, int64_t *step);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_NUMERICS_H */
