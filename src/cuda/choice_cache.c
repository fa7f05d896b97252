/* choice_cache.c — see choice_cache.h. */
#include "cuda/choice_cache.h"

#include <stdlib.h>
#include <string.h>

#include "mixprec.h"

static unsigned char *entry(const mp_choice_cache *c, int i) {
    return c->entries + (size_t)i * (c->key_size + c->value_size);
}

static int find(const mp_choice_cache *c, const void *key) {
    for (int i = 0; i < c->n; i++)
        if (!memcmp(entry(c, i), key, c->key_size)) return i;
    return -1;
}

bool mp_choice_get(mp_choice_cache *c, const void *key, void *value) {
    pthread_mutex_lock(&c->lock);
    const int i = find(c, key);
    if (i >= 0) memcpy(value, entry(c, i) + c->key_size, c->value_size);
    pthread_mutex_unlock(&c->lock);
    return i >= 0;
}

void mp_choice_put(mp_choice_cache *c, const void *key, const void *value) {
    pthread_mutex_lock(&c->lock);
    int i = find(c, key);
    if (i < 0 && c->n == c->cap) {
        const int cap = c->cap ? 2 * c->cap : 64;
        unsigned char *p = realloc(c->entries, (size_t)cap * (c->key_size + c->value_size));
        if (p) c->entries = p, c->cap = cap;
    }
    if (i < 0 && c->n < c->cap) i = c->n++;
    if (i >= 0) {
        memcpy(entry(c, i), key, c->key_size);
        memcpy(entry(c, i) + c->key_size, value, c->value_size);
    }
    pthread_mutex_unlock(&c->lock);
}

bool mp_cuda_deterministic(void) {
    return mp_env_get()->deterministic;
}

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

float mp_median_ms(float *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_float);
    return t[n / 2];
}
