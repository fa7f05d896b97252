/* checkpoint.h — the whole training state in one safetensors file: fp32
 * master weights and BN buffers under their parameter names, optimizer state
 * under "optim/<param>/<k>", and the scaler, step counters and run identity
 * as metadata. Written atomically; a resumed run continues exactly. */
#ifndef MP_TRAIN_CHECKPOINT_H
#define MP_TRAIN_CHECKPOINT_H

#include "amp/scaler.h"
#include "graph/graph.h"
#include "optim/optim.h"

typedef struct {
    int epoch;              /* epochs completed */
    int64_t global_step;    /* optimizer steps attempted (LR schedule position) */
    uint64_t plan_step;     /* forward passes (dropout masks) */
    const char *model;      /* identity checked on resume */
    const char *precision;
    const char *optimizer;
    int batch;
} mp_ckpt_info;

mp_status mp_checkpoint_save(const char *path, const mp_graph *g, const mp_optim *opt, const mp_scaler *scaler,
                             const mp_ckpt_info *info);
/* Restore into g/opt/scaler (scaler may be NULL when the run has none);
 * info->model/precision/optimizer/batch must match the file's. */
mp_status mp_checkpoint_load(const char *path, mp_graph *g, mp_optim *opt, mp_scaler *scaler, mp_ckpt_info *info);

#endif
