/* graph.h — the graph IR: a DAG of op nodes in creation (= topological) order.
 * Each node records the dtype it computes in and the dtype it stores its
 * output in; parameters (fp32 master copies and their gradients) belong to
 * the graph and are shared by every plan compiled from it. */
#ifndef MP_GRAPH_GRAPH_H
#define MP_GRAPH_GRAPH_H

#include <limits.h>

#include "ops/op.h"

#define MP_NAME_MAX 64
/* Elements per sample a source or a flatten may have: shapes and features
 * are ints (2^31 f32 values per sample is 8 GiB) */
#define MP_SAMPLE_NUMEL_MAX INT_MAX

typedef struct {
    mp_op_desc desc;           /* desc.name points at name[] */
    char name[MP_NAME_MAX];
    int n_in;
    int in[MP_MAX_INPUTS];     /* producer node indices (all < this node) */
    mp_shape sample_shape;     /* output shape with batch 1 */
    mp_dtype compute_dtype;    /* set by the precision pass (fp32 before one) */
    mp_dtype storage_dtype;
    bool tf32;                 /* f32 math may use TF32 (the tf32 policy) */
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
    /* recorded by the precision pass (amp/policy.c): the dtype the trainers
     * keep this trainable parameter's value rounded to (F32: an fp32 master
     * is kept), and the dtype it lives in alone on a GPU (F32: it has an f32
     * array there) */
    mp_dtype round_dtype;
    mp_dtype low_only;
} mp_gparam;

struct mp_graph {
    mp_gnode *nodes;
    int n_nodes, cap_nodes;
    mp_gparam *params;
    int n_params, cap_params;
    mp_status status;            /* first construction error */
    char error[512];             /* its message ("": none), which later refusals quote */
    bool params_initialized;
    bool backward_ran;           /* a plan of it ran a backward: its gradients hold values (mp_graph_grad_get) */
    mp_policy_info policy;       /* what the applied precision policy implies (amp/policy.c) */
    /* plans made from this graph and not yet destroyed (graph/plan.c): they
     * hold its dtypes and parameter layout, so the public calls that change
     * those (apply_policy, share_params) refuse while any is alive */
    int live_plans;
    /* optimizers made from this graph and not yet freed (train/optimizer.c):
     * they hold its parameter list, so adding nodes and share_params refuse
     * while any is alive */
    int live_optimizers;
    /* the CPU plan of a trainer in the middle of an accumulated step
     * (train/trainer.c), or NULL: its micro-batches' gradients add up in the
     * parameters' grad arrays, which any other plan's backward would
     * overwrite, so that is refused until the step ends */
    const struct mp_plan *accumulating;
    /* mp_graph_destroy called while plans or optimizers were alive: freed
     * when the last of them goes (mp_graph_user_gone) */
    bool orphaned;
};

/* After a plan or optimizer of g was freed: frees g if it was destroyed
 * while they were alive and none is left. */
void mp_graph_user_gone(mp_graph *g);

/* Record a construction error in g (the first one stays, with the message
 * mp_error just set); returns -1, no node. */
mp_node mp_graph_fail(mp_graph *g, mp_status s);
/* MP_OK where g exists and was built without error; else MP_ERR_INVALID_ARG
 * whose message, led by `who` ("plan", "trainer", ...), quotes the graph's
 * first construction error. */
mp_status mp_graph_check_built(const mp_graph *g, const char *who);
/* Add a node; infers shapes with batch 1 and creates its parameters. */
mp_node mp_graph_add(mp_graph *g, mp_op_kind kind, const char *name, const mp_op_attr *attr,
                     const mp_node *inputs, int n_in);
/* Shape of node n's output for a batch of `batch` samples. */
mp_shape mp_graph_node_shape(const mp_graph *g, mp_node n, int batch);
/* How many nodes use parameter k (several after mp_graph_share_params). */
int mp_graph_param_users(const mp_graph *g, int k);
/* The dtype parameter k lives in alone while training (mp_gparam.low_only:
 * F16/BF16 without an fp32 master, else F32). The CPU trainer and the GPU
 * plan share this rule. */
mp_dtype mp_graph_param_low_only(const mp_graph *g, int k);
/* Values v[0..n) for parameter p, checked as mp_graph_param_set and the
 * weights loader (train/weights.c) check them before anything changes:
 * finite also once rounded to the dtype p trains in without an fp32 master
 * (f16 turns 70000 into inf), and a BatchNorm running variance >= 0.
 * MP_ERR_NONFINITE / MP_ERR_FORMAT naming `where`, the tensor, the element
 * (and the dtype). The trainer's parameter set goes through param_set. */
mp_status mp_gparam_check_values(const mp_gparam *p, const float *v, int64_t n, const char *where);
/* Whether p is a batch norm's running statistic (running_mean or
 * running_var, not trained); *initial (may be NULL): the value it starts
 * from and restarts at after a NaN/inf (mean 0, variance 1). */
bool mp_gparam_running_stat(const mp_gparam *p, float *initial);
/* mp_gparam_check_values over every parameter's held values: what a trainer
 * or an evaluation is about to run on. */
mp_status mp_graph_check_param_values(const mp_graph *g, const char *where);
/* The trainers keep each parameter whose round_dtype is F16/BF16 at a value
 * of that dtype (rounded to nearest even), from the first step on, as the GPU
 * holds them: this rounds those for which select(arg, k) is true (select
 * NULL: all); a no-op for parameters with fp32 masters. */
void mp_graph_round_low_weights(mp_graph *g, bool (*select)(const void *arg, int k), const void *arg);

#endif
