/* policy_file.h — the doctor's policy file: human-readable JSON that
 * `mixprec doctor --policy-out` writes and `mixprec train --policy` applies
 * through the public precision API (per-layer overrides) and the scaler
 * options. Reading is strict: anything unknown or unusable is one error
 * naming the file and the key. */
#ifndef MP_AMP_POLICY_FILE_H
#define MP_AMP_POLICY_FILE_H

#include "amp/doctor.h"

typedef struct {
    bool has_precision;
    mp_precision precision;
    char overrides[2048];   /* "LAYER=DTYPE,..." ("" none) */
    bool has_scale;         /* loss_scale given: scaling on with these */
    bool static_scale;
    float init_scale, min_scale; /* min 0: none */
} mp_policy_file;

/* Write r's recommended policy (and, under "doctor", its reasons) to path. */
mp_status mp_policy_file_write(const char *path, const mp_doctor_report *r);

/* Read path, checking every layer name against g. */
mp_status mp_policy_file_read(const char *path, const mp_graph *g, mp_policy_file *out);

/* The file's overrides merged with --precision-override's (cli, may be NULL)
 * into out: a layer named in both is an error naming the file and the key. */
mp_status mp_policy_file_merge(const mp_policy_file *f, const char *path, const char *cli, char *out, size_t cap);

#endif
