/*
 * test_gguf_families.c: GGUF files of the gemma2, gemma3 and phi3 architectures run as the safetensors they
 * were made from. The parity fixtures gemma2_softcap, gemma3_local and phi3_longrope are written the way
 * llama.cpp's convert_hf_to_gguf.py writes them (Gemma2Model, Gemma3Model, Phi3MiniModel at b10095): its
 * tensor names (Gemma's post_attention_norm / ffn_norm / post_ffw_norm, phi3's fused attn_qkv and ffn_up),
 * ne innermost first, norms as F32 with Gemma's + 1 added in f32, the lm_head dropped for gemma2, phi3's
 * LongRoPE factors as rope_factors_long / _short F32 tensors, and the metadata keys of each class; through
 * the engine they must give their folders' tokens and logprobs: identical with the BF16 tensors kept, close
 * with Q8_0 matrices. Two differences from the folders are a GGUF's own, and the test says so where it
 * meets them:
 *  - gemma2_softcap's query_pre_attn_scalar (24, head_dim 16) cannot be stored: llama.cpp scales q by
 *    1 / sqrt(head_dim) (1 / sqrt(hidden / heads) for the 27B), so its reference is the folder with 16;
 *  - gemma3_local's layer_types (every 2nd layer global) are not written by Gemma3Model, where llama.cpp
 *    then runs period 6; the file carries gemma3.attention.sliding_window_pattern = 2, which llama.cpp reads
 *    (and the config of a file without it is checked to say period 6).
 * Plus configs the mapping derives (the 27B scale rule, gemma3's linear scaling and local base, phi3's
 * partial rotary) and refusals of what it cannot carry, each naming its key.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf_fixture.h"
#include "loader/gguf_config.h"
#include "loader/safetensors.h"

#ifndef VLLM_SOURCE_DIR
#define VLLM_SOURCE_DIR "."
#endif

#define FIXTURES VLLM_SOURCE_DIR "/tests/fixtures/models"

/* ---- tensors ---- */

/* HF layer suffix -> llama.cpp's name (gguf-py tensor_mapping.py for GEMMA2 / GEMMA3 / PHI3) */
static const char *layer_name(const char *arch, const char *suffix) {
    static const char *gemma[][2] = {
        {"input_layernorm.weight", "attn_norm.weight"},
        {"post_attention_layernorm.weight", "post_attention_norm.weight"},
        {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
        {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
        {"self_attn.q_proj.weight", "attn_q.weight"},
        {"self_attn.k_proj.weight", "attn_k.weight"},
        {"self_attn.v_proj.weight", "attn_v.weight"},
        {"self_attn.o_proj.weight", "attn_output.weight"},
        {"self_attn.q_norm.weight", "attn_q_norm.weight"},
        {"self_attn.k_norm.weight", "attn_k_norm.weight"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"},
        {"mlp.up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"},
    };
    static const char *phi3[][2] = {
        {"input_layernorm.weight", "attn_norm.weight"},   {"post_attention_layernorm.weight", "ffn_norm.weight"},
        {"self_attn.qkv_proj.weight", "attn_qkv.weight"}, {"self_attn.o_proj.weight", "attn_output.weight"},
        {"mlp.gate_up_proj.weight", "ffn_up.weight"},     {"mlp.down_proj.weight", "ffn_down.weight"},
    };
    const bool is_phi3 = !strcmp(arch, "phi3");
    const size_t n = is_phi3 ? sizeof phi3 / sizeof *phi3 : sizeof gemma / sizeof *gemma;
    for (size_t i = 0; i < n; i++) {
        const char *const *m = is_phi3 ? phi3[i] : gemma[i];
        if (!strcmp(suffix, m[0])) return m[1];
    }
    return NULL;
}

static bool ends_with(const char *s, const char *tail) {
    const size_t n = strlen(s), k = strlen(tail);
    return n >= k && !strcmp(s + n - k, tail);
}

/* phi3's rotary size as Phi3MiniModel computes it: int(partial_rotary_factor * hidden) // heads */
static int phi3_rope_dims(const json_t *cfg) {
    const json_t *rp = json_object_get(cfg, "rope_parameters");
    const json_t *prf = json_object_get(rp, "partial_rotary_factor");
    const double f = json_is_number(prf) ? json_number_value(prf) : 1.0;
    const int hidden = (int)json_integer_value(json_object_get(cfg, "hidden_size"));
    return (int)(f * hidden) / (int)json_integer_value(json_object_get(cfg, "num_attention_heads"));
}

/* The fixture's tensors as convert_hf_to_gguf.py stores them. */
static bool convert(const char *dir, const json_t *cfg, const char *arch, bool q8, gfile *g) {
    st_set *st = NULL;
    if (st_open_dir(dir, &st) != VLLM_OK) return false;
    const bool gemma = strncmp(arch, "gemma", 5) == 0;
    for (size_t i = 0; i < st_count(st); i++) {
        const char *name = st_name(st, i);
        const tensor *t = st_find(st, name);
        if (!t || t->dtype != DTYPE_BF16) continue;
        int64_t ne[3] = {1, 1, 1};
        const int nd = t->ndim;
        int64_t n = 1;
        for (int d = 0; d < nd; d++) n *= (ne[d] = t->shape[nd - 1 - d]);
        const uint16_t *bf = t->data;
        char gname[128];
        if (!strcmp(name, "model.embed_tokens.weight")) snprintf(gname, sizeof gname, "token_embd.weight");
        else if (!strcmp(name, "model.norm.weight")) snprintf(gname, sizeof gname, "output_norm.weight");
        else if (!strcmp(name, "lm_head.weight")) {
            if (!strcmp(arch, "gemma2")) continue; /* Gemma2Model.filter_tensors drops it */
            snprintf(gname, sizeof gname, "output.weight");
        } else {
            int l;
            char suffix[128];
            CHECK_MSG(sscanf(name, "model.layers.%d.%127s", &l, suffix) == 2, "unexpected tensor %s", name);
            const char *gn = layer_name(arch, suffix);
            CHECK_MSG(gn != NULL, "no GGUF name for %s", name);
            if (!gn) continue;
            snprintf(gname, sizeof gname, "blk.%d.%s", l, gn);
        }
        if (nd == 1) { /* 1-D tensors are F32; Gemma's norms + 1 (modify_tensors, on the f32 values) */
            float *v = malloc((size_t)n * sizeof *v);
            for (int64_t k = 0; k < n; k++) v[k] = bf16f(bf[k]) + (gemma && ends_with(name, "norm.weight") ? 1.0f : 0.0f);
            put_f32(g, gname, nd, ne, v);
            free(v);
            continue;
        }
        put(g, gname, nd, ne, bf, q8 && strcmp(gname, "token_embd.weight"));
    }
    st_close(st);
    if (!strcmp(arch, "phi3")) { /* Phi3MiniModel.generate_extra_tensors */
        const json_t *rp = json_object_get(cfg, "rope_parameters");
        static const char *lists[2][2] = {{"long_factor", "rope_factors_long.weight"},
                                          {"short_factor", "rope_factors_short.weight"}};
        for (int k = 0; k < 2; k++) {
            const json_t *a = json_object_get(rp, lists[k][0]);
            const int64_t ne[1] = {(int64_t)json_array_size(a)};
            CHECK(ne[0] == phi3_rope_dims(cfg) / 2);
            float v[64];
            for (size_t j = 0; j < json_array_size(a) && j < 64; j++) v[j] = (float)json_number_value(json_array_get(a, j));
            put_f32(g, lists[k][1], 1, ne, v);
        }
    }
    return true;
}


/* ---- metadata ---- */


/* The keys each converter class writes (set_gguf_parameters at b10095) from the fixture's config.json. */
static void metadata(kvlist *l, const json_t *cfg, const char *arch, bool q8) {
    l->n = 0;
    set(l, NULL, "general.architecture", K_STR, 0, arch);
    set(l, NULL, "general.file_type", K_U32, q8 ? 7 : 32, NULL); /* MOSTLY_Q8_0 / MOSTLY_BF16 */
    set(l, arch, "context_length", K_U32, num(cfg, "max_position_embeddings"), NULL);
    set(l, arch, "embedding_length", K_U32, num(cfg, "hidden_size"), NULL);
    set(l, arch, "block_count", K_U32, num(cfg, "num_hidden_layers"), NULL);
    set(l, arch, "feed_forward_length", K_U32, num(cfg, "intermediate_size"), NULL);
    set(l, arch, "attention.head_count", K_U32, num(cfg, "num_attention_heads"), NULL);
    set(l, arch, "attention.head_count_kv", K_U32, num(cfg, "num_key_value_heads"), NULL);
    set(l, arch, "attention.layer_norm_rms_epsilon", K_F32, num(cfg, "rms_norm_eps"), NULL);
    const json_t *rp = json_object_get(cfg, "rope_parameters");
    if (!strcmp(arch, "phi3")) {
        const double orig = num(rp, "original_max_position_embeddings"), max = num(cfg, "max_position_embeddings");
        set(l, arch, "rope.scaling.original_context_length", K_U32, orig, NULL);
        set(l, arch, "rope.dimension_count", K_U32, phi3_rope_dims(cfg), NULL);
        set(l, arch, "rope.freq_base", K_F32, num(rp, "rope_theta"), NULL);
        const json_t *sw = json_object_get(cfg, "sliding_window");
        set(l, arch, "attention.sliding_window", K_U32, json_is_integer(sw) ? json_number_value(sw) : 0, NULL);
        const double scale = max / orig; /* longrope's attn_factor, in Python's doubles */
        set(l, arch, "rope.scaling.attn_factor", K_F32, scale > 1.0 ? sqrt(1.0 + log(scale) / log(orig)) : 1.0, NULL);
        return;
    }
    set(l, arch, "attention.key_length", K_U32, num(cfg, "head_dim"), NULL);
    set(l, arch, "attention.value_length", K_U32, num(cfg, "head_dim"), NULL);
    set(l, arch, "attention.sliding_window", K_U32, num(cfg, "sliding_window"), NULL);
    if (!strcmp(arch, "gemma2")) { /* no rope keys: Gemma2Model does not call TextModel's */
        set(l, arch, "attn_logit_softcapping", K_F32, num(cfg, "attn_logit_softcapping"), NULL);
        set(l, arch, "final_logit_softcapping", K_F32, num(cfg, "final_logit_softcapping"), NULL);
        return;
    }
    set(l, arch, "rope.freq_base", K_F32, num(json_object_get(rp, "full_attention"), "rope_theta"), NULL);
    set(l, arch, "rope.freq_base_swa", K_F32, num(json_object_get(rp, "sliding_attention"), "rope_theta"), NULL);
    const json_t *fs = json_object_get(cfg, "final_logit_softcapping");
    if (json_is_number(fs) && json_number_value(fs) != 0)
        set(l, arch, "final_logit_softcapping", K_F32, json_number_value(fs), NULL);
}


/* ---- the cases ---- */

/* gemma2_softcap's reference: query_pre_attn_scalar 16 (see the top) */
static void qpas16(json_t *cfg) { json_object_set_new(cfg, "query_pre_attn_scalar", json_integer(16)); }

typedef struct fam_case {
    const char *fixture, *arch;
    void (*ref_edit)(json_t *cfg); /* the reference folder's config.json changed by this (NULL: the folder) */
} fam_case;




static void run_case(const fam_case *fc) {
    char dir[1024], refdir[256] = "";
    json_t *expected = NULL, *cfg = load_cfg(FIXTURES, fc->fixture, dir, sizeof dir, &expected);
    if (!cfg) {
        json_decref(expected);
        return;
    }
    fixture_prompts fp;
    fixture_prompts_load(json_object_get(expected, "prompts"), &fp);
    if (fc->ref_edit) CHECK(reference_dir("gfam", dir, cfg, fc->ref_edit, refdir, sizeof refdir));
    vllm_status st;
    vllm_completion *ref = run(fc->ref_edit ? refdir : dir, &fp, &st);
    CHECK_MSG(ref != NULL, "%s: %s", fc->fixture, vllm_last_error());
    for (int q8 = 0; q8 < 2 && ref; q8++) {
        char path[1280];
        snprintf(path, sizeof path, "/tmp/vllmc_test_gfam_%d_%s_%d.gguf", (int)getpid(), fc->fixture, q8);
        static gfile g;
        static kvlist l;
        char conv[1200];
        const bool theirs = !q8 && gf_converted(fc->fixture, conv, sizeof conv); /* llama.cpp's converter's */
        if (theirs) {
            snprintf(path, sizeof path, "%s", conv);
        } else {
            CHECK(convert(dir, cfg, fc->arch, q8, &g));
            metadata(&l, cfg, fc->arch, q8);
            if (!strcmp(fc->arch, "gemma3")) /* layer_types: every 2nd layer global (see the top) */
                set(&l, "gemma3", "attention.sliding_window_pattern", K_U32, 2, NULL);
            CHECK(write_gguf(path, &l, &g));
            free_gfile(&g);
        }
        vllm_completion *c = run(path, &fp, &st);
        CHECK_MSG(c != NULL, "%s: %s", path, vllm_last_error());
        const gf_diff d = gf_compare(c, ref, &fp);
        const size_t same = d.same, total = d.total;
        const double maxd = d.max;
        printf("GGUF %-15s %-7s %s: %zu of %zu tokens as the safetensors%s, max |dlogprob| %.2e (mean %.1e)\n",
               fc->fixture, fc->arch, q8 ? "Q8_0" : "BF16", same, total,
               fc->ref_edit ? " (query_pre_attn_scalar 16)" : "", maxd, d.mean);
        if (!q8)
            CHECK_MSG(c && gf_same_run(&d, 1e-6), "%s BF16: %zu of %zu tokens, max |dlogprob| %g, mean %g",
                      fc->fixture, same, total, maxd, d.mean);
        else /* 8-bit matrices on logits of std ~8 (test_gguf_model.c's bound, 0.08-0.6 seen here) */
            CHECK_MSG(c && maxd <= 0.8 && same * 10 >= total * 7, "%s Q8_0: %zu of %zu tokens, max |dlogprob| %g",
                      fc->fixture, same, total, maxd);
        if (theirs) printf("   (the file of llama.cpp's convert_hf_to_gguf.py: %s)\n", path);
        if (c) vllm_completions_free(c, fp.n);
        if (!theirs) unlink(path);
    }
    if (ref) vllm_completions_free(ref, fp.n);
    if (fc->ref_edit) remove_reference_dir(refdir);
    fixture_prompts_free(&fp);
    json_decref(cfg);
    json_decref(expected);
}

/* ---- configs and refusals on small files ---- */


static bool small_open(small *s, const char *fixture, const char *arch) {
    char dir[1024];
    s->g.n = 0;
    s->cfg = load_cfg(FIXTURES, fixture, dir, sizeof dir, &s->expected);
    snprintf(s->path, sizeof s->path, "/tmp/vllmc_test_gfam_%d_small_%s.gguf", (int)getpid(), arch);
    return s->cfg && convert(dir, s->cfg, arch, false, &s->g);
}



static const char *layer_type(const json_t *cfg, size_t i) {
    return json_string_value(json_array_get(json_object_get(cfg, "layer_types"), i));
}

/* What the mapping derives where the file says less than the config.json did. */
static void derived_configs(void) {
    static small s;
    static kvlist l;
    vllm_status st;
    if (small_open(&s, "gemma2_softcap", "gemma2")) {
        /* the 27B rule: 46 layers -> hidden / heads (16), else key_length (32 here) */
        metadata(&l, s.cfg, "gemma2", false);
        set(&l, "gemma2", "attention.key_length", K_U32, 32, NULL);
        set(&l, "gemma2", "attention.value_length", K_U32, 32, NULL);
        CHECK(write_gguf(s.path, &l, &s.g));
        json_t *c = config_of(s.path, &st);
        CHECK_MSG(c && json_integer_value(json_object_get(c, "query_pre_attn_scalar")) == 32, "%s", vllm_last_error());
        CHECK(c && json_is_true(json_object_get(c, "tie_word_embeddings")));
        CHECK(c && !strcmp(json_string_value(json_object_get(c, "hidden_activation")), "gelu_pytorch_tanh"));
        CHECK(c && layer_type(c, 0) && !strcmp(layer_type(c, 0), "sliding_attention") &&
              !strcmp(layer_type(c, 1), "full_attention"));
        json_decref(c);
        set(&l, "gemma2", "block_count", K_U32, 46, NULL);
        CHECK(write_gguf(s.path, &l, &s.g));
        c = config_of(s.path, &st);
        CHECK_MSG(c && json_integer_value(json_object_get(c, "query_pre_attn_scalar")) == 16, "%s", vllm_last_error());
        json_decref(c);
        /* llama.cpp's defaults for absent softcaps and window: 50, 30, 4096 */
        metadata(&l, s.cfg, "gemma2", false);
        set(&l, "gemma2", "attn_logit_softcapping", K_DEL, 0, NULL);
        set(&l, "gemma2", "final_logit_softcapping", K_DEL, 0, NULL);
        set(&l, "gemma2", "attention.sliding_window", K_DEL, 0, NULL);
        CHECK(write_gguf(s.path, &l, &s.g));
        c = config_of(s.path, &st);
        CHECK(c && num(c, "attn_logit_softcapping") == 50.0 && num(c, "final_logit_softcapping") == 30.0 &&
              json_integer_value(json_object_get(c, "sliding_window")) == 4096);
        json_decref(c);
        small_close(&s);
    }
    if (small_open(&s, "gemma3_local", "gemma3")) {
        /* as Gemma3Model writes it (no pattern): llama.cpp's period 6, so all 4 layers slide; the local base
         * from rope.freq_base_swa, no final softcap */
        metadata(&l, s.cfg, "gemma3", false);
        CHECK(write_gguf(s.path, &l, &s.g));
        json_t *c = config_of(s.path, &st);
        CHECK_MSG(c != NULL, "%s", vllm_last_error());
        for (size_t i = 0; c && i < 4; i++) CHECK(layer_type(c, i) && !strcmp(layer_type(c, i), "sliding_attention"));
        CHECK(c && num(c, "rope_local_base_freq") == 10000.0 && num(c, "rope_theta") == 1e6);
        CHECK(c && json_is_null(json_object_get(c, "final_logit_softcapping")));
        CHECK(c && json_integer_value(json_object_get(c, "query_pre_attn_scalar")) == 32);
        json_decref(c);
        /* the 4B+ models: linear scaling 8 on the global layers (the local ones keep 10000, unscaled: the
         * architecture file's rope_local_base_freq); no rope.freq_base_swa -> 10000; no window -> all global */
        set(&l, "gemma3", "rope.scaling.type", K_STR, 0, "linear");
        set(&l, "gemma3", "rope.scaling.factor", K_F32, 8.0, NULL);
        set(&l, "gemma3", "rope.freq_base_swa", K_DEL, 0, NULL);
        set(&l, "gemma3", "attention.sliding_window", K_DEL, 0, NULL);
        CHECK(write_gguf(s.path, &l, &s.g));
        c = config_of(s.path, &st);
        const json_t *rs = c ? json_object_get(c, "rope_scaling") : NULL;
        CHECK_MSG(rs && !strcmp(json_string_value(json_object_get(rs, "rope_type")), "linear") &&
                      num(rs, "factor") == 8.0, "%s", vllm_last_error());
        CHECK(c && num(c, "rope_local_base_freq") == 10000.0);
        for (size_t i = 0; c && i < 4; i++) CHECK(layer_type(c, i) && !strcmp(layer_type(c, i), "full_attention"));
        json_decref(c);
        small_close(&s);
    }
    if (small_open(&s, "phi3_longrope", "phi3")) {
        /* partial rotary (Phi-4-mini: 0.75): rope.dimension_count 12 of head 16, without long factors */
        metadata(&l, s.cfg, "phi3", false);
        set(&l, "phi3", "rope.dimension_count", K_U32, 12, NULL);
        set(&l, "phi3", "rope.scaling.attn_factor", K_DEL, 0, NULL);
        drop_tensor(&s.g, "rope_factors_long.weight");
        drop_tensor(&s.g, "rope_factors_short.weight");
        CHECK(write_gguf(s.path, &l, &s.g));
        json_t *c = config_of(s.path, &st);
        CHECK_MSG(c && num(c, "partial_rotary_factor") == 0.75 && !json_object_get(c, "rope_scaling"), "%s",
                  vllm_last_error());
        CHECK(c && json_is_false(json_object_get(c, "tie_word_embeddings")));
        CHECK(c && json_is_null(json_object_get(c, "sliding_window")));
        json_decref(c);
        /* a window is the model's (HF's Phi3Attention on every layer) */
        set(&l, "phi3", "attention.sliding_window", K_U32, 2047, NULL);
        CHECK(write_gguf(s.path, &l, &s.g));
        c = config_of(s.path, &st);
        CHECK(c && json_integer_value(json_object_get(c, "sliding_window")) == 2047);
        json_decref(c);
        small_close(&s);
    }
}

typedef struct refusal {
    const char *fixture, *arch;
    const char *suffix; /* the key set (NULL: none) */
    kind k;
    double v;
    const char *s;
    const char *drop; /* a tensor left out (NULL: none) */
    const char *want; /* in the message */
} refusal;

static void refusals(void) {
    static const refusal cases[] = {
        {"gemma2_softcap", "gemma2", "rope.freq_base_swa", K_F32, 500000.0, NULL, NULL, "gemma2.rope.freq_base_swa"},
        {"gemma2_softcap", "gemma2", "attention.scale", K_F32, 0.2, NULL, NULL, "gemma2.attention.scale"},
        {"gemma2_softcap", "gemma2", "attention.sliding_window", K_U32, 0, NULL, NULL, "gemma2.attention.sliding_window"},
        {"gemma2_softcap", "gemma2", "attn_logit_softcapping", K_F32, 0, NULL, NULL, "gemma2.attn_logit_softcapping"},
        {"gemma2_softcap", "gemma2", "rope.dimension_count", K_U32, 8, NULL, NULL, "gemma2.rope.dimension_count"},
        {"gemma3_local", "gemma3", "attn_logit_softcapping", K_F32, 50.0, NULL, NULL, "gemma3.attn_logit_softcapping"},
        {"gemma3_local", "gemma3", "attention.sliding_window_pattern", K_BOOLS, 4, NULL, NULL,
         "gemma3.attention.sliding_window_pattern"},
        {"gemma3_local", "gemma3", "rope.scaling.attn_factor", K_F32, 1.2, NULL, NULL, "gemma3.rope.scaling.attn_factor"},
        {"phi3_longrope", "phi3", NULL, K_U32, 0, NULL, "rope_factors_short.weight", "rope_factors_short.weight"},
        {"phi3_longrope", "phi3", "rope.scaling.type", K_STR, 0, "yarn", NULL, "phi3.rope.scaling.type"},
        {"phi3_longrope", "phi3", "rope.dimension_count", K_U32, 12, NULL, NULL, "rope_factors_long.weight"},
        {"phi3_longrope", "phi3", "attention.value_length", K_U32, 8, NULL, NULL, "phi3.attention.value_length"},
        {"phi3_longrope", "phi3", NULL, K_U32, 0, NULL, "blk.0.attn_qkv.weight", "attn_qkv"},
    };
    static small s;
    static kvlist l;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const refusal *r = &cases[i];
        if (!small_open(&s, r->fixture, r->arch)) {
            small_close(&s);
            continue;
        }
        metadata(&l, s.cfg, r->arch, false);
        if (r->suffix) set(&l, r->arch, r->suffix, r->k, r->v, r->s);
        if (r->drop) drop_tensor(&s.g, r->drop);
        CHECK(write_gguf(s.path, &l, &s.g));
        vllm_status st;
        json_t *c = config_of(s.path, &st);
        CHECK_MSG(!c && st != VLLM_OK && strstr(vllm_last_error(), r->want), "case %zu (%s): status %d, message '%s'",
                  i, r->want, (int)st, vllm_last_error());
        json_decref(c);
        vllm_engine *e = NULL;
        CHECK(vllm_engine_create(s.path, NULL, &e) != VLLM_OK);
        vllm_engine_free(e);
        small_close(&s);
    }
}

int main(void) {
    static const fam_case cases[] = {
        {"gemma2_softcap", "gemma2", qpas16},
        {"gemma3_local", "gemma3", NULL},
        {"phi3_longrope", "phi3", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(&cases[i]);
    derived_configs();
    refusals();
    TEST_END();
}
