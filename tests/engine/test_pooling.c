/*
 * test_pooling.c: the pooling runner (embeddings). Unit parts: the pooling arithmetic (rows of each
 * activation dtype, MEAN, dimensions then L2 normalisation, the Matryoshka checks), the
 * sentence-transformers config reading and the *Model architecture names. Engine parts, on
 * stories260K (F32, tied embeddings) and the qwen3_qknorm fixture: the LAST embedding is the hidden
 * state the LM head reads (its log-softmax against the generate engine's top-20 logprobs), MEAN equals
 * the mean of every prefix's LAST (causal attention), a one-token MEAN equals LAST; unit norm, equal
 * prompts equal, a batch equals one by one, chunked prefill equals unchunked (LAST, MEAN, CLS);
 * prefix caching kept for LAST (hits, same result) and off for MEAN; Matryoshka dimensions; runner
 * auto from modules.json and from a *Model checkpoint without the "model." prefix or an LM head; the
 * errors (runner mismatch, empty, too long, dimensions); the async front; and parity with
 * transformers on tests/fixtures/embed/qwen3_embed (tools/make_embed_fixture.py).
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine_internal.h"
#include "engine/pooling.h"
#include "loader/pooling_config.h"
#include "loader/safetensors.h"
#include "model/config.h"
#include "test.h"

#define STORIES VLLM_SOURCE_DIR "/models/stories260K"
#define QWEN3 VLLM_SOURCE_DIR "/tests/fixtures/models/qwen3_qknorm"

static char g_tmp[256];

/* ---- unit: arithmetic, configs, names ---- */

static void test_math(void) {
    const float row_f[4] = {1.0f, -2.0f, 0.5f, 3.0f};
    uint16_t row_b[4], row_h[4];
    for (int i = 0; i < 4; i++) row_b[i] = f32_to_bf16(row_f[i]), row_h[i] = f32_to_f16(row_f[i]);
    double acc[4] = {0}, acc2[4] = {0}, acc3[4] = {0};
    pool_set_row(acc, row_f, DTYPE_F32, 4);
    pool_add_row(acc, row_f, DTYPE_F32, 4);
    pool_add_row(acc2, row_b, DTYPE_BF16, 4);
    pool_add_row(acc3, row_h, DTYPE_F16, 4);
    for (int i = 0; i < 4; i++) {
        CHECK_NEAR(acc[i], 2.0 * row_f[i], 0);
        CHECK_NEAR(acc2[i], row_f[i], 0); /* exact in bf16 / f16 */
        CHECK_NEAR(acc3[i], row_f[i], 0);
    }
    /* MEAN: the sum over 2 rows / 2, then normalised: (1, -2, .5, 3) / sqrt(14.25) */
    float out[4];
    CHECK(pool_finish(acc, 4, 2.0, 0, true, out) == 4);
    double n = sqrt(1 + 4 + 0.25 + 9);
    for (int i = 0; i < 4; i++) CHECK_NEAR(out[i], row_f[i] / n, 1e-7);
    CHECK(pool_finish(acc, 4, 2.0, 0, false, out) == 4);
    for (int i = 0; i < 4; i++) CHECK_NEAR(out[i], row_f[i], 0);
    /* dimensions first, then normalisation (vLLM's EmbeddingPoolerHead) */
    CHECK(pool_finish(acc, 4, 2.0, 2, true, out) == 2);
    CHECK_NEAR(out[0], 1 / sqrt(5.0), 1e-7);
    CHECK_NEAR(out[1], -2 / sqrt(5.0), 1e-7);
    CHECK(pool_embedding_dim(4, 9) == 4 && pool_embedding_dim(4, 0) == 4 && pool_embedding_dim(4, 3) == 3);
    /* a zero vector stays zero (eps 1e-12), no NaN */
    double z[3] = {0, 0, 0};
    float zo[3];
    pool_finish(z, 3, 1.0, 0, true, zo);
    for (int i = 0; i < 3; i++) CHECK(zo[i] == 0.0f);

    vllm_engine_info info = {.embedding_size = 64};
    EXPECT_ERR(pool_check_dimensions(&info, 16, "m"), VLLM_ERR_INVALID_ARG,
               "Model \"m\" does not support matryoshka representation", "lead to poor results.");
    info.is_matryoshka = true;
    CHECK_OK(pool_check_dimensions(&info, 16, "m"));
    CHECK_OK(pool_check_dimensions(&info, 1000, "m")); /* past the size: vLLM slices, all of it */
    EXPECT_ERR(pool_check_dimensions(&info, 0, "m"), VLLM_ERR_INVALID_ARG, "Dimensions must be greater than 0", "");
    const int mds[2] = {16, 32};
    info.matryoshka_dimensions = mds;
    info.num_matryoshka_dimensions = 2;
    CHECK_OK(pool_check_dimensions(&info, 32, "m"));
    EXPECT_ERR(pool_check_dimensions(&info, 8, "m"), VLLM_ERR_INVALID_ARG, "only supports [16, 32] matryoshka",
               "use other output dimensions");
}

static void test_configs(void) {
    CHECK(pooling_type_of_key("pooling_mode_lasttoken") == VLLM_POOLING_LAST);
    CHECK(pooling_type_of_key("pooling_mode_mean_tokens") == VLLM_POOLING_MEAN);
    CHECK(pooling_type_of_key("pooling_mode_mean_sqrt_len_tokens") == VLLM_POOLING_MEAN); /* vLLM's parse */
    CHECK(pooling_type_of_key("pooling_mode_cls_token") == VLLM_POOLING_CLS);
    CHECK(pooling_type_of_key("pooling_mode_max_tokens") == VLLM_POOLING_AUTO);
    CHECK(pooling_type_of_key("pooling_mode_weightedmean_tokens") == VLLM_POOLING_AUTO);
    CHECK(pooling_type_of_key("include_prompt") == VLLM_POOLING_AUTO);
    const char *qwen3_modules =
        "[{\"idx\":0,\"name\":\"0\",\"path\":\"\",\"type\":\"sentence_transformers.models.Transformer\"},"
        "{\"idx\":1,\"name\":\"1\",\"path\":\"1_Pooling\",\"type\":\"sentence_transformers.models.Pooling\"},"
        "{\"idx\":2,\"name\":\"2\",\"path\":\"2_Normalize\",\"type\":\"sentence_transformers.models.Normalize\"}]";
    const char *last = "{\"word_embedding_dimension\": 1024, \"pooling_mode_cls_token\": false, "
                       "\"pooling_mode_mean_tokens\": false, \"pooling_mode_lasttoken\": true, "
                       "\"include_prompt\": true}";
    pooling_config pc;
    CHECK_OK(pooling_config_parse(qwen3_modules, last, "{\"architectures\":[\"Qwen3ForCausalLM\"]}", &pc));
    CHECK(pc.found && pc.type == VLLM_POOLING_LAST && pc.normalize && !pc.is_matryoshka);
    CHECK(!strcmp(pc.architecture, "Qwen3ForCausalLM"));
    /* a later true key wins; no Normalize module: not normalised */
    const char *no_norm = "[{\"path\":\"1_Pooling\",\"type\":\"sentence_transformers.models.Pooling\"}]";
    CHECK_OK(pooling_config_parse(no_norm, "{\"pooling_mode_cls_token\": true, \"pooling_mode_mean_tokens\": true}",
                                  NULL, &pc));
    CHECK(pc.found && pc.type == VLLM_POOLING_MEAN && !pc.normalize);
    /* Normalize without Pooling: no config at all (vLLM's get_pooling_config returns None) */
    CHECK_OK(pooling_config_parse("[{\"path\":\"2\",\"type\":\"sentence_transformers.models.Normalize\"}]", NULL, NULL,
                                  &pc));
    CHECK(!pc.found && !pc.normalize);
    /* an empty Pooling config: found, no type (the model default applies) */
    CHECK_OK(pooling_config_parse(no_norm, "{}", NULL, &pc));
    CHECK(pc.found && pc.type == VLLM_POOLING_AUTO);
    /* Matryoshka keys */
    CHECK_OK(pooling_config_parse(NULL, NULL, "{\"is_matryoshka\": true}", &pc));
    CHECK(pc.is_matryoshka && pc.num_matryoshka_dims == 0);
    CHECK_OK(pooling_config_parse(NULL, NULL, "{\"matryoshka_dimensions\": [32, 64]}", &pc));
    CHECK(pc.is_matryoshka && pc.num_matryoshka_dims == 2 && pc.matryoshka_dims[1] == 64);
    CHECK_OK(pooling_config_parse(NULL, NULL, "{\"matryoshka_dimensions\": []}", &pc));
    CHECK(!pc.is_matryoshka);
    EXPECT_ERR(pooling_config_parse(NULL, NULL, "{\"matryoshka_dimensions\": [0]}", &pc), VLLM_ERR_FORMAT,
               "matryoshka_dimensions[0]", "positive");
    EXPECT_ERR(pooling_config_parse("{\"a\": 1}", NULL, NULL, &pc), VLLM_ERR_FORMAT, "modules.json", "list");
    EXPECT_ERR(pooling_config_parse("[1]", NULL, NULL, &pc), VLLM_ERR_FORMAT, "modules.json", "type");
    EXPECT_ERR(pooling_config_parse("[", NULL, NULL, &pc), VLLM_ERR_FORMAT, "modules.json", "invalid JSON");

    /* names: *Model runs as *ForCausalLM (pooling by default); unknown generative names are not mapped */
    CHECK(model_config_family_find("Qwen3Model") == model_config_family_find("Qwen3ForCausalLM"));
    CHECK(model_config_family_find("MistralModel") == model_config_family_find("MistralForCausalLM"));
    CHECK(model_config_family_find("LlamaModel") != NULL);
    CHECK(model_arch_default_pooling("Qwen2Model") && model_arch_default_pooling("Qwen3ForTextEncoding"));
    CHECK(!model_arch_default_pooling("Qwen3ForCausalLM") && !model_arch_default_pooling("NopeModel"));
    CHECK(model_config_family_find("Qwen3ForConditionalGeneration") == NULL);
    CHECK(model_config_family_find("GPT2LMHeadModel") == NULL);
}

/* ---- engine helpers ---- */

typedef struct eng_opts {
    vllm_runner runner;
    vllm_pooling_type type;
    int normalize;
    int max_batched;
    int max_model_len;
} eng_opts;

static vllm_engine *make(const char *dir, eng_opts eo) {
    vllm_engine_options o = vllm_engine_default_options();
    o.num_threads = 2;
    o.max_model_len = eo.max_model_len ? eo.max_model_len : 128;
    o.runner = eo.runner;
    o.pooling_type = eo.type;
    o.pooler_normalize = eo.normalize;
    if (eo.max_batched) o.max_num_batched_tokens = eo.max_batched;
    vllm_engine *e = NULL;
    CHECK_OK(vllm_engine_create(dir, &o, &e));
    return e;
}

static const char *const TEXTS[] = {
    "Once upon a time", "Lily and Tom went to the park to play with a big red ball.", "The cat sat.",
    "One day, a little girl named Sue found a shiny stone near the river and she smiled at it.",
};

/* token-id prompts (both models have 512 ids): lengths 4, 30, 5, 4 (prompt 0 again), 1, 40 */
#define NP 6
static const size_t LENS[NP] = {4, 30, 5, 4, 1, 40};
static int32_t g_ids[NP][40];
static vllm_prompt g_prompts[NP];

static void make_prompts(void) {
    uint64_t x = 12345;
    for (int i = 0; i < NP; i++) {
        for (size_t k = 0; k < LENS[i]; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            g_ids[i][k] = i == 3 ? g_ids[0][k] : (int32_t)(3 + (x >> 33) % 509);
        }
        g_prompts[i] = (vllm_prompt){.token_ids = g_ids[i], .num_token_ids = LENS[i]};
    }
}

static vllm_embedding *embed_prompts(vllm_engine *e, const vllm_prompt *ps, size_t n, const vllm_pooling_params *pp) {
    vllm_embedding *out = NULL;
    CHECK_OK(vllm_embed(e, ps, n, pp, &out));
    return out;
}

static vllm_embedding *embed_texts(vllm_engine *e, const char *const *texts, size_t n, const vllm_pooling_params *pp) {
    vllm_prompt ps[16];
    for (size_t i = 0; i < n; i++) ps[i] = (vllm_prompt){.text = texts[i]};
    vllm_embedding *out = NULL;
    CHECK_OK(vllm_embed(e, ps, n, pp, &out));
    return out;
}

static vllm_embedding *embed_ids(vllm_engine *e, const int32_t *ids, size_t n, const vllm_pooling_params *pp) {
    vllm_prompt p = {.token_ids = ids, .num_token_ids = n};
    vllm_embedding *out = NULL;
    CHECK_OK(vllm_embed(e, &p, 1, pp, &out));
    return out;
}

static double max_diff(const vllm_embedding *a, const vllm_embedding *b) {
    if (!a || !b || a->dim != b->dim) return INFINITY;
    double m = 0;
    for (size_t i = 0; i < a->dim; i++) m = fmax(m, fabs((double)a->data[i] - (double)b->data[i]));
    return m;
}

static double norm2(const vllm_embedding *a) {
    double s = 0;
    for (size_t i = 0; i < a->dim; i++) s += (double)a->data[i] * a->data[i];
    return sqrt(s);
}

/* ---- engine: the reference, invariants ---- */

/* LAST, not normalised, is the final-normed hidden state: E h (tied embeddings) log-softmaxed equals the
 * generate engine's logprobs of the next token. */
static void test_reference(void) {
    vllm_engine *pe = make(STORIES, (eng_opts){.runner = VLLM_RUNNER_POOLING});
    vllm_engine *ge = make(STORIES, (eng_opts){0});
    st_set *st = NULL;
    CHECK_OK(st_open_file(STORIES "/model.safetensors", &st));
    const tensor *E = st ? st_find(st, "model.embed_tokens.weight") : NULL;
    CHECK(E && E->dtype == DTYPE_F32 && E->shape[0] == 512 && E->shape[1] == 64);
    if (!pe || !ge || !E) goto out;
    vllm_engine_info gi;
    vllm_engine_get_info(ge, &gi);
    CHECK(gi.runner == VLLM_RUNNER_GENERATE && gi.embedding_size == 0);
    vllm_pooling_params raw = vllm_pooling_default_params();
    raw.normalize = -1;
    vllm_sampling_params sp = vllm_sampling_default_params();
    sp.temperature = 0, sp.max_tokens = 1, sp.logprobs = 20;
    for (int p = 0; p < 3; p++) {
        vllm_embedding *h = embed_texts(pe, &TEXTS[p], 1, &raw);
        vllm_prompt gp = {.text = TEXTS[p]};
        vllm_completion *c = NULL;
        CHECK_OK(vllm_generate(ge, &gp, 1, &sp, false, &c, NULL));
        if (h && c) {
            CHECK(h->dim == 64 && h->num_prompt_tokens == c->num_prompt_tokens);
            double lg[512], mx = -INFINITY, sum = 0;
            const float *w = E->data;
            for (int v = 0; v < 512; v++) {
                lg[v] = 0;
                for (int d = 0; d < 64; d++) lg[v] += (double)w[v * 64 + d] * h->data[d];
                mx = fmax(mx, lg[v]);
            }
            for (int v = 0; v < 512; v++) sum += exp(lg[v] - mx);
            double lse = mx + log(sum);
            for (int k = 0; k < c->num_top_logprobs; k++)
                CHECK_NEAR(lg[c->top_logprob_ids[k]] - lse, c->top_logprobs[k], 2e-4);
        }
        vllm_embeddings_free(h, 1);
        vllm_completions_free(c, 1);
    }
out:
    st_close(st);
    vllm_engine_free(pe);
    vllm_engine_free(ge);
}

/* Unit norm, equal prompts equal, a batch equals one by one, chunked prefill equals unchunked. (Prompt-only
 * requests are never preempted: only the last request of a step can be left partial, and one sequence
 * always fits the KV cache.) */
static void test_invariants(const char *dir, vllm_pooling_type type) {
    vllm_engine *e = make(dir, (eng_opts){.runner = VLLM_RUNNER_POOLING, .type = type});
    vllm_engine *chunked = make(dir, (eng_opts){.runner = VLLM_RUNNER_POOLING, .type = type, .max_batched = 5});
    if (!e || !chunked) goto out;
    vllm_engine_info info;
    vllm_engine_get_info(e, &info);
    CHECK(info.runner == VLLM_RUNNER_POOLING && info.pooling_type == type && info.pooling_normalize);
    CHECK(e->opt.enable_prefix_caching == (type == VLLM_POOLING_LAST)); /* vLLM: off for MEAN / CLS */
    vllm_embedding *all = embed_prompts(e, g_prompts, NP, NULL);
    vllm_embedding *ch = embed_prompts(chunked, g_prompts, NP, NULL);
    if (!all || !ch) goto free2;
    for (int i = 0; i < NP; i++) {
        CHECK(all[i].dim == (size_t)info.embedding_size);
        CHECK_NEAR(norm2(&all[i]), 1.0, 1e-5);
        vllm_embedding *one = embed_prompts(e, &g_prompts[i], 1, NULL);
        CHECK_MSG(max_diff(one, &all[i]) < 1e-5, "%s prompt %d: alone vs batch %g", dir, i, max_diff(one, &all[i]));
        CHECK_MSG(max_diff(&ch[i], &all[i]) < 1e-5, "%s prompt %d: chunked %g", dir, i, max_diff(&ch[i], &all[i]));
        vllm_embeddings_free(one, 1);
    }
    CHECK(max_diff(&all[0], &all[3]) < 1e-6); /* equal prompts in one batch */
    CHECK(max_diff(&all[0], &all[1]) > 1e-3);
free2:
    vllm_embeddings_free(all, NP);
    vllm_embeddings_free(ch, NP);
out:
    vllm_engine_free(e);
    vllm_engine_free(chunked);
}

static void test_mean_vs_last(const char *dir) {
    vllm_engine *mean =
        make(dir, (eng_opts){.runner = VLLM_RUNNER_POOLING, .type = VLLM_POOLING_MEAN, .max_batched = 6});
    vllm_engine *last = make(dir, (eng_opts){.runner = VLLM_RUNNER_POOLING, .type = VLLM_POOLING_LAST});
    vllm_engine *cls = make(dir, (eng_opts){.runner = VLLM_RUNNER_POOLING, .type = VLLM_POOLING_CLS, .max_batched = 3});
    if (!mean || !last || !cls) goto out;
    vllm_pooling_params raw = vllm_pooling_default_params();
    raw.normalize = -1;
    const int32_t ids[9] = {1, 403, 407, 261, 378, 66, 13, 290, 30};
    vllm_embedding *m = embed_ids(mean, ids, 9, &raw), *c = embed_ids(cls, ids, 9, &raw);
    if (m && c) {
        double avg[512] = {0};
        for (size_t k = 1; k <= 9; k++) {
            vllm_embedding *l = embed_ids(last, ids, k, &raw);
            if (!l) break;
            for (size_t d = 0; d < l->dim; d++) avg[d] += l->data[d] / 9.0;
            if (k == 1) CHECK_MSG(max_diff(l, c) < 1e-5, "CLS = the first prefix's LAST: %g", max_diff(l, c));
            vllm_embeddings_free(l, 1);
        }
        double md = 0;
        for (size_t d = 0; d < m->dim; d++) md = fmax(md, fabs(avg[d] - m->data[d]));
        CHECK_MSG(md < 1e-5, "%s: MEAN vs the mean of the prefixes' LAST: %g", dir, md);
    }
    vllm_embedding *m1 = embed_ids(mean, ids + 2, 1, &raw), *l1 = embed_ids(last, ids + 2, 1, &raw);
    CHECK_MSG(max_diff(m1, l1) < 1e-6, "one-token MEAN vs LAST: %g", max_diff(m1, l1));
    vllm_embeddings_free(m, 1);
    vllm_embeddings_free(c, 1);
    vllm_embeddings_free(m1, 1);
    vllm_embeddings_free(l1, 1);
out:
    vllm_engine_free(mean);
    vllm_engine_free(last);
    vllm_engine_free(cls);
}

/* LAST with prefix caching: a repeated prompt hits the cache (all but its last token) and embeds the same. */
static void test_prefix_cache(void) {
    vllm_engine *e = make(STORIES, (eng_opts){.runner = VLLM_RUNNER_POOLING});
    if (!e) return;
    const char *t = TEXTS[3];
    vllm_embedding *a = embed_texts(e, &t, 1, NULL);
    vllm_prompt p = {.text = t};
    CHECK_OK(vllm_engine_add_pooling_request(e, "again", &p, NULL));
    size_t cached = 0, steps = 0;
    vllm_embedding b = {0};
    while (vllm_engine_has_unfinished(e) && steps++ < 50) {
        const vllm_request_output *o;
        size_t n;
        CHECK_OK(vllm_engine_step(e, &o, &n));
        for (size_t k = 0; k < n; k++)
            if (o[k].embedding) {
                cached = o[k].cached_prompt_tokens;
                CHECK(o[k].finish_reason == VLLM_FINISH_STOP && o[k].num_new_tokens == 0);
                b.dim = o[k].embedding_dim;
                b.data = malloc(b.dim * sizeof(float));
                if (b.data) memcpy(b.data, o[k].embedding, b.dim * sizeof(float));
            }
    }
    CHECK_MSG(cached >= 16, "cached %zu", cached);
    CHECK(a && b.data && max_diff(a, &b) < 1e-5);
    free(b.data);
    vllm_embeddings_free(a, 1);
    vllm_engine_free(e);
}

/* ---- model folders: modules.json, Matryoshka, a *Model checkpoint ---- */

/* g_tmp/name: links to the stories files, config.json with the given changes, and the files given */
static void make_dir(const char *name, const char *arch, const char *config_extra, const char *modules,
                     const char *pooling, char *dir, size_t cap) {
    snprintf(dir, cap, "%s/%s", g_tmp, name);
    CHECK(mkdir(dir, 0755) == 0);
    static const char *const files[] = {"model.safetensors", "tokenizer.json", "tokenizer_config.json",
                                        "generation_config.json"};
    char src[512], dst[512];
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        if (!strcmp(files[i], "model.safetensors") && !strcmp(arch, "LlamaModel")) continue; /* written below */
        snprintf(src, sizeof src, "%s/%s", STORIES, files[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
        CHECK(symlink(src, dst) == 0);
    }
    json_error_t jerr;
    json_t *c = json_load_file(STORIES "/config.json", 0, &jerr);
    CHECK(c != NULL);
    if (!c) return;
    json_object_set_new(c, "architectures", json_pack("[s]", arch));
    if (config_extra) {
        json_t *x = json_loads(config_extra, 0, &jerr);
        json_object_update(c, x);
        json_decref(x);
    }
    snprintf(dst, sizeof dst, "%s/config.json", dir);
    CHECK(json_dump_file(c, dst, 0) == 0);
    json_decref(c);
    if (modules) {
        snprintf(dst, sizeof dst, "%s/modules.json", dir);
        FILE *f = fopen(dst, "w");
        if (f) fputs(modules, f), fclose(f);
        snprintf(dst, sizeof dst, "%s/1_Pooling", dir);
        CHECK(mkdir(dst, 0755) == 0);
        snprintf(dst, sizeof dst, "%s/1_Pooling/config.json", dir);
        f = fopen(dst, "w");
        if (f) fputs(pooling, f), fclose(f);
    }
    if (!strcmp(arch, "LlamaModel")) { /* the decoder's tensors without "model.", as e5-mistral's MistralModel */
        st_set *st = NULL;
        CHECK_OK(st_open_file(STORIES "/model.safetensors", &st));
        if (!st) return;
        size_t n = st_count(st);
        const char **names = calloc(n, sizeof *names);
        tensor *ts = calloc(n, sizeof *ts);
        for (size_t i = 0; names && ts && i < n; i++) {
            const char *nm = st_name(st, i);
            names[i] = !strncmp(nm, "model.", 6) ? nm + 6 : nm;
            ts[i] = *st_find(st, nm);
        }
        snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
        CHECK_OK(st_write_file(dst, names, ts, n));
        free(names);
        free(ts);
        st_close(st);
    }
}

static void test_folders(void) {
    char dir[512];
    vllm_engine *ref = make(STORIES, (eng_opts){.runner = VLLM_RUNNER_POOLING});
    vllm_engine *ref_mean = make(STORIES, (eng_opts){.runner = VLLM_RUNNER_POOLING, .type = VLLM_POOLING_MEAN});
    vllm_pooling_params raw = vllm_pooling_default_params();
    raw.normalize = -1;
    vllm_embedding *r_last = ref ? embed_texts(ref, TEXTS, 3, NULL) : NULL;
    vllm_embedding *r_raw = ref ? embed_texts(ref, TEXTS, 3, &raw) : NULL;
    vllm_embedding *r_mean = ref_mean ? embed_texts(ref_mean, TEXTS, 3, &raw) : NULL;

    /* sentence-transformers MEAN without a Normalize module: runner auto -> pooling, MEAN, not normalised */
    make_dir("st_mean", "LlamaForCausalLM", NULL,
             "[{\"path\":\"\",\"type\":\"sentence_transformers.models.Transformer\"},"
             "{\"path\":\"1_Pooling\",\"type\":\"sentence_transformers.models.Pooling\"}]",
             "{\"pooling_mode_mean_tokens\": true}", dir, sizeof dir);
    vllm_engine *e = make(dir, (eng_opts){0});
    if (e) {
        vllm_engine_info info;
        vllm_engine_get_info(e, &info);
        CHECK(info.runner == VLLM_RUNNER_POOLING && info.pooling_type == VLLM_POOLING_MEAN && !info.pooling_normalize);
        CHECK(!e->opt.enable_prefix_caching);
        vllm_embedding *x = embed_texts(e, TEXTS, 3, NULL);
        for (int i = 0; x && r_mean && i < 3; i++) CHECK(max_diff(&x[i], &r_mean[i]) < 1e-6);
        vllm_embeddings_free(x, 3);
        /* --pooler-config over the folder's: LAST, normalised */
        vllm_engine_free(e);
        e = make(dir, (eng_opts){.type = VLLM_POOLING_LAST, .normalize = 1});
        x = e ? embed_texts(e, TEXTS, 3, NULL) : NULL;
        for (int i = 0; x && r_last && i < 3; i++) CHECK(max_diff(&x[i], &r_last[i]) < 1e-6);
        vllm_embeddings_free(x, 3);
        vllm_engine_free(e);
        /* runner generate over a sentence-transformers folder: generates */
        e = make(dir, (eng_opts){.runner = VLLM_RUNNER_GENERATE});
        if (e) {
            vllm_engine_get_info(e, &info);
            CHECK(info.runner == VLLM_RUNNER_GENERATE);
        }
    }
    vllm_engine_free(e);

    /* Matryoshka (any size): dimensions keep the first values, then normalise */
    make_dir("mrl", "LlamaForCausalLM", "{\"is_matryoshka\": true}", NULL, NULL, dir, sizeof dir);
    e = make(dir, (eng_opts){.runner = VLLM_RUNNER_POOLING});
    if (e && r_raw) {
        vllm_pooling_params pp = vllm_pooling_default_params();
        pp.dimensions = 16;
        vllm_embedding *x = embed_texts(e, TEXTS, 3, &pp);
        for (int i = 0; x && i < 3; i++) {
            CHECK(x[i].dim == 16);
            double n = 0;
            for (int d = 0; d < 16; d++) n += (double)r_raw[i].data[d] * r_raw[i].data[d];
            for (int d = 0; d < 16; d++) CHECK_NEAR(x[i].data[d], r_raw[i].data[d] / sqrt(n), 1e-6);
        }
        vllm_embeddings_free(x, 3);
        pp.dimensions = 1000; /* past the size: all of it */
        x = embed_texts(e, TEXTS, 1, &pp);
        CHECK(x && x->dim == 64 && max_diff(x, &r_last[0]) < 1e-6);
        vllm_embeddings_free(x, 1);
    }
    vllm_engine_free(e);
    make_dir("mrl_dims", "LlamaForCausalLM", "{\"matryoshka_dimensions\": [16, 32]}", NULL, NULL, dir, sizeof dir);
    e = make(dir, (eng_opts){.runner = VLLM_RUNNER_POOLING});
    if (e) {
        vllm_engine_info info;
        vllm_engine_get_info(e, &info);
        CHECK(info.is_matryoshka && info.num_matryoshka_dimensions == 2 && info.matryoshka_dimensions[0] == 16);
        vllm_prompt p = {.text = "hi"};
        vllm_pooling_params pp = {.dimensions = 8};
        EXPECT_ERR(vllm_engine_add_pooling_request(e, "d", &p, &pp), VLLM_ERR_INVALID_ARG, "only supports [16, 32]",
                   "request d");
        pp.dimensions = 32;
        vllm_embedding *x = NULL;
        CHECK_OK(vllm_embed(e, &p, 1, &pp, &x));
        CHECK(x && x->dim == 32);
        vllm_embeddings_free(x, 1);
    }
    vllm_engine_free(e);

    /* LlamaModel: tensors without "model.", no LM head; runner auto -> pooling (LAST, normalised) */
    make_dir("llama_model", "LlamaModel", "{\"tie_word_embeddings\": false}", NULL, NULL, dir, sizeof dir);
    e = make(dir, (eng_opts){0});
    if (e) {
        vllm_engine_info info;
        vllm_engine_get_info(e, &info);
        CHECK(info.runner == VLLM_RUNNER_POOLING && info.pooling_type == VLLM_POOLING_LAST && info.pooling_normalize);
        CHECK(!strcmp(info.architecture, "LlamaModel"));
        vllm_embedding *x = embed_texts(e, TEXTS, 3, NULL);
        for (int i = 0; x && r_last && i < 3; i++) CHECK(max_diff(&x[i], &r_last[i]) < 1e-6);
        vllm_embeddings_free(x, 3);
    }
    vllm_engine_free(e);
    vllm_engine_options o = vllm_engine_default_options();
    o.runner = VLLM_RUNNER_GENERATE;
    e = NULL;
    EXPECT_ERR(vllm_engine_create(dir, &o, &e), VLLM_ERR_UNSUPPORTED, "LlamaModel has no LM head", "runner pooling");
    CHECK(e == NULL);

    vllm_embeddings_free(r_last, 3);
    vllm_embeddings_free(r_raw, 3);
    vllm_embeddings_free(r_mean, 3);
    vllm_engine_free(ref);
    vllm_engine_free(ref_mean);
}

/* ---- errors, the async front ---- */

static void test_errors(void) {
    vllm_engine *pe = make(STORIES, (eng_opts){.runner = VLLM_RUNNER_POOLING, .max_model_len = 32});
    vllm_engine *ge = make(STORIES, (eng_opts){0});
    if (!pe || !ge) goto out;
    vllm_prompt p = {.text = "Once upon a time"};
    EXPECT_ERR(vllm_engine_add_request(pe, "g", &p, NULL), VLLM_ERR_UNSUPPORTED, "pooling runner", "does not generate");
    EXPECT_ERR(vllm_engine_add_pooling_request(ge, "e", &p, NULL), VLLM_ERR_UNSUPPORTED, "generate runner",
               "--runner pooling");
    vllm_embedding *x = NULL;
    EXPECT_ERR(vllm_embed(ge, &p, 1, NULL, &x), VLLM_ERR_UNSUPPORTED, "prompt 0", "generate runner");
    vllm_prompt empty = {.token_ids = NULL, .num_token_ids = 0};
    EXPECT_ERR(vllm_engine_add_pooling_request(pe, "z", &empty, NULL), VLLM_ERR_INVALID_ARG, "request z",
               "the prompt is empty");
    int32_t ids[33];
    for (int i = 0; i < 33; i++) ids[i] = 100 + i;
    vllm_prompt longp = {.token_ids = ids, .num_token_ids = 33};
    EXPECT_ERR(vllm_engine_add_pooling_request(pe, "l", &longp, NULL), VLLM_ERR_TOO_LONG,
               "maximum context length is 32 tokens. However, you requested 33 tokens in the input for embedding "
               "generation.",
               "Please reduce the length of the input.");
    ids[0] = 512;
    vllm_prompt bad = {.token_ids = ids, .num_token_ids = 3};
    EXPECT_ERR(vllm_engine_add_pooling_request(pe, "b", &bad, NULL), VLLM_ERR_INVALID_ARG, "token id 512", "range");
    ids[0] = 100;
    vllm_pooling_params pp = {.dimensions = 8};
    EXPECT_ERR(vllm_engine_add_pooling_request(pe, "d", &p, &pp), VLLM_ERR_INVALID_ARG,
               "does not support matryoshka representation", "request d");
    CHECK(!vllm_engine_has_unfinished(pe));
    /* a prompt of exactly max_model_len tokens is embedded (no output follows it) */
    longp.num_token_ids = 32;
    CHECK_OK(vllm_embed(pe, &longp, 1, NULL, &x));
    CHECK(x && x->num_prompt_tokens == 32);
    vllm_embeddings_free(x, 1);
    /* abort: reported once, without an embedding */
    CHECK_OK(vllm_engine_add_pooling_request(pe, "a", &p, NULL));
    CHECK_OK(vllm_engine_abort_request(pe, "a"));
    const vllm_request_output *o;
    size_t n;
    CHECK_OK(vllm_engine_step(pe, &o, &n));
    CHECK(n == 1 && o[0].finish_reason == VLLM_FINISH_ABORT && !o[0].embedding);
    CHECK(!vllm_engine_has_unfinished(pe));
out:
    vllm_engine_free(pe);
    vllm_engine_free(ge);
}

static void test_async(void) {
    vllm_engine_options o = vllm_engine_default_options();
    o.num_threads = 2;
    o.max_model_len = 128;
    o.runner = VLLM_RUNNER_POOLING;
    vllm_async_engine *ae = NULL;
    CHECK_OK(vllm_async_engine_create(STORIES, &o, &ae));
    vllm_engine *e = make(STORIES, (eng_opts){.runner = VLLM_RUNNER_POOLING});
    if (!ae || !e) goto out;
    vllm_embedding *ref = embed_texts(e, TEXTS, 3, NULL);
    vllm_stream *s[3] = {0};
    for (int i = 0; i < 3; i++) {
        char id[16];
        snprintf(id, sizeof id, "r%d", i);
        vllm_prompt p = {.text = TEXTS[i]};
        CHECK_OK(vllm_async_add_pooling_request(ae, id, &p, NULL, &s[i]));
    }
    vllm_prompt p = {.text = "x"};
    vllm_stream *g = NULL;
    EXPECT_ERR(vllm_async_add_request(ae, "gen", &p, NULL, &g), VLLM_ERR_UNSUPPORTED, "pooling runner", "");
    for (int i = 0; i < 3; i++) {
        if (!s[i]) continue;
        vllm_stream_chunk c;
        CHECK_OK(vllm_stream_next(s[i], &c, 30000));
        CHECK(c.last && c.finish_reason == VLLM_FINISH_STOP && c.embedding && c.embedding_dim == 64);
        if (ref && c.embedding)
            for (size_t d = 0; d < 64; d++) CHECK_NEAR(c.embedding[d], ref[i].data[d], 1e-6);
        CHECK(c.prompt_tokens == ref[i].num_prompt_tokens);
        vllm_stream_chunk_clear(&c);
        vllm_stream_free(s[i]);
    }
    vllm_embeddings_free(ref, 3);
out:
    vllm_engine_free(e);
    vllm_async_engine_free(ae);
}

/* tools/make_embed_fixture.py's transformers reference, when the fixture has been made (on a machine with
 * torch and transformers): LAST (the folder's sentence-transformers config, found by runner auto) and MEAN
 * (by --pooler-config), normalised and not, within 1e-4 of transformers' float32 hidden states. */
#define EMBED_FIX VLLM_SOURCE_DIR "/tests/fixtures/embed/qwen3_embed"
static void test_fixture_parity(void) {
    json_error_t jerr;
    json_t *fx = json_load_file(EMBED_FIX "/expected_embed.json", 0, &jerr);
    if (!fx) {
        fprintf(stderr, "note: no %s/expected_embed.json (tools/make_embed_fixture.py makes it): transformers parity "
                "not checked\n", EMBED_FIX);
        return;
    }
    vllm_engine *last = make(EMBED_FIX, (eng_opts){0});
    vllm_engine *mean = make(EMBED_FIX, (eng_opts){.type = VLLM_POOLING_MEAN});
    const json_t *prompts = json_object_get(fx, "prompts");
    CHECK(json_array_size(prompts) > 0);
    if (last && mean) {
        vllm_engine_info info;
        vllm_engine_get_info(last, &info);
        CHECK(info.runner == VLLM_RUNNER_POOLING && info.pooling_type == VLLM_POOLING_LAST && info.pooling_normalize);
        size_t i;
        const json_t *p;
        json_array_foreach(prompts, i, p) {
            const json_t *ids = json_object_get(p, "prompt_token_ids");
            int32_t tok[256];
            size_t n = json_array_size(ids) < 256 ? json_array_size(ids) : 256;
            for (size_t k = 0; k < n; k++) tok[k] = (int32_t)json_integer_value(json_array_get(ids, k));
            for (int norm = 0; norm < 2; norm++) {
                vllm_pooling_params pp = {.normalize = norm ? 1 : -1};
                vllm_embedding *l = embed_ids(last, tok, n, &pp), *m = embed_ids(mean, tok, n, &pp);
                const json_t *wl = json_object_get(p, norm ? "last_normalized" : "last");
                const json_t *wm = json_object_get(p, norm ? "mean_normalized" : "mean");
                double dl = 0, dm = 0;
                for (size_t d = 0; l && m && d < json_array_size(wl) && d < l->dim; d++) {
                    dl = fmax(dl, fabs(l->data[d] - json_number_value(json_array_get(wl, d))));
                    dm = fmax(dm, fabs(m->data[d] - json_number_value(json_array_get(wm, d))));
                }
                CHECK(l && m && l->dim == json_array_size(wl) && m->dim == json_array_size(wm));
                CHECK_MSG(dl < 1e-4 && dm < 1e-4, "prompt %zu (%zu tokens, normalize %d): LAST %g, MEAN %g", i, n, norm,
                          dl, dm);
                vllm_embeddings_free(l, 1);
                vllm_embeddings_free(m, 1);
            }
        }
    }
    vllm_engine_free(last);
    vllm_engine_free(mean);
    json_decref(fx);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/vllmc-pooling-XXXXXX");
    if (!mkdtemp(g_tmp)) TEST_SKIP("no temporary folder");
    make_prompts();
    test_math();
    test_configs();
    test_reference();
    for (int t = VLLM_POOLING_LAST; t <= VLLM_POOLING_CLS; t++) {
        test_invariants(STORIES, (vllm_pooling_type)t);
        test_invariants(QWEN3, (vllm_pooling_type)t);
    }
    test_mean_vs_last(STORIES);
    test_mean_vs_last(QWEN3);
    test_prefix_cache();
    test_folders();
    test_errors();
    test_async();
    test_fixture_parity();
    if (!t_failures) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_tmp);
    }
    TEST_END();
}
