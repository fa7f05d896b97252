/* trainer.h — the trainer's inside (the public side is mixprec/train.h): a
 * training plan, its optimizer groups and loss scaler (trainer_state.h), and
 * the backend that runs the one step (step.h) where the plan lives
 * (step_backend.h). */
#ifndef MP_TRAIN_TRAINER_H
#define MP_TRAIN_TRAINER_H

#include "train/step.h"
#include "train/trainer_state.h"

/* Each parameter's SGD momentum dtype from the graph's record again (after
 * the auto-fallback moved a layer to fp32). */
void mp_optimizer_refresh_dtypes(mp_optimizer *o);
/* The hyper-parameters and schedule in one line, defaults filled in
 * ("sgd lr 0.05 momentum 0.9 nesterov weight_decay 0.0005, cosine to 0 over
 * 1000 steps, warm-up 0"): what a checkpoint records and compares. */
void mp_optimizer_describe(const mp_optimizer *o, char *buf, size_t len);

/* ---- penalty.c: gradient penalties --------------------------------------- */

/* The penalty option checked against the graph and the other options. */
mp_status mp_penalty_check(mp_trainer *t);
/* Plan options for it (second order, the input gradient's nodes). */
void mp_penalty_plan_opts(const mp_trainer *t, mp_plan_opts *po);
/* Its buffers, once the plan exists. */
mp_status mp_penalty_open(mp_trainer *t);
void mp_penalty_close(mp_trainer *t);
/* The host's step primitive `penalty` (step_backend.h). */
mp_status mp_step_host_penalty(mp_trainer *t, int g);

/* Rebuild the plan and the backend state from the graph (after the
 * auto-fallback changed a node's dtype), keeping the training state. */
mp_status mp_trainer_rebuild(mp_trainer *t);

/* The plan, remade first when a rebuild failed (out of memory) and left
 * the trainer without one: every call that uses the plan or the backend
 * state calls this first. */
mp_status mp_trainer_need_plan(mp_trainer *t);

/* mp_step_poll (step.h), then the rebuild it asked for, if any. */
mp_status mp_trainer_poll(mp_trainer *t, bool wait, mp_overflow_report *report);

#endif
