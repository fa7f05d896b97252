/* test_multi_loss.c — several losses and several optimizers, the GAN way:
 * a generator and a weight-tied discriminator applied to real and generated
 * samples, three BCE losses, two optimizers, and the loss scaler shared by
 * both or one per loss (GradScaler semantics: each optimizer skips on its own
 * non-finite gradients; the scale is updated once per iteration). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp/scaler.h"
#include "check.h"
#include "core/rng.h"
#include "graph/graph.h"
#include "optim/optim.h"

typedef struct {
    mp_graph *g;
    mp_node z, real, ones, zeros, d_real_loss, d_fake_loss, g_loss, d1, d1r, g1;
} gan;

static gan build(void) {
    gan n;
    mp_graph *g = n.g = mp_graph_create();
    n.z = mp_graph_targets(g, "z", 4);
    n.real = mp_graph_targets(g, "real", 6);
    n.ones = mp_graph_targets(g, "ones", 1);
    n.zeros = mp_graph_targets(g, "zeros", 1);
    n.g1 = mp_linear(g, "g1", n.z, (mp_linear_opts){.out_features = 6, .bias = true});
    mp_node fake = mp_tanh(g, "fake", n.g1);
    /* discriminator on generated samples */
    n.d1 = mp_linear(g, "d1", fake, (mp_linear_opts){.out_features = 5, .bias = true});
    mp_node h = mp_leaky_relu(g, "d1_act", n.d1, 0.2f);
    mp_node d2 = mp_linear(g, "d2", h, (mp_linear_opts){.out_features = 1, .bias = true});
    /* the same discriminator on real samples */
    n.d1r = mp_linear(g, "d1r", n.real, (mp_linear_opts){.out_features = 5, .bias = true});
    MP_ASSERT(mp_graph_share_params(g, n.d1r, n.d1) == MP_OK);
    mp_node hr = mp_leaky_relu(g, "d1r_act", n.d1r, 0.2f);
    mp_node d2r = mp_linear(g, "d2r", hr, (mp_linear_opts){.out_features = 1, .bias = true});
    MP_ASSERT(mp_graph_share_params(g, d2r, d2) == MP_OK);
    n.d_real_loss = mp_bce_with_logits(g, "d_real_loss", d2r, n.ones);
    n.d_fake_loss = mp_bce_with_logits(g, "d_fake_loss", d2, n.zeros);
    n.g_loss = mp_bce_with_logits(g, "g_loss", d2, n.ones);
    MP_ASSERT(mp_graph_status(g) == MP_OK);
    return n;
}

enum { B = 8 };

static void fill(mp_plan *p, const gan *n, uint64_t seed) {
    mp_rng r;
    mp_rng_seed(&r, seed);
    float z[B * 4], real[B * 6], ones[B], zeros[B];
    for (int i = 0; i < B * 4; i++) z[i] = (float)mp_rng_normal(&r);
    for (int i = 0; i < B * 6; i++) real[i] = 0.5f + 0.1f * (float)mp_rng_normal(&r);
    for (int i = 0; i < B; i++) ones[i] = 1, zeros[i] = 0;
    mp_plan_set_input(p, n->z, z, B * 4);
    mp_plan_set_input(p, n->real, real, B * 6);
    mp_plan_set_input(p, n->ones, ones, B);
    mp_plan_set_input(p, n->zeros, zeros, B);
}

/* The trainable parameters of the generator (g*) or discriminator (d*). */
static int group(const mp_graph *g, char which, mp_param_ref *refs, float **grads, int64_t *sizes) {
    int n = 0;
    for (int i = 0; i < g->n_params; i++) {
        const mp_gparam *p = &g->params[i];
        if (!p->spec.trainable || p->name[0] != which) continue;
        refs[n] = (mp_param_ref){.param = p->data, .grad = p->grad, .n = mp_shape_numel(&p->spec.shape),
                                 .name = p->name};
        grads[n] = p->grad;
        sizes[n++] = mp_shape_numel(&p->spec.shape);
    }
    return n;
}

static void test_tied_weights_and_losses(void) {
    gan n = build();
    mp_graph *g = n.g;
    CHECK(g->nodes[n.d1r].first_param == g->nodes[n.d1].first_param, "d1r shares d1's parameters");
    CHECK(g->n_params == 6, "g1, d1, d2 weights and biases only: %d", g->n_params);
    CHECK(mp_graph_share_params(g, n.d1r, n.g1) != MP_OK, "tying must be refused after later nodes");
    mp_graph_init_params(g, 3);
    mp_plan *p = NULL;
    mp_status s = mp_plan_create(g, (mp_plan_opts){.batch = B, .training = true, .losses = {n.d_real_loss, n.d_fake_loss, n.g_loss},
                                                   .n_losses = 3, .reference = true},
                                 &p);
    CHECK(s == MP_OK, "%s", mp_last_error());
    if (s != MP_OK) return;
    fill(p, &n, 1);
    CHECK(mp_plan_forward(p) == MP_OK, "%s", mp_last_error());
    /* d1 on real data through the tied node equals a linear with d1's weights */
    mp_gparam *w = &g->params[g->nodes[n.d1].first_param], *b = &g->params[g->nodes[n.d1].first_param + 1];
    float real[B * 6], out[B * 5];
    mp_plan_read(p, n.real, real, B * 6);
    mp_plan_read(p, n.d1r, out, B * 5);
    double err = 0;
    for (int i = 0; i < B; i++)
        for (int o = 0; o < 5; o++) {
            double acc = b->data[o];
            for (int f = 0; f < 6; f++) acc += (double)w->data[o * 6 + f] * real[i * 6 + f];
            err = fmax(err, fabs(acc - out[i * 5 + o]));
        }
    CHECK(err < 1e-5, "tied layer output differs by %g", err);

    /* backward from two losses adds their gradients in the shared weights */
    int64_t nw = mp_shape_numel(&w->spec.shape);
    float *ga = malloc((size_t)nw * sizeof *ga), *gb = malloc((size_t)nw * sizeof *gb);
    mp_graph_zero_grad(g);
    CHECK(mp_plan_backward_from(p, n.d_real_loss, 1) == MP_OK, "%s", mp_last_error());
    memcpy(ga, w->grad, (size_t)nw * sizeof *ga);
    mp_graph_zero_grad(g);
    CHECK(mp_plan_backward_from(p, n.d_fake_loss, 1) == MP_OK, "%s", mp_last_error());
    memcpy(gb, w->grad, (size_t)nw * sizeof *gb);
    mp_graph_zero_grad(g);
    mp_plan_backward_from(p, n.d_real_loss, 1);
    mp_plan_backward_from(p, n.d_fake_loss, 1);
    double worst = 0, norm_a = 0, norm_b = 0;
    for (int64_t i = 0; i < nw; i++) {
        worst = fmax(worst, fabs(w->grad[i] - (ga[i] + gb[i])));
        norm_a += ga[i] * ga[i];
        norm_b += gb[i] * gb[i];
    }
    CHECK(worst < 1e-6, "D gradients from two losses must add: diff %g", worst);
    CHECK(norm_a > 0 && norm_b > 0, "both losses reach d1");
    /* the real-data loss does not reach the generator */
    mp_graph_zero_grad(g);
    mp_plan_backward_from(p, n.d_real_loss, 1);
    const mp_gparam *gw = &g->params[g->nodes[n.g1].first_param];
    double gnorm = 0;
    for (int64_t i = 0; i < mp_shape_numel(&gw->spec.shape); i++) gnorm += fabs(gw->grad[i]);
    CHECK(gnorm == 0, "d_real_loss must give the generator a zero gradient, got %g", gnorm);
    CHECK(mp_plan_backward_from(p, n.real, 1) == MP_ERR_INVALID_ARG, "backward from a non-loss node is refused");
    free(ga);
    free(gb);
    mp_plan_destroy(p);
    mp_graph_destroy(g);
}

/* One GAN iteration with a gradient overflow planted in the generator's
 * gradients: the generator's optimizer skips, the discriminator's steps, and
 * the scale backs off once (shared scaler) or only G's (one per loss). */
static void test_per_optimizer_skip(bool shared) {
    gan n = build();
    mp_graph *g = n.g;
    mp_graph_init_params(g, 4);
    mp_plan *p = NULL;
    MP_ASSERT(mp_plan_create(g, (mp_plan_opts){.batch = B, .training = true, .losses = {n.d_real_loss, n.d_fake_loss, n.g_loss},
                                               .n_losses = 3},
                             &p) == MP_OK);
    mp_param_ref gref[4], dref[8];
    float *ggrad[4], *dgrad[8];
    int64_t gsize[4], dsize[8];
    int ng = group(g, 'g', gref, ggrad, gsize), nd = group(g, 'd', dref, dgrad, dsize);
    CHECK(ng == 2 && nd == 4, "groups: %d generator, %d discriminator tensors", ng, nd);
    mp_optim *opt_g = NULL, *opt_d = NULL;
    MP_ASSERT(mp_optim_create((mp_optim_opts){.kind = MP_OPTIM_ADAM}, gref, ng, &opt_g) == MP_OK);
    MP_ASSERT(mp_optim_create((mp_optim_opts){.kind = MP_OPTIM_ADAM}, dref, nd, &opt_d) == MP_OK);
    mp_scaler sc_d, sc_g;
    MP_ASSERT(mp_scaler_init(&sc_d, (mp_scaler_opts){.init_scale = 1024}) == MP_OK);
    MP_ASSERT(mp_scaler_init(&sc_g, (mp_scaler_opts){.init_scale = 1024}) == MP_OK);
    mp_scaler *for_d = &sc_d, *for_g = shared ? &sc_d : &sc_g;
    fill(p, &n, 2);
    float g_before = gref[0].param[0], d_before = dref[0].param[0];
    MP_ASSERT(mp_plan_forward(p) == MP_OK);
    /* discriminator step: both of its losses, scaled */
    mp_graph_zero_grad(g);
    mp_plan_backward_from(p, n.d_real_loss, mp_scaler_scale(for_d));
    mp_plan_backward_from(p, n.d_fake_loss, mp_scaler_scale(for_d));
    int bad_d = mp_scaler_unscale_check(for_d, dgrad, dsize, nd);
    if (bad_d < 0) mp_optim_step(opt_d, 0.01f);
    /* generator step, with an overflow planted in its gradient */
    mp_graph_zero_grad(g);
    mp_plan_backward_from(p, n.g_loss, mp_scaler_scale(for_g));
    ggrad[0][0] = INFINITY;
    int bad_g = mp_scaler_unscale_check(for_g, ggrad, gsize, ng);
    if (bad_g < 0) mp_optim_step(opt_g, 0.01f);
    mp_scaler_update(&sc_d);
    if (!shared) mp_scaler_update(&sc_g);
    CHECK(bad_d < 0 && bad_g == 0, "D finite (%d), G overflowed in tensor 0 (%d)", bad_d, bad_g);
    CHECK(dref[0].param[0] != d_before, "the discriminator stepped");
    CHECK(gref[0].param[0] == g_before, "the generator skipped its step");
    CHECK(mp_optim_step_count(opt_g) == 0 && mp_optim_step_count(opt_d) == 1, "step counts G %lld, D %lld",
          (long long)mp_optim_step_count(opt_g), (long long)mp_optim_step_count(opt_d));
    if (shared) {
        CHECK(mp_scaler_scale(&sc_d) == 512, "shared scale backs off once: %g", mp_scaler_scale(&sc_d));
    } else {
        CHECK(mp_scaler_scale(&sc_d) == 1024 && mp_scaler_scale(&sc_g) == 512, "per-loss scales D %g, G %g",
              mp_scaler_scale(&sc_d), mp_scaler_scale(&sc_g));
    }
    mp_optim_destroy(opt_g);
    mp_optim_destroy(opt_d);
    mp_plan_destroy(p);
    mp_graph_destroy(g);
}

int main(void) {
    test_tied_weights_and_losses();
    test_per_optimizer_skip(true);
    test_per_optimizer_skip(false);
    return test_summary("test_multi_loss");
}
