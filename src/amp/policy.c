/* policy.c — the precision pass (see policy.h).
 *
 * amp-*: allow-list ops (convolutions, linear) compute and store in the low
 *        dtype; deny-list ops (losses; BatchNorm statistics) compute in fp32;
 *        everything else (pointwise ops such as add and mul, pooling, data
 *        movement) follows its widest input. Inputs stay fp32.
 * o2-*:  inputs and activations low; BatchNorm computes in fp32.
 * fp16/bf16: like o2 without master weights (BatchNorm fp32 unless bn_low).
 * Always: losses fp32, and the logits feeding a loss are stored in fp32. */
#include "amp/policy.h"

#include <stdlib.h>
#include <string.h>

static const char *names[MP_PRECISION_COUNT] = {"fp32",    "tf32",    "amp-fp16", "amp-bf16",
                                                 "o2-fp16", "o2-bf16", "fp16",     "bf16"};

mp_status mp_precision_parse(const char *name, mp_precision *out) {
    if (!out) return mp_error(MP_ERR_INVALID_ARG, "precision '%s': null output", name ? name : "(null)");
    for (int i = 0; name && i < MP_PRECISION_COUNT; i++)
        if (!strcmp(name, names[i])) {
            *out = (mp_precision)i;
            return MP_OK;
        }
    return mp_error(MP_ERR_INVALID_ARG, "--precision '%s': unknown (known: %s)", name ? name : "", mp_precision_list());
}

const char *mp_precision_name(mp_precision p) { return (unsigned)p < MP_PRECISION_COUNT ? names[p] : "?"; }

const char *mp_precision_list(void) { return "fp32, tf32, amp-fp16, amp-bf16, o2-fp16, o2-bf16, fp16, bf16"; }

static mp_dtype low_dtype_of(mp_precision p) {
    switch (p) {
    case MP_PRECISION_AMP_FP16:
    case MP_PRECISION_O2_FP16:
    case MP_PRECISION_FP16: return MP_DTYPE_F16;
    case MP_PRECISION_AMP_BF16:
    case MP_PRECISION_O2_BF16:
    case MP_PRECISION_BF16: return MP_DTYPE_BF16;
    case MP_PRECISION_FP32:
    case MP_PRECISION_TF32:
    case MP_PRECISION_COUNT: return MP_DTYPE_F32;
    }
    return MP_DTYPE_F32;
}

static bool has_master(mp_precision p) { return p != MP_PRECISION_FP16 && p != MP_PRECISION_BF16; }

static bool is_allow_list(mp_op_kind k) {
    return k == MP_OP_CONV2D || k == MP_OP_CONV_TRANSPOSE2D || k == MP_OP_LINEAR;
}

static bool is_loss(mp_op_kind k) { return k == MP_OP_SOFTMAX_CE || k == MP_OP_BCE_LOGITS; }

/* The wider of two float dtypes (f32 > bf16/f16; f16 with bf16 -> f32). */
static mp_dtype widest(mp_dtype a, mp_dtype b) {
    if (a == b) return a;
    if (a == MP_DTYPE_I32) return b;
    if (b == MP_DTYPE_I32) return a;
    return MP_DTYPE_F32;
}

static mp_status parse_dtype(const char *s, size_t len, mp_dtype *out) {
    static const struct { const char *name; mp_dtype dt; } table[] = {
        {"fp32", MP_DTYPE_F32}, {"f32", MP_DTYPE_F32}, {"fp16", MP_DTYPE_F16},
        {"f16", MP_DTYPE_F16},  {"bf16", MP_DTYPE_BF16}};
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strlen(table[i].name) == len && !strncmp(s, table[i].name, len)) {
            *out = table[i].dt;
            return MP_OK;
        }
    return mp_error(MP_ERR_INVALID_ARG, "--precision-override: dtype '%.*s' unknown (fp32, fp16, bf16)", (int)len, s);
}

/* Parse "LAYER=DTYPE,..." into per-node dtypes (MP_DTYPE_COUNT = none);
 * NULL or "": none. Every entry names one layer once, and none is empty (a
 * comma too many, leading, doubled or trailing). */
static mp_status parse_overrides(const mp_graph *g, const char *spec, mp_dtype *forced) {
    for (int i = 0; i < g->n_nodes; i++) forced[i] = MP_DTYPE_COUNT;
    const char *p = spec && *spec ? spec : NULL;
    while (p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == 0)
            return mp_error(MP_ERR_INVALID_ARG, "--precision-override '%s': an empty entry (a comma too many); "
                            "expected LAYER=DTYPE,...", spec);
        const char *eq = memchr(p, '=', len);
        if (!eq || eq == p)
            return mp_error(MP_ERR_INVALID_ARG, "--precision-override '%.*s': expected LAYER=DTYPE", (int)len, p);
        char name[MP_NAME_MAX];
        size_t nlen = (size_t)(eq - p);
        if (nlen >= sizeof name)
            return mp_error(MP_ERR_INVALID_ARG, "--precision-override: layer name '%.*s' too long", (int)nlen, p);
        memcpy(name, p, nlen);
        name[nlen] = '\0';
        mp_dtype dt = MP_DTYPE_F32;
        MP_TRY(parse_dtype(eq + 1, len - nlen - 1, &dt));
        mp_node n = mp_graph_find(g, name);
        if (n < 0) return mp_error(MP_ERR_INVALID_ARG, "--precision-override: no layer named '%s' in the model", name);
        mp_op_kind k = g->nodes[n].desc.kind;
        if (k == MP_OP_LABELS || k == MP_OP_TARGETS || is_loss(k))
            return mp_error(MP_ERR_INVALID_ARG, "--precision-override: '%s' is a %s and always fp32/int32", name,
                            mp_op_lookup(k)->name);
        if (forced[n] != MP_DTYPE_COUNT)
            return mp_error(MP_ERR_INVALID_ARG, "--precision-override: layer '%s' given twice", name);
        forced[n] = dt;
        p = end ? end + 1 : NULL;
    }
    return MP_OK;
}

/* What every parameter is trained in, from its node's dtypes and whether the
 * policy keeps fp32 masters: without masters (fp16, bf16) a trainable
 * parameter of a node computing in f16/bf16 is kept at a value of that dtype
 * (round_dtype), and when that node is its only user its cast is the weight
 * and no f32 array exists on a GPU (low_only), as a PyTorch `.half()`
 * model's. */
static void record_params(mp_graph *g) {
    for (int k = 0; k < g->n_params; k++) {
        mp_gparam *p = &g->params[k];
        const mp_dtype dt = g->nodes[p->node].compute_dtype;
        const bool low = dt == MP_DTYPE_F16 || dt == MP_DTYPE_BF16;
        p->round_dtype = !g->policy.master_weights && p->spec.trainable && low ? dt : MP_DTYPE_F32;
        p->low_only = p->round_dtype != MP_DTYPE_F32 && mp_graph_param_users(g, k) == 1 ? dt : MP_DTYPE_F32;
    }
}

mp_status mp_graph_apply_policy(mp_graph *g, mp_policy_opts o) {
    MP_TRY(mp_graph_check_built(g, "precision policy"));
    if ((unsigned)o.precision >= MP_PRECISION_COUNT)
        return mp_error(MP_ERR_INVALID_ARG, "precision policy: unknown policy %d", (int)o.precision);
    if (o.bn_low && has_master(o.precision))
        return mp_error(MP_ERR_INVALID_ARG, "precision policy: bn_low (--bn-low) applies to the fp16 and bf16 policies "
                        "only (got %s)", mp_precision_name(o.precision));
    if (g->live_plans > 0)
        return mp_error(MP_ERR_INVALID_ARG, "precision policy: %d plan(s) of this graph are alive and hold its "
                        "dtypes; destroy the plans and trainers first", g->live_plans);
    const mp_dtype low = low_dtype_of(o.precision);
    const bool amp = o.precision == MP_PRECISION_AMP_FP16 || o.precision == MP_PRECISION_AMP_BF16;
    const bool pure = !has_master(o.precision);
    mp_dtype *forced = malloc((size_t)(g->n_nodes ? g->n_nodes : 1) * sizeof *forced);
    bool *logits = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *logits);
    if (!forced || !logits) {
        free(forced);
        free(logits);
        return mp_error(MP_ERR_NOMEM, "precision policy: out of memory");
    }
    mp_status s = parse_overrides(g, o.overrides, forced);
    for (int i = 0; i < g->n_nodes; i++)
        if (is_loss(g->nodes[i].desc.kind)) logits[g->nodes[i].in[0]] = true;
    /* One pass in topological order, so "follows its widest input" sees the
     * final dtypes of its producers (overrides and fp32 logits included). */
    for (int i = 0; s == MP_OK && i < g->n_nodes; i++) {
        mp_gnode *nd = &g->nodes[i];
        mp_op_kind k = nd->desc.kind;
        mp_dtype in = MP_DTYPE_I32; /* widest input so far */
        for (int j = 0; j < nd->n_in; j++) in = widest(in, g->nodes[nd->in[j]].storage_dtype);
        if (k == MP_OP_LABELS) {
            nd->compute_dtype = nd->storage_dtype = MP_DTYPE_I32;
        } else if (k == MP_OP_INPUT) {
            nd->compute_dtype = nd->storage_dtype = amp ? MP_DTYPE_F32 : low;
        } else if (k == MP_OP_TARGETS || is_loss(k)) {
            nd->compute_dtype = nd->storage_dtype = MP_DTYPE_F32;
        } else if (k == MP_OP_BATCHNORM2D) {
            nd->compute_dtype = o.bn_low ? low : MP_DTYPE_F32;
            nd->storage_dtype = in;
        } else if (is_allow_list(k)) {
            nd->compute_dtype = nd->storage_dtype = low;
        } else {
            nd->compute_dtype = nd->storage_dtype = in;
        }
        if (forced[i] != MP_DTYPE_COUNT) nd->compute_dtype = nd->storage_dtype = forced[i];
        if (logits[i]) nd->storage_dtype = MP_DTYPE_F32; /* logits are always stored in fp32 */
    }
    free(forced);
    free(logits);
    if (s != MP_OK) return s;
    const bool fp16 = low == MP_DTYPE_F16;
    g->policy = (mp_policy_info){.precision = o.precision, .low_dtype = low, .master_weights = !pure,
                                 .loss_scaling = fp16 && !pure, .tf32 = o.precision == MP_PRECISION_TF32,
                                 .allreduce_dtype = low, .bn_low = o.bn_low};
    for (int i = 0; i < g->n_nodes; i++) g->nodes[i].tf32 = g->policy.tf32 && g->nodes[i].compute_dtype == MP_DTYPE_F32;
    record_params(g);
    return MP_OK;
}

mp_status mp_graph_policy(const mp_graph *g, mp_policy_info *out) {
    if (!g || !out) return mp_error(MP_ERR_INVALID_ARG, "policy: null graph or output");
    *out = g->policy;
    return MP_OK;
}

mp_status mp_graph_node_precision(const mp_graph *g, mp_node n, mp_node_precision *out) {
    if (!g || !out) return mp_error(MP_ERR_INVALID_ARG, "node precision: null %s", !g ? "graph" : "output");
    if (n < 0 || n >= g->n_nodes) return mp_error(MP_ERR_INVALID_ARG, "node precision: node %d is not in the graph", n);
    const mp_gnode *nd = &g->nodes[n];
    *out = (mp_node_precision){.compute = nd->compute_dtype, .storage = nd->storage_dtype, .tf32 = nd->tf32};
    return MP_OK;
}

void mp_policy_node_to_f32(mp_graph *g, mp_node n) {
    g->nodes[n].compute_dtype = g->nodes[n].storage_dtype = MP_DTYPE_F32;
    g->nodes[n].tf32 = g->policy.tf32;
    record_params(g);
}

const char *mp_graph_policy_name(const mp_graph *g) { return mp_precision_name(g->policy.precision); }

void mp_graph_print_precision(const mp_graph *g, FILE *out) {
    if (!g || !out) return;
    fprintf(out, "%-20s %-22s %-8s %-8s\n", "node", "op", "compute", "storage");
    for (int i = 0; i < g->n_nodes; i++) {
        const mp_gnode *nd = &g->nodes[i];
        fprintf(out, "%-20s %-22s %-8s %-8s\n", nd->name, mp_op_lookup(nd->desc.kind)->name,
                mp_dtype_name(nd->compute_dtype), mp_dtype_name(nd->storage_dtype));
    }
}
