/*
 * test_cuda_perf.c: timings of the CUDA backend's decode and prefill paths
 * on synthetic decoders with the shapes of Qwen3-0.6B and Qwen3-8B (random
 * BF16 weights, every layer's weights a separate device copy so that they
 * stream from device memory as a real model's do), issued through the
 * backend ops as llama.c issues them (linear_fused with the norms, the
 * gated product and the residual adds; fused q/k norm +
 * rope + KV write, one metadata upload per step): a 512-token prefill, a
 * decode step at context 257 run eagerly and as a graph (batch 1, 8, 32;
 * VLLM_PERF_BATCHES="1 256" sets others, up to 512), each decode op alone
 * in a graph over all layers (batch 1; VLLM_PERF_OP_BATCHES: those of the
 * timed batches to break down), and sampling (greedy and temperature 1)
 * over the 151,936-token vocabulary. It checks that the
 * outputs are finite and that a graph replay equals the eager step, and
 * prints a table; the times are for the reader (tools/device/check.sh).
 *
 * The block-type GEMV (GGUF weights, src/cuda/ops_linear_blocks.cu): GB/s of the file's bytes for a
 * (4096, 4096) and a (14336, 4096) layer in Q4_K, Q5_K, Q6_K, Q8_0 and Q4_0 at T = 1 and 8 (16 distinct
 * layers per graph, so that the weights stream from device memory), next to BF16's.
 *
 * FP8_B128 / I4_B128 (issue 16's block-FP8 and 4-bit checkpoints): the same measure at the Qwen3-8B layers' shapes
 * for T = 1, 8 (decode GEMVs), 16, 64 (I4: the small-batch GEMM) and 256, beside BF16.
 *
 * MLA decode attention alone (attention_mla, DeepSeek-V2-Lite's 16 heads and V3's 128; L 512 + R 64, BF16 cache):
 * batch 1 and 8 at context 4k, 16k and 32k over 8 layers' distinct caches in a graph; per layer us, the bytes read
 * (latents, queries, output) and the effective GB/s against 4.25 TB/s (VLLM_CUDA_MLA=generic: the general kernel's).
 *
 * Exits 77 ("no CUDA device: skipped") without a GPU or a CUDA build.
 * VLLM_PERF_SHAPES=0.6b|8b|moe|blocks|quant|mla picks one part (default: all); gemma3-12b (only when named) runs
 * the decoder part on Gemma-3-12B's shapes.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sample/sample.h"
#include "tensor/backend.h"
#include "tensor/dummy.h"
#include "tensor/fp8.h"
#include "tensor/ggml_dtype.h"
#include "tensor/ggml_quant.h"
#include "tensor/int4.h"
#include "test.h"

static backend *gpu;

typedef struct shape {
    const char *name;
    int D, I, nh, nkv, hd, L, V;
} shape;

static const shape SHAPES[] = {
    {"qwen3-0.6b", 1024, 3072, 16, 8, 128, 28, 151936},
    {"qwen3-8b", 4096, 12288, 32, 8, 128, 36, 151936},
    /* Gemma-3-12B's layer shapes (issue 11: K 3840, head_dim 256, a 262k vocabulary) in the Qwen layout above
     * (no sandwich norms, SiLU): run only when VLLM_PERF_SHAPES names it */
    {"gemma3-12b", 3840, 15360, 16, 8, 256, 48, 262208},
};

#define BS 16          /* KV block size */
#define CTX_BLOCKS 40  /* blocks per sequence: 640 tokens */
#define MAX_T 512      /* the largest step (the prefill) */
#define MAX_BATCHES 8
/* the decode batches timed (VLLM_PERF_BATCHES="1 8 32 256": default 1 8 32) and those broken down per op
 * (VLLM_PERF_OP_BATCHES: default 1); max_s, the largest, sizes the KV caches, the logits and the metadata */
static int batches[MAX_BATCHES] = {1, 8, 32}, n_batches = 3, op_batches[MAX_BATCHES] = {1}, n_op_batches = 1;
static int max_s = 1;
#define DECODE_POS 256 /* decode steps run at position 256 (context 257) */
#define MAX_POS 1024

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rnd(void) { return (float)((double)rnd_u32() / 4294967296.0 * 2.0 - 1.0); }

/* n BF16 values of scale * uniform(-1, 1): 16M random values, tiled */
static uint16_t *rand_bf16(size_t n, float scale) {
    uint16_t *p = malloc(n * sizeof *p);
    if (!p) return NULL;
    size_t base = n < ((size_t)1 << 24) ? n : ((size_t)1 << 24);
    for (size_t i = 0; i < base; i++) p[i] = f32_to_bf16(scale * rnd());
    for (size_t i = base; i < n; i += base) memcpy(p + i, p, (n - i < base ? n - i : base) * sizeof *p);
    return p;
}

typedef struct model {
    shape sh;
    tensor embed, cos_sin, final_norm;
    tensor *in_norm, *post_norm, *qn, *kn, *kc, *vc;
    be_linear **qkv, **o, **gu, **down, *head;
    tensor x, h, qkv_b, attn, ob, gu_b, a, sel, logits;
    tensor meta;   /* I32: ids, positions, qsl, seq_lens, block tables, logits rows, slots (I64) */
} model;

/* One step's views into the model's buffers. */
typedef struct step {
    int T, S, N;
    tensor ids, pos, lidx, x, h, qkv_b, attn, ob, gu_b, a, sel, sel_h, logits;
    attn_meta m;
    int32_t *host;   /* the metadata, packed as model.meta */
    size_t host_bytes;
} step;

static vllm_status import_bf16(const uint16_t *src, int64_t rows, int64_t cols, tensor *out) {
    tensor h = tensor_2d(DTYPE_BF16, (void *)src, rows, cols);
    if (rows == 1) {
        h = tensor_1d(DTYPE_BF16, (void *)src, cols);
    }
    return gpu->ops->import(gpu, &h, out);
}

static be_linear *linear_from(const uint16_t *src, int64_t out, int64_t in) {
    tensor w = tensor_2d(DTYPE_BF16, (void *)src, out, in);
    const tensor *ws[1] = {&w};
    be_linear *l = NULL;
    vllm_status st = gpu->ops->linear_create(gpu, ws, NULL, 1, &l);
    CHECK_MSG(st == VLLM_OK, "linear_create (%lld, %lld): %s", (long long)out, (long long)in, vllm_last_error());
    return l;
}

static tensor act(dtype dt, int64_t rows, int64_t cols) {
    tensor t = tensor_2d(dt, NULL, rows, cols);
    vllm_status st = gpu->ops->alloc(gpu, &t);
    CHECK_MSG(st == VLLM_OK, "alloc: %s", vllm_last_error());
    return t;
}

static bool model_build(model *md, const shape *sh) {
    memset(md, 0, sizeof *md);
    md->sh = *sh;
    const int64_t D = sh->D, I = sh->I, qd = (int64_t)sh->nh * sh->hd, kvd = (int64_t)sh->nkv * sh->hd;
    size_t pool_n = (size_t)sh->V * D;
    if ((size_t)(qd + 2 * kvd) * D > pool_n) pool_n = (size_t)(qd + 2 * kvd) * D;
    if ((size_t)2 * I * D > pool_n) pool_n = (size_t)2 * I * D;
    uint16_t *pool = rand_bf16(pool_n, 0.05f), *norm = rand_bf16((size_t)D, 0.2f);
    if (!pool || !norm) {
        free(pool);
        free(norm);
        printf("  %s: out of host memory\n", sh->name);
        return false;
    }
    for (int64_t i = 0; i < D; i++) norm[i] = f32_to_bf16(1.0f + bf16_to_f32(norm[i]));
    const int L = sh->L;
    md->in_norm = calloc((size_t)L, sizeof(tensor));
    md->post_norm = calloc((size_t)L, sizeof(tensor));
    md->qn = calloc((size_t)L, sizeof(tensor));
    md->kn = calloc((size_t)L, sizeof(tensor));
    md->kc = calloc((size_t)L, sizeof(tensor));
    md->vc = calloc((size_t)L, sizeof(tensor));
    md->qkv = calloc((size_t)L, sizeof(be_linear *));
    md->o = calloc((size_t)L, sizeof(be_linear *));
    md->gu = calloc((size_t)L, sizeof(be_linear *));
    md->down = calloc((size_t)L, sizeof(be_linear *));
    double t0 = now();
    CHECK_OK(import_bf16(pool, sh->V, D, &md->embed));
    CHECK_OK(import_bf16(norm, 1, D, &md->final_norm));
    md->head = linear_from(pool, sh->V, D);
    int64_t cshape[4] = {(int64_t)max_s * CTX_BLOCKS, BS, sh->nkv, sh->hd};
    for (int l = 0; l < L; l++) {
        CHECK_OK(import_bf16(norm, 1, D, &md->in_norm[l]));
        CHECK_OK(import_bf16(norm, 1, D, &md->post_norm[l]));
        CHECK_OK(import_bf16(norm, 1, sh->hd, &md->qn[l]));
        CHECK_OK(import_bf16(norm, 1, sh->hd, &md->kn[l]));
        md->qkv[l] = linear_from(pool, qd + 2 * kvd, D);
        md->o[l] = linear_from(pool, D, qd);
        md->gu[l] = linear_from(pool, 2 * I, D);
        md->down[l] = linear_from(pool, D, I);
        md->kc[l] = tensor_make(DTYPE_BF16, NULL, 4, cshape);
        md->vc[l] = md->kc[l];
        CHECK_OK(gpu->ops->alloc(gpu, &md->kc[l]));
        CHECK_OK(gpu->ops->alloc(gpu, &md->vc[l]));
        CHECK_OK(gpu->ops->zero(gpu, &md->kc[l]));
        CHECK_OK(gpu->ops->zero(gpu, &md->vc[l]));
    }
    free(pool);
    free(norm);
    float *cs = malloc((size_t)MAX_POS * sh->hd * sizeof *cs);
    for (int p = 0; p < MAX_POS; p++)
        for (int i = 0; i < sh->hd / 2; i++) {
            double f = pow(1000000.0, -2.0 * i / sh->hd);
            cs[p * sh->hd + i] = (float)cos(p * f);
            cs[p * sh->hd + sh->hd / 2 + i] = (float)sin(p * f);
        }
    md->cos_sin = act(DTYPE_F32, MAX_POS, sh->hd);
    CHECK_OK(gpu->ops->upload(gpu, &md->cos_sin, cs, (size_t)MAX_POS * sh->hd * sizeof *cs));
    free(cs);
    md->x = act(DTYPE_BF16, MAX_T, D);
    md->h = act(DTYPE_BF16, MAX_T, D);
    md->qkv_b = act(DTYPE_BF16, MAX_T, qd + 2 * kvd);
    md->attn = act(DTYPE_BF16, MAX_T, qd);
    md->ob = act(DTYPE_BF16, MAX_T, D);
    md->gu_b = act(DTYPE_BF16, MAX_T, 2 * I);
    md->a = act(DTYPE_BF16, MAX_T, I);
    md->sel = act(DTYPE_BF16, max_s, D);
    md->logits = act(DTYPE_F32, max_s, sh->V);
    md->meta = tensor_1d(DTYPE_I32, NULL, 8 * MAX_T + max_s * (CTX_BLOCKS + 4));
    CHECK_OK(gpu->ops->alloc(gpu, &md->meta));
    CHECK_OK(gpu->ops->synchronize(gpu));
    printf("  %s: weights uploaded in %.1f s\n", sh->name, now() - t0);
    return t_failures == 0;
}

static void model_free(model *md) {
    backend_ops const *o = gpu->ops;
    for (int l = 0; l < md->sh.L; l++) {
        if (md->in_norm && md->in_norm[l].data) o->release_import(gpu, &md->in_norm[l]);
        if (md->post_norm && md->post_norm[l].data) o->release_import(gpu, &md->post_norm[l]);
        if (md->qn && md->qn[l].data) o->release_import(gpu, &md->qn[l]);
        if (md->kn && md->kn[l].data) o->release_import(gpu, &md->kn[l]);
        if (md->kc && md->kc[l].data) o->release(gpu, &md->kc[l]);
        if (md->vc && md->vc[l].data) o->release(gpu, &md->vc[l]);
        if (md->qkv) o->linear_free(gpu, md->qkv[l]);
        if (md->o) o->linear_free(gpu, md->o[l]);
        if (md->gu) o->linear_free(gpu, md->gu[l]);
        if (md->down) o->linear_free(gpu, md->down[l]);
    }
    free(md->in_norm);
    free(md->post_norm);
    free(md->qn);
    free(md->kn);
    free(md->kc);
    free(md->vc);
    free(md->qkv);
    free(md->o);
    free(md->gu);
    free(md->down);
    if (md->head) o->linear_free(gpu, md->head);
    if (md->embed.data) o->release_import(gpu, &md->embed);
    if (md->final_norm.data) o->release_import(gpu, &md->final_norm);
    tensor *ts[] = {&md->cos_sin, &md->x, &md->h, &md->qkv_b, &md->attn, &md->ob, &md->gu_b, &md->a, &md->sel,
                    &md->logits, &md->meta};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++)
        if (ts[i]->data) o->release(gpu, ts[i]);
}

/* A step of S sequences: one prefill of T tokens (S == 1), or S decodes at
 * DECODE_POS; the logits of each sequence's last token. */
static void step_make(model *md, step *s, int T, int S) {
    memset(s, 0, sizeof *s);
    s->T = T;
    s->S = S;
    s->N = S;
    int32_t *base = md->meta.data;
    const int o_ids = 0, o_pos = o_ids + T, o_qsl = o_pos + T, o_lens = o_qsl + S + 1, o_bt = o_lens + S,
              o_lidx = o_bt + S * CTX_BLOCKS, o_slots = (o_lidx + S + 1) & ~1, end = o_slots + 2 * T;
    s->host_bytes = (size_t)end * sizeof(int32_t);
    s->host = calloc((size_t)end, sizeof(int32_t));
    for (int i = 0; i < T; i++) {
        int seq = S == 1 ? 0 : i, p = S == 1 ? (T == 1 ? DECODE_POS : i) : DECODE_POS;
        s->host[o_ids + i] = (int32_t)(rnd_u32() % (uint32_t)md->sh.V);
        s->host[o_pos + i] = p;
        int64_t slot = (int64_t)(seq * CTX_BLOCKS + p / BS) * BS + p % BS;
        memcpy(&s->host[o_slots + 2 * i], &slot, sizeof slot);
    }
    for (int q = 0; q <= S; q++) s->host[o_qsl + q] = S == 1 ? (q ? T : 0) : q;
    int max_len = 0;
    for (int q = 0; q < S; q++) {
        int len = S == 1 && T > 1 ? T : DECODE_POS + 1;
        s->host[o_lens + q] = len;
        max_len = len > max_len ? len : max_len;
        for (int b = 0; b < CTX_BLOCKS; b++) s->host[o_bt + q * CTX_BLOCKS + b] = q * CTX_BLOCKS + b;
        s->host[o_lidx + q] = S == 1 ? T - 1 : q;
    }
    s->ids = tensor_1d(DTYPE_I32, base + o_ids, T);
    s->pos = tensor_1d(DTYPE_I32, base + o_pos, T);
    s->lidx = tensor_1d(DTYPE_I32, base + o_lidx, S);
    s->m = (attn_meta){.num_seqs = S, .num_tokens = T, .max_query_len = S == 1 ? T : 1,
                       .max_seq_len = CTX_BLOCKS * BS, /* an upper bound, as a recorded graph has */
                       .block_size = BS, .max_blocks_per_seq = CTX_BLOCKS,
                       .query_start_loc = tensor_1d(DTYPE_I32, base + o_qsl, S + 1),
                       .seq_lens = tensor_1d(DTYPE_I32, base + o_lens, S),
                       .block_tables = tensor_2d(DTYPE_I32, base + o_bt, S, CTX_BLOCKS),
                       .slot_mapping = tensor_1d(DTYPE_I64, base + o_slots, T)};
    (void)max_len;
    s->x = tensor_rows(&md->x, 0, T);
    s->h = tensor_rows(&md->h, 0, T);
    s->qkv_b = tensor_rows(&md->qkv_b, 0, T);
    s->attn = tensor_rows(&md->attn, 0, T);
    s->ob = tensor_rows(&md->ob, 0, T);
    s->gu_b = tensor_rows(&md->gu_b, 0, T);
    s->a = tensor_rows(&md->a, 0, T);
    s->sel = tensor_rows(&md->sel, 0, S);
    s->sel_h = tensor_rows(&md->h, 0, S);
    s->logits = tensor_rows(&md->logits, 0, S);
}

static void step_upload(model *md, step *s) { CHECK_OK(gpu->ops->upload(gpu, &md->meta, s->host, s->host_bytes)); }

/* what run_ops issues: everything, or one kind of op over every layer */
enum { OP_ALL, OP_QKV, OP_PROLOGUE, OP_ATTN, OP_O, OP_GU, OP_DOWN, OP_HEAD, OP_KINDS };
static const char *OP_NAMES[OP_KINDS] = {"step", "norm+linear qkv", "qk_norm_rope_kv", "attention", "linear o+add",
                                         "norm+gate_up+silu", "linear down+add", "norm+lm_head"};

/* only: OP_ALL (the step) or one kind alone; skip: a kind left out of the step (OP_ALL: none) */
static void run_ops_skip(model *md, step *s, int only, int skip) {
    const backend_ops *o = gpu->ops;
    const shape *sh = &md->sh;
    const int64_t qd = (int64_t)sh->nh * sh->hd, kvd = (int64_t)sh->nkv * sh->hd;
    tensor q = tensor_cols(&s->qkv_b, 0, qd), k = tensor_cols(&s->qkv_b, qd, kvd), v = tensor_cols(&s->qkv_b, qd + kvd, kvd);
    attn_params ap = {.scale = 1.0f / sqrtf((float)sh->hd), .sliding_window = 0, .num_heads = sh->nh,
                      .num_kv_heads = sh->nkv, .head_dim = sh->hd};
    const bool all = only == OP_ALL;
    const linear_fuse add_to_x = {.accumulate = true, .mid = &s->ob};
#define RUN(kind) ((all && skip != (kind)) || only == (kind))
    if (all) o->embedding(gpu, &md->embed, &s->ids, &s->x);
    for (int l = 0; l < sh->L; l++) {
        const linear_fuse attn_in = {.norm_w = &md->in_norm[l], .eps = 1e-6f, .h = &s->h};
        const linear_fuse mlp_in = {.norm_w = &md->post_norm[l], .eps = 1e-6f, .silu_mul = true, .h = &s->h,
                                    .mid = &s->gu_b};
        if (RUN(OP_QKV)) o->linear_fused(gpu, md->qkv[l], &s->x, &attn_in, &s->qkv_b);
        if (RUN(OP_PROLOGUE))
            o->qk_norm_rope_kv(gpu, &q, &k, &v, &md->qn[l], &md->kn[l], 1e-6f, &s->pos, &md->cos_sin, sh->hd, sh->hd,
                               true, &md->kc[l], &md->vc[l], &s->m);
        if (RUN(OP_ATTN)) o->attention(gpu, &q, &md->kc[l], &md->vc[l], &s->m, &ap, &s->attn);
        if (RUN(OP_O)) o->linear_fused(gpu, md->o[l], &s->attn, &add_to_x, &s->x);
        if (RUN(OP_GU)) o->linear_fused(gpu, md->gu[l], &s->x, &mlp_in, &s->a);
        if (RUN(OP_DOWN)) o->linear_fused(gpu, md->down[l], &s->a, &add_to_x, &s->x);
    }
    if (all) o->gather_rows(gpu, &s->x, &s->lidx, &s->sel);
    const linear_fuse head_in = {.norm_w = &md->final_norm, .eps = 1e-6f, .h = &s->sel_h};
    if (RUN(OP_HEAD)) o->linear_fused(gpu, md->head, &s->sel, &head_in, &s->logits);
#undef RUN
}

static void run_ops(model *md, step *s, int only) { run_ops_skip(md, s, only, OP_ALL); }

static double median(double *v, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return v[n / 2];
}

/* seconds per eager step (upload + ops + synchronize), the median of n */
static double time_eager(model *md, step *s, int n) {
    double t[64];
    if (n > 64) n = 64;
    for (int i = 0; i < n; i++) {
        double t0 = now();
        step_upload(md, s);
        run_ops(md, s, OP_ALL);
        CHECK_OK(gpu->ops->synchronize(gpu));
        t[i] = now() - t0;
    }
    return median(t, n);
}

/* seconds per replay of g: batches of reps launches between synchronizes, the median batch */
static double time_graph(model *md, step *s, be_graph *g, int reps, bool upload) {
    double t[9];
    for (int i = 0; i < 9; i++) {
        double t0 = now();
        for (int r = 0; r < reps; r++) {
            if (upload) step_upload(md, s);
            CHECK_OK(gpu->ops->graph_launch(gpu, g));
        }
        CHECK_OK(gpu->ops->synchronize(gpu));
        t[i] = (now() - t0) / reps;
    }
    return median(t, 9);
}

static be_graph *record_skip(model *md, step *s, int only, int skip) {
    be_graph *g = NULL;
    CHECK_OK(gpu->ops->graph_begin(gpu));
    run_ops_skip(md, s, only, skip);
    vllm_status st = gpu->ops->graph_end(gpu, &g);
    CHECK_MSG(st == VLLM_OK, "recording %s: %s", OP_NAMES[only], vllm_last_error());
    return g;
}

static be_graph *record(model *md, step *s, int only) { return record_skip(md, s, only, OP_ALL); }

static float *logits_of(model *md, step *s) {
    size_t n = (size_t)s->N * md->sh.V;
    float *l = malloc(n * sizeof *l);
    CHECK_OK(gpu->ops->download(gpu, l, &s->logits, n * sizeof *l));
    return l;
}

static int64_t count_nonfinite(const float *x, size_t n) {
    int64_t c = 0;
    for (size_t i = 0; i < n; i++) c += !isfinite(x[i]);
    return c;
}

/* seconds per sample call over the step's logits rows */
static double time_sample(model *md, step *s, float temperature, int top_k, float top_p) {
    const int R = s->N;
    vllm_sampling_params p = vllm_sampling_default_params();
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    const vllm_sampling_params **pp = calloc((size_t)R, sizeof *pp);
    sampler_context *ctx = calloc((size_t)R, sizeof *ctx);
    int32_t *rows = calloc((size_t)R, sizeof *rows), *tok = calloc((size_t)R, sizeof *tok);
    float *lp = calloc((size_t)R, sizeof *lp);
    double *u = calloc((size_t)R, sizeof *u);
    CHECK(pp && ctx && rows && tok && lp && u);
    if (!pp || !ctx || !rows || !tok || !lp || !u) return 0.0;
    for (int i = 0; i < R; i++) {
        pp[i] = &p;
        rows[i] = i;
        u[i] = (i + 0.5) / R;
    }
    sample_batch b = {.num_rows = s->N, .rows = rows, .params = pp, .ctx = ctx, .uniform = u, .tokens = tok,
                      .logprobs = lp};
    double t[15];
    for (int i = 0; i < 15; i++) {
        double t0 = now();
        vllm_status st = gpu->ops->sample(gpu, &s->logits, &b);
        t[i] = now() - t0;
        CHECK_MSG(st == VLLM_OK, "sample: %s", vllm_last_error());
    }
    for (int i = 0; i < s->N; i++) CHECK_MSG(tok[i] >= 0 && tok[i] < md->sh.V, "sampled token %d", tok[i]);
    free(pp);
    free(ctx);
    free(rows);
    free(tok);
    free(lp);
    free(u);
    return median(t, 15);
}

static void run_shape(const shape *sh) {
    model md;
    printf("\n== %s (hidden %d, %d layers, vocab %d)\n", sh->name, sh->D, sh->L, sh->V);
    if (!model_build(&md, sh)) {
        model_free(&md);
        return;
    }
    /* prefill: 512 tokens of sequence 0 (fills its cache) */
    step pf;
    step_make(&md, &pf, MAX_T, 1);
    double t_pf = time_eager(&md, &pf, 4);
    float *l = logits_of(&md, &pf);
    CHECK_MSG(count_nonfinite(l, (size_t)sh->V) == 0, "%s prefill: non-finite logits", sh->name);
    free(l);
    printf("  prefill 512 tokens (eager): %8.2f ms  = %8.0f tok/s\n", 1e3 * t_pf, MAX_T / t_pf);
    {
        /* where the prefill's time goes: as a graph, and without attention / without the linears */
        be_graph *ga = record(&md, &pf, OP_ALL), *gn = record_skip(&md, &pf, OP_ALL, OP_ATTN);
        if (ga && gn) {
            double tga = time_graph(&md, &pf, ga, 3, true), tgn = time_graph(&md, &pf, gn, 3, true);
            printf("  prefill as a graph %.2f ms; attention %.2f ms of it (%.1f us per layer)\n", 1e3 * tga,
                   1e3 * (tga - tgn), 1e6 * (tga - tgn) / sh->L);
        }
        if (ga) gpu->ops->graph_free(gpu, ga);
        if (gn) gpu->ops->graph_free(gpu, gn);
    }

    double t_step1 = 0, t_sample_g = 0, t_sample_t = 0;
    for (int bi = 0; bi < n_batches; bi++) {
        const int S = batches[bi];
        step st;
        step_make(&md, &st, S, S);
        double te = time_eager(&md, &st, 10);
        float *le = logits_of(&md, &st);
        be_graph *g = record(&md, &st, OP_ALL);
        if (!g) {
            free(le);
            free(st.host);
            continue;
        }
        double tg = time_graph(&md, &st, g, 10, true);
        step_upload(&md, &st);
        CHECK_OK(gpu->ops->graph_launch(gpu, g));
        float *lg = logits_of(&md, &st);
        size_t n = (size_t)S * sh->V;
        CHECK_MSG(count_nonfinite(le, n) == 0, "%s batch %d: non-finite logits", sh->name, S);
        CHECK_MSG(memcmp(le, lg, n * sizeof *le) == 0, "%s batch %d: graph replay differs from the eager step",
                  sh->name, S);
        printf("  decode batch %3d: eager %7.3f ms, graph %7.3f ms/step = %8.0f tok/s (graph, sampling excluded)\n", S,
               1e3 * te, 1e3 * tg, S / tg);
        double ts_g = time_sample(&md, &st, 0.0f, 0, 1.0f), ts_t = time_sample(&md, &st, 1.0f, 0, 1.0f);
        /* the generation_configs the server applies by default, the one-CTA path: Qwen3's (top_k 20, top_p 0.95,
         * temperature 0.6) and Llama 3's (top_p 0.9 alone, temperature 0.6) */
        double ts_q = time_sample(&md, &st, 0.6f, 20, 0.95f), ts_l = time_sample(&md, &st, 0.6f, 0, 0.9f);
        printf("                   sample: greedy %.3f ms, temperature 1 %.3f ms, top_k 20 top_p 0.95 %.3f ms, top_p "
               "0.9 %.3f ms\n",
               1e3 * ts_g, 1e3 * ts_t, 1e3 * ts_q, 1e3 * ts_l);
        if (S == 1) {
            t_step1 = tg;
            t_sample_g = ts_g;
            t_sample_t = ts_t;
        }
        bool per_op = false;
        for (int i = 0; i < n_op_batches; i++) per_op |= op_batches[i] == S;
        if (per_op) {
            /* each op alone, over every layer, in a graph */
            printf("  batch %d, per op: alone in a graph over all layers | in the step (step - step without it)\n", S);
            double sum = 0, sum_in = 0;
            for (int k = OP_QKV; k < OP_KINDS; k++) {
                be_graph *gk = record(&md, &st, k);
                be_graph *gs = record_skip(&md, &st, OP_ALL, k);
                if (!gk || !gs) continue;
                int calls = k == OP_HEAD ? 1 : sh->L;
                int alone_calls = k == OP_HEAD ? 1 : sh->L;
                double t = time_graph(&md, &st, gk, 10, false) / alone_calls;
                double without = time_graph(&md, &st, gs, 10, true);
                double in_step = (tg - without) / calls;
                sum += t * calls;
                sum_in += in_step * calls;
                printf("    %-16s %8.2f us | %8.2f us  x %2d = %8.1f | %8.1f us\n", OP_NAMES[k], 1e6 * t, 1e6 * in_step,
                       calls, 1e6 * t * calls, 1e6 * in_step * calls);
                gpu->ops->graph_free(gpu, gk);
                gpu->ops->graph_free(gpu, gs);
            }
            printf("    %-16s %30.1f | %8.1f us (the step: %.1f us)\n", "sum", 1e6 * sum, 1e6 * sum_in, 1e6 * tg);
        }
        gpu->ops->graph_free(gpu, g);
        free(le);
        free(lg);
        free(st.host);
    }
    if (t_step1 > 0) { /* batch 1 was timed */
        printf("  => %s batch-1 decode: %.0f tok/s with temperature-1 sampling, %.0f greedy (graph step + sample)\n",
               sh->name, 1.0 / (t_step1 + t_sample_t), 1.0 / (t_step1 + t_sample_g));
        printf("PERF %s decode1_tok_s %.0f prefill512_tok_s %.0f\n", sh->name, 1.0 / (t_step1 + t_sample_t),
               MAX_T / t_pf);
    }
    free(pf.host);
    model_free(&md);
    CHECK_OK(gpu->ops->synchronize(gpu));
}

/* ---- the MoE layer of the Qwen3-30B-A3B shape: router linear, moe_route, moe_experts ----
 * Eight layers of distinct experts (dummy weights filled on the device: 9.7 GB), so that each layer
 * reads its 8 chosen experts from HBM, not L2 (50 MB); per layer time against its floor (the bytes
 * the routed experts and the router hold / 4.25 TB/s). Batch 1 and 8 in a graph; 256 tokens eager
 * (the grouped GEMM path). */
static void run_moe(const char *force) {
    enum { D = 2048, I = 768, E = 128, K = 8, LAYERS = 8 };
    if (force) setenv("VLLM_CUDA_MOE", force, 1); /* read by experts_create */
    dummy_arena *a = dummy_arena_create(dummy_seed(11));
    CHECK(a != NULL);
    if (!a) return;
    be_experts *ex[LAYERS] = {NULL};
    be_linear *router[LAYERS] = {NULL};
    const tensor *g[E], *u[E], *dn[E];
    tensor views[3 * E];
    bool ok = true;
    for (int l = 0; l < LAYERS && ok; l++) {
        char *p = dummy_arena_take(a, (size_t)E * 3 * I * D * 2), *r = dummy_arena_take(a, (size_t)E * D * 2);
        ok = p && r;
        if (!ok) break;
        for (int e = 0; e < E; e++) {
            views[e] = tensor_2d(DTYPE_BF16, p + (size_t)e * 3 * I * D * 2, I, D);
            views[E + e] = tensor_2d(DTYPE_BF16, p + ((size_t)e * 3 + 1) * I * D * 2, I, D);
            views[2 * E + e] = tensor_2d(DTYPE_BF16, p + ((size_t)e * 3 + 2) * I * D * 2, D, I);
            g[e] = &views[e];
            u[e] = &views[E + e];
            dn[e] = &views[2 * E + e];
        }
        tensor rw = tensor_2d(DTYPE_BF16, r, E, D);
        const tensor *rws[1] = {&rw};
        ok = gpu->ops->experts_create(gpu, g, u, dn, NULL, E, &ex[l]) == VLLM_OK &&
             gpu->ops->linear_create(gpu, rws, NULL, 1, &router[l]) == VLLM_OK;
        CHECK_MSG(ok, "moe layer %d: %s", l, vllm_last_error());
    }
    if (force) unsetenv("VLLM_CUDA_MOE");
    const moe_params mp = {.num_experts = E, .top_k = K, .renormalize = true, .act = BE_ACT_SILU};
    printf("  MoE layer, Qwen3-30B-A3B shape (D %d, %d experts of %d, top %d), %d layers of distinct experts, path %s:\n",
           D, E, I, K, LAYERS, force ? force : "auto");
    const int Ts[6] = {1, 8, 64, 256, 2048, 8192}; /* 8192: the throughput run's prefill chunks */
    const char *only_t = getenv("VLLM_PERF_T"); /* "256,2048": only those token counts (as run_quant) */
    for (int ti = force ? 2 : 0; ti < 6 && ok; ti++) {
        const int T = Ts[ti];
        if (only_t && *only_t) {
            char list[128], tb[16];
            snprintf(list, sizeof list, ",%s,", only_t);
            snprintf(tb, sizeof tb, ",%d,", T);
            if (!strstr(list, tb)) continue;
        }
        uint16_t *hx = rand_bf16((size_t)T * D, 1.0f);
        tensor x = act(DTYPE_BF16, T, D), y = act(DTYPE_BF16, T, D), lg = act(DTYPE_F32, T, E);
        tensor ids = tensor_2d(DTYPE_I32, NULL, T, K), w = tensor_2d(DTYPE_F32, NULL, T, K);
        CHECK_OK(gpu->ops->alloc(gpu, &ids));
        CHECK_OK(gpu->ops->alloc(gpu, &w));
        CHECK_OK(gpu->ops->upload(gpu, &x, hx, (size_t)T * D * 2));
        double t_us;
        if (T * K <= 64) { /* the expert GEMV: recordable */
            be_graph *gr = NULL;
            CHECK_OK(gpu->ops->graph_begin(gpu));
            for (int l = 0; l < LAYERS; l++) {
                gpu->ops->linear(gpu, router[l], &x, &lg);
                gpu->ops->moe_route(gpu, &lg, &mp, &ids, &w);
                gpu->ops->moe_experts(gpu, ex[l], &x, &ids, &w, &mp, false, &y);
            }
            CHECK_OK(gpu->ops->graph_end(gpu, &gr));
            double t[9];
            for (int i = 0; i < 9 && gr; i++) {
                double t0 = now();
                for (int r = 0; r < 20; r++) CHECK_OK(gpu->ops->graph_launch(gpu, gr));
                CHECK_OK(gpu->ops->synchronize(gpu));
                t[i] = (now() - t0) / 20;
            }
            t_us = gr ? median(t, 9) / LAYERS * 1e6 : 0;
            if (gr) gpu->ops->graph_free(gpu, gr);
        } else { /* the grouped GEMM path, eager */
            double t[9];
            for (int i = 0; i < 9; i++) {
                double t0 = now();
                for (int l = 0; l < LAYERS; l++) {
                    gpu->ops->linear(gpu, router[l], &x, &lg);
                    gpu->ops->moe_route(gpu, &lg, &mp, &ids, &w);
                    gpu->ops->moe_experts(gpu, ex[l], &x, &ids, &w, &mp, false, &y);
                }
                CHECK_OK(gpu->ops->synchronize(gpu));
                t[i] = now() - t0;
            }
            t_us = median(t, 9) / LAYERS * 1e6;
        }
        /* the bytes read: the distinct experts T tokens pick (at most E), the router */
        const double picked = T * K < E ? (double)T * K : (double)E;
        const double fl = (picked * 3 * I * D * 2 + (double)E * D * 2) / 4.25e12 * 1e6;
        printf("    %3d tokens: %8.1f us per layer (router + route + experts); floor %6.1f us (<= %3.0f experts read) "
               "= %3.0f%%\n",
               T, t_us, fl, picked, 100.0 * fl / t_us);
        printf("PERF moe-30b-a3b-layer%s%s T%d us %.1f floor_us %.1f\n", force ? "-" : "", force ? force : "", T, t_us,
               fl);
        free(hx);
        tensor *ts[] = {&x, &y, &lg, &ids, &w};
        for (int i = 0; i < 5; i++) gpu->ops->release(gpu, ts[i]);
    }
    for (int l = 0; l < LAYERS; l++) {
        if (ex[l]) gpu->ops->experts_free(gpu, ex[l]);
        if (router[l]) gpu->ops->linear_free(gpu, router[l]);
    }
    dummy_arena_destroy(a);
    CHECK_OK(gpu->ops->synchronize(gpu));
}

/* The block GEMV's bandwidth: LAYERS distinct (rows, in) layers of dt (one quantized random row repeated:
 * the values do not matter, the addresses do), linear on each in one graph; GB/s of the weights' bytes. */
static void run_blocks_case(dtype dt, int64_t rows, int64_t in, int T) {
    enum { LAYERS = 16 };
    be_linear *lin[LAYERS] = {NULL};
    size_t rb = 0;
    void *host = NULL;
    if (dt == DTYPE_FP8_B128 || dt == DTYPE_I4_B128) { /* a random block repeated (E4M3 bytes below 0x78: finite) */
        rb = (size_t)(in / 128) * (dt == DTYPE_FP8_B128 ? sizeof(fp8_block) : sizeof(i4_block));
        host = malloc(rb * (size_t)rows);
        if (!host) return;
        if (dt == DTYPE_FP8_B128) {
            fp8_block b;
            for (int i = 0; i < FP8_B; i++) b.q[i] = (uint8_t)((rnd_u32() % 0x70) | (rnd_u32() & 0x80));
            const float d = 0.01f;
            memcpy(b.d, &d, 4);
            for (size_t i = 0; i < rb * (size_t)rows / sizeof b; i++) memcpy((fp8_block *)host + i, &b, sizeof b);
        } else {
            i4_block b;
            for (int i = 0; i < I4_B / 2; i++) b.q[i] = (uint8_t)rnd_u32();
            for (int j = 0; j < I4_B / I4_SUB; j++) b.s[j] = 0.01f, b.z[j] = 8;
            for (size_t i = 0; i < rb * (size_t)rows / sizeof b; i++) memcpy((i4_block *)host + i, &b, sizeof b);
        }
    } else if (dt != DTYPE_BF16) {
        ggml_type gt = GGML_TYPE_COUNT;
        CHECK(dtype_to_ggml(dt, &gt));
        rb = gq_row_bytes(gt, in);
        float *row = malloc((size_t)in * sizeof *row);
        host = malloc(rb * (size_t)rows);
        if (!row || !host) {
            free(row);
            free(host);
            return;
        }
        for (int64_t k = 0; k < in; k++) row[k] = 0.05f * rnd();
        CHECK(gq_quantize_row(gt, row, host, in));
        for (int64_t r = 1; r < rows; r++) memcpy((char *)host + (size_t)r * rb, host, rb);
        free(row);
    } else {
        rb = (size_t)in * 2;
        host = rand_bf16((size_t)rows * (size_t)in, 0.05f);
        if (!host) return;
    }
    tensor w = tensor_2d(dt, host, rows, in);
    const tensor *ws[1] = {&w};
    bool ok = true;
    for (int l = 0; l < LAYERS && ok; l++) {
        ok = gpu->ops->linear_create(gpu, ws, NULL, 1, &lin[l]) == VLLM_OK;
        CHECK_MSG(ok, "linear_create %s (%lld, %lld): %s", dtype_name(dt), (long long)rows, (long long)in,
                  vllm_last_error());
    }
    free(host);
    uint16_t *hx = rand_bf16((size_t)T * (size_t)in, 1.0f);
    tensor x = act(DTYPE_BF16, T, in), y = act(DTYPE_BF16, T, rows);
    if (hx) CHECK_OK(gpu->ops->upload(gpu, &x, hx, (size_t)T * (size_t)in * 2));
    free(hx);
    be_graph *gr = NULL;
    /* VLLM_PERF_NCU=1: one eager launch per case and no graph (for ncu --kernel-name ... on every case) */
    const bool ncu = getenv("VLLM_PERF_NCU") != NULL;
    if (ok && ncu) {
        gpu->ops->linear(gpu, lin[0], &x, &y);
        CHECK_OK(gpu->ops->synchronize(gpu));
    } else if (ok) {
        for (int l = 0; l < LAYERS; l++) gpu->ops->linear(gpu, lin[l], &x, &y); /* eager once */
        CHECK_OK(gpu->ops->synchronize(gpu));
        CHECK_OK(gpu->ops->graph_begin(gpu));
        for (int l = 0; l < LAYERS; l++) gpu->ops->linear(gpu, lin[l], &x, &y);
        CHECK_OK(gpu->ops->graph_end(gpu, &gr));
    }
    if (gr) {
        double t[9];
        for (int i = 0; i < 9; i++) {
            double t0 = now();
            for (int r = 0; r < 20; r++) CHECK_OK(gpu->ops->graph_launch(gpu, gr));
            CHECK_OK(gpu->ops->synchronize(gpu));
            t[i] = (now() - t0) / 20 / LAYERS;
        }
        /* bytes the device reads: I4_B128 rows as the device holds them (64 bytes of nibbles, an F32 scale and a
         * zero word per 128 here), the rest as stored */
        const size_t brow = dt == DTYPE_I4_B128 ? (size_t)(in / 128) * 72 : rb;
        const double tl = median(t, 9), gbs = (double)brow * (double)rows / tl * 1e-9;
        float *yh = malloc((size_t)T * (size_t)rows * sizeof *yh);
        uint16_t *yb = malloc((size_t)T * (size_t)rows * 2);
        if (yh && yb && gpu->ops->download(gpu, yb, &y, (size_t)T * (size_t)rows * 2) == VLLM_OK) {
            for (int64_t i = 0; i < (int64_t)T * rows; i++) yh[i] = bf16_to_f32(yb[i]);
            CHECK_MSG(count_nonfinite(yh, (size_t)T * (size_t)rows) == 0, "%s gemv: non-finite outputs", dtype_name(dt));
        }
        free(yh);
        free(yb);
        printf("    %-6s (%5lld, %lld) T %d: %7.2f us per layer, %6.0f GB/s of %5.1f MB\n", dtype_name(dt),
               (long long)rows, (long long)in, T, 1e6 * tl, gbs, (double)brow * (double)rows * 1e-6);
        printf("PERF gemv-%s-%lldx%lld T%d us %.2f GB_s %.0f\n", dtype_name(dt), (long long)rows, (long long)in, T,
               1e6 * tl, gbs);
        gpu->ops->graph_free(gpu, gr);
    }
    gpu->ops->release(gpu, &x);
    gpu->ops->release(gpu, &y);
    for (int l = 0; l < LAYERS; l++)
        if (lin[l]) gpu->ops->linear_free(gpu, lin[l]);
    CHECK_OK(gpu->ops->synchronize(gpu));
}

/* FP8_B128 and I4_B128 (block-FP8 and AWQ / GPTQ checkpoints) at the Qwen3-8B layer shapes: the decode GEMVs
 * (T 1, 8), and for I4 the small-batch GEMM (T 16, 64) and the tiles + cuBLAS prefill (T 256) */
static void run_quant(void) {
    printf("\n== FP8_B128 / I4_B128 linears at the 8B shapes, 16 layers per graph:\n");
    const int64_t shp[4][2] = {{6144, 4096}, {4096, 4096}, {24576, 4096}, {4096, 12288}};
    const int Ts[5] = {1, 8, 16, 64, 256};
    for (int s = 0; s < 4; s++)
        for (int d = 0; d < 3; d++) {
            const dtype dt = d == 0 ? DTYPE_BF16 : d == 1 ? DTYPE_FP8_B128 : DTYPE_I4_B128;
            if (dt != DTYPE_BF16 && !(gpu->native_blocks >> (dt - DTYPE_FIRST_BLOCK) & 1u)) continue;
            if (dt == DTYPE_BF16 && getenv("VLLM_PERF_NO_BF16")) continue; /* (measured before, same machine) */
            for (int ti = 0; ti < 5; ti++) {
                /* VLLM_PERF_T=1,64: only those token counts */
                const char *only_t = getenv("VLLM_PERF_T");
                char tb[16];
                snprintf(tb, sizeof tb, ",%d,", Ts[ti]);
                if (only_t && *only_t) {
                    char list[128];
                    snprintf(list, sizeof list, ",%s,", only_t);
                    if (!strstr(list, tb)) continue;
                }
                run_blocks_case(dt, shp[s][0], shp[s][1], Ts[ti]);
            }
        }
}

static void run_blocks(void) {
    printf("\n== block-type GEMV (GGUF weights), 16 layers per graph:\n");
    const dtype dts[6] = {DTYPE_BF16, DTYPE_Q4_K, DTYPE_Q5_K, DTYPE_Q6_K, DTYPE_Q8_0, DTYPE_Q4_0};
    const int64_t rows[2] = {4096, 14336};
    for (int s = 0; s < 2; s++)
        for (int d = 0; d < 6; d++)
            for (int T = 1; T <= 8; T += 7) {
                if (dts[d] != DTYPE_BF16 && !(gpu->native_blocks >> (dts[d] - DTYPE_FIRST_BLOCK) & 1u)) continue;
                run_blocks_case(dts[d], rows[s], 4096, T);
            }
}

/* ---- MLA decode attention alone (attention_mla, DeepSeek-V2 / V3's absorbed form) ----
 * L 512 + R 64, BF16 cache and activations, block size BS; B sequences of ctx tokens each, one decode token
 * per sequence; LAYERS distinct caches (each B ctx (L + R) 2 bytes) so that the latents stream from device
 * memory, not L2; one attention_mla per layer (kv NULL: no cache write) in a graph. The bytes read: the
 * latents, the queries and the output; effective GB/s against the H200's 4.25 TB/s. */
static void run_mla_case(int H, int B, int ctx) {
    enum { L = 512, R = 64, W = L + R, LAYERS = 8 };
    const int T = B, nbps = (ctx + BS - 1) / BS;
    const int64_t num_blocks = (int64_t)B * nbps;
    const size_t cache_n = (size_t)num_blocks * BS * W;
    tensor cache[LAYERS];
    memset(cache, 0, sizeof cache);
    bool ok = true;
    uint16_t *hc = rand_bf16(cache_n, 1.0f);
    if (!hc) {
        printf("    H %d, B %d, ctx %d: out of host memory\n", H, B, ctx);
        return;
    }
    const int64_t cshape[4] = {num_blocks, BS, 1, W};
    for (int l = 0; l < LAYERS && ok; l++) {
        cache[l] = tensor_make(DTYPE_BF16, NULL, 4, cshape);
        ok = gpu->ops->alloc(gpu, &cache[l]) == VLLM_OK;
        CHECK_MSG(ok, "mla H %d B %d ctx %d: cache %d: %s", H, B, ctx, l, vllm_last_error());
        if (ok) CHECK_OK(gpu->ops->upload(gpu, &cache[l], hc, cache_n * sizeof *hc));
    }
    free(hc);
    /* the metadata: sequence s owns blocks s nbps .. s nbps + nbps - 1; its one token is its ctx-th */
    int32_t *qsl = malloc((size_t)(B + 1) * sizeof *qsl), *lens = malloc((size_t)B * sizeof *lens);
    int32_t *bt = malloc((size_t)B * nbps * sizeof *bt);
    int64_t *slots = malloc((size_t)T * sizeof *slots);
    ok = ok && qsl && lens && bt && slots;
    attn_meta m = {.num_seqs = B, .num_tokens = T, .max_query_len = 1, .max_seq_len = ctx, .block_size = BS,
                   .max_blocks_per_seq = nbps,
                   .query_start_loc = tensor_1d(DTYPE_I32, NULL, B + 1),
                   .seq_lens = tensor_1d(DTYPE_I32, NULL, B),
                   .block_tables = tensor_2d(DTYPE_I32, NULL, B, nbps),
                   .slot_mapping = tensor_1d(DTYPE_I64, NULL, T)};
    tensor ql = {0}, qr = {0}, out = {0};
    if (ok) {
        for (int s = 0; s <= B; s++) qsl[s] = s;
        for (int s = 0; s < B; s++) {
            lens[s] = ctx;
            for (int b = 0; b < nbps; b++) bt[(size_t)s * nbps + b] = s * nbps + b;
        }
        for (int t = 0; t < T; t++) slots[t] = -1; /* unused: kv is NULL */
        tensor *mt[4] = {&m.query_start_loc, &m.seq_lens, &m.block_tables, &m.slot_mapping};
        const void *mh[4] = {qsl, lens, bt, slots};
        const size_t mb[4] = {(size_t)(B + 1) * 4, (size_t)B * 4, (size_t)B * nbps * 4, (size_t)T * 8};
        for (int i = 0; i < 4; i++) {
            CHECK_OK(gpu->ops->alloc(gpu, mt[i]));
            if (mt[i]->data) CHECK_OK(gpu->ops->upload(gpu, mt[i], mh[i], mb[i]));
        }
        ql = act(DTYPE_BF16, T, (int64_t)H * L);
        qr = act(DTYPE_BF16, T, (int64_t)H * R);
        out = act(DTYPE_BF16, T, (int64_t)H * L);
        uint16_t *hq = rand_bf16((size_t)T * H * L, 1.0f), *hr = rand_bf16((size_t)T * H * R, 1.0f);
        if (hq && ql.data) CHECK_OK(gpu->ops->upload(gpu, &ql, hq, (size_t)T * H * L * 2));
        if (hr && qr.data) CHECK_OK(gpu->ops->upload(gpu, &qr, hr, (size_t)T * H * R * 2));
        ok = hq && hr && t_failures == 0;
        free(hq);
        free(hr);
    }
    /* DeepSeek's scale: 1 / sqrt(qk_nope_head_dim 128 + R) */
    const mla_params mp = {.num_heads = H, .kv_lora_rank = L, .rope_dim = R, .scale = 1.0f / sqrtf(128.0f + R)};
    be_graph *gr = NULL;
    if (ok) {
        for (int l = 0; l < LAYERS; l++) gpu->ops->attention_mla(gpu, &ql, &qr, NULL, &cache[l], &m, &mp, &out);
        vllm_status st = gpu->ops->synchronize(gpu); /* eager once */
        CHECK_MSG(st == VLLM_OK, "mla H %d B %d ctx %d (eager): %s", H, B, ctx, vllm_last_error());
        ok = st == VLLM_OK;
    }
    if (ok) {
        CHECK_OK(gpu->ops->graph_begin(gpu));
        for (int l = 0; l < LAYERS; l++) gpu->ops->attention_mla(gpu, &ql, &qr, NULL, &cache[l], &m, &mp, &out);
        vllm_status st = gpu->ops->graph_end(gpu, &gr);
        CHECK_MSG(st == VLLM_OK, "mla H %d B %d ctx %d (recording): %s", H, B, ctx, vllm_last_error());
    }
    if (gr) {
        /* warm up, then batches of reps replays (about 20 ms a batch, 1 to 20 replays): the median batch */
        for (int i = 0; i < 2; i++) CHECK_OK(gpu->ops->graph_launch(gpu, gr));
        CHECK_OK(gpu->ops->synchronize(gpu));
        double t0 = now();
        CHECK_OK(gpu->ops->graph_launch(gpu, gr));
        CHECK_OK(gpu->ops->synchronize(gpu));
        const double t1 = now() - t0;
        const int reps = t1 >= 0.02 ? 1 : t1 * 20 <= 0.02 ? 20 : (int)(0.02 / t1);
        double t[9];
        for (int i = 0; i < 9; i++) {
            t0 = now();
            for (int r = 0; r < reps; r++) CHECK_OK(gpu->ops->graph_launch(gpu, gr));
            CHECK_OK(gpu->ops->synchronize(gpu));
            t[i] = (now() - t0) / reps / LAYERS;
        }
        const double tl = median(t, 9);
        const double bytes = (double)B * ctx * W * 2 + (double)T * H * W * 2 + (double)T * H * L * 2;
        const double gbs = bytes / tl * 1e-9;
        const size_t on = (size_t)T * H * L;
        float *oh = malloc(on * sizeof *oh);
        uint16_t *ob = malloc(on * 2);
        CHECK(oh && ob);
        if (oh && ob) {
            CHECK_OK(gpu->ops->download(gpu, ob, &out, on * 2));
            for (size_t i = 0; i < on; i++) oh[i] = bf16_to_f32(ob[i]);
            const int64_t bad = count_nonfinite(oh, on);
            CHECK_MSG(bad == 0, "mla H %d B %d ctx %d: %lld non-finite outputs", H, B, ctx, (long long)bad);
        }
        free(oh);
        free(ob);
        printf("    %3d  %2d  %6d  %9.1f  %8.1f  %7.0f  %5.1f%%\n", H, B, ctx, 1e6 * tl, bytes * 1e-6, gbs,
               100.0 * gbs / 4250.0);
        printf("PERF mla-decode-H%d-B%d-ctx%d us %.1f GB_s %.0f\n", H, B, ctx, 1e6 * tl, gbs);
        gpu->ops->graph_free(gpu, gr);
    }
    tensor *ts[7] = {&ql, &qr, &out, &m.query_start_loc, &m.seq_lens, &m.block_tables, &m.slot_mapping};
    for (int i = 0; i < 7; i++)
        if (ts[i]->data) gpu->ops->release(gpu, ts[i]);
    for (int l = 0; l < LAYERS; l++)
        if (cache[l].data) gpu->ops->release(gpu, &cache[l]);
    free(qsl);
    free(lens);
    free(bt);
    free(slots);
    CHECK_OK(gpu->ops->synchronize(gpu));
}

static void run_mla(void) {
    printf("\n== MLA decode attention alone (L 512 + R 64, BF16 cache, block %d), 8 layers per graph:\n", BS);
    if (!gpu->ops->attention_mla) {
        printf("  (no attention_mla in this backend)\n");
        return;
    }
    printf("      H   B     ctx  us/layer   MB read     GB/s  of 4.25 TB/s\n");
    const int Hs[2] = {16, 128}, Bs[2] = {1, 8}, ctxs[3] = {4096, 16384, 32768};
    for (int h = 0; h < 2; h++)
        for (int b = 0; b < 2; b++)
            for (int c = 0; c < 3; c++) run_mla_case(Hs[h], Bs[b], ctxs[c]);
}

/* a list of up to MAX_BATCHES decode batches (1..MAX_T) from the environment variable name, if set */
static int parse_batches(const char *name, int *out, int n) {
    const char *v = getenv(name);
    if (!v || !*v) return n;
    int k = 0;
    for (char *end; *v && k < MAX_BATCHES; v = end) {
        long b = strtol(v, &end, 10);
        if (end == v) {
            end = (char *)v + 1; /* a separator */
            continue;
        }
        if (b >= 1 && b <= MAX_T) out[k++] = (int)b;
    }
    return k > 0 ? k : n;
}

int main(void) {
    n_batches = parse_batches("VLLM_PERF_BATCHES", batches, n_batches);
    n_op_batches = parse_batches("VLLM_PERF_OP_BATCHES", op_batches, n_op_batches);
    for (int i = 0; i < n_batches; i++) max_s = batches[i] > max_s ? batches[i] : max_s;
    vllm_status st = backend_create("cuda", NULL, &gpu);
    if (st != VLLM_OK) {
        printf("no CUDA device: skipped (%s)\n", vllm_last_error());
        return 77;
    }
    const char *only = getenv("VLLM_PERF_SHAPES");
    for (size_t i = 0; i < sizeof SHAPES / sizeof *SHAPES; i++) {
        const bool optional = !strncmp(SHAPES[i].name, "gemma", 5);
        if ((only && *only && strcmp(only, "all") != 0 && !strstr(SHAPES[i].name, only)) ||
            (optional && (!only || !strstr(SHAPES[i].name, only))))
            continue;
        run_shape(&SHAPES[i]);
    }
    if (!only || !*only || !strcmp(only, "all") || strstr(only, "moe")) {
        run_moe(NULL);
        run_moe("gemm"); /* cuBLAS per expert, for comparison */
    }
    if (!only || !*only || !strcmp(only, "all") || strstr(only, "blocks")) run_blocks();
    if (!only || !*only || !strcmp(only, "all") || strstr(only, "quant")) run_quant();
    if (!only || !*only || !strcmp(only, "all") || strstr(only, "mla")) run_mla();
    backend_free(gpu);
    TEST_END();
}
