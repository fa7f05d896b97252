/* test_cuda_tangent.c — the GPU ops' second derivatives (forward_tangent and
 * backward_tangent, cuda_op.h) against the CPU tangents (src/ops, themselves
 * checked against finite differences by tests/test_op_tangent.c) in f64 on
 * exactly the values the GPU saw, through cuda_op_check's tangents mode:
 * random inputs, parameters, directions t_in / t_param / t_d_out and d_out,
 * device outputs poisoned with NaN, ||gpu - ref|| / ||ref|| per tensor
 * within 1e-5 (f32) or 1e-2 (f16/bf16 storage or compute). Every op with a
 * GPU tangent, in f32, f16 and bf16 storage (each with its usual compute
 * dtype), plus cases whose directions are partly NULL (zero). Then the
 * refusals: a tangent of a non-float dtype, a fused residual add and a
 * batchnorm2d with its residual add + ReLU fused in each give an error
 * naming the op and the node, and every GPU op kind has both slots.
 * One line per case; exit 1 on any failure, 2 when no GPU can be opened.
 * Run by scripts/gpu-check on the GPU machine (not by ctest: CI has no GPU):
 *   build-gpu/tests/gpu/test_cuda_tangent
 * First run, one H200: 300 cases and 40 refusal checks passed; worst
 * tangent errors 2.2e-6 all-f32 (softmax_cross_entropy's t_out, a sum of
 * cancelling terms), 5e-3 in bf16 (sigmoid's t_d_in). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cuda_op_check.h"

static int n_run, n_failed;

static const mp_dtype DTYPES[3] = {MP_DTYPE_F32, MP_DTYPE_F16, MP_DTYPE_BF16};

/* A tangent case of `kind` over storage dt: conv/linear and the pointwise ops
 * compute in their storage dtype, batchnorm and the losses in f32. */
static cuda_op_case make_case(const char *label, mp_op_kind kind, mp_dtype dt, int n_in, const mp_shape *shapes) {
    cuda_op_case k;
    memset(&k, 0, sizeof k);
    k.label = label;
    k.kind = kind;
    k.vt = mp_cuda_op_lookup(kind);
    k.n_in = n_in;
    for (int i = 0; i < n_in; i++) k.in_shape[i] = shapes[i];
    k.storage = dt;
    k.compute = kind == MP_OP_BATCHNORM2D || kind == MP_OP_SOFTMAX_CE || kind == MP_OP_BCE_LOGITS ? MP_DTYPE_F32 : dt;
    k.training = true;
    k.tangents = true;
    k.seed = 0x7A9 + (uint64_t)n_run * 7919;
    return k;
}

/* The case as given, then with its directions partly NULL (each alone). */
static void run(mp_cuda_ctx *ctx, cuda_op_case k, bool nulls) {
    n_run++;
    if (!cuda_op_check_print(ctx, &k)) n_failed++;
    if (!nulls) return;
    static const struct {
        unsigned bits;
        const char *what;
    } v[] = {{TANGENT_NULL_IN, "t_in NULL"}, {TANGENT_NULL_PARAM, "t_param NULL"}, {TANGENT_NULL_DOUT, "t_d_out NULL"}};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        char label[96];
        snprintf(label, sizeof label, "%s, %s", k.label, v[i].what);
        cuda_op_case j = k;
        j.label = label;
        j.tangent_nulls = v[i].bits;
        j.seed += i + 1;
        n_run++;
        if (!cuda_op_check_print(ctx, &j)) n_failed++;
    }
}

static mp_op_attr conv_attr(int out, int k, int stride, int pad, int groups, int out_pad, bool bias) {
    mp_op_attr a;
    memset(&a, 0, sizeof a);
    a.conv = (mp_conv_opts){.out_channels = out, .kernel = k, .stride = stride, .padding = pad, .dilation = 1,
                            .groups = groups, .output_padding = out_pad, .bias = bias};
    return a;
}

static void affine(mp_cuda_ctx *ctx, mp_dtype dt) {
    mp_shape s = mp_shape2(6, 24);
    cuda_op_case k = make_case("linear 24->16 bias", MP_OP_LINEAR, dt, 1, &s);
    k.attr.linear = (mp_linear_opts){.out_features = 16, .bias = true};
    run(ctx, k, true);
    s = mp_shape2(5, 13);
    k = make_case("linear 13->7", MP_OP_LINEAR, dt, 1, &s);
    k.attr.linear = (mp_linear_opts){.out_features = 7, .bias = false};
    run(ctx, k, false);
    if (dt != MP_DTYPE_F32) { /* f32 logits out of a low-precision linear */
        s = mp_shape2(6, 32);
        k = make_case("linear low -> f32 logits", MP_OP_LINEAR, MP_DTYPE_F32, 1, &s);
        k.in_dtype_set = true;
        k.in_dtype[0] = dt;
        k.compute = dt;
        k.attr.linear = (mp_linear_opts){.out_features = 10, .bias = true};
        run(ctx, k, false);
    }
    s = mp_shape4(2, 8, 7, 7);
    k = make_case("conv2d 8->16 k3 p1 bias", MP_OP_CONV2D, dt, 1, &s);
    k.attr = conv_attr(16, 3, 1, 1, 1, 0, true);
    run(ctx, k, true);
    s = mp_shape4(2, 16, 9, 9);
    k = make_case("conv2d 16->8 k3 s2 g2", MP_OP_CONV2D, dt, 1, &s);
    k.attr = conv_attr(8, 3, 2, 1, 2, 0, false);
    run(ctx, k, false);
    s = mp_shape4(2, 16, 5, 5);
    k = make_case("conv_transpose2d 16->8 s2 op1 bias", MP_OP_CONV_TRANSPOSE2D, dt, 1, &s);
    k.attr = conv_attr(8, 3, 2, 1, 1, 1, true);
    run(ctx, k, true);
    s = mp_shape4(3, 8, 4, 4);
    k = make_case("conv_transpose2d 8->16 k4 s2 p1", MP_OP_CONV_TRANSPOSE2D, dt, 1, &s);
    k.attr = conv_attr(16, 4, 2, 1, 1, 0, false);
    run(ctx, k, false);
}

static void pointwise(mp_cuda_ctx *ctx, mp_dtype dt) {
    const mp_shape shapes[] = {mp_shape4(2, 13, 5, 7), mp_shape2(5, 37)};
    const struct {
        const char *name;
        mp_op_kind kind;
    } ops[] = {{"relu", MP_OP_RELU}, {"leaky_relu 0.1", MP_OP_LEAKY_RELU}, {"tanh", MP_OP_TANH}, {"sigmoid", MP_OP_SIGMOID}};
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            cuda_op_case k = make_case(ops[o].name, ops[o].kind, dt, 1, &shapes[s]);
            k.attr.slope = 0.1f;
            run(ctx, k, s == 0);
        }
    const mp_shape ds[] = {mp_shape4(2, 13, 5, 7), mp_shape2(6, 40)};
    for (int train = 1; train >= 0; train--)
        for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) {
            cuda_op_case k = make_case(train ? "dropout 0.3" : "dropout 0.3 eval", MP_OP_DROPOUT, dt, 1, &ds[i]);
            k.attr.p = 0.3f;
            k.training = train;
            run(ctx, k, false);
        }
    mp_shape two[2] = {mp_shape4(2, 13, 5, 7), mp_shape4(2, 13, 5, 7)};
    run(ctx, make_case("add", MP_OP_ADD, dt, 2, two), true);
    run(ctx, make_case("mul", MP_OP_MUL, dt, 2, two), true);
    if (dt != MP_DTYPE_F32) {
        two[0] = two[1] = mp_shape4(2, 16, 3, 3);
        cuda_op_case k = make_case("mul mixed", MP_OP_MUL, MP_DTYPE_F32, 2, two);
        k.in_dtype_set = true;
        k.in_dtype[0] = MP_DTYPE_F32;
        k.in_dtype[1] = dt;
        run(ctx, k, false);
    }
}

static void movement(mp_cuda_ctx *ctx, mp_dtype dt) {
    mp_shape three[3] = {mp_shape4(2, 3, 4, 5), mp_shape4(2, 13, 4, 5), mp_shape4(2, 8, 4, 5)};
    run(ctx, make_case("concat 3+13+8", MP_OP_CONCAT, dt, 3, three), true);
    three[0] = mp_shape2(3, 5), three[1] = mp_shape2(3, 11);
    run(ctx, make_case("concat 2-D", MP_OP_CONCAT, dt, 2, three), false);
    struct {
        const char *label;
        mp_shape in, target;
    } rs[] = {{"reshape flatten", mp_shape4(2, 13, 5, 7), {2, {0, 455, 1, 1}}},
              {"reshape unflatten", mp_shape2(2, 455), {4, {0, 13, 5, 7}}},
              {"reshape 4-D -> 4-D", mp_shape4(2, 16, 4, 4), {4, {0, 4, 8, 8}}}};
    for (size_t i = 0; i < sizeof rs / sizeof rs[0]; i++) {
        cuda_op_case k = make_case(rs[i].label, MP_OP_RESHAPE, dt, 1, &rs[i].in);
        k.attr.reshape = rs[i].target;
        run(ctx, k, i == 0);
    }
}

static void pooling(mp_cuda_ctx *ctx, mp_dtype dt) {
    struct {
        mp_shape s;
        mp_pool_opts o;
    } cfgs[] = {{mp_shape4(2, 13, 8, 8), {2, 2, 0}}, {mp_shape4(2, 16, 9, 9), {3, 2, 1}}};
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        cuda_op_case k = make_case("maxpool2d", MP_OP_MAXPOOL2D, dt, 1, &cfgs[i].s);
        k.attr.pool = cfgs[i].o;
        run(ctx, k, i == 0);
        k = make_case("avgpool2d", MP_OP_AVGPOOL2D, dt, 1, &cfgs[i].s);
        k.attr.pool = cfgs[i].o;
        run(ctx, k, i == 0);
    }
    const mp_shape gs[] = {mp_shape4(3, 13, 5, 7), mp_shape4(2, 16, 4, 4)};
    for (size_t i = 0; i < sizeof gs / sizeof gs[0]; i++)
        run(ctx, make_case("global_avgpool", MP_OP_GLOBAL_AVGPOOL, dt, 1, &gs[i]), i == 0);
}

static void batchnorm(mp_cuda_ctx *ctx, mp_dtype dt) {
    const mp_shape shapes[] = {mp_shape4(4, 13, 5, 7), mp_shape4(8, 16, 6, 6), mp_shape2(16, 24),
                               mp_shape4(32, 24, 16, 16)};
    for (int train = 1; train >= 0; train--)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            cuda_op_case k = make_case(train ? "batchnorm2d" : "batchnorm2d eval", MP_OP_BATCHNORM2D, dt, 1, &shapes[s]);
            k.attr.bn = (mp_batchnorm_opts){.momentum = 0.1f, .eps = 1e-5f};
            k.training = train;
            run(ctx, k, s == 0);
        }
    if (dt != MP_DTYPE_F32) { /* f32 statistics over a low-precision input, f32 output */
        mp_shape s = mp_shape4(4, 16, 5, 5);
        cuda_op_case k = make_case("batchnorm2d low in, f32 out", MP_OP_BATCHNORM2D, MP_DTYPE_F32, 1, &s);
        k.attr.bn = (mp_batchnorm_opts){.momentum = 0.1f, .eps = 1e-5f};
        k.in_dtype_set = true;
        k.in_dtype[0] = dt;
        run(ctx, k, false);
    }
}

static void losses(mp_cuda_ctx *ctx, mp_dtype dt) {
    const int nk[][2] = {{8, 10}, {4, 1000}, {3, 1}};
    for (size_t i = 0; i < sizeof nk / sizeof nk[0]; i++) {
        mp_shape s[2] = {mp_shape2(nk[i][0], nk[i][1]), mp_shape1(nk[i][0])};
        run(ctx, make_case("softmax_cross_entropy", MP_OP_SOFTMAX_CE, dt, 2, s), i == 0);
    }
    const mp_shape bs[] = {mp_shape2(8, 5), mp_shape2(64, 300)};
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++) {
        mp_shape s[2] = {bs[i], bs[i]};
        run(ctx, make_case("bce_with_logits", MP_OP_BCE_LOGITS, dt, 2, s), i == 0);
    }
}

/* ---- refusals ----------------------------------------------------------- */

static void refusals(mp_cuda_ctx *ctx) {
    for (int k = 0; k < MP_OP_COUNT; k++) {
        const mp_cuda_op_vtable *vt = mp_cuda_op_lookup((mp_op_kind)k);
        if (!vt) continue;
        CHECK(vt->forward_tangent && vt->backward_tangent, "%s has no GPU tangent slots", vt->name);
    }
    /* relu, prepared for real; its calls refused before touching memory */
    mp_op_desc desc = {.kind = MP_OP_RELU, .name = "act7"};
    mp_op_info info;
    memset(&info, 0, sizeof info);
    info.n_in = 1;
    info.in[0] = mp_shape4(2, 8, 3, 3);
    MP_ASSERT(mp_op_lookup(MP_OP_RELU)->infer(&desc, &info) == MP_OK);
    mp_cuda_node_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.storage = cfg.compute = cfg.in_dtype[0] = MP_DTYPE_F32;
    cfg.training = cfg.tangents = cfg.input_grad = true;
    void *state = NULL;
    size_t ws = 0, saved = 0;
    MP_ASSERT(mp_cuda_relu_vt.prepare(ctx, &desc, &info, &cfg, &state, &ws, &saved) == MP_OK);
    mp_op_call c;
    memset(&c, 0, sizeof c);
    static float dummy[64];
    c.desc = &desc, c.info = &info, c.state = state, c.n_in = 1, c.training = true;
    c.in[0] = (mp_tensor){.data = dummy, .dtype = MP_DTYPE_F32, .shape = info.in[0]};
    c.out = c.d_out = c.d_in[0] = c.in[0];
    c.t_out = c.in[0];
    c.t_in[0] = c.in[0];
    c.t_in[0].dtype = MP_DTYPE_F64;
    CHECK_ERR(mp_cuda_relu_vt.forward_tangent(ctx, &c), MP_ERR_UNSUPPORTED, "relu", "act7", "forward_tangent", "f64");
    c.t_in[0].dtype = MP_DTYPE_F32;
    c.t_d_in[0] = c.in[0];
    c.t_d_in[0].dtype = MP_DTYPE_I32;
    CHECK_ERR(mp_cuda_relu_vt.backward_tangent(ctx, &c), MP_ERR_UNSUPPORTED, "relu", "act7", "backward_tangent",
              "i32");
    c.t_d_in[0].dtype = MP_DTYPE_F32;
    c.resid = c.in[0];
    CHECK_ERR(mp_cuda_relu_vt.forward_tangent(ctx, &c), MP_ERR_UNSUPPORTED, "relu", "act7", "residual");
    /* batchnorm2d with the residual add + ReLU fused in */
    mp_op_desc bd = {.kind = MP_OP_BATCHNORM2D, .name = "bn3"};
    bd.attr.bn = (mp_batchnorm_opts){.momentum = 0.1f, .eps = 1e-5f};
    mp_op_info bi;
    memset(&bi, 0, sizeof bi);
    bi.n_in = 1;
    bi.in[0] = mp_shape4(2, 8, 3, 3);
    MP_ASSERT(mp_op_lookup(MP_OP_BATCHNORM2D)->infer(&bd, &bi) == MP_OK);
    cfg.relu_after = cfg.add_after = true;
    cfg.resid_dtype = MP_DTYPE_F32;
    void *bst = NULL;
    ws = saved = 0;
    MP_ASSERT(mp_cuda_batchnorm2d_vt.prepare(ctx, &bd, &bi, &cfg, &bst, &ws, &saved) == MP_OK);
    mp_op_call b = c;
    b.desc = &bd, b.info = &bi, b.state = bst;
    b.resid.data = NULL;
    CHECK_ERR(mp_cuda_batchnorm2d_vt.forward_tangent(ctx, &b), MP_ERR_UNSUPPORTED, "batchnorm2d", "bn3",
              "add_after");
    CHECK_ERR(mp_cuda_batchnorm2d_vt.backward_tangent(ctx, &b), MP_ERR_UNSUPPORTED, "batchnorm2d", "bn3",
              "backward_tangent");
    mp_cuda_batchnorm2d_vt.release(bst);
    printf("%-4s refusals: a non-float tangent, a fused residual, batchnorm2d's fused add + ReLU\n",
           check_failed ? "FAIL" : "ok");
}

int main(void) {
    mp_cuda_ctx *ctx = NULL;
    if (mp_cuda_ctx_create(0, &ctx) != MP_OK) {
        printf("test_cuda_tangent: no usable GPU, nothing tested: %s\n", mp_last_error());
        return 2;
    }
    printf("test_cuda_tangent on %s (sm_%d%d)\n", ctx->name, ctx->sm_major, ctx->sm_minor);
    for (int d = 0; d < 3; d++) {
        affine(ctx, DTYPES[d]);
        pointwise(ctx, DTYPES[d]);
        movement(ctx, DTYPES[d]);
        pooling(ctx, DTYPES[d]);
        batchnorm(ctx, DTYPES[d]);
        losses(ctx, DTYPES[d]);
    }
    refusals(ctx);
    printf("test_cuda_tangent: %d cases passed, %d failed; refusals: %d checks passed, %d failed\n",
           n_run - n_failed, n_failed, check_passed, check_failed);
    mp_cuda_ctx_destroy(ctx);
    return n_failed || check_failed ? 1 : 0;
}
