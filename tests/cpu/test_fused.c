/*
 * test_fused.c: the CPU backend's fused ops (add_rms_norm, add_norm,
 * qk_norm_rope_kv and _ex with each norm kind, linear_fused with each norm
 * kind and gate activation) give exactly what their single ops give in
 * sequence, on strided q/k/v views of one qkv buffer, with a padding token
 * (slot -1) that must leave the cache alone; linear_fused with each of its
 * stages and its refusals; with 1 and N threads; and the CPU's supports()
 * answers.
 */
#include <math.h>

#include "cpu_test_util.h"

enum { T = 5, D = 48, NQ = 4, NK = 2, HD = 16, ROT = 16, NB = 3, BS = 4, MAXPOS = 64 };

static void test_add_rms_norm(backend *be) {
    float x1[T * D], x2[T * D], y[T * D], w[D], h1[T * D], h2[T * D];
    ct_fill(x1, T * D, 2.0f);
    ct_fill(y, T * D, 1.0f);
    ct_fill(w, D, 1.0f);
    memcpy(x2, x1, sizeof x1);
    tensor X1 = tensor_2d(DTYPE_F32, x1, T, D), X2 = tensor_2d(DTYPE_F32, x2, T, D);
    tensor Y = tensor_2d(DTYPE_F32, y, T, D), W = tensor_1d(DTYPE_F32, w, D);
    tensor H1 = tensor_2d(DTYPE_F32, h1, T, D), H2 = tensor_2d(DTYPE_F32, h2, T, D);
    be->ops->add_rms_norm(be, &X1, &Y, &W, 1e-6f, &H1);
    be->ops->add(be, &X2, &Y);
    be->ops->rms_norm(be, &X2, &W, 1e-6f, &H2);
    CHECK_OK(be->ops->synchronize(be));
    CHECK(!memcmp(x1, x2, sizeof x1));
    CHECK(!memcmp(h1, h2, sizeof h1));
}

/* add_norm of each kind is add then norm */
static void test_add_norm(backend *be) {
    for (int kind = 0; kind < BE_NORM_COUNT; kind++) {
        float x1[T * D], x2[T * D], y[T * D], w[D], b[D], h1[T * D], h2[T * D];
        ct_fill(x1, T * D, 2.0f);
        ct_fill(y, T * D, 1.0f);
        ct_fill(w, D, 1.0f);
        ct_fill(b, D, 1.0f);
        memcpy(x2, x1, sizeof x1);
        tensor X1 = tensor_2d(DTYPE_F32, x1, T, D), X2 = tensor_2d(DTYPE_F32, x2, T, D);
        tensor Y = tensor_2d(DTYPE_F32, y, T, D), W = tensor_1d(DTYPE_F32, w, D), B = tensor_1d(DTYPE_F32, b, D);
        tensor H1 = tensor_2d(DTYPE_F32, h1, T, D), H2 = tensor_2d(DTYPE_F32, h2, T, D);
        be_norm n = {.kind = (be_norm_kind)kind, .w = &W, .b = kind == BE_NORM_LAYER ? &B : NULL, .eps = 1e-5f};
        be->ops->add_norm(be, &X1, &Y, &n, &H1);
        be->ops->add(be, &X2, &Y);
        be->ops->norm(be, &X2, &n, &H2);
        CHECK_OK(be->ops->synchronize(be));
        CHECK_MSG(!memcmp(x1, x2, sizeof x1) && !memcmp(h1, h2, sizeof h1), "add_norm kind %d", kind);
    }
    float x[T * D];
    tensor X = tensor_2d(DTYPE_F32, x, T, D);
    be->ops->add_norm(be, &X, &X, NULL, &X);
    CHECK(be->ops->synchronize(be) != VLLM_OK);
}

/* norm_add_norm of each kind is norm (y in place), then add_norm, or add without nx */
static void test_norm_add_norm(backend *be) {
    for (int kind = 0; kind < BE_NORM_COUNT; kind++)
        for (int with_nx = 0; with_nx < 2; with_nx++)
            for (int no_w = 0; no_w < 2; no_w++) {
                float x1[T * D], x2[T * D], y1[T * D], y2[T * D], w[D], wy[D], b[D], h1[T * D], h2[T * D];
                ct_fill(x1, T * D, 2.0f);
                ct_fill(y1, T * D, 1.0f);
                ct_fill(w, D, 1.0f);
                ct_fill(wy, D, 0.5f);
                ct_fill(b, D, 1.0f);
                memcpy(x2, x1, sizeof x1);
                memcpy(y2, y1, sizeof y1);
                float y0[T * D];
                memcpy(y0, y1, sizeof y1);
                memset(h1, 0, sizeof h1);
                memset(h2, 0, sizeof h2);
                tensor X1 = tensor_2d(DTYPE_F32, x1, T, D), X2 = tensor_2d(DTYPE_F32, x2, T, D);
                tensor Y1 = tensor_2d(DTYPE_F32, y1, T, D), Y2 = tensor_2d(DTYPE_F32, y2, T, D);
                tensor W = tensor_1d(DTYPE_F32, w, D), WY = tensor_1d(DTYPE_F32, wy, D), B = tensor_1d(DTYPE_F32, b, D);
                tensor H1 = tensor_2d(DTYPE_F32, h1, T, D), H2 = tensor_2d(DTYPE_F32, h2, T, D);
                be_norm nx = {.kind = (be_norm_kind)kind, .w = no_w ? NULL : &W, .b = kind == BE_NORM_LAYER ? &B : NULL,
                              .eps = 1e-5f};
                be_norm ny = {.kind = (be_norm_kind)kind, .w = no_w ? NULL : &WY, .b = kind == BE_NORM_LAYER ? &B : NULL,
                              .eps = 0.5f};
                be->ops->norm_add_norm(be, &X1, &Y1, &ny, with_nx ? &nx : NULL, &H1);
                be->ops->norm(be, &Y2, &ny, &Y2);
                if (with_nx) be->ops->add_norm(be, &X2, &Y2, &nx, &H2);
                else be->ops->add(be, &X2, &Y2);
                CHECK_OK(be->ops->synchronize(be));
                CHECK_MSG(!memcmp(x1, x2, sizeof x1) && !memcmp(y1, y2, sizeof y1) && !memcmp(h1, h2, sizeof h1),
                          "norm_add_norm kind %d, nx %d, no weights %d", kind, with_nx, no_w);
                CHECK_MSG(memcmp(y0, y1, sizeof y0) && (!with_nx || h1[0] != 0.0f), "norm_add_norm wrote y and h");
            }
    float x[T * D];
    memset(x, 0, sizeof x);
    tensor X = tensor_2d(DTYPE_F32, x, T, D);
    be->ops->norm_add_norm(be, &X, &X, NULL, NULL, &X); /* no ny */
    CHECK(be->ops->synchronize(be) != VLLM_OK);
    be_norm n = {.kind = BE_NORM_RMS, .eps = 1e-6f};
    be->ops->norm_add_norm(be, &X, &X, &n, &n, NULL); /* nx without out */
    CHECK(be->ops->synchronize(be) != VLLM_OK);
}

static void test_qk_norm_rope_kv(backend *be, bool with_norm) {
    enum { W = (NQ + 2 * NK) * HD };
    static float qkv1[T * W], qkv2[T * W], kc1[NB * BS * NK * HD], vc1[NB * BS * NK * HD], kc2[NB * BS * NK * HD],
        vc2[NB * BS * NK * HD], cs[MAXPOS * ROT];
    float qn[HD], kn[HD];
    ct_fill(qkv1, T * W, 1.5f);
    memcpy(qkv2, qkv1, sizeof qkv1);
    ct_fill(kc1, NB * BS * NK * HD, 1.0f);
    memcpy(kc2, kc1, sizeof kc1);
    static float kc0[NB * BS * NK * HD];
    memcpy(kc0, kc1, sizeof kc1);
    ct_fill(vc1, NB * BS * NK * HD, 1.0f);
    memcpy(vc2, vc1, sizeof vc1);
    ct_fill(qn, HD, 1.0f);
    ct_fill(kn, HD, 1.0f);
    for (int p = 0; p < MAXPOS; p++)
        for (int i = 0; i < ROT / 2; i++) {
            double f = p * pow(10000.0, -2.0 * i / ROT);
            cs[p * ROT + i] = (float)cos(f);
            cs[p * ROT + ROT / 2 + i] = (float)sin(f);
        }
    int32_t pos[T] = {3, 4, 5, 0, 9};
    int64_t slots[T] = {3, 4, 5, -1, 9}; /* token 3 is padding */
    int32_t qsl[3] = {0, 3, 5}, seq_lens[2] = {6, 10}, bt[2 * NB] = {0, 1, 2, 0, 1, 2};
    attn_meta m = {
        .num_seqs = 2, .num_tokens = T, .max_query_len = 3, .max_seq_len = 10, .block_size = BS,
        .max_blocks_per_seq = NB,
        .query_start_loc = tensor_1d(DTYPE_I32, qsl, 3), .seq_lens = tensor_1d(DTYPE_I32, seq_lens, 2),
        .block_tables = tensor_2d(DTYPE_I32, bt, 2, NB), .slot_mapping = tensor_1d(DTYPE_I64, slots, T),
    };
    int64_t cshape[4] = {NB, BS, NK, HD};
    tensor KC1 = tensor_make(DTYPE_F32, kc1, 4, cshape), VC1 = tensor_make(DTYPE_F32, vc1, 4, cshape);
    tensor KC2 = tensor_make(DTYPE_F32, kc2, 4, cshape), VC2 = tensor_make(DTYPE_F32, vc2, 4, cshape);
    tensor P = tensor_1d(DTYPE_I32, pos, T), CS = tensor_2d(DTYPE_F32, cs, MAXPOS, ROT);
    tensor QN = tensor_1d(DTYPE_F32, qn, HD), KN = tensor_1d(DTYPE_F32, kn, HD);
    tensor A1 = tensor_2d(DTYPE_F32, qkv1, T, W), A2 = tensor_2d(DTYPE_F32, qkv2, T, W);
    tensor q1 = tensor_cols(&A1, 0, NQ * HD), k1 = tensor_cols(&A1, NQ * HD, NK * HD),
           v1 = tensor_cols(&A1, (NQ + NK) * HD, NK * HD);
    tensor q2 = tensor_cols(&A2, 0, NQ * HD), k2 = tensor_cols(&A2, NQ * HD, NK * HD),
           v2 = tensor_cols(&A2, (NQ + NK) * HD, NK * HD);
    be->ops->qk_norm_rope_kv(be, &q1, &k1, &v1, with_norm ? &QN : NULL, with_norm ? &KN : NULL, 1e-6f, &P, &CS, HD,
                             ROT, true, &KC1, &VC1, &m);
    if (with_norm) {
        be->ops->rms_norm(be, &q2, &QN, 1e-6f, &q2);
        be->ops->rms_norm(be, &k2, &KN, 1e-6f, &k2);
    }
    be->ops->rope(be, &q2, &k2, &P, &CS, HD, ROT, true);
    be->ops->kv_write(be, &k2, &v2, &KC2, &VC2, &m);
    CHECK_OK(be->ops->synchronize(be));
    CHECK(!memcmp(qkv1, qkv2, sizeof qkv1));
    CHECK(!memcmp(kc1, kc2, sizeof kc1));
    CHECK(!memcmp(vc1, vc2, sizeof vc1));
    /* slots 0-2 and 6-8 belong to no token (the padding one has slot -1): untouched */
    CHECK(!memcmp(kc1, kc0, 3 * NK * HD * sizeof(float)));
    CHECK(!memcmp(kc1 + 6 * NK * HD, kc0 + 6 * NK * HD, 3 * NK * HD * sizeof(float)));
}

/* linear_fused: norm -> linear -> silu_mul / accumulate, against the ops in sequence */
static void test_linear_fused(backend *be) {
    enum { IN = 40, OUT = 24 };
    static float x[T * IN], wt[OUT * IN], b[OUT], nw[IN], y1[T * OUT], y2[T * OUT], h[T * IN], mid[T * OUT],
        mid2[T * OUT];
    ct_fill(x, T * IN, 2.0f);
    ct_fill(wt, OUT * IN, 0.5f);
    ct_fill(b, OUT, 1.0f);
    ct_fill(nw, IN, 1.0f);
    tensor X = tensor_2d(DTYPE_F32, x, T, IN), Wt = tensor_2d(DTYPE_F32, wt, OUT, IN), B = tensor_1d(DTYPE_F32, b, OUT);
    tensor NW = tensor_1d(DTYPE_F32, nw, IN), H = tensor_2d(DTYPE_F32, h, T, IN);
    tensor MID = tensor_2d(DTYPE_F32, mid, T, OUT), MID2 = tensor_2d(DTYPE_F32, mid2, T, OUT);
    const tensor *ws[1] = {&Wt}, *bs[1] = {&B};
    be_linear *lin = NULL;
    CHECK_OK(be->ops->linear_create(be, ws, bs, 1, &lin));
    for (int mode = 0; mode < 4; mode++) { /* plain, norm, norm + silu_mul, accumulate */
        const bool norm = mode == 1 || mode == 2, glu = mode == 2, acc = mode == 3;
        const int64_t n = glu ? OUT / 2 : OUT;
        tensor Y1 = tensor_2d(DTYPE_F32, y1, T, n), Y2 = tensor_2d(DTYPE_F32, y2, T, n);
        ct_fill(y1, T * OUT, 1.0f);
        memcpy(y2, y1, sizeof y1);
        linear_fuse f = {.norm_w = norm ? &NW : NULL, .eps = 1e-5f, .silu_mul = glu, .accumulate = acc, .h = &H,
                         .mid = &MID};
        be->ops->linear_fused(be, lin, &X, &f, &Y1);
        const tensor *in = &X;
        float hx[T * IN];
        tensor HX = tensor_2d(DTYPE_F32, hx, T, IN);
        if (norm) {
            be->ops->rms_norm(be, &X, &NW, 1e-5f, &HX);
            in = &HX;
        }
        if (glu) {
            be->ops->linear(be, lin, in, &MID2);
            be->ops->silu_mul(be, &MID2, &Y2);
        } else if (acc) {
            be->ops->linear(be, lin, in, &MID2);
            be->ops->add(be, &Y2, &MID2);
        } else {
            be->ops->linear(be, lin, in, &Y2);
        }
        CHECK_OK(be->ops->synchronize(be));
        CHECK_MSG(!memcmp(y1, y2, sizeof(float) * (size_t)(T * n)), "linear_fused mode %d", mode);
        /* h receives the normalised rows (backend.h: the MoE block's experts read it after the router) */
        if (norm) CHECK_MSG(!memcmp(h, hx, sizeof hx), "linear_fused mode %d: h is not rms_norm(x)", mode);
    }
    /* refused: no scratch for the norm; silu_mul with accumulate */
    tensor Y = tensor_2d(DTYPE_F32, y1, T, OUT);
    linear_fuse bad1 = {.norm_w = &NW, .eps = 1e-5f};
    be->ops->linear_fused(be, lin, &X, &bad1, &Y);
    CHECK(be->ops->synchronize(be) != VLLM_OK);
    CHECK_MSG(strstr(vllm_last_error(), "h scratch") != NULL, "%s", vllm_last_error());
    linear_fuse bad2 = {.silu_mul = true, .accumulate = true, .mid = &MID};
    be->ops->linear_fused(be, lin, &X, &bad2, &Y);
    CHECK(be->ops->synchronize(be) != VLLM_OK);
    CHECK_MSG(strstr(vllm_last_error(), "do not combine") != NULL, "%s", vllm_last_error());
    be->ops->linear_free(be, lin);
}

/* qk_norm_rope_kv_ex: Gemma 3's (1 + w) q/k norms are norm (in place), rope, kv_write;
 * with BE_NORM_RMS it is qk_norm_rope_kv */
static void test_qk_norm_rope_kv_ex(backend *be, be_norm_kind kind) {
    enum { W = (NQ + 2 * NK) * HD, CN = NB * BS * NK * HD };
    static float qkv1[T * W], qkv2[T * W], kc1[CN], vc1[CN], kc2[CN], vc2[CN], cs[MAXPOS * ROT];
    float qn[HD], kn[HD];
    ct_fill(qkv1, T * W, 1.5f);
    memcpy(qkv2, qkv1, sizeof qkv1);
    ct_fill(kc1, CN, 1.0f);
    memcpy(kc2, kc1, sizeof kc1);
    ct_fill(vc1, CN, 1.0f);
    memcpy(vc2, vc1, sizeof vc1);
    ct_fill(qn, HD, 0.5f);
    ct_fill(kn, HD, 0.5f);
    for (int p = 0; p < MAXPOS; p++)
        for (int i = 0; i < ROT / 2; i++) {
            double f = p * pow(10000.0, -2.0 * i / ROT);
            cs[p * ROT + i] = (float)cos(f);
            cs[p * ROT + ROT / 2 + i] = (float)sin(f);
        }
    int32_t pos[T] = {3, 4, 5, 0, 9};
    int64_t slots[T] = {3, 4, 5, -1, 9};
    attn_meta m = {.num_seqs = 1, .num_tokens = T, .block_size = BS, .max_blocks_per_seq = NB,
                   .slot_mapping = tensor_1d(DTYPE_I64, slots, T)};
    int64_t cshape[4] = {NB, BS, NK, HD};
    tensor KC1 = tensor_make(DTYPE_F32, kc1, 4, cshape), VC1 = tensor_make(DTYPE_F32, vc1, 4, cshape);
    tensor KC2 = tensor_make(DTYPE_F32, kc2, 4, cshape), VC2 = tensor_make(DTYPE_F32, vc2, 4, cshape);
    tensor P = tensor_1d(DTYPE_I32, pos, T), CS = tensor_2d(DTYPE_F32, cs, MAXPOS, ROT);
    tensor QN = tensor_1d(DTYPE_F32, qn, HD), KN = tensor_1d(DTYPE_F32, kn, HD);
    tensor A1 = tensor_2d(DTYPE_F32, qkv1, T, W), A2 = tensor_2d(DTYPE_F32, qkv2, T, W);
    tensor q1 = tensor_cols(&A1, 0, NQ * HD), k1 = tensor_cols(&A1, NQ * HD, NK * HD),
           v1 = tensor_cols(&A1, (NQ + NK) * HD, NK * HD);
    tensor q2 = tensor_cols(&A2, 0, NQ * HD), k2 = tensor_cols(&A2, NQ * HD, NK * HD),
           v2 = tensor_cols(&A2, (NQ + NK) * HD, NK * HD);
    const be_norm nq = {.kind = kind, .w = &QN, .eps = 1e-6f}, nk = {.kind = kind, .w = &KN, .eps = 1e-6f};
    be->ops->qk_norm_rope_kv_ex(be, &q1, &k1, &v1, &nq, &nk, &P, &CS, HD, ROT, false, &KC1, &VC1, &m);
    if (kind == BE_NORM_RMS) {
        be->ops->qk_norm_rope_kv(be, &q2, &k2, &v2, &QN, &KN, 1e-6f, &P, &CS, HD, ROT, false, &KC2, &VC2, &m);
    } else {
        be->ops->norm(be, &q2, &nq, &q2);
        be->ops->norm(be, &k2, &nk, &k2);
        be->ops->rope(be, &q2, &k2, &P, &CS, HD, ROT, false);
        be->ops->kv_write(be, &k2, &v2, &KC2, &VC2, &m);
    }
    CHECK_OK(be->ops->synchronize(be));
    CHECK_MSG(!memcmp(qkv1, qkv2, sizeof qkv1) && !memcmp(kc1, kc2, sizeof kc1) && !memcmp(vc1, vc2, sizeof vc1),
              "qk_norm_rope_kv_ex kind %d", (int)kind);
    /* the offset changes the result (it is not silently plain RMSNorm) */
    if (kind == BE_NORM_RMS_OFFSET) {
        memcpy(qkv2, qkv1, sizeof qkv1);
        const be_norm plain = {.kind = BE_NORM_RMS, .w = &QN, .eps = 1e-6f};
        be->ops->norm(be, &q2, &plain, &q2);
        be->ops->norm(be, &q1, &nq, &q1);
        CHECK_OK(be->ops->synchronize(be));
        CHECK(memcmp(qkv1, qkv2, sizeof qkv1) != 0);
    }
}

/* linear_fused with Gemma's stages: the (1 + w) norm and the GELU-tanh gate; OPT's LayerNorm */
static void test_linear_fused_kinds(backend *be) {
    enum { IN = 40, OUT = 24 };
    static float x[T * IN], wt[OUT * IN], nw[IN], nb[IN], y1[T * OUT], y2[T * OUT], h[T * IN], hx[T * IN],
        mid[T * OUT], mid2[T * OUT];
    ct_fill(x, T * IN, 2.0f);
    ct_fill(wt, OUT * IN, 0.5f);
    ct_fill(nw, IN, 0.5f);
    ct_fill(nb, IN, 0.5f);
    tensor X = tensor_2d(DTYPE_F32, x, T, IN), Wt = tensor_2d(DTYPE_F32, wt, OUT, IN);
    tensor NW = tensor_1d(DTYPE_F32, nw, IN), NB_ = tensor_1d(DTYPE_F32, nb, IN), H = tensor_2d(DTYPE_F32, h, T, IN);
    tensor HX = tensor_2d(DTYPE_F32, hx, T, IN);
    tensor MID = tensor_2d(DTYPE_F32, mid, T, OUT), MID2 = tensor_2d(DTYPE_F32, mid2, T, OUT);
    const tensor *ws[1] = {&Wt};
    be_linear *lin = NULL;
    CHECK_OK(be->ops->linear_create(be, ws, NULL, 1, &lin));
    for (int mode = 0; mode < 4; mode++) { /* offset norm + gelu gate; layer norm; layer norm no affine + relu gate; gelu gate */
        const be_norm_kind kind = mode == 0 ? BE_NORM_RMS_OFFSET : mode == 3 ? BE_NORM_RMS : BE_NORM_LAYER;
        const be_act act = mode == 0 || mode == 3 ? BE_ACT_GELU_TANH : mode == 2 ? BE_ACT_RELU : BE_ACT_SILU;
        const bool glu = mode != 1, has_norm = mode != 3;
        const int64_t n = glu ? OUT / 2 : OUT;
        tensor Y1 = tensor_2d(DTYPE_F32, y1, T, n), Y2 = tensor_2d(DTYPE_F32, y2, T, n);
        linear_fuse f = {.norm_w = mode < 2 ? &NW : NULL, .eps = 1e-5f, .silu_mul = glu, .h = &H, .mid = &MID,
                         .act = act, .norm_kind = kind, .norm_b = mode == 1 ? &NB_ : NULL};
        be->ops->linear_fused(be, lin, &X, &f, &Y1);
        const tensor *in = &X;
        if (has_norm) {
            const be_norm nn = {.kind = kind, .w = f.norm_w, .b = f.norm_b, .eps = 1e-5f};
            be->ops->norm(be, &X, &nn, &HX);
            in = &HX;
        }
        if (glu) {
            be->ops->linear(be, lin, in, &MID2);
            be->ops->act_mul(be, act, &MID2, &Y2);
        } else {
            be->ops->linear(be, lin, in, &Y2);
        }
        CHECK_OK(be->ops->synchronize(be));
        CHECK_MSG(!memcmp(y1, y2, sizeof(float) * (size_t)(T * n)), "linear_fused kinds mode %d", mode);
        if (has_norm) CHECK_MSG(!memcmp(h, hx, sizeof h), "linear_fused kinds mode %d: h is not norm(x)", mode);
    }
    /* refused: an activation out of range */
    tensor Y = tensor_2d(DTYPE_F32, y1, T, OUT / 2);
    linear_fuse bad = {.silu_mul = true, .mid = &MID, .act = BE_ACT_COUNT};
    be->ops->linear_fused(be, lin, &X, &bad, &Y);
    CHECK(be->ops->synchronize(be) != VLLM_OK);
    be->ops->linear_free(be, lin);
}

/* linear_fused's pending residual add (res): res_out = x + res_norm(res), then the stages on res_out, against
 * norm_add_norm (on copies) and linear_fused; x and res unchanged; res without res_norm or res_out refused */
static void test_linear_fused_res(backend *be) {
    enum { IN = 40, OUT = 24 };
    static float x[T * IN], x0[T * IN], r[T * IN], r0[T * IN], xc[T * IN], rc[T * IN], wt[OUT * IN], nw[IN], rw[IN],
        y1[T * OUT / 2], y2[T * OUT / 2], h[T * IN], hx[T * IN], ro[T * IN], mid[T * OUT];
    ct_fill(x, T * IN, 2.0f);
    ct_fill(r, T * IN, 3.0f);
    ct_fill(wt, OUT * IN, 0.5f);
    ct_fill(nw, IN, 0.5f);
    ct_fill(rw, IN, 0.5f);
    memcpy(x0, x, sizeof x);
    memcpy(r0, r, sizeof r);
    tensor X = tensor_2d(DTYPE_F32, x, T, IN), R = tensor_2d(DTYPE_F32, r, T, IN), Wt = tensor_2d(DTYPE_F32, wt, OUT, IN);
    tensor XC = tensor_2d(DTYPE_F32, xc, T, IN), RC = tensor_2d(DTYPE_F32, rc, T, IN);
    tensor NW = tensor_1d(DTYPE_F32, nw, IN), RW = tensor_1d(DTYPE_F32, rw, IN), H = tensor_2d(DTYPE_F32, h, T, IN);
    tensor HX = tensor_2d(DTYPE_F32, hx, T, IN), RO = tensor_2d(DTYPE_F32, ro, T, IN);
    tensor MID = tensor_2d(DTYPE_F32, mid, T, OUT);
    tensor Y1 = tensor_2d(DTYPE_F32, y1, T, OUT / 2), Y2 = tensor_2d(DTYPE_F32, y2, T, OUT / 2);
    const tensor *ws[1] = {&Wt};
    be_linear *lin = NULL;
    CHECK_OK(be->ops->linear_create(be, ws, NULL, 1, &lin));
    for (int k = 0; k < 2; k++) { /* Gemma's (1 + w) norms and GELU-tanh gate; plain RMSNorm (GLM-4) */
        const be_norm_kind kind = k == 0 ? BE_NORM_RMS_OFFSET : BE_NORM_RMS;
        const be_norm rn = {.kind = kind, .w = &RW, .eps = 1e-6f}, xn = {.kind = kind, .w = &NW, .eps = 1e-5f};
        linear_fuse f = {.norm_w = &NW, .eps = 1e-5f, .silu_mul = true, .h = &H, .mid = &MID,
                         .act = k == 0 ? BE_ACT_GELU_TANH : BE_ACT_SILU, .norm_kind = kind, .res = &R,
                         .res_norm = &rn, .res_out = &RO};
        be->ops->linear_fused(be, lin, &X, &f, &Y1);
        memcpy(xc, x0, sizeof xc);
        memcpy(rc, r0, sizeof rc);
        be->ops->norm_add_norm(be, &XC, &RC, &rn, &xn, &HX); /* xc += rn(rc); hx = xn(xc) */
        linear_fuse g = f;
        g.res = NULL;
        g.res_norm = NULL;
        g.res_out = NULL;
        g.norm_w = NULL;
        g.norm_kind = BE_NORM_RMS;
        be->ops->linear_fused(be, lin, &HX, &g, &Y2);
        CHECK_OK(be->ops->synchronize(be));
        CHECK_MSG(!memcmp(ro, xc, sizeof ro), "linear_fused res %d: res_out is not x + res_norm(res)", k);
        CHECK_MSG(!memcmp(h, hx, sizeof h), "linear_fused res %d: h is not norm(x + res_norm(res))", k);
        CHECK_MSG(!memcmp(y1, y2, sizeof y1), "linear_fused res %d", k);
        CHECK_MSG(!memcmp(x, x0, sizeof x) && !memcmp(r, r0, sizeof r), "linear_fused res %d: x or res changed", k);
    }
    linear_fuse bad = {.norm_w = &NW, .h = &H, .res = &R, .res_out = &RO}; /* no res_norm */
    be->ops->linear_fused(be, lin, &X, &bad, &Y1);
    CHECK(be->ops->synchronize(be) != VLLM_OK);
    CHECK_MSG(strstr(vllm_last_error(), "res_norm") != NULL, "%s", vllm_last_error());
    CHECK(backend_supports(be, BE_OP_LINEAR_FUSED, &bad) == BE_UNSUPPORTED);
    be->ops->linear_free(be, lin);
}

/* supports(): the CPU runs everything in range, natively or as composites */
static void test_supports(backend *be) {
    attn_params ap = {.scale = 0.1f, .num_heads = 8, .num_kv_heads = 2, .head_dim = 256, .softcap = 50.0f};
    CHECK(backend_supports(be, BE_OP_ATTENTION, &ap) == BE_NATIVE);
    CHECK_OK(backend_require(be, BE_OP_ATTENTION, &ap, "Gemma2 attention"));
    ap.head_dim = CPU_MAX_HEAD_DIM + 1;
    CHECK(backend_supports(be, BE_OP_ATTENTION, &ap) == BE_UNSUPPORTED);
    vllm_status st = backend_require(be, BE_OP_ATTENTION, &ap, "Test attention");
    CHECK(st == VLLM_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(vllm_last_error(), "Test attention") && strstr(vllm_last_error(), "head_dim 1025") &&
                  strstr(vllm_last_error(), "'cpu'"),
              "%s", vllm_last_error());
    be_act a = BE_ACT_GELU_TANH;
    CHECK(backend_supports(be, BE_OP_ACT_MUL, &a) == BE_NATIVE);
    CHECK(backend_supports(be, BE_OP_ACTIVATION, &a) == BE_NATIVE);
    a = BE_ACT_COUNT;
    CHECK(backend_supports(be, BE_OP_ACT_MUL, &a) == BE_UNSUPPORTED);
    be_norm n = {.kind = BE_NORM_LAYER};
    CHECK(backend_supports(be, BE_OP_NORM, &n) == BE_NATIVE);
    CHECK(backend_supports(be, BE_OP_ADD_NORM, &n) == BE_COMPOSITE);
    CHECK(backend_supports(be, BE_OP_QK_NORM_ROPE_KV, &n) == BE_COMPOSITE);
    linear_fuse f = {.silu_mul = true, .act = BE_ACT_GELU_TANH, .norm_kind = BE_NORM_RMS_OFFSET};
    CHECK(backend_supports(be, BE_OP_LINEAR_FUSED, &f) == BE_COMPOSITE);
    CHECK(backend_supports(be, BE_OP_SOFTCAP, NULL) == BE_NATIVE);
    CHECK(backend_supports(be, BE_OP_COUNT, NULL) == BE_UNSUPPORTED);
    CHECK(!strcmp(be_op_name(BE_OP_SOFTCAP), "softcap") && !strcmp(be_act_name(BE_ACT_GELU_TANH), "gelu_pytorch_tanh"));
}

int main(void) {
    backend *be[CT_NBE];
    ct_backends(be);
    for (int b = 0; b < CT_NBE; b++) {
        ct_seed(11 + (uint64_t)b);
        test_add_rms_norm(be[b]);
        test_qk_norm_rope_kv(be[b], true);
        test_qk_norm_rope_kv(be[b], false);
        test_linear_fused(be[b]);
        test_add_norm(be[b]);
        test_norm_add_norm(be[b]);
        for (int k = 0; k < BE_NORM_COUNT; k++) test_qk_norm_rope_kv_ex(be[b], (be_norm_kind)k);
        test_linear_fused_kinds(be[b]);
        test_linear_fused_res(be[b]);
    }
    test_supports(be[0]);
    ct_backends_free(be);
    TEST_END();
}
