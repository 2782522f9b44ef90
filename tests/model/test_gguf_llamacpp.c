/*
 * test_gguf_llamacpp.c: GGUF files made by llama.cpp itself (tests/fixtures/gguf/llama_quant, from
 * tools/make_gguf_fixtures.py: a tiny random Llama converted by convert_hf_to_gguf.py and quantized by
 * llama-quantize of b10095 to Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K_M, Q4_K_M, Q5_K_M, Q6_K, IQ4_NL and
 * IQ4_XS; mixes as llama-quantize makes them, e.g. Q6_K output and Q3_K / Q4_K layers in Q2_K's).
 *
 *  - per type: two rows of a tensor of every ggml type in the file, dequantized here (gq_dequantize_row)
 *    against llama.cpp's gguf-py (gguf.quants.dequantize) within 1e-6 relative;
 *  - the engine on each file (its tokenizer and config from the metadata) against transformers in float32
 *    on the same dequantized weights:
 *      with VLLM_GGUF_DEQUANTIZE=1 (the blocks dequantized to F32 at load, the float path): greedy tokens
 *      equal up to the reference's first near-tie (top-2 gap below GAP_EXACT), logprobs within 1e-3;
 *      as the CPU runs them (on their blocks, activations quantized to Q8_0 / Q8_1 / Q8_K per block as
 *      llama.cpp's CPU backend does): logprobs within LP_TOL while the tokens agree, and at least a
 *      quarter of the tokens compared before the first disagreement. The fixture model is random and
 *      sensitive (2 layers of N(0, 0.15) weights at hidden 256, logits of std ~8): the 8-bit activations
 *      alone move its logprobs by 0.07-0.45 (measured here) and can flip a token with a top-2 gap of 0.5.
 * With VLLM_TEST_GGUF_DEVICE=cuda the engines run on the GPU (BF16 activations): the float path within 0.05 (the
 * CUDA parity tests' bf16 drift) over at least half the tokens, the blocks as on the CPU.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixtures.h"
#include "loader/gguf.h"
#include "tensor/ggml_quant.h"
#include "test.h"
#include "vllm.h"

#ifndef VLLM_SOURCE_DIR
#define VLLM_SOURCE_DIR "."
#endif

#define DIR VLLM_SOURCE_DIR "/tests/fixtures/gguf/llama_quant"
#define GAP_EXACT 1e-3 /* the float path: compare tokens while the reference's top-2 gap is at least this */
#define EXACT_TOL 1e-3 /* the float path: |logprob - reference| */
#define LP_TOL 1.0     /* on the blocks: |logprob - reference| while the tokens agree (0.26-0.59 measured) */

static const char *TYPES[] = {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS"};

static void check_dequant(const char *type, const gguf_file *f, json_t *dq) {
    const char *tname;
    json_t *v;
    json_object_foreach(dq, tname, v) {
        const char *name = json_string_value(json_object_get(v, "tensor"));
        const gguf_tensor_info *t = name ? gguf_find_tensor(f, name) : NULL;
        CHECK_MSG(t != NULL, "%s: tensor %s missing", type, name ? name : "?");
        if (!t || t->n_dims != 2) continue;
        const int64_t in = t->ne[0];
        const size_t rb = t->nbytes / (size_t)t->ne[1];
        float *row = malloc((size_t)in * sizeof *row);
        for (int k = 0; k < 2; k++) {
            const int64_t r = json_integer_value(json_array_get(json_object_get(v, "rows"), (size_t)k));
            json_t *want = json_array_get(json_object_get(v, "values"), (size_t)k);
            CHECK(json_array_size(want) == (size_t)in);
            if (t->type == GGML_TYPE_F32) memcpy(row, (const char *)t->data + (size_t)r * rb, (size_t)in * 4);
            else CHECK_MSG(gq_dequantize_row((ggml_type)t->type, (const char *)t->data + (size_t)r * rb, row, in),
                           "%s: %s (%s) does not dequantize", type, name, tname);
            double maxe = 0;
            for (int64_t i = 0; i < in && i < (int64_t)json_array_size(want); i++) {
                const double w = json_number_value(json_array_get(want, (size_t)i));
                const double e = fabs(row[i] - w) / (1e-6 + fabs(w));
                if (e > maxe) maxe = e;
            }
            CHECK_MSG(maxe <= 1e-6, "%s: %s (%s) row %lld differs from gguf-py by %g relative", type, name, tname,
                      (long long)r, maxe);
        }
        free(row);
    }
}

static void run_type(const char *type) {
    /* VLLM_TEST_GGUF_DEVICE=cuda: the engine on the GPU (tools/device/check_gguf.sh) */
    const char *dev = getenv("VLLM_TEST_GGUF_DEVICE"), *gpu = dev && *dev && strcmp(dev, "cpu") ? dev : NULL;
    char path[512], jpath[512];
    snprintf(path, sizeof path, "%s/%s.gguf", DIR, type);
    snprintf(jpath, sizeof jpath, "%s/%s.json", DIR, type);
    json_error_t err;
    json_t *exp = json_load_file(jpath, 0, &err);
    CHECK_MSG(exp != NULL, "%s: %s", jpath, err.text);
    if (!exp) return;
    gguf_file *f = NULL;
    CHECK_MSG(gguf_open(path, &f) == VLLM_OK, "%s: %s", path, vllm_last_error());
    if (f) check_dequant(type, f, json_object_get(exp, "dequant"));
    gguf_close(f);

    fixture_prompts fp;
    json_t *prompts = json_object_get(exp, "prompts");
    fixture_prompts_load(prompts, &fp);
    for (int native = 0; native < 2; native++) {
        if (!native) setenv("VLLM_GGUF_DEQUANTIZE", "1", 1);
        vllm_engine_options o = vllm_engine_default_options();
        o.num_threads = 2;
        o.max_model_len = 128;
        o.device = gpu ? gpu : "cpu";
        if (gpu) o.gpu_memory_utilization = 0.2f;
        vllm_engine *e = NULL;
        CHECK_MSG(vllm_engine_create(path, &o, &e) == VLLM_OK, "%s: %s", path, vllm_last_error());
        unsetenv("VLLM_GGUF_DEQUANTIZE");
        vllm_sampling_params sp = vllm_sampling_default_params();
        sp.temperature = 0;
        sp.ignore_eos = true;
        sp.max_tokens = fp.max_new;
        vllm_completion *c = NULL;
        if (e) CHECK(vllm_generate(e, fp.ps, fp.n, &sp, false, &c, NULL) == VLLM_OK);
        size_t compared = 0, total = 0;
        double maxd = 0;
        for (size_t i = 0; c && i < fp.n; i++) {
            json_t *p = json_array_get(prompts, i);
            json_t *toks = json_object_get(p, "token_ids"), *lps = json_object_get(p, "logprobs"),
                   *gaps = json_object_get(p, "top2_gap");
            total += json_array_size(toks);
            for (size_t j = 0; j < json_array_size(toks) && j < c[i].num_tokens; j++) {
                const int want = (int)json_integer_value(json_array_get(toks, j));
                if (!native && !gpu) {
                    CHECK_MSG(c[i].token_ids[j] == want, "%s (dequantized) prompt %zu token %zu: %d, reference %d", type,
                              i, j, c[i].token_ids[j], want);
                }
                if (c[i].token_ids[j] != want) break;
                const double d = fabs(c[i].logprobs[j] - json_number_value(json_array_get(lps, j)));
                if (d > maxd) maxd = d;
                compared++;
                if (!native && json_number_value(json_array_get(gaps, j)) < GAP_EXACT) break; /* near-tie */
            }
        }
        printf("GGUF llama.cpp %-7s %-11s %zu of %zu tokens compared, max |dlogprob| %.4f\n", type,
               native ? "blocks" : "dequantized", compared, total, maxd);
        /* on a GPU (BF16 activations) the float path is held to the CUDA parity tests' bf16 drift (0.05) */
        CHECK_MSG(maxd <= (native ? LP_TOL : gpu ? 0.05 : EXACT_TOL), "%s %s: max |dlogprob| %g", type,
                  native ? "blocks" : "dequantized", maxd);
        if (!native && gpu) CHECK_MSG(compared * 2 >= total, "%s (dequantized): only %zu of %zu tokens agree", type,
                                      compared, total);
        if (native) CHECK_MSG(compared * 4 >= total, "%s: only %zu of %zu tokens agree", type, compared, total);
        if (c) vllm_completions_free(c, fp.n);
        vllm_engine_free(e);
    }
    fixture_prompts_free(&fp);
    json_decref(exp);
}

/* --tokenizer (engine option tokenizer): another folder's or GGUF file's vocabulary replaces the file's */
static void tokenizer_override(void) {
    const char *path = DIR "/Q4_K_M.gguf";
    const char *srcs[2] = {VLLM_SOURCE_DIR "/models/stories260K", VLLM_SOURCE_DIR "/tests/fixtures/gguf/ollama-llama-2-tiny-random.gguf"};
    size_t want_n[2] = {0, 3};
    int32_t want_ids[3] = {1, 15043, 3186}; /* Llama 2's "Hello world" with its BOS */
    int32_t *own = NULL;
    size_t own_n = 0;
    vllm_engine_options o = vllm_engine_default_options();
    o.num_threads = 2;
    o.max_model_len = 64;
    vllm_engine *e = NULL;
    CHECK(vllm_engine_create(path, &o, &e) == VLLM_OK);
    if (e) CHECK(vllm_tokenize(e, "Hello world", true, &own, &own_n) == VLLM_OK);
    vllm_engine_free(e);
    want_n[0] = own_n; /* the same stories260K vocabulary as the file's own */
    for (int k = 0; k < 2; k++) {
        o.tokenizer = srcs[k];
        e = NULL;
        CHECK_MSG(vllm_engine_create(path, &o, &e) == VLLM_OK, "%s: %s", srcs[k], vllm_last_error());
        int32_t *ids = NULL;
        size_t n = 0;
        if (e) CHECK(vllm_tokenize(e, "Hello world", true, &ids, &n) == VLLM_OK);
        CHECK_MSG(n == want_n[k], "tokenizer %s: %zu ids", srcs[k], n);
        for (size_t i = 0; i < n && i < want_n[k]; i++) CHECK(ids[i] == (k ? want_ids[i] : own[i]));
        free(ids);
        vllm_engine_free(e);
    }
    o.tokenizer = "/nonexistent-tokenizer-dir";
    e = NULL;
    CHECK(vllm_engine_create(path, &o, &e) != VLLM_OK && !e);
    free(own);
}

int main(void) {
    tokenizer_override();
    for (size_t i = 0; i < sizeof TYPES / sizeof *TYPES; i++) run_type(TYPES[i]);
    TEST_END();
}
