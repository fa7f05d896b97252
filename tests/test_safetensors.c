/* test_safetensors.c — safetensors checkpoints: round trips of every dtype
 * (scalars, empty and 8-d tensors), the exact bytes of tiny files, JSON
 * escaping, every corrupt-file case (MP_ERR_FORMAT naming the file), bad
 * writer arguments, and atomic replacement (a failed write leaves the old
 * file intact and no temporary file). When python3 can import the reference
 * `safetensors` package, it also reads every file written here and must lay
 * the same tensors out identically. Files go to a temp dir. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "scratch_dir.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "io/safetensors_internal.h"

static char tmp[4096];
static bool have_python; /* python3 imports the reference package */

static const char *tpath(const char *name) { return scratch_path(tmp, name); }

/* A disk that fills up once the header is written (the first two writes:
 * its length and its JSON), and an fsync and a rename that fail (EIO). */
static int writes;
static ssize_t full_disk_write(int fd, const void *buf, size_t n) {
    if (++writes > 2) {
        errno = ENOSPC;
        return -1;
    }
    return write(fd, buf, n);
}
static int failing_fsync(int fd) {
    (void)fd;
    errno = EIO;
    return -1;
}
static int failing_rename(const char *from, const char *to) {
    (void)from, (void)to;
    errno = EIO;
    return -1;
}

static void spit(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f || (len && fwrite(data, 1, len, f) != len) || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
}

/* The whole file (NUL-terminated for convenience); NULL if unreadable. */
static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    if (fread(b, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(b);
        return NULL;
    }
    fclose(f);
    b[n] = 0;
    *len = (size_t)n;
    return b;
}

/* A file: 8-byte little-endian length of `header`, the header, then dlen
 * bytes of a 0,1,2,... pattern. */
static const char *craft(const char *name, const char *header, size_t dlen) {
    const char *path = tpath(name);
    size_t h = strlen(header);
    unsigned char *b = malloc(8 + h + dlen);
    for (int k = 0; k < 8; k++) b[k] = (unsigned char)((uint64_t)h >> (8 * k));
    memcpy(b + 8, header, h);
    for (size_t i = 0; i < dlen; i++) b[8 + h + i] = (unsigned char)i;
    spit(path, b, 8 + h + dlen);
    free(b);
    return path;
}

/* Names of directory entries starting with `prefix` (temporary files). */
static int count_prefixed(const char *prefix) {
    DIR *d = opendir(tmp);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
    if (d) closedir(d);
    return n;
}

/* The reference package reads `path` (n tensors) and, re-serializing what it
 * read, lays it out the same way (byte for byte with at most one metadata key). */
static const char *py_script;
static void check_with_python(const char *path, int n) {
    if (!have_python) return;
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "python3 '%s' '%s' %d", py_script, path, n);
    CHECK(system(cmd) == 0, "the reference safetensors package rejects or re-lays %s", path);
}

static void write_py_script(void) {
    static const char src[] =
        "import ctypes, json, struct, sys\n"
        "import safetensors as st\n"
        "path, want = sys.argv[1], int(sys.argv[2])\n"
        "raw = open(path, 'rb').read()\n"
        "items = st.deserialize(raw)\n"
        "n = struct.unpack('<Q', raw[:8])[0]\n"
        "header = json.loads(raw[8:8 + n])\n"
        "meta = header.get('__metadata__')\n"
        "if len(items) != want:\n"
        "    sys.exit('%d tensors, expected %d' % (len(items), want))\n"
        "names = {'F64': 'float64', 'F32': 'float32', 'I32': 'int32', 'BF16': 'bfloat16', 'F16': 'float16'}\n"
        "keep, specs = [], {}\n"
        "for name, t in items:\n"
        "    data = bytes(t['data'])\n"
        "    if hasattr(st, 'TensorSpec'):\n"
        "        buf = ctypes.create_string_buffer(data, max(len(data), 1))\n"
        "        keep.append(buf)\n"
        "        specs[name] = st.TensorSpec(dtype=names[t['dtype']], shape=t['shape'],\n"
        "                                    data_ptr=ctypes.addressof(buf), data_len=len(data))\n"
        "    else:\n"
        "        specs[name] = {'dtype': names[t['dtype']], 'shape': t['shape'], 'data': data}\n"
        "ref = st.serialize(specs, meta)\n"
        "m = struct.unpack('<Q', ref[:8])[0]\n"
        "if json.loads(ref[8:8 + m]) != header or ref[8 + m:] != raw[8 + n:]:\n"
        "    sys.exit(path + ': the reference writer lays these tensors out differently')\n"
        "if (meta is None or len(meta) <= 1) and ref != raw:\n"
        "    sys.exit(path + ': the reference writer writes different bytes')\n";
    py_script = tpath("check_st.py");
    spit(py_script, src, sizeof src - 1);
    have_python = system("python3 -c 'import safetensors' >/dev/null 2>&1") == 0;
}

static mp_st_tensor T(const char *name, mp_dtype dt, int ndim, const int64_t *dims, const void *data) {
    mp_st_tensor t = {.name = name, .dtype = dt, .ndim = ndim, .data = data};
    for (int i = 0; i < ndim; i++) t.dims[i] = dims[i];
    return t;
}

static size_t numel(const mp_st_tensor *t) {
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (size_t)t->dims[i];
    return n;
}

/* Every tensor of `want` comes back with its dtype, shape and bytes, aligned. */
static void check_contents(const char *path, const mp_st_tensor *want, int n) {
    mp_st_file *f = NULL;
    CHECK_ERR(mp_safetensors_open(path, &f), MP_OK);
    if (!f) return;
    CHECK(mp_safetensors_count(f) == n, "%s: %d tensors, expected %d", path, mp_safetensors_count(f), n);
    for (int i = 0; i < n; i++) {
        mp_st_tensor got;
        mp_status s = mp_safetensors_get(f, want[i].name, &got);
        CHECK(s == MP_OK, "%s: get '%s': %s", path, want[i].name, mp_last_error());
        if (s != MP_OK) continue;
        CHECK(strcmp(got.name, want[i].name) == 0, "name %s", got.name);
        CHECK(got.dtype == want[i].dtype, "%s: dtype %d, expected %d", want[i].name, got.dtype, want[i].dtype);
        CHECK(got.ndim == want[i].ndim, "%s: ndim %d, expected %d", want[i].name, got.ndim, want[i].ndim);
        for (int d = 0; d < want[i].ndim && d < got.ndim; d++)
            CHECK(got.dims[d] == want[i].dims[d], "%s: dim %d is %lld", want[i].name, d, (long long)got.dims[d]);
        size_t bytes = numel(&want[i]) * mp_dtype_size(want[i].dtype);
        CHECK(bytes == 0 || memcmp(got.data, want[i].data, bytes) == 0, "%s: data differs", want[i].name);
        CHECK((uintptr_t)got.data % mp_dtype_size(want[i].dtype) == 0, "%s: data misaligned", want[i].name);
    }
    mp_safetensors_close(f);
}

/* ---- writer and round trips --------------------------------------------- */

static void test_empty_file(void) {
    const char *p = tpath("probe.safetensors");
    CHECK_ERR(mp_safetensors_write(p, NULL, 0, NULL, NULL, 0), MP_OK);
    mp_st_file *f = NULL;
    mp_status s = mp_safetensors_open(p, &f);
    CHECK(s == MP_OK && f && mp_safetensors_count(f) == 0 && mp_safetensors_meta_count(f) == 0, "empty file: %s",
          mp_last_error());
    mp_safetensors_close(f);
}

static void test_roundtrip(void) {
    float w[6];
    for (int i = 0; i < 6; i++) w[i] = (float)i * 0.5f - 1.0f;
    mp_f16 h[5];
    for (int i = 0; i < 5; i++) h[i] = mp_f32_to_f16((float)i * 0.25f - 0.3f);
    mp_bf16 b[6];
    for (int i = 0; i < 6; i++) b[i] = mp_f32_to_bf16((float)i * 1e-3f + 3.0f);
    double step = 1234.5, deep[2] = {-1e300, 4.9e-324};
    int32_t lab = -7;
    float uni = 42.0f, weird[2] = {1.0f, -0.0f};
    const int64_t d_w[] = {2, 3, 1, 1}, d_h[] = {5}, d_b[] = {3, 1, 2}, d_one[] = {1}, d_empty[] = {0, 4},
                  d_deep[] = {1, 1, 1, 1, 1, 1, 1, 2}, d_two[] = {2};
    mp_st_tensor ts[] = {
        T("conv1.weight", MP_DTYPE_F32, 4, d_w, w),
        T("bn.mean", MP_DTYPE_F16, 1, d_h, h),
        T("bn.var", MP_DTYPE_BF16, 3, d_b, b),
        T("step", MP_DTYPE_F64, 0, NULL, &step),
        T("labels", MP_DTYPE_I32, 1, d_one, &lab),
        T("empty", MP_DTYPE_F32, 2, d_empty, NULL),
        T("deep", MP_DTYPE_F64, 8, d_deep, deep),
        T("\xc3\xbcn\xc3\xaf" "code.name", MP_DTYPE_F32, 1, d_one, &uni),
        T("we\"ird\\name", MP_DTYPE_F32, 1, d_two, weird),
    };
    const int n = (int)(sizeof ts / sizeof ts[0]);
    const char *keys[] = {"note", "framework"};
    const char *vals[] = {"line1\nq\"b\\\x01 \xc3\xa9", "mixprec"};

    const char *p = tpath("roundtrip.safetensors");
    CHECK_ERR(mp_safetensors_write(p, ts, n, keys, vals, 2), MP_OK);
    CHECK(count_prefixed("roundtrip.safetensors.tmp") == 0, "temporary file left behind");
    size_t len = 0;
    unsigned char *raw = slurp(p, &len);
    uint64_t hl = 0;
    for (int k = 0; k < 8; k++) hl |= (uint64_t)raw[k] << (8 * k);
    CHECK(hl % 8 == 0 && 8 + hl <= len, "header length %llu", (unsigned long long)hl);
    CHECK(raw[8 + hl - 1] == '}' || raw[8 + hl - 1] == ' ', "header end");
    /* data size: 24 + 10 + 12 + 8 + 4 + 0 + 16 + 4 + 8 */
    CHECK(len == 8 + hl + 86, "file is %zu bytes, header %llu", len, (unsigned long long)hl);
    free(raw);
    check_with_python(p, n);

    check_contents(p, ts, n);
    mp_st_file *f = NULL;
    CHECK_ERR(mp_safetensors_open(p, &f), MP_OK);
    if (f) {
        /* file order: widest dtype first, then by name */
        const char *order[] = {"deep", "step", "conv1.weight", "empty", "we\"ird\\name",
                               "\xc3\xbcn\xc3\xaf" "code.name", "labels", "bn.var", "bn.mean"};
        for (int i = 0; i < n && i < mp_safetensors_count(f); i++)
            CHECK(strcmp(mp_safetensors_name(f, i), order[i]) == 0, "name %d is '%s', expected '%s'", i,
                  mp_safetensors_name(f, i), order[i]);
        CHECK(mp_safetensors_meta(f, "note") && strcmp(mp_safetensors_meta(f, "note"), vals[0]) == 0,
              "note = %s", mp_safetensors_meta(f, "note"));
        CHECK(mp_safetensors_meta(f, "framework") && strcmp(mp_safetensors_meta(f, "framework"), "mixprec") == 0,
              "framework");
        CHECK(mp_safetensors_meta(f, "absent") == NULL, "absent key");
        CHECK(mp_safetensors_meta_count(f) == 2, "meta count %d", mp_safetensors_meta_count(f));
        CHECK(mp_safetensors_meta_count(f) == 2 && strcmp(mp_safetensors_meta_key(f, 0), "framework") == 0 &&
                  strcmp(mp_safetensors_meta_key(f, 1), "note") == 0,
              "metadata written sorted by key");
        mp_st_tensor t;
        CHECK_ERR(mp_safetensors_get(f, "nope", &t), MP_ERR_FORMAT, p, "no tensor named 'nope'");
        CHECK_ERR(mp_safetensors_get(f, "step", &t), MP_OK);
        CHECK(t.ndim == 0 && *(const double *)t.data == 1234.5, "0-d f64");
        mp_safetensors_close(f);
    }

    /* no metadata: no "__metadata__" at all, as the reference writer */
    const char *p2 = tpath("nometa.safetensors");
    CHECK_ERR(mp_safetensors_write(p2, ts, 5, NULL, NULL, 0), MP_OK);
    raw = slurp(p2, &len);
    CHECK(raw && !memmem(raw, len, "__metadata__", 12), "nometa has a __metadata__ entry");
    free(raw);
    check_with_python(p2, 5);
    check_contents(p2, ts, 5);
    f = NULL;
    CHECK_ERR(mp_safetensors_open(p2, &f), MP_OK);
    if (f) CHECK(mp_safetensors_meta_count(f) == 0 && !mp_safetensors_meta(f, "note"), "no metadata");
    mp_safetensors_close(f);

    /* one 1-element tensor of each dtype, reference-identical bytes */
    static const char *const one_names[] = {"f32", "f16", "bf16", "f64", "i32"};
    const double v64 = 0.1;
    const float v32 = 0.1f;
    const mp_f16 v16 = mp_f32_to_f16(0.1f);
    const mp_bf16 vb16 = mp_f32_to_bf16(0.1f);
    const int32_t vi = 123456789;
    const void *vals1[] = {&v32, &v16, &vb16, &v64, &vi};
    mp_st_tensor one[5];
    for (int i = 0; i < 5; i++) one[i] = T(one_names[i], (mp_dtype)i, 1, d_one, vals1[i]);
    const char *step_k[] = {"step"}, *step_v[] = {"812"};
    const char *p3 = tpath("ones.safetensors");
    CHECK_ERR(mp_safetensors_write(p3, one, 5, step_k, step_v, 1), MP_OK);
    check_with_python(p3, 5);
    check_contents(p3, one, 5);
}

/* The format pinned byte for byte (these are also what the reference writes). */
static void test_exact_bytes(void) {
    const mp_f16 hb[2] = {{0x3c00}, {0xc000}}; /* 1, -2 */
    const float a = 1.5f;
    const int64_t d2[] = {2};
    mp_st_tensor ts[] = {T("b", MP_DTYPE_F16, 1, d2, hb), T("a", MP_DTYPE_F32, 0, NULL, &a)};
    const char *k[] = {"step"}, *v[] = {"7"};
    const char *p = tpath("tiny.safetensors");
    CHECK_ERR(mp_safetensors_write(p, ts, 2, k, v, 1), MP_OK);
    static const char want[] =
        "\x88\0\0\0\0\0\0\0"
        "{\"__metadata__\":{\"step\":\"7\"},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
        "\"b\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[4,8]}}  "
        "\x00\x00\xc0\x3f"
        "\x00\x3c\x00\xc0";
    size_t len = 0;
    unsigned char *got = slurp(p, &len);
    CHECK(got && len == sizeof want - 1 && memcmp(got, want, len) == 0, "tiny file differs (%zu bytes, want %zu)",
          len, sizeof want - 1);
    free(got);
    check_with_python(p, 2);

    /* nothing at all: the reference writer's "{}" padded to 8 */
    const char *pe = tpath("nothing.safetensors");
    CHECK_ERR(mp_safetensors_write(pe, NULL, 0, NULL, NULL, 0), MP_OK);
    got = slurp(pe, &len);
    CHECK(got && len == 16 && memcmp(got, "\x08\0\0\0\0\0\0\0{}      ", 16) == 0, "empty file differs");
    free(got);
    check_with_python(pe, 0);

    /* escaping as serde_json: \" \\ \n \t \b \f \r, \u00xx for other controls,
     * DEL, '/' and UTF-8 as is */
    const char *ek[] = {"k"};
    const char *ev[] = {"l1\nl2\t\b\f\r\x01\x1f\x7f/\xc3\xa9\"\\"};
    const int64_t d1[] = {1};
    mp_st_tensor q = T("q\"b\\s/\xe2\x82\xac", MP_DTYPE_F32, 1, d1, &a);
    const char *pq = tpath("escape.safetensors");
    CHECK_ERR(mp_safetensors_write(pq, &q, 1, ek, ev, 1), MP_OK);
    got = slurp(pq, &len);
    const char *want_hdr = "{\"__metadata__\":{\"k\":\"l1\\nl2\\t\\b\\f\\r\\u0001\\u001f\x7f/\xc3\xa9\\\"\\\\\"},"
                           "\"q\\\"b\\\\s/\xe2\x82\xac\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    CHECK(got && len > 8 + strlen(want_hdr) && memcmp(got + 8, want_hdr, strlen(want_hdr)) == 0,
          "escaped header differs: %.*s", got ? (int)len - 8 : 0, got ? (const char *)got + 8 : "");
    free(got);
    check_with_python(pq, 1);
    mp_st_file *f = NULL;
    CHECK_ERR(mp_safetensors_open(pq, &f), MP_OK);
    if (f) {
        CHECK(strcmp(mp_safetensors_name(f, 0), q.name) == 0, "escaped name read back as %s",
              mp_safetensors_name(f, 0));
        CHECK(strcmp(mp_safetensors_meta(f, "k"), ev[0]) == 0, "escaped value read back");
    }
    mp_safetensors_close(f);
}

static void test_write_args(void) {
    const char *p = tpath("args.safetensors");
    const float x[4] = {1, 2, 3, 4};
    const int64_t d4[] = {4}, dneg[] = {-1}, dbig[] = {INT64_MAX, 2};
    mp_st_tensor good = T("w", MP_DTYPE_F32, 1, d4, x);
    CHECK_ERR(mp_safetensors_write(p, &good, 1, NULL, NULL, 0), MP_OK);
    size_t len0 = 0, len = 0;
    unsigned char *before = slurp(p, &len0);

    mp_st_tensor dup[] = {T("w", MP_DTYPE_F32, 1, d4, x), T("w", MP_DTYPE_F16, 1, d4, x)};
    CHECK_ERR(mp_safetensors_write(p, dup, 2, NULL, NULL, 0), MP_ERR_INVALID_ARG, p, "'w' appears twice");
    mp_st_tensor t = good;
    t.name = "";
    CHECK_ERR(mp_safetensors_write(p, &t, 1, NULL, NULL, 0), MP_ERR_INVALID_ARG, p, "is empty");
    t.name = NULL;
    CHECK_ERR(mp_safetensors_write(p, &t, 1, NULL, NULL, 0), MP_ERR_INVALID_ARG, p, "no name");
    t.name = "a\nb";
    CHECK_ERR(mp_safetensors_write(p, &t, 1, NULL, NULL, 0), MP_ERR_INVALID_ARG, p, "control character");
    t.name = "bad\xff";
    CHECK_ERR(mp_safetensors_write(p, &t, 1, NULL, NULL, 0), MP_ERR_INVALID_ARG, p, "not valid UTF-8");
    t.name = "over\xc0\xaflong";
    CHECK_ERR(mp_safetensors_write(p, &t, 1, NULL, NULL, 0), MP_ERR_INVALID_ARG, p, "not valid UTF-8");
    t.name = "__metadata__";
    CHECK_ERR(mp_safetensors_write(p, &t, 1, NULL, NULL, 0), MP_ERR_INVALID_ARG, p, "reserved");
    t = good;
    t.ndim = 9;
    CHECK_ERR(mp_safetensors_write(p, &t, 1, NULL, NULL, 0), MP_ERR_INVALID_ARG, p, "9 dimensions");
    t = T("w", MP_DTYPE_F32, 1, dneg, x);
    CHECK_ERR(mp_safetensors_write(p, &t, 1, NULL, NULL, 0), MP_ERR_INVALID_ARG, p, "dimension 0 is -1");
    t = T("w", MP_DTYPE_F32, 2, dbig, x);
    CHECK_ERR(mp_safetensors_write(p, &t, 1, NULL, NULL, 0), MP_ERR_INVALID_ARG, p, "too many elements");
    t = good;
    t.data = NULL;
    CHECK_ERR(mp_safetensors_write(p, &t, 1, NULL, NULL, 0), MP_ERR_INVALID_ARG, p, "data is NULL");
    t = good;
    t.dtype = MP_DTYPE_COUNT;
    CHECK_ERR(mp_safetensors_write(p, &t, 1, NULL, NULL, 0), MP_ERR_INVALID_ARG, p, "unknown dtype");
    const char *k2[] = {"a", "a"}, *v2[] = {"1", "2"};
    CHECK_ERR(mp_safetensors_write(p, &good, 1, k2, v2, 2), MP_ERR_INVALID_ARG, p, "key 'a' appears twice");
    const char *kbad[] = {"k"}, *vbad[] = {"\xed\xa0\x80"}; /* a UTF-16 surrogate */
    CHECK_ERR(mp_safetensors_write(p, &good, 1, kbad, vbad, 1), MP_ERR_INVALID_ARG, p, "not valid UTF-8");
    const char *knull[] = {NULL};
    CHECK_ERR(mp_safetensors_write(p, &good, 1, knull, v2, 1), MP_ERR_INVALID_ARG, p, "NULL key");
    const char *kempty[] = {""};
    CHECK_ERR(mp_safetensors_write(p, &good, 1, kempty, v2, 1), MP_ERR_INVALID_ARG, p, "is empty");
    CHECK_ERR(mp_safetensors_write(p, NULL, 1, NULL, NULL, 0), MP_ERR_INVALID_ARG, p);
    CHECK_ERR(mp_safetensors_write("", &good, 1, NULL, NULL, 0), MP_ERR_INVALID_ARG, "empty output path");

    unsigned char *after = slurp(p, &len);
    CHECK(after && len == len0 && memcmp(before, after, len) == 0, "a rejected write changed the file");
    CHECK(count_prefixed("args.safetensors.tmp") == 0, "temporary file left behind");
    free(before);
    free(after);
}

/* A failed write leaves the previous file as it was and no temporary file. */
static void test_atomic(void) {
    const char *p = tpath("ckpt.safetensors");
    const float oldv[3] = {1, 2, 3};
    float newv[1000];
    for (int i = 0; i < 1000; i++) newv[i] = (float)i;
    const int64_t d3[] = {3}, d1000[] = {10, 100};
    mp_st_tensor old_t = T("fc.weight", MP_DTYPE_F32, 1, d3, oldv);
    mp_st_tensor new_t[] = {T("fc.weight", MP_DTYPE_F32, 2, d1000, newv), T("fc.bias", MP_DTYPE_F32, 1, d3, oldv)};
    CHECK_ERR(mp_safetensors_write(p, &old_t, 1, NULL, NULL, 0), MP_OK);
    size_t len0 = 0, len = 0;
    unsigned char *before = slurp(p, &len0);

    const char *nodir = tpath("no-such-dir/ckpt.safetensors");
    CHECK_ERR(mp_safetensors_write(nodir, &old_t, 1, NULL, NULL, 0), MP_ERR_IO, nodir, "does not exist");

    static const struct {
        const char *stage, *err;
        mp_st_file_ops ops;
    } fails[] = {{"data", "No space left on device", {.write = full_disk_write, .fsync = fsync, .rename = rename}},
                 {"fsync", "Input/output error", {.write = write, .fsync = failing_fsync, .rename = rename}},
                 {"rename", "Input/output error", {.write = write, .fsync = fsync, .rename = failing_rename}}};
    for (int i = 0; i < 3; i++) {
        writes = 0;
        mp_st_set_file_ops(&fails[i].ops);
        CHECK_ERR(mp_safetensors_write(p, new_t, 2, NULL, NULL, 0), MP_ERR_IO, p, fails[i].err, "temporary file");
        mp_st_set_file_ops(NULL);
        unsigned char *after = slurp(p, &len);
        CHECK(after && len == len0 && memcmp(before, after, len) == 0, "failed write at '%s' changed the file",
              fails[i].stage);
        free(after);
        CHECK(count_prefixed("ckpt.safetensors.tmp") == 0, "temporary file left behind after '%s'", fails[i].stage);
        check_contents(p, &old_t, 1);
    }

    /* a directory in the way: refused before anything is written */
    const char *dir = tpath("adir");
    mkdir(dir, 0755);
    CHECK_ERR(mp_safetensors_write(dir, &old_t, 1, NULL, NULL, 0), MP_ERR_IO, dir, "is a directory");
    CHECK(count_prefixed("adir.tmp") == 0, "temporary file left behind next to a directory");

    /* and a good write replaces the old file */
    CHECK_ERR(mp_safetensors_write(p, new_t, 2, NULL, NULL, 0), MP_OK);
    CHECK(count_prefixed("ckpt.safetensors.tmp") == 0, "temporary file left behind");
    unsigned char *after = slurp(p, &len);
    CHECK(after && len > len0 + 4000, "file not replaced (%zu bytes)", len);
    free(after);
    free(before);
    check_contents(p, new_t, 2);
    check_with_python(p, 2);
}

/* ---- reader: what it accepts and everything it rejects ------------------ */

static void expect_bad(const char *name, const char *header, size_t dlen, const char *needle) {
    const char *p = craft(name, header, dlen);
    mp_st_file *f = (mp_st_file *)&f;
    mp_status s = mp_safetensors_open(p, &f);
    if (getenv("MP_TEST_VERBOSE")) printf("  [%s] %s\n", mp_status_name(s), mp_last_error());
    CHECK(s == MP_ERR_FORMAT, "%s: status %s: %s", name, mp_status_name(s), mp_last_error());
    CHECK(strstr(mp_last_error(), p), "%s: message lacks the path: %s", name, mp_last_error());
    CHECK(strstr(mp_last_error(), needle), "%s: message lacks '%s': %s", name, needle, mp_last_error());
    if (s == MP_OK) mp_safetensors_close(f);
    else CHECK(f == NULL, "%s: out not cleared", name);
}

#define E(dt, shape, b, e) "{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static void test_reader_rejects(void) {
    /* sizes and lengths */
    const char *p = tpath("short.safetensors");
    spit(p, "\x02\0\0\0\0", 5);
    CHECK_ERR(mp_safetensors_open(p, &(mp_st_file *){NULL}), MP_ERR_FORMAT, p, "5 bytes, shorter than the 8-byte");
    p = tpath("zero.safetensors");
    spit(p, "", 0);
    CHECK_ERR(mp_safetensors_open(p, &(mp_st_file *){NULL}), MP_ERR_FORMAT, p, "0 bytes");
    p = tpath("huge.safetensors");
    spit(p, "\x00\xc2\xeb\x0b\0\0\0\0{}      ", 16); /* 200000000 */
    CHECK_ERR(mp_safetensors_open(p, &(mp_st_file *){NULL}), MP_ERR_FORMAT, p, "header length 200000000 is over");
    p = tpath("absurd.safetensors");
    spit(p, "\xff\xff\xff\xff\xff\xff\xff\xff{}      ", 16);
    CHECK_ERR(mp_safetensors_open(p, &(mp_st_file *){NULL}), MP_ERR_FORMAT, p, "limit");
    p = tpath("past.safetensors");
    spit(p, "\x64\0\0\0\0\0\0\0{\"a\":1}", 15);
    CHECK_ERR(mp_safetensors_open(p, &(mp_st_file *){NULL}), MP_ERR_FORMAT, p, "header length 100 runs past the end");

    /* the header as text and JSON */
    expect_bad("utf8", "{\"\xff\":1}", 0, "not valid UTF-8 (at byte 2)");
    expect_bad("nojson", "{\"a\":", 0, "not valid JSON");
    expect_bad("emptyhdr", "", 0, "not valid JSON");
    expect_bad("array", "[1,2]   ", 0, "header is an array, not a JSON object");
    expect_bad("string", "\"x\"", 0, "header is a string, not a JSON object");
    expect_bad("after", "{} x", 0, "text after its top-level value at byte 3");
    expect_bad("two", "{}{}", 0, "text after");
    expect_bad("ctrl", "{\"a\x01\":{}}", 0, "control character 0x01 at byte 3");
    expect_bad("ctrlout", "{\x0c}", 0, "control character 0x0c");
    expect_bad("nul", "{\"a\\u0000b\":" E("F32", "[1]", 0, 4) "}", 4, "\\u0000");
    expect_bad("bom", "\xef\xbb\xbf{}", 0, "byte-order mark");
    expect_bad("surrogate", "{\"\\ud800\":" E("F32", "[1]", 0, 4) "}", 4, "not valid JSON");
    expect_bad("badescape", "{\"\\q\":1}", 0, "not valid JSON");

    /* entries */
    expect_bad("notobj", "{\"w\":5}", 0, "tensor 'w': entry is a number, not an object");
    expect_bad("nodtype", "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor 'w': no \"dtype\"");
    expect_bad("noshape", "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "tensor 'w': no \"shape\"");
    expect_bad("nooffs", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "tensor 'w': no \"data_offsets\"");
    expect_bad("dtypenum", "{\"w\":{\"dtype\":3,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
               "\"dtype\" is a number, not a string");
    expect_bad("dtype2", "{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
               "tensor 'w': \"dtype\" appears twice");
    expect_bad("unkdtype", "{\"w\":" E("F17", "[1]", 0, 4) "}", 4, "tensor 'w': unknown dtype 'F17'");
    expect_bad("lowerdtype", "{\"w\":" E("f32", "[1]", 0, 4) "}", 4, "unknown dtype 'f32'");
    expect_bad("shapeneg", "{\"w\":" E("F32", "[-1]", 0, 4) "}", 4, "\"shape\" has an entry that is not an integer");
    expect_bad("shapefrac", "{\"w\":" E("F32", "[1.5]", 0, 4) "}", 4, "\"shape\" has an entry");
    expect_bad("shapestr", "{\"w\":" E("F32", "[\"1\"]", 0, 4) "}", 4, "\"shape\" has an entry");
    expect_bad("shapebig", "{\"w\":" E("F32", "[9007199254740993]", 0, 4) "}", 4, "\"shape\" has an entry");
    expect_bad("shapenum", "{\"w\":" E("F32", "1", 0, 4) "}", 4, "\"shape\" is a number, not an array");
    expect_bad("offs3", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4,
               "\"data_offsets\" is not [begin, end]");
    expect_bad("offs1", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}", 4,
               "\"data_offsets\" is not [begin, end]");
    expect_bad("offsneg", "{\"w\":" E("F32", "[1]", -4, 0) "}", 4, "\"data_offsets\" is not [begin, end]");
    expect_bad("offsobj", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":{}}}", 4, "\"data_offsets\"");
    expect_bad("overflow", "{\"w\":" E("F32", "[4294967296,4294967296,16]", 0, 4) "}", 4,
               "tensor 'w': shape (4294967296, 4294967296, 16) of F32 is too large");
    expect_bad("f4odd", "{\"w\":" E("F4", "[3]", 0, 1) "}", 1, "shape (3) of F4 is not a whole number of bytes");

    /* offsets against the shape, the buffer and each other */
    expect_bad("ckpt.safetensors", "{\"fc.weight\":" E("F32", "[10,3]", 0, 100) "}", 100,
               "tensor 'fc.weight': data_offsets [0, 100] do not match shape (10, 3) of F32 (120 bytes)");
    expect_bad("scalar", "{\"s\":" E("F64", "[]", 0, 4) "}", 4, "do not match shape () of F64 (8 bytes)");
    expect_bad("backwards", "{\"w\":" E("F32", "[1]", 8, 4) "}", 8, "data_offsets [8, 4] end before they begin");
    expect_bad("outside", "{\"w\":" E("F32", "[2]", 0, 8) "}", 4,
               "tensor 'w': data_offsets [0, 8] run past the end of the 4-byte data buffer");
    expect_bad("overlap", "{\"a\":" E("F32", "[2]", 0, 8) ",\"b\":" E("F32", "[2]", 4, 12) "}", 12,
               "tensor 'b': data_offsets [4, 12] overlap tensor 'a' [0, 8]");
    expect_bad("same", "{\"a\":" E("F32", "[2]", 0, 8) ",\"b\":" E("I32", "[2]", 0, 8) "}", 8, "overlap tensor 'a'");
    expect_bad("gap", "{\"a\":" E("F32", "[1]", 0, 4) ",\"b\":" E("F32", "[1]", 8, 12) "}", 12,
               "bytes [4, 8) of the data buffer, between tensors 'a' and 'b', belong to no tensor");
    expect_bad("gapfirst", "{\"a\":" E("F32", "[1]", 4, 8) "}", 8,
               "bytes [0, 4) of the data buffer belong to no tensor");
    expect_bad("trailing", "{\"a\":" E("F32", "[1]", 0, 4) "}", 10, "6 trailing bytes after the last tensor");
    expect_bad("trailing0", "{}", 3, "3 trailing bytes");
    expect_bad("duptensor", "{\"a\":" E("F32", "[1]", 0, 4) ",\"a\":" E("F32", "[1]", 4, 8) "}", 8,
               "tensor 'a' appears twice");

    /* metadata */
    expect_bad("meta2", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, "\"__metadata__\" appears twice");
    expect_bad("metaarr", "{\"__metadata__\":[1]}", 0, "\"__metadata__\" is an array, not an object");
    expect_bad("metanum", "{\"__metadata__\":{\"k\":1}}", 0, "metadata 'k' is a number (metadata values must be");
    expect_bad("metaobj", "{\"__metadata__\":{\"k\":{}}}", 0, "metadata 'k' is an object");
    expect_bad("metadup", "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, "metadata key 'k' appears twice");

    /* truncated copies of a good file */
    const float v[4] = {1, 2, 3, 4};
    const int64_t d4[] = {4};
    mp_st_tensor t = T("w", MP_DTYPE_F32, 1, d4, v);
    const char *good = tpath("good.safetensors");
    CHECK_ERR(mp_safetensors_write(good, &t, 1, NULL, NULL, 0), MP_OK);
    size_t len = 0;
    unsigned char *raw = slurp(good, &len);
    const size_t cuts[] = {len - 1, len - 16, 40, 8, 7};
    const char *needles[] = {"run past the end of the 15-byte data buffer (truncated file?)",
                             "run past the end of the 0-byte", "runs past the end of the 40-byte file (truncated?)",
                             "runs past the end of the 8-byte file", "7 bytes, shorter than the 8-byte header"};
    for (int i = 0; i < 5; i++) {
        char name[64];
        snprintf(name, sizeof name, "cut%d.safetensors", i);
        const char *pc = tpath(name);
        spit(pc, raw, cuts[i]);
        CHECK_ERR(mp_safetensors_open(pc, &(mp_st_file *){NULL}), MP_ERR_FORMAT, pc, needles[i]);
    }
    free(raw);

    /* not a file */
    const char *missing = tpath("missing.safetensors");
    CHECK_ERR(mp_safetensors_open(missing, &(mp_st_file *){NULL}), MP_ERR_IO, missing, "not found");
    CHECK_ERR(mp_safetensors_open(tmp, &(mp_st_file *){NULL}), MP_ERR_IO, tmp, "is a directory");
}

/* Valid files other writers may produce. */
static void test_reader_accepts(void) {
    mp_st_file *f = NULL;
    mp_st_tensor t;
    /* unpadded, whitespace around, out of offset order, unknown extra fields,
     * null metadata: all fine for the reference reader too */
    const char *p = craft("loose.safetensors",
                          " \n{\"__metadata__\":null, \"b\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[4,8],"
                          "\"extra\":[1.5,{}]},\n\t\"a\":" E("F32", "[1]", 0, 4) "}\r\n",
                          8);
    CHECK_ERR(mp_safetensors_open(p, &f), MP_OK);
    if (f) {
        CHECK(mp_safetensors_count(f) == 2 && strcmp(mp_safetensors_name(f, 0), "a") == 0 &&
                  strcmp(mp_safetensors_name(f, 1), "b") == 0,
              "names in offset order");
        CHECK(mp_safetensors_meta_count(f) == 0, "null metadata");
        CHECK_ERR(mp_safetensors_get(f, "b", &t), MP_OK);
        CHECK(t.dtype == MP_DTYPE_I32 && *(const int32_t *)t.data == 0x07060504, "b data");
        mp_safetensors_close(f);
    }

    /* a misaligned tensor (F32 at byte 2) comes back aligned, same bytes */
    p = craft("misaligned.safetensors", "{\"h\":" E("F16", "[1]", 0, 2) ",\"f\":" E("F32", "[2]", 2, 10) "}", 10);
    CHECK_ERR(mp_safetensors_open(p, &f), MP_OK);
    if (f) {
        CHECK_ERR(mp_safetensors_get(f, "f", &t), MP_OK);
        const unsigned char want[8] = {2, 3, 4, 5, 6, 7, 8, 9};
        CHECK(t.data && (uintptr_t)t.data % 4 == 0 && memcmp(t.data, want, 8) == 0, "misaligned tensor");
        mp_safetensors_close(f);
    }

    /* dtypes and ranks mixprec does not use: the file opens, get refuses */
    p = craft("foreign.safetensors",
              "{\"step\":" E("I64", "[]", 0, 8) ",\"mask\":" E("U8", "[3]", 8, 11) ",\"ok\":" E("F16", "[0]", 11, 11)
              ",\"x9\":" E("BF16", "[1,1,1,1,1,1,1,1,1]", 11, 13) "}",
              13);
    CHECK_ERR(mp_safetensors_open(p, &f), MP_OK);
    if (f) {
        CHECK(mp_safetensors_count(f) == 4, "count");
        CHECK_ERR(mp_safetensors_get(f, "step", &t), MP_ERR_UNSUPPORTED, p, "'step' has dtype I64");
        CHECK_ERR(mp_safetensors_get(f, "mask", &t), MP_ERR_UNSUPPORTED, "dtype U8");
        CHECK_ERR(mp_safetensors_get(f, "x9", &t), MP_ERR_UNSUPPORTED, "9 dimensions");
        CHECK_ERR(mp_safetensors_get(f, "ok", &t), MP_OK);
        CHECK(t.dtype == MP_DTYPE_F16 && t.ndim == 1 && t.dims[0] == 0, "empty f16");
        CHECK_ERR(mp_safetensors_get(f, "fc.weight", &t), MP_ERR_FORMAT, p, "no tensor named 'fc.weight'");
        mp_safetensors_close(f);
    }
}

/* The header alone: names, shapes and metadata as mp_safetensors_open gives
 * them, no tensor bytes held (data NULL), none of them counted against the
 * host's memory; a header whose offsets run past the file is refused alike. */
static void test_header_only(void) {
    mp_st_file *f = NULL;
    mp_st_tensor t;
    const char *p = craft("header_only.safetensors",
                          "{\"__metadata__\":{\"mixprec.model\":\"small\"},\"fc.weight\":" E("F32", "[3,2]", 0, 24) "}",
                          24);
    setenv("MIXPREC_HOST_MEM_LIMIT", "1", 1); /* the 24 bytes of tensors would not fit: they are not asked for */
    CHECK_ERR(mp_safetensors_open(p, &f), MP_ERR_NOMEM, "the tensors of ", p);
    CHECK_ERR(mp_safetensors_open_header(p, &f), MP_OK);
    unsetenv("MIXPREC_HOST_MEM_LIMIT");
    if (f) {
        const char *m = mp_safetensors_meta(f, "mixprec.model");
        CHECK(m && !strcmp(m, "small"), "metadata from the header: %s", m ? m : "(none)");
        CHECK_ERR(mp_safetensors_get(f, "fc.weight", &t), MP_OK);
        CHECK(t.ndim == 2 && t.dims[0] == 3 && t.dims[1] == 2 && t.data == NULL, "shape %dx%d, data %p",
              t.ndim > 0 ? (int)t.dims[0] : -1, t.ndim > 1 ? (int)t.dims[1] : -1, t.data);
        mp_safetensors_close(f);
    }
    p = craft("header_only_short.safetensors", "{\"w\":" E("F32", "[4]", 0, 16) "}", 8);
    f = (mp_st_file *)&f;
    CHECK(mp_safetensors_open_header(p, &f) == MP_ERR_FORMAT && f == NULL, "offsets past the file: %s",
          mp_last_error());
}

int main(void) {
    scratch_dir_create(tmp, sizeof tmp, "test_safetensors");
    write_py_script();
    test_empty_file();
    test_exact_bytes();
    test_roundtrip();
    test_write_args();
    test_atomic();
    test_reader_rejects();
    test_reader_accepts();
    test_header_only();
    scratch_dir_remove(tmp);
    return test_summary("test_safetensors");
}
