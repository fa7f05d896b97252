/* test_api.c — the public API used out of order or with the wrong objects,
 * as a program of a user would: each call returns an mp_status error whose
 * message names the object, tensor or shape, and nothing crashes (the suite
 * also runs under ASan+UBSan): a step before anything is set up, an
 * optimizer over another graph's parameters or already in use, groups
 * sharing a parameter, a loss that is no loss, a batch of the wrong size, a
 * checkpoint of another model, a weights file missing a tensor, with a wrong
 * shape or dtype or a tensor the model lacks, parameters set to NaN or with
 * the wrong count, evaluation on the wrong data or before initialization,
 * an optimizer destroyed before its trainer, a bad learning-rate schedule,
 * a plan's forward before its inputs and labels have a batch, a read or a
 * backward before any forward, a trainer's loss before any step, a second
 * backward after one forward (refused: the first reused the memory; with
 * repeat_backward allowed and equal bit for bit), and two optimizer groups
 * sharing one loss (each group's backward as exact as a lone group's); a
 * batch set between a forward and its backward, a NaN seed, NULL data; a
 * gradient no group unscaled or a later group overwrote, a group whose
 * losses all weigh 0; mp_predict's normalization, NaN images, negative batch;
 * the data-parallel calls' NULL outputs and MPI environments that are no
 * launch (a rank outside the world, text that is no integer).
 * Only the public API is called, plus the safetensors writer to craft files. */
#define _GNU_SOURCE /* nftw in scratch_dir.h */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api_net.h"
#include "check.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "mixprec.h"
#include "scratch_dir.h"

static char dir[4096];

static void test_trainer_misuse(void) {
    CHECK_ERR(mp_trainer_step(NULL, NULL, NULL), MP_ERR_INVALID_ARG, "trainer");
    mp_trainer *t = (mp_trainer *)1;
    CHECK_ERR(mp_trainer_create(NULL, &(mp_trainer_opts){.batch = 4}, &t), MP_ERR_INVALID_ARG, "null graph");
    CHECK(t == NULL, "a failed create leaves no trainer");
    net a = make_net(2, 3), b = make_net(2, 3);
    mp_optimizer *oa = sgd(a.g), *ob = sgd(b.g);
    /* an optimizer over another graph's parameters */
    CHECK_ERR(mp_trainer_create(a.g, &(mp_trainer_opts){.batch = 4, .loss = a.loss, .optimizer = ob}, &t),
              MP_ERR_INVALID_ARG, "another graph's parameters");
    /* no optimizer; a node that is not a loss; a bad batch */
    CHECK_ERR(mp_trainer_create(a.g, &(mp_trainer_opts){.batch = 4, .loss = a.loss}, &t), MP_ERR_INVALID_ARG,
              "no optimizer");
    CHECK_ERR(mp_trainer_create(a.g, &(mp_trainer_opts){.batch = 4, .loss = a.logits, .optimizer = oa}, &t),
              MP_ERR_INVALID_ARG, "'fc'", "not a loss node");
    CHECK_ERR(mp_trainer_create(a.g, &(mp_trainer_opts){.batch = 0, .loss = a.loss, .optimizer = oa}, &t),
              MP_ERR_INVALID_ARG, "batch 0");
    /* two groups over the same parameters */
    mp_optimizer *oa2 = sgd(a.g);
    mp_trainer_opts two = {.batch = 4, .n_groups = 2};
    two.groups[0] = (mp_train_group){.optimizer = oa, .losses = {a.loss}, .weights = {1}, .n_losses = 1};
    two.groups[1] = (mp_train_group){.optimizer = oa2, .losses = {a.loss}, .weights = {1}, .n_losses = 1};
    CHECK_ERR(mp_trainer_create(a.g, &two, &t), MP_ERR_INVALID_ARG, "conv.weight", "groups 0 and 1");
    /* a trainer; its optimizer cannot serve a second one */
    mp_trainer *ta = NULL;
    CHECK_ERR(mp_trainer_create(a.g, &(mp_trainer_opts){.batch = 4, .input = a.input, .labels = a.labels, .loss = a.loss,
                                                        .optimizer = oa},
                                &ta),
              MP_OK);
    CHECK_ERR(mp_trainer_create(a.g, &(mp_trainer_opts){.batch = 4, .loss = a.loss, .optimizer = oa}, &t),
              MP_ERR_INVALID_ARG, "already used by another trainer");
    /* a batch of another size, a batch without data */
    float x[8 * 64] = {0};
    int32_t y[8] = {0};
    CHECK_ERR(mp_trainer_step(ta, &(mp_batch){.images = x, .labels = y, .n = 8}, NULL), MP_ERR_SHAPE, "8 samples",
              "takes 4");
    CHECK_ERR(mp_trainer_step(ta, &(mp_batch){.n = 4}, NULL), MP_ERR_INVALID_ARG, "no images or labels");
    /* labels outside the class range */
    int32_t bad[4] = {0, 1, 7, 2};
    CHECK_ERR(mp_trainer_step(ta, &(mp_batch){.images = x, .labels = bad, .n = 4}, NULL), MP_ERR_INVALID_ARG, "label",
              "7");
    /* a parameter that does not exist, or of the wrong size, or NaN */
    float w[18];
    CHECK_ERR(mp_trainer_param_get(ta, "conv.kernel", w, 18), MP_ERR_INVALID_ARG, "'conv.kernel'");
    CHECK_ERR(mp_trainer_param_get(ta, "conv.weight", w, 17), MP_ERR_SHAPE, "17 values", "it has 18");
    CHECK_ERR(mp_trainer_param_get(ta, "conv.weight", w, 18), MP_OK);
    w[5] = NAN;
    CHECK_ERR(mp_trainer_param_set(ta, "conv.weight", w, 18), MP_ERR_NONFINITE, "conv.weight", "element 5");
    /* an optimizer destroyed before its trainer is freed with it (ASan sees no leak, no double free) */
    mp_optimizer_destroy(oa);
    mp_trainer_destroy(ta);
    mp_optimizer_destroy(oa2);
    mp_optimizer_destroy(ob);
    mp_graph_destroy(a.g);
    mp_graph_destroy(b.g);
}

/* A safetensors file of the given tensors (f32 unless dtype says). */
static const char *write_file(const char *name, const mp_st_tensor *ts, int n) {
    static char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    MP_ASSERT(mp_safetensors_write(path, ts, n, NULL, NULL, 0) == MP_OK);
    return path;
}

static void test_checkpoints_and_weights(void) {
    net a = make_net(2, 3), other = make_net(4, 3);
    mp_optimizer *oa = sgd(a.g), *oo = sgd(other.g);
    mp_trainer *ta = NULL, *to = NULL;
    MP_ASSERT(mp_trainer_create(a.g, &(mp_trainer_opts){.batch = 4, .loss = a.loss, .optimizer = oa}, &ta) == MP_OK);
    MP_ASSERT(mp_trainer_create(other.g, &(mp_trainer_opts){.batch = 4, .loss = other.loss, .optimizer = oo}, &to) ==
              MP_OK);
    char path[4200];
    snprintf(path, sizeof path, "%s/a.safetensors", dir);
    CHECK_ERR(mp_trainer_save(ta, path, &(mp_checkpoint_info){.model = "a", .epoch = 1}), MP_OK);
    /* a checkpoint of another model: the first tensor that differs, with both shapes */
    CHECK_ERR(mp_trainer_load(to, path, &(mp_checkpoint_info){.model = "a"}), MP_ERR_SHAPE, "conv.weight",
              "2x1x3x3", "(4, 1, 3, 3)");
    CHECK_ERR(mp_trainer_load(ta, path, &(mp_checkpoint_info){.model = "b"}), MP_ERR_INVALID_ARG, "model a", "uses b");
    mp_checkpoint_info back = {.model = "a"};
    CHECK_ERR(mp_trainer_load(ta, path, &back), MP_OK);
    CHECK(back.epoch == 1, "epoch %d read back", back.epoch);
    /* the metadata alone is read: no tensor bytes asked of the host (its figure lowered to 1 byte) */
    setenv("MIXPREC_HOST_MEM_LIMIT", "1", 1);
    mp_checkpoint_info meta = {0};
    CHECK_ERR(mp_checkpoint_read_info(path, &meta), MP_OK);
    int meta_channels = -2;
    CHECK_ERR(mp_checkpoint_read_normalization(path, 0, &meta_channels, NULL, NULL), MP_OK);
    unsetenv("MIXPREC_HOST_MEM_LIMIT");
    CHECK(meta.epoch == 1 && meta_channels == 0, "metadata alone: epoch %d, %d channels", meta.epoch, meta_channels);
    /* the input normalization of any number of channels (here more than the info's arrays hold): saved
     * by mp_trainer_save_normalized, read back whole by mp_checkpoint_read_normalization */
    {
        enum { C = MP_CHECKPOINT_MAX_CHANNELS + 36 };
        static float mean[C], sd[C], got_mean[C], got_sd[C];
        for (int c = 0; c < C; c++) mean[c] = 0.125f * (float)c, sd[c] = 1.0f + 0.25f * (float)c;
        char wide[4300];
        snprintf(wide, sizeof wide, "%s/wide.safetensors", dir);
        CHECK_ERR(mp_trainer_save(ta, wide, &(mp_checkpoint_info){.model = "a", .norm_channels = C}),
                  MP_ERR_INVALID_ARG, "normalization channels", "mp_trainer_save_normalized");
        CHECK_ERR(mp_trainer_save_normalized(ta, wide, &(mp_checkpoint_info){.model = "a"}, C, mean, NULL),
                  MP_ERR_INVALID_ARG, "need their mean and std");
        CHECK_ERR(mp_trainer_save_normalized(ta, wide, &(mp_checkpoint_info){.model = "a"}, C, mean, sd), MP_OK);
        int n = 0;
        CHECK_ERR(mp_checkpoint_read_normalization(wide, C, &n, got_mean, got_sd), MP_OK);
        CHECK(n == C && !memcmp(got_mean, mean, sizeof mean) && !memcmp(got_sd, sd, sizeof sd),
              "%d channels read back as %d", C, n);
        mp_checkpoint_info wide_info = {.model = "a"};
        CHECK_ERR(mp_trainer_load(ta, wide, &wide_info), MP_OK);
        CHECK(!wide_info.norm_recorded && wide_info.norm_channels == 0, "%d channels: not in the struct", C);
        CHECK_ERR(mp_checkpoint_read_normalization(path, 0, &n, NULL, NULL), MP_OK);
        CHECK(n == 0, "a run saved without normalization: %d channels, want 0", n);
        CHECK_ERR(mp_checkpoint_read_normalization(wide, 1, &n, NULL, NULL), MP_ERR_INVALID_ARG, "no room");
    }
    /* another rate and weight decay: loaded (they are the loading trainer's to choose), said on its events */
    {
        char said[1024] = "";
        FILE *ev = fmemopen(said, sizeof said, "w");
        mp_optimizer *o2 = NULL;
        mp_trainer *t2 = NULL;
        MP_ASSERT(ev && mp_optimizer_create(a.g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_SGD,
                                                                                .weight_decay = 0.01f},
                                                                      .lr = {.base_lr = 0.5f}},
                                            &o2) == MP_OK);
        MP_ASSERT(mp_trainer_create(a.g, &(mp_trainer_opts){.batch = 4, .loss = a.loss, .optimizer = o2, .events = ev},
                                    &t2) == MP_OK);
        CHECK_ERR(mp_trainer_load(t2, path, NULL), MP_OK);
        fclose(ev);
        CHECK(strstr(said, "a.safetensors: optimizer was saved with sgd lr 0.100000001 momentum 0 weight_decay 0, "
                           "constant, warm-up 0; it continues with this trainer's sgd lr 0.5 momentum 0 "
                           "weight_decay 0.00999999978, constant, warm-up 0"),
              "the other options said: '%s'", said);
        said[0] = '\0';
        ev = fmemopen(said, sizeof said, "w");
        mp_trainer_destroy(t2);
        mp_optimizer *o3 = sgd(a.g);
        MP_ASSERT(mp_trainer_create(a.g, &(mp_trainer_opts){.batch = 4, .loss = a.loss, .optimizer = o3, .events = ev},
                                    &t2) == MP_OK);
        CHECK_ERR(mp_trainer_load(t2, path, NULL), MP_OK);
        fclose(ev);
        CHECK(!strstr(said, "was saved with"), "the same options: nothing said ('%s')", said);
        mp_trainer_destroy(t2);
        mp_optimizer_destroy(o2);
        mp_optimizer_destroy(o3);
    }
    /* weights only: the trainer's graph's parameters under their names */
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    CHECK_ERR(mp_graph_save_weights(a.g, path), MP_OK);
    CHECK_ERR(mp_graph_load_weights(other.g, path, NULL), MP_ERR_SHAPE, "conv.weight", "shape 2x1x3x3");
    CHECK_ERR(mp_graph_load_weights(a.g, path, NULL), MP_OK);
    /* a file missing a tensor; with one the model lacks; of a non-float dtype */
    float wv[18] = {0}, bv[3] = {0}, fw[2 * 64 * 3] = {0};
    const int64_t dw[] = {2, 1, 3, 3}, db[] = {3}, dfc[] = {3, 128};
    mp_st_tensor only_conv[] = {{.name = "conv.weight", .dtype = MP_DTYPE_F32, .ndim = 4, .dims = {2, 1, 3, 3}, .data = wv}};
    (void)dw;
    CHECK_ERR(mp_graph_load_weights(a.g, write_file("missing.safetensors", only_conv, 1), NULL), MP_ERR_FORMAT,
              "'bn.weight' is not in the file");
    int32_t iw[18] = {0};
    mp_st_tensor int_weight[] = {{.name = "conv.weight", .dtype = MP_DTYPE_I32, .ndim = 4, .dims = {2, 1, 3, 3}, .data = iw}};
    CHECK_ERR(mp_graph_load_weights(a.g, write_file("int.safetensors", int_weight, 1),
                                    &(mp_weights_opts){.allow_missing = true}),
              MP_ERR_FORMAT, "'conv.weight' is i32");
    mp_st_tensor extra[] = {{.name = "fc.weight", .dtype = MP_DTYPE_F32, .ndim = 2, .dims = {3, 128}, .data = fw},
                            {.name = "head.bias", .dtype = MP_DTYPE_F32, .ndim = 1, .dims = {3}, .data = bv}};
    (void)db, (void)dfc;
    const char *ex = write_file("extra.safetensors", extra, 2);
    CHECK_ERR(mp_graph_load_weights(a.g, ex, &(mp_weights_opts){.allow_missing = true}), MP_ERR_FORMAT,
              "'head.bias' matches no parameter");
    CHECK_ERR(mp_graph_load_weights(a.g, ex, &(mp_weights_opts){.allow_missing = true, .allow_unused = true}), MP_OK);
    /* allow_missing on a graph never initialized would keep zeros and call the graph initialized */
    mp_graph *fresh = mp_graph_create();
    mp_node fin = mp_graph_input(fresh, "image", 1, 8, 8);
    mp_node fx = mp_relu(fresh, "relu", mp_batchnorm2d(fresh, "bn", mp_conv2d(fresh, "conv", fin,
                                                                          (mp_conv_opts){.out_channels = 2, .kernel = 3,
                                                                                         .padding = 1}),
                                                         (mp_batchnorm_opts){0}));
    mp_linear(fresh, "fc", mp_flatten(fresh, "flat", fx), (mp_linear_opts){.out_features = 3, .bias = true});
    const mp_weights_opts keep = {.allow_missing = true, .allow_unused = true};
    CHECK_ERR(mp_graph_load_weights(fresh, ex, &keep), MP_ERR_INVALID_ARG, "'conv.weight'", "never initialized");
    mp_graph_init_params(fresh, 1);
    CHECK_ERR(mp_graph_load_weights(fresh, ex, &keep), MP_OK);
    mp_graph_destroy(fresh);
    float got[3 * 128];
    CHECK(mp_graph_param_get(a.g, "fc.weight", got, 3 * 128) == MP_OK && got[0] == 0.0f && got[383] == 0.0f,
          "the file's fc.weight was loaded");
    /* nothing changes when a file is refused: a NaN in the second tensor */
    float conv_before[18], nan_w[18];
    MP_ASSERT(mp_graph_param_get(a.g, "conv.weight", conv_before, 18) == MP_OK);
    for (int i = 0; i < 18; i++) nan_w[i] = 7.0f;
    fw[10] = NAN;
    mp_st_tensor half_bad[] = {{.name = "conv.weight", .dtype = MP_DTYPE_F32, .ndim = 4, .dims = {2, 1, 3, 3}, .data = nan_w},
                               {.name = "fc.weight", .dtype = MP_DTYPE_F32, .ndim = 2, .dims = {3, 128}, .data = fw}};
    CHECK_ERR(mp_graph_load_weights(a.g, write_file("nan.safetensors", half_bad, 2),
                                    &(mp_weights_opts){.allow_missing = true}),
              MP_ERR_NONFINITE, "'fc.weight' holds nan at element 10");
    float conv_after[18];
    MP_ASSERT(mp_graph_param_get(a.g, "conv.weight", conv_after, 18) == MP_OK);
    CHECK(!memcmp(conv_before, conv_after, sizeof conv_after), "a refused file changed conv.weight");
    mp_trainer_destroy(ta);
    mp_trainer_destroy(to);
    mp_optimizer_destroy(oa);
    mp_optimizer_destroy(oo);
    mp_graph_destroy(a.g);
    mp_graph_destroy(other.g);
}

static void test_evaluation_misuse(void) {
    net a = make_net(2, 3);
    mp_dataset *wrong_shape = NULL, *wrong_classes = NULL, *ok = NULL;
    MP_ASSERT(mp_dataset_create_synthetic(16, 1, 9, 9, 3, 1, &wrong_shape) == MP_OK);
    MP_ASSERT(mp_dataset_create_synthetic(16, 1, 8, 8, 5, 1, &wrong_classes) == MP_OK);
    MP_ASSERT(mp_dataset_create_synthetic(16, 1, 8, 8, 3, 1, &ok) == MP_OK);
    const mp_eval_opts eo = {.input = a.input, .logits = a.logits};
    mp_eval_result r;
    CHECK_ERR(mp_evaluate(a.g, wrong_shape, &eo, &r), MP_ERR_SHAPE, "1x9x9", "'image' takes 1x8x8");
    CHECK_ERR(mp_evaluate(a.g, wrong_classes, &eo, &r), MP_ERR_SHAPE, "labels up to 4", "3 classes");
    CHECK_ERR(mp_evaluate(a.g, ok, &(mp_eval_opts){.input = a.labels, .logits = a.logits}, &r), MP_ERR_INVALID_ARG,
              "not an image input");
    CHECK_ERR(mp_evaluate(a.g, ok, &eo, &r), MP_OK);
    CHECK(r.samples == 16 && r.accuracy >= 0 && r.accuracy <= 1 && isfinite(r.loss), "evaluated %lld samples",
          (long long)r.samples);
    /* a graph whose parameters were never initialized or loaded */
    mp_graph *fresh = mp_graph_create();
    mp_node in = mp_graph_input(fresh, "image", 1, 8, 8);
    mp_node lg = mp_linear(fresh, "fc", mp_flatten(fresh, "flat", in), (mp_linear_opts){.out_features = 3});
    CHECK_ERR(mp_evaluate(fresh, ok, &(mp_eval_opts){.input = in, .logits = lg}, &r), MP_ERR_INVALID_ARG,
              "never initialized");
    mp_graph_destroy(fresh);
    /* mp_predict normalizes as mp_evaluate does: with mean/std the logits are those of the images normalized here */
    float images[2 * 64], normalized[2 * 64], with[2 * 3], by_hand[2 * 3], plain[2 * 3];
    const float mean[1] = {0.25f}, sd[1] = {0.5f};
    for (int i = 0; i < 2 * 64; i++) images[i] = (float)(i % 13) / 13.0f, normalized[i] = (images[i] - 0.25f) / 0.5f;
    mp_eval_opts norm = eo;
    norm.mean = mean, norm.std = sd;
    CHECK_ERR(mp_predict(a.g, &norm, images, 2, with), MP_OK);
    CHECK_ERR(mp_predict(a.g, &eo, normalized, 2, by_hand), MP_OK);
    CHECK_ERR(mp_predict(a.g, &eo, images, 2, plain), MP_OK);
    CHECK(!memcmp(with, by_hand, sizeof with) && memcmp(with, plain, sizeof with),
          "predict with mean/std: logit 0 %g, normalized by hand %g, unnormalized %g", with[0], by_hand[0], plain[0]);
    norm.std = (const float[]){0.0f};
    CHECK_ERR(mp_predict(a.g, &norm, images, 2, with), MP_ERR_INVALID_ARG, "predict", "std[0] = 0");
    CHECK_ERR(mp_predict(a.g, &(mp_eval_opts){.input = a.input, .logits = a.logits, .batch = -1}, images, 2, with),
              MP_ERR_INVALID_ARG, "batch -1");
    CHECK_ERR(mp_evaluate(a.g, ok, &(mp_eval_opts){.input = a.input, .logits = a.logits, .batch = -2}, &r),
              MP_ERR_INVALID_ARG, "batch -2");
    images[64 + 7] = NAN;
    CHECK_ERR(mp_predict(a.g, &eo, images, 2, with), MP_ERR_NONFINITE, "image 1", "element 7");

    /* datasets from memory are checked */
    float img[2 * 4] = {0, 0, 0, 0, 0, 0, NAN, 0};
    int32_t lab[2] = {0, 1};
    mp_dataset *d = NULL;
    CHECK_ERR(mp_dataset_create(2, 1, 2, 2, 2, img, (int32_t[]){0, 2}, "mine", &d), MP_ERR_INVALID_ARG, "mine",
              "label 2 of sample 1");
    CHECK_ERR(mp_dataset_create(2, 1, 2, 2, 2, img, lab, "mine", &d), MP_ERR_NONFINITE, "mine");
    CHECK(d == NULL, "a refused dataset is NULL");
    mp_dataset_destroy(wrong_shape);
    mp_dataset_destroy(wrong_classes);
    mp_dataset_destroy(ok);
    mp_graph_destroy(a.g);
}

static void test_options_misuse(void) {
    net a = make_net(2, 3);
    mp_optimizer *o = NULL;
    CHECK_ERR(mp_optimizer_create(a.g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_SGD}, .lr = {.base_lr = NAN}}, &o),
              MP_ERR_INVALID_ARG, "learning rate nan");
    CHECK_ERR(mp_optimizer_create(a.g, &(mp_optimizer_opts){.lr = {.base_lr = 0.1f}, .params = "decoder."}, &o),
              MP_ERR_INVALID_ARG, "starts with 'decoder.'");
    CHECK_ERR(mp_optimizer_create(a.g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_ADAM, .momentum = 0.9f},
                                                           .lr = {.base_lr = 0.1f}},
                                  &o),
              MP_ERR_INVALID_ARG, "--momentum");
    const mp_lr_schedule bad = {.kind = MP_LR_STEP, .base_lr = 0.1f}; /* step_size 0 */
    CHECK(isnan(mp_lr_at(&bad, 3)), "a bad schedule gives NaN, not a crash");
    CHECK_ERR(mp_lr_schedule_check(&bad), MP_ERR_INVALID_ARG, "step_size");
    CHECK_ERR(mp_graph_apply_policy(a.g, (mp_policy_opts){.precision = MP_PRECISION_AMP_FP16, .overrides = "cnv=fp32"}),
              MP_ERR_INVALID_ARG, "no layer named 'cnv'");
    mp_policy_info pi;
    CHECK(mp_graph_policy(a.g, &pi) == MP_OK && pi.precision == MP_PRECISION_FP32, "a refused policy leaves fp32");
    CHECK_ERR(mp_lr_schedule_parse("cosine", 0.1f, 10, NULL), MP_ERR_INVALID_ARG, "cosine", "NULL");
    /* scaler options: checked with scaling off too; a floor above the first scale */
    mp_optimizer *sg = sgd(a.g);
    mp_trainer *t = NULL;
    mp_trainer_opts to = {.batch = 4, .loss = a.loss, .optimizer = sg, .loss_scaling = MP_LOSS_SCALING_OFF,
                          .scaler = {.init_scale = -5}};
    CHECK_ERR(mp_trainer_create(a.g, &to, &t), MP_ERR_INVALID_ARG, "-5");
    to.loss_scaling = MP_LOSS_SCALING_ON, to.scaler.init_scale = 1024, to.scale_floor = 4096;
    CHECK_ERR(mp_trainer_create(a.g, &to, &t), MP_ERR_INVALID_ARG, "scale_floor 4096", "initial loss scale 1024");
    mp_optimizer_destroy(sg);
    mp_graph_destroy(a.g);
}

/* mp_trainer_loss on a loss the program never marked as an output: the
 * trainer keeps it readable (it is the value a marked loss gives). */

static void test_loss_not_marked(void) {
    float loss[2] = {0, 0};
    for (int marked = 0; marked < 2; marked++) {
        net n = make_net(4, 3);
        if (marked) mp_graph_mark_output(n.g, n.loss);
        MP_ASSERT(mp_graph_apply_policy(n.g, (mp_policy_opts){.precision = MP_PRECISION_FP32}) == MP_OK);
        mp_optimizer *o = sgd(n.g);
        mp_trainer *t = NULL;
        MP_ASSERT(mp_trainer_create(n.g, &(mp_trainer_opts){.batch = 4, .input = n.input, .labels = n.labels,
                                                             .loss = n.loss, .optimizer = o},
                                    &t) == MP_OK);
        float x[4 * 64];
        int32_t y[4];
        small_batch(x, y);
        MP_ASSERT(mp_trainer_step(t, &(mp_batch){.images = x, .labels = y, .n = 4}, NULL) == MP_OK);
        CHECK(mp_trainer_loss(t, &loss[marked]) == MP_OK, "%s", mp_last_error());
        mp_trainer_destroy(t);
        mp_optimizer_destroy(o);
        mp_graph_destroy(n.g);
    }
    CHECK(isfinite(loss[0]) && loss[0] > 0 && loss[0] == loss[1], "loss unmarked %g, marked %g", loss[0], loss[1]);
}

/* Every trainable gradient of g, concatenated into out (at most cap values); the count. */
static size_t copy_grads(const mp_graph *g, float *out, size_t cap) {
    size_t n = 0;
    for (int k = 0; k < mp_graph_param_tensors(g); k++) {
        mp_param_info pi;
        MP_ASSERT(mp_graph_param_info(g, k, &pi) == MP_OK);
        if (!pi.trainable) continue;
        MP_ASSERT(n + (size_t)pi.numel <= cap);
        MP_ASSERT(mp_graph_grad_get(g, pi.name, out + n, (size_t)pi.numel) == MP_OK);
        n += (size_t)pi.numel;
    }
    return n;
}

/* make_net with one output channel, gated by a branch without parameters:
 * input -> conv -> bn -> relu, times relu(input) ("side"), -> flatten -> fc.
 * The gate's backward reads side, which no backward pass writes a gradient
 * for: a second pass needs it kept. */
static net make_gated_net(void) {
    net n;
    mp_node h = net_begin(&n, 1);
    h = mp_mul(n.g, "gate", h, mp_relu(n.g, "side", n.input));
    return net_finish(n, h, 3);
}

static void test_backward_order(void) {
    float x[4 * 64], g1[2048], g2[2048];
    int32_t y[4];
    small_batch(x, y);
    for (int variant = 0; variant < 3; variant++) { /* make_net without and with repeat_backward, then the gated one */
        const bool repeat = variant > 0;
        net n = variant == 2 ? make_gated_net() : make_net(4, 3);
        MP_ASSERT(mp_graph_apply_policy(n.g, (mp_policy_opts){.precision = MP_PRECISION_FP32}) == MP_OK);
        mp_plan *p = NULL;
        MP_ASSERT(mp_plan_create(n.g, (mp_plan_opts){.batch = 4, .training = true, .loss = n.loss,
                                                     .repeat_backward = repeat},
                                 &p) == MP_OK);
        float logits[4 * 3];
        CHECK_ERR(mp_plan_forward(p), MP_ERR_INVALID_ARG, "input 'image' has no batch yet", "mp_plan_set_input");
        CHECK_ERR(mp_plan_read(p, n.logits, logits, 4 * 3), MP_ERR_INVALID_ARG, "'fc'", "no forward has completed");
        float labels_back[4];
        CHECK_ERR(mp_plan_read(p, n.labels, labels_back, 4), MP_ERR_INVALID_ARG, "'label'", "no batch yet",
                  "mp_plan_set_labels");
        MP_ASSERT(mp_plan_set_input(p, n.input, x, 4 * 64) == MP_OK);
        CHECK_ERR(mp_plan_forward(p), MP_ERR_INVALID_ARG, "labels 'label' has no batch yet", "mp_plan_set_labels");
        MP_ASSERT(mp_plan_set_labels(p, n.labels, y, 4) == MP_OK);
        CHECK_ERR(mp_plan_read(p, n.labels, labels_back, 4), MP_OK); /* a batch reads back before any forward */
        for (int i = 0; i < 4; i++)
            CHECK(labels_back[i] == (float)y[i], "label %d reads %g, set %d", i, labels_back[i], y[i]);
        CHECK_ERR(mp_plan_backward(p, 1.0f), MP_ERR_INVALID_ARG, "no forward", "mp_plan_forward");
        MP_ASSERT(mp_plan_forward(p) == MP_OK);
        mp_graph_zero_grad(n.g);
        CHECK_ERR(mp_plan_backward(p, 1.0f), MP_OK);
        const size_t count = copy_grads(n.g, g1, sizeof g1 / sizeof g1[0]);
        mp_graph_zero_grad(n.g);
        if (!repeat) {
            CHECK_ERR(mp_plan_backward(p, 1.0f), MP_ERR_INVALID_ARG, "already ran since the last forward",
                      "repeat_backward");
            MP_ASSERT(mp_plan_forward(p) == MP_OK); /* a new forward makes it legal again */
        }
        CHECK_ERR(mp_plan_backward(p, 1.0f), MP_OK);
        copy_grads(n.g, g2, sizeof g2 / sizeof g2[0]);
        CHECK(count > 0 && !memcmp(g1, g2, count * sizeof g1[0]),
              "%s: the second backward's %zu gradients equal the first's bit for bit",
              variant == 2 ? "gated net, repeat_backward" : repeat ? "repeat_backward, no forward between"
                                                                   : "a forward between",
              count);
        mp_plan_destroy(p);
        mp_graph_destroy(n.g);
    }
}

/* Two groups minimizing one loss (the convolution's and the classifier's
 * parameters, SGD each): the classifier's update equals a lone group's over
 * the same parameters, whose gradient the convolution's update cannot
 * change (it reads only the forward's activations). */
/* A trainer over n with SGD of the given momentum and loss scaling. */
static mp_trainer *sgd_trainer(net n, float momentum, mp_scaler_opts scaler, mp_optimizer **opt) {
    MP_ASSERT(mp_optimizer_create(n.g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_SGD, .momentum = momentum},
                                                            .lr = {.base_lr = 0.1f}},
                                  opt) == MP_OK);
    mp_trainer *t = NULL;
    MP_ASSERT(mp_trainer_create(n.g, &(mp_trainer_opts){.batch = 4, .input = n.input, .labels = n.labels,
                                                        .loss = n.loss, .optimizer = *opt,
                                                        .loss_scaling = MP_LOSS_SCALING_ON, .scaler = scaler},
                                &t) == MP_OK);
    return t;
}

/* Checkpoints that do not fit the resuming trainer are refused by name: a
 * bigger model's (a tensor left over), state of other optimizer options
 * either way; a static loss scale stays the run's own; a model name of any
 * length round-trips. */
static void test_checkpoint_mismatches(void) {
    float x[4 * 64];
    int32_t y[4];
    small_batch(x, y);
    net a = make_net(2, 3), big = make_net(2, 3);
    big.logits = mp_linear(big.g, "fc2", big.logits, (mp_linear_opts){.out_features = 3, .bias = true});
    big.loss = mp_softmax_cross_entropy(big.g, "loss2", big.logits, big.labels);
    mp_graph_init_params(big.g, 3);
    mp_optimizer *oa = NULL, *om = NULL, *ob = NULL;
    mp_trainer *ta = sgd_trainer(a, 0, (mp_scaler_opts){0}, &oa);
    mp_trainer *tb = sgd_trainer(big, 0, (mp_scaler_opts){0}, &ob);
    char big_path[4200], mom_path[4200], plain_path[4200];
    snprintf(big_path, sizeof big_path, "%s/big.safetensors", dir);
    snprintf(mom_path, sizeof mom_path, "%s/momentum.safetensors", dir);
    snprintf(plain_path, sizeof plain_path, "%s/plain.safetensors", dir);
    CHECK_ERR(mp_trainer_save(tb, big_path, &(mp_checkpoint_info){.model = "a"}), MP_OK);
    CHECK_ERR(mp_trainer_load(ta, big_path, &(mp_checkpoint_info){.model = "a"}), MP_ERR_INVALID_ARG, "'fc2.",
              "does not have");
    char name[100];
    memset(name, 'm', sizeof name - 1), name[sizeof name - 1] = '\0';
    MP_ASSERT(mp_trainer_step(ta, &(mp_batch){.images = x, .labels = y, .n = 4}, NULL) == MP_OK);
    CHECK_ERR(mp_trainer_save(ta, plain_path, &(mp_checkpoint_info){.model = name}), MP_OK);
    CHECK_ERR(mp_trainer_load(ta, plain_path, &(mp_checkpoint_info){.model = name}), MP_OK);
    mp_trainer_destroy(ta);
    mp_optimizer_destroy(oa);
    mp_trainer *tm = sgd_trainer(a, 0.9f, (mp_scaler_opts){0}, &om);
    MP_ASSERT(mp_trainer_step(tm, &(mp_batch){.images = x, .labels = y, .n = 4}, NULL) == MP_OK);
    CHECK_ERR(mp_trainer_save(tm, mom_path, &(mp_checkpoint_info){.model = "a"}), MP_OK);
    CHECK_ERR(mp_trainer_load(tm, plain_path, NULL), MP_ERR_INVALID_ARG, "holds no optimizer state 'optim/",
              "other optimizer options");
    mp_trainer_destroy(tm);
    mp_optimizer_destroy(om);
    /* without momentum, from a run with it; then a static scale of 128 resuming a dynamic run's 65536 */
    ta = sgd_trainer(a, 0, (mp_scaler_opts){.static_scale = true, .init_scale = 128}, &oa);
    CHECK_ERR(mp_trainer_load(ta, mom_path, NULL), MP_ERR_INVALID_ARG, "optimizer state 'optim/", "does not keep");
    CHECK_ERR(mp_trainer_load(ta, plain_path, NULL), MP_OK);
    CHECK(mp_trainer_loss_scale(ta) == 128.0f, "a static scale of 128 after resuming a dynamic run: %g",
          mp_trainer_loss_scale(ta));
    mp_trainer_destroy(ta);
    mp_trainer_destroy(tb);
    mp_optimizer_destroy(oa);
    mp_optimizer_destroy(ob);
    mp_graph_destroy(a.g);
    mp_graph_destroy(big.g);
}

/* A batch set between a forward and its backward, a NaN seed, NULL data or
 * sites: refused by name, and the plan still works after the forward is redone. */
static void test_plan_call_misuse(void) {
    float x[4 * 64], x2[4 * 64];
    int32_t y[4];
    small_batch(x, y);
    for (int i = 0; i < 4 * 64; i++) x2[i] = -x[i];
    net n = make_net(4, 3);
    mp_plan *p = NULL;
    CHECK_ERR(mp_plan_create(n.g, (mp_plan_opts){.batch = 4, .training = true, .loss = n.loss}, NULL),
              MP_ERR_INVALID_ARG, "no output pointer");
    /* an arena beyond what the host can give (core/host_mem.h, lowered to 1000 bytes): refused, named */
    setenv("MIXPREC_HOST_MEM_LIMIT", "1000", 1);
    p = (mp_plan *)&n; /* not a plan: the refusal must set it to NULL */
    CHECK_ERR(mp_plan_create(n.g, (mp_plan_opts){.batch = 4, .training = true, .loss = n.loss}, &p), MP_ERR_NOMEM,
              "out of memory for the activations and gradients of batch 4 (the plan's arena): asked ",
              "1000 bytes (0.00 GiB) available (MIXPREC_HOST_MEM_LIMIT); try a smaller batch");
    CHECK(p == NULL, "no plan after the refusal");
    unsetenv("MIXPREC_HOST_MEM_LIMIT");
    MP_ASSERT(mp_plan_create(n.g, (mp_plan_opts){.batch = 4, .training = true, .loss = n.loss}, &p) == MP_OK);
    int native = -1;
    mp_plan_precision_counts(p, &native, NULL);
    CHECK(native == 0, "an fp32 plan has no native low-precision nodes: %d", native);
    CHECK_ERR(mp_plan_set_input(p, n.input, NULL, 4 * 64), MP_ERR_INVALID_ARG, "'image'", "NULL");
    CHECK_ERR(mp_plan_set_labels(p, n.labels, NULL, 4), MP_ERR_INVALID_ARG, "'label'", "NULL");
    MP_ASSERT(mp_plan_set_input(p, n.input, x, 4 * 64) == MP_OK && mp_plan_set_labels(p, n.labels, y, 4) == MP_OK);
    for (int labels = 0; labels < 2; labels++) {
        MP_ASSERT(mp_plan_forward(p) == MP_OK);
        if (labels) MP_ASSERT(mp_plan_set_labels(p, n.labels, (int32_t[]){2, 1, 0, 2}, 4) == MP_OK);
        else MP_ASSERT(mp_plan_set_input(p, n.input, x2, 4 * 64) == MP_OK);
        CHECK_ERR(mp_plan_backward(p, 1.0f), MP_ERR_INVALID_ARG, labels ? "'label'" : "'image'",
                  "new batch after the last forward", "mix two batches");
    }
    MP_ASSERT(mp_plan_forward(p) == MP_OK);
    CHECK_ERR(mp_plan_backward(p, NAN), MP_ERR_INVALID_ARG, "seed", "not finite");
    CHECK_ERR(mp_plan_backward_checked(p, 1.0f, NULL), MP_ERR_INVALID_ARG, "site");
    CHECK_ERR(mp_plan_find_nonfinite_forward(p, NULL), MP_ERR_INVALID_ARG, "site");
    CHECK_ERR(mp_plan_backward(p, 1.0f), MP_OK);
    mp_plan_destroy(p);
    mp_graph_destroy(n.g);
}

/* Gradients a trainer cannot vouch for are refused: a parameter no group
 * trains under loss scaling (never unscaled: 65536 times the gradient), a
 * group's before a later group's backward overwrote it; and a group whose
 * losses all weigh 0 (it stepped on the other groups' gradients). */
static void test_trainer_gradients(void) {
    float x[4 * 64];
    int32_t y[4];
    small_batch(x, y);
    net n = make_net(4, 3);
    mp_optimizer *fc = NULL, *conv = NULL;
    MP_ASSERT(mp_optimizer_create(n.g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_SGD}, .lr = {.base_lr = 0.1f},
                                                            .params = "fc"},
                                  &fc) == MP_OK);
    MP_ASSERT(mp_optimizer_create(n.g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_SGD}, .lr = {.base_lr = 0.1f},
                                                            .params = "conv"},
                                  &conv) == MP_OK);
    mp_trainer *t = NULL;
    mp_trainer_opts o = {.batch = 4, .input = n.input, .labels = n.labels, .loss = n.loss, .optimizer = fc,
                         .loss_scaling = MP_LOSS_SCALING_ON};
    MP_ASSERT(mp_trainer_create(n.g, &o, &t) == MP_OK);
    MP_ASSERT(mp_trainer_step(t, &(mp_batch){.images = x, .labels = y, .n = 4}, NULL) == MP_OK);
    float g[64];
    CHECK_ERR(mp_trainer_grad_get(t, "fc.bias", g, 3), MP_OK);
    CHECK_ERR(mp_trainer_grad_get(t, "conv.weight", g, 36), MP_ERR_INVALID_ARG, "'conv.weight'", "never unscaled");
    mp_trainer_destroy(t);
    mp_trainer_opts two = {.batch = 4, .input = n.input, .labels = n.labels, .n_groups = 2};
    two.groups[0] = (mp_train_group){.optimizer = fc, .losses = {n.loss}, .weights = {1}, .n_losses = 1};
    two.groups[1] = (mp_train_group){.optimizer = conv, .losses = {n.loss}, .weights = {0}, .n_losses = 1};
    CHECK_ERR(mp_trainer_create(n.g, &two, &t), MP_ERR_INVALID_ARG, "group 1", "weight 0");
    two.groups[1].weights[0] = 1;
    MP_ASSERT(mp_trainer_create(n.g, &two, &t) == MP_OK);
    MP_ASSERT(mp_trainer_step(t, &(mp_batch){.images = x, .labels = y, .n = 4}, NULL) == MP_OK);
    CHECK_ERR(mp_trainer_grad_get(t, "fc.bias", g, 3), MP_ERR_INVALID_ARG, "group 0", "overwrite");
    CHECK_ERR(mp_trainer_grad_get(t, "conv.weight", g, 36), MP_OK);
    mp_trainer_destroy(t);
    /* a loss weight times the scale past FLT_MAX: an overflowing seed is a skipped step, not an error */
    mp_trainer_opts heavy = {.batch = 4, .input = n.input, .labels = n.labels, .n_groups = 1,
                             .loss_scaling = MP_LOSS_SCALING_ON, .events = fopen("/dev/null", "w")};
    heavy.groups[0] = (mp_train_group){.optimizer = fc, .losses = {n.loss}, .weights = {1e35f}, .n_losses = 1};
    MP_ASSERT(heavy.events && mp_trainer_create(n.g, &heavy, &t) == MP_OK);
    mp_step_report rep;
    CHECK_ERR(mp_trainer_step(t, &(mp_batch){.images = x, .labels = y, .n = 4}, &rep), MP_OK);
    CHECK(mp_trainer_skipped_steps(t) == 1, "an inf seed skips the step: %lld skipped",
          (long long)mp_trainer_skipped_steps(t));
    /* the replay that located the overflow left scaled gradients behind: not readable as the step's */
    CHECK(rep.overflow.found, "the skipped step's overflow is reported");
    CHECK_ERR(mp_trainer_grad_get(t, "fc.bias", g, 3), MP_ERR_INVALID_ARG, "'fc.bias'", "skipped", "replay");
    /* until a step is not skipped: the scale backs off until the heavy seed fits */
    for (int i = 0; i < 40 && mp_trainer_skipped_steps(t) == mp_trainer_steps(t); i++)
        MP_ASSERT(mp_trainer_step(t, &(mp_batch){.images = x, .labels = y, .n = 4}, NULL) == MP_OK);
    CHECK(mp_trainer_skipped_steps(t) < mp_trainer_steps(t), "a step applies once the scale is low enough (%lld of "
          "%lld skipped)", (long long)mp_trainer_skipped_steps(t), (long long)mp_trainer_steps(t));
    CHECK_ERR(mp_trainer_grad_get(t, "fc.bias", g, 3), MP_OK);
    mp_trainer_destroy(t);
    fclose(heavy.events);
    mp_optimizer_destroy(fc);
    mp_optimizer_destroy(conv);
    mp_graph_destroy(n.g);
}

/* An optimizer made before the policy was applied steps as one made after
 * it: the trainer gives its state the policy's dtypes (pure fp16: fp16
 * momentum), so the weights after two steps agree bit for bit. */
static void test_optimizer_before_policy(void) {
    float x[4 * 64], w[2][36];
    int32_t y[4];
    small_batch(x, y);
    for (int before = 0; before < 2; before++) {
        net n = make_net(4, 3);
        mp_optimizer *o = NULL;
        const mp_optimizer_opts oo = {.optim = {.kind = MP_OPTIM_SGD, .momentum = 0.9f}, .lr = {.base_lr = 0.1f}};
        if (before) MP_ASSERT(mp_optimizer_create(n.g, &oo, &o) == MP_OK);
        MP_ASSERT(mp_graph_apply_policy(n.g, (mp_policy_opts){.precision = MP_PRECISION_FP16}) == MP_OK);
        if (!before) MP_ASSERT(mp_optimizer_create(n.g, &oo, &o) == MP_OK);
        mp_trainer *t = NULL;
        MP_ASSERT(mp_trainer_create(n.g, &(mp_trainer_opts){.batch = 4, .input = n.input, .labels = n.labels,
                                                            .loss = n.loss, .optimizer = o,
                                                            .loss_scaling = MP_LOSS_SCALING_OFF},
                                    &t) == MP_OK);
        for (int s = 0; s < 2; s++)
            MP_ASSERT(mp_trainer_step(t, &(mp_batch){.images = x, .labels = y, .n = 4}, NULL) == MP_OK);
        CHECK_ERR(mp_trainer_param_get(t, "conv.weight", w[before], 36), MP_OK);
        mp_trainer_destroy(t);
        mp_optimizer_destroy(o);
        mp_graph_destroy(n.g);
    }
    CHECK(!memcmp(w[0], w[1], sizeof w[0]), "conv.weight after 2 steps: optimizer made before the policy %g, after %g",
          w[1][0], w[0][0]);
}

static void test_groups_share_loss(void) {
    float x[4 * 64], w[2][3 * 256];
    int32_t y[4];
    small_batch(x, y);
    for (int two = 0; two < 2; two++) {
        net n = make_net(4, 3);
        MP_ASSERT(mp_graph_apply_policy(n.g, (mp_policy_opts){.precision = MP_PRECISION_FP32}) == MP_OK);
        mp_optimizer *o[2] = {NULL, NULL};
        const char *prefix[2] = {"fc", "conv"};
        for (int k = 0; k <= two; k++)
            MP_ASSERT(mp_optimizer_create(n.g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_SGD},
                                                                    .lr = {.base_lr = 0.1f}, .params = prefix[k]},
                                          &o[k]) == MP_OK);
        mp_trainer_opts to = {.batch = 4, .input = n.input, .labels = n.labels, .loss = n.loss, .optimizer = o[0]};
        if (two) { /* the convolution's group first: the classifier's backward runs second */
            to.n_groups = 2;
            to.groups[0] = (mp_train_group){.optimizer = o[1], .losses = {n.loss}, .weights = {1}, .n_losses = 1};
            to.groups[1] = (mp_train_group){.optimizer = o[0], .losses = {n.loss}, .weights = {1}, .n_losses = 1};
        }
        mp_trainer *t = NULL;
        MP_ASSERT(mp_trainer_create(n.g, &to, &t) == MP_OK);
        float loss = 0;
        CHECK_ERR(mp_trainer_loss(t, &loss), MP_ERR_INVALID_ARG, "no step has run yet");
        CHECK_ERR(mp_trainer_step(t, &(mp_batch){.images = x, .labels = y, .n = 4}, NULL), MP_OK);
        CHECK_ERR(mp_trainer_param_get(t, "fc.weight", w[two], 3 * 256), MP_OK);
        mp_trainer_destroy(t);
        mp_optimizer_destroy(o[0]);
        mp_optimizer_destroy(o[1]);
        mp_graph_destroy(n.g);
    }
    double d = 0;
    for (int i = 0; i < 3 * 256; i++) d = fmax(d, fabs((double)w[1][i] - w[0][i]));
    CHECK(d == 0, "two groups sharing one loss: fc.weight after a step as a lone group's (largest difference %g)", d);
}

/* The data-parallel entry points: a NULL output is refused, not written
 * (any build: without NCCL the error is still the null output's). An MPI
 * launch is recognized only from whole decimal sizes and ranks with
 * 0 <= rank < world; a malformed pair is an error naming the variable and
 * its value (mp_dist_mpi_env) and no launch to mp_dist_mpi_launched, absent
 * variables no launch and no error, and NULL outputs are never written. */
static void test_dist_misuse(void) {
    CHECK_ERR(mp_dist_group_create(1, 0, NULL), MP_ERR_INVALID_ARG, "mp_dist_group_create", "null output");
    CHECK_ERR(mp_dist_group_join(NULL, 0, 0, NULL), MP_ERR_INVALID_ARG, "mp_dist_group_join", "null output");
    CHECK_ERR(mp_dist_mpi_create(0, NULL), MP_ERR_INVALID_ARG, "mp_dist_mpi_create", "null output");
    static const char *const bad[][3] = {
        {"2", "5", "OMPI_COMM_WORLD_RANK='5' must be a rank in [0, 1] (OMPI_COMM_WORLD_SIZE=2)"},
        {"2", "2", "OMPI_COMM_WORLD_RANK='2'"}, {"2", "-1", "OMPI_COMM_WORLD_RANK='-1'"},
        {"2", "abc", "OMPI_COMM_WORLD_RANK='abc'"}, {"2", "1x", "OMPI_COMM_WORLD_RANK='1x'"},
        {"2", "", "OMPI_COMM_WORLD_RANK=''"}, {"3000000000", "0", "OMPI_COMM_WORLD_SIZE='3000000000' must be a world"},
        {"0", "0", "OMPI_COMM_WORLD_SIZE='0'"}, {"-2", "0", "OMPI_COMM_WORLD_SIZE='-2'"},
        {" 2", "0", "OMPI_COMM_WORLD_SIZE=' 2'"}, {"2.0", "0", "OMPI_COMM_WORLD_SIZE='2.0'"},
        {"2\n", "0", "OMPI_COMM_WORLD_SIZE='2\\x0a'"}};
    int world = -7, rank = -7;
    bool launched = true;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("OMPI_COMM_WORLD_SIZE", bad[i][0], 1), setenv("OMPI_COMM_WORLD_RANK", bad[i][1], 1);
        CHECK_ERR(mp_dist_mpi_env(&launched, &world, &rank), MP_ERR_INVALID_ARG, bad[i][2]);
        CHECK(!launched && world == -7 && rank == -7, "size '%s' rank '%s': launched %d, world %d rank %d written",
              bad[i][0], bad[i][1], launched, world, rank);
        launched = mp_dist_mpi_launched(&world, &rank);
        CHECK(!launched && world == -7 && rank == -7, "size '%s' rank '%s': launched %d, world %d rank %d written",
              bad[i][0], bad[i][1], launched, world, rank);
    }
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1), setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    CHECK(!mp_dist_mpi_launched(NULL, NULL) && !mp_dist_mpi_launched(&world, NULL), "NULL outputs");
    CHECK_ERR(mp_dist_mpi_env(NULL, &world, &rank), MP_ERR_INVALID_ARG, "mp_dist_mpi_env: null output");
    CHECK(mp_dist_mpi_launched(&world, &rank) && world == 2 && rank == 1, "size 2 rank 1: world %d rank %d", world,
          rank);
    world = rank = -7;
    CHECK(mp_dist_mpi_env(&launched, &world, &rank) == MP_OK && launched && world == 2 && rank == 1,
          "mp_dist_mpi_env, size 2 rank 1: launched %d world %d rank %d", launched, world, rank);
    /* a lone variable of a pair is no launch, nor an error; the PMI pair is read as well */
    unsetenv("OMPI_COMM_WORLD_RANK");
    world = rank = -7;
    CHECK(mp_dist_mpi_env(&launched, &world, &rank) == MP_OK && !launched && world == -7 && rank == -7,
          "OMPI_COMM_WORLD_SIZE alone: launched %d world %d rank %d", launched, world, rank);
    setenv("PMI_SIZE", "4", 1), setenv("PMI_RANK", "4", 1);
    CHECK_ERR(mp_dist_mpi_env(&launched, &world, &rank), MP_ERR_INVALID_ARG, "PMI_RANK='4' must be a rank in [0, 3]");
    setenv("PMI_RANK", "3", 1);
    CHECK(mp_dist_mpi_env(&launched, &world, &rank) == MP_OK && launched && world == 4 && rank == 3,
          "PMI size 4 rank 3: launched %d world %d rank %d", launched, world, rank);
    unsetenv("OMPI_COMM_WORLD_SIZE"), unsetenv("PMI_SIZE"), unsetenv("PMI_RANK");
}

/* Logits that come out NaN/inf from finite images (a normalization by a
 * std so small that (x - mean) / std overflows, or weights whose products
 * pass fp32's range) are an error naming the sample, not an accuracy over
 * NaN rows or NaN logits returned as MP_OK. */
static void test_nonfinite_logits(void) {
    net a = make_net(2, 3);
    float images[4 * 64], logits[4 * 3];
    int32_t labels[4];
    small_batch(images, labels);
    mp_dataset *d = NULL;
    MP_ASSERT(mp_dataset_create(4, 1, 8, 8, 3, images, labels, "four", &d) == MP_OK);
    const float mean[1] = {0.0f}, tiny[1] = {1e-44f};
    const mp_eval_opts tiny_std = {.input = a.input, .logits = a.logits, .mean = mean, .std = tiny};
    CHECK_ERR(mp_predict(a.g, &tiny_std, images, 4, logits), MP_ERR_NONFINITE, "predict: image 0", "'fc'",
              "std is too small");
    mp_eval_result r = {.samples = -1};
    CHECK_ERR(mp_evaluate(a.g, d, &tiny_std, &r), MP_ERR_NONFINITE, "evaluate: sample 0 of four", "'fc'");
    CHECK(r.samples == -1, "a refused evaluation wrote its result (%lld samples)", (long long)r.samples);
    /* weights whose sums pass fp32's range: image 1 alone overflows */
    const mp_eval_opts eo = {.input = a.input, .logits = a.logits};
    float fc[3 * 128];
    for (int i = 0; i < 3 * 128; i++) fc[i] = 3e38f;
    MP_ASSERT(mp_graph_param_set(a.g, "fc.weight", fc, 3 * 128) == MP_OK);
    for (int i = 0; i < 64; i++) images[i] = 0.0f; /* image 0 all zero: its logits are the bias */
    memset(images + 2 * 64, 0, 2 * 64 * sizeof(float));
    CHECK_ERR(mp_predict(a.g, &eo, images, 4, logits), MP_ERR_NONFINITE, "predict: image 1", "forward overflowed");
    CHECK(!strstr(mp_last_error(), "std"), "no normalization, yet the error blames it: %s", mp_last_error());
    mp_dataset_destroy(d);
    mp_graph_destroy(a.g);
}

int main(void) {
    scratch_dir_create(dir, sizeof dir, "test_api");
    test_trainer_misuse();
    test_checkpoints_and_weights();
    test_evaluation_misuse();
    test_options_misuse();
    test_loss_not_marked();
    test_backward_order();
    test_groups_share_loss();
    test_plan_call_misuse();
    test_checkpoint_mismatches();
    test_optimizer_before_policy();
    test_trainer_gradients();
    test_dist_misuse();
    test_nonfinite_logits();
    scratch_dir_remove(dir);
    return test_summary("test_api");
}
