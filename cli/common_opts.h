/* common_opts.h — options `train` and `bench` share: the dataset (--data,
 * --data-dir, --synthetic-*, --train-samples, --augment, --no-normalize) and
 * the optimizer (--optimizer, --lr, --momentum, --nesterov, --weight-decay),
 * with their help lines, parsing, defaults and the data loading. */
#ifndef MP_CLI_COMMON_OPTS_H
#define MP_CLI_COMMON_OPTS_H

#include <stdbool.h>
#include <stdint.h>

#include "data/dataset.h"
#include "optim/optim.h"

#define FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* The dataset options: which data and how it is read (every command reading data), the
 * augmentation (training only) and normalization lines, and all three together. */
#define DATA_INPUT_OPTS_HELP                                                                           \
    "  --data D            fashion-mnist | mnist | cifar10 | synthetic | npy:X.npy,Y.npy[,XT.npy,YT.npy]\n"\
    "                      | folder:DIR (default fashion-mnist)\n"                                     \
    "  --data-dir DIR      dataset folder (default " FASHION_MNIST_DIR " for fashion-mnist)\n"         \
    "  --synthetic-shape S CxHxW of synthetic samples (default 3x32x32)\n"                             \
    "  --synthetic-size N  synthetic training samples (default 10000; test: N/5)\n"                    \
    "  --train-samples N   train on the first N samples only\n"                                        \
    "  --val-fraction F    npy: with two files and folder: without train/ and val/ (or test/), hold\n" \
    "                      out the share F of the samples, each class's share evenly spaced through\n"\
    "                      it, as the test set (default 0.1)\n"                                        \
    "  --npy-layout L      auto | nchw | nhwc: layout of 4-D .npy images (default auto: NHWC when the\n"\
    "                      last dimension is 1 or 3)\n"                                                \
    "  --image-size HxW    folder: sample size (default: the images' size, when all share one); images\n"\
    "                      are resized to cover it (the shorter side) and centre-cropped\n"            \
    "  --image-channels C  folder: 1 (gray) or 3 (RGB) (default 3 when any image has colour, else 1)\n"\
    "  --bad-images P      folder: fail | skip a corrupt or unreadable image (default fail)\n"         \
    "  --decode-threads N  folder: decoder threads (default: the online CPUs)\n"                       \
    "  --decode-memory-mb M  folder: decode once into memory when the decoded images take at most M\n" \
    "                      MiB (default 2048; 0: decode every batch)\n"

#define DATA_AUGMENT_OPTS_HELP                                                                         \
    "  --augment           random crop after zero-padding 4 pixels per side (2 below 32 high) +\n"     \
    "                      horizontal flip (probability 1/2)\n"                                      \
    "  --random-resized-crop  random-resized-crop as torchvision (scale 0.08-1, aspect 3/4-4/3), then\n"\
    "                      --augment's crop and flip if given\n"

#define DATA_NORMALIZE_OPTS_HELP                                                                       \
    "  --no-normalize      do not normalize inputs by the training set's mean/std\n"

#define DATA_OPTS_HELP DATA_INPUT_OPTS_HELP DATA_AUGMENT_OPTS_HELP DATA_NORMALIZE_OPTS_HELP

/* The closing line of every command that reads input files (data, checkpoints, models, policies,
 * logs): mp_input_open refuses all but regular files, so `--policy <(...)` fails; say so up front. */
#define INPUT_FILES_HELP "Input files must be regular files: pipes such as <(zcat ...) and devices are refused.\n"

#define OPTIM_OPTS_HELP                                                                                \
    "  --optimizer O       sgd | adam | adamw (default adam)\n"                                        \
    "  --lr X              learning rate (default 0.002 for adam/adamw, 0.05 for sgd)\n"               \
    "  --momentum X        SGD momentum (default 0.9 for sgd)\n"                                       \
    "  --nesterov          Nesterov momentum (sgd)\n"                                                  \
    "  --weight-decay X    weight decay on conv/linear weights (default 0; 5e-4 for sgd)\n"

typedef struct {
    /* data */
    const char *data, *data_dir;
    int syn_c, syn_h, syn_w, syn_n, train_samples;
    bool augment, normalize;
    double val_fraction;
    mp_npy_layout npy_layout;
    bool random_resized_crop;
    int image_h, image_w, image_c, decode_threads, decode_memory_mb;
    mp_bad_images bad_images;
    /* the last option given of each group that applies to some kinds of --data only (NULL: none given),
     * for common_opts_check_data */
    const char *synthetic_opt, *npy_opt, *folder_opt, *split_opt, *dir_opt;
    /* optimizer */
    const char *optimizer;
    float lr, momentum, weight_decay;
    bool lr_set, momentum_set, wd_set, nesterov;
} common_opts;

common_opts common_opts_default(void);

/* If argv[*i] is one of the shared options, consume it (and its value,
 * advancing *i) and return 1; return 0 if it is not one of them; print
 * "mixprec <cmd>: ..." and return -1 for a missing or bad value. */
int common_opts_parse(const char *cmd, int argc, char **argv, int *i, common_opts *c);

/* --data known, and no option given that applies to another kind of data
 * only (--synthetic-* without synthetic data, --npy-layout without npy
 * files, a folder option without folder:DIR, --val-fraction with neither
 * two npy files nor a folder, --data-dir with neither fashion-mnist, mnist
 * nor cifar10), which would be ignored: 0, else 2 after printing "mixprec
 * <cmd>: ..." naming the option. For after option parsing, before any data
 * is read. */
int common_opts_check_data(const char *cmd, const common_opts *c);

/* Load the train and test sets (synthetic ones from `seed`), cut the train set
 * to --train-samples and check both are finite. On error both are freed. */
mp_status common_opts_load_data(const common_opts *c, uint64_t seed, mp_dataset *train, mp_dataset *test);

/* The optimizer options and learning rate after the per-optimizer defaults;
 * an unknown --optimizer is MP_ERR_INVALID_ARG naming it. */
mp_status common_opts_optimizer(const common_opts *c, mp_optim_opts *oo, float *lr);

/* Output paths checked right after option parsing, before any data is read
 * or training starts (see io/output_path.h): 0 when `path` is NULL or fine,
 * else 2 after printing "mixprec <cmd>: <option> <path>: why". A file output
 * is never the file standard output or error is redirected to (`-o m.onnx >
 * m.onnx`, `--log /dev/stdout > x`): the command's messages would be mixed
 * into it. */
int cli_check_output(const char *cmd, const char *option, const char *path);
int cli_check_output_dir(const char *cmd, const char *option, const char *dir);
/* cli_check_output_dir, and the folder must not hold the regular file
 * `marker` (which an earlier run of the command wrote there): that run's
 * plots or sample grids would stay beside this one's, which replaces only
 * some of them; else 2 after a message naming the file. */
int cli_check_fresh_output_dir(const char *cmd, const char *option, const char *dir, const char *marker);
/* No two of the n output paths (NULL: not given) name one file; else 2 after
 * "mixprec <cmd>: <option> <path> and <option> <path> name the same file". */
int cli_check_outputs_distinct(const char *cmd, int n, const char *const *options, const char *const *paths);

/* None of the n output paths (NULL: not given) is an input: --model when it
 * names an .onnx file (model may be NULL), a file of --data npy:... (c may be
 * NULL); else 2 after "mixprec <cmd>: <option> <path> is the <input option>
 * input <file>: ...". */
int cli_check_inputs_kept(const char *cmd, const common_opts *c, const char *model, int n,
                          const char *const *options, const char *const *paths);

/* mkdir -p for --out folders; false with errno set (ENOTDIR when a part
 * is a file). */
bool cli_make_dirs(const char *path);

/* The rows of the checkpoint's tensor `name` (a logits layer's weight,
 * classes x features: the classes the run trained) into *rows; 0 where the
 * file has no such 2-D tensor (a file of another model: loading it names
 * what differs). An unreadable file is the error. */
mp_status cli_checkpoint_rows(const char *path, const char *name, int *rows);

/* The default --out of bench and train-gan: "runs/<what>-YYYYmmdd-HHMMSS"
 * (local time) into buf, created here, new: mkdir of the folder itself
 * fails where it exists, and the name then takes "-2", "-3", ... (at most
 * "-99"), so runs started in the same second get folders of their own.
 * 0, or 2 after "mixprec <cmd>: cannot create <path>: why" with buf
 * emptied (no folder of this run's to remove). */
int cli_claim_default_out(const char *cmd, const char *what, char *buf, size_t cap);

/* A command whose default --out is claimed by cli_claim_default_out: run
 * calls it into default_out (cap bytes, empty until then); where run fails
 * after claiming, the folder is removed if it stayed empty. run's status. */
int cli_run_with_default_out(int (*run)(int argc, char **argv, char *default_out, size_t cap), int argc,
                             char **argv);

#endif
