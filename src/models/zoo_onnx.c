/* zoo_onnx.c — the model zoo's names that end in ".onnx": the file is
 * imported (mixprec/onnx.h) and checked against the data it will train on, so
 * that `train`, `bench` and the data-parallel replicas need no special case. */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/error.h"
#include "io/input_file.h"
#include "models/models.h"

bool mp_model_is_onnx_name(const char *name) {
    size_t n = name ? strlen(name) : 0;
    return n > 5 && !strcasecmp(name + n - 5, ".onnx");
}

mp_status mp_model_onnx_check(const char *name) {
    int fd;
    mp_status s = mp_input_open(name, &fd, NULL);
    if (s != MP_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", mp_last_error());
        return mp_error(s, "model file %s", msg);
    }
    close(fd);
    return MP_OK;
}

mp_status mp_model_onnx_build(const char *name, int c, int h, int w, int classes, mp_model *m) {
    if (classes < 0)
        return mp_error(MP_ERR_INVALID_ARG, "%s: %d classes (0: the file's own class count)", name ? name : "model",
                        classes);
    MP_TRY(mp_model_from_onnx(name, &(mp_onnx_opts){.c = c, .h = h, .w = w}, m));
    int nd, nk;
    int64_t in[3] = {0, 0, 0}, k[3] = {0, 0, 0};
    mp_status s = mp_graph_node_sample_shape(m->g, m->input, &nd, in);
    if (s == MP_OK) s = mp_graph_node_sample_shape(m->g, m->logits, &nk, k);
    if (s == MP_OK && (in[0] != c || in[1] != h || in[2] != w || (classes && k[0] != classes))) {
        mp_model_free(m);
        if (!classes) /* the file's own class count: only the inputs are the data's */
            return mp_error(MP_ERR_SHAPE, "%s: the model takes %lldx%lldx%lld inputs; the data has %dx%dx%d images",
                            name, (long long)in[0], (long long)in[1], (long long)in[2], c, h, w);
        return mp_error(MP_ERR_SHAPE, "%s: the model takes %lldx%lldx%lld inputs and gives %lld classes; the data has "
                                      "%dx%dx%d images and %d classes", name, (long long)in[0], (long long)in[1],
                        (long long)in[2], (long long)k[0], c, h, w, classes);
    }
    if (s != MP_OK) mp_model_free(m);
    return s;
}
