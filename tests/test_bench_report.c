/* test_bench_report.c — the GPU-count axis of the benchmark matrix without a
 * GPU: cells of 1 and 2 GPUs filled with made-up results, then the derived
 * metrics (time per epoch at the global batch, speed-up vs fp32 within one GPU
 * count, images/s vs 1 GPU), the JSONL record and the Markdown layout (a table
 * per model, metric and GPU count, and the speed-up vs 1 GPU table). */
#define _GNU_SOURCE /* nftw in scratch_dir.h, open_memstream */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/matrix.h"
#include "check.h"
#include "scratch_dir.h"

static const char *const models[] = {"cnn10"};
static const mp_precision precisions[] = {MP_PRECISION_FP32, MP_PRECISION_AMP_BF16};
static const int batches[] = {128, 256};
static const int gpus_2_then_1[] = {2, 1}; /* not sorted: the 1-GPU cells are found by value */
static const int gpus_1[] = {1};

/* images/s: bf16 1.25x fp32, 2 GPUs 1.8x one; the 2-GPU amp-bf16 batch-256 cell ran out of memory. */
static void fill(mp_bench_matrix *m) {
    const mp_bench_opts *o = m->o;
    int one = mp_bench_one_gpu_index(o);
    int order[2] = {one, 1 - one};
    for (int k = 0; k < o->n_gpus; k++) {
        int g = o->n_gpus == 1 ? 0 : order[k];
        for (int b = 0; b < o->n_batches; b++)
            for (int p = 0; p < o->n_precisions; p++) { /* fp32 first, as mp_bench_run */
                mp_bench_cell *c = mp_bench_cell_at(m, 0, g, p, b);
                *c = (mp_bench_cell){.model = o->models[0], .precision = o->precisions[p], .batch = o->batches[b],
                                     .gpus = o->gpus[g], .status = MP_CELL_OK};
                c->res.images_per_s = 1000 * (p ? 1.25 : 1) * (o->gpus[g] == 2 ? 1.8 : 1);
                c->res.test_acc = p ? 0.88 : 0.89;
                if (o->gpus[g] == 2 && p == 1 && b == 1) c->status = MP_CELL_OOM;
                mp_bench_derive(m, 0, g, p, b);
            }
    }
}

static mp_bench_opts matrix_opts(const int *gpus, int n_gpus, mp_device device) {
    return (mp_bench_opts){.models = models, .n_models = 1, .precisions = precisions, .n_precisions = 2,
                           .batches = batches, .n_batches = 2, .gpus = gpus, .n_gpus = n_gpus, .epochs = 1,
                           .data_name = "synthetic", .device = device};
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "r");
    static char buf[1 << 16];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = '\0';
    return buf;
}

static void test_two_gpu_counts(const char *dir) {
    mp_bench_opts o = matrix_opts(gpus_2_then_1, 2, (mp_device){MP_DEVICE_CUDA, 0});
    mp_bench_cell cells[8];
    mp_bench_matrix m = {.o = &o, .cells = cells, .n = 8, .train_samples = 1024, .test_samples = 100};
    CHECK(mp_bench_one_gpu_index(&o) == 1, "the 1-GPU index is %d", mp_bench_one_gpu_index(&o));
    fill(&m);
    const mp_bench_cell *one = mp_bench_cell_at(&m, 0, 1, 0, 0), *two = mp_bench_cell_at(&m, 0, 0, 0, 0);
    const mp_bench_cell *two_bf16 = mp_bench_cell_at(&m, 0, 0, 1, 0), *oom = mp_bench_cell_at(&m, 0, 0, 1, 1);
    CHECK(fabs(one->time_per_epoch_s - 1024.0 / 1000) < 1e-9, "1 GPU: %g s/epoch", one->time_per_epoch_s);
    CHECK(fabs(two->time_per_epoch_s - 1024.0 / 1800) < 1e-9, "2 GPUs: %g s/epoch", two->time_per_epoch_s);
    CHECK(one->vs_1gpu == 1 && fabs(two->vs_1gpu - 1.8) < 1e-9, "vs 1 GPU: %g, %g", one->vs_1gpu, two->vs_1gpu);
    CHECK(fabs(two_bf16->speedup - 0.25) < 1e-9, "2-GPU bf16 speed-up vs 2-GPU fp32: %g", two_bf16->speedup);
    CHECK(fabs(two_bf16->vs_1gpu - 1.8) < 1e-9, "2-GPU bf16 vs 1-GPU bf16: %g", two_bf16->vs_1gpu);
    CHECK(isnan(oom->vs_1gpu) && isnan(oom->speedup), "an OOM cell has no ratios");

    char *rec = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&rec, &len);
    CHECK(mp_bench_write_record(f, &m, two) == MP_OK, "record: %s", mp_last_error());
    fclose(f);
    CHECK(strstr(rec, "\"batch\":128,\"gpus\":2,"), "record: %s", rec);
    CHECK(strstr(rec, "\"images_per_s_vs_1gpu\":1.8,"), "record: %s", rec);
    free(rec);

    const char *md = scratch_path(dir, "two.md");
    CHECK(mp_bench_write_markdown(md, &m) == MP_OK, "%s", mp_last_error());
    const char *t = read_text(md);
    static const char *const want[] = {
        "Batch sizes are per GPU",
        "### cnn10, 2 GPUs: time per epoch (s)\n\n| batch per GPU | 128 | 256 |\n|---|---|---|\n"
        "| fp32 | 0.57 | 0.57 |\n| amp-bf16 | 0.46 | OOM |\n",
        "### cnn10, 2 GPUs: speed-up vs fp32 (T_fp32 / T - 1)\n\n| batch per GPU | 128 | 256 |\n|---|---|---|\n"
        "| amp-bf16 | 25.0% | OOM |\n",
        "### cnn10, 1 GPU: time per epoch (s)\n\n| batch | 128 | 256 |\n|---|---|---|\n| fp32 | 1.02 | 1.02 |\n",
        "### cnn10: speed-up vs 1 GPU (images/s ratio at the same precision and batch per GPU)\n\n"
        "| batch per GPU | 128 | 256 |\n|---|---|---|\n| fp32, 2 GPUs | 1.80x | 1.80x |\n"
        "| amp-bf16, 2 GPUs | 1.80x | OOM |\n\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) CHECK(strstr(t, want[i]), "tables.md lacks:\n%s", want[i]);
    CHECK(strstr(t, "### cnn10, 2 GPUs: time") < strstr(t, "### cnn10, 1 GPU: time"), "tables not in --gpus order");
}

/* A CPU matrix (one count, 1): titles without a GPU count, no vs-1-GPU table. */
static void test_cpu_layout(const char *dir) {
    mp_bench_opts o = matrix_opts(gpus_1, 1, (mp_device){MP_DEVICE_CPU, 0});
    mp_bench_cell cells[4];
    mp_bench_matrix m = {.o = &o, .cells = cells, .n = 4, .train_samples = 1024, .test_samples = 100};
    fill(&m);
    const char *md = scratch_path(dir, "cpu.md");
    CHECK(mp_bench_write_markdown(md, &m) == MP_OK, "%s", mp_last_error());
    const char *t = read_text(md);
    CHECK(strstr(t, "### cnn10: time per epoch (s)\n\n| batch | 128 | 256 |\n"), "CPU titles: %s", t);
    CHECK(!strstr(t, "GPU"), "a CPU matrix's tables mention GPUs: %s", t);
}

int main(void) {
    char dir[4096];
    scratch_dir_create(dir, sizeof dir, "test_bench_report");
    test_two_gpu_counts(dir);
    test_cpu_layout(dir);
    scratch_dir_remove(dir);
    return test_summary("test_bench_report");
}
