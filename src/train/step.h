/* step.h — the one mixed-precision training step (step.c): what a launch
 * enqueues, and what the host makes of the scaler state afterwards. */
#ifndef MP_TRAIN_STEP_H
#define MP_TRAIN_STEP_H

#include "train/trainer_state.h"

/* One launch's work, in stream order, through the backend's primitives: the
 * only definition of the training step. A backend runs it directly (CPU) or
 * captures it once and replays it (GPU). */
mp_status mp_step_enqueue(mp_trainer *t, mp_launch kind);

/* After a launch: compare the scaler state the host can see with what was
 * reported; report overflows (naming the op when the overflowing step can be
 * replayed), stop after too many forward overflows (or, with the
 * auto-fallback, move the node to fp32 and set t->rebuild_pending, which
 * mp_trainer_poll acts on), stop on gradient overflows that loss scaling
 * cannot absorb and on divergence. wait: read the exact state (synchronizes
 * a GPU). */
mp_status mp_step_poll(mp_trainer *t, bool wait, mp_overflow_report *report);

#endif
