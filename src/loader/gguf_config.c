/* gguf_config.c: a GGUF file's metadata as its Hugging Face config.json, and HF -> GGUF tensor names. */
#include "loader/gguf_config.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"

/* The families whose metadata or tensors need more than the common keys. */
typedef enum ggc_family {
    GGC_PLAIN,
    GGC_GEMMA2,
    GGC_GEMMA3,
    GGC_PHI3,
    GGC_QWEN2MOE,
    GGC_GPTOSS,
    GGC_QWEN3NEXT, /* gated delta-net hybrids: qwen3next, then qwen35 / qwen35moe (value heads tiled) */
    GGC_QWEN35,
    GGC_OLMO2,
    GGC_GRANITE,
    GGC_GLM4,
    GGC_DEEPSEEK2,
} ggc_family;

/* general.architecture -> the HF architecture and model_type it was converted from (llama.cpp's
 * convert_hf_to_gguf.py: LlamaModel (also Mistral, and Mixtral: a llama file with llama.expert_count,
 * see mixtral()), Qwen2Model, Qwen2MoeModel, Qwen3Model, Qwen3MoeModel, Gemma2Model, Gemma3Model
 * (Gemma3ForCausalLM and the text model of Gemma3ForConditionalGeneration), Phi3MiniModel, GptOssModel,
 * Qwen3NextModel, Qwen3_5TextModel, Qwen3_5MoeTextModel, Olmo2Model, GraniteModel (a LlamaModel: q / k permuted),
 * Glm4Model, DeepseekV2Model (V2, V2-Lite, V3, R1)) */
typedef struct ggc_arch {
    const char *gguf, *hf, *model_type;
    bool permute_qk; /* llama.cpp permuted q / k rows (llama's rotary layout) */
    bool moe;
    ggc_family family;
} ggc_arch;

static const ggc_arch ARCHS[] = {
    {"llama", "LlamaForCausalLM", "llama", true, false, GGC_PLAIN},
    {"qwen2", "Qwen2ForCausalLM", "qwen2", false, false, GGC_PLAIN},
    {"qwen2moe", "Qwen2MoeForCausalLM", "qwen2_moe", false, true, GGC_QWEN2MOE},
    {"qwen3", "Qwen3ForCausalLM", "qwen3", false, false, GGC_PLAIN},
    {"qwen3moe", "Qwen3MoeForCausalLM", "qwen3_moe", false, true, GGC_PLAIN},
    {"gemma2", "Gemma2ForCausalLM", "gemma2", false, false, GGC_GEMMA2},
    {"gemma3", "Gemma3ForCausalLM", "gemma3_text", false, false, GGC_GEMMA3},
    {"phi3", "Phi3ForCausalLM", "phi3", false, false, GGC_PHI3},
    {"gpt-oss", "GptOssForCausalLM", "gpt_oss", false, false, GGC_GPTOSS},
    {"qwen3next", "Qwen3NextForCausalLM", "qwen3_next", false, true, GGC_QWEN3NEXT},
    {"qwen35", "Qwen3_5ForCausalLM", "qwen3_5_text", false, false, GGC_QWEN35},
    {"qwen35moe", "Qwen3_5MoeForCausalLM", "qwen3_5_moe_text", false, true, GGC_QWEN35},
    {"olmo2", "Olmo2ForCausalLM", "olmo2", false, false, GGC_OLMO2},
    {"granite", "GraniteForCausalLM", "granite", true, false, GGC_GRANITE},
    {"glm4", "Glm4ForCausalLM", "glm4", false, false, GGC_GLM4},
    {"deepseek2", "DeepseekV2ForCausalLM", "deepseek_v2", false, false, GGC_DEEPSEEK2},
};

bool ggc_is_gguf_path(const char *path) {
    struct stat sb;
    const size_t n = path ? strlen(path) : 0;
    return n > 5 && !strcmp(path + n - 5, ".gguf") && stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

const char *ggc_architectures(void) {
    return "llama (and Mistral, Mixtral), qwen2, qwen2moe, qwen3, qwen3moe, gemma2, gemma3 (text), phi3, gpt-oss, "
           "qwen3next, qwen35, qwen35moe, olmo2, granite, glm4, deepseek2";
}

static const ggc_arch *arch_of(const gguf_file *f, const char **name, size_t *len) {
    if (!gguf_get_str(f, "general.architecture", name, len, NULL)) return NULL;
    for (size_t i = 0; i < sizeof ARCHS / sizeof *ARCHS; i++)
        if (strlen(ARCHS[i].gguf) == *len && !memcmp(ARCHS[i].gguf, *name, *len)) return &ARCHS[i];
    return NULL;
}

#define GGC_MAX_BLOCKS 16384 /* layers a file may declare */

typedef struct ctx {
    const gguf_file *f;
    const char *what, *arch;
    json_t *cfg;
    vllm_status st;
    bool longrope; /* phi3: rope_scaling came from the rope_factors_long / _short tensors */
} ctx;

static void key_of(const ctx *c, const char *suffix, char *key, size_t n) { snprintf(key, n, "%s.%s", c->arch, suffix); }

/* <arch>.suffix as an integer into cfg[field]; required: absent is an error */
static bool put_int(ctx *c, const char *suffix, const char *field, bool required, int64_t min) {
    char key[160];
    key_of(c, suffix, key, sizeof key);
    if (c->st) return false;
    const int64_t ki = gguf_find_key(c->f, key);
    if (ki >= 0 && gguf_kv_type(c->f, ki) == GGUF_TYPE_ARRAY) {
        c->st = vt_error(VLLM_ERR_UNSUPPORTED, "%s: %s is a per-layer array: not supported", c->what, key);
        return false;
    }
    int64_t v;
    vllm_status err = VLLM_OK;
    if (!gguf_get_i64(c->f, key, &v, &err)) {
        if (err) c->st = err;
        else if (required) c->st = vt_error(VLLM_ERR_FORMAT, "%s: %s missing", c->what, key);
        return false;
    }
    if (v < min || v > INT32_MAX) {
        c->st = vt_error(VLLM_ERR_FORMAT, "%s: %s is %lld, out of range", c->what, key, (long long)v);
        return false;
    }
    json_object_set_new(c->cfg, field, json_integer(v));
    return true;
}

static bool put_num(ctx *c, const char *suffix, const char *field, bool required) {
    char key[160];
    key_of(c, suffix, key, sizeof key);
    if (c->st) return false;
    double v;
    vllm_status err = VLLM_OK;
    if (!gguf_get_f64(c->f, key, &v, &err)) {
        if (err) c->st = err;
        else if (required) c->st = vt_error(VLLM_ERR_FORMAT, "%s: %s missing", c->what, key);
        return false;
    }
    if (!isfinite(v)) { /* (json_real would drop it, and the field would fall back to a default) */
        c->st = vt_error(VLLM_ERR_FORMAT, "%s: %s is %g, must be finite", c->what, key, v);
        return false;
    }
    json_object_set_new(c->cfg, field, json_real(v));
    return true;
}

static int64_t get_int(const ctx *c, const char *field, int64_t def) {
    const json_t *v = json_object_get(c->cfg, field);
    return json_is_integer(v) ? json_integer_value(v) : def;
}

/* <arch>.suffix as a number: true when present (a value of another type sets c->st) */
static bool get_num(ctx *c, const char *suffix, double *v) {
    char key[160];
    key_of(c, suffix, key, sizeof key);
    vllm_status err = VLLM_OK;
    if (c->st) return false;
    if (gguf_get_f64(c->f, key, v, &err)) {
        if (isfinite(*v)) return true;
        c->st = vt_error(VLLM_ERR_FORMAT, "%s: %s is %g, must be finite", c->what, key, *v);
        return false;
    }
    if (err) c->st = err;
    return false;
}

static void refuse(ctx *c, vllm_status code, const char *fmt, const char *suffix, double v, const char *why) {
    char key[160];
    key_of(c, suffix, key, sizeof key);
    if (!c->st) c->st = vt_error(code, fmt, c->what, key, v, why);
}

/* tokenizer.ggml.<name>_token_id -> cfg[field] */
static void put_token(ctx *c, const char *name, const char *field) {
    char key[96];
    snprintf(key, sizeof key, "tokenizer.ggml.%s_token_id", name);
    int64_t v;
    vllm_status err = VLLM_OK;
    if (c->st) return;
    if (gguf_get_i64(c->f, key, &v, &err)) {
        if (v >= 0 && v <= INT32_MAX) json_object_set_new(c->cfg, field, json_integer(v));
    } else if (err) {
        c->st = err;
    }
}

/* A rope factor tensor (F32, rot_dim / 2 of them: phi3's long / short factors, llama's rope_freqs) as a JSON list. */
static json_t *rope_factor_list(ctx *c, const gguf_tensor_info *t, int64_t n) {
    if (t->type != GGML_TYPE_F32 || t->n_dims != 1 || t->ne[0] != n) {
        c->st = vt_error(VLLM_ERR_FORMAT, "%s: tensor %s must hold %lld F32 values (rope.dimension_count / 2)",
                         c->what, t->name, (long long)n);
        return NULL;
    }
    json_t *a = json_array();
    for (int64_t i = 0; i < n; i++) {
        float x;
        memcpy(&x, (const uint8_t *)t->data + (size_t)i * sizeof x, sizeof x);
        json_array_append_new(a, json_real(x));
    }
    return a;
}

/* rope_freqs.weight: per-dimension divisors of the rotary frequencies, theta_i = p base^(-2i/d) / f_i (ggml_rope_ext's
 * freq_factors). LlamaModel.generate_extra_tensors writes them for llama3 rope scaling (1 / ((1 - smooth) / factor +
 * smooth) per dimension, from the config's factor, low / high_freq_factor and original context), whose parameters
 * the file no longer holds. The same arithmetic is LongRoPE's with one list for both tables and no cos / sin
 * factor (rope.c: inv_freq = 1 / (f_i base^(2i/d)), in f32), so the config says that. */
static vllm_status rope_freqs(ctx *c, const gguf_tensor_info *rf, const char *type, size_t tlen) {
    if (!(tlen == 4 && !memcmp(type, "none", 4))) {
        char key[160];
        key_of(c, "rope.scaling.type", key, sizeof key);
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: %s '%.*s' with rope_freqs.weight is not supported", c->what, key,
                        (int)tlen, type);
    }
    double af;
    if (get_num(c, "rope.scaling.attn_factor", &af) && af != 1.0)
        refuse(c, VLLM_ERR_UNSUPPORTED, "%s: %s %g with rope_freqs.weight is not supported%s", "rope.scaling.attn_factor",
               af, "");
    if (c->st) return c->st;
    int64_t rd = get_int(c, "head_dim", 2); /* llama.cpp's n_rot: rope.dimension_count, else the head */
    char key[160];
    key_of(c, "rope.dimension_count", key, sizeof key);
    vllm_status err = VLLM_OK;
    if (!gguf_get_i64(c->f, key, &rd, &err) && err) return c->st = err;
    json_t *l = rope_factor_list(c, rf, rd / 2);
    if (!l) return c->st;
    json_t *rs = json_object();
    json_object_set_new(rs, "rope_type", json_string("longrope"));
    json_object_set_new(rs, "long_factor", l);
    json_object_set_new(rs, "short_factor", json_deep_copy(l));
    json_object_set_new(rs, "factor", json_real(1.0));
    json_object_set_new(rs, "attention_factor", json_real(1.0));
    json_object_set_new(rs, "original_max_position_embeddings", json_integer(get_int(c, "max_position_embeddings", 1)));
    json_object_set_new(c->cfg, "rope_scaling", rs);
    return VLLM_OK;
}

/* YaRN as llama.cpp runs it for these families (llama-context.cpp, ggml's rope_yarn): factor and
 * rope.scaling.original_context_length from the file, beta_fast 32 and beta_slow 1 (llama.cpp's defaults: these
 * graphs do not read rope.scaling.yarn_beta_*, so other values there are refused), the correction range rounded
 * outwards (floor / ceil: transformers' truncate true), cos and sin times 1 + 0.1 ln(factor) (transformers'
 * default attention_factor, get_mscale(factor)). A yarn_attn_factor, yarn_ext_factor or yarn_log_multiplier
 * key changes that arithmetic in ways the config cannot say here: refused. */
static vllm_status yarn_with(ctx *c, bool mscale, double mscale_all_dim);
static vllm_status yarn(ctx *c) { return yarn_with(c, false, 0.0); }

/* (deepseek2: mscale_all_dim from its yarn_log_multiplier, mscale equal to it; that key allowed) */
static vllm_status yarn_with(ctx *c, bool mscale, double mscale_all_dim) {
    char key[160];
    double f, v;
    vllm_status err = VLLM_OK;
    key_of(c, "rope.scaling.factor", key, sizeof key);
    if (!gguf_get_f64(c->f, key, &f, &err)) return err ? err : vt_error(VLLM_ERR_FORMAT, "%s: %s missing", c->what, key);
    if (!(f >= 1.0 && f < 1e6)) return vt_error(VLLM_ERR_FORMAT, "%s: %s is %g, must be at least 1", c->what, key, f);
    static const struct {
        const char *suffix;
        double def;
    } fixed[] = {{"rope.scaling.yarn_beta_fast", 32.0}, {"rope.scaling.yarn_beta_slow", 1.0},
                 {"rope.scaling.yarn_attn_factor", NAN}, {"rope.scaling.yarn_ext_factor", NAN},
                 {"rope.scaling.yarn_log_multiplier", NAN}};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        if (get_num(c, fixed[i].suffix, &v) && !(v == fixed[i].def) && !(mscale && i == 4))
            refuse(c, VLLM_ERR_UNSUPPORTED, "%s: %s %g is not supported (llama.cpp's YaRN for this file runs "
                   "beta_fast 32, beta_slow 1, attention factor 1 + 0.1 ln(factor)%s)", fixed[i].suffix, v, "");
    if (c->st) return c->st;
    int64_t orig;
    key_of(c, "rope.scaling.original_context_length", key, sizeof key);
    if (!gguf_get_i64(c->f, key, &orig, &err) || orig < 1 || orig > INT32_MAX)
        return err ? err : vt_error(VLLM_ERR_FORMAT, "%s: %s missing or out of range", c->what, key);
    json_t *rs = json_object();
    json_object_set_new(rs, "rope_type", json_string("yarn"));
    json_object_set_new(rs, "factor", json_real(f));
    json_object_set_new(rs, "original_max_position_embeddings", json_integer(orig));
    json_object_set_new(rs, "beta_fast", json_real(32.0));
    json_object_set_new(rs, "beta_slow", json_real(1.0));
    json_object_set_new(rs, "truncate", json_true());
    if (mscale) {
        json_object_set_new(rs, "mscale", json_real(mscale_all_dim));
        json_object_set_new(rs, "mscale_all_dim", json_real(mscale_all_dim));
    }
    json_object_set_new(c->cfg, "rope_scaling", rs);
    return VLLM_OK;
}

static vllm_status rope(ctx *c) {
    char key[160];
    const char *type = NULL;
    size_t tlen = 0;
    key_of(c, "rope.scaling.type", key, sizeof key);
    vllm_status err = VLLM_OK;
    if (!gguf_get_str(c->f, key, &type, &tlen, &err)) {
        if (err) return err;
        type = "none";
        tlen = 4;
    }
    const gguf_tensor_info *rf = gguf_find_tensor(c->f, "rope_freqs.weight");
    if (rf && c->longrope)
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: rope_freqs.weight with rope_factors_long / _short is not supported",
                        c->what);
    if (rf) return rope_freqs(c, rf, type, tlen);
    if (c->longrope) { /* phi3's factors (phi3()): its converter writes no type; "longrope" is the same thing */
        if ((tlen == 4 && !memcmp(type, "none", 4)) || (tlen == 8 && !memcmp(type, "longrope", 8))) return VLLM_OK;
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: %s '%.*s' with rope_factors_long / _short is not supported", c->what,
                        key, (int)tlen, type);
    }
    /* llama.cpp scales every cos / sin by rope.scaling.attn_factor; a config.json says so only with LongRoPE
     * or YaRN (phi3 above) */
    double af;
    if (get_num(c, "rope.scaling.attn_factor", &af) && af != 1.0)
        refuse(c, VLLM_ERR_UNSUPPORTED, "%s: %s %g without rope_factors_long / _short is not supported%s",
               "rope.scaling.attn_factor", af, "");
    if (c->st) return c->st;
    if (tlen == 4 && !memcmp(type, "none", 4)) return VLLM_OK;
    if (tlen == 6 && !memcmp(type, "linear", 6)) {
        double f;
        key_of(c, "rope.scaling.factor", key, sizeof key);
        if (!gguf_get_f64(c->f, key, &f, &err)) return err ? err : vt_error(VLLM_ERR_FORMAT, "%s: %s missing", c->what, key);
        json_t *rs = json_object();
        json_object_set_new(rs, "rope_type", json_string("linear"));
        json_object_set_new(rs, "factor", json_real(f));
        json_object_set_new(c->cfg, "rope_scaling", rs);
        return VLLM_OK;
    }
    if (tlen == 4 && !memcmp(type, "yarn", 4)) return yarn(c);
    return vt_error(VLLM_ERR_UNSUPPORTED, "%s: %s '%.*s' is not supported (none, linear, yarn)", c->what, key,
                    (int)tlen, type);
}

/* layer_types by llama.cpp's set_swa_pattern(period): layer i slides when i % period < period - 1 (period 0: all;
 * no window: none), the period from attention.sliding_window_pattern (a number) else def. A per-layer list there is
 * refused (gemma's graphs read none; where llama.cpp takes one, it is not mapped here). False on error (c->st). */
static bool swa_layer_types(ctx *c, int64_t window, int64_t period) {
    char key[160];
    key_of(c, "attention.sliding_window_pattern", key, sizeof key);
    const int64_t pk = gguf_find_key(c->f, key);
    if (window > 0 && pk >= 0) {
        vllm_status err = VLLM_OK;
        if (gguf_kv_type(c->f, pk) == GGUF_TYPE_ARRAY || !gguf_get_i64(c->f, key, &period, &err) || period < 0) {
            c->st = err ? err
                        : vt_error(VLLM_ERR_UNSUPPORTED, "%s: %s must be a period (a per-layer list is not supported "
                                   "for %s)", c->what, key, c->arch);
            return false;
        }
    }
    json_t *types = json_array();
    for (int64_t i = 0; i < get_int(c, "num_hidden_layers", 0); i++) {
        const bool sliding = window > 0 && (period == 0 || i % period < period - 1);
        json_array_append_new(types, json_string(sliding ? "sliding_attention" : "full_attention"));
    }
    json_object_set_new(c->cfg, "layer_types", types);
    return true;
}

/* Gemma 2 / Gemma 3 (llama.cpp src/models/gemma2.cpp, gemma3.cpp load_arch_hparams; convert_hf_to_gguf.py
 * Gemma2Model / Gemma3Model): GELU-tanh MLPs, the sandwich norms (their weights stored as w + 1: ggc_find),
 * softcaps, sliding-window layers by a period, Gemma 3's local RoPE base. */
static void gemma(ctx *c, int version) {
    const int64_t layers = get_int(c, "num_hidden_layers", 1), hidden = get_int(c, "hidden_size", 1),
                  heads = get_int(c, "num_attention_heads", 1), hd = get_int(c, "head_dim", 1);
    json_object_set_new(c->cfg, "hidden_activation", json_string("gelu_pytorch_tanh"));
    /* query_pre_attn_scalar is not in the file: llama.cpp scales q by 1 / sqrt(hidden / heads) for the 27B
     * models (46 layers in gemma2, 62 in gemma3) and by 1 / sqrt(head_dim) otherwise (gemma_pytorch's
     * configs; the released config.json files say the same: 144 / 168 for the 27Bs, head_dim for the rest).
     * An attention.scale key saying otherwise is ambiguous (llama.cpp ignores it for these): refused. */
    const int64_t qpas = layers == (version == 2 ? 46 : 62) ? hidden / heads : hd;
    json_object_set_new(c->cfg, "query_pre_attn_scalar", json_integer(qpas));
    double v;
    if (get_num(c, "attention.scale", &v) && fabs(v * sqrt((double)qpas) - 1.0) > 1e-6)
        refuse(c, VLLM_ERR_UNSUPPORTED, "%s: %s %g is not supported (llama.cpp's gemma graphs scale q by 1 / sqrt(%s))",
               "attention.scale", v, layers == (version == 2 ? 46 : 62) ? "hidden / heads" : "key_length");
    /* softcaps: gemma2 always applies both (llama.cpp's defaults 50 and 30 when absent); gemma3 only the final
     * one, when given and nonzero (its converter asserts attn_logit_softcapping is None) */
    if (version == 2) {
        static const struct {
            const char *key;
            double def;
        } caps[] = {{"attn_logit_softcapping", 50.0}, {"final_logit_softcapping", 30.0}};
        for (size_t i = 0; i < 2; i++) {
            if (!get_num(c, caps[i].key, &v)) v = caps[i].def;
            if (!(v > 0) && !c->st) refuse(c, VLLM_ERR_FORMAT, "%s: %s is %g, must be positive%s", caps[i].key, v, "");
            json_object_set_new(c->cfg, caps[i].key, json_real(v));
        }
    } else {
        if (get_num(c, "attn_logit_softcapping", &v))
            refuse(c, VLLM_ERR_UNSUPPORTED, "%s: %s %g is not supported (llama.cpp's gemma3 graph has no attention "
                   "softcap%s)", "attn_logit_softcapping", v, "");
        const bool cap = get_num(c, "final_logit_softcapping", &v) && v != 0;
        if (cap && !(v > 0)) refuse(c, VLLM_ERR_FORMAT, "%s: %s is %g, must be positive or 0%s", "final_logit_softcapping", v, "");
        json_object_set_new(c->cfg, "final_logit_softcapping", cap ? json_real(v) : json_null());
        json_object_set_new(c->cfg, "attn_logit_softcapping", json_null());
    }
    if (c->st) return;
    /* sliding window: gemma2 always (4096 when absent), gemma3 when attention.sliding_window is given and
     * nonzero; the layers by llama.cpp's set_swa_pattern(period): layer i slides when i % period < period - 1
     * (period 0: all), the period from attention.sliding_window_pattern (a number; 2 for gemma2, 6 for gemma3
     * when absent: llama.cpp reads no per-layer list for these) */
    int64_t window = version == 2 ? 4096 : 0, period = version == 2 ? 2 : 6;
    if (put_int(c, "attention.sliding_window", "sliding_window", false, 0)) window = get_int(c, "sliding_window", 0);
    if (c->st) return;
    if (version == 2 && window <= 0) {
        refuse(c, VLLM_ERR_FORMAT, "%s: %s is %g, must be positive for gemma2%s", "attention.sliding_window",
               (double)window, "");
        return;
    }
    json_object_set_new(c->cfg, "sliding_window", json_integer(window > 0 ? window : 4096));
    if (!swa_layer_types(c, window, period)) return;
    /* RoPE: gemma2's sliding layers take rope.freq_base_swa (else freq_base) where HF has one table for all;
     * gemma3's take it (else 10000) without the global layers' scaling (transformers' rope_local_base_freq) */
    const double theta = json_real_value(json_object_get(c->cfg, "rope_theta"));
    if (version == 2) {
        if (get_num(c, "rope.freq_base_swa", &v) && v != theta)
            refuse(c, VLLM_ERR_UNSUPPORTED, "%s: %s %g differs from rope.freq_base (gemma2 has one RoPE table%s)",
                   "rope.freq_base_swa", v, "");
    } else {
        if (!get_num(c, "rope.freq_base_swa", &v)) v = 10000.0;
        json_object_set_new(c->cfg, "rope_local_base_freq", json_real(v));
    }
    /* gemma2's graph always reads token_embd as the output (the converter drops lm_head); gemma3's an
     * output.weight when there is one */
    json_object_set_new(c->cfg, "tie_word_embeddings",
                        json_boolean(version == 2 || !gguf_find_tensor(c->f, "output.weight")));
}

/* Phi-3 (llama.cpp src/models/phi3.cpp; convert_hf_to_gguf.py Phi3MiniModel): fused attn_qkv / ffn_up
 * (gate | up rows), partial rotary from rope.dimension_count, LongRoPE from the rope_factors_long / _short
 * tensors with rope.scaling.original_context_length and rope.scaling.attn_factor, sliding_window. */
/* The rotary dimension: rope.dimension_count (else the whole head), with cfg.partial_rotary_factor set when it is
 * part of the head (HF's rotary size is int(head_dim * partial_rotary_factor): made to land on it); 0 on error. */
static int64_t partial_rotary(ctx *c) {
    const int64_t hd = get_int(c, "head_dim", 1);
    char key[160];
    int64_t rd = hd;
    key_of(c, "rope.dimension_count", key, sizeof key);
    vllm_status err = VLLM_OK;
    if (gguf_get_i64(c->f, key, &rd, &err) && (rd < 2 || rd > hd || rd % 2)) {
        c->st = vt_error(VLLM_ERR_FORMAT, "%s: %s is %lld, must be even and at most the head size %lld", c->what, key,
                         (long long)rd, (long long)hd);
        return 0;
    }
    if (c->st || (c->st = err)) return 0;
    if (rd != hd) {
        double prf = (double)rd / (double)hd;
        if ((int64_t)((double)hd * prf) != rd) prf = nextafter(prf, 1.0);
        json_object_set_new(c->cfg, "partial_rotary_factor", json_real(prf));
    }
    return rd;
}

static void phi3(ctx *c) {
    char key[160];
    vllm_status err = VLLM_OK;
    const int64_t rd = partial_rotary(c);
    if (!rd) return;
    /* the converter writes 0 for none; llama.cpp leaves Phi's window off (its TODO), HF's Phi3Attention and
     * vLLM use it on every layer: it is the model's */
    int64_t window = 0;
    key_of(c, "attention.sliding_window", key, sizeof key);
    if (gguf_get_i64(c->f, key, &window, &err) && window < 0) window = 0;
    if (c->st || (c->st = err)) return;
    json_object_set_new(c->cfg, "sliding_window", window > 0 ? json_integer(window) : json_null());
    if (!gguf_find_tensor(c->f, "blk.0.attn_qkv.weight")) {
        c->st = vt_error(VLLM_ERR_UNSUPPORTED, "%s: tensor blk.0.attn_qkv.weight missing (phi3 files with separate "
                         "attn_q / attn_k / attn_v are not supported)", c->what);
        return;
    }
    json_object_set_new(c->cfg, "tie_word_embeddings", json_boolean(!gguf_find_tensor(c->f, "output.weight")));
    const gguf_tensor_info *lf = gguf_find_tensor(c->f, "rope_factors_long.weight"),
                           *sf = gguf_find_tensor(c->f, "rope_factors_short.weight");
    if (!lf && !sf) return;
    if (!lf || !sf) {
        c->st = vt_error(VLLM_ERR_UNSUPPORTED, "%s: tensor %s without %s is not supported", c->what,
                         lf ? "rope_factors_long.weight" : "rope_factors_short.weight",
                         lf ? "rope_factors_short.weight" : "rope_factors_long.weight");
        return;
    }
    json_t *rs = json_object();
    json_object_set_new(c->cfg, "rope_scaling", rs);
    json_object_set_new(rs, "rope_type", json_string("longrope"));
    json_t *l = rope_factor_list(c, lf, rd / 2), *s = l ? rope_factor_list(c, sf, rd / 2) : NULL;
    if (!l || !s) {
        json_decref(l);
        return;
    }
    json_object_set_new(rs, "long_factor", l);
    json_object_set_new(rs, "short_factor", s);
    /* llama.cpp: the long factors once the context exceeds rope.scaling.original_context_length (else the
     * training context), cos / sin times rope.scaling.attn_factor (else 1) */
    if (!put_int(c, "rope.scaling.original_context_length", "original_max_position_embeddings", false, 1) && !c->st)
        json_object_set_new(c->cfg, "original_max_position_embeddings",
                            json_integer(get_int(c, "max_position_embeddings", 1)));
    json_object_set_new(rs, "original_max_position_embeddings",
                        json_integer(get_int(c, "original_max_position_embeddings", 1)));
    double af;
    if (!get_num(c, "rope.scaling.attn_factor", &af)) af = 1.0;
    json_object_set_new(rs, "attention_factor", json_real(af));
    c->longrope = true;
}

/* <arch>.expert_weights_scale: the routing weights' factor of build_moe_ffn (0 or absent: none); these families'
 * HF configs have none, so another value is refused */
static void expert_weights_scale(ctx *c) {
    double v;
    if (get_num(c, "expert_weights_scale", &v) && v != 0.0 && v != 1.0)
        refuse(c, VLLM_ERR_UNSUPPORTED, "%s: %s %g is not supported (llama.cpp's graph for this file does not scale its routing weights%s)",
               "expert_weights_scale", v, "");
}

/* Qwen2-MoE / Qwen3-MoE (llama.cpp src/models/qwen2moe.cpp, qwen3moe.cpp; convert_hf_to_gguf.py Qwen2MoeModel):
 * softmax routing over every expert, the top-k weights renormalised by qwen3moe and not by qwen2moe (build_moe_ffn's
 * norm_w), qwen2moe's shared expert with its sigmoid gate (ffn_gate_inp_shexp) beside the routed ones; the
 * expert size from expert_feed_forward_length (qwen2moe: else feed_forward_length / expert_used_count), the shared
 * one from expert_shared_feed_forward_length (else feed_forward_length). */
/* <arch>.expert_count and expert_used_count into cfg[count] and num_experts_per_tok (at most the count) */
static void expert_counts(ctx *c, const char *count) {
    put_int(c, "expert_count", count, true, 1);
    put_int(c, "expert_used_count", "num_experts_per_tok", true, 1);
    if (!c->st && get_int(c, "num_experts_per_tok", 1) > get_int(c, count, 1))
        refuse(c, VLLM_ERR_FORMAT, "%s: %s %g exceeds the expert count%s", "expert_used_count",
               (double)get_int(c, "num_experts_per_tok", 1), "");
}

/* The expert count and width, and the shared expert's width (shared): expert_feed_forward_length (required, or else
 * llama.cpp's feed_forward_length / expert_used_count), expert_shared_feed_forward_length (else
 * feed_forward_length); intermediate_size already set. */
static void expert_sizes(ctx *c, bool ffn_required, bool shared) {
    expert_counts(c, "num_experts");
    if (c->st) return;
    if (!put_int(c, "expert_feed_forward_length", "moe_intermediate_size", ffn_required, 1) && !c->st) {
        const int64_t v = get_int(c, "intermediate_size", 0) / get_int(c, "num_experts_per_tok", 1);
        if (v < 1) {
            refuse(c, VLLM_ERR_FORMAT, "%s: %s missing and feed_forward_length / expert_used_count is %g%s",
                   "expert_feed_forward_length", (double)v, "");
            return;
        }
        json_object_set_new(c->cfg, "moe_intermediate_size", json_integer(v));
    }
    if (shared && !c->st && !put_int(c, "expert_shared_feed_forward_length", "shared_expert_intermediate_size", false, 1) &&
        !c->st)
        json_object_set_new(c->cfg, "shared_expert_intermediate_size",
                            json_integer(get_int(c, "intermediate_size", 0)));
    expert_weights_scale(c);
}

static void moe(ctx *c, bool qwen2) {
    const bool has_ff = put_int(c, "feed_forward_length", "intermediate_size", qwen2, 1);
    if (c->st) return;
    expert_sizes(c, !qwen2, qwen2);
    if (c->st) return;
    if (!has_ff) json_object_set_new(c->cfg, "intermediate_size", json_integer(get_int(c, "moe_intermediate_size", 1)));
    json_object_set_new(c->cfg, "norm_topk_prob", json_boolean(!qwen2));
    json_object_set_new(c->cfg, "decoder_sparse_step", json_integer(1));
    /* a layer without a router keeps a dense MLP (llama.cpp's own graphs make every layer sparse;
     * files converted from a checkpoint with mlp_only_layers carry ffn_gate / ffn_up / ffn_down there) */
    json_t *dense = json_array();
    for (int64_t l = 0; l < get_int(c, "num_hidden_layers", 0); l++) {
        char tn[96];
        snprintf(tn, sizeof tn, "blk.%lld.ffn_gate_inp.weight", (long long)l);
        if (!gguf_find_tensor(c->f, tn)) json_array_append_new(dense, json_integer(l));
    }
    json_object_set_new(c->cfg, "mlp_only_layers", dense);
}

/* Mixtral as llama.cpp's llama graph runs it (src/models/llama.cpp): softmax routing, the top-k weights
 * renormalised, experts of feed_forward_length, no sliding window (the converter writes none: Mixtral's released
 * configs have sliding_window null; a config that had one runs without it here, as in llama.cpp). */
static void mixtral_moe(ctx *c) {
    expert_counts(c, "num_local_experts");
    put_int(c, "feed_forward_length", "intermediate_size", true, 1);
    int64_t v;
    if (!c->st && gguf_get_i64(c->f, "llama.expert_feed_forward_length", &v, NULL) &&
        v != get_int(c, "intermediate_size", 0))
        refuse(c, VLLM_ERR_UNSUPPORTED, "%s: %s %g differs from feed_forward_length (the llama graph's experts are "
               "feed_forward_length wide%s)", "expert_feed_forward_length", (double)v, "");
    if (!c->st && gguf_get_i64(c->f, "llama.expert_shared_feed_forward_length", &v, NULL) && v > 0)
        refuse(c, VLLM_ERR_UNSUPPORTED, "%s: %s %g (a shared expert) is not supported for llama files%s",
               "expert_shared_feed_forward_length", (double)v, "");
    json_object_set_new(c->cfg, "sliding_window", json_null());
    expert_weights_scale(c);
}

/* gpt-oss (llama.cpp src/models/openai-moe*.cpp, convert_hf_to_gguf.py GptOssModel): every MLP a MoE of
 * expert_count experts of expert_feed_forward_length, top expert_used_count by router logit then a softmax over
 * them, the clamped SwiGLU (alpha 1.702, limit 7: constants in llama.cpp), q / k / v / o, router and expert
 * biases, a sink logit per head; sliding-window layers by a period (2: the even layers), YaRN (rope()). */
static void gptoss(ctx *c) {
    expert_counts(c, "num_local_experts");
    put_int(c, "expert_feed_forward_length", "intermediate_size", true, 1);
    if (!put_int(c, "attention.sliding_window", "sliding_window", true, 1) || c->st) return;
    if (!swa_layer_types(c, get_int(c, "sliding_window", 0), 2)) return;
    json_object_set_new(c->cfg, "attention_bias", json_true());
    json_object_set_new(c->cfg, "swiglu_alpha", json_real(1.702));
    json_object_set_new(c->cfg, "swiglu_limit", json_real(7.0));
    expert_weights_scale(c);
    if (!c->st && !gguf_find_tensor(c->f, "blk.0.attn_sinks.weight"))
        c->st = vt_error(VLLM_ERR_FORMAT, "%s: tensor blk.0.attn_sinks.weight missing (gpt-oss)", c->what);
}

/* The gated delta-net hybrids (llama.cpp src/models/qwen3next.cpp, qwen35.cpp, qwen35moe.cpp; convert_hf_to_gguf.py
 * Qwen3NextModel, Qwen3_5TextModel): the mixer's shapes from ssm.* (conv_kernel, state_size = key head size,
 * group_count = key heads, time_step_rank = value heads, inner_size = all value heads' width), the layer kinds from
 * attention.recurrent_layers (per layer, or one value) else full attention every full_attention_interval-th layer
 * (4), partial rotary from rope.dimension_count; qwen35's trailing nextn_predict_layers blocks (multi-token
 * prediction) are not decoder layers; experts as qwen3moe's (softmax, top-k renormalised) with a shared expert. */
static void hybrid(ctx *c, bool qwen35, bool moe_layers) {
    put_int(c, "ssm.conv_kernel", "linear_conv_kernel_dim", true, 2);
    put_int(c, "ssm.state_size", "linear_key_head_dim", true, 1);
    put_int(c, "ssm.group_count", "linear_num_key_heads", true, 1);
    put_int(c, "ssm.time_step_rank", "linear_num_value_heads", true, 1);
    int64_t inner = 0;
    char key[160];
    key_of(c, "ssm.inner_size", key, sizeof key);
    vllm_status err = VLLM_OK;
    if (c->st) return;
    const int64_t hv = get_int(c, "linear_num_value_heads", 1), hk = get_int(c, "linear_num_key_heads", 1);
    if (!gguf_get_i64(c->f, key, &inner, &err) || inner < 1 || inner % hv || hv % hk) {
        c->st = err ? err : vt_error(VLLM_ERR_FORMAT, "%s: %s must be a positive multiple of ssm.time_step_rank %lld, "
                                     "itself a multiple of ssm.group_count %lld", c->what, key, (long long)hv,
                                     (long long)hk);
        return;
    }
    json_object_set_new(c->cfg, "linear_value_head_dim", json_integer(inner / hv));
    /* the decoder's layers: less qwen35's multi-token-prediction blocks at the end */
    int64_t all = get_int(c, "num_hidden_layers", 1), nextn = 0;
    if (qwen35 && put_int(c, "nextn_predict_layers", "mtp_num_hidden_layers", false, 0)) {
        nextn = get_int(c, "mtp_num_hidden_layers", 0);
        if (nextn >= all) {
            refuse(c, VLLM_ERR_FORMAT, "%s: %s %g leaves no decoder layer%s", "nextn_predict_layers", (double)nextn, "");
            return;
        }
        json_object_set_new(c->cfg, "num_hidden_layers", json_integer(all - nextn));
    }
    if (c->st) return;
    const int64_t layers = all - nextn;
    /* layer kinds */
    json_t *types = json_array();
    json_object_set_new(c->cfg, "layer_types", types);
    key_of(c, "attention.recurrent_layers", key, sizeof key);
    const int64_t rk = gguf_find_key(c->f, key);
    int64_t interval = 4;
    if (rk < 0 && !put_int(c, "full_attention_interval", "full_attention_interval", false, 1) && c->st) return;
    if (rk < 0) interval = get_int(c, "full_attention_interval", 4);
    gguf_type et = GGUF_TYPE_COUNT;
    uint64_t n = 0;
    const bool arr = rk >= 0 && gguf_kv_type(c->f, rk) == GGUF_TYPE_ARRAY;
    const uint8_t *flags = NULL;
    if (arr && (!gguf_get_arr(c->f, key, &et, &n, &err) || n != (uint64_t)all ||
                (et == GGUF_TYPE_BOOL && !(flags = gguf_arr_data(c->f, key))))) {
        c->st = err ? err : vt_error(VLLM_ERR_FORMAT, "%s: %s must hold a flag for each of the %lld blocks", c->what,
                                     key, (long long)all);
        return;
    }
    for (int64_t i = 0; i < layers; i++) {
        bool recurrent = (i + 1) % interval != 0;
        if (rk >= 0) {
            int64_t v = 0;
            bool b = false, ok = true;
            if (flags) v = flags[i] != 0;
            else if (arr) ok = gguf_arr_i64(c->f, key, (uint64_t)i, &v);
            else if (gguf_kv_type(c->f, rk) == GGUF_TYPE_BOOL) ok = gguf_get_bool(c->f, key, &b, &err), v = b;
            else ok = gguf_get_i64(c->f, key, &v, &err);
            if (!ok) {
                c->st = err ? err : vt_error(VLLM_ERR_FORMAT, "%s: %s must be flags (bool or integer)", c->what, key);
                return;
            }
            recurrent = v != 0;
        }
        json_array_append_new(types, json_string(recurrent ? "linear_attention" : "full_attention"));
    }
    /* partial rotary: rope.dimension_count of the head (else the whole head, llama.cpp's default); said in
     * rope_parameters too (these families' default is 0.25) */
    if (!partial_rotary(c)) return;
    const json_t *pr = json_object_get(c->cfg, "partial_rotary_factor");
    const double prf = pr ? json_real_value(pr) : 1.0;
    json_t *rp = json_object();
    json_object_set_new(c->cfg, "rope_parameters", rp);
    json_object_set_new(rp, "partial_rotary_factor", json_real(prf));
    json_object_set_new(rp, "rope_type", json_string("default"));
    json_object_set_new(rp, "rope_theta", json_real(json_real_value(json_object_get(c->cfg, "rope_theta"))));
    json_object_set_new(c->cfg, "partial_rotary_factor", json_real(prf));
    if (moe_layers) {
        expert_sizes(c, false, true);
        if (c->st) return;
        /* llama.cpp renormalises the top-k weights of both (build_moe_ffn norm_w true); every layer sparse */
        json_object_set_new(c->cfg, "norm_topk_prob", json_true());
        json_object_set_new(c->cfg, "decoder_sparse_step", json_integer(1));
        json_object_set_new(c->cfg, "mlp_only_layers", json_array());
    }
}

/* OLMo-2 (llama.cpp src/models/olmo2.cpp): post-norms, q / k norms over the whole projections. The same arch
 * carries Olmo3's sliding-window layers (attention.sliding_window), whose family is not here: refused. */
static void olmo2(ctx *c) {
    double v;
    if (get_num(c, "attention.sliding_window", &v) && v > 0)
        refuse(c, VLLM_ERR_UNSUPPORTED, "%s: %s %g (Olmo3's sliding-window layers) is not supported%s",
               "attention.sliding_window", v, "");
}

/* Granite (llama.cpp src/models/granite.cpp, GraniteModel): the multipliers as attention.scale (else
 * 1 / sqrt(head_dim), llama.cpp's: transformers' default attention_multiplier 1 is not what a file without the
 * key runs), embedding_scale, residual_scale (else 1), logit_scale (required, as llama.cpp). */
static void granite(ctx *c) {
    static const struct {
        const char *suffix, *field;
        bool required;
    } mult[] = {{"attention.scale", "attention_multiplier", false},
                {"embedding_scale", "embedding_multiplier", false},
                {"residual_scale", "residual_multiplier", false},
                {"logit_scale", "logits_scaling", true}};
    for (size_t i = 0; i < sizeof mult / sizeof *mult; i++) {
        double v;
        const bool has = get_num(c, mult[i].suffix, &v);
        if (c->st) return;
        if (!has && mult[i].required) {
            char key[160];
            key_of(c, mult[i].suffix, key, sizeof key);
            c->st = vt_error(VLLM_ERR_FORMAT, "%s: %s missing", c->what, key);
            return;
        }
        /* llama.cpp: a 0 value is "none" */
        if (!has || v == 0) v = i == 0 ? 1.0 / sqrt((double)get_int(c, "head_dim", 1)) : 1.0;
        if (!isfinite(v)) {
            refuse(c, VLLM_ERR_FORMAT, "%s: %s is %g, must be finite%s", mult[i].suffix, v, "");
            return;
        }
        json_object_set_new(c->cfg, mult[i].field, json_real(v));
    }
}

/* GLM-4 (llama.cpp src/models/glm4.cpp, Glm4Model): sandwich norms, fused ffn_up (gate | up), q / k / v biases,
 * partial rotary (rope.dimension_count, interleaved pairs: llama.cpp's NORM rope, HF's); M-RoPE files
 * (rope.dimension_sections, GLM-4V: q / k permuted to NeoX by the converter) and nextn blocks are refused. */
static void glm4(ctx *c) {
    char key[160];
    key_of(c, "rope.dimension_sections", key, sizeof key);
    if (gguf_find_key(c->f, key) >= 0) {
        c->st = vt_error(VLLM_ERR_UNSUPPORTED, "%s: %s (GLM-4V's M-RoPE) is not supported", c->what, key);
        return;
    }
    double v;
    if (get_num(c, "nextn_predict_layers", &v) && v > 0)
        refuse(c, VLLM_ERR_UNSUPPORTED, "%s: %s %g (multi-token-prediction blocks) is not supported for glm4%s",
               "nextn_predict_layers", v, "");
    if (!c->st) partial_rotary(c);
}

/* DeepSeek-V2 / V3 (llama.cpp src/models/deepseek2.cpp, conversion/deepseek.py DeepseekV2Model). Since llama.cpp's
 * MLA files (PR 12801) attention.key_length / value_length hold the absorbed sizes (kv_lora_rank + rope,
 * kv_lora_rank) with head_count_kv 1, and key_length_mla / value_length_mla the per-head qk_nope + rope and v
 * sizes; kv_b_proj is split into attn_k_b / attn_v_b (block_mla.c takes them as they are). Older files: the
 * per-head sizes in key_length / value_length and one attn_kv_b. q_lora_rank absent or 0: a plain attn_q (V2-Lite).
 * The MoE: leading_dense_block_count dense layers, then every layer; expert_gating_func 1 (or absent, llama.cpp's
 * default) softmax, 2 sigmoid with exp_probs_b choosing (V3's noaux_tc); expert_group_count groups (the HF
 * checkpoint's group rule: V2's group_limited_greedy by each group's best, V3's by its two best; llama.cpp groups
 * V2 by the two best too); expert_weights_norm, expert_weights_scale (absent or 0: 1); expert_shared_count plain
 * shared experts. YaRN with rope.scaling.yarn_log_multiplier = 0.1 mscale_all_dim (divided back in f32, as
 * llama.cpp; mscale taken equal to it, llama.cpp's assumption); without it, transformers' meaning of no
 * mscale_all_dim (llama.cpp then also squares 1 + 0.1 ln(factor) into the softmax scale). */
static void deepseek2(ctx *c) {
    char key[160];
    int64_t kl = 0, vl = 0, klm = 0, vlm = 0, qlr = 0, L = 0, R = 0, hkv = 0;
    vllm_status err = VLLM_OK;
    if (!put_int(c, "attention.kv_lora_rank", "kv_lora_rank", true, 1) ||
        !put_int(c, "rope.dimension_count", "qk_rope_head_dim", true, 2))
        return;
    L = get_int(c, "kv_lora_rank", 1), R = get_int(c, "qk_rope_head_dim", 2);
    const char *ks[5] = {"attention.key_length", "attention.value_length", "attention.key_length_mla",
                         "attention.value_length_mla", "attention.head_count_kv"};
    int64_t *vs[5] = {&kl, &vl, &klm, &vlm, &hkv};
    bool has[5];
    for (int i = 0; i < 5; i++) {
        key_of(c, ks[i], key, sizeof key);
        has[i] = gguf_get_i64(c->f, key, vs[i], &err);
        if (c->st || (c->st = err)) return;
    }
    const bool mla = has[2] || has[3];
    if (mla && (!has[2] || !has[3] || klm <= R || vlm < 1 || (has[0] && kl != L + R) || (has[1] && vl != L) ||
                (has[4] && hkv != 1))) {
        c->st = vt_error(VLLM_ERR_FORMAT, "%s: deepseek2.attention.key_length_mla %lld / value_length_mla %lld do not "
                         "fit kv_lora_rank %lld and rope.dimension_count %lld (key_length %lld, value_length %lld, "
                         "head_count_kv %lld)", c->what, (long long)klm, (long long)vlm, (long long)L, (long long)R,
                         (long long)kl, (long long)vl, (long long)hkv);
        return;
    }
    if (!mla && (!has[0] || !has[1] || kl <= R || vl < 1)) {
        c->st = vt_error(VLLM_ERR_FORMAT, "%s: deepseek2.attention.key_length / value_length missing or not above "
                         "rope.dimension_count %lld", c->what, (long long)R);
        return;
    }
    json_object_set_new(c->cfg, "qk_nope_head_dim", json_integer((mla ? klm : kl) - R));
    json_object_set_new(c->cfg, "v_head_dim", json_integer(mla ? vlm : vl));
    json_object_set_new(c->cfg, "head_dim", json_integer(R));
    json_object_set_new(c->cfg, "num_key_value_heads", json_object_get(c->cfg, "num_attention_heads"));
    json_incref(json_object_get(c->cfg, "num_attention_heads"));
    key_of(c, "attention.q_lora_rank", key, sizeof key);
    if (gguf_get_i64(c->f, key, &qlr, &err) && qlr > 0) json_object_set_new(c->cfg, "q_lora_rank", json_integer(qlr));
    else json_object_set_new(c->cfg, "q_lora_rank", json_null());
    if (c->st || (c->st = err)) return;
    /* the MoE */
    int64_t v;
    if (!put_int(c, "leading_dense_block_count", "first_k_dense_replace", false, 0) && !c->st)
        json_object_set_new(c->cfg, "first_k_dense_replace", json_integer(0));
    if (!put_int(c, "expert_count", "n_routed_experts", false, 0) && !c->st)
        json_object_set_new(c->cfg, "n_routed_experts", json_integer(0));
    if (!put_int(c, "expert_used_count", "num_experts_per_tok", false, 0) && !c->st)
        json_object_set_new(c->cfg, "num_experts_per_tok", json_integer(0));
    if (!put_int(c, "expert_shared_count", "n_shared_experts", false, 0) && !c->st)
        json_object_set_new(c->cfg, "n_shared_experts", json_integer(0));
    if (get_int(c, "n_routed_experts", 0) > 0) put_int(c, "expert_feed_forward_length", "moe_intermediate_size", true, 1);
    if (c->st) return;
    json_object_set_new(c->cfg, "moe_layer_freq", json_integer(1));
    double f;
    json_object_set_new(c->cfg, "routed_scaling_factor",
                        json_real(get_num(c, "expert_weights_scale", &f) && f != 0.0 ? f : 1.0));
    bool norm = false;
    key_of(c, "expert_weights_norm", key, sizeof key);
    gguf_get_bool(c->f, key, &norm, &err);
    if (c->st || (c->st = err)) return;
    json_object_set_new(c->cfg, "norm_topk_prob", json_boolean(norm));
    int64_t gating = 1, groups = 1, used_groups = 1;
    key_of(c, "expert_gating_func", key, sizeof key);
    if (gguf_get_i64(c->f, key, &v, &err)) gating = v;
    if (!c->st && put_int(c, "expert_group_count", "n_group", false, 0)) groups = get_int(c, "n_group", 1);
    if (!c->st && put_int(c, "expert_group_used_count", "topk_group", false, 0)) used_groups = get_int(c, "topk_group", 1);
    if ((c->st = c->st ? c->st : err)) return;
    if (gating != 1 && gating != 2) {
        refuse(c, VLLM_ERR_UNSUPPORTED, "%s: %s %g is not supported (1 softmax, 2 sigmoid)%s", "expert_gating_func",
               (double)gating, "");
        return;
    }
    const bool sigmoid = gating == 2;
    bool bias = false; /* any layer's */
    for (int64_t l = 0; !bias && l < get_int(c, "num_hidden_layers", 0); l++) {
        char tn[64];
        snprintf(tn, sizeof tn, "blk.%lld.exp_probs_b.bias", (long long)l);
        bias = gguf_find_tensor(c->f, tn) != NULL;
    }
    if (!sigmoid && bias) {
        refuse(c, VLLM_ERR_UNSUPPORTED, "%s: exp_probs_b with %s %g (softmax routing, llama.cpp's default when the key "
               "is absent) is not supported: V3 / R1 files route by sigmoid (2)%s", "expert_gating_func", (double)gating,
               "");
        return;
    }
    json_object_set_new(c->cfg, "scoring_func", json_string(sigmoid ? "sigmoid" : "softmax"));
    json_object_set_new(c->cfg, "topk_method",
                        json_string(sigmoid ? "noaux_tc" : groups > 1 ? "group_limited_greedy" : "greedy"));
    json_object_set_new(c->cfg, "n_group", json_integer(groups < 1 ? 1 : groups));
    json_object_set_new(c->cfg, "topk_group", json_integer(used_groups < 1 ? 1 : used_groups));
    if (sigmoid) { /* V3's class */
        json_object_set_new(c->cfg, "architectures", json_pack("[s]", "DeepseekV3ForCausalLM"));
        json_object_set_new(c->cfg, "model_type", json_string("deepseek_v3"));
    }
    json_object_set_new(c->cfg, "rope_interleave", json_true());
    json_object_set_new(c->cfg, "attention_bias", json_false());
    json_object_set_new(c->cfg, "mlp_bias", json_false());
    json_object_set_new(c->cfg, "num_nextn_predict_layers", json_integer(0));
    /* rope: llama.cpp's YaRN, with its log multiplier as mscale_all_dim */
    double lm;
    const bool has_lm = get_num(c, "rope.scaling.yarn_log_multiplier", &lm);
    const char *type = NULL;
    size_t tlen = 0;
    key_of(c, "rope.scaling.type", key, sizeof key);
    const bool has_type = gguf_get_str(c->f, key, &type, &tlen, &err);
    if ((c->st = c->st ? c->st : err)) return;
    const bool is_yarn = has_type && tlen == 4 && !memcmp(type, "yarn", 4);
    double af;
    if (type && !is_yarn && !(tlen == 4 && !memcmp(type, "none", 4))) {
        c->st = vt_error(VLLM_ERR_UNSUPPORTED, "%s: %s '%.*s' is not supported for deepseek2 (none, yarn)", c->what, key,
                         (int)tlen, type);
        return;
    }
    if (get_num(c, "rope.scaling.attn_factor", &af) && af != 1.0)
        refuse(c, VLLM_ERR_UNSUPPORTED, "%s: %s %g is not supported%s", "rope.scaling.attn_factor", af, "");
    if (c->st) return;
    if (has_lm && !is_yarn) {
        refuse(c, VLLM_ERR_UNSUPPORTED, "%s: %s %g without YaRN is not supported%s", "rope.scaling.yarn_log_multiplier",
               lm, "");
        return;
    }
    if (is_yarn) {
        c->st = yarn_with(c, has_lm, has_lm ? (double)((float)lm / 0.1f) : 0.0);
        if (c->st) return;
    }
}

vllm_status ggc_hf_config(const gguf_file *f, const char *what, char **config_json) {
    *config_json = NULL;
    const char *an = NULL;
    size_t alen = 0;
    const ggc_arch *a = arch_of(f, &an, &alen);
    if (!an) return vt_error(VLLM_ERR_FORMAT, "%s: general.architecture missing", what);
    if (!a)
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: GGUF architecture '%.*s' is not supported (supported: %s)", what,
                        (int)alen, an, ggc_architectures());
    ctx c = {f, what, a->gguf, json_object(), VLLM_OK, false};
    if (!c.cfg) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    /* a llama file with experts is Mixtral's (LlamaModel.modify_tensors merges block_sparse_moe.experts; the
     * llama graph runs them when llama.expert_count > 0) */
    int64_t ne = 0;
    const bool mixtral = !strcmp(a->gguf, "llama") && gguf_get_i64(f, "llama.expert_count", &ne, NULL) && ne > 0;
    json_t *archs = json_array();
    json_array_append_new(archs, json_string(mixtral ? "MixtralForCausalLM" : a->hf));
    json_object_set_new(c.cfg, "architectures", archs);
    json_object_set_new(c.cfg, "model_type", json_string(mixtral ? "mixtral" : a->model_type));
    put_int(&c, "embedding_length", "hidden_size", true, 1);
    /* (a bound before anything loops over the layers: the decoder takes far fewer, hf_config says how many) */
    if (put_int(&c, "block_count", "num_hidden_layers", true, 1) && get_int(&c, "num_hidden_layers", 0) > GGC_MAX_BLOCKS)
        refuse(&c, VLLM_ERR_FORMAT, "%s: %s %g is out of range%s", "block_count",
               (double)get_int(&c, "num_hidden_layers", 0), "");
    put_int(&c, "attention.head_count", "num_attention_heads", true, 1);
    if (!put_int(&c, "attention.head_count_kv", "num_key_value_heads", false, 1) && !c.st)
        json_object_set_new(c.cfg, "num_key_value_heads", json_integer(get_int(&c, "num_attention_heads", 1)));
    put_int(&c, "context_length", "max_position_embeddings", true, 1);
    put_num(&c, "attention.layer_norm_rms_epsilon", "rms_norm_eps", true);
    if (!put_num(&c, "rope.freq_base", "rope_theta", false) && !c.st)
        json_object_set_new(c.cfg, "rope_theta", json_real(10000.0)); /* llama.cpp's default */
    /* head_dim: attention.key_length when given (Qwen3's 128 at hidden 1024 / 16 heads), else the rotary
     * dimension when it covers a whole head, else hidden / heads */
    if (!put_int(&c, "attention.key_length", "head_dim", false, 1) && !c.st) {
        const int64_t hd = get_int(&c, "hidden_size", 0) / get_int(&c, "num_attention_heads", 1);
        json_object_set_new(c.cfg, "head_dim", json_integer(hd));
    }
    if (!c.st) {
        char key[160];
        int64_t vl, rd;
        key_of(&c, "attention.value_length", key, sizeof key);
        if (a->family != GGC_DEEPSEEK2 && gguf_get_i64(f, key, &vl, NULL) && vl != get_int(&c, "head_dim", 0))
            c.st = vt_error(VLLM_ERR_UNSUPPORTED, "%s: %s %lld differs from the key length %lld", what, key, (long long)vl,
                            (long long)get_int(&c, "head_dim", 0));
        key_of(&c, "rope.dimension_count", key, sizeof key);
        if (!c.st && a->family != GGC_PHI3 && a->family != GGC_QWEN3NEXT && a->family != GGC_QWEN35 &&
            a->family != GGC_GLM4 && a->family != GGC_DEEPSEEK2 &&
            gguf_get_i64(f, key, &rd, NULL) && rd != get_int(&c, "head_dim", 0))
            c.st = vt_error(VLLM_ERR_UNSUPPORTED, "%s: %s %lld (partial rotary) is not supported for %s", what, key,
                            (long long)rd, a->gguf);
    }
    const bool hybrid_family = a->family == GGC_QWEN3NEXT || a->family == GGC_QWEN35;
    if (hybrid_family) {
        if (!put_int(&c, "feed_forward_length", "intermediate_size", !a->moe, 1) && !c.st)
            json_object_set_new(c.cfg, "intermediate_size", json_integer(0));
        hybrid(&c, a->family == GGC_QWEN35, a->moe);
    } else if (a->moe) moe(&c, a->family == GGC_QWEN2MOE);
    else if (mixtral) mixtral_moe(&c);
    else put_int(&c, "feed_forward_length", "intermediate_size", true, 1);
    if (!c.st && (a->family == GGC_GEMMA2 || a->family == GGC_GEMMA3)) gemma(&c, a->family == GGC_GEMMA2 ? 2 : 3);
    if (!c.st && a->family == GGC_PHI3) phi3(&c);
    if (!c.st && a->family == GGC_GPTOSS) gptoss(&c);
    if (!c.st && a->family == GGC_OLMO2) olmo2(&c);
    if (!c.st && a->family == GGC_GRANITE) granite(&c);
    if (!c.st && a->family == GGC_GLM4) glm4(&c);
    if (!c.st && a->family == GGC_DEEPSEEK2) deepseek2(&c);
    if (!c.st && a->family != GGC_DEEPSEEK2) c.st = rope(&c);
    /* vocabulary: <arch>.vocab_size, else the embedding's rows */
    const gguf_tensor_info *emb = gguf_find_tensor(f, "token_embd.weight");
    if (!c.st && !emb) c.st = vt_error(VLLM_ERR_FORMAT, "%s: tensor token_embd.weight missing", what);
    if (!c.st && !put_int(&c, "vocab_size", "vocab_size", false, 1) && !c.st)
        json_object_set_new(c.cfg, "vocab_size", json_integer(emb->n_dims >= 2 ? emb->ne[1] : 0));
    if (!c.st) {
        if (!json_object_get(c.cfg, "tie_word_embeddings"))
            json_object_set_new(c.cfg, "tie_word_embeddings", json_boolean(!gguf_find_tensor(f, "output.weight")));
        const bool gemma = a->family == GGC_GEMMA2 || a->family == GGC_GEMMA3;
        json_object_set_new(c.cfg, "hidden_act", json_string(gemma ? "gelu_pytorch_tanh" : "silu"));
        json_object_set_new(c.cfg, "torch_dtype", json_string(emb->type == GGML_TYPE_F32 ? "float32"
                                                              : emb->type == GGML_TYPE_BF16 ? "bfloat16"
                                                                                             : "float16"));
        if (!strcmp(a->gguf, "qwen2")) json_object_set_new(c.cfg, "use_sliding_window", json_false());
        put_token(&c, "bos", "bos_token_id");
        put_token(&c, "eos", "eos_token_id");
    }
    if (c.st) {
        json_decref(c.cfg);
        return c.st;
    }
    *config_json = json_dumps(c.cfg, JSON_COMPACT);
    json_decref(c.cfg);
    return *config_json ? VLLM_OK : vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
}

/* An HF name (a per-layer suffix, or a whole name for GLOBAL_NAMES) and its GGUF one. */
typedef struct ggc_name {
    const char *hf, *gguf;
} ggc_name;

/* HF per-layer suffix -> GGUF per-layer name (blk.N.<gguf>) */
static const ggc_name LAYER_NAMES[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.o_proj.bias", "attn_output.bias"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"self_attn.qkv_proj.weight", "attn_qkv.weight"}, /* phi3's fused q | k | v, kept fused */
    {"mlp.gate_up_proj.weight", "ffn_up.weight"},     /* phi3's fused gate | up, kept fused */
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"mlp.gate.weight", "ffn_gate_inp.weight"},
    {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"}, /* Mixtral's router */
    {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
    {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
    {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
    {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
};

/* Gemma's sandwich norms (gguf-py tensor_mapping.py: ATTN_POST_NORM, FFN_PRE_NORM = ffn_norm, FFN_POST_NORM) */
static const ggc_name GEMMA_NAMES[] = {
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
};

/* DeepSeek-V2 / V3's attention and MoE (gguf-py tensor_mapping.py for DEEPSEEK2; k_b_proj / v_b_proj are the
 * converter's names for kv_b_proj's split, W_UK^T (H, L, N) and W_UV (H, V, L)) */
static const ggc_name DEEPSEEK_NAMES[] = {
    {"self_attn.q_a_proj.weight", "attn_q_a.weight"},
    {"self_attn.q_a_layernorm.weight", "attn_q_a_norm.weight"},
    {"self_attn.q_b_proj.weight", "attn_q_b.weight"},
    {"self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight"},
    {"self_attn.kv_a_layernorm.weight", "attn_kv_a_norm.weight"},
    {"self_attn.k_b_proj.weight", "attn_k_b.weight"},
    {"self_attn.v_b_proj.weight", "attn_v_b.weight"},
    {"self_attn.kv_b_proj.weight", "attn_kv_b.weight"},
    {"mlp.gate.e_score_correction_bias", "exp_probs_b.bias"},
    {"mlp.shared_experts.gate_proj.weight", "ffn_gate_shexp.weight"},
    {"mlp.shared_experts.up_proj.weight", "ffn_up_shexp.weight"},
    {"mlp.shared_experts.down_proj.weight", "ffn_down_shexp.weight"},
};

/* OLMo-2's post-norms (tensor_mapping.py ATTN_POST_NORM, FFN_POST_NORM): its post_attention_layernorm follows the
 * attention */
static const ggc_name OLMO2_NAMES[] = {
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
};

/* GLM-4's sandwich (its post_attention_layernorm is the MLP's input norm, LAYER_NAMES' ffn_norm) */
static const ggc_name GLM4_NAMES[] = {
    {"post_self_attn_layernorm.weight", "post_attention_norm.weight"},
    {"post_mlp_layernorm.weight", "post_ffw_norm.weight"},
};

/* gpt-oss (gguf-py tensor_mapping.py for GPT_OSS): its MLP's input norm is llama.cpp's post_attention_norm, the
 * sinks a tensor of their own, the router with a bias */
static const ggc_name GPTOSS_NAMES[] = {
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"self_attn.sinks", "attn_sinks.weight"},
    {"mlp.router.weight", "ffn_gate_inp.weight"},
    {"mlp.router.bias", "ffn_gate_inp.bias"},
};

#define GGC_NAMES(family, table) {family, table, sizeof table / sizeof *table}
/* the families whose names differ from LAYER_NAMES' (looked up first) */
static const struct {
    ggc_family family;
    const ggc_name *names;
    size_t n;
} FAMILY_NAMES[] = {
    GGC_NAMES(GGC_GEMMA2, GEMMA_NAMES),      GGC_NAMES(GGC_GEMMA3, GEMMA_NAMES), GGC_NAMES(GGC_DEEPSEEK2, DEEPSEEK_NAMES),
    GGC_NAMES(GGC_OLMO2, OLMO2_NAMES),       GGC_NAMES(GGC_GLM4, GLM4_NAMES),   GGC_NAMES(GGC_GPTOSS, GPTOSS_NAMES),
};
#undef GGC_NAMES

/* one expert's matrices in the merged (E, out, in) tensors: Qwen's names and Mixtral's w1 / w3 / w2; half is the
 * row half of ffn_gate_up_exps (the converter's --fuse-gate-up-exps: gate rows, then up rows) holding it instead */
static const struct {
    const char *hf, *gguf;
    int half;
} EXPERT_NAMES[] = {
    {"gate_proj.weight", "ffn_gate_exps.weight", 0}, {"up_proj.weight", "ffn_up_exps.weight", 1},
    {"down_proj.weight", "ffn_down_exps.weight", -1}, {"w1.weight", "ffn_gate_exps.weight", 0},
    {"w3.weight", "ffn_up_exps.weight", 1},          {"w2.weight", "ffn_down_exps.weight", -1},
    /* gpt-oss's expert biases, (E, out) (GptOssModel: gate_up_proj_bias's even / odd entries) */
    {"gate_proj.bias", "ffn_gate_exps.bias", -1},    {"up_proj.bias", "ffn_up_exps.bias", -1},
    {"down_proj.bias", "ffn_down_exps.bias", -1},
};

static const ggc_name GLOBAL_NAMES[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};

/* parses a decimal index at *s (advancing it), -1 when none */
static long parse_index(const char **s) {
    const char *p = *s;
    long v = 0;
    if (*p < '0' || *p > '9') return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        v = v * 10 + (*p - '0');
        if (v > 1000000) return -1;
    }
    *s = p;
    return v;
}

/* Whether an HF name ends with "norm.weight" (convert_hf_to_gguf.py's test for Gemma's w + 1). */
static bool is_norm_weight(const char *hf_name) {
    const size_t n = strlen(hf_name), k = strlen("norm.weight");
    return n >= k && !strcmp(hf_name + n - k, "norm.weight");
}

int ggc_ref_shape(const ggc_tensor_ref *ref, int64_t *shape) {
    const gguf_tensor_info *t = ref->t;
    const int nd = (int)t->n_dims - (ref->expert >= 0 ? 1 : 0);
    for (int i = 0; i < nd; i++) shape[i] = t->ne[nd - 1 - i];
    if (ref->rows > 0) shape[0] = ref->rows;
    if (ref->t2 && nd > 0) shape[0] += ref->t2->ne[ref->t2->n_dims - 1];
    return nd;
}

int64_t ggc_source_index(const ggc_tensor_ref *ref, int64_t i, bool *second) {
    *second = false;
    if (ref->map == GGC_MAP_VHEAD_ROWS || ref->map == GGC_MAP_VHEAD_COLS) {
        /* _LinearAttentionVReorderBase._reorder_v_heads: HF head h = g r + j (key head g's j-th) sits in file
         * slot j hk + g */
        const int64_t j = i - ref->off;
        if (j < 0 || j >= ref->hk * ref->r * ref->hs) return i;
        const int64_t h = j / ref->hs;
        return ref->off + ((h % ref->r) * ref->hk + h / ref->r) * ref->hs + j % ref->hs;
    }
    if (ref->map == GGC_MAP_QKVZ) {
        /* HF row g G + o, G = 2 dk + 2 r hs: q (o < dk), k, v (r hs), z (r hs) of key head g; the file's attn_qkv
         * holds every q, then every k, then every v (Qwen3NextModel.modify_tensors), attn_gate every z */
        const int64_t vr = ref->r * ref->hs, G = 2 * ref->dk + 2 * vr, g = i / G, o = i % G, kd = ref->hk * ref->dk;
        if (o < ref->dk) return g * ref->dk + o;
        if (o < 2 * ref->dk) return kd + g * ref->dk + o - ref->dk;
        if (o < 2 * ref->dk + vr) return 2 * kd + g * vr + o - 2 * ref->dk;
        *second = true;
        return g * vr + o - 2 * ref->dk - vr;
    }
    return i;
}

/* The gated delta-net hybrids' layer tensors (gguf-py tensor_mapping.py for QWEN3NEXT / QWEN35 / QWEN35MOE):
 * true when s is one of theirs (ref->t NULL when the file lacks it). */
static bool hybrid_find(const gguf_file *f, const ggc_arch *a, long l, const char *s, ggc_tensor_ref *ref) {
    static const struct {
        const char *hf, *gguf;
        ggc_map map; /* qwen35's value-head order (qwen3next keeps HF's) */
        int64_t off; /* 0, or 1: after the q and k rows (2 H_k d_k) */
        bool head_rows; /* the value head's rows are d_v (else 1) */
    } names[] = {
        {"post_attention_layernorm.weight", "post_attention_norm.weight", GGC_MAP_NONE, 0, false},
        {"linear_attn.in_proj_qkv.weight", "attn_qkv.weight", GGC_MAP_VHEAD_ROWS, 1, true},
        {"linear_attn.in_proj_z.weight", "attn_gate.weight", GGC_MAP_VHEAD_ROWS, 0, true},
        {"linear_attn.in_proj_b.weight", "ssm_beta.weight", GGC_MAP_VHEAD_ROWS, 0, false},
        {"linear_attn.in_proj_a.weight", "ssm_alpha.weight", GGC_MAP_VHEAD_ROWS, 0, false},
        {"linear_attn.A_log", "ssm_a", GGC_MAP_VHEAD_COLS, 0, false},
        {"linear_attn.dt_bias", "ssm_dt.bias", GGC_MAP_VHEAD_COLS, 0, false},
        {"linear_attn.conv1d.weight", "ssm_conv1d.weight", GGC_MAP_VHEAD_ROWS, 1, true},
        {"linear_attn.norm.weight", "ssm_norm.weight", GGC_MAP_NONE, 0, false},
        {"linear_attn.out_proj.weight", "ssm_out.weight", GGC_MAP_VHEAD_COLS, 0, true},
        {"linear_attn.in_proj_ba.weight", "ssm_ba.weight", GGC_MAP_NONE, 0, false},
        {"linear_attn.in_proj_qkvz.weight", "attn_qkv.weight", GGC_MAP_QKVZ, 0, true},
    };
    char key[160], name[256];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        if (strcmp(s, names[i].hf)) continue;
        snprintf(name, sizeof name, "blk.%ld.%s", l, names[i].gguf);
        ref->t = gguf_find_tensor(f, name);
        ref->neg_exp_log = !strcmp(names[i].gguf, "ssm_a");
        const bool qwen35 = a->family == GGC_QWEN35;
        if (names[i].map == GGC_MAP_NONE || (!qwen35 && names[i].map != GGC_MAP_QKVZ)) return true;
        int64_t hk = 0, hv = 0, dk = 0, inner = 0;
        static const char *keys[4] = {"ssm.group_count", "ssm.time_step_rank", "ssm.state_size", "ssm.inner_size"};
        int64_t *vals[4] = {&hk, &hv, &dk, &inner};
        for (int k = 0; k < 4; k++) {
            snprintf(key, sizeof key, "%s.%s", a->gguf, keys[k]);
            gguf_get_i64(f, key, vals[k], NULL);
        }
        if (hk < 1 || hv < 1 || hv % hk || inner < 1 || inner % hv || dk < 0 || dk > (1 << 20) || inner > (1 << 24)) {
            /* ggc_hf_config refuses these */
            ref->t = NULL;
            return true;
        }
        ref->map = names[i].map;
        ref->hk = hk;
        ref->r = hv / hk;
        ref->dk = dk;
        ref->hs = names[i].head_rows ? inner / hv : 1;
        ref->off = names[i].off ? 2 * hk * dk : 0;
        if (ref->map == GGC_MAP_QKVZ) {
            snprintf(name, sizeof name, "blk.%ld.attn_gate.weight", l);
            ref->t2 = gguf_find_tensor(f, name);
            if (!ref->t2) ref->t = NULL;
        }
        return true;
    }
    return false;
}

bool ggc_find(const gguf_file *f, const char *hf_name, ggc_tensor_ref *ref) {
    memset(ref, 0, sizeof *ref);
    ref->expert = -1;
    char name[256];
    const char *an;
    size_t alen;
    const ggc_arch *a = arch_of(f, &an, &alen);
    const bool gemma = a && (a->family == GGC_GEMMA2 || a->family == GGC_GEMMA3);
    const bool hybrid = a && (a->family == GGC_QWEN3NEXT || a->family == GGC_QWEN35);
    /* Gemma's and the hybrids' norms: convert_hf_to_gguf.py stored w + 1 (HF's x * (1 + w) as llama.cpp's plain
     * norm), except the hybrids' gated norm (linear_attn.norm, a plain w there) */
    ref->norm_minus_one = (gemma || hybrid) && is_norm_weight(hf_name) && !strstr(hf_name, "linear_attn.norm");
    for (size_t i = 0; i < sizeof GLOBAL_NAMES / sizeof *GLOBAL_NAMES; i++)
        if (!strcmp(hf_name, GLOBAL_NAMES[i].hf)) return (ref->t = gguf_find_tensor(f, GLOBAL_NAMES[i].gguf)) != NULL;
    const char *pre = "model.layers.";
    if (strncmp(hf_name, pre, strlen(pre))) return false;
    const char *s = hf_name + strlen(pre);
    const long l = parse_index(&s);
    if (l < 0 || *s != '.') return false;
    s++;
    if (hybrid && hybrid_find(f, a, l, s, ref)) return ref->t != NULL;
    for (size_t k = 0; a && k < sizeof FAMILY_NAMES / sizeof *FAMILY_NAMES; k++) {
        if (FAMILY_NAMES[k].family != a->family) continue;
        for (size_t i = 0; i < FAMILY_NAMES[k].n; i++) {
            if (strcmp(s, FAMILY_NAMES[k].names[i].hf)) continue;
            snprintf(name, sizeof name, "blk.%ld.%s", l, FAMILY_NAMES[k].names[i].gguf);
            return (ref->t = gguf_find_tensor(f, name)) != NULL;
        }
    }
    for (size_t i = 0; i < sizeof LAYER_NAMES / sizeof *LAYER_NAMES; i++) {
        if (strcmp(s, LAYER_NAMES[i].hf)) continue;
        snprintf(name, sizeof name, "blk.%ld.%s", l, LAYER_NAMES[i].gguf);
        if (!(ref->t = gguf_find_tensor(f, name))) return false;
        if (a && a->permute_qk && (!strncmp(s, "self_attn.q_proj.", 17) || !strncmp(s, "self_attn.k_proj.", 17))) {
            char key[160];
            int64_t h = 0, hkv = 0;
            snprintf(key, sizeof key, "%s.attention.head_count", a->gguf);
            gguf_get_i64(f, key, &h, NULL);
            snprintf(key, sizeof key, "%s.attention.head_count_kv", a->gguf);
            if (!gguf_get_i64(f, key, &hkv, NULL)) hkv = h;
            ref->permute_heads = (int)(s[10] == 'q' ? h : hkv);
        }
        return true;
    }
    const char *ex = !strncmp(s, "mlp.experts.", 12) ? "mlp.experts." : "block_sparse_moe.experts.";
    if (strncmp(s, ex, strlen(ex))) return false;
    s += strlen(ex);
    const long e = parse_index(&s);
    if (e < 0 || *s != '.') return false;
    s++;
    for (size_t i = 0; i < sizeof EXPERT_NAMES / sizeof *EXPERT_NAMES; i++) {
        if (strcmp(s, EXPERT_NAMES[i].hf)) continue;
        snprintf(name, sizeof name, "blk.%ld.%s", l, EXPERT_NAMES[i].gguf);
        ref->t = gguf_find_tensor(f, name);
        if (!ref->t && EXPERT_NAMES[i].half >= 0) {
            snprintf(name, sizeof name, "blk.%ld.ffn_gate_up_exps.weight", l);
            if (!(ref->t = gguf_find_tensor(f, name)) || ref->t->n_dims != 3 || ref->t->ne[1] % 2) return false;
            ref->rows = ref->t->ne[1] / 2;
            ref->row0 = EXPERT_NAMES[i].half * ref->rows;
        }
        const int dims = strstr(EXPERT_NAMES[i].hf, ".bias") ? 2 : 3; /* (E, out, in) / (E, out) */
        if (!ref->t || ref->t->n_dims != dims || e >= ref->t->ne[dims - 1]) return false;
        ref->expert = (int)e;
        return true;
    }
    return false;
}
