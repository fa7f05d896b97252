/* fuzz_npy.c — libFuzzer harness of the .npy dataset reader. The input is
 * [u32 little-endian length L][L bytes: the images file][the rest: the
 * labels file], both made files; the first byte of L also picks the layout.
 * What loads is checked for the reader's promises (labels in range, finite
 * pixels, a shape that multiplies out) and the header parser alone must
 * accept or refuse the images bytes with a one-line message. */
#include "fuzz_input.h"

#include <math.h>
#include <string.h>

#include "core/error.h"
#include "data/dataset.h"
#include "data/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static fuzz_file images, labels;
    if (!images.path[0]) {
        fuzz_file_init(&images, "fuzz_npy_images");
        fuzz_file_init(&labels, "fuzz_npy_labels");
    }
    if (size < 4) return 0;
    size_t len = (size_t)data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16 | (size_t)data[3] << 24;
    const mp_npy_layout layout = (mp_npy_layout)(data[0] % 3);
    data += 4, size -= 4;
    if (len > size) len = size;
    mp_npy_header h;
    if (mp_npy_parse_header("x", data, len, &h) != MP_OK) MP_ASSERT(!strchr(mp_last_error(), '\n'));
    fuzz_file_set(&images, data, len);
    fuzz_file_set(&labels, data + len, size - len);
    mp_dataset d;
    if (mp_dataset_load_npy(images.path, labels.path, &(mp_npy_opts){.layout = layout}, &d) != MP_OK) {
        MP_ASSERT(d.images == NULL && d.labels == NULL && !strchr(mp_last_error(), '\n'));
        return 0;
    }
    MP_ASSERT(d.n > 0 && d.c > 0 && d.h > 0 && d.w > 0 && d.classes >= 1 && d.classes <= MP_DATASET_MAX_CLASSES);
    for (int i = 0; i < d.n; i++) MP_ASSERT(d.labels[i] >= 0 && d.labels[i] < d.classes);
    const size_t total = (size_t)d.n * d.c * d.h * d.w;
    for (size_t k = 0; k < total; k++) MP_ASSERT(isfinite(d.images[k]));
    MP_ASSERT(mp_dataset_check_compatible(&d, &d) == MP_OK);
    mp_dataset_free(&d);
    return 0;
}
