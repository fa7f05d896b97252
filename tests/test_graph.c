/* test_graph.c — graph, autodiff and memory planning: gradients of a whole
 * graph with a residual branch and a shared input against finite
 * differences, the arena planner's no-overlap guarantee, no allocation inside
 * a training step, construction/plan errors, and reads of intermediates whose
 * memory later nodes reuse refused. */
#include <malloc.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/rng.h"
#include "graph/arena_plan.h"
#include "graph/graph.h"
#include "graph/plan.h"

typedef struct {
    mp_graph *g;
    mp_node in, labels, logits, loss;
} net;

/* input -> conv -> bn -> relu -+-> add -> gap -> linear -> CE
 *                 \-> conv2 ---/  (relu output feeds two consumers) */
static net build_net(void) {
    net n;
    n.g = mp_graph_create();
    mp_graph *g = n.g;
    n.in = mp_graph_input(g, "x", 2, 5, 5);
    mp_node c1 = mp_conv2d(g, "c1", n.in, (mp_conv_opts){.out_channels = 3, .kernel = 3, .padding = 1});
    mp_node b1 = mp_batchnorm2d(g, "b1", c1, (mp_batchnorm_opts){0});
    mp_node r1 = mp_relu(g, "r1", b1);
    mp_node c2 = mp_conv2d(g, "c2", r1, (mp_conv_opts){.out_channels = 3, .kernel = 3, .padding = 1, .bias = true});
    mp_node t = mp_tanh(g, "t", c2);
    mp_node sum = mp_add(g, "sum", r1, t);
    mp_node twice = mp_add(g, "twice", sum, sum); /* same input twice */
    mp_node gap = mp_global_avgpool(g, "gap", twice);
    n.logits = mp_linear(g, "fc", gap, (mp_linear_opts){.out_features = 4, .bias = true});
    n.labels = mp_graph_labels(g, "y");
    n.loss = mp_softmax_cross_entropy(g, "loss", n.logits, n.labels);
    mp_graph_mark_output(g, n.logits);
    mp_graph_mark_output(g, n.loss);
    return n;
}

static double loss_of(mp_plan *p, mp_node loss) {
    float l = 0;
    mp_status s = mp_plan_forward(p);
    if (s != MP_OK) fprintf(stderr, "forward: %s\n", mp_last_error());
    MP_ASSERT(s == MP_OK);
    MP_ASSERT(mp_plan_read(p, loss, &l, 1) == MP_OK);
    return l;
}

static void test_graph_gradients(void) {
    net n = build_net();
    CHECK(mp_graph_status(n.g) == MP_OK, "build: %s", mp_last_error());
    mp_graph_init_params(n.g, 3);
    const int B = 4;
    mp_plan *p = NULL;
    mp_status s = mp_plan_create(n.g, (mp_plan_opts){.batch = B, .training = true, .loss = n.loss, .reference = true}, &p);
    CHECK(s == MP_OK, "plan: %s", mp_last_error());
    if (s != MP_OK) return;
    mp_rng r;
    mp_rng_seed(&r, 11);
    float x[4 * 2 * 5 * 5];
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) x[i] = (float)mp_rng_normal(&r);
    int32_t y[4] = {0, 3, 1, 2};
    CHECK(mp_plan_set_input(p, n.in, x, sizeof x / sizeof x[0]) == MP_OK, "%s", mp_last_error());
    CHECK(mp_plan_set_labels(p, n.labels, y, 4) == MP_OK, "%s", mp_last_error());
    loss_of(p, n.loss);
    mp_graph_zero_grad(n.g);
    CHECK(mp_plan_backward(p, 1.0f) == MP_OK, "%s", mp_last_error());

    /* Finite differences in f32 (h = 3e-3 on O(1) weights): an accumulation
     * bug shows up as an O(1) relative error, rounding and kinks as < 5e-2. */
    mp_graph *g = n.g;
    int checked = 0;
    for (int k = 0; k < g->n_params; k++) {
        mp_gparam *gp = &g->params[k];
        if (!gp->spec.trainable) continue;
        int64_t cnt = mp_shape_numel(&gp->spec.shape);
        double d2 = 0, r2 = 0, a2 = 0;
        for (int64_t j = 0; j < cnt && j < 12; j++) {
            float w0 = gp->data[j];
            const float h = 3e-3f;
            gp->data[j] = w0 + h;
            double lp = loss_of(p, n.loss);
            gp->data[j] = w0 - h;
            double lm = loss_of(p, n.loss);
            gp->data[j] = w0;
            double num = (lp - lm) / (2.0 * h), an = gp->grad[j];
            d2 += (num - an) * (num - an);
            r2 += num * num;
            a2 += an * an;
        }
        double rel = sqrt(d2) / fmax(sqrt(r2), 1e-12);
        CHECK(rel < 5e-2, "param %s: rel.err %g", gp->name, rel);
        CHECK(sqrt(a2) > 1e-8, "param %s: gradient is all zero", gp->name);
        checked++;
    }
    CHECK(checked == 7, "checked %d trainable tensors, expected 7", checked);

    /* Without zero_grad a second backward accumulates: grads double. */
    float before = g->params[0].grad[0];
    loss_of(p, n.loss);
    CHECK(mp_plan_backward(p, 1.0f) == MP_OK, "%s", mp_last_error());
    CHECK(fabsf(g->params[0].grad[0] - 2 * before) <= 1e-5f * fabsf(before) + 1e-7f,
          "accumulated grad %g, expected %g", g->params[0].grad[0], 2 * before);
    /* The seed scales every gradient (loss scaling builds on this). */
    loss_of(p, n.loss);
    mp_graph_zero_grad(g);
    CHECK(mp_plan_backward(p, 8.0f) == MP_OK, "%s", mp_last_error());
    CHECK(fabsf(g->params[0].grad[0] - 8 * before) <= 1e-4f * fabsf(8 * before) + 1e-7f,
          "seeded grad %g, expected %g", g->params[0].grad[0], 8 * before);
    mp_plan_destroy(p);
    mp_graph_destroy(n.g);
}

static void test_arena_planner(void) {
    mp_rng r;
    mp_rng_seed(&r, 5);
    for (int trial = 0; trial < 50; trial++) {
        int n = 1 + (int)mp_rng_below(&r, 60);
        mp_arena_buf b[64];
        size_t sum = 0;
        for (int i = 0; i < n; i++) {
            int a = (int)mp_rng_below(&r, 40), c = (int)mp_rng_below(&r, 40);
            b[i] = (mp_arena_buf){.size = mp_rng_below(&r, 5000), .first = a < c ? a : c, .last = a < c ? c : a};
            sum += (b[i].size + 63) & ~(size_t)63;
        }
        size_t total = 0;
        CHECK(mp_arena_plan(b, n, &total) == MP_OK, "plan");
        CHECK(total <= sum, "arena %zu larger than all buffers %zu", total, sum);
        const mp_arena_peak pk = mp_arena_live_peak(b, n);
        CHECK(pk.bytes <= total, "live peak %zu above the arena %zu", pk.bytes, total);
        size_t kinds = 0, at_step = 0;
        for (int k = 0; k < MP_MEM_KINDS; k++) kinds += pk.by_kind[k];
        for (int i = 0; i < n; i++)
            if (b[i].size && b[i].first <= pk.step && pk.step <= b[i].last) at_step += (b[i].size + 63) & ~(size_t)63;
        CHECK(kinds == pk.bytes && at_step == pk.bytes, "peak %zu at step %d: by kind %zu, alive then %zu", pk.bytes,
              pk.step, kinds, at_step);
        for (int i = 0; i < n; i++) {
            CHECK(b[i].offset % 64 == 0, "misaligned offset %zu", b[i].offset);
            CHECK(b[i].offset + b[i].size <= total, "buffer past the arena end");
            for (int j = 0; j < i; j++) {
                bool time = b[i].first <= b[j].last && b[j].first <= b[i].last;
                bool space = b[i].offset < b[j].offset + b[j].size && b[j].offset < b[i].offset + b[i].size;
                CHECK(!(time && space && b[i].size && b[j].size), "buffers %d and %d overlap", i, j);
            }
        }
    }
    /* Disjoint lifetimes share memory. */
    mp_arena_buf seq[3] = {{.size = 1000, .first = 0, .last = 0}, {.size = 1000, .first = 1, .last = 1},
                           {.size = 1000, .first = 2, .last = 2}};
    size_t total = 0;
    mp_arena_plan(seq, 3, &total);
    CHECK(total == 1024, "sequential buffers should reuse one slot, arena %zu", total);
    /* At most two of three alive at once: 1000 + 2000 bytes (aligned to 1024 + 2048). */
    mp_arena_buf two[3] = {{.size = 1000, .first = 0, .last = 1, .kind = MP_MEM_ACTIVATIONS},
                           {.size = 2000, .first = 1, .last = 2, .kind = MP_MEM_SAVED},
                           {.size = 3000, .first = 3, .last = 3, .kind = MP_MEM_WORKSPACE}};
    const mp_arena_peak pk = mp_arena_live_peak(two, 3);
    CHECK(pk.bytes == 3072 && pk.step == 1, "live peak %zu at step %d, expected 3072 at 1", pk.bytes, pk.step);
    CHECK(pk.by_kind[MP_MEM_ACTIVATIONS] == 1024 && pk.by_kind[MP_MEM_SAVED] == 2048 && !pk.by_kind[MP_MEM_WORKSPACE],
          "peak by kind: activations %zu, saved %zu, workspaces %zu", pk.by_kind[MP_MEM_ACTIVATIONS],
          pk.by_kind[MP_MEM_SAVED], pk.by_kind[MP_MEM_WORKSPACE]);
    CHECK(mp_arena_live_peak(two, 0).step == -1, "no buffers: a peak step");
    /* Largest first alone places these in 448 bytes (the 256 at 0, the second
     * 192 at 192, so the 64 alive with both lands at 384); another order
     * reaches the live peak of 384, and the planner keeps the best. */
    mp_arena_buf frag[5] = {{.size = 192, .first = 0, .last = 1}, {.size = 256, .first = 3, .last = 4},
                            {.size = 64, .first = 2, .last = 4}, {.size = 192, .first = 1, .last = 2},
                            {.size = 64, .first = 5, .last = 5}};
    CHECK(mp_arena_plan(frag, 5, &total) == MP_OK && total == 384 && mp_arena_live_peak(frag, 5).bytes == 384,
          "arena %zu for a live peak of %zu, expected 384", total, mp_arena_live_peak(frag, 5).bytes);
}

/* Heap probe: the bytes kept and the largest single allocation, across all
 * libraries of this process (oneDNN, libgomp included). Normal builds
 * interpose malloc & co. (glibc's __libc_* do the work); ASan builds, whose
 * allocator cannot be interposed, ask ASan for the bytes in use. */
#if defined(__SANITIZE_ADDRESS__)
size_t __sanitizer_get_current_allocated_bytes(void); /* libasan */
static long heap_largest(void) { return -1; }
static void heap_reset_largest(void) {}
static long heap_bytes(void) { return (long)__sanitizer_get_current_allocated_bytes(); }
#else
extern void *__libc_malloc(size_t), *__libc_calloc(size_t, size_t), *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);
static _Atomic long probe_largest, probe_bytes;
static void *counted(void *p) {
    if (p) {
        long n = (long)malloc_usable_size(p);
        probe_bytes += n;
        if (n > probe_largest) probe_largest = n;
    }
    return p;
}
void *malloc(size_t n) { return counted(__libc_malloc(n)); }
void *calloc(size_t a, size_t b) { return counted(__libc_calloc(a, b)); }
void *realloc(void *p, size_t n) {
    if (p) probe_bytes -= (long)malloc_usable_size(p);
    return counted(__libc_realloc(p, n));
}
void *aligned_alloc(size_t a, size_t n) { return counted(__libc_memalign(a, n)); }
void *memalign(size_t a, size_t n) { return counted(__libc_memalign(a, n)); }
int posix_memalign(void **out, size_t a, size_t n) {
    *out = counted(__libc_memalign(a, n));
    return *out ? 0 : 12 /* ENOMEM */;
}
void free(void *p) {
    if (p) probe_bytes -= (long)malloc_usable_size(p);
    __libc_free(p);
}
static long heap_largest(void) { return probe_largest; }
static void heap_reset_largest(void) { probe_largest = 0; }
static long heap_bytes(void) { return probe_bytes; }
#endif

typedef struct {
    long largest, bytes; /* largest single allocation (-1: unknown), bytes kept */
} heap_delta;

/* What a run of 5 training steps allocates, after warm-up steps. */
static heap_delta step_allocations(bool reference, int warmup, int B) {
    net n = build_net();
    mp_graph_init_params(n.g, 1);
    mp_plan *p = NULL;
    MP_ASSERT(mp_plan_create(n.g, (mp_plan_opts){.batch = B, .training = true, .loss = n.loss,
                                                 .reference = reference},
                             &p) == MP_OK);
    float *x = calloc((size_t)B * 50, sizeof *x);
    int32_t *y = calloc((size_t)B, sizeof *y);
    mp_plan_set_input(p, n.in, x, (size_t)B * 50);
    mp_plan_set_labels(p, n.labels, y, B);
    heap_delta d = {0, 0};
    for (int i = 0; i < warmup + 5; i++) {
        if (i == warmup) {
            heap_reset_largest();
            d.bytes = heap_bytes();
        }
        mp_plan_forward(p);
        mp_graph_zero_grad(n.g);
        mp_plan_backward(p, 1);
    }
    d = (heap_delta){heap_largest(), heap_bytes() - d.bytes};
    free(x);
    free(y);
    mp_plan_destroy(p);
    mp_graph_destroy(n.g);
    return d;
}

/* Every tensor, gradient and workspace of a step lives in the plan's arena:
 * during 5 training steps the heap keeps nothing and no allocation is
 * tensor-sized (one activation of this net at batch 64 is 19 KiB). What
 * remains are the runtimes' own transient objects: libgomp's team
 * descriptors per parallel region; in oneDNN, per-execution argument maps
 * and packing buffers its gemm-based kernels allocate and free inside each
 * execution (16 KiB on the AVX2 machine, 72 KiB on the AVX-512 host; the
 * user scratchpad does not cover them), and a little bookkeeping (1152 bytes
 * kept over 5 steps with 16 threads on AVX-512). So with oneDNN only the
 * bytes kept are bounded. */
static void test_no_allocation_in_step(void) {
    heap_delta ref = step_allocations(true, 1, 64);
    CHECK(ref.bytes == 0, "reference kernels: the heap grew by %ld bytes during 5 training steps", ref.bytes);
    CHECK(ref.largest < 4096, "reference kernels: a %ld-byte allocation during training steps", ref.largest);
    heap_delta lib = step_allocations(false, 5, 64);
    CHECK(lib.bytes < 4096, "oneDNN path: the heap grew by %ld bytes during 5 training steps after warm-up", lib.bytes);
    /* the probe itself sees an allocation */
    long b0 = heap_bytes();
    heap_reset_largest();
    void *volatile q = malloc(20000);
    CHECK(heap_bytes() - b0 >= 20000 && (heap_largest() < 0 || heap_largest() >= 20000), "heap probe missed an allocation");
    free(q);
}

static void test_errors(void) {
    mp_graph *g = mp_graph_create();
    mp_node x = mp_graph_input(g, "x", 3, 8, 8);
    mp_node c = mp_conv2d(g, "bad_conv", x, (mp_conv_opts){.out_channels = 4, .kernel = 3, .groups = 2});
    CHECK(c < 0, "conv with groups not dividing channels must fail");
    CHECK(mp_graph_status(g) == MP_ERR_SHAPE, "status %d", mp_graph_status(g));
    CHECK(strstr(mp_last_error(), "bad_conv") != NULL, "message should name the node: %s", mp_last_error());
    mp_node after = mp_relu(g, "r", x);
    CHECK(after < 0, "a graph with an error refuses further nodes");
    mp_plan *p = NULL;
    CHECK(mp_plan_create(g, (mp_plan_opts){.batch = 2}, &p) != MP_OK && p == NULL, "plan on a broken graph must fail");
    mp_graph_destroy(g);

    g = mp_graph_create();
    x = mp_graph_input(g, "x", 1, 4, 4);
    CHECK(mp_relu(g, "x", x) < 0 && strstr(mp_last_error(), "duplicate"), "duplicate names: %s", mp_last_error());
    mp_graph_destroy(g);

    g = mp_graph_create();
    x = mp_graph_input(g, "x", 1, 4, 4);
    mp_node r = mp_relu(g, "r", x);
    CHECK(mp_plan_create(g, (mp_plan_opts){.batch = 0}, &p) == MP_ERR_INVALID_ARG, "batch 0 must be refused");
    CHECK(mp_plan_create(g, (mp_plan_opts){.batch = 2}, &p) == MP_OK, "%s", mp_last_error());
    float buf[10];
    CHECK(mp_plan_set_input(p, x, buf, 10) == MP_ERR_SHAPE, "wrong input size must be refused");
    CHECK(strstr(mp_last_error(), "32") != NULL, "message gives the expected size: %s", mp_last_error());
    CHECK(mp_plan_set_input(p, r, buf, 10) == MP_ERR_INVALID_ARG, "set_input on a non-input must be refused");
    CHECK(mp_plan_backward(p, 1) == MP_ERR_INVALID_ARG, "backward on an inference plan must be refused");
    mp_plan_destroy(p);
    mp_graph_destroy(g);
}

/* mp_graph_share_params: a node that already shares (or whose parameters
 * another node uses) is refused, as is any sharing while a plan of the graph
 * is alive (it holds the parameters); the graph keeps its parameters. */
static void test_share_params_refusals(void) {
    mp_graph *g = mp_graph_create();
    mp_node x = mp_graph_input(g, "x", 1, 4, 4);
    mp_node f = mp_flatten(g, "f", x);
    mp_node a = mp_linear(g, "a", f, (mp_linear_opts){.out_features = 16, .bias = true});
    mp_node b = mp_linear(g, "b", f, (mp_linear_opts){.out_features = 16, .bias = true});
    CHECK_ERR(mp_graph_share_params(g, b, a), MP_OK);
    CHECK_ERR(mp_graph_share_params(g, b, a), MP_ERR_INVALID_ARG, "'b' already shares");
    CHECK_ERR(mp_graph_share_params(g, a, b), MP_ERR_INVALID_ARG, "'a' already shares");
    CHECK(mp_graph_param_tensors(g) == 2, "%d parameter tensors, expected a's 2", mp_graph_param_tensors(g));
    CHECK(mp_graph_param_find(g, "a.weight") == 0 && mp_graph_param_find(g, "a.bias") == 1, "a's parameters lost");
    mp_graph_destroy(g);

    g = mp_graph_create();
    x = mp_graph_input(g, "x", 1, 2, 2);
    f = mp_flatten(g, "f", x);
    a = mp_linear(g, "a", f, (mp_linear_opts){.out_features = 4});
    b = mp_linear(g, "b", f, (mp_linear_opts){.out_features = 4});
    mp_graph_mark_output(g, mp_add(g, "s", a, b));
    mp_graph_init_params(g, 1);
    mp_plan *p = NULL;
    MP_ASSERT(mp_plan_create(g, (mp_plan_opts){.batch = 1, .reference = true}, &p) == MP_OK);
    CHECK_ERR(mp_graph_share_params(g, b, a), MP_ERR_INVALID_ARG, "'b'", "1 plan(s)", "destroy the plans");
    CHECK(mp_graph_param_tensors(g) == 2, "a refused share dropped parameters: %d", mp_graph_param_tensors(g));
    mp_plan_destroy(p);
    mp_graph_destroy(g);
}

/* The int32 labels node feeds only softmax_cross_entropy's labels input:
 * a float op reading it is refused where it is built, naming both. */
static void test_labels_only_to_losses(void) {
    mp_graph *g = mp_graph_create();
    mp_node y = mp_graph_labels(g, "y");
    CHECK_ERR(mp_reshape(g, "as_features", y, 1, 0, 0) < 0 ? mp_graph_status(g) : MP_OK, MP_ERR_INVALID_ARG,
              "reshape 'as_features'", "labels node 'y'");
    mp_graph_destroy(g);
    const mp_op_kind kinds[] = {MP_OP_TANH, MP_OP_RELU, MP_OP_LINEAR};
    for (int i = 0; i < 3; i++) {
        g = mp_graph_create();
        y = mp_graph_labels(g, "y");
        mp_op_attr a = {.linear = {.out_features = 2}};
        CHECK_ERR(mp_graph_add(g, kinds[i], "op", &a, &y, 1) < 0 ? mp_graph_status(g) : MP_OK, MP_ERR_INVALID_ARG,
                  "'op'", "labels node 'y'");
        mp_graph_destroy(g);
    }
    /* the loss's first input is its logits, not labels */
    g = mp_graph_create();
    y = mp_graph_labels(g, "y");
    mp_node y2 = mp_graph_labels(g, "y2");
    CHECK_ERR(mp_softmax_cross_entropy(g, "loss", y, y2) < 0 ? mp_graph_status(g) : MP_OK, MP_ERR_INVALID_ARG,
              "'loss'", "input 0", "labels node 'y'");
    mp_graph_destroy(g);
    /* the labels input of the loss is fine */
    g = mp_graph_create();
    mp_node x = mp_graph_input(g, "x", 1, 2, 2);
    mp_node fc = mp_linear(g, "fc", mp_flatten(g, "f", x), (mp_linear_opts){.out_features = 3});
    CHECK(mp_softmax_cross_entropy(g, "loss", fc, mp_graph_labels(g, "y")) >= 0, "%s", mp_last_error());
    mp_graph_destroy(g);
}

/* A node name with a control character (which no weights file, report or
 * policy file could carry) is refused where it is built, escaped. */
static void test_control_char_names(void) {
    mp_graph *g = mp_graph_create();
    mp_node x = mp_graph_input(g, "x", 1, 2, 2);
    CHECK_ERR(mp_relu(g, "re\nlu", x) < 0 ? mp_graph_status(g) : MP_OK, MP_ERR_INVALID_ARG, "node 1",
              "\"re\\x0alu\"", "control character");
    mp_graph_destroy(g);
    g = mp_graph_create();
    CHECK_ERR(mp_graph_input(g, "\x7fin", 1, 2, 2) < 0 ? mp_graph_status(g) : MP_OK, MP_ERR_INVALID_ARG, "node 0",
              "\\x7fin");
    mp_graph_destroy(g);
    g = mp_graph_create(); /* UTF-8 and quotes are names like any other */
    CHECK(mp_graph_input(g, "we\"ird\\name\u00e9", 1, 2, 2) >= 0, "%s", mp_last_error());
    mp_graph_destroy(g);
}

/* Null pointers the API is handed: errors, not crashes; void calls do nothing. */
static void test_null_args(void) {
    mp_graph *g = mp_graph_create();
    mp_node x = mp_graph_input(g, "x", 1, 4, 4);
    mp_node fc = mp_linear(g, "fc", mp_flatten(g, "f", x), (mp_linear_opts){.out_features = 2});
    int nd = 0;
    int64_t dims[3];
    CHECK_ERR(mp_graph_node_sample_shape(g, x, &nd, NULL), MP_ERR_INVALID_ARG, "sample_shape");
    CHECK_ERR(mp_graph_node_sample_shape(g, x, NULL, dims), MP_ERR_INVALID_ARG, "sample_shape");
    CHECK_ERR(mp_graph_param_get(g, "fc.weight", NULL, 32), MP_ERR_INVALID_ARG, "param_get 'fc.weight'", "null");
    CHECK_ERR(mp_graph_param_set(g, "fc.weight", NULL, 32), MP_ERR_INVALID_ARG, "param_set 'fc.weight'", "null");
    CHECK_ERR(mp_graph_grad_get(g, "fc.weight", NULL, 32), MP_ERR_INVALID_ARG, "grad_get 'fc.weight'", "null");
    CHECK_ERR(mp_graph_param_get(g, NULL, NULL, 0), MP_ERR_INVALID_ARG, "no parameter");
    CHECK_ERR(mp_graph_param_get(NULL, "fc.weight", (float[32]){0}, 32), MP_ERR_INVALID_ARG, "param_get: null graph");
    CHECK_ERR(mp_graph_param_info(g, 0, NULL), MP_ERR_INVALID_ARG, "param_info: null output");
    CHECK_ERR(mp_graph_node_precision(g, 0, NULL), MP_ERR_INVALID_ARG, "node precision: null output");
    CHECK_ERR(mp_plan_set_input(NULL, x, (float[16]){0}, 16), MP_ERR_INVALID_ARG, "null plan");
    /* no gradient exists before a backward: refused, not zeros */
    float gw[32];
    CHECK_ERR(mp_graph_grad_get(g, "fc.weight", gw, 32), MP_ERR_INVALID_ARG, "grad_get 'fc.weight'",
              "no plan of the graph has run a backward yet");
    mp_init_scheme sch;
    CHECK_ERR(mp_init_scheme_parse("he", NULL), MP_ERR_INVALID_ARG, "initialization");
    CHECK_ERR(mp_init_scheme_parse(NULL, &sch), MP_ERR_INVALID_ARG, "(null)");
    mp_graph_zero_grad(NULL);
    mp_graph_print_precision(NULL, stdout);
    mp_graph_print_precision(g, NULL);
    CHECK_ERR(mp_concat(g, "cat", NULL, 2) < 0 ? mp_graph_status(g) : MP_OK, MP_ERR_INVALID_ARG, "concat 'cat'",
              "null");
    (void)fc;
    mp_graph_destroy(g);
}

/* Sizes past what the types hold are refused, naming the node: an input of
 * more than INT_MAX elements per sample, a flatten of one, a concat whose
 * channels add up past INT_MAX, a plan whose batch makes a tensor larger
 * than 2^48 bytes (the byte counts wrapped, then set_input wrote far past
 * the arena). */
static void test_size_limits(void) {
    mp_graph *g = mp_graph_create();
    CHECK_ERR(mp_graph_input(g, "x", 1 << 20, 1 << 20, 1 << 20) < 0 ? mp_graph_status(g) : MP_OK, MP_ERR_SHAPE,
              "input 'x'", "1152921504606846976 elements per sample", "2147483647");
    mp_graph_destroy(g);

    g = mp_graph_create(); /* 2^31 elements per sample: a concat may have them, a flatten not */
    mp_node x = mp_graph_input(g, "x", 1 << 10, 1 << 10, 1 << 10);
    const mp_node xx[2] = {x, x};
    mp_node wide = mp_concat(g, "wide", xx, 2);
    CHECK(wide >= 0, "%s", mp_last_error());
    CHECK(mp_flatten(g, "flat", wide) < 0, "flatten of 2^31 elements per sample accepted");
    CHECK_ERR(mp_graph_status(g), MP_ERR_SHAPE, "flatten 'flat'", "'wide' (1, 2048, 1024, 1024)", "2147483647");
    mp_graph_destroy(g);

    g = mp_graph_create();
    x = mp_graph_input(g, "x", 1, 1 << 10, 1 << 20); /* 2^30 per sample */
    mp_node f = mp_flatten(g, "f", x);
    const mp_node xs[4] = {f, f, f, f};
    CHECK(mp_concat(g, "cat2", xs, 2) < 0, "concat of 2^31 features accepted");
    CHECK_ERR(mp_graph_status(g), MP_ERR_SHAPE, "concat 'cat2'", "more than 2147483647");
    mp_graph_destroy(g);
    g = mp_graph_create();
    x = mp_graph_input(g, "x", 1, 1 << 10, 1 << 20);
    f = mp_flatten(g, "f", x);
    const mp_node fs[4] = {f, f, f, f};
    CHECK(mp_concat(g, "cat4", fs, 4) < 0, "concat of 2^32 features (0 in int) accepted");
    CHECK_ERR(mp_graph_status(g), MP_ERR_SHAPE, "concat 'cat4'");
    mp_graph_destroy(g);

    g = mp_graph_create();
    x = mp_graph_input(g, "x", 1, 1 << 15, 1 << 15); /* 4 GiB per sample */
    mp_graph_mark_output(g, mp_relu(g, "r", x));
    mp_plan *p = NULL;
    CHECK_ERR(mp_plan_create(g, (mp_plan_opts){.batch = 1 << 17}, &p), MP_ERR_SHAPE, "input 'x'", "131072",
              "2^48 bytes");
    CHECK(p == NULL, "a refused plan was returned");
    mp_graph_destroy(g);
}

/* Float options that are not numbers are refused where the node is built. */
static void test_nonfinite_options(void) {
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    for (int i = 0; i < 3; i++) {
        mp_graph *g = mp_graph_create();
        mp_node x = mp_graph_input(g, "x", 2, 2, 2);
        CHECK_ERR(mp_leaky_relu(g, "leaky", x, bad[i]) < 0 ? mp_graph_status(g) : MP_OK, MP_ERR_INVALID_ARG,
                  "leaky_relu 'leaky'", "slope");
        mp_graph_destroy(g);
        g = mp_graph_create();
        x = mp_graph_input(g, "x", 2, 2, 2);
        CHECK_ERR(mp_batchnorm2d(g, "bn", x, (mp_batchnorm_opts){.eps = bad[i]}) < 0 ? mp_graph_status(g) : MP_OK,
                  MP_ERR_INVALID_ARG, "batchnorm2d 'bn'", "eps");
        mp_graph_destroy(g);
        g = mp_graph_create();
        x = mp_graph_input(g, "x", 2, 2, 2);
        CHECK_ERR(mp_batchnorm2d(g, "bn", x, (mp_batchnorm_opts){.momentum = bad[i]}) < 0 ? mp_graph_status(g) : MP_OK,
                  MP_ERR_INVALID_ARG, "batchnorm2d 'bn'", "momentum");
        mp_graph_destroy(g);
    }
}

/* param_set refuses a negative running variance, as the weights loader does. */
static void test_param_set_negative_variance(void) {
    mp_graph *g = mp_graph_create();
    mp_node x = mp_graph_input(g, "x", 2, 2, 2);
    mp_graph_mark_output(g, mp_batchnorm2d(g, "bn", x, (mp_batchnorm_opts){0}));
    mp_graph_init_params(g, 1);
    const float var[2] = {1.0f, -4.0f};
    float got[2];
    CHECK_ERR(mp_graph_param_set(g, "bn.running_var", var, 2), MP_ERR_FORMAT, "'bn.running_var' is a variance",
              "-4 at element 1");
    MP_ASSERT(mp_graph_param_get(g, "bn.running_var", got, 2) == MP_OK);
    CHECK(got[0] == 1.0f && got[1] == 1.0f, "a refused variance was stored: %g %g", (double)got[0], (double)got[1]);
    const float mean[2] = {-4.0f, 3.0f}; /* a mean may be negative */
    CHECK_ERR(mp_graph_param_set(g, "bn.running_mean", mean, 2), MP_OK);
    mp_graph_destroy(g);
}

/* x -> r1 = relu -> tanh -> relu -> out = tanh; r1 marked an output or not. */
static mp_plan *chain_plan(mp_graph **g, bool keep_r1, mp_node *x, mp_node *r1, mp_node *out) {
    *g = mp_graph_create();
    *x = mp_graph_input(*g, "x", 1, 4, 4);
    *r1 = mp_relu(*g, "r1", *x);
    mp_node t1 = mp_tanh(*g, "t1", *r1);
    mp_node r2 = mp_relu(*g, "r2", t1);
    *out = mp_tanh(*g, "out", r2);
    mp_graph_mark_output(*g, *out);
    if (keep_r1) mp_graph_mark_output(*g, *r1);
    mp_plan *p = NULL;
    MP_ASSERT(mp_plan_create(*g, (mp_plan_opts){.batch = 2}, &p) == MP_OK);
    return p;
}

/* mp_plan_read of a node whose memory the arena gives to later nodes is an
 * error naming it, not whatever those nodes wrote there; marked an output,
 * it reads its values. In training, what the backward still needed reads
 * after the forward and is refused after the backward. */
static void test_read_kept(void) {
    float in[32], got[32];
    for (int i = 0; i < 32; i++) in[i] = (float)(i % 7) - 3.f;
    for (int keep = 0; keep < 2; keep++) {
        mp_graph *g;
        mp_node x, r1, out;
        mp_plan *p = chain_plan(&g, keep, &x, &r1, &out);
        MP_ASSERT(mp_plan_set_input(p, x, in, 32) == MP_OK && mp_plan_forward(p) == MP_OK);
        CHECK(mp_plan_read(p, out, got, 32) == MP_OK, "the output reads: %s", mp_last_error());
        const mp_status s = mp_plan_read(p, r1, got, 32);
        if (!keep) {
            CHECK(s == MP_ERR_INVALID_ARG && strstr(mp_last_error(), "'r1'") &&
                      strstr(mp_last_error(), "mp_graph_mark_output"),
                  "an intermediate later nodes overwrite is refused, naming it: %d %s", s, mp_last_error());
        } else {
            int wrong = 0;
            for (int i = 0; i < 32; i++) wrong += got[i] != (in[i] > 0 ? in[i] : 0.f);
            CHECK(s == MP_OK && wrong == 0, "r1 marked an output reads relu(x): %d wrong (%s)", wrong,
                  s == MP_OK ? "" : mp_last_error());
        }
        mp_plan_destroy(p);
        mp_graph_destroy(g);
    }

    enum { B = 2 };
    net n = build_net();
    mp_graph_init_params(n.g, 3);
    mp_plan *p = NULL;
    MP_ASSERT(mp_plan_create(n.g, (mp_plan_opts){.batch = B, .training = true, .loss = n.loss}, &p) == MP_OK);
    float x[B * 2 * 5 * 5], c1[B * 3 * 5 * 5];
    int32_t y[B] = {1, 3};
    for (int i = 0; i < B * 2 * 5 * 5; i++) x[i] = (float)((i * 37) % 11) / 11.f - 0.5f;
    const mp_node c1_node = mp_graph_find(n.g, "c1");
    MP_ASSERT(mp_plan_set_input(p, n.in, x, sizeof x / sizeof x[0]) == MP_OK &&
              mp_plan_set_labels(p, n.labels, y, B) == MP_OK && mp_plan_forward(p) == MP_OK);
    CHECK(mp_plan_read(p, c1_node, c1, sizeof c1 / sizeof c1[0]) == MP_OK,
          "c1 (its batch norm's backward reads it) reads after the forward: %s", mp_last_error());
    MP_ASSERT(mp_plan_backward(p, 1.f) == MP_OK);
    const mp_status s = mp_plan_read(p, c1_node, c1, sizeof c1 / sizeof c1[0]);
    CHECK(s == MP_ERR_INVALID_ARG && strstr(mp_last_error(), "after the backward"),
          "c1 after the backward is refused: %d %s", s, mp_last_error());
    float loss = 0;
    CHECK(mp_plan_read(p, n.loss, &loss, 1) == MP_OK && isfinite(loss), "the loss (an output) reads after the backward");
    MP_ASSERT(mp_plan_forward(p) == MP_OK);
    CHECK(mp_plan_read(p, c1_node, c1, sizeof c1 / sizeof c1[0]) == MP_OK, "c1 reads again after the next forward");
    mp_plan_destroy(p);
    mp_graph_destroy(n.g);
}

/* A batch norm whose ReLU the plan fuses into it holds relu(bn): reading it
 * is refused, the ReLU reads as the unfused plan's, and with fusion off the
 * batch norm reads (negatives included). */
static void test_read_fused(void) {
    float in[64], fused_relu[96], plain_relu[96], plain_bn[96];
    for (int i = 0; i < 64; i++) in[i] = (float)((i * 37) % 11) - 5.f;
    for (int fuse = 1; fuse >= 0; fuse--) {
        mp_graph *g = mp_graph_create();
        mp_node x = mp_graph_input(g, "x", 2, 4, 4);
        mp_node c = mp_conv2d(g, "c", x, (mp_conv_opts){.out_channels = 3, .kernel = 3, .padding = 1});
        mp_node bn = mp_batchnorm2d(g, "bn", c, (mp_batchnorm_opts){0});
        mp_node r = mp_relu(g, "r", bn);
        mp_graph_mark_output(g, r);
        mp_graph_init_params(g, 1);
        mp_plan *p = NULL;
        MP_ASSERT(mp_plan_create(g, (mp_plan_opts){.batch = 2, .no_fusion = !fuse}, &p) == MP_OK);
        MP_ASSERT(mp_plan_set_input(p, x, in, 64) == MP_OK && mp_plan_forward(p) == MP_OK);
        CHECK(mp_plan_read(p, r, fuse ? fused_relu : plain_relu, 96) == MP_OK, "the ReLU reads: %s", mp_last_error());
        const mp_status s = mp_plan_read(p, bn, plain_bn, 96);
        if (fuse && p->nodes[bn].relu_fused)
            CHECK(s == MP_ERR_INVALID_ARG && strstr(mp_last_error(), "'bn'"),
                  "the fused batch norm is refused, naming it: %d %s", s, mp_last_error());
        if (!fuse) {
            int negative = 0;
            for (int i = 0; i < 96; i++) negative += plain_bn[i] < 0;
            CHECK(s == MP_OK && negative > 0, "unfused, the batch norm reads with its negatives (%d)", negative);
        }
        mp_plan_destroy(p);
        mp_graph_destroy(g);
    }
    CHECK(memcmp(fused_relu, plain_relu, sizeof fused_relu) == 0, "the fused ReLU reads as the unfused one");
}

/* After mp_plan_find_nonfinite_forward found an early non-finite output,
 * the loss and logits read as after the forward it replayed (the replay's
 * early nodes may have taken their memory). */
static void test_read_after_replay(void) {
    mp_graph *g = mp_graph_create();
    mp_node x = mp_graph_input(g, "x", 1, 4, 4);
    mp_node f = mp_flatten(g, "flat", x);
    mp_node a = mp_linear(g, "fa", f, (mp_linear_opts){.out_features = 64, .bias = true});
    mp_node sq = mp_mul(g, "sq", a, a); /* (1e9)^2 ... overflows f32 by sq3 */
    mp_node b = mp_linear(g, "fb", sq, (mp_linear_opts){.out_features = 64, .bias = true});
    mp_node sq2 = mp_mul(g, "sq2", b, b);
    mp_node sq3 = mp_mul(g, "sq3", sq2, sq2);
    mp_node logits = mp_linear(g, "fc", sq3, (mp_linear_opts){.out_features = 3, .bias = true});
    mp_node y = mp_graph_labels(g, "y");
    mp_node loss = mp_softmax_cross_entropy(g, "loss", logits, y);
    mp_graph_mark_output(g, loss);
    mp_graph_mark_output(g, logits);
    mp_graph_init_params(g, 1);
    for (int training = 0; training < 2; training++) {
        mp_plan *p = NULL;
        MP_ASSERT(mp_plan_create(g, (mp_plan_opts){.batch = 2, .training = training, .loss = loss, .reference = true},
                                 &p) == MP_OK);
        float in[32], l0, l1, c0[6], c1[6];
        for (int i = 0; i < 32; i++) in[i] = (float)(i % 5) * 1e9f;
        int32_t lab[2] = {0, 1};
        MP_ASSERT(mp_plan_set_input(p, x, in, 32) == MP_OK && mp_plan_set_labels(p, y, lab, 2) == MP_OK &&
                  mp_plan_forward(p) == MP_OK);
        MP_ASSERT(mp_plan_read(p, loss, &l0, 1) == MP_OK && mp_plan_read(p, logits, c0, 6) == MP_OK);
        if (training) MP_ASSERT(mp_plan_backward(p, 1.f) == MP_OK);
        mp_nonfinite_site site;
        MP_ASSERT(mp_plan_find_nonfinite_forward(p, &site) == MP_OK);
        CHECK(site.found && site.node < logits, "the replay finds an early overflow (node %d)", site.node);
        const bool read = mp_plan_read(p, loss, &l1, 1) == MP_OK && mp_plan_read(p, logits, c1, 6) == MP_OK;
        CHECK(read && memcmp(&l0, &l1, sizeof l0) == 0 && memcmp(c0, c1, sizeof c0) == 0,
              "%s plan: loss and logits after the replay as after the forward: %g / %g, %g / %g",
              training ? "training" : "inference", l0, l1, c0[0], c1[0]);
        mp_plan_destroy(p);
    }
    mp_graph_destroy(g);
}

/* The standard deviation of n floats about 0, and the largest |v|. */
static double rms_of(const float *v, int64_t n, double *max_abs) {
    double s = 0;
    *max_abs = 0;
    for (int64_t i = 0; i < n; i++) {
        s += (double)v[i] * v[i];
        if (fabs(v[i]) > *max_abs) *max_abs = fabs(v[i]);
    }
    return sqrt(s / (double)n);
}

/* mp_graph_init_params_scheme: He normal (the default, what
 * mp_graph_init_params gives bit for bit) or PyTorch's uniform
 * +-1/sqrt(fan_in) for conv, conv_transpose and linear weights; biases within
 * +-1/sqrt(fan_in) and batch norm's gamma 1 / beta 0 in both; a bad scheme
 * changes nothing. Weight tensors of 36 864 / 32 768 values: their rms is
 * within 3% of the scheme's. */
static void test_init_schemes(void) {
    mp_graph *g = mp_graph_create(), *h = mp_graph_create();
    for (int k = 0; k < 2; k++) {
        mp_graph *gg = k ? h : g;
        mp_node x = mp_graph_input(gg, "x", 64, 8, 8);
        x = mp_conv2d(gg, "conv", x, (mp_conv_opts){.out_channels = 64, .kernel = 3, .padding = 1, .bias = true});
        x = mp_batchnorm2d(gg, "bn", x, (mp_batchnorm_opts){0});
        x = mp_conv_transpose2d(gg, "up", x, (mp_conv_opts){.out_channels = 32, .kernel = 4, .stride = 2, .padding = 1});
        x = mp_flatten(gg, "flat", x);
        (void)mp_linear(gg, "fc", x, (mp_linear_opts){.out_features = 4, .bias = true});
        CHECK(mp_graph_status(gg) == MP_OK, "init graph: %s", mp_last_error());
    }
    mp_graph_init_params(g, 7);
    CHECK(mp_graph_init_params_scheme(h, 7, MP_INIT_SCHEME_HE) == MP_OK, "%s", mp_last_error());
    for (int i = 0; i < g->n_params; i++)
        CHECK(!memcmp(g->params[i].data, h->params[i].data, mp_shape_numel(&g->params[i].spec.shape) * sizeof(float)),
              "mp_graph_init_params and MP_INIT_SCHEME_HE differ in parameter %d", i);
    for (int s = 0; s < 2; s++) {
        const bool torch = s == 1;
        CHECK(mp_graph_init_params_scheme(h, 7, torch ? MP_INIT_SCHEME_TORCH : MP_INIT_SCHEME_HE) == MP_OK, "%s",
              mp_last_error());
        for (int i = 0; i < h->n_params; i++) {
            const mp_gparam *p = &h->params[i];
            const int64_t n = mp_shape_numel(&p->spec.shape);
            const double fan = p->spec.fan_in > 0 ? p->spec.fan_in : 1, bound = 1 / sqrt(fan);
            double max_abs = 0;
            const double rms = rms_of(p->data, n, &max_abs);
            if (p->spec.init == MP_INIT_HE_NORMAL) { /* conv, up, fc weights */
                const double want = torch ? bound / sqrt(3.0) : sqrt(2.0 / fan);
                if (n > 10000)
                    CHECK(fabs(rms / want - 1) < 0.03, "%s %s weight %d: rms %.5f, want %.5f", torch ? "torch" : "he",
                          p->spec.name, i, rms, want);
                CHECK(torch ? max_abs <= bound : max_abs > bound, "%s weight %d: largest |w| %.4f against bound %.4f",
                      torch ? "torch" : "he", i, max_abs, bound);
            } else if (p->spec.init == MP_INIT_UNIFORM_FAN_IN) {
                CHECK(max_abs <= bound && max_abs > 0, "bias %d: largest %.4f, bound %.4f", i, max_abs, bound);
            } else {
                const float want = p->spec.init == MP_INIT_ONE ? 1.f : 0.f;
                for (int64_t j = 0; j < n; j++) CHECK(p->data[j] == want, "parameter %d[%lld] = %g", i, (long long)j, p->data[j]);
            }
        }
    }
    /* a scheme that is not one: an error naming it, and the values stay */
    const float before = h->params[0].data[0];
    CHECK_ERR(mp_graph_init_params_scheme(h, 8, (mp_init_scheme)7), MP_ERR_INVALID_ARG, "scheme 7");
    CHECK(h->params[0].data[0] == before, "a refused scheme changed the weights");
    mp_init_scheme sc = MP_INIT_SCHEME_HE;
    CHECK(mp_init_scheme_parse("torch", &sc) == MP_OK && sc == MP_INIT_SCHEME_TORCH, "parse torch");
    CHECK(mp_init_scheme_parse("he", &sc) == MP_OK && sc == MP_INIT_SCHEME_HE, "parse he");
    CHECK_ERR(mp_init_scheme_parse("Torch", &sc), MP_ERR_INVALID_ARG, "'Torch'", "he, torch");
    mp_graph_destroy(g);
    mp_graph_destroy(h);
}

int main(void) {
    test_init_schemes();
    test_graph_gradients();
    test_arena_planner();
    test_no_allocation_in_step();
    test_errors();
    test_share_params_refusals();
    test_labels_only_to_losses();
    test_control_char_names();
    test_null_args();
    test_size_limits();
    test_nonfinite_options();
    test_param_set_negative_variance();
    test_read_kept();
    test_read_fused();
    test_read_after_replay();
    return test_summary("test_graph");
}
