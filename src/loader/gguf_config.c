/* gguf_config.c: a GGUF file's metadata as its Hugging Face config.json, and HF -> GGUF tensor names. */
#include "loader/gguf_config.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"

/* general.architecture -> the HF architecture and model_type it was converted from (llama.cpp's
 * convert_hf_to_gguf.py: LlamaModel (also Mistral), Qwen2Model, Qwen3Model, Qwen3MoeModel) */
typedef struct ggc_arch {
    const char *gguf, *hf, *model_type;
    bool permute_qk; /* llama.cpp permuted q / k rows (llama's rotary layout) */
    bool moe;
} ggc_arch;

static const ggc_arch ARCHS[] = {
    {"llama", "LlamaForCausalLM", "llama", true, false},
    {"qwen2", "Qwen2ForCausalLM", "qwen2", false, false},
    {"qwen3", "Qwen3ForCausalLM", "qwen3", false, false},
    {"qwen3moe", "Qwen3MoeForCausalLM", "qwen3_moe", false, true},
};

bool ggc_is_gguf_path(const char *path) {
    struct stat sb;
    const size_t n = path ? strlen(path) : 0;
    return n > 5 && !strcmp(path + n - 5, ".gguf") && stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

const char *ggc_architectures(void) { return "llama (and Mistral), qwen2, qwen3, qwen3moe"; }

static const ggc_arch *arch_of(const gguf_file *f, const char **name, size_t *len) {
    if (!gguf_get_str(f, "general.architecture", name, len, NULL)) return NULL;
    for (size_t i = 0; i < sizeof ARCHS / sizeof *ARCHS; i++)
        if (strlen(ARCHS[i].gguf) == *len && !memcmp(ARCHS[i].gguf, *name, *len)) return &ARCHS[i];
    return NULL;
}

typedef struct ctx {
    const gguf_file *f;
    const char *what, *arch;
    json_t *cfg;
    vllm_status st;
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
    json_object_set_new(c->cfg, field, json_real(v));
    return true;
}

static int64_t get_int(const ctx *c, const char *field, int64_t def) {
    const json_t *v = json_object_get(c->cfg, field);
    return json_is_integer(v) ? json_integer_value(v) : def;
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
    if (gguf_find_tensor(c->f, "rope_freqs.weight"))
        return vt_error(VLLM_ERR_UNSUPPORTED,
                        "%s: rope_freqs.weight (per-dimension rope factors, llama 3's rope scaling) is not supported yet",
                        c->what);
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
    return vt_error(VLLM_ERR_UNSUPPORTED, "%s: %s '%.*s' is not supported (none, linear)", c->what, key, (int)tlen,
                    type);
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
    ctx c = {f, what, a->gguf, json_object(), VLLM_OK};
    if (!c.cfg) return vt_error(VLLM_ERR_NO_MEMORY, "out of memory");
    json_t *archs = json_array();
    json_array_append_new(archs, json_string(a->hf));
    json_object_set_new(c.cfg, "architectures", archs);
    json_object_set_new(c.cfg, "model_type", json_string(a->model_type));
    put_int(&c, "embedding_length", "hidden_size", true, 1);
    put_int(&c, "block_count", "num_hidden_layers", true, 1);
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
        if (gguf_get_i64(f, key, &vl, NULL) && vl != get_int(&c, "head_dim", 0))
            c.st = vt_error(VLLM_ERR_UNSUPPORTED, "%s: %s %lld differs from the key length %lld", what, key, (long long)vl,
                            (long long)get_int(&c, "head_dim", 0));
        key_of(&c, "rope.dimension_count", key, sizeof key);
        if (!c.st && gguf_get_i64(f, key, &rd, NULL) && rd != get_int(&c, "head_dim", 0))
            c.st = vt_error(VLLM_ERR_UNSUPPORTED, "%s: %s %lld (partial rotary) is not supported for %s", what, key,
                            (long long)rd, a->gguf);
    }
    if (a->moe) {
        put_int(&c, "expert_count", "num_experts", true, 1);
        put_int(&c, "expert_used_count", "num_experts_per_tok", true, 1);
        put_int(&c, "expert_feed_forward_length", "moe_intermediate_size", true, 1);
        json_object_set_new(c.cfg, "norm_topk_prob", json_true()); /* llama.cpp's qwen3moe graph always does */
        json_object_set_new(c.cfg, "decoder_sparse_step", json_integer(1));
        /* a layer without a router keeps a dense MLP (llama.cpp's own graph makes every layer sparse;
         * files converted from a checkpoint with mlp_only_layers carry ffn_gate / ffn_up / ffn_down there) */
        json_t *dense = json_array();
        for (int64_t l = 0; l < get_int(&c, "num_hidden_layers", 0); l++) {
            char tn[96];
            snprintf(tn, sizeof tn, "blk.%lld.ffn_gate_inp.weight", (long long)l);
            if (!gguf_find_tensor(f, tn)) json_array_append_new(dense, json_integer(l));
        }
        json_object_set_new(c.cfg, "mlp_only_layers", dense);
        if (!put_int(&c, "feed_forward_length", "intermediate_size", false, 1) && !c.st)
            json_object_set_new(c.cfg, "intermediate_size", json_integer(get_int(&c, "moe_intermediate_size", 1)));
    } else {
        put_int(&c, "feed_forward_length", "intermediate_size", true, 1);
    }
    if (!c.st) c.st = rope(&c);
    /* vocabulary: <arch>.vocab_size, else the embedding's rows */
    const gguf_tensor_info *emb = gguf_find_tensor(f, "token_embd.weight");
    if (!c.st && !emb) c.st = vt_error(VLLM_ERR_FORMAT, "%s: tensor token_embd.weight missing", what);
    if (!c.st && !put_int(&c, "vocab_size", "vocab_size", false, 1) && !c.st)
        json_object_set_new(c.cfg, "vocab_size", json_integer(emb->n_dims >= 2 ? emb->ne[1] : 0));
    if (!c.st) {
        json_object_set_new(c.cfg, "tie_word_embeddings", json_boolean(!gguf_find_tensor(f, "output.weight")));
        json_object_set_new(c.cfg, "hidden_act", json_string("silu"));
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

/* HF per-layer suffix -> GGUF per-layer name (blk.N.<gguf>) */
static const struct {
    const char *hf, *gguf;
} LAYER_NAMES[] = {
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
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"mlp.gate.weight", "ffn_gate_inp.weight"},
    {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
    {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
    {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
    {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
};

static const struct {
    const char *hf, *gguf;
} EXPERT_NAMES[] = {
    {"gate_proj.weight", "ffn_gate_exps.weight"},
    {"up_proj.weight", "ffn_up_exps.weight"},
    {"down_proj.weight", "ffn_down_exps.weight"},
};

static const struct {
    const char *hf, *gguf;
} GLOBAL_NAMES[] = {
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

bool ggc_find(const gguf_file *f, const char *hf_name, ggc_tensor_ref *ref) {
    memset(ref, 0, sizeof *ref);
    ref->expert = -1;
    char name[256];
    for (size_t i = 0; i < sizeof GLOBAL_NAMES / sizeof *GLOBAL_NAMES; i++)
        if (!strcmp(hf_name, GLOBAL_NAMES[i].hf)) return (ref->t = gguf_find_tensor(f, GLOBAL_NAMES[i].gguf)) != NULL;
    const char *pre = "model.layers.";
    if (strncmp(hf_name, pre, strlen(pre))) return false;
    const char *s = hf_name + strlen(pre);
    const long l = parse_index(&s);
    if (l < 0 || *s != '.') return false;
    s++;
    for (size_t i = 0; i < sizeof LAYER_NAMES / sizeof *LAYER_NAMES; i++) {
        if (strcmp(s, LAYER_NAMES[i].hf)) continue;
        snprintf(name, sizeof name, "blk.%ld.%s", l, LAYER_NAMES[i].gguf);
        if (!(ref->t = gguf_find_tensor(f, name))) return false;
        const char *an;
        size_t alen;
        const ggc_arch *a = arch_of(f, &an, &alen);
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
    const char *ex = "mlp.experts.";
    if (strncmp(s, ex, strlen(ex))) return false;
    s += strlen(ex);
    const long e = parse_index(&s);
    if (e < 0 || *s != '.') return false;
    s++;
    for (size_t i = 0; i < sizeof EXPERT_NAMES / sizeof *EXPERT_NAMES; i++) {
        if (strcmp(s, EXPERT_NAMES[i].hf)) continue;
        snprintf(name, sizeof name, "blk.%ld.%s", l, EXPERT_NAMES[i].gguf);
        ref->t = gguf_find_tensor(f, name);
        if (!ref->t || ref->t->n_dims != 3 || e >= ref->t->ne[2]) return false;
        ref->expert = (int)e;
        return true;
    }
    return false;
}
