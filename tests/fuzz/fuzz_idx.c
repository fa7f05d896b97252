/* fuzz_idx.c — libFuzzer harness of the IDX loader (plain or gzip). The input
 * is [u32 little-endian length L][L bytes: the images file][the rest: the
 * labels file]; what loads is checked for the loader's promises (labels in
 * range, finite pixels) and passed through the dataset checks. */
#include "fuzz_input.h"

#include <math.h>
#include <string.h>

#include "core/error.h"
#include "data/dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static fuzz_file images, labels;
    if (!images.path[0]) {
        fuzz_file_init(&images, "fuzz_idx_images");
        fuzz_file_init(&labels, "fuzz_idx_labels");
    }
    if (size < 4) return 0;
    size_t len = (size_t)data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16 | (size_t)data[3] << 24;
    data += 4, size -= 4;
    if (len > size) len = size;
    fuzz_file_set(&images, data, len);
    fuzz_file_set(&labels, data + len, size - len);
    mp_dataset d;
    if (mp_dataset_load_idx(images.path, labels.path, &d) != MP_OK) {
        MP_ASSERT(d.images == NULL && d.labels == NULL && !strchr(mp_last_error(), '\n'));
        return 0;
    }
    MP_ASSERT(d.n > 0 && d.c == 1 && d.h > 0 && d.w > 0 && d.classes >= 1 && d.classes <= MP_DATASET_MAX_CLASSES);
    for (int i = 0; i < d.n; i++) MP_ASSERT(d.labels[i] >= 0 && d.labels[i] < d.classes);
    size_t per = (size_t)d.h * d.w;
    for (size_t k = 0; k < (size_t)d.n * per; k++) MP_ASSERT(isfinite(d.images[k]));
    MP_ASSERT(mp_dataset_check_compatible(&d, &d) == MP_OK);
    (void)mp_dataset_check_labels(&d, 10, labels.path);
    mp_dataset_free(&d);
    return 0;
}
