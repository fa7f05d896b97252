/* dtype_info.c — names and sizes of the dtypes. */
#include "mixprec.h"

const char *mp_dtype_name(mp_dtype t) {
    switch (t) {
    case MP_DTYPE_F32: return "f32";
    case MP_DTYPE_F16: return "f16";
    case MP_DTYPE_BF16: return "bf16";
    case MP_DTYPE_F64: return "f64";
    case MP_DTYPE_I32: return "i32";
    case MP_DTYPE_COUNT: break;
    }
    return "?";
}

size_t mp_dtype_size(mp_dtype t) {
    switch (t) {
    case MP_DTYPE_F32: return 4;
    case MP_DTYPE_F16: return 2;
    case MP_DTYPE_BF16: return 2;
    case MP_DTYPE_F64: return 8;
    case MP_DTYPE_I32: return 4;
    case MP_DTYPE_COUNT: break;
    }
    return 0;
}
