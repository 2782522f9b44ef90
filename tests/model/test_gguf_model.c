/*
 * test_gguf_model.c: GGUF files run as the safetensors they were made from. Three parity fixtures
 * (qwen3_qknorm, llama_gqa, qwen3_moe) are written as GGUF files the way llama.cpp's
 * convert_hf_to_gguf.py lays them out (its tensor names, ne innermost first, llama's q / k rows
 * permuted for its rotary layout, the experts of a layer merged into (E, out, in) tensors, the
 * metadata keys of its architectures) and must give, through the engine, the tokens and logprobs of
 * their folders: identical with the BF16 tensors kept as they are, and close with the weights
 * quantized to Q8_0 (dequantized at load). Plus the refusals of config values the mapping cannot carry.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf_fixture.h"
#include "loader/gguf_config.h"
#include "loader/safetensors.h"

#ifndef VLLM_SOURCE_DIR
#define VLLM_SOURCE_DIR "."
#endif

/* HF layer suffix -> GGUF name */
static const char *gguf_name(const char *suffix) {
    static const char *map[][2] = {
        {"input_layernorm.weight", "attn_norm.weight"},      {"post_attention_layernorm.weight", "ffn_norm.weight"},
        {"self_attn.q_proj.weight", "attn_q.weight"},        {"self_attn.k_proj.weight", "attn_k.weight"},
        {"self_attn.v_proj.weight", "attn_v.weight"},        {"self_attn.o_proj.weight", "attn_output.weight"},
        {"self_attn.q_norm.weight", "attn_q_norm.weight"},   {"self_attn.k_norm.weight", "attn_k_norm.weight"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"},         {"mlp.up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"},         {"mlp.gate.weight", "ffn_gate_inp.weight"},
    };
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (!strcmp(suffix, map[i][0])) return map[i][1];
    return NULL;
}

/* The fixture's tensors as llama.cpp would store them. */
static bool convert(const char *dir, const json_t *cfg, const char *arch, bool q8, gfile *g) {
    st_set *st = NULL;
    if (st_open_dir(dir, &st) != VLLM_OK) return false;
    const int heads = (int)json_integer_value(json_object_get(cfg, "num_attention_heads"));
    const int kv_heads = (int)json_integer_value(json_object_get(cfg, "num_key_value_heads"));
    const int layers = (int)json_integer_value(json_object_get(cfg, "num_hidden_layers"));
    const int experts = (int)json_integer_value(json_object_get(cfg, "num_local_experts"));
    const bool permute = !strcmp(arch, "llama");
    for (size_t i = 0; i < st_count(st); i++) {
        const char *name = st_name(st, i);
        const tensor *t = st_find(st, name);
        if (!t || t->dtype != DTYPE_BF16) continue;
        int64_t ne[3] = {1, 1, 1};
        const int nd = t->ndim;
        for (int d = 0; d < nd; d++) ne[d] = t->shape[nd - 1 - d];
        const uint16_t *bf = t->data;
        char gname[128];
        if (!strcmp(name, "model.embed_tokens.weight")) snprintf(gname, sizeof gname, "token_embd.weight");
        else if (!strcmp(name, "model.norm.weight")) snprintf(gname, sizeof gname, "output_norm.weight");
        else if (!strcmp(name, "lm_head.weight")) snprintf(gname, sizeof gname, "output.weight");
        else {
            int l;
            char suffix[128];
            if (sscanf(name, "model.layers.%d.%127s", &l, suffix) != 2) continue;
            if (!strncmp(suffix, "mlp.experts.", 12)) continue; /* merged below */
            const char *gn = gguf_name(suffix);
            CHECK_MSG(gn != NULL, "no GGUF name for %s", name);
            if (!gn) continue;
            snprintf(gname, sizeof gname, "blk.%d.%s", l, gn);
            const bool q = !strcmp(suffix, "self_attn.q_proj.weight"), k = !strcmp(suffix, "self_attn.k_proj.weight");
            if (permute && (q || k)) { /* GGUF row h hd + 2 i + s <- HF row h hd + s hd/2 + i */
                const int64_t rows = ne[1], cols = ne[0], hd = rows / (q ? heads : kv_heads);
                uint16_t *p = malloc((size_t)(rows * cols) * 2);
                for (int64_t r = 0; r < rows; r++) {
                    const int64_t h = r / hd, j = r % hd, i2 = j / 2, s = j % 2;
                    memcpy(p + r * cols, bf + (h * hd + s * (hd / 2) + i2) * cols, (size_t)cols * 2);
                }
                put(g, gname, nd, ne, p, q8);
                free(p);
                continue;
            }
        }
        put(g, gname, nd, ne, bf, q8 && strcmp(gname, "token_embd.weight"));
    }
    /* experts: (E, out, in) per projection and layer */
    for (int l = 0; l < layers && experts > 0; l++) {
        static const char *proj[3][2] = {{"gate_proj", "ffn_gate_exps"}, {"up_proj", "ffn_up_exps"}, {"down_proj", "ffn_down_exps"}};
        for (int p = 0; p < 3; p++) {
            char name[160];
            snprintf(name, sizeof name, "model.layers.%d.mlp.experts.0.%s.weight", l, proj[p][0]);
            const tensor *t0 = st_find(st, name);
            if (!t0) continue;
            const int64_t out = t0->shape[0], in = t0->shape[1];
            uint16_t *all = malloc((size_t)(experts * out * in) * 2);
            for (int e = 0; e < experts; e++) {
                snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.%s.weight", l, e, proj[p][0]);
                const tensor *t = st_find(st, name);
                CHECK(t && t->shape[0] == out && t->shape[1] == in);
                if (t) memcpy(all + (size_t)e * out * in, t->data, (size_t)(out * in) * 2);
            }
            char gname[128];
            snprintf(gname, sizeof gname, "blk.%d.%s.weight", l, proj[p][1]);
            const int64_t ne[3] = {in, out, experts};
            put(g, gname, 3, ne, all, q8);
            free(all);
        }
    }
    st_close(st);
    return true;
}

/* Writes the file: metadata from config.json (llama.cpp's keys), then the tensors. extra: one more u32
 * key (a refusal case) or NULL. */
static bool write_model_gguf(const char *path, const json_t *cfg, const char *arch, const gfile *g, const char *extra_key,
                       uint32_t extra_val) {
    gb b = {0};
    char key[160];
    const bool moe = json_object_get(cfg, "num_local_experts") != NULL;
    const int nkv = 10 + (moe ? 3 : 0) + (extra_key ? 1 : 0);
    gb_header(&b, 3, (uint64_t)g->n, (uint64_t)nkv);
    gb_kv_str(&b, "general.architecture", arch);
#define U32(k, field)                                                                         \
    snprintf(key, sizeof key, "%s." k, arch);                                                 \
    gb_kv_u32(&b, key, (uint32_t)json_integer_value(json_object_get(cfg, field)))
    U32("embedding_length", "hidden_size");
    U32("block_count", "num_hidden_layers");
    U32("feed_forward_length", "intermediate_size");
    U32("attention.head_count", "num_attention_heads");
    U32("attention.head_count_kv", "num_key_value_heads");
    U32("attention.key_length", "head_dim");
    U32("context_length", "max_position_embeddings");
    if (moe) {
        U32("expert_count", "num_local_experts");
        U32("expert_used_count", "num_experts_per_tok");
        U32("expert_feed_forward_length", "moe_intermediate_size");
    }
#undef U32
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    kv_f32(&b, key, (float)json_number_value(json_object_get(cfg, "rms_norm_eps")));
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    kv_f32(&b, key, (float)json_number_value(json_object_get(json_object_get(cfg, "rope_parameters"), "rope_theta")));
    if (extra_key) gb_kv_u32(&b, extra_key, extra_val);
    gf_write_tensors(&b, g);
    const int rc = gb_write(&b, path);
    gb_free(&b);
    return rc == 0;
}

static void run_case(const char *fixture, const char *arch) {
    char dir[1024], cfgpath[1200];
    json_error_t err;
    json_t *expected = fixture_load(VLLM_SOURCE_DIR "/tests/fixtures/models", fixture, dir, sizeof dir, &err);
    CHECK_MSG(expected != NULL, "%s: %s", fixture, err.text);
    if (!expected) return;
    snprintf(cfgpath, sizeof cfgpath, "%s/config.json", dir);
    json_t *cfg = json_load_file(cfgpath, 0, &err);
    CHECK(cfg != NULL);
    fixture_prompts fp;
    fixture_prompts_load(json_object_get(expected, "prompts"), &fp);
    vllm_status st;
    vllm_completion *ref = run(dir, &fp, &st);
    CHECK_MSG(ref != NULL, "%s: %s", dir, vllm_last_error());
    for (int q8 = 0; q8 < 2 && ref; q8++) {
        char path[256];
        snprintf(path, sizeof path, "/tmp/vllmc_test_gguf_%d_%s_%d.gguf", (int)getpid(), fixture, q8);
        static gfile g;
        CHECK(convert(dir, cfg, arch, q8, &g));
        CHECK(write_model_gguf(path, cfg, arch, &g, NULL, 0));
        free_gfile(&g);
        vllm_completion *c = run(path, &fp, &st);
        CHECK_MSG(c != NULL, "%s: %s", path, vllm_last_error());
        const gf_diff d = gf_compare(c, ref, &fp);
        const size_t same = d.same, total = d.total;
        const double maxd = d.max;
        printf("GGUF %-14s %-8s %s: %zu of %zu tokens as the safetensors, max |dlogprob| %.2e\n", fixture, arch,
               q8 ? "Q8_0" : "BF16", same, total, maxd);
        if (!q8) {
            CHECK_MSG(gf_same_run(&d, 1e-6), "%s BF16: %zu of %zu tokens, max |dlogprob| %g, mean %g", fixture, same,
                      total, maxd, d.mean);
        } else {
            /* 8-bit weights (relative error ~0.5% per weight) on logits of std ~8 (tools/make_fixtures.py's
             * peaked embeddings): logprobs within 0.6 where the paths agree (0.22-0.39 seen), most tokens the
             * same; llama.cpp's own reading of such files is the sharper check (the device fixtures) */
            CHECK_MSG(maxd <= 0.6 && same * 10 >= total * 7, "%s Q8_0: %zu of %zu tokens, max |dlogprob| %g", fixture,
                      same, total, maxd);
        }
        if (c) vllm_completions_free(c, fp.n);
        unlink(path);
    }
    if (ref) vllm_completions_free(ref, fp.n);
    fixture_prompts_free(&fp);
    json_decref(cfg);
    json_decref(expected);
}

/* Values the mapping cannot carry are refused, naming the key. */
static void refusals(void) {
    char dir[1024], cfgpath[1200];
    json_error_t err;
    json_t *expected = fixture_load(VLLM_SOURCE_DIR "/tests/fixtures/models", "qwen3_qknorm", dir, sizeof dir, &err);
    if (!expected) return;
    snprintf(cfgpath, sizeof cfgpath, "%s/config.json", dir);
    json_t *cfg = json_load_file(cfgpath, 0, &err);
    static gfile g;
    CHECK(convert(dir, cfg, "qwen3", false, &g));
    char path[256];
    snprintf(path, sizeof path, "/tmp/vllmc_test_gguf_%d_refuse.gguf", (int)getpid());
    struct {
        const char *arch, *key;
        uint32_t val;
        const char *want;
    } cases[] = {
        {"qwen3", "qwen3.rope.dimension_count", 16, "rope.dimension_count"},
        {"qwen3", "qwen3.attention.value_length", 64, "value_length"},
        {"falcon", "falcon.foo", 1, "GGUF architecture 'falcon' is not supported"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        CHECK(write_model_gguf(path, cfg, cases[i].arch, &g, cases[i].key, cases[i].val));
        gguf_file *f = NULL;
        CHECK(gguf_open(path, &f) == VLLM_OK);
        char *json = NULL;
        const vllm_status st = f ? ggc_hf_config(f, "x.gguf", &json) : VLLM_OK;
        CHECK_MSG(st != VLLM_OK && strstr(vllm_last_error(), cases[i].want),
                  "case %zu: status %d, message '%s'", i, (int)st, vllm_last_error());
        free(json);
        gguf_close(f);
        vllm_engine *e = NULL;
        CHECK(vllm_engine_create(path, NULL, &e) != VLLM_OK);
        vllm_engine_free(e);
    }
    free_gfile(&g);
    unlink(path);
    json_decref(cfg);
    json_decref(expected);
}

/* A real file: the tiny random Llama 2 of tests/fixtures/gguf (F16, SentencePiece vocabulary) through the
 * engine: its tokenizer from the metadata (Llama 2's ids for "Hello world", BOS added) and a text prompt's
 * greedy continuation, the same twice. */
static void real_file(void) {
    const char *path = VLLM_SOURCE_DIR "/tests/fixtures/gguf/ollama-llama-2-tiny-random.gguf";
    vllm_engine_options o = vllm_engine_default_options();
    o.num_threads = 2;
    o.max_model_len = 64;
    vllm_engine *e = NULL;
    CHECK_MSG(vllm_engine_create(path, &o, &e) == VLLM_OK, "%s: %s", path, vllm_last_error());
    if (!e) return;
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(vllm_tokenize(e, "Hello world", true, &ids, &n) == VLLM_OK);
    CHECK_MSG(n == 3 && ids[0] == 1 && ids[1] == 15043 && ids[2] == 3186, "ids %zu: %d %d %d", n, n > 0 ? ids[0] : -1,
              n > 1 ? ids[1] : -1, n > 2 ? ids[2] : -1);
    free(ids);
    vllm_prompt p = {.text = "Once upon a time"};
    vllm_sampling_params sp = vllm_sampling_default_params();
    sp.temperature = 0;
    sp.ignore_eos = true;
    sp.max_tokens = 6;
    vllm_completion *a = NULL, *b = NULL;
    CHECK(vllm_generate(e, &p, 1, &sp, false, &a, NULL) == VLLM_OK);
    CHECK(vllm_generate(e, &p, 1, &sp, false, &b, NULL) == VLLM_OK);
    if (a && b) {
        CHECK(a->num_tokens == 6 && b->num_tokens == 6 && a->text != NULL);
        for (size_t j = 0; j < a->num_tokens && j < b->num_tokens; j++) CHECK(a->token_ids[j] == b->token_ids[j]);
    }
    if (a) vllm_completions_free(a, 1);
    if (b) vllm_completions_free(b, 1);
    vllm_engine_free(e);
}

int main(void) {
    real_file();
    run_case("qwen3_qknorm", "qwen3");
    run_case("llama_gqa", "llama");
    run_case("qwen3_moe", "qwen3moe");
    refusals();
    TEST_END();
}
