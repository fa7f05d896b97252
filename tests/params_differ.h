/* params_differ.h — two models' parameters compared after the same steps
 * (the fusion and in-place tests: test_bn_pool_cpu.c, test_bn_add_cpu.c,
 * test_bn_dx_over_dy_cpu.c, gpu/test_cuda_bn_pool.c). A static function
 * for one test program each. */
#ifndef MP_TESTS_PARAMS_DIFFER_H
#define MP_TESTS_PARAMS_DIFFER_H

#include <math.h>
#include <string.h>

#include "models/models.h"

/* Parameters (gradients of trainable ones, values of buffers) of a and b
 * that differ bit for bit, but the one named loose (or none: NULL), which
 * may differ within 1e-5 in relative L2 (a convolution's gradient summed
 * with atomics); *first: the first that differs, *rel its largest
 * difference relative to its largest value. */
static int params_differ(const mp_model *a, const mp_model *b, const char *loose, const char **first, double *rel) {
    int differ = 0;
    *first = "-";
    *rel = 0;
    for (int k = 0; k < a->g->n_params; k++) {
        const mp_gparam *pa = &a->g->params[k], *pb = &b->g->params[k];
        const int64_t n = mp_shape_numel(&pb->spec.shape);
        const float *va = pb->spec.trainable ? pa->grad : pa->data, *vb = pb->spec.trainable ? pb->grad : pb->data;
        bool same = !memcmp(va, vb, (size_t)n * sizeof *va);
        if (!same && loose && !strcmp(pb->name, loose)) {
            double d2 = 0, r2 = 0;
            for (int64_t i = 0; i < n; i++) {
                const double e = (double)va[i] - vb[i];
                d2 += e * e, r2 += (double)vb[i] * vb[i];
            }
            same = d2 <= 1e-10 * r2;
        }
        if (!same && !differ++) {
            *first = pb->name;
            double dmax = 0, vmax = 0;
            for (int64_t i = 0; i < n; i++) {
                dmax = fmax(dmax, fabs((double)va[i] - vb[i]));
                vmax = fmax(vmax, fabs((double)vb[i]));
            }
            *rel = vmax > 0 ? dmax / vmax : dmax;
        }
    }
    return differ;
}

#endif
