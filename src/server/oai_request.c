/*
 * oai_request.c: POST /v1/completions and /v1/chat/completions bodies ->
 * oai_request (token-id prompts + vllm_sampling_params), with OpenAI / vLLM
 * validation and errors; the served-model check.
 *
 * Semantics follow vLLM:
 *  - fields and defaults: CompletionRequest (completion/protocol.py: max_tokens 16, also
 *    when null; echo; suffix unsupported; prompt list <= VLLM_MAX_COMPLETION_PROMPTS) and
 *    ChatCompletionRequest (chat_completion/protocol.py: max_completion_tokens over
 *    max_tokens, null = the rest of max_model_len; logprobs bool + top_logprobs);
 *  - to_sampling_params: request value, else the server default (generation_config),
 *    else OpenAI's; prompt_logprobs from logprobs when echo; logit_bias clamped to
 *    [-100, 100] (SamplingParams.from_optional);
 *  - model validators: check_logprobs, validate_stream_options, check_tool_usage,
 *    validate_prompt_and_prompt_embeds; StreamOptions.include_usage defaults to true;
 *  - lengths: renderers/params.py _token_len_check (prompt > max_model_len - max_tokens
 *    -> 400, param input_tokens) and entrypoints/utils.py get_max_tokens;
 *  - serving_engine _check_model: 404 "The model `x` does not exist.".
 */
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/oai_internal.h"
#include "server/reasoning_parser.h"
#include "server/tool_parser.h"

#define BAD(param, ...) (oai_error_set(err, 400, (param), __VA_ARGS__), VLLM_ERR_INVALID_ARG)
#define NOMEM() (oai_error_set(err, 500, NULL, "out of memory"), VLLM_ERR_NO_MEMORY)

/* ------------------------------------------------------------------ */
/* Model check, free                                                   */
/* ------------------------------------------------------------------ */

bool oai_check_model(const oai_server_ctx *ctx, const char *model, oai_error *err) {
    if (!model || !model[0]) return true; /* vLLM's _is_model_supported: no name = the served model */
    for (size_t i = 0; i < ctx->num_served_model_names; i++)
        if (ctx->served_model_names[i] && !strcmp(ctx->served_model_names[i], model)) return true;
    oai_error_set(err, 404, "model", "The model `%s` does not exist.", model);
    return false;
}

static void free_strv(char **v, size_t n) {
    if (!v) return;
    for (size_t i = 0; i < n; i++) free(v[i]);
    free(v);
}

void oai_request_free(oai_request *r) {
    if (!r) return;
    free(r->model);
    for (size_t i = 0; i < r->num_prompts; i++) {
        free((void *)r->prompts[i].prompt.token_ids);
        free(r->prompts[i].text);
    }
    free(r->prompts);
    free_strv(r->stop, r->num_stop);
    free_strv(r->bad_words, r->num_bad_words);
    free(r->stop_token_ids);
    free(r->allowed_token_ids);
    free(r->logit_bias_ids);
    free(r->logit_bias_values);
    free(r->echo_text);
    free(r->chat_role);
    free(r->request_id);
    free(r->so_json);
    free(r->so_regex);
    free(r->so_grammar);
    free_strv(r->so_choice, r->num_so_choice);
    free(r->tool_name);
    free(r->tools_json);
    free(r->chat_template_kwargs);
    json_decref(r->api_body);
    json_decref(r->api_messages);
    free(r);
}

/* ------------------------------------------------------------------ */
/* Lists                                                               */
/* ------------------------------------------------------------------ */

/* key: a list of strings (or one string when allow_one); *out owned. */
static vllm_status get_str_list(const json_t *body, const char *key, bool allow_one, char ***out, size_t *n,
                                oai_error *err) {
    json_t *v = oai_field(body, key);
    if (!v) return VLLM_OK;
    if (json_is_string(v) && allow_one) {
        *out = calloc(1, sizeof **out);
        if (!*out || !((*out)[0] = strdup(json_string_value(v)))) return NOMEM();
        *n = 1;
        return VLLM_OK;
    }
    if (!json_is_array(v)) return oai_type_error(err, key, allow_one ? "a string or a list of strings" : "a list of strings", v);
    size_t count = json_array_size(v);
    *out = calloc(count ? count : 1, sizeof **out);
    if (!*out) return NOMEM();
    for (size_t i = 0; i < count; i++) {
        json_t *s = json_array_get(v, i);
        if (!json_is_string(s)) {
            char param[48];
            snprintf(param, sizeof param, "%s[%zu]", key, i);
            return oai_type_error(err, param, "a valid string", s);
        }
        if (!((*out)[i] = strdup(json_string_value(s)))) return NOMEM();
        *n = i + 1;
    }
    return VLLM_OK;
}

/* One token id in [0, vocab) (vocab <= 0: no upper bound). */
static vllm_status token_id(const json_t *v, const char *param, int vocab, int32_t *out, oai_error *err) {
    long long x;
    vllm_status st = oai_get_ll(v, param, &x, err);
    if (st != VLLM_OK) return st;
    if (x < 0) return BAD(param, "%s: Input should be greater than or equal to 0", param);
    if (x > INT32_MAX || (vocab > 0 && x >= vocab))
        return BAD(param, "%s: token id %lld is out of vocabulary (size %d)", param, x, vocab);
    *out = (int32_t)x;
    return VLLM_OK;
}

/* key: a list of token ids; *out is non-NULL (maybe with 0 entries) when the key is present. */
static vllm_status get_id_list(const json_t *body, const char *key, int vocab, int32_t **out, size_t *n,
                               oai_error *err) {
    json_t *v = oai_field(body, key);
    if (!v) return VLLM_OK;
    if (!json_is_array(v)) return oai_type_error(err, key, "a list of integers", v);
    size_t count = json_array_size(v);
    *out = malloc((count ? count : 1) * sizeof **out);
    if (!*out) return NOMEM();
    for (size_t i = 0; i < count; i++) {
        char param[48];
        snprintf(param, sizeof param, "%s[%zu]", key, i);
        vllm_status st = token_id(json_array_get(v, i), param, vocab, &(*out)[i], err);
        if (st != VLLM_OK) return st;
    }
    *n = count;
    return VLLM_OK;
}

/* Python's int() of a logit_bias key: optional spaces and sign, then digits. */
static bool parse_key(const char *s, long long *out) {
    while (isspace((unsigned char)*s)) s++;
    const char *start = s;
    if (*s == '+' || *s == '-') s++;
    if (!isdigit((unsigned char)*s)) return false;
    errno = 0;
    char *end;
    long long x = strtoll(start, &end, 10);
    if (errno) return false;
    while (isspace((unsigned char)*end)) end++;
    if (*end) return false;
    *out = x;
    return true;
}

static vllm_status get_logit_bias(const json_t *body, int vocab, oai_request *r, oai_error *err) {
    json_t *v = oai_field(body, "logit_bias");
    if (!v) return VLLM_OK;
    if (!json_is_object(v)) return oai_type_error(err, "logit_bias", "an object of token id -> bias", v);
    size_t count = json_object_size(v);
    r->logit_bias_ids = malloc((count ? count : 1) * sizeof *r->logit_bias_ids);
    r->logit_bias_values = malloc((count ? count : 1) * sizeof *r->logit_bias_values);
    if (!r->logit_bias_ids || !r->logit_bias_values) return NOMEM();
    const char *key;
    json_t *val;
    size_t i = 0;
    json_object_foreach(v, key, val) {
        long long id;
        if (!parse_key(key, &id))
            return BAD("logit_bias", "logit_bias: keys must be token ids (integers as strings), got '%s'", key);
        if (!json_is_number(val)) return oai_type_error(err, "logit_bias", "an object of token id -> number", val);
        if (id < 0 || id > INT32_MAX || (vocab > 0 && id >= vocab))
            return BAD("logit_bias", "token_id(s) [%lld] in logit_bias contain out-of-vocab token ids. Vocabulary "
                                     "size: %d",
                       id, vocab);
        double b = json_number_value(val);
        if (b > 100.0) b = 100.0; /* SamplingParams.from_optional clamps to [-100, 100] */
        if (b < -100.0) b = -100.0;
        r->logit_bias_ids[i] = (int32_t)id;
        r->logit_bias_values[i] = (float)b;
        r->num_logit_bias = ++i;
    }
    return VLLM_OK;
}

/* ------------------------------------------------------------------ */
/* Fields shared by both endpoints                                     */
/* ------------------------------------------------------------------ */

typedef struct parsed {
    long long max_tokens;       /* chat: -1 = not given (the rest of max_model_len) */
    const char *max_tokens_param;
    bool add_special_tokens;
    bool have_truncate;
    long long truncate_prompt_tokens; /* -1 = to the longest input that fits */
    bool truncate_right;        /* truncation_side "right": keep the first tokens */
    /* the numbers as the JSON gave them (or the server defaults): checked by
       check_sampling, then narrowed into vllm_sampling_params by apply_sampling */
    double temperature, top_p, min_p, presence_penalty, frequency_penalty, repetition_penalty;
    long long top_k, n, min_tokens;
    long long logprobs;         /* -1 = none */
    const char *logprobs_param; /* "logprobs" (completions) or "top_logprobs" (chat) */
    long long prompt_logprobs;  /* -1 = none */
} parsed;

/* Fields vLLM defines for features this server does not have: a non-null value is a 400. */
static const char *const unsupported_fields[] = {
    "logits_processors",  "prompt_embeds",     "logprob_token_ids", "cache_salt",   "kv_transfer_params",
    "thinking_token_budget", "repetition_detection",
};

static vllm_status parse_common(const oai_server_ctx *ctx, const json_t *body, oai_request *r, vllm_sampling_params *sp,
                                parsed *pp, oai_error *err) {
    vllm_status st;
    const char *model = NULL, *user = NULL, *request_id = NULL;
    if ((st = oai_get_string(body, "model", &model, err))) return st;
    if (model && !(r->model = strdup(model))) return NOMEM();
    if ((st = oai_get_string(body, "user", &user, err))) return st; /* ignored, as vLLM */
    if ((st = oai_get_string(body, "request_id", &request_id, err))) return st;
    if (request_id) {
        /* echoed in every chunk of the reply: bounded (a 400, never cut) so that a huge id
           cannot multiply the size of a stream; the engine's ids add a server-unique
           part (oai_response_engine_id), so equal ids of concurrent requests are fine */
        if (strlen(request_id) > 256) return BAD("request_id", "request_id must be at most 256 bytes long");
        if (!(r->request_id = strdup(request_id))) return NOMEM();
    }

    /* sampling: the request's value, else the server default (generation_config), else
       OpenAI's; kept as the JSON numbers until check_sampling has seen them */
    *sp = vllm_sampling_default_params();
    const vllm_sampling_params *d = &ctx->default_sampling;
    pp->temperature = d->temperature, pp->top_p = d->top_p, pp->top_k = d->top_k, pp->min_p = d->min_p;
    pp->repetition_penalty = d->repetition_penalty;
    pp->presence_penalty = d->presence_penalty, pp->frequency_penalty = d->frequency_penalty;
    pp->n = 1, pp->min_tokens = 0, pp->logprobs = -1, pp->prompt_logprobs = -1;
    if ((st = oai_get_double(body, "temperature", &pp->temperature, NULL, err))) return st;
    if ((st = oai_get_double(body, "top_p", &pp->top_p, NULL, err))) return st;
    if ((st = oai_get_int64(body, "top_k", &pp->top_k, NULL, err))) return st;
    if ((st = oai_get_double(body, "min_p", &pp->min_p, NULL, err))) return st;
    if ((st = oai_get_double(body, "presence_penalty", &pp->presence_penalty, NULL, err))) return st;
    if ((st = oai_get_double(body, "frequency_penalty", &pp->frequency_penalty, NULL, err))) return st;
    if ((st = oai_get_double(body, "repetition_penalty", &pp->repetition_penalty, NULL, err))) return st;
    long long seed = 0;
    bool have_seed = false;
    if ((st = oai_get_int64(body, "seed", &seed, &have_seed, err))) return st;
    if (have_seed) sp->has_seed = true, sp->seed = (uint64_t)seed; /* vLLM allows any int64 */
    if ((st = oai_get_int64(body, "n", &pp->n, NULL, err))) return st;
    if ((st = oai_get_bool(body, "ignore_eos", &sp->ignore_eos, err))) return st;
    if ((st = oai_get_int64(body, "min_tokens", &pp->min_tokens, NULL, err))) return st;
    if ((st = oai_get_bool(body, "skip_special_tokens", &sp->skip_special_tokens, err))) return st;
    bool spaces = true;
    r->include_reasoning = true, r->parallel_tool_calls = true;
    if ((st = oai_get_bool(body, "spaces_between_special_tokens", &spaces, err))) return st; /* accepted */
    if ((st = oai_get_bool(body, "include_reasoning", &r->include_reasoning, err))) return st;
    if ((st = oai_get_bool(body, "parallel_tool_calls", &r->parallel_tool_calls, err))) return st;
    if ((st = oai_get_bool(body, "include_stop_str_in_output", &sp->include_stop_str_in_output, err))) return st;
    if ((st = get_str_list(body, "stop", true, &r->stop, &r->num_stop, err))) return st;
    if ((st = get_str_list(body, "bad_words", false, &r->bad_words, &r->num_bad_words, err))) return st;
    if ((st = get_id_list(body, "stop_token_ids", ctx->vocab_size, &r->stop_token_ids, &r->num_stop_token_ids, err)))
        return st;
    if ((st = get_id_list(body, "allowed_token_ids", ctx->vocab_size, &r->allowed_token_ids,
                          &r->num_allowed_token_ids, err)))
        return st;
    if (r->allowed_token_ids && r->num_allowed_token_ids == 0)
        return BAD("allowed_token_ids", "allowed_token_ids is not None and empty!");
    if ((st = get_logit_bias(body, ctx->vocab_size, r, err))) return st;
    sp->stop = (const char *const *)r->stop, sp->num_stop = r->num_stop;
    sp->bad_words = (const char *const *)r->bad_words, sp->num_bad_words = r->num_bad_words;
    sp->stop_token_ids = r->stop_token_ids, sp->num_stop_token_ids = r->num_stop_token_ids;
    sp->allowed_token_ids = r->allowed_token_ids, sp->num_allowed_token_ids = r->num_allowed_token_ids;
    sp->logit_bias_ids = r->logit_bias_ids, sp->logit_bias_values = r->logit_bias_values;
    sp->num_logit_bias = r->num_logit_bias;

    /* prompt_logprobs (check_logprobs) */
    bool have_plp = false;
    long long plp = -1;
    json_t *plpv = oai_field(body, "prompt_logprobs");
    if (plpv && !json_is_number(plpv)) return BAD("prompt_logprobs", "`prompt_logprobs` must be an integer.");
    if ((st = oai_get_int64(body, "prompt_logprobs", &plp, &have_plp, err))) return st;
    if ((st = oai_get_bool(body, "stream", &r->stream, err))) return st;
    if (have_plp) {
        if (r->stream && (plp > 0 || plp == -1))
            return BAD("prompt_logprobs", "`prompt_logprobs` are not available when `stream=True`.");
        if (plp < -1) return BAD("prompt_logprobs", "`prompt_logprobs` must be a positive value or -1.");
        if (plp == -1)
            return BAD("prompt_logprobs", "prompt_logprobs=-1 (the whole vocabulary) is not supported; the most is %d",
                       OAI_MAX_LOGPROBS);
        pp->prompt_logprobs = plp;
    }

    /* stream_options (validate_stream_options; StreamOptions.include_usage defaults to true) */
    json_t *so = oai_field(body, "stream_options");
    if (so) {
        if (!json_is_object(so)) return oai_type_error(err, "stream_options", "an object", so);
        if (json_object_size(so) && !r->stream)
            return BAD("stream_options", "Stream options can only be defined when `stream=True`.");
        bool inc = true, cont = false;
        json_t *iv = oai_field(so, "include_usage"), *cv = oai_field(so, "continuous_usage_stats");
        if (iv && !json_is_boolean(iv)) return oai_type_error(err, "stream_options.include_usage", "a valid boolean", iv);
        if (cv && !json_is_boolean(cv))
            return oai_type_error(err, "stream_options.continuous_usage_stats", "a valid boolean", cv);
        if (iv) inc = json_is_true(iv);
        if (cv) cont = json_is_true(cv);
        r->include_usage = r->stream && inc;
        r->continuous_usage_stats = r->include_usage && cont; /* should_include_usage */
    }

    if ((st = oai_get_bool(body, "echo", &r->echo, err))) return st;
    if ((st = oai_get_bool(body, "return_tokens_as_token_ids", &r->return_tokens_as_token_ids, err))) return st;
    bool ret_ids = false, beam = false;
    if ((st = oai_get_bool(body, "return_token_ids", &ret_ids, err))) return st;
    if (ret_ids) return BAD("return_token_ids", "return_token_ids is not supported by this server");
    if ((st = oai_get_bool(body, "use_beam_search", &beam, err))) return st;
    if (beam) return BAD("use_beam_search", "beam search (use_beam_search) is not supported by this server");
    double length_penalty = 1.0;
    if ((st = oai_get_double(body, "length_penalty", &length_penalty, NULL, err))) return st; /* beam search only */
    long long priority = 0;
    if ((st = oai_get_int64(body, "priority", &priority, NULL, err))) return st;
    if (priority != 0)
        return BAD("priority", "Got priority %lld but Priority scheduling is not enabled.", priority);
    for (size_t i = 0; i < sizeof unsupported_fields / sizeof unsupported_fields[0]; i++)
        if (oai_field(body, unsupported_fields[i]))
            return BAD(unsupported_fields[i], "%s is not supported by this server", unsupported_fields[i]);

    /* tokenization options */
    if ((st = oai_get_bool(body, "add_special_tokens", &pp->add_special_tokens, err))) return st;
    if ((st = oai_get_int64(body, "truncate_prompt_tokens", &pp->truncate_prompt_tokens, &pp->have_truncate, err)))
        return st;
    if (pp->have_truncate && pp->truncate_prompt_tokens < -1)
        return BAD("truncate_prompt_tokens", "truncate_prompt_tokens: Input should be greater than or equal to -1");
    const char *side = NULL;
    if ((st = oai_get_string(body, "truncation_side", &side, err))) return st;
    if (side && strcmp(side, "left") && strcmp(side, "right"))
        return BAD("truncation_side", "truncation_side: Input should be 'left' or 'right'");
    pp->truncate_right = side && !strcmp(side, "right");
    return VLLM_OK;
}

/* vllm_sampling_params_validate with the error in OpenAI form; the message
 * names the field, which becomes param (as the client spelled it). The
 * numbers were checked before (check_sampling): this catches the rest
 * (empty stop strings, ...) and guards the narrowing. */
static vllm_status validate_params(const vllm_sampling_params *sp, oai_kind kind, const parsed *pp, oai_error *err) {
    vllm_status st = vllm_sampling_params_validate(sp);
    if (st == VLLM_OK) return VLLM_OK;
    oai_error_from_status(err, st, vllm_last_error());
    if (kind == OAI_KIND_CHAT && !strcmp(err->param, "logprobs")) snprintf(err->param, sizeof err->param, "top_logprobs");
    if (!strcmp(err->param, "max_tokens") && pp->max_tokens_param)
        snprintf(err->param, sizeof err->param, "%s", pp->max_tokens_param);
    return st;
}

/* ------------------------------------------------------------------ */
/* Numbers: checked as JSON gave them, then narrowed                   */
/* ------------------------------------------------------------------ */

/* vLLM's SamplingParams._verify_args (vllm/sampling_params.py) in its order
 * and words, on the double / int64 the body carried (floats printed as
 * Python does), then the engine's logprobs cap (vLLM's v1 input processor:
 * "Requested sample logprobs of ..."). !have_max_tokens: not known yet (chat
 * without max_tokens: the rest of the context), so its checks wait for
 * finish_prompt. */
static vllm_status check_sampling(const parsed *pp, bool have_max_tokens, long long max_tokens, oai_error *err) {
    char v[32];
#define FBAD(param, x, ...) (oai_py_float((x), v), BAD((param), __VA_ARGS__))
    if (pp->n < 1) return BAD("n", "n must be at least 1, got %lld.", pp->n);
    if (pp->n > OAI_MAX_N) return BAD("n", "n must be at most %d, got %lld.", OAI_MAX_N, pp->n);
    if (!(pp->presence_penalty >= -2.0 && pp->presence_penalty <= 2.0))
        return FBAD("presence_penalty", pp->presence_penalty, "presence_penalty must be in [-2, 2], got %s.", v);
    if (!(pp->frequency_penalty >= -2.0 && pp->frequency_penalty <= 2.0))
        return FBAD("frequency_penalty", pp->frequency_penalty, "frequency_penalty must be in [-2, 2], got %s.", v);
    if (!isfinite(pp->repetition_penalty))
        return FBAD("repetition_penalty", pp->repetition_penalty, "repetition_penalty must be a finite number, got %s.",
                    v);
    if (pp->repetition_penalty <= 0.0)
        return FBAD("repetition_penalty", pp->repetition_penalty,
                    "repetition_penalty must be greater than zero, got %s.", v);
    if (!isfinite(pp->temperature))
        return FBAD("temperature", pp->temperature, "temperature must be a finite number, got %s.", v);
    if (pp->temperature < 0.0)
        return FBAD("temperature", pp->temperature, "temperature must be non-negative, got %s.", v);
    if (pp->temperature > 2.0) /* vLLM #44965: OpenAI's range */
        return FBAD("temperature", pp->temperature, "temperature must be in [0, 2], got %s.", v);
    if (!(pp->top_p > 0.0 && pp->top_p <= 1.0)) return FBAD("top_p", pp->top_p, "top_p must be in (0, 1], got %s.", v);
    if (pp->top_k < -1) return BAD("top_k", "top_k must be 0 (disable), or at least 1, got %lld.", pp->top_k);
    if (!(pp->min_p >= 0.0 && pp->min_p <= 1.0)) return FBAD("min_p", pp->min_p, "min_p must be in [0, 1], got %s.", v);
    const char *mt_param = pp->max_tokens_param ? pp->max_tokens_param : "max_tokens";
    if (have_max_tokens && max_tokens < 1)
        return BAD(mt_param, "max_tokens must be at least 1, got %lld.", max_tokens);
    if (pp->min_tokens < 0)
        return BAD("min_tokens", "min_tokens must be greater than or equal to 0, got %lld.", pp->min_tokens);
    if (have_max_tokens && pp->min_tokens > max_tokens)
        return BAD("min_tokens", "min_tokens must be less than or equal to max_tokens=%lld, got %lld.", max_tokens,
                   pp->min_tokens);
    if (pp->logprobs > OAI_MAX_LOGPROBS)
        return BAD(pp->logprobs_param, "Requested sample logprobs of %lld, which is greater than max allowed: %d",
                   pp->logprobs, OAI_MAX_LOGPROBS);
    if (pp->prompt_logprobs > OAI_MAX_LOGPROBS)
        return BAD("prompt_logprobs", "Requested prompt logprobs of %lld, which is greater than max allowed: %d",
                   pp->prompt_logprobs, OAI_MAX_LOGPROBS);
    /* _verify_greedy_sampling: 0 < T < 0.01 counts as 0.01 (__post_init__), so only 0 is greedy */
    if (pp->temperature == 0.0 && pp->n > 1)
        return BAD("n", "n must be 1 when using greedy sampling, got %lld.", pp->n);
#undef FBAD
    return VLLM_OK;
}

/* A checked double as the engine's float: out-of-float-range magnitudes to
 * FLT_MAX, a nonzero value that would round to 0 to the smallest float (so
 * top_p 1e-308 stays in (0, 1] and a tiny temperature stays non-greedy). */
static float narrow(double x) {
    if (x > FLT_MAX) return FLT_MAX;
    if (x < -FLT_MAX) return -FLT_MAX;
    float f = (float)x;
    if (f == 0.0f && x != 0.0) return x > 0 ? FLT_TRUE_MIN : -FLT_TRUE_MIN;
    return f;
}

/* The checked numbers into sp and r (min_tokens clamped until finish_prompt
 * knows max_tokens; any top_k past the vocabulary means "off" alike). */
static void apply_sampling(const parsed *pp, oai_request *r, vllm_sampling_params *sp) {
    sp->temperature = narrow(pp->temperature);
    sp->top_p = narrow(pp->top_p);
    sp->min_p = narrow(pp->min_p);
    sp->presence_penalty = narrow(pp->presence_penalty);
    sp->frequency_penalty = narrow(pp->frequency_penalty);
    sp->repetition_penalty = narrow(pp->repetition_penalty);
    sp->top_k = pp->top_k > INT_MAX ? INT_MAX : (int)pp->top_k;
    sp->n = (int)pp->n;
    sp->min_tokens = pp->min_tokens > INT_MAX ? INT_MAX : (int)pp->min_tokens;
    sp->logprobs = (int)pp->logprobs;
    sp->prompt_logprobs = (int)pp->prompt_logprobs;
    r->n = sp->n;
    r->logprobs = sp->logprobs;
    r->prompt_logprobs = sp->prompt_logprobs;
}

/* ------------------------------------------------------------------ */
/* The memory one reply may take                                       */
/* ------------------------------------------------------------------ */

static long long sat_mul(long long a, long long b) {
    long long p;
    return __builtin_mul_overflow(a, b, &p) ? LLONG_MAX : p;
}

static long long sat_add(long long a, long long b) {
    long long s;
    return __builtin_add_overflow(a, b, &s) ? LLONG_MAX : s;
}

/* Every generated token (and with logprobs its top-k alternatives) is
 * accumulated for a non-streamed reply, or for a stream whose reader falls
 * behind (merged chunks): n x (max_tokens x (1 + logprobs) + prompt tokens x
 * (1 + prompt_logprobs)) per prompt must stay within the server's
 * max_response_entries. Before tokenization (prompt_tokens = 0, a lower
 * bound) and once every prompt is known. */
static vllm_status check_entries(const oai_server_ctx *ctx, const parsed *pp, size_t num_prompts, long long max_tokens,
                                 bool max_tokens_default, long long prompt_tokens, oai_error *err) {
    long long limit = ctx->max_response_entries ? ctx->max_response_entries : OAI_DEFAULT_MAX_RESPONSE_ENTRIES;
    if (limit < 0) return VLLM_OK;
    long long k = pp->logprobs > 0 ? pp->logprobs : 0;
    long long out = sat_mul(sat_mul((long long)num_prompts, max_tokens), 1 + k);
    long long in = pp->prompt_logprobs >= 0 ? sat_mul(prompt_tokens, 1 + pp->prompt_logprobs) : 0;
    long long total = sat_mul(pp->n, sat_add(out, in));
    if (total <= limit) return VLLM_OK;
    const char *mt_param = pp->max_tokens_param ? pp->max_tokens_param : "max_tokens";
    char prompts[48] = "", lp[64] = "", plp[96] = "";
    if (num_prompts > 1) snprintf(prompts, sizeof prompts, "%zu prompts x ", num_prompts);
    if (pp->logprobs >= 0) snprintf(lp, sizeof lp, " x (1 + %s=%lld)", pp->logprobs_param, k);
    if (in) snprintf(plp, sizeof plp, " + %lld prompt tokens x (1 + prompt_logprobs=%lld)", prompt_tokens,
                     pp->prompt_logprobs);
    return BAD(mt_param,
               "n=%lld x (%s%s=%lld%s%s%s) = %lld token entries is more than the %lld one request may ask for (the "
               "server's --max-response-entries); lower n, %s%s%s",
               pp->n, prompts, mt_param, max_tokens, max_tokens_default ? " (the rest of the context)" : "", lp, plp,
               total, limit, mt_param, pp->logprobs >= 0 ? " or " : "", pp->logprobs >= 0 ? pp->logprobs_param : "");
}

/* ------------------------------------------------------------------ */
/* Prompts                                                             */
/* ------------------------------------------------------------------ */

/* Tokenizes (text) or copies (ids), truncates, checks the length against
 * max_model_len and resolves max_tokens; fills p->prompt and p->params. */
static vllm_status finish_prompt(const oai_server_ctx *ctx, oai_request *r, oai_prompt *p, const char *text,
                                 const json_t *ids, const vllm_sampling_params *sp, const parsed *pp, oai_error *err) {
    int32_t *tok = NULL;
    size_t n = 0;
    vllm_status st;
    if (text) {
        if (!ctx->tokenize)
            return BAD("prompt", "this model has no tokenizer: send the prompt as token ids");
        st = ctx->tokenize(ctx->tok_ctx, text, pp->add_special_tokens, &tok, &n);
        if (st != VLLM_OK) {
            free(tok);
            oai_error_set(err, st == VLLM_ERR_NO_MEMORY ? 500 : 400, "prompt", "tokenization failed: %s",
                          vllm_last_error());
            return st;
        }
        if (!(p->text = strdup(text))) {
            free(tok);
            return NOMEM();
        }
    } else {
        n = json_array_size(ids);
        tok = malloc((n ? n : 1) * sizeof *tok);
        if (!tok) return NOMEM();
        for (size_t i = 0; i < n; i++) {
            char param[48];
            snprintf(param, sizeof param, "prompt[%zu]", i);
            if ((st = token_id(json_array_get(ids, i), param, ctx->vocab_size, &tok[i], err))) {
                free(tok);
                return st;
            }
        }
    }
    p->prompt.token_ids = tok;

    /* lengths: renderers/params.py _token_len_check after _token_truncation, on the
       values as given (max_tokens up to 2^63 - 1 is reported as such) */
    long long max_len = ctx->max_model_len;
    long long max_out = pp->max_tokens >= 0 ? pp->max_tokens : 0;
    long long max_in = max_len - max_out; /* max_out >= 0: no overflow */
    if (pp->have_truncate) {
        long long keep = pp->truncate_prompt_tokens == -1 ? max_in : pp->truncate_prompt_tokens;
        if (keep >= 0 && (long long)n > keep) {
            if (!pp->truncate_right) memmove(tok, tok + (n - (size_t)keep), (size_t)keep * sizeof *tok);
            n = (size_t)keep;
        }
    }
    p->prompt.num_token_ids = n;
    if (n == 0) return BAD(r->kind == OAI_KIND_CHAT ? "messages" : "prompt", "The decoder prompt cannot be empty");
    if ((long long)n > max_in)
        return BAD("input_tokens",
                   "You passed %zu input tokens and requested %lld output tokens. However, the model's context length "
                   "is only %lld tokens, resulting in a maximum input length of %lld tokens. Please reduce the length "
                   "of the input prompt.",
                   n, max_out, max_len, max_in);

    /* echo: the prompt's text (decoded when it came as ids) */
    if (r->kind == OAI_KIND_COMPLETION && r->echo && !p->text) {
        if (!ctx->detokenize) return BAD("echo", "echo of token-id prompts needs the model's tokenizer");
        char *t = NULL;
        st = ctx->detokenize(ctx->tok_ctx, p->prompt.token_ids, n, false, &t);
        if (st != VLLM_OK) {
            free(t);
            oai_error_set(err, 500, NULL, "detokenizing the prompt failed: %s", vllm_last_error());
            return st;
        }
        p->text = t;
    }

    /* max_tokens now fits an int: n + max_tokens <= max_model_len */
    long long mt = r->echo_only ? 1 /* vLLM runs one token and returns the prompt alone */
                   : pp->max_tokens >= 0 ? pp->max_tokens
                                         : max_len - (long long)n;
    if (pp->min_tokens > mt)
        return BAD("min_tokens", "min_tokens must be less than or equal to max_tokens=%lld, got %lld.", mt,
                   pp->min_tokens);
    p->params = *sp;
    p->params.max_tokens = (int)mt;
    p->params.min_tokens = (int)pp->min_tokens;
    return validate_params(&p->params, r->kind, pp, err);
}

/* After every prompt is known: the reply's size, with each prompt's resolved
 * max_tokens and length (check_entries). */
static vllm_status check_prompts_entries(const oai_server_ctx *ctx, const oai_request *r, const parsed *pp,
                                         oai_error *err) {
    long long prompt_tokens = 0;
    for (size_t i = 0; i < r->num_prompts; i++)
        prompt_tokens = sat_add(prompt_tokens, (long long)r->prompts[i].prompt.num_token_ids);
    /* max_tokens is the same for every prompt (completions), or there is one prompt (chat) */
    return check_entries(ctx, pp, r->num_prompts, r->prompts[0].params.max_tokens, pp->max_tokens < 0, prompt_tokens,
                         err);
}

/* ------------------------------------------------------------------ */
/* /v1/completions                                                     */
/* ------------------------------------------------------------------ */

static vllm_status parse_completion(const oai_server_ctx *ctx, const json_t *body, oai_request *r, oai_error *err) {
    vllm_status st;
    vllm_sampling_params sp;
    parsed pp = {.max_tokens = 16, .max_tokens_param = "max_tokens", .add_special_tokens = true,
                 .logprobs_param = "logprobs"};
    if ((st = parse_common(ctx, body, r, &sp, &pp, err))) return st;

    /* max_tokens: 16 when absent or null (normalize_null_max_tokens) */
    if ((st = oai_get_int64(body, "max_tokens", &pp.max_tokens, NULL, err))) return st;
    if (r->echo && pp.max_tokens == 0) r->echo_only = true;
    long long logprobs = -1;
    json_t *lv = oai_field(body, "logprobs");
    if (lv && !json_is_number(lv)) return BAD("logprobs", "`logprobs` must be an integer.");
    if ((st = oai_get_int64(body, "logprobs", &logprobs, NULL, err))) return st;
    if (lv) {
        if (logprobs < -1) return BAD("logprobs", "`logprobs` must be a positive value or -1.");
        if (logprobs == -1)
            return BAD("logprobs", "logprobs=-1 (the whole vocabulary) is not supported; the most is %d",
                       OAI_MAX_LOGPROBS);
    }
    pp.logprobs = logprobs;
    if (r->echo && !oai_field(body, "prompt_logprobs")) pp.prompt_logprobs = logprobs; /* to_sampling_params */
    json_t *suffix = oai_field(body, "suffix");
    if (suffix && !json_is_string(suffix)) return oai_type_error(err, "suffix", "a valid string", suffix);
    if (suffix) return BAD("suffix", "suffix is not currently supported");
    long long best_of = 0;
    bool have_best_of = false;
    if ((st = oai_get_int64(body, "best_of", &best_of, &have_best_of, err))) return st;
    if (have_best_of && best_of != pp.n)
        return BAD("best_of", "best_of must be equal to n (got best_of=%lld, n=%lld): best_of > n is not supported",
                   best_of, pp.n);
    if ((st = oai_parse_structured(ctx, body, r, err)) || (st = oai_check_structured(r, err))) return st;

    /* the prompt: a string, a list of strings, a list of ids or a list of lists of ids */
    json_t *pv = oai_field(body, "prompt");
    if (!pv || (json_is_string(pv) && json_string_length(pv) == 0))
        return BAD("prompt", "Either prompt or prompt_embeds must be provided and non-empty.");
    size_t num = 1;
    enum { ONE_TEXT, TEXTS, IDS, ID_LISTS } shape;
    const char *want = "a string, a list of strings, a list of token ids or a list of lists of token ids";
    if (json_is_string(pv)) {
        shape = ONE_TEXT;
    } else if (json_is_array(pv)) {
        if (json_array_size(pv) == 0) return BAD("prompt", "prompt: the list must not be empty");
        json_t *first = json_array_get(pv, 0);
        if (json_is_string(first)) shape = TEXTS;
        else if (json_is_array(first)) shape = ID_LISTS;
        else if (json_is_number(first)) shape = IDS;
        else return oai_type_error(err, "prompt", want, first);
        if (shape != IDS) num = json_array_size(pv);
        for (size_t i = 0; shape != IDS && i < num; i++) {
            json_t *e = json_array_get(pv, i);
            if (shape == TEXTS ? !json_is_string(e) : !json_is_array(e)) return oai_type_error(err, "prompt", want, e);
        }
    } else {
        return oai_type_error(err, "prompt", want, pv);
    }
    if (num > OAI_MAX_PROMPTS)
        return BAD("prompt", "prompt list length %zu exceeds the maximum allowed count of %d.", num, OAI_MAX_PROMPTS);

    /* ranges before the (costly) tokenization */
    long long max_tokens = r->echo_only ? 1 : pp.max_tokens;
    if ((st = check_sampling(&pp, true, max_tokens, err))) return st;
    if (num * (size_t)pp.n > OAI_MAX_CHOICES)
        return BAD("n", "%zu prompts x n=%lld is more than the %d choices one request may ask for", num, pp.n,
                   OAI_MAX_CHOICES);
    if (max_tokens <= ctx->max_model_len && (st = check_entries(ctx, &pp, num, max_tokens, false, 0, err))) return st;
    apply_sampling(&pp, r, &sp);
    oai_structured_params(r, &sp);
    vllm_sampling_params probe = sp;
    probe.max_tokens = (int)(max_tokens < INT_MAX ? max_tokens : INT_MAX);
    probe.min_tokens = 0;
    if ((st = validate_params(&probe, r->kind, &pp, err))) return st;
    if (!oai_check_model(ctx, r->model, err)) return VLLM_ERR_NOT_FOUND;

    r->prompts = calloc(num, sizeof *r->prompts);
    if (!r->prompts) return NOMEM();
    r->num_prompts = num;
    for (size_t i = 0; i < num; i++) {
        json_t *e = shape == ONE_TEXT || shape == IDS ? pv : json_array_get(pv, i);
        const char *text = json_is_string(e) ? json_string_value(e) : NULL;
        if ((st = finish_prompt(ctx, r, &r->prompts[i], text, text ? NULL : e, &sp, &pp, err))) return st;
    }
    return check_prompts_entries(ctx, r, &pp, err);
}

/* ------------------------------------------------------------------ */
/* /v1/chat/completions                                                */
/* ------------------------------------------------------------------ */

/* What the reply's tool and reasoning parsers need (oai_response.c): chat_template_kwargs, and the special
 * tokens kept in the text when a parser reads them. vLLM: ToolParser.adjust_request (hermes, mistral:
 * skip_special_tokens=False when tools are given and tool_choice is not "none"; the tool parser exists only
 * with --enable-auto-tool-choice); gpt-oss's harmony markers are special tokens (vLLM reads its token ids,
 * the text-level parsers here need them in the text). */
static vllm_status parser_inputs(const oai_server_ctx *ctx, const json_t *body, oai_request *r,
                                 vllm_sampling_params *sp, oai_error *err) {
    json_t *kwargs = oai_field(body, "chat_template_kwargs");
    if (kwargs && !(r->chat_template_kwargs = json_dumps(kwargs, JSON_COMPACT | JSON_PRESERVE_ORDER))) return NOMEM();
    toolp_kind tk;
    if (r->tool_mode != OAI_TOOLS_NONE && ctx->enable_auto_tool_choice &&
        toolp_kind_from_name(ctx->tool_call_parser, &tk) && toolp_kind_needs_special_tokens(tk))
        sp->skip_special_tokens = false;
    reasoning_kind rk;
    if (ctx->reasoning_parser && reasoning_kind_from_name(ctx->reasoning_parser, &rk) && rk == REASONING_GPT_OSS)
        sp->skip_special_tokens = false;
    return VLLM_OK;
}

static vllm_status parse_chat(const oai_server_ctx *ctx, const json_t *body, oai_request *r, oai_error *err) {
    vllm_status st;
    vllm_sampling_params sp;
    parsed pp = {.max_tokens = -1, .add_special_tokens = false, .logprobs_param = "top_logprobs"};
    if ((st = parse_common(ctx, body, r, &sp, &pp, err))) return st;

    /* max_completion_tokens over the deprecated max_tokens; null = the rest of max_model_len */
    bool have_mct = false, have_mt = false;
    long long mct = 0, mt = 0;
    if ((st = oai_get_int64(body, "max_completion_tokens", &mct, &have_mct, err))) return st;
    if ((st = oai_get_int64(body, "max_tokens", &mt, &have_mt, err))) return st;
    if (have_mct) pp.max_tokens = mct, pp.max_tokens_param = "max_completion_tokens";
    else if (have_mt) pp.max_tokens = mt, pp.max_tokens_param = "max_tokens";
    if (pp.max_tokens_param && pp.max_tokens < 1)
        return BAD(pp.max_tokens_param, "max_tokens must be at least 1, got %lld.", pp.max_tokens);

    /* logprobs (bool) + top_logprobs (check_logprobs) */
    bool logprobs = false;
    if ((st = oai_get_bool(body, "logprobs", &logprobs, err))) return st;
    long long top = 0;
    bool have_top = false;
    json_t *tv = oai_field(body, "top_logprobs");
    if (tv && !json_is_number(tv)) return BAD("top_logprobs", "`top_logprobs` must be an integer.");
    if ((st = oai_get_int64(body, "top_logprobs", &top, &have_top, err))) return st;
    if (have_top) {
        if (top < -1) return BAD("top_logprobs", "`top_logprobs` must be a positive value or -1.");
        if ((top == -1 || top > 0) && !logprobs)
            return BAD("top_logprobs", "when using `top_logprobs`, `logprobs` must be set to true.");
        if (top == -1)
            return BAD("top_logprobs", "top_logprobs=-1 (the whole vocabulary) is not supported; the most is %d",
                       OAI_MAX_LOGPROBS);
    }
    pp.logprobs = logprobs ? top : -1;
    /* vLLM also asks prompt logprobs for echo without logprobs; here only when logprobs are on */
    if (r->echo && logprobs && !oai_field(body, "prompt_logprobs")) pp.prompt_logprobs = top;
    if ((st = oai_parse_structured(ctx, body, r, err))) return st;

    if ((st = check_sampling(&pp, pp.max_tokens_param != NULL, pp.max_tokens, err))) return st;
    if (pp.n > OAI_MAX_CHOICES)
        return BAD("n", "n=%lld is more than the %d choices one request may ask for", pp.n, OAI_MAX_CHOICES);
    if (pp.max_tokens >= 1 && pp.max_tokens <= ctx->max_model_len &&
        (st = check_entries(ctx, &pp, 1, pp.max_tokens, false, 0, err)))
        return st;
    apply_sampling(&pp, r, &sp);
    oai_structured_params(r, &sp);
    vllm_sampling_params probe = sp;
    probe.max_tokens = pp.max_tokens < 1 ? 1 : pp.max_tokens < INT_MAX ? (int)pp.max_tokens : INT_MAX;
    probe.min_tokens = 0;
    if ((st = validate_params(&probe, r->kind, &pp, err))) return st;

    /* the prompt: messages through the chat template (the model check first, as vLLM,
       after the body's types) */
    json_t *msgs = oai_field(body, "messages");
    if (!msgs) return BAD("messages", "messages: Field required");
    if (!json_is_array(msgs)) return oai_type_error(err, "messages", "a list of messages", msgs);
    if (!oai_check_model(ctx, r->model, err)) return VLLM_ERR_NOT_FOUND;
    char *prompt = NULL, *last_content = NULL, *last_role = NULL;
    if ((st = oai_chat_render(ctx, body, &prompt, &r->chat_role, &last_content, &last_role, err))) return st;
    if (r->echo && !strcmp(last_role, r->chat_role) && last_content[0]) {
        r->echo_text = last_content;
        last_content = NULL;
    }
    free(last_content);
    free(last_role);
    r->prompts = calloc(1, sizeof *r->prompts);
    if (!r->prompts) {
        free(prompt);
        return NOMEM();
    }
    r->num_prompts = 1;
    if ((st = oai_parse_tool_choice(ctx, body, r, err)) || (st = oai_check_structured(r, err)) ||
        (st = parser_inputs(ctx, body, r, &sp, err))) {
        free(prompt);
        return st;
    }
    oai_structured_params(r, &sp);
    st = finish_prompt(ctx, r, &r->prompts[0], prompt, NULL, &sp, &pp, err);
    free(prompt);
    if (st != VLLM_OK) return st;
    return check_prompts_entries(ctx, r, &pp, err);
}

/* ------------------------------------------------------------------ */
/* Entry points                                                        */
/* ------------------------------------------------------------------ */

static vllm_status parse_root(const oai_server_ctx *ctx, oai_kind kind, oai_api api, json_t *root, oai_request **out,
                              oai_error *err) {
    oai_request *r = calloc(1, sizeof *r);
    if (!r) return NOMEM();
    r->kind = kind;
    r->api = api;
    r->n = 1;
    r->logprobs = -1;
    r->prompt_logprobs = -1;
    vllm_status st = kind == OAI_KIND_COMPLETION ? parse_completion(ctx, root, r, err) : parse_chat(ctx, root, r, err);
    if (st != VLLM_OK) {
        oai_request_free(r);
        return st;
    }
    *out = r;
    return VLLM_OK;
}

static vllm_status parse(const oai_server_ctx *ctx, oai_kind kind, const char *body, size_t len, oai_request **out,
                         oai_error *err) {
    *out = NULL;
    oai_error scratch;
    if (!err) err = &scratch;
    memset(err, 0, sizeof *err);
    json_t *root;
    vllm_status st = oai_parse_body(body, len, &root, err);
    if (st != VLLM_OK) return st;
    st = parse_root(ctx, kind, OAI_API_OPENAI, root, out, err);
    json_decref(root);
    return st;
}

vllm_status oai_translate_body(const oai_server_ctx *ctx, const char *body, size_t len, oai_translate_fn fn, void *arg,
                               json_t **root, json_t **chat, oai_error *err) {
    *root = *chat = NULL;
    memset(err, 0, sizeof *err);
    json_t *c = json_object();
    vllm_status st = c ? oai_parse_body(body, len, root, err) : NOMEM();
    if (st == VLLM_OK && (st = fn(ctx, *root, c, arg, err)) != VLLM_OK) {
        json_decref(*root);
        *root = NULL;
    }
    if (st != VLLM_OK) {
        json_decref(c);
        return st;
    }
    *chat = c;
    return VLLM_OK;
}

vllm_status oai_parse_chat_body(const oai_server_ctx *ctx, const json_t *chat, oai_api api, oai_request **out,
                                oai_error *err) {
    *out = NULL;
    return parse_root(ctx, OAI_KIND_CHAT, api, (json_t *)chat, out, err);
}

vllm_status oai_parse_completion(const oai_server_ctx *ctx, const char *body, size_t len, oai_request **out,
                                 oai_error *err) {
    return parse(ctx, OAI_KIND_COMPLETION, body, len, out, err);
}

vllm_status oai_parse_chat(const oai_server_ctx *ctx, const char *body, size_t len, oai_request **out, oai_error *err) {
    return parse(ctx, OAI_KIND_CHAT, body, len, out, err);
}
