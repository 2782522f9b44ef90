/*
 * test_cuda_blocks.c: the CUDA backend on ggml block-type weights (GGUF matrices used as they are,
 * src/cuda/ops_linear_blocks.cu): for every block type the backend says it takes (backend.native_blocks,
 * which must be all thirteen that tensor/ggml_quant.h reads):
 *
 *  - linear: random weights quantized with gq_quantize_row (per-row offsets so that the types with a min
 *    use it, plus an all-zero block and a constant block: zero scales), two parts with a bias, against a
 *    reference in double from the dequantized weights (gq_dequantize_row) and the BF16 activations, for
 *    T = 1, 2, 3, 5, 8 (the decode GEMV: every token class of its kernels) and 17, 300 (dequantized tiles +
 *    cuBLAS), on a layer of few rows (the GEMV splits each row over several warps) and one of many rows,
 *    BF16 and F32 outputs. The GEMV's reference takes the activations as its int8 step leaves them (per 32
 *    elements d * round(x / d), d = max|x| / 127); the linear, fused, graph and mixed cases run a second
 *    time with VLLM_CUDA_QGEMV_XQ=0 (the GEMV on the BF16 activations themselves);
 *  - linear_fused on block weights (the GEMV's gated product and residual add, the norms before it, and the
 *    composite path of larger batches) against the CPU backend's linear_fused on the dequantized F32 weights;
 *  - embedding from an imported block table (and a row view of it) against the dequantized rows; a bad id
 *    reported by synchronize;
 *  - experts_create from block weights (gate / up and down in different types, as Q4_K_M files) against
 *    experts created from the dequantized F32 weights (both dequantized to BF16 on the device: equal up to
 *    a rare BF16 rounding flip);
 *  - a decode-sized linear and a prefill-sized one recorded as CUDA graphs and replayed on new inputs equal
 *    to the eager op; a layer bigger than one prefill tile;
 *  - layers whose parts are in different block types (llama-quantize's mixes: segments, each its own GEMV
 *    and tiles; the gated product of a gate and an up in different types as the composite) and a float part
 *    beside block parts (the layer kept in BF16);
 *  - refusals (rows of partial blocks, a non-float part, strides of partial blocks);
 *  - linear_fused with each norm kind, whose norm kernel writes the int8 activations itself, bit-identical
 *    to the norm op then linear (the GEMV's own quantization of the norm's BF16 output);
 *  - FP8_B128 layers (block-scaled FP8 checkpoints, ops_linear_fp8.cu) against tensor/fp8.h (test_fp8), and
 *    at a (1536, 2048) x 300 shape cuBLASLt's FP8 GEMM takes (and the BF16 tiles there, VLLM_CUDA_F8_GEMM=tiles);
 *    the gated linear_fused (test_fp8_fused); the CUDA-core GEMV (VLLM_CUDA_F8_GEMV=warp);
 *  - I4_B128 layers (AWQ / GPTQ 4-bit, ops_linear_int4.cu) at groups 128, 64, 32 against the dequantized values
 *    (test_int4).
 *
 * Tolerances (per element, |gpu - ref| <= rel * |ref| + abs * S with S = sum_k |w_k x_k| in double):
 *  - BF16 output: rel 2^-8 (rounding to BF16 is within half an ulp, 2^-9 relative; twice that);
 *    F32 output: rel 1e-6;
 *  - the GEMV (T <= 8) sums in f32 with the f32 dequantized weights (the min types' a * q + b fused, one
 *    rounding away from gq_dequantize_row's): abs 1e-5 (f32 summation over K <= 4096 terms is ~sqrt(K) *
 *    2^-24 ~ 4e-6 of S at worst in practice; its bound K * 2^-24 ~ 2.4e-4 is never approached by random
 *    signs);
 *  - the GEMM (T > 8) multiplies the BF16-rounded dequantized weights (the reference uses the same rounded
 *    weights) on the tensor cores with f32 accumulation: abs 5e-5.
 * The fused and experts comparisons use test_cuda_ops's norm-based criterion (relative error 1e-2, each
 * element within 2% of the largest), as their reference is another backend's f32 arithmetic.
 *
 * Exits 77 ("skipped: no CUDA device") without a GPU or a CUDA build.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/backend.h"
#include "tensor/ggml_dtype.h"
#include "tensor/fp8.h"
#include "tensor/int4.h"
#include "tensor/ggml_quant.h"
#include "test.h"

static backend *cpu, *gpu;

/* ---- random numbers ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

/* uniform in [-1, 1) */
static float rnd(void) { return (float)((double)rnd_u32() / 4294967296.0 * 2.0 - 1.0); }

static float bf16r(float f) { return bf16_to_f32(f32_to_bf16(f)); }

static ggml_type gtype(dtype dt) {
    ggml_type gt = GGML_TYPE_COUNT;
    CHECK(dtype_to_ggml(dt, &gt));
    return gt;
}

/* ---- host <-> device ---- */

/* n floats stored as dt (F32, F16, BF16), malloc'd */
static void *pack(const float *x, int64_t n, dtype dt) {
    unsigned char *b = malloc((size_t)n * dtype_size(dt) + 1);
    for (int64_t i = 0; i < n; i++) {
        if (dt == DTYPE_F32) {
            memcpy(b + 4 * i, &x[i], 4);
        } else {
            uint16_t h = dt == DTYPE_BF16 ? f32_to_bf16(x[i]) : f32_to_f16(x[i]);
            memcpy(b + 2 * i, &h, 2);
        }
    }
    return b;
}

static void unpack(const void *b, int64_t n, dtype dt, float *x) {
    const unsigned char *p = b;
    for (int64_t i = 0; i < n; i++) {
        if (dt == DTYPE_F32) {
            memcpy(&x[i], p + 4 * i, 4);
        } else {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            x[i] = dt == DTYPE_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
        }
    }
}

/* a backend tensor (d0, d1) of dt holding x (or uninitialised when x is NULL) */
static tensor put(backend *be, dtype dt, int64_t d0, int64_t d1, const float *x) {
    tensor t = tensor_2d(dt, NULL, d0, d1);
    if (be->ops->alloc(be, &t) != VLLM_OK) {
        fprintf(stderr, "alloc failed: %s\n", vllm_last_error());
        exit(1);
    }
    if (x) {
        void *b = pack(x, d0 * d1, dt);
        CHECK_OK(be->ops->upload(be, &t, b, (size_t)(d0 * d1) * dtype_size(dt)));
        free(b);
    }
    return t;
}

/* writes x into an existing backend tensor (contiguous, float dtype) */
static void refill(backend *be, tensor *t, const float *x) {
    const int64_t n = tensor_numel(t);
    void *b = pack(x, n, t->dtype);
    CHECK_OK(be->ops->upload(be, t, b, (size_t)n * dtype_size(t->dtype)));
    free(b);
}

static void poison(tensor *t) {
    size_t n = (size_t)tensor_numel(t) * dtype_size(t->dtype);
    unsigned char *b = malloc(n + 1);
    memset(b, 0xff, n);
    CHECK_OK(gpu->ops->upload(gpu, t, b, n));
    free(b);
}

static float *get(backend *be, const tensor *t) {
    int64_t n = tensor_numel(t);
    size_t bytes = (size_t)n * dtype_size(t->dtype);
    void *b = malloc(bytes + 1);
    vllm_status st = be->ops->download(be, b, t, bytes);
    CHECK_MSG(st == VLLM_OK, "download (%s): %s", be->name, vllm_last_error());
    float *x = malloc((size_t)(n ? n : 1) * sizeof *x);
    if (st == VLLM_OK) unpack(b, n, t->dtype, x);
    else for (int64_t i = 0; i < n; i++) x[i] = NAN;
    free(b);
    return x;
}

/* gpu vs reference: NaN fails; ||d|| / ||ref|| <= rel and |d| <= elem * max|ref| + rel * |ref| each */
static void compare_norm(const char *what, const float *g, const float *c, int64_t n, double rel, double elem) {
    double num = 0, den = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) mx = fmax(mx, fabs(c[i]));
    int64_t bad = 0, first = -1, nan = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(g[i]) || isnan(c[i])) {
            if (!nan++ && first < 0) first = i;
            continue;
        }
        double d = (double)g[i] - c[i];
        num += d * d;
        den += (double)c[i] * c[i];
        if (fabs(d) > elem * mx + rel * fabs(c[i]) + 1e-30) {
            if (first < 0) first = i;
            bad++;
        }
    }
    double err = den > 0 ? sqrt(num / den) : sqrt(num);
    printf("  %-76s rel err %.2e\n", what, err);
    CHECK_MSG(nan == 0 && bad == 0 && err <= rel,
              "%s: rel err %.3g, %lld elements off, %lld NaN; first at %lld: gpu %.6g ref %.6g", what, err,
              (long long)bad, (long long)nan, (long long)first, first >= 0 ? (double)g[first] : 0.0,
              first >= 0 ? (double)c[first] : 0.0);
}

#define REL 1e-2
#define ELEM 2e-2

/* ---- block weights ---- */

/* A (rows, in) weight of type dt: random values (each row its own scale in [0.02, 0.1) and an offset of
 * up to +-0.05, so that the min types' mins are not zero), quantized with gq_quantize_row. Row 0's first
 * block is all zeros and row 1's is constant (zero scales; the min types then have values m only). deq
 * (rows, in) gets the dequantized floats. Returns the blocks (malloc'd). */
static unsigned char *make_blocks(dtype dt, int64_t rows, int64_t in, float *deq) {
    const ggml_type gt = gtype(dt);
    const size_t rb = gq_row_bytes(gt, in);
    unsigned char *w = malloc(rb * (size_t)rows + 1);
    float *row = malloc((size_t)in * sizeof *row);
    const int64_t blk = dtype_block(dt);
    for (int64_t r = 0; r < rows; r++) {
        const float sc = 0.02f + 0.08f * (0.5f + 0.5f * rnd()), off = 0.05f * rnd();
        for (int64_t k = 0; k < in; k++) row[k] = off + sc * rnd();
        if (r == 0)
            for (int64_t k = 0; k < blk; k++) row[k] = 0.0f;
        if (r == 1)
            for (int64_t k = 0; k < blk; k++) row[k] = 0.03f;
        CHECK(gq_quantize_row(gt, row, w + (size_t)r * rb, in));
        CHECK(gq_dequantize_row(gt, w + (size_t)r * rb, deq + r * in, in));
    }
    free(row);
    return w;
}

static const dtype BLOCK_TYPES[] = {DTYPE_Q8_0, DTYPE_Q4_0, DTYPE_Q4_1, DTYPE_Q5_0, DTYPE_Q5_1, DTYPE_Q2_K,
                                    DTYPE_Q3_K, DTYPE_Q4_K, DTYPE_Q5_K, DTYPE_Q6_K, DTYPE_IQ4_NL, DTYPE_IQ4_XS,
                                    DTYPE_MXFP4};
#define NTYPES ((int)(sizeof BLOCK_TYPES / sizeof *BLOCK_TYPES))

static bool takes(dtype dt) { return (gpu->native_blocks >> (dt - DTYPE_FIRST_BLOCK)) & 1u; }

/* A block layer on the GPU (n parts of outs[i] rows of in, part i in dts[i]: a block type, or F32) with its
 * dequantized weights (deq: (out, in), the parts stacked) and biases (bias: (out) F32 values, or zeros where
 * a part has none). */
typedef struct qlayer {
    be_linear *lin;
    int64_t in, out;
    float *deq, *bias;
} qlayer;

#define MAX_PARTS 4

static qlayer make_layer_n(const dtype *dts, int n, int64_t in, const int64_t *outs, const bool *has_bias) {
    qlayer L = {NULL, in, 0, NULL, NULL};
    for (int p = 0; p < n; p++) L.out += outs[p];
    L.deq = malloc((size_t)(L.out * in) * sizeof *L.deq);
    L.bias = calloc((size_t)L.out, sizeof *L.bias);
    unsigned char *wb[MAX_PARTS];
    void *bb[MAX_PARTS] = {NULL};
    tensor wt[MAX_PARTS], bt[MAX_PARTS];
    const tensor *wp[MAX_PARTS], *bp[MAX_PARTS];
    const char *name = dtype_name(dts[0]);
    for (int p = 0, r0 = 0; p < n; r0 += (int)outs[p], p++) {
        float *dp = L.deq + (int64_t)r0 * in;
        if (dts[p] == DTYPE_F32) { /* a float part (kept by llama-quantize): its values are the reference */
            for (int64_t i = 0; i < outs[p] * in; i++) dp[i] = 0.05f * rnd();
            wb[p] = malloc((size_t)(outs[p] * in) * sizeof(float) + 1);
            memcpy(wb[p], dp, (size_t)(outs[p] * in) * sizeof(float));
        } else {
            wb[p] = make_blocks(dts[p], outs[p], in, dp);
        }
        wt[p] = tensor_2d(dts[p], wb[p], outs[p], in);
        wp[p] = &wt[p];
        bp[p] = NULL;
        if (has_bias[p]) {
            float *b = L.bias + r0;
            for (int64_t i = 0; i < outs[p]; i++) b[i] = bf16r(0.5f * rnd());
            bb[p] = pack(b, outs[p], DTYPE_BF16); /* checkpoints keep biases in BF16 */
            bt[p] = tensor_1d(DTYPE_BF16, bb[p], outs[p]);
            bp[p] = &bt[p];
        }
    }
    vllm_status st = gpu->ops->linear_create(gpu, wp, bp, n, &L.lin);
    CHECK_MSG(st == VLLM_OK, "%s linear_create: %s", name, vllm_last_error());
    for (int p = 0; p < n; p++) { /* the device has them: linear_create copies */
        free(wb[p]);
        free(bb[p]);
    }
    return L;
}

/* two parts of one type */
static qlayer make_layer(dtype dt, int64_t in, const int64_t outs[2], const bool has_bias[2]) {
    const dtype dts[2] = {dt, dt};
    return make_layer_n(dts, 2, in, outs, has_bias);
}

static void free_layer(qlayer *L) {
    if (L->lin) gpu->ops->linear_free(gpu, L->lin);
    free(L->deq);
    free(L->bias);
}

/* y (T, out) against the double reference sum_k w[r, k] x[t, k] + bias[r] (w: the dequantized weights,
 * rounded to BF16 when bf16w: the GEMM path), per element |d| <= rel |ref| + abs * S. */
static void check_linear(const char *what, const qlayer *L, const float *x, int64_t T, const float *y, bool bf16w,
                         double rel, double abs_) {
    int64_t bad = 0, first = -1, nan = 0;
    double worst = 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t r = 0; r < L->out; r++) {
            const float *w = L->deq + r * L->in, *xt = x + t * L->in;
            double ref = 0, S = 0;
            for (int64_t k = 0; k < L->in; k++) {
                const double wk = bf16w ? bf16r(w[k]) : w[k], p = wk * xt[k];
                ref += p;
                S += fabs(p);
            }
            ref += L->bias[r];
            const double g = y[t * L->out + r], d = fabs(g - ref), tol = rel * fabs(ref) + abs_ * S + 1e-30;
            if (isnan(g)) {
                if (!nan++ && first < 0) first = t * L->out + r;
                continue;
            }
            if (d / tol > worst) worst = d / tol;
            if (d > tol) {
                if (first < 0) first = t * L->out + r;
                bad++;
            }
        }
    printf("  %-76s %.2f of tolerance\n", what, worst);
    CHECK_MSG(bad == 0 && nan == 0, "%s: %lld elements off, %lld NaN (first: index %lld, gpu %.7g)", what,
              (long long)bad, (long long)nan, (long long)first, first >= 0 ? (double)y[first] : 0.0);
}

/* the block GEMV quantizes its activations to int8 (unless VLLM_CUDA_QGEMV_XQ=0): its reference takes x as
 * the kernel's k_qx leaves it, per 32 elements d = max|x| / 127 and q = round(x / d) (ggml's Q8_1 rule) */
static bool xq_on = true;

/* x (T, in) as the int8 GEMV sees it: d * q (malloc'd), or a copy of x when the path is off */
static float *gemv_x(const float *x, int64_t T, int64_t in) {
    float *o = malloc((size_t)(T * in) * sizeof *o);
    for (int64_t b = 0; b < T * in; b += 32) {
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[b + i]));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int i = 0; i < 32; i++) o[b + i] = xq_on ? d * roundf(x[b + i] * id) : x[b + i];
    }
    return o;
}

/* BF16 activations (T, in): values in [-1.5, 1.5) rounded to BF16 */
static float *rand_x(int64_t T, int64_t in) {
    float *x = malloc((size_t)(T * in) * sizeof *x);
    for (int64_t i = 0; i < T * in; i++) x[i] = bf16r(1.5f * rnd());
    return x;
}

/* one linear call on T tokens, checked (bf16_all: the layer is kept in BF16, a float + block mix) */
static void run_linear_x(const char *name, const qlayer *L, int64_t T, dtype ydt, bool bf16_all) {
    float *x = rand_x(T, L->in);
    tensor xg = put(gpu, DTYPE_BF16, T, L->in, x), yg = put(gpu, ydt, T, L->out, NULL);
    poison(&yg);
    gpu->ops->linear(gpu, L->lin, &xg, &yg);
    float *y = get(gpu, &yg);
    char what[160];
    const bool gemv = T <= 8;
    snprintf(what, sizeof what, "%s linear (%lld, %lld) T %lld -> %s (%s)", name, (long long)L->out, (long long)L->in,
             (long long)T, dtype_name(ydt), bf16_all ? "BF16" : gemv ? "gemv" : "dequantized tiles + GEMM");
    /* BF16 output from the GEMM: cuBLASLt may split K and reduce the partial sums in the output type (the same
     * tiles give F32 outputs within 1e-6 of the reference), so its error scales with S, the sum of |w x|, at
     * BF16's precision: 2^-9 S at most (seen on the H200: up to 3.4x a 5e-5 S bound for (8300, 4096) at T 17) */
    const bool gemm_bf16 = (!gemv || bf16_all) && ydt == DTYPE_BF16;
    float *xr = gemv && !bf16_all ? gemv_x(x, T, L->in) : NULL;
    check_linear(what, L, xr ? xr : x, T, y, !gemv || bf16_all, ydt == DTYPE_BF16 ? 1.0 / 256 : 1e-6,
                 gemm_bf16 ? 1.0 / 512 : gemv && !bf16_all ? 1e-5 : 5e-5);
    free(xr);
    free(x);
    free(y);
    gpu->ops->release(gpu, &xg);
    gpu->ops->release(gpu, &yg);
}

static void run_linear(dtype dt, const qlayer *L, int64_t T, dtype ydt) { run_linear_x(dtype_name(dt), L, T, ydt, false); }

static void test_linear_type(dtype dt) {
    const int64_t Ts[] = {1, 2, 3, 5, 8, 17, 300};
    { /* few rows, a long K: the GEMV splits rows over warps */
        const int64_t outs[2] = {40, 24};
        const bool bias[2] = {false, true};
        qlayer L = make_layer(dt, 2048, outs, bias);
        if (L.lin)
            for (size_t i = 0; i < sizeof Ts / sizeof *Ts; i++) run_linear(dt, &L, Ts[i], DTYPE_BF16);
        free_layer(&L);
    }
    { /* many rows: a warp per row; F32 output (logits) */
        const int64_t outs[2] = {1500, 548};
        const bool bias[2] = {true, true};
        qlayer L = make_layer(dt, 512, outs, bias);
        const int64_t Tb[] = {1, 4, 8, 33};
        if (L.lin)
            for (size_t i = 0; i < sizeof Tb / sizeof *Tb; i++) run_linear(dt, &L, Tb[i], DTYPE_F32);
        free_layer(&L);
    }
}

/* a layer of more rows than one dequantized tile holds (32 MiB of BF16: 4096 rows of 4096) */
static void test_linear_tiles(dtype dt) {
    const int64_t outs[2] = {5000, 3300};
    const bool bias[2] = {false, true};
    qlayer L = make_layer(dt, 4096, outs, bias);
    if (L.lin) {
        run_linear(dt, &L, 17, DTYPE_BF16);
        run_linear(dt, &L, 2, DTYPE_BF16);
    }
    free_layer(&L);
}

/* ---- linear_fused: against the CPU backend on the dequantized weights ---- */

enum { QF_NORM_SILU, QF_ACC, QF_GELU, QF_NORM, QF_GEMMA_SILU, QF_LAYER, QF_PLAIN, QF_MODES };
static void test_fused_layer(qlayer *L, const char *name, int64_t T, int mode);
static const char *QF_NAMES[QF_MODES] = {"norm + silu_mul", "accumulate", "gelu_tanh gate", "norm",
                                         "(1 + w) norm + silu_mul", "LayerNorm + bias", "plain"};

static void test_fused_case(dtype dt, int64_t in, int64_t out, int64_t T, int mode) {
    const int64_t outs[2] = {out / 2, out - out / 2};
    const bool bias[2] = {true, false};
    qlayer L = make_layer(dt, in, outs, bias);
    test_fused_layer(&L, dtype_name(dt), T, mode);
    free_layer(&L);
}

/* linear_fused on L (its parts' rows: the gated form's gate and up halves) vs the CPU on L's F32 weights */
static void test_fused_layer(qlayer *L, const char *name, int64_t T, int mode) {
    const int64_t in = L->in, out = L->out;
    const bool norm = mode == QF_NORM_SILU || mode == QF_NORM || mode == QF_GEMMA_SILU || mode == QF_LAYER,
               glu = mode == QF_NORM_SILU || mode == QF_GELU || mode == QF_GEMMA_SILU, acc = mode == QF_ACC;
    const be_norm_kind kind = mode == QF_GEMMA_SILU ? BE_NORM_RMS_OFFSET : mode == QF_LAYER ? BE_NORM_LAYER : BE_NORM_RMS;
    const be_act act = mode == QF_GELU ? BE_ACT_GELU_TANH : BE_ACT_SILU;
    const int64_t n = glu ? out / 2 : out;
    if (!L->lin) return;
    /* the CPU layer: the dequantized weights in F32, the same biases */
    tensor wc = tensor_2d(DTYPE_F32, L->deq, out, in), bc = tensor_1d(DTYPE_F32, L->bias, out);
    const tensor *wp[1] = {&wc}, *bp[1] = {&bc};
    be_linear *lc = NULL;
    CHECK_OK(cpu->ops->linear_create(cpu, wp, bp, 1, &lc));
    float *x = rand_x(T, in), *nw = malloc((size_t)in * sizeof *nw), *y0 = malloc((size_t)(T * n) * sizeof *y0);
    for (int64_t i = 0; i < in; i++) nw[i] = bf16r((kind == BE_NORM_RMS_OFFSET ? 0.0f : 1.0f) + 0.3f * rnd());
    for (int64_t i = 0; i < T * n; i++) y0[i] = bf16r(2.0f * rnd());
    tensor xc = put(cpu, DTYPE_F32, T, in, x), xg = put(gpu, DTYPE_BF16, T, in, x);
    tensor nwc2 = put(cpu, DTYPE_F32, 1, in, nw), nwg2 = put(gpu, DTYPE_BF16, 1, in, nw);
    tensor nwc = tensor_1d(DTYPE_F32, nwc2.data, in), nwg = tensor_1d(DTYPE_BF16, nwg2.data, in);
    tensor nbc2 = put(cpu, DTYPE_F32, 1, in, x), nbg2 = put(gpu, DTYPE_BF16, 1, in, x); /* LayerNorm bias: x's row 0 */
    tensor nbc = tensor_1d(DTYPE_F32, nbc2.data, in), nbg = tensor_1d(DTYPE_BF16, nbg2.data, in);
    tensor hc = put(cpu, DTYPE_F32, T, in, NULL), hg = put(gpu, DTYPE_BF16, T, in, NULL);
    tensor mc = put(cpu, DTYPE_F32, T, out, NULL), mg = put(gpu, DTYPE_BF16, T, out, NULL);
    tensor yc = put(cpu, DTYPE_F32, T, n, y0), yg = put(gpu, DTYPE_BF16, T, n, y0);
    if (!acc) poison(&yg);
    linear_fuse fc = {.norm_w = norm ? &nwc : NULL, .eps = 1e-6f, .silu_mul = glu, .accumulate = acc, .h = &hc,
                      .mid = &mc, .act = act, .norm_kind = kind, .norm_b = mode == QF_LAYER ? &nbc : NULL};
    linear_fuse fg = fc;
    fg.norm_w = norm ? &nwg : NULL;
    fg.norm_b = mode == QF_LAYER ? &nbg : NULL;
    fg.h = &hg;
    fg.mid = &mg;
    if (lc) {
        cpu->ops->linear_fused(cpu, lc, &xc, &fc, &yc);
        gpu->ops->linear_fused(gpu, L->lin, &xg, &fg, &yg);
        float *c = get(cpu, &yc), *g = get(gpu, &yg);
        char what[160];
        snprintf(what, sizeof what, "%s linear_fused %s (T %lld, in %lld, out %lld)", name, QF_NAMES[mode],
                 (long long)T, (long long)in, (long long)out);
        /* the int8 activations add their rounding (about 0.4% of each input) to the BF16 h and output: the
         * bound llama.cpp's test-backend-ops puts on its q8_1 mat-vec products (NMSE 5e-4: 2.2e-2 relative) */
        compare_norm(what, g, c, T * n, xq_on ? 2.2e-2 : REL, ELEM);
        free(c);
        free(g);
        cpu->ops->linear_free(cpu, lc);
    }
    tensor *cs[] = {&xc, &nwc2, &nbc2, &hc, &mc, &yc}, *gs[] = {&xg, &nwg2, &nbg2, &hg, &mg, &yg};
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
        cpu->ops->release(cpu, cs[i]);
        gpu->ops->release(gpu, gs[i]);
    }
    free(x);
    free(nw);
    free(y0);
}

static void test_fused_type(dtype dt, int ti) {
    const int64_t in = dtype_block(dt) == 256 ? 1024 : 512;
    /* the gated form's kernel for every token class (1, 2, 4, 8), rotated over the modes */
    const int64_t Ts[4] = {1, 2, 4, 7};
    test_fused_case(dt, in, 384, Ts[ti % 4], QF_NORM_SILU);
    test_fused_case(dt, in, 256, Ts[(ti + 1) % 4], QF_GELU);
    test_fused_case(dt, in, 200, Ts[(ti + 2) % 4], QF_ACC);
    test_fused_case(dt, in, 384, Ts[(ti + 3) % 4], QF_GEMMA_SILU);
    if (ti % 4 == 0) {
        test_fused_case(dt, in, 192, 5, QF_NORM);
        test_fused_case(dt, in, 192, 3, QF_LAYER); /* the norm op that the kernel path runs first */
        test_fused_case(dt, in, 384, 20, QF_NORM_SILU); /* composite: tiles + GEMM, act_mul */
        test_fused_case(dt, in, 200, 20, QF_ACC);       /* the tiles' GEMMs with beta 1 */
        test_fused_case(dt, in, 200, 6, QF_PLAIN);
    }
}

/* linear_fused with a norm (the norm kernel writes the GEMV's int8 activations itself) equals the norm op
 * followed by linear (which quantizes the norm's BF16 output in its own kernel), bit for bit */
static void test_norm_int8(dtype dt) {
    const int64_t outs[2] = {160, 96};
    const bool bias[2] = {true, false};
    qlayer L = make_layer(dt, 1024, outs, bias);
    if (!L.lin) {
        free_layer(&L);
        return;
    }
    const be_norm_kind kinds[3] = {BE_NORM_RMS, BE_NORM_RMS_OFFSET, BE_NORM_LAYER};
    const int64_t Ts[3] = {1, 3, 8};
    for (int k = 0; k < 3; k++) {
        const int64_t T = Ts[k];
        float *x = rand_x(T, L.in), *nw = malloc((size_t)L.in * sizeof *nw);
        for (int64_t i = 0; i < L.in; i++) nw[i] = bf16r(0.5f + 0.5f * rnd());
        tensor xg = put(gpu, DTYPE_BF16, T, L.in, x), nw2 = put(gpu, DTYPE_BF16, 1, L.in, nw);
        tensor nwg = tensor_1d(DTYPE_BF16, nw2.data, L.in), nbg = tensor_1d(DTYPE_BF16, xg.data, L.in);
        tensor hg = put(gpu, DTYPE_BF16, T, L.in, NULL), h2 = put(gpu, DTYPE_BF16, T, L.in, NULL);
        tensor y1 = put(gpu, DTYPE_F32, T, L.out, NULL), y2 = put(gpu, DTYPE_F32, T, L.out, NULL);
        poison(&y1);
        poison(&y2);
        linear_fuse f = {.norm_w = &nwg, .eps = 1e-6f, .h = &hg, .norm_kind = kinds[k],
                         .norm_b = kinds[k] == BE_NORM_LAYER ? &nbg : NULL};
        gpu->ops->linear_fused(gpu, L.lin, &xg, &f, &y1);
        const be_norm n = {kinds[k], &nwg, kinds[k] == BE_NORM_LAYER ? &nbg : NULL, 1e-6f};
        gpu->ops->norm(gpu, &xg, &n, &h2);
        gpu->ops->linear(gpu, L.lin, &h2, &y2);
        float *a = get(gpu, &y1), *b = get(gpu, &y2);
        CHECK_MSG(memcmp(a, b, (size_t)(T * L.out) * sizeof *a) == 0,
                  "%s linear_fused with norm kind %d (T %lld) differs from norm + linear", dtype_name(dt), (int)kinds[k],
                  (long long)T);
        free(a);
        free(b);
        tensor *ts[] = {&xg, &nw2, &hg, &h2, &y1, &y2};
        for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) gpu->ops->release(gpu, ts[i]);
        free(x);
        free(nw);
    }
    printf("  %-76s equal\n", "linear_fused norm (int8 from the norm kernel) vs norm + linear");
    free_layer(&L);
}

/* ---- embedding ---- */

/* checks out (T, D) F32 / BF16 against rows ids of deq (D elements each): F32 = gq_dequantize_row's values
 * (the same f32 operations; the min types' a * q + b may round differently where the host compiler
 * contracts it into an FMA, as clang does by default: 1e-6 of the row's largest), BF16 = those rounded once */
static void check_rows(const char *what, const float *g, dtype odt, const float *deq, const int32_t *ids, int T,
                       int64_t D) {
    int64_t bad = 0;
    for (int t = 0; t < T; t++) {
        const float *ref = deq + (int64_t)ids[t] * D;
        double mx = 0;
        for (int64_t k = 0; k < D; k++) mx = fmax(mx, fabs(ref[k]));
        for (int64_t k = 0; k < D; k++) {
            const double r = odt == DTYPE_BF16 ? bf16r(ref[k]) : ref[k], d = fabs(g[t * D + k] - r);
            /* BF16: one ulp (2^-7 relative) for a rounding flip where the f32 values differ by an ulp */
            if (!(d <= (odt == DTYPE_BF16 ? fabs(r) / 128 : 0.0) + 1e-6 * mx)) bad++;
        }
    }
    CHECK_MSG(bad == 0, "%s: %lld elements differ from the dequantized rows", what, (long long)bad);
}

/* a table whose rows take several passes through the kernel's shared memory (24 KiB of blocks each) */
static void test_embedding_wide(dtype dt, int64_t D) {
    const int64_t V = 3;
    float *deq = malloc((size_t)(V * D) * sizeof *deq);
    unsigned char *blocks = make_blocks(dt, V, D, deq);
    tensor host = tensor_2d(dt, blocks, V, D), tab;
    CHECK_OK(gpu->ops->import(gpu, &host, &tab));
    free(blocks);
    const int32_t ids[4] = {2, 0, 1, 2};
    tensor idg = tensor_1d(DTYPE_I32, NULL, 4);
    CHECK_OK(gpu->ops->alloc(gpu, &idg));
    CHECK_OK(gpu->ops->upload(gpu, &idg, ids, sizeof ids));
    tensor out = put(gpu, DTYPE_BF16, 4, D, NULL);
    poison(&out);
    gpu->ops->embedding(gpu, &tab, &idg, &out);
    float *g = get(gpu, &out);
    char what[96];
    snprintf(what, sizeof what, "%s embedding, rows of %lld", dtype_name(dt), (long long)D);
    check_rows(what, g, DTYPE_BF16, deq, ids, 4, D);
    printf("  %s\n", what);
    free(g);
    gpu->ops->release(gpu, &out);
    gpu->ops->release(gpu, &idg);
    gpu->ops->release_import(gpu, &tab);
    free(deq);
}

static void test_embedding_type(dtype dt) {
    const int64_t V = 40, D = dtype_block(dt) == 256 ? 1024 : 320;
    float *deq = malloc((size_t)(V * D) * sizeof *deq);
    unsigned char *blocks = make_blocks(dt, V, D, deq);
    tensor host = tensor_2d(dt, blocks, V, D), tab;
    CHECK_OK(gpu->ops->import(gpu, &host, &tab));
    free(blocks); /* imports copy */
    const int32_t ids[6] = {3, 0, 39, 3, 1, 17};
    tensor idg = tensor_1d(DTYPE_I32, NULL, 6);
    CHECK_OK(gpu->ops->alloc(gpu, &idg));
    CHECK_OK(gpu->ops->upload(gpu, &idg, ids, sizeof ids));
    const dtype odts[2] = {DTYPE_F32, DTYPE_BF16};
    for (int o = 0; o < 2; o++) {
        tensor out = put(gpu, odts[o], 6, D, NULL);
        poison(&out);
        gpu->ops->embedding(gpu, &tab, &idg, &out);
        float *g = get(gpu, &out);
        char what[96];
        snprintf(what, sizeof what, "%s embedding -> %s", dtype_name(dt), dtype_name(odts[o]));
        check_rows(what, g, odts[o], deq, ids, 6, D);
        printf("  %s\n", what);
        free(g);
        gpu->ops->release(gpu, &out);
    }
    /* a row view of the table: rows 10..29 */
    tensor view = tensor_rows(&tab, 10, 20), out = put(gpu, DTYPE_F32, 2, D, NULL);
    const int32_t vid[2] = {0, 19};
    tensor vidg = tensor_1d(DTYPE_I32, NULL, 2);
    CHECK_OK(gpu->ops->alloc(gpu, &vidg));
    CHECK_OK(gpu->ops->upload(gpu, &vidg, vid, sizeof vid));
    gpu->ops->embedding(gpu, &view, &vidg, &out);
    float *g = get(gpu, &out);
    int64_t bad = 0;
    for (int64_t k = 0; k < D; k++) {
        bad += fabsf(g[k] - deq[10 * D + k]) > 1e-6f * (1.0f + fabsf(deq[10 * D + k]));
        bad += fabsf(g[D + k] - deq[29 * D + k]) > 1e-6f * (1.0f + fabsf(deq[29 * D + k]));
    }
    CHECK_MSG(bad == 0, "%s embedding of a row view: %lld elements differ", dtype_name(dt), (long long)bad);
    free(g);
    /* an id out of range is reported by synchronize, naming the op */
    const int32_t badid[1] = {40};
    CHECK_OK(gpu->ops->upload(gpu, &vidg, badid, sizeof badid));
    tensor one = tensor_1d(DTYPE_I32, vidg.data, 1), o1 = tensor_2d(DTYPE_F32, out.data, 1, D);
    gpu->ops->embedding(gpu, &tab, &one, &o1);
    vllm_status st = gpu->ops->synchronize(gpu);
    CHECK_MSG(st == VLLM_ERR_BACKEND && strstr(vllm_last_error(), "embedding"), "%s: bad id: status %d (%s)",
              dtype_name(dt), st, vllm_last_error());
    CHECK_OK(gpu->ops->synchronize(gpu));
    gpu->ops->release(gpu, &out);
    gpu->ops->release(gpu, &vidg);
    gpu->ops->release(gpu, &idg);
    gpu->ops->release_import(gpu, &tab);
    free(deq);
}

/* ---- experts ---- */

static void test_experts(dtype gdt, dtype ddt, int64_t T) {
    const int E = 4, k = 2;
    const int64_t D = 512, I = 256;
    const tensor *gq[4], *uq[4], *dq[4], *gf[4], *uf[4], *df[4];
    tensor tq[12], tf[12];
    unsigned char *blocks[12];
    float *deq[12];
    for (int e = 0; e < E; e++)
        for (int m = 0; m < 3; m++) {
            const int i = 3 * e + m;
            const int64_t rows = m < 2 ? I : D, cols = m < 2 ? D : I;
            const dtype dt = m < 2 ? gdt : ddt;
            deq[i] = malloc((size_t)(rows * cols) * sizeof(float));
            blocks[i] = make_blocks(dt, rows, cols, deq[i]);
            tq[i] = tensor_2d(dt, blocks[i], rows, cols);
            tf[i] = tensor_2d(DTYPE_F32, deq[i], rows, cols);
        }
    for (int e = 0; e < E; e++) {
        gq[e] = &tq[3 * e];
        uq[e] = &tq[3 * e + 1];
        dq[e] = &tq[3 * e + 2];
        gf[e] = &tf[3 * e];
        uf[e] = &tf[3 * e + 1];
        df[e] = &tf[3 * e + 2];
    }
    be_experts *exq = NULL, *exf = NULL;
    vllm_status st = gpu->ops->experts_create(gpu, gq, uq, dq, NULL, E, &exq);
    CHECK_MSG(st == VLLM_OK, "experts_create %s / %s: %s", dtype_name(gdt), dtype_name(ddt), vllm_last_error());
    CHECK_OK(gpu->ops->experts_create(gpu, gf, uf, df, NULL, E, &exf));
    for (int i = 0; i < 12; i++) free(blocks[i]);
    if (exq && exf) {
        float *x = rand_x(T, D), *wv = malloc((size_t)(T * k) * sizeof *wv);
        int32_t *ids = malloc((size_t)(T * k) * sizeof *ids);
        for (int64_t t = 0; t < T; t++) {
            ids[t * k] = (int32_t)(rnd_u32() % E);
            ids[t * k + 1] = (ids[t * k] + 1 + (int32_t)(rnd_u32() % (E - 1))) % E;
            wv[t * k] = 0.6f + 0.2f * rnd();
            wv[t * k + 1] = 1.0f - wv[t * k];
        }
        tensor xg = put(gpu, DTYPE_BF16, T, D, x), wg = put(gpu, DTYPE_F32, T, k, wv);
        tensor ig = tensor_2d(DTYPE_I32, NULL, T, k);
        CHECK_OK(gpu->ops->alloc(gpu, &ig));
        CHECK_OK(gpu->ops->upload(gpu, &ig, ids, (size_t)(T * k) * 4));
        tensor yq = put(gpu, DTYPE_BF16, T, D, NULL), yf = put(gpu, DTYPE_BF16, T, D, NULL);
        moe_params mp = {.num_experts = E, .top_k = k, .act = BE_ACT_SILU};
        gpu->ops->moe_experts(gpu, exq, &xg, &ig, &wg, &mp, false, &yq);
        gpu->ops->moe_experts(gpu, exf, &xg, &ig, &wg, &mp, false, &yf);
        float *a = get(gpu, &yq), *b = get(gpu, &yf);
        char what[160];
        snprintf(what, sizeof what, "moe_experts from %s / %s blocks vs from F32 (T %lld)", dtype_name(gdt),
                 dtype_name(ddt), (long long)T);
        /* both dequantized on the device to BF16 from the same f32 values: equal but for a rare BF16 rounding
         * flip where the host's and the device's f32 dequantization differ by an ulp (min types) */
        compare_norm(what, a, b, T * D, 1e-3, 2e-3);
        free(a);
        free(b);
        free(x);
        free(wv);
        free(ids);
        tensor *ts[] = {&xg, &wg, &ig, &yq, &yf};
        for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) gpu->ops->release(gpu, ts[i]);
    }
    gpu->ops->experts_free(gpu, exq);
    gpu->ops->experts_free(gpu, exf);
    for (int i = 0; i < 12; i++) free(deq[i]);
}

/* ---- graphs ---- */

static void test_graph_case(dtype dt, int64_t T) {
    const int64_t outs[2] = {300, 212};
    const bool bias[2] = {true, false};
    qlayer L = make_layer(dt, 1024, outs, bias);
    if (!L.lin) {
        free_layer(&L);
        return;
    }
    float *x1 = rand_x(T, L.in), *x2 = rand_x(T, L.in);
    tensor xg = put(gpu, DTYPE_BF16, T, L.in, x1), yg = put(gpu, DTYPE_BF16, T, L.out, NULL);
    tensor ye = put(gpu, DTYPE_BF16, T, L.out, NULL);
    /* eager once (a real engine's first step), then the recording */
    gpu->ops->linear(gpu, L.lin, &xg, &yg);
    CHECK_OK(gpu->ops->synchronize(gpu));
    be_graph *gr = NULL;
    CHECK_OK(gpu->ops->graph_begin(gpu));
    gpu->ops->linear(gpu, L.lin, &xg, &yg);
    CHECK_OK(gpu->ops->graph_end(gpu, &gr));
    if (gr) {
        refill(gpu, &xg, x2);
        poison(&yg);
        CHECK_OK(gpu->ops->graph_launch(gpu, gr));
        gpu->ops->linear(gpu, L.lin, &xg, &ye);
        float *a = get(gpu, &yg), *b = get(gpu, &ye);
        CHECK_MSG(memcmp(a, b, (size_t)(T * L.out) * sizeof *a) == 0, "%s graph replay (T %lld) differs from eager",
                  dtype_name(dt), (long long)T);
        char what[120];
        snprintf(what, sizeof what, "%s graph replay of linear (T %lld) on new inputs", dtype_name(dt), (long long)T);
        float *xr = T > 8 ? NULL : gemv_x(x2, T, L.in);
        check_linear(what, &L, xr ? xr : x2, T, a, T > 8, 1.0 / 256, T > 8 ? 1.0 / 512 : 1e-5); /* BF16 GEMM: run_linear_x */
        free(xr);
        free(a);
        free(b);
        gpu->ops->graph_free(gpu, gr);
    }
    gpu->ops->release(gpu, &xg);
    gpu->ops->release(gpu, &yg);
    gpu->ops->release(gpu, &ye);
    free(x1);
    free(x2);
    free_layer(&L);
}

/* ---- layers whose parts are in different types (llama-quantize's mixes) ---- */

static void test_mixed(void) {
    { /* Q4_K | Q6_K | Q4_K (Q4_K_M's q | k | v with v in Q6_K, then another): three segments */
        const dtype dts[3] = {DTYPE_Q4_K, DTYPE_Q6_K, DTYPE_Q4_K};
        const int64_t outs[3] = {96, 40, 24};
        const bool bias[3] = {false, true, true};
        qlayer L = make_layer_n(dts, 3, 512, outs, bias);
        const int64_t Ts[4] = {1, 3, 8, 17};
        for (int i = 0; i < 4 && L.lin; i++) run_linear_x("Q4_K|Q6_K|Q4_K", &L, Ts[i], DTYPE_BF16, false);
        test_fused_layer(&L, "Q4_K|Q6_K|Q4_K", 2, QF_ACC);
        free_layer(&L);
    }
    { /* gate in Q4_K, up in Q5_K: the gated product as the composite (two segments) */
        const dtype dts[2] = {DTYPE_Q4_K, DTYPE_Q5_K};
        const int64_t outs[2] = {128, 128};
        const bool bias[2] = {false, false};
        qlayer L = make_layer_n(dts, 2, 512, outs, bias);
        test_fused_layer(&L, "Q4_K|Q5_K", 3, QF_NORM_SILU);
        test_fused_layer(&L, "Q4_K|Q5_K", 12, QF_NORM_SILU);
        free_layer(&L);
    }
    { /* Q8_0 beside Q4_0 and IQ4_NL (32-element blocks) */
        const dtype dts[3] = {DTYPE_Q8_0, DTYPE_Q4_0, DTYPE_IQ4_NL};
        const int64_t outs[3] = {33, 65, 30};
        const bool bias[3] = {true, false, true};
        qlayer L = make_layer_n(dts, 3, 320, outs, bias);
        const int64_t Ts[3] = {2, 5, 40};
        for (int i = 0; i < 3 && L.lin; i++) run_linear_x("Q8_0|Q4_0|IQ4_NL", &L, Ts[i], DTYPE_F32, false);
        free_layer(&L);
    }
    { /* a float part beside block parts: the layer in BF16 (block parts dequantized on the device) */
        const dtype dts[2] = {DTYPE_F32, DTYPE_Q8_0};
        const int64_t outs[2] = {50, 70};
        const bool bias[2] = {false, true};
        qlayer L = make_layer_n(dts, 2, 256, outs, bias);
        const int64_t Ts[2] = {2, 20};
        for (int i = 0; i < 2 && L.lin; i++) run_linear_x("F32|Q8_0", &L, Ts[i], DTYPE_BF16, true);
        free_layer(&L);
    }
}

/* ---- refusals ---- */

static void test_refusals(void) {
    float deq[64 * 2];
    unsigned char *b = make_blocks(DTYPE_Q8_0, 2, 64, deq);
    be_linear *lin = NULL;
    /* rows of 48 elements: not whole Q8_0 blocks */
    tensor w48 = tensor_2d(DTYPE_Q8_0, b, 2, 48);
    const tensor *wp[2] = {&w48, NULL};
    EXPECT_ERR(gpu->ops->linear_create(gpu, wp, NULL, 1, &lin), VLLM_ERR_INVALID_ARG, "linear", "blocks");
    CHECK(lin == NULL);
    /* a block part beside a part of an integer dtype */
    int32_t ib[128] = {0};
    tensor a = tensor_2d(DTYPE_Q8_0, b, 2, 64), c = tensor_2d(DTYPE_I32, ib, 2, 64);
    wp[0] = &a;
    wp[1] = &c;
    EXPECT_ERR(gpu->ops->linear_create(gpu, wp, NULL, 2, &lin), VLLM_ERR_UNSUPPORTED, "linear", "weight 1");
    /* a row stride of part of a block */
    tensor s = tensor_2d(DTYPE_Q8_0, b, 1, 32);
    s.row_stride = 48;
    wp[0] = &s;
    EXPECT_ERR(gpu->ops->linear_create(gpu, wp, NULL, 1, &lin), VLLM_ERR_INVALID_ARG, "linear", "stride");
    /* a row stride of whole blocks is taken: the first 32 elements of each 64 */
    s.shape[0] = 2;
    s.row_stride = 64;
    CHECK_OK(gpu->ops->linear_create(gpu, wp, NULL, 1, &lin));
    if (lin) {
        float x[32];
        for (int i = 0; i < 32; i++) x[i] = bf16r(rnd());
        tensor xg = put(gpu, DTYPE_BF16, 1, 32, x), yg = put(gpu, DTYPE_F32, 1, 2, NULL);
        gpu->ops->linear(gpu, lin, &xg, &yg);
        float *y = get(gpu, &yg), *xr = gemv_x(x, 1, 32);
        for (int r = 0; r < 2; r++) {
            double ref = 0;
            for (int k = 0; k < 32; k++) ref += (double)deq[r * 64 + k] * xr[k];
            CHECK_NEAR(y[r], ref, 1e-5 * (1 + fabs(ref)));
        }
        free(xr);
        free(y);
        gpu->ops->release(gpu, &xg);
        gpu->ops->release(gpu, &yg);
        gpu->ops->linear_free(gpu, lin);
    }
    free(b);
    CHECK_OK(gpu->ops->synchronize(gpu));
}

/* ---- FP8_B128 (block-scaled FP8 checkpoints, ops_linear_fp8.cu) ----
 *
 * Two parts (100 and 156 rows of 384: 3 blocks; per-row scales 1e-3 .. 0.1, an all-zero block) with a bias
 * on the second, against tensor/fp8.h: each output sum_g s_x s_w (q_x . q_w) + b, x quantized per 128 from the
 * BF16 values the GPU sees (the same bytes on both: one IEEE division each). T <= 8 (the FP8 GEMV): only the
 * order of the F32 additions differs, |d| <= 1e-5 S (S = sum |x'_k w_k|); larger T (BF16 tiles + cuBLAS):
 * both operands rounded to BF16, |d| <= 2^-7 S. F32 and BF16 outputs (BF16: + 2^-8 |ref|), the accumulating
 * form (y += , beta 1 in the GEMM), a graph replay of the GEMV on new inputs equal to eager. */
static void test_fp8(int64_t out0, int64_t out1, bool blocks128, int64_t in, int64_t T_big) {
    const int64_t outs[2] = {out0, out1}, out = outs[0] + outs[1];
    fp8_block *wb[2];
    float *row = malloc((size_t)in * sizeof *row), *bias = calloc((size_t)out, sizeof *bias);
    float gs[64] = {0};
    tensor wt[2], bt;
    printf("FP8_B128 (%lld + %lld rows, %s scales)\n", (long long)out0, (long long)out1,
           blocks128 ? "128 x 128 block" : "per-row");
    for (int p = 0; p < 2; p++) {
        wb[p] = malloc((size_t)(outs[p] * (in / FP8_B)) * sizeof(fp8_block));
        for (int64_t r = 0; r < outs[p]; r++) {
            const float sc = 1e-3f + 0.1f * (0.5f + 0.5f * rnd());
            for (int64_t k = 0; k < in; k++) row[k] = sc * rnd();
            if (r == 3)
                for (int64_t k = 0; k < FP8_B; k++) row[k] = 0.0f;
            if (blocks128 && r % 128 == 0) /* the checkpoint's layout: one scale per 128 rows and 128 columns */
                for (int g = 0; g < in / FP8_B && g < 64; g++) gs[g] = (0.1f + 1e-3f) / FP8_E4M3_MAX * (1.0f + 0.5f * rnd());
            fp8_quantize_row(row, in, blocks128 ? gs : NULL, wb[p] + r * (in / FP8_B));
        }
        wt[p] = tensor_2d(DTYPE_FP8_B128, wb[p], outs[p], in);
    }
    for (int64_t r = 0; r < outs[1]; r++) bias[outs[0] + r] = bf16r(0.5f * rnd());
    void *bb = pack(bias + outs[0], outs[1], DTYPE_BF16);
    bt = tensor_1d(DTYPE_BF16, bb, outs[1]);
    const tensor *wp[2] = {&wt[0], &wt[1]}, *bp[2] = {NULL, &bt};
    be_linear *lin = NULL;
    CHECK_MSG(takes(DTYPE_FP8_B128), "native_blocks lacks FP8_B128");
    vllm_status st = gpu->ops->linear_create(gpu, wp, bp, 2, &lin);
    CHECK_MSG(st == VLLM_OK, "FP8 linear_create: %s", vllm_last_error());
    const int64_t Ts[] = {1, 2, 3, 5, 8, 9, T_big};
    uint8_t *q = malloc((size_t)in);
    float *xsc = malloc((size_t)(in / FP8_B) * sizeof *xsc);
    for (size_t ti = 0; lin && ti < sizeof Ts / sizeof *Ts; ti++) {
        const int64_t T = Ts[ti];
        float *x = malloc((size_t)(T * in) * sizeof *x), *ref = malloc((size_t)(T * out) * sizeof *ref),
              *S = malloc((size_t)(T * out) * sizeof *S), *y0 = malloc((size_t)(T * out) * sizeof *y0);
        for (int64_t i = 0; i < T * in; i++) x[i] = bf16r(2.0f * rnd() * (i % 97 == 0 ? 30.0f : 1.0f));
        const float *tab = fp8_e4m3_table();
        for (int64_t t = 0; t < T; t++) {
            fp8_quantize_act(x + t * in, in, q, xsc);
            for (int p = 0, r0 = 0; p < 2; r0 += (int)outs[p], p++)
                for (int64_t r = 0; r < outs[p]; r++) {
                    const fp8_block *b = wb[p] + r * (in / FP8_B);
                    double sum = 0;
                    for (int64_t k = 0; k < in; k++)
                        sum += fabs((double)tab[q[k]] * xsc[k / FP8_B] * tab[b[k / FP8_B].q[k % FP8_B]] *
                                    fp8_block_scale(&b[k / FP8_B]));
                    ref[t * out + r0 + r] = fp8_vec_dot(b, q, xsc, in) + bias[r0 + r];
                    S[t * out + r0 + r] = (float)sum;
                }
        }
        for (int64_t i = 0; i < T * out; i++) y0[i] = 0.25f * rnd();
        /* T <= 8: the FP8 tensor cores' accumulation keeps about 14 bits (DeepSeek-V3 report, 3.3.2: why vLLM and
         * it sum at most 128 products before scaling) */
        const double rel = T <= 8 ? 1e-3 : 1.0 / 128;
        for (int k = 0; k < 3; k++) { /* F32 out, BF16 out, F32 accumulating */
            const dtype ydt = k == 1 ? DTYPE_BF16 : DTYPE_F32;
            tensor xg = put(gpu, DTYPE_BF16, T, in, x), yg = put(gpu, ydt, T, out, k == 2 ? y0 : NULL);
            if (k == 2) {
                linear_fuse f = {0};
                f.accumulate = true;
                gpu->ops->linear_fused(gpu, lin, &xg, &f, &yg);
            } else {
                gpu->ops->linear(gpu, lin, &xg, &yg);
            }
            CHECK_OK(gpu->ops->synchronize(gpu));
            float *y = get(gpu, &yg);
            int64_t bad = 0, first = -1;
            for (int64_t i = 0; i < T * out; i++) {
                const double want = ref[i] + (k == 2 ? y0[i] : 0.0);
                const double tol = rel * S[i] + 1e-6 + (ydt == DTYPE_BF16 ? fabs(want) / 256 : 0.0);
                if (!(fabs(y[i] - want) <= tol)) {
                    if (first < 0) first = i;
                    bad++;
                }
            }
            CHECK_MSG(bad == 0, "FP8 linear T %lld (%s%s): %lld off, first %lld: gpu %.7g ref %.7g (S %.4g)", (long long)T,
                      dtype_name(ydt), k == 2 ? ", accumulating" : "", (long long)bad, (long long)first,
                      first >= 0 ? (double)y[first] : 0.0, first >= 0 ? ref[first] + (k == 2 ? y0[first] : 0.0) : 0.0,
                      first >= 0 ? (double)S[first] : 0.0);
            free(y);
            gpu->ops->release(gpu, &xg);
            gpu->ops->release(gpu, &yg);
        }
        printf("  FP8_B128 linear T %lld: F32, BF16 and accumulating outputs checked\n", (long long)T);
        free(x), free(ref), free(S), free(y0);
    }
    /* a graph of the decode GEMV replayed on new inputs equals eager */
    if (lin) {
        float *x1 = rand_x(2, in), *x2 = rand_x(2, in);
        tensor xg = put(gpu, DTYPE_BF16, 2, in, x1), yg = put(gpu, DTYPE_BF16, 2, out, NULL),
               ye = put(gpu, DTYPE_BF16, 2, out, NULL);
        gpu->ops->linear(gpu, lin, &xg, &yg);
        CHECK_OK(gpu->ops->synchronize(gpu));
        be_graph *gr = NULL;
        CHECK_OK(gpu->ops->graph_begin(gpu));
        gpu->ops->linear(gpu, lin, &xg, &yg);
        CHECK_OK(gpu->ops->graph_end(gpu, &gr));
        if (gr) {
            refill(gpu, &xg, x2);
            poison(&yg);
            CHECK_OK(gpu->ops->graph_launch(gpu, gr));
            gpu->ops->linear(gpu, lin, &xg, &ye);
            float *a = get(gpu, &yg), *b = get(gpu, &ye);
            CHECK_MSG(memcmp(a, b, (size_t)(2 * out) * sizeof *a) == 0, "FP8 graph replay differs from eager");
            free(a), free(b);
            gpu->ops->graph_free(gpu, gr);
        }
        gpu->ops->release(gpu, &xg);
        gpu->ops->release(gpu, &yg);
        gpu->ops->release(gpu, &ye);
        free(x1), free(x2);
    }
    /* refused: FP8 parts beside BF16 ones, rows of partial blocks */
    if (lin) gpu->ops->linear_free(gpu, lin);
    float *bw = calloc((size_t)(4 * in), sizeof *bw);
    void *bwb = pack(bw, 4 * in, DTYPE_BF16);
    tensor bft = tensor_2d(DTYPE_BF16, bwb, 4, in), part = tensor_2d(DTYPE_FP8_B128, wb[0], 4, in - 128 + 64);
    const tensor *mix[2] = {&wt[0], &bft}, *one[1] = {&part};
    lin = NULL;
    CHECK(gpu->ops->linear_create(gpu, mix, NULL, 2, &lin) == VLLM_ERR_UNSUPPORTED && !lin);
    CHECK(gpu->ops->linear_create(gpu, one, NULL, 1, &lin) == VLLM_ERR_INVALID_ARG && !lin);
    free(bw), free(bwb), free(q), free(xsc), free(row), free(bias), free(bb), free(wb[0]), free(wb[1]);
}

/* linear_fused on an FP8 layer of gate and up halves (n rows each, a bias on the gate's): the decode GEMV's
 * gated epilogue (after the norm op when there is one) against the same layer's plain linear (F32) followed by
 * act(gate) * up on the host, the output BF16 (2^-8). Where the composite runs (T 9, or no MMA GEMV: mma false)
 * its mid is BF16: the reference's linear output is BF16 too (the same kernel), only the last rounding apart. */
static void test_fp8_fused(int64_t n, int64_t in, be_act act, bool norm, bool mma) {
    fp8_block *wb[2];
    float *row = malloc((size_t)in * sizeof *row), *bias = calloc((size_t)(2 * n), sizeof *bias);
    tensor wt[2], bt;
    for (int p = 0; p < 2; p++) {
        wb[p] = malloc((size_t)(n * (in / FP8_B)) * sizeof(fp8_block));
        for (int64_t r = 0; r < n; r++) {
            for (int64_t k = 0; k < in; k++) row[k] = 0.05f * rnd();
            fp8_quantize_row(row, in, NULL, wb[p] + r * (in / FP8_B));
        }
        wt[p] = tensor_2d(DTYPE_FP8_B128, wb[p], n, in);
    }
    for (int64_t r = 0; r < n; r++) bias[r] = bf16r(0.3f * rnd());
    void *bb = pack(bias, n, DTYPE_BF16);
    bt = tensor_1d(DTYPE_BF16, bb, n);
    const tensor *wp[2] = {&wt[0], &wt[1]}, *bp[2] = {&bt, NULL};
    be_linear *lin = NULL;
    CHECK_OK(gpu->ops->linear_create(gpu, wp, bp, 2, &lin));
    const int64_t Ts[] = {1, 3, 8, 9};
    for (size_t ti = 0; lin && ti < sizeof Ts / sizeof *Ts; ti++) {
        const int64_t T = Ts[ti];
        float *x = rand_x(T, in), *nw = malloc((size_t)in * sizeof *nw);
        for (int64_t i = 0; i < in; i++) nw[i] = bf16r(1.0f + 0.3f * rnd());
        tensor xg = put(gpu, DTYPE_BF16, T, in, x), nw2 = put(gpu, DTYPE_BF16, 1, in, nw);
        tensor nwg = tensor_1d(DTYPE_BF16, nw2.data, in);
        tensor hg = put(gpu, DTYPE_BF16, T, in, NULL), h2 = put(gpu, DTYPE_BF16, T, in, NULL);
        const bool fused = mma && T <= 8;
        tensor mg = put(gpu, DTYPE_BF16, T, 2 * n, NULL), m2 = put(gpu, fused ? DTYPE_F32 : DTYPE_BF16, T, 2 * n, NULL);
        tensor yg = put(gpu, DTYPE_BF16, T, n, NULL); /* (the composite's act_mul writes BF16) */
        poison(&yg);
        linear_fuse f = {.norm_w = norm ? &nwg : NULL, .eps = 1e-6f, .silu_mul = true, .h = &hg, .mid = &mg, .act = act};
        gpu->ops->linear_fused(gpu, lin, &xg, &f, &yg);
        if (norm) {
            const be_norm nm = {BE_NORM_RMS, &nwg, NULL, 1e-6f};
            gpu->ops->norm(gpu, &xg, &nm, &h2);
        }
        gpu->ops->linear(gpu, lin, norm ? &h2 : &xg, &m2);
        float *y = get(gpu, &yg), *m = get(gpu, &m2);
        int64_t bad = 0, first = -1;
        double mx = 0;
        for (int64_t i = 0; i < T * n; i++) {
            const float g = m[(i / n) * 2 * n + i % n], u = m[(i / n) * 2 * n + n + i % n];
            const double a = act == BE_ACT_GELU_TANH ? 0.5 * g * (1.0 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)))
                                                     : g / (1.0 + exp(-(double)g));
            const double want = a * u,
                         tol = fused ? 1e-5 * (fabs(want) + fabs(u) * 1e-2) + fabs(want) / 256 + 1e-7 : fabs(want) / 128 + 1e-6;
            mx = fmax(mx, fabs(want));
            if (!(fabs(y[i] - want) <= tol)) {
                if (first < 0) first = i;
                bad++;
            }
        }
        CHECK_MSG(bad == 0, "FP8 linear_fused gated (%s%s, T %lld, n %lld): %lld off, first %lld: %.7g vs %.7g",
                  act == BE_ACT_GELU_TANH ? "gelu_tanh" : "silu", norm ? ", norm" : "", (long long)T, (long long)n,
                  (long long)bad, (long long)first, first >= 0 ? (double)y[first] : 0.0,
                  first >= 0 ? (double)m[(first / n) * 2 * n + first % n] : 0.0);
        printf("  FP8_B128 linear_fused gated%s T %lld: checked (max |y| %.3g)\n", norm ? " + norm" : "", (long long)T, mx);
        free(y), free(m), free(x), free(nw);
        tensor *ts[] = {&xg, &nw2, &hg, &h2, &mg, &m2, &yg};
        for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) gpu->ops->release(gpu, ts[i]);
    }
    if (lin) gpu->ops->linear_free(gpu, lin);
    free(row), free(bias), free(bb), free(wb[0]), free(wb[1]);
}

/* ---- I4_B128 (AWQ / GPTQ 4-bit, ops_linear_int4.cu) ----
 *
 * Two parts (out0 + out1 rows of `in`, a bias on the second) of random nibbles with a scale and zero per group
 * of G (128, 64, 32: the kernel's three layouts; zeros up to 16), against the dequantized values
 * (i4_dequantize_row): T <= 8 (the MMA GEMV) and 8 < T <= 64 (k_i4_gemm, x staged in shared memory: 2, 4 and 8
 * token tiles per CTA, partial ones) |d| <= 1e-5 S ((q - z) and x exact in BF16, F32 sums), larger T (BF16
 * tiles + cuBLAS) 2^-7 S (S = sum |x w|); F32 and accumulating outputs; the gated linear_fused (gate rows
 * then up rows) against linear + act(gate) * up on the host. */
static void test_int4(int64_t out0, int64_t out1, int64_t in, int G) {
    const int64_t outs[2] = {out0, out1}, out = out0 + out1, nb = in / I4_B;
    i4_block *wb[2];
    float *deq = malloc((size_t)(out * in) * sizeof *deq), *bias = calloc((size_t)out, sizeof *bias);
    tensor wt[2], bt;
    printf("I4_B128 (%lld + %lld rows of %lld, group %d)\n", (long long)out0, (long long)out1, (long long)in, G);
    for (int p = 0, r0 = 0; p < 2; r0 += (int)outs[p], p++) {
        wb[p] = calloc((size_t)(outs[p] * nb), sizeof(i4_block));
        for (int64_t r = 0; r < outs[p]; r++)
            for (int64_t b = 0; b < nb; b++) {
                i4_block *k = &wb[p][r * nb + b];
                for (int i = 0; i < I4_B / 2; i++) k->q[i] = (uint8_t)(rnd_u32() & 0xff);
                for (int j = 0; j < I4_B / I4_SUB; j++) {
                    if (j % (G / I4_SUB) == 0) {
                        k->s[j] = bf16r(0.01f + 0.02f * (0.5f + 0.5f * rnd())); /* (checkpoints' F16 / BF16 scales) */
                        k->z[j] = (uint8_t)(rnd_u32() % 17);
                    } else {
                        k->s[j] = k->s[j - 1];
                        k->z[j] = k->z[j - 1];
                    }
                }
            }
        for (int64_t r = 0; r < outs[p]; r++) i4_dequantize_row(wb[p] + r * nb, in, deq + (r0 + r) * in);
        wt[p] = tensor_2d(DTYPE_I4_B128, wb[p], outs[p], in);
    }
    for (int64_t r = 0; r < outs[1]; r++) bias[out0 + r] = bf16r(0.5f * rnd());
    void *bb = pack(bias + out0, outs[1], DTYPE_BF16);
    bt = tensor_1d(DTYPE_BF16, bb, outs[1]);
    const tensor *wp[2] = {&wt[0], &wt[1]}, *bp[2] = {NULL, &bt};
    be_linear *lin = NULL;
    CHECK_MSG(takes(DTYPE_I4_B128), "native_blocks lacks I4_B128");
    CHECK_MSG(gpu->ops->linear_create(gpu, wp, bp, 2, &lin) == VLLM_OK, "I4 linear_create: %s", vllm_last_error());
    const int64_t Ts[] = {1, 2, 5, 8, 9, 16, 24, 40, 64, 100};
    for (size_t ti = 0; lin && ti < sizeof Ts / sizeof *Ts; ti++) {
        const int64_t T = Ts[ti];
        float *x = rand_x(T, in), *ref = malloc((size_t)(T * out) * sizeof *ref), *S = malloc((size_t)(T * out) * sizeof *S),
              *y0 = malloc((size_t)(T * out) * sizeof *y0);
        for (int64_t t = 0; t < T; t++)
            for (int64_t o = 0; o < out; o++) {
                double sum = 0, abs = 0;
                for (int64_t k = 0; k < in; k++) {
                    sum += (double)x[t * in + k] * deq[o * in + k];
                    abs += fabs((double)x[t * in + k] * deq[o * in + k]);
                }
                ref[t * out + o] = (float)sum + bias[o];
                S[t * out + o] = (float)abs;
            }
        for (int64_t i = 0; i < T * out; i++) y0[i] = 0.25f * rnd();
        const double rel = T <= 64 ? 1e-5 : 1.0 / 128;
        for (int k = 0; k < 2; k++) { /* F32 out, F32 accumulating */
            tensor xg = put(gpu, DTYPE_BF16, T, in, x), yg = put(gpu, DTYPE_F32, T, out, k ? y0 : NULL);
            if (k) {
                linear_fuse f = {0};
                f.accumulate = true;
                gpu->ops->linear_fused(gpu, lin, &xg, &f, &yg);
            } else {
                gpu->ops->linear(gpu, lin, &xg, &yg);
            }
            CHECK_OK(gpu->ops->synchronize(gpu));
            float *y = get(gpu, &yg);
            int64_t bad = 0, first = -1;
            for (int64_t i = 0; i < T * out; i++) {
                const double want = ref[i] + (k ? y0[i] : 0.0);
                if (!(fabs(y[i] - want) <= rel * S[i] + 1e-6)) {
                    if (first < 0) first = i;
                    bad++;
                }
            }
            CHECK_MSG(bad == 0, "I4 linear G %d T %lld%s: %lld off, first %lld: gpu %.7g ref %.7g (S %.4g)", G,
                      (long long)T, k ? " (accumulating)" : "", (long long)bad, (long long)first,
                      first >= 0 ? (double)y[first] : 0.0, first >= 0 ? ref[first] + (k ? y0[first] : 0.0) : 0.0,
                      first >= 0 ? (double)S[first] : 0.0);
            free(y);
            gpu->ops->release(gpu, &xg);
            gpu->ops->release(gpu, &yg);
        }
        /* the gated form: gate = the first out / 2 rows, up = the rest (out even) */
        if (out % 2 == 0) {
            const int64_t n = out / 2;
            /* (the composite, T > 8: a BF16 mid, and its act_mul writes BF16) */
            tensor xg = put(gpu, DTYPE_BF16, T, in, x), yg = put(gpu, T <= 8 ? DTYPE_F32 : DTYPE_BF16, T, n, NULL);
            tensor mg = put(gpu, DTYPE_BF16, T, out, NULL), m2 = put(gpu, T <= 8 ? DTYPE_F32 : DTYPE_BF16, T, out, NULL);
            linear_fuse f = {.silu_mul = true, .mid = &mg, .act = BE_ACT_SILU};
            gpu->ops->linear_fused(gpu, lin, &xg, &f, &yg);
            gpu->ops->linear(gpu, lin, &xg, &m2);
            float *y = get(gpu, &yg), *m = get(gpu, &m2);
            int64_t bad = 0;
            for (int64_t i = 0; i < T * n; i++) {
                const double g = m[(i / n) * out + i % n], u = m[(i / n) * out + n + i % n], want = g / (1.0 + exp(-g)) * u;
                bad += !(fabs(y[i] - want) <= (T <= 8 ? 1e-5 * (fabs(want) + 1e-2 * fabs(u)) : fabs(want) / 128) + 1e-7);
            }
            CHECK_MSG(bad == 0, "I4 linear_fused gated G %d T %lld: %lld off", G, (long long)T, (long long)bad);
            free(y), free(m);
            tensor *ts[] = {&xg, &yg, &mg, &m2};
            for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) gpu->ops->release(gpu, ts[i]);
        }
        printf("  I4_B128 linear T %lld: F32, accumulating%s checked\n", (long long)T, out % 2 ? "" : " and gated");
        free(x), free(ref), free(S), free(y0);
    }
    if (lin) gpu->ops->linear_free(gpu, lin);
    free(deq), free(bias), free(bb), free(wb[0]), free(wb[1]);
}

int main(void) {
    vllm_status st = backend_create("cuda", NULL, &gpu);
    if (st != VLLM_OK) {
        printf("skipped: no CUDA device (%s)\n", vllm_last_error());
        return 77;
    }
    backend_options co = {.num_threads = 4};
    CHECK_OK(backend_create("cpu", &co, &cpu));
    if (!cpu) TEST_END();

    /* every type ggml_quant.h reads */
    for (int i = 0; i < NTYPES; i++) {
        CHECK(gq_type_supported(gtype(BLOCK_TYPES[i])));
        CHECK_MSG(takes(BLOCK_TYPES[i]), "native_blocks lacks %s", dtype_name(BLOCK_TYPES[i]));
    }
    for (int i = 0; i < NTYPES; i++) {
        const dtype dt = BLOCK_TYPES[i];
        if (!takes(dt)) continue;
        printf("%s\n", dtype_name(dt));
        test_linear_type(dt);
        test_fused_type(dt, i);
        test_embedding_type(dt);
    }
    test_embedding_wide(DTYPE_Q6_K, 256 * 130);
    test_embedding_wide(DTYPE_Q8_0, 32 * 1000);
    test_linear_tiles(DTYPE_Q4_K);
    test_linear_tiles(DTYPE_Q8_0);
    test_graph_case(DTYPE_Q4_K, 4);
    test_graph_case(DTYPE_Q6_K, 1);
    test_graph_case(DTYPE_Q5_0, 17);
    test_experts(DTYPE_Q4_K, DTYPE_Q6_K, 3);   /* decode: the expert GEMV */
    test_experts(DTYPE_Q4_K, DTYPE_Q6_K, 40);  /* 80 pairs: the grouped GEMM */
    test_experts(DTYPE_Q8_0, DTYPE_Q8_0, 5);
    test_experts(DTYPE_IQ4_XS, DTYPE_Q5_K, 2);
    test_experts(DTYPE_MXFP4, DTYPE_MXFP4, 3); /* gpt-oss's GGUF experts */
    test_mixed();
    test_refusals();
    test_norm_int8(DTYPE_Q4_K);
    test_norm_int8(DTYPE_Q8_0);
    test_norm_int8(DTYPE_IQ4_NL);
    test_fp8(100, 156, false, 3 * FP8_B, 37);
    test_fp8(128, 256, true, 3 * FP8_B, 37);
    test_fp8(130, 120, false, 2 * FP8_B, 12); /* rows not filling the GEMV's 16-row tiles */
    test_fp8(1024, 512, true, 2048, 300);     /* the prefill on cuBLASLt's FP8 GEMM (128 x 128 weight scales) */
    test_fp8(4000, 96, false, 12288, 2);      /* the GEMV's 8 tokens of K 12288 in shared memory */
    test_fp8(6000, 200, false, 1024, 2);      /* CTAs looping over tiles (more than 2 per SM), 1 chunk per warp */
    test_fp8(4800, 64, false, 5120, 2);       /* ... 5 chunks per warp: the stream crossing tiles mid-step */
    test_fp8_fused(100, 3 * FP8_B, BE_ACT_SILU, true, true);
    test_fp8_fused(36, 2 * FP8_B, BE_ACT_GELU_TANH, false, true);
    test_int4(100, 156, 3 * I4_B, 128);
    test_int4(64, 72, 2 * I4_B, 64);
    test_int4(40, 40, 4 * I4_B, 32);
    test_int4(2000, 48, 12 * I4_B, 128); /* k_i4_gemm splitting K in 3 */
    test_int4(128, 64, 8 * I4_B, 64);    /* k_i4_gemm splitting K in 2, groups of 64 and 32 */
    test_int4(72, 88, 16 * I4_B, 32);
    test_int4(4224, 200, 32 * I4_B, 128); /* CTAs looping over tiles, the next tile's chunks loaded early */
    CHECK_OK(gpu->ops->synchronize(gpu));
    /* the CUDA-core FP8 GEMV (VLLM_CUDA_F8_GEMV=warp; GPUs before sm_89) */
    backend_free(gpu);
    gpu = NULL;
    setenv("VLLM_CUDA_F8_GEMV", "warp", 1);
    CHECK_OK(backend_create("cuda", NULL, &gpu));
    if (gpu) test_fp8(100, 156, false, 3 * FP8_B, 9);
    if (gpu) test_fp8_fused(100, 3 * FP8_B, BE_ACT_SILU, true, false);
    unsetenv("VLLM_CUDA_F8_GEMV");
    if (gpu) CHECK_OK(gpu->ops->synchronize(gpu));
    backend_free(gpu);
    gpu = NULL;

    /* the GEMV on BF16 activations (VLLM_CUDA_QGEMV_XQ=0): the same kernels without the int8 step */
    setenv("VLLM_CUDA_QGEMV_XQ", "0", 1);
    xq_on = false;
    CHECK_OK(backend_create("cuda", NULL, &gpu));
    for (int i = 0; i < NTYPES && gpu; i++) {
        printf("%s (BF16 activations)\n", dtype_name(BLOCK_TYPES[i]));
        test_linear_type(BLOCK_TYPES[i]);
        test_fused_type(BLOCK_TYPES[i], i);
    }
    if (gpu) test_graph_case(DTYPE_Q4_K, 4);
    /* the FP8 prefill on BF16 tiles and cuBLAS (VLLM_CUDA_F8_GEMM=tiles) at a shape cuBLASLt's FP8 GEMM takes */
    if (gpu) backend_free(gpu);
    gpu = NULL;
    setenv("VLLM_CUDA_F8_GEMM", "tiles", 1);
    CHECK_OK(backend_create("cuda", NULL, &gpu));
    if (gpu) test_fp8(1024, 512, true, 2048, 300);
    unsetenv("VLLM_CUDA_F8_GEMM");
    if (gpu) test_mixed();
    unsetenv("VLLM_CUDA_QGEMV_XQ");

    if (gpu) CHECK_OK(gpu->ops->synchronize(gpu));
    backend_free(gpu);
    backend_free(cpu);
    TEST_END();
}
