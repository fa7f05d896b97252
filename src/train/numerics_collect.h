/* numerics_collect.h — a trainer's numerics statistics (mixprec/numerics.h):
 * which tensors, on which steps, and the hooks the step calls while it
 * collects: before the launch (parameters), as the plan writes each output
 * and completes each output gradient (graph/plan.h's observe), and after
 * each group's backward (its parameters' loss-scaled gradients). */
#ifndef MP_TRAIN_NUMERICS_COLLECT_H
#define MP_TRAIN_NUMERICS_COLLECT_H

#include "train/trainer_state.h"

typedef struct mp_numerics_state mp_numerics_state;

void mp_numerics_state_free(mp_numerics_state *s);
/* Around one launch of kind (an mp_launch): start collecting when it ends a
 * step that is due; end (ok: the launch succeeded): the collection belongs
 * to step t->steps + 1 (on a GPU once its readback is seen finished). */
mp_status mp_numerics_launch_begin(mp_trainer *t, int kind);
mp_status mp_numerics_launch_end(mp_trainer *t, bool ok);
/* Whether the launch being made collects (a GPU replays its own graphs then). */
bool mp_numerics_collecting(const mp_trainer *t);
/* At the start of a collecting launch's step code: the parameters (step.c). */
mp_status mp_numerics_params(mp_trainer *t);
/* After group g's backward in a collecting launch (step.c). */
mp_status mp_numerics_group_grads(mp_trainer *t, int g);

#endif
