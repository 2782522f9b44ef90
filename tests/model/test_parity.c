/*
 * test_parity.c: every model fixture in tests/fixtures/models/ (tiny random
 * models made by tools/make_fixtures.py with transformers) against its
 * recorded greedy continuations: identical tokens up to the first recorded
 * near-tie (top1 - top2 < 0.02 nats) and logprobs within 1e-3. Each case
 * runs under several engine layouts (one batch, chunked prefill, odd block
 * sizes, a KV cache small enough to force preemption, blocks small enough
 * that sliding-window layers free theirs) which must all agree.
 * Prefix caching, 4-token blocks: one engine runs the prompts twice, the
 * second time with variants sharing the longest prompt's first 26 and 36
 * tokens; the second round must hit the cache (hybrid models: their
 * recurrent states restored from checkpoints, vLLM's mamba_cache_mode
 * "align", every 12 tokens for the hybrid fixtures: the 17- and 40-token
 * prompts cross boundaries and leave checkpoints at 12 and 36, which the
 * second round resumes from; the 26-token variant finds none at 24 and
 * recomputes), both rounds must match the recording and an engine with
 * prefix caching off (1e-4). Hybrid models with BF16 state pools (--mamba-cache-dtype) must keep the
 * recorded tokens up to the first gap below 0.5 nat (logprobs within 0.3); a bad state dtype is refused.
 * Quantized fixtures (tools/make_quant_fixtures.py, "quantization" in expected.json): "prompts" records the
 * dequantized weights, which the engine runs under VLLM_FP8_DEQUANTIZE=1 in every layout above (this checks
 * the packing: block order, scale indexing); the FP8 path itself (activations quantized as vLLM does) is
 * compared teacher-forced with "fp8_activations" within its recorded bounds (FP8 rounding makes a last-bit
 * difference a jump: tools/make_quant_fixtures.py measures how large), and must give the same tokens and
 * logprobs in every layout.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/fixtures.h"
#include "test.h"
#include "vllm.h"

#define NEAR_TIE 0.02
#define LOGPROB_TOL 1e-3
#define ON_OFF_TOL 1e-4

#define TIGHT (-1) /* num_kv_blocks: the fewest that make the generation preempt */

typedef struct layout {
    const char *name;
    int block_size, max_num_batched_tokens, num_kv_blocks, max_num_seqs, threads, max_model_len;
    bool no_prefix_caching;
} layout;

static const layout LAYOUTS[] = {
    {"one batch", 16, 8192, 0, 256, 1, 128, false},
    {"chunked prefill, block 7, 3 threads", 7, 9, 0, 256, 3, 128, false},
    {"block 1, 2 seqs at a time", 1, 8192, 0, 2, 2, 128, false},
    /* TIGHT: the smallest KV cache, from the fewest blocks the engine accepts for one 64-token
     * sequence up, under which the generation preempts (24 blocks of the one-group fixtures; how
     * many with KV cache groups depends on the windows, as sliding-window layers free blocks) */
    {"tight KV cache (preemption)", 4, 8192, TIGHT, 256, 1, 64, false},
    {"one sequence, 5-token chunks (prefill-only steps)", 16, 5, 0, 1, 2, 128, false},
    {"prefix caching off", 4, 8192, 0, 256, 1, 128, true},
    /* block 2 < sliding_window 8 of the Gemma fixtures: their sliding-window groups free the
     * blocks that leave the window during the generation (and serve prefix hits from the rest) */
    {"block 2, 6-token chunks (sliding-window blocks freed)", 2, 6, 0, 256, 2, 128, false},
    {"block 2, sliding-window blocks freed, prefix caching off", 2, 8192, 0, 256, 1, 128, true},
};

/* The fewest KV blocks an engine with options o accepts (it must hold one
 * sequence of max_model_len in every KV cache group), by bisection. */
static int fewest_kv_blocks(const char *dir, vllm_engine_options o) {
    int lo = 1, hi = 4096;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        o.num_kv_blocks = mid;
        vllm_engine *e = NULL;
        if (vllm_engine_create(dir, &o, &e) == VLLM_OK) hi = mid;
        else lo = mid + 1;
        vllm_engine_free(e);
    }
    return lo;
}

/* One completion c of recorded prompt p (index i) against the recording: the same tokens up to the first
 * recorded near-tie, logprobs within 1e-3. Returns the tokens compared (the near-tie's included). */
static size_t check_recorded(const char *dir, const char *what, json_t *p, size_t i, const vllm_completion *c,
                             int max_new) {
    json_t *toks = json_object_get(p, "token_ids"), *lps = json_object_get(p, "logprobs"),
           *gaps = json_object_get(p, "top2_gap");
    size_t nt = json_array_size(toks);
    CHECK(c->num_tokens == (size_t)max_new);
    for (size_t j = 0; j < nt && j < c->num_tokens; j++) {
        int want = (int)json_integer_value(json_array_get(toks, j));
        double want_lp = json_number_value(json_array_get(lps, j));
        CHECK_MSG(c->token_ids[j] == want, "%s [%s] prompt %zu token %zu: got %d want %d", dir, what, i, j,
                  c->token_ids[j], want);
        if (c->token_ids[j] != want) return j;
        CHECK_MSG(fabs(c->logprobs[j] - want_lp) <= LOGPROB_TOL, "%s [%s] prompt %zu token %zu: logprob %.6f want %.6f",
                  dir, what, i, j, (double)c->logprobs[j], want_lp);
        if (json_number_value(json_array_get(gaps, j)) < NEAR_TIE) return j + 1; /* near-tie: stop comparing */
    }
    return nt < c->num_tokens ? nt : c->num_tokens;
}

/* The first n tokens of a (prefix caching on) and b (off) agree: ids equal, logprobs within 1e-4. */
static void check_on_off(const char *dir, const char *what, size_t i, const vllm_completion *a,
                         const vllm_completion *b, size_t n) {
    for (size_t j = 0; j < n && j < a->num_tokens && j < b->num_tokens; j++) {
        CHECK_MSG(a->token_ids[j] == b->token_ids[j], "%s [%s] prompt %zu token %zu: %d with prefix caching, %d without",
                  dir, what, i, j, a->token_ids[j], b->token_ids[j]);
        if (a->token_ids[j] != b->token_ids[j]) return;
        CHECK_MSG(fabs(a->logprobs[j] - b->logprobs[j]) <= ON_OFF_TOL,
                  "%s [%s] prompt %zu token %zu: logprob %.7f with prefix caching, %.7f without", dir, what, i, j,
                  (double)a->logprobs[j], (double)b->logprobs[j]);
    }
}

/* Prefix caching over two rounds (see the top): round 1 the recorded prompts, round 2 the same prompts
 * and two variants of the longest one (its first 26 tokens; its first 36 and 4 others), against the
 * recording and against an engine with prefix caching off (which runs round 2's prompts). */
static void run_rounds(const char *dir, json_t *prompts, const fixture_prompts *fp) {
    enum { NV = 2 };
    const char *what = "prefix caching, block 4, two rounds";
    size_t np = fp->n, longest = 0;
    for (size_t i = 1; i < np; i++)
        if (fp->ps[i].num_token_ids > fp->ps[longest].num_token_ids) longest = i;
    const vllm_prompt *lp = &fp->ps[longest];
    CHECK_MSG(lp->num_token_ids == 40, "%s: the longest prompt has %zu tokens, the variants expect 40", dir,
              lp->num_token_ids);
    if (lp->num_token_ids != 40) return;
    /* round 2's prompts: the recorded ones, then the variants */
    vllm_prompt *r2 = calloc(np + NV, sizeof *r2);
    int32_t var[40];
    memcpy(var, lp->token_ids, sizeof var);
    for (int j = 36; j < 40; j++) var[j] = (var[j] + 1 + j) % 97; /* ids below every fixture's vocabulary */
    memcpy(r2, fp->ps, np * sizeof *r2);
    r2[np] = (vllm_prompt){.token_ids = lp->token_ids, .num_token_ids = 26};
    r2[np + 1] = (vllm_prompt){.token_ids = var, .num_token_ids = 40};
    vllm_sampling_params sp = vllm_sampling_default_params();
    sp.temperature = 0;
    sp.ignore_eos = true;
    sp.max_tokens = fp->max_new;
    vllm_engine_options o = vllm_engine_default_options();
    o.block_size = 4;
    o.num_threads = 2;
    o.max_model_len = 128;
    vllm_completion *off = NULL, *c1 = NULL, *c2 = NULL;
    vllm_engine *e = NULL;
    /* prefix caching off: round 2's prompts */
    o.enable_prefix_caching = false;
    vllm_status st = vllm_engine_create(dir, &o, &e);
    if (st == VLLM_OK) st = vllm_generate(e, r2, np + NV, &sp, false, &off, NULL);
    CHECK_MSG(st == VLLM_OK, "%s [%s, off]: %s", dir, what, vllm_last_error());
    vllm_engine_free(e);
    e = NULL;
    /* prefix caching on: both rounds on one engine */
    o.enable_prefix_caching = true;
    if (st == VLLM_OK) st = vllm_engine_create(dir, &o, &e);
    if (st == VLLM_OK) st = vllm_generate(e, fp->ps, np, &sp, false, &c1, NULL);
    vllm_engine_stats s1 = {0}, s2 = {0};
    if (st == VLLM_OK) vllm_engine_get_stats(e, &s1);
    if (st == VLLM_OK) st = vllm_generate(e, r2, np + NV, &sp, false, &c2, NULL);
    CHECK_MSG(st == VLLM_OK, "%s [%s]: %s", dir, what, vllm_last_error());
    if (st == VLLM_OK) {
        vllm_engine_get_stats(e, &s2);
        for (size_t i = 0; i < np; i++) {
            json_t *p = json_array_get(prompts, i);
            size_t n1 = check_recorded(dir, "prefix caching, round 1", p, i, &c1[i], fp->max_new);
            size_t n2 = check_recorded(dir, "prefix caching, round 2", p, i, &c2[i], fp->max_new);
            check_on_off(dir, "round 1", i, &c1[i], &off[i], n1);
            check_on_off(dir, "round 2", i, &c2[i], &off[i], n2);
        }
        for (size_t i = np; i < np + NV; i++) check_on_off(dir, "round 2, variants", i, &c2[i], &off[i], c2[i].num_tokens);
        /* round 2 is served from round 1's blocks (and checkpoints): the 17- and 40-token prompts and
         * the variants hit */
        uint64_t hits = s2.prefix_cache_hits - s1.prefix_cache_hits;
        CHECK_MSG(hits >= 4 * 4, "%s [%s]: round 2 hit %llu tokens", dir, what, (unsigned long long)hits);
    }
    if (c1) vllm_completions_free(c1, np);
    if (c2) vllm_completions_free(c2, np + NV);
    if (off) vllm_completions_free(off, np + NV);
    vllm_engine_free(e);
    free(r2);
}

/* Hybrid models with BF16 state pools (--mamba-cache-dtype bfloat16, a GPU's "auto"; F32 is the CPU's): the
 * states are rounded at the end of every step, which on these tiny random models moves logprobs by up to
 * 0.25 nats (measured 2026-12-02, mostly the conv state: the CPU's f32 conv inputs rounded to BF16; on a GPU
 * they are BF16 activations already), so the recorded tokens must hold up to the first gap below BF16_GAP
 * and the logprobs within BF16_TOL (or the fixture's own bf16 drift when larger: the MoE hybrids); a state
 * dtype the ops do not store is refused. */
#define BF16_GAP 0.5
#define BF16_TOL 0.3
static void run_state_dtypes(const char *dir, json_t *expected, json_t *prompts, const fixture_prompts *fp) {
    /* a fixture whose own transformers bf16 run drifts further (the MoE hybrids' routing) widens both */
    json_t *drift = json_object_get(json_object_get(expected, "tolerance"), "bf16_max");
    const double d = json_is_number(drift) ? json_number_value(drift) : 0.0;
    const double gap_bound = d > BF16_GAP ? d : BF16_GAP, tol = d > BF16_TOL ? d : BF16_TOL;
    vllm_engine_options o = vllm_engine_default_options();
    o.max_model_len = 128;
    o.num_threads = 2;
    o.mamba_cache_dtype = "bfloat16";
    vllm_engine *e = NULL;
    vllm_status st = vllm_engine_create(dir, &o, &e);
    CHECK_MSG(st == VLLM_OK, "%s [bf16 states]: %s", dir, vllm_last_error());
    if (st != VLLM_OK) return;
    vllm_engine_info info;
    vllm_engine_get_info(e, &info);
    const bool hybrid = strstr(info.architecture, "Qwen3Next") || strstr(info.architecture, "Qwen3_5");
    if (hybrid) {
        vllm_sampling_params sp = vllm_sampling_default_params();
        sp.temperature = 0;
        sp.ignore_eos = true;
        sp.max_tokens = fp->max_new;
        vllm_completion *c = NULL;
        vllm_generate_stats stats;
        size_t np = json_array_size(prompts);
        st = vllm_generate(e, fp->ps, np, &sp, false, &c, &stats);
        CHECK_MSG(st == VLLM_OK, "%s [bf16 states]: %s", dir, vllm_last_error());
        for (size_t i = 0; st == VLLM_OK && i < np; i++) {
            json_t *p = json_array_get(prompts, i);
            json_t *toks = json_object_get(p, "token_ids"), *lps = json_object_get(p, "logprobs"),
                   *gaps = json_object_get(p, "top2_gap");
            for (size_t j = 0; j < json_array_size(toks) && j < c[i].num_tokens; j++) {
                if (json_number_value(json_array_get(gaps, j)) < gap_bound) break; /* token j may flip */
                CHECK_MSG(c[i].token_ids[j] == (int)json_integer_value(json_array_get(toks, j)),
                          "%s [bf16 states] prompt %zu token %zu: got %d", dir, i, j, c[i].token_ids[j]);
                CHECK_MSG(fabs(c[i].logprobs[j] - json_number_value(json_array_get(lps, j))) <= tol,
                          "%s [bf16 states] prompt %zu token %zu: logprob %.5f want %.5f", dir, i, j,
                          (double)c[i].logprobs[j], json_number_value(json_array_get(lps, j)));
                if (c[i].token_ids[j] != (int)json_integer_value(json_array_get(toks, j))) break;
            }
        }
        if (st == VLLM_OK) vllm_completions_free(c, np);
    }
    vllm_engine_free(e);
    if (!hybrid) return;
    o.mamba_ssm_cache_dtype = "int8";
    e = NULL;
    st = vllm_engine_create(dir, &o, &e);
    CHECK_MSG(st == VLLM_ERR_INVALID_ARG && strstr(vllm_last_error(), "mamba_"), "%s: state dtype int8: %d %s", dir,
              st, vllm_last_error());
    vllm_engine_free(e);
}

static void run_case(const char *dir, json_t *expected) {
    json_t *prompts = json_object_get(expected, "prompts");
    size_t np = json_array_size(prompts);
    CHECK_MSG(np > 0, "%s: no prompts", dir);
    if (!np) return;
    fixture_prompts fp;
    fixture_prompts_load(prompts, &fp);
    vllm_prompt *ps = fp.ps;
    const int max_new = fp.max_new;
    for (size_t L = 0; L < sizeof LAYOUTS / sizeof LAYOUTS[0]; L++) {
        const layout *lay = &LAYOUTS[L];
        vllm_engine_options o = vllm_engine_default_options();
        o.block_size = lay->block_size;
        o.max_num_batched_tokens = lay->max_num_batched_tokens;
        o.num_kv_blocks = lay->num_kv_blocks;
        o.max_num_seqs = lay->max_num_seqs;
        o.num_threads = lay->threads;
        o.max_model_len = lay->max_model_len;
        o.enable_prefix_caching = !lay->no_prefix_caching;
        bool tight = lay->num_kv_blocks == TIGHT;
        int fewest = tight ? fewest_kv_blocks(dir, o) : 0;
        vllm_engine *e = NULL;
        vllm_completion *c = NULL;
        vllm_generate_stats stats;
        vllm_sampling_params sp = vllm_sampling_default_params();
        sp.temperature = 0;
        sp.ignore_eos = true;
        sp.max_tokens = max_new;
        vllm_status st;
        for (int extra = 0;; extra++) { /* tight: grow the cache until the generation preempts */
            if (tight) o.num_kv_blocks = fewest + extra;
            st = vllm_engine_create(dir, &o, &e);
            if (st != VLLM_OK) break;
            st = vllm_generate(e, ps, np, &sp, false, &c, &stats);
            if (!tight || st != VLLM_OK || stats.preemptions > 0 || extra == 64) break;
            vllm_completions_free(c, np);
            vllm_engine_free(e);
            c = NULL;
            e = NULL;
        }
        CHECK_MSG(e != NULL, "%s: %s", dir, vllm_last_error());
        if (!e) continue;
        if (tight) CHECK_MSG(stats.preemptions > 0, "%s [%s]: no preemption", dir, lay->name);
        CHECK_MSG(st == VLLM_OK, "%s [%s]: %s", dir, lay->name, vllm_last_error());
        for (size_t i = 0; st == VLLM_OK && i < np; i++)
            check_recorded(dir, lay->name, json_array_get(prompts, i), i, &c[i], max_new);
        vllm_completions_free(c, np);
        vllm_engine_free(e);
    }
    run_rounds(dir, prompts, &fp);
    run_state_dtypes(dir, expected, prompts, &fp);
    fixture_prompts_free(&fp);
}

/* The FP8 path itself (activations quantized per token and 128, tensor/fp8.h; or the FP8 KV cache, kv_cache_dtype
 * "fp8": each key and value stored as E4M3 once, read the same way by every query) in the layouts: each token's
 * arithmetic depends on nothing else, so every layout gives the one-batch run's tokens and logprobs exactly. */
static void run_fp8_layouts(const char *dir, json_t *prompts, const char *kv_cache_dtype) {
    fixture_prompts fp;
    fixture_prompts_load(prompts, &fp);
    vllm_completion *base = NULL;
    for (size_t L = 0; L < sizeof LAYOUTS / sizeof LAYOUTS[0]; L++) {
        const layout *lay = &LAYOUTS[L];
        if (lay->num_kv_blocks == TIGHT) continue;
        vllm_engine_options o = vllm_engine_default_options();
        o.block_size = lay->block_size;
        o.max_num_batched_tokens = lay->max_num_batched_tokens;
        o.max_num_seqs = lay->max_num_seqs;
        o.num_threads = lay->threads;
        o.max_model_len = lay->max_model_len;
        o.enable_prefix_caching = !lay->no_prefix_caching;
        o.kv_cache_dtype = kv_cache_dtype;
        vllm_engine *e = NULL;
        vllm_completion *c = NULL;
        vllm_sampling_params sp = vllm_sampling_default_params();
        sp.temperature = 0;
        sp.ignore_eos = true;
        sp.max_tokens = fp.max_new;
        vllm_status st = vllm_engine_create(dir, &o, &e);
        if (st == VLLM_OK) st = vllm_generate(e, fp.ps, fp.n, &sp, false, &c, NULL);
        CHECK_MSG(st == VLLM_OK, "%s [fp8, %s]: %s", dir, lay->name, vllm_last_error());
        for (size_t i = 0; st == VLLM_OK && base && i < fp.n; i++) {
            CHECK_MSG(c[i].num_tokens == base[i].num_tokens &&
                          !memcmp(c[i].token_ids, base[i].token_ids, c[i].num_tokens * sizeof *c[i].token_ids),
                      "%s [fp8, %s] prompt %zu: other tokens than one batch's", dir, lay->name, i);
            for (size_t j = 0; j < c[i].num_tokens && j < base[i].num_tokens; j++)
                CHECK_MSG(fabsf(c[i].logprobs[j] - base[i].logprobs[j]) <= 1e-6f,
                          "%s [fp8, %s] prompt %zu token %zu: logprob %.7f, one batch %.7f", dir, lay->name, i, j,
                          (double)c[i].logprobs[j], (double)base[i].logprobs[j]);
        }
        if (st == VLLM_OK && !base) base = c;
        else vllm_completions_free(c, fp.n);
        vllm_engine_free(e);
    }
    if (base) vllm_completions_free(base, fp.n);
    fixture_prompts_free(&fp);
}

int main(int argc, char **argv) {
    /* argv[1]: another folder of fixtures (new ones, before they are committed) */
    const char *root = argc > 1 ? argv[1] : VLLM_SOURCE_DIR "/tests/fixtures/models";
    fixture_names names;
    CHECK_MSG(fixture_list(root, &names), "%s missing", root);
    for (int k = 0; k < names.n; k++) {
        char dir[1024];
        json_error_t err;
        json_t *exp = fixture_load(root, names.name[k], dir, sizeof dir, &err);
        CHECK_MSG(exp != NULL, "%s/%s: %s", root, names.name[k], err.text);
        if (!exp) continue;
        fprintf(stderr, "case %s\n", names.name[k]);
        json_t *fp8 = json_object_get(exp, "fp8_activations");
        if (json_object_get(exp, "quantization")) /* the recording is of the dequantized weights (see the top) */
            setenv("VLLM_FP8_DEQUANTIZE", "1", 1);
        run_case(dir, exp);
        unsetenv("VLLM_FP8_DEQUANTIZE");
        if (fp8) {
            json_t *tol = json_object_get(fp8, "tolerance");
            fixture_teacher_forced(names.name[k], dir, json_object_get(fp8, "prompts"), "cpu",
                                   json_number_value(json_object_get(tol, "tf_max")),
                                   json_number_value(json_object_get(tol, "tf_mean")), "fp8 activations, teacher-forced");
            run_fp8_layouts(dir, json_object_get(fp8, "prompts"), NULL);
        }
        json_t *kv = json_object_get(exp, "kv_fp8"); /* the FP8 KV cache's reference (make_quant_fixtures.py) */
        if (kv) {
            json_t *tol = json_object_get(kv, "tolerance");
            fixture_kv_cache_dtype = "fp8";
            fixture_teacher_forced(names.name[k], dir, json_object_get(kv, "prompts"), "cpu",
                                   json_number_value(json_object_get(tol, "tf_max")),
                                   json_number_value(json_object_get(tol, "tf_mean")), "FP8 KV cache, teacher-forced");
            fixture_kv_cache_dtype = NULL;
            run_fp8_layouts(dir, json_object_get(kv, "prompts"), "fp8");
        }
        json_decref(exp);
    }
    CHECK_MSG(names.n >= (argc > 1 ? 1 : 5), "expected at least 5 fixture models, found %d", names.n);
    TEST_END();
}
