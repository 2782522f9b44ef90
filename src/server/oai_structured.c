/* oai_structured.c: the structured-output fields of chat and completion requests (response_format, structured_outputs, guided_*) into a validated constraint. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "server/oai_internal.h"
#include "structured/so_spec.h"

#define BAD(param, ...) (oai_error_set(err, 400, (param), __VA_ARGS__), VLLM_ERR_INVALID_ARG)
#define NOMEM() (oai_error_set(err, 500, NULL, "out of memory"), VLLM_ERR_NO_MEMORY)

/* a schema given as an object or as JSON text -> owned text */
static vllm_status schema_text(const json_t *v, const char *param, char **out, oai_error *err) {
    if (json_is_string(v)) {
        if (!(*out = strdup(json_string_value(v)))) return NOMEM();
        return VLLM_OK;
    }
    if (json_is_object(v) || json_is_boolean(v)) {
        if (!(*out = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER))) return NOMEM();
        return VLLM_OK;
    }
    return oai_type_error(err, param, "a JSON schema (an object or its JSON text)", v);
}

static vllm_status str_field(const json_t *v, const char *param, char **out, oai_error *err) {
    if (!json_is_string(v)) return oai_type_error(err, param, "a string", v);
    if (memchr(json_string_value(v), 0, json_string_length(v)))
        return BAD(param, "%s must not contain a NUL character ('\\x00')", param);
    if (!(*out = strdup(json_string_value(v)))) return NOMEM();
    return VLLM_OK;
}

static vllm_status choice_field(const json_t *v, const char *param, oai_request *r, oai_error *err) {
    if (!json_is_array(v)) return oai_type_error(err, param, "a list of strings", v);
    size_t n = json_array_size(v);
    if (n == 0) return BAD(param, "Choice '[]' cannot be an empty list");
    if (!(r->so_choice = calloc(n, sizeof *r->so_choice))) return NOMEM();
    r->num_so_choice = n;
    for (size_t i = 0; i < n; i++) {
        json_t *c = json_array_get(v, i);
        if (!json_is_string(c)) return oai_type_error(err, param, "a list of strings", c);
        if (!(r->so_choice[i] = strdup(json_string_value(c)))) return NOMEM();
    }
    return VLLM_OK;
}

/* vLLM's kinds in StructuredOutputsParams order; the one-constraint rule of __post_init__ */
static int kinds_set(const oai_request *r) {
    return (r->so_json != NULL) + (r->so_regex != NULL) + (r->so_choice != NULL) + (r->so_grammar != NULL) +
           (r->so_json_object ? 1 : 0);
}

/* structured_outputs {json, regex, choice, grammar, json_object, disable_any_whitespace, whitespace_pattern, ...}
 * (vllm/sampling_params.py StructuredOutputsParams) */
static vllm_status parse_so_object(const json_t *so, oai_request *r, oai_error *err) {
    if (!json_is_object(so)) return oai_type_error(err, "structured_outputs", "an object", so);
    const char *key;
    json_t *v;
    vllm_status st;
    json_object_foreach((json_t *)so, key, v) {
        if (json_is_null(v)) continue;
        if (!strcmp(key, "json")) st = schema_text(v, "structured_outputs", &r->so_json, err);
        else if (!strcmp(key, "regex")) st = str_field(v, "structured_outputs", &r->so_regex, err);
        else if (!strcmp(key, "choice")) st = choice_field(v, "structured_outputs", r, err);
        else if (!strcmp(key, "grammar")) st = str_field(v, "structured_outputs", &r->so_grammar, err);
        else if (!strcmp(key, "json_object")) {
            if (!json_is_boolean(v)) return oai_type_error(err, "structured_outputs", "a boolean", v);
            r->so_json_object = json_is_true(v);
            st = VLLM_OK;
        } else if (!strcmp(key, "disable_any_whitespace")) {
            if (!json_is_boolean(v)) return oai_type_error(err, "structured_outputs", "a boolean", v);
            r->so_disable_any_whitespace = json_is_true(v);
            st = VLLM_OK;
        } else if (!strcmp(key, "structural_tag")) {
            return BAD("structured_outputs", "structured_outputs.structural_tag is not supported by this server");
        } else {
            st = VLLM_OK; /* whitespace_pattern (outlines only), disable_fallback, disable_additional_properties
                             (guidance only), backend hints: no effect with xgrammar's semantics */
        }
        if (st != VLLM_OK) return st;
    }
    return VLLM_OK;
}

/* guided_json / guided_regex / guided_choice / guided_grammar (vLLM up to 0.11: vllm/entrypoints/openai/protocol.py
 * to_sampling_params mapped them to the same constraint) */
static vllm_status parse_guided(const json_t *body, oai_request *r, oai_error *err) {
    json_t *v;
    vllm_status st;
    if ((v = oai_field(body, "guided_json")) && (st = schema_text(v, "guided_json", &r->so_json, err))) return st;
    if ((v = oai_field(body, "guided_regex")) && (st = str_field(v, "guided_regex", &r->so_regex, err))) return st;
    if ((v = oai_field(body, "guided_choice")) && (st = choice_field(v, "guided_choice", r, err))) return st;
    if ((v = oai_field(body, "guided_grammar")) && (st = str_field(v, "guided_grammar", &r->so_grammar, err)))
        return st;
    return VLLM_OK;
}

/* response_format (vllm/entrypoints/openai protocol: structured_outputs_from_response_format); it overrides
 * structured_outputs by replacing its fields, after which the one-constraint rule runs again */
static vllm_status parse_response_format(const json_t *body, oai_request *r, bool *set, oai_error *err) {
    *set = false;
    json_t *rf = oai_field(body, "response_format");
    if (!rf) return VLLM_OK;
    if (!json_is_object(rf)) return oai_type_error(err, "response_format", "an object", rf);
    json_t *type = json_object_get(rf, "type");
    if (!json_is_string(type)) return BAD("response_format", "response_format: \"type\" must be a string");
    const char *t = json_string_value(type);
    if (!strcmp(t, "text")) return VLLM_OK;
    if (!strcmp(t, "json_object")) {
        free(r->so_json);
        r->so_json = NULL;
        r->so_json_object = true;
        *set = true;
        return VLLM_OK;
    }
    if (!strcmp(t, "json_schema")) {
        json_t *js = json_object_get(rf, "json_schema");
        if (!js || json_is_null(js))
            return BAD("response_format", "When response_format type is 'json_schema', the 'json_schema' field must be "
                                          "provided.");
        if (!json_is_object(js)) return oai_type_error(err, "response_format", "an object (json_schema)", js);
        json_t *schema = json_object_get(js, "schema");
        if (!schema) schema = json_object_get(js, "json_schema");
        free(r->so_json);
        r->so_json = NULL;
        r->so_json_object = false;
        *set = true;
        if (!schema || json_is_null(schema))
            return BAD("response_format", "You must use one kind of structured outputs constraint but none are "
                                          "specified: response_format.json_schema has no schema");
        return schema_text(schema, "response_format", &r->so_json, err);
    }
    if (!strcmp(t, "structural_tag"))
        return BAD("response_format", "response_format of type 'structural_tag' is not supported by this server");
    return BAD("response_format", "response_format: unknown type '%s' (expected 'text', 'json_object', 'json_schema' or "
                                  "'structural_tag')",
               t);
}

/* with --reasoning-parser, structured outputs constrain only what follows the reasoning (vLLM's
 * StructuredOutputManager should_fill_bitmask / should_advance with the parser's is_reasoning_end): the think
 * parsers' single-token markers; the other parsers' markers are not single tokens, their outputs are
 * constrained from the first token */
static bool one_token(const oai_server_ctx *ctx, const char *text) {
    int32_t *ids = NULL;
    size_t n = 0;
    bool one = ctx->tokenize && ctx->tokenize(ctx->tok_ctx, text, false, &ids, &n) == VLLM_OK && n == 1;
    free(ids);
    return one;
}

static void think_markers(const oai_server_ctx *ctx, oai_request *r) {
    const char *p = ctx->reasoning_parser;
    r->so_think_start = r->so_think_end = NULL;
    if (!p || (strcmp(p, "qwen3") && strcmp(p, "deepseek_r1"))) return;
    /* a model without the markers as tokens never reasons in them: constrained from the first token */
    if (!one_token(ctx, "<think>") || !one_token(ctx, "</think>")) return;
    r->so_think_start = "<think>";
    r->so_think_end = "</think>";
}

vllm_status oai_parse_structured(const oai_server_ctx *ctx, const json_t *body, oai_request *r, oai_error *err) {
    think_markers(ctx, r);
    vllm_status st;
    json_t *so = oai_field(body, "structured_outputs");
    if (so && (st = parse_so_object(so, r, err))) return st;
    if ((st = parse_guided(body, r, err))) return st;
    bool rf = false;
    if ((st = parse_response_format(body, r, &rf, err))) return st;
    if (kinds_set(r) > 1)
        return BAD(rf ? "response_format" : so ? "structured_outputs" : NULL,
                   "You can only use one kind of structured outputs constraint but multiple are specified");
    r->so_param = rf ? "response_format" : so ? "structured_outputs" : "guided_json";
    return VLLM_OK;
}

vllm_status oai_check_structured(const oai_request *r, oai_error *err) {
    if (!kinds_set(r)) return VLLM_OK;
    /* compiled here, on the request's thread: an invalid schema, regex or grammar is a 400 naming the problem,
     * and the engine's compile of the same constraint cannot fail but for memory */
    vllm_sampling_params sp;
    memset(&sp, 0, sizeof sp);
    oai_structured_params(r, &sp);
    so_compiled *c = NULL;
    vllm_status st = so_spec_compile(&sp.structured_outputs, &c);
    so_compiled_free(c);
    if (st == VLLM_ERR_NO_MEMORY) return NOMEM();
    if (st != VLLM_OK) return BAD(r->so_param, "%s", vllm_last_error());
    return VLLM_OK;
}

/* vLLM's get_json_schema_from_tools (vllm/tool_parsers/utils.py) for "required": an array of at least one
 * {"name": <one of the tools>, "parameters": <its parameters>}, the tools' $defs merged at the top */
static vllm_status required_schema(const json_t *tools, char **out, oai_error *err) {
    json_t *any = json_array(), *defs = json_object(), *root = json_object(), *items = json_object();
    vllm_status st = VLLM_OK;
    if (!any || !defs || !root || !items) st = NOMEM();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        if (st != VLLM_OK) break;
        json_t *fn = json_object_get(t, "function");
        json_t *params = json_object_get(fn, "parameters");
        json_t *p = params && json_is_object(params) ? json_deep_copy(params) : NULL;
        if (!p) p = json_pack("{s:s,s:{}}", "type", "object", "properties");
        json_t *pd = json_object_get(p, "$defs");
        if (json_is_object(pd)) {
            const char *k;
            json_t *dv;
            json_object_foreach(pd, k, dv) {
                json_t *have = json_object_get(defs, k);
                if (have && !json_equal(have, dv)) {
                    json_decref(p);
                    st = BAD("tools", "Tool definition '%s' has multiple schemas, which is not supported.", k);
                    break;
                }
                json_object_set(defs, k, dv);
            }
            if (st != VLLM_OK) break;
            json_object_del(p, "$defs");
        }
        json_t *branch = json_pack("{s:{s:{s:s,s:[O]},s:o},s:[s,s]}", "properties", "name", "type", "string", "enum",
                                   json_object_get(fn, "name"), "parameters", p, "required", "name", "parameters");
        if (!branch) st = NOMEM();
        else json_array_append_new(any, branch);
    }
    if (st == VLLM_OK) {
        json_object_set_new(items, "type", json_string("object"));
        json_object_set(items, "anyOf", any);
        json_object_set_new(root, "type", json_string("array"));
        json_object_set_new(root, "minItems", json_integer(1));
        json_object_set(root, "items", items);
        if (json_object_size(defs)) json_object_set(root, "$defs", defs);
        if (!(*out = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER))) st = NOMEM();
    }
    json_decref(any), json_decref(defs), json_decref(root), json_decref(items);
    return st;
}

vllm_status oai_parse_tool_choice(const oai_server_ctx *ctx, const json_t *body, oai_request *r, oai_error *err) {
    json_t *tools = oai_field(body, "tools"), *tc = oai_field(body, "tool_choice");
    if (!tools || !json_is_array(tools)) return VLLM_OK; /* (oai_chat_render checked both) */
    if (!(r->tools_json = json_dumps(tools, JSON_COMPACT | JSON_PRESERVE_ORDER))) return NOMEM();
    if (!tc) r->tool_mode = OAI_TOOLS_AUTO; /* vLLM: absent with tools = "auto" */
    else if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        r->tool_mode = !strcmp(s, "none") ? OAI_TOOLS_NONE : !strcmp(s, "required") ? OAI_TOOLS_REQUIRED : OAI_TOOLS_AUTO;
    } else {
        r->tool_mode = OAI_TOOLS_NAMED;
    }
    /* vllm/entrypoints/openai/serving_chat.py create_chat_completion */
    /* Responses and Messages render the tools all the same and leave the reply unparsed (vLLM's Responses path
       does; its Messages path defaults to "auto" and would refuse every request with tools) */
    if (r->tool_mode == OAI_TOOLS_AUTO && !(ctx->enable_auto_tool_choice && ctx->tool_call_parser) &&
        r->api != OAI_API_OPENAI) {
        r->tool_mode = OAI_TOOLS_NONE;
        return VLLM_OK;
    }
    if (r->tool_mode == OAI_TOOLS_AUTO && !(ctx->enable_auto_tool_choice && ctx->tool_call_parser))
        return BAD("tool_choice", "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be "
                                  "set");
    if (r->tool_mode != OAI_TOOLS_REQUIRED && r->tool_mode != OAI_TOOLS_NAMED) return VLLM_OK;
    if (kinds_set(r))
        return BAD("tool_choice", "You can only either use constraints for structured outputs or tools, not both.");
    r->so_param = "tool_choice";
    if (r->tool_mode == OAI_TOOLS_REQUIRED) return required_schema(tools, &r->so_json, err);
    const char *name = json_string_value(json_object_get(json_object_get(tc, "function"), "name"));
    if (!name || !(r->tool_name = strdup(name))) return name ? NOMEM() : BAD("tool_choice", "a named tool_choice without a name");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        if (strcmp(json_string_value(json_object_get(fn, "name")) ? json_string_value(json_object_get(fn, "name")) : "",
                   name))
            continue;
        json_t *p = json_object_get(fn, "parameters");
        if (!json_is_object(p)) return VLLM_OK; /* vLLM: no parameters, no constraint */
        return schema_text(p, "tool_choice", &r->so_json, err);
    }
    return VLLM_OK;
}

void oai_structured_params(const oai_request *r, vllm_sampling_params *sp) {
    vllm_structured_outputs *s = &sp->structured_outputs;
    memset(s, 0, sizeof *s);
    s->json = r->so_json;
    s->json_object = r->so_json_object;
    s->regex = r->so_regex;
    s->grammar = r->so_grammar;
    s->choice = (const char *const *)r->so_choice;
    s->num_choice = r->num_so_choice;
    s->disable_any_whitespace = r->so_disable_any_whitespace;
    if (r->kind == OAI_KIND_CHAT && !r->include_reasoning) return; /* vLLM: no reasoning wanted, constrained at once */
    s->reasoning_start = r->so_think_start;
    s->reasoning_end = r->so_think_end;
}
