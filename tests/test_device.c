/* test_device.c — device names (--device) and what a plan on a GPU says on
 * a machine that cannot give it one: a CPU-only build, or no GPU/driver. */
#include <string.h>

#include "check.h"

static void parses(const char *text, mp_device_kind kind, int index) {
    mp_device d;
    mp_status s = mp_device_parse(text, &d);
    CHECK(s == MP_OK && d.kind == kind && d.index == index, "'%s' -> %d:%d (%s)", text, (int)d.kind, d.index,
          mp_last_error());
}

int main(void) {
    parses("cpu", MP_DEVICE_CPU, 0);
    parses("cuda", MP_DEVICE_CUDA, 0);
    parses("cuda:0", MP_DEVICE_CUDA, 0);
    parses("cuda:3", MP_DEVICE_CUDA, 3);
    const char *bad[] = {"gpu", "cuda:", "cuda:-1", "cuda:x", "cuda:1x", "CPU", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mp_device d;
        CHECK_ERR(mp_device_parse(bad[i], &d), MP_ERR_INVALID_ARG, "--device", "cpu, cuda, cuda:N or auto");
    }
    mp_device a;
    CHECK(mp_device_parse("auto", &a) == MP_OK, "auto: %s", mp_last_error());
    char name[32];
    CHECK(!strcmp(mp_device_name((mp_device){MP_DEVICE_CUDA, 2}, name, sizeof name), "cuda:2"), "name %s", name);

    /* a plan on cuda:7: this test machine has no such GPU (CI has none) */
    mp_graph *g = mp_graph_create();
    mp_node x = mp_graph_input(g, "x", 1, 4, 4);
    mp_node fc = mp_linear(g, "fc", mp_flatten(g, "flat", x), (mp_linear_opts){.out_features = 3});
    mp_node y = mp_graph_labels(g, "y");
    mp_node loss = mp_softmax_cross_entropy(g, "loss", fc, y);
    mp_graph_init_params(g, 1);
    mp_plan *p = NULL;
    mp_status s = mp_plan_create(
        g, (mp_plan_opts){.batch = 2, .training = true, .loss = loss, .device = {MP_DEVICE_CUDA, 7}}, &p);
    CHECK(s != MP_OK && p == NULL, "a plan on cuda:7 must fail here");
    CHECK(strstr(mp_last_error(), "cuda:7") || strstr(mp_last_error(), "no CUDA"), "message: %s", mp_last_error());
    printf("plan on cuda:7: %s\n", mp_last_error());
    mp_graph_destroy(g);
    return test_summary("test_device");
}
