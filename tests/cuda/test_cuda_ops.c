/*
 * test_cuda_ops.c: every op of the CUDA backend against the CPU backend
 * (the reference) on random inputs.
 *
 * Inputs are drawn once, rounded to BF16 (the GPU's activation dtype) and
 * given to both backends, so the only differences are the GPU's summation
 * order and its BF16 outputs: relative error (‖gpu - cpu‖ / ‖cpu‖) within
 * 1e-2 and every element within 2% of the largest; NaN never passes, and
 * every output is poisoned with NaN before the op runs. Paged attention
 * runs over several layouts (mixed prefill/decode, block sizes 16 and 7,
 * MHA/GQA/MQA, head_dim 6 to 256, sliding window, long contexts that take
 * the split-KV path, prefill chunks on the tensor cores at head_dim 64,
 * 128 and 256, Gemma 2's score softcap on every kernel) with NaN in every
 * cache slot no query may read, and again with max_query_len /
 * max_seq_len as upper bounds. The norm kinds (Gemma's (1 + w) RMSNorm,
 * LayerNorm), the activations (act_mul, activation: SiLU, GELU tanh / erf,
 * ReLU) and the softcap run on each of their kernels. The fused ops
 * (add_rms_norm, add_norm, qk_norm_rope_kv and _ex, linear_fused with
 * Gemma's and OPT's stages) are compared with the CPU backend's
 * composites, padding slots (-1) must leave the caches alone, and a
 * recorded graph replayed on new inputs must equal the eager ops; failures
 * while recording are reported by graph_end.
 * Sampling is compared with the reference of src/sample/ (sample_row_ref):
 * greedy exactly, seeded draws exactly on well-separated logits, the
 * min_p / top_k / top_p masks, penalties, bias, allowed ids, bad words,
 * min_tokens, and logprobs within 1e-4. Bad indices found on the device
 * must come back as errors from synchronize, naming the op. supports()
 * must answer what the kernels take.
 *
 * Exits 77 ("no CUDA device: skipped") without a GPU or a CUDA build.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample/sample.h"
#include "tensor/backend.h"
#include "tensor/dummy.h"
#include "tensor/fp8.h"
#include "test.h"

#include "cuda/cuda_test_util.h"

/* ------------------------------------------------------------------ */

static void test_memory(void) {
    float x[64];
    for (int i = 0; i < 64; i++) x[i] = rnd();
    tensor t = put(gpu, DTYPE_F32, 8, 8, x);
    float *y = get(gpu, &t);
    CHECK(memcmp(x, y, sizeof x) == 0);
    free(y);
    /* zero a strided view: columns 2..5 of every row */
    tensor v = tensor_cols(&t, 2, 4);
    CHECK_OK(gpu->ops->zero(gpu, &v));
    y = get(gpu, &t);
    int ok = 1;
    for (int r = 0; r < 8; r++)
        for (int c = 0; c < 8; c++) ok &= y[r * 8 + c] == ((c >= 2 && c < 6) ? 0.0f : x[r * 8 + c]);
    CHECK(ok);
    free(y);
    drop(gpu, &t);
    /* import of a strided host tensor keeps the rows, not the padding */
    tensor host = tensor_2d(DTYPE_F32, x, 4, 16);
    tensor hv = tensor_cols(&host, 3, 5), imp;
    CHECK_OK(gpu->ops->import(gpu, &hv, &imp));
    CHECK(imp.row_stride == 0 && imp.shape[0] == 4 && imp.shape[1] == 5);
    y = get(gpu, &imp);
    ok = 1;
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 5; c++) ok &= y[r * 5 + c] == x[r * 16 + 3 + c];
    CHECK(ok);
    free(y);
    gpu->ops->release_import(gpu, &imp);
    /* many uploads queued without a synchronize, from a host buffer rewritten after each:
     * the staging ring must copy the data at once and wrap without overwriting pending copies */
    {
        const int n = 300, chunk = 50000; /* 15 MB over a 1 MiB ring at first */
        tensor big = tensor_1d(DTYPE_I32, NULL, (int64_t)n * chunk);
        CHECK_OK(gpu->ops->alloc(gpu, &big));
        int32_t *src = malloc((size_t)chunk * sizeof *src);
        for (int i = 0; i < n; i++) {
            for (int j = 0; j < chunk; j++) src[j] = i * 7919 + j;
            tensor part = tensor_1d(DTYPE_I32, (int32_t *)big.data + (size_t)i * chunk, chunk);
            size_t bytes = (size_t)chunk * 4;
            CHECK_OK(gpu->ops->upload(gpu, &part, src, bytes));
        }
        int32_t *back = malloc((size_t)n * chunk * sizeof *back);
        CHECK_OK(gpu->ops->download(gpu, back, &big, (size_t)n * chunk * 4));
        int64_t bad = 0;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < chunk; j++) bad += back[(size_t)i * chunk + j] != i * 7919 + j;
        CHECK_MSG(bad == 0, "staged uploads: %lld values differ", (long long)bad);
        /* one upload larger than the ring (it grows) */
        int32_t *large = malloc((size_t)n * chunk * sizeof *large);
        for (int64_t i = 0; i < (int64_t)n * chunk; i++) large[i] = (int32_t)(i ^ 0x5a5a);
        CHECK_OK(gpu->ops->upload(gpu, &big, large, (size_t)n * chunk * 4));
        memset(large, 0, (size_t)n * chunk * 4);
        CHECK_OK(gpu->ops->download(gpu, back, &big, (size_t)n * chunk * 4));
        bad = 0;
        for (int64_t i = 0; i < (int64_t)n * chunk; i++) bad += back[i] != (int32_t)(i ^ 0x5a5a);
        CHECK_MSG(bad == 0, "large staged upload: %lld values differ", (long long)bad);
        free(large);
        free(back);
        free(src);
        drop(gpu, &big);
    }
    size_t fr = 0, tot = 0;
    CHECK(gpu->ops->mem_info != NULL);
    if (gpu->ops->mem_info) {
        CHECK_OK(gpu->ops->mem_info(gpu, &fr, &tot));
        CHECK(tot > 0 && fr <= tot);
    }
}

static void test_embedding(void) {
    /* the last case a row longer than one batch of loads a thread (8 x 256 elements) with a tail: BF16, D 2500 */
    const dtype dts[4] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16, DTYPE_BF16};
    const int V = 50, T = 37;
    for (int di = 0; di < 4; di++) {
        const int D = di == 3 ? 2500 : 96;
        float *w = malloc((size_t)V * D * sizeof *w);
        for (int i = 0; i < V * D; i++) w[i] = round_to(dts[di], rnd());
        void *wb = pack(w, V * D, dts[di]);
        tensor host = tensor_2d(dts[di], wb, V, D), tc, tg;
        CHECK_OK(cpu->ops->import(cpu, &host, &tc));
        CHECK_OK(gpu->ops->import(gpu, &host, &tg));
        int32_t ids[37];
        for (int i = 0; i < T; i++) ids[i] = rnd_int(V);
        tensor ic = put_i32(cpu, ids, T), ig = put_i32(gpu, ids, T);
        tensor oc = put(cpu, DTYPE_F32, T, D, NULL), og = put(gpu, DTYPE_BF16, T, D, NULL);
        poison(&og);
        cpu->ops->embedding(cpu, &tc, &ic, &oc);
        gpu->ops->embedding(gpu, &tg, &ig, &og);
        float *c = get(cpu, &oc), *g = get(gpu, &og);
        for (int i = 0; i < T * D; i++) c[i] = round_to(DTYPE_BF16, c[i]);
        compare("embedding", g, c, (int64_t)T * D, 1e-6, 0);
        free(c);
        free(g);
        if (di == 0) { /* a bad id is reported */
            ids[5] = V + 3;
            tensor bad = put_i32(gpu, ids, T);
            gpu->ops->embedding(gpu, &tg, &bad, &og);
            expect_device_error("embedding");
            drop(gpu, &bad);
        }
        drop(cpu, &ic);
        drop(gpu, &ig);
        drop(cpu, &oc);
        drop(gpu, &og);
        cpu->ops->release_import(cpu, &tc);
        gpu->ops->release_import(gpu, &tg);
        free(wb);
        free(w);
    }
}

/* x (T, W) random bf16 on both backends */
static void rand_pair(int64_t T, int64_t W, float scale, float **h, tensor *c, tensor *g) {
    *h = malloc((size_t)(T * W) * sizeof **h);
    for (int64_t i = 0; i < T * W; i++) (*h)[i] = round_to(DTYPE_BF16, rnd() * scale);
    *c = put(cpu, DTYPE_F32, T, W, *h);
    *g = put(gpu, DTYPE_BF16, T, W, *h);
}

static void test_rms_norm(void) {
    const dtype dts[3] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};
    for (int di = 0; di < 3; di++) {
        /* (a) the hidden state: x a strided view, w (D), a separate output (block kernel) */
        const int T = 9, D = 1536, W = D + 40;
        float *h, wv[1536];
        tensor xc, xg;
        rand_pair(T, W, 2.0f, &h, &xc, &xg);
        for (int i = 0; i < D; i++) wv[i] = round_to(dts[di], 1.0f + 0.5f * rnd());
        void *wb = pack(wv, D, dts[di]);
        tensor wh = tensor_1d(dts[di], wb, D), wc, wg;
        CHECK_OK(cpu->ops->import(cpu, &wh, &wc));
        CHECK_OK(gpu->ops->import(gpu, &wh, &wg));
        tensor xvc = tensor_cols(&xc, 17, D), xvg = tensor_cols(&xg, 17, D);
        tensor oc = put(cpu, DTYPE_F32, T, D, NULL), og = put(gpu, DTYPE_BF16, T, D, NULL);
        poison(&og);
        cpu->ops->rms_norm(cpu, &xvc, &wc, 1e-6f, &oc);
        gpu->ops->rms_norm(gpu, &xvg, &wg, 1e-6f, &og);
        float *c = get(cpu, &oc), *g = get(gpu, &og);
        compare("rms_norm (hidden, strided x)", g, c, (int64_t)T * D, REL, ELEM);
        free(c);
        free(g);
        drop(cpu, &oc);
        drop(gpu, &og);
        cpu->ops->release_import(cpu, &wc);
        gpu->ops->release_import(gpu, &wg);
        free(wb);
        drop(cpu, &xc);
        drop(gpu, &xg);
        free(h);

        /* (b) per-head norm in place on a column slice (groups of 64: warp kernel; 512: block kernel) */
        const int G[2] = {64, 512};
        for (int gi = 0; gi < 2; gi++) {
            const int heads = 4, QD = heads * G[gi], W2 = QD + 2 * G[gi] + 3, T2 = 5;
            rand_pair(T2, W2, 3.0f, &h, &xc, &xg);
            float wq[512];
            for (int i = 0; i < G[gi]; i++) wq[i] = round_to(dts[di], 1.0f + 0.5f * rnd());
            void *wqb = pack(wq, G[gi], dts[di]);
            tensor wqh = tensor_1d(dts[di], wqb, G[gi]), wqc, wqg;
            CHECK_OK(cpu->ops->import(cpu, &wqh, &wqc));
            CHECK_OK(gpu->ops->import(gpu, &wqh, &wqg));
            tensor qc = tensor_cols(&xc, G[gi], QD), qg = tensor_cols(&xg, G[gi], QD);
            cpu->ops->rms_norm(cpu, &qc, &wqc, 1e-5f, &qc);
            gpu->ops->rms_norm(gpu, &qg, &wqg, 1e-5f, &qg);
            c = get(cpu, &xc);
            g = get(gpu, &xg);
            for (int i = 0; i < T2 * W2; i++) c[i] = round_to(DTYPE_BF16, c[i]);
            compare(gi ? "rms_norm (in place, groups of 512)" : "rms_norm (in place, groups of 64)", g, c,
                    (int64_t)T2 * W2, REL, ELEM);
            free(c);
            free(g);
            cpu->ops->release_import(cpu, &wqc);
            gpu->ops->release_import(gpu, &wqg);
            free(wqb);
            drop(cpu, &xc);
            drop(gpu, &xg);
            free(h);
        }
    }
}

static void test_add_silu_gather(void) {
    /* add: x (T, D) += y strided */
    const int T = 13, D = 2700; /* past one batch of CU_ROW_BATCH loads a thread (256 threads) */
    float *hx, *hy;
    tensor xc, xg, yc, yg;
    rand_pair(T, D, 1.0f, &hx, &xc, &xg);
    rand_pair(T, D + 11, 1.0f, &hy, &yc, &yg);
    tensor yvc = tensor_cols(&yc, 5, D), yvg = tensor_cols(&yg, 5, D);
    cpu->ops->add(cpu, &xc, &yvc);
    gpu->ops->add(gpu, &xg, &yvg);
    float *c = get(cpu, &xc), *g = get(gpu, &xg);
    compare("add", g, c, (int64_t)T * D, REL, ELEM);
    free(c);
    free(g);

    /* silu_mul: gate_up (T, 2I) strided -> out (T, I) */
    const int I = 300;
    float *hgu;
    tensor guc, gug;
    rand_pair(T, 2 * I + 7, 4.0f, &hgu, &guc, &gug);
    tensor gvc = tensor_cols(&guc, 3, 2 * I), gvg = tensor_cols(&gug, 3, 2 * I);
    tensor oc = put(cpu, DTYPE_F32, T, I, NULL), og = put(gpu, DTYPE_BF16, T, I, NULL);
    poison(&og);
    cpu->ops->silu_mul(cpu, &gvc, &oc);
    gpu->ops->silu_mul(gpu, &gvg, &og);
    c = get(cpu, &oc);
    g = get(gpu, &og);
    compare("silu_mul", g, c, (int64_t)T * I, REL, ELEM);
    free(c);
    free(g);

    /* gather_rows: same dtype, and widened to F32 */
    int32_t idx[6] = {12, 0, 5, 5, 7, 3};
    tensor ic = put_i32(cpu, idx, 6), ig = put_i32(gpu, idx, 6);
    tensor goc = put(cpu, DTYPE_F32, 6, D, NULL), gog = put(gpu, DTYPE_BF16, 6, D, NULL),
           gof = put(gpu, DTYPE_F32, 6, D, NULL);
    poison(&gog);
    poison(&gof);
    cpu->ops->gather_rows(cpu, &xc, &ic, &goc);
    gpu->ops->gather_rows(gpu, &xg, &ig, &gog);
    gpu->ops->gather_rows(gpu, &xg, &ig, &gof);
    float *gx = get(gpu, &xg), *want = malloc((size_t)6 * D * sizeof *want);
    for (int r = 0; r < 6; r++) memcpy(want + r * D, gx + idx[r] * D, (size_t)D * sizeof *want);
    g = get(gpu, &gog);
    compare("gather_rows (bf16)", g, want, 6 * D, 0, 0);
    free(g);
    g = get(gpu, &gof);
    compare("gather_rows (to f32)", g, want, 6 * D, 0, 0);
    free(g);
    c = get(cpu, &goc);
    compare("gather_rows (vs cpu)", want, c, 6 * D, REL, ELEM);
    free(c);
    free(gx);
    free(want);
    idx[2] = 13;
    tensor bad = put_i32(gpu, idx, 6);
    gpu->ops->gather_rows(gpu, &xg, &bad, &gog);
    expect_device_error("gather_rows");

    /* a host-side argument error: rms_norm's w length does not divide the row */
    float w7[7] = {1, 1, 1, 1, 1, 1, 1}; /* 7 does not divide D (2700) */
    tensor w7g = tensor_1d(DTYPE_F32, NULL, 7);
    CHECK_OK(gpu->ops->alloc(gpu, &w7g));
    CHECK_OK(gpu->ops->upload(gpu, &w7g, w7, sizeof w7));
    gpu->ops->rms_norm(gpu, &xg, &w7g, 1e-5f, &xg);
    expect_device_error("rms_norm");

    tensor *ts_c[] = {&xc, &yc, &guc, &oc, &ic, &goc}, *ts_g[] = {&xg, &yg, &gug, &og, &ig, &gog, &gof, &bad, &w7g};
    for (size_t i = 0; i < sizeof ts_c / sizeof *ts_c; i++) drop(cpu, ts_c[i]);
    for (size_t i = 0; i < sizeof ts_g / sizeof *ts_g; i++) drop(gpu, ts_g[i]);
    free(hx);
    free(hy);
    free(hgu);
}

/* A (max_pos, rot) RoPE table: [cos(p f_i) | sin(p f_i)], base 10000 (malloc'd). */
static float *rope_table(int max_pos, int rot) {
    float *cs = malloc((size_t)max_pos * rot * sizeof *cs);
    for (int p = 0; p < max_pos; p++)
        for (int i = 0; i < rot / 2; i++) {
            double f = pow(10000.0, -2.0 * i / rot);
            cs[p * rot + i] = (float)cos(p * f);
            cs[p * rot + rot / 2 + i] = (float)sin(p * f);
        }
    return cs;
}

static void test_rope(void) {
    const int T = 11, max_pos = 300;
    const int hds[2] = {64, 128};
    for (int hi = 0; hi < 2; hi++) {
        for (int variant = 0; variant < 4; variant++) {
            int hd = hds[hi], nq = 4, nk = 2;
            bool neox = variant % 2 == 0;
            int rot = variant < 2 ? hd : hd / 2; /* partial rotary */
            int W = (nq + 2 * nk) * hd + 5;
            float *h;
            tensor xc, xg;
            rand_pair(T, W, 1.0f, &h, &xc, &xg);
            float *cs = rope_table(max_pos, rot);
            tensor csc = put(cpu, DTYPE_F32, max_pos, rot, cs), csg = put(gpu, DTYPE_F32, max_pos, rot, cs);
            int32_t pos[11];
            for (int t = 0; t < T; t++) pos[t] = rnd_int(max_pos);
            tensor pc = put_i32(cpu, pos, T), pg = put_i32(gpu, pos, T);
            tensor qc = tensor_cols(&xc, 0, nq * hd), kc = tensor_cols(&xc, nq * hd, nk * hd);
            tensor qg = tensor_cols(&xg, 0, nq * hd), kg = tensor_cols(&xg, nq * hd, nk * hd);
            cpu->ops->rope(cpu, &qc, &kc, &pc, &csc, hd, rot, neox);
            gpu->ops->rope(gpu, &qg, &kg, &pg, &csg, hd, rot, neox);
            float *c = get(cpu, &xc), *g = get(gpu, &xg);
            for (int i = 0; i < T * W; i++) c[i] = round_to(DTYPE_BF16, c[i]);
            char what[64];
            snprintf(what, sizeof what, "rope (hd %d, rot %d, %s)", hd, rot, neox ? "neox" : "interleaved");
            compare(what, g, c, (int64_t)T * W, REL, ELEM);
            free(c);
            free(g);
            if (hi == 0 && variant == 0) {
                pos[3] = max_pos;
                tensor bad = put_i32(gpu, pos, T);
                gpu->ops->rope(gpu, &qg, &kg, &bad, &csg, hd, rot, neox);
                expect_device_error("rope");
                drop(gpu, &bad);
            }
            drop(cpu, &csc);
            drop(gpu, &csg);
            drop(cpu, &pc);
            drop(gpu, &pg);
            drop(cpu, &xc);
            drop(gpu, &xg);
            free(cs);
            free(h);
        }
    }
}

/* ---- fused ops (against the CPU backend's composites, src/cpu/ops_fused.c) ---- */

static void test_add_rms_norm(void) {
    const int Ds[2] = {1024, 700}; /* the vector kernel; the two-op fallback (D % 8 != 0) */
    const dtype wdts[2] = {DTYPE_BF16, DTYPE_F32};
    for (int di = 0; di < 2; di++)
        for (int wi = 0; wi < 2; wi++) {
            const int T = 9, D = Ds[di];
            float *hx, *hy;
            tensor xc, xg, yc, yg;
            rand_pair(T, D, 2.0f, &hx, &xc, &xg);
            rand_pair(T, D + 24, 2.0f, &hy, &yc, &yg);
            tensor yvc = tensor_cols(&yc, 8, D), yvg = tensor_cols(&yg, 8, D); /* strided y */
            float *wv = malloc((size_t)D * sizeof *wv);
            for (int i = 0; i < D; i++) wv[i] = round_to(wdts[wi], 1.0f + 0.5f * rnd());
            void *wb = pack(wv, D, wdts[wi]);
            tensor wh = tensor_1d(wdts[wi], wb, D), wc, wg;
            CHECK_OK(cpu->ops->import(cpu, &wh, &wc));
            CHECK_OK(gpu->ops->import(gpu, &wh, &wg));
            tensor oc = put(cpu, DTYPE_F32, T, D, NULL), og = put(gpu, DTYPE_BF16, T, D, NULL);
            poison(&og);
            cpu->ops->add_rms_norm(cpu, &xc, &yvc, &wc, 1e-6f, &oc);
            gpu->ops->add_rms_norm(gpu, &xg, &yvg, &wg, 1e-6f, &og);
            char what[96];
            float *c = get(cpu, &xc), *g = get(gpu, &xg);
            snprintf(what, sizeof what, "add_rms_norm: x += y (D %d, %s weight)", D, dtype_name(wdts[wi]));
            compare(what, g, c, (int64_t)T * D, REL, ELEM);
            free(c);
            free(g);
            c = get(cpu, &oc);
            g = get(gpu, &og);
            snprintf(what, sizeof what, "add_rms_norm: out (D %d, %s weight)", D, dtype_name(wdts[wi]));
            compare(what, g, c, (int64_t)T * D, REL, ELEM);
            free(c);
            free(g);
            cpu->ops->release_import(cpu, &wc);
            gpu->ops->release_import(gpu, &wg);
            tensor *tc[] = {&xc, &yc, &oc}, *tg[] = {&xg, &yg, &og};
            drop_pairs(tc, tg, 3);
            free(wb);
            free(wv);
            free(hx);
            free(hy);
        }
}

/* ---- norm kinds (Gemma's (1 + w) RMSNorm, LayerNorm), activations, softcap ---- */

/* A (n) vector of values v in dtype dt, imported on both backends (*buf: the host bytes, freed by the caller). */
static void import_pair(const float *v, int n, dtype dt, tensor *c, tensor *g, void **buf) {
    *buf = pack(v, n, dt);
    tensor h = tensor_1d(dt, *buf, n);
    CHECK_OK(cpu->ops->import(cpu, &h, c));
    CHECK_OK(gpu->ops->import(gpu, &h, g));
}

/* norm of kind on x (T, D) at column pad of (T, D + pad), groups of G; in place or into out */
static void norm_case(be_norm_kind kind, dtype wdt, int T, int D, int G, int pad, bool in_place, bool with_w,
                      bool with_b, const char *label) {
    const int W = D + pad;
    float *h = malloc((size_t)T * W * sizeof *h);
    for (int i = 0; i < T * W; i++) h[i] = round_to(DTYPE_BF16, 2.0f * rnd() + (kind == BE_NORM_LAYER ? 3.0f : 0.0f));
    tensor xc = put(cpu, DTYPE_F32, T, W, h), xg = put(gpu, DTYPE_BF16, T, W, h);
    float *wv = malloc((size_t)G * sizeof *wv), *bv = malloc((size_t)G * sizeof *bv);
    for (int i = 0; i < G; i++) {
        wv[i] = round_to(wdt, (kind == BE_NORM_RMS_OFFSET ? 0.0f : 1.0f) + 0.5f * rnd());
        bv[i] = round_to(wdt, rnd());
    }
    void *wb, *bb;
    tensor wc, wg, bc, bg;
    import_pair(wv, G, wdt, &wc, &wg, &wb);
    import_pair(bv, G, wdt, &bc, &bg, &bb);
    const be_norm nc = {kind, with_w ? &wc : NULL, with_b ? &bc : NULL, 1e-5f};
    const be_norm ng = {kind, with_w ? &wg : NULL, with_b ? &bg : NULL, 1e-5f};
    tensor xvc = pad ? tensor_cols(&xc, pad, D) : xc, xvg = pad ? tensor_cols(&xg, pad, D) : xg;
    char what[160];
    snprintf(what, sizeof what, "norm %s (%s, %s weight%s%s)", kind == BE_NORM_LAYER ? "LayerNorm" : kind == BE_NORM_RMS_OFFSET ? "(1 + w) RMSNorm" : "RMSNorm",
             label, with_w ? dtype_name(wdt) : "no", with_b ? ", bias" : "", in_place ? ", in place" : "");
    if (in_place) {
        cpu->ops->norm(cpu, &xvc, &nc, &xvc);
        gpu->ops->norm(gpu, &xvg, &ng, &xvg);
        float *c = get(cpu, &xc), *g = get(gpu, &xg);
        for (int i = 0; i < T * W; i++) c[i] = round_to(DTYPE_BF16, c[i]);
        compare(what, g, c, (int64_t)T * W, REL, ELEM);
        free(c);
        free(g);
    } else {
        tensor oc = put(cpu, DTYPE_F32, T, D, NULL), og = put(gpu, DTYPE_BF16, T, D, NULL);
        poison(&og);
        cpu->ops->norm(cpu, &xvc, &nc, &oc);
        gpu->ops->norm(gpu, &xvg, &ng, &og);
        float *c = get(cpu, &oc), *g = get(gpu, &og);
        compare(what, g, c, (int64_t)T * D, REL, ELEM);
        free(c);
        free(g);
        drop(cpu, &oc);
        drop(gpu, &og);
    }
    cpu->ops->release_import(cpu, &wc);
    gpu->ops->release_import(gpu, &wg);
    cpu->ops->release_import(cpu, &bc);
    gpu->ops->release_import(gpu, &bg);
    drop(cpu, &xc);
    drop(gpu, &xg);
    free(wb);
    free(bb);
    free(wv);
    free(bv);
    free(h);
}

static void test_norm_kinds(void) {
    const dtype dts[3] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};
    const be_norm_kind kinds[2] = {BE_NORM_RMS_OFFSET, BE_NORM_LAYER};
    for (int ki = 0; ki < 2; ki++) {
        const be_norm_kind k = kinds[ki];
        for (int di = 0; di < 3; di++) {
            /* whole rows: the vector kernel (F16 weights: the block kernel) */
            norm_case(k, dts[di], 9, 1536, 1536, 40, false, true, k == BE_NORM_LAYER, "hidden, strided x");
            /* per head, in place: the warp kernel (groups of 64) and the block kernel (groups of 512) */
            norm_case(k, dts[di], 5, 4 * 64, 64, 64, true, true, k == BE_NORM_LAYER, "groups of 64");
            norm_case(k, dts[di], 5, 2 * 512, 512, 0, false, true, k == BE_NORM_LAYER, "groups of 512");
        }
        norm_case(k, DTYPE_BF16, 3, 1024, 1024, 0, false, false, false, "D 1024");   /* vector kernel */
        norm_case(k, DTYPE_BF16, 4, 700, 700, 0, false, false, false, "D 700");     /* block kernel */
        norm_case(k, DTYPE_BF16, 6, 100, 100, 0, true, false, false, "D 100");       /* warp kernel */
    }
    norm_case(BE_NORM_RMS, DTYPE_BF16, 4, 1024, 1024, 8, false, false, false, "D 1024"); /* RMSNorm without a weight */
    norm_case(BE_NORM_RMS, DTYPE_BF16, 4, 1024, 1024, 8, false, true, false, "D 1024");

    /* add_norm of each kind: the vector kernel (D 1024) and the two ops (D 700) */
    const int Ds[2] = {1024, 700};
    for (int k = 0; k < BE_NORM_COUNT; k++)
        for (int di = 0; di < 2; di++) {
            const int T = 7, D = Ds[di];
            float *hx, *hy;
            tensor xc, xg, yc, yg;
            rand_pair(T, D, 2.0f, &hx, &xc, &xg);
            rand_pair(T, D, 2.0f, &hy, &yc, &yg);
            float *wv = malloc((size_t)D * sizeof *wv), *bv = malloc((size_t)D * sizeof *bv);
            for (int i = 0; i < D; i++) {
                wv[i] = round_to(DTYPE_BF16, (k == BE_NORM_RMS_OFFSET ? 0.0f : 1.0f) + 0.5f * rnd());
                bv[i] = round_to(DTYPE_BF16, rnd());
            }
            void *wb, *bb;
            tensor wc, wg, bc, bg;
            import_pair(wv, D, DTYPE_BF16, &wc, &wg, &wb);
            import_pair(bv, D, DTYPE_F32, &bc, &bg, &bb);
            const be_norm nc = {(be_norm_kind)k, &wc, k == BE_NORM_LAYER ? &bc : NULL, 1e-6f};
            const be_norm ng = {(be_norm_kind)k, &wg, k == BE_NORM_LAYER ? &bg : NULL, 1e-6f};
            tensor oc = put(cpu, DTYPE_F32, T, D, NULL), og = put(gpu, DTYPE_BF16, T, D, NULL);
            poison(&og);
            cpu->ops->add_norm(cpu, &xc, &yc, &nc, &oc);
            gpu->ops->add_norm(gpu, &xg, &yg, &ng, &og);
            char what[96];
            float *c = get(cpu, &xc), *g = get(gpu, &xg);
            snprintf(what, sizeof what, "add_norm kind %d: x += y (D %d)", k, D);
            compare(what, g, c, (int64_t)T * D, REL, ELEM);
            free(c);
            free(g);
            c = get(cpu, &oc);
            g = get(gpu, &og);
            snprintf(what, sizeof what, "add_norm kind %d: out (D %d)", k, D);
            compare(what, g, c, (int64_t)T * D, REL, ELEM);
            free(c);
            free(g);
            cpu->ops->release_import(cpu, &wc);
            gpu->ops->release_import(gpu, &wg);
            cpu->ops->release_import(cpu, &bc);
            gpu->ops->release_import(gpu, &bg);
            tensor *tc[] = {&xc, &yc, &oc}, *tg[] = {&xg, &yg, &og};
            drop_pairs(tc, tg, 3);
            free(wb);
            free(bb);
            free(wv);
            free(bv);
            free(hx);
            free(hy);
        }

    /* norm_add_norm (the sandwich residual): the one-kernel path (RMS kinds, D 1024) and the composite
     * (LayerNorm, D 700), with and without the norm of x; weights BF16 / F32 / absent; the two eps far apart
     * (0.5 for y, whose mean square is about 3); the GPU's op bit-equal to its own composite (norm, add_norm) */
    for (int k = 0; k < BE_NORM_COUNT; k++)
        for (int di = 0; di < 2; di++)
            for (int with_nx = 0; with_nx < 2; with_nx++)
                for (int wmode = 0; wmode < 3; wmode++) { /* 0: BF16 nx, F32 / BF16 ny; 1: none; 2: F32 nx, BF16 ny */
                    const int T = 5, D = Ds[di];
                    float *hx, *hy;
                    tensor xc, xg, yc, yg;
                    rand_pair(T, D, 2.0f, &hx, &xc, &xg);
                    rand_pair(T, D, 3.0f, &hy, &yc, &yg);
                    tensor x2 = put(gpu, DTYPE_BF16, T, D, hx), y2 = put(gpu, DTYPE_BF16, T, D, hy);
                    float *wv = malloc((size_t)D * 2 * sizeof *wv);
                    for (int i = 0; i < 2 * D; i++)
                        wv[i] = round_to(DTYPE_BF16, (k == BE_NORM_RMS_OFFSET ? 0.0f : 1.0f) + 0.5f * rnd());
                    void *wb, *wyb, *bb;
                    tensor wc, wg, wyc, wyg, bc, bg;
                    import_pair(wv, D, wmode == 2 ? DTYPE_F32 : DTYPE_BF16, &wc, &wg, &wb);
                    import_pair(wv + D, D, wmode == 0 && k == BE_NORM_RMS ? DTYPE_F32 : DTYPE_BF16, &wyc, &wyg, &wyb);
                    import_pair(wv, D, DTYPE_F32, &bc, &bg, &bb);
                    const bool lb = k == BE_NORM_LAYER, nw = wmode == 1;
                    const be_norm nxc = {(be_norm_kind)k, nw ? NULL : &wc, lb ? &bc : NULL, 1e-6f},
                                  nxg = {(be_norm_kind)k, nw ? NULL : &wg, lb ? &bg : NULL, 1e-6f};
                    const be_norm nyc = {(be_norm_kind)k, nw ? NULL : &wyc, lb ? &bc : NULL, 0.5f},
                                  nyg = {(be_norm_kind)k, nw ? NULL : &wyg, lb ? &bg : NULL, 0.5f};
                    tensor oc = put(cpu, DTYPE_F32, T, D, NULL), og = put(gpu, DTYPE_BF16, T, D, NULL),
                           o2 = put(gpu, DTYPE_BF16, T, D, NULL);
                    poison(&og);
                    poison(&o2);
                    cpu->ops->norm_add_norm(cpu, &xc, &yc, &nyc, with_nx ? &nxc : NULL, &oc);
                    gpu->ops->norm_add_norm(gpu, &xg, &yg, &nyg, with_nx ? &nxg : NULL, &og);
                    gpu->ops->norm(gpu, &y2, &nyg, &y2); /* the composite on the GPU */
                    if (with_nx) gpu->ops->add_norm(gpu, &x2, &y2, &nxg, &o2);
                    else gpu->ops->add(gpu, &x2, &y2);
                    const tensor *outs_c[3] = {&yc, &xc, &oc}, *outs_g[3] = {&yg, &xg, &og}, *outs_2[3] = {&y2, &x2, &o2};
                    const char *names[3] = {"y = ny(y)", "x += y", "out = nx(x)"};
                    for (int q = 0; q < 2 + with_nx; q++) {
                        char what[128];
                        float *c = get(cpu, outs_c[q]), *g = get(gpu, outs_g[q]), *g2 = get(gpu, outs_2[q]);
                        snprintf(what, sizeof what, "norm_add_norm kind %d, weights %d: %s (D %d)", k, wmode, names[q], D);
                        compare(what, g, c, (int64_t)T * D, REL, ELEM);
                        CHECK_MSG(!memcmp(g, g2, (size_t)T * D * sizeof *g), "%s: the GPU composite differs", what);
                        free(c);
                        free(g);
                        free(g2);
                    }
                    cpu->ops->release_import(cpu, &wc);
                    gpu->ops->release_import(gpu, &wg);
                    cpu->ops->release_import(cpu, &wyc);
                    gpu->ops->release_import(gpu, &wyg);
                    cpu->ops->release_import(cpu, &bc);
                    gpu->ops->release_import(gpu, &bg);
                    tensor *tc[] = {&xc, &yc, &oc}, *tg[] = {&xg, &yg, &og};
                    drop_pairs(tc, tg, 3);
                    drop(gpu, &x2);
                    drop(gpu, &y2);
                    drop(gpu, &o2);
                    free(wb);
                    free(wyb);
                    free(bb);
                    free(wv);
                    free(hx);
                    free(hy);
                }

    /* refused: a bias on an RMSNorm */
    float one[128];
    for (int i = 0; i < 128; i++) one[i] = 1.0f;
    tensor x = put(gpu, DTYPE_BF16, 2, 64, one), b = put(gpu, DTYPE_F32, 1, 64, one);
    tensor bv = tensor_1d(DTYPE_F32, b.data, 64);
    const be_norm bad = {BE_NORM_RMS, NULL, &bv, 1e-6f};
    gpu->ops->norm(gpu, &x, &bad, &x);
    expect_device_error("norm");
    drop(gpu, &x);
    drop(gpu, &b);
}

static void test_activations(void) {
    const int T = 11;
    const int Is[2] = {256, 300}; /* the 16-byte vector kernel; the generic one (I % 8 != 0) */
    for (int a = 0; a < BE_ACT_COUNT; a++)
        for (int ii = 0; ii < 2; ii++) {
            const int I = Is[ii];
            const bool oai = a == BE_ACT_SWIGLU_OAI; /* gated only: act_mul, not activation */
            float *h;
            tensor guc, gug;
            /* the clamped SwiGLU: gates and ups to +-10, past its limit 7 on both sides */
            rand_pair(T, 2 * I + 8, oai ? 10.0f : 4.0f, &h, &guc, &gug);
            tensor gvc = tensor_cols(&guc, 8, 2 * I), gvg = tensor_cols(&gug, 8, 2 * I);
            tensor oc = put(cpu, DTYPE_F32, T, I, NULL), og = put(gpu, DTYPE_BF16, T, I, NULL);
            poison(&og);
            cpu->ops->act_mul(cpu, (be_act)a, &gvc, &oc);
            gpu->ops->act_mul(gpu, (be_act)a, &gvg, &og);
            float *c = get(cpu, &oc), *g = get(gpu, &og);
            char what[96];
            snprintf(what, sizeof what, "act_mul %s (I %d)", be_act_name((be_act)a), I);
            compare(what, g, c, (int64_t)T * I, REL, ELEM);
            if (oai) { /* the limit matters: some gates and ups are past it, on both sides */
                int over = 0, under = 0;
                for (int t = 0; t < T; t++)
                    for (int i = 0; i < 2 * I; i++) {
                        const float v = h[(int64_t)t * (2 * I + 8) + 8 + i];
                        over += v > BE_SWIGLU_OAI_LIMIT;
                        under += v < -BE_SWIGLU_OAI_LIMIT;
                    }
                CHECK_MSG(over > 0 && under > 0, "act_mul swigluoai: %d values above the limit, %d below", over, under);
            }
            free(c);
            free(g);
            if (oai) {
                tensor *tc[] = {&guc, &oc}, *tg[] = {&gug, &og};
                drop_pairs(tc, tg, 2);
                free(h);
                continue;
            }
            /* in place on columns [3, 3 + I) */
            tensor xvc = tensor_cols(&guc, 3, I), xvg = tensor_cols(&gug, 3, I);
            cpu->ops->activation(cpu, (be_act)a, &xvc);
            gpu->ops->activation(gpu, (be_act)a, &xvg);
            c = get(cpu, &guc);
            g = get(gpu, &gug);
            for (int i = 0; i < T * (2 * I + 8); i++) c[i] = round_to(DTYPE_BF16, c[i]);
            snprintf(what, sizeof what, "activation %s in place (I %d)", be_act_name((be_act)a), I);
            compare(what, g, c, (int64_t)T * (2 * I + 8), REL, ELEM);
            free(c);
            free(g);
            tensor *tc[] = {&guc, &oc}, *tg[] = {&gug, &og};
            drop_pairs(tc, tg, 2);
            free(h);
        }
    /* softcap on F32 logits and on a BF16 view; values well past the cap */
    const int V = 1000;
    float *l = malloc((size_t)T * (V + 2) * sizeof *l);
    for (int i = 0; i < T * (V + 2); i++) l[i] = round_to(DTYPE_BF16, 80.0f * rnd());
    for (int bf = 0; bf < 2; bf++) {
        tensor lc = put(cpu, DTYPE_F32, T, V + 2, l), lg = put(gpu, bf ? DTYPE_BF16 : DTYPE_F32, T, V + 2, l);
        tensor vc = tensor_cols(&lc, 1, V), vg = tensor_cols(&lg, 1, V);
        cpu->ops->softcap(cpu, &vc, 30.0f);
        gpu->ops->softcap(gpu, &vg, 30.0f);
        float *c = get(cpu, &lc), *g = get(gpu, &lg);
        if (bf)
            for (int i = 0; i < T * (V + 2); i++) c[i] = round_to(DTYPE_BF16, c[i]);
        compare(bf ? "softcap 30 (BF16 logits)" : "softcap 30 (F32 logits)", g, c, (int64_t)T * (V + 2),
                bf ? REL : 1e-5, bf ? ELEM : 1e-6);
        free(c);
        free(g);
        drop(cpu, &lc);
        drop(gpu, &lg);
    }
    /* scale (the embedding normaliser) on a BF16 view, as the activations are */
    {
        tensor lc = put(cpu, DTYPE_F32, T, V + 2, l), lg = put(gpu, DTYPE_BF16, T, V + 2, l);
        tensor vc = tensor_cols(&lc, 1, V), vg = tensor_cols(&lg, 1, V);
        cpu->ops->scale(cpu, &vc, 61.75f);
        gpu->ops->scale(gpu, &vg, 61.75f);
        float *c = get(cpu, &lc), *g = get(gpu, &lg);
        for (int i = 0; i < T * (V + 2); i++) c[i] = round_to(DTYPE_BF16, c[i]);
        compare("scale 61.75 (BF16)", g, c, (int64_t)T * (V + 2), 0.0, 0.0);
        free(c);
        free(g);
        drop(cpu, &lc);
        drop(gpu, &lg);
    }
    free(l);
    /* refusals */
    tensor x = put(gpu, DTYPE_BF16, 2, 64, NULL), y = put(gpu, DTYPE_BF16, 2, 32, NULL);
    gpu->ops->act_mul(gpu, BE_ACT_COUNT, &x, &y);
    expect_device_error("act_mul");
    gpu->ops->activation(gpu, BE_ACT_SWIGLU_OAI, &x); /* gated only */
    expect_device_error("activation");
    gpu->ops->softcap(gpu, &x, -1.0f);
    expect_device_error("softcap");
    drop(gpu, &x);
    drop(gpu, &y);
}

/* q/k norm + rope + kv write, with a padding token (slot -1) that must leave the caches alone */
static void test_qk_norm_rope_kv(void) {
    const int T = 7, nq = 4, nk = 2, max_pos = 200, nb = 5, bs = 16;
    /* 0-5: qk_norm_rope_kv; 6-8: qk_norm_rope_kv_ex with Gemma's (1 + w) norm (fused, head_dim 128 and 256)
     * and a per-head LayerNorm (the composite); 9-11: variants 0, 8 and 7 into FP8 caches (E4M3 of x / scale: the
     * fused kernel's stores and the composite's kv_write); each with rows of odd length (the 32-lane form) and
     * with 16-byte rows (the 8-elements-a-lane BF16 form, head_dim up to 256) */
    for (int v24 = 0; v24 < 24; v24++) {
        const int v9 = v24 % 12;
        const bool rows16 = v24 >= 12;
        const bool f8 = v9 >= 9;
        const int variant = v9 == 9 ? 0 : v9 == 10 ? 8 : v9 == 11 ? 7 : v9;
        const float ks = f8 ? 1.0f / 64 : 0.0f, vs = f8 ? 1.0f / 50 : 0.0f;
        const int hd = variant < 4 ? 128 : variant < 6 ? 64 : variant == 8 ? 256 : 128;
        const bool norm = variant != 1 && variant != 5, neox = variant != 2;
        const be_norm_kind kind = variant == 7 ? BE_NORM_LAYER : variant >= 6 ? BE_NORM_RMS_OFFSET : BE_NORM_RMS;
        const int rot = variant == 3 ? hd / 2 : hd;
        const int64_t qd = (int64_t)nq * hd, kvd = (int64_t)nk * hd, W = qd + 2 * kvd + (rows16 ? 8 : 3);
        float *h;
        tensor xc, xg;
        rand_pair(T, W, 1.0f, &h, &xc, &xg);
        tensor qc = tensor_cols(&xc, 0, qd), kc = tensor_cols(&xc, qd, kvd), vc = tensor_cols(&xc, qd + kvd, kvd);
        tensor qg = tensor_cols(&xg, 0, qd), kg = tensor_cols(&xg, qd, kvd), vg = tensor_cols(&xg, qd + kvd, kvd);
        float *cs = rope_table(max_pos, rot);
        tensor csc = put(cpu, DTYPE_F32, max_pos, rot, cs), csg = put(gpu, DTYPE_F32, max_pos, rot, cs);
        int32_t pos[7];
        int64_t slots[7];
        for (int t = 0; t < T; t++) {
            pos[t] = rnd_int(max_pos);
            slots[t] = (int64_t)t * 11 + variant; /* distinct, spread over the blocks */
        }
        slots[2] = -1; /* padding */
        tensor pc = put_i32(cpu, pos, T), pg = put_i32(gpu, pos, T);
        float wq[256], wk[256];
        const float wbase = kind == BE_NORM_RMS_OFFSET ? 0.0f : 1.0f;
        for (int i = 0; i < hd; i++) {
            wq[i] = round_to(DTYPE_BF16, wbase + 0.5f * rnd());
            wk[i] = round_to(DTYPE_BF16, wbase + 0.5f * rnd());
        }
        void *wqb = pack(wq, hd, DTYPE_BF16), *wkb = pack(wk, hd, DTYPE_BF16);
        tensor wqh = tensor_1d(DTYPE_BF16, wqb, hd), wkh = tensor_1d(DTYPE_BF16, wkb, hd), wqc, wkc, wqg, wkg;
        CHECK_OK(cpu->ops->import(cpu, &wqh, &wqc));
        CHECK_OK(cpu->ops->import(cpu, &wkh, &wkc));
        CHECK_OK(gpu->ops->import(gpu, &wqh, &wqg));
        CHECK_OK(gpu->ops->import(gpu, &wkh, &wkg));
        /* caches start with the same random values on both sides */
        const int64_t cn = (int64_t)nb * bs * kvd;
        float *init = malloc((size_t)cn * sizeof *init);
        for (int64_t i = 0; i < cn; i++) init[i] = f8 ? fp8_e4m3_to_f32(fp8_e4m3_from_f32(40 * rnd())) : round_to(DTYPE_BF16, rnd());
        int64_t shape[4] = {nb, bs, nk, hd};
        const dtype cdt = f8 ? DTYPE_F8_E4M3 : DTYPE_F32, gdt = f8 ? DTYPE_F8_E4M3 : DTYPE_BF16;
        tensor kcc = tensor_make(cdt, NULL, 4, shape), vcc = kcc, kcg = tensor_make(gdt, NULL, 4, shape), vcg = kcg;
        kcc.qscale = kcg.qscale = ks;
        vcc.qscale = vcg.qscale = vs;
        CHECK_OK(cpu->ops->alloc(cpu, &kcc));
        CHECK_OK(cpu->ops->alloc(cpu, &vcc));
        CHECK_OK(gpu->ops->alloc(gpu, &kcg));
        CHECK_OK(gpu->ops->alloc(gpu, &vcg));
        void *ib = pack(init, cn, gdt), *ic = pack(init, cn, cdt);
        CHECK_OK(cpu->ops->upload(cpu, &kcc, ic, (size_t)cn * dtype_size(cdt)));
        CHECK_OK(cpu->ops->upload(cpu, &vcc, ic, (size_t)cn * dtype_size(cdt)));
        CHECK_OK(gpu->ops->upload(gpu, &kcg, ib, (size_t)cn * dtype_size(gdt)));
        CHECK_OK(gpu->ops->upload(gpu, &vcg, ib, (size_t)cn * dtype_size(gdt)));
        free(ic);
        attn_meta mc = {.num_seqs = 1, .num_tokens = T, .max_query_len = T, .max_seq_len = T, .block_size = bs,
                        .max_blocks_per_seq = nb};
        attn_meta mg = mc;
        mc.slot_mapping = put_i64(cpu, slots, T);
        mg.slot_mapping = put_i64(gpu, slots, T);
        if (variant < 6) {
            cpu->ops->qk_norm_rope_kv(cpu, &qc, &kc, &vc, norm ? &wqc : NULL, norm ? &wkc : NULL, 1e-6f, &pc, &csc, hd,
                                      rot, neox, &kcc, &vcc, &mc);
            gpu->ops->qk_norm_rope_kv(gpu, &qg, &kg, &vg, norm ? &wqg : NULL, norm ? &wkg : NULL, 1e-6f, &pg, &csg, hd,
                                      rot, neox, &kcg, &vcg, &mg);
        } else {
            const be_norm nqc = {kind, &wqc, NULL, 1e-6f}, nkc = {kind, &wkc, NULL, 1e-6f};
            const be_norm nqg = {kind, &wqg, NULL, 1e-6f}, nkg = {kind, &wkg, NULL, 1e-6f};
            cpu->ops->qk_norm_rope_kv_ex(cpu, &qc, &kc, &vc, &nqc, &nkc, &pc, &csc, hd, rot, neox, &kcc, &vcc, &mc);
            gpu->ops->qk_norm_rope_kv_ex(gpu, &qg, &kg, &vg, &nqg, &nkg, &pg, &csg, hd, rot, neox, &kcg, &vcg, &mg);
        }
        char what[128];
        snprintf(what, sizeof what, "qk_norm_rope_kv%s: q, k (hd %d, rot %d, %s, %s%s)", variant < 6 ? "" : "_ex", hd,
                 rot, neox ? "neox" : "interleaved",
                 !norm ? "no norm" : kind == BE_NORM_RMS ? "q/k norm" : kind == BE_NORM_LAYER ? "LayerNorm" : "(1 + w) norm",
                 rows16 ? ", 16-byte rows" : "");
        float *c = get(cpu, &xc), *g = get(gpu, &xg);
        /* q and k columns only (v is an input) */
        float *cq = malloc((size_t)T * (qd + kvd) * sizeof *cq), *gq = malloc((size_t)T * (qd + kvd) * sizeof *gq);
        for (int t = 0; t < T; t++)
            for (int64_t i = 0; i < qd + kvd; i++) {
                cq[t * (qd + kvd) + i] = c[t * W + i];
                gq[t * (qd + kvd) + i] = g[t * W + i];
            }
        compare(what, gq, cq, (int64_t)T * (qd + kvd), REL, ELEM);
        free(cq);
        free(gq);
        free(c);
        free(g);
        snprintf(what, sizeof what, "qk_norm_rope_kv: k cache (hd %d, rot %d, padding slot)%s%s", hd, rot,
                 f8 ? " (FP8)" : "", rows16 ? " (16-byte rows)" : "");
        c = get(cpu, &kcc);
        g = get(gpu, &kcg);
        /* FP8: E4M3 of the same k up to the GPU's f32 rounding (RoPE's cancellations included): equal, or a step
         * apart where x / s sat near a rounding midpoint (one step is at most 1 / 8 of the value) */
        compare(what, g, c, cn, f8 ? 0.13 : REL, ELEM);
        free(c);
        free(g);
        snprintf(what, sizeof what, "qk_norm_rope_kv: v cache (hd %d)%s", hd, f8 ? " (FP8: the same bytes)" : "");
        c = get(cpu, &vcc);
        g = get(gpu, &vcg);
        compare(what, g, c, cn, 1e-6, 0);
        free(c);
        free(g);
        if (v9 == 0) { /* a slot past the cache is reported (by both forms) */
            slots[4] = (int64_t)nb * bs;
            tensor bad = put_i64(gpu, slots, T);
            attn_meta mb = mg;
            mb.slot_mapping = bad;
            gpu->ops->qk_norm_rope_kv(gpu, &qg, &kg, &vg, &wqg, &wkg, 1e-6f, &pg, &csg, hd, rot, neox, &kcg, &vcg, &mb);
            expect_device_error("kv_write");
            drop(gpu, &bad);
        }
        cpu->ops->release_import(cpu, &wqc);
        cpu->ops->release_import(cpu, &wkc);
        gpu->ops->release_import(gpu, &wqg);
        gpu->ops->release_import(gpu, &wkg);
        tensor *tc[] = {&xc, &csc, &pc, &kcc, &vcc, &mc.slot_mapping}, *tg[] = {&xg, &csg, &pg, &kcg, &vcg, &mg.slot_mapping};
        drop_pairs(tc, tg, 6);
        free(ib);
        free(init);
        free(wqb);
        free(wkb);
        free(cs);
        free(h);
    }
}

/* ---- attention ---- */

typedef struct attn_layout {
    const char *name;
    int nh, nkv, hd, bs, window, S;
    int q_len[4], ctx[4];
    float softcap;          /* attn_params.softcap (0 = off) */
    float scale;            /* the softmax scale; 0 = 1 / sqrt(head_dim) */
    int sinks;              /* attn_params.sinks (gpt-oss): 0 none, else SINKS_F32 / _BF16 / _F16 */
    int gen_S, gen_ctx;     /* gen_S more decode sequences after the listed ones, contexts 1 .. gen_ctx (a large
                               decode batch: T * kv heads >= 2 x SMs takes the tensor-core decode kernel) */
} attn_layout;

enum { SINKS_NONE, SINKS_F32, SINKS_BF16, SINKS_F16 };

static const attn_layout LAYOUTS[] = {
    /* name, heads, kv heads, head_dim, block size, window, sequences, q_len, ctx, softcap, scale (0: 1 / sqrt(hd)),
     * sinks */
    {"mixed prefill/decode, GQA, block 16", 8, 2, 64, 16, 0, 4, {1, 7, 5, 1}, {50, 7, 40, 1}, 0, 0, SINKS_NONE, 0, 0},
    {"MHA, head_dim 128, block 7", 4, 4, 128, 7, 0, 3, {3, 1, 12}, {30, 17, 12}, 0, 0, SINKS_NONE, 0, 0},
    {"MQA, sliding window 16", 8, 1, 32, 16, 16, 2, {1, 20}, {100, 60}, 0, 0, SINKS_NONE, 0, 0},
    {"long decode (split-KV)", 32, 8, 128, 16, 0, 2, {1, 1}, {3000, 1500}, 0, 0, SINKS_NONE, 0, 0},
    {"head_dim 256, group 8, block 7", 16, 2, 256, 7, 0, 2, {2, 1}, {300, 33}, 0, 0, SINKS_NONE, 0, 0},
    {"group 16 (two head passes)", 16, 1, 64, 16, 0, 2, {4, 1}, {20, 700}, 0, 0, SINKS_NONE, 0, 0},
    {"head_dim 6 (no 16-byte loads)", 2, 1, 6, 7, 0, 2, {3, 1}, {10, 4}, 0, 0, SINKS_NONE, 0, 0},
    {"sliding window 64 over a long decode (split-KV)", 8, 2, 64, 16, 64, 2, {1, 9}, {2000, 80}, 0, 0, SINKS_NONE, 0, 0},
    /* decodes whose 5 and 8 splits merge inside a thread-block cluster of 8 (sm_90), the first with 3 idle CTAs */
    {"decodes, splits merged in a cluster", 16, 8, 128, 16, 0, 2, {1, 1}, {150, 250}, 0, 0, SINKS_NONE, 0, 0},
    {"sinks (F32), head_dim 64, splits merged in a cluster", 16, 4, 64, 16, 0, 2, {1, 1}, {200, 90}, 0, 0, SINKS_F32,
     0, 0},
    /* 13 and 16 splits of head_dim 256 (16 keys each): a cluster of 16 where the GPU schedules one (H100 / H200),
     * the first with 3 idle CTAs; and 32 splits, more than a cluster holds: the merge through the workspace */
    {"decodes, head_dim 256, 13 and 16 splits (a cluster of 16)", 16, 8, 256, 16, 0, 2, {1, 1}, {200, 250}, 0, 0,
     SINKS_NONE, 0, 0},
    {"decodes, 32 splits (merged through the workspace)", 8, 2, 128, 16, 0, 2, {1, 1}, {3000, 2500}, 0, 0, SINKS_NONE,
     0, 0},
    /* prefill chunks of >= 16 tokens take the tensor-core kernel (head_dim 64, 128, 256), the rest the decode kernel */
    {"prefill chunk after 200 cached, head_dim 128, GQA 4 (tensor cores)", 32, 8, 128, 16, 0, 2, {100, 1}, {300, 40},
     0, 0, SINKS_NONE, 0, 0},
    {"prefills, head_dim 64, sliding window 40, block 7 (tensor cores)", 8, 2, 64, 7, 40, 3, {70, 33, 2}, {70, 90, 50},
     0, 0, SINKS_NONE, 0, 0},
    {"prefill of 130, head_dim 128, group 16 (tensor cores)", 16, 1, 128, 16, 0, 1, {130}, {130}, 0, 0, SINKS_NONE, 0, 0},
    /* head_dim 256 prefills on the tensor cores (Gemma), with a sliding window and block size 7 */
    {"prefill chunk after 20 cached, head_dim 256, GQA 2 (tensor cores)", 8, 4, 256, 16, 0, 2, {90, 1}, {110, 70}, 0, 0,
     SINKS_NONE, 0, 0},
    {"prefills, head_dim 256, sliding window 48, block 7 (tensor cores)", 4, 1, 256, 7, 48, 3, {70, 16, 3},
     {70, 100, 40}, 0, 0, SINKS_NONE, 0, 0},
    /* Gemma 2's score softcap on each kernel; scale 1 and small caps so the cap bends the scores */
    {"softcap 2, head_dim 128 prefill (tensor cores) + decode", 8, 2, 128, 16, 0, 2, {64, 1}, {80, 300}, 2.0f, 1.0f,
     SINKS_NONE, 0, 0},
    {"softcap 3, head_dim 256, window 40 (tensor cores) + decode", 8, 2, 256, 16, 40, 2, {33, 2}, {33, 90}, 3.0f,
     0.5f, SINKS_NONE, 0, 0},
    {"softcap 2, long decode (split-KV)", 16, 8, 128, 16, 0, 2, {1, 1}, {2500, 900}, 2.0f, 1.0f, SINKS_NONE, 0, 0},
    {"softcap 1.5, head_dim 32, MQA (generic kernel)", 8, 1, 32, 16, 0, 2, {1, 20}, {400, 60}, 1.5f, 1.0f, SINKS_NONE, 0, 0},
    {"softcap 50 (Gemma 2's), head_dim 256, query_pre_attn_scalar scale", 8, 4, 256, 16, 0, 2, {40, 1}, {40, 200},
     50.0f, 0.0625f, SINKS_NONE, 0, 0},
    /* gpt-oss's attention sinks on every kernel (F32 / BF16 / F16 sinks; heads with a sink far above the
     * scores, far below and near them): decode, split-KV decode, the tensor cores, the generic kernel and its
     * split-KV combine, with sliding windows (gpt-oss: 128 on every other layer, head_dim 64, GQA 8) */
    {"sinks, mixed prefill/decode, GQA, block 16", 8, 2, 64, 16, 0, 4, {1, 7, 5, 1}, {50, 7, 40, 1}, 0, 0, SINKS_F32, 0, 0},
    {"sinks (BF16), long decode (split-KV)", 32, 8, 128, 16, 0, 2, {1, 1}, {3000, 1500}, 0, 0, SINKS_BF16, 0, 0},
    {"sinks, gpt-oss window 128 over a long decode (split-KV)", 64, 8, 64, 16, 128, 2, {1, 1}, {2000, 100}, 0, 0,
     SINKS_F32, 0, 0},
    {"sinks, gpt-oss full layer, long decode (split-KV)", 64, 8, 64, 16, 0, 2, {1, 1}, {2000, 700}, 0, 0, SINKS_BF16, 0, 0},
    {"sinks (BF16), gpt-oss window 128, prefill chunk (tensor cores) + decodes", 64, 8, 64, 16, 128, 3, {200, 1, 17},
     {300, 500, 17}, 0, 0, SINKS_BF16, 0, 0},
    {"sinks, gpt-oss full layer, prefills (tensor cores), block 7", 64, 8, 64, 7, 0, 2, {150, 40}, {150, 90}, 0, 0,
     SINKS_F32, 0, 0},
    {"sinks (F16), head_dim 128, window 40, prefill (tensor cores) + decode", 8, 2, 128, 16, 40, 2, {70, 1},
     {100, 60}, 0, 0, SINKS_F16, 0, 0},
    {"sinks, head_dim 256, window 48, block 7 (tensor cores)", 8, 4, 256, 7, 48, 2, {40, 1}, {60, 200}, 0, 0,
     SINKS_F32, 0, 0},
    {"sinks (F16), MQA, head_dim 32, sliding window 16 (generic kernel)", 8, 1, 32, 16, 16, 2, {1, 20}, {100, 60}, 0,
     0, SINKS_F16, 0, 0},
    {"sinks, head_dim 48, long decode (generic kernel, split-KV combine)", 8, 2, 48, 16, 0, 2, {1, 1}, {1200, 700}, 0,
     0, SINKS_F32, 0, 0},
    {"sinks + softcap 2, head_dim 128 prefill (tensor cores) + decode", 8, 2, 128, 16, 0, 2, {64, 1}, {80, 300}, 2.0f,
     1.0f, SINKS_BF16, 0, 0},
    /* large decode batches (ops_attention_dtc.cu, on GPUs of up to 160 SMs), with a prefill chunk (the tensor cores'
     * prefill kernel), a short chunk and a long context among them */
    {"large decode batch, head_dim 128, GQA 4 (tensor-core decode)", 32, 8, 128, 16, 0, 2, {1, 1}, {1, 1300}, 0, 0,
     SINKS_NONE, 60, 700},
    {"large decode batch, head_dim 64, GQA 8, window 100, block 7 (tensor-core decode)", 64, 8, 64, 7, 100, 1, {1},
     {500}, 0, 0, SINKS_NONE, 45, 400},
    {"large batch, MHA, head_dim 128, prefill chunk + short chunk (tensor-core decode)", 16, 16, 128, 16, 0, 2,
     {100, 3}, {150, 50}, 0, 0, SINKS_NONE, 30, 200},
    {"large decode batch, group 32 (two passes of 16), head_dim 64, block 32", 32, 1, 64, 32, 0, 1, {1}, {64}, 0, 0,
     SINKS_NONE, 330, 130},
    /* head_dim 256 (Gemma 3; VLLM_CUDA_DTC_HD256=1, set in main) */
    {"large decode batch, head_dim 256, GQA 2, window 64 (tensor-core decode)", 16, 8, 256, 16, 64, 1, {1}, {400}, 0,
     0, SINKS_NONE, 40, 300},
    {"large batch, head_dim 256, GQA 4, block 7, prefill chunk + decodes (tensor-core decode)", 16, 4, 256, 7, 0, 2,
     {40, 1}, {60, 1}, 0, 0, SINKS_NONE, 80, 250},
};

/* kv_fp8 > 0: the FP8 KV cache on both backends (F8_E4M3 caches, k scaled by kv_fp8, v by 1.3 times it): the
 * same E4M3 bytes at the cached positions, kv_write's bytes equal, attention within the BF16 bounds */
static void test_attention_layout(const attn_layout *L, float kv_fp8) {
    const bool f8 = kv_fp8 > 0;
    const float ks = f8 ? kv_fp8 : 0.0f, vs = 1.3f * ks;
    const int nh = L->nh, nkv = L->nkv, hd = L->hd, bs = L->bs, S = L->S + L->gen_S;
    const int64_t kvd = (int64_t)nkv * hd, qd = (int64_t)nh * hd, W = qd + 2 * kvd + 3;
    int32_t *qsl = calloc((size_t)S + 1, sizeof *qsl), *ctx = calloc((size_t)S, sizeof *ctx); /* ctx: seq_lens */
    int *q_len = calloc((size_t)S, sizeof *q_len);
    for (int s = 0; s < S; s++) {
        q_len[s] = s < L->S ? L->q_len[s] : 1;
        ctx[s] = s < L->S ? L->ctx[s] : 1 + rnd_int(L->gen_ctx);
    }
    int max_q = 0, max_ctx = 0, max_blocks = 0, total_blocks = 0;
    for (int s = 0; s < S; s++) {
        qsl[s + 1] = qsl[s] + q_len[s];
        max_q = q_len[s] > max_q ? q_len[s] : max_q;
        max_ctx = ctx[s] > max_ctx ? ctx[s] : max_ctx;
        int nb = (ctx[s] + bs - 1) / bs;
        max_blocks = nb > max_blocks ? nb : max_blocks;
        total_blocks += nb;
    }
    const int T = qsl[S], num_blocks = total_blocks + 3;
    /* random block tables over a shuffled pool (spare blocks stay NaN) */
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
        for (int b = 0; b < (ctx[s] + bs - 1) / bs; b++) bt[s * max_blocks + b] = perm[next++];
    /* caches: NaN everywhere, random bf16 K/V at the cached (not new) positions that some query may read */
    const int64_t cache_n = (int64_t)num_blocks * bs * kvd;
    float *kh = malloc((size_t)cache_n * sizeof *kh), *vh = malloc((size_t)cache_n * sizeof *vh);
    for (int64_t i = 0; i < cache_n; i++) kh[i] = vh[i] = NAN;
    int64_t *slots = malloc((size_t)T * sizeof *slots);
    for (int s = 0; s < S; s++) {
        int first_new = ctx[s] - q_len[s];
        int lo = 0;
        if (L->window > 0 && first_new - L->window + 1 > 0) lo = first_new - L->window + 1;
        for (int p = 0; p < ctx[s]; p++) {
            int64_t slot = (int64_t)bt[s * max_blocks + p / bs] * bs + p % bs;
            if (p >= first_new) {
                slots[qsl[s] + p - first_new] = slot;
            } else if (p >= lo) {
                for (int64_t i = 0; i < kvd; i++) {
                    if (f8) { /* raw E4M3 values (the caches' bytes) of x / scale */
                        kh[slot * kvd + i] = fp8_e4m3_to_f32(fp8_e4m3_from_f32(rnd() / ks));
                        vh[slot * kvd + i] = fp8_e4m3_to_f32(fp8_e4m3_from_f32(rnd() / vs));
                        continue;
                    }
                    kh[slot * kvd + i] = round_to(DTYPE_BF16, rnd());
                    vh[slot * kvd + i] = round_to(DTYPE_BF16, rnd());
                }
            }
        }
    }
    int64_t shape[4] = {num_blocks, bs, nkv, hd};
    const dtype cdt = f8 ? DTYPE_F8_E4M3 : DTYPE_F32, gdt = f8 ? DTYPE_F8_E4M3 : DTYPE_BF16;
    tensor kcc = tensor_make(cdt, NULL, 4, shape), vcc = kcc, kcg = tensor_make(gdt, NULL, 4, shape), vcg = kcg;
    kcc.qscale = kcg.qscale = ks;
    vcc.qscale = vcg.qscale = vs;
    CHECK_OK(cpu->ops->alloc(cpu, &kcc));
    CHECK_OK(cpu->ops->alloc(cpu, &vcc));
    CHECK_OK(gpu->ops->alloc(gpu, &kcg));
    CHECK_OK(gpu->ops->alloc(gpu, &vcg));
    void *b;
    b = pack(kh, cache_n, cdt);
    CHECK_OK(cpu->ops->upload(cpu, &kcc, b, (size_t)cache_n * dtype_size(cdt)));
    free(b);
    b = pack(vh, cache_n, cdt);
    CHECK_OK(cpu->ops->upload(cpu, &vcc, b, (size_t)cache_n * dtype_size(cdt)));
    free(b);
    b = pack(kh, cache_n, gdt);
    CHECK_OK(gpu->ops->upload(gpu, &kcg, b, (size_t)cache_n * dtype_size(gdt)));
    free(b);
    b = pack(vh, cache_n, gdt);
    CHECK_OK(gpu->ops->upload(gpu, &vcg, b, (size_t)cache_n * dtype_size(gdt)));
    free(b);

    /* the fused qkv of the new tokens; k, v go in through kv_write */
    float *h;
    tensor xc, xg;
    rand_pair(T, W, 1.0f, &h, &xc, &xg);
    tensor qc = tensor_cols(&xc, 0, qd), kc = tensor_cols(&xc, qd, kvd), vc = tensor_cols(&xc, qd + kvd, kvd);
    tensor qg = tensor_cols(&xg, 0, qd), kg = tensor_cols(&xg, qd, kvd), vg = tensor_cols(&xg, qd + kvd, kvd);
    attn_meta mc = {.num_seqs = S, .num_tokens = T, .max_query_len = max_q, .max_seq_len = max_ctx,
                    .block_size = bs, .max_blocks_per_seq = max_blocks};
    attn_meta mg = mc;
    mc.query_start_loc = put_i32(cpu, qsl, S + 1);
    mg.query_start_loc = put_i32(gpu, qsl, S + 1);
    mc.seq_lens = put_i32(cpu, ctx, S);
    mg.seq_lens = put_i32(gpu, ctx, S);
    mc.block_tables = tensor_2d(DTYPE_I32, NULL, S, max_blocks);
    mg.block_tables = mc.block_tables;
    CHECK_OK(cpu->ops->alloc(cpu, &mc.block_tables));
    CHECK_OK(gpu->ops->alloc(gpu, &mg.block_tables));
    CHECK_OK(cpu->ops->upload(cpu, &mc.block_tables, bt, (size_t)S * max_blocks * 4));
    CHECK_OK(gpu->ops->upload(gpu, &mg.block_tables, bt, (size_t)S * max_blocks * 4));
    mc.slot_mapping = put_i64(cpu, slots, T);
    mg.slot_mapping = put_i64(gpu, slots, T);
    cpu->ops->kv_write(cpu, &kc, &vc, &kcc, &vcc, &mc);
    gpu->ops->kv_write(gpu, &kg, &vg, &kcg, &vcg, &mg);

    attn_params ap = {.scale = L->scale > 0 ? L->scale : 1.0f / sqrtf((float)hd), .sliding_window = L->window,
                      .num_heads = nh, .num_kv_heads = nkv, .head_dim = hd, .softcap = L->softcap};
    /* sinks: head h % 4 == 0 far above the scores (its output shrinks by ~e^-6: the sink is 6 above the log of
     * the most keys a query sees, so that the check below holds at any context and random draw), 1 far below (no
     * effect), the others near them (gpt-oss's trained sinks are O(1)); the CPU gets the values the GPU's dtype
     * holds */
    tensor skc = {0}, skg = {0};
    attn_params apg = ap;
    if (L->sinks) {
        const dtype sdt = L->sinks == SINKS_BF16 ? DTYPE_BF16 : L->sinks == SINKS_F16 ? DTYPE_F16 : DTYPE_F32;
        float *sk = malloc((size_t)nh * sizeof *sk);
        int keys = 1;
        for (int s = 0; s < S; s++) keys = ctx[s] > keys ? ctx[s] : keys;
        if (L->window > 0 && L->window < keys) keys = L->window;
        const float high = 6.0f + logf((float)keys);
        for (int hh = 0; hh < nh; hh++)
            sk[hh] = round_to(sdt, hh % 4 == 0 ? high + rnd() : hh % 4 == 1 ? -6.0f + rnd() : 1.5f * rnd());
        skc = put(cpu, DTYPE_F32, nh, 1, sk);
        skg = put(gpu, sdt, nh, 1, sk);
        ap.sinks = &skc;
        apg.sinks = &skg;
        free(sk);
    }
    tensor oc = put(cpu, DTYPE_F32, T, qd, NULL), og = put(gpu, DTYPE_BF16, T, qd, NULL);
    poison(&og);
    cpu->ops->attention(cpu, &qc, &kcc, &vcc, &mc, &ap, &oc);
    gpu->ops->attention(gpu, &qg, &kcg, &vcg, &mg, &apg, &og);
    float *c = get(cpu, &oc), *g = get(gpu, &og);
    char what[160];
    if (L->sinks) {
        /* the sinks must matter: without them the CPU's result is far from the one with them */
        attn_params nosink = ap;
        nosink.sinks = NULL;
        tensor on = put(cpu, DTYPE_F32, T, qd, NULL);
        cpu->ops->attention(cpu, &qc, &kcc, &vcc, &mc, &nosink, &on);
        float *n = get(cpu, &on);
        double num = 0, den = 0;
        for (int64_t i = 0; i < (int64_t)T * qd; i++) {
            num += ((double)n[i] - c[i]) * ((double)n[i] - c[i]);
            den += (double)c[i] * c[i];
        }
        CHECK_MSG(sqrt(num / den) > 10 * REL, "[%s]: the sinks change the output by only %.3g", L->name,
                  sqrt(num / den));
        free(n);
        drop(cpu, &on);
    }
    if (L->softcap > 0 && L->softcap < 10) {
        /* the cap must matter here: without it the CPU's result is far from the capped one */
        attn_params nocap = ap;
        nocap.softcap = 0.0f;
        tensor on = put(cpu, DTYPE_F32, T, qd, NULL);
        cpu->ops->attention(cpu, &qc, &kcc, &vcc, &mc, &nocap, &on);
        float *n = get(cpu, &on);
        double num = 0, den = 0;
        for (int64_t i = 0; i < (int64_t)T * qd; i++) {
            num += ((double)n[i] - c[i]) * ((double)n[i] - c[i]);
            den += (double)c[i] * c[i];
        }
        CHECK_MSG(sqrt(num / den) > 10 * REL, "[%s]: the softcap changes the output by only %.3g", L->name,
                  sqrt(num / den));
        free(n);
        drop(cpu, &on);
    }
    snprintf(what, sizeof what, "attention [%s]%s", L->name, f8 ? " (FP8 cache)" : "");
    compare(what, g, c, (int64_t)T * qd, REL, ELEM);
    free(g);
    /* max_query_len / max_seq_len as upper bounds (a graph recorded for longer contexts) */
    {
        attn_meta mu = mg;
        mu.max_query_len = max_q + 5;
        mu.max_seq_len = 8 * max_ctx + 100;
        poison(&og);
        gpu->ops->attention(gpu, &qg, &kcg, &vcg, &mu, &apg, &og);
        g = get(gpu, &og);
        snprintf(what, sizeof what, "attention [%s], upper-bound lengths%s", L->name, f8 ? " (FP8 cache)" : "");
        compare(what, g, c, (int64_t)T * qd, REL, ELEM);
        free(g);
    }
    free(c);
    /* kv_write wrote the same values (bit for bit after rounding) */
    c = get(cpu, &kcc);
    g = get(gpu, &kcg);
    int64_t diff = 0;
    for (int t = 0; t < T; t++)
        for (int64_t i = 0; i < kvd; i++)
            diff += (f8 ? c[slots[t] * kvd + i] : round_to(DTYPE_BF16, c[slots[t] * kvd + i])) != g[slots[t] * kvd + i];
    CHECK_MSG(diff == 0, "kv_write [%s]%s: %lld K values differ", L->name, f8 ? " (FP8 cache)" : "", (long long)diff);
    free(c);
    free(g);

    if ((L == &LAYOUTS[0] || (L->gen_S > 0 && L->window == 0 && L->q_len[0] == 1)) && !f8) {
        /* bad indices: a slot past the cache, a block id past the pool (sequence 0 reads its block 0) */
        int64_t bad_slot = slots[2];
        slots[2] = (int64_t)num_blocks * bs;
        tensor sg = put_i64(gpu, slots, T);
        attn_meta mb = mg;
        mb.slot_mapping = sg;
        gpu->ops->kv_write(gpu, &kg, &vg, &kcg, &vcg, &mb);
        expect_device_error("kv_write");
        drop(gpu, &sg);
        slots[2] = bad_slot;
        int32_t save = bt[0];
        bt[0] = num_blocks + 7;
        tensor btg = tensor_2d(DTYPE_I32, NULL, S, max_blocks);
        CHECK_OK(gpu->ops->alloc(gpu, &btg));
        CHECK_OK(gpu->ops->upload(gpu, &btg, bt, (size_t)S * max_blocks * 4));
        mb = mg;
        mb.block_tables = btg;
        gpu->ops->attention(gpu, &qg, &kcg, &vcg, &mb, &ap, &og);
        expect_device_error("attention");
        drop(gpu, &btg);
        bt[0] = save;
    }

    tensor *tc[] = {&kcc, &vcc, &xc, &oc, &mc.query_start_loc, &mc.seq_lens, &mc.block_tables, &mc.slot_mapping};
    tensor *tg[] = {&kcg, &vcg, &xg, &og, &mg.query_start_loc, &mg.seq_lens, &mg.block_tables, &mg.slot_mapping};
    for (size_t i = 0; i < sizeof tc / sizeof *tc; i++) drop(cpu, tc[i]);
    for (size_t i = 0; i < sizeof tg / sizeof *tg; i++) drop(gpu, tg[i]);
    if (L->sinks) {
        drop(cpu, &skc);
        drop(gpu, &skg);
    }
    free(h);
    free(kh);
    free(vh);
    free(slots);
    free(bt);
    free(qsl);
    free(q_len);
    free(ctx);
    free(perm);
}

/* ---- linear ---- */

static void test_linear_case(dtype wdt, int T, int in, int nparts, const int *outs, bool bias, dtype ydt) {
    int total = 0;
    for (int i = 0; i < nparts; i++) total += outs[i];
    const tensor *wh[3], *bh[3];
    tensor wt[3], bt_[3], wtc[3], btc[3];
    void *wb[3], *bb[3];
    float *wf[3], *bf[3];
    for (int i = 0; i < nparts; i++) {
        int64_t n = (int64_t)outs[i] * in;
        wf[i] = malloc((size_t)n * sizeof *wf[i]);
        for (int64_t j = 0; j < n; j++) wf[i][j] = round_to(wdt, rnd() * 0.1f);
        wb[i] = pack(wf[i], n, wdt);
        wt[i] = tensor_2d(wdt, wb[i], outs[i], in);
        /* the CPU gets the BF16-rounded weights the GPU computes with, in F32 */
        for (int64_t j = 0; j < n; j++) wf[i][j] = round_to(DTYPE_BF16, wf[i][j]);
        wtc[i] = tensor_2d(DTYPE_F32, wf[i], outs[i], in);
        bf[i] = malloc((size_t)outs[i] * sizeof *bf[i]);
        for (int j = 0; j < outs[i]; j++) bf[i][j] = round_to(wdt, rnd());
        bb[i] = pack(bf[i], outs[i], wdt);
        bt_[i] = tensor_1d(wdt, bb[i], outs[i]);
        btc[i] = tensor_1d(DTYPE_F32, bf[i], outs[i]);
    }
    be_linear *lc = NULL, *lg = NULL;
    for (int i = 0; i < nparts; i++) {
        wh[i] = &wtc[i];
        bh[i] = bias && i != 1 ? &btc[i] : NULL; /* part 1 has none */
    }
    CHECK_OK(cpu->ops->linear_create(cpu, wh, bias ? bh : NULL, nparts, &lc));
    for (int i = 0; i < nparts; i++) {
        wh[i] = &wt[i];
        bh[i] = bias && i != 1 ? &bt_[i] : NULL;
    }
    CHECK_OK(gpu->ops->linear_create(gpu, wh, bias ? bh : NULL, nparts, &lg));
    float *h;
    tensor xc, xg;
    rand_pair(T, in + 8, 1.0f, &h, &xc, &xg);
    tensor xvc = tensor_cols(&xc, 8, in), xvg = tensor_cols(&xg, 8, in);
    tensor yc = put(cpu, DTYPE_F32, T, total, NULL), yg = put(gpu, ydt, T, total, NULL);
    poison(&yg);
    if (lc && lg) {
        cpu->ops->linear(cpu, lc, &xvc, &yc);
        gpu->ops->linear(gpu, lg, &xvg, &yg);
        float *c = get(cpu, &yc), *g = get(gpu, &yg);
        char what[128];
        snprintf(what, sizeof what, "linear (%s weights, T %d, in %d, out %d%s, %s out)", dtype_name(wdt), T, in,
                 total, bias ? ", biases" : "", dtype_name(ydt));
        compare(what, g, c, (int64_t)T * total, REL, ELEM);
        free(c);
        free(g);
    }
    cpu->ops->linear_free(cpu, lc);
    gpu->ops->linear_free(gpu, lg);
    drop(cpu, &xc);
    drop(gpu, &xg);
    drop(cpu, &yc);
    drop(gpu, &yg);
    free(h);
    for (int i = 0; i < nparts; i++) {
        free(wf[i]);
        free(wb[i]);
        free(bf[i]);
        free(bb[i]);
    }
}

static void test_linear(void) {
    const int qkv[3] = {128, 64, 64}, one[1] = {256}, big[1] = {512}, vocab[1] = {1000};
    const dtype dts[3] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};
    const int Ts[4] = {1, 7, 64, 300};
    for (int di = 0; di < 3; di++)
        for (int ti = 0; ti < 4; ti++) test_linear_case(dts[di], Ts[ti], 96, 3, qkv, ti % 2 == 1, DTYPE_BF16);
    test_linear_case(DTYPE_BF16, 33, 4096, 1, big, false, DTYPE_BF16);
    test_linear_case(DTYPE_BF16, 1, 2048, 1, one, false, DTYPE_BF16);
    test_linear_case(DTYPE_BF16, 3, 64, 1, vocab, false, DTYPE_F32); /* logits */
    test_linear_case(DTYPE_F32, 5, 200, 1, vocab, true, DTYPE_F32);
    /* the GEMV's split-K (few rows, long K), with and without biases */
    const int down[1] = {1024}, small[3] = {104, 96, 100};
    test_linear_case(DTYPE_BF16, 3, 3072, 1, down, false, DTYPE_BF16);
    test_linear_case(DTYPE_BF16, 8, 1024, 3, small, true, DTYPE_BF16);
    test_linear_case(DTYPE_BF16, 2, 2048, 3, small, true, DTYPE_F32);
    /* rows filling more than a wave of CTAs: the one-row-per-warp kernel with K % 256 == 0 */
    const int many[1] = {12000};
    test_linear_case(DTYPE_BF16, 1, 256, 1, many, true, DTYPE_BF16);
    test_linear_case(DTYPE_BF16, 5, 512, 1, many, false, DTYPE_F32);
}

static be_linear *rand_linear(int out, int in, float scale);

/* ---- linear_fused: the GEMV kernel's stages (T <= 8) and the composite (T > 8) ---- */

enum { LF_PLAIN, LF_NORM, LF_NORM_SILU, LF_ACC, LF_SILU, LF_GEMMA, LF_GELU, LF_OPT, LF_RES, LF_RES_GEMMA, LF_RES_OFFSET, LF_MODES };
static const char *LF_NAMES[LF_MODES] = {"plain", "norm", "norm + silu_mul", "accumulate", "silu_mul",
                                         "(1 + w) norm + gelu_tanh gate", "gelu_tanh gate", "LayerNorm + bias",
                                         "residual + norm", "(1 + w) residual + norm + gelu_tanh gate",
                                         "(1 + w) residual + norm"};

static void test_linear_fused_case(int T, int in, int out, int mode, bool bias) {
    const bool res = mode == LF_RES || mode == LF_RES_GEMMA || mode == LF_RES_OFFSET,
               norm = mode == LF_NORM || mode == LF_NORM_SILU || mode == LF_GEMMA || mode == LF_OPT || res,
               glu = mode == LF_NORM_SILU || mode == LF_SILU || mode == LF_GEMMA || mode == LF_GELU ||
                     mode == LF_RES_GEMMA,
               acc = mode == LF_ACC;
    const be_norm_kind kind = mode == LF_GEMMA || mode == LF_RES_GEMMA || mode == LF_RES_OFFSET ? BE_NORM_RMS_OFFSET
                              : mode == LF_OPT                         ? BE_NORM_LAYER
                                                                       : BE_NORM_RMS;
    const be_act act = mode == LF_GEMMA || mode == LF_GELU || mode == LF_RES_GEMMA ? BE_ACT_GELU_TANH : BE_ACT_SILU;
    const int n = glu ? out / 2 : out;
    float *w = malloc((size_t)out * in * sizeof *w), *b = malloc((size_t)out * sizeof *b);
    float *nw = malloc((size_t)in * sizeof *nw), *y0 = malloc((size_t)T * n * sizeof *y0);
    for (int64_t i = 0; i < (int64_t)out * in; i++) w[i] = round_to(DTYPE_BF16, rnd() * 0.1f);
    for (int i = 0; i < out; i++) b[i] = round_to(DTYPE_BF16, rnd());
    for (int i = 0; i < in; i++) nw[i] = round_to(DTYPE_BF16, (kind == BE_NORM_RMS_OFFSET ? 0.0f : 1.0f) + 0.3f * rnd());
    for (int64_t i = 0; i < (int64_t)T * n; i++) y0[i] = round_to(DTYPE_BF16, 2.0f * rnd());
    void *wb = pack(w, (int64_t)out * in, DTYPE_BF16), *bb = pack(b, out, DTYPE_BF16);
    tensor wc = tensor_2d(DTYPE_F32, w, out, in), wg = tensor_2d(DTYPE_BF16, wb, out, in);
    tensor bc = tensor_1d(DTYPE_F32, b, out), bg = tensor_1d(DTYPE_BF16, bb, out);
    const tensor *ws[1], *bs[1];
    be_linear *lc = NULL, *lg = NULL;
    ws[0] = &wc;
    bs[0] = &bc;
    CHECK_OK(cpu->ops->linear_create(cpu, ws, bias ? bs : NULL, 1, &lc));
    ws[0] = &wg;
    bs[0] = &bg;
    CHECK_OK(gpu->ops->linear_create(gpu, ws, bias ? bs : NULL, 1, &lg));
    float *hx;
    tensor xc, xg;
    rand_pair(T, in, 1.5f, &hx, &xc, &xg);
    tensor nwc2 = put(cpu, DTYPE_F32, 1, in, nw), nwg2 = put(gpu, DTYPE_BF16, 1, in, nw);
    tensor nwc = tensor_1d(DTYPE_F32, nwc2.data, in), nwg = tensor_1d(DTYPE_BF16, nwg2.data, in);
    tensor nbc2 = put(cpu, DTYPE_F32, 1, in, hx), nbg2 = put(gpu, DTYPE_BF16, 1, in, hx); /* LayerNorm bias: x's first row */
    tensor nbc = tensor_1d(DTYPE_F32, nbc2.data, in), nbg = tensor_1d(DTYPE_BF16, nbg2.data, in);
    tensor hc = put(cpu, DTYPE_F32, T, in, NULL), hg = put(gpu, DTYPE_BF16, T, in, NULL);
    tensor mc = put(cpu, DTYPE_F32, T, out, NULL), mg = put(gpu, DTYPE_BF16, T, out, NULL);
    tensor yc = put(cpu, DTYPE_F32, T, n, y0), yg = put(gpu, DTYPE_BF16, T, n, y0);
    if (!acc) poison(&yg);
    poison(&hg); /* h must be written */
    /* res: a block output (scale 3) and its norm's weight (x's reversed first row, small around 0 or 1) */
    float *rw = malloc((size_t)in * sizeof *rw);
    for (int i = 0; i < in; i++) rw[i] = round_to(DTYPE_BF16, (kind == BE_NORM_RMS_OFFSET ? 0.0f : 1.0f) + 0.2f * hx[in - 1 - i]);
    float *hr;
    tensor rc, rg;
    rand_pair(T, in, 3.0f, &hr, &rc, &rg);
    tensor rwc2 = put(cpu, DTYPE_F32, 1, in, rw), rwg2 = put(gpu, DTYPE_BF16, 1, in, rw);
    tensor rwc = tensor_1d(DTYPE_F32, rwc2.data, in), rwg = tensor_1d(DTYPE_BF16, rwg2.data, in);
    tensor roc = put(cpu, DTYPE_F32, T, in, NULL), rog = put(gpu, DTYPE_BF16, T, in, NULL);
    poison(&rog); /* res_out must be written */
    const be_norm rnc = {.kind = kind, .w = &rwc, .eps = 1e-6f}, rng = {.kind = kind, .w = &rwg, .eps = 1e-6f};
    linear_fuse fc = {.norm_w = norm ? &nwc : NULL, .eps = 1e-6f, .silu_mul = glu, .accumulate = acc, .h = &hc,
                      .mid = &mc, .act = act, .norm_kind = kind, .norm_b = mode == LF_OPT ? &nbc : NULL,
                      .res = res ? &rc : NULL, .res_norm = res ? &rnc : NULL, .res_out = res ? &roc : NULL};
    linear_fuse fg = fc;
    fg.norm_w = norm ? &nwg : NULL;
    fg.norm_b = mode == LF_OPT ? &nbg : NULL;
    fg.h = &hg;
    fg.mid = &mg;
    fg.res = res ? &rg : NULL;
    fg.res_norm = res ? &rng : NULL;
    fg.res_out = res ? &rog : NULL;
    if (lc && lg) {
        cpu->ops->linear_fused(cpu, lc, &xc, &fc, &yc);
        gpu->ops->linear_fused(gpu, lg, &xg, &fg, &yg);
        float *c = get(cpu, &yc), *g = get(gpu, &yg);
        char what[128];
        snprintf(what, sizeof what, "linear_fused %s (T %d, in %d, out %d%s)", LF_NAMES[mode], T, in, out,
                 bias ? ", biases" : "");
        compare(what, g, c, (int64_t)T * n, REL, ELEM);
        free(c);
        free(g);
        if (norm) { /* h receives the normalised rows (the GEMV kernel's CTA 0, or the norm op): the MoE block's
                     * experts read it after the router's linear_fused */
            c = get(cpu, &hc);
            g = get(gpu, &hg);
            snprintf(what, sizeof what, "linear_fused %s h (T %d, in %d, out %d)", LF_NAMES[mode], T, in, out);
            compare(what, g, c, (int64_t)T * in, REL, ELEM);
            free(c);
            free(g);
        }
        if (res) { /* x + res_norm(res), the next residual stream */
            c = get(cpu, &roc);
            g = get(gpu, &rog);
            snprintf(what, sizeof what, "linear_fused %s res_out (T %d, in %d, out %d)", LF_NAMES[mode], T, in, out);
            compare(what, g, c, (int64_t)T * in, REL, ELEM);
            free(c);
            free(g);
        }
    }
    cpu->ops->linear_free(cpu, lc);
    gpu->ops->linear_free(gpu, lg);
    tensor *cs[] = {&xc, &nwc2, &nbc2, &hc, &mc, &yc, &rc, &rwc2, &roc},
           *gs[] = {&xg, &nwg2, &nbg2, &hg, &mg, &yg, &rg, &rwg2, &rog};
    drop_pairs(cs, gs, 9);
    free(hx);
    free(hr);
    free(rw);
    free(w);
    free(b);
    free(nw);
    free(y0);
    free(wb);
    free(bb);
}

static void test_linear_fused(void) {
    const int Ts[5] = {1, 2, 5, 8, 20};
    for (int ti = 0; ti < 5; ti++) {
        const int T = Ts[ti];
        for (int mode = 0; mode < LF_MODES; mode++) {
            const bool glu = mode == LF_NORM_SILU || mode == LF_SILU || mode == LF_GEMMA || mode == LF_GELU ||
                             mode == LF_RES_GEMMA;
            /* the persistent split-K kernel (or the row kernel for the gated form) */
            test_linear_fused_case(T, 1024, glu ? 2 * 384 : 384, mode, ti % 2 == 0);
            /* the row kernel: K % 256 != 0 */
            test_linear_fused_case(T, 96, glu ? 2 * 40 : 72, mode, ti % 2 == 1);
        }
        /* rows filling more than a wave (the row kernel) with the norm, as lm_head */
        test_linear_fused_case(T, 256, 12000, LF_NORM, false);
        /* 640 row CTAs, a second wave at most a quarter full on 132 SMs of 4 (the split-K kernel's window: the
         * out_proj / down of Qwen3.5-27B, N 5120), plain and with the norm */
        test_linear_fused_case(T, 1024, 5120, LF_PLAIN, ti % 2 == 0);
        test_linear_fused_case(T, 1024, 5120, LF_NORM, ti % 2 == 1);
        /* the pending residual's prologue past 512 chunks a row (Gemma-3-27B's hidden 5376) */
        test_linear_fused_case(T, 5376, 2 * 256, LF_RES_GEMMA, ti % 2 == 0);
        test_linear_fused_case(T, 5376, 300, LF_RES_OFFSET, ti % 2 == 1);
    }
    /* refused on the GPU as on the CPU */
    be_linear *l = rand_linear(64, 64, 0.1f);
    tensor x = put(gpu, DTYPE_BF16, 2, 64, NULL), y = put(gpu, DTYPE_BF16, 2, 64, NULL);
    linear_fuse bad = {.silu_mul = true, .accumulate = true, .mid = &y};
    gpu->ops->linear_fused(gpu, l, &x, &bad, &y);
    CHECK(gpu->ops->synchronize(gpu) != VLLM_OK);
    CHECK_MSG(strstr(vllm_last_error(), "do not combine") != NULL, "%s", vllm_last_error());
    gpu->ops->linear_free(gpu, l);
    drop(gpu, &x);
    drop(gpu, &y);
}

static void test_sampling(void);

/* A second CUDA backend made with the environment variable name=value (a backend reads its switches when created);
 * NULL, and a failed check, if it cannot be made. */
static backend *gpu_with_env2(const char *name, const char *value, const char *name2, const char *value2) {
    backend *b = NULL;
    setenv(name, value, 1);
    if (name2) setenv(name2, value2, 1);
    vllm_status st = backend_create("cuda", NULL, &b);
    unsetenv(name);
    if (name2) unsetenv(name2);
    CHECK_MSG(st == VLLM_OK, "a second CUDA backend with %s=%s%s%s%s: %s", name, value, name2 ? " " : "",
              name2 ? name2 : "", name2 ? "=..." : "", vllm_last_error());
    return st == VLLM_OK ? b : NULL;
}

static backend *gpu_with_env(const char *name, const char *value) { return gpu_with_env2(name, value, NULL, NULL); }

/* VLLM_CUDA_LT_TUNE=1 (a second CUDA backend made with it): decode-sized GEMMs timed over cuBLASLt's candidates
 * give the same results within the bounds, plain and accumulating (the timed runs write a scratch output, not y),
 * for shapes timed (T 16, 64: multiples of 8 up to 512) and not (T 300), and again once the choice is cached */
static void test_linear_tuned(void) {
    backend *plain = gpu, *tuned = gpu_with_env("VLLM_CUDA_LT_TUNE", "1");
    if (!tuned) return;
    gpu = tuned;
    const int qkv[3] = {128, 64, 64}, big[1] = {512};
    for (int rep = 0; rep < 2; rep++) {
        test_linear_case(DTYPE_BF16, 16, 96, 3, qkv, true, DTYPE_BF16);
        test_linear_case(DTYPE_BF16, 64, 4096, 1, big, false, DTYPE_BF16);
        test_linear_case(DTYPE_BF16, 64, 256, 1, big, false, DTYPE_F32);
        test_linear_case(DTYPE_BF16, 300, 96, 3, qkv, false, DTYPE_BF16);
        test_linear_fused_case(16, 1024, 384, LF_ACC, true);
        test_linear_fused_case(24, 1024, 2 * 384, LF_NORM_SILU, false);
    }
    backend_free(tuned);
    gpu = plain;
}

/* ---- sampling ---- */

static void test_sampling_cuts(void);
static void test_sampling_cuts_mixed(int V);

/* The batch g sampled on the GPU from lgg, and c (the same rows and parameters, its own outputs) by the CPU reference
 * from the host logits lg (rows of V); false (a failed check) when the GPU op fails */
static bool sample_both(const float *lg, int V, tensor *lgg, sample_batch *g, sample_batch *c, const char *what) {
    vllm_status st = gpu->ops->sample(gpu, lgg, g);
    CHECK_MSG(st == VLLM_OK, "%s: %s", what, vllm_last_error());
    if (st != VLLM_OK) return false;
    sample_ws ws = {0};
    CHECK_OK(sample_ws_init(&ws, V));
    float *row = malloc((size_t)V * sizeof *row);
    for (int i = 0; i < c->num_rows; i++) {
        memcpy(row, lg + (size_t)c->rows[i] * V, (size_t)V * sizeof *row);
        sample_row_ref(row, V, c, i, &ws);
    }
    free(row);
    sample_ws_free(&ws);
    return true;
}

/* VLLM_CUDA_SAMPLE_BISECT=1 (a second CUDA backend made with it): top_k / top_p by the bisections over the whole row
 * only, the path the candidates fall back to, against the CPU on the same rows */
static void test_sampling_bisect(void) {
    backend *plain = gpu, *bisect = gpu_with_env("VLLM_CUDA_SAMPLE_BISECT", "1");
    if (!bisect) return;
    gpu = bisect;
    test_sampling();
    test_sampling_cuts();
    test_sampling_cuts_mixed(1000);
    gpu = plain;
    backend_free(bisect);
}

/* VLLM_CUDA_SAMPLE_RADIX=1: the radix select instead of the bisections, alone (with VLLM_CUDA_SAMPLE_BISECT=1 every
 * cut and draw takes it) and behind the candidates (the rows they cannot take: V 32000's broad rows) */
static void test_sampling_radix(void) {
    backend *plain = gpu;
    backend *alone = gpu_with_env2("VLLM_CUDA_SAMPLE_RADIX", "1", "VLLM_CUDA_SAMPLE_BISECT", "1");
    if (alone) {
        gpu = alone;
        test_sampling();
        test_sampling_cuts();
        test_sampling_cuts_mixed(1000);
        test_sampling_cuts_mixed(32000);
        gpu = plain;
        backend_free(alone);
    }
    backend *behind = gpu_with_env("VLLM_CUDA_SAMPLE_RADIX", "1");
    if (behind) {
        gpu = behind;
        test_sampling_cuts();
        test_sampling_cuts_mixed(32000);
        gpu = plain;
        backend_free(behind);
    }
}

/* top_k / top_p with everything else a row can carry, against the CPU sampler (the token exactly, the logprob within
 * 1e-4), on a vocabulary of V (1000: fewer than 2 tokens a thread, every row's candidates fit): few allowed tokens
 * under top_k 20 (fewer positive probabilities than k: the candidates' bound is 0), a temperature of 0.02, top_k = V
 * with top_p, top logprobs with top_k (the log-sum-exp in its own pass), penalties and a logit bias with top_k and
 * top_p (the processed row), min_p with top_k, top_p alone, bad words with top_k */
static void test_sampling_cuts_mixed(int V) {
    enum { B = 8, TRIALS = 4 };
    float *lg = malloc((size_t)B * V * sizeof *lg);
    for (int i = 0; i < B * V; i++) lg[i] = 3.0f * rnd();
    tensor lgg = put(gpu, DTYPE_F32, B, V, lg);
    static vllm_sampling_params ps[B];
    const vllm_sampling_params *pp[B];
    sampler_context ctx[B];
    double uni[B];
    int32_t rows[B], tok_c[B], tok_g[B], allowed[5], prompt[6], output[4], bias_ids[2], bw_ids[1], tic[B][4], tig[B][4];
    int32_t *tcp[B], *tgp[B];
    float lp_c[B], lp_g[B], bias_v[2] = {4.0f, -2.0f}, tlc[B][4], tlg[B][4];
    float *tlcp[B], *tlgp[B];
    size_t bw_off[2] = {0, 1};
    sampler_token_seqs bw = {bw_ids, bw_off, 1};
    for (int trial = 0; trial < TRIALS; trial++) {
        for (int i = 0; i < 5; i++) allowed[i] = rnd_int(V);
        for (int i = 0; i < 6; i++) prompt[i] = rnd_int(V);
        for (int i = 0; i < 4; i++) output[i] = rnd_int(V);
        for (int i = 0; i < 2; i++) bias_ids[i] = rnd_int(V);
        bw_ids[0] = rnd_int(V);
        for (int i = 0; i < B; i++) {
            vllm_sampling_params *p = &ps[i];
            *p = vllm_sampling_default_params();
            p->temperature = 0.7f;
            p->top_k = 20;
            ctx[i] = (sampler_context){0};
            tcp[i] = tgp[i] = NULL;
            tlcp[i] = tlgp[i] = NULL;
            switch (i) {
            case 0: p->allowed_token_ids = allowed; p->num_allowed_token_ids = 5; break;
            case 1: p->temperature = 0.02f; break;
            case 2: p->top_k = V; p->top_p = 0.9f; break;
            case 3:
                p->logprobs = 3;
                tcp[i] = tic[i], tgp[i] = tig[i], tlcp[i] = tlc[i], tlgp[i] = tlg[i];
                break;
            case 4:
                p->top_p = 0.95f;
                p->repetition_penalty = 1.2f;
                p->presence_penalty = 0.5f;
                p->logit_bias_ids = bias_ids;
                p->logit_bias_values = bias_v;
                p->num_logit_bias = 2;
                ctx[i] = (sampler_context){.prompt = prompt, .n_prompt = 6, .output = output, .n_output = 4};
                break;
            case 5: p->min_p = 0.1f; break;
            case 6: p->top_k = 0; p->top_p = 0.9f; break;
            default: ctx[i].bad_words = &bw; break;
            }
            pp[i] = p;
            rows[i] = (i + trial) % B;
            uni[i] = rnd01();
        }
        sample_batch sg = {.num_rows = B, .rows = rows, .params = pp, .ctx = ctx, .uniform = uni, .tokens = tok_g,
                           .logprobs = lp_g, .top_ids = tgp, .top_lps = tlgp};
        sample_batch sc = sg;
        sc.tokens = tok_c;
        sc.logprobs = lp_c;
        sc.top_ids = tcp;
        sc.top_lps = tlcp;
        if (!sample_both(lg, V, &lgg, &sg, &sc, "sample (cuts, mixed)")) break;
        for (int i = 0; i < B; i++) {
            CHECK_MSG(tok_g[i] == tok_c[i] && (lp_g[i] == lp_c[i] || fabsf(lp_g[i] - lp_c[i]) <= 1e-4f),
                      "sample cuts (mixed, V %d) trial %d row %d: gpu %d (%g) cpu %d (%g)", V, trial, i, tok_g[i],
                      (double)lp_g[i], tok_c[i], (double)lp_c[i]);
            for (int j = 0; tgp[i] && j < 3; j++)
                CHECK_MSG(tig[i][j] == tic[i][j] && fabsf(tlg[i][j] - tlc[i][j]) <= 1e-4f,
                          "sample cuts (mixed) row %d top %d: gpu %d cpu %d", i, j, tig[i][j], tic[i][j]);
        }
    }
    drop(gpu, &lgg);
    free(lg);
}

/* top_k / top_p (ops_sample.cu cand_draw: candidates above a bound from the threads' maxima, sorted; the bisections
 * when they do not fit) against the CPU sampler, the token exactly, on a vocabulary the size of Llama 2's: rows like
 * an LLM's (a few tokens far above a broad tail), broad, flat (every token tied: the bisections), a few levels (wide
 * ties at the cut), and one token in a thousand raised; top_k from 1 to 600 (above SM_THREADS: the bisections),
 * top_p, min_p, temperatures 0.6 to 1.5. (No top_p of 0.5: on a flat row its cut falls exactly between two tied
 * tokens, where the bisections' sum and sampler.c's running sum round to either side.) */
static void test_sampling_cuts(void) {
    enum { V = 32000, B = 20, TRIALS = 6 };
    float *lg = malloc((size_t)B * V * sizeof *lg);
    for (int i = 0; i < B; i++)
        for (int v = 0; v < V; v++) {
            float g = rnd() + rnd() + rnd(); /* about normal, sd 1 */
            float *x = &lg[(size_t)i * V + v];
            switch (i % 5) {
            case 0: *x = 2.5f * g + (v < 50 ? 12.0f + 3.0f * rnd() : 0.0f); break;
            case 1: *x = 4.0f * g; break;
            case 2: *x = 0.0f; break;
            case 3: *x = floorf(2.0f * g); break;
            default: *x = g + (v % 1000 == 7 ? 9.0f : 0.0f); break;
            }
        }
    tensor lgg = put(gpu, DTYPE_F32, B, V, lg);
    static vllm_sampling_params ps[B];
    const vllm_sampling_params *pp[B];
    sampler_context ctx[B];
    double uni[B];
    int32_t rows[B], tok_c[B], tok_g[B];
    float lp_c[B], lp_g[B];
    const int ks[] = {0, 1, 5, 20, 50, 300, 600};
    const float tps[] = {1.0f, 0.6f, 0.95f, 0.99f}, temps[] = {0.6f, 1.0f, 1.5f};
    int n = 0;
    for (int trial = 0; trial < TRIALS; trial++) {
        for (int i = 0; i < B; i++, n++) {
            vllm_sampling_params *p = &ps[i];
            *p = vllm_sampling_default_params();
            p->temperature = temps[n % 3];
            p->top_k = ks[(n / 3) % 7];
            p->top_p = tps[(n / 7) % 4];
            if (n % 11 == 3) p->min_p = 0.05f;
            if (p->top_k == 0 && p->top_p == 1.0f) p->top_p = 0.9f;
            ctx[i] = (sampler_context){0};
            pp[i] = p;
            rows[i] = (i + trial) % B;
            uni[i] = rnd01();
        }
        sample_batch sg = {.num_rows = B, .rows = rows, .params = pp, .ctx = ctx, .uniform = uni, .tokens = tok_g,
                           .logprobs = lp_g};
        sample_batch sc = sg;
        sc.tokens = tok_c;
        sc.logprobs = lp_c;
        if (!sample_both(lg, V, &lgg, &sg, &sc, "sample (cuts)")) break;
        for (int i = 0; i < B; i++)
            CHECK_MSG(tok_g[i] == tok_c[i] && (lp_g[i] == lp_c[i] || fabsf(lp_g[i] - lp_c[i]) <= 1e-4f),
                      "sample cuts trial %d row %d (logits row %d, T %.1f, top_k %d, top_p %.2f, min_p %.2f, u %.4f): "
                      "gpu %d (%g) cpu %d (%g)",
                      trial, i, rows[i], (double)ps[i].temperature, ps[i].top_k, (double)ps[i].top_p,
                      (double)ps[i].min_p, uni[i], tok_g[i], (double)lp_g[i], tok_c[i], (double)lp_c[i]);
    }
    drop(gpu, &lgg);
    free(lg);
}

#define SV 3000   /* vocabulary of the sampling tests */
#define SB 24     /* rows */

static void test_sampling(void) {
    /* logits: well separated (scale 4); row 7 holds a NaN */
    const int B = SB, V = SV;
    float *lg = malloc((size_t)B * V * sizeof *lg);
    for (int i = 0; i < B * V; i++) lg[i] = rnd() * 4.0f;
    lg[7 * V + 123] = NAN;
    tensor lgg = put(gpu, DTYPE_F32, B, V, lg);

    static vllm_sampling_params ps[SB];
    const vllm_sampling_params *pp[SB];
    sampler_context ctx[SB];
    double uni[SB];
    int32_t rows[SB], tok_c[SB], tok_g[SB], top_ids_c[SB][8], top_ids_g[SB][8];
    float lp_c[SB], lp_g[SB], top_lps_c[SB][8], top_lps_g[SB][8];
    int32_t *tic[SB], *tig[SB];
    float *tlc[SB], *tlg[SB];
    int32_t prompt[10], output[6], eos[1] = {17}, allowed[5], bias_ids[3];
    float bias_v[3] = {5.0f, -300.0f, 2.0f};
    int32_t bw_ids[3];
    size_t bw_off[3] = {0, 1, 3};
    sampler_token_seqs bw = {bw_ids, bw_off, 2};
    for (int i = 0; i < 10; i++) prompt[i] = rnd_int(V);
    for (int i = 0; i < 6; i++) output[i] = rnd_int(V);
    for (int i = 0; i < 5; i++) allowed[i] = rnd_int(V);
    for (int i = 0; i < 3; i++) bias_ids[i] = rnd_int(V);
    bias_ids[2] = bias_ids[0]; /* repeated: the last value wins */
    bw_ids[0] = rnd_int(V);     /* a one-token bad word: always banned */
    bw_ids[1] = output[5];      /* a two-token word whose prefix is the last output token */
    bw_ids[2] = rnd_int(V);

    /* structured outputs' token masks (about a fifth of the tokens allowed) on some rows of the last trial: the
     * GPU masks its logits in place, so only once per row */
    static uint32_t masks[SB][(SV + 31) / 32];
    for (int i = 0; i < SB; i++)
        for (int w = 0; w < (SV + 31) / 32; w++)
            masks[i][w] = (uint32_t)rnd_int(1 << 16) << 16 ^ (uint32_t)rnd_int(1 << 16), masks[i][w] &= masks[i][w] >> 1;
    int trials = 12;
    for (int trial = 0; trial < trials; trial++) {
        for (int i = 0; i < B; i++) {
            vllm_sampling_params *p = &ps[i];
            *p = vllm_sampling_default_params();
            p->temperature = i < 6 ? 0.0f : 0.4f + 0.1f * (float)(i % 5);
            ctx[i] = (sampler_context){.prompt = prompt, .n_prompt = 10, .output = output, .n_output = 6,
                                       .eos_ids = eos, .n_eos = 1, .bad_words = NULL};
            int kind = i % 6;
            if (i >= 6) kind = (i - 6) % 9;
            switch (kind) {
            case 1: p->allowed_token_ids = allowed; p->num_allowed_token_ids = 5; break;
            case 2: ctx[i].bad_words = &bw; break;
            case 3: p->min_tokens = 10; p->stop_token_ids = &allowed[0]; p->num_stop_token_ids = 1; break;
            case 4: p->logit_bias_ids = bias_ids; p->logit_bias_values = bias_v; p->num_logit_bias = 3; break;
            case 5: p->repetition_penalty = 1.3f; p->frequency_penalty = 0.5f; p->presence_penalty = -0.4f; break;
            case 6: p->min_p = 0.05f; break;
            case 7: p->top_p = 0.7f; break;
            case 8: p->top_k = 20; p->top_p = 0.9f; break;
            default: break;
            }
            if (i == 11) { /* top_k alone (both draw in (probability desc, id asc) order) */
                *p = vllm_sampling_default_params();
                p->temperature = 0.8f;
                p->top_k = 7;
            }
            if (i == 12) { p->top_k = 50; p->min_p = 0.01f; p->top_p = 0.95f; p->repetition_penalty = 0.8f; }
            if (trial == trials - 1 && i % 3 == 1 && (i * 7 + trial) % B != 7) ctx[i].mask = masks[i];
            p->logprobs = i % 4 == 0 ? 5 : -1;
            pp[i] = p;
            rows[i] = (i * 7 + trial) % B;
            uni[i] = rnd01();
            tic[i] = p->logprobs > 0 ? top_ids_c[i] : NULL;
            tig[i] = p->logprobs > 0 ? top_ids_g[i] : NULL;
            tlc[i] = p->logprobs > 0 ? top_lps_c[i] : NULL;
            tlg[i] = p->logprobs > 0 ? top_lps_g[i] : NULL;
        }
        sample_batch sg = {.num_rows = B, .rows = rows, .params = pp, .ctx = ctx, .uniform = uni, .tokens = tok_g,
                           .logprobs = lp_g, .top_ids = tig, .top_lps = tlg};
        sample_batch sc = sg;
        sc.tokens = tok_c;
        sc.logprobs = lp_c;
        sc.top_ids = tic;
        sc.top_lps = tlc;
        if (!sample_both(lg, V, &lgg, &sg, &sc, "sample")) break;
        for (int i = 0; i < B; i++) {
            bool nan_row = rows[i] == 7;
            CHECK_MSG(tok_g[i] == tok_c[i], "sample trial %d row %d (logits row %d, T %.2f): gpu %d cpu %d", trial, i,
                      rows[i], (double)ps[i].temperature, tok_g[i], tok_c[i]);
            if (tok_g[i] != tok_c[i]) continue;
            if (nan_row) {
                CHECK(tok_g[i] == SAMPLE_NAN_LOGITS && isnan(lp_g[i]));
                continue;
            }
            /* (a row whose mask and allowed ids leave no token: both NaN, or both -inf, the same token) */
            CHECK_MSG((isnan(lp_g[i]) && isnan(lp_c[i])) || lp_g[i] == lp_c[i] || fabsf(lp_g[i] - lp_c[i]) <= 1e-4f,
                      "sample row %d: logprob gpu %g cpu %g", i, (double)lp_g[i], (double)lp_c[i]);
            for (int j = 0; tig[i] && j < ps[i].logprobs; j++) {
                CHECK_MSG(tig[i][j] == tic[i][j], "row %d top %d: gpu %d cpu %d", i, j, tig[i][j], tic[i][j]);
                CHECK_MSG((isnan(tlg[i][j]) && isnan(tlc[i][j])) || tlg[i][j] == tlc[i][j] ||
                              fabsf(tlg[i][j] - tlc[i][j]) <= 1e-4f,
                          "row %d top %d lp: gpu %g cpu %g", i, j,
                          (double)tlg[i][j], (double)tlc[i][j]);
            }
        }
    }
    /* the masked rows were set to -inf on the device: the raw logits again for the tests below */
    CHECK_OK(gpu->ops->upload(gpu, &lgg, lg, (size_t)B * V * sizeof *lg));

    /* every token banned: greedy gives token 0 (argmax of all -inf), sampling SAMPLE_ALL_BANNED */
    {
        int32_t only[1] = {bw_ids[0]};
        vllm_sampling_params p2[2];
        for (int i = 0; i < 2; i++) {
            p2[i] = vllm_sampling_default_params();
            p2[i].allowed_token_ids = only;
            p2[i].num_allowed_token_ids = 1;
            p2[i].temperature = i ? 0.8f : 0.0f;
        }
        const vllm_sampling_params *pp2[2] = {&p2[0], &p2[1]};
        sampler_context c2[2] = {{.bad_words = &bw}, {.bad_words = &bw}};
        int32_t r2[2] = {0, 1}, t2[2];
        float l2[2];
        double u2[2] = {0.3, 0.6};
        sample_batch b2 = {.num_rows = 2, .rows = r2, .params = pp2, .ctx = c2, .uniform = u2, .tokens = t2,
                           .logprobs = l2};
        CHECK_OK(gpu->ops->sample(gpu, &lgg, &b2));
        CHECK_MSG(t2[0] == 0 && t2[1] == SAMPLE_ALL_BANNED, "all banned: %d %d", t2[0], t2[1]);
    }

    /* logprobs of given tokens (prompt logprobs) */
    {
        int32_t r3[SB], tg3[SB];
        int k3[SB];
        float l3c[SB], l3g[SB];
        for (int i = 0; i < B; i++) {
            r3[i] = i;
            tg3[i] = i == 3 ? V + 5 : rnd_int(V);  /* row 3: a target past the vocabulary */
            k3[i] = i % 3 == 0 ? 0 : 1 + i % 8;
            tic[i] = k3[i] ? top_ids_c[i] : NULL;
            tig[i] = k3[i] ? top_ids_g[i] : NULL;
            tlc[i] = k3[i] ? top_lps_c[i] : NULL;
            tlg[i] = k3[i] ? top_lps_g[i] : NULL;
        }
        logprob_batch lb = {.num_rows = B, .rows = r3, .targets = tg3, .k = k3, .logprobs = l3g, .top_ids = tig,
                            .top_lps = tlg};
        CHECK_OK(gpu->ops->logprobs(gpu, &lgg, &lb));
        lb.logprobs = l3c;
        lb.top_ids = tic;
        lb.top_lps = tlc;
        for (int i = 0; i < B; i++) logprob_row_ref(lg + (size_t)i * V, V, &lb, i);
        for (int i = 0; i < B; i++) {
            bool both_nan = isnan(l3g[i]) && isnan(l3c[i]);
            CHECK_MSG(both_nan || fabsf(l3g[i] - l3c[i]) <= 1e-4f, "logprobs row %d: gpu %g cpu %g", i, (double)l3g[i],
                      (double)l3c[i]);
            for (int j = 0; j < k3[i]; j++) {
                CHECK_MSG(tig[i][j] == tic[i][j], "logprobs row %d top %d: gpu %d cpu %d", i, j, tig[i][j], tic[i][j]);
                bool bn = isnan(tlg[i][j]) && isnan(tlc[i][j]);
                CHECK_MSG(bn || fabsf(tlg[i][j] - tlc[i][j]) <= 1e-4f, "logprobs row %d top %d", i, j);
            }
        }
    }

    /* a large vocabulary (Qwen's) in BF16 logits, greedy and sampled */
    {
        const int V2 = 151936;
        float *l2 = malloc((size_t)3 * V2 * sizeof *l2);
        for (int i = 0; i < 3 * V2; i++) l2[i] = round_to(DTYPE_BF16, rnd() * 8.0f);
        l2[2 * V2 + 100000] = NAN; /* row 2 holds a NaN */
        tensor t2 = put(gpu, DTYPE_BF16, 3, V2, l2);
        /* greedy; top_p; plain temperature (the multi-CTA path) at three draws; both on the NaN row */
        enum { NR = 7 };
        vllm_sampling_params p2[NR];
        for (int i = 0; i < NR; i++) p2[i] = vllm_sampling_default_params();
        p2[0].temperature = 0;
        p2[1].temperature = 0.9f;
        p2[1].top_p = 0.9f;
        p2[2].temperature = 1.0f;
        p2[3].temperature = 0.7f;
        p2[4].temperature = 1.3f;
        p2[5].temperature = 0;
        p2[6].temperature = 1.0f;
        const vllm_sampling_params *pp2[NR] = {&p2[0], &p2[1], &p2[2], &p2[3], &p2[4], &p2[5], &p2[6]};
        sampler_context c2[NR] = {{0}, {0}, {0}, {0}, {0}, {0}, {0}};
        int32_t r2[NR] = {0, 1, 1, 0, 1, 2, 2}, tg[NR], tc[NR];
        float lpg[NR], lpc[NR];
        double u2[NR] = {0.5, 0.37, 0.61, 0.05, 0.999, 0.5, 0.5};
        sample_batch b2 = {.num_rows = NR, .rows = r2, .params = pp2, .ctx = c2, .uniform = u2, .tokens = tg,
                           .logprobs = lpg};
        sample_batch b2c = b2;
        b2c.tokens = tc;
        b2c.logprobs = lpc;
        if (sample_both(l2, V2, &t2, &b2, &b2c, "sample (vocab 151936)")) {
            for (int i = 0; i < NR; i++) {
                bool nans = isnan(lpg[i]) && isnan(lpc[i]);
                CHECK_MSG(tg[i] == tc[i] && (nans || fabsf(lpg[i] - lpc[i]) <= 1e-4f),
                          "vocab 151936 row %d: gpu %d (%g) cpu %d (%g)", i, tg[i], (double)lpg[i], tc[i],
                          (double)lpc[i]);
            }
            CHECK(tg[5] == SAMPLE_NAN_LOGITS && tg[6] == SAMPLE_NAN_LOGITS);
        }
        drop(gpu, &t2);
        free(l2);
    }
    drop(gpu, &lgg);
    free(lg);
}

/* ---- graphs ---- */

/* A random (out, in) BF16 linear layer on the GPU. */
static be_linear *rand_linear(int out, int in, float scale) {
    float *w = malloc((size_t)out * in * sizeof *w);
    for (int64_t i = 0; i < (int64_t)out * in; i++) w[i] = rnd() * scale;
    void *b = pack(w, (int64_t)out * in, DTYPE_BF16);
    tensor t = tensor_2d(DTYPE_BF16, b, out, in);
    const tensor *ws[1] = {&t};
    be_linear *l = NULL;
    CHECK_OK(gpu->ops->linear_create(gpu, ws, NULL, 1, &l));
    free(b);
    free(w);
    return l;
}

static tensor rand_vec(int n, float base, float scale) {
    float *w = malloc((size_t)n * sizeof *w);
    for (int i = 0; i < n; i++) w[i] = base + scale * rnd();
    void *b = pack(w, n, DTYPE_BF16);
    tensor h = tensor_1d(DTYPE_BF16, b, n), t;
    CHECK_OK(gpu->ops->import(gpu, &h, &t));
    free(b);
    free(w);
    return t;
}

/* A 2-layer Qwen3-style decoder over 4 decode slots (3 sequences and a padding one) */
#define GD 256
#define GNH 4
#define GNKV 2
#define GHD 64
#define GI 512
#define GV 1000
#define GL 2
#define GS 4
#define GBS 16
#define GNB 40
#define GMB 8       /* block table columns */
#define GMAXPOS 256

typedef struct gmodel {
    tensor embed, cos_sin, in_norm[GL], post_norm[GL], qn[GL], kn[GL], final_norm;
    be_linear *qkv[GL], *o[GL], *gu[GL], *down[GL], *head;
    tensor kc[GL], vc[GL];
    tensor x, h, qkvb, attn, ob, gub, ab, sel, logits;
    tensor meta;                         /* the step's metadata, one I32 buffer */
    tensor ids, pos, qsl, seq_lens, bt, lidx, slots;
    attn_meta m;
} gmodel;

/* offsets (in I32 units) of the metadata arrays in gmodel.meta */
enum { GO_IDS = 0, GO_POS = GO_IDS + GS, GO_QSL = GO_POS + GS, GO_LENS = GO_QSL + GS + 1, GO_BT = GO_LENS + GS,
       GO_LIDX = GO_BT + GS * GMB, GO_SLOTS = (GO_LIDX + GS + 1) & ~1, GO_END = GO_SLOTS + 2 * GS };

static void gmodel_init(gmodel *g) {
    memset(g, 0, sizeof *g);
    g->embed = rand_vec(GV * GD, 0.0f, 1.0f);
    g->embed.ndim = 2;
    g->embed.shape[0] = GV;
    g->embed.shape[1] = GD;
    float *cs = malloc((size_t)GMAXPOS * GHD * sizeof *cs);
    for (int p = 0; p < GMAXPOS; p++)
        for (int i = 0; i < GHD / 2; i++) {
            double f = pow(1000000.0, -2.0 * i / GHD);
            cs[p * GHD + i] = (float)cos(p * f);
            cs[p * GHD + GHD / 2 + i] = (float)sin(p * f);
        }
    g->cos_sin = put(gpu, DTYPE_F32, GMAXPOS, GHD, cs);
    free(cs);
    int64_t shape[4] = {GNB, GBS, GNKV, GHD};
    for (int l = 0; l < GL; l++) {
        g->in_norm[l] = rand_vec(GD, 1.0f, 0.2f);
        g->post_norm[l] = rand_vec(GD, 1.0f, 0.2f);
        g->qn[l] = rand_vec(GHD, 1.0f, 0.2f);
        g->kn[l] = rand_vec(GHD, 1.0f, 0.2f);
        g->qkv[l] = rand_linear((GNH + 2 * GNKV) * GHD, GD, 0.1f);
        g->o[l] = rand_linear(GD, GNH * GHD, 0.1f);
        g->gu[l] = rand_linear(2 * GI, GD, 0.1f);
        g->down[l] = rand_linear(GD, GI, 0.1f);
        g->kc[l] = tensor_make(DTYPE_BF16, NULL, 4, shape);
        g->vc[l] = g->kc[l];
        CHECK_OK(gpu->ops->alloc(gpu, &g->kc[l]));
        CHECK_OK(gpu->ops->alloc(gpu, &g->vc[l]));
        /* earlier tokens' K/V: random */
        int64_t n = (int64_t)GNB * GBS * GNKV * GHD;
        float *r = malloc((size_t)n * sizeof *r);
        for (int64_t i = 0; i < n; i++) r[i] = rnd();
        void *b = pack(r, n, DTYPE_BF16);
        CHECK_OK(gpu->ops->upload(gpu, &g->kc[l], b, (size_t)n * 2));
        for (int64_t i = 0; i < n; i++) r[i] = rnd();
        free(b);
        b = pack(r, n, DTYPE_BF16);
        CHECK_OK(gpu->ops->upload(gpu, &g->vc[l], b, (size_t)n * 2));
        free(b);
        free(r);
    }
    g->final_norm = rand_vec(GD, 1.0f, 0.2f);
    g->head = rand_linear(GV, GD, 0.1f);
    g->x = put(gpu, DTYPE_BF16, GS, GD, NULL);
    g->h = put(gpu, DTYPE_BF16, GS, GD, NULL);
    g->qkvb = put(gpu, DTYPE_BF16, GS, (GNH + 2 * GNKV) * GHD, NULL);
    g->attn = put(gpu, DTYPE_BF16, GS, GNH * GHD, NULL);
    g->ob = put(gpu, DTYPE_BF16, GS, GD, NULL);
    g->gub = put(gpu, DTYPE_BF16, GS, 2 * GI, NULL);
    g->ab = put(gpu, DTYPE_BF16, GS, GI, NULL);
    g->sel = put(gpu, DTYPE_BF16, GS, GD, NULL);
    g->logits = put(gpu, DTYPE_F32, GS, GV, NULL);
    g->meta = tensor_1d(DTYPE_I32, NULL, GO_END);
    CHECK_OK(gpu->ops->alloc(gpu, &g->meta));
    int32_t *mp = g->meta.data;
    g->ids = tensor_1d(DTYPE_I32, mp + GO_IDS, GS);
    g->pos = tensor_1d(DTYPE_I32, mp + GO_POS, GS);
    g->qsl = tensor_1d(DTYPE_I32, mp + GO_QSL, GS + 1);
    g->seq_lens = tensor_1d(DTYPE_I32, mp + GO_LENS, GS);
    g->bt = tensor_2d(DTYPE_I32, mp + GO_BT, GS, GMB);
    g->lidx = tensor_1d(DTYPE_I32, mp + GO_LIDX, GS);
    g->slots = tensor_1d(DTYPE_I64, mp + GO_SLOTS, GS);
    g->m = (attn_meta){.num_seqs = GS, .num_tokens = GS, .max_query_len = 1, .max_seq_len = GMB * GBS,
                       .block_size = GBS, .max_blocks_per_seq = GMB, .query_start_loc = g->qsl,
                       .seq_lens = g->seq_lens, .block_tables = g->bt, .slot_mapping = g->slots};
}

static void gmodel_free(gmodel *g) {
    for (int l = 0; l < GL; l++) {
        tensor *ts[] = {&g->in_norm[l], &g->post_norm[l], &g->qn[l], &g->kn[l]};
        for (int i = 0; i < 4; i++) gpu->ops->release_import(gpu, ts[i]);
        be_linear *ls[] = {g->qkv[l], g->o[l], g->gu[l], g->down[l]};
        for (int i = 0; i < 4; i++) gpu->ops->linear_free(gpu, ls[i]);
        drop(gpu, &g->kc[l]);
        drop(gpu, &g->vc[l]);
    }
    gpu->ops->linear_free(gpu, g->head);
    gpu->ops->release_import(gpu, &g->embed);
    gpu->ops->release_import(gpu, &g->final_norm);
    tensor *ts[] = {&g->cos_sin, &g->x, &g->h, &g->qkvb, &g->attn, &g->ob, &g->gub, &g->ab, &g->sel, &g->logits, &g->meta};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) drop(gpu, ts[i]);
}

/* The step's metadata: 3 decoding sequences with contexts of ctx0 + 5 s tokens on
 * blocks 1.. (block 0 is left to the padding slot), then the padding slot. */
static void gmodel_meta(gmodel *g, int ctx0, int32_t *host) {
    memset(host, 0, GO_END * sizeof *host);
    for (int s = 0; s < GS; s++) {
        host[GO_QSL + s + 1] = s + 1;
        host[GO_LIDX + s] = s < GS - 1 ? s : 0;
        int64_t slot = -1;
        if (s < GS - 1) {
            int len = ctx0 + 5 * s;
            host[GO_IDS + s] = rnd_int(GV);
            host[GO_POS + s] = len - 1;
            host[GO_LENS + s] = len;
            for (int b = 0; b < GMB; b++) host[GO_BT + s * GMB + b] = 1 + s * 12 + b; /* distinct, within GNB */
            slot = (int64_t)host[GO_BT + s * GMB + (len - 1) / GBS] * GBS + (len - 1) % GBS;
        } else {
            host[GO_IDS + s] = 0; /* padding: token 0, position 0, seq_len 1, block row of zeros, slot -1 */
            host[GO_POS + s] = 0;
            host[GO_LENS + s] = 1;
        }
        memcpy(&host[GO_SLOTS + 2 * s], &slot, sizeof slot);
    }
    (void)g;
}

/* The ops of one decode step (as llama.c's forward with the fused ops). */
static void gmodel_step(gmodel *g) {
    const backend_ops *o = gpu->ops;
    const int64_t qd = GNH * GHD, kvd = GNKV * GHD;
    tensor q = tensor_cols(&g->qkvb, 0, qd), k = tensor_cols(&g->qkvb, qd, kvd), v = tensor_cols(&g->qkvb, qd + kvd, kvd);
    attn_params ap = {.scale = 0.125f, .sliding_window = 0, .num_heads = GNH, .num_kv_heads = GNKV, .head_dim = GHD};
    /* as llama.c: the norms, the gated product and the residual adds ride on linear_fused */
    const linear_fuse add_to_x = {.accumulate = true, .mid = &g->ob};
    o->embedding(gpu, &g->embed, &g->ids, &g->x);
    for (int l = 0; l < GL; l++) {
        const linear_fuse attn_in = {.norm_w = &g->in_norm[l], .eps = 1e-6f, .h = &g->h};
        o->linear_fused(gpu, g->qkv[l], &g->x, &attn_in, &g->qkvb);
        o->qk_norm_rope_kv(gpu, &q, &k, &v, &g->qn[l], &g->kn[l], 1e-6f, &g->pos, &g->cos_sin, GHD, GHD, true,
                           &g->kc[l], &g->vc[l], &g->m);
        o->attention(gpu, &q, &g->kc[l], &g->vc[l], &g->m, &ap, &g->attn);
        o->linear_fused(gpu, g->o[l], &g->attn, &add_to_x, &g->x);
        const linear_fuse mlp_in = {.norm_w = &g->post_norm[l], .eps = 1e-6f, .silu_mul = true, .h = &g->h,
                                    .mid = &g->gub};
        o->linear_fused(gpu, g->gu[l], &g->x, &mlp_in, &g->ab);
        o->linear_fused(gpu, g->down[l], &g->ab, &add_to_x, &g->x);
    }
    o->gather_rows(gpu, &g->x, &g->lidx, &g->sel);
    o->rms_norm(gpu, &g->sel, &g->final_norm, 1e-6f, &g->sel);
    o->linear(gpu, g->head, &g->sel, &g->logits);
}

static float *gmodel_logits(gmodel *g) {
    float *l = malloc((size_t)GS * GV * sizeof *l);
    CHECK_OK(gpu->ops->download(gpu, l, &g->logits, (size_t)GS * GV * sizeof *l));
    return l;
}

static void test_graph(void) {
    CHECK(gpu->ops->graph_begin && gpu->ops->graph_end && gpu->ops->graph_launch && gpu->ops->graph_free);
    if (!gpu->ops->graph_begin) return;
    gmodel g;
    gmodel_init(&g);
    int32_t host[GO_END];
    const size_t mbytes = GO_END * sizeof(int32_t);

    /* step A eagerly (every workspace reaches its size) */
    gmodel_meta(&g, 40, host);
    CHECK_OK(gpu->ops->upload(gpu, &g.meta, host, mbytes));
    gmodel_step(&g);
    float *la = gmodel_logits(&g);

    /* record the step (nothing runs) */
    be_graph *gr = NULL;
    CHECK_OK(gpu->ops->graph_begin(gpu));
    gmodel_step(&g);
    CHECK_OK(gpu->ops->graph_end(gpu, &gr));
    float *same = gmodel_logits(&g);
    CHECK_MSG(memcmp(same, la, (size_t)GS * GV * sizeof *la) == 0, "recording a graph ran its ops");
    free(same);

    for (int rep = 0; rep < 2 && gr; rep++) {
        /* step B (new contents in the same buffers): the replay, then the same eagerly */
        gmodel_meta(&g, rep ? 100 : 17, host);
        int64_t cn = (int64_t)GNB * GBS * GNKV * GHD;
        tensor kc0 = g.kc[0];
        float *before = get(gpu, &kc0);
        CHECK_OK(gpu->ops->upload(gpu, &g.meta, host, mbytes));
        CHECK_OK(gpu->ops->graph_launch(gpu, gr));
        float *lg = gmodel_logits(&g);
        float *after = get(gpu, &kc0);
        /* only the 3 real tokens' slots changed: the padding slot (-1) wrote nothing */
        int64_t changed_rows = 0, outside = 0;
        for (int64_t r = 0; r < (int64_t)GNB * GBS; r++) {
            bool ch = memcmp(before + r * GNKV * GHD, after + r * GNKV * GHD, GNKV * GHD * sizeof(float)) != 0;
            bool real = false;
            for (int s = 0; s < GS - 1; s++) {
                int64_t slot;
                memcpy(&slot, &host[GO_SLOTS + 2 * s], sizeof slot);
                real |= slot == r;
            }
            changed_rows += ch;
            outside += ch && !real;
        }
        CHECK_MSG(changed_rows == GS - 1 && outside == 0, "graph replay: %lld cache rows changed, %lld not the step's",
                  (long long)changed_rows, (long long)outside);
        (void)cn;
        CHECK_OK(gpu->ops->upload(gpu, &g.meta, host, mbytes));
        gmodel_step(&g);
        float *le = gmodel_logits(&g);
        int64_t nan = 0, differ = 0, same_as_a = 0;
        for (int i = 0; i < GS * GV; i++) {
            nan += isnan(lg[i]) && i < (GS - 1) * GV;
            differ += memcmp(&lg[i], &le[i], sizeof *lg) != 0;
            same_as_a += lg[i] == la[i];
        }
        printf("  graph replay %d: %lld of %d logits differ from eager, %lld equal to the recording's inputs'\n", rep,
               (long long)differ, GS * GV, (long long)same_as_a);
        CHECK_MSG(nan == 0 && differ == 0, "graph replay %d vs eager: %lld NaN, %lld differ", rep, (long long)nan,
                  (long long)differ);
        CHECK_MSG(same_as_a < GS * GV / 2, "graph replay %d did not see the new inputs", rep);
        free(le);
        free(lg);
        free(before);
        free(after);
    }
    gpu->ops->graph_free(gpu, gr);
    free(la);

    /* failures while recording are reported by graph_end, and the backend stays usable */
    {
        float w9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
        tensor w = tensor_1d(DTYPE_F32, NULL, 9);
        CHECK_OK(gpu->ops->alloc(gpu, &w));
        CHECK_OK(gpu->ops->upload(gpu, &w, w9, sizeof w9));
        be_graph *bad = NULL;
        CHECK_OK(gpu->ops->graph_begin(gpu));
        gpu->ops->rms_norm(gpu, &g.x, &w, 1e-6f, &g.x);
        vllm_status st = gpu->ops->graph_end(gpu, &bad);
        CHECK_MSG(st == VLLM_ERR_BACKEND && bad == NULL && strstr(vllm_last_error(), "rms_norm"),
                  "bad op while recording: status %d: %s", st, vllm_last_error());
        CHECK_OK(gpu->ops->graph_begin(gpu));
        st = gpu->ops->upload(gpu, &w, w9, sizeof w9);
        CHECK_MSG(st != VLLM_OK, "upload while recording succeeded");
        st = gpu->ops->graph_end(gpu, &bad);
        CHECK_MSG(st == VLLM_ERR_BACKEND && strstr(vllm_last_error(), "upload"), "upload while recording: %s",
                  vllm_last_error());
        CHECK_OK(gpu->ops->graph_begin(gpu));
        st = gpu->ops->synchronize(gpu);
        CHECK_MSG(st != VLLM_OK, "synchronize while recording succeeded");
        st = gpu->ops->graph_end(gpu, &bad);
        CHECK_MSG(st == VLLM_ERR_BACKEND && strstr(vllm_last_error(), "synchronize"), "synchronize while recording: %s",
                  vllm_last_error());
        st = gpu->ops->graph_end(gpu, &bad);
        CHECK_MSG(st == VLLM_ERR_INVALID_ARG, "graph_end without graph_begin: %d", st);
        CHECK_OK(gpu->ops->synchronize(gpu));
        /* still works */
        gmodel_meta(&g, 30, host);
        CHECK_OK(gpu->ops->upload(gpu, &g.meta, host, mbytes));
        gmodel_step(&g);
        float *l2 = gmodel_logits(&g);
        int64_t nan = 0;
        for (int i = 0; i < (GS - 1) * GV; i++) nan += isnan(l2[i]);
        CHECK(nan == 0);
        free(l2);
        drop(gpu, &w);
    }
    gmodel_free(&g);
}

/* supports(): what runs natively, as a composite, or is refused (with backend_require's message) */
static void test_supports(void) {
    attn_params ap = {.scale = 0.0625f, .num_heads = 8, .num_kv_heads = 4, .head_dim = 256, .softcap = 50.0f};
    CHECK(backend_supports(gpu, BE_OP_ATTENTION, &ap) == BE_NATIVE);
    ap.head_dim = 6;
    CHECK(backend_supports(gpu, BE_OP_ATTENTION, &ap) == BE_NATIVE);
    ap.head_dim = 512;
    CHECK(backend_supports(gpu, BE_OP_ATTENTION, &ap) == BE_UNSUPPORTED);
    vllm_status st = backend_require(gpu, BE_OP_ATTENTION, &ap, "Test attention");
    CHECK_MSG(st == VLLM_ERR_UNSUPPORTED && strstr(vllm_last_error(), "'cuda'") &&
                  strstr(vllm_last_error(), "head_dim 512"),
              "%d: %s", st, vllm_last_error());
    CHECK(backend_supports(cpu, BE_OP_ATTENTION, &ap) == BE_NATIVE); /* the CPU takes up to 1024 */
    ap.head_dim = 128;
    ap.softcap = -1.0f;
    CHECK(backend_supports(gpu, BE_OP_ATTENTION, &ap) == BE_UNSUPPORTED);
    for (int a = 0; a < BE_ACT_COUNT; a++) {
        be_act act = (be_act)a;
        CHECK(backend_supports(gpu, BE_OP_ACT_MUL, &act) == BE_NATIVE);
        /* gpt-oss's clamped SwiGLU is gated only (the CPU's answer too) */
        const be_support want = act == BE_ACT_SWIGLU_OAI ? BE_UNSUPPORTED : BE_NATIVE;
        CHECK(backend_supports(gpu, BE_OP_ACTIVATION, &act) == want);
        CHECK(backend_supports(cpu, BE_OP_ACTIVATION, &act) == want);
    }
    be_act bad_act = BE_ACT_COUNT;
    CHECK(backend_supports(gpu, BE_OP_ACT_MUL, &bad_act) == BE_UNSUPPORTED);
    {   /* gpt-oss: attention sinks (with a window, with a softcap), expert biases, the clamped SwiGLU */
        const float sk[4] = {0};
        const tensor sinks = tensor_1d(DTYPE_F32, (void *)sk, 4);
        attn_params sp = {.scale = 1, .sliding_window = 128, .num_heads = 4, .num_kv_heads = 4, .head_dim = 64,
                          .sinks = &sinks};
        CHECK(backend_supports(gpu, BE_OP_ATTENTION, &sp) == BE_NATIVE);
        CHECK(backend_supports(cpu, BE_OP_ATTENTION, &sp) == BE_NATIVE);
        sp.softcap = 30.0f;
        CHECK(backend_supports(gpu, BE_OP_ATTENTION, &sp) == BE_NATIVE);
        sp.head_dim = 512;
        CHECK(backend_supports(gpu, BE_OP_ATTENTION, &sp) == BE_UNSUPPORTED);
        const moe_params bp = {.num_experts = 8, .top_k = 2, .bias = true};
        CHECK(backend_supports(gpu, BE_OP_MOE, &bp) == BE_NATIVE);
        const moe_params op = {.num_experts = 128, .top_k = 4, .act = BE_ACT_SWIGLU_OAI, .swiglu_alpha = 1.702f,
                               .swiglu_limit = 7.0f, .bias = true}; /* gpt-oss-120b's */
        CHECK(backend_supports(gpu, BE_OP_MOE, &op) == BE_NATIVE);
        CHECK(backend_supports(cpu, BE_OP_MOE, &op) == BE_NATIVE);
    }
    be_norm n = {.kind = BE_NORM_RMS_OFFSET};
    CHECK(backend_supports(gpu, BE_OP_QK_NORM_ROPE_KV, &n) == BE_NATIVE);
    CHECK(backend_supports(gpu, BE_OP_QK_NORM_ROPE_KV, NULL) == BE_NATIVE);
    n.kind = BE_NORM_LAYER;
    CHECK(backend_supports(gpu, BE_OP_NORM, &n) == BE_NATIVE);
    CHECK(backend_supports(gpu, BE_OP_QK_NORM_ROPE_KV, &n) == BE_COMPOSITE);
    tensor w = {0};
    linear_fuse gemma = {.norm_w = &w, .silu_mul = true, .act = BE_ACT_GELU_TANH, .norm_kind = BE_NORM_RMS_OFFSET};
    CHECK(backend_supports(gpu, BE_OP_LINEAR_FUSED, &gemma) == BE_NATIVE);
    linear_fuse opt = {.norm_w = &w, .norm_b = &w, .norm_kind = BE_NORM_LAYER};
    CHECK(backend_supports(gpu, BE_OP_LINEAR_FUSED, &opt) == BE_COMPOSITE);
    linear_fuse bad = {.silu_mul = true, .accumulate = true};
    CHECK(backend_supports(gpu, BE_OP_LINEAR_FUSED, &bad) == BE_UNSUPPORTED);
    CHECK(backend_supports(gpu, BE_OP_SOFTCAP, NULL) == BE_NATIVE);
}

/* ---- mixture of experts (ops_moe.cu) ----
 * moe_route on random, identical and tied logits (BF16 and F32; ids exactly, weights within 1e-5),
 * DeepSeek's routings too (V2's grouped softmax, V3's sigmoid + correction bias + groups, at the V3,
 * V2, V2-Lite and Kimi-K2 shapes, T 1 / 7 / 64),
 * moe_experts on the same ids and weights for both backends (E 8 / 64, top_k 1 / 2 / 8, T 1 / 3 / 8
 * (the expert GEMV) and 37 / 300 (the GEMMs, unless T * k <= 64), SiLU / GELU-tanh, every token on the
 * same experts, experts that get no token, repeated ids, accumulate on / off, F32 / F16 weights, F32 y,
 * strided and misaligned x, odd sizes, each path forced on the other's batches with VLLM_CUDA_MOE, 200
 * experts at 40 to 264 pairs),
 * sigmoid_gate, a bad expert id found on the device, and a decode-sized route + experts recorded as
 * a graph and replayed (equal to eager; the GEMM path refused while recording). DeepSeek's plain shared
 * experts (moe_params.num_shared): moe_route's ids / weights with the shared columns (E + j, weight 1)
 * after the routed k, and moe_experts over E routed experts plus ns sliced from a dense shared MLP (rows
 * of gate / up, strided columns of down, as block_moe.c loads them) routed on the device, against the CPU,
 * on the expert GEMV (DeepSeek-V3's decode batch of 8: 64 routed + 8 shared pairs), the grouped GEMM and
 * cuBLAS, and recorded into a graph. */

enum { MOE_RANDOM, MOE_SAME, MOE_SUBSET, MOE_REPEAT, MOE_PATTERNS };
static const char *MOE_PAT[MOE_PATTERNS] = {"random", "all tokens same experts", "some experts none", "repeated ids"};

/* A (d0, d1) I32 tensor holding x. */
static tensor put_i32_2d(backend *be, const int32_t *x, int64_t d0, int64_t d1) {
    tensor t = tensor_2d(DTYPE_I32, NULL, d0, d1);
    CHECK_OK(be->ops->alloc(be, &t));
    if (x) CHECK_OK(be->ops->upload(be, &t, x, (size_t)(d0 * d1) * 4));
    return t;
}

/* experts_create's biases in the tests: none; gate, up and down in BF16 (gpt-oss's); gate and up in F32
 * (converted on the device) with no down array (a zero down bias) */
enum { MOE_BIAS_NONE, MOE_BIAS_BF16, MOE_BIAS_F32_NO_DOWN };

/* Random experts (E, gate/up (I, D), down (D, I)) on both backends: the GPU gets them in wdt, the CPU
 * the BF16 values the GPU computes with, in F32 (*keep: the CPU's memory, which its experts view).
 * bias (MOE_BIAS_*): gate / up biases uniform in +-8 (with the default swigluoai limit 7, past it on both
 * sides), down biases in +-1, after the weights in *keep. */
static void moe_make(int E, int D, int I, dtype wdt, int bias, be_experts **ec, be_experts **eg, float **keep) {
    const int64_t per = (int64_t)I * D, n = 3 * (int64_t)E * per, nb = (int64_t)E * (2 * I + D);
    float *wh = malloc((size_t)n * sizeof *wh), *wc = malloc((size_t)(n + nb) * sizeof *wc);
    for (int64_t i = 0; i < n; i++) {
        wh[i] = round_to(wdt, rnd() * 0.1f);
        wc[i] = round_to(DTYPE_BF16, wh[i]);
    }
    /* biases: expert e's gate (I), up (I), down (D) at wc + n + e (2I + D), BF16 values (the GPU's) */
    const dtype bdt = bias == MOE_BIAS_F32_NO_DOWN ? DTYPE_F32 : DTYPE_BF16;
    float *bh = wc + n;
    for (int64_t i = 0; i < nb; i++) bh[i] = round_to(DTYPE_BF16, (i % (2 * I + D) < 2 * I ? 8.0f : 1.0f) * rnd());
    void *bb = pack(bh, nb, bdt);
    tensor *bt = malloc((size_t)E * 6 * sizeof *bt);
    const tensor **pb = malloc((size_t)E * 6 * sizeof *pb);
    for (int e = 0; e < E; e++)
        for (int m = 0; m < 3; m++) {
            const int64_t off = (int64_t)e * (2 * I + D) + (int64_t)m * I, len = m == 2 ? D : I;
            bt[m * E + e] = tensor_1d(DTYPE_F32, bh + off, len);
            bt[(3 + m) * E + e] = tensor_1d(bdt, (unsigned char *)bb + (size_t)off * dtype_size(bdt), len);
            pb[m * E + e] = &bt[m * E + e];
            pb[(3 + m) * E + e] = &bt[(3 + m) * E + e];
        }
    const bool down = bias != MOE_BIAS_F32_NO_DOWN;
    if (!down) /* the CPU: zero down biases */
        for (int64_t i = 0; i < nb; i++)
            if (i % (2 * I + D) >= 2 * I) bh[i] = 0.0f;
    const be_expert_bias bc = {.gate = pb, .up = pb + E, .down = pb + 2 * E},
                         bg = {.gate = pb + 3 * E, .up = pb + 4 * E, .down = down ? pb + 5 * E : NULL};
    void *wb = pack(wh, n, wdt);
    const size_t es = dtype_size(wdt);
    tensor *t = malloc((size_t)E * 6 * sizeof *t);
    const tensor **pt = malloc((size_t)E * 6 * sizeof *pt);
    for (int e = 0; e < E; e++)
        for (int m = 0; m < 3; m++) { /* expert e: gate, up (I, D), down (D, I), one after the other */
            const int64_t off = (3 * (int64_t)e + m) * per;
            t[m * E + e] = tensor_2d(DTYPE_F32, wc + off, m == 2 ? D : I, m == 2 ? I : D);
            t[(3 + m) * E + e] = tensor_2d(wdt, (unsigned char *)wb + (size_t)off * es, m == 2 ? D : I, m == 2 ? I : D);
        }
    for (int i = 0; i < 6 * E; i++) pt[i] = &t[i];
    *ec = *eg = NULL;
    CHECK_OK(cpu->ops->experts_create(cpu, pt, pt + E, pt + 2 * E, bias ? &bc : NULL, E, ec));
    CHECK_OK(gpu->ops->experts_create(gpu, pt + 3 * E, pt + 4 * E, pt + 5 * E, bias ? &bg : NULL, E, eg));
    free(t);
    free(pt);
    free(wb);
    free(bt);
    free(pb);
    free(bb);
    free(wh);
    *keep = wc;
}

/* ids (T, k) of pattern pat, w (T, k) positive */
static void moe_ids(int E, int k, int T, int pat, int32_t *ids, float *w) {
    int *perm = malloc((size_t)E * sizeof *perm);
    const int sub = pat == MOE_SUBSET ? (E / 4 > k ? E / 4 : k) : E; /* experts >= sub get no token */
    for (int t = 0; t < T; t++) {
        for (int e = 0; e < E; e++) perm[e] = e;
        for (int j = 0; j < k; j++) {
            int id;
            if (pat == MOE_SAME) id = E - 1 - j; /* the same k experts for every token */
            else if (pat == MOE_REPEAT) id = rnd_int(k < E ? k + 1 : E); /* with replacement: repeats */
            else {
                const int r = j + rnd_int(sub - j); /* distinct, among the first sub */
                id = perm[r];
                perm[r] = perm[j];
                perm[j] = id;
            }
            ids[t * k + j] = id;
            w[t * k + j] = (float)(0.05 + 0.95 * rnd01());
        }
    }
    free(perm);
}

typedef struct moe_case {
    int E, k, T, D, I, pat;
    be_act act;
    bool acc;
    dtype wdt, ydt;
    int xoff;             /* x is a column slice at this offset of a (T, D + xoff) buffer */
    const char *force;    /* VLLM_CUDA_MOE for the GPU's experts, or NULL */
    const char *comb;     /* VLLM_CUDA_MOE_COMBINE for them ("split": decode's down GEMV and combine apart), or NULL */
    int bias;             /* MOE_BIAS_* (gpt-oss's expert biases) */
    float alpha, limit;   /* moe_params.swiglu_alpha / _limit (act BE_ACT_SWIGLU_OAI; 0 = the defaults) */
    const char *bm;       /* VLLM_CUDA_MOE_BM for them (the grouped GEMM's tile height), or NULL */
    const char *wg;       /* VLLM_CUDA_MOE_WG for them ("0": 128-pair tiles on k_moe_mma, not wgmma), or NULL */
    const char *ks;       /* VLLM_CUDA_MOE_KS for them (the one-token expert GEMV's split-K: 1, 2, 4), or NULL */
    const char *early;    /* VLLM_CUDA_MOE_EARLY for them ("0": the down + combine reads its pairs after its wait) */
    const char *dch;      /* VLLM_CUDA_MOE_DCH for them ("0": the down + combine reads h through L2) */
    const char *dclong;   /* VLLM_CUDA_MOE_DCLONG for them ("0": the split kernels past 1024 inputs; "1": the fused
                             down + combine at any length where h fits) */
} moe_case;

static void test_moe_experts_case(const moe_case *mc) {
    const int E = mc->E, k = mc->k, T = mc->T, D = mc->D, I = mc->I;
    /* the case's measurement switches: (value, variable, label in the check's name) */
    const struct {
        const char *v, *name, *label;
    } sw[] = {{mc->force, "VLLM_CUDA_MOE", NULL},         {mc->comb, "VLLM_CUDA_MOE_COMBINE", "combine"},
              {mc->bm, "VLLM_CUDA_MOE_BM", "bm"},         {mc->ks, "VLLM_CUDA_MOE_KS", "ks"},
              {mc->early, "VLLM_CUDA_MOE_EARLY", "early"}, {mc->dch, "VLLM_CUDA_MOE_DCH", "dch"},
              {mc->dclong, "VLLM_CUDA_MOE_DCLONG", "dclong"}, {mc->wg, "VLLM_CUDA_MOE_WG", "wg"}};
    const size_t nsw = sizeof sw / sizeof *sw;
    for (size_t i = 0; i < nsw; i++)
        if (sw[i].v) setenv(sw[i].name, sw[i].v, 1);
    be_experts *ec, *eg;
    float *keep;
    moe_make(E, D, I, mc->wdt, mc->bias, &ec, &eg, &keep);
    for (size_t i = 0; i < nsw; i++)
        if (sw[i].v) unsetenv(sw[i].name);
    int32_t *ids = malloc((size_t)T * k * sizeof *ids);
    float *w = malloc((size_t)T * k * sizeof *w), *y0 = malloc((size_t)T * D * sizeof *y0), *hx;
    moe_ids(E, k, T, mc->pat, ids, w);
    for (int64_t i = 0; i < (int64_t)T * D; i++) y0[i] = round_to(DTYPE_BF16, rnd());
    tensor xc, xg;
    rand_pair(T, D + mc->xoff, 1.0f, &hx, &xc, &xg);
    tensor xvc = tensor_cols(&xc, mc->xoff, D), xvg = tensor_cols(&xg, mc->xoff, D);
    tensor ic = put_i32_2d(cpu, ids, T, k), ig = put_i32_2d(gpu, ids, T, k);
    tensor wc = put(cpu, DTYPE_F32, T, k, w), wg = put(gpu, DTYPE_F32, T, k, w);
    tensor yc = put(cpu, DTYPE_F32, T, D, y0), yg = put(gpu, mc->ydt, T, D, y0);
    if (!mc->acc) poison(&yg);
    const moe_params mp = {.num_experts = E, .top_k = k, .renormalize = true, .act = mc->act,
                           .swiglu_alpha = mc->alpha, .swiglu_limit = mc->limit, .bias = mc->bias != MOE_BIAS_NONE};
    if (ec && eg) {
        cpu->ops->moe_experts(cpu, ec, &xvc, &ic, &wc, &mp, mc->acc, &yc);
        gpu->ops->moe_experts(gpu, eg, &xvg, &ig, &wg, &mp, mc->acc, &yg);
        float *c = get(cpu, &yc), *g = get(gpu, &yg);
        char what[224];
        snprintf(what, sizeof what, "moe_experts E %d k %d T %d D %d I %d %s %s%s%s%s%s%s%s", E, k, T, D, I,
                 MOE_PAT[mc->pat], be_act_name(mc->act), mc->acc ? " acc" : "",
                 mc->wdt != DTYPE_BF16 ? " w " : "", mc->wdt != DTYPE_BF16 ? dtype_name(mc->wdt) : "",
                 mc->ydt != DTYPE_BF16 ? " y F32" : "", mc->xoff ? " x strided" : "", mc->force ? " forced " : "");
        if (mc->force) snprintf(what + strlen(what), sizeof what - strlen(what), "%s", mc->force);
        for (size_t i = 0; i < nsw; i++)
            if (sw[i].v && sw[i].label)
                snprintf(what + strlen(what), sizeof what - strlen(what), " %s %s", sw[i].label, sw[i].v);
        if (mc->bias) snprintf(what + strlen(what), sizeof what - strlen(what), " bias %s",
                               mc->bias == MOE_BIAS_BF16 ? "BF16" : "F32 no down");
        if (mc->alpha > 0 || mc->limit > 0)
            snprintf(what + strlen(what), sizeof what - strlen(what), " alpha %g limit %g", (double)mc->alpha,
                     (double)mc->limit);
        compare(what, g, c, (int64_t)T * D, REL, ELEM);
        free(c);
        free(g);
    }
    cpu->ops->experts_free(cpu, ec);
    gpu->ops->experts_free(gpu, eg);
    tensor *cs[] = {&xc, &ic, &wc, &yc}, *gs[] = {&xg, &ig, &wg, &yg};
    drop_pairs(cs, gs, 4);
    free(keep);
    free(ids);
    free(w);
    free(y0);
    free(hx);
}

enum { ROUTE_RANDOM, ROUTE_SAME, ROUTE_TIES, ROUTE_ZEROS };

static void test_moe_route_case(int E, int k, int T, bool renorm, dtype ldt, int pat) {
    float *l = malloc((size_t)T * E * sizeof *l);
    for (int t = 0; t < T; t++)
        for (int e = 0; e < E; e++)
            l[t * E + e] = pat == ROUTE_SAME && t > 0 ? l[e]
                           : pat == ROUTE_TIES       ? (float)(rnd_int(5) - 2) /* many exact ties: lower id first */
                           : pat == ROUTE_ZEROS /* -inf: p exactly 0; ~4 finite a row, fewer than k: a tie at 0 */
                               ? (e == 0 || !rnd_int(E / 4) ? (float)(rnd_int(3) - 1) : -INFINITY)
                               : round_to(DTYPE_BF16, 4.0f * rnd());
    tensor lc = put(cpu, DTYPE_F32, T, E, l), lg = put(gpu, ldt, T, E, l);
    tensor ic = put_i32_2d(cpu, NULL, T, k), ig = put_i32_2d(gpu, NULL, T, k);
    tensor wc = put(cpu, DTYPE_F32, T, k, NULL), wg = put(gpu, DTYPE_F32, T, k, NULL);
    poison(&ig);
    poison(&wg);
    const moe_params mp = {.num_experts = E, .top_k = k, .renormalize = renorm};
    cpu->ops->moe_route(cpu, &lc, &mp, &ic, &wc);
    gpu->ops->moe_route(gpu, &lg, &mp, &ig, &wg);
    int32_t *idc = malloc((size_t)T * k * 4), *idg = malloc((size_t)T * k * 4);
    CHECK_OK(cpu->ops->download(cpu, idc, &ic, (size_t)T * k * 4));
    CHECK_OK(gpu->ops->download(gpu, idg, &ig, (size_t)T * k * 4));
    int64_t off = 0, first = -1;
    for (int64_t i = 0; i < (int64_t)T * k; i++)
        if (idc[i] != idg[i]) {
            if (first < 0) first = i;
            off++;
        }
    CHECK_MSG(off == 0, "moe_route E %d k %d T %d: %lld ids differ; first at %lld: gpu %d cpu %d", E, k, T,
              (long long)off, (long long)first, first >= 0 ? idg[first] : 0, first >= 0 ? idc[first] : 0);
    float *c = get(cpu, &wc), *g = get(gpu, &wg);
    char what[128];
    snprintf(what, sizeof what, "moe_route E %d k %d T %d %s%s logits %s (ids exact, weights)", E, k, T,
             pat == ROUTE_SAME ? "same rows" : pat == ROUTE_TIES ? "ties" : pat == ROUTE_ZEROS ? "-inf" : "random",
             renorm ? " renorm" : "",
             dtype_name(ldt));
    compare(what, g, c, (int64_t)T * k, 1e-5, 1e-5);
    free(c);
    free(g);
    free(idc);
    free(idg);
    free(l);
    tensor *cs[] = {&lc, &ic, &wc}, *gs[] = {&lg, &ig, &wg};
    drop_pairs(cs, gs, 3);
}

/* DeepSeek's routings (BE_MOE_SOFTMAX_GROUPED, BE_MOE_SIGMOID_NOAUX_TC) against the CPU: ids exactly
 * (best first), weights within 1e-5. A row whose order the two backends' expf may legitimately flip
 * (two distinct choice or group scores, in double, within 1e-6 of each other among the ranks that
 * decide: the kept groups' boundary, the first k + 1 experts) is left out and counted; exact ties
 * (equal logits) stay in: both backends must take the lower id. */
static bool route_ds_near_tie(const float *l, const float *b, int E, int k, be_moe_scoring sc, int G, int kg) {
    double *c = malloc((size_t)E * sizeof *c), *v = malloc((size_t)(E + 1) * sizeof *v);
    double mx = -INFINITY, sum = 0.0;
    for (int e = 0; e < E; e++) mx = l[e] > mx ? l[e] : mx;
    for (int e = 0; e < E; e++) sum += exp(l[e] - mx);
    for (int e = 0; e < E; e++)
        c[e] = sc == BE_MOE_SIGMOID_NOAUX_TC ? 1.0 / (1.0 + exp(-(double)l[e])) + (b ? b[e] : 0.0) : exp(l[e] - mx) / sum;
    bool near = false;
    /* sorted copies, descending (insertion sort: small n) */
#define SORT_DESC(a, n)                                                                                     \
    for (int i_ = 1; i_ < (n); i_++)                                                                        \
        for (int j_ = i_; j_ > 0 && (a)[j_] > (a)[j_ - 1]; j_--) {                                          \
            double t_ = (a)[j_];                                                                            \
            (a)[j_] = (a)[j_ - 1];                                                                          \
            (a)[j_ - 1] = t_;                                                                               \
        }
#define NEAR(x, y) ((x) != (y) && fabs((x) - (y)) <= 1e-6 * (1.0 + fabs(x)))
    if (G > 1) {
        const int per = E / G;
        double *gs = malloc((size_t)G * sizeof *gs);
        for (int g = 0; g < G; g++) {
            for (int i = 0; i < per; i++) v[i] = c[g * per + i];
            SORT_DESC(v, per);
            gs[g] = sc == BE_MOE_SIGMOID_NOAUX_TC ? v[0] + v[1] : v[0];
            for (int i = 0; i + 1 < per && i < 2; i++) near |= NEAR(v[i], v[i + 1]);
        }
        double *gsort = malloc((size_t)G * sizeof *gsort);
        memcpy(gsort, gs, (size_t)G * sizeof *gs);
        SORT_DESC(gsort, G);
        if (kg < G) near |= NEAR(gsort[kg - 1], gsort[kg]);
        for (int g = 0; g < G; g++) /* the groups not kept: 0 (ties at the boundary are found above) */
            if (gs[g] < gsort[kg - 1])
                for (int i = 0; i < per; i++) c[g * per + i] = 0.0;
        free(gs);
        free(gsort);
    }
    memcpy(v, c, (size_t)E * sizeof *c);
    SORT_DESC(v, E);
    for (int j = 0; j < k && j + 1 < E; j++) near |= NEAR(v[j], v[j + 1]);
#undef NEAR
#undef SORT_DESC
    free(c);
    free(v);
    return near;
}

/* ns: moe_params.num_shared (ids / w of k + ns columns; the shared ones must be E + j with weight 1) */
static void test_moe_route_ds_ns(const char *name, int E, int k, be_moe_scoring sc, int G, int kg, bool renorm,
                                 float scale, int bias, int T, dtype ldt, int pat, int ns) {
    const int kr = k; /* the routed columns */
    k += ns;          /* the width below */
    float *l = malloc((size_t)T * E * sizeof *l), *b = malloc((size_t)E * sizeof *b);
    const dtype bdt = bias == 2 ? DTYPE_BF16 : DTYPE_F32; /* bias: 0 none, 1 F32, 2 BF16 */
    for (int e = 0; e < E; e++) b[e] = round_to(bdt, 0.5f * rnd());
    for (int t = 0; t < T; t++)
        for (int e = 0; e < E; e++)
            l[t * E + e] = pat == ROUTE_SAME && t > 0 ? l[e]
                           : pat == ROUTE_TIES       ? (float)(rnd_int(5) - 2)
                                                     : round_to(ldt, 4.0f * rnd());
    tensor lc = put(cpu, DTYPE_F32, T, E, l), lg = put(gpu, ldt, T, E, l);
    tensor bc = put(cpu, DTYPE_F32, 1, E, b), bg = put(gpu, bdt, 1, E, b);
    tensor bc1 = tensor_1d(DTYPE_F32, bc.data, E), bg1 = tensor_1d(bdt, bg.data, E);
    tensor ic = put_i32_2d(cpu, NULL, T, k), ig = put_i32_2d(gpu, NULL, T, k);
    tensor wc = put(cpu, DTYPE_F32, T, k, NULL), wg = put(gpu, DTYPE_F32, T, k, NULL);
    poison(&ig);
    poison(&wg);
    moe_params mp = {.num_experts = E, .top_k = kr, .scoring = sc, .renormalize = renorm, .num_groups = G,
                     .topk_groups = kg, .routed_scaling = scale, .score_bias = bias ? &bc1 : NULL, .num_shared = ns};
    CHECK(backend_supports(gpu, BE_OP_MOE, &mp) == BE_NATIVE);
    cpu->ops->moe_route(cpu, &lc, &mp, &ic, &wc);
    mp.score_bias = bias ? &bg1 : NULL;
    gpu->ops->moe_route(gpu, &lg, &mp, &ig, &wg);
    CHECK_OK(gpu->ops->synchronize(gpu));
    int32_t *idc = malloc((size_t)T * k * 4), *idg = malloc((size_t)T * k * 4);
    CHECK_OK(cpu->ops->download(cpu, idc, &ic, (size_t)T * k * 4));
    CHECK_OK(gpu->ops->download(gpu, idg, &ig, (size_t)T * k * 4));
    float *c = get(cpu, &wc), *g = get(gpu, &wg);
    int64_t off = 0, first = -1;
    int skipped = 0;
    int shared_bad = 0;
    for (int t = 0; t < T; t++)
        for (int j = kr; j < k; j++) shared_bad += idg[t * k + j] != E + j - kr || g[t * k + j] != 1.0f;
    CHECK_MSG(shared_bad == 0, "moe_route %s E %d k %d + %d shared T %d: %d shared columns wrong", name, E, kr, ns, T,
              shared_bad);
    for (int t = 0; t < T; t++) {
        if (route_ds_near_tie(l + (size_t)t * E, bias ? b : NULL, E, kr, sc, G, kg)) {
            skipped++;
            for (int j = 0; j < k; j++) g[t * k + j] = c[t * k + j]; /* not compared */
            continue;
        }
        for (int j = 0; j < k; j++)
            if (idc[t * k + j] != idg[t * k + j]) {
                if (first < 0) first = (int64_t)t * k + j;
                off++;
            }
    }
    CHECK_MSG(off == 0, "moe_route %s E %d k %d groups %d/%d T %d: %lld ids differ; first at %lld: gpu %d cpu %d", name,
              E, k, G, kg, T, (long long)off, (long long)first, first >= 0 ? idg[first] : 0,
              first >= 0 ? idc[first] : 0);
    char what[160];
    snprintf(what, sizeof what, "moe_route %s E %d k %d%s grp %d/%d T %d %s%s%s %s (ids, w)%s", name, E, kr,
             ns ? (ns == 1 ? " + 1 shared" : " + 2+ shared") : "", G, kg, T,
             pat == ROUTE_SAME ? "same" : pat == ROUTE_TIES ? "ties" : "rand", renorm ? " renorm" : "",
             bias ? (bias == 2 ? " bias bf16" : " bias") : "", dtype_name(ldt), skipped ? " near ties skipped" : "");
    compare(what, g, c, (int64_t)T * k, 1e-5, 1e-5);
    CHECK_MSG(skipped * 4 <= T + 3, "%s: %d of %d rows near ties", what, skipped, T);
    free(c);
    free(g);
    free(idc);
    free(idg);
    free(l);
    free(b);
    tensor *cs[] = {&lc, &bc, &ic, &wc}, *gs[] = {&lg, &bg, &ig, &wg};
    drop_pairs(cs, gs, 4);
}

/* Qwen2-MoE's gated shared experts riding after the top k (moe_params.shared_gate): logits (T, E + 1), the last
 * column the gate's logit; the shared columns E + j with weight sigmoid(that logit), the routed ones as without */
static void test_moe_route_shared_gate(int E, int k, int ns, int T, dtype ldt) {
    const int kw = k + ns;
    float *l = malloc((size_t)T * (E + 1) * sizeof *l);
    for (int i = 0; i < T * (E + 1); i++) l[i] = round_to(ldt, 4.0f * rnd());
    tensor lc = put(cpu, DTYPE_F32, T, E + 1, l), lg = put(gpu, ldt, T, E + 1, l);
    tensor ic = put_i32_2d(cpu, NULL, T, kw), ig = put_i32_2d(gpu, NULL, T, kw);
    tensor wc = put(cpu, DTYPE_F32, T, kw, NULL), wg = put(gpu, DTYPE_F32, T, kw, NULL);
    poison(&ig);
    poison(&wg);
    const moe_params mp = {.num_experts = E, .top_k = k, .renormalize = true, .num_shared = ns, .shared_gate = true};
    CHECK(backend_supports(gpu, BE_OP_MOE, &mp) == BE_NATIVE);
    cpu->ops->moe_route(cpu, &lc, &mp, &ic, &wc);
    gpu->ops->moe_route(gpu, &lg, &mp, &ig, &wg);
    CHECK_OK(gpu->ops->synchronize(gpu));
    int32_t *idc = malloc((size_t)T * kw * 4), *idg = malloc((size_t)T * kw * 4);
    CHECK_OK(cpu->ops->download(cpu, idc, &ic, (size_t)T * kw * 4));
    CHECK_OK(gpu->ops->download(gpu, idg, &ig, (size_t)T * kw * 4));
    float *c = get(cpu, &wc), *g = get(gpu, &wg);
    int bad = 0, idoff = 0;
    for (int t = 0; t < T; t++) {
        const float sg = 1.0f / (1.0f + expf(-l[t * (E + 1) + E]));
        for (int j = 0; j < kw; j++) idoff += idc[t * kw + j] != idg[t * kw + j];
        for (int j = k; j < kw; j++)
            bad += idg[t * kw + j] != E + j - k || fabsf(g[t * kw + j] - sg) > 1e-6f || c[t * kw + j] != sg;
    }
    CHECK_MSG(bad == 0 && idoff == 0, "moe_route shared_gate E %d k %d + %d T %d %s: %d shared columns wrong, %d ids "
              "differ", E, k, ns, T, dtype_name(ldt), bad, idoff);
    char what[128];
    snprintf(what, sizeof what, "moe_route E %d k %d + %d gated shared T %d %s (w)", E, k, ns, T, dtype_name(ldt));
    compare(what, g, c, (int64_t)T * kw, 1e-5, 1e-5);
    /* refused: a shared gate without shared experts */
    const moe_params none = {.num_experts = E, .top_k = k, .renormalize = true, .shared_gate = true};
    CHECK(backend_supports(gpu, BE_OP_MOE, &none) == BE_UNSUPPORTED);
    free(c);
    free(g);
    free(idc);
    free(idg);
    free(l);
    tensor *cs[] = {&lc, &ic, &wc}, *gs[] = {&lg, &ig, &wg};
    drop_pairs(cs, gs, 3);
}

static void test_moe_route_ds_case(const char *name, int E, int k, be_moe_scoring sc, int G, int kg, bool renorm,
                                   float scale, int bias, int T, dtype ldt, int pat) {
    test_moe_route_ds_ns(name, E, k, sc, G, kg, renorm, scale, bias, T, ldt, pat, 0);
}

/* moe_experts with ns plain shared experts (DeepSeek's): E routed experts of (I, D) and a dense shared MLP of
 * ns I given to experts_create as experts E .. E + ns - 1 (gate / up row slices, down column slices rows ns I
 * apart: what block_moe.c hands over), routed by moe_route (softmax top k, scaled by 2.5, + the shared
 * columns) on each backend, then moe_experts (accumulate when acc) on the device against the CPU. force:
 * VLLM_CUDA_MOE for the GPU's experts, or NULL. */
static void test_moe_shared_case(int E, int k, int ns, int T, int D, int I, bool acc, const char *force) {
    const int Et = E + ns, kw = k + ns;
    const int64_t per = (int64_t)I * D, Is = (int64_t)ns * I, nr = 3 * (int64_t)E * per, n = nr + 3 * Is * D;
    float *wh = malloc((size_t)n * sizeof *wh);
    for (int64_t i = 0; i < n; i++) wh[i] = round_to(DTYPE_BF16, rnd() * 0.1f);
    void *wb = pack(wh, n, DTYPE_BF16);
    tensor *t = malloc((size_t)Et * 6 * sizeof *t);
    const tensor **pt = malloc((size_t)Et * 6 * sizeof *pt);
    for (int b = 0; b < 2; b++) { /* b 0: the CPU's F32 views, 1: the GPU's BF16 ones */
        const dtype dt = b ? DTYPE_BF16 : DTYPE_F32;
        unsigned char *base = b ? (unsigned char *)wb : (unsigned char *)wh;
        const size_t es = dtype_size(dt);
        for (int e = 0; e < E; e++)
            for (int m = 0; m < 3; m++)
                t[(3 * b + m) * Et + e] = tensor_2d(dt, base + (size_t)((3 * (int64_t)e + m) * per) * es, m == 2 ? D : I,
                                                    m == 2 ? I : D);
        const tensor sg = tensor_2d(dt, base + (size_t)nr * es, Is, D), su = tensor_2d(dt, base + (size_t)(nr + Is * D) * es, Is, D),
                     sd = tensor_2d(dt, base + (size_t)(nr + 2 * Is * D) * es, D, Is);
        for (int j = 0; j < ns; j++) {
            t[(3 * b + 0) * Et + E + j] = tensor_rows(&sg, (int64_t)j * I, I);
            t[(3 * b + 1) * Et + E + j] = tensor_rows(&su, (int64_t)j * I, I);
            t[(3 * b + 2) * Et + E + j] = tensor_cols(&sd, (int64_t)j * I, I);
        }
    }
    for (int i = 0; i < 6 * Et; i++) pt[i] = &t[i];
    be_experts *ec = NULL, *eg = NULL;
    CHECK_OK(cpu->ops->experts_create(cpu, pt, pt + Et, pt + 2 * Et, NULL, Et, &ec));
    if (force) setenv("VLLM_CUDA_MOE", force, 1);
    CHECK_OK(gpu->ops->experts_create(gpu, pt + 3 * Et, pt + 4 * Et, pt + 5 * Et, NULL, Et, &eg));
    if (force) unsetenv("VLLM_CUDA_MOE");
    float *l = malloc((size_t)T * E * sizeof *l), *y0 = malloc((size_t)T * D * sizeof *y0), *hx;
    for (int i = 0; i < T * E; i++) l[i] = round_to(DTYPE_BF16, 4.0f * rnd());
    for (int64_t i = 0; i < (int64_t)T * D; i++) y0[i] = round_to(DTYPE_BF16, rnd());
    tensor xc, xg;
    rand_pair(T, D, 1.0f, &hx, &xc, &xg);
    tensor lc = put(cpu, DTYPE_F32, T, E, l), lg = put(gpu, DTYPE_BF16, T, E, l);
    tensor ic = put_i32_2d(cpu, NULL, T, kw), ig = put_i32_2d(gpu, NULL, T, kw);
    tensor wc = put(cpu, DTYPE_F32, T, kw, NULL), wg = put(gpu, DTYPE_F32, T, kw, NULL);
    tensor yc = put(cpu, DTYPE_F32, T, D, y0), yg = put(gpu, DTYPE_BF16, T, D, y0);
    if (!acc) poison(&yg);
    const moe_params mp = {.num_experts = E, .top_k = k, .scoring = BE_MOE_SOFTMAX_GROUPED, .act = BE_ACT_SILU,
                           .routed_scaling = 2.5f, .num_shared = ns};
    CHECK(backend_supports(gpu, BE_OP_MOE, &mp) == BE_NATIVE);
    if (ec && eg) {
        cpu->ops->moe_route(cpu, &lc, &mp, &ic, &wc);
        cpu->ops->moe_experts(cpu, ec, &xc, &ic, &wc, &mp, acc, &yc);
        gpu->ops->moe_route(gpu, &lg, &mp, &ig, &wg);
        gpu->ops->moe_experts(gpu, eg, &xg, &ig, &wg, &mp, acc, &yg);
        CHECK_OK(gpu->ops->synchronize(gpu));
        float *c = get(cpu, &yc), *g = get(gpu, &yg);
        char what[160];
        snprintf(what, sizeof what, "moe_experts E %d k %d + %d shared T %d D %d I %d%s%s%s", E, k, ns, T, D, I,
                 acc ? " acc" : "", force ? " forced " : "", force ? force : "");
        compare(what, g, c, (int64_t)T * D, REL, ELEM);
        free(c);
        free(g);
    }
    cpu->ops->experts_free(cpu, ec);
    gpu->ops->experts_free(gpu, eg);
    tensor *cs[] = {&xc, &lc, &ic, &wc, &yc}, *gs[] = {&xg, &lg, &ig, &wg, &yg};
    drop_pairs(cs, gs, 5);
    free(t);
    free(pt);
    free(wb);
    free(wh);
    free(l);
    free(y0);
    free(hx);
}

static void test_sigmoid_gate_case(int T, int D, dtype xdt, dtype gdt) {
    float *hx, *hg = malloc((size_t)T * 3 * sizeof *hg);
    for (int i = 0; i < T * 3; i++) hg[i] = round_to(DTYPE_BF16, 4.0f * rnd());
    hx = malloc((size_t)T * D * sizeof *hx);
    for (int64_t i = 0; i < (int64_t)T * D; i++) hx[i] = round_to(DTYPE_BF16, rnd());
    tensor xc = put(cpu, DTYPE_F32, T, D, hx), xg = put(gpu, xdt, T, D, hx);
    tensor gc = put(cpu, DTYPE_F32, T, 3, hg), gg = put(gpu, gdt, T, 3, hg);
    tensor gvc = tensor_cols(&gc, 1, 1), gvg = tensor_cols(&gg, 1, 1); /* g (T, 1), row stride 3 */
    cpu->ops->sigmoid_gate(cpu, &xc, &gvc);
    gpu->ops->sigmoid_gate(gpu, &xg, &gvg);
    float *c = get(cpu, &xc), *g = get(gpu, &xg);
    char what[96];
    snprintf(what, sizeof what, "sigmoid_gate T %d D %d x %s g %s", T, D, dtype_name(xdt), dtype_name(gdt));
    compare(what, g, c, (int64_t)T * D, REL, ELEM);
    free(c);
    free(g);
    free(hx);
    free(hg);
    tensor *cs[] = {&xc, &gc}, *gs[] = {&xg, &gg};
    drop_pairs(cs, gs, 2);
}

/* A decode-sized route + experts recorded and replayed on new inputs equals the same eagerly. */
/* T tokens: 4 (the expert GEMV's fixed buffers) or, large, more than 64 pairs (the grouped GEMM on the
 * scratch experts_reserve sized; with DeepSeek-V3's top 8 + 1 shared expert at 8 tokens, 72 pairs: the expert
 * GEMV on that scratch); top k of 8 (16 when k > 4) routed experts and ns shared ones (num_shared) */
static void test_moe_graph(int T, bool large, int k, int ns) {
    if (!gpu->ops->graph_begin) return;
    const int E = k > 4 ? 16 : 8, D = 256, I = 128, kw = k + ns;
    be_experts *ec, *eg;
    float *keep;
    moe_make(E + ns, D, I, DTYPE_BF16, MOE_BIAS_NONE, &ec, &eg, &keep);
    if (large && eg) {
        CHECK_OK(gpu->ops->experts_reserve(gpu, eg, (int64_t)T * kw));
        CHECK(gpu->graph_moe_pairs >= T * kw);
    }
    float *l = malloc((size_t)T * E * sizeof *l), *hx = malloc((size_t)T * D * sizeof *hx);
    tensor lg = put(gpu, DTYPE_BF16, T, E, NULL), xg = put(gpu, DTYPE_BF16, T, D, NULL);
    tensor ig = put_i32_2d(gpu, NULL, T, kw), wg = put(gpu, DTYPE_F32, T, kw, NULL);
    tensor yg = put(gpu, DTYPE_BF16, T, D, NULL);
    const moe_params mp = {.num_experts = E, .top_k = k, .renormalize = true, .act = BE_ACT_SILU, .num_shared = ns};
    const size_t lbytes = (size_t)T * E * 2, xbytes = (size_t)T * D * 2;
    void *lb = NULL, *xb = NULL;
    /* new logits and x into the same buffers */
#define MOE_INPUTS()                                                                 \
    do {                                                                             \
        for (int i = 0; i < T * E; i++) l[i] = 4.0f * rnd();                         \
        for (int i = 0; i < T * D; i++) hx[i] = rnd();                               \
        free(lb);                                                                    \
        free(xb);                                                                    \
        lb = pack(l, T * E, DTYPE_BF16);                                             \
        xb = pack(hx, T * D, DTYPE_BF16);                                            \
        CHECK_OK(gpu->ops->upload(gpu, &lg, lb, lbytes));                            \
        CHECK_OK(gpu->ops->upload(gpu, &xg, xb, xbytes));                            \
    } while (0)
#define MOE_STEP()                                                                   \
    do {                                                                             \
        gpu->ops->moe_route(gpu, &lg, &mp, &ig, &wg);                                \
        gpu->ops->moe_experts(gpu, eg, &xg, &ig, &wg, &mp, false, &yg);              \
    } while (0)
    MOE_INPUTS();
    MOE_STEP(); /* eagerly first: the scratch reaches its size */
    float *ya = get(gpu, &yg);
    be_graph *gr = NULL;
    CHECK_OK(gpu->ops->graph_begin(gpu));
    MOE_STEP();
    CHECK_OK(gpu->ops->graph_end(gpu, &gr));
    for (int rep = 0; rep < 2 && gr; rep++) {
        MOE_INPUTS();
        CHECK_OK(gpu->ops->graph_launch(gpu, gr));
        float *yr = get(gpu, &yg);
        MOE_STEP();
        float *ye = get(gpu, &yg);
        int64_t differ = 0, same_as_a = 0, nan = 0;
        for (int i = 0; i < T * D; i++) {
            differ += memcmp(&yr[i], &ye[i], sizeof *yr) != 0;
            same_as_a += yr[i] == ya[i];
            nan += isnan(yr[i]);
        }
        printf("  moe graph replay %d (%d tokens, top %d + %d shared): %lld of %d outputs differ from eager\n", rep, T, k,
               ns, (long long)differ, T * D);
        CHECK_MSG(nan == 0 && differ == 0 && same_as_a < T * D / 2, "moe graph replay %d: %lld NaN, %lld differ, %lld stale",
                  rep, (long long)nan, (long long)differ, (long long)same_as_a);
        free(yr);
        free(ye);
    }
    gpu->ops->graph_free(gpu, gr);
#undef MOE_STEP
#undef MOE_INPUTS
    /* the cuBLAS path reads the counts on the host: refused while recording */
    if (!large && !ns) {
        const int T2 = 40;
        be_experts *ec2, *eg2;
        float *keep2;
        setenv("VLLM_CUDA_MOE", "gemm", 1);
        moe_make(E, D, I, DTYPE_BF16, MOE_BIAS_NONE, &ec2, &eg2, &keep2);
        unsetenv("VLLM_CUDA_MOE");
        int32_t *ids = malloc((size_t)T2 * k * sizeof *ids);
        float *w = malloc((size_t)T2 * k * sizeof *w);
        moe_ids(E, k, T2, MOE_RANDOM, ids, w);
        tensor x2 = put(gpu, DTYPE_BF16, T2, D, NULL), y2 = put(gpu, DTYPE_BF16, T2, D, NULL);
        tensor i2 = put_i32_2d(gpu, ids, T2, k), w2 = put(gpu, DTYPE_F32, T2, k, w);
        CHECK_OK(gpu->ops->zero(gpu, &x2));
        be_graph *bad = NULL;
        CHECK_OK(gpu->ops->graph_begin(gpu));
        gpu->ops->moe_experts(gpu, eg2, &x2, &i2, &w2, &mp, false, &y2);
        vllm_status st = gpu->ops->graph_end(gpu, &bad);
        CHECK_MSG(st == VLLM_ERR_BACKEND && bad == NULL && strstr(vllm_last_error(), "moe_experts"),
                  "moe_experts' cuBLAS path while recording: status %d: %s", st, vllm_last_error());
        CHECK_OK(gpu->ops->synchronize(gpu));
        tensor *ts[] = {&x2, &y2, &i2, &w2};
        for (int i = 0; i < 4; i++) drop(gpu, ts[i]);
        cpu->ops->experts_free(cpu, ec2);
        gpu->ops->experts_free(gpu, eg2);
        free(keep2);
        free(ids);
        free(w);
    }
    tensor *ts[] = {&lg, &xg, &ig, &wg, &yg};
    for (int i = 0; i < 5; i++) drop(gpu, ts[i]);
    cpu->ops->experts_free(cpu, ec);
    gpu->ops->experts_free(gpu, eg);
    free(keep);
    free(ya);
    free(l);
    free(hx);
    free(lb);
    free(xb);
}

static void test_moe(void) {
    CHECK(gpu->ops->experts_create && gpu->ops->experts_free && gpu->ops->moe_route && gpu->ops->moe_experts &&
          gpu->ops->sigmoid_gate);
    if (!gpu->ops->moe_experts) return;
    if (!cpu->ops->moe_experts || !cpu->ops->moe_route || !cpu->ops->sigmoid_gate) {
        printf("  moe: the CPU reference has no MoE ops: skipped\n");
        return;
    }
    /* routing */
    const int Es[2] = {8, 64}, ks[3] = {1, 2, 8}, Ts[5] = {1, 3, 8, 37, 300};
    for (int ei = 0; ei < 2; ei++)
        for (int ki = 0; ki < 3; ki++)
            for (int ti = 0; ti < 5; ti += 2) {
                const int n = ei * 15 + ki * 5 + ti;
                test_moe_route_case(Es[ei], ks[ki], Ts[ti], n % 2 == 0, n % 3 == 0 ? DTYPE_F32 : DTYPE_BF16,
                                    n % 3 == 1 ? ROUTE_TIES : ROUTE_RANDOM);
                test_moe_route_case(Es[ei], ks[ki], Ts[ti], n % 2 == 1, DTYPE_BF16, ROUTE_SAME);
            }
    test_moe_route_case(128, 8, 5, true, DTYPE_BF16, ROUTE_RANDOM);  /* Qwen3-MoE's E */
    test_moe_route_case(512, 4, 3, false, DTYPE_F32, ROUTE_TIES);    /* the largest E */
    test_moe_route_case(33, 33, 2, true, DTYPE_BF16, ROUTE_RANDOM);  /* k = E */
    test_moe_route_case(64, 8, 6, false, DTYPE_F32, ROUTE_ZEROS);    /* zero scores tied past the finite ones */
    test_moe_route_case(256, 8, 4, true, DTYPE_BF16, ROUTE_ZEROS);   /* Qwen3.5-MoE's E */
    /* DeepSeek's routings at the released shapes, T = 1, 7, 64: V3 / R1 (sigmoid + correction bias, 8
     * groups, 4 kept, top 8, renormalised, x 2.5), V2 (softmax, 8 groups, 3 kept, top 6, x 16), V2-Lite
     * (greedy softmax, top 6), Kimi-K2 (384 experts, one group, top 8, x 2.827), and odd ones */
    const int dsT[3] = {1, 7, 64};
    for (int ti = 0; ti < 3; ti++) {
        const int T = dsT[ti];
        const dtype ldt = ti == 1 ? DTYPE_F32 : DTYPE_BF16;
        const int pat = ti == 2 ? ROUTE_RANDOM : ti == 1 ? ROUTE_TIES : ROUTE_RANDOM;
        test_moe_route_ds_case("V3", 256, 8, BE_MOE_SIGMOID_NOAUX_TC, 8, 4, true, 2.5f, 1, T, ldt, ROUTE_RANDOM);
        test_moe_route_ds_case("V3", 256, 8, BE_MOE_SIGMOID_NOAUX_TC, 8, 4, true, 2.5f, 0, T, DTYPE_BF16, pat);
        test_moe_route_ds_case("V2", 160, 6, BE_MOE_SOFTMAX_GROUPED, 8, 3, false, 16.0f, 0, T, ldt, ROUTE_RANDOM);
        test_moe_route_ds_case("V2", 160, 6, BE_MOE_SOFTMAX_GROUPED, 8, 3, true, 0.0f, 0, T, DTYPE_BF16, pat);
        test_moe_route_ds_case("V2-Lite", 64, 6, BE_MOE_SOFTMAX_GROUPED, 1, 1, false, 1.0f, 0, T, ldt, pat);
        test_moe_route_ds_case("Kimi-K2", 384, 8, BE_MOE_SIGMOID_NOAUX_TC, 1, 1, true, 2.827f, 2, T, ldt,
                               ROUTE_RANDOM);
        test_moe_route_ds_case("Kimi-K2", 384, 8, BE_MOE_SIGMOID_NOAUX_TC, 0, 0, false, 0.0f, 0, T, DTYPE_BF16,
                               ROUTE_SAME);
    }
    test_moe_route_ds_case("groups of 4", 64, 4, BE_MOE_SIGMOID_NOAUX_TC, 16, 2, false, 0.0f, 1, 37, DTYPE_BF16,
                           ROUTE_RANDOM);
    test_moe_route_ds_case("32 groups", 512, 8, BE_MOE_SOFTMAX_GROUPED, 32, 5, true, 0.0f, 0, 9, DTYPE_BF16,
                           ROUTE_TIES);
    test_moe_route_ds_case("k = kept", 32, 8, BE_MOE_SIGMOID_NOAUX_TC, 4, 1, true, 1.5f, 1, 9, DTYPE_F32,
                           ROUTE_RANDOM);
    test_moe_route_ds_case("k 1", 16, 1, BE_MOE_SIGMOID_NOAUX_TC, 8, 1, true, 0.0f, 2, 9, DTYPE_BF16, ROUTE_TIES);
    test_moe_route_ds_case("softmax x2", 64, 8, BE_MOE_SOFTMAX, 0, 0, true, 2.0f, 0, 9, DTYPE_BF16, ROUTE_RANDOM);
    /* with DeepSeek's plain shared experts after the routed k (V3: 1, V2 / V2-Lite: 2); 33 columns (a second
     * pass of the writing lanes); the widest, top_k + shared = CU_MOE_MAX_K */
    for (int ti = 0; ti < 3; ti++) {
        test_moe_route_ds_ns("V3", 256, 8, BE_MOE_SIGMOID_NOAUX_TC, 8, 4, true, 2.5f, 1, dsT[ti], DTYPE_BF16,
                             ROUTE_RANDOM, 1);
        test_moe_route_ds_ns("V2", 160, 6, BE_MOE_SOFTMAX_GROUPED, 8, 3, false, 16.0f, 0, dsT[ti], DTYPE_F32,
                             ROUTE_RANDOM, 2);
        test_moe_route_ds_ns("V2-Lite", 64, 6, BE_MOE_SOFTMAX_GROUPED, 0, 0, false, 1.0f, 0, dsT[ti], DTYPE_BF16,
                             ROUTE_TIES, 2);
    }
    test_moe_route_ds_ns("33 shared", 16, 2, BE_MOE_SOFTMAX, 0, 0, true, 0.0f, 0, 5, DTYPE_BF16, ROUTE_RANDOM, 33);
    /* Qwen2-MoE's gated shared experts (Qwen3.5-35B-A3B's shape: 256 + 1; Qwen1.5-MoE's: 60 + 4), 33 tokens */
    test_moe_route_shared_gate(256, 8, 1, 1, DTYPE_BF16);
    test_moe_route_shared_gate(60, 4, 4, 33, DTYPE_F32);
    test_moe_route_shared_gate(8, 2, 2, 5, DTYPE_BF16);
    enum { MAX_K = 64, MAX_E = 512 }; /* cuda_internal.h's CU_MOE_MAX_K, CU_MOE_MAX_E */
    test_moe_route_ds_ns("widest", 128, 8, BE_MOE_SOFTMAX, 0, 0, true, 0.0f, 0, 3, DTYPE_BF16, ROUTE_RANDOM, MAX_K - 8);
    {   /* refused: top_k + shared past CU_MOE_MAX_K, experts + shared past CU_MOE_MAX_E */
        const moe_params wide = {.num_experts = 128, .top_k = 8, .num_shared = MAX_K - 7},
                         many = {.num_experts = MAX_E, .top_k = 8, .num_shared = 1};
        CHECK(backend_supports(gpu, BE_OP_MOE, &wide) == BE_UNSUPPORTED);
        CHECK(backend_supports(gpu, BE_OP_MOE, &many) == BE_UNSUPPORTED);
        tensor lg = put(gpu, DTYPE_BF16, 2, 128, NULL), ig = put_i32_2d(gpu, NULL, 2, MAX_K + 1),
               wg = put(gpu, DTYPE_F32, 2, MAX_K + 1, NULL);
        gpu->ops->moe_route(gpu, &lg, &wide, &ig, &wg);
        CHECK(gpu->ops->synchronize(gpu) != VLLM_OK);
        CHECK_MSG(strstr(vllm_last_error(), "shared") != NULL, "%s", vllm_last_error());
        drop(gpu, &lg);
        drop(gpu, &ig);
        drop(gpu, &wg);
    }
    {   /* 33 groups: refused (a lane per group), by supports() and the op */
        const moe_params g33 = {.num_experts = 66, .top_k = 2, .scoring = BE_MOE_SOFTMAX_GROUPED, .num_groups = 33,
                                .topk_groups = 2};
        CHECK(backend_supports(gpu, BE_OP_MOE, &g33) == BE_UNSUPPORTED);
        tensor lg = put(gpu, DTYPE_BF16, 2, 66, NULL), ig = put_i32_2d(gpu, NULL, 2, 2), wg = put(gpu, DTYPE_F32, 2, 2, NULL);
        gpu->ops->moe_route(gpu, &lg, &g33, &ig, &wg);
        CHECK(gpu->ops->synchronize(gpu) != VLLM_OK);
        CHECK_MSG(strstr(vllm_last_error(), "32") != NULL, "%s", vllm_last_error());
        const moe_params sb = {.num_experts = 8, .top_k = 2, .scoring = BE_MOE_SOFTMAX, .score_bias = &lg};
        CHECK(backend_supports(gpu, BE_OP_MOE, &sb) == BE_UNSUPPORTED);
        drop(gpu, &lg);
        drop(gpu, &ig);
        drop(gpu, &wg);
    }
    /* the experts: every (E, k, T), patterns, activations and accumulate cycling */
    int n = 0;
    for (int ei = 0; ei < 2; ei++)
        for (int ki = 0; ki < 3; ki++)
            for (int ti = 0; ti < 5; ti++, n++) {
                moe_case mc = {.E = Es[ei], .k = ks[ki], .T = Ts[ti], .D = 256, .I = 128, .pat = n % MOE_PATTERNS,
                               .act = (n / 2) % 2 ? BE_ACT_GELU_TANH : BE_ACT_SILU, .acc = n % 3 == 1,
                               .wdt = DTYPE_BF16, .ydt = DTYPE_BF16};
                test_moe_experts_case(&mc);
            }
    /* every pattern on both paths */
    for (int pat = 0; pat < MOE_PATTERNS; pat++) {
        moe_case a = {.E = 64, .k = 8, .T = 8, .D = 256, .I = 128, .pat = pat, .act = BE_ACT_SILU, .acc = pat % 2,
                      .wdt = DTYPE_BF16, .ydt = DTYPE_BF16};
        test_moe_experts_case(&a);
        a.T = 37;
        a.acc = !a.acc;
        test_moe_experts_case(&a);
    }
    moe_case x[] = {
        /* F32 / F16 checkpoints converted on the device; F32 y */
        {.E = 8, .k = 2, .T = 5, .D = 256, .I = 128, .pat = MOE_RANDOM, .wdt = DTYPE_F32, .ydt = DTYPE_BF16},
        {.E = 8, .k = 2, .T = 50, .D = 256, .I = 128, .pat = MOE_RANDOM, .wdt = DTYPE_F16, .ydt = DTYPE_F32},
        {.E = 8, .k = 2, .T = 3, .D = 256, .I = 128, .pat = MOE_SAME, .acc = true, .wdt = DTYPE_BF16, .ydt = DTYPE_F32},
        /* x a column slice: aligned (the GEMV), misaligned (the GEMMs at decode size) */
        {.E = 8, .k = 2, .T = 4, .D = 256, .I = 128, .pat = MOE_RANDOM, .wdt = DTYPE_BF16, .ydt = DTYPE_BF16, .xoff = 8},
        {.E = 8, .k = 2, .T = 4, .D = 256, .I = 128, .pat = MOE_RANDOM, .wdt = DTYPE_BF16, .ydt = DTYPE_BF16, .xoff = 3},
        /* sizes not a multiple of 8 (the GEMMs) */
        {.E = 8, .k = 2, .T = 2, .D = 100, .I = 36, .pat = MOE_RANDOM, .act = BE_ACT_GELU_TANH, .wdt = DTYPE_BF16,
         .ydt = DTYPE_BF16},
        /* a Qwen3-MoE-like row length, several chunks per lane */
        {.E = 8, .k = 2, .T = 1, .D = 1024, .I = 384, .pat = MOE_RANDOM, .wdt = DTYPE_BF16, .ydt = DTYPE_BF16},
        {.E = 8, .k = 2, .T = 8, .D = 1024, .I = 384, .pat = MOE_SAME, .acc = true, .wdt = DTYPE_BF16, .ydt = DTYPE_BF16},
        {.E = 8, .k = 2, .T = 40, .D = 1024, .I = 384, .pat = MOE_RANDOM, .wdt = DTYPE_BF16, .ydt = DTYPE_BF16},
        /* each path forced on the other's batches: the GEMV with ~37 tokens per expert (5 passes of 8) */
        {.E = 8, .k = 8, .T = 37, .D = 256, .I = 128, .pat = MOE_RANDOM, .act = BE_ACT_GELU_TANH, .wdt = DTYPE_BF16,
         .ydt = DTYPE_BF16, .force = "gemv"},
        {.E = 64, .k = 2, .T = 3, .D = 256, .I = 128, .pat = MOE_SUBSET, .acc = true, .wdt = DTYPE_BF16,
         .ydt = DTYPE_BF16, .force = "gemm"},
        {.E = 64, .k = 8, .T = 300, .D = 256, .I = 128, .pat = MOE_SAME, .wdt = DTYPE_BF16, .ydt = DTYPE_BF16,
         .force = "gemv"},
        /* the grouped GEMM (the default past 64 pairs): forced on a decode batch; sizes a multiple of 8 but not
         * of its 64-wide K steps or 64 / 128-wide output tiles; experts with several pair blocks; F32 y, accumulate */
        {.E = 8, .k = 2, .T = 3, .D = 256, .I = 128, .pat = MOE_RANDOM, .wdt = DTYPE_BF16, .ydt = DTYPE_BF16,
         .force = "grouped"},
        {.E = 16, .k = 4, .T = 70, .D = 264, .I = 136, .pat = MOE_RANDOM, .act = BE_ACT_GELU_TANH, .wdt = DTYPE_BF16,
         .ydt = DTYPE_BF16},
        {.E = 8, .k = 2, .T = 300, .D = 512, .I = 256, .pat = MOE_RANDOM, .acc = true, .wdt = DTYPE_BF16,
         .ydt = DTYPE_F32},
        {.E = 64, .k = 8, .T = 300, .D = 256, .I = 128, .pat = MOE_SUBSET, .wdt = DTYPE_BF16, .ydt = DTYPE_BF16},
        {.E = 128, .k = 8, .T = 64, .D = 512, .I = 256, .pat = MOE_RANDOM, .wdt = DTYPE_BF16, .ydt = DTYPE_BF16},
        /* its tile heights (k_moe_mma: 32, 64, 128 pairs from the pairs per expert): above, 4 to 37 pairs an expert
         * (32, 64); here 300 an expert (128: two full tiles and a partial one each, outputs 192 = 3 x 64, inputs 256
         * and 192 = 3 K steps) and 50 (64, with outputs and inputs a multiple of 8 past the tiles: 200 = 3 x 64 + 8,
         * 264 = 2 x 128 + 8) */
        {.E = 4, .k = 2, .T = 600, .D = 256, .I = 192, .pat = MOE_RANDOM, .acc = true, .wdt = DTYPE_BF16,
         .ydt = DTYPE_F32},
        {.E = 16, .k = 8, .T = 100, .D = 264, .I = 200, .pat = MOE_RANDOM, .act = BE_ACT_SWIGLU_OAI, .wdt = DTYPE_BF16,
         .ydt = DTYPE_BF16, .bias = MOE_BIAS_BF16},
        /* ... every tile height forced (VLLM_CUDA_MOE_BM) on shapes whose default is another */
        {.E = 4, .k = 2, .T = 600, .D = 256, .I = 192, .pat = MOE_RANDOM, .wdt = DTYPE_BF16, .ydt = DTYPE_BF16,
         .bm = "32"},
        {.E = 16, .k = 8, .T = 100, .D = 264, .I = 200, .pat = MOE_RANDOM, .act = BE_ACT_SWIGLU_OAI, .acc = true,
         .wdt = DTYPE_BF16, .ydt = DTYPE_F32, .bias = MOE_BIAS_BF16, .bm = "128"},
        {.E = 16, .k = 4, .T = 70, .D = 264, .I = 136, .pat = MOE_SUBSET, .wdt = DTYPE_BF16, .ydt = DTYPE_BF16,
         .bm = "64"},
        /* 128-pair tiles run on wgmma (k_moe_wg) on sm_90a: above, and a prefill-like call (256 pairs an expert,
         * 8 K steps); k_moe_mma's own 128-pair tiles under VLLM_CUDA_MOE_WG=0 */
        {.E = 16, .k = 4, .T = 1024, .D = 512, .I = 256, .pat = MOE_RANDOM, .wdt = DTYPE_BF16, .ydt = DTYPE_BF16},
        /* more pairs than k_moe_permute keeps in registers (MP_KEEP tiles of 512: 4,096), so its later tiles reload
         * their ids: 5,600 pairs (random; repeated ids) */
        {.E = 64, .k = 8, .T = 700, .D = 256, .I = 128, .pat = MOE_RANDOM, .wdt = DTYPE_BF16, .ydt = DTYPE_BF16},
        {.E = 128, .k = 8, .T = 700, .D = 256, .I = 128, .pat = MOE_REPEAT, .acc = true, .wdt = DTYPE_BF16,
         .ydt = DTYPE_F32},
        {.E = 4, .k = 2, .T = 600, .D = 256, .I = 192, .pat = MOE_RANDOM, .acc = true, .wdt = DTYPE_BF16,
         .ydt = DTYPE_F32, .wg = "0"},
        {.E = 16, .k = 8, .T = 100, .D = 264, .I = 200, .pat = MOE_RANDOM, .act = BE_ACT_SWIGLU_OAI, .wdt = DTYPE_BF16,
         .ydt = DTYPE_BF16, .bias = MOE_BIAS_BF16, .bm = "128", .wg = "0"},
        /* gpt-oss: expert biases and the clamped SwiGLU (gate / up biases in +-8: values past the limit on both
         * sides) on the expert GEMV (up to 64 pairs), the grouped GEMM (more) and cuBLAS (forced; unaligned) */
        {.E = 8, .k = 2, .T = 3, .D = 256, .I = 128, .pat = MOE_RANDOM, .act = BE_ACT_SWIGLU_OAI, .wdt = DTYPE_BF16,
         .ydt = DTYPE_BF16, .bias = MOE_BIAS_BF16},
        {.E = 32, .k = 4, .T = 1, .D = 512, .I = 256, .pat = MOE_RANDOM, .act = BE_ACT_SWIGLU_OAI, .acc = true,
         .wdt = DTYPE_BF16, .ydt = DTYPE_F32, .bias = MOE_BIAS_BF16},
        {.E = 16, .k = 4, .T = 16, .D = 256, .I = 128, .pat = MOE_REPEAT, .act = BE_ACT_SWIGLU_OAI, .wdt = DTYPE_BF16,
         .ydt = DTYPE_BF16, .bias = MOE_BIAS_F32_NO_DOWN, .alpha = 1.0f, .limit = 0.5f},
        {.E = 8, .k = 2, .T = 5, .D = 256, .I = 128, .pat = MOE_SAME, .act = BE_ACT_SILU, .wdt = DTYPE_BF16,
         .ydt = DTYPE_BF16, .bias = MOE_BIAS_BF16}, /* biases with another activation */
        {.E = 16, .k = 4, .T = 70, .D = 264, .I = 136, .pat = MOE_RANDOM, .act = BE_ACT_SWIGLU_OAI, .wdt = DTYPE_BF16,
         .ydt = DTYPE_BF16, .bias = MOE_BIAS_BF16},
        {.E = 8, .k = 2, .T = 300, .D = 512, .I = 256, .pat = MOE_SUBSET, .act = BE_ACT_SWIGLU_OAI, .acc = true,
         .wdt = DTYPE_BF16, .ydt = DTYPE_F32, .bias = MOE_BIAS_F32_NO_DOWN, .alpha = 2.5f, .limit = 3.0f},
        {.E = 32, .k = 4, .T = 100, .D = 256, .I = 128, .pat = MOE_RANDOM, .act = BE_ACT_GELU_TANH, .wdt = DTYPE_F32,
         .ydt = DTYPE_BF16, .bias = MOE_BIAS_BF16},
        {.E = 8, .k = 2, .T = 3, .D = 256, .I = 128, .pat = MOE_RANDOM, .act = BE_ACT_SWIGLU_OAI, .wdt = DTYPE_BF16,
         .ydt = DTYPE_BF16, .force = "grouped", .bias = MOE_BIAS_BF16},
        {.E = 8, .k = 8, .T = 37, .D = 256, .I = 128, .pat = MOE_RANDOM, .act = BE_ACT_SWIGLU_OAI, .wdt = DTYPE_BF16,
         .ydt = DTYPE_BF16, .force = "gemv", .bias = MOE_BIAS_BF16},
        {.E = 16, .k = 2, .T = 40, .D = 256, .I = 128, .pat = MOE_RANDOM, .act = BE_ACT_SWIGLU_OAI, .acc = true,
         .wdt = DTYPE_BF16, .ydt = DTYPE_BF16, .force = "gemm", .bias = MOE_BIAS_BF16},
        {.E = 8, .k = 2, .T = 4, .D = 100, .I = 36, .pat = MOE_RANDOM, .act = BE_ACT_SWIGLU_OAI, .wdt = DTYPE_BF16,
         .ydt = DTYPE_BF16, .bias = MOE_BIAS_F32_NO_DOWN, .limit = 1.0f},
        /* the expert GEMV and its permutation with 200 experts (more than a warp's lanes, several words of
         * ids), 256 and 264 pairs (forced), repeated ids within one token's pass */
        {.E = 200, .k = 8, .T = 8, .D = 64, .I = 32, .pat = MOE_RANDOM, .wdt = DTYPE_BF16, .ydt = DTYPE_BF16},
        {.E = 200, .k = 8, .T = 5, .D = 64, .I = 32, .pat = MOE_SUBSET, .acc = true, .wdt = DTYPE_BF16,
         .ydt = DTYPE_F32},
        {.E = 200, .k = 32, .T = 8, .D = 64, .I = 32, .pat = MOE_RANDOM, .act = BE_ACT_GELU_TANH, .wdt = DTYPE_BF16,
         .ydt = DTYPE_BF16, .force = "gemv"},
        {.E = 200, .k = 8, .T = 33, .D = 64, .I = 32, .pat = MOE_RANDOM, .wdt = DTYPE_BF16, .ydt = DTYPE_BF16,
         .force = "gemv"},
        {.E = 16, .k = 8, .T = 8, .D = 64, .I = 32, .pat = MOE_REPEAT, .acc = true, .wdt = DTYPE_BF16,
         .ydt = DTYPE_BF16},
        /* decode's fused down + combine (k_moe_down_comb) at its edges: 33 to 64 tokens of top 1 (a lane's second
         * token), inputs of 1000 (one pass, its last chunks partly idle; 1400 takes the split kernels), a
         * Qwen3-30B-A3B-like row (I 768), F32 y; and the split kernels forced (VLLM_CUDA_MOE_COMBINE=split) */
        {.E = 16, .k = 1, .T = 64, .D = 128, .I = 64, .pat = MOE_RANDOM, .acc = true, .wdt = DTYPE_BF16,
         .ydt = DTYPE_F32},
        {.E = 16, .k = 1, .T = 40, .D = 128, .I = 64, .pat = MOE_SAME, .wdt = DTYPE_BF16, .ydt = DTYPE_BF16},
        {.E = 8, .k = 2, .T = 3, .D = 136, .I = 1000, .pat = MOE_RANDOM, .acc = true, .wdt = DTYPE_BF16,
         .ydt = DTYPE_BF16},
        {.E = 8, .k = 2, .T = 3, .D = 136, .I = 1400, .pat = MOE_RANDOM, .wdt = DTYPE_BF16, .ydt = DTYPE_BF16},
        {.E = 32, .k = 8, .T = 1, .D = 512, .I = 768, .pat = MOE_RANDOM, .acc = true, .wdt = DTYPE_BF16,
         .ydt = DTYPE_BF16},
        /* one token's gate|up GEMV over rows of 2048 (k_moe_gemv<2, 1, 4, 4>: two passes of 128 chunks) */
        {.E = 16, .k = 8, .T = 1, .D = 2048, .I = 256, .pat = MOE_RANDOM, .wdt = DTYPE_BF16, .ydt = DTYPE_BF16},
        {.E = 16, .k = 4, .T = 1, .D = 1032, .I = 136, .pat = MOE_REPEAT, .act = BE_ACT_SWIGLU_OAI, .acc = true,
         .wdt = DTYPE_BF16, .ydt = DTYPE_F32, .bias = MOE_BIAS_BF16},
        /* a last CTA of fewer than 8 rows (I 100) at D 2048; rows of 4096; V2-Lite's I 1408 at one token (the split
         * kernels: past the fused kernel's one pass) */
        {.E = 16, .k = 8, .T = 1, .D = 2048, .I = 100, .pat = MOE_RANDOM, .acc = true, .wdt = DTYPE_BF16,
         .ydt = DTYPE_BF16},
        {.E = 8, .k = 2, .T = 1, .D = 4096, .I = 64, .pat = MOE_RANDOM, .wdt = DTYPE_BF16, .ydt = DTYPE_BF16},
        {.E = 16, .k = 8, .T = 1, .D = 256, .I = 1408, .pat = MOE_RANDOM, .acc = true, .wdt = DTYPE_BF16,
         .ydt = DTYPE_BF16},
        /* one token's GEMVs split along K (k_moe_gemv's KS: gv_pick_ks takes 2 or 4 on the small grids above),
         * each split forced, on the fused down + combine and the split kernels, rows of 129 chunks (D 1032: ragged
         * splits of 65 + 64 and 33 + 33 + 33 + 30) */
        {.E = 16, .k = 4, .T = 1, .D = 1032, .I = 136, .pat = MOE_REPEAT, .act = BE_ACT_SWIGLU_OAI, .acc = true,
         .wdt = DTYPE_BF16, .ydt = DTYPE_F32, .bias = MOE_BIAS_BF16, .ks = "1"},
        {.E = 16, .k = 4, .T = 1, .D = 1032, .I = 136, .pat = MOE_RANDOM, .wdt = DTYPE_BF16, .ydt = DTYPE_BF16,
         .ks = "2", .comb = "split"},
        {.E = 16, .k = 8, .T = 1, .D = 1032, .I = 104, .pat = MOE_RANDOM, .acc = true, .wdt = DTYPE_BF16,
         .ydt = DTYPE_BF16, .ks = "4"},
        {.E = 8, .k = 2, .T = 1, .D = 264, .I = 1400, .pat = MOE_RANDOM, .act = BE_ACT_SWIGLU_OAI, .wdt = DTYPE_BF16,
         .ydt = DTYPE_BF16, .bias = MOE_BIAS_BF16, .ks = "4", .comb = "split"},
        {.E = 32, .k = 8, .T = 1, .D = 512, .I = 768, .pat = MOE_RANDOM, .wdt = DTYPE_BF16, .ydt = DTYPE_BF16,
         .ks = "1"},
        /* ... and the down + combine reading its pairs after its wait (VLLM_CUDA_MOE_EARLY=0), one token and four */
        {.E = 32, .k = 8, .T = 1, .D = 512, .I = 768, .pat = MOE_RANDOM, .acc = true, .wdt = DTYPE_BF16,
         .ydt = DTYPE_F32, .early = "0"},
        {.E = 16, .k = 4, .T = 4, .D = 264, .I = 136, .pat = MOE_REPEAT, .wdt = DTYPE_BF16, .ydt = DTYPE_BF16,
         .early = "0"},
        /* one token reads the ids directly (no permutation: pair j is position j): top 4 of 4 experts with repeats
         * (ids drawn with replacement), on the fused and the split kernels */
        {.E = 4, .k = 4, .T = 1, .D = 128, .I = 64, .pat = MOE_REPEAT, .acc = true, .wdt = DTYPE_BF16,
         .ydt = DTYPE_F32},
        {.E = 4, .k = 4, .T = 1, .D = 128, .I = 64, .pat = MOE_REPEAT, .wdt = DTYPE_BF16, .ydt = DTYPE_BF16,
         .comb = "split"},
        /* the down + combine reading h through L2 (VLLM_CUDA_MOE_DCH=0; from shared memory otherwise, as above
         * where N x I BF16 fit 48 KB), one token and 40; past 48 KB (64 pairs of 1000) the L2 reads */
        {.E = 32, .k = 8, .T = 1, .D = 512, .I = 768, .pat = MOE_RANDOM, .acc = true, .wdt = DTYPE_BF16,
         .ydt = DTYPE_F32, .dch = "0"},
        {.E = 16, .k = 1, .T = 40, .D = 128, .I = 64, .pat = MOE_SAME, .wdt = DTYPE_BF16, .ydt = DTYPE_BF16,
         .dch = "0"},
        {.E = 16, .k = 8, .T = 8, .D = 136, .I = 1000, .pat = MOE_RANDOM, .acc = true, .wdt = DTYPE_BF16,
         .ydt = DTYPE_BF16},
        /* more down + combine shapes: from shared memory (one token, two passes of 1408 with repeats; 8 tokens),
         * through L2, and with biases past one pass */
        {.E = 16, .k = 8, .T = 1, .D = 256, .I = 1408, .pat = MOE_REPEAT, .acc = true, .wdt = DTYPE_BF16,
         .ydt = DTYPE_BF16},
        {.E = 16, .k = 8, .T = 8, .D = 136, .I = 1000, .pat = MOE_RANDOM, .wdt = DTYPE_BF16, .ydt = DTYPE_F32},
        {.E = 32, .k = 8, .T = 1, .D = 512, .I = 776, .pat = MOE_RANDOM, .acc = true, .wdt = DTYPE_BF16,
         .ydt = DTYPE_F32, .dch = "0"},
        {.E = 8, .k = 4, .T = 1, .D = 264, .I = 2880, .pat = MOE_REPEAT, .act = BE_ACT_SWIGLU_OAI, .wdt = DTYPE_BF16,
         .ydt = DTYPE_F32, .bias = MOE_BIAS_BF16, .dclong = "1"},
        /* the fused down + combine past 1024 inputs: by default up to two passes (DeepSeek-V2-Lite's 1408, three
         * tokens of 1400), VLLM_CUDA_MOE_DCLONG=1 any length (gpt-oss's 2880 with biases), =0 the split kernels
         * (each split-K) */
        {.E = 16, .k = 8, .T = 1, .D = 256, .I = 1408, .pat = MOE_RANDOM, .acc = true, .wdt = DTYPE_BF16,
         .ydt = DTYPE_BF16},
        {.E = 8, .k = 4, .T = 1, .D = 264, .I = 2880, .pat = MOE_REPEAT, .act = BE_ACT_SWIGLU_OAI, .wdt = DTYPE_BF16,
         .ydt = DTYPE_F32, .bias = MOE_BIAS_BF16, .dclong = "1"},
        {.E = 8, .k = 2, .T = 3, .D = 136, .I = 1400, .pat = MOE_RANDOM, .wdt = DTYPE_BF16, .ydt = DTYPE_BF16},
        {.E = 16, .k = 8, .T = 1, .D = 256, .I = 1408, .pat = MOE_RANDOM, .acc = true, .wdt = DTYPE_BF16,
         .ydt = DTYPE_F32, .dclong = "0"},
        {.E = 16, .k = 4, .T = 1, .D = 1032, .I = 136, .pat = MOE_REPEAT, .wdt = DTYPE_BF16, .ydt = DTYPE_BF16,
         .ks = "2", .comb = "split"},
        {.E = 8, .k = 2, .T = 1, .D = 264, .I = 1400, .pat = MOE_RANDOM, .act = BE_ACT_SWIGLU_OAI, .wdt = DTYPE_BF16,
         .ydt = DTYPE_BF16, .bias = MOE_BIAS_BF16, .ks = "4", .dclong = "0"},
        /* one token over more row blocks than the 528 resident CTAs of 132 SMs: each split-K, biases, repeated ids,
         * 64 pairs */
        {.E = 32, .k = 8, .T = 1, .D = 512, .I = 768, .pat = MOE_RANDOM, .acc = true, .wdt = DTYPE_BF16,
         .ydt = DTYPE_F32},
        {.E = 16, .k = 8, .T = 1, .D = 2048, .I = 768, .pat = MOE_REPEAT, .wdt = DTYPE_BF16, .ydt = DTYPE_BF16,
         .ks = "2"},
        {.E = 16, .k = 8, .T = 1, .D = 1032, .I = 776, .pat = MOE_RANDOM, .act = BE_ACT_SWIGLU_OAI, .acc = true,
         .wdt = DTYPE_BF16, .ydt = DTYPE_BF16, .bias = MOE_BIAS_BF16, .ks = "4"},
        {.E = 128, .k = 64, .T = 1, .D = 256, .I = 256, .pat = MOE_REPEAT, .wdt = DTYPE_BF16, .ydt = DTYPE_F32},
        /* and the split kernels forced (VLLM_CUDA_MOE_COMBINE=split) */
        {.E = 32, .k = 4, .T = 2, .D = 512, .I = 256, .pat = MOE_RANDOM, .act = BE_ACT_SWIGLU_OAI, .wdt = DTYPE_BF16,
         .ydt = DTYPE_F32, .bias = MOE_BIAS_BF16, .comb = "split"},
        {.E = 16, .k = 8, .T = 8, .D = 64, .I = 32, .pat = MOE_REPEAT, .acc = true, .wdt = DTYPE_BF16,
         .ydt = DTYPE_BF16, .comb = "split"},
    };
    for (size_t i = 0; i < sizeof x / sizeof *x; i++) test_moe_experts_case(&x[i]);

    /* DeepSeek's plain shared experts among the experts: decode batches on the expert GEMV (1 and 8 tokens of
     * a V3-like top 8 + 1 shared: 9 and 72 pairs, the latter past the fixed buffers), 2 shared (V2-Lite), the
     * grouped GEMM (37, 300 tokens), cuBLAS (forced; D, I not multiples of 8 too), the GEMV forced on a
     * prefill batch (the shared experts' 40 tokens in 5 passes) */
    test_moe_shared_case(16, 8, 1, 1, 256, 128, false, NULL);
    test_moe_shared_case(16, 8, 1, 8, 256, 128, true, NULL);
    test_moe_shared_case(64, 6, 2, 4, 512, 128, false, NULL);
    test_moe_shared_case(64, 6, 2, 37, 256, 128, true, NULL);
    test_moe_shared_case(8, 2, 1, 300, 256, 128, false, NULL);
    test_moe_shared_case(8, 2, 2, 20, 256, 128, true, "gemm");
    test_moe_shared_case(8, 2, 1, 6, 100, 36, false, NULL);
    test_moe_shared_case(16, 4, 1, 40, 256, 128, false, "gemv");

    /* sigmoid_gate */
    test_sigmoid_gate_case(1, 256, DTYPE_BF16, DTYPE_BF16);
    test_sigmoid_gate_case(5, 200, DTYPE_BF16, DTYPE_F32);
    test_sigmoid_gate_case(33, 2048, DTYPE_F32, DTYPE_BF16);
    test_sigmoid_gate_case(2, 5000, DTYPE_BF16, DTYPE_BF16); /* rows past one batch of CU_ROW_BATCH loads a thread */

    /* an expert id out of range: found on the device, named at synchronize */
    {
        be_experts *ec, *eg;
        float *keep;
        moe_make(8, 64, 32, DTYPE_BF16, MOE_BIAS_NONE, &ec, &eg, &keep);
        int32_t ids[4] = {1, 2, 8, 0};
        float w[4] = {0.5f, 0.5f, 0.5f, 0.5f};
        tensor xg = put(gpu, DTYPE_BF16, 2, 64, NULL), yg = put(gpu, DTYPE_BF16, 2, 64, NULL);
        tensor ig = put_i32_2d(gpu, ids, 2, 2), wg = put(gpu, DTYPE_F32, 2, 2, w);
        CHECK_OK(gpu->ops->zero(gpu, &xg));
        const moe_params mp = {.num_experts = 8, .top_k = 2};
        gpu->ops->moe_experts(gpu, eg, &xg, &ig, &wg, &mp, false, &yg);
        expect_device_error("moe_experts");
        /* ... and at one token (no permutation: the expert GEMV reads the ids), above and below the range, on the
         * fused down + combine and the split kernels */
        const int32_t bad1[2][2] = {{3, 8}, {-1, 2}};
        for (int c = 0; c < 4; c++) {
            be_experts *c1 = NULL, *g1 = eg;
            float *keep1 = NULL;
            if (c >= 2) { /* at creation: the split kernels (VLLM_CUDA_MOE_COMBINE=split) */
                setenv("VLLM_CUDA_MOE_COMBINE", "split", 1);
                moe_make(8, 64, 32, DTYPE_BF16, MOE_BIAS_NONE, &c1, &g1, &keep1);
                unsetenv("VLLM_CUDA_MOE_COMBINE");
            }
            tensor x1 = tensor_rows(&xg, 0, 1), y1 = tensor_rows(&yg, 0, 1), w1 = tensor_rows(&wg, 0, 1);
            tensor i1 = put_i32_2d(gpu, bad1[c % 2], 1, 2);
            gpu->ops->moe_experts(gpu, g1, &x1, &i1, &w1, &mp, false, &y1);
            expect_device_error("moe_experts");
            drop(gpu, &i1);
            if (c1) {
                cpu->ops->experts_free(cpu, c1);
                gpu->ops->experts_free(gpu, g1);
                free(keep1);
            }
        }
        /* refused on the host: more experts than the kernels take */
        const moe_params big = {.num_experts = 600, .top_k = 2};
        tensor lg = put(gpu, DTYPE_BF16, 2, 600, NULL);
        gpu->ops->moe_route(gpu, &lg, &big, &ig, &wg);
        CHECK(gpu->ops->synchronize(gpu) != VLLM_OK);
        CHECK_MSG(strstr(vllm_last_error(), "moe_route") != NULL, "%s", vllm_last_error());
        tensor *ts[] = {&xg, &yg, &ig, &wg, &lg};
        for (int i = 0; i < 5; i++) drop(gpu, ts[i]);
        cpu->ops->experts_free(cpu, ec);
        gpu->ops->experts_free(gpu, eg);
        free(keep);
    }

    test_moe_graph(4, false, 2, 0);
    test_moe_graph(100, true, 2, 0);
    test_moe_graph(4, false, 2, 1);
    test_moe_graph(8, true, 8, 1);

    /* supports(): Qwen3-30B-A3B's 128 experts / top 8 natively; more than the kernels hold is refused */
    const moe_params mp = {.num_experts = 128, .top_k = 8, .renormalize = true};
    CHECK(backend_supports(gpu, BE_OP_MOE, &mp) == BE_NATIVE);
    const moe_params big = {.num_experts = 1024, .top_k = 8, .renormalize = true};
    CHECK(backend_supports(gpu, BE_OP_MOE, &big) == BE_UNSUPPORTED);
    const moe_params wide = {.num_experts = 256, .top_k = 65};
    CHECK(backend_supports(gpu, BE_OP_MOE, &wide) == BE_UNSUPPORTED);
    CHECK(backend_supports(gpu, BE_OP_MOE, NULL) == BE_UNSUPPORTED);
}

/* ---- dummy weights: import and linear_create write a dummy arena's values (tensor/dummy.h) on the device ---- */
static void test_dummy_fill(void) {
    CHECK(gpu->dummy_fill && !cpu->dummy_fill);
    dummy_arena *a = dummy_arena_create(dummy_seed(5));
    CHECK(a != NULL);
    if (!a) return;
    uint64_t seed, off;
    const dtype dts[3] = {DTYPE_BF16, DTYPE_F16, DTYPE_F32};
    for (int di = 0; di < 3; di++) { /* a strided view starting 3 elements into its allocation */
        const dtype dt = dts[di];
        const size_t es = dtype_size(dt);
        const int64_t rows = 37, cols = 100, stride = 130;
        char *p = dummy_arena_take(a, (size_t)(rows * stride + 8) * es);
        CHECK(p && dummy_lookup(p, &seed, &off));
        if (!p) break;
        tensor v = tensor_2d(dt, p + 3 * es, rows, cols), g;
        v.row_stride = stride;
        CHECK_OK(gpu->ops->import(gpu, &v, &g));
        float *got = get(gpu, &g);
        int bad = 0;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++)
                bad += got[r * cols + c] != round_to(dt, dummy_value(seed, off / es + 3 + (uint64_t)(r * stride + c)));
        CHECK_MSG(bad == 0, "dummy import %s: %d of %lld values differ", dtype_name(dt), bad, (long long)(rows * cols));
        printf("  dummy import %-4s (%lld, %lld) stride %lld: %d values differ\n", dtype_name(dt), (long long)rows,
               (long long)cols, (long long)stride, bad);
        free(got);
        drop(gpu, &g);
    }
    /* linear_create over an arena weight against the CPU's over the same values made on the host */
    const int out = 300, in = 256, T = 5;
    char *p = dummy_arena_take(a, (size_t)out * in * 2);
    CHECK(p && dummy_lookup(p, &seed, &off));
    if (p) {
        float *hw = malloc((size_t)out * in * sizeof *hw);
        for (int64_t i = 0; i < (int64_t)out * in; i++) hw[i] = round_to(DTYPE_BF16, dummy_value(seed, off / 2 + (uint64_t)i));
        tensor wc = tensor_2d(DTYPE_F32, hw, out, in), wg = tensor_2d(DTYPE_BF16, p, out, in);
        const tensor *wcs[1] = {&wc}, *wgs[1] = {&wg};
        be_linear *lc = NULL, *lg = NULL;
        CHECK_OK(cpu->ops->linear_create(cpu, wcs, NULL, 1, &lc));
        CHECK_OK(gpu->ops->linear_create(gpu, wgs, NULL, 1, &lg));
        float *hx;
        tensor xc, xg;
        rand_pair(T, in, 1.0f, &hx, &xc, &xg);
        tensor yc = put(cpu, DTYPE_F32, T, out, NULL), yg = put(gpu, DTYPE_F32, T, out, NULL);
        if (lc && lg) {
            cpu->ops->linear(cpu, lc, &xc, &yc);
            gpu->ops->linear(gpu, lg, &xg, &yg);
            float *c = get(cpu, &yc), *g = get(gpu, &yg);
            compare("linear over dummy weights", g, c, (int64_t)T * out, 2e-2, 2e-2);
            free(c);
            free(g);
        }
        cpu->ops->linear_free(cpu, lc);
        gpu->ops->linear_free(gpu, lg);
        tensor *cs[] = {&xc, &yc}, *gs[] = {&xg, &yg};
        drop_pairs(cs, gs, 2);
        free(hx);
        free(hw);
    }
    dummy_arena_destroy(a);
}

/* ---- linear attention (ops_linear_attn.cu) ----
 * One varlen batch as the engine builds it: sequences of 1, 9, 40, 0 and 3 tokens, a padding sequence
 * (slot -1), some continuing from their slot's state and some starting from zeros, in a pool whose other
 * slots must stay as they were; inputs as column slices of one projection (strided), the conv in place.
 * causal_conv1d (K 4 and 2), gdn_gating, gated_delta_rule (d_k / d_v 16 / 16, 128 / 128 with H_v = 3 H_k,
 * 64 / 48: a partial column tile; F32 and BF16 states), rms_norm_gated (in place) and sigmoid_mul against
 * the CPU reference: outputs and the whole pools. A slot outside the pool is found on the device. */

enum { LA_S = 6, LA_SLOTS = 9 };
static const int LA_LENS[LA_S] = {1, 9, 40, 0, 3, 1};
static const int LA_LONG[LA_S] = {1, 150, 64, 0, 65, 1}; /* chunks of 64 (the chunked kernels), partial ones */
static const int LA_SLOT[LA_S] = {3, 1, 7, 2, 5, -1};
static const int LA_INIT[LA_S] = {1, 0, 1, 1, 0, 0};

typedef struct la_pair {
    linear_attn_meta c, g;
    tensor cq, gq, cs, gs, ci, gi; /* query_start_loc, slots, init on each backend */
    int T;
} la_pair;

static void la_meta_make(la_pair *p, const int *lens) {
    int32_t qsl[LA_S + 1] = {0};
    int mx = 0;
    for (int s = 0; s < LA_S; s++) qsl[s + 1] = qsl[s] + lens[s], mx = lens[s] > mx ? lens[s] : mx;
    p->T = qsl[LA_S];
    p->cq = put_i32(cpu, qsl, LA_S + 1), p->gq = put_i32(gpu, qsl, LA_S + 1);
    p->cs = put_i32(cpu, LA_SLOT, LA_S), p->gs = put_i32(gpu, LA_SLOT, LA_S);
    p->ci = put_i32(cpu, LA_INIT, LA_S), p->gi = put_i32(gpu, LA_INIT, LA_S);
    p->c = (linear_attn_meta){.num_seqs = LA_S, .num_tokens = p->T, .max_query_len = mx, .query_start_loc = p->cq,
                              .state_slots = p->cs, .has_initial_state = p->ci};
    p->g = p->c;
    p->g.query_start_loc = p->gq;
    p->g.state_slots = p->gs;
    p->g.has_initial_state = p->gi;
}

static void la_meta_free(la_pair *p) {
    tensor *c[] = {&p->cq, &p->cs, &p->ci}, *g[] = {&p->gq, &p->gs, &p->gi};
    drop_pairs(c, g, 3);
}

/* A state pool of n elements (dims d0.. as given) on both backends, random, in dtype dt. */
static void la_pool(dtype dt, int ndim, const int64_t *shape, float scale, tensor *c, tensor *g) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    float *h = malloc((size_t)n * sizeof *h);
    for (int64_t i = 0; i < n; i++) h[i] = round_to(dt, scale * rnd());
    *c = tensor_make(dt, NULL, ndim, shape);
    *g = tensor_make(dt, NULL, ndim, shape);
    CHECK_OK(cpu->ops->alloc(cpu, c));
    CHECK_OK(gpu->ops->alloc(gpu, g));
    void *b = pack(h, n, dt);
    CHECK_OK(cpu->ops->upload(cpu, c, b, (size_t)n * dtype_size(dt)));
    CHECK_OK(gpu->ops->upload(gpu, g, b, (size_t)n * dtype_size(dt)));
    free(b);
    free(h);
}

static void la_compare(const char *what, const tensor *g, const tensor *c, double rel, double elem) {
    float *hg = get(gpu, g), *hc = get(cpu, c);
    compare(what, hg, hc, tensor_numel(c), rel, elem);
    free(hg);
    free(hc);
}

static void test_conv_case(int C, int K, dtype sdt, const int *lens, bool in_place) {
    la_pair m;
    la_meta_make(&m, lens);
    const int T = m.T, W = C + 5; /* x: columns 3 .. 3 + C of a (T, W) projection */
    float *hx = malloc((size_t)T * W * sizeof *hx), *hw = malloc((size_t)C * K * sizeof *hw);
    for (int i = 0; i < T * W; i++) hx[i] = round_to(DTYPE_BF16, rnd());
    for (int i = 0; i < C * K; i++) hw[i] = round_to(DTYPE_BF16, 0.7f * rnd());
    tensor xc = put(cpu, DTYPE_F32, T, W, hx), xg = put(gpu, DTYPE_BF16, T, W, hx);
    tensor wc = put(cpu, DTYPE_BF16, C, K, hw), wg = put(gpu, DTYPE_BF16, C, K, hw);
    tensor bc = put(cpu, DTYPE_F32, 1, C, hw), bg = put(gpu, DTYPE_F32, 1, C, hw); /* a bias: w's first values */
    bc = tensor_1d(DTYPE_F32, bc.data, C), bg = tensor_1d(DTYPE_F32, bg.data, C);
    const int64_t ps[3] = {LA_SLOTS, C, K - 1};
    tensor pc, pg;
    la_pool(sdt, 3, ps, 1.0f, &pc, &pg);
    tensor vc = tensor_cols(&xc, 3, C), vg = tensor_cols(&xg, 3, C);
    tensor oc = put(cpu, DTYPE_F32, T, C, NULL), og = put(gpu, DTYPE_BF16, T, C, NULL); /* out of place */
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        cpu->ops->causal_conv1d(cpu, &vc, &wc, with_bias ? &bc : NULL, true, &pc, &m.c, in_place ? &vc : &oc);
        gpu->ops->causal_conv1d(gpu, &vg, &wg, with_bias ? &bg : NULL, true, &pg, &m.g, in_place ? &vg : &og);
        char what[112];
        snprintf(what, sizeof what, "causal_conv1d C %d K %d T %d state %s%s (%s)", C, K, T, dtype_name(sdt),
                 with_bias ? " bias" : "", in_place ? "in place" : "out of place");
        if (in_place) la_compare(what, &xg, &xc, REL, ELEM);
        else la_compare(what, &og, &oc, REL, ELEM);
        snprintf(what, sizeof what, "causal_conv1d C %d K %d: the conv pool", C, K);
        la_compare(what, &pg, &pc, REL, ELEM);
    }
    /* a slot outside the pool: found on the device */
    {
        int32_t bad[LA_S];
        memcpy(bad, LA_SLOT, sizeof bad);
        bad[2] = LA_SLOTS;
        tensor sg = put_i32(gpu, bad, LA_S);
        linear_attn_meta mb = m.g;
        mb.state_slots = sg;
        gpu->ops->causal_conv1d(gpu, &vg, &wg, NULL, true, &pg, &mb, &vg);
        expect_device_error("state slot");
        drop(gpu, &sg);
    }
    free(hx);
    free(hw);
    tensor *cs[] = {&xc, &wc, &pc, &oc}, *gs[] = {&xg, &wg, &pg, &og};
    drop_pairs(cs, gs, 4);
    bc = tensor_2d(DTYPE_F32, bc.data, 1, C), bg = tensor_2d(DTYPE_F32, bg.data, 1, C);
    drop(cpu, &bc);
    drop(gpu, &bg);
    la_meta_free(&m);
}

static void test_gdr_case(int Hk, int Hv, int dk, int dv, dtype sdt, const int *lens, const char *mode) {
    la_pair m;
    la_meta_make(&m, lens);
    if (mode) setenv("VLLM_CUDA_GDN", mode, 1);
    else unsetenv("VLLM_CUDA_GDN");
    const int T = m.T, kd = Hk * dk, vd = Hv * dv, W = 2 * kd + 2 * vd + 2 * Hv; /* q | k | v | z | b | a */
    float *hp = malloc((size_t)T * W * sizeof *hp);
    for (int i = 0; i < T * W; i++) hp[i] = round_to(DTYPE_BF16, 2.0f * rnd());
    tensor pc = put(cpu, DTYPE_F32, T, W, hp), pg = put(gpu, DTYPE_BF16, T, W, hp);
    float hA[64], hd[64];
    for (int h = 0; h < Hv; h++) hA[h] = round_to(DTYPE_BF16, -1.0f + 0.5f * rnd()), hd[h] = round_to(DTYPE_BF16, rnd());
    tensor Ac = put(cpu, DTYPE_BF16, 1, Hv, hA), Ag = put(gpu, DTYPE_BF16, 1, Hv, hA);
    tensor dc = put(cpu, DTYPE_BF16, 1, Hv, hd), dg = put(gpu, DTYPE_BF16, 1, Hv, hd);
    tensor A1c = tensor_1d(DTYPE_BF16, Ac.data, Hv), A1g = tensor_1d(DTYPE_BF16, Ag.data, Hv);
    tensor d1c = tensor_1d(DTYPE_BF16, dc.data, Hv), d1g = tensor_1d(DTYPE_BF16, dg.data, Hv);
    tensor gc = put(cpu, DTYPE_F32, T, Hv, NULL), gg = put(gpu, DTYPE_F32, T, Hv, NULL);
    tensor bc = put(cpu, DTYPE_F32, T, Hv, NULL), bg = put(gpu, DTYPE_BF16, T, Hv, NULL);
    tensor ac_ = tensor_cols(&pc, 2 * kd + 2 * vd + Hv, Hv), ag_ = tensor_cols(&pg, 2 * kd + 2 * vd + Hv, Hv);
    tensor b_c = tensor_cols(&pc, 2 * kd + 2 * vd, Hv), b_g = tensor_cols(&pg, 2 * kd + 2 * vd, Hv);
    cpu->ops->gdn_gating(cpu, &ac_, &b_c, &A1c, &d1c, &gc, &bc);
    gpu->ops->gdn_gating(gpu, &ag_, &b_g, &A1g, &d1g, &gg, &bg);
    char what[112];
    snprintf(what, sizeof what, "gdn_gating H %d: g", Hv);
    la_compare(what, &gg, &gc, 1e-5, 1e-5);
    snprintf(what, sizeof what, "gdn_gating H %d: beta (BF16)", Hv);
    la_compare(what, &bg, &bc, REL, ELEM);
    /* the delta rule reads the CPU's g and beta rounded as the GPU's (beta BF16 there) */
    float *hb = get(gpu, &bg);
    drop(cpu, &bc);
    bc = put(cpu, DTYPE_F32, T, Hv, hb);
    free(hb);
    const int64_t ss[4] = {LA_SLOTS, Hv, dk, dv};
    tensor sc, sg;
    la_pool(sdt, 4, ss, 0.5f, &sc, &sg);
    tensor qc = tensor_cols(&pc, 0, kd), kc = tensor_cols(&pc, kd, kd), vc = tensor_cols(&pc, 2 * kd, vd);
    tensor qg = tensor_cols(&pg, 0, kd), kg = tensor_cols(&pg, kd, kd), vg = tensor_cols(&pg, 2 * kd, vd);
    tensor oc = put(cpu, DTYPE_F32, T, vd, NULL), og = put(gpu, DTYPE_BF16, T, vd, NULL);
    poison(&og);
    const gdn_params gp = {.num_k_heads = Hk, .num_v_heads = Hv, .head_k_dim = dk, .head_v_dim = dv, .qk_l2norm = true};
    for (int step = 0; step < 2; step++) { /* the second call continues from the first's states */
        cpu->ops->gated_delta_rule(cpu, &qc, &kc, &vc, &gc, &bc, &sc, &m.c, &gp, &oc);
        gpu->ops->gated_delta_rule(gpu, &qg, &kg, &vg, &gg, &bg, &sg, &m.g, &gp, &og);
        snprintf(what, sizeof what, "gated_delta_rule Hk %d Hv %d dk %d dv %d T %d state %s %s, call %d", Hk, Hv, dk,
                 dv, T, dtype_name(sdt), mode ? mode : "auto", step + 1);
        la_compare(what, &og, &oc, REL, ELEM);
        snprintf(what, sizeof what, "gated_delta_rule dk %d dv %d: the state pool", dk, dv);
        la_compare(what, &sg, &sc, REL, ELEM);
    }
    /* the gated norm in place over the output, z from the projection; then the attention output gate */
    tensor zc = tensor_cols(&pc, 2 * kd + vd, vd), zg = tensor_cols(&pg, 2 * kd + vd, vd);
    float *hn = malloc((size_t)dv * sizeof *hn);
    for (int i = 0; i < dv; i++) hn[i] = round_to(DTYPE_BF16, 1.0f + 0.3f * rnd());
    tensor nc = put(cpu, DTYPE_BF16, 1, dv, hn), ng = put(gpu, DTYPE_BF16, 1, dv, hn);
    tensor n1c = tensor_1d(DTYPE_BF16, nc.data, dv), n1g = tensor_1d(DTYPE_BF16, ng.data, dv);
    float *ho = get(gpu, &og); /* the same input on both */
    drop(cpu, &oc);
    oc = put(cpu, DTYPE_F32, T, vd, ho);
    cpu->ops->rms_norm_gated(cpu, &oc, &zc, &n1c, 1e-6f, &oc);
    gpu->ops->rms_norm_gated(gpu, &og, &zg, &n1g, 1e-6f, &og);
    snprintf(what, sizeof what, "rms_norm_gated T %d D %d G %d (in place)", T, vd, dv);
    la_compare(what, &og, &oc, REL, ELEM);
    free(ho);
    ho = get(gpu, &og);
    drop(cpu, &oc);
    oc = put(cpu, DTYPE_F32, T, vd, ho);
    cpu->ops->sigmoid_mul(cpu, &oc, &zc);
    gpu->ops->sigmoid_mul(gpu, &og, &zg);
    snprintf(what, sizeof what, "sigmoid_mul T %d D %d (gate strided)", T, vd);
    la_compare(what, &og, &oc, REL, ELEM);
    free(ho);
    free(hn);
    free(hp);
    tensor *cs[] = {&pc, &Ac, &dc, &gc, &bc, &sc, &oc, &nc}, *gs[] = {&pg, &Ag, &dg, &gg, &bg, &sg, &og, &ng};
    drop_pairs(cs, gs, 8);
    la_meta_free(&m);
    unsetenv("VLLM_CUDA_GDN");
}

static void test_linear_attn(void) {
    if (!gpu->ops->causal_conv1d) {
        CHECK_MSG(false, "the CUDA backend has no linear-attention ops");
        return;
    }
    test_conv_case(96, 4, DTYPE_F32, LA_LENS, true);
    test_conv_case(300, 4, DTYPE_BF16, LA_LENS, true);
    test_conv_case(64, 2, DTYPE_F32, LA_LENS, true);
    test_conv_case(300, 4, DTYPE_F32, LA_LONG, true);   /* long prompts in place: the sequential kernel */
    test_conv_case(300, 4, DTYPE_BF16, LA_LONG, false); /* out of place: 64-token chunks, then the states */
    test_conv_case(64, 3, DTYPE_F32, LA_LONG, false);
    test_conv_case(96, 4, DTYPE_F32, LA_LENS, false);   /* short: one chunk */
    test_gdr_case(2, 4, 16, 16, DTYPE_F32, LA_LENS, NULL);
    test_gdr_case(2, 6, 128, 128, DTYPE_F32, LA_LENS, NULL);
    test_gdr_case(1, 2, 128, 128, DTYPE_BF16, LA_LENS, NULL);
    test_gdr_case(3, 3, 64, 48, DTYPE_F32, LA_LENS, NULL);
    /* the chunked kernels: forced on short batches, chosen on long ones (partial chunks, 1-token
     * sequences beside 150-token ones, a padding sequence) */
    test_gdr_case(2, 4, 16, 16, DTYPE_F32, LA_LENS, "chunked");
    test_gdr_case(2, 6, 128, 128, DTYPE_F32, LA_LONG, NULL);
    test_gdr_case(1, 2, 128, 128, DTYPE_BF16, LA_LONG, NULL);
    test_gdr_case(3, 3, 64, 48, DTYPE_F32, LA_LONG, "chunked");
    test_gdr_case(2, 4, 16, 16, DTYPE_F32, LA_LONG, "recurrent");
    test_gdr_case(2, 4, 256, 64, DTYPE_F32, LA_LONG, NULL); /* d_k 256: the recurrent kernel */
    /* d_k 48 (state rows past d_k clamped in the R = 16 kernel), d_v 320 (rms_norm_gated past its register path) */
    test_gdr_case(2, 4, 48, 320, DTYPE_BF16, LA_LENS, NULL);
    gdn_params gp = {.num_k_heads = 16, .num_v_heads = 48, .head_k_dim = 128, .head_v_dim = 128, .qk_l2norm = true,
                     .conv_kernel = 4, .state_dtype = DTYPE_BF16};
    CHECK(backend_supports(gpu, BE_OP_GATED_DELTA_NET, &gp) == BE_NATIVE);
    gp.head_k_dim = 512;
    CHECK(backend_supports(gpu, BE_OP_GATED_DELTA_NET, &gp) == BE_UNSUPPORTED);
    gp.head_k_dim = 128;
    gp.conv_kernel = 9;
    CHECK(backend_supports(gpu, BE_OP_GATED_DELTA_NET, &gp) == BE_UNSUPPORTED);
}

int main(void) {
    /* the BF16 GEMV kernels for every T they are built for (1..8: models send 5..8 to cuBLAS by default, the
     * path T > 8 takes here) */
    setenv("VLLM_CUDA_GEMV_MAX_T", "8", 0);
    /* the tensor-core decode attention at head_dim 256 (opt-in in the backend until measured) */
    setenv("VLLM_CUDA_DTC_HD256", "1", 0);
    vllm_status st = backend_create("cuda", NULL, &gpu);
    if (st != VLLM_OK) {
        printf("no CUDA device: skipped (%s)\n", vllm_last_error());
        return 77;
    }
    backend_options co = {.num_threads = 2};
    CHECK_OK(backend_create("cpu", &co, &cpu));
    if (!cpu) TEST_END();
    CHECK(gpu->act_dtype == DTYPE_BF16 && gpu->kv_dtype == DTYPE_BF16);

    test_memory();
    test_embedding();
    test_rms_norm();
    test_add_silu_gather();
    test_rope();
    test_add_rms_norm();
    test_norm_kinds();
    test_activations();
    test_qk_norm_rope_kv();
    for (size_t i = 0; i < sizeof LAYOUTS / sizeof *LAYOUTS; i++) test_attention_layout(&LAYOUTS[i], 0.0f);
    /* the FP8 KV cache on each kernel: decode (head_dim 64 / 128 / 256, split-KV), the tensor cores (128, 256
     * with a window), the generic kernel (head_dim 6; and softcap / sinks, which FP8 sends there); scales that
     * spread the values over E4M3's range, 1, and one that saturates (|x| / 0.002 up to 500 > 448) */
    /* (by name: layouts inserted above must not shift this list, as two pairs of cluster layouts once did) */
    const struct { const char *layout; float scale; } F8[] = {
        {"mixed prefill/decode, GQA, block 16", 1.0f / 64},
        {"long decode (split-KV)", 1.0f / 128},
        {"head_dim 256, group 8, block 7", 1.0f},
        {"head_dim 6 (no 16-byte loads)", 1.0f / 32},
        {"prefill chunk after 200 cached, head_dim 128, GQA 4 (tensor cores)", 0.002f},
        {"prefills, head_dim 256, sliding window 48, block 7 (tensor cores)", 1.0f / 100},
        {"softcap 2, head_dim 128 prefill (tensor cores) + decode", 1.0f / 64},
        {"sinks, mixed prefill/decode, GQA, block 16", 1.0f / 64},
        {"sinks, gpt-oss window 128 over a long decode (split-KV)", 1.0f / 50},
        {"sliding window 64 over a long decode (split-KV)", 1.0f / 90},
        {"decodes, head_dim 256, 13 and 16 splits (a cluster of 16)", 1.0f / 64},
    };
    for (size_t i = 0; i < sizeof F8 / sizeof *F8; i++) {
        const attn_layout *L = NULL;
        for (size_t j = 0; j < sizeof LAYOUTS / sizeof *LAYOUTS && !L; j++)
            if (!strcmp(LAYOUTS[j].name, F8[i].layout)) L = &LAYOUTS[j];
        CHECK(L != NULL);
        if (L) test_attention_layout(L, F8[i].scale);
    }
    test_linear();
    test_linear_fused();
    test_linear_tuned();
    test_sampling();
    test_sampling_cuts();
    test_sampling_cuts_mixed(1000);
    test_sampling_cuts_mixed(32000);
    test_sampling_bisect();
    test_sampling_radix();
    test_graph();
    test_supports();
    test_moe();
    test_linear_attn();
    test_dummy_fill();

    CHECK_OK(gpu->ops->synchronize(gpu));
    CHECK_OK(cpu->ops->synchronize(cpu));
    backend_free(gpu);
    backend_free(cpu);
    TEST_END();
}
