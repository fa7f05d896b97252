/* exec_stage.c — staged execution of low-precision nodes (see exec_stage.h).
 * Inputs are read into f32 (and rounded to the compute dtype when that is
 * narrower than their storage), weights come from their low-precision cast,
 * the f32 kernel accumulates in f32, and results are rounded on the way to
 * their storage dtype. Gradients follow the same path backwards (parameter
 * gradients unrounded under opts.f32_weight_grads). */
#include "graph/exec_stage.h"

#include <string.h>

#include "core/dtype_convert.h"

#define CHUNK 4096

static bool is_low(mp_dtype d) { return d == MP_DTYPE_F16 || d == MP_DTYPE_BF16; }

void mp_tensor_add(mp_dtype dt, void *dst, const void *src, int64_t n) {
    if (dt == MP_DTYPE_F64) {
        double *d = dst;
        const double *s = src;
#pragma omp parallel for simd schedule(static) if (n > 32768)
        for (int64_t i = 0; i < n; i++) d[i] += s[i];
    } else {
        MP_ASSERT(dt == MP_DTYPE_F32);
        float *d = dst;
        const float *s = src;
#pragma omp parallel for simd schedule(static) if (n > 32768)
        for (int64_t i = 0; i < n; i++) d[i] += s[i];
    }
}

/* dst (dtype) = or += src, with src first rounded to round_to. */
static void commit(void *dst, mp_dtype dtype, float *src, int64_t n, bool accumulate, mp_dtype round_to) {
    mp_round_f32(src, n, round_to);
    if (!accumulate) {
        mp_store_f32_known(dst, dtype, src, n);
        return;
    }
    float tmp[CHUNK];
    for (int64_t i = 0; i < n; i += CHUNK) {
        int64_t m = n - i < CHUNK ? n - i : CHUNK;
        size_t esz = mp_dtype_size(dtype);
        mp_load_f32_known(tmp, (char *)dst + (size_t)i * esz, dtype, m);
        for (int64_t j = 0; j < m; j++) tmp[j] += src[i + j];
        mp_store_f32_known((char *)dst + (size_t)i * esz, dtype, tmp, m);
    }
}

static size_t f32_bytes(const mp_shape *s) { return MP_ALIGN64((size_t)mp_shape_numel(s) * sizeof(float)); }

static float *take(char **cur, const mp_shape *s) {
    float *p = (float *)*cur;
    *cur += f32_bytes(s);
    return p;
}

/* A native node stages only the bf16 cast of an f32 input (native_call)
 * and, in backward, the gradients it must add to a value already there
 * (native_backward): no f32 copies of its activations. */
static size_t native_stage_bytes(const mp_pnode *pn) {
    size_t b = 0;
    for (int k = 0; k < pn->info.n_in; k++) {
        const size_t n = (size_t)mp_shape_numel(&pn->info.in[k]);
        b += MP_ALIGN64(n * (pn->info.in_dtype[k] == MP_DTYPE_F32 ? sizeof(uint16_t) : mp_dtype_size(pn->info.in_dtype[k])));
    }
    for (int k = 0; k < pn->info.n_params; k++) b += f32_bytes(&pn->info.params[k].shape);
    return b;
}

size_t mp_stage_bytes(const mp_plan *p, int i) {
    const mp_pnode *pn = &p->nodes[i];
    if (pn->native) return native_stage_bytes(pn);
    size_t in = 0, par = 0;
    for (int k = 0; k < pn->info.n_in; k++) in += f32_bytes(&pn->info.in[k]);
    for (int k = 0; k < pn->info.n_params; k++) par += f32_bytes(&pn->info.params[k].shape);
    /* inputs, params, out (+ d_in, d_param, d_out in backward) */
    return 2 * in + 2 * par + 2 * f32_bytes(&pn->info.out);
}

void mp_stage_refresh_weights(mp_plan *p) {
    for (int i = 0; i < p->n; i++) {
        const mp_gnode *nd = &p->g->nodes[i];
        for (int k = 0; k < nd->n_params; k++) {
            void *low = p->nodes[i].low_param[k];
            if (!low) continue;
            const mp_gparam *gp = &p->g->params[nd->first_param + k];
            mp_store_f32_known(low, nd->compute_dtype, gp->data, mp_shape_numel(&gp->spec.shape));
        }
    }
}

/* Point the call's inputs and trainable params at f32 staged copies. */
static void stage_operands(mp_plan *p, int i, mp_op_call *c, char **cur) {
    const mp_gnode *nd = &p->g->nodes[i];
    const mp_pnode *pn = &p->nodes[i];
    const mp_dtype comp = nd->compute_dtype;
    const bool low = is_low(comp);
    for (int k = 0; k < c->n_in; k++) {
        const mp_tensor *in = &pn->call.in[k];
        if (in->dtype == MP_DTYPE_I32 || (in->dtype == MP_DTYPE_F32 && !low)) continue;
        float *f = take(cur, &in->shape);
        mp_load_f32_known(f, in->data, in->dtype, mp_tensor_numel(in));
        if (low && in->dtype != comp) mp_round_f32(f, mp_tensor_numel(in), comp);
        c->in[k] = (mp_tensor){MP_DTYPE_F32, in->shape, f};
    }
    for (int k = 0; k < nd->n_params; k++) {
        if (!pn->low_param[k]) continue;
        float *f = take(cur, &c->param[k].shape);
        mp_load_f32_known(f, pn->low_param[k], comp, mp_tensor_numel(&c->param[k]));
        c->param[k].data = f;
    }
}

/* Native bf16 nodes: the call's tensors are already bf16 (inputs, output,
 * gradients in the arena); weights come from their bf16 casts, biases, BN
 * parameters and all parameter gradients stay fp32. An f32 network input
 * (the first convolution under amp-bf16) is cast to bf16 in the stage
 * buffer, where *cur points; it takes no gradient. */
static mp_op_call native_call(const mp_pnode *pn, char **cur) {
    mp_op_call c = pn->call;
    for (int k = 0; k < c.n_in; k++)
        if (c.in[k].dtype == MP_DTYPE_F32) {
            int64_t n = mp_tensor_numel(&c.in[k]);
            void *low = *cur;
            *cur += MP_ALIGN64((size_t)n * sizeof(uint16_t));
            mp_store_f32_known(low, MP_DTYPE_BF16, c.in[k].data, n);
            c.in[k] = (mp_tensor){MP_DTYPE_BF16, c.in[k].shape, low};
            c.d_in[k].data = NULL;
        }
    if (pn->low_param[0]) c.param[0] = (mp_tensor){MP_DTYPE_BF16, c.param[0].shape, pn->low_param[0]};
    return c;
}

/* dst += src, both stored in dtype (through f32). */
static void accumulate_stored(void *dst, const void *src, mp_dtype dtype, int64_t n) {
    float a[CHUNK], b[CHUNK];
    size_t esz = mp_dtype_size(dtype);
    for (int64_t i = 0; i < n; i += CHUNK) {
        int64_t m = n - i < CHUNK ? n - i : CHUNK;
        mp_load_f32_known(a, (char *)dst + (size_t)i * esz, dtype, m);
        mp_load_f32_known(b, (const char *)src + (size_t)i * esz, dtype, m);
        for (int64_t j = 0; j < m; j++) a[j] += b[j];
        mp_store_f32_known((char *)dst + (size_t)i * esz, dtype, a, m);
    }
}

static mp_status native_backward(mp_plan *p, int i, const bool *taken, const bool *fresh) {
    const mp_gnode *nd = &p->g->nodes[i];
    const mp_pnode *pn = &p->nodes[i];
    char *cur = p->stage;
    mp_op_call c = native_call(pn, &cur);
    for (int k = 0; k < c.n_in; k++)
        if (c.d_in[k].data && taken[k]) { /* a second consumer: add afterwards */
            c.d_in[k].data = cur;
            cur += MP_ALIGN64((size_t)mp_tensor_numel(&c.d_in[k]) * mp_dtype_size(c.d_in[k].dtype));
        }
    for (int k = 0; k < nd->n_params; k++)
        if (c.d_param[k].data && !fresh[k]) c.d_param[k].data = take(&cur, &c.d_param[k].shape);
    MP_TRY(mp_op_lookup(nd->desc.kind)->backward(&c));
    for (int k = 0; k < c.n_in; k++)
        if (c.d_in[k].data && taken[k])
            accumulate_stored(pn->call.d_in[k].data, c.d_in[k].data, c.d_in[k].dtype, mp_tensor_numel(&c.d_in[k]));
    for (int k = 0; k < nd->n_params; k++)
        if (c.d_param[k].data && !fresh[k])
            mp_tensor_add(MP_DTYPE_F32, pn->call.d_param[k].data, c.d_param[k].data, mp_tensor_numel(&c.d_param[k]));
    return MP_OK;
}

mp_status mp_stage_forward(mp_plan *p, int i) {
    const mp_gnode *nd = &p->g->nodes[i];
    const mp_pnode *pn = &p->nodes[i];
    if (pn->native) {
        char *cur = p->stage;
        mp_op_call c = native_call(pn, &cur);
        return mp_op_lookup(nd->desc.kind)->forward(&c);
    }
    mp_op_call c = pn->call;
    char *cur = p->stage;
    stage_operands(p, i, &c, &cur);
    float *out = NULL;
    if (nd->storage_dtype != MP_DTYPE_F32) {
        out = take(&cur, &c.out.shape);
        c.out = (mp_tensor){MP_DTYPE_F32, c.out.shape, out};
    }
    MP_TRY(mp_op_lookup(nd->desc.kind)->forward(&c));
    if (out) mp_store_f32_known(pn->call.out.data, nd->storage_dtype, out, mp_tensor_numel(&c.out));
    return MP_OK;
}

mp_status mp_stage_backward(mp_plan *p, int i, const bool *taken, const bool *fresh) {
    const mp_gnode *nd = &p->g->nodes[i];
    const mp_pnode *pn = &p->nodes[i];
    if (pn->native) return native_backward(p, i, taken, fresh);
    const mp_dtype comp = nd->compute_dtype;
    const mp_dtype round_to = is_low(comp) ? comp : MP_DTYPE_F32;
    mp_op_call c = pn->call;
    char *cur = p->stage;
    stage_operands(p, i, &c, &cur);
    const int64_t n_out = mp_tensor_numel(&c.out);
    if (nd->storage_dtype != MP_DTYPE_F32) {
        float *o = take(&cur, &c.out.shape), *dy = take(&cur, &c.out.shape);
        mp_load_f32_known(o, pn->call.out.data, nd->storage_dtype, n_out);
        mp_load_f32_known(dy, pn->call.d_out.data, nd->storage_dtype, n_out);
        c.out = (mp_tensor){MP_DTYPE_F32, c.out.shape, o};
        c.d_out = (mp_tensor){MP_DTYPE_F32, c.out.shape, dy};
        c.out_staged = true;
    }
    for (int k = 0; k < c.n_in; k++)
        if (pn->call.d_in[k].data) c.d_in[k] = (mp_tensor){MP_DTYPE_F32, c.d_in[k].shape, take(&cur, &c.d_in[k].shape)};
    for (int k = 0; k < nd->n_params; k++)
        if (pn->call.d_param[k].data)
            c.d_param[k] = (mp_tensor){MP_DTYPE_F32, c.d_param[k].shape, take(&cur, &c.d_param[k].shape)};
    MP_TRY(mp_op_lookup(nd->desc.kind)->backward(&c));
    for (int k = 0; k < c.n_in; k++) {
        const mp_tensor *t = &pn->call.d_in[k];
        if (t->data) commit(t->data, t->dtype, c.d_in[k].data, mp_tensor_numel(t), taken[k], round_to);
    }
    for (int k = 0; k < nd->n_params; k++) { /* opts.f32_weight_grads: the f32 sums, unrounded */
        const mp_tensor *t = &pn->call.d_param[k];
        if (t->data)
            commit(t->data, MP_DTYPE_F32, c.d_param[k].data, mp_tensor_numel(t), !fresh[k],
                   mp_plan_f32_weight_grad(p, nd->first_param + k) ? MP_DTYPE_F32 : round_to);
    }
    return MP_OK;
}
