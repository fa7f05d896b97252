/* evaluate.c — inference on a graph (mixprec/train.h): accuracy and mean
 * cross-entropy over a dataset, and logits of a batch of images, on an
 * inference plan (running BN statistics, no dropout) on any device. The
 * images must have the input node's shape and the labels the logits' class
 * range: checked before any batch is read. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp/scaler.h"
#include "core/host_mem.h"
#include "data/dataset.h"
#include "data/normalize.h"
#include "graph/graph.h"

#define DEFAULT_BATCH 256

/* The input must be an image input and the logits (N, K) of some K. */
static mp_status check_nodes(const mp_graph *g, const mp_eval_opts *o, int *classes) {
    if (!g || !o) return mp_error(MP_ERR_INVALID_ARG, "evaluate: null graph or options");
    if (o->input < 0 || o->input >= g->n_nodes || g->nodes[o->input].desc.kind != MP_OP_INPUT)
        return mp_error(MP_ERR_INVALID_ARG, "evaluate: opts.input (node %d) is not an image input", o->input);
    if (o->logits < 0 || o->logits >= g->n_nodes || g->nodes[o->logits].sample_shape.ndim != 2)
        return mp_error(MP_ERR_INVALID_ARG, "evaluate: opts.logits (node %d) is not a (batch, classes) node", o->logits);
    *classes = (int)g->nodes[o->logits].sample_shape.dims[1];
    return MP_OK;
}

static mp_status make_plan(mp_graph *g, const mp_eval_opts *o, int batch, mp_plan **plan) {
    if (!g->params_initialized)
        return mp_error(MP_ERR_INVALID_ARG, "evaluate: the graph's parameters were never initialized or loaded");
    MP_TRY(mp_graph_check_param_values(g, "evaluate")); /* a NaN weight or running statistic: NaN logits */
    mp_graph_mark_output(g, o->logits); /* readable after the forward */
    mp_plan_opts po = {.batch = batch, .training = false, .loss = o->logits, .reference = o->reference,
                       .device = o->device};
    return mp_plan_create(g, po, plan);
}

/* Label and target inputs (a loss reads them in the forward too) get zeros,
 * valid for any loss; `zeros` holds batch * the widest target. */
static mp_status fill_other_inputs(mp_plan *plan, const mp_graph *g, const float *zeros, int batch) {
    for (int i = 0; i < g->n_nodes; i++) {
        const mp_op_kind k = g->nodes[i].desc.kind;
        if (k == MP_OP_LABELS) MP_TRY(mp_plan_set_labels(plan, i, (const int32_t *)zeros, (size_t)batch));
        else if (k == MP_OP_TARGETS) MP_TRY(mp_plan_set_input(plan, i, zeros, mp_plan_numel(plan, i)));
    }
    return MP_OK;
}

/* Logits of n samples that came out NaN/inf from finite images (an
 * overflowing forward, or a normalization by a tiny std): an error naming
 * the first such sample (first + its row; of `source`, or mp_predict's
 * image when NULL) and logit, never an accuracy or logits made of them. */
static mp_status check_logits(const mp_graph *g, const mp_eval_opts *o, const float *logits, int n, int classes,
                              const char *source, int64_t first) {
    const int64_t bad = mp_first_nonfinite(logits, (int64_t)n * classes);
    if (bad < 0) return MP_OK;
    return mp_error(MP_ERR_NONFINITE, "%s: %s %lld%s%s has logit %lld of '%s' = %g from finite pixels: the forward "
                    "overflowed (weights too large for the model or its precision)%s", source ? "evaluate" : "predict",
                    source ? "sample" : "image", (long long)(first + bad / classes), source ? " of " : "",
                    source ? source : "", (long long)(bad % classes), g->nodes[o->logits].name, (double)logits[bad],
                    o->std ? ", or the normalization's std is too small" : "");
}

static size_t widest_other_input(const mp_graph *g, int batch) {
    size_t n = (size_t)batch;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].desc.kind == MP_OP_TARGETS) {
            const size_t m = (size_t)batch * (size_t)mp_shape_numel(&g->nodes[i].sample_shape);
            if (m > n) n = m;
        }
    return n;
}

mp_status mp_evaluate(mp_graph *g, const mp_dataset *d, const mp_eval_opts *o, mp_eval_result *out) {
    int classes = 0;
    MP_TRY(check_nodes(g, o, &classes));
    if (!d || !out) return mp_error(MP_ERR_INVALID_ARG, "evaluate: null dataset or result");
    const mp_shape in = g->nodes[o->input].sample_shape;
    if (in.ndim != 4 || in.dims[1] != d->c || in.dims[2] != d->h || in.dims[3] != d->w)
        return mp_error(MP_ERR_SHAPE, "evaluate: %s holds %dx%dx%d images, the model's input '%s' takes %lldx%lldx%lld",
                        d->source, d->c, d->h, d->w, g->nodes[o->input].name, (long long)in.dims[1],
                        (long long)in.dims[2], (long long)in.dims[3]);
    if (d->classes > classes)
        return mp_error(MP_ERR_SHAPE, "evaluate: %s has labels up to %d, the model's logits '%s' have %d classes",
                        d->source, d->classes - 1, g->nodes[o->logits].name, classes);
    if (d->n < 1) return mp_error(MP_ERR_INVALID_ARG, "evaluate: %s has no samples", d->source);
    if (o->batch < 0) return mp_error(MP_ERR_INVALID_ARG, "evaluate: batch %d (0: the default)", o->batch);
    int batch = o->batch > 0 ? o->batch : DEFAULT_BATCH;
    if (batch > d->n) batch = d->n;
    mp_plan *plan = NULL;
    mp_loader *ld = NULL;
    float *logits = malloc((size_t)batch * (size_t)classes * sizeof *logits);
    float *zeros = calloc(widest_other_input(g, batch), sizeof *zeros);
    mp_status s = logits && zeros ? MP_OK : mp_error(MP_ERR_NOMEM, "evaluate: out of memory");
    if (s == MP_OK) s = make_plan(g, o, batch, &plan);
    if (s == MP_OK)
        s = mp_loader_create(d, (mp_loader_opts){.batch = batch, .mean = o->mean, .std = o->std}, &ld);
    if (s == MP_OK) s = mp_loader_start_epoch(ld, 0);
    int64_t correct = 0, seen = 0;
    double loss_sum = 0;
    while (s == MP_OK) {
        const float *x;
        const int32_t *y;
        int n = 0;
        s = mp_loader_next(ld, &x, &y, &n);
        if (s != MP_OK || n == 0) break;
        s = mp_plan_set_input(plan, o->input, x, mp_plan_numel(plan, o->input));
        if (s == MP_OK) s = fill_other_inputs(plan, g, zeros, batch);
        if (s == MP_OK) s = mp_plan_forward(plan);
        if (s == MP_OK) s = mp_plan_read(plan, o->logits, logits, (size_t)batch * (size_t)classes);
        if (s == MP_OK) s = check_logits(g, o, logits, n, classes, d->source, seen);
        if (s != MP_OK) break;
        for (int i = 0; i < n; i++) {
            const float *row = logits + (size_t)i * (size_t)classes;
            correct += mp_argmax(row, classes) == y[i];
            double mx = row[0], se = 0;
            for (int k = 1; k < classes; k++) mx = fmax(mx, row[k]);
            for (int k = 0; k < classes; k++) se += exp(row[k] - mx);
            loss_sum += mx + log(se) - row[y[i]];
        }
        seen += n;
    }
    const int bad = ld ? mp_loader_bad_images(ld) : 0;
    if (s == MP_OK && seen == 0)
        s = mp_error(MP_ERR_FORMAT, "evaluate: none of the %d samples of %s decoded (%d left out as undecodable)",
                     d->n, d->source, bad);
    if (s == MP_OK)
        *out = (mp_eval_result){.accuracy = (double)correct / (double)seen, .loss = loss_sum / (double)seen,
                                .samples = seen, .bad_images = bad};
    free(logits);
    free(zeros);
    mp_loader_destroy(ld);
    mp_plan_destroy(plan);
    return s;
}

mp_status mp_predict(mp_graph *g, const mp_eval_opts *o, const float *images, int n, float *logits) {
    int classes = 0;
    MP_TRY(check_nodes(g, o, &classes));
    if (n < 1 || !images || !logits)
        return mp_error(MP_ERR_INVALID_ARG, "predict: %d images (at least 1, with image and logit arrays)", n);
    const mp_shape in = g->nodes[o->input].sample_shape;
    const int64_t per = mp_shape_numel(&in);
    const int channels = in.ndim == 4 ? (int)in.dims[1] : 1;
    MP_TRY(mp_normalization_check(o->mean, o->std, channels, "predict"));
    if (o->batch < 0) return mp_error(MP_ERR_INVALID_ARG, "predict: batch %d (0: the default)", o->batch);
    const int64_t bad = mp_first_nonfinite(images, (int64_t)n * per);
    if (bad >= 0)
        return mp_error(MP_ERR_NONFINITE, "predict: image %lld has a non-finite value (%g at element %lld)",
                        (long long)(bad / per), (double)images[bad], (long long)(bad % per));
    int batch = o->batch > 0 ? o->batch : DEFAULT_BATCH;
    if (batch > n) batch = n;
    MP_TRY(mp_host_mem_check((size_t)batch * (size_t)per * sizeof(float), "try a smaller batch",
                             "predict's batch of %d images (%lld values each)", batch, (long long)per));
    mp_plan *plan = NULL;
    float *x = calloc((size_t)batch * (size_t)per, sizeof *x), *out = malloc((size_t)batch * classes * sizeof *out);
    float *zeros = calloc(widest_other_input(g, batch), sizeof *zeros);
    mp_status s = x && out && zeros ? MP_OK : mp_error(MP_ERR_NOMEM, "predict: out of memory");
    if (s == MP_OK) s = make_plan(g, o, batch, &plan);
    for (int at = 0; s == MP_OK && at < n; at += batch) {
        const int m = n - at < batch ? n - at : batch;
        memcpy(x, images + (size_t)at * (size_t)per, (size_t)m * (size_t)per * sizeof *x);
        mp_normalize_images(x, m, channels, per / channels, o->mean, o->std);
        if (m < batch) memset(x + (size_t)m * (size_t)per, 0, (size_t)(batch - m) * (size_t)per * sizeof *x);
        s = mp_plan_set_input(plan, o->input, x, (size_t)batch * (size_t)per);
        if (s == MP_OK) s = fill_other_inputs(plan, g, zeros, batch);
        if (s == MP_OK) s = mp_plan_forward(plan);
        if (s == MP_OK) s = mp_plan_read(plan, o->logits, out, (size_t)batch * (size_t)classes);
        if (s == MP_OK) s = check_logits(g, o, out, m, classes, NULL, at);
        if (s == MP_OK) memcpy(logits + (size_t)at * classes, out, (size_t)m * classes * sizeof *out);
    }
    free(x);
    free(out);
    free(zeros);
    mp_plan_destroy(plan);
    return s;
}
