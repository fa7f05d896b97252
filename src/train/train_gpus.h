/* train_gpus.h — `mixprec train --gpus N`: N ranks as threads of this
 * process, rank r on GPU r, each running mp_train_run on its own replica of
 * the model and its shard of the data, joined by one NCCL communicator. */
#ifndef MP_TRAIN_TRAIN_GPUS_H
#define MP_TRAIN_TRAIN_GPUS_H

#include "train/trainer.h"

/* m is rank 0's model; o->replica builds the others. Returns rank 0's
 * result; on failure the first failing rank's error (the other ranks'
 * lines go to stderr). */
mp_status mp_train_run_threads(mp_model *m, const mp_dataset *train, const mp_dataset *test, const mp_train_opts *o,
                               mp_train_result *r);

#endif
