/* inject.h — a forced gradient overflow on the GPU, for tests of the
 * overflow path: a device flag the test arms before the step it wants to
 * overflow, and a trainer hook (mp_trainer.after_reduce: in stream order
 * after the gradient all-reduce and before the unscale/check, captured into
 * the step's CUDA graphs) that, while the flag is armed, writes +inf into
 * the gradient of the first parameter of the first optimizer group and
 * disarms the flag. So exactly one step overflows, on this rank only: in a
 * data-parallel run the others learn of it from the found-inf all-reduce. */
#ifndef MP_TESTS_GPU_INJECT_H
#define MP_TESTS_GPU_INJECT_H

#include "mixprec.h"

typedef struct {
    int *armed; /* device flag */
} gpu_inject;

/* Hooks t (before its first step, so that every captured graph has the
 * hook); the flag starts disarmed. */
mp_status gpu_inject_attach(mp_trainer *t, gpu_inject *inj);
/* The next step that ends (with accumulation: its last micro-batch)
 * overflows. Synchronizes the trainer's stream. */
mp_status gpu_inject_arm(mp_trainer *t, gpu_inject *inj);
/* Frees the flag: after mp_trainer_destroy (the trainer's graphs read it). */
void gpu_inject_free(gpu_inject *inj);

#endif
