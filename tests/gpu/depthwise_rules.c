/* depthwise_rules.c — the host-side rules of our depthwise kernels
 * (src/cuda/conv_depthwise.h), which decide where the convolution search may
 * time them: exactly the geometries the kernels handle (the shared-memory
 * filter, the backward-filter's lanes and the 32-bit indices set the
 * limits), and the backward-filter's workspace (two blocks per SM, 9 sums
 * per channel each, never more blocks than items of work: bands of rows at
 * stride 1, single rows at stride 2). Needs no GPU:
 * it is in ctest wherever the CUDA backend is built. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "cuda/conv_depthwise.h"
#include "dw_geom.h"


static void expect_applies(const char *what, mp_conv_geom g, mp_dtype dt, bool want) {
    const bool got = mp_dw_applies(&g, dt);
    CHECK(got == want, "%s (%s): mp_dw_applies says %s", what, mp_dtype_name(dt), got ? "yes" : "no");
}

int main(void) {
    /* mobilenetv2's layers, in every dtype */
    const mp_dtype dts[] = {MP_DTYPE_F32, MP_DTYPE_F16, MP_DTYPE_BF16};
    for (int i = 0; i < 3; i++) {
        expect_applies("C144 32x32 stride 1", dw_geom(512, 144, 32, 32, 1, 1), dts[i], true);
        expect_applies("C960 4x4 stride 1", dw_geom(512, 960, 4, 4, 1, 1), dts[i], true);
        expect_applies("C576 8x8 stride 2", dw_geom(512, 576, 8, 8, 2, 1), dts[i], true);
        expect_applies("C1024 (the largest)", dw_geom(8, 1024, 8, 8, 1, 1), dts[i], true);
        expect_applies("C1032 (shared filter too large)", dw_geom(8, 1032, 8, 8, 1, 1), dts[i], false);
        expect_applies("padding 0", dw_geom(2, 16, 6, 7, 1, 0), dts[i], true);
        expect_applies("padding 2, stride 2", dw_geom(2, 16, 6, 7, 2, 2), dts[i], true);
    }
    /* the vector width: 8 values of f16/bf16, 4 of f32 */
    expect_applies("C12", dw_geom(2, 12, 8, 8, 1, 1), MP_DTYPE_F32, true);
    expect_applies("C12", dw_geom(2, 12, 8, 8, 1, 1), MP_DTYPE_BF16, false);
    expect_applies("C13", dw_geom(2, 13, 8, 8, 1, 1), MP_DTYPE_F32, false);
    expect_applies("C16", dw_geom(2, 16, 8, 8, 1, 1), MP_DTYPE_F64, false);
    /* what the kernels do not handle */
    mp_conv_geom g = dw_geom(2, 16, 8, 8, 1, 1);
    g.k = 5;
    expect_applies("kernel 5", g, MP_DTYPE_BF16, false);
    g = dw_geom(2, 16, 9, 9, 3, 1);
    expect_applies("stride 3", g, MP_DTYPE_BF16, false);
    g = dw_geom(2, 16, 8, 8, 1, 2);
    g.dil = 2;
    expect_applies("dilation 2", g, MP_DTYPE_BF16, false);
    g = dw_geom(2, 16, 8, 8, 1, 3);
    expect_applies("padding 3", g, MP_DTYPE_BF16, false);
    g = dw_geom(2, 16, 8, 8, 1, 1);
    g.groups = 8; /* two channels per group */
    expect_applies("groups 8 of 16 channels", g, MP_DTYPE_BF16, false);
    g = dw_geom(2, 16, 8, 8, 1, 1);
    g.cy = 32; /* a depth multiplier of 2 */
    expect_applies("16 -> 32 channels, groups 16", g, MP_DTYPE_BF16, false);
    expect_applies("2^31 elements (32-bit indices)", dw_geom(4096, 1024, 32, 32, 1, 1), MP_DTYPE_BF16, false);
    expect_applies("2^29 elements", dw_geom(512, 1024, 32, 32, 1, 1), MP_DTYPE_BF16, true);

    /* workspace: only backward-filter's partial sums, min(2 per SM, the items' lanes) blocks x 9 x C floats */
    mp_cuda_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.sm_count = 132;
    const mp_conv_geom big = dw_geom(512, 144, 32, 32, 1, 1), tiny = dw_geom(1, 960, 4, 4, 1, 1);
    CHECK(mp_dw_workspace(&ctx, &big, MP_DTYPE_BF16, MP_CONV_FWD) == 0, "forward needs no workspace");
    CHECK(mp_dw_workspace(&ctx, &big, MP_DTYPE_BF16, MP_CONV_BWD_DATA) == 0, "backward-data needs no workspace");
    const size_t w_big = mp_dw_workspace(&ctx, &big, MP_DTYPE_BF16, MP_CONV_BWD_FILTER);
    CHECK(w_big == (size_t)264 * 9 * 144 * sizeof(float), "backward-filter, 512 x 32 x 32 x 144: %zu bytes", w_big);
    /* 1 x 4 x 4 outputs: 4 columns of one band of 4 rows = 4 items; 960 / 8 = 120 vectors -> 2 lanes per
     * block: 2 blocks */
    const size_t w_tiny = mp_dw_workspace(&ctx, &tiny, MP_DTYPE_BF16, MP_CONV_BWD_FILTER);
    CHECK(w_tiny == (size_t)2 * 9 * 960 * sizeof(float), "backward-filter, 1 x 4 x 4 x 960: %zu bytes", w_tiny);
    /* 3 x 19 x 5 outputs: bands of 8, 8 and 3 rows x 5 columns x 3 images = 45 items; 16 / 8 = 2 vectors ->
     * 128 lanes: 1 block */
    const mp_conv_geom tall = dw_geom(3, 16, 19, 5, 1, 1);
    const size_t w_tall = mp_dw_workspace(&ctx, &tall, MP_DTYPE_BF16, MP_CONV_BWD_FILTER);
    CHECK(w_tall == (size_t)1 * 9 * 16 * sizeof(float), "backward-filter, 3 x 19 x 5 x 16: %zu bytes", w_tall);
    /* 64 x 19 x 5: 960 items over 128 lanes: 8 blocks (rows one per item would be 48) */
    const mp_conv_geom tall64 = dw_geom(64, 16, 19, 5, 1, 1);
    const size_t w_tall64 = mp_dw_workspace(&ctx, &tall64, MP_DTYPE_BF16, MP_CONV_BWD_FILTER);
    CHECK(w_tall64 == (size_t)8 * 9 * 16 * sizeof(float), "backward-filter, 64 x 19 x 5 x 16: %zu bytes", w_tall64);
    /* stride 2, 64 x 19 x 5 outputs too: one row per item (bench/NOTES.md v0.28), 6080 items: 48 blocks */
    const mp_conv_geom s2 = dw_geom(64, 16, 38, 10, 2, 1);
    const size_t w_s2 = mp_dw_workspace(&ctx, &s2, MP_DTYPE_BF16, MP_CONV_BWD_FILTER);
    CHECK(s2.hy == 19 && s2.wy == 5 && w_s2 == (size_t)48 * 9 * 16 * sizeof(float),
          "backward-filter, stride 2, 64 x 19 x 5 x 16 outputs: %zu bytes", w_s2);
    const mp_conv_geom odd = dw_geom(2, 13, 8, 8, 1, 1);
    CHECK(mp_dw_workspace(&ctx, &odd, MP_DTYPE_BF16, MP_CONV_BWD_FILTER) == 0,
          "a geometry the kernels do not take asks for no workspace");
    return test_summary("depthwise_rules");
}
