/* policy.h — precision policies as a pass over the graph: each sets the
 * dtype every node computes in and stores its output in (DESIGN.md, "the
 * contract"). Kernels never test the policy; the executor reads node dtypes. */
#ifndef MP_AMP_POLICY_H
#define MP_AMP_POLICY_H

#include <stdio.h>

#include "graph/graph.h"

typedef enum {
    MP_PRECISION_FP32 = 0, /* Apex O0 */
    MP_PRECISION_TF32,     /* fp32 storage, TF32 math where the backend has it */
    MP_PRECISION_AMP_FP16, /* O1 / torch.autocast: allow-list ops in fp16 */
    MP_PRECISION_AMP_BF16,
    MP_PRECISION_O2_FP16,  /* Apex O2: low weights and activations, BN fp32 */
    MP_PRECISION_O2_BF16,
    MP_PRECISION_FP16,     /* O3 / network_to_half: all low, no master weights */
    MP_PRECISION_BF16,
    MP_PRECISION_COUNT
} mp_precision;

typedef struct {
    mp_precision precision;
    bool bn_low;           /* fp16/bf16 only: BatchNorm in low precision too */
    const char *overrides; /* "conv1=fp32,fc=bf16" (NULL = none) */
} mp_policy_opts;

mp_status mp_precision_parse(const char *name, mp_precision *out);
const char *mp_precision_name(mp_precision p);
/* "fp32, tf32, amp-fp16, ..." */
const char *mp_precision_list(void);
/* The low dtype of a policy (F16/BF16), or F32 for fp32/tf32. */
mp_dtype mp_precision_low_dtype(mp_precision p);
/* Whether the policy keeps fp32 master weights (all but fp16/bf16). */
bool mp_precision_has_master(mp_precision p);

/* Set every node's compute and storage dtype; then apply overrides. An
 * override naming a missing node or an unknown dtype is an error. */
mp_status mp_graph_apply_policy(mp_graph *g, mp_policy_opts o);

/* One line per node: name, op, compute dtype, storage dtype. */
void mp_graph_print_precision(const mp_graph *g, FILE *out);

#endif
