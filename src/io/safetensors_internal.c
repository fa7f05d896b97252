/* safetensors_internal.c — the safetensors writer's and reader's shared
 * tables and helpers (see safetensors_internal.h). */
#include "io/safetensors_internal.h"

#include <stdint.h>

const st_dtype_info mp_st_dtypes[] = {
    {"BOOL", 8, -1},     {"F4", 4, -1},        {"F6_E2M3", 6, -1}, {"F6_E3M2", 6, -1},
    {"U8", 8, -1},       {"I8", 8, -1},        {"F8_E5M2", 8, -1}, {"F8_E4M3", 8, -1},
    {"F8_E8M0", 8, -1},  {"I16", 16, -1},      {"U16", 16, -1},    {"F16", 16, MP_DTYPE_F16},
    {"BF16", 16, MP_DTYPE_BF16}, {"I32", 32, MP_DTYPE_I32}, {"U32", 32, -1},
    {"F32", 32, MP_DTYPE_F32}, {"C64", 64, -1},  {"F64", 64, MP_DTYPE_F64}, {"I64", 64, -1},
    {"U64", 64, -1},
};
_Static_assert(sizeof mp_st_dtypes / sizeof mp_st_dtypes[0] == ST_NDTYPES, "ST_NDTYPES is the table's length");

size_t mp_st_utf8_valid_prefix(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        uint32_t cp;
        if (c >= 0xc2 && c <= 0xdf) {
            len = 2;
            cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            len = 3;
            cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            len = 4;
            cp = c & 0x07;
        } else {
            return i;
        }
        if (n - i < len) return i;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80) return i;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return i;
        i += len;
    }
    return n;
}
