/* dtype_convert.h — the library's own f32 <-> storage-dtype conversions:
 * mp_load_f32 / mp_store_f32 without their argument checks, for callers
 * that know the dtype is a float one (a tensor's or parameter's storage
 * dtype). Another dtype is a bug in the library and aborts (MP_ASSERT), as
 * it would silently leave the destination stale otherwise. */
#ifndef MP_CORE_DTYPE_CONVERT_H
#define MP_CORE_DTYPE_CONVERT_H

#include "mixprec.h"

/* n elements of float dtype src_dtype into f32 (as mp_load_f32). */
void mp_load_f32_known(float *dst, const void *src, mp_dtype src_dtype, int64_t n);
/* n f32 values into float dtype dst_dtype (as mp_store_f32). */
void mp_store_f32_known(void *dst, mp_dtype dst_dtype, const float *src, int64_t n);

#endif
