/* test_sample_batch.c: the backend's batched sample / logprobs ops (CPU)
 * against the per-row pipeline written out here (raw logprobs, logits
 * processors, sampler) on 40 rows with mixed parameters, with 1 and 3
 * threads (results must be identical), plus NaN and all-banned rows and
 * rows picked out of order. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sample/sample.h"
#include "tensor/backend.h"
#include "test.h"

#define V 300
#define R 40     /* logits rows */
#define B 32     /* sampled rows */
#define K 5      /* top logprobs */

static float logits0[R * V];
static vllm_sampling_params params[B];
static sampler_context ctx[B];
static int32_t rows[B];
static double uniform[B];
static int32_t prompt[12] = {3, 9, 27, 81, 243, 5, 6, 7, 7, 7, 100, 200};
static int32_t output[6] = {11, 12, 13, 11, 9, 299};
static int32_t eos[1] = {2};
static int32_t allowed[4] = {1, 2, 50, 51};
static int32_t bias_ids[2] = {4, 10};
static float bias_vals[2] = {5.0f, -100.0f};
static int32_t stop_ids[1] = {7};
static int32_t bad_ids[3] = {11, 12, 13};
static size_t bad_offsets[3] = {0, 1, 3};
static sampler_token_seqs bad = {.ids = bad_ids, .offsets = bad_offsets, .num = 2};

static uint32_t rng_state = 777;
static float frand(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)(rng_state >> 8) / 16777216.0f;
}

static void setup(void) {
    for (int i = 0; i < R * V; i++) logits0[i] = (frand() - 0.5f) * 8.0f;
    for (int i = 0; i < B; i++) {
        vllm_sampling_params p = vllm_sampling_default_params();
        p.temperature = (i % 4 == 0) ? 0.0f : 0.5f + 0.1f * (float)(i % 7);
        switch (i % 8) {
        case 1: p.top_k = 10; break;
        case 2: p.top_p = 0.8f; break;
        case 3: p.min_p = 0.05f; break;
        case 4: p.repetition_penalty = 1.3f; p.frequency_penalty = 0.5f; p.presence_penalty = 0.2f; break;
        case 5: p.allowed_token_ids = allowed; p.num_allowed_token_ids = 4; break;
        case 6: p.logit_bias_ids = bias_ids; p.logit_bias_values = bias_vals; p.num_logit_bias = 2; break;
        case 7: p.min_tokens = 10; p.stop_token_ids = stop_ids; p.num_stop_token_ids = 1; break;
        default: break;
        }
        p.logprobs = (i % 3 == 0) ? K : (i % 3 == 1 ? 0 : -1);
        params[i] = p;
        ctx[i] = (sampler_context){.prompt = prompt, .n_prompt = 12, .output = output, .n_output = (size_t)(i % 7),
                                   .eos_ids = eos, .n_eos = 1, .bad_words = (i % 5 == 0) ? &bad : NULL};
        rows[i] = (int32_t)((i * 7 + 3) % R); /* out of order, distinct for B <= R */
        uniform[i] = (double)frand();
    }
}

typedef struct result {
    int32_t tokens[B];
    float lps[B];
    int32_t top_ids[B][K];
    float top_lps[B][K];
} result;

/* The pipeline of one row, written out with the single-row functions. */
static void reference(result *out) {
    sampler_scratch sc = {0};
    sampler_proc_scratch ps = {0};
    CHECK_OK(sampler_proc_scratch_init(&ps, V));
    float row[V], raw[V];
    for (int i = 0; i < B; i++) {
        memcpy(row, logits0 + (size_t)rows[i] * V, sizeof row);
        memcpy(raw, row, sizeof raw);
        CHECK_OK(sampler_process_logits(row, V, &params[i], &ctx[i], &ps));
        int32_t t = sampler_sample_u(row, V, &params[i], uniform[i], &sc);
        CHECK(t >= 0 && t < V);
        out->tokens[i] = t;
        out->lps[i] = (float)sampler_logprob(raw, V, t);
        if (params[i].logprobs > 0) CHECK(sampler_top_logprobs(raw, V, K, out->top_ids[i], out->top_lps[i]) == K);
    }
    sampler_scratch_free(&sc);
    sampler_proc_scratch_free(&ps);
}

static void run_op(int threads, result *out) {
    backend *be = NULL;
    backend_options opt = {.num_threads = threads};
    CHECK_OK(backend_create("cpu", &opt, &be));
    float *copy = malloc(sizeof logits0);
    memcpy(copy, logits0, sizeof logits0);
    tensor lt = tensor_2d(DTYPE_F32, copy, R, V);
    int32_t *tid[B];
    float *tlp[B];
    for (int i = 0; i < B; i++) {
        tid[i] = params[i].logprobs > 0 ? out->top_ids[i] : NULL;
        tlp[i] = params[i].logprobs > 0 ? out->top_lps[i] : NULL;
    }
    const vllm_sampling_params *pp[B];
    for (int i = 0; i < B; i++) pp[i] = &params[i];
    sample_batch sb = {.num_rows = B, .rows = rows, .params = pp, .ctx = ctx, .uniform = uniform,
                       .tokens = out->tokens, .logprobs = out->lps, .top_ids = tid, .top_lps = tlp};
    CHECK_OK(be->ops->sample(be, &lt, &sb));
    free(copy);
    backend_free(be);
}

static void check_same(const result *a, const result *b) {
    for (int i = 0; i < B; i++) {
        CHECK_MSG(a->tokens[i] == b->tokens[i], "row %d: token %d vs %d", i, a->tokens[i], b->tokens[i]);
        CHECK(a->lps[i] == b->lps[i]);
        if (params[i].logprobs > 0)
            for (int j = 0; j < K; j++) {
                CHECK(a->top_ids[i][j] == b->top_ids[i][j]);
                CHECK(a->top_lps[i][j] == b->top_lps[i][j]);
            }
    }
}

static void test_matches_reference(void) {
    result ref, one, three;
    memset(&ref, 0, sizeof ref);
    memset(&one, 0, sizeof one);
    memset(&three, 0, sizeof three);
    reference(&ref);
    run_op(1, &one);
    run_op(3, &three);
    check_same(&ref, &one);
    check_same(&ref, &three);
    /* the constraints really acted */
    for (int i = 0; i < B; i++) {
        if (i % 8 == 5) CHECK(ref.tokens[i] == 1 || ref.tokens[i] == 2 || ref.tokens[i] == 50 || ref.tokens[i] == 51);
        if (i % 8 == 7 && (size_t)(i % 7) < 10) CHECK(ref.tokens[i] != 2 && ref.tokens[i] != 7);
        if (i % 8 == 6) CHECK(ref.tokens[i] != 10);
    }
}

static void test_bad_rows(void) {
    backend *be = NULL;
    CHECK_OK(backend_create("cpu", NULL, &be));
    float lg[2 * V];
    for (int i = 0; i < 2 * V; i++) lg[i] = (float)(i % 17);
    lg[5] = NAN;                                       /* row 0 has a NaN */
    vllm_sampling_params p = vllm_sampling_default_params();
    int32_t only[1] = {3};
    p.allowed_token_ids = only;
    p.num_allowed_token_ids = 1;
    vllm_sampling_params q = p;
    q.logprobs = 2;
    /* row 1: allowed = {3}, and 3 is banned as a one-token bad word */
    int32_t bw_ids[1] = {3};
    size_t bw_off[2] = {0, 1};
    sampler_token_seqs bw = {.ids = bw_ids, .offsets = bw_off, .num = 1};
    sampler_context c[2] = {{.eos_ids = eos, .n_eos = 1}, {.eos_ids = eos, .n_eos = 1, .bad_words = &bw}};
    const vllm_sampling_params *pp[2] = {&q, &p};
    int32_t rws[2] = {0, 1}, toks[2];
    float lps[2], tl[2];
    int32_t ti[2];
    int32_t *tids[2] = {ti, NULL};
    float *tlps[2] = {tl, NULL};
    double u[2] = {0.5, 0.5};
    tensor lt = tensor_2d(DTYPE_F32, lg, 2, V);
    sample_batch sb = {.num_rows = 2, .rows = rws, .params = pp, .ctx = c, .uniform = u, .tokens = toks,
                       .logprobs = lps, .top_ids = tids, .top_lps = tlps};
    CHECK_OK(be->ops->sample(be, &lt, &sb));
    CHECK(toks[0] == SAMPLE_NAN_LOGITS);
    CHECK(isnan(lps[0]) && ti[0] == -1 && ti[1] == -1 && isnan(tl[0]));
    CHECK(toks[1] == SAMPLE_ALL_BANNED);
    /* a row outside the tensor is an error, not a crash */
    int32_t bad_row[1] = {2};
    sb.num_rows = 1;
    sb.rows = bad_row;
    CHECK(be->ops->sample(be, &lt, &sb) == VLLM_ERR_INVALID_ARG);
    backend_free(be);
}

static void test_logprobs_op(void) {
    backend *be = NULL;
    backend_options opt = {.num_threads = 2};
    CHECK_OK(backend_create("cpu", &opt, &be));
    static float copy[R * V];
    memcpy(copy, logits0, sizeof copy);
    tensor lt = tensor_2d(DTYPE_F32, copy, R, V);
    enum { N = 6 };
    int32_t rws[N] = {5, 0, 39, 17, 5, 8}, tg[N] = {0, 299, 17, 4, 5, -1};
    int k[N] = {0, 3, K, 1, 2, 2};
    float lp[N];
    int32_t ids[N][K];
    float lps[N][K];
    int32_t *pi[N];
    float *pl[N];
    for (int i = 0; i < N; i++) {
        pi[i] = k[i] ? ids[i] : NULL;
        pl[i] = k[i] ? lps[i] : NULL;
    }
    logprob_batch lb = {.num_rows = N, .rows = rws, .targets = tg, .k = k, .logprobs = lp, .top_ids = pi, .top_lps = pl};
    CHECK_OK(be->ops->logprobs(be, &lt, &lb));
    for (int i = 0; i < N; i++) {
        const float *row = logits0 + (size_t)rws[i] * V;
        if (tg[i] >= 0) CHECK(lp[i] == (float)sampler_logprob(row, V, tg[i]));
        else CHECK(isnan(lp[i])); /* a target outside the vocabulary */
        int32_t ri[K];
        float rl[K];
        int n = sampler_top_logprobs(row, V, k[i], ri, rl);
        CHECK(n == k[i]);
        for (int j = 0; j < n; j++) CHECK(ids[i][j] == ri[j] && lps[i][j] == rl[j]);
    }
    /* the op leaves the logits alone */
    CHECK(!memcmp(copy, logits0, sizeof copy));
    backend_free(be);
}

/* structured outputs' token mask: applied before everything, raw logprobs included (vLLM masks the logits
 * before its Sampler): only allowed tokens are sampled, their logprobs renormalised among themselves */
static void test_token_mask(void) {
    enum { MV = 70 };
    float lg[MV], row[MV];
    for (int v = 0; v < MV; v++) lg[v] = (frand() - 0.5f) * 6.0f;
    uint32_t mask[(MV + 31) / 32] = {0};
    const int32_t allowed_ids[] = {3, 31, 32, 64, 69};
    for (int k = 0; k < 5; k++) mask[allowed_ids[k] >> 5] |= 1u << (allowed_ids[k] & 31);
    memcpy(row, lg, sizeof row);
    sampler_apply_token_mask(row, MV, mask);
    for (int v = 0; v < MV; v++) {
        bool a = false;
        for (int k = 0; k < 5; k++) a |= allowed_ids[k] == v;
        CHECK(a ? row[v] == lg[v] : isinf(row[v]) && row[v] < 0);
    }
    sampler_apply_token_mask(row, MV, NULL); /* NULL: nothing */
    sample_ws ws = {0};
    CHECK_OK(sample_ws_init(&ws, MV));
    double z = 0;
    for (int k = 0; k < 5; k++) z += exp((double)lg[allowed_ids[k]]);
    for (int trial = 0; trial < 40; trial++) {
        vllm_sampling_params p = vllm_sampling_default_params();
        p.temperature = trial % 2 ? 1.0f : 0.0f;
        p.logprobs = 3;
        const vllm_sampling_params *pp = &p;
        sampler_context c = {.mask = mask};
        int32_t row_i = 0, tok = -9, ti[3];
        float lp = 0, tl[3];
        int32_t *tip = ti;
        float *tlp = tl;
        double u = frand();
        sample_batch b = {.num_rows = 1, .rows = &row_i, .params = &pp, .ctx = &c, .uniform = &u, .tokens = &tok,
                          .logprobs = &lp, .top_ids = &tip, .top_lps = &tlp};
        memcpy(row, lg, sizeof row);
        sample_row_ref(row, MV, &b, 0, &ws);
        bool a = false;
        for (int k = 0; k < 5; k++) a |= allowed_ids[k] == tok;
        CHECK_MSG(a, "trial %d: token %d is masked", trial, tok);
        if (a) CHECK_NEAR(lp, (double)lg[tok] - log(z), 1e-5);
        for (int k = 0; k < 3; k++) {
            bool ta = false;
            for (int j = 0; j < 5; j++) ta |= allowed_ids[j] == ti[k];
            CHECK(ta);
        }
    }
    sample_ws_free(&ws);
}

int main(void) {
    setup();
    test_token_mask();
    test_matches_reference();
    test_bad_rows();
    test_logprobs_op();
    TEST_END();
}
