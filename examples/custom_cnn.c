/* custom_cnn.c — a CNN of your own, trained one epoch on Fashion-MNIST in
 * mixed precision (bf16 convolutions and dense layers, fp32 master weights,
 * dynamic loss scaling) through the installed library alone; prints the
 * test accuracy. `custom_cnn --smoke` stops after 20 steps (build checks). */
#include <mixprec.h>
#include <stdio.h>
#include <string.h>

/* every call returns an mp_status; the message says what failed */
#define TRY(call) do { if ((call) != MP_OK) { fprintf(stderr, "custom_cnn: %s\n", mp_last_error()); return 1; } } while (0)

int main(int argc, char **argv) {
    const int batch = 64, smoke = argc > 1 && !strcmp(argv[1], "--smoke");
    mp_dataset *train, *test;
    TRY(mp_dataset_open_fashion_mnist(NULL, true, &train));
    TRY(mp_dataset_open_fashion_mnist(NULL, false, &test));

    /* the model: two conv + batch norm + ReLU + max-pool stages, two dense layers */
    mp_graph *g = mp_graph_create();
    mp_node image = mp_graph_input(g, "image", 1, 28, 28), label = mp_graph_labels(g, "label"), x = image;
    x = mp_conv2d(g, "conv1", x, (mp_conv_opts){.out_channels = 16, .kernel = 3, .padding = 1});
    x = mp_relu(g, "relu1", mp_batchnorm2d(g, "bn1", x, (mp_batchnorm_opts){0}));
    x = mp_maxpool2d(g, "pool1", x, (mp_pool_opts){.kernel = 2});
    x = mp_conv2d(g, "conv2", x, (mp_conv_opts){.out_channels = 32, .kernel = 3, .padding = 1});
    x = mp_relu(g, "relu2", mp_batchnorm2d(g, "bn2", x, (mp_batchnorm_opts){0}));
    x = mp_flatten(g, "flat", mp_maxpool2d(g, "pool2", x, (mp_pool_opts){.kernel = 2}));
    x = mp_relu(g, "relu3", mp_linear(g, "fc1", x, (mp_linear_opts){.out_features = 128, .bias = true}));
    mp_node logits = mp_linear(g, "fc2", x, (mp_linear_opts){.out_features = 10, .bias = true});
    mp_node loss = mp_softmax_cross_entropy(g, "loss", logits, label);
    TRY(mp_graph_status(g));

    /* mixed precision as torch.autocast(bf16) + GradScaler; Adam with cosine decay */
    TRY(mp_graph_apply_policy(g, (mp_policy_opts){.precision = MP_PRECISION_AMP_BF16}));
    mp_graph_init_params(g, 1);
    mp_optimizer *adam;
    mp_lr_schedule lr = {.kind = MP_LR_COSINE, .base_lr = 2e-3f, .total_steps = 60000 / batch};
    TRY(mp_optimizer_create(g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_ADAM}, .lr = lr}, &adam));
    mp_trainer *t;
    TRY(mp_trainer_create(g, &(mp_trainer_opts){.batch = batch, .input = image, .labels = label, .loss = loss,
                                                .optimizer = adam, .loss_scaling = MP_LOSS_SCALING_ON}, &t));

    /* one epoch of shuffled batches, normalized by the training set's mean and deviation */
    float mean, std;
    mp_dataset_channel_stats(train, &mean, &std);
    mp_loader *batches;
    TRY(mp_loader_create(train, (mp_loader_opts){.batch = batch, .shuffle = true, .drop_last = true,
                                                 .mean = &mean, .std = &std}, &batches));
    TRY(mp_loader_start_epoch(batches, 0));
    const float *images;
    const int32_t *labels;
    int n, steps = 0;
    while (mp_loader_next(batches, &images, &labels, &n) == MP_OK && n > 0 && !(smoke && steps == 20)) {
        mp_step_report r;
        TRY(mp_trainer_step(t, &(mp_batch){.images = images, .labels = labels, .n = n}, &r));
        if (r.overflow.found) printf("%s\n", r.overflow.message);
        if (++steps % 100 == 0) printf("step %d: loss scale %g\n", steps, r.loss_scale);
    }
    TRY(mp_trainer_sync(t, NULL));

    mp_eval_result ev;
    TRY(mp_evaluate(g, test, &(mp_eval_opts){.input = image, .logits = logits, .mean = &mean, .std = &std}, &ev));
    printf("test accuracy %.2f%% on %lld images after %d steps\n", 100 * ev.accuracy, (long long)ev.samples, steps);
    mp_loader_destroy(batches);
    mp_trainer_destroy(t);
    mp_optimizer_destroy(adam);
    mp_graph_destroy(g);
    mp_dataset_destroy(train);
    mp_dataset_destroy(test);
    return 0;
}
