/* image_resize.c — see image_resize.h: 8-bit pixels to planar floats,
 * bilinear resampling of a box of the source to the target size (half-pixel
 * centres, edges clamped, no antialiasing), the centre box of a
 * resize-shorter-side + centre-crop, and torchvision's random-resized-crop
 * box (scale (0.08, 1), aspect ratio (3/4, 4/3), 10 tries, then a centre crop). */
#include "data/image_resize.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void mp_image_to_planar(const uint8_t *pixels, int h, int w, int c, float *dst) {
    const size_t hw = (size_t)h * (size_t)w;
    for (int ch = 0; ch < c; ch++) {
        float *o = dst + (size_t)ch * hw;
        const uint8_t *s = pixels + ch;
        /* the same float as the IDX and npy readers: (float)byte / 255.0f */
        for (size_t k = 0; k < hw; k++) o[k] = (float)s[k * (size_t)c] / 255.0f;
    }
}

mp_box mp_box_centre(int src_h, int src_w, int dst_h, int dst_w) {
    const double s = fmax((double)dst_h / src_h, (double)dst_w / src_w); /* cover the target, then crop */
    const double bh = fmin(dst_h / s, src_h), bw = fmin(dst_w / s, src_w);
    return (mp_box){.y = (src_h - bh) / 2, .x = (src_w - bw) / 2, .h = bh, .w = bw};
}

mp_box mp_box_random_resized(mp_rng *r, int h, int w) {
    const double area = (double)h * w, lo = log(3.0 / 4.0), hi = log(4.0 / 3.0);
    for (int attempt = 0; attempt < 10; attempt++) {
        const double target = area * (0.08 + (1.0 - 0.08) * mp_rng_uniform(r));
        const double aspect = exp(lo + (hi - lo) * mp_rng_uniform(r));
        const int cw = (int)lround(sqrt(target * aspect)), ch = (int)lround(sqrt(target / aspect));
        if (cw > 0 && cw <= w && ch > 0 && ch <= h) {
            const int y = (int)mp_rng_below(r, (uint64_t)(h - ch) + 1), x = (int)mp_rng_below(r, (uint64_t)(w - cw) + 1);
            return (mp_box){.y = y, .x = x, .h = ch, .w = cw};
        }
    }
    const double ratio = (double)w / h;
    int cw = w, ch = h;
    if (ratio < 3.0 / 4.0) ch = (int)lround(cw / (3.0 / 4.0));
    else if (ratio > 4.0 / 3.0) cw = (int)lround(ch * (4.0 / 3.0));
    if (ch > h) ch = h;
    if (cw > w) cw = w;
    return (mp_box){.y = (h - ch) / 2, .x = (w - cw) / 2, .h = ch, .w = cw};
}

bool mp_box_is_identity(mp_box b, int src_h, int src_w, int dst_h, int dst_w) {
    return b.y == 0 && b.x == 0 && b.h == src_h && b.w == src_w && src_h == dst_h && src_w == dst_w;
}

/* Source index and weight of the next sample along one axis. */
static void axis_taps(double start, double len, int n_src, int n_dst, int *i0, float *f) {
    for (int o = 0; o < n_dst; o++) {
        double s = start + (o + 0.5) * len / n_dst - 0.5;
        if (s < 0) s = 0;
        if (s > n_src - 1) s = n_src - 1;
        const int i = (int)floor(s);
        i0[o] = i;
        f[o] = (float)(s - i);
    }
}

mp_status mp_resample_bilinear(const float *src, int c, int h, int w, mp_box b, float *dst, int dh, int dw) {
    if (mp_box_is_identity(b, h, w, dh, dw)) {
        memcpy(dst, src, (size_t)c * h * w * sizeof *dst);
        return MP_OK;
    }
    int *ys = malloc((size_t)dh * sizeof *ys), *xs = malloc((size_t)dw * sizeof *xs);
    float *fy = malloc((size_t)dh * sizeof *fy), *fx = malloc((size_t)dw * sizeof *fx);
    if (!ys || !xs || !fy || !fx) {
        free(ys), free(xs), free(fy), free(fx);
        return mp_error(MP_ERR_NOMEM, "resize: out of memory");
    }
    axis_taps(b.y, b.h, h, dh, ys, fy);
    axis_taps(b.x, b.w, w, dw, xs, fx);
    for (int ch = 0; ch < c; ch++) {
        const float *s = src + (size_t)ch * h * w; // (h, w)
        float *o = dst + (size_t)ch * dh * dw;     // (dh, dw)
        for (int y = 0; y < dh; y++) {
            const float *r0 = s + (size_t)ys[y] * w, *r1 = s + (size_t)(ys[y] + 1 < h ? ys[y] + 1 : ys[y]) * w;
            const float wy = fy[y];
            for (int x = 0; x < dw; x++) {
                const int x0 = xs[x], x1 = x0 + 1 < w ? x0 + 1 : x0;
                const float top = r0[x0] + fx[x] * (r0[x1] - r0[x0]);
                const float bot = r1[x0] + fx[x] * (r1[x1] - r1[x0]);
                o[(size_t)y * dw + x] = top + wy * (bot - top);
            }
        }
    }
    free(ys), free(xs), free(fy), free(fx);
    return MP_OK;
}
