/* image_grid.h — a grid of images (e.g. GAN samples, one row per class) as
 * one 8-bit image file: PNG through libpng when the build has it, otherwise
 * PGM (1 channel) / PPM (3 channels). */
#ifndef MP_IO_IMAGE_GRID_H
#define MP_IO_IMAGE_GRID_H

#include <stdbool.h>
#include <stddef.h>

#include "mixprec.h"

typedef struct {
    int rows, cols;  /* tiles */
    int c, h, w;     /* per tile; c = 1 (gray) or 3 (RGB) */
    float lo, hi;    /* value range mapped to 0..255 (clamped), e.g. -1, 1 for tanh */
} mp_image_grid;

/* Whether this build writes PNG (else PGM/PPM). */
bool mp_image_png_available(void);
/* The file extension used: "png", "pgm" or "ppm". */
const char *mp_image_grid_ext(const mp_image_grid *gr);

/* Write rows x cols tiles from images (rows*cols, c, h, w), tile (r, k) =
 * image r*cols + k, into "<stem>.<ext>", an image of rows*h x cols*w pixels;
 * the path written goes to path (len bytes). Errors name the file. */
mp_status mp_image_grid_write(const char *stem, const float *images, const mp_image_grid *gr, char *path, size_t len);
// images: (rows*cols, c, h, w)

#endif
