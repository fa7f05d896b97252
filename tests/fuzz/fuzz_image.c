/* fuzz_image.c — libFuzzer harness of the image decode path of the folder
 * loader: the first byte picks the output channels (1 or 3), the rest is a
 * JPEG or PNG file in memory. Probing and decoding must return an error or
 * an image of the probed size; a decoded image then goes through the
 * conversion to floats and the centre and random-resized resampling, whose
 * outputs must lie in [0, 1]. */
#include "fuzz_input.h"

#include <math.h>
#include <string.h>

#include "core/error.h"
#include "data/image_decode.h"
#include "data/image_resize.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int channels = data[0] & 1 ? 3 : 1;
    data++, size--;
    mp_image_info info;
    const mp_status ps = mp_image_probe(data, size, "fuzz", &info);
    if (ps != MP_OK) MP_ASSERT(!strchr(mp_last_error(), '\n'));
    mp_image im;
    if (mp_image_decode(data, size, "fuzz", channels, &im) != MP_OK) {
        MP_ASSERT(im.pixels == NULL && !strchr(mp_last_error(), '\n'));
        return 0;
    }
    MP_ASSERT(ps == MP_OK && im.w == info.w && im.h == info.h && im.channels == channels);
    if ((size_t)im.w * im.h <= 1u << 20) {
        float *planar = malloc((size_t)im.w * im.h * channels * sizeof *planar);
        float *out = malloc((size_t)7 * 5 * channels * sizeof *out);
        MP_ASSERT(planar && out);
        mp_image_to_planar(im.pixels, im.h, im.w, channels, planar);
        mp_rng r;
        mp_rng_seed(&r, size);
        for (int k = 0; k < 2; k++) {
            const mp_box b = k ? mp_box_random_resized(&r, im.h, im.w) : mp_box_centre(im.h, im.w, 7, 5);
            MP_ASSERT(mp_resample_bilinear(planar, channels, im.h, im.w, b, out, 7, 5) == MP_OK);
            for (int q = 0; q < 7 * 5 * channels; q++) MP_ASSERT(out[q] >= 0 && out[q] <= 1);
        }
        free(planar);
        free(out);
    }
    mp_image_free(&im);
    return 0;
}
