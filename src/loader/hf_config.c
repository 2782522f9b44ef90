/*
 * hf_config.c: config.json + generation_config.json -> model_config.
 *
 * Each field is read with a typed getter that names the field and the file
 * in its error message. This file reads the fields every transformers
 * config shares; an architecture's defaults and its own fields come from
 * its model_config_family (src/model/arch_*.c): no model names here.
 */
#include "loader/hf_config.h"
#include "loader/hf_quant.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "core/error.h"
#include "model/config.h"
#include "loader/regular_file.h"

/* config files larger than this are not configs */
#define HF_MAX_CONFIG_BYTES (16u * 1024u * 1024u)

/* ------------------------------------------------------------------ */
/* typed getters: absent and null give the default                    */
/* ------------------------------------------------------------------ */

/* Looks up key; NULL when absent or null. */
const json_t *hf_get(const json_t *obj, const char *key) {
    const json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

/* An int in [min, INT_MAX]. *found says whether it was there (may be NULL when required). */
vllm_status hf_int(const json_t *obj, const char *what, const char *key, bool required, int def, int min,
                          int *out, bool *found) {
    const json_t *v = hf_get(obj, key);
    if (found) *found = v != NULL;
    if (!v) {
        if (required) return vt_error(VLLM_ERR_FORMAT, "%s: %s missing", what, key);
        *out = def;
        return VLLM_OK;
    }
    json_int_t x = json_is_integer(v) ? json_integer_value(v) : 0;
    if (!json_is_integer(v) || x < min || x > INT_MAX) {
        const char *kind = min == 1 ? "a positive integer" : min == 0 ? "a non-negative integer" : "an integer";
        if (json_is_integer(v) && x > INT_MAX)
            return vt_error(VLLM_ERR_FORMAT, "%s: %s %lld is too large", what, key, (long long)x);
        return vt_error(VLLM_ERR_FORMAT, "%s: %s must be %s", what, key, kind);
    }
    *out = (int)x;
    return VLLM_OK;
}

/* A finite number (integer or real) > min_excl. */
vllm_status hf_num(const json_t *obj, const char *what, const char *key, bool required, double def,
                          double min_excl, double *out, bool *found) {
    const json_t *v = hf_get(obj, key);
    if (found) *found = v != NULL;
    if (!v) {
        if (required) return vt_error(VLLM_ERR_FORMAT, "%s: %s missing", what, key);
        *out = def;
        return VLLM_OK;
    }
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    if (!json_is_number(v) || !isfinite(x)) return vt_error(VLLM_ERR_FORMAT, "%s: %s must be a number", what, key);
    if (!(x > min_excl)) return vt_error(VLLM_ERR_FORMAT, "%s: %s must be greater than %g", what, key, min_excl);
    *out = x;
    return VLLM_OK;
}

vllm_status hf_bool(const json_t *obj, const char *what, const char *key, bool def, bool *out) {
    const json_t *v = hf_get(obj, key);
    if (!v) {
        *out = def;
        return VLLM_OK;
    }
    if (!json_is_boolean(v)) return vt_error(VLLM_ERR_FORMAT, "%s: %s must be true or false", what, key);
    *out = json_is_true(v);
    return VLLM_OK;
}

/* A string or NULL (absent/null). */
vllm_status hf_str(const json_t *obj, const char *what, const char *key, const char **out) {
    const json_t *v = hf_get(obj, key);
    *out = NULL;
    if (!v) return VLLM_OK;
    if (!json_is_string(v)) return vt_error(VLLM_ERR_FORMAT, "%s: %s must be a string", what, key);
    *out = json_string_value(v);
    return VLLM_OK;
}

/* A token id: a non-negative int, or -1 when absent/null. */
static vllm_status hf_token_id(const json_t *obj, const char *what, const char *key, int *out) {
    return hf_int(obj, what, key, false, -1, 0, out, NULL);
}

/* eos_token_id: an int or a list of ints. Leaves cfg untouched when absent/null. */
static vllm_status hf_eos(const json_t *obj, const char *what, model_config *cfg) {
    const json_t *v = hf_get(obj, "eos_token_id");
    if (!v) return VLLM_OK;
    if (json_is_integer(v)) {
        int id;
        vllm_status st = hf_int(obj, what, "eos_token_id", false, -1, 0, &id, NULL);
        if (st) return st;
        cfg->eos_token_ids[0] = id;
        cfg->num_eos = 1;
        return VLLM_OK;
    }
    if (!json_is_array(v)) return vt_error(VLLM_ERR_FORMAT, "%s: eos_token_id must be an integer or a list", what);
    size_t n = json_array_size(v);
    if (n > MODEL_MAX_EOS)
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: eos_token_id has %zu ids (at most %d supported)", what, n,
                        MODEL_MAX_EOS);
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_array_get(v, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT_MAX)
            return vt_error(VLLM_ERR_FORMAT, "%s: eos_token_id[%zu] must be a non-negative integer", what, i);
        cfg->eos_token_ids[i] = (int)json_integer_value(x);
    }
    cfg->num_eos = (int)n;
    return VLLM_OK;
}

/* Parses text into a JSON object; "WHAT: invalid JSON at line N: ..." otherwise. */
static vllm_status hf_load_json(const char *text, const char *what, json_t **out) {
    json_error_t jerr;
    *out = NULL;
    json_t *root = json_loads(text, 0, &jerr);
    if (!root) return vt_error(VLLM_ERR_FORMAT, "%s: invalid JSON at line %d: %s", what, jerr.line, jerr.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return vt_error(VLLM_ERR_FORMAT, "%s: not a JSON object", what);
    }
    *out = root;
    return VLLM_OK;
}

/* ------------------------------------------------------------------ */
/* rope                                                                */
/* ------------------------------------------------------------------ */

/* A longrope factor list (short_factor / long_factor): positive numbers, at most ROPE_MAX_FACTORS. */
static vllm_status rope_factors(const json_t *sc, const char *what, const char *key, float *out, int *n) {
    const json_t *a = hf_get(sc, key);
    if (!a || !json_is_array(a) || json_array_size(a) == 0 || json_array_size(a) > ROPE_MAX_FACTORS)
        return vt_error(VLLM_ERR_FORMAT, "%s: rope longrope %s must be a list of 1 to %d numbers", what, key,
                        ROPE_MAX_FACTORS);
    for (size_t i = 0; i < json_array_size(a); i++) {
        const json_t *v = json_array_get(a, i);
        double x = json_is_number(v) ? json_number_value(v) : NAN;
        if (!(isfinite(x) && x > 0))
            return vt_error(VLLM_ERR_FORMAT, "%s: rope longrope %s[%zu] must be a positive number", what, key, i);
        out[i] = (float)x;
    }
    if (*n && *n != (int)json_array_size(a))
        return vt_error(VLLM_ERR_FORMAT, "%s: rope longrope short_factor and long_factor differ in length", what);
    *n = (int)json_array_size(a);
    return VLLM_OK;
}

/* original_max_position_embeddings from the rope parameters, else the config's top level (Phi-3 keeps
 * it there), else max_position_embeddings. */
static vllm_status rope_original_max(const json_t *root, const json_t *sc, const char *what, int max_pos,
                                     rope_config *rope) {
    bool found = false;
    vllm_status st = hf_int(sc, what, "original_max_position_embeddings", false, max_pos, 1,
                            &rope->original_max_position, &found);
    if (st || found) return st;
    return hf_int(root, what, "original_max_position_embeddings", false, max_pos, 1, &rope->original_max_position,
                  NULL);
}

/* transformers' _compute_longrope_parameters: original_max_position_embeddings from the rope
 * parameters or the top level (Phi-3 keeps it there), factor = max_position_embeddings / it unless
 * given, attention_factor = sqrt(1 + ln(factor) / ln(original)) (1 when factor <= 1) unless given. */
static vllm_status hf_longrope(const json_t *root, const json_t *sc, const char *what, int max_pos, rope_config *rope) {
    vllm_status st;
    rope->type = ROPE_LONGROPE;
    if (hf_get(sc, "short_mscale") || hf_get(sc, "long_mscale"))
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: rope longrope short_mscale / long_mscale are not supported", what);
    if ((st = rope_factors(sc, what, "short_factor", rope->short_factor, &rope->num_factors)) ||
        (st = rope_factors(sc, what, "long_factor", rope->long_factor, &rope->num_factors)))
        return st;
    if ((st = rope_original_max(root, sc, what, max_pos, rope))) return st;
    if ((st = hf_num(sc, what, "factor", false, (double)max_pos / rope->original_max_position, 0.0, &rope->factor, NULL)))
        return st;
    double af = rope->factor <= 1.0 ? 1.0 : sqrt(1.0 + log(rope->factor) / log((double)rope->original_max_position));
    if (rope->original_max_position < 2 && rope->factor > 1.0)
        return vt_error(VLLM_ERR_FORMAT, "%s: rope longrope original_max_position_embeddings must be at least 2", what);
    return hf_num(sc, what, "attention_factor", false, af, 0.0, &rope->attention_factor, NULL);
}

/* transformers 5's _compute_yarn_parameters: factor (else max_position_embeddings / original),
 * original_max_position_embeddings (else max_position_embeddings), attention_factor unless given
 * get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) when both are set, else
 * get_mscale(factor) = 0.1 ln(factor) + 1 (1 when factor <= 1); beta_fast 32, beta_slow 1,
 * truncate true by default (gpt-oss: false). */
static double yarn_mscale(double scale, double m) { return scale <= 1.0 ? 1.0 : 0.1 * m * log(scale) + 1.0; }

static vllm_status hf_yarn(const json_t *root, const json_t *sc, const char *what, int max_pos, rope_config *rope) {
    vllm_status st;
    rope->type = ROPE_YARN;
    if ((st = rope_original_max(root, sc, what, max_pos, rope))) return st;
    double mscale = 0, mscale_all = 0;
    if ((st = hf_num(sc, what, "factor", false, (double)max_pos / rope->original_max_position, 0.0, &rope->factor,
                     NULL)) ||
        (st = hf_num(sc, what, "beta_fast", false, 32.0, 0.0, &rope->beta_fast, NULL)) ||
        (st = hf_num(sc, what, "beta_slow", false, 1.0, 0.0, &rope->beta_slow, NULL)) ||
        (st = hf_bool(sc, what, "truncate", true, &rope->truncate)))
        return st;
    /* mscale / mscale_all_dim: used when both are set and nonzero (Python truthiness), else ignored */
    const json_t *m1 = hf_get(sc, "mscale"), *m2 = hf_get(sc, "mscale_all_dim");
    if ((m1 && !json_is_null(m1) && !json_is_number(m1)) || (m2 && !json_is_null(m2) && !json_is_number(m2)))
        return vt_error(VLLM_ERR_FORMAT, "%s: rope yarn mscale and mscale_all_dim must be numbers", what);
    mscale = json_is_number(m1) ? json_number_value(m1) : 0;
    mscale_all = json_is_number(m2) ? json_number_value(m2) : 0;
    if (!isfinite(mscale) || !isfinite(mscale_all))
        return vt_error(VLLM_ERR_FORMAT, "%s: rope yarn mscale and mscale_all_dim must be finite", what);
    double af = mscale != 0 && mscale_all != 0 ? yarn_mscale(rope->factor, mscale) / yarn_mscale(rope->factor, mscale_all)
                                               : yarn_mscale(rope->factor, 1.0);
    if (!(rope->beta_fast > rope->beta_slow))
        return vt_error(VLLM_ERR_FORMAT, "%s: rope yarn beta_fast %g must exceed beta_slow %g", what, rope->beta_fast,
                        rope->beta_slow);
    return hf_num(sc, what, "attention_factor", false, af, 0.0, &rope->attention_factor, NULL);
}

static vllm_status hf_rope(const json_t *root, const char *what, int max_pos, double partial_default,
                           rope_config *rope) {
    vllm_status st;
    memset(rope, 0, sizeof *rope);
    rope->type = ROPE_DEFAULT;
    rope->factor = 1.0;
    rope->attention_factor = 1.0;

    /* v5: rope_parameters {rope_type, rope_theta, factor, ...}; v4: rope_theta + rope_scaling */
    const json_t *params = hf_get(root, "rope_parameters");
    if (params && !json_is_object(params)) return vt_error(VLLM_ERR_FORMAT, "%s: rope_parameters must be an object", what);
    /* v5 models with per-layer-type tables: the global one here, the architecture reads the rest */
    if (params && hf_get(params, "full_attention")) {
        params = hf_get(params, "full_attention");
        if (!json_is_object(params))
            return vt_error(VLLM_ERR_FORMAT, "%s: rope_parameters.full_attention must be an object", what);
    }
    const json_t *scaling = hf_get(root, "rope_scaling");
    if (scaling && !json_is_object(scaling)) return vt_error(VLLM_ERR_FORMAT, "%s: rope_scaling must be an object", what);

    bool found = false;
    if (params) {
        st = hf_num(params, what, "rope_theta", false, 10000.0, 0.0, &rope->theta, &found);
        if (st) return st;
    }
    if (!found) {
        st = hf_num(root, what, "rope_theta", false, 10000.0, 0.0, &rope->theta, NULL);
        if (st) return st;
    }
    found = false;
    if (params) {
        st = hf_num(params, what, "partial_rotary_factor", false, partial_default, 0.0, &rope->partial_rotary_factor,
                    &found);
        if (st) return st;
    }
    if (!found) {
        st = hf_num(root, what, "partial_rotary_factor", false, partial_default, 0.0, &rope->partial_rotary_factor,
                    NULL);
        if (st) return st;
    }
    if (rope->partial_rotary_factor > 1.0)
        return vt_error(VLLM_ERR_FORMAT, "%s: partial_rotary_factor must be in (0, 1]", what);

    const json_t *sc = scaling ? scaling : params;
    if (!sc) return VLLM_OK;
    const char *type = NULL;
    st = hf_str(sc, what, "rope_type", &type);
    if (st) return st;
    if (!type) {
        st = hf_str(sc, what, "type", &type);  /* legacy spelling */
        if (st) return st;
    }
    if (!type || !strcmp(type, "default")) return VLLM_OK;
    if (!strcmp(type, "linear")) {
        rope->type = ROPE_LINEAR;
        return hf_num(sc, what, "factor", true, 1.0, 0.0, &rope->factor, NULL);
    }
    if (!strcmp(type, "llama3")) {
        rope->type = ROPE_LLAMA3;
        if ((st = hf_num(sc, what, "factor", true, 1.0, 0.0, &rope->factor, NULL)) ||
            (st = hf_num(sc, what, "low_freq_factor", true, 1.0, 0.0, &rope->low_freq_factor, NULL)) ||
            (st = hf_num(sc, what, "high_freq_factor", true, 4.0, 0.0, &rope->high_freq_factor, NULL)) ||
            (st = hf_int(sc, what, "original_max_position_embeddings", true, max_pos, 1,
                         &rope->original_max_position, NULL)))
            return st;
        if (!(rope->high_freq_factor > rope->low_freq_factor))
            return vt_error(VLLM_ERR_FORMAT, "%s: rope llama3 high_freq_factor %g must exceed low_freq_factor %g", what,
                            rope->high_freq_factor, rope->low_freq_factor);
        return VLLM_OK;
    }
    if (!strcmp(type, "longrope") || !strcmp(type, "su")) /* "su": its legacy name */
        return hf_longrope(root, sc, what, max_pos, rope);
    if (!strcmp(type, "yarn")) return hf_yarn(root, sc, what, max_pos, rope);
    return vt_error(VLLM_ERR_UNSUPPORTED,
                    "%s: rope type '%.64s' is not supported (default, linear, llama3, longrope, yarn)", what, type);
}

/* ------------------------------------------------------------------ */
/* config.json                                                         */
/* ------------------------------------------------------------------ */

/* The key is not in the object at all (null is present: it means None). */
bool hf_absent(const json_t *obj, const char *key) { return json_object_get(obj, key) == NULL; }

static vllm_status hf_parse_config(const json_t *top, const char *what, model_config *c) {
    vllm_status st;
    const json_t *root = top; /* the decoder's fields: the top level, or text_config (below) */

    /* architectures[0], model_type */
    const json_t *archs = hf_get(top, "architectures");
    if (!archs) return vt_error(VLLM_ERR_FORMAT, "%s: architectures missing", what);
    if (!json_is_array(archs) || json_array_size(archs) == 0 || !json_is_string(json_array_get(archs, 0)))
        return vt_error(VLLM_ERR_FORMAT, "%s: architectures must be a non-empty list of strings", what);
    const char *arch = json_string_value(json_array_get(archs, 0));
    if (arch[0] == '\0' || strlen(arch) >= sizeof c->architecture)
        return vt_error(VLLM_ERR_FORMAT, "%s: architectures[0] '%.80s' is empty or too long", what, arch);
    strcpy(c->architecture, arch);
    const char *mt;
    if ((st = hf_str(top, what, "model_type", &mt))) return st;
    if (mt) {
        if (strlen(mt) >= sizeof c->model_type)
            return vt_error(VLLM_ERR_FORMAT, "%s: model_type '%.80s' is too long", what, mt);
        strcpy(c->model_type, mt);
    }
    /* the architecture's own defaults and fields (src/model/arch_*.c); an unknown one gets
     * the defaults of the common config class, and the model registry refuses it when the model loads */
    static const model_config_family unknown = {.max_position_embeddings = 2048};
    const model_config_family *fam = model_config_family_find(arch);
    if (!fam) fam = &unknown;
    if (fam->text_config) {
        root = hf_get(top, "text_config");
        if (!root || !json_is_object(root))
            return vt_error(VLLM_ERR_FORMAT, "%s: text_config missing (the text model's fields of %s)", what, arch);
    }

    /* sizes */
    if ((st = hf_int(root, what, "vocab_size", true, 0, 1, &c->vocab_size, NULL)) ||
        (st = hf_int(root, what, "hidden_size", true, 0, 1, &c->hidden_size, NULL)) ||
        (st = hf_int(root, what, fam->intermediate_key ? fam->intermediate_key : "intermediate_size", true, 0, 1,
                     &c->intermediate_size, NULL)) ||
        (st = hf_int(root, what, "num_hidden_layers", true, 0, 1, &c->num_layers, NULL)) ||
        (st = hf_int(root, what, "num_attention_heads", true, 0, 1, &c->num_heads, NULL)) ||
        (st = hf_int(root, what, "num_key_value_heads", false,
                     hf_absent(root, "num_key_value_heads") && fam->num_kv_heads ? fam->num_kv_heads : c->num_heads, 1,
                     &c->num_kv_heads, NULL)) ||
        (st = hf_int(root, what, "max_position_embeddings", false, fam->max_position_embeddings, 1,
                     &c->max_position_embeddings, NULL)))
        return st;
    if (c->num_layers > MODEL_MAX_LAYERS)
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: num_hidden_layers %d exceeds the limit %d", what, c->num_layers,
                        MODEL_MAX_LAYERS);
    if (c->num_heads % c->num_kv_heads != 0)
        return vt_error(VLLM_ERR_FORMAT, "%s: num_key_value_heads %d does not divide num_attention_heads %d", what,
                        c->num_kv_heads, c->num_heads);
    bool has_head_dim;
    if ((st = hf_int(root, what, "head_dim", false, fam->head_dim, 1, &c->head_dim, &has_head_dim))) return st;
    if (!has_head_dim && hf_absent(root, "head_dim") && fam->head_dim) has_head_dim = true; /* a class default */
    if (!has_head_dim) {
        if (c->hidden_size % c->num_heads != 0)
            return vt_error(VLLM_ERR_FORMAT, "%s: hidden_size %d is not a multiple of num_attention_heads %d (and no head_dim)",
                            what, c->hidden_size, c->num_heads);
        c->head_dim = c->hidden_size / c->num_heads;
    }
    /* q, k, v projections fused: (num_heads + 2 * num_kv_heads) * head_dim rows; gate + up: 2 * intermediate */
    int64_t qkv = ((int64_t)c->num_heads + 2 * (int64_t)c->num_kv_heads) * c->head_dim;
    if (qkv > INT_MAX)
        return vt_error(VLLM_ERR_FORMAT, "%s: (num_attention_heads + 2 * num_key_value_heads) * head_dim is too large",
                        what);
    if (2 * (int64_t)c->intermediate_size > INT_MAX)
        return vt_error(VLLM_ERR_FORMAT, "%s: intermediate_size %d is too large", what, c->intermediate_size);

    if ((st = hf_num(root, what, "rms_norm_eps", false, fam->rms_norm_eps > 0 ? fam->rms_norm_eps : 1e-6, 0.0,
                     &c->rms_norm_eps, NULL)) ||
        (st = hf_bool(root, what, "tie_word_embeddings", fam->tie_word_embeddings, &c->tie_word_embeddings)) ||
        (st = hf_bool(root, what, "attention_bias", fam->attention_bias, &c->attention_bias)))
        return st;

    /* quantized checkpoints: block-scaled FP8, or a quant_method the family's loader dequantizes itself
     * (gpt-oss's MXFP4 experts); others refused (hf_quant.h) */
    const json_t *quant = hf_get(top, "quantization_config");
    if (!quant) quant = hf_get(root, "quantization_config");
    if ((st = hf_quant_parse(quant, what, fam->quant_method, &c->quant))) return st;

    if ((st = hf_rope(root, what, c->max_position_embeddings,
                      fam->partial_rotary_factor > 0 ? fam->partial_rotary_factor : 1.0, &c->rope)))
        return st;
    /* rotary dimension int(head_dim * partial_rotary_factor), as vLLM's get_rope(rotary_dim=...): the
     * first rot_dim values of each head rotate, as pairs (i, i + rot_dim / 2) */
    double rot = floor((double)c->head_dim * c->rope.partial_rotary_factor);
    if (rot < 2 || (long long)rot % 2)
        return vt_error(VLLM_ERR_UNSUPPORTED,
                        "%s: partial_rotary_factor %g with head_dim %d gives a rotary dimension of %lld (it must be even "
                        "and at least 2)",
                        what, c->rope.partial_rotary_factor, c->head_dim, (long long)rot);
    if (c->rope.type == ROPE_LONGROPE && c->rope.num_factors != (int)rot / 2)
        return vt_error(VLLM_ERR_FORMAT, "%s: rope longrope short_factor / long_factor have %d entries, the rotary "
                        "dimension %d needs %d", what, c->rope.num_factors, (int)rot, (int)rot / 2);

    /* dtype (v5) or torch_dtype (v4) */
    const char *dt = NULL;
    const char *dt_key = "dtype";
    for (const json_t *o = root;; o = top) { /* the text config's, else the top level's */
        if ((st = hf_str(o, what, "dtype", &dt))) return st;
        if (!dt) {
            dt_key = "torch_dtype";
            if ((st = hf_str(o, what, "torch_dtype", &dt))) return st;
        }
        if (dt || o == top) break;
        dt_key = "dtype";
    }
    c->torch_dtype = DTYPE_BF16;
    if (dt) {
        if (!strcmp(dt, "bfloat16")) c->torch_dtype = DTYPE_BF16;
        else if (!strcmp(dt, "float16")) c->torch_dtype = DTYPE_F16;
        else if (!strcmp(dt, "float32")) c->torch_dtype = DTYPE_F32;
        else
            return vt_error(VLLM_ERR_UNSUPPORTED, "%s: %s '%.32s' is not supported (bfloat16, float16, float32)",
                            what, dt_key, dt);
    }

    /* token ids */
    /* token ids: a multimodal config keeps them at the top (or in text_config) */
    const json_t *ids = root != top && hf_get(top, "eos_token_id") ? top : root;
    if ((st = hf_token_id(ids, what, "bos_token_id", &c->bos_token_id)) ||
        (st = hf_token_id(ids, what, "pad_token_id", &c->pad_token_id)) || (st = hf_eos(ids, what, c)))
        return st;

    /* the decoder's spec: every layer global attention + a dense MLP on the one RoPE table,
     * until the architecture says otherwise */
    c->ropes[0] = c->rope;
    c->num_ropes = 1;
    strcpy(c->weight_prefix, "model.");
    for (int i = 0; i < c->num_layers; i++) c->layers[i] = (layer_spec){.kind = LAYER_ATTENTION, .mlp = MLP_DENSE};
    return fam->parse ? fam->parse(root, what, c) : VLLM_OK;
}

/* generation_config.json: eos list replaces config's, bos when present, sampling defaults. */
static vllm_status hf_parse_generation(const json_t *root, model_config *c) {
    const char *what = "generation_config.json";
    vllm_status st;
    if ((st = hf_eos(root, what, c))) return st;
    if (hf_get(root, "bos_token_id") && (st = hf_token_id(root, what, "bos_token_id", &c->bos_token_id))) return st;
    double t;
    bool found;
    if ((st = hf_num(root, what, "temperature", false, 0.0, -HUGE_VAL, &t, &found))) return st;
    if (found) {
        if (t < 0.0) return vt_error(VLLM_ERR_FORMAT, "%s: temperature must be >= 0", what);
        c->has_temperature = true;
        c->gen_temperature = t;
    }
    if ((st = hf_num(root, what, "top_p", false, 1.0, 0.0, &t, &found))) return st;
    if (found) {
        if (t > 1.0) return vt_error(VLLM_ERR_FORMAT, "%s: top_p must be in (0, 1]", what);
        c->has_top_p = true;
        c->gen_top_p = t;
    }
    int k;
    if ((st = hf_int(root, what, "top_k", false, 0, -1, &k, &found))) return st;
    if (found) {
        c->has_top_k = true;
        c->gen_top_k = k;
    }
    return VLLM_OK;
}

vllm_status hf_config_parse(const char *config_json, const char *gen_json, const char *what, model_config *cfg) {
    if (!what) what = "config.json";
    if (!config_json || !cfg) return vt_error(VLLM_ERR_INVALID_ARG, "%s: hf_config_parse: NULL argument", what);
    /* parse into a local copy so that cfg is only written on success */
    model_config *c = calloc(1, sizeof *c);
    if (!c) return vt_error(VLLM_ERR_NO_MEMORY, "%s: out of memory", what);
    c->bos_token_id = c->pad_token_id = -1;
    for (int i = 0; i < MODEL_MAX_EOS; i++) c->eos_token_ids[i] = -1;

    json_t *root = NULL, *gen = NULL;
    vllm_status st = hf_load_json(config_json, what, &root);
    if (!st) st = hf_parse_config(root, what, c);
    if (!st && gen_json) {
        st = hf_load_json(gen_json, "generation_config.json", &gen);
        if (!st) st = hf_parse_generation(gen, c);
    }
    if (!st) *cfg = *c;
    json_decref(root);
    json_decref(gen);
    free(c);
    return st;
}

/* ------------------------------------------------------------------ */
/* files                                                               */
/* ------------------------------------------------------------------ */

/* Reads dir/name into a NUL-terminated buffer (a regular file only: a FIFO or a device there is
   refused, never waited on). *text is NULL (and VLLM_OK returned) when the file does not exist and
   optional is set. */
static vllm_status hf_read_file(const char *dir, const char *name, bool optional, char **text) {
    *text = NULL;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return vt_error(VLLM_ERR_INVALID_ARG, "%s: path too long", dir);
    size_t size;
    char *buf;
    vllm_status st = rf_read(path, HF_MAX_CONFIG_BYTES, &buf, &size);
    if (st == VLLM_ERR_NOT_FOUND) {
        if (optional) {
            vt_error_clear();
            return VLLM_OK;
        }
        return VLLM_ERR_IO; /* the message, "PATH: No such file or directory", is set */
    }
    if (st) return st;
    if (strlen(buf) != size) {
        free(buf);
        return vt_error(VLLM_ERR_FORMAT, "%s: contains a NUL byte", name);
    }
    *text = buf;
    return VLLM_OK;
}

/* ModelOpt's exports keep their quantization in hf_quant_config.json ({"producer": {"name": "modelopt"},
 * "quantization": {...}}), which vLLM reads (ModelOptQuantConfigBase.get_config_filenames) when config.json has
 * no quantization_config. */
static vllm_status hf_quant_file(const char *dir, model_config *cfg) {
    char *text = NULL;
    vllm_status st = hf_read_file(dir, "hf_quant_config.json", true, &text);
    if (st || !text) return st;
    json_error_t err;
    json_t *q = json_loads(text, 0, &err);
    free(text);
    if (!json_is_object(q)) {
        json_decref(q);
        return vt_error(VLLM_ERR_FORMAT, "hf_quant_config.json: invalid JSON at line %d: %s", err.line, err.text);
    }
    if (!json_object_get(q, "quant_method")) json_object_set_new(q, "quant_method", json_string("modelopt"));
    quant_config qc;
    st = hf_quant_parse(q, "hf_quant_config.json", NULL, &qc);
    json_decref(q);
    if (st == VLLM_OK) cfg->quant = qc;
    return st;
}

vllm_status hf_config_load(const char *dir, model_config *cfg) {
    if (!dir || !cfg) return vt_error(VLLM_ERR_INVALID_ARG, "hf_config_load: NULL argument");
    char *config = NULL, *gen = NULL;
    vllm_status st = hf_read_file(dir, "config.json", false, &config);
    if (!st) st = hf_read_file(dir, "generation_config.json", true, &gen);
    if (!st) st = hf_config_parse(config, gen, "config.json", cfg);
    if (!st && cfg->quant.method == QUANT_NONE && !cfg->quant.kv_fp8_scales) st = hf_quant_file(dir, cfg);
    free(config);
    free(gen);
    return st;
}
