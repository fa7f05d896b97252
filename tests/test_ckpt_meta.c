/* test_ckpt_meta.c — the checkpoint metadata validation (io/ckpt_meta.h):
 * the strict text parsers, the one-line quoting of bad values, and the typed
 * getters' messages (file, key, value, range) on a written safetensors file. */
#define _GNU_SOURCE /* nftw in scratch_dir.h */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "io/ckpt_meta.h"
#include "scratch_dir.h"

static char tmp[4096];

static void test_parse_int(void) {
    static const struct {
        const char *text;
        bool ok;
        int64_t v;
    } cases[] = {
        {"0", true, 0},       {"17", true, 17},   {"-5", true, -5},     {"100000", true, 100000},
        {"1.5", false, 0},    {"128.9", false, 0}, {"nan", false, 0},   {"inf", false, 0},
        {"1e300", false, 0},  {"1e3", false, 0},  {"", false, 0},       {" 5", false, 0},
        {"5 ", false, 0},     {"+5", false, 0},   {"-", false, 0},      {"12abc", false, 0},
        {"0x10", false, 0},   {"--1", false, 0},  {"9223372036854775807", true, INT64_MAX},
        {"9223372036854775808", false, 0},        {"99999999999999999999", false, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        int64_t v = 42;
        bool ok = mp_meta_parse_int(cases[k].text, INT64_MIN, INT64_MAX, &v);
        CHECK(ok == cases[k].ok && (!ok || v == cases[k].v) && (ok || v == 42), "int '%s': ok %d, v %lld",
              cases[k].text, ok, (long long)v);
    }
    int64_t v;
    CHECK(!mp_meta_parse_int("-1", 0, 10, &v) && !mp_meta_parse_int("11", 0, 10, &v) &&
              mp_meta_parse_int("10", 0, 10, &v) && v == 10,
          "int range [0, 10]");
    uint64_t u;
    CHECK(mp_meta_parse_u64("18446744073709551615", 0, UINT64_MAX, &u) && u == UINT64_MAX, "u64 max");
    CHECK(!mp_meta_parse_u64("18446744073709551616", 0, UINT64_MAX, &u), "u64 past 2^64 - 1");
    CHECK(!mp_meta_parse_u64("-1", 0, UINT64_MAX, &u) && !mp_meta_parse_u64("1.0", 0, UINT64_MAX, &u), "u64 sign/fraction");
    double d;
    CHECK(mp_meta_parse_double("65536", 0, 1e30, &d) && d == 65536, "double 65536");
    CHECK(mp_meta_parse_double("6.103515625e-05", 0, 1, &d) && d == 6.103515625e-05, "double exponent");
    CHECK(mp_meta_parse_double("-0.5", -1, 1, &d) && d == -0.5, "double negative");
    static const char *const bad_d[] = {"nan", "inf", "-inf", "1e400", "0x1p3", " 1", "1 ", "+1", "", "1e", "."};
    for (size_t k = 0; k < sizeof bad_d / sizeof *bad_d; k++)
        CHECK(!mp_meta_parse_double(bad_d[k], -DBL_MAX, DBL_MAX, &d), "double '%s' accepted", bad_d[k]);
    CHECK(!mp_meta_parse_double("2", 0, 1, &d), "double out of range");
}

static void test_quote(void) {
    char q[16];
    mp_meta_quote("1\n2'\\", q, sizeof q);
    CHECK(!strcmp(q, "1\\x0a2\\x27\\x5c") || !strcmp(q, "1\\x0a2\\x27..."), "quoted: %s", q);
    char q2[96];
    char longv[300];
    memset(longv, 'a', sizeof longv - 1);
    longv[sizeof longv - 1] = '\0';
    mp_meta_quote(longv, q2, sizeof q2);
    CHECK(strlen(q2) < sizeof q2 && !strcmp(q2 + strlen(q2) - 3, "..."), "long value cut: %zu bytes", strlen(q2));
}

static void test_getters(void) {
    const char *p = scratch_path(tmp, "meta.safetensors");
    const char *keys[] = {"mixprec.epoch", "mixprec.bad", "mixprec.frac", "mixprec.name", "mixprec.nl", "scale"};
    const char *vals[] = {"7", "-5", "1.5", "small", "1\n2", "65536"};
    float x = 1;
    mp_st_tensor t = {.name = "x", .dtype = MP_DTYPE_F32, .ndim = 1, .dims = {1}, .data = &x};
    CHECK_ERR(mp_safetensors_write(p, &t, 1, keys, vals, 6), MP_OK);
    mp_st_file *f = NULL;
    CHECK_ERR(mp_safetensors_open(p, &f), MP_OK);
    if (!f) return;
    int64_t v = 0;
    uint64_t u = 0;
    double d = 0;
    const char *s = NULL;
    CHECK_ERR(mp_ckpt_meta_int(f, p, "mixprec.epoch", 0, 100000, &v), MP_OK);
    CHECK(v == 7, "epoch %lld", (long long)v);
    CHECK_ERR(mp_ckpt_meta_int(f, p, "mixprec.bad", 0, 100000, &v), MP_ERR_FORMAT,
              "meta.safetensors: metadata 'mixprec.bad' = '-5' must be an integer in [0, 100000]");
    CHECK_ERR(mp_ckpt_meta_u64(f, p, "mixprec.frac", 0, 10, &u), MP_ERR_FORMAT, "'mixprec.frac' = '1.5' must be an integer in [0, 10]");
    CHECK_ERR(mp_ckpt_meta_int(f, p, "mixprec.nl", 0, 10, &v), MP_ERR_FORMAT, "'mixprec.nl' = '1\\x0a2'");
    CHECK(!strchr(mp_last_error(), '\n'), "a newline in a value reached the message");
    CHECK_ERR(mp_ckpt_meta_double(f, p, "mixprec.name", -1, 1, &d), MP_ERR_FORMAT, "'mixprec.name' = 'small' must be a finite number");
    CHECK_ERR(mp_ckpt_meta_double(f, p, "scale", 0, 1e9, &d), MP_OK);
    CHECK(d == 65536, "scale %g", d);
    CHECK_ERR(mp_ckpt_meta_string(f, p, "mixprec.name", &s), MP_OK);
    CHECK(s && !strcmp(s, "small"), "string");
    CHECK_ERR(mp_ckpt_meta_int(f, p, "mixprec.none", 0, 1, &v), MP_ERR_FORMAT,
              "not a mixprec checkpoint (metadata 'mixprec.none' missing)");
    mp_safetensors_close(f);
}

/* The normalization statistics lists: parsed back exactly, malformed ones named. */
static void test_norm(void) {
    float v[4];
    int n = -1;
    CHECK(mp_meta_parse_floats("", -1, 1, v, 4, &n) && n == 0, "empty list");
    CHECK(mp_meta_parse_floats("0.5,-0.25,1e-3", -1, 1, v, 4, &n) && n == 3 && v[1] == -0.25f && v[2] == 1e-3f, "list");
    CHECK(!mp_meta_parse_floats("0.5,,1", -1, 1, v, 4, &n), "empty item");
    CHECK(!mp_meta_parse_floats("0.5,nan", -1, 1, v, 4, &n), "nan");
    CHECK(!mp_meta_parse_floats("1,2,3,4,5", -10, 10, v, 4, &n), "too many");
    CHECK(!mp_meta_parse_floats("0.5 ,1", -1, 1, v, 4, &n), "space");
    const float mean[3] = {0.2860402f, 1.0f / 3.0f, -7e-8f};
    char text[128];
    mp_ckpt_norm_text(mean, 3, text, sizeof text);
    CHECK(mp_meta_parse_floats(text, -1, 1, v, 4, &n) && n == 3 && !memcmp(v, mean, sizeof mean), "round trip '%s'",
          text);
    const char *p = scratch_path(tmp, "norm.safetensors");
    float x = 1;
    mp_st_tensor t = {.name = "x", .dtype = MP_DTYPE_F32, .ndim = 1, .dims = {1}, .data = &x};
    struct {
        const char *mean, *std, *needle;
        mp_status s;
        int channels;
    } rows[] = {
        {"0.5,0.25", "0.1,0.2", NULL, MP_OK, 2},
        {"", "", NULL, MP_OK, 0},
        {"0.5", "0", "'mixprec.norm_std' = '0' must be a comma-separated list of finite numbers > 0",
         MP_ERR_FORMAT, 0},
        {"0.5,x", "1,1", "'mixprec.norm_mean' = '0.5,x' must be a comma-separated list", MP_ERR_FORMAT, 0},
        {"0.5,0.5", "1", "'mixprec.norm_mean' has 2 values but 'mixprec.norm_std' 1", MP_ERR_FORMAT, 0},
    };
    for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
        const char *keys[] = {"mixprec.norm_mean", "mixprec.norm_std"}, *vals[] = {rows[r].mean, rows[r].std};
        CHECK_ERR(mp_safetensors_write(p, &t, 1, keys, vals, 2), MP_OK);
        mp_st_file *f = NULL;
        CHECK_ERR(mp_safetensors_open(p, &f), MP_OK);
        if (!f) return;
        mp_checkpoint_info info = {0};
        if (rows[r].needle) CHECK_ERR(mp_ckpt_meta_norm(f, p, &info), rows[r].s, rows[r].needle);
        else CHECK_ERR(mp_ckpt_meta_norm(f, p, &info), MP_OK);
        if (rows[r].s == MP_OK)
            CHECK(info.norm_recorded && info.norm_channels == rows[r].channels, "row %zu: %d channels", r,
                  info.norm_channels);
        mp_safetensors_close(f);
    }
    /* an older checkpoint: neither key */
    const char *keys[] = {"mixprec.epoch"}, *vals[] = {"1"};
    CHECK_ERR(mp_safetensors_write(p, &t, 1, keys, vals, 1), MP_OK);
    mp_st_file *f = NULL;
    CHECK_ERR(mp_safetensors_open(p, &f), MP_OK);
    if (!f) return;
    mp_checkpoint_info info = {.norm_recorded = true};
    CHECK_ERR(mp_ckpt_meta_norm(f, p, &info), MP_OK);
    CHECK(!info.norm_recorded && info.norm_channels == 0, "older checkpoint: nothing recorded");
    CHECK_ERR(mp_ckpt_meta_norm_read(f, p, 4, &n, v, v), MP_OK);
    CHECK(n == -1, "older checkpoint: %d channels, want -1", n);
    mp_safetensors_close(f);
}

/* More channels than mp_checkpoint_info's arrays hold: read whole by
 * mp_ckpt_meta_norm_read (every value checked, the first `max` kept), and
 * left out of the struct as unknown rather than cut or refused. */
static void test_norm_wide(void) {
    enum { C = MP_CHECKPOINT_MAX_CHANNELS + 1 };
    float mean[C], std[C], got_mean[C + 1], got_std[C + 1];
    for (int c = 0; c < C; c++) mean[c] = 0.01f * (float)c - 0.3f, std[c] = 0.5f + 0.001f * (float)c;
    static char tm[C * 18 + 1], ts[C * 18 + 1];
    mp_ckpt_norm_text(mean, C, tm, sizeof tm);
    mp_ckpt_norm_text(std, C, ts, sizeof ts);
    const char *p = scratch_path(tmp, "wide.safetensors");
    float x = 1;
    mp_st_tensor t = {.name = "x", .dtype = MP_DTYPE_F32, .ndim = 1, .dims = {1}, .data = &x};
    const char *keys[] = {"mixprec.norm_mean", "mixprec.norm_std"}, *vals[] = {tm, ts};
    CHECK_ERR(mp_safetensors_write(p, &t, 1, keys, vals, 2), MP_OK);
    mp_st_file *f = NULL;
    CHECK_ERR(mp_safetensors_open(p, &f), MP_OK);
    if (!f) return;
    mp_checkpoint_info info = {.norm_recorded = true, .norm_channels = 3};
    CHECK_ERR(mp_ckpt_meta_norm(f, p, &info), MP_OK);
    CHECK(!info.norm_recorded && info.norm_channels == 0, "%d channels in the struct: recorded %d, %d channels", C,
          info.norm_recorded, info.norm_channels);
    int n = 0;
    got_mean[C] = got_std[C] = 42;
    CHECK_ERR(mp_ckpt_meta_norm_read(f, p, C + 1, &n, got_mean, got_std), MP_OK);
    CHECK(n == C && !memcmp(got_mean, mean, sizeof mean) && !memcmp(got_std, std, sizeof std) && got_mean[C] == 42,
          "%d channels read back: %d", C, n);
    got_mean[1] = got_std[1] = 42;
    CHECK_ERR(mp_ckpt_meta_norm_read(f, p, 1, &n, got_mean, got_std), MP_OK);
    CHECK(n == C && got_mean[0] == mean[0] && got_std[0] == std[0] && got_mean[1] == 42 && got_std[1] == 42,
          "max 1: the count and channel 0 only (%d)", n);
    CHECK_ERR(mp_ckpt_meta_norm_read(f, p, 0, &n, NULL, NULL), MP_OK);
    CHECK(n == C, "max 0: the count only (%d)", n);
    mp_safetensors_close(f);
    /* a bad value past max is still an error */
    strcat(ts, ",0");
    strcat(tm, ",0");
    CHECK_ERR(mp_safetensors_write(p, &t, 1, keys, vals, 2), MP_OK);
    CHECK_ERR(mp_safetensors_open(p, &f), MP_OK);
    if (!f) return;
    CHECK_ERR(mp_ckpt_meta_norm_read(f, p, 1, &n, got_mean, got_std), MP_ERR_FORMAT,
              "'mixprec.norm_std' = '", "must be a comma-separated list of finite numbers > 0");
    mp_safetensors_close(f);
}

int main(void) {
    scratch_dir_create(tmp, sizeof tmp, "test_ckpt_meta");
    test_parse_int();
    test_quote();
    test_getters();
    test_norm();
    test_norm_wide();
    scratch_dir_remove(tmp);
    return test_summary("test_ckpt_meta");
}
