/* image_decode.c — see image_decode.h. JPEG through libjpeg(-turbo) with an
 * error manager that longjmps out of fatal errors and records warnings;
 * PNG through libpng's classic API under setjmp, with transforms to 8-bit
 * gray or RGB (16-bit stripped to 8, palettes and low bit depths expanded,
 * alpha dropped). Every decode works from a buffer in memory. */
#include "data/image_decode.h"

#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef MP_HAVE_JPEG
#include <jpeglib.h>
#endif
#ifdef MP_HAVE_PNG
#include <png.h>
#endif

#include "core/error.h"
#include "io/input_file.h"

#define IMAGE_MAX_FILE (256u << 20)

mp_image_format mp_image_sniff(const unsigned char *buf, size_t len) {
    if (len >= 3 && buf[0] == 0xFF && buf[1] == 0xD8 && buf[2] == 0xFF) return MP_IMAGE_JPEG;
    if (len >= 8 && !memcmp(buf, "\x89PNG\r\n\x1a\n", 8)) return MP_IMAGE_PNG;
    return MP_IMAGE_UNKNOWN;
}

void mp_image_free(mp_image *im) {
    if (!im) return;
    free(im->pixels);
    memset(im, 0, sizeof *im);
}

static mp_status check_size(const char *name, int w, int h) {
    if (w < 1 || h < 1 || w > MP_IMAGE_MAX_SIDE || h > MP_IMAGE_MAX_SIDE ||
        (uint64_t)w * (uint64_t)h > MP_IMAGE_MAX_PIXELS)
        return mp_error(MP_ERR_FORMAT, "%s: image size %dx%d is out of range (1..%d per side, at most %u pixels)",
                        name, w, h, MP_IMAGE_MAX_SIDE, MP_IMAGE_MAX_PIXELS);
    return MP_OK;
}

/* Interleaved 8-bit (h, w, from) -> (h, w, to), to and from in {1, 3}; in place is not allowed. */
static void convert_channels(const uint8_t *src, int from, uint8_t *dst, int to, size_t pixels) {
    if (from == to) {
        memcpy(dst, src, pixels * (size_t)to);
    } else if (from == 1) {
        for (size_t i = 0; i < pixels; i++) dst[3 * i] = dst[3 * i + 1] = dst[3 * i + 2] = src[i];
    } else { /* PIL's "L": the 601 weights 0.299, 0.587, 0.114 in 16-bit fixed point, rounded, as Pillow computes
              * them (a rounding of the decimal weights differs from it by 1 on 9 040 colours) */
        for (size_t i = 0; i < pixels; i++)
            dst[i] = (uint8_t)((19595u * src[3 * i] + 38470u * src[3 * i + 1] + 7471u * src[3 * i + 2] + 0x8000u) >> 16);
    }
}

/* ---- JPEG ------------------------------------------------------------------ */

#ifdef MP_HAVE_JPEG
typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
} jpeg_err;

static void jpeg_on_error(j_common_ptr cinfo) {
    jpeg_err *e = (jpeg_err *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, e->message);
    longjmp(e->jump, 1);
}

/* Warnings (level -1) mean damaged data: keep the first message. */
static void jpeg_on_message(j_common_ptr cinfo, int level) {
    jpeg_err *e = (jpeg_err *)cinfo->err;
    if (level >= 0) return; /* trace messages */
    if (!e->pub.num_warnings) (*cinfo->err->format_message)(cinfo, e->message);
    e->pub.num_warnings++;
}

/* Header (and, with out, the pixels). The state that must survive a longjmp
 * lives in `res` (not in locals of this frame). */
typedef struct {
    uint8_t *row_buf, *pixels;
} jpeg_res;

static mp_status jpeg_run(const unsigned char *buf, size_t len, const char *name, mp_image_info *info, int channels,
                          mp_image *out, jpeg_res *res) {
    struct jpeg_decompress_struct ci;
    jpeg_err err;
    memset(&ci, 0, sizeof ci);
    ci.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = jpeg_on_error;
    err.pub.emit_message = jpeg_on_message;
    err.message[0] = '\0';
    if (setjmp(err.jump)) {
        jpeg_destroy_decompress(&ci);
        return mp_error(MP_ERR_FORMAT, "%s: corrupt JPEG: %s", name, err.message);
    }
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, buf, (unsigned long)len);
    jpeg_read_header(&ci, TRUE);
    const int comps = ci.num_components;
    if (comps != 1 && comps != 3) {
        jpeg_destroy_decompress(&ci);
        return mp_error(MP_ERR_FORMAT, "%s: JPEG with %d components (CMYK?) is not supported: gray or colour only", name,
                        comps);
    }
    if (check_size(name, (int)ci.image_width, (int)ci.image_height) != MP_OK) {
        jpeg_destroy_decompress(&ci);
        return MP_ERR_FORMAT;
    }
    *info = (mp_image_info){.format = MP_IMAGE_JPEG, .w = (int)ci.image_width, .h = (int)ci.image_height,
                            .channels = comps == 1 ? 1 : 3};
    if (!out) {
        jpeg_destroy_decompress(&ci);
        return MP_OK;
    }
    /* colour to gray: decode RGB and use the same luma weights as PNG */
    const int native = info->channels;
    ci.out_color_space = native == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_start_decompress(&ci);
    const size_t w = ci.output_width, h = ci.output_height;
    res->pixels = malloc(w * h * (size_t)channels);
    res->row_buf = malloc(w * (size_t)native);
    if (!res->pixels || !res->row_buf) {
        jpeg_destroy_decompress(&ci);
        return mp_error(MP_ERR_NOMEM, "%s: out of memory decoding %zux%zu", name, w, h);
    }
    while (ci.output_scanline < ci.output_height) {
        const size_t y = ci.output_scanline;
        JSAMPROW row = res->row_buf;
        if (jpeg_read_scanlines(&ci, &row, 1) != 1) break;
        convert_channels(res->row_buf, native, res->pixels + y * w * (size_t)channels, channels, w);
    }
    jpeg_finish_decompress(&ci);
    const long warnings = err.pub.num_warnings;
    jpeg_destroy_decompress(&ci);
    if (warnings)
        return mp_error(MP_ERR_FORMAT, "%s: corrupt or truncated JPEG data: %s", name, err.message);
    out->w = (int)w, out->h = (int)h, out->channels = channels;
    out->pixels = res->pixels;
    res->pixels = NULL;
    return MP_OK;
}

static mp_status jpeg_decode(const unsigned char *buf, size_t len, const char *name, mp_image_info *info, int channels,
                             mp_image *out) {
    jpeg_res res = {0};
    mp_status s = jpeg_run(buf, len, name, info, channels, out, &res);
    free(res.row_buf);
    free(res.pixels);
    return s;
}
#else
static mp_status jpeg_decode(const unsigned char *buf, size_t len, const char *name, mp_image_info *info, int channels,
                             mp_image *out) {
    (void)buf, (void)len, (void)info, (void)channels, (void)out;
    return mp_error(MP_ERR_UNSUPPORTED, "%s: JPEG images need libjpeg, which this build lacks", name);
}
#endif

/* ---- PNG ------------------------------------------------------------------- */

#ifdef MP_HAVE_PNG
typedef struct {
    const unsigned char *buf;
    size_t len, at;
    char message[200];
    uint8_t *pixels, *native;
    png_bytep *rows;
} png_src;

static void png_on_error(png_structp png, png_const_charp msg) {
    png_src *s = png_get_error_ptr(png);
    snprintf(s->message, sizeof s->message, "%s", msg);
    png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

static void png_read_mem(png_structp png, png_bytep dst, png_size_t n) {
    png_src *s = png_get_io_ptr(png);
    if (n > s->len - s->at) png_error(png, "truncated: the data ends early");
    memcpy(dst, s->buf + s->at, n);
    s->at += n;
}

static mp_status png_run(png_src *src, const char *name, mp_image_info *info, int channels, mp_image *out) {
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, src, png_on_error, png_on_warning);
    png_infop pi = png ? png_create_info_struct(png) : NULL;
    if (!png || !pi) {
        png_destroy_read_struct(&png, NULL, NULL);
        return mp_error(MP_ERR_NOMEM, "%s: out of memory", name);
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &pi, NULL);
        return mp_error(MP_ERR_FORMAT, "%s: corrupt PNG: %s", name, src->message);
    }
    png_set_read_fn(png, src, png_read_mem);
    png_set_user_limits(png, MP_IMAGE_MAX_SIDE, MP_IMAGE_MAX_SIDE);
    png_read_info(png, pi);
    const png_uint_32 w = png_get_image_width(png, pi), h = png_get_image_height(png, pi);
    const int type = png_get_color_type(png, pi);
    if (check_size(name, (int)w, (int)h) != MP_OK) {
        png_destroy_read_struct(&png, &pi, NULL);
        return MP_ERR_FORMAT;
    }
    const int native = type == PNG_COLOR_TYPE_GRAY || type == PNG_COLOR_TYPE_GRAY_ALPHA ? 1 : 3;
    *info = (mp_image_info){.format = MP_IMAGE_PNG, .w = (int)w, .h = (int)h, .channels = native};
    if (!out) {
        png_destroy_read_struct(&png, &pi, NULL);
        return MP_OK;
    }
    png_set_strip_16(png);
    png_set_strip_alpha(png);
    png_set_packing(png);
    if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (type == PNG_COLOR_TYPE_GRAY) png_set_expand_gray_1_2_4_to_8(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, pi);
    if (png_get_channels(png, pi) != native || png_get_bit_depth(png, pi) != 8)
        png_error(png, "unexpected pixel layout after the 8-bit transforms");
    src->native = malloc((size_t)w * h * (size_t)native);
    src->rows = malloc((size_t)h * sizeof *src->rows);
    src->pixels = malloc((size_t)w * h * (size_t)channels);
    if (!src->native || !src->rows || !src->pixels) png_error(png, "out of memory");
    for (png_uint_32 y = 0; y < h; y++) src->rows[y] = src->native + (size_t)y * w * (size_t)native;
    png_read_image(png, src->rows);
    png_read_end(png, NULL); /* checks the CRCs of what follows the image data */
    png_destroy_read_struct(&png, &pi, NULL);
    convert_channels(src->native, native, src->pixels, channels, (size_t)w * h);
    out->w = (int)w, out->h = (int)h, out->channels = channels;
    out->pixels = src->pixels;
    src->pixels = NULL;
    return MP_OK;
}

static mp_status png_decode(const unsigned char *buf, size_t len, const char *name, mp_image_info *info, int channels,
                            mp_image *out) {
    png_src src = {.buf = buf, .len = len};
    mp_status s = png_run(&src, name, info, channels, out);
    free(src.native);
    free(src.rows);
    free(src.pixels);
    return s;
}
#else
static mp_status png_decode(const unsigned char *buf, size_t len, const char *name, mp_image_info *info, int channels,
                            mp_image *out) {
    (void)buf, (void)len, (void)info, (void)channels, (void)out;
    return mp_error(MP_ERR_UNSUPPORTED, "%s: PNG images need libpng, which this build lacks", name);
}
#endif

/* ---- dispatch -------------------------------------------------------------- */

static mp_status decode_any(const unsigned char *buf, size_t len, const char *name, mp_image_info *info, int channels,
                            mp_image *out) {
    switch (mp_image_sniff(buf, len)) {
    case MP_IMAGE_JPEG: return jpeg_decode(buf, len, name, info, channels, out);
    case MP_IMAGE_PNG: return png_decode(buf, len, name, info, channels, out);
    case MP_IMAGE_UNKNOWN: break;
    }
    return mp_error(MP_ERR_FORMAT, "%s: not a JPEG or PNG image (%s)", name,
                    len == 0 ? "the file is empty" : "unknown signature");
}

mp_status mp_image_probe(const unsigned char *buf, size_t len, const char *name, mp_image_info *out) {
    memset(out, 0, sizeof *out);
    return decode_any(buf, len, name, out, 0, NULL);
}

mp_status mp_image_decode(const unsigned char *buf, size_t len, const char *name, int channels, mp_image *out) {
    memset(out, 0, sizeof *out);
    if (channels != 1 && channels != 3)
        return mp_error(MP_ERR_INVALID_ARG, "%s: decoding to %d channels (1 or 3)", name, channels);
    mp_image_info info;
    return decode_any(buf, len, name, &info, channels, out);
}

mp_status mp_image_read_file(const char *path, unsigned char **buf, size_t *len) {
    *buf = NULL;
    *len = 0;
    int fd;
    uint64_t size;
    MP_TRY(mp_input_open(path, &fd, &size));
    if (size > IMAGE_MAX_FILE) {
        close(fd);
        return mp_error(MP_ERR_FORMAT, "%s: %llu bytes is too large for an image (limit %u MiB)", path,
                        (unsigned long long)size, IMAGE_MAX_FILE >> 20);
    }
    unsigned char *b = malloc(size ? (size_t)size : 1);
    if (!b) {
        close(fd);
        return mp_error(MP_ERR_NOMEM, "%s: out of memory reading %llu bytes", path, (unsigned long long)size);
    }
    size_t got = 0;
    while (got < size) {
        ssize_t k = read(fd, b + got, (size_t)size - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(fd);
    if (got < size) {
        free(b);
        return mp_error(MP_ERR_IO, "%s: read error or the file shrank while it was read", path);
    }
    *buf = b;
    *len = got;
    return MP_OK;
}
