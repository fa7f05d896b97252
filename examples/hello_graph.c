/* hello_graph.c — the smallest program on libmixprec: build a tiny CNN,
 * compile an inference plan for a batch of 2, run forward on random images
 * and print the logits' shape and values. Builds against the installed
 * library alone (see examples/CMakeLists.txt and the README). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <mixprec.h>

enum { BATCH = 2, CLASSES = 10 };

int main(void) {
    mp_graph *g = mp_graph_create();
    if (!g) return 1;
    mp_node x = mp_graph_input(g, "image", 1, 8, 8);
    x = mp_conv2d(g, "conv", x, (mp_conv_opts){.out_channels = 4, .kernel = 3, .padding = 1, .bias = true});
    x = mp_relu(g, "relu", x);
    x = mp_global_avgpool(g, "pool", x);
    mp_node logits = mp_linear(g, "fc", x, (mp_linear_opts){.out_features = CLASSES, .bias = true});
    mp_graph_mark_output(g, logits);
    mp_graph_init_params(g, 42);

    mp_plan *p = NULL;
    float image[BATCH * 8 * 8], out[BATCH * CLASSES];
    for (int i = 0; i < BATCH * 8 * 8; i++) image[i] = (float)rand() / RAND_MAX;
    if (mp_graph_status(g) != MP_OK || mp_plan_create(g, (mp_plan_opts){.batch = BATCH}, &p) != MP_OK ||
        mp_plan_set_input(p, mp_graph_find(g, "image"), image, BATCH * 8 * 8) != MP_OK ||
        mp_plan_forward(p) != MP_OK || mp_plan_read(p, logits, out, BATCH * CLASSES) != MP_OK) {
        fprintf(stderr, "hello_graph: %s\n", mp_last_error());
        return 1;
    }
    printf("mixprec %s: %d nodes, %lld parameters\n", MP_VERSION_STRING, mp_graph_node_count(g),
           (long long)mp_graph_param_count(g));
    printf("logits: %d x %d\n", BATCH, (int)mp_plan_numel(p, logits) / BATCH);
    for (int i = 0; i < BATCH * CLASSES; i++) {
        if (!isfinite(out[i])) return 1;
        printf("%8.4f%s", out[i], i % CLASSES == CLASSES - 1 ? "\n" : " ");
    }
    mp_plan_destroy(p);
    mp_graph_destroy(g);
    return 0;
}
