/* common_opts.c — see common_opts.h. */
#include "cli/common_opts.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/args.h"
#include "core/error.h"
#include "data/folder.h"
#include "io/output_path.h"
#include "io/safetensors.h"
#include "models/models.h"

/* The most --synthetic-size: N training samples and N/5 test samples are
 * made as one synthetic dataset, of at most 2^24 samples (synthetic.c). */
#define SYN_MAX_SAMPLES (1 << 24)
#define SYN_MAX_SIZE 13981014
_Static_assert(SYN_MAX_SIZE + SYN_MAX_SIZE / 5 <= SYN_MAX_SAMPLES &&
                   (SYN_MAX_SIZE + 1) + (SYN_MAX_SIZE + 1) / 5 > SYN_MAX_SAMPLES,
               "SYN_MAX_SIZE is the most N with N + N/5 <= 2^24");

/* --synthetic-size N, naming the limit its test samples set. */
static bool parse_synthetic_size(const char *cmd, const char *opt, const char *text, int *out) {
    int n;
    if (!arg_int(cmd, opt, text, 5, INT_MAX, &n)) return false;
    if (n > SYN_MAX_SIZE) {
        fprintf(stderr, "mixprec %s: %s %d is out of range [5, %d]: with its N/5 test samples the dataset would hold "
                "more than %d samples\n", cmd, opt, n, SYN_MAX_SIZE, SYN_MAX_SAMPLES);
        return false;
    }
    *out = n;
    return true;
}

common_opts common_opts_default(void) {
    return (common_opts){.data = "fashion-mnist", .syn_c = 3, .syn_h = 32, .syn_w = 32, .syn_n = 10000,
                         .normalize = true, .optimizer = "adam", .val_fraction = 0.1,
                         .decode_memory_mb = 2048};
}

int common_opts_parse(const char *cmd, int argc, char **argv, int *i, common_opts *c) {
    const char *a = argv[*i];
    /* flags */
    if (!strcmp(a, "--augment")) { c->augment = true; return 1; }
    if (!strcmp(a, "--no-normalize")) { c->normalize = false; return 1; }
    if (!strcmp(a, "--nesterov")) { c->nesterov = true; return 1; }
    if (!strcmp(a, "--random-resized-crop")) { c->random_resized_crop = true; return 1; }
    static const char *const with_value[] = {"--data", "--data-dir", "--synthetic-shape", "--synthetic-size",
                                             "--train-samples", "--optimizer", "--lr", "--momentum",
                                             "--weight-decay", "--val-fraction", "--npy-layout", "--image-size",
                                             "--image-channels", "--bad-images", "--decode-threads",
                                             "--decode-memory-mb"};
    const char *v = NULL;
    const int taken = arg_option_value(cmd, argc, argv, i, with_value, sizeof with_value / sizeof *with_value, &v);
    if (taken <= 0) return taken;
    bool ok = true;
    if (!strcmp(a, "--synthetic-shape") || !strcmp(a, "--synthetic-size")) c->synthetic_opt = a;
    else if (!strcmp(a, "--npy-layout")) c->npy_opt = a;
    else if (!strcmp(a, "--image-size") || !strcmp(a, "--image-channels") || !strcmp(a, "--bad-images") ||
             !strcmp(a, "--decode-threads") || !strcmp(a, "--decode-memory-mb"))
        c->folder_opt = a;
    else if (!strcmp(a, "--val-fraction")) c->split_opt = a;
    else if (!strcmp(a, "--data-dir")) c->dir_opt = a;
    if (!strcmp(a, "--data")) c->data = v;
    else if (!strcmp(a, "--data-dir")) c->data_dir = v;
    else if (!strcmp(a, "--optimizer")) c->optimizer = v;
    else if (!strcmp(a, "--synthetic-shape")) ok = arg_shape3(cmd, a, v, &c->syn_c, &c->syn_h, &c->syn_w);
    else if (!strcmp(a, "--synthetic-size")) ok = parse_synthetic_size(cmd, a, v, &c->syn_n);
    else if (!strcmp(a, "--train-samples")) ok = arg_int(cmd, a, v, 1, 1 << 30, &c->train_samples);
    else if (!strcmp(a, "--lr")) ok = c->lr_set = arg_float(cmd, a, v, 1e-12, 1e6, &c->lr);
    else if (!strcmp(a, "--momentum")) ok = c->momentum_set = arg_float(cmd, a, v, 0, 1, &c->momentum);
    else if (!strcmp(a, "--weight-decay")) ok = c->wd_set = arg_float(cmd, a, v, 0, 1e3, &c->weight_decay);
    else if (!strcmp(a, "--val-fraction")) {
        ok = arg_double(cmd, a, v, 0, 1, &c->val_fraction);
        if (ok && !(c->val_fraction > 0 && c->val_fraction < 1)) {
            fprintf(stderr, "mixprec %s: --val-fraction %s must lie strictly between 0 and 1\n", cmd, v);
            ok = false;
        }
    } else if (!strcmp(a, "--image-size")) {
        int hw[2];
        ok = arg_dims(cmd, a, v, 2, 1, 16384, "HxW (e.g. 224x224)", hw);
        if (ok) c->image_h = hw[0], c->image_w = hw[1];
    } else if (!strcmp(a, "--image-channels")) {
        ok = arg_int(cmd, a, v, 1, 3, &c->image_c);
        if (ok && c->image_c == 2) {
            fprintf(stderr, "mixprec %s: --image-channels 2: 1 (gray) or 3 (RGB)\n", cmd);
            ok = false;
        }
    } else if (!strcmp(a, "--bad-images")) {
        if (!strcmp(v, "fail")) c->bad_images = MP_BAD_IMAGES_FAIL;
        else if (!strcmp(v, "skip")) c->bad_images = MP_BAD_IMAGES_SKIP;
        else {
            fprintf(stderr, "mixprec %s: --bad-images '%s' must be skip or fail\n", cmd, v);
            ok = false;
        }
    } else if (!strcmp(a, "--decode-threads")) {
        ok = arg_int(cmd, a, v, 1, 1024, &c->decode_threads);
    } else if (!strcmp(a, "--decode-memory-mb")) {
        ok = arg_int(cmd, a, v, 0, 1 << 30, &c->decode_memory_mb);
    } else if (!strcmp(a, "--npy-layout")) {
        if (!strcmp(v, "auto")) c->npy_layout = MP_NPY_LAYOUT_AUTO;
        else if (!strcmp(v, "nchw")) c->npy_layout = MP_NPY_LAYOUT_NCHW;
        else if (!strcmp(v, "nhwc")) c->npy_layout = MP_NPY_LAYOUT_NHWC;
        else {
            fprintf(stderr, "mixprec %s: --npy-layout '%s' must be auto, nchw or nhwc\n", cmd, v);
            ok = false;
        }
    }
    return ok ? 1 : -1;
}

/* Whether --data names a dataset load_data knows. */
static bool known_data(const char *name) {
    return !strcmp(name, "fashion-mnist") || !strcmp(name, "mnist") || !strcmp(name, "cifar10") ||
           !strcmp(name, "synthetic") || !strncmp(name, "npy:", 4) || !strncmp(name, "folder:", 7);
}

int common_opts_check_data(const char *cmd, const common_opts *c) {
    if (!known_data(c->data)) {
        fprintf(stderr, "mixprec %s: --data '%s': unknown dataset (known: fashion-mnist, mnist, cifar10, synthetic, "
                        "npy:X.npy,Y.npy[,XT.npy,YT.npy], folder:DIR)\n", cmd, c->data);
        return 2;
    }
    const bool synthetic = !strcmp(c->data, "synthetic"), npy = !strncmp(c->data, "npy:", 4),
               folder = !strncmp(c->data, "folder:", 7);
    const char *commas = npy ? strchr(c->data, ',') : NULL;
    const bool npy_pair = commas && !strchr(commas + 1, ','); /* X,Y: the test set split off */
    struct {
        const char *given, *applies;
        bool fits;
    } const groups[] = {
        {c->synthetic_opt, "--data synthetic", synthetic},
        {c->npy_opt, "--data npy:...", npy},
        {c->folder_opt, "--data folder:DIR", folder},
        {c->split_opt, "--data npy:X.npy,Y.npy (two files) and --data folder:DIR", npy_pair || folder},
        {c->dir_opt, "--data fashion-mnist, mnist and cifar10", !synthetic && !npy && !folder},
    };
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++)
        if (groups[g].given && !groups[g].fits) {
            fprintf(stderr, "mixprec %s: %s applies to %s only, not to --data %s (it would be ignored)\n", cmd,
                    groups[g].given, groups[g].applies, c->data);
            return 2;
        }
    return 0;
}

/* The comma-separated files of --data npy:LIST, split in buf (NPY_LIST_MAX
 * bytes) into paths (up to 5: one more than allowed, to tell a longer list);
 * -1 when the list does not fit. */
#define NPY_LIST_MAX (4 * 4096 + 4)
static int npy_files(const char *list, char *buf, char **paths) {
    if (strlen(list) >= NPY_LIST_MAX) return -1;
    strcpy(buf, list);
    int n = 0;
    for (char *p = buf, *comma; n < 5; p = comma + 1) {
        paths[n++] = p;
        if (!(comma = strchr(p, ','))) break;
        *comma = '\0';
    }
    return n;
}

/* npy:X,Y (a held-out split by --val-fraction) or npy:X,Y,XT,YT. */
static mp_status load_npy(const common_opts *c, mp_dataset *train, mp_dataset *test) {
    char buf[NPY_LIST_MAX], *paths[5];
    const int n = npy_files(c->data + 4, buf, paths);
    if (n < 0) return mp_error(MP_ERR_INVALID_ARG, "--data npy:...: the file list is too long");
    bool empty = false;
    for (int i = 0; i < n; i++) empty = empty || !paths[i][0];
    if ((n != 2 && n != 4) || empty)
        return mp_error(MP_ERR_INVALID_ARG, "--data '%s': expected npy:IMAGES.npy,LABELS.npy or "
                        "npy:IMAGES.npy,LABELS.npy,TEST_IMAGES.npy,TEST_LABELS.npy", c->data);
    const mp_npy_opts o = {.layout = c->npy_layout};
    if (n == 4) {
        MP_TRY(mp_dataset_load_npy(paths[0], paths[1], &o, train));
        mp_status s = mp_dataset_load_npy(paths[2], paths[3], &o, test);
        if (s == MP_OK && test->classes < train->classes) test->classes = train->classes;
        return s;
    }
    mp_dataset all;
    MP_TRY(mp_dataset_load_npy(paths[0], paths[1], &o, &all));
    mp_status s = mp_dataset_split(&all, c->val_fraction, train, test);
    mp_dataset_free(&all);
    return s;
}

static mp_status load_data(const common_opts *c, uint64_t seed, mp_dataset *train, mp_dataset *test) {
    if (!strcmp(c->data, "fashion-mnist") || !strcmp(c->data, "mnist")) {
        const char *dir = c->data_dir ? c->data_dir : FASHION_MNIST_DIR;
        if (!strcmp(c->data, "mnist") && !c->data_dir)
            return mp_error(MP_ERR_INVALID_ARG, "--data mnist needs --data-dir DIR (MNIST IDX files)");
        MP_TRY(mp_dataset_load_fashion_mnist(dir, true, train));
        return mp_dataset_load_fashion_mnist(dir, false, test);
    }
    if (!strcmp(c->data, "cifar10")) {
        if (!c->data_dir) return mp_error(MP_ERR_INVALID_ARG, "--data cifar10 needs --data-dir DIR (CIFAR-10 binary batches)");
        MP_TRY(mp_dataset_load_cifar10(c->data_dir, true, train));
        return mp_dataset_load_cifar10(c->data_dir, false, test);
    }
    if (!strcmp(c->data, "synthetic")) {
        /* one stream of samples (same class patterns), split into train and test */
        mp_dataset all;
        int n_test = c->syn_n / 5;
        const mp_status made = mp_dataset_synthetic(c->syn_n + n_test, c->syn_c, c->syn_h, c->syn_w, 10, seed, &all);
        if (made != MP_OK)
            return mp_error(made, "--synthetic-size %d (and %d test samples) of --synthetic-shape "
                            "%dx%dx%d: %s", c->syn_n, n_test, c->syn_c, c->syn_h, c->syn_w, mp_last_error());
        mp_status s = mp_dataset_slice(&all, 0, c->syn_n, train);
        if (s == MP_OK) s = mp_dataset_slice(&all, c->syn_n, n_test, test);
        mp_dataset_free(&all);
        return s;
    }
    if (!strncmp(c->data, "npy:", 4)) return load_npy(c, train, test);
    if (!strncmp(c->data, "folder:", 7)) {
        if (!c->data[7]) return mp_error(MP_ERR_INVALID_ARG, "--data folder:DIR needs a folder");
        const mp_folder_opts fo = {.height = c->image_h, .width = c->image_w, .channels = c->image_c,
                                   .bad_images = c->bad_images, .val_fraction = c->val_fraction,
                                   .max_memory = (size_t)c->decode_memory_mb << 20,
                                   .lazy = c->decode_memory_mb == 0, .threads = c->decode_threads};
        return mp_dataset_load_folder(c->data + 7, &fo, train, test);
    }
    return mp_error(MP_ERR_INVALID_ARG, "--data '%s': unknown dataset (known: fashion-mnist, mnist, cifar10, synthetic, "
                    "npy:X.npy,Y.npy, folder:DIR)", c->data);
}

mp_status common_opts_load_data(const common_opts *c, uint64_t seed, mp_dataset *train, mp_dataset *test) {
    mp_dataset sub = {0};
    mp_status s = load_data(c, seed, train, test);
    if (s == MP_OK && c->train_samples && c->train_samples < train->n) {
        s = mp_dataset_subset(train, c->train_samples, &sub);
        if (s == MP_OK) {
            mp_dataset_free(train);
            *train = sub;
        }
    }
    if (s == MP_OK) s = mp_dataset_check_finite(train);
    if (s == MP_OK) s = mp_dataset_check_finite(test);
    if (s == MP_OK) s = mp_dataset_check_compatible(train, test);
    if (s != MP_OK) {
        mp_dataset_free(train);
        mp_dataset_free(test);
    }
    return s;
}

mp_status common_opts_optimizer(const common_opts *c, mp_optim_opts *oo, float *lr) {
    mp_optim_kind kind;
    if (mp_optim_kind_parse(c->optimizer, &kind) != MP_OK)
        return mp_error(MP_ERR_INVALID_ARG, "--optimizer '%s': unknown (known: sgd, adam, adamw)", c->optimizer);
    bool sgd = kind == MP_OPTIM_SGD;
    *oo = (mp_optim_opts){.kind = kind,
                          .momentum = c->momentum_set ? c->momentum : (sgd ? 0.9f : 0),
                          .nesterov = c->nesterov,
                          .weight_decay = c->wd_set ? c->weight_decay : (sgd ? 5e-4f : 0)};
    *lr = c->lr_set ? c->lr : (sgd ? 0.05f : 0.002f);
    return MP_OK;
}

/* Whether path is the regular file that descriptor fd (standard output or
 * error, redirected to a file) writes to. */
static bool is_file_of_fd(const char *path, int fd) {
    struct stat sf, sp;
    return fstat(fd, &sf) == 0 && S_ISREG(sf.st_mode) && stat(path, &sp) == 0 && sf.st_dev == sp.st_dev &&
           sf.st_ino == sp.st_ino;
}

/* 0, or 2 after a message when path is where standard output or error goes:
 * the command's own lines would be mixed into the file. */
static int check_not_std_stream(const char *cmd, const char *option, const char *path) {
    const char *stream = is_file_of_fd(path, 1) ? "output" : is_file_of_fd(path, 2) ? "error" : NULL;
    if (!stream) return 0;
    fprintf(stderr, "mixprec %s: %s %s is the file standard %s is redirected to: the command's messages would be "
                    "mixed into it; give %s another path\n", cmd, option, path, stream, option);
    return 2;
}

int cli_check_output(const char *cmd, const char *option, const char *path) {
    if (!path) return 0;
    if (mp_output_path_check(path, option) != MP_OK) {
        fprintf(stderr, "mixprec %s: %s\n", cmd, mp_last_error());
        return 2;
    }
    return check_not_std_stream(cmd, option, path);
}

int cli_check_output_dir(const char *cmd, const char *option, const char *dir) {
    if (!dir || mp_output_dir_check(dir, option) == MP_OK) return 0;
    fprintf(stderr, "mixprec %s: %s\n", cmd, mp_last_error());
    return 2;
}

int cli_check_fresh_output_dir(const char *cmd, const char *option, const char *dir, const char *marker) {
    int rc = cli_check_output_dir(cmd, option, dir);
    if (rc || !dir) return rc;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, marker);
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return 0; /* not a file: the output's own check names it */
    fprintf(stderr, "mixprec %s: %s %s already holds an earlier run's output (%s): its files would stay beside this "
                    "run's, which replaces only some of them; give a new folder (the default is a new timestamped "
                    "one) or remove that one\n", cmd, option, dir, path);
    return 2;
}

int cli_check_outputs_distinct(const char *cmd, int n, const char *const *options, const char *const *paths) {
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (paths[i] && paths[j] && mp_output_same_file(paths[i], paths[j])) {
                fprintf(stderr, "mixprec %s: %s %s and %s %s name the same file: give each output its own path\n",
                        cmd, options[i], paths[i], options[j], paths[j]);
                return 2;
            }
    return 0;
}

int cli_check_inputs_kept(const char *cmd, const common_opts *c, const char *model, int n,
                          const char *const *options, const char *const *paths) {
    char buf[NPY_LIST_MAX], *files[5];
    const int n_files = c && !strncmp(c->data, "npy:", 4) ? npy_files(c->data + 4, buf, files) : 0;
    for (int i = 0; i < n; i++) {
        if (!paths[i]) continue;
        const char *input = NULL, *option = NULL;
        if (model && mp_model_is_onnx_name(model) && mp_output_same_file(paths[i], model))
            input = model, option = "--model";
        for (int k = 0; !input && k < n_files; k++)
            if (files[k][0] && mp_output_same_file(paths[i], files[k])) input = files[k], option = "--data";
        if (input) {
            fprintf(stderr, "mixprec %s: %s %s is the %s input %s: writing it would destroy the input; give the "
                            "output its own path\n", cmd, options[i], paths[i], option, input);
            return 2;
        }
    }
    return 0;
}

int cli_claim_default_out(const char *cmd, const char *what, char *buf, size_t cap) {
    if (!buf || cap < 48) {
        fprintf(stderr, "mixprec %s: internal error: no room for the default --out's name\n", cmd);
        return 2;
    }
    const time_t now = time(NULL);
    struct tm tm;
    char stamp[32] = "";
    if (localtime_r(&now, &tm)) strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    if (!cli_make_dirs("runs")) {
        fprintf(stderr, "mixprec %s: cannot create runs/ for the default --out: %s\n", cmd, strerror(errno));
        *buf = '\0';
        return 2;
    }
    for (int k = 1; k < 100; k++) {
        if (k == 1) snprintf(buf, cap, "runs/%s-%s", what, stamp);
        else snprintf(buf, cap, "runs/%s-%s-%d", what, stamp, k);
        if (mkdir(buf, 0777) == 0) return 0;
        if (errno != EEXIST) break;
    }
    fprintf(stderr, "mixprec %s: cannot create a new folder %s for the default --out: %s\n", cmd, buf,
            errno == EEXIST ? "99 runs this second already took its names" : strerror(errno));
    *buf = '\0'; /* nothing of ours to remove */
    return 2;
}

int cli_run_with_default_out(int (*run)(int argc, char **argv, char *default_out, size_t cap), int argc,
                             char **argv) {
    char default_out[64] = "";
    const int rc = run(argc, argv, default_out, sizeof default_out);
    if (rc && *default_out) rmdir(default_out); /* the failed run's own default folder, where it stayed empty */
    return rc;
}

bool cli_make_dirs(const char *path) {
    char buf[4096];
    if (!*path || strlen(path) >= sizeof buf) {
        errno = *path ? ENAMETOOLONG : ENOENT;
        return false;
    }
    strcpy(buf, path);
    for (char *p = buf + 1;; p++) {
        bool end = *p == '\0';
        if (*p == '/' || end) {
            *p = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST) return false;
            if (end) break;
            *p = '/';
        }
    }
    struct stat st;
    if (stat(path, &st) != 0) return false;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return false;
    }
    return true;
}

mp_status cli_checkpoint_rows(const char *path, const char *name, int *rows) {
    *rows = 0;
    mp_st_file *f = NULL;
    MP_TRY(mp_safetensors_open_header(path, &f)); /* the shape alone */
    mp_st_tensor t;
    if (mp_safetensors_get(f, name, &t) == MP_OK && t.ndim == 2 && t.dims[0] <= MP_DATASET_MAX_CLASSES)
        *rows = (int)t.dims[0];
    mp_safetensors_close(f);
    return MP_OK;
}
