/* filter_layout.h — a convolution filter between the CPU's order (K, C, R, S)
 * and the channels-last order (K, R, S, C) that cuDNN reads with NHWC
 * activations, on the host. The GPU keeps conv2d weights, their gradients
 * and optimizer state in KRSC (cuda/host_copy.h); every host copy of them is
 * in KCRS, so these two run wherever one crosses between the two. */
#ifndef MP_CORE_FILTER_LAYOUT_H
#define MP_CORE_FILTER_LAYOUT_H

#include <stddef.h>

/* dst (k, rs, c) = src (k, c, rs), elements of elem bytes (2 or 4); dst and
 * src do not overlap. */
void mp_filter_to_krsc_host(void *dst, const void *src, size_t elem, int k, int c, int rs);
/* dst (k, c, rs) = src (k, rs, c): the inverse of mp_filter_to_krsc_host. */
void mp_filter_from_krsc_host(void *dst, const void *src, size_t elem, int k, int c, int rs);

#endif
