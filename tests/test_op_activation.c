/* test_op_activation.c — gradient checks of relu, leaky relu, tanh, sigmoid
 * in f64 on random shapes. */
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
    return test_summary("test_op_activation");
}
