/*
 * test_cuda_stack.c: dense_stack_decode (src/cuda/ops_stack.cu, the whole stack of a one-token step in one
 * kernel) against the per-layer ops the decoder runs otherwise (decoder.c's loop: linear_fused with the norm,
 * qk_norm_rope_kv, attention, linear_fused accumulating, the SiLU-gated MLP), each of which test_cuda_ops checks
 * against the CPU backend. Same weights, caches and step: the residual stream x after the stack and every
 * layer's caches must agree (the new K / V slot included; every other slot bit for bit), for stacks of head_dim
 * 64 / 128 / 256, GQA groups 1 to 16, widths 256 to 11,008 (every GEMV work mapping: 1 to 16 warps a row), q/k
 * norms or none, qkv / o / MLP biases, halves or adjacent-pair RoPE
 * (partial rotary), a sliding window, block sizes 7 / 16 / 32, contexts 1 to 5,000 keys (many tiles per
 * split). A recorded graph replayed on a new x and step must equal the eager op; a bad block id must come back
 * from synchronize; supports() must refuse what the kernel does not take.
 *
 * Exits 77 ("no CUDA device: skipped") without a GPU or a CUDA build.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/backend.h"
#include "test.h"

#include "cuda/cuda_test_util.h"

typedef struct st_case {
    const char *name;
    int D, nh, nkv, hd, I, L, rot;
    bool neox, qk_norm, bias;
    int window, bs, ctx;
} st_case;

static const st_case CASES[] = {
    {"qwen3-like, first token", 256, 4, 2, 64, 512, 3, 64, true, true, false, 0, 16, 1},
    {"qwen3-like, 37 keys", 256, 4, 2, 64, 512, 3, 64, true, true, false, 0, 16, 37},
    {"qwen3-like, 5000 keys (tiles)", 256, 4, 2, 64, 512, 2, 64, true, true, false, 0, 16, 5000},
    {"qwen3-0.6b layer shape, 257 keys", 1024, 16, 8, 128, 3072, 2, 128, true, true, false, 0, 16, 257},
    {"qwen2-like bias, pairs, partial rope, window, block 7", 512, 8, 2, 128, 1024, 2, 64, false, false, true, 100,
     7, 300},
    {"llama-like halves, partial rope, window past start", 512, 8, 2, 128, 768, 2, 64, true, false, false, 400, 16,
     129},
    {"head_dim 256, block 32", 512, 8, 4, 256, 768, 2, 256, true, true, false, 0, 32, 40},
    {"group 16 (one kv head)", 512, 16, 1, 128, 512, 2, 128, true, false, true, 0, 16, 100},
    /* wide rows: 8 warps a row (K 5120: qkv, gate_up) and 16 (K 11008: down) */
    {"hidden 5120, intermediate 11008", 5120, 4, 2, 128, 11008, 2, 128, true, true, false, 0, 16, 70},
};

typedef struct st_model {
    const st_case *c;
    int nq, qd, kvd, nblocks, mb;
    be_linear *lin[8][4];
    tensor in_norm[8], post_norm[8], qn[8], kn[8];
    tensor kc[8], vc[8], kc2[8], vc2[8];
    tensor cos_sin, x, x2, h, qkv, attn, o, gu, act;
    tensor pos, seq_lens, bt, slots, qsl;
    attn_meta m;
    be_dense_layer layers[8];
    be_dense_stack st;
} st_model;

static be_linear *rand_lin(int out, int in, bool bias) {
    const float scale = 1.0f / sqrtf((float)in);
    float *w = malloc((size_t)out * in * sizeof *w), *b = malloc((size_t)out * sizeof *b);
    for (int64_t i = 0; i < (int64_t)out * in; i++) w[i] = rnd() * scale * 1.7f;
    for (int i = 0; i < out; i++) b[i] = rnd() * 0.1f;
    void *pw = pack(w, (int64_t)out * in, DTYPE_BF16);
    tensor t = tensor_2d(DTYPE_BF16, pw, out, in), tb = tensor_1d(DTYPE_F32, b, out);
    const tensor *ws[1] = {&t}, *bs[1] = {&tb};
    be_linear *l = NULL;
    CHECK_OK(gpu->ops->linear_create(gpu, ws, bias ? bs : NULL, 1, &l));
    free(pw);
    free(w);
    free(b);
    return l;
}

static tensor rand_norm(int n) {
    float *w = malloc((size_t)n * sizeof *w);
    for (int i = 0; i < n; i++) w[i] = 1.0f + 0.2f * rnd();
    void *b = pack(w, n, DTYPE_BF16);
    tensor h = tensor_1d(DTYPE_BF16, b, n), t;
    CHECK_OK(gpu->ops->import(gpu, &h, &t));
    free(b);
    free(w);
    return t;
}

static tensor rand_cache(int nblocks, int bs, int nkv, int hd) {
    int64_t shape[4] = {nblocks, bs, nkv, hd}, n = (int64_t)nblocks * bs * nkv * hd;
    tensor t = tensor_make(DTYPE_BF16, NULL, 4, shape);
    CHECK_OK(gpu->ops->alloc(gpu, &t));
    float *r = malloc((size_t)n * sizeof *r);
    for (int64_t i = 0; i < n; i++) r[i] = rnd();
    void *b = pack(r, n, DTYPE_BF16);
    CHECK_OK(gpu->ops->upload(gpu, &t, b, (size_t)n * 2));
    free(b);
    free(r);
    return t;
}

/* the step's metadata: one token at position ctx - 1 of a sequence on shuffled blocks */
static void st_meta(st_model *s, int ctx, int bad_col) {
    const st_case *c = s->c;
    int32_t *bt = malloc((size_t)s->mb * sizeof *bt);
    for (int i = 0; i < s->mb; i++) bt[i] = i;
    for (int i = s->mb - 1; i > 0; i--) { /* a permutation of the blocks */
        int j = rnd_int(i + 1), t = bt[i];
        bt[i] = bt[j];
        bt[j] = t;
    }
    if (bad_col >= 0) bt[bad_col] = s->nblocks + 5;
    int32_t pos = ctx - 1, lens = ctx, qsl[2] = {0, 1};
    int64_t slot = (int64_t)bt[(ctx - 1) / c->bs] * c->bs + (ctx - 1) % c->bs;
    CHECK_OK(gpu->ops->upload(gpu, &s->bt, bt, (size_t)s->mb * 4));
    CHECK_OK(gpu->ops->upload(gpu, &s->pos, &pos, 4));
    CHECK_OK(gpu->ops->upload(gpu, &s->seq_lens, &lens, 4));
    CHECK_OK(gpu->ops->upload(gpu, &s->slots, &slot, 8));
    CHECK_OK(gpu->ops->upload(gpu, &s->qsl, qsl, 8));
    s->m.max_seq_len = ctx;
    free(bt);
}

static void st_init(st_model *s, const st_case *c) {
    memset(s, 0, sizeof *s);
    s->c = c;
    s->qd = c->nh * c->hd;
    s->kvd = c->nkv * c->hd;
    s->nq = s->qd + 2 * s->kvd;
    s->mb = (c->ctx + c->bs - 1) / c->bs + 2;
    s->nblocks = s->mb + 3;
    for (int l = 0; l < c->L; l++) {
        s->lin[l][0] = rand_lin(s->nq, c->D, c->bias);
        s->lin[l][1] = rand_lin(c->D, s->qd, c->bias);
        s->lin[l][2] = rand_lin(2 * c->I, c->D, c->bias);
        s->lin[l][3] = rand_lin(c->D, c->I, c->bias);
        s->in_norm[l] = rand_norm(c->D);
        s->post_norm[l] = rand_norm(c->D);
        s->qn[l] = rand_norm(c->hd);
        s->kn[l] = rand_norm(c->hd);
        s->kc[l] = rand_cache(s->nblocks, c->bs, c->nkv, c->hd);
        s->vc[l] = rand_cache(s->nblocks, c->bs, c->nkv, c->hd);
        s->kc2[l] = s->kc[l];
        s->vc2[l] = s->vc[l];
        CHECK_OK(gpu->ops->alloc(gpu, &s->kc2[l]));
        CHECK_OK(gpu->ops->alloc(gpu, &s->vc2[l]));
        s->layers[l] = (be_dense_layer){.qkv = s->lin[l][0], .o = s->lin[l][1], .gate_up = s->lin[l][2],
                                        .down = s->lin[l][3], .in_norm = &s->in_norm[l],
                                        .post_norm = &s->post_norm[l], .q_norm = c->qk_norm ? &s->qn[l] : NULL,
                                        .k_norm = c->qk_norm ? &s->kn[l] : NULL, .k_cache = &s->kc2[l],
                                        .v_cache = &s->vc2[l]};
    }
    const int maxpos = c->ctx + 8;
    float *cs = malloc((size_t)maxpos * c->rot * sizeof *cs);
    for (int p = 0; p < maxpos; p++)
        for (int i = 0; i < c->rot / 2; i++) {
            double f = pow(10000.0, -2.0 * i / c->rot);
            cs[p * c->rot + i] = (float)cos(p * f);
            cs[p * c->rot + c->rot / 2 + i] = (float)sin(p * f);
        }
    s->cos_sin = put(gpu, DTYPE_F32, maxpos, c->rot, cs);
    free(cs);
    s->x = put(gpu, DTYPE_BF16, 1, c->D, NULL);
    s->x2 = put(gpu, DTYPE_BF16, 1, c->D, NULL);
    s->h = put(gpu, DTYPE_BF16, 1, c->D, NULL);
    s->qkv = put(gpu, DTYPE_BF16, 1, s->nq, NULL);
    s->attn = put(gpu, DTYPE_BF16, 1, s->qd, NULL);
    s->o = put(gpu, DTYPE_BF16, 1, c->D, NULL);
    s->gu = put(gpu, DTYPE_BF16, 1, 2 * c->I, NULL);
    s->act = put(gpu, DTYPE_BF16, 1, c->I, NULL);
    int32_t z[2] = {0, 1};
    int64_t z64 = 0;
    s->pos = put_i32(gpu, z, 1);
    s->seq_lens = put_i32(gpu, z + 1, 1);
    s->qsl = put_i32(gpu, z, 2);
    s->slots = put_i64(gpu, &z64, 1);
    int32_t *bt = calloc((size_t)s->mb, sizeof *bt);
    s->bt = put_i32(gpu, bt, s->mb);
    s->bt.ndim = 2;
    s->bt.shape[0] = 1;
    s->bt.shape[1] = s->mb;
    free(bt);
    s->m = (attn_meta){.num_seqs = 1, .num_tokens = 1, .max_query_len = 1, .max_seq_len = c->ctx,
                       .block_size = c->bs, .max_blocks_per_seq = s->mb, .query_start_loc = s->qsl,
                       .seq_lens = s->seq_lens, .block_tables = s->bt, .slot_mapping = s->slots};
    s->st = (be_dense_stack){.layers = s->layers, .num_layers = c->L, .hidden = c->D, .intermediate = c->I,
                             .num_heads = c->nh, .num_kv_heads = c->nkv, .head_dim = c->hd, .rot_dim = c->rot,
                             .neox = c->neox, .cos_sin = &s->cos_sin, .eps = 1e-6f,
                             .scale = 1.0f / sqrtf((float)c->hd), .sliding_window = c->window};
}

static void st_free(st_model *s) {
    for (int l = 0; l < s->c->L; l++) {
        for (int i = 0; i < 4; i++) gpu->ops->linear_free(gpu, s->lin[l][i]);
        tensor *im[] = {&s->in_norm[l], &s->post_norm[l], &s->qn[l], &s->kn[l]};
        for (int i = 0; i < 4; i++) gpu->ops->release_import(gpu, im[i]);
        tensor *cs[] = {&s->kc[l], &s->vc[l], &s->kc2[l], &s->vc2[l]};
        for (int i = 0; i < 4; i++) drop(gpu, cs[i]);
    }
    tensor *ts[] = {&s->cos_sin, &s->x, &s->x2, &s->h, &s->qkv, &s->attn, &s->o, &s->gu, &s->act,
                    &s->pos, &s->seq_lens, &s->qsl, &s->slots, &s->bt};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) drop(gpu, ts[i]);
}

/* the decoder's per-layer ops (decoder.c's loop for the Llama layout) on x and the caches kc / vc */
static void st_reference(st_model *s) {
    const st_case *c = s->c;
    const backend_ops *o = gpu->ops;
    tensor q = tensor_cols(&s->qkv, 0, s->qd), k = tensor_cols(&s->qkv, s->qd, s->kvd),
           v = tensor_cols(&s->qkv, s->qd + s->kvd, s->kvd);
    attn_params ap = {.scale = s->st.scale, .sliding_window = c->window, .num_heads = c->nh,
                      .num_kv_heads = c->nkv, .head_dim = c->hd};
    const linear_fuse add_to_x = {.accumulate = true, .mid = &s->o};
    for (int l = 0; l < c->L; l++) {
        const linear_fuse attn_in = {.norm_w = &s->in_norm[l], .eps = 1e-6f, .h = &s->h};
        o->linear_fused(gpu, s->lin[l][0], &s->x, &attn_in, &s->qkv);
        o->qk_norm_rope_kv(gpu, &q, &k, &v, c->qk_norm ? &s->qn[l] : NULL, c->qk_norm ? &s->kn[l] : NULL, 1e-6f,
                           &s->pos, &s->cos_sin, c->hd, c->rot, c->neox, &s->kc[l], &s->vc[l], &s->m);
        o->attention(gpu, &q, &s->kc[l], &s->vc[l], &s->m, &ap, &s->attn);
        o->linear_fused(gpu, s->lin[l][1], &s->attn, &add_to_x, &s->x);
        const linear_fuse mlp_in = {.norm_w = &s->post_norm[l], .eps = 1e-6f, .silu_mul = true, .h = &s->h,
                                    .mid = &s->gu};
        o->linear_fused(gpu, s->lin[l][2], &s->x, &mlp_in, &s->act);
        o->linear_fused(gpu, s->lin[l][3], &s->act, &add_to_x, &s->x);
    }
}

static void st_put_x(st_model *s, const float *xv) {
    void *b = pack(xv, s->c->D, DTYPE_BF16);
    CHECK_OK(gpu->ops->upload(gpu, &s->x, b, (size_t)s->c->D * 2));
    CHECK_OK(gpu->ops->upload(gpu, &s->x2, b, (size_t)s->c->D * 2));
    free(b);
}

static void st_copy_caches(st_model *s) {
    for (int l = 0; l < s->c->L; l++) {
        gpu->ops->copy(gpu, &s->kc[l], &s->kc2[l]);
        gpu->ops->copy(gpu, &s->vc[l], &s->vc2[l]);
    }
}

/* x2 / the second caches (the stack's) against x / the first (the reference's) */
static void st_compare(st_model *s, const char *what) {
    char name[160];
    float *xr = get(gpu, &s->x), *xs = get(gpu, &s->x2);
    snprintf(name, sizeof name, "%s: x after %d layers", what, s->c->L);
    compare(name, xs, xr, s->c->D, REL, ELEM);
    free(xr);
    free(xs);
    for (int l = 0; l < s->c->L; l++) {
        const int64_t n = tensor_numel(&s->kc[l]);
        for (int kv = 0; kv < 2; kv++) {
            float *r = get(gpu, kv ? &s->vc[l] : &s->kc[l]), *g = get(gpu, kv ? &s->vc2[l] : &s->kc2[l]);
            int64_t diff = 0;
            double num = 0, den = 0;
            for (int64_t i = 0; i < n; i++) {
                if (r[i] != g[i]) diff++;
                num += ((double)r[i] - g[i]) * ((double)r[i] - g[i]);
                den += (double)r[i] * r[i];
            }
            /* the new slot: one row of nkv * hd values may differ by rounding; nothing else may */
            CHECK_MSG(diff <= s->kvd && sqrt(num / (den > 0 ? den : 1)) < 2e-3,
                      "%s: layer %d %s cache: %lld values differ (at most %d, the new slot's), rel %.3g", what, l,
                      kv ? "V" : "K", (long long)diff, s->kvd, sqrt(num / (den > 0 ? den : 1)));
            free(r);
            free(g);
        }
    }
}

static void test_case(const st_case *c) {
    st_model s;
    st_init(&s, c);
    printf("%s (D %d, heads %d / %d of %d, I %d, %d layers, block %d, context %d)\n", c->name, c->D, c->nh, c->nkv,
           c->hd, c->I, c->L, c->bs, c->ctx);
    CHECK_MSG(backend_supports(gpu, BE_OP_DENSE_STACK, &s.st) == BE_NATIVE, "%s: supports() refused the stack",
              c->name);
    float *xv = malloc((size_t)c->D * sizeof *xv);
    for (int i = 0; i < c->D; i++) xv[i] = rnd();

    /* eager: the reference ops, then the stack on the copies */
    st_meta(&s, c->ctx, -1);
    st_put_x(&s, xv);
    st_copy_caches(&s);
    st_reference(&s);
    poison(&s.qkv);
    poison(&s.attn);
    poison(&s.act);
    gpu->ops->dense_stack_decode(gpu, &s.st, &s.x2, &s.pos, &s.m, &s.qkv, &s.attn, &s.act);
    CHECK_OK(gpu->ops->synchronize(gpu));
    st_compare(&s, "eager");

    /* a graph recorded now, replayed on a new x and a new step (one token later) */
    be_graph *g = NULL;
    CHECK_OK(gpu->ops->graph_begin(gpu));
    gpu->ops->dense_stack_decode(gpu, &s.st, &s.x2, &s.pos, &s.m, &s.qkv, &s.attn, &s.act);
    CHECK_OK(gpu->ops->graph_end(gpu, &g));
    for (int i = 0; i < c->D; i++) xv[i] = rnd();
    const int ctx2 = c->ctx > 2 ? c->ctx - 1 : c->ctx; /* within the table's blocks */
    st_meta(&s, ctx2, -1);
    st_put_x(&s, xv);
    st_copy_caches(&s);
    st_reference(&s);
    if (g) CHECK_OK(gpu->ops->graph_launch(gpu, g));
    CHECK_OK(gpu->ops->synchronize(gpu));
    st_compare(&s, "graph replay");
    if (g) gpu->ops->graph_free(gpu, g);

    /* twice in a row: the counters and the grid barrier are back at 0 after each launch */
    st_put_x(&s, xv);
    st_copy_caches(&s);
    gpu->ops->dense_stack_decode(gpu, &s.st, &s.x2, &s.pos, &s.m, &s.qkv, &s.attn, &s.act);
    float *x1 = get(gpu, &s.x2);
    st_put_x(&s, xv);
    st_copy_caches(&s);
    gpu->ops->dense_stack_decode(gpu, &s.st, &s.x2, &s.pos, &s.m, &s.qkv, &s.attn, &s.act);
    float *x2 = get(gpu, &s.x2);
    int64_t same = 0;
    for (int i = 0; i < c->D; i++) same += x1[i] == x2[i];
    CHECK_MSG(same == c->D, "%s: two launches on the same input differ (%lld of %d equal)", c->name, (long long)same,
              c->D);
    free(x1);
    free(x2);
    free(xv);
    st_free(&s);
}

static void test_errors(void) {
    st_model s;
    st_init(&s, &CASES[1]);
    float xv[256];
    for (int i = 0; i < 256; i++) xv[i] = rnd();
    /* a block id outside the cache: reported, and the backend usable afterwards */
    st_meta(&s, CASES[1].ctx, 0);
    st_put_x(&s, xv);
    gpu->ops->dense_stack_decode(gpu, &s.st, &s.x2, &s.pos, &s.m, &s.qkv, &s.attn, &s.act);
    expect_device_error("attention");
    /* two tokens: refused */
    attn_meta m2 = s.m;
    m2.num_tokens = 2;
    gpu->ops->dense_stack_decode(gpu, &s.st, &s.x2, &s.pos, &m2, &s.qkv, &s.attn, &s.act);
    CHECK(gpu->ops->synchronize(gpu) != VLLM_OK);
    CHECK_OK(gpu->ops->synchronize(gpu));
    /* what supports() must refuse */
    be_dense_stack b = s.st;
    b.head_dim = 96;
    CHECK(backend_supports(gpu, BE_OP_DENSE_STACK, &b) == BE_UNSUPPORTED);
    b = s.st;
    b.rot_dim = 32; /* halves of 16: the partner is not in the lane */
    CHECK(backend_supports(gpu, BE_OP_DENSE_STACK, &b) == BE_UNSUPPORTED);
    b = s.st;
    b.num_layers = 0;
    CHECK(backend_supports(gpu, BE_OP_DENSE_STACK, &b) == BE_UNSUPPORTED);
    b = s.st;
    b.intermediate = 500; /* not a multiple of 256 (and not the weights' shape) */
    CHECK(backend_supports(gpu, BE_OP_DENSE_STACK, &b) == BE_UNSUPPORTED);
    CHECK(backend_supports(cpu, BE_OP_DENSE_STACK, &s.st) == BE_UNSUPPORTED);
    st_free(&s);
}

int main(void) {
    setenv("VLLM_CUDA_STACK", "1", 0);
    vllm_status st = backend_create("cuda", NULL, &gpu);
    if (st != VLLM_OK) {
        printf("no CUDA device: skipped (%s)\n", vllm_last_error());
        return 77;
    }
    backend_options co = {.num_threads = 1};
    CHECK_OK(backend_create("cpu", &co, &cpu));
    if (!gpu->ops->dense_stack_decode) TEST_END();
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) test_case(&CASES[i]);
    test_errors();
    CHECK_OK(gpu->ops->synchronize(gpu));
    backend_free(gpu);
    backend_free(cpu);
    TEST_END();
}
