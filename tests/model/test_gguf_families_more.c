/*
 * test_gguf_families_more.c: the GGUF families after test_gguf_families.c's gemma / phi3 (and test_gguf_model.c's
 * llama / qwen3 / qwen3moe): Llama 3 (rope_freqs), Mixtral (a llama file with experts), Qwen2-MoE, gpt-oss, OLMo-2,
 * Granite, GLM-4, DeepSeek-V2 / V3 and the gated delta-net hybrids (Qwen3-Next, Qwen3.5, Qwen3.5-MoE) run as the
 * safetensors they were made from. The parity fixtures llama3_mqa_tied, mixtral_moe, qwen2_moe_shared, gptoss_moe,
 * olmo2_postnorm, granite_mult, glm4_partial, deepseek_v2_lite, deepseek_v2_yarn, deepseek_v3, qwen3_next, qwen3_5 and
 * qwen3_5_moe are written the way llama.cpp's convert_hf_to_gguf.py writes them at b10095 (LlamaModel, GraniteModel,
 * Qwen2MoeModel, GptOssModel, Olmo2Model, Glm4Model, DeepseekV2Model (kv_b_proj split into attn_k_b / attn_v_b,
 * head_count_kv 1 and the absorbed key / value lengths; also as a file from before that, one attn_kv_b),
 * Qwen3NextModel, Qwen3_5TextModel, TextModel.prepare_tensors; the hybrids: in_proj_qkvz
 * split into attn_qkv and attn_gate, qwen35's value heads tiled in attn_qkv / attn_gate / ssm_beta / ssm_alpha /
 * ssm_a / ssm_dt / ssm_conv1d rows and ssm_out columns, A_log as -exp(A_log), conv1d squeezed, the 1 + w norms
 * stored with the 1, layer kinds by interval or attention.recurrent_layers): its tensor names, ne innermost first,
 * llama's q / k rows permuted, each layer's experts merged into (E, out, in) tensors (or, as --fuse-gate-up-exps
 * does, gate and up into one ffn_gate_up_exps; gpt-oss's interleaved gate_up_proj split into its even and odd
 * outputs, weights and biases), routers and the shared expert's gate in F32, 1-D tensors and biases in F32, llama3
 * rope scaling as the rope_freqs tensor of LlamaModel.generate_extra_tensors, and the metadata keys of
 * TextModel.set_gguf_parameters and the classes. Through the engine they must give their folders' tokens and
 * logprobs: identical with the BF16 tensors kept or MXFP4 experts (gpt-oss's released form; the reference folder then
 * holds the experts' MXFP4 round trip, and ggml's MXFP4 dequantisation is checked bit for bit against the
 * safetensors MXFP4 reader), close with Q8_0 matrices. Two differences from a folder are the GGUF's own, so the
 * reference is the folder changed to match: mixtral_moe's sliding_window (16) is not
 * written (llama.cpp's llama graph has none), and llama.cpp rounds YaRN's correction range outwards (gptoss_moe's
 * truncate false becomes true).
 * Plus the configs the mapping derives (qwen2moe's defaults) and its refusals, each naming its key.
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
#include "model/mxfp4.h"

#ifndef VLLM_SOURCE_DIR
#define VLLM_SOURCE_DIR "."
#endif

#define FIXTURES VLLM_SOURCE_DIR "/tests/fixtures/models"

/* ---- tensors ---- */

/* HF layer suffix -> llama.cpp's name (gguf-py tensor_mapping.py) and whether the converter keeps it F32
 * (TextModel.prepare_tensors: FFN_GATE_INP, FFN_GATE_INP_SHEXP; 1-D tensors are F32 anyway) */
static const struct {
    const char *hf, *gguf;
    bool f32;
} NAMES[] = {
    {"input_layernorm.weight", "attn_norm.weight", true},
    {"post_attention_layernorm.weight", "ffn_norm.weight", true},
    {"self_attn.q_proj.weight", "attn_q.weight", false},
    {"self_attn.k_proj.weight", "attn_k.weight", false},
    {"self_attn.v_proj.weight", "attn_v.weight", false},
    {"self_attn.o_proj.weight", "attn_output.weight", false},
    {"self_attn.q_proj.bias", "attn_q.bias", true},
    {"self_attn.k_proj.bias", "attn_k.bias", true},
    {"self_attn.v_proj.bias", "attn_v.bias", true},
    {"self_attn.o_proj.bias", "attn_output.bias", true},
    {"self_attn.sinks", "attn_sinks.weight", true},
    {"mlp.router.weight", "ffn_gate_inp.weight", true},
    {"mlp.router.bias", "ffn_gate_inp.bias", true},
    {"self_attn.q_norm.weight", "attn_q_norm.weight", true},
    {"self_attn.k_norm.weight", "attn_k_norm.weight", true},
    {"post_self_attn_layernorm.weight", "post_attention_norm.weight", true}, /* GLM-4 */
    {"post_mlp_layernorm.weight", "post_ffw_norm.weight", true},             /* GLM-4 */
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight", true},     /* OLMo-2 */
    {"mlp.gate_up_proj.weight", "ffn_up.weight", false},                     /* GLM-4: gate | up, kept fused */
    {"self_attn.q_a_proj.weight", "attn_q_a.weight", false},               /* DeepSeek */
    {"self_attn.q_a_layernorm.weight", "attn_q_a_norm.weight", true},
    {"self_attn.q_b_proj.weight", "attn_q_b.weight", false},
    {"self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight", false},
    {"self_attn.kv_a_layernorm.weight", "attn_kv_a_norm.weight", true},
    {"mlp.gate.e_score_correction_bias", "exp_probs_b.bias", true},
    {"mlp.shared_experts.gate_proj.weight", "ffn_gate_shexp.weight", false},
    {"mlp.shared_experts.up_proj.weight", "ffn_up_shexp.weight", false},
    {"mlp.shared_experts.down_proj.weight", "ffn_down_shexp.weight", false},
    {"mlp.gate_proj.weight", "ffn_gate.weight", false},
    {"mlp.up_proj.weight", "ffn_up.weight", false},
    {"mlp.down_proj.weight", "ffn_down.weight", false},
    {"mlp.gate.weight", "ffn_gate_inp.weight", true},
    {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight", true},
    {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight", false},
    {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight", false},
    {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight", false},
    {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight", true},
};

typedef struct fcase {
    const char *fixture, *arch;
    bool fuse_gate_up; /* the experts' gate and up as one ffn_gate_up_exps; gpt-oss: its experts in MXFP4 */
    void (*ref_edit)(json_t *cfg); /* the reference folder's config.json changed by this (NULL: the folder) */
    bool legacy;                   /* deepseek2: a file from before llama.cpp's MLA (one attn_kv_b, per-head sizes) */
} fcase;

static void no_window(json_t *cfg) { json_object_del(cfg, "sliding_window"); }
static void yarn_truncated(json_t *cfg) {
    json_object_set_new(json_object_get(cfg, "rope_parameters"), "truncate", json_true());
}

static void put_bf16_as_f32(gfile *g, const char *name, int nd, const int64_t *ne, const uint16_t *bf) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= ne[d];
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t k = 0; k < n; k++) v[k] = bf16f(bf[k]);
    put_f32(g, name, nd, ne, v);
    free(v);
}

/* LlamaModel.permute: GGUF row h hd + 2 i + s <- HF row h hd + s hd/2 + i */
static uint16_t *permuted(const uint16_t *bf, int64_t rows, int64_t cols, int heads) {
    const int64_t hd = rows / heads;
    uint16_t *p = malloc((size_t)(rows * cols) * 2);
    for (int64_t r = 0; r < rows; r++) {
        const int64_t h = r / hd, j = r % hd, i = j / 2, s = j % 2;
        memcpy(p + r * cols, bf + (h * hd + s * (hd / 2) + i) * cols, (size_t)cols * 2);
    }
    return p;
}

static int cfg_int(const json_t *cfg, const char *key) { return (int)json_integer_value(json_object_get(cfg, key)); }

/* the experts of layer l: (E, out, in) per projection, or gate | up rows as one tensor */
static void merge_experts(gfile *g, st_set *st, const fcase *fc, int l, int experts, bool q8) {
    const bool mixtral = !strcmp(fc->arch, "llama");
    const char *pre = mixtral ? "block_sparse_moe.experts" : "mlp.experts";
    static const char *hf[2][3] = {{"gate_proj", "up_proj", "down_proj"}, {"w1", "w3", "w2"}};
    static const char *gg[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    uint16_t *gate_up = NULL;
    const char *mp = st_find(st, "model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
    for (int p = 0; p < 3; p++) {
        char name[192];
        snprintf(name, sizeof name, "%slayers.%d.%s.0.%s.weight", mp, l, pre, hf[mixtral][p]);
        const tensor *t0 = st_find(st, name);
        CHECK_MSG(t0 != NULL, "%s missing", name);
        if (!t0) return;
        const int64_t out = t0->shape[0], in = t0->shape[1];
        uint16_t *all = malloc((size_t)(experts * out * in) * 2);
        for (int e = 0; e < experts; e++) {
            snprintf(name, sizeof name, "%slayers.%d.%s.%d.%s.weight", mp, l, pre, e, hf[mixtral][p]);
            const tensor *t = st_find(st, name);
            CHECK(t && t->shape[0] == out && t->shape[1] == in);
            if (t) memcpy(all + (size_t)e * out * in, t->data, (size_t)(out * in) * 2);
        }
        char gname[128];
        if (fc->fuse_gate_up && p < 2) { /* torch.cat([gate, up], dim=1): (E, 2 out, in) */
            if (p == 0) {
                gate_up = malloc((size_t)(experts * 2 * out * in) * 2);
                for (int e = 0; e < experts; e++)
                    memcpy(gate_up + (size_t)e * 2 * out * in, all + (size_t)e * out * in, (size_t)(out * in) * 2);
            } else {
                for (int e = 0; e < experts; e++)
                    memcpy(gate_up + (size_t)e * 2 * out * in + out * in, all + (size_t)e * out * in,
                           (size_t)(out * in) * 2);
                snprintf(gname, sizeof gname, "blk.%d.ffn_gate_up_exps.weight", l);
                const int64_t ne[3] = {in, 2 * out, experts};
                put(g, gname, 3, ne, gate_up, q8);
                free(gate_up);
            }
            free(all);
            continue;
        }
        snprintf(gname, sizeof gname, "blk.%d.%s.weight", l, gg[p]);
        const int64_t ne[3] = {in, out, experts};
        put(g, gname, 3, ne, all, q8);
        free(all);
    }
}

/* LlamaModel.generate_extra_tensors for rope_type llama3: one factor per rotated pair, in Python's doubles,
 * stored as F32 */
static void rope_freqs(gfile *g, const json_t *cfg) {
    const json_t *rp = json_object_get(cfg, "rope_parameters");
    const int dim = cfg_int(cfg, "head_dim");
    const double base = num(rp, "rope_theta"), factor = num(rp, "factor"), lf = num(rp, "low_freq_factor"),
                 hf = num(rp, "high_freq_factor"), old = num(rp, "original_max_position_embeddings");
    const double low_wl = old / lf, high_wl = old / hf;
    float v[256];
    for (int i = 0; i < dim / 2; i++) {
        const double freq = (double)(1.0f / powf((float)base, (float)(2 * i) / (float)dim)); /* torch f32 */
        const double wl = 2 * M_PI / freq;
        if (wl < high_wl) v[i] = 1.0f;
        else if (wl > low_wl) v[i] = (float)factor;
        else {
            const double smooth = (old / wl - lf) / (hf - lf);
            v[i] = (float)(1.0 / ((1 - smooth) / factor + smooth));
        }
    }
    const int64_t ne[1] = {dim / 2};
    put_f32(g, "rope_freqs.weight", 1, ne, v);
}


/* GptOssModel.modify_tensors on a bf16 checkpoint: gate_up_proj (E, D, 2I) transposed to (E, 2I, D), its even
 * rows the gate, odd rows up; down_proj (E, I, D) transposed to (E, D, I); the biases split alike, F32 */
static void gptoss_experts(gfile *g, st_set *st, int l, bool mxfp4, bool q8) {
    char name[160], gname[128];
    snprintf(name, sizeof name, "model.layers.%d.mlp.experts.gate_up_proj", l);
    const tensor *gu = st_find(st, name);
    snprintf(name, sizeof name, "model.layers.%d.mlp.experts.down_proj", l);
    const tensor *dn = st_find(st, name);
    snprintf(name, sizeof name, "model.layers.%d.mlp.experts.gate_up_proj_bias", l);
    const tensor *gub = st_find(st, name);
    snprintf(name, sizeof name, "model.layers.%d.mlp.experts.down_proj_bias", l);
    const tensor *dnb = st_find(st, name);
    CHECK(gu && dn && gub && dnb);
    if (!gu || !dn || !gub || !dnb) return;
    const int64_t E = gu->shape[0], D = gu->shape[1], I = gu->shape[2] / 2;
    const uint16_t *G = gu->data, *Dn = dn->data, *GB = gub->data, *DB = dnb->data;
    uint16_t *w = malloc((size_t)(E * I * D) * 2);
    float *b = malloc((size_t)(E * (I > D ? I : D)) * sizeof *b);
    static const char *gg[2] = {"ffn_gate_exps", "ffn_up_exps"};
    for (int h = 0; h < 2; h++) { /* h 0: gate (even), 1: up (odd) */
        for (int64_t e = 0; e < E; e++)
            for (int64_t i = 0; i < I; i++) {
                for (int64_t d = 0; d < D; d++) w[(e * I + i) * D + d] = G[(e * D + d) * 2 * I + 2 * i + h];
                b[e * I + i] = bf16f(GB[e * 2 * I + 2 * i + h]);
            }
        const int64_t ne[3] = {D, I, E}, nb[2] = {I, E};
        snprintf(gname, sizeof gname, "blk.%d.%s.weight", l, gg[h]);
        if (mxfp4) put_as(g, gname, 3, ne, w, GGML_TYPE_MXFP4); /* (as llama-quantize would requantize) */
        else put(g, gname, 3, ne, w, q8);
        snprintf(gname, sizeof gname, "blk.%d.%s.bias", l, gg[h]);
        put_f32(g, gname, 2, nb, b);
    }
    for (int64_t e = 0; e < E; e++)
        for (int64_t d = 0; d < D; d++) {
            for (int64_t i = 0; i < I; i++) w[(e * D + d) * I + i] = Dn[(e * I + i) * D + d];
            b[e * D + d] = bf16f(DB[e * D + d]);
        }
    const int64_t ne[3] = {I, D, E}, nb[2] = {D, E};
    snprintf(gname, sizeof gname, "blk.%d.ffn_down_exps.weight", l);
    if (mxfp4) put_as(g, gname, 3, ne, w, GGML_TYPE_MXFP4); /* (as llama-quantize would requantize) */
    else put(g, gname, 3, ne, w, q8);
    snprintf(gname, sizeof gname, "blk.%d.ffn_down_exps.bias", l);
    put_f32(g, gname, 2, nb, b);
    free(w);
    free(b);
}

/* ---- the gated delta-net hybrids (Qwen3NextModel, _LinearAttentionVReorderBase) ---- */

typedef struct hyb {
    int64_t hk, r, dk, dv; /* key heads, value heads per key head, their sizes */
    bool tiled;            /* qwen35*: value heads reordered */
} hyb;

/* _reorder_v_heads over n units of `unit` contiguous values (rows of a matrix, or elements): from index off, HF
 * head h = g r + j (hs units each) goes to slot j hk + g */
static void vreorder(uint16_t *v, int64_t off, const hyb *h, int64_t hs, int64_t unit) {
    const int64_t n = h->hk * h->r * hs * unit;
    uint16_t *tmp = malloc((size_t)n * 2);
    for (int64_t g = 0; g < h->hk; g++)
        for (int64_t j = 0; j < h->r; j++)
            memcpy(tmp + ((j * h->hk + g) * hs) * unit, v + (off + (g * h->r + j) * hs) * unit, (size_t)(hs * unit) * 2);
    memcpy(v + off * unit, tmp, (size_t)n * 2);
    free(tmp);
}

/* one HF tensor of a hybrid layer (suffix after "layers.l.") as the converter writes it; false: not one of these */
static bool hybrid_tensor(gfile *g, const hyb *h, int l, const char *suffix, const tensor *t, bool q8) {
    int64_t ne[3] = {1, 1, 1};
    const int nd = t->ndim;
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= (ne[d] = t->shape[nd - 1 - d]);
    uint16_t *v = malloc((size_t)n * 2);
    memcpy(v, t->data, (size_t)n * 2);
    char gname[128];
    const int64_t kd = h->hk * h->dk;
    bool done = true;
#define NAME(x) snprintf(gname, sizeof gname, "blk.%d.%s", l, x)
    if (!strcmp(suffix, "linear_attn.A_log") || !strcmp(suffix, "linear_attn.dt_bias")) {
        if (h->tiled) vreorder(v, 0, h, 1, 1);
        float *f = malloc((size_t)n * sizeof *f);
        const bool a = strstr(suffix, "A_log") != NULL;
        for (int64_t i = 0; i < n; i++) f[i] = a ? -expf(bf16f(v[i])) : bf16f(v[i]); /* -torch.exp in f32 */
        NAME(a ? "ssm_a" : "ssm_dt.bias");
        put_f32(g, gname, 1, ne, f);
        free(f);
    } else if (!strcmp(suffix, "linear_attn.conv1d.weight")) { /* (C, 1, K) squeezed to (C, K), F32 */
        if (h->tiled) vreorder(v, 2 * kd, h, h->dv, t->shape[2]);
        const int64_t ne2[2] = {t->shape[2], t->shape[0]};
        NAME("ssm_conv1d.weight");
        put_bf16_as_f32(g, gname, 2, ne2, v);
    } else if (!strcmp(suffix, "linear_attn.norm.weight")) {
        NAME("ssm_norm.weight");
        put_bf16_as_f32(g, gname, 1, ne, v);
    } else if (!strcmp(suffix, "linear_attn.out_proj.weight")) { /* columns reordered */
        if (h->tiled)
            for (int64_t r = 0; r < ne[1]; r++) vreorder(v + r * ne[0], 0, h, h->dv, 1);
        NAME("ssm_out.weight");
        put(g, gname, 2, ne, v, q8);
    } else if (!strcmp(suffix, "linear_attn.in_proj_qkv.weight")) {
        if (h->tiled) vreorder(v, 2 * kd, h, h->dv, ne[0]);
        NAME("attn_qkv.weight");
        put(g, gname, 2, ne, v, q8);
    } else if (!strcmp(suffix, "linear_attn.in_proj_z.weight") || !strcmp(suffix, "linear_attn.in_proj_b.weight") ||
               !strcmp(suffix, "linear_attn.in_proj_a.weight")) {
        const bool z = strstr(suffix, "_z.") != NULL;
        if (h->tiled) vreorder(v, 0, h, z ? h->dv : 1, ne[0]);
        NAME(z ? "attn_gate.weight" : strstr(suffix, "_b.") ? "ssm_beta.weight" : "ssm_alpha.weight");
        put(g, gname, 2, ne, v, q8);
    } else if (!strcmp(suffix, "linear_attn.in_proj_ba.weight")) {
        NAME("ssm_ba.weight");
        put(g, gname, 2, ne, v, q8);
    } else if (!strcmp(suffix, "linear_attn.in_proj_qkvz.weight")) { /* de-interleaved per key head */
        const int64_t D = ne[0], vr = h->r * h->dv, G = 2 * h->dk + 2 * vr, vd = h->hk * vr;
        uint16_t *qkv = malloc((size_t)((2 * kd + vd) * D) * 2), *zz = malloc((size_t)(vd * D) * 2);
        for (int64_t gi = 0; gi < h->hk; gi++) {
            const uint16_t *grp = v + gi * G * D;
            memcpy(qkv + (gi * h->dk) * D, grp, (size_t)(h->dk * D) * 2);
            memcpy(qkv + (kd + gi * h->dk) * D, grp + h->dk * D, (size_t)(h->dk * D) * 2);
            memcpy(qkv + (2 * kd + gi * vr) * D, grp + 2 * h->dk * D, (size_t)(vr * D) * 2);
            memcpy(zz + (gi * vr) * D, grp + (2 * h->dk + vr) * D, (size_t)(vr * D) * 2);
        }
        const int64_t ne1[2] = {D, 2 * kd + vd}, ne2[2] = {D, vd};
        NAME("attn_qkv.weight");
        put(g, gname, 2, ne1, qkv, q8);
        NAME("attn_gate.weight");
        put(g, gname, 2, ne2, zz, q8);
        free(qkv);
        free(zz);
    } else if (!strcmp(suffix, "input_layernorm.weight") || !strcmp(suffix, "post_attention_layernorm.weight") ||
               !strcmp(suffix, "self_attn.q_norm.weight") || !strcmp(suffix, "self_attn.k_norm.weight")) {
        float *f = malloc((size_t)n * sizeof *f); /* + 1 in f32 */
        for (int64_t i = 0; i < n; i++) f[i] = bf16f(v[i]) + 1.0f;
        NAME(suffix[0] == 'i'                ? "attn_norm.weight"
             : suffix[0] == 'p'              ? "post_attention_norm.weight"
             : strstr(suffix, "q_norm") ? "attn_q_norm.weight"
                                             : "attn_k_norm.weight");
        put_f32(g, gname, 1, ne, f);
        free(f);
    } else {
        done = false;
    }
#undef NAME
    free(v);
    return done;
}

static bool convert(const char *dir, const json_t *cfg, const fcase *fc, bool q8, gfile *g) {
    st_set *st = NULL;
    if (st_open_dir(dir, &st) != VLLM_OK) return false;
    const bool llama = !strcmp(fc->arch, "llama"), gptoss = !strcmp(fc->arch, "gpt-oss");
    const bool olmo2 = !strcmp(fc->arch, "olmo2"), permute = llama || !strcmp(fc->arch, "granite");
    const bool hybrid = !strncmp(fc->arch, "qwen3next", 9) || !strncmp(fc->arch, "qwen35", 6);
    const json_t *tc = json_object_get(cfg, "text_config") ? json_object_get(cfg, "text_config") : cfg;
    const hyb hy = {cfg_int(tc, "linear_num_key_heads"),
                    cfg_int(tc, "linear_num_value_heads") / (cfg_int(tc, "linear_num_key_heads") | !hybrid),
                    cfg_int(tc, "linear_key_head_dim"), cfg_int(tc, "linear_value_head_dim"),
                    !strncmp(fc->arch, "qwen35", 6)};
    const int heads = cfg_int(cfg, "num_attention_heads"), kv_heads = cfg_int(cfg, "num_key_value_heads");
    g->n = 0;
    for (size_t i = 0; i < st_count(st); i++) {
        const char *name0 = st_name(st, i);
        const tensor *t = st_find(st, name0);
        if (!t || t->dtype != DTYPE_BF16 || !strncmp(name0, "model.visual.", 13)) continue; /* vision: dropped */
        char name[256]; /* the text model's "model.language_model." as "model." (base.py) */
        snprintf(name, sizeof name, "%s%s", !strncmp(name0, "model.language_model.", 21) ? "model." : "",
                 !strncmp(name0, "model.language_model.", 21) ? name0 + 21 : name0);
        int64_t ne[3] = {1, 1, 1};
        const int nd = t->ndim;
        for (int d = 0; d < nd; d++) ne[d] = t->shape[nd - 1 - d];
        const uint16_t *bf = t->data;
        char gname[128];
        bool f32 = nd == 1;
        if (!strcmp(name, "model.embed_tokens.weight")) snprintf(gname, sizeof gname, "token_embd.weight");
        else if (!strcmp(name, "model.norm.weight")) {
            snprintf(gname, sizeof gname, "output_norm.weight");
            if (hybrid) { /* + 1 */
                float v[1024];
                for (int64_t k = 0; k < ne[0] && k < 1024; k++) v[k] = bf16f(bf[k]) + 1.0f;
                put_f32(g, gname, 1, ne, v);
                continue;
            }
        } else if (!strcmp(name, "lm_head.weight")) snprintf(gname, sizeof gname, "output.weight");
        else {
            int l;
            char suffix[160];
            CHECK_MSG(sscanf(name, "model.layers.%d.%159s", &l, suffix) == 2, "unexpected tensor %s", name);
            if (strstr(suffix, "experts.") && !strstr(suffix, "shared_expert")) continue; /* merged below */
            if (hybrid && hybrid_tensor(g, &hy, l, suffix, t, q8)) continue;
            if (!strcmp(suffix, "self_attn.kv_b_proj.weight")) { /* DeepseekV2Model: split unless legacy */
                char kn[96];
                if (fc->legacy) {
                    snprintf(kn, sizeof kn, "blk.%d.attn_kv_b.weight", l);
                    put(g, kn, 2, ne, bf, q8);
                    continue;
                }
                const int64_t H = cfg_int(cfg, "num_attention_heads"), N = cfg_int(cfg, "qk_nope_head_dim"),
                              V = cfg_int(cfg, "v_head_dim"), L = ne[0];
                uint16_t *kb = malloc((size_t)(H * L * N) * 2), *vb = malloc((size_t)(H * V * L) * 2);
                for (int64_t h = 0; h < H; h++) {
                    for (int64_t n = 0; n < N; n++) /* k_b (H, L, N): transposed */
                        for (int64_t k = 0; k < L; k++) kb[(h * L + k) * N + n] = bf[(h * (N + V) + n) * L + k];
                    memcpy(vb + h * V * L, bf + (h * (N + V) + N) * L, (size_t)(V * L) * 2);
                }
                const int64_t nek[3] = {N, L, H}, nev[3] = {L, V, H};
                snprintf(kn, sizeof kn, "blk.%d.attn_k_b.weight", l);
                put(g, kn, 3, nek, kb, false); /* (rows of N: no whole Q8_0 blocks at N 16) */
                snprintf(kn, sizeof kn, "blk.%d.attn_v_b.weight", l);
                put(g, kn, 3, nev, vb, q8);
                free(kb);
                free(vb);
                continue;
            }
            const char *gn = NULL;
            if ((gptoss || olmo2) && !strcmp(suffix, "post_attention_layernorm.weight")) gn = "post_attention_norm.weight";
            for (size_t k = 0; !gn && k < sizeof NAMES / sizeof *NAMES; k++)
                if (!strcmp(suffix, NAMES[k].hf)) {
                    gn = NAMES[k].gguf;
                    f32 = f32 || NAMES[k].f32;
                }
            CHECK_MSG(gn != NULL, "no GGUF name for %s", name);
            if (!gn) continue;
            snprintf(gname, sizeof gname, "blk.%d.%s", l, gn);
            const bool q = !strcmp(suffix, "self_attn.q_proj.weight"), k = !strcmp(suffix, "self_attn.k_proj.weight");
            if (permute && (q || k)) {
                uint16_t *p = permuted(bf, ne[1], ne[0], q ? heads : kv_heads);
                put(g, gname, nd, ne, p, q8);
                free(p);
                continue;
            }
        }
        if (f32) put_bf16_as_f32(g, gname, nd, ne, bf);
        else put(g, gname, nd, ne, bf, q8 && strcmp(gname, "token_embd.weight"));
    }
    const json_t *ex = json_object_get(tc, llama                           ? "num_local_experts"
                                           : !strcmp(fc->arch, "deepseek2") ? "n_routed_experts"
                                                                            : "num_experts");
    for (int l = 0; l < cfg_int(tc, "num_hidden_layers"); l++) {
        if (gptoss) gptoss_experts(g, st, l, fc->fuse_gate_up, q8);
        else if (json_is_integer(ex) && l >= cfg_int(tc, "first_k_dense_replace"))
            merge_experts(g, st, fc, l, (int)json_integer_value(ex), q8);
    }
    st_close(st);
    const json_t *rp = json_object_get(cfg, "rope_parameters");
    if (json_string_value(json_object_get(rp, "rope_type")) && !strcmp(json_string_value(json_object_get(rp, "rope_type")), "llama3"))
        rope_freqs(g, cfg);
    return true;
}


/* ---- metadata ---- */



/* TextModel.set_gguf_parameters (+ LlamaModel's vocab_size and rope.dimension_count, Qwen2MoeModel's expert
 * sizes) from the fixture's config.json */
static void metadata_deepseek2(kvlist *l, const json_t *cfg, bool legacy);

static void metadata(kvlist *l, const json_t *cfg, const char *arch, bool q8) {
    l->n = 0;
    if (json_object_get(cfg, "text_config")) cfg = json_object_get(cfg, "text_config"); /* merged in (base.py) */
    set(l, NULL, "general.architecture", K_STR, 0, arch);
    set(l, NULL, "general.file_type", K_U32, q8 ? 7 : 32, NULL);
    set(l, arch, "block_count", K_U32, num(cfg, "num_hidden_layers"), NULL);
    set(l, arch, "context_length", K_U32, num(cfg, "max_position_embeddings"), NULL);
    set(l, arch, "embedding_length", K_U32, num(cfg, "hidden_size"), NULL);
    set(l, arch, "feed_forward_length", K_U32, num(cfg, "intermediate_size"), NULL);
    set(l, arch, "attention.head_count", K_U32, num(cfg, "num_attention_heads"), NULL);
    set(l, arch, "attention.head_count_kv", K_U32, num(cfg, "num_key_value_heads"), NULL);
    set(l, arch, "rope.freq_base", K_F32, num(json_object_get(cfg, "rope_parameters"), "rope_theta"), NULL);
    set(l, arch, "attention.layer_norm_rms_epsilon", K_F32, num(cfg, "rms_norm_eps"), NULL);
    const json_t *e = json_object_get(cfg, "num_local_experts");
    if (!e) e = json_object_get(cfg, "num_experts");
    if (e) {
        set(l, arch, "expert_count", K_U32, json_number_value(e), NULL);
        set(l, arch, "expert_used_count", K_U32, num(cfg, "num_experts_per_tok"), NULL);
    }
    const json_t *hd = json_object_get(cfg, "head_dim");
    if (json_is_integer(hd)) {
        set(l, arch, "attention.key_length", K_U32, json_number_value(hd), NULL);
        set(l, arch, "attention.value_length", K_U32, json_number_value(hd), NULL);
    }
    if (!strcmp(arch, "granite")) { /* GraniteModel: head_dim popped, the multipliers as scales */
        set(l, arch, "attention.key_length", K_DEL, 0, NULL);
        set(l, arch, "attention.value_length", K_DEL, 0, NULL);
        set(l, arch, "attention.scale", K_F32, num(cfg, "attention_multiplier"), NULL);
        set(l, arch, "embedding_scale", K_F32, num(cfg, "embedding_multiplier"), NULL);
        set(l, arch, "residual_scale", K_F32, num(cfg, "residual_multiplier"), NULL);
        set(l, arch, "logit_scale", K_F32, num(cfg, "logits_scaling"), NULL);
    }
    if (!strcmp(arch, "glm4")) /* Glm4Model: int(head_dim * partial_rotary_factor) */
        set(l, arch, "rope.dimension_count", K_U32,
            (double)(int)(num(cfg, "head_dim") * num(json_object_get(cfg, "rope_parameters"), "partial_rotary_factor")),
            NULL);
    if (!strcmp(arch, "llama") || !strcmp(arch, "granite")) {
        set(l, arch, "vocab_size", K_U32, num(cfg, "vocab_size"), NULL);
        set(l, arch, "rope.dimension_count", K_U32,
            json_is_integer(hd) ? json_number_value(hd) : num(cfg, "hidden_size") / num(cfg, "num_attention_heads"),
            NULL);
    }
    if (!strcmp(arch, "gpt-oss")) { /* GptOssModel.set_gguf_parameters and TextModel's YaRN keys */
        const json_t *rp = json_object_get(cfg, "rope_parameters");
        set(l, arch, "expert_count", K_U32, num(cfg, "num_local_experts"), NULL);
        set(l, arch, "expert_feed_forward_length", K_U32, num(cfg, "intermediate_size"), NULL);
        set(l, arch, "attention.sliding_window", K_U32, num(cfg, "sliding_window"), NULL);
        set(l, arch, "rope.scaling.type", K_STR, 0, "yarn");
        set(l, arch, "rope.scaling.factor", K_F32, num(rp, "factor"), NULL);
        set(l, arch, "rope.scaling.original_context_length", K_U32, num(rp, "original_max_position_embeddings"), NULL);
        set(l, arch, "rope.scaling.yarn_beta_fast", K_F32, num(rp, "beta_fast"), NULL);
        set(l, arch, "rope.scaling.yarn_beta_slow", K_F32, num(rp, "beta_slow"), NULL);
    }
    if (!strncmp(arch, "qwen3next", 9) || !strncmp(arch, "qwen35", 6)) { /* Qwen3NextModel.set_gguf_parameters */
        const json_t *rp = json_object_get(cfg, "rope_parameters");
        set(l, arch, "ssm.conv_kernel", K_U32, num(cfg, "linear_conv_kernel_dim"), NULL);
        set(l, arch, "ssm.state_size", K_U32, num(cfg, "linear_key_head_dim"), NULL);
        set(l, arch, "ssm.group_count", K_U32, num(cfg, "linear_num_key_heads"), NULL);
        set(l, arch, "ssm.time_step_rank", K_U32, num(cfg, "linear_num_value_heads"), NULL);
        set(l, arch, "ssm.inner_size", K_U32, num(cfg, "linear_value_head_dim") * num(cfg, "linear_num_value_heads"),
            NULL);
        set(l, arch, "full_attention_interval", K_U32, 4, NULL);
        set(l, arch, "rope.dimension_count", K_U32, (double)(int)(num(cfg, "head_dim") * num(rp, "partial_rotary_factor")),
            NULL);
        if (json_object_get(cfg, "moe_intermediate_size"))
            set(l, arch, "expert_feed_forward_length", K_U32, num(cfg, "moe_intermediate_size"), NULL);
        if (json_object_get(cfg, "shared_expert_intermediate_size"))
            set(l, arch, "expert_shared_feed_forward_length", K_U32, num(cfg, "shared_expert_intermediate_size"), NULL);
        if (!json_object_get(cfg, "intermediate_size")) set(l, arch, "feed_forward_length", K_DEL, 0, NULL);
        /* layer_types the interval cannot say: llama.cpp's own saver writes attention.recurrent_layers */
        static char flags[64];
        const json_t *lt = json_object_get(cfg, "layer_types");
        size_t k = 0;
        bool interval = true;
        for (; k < json_array_size(lt) && k < 63; k++) {
            flags[k] = !strcmp(json_string_value(json_array_get(lt, k)), "linear_attention") ? '1' : '0';
            interval = interval && (flags[k] == '1') == ((k + 1) % 4 != 0);
        }
        flags[k] = 0;
        if (!interval) set(l, arch, "attention.recurrent_layers", K_FLAGS, 0, flags);
    }
    if (!strcmp(arch, "deepseek2")) metadata_deepseek2(l, cfg, false);
    if (!strcmp(arch, "qwen2moe")) {
        set(l, arch, "expert_feed_forward_length", K_U32, num(cfg, "moe_intermediate_size"), NULL);
        set(l, arch, "expert_shared_feed_forward_length", K_U32, num(cfg, "shared_expert_intermediate_size"), NULL);
    }
}

/* DeepseekV2Model.set_gguf_parameters (deepseek.py 301-368): MLA files say head_count_kv 1, key_length L + R,
 * value_length L and the per-head sizes in key_length_mla / value_length_mla (legacy files: the per-head sizes in
 * key_length / value_length); V3's scoring_func, which the fixture's transformers-5 config leaves to its class
 * default (sigmoid), as the released configs state it */
static void metadata_deepseek2(kvlist *l, const json_t *cfg, bool legacy) {
    const char *a = "deepseek2";
    const double L = num(cfg, "kv_lora_rank"), R = num(cfg, "qk_rope_head_dim"), N = num(cfg, "qk_nope_head_dim"),
                 V = num(cfg, "v_head_dim");
    const json_t *rp = json_object_get(cfg, "rope_parameters");
    set(l, a, "attention.head_count_kv", K_U32, legacy ? num(cfg, "num_attention_heads") : 1, NULL);
    set(l, a, "attention.key_length", K_U32, legacy ? N + R : L + R, NULL);
    set(l, a, "attention.value_length", K_U32, legacy ? V : L, NULL);
    set(l, a, "attention.key_length_mla", legacy ? K_DEL : K_U32, N + R, NULL);
    set(l, a, "attention.value_length_mla", legacy ? K_DEL : K_U32, V, NULL);
    if (json_is_integer(json_object_get(cfg, "q_lora_rank")))
        set(l, a, "attention.q_lora_rank", K_U32, num(cfg, "q_lora_rank"), NULL);
    set(l, a, "attention.kv_lora_rank", K_U32, L, NULL);
    set(l, a, "rope.dimension_count", K_U32, R, NULL);
    set(l, a, "leading_dense_block_count", K_U32, num(cfg, "first_k_dense_replace"), NULL);
    set(l, a, "vocab_size", K_U32, num(cfg, "vocab_size"), NULL);
    set(l, a, "expert_feed_forward_length", K_U32, num(cfg, "moe_intermediate_size"), NULL);
    set(l, a, "expert_count", K_U32, num(cfg, "n_routed_experts"), NULL);
    set(l, a, "expert_used_count", K_U32, num(cfg, "num_experts_per_tok"), NULL);
    set(l, a, "expert_shared_count", K_U32, num(cfg, "n_shared_experts"), NULL);
    if (json_is_integer(json_object_get(cfg, "n_group")))
        set(l, a, "expert_group_count", K_U32, num(cfg, "n_group"), NULL);
    if (json_is_integer(json_object_get(cfg, "topk_group")))
        set(l, a, "expert_group_used_count", K_U32, num(cfg, "topk_group"), NULL);
    set(l, a, "expert_weights_scale", K_F32, num(cfg, "routed_scaling_factor"), NULL);
    if (json_is_true(json_object_get(cfg, "norm_topk_prob"))) set(l, a, "expert_weights_norm", K_BOOL, 1, NULL);
    if (!strcmp(json_string_value(json_array_get(json_object_get(cfg, "architectures"), 0)), "DeepseekV3ForCausalLM"))
        set(l, a, "expert_gating_func", K_U32, 2, NULL);
    if (!strcmp(json_string_value(json_object_get(rp, "rope_type")), "yarn")) {
        set(l, a, "rope.scaling.type", K_STR, 0, "yarn");
        set(l, a, "rope.scaling.factor", K_F32, num(rp, "factor"), NULL);
        set(l, a, "rope.scaling.original_context_length", K_U32, num(rp, "original_max_position_embeddings"), NULL);
        set(l, a, "rope.scaling.yarn_beta_fast", K_F32, num(rp, "beta_fast"), NULL);
        set(l, a, "rope.scaling.yarn_beta_slow", K_F32, num(rp, "beta_slow"), NULL);
        if (json_object_get(rp, "mscale_all_dim"))
            set(l, a, "rope.scaling.yarn_log_multiplier", K_F32, 0.1 * num(rp, "mscale_all_dim"), NULL);
    }
}


/* ---- the cases ---- */


/* BF16 values v[i0 + k step] (k < n) replaced by their MXFP4 round trip (quantize_row_mxfp4_ref, then the exact
 * dequantisation): what a GGUF of MXFP4 experts made from them holds */
static void mxfp4_round(uint16_t *v, int64_t i0, int64_t step, int64_t n) {
    float x[1024];
    uint8_t q[32 * 17];
    CHECK(n <= 1024);
    if (n > 1024) return;
    for (int64_t k = 0; k < n; k++) x[k] = bf16f(v[i0 + k * step]);
    CHECK(gq_quantize_row(GGML_TYPE_MXFP4, x, q, n) && gq_dequantize_row(GGML_TYPE_MXFP4, q, x, n));
    for (int64_t k = 0; k < n; k++) v[i0 + k * step] = f32_to_bf16(x[k]);
}

/* out/model.safetensors: dir's, with gpt-oss's expert matrices as MXFP4 experts would hold them (rows along the
 * input: gate_up_proj (E, D, 2I) column by column, down_proj (E, I, D) column by column) */
static bool write_mxfp4_rounded(const char *dir, const char *out) {
    st_set *st = NULL;
    if (st_open_dir(dir, &st) != VLLM_OK) return false;
    const size_t n = st_count(st);
    const char **names = calloc(n, sizeof *names);
    tensor *ts = calloc(n, sizeof *ts);
    void **own = calloc(n, sizeof *own);
    for (size_t i = 0; i < n; i++) {
        names[i] = st_name(st, i);
        const tensor *t = st_find(st, names[i]);
        ts[i] = *t;
        const bool gu = strstr(names[i], "experts.gate_up_proj") && !strstr(names[i], "_bias");
        const bool dn = strstr(names[i], "experts.down_proj") && !strstr(names[i], "_bias");
        if (!gu && !dn) continue;
        const size_t bytes = tensor_nbytes(t);
        uint16_t *v = own[i] = malloc(bytes);
        memcpy(v, t->data, bytes);
        const int64_t E = t->shape[0], R = t->shape[1], C = t->shape[2]; /* (E, in, out) */
        for (int64_t e = 0; e < E; e++)
            for (int64_t c = 0; c < C; c++) mxfp4_round(v, e * R * C + c, C, R);
        ts[i].data = v;
    }
    char p[1400];
    snprintf(p, sizeof p, "%s/model.safetensors", out);
    unlink(p);
    const bool ok = st_write_file(p, names, ts, n) == VLLM_OK;
    for (size_t i = 0; i < n; i++) free(own[i]);
    free(names);
    free(ts);
    free(own);
    st_close(st);
    return ok;
}



static void run_case(const fcase *fc) {
    char dir[1024], refdir[256] = "";
    json_t *expected = NULL, *cfg = load_cfg(FIXTURES, fc->fixture, dir, sizeof dir, &expected);
    if (!cfg) {
        json_decref(expected);
        return;
    }
    fixture_prompts fp;
    fixture_prompts_load(json_object_get(expected, "prompts"), &fp);
    const bool mx = fc->fuse_gate_up && !strcmp(fc->arch, "gpt-oss"); /* MXFP4 experts: the reference holds them */
    if (fc->ref_edit) CHECK(reference_dir("gmore", dir, cfg, fc->ref_edit, refdir, sizeof refdir));
    if (mx) CHECK(write_mxfp4_rounded(dir, refdir));
    vllm_status st;
    vllm_completion *ref = run(fc->ref_edit ? refdir : dir, &fp, &st);
    CHECK_MSG(ref != NULL, "%s: %s", fc->fixture, vllm_last_error());
    /* llama3's frequencies: the folder's rope.c divides in doubles, the file's factors in f32 (1 ulp of inv_freq) */
    const bool freqs = !strcmp(fc->fixture, "llama3_mqa_tied");
    for (int q8 = 0; q8 < 2 && ref; q8++) {
        char path[1280];
        snprintf(path, sizeof path, "/tmp/vllmc_test_gmore_%d_%s_%d.gguf", (int)getpid(), fc->fixture, q8);
        static gfile g;
        static kvlist l;
        char conv[1200];
        const bool theirs = !q8 && !fc->fuse_gate_up && !fc->legacy && gf_converted(fc->fixture, conv, sizeof conv);
        if (theirs) { /* llama.cpp's converter wrote it */
            snprintf(path, sizeof path, "%s", conv);
        } else {
            CHECK(convert(dir, cfg, fc, q8, &g));
            metadata(&l, cfg, fc->arch, q8);
            if (fc->legacy) metadata_deepseek2(&l, cfg, true);
            CHECK(write_gguf(path, &l, &g));
            free_gfile(&g);
        }
        /* MXFP4 experts with BF16 matrices: first dequantized at load (exact against the rounded folder), then
         * on their blocks where the backend runs them (the CPU: activations quantized to Q8_0 per block, as
         * llama.cpp's ggml_vec_dot_mxfp4_q8_0; checked as the Q8_0 files) */
        if (mx && !q8) {
            setenv("VLLM_GGUF_DEQUANTIZE", "1", 1);
            vllm_completion *cd = run(path, &fp, &st);
            unsetenv("VLLM_GGUF_DEQUANTIZE");
            const gf_diff dd = gf_compare(cd, ref, &fp);
            printf("GGUF %-17s %-8s BF16 MXFP4 experts dequantized: %zu of %zu tokens as the safetensors, max "
                   "|dlogprob| %.2e\n", fc->fixture, fc->arch, dd.same, dd.total, dd.max);
            CHECK_MSG(cd && gf_same_run(&dd, 1e-6), "%s MXFP4 dequantized: %zu of %zu, %g (mean %g)", fc->fixture,
                      dd.same, dd.total, dd.max, dd.mean);
            if (cd) vllm_completions_free(cd, fp.n);
        }
        vllm_completion *c = run(path, &fp, &st);
        CHECK_MSG(c != NULL, "%s: %s", path, vllm_last_error());
        const gf_diff d = gf_compare(c, ref, &fp);
        const size_t same = d.same, total = d.total;
        const double maxd = d.max;
        printf("GGUF %-17s %-8s %s%s: %zu of %zu tokens as the safetensors%s, max |dlogprob| %.2e (mean %.1e)\n",
               fc->fixture,
               fc->arch, q8 ? "Q8_0" : "BF16", mx ? " MXFP4 experts" : fc->fuse_gate_up ? " gate_up_exps" : fc->legacy ? " attn_kv_b" : "", same,
               total, fc->ref_edit == no_window ? " (no sliding_window)"
               : mx                         ? " (YaRN truncated, its experts MXFP4-rounded)"
               : fc->ref_edit               ? " (YaRN truncated)"
                                            : "",
               maxd, d.mean);
        if (!q8 && !(mx && !gf_on_gpu())) /* (on a GPU the MXFP4 experts are dequantized to BF16: exact) */
            CHECK_MSG(c && gf_same_run(&d, freqs ? 1e-4 : 1e-6), "%s BF16: %zu of %zu tokens, max |dlogprob| %g, "
                      "mean %g", fc->fixture, same, total, maxd, d.mean);
        else /* 8-bit matrices on logits of std ~8 (test_gguf_model.c's bound, 0.5 seen on the dense llama3); 1 for
              * the MoE files, where a router's near-tie can pick other experts (0.68-0.88 seen) */
            CHECK_MSG(c && maxd <= (freqs ? 0.8 : 1.0) && same * 10 >= total * 7, "%s Q8_0: %zu of %zu tokens, max |dlogprob| %g",
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


static bool small_open(small *s, const fcase *fc) {
    char dir[1024];
    s->g.n = 0;
    s->cfg = load_cfg(FIXTURES, fc->fixture, dir, sizeof dir, &s->expected);
    snprintf(s->path, sizeof s->path, "/tmp/vllmc_test_gmore_%d_small_%s.gguf", (int)getpid(), fc->arch);
    return s->cfg && convert(dir, s->cfg, fc, false, &s->g);
}



static const char *str(const json_t *o, const char *key) {
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

static void derived_configs(void) {
    static small s;
    static kvlist l;
    vllm_status st;
    const fcase q2 = {"qwen2_moe_shared", "qwen2moe", false, NULL, false};
    if (small_open(&s, &q2)) {
        metadata(&l, s.cfg, "qwen2moe", false);
        CHECK(write_gguf(s.path, &l, &s.g));
        json_t *c = config_of(s.path, &st);
        CHECK_MSG(c && !strcmp(str(c, "model_type"), "qwen2_moe") && json_is_false(json_object_get(c, "norm_topk_prob")) &&
                      num(c, "moe_intermediate_size") == 32 && num(c, "shared_expert_intermediate_size") == 48 &&
                      num(c, "num_experts") == 8 && json_array_size(json_object_get(c, "mlp_only_layers")) == 0,
                  "%s", vllm_last_error());
        json_decref(c);
        /* llama.cpp's defaults: experts of feed_forward_length / expert_used_count, a shared expert of
         * feed_forward_length */
        set(&l, "qwen2moe", "expert_feed_forward_length", K_DEL, 0, NULL);
        set(&l, "qwen2moe", "expert_shared_feed_forward_length", K_DEL, 0, NULL);
        CHECK(write_gguf(s.path, &l, &s.g));
        c = config_of(s.path, &st);
        CHECK_MSG(c && num(c, "moe_intermediate_size") == 48 && num(c, "shared_expert_intermediate_size") == 96, "%s",
                  vllm_last_error());
        json_decref(c);
        small_close(&s);
    }
    const fcase l3 = {"llama3_mqa_tied", "llama", false, NULL, false};
    if (small_open(&s, &l3)) {
        metadata(&l, s.cfg, "llama", false);
        CHECK(write_gguf(s.path, &l, &s.g));
        json_t *c = config_of(s.path, &st);
        const json_t *rs = c ? json_object_get(c, "rope_scaling") : NULL;
        CHECK_MSG(rs && !strcmp(str(rs, "rope_type"), "longrope") && num(rs, "attention_factor") == 1.0 &&
                      json_array_size(json_object_get(rs, "long_factor")) == 16 &&
                      json_equal(json_object_get(rs, "long_factor"), json_object_get(rs, "short_factor")),
                  "%s", vllm_last_error());
        /* the dimensions of the fixture: the fastest kept (1), the slowest divided by factor (8) */
        CHECK(rs && json_real_value(json_array_get(json_object_get(rs, "long_factor"), 0)) == 1.0 &&
              json_real_value(json_array_get(json_object_get(rs, "long_factor"), 15)) == 8.0);
        CHECK(c && !strcmp(str(c, "model_type"), "llama"));
        json_decref(c);
        small_close(&s);
    }
    const fcase mx = {"mixtral_moe", "llama", false, NULL, false};
    if (small_open(&s, &mx)) {
        metadata(&l, s.cfg, "llama", false);
        CHECK(write_gguf(s.path, &l, &s.g));
        json_t *c = config_of(s.path, &st);
        const json_t *a = c ? json_object_get(c, "architectures") : NULL;
        CHECK_MSG(a && !strcmp(json_string_value(json_array_get(a, 0)), "MixtralForCausalLM") &&
                      !strcmp(str(c, "model_type"), "mixtral") && num(c, "num_local_experts") == 4 &&
                      num(c, "num_experts_per_tok") == 2 && json_is_null(json_object_get(c, "sliding_window")),
                  "%s", vllm_last_error());
        json_decref(c);
        small_close(&s);
    }
}

typedef struct refusal {
    fcase fc;
    const char *suffix; /* the key set (NULL: none) */
    kind k;
    double v;
    const char *s;
    const char *drop; /* a tensor left out (NULL: none) */
    const char *want; /* in the message */
} refusal;

static void refusals(void) {
    static const refusal cases[] = {
        {{"llama3_mqa_tied", "llama", false, NULL, false}, "rope.scaling.type", K_STR, 0, "linear", NULL, "with rope_freqs"},
        {{"llama3_mqa_tied", "llama", false, NULL, false}, "rope.scaling.attn_factor", K_F32, 2.0, NULL, NULL,
         "llama.rope.scaling.attn_factor"},
        {{"mixtral_moe", "llama", false, NULL, false}, "expert_weights_scale", K_F32, 2.5, NULL, NULL,
         "llama.expert_weights_scale"},
        {{"mixtral_moe", "llama", false, NULL, false}, "expert_feed_forward_length", K_U32, 48, NULL, NULL,
         "llama.expert_feed_forward_length"},
        {{"mixtral_moe", "llama", false, NULL, false}, "expert_shared_feed_forward_length", K_U32, 48, NULL, NULL,
         "llama.expert_shared_feed_forward_length"},
        {{"mixtral_moe", "llama", false, NULL, false}, "expert_used_count", K_U32, 5, NULL, NULL, "llama.expert_used_count"},
        {{"qwen2_moe_shared", "qwen2moe", false, NULL, false}, "expert_used_count", K_U32, 9, NULL, NULL,
         "qwen2moe.expert_used_count"},
        {{"qwen2_moe_shared", "qwen2moe", false, NULL, false}, "expert_count", K_DEL, 0, NULL, NULL, "qwen2moe.expert_count"},
        {{"gptoss_moe", "gpt-oss", false, NULL, false}, "rope.scaling.yarn_beta_fast", K_F32, 16.0, NULL, NULL,
         "gpt-oss.rope.scaling.yarn_beta_fast"},
        {{"gptoss_moe", "gpt-oss", false, NULL, false}, "rope.scaling.yarn_attn_factor", K_F32, 1.0, NULL, NULL,
         "gpt-oss.rope.scaling.yarn_attn_factor"},
        {{"gptoss_moe", "gpt-oss", false, NULL, false}, "rope.scaling.original_context_length", K_DEL, 0, NULL, NULL,
         "gpt-oss.rope.scaling.original_context_length"},
        {{"gptoss_moe", "gpt-oss", false, NULL, false}, "attention.sliding_window", K_DEL, 0, NULL, NULL,
         "gpt-oss.attention.sliding_window"},
        {{"gptoss_moe", "gpt-oss", false, NULL, false}, NULL, K_U32, 0, NULL, "blk.0.attn_sinks.weight", "attn_sinks"},
        {{"gptoss_moe", "gpt-oss", false, NULL, false}, NULL, K_U32, 0, NULL, "blk.1.ffn_up_exps.bias", "up_proj.bias"},
        {{"olmo2_postnorm", "olmo2", false, NULL, false}, "attention.sliding_window", K_U32, 4096, NULL, NULL,
         "olmo2.attention.sliding_window"},
        {{"granite_mult", "granite", false, NULL, false}, "logit_scale", K_DEL, 0, NULL, NULL, "granite.logit_scale"},
        {{"glm4_partial", "glm4", false, NULL, false}, "nextn_predict_layers", K_U32, 1, NULL, NULL,
         "glm4.nextn_predict_layers"},
        {{"glm4_partial", "glm4", false, NULL, false}, "rope.dimension_sections", K_FLAGS, 0, "1111", NULL,
         "glm4.rope.dimension_sections"},
        {{"deepseek_v3", "deepseek2", false, NULL, false}, "expert_gating_func", K_U32, 1, NULL, NULL,
         "exp_probs_b"},
        {{"deepseek_v3", "deepseek2", false, NULL, false}, "expert_gating_func", K_U32, 4, NULL, NULL,
         "deepseek2.expert_gating_func"},
        /* a NaN would be dropped by the JSON and the field fall back to V3's default (2.5) */
        {{"deepseek_v3", "deepseek2", false, NULL, false}, "expert_weights_scale", K_F32, NAN, NULL, NULL,
         "must be finite"},
        {{"gptoss_moe", "gpt-oss", false, NULL, false}, "rope.scaling.factor", K_F32, INFINITY, NULL, NULL,
         "gpt-oss.rope.scaling.factor"},
        {{"deepseek_v3", "deepseek2", false, NULL, false}, "attention.key_length_mla", K_U32, 8, NULL, NULL,
         "key_length_mla"},
        {{"deepseek_v3", "deepseek2", false, NULL, false}, "attention.kv_lora_rank", K_DEL, 0, NULL, NULL,
         "deepseek2.attention.kv_lora_rank"},
        {{"deepseek_v3", "deepseek2", false, NULL, false}, "rope.scaling.type", K_STR, 0, "linear", NULL,
         "deepseek2.rope.scaling.type"},
        {{"deepseek_v2_lite", "deepseek2", false, NULL, false}, "rope.scaling.yarn_log_multiplier", K_F32, 0.1, NULL,
         NULL, "deepseek2.rope.scaling.yarn_log_multiplier"},
        {{"qwen3_5", "qwen35", false, NULL, false}, "ssm.inner_size", K_U32, 62, NULL, NULL, "qwen35.ssm.inner_size"},
        {{"qwen3_5", "qwen35", false, NULL, false}, "ssm.group_count", K_DEL, 0, NULL, NULL, "qwen35.ssm.group_count"},
        {{"qwen3_5", "qwen35", false, NULL, false}, "attention.recurrent_layers", K_FLAGS, 0, "110", NULL,
         "qwen35.attention.recurrent_layers"},
        {{"qwen3_5", "qwen35", false, NULL, false}, "nextn_predict_layers", K_U32, 4, NULL, NULL, "qwen35.nextn_predict_layers"},
        {{"qwen3_5", "qwen35", false, NULL, false}, "rope.dimension_count", K_U32, 40, NULL, NULL, "qwen35.rope.dimension_count"},
        {{"qwen3_next", "qwen3next", false, NULL, false}, NULL, K_U32, 0, NULL, "blk.0.attn_gate.weight", "in_proj_qkvz"},
        {{"qwen3_next", "qwen3next", false, NULL, false}, NULL, K_U32, 0, NULL, "blk.2.ssm_a", "A_log"},
        {{"qwen2_moe_shared", "qwen2moe", false, NULL, false}, NULL, K_U32, 0, NULL, "blk.1.ffn_gate_inp_shexp.weight",
         "shared_expert_gate"},
    };
    static small s;
    static kvlist l;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const refusal *r = &cases[i];
        if (!small_open(&s, &r->fc)) {
            small_close(&s);
            continue;
        }
        metadata(&l, s.cfg, r->fc.arch, false);
        if (r->suffix) set(&l, r->fc.arch, r->suffix, r->k, r->v, r->s);
        if (r->drop) drop_tensor(&s.g, r->drop);
        CHECK(write_gguf(s.path, &l, &s.g));
        vllm_status st;
        json_t *c = config_of(s.path, &st);
        vllm_engine *e = NULL;
        const vllm_status est = vllm_engine_create(s.path, NULL, &e);
        /* a key the mapping refuses fails the config, a missing tensor the load; both name it */
        CHECK_MSG(est != VLLM_OK && strstr(vllm_last_error(), r->want), "case %zu (%s): status %d, message '%s'", i,
                  r->want, (int)est, vllm_last_error());
        if (!r->drop) CHECK_MSG(!c && st != VLLM_OK, "case %zu (%s): the config was accepted", i, r->want);
        json_decref(c);
        vllm_engine_free(e);
        small_close(&s);
    }
}

/* ggml's MXFP4 against the safetensors reader (mxfp4.c, transformers' convention: value 2j the low nibble of byte j)
 * through GptOssModel.repack_mxfp4's relayout (qs[j] = v[j] | v[j + 16] << 4, the E8M0 byte kept): random
 * blocks, every scale (0: 2^-128 .. 255), both dequantised must agree exactly (and be BF16 values); and ggml's quantizer
 * round-trips its own levels. */
static void mxfp4_layouts(void) {
    enum { G = 256 };
    static uint8_t hf[G * 16], sc[G], gg[G * 17];
    static uint16_t want[G * 32];
    static float got[G * 32];
    uint32_t r = 12345;
    for (int i = 0; i < G * 16; i++) hf[i] = (uint8_t)((r = r * 1664525u + 1013904223u) >> 24);
    for (int g = 0; g < G; g++) sc[g] = (uint8_t)g; /* every E8M0 code */
    for (int g = 0; g < G; g++) {
        uint8_t v[32];
        for (int j = 0; j < 16; j++) v[2 * j] = hf[g * 16 + j] & 15, v[2 * j + 1] = hf[g * 16 + j] >> 4;
        gg[g * 17] = sc[g];
        for (int j = 0; j < 16; j++) gg[g * 17 + 1 + j] = (uint8_t)(v[j] | v[j + 16] << 4);
    }
    mxfp4_dequant_row(hf, sc, G, want);
    CHECK(gq_dequantize_row(GGML_TYPE_MXFP4, gg, got, G * 32));
    int bad = 0; /* as values: code 8 is -0 in transformers' table, 0 in ggml's */
    for (int i = 0; i < G * 32; i++) bad += bf16_to_f32(want[i]) != got[i] || bf16_to_f32(f32_to_bf16(got[i])) != got[i];
    CHECK_MSG(bad == 0, "MXFP4: %d of %d values differ from the safetensors reader's", bad, G * 32);
    /* quantize_row_mxfp4_ref keeps values that are levels of the block's scale */
    float x[32], y[32];
    uint8_t q[17];
    for (int j = 0; j < 32; j++) x[j] = 0.25f * (float)gq_kvalues_mxfp4[j % 16] * (j % 3 ? 1.0f : -1.0f);
    CHECK(gq_quantize_row(GGML_TYPE_MXFP4, x, q, 32) && gq_dequantize_row(GGML_TYPE_MXFP4, q, y, 32));
    CHECK(q[0] == 127 - 2 + 1); /* absmax 3 = 12 * 2^-2: floor(log2 3) - 2 + 127 = 126, d = 2^-2 */
    for (int j = 0; j < 32; j++) CHECK_MSG(y[j] == x[j], "MXFP4 round trip: %d: %g -> %g", j, x[j], y[j]);
    CHECK(gq_type_size(GGML_TYPE_MXFP4) == 17 && gq_block_size(GGML_TYPE_MXFP4) == 32 &&
          gq_type_supported(GGML_TYPE_MXFP4) && gq_vec_dot_type(GGML_TYPE_MXFP4) == GGML_TYPE_Q8_0);
}

/* Qwen3.5's multi-token-prediction block, as the converter keeps it by default (block_count = layers + 1,
 * nextn_predict_layers 1): not a decoder layer (its tensors are not read: left out here); the run equals the
 * folder's */
static void qwen35_nextn(void) {
    static small s;
    static kvlist l;
    vllm_status st;
    const fcase q = {"qwen3_5", "qwen35", false, NULL, false};
    if (!small_open(&s, &q)) {
        small_close(&s);
        return;
    }
    metadata(&l, s.cfg, "qwen35", false);
    set(&l, "qwen35", "block_count", K_U32, 5, NULL);
    set(&l, "qwen35", "nextn_predict_layers", K_U32, 1, NULL);
    set(&l, "qwen35", "attention.recurrent_layers", K_FLAGS, 0, "11010");
    CHECK(write_gguf(s.path, &l, &s.g));
    json_t *c = config_of(s.path, &st);
    const json_t *lt = c ? json_object_get(c, "layer_types") : NULL;
    CHECK_MSG(c && num(c, "num_hidden_layers") == 4 && json_array_size(lt) == 4 &&
                  !strcmp(json_string_value(json_array_get(lt, 2)), "full_attention") &&
                  num(c, "linear_value_head_dim") == 16 && num(c, "partial_rotary_factor") == 0.25,
              "%s", vllm_last_error());
    json_decref(c);
    char dir[1024];
    json_t *expected = NULL, *cfg = load_cfg(FIXTURES, "qwen3_5", dir, sizeof dir, &expected);
    fixture_prompts fp;
    fixture_prompts_load(json_object_get(expected, "prompts"), &fp);
    vllm_completion *ref = run(dir, &fp, &st), *got = run(s.path, &fp, &st);
    const gf_diff d = gf_compare(got, ref, &fp);
    CHECK_MSG(got && ref && gf_same_run(&d, 1e-6), "qwen35 with an MTP block: %zu of %zu, %g, mean %g (%s)", d.same,
              d.total, d.max, d.mean, vllm_last_error());
    if (got) vllm_completions_free(got, fp.n);
    if (ref) vllm_completions_free(ref, fp.n);
    fixture_prompts_free(&fp);
    json_decref(cfg);
    json_decref(expected);
    small_close(&s);
}

/* DeepSeek's GGUF config: V3's routing from expert_gating_func 2, mscale_all_dim back from the log multiplier
 * (0.1 x 1.0 stored as f32, divided back in f32: exactly 1), the per-head sizes from the _mla keys */
static void deepseek_config(void) {
    static small s;
    static kvlist l;
    vllm_status st;
    const fcase d = {"deepseek_v3", "deepseek2", false, NULL, false};
    if (!small_open(&s, &d)) {
        small_close(&s);
        return;
    }
    metadata(&l, s.cfg, "deepseek2", false);
    CHECK(write_gguf(s.path, &l, &s.g));
    json_t *c = config_of(s.path, &st);
    const json_t *rs = c ? json_object_get(c, "rope_scaling") : NULL;
    CHECK_MSG(c && !strcmp(json_string_value(json_array_get(json_object_get(c, "architectures"), 0)),
                           "DeepseekV3ForCausalLM") &&
                  !strcmp(str(c, "topk_method"), "noaux_tc") && !strcmp(str(c, "scoring_func"), "sigmoid") &&
                  num(c, "qk_nope_head_dim") == 16 && num(c, "v_head_dim") == 16 && num(c, "kv_lora_rank") == 32 &&
                  num(c, "q_lora_rank") == 32 && num(c, "n_group") == 2 && num(c, "topk_group") == 1 &&
                  num(c, "routed_scaling_factor") == 2.5 && json_is_true(json_object_get(c, "norm_topk_prob")) &&
                  num(c, "first_k_dense_replace") == 1 && num(c, "n_shared_experts") == 1,
              "%s", vllm_last_error());
    CHECK(rs && num(rs, "mscale_all_dim") == 1.0 && num(rs, "mscale") == 1.0 && num(rs, "factor") == 4.0 &&
          !strcmp(str(rs, "rope_type"), "yarn"));
    json_decref(c);
    small_close(&s);
}

static void gptoss_config(void) {
    static small s;
    static kvlist l;
    vllm_status st;
    const fcase go = {"gptoss_moe", "gpt-oss", false, NULL, false};
    if (!small_open(&s, &go)) {
        small_close(&s);
        return;
    }
    metadata(&l, s.cfg, "gpt-oss", false);
    CHECK(write_gguf(s.path, &l, &s.g));
    json_t *c = config_of(s.path, &st);
    const json_t *rs = c ? json_object_get(c, "rope_scaling") : NULL, *lt = c ? json_object_get(c, "layer_types") : NULL;
    CHECK_MSG(rs && !strcmp(str(rs, "rope_type"), "yarn") && num(rs, "factor") == 32 &&
                  num(rs, "original_max_position_embeddings") == 4096 && json_is_true(json_object_get(rs, "truncate")),
              "%s", vllm_last_error());
    CHECK(c && num(c, "sliding_window") == 8 && num(c, "intermediate_size") == 32 && num(c, "num_local_experts") == 8);
    CHECK(lt && json_array_size(lt) == 2 && !strcmp(json_string_value(json_array_get(lt, 0)), "sliding_attention") &&
          !strcmp(json_string_value(json_array_get(lt, 1)), "full_attention"));
    CHECK(c && json_is_false(json_object_get(c, "tie_word_embeddings")) && !strcmp(str(c, "model_type"), "gpt_oss"));
    json_decref(c);
    /* a period of 1 (llama.cpp: no layer slides) */
    set(&l, "gpt-oss", "attention.sliding_window_pattern", K_U32, 1, NULL);
    CHECK(write_gguf(s.path, &l, &s.g));
    c = config_of(s.path, &st);
    lt = c ? json_object_get(c, "layer_types") : NULL;
    CHECK(lt && !strcmp(json_string_value(json_array_get(lt, 0)), "full_attention"));
    json_decref(c);
    small_close(&s);
}

int main(void) {
    static const fcase cases[] = {
        {"llama3_mqa_tied", "llama", false, NULL, false},
        {"mixtral_moe", "llama", false, no_window, false},
        {"mixtral_moe", "llama", true, no_window, false},
        {"qwen2_moe_shared", "qwen2moe", false, NULL, false},
        {"gptoss_moe", "gpt-oss", false, yarn_truncated, false},
        {"gptoss_moe", "gpt-oss", true, yarn_truncated, false},
        {"olmo2_postnorm", "olmo2", false, NULL, false},
        {"granite_mult", "granite", false, NULL, false},
        {"glm4_partial", "glm4", false, NULL, false},
        {"qwen3_next", "qwen3next", false, NULL, false},
        {"deepseek_v2_lite", "deepseek2", false, NULL, false},
        {"deepseek_v2_lite", "deepseek2", false, NULL, true},
        {"deepseek_v2_yarn", "deepseek2", false, NULL, false},
        {"deepseek_v3", "deepseek2", false, NULL, false},
        {"qwen3_5", "qwen35", false, NULL, false},
        {"qwen3_5_moe", "qwen35moe", false, NULL, false},
    };
    mxfp4_layouts();
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(&cases[i]);
    derived_configs();
    gptoss_config();
    deepseek_config();
    qwen35_nextn();
    refusals();
    TEST_END();
}
