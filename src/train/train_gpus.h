/* train_gpus.h — `mixprec train --gpus N`: N ranks as threads of this
 * process, rank r on GPU r, each running mp_fit_rank on its own replica of the
 * model and its shard of the data, joined by one NCCL communicator. */
#ifndef MP_TRAIN_TRAIN_GPUS_H
#define MP_TRAIN_TRAIN_GPUS_H

#include "train/fit.h"

/* m is rank 0's model; o->replica builds the others. Returns rank 0's
 * result; on failure the first failing rank's error (the other ranks'
 * lines go to stderr). */
mp_status mp_fit_threads(mp_model *m, const mp_dataset *train, const mp_dataset *test, const mp_fit_opts *o,
                         mp_fit_result *r);

#endif
