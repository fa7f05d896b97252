/* image_grid.c — see image_grid.h. Pixels are assembled into one 8-bit
 * buffer (rows*h, cols*w, c), then written as PNG (libpng) or PGM/PPM. */
#include "io/image_grid.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/output_path.h"

#ifdef MP_HAVE_PNG
#include <png.h>
#endif

bool mp_image_png_available(void) {
#ifdef MP_HAVE_PNG
    return true;
#else
    return false;
#endif
}

const char *mp_image_grid_ext(const mp_image_grid *gr) {
    if (mp_image_png_available()) return "png";
    return gr->c == 1 ? "pgm" : "ppm";
}

static uint8_t to_byte(float v, float lo, float hi) {
    float t = (v - lo) / (hi - lo);
    if (!(t > 0)) return 0; /* NaN too */
    if (t >= 1) return 255;
    return (uint8_t)lrintf(t * 255.0f);
}

/* (rows*h, cols*w, c) interleaved pixels. */
static void assemble(const float *images, const mp_image_grid *gr, uint8_t *pix) {
    const int width = gr->cols * gr->w;
    const size_t tile = (size_t)gr->c * gr->h * gr->w;
    for (int r = 0; r < gr->rows; r++)
        for (int k = 0; k < gr->cols; k++) {
            const float *img = images + (size_t)(r * gr->cols + k) * tile; // (c, h, w)
            for (int y = 0; y < gr->h; y++)
                for (int x = 0; x < gr->w; x++)
                    for (int ch = 0; ch < gr->c; ch++) {
                        size_t at = (((size_t)(r * gr->h + y) * width) + (size_t)(k * gr->w + x)) * gr->c + ch;
                        pix[at] = to_byte(img[((size_t)ch * gr->h + y) * gr->w + x], gr->lo, gr->hi);
                    }
        }
}

#ifdef MP_HAVE_PNG
/* libpng's output and its error and warning handler: its text goes into the
 * error the caller reports (libpng's default would print it to stderr too). */
typedef struct {
    FILE *f;
    int write_errno;   /* a failed fwrite's errno, 0 = none */
    char why[160];     /* libpng's error text */
    char warning[160]; /* its last warning, told only with an error */
} png_sink;

static void png_sink_write(png_structp png, png_bytep data, png_size_t n) {
    png_sink *k = png_get_io_ptr(png);
    errno = 0; /* a short write that sets none is told as EIO, not an older errno */
    if (fwrite(data, 1, n, k->f) != n) {
        k->write_errno = errno ? errno : EIO;
        png_error(png, "write failed");
    }
}

static void png_sink_flush(png_structp png) { (void)png; } /* mp_output_close flushes and checks */

static void png_sink_error(png_structp png, png_const_charp msg) {
    png_sink *k = png_get_error_ptr(png);
    snprintf(k->why, sizeof k->why, "%s", msg);
    png_longjmp(png, 1);
}

static void png_sink_warning(png_structp png, png_const_charp msg) {
    png_sink *k = png_get_error_ptr(png);
    snprintf(k->warning, sizeof k->warning, "%s", msg);
}

static mp_status png_sink_status(const png_sink *k, const char *path) {
    if (k->write_errno) return mp_error(MP_ERR_IO, "%s: write failed: %s", path, strerror(k->write_errno));
    char warned[200] = "";
    if (k->warning[0]) snprintf(warned, sizeof warned, " (after the warning '%s')", k->warning);
    return mp_error(MP_ERR_IO, "%s: libpng failed writing the image: %s%s", path, k->why, warned);
}

static mp_status write_png(FILE *f, const char *path, const uint8_t *pix, int width, int height, int c) {
    png_sink k = {.f = f};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &k, png_sink_error, png_sink_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info) {
        png_destroy_write_struct(&png, NULL);
        return mp_error(MP_ERR_NOMEM, "%s: libpng could not start", path);
    }
    if (setjmp(png_jmpbuf(png))) { /* the sink read through libpng: a local changed after setjmp is indeterminate */
        const mp_status s = png_sink_status(png_get_error_ptr(png), path);
        png_destroy_write_struct(&png, &info);
        return s;
    }
    png_set_write_fn(png, &k, png_sink_write, png_sink_flush);
    png_set_IHDR(png, info, (png_uint_32)width, (png_uint_32)height, 8, c == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < height; y++) png_write_row(png, (png_const_bytep)(pix + (size_t)y * width * c));
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    return MP_OK;
}
#else
static mp_status write_pnm(FILE *f, const char *path, const uint8_t *pix, int width, int height, int c) {
    fprintf(f, "P%c\n%d %d\n255\n", c == 1 ? '5' : '6', width, height);
    size_t n = (size_t)width * height * c;
    if (fwrite(pix, 1, n, f) != n) return mp_error(MP_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    return MP_OK;
}
#endif

mp_status mp_image_grid_write(const char *stem, const float *images, const mp_image_grid *gr, char *path, size_t len) {
    if (gr->rows < 1 || gr->cols < 1 || gr->h < 1 || gr->w < 1 || (gr->c != 1 && gr->c != 3) || !(gr->hi > gr->lo))
        return mp_error(MP_ERR_INVALID_ARG, "image grid %s: %dx%d tiles of %dx%dx%d in [%g, %g]: need 1 or 3 channels "
                        "and lo < hi", stem, gr->rows, gr->cols, gr->c, gr->h, gr->w, gr->lo, gr->hi);
    if ((size_t)snprintf(path, len, "%s.%s", stem, mp_image_grid_ext(gr)) >= len)
        return mp_error(MP_ERR_INVALID_ARG, "image grid %s: path too long", stem);
    const int width = gr->cols * gr->w, height = gr->rows * gr->h;
    uint8_t *pix = malloc((size_t)width * height * gr->c);
    if (!pix) return mp_error(MP_ERR_NOMEM, "%s: out of memory for a %dx%d image", path, width, height);
    assemble(images, gr, pix);
    FILE *f = NULL;
    mp_status s = mp_output_open(path, NULL, false, &f); /* a regular file or a new one; never waits on a FIFO */
#ifdef MP_HAVE_PNG
    if (s == MP_OK) s = write_png(f, path, pix, width, height, gr->c);
#else
    if (s == MP_OK) s = write_pnm(f, path, pix, width, height, gr->c);
#endif
    if (f && s == MP_OK) s = mp_output_close(f, path, NULL);
    else if (f) fclose(f); /* the first error is the one reported */
    free(pix);
    return s;
}
