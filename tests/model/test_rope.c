/*
 * test_rope.c: the RoPE tables of src/model/rope.c against the formulas of
 * transformers' modeling_rope_utils: default, linear, llama3 and Phi-3's
 * longrope (short factors when the table stays within the original context,
 * long ones past it, as vLLM; cos/sin scaled by the attention factor) and
 * YaRN (the ramp between interpolated and extrapolated frequencies).
 */
#include <math.h>

#include "model/rope.h"
#include "test.h"

static void test_default_and_linear(void) {
    rope_config rc = {.type = ROPE_DEFAULT, .theta = 10000.0, .factor = 1.0, .partial_rotary_factor = 1.0};
    float inv[8], table[4 * 16];
    rope_inv_freq(&rc, 16, 4, inv);
    for (int i = 0; i < 8; i++) CHECK_NEAR(inv[i], 1.0 / pow(10000.0, (2.0 * i) / 16.0), 1e-6 * inv[i]);
    rope_cos_sin_table(&rc, 16, 4, table);
    for (int p = 0; p < 4; p++)
        for (int i = 0; i < 8; i++) {
            CHECK_NEAR(table[p * 16 + i], cos((float)p * inv[i]), 1e-6);
            CHECK_NEAR(table[p * 16 + 8 + i], sin((float)p * inv[i]), 1e-6);
        }
    rc.type = ROPE_LINEAR;
    rc.factor = 4.0;
    float lin[8];
    rope_inv_freq(&rc, 16, 4, lin);
    for (int i = 0; i < 8; i++) CHECK_NEAR(lin[i], inv[i] / 4.0, 1e-6 * inv[i]);
}

static void test_longrope(void) {
    rope_config rc = {.type = ROPE_LONGROPE, .theta = 10000.0, .factor = 16.0, .partial_rotary_factor = 1.0,
                      .original_max_position = 16, .num_factors = 4};
    for (int i = 0; i < 4; i++) {
        rc.short_factor[i] = 1.0f + 0.1f * (float)i;
        rc.long_factor[i] = 1.0f + 1.5f * (float)i;
    }
    rc.attention_factor = sqrt(1.0 + log(16.0) / log(16.0)); /* transformers' default for factor 16, original 16 */
    float s[4], l[4];
    rope_inv_freq(&rc, 8, 16, s); /* a 16-position table: within the original context, short factors */
    rope_inv_freq(&rc, 8, 17, l); /* one position past it: long factors for every position */
    for (int i = 0; i < 4; i++) {
        double base = pow(10000.0, (2.0 * i) / 8.0);
        CHECK_NEAR(s[i], 1.0 / (rc.short_factor[i] * base), 1e-6 * s[i]);
        CHECK_NEAR(l[i], 1.0 / (rc.long_factor[i] * base), 1e-6 * l[i]);
    }
    float table[17 * 8];
    rope_cos_sin_table(&rc, 8, 17, table);
    for (int p = 0; p < 17; p++)
        for (int i = 0; i < 4; i++) {
            CHECK_NEAR(table[p * 8 + i], cos((float)p * l[i]) * sqrt(2.0), 1e-5);
            CHECK_NEAR(table[p * 8 + 4 + i], sin((float)p * l[i]) * sqrt(2.0), 1e-5);
        }
}

static void test_llama3(void) {
    /* Llama 3.1: wavelengths above original / low_freq_factor divided by factor, below
     * original / high_freq_factor kept, a smooth blend between */
    rope_config rc = {.type = ROPE_LLAMA3, .theta = 500000.0, .factor = 8.0, .low_freq_factor = 1.0,
                      .high_freq_factor = 4.0, .original_max_position = 64, .partial_rotary_factor = 1.0};
    float inv[16];
    rope_inv_freq(&rc, 32, 8, inv);
    for (int i = 0; i < 16; i++) {
        double f = 1.0 / pow(500000.0, (2.0 * i) / 32.0), wl = 2 * M_PI / f, want;
        if (wl > 64.0) want = f / 8.0;
        else if (wl < 16.0) want = f;
        else {
            double smooth = (64.0 / wl - 1.0) / 3.0;
            want = (1 - smooth) * f / 8.0 + smooth * f;
        }
        CHECK_NEAR(inv[i], want, 1e-5 * want);
    }
}

/* YaRN as transformers' _compute_yarn_parameters, written out in double */
static void yarn_want(double theta, int dim, double factor, double orig, double bf, double bs, bool truncate,
                      double *want) {
    double low = dim * log(orig / (bf * 2 * M_PI)) / (2 * log(theta));
    double high = dim * log(orig / (bs * 2 * M_PI)) / (2 * log(theta));
    if (truncate) {
        low = floor(low);
        high = ceil(high);
    }
    low = low < 0 ? 0 : low;
    high = high > dim - 1 ? dim - 1 : high;
    if (low == high) high += 0.001;
    for (int i = 0; i < dim / 2; i++) {
        double pf = pow(theta, 2.0 * i / dim), ramp = (i - low) / (high - low);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        double ef = 1 - ramp;
        want[i] = 1 / (factor * pf) * (1 - ef) + 1 / pf * ef;
    }
}

static void test_yarn(void) {
    /* Qwen3 with YaRN factor 4 over 32768 positions (head_dim 128), and gpt-oss's untruncated ramp */
    const struct { double theta, factor, orig, bf, bs; int dim; bool truncate; } cases[] = {
        {1000000.0, 4.0, 32768, 32, 1, 128, true},
        {150000.0, 32.0, 4096, 32, 1, 64, false},
        {10000.0, 8.0, 64, 32, 1, 16, true},   /* low and high clamp to [0, dim - 1] */
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        rope_config rc = {.type = ROPE_YARN, .theta = cases[c].theta, .factor = cases[c].factor,
                          .original_max_position = (int)cases[c].orig, .beta_fast = cases[c].bf,
                          .beta_slow = cases[c].bs, .truncate = cases[c].truncate, .partial_rotary_factor = 1.0,
                          .attention_factor = 0.1 * log(cases[c].factor) + 1.0};
        float inv[64];
        double want[64];
        rope_inv_freq(&rc, cases[c].dim, 1024, inv);
        yarn_want(cases[c].theta, cases[c].dim, cases[c].factor, cases[c].orig, cases[c].bf, cases[c].bs,
                  cases[c].truncate, want);
        for (int i = 0; i < cases[c].dim / 2; i++) CHECK_NEAR(inv[i], want[i], 2e-6 * want[i]);
        /* the extremes: the first dimensions extrapolate, the last interpolate */
        CHECK_NEAR(inv[0], 1.0, 1e-6);
        CHECK_NEAR(inv[cases[c].dim / 2 - 1], want[cases[c].dim / 2 - 1], 1e-6 * want[cases[c].dim / 2 - 1]);
        float table[3 * 128];
        rope_cos_sin_table(&rc, cases[c].dim, 3, table);
        CHECK_NEAR(table[2 * cases[c].dim + 1], cos(2.0f * inv[1]) * rc.attention_factor, 1e-5);
    }
}

int main(void) {
    test_yarn();
    test_default_and_linear();
    test_longrope();
    test_llama3();
    TEST_END();
}
