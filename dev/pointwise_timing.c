/* pointwise_timing.c — throwaway measurement (not built by CMake): ReLU and
 * BatchNorm forward/backward through the op table on cnn10's first-stage
 * activations (128x64x28x28), f32 vs bf16 storage, the scalar reference
 * (MP_IMPL_REF) vs the vector fast path (MP_IMPL_AUTO), batch norm alone and
 * with the ReLU fused (relu_after), median of reps, with the bytes each
 * moves, to tell memory-bound kernels from slow ones. CPUTIME=1 times the
 * process's CPU time (with OMP_NUM_THREADS=1: comparisons on a loaded
 * machine).
 * Build: gcc -O3 -fopenmp -Iinclude -Isrc dev/pointwise_timing.c BUILD/libmixprec.a -lm -o /tmp/pwt
 *        (plus the libraries libmixprec links: -ldnnl -lz -lpthread)           */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/op.h"

static double now(void) {
    struct timespec t;
    clock_gettime(getenv("CPUTIME") ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_ms(mp_status (*f)(const mp_op_call *), const mp_op_call *c, int reps) {
    double t[64];
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        f(c);
        t[r] = 1e3 * (now() - t0);
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp);
    return t[reps / 2];
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 15;
    mp_shape s = mp_shape4(128, 64, 28, 28);
    int64_t n = mp_shape_numel(&s);
    for (int v = 0; v < 4; v++) {
        const int bf = v & 1;
        const mp_impl impl = v < 2 ? MP_IMPL_REF : MP_IMPL_AUTO;
        const char *iname = v < 2 ? "scalar" : "vector";
        mp_dtype dt = bf ? MP_DTYPE_BF16 : MP_DTYPE_F32;
        size_t esz = bf ? 2 : 4;
        void *x = aligned_alloc(64, n * esz), *y = aligned_alloc(64, n * esz), *dy = aligned_alloc(64, n * esz),
             *dx = aligned_alloc(64, n * esz);
        float *tmp = malloc(n * sizeof(float));
        for (int64_t i = 0; i < n; i++) tmp[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
        if (bf) mp_convert_f32_to_bf16(tmp, x, n), mp_convert_f32_to_bf16(tmp, dy, n);
        else memcpy(x, tmp, n * 4), memcpy(dy, tmp, n * 4);
        memset(y, 0, n * esz);
        memset(dx, 0, n * esz);
        mp_op_desc d = {.kind = MP_OP_RELU, .name = "relu"};
        mp_op_info info = {.n_in = 1, .in = {s}, .out = s};
        mp_op_call c = {.desc = &d, .info = &info, .impl = impl, .training = true, .n_in = 1};
        c.in[0] = (mp_tensor){dt, s, x};
        c.out = (mp_tensor){dt, s, y};
        c.d_out = (mp_tensor){dt, s, dy};
        c.d_in[0] = (mp_tensor){dt, s, dx};
        const mp_op_vtable *vt = mp_op_lookup(MP_OP_RELU);
        double f = median_ms(vt->forward, &c, reps), b = median_ms(vt->backward, &c, reps);
        printf("%s relu    %-4s forward %6.2f ms (%5.1f GB/s)  backward %6.2f ms (%5.1f GB/s)\n", iname,
               bf ? "bf16" : "f32", f,
               2.0 * n * esz / f / 1e6, b, 3.0 * n * esz / b / 1e6);
        /* batchnorm */
        mp_op_desc bd = {.kind = MP_OP_BATCHNORM2D, .name = "bn", .attr.bn = {.eps = 1e-5f, .momentum = 0.1f}};
        mp_op_info bi = {.n_in = 1, .in = {s}};
        mp_op_lookup(MP_OP_BATCHNORM2D)->infer(&bd, &bi);
        float *p[4], *dp[2];
        for (int k = 0; k < 4; k++) {
            p[k] = malloc(64 * sizeof(float));
            for (int j = 0; j < 64; j++) p[k][j] = 1.0f;
        }
        for (int k = 0; k < 2; k++) dp[k] = malloc(64 * sizeof(float));
        mp_op_call bc = {.desc = &bd, .info = &bi, .impl = impl, .training = true, .n_in = 1};
        bc.in[0] = (mp_tensor){dt, s, x};
        bc.out = (mp_tensor){dt, s, y};
        bc.d_out = (mp_tensor){dt, s, dy};
        bc.d_in[0] = (mp_tensor){dt, s, dx};
        mp_shape c1 = mp_shape1(64);
        for (int k = 0; k < 4; k++) bc.param[k] = (mp_tensor){MP_DTYPE_F32, c1, p[k]};
        for (int k = 0; k < 2; k++) bc.d_param[k] = (mp_tensor){MP_DTYPE_F32, c1, dp[k]};
        bc.saved = aligned_alloc(64, 4096);
        const mp_op_vtable *bv = mp_op_lookup(MP_OP_BATCHNORM2D);
        for (int relu = 0; relu < 2; relu++) {
            bc.relu_after = relu;
            f = median_ms(bv->forward, &bc, reps);
            b = median_ms(bv->backward, &bc, reps);
            printf("%s bn%-5s %-4s forward %6.2f ms (%5.1f GB/s)  backward %6.2f ms (%5.1f GB/s)\n", iname,
                   relu ? "+relu" : "", bf ? "bf16" : "f32", f, 2.0 * n * esz / f / 1e6, b,
                   (relu ? 4.0 : 3.0) * n * esz / b / 1e6);
        }
    }
    return 0;
}
