/*
 * test_int4.c: AWQ and GPTQ 4-bit packings read back (src/tensor/int4.h) on weights packed here the way
 * AutoAWQ's pack_intweight (order [0, 2, 4, 6, 1, 3, 5, 7] within each int32 of 8 output features) and
 * AutoGPTQ's pack (8 input features per int32, in order; zeros of 8 output features per int32, less 1 in the
 * v1 format) write them: every value (q - z) s exactly; an AWQ weight packed in plain order reads back
 * wrong (the order matters), GPTQ act-order groups follow g_idx, a g_idx outside the groups is refused; the
 * same weights as I4_B128 rows (test_blocks).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/int4.h"
#include "test.h"

enum { N = 24, K = 32, G = 8, GR = K / G };

static int qv(int k, int n) { return (k * 7 + n * 5 + k * n) % 16; }
static int zv(int g, int n) { return (g * 3 + n) % 16; }
static float sv(int g, int n) { return 0.25f + 0.125f * (float)((g + 2 * n) % 7); }

static void test_awq(void) {
    static const int ORDER[8] = {0, 2, 4, 6, 1, 3, 5, 7}, PLAIN[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    int32_t qw[K * N / 8], qz[GR * N / 8];
    float sc[GR * N], w[N * K];
    for (int g = 0; g < GR; g++)
        for (int n = 0; n < N; n++) sc[g * N + n] = sv(g, n);
    for (int pass = 0; pass < 2; pass++) {
        const int *ord = pass ? PLAIN : ORDER;
        for (int k = 0; k < K; k++)
            for (int c = 0; c < N / 8; c++) {
                uint32_t word = 0;
                for (int p = 0; p < 8; p++) word |= (uint32_t)qv(k, 8 * c + ord[p]) << (4 * p);
                qw[k * (N / 8) + c] = (int32_t)word;
            }
        for (int g = 0; g < GR; g++)
            for (int c = 0; c < N / 8; c++) {
                uint32_t word = 0;
                for (int p = 0; p < 8; p++) word |= (uint32_t)zv(g, 8 * c + ord[p]) << (4 * p);
                qz[g * (N / 8) + c] = (int32_t)word;
            }
        i4_awq_dequantize(qw, qz, sc, N, K, G, w);
        int wrong = 0;
        for (int n = 0; n < N; n++)
            for (int k = 0; k < K; k++) wrong += w[n * K + k] != (float)(qv(k, n) - zv(k / G, n)) * sv(k / G, n);
        if (pass == 0) CHECK_MSG(wrong == 0, "AWQ: %d values wrong", wrong);
        else CHECK_MSG(wrong > N * K / 2, "AWQ packed in plain order: only %d of %d values wrong", wrong, N * K);
    }
}

static void test_gptq(void) {
    int32_t qw[K / 8 * N], qz[GR * N / 8], gidx[K];
    float sc[GR * N], w[N * K];
    for (int g = 0; g < GR; g++)
        for (int n = 0; n < N; n++) sc[g * N + n] = sv(g, n);
    /* act-order: input feature k in group gidx[k] (a permutation's rank / G), every group G features */
    int perm[K];
    for (int k = 0; k < K; k++) perm[k] = (k * 13 + 5) % K; /* 13 is coprime with 32 */
    for (int k = 0; k < K; k++) gidx[perm[k]] = k / G;
    memset(qw, 0, sizeof qw);
    for (int k = 0; k < K; k++)
        for (int n = 0; n < N; n++) qw[(k / 8) * N + n] = (int32_t)((uint32_t)qw[(k / 8) * N + n] | (uint32_t)qv(k, n) << (4 * (k % 8)));
    for (int v1 = 0; v1 < 2; v1++) {
        memset(qz, 0, sizeof qz);
        for (int g = 0; g < GR; g++)
            for (int n = 0; n < N; n++) {
                const int z = v1 ? (zv(g, n) + 15) % 16 : zv(g, n); /* v1 stores z - 1 (mod 16: z 0 is stored 15) */
                qz[g * (N / 8) + n / 8] = (int32_t)((uint32_t)qz[g * (N / 8) + n / 8] | (uint32_t)z << (4 * (n % 8)));
            }
        for (int act = 0; act < 2; act++) {
            CHECK(i4_gptq_dequantize(qw, qz, sc, act ? gidx : NULL, N, K, G, GR, v1, w));
            int wrong = 0;
            for (int n = 0; n < N; n++)
                for (int k = 0; k < K; k++) {
                    const int g = act ? gidx[k] : k / G, z = v1 ? (zv(g, n) + 15) % 16 + 1 : zv(g, n);
                    wrong += w[n * K + k] != (float)(qv(k, n) - z) * sv(g, n);
                }
            CHECK_MSG(wrong == 0, "GPTQ v1 %d act-order %d: %d values wrong", v1, act, wrong);
        }
    }
    gidx[5] = GR;
    CHECK(!i4_gptq_dequantize(qw, qz, sc, gidx, N, K, G, GR, true, w));
    gidx[5] = -1;
    CHECK(!i4_gptq_dequantize(qw, qz, sc, gidx, N, K, G, GR, true, w));
}

/* I4_B128 rows (the backends' 4-bit layout): for AWQ and GPTQ (v1, sequential and a g_idx whose groups keep
 * whole 32-runs) at groups 32, 64, 128, every row read back through i4_dequantize_row equals the packing's
 * float values exactly (z 16 of a v1 zero 15 included); act-order groups that split a 32-run, a group of 16
 * and rows of 96 are refused */
static void test_blocks(void) {
    enum { BN = 16, BK = 256 };
    static int32_t qw[BK * BN / 8], qz[BK * BN / 8], gi[BK];
    static float sc[BK * BN], w[BN * BK], r[BK];
    static i4_block b[BN * BK / I4_B];
    const int groups[3] = {32, 64, 128};
    for (int gsel = 0; gsel < 3; gsel++) {
        const int GS = groups[gsel], NG = BK / GS;
        for (int i = 0; i < NG * BN; i++) sc[i] = sv(i / BN, i % BN) * (gsel + 1);
        for (int awq = 0; awq < 2; awq++) {
            memset(qw, 0, sizeof qw);
            memset(qz, 0, sizeof qz);
            for (int k = 0; k < BK; k++)
                for (int n = 0; n < BN; n++) {
                    const uint32_t q = (uint32_t)qv(k, n);
                    if (awq) qw[k * (BN / 8) + n / 8] |= (int32_t)(q << (4 * i4_awq_nibble(n % 8)));
                    else qw[(k / 8) * BN + n] |= (int32_t)(q << (4 * (k % 8)));
                }
            for (int g = 0; g < NG; g++)
                for (int n = 0; n < BN; n++) {
                    const uint32_t z = (uint32_t)(awq ? zv(g, n) : (g + n) % 3 == 0 ? 15 : zv(g, n)); /* v1: 15 = z 16 */
                    qz[g * (BN / 8) + n / 8] |= (int32_t)(z << (4 * (awq ? i4_awq_nibble(n % 8) : n % 8)));
                }
            for (int act = 0; act < (awq ? 1 : 2); act++) {
                /* act: groups assigned to the 32-runs in reverse order (a g_idx keeping whole runs) */
                for (int k = 0; k < BK; k++) gi[k] = (BK - 1 - k) / 32 * 32 / GS;
                memset(b, 0xa5, sizeof b);
                const bool ok = awq ? i4_awq_blocks(qw, qz, sc, BN, BK, GS, b)
                                    : i4_gptq_blocks(qw, qz, sc, act ? gi : NULL, BN, BK, GS, NG, true, b);
                CHECK_MSG(ok, "I4_B128 %s group %d act %d refused", awq ? "AWQ" : "GPTQ", GS, act);
                if (awq) i4_awq_dequantize(qw, qz, sc, BN, BK, GS, w);
                else CHECK(i4_gptq_dequantize(qw, qz, sc, act ? gi : NULL, BN, BK, GS, NG, true, w));
                int wrong = 0;
                for (int n = 0; n < BN; n++) {
                    i4_dequantize_row(b + n * (BK / I4_B), BK, r);
                    for (int k = 0; k < BK; k++) wrong += r[k] != w[n * BK + k];
                }
                CHECK_MSG(wrong == 0, "I4_B128 %s group %d act %d: %d values differ", awq ? "AWQ" : "GPTQ", GS, act,
                          wrong);
            }
        }
    }
    /* refused: a g_idx splitting a 32-run, a group of 16, rows not of whole blocks */
    for (int k = 0; k < BK; k++) gi[k] = (k * 13 + 5) % BK / 64;
    CHECK(!i4_gptq_blocks(qw, qz, sc, gi, BN, BK, 64, BK / 64, true, b));
    CHECK(!i4_awq_blocks(qw, qz, sc, BN, BK, 16, b));
    CHECK(!i4_awq_blocks(qw, qz, sc, BN, 96, 32, b));
}

/* compressed-tensors pack-quantized (symmetric): q + 8 in nibble k % 8 of weight_packed[n][k / 8], scales (N, groups):
 * every value (stored - 8) s, a g_idx's groups followed; the same as I4_B128 rows (z 8); the nibbles in AWQ's order
 * read back wrong; a g_idx outside the groups refused */
static void test_ct(void) {
    enum { CN = 8, CK = 256, CG = 64, CNG = CK / CG };
    static int32_t pk[CN * CK / 8], gi[CK];
    static float sc[CN * CNG], w[CN * CK], r[CK];
    static i4_block b[CN * CK / I4_B];
    for (int i = 0; i < CN * CNG; i++) sc[i] = sv(i % CNG, i / CNG);
    for (int k = 0; k < CK; k++) gi[k] = (CK - 1 - k) / CG; /* reversed groups (whole 32-runs) */
    for (int order = 0; order < 2; order++) {
        memset(pk, 0, sizeof pk);
        for (int n = 0; n < CN; n++)
            for (int k = 0; k < CK; k++) {
                const int p = order ? i4_awq_nibble(k % 8) : k % 8; /* order 1: a wrong packing */
                pk[n * (CK / 8) + k / 8] |= (int32_t)((uint32_t)(qv(k, n) & 15) << (4 * p));
            }
        for (int act = 0; act < 2; act++) {
            CHECK(i4_ct_dequantize(pk, sc, act ? gi : NULL, CN, CK, CG, CNG, w));
            int wrong = 0;
            for (int n = 0; n < CN; n++)
                for (int k = 0; k < CK; k++)
                    wrong += w[n * CK + k] != (float)(qv(k, n) - 8) * sv(act ? gi[k] : k / CG, n);
            if (order == 0) CHECK_MSG(wrong == 0, "compressed-tensors act %d: %d values wrong", act, wrong);
            else CHECK_MSG(wrong > CN * CK / 2, "compressed-tensors in AWQ's nibble order: only %d values wrong", wrong);
            CHECK(i4_ct_blocks(pk, sc, act ? gi : NULL, CN, CK, CG, CNG, b));
            int diff = 0;
            for (int n = 0; n < CN; n++) {
                i4_dequantize_row(b + n * (CK / I4_B), CK, r);
                for (int k = 0; k < CK; k++) diff += r[k] != w[n * CK + k];
            }
            CHECK_MSG(diff == 0, "compressed-tensors I4_B128 act %d: %d values differ", act, diff);
        }
    }
    gi[7] = CNG;
    CHECK(!i4_ct_dequantize(pk, sc, gi, CN, CK, CG, CNG, w));
    CHECK(!i4_ct_blocks(pk, sc, gi, CN, CK, CG, CNG, b));
}

int main(void) {
    CHECK(i4_awq_nibble(0) == 0 && i4_awq_nibble(1) == 4 && i4_awq_nibble(2) == 1 && i4_awq_nibble(7) == 7);
    test_awq();
    test_gptq();
    test_blocks();
    test_ct();
    TEST_END();
}
