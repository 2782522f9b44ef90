/*
 * oai_field.c: typed access to the fields of a JSON request body, with
 * pydantic-like errors (400, naming the field in `param`).
 *
 * vLLM validates bodies with pydantic (vllm/entrypoints/openai/completion/protocol.py,
 * chat_completion/protocol.py):
 * a wrong type is a 400 naming the field; JSON null means "use the default"
 * for the Optional fields; integers may come as integral floats (5.0);
 * unknown fields are ignored (OpenAIBaseModel logs a warning).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "server/oai_internal.h"

const char *oai_json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

vllm_status oai_type_error(oai_error *err, const char *param, const char *want, const json_t *v) {
    oai_error_set(err, 400, param, "%s: Input should be %s, got %s", param, want, v ? oai_json_kind(v) : "nothing");
    return VLLM_ERR_INVALID_ARG;
}

json_t *oai_field(const json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

vllm_status oai_get_bool(const json_t *obj, const char *key, bool *out, oai_error *err) {
    json_t *v = oai_field(obj, key);
    if (!v) return VLLM_OK;
    if (!json_is_boolean(v)) return oai_type_error(err, key, "a valid boolean", v);
    *out = json_is_true(v);
    return VLLM_OK;
}

vllm_status oai_get_ll(const json_t *v, const char *param, long long *out, oai_error *err) {
    if (json_is_integer(v)) {
        *out = (long long)json_integer_value(v);
        return VLLM_OK;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        /* pydantic: a float is accepted for an int only when it has no fractional part */
        if (d != floor(d)) {
            oai_error_set(err, 400, param,
                          "%s: Input should be a valid integer, got a number with a fractional part", param);
            return VLLM_ERR_INVALID_ARG;
        }
        if (d >= -9223372036854775808.0 && d < 9223372036854775808.0) {
            *out = (long long)d;
            return VLLM_OK;
        }
        /* pydantic takes it as a Python int; here integers are int64 (as jansson's) */
        char num[32];
        oai_py_float(d, num);
        oai_error_set(err, 400, param,
                      "%s: Input should be an integer in [-9223372036854775808, 9223372036854775807], got %s",
                      param, num);
        return VLLM_ERR_INVALID_ARG;
    }
    return oai_type_error(err, param, "a valid integer", v);
}

vllm_status oai_get_int64(const json_t *obj, const char *key, long long *out, bool *present, oai_error *err) {
    json_t *v = oai_field(obj, key);
    if (!v) return VLLM_OK;
    vllm_status st = oai_get_ll(v, key, out, err);
    if (st == VLLM_OK && present) *present = true;
    return st;
}

vllm_status oai_get_double(const json_t *obj, const char *key, double *out, bool *present, oai_error *err) {
    json_t *v = oai_field(obj, key);
    if (!v) return VLLM_OK;
    if (!json_is_number(v)) return oai_type_error(err, key, "a valid number", v);
    *out = json_number_value(v); /* an integer becomes a float, as pydantic's lax mode */
    if (present) *present = true;
    return VLLM_OK;
}

vllm_status oai_get_string(const json_t *obj, const char *key, const char **out, oai_error *err) {
    json_t *v = oai_field(obj, key);
    if (!v) return VLLM_OK;
    if (!json_is_string(v)) return oai_type_error(err, key, "a valid string", v);
    *out = json_string_value(v);
    return VLLM_OK;
}

vllm_status oai_parse_body(const char *body, size_t len, json_t **root, oai_error *err) {
    *root = NULL;
    if (!body || len == 0) {
        oai_error_set(err, 400, NULL, "Invalid JSON body: the request body is empty");
        return VLLM_ERR_INVALID_ARG;
    }
    /* jansson rejects invalid UTF-8, lone surrogates, \u0000 in strings, integers
       outside int64, numbers outside double and nesting deeper than 2048 */
    json_error_t je;
    json_t *j = json_loadb(body, len, JSON_DECODE_ANY, &je);
    if (!j) {
        oai_error_set(err, 400, NULL, "Invalid JSON body: %s (line %d, column %d)", je.text, je.line, je.column);
        return VLLM_ERR_INVALID_ARG;
    }
    if (!json_is_object(j)) {
        oai_error_set(err, 400, NULL, "Invalid request body: expected a JSON object, got %s", oai_json_kind(j));
        json_decref(j);
        return VLLM_ERR_INVALID_ARG;
    }
    *root = j;
    return VLLM_OK;
}
