/* graph.h — the graph IR: a DAG of op nodes in creation (= topological) order.
 * Each node records the dtype it computes in and the dtype it stores its
 * output in; parameters (fp32 master copies and their gradients) belong to
 * the graph and are shared by every plan compiled from it. */
#ifndef MP_GRAPH_GRAPH_H
#define MP_GRAPH_GRAPH_H

#include "ops/op.h"

#define MP_NAME_MAX 64

typedef struct {
    mp_op_desc desc;           /* desc.name points at name[] */
    char name[MP_NAME_MAX];
    int n_in;
    int in[MP_MAX_INPUTS];     /* producer node indices (all < this node) */
    mp_shape sample_shape;     /* output shape with batch 1 */
    mp_dtype compute_dtype;    /* fp32 everywhere until precision policies land */
    mp_dtype storage_dtype;
    int first_param;           /* index into graph params */
    int n_params;
    int n_consumers;
    bool is_output;            /* kept readable after a step (logits, loss) */
} mp_gnode;

typedef struct {
    char name[2 * MP_NAME_MAX];  /* "<node>.<param>" */
    int node;
    mp_param_spec spec;          /* spec.shape is the full parameter shape */
    float *data;                 /* (spec.shape) fp32 master */
    float *grad;                 /* (spec.shape) or NULL for buffers */
    bool grad_fresh;             /* no gradient written since zero_grad */
} mp_gparam;

struct mp_graph {
    mp_gnode *nodes;
    int n_nodes, cap_nodes;
    mp_gparam *params;
    int n_params, cap_params;
    mp_status status;            /* first construction error */
    bool params_initialized;
    int precision;               /* mp_precision set by the policy pass (0 = fp32) */
};

/* Add a node; infers shapes with batch 1 and creates its parameters. */
mp_node mp_graph_add(mp_graph *g, mp_op_kind kind, const char *name, const mp_op_attr *attr,
                     const mp_node *inputs, int n_in);
/* Shape of node n's output for a batch of `batch` samples. */
mp_shape mp_graph_node_shape(const mp_graph *g, mp_node n, int batch);
/* How many nodes use parameter k (several after mp_graph_share_params). */
int mp_graph_param_users(const mp_graph *g, int k);
/* The dtype parameter k lives in while training when it has no fp32 master
 * weights: F16/BF16 when the graph's policy keeps none (fp16, bf16) and k is
 * trainable and used by exactly one node, which computes in that dtype (its
 * cast is the weight, as a PyTorch `.half()` model's); else F32. The CPU
 * trainer and the GPU plan share this rule. */
mp_dtype mp_graph_param_low_only(const mp_graph *g, int k);
/* Under the policies without master weights (fp16, bf16) the trainers keep
 * each trainable parameter of a node computing in f16/bf16 at a value of that
 * dtype (rounded to nearest even), from the first step on, as the GPU holds
 * them: this rounds those for which select(arg, k) is true (select NULL:
 * all); a no-op under the other policies. */
void mp_graph_round_low_weights(mp_graph *g, bool (*select)(const void *arg, int k), const void *arg);

#endif
