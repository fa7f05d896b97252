/* gradient_penalty.c — a gradient penalty through the public API alone: a
 * small discriminator (features -> linear -> leaky ReLU -> linear -> one
 * logit, BCE against real/fake targets) trained with R1 on its input under
 * amp-fp16 with dynamic loss scaling; prints the penalty, the loss scale and
 * the skipped steps, and the penalty's input gradient's size. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <mixprec.h>

enum { BATCH = 32, FEATURES = 16, STEPS = 50 };

int main(void) {
    mp_graph *g = mp_graph_create();
    if (!g) return 1;
    mp_node x = mp_graph_targets(g, "x", FEATURES);
    mp_node h = mp_linear(g, "fc1", x, (mp_linear_opts){.out_features = 32, .bias = true});
    h = mp_leaky_relu(g, "act", h, 0.2f);
    mp_node logit = mp_linear(g, "logit", h, (mp_linear_opts){.out_features = 1, .bias = true});
    mp_node target = mp_graph_targets(g, "target", 1);
    mp_node loss = mp_bce_with_logits(g, "loss", logit, target);
    mp_graph_mark_output(g, loss);
    mp_optimizer *opt = NULL;
    mp_trainer *t = NULL;
    mp_trainer_opts to = {.batch = BATCH, .loss = loss,
                          .penalty = {.kind = MP_PENALTY_R1, .weight = 10, .input = x, .output = logit}};
    if (mp_graph_status(g) != MP_OK || mp_graph_apply_policy(g, (mp_policy_opts){.precision = MP_PRECISION_AMP_FP16}) ||
        mp_optimizer_create(g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_ADAM}, .lr = {.base_lr = 1e-3f}}, &opt) ||
        (to.optimizer = opt, mp_trainer_create(g, &to, &t))) {
        fprintf(stderr, "gradient_penalty: %s\n", mp_last_error());
        return 1;
    }
    float xs[BATCH * FEATURES], ys[BATCH], gx[BATCH * FEATURES];
    mp_step_report r = {0};
    srand(7);
    for (int step = 1; step <= STEPS; step++) {
        for (int i = 0; i < BATCH; i++) { /* "real" samples around +1, "fake" around -1 */
            ys[i] = (float)(i % 2);
            for (int f = 0; f < FEATURES; f++) xs[i * FEATURES + f] = (ys[i] ? 1.0f : -1.0f) + (float)rand() / RAND_MAX - 0.5f;
        }
        if (mp_trainer_set_input(t, x, xs, BATCH * FEATURES) || mp_trainer_set_input(t, target, ys, BATCH) ||
            mp_trainer_step(t, NULL, &r)) {
            fprintf(stderr, "gradient_penalty: %s\n", mp_last_error());
            return 1;
        }
        if (step % 10 == 0)
            printf("step %d: r1 penalty %.4g, loss scale %g, skipped steps %lld\n", step, (double)r.penalty,
                   (double)r.loss_scale, (long long)r.skipped_steps);
    }
    if (mp_trainer_penalty_input_grad(t, gx, BATCH * FEATURES)) {
        fprintf(stderr, "gradient_penalty: %s\n", mp_last_error());
        return 1;
    }
    printf("done: d sum(logit) / dx read back (%d values), penalty %s\n", BATCH * FEATURES,
           isfinite(r.penalty) ? "finite" : "not finite");
    mp_trainer_destroy(t);
    mp_optimizer_destroy(opt);
    mp_graph_destroy(g);
    return 0;
}
