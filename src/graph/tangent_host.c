/* tangent_host.c — the host's second-order hooks (exec_backend.h): tangent
 * buffers in host memory, and tangent calls on the CPU ops' f32 tangent
 * kernels.
 *
 * The host's tangent pass runs in f32 whatever the policy: every primal
 * tensor a tangent kernel reads that is stored in f16/bf16 (activations,
 * output gradients) is widened to f32 first, with the inputs rounded to the
 * node's compute dtype and the weights taken from the same low-precision
 * casts the forward used, so the derivatives are those of the function the
 * forward computed. */
#include <stdlib.h>
#include <string.h>

#include "core/dtype_convert.h"
#include "core/host_mem.h"
#include "graph/exec_stage.h"
#include "graph/second_order.h"

static bool is_low(mp_dtype d) { return d == MP_DTYPE_F16 || d == MP_DTYPE_BF16; }

/* An f32 copy of t (a tensor stored in f16/bf16), rounded to round_to. */
static mp_tensor widen(const mp_tensor *t, mp_dtype round_to, char **cur) {
    if (!t->data || !is_low(t->dtype)) return *t;
    float *f = mp_so_take(cur, &t->shape);
    const int64_t n = mp_tensor_numel(t);
    mp_load_f32_known(f, t->data, t->dtype, n);
    if (is_low(round_to) && round_to != t->dtype) mp_round_f32(f, n, round_to);
    return (mp_tensor){MP_DTYPE_F32, t->shape, f};
}

/* Clears the tangent and gradient fields of a call copied from a bound one. */
void mp_so_clear_call(mp_op_call *c) {
    for (int k = 0; k < c->n_in; k++) c->d_in[k].data = NULL;
    for (int k = 0; k < MP_MAX_PARAMS; k++) c->d_param[k].data = NULL;
    for (int k = 0; k < MP_MAX_INPUTS; k++) c->t_in[k].data = c->t_d_in[k].data = NULL;
    for (int k = 0; k < MP_MAX_PARAMS; k++) c->t_param[k].data = c->t_d_param[k].data = NULL;
    c->t_out.data = c->t_d_out.data = NULL;
}

mp_op_call mp_so_primal_f32(const mp_plan *p, int i, char **cur) {
    const mp_gnode *nd = &p->g->nodes[i];
    const mp_pnode *pn = &p->nodes[i];
    mp_op_call c = pn->call;
    mp_so_clear_call(&c);
    const mp_dtype comp = nd->compute_dtype;
    for (int k = 0; k < c.n_in; k++) {
        if (c.in[k].dtype == MP_DTYPE_I32) continue;
        if (c.in[k].dtype == MP_DTYPE_F32 && is_low(comp)) { /* the forward rounded it to the compute dtype */
            float *f = mp_so_take(cur, &c.in[k].shape);
            const int64_t n = mp_tensor_numel(&c.in[k]);
            memcpy(f, c.in[k].data, (size_t)n * sizeof *f);
            mp_round_f32(f, n, comp);
            c.in[k].data = f;
        } else {
            c.in[k] = widen(&c.in[k], comp, cur);
        }
    }
    for (int k = 0; k < nd->n_params; k++) {
        if (!pn->low_param[k]) continue;
        float *f = mp_so_take(cur, &c.param[k].shape);
        mp_load_f32_known(f, pn->low_param[k], comp, mp_tensor_numel(&c.param[k]));
        c.param[k] = (mp_tensor){MP_DTYPE_F32, c.param[k].shape, f};
    }
    c.out = widen(&c.out, MP_DTYPE_F32, cur);
    c.d_out = widen(&c.d_out, MP_DTYPE_F32, cur);
    return c;
}

mp_status mp_so_host_alloc(mp_plan *p, size_t bytes, void **out) {
    const size_t b = MP_ALIGN64(bytes ? bytes : 1);
    *out = NULL;
    MP_TRY(mp_host_mem_check(b, "try a smaller batch", "the gradient penalty's tangent buffers of batch %d",
                             p->o.batch));
    *out = aligned_alloc(64, b);
    if (!*out) return mp_error(MP_ERR_NOMEM, "plan: out of memory for %zu bytes of tangent buffers", bytes);
    memset(*out, 0, b);
    return MP_OK;
}

void mp_so_host_free(mp_plan *p, void *mem) {
    (void)p;
    free(mem);
}

mp_status mp_so_host_run(mp_plan *p, int i, const mp_op_call *c, bool backward) {
    const mp_op_vtable *vt = mp_op_lookup(p->g->nodes[i].desc.kind);
    mp_status (*fn)(const mp_op_call *) = backward ? vt->backward_tangent : vt->forward_tangent;
    if (!fn) return mp_so_no_tangent(p, i, backward ? "backward" : "forward");
    return fn(c);
}

mp_status mp_so_host_add(mp_plan *p, float *dst, const float *src, int64_t n) {
    (void)p;
    mp_tensor_add(MP_DTYPE_F32, dst, src, n);
    return MP_OK;
}

mp_status mp_so_host_from(mp_plan *p, const mp_tensor *t, const float *src, size_t n) {
    (void)p;
    mp_store_f32_known(t->data, t->dtype, src, (int64_t)n);
    return MP_OK;
}

mp_status mp_so_host_to(const mp_plan *p, const mp_tensor *t, float *dst, size_t n) {
    (void)p;
    mp_load_f32_known(dst, t->data, t->dtype, (int64_t)n);
    return MP_OK;
}

mp_status mp_so_host_fill(mp_plan *p, const mp_tensor *t, float value) {
    (void)p;
    const int64_t n = mp_tensor_numel(t);
    const size_t esz = mp_dtype_size(t->dtype);
    float chunk[256];
    for (int j = 0; j < 256; j++) chunk[j] = value;
    for (int64_t i = 0; i < n; i += 256)
        mp_store_f32_known((char *)t->data + (size_t)i * esz, t->dtype, chunk, n - i < 256 ? n - i : 256);
    return MP_OK;
}
