/* fuzz_safetensors.c — libFuzzer harness of the safetensors reader: any bytes
 * are opened as a checkpoint file; what opens is read back whole (every
 * tensor's bytes and every metadata entry), so a header that lies about its
 * layout shows up as an out-of-bounds read under AddressSanitizer. */
#include "fuzz_input.h"

#include <string.h>

#include "core/error.h"
#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static fuzz_file file;
    if (!file.path[0]) fuzz_file_init(&file, "fuzz_safetensors");
    fuzz_file_set(&file, data, size);
    mp_st_file *f = NULL;
    if (mp_safetensors_open(file.path, &f) != MP_OK) {
        MP_ASSERT(f == NULL && mp_last_error()[0] && !strchr(mp_last_error(), '\n'));
        return 0;
    }
    volatile unsigned sum = 0;
    for (int i = 0; i < mp_safetensors_count(f); i++) {
        mp_st_tensor t;
        if (mp_safetensors_get(f, mp_safetensors_name(f, i), &t) != MP_OK) continue;
        int64_t n = 1;
        for (int d = 0; d < t.ndim; d++) n *= t.dims[d];
        const unsigned char *p = t.data;
        for (int64_t k = 0; k < n * (int64_t)mp_dtype_size(t.dtype); k++) sum += p[k];
    }
    for (int i = 0; i < mp_safetensors_meta_count(f); i++) {
        const char *k = mp_safetensors_meta_key(f, i);
        MP_ASSERT(mp_safetensors_meta(f, k) != NULL);
        sum += (unsigned)strlen(mp_safetensors_meta(f, k));
    }
    mp_safetensors_close(f);
    return 0;
}
