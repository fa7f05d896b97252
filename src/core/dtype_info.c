/* dtype_info.c — the dtype traits table (dtype_traits.h) and the public
 * name/size queries built on it. */
#include "core/dtype_traits.h"

static const mp_dtype_traits table[MP_DTYPE_COUNT] = {
    [MP_DTYPE_F32] = {.name = "f32", .size = 4, .is_float = true, .max_finite = 3.4028234663852886e38},
    [MP_DTYPE_F16] = {.name = "f16", .size = 2, .is_float = true, .is_low = true, .exp_mask16 = 0x7C00,
                      .max_finite = 65504.0},
    [MP_DTYPE_BF16] = {.name = "bf16", .size = 2, .is_float = true, .is_low = true, .exp_mask16 = 0x7F80,
                       .max_finite = 3.3895313892515355e38},
    [MP_DTYPE_F64] = {.name = "f64", .size = 8, .is_float = true, .max_finite = 1.7976931348623157e308},
    [MP_DTYPE_I32] = {.name = "i32", .size = 4},
};
static const mp_dtype_traits unknown = {.name = "?"};

const mp_dtype_traits *mp_dtype_traits_of(mp_dtype t) {
    return (unsigned)t < MP_DTYPE_COUNT && table[t].name ? &table[t] : &unknown;
}

const char *mp_dtype_name(mp_dtype t) { return mp_dtype_traits_of(t)->name; }
size_t mp_dtype_size(mp_dtype t) { return mp_dtype_traits_of(t)->size; }
bool mp_dtype_is_low(mp_dtype t) { return mp_dtype_traits_of(t)->is_low; }
