/* doctor.h — the precision doctor's analysis: numerics statistics of K probe
 * steps trained in fp32 (mixprec/numerics.h) in, a per-layer prediction of
 * what fp16 and bf16 policies will do out (forward overflow, gradient
 * underflow at the scale the loss scaler will run at, the loss-scale window
 * keeping both in range), a verdict, and the policy that avoids the
 * predicted failures (amp/policy_file.h writes it). */
#ifndef MP_AMP_DOCTOR_H
#define MP_AMP_DOCTOR_H

#include <stdio.h>

#include "mixprec.h"

typedef struct {
    mp_precision target;     /* the policy the run will use (amp-fp16 by default) */
    int64_t planned_steps;   /* the run's optimizer steps: ranges are extrapolated to it */
    mp_loss_scaling loss_scaling; /* as mp_trainer_opts (AUTO: the policy's) */
    mp_scaler_opts scaler;   /* the run's scaler options */
    double margin;           /* amax x margin must stay below fp16's 65504 (0 -> 2) */
    double underflow_max;    /* share of a gradient's non-zero values allowed below fp16's 2^-24 (0 -> 1e-3) */
    /* the run's divergence bound, as mp_trainer_opts: more than max_skip_share
     * (0 -> 0.05) of the steps skipped once skip_check_after (0 -> 100) steps ran */
    double max_skip_share;
    int skip_check_after;
    const char *overrides;   /* the user's per-layer overrides ("fc1=fp32,..."), part of the analysed policy */
    /* the run trains on a GPU: with loss scaling or clipping (clips) it
     * writes parameter gradients in fp32 whatever their node computes in
     * (cuBLASLt and cuDNN accumulate and write fp32), where the CPU rounds
     * them to the node's dtype; then only activation gradients can leave
     * fp16's range */
    bool gpu, clips;
} mp_doctor_opts;

typedef struct {
    mp_node node;
    char name[64], op[24];
    double out_seen, out_pred;   /* output amax: largest seen, predicted at the planned end */
    double in_pred;              /* largest predicted input amax */
    double grad_amax;            /* largest gradient (output and parameter gradients) seen */
    double under_settle;         /* worst share of its fp16 gradients lost at the target's scale */
    int lo_log2;                 /* smallest log2 scale keeping every one of its gradients' losses <=
                                    underflow_max: its most demanding gradient's (999: none, or no gradient) */
    bool fwd_risk;               /* the target policy overflows here in the forward pass */
    bool grad_fp16;              /* its gradients are fp16 under the target policy */
    const char *fix;             /* "fp32" or NULL */
    bool user;                   /* the user's --precision-override names it */
} mp_doctor_layer;

typedef struct {
    int n;
    mp_doctor_layer *layers;
    int64_t probe_steps, planned_steps;
    mp_precision target;
    bool scaling, static_scale;  /* the target's loss scaling as the run would do it */
    int lo_log2, hi_log2;        /* the loss-scale window (lo > hi: none) */
    int settle_log2;             /* the scale the run's scaler will run at */
    double under_settle;         /* worst fp16 gradient share lost there */
    int fwd_risks;               /* layers at forward risk under the target */
    bool target_ok;              /* the target works unchanged */
    /* a dynamic scale starting above the largest that fits backs off, one
     * skipped step per octave (x hysteresis): expected skips, over the first
     * skip_window steps (min(planned, skip_check_after)); harmless when within
     * the run's divergence bound max_skip_share */
    int startup_skips, skip_window, start_log2; /* start_log2: the initial scale */
    double max_skip_share;
    bool startup_harmless;
    bool amp_ok, fp16_ok, bf16_ok; /* amp-fp16 (dynamic scaling), pure fp16 (scale 1), bf16: range-wise */
    double fp16_under1;          /* pure fp16: worst share lost at scale 1 */
    /* the recommended policy */
    mp_precision precision;
    char overrides[1024];        /* "fc1=fp32,..." ("" none) */
    bool set_scale;              /* the policy sets the loss scale */
    bool policy_static;
    float init_scale, min_scale;
    char verdict[700];
} mp_doctor_report;

typedef struct mp_doctor mp_doctor;

/* A doctor collecting probe steps of g's trainer (fp32, unscaled). */
mp_status mp_doctor_create(const mp_graph *g, mp_doctor **out);
void mp_doctor_destroy(mp_doctor *d);
/* One probe step's records (mp_trainer_numerics, all kinds, every node). */
mp_status mp_doctor_add(mp_doctor *d, int64_t step, const mp_numerics_record *rec, int n);
/* The analysis; applies candidate policies to g to read their dtypes and
 * re-applies fp32 before returning. report->layers is freed by
 * mp_doctor_report_free. */
mp_status mp_doctor_analyze(mp_doctor *d, mp_graph *g, const mp_doctor_opts *o, mp_doctor_report *report);
void mp_doctor_report_free(mp_doctor_report *r);
/* The per-layer table, the window and the verdict line. */
void mp_doctor_print(const mp_doctor_report *r, FILE *out);

#endif
