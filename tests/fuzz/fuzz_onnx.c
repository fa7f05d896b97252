/* fuzz_onnx.c — libFuzzer harness of the ONNX importer and exporter: any
 * bytes are imported as an .onnx file (dynamic input dims filled with a small
 * shape). An import fails with one line, or gives a graph whose exported
 * model imports back with every parameter, and an inference plan for it
 * compiles and runs a forward pass when its activations are small. */
#include "fuzz_input.h"

#include <string.h>

#include "core/error.h"
#include "mixprec.h"

/* Import `path`; MP_OK and a graph, or an error of one line and none. */
static mp_status import(const char *path, mp_graph **g, mp_onnx_info *info) {
    *g = mp_graph_create();
    MP_ASSERT(*g);
    mp_status s = mp_graph_from_onnx(*g, path, &(mp_onnx_opts){.c = 2, .h = 6, .w = 6}, info);
    if (s != MP_OK) {
        MP_ASSERT(mp_last_error()[0] && !strchr(mp_last_error(), '\n'));
        mp_graph_destroy(*g);
        *g = NULL;
    }
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static fuzz_file in, out;
    if (!in.path[0]) {
        fuzz_file_init(&in, "fuzz_onnx_in");
        fuzz_file_init(&out, "fuzz_onnx_out");
    }
    fuzz_file_set(&in, data, size);
    mp_graph *g, *back;
    mp_onnx_info info, info2;
    if (import(in.path, &g, &info) != MP_OK) return 0;
    MP_ASSERT(info.input >= 0 && info.output >= 0 && info.opset >= 13 && info.opset <= 21);
    fuzz_file_set(&out, NULL, 0);
    if (mp_graph_to_onnx(g, info.input, info.output, out.path, NULL) == MP_OK) {
        if (import(out.path, &back, &info2) != MP_OK) {
            fprintf(stderr, "fuzz_onnx: an exported model does not import back: %s\n", mp_last_error());
            abort();
        }
        MP_ASSERT(info2.params == mp_graph_param_tensors(g));
        mp_graph_destroy(back);
    }
    /* a forward pass of small models only: the fuzzer's time goes to parsing */
    int nd;
    int64_t dims[3] = {1, 1, 1};
    bool small = mp_graph_flops(g, 1, false) < 1e6;
    for (int i = 0; small && i < mp_graph_node_count(g); i++) {
        int64_t n = 1;
        dims[0] = dims[1] = dims[2] = 1;
        mp_graph_node_sample_shape(g, i, &nd, dims);
        for (int k = 0; k < nd; k++) n *= dims[k];
        small = n <= 4096;
    }
    if (small) {
        mp_plan *plan = NULL;
        if (mp_plan_create(g, (mp_plan_opts){.batch = 2, .loss = info.output, .reference = true}, &plan) == MP_OK) {
            static float x[2 * 2 * 6 * 6];
            mp_graph_node_sample_shape(g, info.input, &nd, dims);
            size_t n = 2 * (size_t)(dims[0] * dims[1] * dims[2]);
            if (n <= sizeof x / sizeof x[0] && mp_plan_set_input(plan, info.input, x, n) == MP_OK)
                (void)mp_plan_forward(plan);
            mp_plan_destroy(plan);
        }
    }
    mp_graph_destroy(g);
    return 0;
}
