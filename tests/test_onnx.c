/* test_onnx.c — the ONNX importer on bad input, and its hooks: files that are
 * not protobuf, truncated at every byte, unsupported ops and opsets,
 * unresolvable dynamic shapes, missing initializers, asymmetric pads and
 * non-square kernels each give one clear error (status and message checked),
 * never a crash; a dead branch is skipped; a valid classifier imports with its initializers as the
 * parameters, keeps them in a trainer, trains, exports, and enters the zoo by
 * file name with the data's shape checked. In a build without protobuf-c
 * every call says so. */
#define _GNU_SOURCE /* nftw (scratch_dir.h) */
#include <math.h>
#include <unistd.h>

#include "check.h"
#include "onnx_pb.h"
#include "scratch_dir.h"

static char dir[4096];

/* Input (N, 1, 4, 4) -> Conv 3x3 (2 channels, pads 1) -> Relu -> Flatten ->
 * Gemm (10 classes); `op`, `pads`, `kernel` and the initializers vary per test. */
typedef struct {
    int opset;
    const char *act_op;      /* the op after the conv ("Relu") */
    int64_t pads[4];
    int64_t kernel[2];
    bool drop_weight;        /* the conv weight's initializer is missing */
    bool dynamic_hw;         /* the input's H and W are symbols */
} spec;

static const float w_conv[2 * 1 * 3 * 3] = {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f, 0.7f, -0.8f, 0.9f,
                                            -0.1f, 0.2f, -0.3f, 0.4f, 0.5f, -0.6f, 0.7f, 0.8f, -0.9f};

static pb build(spec s) {
    pb g = {0}, a = {0};
    if (s.kernel[0] == 0) s.kernel[0] = s.kernel[1] = 3;
    const int64_t wd[4] = {2, 1, s.kernel[0], s.kernel[1]}, fcd[2] = {10, 32}, bd[1] = {10};
    static float fc[320], fcb[10], wbig[2 * 3 * 5];
    for (int k = 0; k < 320; k++) fc[k] = (float)((k * 37) % 19 - 9) / 50;
    for (int k = 0; k < 10; k++) fcb[k] = (float)k / 10;
    if (!s.drop_weight) {
        if (s.kernel[1] != 3) onnx_init(&g, "W", 1, wd, 4, wbig, sizeof wbig);
        else onnx_init(&g, "W", 1, wd, 4, w_conv, sizeof w_conv);
    }
    onnx_init(&g, "fc.w", 1, fcd, 2, fc, sizeof fc);
    onnx_init(&g, "fc.b", 1, bd, 1, fcb, sizeof fcb);
    onnx_attr_ints(&a, "kernel_shape", s.kernel, 2);
    onnx_attr_ints(&a, "pads", s.pads, 4);
    onnx_node(&g, "Conv", "conv1", "x,W", "c1", &a);
    onnx_node(&g, s.act_op ? s.act_op : "Relu", "act1", "c1", "r1", NULL);
    onnx_attr_int(&a, "axis", 1);
    onnx_node(&g, "Flatten", "flat", "r1", "f1", &a);
    onnx_attr_int(&a, "transB", 1);
    onnx_node(&g, "Gemm", "fc", "f1,fc.w,fc.b", "logits", &a);
    const int64_t in[4] = {-1, 1, s.dynamic_hw ? -1 : 4, s.dynamic_hw ? -1 : 4}, out[2] = {-1, 10};
    const char *const params[4] = {"batch", NULL, "height", "width"};
    onnx_value_info(&g, 11, "x", in, 4, params);
    onnx_value_info(&g, 12, "logits", out, 2, params);
    return onnx_model(&g, s.opset ? s.opset : 17);
}

static const char *save(const char *name, spec s) {
    const char *path = scratch_path(dir, name);
    pb m = build(s);
    pb_save(&m, path);
    free(m.b);
    return path;
}

static const int64_t sym[4] = {1, 1, 1, 1};

static void test_bad_files(void) {
    mp_model m;
    const char *path = scratch_path(dir, "text.onnx");
    FILE *f = fopen(path, "w");
    fputs("this is not a protobuf file, just text\n", f);
    fclose(f);
    CHECK_ERR(mp_model_from_onnx(path, NULL, &m), MP_ERR_FORMAT, path, "not an ONNX model");
    CHECK(m.g == NULL, "a failed import leaves no graph");
    path = scratch_path(dir, "empty.onnx");
    fclose(fopen(path, "w"));
    CHECK_ERR(mp_model_from_onnx(path, NULL, &m), MP_ERR_FORMAT, path, "not an ONNX model");
    CHECK_ERR(mp_model_from_onnx(scratch_path(dir, "missing.onnx"), NULL, &m), MP_ERR_IO, "missing.onnx");
    CHECK_ERR(mp_model_from_onnx(dir, NULL, &m), MP_ERR_IO, "directory");

    /* every truncation of a valid model fails cleanly; the whole file loads */
    pb full = build((spec){.pads = {1, 1, 1, 1}});
    path = scratch_path(dir, "truncated.onnx");
    int failed = 0;
    for (size_t n = 0; n < full.n; n++) {
        pb part = {.b = full.b, .n = n};
        pb_save(&part, path);
        mp_status s = mp_model_from_onnx(path, NULL, &m);
        if (s != MP_OK && strstr(mp_last_error(), path) && !strchr(mp_last_error(), '\n') && !m.g) failed++;
        else CHECK(false, "truncated to %zu of %zu bytes: %s (%s)", n, full.n, mp_status_name(s), mp_last_error());
        mp_model_free(&m);
    }
    printf("  %d truncations of %zu bytes each fail with one line naming the file\n", failed, full.n);
    pb_save(&full, path);
    CHECK_ERR(mp_model_from_onnx(path, NULL, &m), MP_OK);
    mp_model_free(&m);
    free(full.b);
}

/* An input whose TypeProto holds a sequence, not a tensor: tensor_type
 * shares that oneof, so reading it regardless read past the sequence's
 * message (a heap over-read the ONNX fuzzer found); now one clear error. */
static void test_non_tensor_input(void) {
    pb g = {0}, tensor = {0}, elem = {0}, seq = {0}, type = {0}, vi = {0};
    pb_int(&tensor, 1, 1);     /* TypeProto.Tensor: elem_type float */
    pb_msg(&elem, 1, &tensor); /* TypeProto { tensor_type } */
    pb_msg(&seq, 1, &elem);    /* TypeProto.Sequence { elem_type } */
    pb_msg(&type, 4, &seq);    /* TypeProto { sequence_type } */
    pb_str(&vi, 1, "x");
    pb_msg(&vi, 2, &type);
    pb_msg(&g, 11, &vi);
    onnx_node(&g, "Relu", "act", "x", "y", NULL);
    const int64_t out[2] = {-1, 10};
    const char *const params[2] = {"batch", NULL};
    onnx_value_info(&g, 12, "y", out, 2, params);
    pb m = onnx_model(&g, 17);
    const char *p = scratch_path(dir, "sequence_input.onnx");
    pb_save(&m, p);
    free(m.b);
    mp_model model;
    CHECK_ERR(mp_model_from_onnx(p, NULL, &model), MP_ERR_UNSUPPORTED, p, "input 'x'", "not a tensor");
}

static void test_bad_models(void) {
    mp_model m;
    const char *p = save("softmax.onnx", (spec){.act_op = "Softmax", .pads = {1, 1, 1, 1}});
    CHECK_ERR(mp_model_from_onnx(p, NULL, &m), MP_ERR_UNSUPPORTED, p, "node 'act1'", "Softmax", "opset 17",
              "unsupported op");
    p = save("opset9.onnx", (spec){.opset = 9, .pads = {1, 1, 1, 1}});
    CHECK_ERR(mp_model_from_onnx(p, NULL, &m), MP_ERR_UNSUPPORTED, p, "opset 9", "13 to 21");
    p = save("opset22.onnx", (spec){.opset = 22, .pads = {1, 1, 1, 1}});
    CHECK_ERR(mp_model_from_onnx(p, NULL, &m), MP_ERR_UNSUPPORTED, "opset 22");
    p = save("no_weight.onnx", (spec){.drop_weight = true, .pads = {1, 1, 1, 1}});
    CHECK_ERR(mp_model_from_onnx(p, NULL, &m), MP_ERR_FORMAT, p, "node 'conv1'", "'W'", "initializer");
    p = save("asym.onnx", (spec){.pads = {0, 0, 1, 1}});
    CHECK_ERR(mp_model_from_onnx(p, NULL, &m), MP_ERR_UNSUPPORTED, p, "node 'conv1'", "pads [0, 0, 1, 1]",
              "symmetric");
    p = save("rect.onnx", (spec){.pads = {1, 1, 1, 1}, .kernel = {3, 5}});
    CHECK_ERR(mp_model_from_onnx(p, NULL, &m), MP_ERR_UNSUPPORTED, p, "node 'conv1'", "not square");
    p = save("dynamic.onnx", (spec){.pads = {1, 1, 1, 1}, .dynamic_hw = true});
    CHECK_ERR(mp_model_from_onnx(p, NULL, &m), MP_ERR_SHAPE, p, "input 'x'", "dynamic", "height", "--input-shape");
    /* given the shape, it imports */
    CHECK_ERR(mp_model_from_onnx(p, &(mp_onnx_opts){.c = 1, .h = 4, .w = 4}, &m), MP_OK);
    mp_model_free(&m);
    (void)sym;
}

/* A reshape whose target is computed from the batch size (Shape -> Gather ->
 * Mul by 2 -> Reshape) cannot be resolved per sample; an Add with a
 * broadcast constant and an average pool not counting its padding are refused. */
static void test_unresolvable(void) {
    pb g = {0}, a = {0};
    const int64_t one = 1, zero_d[1] = {1};
    const int64_t idx0 = 0, two = 2, minus1 = -1;
    onnx_init(&g, "zero", 7, NULL, 0, &idx0, 8);
    onnx_init(&g, "two", 7, NULL, 0, &two, 8);
    onnx_init(&g, "axes", 7, zero_d, 1, &idx0, 8);
    onnx_init(&g, "m1", 7, &one, 1, &minus1, 8);
    onnx_node(&g, "Shape", "shape", "x", "s", NULL);
    onnx_node(&g, "Gather", "gather", "s,zero", "n", NULL);
    onnx_node(&g, "Mul", "double", "n,two", "n2", NULL);
    onnx_node(&g, "Unsqueeze", "unsq", "n2,axes", "n2u", NULL);
    onnx_attr_int(&a, "axis", 0);
    onnx_node(&g, "Concat", "cat", "n2u,m1", "target", &a);
    onnx_node(&g, "Reshape", "reshape", "x,target", "y", NULL);
    const int64_t in[4] = {-1, 1, 4, 4}, out[2] = {-1, 8};
    const char *const params[4] = {"N", NULL, NULL, NULL};
    onnx_value_info(&g, 11, "x", in, 4, params);
    onnx_value_info(&g, 12, "y", out, 2, params);
    pb model = onnx_model(&g, 17);
    const char *p = scratch_path(dir, "reshape_batch.onnx");
    pb_save(&model, p);
    free(model.b);
    mp_graph *gr = mp_graph_create();
    CHECK_ERR(mp_graph_from_onnx(gr, p, NULL, NULL), MP_ERR_UNSUPPORTED, p, "node 'reshape'", "batch dimension");
    mp_graph_destroy(gr);

    g = (pb){0};
    const int64_t cd[1] = {4};
    const float c4[4] = {1, 2, 3, 4};
    onnx_init(&g, "c", 1, cd, 1, c4, sizeof c4);
    onnx_node(&g, "Add", "add_const", "x,c", "y", NULL);
    onnx_value_info(&g, 11, "x", in, 4, params);
    onnx_value_info(&g, 12, "y", in, 4, params);
    model = onnx_model(&g, 17);
    p = scratch_path(dir, "add_const.onnx");
    pb_save(&model, p);
    free(model.b);
    gr = mp_graph_create();
    CHECK_ERR(mp_graph_from_onnx(gr, p, NULL, NULL), MP_ERR_UNSUPPORTED, "node 'add_const'", "constant 'c'");
    mp_graph_destroy(gr);

    g = (pb){0};
    const int64_t k3[2] = {3, 3}, p1[4] = {1, 1, 1, 1};
    onnx_attr_ints(&a, "kernel_shape", k3, 2);
    onnx_attr_ints(&a, "pads", p1, 4);
    onnx_node(&g, "AveragePool", "pool", "x", "y", &a);
    onnx_value_info(&g, 11, "x", in, 4, params);
    onnx_value_info(&g, 12, "y", in, 4, params);
    model = onnx_model(&g, 17);
    p = scratch_path(dir, "avgpool.onnx");
    pb_save(&model, p);
    free(model.b);
    gr = mp_graph_create();
    CHECK_ERR(mp_graph_from_onnx(gr, p, NULL, NULL), MP_ERR_UNSUPPORTED, "node 'pool'", "count_include_pad=0");
    mp_graph_destroy(gr);

    /* a branch the output does not depend on is skipped, whatever its ops */
    g = (pb){0};
    onnx_node(&g, "Softmax", "unused", "x", "s", NULL);
    onnx_node(&g, "Relu", "relu", "x", "y", NULL);
    onnx_value_info(&g, 11, "x", in, 4, params);
    onnx_value_info(&g, 12, "y", in, 4, params);
    model = onnx_model(&g, 17);
    p = scratch_path(dir, "dead_branch.onnx");
    pb_save(&model, p);
    free(model.b);
    gr = mp_graph_create();
    mp_onnx_info info;
    CHECK_ERR(mp_graph_from_onnx(gr, p, NULL, &info), MP_OK);
    CHECK(mp_graph_node_count(gr) == 2 && mp_graph_find(gr, "unused") < 0, "%d nodes", mp_graph_node_count(gr));
    mp_graph_destroy(gr);
}

/* The graph g (freed) as a model of opset 17 in the scratch dir: its path. */
static const char *save_graph(const char *name, pb *g) {
    const char *path = scratch_path(dir, name);
    pb m = onnx_model(g, 17);
    pb_save(&m, path);
    free(m.b);
    return path;
}

/* The n outputs of node `out` of g for one sample x (reference kernels). */
static mp_status forward_graph(mp_graph *g, mp_node in, mp_node out, const float *x, float *y, size_t n) {
    mp_plan *p = NULL;
    mp_status s = mp_plan_create(g, (mp_plan_opts){.batch = 1, .reference = true, .channels_first = true}, &p);
    if (s == MP_OK) s = mp_plan_set_input(p, in, x, mp_plan_numel(p, in));
    if (s == MP_OK) s = mp_plan_forward(p);
    const size_t got = s == MP_OK ? mp_plan_numel(p, out) : n;
    CHECK(got == n, "%zu outputs, expected %zu", got, n);
    if (s == MP_OK && got == n) s = mp_plan_read(p, out, y, n);
    mp_plan_destroy(p);
    return s;
}

/* The n outputs of the model at `path` for one sample x. */
static mp_status forward_one(const char *path, const float *x, float *y, size_t n) {
    mp_graph *g = mp_graph_create();
    mp_onnx_info info;
    mp_status s = mp_graph_from_onnx(g, path, NULL, &info);
    if (s == MP_OK) s = forward_graph(g, info.input, info.output, x, y, n);
    mp_graph_destroy(g);
    return s;
}

static const char *const batch_sym[4] = {"N", NULL, NULL, NULL};

/* x (N, 4) -> Gemm with B (4, 3) -> `tail`: the Gemm's beta scales its own C
 * only; ONNX's Gemm ignores beta without C, so a bias absorbed from a
 * following Add is not scaled. */
static void test_gemm_beta(void) {
    const int64_t bd[2] = {4, 3}, cd[1] = {3}, in[2] = {-1, 4}, out[2] = {-1, 3};
    float bw[12], bias[3] = {1, 2, 3}, y[3];
    for (int k = 0; k < 12; k++) bw[k] = (float)(k % 5) / 4; /* row 0: 0, 0.25, 0.5 */
    const float x[4] = {1, 0, 0, 0};
    for (int with_c = 0; with_c < 2; with_c++) {
        pb g = {0}, a = {0};
        onnx_init(&g, "B", 1, bd, 2, bw, sizeof bw);
        onnx_init(&g, "bias", 1, cd, 1, bias, sizeof bias);
        onnx_attr_float(&a, "beta", 0.5f);
        if (with_c) onnx_node(&g, "Gemm", "gemm", "x,B,bias", "y", &a);
        else {
            onnx_node(&g, "Gemm", "gemm", "x,B", "t", &a);
            onnx_node(&g, "Add", "add_bias", "t,bias", "y", NULL);
        }
        onnx_value_info(&g, 11, "x", in, 2, batch_sym);
        onnx_value_info(&g, 12, "y", out, 2, batch_sym);
        const char *p = save_graph(with_c ? "gemm_beta_c.onnx" : "gemm_beta_add.onnx", &g);
        CHECK_ERR(forward_one(p, x, y, 3), MP_OK);
        const float s = with_c ? 0.5f : 1.0f;
        CHECK(y[0] == s * 1 && y[1] == 0.25f + s * 2 && y[2] == 0.5f + s * 3, "%s: %g %g %g",
              with_c ? "Gemm's C times beta 0.5" : "an Add's bias after a Gemm with beta 0.5", y[0], y[1], y[2]);
    }
}

/* x (N, 4) -> Gemm whose weight (as_weight: B (4, 3)) or C (else, with B
 * zero and transB) is folded from `op` of constants a and b. */
static const char *save_folded_gemm(const char *name, const char *op, const int64_t *ad, int an, const float *a,
                                    const int64_t *bd, int bn, const float *b, bool as_weight) {
    pb g = {0}, attrs = {0};
    const int64_t zd[2] = {3, 4}, in[2] = {-1, 4}, out[2] = {-1, 3};
    static const float zero[12];
    int64_t na = 1, nb = 1;
    for (int k = 0; k < an; k++) na *= ad[k];
    for (int k = 0; k < bn; k++) nb *= bd[k];
    onnx_init(&g, "a", 1, ad, an, a, (size_t)na * sizeof *a);
    onnx_init(&g, "b", 1, bd, bn, b, (size_t)nb * sizeof *b);
    onnx_node(&g, op, "fold", "a,b", "folded", NULL);
    if (as_weight) onnx_node(&g, "Gemm", "gemm", "x,folded", "y", NULL);
    else {
        onnx_init(&g, "B", 1, zd, 2, zero, sizeof zero);
        onnx_attr_int(&attrs, "transB", 1);
        onnx_node(&g, "Gemm", "gemm", "x,B,folded", "y", &attrs);
    }
    onnx_value_info(&g, 11, "x", in, 2, batch_sym);
    onnx_value_info(&g, 12, "y", out, 2, batch_sym);
    return save_graph(name, &g);
}

/* Folded Add/Sub/Mul/Div broadcast as numpy does: shapes right-aligned to
 * the larger rank, dims equal or 1; other shapes are refused by node. */
static void test_fold_broadcast(void) {
    const int64_t d11[2] = {1, 1}, d3[1] = {3}, d41[2] = {4, 1}, d13[2] = {1, 3}, d2[1] = {2};
    const float zero = 0, bias[3] = {1, 2, 3}, col[4] = {1, 2, 3, 4}, row[3] = {1, -1, 0.5f};
    const float x[4] = {1, 10, 100, 1000};
    float y[3] = {0};
    /* [1, 1] + [3] is (1, 3), the bias itself (it folded to shape (1, 1)) */
    const char *p = save_folded_gemm("fold_add_11_3.onnx", "Add", d11, 2, &zero, d3, 1, bias, false);
    CHECK_ERR(forward_one(p, x, y, 3), MP_OK);
    CHECK(y[0] == 1 && y[1] == 2 && y[2] == 3, "Gemm's C folded from [1, 1] + [3]: %g %g %g", y[0], y[1], y[2]);
    /* (4, 1) * (1, 3) is the (4, 3) outer product: y = row * (x . col) */
    p = save_folded_gemm("fold_mul_41_13.onnx", "Mul", d41, 2, col, d13, 2, row, true);
    CHECK_ERR(forward_one(p, x, y, 3), MP_OK);
    CHECK(y[0] == 4321 && y[1] == -4321 && y[2] == 2160.5f, "weight folded from (4, 1) * (1, 3): %g %g %g", y[0],
          y[1], y[2]);
    p = save_folded_gemm("fold_add_2_3.onnx", "Add", d2, 1, col, d3, 1, bias, false);
    mp_graph *g = mp_graph_create();
    CHECK_ERR(mp_graph_from_onnx(g, p, NULL, NULL), MP_ERR_SHAPE, p, "node 'fold'", "'a' [2] and 'b' [3]",
              "do not broadcast");
    mp_graph_destroy(g);
}

/* Exports g (input x of 72 values per sample, output `out` of 3) as `name`,
 * with fp32 or fp16 weights, and imports it back: the imported graph, whose
 * output must equal g's (within fp16's rounding for fp16 weights), or NULL
 * when the import failed. */
static mp_graph *export_round_trip(mp_graph *g, mp_node x, mp_node out, const char *name, bool fp16) {
    float in[72], y0[3], y1[3];
    for (int k = 0; k < 72; k++) in[k] = (float)sin(k * 0.37);
    CHECK_ERR(forward_graph(g, x, out, in, y0, 3), MP_OK);
    const char *path = scratch_path(dir, name);
    CHECK_ERR(mp_graph_to_onnx(g, x, out, path, &(mp_onnx_export_opts){.fp16_weights = fp16}), MP_OK);
    mp_graph *back = mp_graph_create();
    mp_onnx_info info;
    const mp_status st = mp_graph_from_onnx(back, path, NULL, &info);
    CHECK_ERR(st, MP_OK);
    if (st != MP_OK) {
        mp_graph_destroy(back);
        return NULL;
    }
    CHECK_ERR(forward_graph(back, info.input, info.output, in, y1, 3), MP_OK);
    const float tol = fp16 ? 1e-2f : 0;
    for (int k = 0; k < 3; k++)
        CHECK(fabsf(y0[k] - y1[k]) <= tol * (1 + fabsf(y0[k])), "%s: output %d %g, before export %g", name, k, y1[k],
              y0[k]);
    return back;
}

/* Parameters two nodes share (mp_graph_share_params) are written once, both
 * nodes reading the one initializer (fp16: the one Cast): the export used to
 * write them twice, and its import failed on the repeated value name. */
static void test_export_tied(void) {
    for (int fp16 = 0; fp16 < 2; fp16++) {
        mp_graph *g = mp_graph_create();
        mp_node x = mp_graph_input(g, "x", 2, 6, 6);
        const mp_conv_opts co = {.out_channels = 2, .kernel = 3, .padding = 1, .bias = true};
        mp_node a = mp_conv2d(g, "c1", x, co);
        mp_node b = mp_conv2d(g, "c1b", mp_relu(g, "r", a), co);
        CHECK_ERR(mp_graph_share_params(g, b, a), MP_OK);
        mp_node f = mp_linear(g, "fc", mp_global_avgpool(g, "gap", b), (mp_linear_opts){.out_features = 3});
        mp_graph_init_params(g, 1);
        float w0[36], w1[36];
        CHECK_ERR(mp_graph_param_get(g, "c1.weight", w0, 36), MP_OK);
        mp_graph *back = export_round_trip(g, x, f, fp16 ? "tied_f16.onnx" : "tied.onnx", fp16);
        if (back) {
            CHECK_ERR(mp_graph_param_get(back, "c1b.weight", w1, 36), MP_OK);
            const float tol = fp16 ? 1e-2f : 0;
            for (int k = 0; k < 36; k++) CHECK(fabsf(w0[k] - w1[k]) <= tol * fabsf(w0[k]), "c1b.weight[%d]", k);
        }
        mp_graph_destroy(back);
        mp_graph_destroy(g);
    }
}

/* The names the exporter adds (a parameter's initializer and fp16 Cast, a
 * global pool's pooled value, a reshape's shape, a dropout's ratio) are made
 * unique against the graph's node names: nodes named like them used to give
 * a value written twice, which the import refused. */
static void test_export_name_clash(void) {
    for (int fp16 = 0; fp16 < 2; fp16++) {
        mp_graph *g = mp_graph_create();
        mp_node x = mp_graph_input(g, "x", 2, 6, 6);
        mp_node c = mp_conv2d(g, "c1", x, (mp_conv_opts){.out_channels = 2, .kernel = 3, .padding = 1, .bias = true});
        c = mp_relu(g, "c1.weight.f16", mp_relu(g, "c1.weight", c));
        mp_node p = mp_global_avgpool(g, "gap", mp_relu(g, "gap_pool", c));
        mp_node r = mp_relu(g, "rs.shape", mp_reshape(g, "rs", p, 2, 1, 1));
        mp_node d = mp_relu(g, "d.ratio", mp_dropout(g, "d", mp_flatten(g, "fl", r), 0.25f));
        mp_node f = mp_linear(g, "fc", d, (mp_linear_opts){.out_features = 3});
        CHECK_ERR(mp_graph_status(g), MP_OK);
        mp_graph_init_params(g, 1);
        mp_graph_destroy(export_round_trip(g, x, f, fp16 ? "clash_f16.onnx" : "clash.onnx", fp16));
        mp_graph_destroy(g);
    }
}

/* Export, import, export, import: the node names stay those of the graph
 * (a global pool's too: it was exported as 'gap_pool' + a Flatten 'gap',
 * imported as 'gap_pool', then 'gap_pool_pool', and a --precision-override
 * of 'gap' no longer found it). */
static void test_export_names_stable(void) {
    mp_graph *g = mp_graph_create();
    mp_node x = mp_graph_input(g, "x", 1, 4, 4);
    mp_node c = mp_conv2d(g, "c1", x, (mp_conv_opts){.out_channels = 2, .kernel = 3, .padding = 1});
    mp_node p = mp_global_avgpool(g, "gap", mp_relu(g, "r", c));
    mp_node f = mp_linear(g, "fc", p, (mp_linear_opts){.out_features = 3});
    mp_graph_init_params(g, 1);
    const char *paths[2] = {scratch_path(dir, "names1.onnx"), NULL};
    CHECK_ERR(mp_graph_to_onnx(g, x, f, paths[0], NULL), MP_OK);
    mp_graph *back[2] = {mp_graph_create(), mp_graph_create()};
    mp_onnx_info info;
    for (int round = 0; round < 2; round++) {
        CHECK_ERR(mp_graph_from_onnx(back[round], paths[round], NULL, &info), MP_OK);
        const mp_graph *was = round ? back[0] : g;
        CHECK(mp_graph_node_count(back[round]) == mp_graph_node_count(was), "round %d: %d nodes, exported %d", round,
              mp_graph_node_count(back[round]), mp_graph_node_count(was));
        for (int i = 0; i < mp_graph_node_count(was) && i < mp_graph_node_count(back[round]); i++)
            CHECK(!strcmp(mp_graph_node_name(back[round], i), mp_graph_node_name(was, i)),
                  "round %d: node %d is '%s', exported '%s'", round, i, mp_graph_node_name(back[round], i),
                  mp_graph_node_name(was, i));
        if (round == 0) {
            paths[1] = scratch_path(dir, "names2.onnx");
            CHECK_ERR(mp_graph_to_onnx(back[0], info.input, info.output, paths[1], NULL), MP_OK);
        }
    }
    const mp_node gap = mp_graph_find(back[1], "gap");
    CHECK(gap >= 0 && !strcmp(mp_graph_node_op(back[1], gap), "global_avgpool"), "'gap' is not the global pool");
    mp_graph_destroy(back[0]);
    mp_graph_destroy(back[1]);
    mp_graph_destroy(g);
}

/* A prefix is kept whole in every imported name (it was cut to 16
 * characters: two imports whose prefixes shared those were told apart only
 * by "_2"); one that names could not keep, or a negative input dimension,
 * is refused by name. */
static void test_import_prefix(void) {
    mp_graph *g = mp_graph_create();
    mp_node x = mp_graph_input(g, "image", 1, 8, 8);
    mp_node f = mp_linear(g, "fc", mp_flatten(g, "flat", x), (mp_linear_opts){.out_features = 3});
    mp_graph_init_params(g, 1);
    const char *path = scratch_path(dir, "prefix.onnx");
    CHECK_ERR(mp_graph_to_onnx(g, x, f, path, NULL), MP_OK);
    mp_graph *h = mp_graph_create();
    mp_onnx_info info;
    const char *prefixes[2] = {"discriminator_real_", "discriminator_fake_"};
    for (int k = 0; k < 2; k++) {
        CHECK_ERR(mp_graph_from_onnx(h, path, &(mp_onnx_opts){.prefix = prefixes[k]}, &info), MP_OK);
        char want[64];
        snprintf(want, sizeof want, "%sfc", prefixes[k]);
        CHECK(mp_graph_find(h, want) >= 0, "no node '%s'", want);
        snprintf(want, sizeof want, "%simage", prefixes[k]);
        CHECK(!strcmp(mp_graph_node_name(h, info.input), want), "input '%s', want '%s'",
              mp_graph_node_name(h, info.input), want);
    }
    CHECK(mp_graph_find(h, "discriminator_real_fc_2") < 0, "the second import was told apart by a suffix");
    mp_graph *k = mp_graph_create();
    CHECK_ERR(mp_graph_from_onnx(k, path, &(mp_onnx_opts){.prefix = "a_prefix_longer_than_thirty_two_chars_"}, &info),
              MP_ERR_INVALID_ARG, "mp_onnx_opts.prefix", "longer than 32 characters");
    CHECK_ERR(mp_graph_from_onnx(h, path, &(mp_onnx_opts){.prefix = "gen."}, &info), MP_OK);
    CHECK(mp_graph_find(h, "gen_fc") >= 0, "prefix 'gen.' did not become 'gen_'");
    CHECK_ERR(mp_graph_from_onnx(k, path, &(mp_onnx_opts){.c = -1, .h = -5, .w = -5, .override_shape = true}, &info),
              MP_ERR_INVALID_ARG, "mp_onnx_opts.c = -1 is negative");
    CHECK(mp_graph_node_count(k) == 0, "a refused import added %d nodes", mp_graph_node_count(k));
    mp_graph_destroy(k);
    mp_graph_destroy(h);
    mp_graph_destroy(g);
}

/* A folded Slice with a negative step clamps a start before the first
 * element to it (ONNX: to [0, len - 1]); it was clamped to -1, which left
 * nothing: here v[-10:-100:-1] of v = [-1, 0] is [-1], so the Reshape's
 * target [0, -1] flattens each sample. */
static void test_fold_slice_negative_step(void) {
    pb g = {0}, a = {0};
    const int64_t two[1] = {2}, one[1] = {1}, v[2] = {-1, 0}, start = -10, end = -100, step = -1, zero = 0;
    onnx_init(&g, "v", 7, two, 1, v, sizeof v);
    onnx_init(&g, "start", 7, one, 1, &start, 8);
    onnx_init(&g, "end", 7, one, 1, &end, 8);
    onnx_init(&g, "axis", 7, one, 1, &zero, 8);
    onnx_init(&g, "step", 7, one, 1, &step, 8);
    onnx_init(&g, "zero", 7, one, 1, &zero, 8);
    onnx_node(&g, "Slice", "slice", "v,start,end,axis,step", "tail", NULL);
    onnx_attr_int(&a, "axis", 0);
    onnx_node(&g, "Concat", "target", "zero,tail", "shape", &a);
    onnx_node(&g, "Reshape", "flat", "x,shape", "y", NULL);
    const int64_t in[4] = {-1, 2, 3, 4}, out[2] = {-1, 24};
    onnx_value_info(&g, 11, "x", in, 4, batch_sym);
    onnx_value_info(&g, 12, "y", out, 2, batch_sym);
    const char *p = save_graph("slice_negative_step.onnx", &g);
    float x[24], y[24] = {0};
    for (int k = 0; k < 24; k++) x[k] = (float)k;
    CHECK_ERR(forward_one(p, x, y, 24), MP_OK);
    CHECK(!memcmp(x, y, sizeof x), "the flattened sample differs from the input");
}

/* Importing the model at p into a fresh graph is refused with `want`, the
 * message naming p, then `what` and `why`. */
static void import_refused(const char *p, mp_status want, const char *what, const char *why) {
    mp_graph *gr = mp_graph_create();
    CHECK_ERR(mp_graph_from_onnx(gr, p, NULL, NULL), want, p, what, why);
    mp_graph_destroy(gr);
}

/* A Dropout whose training_mode is a true constant is refused by name (a
 * model exported in training mode); false imports as inference. */
/* training_mode true draws a random mask: refused, except at ratio 0, where
 * Dropout is the identity in either mode. */
static void test_dropout_training_mode(void) {
    for (int k = 0; k < 3; k++) {
        const uint8_t training = k > 0;
        const float ratio = k == 2 ? 0.0f : 0.5f;
        pb g = {0};
        onnx_init(&g, "ratio", 1, NULL, 0, &ratio, sizeof ratio);
        onnx_init(&g, "train", 9, NULL, 0, &training, 1); /* BOOL */
        onnx_node(&g, "Dropout", "drop", "x,ratio,train", "y", NULL);
        const int64_t in[2] = {-1, 4};
        onnx_value_info(&g, 11, "x", in, 2, batch_sym);
        onnx_value_info(&g, 12, "y", in, 2, batch_sym);
        const char *names[3] = {"dropout_eval.onnx", "dropout_train.onnx", "dropout_train_ratio0.onnx"};
        const char *p = save_graph(names[k], &g);
        mp_graph *gr = mp_graph_create();
        if (k == 1)
            CHECK_ERR(mp_graph_from_onnx(gr, p, NULL, NULL), MP_ERR_UNSUPPORTED, p, "node 'drop'",
                      "training_mode 'train' is true");
        else CHECK_ERR(mp_graph_from_onnx(gr, p, NULL, NULL), MP_OK);
        mp_graph_destroy(gr);
    }
}

static void record_param(void *arg, const char *param, const char *init) {
    int *n = arg;
    if (!strcmp(param, "conv1.weight")) CHECK(!strcmp(init, "W"), "conv1.weight came from %s", init);
    ++*n;
}

/* A valid model: parameters from the initializers, names from the nodes,
 * kept by a trainer, trained, exported, and in the zoo by file name. */
static void test_valid(void) {
    const char *p = save("valid.onnx", (spec){.pads = {1, 1, 1, 1}});
    int reported = 0;
    mp_model m;
    CHECK_ERR(mp_model_from_onnx(p, &(mp_onnx_opts){.on_param = record_param, .on_param_arg = &reported}, &m), MP_OK);
    if (!m.g) return;
    CHECK(reported == 3, "%d parameters reported, expected 3", reported);
    float w[18];
    CHECK_ERR(mp_graph_param_get(m.g, "conv1.weight", w, 18), MP_OK);
    CHECK(!memcmp(w, w_conv, sizeof w), "conv1.weight holds the initializer");
    CHECK(mp_graph_find(m.g, "fc") >= 0 && mp_graph_find(m.g, "act1") >= 0 && mp_graph_find(m.g, "loss") >= 0,
          "node names come from the ONNX nodes");
    mp_optimizer *opt = NULL;
    mp_trainer *t = NULL;
    CHECK_ERR(mp_optimizer_create(m.g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_SGD}, .lr = {.base_lr = 0.1f}},
                                  &opt), MP_OK);
    CHECK_ERR(mp_trainer_create(m.g, &(mp_trainer_opts){.batch = 4, .input = m.input, .labels = m.labels,
                                                        .loss = m.loss, .optimizer = opt}, &t), MP_OK);
    float w2[18];
    CHECK_ERR(mp_trainer_param_get(t, "conv1.weight", w2, 18), MP_OK);
    CHECK(!memcmp(w2, w_conv, sizeof w2), "the trainer keeps the imported weights");
    float x[4 * 16];
    int32_t y[4] = {1, 2, 3, 4};
    for (int k = 0; k < 64; k++) x[k] = (float)sin(k);
    CHECK_ERR(mp_trainer_step(t, &(mp_batch){.images = x, .labels = y, .n = 4}, NULL), MP_OK);
    CHECK_ERR(mp_trainer_sync(t, NULL), MP_OK);
    CHECK_ERR(mp_graph_param_get(m.g, "conv1.weight", w2, 18), MP_OK);
    CHECK(memcmp(w2, w_conv, sizeof w2), "a training step moves the imported weights");
    const char *out = scratch_path(dir, "exported.onnx");
    CHECK_ERR(mp_model_export_onnx(&m, out, NULL), MP_OK);
    CHECK_ERR(mp_graph_to_onnx(m.g, m.input, m.loss, out, NULL), MP_ERR_UNSUPPORTED, "loss");
    CHECK_ERR(mp_graph_to_onnx(m.g, m.logits, m.logits, out, NULL), MP_ERR_INVALID_ARG, "not an image input");
    mp_trainer_destroy(t);
    mp_optimizer_destroy(opt);
    mp_model_free(&m);
    /* the export imports back with the trained weights under the same names */
    CHECK_ERR(mp_model_from_onnx(out, NULL, &m), MP_OK);
    float w3[18];
    if (m.g) CHECK_ERR(mp_graph_param_get(m.g, "conv1.weight", w3, 18), MP_OK);
    CHECK(m.g && !memcmp(w2, w3, sizeof w3), "the exported weights are the trained ones");
    mp_model_free(&m);

    /* the zoo: a .onnx name imports, with the data's shape and classes checked */
    CHECK_ERR(mp_model_check_name(p), MP_OK);
    CHECK(mp_model_describe(p) != NULL, "a .onnx file has a description");
    CHECK_ERR(mp_model_check_name(scratch_path(dir, "nope.onnx")), MP_ERR_IO, "nope.onnx", "not found");
    CHECK_ERR(mp_model_build(p, 1, 4, 4, 10, &m), MP_OK);
    mp_model_free(&m);
    CHECK_ERR(mp_model_build(p, 3, 32, 32, 10, &m), MP_ERR_SHAPE, p, "1x4x4", "3x32x32");
    CHECK(m.g == NULL, "no graph after a shape mismatch");
    CHECK_ERR(mp_model_build(p, 1, 4, 4, 7, &m), MP_ERR_SHAPE, "10 classes", "7 classes");
}

/* Empty constants (a 0 dim) whose other dims are huge, e.g. [0, 2^62, 4]:
 * folding them (Concat, Transpose, Flatten, Add) multiplied or added those
 * dims past INT64_MAX, undefined behaviour that UBSan aborts on; now the
 * constant is refused where it is loaded, naming it and its shape. */
static void test_empty_huge_constant(void) {
    static const char *const ops[4] = {"Concat", "Transpose", "Flatten", "Add"};
    const int64_t in[2] = {-1, 4}, d2[2] = {0, INT64_MAX}, d3[3] = {0, (int64_t)1 << 62, 4};
    const float dummy = 0;
    for (int k = 0; k < 4; k++) {
        pb g = {0}, a = {0};
        const bool cat = k == 0;
        onnx_init(&g, "empty_a", 1, cat ? d2 : d3, cat ? 2 : 3, &dummy, 0);
        onnx_init(&g, "empty_b", 1, cat ? d2 : d3, cat ? 2 : 3, &dummy, 0);
        if (cat || k == 2) onnx_attr_int(&a, "axis", 1);
        onnx_node(&g, ops[k], "fold", k == 1 || k == 2 ? "empty_a" : "empty_a,empty_b", "c", k == 0 || k == 2 ? &a : NULL);
        onnx_node(&g, "Add", "use", "x,c", "y", NULL); /* keeps the fold live */
        onnx_value_info(&g, 11, "x", in, 2, batch_sym);
        onnx_value_info(&g, 12, "y", in, 2, batch_sym);
        char name[64];
        snprintf(name, sizeof name, "empty_huge_%s.onnx", ops[k]);
        import_refused(save_graph(name, &g), MP_ERR_UNSUPPORTED, "'empty_a'", "too large");
    }
}

/* A node with an attribute twice (pads [0,0,0,0] then [1,1,1,1]): the
 * first was taken silently, a guess the ONNX checker refuses; now one
 * error naming the node and the attribute. */
static void test_duplicate_attribute(void) {
    pb g = {0}, a = {0};
    const int64_t k[2] = {2, 2}, p0[4] = {0, 0, 0, 0}, p1[4] = {1, 1, 1, 1}, in[4] = {-1, 1, 4, 4};
    const int64_t out[4] = {-1, 1, 2, 2};
    onnx_attr_ints(&a, "kernel_shape", k, 2);
    onnx_attr_ints(&a, "pads", p0, 4);
    onnx_attr_ints(&a, "pads", p1, 4);
    onnx_node(&g, "MaxPool", "pool", "x", "y", &a);
    onnx_value_info(&g, 11, "x", in, 4, batch_sym);
    onnx_value_info(&g, 12, "y", out, 4, batch_sym);
    import_refused(save_graph("duplicate_attribute.onnx", &g), MP_ERR_FORMAT, "node 'pool'",
                   "attribute pads appears twice");
}

/* Metadata that records the input normalization twice (two entries
 * mixprec.norm_mean): the last was taken silently; now one error naming
 * the file and the key, as a checkpoint's metadata given twice. */
static void test_duplicate_metadata(void) {
    pb g = {0};
    const int64_t in[2] = {-1, 4};
    onnx_node(&g, "Relu", "relu", "x", "y", NULL);
    onnx_value_info(&g, 11, "x", in, 2, batch_sym);
    onnx_value_info(&g, 12, "y", in, 2, batch_sym);
    pb m = onnx_model(&g, 17);
    static const char *const kv[3][2] = {
        {"mixprec.norm_mean", "0.5"}, {"mixprec.norm_std", "0.25"}, {"mixprec.norm_mean", "100"}};
    for (int k = 0; k < 3; k++) { /* ModelProto.metadata_props 14: StringStringEntryProto key 1, value 2 */
        pb e = {0};
        pb_str(&e, 1, kv[k][0]);
        pb_str(&e, 2, kv[k][1]);
        pb_msg(&m, 14, &e);
    }
    const char *p = scratch_path(dir, "duplicate_metadata.onnx");
    pb_save(&m, p);
    free(m.b);
    int channels = -1;
    float mean[4], std[4];
    CHECK_ERR(mp_onnx_read_normalization(p, 4, &channels, mean, std), MP_ERR_FORMAT, p,
              "metadata mixprec.norm_mean appears twice");
}

/* Gemm's C broadcasts to the (N, M) output, so its rank is at most 2: a C of
 * shape (1, 1, 3) (which ONNX runtimes refuse) imported as a bias silently. */
static void test_gemm_c_rank(void) {
    pb g = {0};
    const int64_t bd[2] = {4, 3}, cd[3] = {1, 1, 3}, in[2] = {-1, 4}, out[2] = {-1, 3};
    static const float bw[12], bias[3] = {1, 2, 3};
    onnx_init(&g, "B", 1, bd, 2, bw, sizeof bw);
    onnx_init(&g, "C3", 1, cd, 3, bias, sizeof bias);
    onnx_node(&g, "Gemm", "gemm", "x,B,C3", "y", NULL);
    onnx_value_info(&g, 11, "x", in, 2, batch_sym);
    onnx_value_info(&g, 12, "y", out, 2, batch_sym);
    import_refused(save_graph("gemm_c_rank3.onnx", &g), MP_ERR_UNSUPPORTED, "node 'gemm'", "C 'C3' of shape [1, 1, 3]");
}

int main(void) {
    scratch_dir_create(dir, sizeof dir, "test_onnx");
    mp_model m;
    const char *p = save("probe.onnx", (spec){.pads = {1, 1, 1, 1}});
    if (mp_model_from_onnx(p, NULL, &m) == MP_ERR_UNSUPPORTED && strstr(mp_last_error(), "no ONNX support")) {
        /* a build without protobuf-c: every call says so */
        CHECK_ERR(mp_graph_to_onnx(NULL, 0, 0, "x.onnx", NULL), MP_ERR_UNSUPPORTED, "protobuf-c");
        CHECK_ERR(mp_model_build(p, 1, 4, 4, 10, &m), MP_ERR_UNSUPPORTED, "no ONNX support");
    } else {
        mp_model_free(&m);
        /* classes 0 takes the file's own count, for an .onnx file only; below 0 is refused */
        CHECK_ERR(mp_model_build(p, 1, 4, 4, 0, &m), MP_OK);
        mp_model_free(&m);
        CHECK_ERR(mp_model_build(p, 1, 4, 4, -1, &m), MP_ERR_INVALID_ARG, p, "-1 classes");
        CHECK_ERR(mp_model_build("small", 1, 4, 4, 0, &m), MP_ERR_INVALID_ARG, "small", "got 0");
        test_bad_files();
        test_bad_models();
        test_non_tensor_input();
        test_unresolvable();
        test_gemm_beta();
        test_fold_broadcast();
        test_export_tied();
        test_export_name_clash();
        test_export_names_stable();
    test_import_prefix();
        test_fold_slice_negative_step();
        test_dropout_training_mode();
        test_valid();
        test_empty_huge_constant();
        test_duplicate_attribute();
        test_duplicate_metadata();
        test_gemm_c_rank();
    }
    scratch_dir_remove(dir);
    return test_summary("test_onnx");
}
