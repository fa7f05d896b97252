/* stem_rules.c — the host-side rules of our stem kernels
 * (src/cuda/conv_stem.h) and of the choice between our kernel families
 * (src/cuda/conv_own.h), which decide where the convolution search may time
 * them: exactly the geometries the kernels handle (f16/bf16, groups 1, at
 * most 4 input channels and 32 taps, 16 to 128 output channels in steps of
 * 16, 32-bit indices), never a backward-data, never a depthwise layer's; and
 * the backward-filter's workspace (2 blocks per SM, no more than tiles of
 * 128 pixels, a cy x 32 block of f32 sums per block and slice). Needs no
 * GPU: it is in ctest wherever the CUDA backend is built. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "cuda/conv_depthwise.h"
#include "cuda/conv_own.h"
#include "cuda/conv_stem.h"
#include "dw_geom.h"

/* n images of cx channels, h x w, into cy channels by a k x k filter. */
static mp_conv_geom stem_geom(int n, int cx, int h, int w, int cy, int k, int stride, int pad, int dil) {
    mp_conv_geom g;
    memset(&g, 0, sizeof g);
    g.n = n, g.groups = 1, g.cx = cx, g.cy = cy, g.hx = h, g.wx = w;
    g.k = k, g.stride = stride, g.pad = pad, g.dil = dil;
    g.hy = (h + 2 * pad - dil * (k - 1) - 1) / stride + 1, g.wy = (w + 2 * pad - dil * (k - 1) - 1) / stride + 1;
    return g;
}

static void expect_applies(const char *what, mp_conv_geom g, mp_dtype dt, bool want) {
    const bool got = mp_stem_applies(&g, dt);
    CHECK(got == want, "%s (%s): mp_stem_applies says %s", what, mp_dtype_name(dt), got ? "yes" : "no");
}

int main(void) {
    const mp_conv_geom rgb = stem_geom(512, 3, 32, 32, 64, 3, 1, 1, 1); /* cnn10's and resnet18's stem */
    expect_applies("RGB 3x3 -> 64 (cnn10, resnet18)", rgb, MP_DTYPE_BF16, true);
    expect_applies("RGB 3x3 -> 64 (cnn10, resnet18)", rgb, MP_DTYPE_F16, true);
    expect_applies("RGB 3x3 -> 64 in f32 (no f32 tensor-core path)", rgb, MP_DTYPE_F32, false);
    expect_applies("RGB 3x3 -> 64 in f64", rgb, MP_DTYPE_F64, false);
    expect_applies("1 channel 5x5 -> 16", stem_geom(8, 1, 28, 28, 16, 5, 1, 2, 1), MP_DTYPE_BF16, true);
    expect_applies("3 channels 3x3 -> 128, stride 2", stem_geom(8, 3, 28, 28, 128, 3, 2, 1, 1), MP_DTYPE_BF16, true);
    expect_applies("4 channels 3x3 (36 taps)", stem_geom(8, 4, 28, 28, 64, 3, 1, 1, 1), MP_DTYPE_BF16, false);
    expect_applies("4 channels 2x2 -> 16", stem_geom(8, 4, 28, 28, 16, 2, 2, 0, 1), MP_DTYPE_BF16, true);
    expect_applies("2 channels 3x3 dilation 2", stem_geom(8, 2, 28, 28, 32, 3, 1, 2, 2), MP_DTYPE_BF16, true);
    expect_applies("5 input channels", stem_geom(8, 5, 28, 28, 64, 1, 1, 0, 1), MP_DTYPE_BF16, false);
    expect_applies("RGB 7x7 (147 taps)", stem_geom(8, 3, 64, 64, 64, 7, 2, 3, 1), MP_DTYPE_BF16, false);
    expect_applies("2 channels 5x5 (50 taps)", stem_geom(8, 2, 28, 28, 64, 5, 1, 2, 1), MP_DTYPE_BF16, false);
    expect_applies("-> 24 channels (not a multiple of 16)", stem_geom(8, 3, 28, 28, 24, 3, 1, 1, 1), MP_DTYPE_BF16,
                   false);
    expect_applies("-> 144 channels (over 128)", stem_geom(8, 3, 28, 28, 144, 3, 1, 1, 1), MP_DTYPE_BF16, false);
    expect_applies("-> 8 channels", stem_geom(8, 3, 28, 28, 8, 3, 1, 1, 1), MP_DTYPE_BF16, false);
    mp_conv_geom g = stem_geom(8, 3, 28, 28, 64, 3, 1, 1, 1);
    g.groups = 3;
    expect_applies("groups 3", g, MP_DTYPE_BF16, false);
    g = stem_geom(8, 1, 600, 600, 64, 3, 1, 64, 64);
    expect_applies("dilation 64 x (3 - 1) = 128 taps apart", g, MP_DTYPE_BF16, false);
    expect_applies("2^31 output values (32-bit indices)", stem_geom(8192, 3, 64, 64, 64, 3, 1, 1, 1), MP_DTYPE_BF16,
                   false);
    expect_applies("2^29 output values", stem_geom(2048, 3, 64, 64, 64, 3, 1, 1, 1), MP_DTYPE_BF16, true);
    expect_applies("a window over 2^26 of x's values (dilation 63, rows of 200 000)",
                   stem_geom(1, 3, 200, 200000, 16, 3, 1, 63, 63), MP_DTYPE_BF16, false);
    expect_applies("the same rows, dilation 1", stem_geom(1, 3, 200, 200000, 16, 3, 1, 1, 1), MP_DTYPE_BF16, true);

    /* the families: a stem's forward and backward-filter, never its backward-data; depthwise layers every pass */
    CHECK(mp_own_family_of(&rgb, MP_DTYPE_BF16, MP_CONV_FWD) == MP_OWN_STEM, "the stem's forward is the stem kernels'");
    CHECK(mp_own_family_of(&rgb, MP_DTYPE_BF16, MP_CONV_BWD_FILTER) == MP_OWN_STEM,
          "the stem's backward-filter is the stem kernels'");
    CHECK(mp_own_family_of(&rgb, MP_DTYPE_BF16, MP_CONV_BWD_DATA) == MP_OWN_NONE, "no kernel of ours for its dx");
    CHECK(mp_own_family_of(&rgb, MP_DTYPE_F32, MP_CONV_FWD) == MP_OWN_NONE, "nor for f32");
    const mp_conv_geom dw = dw_geom(512, 144, 32, 32, 1, 1);
    for (int p = 0; p < MP_CONV_NPASS; p++)
        CHECK(mp_own_family_of(&dw, MP_DTYPE_BF16, (mp_conv_pass)p) == MP_OWN_DEPTHWISE &&
                  !mp_stem_applies(&dw, MP_DTYPE_BF16),
              "a depthwise layer's pass %d is the depthwise kernels'", p);
    const mp_conv_geom dw4 = dw_geom(8, 4, 16, 16, 1, 1); /* 4 channels, depthwise: f32 vectors of 4 */
    CHECK(mp_own_family_of(&dw4, MP_DTYPE_F32, MP_CONV_FWD) == MP_OWN_DEPTHWISE, "4-channel depthwise in f32");
    CHECK(mp_own_family_of(&dw4, MP_DTYPE_BF16, MP_CONV_FWD) == MP_OWN_NONE, "4-channel depthwise in bf16: neither");
    CHECK(!strcmp(mp_own_family_name(MP_OWN_STEM), "stem") &&
              !strcmp(mp_own_family_name(MP_OWN_DEPTHWISE), "depthwise") &&
              !strcmp(mp_own_family_name(MP_OWN_NONE), "none"),
          "family names");

    /* workspace: the backward-filter's sums, min(2 per SM, tiles) blocks x slices x cy x 32 floats */
    mp_cuda_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.sm_count = 132;
    CHECK(mp_stem_workspace(&ctx, &rgb, MP_DTYPE_BF16, MP_CONV_FWD) == 0, "the forward needs no workspace");
    const size_t w_rgb = mp_stem_workspace(&ctx, &rgb, MP_DTYPE_BF16, MP_CONV_BWD_FILTER);
    CHECK(w_rgb == (size_t)264 * 1 * 64 * 32 * sizeof(float), "backward-filter, 512 x 32 x 32 -> 64: %zu bytes", w_rgb);
    /* 2 x 9 x 9 = 162 pixels: 2 tiles; 16 channels: 2 blocks of the filter's sums, 4 slices */
    const mp_conv_geom small = stem_geom(2, 3, 9, 9, 16, 3, 1, 1, 1);
    const size_t w_small = mp_stem_workspace(&ctx, &small, MP_DTYPE_BF16, MP_CONV_BWD_FILTER);
    CHECK(w_small == (size_t)2 * 4 * 16 * 32 * sizeof(float), "backward-filter, 2 x 9 x 9 -> 16: %zu bytes", w_small);
    const mp_conv_geom c48 = stem_geom(2, 1, 10, 10, 48, 5, 1, 2, 1); /* 6 blocks of sums: 1 slice */
    const size_t w_48 = mp_stem_workspace(&ctx, &c48, MP_DTYPE_BF16, MP_CONV_BWD_FILTER);
    CHECK(w_48 == (size_t)2 * 1 * 48 * 32 * sizeof(float), "backward-filter, 2 x 10 x 10 -> 48: %zu bytes", w_48);
    const mp_conv_geom no = stem_geom(8, 5, 28, 28, 64, 1, 1, 0, 1);
    CHECK(mp_stem_workspace(&ctx, &no, MP_DTYPE_BF16, MP_CONV_BWD_FILTER) == 0 &&
              mp_own_workspace(&ctx, &no, MP_DTYPE_BF16, MP_CONV_BWD_FILTER) == 0,
          "a geometry the kernels do not take asks for no workspace");
    CHECK(mp_own_workspace(&ctx, &rgb, MP_DTYPE_BF16, MP_CONV_BWD_FILTER) == w_rgb &&
              mp_own_workspace(&ctx, &dw, MP_DTYPE_BF16, MP_CONV_BWD_FILTER) ==
                  mp_dw_workspace(&ctx, &dw, MP_DTYPE_BF16, MP_CONV_BWD_FILTER),
          "mp_own_workspace is the family's");
    return test_summary("stem_rules");
}
