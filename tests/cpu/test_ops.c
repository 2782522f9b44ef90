/*
 * test_ops.c: the CPU backend's memory ops and row-wise ops (embedding,
 * rms_norm, norm (Gemma's (1 + w) RMSNorm, LayerNorm), add, silu_mul,
 * act_mul and activation (SiLU, GELU tanh / erf, ReLU), softcap,
 * gather_rows, rope) against naive double references, with F32 / F16 /
 * BF16 weights, strided and in-place views, 1 vs 4 threads (bit-identical),
 * and the sticky error of bad arguments.
 */
#include <stdlib.h>
#include <string.h>

#include "cpu_test_util.h"

/* Checks got (rows, cols) with row stride gs against ref (rows, cols) contiguous. */
static int count_bad(const float *got, int64_t gs, const double *ref, int64_t rows, int64_t cols, double rtol,
                     double atol) {
    int bad = 0;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) {
            double g = got[r * gs + c], w = ref[r * cols + c];
            if (!(fabs(g - w) <= atol + rtol * fabs(w))) {
                if (bad < 3) fprintf(stderr, "  [%lld,%lld] got %.9g want %.9g\n", (long long)r, (long long)c, g, w);
                bad++;
            }
        }
    }
    return bad;
}

/* ---- memory ---- */

static void test_memory(backend *be) {
    const backend_ops *ops = be->ops;
    CHECK(!strcmp(be->name, "cpu"));
    CHECK(be->act_dtype == DTYPE_F32 && be->kv_dtype == DTYPE_F32);

    tensor t = tensor_2d(DTYPE_F32, NULL, 3, 5);
    CHECK_OK(ops->alloc(be, &t));
    CHECK(t.data != NULL && ((uintptr_t)t.data % 64) == 0);
    float src[15], dst[15];
    for (int i = 0; i < 15; i++) src[i] = (float)i + 0.5f;
    CHECK_OK(ops->upload(be, &t, src, sizeof src));
    CHECK_OK(ops->download(be, dst, &t, sizeof dst));
    CHECK(!memcmp(src, dst, sizeof src));
    CHECK(ops->upload(be, &t, src, sizeof src + 4) == VLLM_ERR_INVALID_ARG);
    CHECK(ops->download(be, dst, &t, sizeof dst + 4) == VLLM_ERR_INVALID_ARG);

    /* zero a strided column view: only its columns change */
    tensor cols = tensor_cols(&t, 1, 2);
    CHECK_OK(ops->zero(be, &cols));
    CHECK_OK(ops->download(be, dst, &t, sizeof dst));
    int ok = 1;
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 5; c++) ok &= dst[r * 5 + c] == ((c == 1 || c == 2) ? 0.0f : src[r * 5 + c]);
    CHECK(ok);
    CHECK_OK(ops->zero(be, &t));
    CHECK_OK(ops->download(be, dst, &t, sizeof dst));
    ok = 1;
    for (int i = 0; i < 15; i++) ok &= dst[i] == 0.0f;
    CHECK(ok);
    ops->release(be, &t);
    CHECK(t.data == NULL);
    ops->release(be, &t);  /* releasing twice is harmless */

    /* empty and 4-D tensors */
    tensor e = tensor_2d(DTYPE_BF16, NULL, 0, 7);
    CHECK_OK(ops->alloc(be, &e));
    CHECK(e.data != NULL);
    CHECK_OK(ops->zero(be, &e));
    ops->release(be, &e);
    int64_t shape4[4] = {3, 16, 2, 8};
    tensor c4 = tensor_make(DTYPE_F32, NULL, 4, shape4);
    CHECK_OK(ops->alloc(be, &c4));
    CHECK_OK(ops->zero(be, &c4));
    ops->release(be, &c4);

    /* bad shapes */
    tensor neg = tensor_2d(DTYPE_F32, NULL, -1, 4);
    CHECK(ops->alloc(be, &neg) == VLLM_ERR_INVALID_ARG);
    tensor huge = tensor_2d(DTYPE_F32, NULL, (int64_t)1 << 40, (int64_t)1 << 40);
    CHECK(ops->alloc(be, &huge) == VLLM_ERR_INVALID_ARG);
    tensor big = tensor_2d(DTYPE_F32, NULL, (int64_t)1 << 61, 1);
    CHECK(ops->alloc(be, &big) == VLLM_ERR_INVALID_ARG);

    /* import is a view of the same memory */
    uint16_t host[6] = {1, 2, 3, 4, 5, 6};
    tensor h = tensor_2d(DTYPE_BF16, host, 2, 3), view;
    CHECK_OK(ops->import(be, &h, &view));
    CHECK(view.data == (void *)host && view.dtype == DTYPE_BF16 && view.shape[1] == 3);
    ops->release_import(be, &view);
    CHECK(view.data == NULL);
    CHECK(host[5] == 6);
    CHECK_OK(ops->synchronize(be));
}

/* ---- embedding ---- */

static void test_embedding(backend *be[CT_NBE], dtype dt) {
    const int64_t V = 50, D = 37, T = 9;
    unsigned char *table = malloc((size_t)(V * D) * dtype_size(dt) + 1);
    unsigned char *tab = table + 1;  /* odd address */
    for (int64_t i = 0; i < V * D; i++) ct_store(tab, dt, i, ct_uniform());
    int32_t ids[9] = {0, 49, 3, 3, 17, 1, 48, 0, 25};
    tensor tt = tensor_2d(dt, tab, V, D), it = tensor_1d(DTYPE_I32, ids, T);
    float *outs[CT_NBE];
    for (int b = 0; b < CT_NBE; b++) {
        outs[b] = malloc((size_t)(T * D) * sizeof(float));
        tensor ot = tensor_2d(DTYPE_F32, outs[b], T, D);
        be[b]->ops->embedding(be[b], &tt, &it, &ot);
        CHECK_OK(be[b]->ops->synchronize(be[b]));
        int ok = 1;
        for (int64_t t = 0; t < T; t++)
            for (int64_t d = 0; d < D; d++) ok &= outs[b][t * D + d] == (float)ct_load(tab, dt, ids[t] * D + d);
        CHECK_MSG(ok, "embedding %s backend %d", dtype_name(dt), b);
    }
    /* out-of-range id: reported, not read */
    ids[4] = 50;
    tensor ot = tensor_2d(DTYPE_F32, outs[0], T, D);
    be[0]->ops->embedding(be[0], &tt, &it, &ot);
    float dummy;
    CHECK(be[0]->ops->download(be[0], &dummy, &ot, 4) == VLLM_ERR_BACKEND);
    CHECK(strstr(vllm_last_error(), "token id 50") != NULL);
    ids[4] = -1;
    be[0]->ops->embedding(be[0], &tt, &it, &ot);
    CHECK(be[0]->ops->synchronize(be[0]) == VLLM_ERR_BACKEND);
    for (int b = 0; b < CT_NBE; b++) free(outs[b]);
    free(table);
}

/* ---- rms_norm ---- */

static void test_rms_norm(backend *be[CT_NBE], dtype wdt, int64_t T, int64_t D, int64_t G, int pad,
                          int in_place) {
    const float eps = 1e-6f;
    int64_t W = D + pad;
    float *xbuf = malloc((size_t)(T * W) * sizeof(float));
    ct_fill(xbuf, T * W, 2.0f);
    unsigned char *w = malloc((size_t)G * dtype_size(wdt));
    for (int64_t i = 0; i < G; i++) ct_store(w, wdt, i, 1.0f + 0.5f * ct_uniform());
    tensor wt = tensor_1d(wdt, w, G);
    double *ref = malloc((size_t)(T * D) * sizeof(double));
    for (int64_t t = 0; t < T; t++) {
        const float *x = xbuf + t * W + pad;
        for (int64_t g = 0; g < D / G; g++) {
            double ss = 0;
            for (int64_t i = 0; i < G; i++) ss += (double)x[g * G + i] * x[g * G + i];
            double r = 1.0 / sqrt(ss / (double)G + eps);
            for (int64_t i = 0; i < G; i++) ref[t * D + g * G + i] = x[g * G + i] * r * ct_load(w, wdt, i);
        }
    }
    float *res[CT_NBE];
    for (int b = 0; b < CT_NBE; b++) {
        float *xb = malloc((size_t)(T * W) * sizeof(float));
        memcpy(xb, xbuf, (size_t)(T * W) * sizeof(float));
        tensor full = tensor_2d(DTYPE_F32, xb, T, W);
        tensor x = pad ? tensor_cols(&full, pad, D) : full;
        res[b] = malloc((size_t)(T * D) * sizeof(float));
        int bad;
        if (in_place) {
            be[b]->ops->rms_norm(be[b], &x, &wt, eps, &x);
            bad = count_bad(xb + pad, W, ref, T, D, 1e-5, 1e-7);
            for (int64_t t = 0; t < T; t++)
                memcpy(res[b] + t * D, xb + t * W + pad, (size_t)D * sizeof(float));
            for (int64_t t = 0; t < T; t++)  /* the padding is untouched */
                for (int64_t i = 0; i < pad; i++) bad += xb[t * W + i] != xbuf[t * W + i];
        } else {
            tensor o = tensor_2d(DTYPE_F32, res[b], T, D);
            be[b]->ops->rms_norm(be[b], &x, &wt, eps, &o);
            bad = count_bad(res[b], D, ref, T, D, 1e-5, 1e-7);
        }
        CHECK_OK(be[b]->ops->synchronize(be[b]));
        CHECK_MSG(bad == 0, "rms_norm %s T=%lld D=%lld G=%lld backend %d: %d bad", dtype_name(wdt), (long long)T,
                  (long long)D, (long long)G, b, bad);
        free(xb);
    }
    for (int b = 1; b < CT_NBE; b++) CHECK(!memcmp(res[0], res[b], (size_t)(T * D) * sizeof(float)));
    for (int b = 0; b < CT_NBE; b++) free(res[b]);
    free(xbuf);
    free(w);
    free(ref);

    /* D not a multiple of len(w) */
    float xs[6] = {0}, ws[4] = {1, 1, 1, 1};
    tensor x6 = tensor_2d(DTYPE_F32, xs, 1, 6), w4 = tensor_1d(DTYPE_F32, ws, 4);
    be[0]->ops->rms_norm(be[0], &x6, &w4, eps, &x6);
    CHECK(be[0]->ops->synchronize(be[0]) == VLLM_ERR_BACKEND);
}

/* ---- norm: Gemma's (1 + w) RMSNorm, LayerNorm; RMSNorm through norm() is rms_norm ---- */

static void test_norm_kind(backend *be[CT_NBE], be_norm_kind kind, dtype wdt, int64_t T, int64_t D, int64_t G,
                           int pad, int in_place, bool with_w, bool with_b) {
    const float eps = kind == BE_NORM_LAYER ? 1e-5f : 1e-6f;
    int64_t W = D + pad;
    float *xbuf = malloc((size_t)(T * W) * sizeof(float));
    ct_fill(xbuf, T * W, 2.0f);
    for (int64_t t = 0; t < T; t++) /* rows with an offset: LayerNorm must take the mean out */
        for (int64_t i = 0; i < W; i++) xbuf[t * W + i] += kind == BE_NORM_LAYER ? 3.0f : 0.0f;
    unsigned char *w = malloc((size_t)G * dtype_size(wdt) + 1), *bb = malloc((size_t)G * dtype_size(wdt) + 1);
    for (int64_t i = 0; i < G; i++) {
        ct_store(w, wdt, i, kind == BE_NORM_RMS_OFFSET ? 0.5f * ct_uniform() : 1.0f + 0.5f * ct_uniform());
        ct_store(bb, wdt, i, ct_uniform());
    }
    tensor wt = tensor_1d(wdt, w, G), bt = tensor_1d(wdt, bb, G);
    be_norm n = {.kind = kind, .w = with_w ? &wt : NULL, .b = with_b ? &bt : NULL, .eps = eps};
    const int64_t g = with_w ? G : D; /* the group */
    double *ref = malloc((size_t)(T * D) * sizeof(double));
    for (int64_t t = 0; t < T; t++) {
        const float *x = xbuf + t * W + pad;
        for (int64_t q = 0; q < D / g; q++) {
            const float *xg = x + q * g;
            double mean = 0, ss = 0;
            if (kind == BE_NORM_LAYER) {
                for (int64_t i = 0; i < g; i++) mean += xg[i];
                mean /= (double)g;
            }
            for (int64_t i = 0; i < g; i++) ss += (xg[i] - mean) * (xg[i] - mean);
            double r = 1.0 / sqrt(ss / (double)g + eps);
            for (int64_t i = 0; i < g; i++) {
                double wv = with_w ? ct_load(w, wdt, i) : (kind == BE_NORM_RMS_OFFSET ? 0.0 : 1.0);
                if (kind == BE_NORM_RMS_OFFSET) wv += 1.0;
                double bv = with_b ? ct_load(bb, wdt, i) : 0.0;
                ref[t * D + q * g + i] = (xg[i] - mean) * r * wv + bv;
            }
        }
    }
    float *res[CT_NBE];
    for (int b = 0; b < CT_NBE; b++) {
        float *xb = malloc((size_t)(T * W) * sizeof(float));
        memcpy(xb, xbuf, (size_t)(T * W) * sizeof(float));
        tensor full = tensor_2d(DTYPE_F32, xb, T, W);
        tensor x = pad ? tensor_cols(&full, pad, D) : full;
        res[b] = malloc((size_t)(T * D) * sizeof(float));
        int bad;
        if (in_place) {
            be[b]->ops->norm(be[b], &x, &n, &x);
            bad = count_bad(xb + pad, W, ref, T, D, 1e-5, 1e-6);
            for (int64_t t = 0; t < T; t++) memcpy(res[b] + t * D, xb + t * W + pad, (size_t)D * sizeof(float));
            for (int64_t t = 0; t < T; t++)
                for (int64_t i = 0; i < pad; i++) bad += xb[t * W + i] != xbuf[t * W + i];
        } else {
            tensor o = tensor_2d(DTYPE_F32, res[b], T, D);
            be[b]->ops->norm(be[b], &x, &n, &o);
            bad = count_bad(res[b], D, ref, T, D, 1e-5, 1e-6);
        }
        CHECK_OK(be[b]->ops->synchronize(be[b]));
        CHECK_MSG(bad == 0, "norm kind %d %s T=%lld D=%lld G=%lld w=%d b=%d backend %d: %d bad", (int)kind,
                  dtype_name(wdt), (long long)T, (long long)D, (long long)G, with_w, with_b, b, bad);
        free(xb);
    }
    for (int b = 1; b < CT_NBE; b++) CHECK(!memcmp(res[0], res[b], (size_t)(T * D) * sizeof(float)));
    for (int b = 0; b < CT_NBE; b++) free(res[b]);
    free(xbuf);
    free(w);
    free(bb);
    free(ref);
}

static void test_norm(backend *be[CT_NBE]) {
    for (int d = 0; d < 3; d++) {
        dtype dt = CT_WDTYPES[d];
        test_norm_kind(be, BE_NORM_RMS_OFFSET, dt, 7, 67, 67, 0, 0, true, false);
        test_norm_kind(be, BE_NORM_RMS_OFFSET, dt, 5, 4 * 16, 16, 24, 1, true, false); /* Gemma 3's q/k norm */
        test_norm_kind(be, BE_NORM_LAYER, dt, 9, 96, 96, 0, 0, true, true);
        test_norm_kind(be, BE_NORM_LAYER, dt, 4, 3 * 40, 40, 5, 1, true, true);
        test_norm_kind(be, BE_NORM_LAYER, dt, 3, 50, 50, 0, 0, true, false);
    }
    test_norm_kind(be, BE_NORM_LAYER, DTYPE_F32, 6, 70, 70, 3, 0, false, false);   /* no affine */
    test_norm_kind(be, BE_NORM_RMS_OFFSET, DTYPE_F32, 2, 33, 33, 0, 1, false, false);
    test_norm_kind(be, BE_NORM_RMS, DTYPE_F32, 2, 33, 33, 0, 0, false, false);

    /* BE_NORM_RMS through norm() is rms_norm, bit for bit */
    const int64_t T = 5, D = 96;
    float x[5 * 96], w[96], o1[5 * 96], o2[5 * 96];
    ct_fill(x, T * D, 2.0f);
    ct_fill(w, D, 1.0f);
    tensor X = tensor_2d(DTYPE_F32, x, T, D), Wt = tensor_1d(DTYPE_F32, w, D);
    tensor O1 = tensor_2d(DTYPE_F32, o1, T, D), O2 = tensor_2d(DTYPE_F32, o2, T, D);
    be_norm n = {.kind = BE_NORM_RMS, .w = &Wt, .eps = 1e-6f};
    be[1]->ops->rms_norm(be[1], &X, &Wt, 1e-6f, &O1);
    be[1]->ops->norm(be[1], &X, &n, &O2);
    CHECK_OK(be[1]->ops->synchronize(be[1]));
    CHECK(!memcmp(o1, o2, sizeof o1));

    /* refusals: a bias outside LayerNorm, a kind out of range, a bias of the wrong length, no be_norm */
    tensor B = tensor_1d(DTYPE_F32, w, D), B7 = tensor_1d(DTYPE_F32, w, 7);
    n.b = &B;
    be[0]->ops->norm(be[0], &X, &n, &O2);
    CHECK(be[0]->ops->synchronize(be[0]) == VLLM_ERR_BACKEND);
    CHECK_MSG(strstr(vllm_last_error(), "bias") != NULL, "%s", vllm_last_error());
    n.b = NULL;
    n.kind = BE_NORM_COUNT;
    be[0]->ops->norm(be[0], &X, &n, &O2);
    CHECK(be[0]->ops->synchronize(be[0]) == VLLM_ERR_BACKEND);
    n.kind = BE_NORM_LAYER;
    n.b = &B7;
    be[0]->ops->norm(be[0], &X, &n, &O2);
    CHECK(be[0]->ops->synchronize(be[0]) == VLLM_ERR_BACKEND);
    be[0]->ops->norm(be[0], &X, NULL, &O2);
    CHECK(be[0]->ops->synchronize(be[0]) == VLLM_ERR_BACKEND);
}

/* ---- activations: act_mul (gated), activation (in place), softcap ---- */

static double ref_act(be_act act, double x) {
    switch (act) {
    case BE_ACT_GELU_TANH: return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case BE_ACT_GELU: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case BE_ACT_RELU: return x > 0 ? x : 0.0;
    default: return x / (1.0 + exp(-x));
    }
}

/* gpt-oss's clamped SwiGLU (transformers' GptOssExperts._apply_gate) in double */
static double ref_swiglu_oai(double g, double u, double alpha, double limit) {
    g = g > limit ? limit : g;
    u = u > limit ? limit : u < -limit ? -limit : u;
    return (u + 1.0) * (g / (1.0 + exp(-alpha * g)));
}

static void test_activations(backend *be[CT_NBE]) {
    const int64_t T = 6, I = 53, W = 2 * I + 5;
    float *gu = malloc((size_t)(T * W) * sizeof(float));
    ct_fill(gu, T * W, 5.0f);
    gu[3] = 0.0f;
    gu[4] = -0.0f;
    double *ref = malloc((size_t)(T * I) * sizeof(double));
    for (int a = 0; a < BE_ACT_COUNT; a++) {
        /* gated: gate_up a strided view, columns [2, 2 + 2I) */
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < I; i++)
                ref[t * I + i] = a == BE_ACT_SWIGLU_OAI
                                     ? ref_swiglu_oai(gu[t * W + 2 + i], gu[t * W + 2 + I + i], 1.702, 7.0)
                                     : ref_act((be_act)a, gu[t * W + 2 + i]) * gu[t * W + 2 + I + i];
        float *res[CT_NBE];
        tensor guf = tensor_2d(DTYPE_F32, gu, T, W), gut = tensor_cols(&guf, 2, 2 * I);
        for (int b = 0; b < CT_NBE; b++) {
            res[b] = malloc((size_t)(T * I) * sizeof(float));
            tensor o = tensor_2d(DTYPE_F32, res[b], T, I);
            be[b]->ops->act_mul(be[b], (be_act)a, &gut, &o);
            CHECK_OK(be[b]->ops->synchronize(be[b]));
            CHECK_MSG(count_bad(res[b], I, ref, T, I, 1e-5, 1e-5) == 0, "act_mul %s backend %d",
                      be_act_name((be_act)a), b);
        }
        for (int b = 1; b < CT_NBE; b++) CHECK(!memcmp(res[0], res[b], (size_t)(T * I) * sizeof(float)));
        if (a == BE_ACT_SILU) { /* act_mul SiLU is silu_mul, bit for bit */
            float *s = malloc((size_t)(T * I) * sizeof(float));
            tensor o = tensor_2d(DTYPE_F32, s, T, I);
            be[1]->ops->silu_mul(be[1], &gut, &o);
            CHECK_OK(be[1]->ops->synchronize(be[1]));
            CHECK(!memcmp(s, res[1], (size_t)(T * I) * sizeof(float)));
            free(s);
        }
        for (int b = 0; b < CT_NBE; b++) free(res[b]);
        if (a == BE_ACT_SWIGLU_OAI) { /* gated only: activation refuses it */
            float o1[53];
            tensor ot1 = tensor_2d(DTYPE_F32, o1, 1, 53);
            CHECK(backend_supports(be[0], BE_OP_ACTIVATION, &(be_act){BE_ACT_SWIGLU_OAI}) == BE_UNSUPPORTED);
            CHECK(backend_supports(be[0], BE_OP_ACT_MUL, &(be_act){BE_ACT_SWIGLU_OAI}) == BE_NATIVE);
            CHECK(!strcmp(be_act_name(BE_ACT_SWIGLU_OAI), "swigluoai"));
            be[0]->ops->activation(be[0], BE_ACT_SWIGLU_OAI, &ot1);
            CHECK(be[0]->ops->synchronize(be[0]) == VLLM_ERR_BACKEND);
            vt_error_clear();
            continue;
        }

        /* in place on a strided view (T, I) at column 3; the rest of the row untouched */
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < I; i++) ref[t * I + i] = ref_act((be_act)a, gu[t * W + 3 + i]);
        for (int b = 0; b < CT_NBE; b++) {
            res[b] = malloc((size_t)(T * W) * sizeof(float));
            memcpy(res[b], gu, (size_t)(T * W) * sizeof(float));
            tensor xf = tensor_2d(DTYPE_F32, res[b], T, W), x = tensor_cols(&xf, 3, I);
            be[b]->ops->activation(be[b], (be_act)a, &x);
            CHECK_OK(be[b]->ops->synchronize(be[b]));
            int bad = count_bad(res[b] + 3, W, ref, T, I, 1e-5, 1e-6);
            for (int64_t t = 0; t < T; t++)
                for (int64_t i = 0; i < W; i++)
                    if (i < 3 || i >= 3 + I) bad += memcmp(&res[b][t * W + i], &gu[t * W + i], sizeof(float)) != 0;
            CHECK_MSG(bad == 0, "activation %s backend %d: %d bad", be_act_name((be_act)a), b, bad);
        }
        for (int b = 1; b < CT_NBE; b++) CHECK(!memcmp(res[0], res[b], (size_t)(T * W) * sizeof(float)));
        for (int b = 0; b < CT_NBE; b++) free(res[b]);
    }
    /* the clamped SwiGLU by hand (alpha 1.702, limit 7): gate above the limit clamps to 7, gate below
     * stays; up clamps to [-7, 7]; NaN stays NaN. g = 8, u = 9: 7 sigmoid(11.914) * 8; g = -8, u = -9:
     * (-8 sigmoid(-13.616)) * -6; g = 0: 0; g = 1, u = 0.5: 1.5 sigmoid(1.702) */
    {
        float hg[2 * 5] = {8.0f, -8.0f, 0.0f, 1.0f, NAN, 9.0f, -9.0f, 3.0f, 0.5f, 1.0f};
        float ho[5];
        tensor hgt = tensor_2d(DTYPE_F32, hg, 1, 10), hot = tensor_2d(DTYPE_F32, ho, 1, 5);
        be[0]->ops->act_mul(be[0], BE_ACT_SWIGLU_OAI, &hgt, &hot);
        CHECK_OK(be[0]->ops->synchronize(be[0]));
        CHECK_NEAR(ho[0], 8.0 * 7.0 / (1.0 + exp(-7.0 * 1.702)), 1e-5);
        CHECK_NEAR(ho[1], -6.0 * -8.0 / (1.0 + exp(8.0 * 1.702)), 1e-8);
        CHECK(ho[2] == 0.0f);
        CHECK_NEAR(ho[3], 1.5 / (1.0 + exp(-1.702)), 1e-6);
        CHECK(isnan(ho[4]));
    }

    /* relu keeps NaN; gelu(0) = 0 */
    float nanv[4] = {NAN, -1.0f, 0.0f, 2.0f};
    tensor nt = tensor_2d(DTYPE_F32, nanv, 1, 4);
    be[0]->ops->activation(be[0], BE_ACT_RELU, &nt);
    CHECK_OK(be[0]->ops->synchronize(be[0]));
    CHECK(isnan(nanv[0]) && nanv[1] == 0.0f && nanv[2] == 0.0f && nanv[3] == 2.0f);

    /* softcap on logits (T, V) with a strided view; values past the cap saturate */
    const float cap = 30.0f;
    const int64_t V = 77;
    float *lg = malloc((size_t)(T * (V + 4)) * sizeof(float));
    ct_fill(lg, T * (V + 4), 80.0f);
    double *lref = malloc((size_t)(T * V) * sizeof(double));
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < V; i++) lref[t * V + i] = tanh(lg[t * (V + 4) + 1 + i] / cap) * cap;
    float *lres[CT_NBE];
    for (int b = 0; b < CT_NBE; b++) {
        lres[b] = malloc((size_t)(T * (V + 4)) * sizeof(float));
        memcpy(lres[b], lg, (size_t)(T * (V + 4)) * sizeof(float));
        tensor lf = tensor_2d(DTYPE_F32, lres[b], T, V + 4), l = tensor_cols(&lf, 1, V);
        be[b]->ops->softcap(be[b], &l, cap);
        CHECK_OK(be[b]->ops->synchronize(be[b]));
        int bad = count_bad(lres[b] + 1, V + 4, lref, T, V, 1e-6, 1e-5);
        for (int64_t t = 0; t < T; t++) bad += lres[b][t * (V + 4)] != lg[t * (V + 4)];
        CHECK_MSG(bad == 0, "softcap backend %d: %d bad", b, bad);
    }
    for (int b = 1; b < CT_NBE; b++) CHECK(!memcmp(lres[0], lres[b], (size_t)(T * (V + 4)) * sizeof(float)));

    /* scale (Gemma's embedding normaliser) on the same strided view: exact f32 products */
    for (int b = 0; b < CT_NBE; b++) {
        memcpy(lres[b], lg, (size_t)(T * (V + 4)) * sizeof(float));
        tensor lf = tensor_2d(DTYPE_F32, lres[b], T, V + 4), l = tensor_cols(&lf, 1, V);
        be[b]->ops->scale(be[b], &l, 48.0f);
        CHECK_OK(be[b]->ops->synchronize(be[b]));
        int bad = 0;
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < V + 4; i++) {
                float want = i >= 1 && i <= V ? lg[t * (V + 4) + i] * 48.0f : lg[t * (V + 4) + i];
                bad += lres[b][t * (V + 4) + i] != want;
            }
        CHECK_MSG(bad == 0, "scale backend %d: %d bad", b, bad);
    }
    {
        tensor lf = tensor_2d(DTYPE_F32, lres[0], T, V + 4);
        be[0]->ops->scale(be[0], &lf, 0.0f);
        CHECK(be[0]->ops->synchronize(be[0]) != VLLM_OK); /* a zero factor is refused */
        vt_error_clear();
    }
    for (int b = 0; b < CT_NBE; b++) free(lres[b]);

    /* refusals: activation out of range, odd gate_up, cap <= 0 */
    tensor guf = tensor_2d(DTYPE_F32, gu, T, W), odd = tensor_cols(&guf, 0, 2 * I + 1);
    float o[6 * 53];
    tensor ot = tensor_2d(DTYPE_F32, o, T, I);
    be[0]->ops->act_mul(be[0], BE_ACT_COUNT, &odd, &ot);
    CHECK(be[0]->ops->synchronize(be[0]) == VLLM_ERR_BACKEND);
    be[0]->ops->act_mul(be[0], BE_ACT_GELU_TANH, &odd, &ot);
    CHECK(be[0]->ops->synchronize(be[0]) == VLLM_ERR_BACKEND);
    be[0]->ops->activation(be[0], (be_act)-1, &ot);
    CHECK(be[0]->ops->synchronize(be[0]) == VLLM_ERR_BACKEND);
    be[0]->ops->softcap(be[0], &ot, 0.0f);
    CHECK(be[0]->ops->synchronize(be[0]) == VLLM_ERR_BACKEND);
    be[0]->ops->softcap(be[0], &ot, NAN);
    CHECK(be[0]->ops->synchronize(be[0]) == VLLM_ERR_BACKEND);

    /* the names */
    be_act act;
    CHECK(be_act_from_name("gelu_pytorch_tanh", &act) && act == BE_ACT_GELU_TANH);
    CHECK(be_act_from_name("silu", &act) && act == BE_ACT_SILU);
    CHECK(be_act_from_name("relu", &act) && act == BE_ACT_RELU);
    CHECK(be_act_from_name("gelu", &act) && act == BE_ACT_GELU);
    CHECK(!be_act_from_name("tanh", &act) && !be_act_from_name(NULL, &act));
    free(gu);
    free(ref);
    free(lg);
    free(lref);
}

/* ---- add, silu_mul, gather_rows ---- */

static void test_add_silu_gather(backend *be[CT_NBE]) {
    const int64_t T = 7, D = 67, I = 45, M = 10, N = 4;
    /* add on strided views */
    float *x0 = malloc((size_t)(T * (D + 3)) * sizeof(float)), *y0 = malloc((size_t)(T * (D + 5)) * sizeof(float));
    ct_fill(x0, T * (D + 3), 1.0f);
    ct_fill(y0, T * (D + 5), 1.0f);
    /* silu_mul: gate_up a strided view */
    float *gu = malloc((size_t)(T * (2 * I + 2)) * sizeof(float));
    ct_fill(gu, T * (2 * I + 2), 4.0f);
    double *sref = malloc((size_t)(T * I) * sizeof(double));
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < I; i++) {
            double g = gu[t * (2 * I + 2) + 1 + i], u = gu[t * (2 * I + 2) + 1 + I + i];
            sref[t * I + i] = g / (1.0 + exp(-g)) * u;
        }
    /* gather from F32 and from BF16 */
    float *gx = malloc((size_t)(M * D) * sizeof(float));
    uint16_t *gxh = malloc((size_t)(M * D) * sizeof(uint16_t));
    ct_fill(gx, M * D, 1.0f);
    for (int64_t i = 0; i < M * D; i++) gxh[i] = f32_to_bf16(gx[i]);
    int32_t idx[4] = {9, 0, 9, 4};

    float *adds[CT_NBE], *silus[CT_NBE];
    for (int b = 0; b < CT_NBE; b++) {
        const backend_ops *ops = be[b]->ops;
        float *xb = malloc((size_t)(T * (D + 3)) * sizeof(float));
        memcpy(xb, x0, (size_t)(T * (D + 3)) * sizeof(float));
        tensor xf = tensor_2d(DTYPE_F32, xb, T, D + 3), yf = tensor_2d(DTYPE_F32, y0, T, D + 5);
        tensor x = tensor_cols(&xf, 3, D), y = tensor_cols(&yf, 1, D);
        ops->add(be[b], &x, &y);
        int ok = 1;
        for (int64_t t = 0; t < T; t++) {
            for (int64_t i = 0; i < D; i++)
                ok &= xb[t * (D + 3) + 3 + i] == x0[t * (D + 3) + 3 + i] + y0[t * (D + 5) + 1 + i];
            for (int64_t i = 0; i < 3; i++) ok &= xb[t * (D + 3) + i] == x0[t * (D + 3) + i];
        }
        CHECK_MSG(ok, "add backend %d", b);
        adds[b] = xb;

        tensor guf = tensor_2d(DTYPE_F32, gu, T, 2 * I + 2), gut = tensor_cols(&guf, 1, 2 * I);
        silus[b] = malloc((size_t)(T * I) * sizeof(float));
        tensor so = tensor_2d(DTYPE_F32, silus[b], T, I);
        ops->silu_mul(be[b], &gut, &so);
        CHECK_MSG(count_bad(silus[b], I, sref, T, I, 1e-6, 1e-7) == 0, "silu_mul backend %d", b);

        float go[4 * 67];
        tensor gxt = tensor_2d(DTYPE_F32, gx, M, D), gxht = tensor_2d(DTYPE_BF16, gxh, M, D);
        tensor it = tensor_1d(DTYPE_I32, idx, N), got = tensor_2d(DTYPE_F32, go, N, D);
        ops->gather_rows(be[b], &gxt, &it, &got);
        ok = 1;
        for (int64_t r = 0; r < N; r++) ok &= !memcmp(go + r * D, gx + idx[r] * D, (size_t)D * sizeof(float));
        CHECK_MSG(ok, "gather_rows F32 backend %d", b);
        ops->gather_rows(be[b], &gxht, &it, &got);
        ok = 1;
        for (int64_t r = 0; r < N; r++)
            for (int64_t d = 0; d < D; d++) ok &= go[r * D + d] == bf16_to_f32(gxh[idx[r] * D + d]);
        CHECK_MSG(ok, "gather_rows BF16 -> F32 backend %d", b);
        CHECK_OK(ops->synchronize(be[b]));

        /* errors */
        idx[2] = 10;
        ops->gather_rows(be[b], &gxt, &it, &got);
        CHECK(ops->synchronize(be[b]) == VLLM_ERR_BACKEND);
        idx[2] = 9;
        tensor odd = tensor_cols(&guf, 0, 2 * I + 1);
        ops->silu_mul(be[b], &odd, &so);
        CHECK(ops->synchronize(be[b]) == VLLM_ERR_BACKEND);
        tensor short_y = tensor_rows(&y, 0, T - 1);
        ops->add(be[b], &x, &short_y);
        CHECK(ops->synchronize(be[b]) == VLLM_ERR_BACKEND);
        tensor wrong_dt = gxht;
        ops->add(be[b], &wrong_dt, &wrong_dt);
        CHECK(ops->synchronize(be[b]) == VLLM_ERR_BACKEND);
    }
    for (int b = 1; b < CT_NBE; b++) {
        CHECK(!memcmp(adds[0], adds[b], (size_t)(T * (D + 3)) * sizeof(float)));
        CHECK(!memcmp(silus[0], silus[b], (size_t)(T * I) * sizeof(float)));
    }
    for (int b = 0; b < CT_NBE; b++) {
        free(adds[b]);
        free(silus[b]);
    }
    free(x0);
    free(y0);
    free(gu);
    free(sref);
    free(gx);
    free(gxh);
}

/* ---- rope ---- */

static void test_rope(backend *be[CT_NBE], bool neox, int hd, int rot, int with_k) {
    const int64_t T = 7, nq = 4, nk = 2, max_pos = 64;
    const int64_t W = (nq + 2 * nk) * hd;  /* a fused qkv buffer */
    float *table = malloc((size_t)(max_pos * rot) * sizeof(float));
    for (int64_t p = 0; p < max_pos; p++)
        for (int i = 0; i < rot / 2; i++) {
            double f = pow(10000.0, -2.0 * i / rot);
            table[p * rot + i] = (float)cos(p * f);
            table[p * rot + rot / 2 + i] = (float)sin(p * f);
        }
    int32_t pos[7] = {0, 1, 2, 63, 17, 17, 40};
    float *qkv0 = malloc((size_t)(T * W) * sizeof(float));
    ct_fill(qkv0, T * W, 1.0f);

    /* reference on a copy, in double */
    double *ref = malloc((size_t)(T * W) * sizeof(double));
    for (int64_t i = 0; i < T * W; i++) ref[i] = qkv0[i];
    for (int64_t t = 0; t < T; t++) {
        const float *cs = table + pos[t] * rot, *sn = cs + rot / 2;
        int64_t heads = with_k ? nq + nk : nq;  /* q then k heads; v untouched */
        for (int64_t h = 0; h < heads; h++) {
            double *x = ref + t * W + h * hd;
            for (int i = 0; i < rot / 2; i++) {
                int a = neox ? i : 2 * i, b = neox ? i + rot / 2 : 2 * i + 1;
                double x1 = x[a], x2 = x[b];
                x[a] = x1 * cs[i] - x2 * sn[i];
                x[b] = x2 * cs[i] + x1 * sn[i];
            }
        }
    }
    float *res[CT_NBE];
    for (int b = 0; b < CT_NBE; b++) {
        res[b] = malloc((size_t)(T * W) * sizeof(float));
        memcpy(res[b], qkv0, (size_t)(T * W) * sizeof(float));
        tensor qkv = tensor_2d(DTYPE_F32, res[b], T, W);
        tensor q = tensor_cols(&qkv, 0, nq * hd), k = tensor_cols(&qkv, nq * hd, nk * hd);
        tensor pt = tensor_1d(DTYPE_I32, pos, T), cst = tensor_2d(DTYPE_F32, table, max_pos, rot);
        be[b]->ops->rope(be[b], &q, with_k ? &k : NULL, &pt, &cst, hd, rot, neox);
        CHECK_OK(be[b]->ops->synchronize(be[b]));
        CHECK_MSG(count_bad(res[b], W, ref, T, W, 0, 2e-6) == 0, "rope neox=%d hd=%d rot=%d k=%d backend %d",
                  neox, hd, rot, with_k, b);
    }
    for (int b = 1; b < CT_NBE; b++) CHECK(!memcmp(res[0], res[b], (size_t)(T * W) * sizeof(float)));

    /* position past the table */
    pos[3] = 64;
    tensor qkv = tensor_2d(DTYPE_F32, res[0], T, W);
    tensor q = tensor_cols(&qkv, 0, nq * hd);
    tensor pt = tensor_1d(DTYPE_I32, pos, T), cst = tensor_2d(DTYPE_F32, table, max_pos, rot);
    be[0]->ops->rope(be[0], &q, NULL, &pt, &cst, hd, rot, neox);
    CHECK(be[0]->ops->synchronize(be[0]) == VLLM_ERR_BACKEND);
    be[0]->ops->rope(be[0], &q, NULL, &pt, &cst, hd, hd + 2, neox);
    CHECK(be[0]->ops->synchronize(be[0]) == VLLM_ERR_BACKEND);

    for (int b = 0; b < CT_NBE; b++) free(res[b]);
    free(table);
    free(qkv0);
    free(ref);
}

/* The vectorisable f16 widening of the kernels agrees with tensor.h on all 65536 values. */
static void test_f16_widening(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float a = cpu_f16_to_f32((uint16_t)h), b = f16_to_f32((uint16_t)h);
        uint32_t ua, ub;
        memcpy(&ua, &a, 4);
        memcpy(&ub, &b, 4);
        if (ua != ub && !(isnan(a) && isnan(b))) bad++;
    }
    CHECK_MSG(bad == 0, "%d f16 values widen differently", bad);
    float f;
    uint16_t bf[8] = {0x3f80, 0xc000, 0x7f80};
    cpu_widen(&f, &bf[1], DTYPE_BF16, 1);
    CHECK(f == -2.0f);
    CHECK(cpu_load(bf, DTYPE_BF16, 2) == INFINITY);
}

int main(void) {
    ct_seed(2);
    test_f16_widening();
    backend *be[CT_NBE];
    ct_backends(be);
    test_memory(be[0]);
    test_memory(be[1]);
    for (int d = 0; d < 3; d++) {
        dtype dt = CT_WDTYPES[d];
        test_embedding(be, dt);
        test_rms_norm(be, dt, 7, 67, 67, 0, 0);
        test_rms_norm(be, dt, 1, 896, 896, 0, 1);
        test_rms_norm(be, dt, 5, 4 * 16, 16, 24, 1);   /* per-head norm on a strided q view */
        test_rms_norm(be, dt, 33, 3 * 50, 50, 0, 0);
    }
    test_add_silu_gather(be);
    test_norm(be);
    test_activations(be);
    test_rope(be, true, 16, 16, 1);
    test_rope(be, true, 16, 8, 1);    /* partial rotary */
    test_rope(be, false, 16, 16, 1);
    test_rope(be, false, 12, 6, 0);   /* odd number of pairs, q only */
    test_rope(be, true, 64, 64, 1);
    ct_backends_free(be);
    TEST_END();
}
