/** @file mixprec/precision.h
 * Precision policies: a pass over the graph that sets the dtype every node
 * computes in and stores its output in, and what every parameter is trained
 * in (an fp32 master or its node's f16/bf16). Kernels never test the policy;
 * everything later stages need is recorded on the nodes and parameters, and
 * what the policy implies for training (loss scaling, master weights, the
 * all-reduce dtype) is one query, mp_graph_policy.
 *
 * | policy   | like                 | compute                            | master | loss scaling |
 * |----------|----------------------|------------------------------------|--------|--------------|
 * | fp32     | Apex O0              | fp32                               | -      | none         |
 * | tf32     | PyTorch's default    | fp32 storage, TF32 convs and GEMMs | -      | none         |
 * | amp-fp16 | O1, torch.autocast   | allow-list f16, deny-list fp32     | fp32   | dynamic      |
 * | amp-bf16 | autocast(bf16)       | as amp-fp16 in bf16                | fp32   | none         |
 * | o2-fp16  | Apex O2              | all low but BatchNorm              | fp32   | dynamic      |
 * | o2-bf16  | O2 in bf16           | all low but BatchNorm              | fp32   | none         |
 * | fp16     | O3, network_to_half  | all low, BatchNorm fp32 (bn_low)   | none   | none         |
 * | bf16     | O3 in bf16           | all low, BatchNorm fp32 (bn_low)   | none   | none         |
 *
 * Allow-list: convolutions and linear layers. Deny-list: losses and BatchNorm
 * statistics. Logits feeding a loss and the loss are always fp32. */
#ifndef MIXPREC_PRECISION_H
#define MIXPREC_PRECISION_H

#include "mixprec/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The policies of the table above. */
typedef enum {
    MP_PRECISION_FP32 = 0,
    MP_PRECISION_TF32,
    MP_PRECISION_AMP_FP16,
    MP_PRECISION_AMP_BF16,
    MP_PRECISION_O2_FP16,
    MP_PRECISION_O2_BF16,
    MP_PRECISION_FP16,
    MP_PRECISION_BF16,
    MP_PRECISION_COUNT
} mp_precision;

/** Policy options. */
typedef struct {
    mp_precision precision; /**< the policy */
    bool bn_low;           /**< fp16/bf16 only (an error otherwise): BatchNorm computes in the low dtype too */
    /** per-layer dtypes, "conv1=fp32,fc=bf16" (NULL or "": none); names must exist, each layer once, no
     * empty entry (no leading, doubled or trailing comma) */
    const char *overrides;
} mp_policy_opts;

/** "fp32", "amp-bf16", ... -> the policy; errors list the known names. */
MP_API mp_status mp_precision_parse(const char *name, mp_precision *out);
/** The policy's name ("?" for an unknown value). */
MP_API const char *mp_precision_name(mp_precision p);
/** "fp32, tf32, amp-fp16, amp-bf16, o2-fp16, o2-bf16, fp16, bf16". */
MP_API const char *mp_precision_list(void);

/** Apply a policy (again, if one was applied before): sets every node's
 * compute and storage dtype, then the overrides, then each parameter's
 * training dtype. An override naming a missing node or an unknown dtype is an
 * error naming it. Call before making plans or trainers: plans hold the
 * dtypes (their buffers are sized for them), so while any plan or trainer
 * of g is alive this is refused (MP_ERR_INVALID_ARG, g unchanged); destroy
 * them, apply, then make new ones. */
MP_API mp_status mp_graph_apply_policy(mp_graph *g, mp_policy_opts o);

/** What the applied policy implies for training. */
typedef struct {
    mp_precision precision;   /**< the policy (fp32 before any was applied) */
    mp_dtype low_dtype;       /**< its f16/bf16, or F32 for fp32 and tf32 */
    bool master_weights;      /**< fp32 master weights are kept (all but fp16 and bf16) */
    bool loss_scaling;        /**< the loss is scaled by default (amp-fp16, o2-fp16) */
    bool tf32;                /**< f32 convolutions and GEMMs may use TF32 math */
    mp_dtype allreduce_dtype; /**< default gradient all-reduce dtype: the low dtype, or F32 */
    bool bn_low;              /**< BatchNorm computes in the low dtype */
} mp_policy_info;
/** The applied policy's implications (one place, so no caller decides them again). */
MP_API mp_status mp_graph_policy(const mp_graph *g, mp_policy_info *out);

/** One node's precision as the policy set it. */
typedef struct {
    mp_dtype compute;  /**< the dtype its math runs in (inputs and weights cast to it) */
    mp_dtype storage;  /**< the dtype its output is stored in */
    bool tf32;         /**< f32 math may use TF32 (tf32 policy, f32 nodes) */
} mp_node_precision;
/** Node n's precision. */
MP_API mp_status mp_graph_node_precision(const mp_graph *g, mp_node n, mp_node_precision *out);
/** One line per node: name, op, compute dtype, storage dtype (NULL g or out:
 * nothing printed). */
MP_API void mp_graph_print_precision(const mp_graph *g, FILE *out);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_PRECISION_H */
