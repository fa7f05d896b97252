/* test_op_activation.c — gradient checks of relu, leaky relu, tanh, sigmoid
 * in f64 on random shapes. */
#include <math.h>

#include "check.h"
#include "op_harness.h"
#include "core/rng.h"

int main(void) {
    mp_rng r;
    mp_rng_seed(&r, 7);
    mp_op_kind kinds[] = {MP_OP_RELU, MP_OP_LEAKY_RELU, MP_OP_TANH, MP_OP_SIGMOID};
    for (int k = 0; k < 4; k++) {
        for (int trial = 0; trial < 3; trial++) {
            mp_shape s = mp_shape4(1 + (int)mp_rng_below(&r, 3), 1 + (int)mp_rng_below(&r, 4),
                                   2 + (int)mp_rng_below(&r, 5), 2 + (int)mp_rng_below(&r, 5));
            mp_op_attr a = {.slope = 0.2f};
            double e = gradcheck_op(kinds[k], a, 1, &s, NULL, true, 100 + trial, 0);
            CHECK(e < 1e-6, "%s trial %d rel.err %g", mp_op_lookup(kinds[k])->name, trial, e);
        }
    }
    /* NaN and inf propagate through every activation (overflows stay visible) */
    for (int k = 0; k < 4; k++) {
        op_fixture f;
        mp_shape s = mp_shape2(1, 3);
        mp_op_attr a = {.slope = 0.2f};
        CHECK(op_fixture_init(&f, kinds[k], a, 1, &s, NULL, MP_DTYPE_F32, MP_IMPL_REF, true) == MP_OK, "init");
        float *x = f.call.in[0].data, *y = f.call.out.data;
        x[0] = NAN;
        x[1] = -1.0f;
        x[2] = 2.0f;
        f.vt->forward(&f.call);
        CHECK(isnan(y[0]), "%s(NaN) = %g, must stay NaN", f.vt->name, y[0]);
        float *dy = f.call.d_out.data, *dx = f.call.d_in[0].data;
        dy[0] = dy[1] = dy[2] = 1.0f;
        f.vt->backward(&f.call);
        CHECK(kinds[k] == MP_OP_RELU ? dx[1] == 0 && dx[2] == 1 : 1, "relu gradient mask");
        op_fixture_free(&f);
    }
    return test_summary("test_op_activation");
}
