/* conv_wgrad_onednn.c — see conv_wgrad_onednn.h. */
#include "ops/conv_wgrad_onednn.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "ops/onednn_common.h"

/* Output rows per matmul: 2048 measured fastest of 1024-16384 on cnn10's
 * 7x7 layers (bench/NOTES.md v0.43); the patches then take 2048 * 9C * 2
 * bytes (9.4 MB at C = 256). */
enum { CHUNK_ROWS = 2048 };

/* The matmul of a chunk of `rows` output rows, and its memory objects. */
typedef struct {
    dnnl_primitive_t prim;
    dnnl_memory_t dy, patches, dw, scratch;
    int64_t rows;
} chunk_mm;

struct mp_wgrad_gemm {
    const mp_op_desc *d;
    int N, C, H, W, OC, OH, OW, k, stride, pad, dil;
    int64_t K, M;     /* K = k * k * C; M = N * OH * OW */
    chunk_mm mm[2];   /* full chunks, then the last (shorter) one; prim NULL: none */
    size_t patches_off, dw_off, scratch_off;
};

static int mode_override = -2; /* -2: none (the environment decides) */

int mp_wgrad_gemm_mode_set(int mode) {
    const int before = mode_override;
    mode_override = mode;
    return before;
}

bool mp_wgrad_gemm_wanted(const mp_op_desc *d, const mp_op_info *info, const char *impl) {
    const mp_conv_opts *o = &d->attr.conv;
    const int want = mode_override != -2 ? mode_override : mp_env_get()->cpu_wgrad_gemm;
    if (want == 0 || d->kind != MP_OP_CONV2D || o->groups != 1 || o->bias || !mp_info_nhwc_in(info, 0) ||
        !mp_info_nhwc_out(info) || info->in[0].ndim != 4)
        return false;
    if (want == 1) return true;
    const int64_t pixels = (int64_t)info->out.dims[2] * info->out.dims[3];
    return impl && strstr(impl, "amx") && pixels <= 64;
}

void mp_wgrad_gemm_destroy(mp_wgrad_gemm *g) {
    if (!g) return;
    for (int i = 0; i < 2; i++) {
        chunk_mm *m = &g->mm[i];
        if (m->prim) dnnl_primitive_destroy(m->prim);
        if (m->dy) dnnl_memory_destroy(m->dy);
        if (m->patches) dnnl_memory_destroy(m->patches);
        if (m->dw) dnnl_memory_destroy(m->dw);
        if (m->scratch) dnnl_memory_destroy(m->scratch);
    }
    free(g);
}

/* The matmul dW (OC x K, f32, += by its sum post-op) = dY^T (OC x rows: dy's
 * rows read transposed) x P (rows x K), with a user scratchpad; *scratch:
 * its size. */
static mp_status make_chunk(mp_wgrad_gemm *g, chunk_mm *m, int64_t rows, size_t *scratch) {
    const mp_op_desc *d = g->d;
    dnnl_engine_t eng = mp_onednn_engine();
    dnnl_memory_desc_t a, b, c;
    const dnnl_dims_t ad = {g->OC, rows}, as = {1, g->OC}, bd = {rows, g->K}, cd = {g->OC, g->K};
    MP_DNNL_CHECK(d, dnnl_memory_desc_init_by_strides(&a, 2, ad, dnnl_bf16, as));
    MP_DNNL_CHECK(d, dnnl_memory_desc_init_by_tag(&b, 2, bd, dnnl_bf16, dnnl_ab));
    MP_DNNL_CHECK(d, dnnl_memory_desc_init_by_tag(&c, 2, cd, dnnl_f32, dnnl_ab));
    dnnl_matmul_desc_t md;
    MP_DNNL_CHECK(d, dnnl_matmul_desc_init(&md, &a, &b, NULL, &c));
    dnnl_primitive_attr_t attr;
    MP_TRY(mp_onednn_user_scratchpad_attr(d, &attr));
    dnnl_post_ops_t po = NULL;
    dnnl_status_t s = dnnl_post_ops_create(&po);
    if (s == dnnl_success) s = dnnl_post_ops_append_sum(po, 1.0f);
    if (s == dnnl_success) s = dnnl_primitive_attr_set_post_ops(attr, po);
    dnnl_primitive_desc_t pd = NULL;
    if (s == dnnl_success) s = dnnl_primitive_desc_create(&pd, &md, attr, eng, NULL);
    if (po) dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    MP_DNNL_PD_TRY(d, s);
    if (!mp_onednn_is_jit(pd)) { /* a reference matmul: slower than the primitive it would replace */
        dnnl_primitive_desc_destroy(pd);
        return mp_error(MP_ERR_UNSUPPORTED, "conv2d '%s': no JIT matmul for its weight gradient (%s)",
                        d->name ? d->name : "?", "oneDNN offers a reference kernel only");
    }
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    *scratch = smd ? dnnl_memory_desc_get_size(smd) : 0;
    s = dnnl_primitive_create(&m->prim, pd);
    if (s == dnnl_success) s = dnnl_memory_create(&m->dy, &a, eng, DNNL_MEMORY_NONE);
    if (s == dnnl_success) s = dnnl_memory_create(&m->patches, &b, eng, DNNL_MEMORY_NONE);
    if (s == dnnl_success) s = dnnl_memory_create(&m->dw, &c, eng, DNNL_MEMORY_NONE);
    if (s == dnnl_success && *scratch) s = dnnl_memory_create(&m->scratch, smd, eng, DNNL_MEMORY_NONE);
    dnnl_primitive_desc_destroy(pd);
    MP_DNNL_CHECK(d, s);
    m->rows = rows;
    return MP_OK;
}

mp_status mp_wgrad_gemm_create(const mp_op_desc *d, const mp_op_info *info, mp_wgrad_gemm **out, size_t *ws_bytes) {
    *out = NULL;
    mp_wgrad_gemm *g = calloc(1, sizeof *g);
    if (!g) return mp_error(MP_ERR_NOMEM, "conv2d '%s': out of memory", d->name ? d->name : "?");
    const mp_conv_opts *o = &d->attr.conv;
    const mp_shape *x = &info->in[0], *y = &info->out;
    *g = (mp_wgrad_gemm){.d = d, .N = x->dims[0], .C = x->dims[1], .H = x->dims[2], .W = x->dims[3],
                         .OC = y->dims[1], .OH = y->dims[2], .OW = y->dims[3], .k = o->kernel,
                         .stride = o->stride, .pad = o->padding, .dil = o->dilation};
    g->K = (int64_t)g->k * g->k * g->C;
    g->M = (int64_t)g->N * g->OH * g->OW;
    const int64_t full = g->M < CHUNK_ROWS ? g->M : CHUNK_ROWS, tail = g->M % full;
    size_t scratch[2] = {0, 0};
    mp_status s = make_chunk(g, &g->mm[0], full, &scratch[0]);
    if (s == MP_OK && tail) s = make_chunk(g, &g->mm[1], tail, &scratch[1]);
    if (s != MP_OK) {
        mp_wgrad_gemm_destroy(g);
        return s;
    }
    size_t cur = 0;
    g->patches_off = cur;
    cur += MP_ALIGN64((size_t)full * (size_t)g->K * 2);
    g->dw_off = cur;
    cur += MP_ALIGN64((size_t)g->OC * (size_t)g->K * 4);
    g->scratch_off = cur;
    cur += MP_ALIGN64(scratch[0] > scratch[1] ? scratch[0] : scratch[1]);
    *ws_bytes = cur;
    *out = g;
    return MP_OK;
}

/* P's rows for output rows [m0, m0 + rows): row i holds, for each tap
 * (kh, kw), the C input values under it (zeros over the padding). */
static void gather_patches(const mp_wgrad_gemm *g, const uint16_t *x, uint16_t *P, int64_t m0, int64_t rows) {
    const size_t cbytes = (size_t)g->C * 2;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows; i++) {
        const int64_t m = m0 + i, n = m / ((int64_t)g->OH * g->OW), oh = m / g->OW % g->OH, ow = m % g->OW;
        uint16_t *row = P + i * g->K;
        for (int kh = 0; kh < g->k; kh++)
            for (int kw = 0; kw < g->k; kw++) {
                const int64_t ih = oh * g->stride - g->pad + (int64_t)kh * g->dil;
                const int64_t iw = ow * g->stride - g->pad + (int64_t)kw * g->dil;
                uint16_t *dst = row + ((int64_t)kh * g->k + kw) * g->C;
                if (ih < 0 || ih >= g->H || iw < 0 || iw >= g->W)
                    memset(dst, 0, cbytes);
                else
                    memcpy(dst, x + ((n * g->H + ih) * g->W + iw) * g->C, cbytes);
            }
    }
}

mp_status mp_wgrad_gemm_run(mp_wgrad_gemm *g, const void *x, const void *dy, float *dw, void *ws) {
    const mp_op_desc *d = g->d;
    uint16_t *P = (uint16_t *)((char *)ws + g->patches_off);
    float *acc = (float *)((char *)ws + g->dw_off); /* (OC, KH, KW, C) */
    memset(acc, 0, (size_t)g->OC * (size_t)g->K * sizeof *acc);
    dnnl_stream_t strm = mp_onednn_stream();
    for (int64_t m0 = 0; m0 < g->M; m0 += g->mm[0].rows) {
        chunk_mm *m = g->M - m0 < g->mm[0].rows ? &g->mm[1] : &g->mm[0];
        gather_patches(g, x, P, m0, m->rows);
        MP_DNNL_CHECK(d, dnnl_memory_set_data_handle(m->dy, (char *)dy + m0 * g->OC * 2));
        MP_DNNL_CHECK(d, dnnl_memory_set_data_handle(m->patches, P));
        MP_DNNL_CHECK(d, dnnl_memory_set_data_handle(m->dw, acc));
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, m->dy}, {DNNL_ARG_WEIGHTS, m->patches}, {DNNL_ARG_DST, m->dw}};
        int na = 3;
        if (m->scratch) {
            MP_DNNL_CHECK(d, dnnl_memory_set_data_handle(m->scratch, (char *)ws + g->scratch_off));
            args[na++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, m->scratch};
        }
        MP_DNNL_CHECK(d, dnnl_primitive_execute(m->prim, strm, na, args));
        MP_DNNL_CHECK(d, dnnl_stream_wait(strm)); /* P is refilled next */
    }
    const int kk = g->k * g->k;
#pragma omp parallel for schedule(static)
    for (int o = 0; o < g->OC; o++)
        for (int t = 0; t < kk; t++)
            for (int c = 0; c < g->C; c++)
                dw[((int64_t)o * g->C + c) * kk + t] = acc[((int64_t)o * kk + t) * g->C + c];
    return MP_OK;
}
