/* dw_geom.h — the conv view of a depthwise 3x3 convolution (groups = C =
 * output channels), for the tests of src/cuda/conv_depthwise.h. */
#ifndef MP_TESTS_GPU_DW_GEOM_H
#define MP_TESTS_GPU_DW_GEOM_H

#include <string.h>

#include "ops/conv_onednn.h" /* mp_conv_geom */

/* n images of c channels, h x w, stride and padding as given. */
static inline mp_conv_geom dw_geom(int n, int c, int h, int w, int stride, int pad) {
    mp_conv_geom g;
    memset(&g, 0, sizeof g);
    g.n = n, g.groups = c, g.cx = c, g.cy = c, g.hx = h, g.wx = w;
    g.k = 3, g.stride = stride, g.pad = pad, g.dil = 1;
    g.hy = (h + 2 * pad - 3) / stride + 1, g.wy = (w + 2 * pad - 3) / stride + 1;
    return g;
}

#endif
