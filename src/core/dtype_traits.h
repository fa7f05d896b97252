/* dtype_traits.h — one row of facts per dtype, so that code asks the table
 * instead of switching over dtypes: name, size, kind (float or not, 16-bit
 * low precision), the exponent mask of a 16-bit float (non-finite tests on
 * raw bits) and its largest finite value. The CUDA backend keeps the
 * library enums (cudaDataType, cudnnDataType_t, ncclDataType_t) in a table
 * of the same shape (src/cuda/cuda_dtype.h). Adding a dtype is a row here
 * and there, plus its conversions (dtype_convert.c). */
#ifndef MP_CORE_DTYPE_TRAITS_H
#define MP_CORE_DTYPE_TRAITS_H

#include "mixprec.h"

typedef struct {
    const char *name;    /* "f32" */
    size_t size;         /* bytes per element */
    bool is_float;       /* a floating-point dtype (the ops' data) */
    bool is_low;         /* 16-bit mixed-precision dtype (f16, bf16) */
    uint16_t exp_mask16; /* 16-bit floats: the all-ones exponent (inf/NaN), else 0 */
    double max_finite;   /* largest finite value (0 for integers) */
} mp_dtype_traits;

/* The row of dtype t; a dtype outside the enum gets the "?" row (size 0). */
const mp_dtype_traits *mp_dtype_traits_of(mp_dtype t);

#endif
