/* rng.h — small deterministic random numbers (splitmix64 seeding a
 * xoshiro256** stream) plus a stateless counter hash for per-element masks. */
#ifndef MP_CORE_RNG_H
#define MP_CORE_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct { uint64_t s[4]; } mp_rng;

static inline uint64_t mp_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline void mp_rng_seed(mp_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = mp_splitmix64(&seed);
}

static inline uint64_t mp_rng_next(mp_rng *r) {
    uint64_t *s = r->s;
    uint64_t x = s[1] * 5;
    uint64_t result = ((x << 7) | (x >> 57)) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return result;
}

/* Uniform in [0, 1). */
static inline double mp_rng_uniform(mp_rng *r) { return (double)(mp_rng_next(r) >> 11) * 0x1.0p-53; }

/* Uniform integer in [0, n). */
static inline uint64_t mp_rng_below(mp_rng *r, uint64_t n) { return mp_rng_next(r) % n; }

static inline double mp_rng_normal(mp_rng *r) {
    double u1 = mp_rng_uniform(r), u2 = mp_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Stateless hash of (key, counter): the same mask for the same step, whatever
 * the thread that computes it. */
static inline uint64_t mp_hash64(uint64_t key, uint64_t counter) {
    uint64_t x = key ^ (counter * 0xD1B54A32D192ED03ull);
    return mp_splitmix64(&x);
}

#endif
