/* doctor_verify.h — `mixprec doctor --verify`: the doctor's recommendation
 * measured, not asserted: the policy, the run's precision unchanged (when
 * not amp-fp16), plain amp-fp16 and fp32 trained on the same data and seed
 * for E epochs, their test accuracies and skipped steps in one table. */
#ifndef MP_CLI_DOCTOR_VERIFY_H
#define MP_CLI_DOCTOR_VERIFY_H

#include <stdio.h>

#include "amp/doctor.h"
#include "cli/train_args.h"

/* Trains the rows and prints the table to out; a run that stops with an
 * error is a row saying so. Returns MP_OK unless a model cannot be built. */
mp_status doctor_verify(const train_args *t, mp_device device, const mp_doctor_report *rep, mp_loss_scaling scaling,
                        const mp_dataset *train, const mp_dataset *test, int epochs, FILE *out);

#endif
