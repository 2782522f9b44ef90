/*
 * test_oai_request.c: parsing and validation of /v1/completions,
 * /v1/chat/completions, /tokenize and /detokenize bodies
 * (src/server/oai_request.c, oai_chat.c, oai_tokenize.c): the fields and
 * defaults vLLM uses, and for each malformed body the HTTP status and the
 * `param` the error names. A byte-level fake tokenizer (BOS = 1, byte b ->
 * id b + 3) keeps the expected token ids readable.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/oai_protocol.h"
#include "test.h"

/* ------------------------------------------------------------------ */
/* Fake tokenizer and context                                          */
/* ------------------------------------------------------------------ */

enum { VOCAB = 512, BOS = 1, EOS = 2 };

static vllm_status fake_tokenize(void *c, const char *text, bool add_special, int32_t **ids, size_t *n) {
    (void)c;
    size_t len = strlen(text);
    *ids = malloc((len + 1) * sizeof **ids);
    if (!*ids) return VLLM_ERR_NO_MEMORY;
    size_t k = 0;
    if (add_special) (*ids)[k++] = BOS;
    for (size_t i = 0; i < len; i++) (*ids)[k++] = (unsigned char)text[i] + 3;
    *n = k;
    return VLLM_OK;
}

static vllm_status fake_detokenize(void *c, const int32_t *ids, size_t n, bool skip, char **text) {
    (void)c;
    *text = malloc(4 * n + 1);
    if (!*text) return VLLM_ERR_NO_MEMORY;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= 3) (*text)[k++] = (char)(ids[i] - 3);
        else if (!skip) memcpy(*text + k, ids[i] == BOS ? "<s>" : "</s>", ids[i] == BOS ? 3 : 4), k += ids[i] == BOS ? 3 : 4;
    }
    (*text)[k] = 0;
    return VLLM_OK;
}

static char names[VOCAB][16];
static const char *fake_token_str(void *c, int32_t id) {
    (void)c;
    return id >= 0 && id < VOCAB ? names[id] : NULL;
}

static const char *TEMPLATE =
    "{% if tools %}[TOOLS {{ tools[0].function.name }} {{ tools[0].function.description }}]{% endif %}"
    "{% if enable_thinking is defined and not enable_thinking %}[NOTHINK]{% endif %}"
    "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}"
    "{% if m.tool_calls %}[CALL {{ m.tool_calls[0].function.name }} {{ m.tool_calls[0].function.arguments.city }}]{% endif %}"
    "{{ '\\n' }}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}";

static const char *SERVED[] = {"stories", "alias"};

static oai_server_ctx make_ctx(void) {
    for (int i = 0; i < VOCAB; i++) snprintf(names[i], sizeof names[i], "t%d", i);
    oai_server_ctx c = {
        .served_model_names = SERVED,
        .num_served_model_names = 2,
        .max_model_len = 64,
        .vocab_size = VOCAB,
        .default_sampling = vllm_sampling_default_params(),
        .chat_template = TEMPLATE,
        .bos_token = "<s>",
        .eos_token = "</s>",
        .tokenize = fake_tokenize,
        .detokenize = fake_detokenize,
        .token_str = fake_token_str,
    };
    c.default_sampling.temperature = 0.7f; /* as if generation_config.json said so */
    c.default_sampling.top_p = 0.9f;
    return c;
}

static oai_server_ctx CTX;

/* ------------------------------------------------------------------ */
/* Helpers                                                             */
/* ------------------------------------------------------------------ */

static oai_request *ok_completion(const char *body, int line) {
    oai_request *r = NULL;
    oai_error err = {0};
    vllm_status st = oai_parse_completion(&CTX, body, strlen(body), &r, &err);
    if (st != VLLM_OK) fprintf(stderr, "line %d: %s -> %d %s (param %s)\n", line, body, err.status, err.message, err.param);
    CHECK_MSG(st == VLLM_OK && r, "line %d", line);
    return r;
}

static oai_request *ok_chat(const char *body, int line) {
    oai_request *r = NULL;
    oai_error err = {0};
    vllm_status st = oai_parse_chat(&CTX, body, strlen(body), &r, &err);
    if (st != VLLM_OK) fprintf(stderr, "line %d: %s -> %d %s (param %s)\n", line, body, err.status, err.message, err.param);
    CHECK_MSG(st == VLLM_OK && r, "line %d", line);
    return r;
}

/* A body that must fail with this status and param ("" = null) and a message containing `has`. */
static void bad_n(bool chat, const char *body, size_t len, int status, const char *param, const char *has, int line) {
    oai_request *r = (oai_request *)1;
    oai_error err;
    memset(&err, 0x55, sizeof err);
    vllm_status st = chat ? oai_parse_chat(&CTX, body, len, &r, &err) : oai_parse_completion(&CTX, body, len, &r, &err);
    CHECK_MSG(st != VLLM_OK, "line %d: accepted: %.200s", line, body);
    CHECK_MSG(r == NULL, "line %d: *out not NULL on error", line);
    CHECK_MSG(err.status == status, "line %d: status %d, want %d (%s)", line, err.status, status, err.message);
    CHECK_MSG(!strcmp(err.param, param), "line %d: param '%s', want '%s' (%s)", line, err.param, param, err.message);
    CHECK_MSG(strstr(err.message, has) != NULL, "line %d: '%s' not in message: %s", line, has, err.message);
    CHECK_MSG(!strcmp(err.type, status == 404 ? "NotFoundError" : status == 400 ? "BadRequestError" : "InternalServerError"),
              "line %d: type %s", line, err.type);
    if (st == VLLM_OK && r && r != (oai_request *)1) oai_request_free(r);
}
#define BAD_C(body, status, param, has) bad_n(false, body, strlen(body), status, param, has, __LINE__)
#define BAD_CHAT(body, status, param, has) bad_n(true, body, strlen(body), status, param, has, __LINE__)

static bool ids_are(const oai_prompt *p, const int32_t *want, size_t n) {
    return p->prompt.num_token_ids == n && !memcmp(p->prompt.token_ids, want, n * sizeof *want);
}

/* ------------------------------------------------------------------ */
/* Completions                                                         */
/* ------------------------------------------------------------------ */

static void test_completion_valid(void) {
    oai_request *r = ok_completion("{\"model\":\"stories\",\"prompt\":\"hi\"}", __LINE__);
    if (r) {
        CHECK(r->kind == OAI_KIND_COMPLETION && r->num_prompts == 1 && r->n == 1);
        int32_t want[] = {BOS, 'h' + 3, 'i' + 3};
        CHECK(ids_are(&r->prompts[0], want, 3));
        CHECK(r->prompts[0].params.max_tokens == 16); /* vLLM's completions default */
        CHECK_NEAR(r->prompts[0].params.temperature, 0.7, 1e-6); /* generation_config default */
        CHECK_NEAR(r->prompts[0].params.top_p, 0.9, 1e-6);
        CHECK(r->prompts[0].params.logprobs == -1 && r->prompts[0].params.prompt_logprobs == -1);
        CHECK(!r->stream && !r->include_usage && !r->echo && r->logprobs == -1);
        CHECK(r->prompts[0].params.skip_special_tokens);
        CHECK(!strcmp(r->model, "stories"));
        CHECK(!strcmp(r->prompts[0].text, "hi"));
        oai_request_free(r);
    }
    /* a list of strings, n, temperature, null max_tokens = 16 (normalize_null_max_tokens), alias name */
    r = ok_completion("{\"model\":\"alias\",\"prompt\":[\"ab\",\"c\"],\"n\":2,\"temperature\":1,\"max_tokens\":null,"
                      "\"top_k\":-1,\"user\":\"u1\",\"some_unknown_field\":{\"x\":[1,2]}}",
                      __LINE__);
    if (r) {
        CHECK(r->num_prompts == 2 && r->n == 2);
        int32_t a[] = {BOS, 'a' + 3, 'b' + 3}, c[] = {BOS, 'c' + 3};
        CHECK(ids_are(&r->prompts[0], a, 3) && ids_are(&r->prompts[1], c, 2));
        CHECK(r->prompts[1].params.n == 2 && r->prompts[1].params.temperature == 1.0f);
        CHECK(r->prompts[0].params.max_tokens == 16 && r->prompts[0].params.top_k == -1);
        oai_request_free(r);
    }
    /* token ids, lists of token ids; no model is fine */
    r = ok_completion("{\"prompt\":[5,6,7],\"max_tokens\":5.0}", __LINE__);
    if (r) {
        int32_t want[] = {5, 6, 7};
        CHECK(r->num_prompts == 1 && ids_are(&r->prompts[0], want, 3));
        CHECK(r->prompts[0].params.max_tokens == 5 && r->model == NULL && r->prompts[0].text == NULL);
        oai_request_free(r);
    }
    r = ok_completion("{\"prompt\":[[5],[6,7]],\"add_special_tokens\":false}", __LINE__);
    if (r) {
        int32_t a[] = {5}, b[] = {6, 7};
        CHECK(r->num_prompts == 2 && ids_are(&r->prompts[0], a, 1) && ids_are(&r->prompts[1], b, 2));
        oai_request_free(r);
    }
    r = ok_completion("{\"prompt\":\"ab\",\"add_special_tokens\":false}", __LINE__);
    if (r) {
        int32_t want[] = {'a' + 3, 'b' + 3};
        CHECK(ids_are(&r->prompts[0], want, 2));
        oai_request_free(r);
    }
    /* stream options: include_usage defaults to true once stream_options is given */
    r = ok_completion("{\"prompt\":\"x\",\"stream\":true,\"stream_options\":{}}", __LINE__);
    if (r) {
        CHECK(r->stream && r->include_usage && !r->continuous_usage_stats);
        oai_request_free(r);
    }
    r = ok_completion("{\"prompt\":\"x\",\"stream\":true,\"stream_options\":{\"include_usage\":true,"
                      "\"continuous_usage_stats\":true}}",
                      __LINE__);
    if (r) {
        CHECK(r->include_usage && r->continuous_usage_stats);
        oai_request_free(r);
    }
    r = ok_completion("{\"prompt\":\"x\",\"stream\":true,\"stream_options\":{\"include_usage\":false,"
                      "\"continuous_usage_stats\":true}}",
                      __LINE__);
    if (r) {
        CHECK(!r->include_usage && !r->continuous_usage_stats);
        oai_request_free(r);
    }
    r = ok_completion("{\"prompt\":\"x\",\"stream\":false,\"stream_options\":{}}", __LINE__); /* {} is falsy in vLLM */
    if (r) {
        CHECK(!r->stream && !r->include_usage);
        oai_request_free(r);
    }
    /* stop as a string and as a list; penalties; seed; logit_bias clamped; ids lists */
    r = ok_completion("{\"prompt\":\"x\",\"stop\":\"END\",\"seed\":-1,\"presence_penalty\":0.5,"
                      "\"frequency_penalty\":-0.5,\"repetition_penalty\":1.2,\"logit_bias\":{\"5\":200,\" 7 \":-3.5},"
                      "\"stop_token_ids\":[2,9],\"allowed_token_ids\":[4,5,6],\"bad_words\":[\"bad\"],\"min_p\":0.1,"
                      "\"ignore_eos\":true,\"min_tokens\":2,\"include_stop_str_in_output\":true,"
                      "\"skip_special_tokens\":false,\"spaces_between_special_tokens\":false}",
                      __LINE__);
    if (r) {
        const vllm_sampling_params *p = &r->prompts[0].params;
        CHECK(p->num_stop == 1 && !strcmp(p->stop[0], "END"));
        CHECK(p->has_seed && p->seed == UINT64_MAX);
        CHECK_NEAR(p->presence_penalty, 0.5, 1e-6);
        CHECK_NEAR(p->frequency_penalty, -0.5, 1e-6);
        CHECK_NEAR(p->repetition_penalty, 1.2, 1e-6);
        CHECK(p->num_logit_bias == 2 && p->logit_bias_ids[0] == 5 && p->logit_bias_values[0] == 100.0f);
        CHECK(p->logit_bias_ids[1] == 7 && p->logit_bias_values[1] == -3.5f);
        CHECK(p->num_stop_token_ids == 2 && p->stop_token_ids[1] == 9);
        CHECK(p->num_allowed_token_ids == 3 && p->allowed_token_ids[2] == 6);
        CHECK(p->num_bad_words == 1 && !strcmp(p->bad_words[0], "bad"));
        CHECK(p->ignore_eos && p->min_tokens == 2 && p->include_stop_str_in_output && !p->skip_special_tokens);
        CHECK_NEAR(p->min_p, 0.1, 1e-6);
        oai_request_free(r);
    }
    r = ok_completion("{\"prompt\":\"x\",\"stop\":[\"a\",\"b\"],\"logprobs\":3,\"best_of\":1}", __LINE__);
    if (r) {
        CHECK(r->num_stop == 2 && r->prompts[0].params.num_stop == 2 && !strcmp(r->prompts[0].params.stop[1], "b"));
        CHECK(r->logprobs == 3 && r->prompts[0].params.logprobs == 3 && r->prompts[0].params.prompt_logprobs == -1);
        oai_request_free(r);
    }
    /* echo: the prompt text kept; with logprobs, prompt logprobs asked for */
    r = ok_completion("{\"prompt\":\"hey\",\"echo\":true,\"logprobs\":2}", __LINE__);
    if (r) {
        CHECK(r->echo && !r->echo_only && !strcmp(r->prompts[0].text, "hey"));
        CHECK(r->prompts[0].params.prompt_logprobs == 2 && r->prompt_logprobs == 2);
        oai_request_free(r);
    }
    /* echo of ids with max_tokens 0: the prompt alone (decoded), the engine runs 1 token */
    r = ok_completion("{\"prompt\":[1,107,108],\"echo\":true,\"max_tokens\":0}", __LINE__);
    if (r) {
        CHECK(r->echo_only && r->prompts[0].params.max_tokens == 1);
        CHECK(r->prompts[0].text && !strcmp(r->prompts[0].text, "<s>hi"));
        oai_request_free(r);
    }
    /* truncate_prompt_tokens keeps the last tokens (left side), or the first ones (right) */
    r = ok_completion("{\"prompt\":\"abcd\",\"truncate_prompt_tokens\":2}", __LINE__);
    if (r) {
        int32_t want[] = {'c' + 3, 'd' + 3};
        CHECK(ids_are(&r->prompts[0], want, 2));
        oai_request_free(r);
    }
    r = ok_completion("{\"prompt\":\"abcd\",\"truncate_prompt_tokens\":2,\"truncation_side\":\"right\"}", __LINE__);
    if (r) {
        int32_t want[] = {BOS, 'a' + 3};
        CHECK(ids_are(&r->prompts[0], want, 2));
        oai_request_free(r);
    }
    /* -1: to the longest input that fits (64 - 16 = 48 tokens) */
    char big[256];
    snprintf(big, sizeof big, "{\"prompt\":\"%0100d\",\"truncate_prompt_tokens\":-1}", 0);
    r = ok_completion(big, __LINE__);
    if (r) {
        CHECK(r->prompts[0].prompt.num_token_ids == 48 && r->prompts[0].params.max_tokens == 16);
        oai_request_free(r);
    }
    /* the longest prompt that fits: 64 - 16 = 48 */
    snprintf(big, sizeof big, "{\"prompt\":\"%047d\"}", 0);
    r = ok_completion(big, __LINE__);
    if (r) {
        CHECK(r->prompts[0].prompt.num_token_ids == 48);
        oai_request_free(r);
    }
    /* request_id, return_tokens_as_token_ids, response_format text, priority 0 */
    r = ok_completion("{\"prompt\":\"x\",\"request_id\":\"abc\",\"return_tokens_as_token_ids\":true,"
                      "\"response_format\":{\"type\":\"text\"},\"priority\":0,\"stream\":null}",
                      __LINE__);
    if (r) {
        CHECK(r->request_id && !strcmp(r->request_id, "abc") && r->return_tokens_as_token_ids);
        oai_request_free(r);
    }
    /* sampling defaults of the server apply only where the request is silent */
    r = ok_completion("{\"prompt\":\"x\",\"top_p\":1}", __LINE__);
    if (r) {
        CHECK(r->prompts[0].params.top_p == 1.0f);
        CHECK_NEAR(r->prompts[0].params.temperature, 0.7, 1e-6);
        oai_request_free(r);
    }
}

static void test_completion_invalid(void) {
    /* bodies that are not JSON objects */
    BAD_C("", 400, "", "empty");
    BAD_C("{", 400, "", "Invalid JSON");
    BAD_C("{\"prompt\":\"x\",}", 400, "", "Invalid JSON");
    BAD_C("[1,2]", 400, "", "expected a JSON object, got an array");
    BAD_C("\"prompt\"", 400, "", "expected a JSON object");
    BAD_C("null", 400, "", "expected a JSON object");
    bad_n(false, "{\"prompt\":\"a\xff\"}", 15, 400, "", "Invalid JSON", __LINE__);     /* invalid UTF-8 */
    bad_n(false, "{\"prompt\":\"\xc0\xaf\"}", 15, 400, "", "Invalid JSON", __LINE__);  /* overlong */
    BAD_C("{\"prompt\":\"\\ud800\"}", 400, "", "Invalid JSON");                          /* lone surrogate */
    BAD_C("{\"prompt\":\"a\\u0000b\"}", 400, "", "Invalid JSON");                        /* NUL */
    BAD_C("{\"prompt\":\"x\",\"max_tokens\":100000000000000000000000}", 400, "", "Invalid JSON");
    /* nesting bomb */
    char *deep = malloc(20010);
    if (deep) {
        size_t k = 0;
        k += (size_t)sprintf(deep, "{\"prompt\":");
        for (int i = 0; i < 5000; i++) deep[k++] = '[';
        for (int i = 0; i < 5000; i++) deep[k++] = ']';
        deep[k++] = '}';
        deep[k] = 0;
        bad_n(false, deep, k, 400, "", "Invalid JSON", __LINE__);
        free(deep);
    }
    /* the prompt */
    BAD_C("{}", 400, "prompt", "must be provided");
    BAD_C("{\"prompt\":null}", 400, "prompt", "must be provided");
    BAD_C("{\"prompt\":\"\"}", 400, "prompt", "non-empty");
    BAD_C("{\"prompt\":[]}", 400, "prompt", "must not be empty");
    BAD_C("{\"prompt\":5}", 400, "prompt", "Input should be");
    BAD_C("{\"prompt\":{\"a\":1}}", 400, "prompt", "got an object");
    BAD_C("{\"prompt\":[true]}", 400, "prompt", "got a boolean");
    BAD_C("{\"prompt\":[1,\"a\"]}", 400, "prompt[1]", "valid integer");
    BAD_C("{\"prompt\":[\"a\",1]}", 400, "prompt", "got an integer");
    BAD_C("{\"prompt\":[[1],[]]}", 400, "prompt", "cannot be empty");
    BAD_C("{\"prompt\":[-1]}", 400, "prompt[0]", "greater than or equal to 0");
    BAD_C("{\"prompt\":[1,600]}", 400, "prompt[1]", "out of vocabulary");
    BAD_C("{\"prompt\":[1.5]}", 400, "prompt[0]", "fractional");
    {
        size_t cap = 1100 * 4 + 32, k = 0;
        char *many = malloc(cap);
        if (many) {
            k += (size_t)sprintf(many, "{\"prompt\":[");
            for (int i = 0; i < 1025; i++) k += (size_t)sprintf(many + k, "%s\"a\"", i ? "," : "");
            k += (size_t)sprintf(many + k, "]}");
            bad_n(false, many, k, 400, "prompt", "exceeds the maximum allowed count of 1024", __LINE__);
            free(many);
        }
    }
    char big[256];
    snprintf(big, sizeof big, "{\"prompt\":\"%048d\"}", 0); /* 49 tokens > 64 - 16 */
    BAD_C(big, 400, "input_tokens", "You passed 49 input tokens and requested 16 output tokens");
    /* wrong types of known fields */
    BAD_C("{\"prompt\":\"x\",\"temperature\":\"hot\"}", 400, "temperature", "valid number, got a string");
    BAD_C("{\"prompt\":\"x\",\"top_p\":[1]}", 400, "top_p", "valid number");
    BAD_C("{\"prompt\":\"x\",\"n\":\"2\"}", 400, "n", "valid integer");
    BAD_C("{\"prompt\":\"x\",\"n\":true}", 400, "n", "valid integer");
    BAD_C("{\"prompt\":\"x\",\"max_tokens\":1.5}", 400, "max_tokens", "fractional");
    BAD_C("{\"prompt\":\"x\",\"max_tokens\":\"10\"}", 400, "max_tokens", "valid integer");
    BAD_C("{\"prompt\":\"x\",\"stream\":\"yes\"}", 400, "stream", "valid boolean");
    BAD_C("{\"prompt\":\"x\",\"echo\":1}", 400, "echo", "valid boolean");
    BAD_C("{\"prompt\":\"x\",\"seed\":\"x\"}", 400, "seed", "valid integer");
    BAD_C("{\"prompt\":\"x\",\"ignore_eos\":\"yes\"}", 400, "ignore_eos", "valid boolean");
    BAD_C("{\"prompt\":\"x\",\"model\":5}", 400, "model", "valid string");
    BAD_C("{\"prompt\":\"x\",\"user\":5}", 400, "user", "valid string");
    BAD_C("{\"prompt\":\"x\",\"stop\":5}", 400, "stop", "a string or a list of strings");
    BAD_C("{\"prompt\":\"x\",\"stop\":[\"a\",1]}", 400, "stop[1]", "valid string");
    BAD_C("{\"prompt\":\"x\",\"bad_words\":\"x\"}", 400, "bad_words", "list of strings");
    BAD_C("{\"prompt\":\"x\",\"stop_token_ids\":[600]}", 400, "stop_token_ids[0]", "out of vocabulary");
    BAD_C("{\"prompt\":\"x\",\"stop_token_ids\":5}", 400, "stop_token_ids", "list of integers");
    BAD_C("{\"prompt\":\"x\",\"allowed_token_ids\":[]}", 400, "allowed_token_ids", "empty");
    BAD_C("{\"prompt\":\"x\",\"logit_bias\":[]}", 400, "logit_bias", "object");
    BAD_C("{\"prompt\":\"x\",\"logit_bias\":{\"abc\":1}}", 400, "logit_bias", "abc");
    BAD_C("{\"prompt\":\"x\",\"logit_bias\":{\"5\":\"x\"}}", 400, "logit_bias", "number");
    BAD_C("{\"prompt\":\"x\",\"logit_bias\":{\"9999\":1}}", 400, "logit_bias", "out-of-vocab");
    BAD_C("{\"prompt\":\"x\",\"stream_options\":[]}", 400, "stream_options", "an object");
    BAD_C("{\"prompt\":\"x\",\"stream\":true,\"stream_options\":{\"include_usage\":\"y\"}}", 400,
          "stream_options.include_usage", "valid boolean");
    BAD_C("{\"prompt\":\"x\",\"logprobs\":\"x\"}", 400, "logprobs", "must be an integer");
    BAD_C("{\"prompt\":\"x\",\"logprobs\":true}", 400, "logprobs", "must be an integer");
    /* out-of-range values, as vLLM words them */
    BAD_C("{\"prompt\":\"x\",\"temperature\":-1}", 400, "temperature", "non-negative");
    BAD_C("{\"prompt\":\"x\",\"temperature\":1e39}", 400, "temperature", "temperature must be in [0, 2], got 1e+39.");
    BAD_C("{\"prompt\":\"x\",\"top_p\":0}", 400, "top_p", "(0, 1]");
    BAD_C("{\"prompt\":\"x\",\"top_k\":-2}", 400, "top_k", "top_k");
    BAD_C("{\"prompt\":\"x\",\"min_p\":2}", 400, "min_p", "[0, 1]");
    BAD_C("{\"prompt\":\"x\",\"n\":0}", 400, "n", "at least 1");
    BAD_C("{\"prompt\":\"x\",\"n\":100000}", 400, "n", "n must be at most 4096, got 100000.");
    BAD_C("{\"prompt\":[\"a\",\"b\",\"c\",\"d\",\"e\"],\"n\":4000}", 400, "n", "choices");
    BAD_C("{\"prompt\":\"x\",\"max_tokens\":0}", 400, "max_tokens", "at least 1, got 0");
    BAD_C("{\"prompt\":\"x\",\"max_tokens\":-1}", 400, "max_tokens", "at least 1, got -1");
    BAD_C("{\"prompt\":\"x\",\"max_tokens\":1000000000000}", 400, "input_tokens", "context length is only 64");
    BAD_C("{\"prompt\":\"x\",\"max_tokens\":63}", 400, "input_tokens", "maximum input length of 1 tokens");
    BAD_C("{\"prompt\":\"x\",\"presence_penalty\":3}", 400, "presence_penalty", "[-2, 2]");
    BAD_C("{\"prompt\":\"x\",\"frequency_penalty\":-2.5}", 400, "frequency_penalty", "[-2, 2]");
    BAD_C("{\"prompt\":\"x\",\"repetition_penalty\":0}", 400, "repetition_penalty", "greater than zero");
    BAD_C("{\"prompt\":\"x\",\"min_tokens\":20}", 400, "min_tokens", "less than or equal to max_tokens");
    BAD_C("{\"prompt\":\"x\",\"min_tokens\":-1}", 400, "min_tokens", "greater than or equal to 0");
    BAD_C("{\"prompt\":\"x\",\"stop\":[\"\"]}", 400, "stop", "empty string");
    BAD_C("{\"prompt\":\"x\",\"logprobs\":21}", 400, "logprobs", "greater than max allowed: 20");
    BAD_C("{\"prompt\":\"x\",\"logprobs\":-1}", 400, "logprobs", "not supported");
    BAD_C("{\"prompt\":\"x\",\"logprobs\":-2}", 400, "logprobs", "positive value or -1");
    BAD_C("{\"prompt\":\"x\",\"temperature\":0,\"n\":2}", 400, "n", "greedy");
    BAD_C("{\"prompt\":\"x\",\"truncate_prompt_tokens\":-2}", 400, "truncate_prompt_tokens", "-1");
    BAD_C("{\"prompt\":\"x\",\"truncation_side\":\"middle\"}", 400, "truncation_side", "'left' or 'right'");
    /* features vLLM refuses or this server lacks */
    BAD_C("{\"prompt\":\"x\",\"suffix\":\"y\"}", 400, "suffix", "suffix is not currently supported");
    BAD_C("{\"prompt\":\"x\",\"best_of\":3}", 400, "best_of", "best_of");
    BAD_C("{\"prompt\":\"x\",\"stream_options\":{\"include_usage\":true}}", 400, "stream_options",
          "only be defined when `stream=True`");
    BAD_C("{\"prompt\":\"x\",\"stream\":true,\"prompt_logprobs\":1}", 400, "prompt_logprobs", "stream=True");
    BAD_C("{\"prompt\":\"x\",\"prompt_logprobs\":-3}", 400, "prompt_logprobs", "positive value or -1");
    BAD_C("{\"prompt\":\"x\",\"use_beam_search\":true}", 400, "use_beam_search", "beam search");
    BAD_C("{\"prompt\":\"x\",\"response_format\":{\"type\":\"structural_tag\"}}", 400, "response_format",
          "not supported");
    BAD_C("{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_object\"},\"structured_outputs\":{\"regex\":\"a\"}}",
          400, "response_format", "only use one kind");
    BAD_C("{\"prompt\":\"x\",\"structured_outputs\":{\"choice\":[]}}", 400, "structured_outputs", "empty list");
    BAD_C("{\"prompt\":\"x\",\"structured_outputs\":{\"grammar\":\"root ::= undefined_rule\"}}", 400,
          "structured_outputs", "not defined");
    BAD_C("{\"prompt\":\"x\",\"guided_choice\":\"a\"}", 400, "guided_choice", "list of strings");
    BAD_C("{\"prompt\":\"x\",\"priority\":1}", 400, "priority", "Priority scheduling is not enabled");
    BAD_C("{\"prompt\":\"x\",\"return_token_ids\":true}", 400, "return_token_ids", "not supported");
    BAD_C("{\"prompt\":[1,2],\"echo\":true,\"model\":\"stories\",\"max_tokens\":0,\"logprobs\":2,\"n\":0}", 400, "n",
          "at least 1");
    /* the model name: 404 as vLLM (after the body's validation) */
    BAD_C("{\"prompt\":\"x\",\"model\":\"gpt-4\"}", 404, "model", "The model `gpt-4` does not exist.");
}

/* ------------------------------------------------------------------ */
/* Chat                                                                */
/* ------------------------------------------------------------------ */

static bool prompt_text_is(const oai_request *r, const char *want) {
    bool ok = r->prompts[0].text && !strcmp(r->prompts[0].text, want);
    if (!ok) fprintf(stderr, "prompt text: [%s]\nwant:        [%s]\n", r->prompts[0].text ? r->prompts[0].text : "(null)", want);
    return ok;
}

static void test_chat_valid(void) {
    oai_request *r = ok_chat("{\"model\":\"stories\",\"messages\":[{\"role\":\"system\",\"content\":\"S\"},"
                             "{\"role\":\"user\",\"content\":\"U\"}]}",
                             __LINE__);
    if (r) {
        CHECK(r->kind == OAI_KIND_CHAT && r->num_prompts == 1 && !strcmp(r->chat_role, "assistant"));
        CHECK(prompt_text_is(r, "<s><|system|>S\n<|user|>U\n<|assistant|>"));
        /* chat prompts are tokenized without special tokens: the template carries BOS */
        CHECK(r->prompts[0].prompt.token_ids[0] == '<' + 3);
        size_t n = strlen("<s><|system|>S\n<|user|>U\n<|assistant|>");
        CHECK(r->prompts[0].prompt.num_token_ids == n);
        CHECK(r->prompts[0].params.max_tokens == (int)(64 - n)); /* null = the rest of max_model_len */
        CHECK(r->logprobs == -1 && r->echo_text == NULL);
        oai_request_free(r);
    }
    /* list-of-parts content joined with "\n"; developer role; max_completion_tokens over max_tokens */
    r = ok_chat("{\"messages\":[{\"role\":\"developer\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                "{\"type\":\"text\",\"text\":\"b\"}]},{\"role\":\"user\",\"content\":[\"c\"]}],"
                "\"max_tokens\":3,\"max_completion_tokens\":5}",
                __LINE__);
    if (r) {
        CHECK(prompt_text_is(r, "<s><|developer|>a\nb\n<|user|>c\n<|assistant|>"));
        CHECK(r->prompts[0].params.max_tokens == 5);
        oai_request_free(r);
    }
    r = ok_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":3}", __LINE__);
    if (r) {
        CHECK(r->prompts[0].params.max_tokens == 3);
        oai_request_free(r);
    }
    /* tool calls: null assistant content, arguments parsed for the template; tools listed */
    CTX.max_model_len = 256;
    r = ok_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"w?\"},{\"role\":\"assistant\",\"content\":null,"
                "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get\","
                "\"arguments\":\"{\\\"city\\\":\\\"Oslo\\\"}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"c1\","
                "\"content\":\"5C\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get\","
                "\"parameters\":{\"type\":\"object\"}}}],\"tool_choice\":\"auto\"}",
                __LINE__);
    if (r) {
        CHECK(prompt_text_is(r, "[TOOLS get None]<s><|user|>w?\n<|assistant|>[CALL get Oslo]\n<|tool|>5C\n<|assistant|>"));
        oai_request_free(r);
    }
    CTX.max_model_len = 64;
    /* logprobs: bool + top_logprobs */
    r = ok_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":3}", __LINE__);
    if (r) {
        CHECK(r->logprobs == 3 && r->prompts[0].params.logprobs == 3);
        oai_request_free(r);
    }
    r = ok_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true}", __LINE__);
    if (r) {
        CHECK(r->logprobs == 0 && r->prompts[0].params.logprobs == 0);
        oai_request_free(r);
    }
    r = ok_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":false,\"top_logprobs\":0}", __LINE__);
    if (r) {
        CHECK(r->logprobs == -1 && r->prompts[0].params.logprobs == -1);
        oai_request_free(r);
    }
    /* no generation prompt: the reply's role is the last message's */
    r = ok_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"add_generation_prompt\":false}", __LINE__);
    if (r) {
        CHECK(!strcmp(r->chat_role, "user"));
        CHECK(prompt_text_is(r, "<s><|user|>x\n"));
        oai_request_free(r);
    }
    /* continue_final_message: the render stops after the final message; echo repeats it */
    r = ok_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"content\":\"Once\"}],"
                "\"continue_final_message\":true,\"echo\":true}",
                __LINE__);
    if (r) {
        CHECK(prompt_text_is(r, "<s><|user|>x\n<|assistant|>Once"));
        CHECK(!strcmp(r->chat_role, "assistant") && r->echo_text && !strcmp(r->echo_text, "Once"));
        oai_request_free(r);
    }
    /* echo with a user last message: nothing to prepend (the roles differ) */
    r = ok_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"echo\":true}", __LINE__);
    if (r) {
        CHECK(r->echo && r->echo_text == NULL);
        oai_request_free(r);
    }
    /* chat_template_kwargs reach the template; reasoning_effort none turns thinking off */
    r = ok_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"chat_template_kwargs\":{\"enable_thinking\":false}}",
                __LINE__);
    if (r) {
        CHECK(prompt_text_is(r, "[NOTHINK]<s><|user|>x\n<|assistant|>"));
        oai_request_free(r);
    }
    r = ok_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_effort\":\"none\"}", __LINE__);
    if (r) {
        CHECK(prompt_text_is(r, "[NOTHINK]<s><|user|>x\n<|assistant|>"));
        oai_request_free(r);
    }
    /* kwargs may not replace the messages */
    r = ok_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"chat_template_kwargs\":{\"messages\":[]}}",
                __LINE__);
    if (r) {
        CHECK(prompt_text_is(r, "<s><|user|>x\n<|assistant|>"));
        oai_request_free(r);
    }
    /* add_special_tokens: BOS on top of the template's */
    r = ok_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"add_special_tokens\":true,"
                "\"tool_choice\":\"none\",\"response_format\":{\"type\":\"text\"},\"parallel_tool_calls\":false}",
                __LINE__);
    if (r) {
        CHECK(r->prompts[0].prompt.token_ids[0] == BOS);
        oai_request_free(r);
    }
}

/* structured outputs and forced tool calls become the prompt's structured_outputs */
static void test_structured_valid(void) {
    CTX.max_model_len = 256;
    oai_request *r = ok_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\","
                             "\"function\":{\"name\":\"get\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":"
                             "{\"type\":\"string\"}},\"required\":[\"city\"]}}}],\"tool_choice\":\"required\"}",
                             __LINE__);
    if (r) {
        const vllm_structured_outputs *so = &r->prompts[0].params.structured_outputs;
        CHECK(r->tool_mode == OAI_TOOLS_REQUIRED && so->json && strstr(so->json, "\"minItems\":1") &&
              strstr(so->json, "\"enum\":[\"get\"]") && r->tools_json);
        oai_request_free(r);
    }
    r = ok_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\","
                "\"function\":{\"name\":\"get\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":"
                "{\"type\":\"string\"}}}}}],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get\"}}}",
                __LINE__);
    if (r) {
        const vllm_structured_outputs *so = &r->prompts[0].params.structured_outputs;
        CHECK(r->tool_mode == OAI_TOOLS_NAMED && !strcmp(r->tool_name, "get") && so->json &&
              !strcmp(so->json, "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}"));
        oai_request_free(r);
    }
    r = ok_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_object\"}}",
                __LINE__);
    if (r) {
        CHECK(r->prompts[0].params.structured_outputs.json_object && r->tool_mode == OAI_TOOLS_NONE);
        oai_request_free(r);
    }
    r = ok_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"structured_outputs\":{\"choice\":[\"a\",\"b\"]},"
                "\"guided_decoding_backend\":\"xgrammar\"}",
                __LINE__);
    if (r) {
        const vllm_structured_outputs *so = &r->prompts[0].params.structured_outputs;
        CHECK(so->num_choice == 2 && !strcmp(so->choice[1], "b"));
        oai_request_free(r);
    }
    CTX.max_model_len = 64;
}

static void test_chat_invalid(void) {
    const char *U = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
    char body[512];
#define WITH(extra) (snprintf(body, sizeof body, "{%s,%s}", U, extra), body)
    BAD_CHAT("{}", 400, "messages", "Field required");
    BAD_CHAT("{\"messages\":\"hi\"}", 400, "messages", "list of messages");
    BAD_CHAT("{\"messages\":[]}", 400, "messages", "at least 1 item");
    BAD_CHAT("{\"messages\":[5]}", 400, "messages[0]", "message object");
    BAD_CHAT("{\"messages\":[{\"content\":\"x\"}]}", 400, "messages[0].role", "Field required");
    BAD_CHAT("{\"messages\":[{\"role\":5,\"content\":\"x\"}]}", 400, "messages[0].role", "valid string");
    BAD_CHAT("{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", 400, "messages[0].role", "unknown role 'wizard'");
    BAD_CHAT("{\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, "messages[0].content", "list of content parts");
    BAD_CHAT("{\"messages\":[{\"role\":\"user\"}]}", 400, "messages[0].content", "content is required");
    BAD_CHAT("{\"messages\":[{\"role\":\"user\",\"content\":null}]}", 400, "messages[0].content", "content is required");
    BAD_CHAT("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}}]}]}",
             400, "messages[0].content", "'image_url' are not supported");
    BAD_CHAT("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_audio\"}]}]}", 400,
             "messages[0].content", "not supported");
    BAD_CHAT("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"hologram\"}]}]}", 400, "messages[0].content",
             "unknown content part type");
    BAD_CHAT("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":5}]}]}", 400,
             "messages[0].content", "valid string");
    BAD_CHAT("{\"messages\":[{\"role\":\"user\",\"content\":[5]}]}", 400, "messages[0].content", "content parts");
    BAD_CHAT("{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"name\":5}]}", 400, "messages[0].name", "valid string");
    BAD_CHAT("{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":5}]}", 400,
             "messages[0].tool_calls", "list of tool calls");
    BAD_CHAT(WITH("\"logprobs\":1"), 400, "logprobs", "valid boolean");
    BAD_CHAT(WITH("\"top_logprobs\":3"), 400, "top_logprobs", "`logprobs` must be set to true");
    BAD_CHAT(WITH("\"logprobs\":true,\"top_logprobs\":21"), 400, "top_logprobs", "greater than max allowed: 20");
    BAD_CHAT(WITH("\"logprobs\":true,\"top_logprobs\":-1"), 400, "top_logprobs", "not supported");
    BAD_CHAT(WITH("\"logprobs\":true,\"top_logprobs\":\"3\""), 400, "top_logprobs", "must be an integer");
    BAD_CHAT(WITH("\"max_completion_tokens\":0"), 400, "max_completion_tokens", "at least 1");
    BAD_CHAT(WITH("\"max_tokens\":-5"), 400, "max_tokens", "at least 1");
    BAD_CHAT(WITH("\"max_completion_tokens\":60"), 400, "input_tokens", "requested 60 output tokens");
    BAD_CHAT(WITH("\"tools\":[]"), 400, "tools", "must not be an empty array");
    CTX.enable_auto_tool_choice = false;
    BAD_CHAT(WITH("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]"), 400, "tool_choice",
             "requires --enable-auto-tool-choice and --tool-call-parser");
    CTX.enable_auto_tool_choice = true;
    BAD_CHAT(WITH("\"tools\":[{\"type\":\"function\"}]"), 400, "tools[0]", "function");
    BAD_CHAT(WITH("\"tools\":{}"), 400, "tools", "list of tools");
    BAD_CHAT(WITH("\"tool_choice\":\"auto\""), 400, "tool_choice", "`tools` must be set");
    BAD_CHAT(WITH("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":{\"type\":"
                  "\"function\",\"function\":{\"name\":\"g\"}}"),
             400, "tool_choice", "does not match any of the specified `tools`");
    BAD_CHAT(WITH("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":{\"type\":"
                  "\"function\"}"),
             400, "tool_choice", "Correct usage");
    BAD_CHAT(WITH("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":\"required\","
                  "\"structured_outputs\":{\"regex\":\"a\"}"),
             400, "tool_choice", "either use constraints for structured outputs or tools");
    BAD_CHAT(WITH("\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":"
                  "{\"type\":\"array\",\"minItems\":5,\"maxItems\":3}}}"),
             400, "response_format", "minItems");
    BAD_CHAT(WITH("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":\"maybe\""), 400,
             "tool_choice", "Invalid value for `tool_choice`");
    BAD_CHAT(WITH("\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{}}"), 400, "response_format",
             "none are specified");
    BAD_CHAT(WITH("\"response_format\":{\"type\":\"json_schema\"}"), 400, "response_format",
             "the 'json_schema' field must be provided");
    BAD_CHAT(WITH("\"response_format\":\"json\""), 400, "response_format", "an object");
    BAD_CHAT(WITH("\"chat_template\":\"{{ 1 }}\""), 400, "chat_template", "untrusted chat template");
    BAD_CHAT(WITH("\"chat_template_kwargs\":\"x\""), 400, "chat_template_kwargs", "an object");
    BAD_CHAT(WITH("\"continue_final_message\":true,\"add_generation_prompt\":true"), 400, "continue_final_message",
             "Cannot set both");
    BAD_CHAT(WITH("\"add_generation_prompt\":\"no\""), 400, "add_generation_prompt", "valid boolean");
    BAD_CHAT(WITH("\"reasoning_effort\":\"extreme\""), 400, "reasoning_effort", "Input should be");
    BAD_CHAT(WITH("\"documents\":5"), 400, "documents", "list of objects");
    BAD_CHAT(WITH("\"temperature\":-0.5"), 400, "temperature", "non-negative");
    BAD_CHAT(WITH("\"n\":2,\"temperature\":0"), 400, "n", "greedy");
    BAD_CHAT(WITH("\"stream_options\":{\"include_usage\":true}"), 400, "stream_options", "stream=True");
    BAD_CHAT(WITH("\"model\":\"nope\""), 404, "model", "The model `nope` does not exist.");
    /* a message too long for max_model_len */
    char longmsg[300];
    snprintf(longmsg, sizeof longmsg, "{\"messages\":[{\"role\":\"user\",\"content\":\"%060d\"}]}", 0);
    BAD_CHAT(longmsg, 400, "input_tokens", "You passed");
    /* continue_final_message whose content the template drops */
    const char *saved = CTX.chat_template;
    CTX.chat_template = "{% for m in messages %}<|{{ m.role }}|>{% endfor %}";
    BAD_CHAT("{\"messages\":[{\"role\":\"assistant\",\"content\":\"Once\"}],\"continue_final_message\":true}", 400,
             "messages", "does not appear in the chat");
    /* template errors (raise_exception) are the request's fault */
    CTX.chat_template = "{{ raise_exception('roles must alternate') }}";
    BAD_CHAT("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400, "", "roles must alternate");
    /* no template at all */
    CTX.chat_template = NULL;
    BAD_CHAT("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400, "", "you must provide a chat template");
    CTX.chat_template = saved;
    /* no tokenizer: text prompts cannot be tokenized */
    CTX.tokenize = NULL;
    BAD_C("{\"prompt\":\"x\"}", 400, "prompt", "no tokenizer");
    CTX.tokenize = fake_tokenize;
#undef WITH
}

/* ------------------------------------------------------------------ */
/* /tokenize, /detokenize, /v1/models                                  */
/* ------------------------------------------------------------------ */

static void test_tokenize_endpoints(void) {
    char *resp = NULL;
    oai_error err = {0};
    const char *b = "{\"model\":\"stories\",\"prompt\":\"hi\"}";
    CHECK_OK(oai_tokenize_request(&CTX, b, strlen(b), &resp, &err));
    CHECK(resp && !strcmp(resp, "{\"count\":3,\"max_model_len\":64,\"tokens\":[1,107,108],\"token_strs\":null}"));
    free(resp), resp = NULL;
    b = "{\"prompt\":\"hi\",\"add_special_tokens\":false,\"return_token_strs\":true}";
    CHECK_OK(oai_tokenize_request(&CTX, b, strlen(b), &resp, &err));
    CHECK(resp && !strcmp(resp, "{\"count\":2,\"max_model_len\":64,\"tokens\":[107,108],\"token_strs\":[\"t107\",\"t108\"]}"));
    free(resp), resp = NULL;
    /* chat form: rendered, no special tokens by default */
    b = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"add_generation_prompt\":false}";
    CHECK_OK(oai_tokenize_request(&CTX, b, strlen(b), &resp, &err));
    CHECK(resp && strstr(resp, "\"count\":13,"));
    free(resp), resp = NULL;
    b = "{\"prompt\":5}";
    CHECK(oai_tokenize_request(&CTX, b, strlen(b), &resp, &err) != VLLM_OK && err.status == 400 &&
          !strcmp(err.param, "prompt") && !resp);
    b = "{\"prompt\":\"x\",\"model\":\"other\"}";
    CHECK(oai_tokenize_request(&CTX, b, strlen(b), &resp, &err) != VLLM_OK && err.status == 404);
    b = "{}";
    CHECK(oai_tokenize_request(&CTX, b, strlen(b), &resp, &err) != VLLM_OK && err.status == 400);

    b = "{\"tokens\":[1,107,108]}";
    CHECK_OK(oai_detokenize_request(&CTX, b, strlen(b), &resp, &err));
    CHECK(resp && !strcmp(resp, "{\"prompt\":\"<s>hi\"}"));
    free(resp), resp = NULL;
    b = "{\"tokens\":[1,512]}";
    CHECK(oai_detokenize_request(&CTX, b, strlen(b), &resp, &err) != VLLM_OK && err.status == 400 &&
          !strcmp(err.param, "tokens[1]"));
    b = "{\"tokens\":\"abc\"}";
    CHECK(oai_detokenize_request(&CTX, b, strlen(b), &resp, &err) != VLLM_OK && !strcmp(err.param, "tokens"));
    b = "{\"tokens\":[1],\"model\":\"x\"}";
    CHECK(oai_detokenize_request(&CTX, b, strlen(b), &resp, &err) != VLLM_OK && err.status == 404);
    b = "{}";
    CHECK(oai_detokenize_request(&CTX, b, strlen(b), &resp, &err) != VLLM_OK && !strcmp(err.param, "tokens"));

    char *models = oai_models_json(&CTX, "models/stories260K");
    const char *head = "{\"object\":\"list\",\"data\":[{\"id\":\"stories\",\"object\":\"model\",\"created\":";
    CHECK(models && !strncmp(models, head, strlen(head)));
    CHECK(models && strstr(models, "\"owned_by\":\"vllm\",\"root\":\"models/stories260K\",\"parent\":null,\"max_model_len\":64,"
                                    "\"permission\":[{\"id\":\"modelperm-"));
    CHECK(models && strstr(models, "{\"id\":\"alias\",\"object\":\"model\""));
    free(models);

    /* the model check helper */
    CHECK(oai_check_model(&CTX, NULL, &err) && oai_check_model(&CTX, "", &err) && oai_check_model(&CTX, "alias", &err));
    CHECK(!oai_check_model(&CTX, "gpt", &err) && err.status == 404 && !strcmp(err.type, "NotFoundError") &&
          !strcmp(err.param, "model"));
}

/* Mutated bodies (cut, bytes flipped, spliced) never crash and fail only with a 4xx
 * (run under ASan / UBSan by make test-asan). */
static void test_mutations(void) {
    const char *seeds[] = {
        "{\"model\":\"stories\",\"prompt\":[\"ab\",\"c\"],\"n\":2,\"temperature\":1,\"stop\":[\"x\"],"
        "\"logit_bias\":{\"5\":1},\"logprobs\":2,\"echo\":true,\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
        "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"}]},{\"role\":\"assistant\","
        "\"content\":null,\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}],\"tools\":[{\"type\":"
        "\"function\",\"function\":{\"name\":\"f\"}}],\"logprobs\":true,\"top_logprobs\":2,\"max_completion_tokens\":5}",
    };
    const char junk[] = "{}[]\",:0-1e9.tfn\\\xff\xc3 ";
    unsigned long long x = 88172645463325252ull;
    int failures = 0;
    for (int it = 0; it < 6000; it++) {
        const char *seed = seeds[it % 2];
        size_t n = strlen(seed);
        char buf[512];
        memcpy(buf, seed, n);
        for (int m = 0; m < 1 + it % 4; m++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            size_t at = (size_t)(x % n);
            switch ((x >> 20) % 3) {
            case 0: buf[at] = junk[(x >> 32) % (sizeof junk - 1)]; break;
            case 1: n = at + 1; break;
            default: memmove(buf + at, buf + at + 1, n - at - 1), n--; break;
            }
            if (n == 0) n = 1;
        }
        oai_request *r = NULL;
        oai_error err = {0};
        vllm_status st = it % 2 ? oai_parse_chat(&CTX, buf, n, &r, &err) : oai_parse_completion(&CTX, buf, n, &r, &err);
        if (st == VLLM_OK) {
            if (!r || r->num_prompts == 0) failures++;
            oai_request_free(r);
        } else if (r || err.status < 400 || err.status > 404 || !err.message[0]) {
            failures++;
        }
    }
    CHECK_MSG(failures == 0, "%d mutated bodies handled badly", failures);
}

/* ------------------------------------------------------------------ */
/* Numbers as the JSON gave them (issue 19, item 8)                    */
/* ------------------------------------------------------------------ */

static void test_numbers_as_given(void) {
    /* a double that a float would round to 0 or past the range is still in range */
    oai_request *r = ok_completion("{\"prompt\":\"x\",\"top_p\":1e-308,\"repetition_penalty\":1e300,"
                                   "\"temperature\":1e-300,\"n\":2,\"min_p\":1e-310}",
                                   __LINE__);
    if (r) {
        const vllm_sampling_params *sp = &r->prompts[0].params;
        CHECK(sp->top_p > 0.0f && sp->top_p <= 1.0f);
        CHECK(sp->repetition_penalty > 0.0f && isfinite(sp->repetition_penalty));
        CHECK(sp->temperature > 0.0f); /* not greedy: vLLM raises 0 < T < 0.01 to 0.01, so n = 2 is fine */
        CHECK(sp->min_p >= 0.0f && sp->min_p <= 1.0f && sp->n == 2);
        CHECK(vllm_sampling_params_validate(sp) == VLLM_OK);
        oai_request_free(r);
    }
    /* just past a bound: rejected, the value printed as Python prints it */
    BAD_C("{\"prompt\":\"x\",\"presence_penalty\":2.0000001}", 400, "presence_penalty",
          "presence_penalty must be in [-2, 2], got 2.0000001.");
    BAD_C("{\"prompt\":\"x\",\"frequency_penalty\":-2.0000000001}", 400, "frequency_penalty",
          "frequency_penalty must be in [-2, 2], got -2.0000000001.");
    BAD_C("{\"prompt\":\"x\",\"top_p\":1.00000001}", 400, "top_p", "top_p must be in (0, 1], got 1.00000001.");
    BAD_C("{\"prompt\":\"x\",\"min_p\":-1e-300}", 400, "min_p", "min_p must be in [0, 1], got -1e-300.");
    BAD_C("{\"prompt\":\"x\",\"top_p\":0}", 400, "top_p", "top_p must be in (0, 1], got 0.0.");
    BAD_C("{\"prompt\":\"x\",\"temperature\":-1}", 400, "temperature", "temperature must be non-negative, got -1.0.");
    BAD_C("{\"prompt\":\"x\",\"temperature\":2.5}", 400, "temperature", "temperature must be in [0, 2], got 2.5.");
    BAD_C("{\"prompt\":\"x\",\"repetition_penalty\":-0.0}", 400, "repetition_penalty",
          "repetition_penalty must be greater than zero, got -0.0.");
    /* integers past int: their real value */
    BAD_C("{\"prompt\":\"x\",\"max_tokens\":9223372036854775807}", 400, "input_tokens",
          "You passed 2 input tokens and requested 9223372036854775807 output tokens. However, the model's context "
          "length is only 64 tokens, resulting in a maximum input length of -9223372036854775743 tokens.");
    BAD_CHAT("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_completion_tokens\":4294967296}", 400,
             "input_tokens", "requested 4294967296 output tokens");
    BAD_C("{\"prompt\":\"x\",\"max_tokens\":-9223372036854775808}", 400, "max_tokens",
          "max_tokens must be at least 1, got -9223372036854775808.");
    BAD_C("{\"prompt\":\"x\",\"top_k\":-4294967296}", 400, "top_k",
          "top_k must be 0 (disable), or at least 1, got -4294967296.");
    BAD_C("{\"prompt\":\"x\",\"n\":4294967297}", 400, "n", "n must be at most 4096, got 4294967297.");
    BAD_C("{\"prompt\":\"x\",\"n\":-4294967296}", 400, "n", "n must be at least 1, got -4294967296.");
    BAD_C("{\"prompt\":\"x\",\"min_tokens\":4294967296}", 400, "min_tokens",
          "min_tokens must be less than or equal to max_tokens=16, got 4294967296.");
    BAD_CHAT("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"min_tokens\":4294967296}", 400, "min_tokens",
             "min_tokens must be less than or equal to max_tokens=");
    BAD_C("{\"prompt\":\"x\",\"logprobs\":4294967296}", 400, "logprobs",
          "Requested sample logprobs of 4294967296, which is greater than max allowed: 20");
    BAD_CHAT("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":4294967296}",
             400, "top_logprobs", "Requested sample logprobs of 4294967296, which is greater than max allowed: 20");
    BAD_C("{\"prompt\":\"x\",\"prompt_logprobs\":21}", 400, "prompt_logprobs",
          "Requested prompt logprobs of 21, which is greater than max allowed: 20");
    BAD_C("{\"prompt\":\"x\",\"best_of\":4294967297}", 400, "best_of", "best_of=4294967297, n=1");
    BAD_C("{\"prompt\":\"x\",\"n\":2,\"temperature\":0}", 400, "n", "n must be 1 when using greedy sampling, got 2.");
    /* an integral number past int64 is not "a number with a fractional part" */
    BAD_C("{\"prompt\":\"x\",\"max_tokens\":1e19}", 400, "max_tokens",
          "max_tokens: Input should be an integer in [-9223372036854775808, 9223372036854775807], got 1e+19");
    BAD_C("{\"prompt\":\"x\",\"max_tokens\":5.5}", 400, "max_tokens", "fractional part");
    /* integral floats are integers (pydantic), huge truncate_prompt_tokens keeps everything */
    r = ok_completion("{\"prompt\":\"hello\",\"max_tokens\":4.0,\"truncate_prompt_tokens\":4294967297}", __LINE__);
    if (r) {
        CHECK(r->prompts[0].params.max_tokens == 4 && r->prompts[0].prompt.num_token_ids == 6);
        oai_request_free(r);
    }
}

/* ------------------------------------------------------------------ */
/* The memory one reply may take (issue 19, item 4)                    */
/* ------------------------------------------------------------------ */

static void test_response_entries_limit(void) {
    long long saved = CTX.max_response_entries;
    CTX.max_response_entries = 1000;
    /* 2 x 30 x (1 + 20) = 1260 > 1000, before tokenization */
    BAD_C("{\"prompt\":\"x\",\"n\":2,\"max_tokens\":30,\"logprobs\":20}", 400, "max_tokens",
          "n=2 x (max_tokens=30 x (1 + logprobs=20)) = 1260 token entries is more than the 1000 one request may ask for");
    /* prompts multiply, and so do the prompt logprobs (echo asks them) */
    BAD_C("{\"prompt\":[\"x\",\"y\"],\"max_tokens\":30,\"logprobs\":20}", 400, "max_tokens", "2 prompts x max_tokens=30");
    BAD_C("{\"prompt\":\"" "01234567890123456789012345678901234567890123456789" "\",\"max_tokens\":2,"
          "\"logprobs\":20,\"echo\":true}",
          400, "max_tokens", "+ 51 prompt tokens x (1 + prompt_logprobs=20)) = 1113");
    /* chat without max_tokens: the rest of the context */
    BAD_CHAT("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":2,\"logprobs\":true,\"top_logprobs\":20}", 400,
             "max_tokens", "(the rest of the context) x (1 + top_logprobs=20))");
    BAD_CHAT("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_completion_tokens\":40,\"logprobs\":true,"
             "\"top_logprobs\":20,\"n\":2}",
             400, "max_completion_tokens", "lower n, max_completion_tokens or top_logprobs");
    /* without logprobs: tokens only */
    BAD_C("{\"prompt\":\"x\",\"n\":30,\"max_tokens\":40}", 400, "max_tokens",
          "n=30 x (max_tokens=40) = 1200 token entries is more than the 1000 one request may ask for (the server's "
          "--max-response-entries); lower n, max_tokens");
    /* at the limit: fine (2 x 25 x (1 + 19) = 1000) */
    oai_request *r = ok_completion("{\"prompt\":\"x\",\"n\":2,\"max_tokens\":25,\"logprobs\":19}", __LINE__);
    oai_request_free(r);
    /* no logprobs: each token counts once */
    r = ok_completion("{\"prompt\":[\"a\",\"b\"],\"n\":10,\"max_tokens\":50}", __LINE__);
    oai_request_free(r);
    /* 0 = the default (2^20): 4 prompts x n 4096 x 40 x 21 is far past it */
    CTX.max_response_entries = 0;
    BAD_C("{\"prompt\":[\"a\",\"b\",\"c\",\"d\"],\"n\":4096,\"max_tokens\":40,\"logprobs\":20}", 400, "max_tokens",
          "is more than the 1048576 one request may ask for");
    /* negative: no limit */
    CTX.max_response_entries = -1;
    r = ok_completion("{\"prompt\":[\"a\",\"b\",\"c\",\"d\"],\"n\":4096,\"max_tokens\":40,\"logprobs\":20}", __LINE__);
    oai_request_free(r);
    CTX.max_response_entries = saved;
}

/* ------------------------------------------------------------------ */
/* Error messages say their prefix once (issue 19, item 8)             */
/* ------------------------------------------------------------------ */

static void test_no_doubled_prefix(void) {
    const char *saved = CTX.chat_template;
    const char *templates[] = {
        "{{ raise_exception('roles must alternate') }}", /* raises */
        "{{ messages[0].content + }}",                   /* does not parse */
        "{% for m in messages %}{{ m.content }}",        /* unclosed block */
    };
    for (size_t i = 0; i < sizeof templates / sizeof templates[0]; i++) {
        CTX.chat_template = templates[i];
        const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
        oai_request *r = NULL;
        oai_error err = {0};
        CHECK(oai_parse_chat(&CTX, body, strlen(body), &r, &err) != VLLM_OK && !r && err.status == 400);
        CHECK_MSG(!strncmp(err.message, "chat template: ", 15) && !strstr(err.message + 1, "chat template: "),
                  "template %zu: %s", i, err.message);
        char *resp = NULL;
        CHECK(oai_tokenize_request(&CTX, body, strlen(body), &resp, &err) != VLLM_OK && !resp && err.status == 400);
        CHECK_MSG(!strncmp(err.message, "chat template: ", 15) && !strstr(err.message + 1, "chat template: "),
                  "/tokenize, template %zu: %s", i, err.message);
    }
    CTX.chat_template = saved;
}

int main(void) {
    CTX = make_ctx();
    CTX.enable_auto_tool_choice = true; /* tools without tool_choice are "auto": served with a parser */
    CTX.tool_call_parser = "hermes";
    test_mutations();
    test_completion_valid();
    test_completion_invalid();
    test_chat_valid();
    test_structured_valid();
    test_chat_invalid();
    test_tokenize_endpoints();
    test_numbers_as_given();
    test_response_entries_limit();
    test_no_doubled_prefix();
    TEST_END();
}
