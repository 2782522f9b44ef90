/*
 * test_linear.c: the CPU linear op against a naive double-precision
 * reference, for F32, F16 and BF16 weights (also misaligned), several parts
 * with and without biases, odd shapes, strided x and y, and 1 vs 4 threads
 * (which must agree bit for bit); a token's output does not depend on the
 * batch it is in, and every output is the documented dot product (cpu_linear_dot_ref) bit for bit. Also linear_create's argument checks and
 * the sticky error of a bad call.
 */
#include <stdlib.h>
#include <string.h>

#include "cpu_test_util.h"

typedef struct lin_case {
    int64_t T, in;
    int nparts;
    int64_t outs[3];
    int bias_mask;      /* bit i: part i has a bias */
    int x_pad, y_pad;   /* extra columns: x / y are strided views when > 0 */
    int misalign;       /* weights start at an odd byte offset */
} lin_case;

static void run_case(backend *be[CT_NBE], const lin_case *lc, dtype wdt) {
    const int64_t T = lc->T, in = lc->in;
    const size_t es = dtype_size(wdt);
    int64_t out = 0;
    for (int p = 0; p < lc->nparts; p++) out += lc->outs[p];

    /* weights (and biases) in one byte buffer each, optionally misaligned */
    unsigned char *wbuf[3] = {0}, *bbuf[3] = {0};
    tensor wt[3], bt[3];
    const tensor *wptr[3], *bptr[3];
    dtype bdt[3] = {DTYPE_F32, wdt, DTYPE_BF16};
    for (int p = 0; p < lc->nparts; p++) {
        int64_t n = lc->outs[p] * in;
        wbuf[p] = malloc((size_t)n * es + 8);
        unsigned char *w = wbuf[p] + (lc->misalign ? 1 + (wdt == DTYPE_F32) : 0);
        for (int64_t i = 0; i < n; i++) ct_store(w, wdt, i, ct_uniform());
        wt[p] = tensor_2d(wdt, w, lc->outs[p], in);
        wptr[p] = &wt[p];
        bptr[p] = NULL;
        if (lc->bias_mask >> p & 1) {
            bbuf[p] = malloc((size_t)lc->outs[p] * 4 + 8);
            for (int64_t i = 0; i < lc->outs[p]; i++) ct_store(bbuf[p], bdt[p], i, ct_uniform());
            bt[p] = tensor_1d(bdt[p], bbuf[p], lc->outs[p]);
            bptr[p] = &bt[p];
        }
    }

    /* x (T, in) as a column view of (T, in + x_pad); y likewise */
    int64_t xw = in + lc->x_pad, yw = out + lc->y_pad;
    float *xbuf = malloc((size_t)(T * xw) * sizeof(float));
    ct_fill(xbuf, T * xw, 1.0f);
    tensor xfull = tensor_2d(DTYPE_F32, xbuf, T, xw);
    tensor x = lc->x_pad ? tensor_cols(&xfull, lc->x_pad / 2, in) : xfull;

    /* reference: double accumulation, plus the magnitude sum for the tolerance */
    double *ref = malloc((size_t)(T * out) * sizeof(double));
    double *mag = malloc((size_t)(T * out) * sizeof(double));
    for (int64_t t = 0; t < T; t++) {
        const float *xr = (const float *)x.data + t * tensor_row_stride(&x);
        for (int p = 0, o = 0; p < lc->nparts; p++) {
            for (int64_t r = 0; r < lc->outs[p]; r++, o++) {
                double s = 0, m = 0;
                for (int64_t k = 0; k < in; k++) {
                    double v = (double)xr[k] * ct_load(wt[p].data, wdt, r * in + k);
                    s += v;
                    m += fabs(v);
                }
                if (bptr[p]) {
                    double b = ct_load(bt[p].data, bdt[p], r);
                    s += b;
                    m += fabs(b);
                }
                ref[t * out + o] = s;
                mag[t * out + o] = m;
            }
        }
    }

    float *ys[CT_NBE];
    for (int b = 0; b < CT_NBE; b++) {
        be_linear *lin = NULL;
        CHECK_OK(be[b]->ops->linear_create(be[b], wptr, lc->bias_mask ? bptr : NULL, lc->nparts, &lin));
        float *ybuf = malloc((size_t)(T * yw) * sizeof(float));
        for (int64_t i = 0; i < T * yw; i++) ybuf[i] = 12345.0f;  /* padding must stay untouched */
        tensor yfull = tensor_2d(DTYPE_F32, ybuf, T, yw);
        tensor y = lc->y_pad ? tensor_cols(&yfull, lc->y_pad, out) : yfull;
        be[b]->ops->linear(be[b], lin, &x, &y);
        CHECK_OK(be[b]->ops->synchronize(be[b]));
        be[b]->ops->linear_free(be[b], lin);

        ys[b] = malloc((size_t)(T * out) * sizeof(float));
        int bad = 0, pad_bad = 0;
        for (int64_t t = 0; t < T; t++) {
            for (int64_t o = 0; o < out; o++) {
                float v = ybuf[t * yw + lc->y_pad + o];
                ys[b][t * out + o] = v;
                double err = fabs((double)v - ref[t * out + o]);
                if (!(err <= CT_REL_TOL * mag[t * out + o] + 1e-30)) {
                    if (bad++ < 3)
                        fprintf(stderr, "  t=%lld o=%lld got %.9g want %.9g\n", (long long)t, (long long)o, v,
                                ref[t * out + o]);
                }
            }
            for (int64_t o = 0; o < lc->y_pad; o++) pad_bad += ybuf[t * yw + o] != 12345.0f;
        }
        CHECK_MSG(bad == 0 && pad_bad == 0, "%s T=%lld in=%lld out=%lld backend %d: %d wrong, %d pad",
                  dtype_name(wdt), (long long)T, (long long)in, (long long)out, b, bad, pad_bad);
        free(ybuf);
    }
    for (int b = 1; b < CT_NBE; b++)
        CHECK_MSG(!memcmp(ys[0], ys[b], (size_t)(T * out) * sizeof(float)),
                  "%s T=%lld in=%lld: backend %d differs from single-thread", dtype_name(wdt), (long long)T,
                  (long long)in, b);

    for (int b = 0; b < CT_NBE; b++) free(ys[b]);
    for (int p = 0; p < lc->nparts; p++) {
        free(wbuf[p]);
        free(bbuf[p]);
    }
    free(xbuf);
    free(ref);
    free(mag);
}

/* The same token gives the same output whatever the batch around it. */
static void test_batch_invariance(backend *be, dtype wdt, int64_t in) {
    const int64_t T = 9, out = 21;
    unsigned char *w = malloc((size_t)(out * in) * dtype_size(wdt));
    for (int64_t i = 0; i < out * in; i++) ct_store(w, wdt, i, ct_uniform());
    tensor wt = tensor_2d(wdt, w, out, in);
    const tensor *wp[1] = {&wt};
    be_linear *lin = NULL;
    CHECK_OK(be->ops->linear_create(be, wp, NULL, 1, &lin));
    float *x = malloc((size_t)(T * in) * sizeof(float)), *y = malloc((size_t)(T * out) * sizeof(float));
    float y1[21];
    ct_fill(x, T * in, 1.0f);
    tensor xt = tensor_2d(DTYPE_F32, x, T, in), yt = tensor_2d(DTYPE_F32, y, T, out);
    be->ops->linear(be, lin, &xt, &yt);
    int same = 1;
    for (int64_t t = 0; t < T; t++) {
        tensor x1 = tensor_rows(&xt, t, 1), y1t = tensor_2d(DTYPE_F32, y1, 1, out);
        be->ops->linear(be, lin, &x1, &y1t);
        same &= !memcmp(y1, y + t * out, sizeof y1);
    }
    CHECK_MSG(same, "%s: token outputs depend on the batch", dtype_name(wdt));
    CHECK_OK(be->ops->synchronize(be));
    be->ops->linear_free(be, lin);
    free(w);
    free(x);
    free(y);
}

/* Every output equals the definition (cpu_linear_dot_ref: 16 lanes over k, a fixed tree) bit for bit, in
 * the decode form (T <= 3) and the blocked one (more tokens: token groups of 6 and their remainders, row
 * quads and their remainders, inputs in blocks of 1024 with a tail), on every test backend (1 and 4 threads). */
static void test_definition(backend *be[CT_NBE], dtype wdt) {
    const int64_t Ts[] = {1, 2, 3, 4, 7, 13, 50, 97}, ins[] = {5, 16, 255, 256, 600, 1024, 1100, 2100};
    const int64_t out = 23;
    for (size_t ii = 0; ii < sizeof ins / sizeof *ins; ii++) {
        const int64_t in = ins[ii];
        unsigned char *w = malloc((size_t)(out * in) * dtype_size(wdt));
        for (int64_t i = 0; i < out * in; i++) ct_store(w, wdt, i, ct_uniform());
        tensor wt = tensor_2d(wdt, w, out, in);
        const tensor *wp[1] = {&wt};
        for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++) {
            const int64_t T = Ts[ti];
            float *x = malloc((size_t)(T * in) * sizeof(float)), *y = malloc((size_t)(T * out) * sizeof(float));
            ct_fill(x, T * in, 1.0f);
            for (int b = 0; b < CT_NBE; b++) {
                be_linear *lin = NULL;
                CHECK_OK(be[b]->ops->linear_create(be[b], wp, NULL, 1, &lin));
                tensor xt = tensor_2d(DTYPE_F32, x, T, in), yt = tensor_2d(DTYPE_F32, y, T, out);
                be[b]->ops->linear(be[b], lin, &xt, &yt);
                CHECK_OK(be[b]->ops->synchronize(be[b]));
                int bad = 0;
                for (int64_t t = 0; t < T; t++)
                    for (int64_t o = 0; o < out; o++) {
                        const float r = cpu_linear_dot_ref(x + t * in, w + (size_t)(o * in) * dtype_size(wdt), wdt, in);
                        bad += memcmp(&r, &y[t * out + o], sizeof r) != 0;
                    }
                CHECK_MSG(bad == 0, "%s T %lld in %lld backend %d: %d outputs differ from the definition",
                          dtype_name(wdt), (long long)T, (long long)in, b, bad);
                be[b]->ops->linear_free(be[b], lin);
            }
            free(x);
            free(y);
        }
        free(w);
    }
}

static void test_errors(backend *be) {
    float w[12] = {0}, w2[8] = {0}, bias[5] = {0};
    uint16_t wh[4] = {0};
    int32_t wi[12] = {0};
    tensor a = tensor_2d(DTYPE_F32, w, 3, 4), b = tensor_2d(DTYPE_F32, w2, 2, 4);
    tensor bad_in = tensor_2d(DTYPE_F32, w2, 4, 2), bad_dt = tensor_2d(DTYPE_BF16, wh, 1, 4);
    tensor ints = tensor_2d(DTYPE_I32, wi, 3, 4), bias_bad = tensor_1d(DTYPE_F32, bias, 5);
    be_linear *lin = (be_linear *)&a;  /* must be reset to NULL on failure */
    const tensor *p1[2] = {&a, &bad_in}, *p2[2] = {&a, &bad_dt}, *p3[1] = {&ints}, *p4[2] = {&a, &b};
    const tensor *bias_p[2] = {&bias_bad, NULL};
    CHECK(be->ops->linear_create(be, p1, NULL, 2, &lin) == VLLM_ERR_INVALID_ARG);
    CHECK(lin == NULL);
    CHECK(be->ops->linear_create(be, p2, NULL, 2, &lin) == VLLM_ERR_INVALID_ARG);
    CHECK(be->ops->linear_create(be, p3, NULL, 1, &lin) == VLLM_ERR_UNSUPPORTED);
    CHECK(be->ops->linear_create(be, p4, NULL, 0, &lin) == VLLM_ERR_INVALID_ARG);
    CHECK(be->ops->linear_create(be, p4, bias_p, 2, &lin) == VLLM_ERR_INVALID_ARG);
    CHECK(strstr(vllm_last_error(), "bias 0") != NULL);

    /* a call with the wrong x width: nothing happens, synchronize reports it once */
    CHECK_OK(be->ops->linear_create(be, p4, NULL, 2, &lin));
    float x[10] = {0}, y[10];
    for (int i = 0; i < 10; i++) y[i] = 7.0f;
    tensor xt = tensor_2d(DTYPE_F32, x, 2, 5), yt = tensor_2d(DTYPE_F32, y, 2, 5);
    be->ops->linear(be, lin, &xt, &yt);
    CHECK(y[0] == 7.0f);
    CHECK(be->ops->synchronize(be) == VLLM_ERR_BACKEND);
    CHECK(strstr(vllm_last_error(), "linear") != NULL);
    CHECK_OK(be->ops->synchronize(be));
    /* y with the wrong row count */
    tensor x2 = tensor_2d(DTYPE_F32, x, 2, 4), y2 = tensor_2d(DTYPE_F32, y, 1, 5);
    be->ops->linear(be, lin, &x2, &y2);
    CHECK(be->ops->synchronize(be) == VLLM_ERR_BACKEND);
    be->ops->linear_free(be, lin);
    be->ops->linear_free(be, NULL);
}

int main(void) {
    ct_seed(1);
    backend *be[CT_NBE];
    ct_backends(be);
    const lin_case cases[] = {
        {.T = 1, .in = 67, .nparts = 1, .outs = {13}},
        {.T = 7, .in = 67, .nparts = 1, .outs = {13}},
        {.T = 7, .in = 67, .nparts = 1, .outs = {13}, .x_pad = 6, .y_pad = 3, .misalign = 1},
        {.T = 1, .in = 1, .nparts = 1, .outs = {3}},
        {.T = 3, .in = 64, .nparts = 1, .outs = {5}},
        {.T = 5, .in = 128, .nparts = 3, .outs = {64, 16, 16}, .bias_mask = 7},
        {.T = 1, .in = 96, .nparts = 3, .outs = {24, 8, 8}, .bias_mask = 5, .x_pad = 96},
        {.T = 6, .in = 200, .nparts = 2, .outs = {33, 33}, .misalign = 1},
        {.T = 33, .in = 300, .nparts = 1, .outs = {100}, .bias_mask = 1},
        {.T = 70, .in = 1000, .nparts = 1, .outs = {37}, .x_pad = 4},  /* two token tiles */
        {.T = 2, .in = 513, .nparts = 2, .outs = {17, 300}, .bias_mask = 2, .misalign = 1},
        {.T = 6, .in = 2100, .nparts = 1, .outs = {19}, .x_pad = 1},  /* three input blocks */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (int d = 0; d < 3; d++) run_case(be, &cases[i], CT_WDTYPES[d]);
    for (int d = 0; d < 3; d++) {
        test_batch_invariance(be[1], CT_WDTYPES[d], 131);
        test_batch_invariance(be[0], CT_WDTYPES[d], 2100);  /* input blocks for T > 1, not for T = 1 */
        test_definition(be, CT_WDTYPES[d]);
    }
    test_errors(be[0]);
    ct_backends_free(be);
    TEST_END();
}
