/* median.h — the median every benchmark and train-gan's batch_times.jsonl
 * quote, of floats (CUDA event times) or doubles (host clocks). Each sorts
 * its array in place; an even count gives the mean of the two middle values,
 * none gives 0. */
#ifndef MP_CORE_MEDIAN_H
#define MP_CORE_MEDIAN_H

#include <stdlib.h>

static inline int mp_median_cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static inline int mp_median_cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static inline float mp_median_float(float *v, int n) {
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof *v, mp_median_cmp_float);
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

static inline double mp_median_double(double *v, int n) {
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof *v, mp_median_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
