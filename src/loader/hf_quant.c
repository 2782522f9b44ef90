/* hf_quant.c: quantization_config parsing (hf_quant.h). */
#include "loader/hf_quant.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"

static vllm_status fp8_parse(const json_t *q, const char *what, quant_config *out) {
    const json_t *fmt = json_object_get(q, "fmt"), *act = json_object_get(q, "activation_scheme"),
                 *wbs = json_object_get(q, "weight_block_size");
    if (fmt && !json_is_null(fmt) && !(json_is_string(fmt) && !strcmp(json_string_value(fmt), "e4m3")))
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: quantization_config fmt '%.32s' is not supported (fp8 weights must be e4m3)",
                        what, json_is_string(fmt) ? json_string_value(fmt) : "?");
    if (!wbs || json_is_null(wbs))
        return vt_error(VLLM_ERR_UNSUPPORTED,
                        "%s: quantization_config fp8 without weight_block_size (per-tensor or per-channel scales) is "
                        "not supported yet: block-scaled fp8 checkpoints are", what);
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
    out->method = QUANT_FP8_BLOCK;
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
    return vt_error(VLLM_ERR_UNSUPPORTED,
                    "%s: quantization_config quant_method '%.32s' is not supported (supported: fp8 with "
                    "weight_block_size [n, 128], awq and gptq 4-bit; F32, F16 and BF16 weights)", what, m);
}
