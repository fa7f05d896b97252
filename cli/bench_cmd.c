/* bench_cmd.c — `mixprec bench`: the seed-000 matrix in one command. Checks
 * every option before any training, loads the data once, runs models ×
 * precisions × batch sizes × GPU counts and writes results.jsonl, tables.md
 * and plots. */
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench/matrix.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common_opts.h"
#include "core/error.h"
#include "io/output_path.h"
#include "train/progress.h"

#define MAX_LIST 64

static void usage(FILE *f) {
    fprintf(f,
            "usage: mixprec bench [options]\n\n"
            "Train every model x precision x batch size x GPU count cell of a matrix and lay out time per epoch,\n"
            "speed-up vs fp32 (T_fp32 / T - 1 within one batch size and GPU count), test accuracy and its\n"
            "difference to fp32, memory, images/s, speed-up vs 1 GPU and cost as tables and plots (seed 000).\n"
            "A cell that fails or runs out of memory is recorded and the matrix goes on.\n\n"
            "matrix:\n"
            "  --models A,B        models (default small); known: %s\n"
            "  --precisions P,Q    precision policies (default fp32,amp-bf16,bf16); known: %s\n"
            "  --batches B,C       batch sizes per GPU (default 128,512)\n"
            "  --gpus N,M          GPU counts (default 1): a cell of N > 1 trains data parallel on GPUs 0..N-1\n"
            "                      (one thread each, NCCL all-reduce) on global batches of N x batch, and its\n"
            "                      images/s count every GPU; a cell of 1 runs on --device. Counts above 1 need\n"
            "                      that many GPUs and a GPU device; with 1 and more in the list, tables.md\n"
            "                      adds a speed-up vs 1 GPU table (images/s ratio)\n"
            "  --epochs N          epochs per cell (default 1)\n"
            "  --steps N           at most N steps per epoch: a throughput-only run whose time per epoch is\n"
            "                      projected to the full epoch (default: whole epochs); times come from each\n"
            "                      cell's last epoch, so --epochs 2 --steps N times N steps after a warm-up\n\n"
            "data:\n" DATA_OPTS_HELP "\n"
            "training:\n" OPTIM_OPTS_HELP
            "  --seed S            random seed for init, shuffling, synthetic data (default 1)\n"
            "  --init I            weight initialization: he (default) or torch (PyTorch's default)\n\n"
            "execution and output:\n"
            "  --out DIR           output folder (default a new runs/bench-YYYYmmdd-HHMMSS[-N]): results.jsonl, tables.md,\n"
            "                      {time,speedup,accuracy}_<model>.{svg,png} drawn by gnuplot (the 1-GPU\n"
            "                      cells, else the first GPU count's), plots.gp; a folder an earlier run\n"
            "                      wrote results.jsonl to is refused\n"
            "  --price-per-hour X  machine price in USD per hour, for a cost-per-million-samples column\n"
            "                      (default 0: no cost)\n"
"  --device D          cpu | cuda | cuda:N | auto (default auto: the first GPU when present)\n"
            "  --monitor-interval S  seconds between GPU monitor samples (NVML) written to DIR/monitor.csv;\n"
            "                      each cell gets its mean GPU load, mean power and energy per epoch\n"
            "                      (default 5; 0 = off)\n"
            "  --threads T         CPU threads (default: all cores)\n"
            "  --reference         use the plain-C reference kernels instead of oneDNN\n"
            "  --verbose           also print each cell's training progress\n"
            "  -h, --help          this help\n\n" INPUT_FILES_HELP,
            mp_model_list(), mp_precision_list());
}

typedef struct {
    common_opts c;
    const char *models_arg, *precisions_arg, *batches_arg, *gpus_arg, *out, *device_arg;
    mp_device device;
    float monitor_interval;   /* seconds between GPU samples, 0 = monitor off */
    int epochs, steps, threads;
    float price;
    uint64_t seed;
    mp_init_scheme init;
    bool reference, verbose;
    /* the parsed lists (items point into list_buf) */
    char list_buf[4][4096];
    const char *models[MAX_LIST];
    mp_precision precisions[MAX_LIST];
    int batches[MAX_LIST], gpus[MAX_LIST];
    int n_models, n_precisions, n_batches, n_gpus;
} bench_args;

static int parse(int argc, char **argv, bench_args *b) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int shared = common_opts_parse("bench", argc, argv, &i, &b->c);
        if (shared < 0) return 2;
        if (shared) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 1; }
        if (!strcmp(a, "--reference")) { b->reference = true; continue; }
        if (!strcmp(a, "--verbose")) { b->verbose = true; continue; }
        static const char *const with_value[] = {"--models", "--precisions", "--batches", "--gpus", "--epochs",
                                                 "--steps", "--out", "--price-per-hour", "--threads", "--seed",
                                                 "--init", "--device", "--monitor-interval"};
        v = NULL;
        const int taken =
            arg_option_value("bench", argc, argv, &i, with_value, sizeof with_value / sizeof *with_value, &v);
        if (taken < 0) return 2;
        if (!taken) {
            fprintf(stderr, "mixprec bench: unknown option '%s' (see mixprec bench --help)\n", a);
            return 2;
        }
        bool ok = true;
        if (!strcmp(a, "--models")) b->models_arg = v;
        else if (!strcmp(a, "--precisions")) b->precisions_arg = v;
        else if (!strcmp(a, "--batches")) b->batches_arg = v;
        else if (!strcmp(a, "--gpus")) b->gpus_arg = v;
        else if (!strcmp(a, "--out")) b->out = v;
        else if (!strcmp(a, "--device")) {
            b->device_arg = v;
            ok = mp_device_parse(v, &b->device) == MP_OK;
            if (!ok) fprintf(stderr, "mixprec bench: %s\n", mp_last_error());
        }
        else if (!strcmp(a, "--epochs")) ok = arg_int("bench", a, v, 1, 100000, &b->epochs);
        else if (!strcmp(a, "--steps")) ok = arg_int("bench", a, v, 1, 1 << 30, &b->steps);
        else if (!strcmp(a, "--threads")) ok = arg_int("bench", a, v, 1, 1024, &b->threads);
        else if (!strcmp(a, "--monitor-interval")) ok = arg_monitor_interval("bench", a, v, &b->monitor_interval);
        else if (!strcmp(a, "--price-per-hour")) ok = arg_float("bench", a, v, 0, 1e9, &b->price);
        else if (!strcmp(a, "--seed")) ok = arg_u64("bench", a, v, &b->seed);
        else if (!strcmp(a, "--init")) {
            ok = mp_init_scheme_parse(v, &b->init) == MP_OK;
            if (!ok) fprintf(stderr, "mixprec bench: --init: %s\n", mp_last_error());
        }
        if (!ok) return 2;
    }
    return 0;
}

/* Split a comma list into buf; returns the item count or -1 after an error. */
static int split_list(const char *opt, const char *text, char *buf, size_t n, char **items) {
    if (strlen(text) >= n) {
        fprintf(stderr, "mixprec bench: %s '%.40s...' is too long\n", opt, text);
        return -1;
    }
    strcpy(buf, text);
    int count = 0;
    for (char *p = buf;; p++) {
        if (count == MAX_LIST) {
            fprintf(stderr, "mixprec bench: %s '%s' has more than %d entries\n", opt, text, MAX_LIST);
            return -1;
        }
        items[count++] = p;
        p += strcspn(p, ",");
        if (!*p) break;
        *p = '\0';
    }
    for (int i = 0; i < count; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(items[i], items[j])) {
                fprintf(stderr, "mixprec bench: %s '%s' lists '%s' twice\n", opt, text, items[i]);
                return -1;
            }
    return count;
}

static bool check_lists(bench_args *b) {
    char *items[MAX_LIST];
    int n = split_list("--models", b->models_arg, b->list_buf[0], sizeof b->list_buf[0], items);
    if (n < 0) return false;
    for (int i = 0; i < n; i++) {
        if (mp_model_check_name(items[i]) != MP_OK) {
            fprintf(stderr, "mixprec bench: --models: %s\n", mp_last_error());
            return false;
        }
        b->models[b->n_models++] = items[i];
    }
    n = split_list("--precisions", b->precisions_arg, b->list_buf[1], sizeof b->list_buf[1], items);
    if (n < 0) return false;
    for (int i = 0; i < n; i++) {
        if (mp_precision_parse(items[i], &b->precisions[b->n_precisions++]) != MP_OK) {
            fprintf(stderr, "mixprec bench: --precisions '%s': unknown precision (known: %s)\n", items[i],
                    mp_precision_list());
            return false;
        }
    }
    n = split_list("--batches", b->batches_arg, b->list_buf[2], sizeof b->list_buf[2], items);
    if (n < 0) return false;
    for (int i = 0; i < n; i++)
        if (!arg_int("bench", "--batches", items[i], 1, 1 << 20, &b->batches[b->n_batches++])) return false;
    n = split_list("--gpus", b->gpus_arg, b->list_buf[3], sizeof b->list_buf[3], items);
    if (n < 0) return false;
    for (int i = 0; i < n; i++)
        if (!arg_int("bench", "--gpus", items[i], 1, 1024, &b->gpus[b->n_gpus++])) return false;
    return true;
}

/* Every GPU count above 1 needs a GPU device and that many GPUs present. */
static bool check_gpus(const bench_args *b) {
    int found = mp_device_gpu_count();
    for (int i = 0; i < b->n_gpus; i++) {
        int n = b->gpus[i];
        if (n <= 1) continue;
        if (b->device.kind != MP_DEVICE_CUDA && b->device_arg && strcmp(b->device_arg, "auto")) {
            fprintf(stderr, "mixprec bench: --gpus %d: data-parallel training runs on GPUs, not with --device %s\n",
                    n, b->device_arg);
            return false;
        }
        if (n > found) {
            fprintf(stderr, "mixprec bench: --gpus %d: more GPUs than this machine has (found %d GPU%s)\n", n,
                    found, found == 1 ? "" : "s");
            return false;
        }
    }
    return true;
}

/* A finished cell's record into results.jsonl (mp_bench_opts.cell_done), flushed: a run cut short keeps it. */
static mp_status write_record(void *jsonl, const mp_bench_matrix *m, const mp_bench_cell *c) {
    const mp_status s = mp_bench_write_record(jsonl, m, c);
    fflush(jsonl);
    return s;
}

/* Create the output folder and open results.jsonl in it. */
static FILE *open_out(const char *dir) {
    if (!cli_make_dirs(dir)) {
        fprintf(stderr, "mixprec bench: --out '%s': cannot create directory: %s\n", dir, strerror(errno));
        return NULL;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/results.jsonl", dir);
    FILE *f = NULL;
    if (mp_output_open(path, "--out", false, &f) != MP_OK) fprintf(stderr, "mixprec bench: %s\n", mp_last_error());
    return f;
}

/* Checks that need no data, then those that need it; 0 when all pass. */
static int check_args(bench_args *b, mp_optim_opts *oo, float *lr) {
    if (!check_lists(b) || !check_gpus(b)) return 2;
    if (common_opts_check_data("bench", &b->c)) return 2;
    if (common_opts_optimizer(&b->c, oo, lr) != MP_OK) {
        fprintf(stderr, "mixprec bench: %s\n", mp_last_error());
        return 2;
    }
    return 0;
}

static int report(const mp_bench_matrix *m, const char *out, double seconds) {
    int ok = 0;
    for (int i = 0; i < m->n; i++) ok += m->cells[i].status == MP_CELL_OK;
    char path[4200];
    snprintf(path, sizeof path, "%s/tables.md", out);
    if (mp_bench_write_markdown(path, m) != MP_OK) {
        fprintf(stderr, "mixprec bench: %s\n", mp_last_error());
        return 1;
    }
    int images = 0;
    mp_status s = mp_bench_write_plots(out, m, &images);
    if (s == MP_ERR_UNSUPPORTED) fprintf(stderr, "mixprec bench: warning: %s\n", mp_last_error());
    else if (s != MP_OK) {
        fprintf(stderr, "mixprec bench: %s\n", mp_last_error());
        return 1;
    }
    printf("mixprec bench: %d cells (%d ok, %d failed) in %.1fs; wrote %s/results.jsonl, %s/tables.md and %d plot "
           "files\n",
           m->n, ok, m->n - ok, seconds, out, out, images);
    return ok ? 0 : 1;
}

/* The command, run by cli_run_with_default_out. */
static int bench_main(int argc, char **argv, char *default_out, size_t cap) {
    static bench_args b; /* large list buffers */
    b = (bench_args){.c = common_opts_default(), .models_arg = "small", .precisions_arg = "fp32,amp-bf16,bf16",
                     .batches_arg = "128,512", .gpus_arg = "1", .epochs = 1, .seed = 1, .monitor_interval = 5};
    mp_device_parse("auto", &b.device);
    int rc = parse(argc, argv, &b);
    if (rc) return rc == 1 ? 0 : rc;
    mp_optim_opts oo;
    float lr = 0;
    if ((rc = check_args(&b, &oo, &lr))) return rc;
    if (!b.out) {
        if ((rc = cli_claim_default_out("bench", "bench", default_out, cap))) return rc;
        b.out = default_out;
    } else if ((rc = cli_check_fresh_output_dir("bench", "--out", b.out, "results.jsonl")))
        return rc; /* before the data */
    if (b.threads) omp_set_num_threads(b.threads);

    mp_dataset train = {0}, test = {0};
    if (common_opts_load_data(&b.c, b.seed, &train, &test) != MP_OK) {
        fprintf(stderr, "mixprec bench: %s\n", mp_last_error());
        return 1;
    }
    FILE *jsonl = NULL;
    for (int i = 0; i < b.n_batches && !rc; i++)
        if (b.batches[i] > train.n) {
            fprintf(stderr, "mixprec bench: --batches %d is larger than the training set (%d samples in %s)\n",
                    b.batches[i], train.n, train.source);
            rc = 2;
        }
    for (int i = 0; i < b.n_batches && !rc; i++)
        for (int g = 0; g < b.n_gpus && !rc; g++)
            if ((long long)b.batches[i] * b.gpus[g] > train.n) {
                fprintf(stderr, "mixprec bench: --batches %d x --gpus %d is a global batch larger than the training "
                                "set (%d samples in %s)\n", b.batches[i], b.gpus[g], train.n, train.source);
                rc = 2;
            }
    if (!rc && !(jsonl = open_out(b.out))) rc = 2;
    if (rc) {
        mp_dataset_free(&train);
        mp_dataset_free(&test);
        return rc;
    }
    mp_bench_opts o = {.models = b.models, .n_models = b.n_models, .precisions = b.precisions,
                       .n_precisions = b.n_precisions, .batches = b.batches, .n_batches = b.n_batches,
                       .gpus = b.gpus, .n_gpus = b.n_gpus,
                       .epochs = b.epochs, .steps = b.steps, .data_name = b.c.data, .lr = lr, .optim = oo,
                       .seed = b.seed, .init = b.init, .augment = b.c.augment, .normalize = b.c.normalize,
                       .random_resized_crop = b.c.random_resized_crop, .data_workers = b.c.decode_threads,
                       .reference = b.reference, .device = b.device, .price_per_hour = b.price,
                       .progress = stdout,
                       .train_out = b.verbose ? stdout : NULL, .cell_done = write_record, .cell_done_arg = jsonl};
    printf("mixprec bench: %d cells (%d models x %d precisions x %d batch sizes", b.n_models * b.n_precisions *
           b.n_batches * b.n_gpus, b.n_models, b.n_precisions, b.n_batches);
    if (b.n_gpus > 1) printf(" x %d GPU counts", b.n_gpus);
    printf(") on %s: %d train / %d test samples of %dx%dx%d, %d epoch%s", train.source, train.n, test.n, train.c,
           train.h, train.w, b.epochs, b.epochs == 1 ? "" : "s");
    if (b.steps) printf(" of at most %d steps", b.steps);
    printf(", %s lr %g, %d threads; writing to %s\n", b.c.optimizer, lr, omp_get_max_threads(), b.out);
    double t0 = mp_now_seconds();
    /* the GPU monitor: one CSV for the whole matrix, a window per cell */
    char csv_path[4200];
    snprintf(csv_path, sizeof csv_path, "%s/monitor.csv", b.out);
    FILE *csv = NULL;
    mp_status s = b.monitor_interval > 0 ? mp_output_open(csv_path, NULL, false, &csv) : MP_OK;
    if (s == MP_OK) s = mp_monitor_begin_run(b.monitor_interval, csv, csv_path, stdout, &o.monitor);
    mp_bench_matrix m = {0};
    if (s == MP_OK) s = mp_bench_run(&o, &train, &test, &m);
    mp_status ms = mp_monitor_end_run(o.monitor, s == MP_OK ? stdout : NULL, 0);
    if (s == MP_OK) s = ms;
    /* the first error is the one reported */
    if (csv && s == MP_OK) s = mp_output_close(csv, csv_path, NULL);
    else if (csv) fclose(csv);
    snprintf(csv_path, sizeof csv_path, "%s/results.jsonl", b.out);
    if (s == MP_OK) s = mp_output_close(jsonl, csv_path, NULL);
    else fclose(jsonl);
    if (s == MP_OK) rc = report(&m, b.out, mp_now_seconds() - t0);
    else {
        fprintf(stderr, "mixprec bench: %s\n", mp_last_error());
        rc = 1;
    }
    mp_bench_matrix_free(&m);
    mp_dataset_free(&train);
    mp_dataset_free(&test);
    return rc;
}

int cmd_bench(int argc, char **argv) { return cli_run_with_default_out(bench_main, argc, argv); }
