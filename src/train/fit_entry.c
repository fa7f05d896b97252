/* fit_entry.c — mp_fit (fit.h): the options checked once, then this
 * process's training (mp_fit_rank, fit.c) or, with o->gpus > 1 and no
 * communicator of the caller's, one rank per GPU as threads of this process
 * (train_gpus.h), each running mp_fit_rank. */
#include "train/fit.h"

#include <string.h>

#include "core/error.h"
#include "train/train_gpus.h"

mp_status mp_fit(mp_model *m, const mp_dataset *train, const mp_dataset *test, const mp_fit_opts *o, mp_fit_result *res) {
    memset(res, 0, sizeof *res);
    MP_TRY(mp_fit_check(train, test, o));
    if (o->gpus > 1 && !o->trainer.dist) return mp_fit_threads(m, train, test, o, res);
    return mp_fit_rank(m, train, test, o, res);
}
