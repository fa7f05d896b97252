/* op_harness.h — drive one op through its vtable outside any graph: allocate
 * its tensors, fill them randomly, run forward/backward, check gradients
 * against central finite differences in f64, and compare implementations. */
#ifndef MP_TESTS_OP_HARNESS_H
#define MP_TESTS_OP_HARNESS_H

#include "ops/op.h"

typedef struct {
    mp_op_desc desc;
    mp_op_info info;
    const mp_op_vtable *vt;
    mp_op_call call;     /* tensors point into owned memory */
    void *mem[3 * MP_MAX_INPUTS + 3 * MP_MAX_PARAMS + 8];
    int n_mem;
} op_fixture;

/* in_dtypes may be NULL (all inputs of dtype dt); use MP_DTYPE_I32 for labels.
 * Returns MP_OK or the error of infer/prepare (message in mp_last_error()). */
mp_status op_fixture_init(op_fixture *f, mp_op_kind kind, mp_op_attr attr, int n_in,
                          const mp_shape *in_shapes, const mp_dtype *in_dtypes, mp_dtype dt,
                          mp_impl impl, bool training);
void op_fixture_free(op_fixture *f);
/* Inputs ~ N(0,1), labels uniform in [0, classes) with classes = in[0].dims[1],
 * BCE targets uniform in [0,1], weights ~ N(0, 1/fan_in), running_var > 0,
 * d_out ~ N(0,1) (loss ops: d_out = 1.7). */
void op_fixture_randomize(op_fixture *f, uint64_t seed);
/* Copy inputs/params/d_out of src into dst (same shapes; dtypes may differ). */
void op_fixture_copy_data(op_fixture *dst, const op_fixture *src);

/* Gradient check in f64 with the reference implementation: every input and
 * trainable parameter gradient against central differences of
 * L = sum(d_out * out). Fails (returns > tol) on all-zero analytic gradients.
 * Returns the worst relative error and prints a line per tensor when verbose. */
double gradcheck_op(mp_op_kind kind, mp_op_attr attr, int n_in, const mp_shape *in_shapes,
                    const mp_dtype *in_dtypes, bool training, uint64_t seed, int verbose);
/* The same with the call's relu_after set (batchnorm2d with the ReLU that
 * reads it fused in). */
double gradcheck_op_relu_after(mp_op_kind kind, mp_op_attr attr, int n_in, const mp_shape *in_shapes,
                               const mp_dtype *in_dtypes, bool training, uint64_t seed, int verbose);

/* ||a - b|| / ||b|| over two tensors of one shape (f32/f64/i32, any mix);
 * inf when a difference is not finite. */
double op_rel_err(const mp_tensor *a, const mp_tensor *b);

/* Run REF and ONEDNN in f32 on the same data; return the worst
 * ||a-b|| / ||b|| over the output and every gradient. */
double compare_impls_op(mp_op_kind kind, mp_op_attr attr, int n_in, const mp_shape *in_shapes,
                        const mp_dtype *in_dtypes, bool training, uint64_t seed, int verbose);

#endif
