/* fuzz_cifar.c — libFuzzer harness of the CIFAR-10 binary loader: the input
 * is the test batch (test_batch.bin, a symbolic link to an in-memory file in
 * a private folder); what loads is checked for the loader's promises. */
#include "fuzz_input.h"

#include <math.h>
#include <string.h>

#include "core/error.h"
#include "data/dataset.h"

static char dir[64], link_path[128];

static void remove_dir(void) {
    unlink(link_path);
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static fuzz_file file;
    if (!dir[0]) {
        fuzz_file_init(&file, "fuzz_cifar");
        snprintf(dir, sizeof dir, "/tmp/mp_fuzz_cifar.XXXXXX");
        if (!mkdtemp(dir)) exit(2);
        snprintf(link_path, sizeof link_path, "%s/test_batch.bin", dir);
        if (symlink(file.path, link_path) != 0) exit(2);
        atexit(remove_dir);
    }
    fuzz_file_set(&file, data, size);
    mp_dataset d;
    if (mp_dataset_load_cifar10(dir, false, &d) != MP_OK) {
        MP_ASSERT(d.images == NULL && !strchr(mp_last_error(), '\n'));
        return 0;
    }
    MP_ASSERT(d.n > 0 && (size_t)d.n * 3073 == size && d.c == 3 && d.h == 32 && d.w == 32 && d.classes == 10);
    for (int i = 0; i < d.n; i++) MP_ASSERT(d.labels[i] >= 0 && d.labels[i] < 10 && d.labels[i] == data[i * 3073]);
    for (size_t k = 0; k < (size_t)d.n * 3072; k++) MP_ASSERT(d.images[k] >= 0.0f && d.images[k] <= 1.0f);
    MP_ASSERT(mp_dataset_check_compatible(&d, &d) == MP_OK);
    mp_dataset_free(&d);
    return 0;
}
