/* filter_layout.c — KCRS <-> KRSC filter permutation on the host
 * (filter_layout.h), for 2- and 4-byte elements, written in the
 * destination's order. */
#include "core/filter_layout.h"

#include <stdint.h>

#include "core/error.h"

/* dst[kk][a][b] = src[kk][b][a] for a < na, b < nb, elements of type T. */
#define SWAP_INNER(T)                                                                                                 \
    static void swap_inner_##T(T *dst, const T *src, int k, int na, int nb) {                                       \
        const size_t per_k = (size_t)na * nb;                                                                       \
        for (int kk = 0; kk < k; kk++, src += per_k, dst += per_k)                                                  \
            for (int a = 0; a < na; a++)                                                                            \
                for (int b = 0; b < nb; b++) dst[(size_t)a * nb + b] = src[(size_t)b * na + a];                     \
    }
SWAP_INNER(uint16_t)
SWAP_INNER(uint32_t)

static void swap_inner(void *dst, const void *src, size_t elem, int k, int na, int nb) {
    MP_ASSERT(elem == 2 || elem == 4);
    if (elem == 2) swap_inner_uint16_t((uint16_t *)dst, (const uint16_t *)src, k, na, nb);
    else swap_inner_uint32_t((uint32_t *)dst, (const uint32_t *)src, k, na, nb);
}

void mp_filter_to_krsc_host(void *dst, const void *src, size_t elem, int k, int c, int rs) {
    swap_inner(dst, src, elem, k, rs, c); /* dst[kk][r][cc] = src[kk][cc][r] */
}

void mp_filter_from_krsc_host(void *dst, const void *src, size_t elem, int k, int c, int rs) {
    swap_inner(dst, src, elem, k, c, rs); /* dst[kk][cc][r] = src[kk][r][cc] */
}
