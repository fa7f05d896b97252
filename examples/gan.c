/* gan.c — a GAN through the installed library alone: a generator and a
 * discriminator (applied to real and to generated images with the same
 * weights), two Adam optimizers, three losses and one loss scaler shared by
 * them, trained in amp-fp16 on Fashion-MNIST. Each optimizer skips a step
 * whose own gradients overflowed; the scale backs off once per step.
 * `gan --smoke` stops after 20 steps (build checks). */
#include <mixprec.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRY(call) do { if ((call) != MP_OK) { fprintf(stderr, "gan: %s\n", mp_last_error()); return 1; } } while (0)

enum { BATCH = 64, LATENT = 32, PIXELS = 28 * 28 };

/* The discriminator on x, its nodes named prefix + layer; the second copy
 * (tie) uses the first's weights. */
static mp_node discriminator(mp_graph *g, const char *prefix, mp_node x, bool tie) {
    char name[4][32];
    const char *layer[4] = {"flat", "fc1", "act", "fc2"};
    for (int i = 0; i < 4; i++) snprintf(name[i], sizeof name[i], "%s%s", prefix, layer[i]);
    mp_node h = mp_linear(g, name[1], mp_flatten(g, name[0], x), (mp_linear_opts){.out_features = 256, .bias = true});
    if (tie) mp_graph_share_params(g, h, mp_graph_find(g, "d_fc1"));
    mp_node y = mp_linear(g, name[3], mp_leaky_relu(g, name[2], h, 0.2f), (mp_linear_opts){.out_features = 1, .bias = true});
    if (tie) mp_graph_share_params(g, y, mp_graph_find(g, "d_fc2"));
    return y;
}

int main(int argc, char **argv) {
    const int steps = argc > 1 && !strcmp(argv[1], "--smoke") ? 20 : 200;
    mp_dataset *data;
    TRY(mp_dataset_open_fashion_mnist(NULL, true, &data));
    mp_graph *g = mp_graph_create();
    mp_node real = mp_graph_input(g, "real", 1, 28, 28), z = mp_graph_targets(g, "z", LATENT);
    mp_node ones = mp_graph_targets(g, "ones", 1), zeros = mp_graph_targets(g, "zeros", 1);
    mp_node h = mp_relu(g, "g_act", mp_linear(g, "g_fc1", z, (mp_linear_opts){.out_features = 256, .bias = true}));
    mp_node fake = mp_tanh(g, "g_out", mp_linear(g, "g_fc2", h, (mp_linear_opts){.out_features = PIXELS, .bias = true}));
    mp_node d_real = discriminator(g, "d_", real, false), d_fake = discriminator(g, "d_fake_", fake, true);
    mp_node loss_real = mp_bce_with_logits(g, "d_real_loss", d_real, ones);   /* D: real is real */
    mp_node loss_fake = mp_bce_with_logits(g, "d_fake_loss", d_fake, zeros);  /* D: generated is fake */
    mp_node loss_gen = mp_bce_with_logits(g, "g_loss", d_fake, ones);         /* G: fool D */
    TRY(mp_graph_status(g));
    TRY(mp_graph_apply_policy(g, (mp_policy_opts){.precision = MP_PRECISION_AMP_FP16}));
    mp_graph_init_params(g, 1);

    /* two optimizers over the two networks' parameters, one loss scaler for all three losses */
    mp_optimizer *opt_g, *opt_d;
    mp_optim_opts adam = {.kind = MP_OPTIM_ADAM, .beta1 = 0.5f};
    TRY(mp_optimizer_create(g, &(mp_optimizer_opts){.optim = adam, .lr = {.base_lr = 2e-4f}, .params = "g_"}, &opt_g));
    TRY(mp_optimizer_create(g, &(mp_optimizer_opts){.optim = adam, .lr = {.base_lr = 2e-4f}, .params = "d_"}, &opt_d));
    mp_trainer_opts o = {.batch = BATCH, .n_groups = 2, .loss_scaling = MP_LOSS_SCALING_ON};
    o.groups[0] = (mp_train_group){.optimizer = opt_g, .losses = {loss_gen}, .weights = {1}, .n_losses = 1};
    o.groups[1] = (mp_train_group){.optimizer = opt_d, .losses = {loss_real, loss_fake}, .weights = {1, 1}, .n_losses = 2};
    mp_trainer *t;
    TRY(mp_trainer_create(g, &o, &t));

    mp_loader *batches;
    TRY(mp_loader_create(data, (mp_loader_opts){.batch = BATCH, .shuffle = true, .drop_last = true}, &batches));
    TRY(mp_loader_start_epoch(batches, 0));
    static float images[BATCH * PIXELS], noise[BATCH * LATENT], one[BATCH], zero[BATCH];
    const float *x;
    const int32_t *labels;
    int n;
    srand(1);
    for (int i = 0; i < BATCH; i++) one[i] = 1, zero[i] = 0;
    for (int step = 1; step <= steps && mp_loader_next(batches, &x, &labels, &n) == MP_OK && n > 0; step++) {
        for (int i = 0; i < BATCH * PIXELS; i++) images[i] = 2 * x[i] - 1; /* [-1, 1], tanh's range */
        for (int i = 0; i < BATCH * LATENT; i++) noise[i] = (float)rand() / RAND_MAX * 2 - 1;
        TRY(mp_trainer_set_input(t, real, images, BATCH * PIXELS));
        TRY(mp_trainer_set_input(t, z, noise, BATCH * LATENT));
        TRY(mp_trainer_set_input(t, ones, one, BATCH));
        TRY(mp_trainer_set_input(t, zeros, zero, BATCH));
        mp_step_report r;
        TRY(mp_trainer_step(t, NULL, &r));
        if (r.overflow.found) printf("%s\n", r.overflow.message);
        if (step % 50 == 0) {
            float lr_, lf, lg;
            TRY(mp_trainer_read(t, loss_real, &lr_, 1));
            TRY(mp_trainer_read(t, loss_fake, &lf, 1));
            TRY(mp_trainer_read(t, loss_gen, &lg, 1));
            printf("step %d: D loss %.3f (real %.3f, fake %.3f), G loss %.3f, loss scale %g, skipped %lld\n", step,
                   lr_ + lf, lr_, lf, lg, r.loss_scale, (long long)r.skipped_steps);
        }
    }
    printf("done: G stepped %lld times, D %lld times\n", (long long)mp_optimizer_steps(opt_g),
           (long long)mp_optimizer_steps(opt_d));
    mp_loader_destroy(batches);
    mp_trainer_destroy(t);
    mp_optimizer_destroy(opt_g);
    mp_optimizer_destroy(opt_d);
    mp_graph_destroy(g);
    mp_dataset_destroy(data);
    return 0;
}
