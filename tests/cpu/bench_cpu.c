/*
 * bench_cpu.c: a microbenchmark of the CPU backend's hot ops (not a test;
 * build it by hand):
 *   gcc -std=c11 -O3 -march=native -D_GNU_SOURCE -Iinclude -Isrc -Itests src/core/error.c
 *       src/core/log.c src/tensor/tensor.c src/tensor/backend.c src/cpu/[a-z]*.c
 *       tests/cpu/bench_cpu.c -o bench_cpu -lm -lpthread
 *   ./bench_cpu [threads]
 * Shapes are Qwen2.5-0.5B's (hidden 896, intermediate 4864, 14 / 2 heads of 64).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_test_util.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Runs fn until 0.3 s have passed; returns seconds per call. */
#define TIME_IT(secs, stmt)                                                       \
    do {                                                                          \
        stmt;                                                                     \
        int reps_ = 0;                                                            \
        double t0_ = now_s(), t1_;                                                \
        do {                                                                      \
            stmt;                                                                 \
            reps_++;                                                              \
        } while ((t1_ = now_s()) - t0_ < 0.3);                                    \
        secs = (t1_ - t0_) / reps_;                                               \
    } while (0)

static void bench_linear(backend *be, dtype dt, int64_t T, int64_t in, int64_t out) {
    size_t wbytes = (size_t)(in * out) * dtype_size(dt);
    unsigned char *w = malloc(wbytes);
    for (int64_t i = 0; i < in * out; i++) ct_store(w, dt, i, ct_uniform() * 0.1f);
    float *x = malloc((size_t)(T * in) * sizeof(float)), *y = malloc((size_t)(T * out) * sizeof(float));
    ct_fill(x, T * in, 1.0f);
    tensor wt = tensor_2d(dt, w, out, in), xt = tensor_2d(DTYPE_F32, x, T, in), yt = tensor_2d(DTYPE_F32, y, T, out);
    const tensor *wp[1] = {&wt};
    be_linear *lin = NULL;
    if (be->ops->linear_create(be, wp, NULL, 1, &lin)) exit(1);
    double s;
    TIME_IT(s, be->ops->linear(be, lin, &xt, &yt));
    printf("linear %-4s T=%-4lld in=%-5lld out=%-6lld %9.1f us  %7.1f GFLOP/s  %6.1f GB/s weights\n",
           dtype_name(dt), (long long)T, (long long)in, (long long)out, s * 1e6, 2.0 * T * in * out / s * 1e-9,
           (double)wbytes / s * 1e-9);
    be->ops->linear_free(be, lin);
    free(w);
    free(x);
    free(y);
}

static void noop_task(void *ctx, int64_t start, int64_t end, int tid) {
    (void)tid;
    float *x = ctx;
    for (int64_t i = start; i < end; i++) x[i * 16] += 1.0f;  /* one cache line per item */
}

/* Cost of waking every thread for a trivial job, back to back. */
static void bench_dispatch(backend *be) {
    tp_pool *pool = cpu_of(be)->pool;
    int n = tp_num_threads(pool);
    float *x = calloc((size_t)n * 16, sizeof(float));
    double s;
    TIME_IT(s, tp_run(pool, n, noop_task, x));
    printf("dispatch to %d threads: %.2f us\n", n, s * 1e6);
    free(x);
}

static void bench_small_ops(backend *be) {
    const int64_t D = 896;
    float *x = malloc(D * sizeof(float)), *h = malloc(D * sizeof(float));
    uint16_t *w = malloc(D * sizeof(uint16_t));
    ct_fill(x, D, 1.0f);
    for (int64_t i = 0; i < D; i++) w[i] = f32_to_bf16(1.0f);
    tensor xt = tensor_2d(DTYPE_F32, x, 1, D), ht = tensor_2d(DTYPE_F32, h, 1, D), wt = tensor_1d(DTYPE_BF16, w, D);
    double s;
    TIME_IT(s, be->ops->rms_norm(be, &xt, &wt, 1e-6f, &ht));
    printf("rms_norm T=1 D=896: %.2f us\n", s * 1e6);
    TIME_IT(s, be->ops->add(be, &xt, &ht));
    printf("add      T=1 D=896: %.2f us\n", s * 1e6);
    free(x);
    free(h);
    free(w);
}

static void bench_attention(backend *be, int T, int ctx) {
    /* T decode sequences, each with ctx tokens of context, block size 16 */
    const int nh = 14, nkv = 2, hd = 64, bs = 16;
    const int nb_seq = (ctx + bs - 1) / bs, nb = T * nb_seq;
    int64_t cshape[4] = {nb, bs, nkv, hd};
    tensor kc = tensor_make(DTYPE_F32, NULL, 4, cshape), vc = kc;
    if (be->ops->alloc(be, &kc) || be->ops->alloc(be, &vc)) exit(1);
    ct_fill(kc.data, (int64_t)nb * bs * nkv * hd, 1.0f);
    ct_fill(vc.data, (int64_t)nb * bs * nkv * hd, 1.0f);
    float *q = malloc((size_t)T * nh * hd * sizeof(float)), *o = malloc((size_t)T * nh * hd * sizeof(float));
    ct_fill(q, (int64_t)T * nh * hd, 1.0f);
    int32_t *qsl = malloc((size_t)(T + 1) * sizeof(int32_t)), *sl = malloc((size_t)T * sizeof(int32_t));
    int32_t *bt = malloc((size_t)nb * sizeof(int32_t));
    for (int s = 0; s <= T; s++) qsl[s] = s;
    for (int s = 0; s < T; s++) sl[s] = ctx;
    for (int i = 0; i < nb; i++) bt[i] = i;
    attn_meta m = {.num_seqs = T, .num_tokens = T, .max_query_len = 1, .max_seq_len = ctx, .block_size = bs,
                   .max_blocks_per_seq = nb_seq, .query_start_loc = tensor_1d(DTYPE_I32, qsl, T + 1),
                   .seq_lens = tensor_1d(DTYPE_I32, sl, T), .block_tables = tensor_2d(DTYPE_I32, bt, T, nb_seq)};
    attn_params ap = {.scale = 0.125f, .num_heads = nh, .num_kv_heads = nkv, .head_dim = hd};
    tensor qt = tensor_2d(DTYPE_F32, q, T, nh * hd), ot = tensor_2d(DTYPE_F32, o, T, nh * hd);
    double s;
    TIME_IT(s, be->ops->attention(be, &qt, &kc, &vc, &m, &ap, &ot));
    printf("attention decode seqs=%d ctx=%d: %.1f us\n", T, ctx, s * 1e6);
    be->ops->release(be, &kc);
    be->ops->release(be, &vc);
    free(q);
    free(o);
    free(qsl);
    free(sl);
    free(bt);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    backend *be = ct_backend(threads, 0);
    printf("threads: %d\n", cpu_of(be)->num_threads);
    bench_dispatch(be);
    bench_small_ops(be);
    for (int d = 0; d < 3; d++) {
        dtype dt = CT_WDTYPES[d];
        bench_linear(be, dt, 1, 896, 1152);    /* qkv */
        bench_linear(be, dt, 1, 896, 9728);    /* gate_up */
        bench_linear(be, dt, 1, 4864, 896);    /* down */
    }
    bench_linear(be, DTYPE_BF16, 1, 896, 151936);  /* lm_head */
    bench_linear(be, DTYPE_BF16, 8, 896, 9728);
    bench_linear(be, DTYPE_BF16, 128, 896, 9728);
    bench_linear(be, DTYPE_BF16, 128, 4864, 896);
    bench_linear(be, DTYPE_F32, 128, 896, 9728);
    bench_attention(be, 1, 1024);
    bench_attention(be, 16, 1024);
    bench_attention(be, 1, 8192);
    backend_free(be);
    (void)t_checks;
    (void)t_failures;
    return 0;
}
