/* fuzz_ckpt_meta.c — libFuzzer harness of the checkpoint metadata
 * validation. Each input is used twice: as the text of one metadata value,
 * given to every typed parser (whatever they accept must lie in range and
 * read back the same), and as a whole checkpoint file restored into a
 * trainer of a small model (conv, batch norm, linear; SGD with momentum;
 * amp-fp16 with dynamic loss scaling), whose accepted state must lie in the
 * documented ranges.
 *
 * MP_FUZZ_WRITE_SEED=FILE writes a valid checkpoint of that model to FILE and
 * exits: the seed the committed corpus starts from. */
#include "fuzz_input.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "amp/scaler.h"
#include "core/error.h"
#include "graph/graph.h"
#include "io/ckpt_meta.h"
#include "train/trainer.h"

static mp_graph *g;
static mp_optimizer *opt;
static mp_trainer *t;
static fuzz_file file;

static void build_model(void) {
    g = mp_graph_create();
    mp_node x = mp_graph_input(g, "x", 1, 4, 4), y = mp_graph_labels(g, "y");
    x = mp_conv2d(g, "conv", x, (mp_conv_opts){.out_channels = 2, .kernel = 3, .padding = 1, .bias = true});
    x = mp_batchnorm2d(g, "bn", x, (mp_batchnorm_opts){0});
    x = mp_relu(g, "relu", mp_flatten(g, "flat", x));
    x = mp_linear(g, "fc", x, (mp_linear_opts){.out_features = 3, .bias = true});
    mp_node loss = mp_softmax_cross_entropy(g, "loss", x, y);
    MP_ASSERT(mp_graph_status(g) == MP_OK);
    MP_ASSERT(mp_graph_apply_policy(g, (mp_policy_opts){.precision = MP_PRECISION_AMP_FP16}) == MP_OK);
    mp_graph_init_params(g, 1);
    MP_ASSERT(mp_optimizer_create(g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_SGD, .momentum = 0.9f},
                                                         .lr = {.base_lr = 0.1f}},
                                  &opt) == MP_OK);
    MP_ASSERT(mp_trainer_create(g, &(mp_trainer_opts){.batch = 8, .loss = loss, .optimizer = opt}, &t) == MP_OK);
}

static const mp_checkpoint_info info = {.model = "fuzz", .epoch = 2};

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    build_model();
    fuzz_file_init(&file, "fuzz_ckpt_meta");
    const char *seed = getenv("MP_FUZZ_WRITE_SEED");
    if (seed) {
        MP_ASSERT(mp_optim_set_step_count(opt->host, 37) == MP_OK);
        t->steps = 40;
        mp_plan_set_step(mp_trainer_plan(t), 40);
        if (mp_trainer_save(t, seed, &info) != MP_OK) {
            fprintf(stderr, "%s\n", mp_last_error());
            exit(1);
        }
        exit(0);
    }
    return 0;
}

/* The typed parsers on one value: what they accept is in range and reads back. */
static void fuzz_text(const uint8_t *data, size_t size) {
    char text[128];
    size_t n = size < sizeof text - 1 ? size : sizeof text - 1;
    memcpy(text, data, n);
    text[n] = '\0';
    int64_t i;
    if (mp_meta_parse_int(text, 0, 100000, &i)) MP_ASSERT(i >= 0 && i <= 100000);
    if (mp_meta_parse_int(text, INT64_MIN, INT64_MAX, &i)) {
        char back[32];
        snprintf(back, sizeof back, "%" PRId64, i);
        int64_t j;
        MP_ASSERT(mp_meta_parse_int(back, INT64_MIN, INT64_MAX, &j) && j == i);
        MP_ASSERT(strspn(text, "-0123456789") == strlen(text));
    }
    uint64_t u;
    if (mp_meta_parse_u64(text, 5, 1000, &u)) MP_ASSERT(u >= 5 && u <= 1000);
    if (mp_meta_parse_u64(text, 0, UINT64_MAX, &u)) MP_ASSERT(strspn(text, "0123456789") == strlen(text));
    double d;
    if (mp_meta_parse_double(text, -1e300, 1e300, &d)) MP_ASSERT(isfinite(d) && d >= -1e300 && d <= 1e300);
    char q[16], q2[96];
    mp_meta_quote(text, q, sizeof q);
    mp_meta_quote(text, q2, sizeof q2);
    MP_ASSERT(strlen(q) < sizeof q && strlen(q2) < sizeof q2);
    for (const char *p = q2; *p; p++) MP_ASSERT((unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_text(data, size);
    fuzz_file_set(&file, data, size);
    mp_checkpoint_info got = info;
    if (mp_trainer_load(t, file.path, &got) != MP_OK) {
        MP_ASSERT(!strchr(mp_last_error(), '\n'));
        return 0;
    }
    const int64_t steps = mp_trainer_steps(t);
    MP_ASSERT(got.epoch >= 0 && got.epoch <= 100000 && steps >= 0 && steps < ((int64_t)1 << 53) &&
              mp_optimizer_steps(opt) <= steps && mp_trainer_skipped_steps(t) <= steps);
    MP_ASSERT(isfinite(mp_trainer_loss_scale(t)) && mp_trainer_loss_scale(t) > 0);
    for (int k = 0; k < g->n_params; k++) /* every value restored is finite, every variance >= 0 */
        for (int64_t i = 0; i < mp_shape_numel(&g->params[k].spec.shape); i++)
            MP_ASSERT(isfinite(g->params[k].data[i]) &&
                      (strcmp(g->params[k].spec.name, "running_var") || g->params[k].data[i] >= 0));
    return 0;
}
