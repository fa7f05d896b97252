/* test_profile.c — a plan's profile (mp_plan_print_profile, per op kind, and
 * mp_plan_print_profile_nodes, node by node): after two training steps of a
 * small CNN with opts.profile, the per-op table has a row for conv2d and the
 * node table lists the timed nodes slowest first, each with its op and
 * output shape per sample, and `top` cuts it with a count of the rest; a
 * plan made without opts.profile prints one line saying so. */
#define _GNU_SOURCE /* open_memstream */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/rng.h"
#include "graph/plan.h"
#include "models/models.h"

enum { B = 4 };

/* out = what print wrote for p (malloc'd). */
static char *printed(const mp_plan *p, int top, bool nodes) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    MP_ASSERT(f);
    if (nodes) mp_plan_print_profile_nodes(p, f, top);
    else mp_plan_print_profile(p, f);
    fclose(f);
    return text;
}

static mp_plan *step_plan(mp_graph *g, mp_node x, mp_node y, mp_node loss, bool profile) {
    mp_plan *p = NULL;
    CHECK(mp_plan_create(g, (mp_plan_opts){.batch = B, .training = true, .loss = loss, .profile = profile}, &p) ==
              MP_OK,
          "plan: %s", mp_last_error());
    if (!p) return NULL;
    float in[B * 3 * 12 * 12];
    int32_t lab[B];
    mp_rng r;
    mp_rng_seed(&r, 5);
    for (int i = 0; i < B * 3 * 12 * 12; i++) in[i] = (float)mp_rng_normal(&r);
    for (int i = 0; i < B; i++) lab[i] = (int32_t)mp_rng_below(&r, 4);
    for (int s = 0; s < 2; s++) {
        CHECK(mp_plan_set_input(p, x, in, sizeof in / sizeof in[0]) == MP_OK &&
                  mp_plan_set_labels(p, y, lab, B) == MP_OK && mp_plan_forward(p) == MP_OK &&
                  mp_plan_backward(p, 1.0f) == MP_OK,
              "step: %s", mp_last_error());
    }
    return p;
}

int main(void) {
    mp_graph *g = mp_graph_create();
    mp_node x = mp_graph_input(g, "x", 3, 12, 12);
    mp_node c = mp_conv_bn_relu(g, "stem", x, 8, 3, 1);
    mp_node big = mp_conv2d(g, "wide_conv", c, (mp_conv_opts){.out_channels = 32, .kernel = 3, .padding = 1});
    mp_node logits = mp_linear(g, "fc", mp_global_avgpool(g, "gap", big), (mp_linear_opts){.out_features = 4});
    mp_node y = mp_graph_labels(g, "y"), loss = mp_softmax_cross_entropy(g, "loss", logits, y);
    mp_graph_mark_output(g, loss);
    mp_graph_init_params(g, 3);
    mp_plan *p = step_plan(g, x, y, loss, true);
    if (p) {
        char *ops = printed(p, 0, false), *all = printed(p, 0, true), *two = printed(p, 2, true);
        CHECK(strstr(ops, "| conv2d | 2 ") != NULL, "the per-op table has no row for the two conv2d nodes:\n%s", ops);
        CHECK(strstr(all, "| wide_conv | conv2d | (32, 12, 12) |") != NULL &&
                  strstr(all, "| stem_bn | batchnorm2d | (8, 12, 12) |") != NULL,
              "the node table lacks a node or its op and shape:\n%s", all);
        /* slowest first: each row's forward + backward at most the one above it */
        double prev = 1e300;
        int rows = 0;
        bool sorted = true;
        for (const char *l = strstr(all, "|---|"); l && (l = strchr(l, '\n')) && l[1] == '|'; l++, rows++) {
            double f = 0, b = 0;
            const char *q = l + 1;
            for (int bar = 0; bar < 3 && q; bar++) q = strchr(q + 1, '|'); /* to the bar before "forward ms" */
            if (!q || sscanf(q + 1, " %lf | %lf", &f, &b) != 2) sorted = false;
            else if (f + b > prev + 0.0101) sorted = false; /* each printed to 0.01 ms: a sum, to 0.01 */
            else prev = f + b;
        }
        CHECK(rows >= 5 && sorted, "the node table has %d rows, %s:\n%s", rows, sorted ? "sorted" : "not slowest first",
              all);
        CHECK(strstr(two, "more timed nodes)") != NULL, "top 2 does not say how many nodes it left out:\n%s", two);
        int two_rows = 0;
        for (const char *l = strstr(two, "|---|"); l && (l = strchr(l, '\n')) && l[1] == '|'; l++) two_rows++;
        CHECK(two_rows == 2, "top 2 printed %d rows:\n%s", two_rows, two);
        free(ops), free(all), free(two);
        mp_plan_destroy(p);
    }
    mp_plan *q = step_plan(g, x, y, loss, false);
    if (q) {
        char *ops = printed(q, 0, false), *nodes = printed(q, 3, true);
        CHECK(!strcmp(ops, "profile: the plan was created without opts.profile\n") && !strcmp(ops, nodes),
              "an unprofiled plan printed:\n%s\n%s", ops, nodes);
        free(ops), free(nodes);
        mp_plan_destroy(q);
    }
    mp_graph_destroy(g);
    return test_summary("test_profile");
}
