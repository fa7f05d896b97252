/* policy.h — the precision pass's internal side (the public side is
 * mixprec/precision.h): per-node dtype changes after the pass (the
 * auto-fallback) that keep every parameter's record up to date, and the
 * policy's name for logs and checkpoints. Nothing outside src/amp/ reads the
 * policy enum: later stages read what the pass recorded on the graph (node
 * compute/storage dtypes and tf32, each parameter's round_dtype and
 * low_only, graph->policy's implications). */
#ifndef MP_AMP_POLICY_H
#define MP_AMP_POLICY_H

#include <stdio.h>

#include "graph/graph.h"

/* Move node n to fp32 (compute and storage), e.g. a layer that overflows in
 * the forward pass, and record its parameters again. */
void mp_policy_node_to_f32(mp_graph *g, mp_node n);

/* The applied policy's name ("fp32" before any). */
const char *mp_graph_policy_name(const mp_graph *g);

#endif
