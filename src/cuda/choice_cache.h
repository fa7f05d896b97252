/* choice_cache.h — the process-wide tables of timed library choices (cuDNN
 * convolution algorithms, conv_algo_cache.cu; cuBLASLt GEMM algorithms,
 * lt_pick.cu): fixed-size keys compared with memcmp (no padding in them),
 * fixed-size values, a lock around the table and a second lock callers hold
 * while they search, so that threads (data-parallel ranks) needing the same
 * key search once. Plus the two helpers those searches share. */
#ifndef MP_CUDA_CHOICE_CACHE_H
#define MP_CUDA_CHOICE_CACHE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    pthread_mutex_t lock;   /* the table */
    pthread_mutex_t search; /* held by the caller around a search (one at a time) */
    size_t key_size, value_size;
    unsigned char *entries; /* n entries of key_size + value_size bytes */
    int n, cap;
} mp_choice_cache;

#define MP_CHOICE_CACHE_INIT(key_type, value_type) \
    {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, sizeof(key_type), sizeof(value_type), NULL, 0, 0}

/* Copies the value under key into *value; false when there is none. */
bool mp_choice_get(mp_choice_cache *c, const void *key, void *value);
/* Sets (or replaces) the value under key; out of memory: not kept (searched again next time). */
void mp_choice_put(mp_choice_cache *c, const void *key, const void *value);

/* MIXPREC_DETERMINISTIC set and not "0": choices must not depend on timing. */
bool mp_cuda_deterministic(void);
/* The median of n timings (sorts t). */
float mp_median_ms(float *t, int n);

#ifdef __cplusplus
}
#endif
#endif
