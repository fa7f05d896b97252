/* image_decode.h — JPEG (libjpeg-turbo) and PNG (libpng) images from memory
 * into 8-bit interleaved pixels with one (gray) or three (RGB) channels.
 * Corrupt or truncated data is an error naming the file, never a crash:
 * libjpeg's fatal errors return through longjmp and its warnings (data
 * that is damaged but decodable, e.g. a file cut short) count as errors
 * too; libpng is used through its simplified API, which does the same. */
#ifndef MP_DATA_IMAGE_DECODE_H
#define MP_DATA_IMAGE_DECODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mixprec.h"

/* Larger images are refused (a header claiming more is corrupt, or hostile). */
#define MP_IMAGE_MAX_SIDE 16384
#define MP_IMAGE_MAX_PIXELS (1u << 26)

typedef enum { MP_IMAGE_UNKNOWN = 0, MP_IMAGE_JPEG, MP_IMAGE_PNG } mp_image_format;

typedef struct {
    mp_image_format format;
    int w, h;
    int channels;  /* 1 (gray, gray + alpha) or 3 (colour, with or without alpha, palette) */
} mp_image_info;

typedef struct {
    int w, h, channels;
    uint8_t *pixels;  // (h, w, channels)
} mp_image;

/* Whether the first bytes are a JPEG or PNG signature. */
mp_image_format mp_image_sniff(const unsigned char *buf, size_t len);

/* The header only: format, size, channels. Errors (MP_ERR_FORMAT) name `name`. */
mp_status mp_image_probe(const unsigned char *buf, size_t len, const char *name, mp_image_info *out);

/* Decode into out->pixels (malloc'ed; free with mp_image_free) with
 * `channels` channels (1: gray, colour converted with the ITU-R 601 luma
 * weights as PIL's "L"; 3: RGB, gray replicated; alpha dropped).
 * Errors name `name` and what is wrong. */
mp_status mp_image_decode(const unsigned char *buf, size_t len, const char *name, int channels, mp_image *out);

void mp_image_free(mp_image *im);

/* A whole file into memory (at most 256 MiB; never blocks on a FIFO). */
mp_status mp_image_read_file(const char *path, unsigned char **buf, size_t *len);

#endif
