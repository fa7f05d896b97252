/* cuda_optim.h — the device side of a training step after backward, with no
 * host synchronization: the fused unscale + inf/NaN check,
 * the global gradient norm and clipping, fused SGD / Adam / AdamW over f32
 * master weights that skip themselves on a device found-inf flag and refresh
 * the f16/bf16 weight copies (SGD momentum in f16/bf16 for weights without
 * an f32 master), and the loss-scale update. Every decision is
 * taken on the device from device scalars, so the whole sequence can be
 * captured once into a CUDA graph and replayed; the host reads the state only
 * when it logs or checkpoints (the *_download / *_get_* calls, which
 * synchronize ctx->stream).
 *
 * One iteration, in stream order (all on ctx->stream):
 *   backward of loss * scale               (scale: mp_scaler.scale on the device)
 *   mp_cuda_unscale_check(ctx, s, g, grads) grads *= 1/scale; s->group_found[g]
 *   mp_cuda_clip_by_value / _by_norm       optional, on the true gradients
 *   mp_cuda_optim_step(ctx, opt, &(mp_cuda_step_args){.lr_device = lr,
 *                      .found_inf = &s->group_found[g]})
 *   mp_cuda_scaler_update(ctx, s)          reads and clears the flags
 *
 * The arithmetic is the CPU's, operation for operation, in IEEE round-to-
 * nearest without FMA contraction (optim/sgd.c, optim/adam.c, amp/scaler.c),
 * so results match the CPU oracle to the last bit in practice; the Adam bias
 * corrections use the device's double pow (within 2 ulp of glibc's).
 *
 * Tables (mp_cuda_grads, mp_cuda_optim, mp_cuda_casts) are built once at
 * setup (device allocation, synchronous copies); the step calls allocate
 * nothing. Errors are one mp_error line; launch failures come through
 * mp_cuda_check. */
#ifndef MP_CUDA_CUDA_OPTIM_H
#define MP_CUDA_CUDA_OPTIM_H

#ifdef __cplusplus
extern "C" {
#endif
/* These C headers carry no extern "C" of their own; core/error.h must come
 * before cuda_ctx.h includes it. */
#include "amp/scaler.h"
#include "core/error.h"
#include "optim/optim.h"
#ifdef __cplusplus
}
#endif

#include "cuda/cuda_ctx.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- gradient lists ------------------------------------------------------ */

/* A device table over n gradient tensors (device pointers), for the
 * unscale/check, the norm and the clips; keeps the norm's scratch. The
 * typed form takes each tensor's dtype (F32, F16, BF16; dtypes NULL: all
 * f32): f16/bf16 elements are read as f32 and rescaled values stored back
 * rounded to nearest even. */
typedef struct mp_cuda_grads mp_cuda_grads;
mp_status mp_cuda_grads_create(mp_cuda_ctx *ctx, float *const *grads, const int64_t *numel, int n,
                               mp_cuda_grads **out);
mp_status mp_cuda_grads_create_typed(mp_cuda_ctx *ctx, void *const *grads, const mp_dtype *dtypes,
                                     const int64_t *numel, int n, mp_cuda_grads **out);
void mp_cuda_grads_destroy(mp_cuda_grads *g);

/* ---- loss scaler ---------------------------------------------------------- */

/* The device keeps an mp_scaler (amp/scaler.h), the same bytes as the host's,
 * copied to and from it as a whole. Create allocates and uploads; upload and
 * download copy the whole struct and synchronize ctx->stream. */
mp_status mp_cuda_scaler_create(mp_cuda_ctx *ctx, const mp_scaler *host, mp_scaler **dev);
void mp_cuda_scaler_destroy(mp_scaler *dev);
mp_status mp_cuda_scaler_upload(mp_cuda_ctx *ctx, const mp_scaler *host, mp_scaler *dev);
mp_status mp_cuda_scaler_download(mp_cuda_ctx *ctx, const mp_scaler *dev, mp_scaler *host);

/* Fused unscale + inf/NaN check: every element becomes x * (float)(1.0 /
 * (double)scale) with the scale read from s on the device (no multiply when
 * it is 1); a non-finite result raises s->group_found[group] and s->found_inf
 * to at least MP_FOUND_GRADIENT (bit test). Accumulates over calls. */
mp_status mp_cuda_unscale_check(mp_cuda_ctx *ctx, mp_scaler *s, int group, const mp_cuda_grads *g);

/* After a micro-batch's forward: a NaN/inf f32 loss *loss_dev raises
 * found_inf and every group's flag to MP_FOUND_FORWARD. */
mp_status mp_cuda_check_loss(mp_cuda_ctx *ctx, const float *loss_dev, mp_scaler *s);

/* One batch norm's running statistic on the device, for the check below. */
typedef struct {
    float *data;
    int n;
    int node;    /* its batch norm's graph node */
    float reset; /* its initial value: 0 for a mean, 1 for a variance */
} mp_cuda_running_stat;

/* What mp_cuda_check_running_stats found since the host last zeroed it
 * (all zero: nothing). */
typedef struct {
    /* (s->ends << 31) | (INT_MAX - node): the latest step's (its scaler
     * update's index, mp_scaler.ends) first batch norm in graph order */
    unsigned long long last;
    unsigned long long reset; /* values restarted */
} mp_cuda_stats_record;

/* After a micro-batch's forward: each NaN/inf value of the n statistics
 * stats (a device array) restarts from its reset value, raises found_inf and
 * every group's flag to MP_FOUND_FORWARD, and is counted in *rec (device),
 * whose last it raises to this step's key for its node. The host reads rec,
 * decodes it with mp_cuda_stats_record_node, and zeroes it. */
mp_status mp_cuda_check_running_stats(mp_cuda_ctx *ctx, const mp_cuda_running_stat *stats, int n, mp_scaler *s,
                                      mp_cuda_stats_record *rec);
/* rec->last's node (-1: none) and the scaler update index of its step. */
int mp_cuda_stats_record_node(const mp_cuda_stats_record *rec, long long *end);

/* The one update per iteration, after the optimizers: one device thread runs
 * the host's rule (amp/scaler_rule.h) and clears the flags. */
mp_status mp_cuda_scaler_update(mp_cuda_ctx *ctx, mp_scaler *s);

/* ---- norm and clipping (on the unscaled gradients) ----------------------- */

/* *norm_dev (device) = sqrt(sum of g^2) accumulated in double, summed in a
 * fixed order (the same bits on every run). */
mp_status mp_cuda_grad_norm(mp_cuda_ctx *ctx, mp_cuda_grads *g, double *norm_dev);
/* Each element to [-clip_value, clip_value] (fminf(fmaxf(g, -v), v), as the
 * CPU trainer; clip_value > 0). */
mp_status mp_cuda_clip_by_value(mp_cuda_ctx *ctx, const mp_cuda_grads *g, float clip_value);
/* As the CPU trainer: norm as above; when norm > max_norm every element is
 * multiplied by (float)(max_norm / (norm + 1e-6)), the coefficient computed
 * on the device. norm_dev (device, may be NULL) receives the norm before
 * clipping (max_norm > 0). */
mp_status mp_cuda_clip_by_norm(mp_cuda_ctx *ctx, mp_cuda_grads *g, float max_norm, double *norm_dev);

/* ---- optimizers ----------------------------------------------------------- */

/* One trainable tensor, all device pointers. */
typedef struct {
    float *param;       // (n) f32 master weights, updated in place; NULL with no_master: the low copy is the weight
    const void *grad;   // (n) gradient (unscaled): f32, or of low_dtype when grad_dtype says so
    void *low;          // (n) f16/bf16 copy rewritten (RNE) from the updated param, or NULL
    mp_dtype low_dtype; /* MP_DTYPE_F16 or MP_DTYPE_BF16 when low != NULL */
    mp_dtype grad_dtype; /* MP_DTYPE_F32 (0), or low_dtype: a plan's low_grads gradient (needs low) */
    int64_t n;
    bool decay;         /* takes weight decay (false for biases and BN, as on the CPU) */
    bool no_master;     /* with low: no master weights (fp16/bf16 policies): after each update the f32
                         * weight is left at the value its low copy holds, as the CPU trainer rounds it */
    const char *name;   /* for messages; may be NULL; not kept */
    /* The SGD momentum buffer's dtype, as mp_param_ref.state_dtype: MP_DTYPE_F32 (0), or low_dtype for a
     * weight with low and no_master (step_cuda.c passes it for those without an f32 array): the buffer is
     * stored in that dtype, b rounded to nearest even and the rounded b used, bit for bit as optim/sgd.c.
     * Ignored by Adam/AdamW, whose moments stay f32 (v = g^2 under/overflows f16). */
    mp_dtype state_dtype;
    /* filter[2] > 0: a conv filter of (k, c, rs) = filter whose param, grad, low copy (and so the state) the
     * device keeps in KRSC order; checkpoint transfers (mp_cuda_optim_download/upload) permute its state.
     * All 0 (the default): the CPU layout. */
    int filter[3];
} mp_cuda_param_ref;

/* SGD (momentum, Nesterov, L2 decay) or Adam / AdamW over f32 master
 * weights with torch.optim semantics, exactly as optim/optim.h; state
 * buffers (zeroed) and the step count live on the device. */
typedef struct mp_cuda_optim mp_cuda_optim;

/* Options are checked by mp_optim_create's rules (errors name the CLI
 * option) and get its defaults. */
mp_status mp_cuda_optim_create(mp_cuda_ctx *ctx, mp_optim_opts o, const mp_cuda_param_ref *params, int n_params,
                               mp_cuda_optim **out);
void mp_cuda_optim_destroy(mp_cuda_optim *o);

typedef struct {
    /* The learning rate. By value (lr) it is frozen into a captured CUDA
     * graph; with lr_device non-NULL it is read from that device scalar when
     * the step runs, so a graph captured once follows the schedule: write it
     * before each replay with mp_cuda_set_f32 (outside the capture). */
    float lr;
    const float *lr_device;
    /* Device flag (e.g. &scaler->found_inf): non-zero skips the step on the
     * device, leaving weights, low copies, state and step count bit-identical.
     * NULL: never skip. */
    const int *found_inf;
} mp_cuda_step_args;

/* One update of every parameter, then its low-precision copy, in one pass;
 * the step count (Adam's t) advances on the device only when not skipped.
 * A by-value lr must be finite and >= 0. */
mp_status mp_cuda_optim_step(mp_cuda_ctx *ctx, mp_cuda_optim *o, const mp_cuda_step_args *a);

/* State of parameter i, device pointers: as mp_optim_state_tensors (SGD 0
 * or 1 buffer, Adam/AdamW m then v), each n elements of
 * mp_cuda_optim_state_dtype (f32, or f16/bf16 for an SGD momentum buffer of
 * state_dtype F16/BF16). */
int mp_cuda_optim_state_tensors(const mp_cuda_optim *o, int param_index, void **bufs);
mp_dtype mp_cuda_optim_state_dtype(const mp_cuda_optim *o, int param_index);
mp_optim_opts mp_cuda_optim_options(const mp_cuda_optim *o);
/* Steps taken (synchronizes ctx->stream: logging and checkpoints only) and
 * its restore. */
mp_status mp_cuda_optim_get_step_count(mp_cuda_ctx *ctx, const mp_cuda_optim *o, int64_t *steps);
mp_status mp_cuda_optim_set_step_count(mp_cuda_ctx *ctx, mp_cuda_optim *o, int64_t steps);
/* Checkpoints (optim_state_cuda.cu): the state buffers and the step count
 * into (download) or from (upload) a host mp_optim over the same parameters
 * in the same order, e.g. the one whose state train/checkpoint.c saves and
 * loads. Kind, parameter count and each parameter's element and buffer
 * counts must match (errors say which). The host's buffers are f32: f16/bf16
 * device state is converted on the host (exactly to f32; back rounded to
 * nearest even, exact for values saved from such state). Upload overwrites
 * the device buffers in place: a CUDA graph that captured them stays valid.
 * Both synchronize ctx->stream. */
mp_status mp_cuda_optim_download(mp_cuda_ctx *ctx, const mp_cuda_optim *dev, mp_optim *host);
mp_status mp_cuda_optim_upload(mp_cuda_ctx *ctx, const mp_optim *host, mp_cuda_optim *dev);

/* *dev = value in stream order (a one-thread kernel: no staging, no sync);
 * e.g. the learning rate read through mp_cuda_step_args.lr_device. */
mp_status mp_cuda_set_f32(mp_cuda_ctx *ctx, float *dev, float value);

/* ---- weight casts ------------------------------------------------------- */

/* f32 master -> f16/bf16 copy pairs, device pointers, for the initial cast
 * and policies that refresh casts apart from the optimizer step. */
typedef struct {
    const float *src; // (n)
    void *dst;        // (n) mp_f16 or mp_bf16
    mp_dtype dtype;   /* MP_DTYPE_F16 or MP_DTYPE_BF16 */
    int64_t n;
} mp_cuda_cast_ref;

typedef struct mp_cuda_casts mp_cuda_casts;
mp_status mp_cuda_casts_create(mp_cuda_ctx *ctx, const mp_cuda_cast_ref *pairs, int n, mp_cuda_casts **out);
void mp_cuda_casts_destroy(mp_cuda_casts *c);
/* dst = RNE(src) bit for bit as mp_convert_f32_to_f16 / _bf16 (NaN
 * payloads too); skipped on the device when found_inf (may be NULL) is
 * non-zero (the masters did not change). */
mp_status mp_cuda_cast_weights(mp_cuda_ctx *ctx, const mp_cuda_casts *c, const int *found_inf);

#ifdef __cplusplus
}
#endif
#endif
