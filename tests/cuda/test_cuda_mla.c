/*
 * test_cuda_mla.c: the CUDA backend's multi-head latent attention ops (ops_attention_mla.cu: head_linear,
 * attention_mla) against the CPU reference (src/cpu/ops_attention_mla.c) on random inputs.
 *
 * head_linear: the cuBLAS path (x and w of one dtype: BF16 / BF16, F32 / F32) and the kernel (BF16 x with
 * F32 / F16 weights, F32 x with BF16 weights), strided x, DeepSeek's absorption shapes (H 16, 512 x 128 and
 * 128 x 512) and odd ones; BF16 outputs within 1e-2 (relative norm) / 2% of the largest element, F32 outputs
 * within 1e-4.
 *
 * attention_mla: several sequences over scrambled block tables (a whole prompt, a chunk starting
 * mid-sequence over its cached prefix, decode rows), block sizes 16 / 7 / 5, (L, R) = (32, 8), (512, 64)
 * (16 heads, 2 prompts of 300 tokens, block 16; a chunk + decodes), (64, 16) with 20 heads (two head groups
 * of a CTA), (40, 6) (L + R not a multiple of 8: the scalar loads), (960, 64) (the largest L + R, 1024); the
 * tensor-core kernel (BF16; (L, R) (512, 64), (256, 32)) with decodes at up to 4000 keys (many splits and
 * their merge), DeepSeek-V3's 128 heads and a partial head group;
 * BF16 activations with the BF16 cache (the GPU's defaults), F32 activations with an F32 cache (1e-4), and
 * the FP8 (E4M3) cache with a scale. The inputs are rounded to what the GPU holds so both backends see the
 * same values; every cache slot no query may read is NaN. Also: the cache write (concat_and_cache_mla) equal
 * to the CPU's (bit for bit after rounding), max_query_len / max_seq_len as upper bounds, padding slots (-1)
 * leave the cache alone, a CUDA graph of head_linear + attention_mla replayed equal to the eager ops, bad
 * slots / block ids reported by synchronize, bad shapes refused. mla_prep (norm + rope + cache write in one op)
 * against the CPU's, in BF16, F32 and with the FP8 cache, both rotary pair layouts.
 *
 * Exits 77 ("no CUDA device: skipped") without a GPU or a CUDA build.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/backend.h"
#include "tensor/fp8.h"
#include "test.h"

#define CUDA_TEST_SEED 0x9e3779b97f4a7c15ull
#include "cuda/cuda_test_util.h"

#define REL32 1e-4 /* F32 outputs */

/* ---- head_linear ---- */

static const char *dt_name(dtype dt) { return dt == DTYPE_BF16 ? "BF16" : dt == DTYPE_F16 ? "F16" : "F32"; }

/* y (T, H*N) = per head W_h x_h: x (T, H*K) at column pad of (T, H*K + pad) in xdt, w (H, N, K) in wdt, y ydt */
static void test_head_linear_case(int H, int N, int K, int T, int pad, dtype xdt, dtype wdt, dtype ydt) {
    const int64_t xw = (int64_t)H * K + pad, nw = (int64_t)H * N * K;
    float *xh = malloc((size_t)(T * xw) * sizeof *xh), *wh = malloc((size_t)nw * sizeof *wh);
    for (int64_t i = 0; i < T * xw; i++) xh[i] = round_to(xdt, rnd());
    for (int64_t i = 0; i < nw; i++) wh[i] = round_to(wdt, 0.3f * rnd());
    tensor xc_all = put(cpu, DTYPE_F32, T, xw, xh), xg_all = put(gpu, xdt, T, xw, xh);
    tensor xc = tensor_cols(&xc_all, pad, (int64_t)H * K), xg = tensor_cols(&xg_all, pad, (int64_t)H * K);
    const int64_t ws[3] = {H, N, K};
    void *wb = pack(wh, nw, wdt);
    tensor wsrc = tensor_make(wdt, wb, 3, ws), wc, wg;
    CHECK_OK(cpu->ops->import(cpu, &wsrc, &wc));
    CHECK_OK(gpu->ops->import(gpu, &wsrc, &wg));
    tensor yc = put(cpu, DTYPE_F32, T, (int64_t)H * N, NULL), yg = put(gpu, ydt, T, (int64_t)H * N, NULL);
    poison(&yg);
    cpu->ops->head_linear(cpu, &xc, &wc, &yc);
    gpu->ops->head_linear(gpu, &xg, &wg, &yg);
    CHECK_OK(gpu->ops->synchronize(gpu));
    float *c = get(cpu, &yc), *g = get(gpu, &yg);
    char what[200];
    snprintf(what, sizeof what, "head_linear H %d, N %d, K %d, T %d%s: x %s, w %s, y %s%s", H, N, K, T,
             pad ? " (strided x)" : "", dt_name(xdt), dt_name(wdt), dt_name(ydt),
             T <= 8 && xdt == DTYPE_BF16 && wdt == DTYPE_BF16 && K % 8 == 0 && pad % 8 == 0 ? " (GEMV)"
             : xdt == wdt && (ydt == xdt || ydt == DTYPE_F32)                               ? " (cuBLAS)"
                                                                                              : " (kernel)");
    const bool f32 = ydt == DTYPE_F32;
    compare(what, g, c, (int64_t)T * H * N, f32 ? REL32 : REL, f32 ? REL32 : ELEM);
    free(c);
    free(g);
    drop(cpu, &xc_all);
    drop(gpu, &xg_all);
    drop(cpu, &yc);
    drop(gpu, &yg);
    cpu->ops->release_import(cpu, &wc);
    gpu->ops->release_import(gpu, &wg);
    free(wb);
    free(xh);
    free(wh);
}

static void test_head_linear(void) {
    /* H, N, K, T, pad, x, w, y */
    test_head_linear_case(4, 32, 16, 7, 3, DTYPE_BF16, DTYPE_BF16, DTYPE_BF16);   /* fixtures' W_UK^T (L 32, N 16) */
    test_head_linear_case(4, 16, 32, 7, 0, DTYPE_BF16, DTYPE_BF16, DTYPE_BF16);   /* and W_UV (V 16, L 32) */
    test_head_linear_case(4, 32, 16, 7, 5, DTYPE_BF16, DTYPE_F32, DTYPE_BF16);    /* F32 checkpoint, BF16 act */
    test_head_linear_case(4, 16, 32, 9, 0, DTYPE_BF16, DTYPE_F16, DTYPE_BF16);
    test_head_linear_case(16, 512, 128, 33, 64, DTYPE_BF16, DTYPE_BF16, DTYPE_BF16); /* DeepSeek's W_UK^T */
    test_head_linear_case(16, 128, 512, 33, 0, DTYPE_BF16, DTYPE_BF16, DTYPE_BF16);  /* and W_UV */
    test_head_linear_case(16, 512, 128, 1, 0, DTYPE_BF16, DTYPE_BF16, DTYPE_BF16);   /* a decode row: k_head_gemv */
    test_head_linear_case(16, 128, 512, 1, 8, DTYPE_BF16, DTYPE_BF16, DTYPE_BF16);   /* its W_UV, strided */
    test_head_linear_case(16, 512, 128, 5, 16, DTYPE_BF16, DTYPE_BF16, DTYPE_BF16);  /* decode batches 2 .. 8 */
    test_head_linear_case(16, 128, 512, 8, 0, DTYPE_BF16, DTYPE_BF16, DTYPE_BF16);
    test_head_linear_case(5, 9, 96, 2, 0, DTYPE_BF16, DTYPE_BF16, DTYPE_F32);        /* rows past N, F32 out */
    /* k_head_gemv's chunks a lane (ceil(K / 256)): 2 with the second partial, 4 (K up to 1024) */
    test_head_linear_case(3, 40, 264, 3, 0, DTYPE_BF16, DTYPE_BF16, DTYPE_BF16);
    test_head_linear_case(3, 24, 1024, 1, 0, DTYPE_BF16, DTYPE_BF16, DTYPE_BF16);
    test_head_linear_case(2, 20, 776, 6, 8, DTYPE_BF16, DTYPE_BF16, DTYPE_BF16);
    test_head_linear_case(3, 20, 1024, 3, 0, DTYPE_BF16, DTYPE_BF16, DTYPE_BF16);    /* its largest K */
    test_head_linear_case(16, 128, 512, 70, 0, DTYPE_BF16, DTYPE_F32, DTYPE_BF16);   /* the kernel at K 512 */
    test_head_linear_case(16, 512, 128, 2, 0, DTYPE_BF16, DTYPE_F16, DTYPE_BF16);
    test_head_linear_case(3, 70, 37, 65, 1, DTYPE_F32, DTYPE_F32, DTYPE_F32);        /* odd sizes, F32 */
    test_head_linear_case(3, 70, 37, 65, 2, DTYPE_F32, DTYPE_BF16, DTYPE_F32);
    test_head_linear_case(5, 9, 100, 3, 0, DTYPE_BF16, DTYPE_BF16, DTYPE_F32);       /* BF16 in, F32 out */
    test_head_linear_case(5, 9, 100, 3, 0, DTYPE_F32, DTYPE_F32, DTYPE_BF16);        /* F32 in, BF16 out: kernel */

    /* bad shapes are refused (reported at synchronize) */
    const int64_t ws[3] = {2, 4, 8};
    float wv[64] = {0};
    tensor wsrc = tensor_make(DTYPE_F32, wv, 3, ws), wg;
    CHECK_OK(gpu->ops->import(gpu, &wsrc, &wg));
    tensor x = put(gpu, DTYPE_BF16, 3, 15, NULL), y = put(gpu, DTYPE_BF16, 3, 8, NULL);
    gpu->ops->head_linear(gpu, &x, &wg, &y); /* x has 15 columns, not H K = 16 */
    CHECK(gpu->ops->synchronize(gpu) != VLLM_OK);
    CHECK_MSG(strstr(vllm_last_error(), "head_linear") != NULL, "'head_linear' not in: %s", vllm_last_error());
    CHECK_OK(gpu->ops->synchronize(gpu));
    drop(gpu, &x);
    drop(gpu, &y);
    gpu->ops->release_import(gpu, &wg);
}

/* ---- attention_mla ---- */

typedef struct mla_layout {
    const char *name;
    int H, L, R, bs, S;
    int q_len[4], ctx[4];
} mla_layout;

static const mla_layout MLA_LAYOUTS[] = {
    /* name, heads, kv_lora_rank, rope, block size, sequences, q_len, ctx */
    {"(32 + 8) x 4 heads: prompt, chunk at 35, decodes, block 16", 4, 32, 8, 16, 4, {9, 5, 1, 1}, {9, 40, 17, 1}},
    {"(32 + 8) x 4 heads: chunk at 20, decode, prompt, block 7", 4, 32, 8, 7, 3, {12, 1, 30}, {32, 50, 30}},
    {"(512 + 64) x 16 heads: 2 prompts of 300, block 16", 16, 512, 64, 16, 2, {300, 300}, {300, 300}},
    {"(512 + 64) x 16 heads: chunk at 200, decodes, block 16", 16, 512, 64, 16, 3, {100, 1, 1}, {300, 700, 33}},
    {"(64 + 16) x 20 heads (two head groups), block 5", 20, 64, 16, 5, 2, {3, 1}, {40, 77}},
    {"(40 + 6) x 3 heads (L + R not a multiple of 8), block 7", 3, 40, 6, 7, 2, {6, 1}, {20, 45}},
    {"(960 + 64) x 16 heads (the largest L + R), block 16", 16, 960, 64, 16, 2, {2, 1}, {40, 100}},
    /* the tensor-core kernel's split keys: one to many splits per token, the merge */
    {"(512 + 64) x 16 heads: decodes at 4000, 1500, 70 and 1 keys, block 16", 16, 512, 64, 16, 4, {1, 1, 1, 1},
     {4000, 1500, 70, 1}},
    {"(512 + 64) x 128 heads (DeepSeek-V3: 8 head groups): chunk of 16 at 600, decodes, block 16", 128, 512, 64, 16,
     3, {16, 1, 1}, {600, 900, 5}},
    {"(256 + 32) x 16 heads: chunk, decode, block 16", 16, 256, 32, 16, 2, {2, 1}, {300, 129}},
    {"(256 + 32) x 20 heads: a decode at 900 keys (split, two head groups), block 16", 20, 256, 32, 16, 1, {1}, {900}},
};

enum { MLA_BF16, MLA_F32, MLA_FP8 }; /* activations + cache: BF16 + BF16, F32 + F32, BF16 + F8_E4M3 */
static const char *MLA_MODE[] = {"BF16 act, BF16 cache", "F32 act, F32 cache", "BF16 act, FP8 cache"};

/* mla_prep (the latent's RMSNorm, the rope of H query heads and the shared key, the cache write) against the CPU's
 * (its composition of norm, rope and the write): strided kv and q_rope, both pair layouts, a padding slot; a bad
 * position and a slot past the cache reported by synchronize. */
static void test_mla_prep_case(int H, int L, int R, int mode, float fp8_scale) {
    enum { T = 6, BS = 16, NBLK = 5, MAXP = 64 };
    const bool f8 = mode == MLA_FP8;
    const dtype adt = mode == MLA_F32 ? DTYPE_F32 : DTYPE_BF16, rdt = adt;
    const dtype gcdt = mode == MLA_F32 ? DTYPE_F32 : f8 ? DTYPE_F8_E4M3 : DTYPE_BF16;
    const dtype ccdt = f8 ? DTYPE_F8_E4M3 : DTYPE_F32;
    const int W = L + R;
    const int64_t XW = W + 8, QW = (int64_t)H * R + 8, cache_n = (int64_t)NBLK * BS * W;
    int32_t pos[T] = {0, 5, 63, 17, 30, 1};
    int64_t slots[T] = {3, 17, -1, 40, 79, 0};
    for (int neox = 0; neox < 2; neox++) {
        float *xh = malloc((size_t)(T * XW) * sizeof *xh), *qh = malloc((size_t)(T * QW) * sizeof *qh);
        float *wh = malloc((size_t)L * sizeof *wh), *csh = malloc((size_t)MAXP * R * sizeof *csh);
        float *ch = malloc((size_t)cache_n * sizeof *ch);
        for (int64_t i = 0; i < T * XW; i++) xh[i] = round_to(rdt, 2.0f * rnd());
        for (int64_t i = 0; i < T * QW; i++) qh[i] = round_to(rdt, rnd());
        for (int i = 0; i < L; i++) wh[i] = 1.0f + 0.5f * rnd();
        for (int p = 0; p < MAXP; p++)
            for (int i = 0; i < R / 2; i++) {
                csh[p * R + i] = cosf(p * powf(1000.0f, -2.0f * i / R));
                csh[p * R + R / 2 + i] = sinf(p * powf(1000.0f, -2.0f * i / R));
            }
        for (int64_t i = 0; i < cache_n; i++) ch[i] = NAN;
        tensor xc = put(cpu, DTYPE_F32, T, XW, xh), xg = put(gpu, adt, T, XW, xh);
        tensor qc = put(cpu, DTYPE_F32, T, QW, qh), qg = put(gpu, adt, T, QW, qh);
        tensor wc = put(cpu, DTYPE_F32, 1, L, wh), wg = put(gpu, DTYPE_F32, 1, L, wh);
        tensor csc = put(cpu, DTYPE_F32, MAXP, R, csh), csg = put(gpu, DTYPE_F32, MAXP, R, csh);
        tensor kvc = tensor_cols(&xc, 8, W), kvg = tensor_cols(&xg, 8, W); /* rows of XW: strided */
        tensor qrc = tensor_cols(&qc, 8, (int64_t)H * R), qrg = tensor_cols(&qg, 8, (int64_t)H * R);
        tensor wc1 = tensor_1d(DTYPE_F32, wc.data, L), wg1 = tensor_1d(DTYPE_F32, wg.data, L);
        const int64_t shape[4] = {NBLK, BS, 1, W};
        tensor ccc = tensor_make(ccdt, NULL, 4, shape), ccg = tensor_make(gcdt, NULL, 4, shape);
        ccc.qscale = ccg.qscale = f8 ? fp8_scale : 0.0f;
        CHECK_OK(cpu->ops->alloc(cpu, &ccc));
        CHECK_OK(gpu->ops->alloc(gpu, &ccg));
        void *b = pack(ch, cache_n, ccdt);
        CHECK_OK(cpu->ops->upload(cpu, &ccc, b, (size_t)cache_n * dtype_size(ccdt)));
        free(b);
        b = pack(ch, cache_n, gcdt);
        CHECK_OK(gpu->ops->upload(gpu, &ccg, b, (size_t)cache_n * dtype_size(gcdt)));
        free(b);
        attn_meta mc = {.num_tokens = T, .block_size = BS}, mg = mc;
        mc.slot_mapping = put_i64(cpu, slots, T);
        mg.slot_mapping = put_i64(gpu, slots, T);
        tensor pc = put_i32(cpu, pos, T), pg = put_i32(gpu, pos, T);
        cpu->ops->mla_prep(cpu, &qrc, &kvc, &wc1, 1e-6f, &pc, &csc, R, neox, &ccc, &mc);
        gpu->ops->mla_prep(gpu, &qrg, &kvg, &wg1, 1e-6f, &pg, &csg, R, neox, &ccg, &mg);
        CHECK_OK(cpu->ops->synchronize(cpu));
        CHECK_OK(gpu->ops->synchronize(gpu));
        const bool f32 = mode == MLA_F32;
        char what[160];
        float *c = get(cpu, &xc), *g = get(gpu, &xg);
        snprintf(what, sizeof what, "mla_prep (%d + %d) x %d heads, neox %d [%s]: kv", L, R, H, neox, MLA_MODE[mode]);
        compare(what, g, c, T * XW, f32 ? REL32 : REL, f32 ? REL32 : ELEM);
        free(c);
        free(g);
        c = get(cpu, &qc);
        g = get(gpu, &qg);
        snprintf(what, sizeof what, "mla_prep (%d + %d) x %d heads, neox %d [%s]: q_rope", L, R, H, neox,
                 MLA_MODE[mode]);
        compare(what, g, c, T * QW, f32 ? REL32 : REL, f32 ? REL32 : ELEM);
        free(c);
        free(g);
        /* the cache: the written rows alike (FP8: a rounding step apart at most), everything else still NaN */
        c = get(cpu, &ccc);
        g = get(gpu, &ccg);
        int64_t nan_c = 0, nan_g = 0;
        for (int64_t i = 0; i < cache_n; i++) {
            nan_c += isnan(c[i]);
            nan_g += isnan(g[i]);
            if (isnan(c[i]) || isnan(g[i])) c[i] = g[i] = 0.0f;
        }
        CHECK_MSG(nan_c == nan_g && nan_c == cache_n - (T - 1) * W, "mla_prep: %lld / %lld unwritten cache values, "
                  "want %lld", (long long)nan_g, (long long)nan_c, (long long)(cache_n - (T - 1) * W));
        snprintf(what, sizeof what, "mla_prep (%d + %d) x %d heads, neox %d [%s]: cache", L, R, H, neox,
                 MLA_MODE[mode]);
        compare(what, g, c, cache_n, f32 ? REL32 : f8 ? 6e-2 : REL, f32 ? REL32 : f8 ? 0.15 : ELEM);
        free(c);
        free(g);
        if (neox == 0 && mode == MLA_BF16) {
            /* a position past the table, then a slot past the cache: reported at synchronize */
            int32_t badp[T] = {0, 5, MAXP, 17, 30, 1};
            tensor bp = put_i32(gpu, badp, T);
            gpu->ops->mla_prep(gpu, &qrg, &kvg, &wg1, 1e-6f, &bp, &csg, R, false, &ccg, &mg);
            expect_device_error("rope");
            drop(gpu, &bp);
            int64_t bads[T] = {3, 17, -1, 40, NBLK * BS, 0};
            tensor bs = put_i64(gpu, bads, T);
            attn_meta mb = mg;
            mb.slot_mapping = bs;
            gpu->ops->mla_prep(gpu, &qrg, &kvg, &wg1, 1e-6f, &pg, &csg, R, false, &ccg, &mb);
            expect_device_error("kv_write");
            drop(gpu, &bs);
            /* host-side refusals: an odd rope_dim, q_rope not whole heads */
            gpu->ops->mla_prep(gpu, &qrg, &kvg, &wg1, 1e-6f, &pg, &csg, R - 1, false, &ccg, &mg);
            CHECK(gpu->ops->synchronize(gpu) != VLLM_OK);
            tensor q_odd = tensor_cols(&qg, 8, (int64_t)H * R - 2);
            gpu->ops->mla_prep(gpu, &q_odd, &kvg, &wg1, 1e-6f, &pg, &csg, R, false, &ccg, &mg);
            CHECK(gpu->ops->synchronize(gpu) != VLLM_OK);
            CHECK_OK(gpu->ops->synchronize(gpu));
        }
        tensor *tc[] = {&xc, &qc, &wc, &csc, &ccc, &mc.slot_mapping, &pc};
        tensor *tg[] = {&xg, &qg, &wg, &csg, &ccg, &mg.slot_mapping, &pg};
        for (size_t i = 0; i < sizeof tc / sizeof *tc; i++) drop(cpu, tc[i]);
        for (size_t i = 0; i < sizeof tg / sizeof *tg; i++) drop(gpu, tg[i]);
        free(xh);
        free(qh);
        free(wh);
        free(csh);
        free(ch);
    }
}

/* One layout in one mode (fp8_scale: the FP8 cache's qscale). extra: also graphs, padding, bad indices. */
static void test_attention_mla_case(const mla_layout *Ly, int mode, float fp8_scale, bool extra) {
    const bool f8 = mode == MLA_FP8;
    const dtype adt = mode == MLA_F32 ? DTYPE_F32 : DTYPE_BF16;                        /* GPU activations */
    const dtype gcdt = mode == MLA_F32 ? DTYPE_F32 : f8 ? DTYPE_F8_E4M3 : DTYPE_BF16;  /* GPU cache */
    const dtype ccdt = f8 ? DTYPE_F8_E4M3 : DTYPE_F32;                                /* CPU cache */
    const float cs = f8 ? fp8_scale : 0.0f;
    const int H = Ly->H, L = Ly->L, R = Ly->R, W = L + R, bs = Ly->bs, S = Ly->S;
    int32_t qsl[5] = {0}, seq_lens[4];
    int max_q = 0, max_ctx = 0, max_blocks = 0, total_blocks = 0;
    for (int s = 0; s < S; s++) {
        qsl[s + 1] = qsl[s] + Ly->q_len[s];
        seq_lens[s] = Ly->ctx[s];
        max_q = Ly->q_len[s] > max_q ? Ly->q_len[s] : max_q;
        max_ctx = Ly->ctx[s] > max_ctx ? Ly->ctx[s] : max_ctx;
        int nb = (Ly->ctx[s] + bs - 1) / bs;
        max_blocks = nb > max_blocks ? nb : max_blocks;
        total_blocks += nb;
    }
    const int T = qsl[S], num_blocks = total_blocks + 3;
    /* block tables over a shuffled pool (spare blocks stay NaN) */
    int *perm = malloc((size_t)num_blocks * sizeof *perm);
    for (int i = 0; i < num_blocks; i++) perm[i] = i;
    for (int i = num_blocks - 1; i > 0; i--) {
        int j = rnd_int(i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int32_t *bt = malloc((size_t)S * max_blocks * sizeof *bt);
    for (int i = 0; i < S * max_blocks; i++) bt[i] = -1;
    for (int s = 0, next = 0; s < S; s++)
        for (int b = 0; b < (Ly->ctx[s] + bs - 1) / bs; b++) bt[s * max_blocks + b] = perm[next++];
    /* the cache: NaN everywhere, random latents at the cached prefix positions (values the GPU's cache holds:
     * BF16, F32, or raw E4M3 values of x / scale); the new tokens' slots */
    const int64_t cache_n = (int64_t)num_blocks * bs * W;
    float *ch = malloc((size_t)cache_n * sizeof *ch);
    for (int64_t i = 0; i < cache_n; i++) ch[i] = NAN;
    int64_t *slots = malloc((size_t)T * sizeof *slots);
    for (int s = 0; s < S; s++) {
        const int first_new = Ly->ctx[s] - Ly->q_len[s];
        for (int p = 0; p < Ly->ctx[s]; p++) {
            const int64_t slot = (int64_t)bt[s * max_blocks + p / bs] * bs + p % bs;
            if (p >= first_new) {
                slots[qsl[s] + p - first_new] = slot;
                continue;
            }
            for (int i = 0; i < W; i++)
                ch[slot * W + i] = f8 ? fp8_e4m3_to_f32(fp8_e4m3_from_f32(rnd() / cs)) : round_to(gcdt, rnd());
        }
    }
    const int64_t shape[4] = {num_blocks, bs, 1, W};
    tensor ccc = tensor_make(ccdt, NULL, 4, shape), ccg = tensor_make(gcdt, NULL, 4, shape);
    ccc.qscale = ccg.qscale = cs;
    CHECK_OK(cpu->ops->alloc(cpu, &ccc));
    CHECK_OK(gpu->ops->alloc(gpu, &ccg));
    void *b = pack(ch, cache_n, ccdt);
    CHECK_OK(cpu->ops->upload(cpu, &ccc, b, (size_t)cache_n * dtype_size(ccdt)));
    free(b);
    b = pack(ch, cache_n, gcdt);
    CHECK_OK(gpu->ops->upload(gpu, &ccg, b, (size_t)cache_n * dtype_size(gcdt)));
    free(b);

    /* one fused row per token, [q_lat | q_rope | kv | 8 spare]: every input strided (as block_mla.c's; rows of
     * 16-byte multiples where W is a multiple of 8, as the tensor-core kernel needs) */
    const int64_t QL = (int64_t)H * L, QR = (int64_t)H * R, XW = QL + QR + W + 8;
    const dtype rdt = mode == MLA_F32 ? DTYPE_F32 : DTYPE_BF16; /* the values both backends hold */
    float *xh = malloc((size_t)(T * XW) * sizeof *xh);
    for (int64_t i = 0; i < T * XW; i++) xh[i] = round_to(rdt, rnd());
    tensor xc = put(cpu, DTYPE_F32, T, XW, xh), xg = put(gpu, adt, T, XW, xh);
    tensor qlc = tensor_cols(&xc, 0, QL), qrc = tensor_cols(&xc, QL, QR), kvc = tensor_cols(&xc, QL + QR, W);
    tensor qlg = tensor_cols(&xg, 0, QL), qrg = tensor_cols(&xg, QL, QR), kvg = tensor_cols(&xg, QL + QR, W);
    attn_meta mc = {.num_seqs = S, .num_tokens = T, .max_query_len = max_q, .max_seq_len = max_ctx,
                    .block_size = bs, .max_blocks_per_seq = max_blocks};
    attn_meta mg = mc;
    mc.query_start_loc = put_i32(cpu, qsl, S + 1);
    mg.query_start_loc = put_i32(gpu, qsl, S + 1);
    mc.seq_lens = put_i32(cpu, seq_lens, S);
    mg.seq_lens = put_i32(gpu, seq_lens, S);
    mc.block_tables = tensor_2d(DTYPE_I32, NULL, S, max_blocks);
    mg.block_tables = mc.block_tables;
    CHECK_OK(cpu->ops->alloc(cpu, &mc.block_tables));
    CHECK_OK(gpu->ops->alloc(gpu, &mg.block_tables));
    CHECK_OK(cpu->ops->upload(cpu, &mc.block_tables, bt, (size_t)S * max_blocks * 4));
    CHECK_OK(gpu->ops->upload(gpu, &mg.block_tables, bt, (size_t)S * max_blocks * 4));
    mc.slot_mapping = put_i64(cpu, slots, T);
    mg.slot_mapping = put_i64(gpu, slots, T);
    /* DeepSeek's scale for qk_nope 128 (2x: sharper softmaxes) */
    const mla_params mp = {.num_heads = H, .kv_lora_rank = L, .rope_dim = R, .scale = 2.0f / sqrtf(128.0f + R)};

    tensor oc = put(cpu, DTYPE_F32, T, QL, NULL), og = put(gpu, adt, T, QL, NULL);
    poison(&og);
    cpu->ops->attention_mla(cpu, &qlc, &qrc, &kvc, &ccc, &mc, &mp, &oc);
    gpu->ops->attention_mla(gpu, &qlg, &qrg, &kvg, &ccg, &mg, &mp, &og);
    CHECK_OK(cpu->ops->synchronize(cpu));
    CHECK_OK(gpu->ops->synchronize(gpu));
    float *c = get(cpu, &oc), *g = get(gpu, &og);
    const double rel = mode == MLA_F32 ? REL32 : REL, elem = mode == MLA_F32 ? REL32 : ELEM;
    char what[200];
    snprintf(what, sizeof what, "attention_mla %s [%s]", Ly->name, MLA_MODE[mode]);
    compare(what, g, c, (int64_t)T * QL, rel, elem);
    free(g);

    /* the cache write: the same values at the new slots (bit for bit after rounding), the rest untouched */
    {
        float *cc = get(cpu, &ccc), *cg = get(gpu, &ccg);
        int64_t diff = 0;
        for (int64_t i = 0; i < cache_n; i++) {
            const float want = gcdt == DTYPE_BF16 ? round_to(DTYPE_BF16, cc[i]) : cc[i];
            diff += !(want == cg[i] || (isnan(want) && isnan(cg[i])));
        }
        CHECK_MSG(diff == 0, "attention_mla [%s, %s]: %lld cache values differ from the CPU's", Ly->name,
                  MLA_MODE[mode], (long long)diff);
        free(cc);
        free(cg);
    }

    /* max_query_len / max_seq_len as upper bounds (a graph recorded for longer contexts) */
    {
        attn_meta mu = mg;
        mu.max_query_len = max_q + 5;
        mu.max_seq_len = 8 * max_ctx + 100;
        poison(&og);
        gpu->ops->attention_mla(gpu, &qlg, &qrg, &kvg, &ccg, &mu, &mp, &og);
        g = get(gpu, &og);
        snprintf(what, sizeof what, "attention_mla %s [%s], upper-bound lengths", Ly->name, MLA_MODE[mode]);
        compare(what, g, c, (int64_t)T * QL, rel, elem);
        free(g);
    }

    if (extra) {
        /* padding slots (-1) write nothing: other kv, the same output, the cache unchanged */
        float *before = get(gpu, &ccg);
        int64_t *none = malloc((size_t)T * sizeof *none);
        for (int t = 0; t < T; t++) none[t] = -1;
        tensor sg = put_i64(gpu, none, T);
        float *zh = calloc((size_t)(T * W), sizeof *zh);
        tensor zg = put(gpu, adt, T, W, zh);
        attn_meta mp1 = mg;
        mp1.slot_mapping = sg;
        poison(&og);
        gpu->ops->attention_mla(gpu, &qlg, &qrg, &zg, &ccg, &mp1, &mp, &og);
        g = get(gpu, &og);
        snprintf(what, sizeof what, "attention_mla %s [%s], padding slots", Ly->name, MLA_MODE[mode]);
        compare(what, g, c, (int64_t)T * QL, rel, elem);
        free(g);
        float *after = get(gpu, &ccg);
        int64_t diff = 0;
        for (int64_t i = 0; i < cache_n; i++) diff += memcmp(&before[i], &after[i], sizeof *after) != 0;
        CHECK_MSG(diff == 0, "attention_mla: padding slots changed %lld cache values", (long long)diff);
        free(before);
        free(after);
        free(none);
        free(zh);
        drop(gpu, &sg);
        drop(gpu, &zg);

        /* a graph of head_linear (q_lat from a q_nope) + attention_mla + head_linear (W_UV), replayed on new
         * queries, equals the eager ops */
        if (gpu->ops->graph_begin) {
            const int N = 16, V = 24;
            const int64_t s_uk[3] = {H, L, N}, s_uv[3] = {H, V, L};
            float *wuk = malloc((size_t)H * L * N * sizeof *wuk), *wuv = malloc((size_t)H * V * L * sizeof *wuv);
            for (int64_t i = 0; i < (int64_t)H * L * N; i++) wuk[i] = 0.3f * rnd();
            for (int64_t i = 0; i < (int64_t)H * V * L; i++) wuv[i] = 0.3f * rnd();
            void *bk = pack(wuk, (int64_t)H * L * N, DTYPE_F32), *bv = pack(wuv, (int64_t)H * V * L, DTYPE_BF16);
            tensor hk = tensor_make(DTYPE_F32, bk, 3, s_uk), hv = tensor_make(DTYPE_BF16, bv, 3, s_uv), wk, wv;
            CHECK_OK(gpu->ops->import(gpu, &hk, &wk));
            CHECK_OK(gpu->ops->import(gpu, &hv, &wv));
            float *qn = malloc((size_t)T * H * N * sizeof *qn);
            for (int64_t i = 0; i < (int64_t)T * H * N; i++) qn[i] = round_to(rdt, rnd());
            tensor qng = put(gpu, adt, T, (int64_t)H * N, NULL), ql2 = put(gpu, adt, T, QL, NULL);
            tensor ol2 = put(gpu, adt, T, QL, NULL), yg = put(gpu, adt, T, (int64_t)H * V, NULL);
            be_graph *gr = NULL;
            CHECK_OK(gpu->ops->graph_begin(gpu));
            gpu->ops->head_linear(gpu, &qng, &wk, &ql2);
            gpu->ops->attention_mla(gpu, &ql2, &qrg, &kvg, &ccg, &mg, &mp, &ol2);
            gpu->ops->head_linear(gpu, &ol2, &wv, &yg);
            CHECK_OK(gpu->ops->graph_end(gpu, &gr));
            for (int rep = 0; rep < 2 && gr; rep++) {
                for (int64_t i = 0; i < (int64_t)T * H * N; i++) qn[i] = round_to(rdt, rnd());
                void *qb = pack(qn, (int64_t)T * H * N, adt);
                CHECK_OK(gpu->ops->upload(gpu, &qng, qb, (size_t)(T * H * N) * dtype_size(adt)));
                free(qb);
                poison(&yg);
                CHECK_OK(gpu->ops->graph_launch(gpu, gr));
                float *yr = get(gpu, &yg);
                poison(&yg);
                gpu->ops->head_linear(gpu, &qng, &wk, &ql2);
                gpu->ops->attention_mla(gpu, &ql2, &qrg, &kvg, &ccg, &mg, &mp, &ol2);
                gpu->ops->head_linear(gpu, &ol2, &wv, &yg);
                float *ye = get(gpu, &yg);
                int64_t diff2 = 0;
                for (int64_t i = 0; i < (int64_t)T * H * V; i++) diff2 += !(yr[i] == ye[i]);
                CHECK_MSG(diff2 == 0, "attention_mla [%s, %s]: the graph's replay %d differs from the eager ops in "
                          "%lld values", Ly->name, MLA_MODE[mode], rep, (long long)diff2);
                free(yr);
                free(ye);
            }
            if (gr) gpu->ops->graph_free(gpu, gr);
            printf("  %-90s replayed\n", "attention_mla + head_linear in a CUDA graph");
            drop(gpu, &qng);
            drop(gpu, &ql2);
            drop(gpu, &ol2);
            drop(gpu, &yg);
            gpu->ops->release_import(gpu, &wk);
            gpu->ops->release_import(gpu, &wv);
            free(bk);
            free(bv);
            free(wuk);
            free(wuv);
            free(qn);
        }

        /* bad indices found on the device: a slot past the cache, a block id past the pool */
        const int64_t save_slot = slots[0];
        slots[0] = (int64_t)num_blocks * bs;
        tensor sb = put_i64(gpu, slots, T);
        attn_meta mb = mg;
        mb.slot_mapping = sb;
        gpu->ops->attention_mla(gpu, &qlg, &qrg, &kvg, &ccg, &mb, &mp, &og);
        expect_device_error("kv_write");
        drop(gpu, &sb);
        slots[0] = save_slot;
        const int32_t save = bt[0];
        bt[0] = num_blocks + 7;
        tensor btg = tensor_2d(DTYPE_I32, NULL, S, max_blocks);
        CHECK_OK(gpu->ops->alloc(gpu, &btg));
        CHECK_OK(gpu->ops->upload(gpu, &btg, bt, (size_t)S * max_blocks * 4));
        mb = mg;
        mb.block_tables = btg;
        gpu->ops->attention_mla(gpu, &qlg, &qrg, NULL, &ccg, &mb, &mp, &og);
        expect_device_error("attention");
        drop(gpu, &btg);
        bt[0] = save;

        /* host-side refusals: a cache of the wrong width, L + R past the kernel's limit */
        mla_params bad = mp;
        bad.rope_dim = R + 1;
        gpu->ops->attention_mla(gpu, &qlg, &qrg, NULL, &ccg, &mg, &bad, &og);
        CHECK(gpu->ops->synchronize(gpu) != VLLM_OK);
        CHECK_MSG(strstr(vllm_last_error(), "attention_mla") != NULL, "'attention_mla' not in: %s", vllm_last_error());
        bad = mp;
        bad.kv_lora_rank = 2000;
        gpu->ops->attention_mla(gpu, &qlg, &qrg, NULL, &ccg, &mg, &bad, &og);
        CHECK(gpu->ops->synchronize(gpu) != VLLM_OK);
        CHECK_OK(gpu->ops->synchronize(gpu));
    }

    free(c);
    tensor *tc[] = {&ccc, &xc, &oc, &mc.query_start_loc, &mc.seq_lens, &mc.block_tables, &mc.slot_mapping};
    tensor *tg[] = {&ccg, &xg, &og, &mg.query_start_loc, &mg.seq_lens, &mg.block_tables, &mg.slot_mapping};
    for (size_t i = 0; i < sizeof tc / sizeof *tc; i++) drop(cpu, tc[i]);
    for (size_t i = 0; i < sizeof tg / sizeof *tg; i++) drop(gpu, tg[i]);
    free(xh);
    free(ch);
    free(slots);
    free(bt);
    free(perm);
}

static void test_attention_mla(void) {
    const int n = (int)(sizeof MLA_LAYOUTS / sizeof *MLA_LAYOUTS);
    for (int i = 0; i < n; i++) {
        test_attention_mla_case(&MLA_LAYOUTS[i], MLA_BF16, 0.0f, i == 0 || i == 7); /* 7: the tensor cores */
        test_attention_mla_case(&MLA_LAYOUTS[i], MLA_F32, 0.0f, i == 1);
    }
    /* the FP8 cache: scales that spread the values over E4M3's range, 1, and one that saturates */
    test_attention_mla_case(&MLA_LAYOUTS[0], MLA_FP8, 1.0f / 64, true);
    test_attention_mla_case(&MLA_LAYOUTS[1], MLA_FP8, 1.0f, false);
    test_attention_mla_case(&MLA_LAYOUTS[3], MLA_FP8, 1.0f / 100, false);
    test_attention_mla_case(&MLA_LAYOUTS[5], MLA_FP8, 0.002f, false);
    /* mla_prep: DeepSeek's shape, the fixtures', MiniCPM3's; F32; the FP8 cache */
    test_mla_prep_case(16, 512, 64, MLA_BF16, 0.0f);
    test_mla_prep_case(4, 32, 8, MLA_BF16, 0.0f);
    test_mla_prep_case(40, 256, 32, MLA_BF16, 0.0f);
    test_mla_prep_case(4, 640, 16, MLA_BF16, 0.0f); /* past k_mla_prep's register path (L > 128 MLP_N) */
    test_mla_prep_case(16, 512, 64, MLA_F32, 0.0f);
    test_mla_prep_case(16, 512, 64, MLA_FP8, 1.0f / 32);
}

int main(void) {
    vllm_status st = backend_create("cuda", NULL, &gpu);
    if (st != VLLM_OK) {
        printf("no CUDA device: skipped (%s)\n", vllm_last_error());
        return 77;
    }
    backend_options co = {.num_threads = 2};
    CHECK_OK(backend_create("cpu", &co, &cpu));
    if (!cpu) TEST_END();
    CHECK(gpu->ops->head_linear != NULL && gpu->ops->attention_mla != NULL);
    if (gpu->ops->head_linear && gpu->ops->attention_mla) {
        test_head_linear();
        test_attention_mla();
    }
    CHECK_OK(gpu->ops->synchronize(gpu));
    CHECK_OK(cpu->ops->synchronize(cpu));
    backend_free(gpu);
    backend_free(cpu);
    TEST_END();
}
