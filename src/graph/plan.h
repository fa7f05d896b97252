/* plan.h — a graph compiled for one batch size and mode: per-node op info,
 * library primitives, and one arena holding every activation, gradient,
 * saved tensor and workspace at offsets planned before the first step. */
#ifndef MP_GRAPH_PLAN_H
#define MP_GRAPH_PLAN_H

#include "graph/arena_plan.h"
#include "graph/graph.h"
#include "train/step_backend.h"

typedef struct {
    mp_op_info info;
    mp_op_call call;      /* tensors bound to the arena and the parameters */
    bool in_backward;     /* on the path from a trainable parameter to the loss */
    bool staged;          /* low-precision storage or compute: kernels run in f32
                             on staged copies (see exec_stage.c) */
    bool native;          /* ...except this one: it reads and writes its bf16
                             tensors directly (oneDNN's bf16 primitives on CPUs
                             with bf16 kernels, or our bf16-storage kernels) */
    bool relu_fused;      /* batchnorm2d applying the ReLU that reads it (plan_fuse.h) */
    bool fused_away;      /* ...that ReLU: runs nothing, shares the batch norm's tensors */
    bool data_set;        /* an input, labels or targets node: mp_plan_set_input/_labels gave it a batch */
    int fused_into;       /* a fused_away node: the batch norm that runs it */
    int add_fused;        /* batchnorm2d: the residual add fused in, with the ReLU after it if
                             relu_fused (plan_fuse.h), else 0 (node 0 is never such an add) */
    int dw_fused;         /* batchnorm2d with its ReLU fused: the depthwise conv2d that applies both as it
                             loads (GPU training plans, plan_fuse.h); that conv2d: this batch norm; else 0 */
    int pool_fused;       /* the same with an avgpool2d (k x k, stride k, no padding; 2x2 on CPU plans) that
                             also hands its output gradient to the batch norm's backward (training plans);
                             that avgpool2d: this batch norm; else 0 */
    bool dx_over_dy;      /* batchnorm2d whose backward writes its input gradient over its output
                             gradient (plan_inplace.h) */
    unsigned char grad_alias; /* add: bit k set where input k's gradient is this add's output gradient's
                                 memory (plan_grad_alias.h) */
    size_t out_off, grad_off, saved_off;
    int out_last;                  /* the last plan step its output's memory is kept for (plan.c: node i's
                                      forward is step i, its backward 2n-1-i; 2n+1 = the whole step) */
    size_t ws_fwd_off, ws_bwd_off; /* device plans: the node's workspace in forward and in backward */
    size_t scratch_off;            /* gradients its backward computes aside to add them (own on a device,
                                      shared on the CPU) */
    void *low_param[MP_MAX_PARAMS]; /* trainable params cast to the compute dtype,
                                       refreshed every forward; NULL if f32 */
    double fwd_seconds, bwd_seconds;  /* with opts.profile */
} mp_pnode;

typedef struct mp_device_plan mp_device_plan; /* a GPU backend's state (cuda/cuda_plan.c) */
typedef struct mp_exec_backend mp_exec_backend; /* where nodes run (graph/exec_backend.h) */

struct mp_plan {
    mp_graph *g;               /* counts the plan in g->live_plans from its allocation to mp_plan_destroy */
    mp_plan_opts o;
    int n;
    mp_pnode *nodes;
    char *arena;          /* arena_bytes, 64-byte aligned */
    size_t arena_bytes;
    mp_arena_peak arena_peak; /* the most bytes alive at one step, by kind (arena_plan.h) */
    char *workspace;      /* shared by all ops (one op runs at a time) */
    char *stage;          /* f32 copies for staged nodes (one op at a time) */
    bool *grad_written;   /* per node, during backward */
    int n_losses;
    int losses[MP_MAX_LOSSES]; /* loss nodes backward can start from */
    bool *reach[MP_MAX_LOSSES]; /* per loss: the nodes its backward visits */
    uint64_t step;        /* forward passes run, for dropout seeds */
    const mp_exec_backend *be; /* where the nodes run (chosen from opts.device) */
    mp_device_plan *dev;  /* the GPU backend's state: non-NULL when arena, workspace,
                             scratch and node tensors are device memory */
    bool onednn;          /* CPU: heavy ops through oneDNN (else the reference kernels) */
    mp_dtype *grad_dtype; /* per graph parameter, its gradient's dtype (mp_plan_grad_dtype) */
    /* Called after node i's backward, when the gradients of its parameters
     * are final for this backward (data-parallel training starts their
     * all-reduce there); NULL = none. */
    mp_status (*grad_ready)(void *arg, int node);
    void *grad_ready_arg;
    /* Numerics statistics (train/numerics_collect.h): called with node i's
     * output after its forward (grad false) and with its output's gradient,
     * complete, before its backward (grad true); host plans, NULL = none. */
    mp_status (*observe)(void *arg, int node, bool grad, const mp_tensor *t);
    void *observe_arg;
    bool replaying; /* mp_plan_find_nonfinite_forward's replay, or a checked backward, is running */
    bool forward_ran;  /* a forward (or find_nonfinite_forward's replay) completed: backward may run */
    int changed_source; /* 1 + the input, labels or targets node given a new batch after the last forward
                           (a backward then would mix two batches: refused), or 0 */
    bool backward_ran; /* a backward ran since the last forward: intermediates it no longer needed may be
                          overwritten (mp_plan_read refuses them; a one-loss plan refuses another backward) */
    struct mp_plan_so *so; /* opts.second_order: tangent buffers and state (second_order.h), else NULL */
};

/* MP_OK unless an input, labels or targets node got a new batch after the
 * last forward (a pass reading the forward's values would mix batches):
 * then MP_ERR_INVALID_ARG naming `what` and the node. */
mp_status mp_plan_check_batch_unchanged(const mp_plan *p, const char *what);

/* Whether p keeps its parameter gradients in the arena (opts.grads_in_arena
 * on a GPU training plan with one backward pass per forward). */
bool mp_plan_grads_in_arena(const mp_plan *p);
/* Whether several backward passes may follow one forward (several losses,
 * or opts.repeat_backward): the forward's outputs and saved tensors then
 * stay until the step's end. */
bool mp_plan_backward_repeats(const mp_plan *p);
/* The dtype of graph parameter k's gradient on p's device: F16/BF16 under
 * opts.low_grads (see mixprec/plan.h), else F32 (always F32 on the CPU); fixed
 * when the plan is created, as its storage is. */
mp_dtype mp_plan_grad_dtype(const mp_plan *p, int k);
/* Graph parameter k's gradient is f32 sums, never rounded to its node's
 * compute dtype: opts.f32_weight_grads and k has an fp32 master. */
bool mp_plan_f32_weight_grad(const mp_plan *p, int k);

/* Scratch node i's backward needs for the gradients it computes aside and
 * adds (plan.c). */
size_t mp_plan_scratch_bytes(const mp_plan *p, int i);

/* Backward of node i through scratch (exec.c): point the call's input
 * gradients that already hold a value (taken) and its parameter gradients
 * that are not fresh at node i's scratch; the caller adds them after. */
void mp_plan_gradients_to_scratch(const mp_plan *p, int i, mp_op_call *c, const bool *taken, const bool *fresh);

/* Backward from loss node `loss` with d(loss) read from `seed` (a host
 * value or a device scalar, train/step_backend.h). */
mp_status mp_plan_backward_seeded(mp_plan *p, mp_node loss, mp_seed seed);
/* mp_plan_backward_checked from any of the plan's losses. */
mp_status mp_plan_backward_checked_from(mp_plan *p, mp_node loss, float seed, mp_nonfinite_site *site);

#endif
