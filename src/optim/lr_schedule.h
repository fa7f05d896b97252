/* lr_schedule.h — learning-rate schedules: constant, step decay and cosine
 * annealing, each with an optional linear warm-up, as a pure function of the
 * step index, plus the parser of the CLI's --lr-schedule strings. */
#ifndef MP_OPTIM_LR_SCHEDULE_H
#define MP_OPTIM_LR_SCHEDULE_H

#include <stdint.h>

#include "mixprec.h"

/* The schedule type, mp_lr_at, mp_lr_schedule_parse, mp_lr_schedule_check
 * and mp_lr_kind_name are public (mixprec/optim.h). mp_lr_at(s, k) is the
 * rate of the (k+1)-th optimizer step. */

#endif
