/* test_npy.c — NumPy .npy datasets: every supported dtype and layout read to
 * the exact values written, format versions 1.0/2.0/3.0, the held-out split,
 * and each bad input with its message (bad magic, truncated, header parse
 * errors, unsupported and big-endian dtypes, fortran_order, count mismatch,
 * labels out of range, non-finite pixels). Files are written here. */
#define _GNU_SOURCE /* nftw in scratch_dir.h */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/error.h"
#include "data/dataset.h"
#include "data/npy.h"
#include "scratch_dir.h"

static char dir[4096];

/* Write a .npy file: version `major`, header dict `dict` (padded to a
 * multiple of 64 with spaces and '\n'), then `data`. */
static const char *write_raw(const char *name, int major, const char *dict, const void *data, size_t len) {
    const char *path = scratch_path(dir, name);
    FILE *f = fopen(path, "wb");
    const size_t pre = major == 1 ? 10 : 12, dl = strlen(dict);
    size_t hlen = dl + 1;
    while ((pre + hlen) % 64) hlen++;
    fwrite("\x93NUMPY", 1, 6, f);
    fputc(major, f);
    fputc(0, f);
    fputc((int)(hlen & 255), f);
    fputc((int)(hlen >> 8 & 255), f);
    if (major > 1) {
        fputc((int)(hlen >> 16 & 255), f);
        fputc((int)(hlen >> 24 & 255), f);
    }
    fwrite(dict, 1, dl, f);
    for (size_t i = dl; i + 1 < hlen; i++) fputc(' ', f);
    fputc('\n', f);
    if (len) fwrite(data, 1, len, f);
    fclose(f);
    return path;
}

static const char *write_npy(const char *name, const char *descr, const char *shape, const void *data, size_t len) {
    char dict[256];
    snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
    return write_raw(name, 1, dict, data, len);
}

static const char *write_bytes(const char *name, const void *data, size_t len) {
    const char *path = scratch_path(dir, name);
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, len, f);
    fclose(f);
    return path;
}

static void test_u8_3d(void) {
    uint8_t x[2 * 2 * 3];
    for (int i = 0; i < 12; i++) x[i] = (uint8_t)(i * 20);
    const int32_t y[2] = {1, 4};
    const char *xp = write_npy("u8.npy", "|u1", "(2, 2, 3)", x, sizeof x);
    const char *yp = write_npy("y_i32.npy", "<i4", "(2,)", y, sizeof y);
    mp_dataset d;
    CHECK(mp_dataset_load_npy(xp, yp, NULL, &d) == MP_OK, "%s", mp_last_error());
    CHECK(d.n == 2 && d.c == 1 && d.h == 2 && d.w == 3 && d.classes == 5, "shape %d %d %d %d classes %d", d.n, d.c,
          d.h, d.w, d.classes);
    bool same = true;
    for (int i = 0; i < 12; i++) same = same && d.images[i] == (float)(i * 20) / 255.0f;
    CHECK(same, "uint8 pixels scaled by 1/255");
    CHECK(d.labels[0] == 1 && d.labels[1] == 4, "labels %d %d", d.labels[0], d.labels[1]);
    CHECK(strstr(d.source, "u8.npy") != NULL, "source %s", d.source);
    mp_dataset_free(&d);
    /* one byte has no byte order: '>u1' (a big-endian array's uint8 view) is uint8 */
    xp = write_npy("u8be.npy", ">u1", "(2, 2, 3)", x, sizeof x);
    CHECK(mp_dataset_load_npy(xp, yp, NULL, &d) == MP_OK && d.images[11] == 220 / 255.0f, "'>u1': %s",
          mp_last_error());
    mp_dataset_free(&d);
}

/* (N, H, W, C) float32 with C = 3 is NHWC under auto; forced NCHW reads the
 * same bytes as (N, 2, 2, 3) -> c = 2. */
static void test_f32_layouts(void) {
    enum { N = 2, H = 2, W = 2, C = 3 };
    float x[N * H * W * C];
    for (int n = 0; n < N; n++)
        for (int y = 0; y < H; y++)
            for (int xx = 0; xx < W; xx++)
                for (int c = 0; c < C; c++) x[((n * H + y) * W + xx) * C + c] = 1000.0f * n + 100.0f * c + 10.0f * y + xx;
    const int64_t y64[N] = {0, 2};
    const char *xp = write_npy("nhwc.npy", "<f4", "(2, 2, 2, 3)", x, sizeof x);
    const char *yp = write_npy("y_i64.npy", "<i8", "(2,)", y64, sizeof y64);
    mp_dataset d;
    CHECK(mp_dataset_load_npy(xp, yp, &(mp_npy_opts){0}, &d) == MP_OK, "%s", mp_last_error());
    CHECK(d.c == 3 && d.h == 2 && d.w == 2, "auto NHWC: %dx%dx%d", d.c, d.h, d.w);
    bool same = true;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            for (int y = 0; y < H; y++)
                for (int xx = 0; xx < W; xx++)
                    same = same && d.images[((n * C + c) * H + y) * W + xx] == 1000.0f * n + 100.0f * c + 10.0f * y + xx;
    CHECK(same, "NHWC transposed to NCHW");
    CHECK(d.labels[1] == 2 && d.classes == 3, "int64 labels");
    mp_dataset_free(&d);
    CHECK(mp_dataset_load_npy(xp, yp, &(mp_npy_opts){.layout = MP_NPY_LAYOUT_NCHW}, &d) == MP_OK, "%s",
          mp_last_error());
    CHECK(d.c == 2 && d.h == 2 && d.w == 3 && d.images[5] == x[5], "forced NCHW: %dx%dx%d", d.c, d.h, d.w);
    mp_dataset_free(&d);
    /* NCHW under auto (last dimension 4) */
    float z[1 * 2 * 3 * 4];
    for (int i = 0; i < 24; i++) z[i] = (float)i * 0.5f;
    const uint8_t yu[1] = {7};
    xp = write_npy("nchw.npy", "<f4", "(1, 2, 3, 4)", z, sizeof z);
    yp = write_npy("y_u8.npy", "|u1", "(1,)", yu, sizeof yu);
    CHECK(mp_dataset_load_npy(xp, yp, NULL, &d) == MP_OK, "%s", mp_last_error());
    CHECK(d.c == 2 && d.h == 3 && d.w == 4 && d.images[23] == 11.5f && d.labels[0] == 7 && d.classes == 8,
          "auto NCHW %dx%dx%d", d.c, d.h, d.w);
    mp_dataset_free(&d);
    /* forced NHWC, classes given */
    CHECK(mp_dataset_load_npy(xp, yp, &(mp_npy_opts){.layout = MP_NPY_LAYOUT_NHWC, .classes = 10}, &d) == MP_OK,
          "%s", mp_last_error());
    CHECK(d.c == 4 && d.h == 2 && d.w == 3 && d.classes == 10 && d.images[1] == z[4], "forced NHWC");
    mp_dataset_free(&d);
}

/* Versions 2.0 and 3.0 (4-byte header length), double quotes, no trailing comma. */
static void test_versions(void) {
    const uint8_t x[4] = {0, 51, 102, 255};
    const uint8_t y[1] = {0};
    const char *yp = write_npy("y1.npy", "|u1", "(1,)", y, 1);
    for (int major = 2; major <= 3; major++) {
        char name[32];
        snprintf(name, sizeof name, "v%d.npy", major);
        const char *xp = write_raw(name, major, "{\"shape\": (1, 2, 2), \"fortran_order\": False, \"descr\": \"|u1\"}",
                                   x, 4);
        mp_dataset d;
        CHECK(mp_dataset_load_npy(xp, yp, NULL, &d) == MP_OK, "v%d: %s", major, mp_last_error());
        if (d.images) CHECK(d.images[1] == 51 / 255.0f && d.images[3] == 1.0f, "v%d values", major);
        mp_dataset_free(&d);
    }
    mp_npy_header h;
    const char *hp = "\x93NUMPY\x01\x00\x16\x00{'descr':'<f4','fortran_order':False,'shape':()}\n";
    CHECK(mp_npy_parse_header("h", (const unsigned char *)hp, 10, &h) != MP_OK, "header cut at the preamble");
}

static void test_split(void) {
    enum { N = 20 };
    uint8_t x[N];
    int32_t y[N];
    for (int i = 0; i < N; i++) x[i] = (uint8_t)i, y[i] = i % 4;
    mp_dataset all, tr, va;
    CHECK(mp_dataset_load_npy(write_npy("sx.npy", "|u1", "(20, 1, 1)", x, N), write_npy("sy.npy", "<i4", "(20,)", y,
                                                                                       sizeof y),
                              NULL, &all) == MP_OK, "%s", mp_last_error());
    CHECK(mp_dataset_split(&all, 0.25, &tr, &va) == MP_OK, "%s", mp_last_error());
    /* labels cycle with the period 1/f: every 4th sample would be all of class 3. floor(20 / 4) = 5 held out:
     * floor(5 / 4) = 1 per class, the fifth to class 0 (equal remainders: the lower label); class 0's 2 of 5
     * where floor((r + 1) 2 / 5) steps up (r = 2, 4: i = 8, 16), the others' last (i = 17, 18, 19) */
    CHECK(tr.n == 15 && va.n == 5 && va.classes == 4 && tr.classes == 4, "split %d + %d", tr.n, va.n);
    const int want[5] = {8, 16, 17, 18, 19};
    bool ok = va.n == 5;
    for (int k = 0; ok && k < va.n; k++)
        ok = fabsf(va.images[k] * 255.0f - (float)want[k]) < 1e-3f && va.labels[k] == want[k] % 4;
    CHECK(ok, "held out: 8 16 17 18 19, every class");
    for (int k = 0, i = 0; ok && k < tr.n; k++, i++) {
        while (i == 8 || i >= 16) i++;
        ok = tr.images[k] * 255.0f == (float)i;
    }
    CHECK(ok, "train keeps the rest in order");
    mp_dataset_free(&tr);
    mp_dataset_free(&va);
    /* one class of 100 at 0.29: 29 held out, though 100 x 0.29 is 28.999999999999996 in doubles */
    uint8_t x100[100];
    int32_t y100[100] = {0};
    for (int i = 0; i < 100; i++) x100[i] = (uint8_t)i;
    mp_dataset one;
    CHECK(mp_dataset_load_npy(write_npy("s1x.npy", "|u1", "(100, 1, 1)", x100, 100),
                              write_npy("s1y.npy", "<i4", "(100,)", y100, sizeof y100), NULL, &one) == MP_OK, "%s",
          mp_last_error());
    CHECK(mp_dataset_split(&one, 0.29, &tr, &va) == MP_OK && tr.n == 71 && va.n == 29, "0.29 of 100: %d + %d held out",
          tr.n, va.n);
    mp_dataset_free(&tr);
    mp_dataset_free(&va);
    /* labels 0 0 0 1 at 0.5: two held out, both of class 0 (every 2nd sample would take class 1's only one) */
    int32_t four[4] = {0, 0, 0, 1};
    mp_dataset d4 = {.n = 4, .c = 1, .h = 1, .w = 1, .classes = 2, .images = one.images, .labels = four,
                     .source = "four"};
    CHECK(mp_dataset_split(&d4, 0.5, &tr, &va) == MP_OK && va.n == 2 && va.labels[0] == 0 && va.labels[1] == 0 &&
              va.images[0] * 255.0f == 1.0f && va.images[1] * 255.0f == 2.0f && tr.n == 2 && tr.labels[1] == 1,
          "class 1's only sample trained on: %d + %d", tr.n, va.n);
    mp_dataset_free(&tr);
    mp_dataset_free(&va);
    /* labels 0 1 at 0.5: neither class can spare one, and the error says why */
    d4.n = 2, four[1] = 1;
    CHECK_ERR(mp_dataset_split(&d4, 0.5, &tr, &va), MP_ERR_INVALID_ARG, "leaves 2 for training and 0 held out",
              "a class's last sample is never held out");
    mp_dataset_free(&one);
    CHECK_ERR(mp_dataset_split(&all, 0.01, &tr, &va), MP_ERR_INVALID_ARG, "leaves 20 for training and 0 held out");
    mp_dataset_free(&all);
}

static void test_bad(void) {
    const uint8_t x[8] = {0};
    const int32_t y2[2] = {0, 1}, y3[3] = {0, 1, 2}, yneg[2] = {0, -3}, ybig[2] = {0, 5000};
    const char *good_x = write_npy("gx.npy", "|u1", "(2, 2, 2)", x, 8);
    const char *good_y = write_npy("gy.npy", "<i4", "(2,)", y2, sizeof y2);
    mp_dataset d;
    const char *p = write_bytes("magic.npy", "PK\x03\x04 this is a zip", 18);
    CHECK_ERR(mp_dataset_load_npy(p, good_y, NULL, &d), MP_ERR_FORMAT, "magic.npy: bad magic");
    CHECK(d.images == NULL && d.labels == NULL, "nothing allocated on error");
    p = write_bytes("short.npy", "\x93NUM", 4);
    CHECK_ERR(mp_dataset_load_npy(good_x, p, NULL, &d), MP_ERR_FORMAT, "short.npy: bad magic", "shorter");
    p = write_bytes("version.npy", "\x93NUMPY\x04\x00\x10\x00", 10);
    CHECK_ERR(mp_dataset_load_npy(p, good_y, NULL, &d), MP_ERR_FORMAT, "version.npy: .npy format version 4.0");
    p = write_npy("trunc.npy", "|u1", "(2, 2, 2)", x, 7);
    CHECK_ERR(mp_dataset_load_npy(p, good_y, NULL, &d), MP_ERR_FORMAT, "trunc.npy: truncated", "declares 8 bytes",
              "holds 7");
    p = write_npy("extra.npy", "|u1", "(2, 2, 2)", (uint8_t[9]){0}, 9);
    CHECK_ERR(mp_dataset_load_npy(p, good_y, NULL, &d), MP_ERR_FORMAT, "extra.npy: 1 unexpected bytes");
    p = write_bytes("cuthead.npy", "\x93NUMPY\x01\x00\x40\x00{'descr'", 17);
    CHECK_ERR(mp_dataset_load_npy(p, good_y, NULL, &d), MP_ERR_FORMAT, "cuthead.npy: truncated", "header declares 64");
    p = write_raw("nodict.npy", 1, "['descr', '|u1']", x, 8);
    CHECK_ERR(mp_dataset_load_npy(p, good_y, NULL, &d), MP_ERR_FORMAT, "nodict.npy: header parse error");
    p = write_raw("nokey.npy", 1, "{'descr': '|u1', 'shape': (2, 2, 2)}", x, 8);
    CHECK_ERR(mp_dataset_load_npy(p, good_y, NULL, &d), MP_ERR_FORMAT, "nokey.npy: header parse error",
              "'fortran_order' missing");
    p = write_raw("dupkey.npy", 1, "{'descr': '|u1', 'descr': '|u1', 'fortran_order': False, 'shape': (2, 2, 2)}",
                  x, 8);
    CHECK_ERR(mp_dataset_load_npy(p, good_y, NULL, &d), MP_ERR_FORMAT, "dupkey.npy", "repeated key 'descr'");
    p = write_raw("otherkey.npy", 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2, 2), 'x': 1}", x, 8);
    CHECK_ERR(mp_dataset_load_npy(p, good_y, NULL, &d), MP_ERR_FORMAT, "otherkey.npy", "unexpected key 'x'");
    p = write_raw("negshape.npy", 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, -2, 2)}", x, 8);
    CHECK_ERR(mp_dataset_load_npy(p, good_y, NULL, &d), MP_ERR_FORMAT, "negshape.npy: header parse error", "'shape'");
    p = write_raw("trail.npy", 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2, 2)} x", x, 8);
    CHECK_ERR(mp_dataset_load_npy(p, good_y, NULL, &d), MP_ERR_FORMAT, "trail.npy: header parse error",
              "after the header dict");
    p = write_raw("struct.npy", 1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,)}", x, 8);
    CHECK_ERR(mp_dataset_load_npy(p, good_y, NULL, &d), MP_ERR_FORMAT, "struct.npy", "structured dtypes");
    p = write_raw("fortran.npy", 1, "{'descr': '|u1', 'fortran_order': True, 'shape': (2, 2, 2)}", x, 8);
    CHECK_ERR(mp_dataset_load_npy(p, good_y, NULL, &d), MP_ERR_FORMAT, "fortran.npy: fortran_order is True");
    p = write_npy("big.npy", ">f4", "(2, 1, 1)", x, 8);
    CHECK_ERR(mp_dataset_load_npy(p, good_y, NULL, &d), MP_ERR_FORMAT, "big.npy: dtype '>f4' is big-endian");
    p = write_npy("c8.npy", "<c8", "(1, 1, 1)", x, 8);
    CHECK_ERR(mp_dataset_load_npy(p, good_y, NULL, &d), MP_ERR_FORMAT, "c8.npy: unsupported dtype '<c8'");
    p = write_npy("f8.npy", "<f8", "(1, 1, 1)", x, 8);
    CHECK_ERR(mp_dataset_load_npy(p, write_npy("y1b.npy", "|u1", "(1,)", x, 1), NULL, &d), MP_ERR_FORMAT,
              "f8.npy: images of dtype float64 are not supported (uint8 or float32)");
    p = write_npy("yf4.npy", "<f4", "(2,)", x, 8);
    CHECK_ERR(mp_dataset_load_npy(good_x, p, NULL, &d), MP_ERR_FORMAT,
              "yf4.npy: labels of dtype float32 are not supported (uint8, int32 or int64)");
    p = write_npy("y2d.npy", "<i4", "(2, 1)", y2, 8);
    CHECK_ERR(mp_dataset_load_npy(good_x, p, NULL, &d), MP_ERR_FORMAT, "y2d.npy: labels must be 1-D", "(2, 1)");
    p = write_npy("x2d.npy", "|u1", "(2, 4)", x, 8);
    CHECK_ERR(mp_dataset_load_npy(p, good_y, NULL, &d), MP_ERR_FORMAT, "x2d.npy: images must be 3-D", "(2, 4)");
    p = write_npy("x0.npy", "|u1", "(0, 2, 2)", x, 0);
    CHECK_ERR(mp_dataset_load_npy(p, good_y, NULL, &d), MP_ERR_FORMAT, "x0.npy: the images file holds no samples");
    const char *y3p = write_npy("y3.npy", "<i4", "(3,)", y3, sizeof y3);
    CHECK_ERR(mp_dataset_load_npy(good_x, y3p, NULL, &d), MP_ERR_FORMAT, "count mismatch", "gx.npy has 2 images",
              "y3.npy has 3 labels");
    p = write_npy("yneg.npy", "<i4", "(2,)", yneg, sizeof yneg);
    CHECK_ERR(mp_dataset_load_npy(good_x, p, NULL, &d), MP_ERR_FORMAT, "yneg.npy: label -3 of sample 1 is out of range");
    p = write_npy("ybig.npy", "<i4", "(2,)", ybig, sizeof ybig);
    CHECK_ERR(mp_dataset_load_npy(good_x, p, NULL, &d), MP_ERR_FORMAT, "ybig.npy: label 5000 of sample 1");
    CHECK_ERR(mp_dataset_load_npy(good_x, good_y, &(mp_npy_opts){.classes = 1}, &d), MP_ERR_FORMAT,
              "gy.npy: label 1 of sample 1 is out of range [0, 1) (1 classes given)");
    const float fx[4] = {0, 1, NAN, 2};
    p = write_npy("nan.npy", "<f4", "(2, 1, 2)", fx, sizeof fx);
    CHECK_ERR(mp_dataset_load_npy(p, good_y, NULL, &d), MP_ERR_NONFINITE, "nan.npy: sample 1 has a non-finite pixel");
    CHECK_ERR(mp_dataset_load_npy(scratch_path(dir, "none.npy"), good_y, NULL, &d), MP_ERR_IO, "none.npy: not found");
    CHECK_ERR(mp_dataset_load_npy(dir, good_y, NULL, &d), MP_ERR_IO, "is a directory");
    mp_dataset *pd = NULL;
    CHECK_ERR(mp_dataset_open_npy(good_x, y3p, NULL, &pd), MP_ERR_FORMAT, "count mismatch");
    CHECK(pd == NULL, "no dataset on error");
    CHECK(mp_dataset_open_npy(good_x, good_y, NULL, &pd) == MP_OK && pd, "%s", mp_last_error());
    mp_dataset_info info;
    mp_dataset_describe(pd, &info);
    CHECK(info.n == 2 && info.c == 1 && info.h == 2 && info.w == 2 && info.classes == 2, "public open");
    mp_dataset_destroy(pd);
}

int main(void) {
    scratch_dir_create(dir, sizeof dir, "test_npy");
    test_u8_3d();
    test_f32_layouts();
    test_versions();
    test_split();
    test_bad();
    scratch_dir_remove(dir);
    return test_summary("test_npy");
}
