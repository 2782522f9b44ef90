/*
 * test_cuda_parity.c: the model fixtures of tests/fixtures/models/ (tiny
 * random models, greedy continuations recorded with transformers in f32 by
 * tools/make_fixtures.py) on the CUDA backend (BF16 activations and KV
 * cache, GPU sampling), two ways:
 *   - teacher-forced: each prompt followed by its recorded continuation is
 *     run as one prompt with prompt_logprobs, so every recorded token's
 *     logprob is compared at the same context: max |d| <= TF_MAX and
 *     mean |d| <= TF_MEAN;
 *   - greedy generation under three engine layouts (one batch; chunked
 *     prefill with block size 7; a KV cache small enough to force
 *     preemption): identical tokens up to the first recorded near-tie
 *     (top1 - top2 < CUDA_NEAR_TIE nats) and logprobs within TF_MAX.
 * The tolerances are BF16's, not the CPU test's: transformers itself run in
 * bf16 on these fixtures (tools/device/check.sh measures it) differs from
 * its f32 reference by up to 1.04 nats (mean 0.03 to 0.09 per fixture) and
 * flips 1 to 3 greedy tokens in 48; this backend measured max 0.12 to 0.51,
 * mean 0.023 to 0.047 (H200, 2026-11-30). So issue 6's "logprobs within
 * 0.05" is held as the mean over each fixture's tokens, and each single
 * token within TF_MAX (below transformers' own bf16 drift); on the
 * Qwen3-0.6B-shaped model (check.sh) every token is within 0.05. Prints
 * one PARITY line per case and check.
 *
 * A fixture's expected.json may carry its own teacher-forced bounds
 * ("tolerance", from transformers' bf16 drift). An argument names another
 * fixture folder (tools/device/check.sh: a Qwen3-0.6B-shaped model).
 *
 * Exits 77 ("no CUDA device: skipped") without a GPU or a CUDA build.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/backend.h"
#include "model/fixtures.h"
#include "test.h"
#include "vllm.h"

#define CUDA_NEAR_TIE 0.5   /* nats between the top two tokens below which a greedy token may flip */
#define TF_MAX 0.6          /* largest |logprob - reference| (transformers' own bf16: up to 1.04) */
#define TF_MEAN 0.05        /* mean |logprob - reference| over a fixture's 48 tokens (issue 6: 0.05) */

typedef struct layout {
    const char *name;
    int block_size, max_num_batched_tokens, num_kv_blocks, max_num_seqs, max_model_len;
} layout;

static const layout LAYOUTS[] = {
    {"one batch", 16, 8192, 0, 256, 128},
    {"chunked prefill, block 7", 7, 9, 0, 256, 128},
    {"tight KV cache (preemption)", 4, 8192, 24, 256, 64},
};

/* Every recorded token's logprob given the recorded context, through
 * prompt_logprobs on prompt + continuation. */
/* The teacher-forced bounds: the fixture's own ("tolerance": tf_max, tf_mean,
 * set from transformers' bf16 drift by tools/make_fixtures.py) or TF_MAX / TF_MEAN. */
static void tolerances(json_t *expected, double *tf_max, double *tf_mean) {
    json_t *t = json_object_get(expected, "tolerance");
    json_t *mx = json_object_get(t, "tf_max"), *mn = json_object_get(t, "tf_mean");
    *tf_max = json_is_number(mx) ? json_number_value(mx) : TF_MAX;
    *tf_mean = json_is_number(mn) ? json_number_value(mn) : TF_MEAN;
}

static void teacher_forced(const char *name, const char *dir, json_t *expected) {
    json_t *prompts = json_object_get(expected, "prompts");
    double tf_max, tf_mean;
    tolerances(expected, &tf_max, &tf_mean);
    size_t np = json_array_size(prompts);
    int fails_before = t_failures;
    vllm_engine_options o = vllm_engine_default_options();
    o.device = "cuda";
    o.max_model_len = 128;
    vllm_engine *e = NULL;
    vllm_status st = vllm_engine_create(dir, &o, &e);
    CHECK_MSG(st == VLLM_OK, "%s [teacher-forced]: %s", dir, vllm_last_error());
    double worst = 0, sum = 0;
    int n = 0;
    for (size_t i = 0; st == VLLM_OK && i < np; i++) {
        json_t *p = json_array_get(prompts, i);
        json_t *pids = json_object_get(p, "prompt_token_ids"), *toks = json_object_get(p, "token_ids"),
               *lps = json_object_get(p, "logprobs");
        size_t P = json_array_size(pids), nt = json_array_size(toks);
        int32_t *ids = malloc((P + nt + 1) * sizeof *ids);
        for (size_t j = 0; j < P; j++) ids[j] = (int32_t)json_integer_value(json_array_get(pids, j));
        for (size_t j = 0; j < nt; j++) ids[P + j] = (int32_t)json_integer_value(json_array_get(toks, j));
        vllm_prompt pr = {.token_ids = ids, .num_token_ids = P + nt};
        vllm_sampling_params sp = vllm_sampling_default_params();
        sp.temperature = 0;
        sp.max_tokens = 1;
        sp.prompt_logprobs = 0;
        vllm_completion *c = NULL;
        st = vllm_generate(e, &pr, 1, &sp, false, &c, NULL);
        CHECK_MSG(st == VLLM_OK && c && c[0].prompt_logprobs, "%s [teacher-forced] prompt %zu: %s", name, i,
                  vllm_last_error());
        if (st == VLLM_OK && c && c[0].prompt_logprobs) {
            for (size_t j = 0; j < nt; j++) {
                double got = c[0].prompt_logprobs[P + j], want = json_number_value(json_array_get(lps, j));
                double d = fabs(got - want);
                if (!(d <= worst)) worst = d; /* NaN sticks */
                sum += d;
                n++;
                CHECK_MSG(d <= tf_max, "%s [teacher-forced] prompt %zu token %zu: logprob %.5f want %.5f", name, i,
                          j, got, want);
            }
        }
        vllm_completions_free(c, 1);
        free(ids);
    }
    vllm_engine_free(e);
    CHECK_MSG(n > 0 && sum / n <= tf_mean, "%s [teacher-forced]: mean |d| %.4f over %d logprobs", name,
              n ? sum / n : 0.0, n);
    printf("PARITY %-18s %-30s %s  %d logprobs, max|d| %.4f, mean|d| %.4f (bounds %.3f / %.3f)\n", name,
           "teacher-forced", t_failures == fails_before ? "pass" : "FAIL", n, worst, n ? sum / n : 0.0, tf_max,
           tf_mean);
    fflush(stdout);
}

static void run_case(const char *name, const char *dir, json_t *expected) {
    json_t *prompts = json_object_get(expected, "prompts");
    double tf_max, tf_mean;
    tolerances(expected, &tf_max, &tf_mean);
    size_t np = json_array_size(prompts);
    CHECK_MSG(np > 0, "%s: no prompts", dir);
    if (!np) return;
    fixture_prompts fp;
    fixture_prompts_load(prompts, &fp);
    vllm_prompt *ps = fp.ps;
    const int max_new = fp.max_new;
    for (size_t L = 0; L < sizeof LAYOUTS / sizeof LAYOUTS[0]; L++) {
        const layout *lay = &LAYOUTS[L];
        int fails_before = t_failures;
        vllm_engine_options o = vllm_engine_default_options();
        o.device = "cuda";
        o.block_size = lay->block_size;
        o.max_num_batched_tokens = lay->max_num_batched_tokens;
        o.num_kv_blocks = lay->num_kv_blocks;
        o.max_num_seqs = lay->max_num_seqs;
        o.max_model_len = lay->max_model_len;
        vllm_engine *e = NULL;
        vllm_status st = vllm_engine_create(dir, &o, &e);
        CHECK_MSG(st == VLLM_OK, "%s [%s]: %s", dir, lay->name, vllm_last_error());
        int compared = 0, total = 0;
        double max_dlp = 0;
        if (st == VLLM_OK) {
            vllm_sampling_params sp = vllm_sampling_default_params();
            sp.temperature = 0;
            sp.ignore_eos = true;
            sp.max_tokens = max_new;
            vllm_completion *c = NULL;
            vllm_generate_stats stats;
            st = vllm_generate(e, ps, np, &sp, false, &c, &stats);
            CHECK_MSG(st == VLLM_OK, "%s [%s]: %s", dir, lay->name, vllm_last_error());
            if (st == VLLM_OK && lay->num_kv_blocks)
                CHECK_MSG(stats.preemptions > 0, "%s [%s]: no preemption", dir, lay->name);
            for (size_t i = 0; st == VLLM_OK && i < np; i++) {
                json_t *p = json_array_get(prompts, i);
                json_t *toks = json_object_get(p, "token_ids"), *lps = json_object_get(p, "logprobs"),
                       *gaps = json_object_get(p, "top2_gap");
                size_t nt = json_array_size(toks);
                total += (int)nt;
                CHECK(c[i].num_tokens == (size_t)max_new);
                for (size_t j = 0; j < nt && j < c[i].num_tokens; j++) {
                    /* a near-tie may flip under BF16 rounding: compare no further */
                    if (json_number_value(json_array_get(gaps, j)) < CUDA_NEAR_TIE) break;
                    int want = (int)json_integer_value(json_array_get(toks, j));
                    double want_lp = json_number_value(json_array_get(lps, j));
                    CHECK_MSG(c[i].token_ids[j] == want, "%s [%s] prompt %zu token %zu: got %d want %d", name,
                              lay->name, i, j, c[i].token_ids[j], want);
                    if (c[i].token_ids[j] != want) break;
                    double d = fabs(c[i].logprobs[j] - want_lp);
                    if (!(d <= max_dlp)) max_dlp = d;
                    CHECK_MSG(d <= tf_max, "%s [%s] prompt %zu token %zu: logprob %.5f want %.5f", name,
                              lay->name, i, j, (double)c[i].logprobs[j], want_lp);
                    compared++;
                }
            }
            vllm_completions_free(c, np);
            vllm_engine_free(e);
        }
        printf("PARITY %-18s %-30s %s  tokens %d/%d  max|dlogprob| %.4f\n", name, lay->name,
               t_failures == fails_before ? "pass" : "FAIL", compared, total, max_dlp);
        fflush(stdout);
    }
    fixture_prompts_free(&fp);
}

int main(int argc, char **argv) {
    backend *probe = NULL;
    if (backend_create("cuda", NULL, &probe) != VLLM_OK) {
        printf("no CUDA device: skipped (%s)\n", vllm_last_error());
        return 77;
    }
    backend_free(probe);
    /* argv[1]: another folder of fixtures (check.sh's Qwen3-0.6B-shaped one) */
    const bool own = argc < 2;
    const char *root = own ? VLLM_SOURCE_DIR "/tests/fixtures/models" : argv[1];
    fixture_names names;
    CHECK_MSG(fixture_list(root, &names), "%s missing", root);
    for (int k = 0; k < names.n; k++) {
        char dir[1024];
        json_error_t err;
        json_t *exp = fixture_load(root, names.name[k], dir, sizeof dir, &err);
        CHECK_MSG(exp != NULL, "%s/%s: %s", root, names.name[k], err.text);
        if (!exp) continue;
        teacher_forced(names.name[k], dir, exp);
        run_case(names.name[k], dir, exp);
        json_decref(exp);
    }
    CHECK_MSG(names.n >= (own ? 5 : 1), "expected at least %d fixture models in %s, found %d", own ? 5 : 1, root,
              names.n);
    TEST_END();
}
