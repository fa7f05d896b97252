/* image_resize.h — geometry of decoded images: 8-bit interleaved pixels to
 * planar floats in [0, 1], bilinear resampling of a box to a target size,
 * the box of a resize-shorter-side + centre-crop, and the random box of
 * random-resized-crop. A box equal to the whole image at the same size
 * copies the pixels exactly. */
#ifndef MP_DATA_IMAGE_RESIZE_H
#define MP_DATA_IMAGE_RESIZE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"
#include "core/rng.h"

/* A region of the source image in pixel units (edges, not centres). */
typedef struct {
    double y, x, h, w;
} mp_box;

/* (h, w, c) bytes -> (c, h, w) floats, each byte / 255. */
void mp_image_to_planar(const uint8_t *pixels, int h, int w, int c, float *dst);

/* The region a resize (so the image covers dst_h x dst_w, i.e. the shorter
 * side for a square target) followed by a centre crop keeps. */
mp_box mp_box_centre(int src_h, int src_w, int dst_h, int dst_w);

/* torchvision's RandomResizedCrop box (scale (0.08, 1), ratio (3/4, 4/3)),
 * integer-aligned, from r. */
mp_box mp_box_random_resized(mp_rng *r, int h, int w);

bool mp_box_is_identity(mp_box b, int src_h, int src_w, int dst_h, int dst_w);

/* src (c, h, w) -> dst (c, dh, dw): box b of src resampled bilinearly. */
mp_status mp_resample_bilinear(const float *src, int c, int h, int w, mp_box b, float *dst, int dh, int dw);

#endif
