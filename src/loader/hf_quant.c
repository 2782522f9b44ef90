/* hf_quant.c: quantization_config parsing (hf_quant.h). */
#include "loader/hf_quant.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"

#define NVFP4_GROUP_SIZE 16

/* a string member equal to want (key NULL: o itself) */
static bool str_is(const json_t *o, const char *key, const char *want) {
    const json_t *v = key ? json_object_get(o, key) : o;
    return json_is_string(v) && !strcmp(json_string_value(v), want);
}

static const char *str_or(const json_t *o, const char *key, const char *def) {
    const json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : def;
}

static vllm_status fp8_parse(const json_t *q, const char *what, quant_config *out) {
    const json_t *fmt = json_object_get(q, "fmt"), *act = json_object_get(q, "activation_scheme"),
                 *wbs = json_object_get(q, "weight_block_size");
    if (fmt && !json_is_null(fmt) && !(json_is_string(fmt) && !strcmp(json_string_value(fmt), "e4m3")))
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: quantization_config fmt '%.32s' is not supported (fp8 weights must be e4m3)",
                        what, json_is_string(fmt) ? json_string_value(fmt) : "?");
    if (!wbs || json_is_null(wbs)) { /* per-tensor weight_scale (AutoFP8, vLLM Fp8Config's non-block path) */
        if (act && !json_is_null(act) && !str_is(act, NULL, "dynamic") && !str_is(act, NULL, "static"))
            return vt_error(VLLM_ERR_UNSUPPORTED, "%s: quantization_config activation_scheme '%.32s' is not supported "
                            "(dynamic, static are)", what, json_is_string(act) ? json_string_value(act) : "?");
        out->method = QUANT_FP8;
        out->fp8_scales = FP8_SCALE_TENSOR;
        out->fp8_static_act = act && str_is(act, NULL, "static");
        return VLLM_OK;
    }
    if (!json_is_array(wbs) || json_array_size(wbs) != 2 || !json_is_integer(json_array_get(wbs, 0)) ||
        !json_is_integer(json_array_get(wbs, 1)) || json_integer_value(json_array_get(wbs, 0)) < 1 ||
        json_integer_value(json_array_get(wbs, 0)) > 1 << 20 || json_integer_value(json_array_get(wbs, 1)) < 1)
        return vt_error(VLLM_ERR_FORMAT, "%s: quantization_config weight_block_size must be [block_n, block_k], two "
                        "positive integers", what);
    const int bn = (int)json_integer_value(json_array_get(wbs, 0));
    const json_int_t bk = json_integer_value(json_array_get(wbs, 1));
    if (bk != 128)
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: quantization_config weight_block_size [%d, %lld]: only block_k 128 is "
                        "supported", what, bn, (long long)bk);
    /* vLLM: "The block-wise quantization only supports dynamic activation scheme for now" */
    if (act && !json_is_null(act) && !(json_is_string(act) && !strcmp(json_string_value(act), "dynamic")))
        return vt_error(VLLM_ERR_UNSUPPORTED,
                        "%s: quantization_config activation_scheme '%.32s' is not supported with weight_block_size "
                        "(block-scaled fp8 quantizes activations dynamically)",
                        what, json_is_string(act) ? json_string_value(act) : "?");
    out->method = QUANT_FP8;
    out->fp8_scales = FP8_SCALE_BLOCK;
    out->fp8_scale_inv = true;
    out->block_n = bn;
    out->block_k = (int)bk;
    return VLLM_OK;
}

/* "bits": 4 (the only width read so far) */
static vllm_status bits4(const json_t *q, const char *what, const char *m) {
    const json_t *b = json_object_get(q, "bits");
    if (!json_is_integer(b))
        return vt_error(VLLM_ERR_FORMAT, "%s: quantization_config %s needs an integer bits", what, m);
    if (json_integer_value(b) != 4)
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: quantization_config %s with bits %lld is not supported (4 bits are)",
                        what, m, (long long)json_integer_value(b));
    return VLLM_OK;
}

static vllm_status group_size(const json_t *q, const char *what, const char *m, int *out) {
    const json_t *g = json_object_get(q, "group_size");
    if (!json_is_integer(g) || (json_integer_value(g) != -1 && json_integer_value(g) < 8) ||
        json_integer_value(g) > 1 << 20 || (json_integer_value(g) > 0 && json_integer_value(g) % 8))
        return vt_error(VLLM_ERR_FORMAT, "%s: quantization_config %s group_size must be -1 or a positive multiple of 8",
                        what, m);
    *out = (int)json_integer_value(g);
    return VLLM_OK;
}

static bool opt_bool(const json_t *q, const char *key, bool def, bool *out) {
    const json_t *v = json_object_get(q, key);
    if (!v || json_is_null(v)) return *out = def, true;
    if (!json_is_boolean(v)) return false;
    *out = json_is_true(v);
    return true;
}

/* AutoAWQ's GEMM checkpoints (vLLM AWQConfig): version gemm, zero_point true */
static vllm_status awq_parse(const json_t *q, const char *what, quant_config *out) {
    vllm_status st;
    if ((st = bits4(q, what, "awq")) || (st = group_size(q, what, "awq", &out->group_size))) return st;
    const json_t *v = json_object_get(q, "version");
    if (v && !json_is_null(v) && !(json_is_string(v) && !strcasecmp(json_string_value(v), "gemm")))
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: quantization_config awq version '%.32s' is not supported (gemm is)",
                        what, json_is_string(v) ? json_string_value(v) : "?");
    bool zp = true;
    if (!opt_bool(q, "zero_point", true, &zp))
        return vt_error(VLLM_ERR_FORMAT, "%s: quantization_config zero_point must be true or false", what);
    if (!zp)
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: quantization_config awq with zero_point false is not supported", what);
    out->method = QUANT_AWQ;
    return VLLM_OK;
}

/* GPTQ checkpoints (vLLM GPTQConfig): 4 bits, desc_act, checkpoint_format gptq (v1 zeros) or gptq_v2 */
static vllm_status gptq_parse(const json_t *q, const char *what, quant_config *out) {
    vllm_status st;
    if ((st = bits4(q, what, "gptq")) || (st = group_size(q, what, "gptq", &out->group_size))) return st;
    bool sym = true;
    if (!opt_bool(q, "desc_act", false, &out->desc_act) || !opt_bool(q, "sym", true, &sym))
        return vt_error(VLLM_ERR_FORMAT, "%s: quantization_config desc_act / sym must be true or false", what);
    const json_t *f = json_object_get(q, "checkpoint_format");
    if (!f || json_is_null(f) || (json_is_string(f) && !strcmp(json_string_value(f), "gptq"))) out->gptq_v1 = true;
    else if (!(json_is_string(f) && !strcmp(json_string_value(f), "gptq_v2")))
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: quantization_config gptq checkpoint_format '%.32s' is not supported "
                        "(gptq, gptq_v2 are)", what, json_is_string(f) ? json_string_value(f) : "?");
    out->method = QUANT_GPTQ;
    return VLLM_OK;
}

/* compressed-tensors W4A16 (pack-quantized; vLLM CompressedTensorsWNA16): weights {num_bits 4, type int, strategy
 * group (group_size) or channel, symmetric, static, actorder null / weight / group}, no input_activations */
static vllm_status ct_w4a16_group(const json_t *w, const json_t *ia, const char *name, const char *what,
                                  quant_config *c) {
    if (ia && !json_is_null(ia))
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: compressed-tensors group %.40s quantizes activations with "
                        "pack-quantized int weights (W4A8 / W8A8 int): not supported (W4A16 is)", what, name);
    const json_t *nb = json_object_get(w, "num_bits"), *gs = json_object_get(w, "group_size");
    if (!json_is_integer(nb) || json_integer_value(nb) != 4 || !str_is(w, "type", "int"))
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: compressed-tensors group %.40s: %lld-bit %.16s pack-quantized weights "
                        "are not supported (4-bit int are)", what, name,
                        json_is_integer(nb) ? (long long)json_integer_value(nb) : -1LL, str_or(w, "type", "?"));
    const char *strat = str_or(w, "strategy", "?");
    if (!strcmp(strat, "channel")) c->group_size = -1;
    else if (!strcmp(strat, "group") && json_is_integer(gs) && json_integer_value(gs) >= 8 &&
             json_integer_value(gs) <= 1 << 20 && json_integer_value(gs) % 8 == 0)
        c->group_size = (int)json_integer_value(gs);
    else
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: compressed-tensors group %.40s: weight strategy '%.16s' is not "
                        "supported (group with a group_size that is a multiple of 8, channel)", what, name, strat);
    const json_t *ao = json_object_get(w, "actorder");
    if (ao && !json_is_null(ao) && !(json_is_boolean(ao) && !json_is_true(ao))) {
        if (str_is(w, "actorder", "group") || (json_is_boolean(ao) && json_is_true(ao))) c->desc_act = true;
        else if (!str_is(w, "actorder", "weight"))
            return vt_error(VLLM_ERR_UNSUPPORTED, "%s: compressed-tensors actorder '%.16s' is not supported", what,
                            str_or(w, "actorder", "?"));
    }
    c->method = QUANT_CT_W4A16;
    return VLLM_OK;
}

/* compressed-tensors FP8 W8A8 (float-quantized; vLLM CompressedTensorsW8A8Fp8): weights {num_bits 8, type float,
 * strategy tensor / channel / block (block_structure [bn, 128])}; input_activations {num_bits 8, type float,
 * dynamic (strategy token, tensor or group 128) or static (strategy tensor: an input_scale per layer)}. vllm.c
 * quantizes activations per token and group of 128 in every case (model/weights.c). */
static vllm_status ct_fp8_group(const json_t *w, const json_t *ia, const char *name, const char *what,
                                quant_config *c) {
    const json_t *nb = json_object_get(w, "num_bits");
    if (!json_is_integer(nb) || json_integer_value(nb) != 8 || !str_is(w, "type", "float"))
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: compressed-tensors group %.40s: %lld-bit %.16s float-quantized "
                        "weights are not supported (8-bit float are)", what, name,
                        json_is_integer(nb) ? (long long)json_integer_value(nb) : -1LL, str_or(w, "type", "?"));
    const char *strat = str_or(w, "strategy", "?");
    if (!strcmp(strat, "tensor")) c->fp8_scales = FP8_SCALE_TENSOR;
    else if (!strcmp(strat, "channel")) c->fp8_scales = FP8_SCALE_CHANNEL;
    else if (!strcmp(strat, "block")) {
        const json_t *bs = json_object_get(w, "block_structure");
        const json_t *b0 = json_array_get(bs, 0), *b1 = json_array_get(bs, 1);
        if (!json_is_array(bs) || json_array_size(bs) != 2 || !json_is_integer(b0) || !json_is_integer(b1) ||
            json_integer_value(b0) < 1 || json_integer_value(b0) > 1 << 20 || json_integer_value(b1) != 128)
            return vt_error(VLLM_ERR_UNSUPPORTED, "%s: compressed-tensors group %.40s: block_structure must be "
                            "[block_n, 128]", what, name);
        c->fp8_scales = FP8_SCALE_BLOCK;
        c->block_n = (int)json_integer_value(b0);
        c->block_k = 128;
    } else
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: compressed-tensors group %.40s: FP8 weight strategy '%.16s' is not "
                        "supported (tensor, channel, block)", what, name, strat);
    if (!ia || json_is_null(ia))
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: compressed-tensors group %.40s: FP8 weights without "
                        "input_activations (W8A16, vLLM's Marlin FP8) are not supported (W8A8 FP8 is)", what, name);
    const json_t *ib = json_object_get(ia, "num_bits");
    bool dyn = false;
    if (!json_is_object(ia) || !json_is_integer(ib) || json_integer_value(ib) != 8 || !str_is(ia, "type", "float") ||
        !opt_bool(ia, "dynamic", false, &dyn))
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: compressed-tensors group %.40s: input_activations must be 8-bit float "
                        "with a boolean dynamic", what, name);
    const char *as = str_or(ia, "strategy", "?");
    if (dyn ? strcmp(as, "token") && strcmp(as, "tensor") && strcmp(as, "group") : strcmp(as, "tensor"))
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: compressed-tensors group %.40s: %s activation strategy '%.16s' is not "
                        "supported (dynamic token / tensor / group, static tensor)", what, name,
                        dyn ? "dynamic" : "static", as);
    c->fp8_static_act = !dyn;
    c->method = QUANT_FP8;
    return VLLM_OK;
}

/* compressed-tensors NVFP4 (nvfp4-pack-quantized; vLLM CompressedTensorsW4A16Fp4 / W4A4Fp4): weights {num_bits 4,
 * type float, strategy tensor_group, group_size 16}; input_activations none (W4A16) or the same FP4 scheme (W4A4:
 * run weight-only, as vLLM on Hopper) */
static vllm_status ct_nvfp4_group(const json_t *w, const json_t *ia, const char *name, const char *what,
                                  quant_config *c) {
    const json_t *nb = json_object_get(w, "num_bits"), *gs = json_object_get(w, "group_size");
    if (!json_is_integer(nb) || json_integer_value(nb) != 4 || !str_is(w, "type", "float") ||
        !str_is(w, "strategy", "tensor_group") || !json_is_integer(gs) || json_integer_value(gs) != NVFP4_GROUP_SIZE)
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: compressed-tensors group %.40s: nvfp4-pack-quantized weights must be "
                        "4-bit float, strategy tensor_group, group_size 16", what, name);
    if (ia && !json_is_null(ia)) {
        const json_t *ib = json_object_get(ia, "num_bits");
        if (!json_is_integer(ib) || json_integer_value(ib) != 4 || !str_is(ia, "type", "float"))
            return vt_error(VLLM_ERR_UNSUPPORTED, "%s: compressed-tensors group %.40s: NVFP4 weights with %s input "
                            "activations are not supported (none, or 4-bit float)", what, name, str_or(ia, "type", "?"));
        c->nvfp4_w4a4 = true;
    }
    c->nvfp4_ct = true;
    c->method = QUANT_NVFP4;
    return VLLM_OK;
}

/* compressed-tensors (llm-compressor; vLLM CompressedTensorsConfig): every config group the same scheme, W4A16
 * pack-quantized or FP8 W8A8 float-quantized; weights static and symmetric; no sparsity, no KV-cache scheme, no
 * output activations. */
static vllm_status ct_parse(const json_t *q, const char *what, quant_config *out) {
    const json_t *groups = json_object_get(q, "config_groups"), *sp = json_object_get(q, "sparsity_config"),
                 *kv = json_object_get(q, "kv_cache_scheme");
    if (sp && !json_is_null(sp) && !(json_is_object(sp) && json_object_size(sp) == 0))
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: compressed-tensors sparsity_config (sparse checkpoints) is not supported",
                        what);
    if (kv && !json_is_null(kv)) { /* vLLM's BaseKVCacheMethod: FP8 per-tensor static scales k_scale / v_scale */
        const json_t *nb = json_object_get(kv, "num_bits");
        bool dyn = false, sym = true;
        if (!json_is_object(kv) || !json_is_integer(nb) || json_integer_value(nb) != 8 || !str_is(kv, "type", "float") ||
            !opt_bool(kv, "dynamic", false, &dyn) || !opt_bool(kv, "symmetric", true, &sym) || dyn || !sym ||
            !str_is(kv, "strategy", "tensor"))
            return vt_error(VLLM_ERR_UNSUPPORTED, "%s: compressed-tensors kv_cache_scheme: only 8-bit float, symmetric, "
                            "static, strategy tensor (one k_scale / v_scale per layer) is supported, got %lld-bit %.16s, "
                            "strategy '%.16s'%s%s", what, json_is_integer(nb) ? (long long)json_integer_value(nb) : -1LL,
                            str_or(kv, "type", "?"), str_or(kv, "strategy", "?"), dyn ? ", dynamic" : "",
                            sym ? "" : ", asymmetric");
        out->kv_fp8_scales = true;
    }
    if (!json_is_object(groups) || (json_object_size(groups) == 0 && !out->kv_fp8_scales))
        return vt_error(VLLM_ERR_FORMAT, "%s: quantization_config compressed-tensors needs config_groups", what);
    const char *fmt = str_or(q, "format", "?");
    bool first = true;
    const char *name;
    const json_t *g;
    json_object_foreach((json_t *)groups, name, g) {
        const json_t *w = json_object_get(g, "weights"), *ia = json_object_get(g, "input_activations"),
                     *oa = json_object_get(g, "output_activations");
        const char *gf = str_or(g, "format", fmt);
        if (oa && !json_is_null(oa))
            return vt_error(VLLM_ERR_UNSUPPORTED, "%s: compressed-tensors group %.40s quantizes output activations: not "
                            "supported", what, name);
        if (!json_is_object(w))
            return vt_error(VLLM_ERR_FORMAT, "%s: compressed-tensors group %.40s has no weights scheme", what, name);
        bool sym = true, dyn = false;
        if (!opt_bool(w, "symmetric", true, &sym) || !opt_bool(w, "dynamic", false, &dyn))
            return vt_error(VLLM_ERR_FORMAT, "%s: compressed-tensors symmetric / dynamic must be true or false", what);
        if (!sym || dyn)
            return vt_error(VLLM_ERR_UNSUPPORTED, "%s: compressed-tensors group %.40s: %s weights are not supported "
                            "(symmetric static are)", what, name, !sym ? "asymmetric (zero-point)" : "dynamic");
        quant_config c;
        memset(&c, 0, sizeof c);
        vllm_status st;
        if (!strcmp(gf, "pack-quantized")) st = ct_w4a16_group(w, ia, name, what, &c);
        else if (!strcmp(gf, "float-quantized")) st = ct_fp8_group(w, ia, name, what, &c);
        else if (!strcmp(gf, "nvfp4-pack-quantized")) st = ct_nvfp4_group(w, ia, name, what, &c);
        else
            return vt_error(VLLM_ERR_UNSUPPORTED, "%s: compressed-tensors format '%.40s' (group %.40s) is not supported "
                            "(pack-quantized W4A16, float-quantized FP8 W8A8, nvfp4-pack-quantized are)", what, gf, name);
        if (st != VLLM_OK) return st;
        if (!first && (c.method != out->method || c.group_size != out->group_size || c.desc_act != out->desc_act ||
                       c.fp8_scales != out->fp8_scales || c.block_n != out->block_n ||
                       c.fp8_static_act != out->fp8_static_act || c.nvfp4_w4a4 != out->nvfp4_w4a4))
            return vt_error(VLLM_ERR_UNSUPPORTED, "%s: compressed-tensors config groups with different schemes are not "
                            "supported", what);
        memcpy(c.name, out->name, sizeof c.name); /* what the group does not set: the name, the KV scheme */
        c.kv_fp8_scales = out->kv_fp8_scales;
        *out = c;
        first = false;
    }
    return VLLM_OK;
}

/* NVIDIA ModelOpt (vLLM's ModelOptFp8Config): config.json's {"quant_method": "modelopt", "quant_algo", "ignore",
 * "kv_cache_scheme"} or hf_quant_config.json's {"quantization": {"quant_algo", "kv_cache_quant_algo",
 * "exclude_modules"}}. quant_algo FP8: E4M3 weights with one weight_scale per matrix and a static input_scale;
 * FP8_PER_CHANNEL_PER_TOKEN: a weight_scale per row, dynamic per-token activations; the KV cache's FP8 scales
 * (k_proj.k_scale / v_proj.v_scale) with kv_cache_quant_algo FP8. */
static vllm_status modelopt_parse(const json_t *q, const char *what, quant_config *out) {
    const json_t *inner = json_object_get(q, "quantization");
    const json_t *c = json_is_object(inner) ? inner : q;
    const char *algo = str_or(c, "quant_algo", NULL);
    if (!algo) return vt_error(VLLM_ERR_FORMAT, "%s: quantization_config modelopt has no quant_algo string", what);
    if (!strcasecmp(algo, "FP8")) {
        out->fp8_scales = FP8_SCALE_TENSOR;
        out->fp8_static_act = true;
    } else if (!strcasecmp(algo, "FP8_PER_CHANNEL_PER_TOKEN")) {
        out->fp8_scales = FP8_SCALE_CHANNEL;
    } else if (!strcasecmp(algo, "NVFP4") || !strcasecmp(algo, "W4A16_NVFP4")) {
        const json_t *gs = json_object_get(c, "group_size");
        if (gs && !json_is_null(gs) && !(json_is_integer(gs) && json_integer_value(gs) == NVFP4_GROUP_SIZE))
            return vt_error(VLLM_ERR_UNSUPPORTED, "%s: modelopt NVFP4 group_size must be 16", what);
        out->nvfp4_w4a4 = !strcasecmp(algo, "NVFP4");
    } else {
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: quantization_config modelopt quant_algo '%.32s' is not supported "
                        "(FP8, FP8_PER_CHANNEL_PER_TOKEN, NVFP4, W4A16_NVFP4 are)", what, algo);
    }
    const json_t *kva = json_object_get(c, "kv_cache_quant_algo"), *kvs = json_object_get(c, "kv_cache_scheme");
    if (json_is_string(kva)) {
        if (strcasecmp(json_string_value(kva), "FP8"))
            return vt_error(VLLM_ERR_UNSUPPORTED, "%s: modelopt kv_cache_quant_algo '%.32s' is not supported (FP8 is)",
                            what, json_string_value(kva));
        out->kv_fp8_scales = true;
    } else if (kva && !json_is_null(kva)) {
        return vt_error(VLLM_ERR_FORMAT, "%s: modelopt kv_cache_quant_algo must be a string", what);
    }
    if (json_is_object(kvs)) {
        const json_t *nb = json_object_get(kvs, "num_bits");
        if (!(json_is_integer(nb) && json_integer_value(nb) == 8 && str_is(kvs, "type", "float")))
            return vt_error(VLLM_ERR_UNSUPPORTED, "%s: modelopt kv_cache_scheme: only 8-bit float is supported", what);
        out->kv_fp8_scales = true;
    }
    out->method = strstr(algo, "FP4") || strstr(algo, "fp4") ? QUANT_NVFP4 : QUANT_FP8;
    return VLLM_OK;
}

vllm_status hf_quant_parse(const json_t *quant, const char *what, const char *family_method, quant_config *out) {
    memset(out, 0, sizeof *out);
    if (!quant || json_is_null(quant)) return VLLM_OK;
    if (!json_is_object(quant)) return vt_error(VLLM_ERR_FORMAT, "%s: quantization_config must be an object", what);
    const json_t *qm = json_object_get(quant, "quant_method");
    if (!json_is_string(qm))
        return vt_error(VLLM_ERR_FORMAT, "%s: quantization_config has no quant_method string", what);
    const char *m = json_string_value(qm);
    snprintf(out->name, sizeof out->name, "%s", m);
    if (family_method && !strcmp(m, family_method)) {
        out->method = QUANT_FAMILY;
        return VLLM_OK;
    }
    if (!strcmp(m, "fp8")) return fp8_parse(quant, what, out);
    if (!strcmp(m, "awq")) return awq_parse(quant, what, out);
    if (!strcmp(m, "gptq")) return gptq_parse(quant, what, out);
    if (!strcmp(m, "compressed-tensors")) return ct_parse(quant, what, out);
    if (!strncasecmp(m, "modelopt", 8)) return modelopt_parse(quant, what, out);
    return vt_error(VLLM_ERR_UNSUPPORTED,
                    "%s: quantization_config quant_method '%.32s' is not supported (supported: fp8 (per-tensor, or "
                    "weight_block_size [n, 128]), awq and gptq 4-bit, compressed-tensors pack-quantized W4A16 and "
                    "float-quantized FP8 W8A8, modelopt FP8; F32, F16 and BF16 weights)", what, m);
}
