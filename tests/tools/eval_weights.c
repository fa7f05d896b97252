/* eval_weights.c — load a weights file written outside mixprec (a PyTorch
 * state_dict's names: "fc.weight", "fc.bias") into a graph built with the
 * public API (flatten -> linear "fc") and print its Fashion-MNIST test
 * accuracy: tests/weights_numpy.sh compares it with the accuracy the file's
 * maker computed. Usage: eval_weights FILE.safetensors */
#include <stdio.h>

#include "mixprec.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: eval_weights FILE.safetensors\n");
        return 2;
    }
    mp_dataset *test = NULL;
    mp_graph *g = mp_graph_create();
    mp_node image = mp_graph_input(g, "image", 1, 28, 28);
    mp_node logits = mp_linear(g, "fc", mp_flatten(g, "flat", image), (mp_linear_opts){.out_features = 10, .bias = true});
    mp_eval_result ev = {0};
    mp_status s = mp_graph_status(g);
    if (s == MP_OK) s = mp_graph_load_weights(g, argv[1], &(mp_weights_opts){0});
    if (s == MP_OK) s = mp_dataset_open_fashion_mnist(NULL, false, &test);
    if (s == MP_OK) s = mp_evaluate(g, test, &(mp_eval_opts){.input = image, .logits = logits}, &ev);
    if (s == MP_OK) printf("mixprec test accuracy %.4f\n", ev.accuracy);
    else fprintf(stderr, "eval_weights: %s\n", mp_last_error());
    mp_dataset_destroy(test);
    mp_graph_destroy(g);
    return s == MP_OK ? 0 : 1;
}
