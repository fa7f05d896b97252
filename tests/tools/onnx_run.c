/* onnx_run.c — import an ONNX model with the public API, run its forward pass
 * in fp32 inference mode on an input of raw little-endian f32 values, and
 * write the output as raw f32; optionally export the imported graph back to
 * ONNX. tests/onnx_oracle.py compares both with onnxruntime.
 * Usage: onnx_run MODEL.onnx INPUT.f32 BATCH OUTPUT.f32 [EXPORT.onnx]
 *        [--fp16-weights] [--reference] [--input-shape CxHxW] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixprec.h"

static int fail(const char *what) {
    fprintf(stderr, "onnx_run: %s: %s\n", what, mp_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: onnx_run MODEL.onnx INPUT.f32 BATCH OUTPUT.f32 [EXPORT.onnx] [--fp16-weights] "
                        "[--reference] [--input-shape CxHxW]\n");
        return 2;
    }
    const char *model = argv[1], *input = argv[2], *output = argv[3 + 1], *export_path = NULL;
    const int batch = atoi(argv[3]);
    bool fp16 = false, reference = false;
    mp_onnx_opts io = {0};
    for (int i = 5; i < argc; i++) {
        if (!strcmp(argv[i], "--fp16-weights")) fp16 = true;
        else if (!strcmp(argv[i], "--reference")) reference = true;
        else if (!strcmp(argv[i], "--input-shape") && i + 1 < argc) {
            if (sscanf(argv[++i], "%dx%dx%d", &io.c, &io.h, &io.w) != 3) return 2;
            io.override_shape = true;
        } else export_path = argv[i];
    }
    mp_graph *g = mp_graph_create();
    mp_onnx_info info;
    if (mp_graph_from_onnx(g, model, &io, &info) != MP_OK) return fail("import");
    int nd;
    int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
    mp_graph_node_sample_shape(g, info.input, &nd, in);
    mp_graph_node_sample_shape(g, info.output, &nd, out);
    const size_t n_in = (size_t)batch * (size_t)(in[0] * in[1] * in[2]);
    size_t n_out = (size_t)batch;
    for (int k = 0; k < nd; k++) n_out *= (size_t)out[k];
    float *x = malloc(n_in * sizeof *x), *y = malloc(n_out * sizeof *y);
    FILE *f = fopen(input, "rb");
    if (!f || fread(x, sizeof *x, n_in, f) != n_in) {
        fprintf(stderr, "onnx_run: %s: cannot read %zu floats\n", input, n_in);
        return 1;
    }
    fclose(f);
    mp_plan *plan = NULL;
    mp_plan_opts po = {.batch = batch, .training = false, .loss = info.output, .reference = reference};
    if (mp_plan_create(g, po, &plan) != MP_OK) return fail("plan");
    if (mp_plan_set_input(plan, info.input, x, n_in) != MP_OK) return fail("input");
    if (mp_plan_forward(plan) != MP_OK) return fail("forward");
    if (mp_plan_read(plan, info.output, y, n_out) != MP_OK) return fail("read");
    f = fopen(output, "wb");
    if (!f || fwrite(y, sizeof *y, n_out, f) != n_out || fclose(f) != 0) {
        fprintf(stderr, "onnx_run: %s: cannot write\n", output);
        return 1;
    }
    if (export_path &&
        mp_graph_to_onnx(g, info.input, info.output, export_path, &(mp_onnx_export_opts){.fp16_weights = fp16}) != MP_OK)
        return fail("export");
    printf("onnx_run: %s: opset %d, %d ONNX nodes -> %d mixprec nodes, %d parameter tensors\n", model, info.opset,
           info.onnx_nodes, mp_graph_node_count(g), info.params);
    mp_plan_destroy(plan);
    mp_graph_destroy(g);
    free(x);
    free(y);
    return 0;
}
