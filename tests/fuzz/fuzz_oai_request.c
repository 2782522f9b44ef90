/*
 * fuzz_oai_request.c: libFuzzer target for the OpenAI / Responses / Anthropic request bodies
 * (src/server/oai_request.c, oai_chat.c, oai_tokenize.c, oai_field.c, oai_responses_req.c,
 * oai_anthropic_req.c): every input goes through oai_parse_completion, oai_parse_chat,
 * oai_parse_responses, oai_parse_messages, oai_count_tokens_request, oai_tokenize_request and
 * oai_detokenize_request with a server context holding a responses store (one stored response), a
 * byte-level fake tokenizer and a chat template; an accepted request is then answered with made-up
 * chunks (oai_response: non-streaming body or SSE stream) so that its fields reach the responder.
 * Errors must be well formed (status, NUL-terminated message); any crash, leak or sanitizer report
 * is a bug.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "server/oai_protocol.h"
#include "server/responses_store.h"

enum { VOCAB = 300, BOS = 1, EOS = 2 };

/* BOS = 1, EOS = 2, byte b -> b + 3 */
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
        if (ids[i] < 0 || ids[i] >= VOCAB) {
            free(*text);
            *text = NULL;
            return VLLM_ERR_INVALID_ARG;
        }
        if (ids[i] >= 3) (*text)[k++] = (char)(ids[i] - 3 ? ids[i] - 3 : '?');
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

/* what a real template does: tools, tool calls, content parts, kwargs */
static const char *TEMPLATE =
    "{% if tools %}[TOOLS {% for t in tools %}{{ t.function.name }} {{ t.function.parameters | tojson }}{% endfor %}]{% endif %}"
    "{% if enable_thinking is defined and not enable_thinking %}[NOTHINK]{% endif %}"
    "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>"
    "{% if m.content is string %}{{ m.content }}{% elif m.content %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endif %}"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}[CALL {{ c.function.name }} {{ c.function.arguments | tojson }}]{% endfor %}{% endif %}"
    "{{ '\\n' }}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}";

static const char *SERVED[] = {"stories", "alias"};
static oai_server_ctx CTX;

static void fail(const char *what, const oai_error *e) {
    fprintf(fuzz_quiet_stderr(), "fuzz_oai_request: %s (status %d, param '%.64s'): %.1024s\n", what,
            e ? e->status : 0, e ? e->param : "", e ? e->message : "");
    abort();
}

static void setup(void) {
    for (int i = 0; i < VOCAB; i++) snprintf(names[i], sizeof names[i], i == 7 ? "\xff\xfe" : "t%d", i);
    CTX = (oai_server_ctx){
        .served_model_names = SERVED,
        .num_served_model_names = 2,
        .max_model_len = 256,
        .vocab_size = VOCAB,
        .default_sampling = vllm_sampling_default_params(),
        .chat_template = TEMPLATE,
        .bos_token = "<s>",
        .eos_token = "</s>",
        .tokenize = fake_tokenize,
        .detokenize = fake_detokenize,
        .token_str = fake_token_str,
        .enable_prompt_tokens_details = true,
        .responses_store = responses_store_new(1 << 20),
    };
    if (!CTX.responses_store ||
        responses_store_put(CTX.responses_store, "resp_fuzz",
                            "{\"output\":[{\"type\":\"message\",\"content\":[{\"type\":\"output_text\",\"text\":\"A\"}]},"
                            "{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\",\"arguments\":\"{}\"}]}",
                            "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"Q\"}]") != VLLM_OK)
        abort();
}

static void check_error(vllm_status st, const oai_error *e) {
    if (st == VLLM_OK) return;
    if (e->status < 400 || e->status > 599) fail("error without an HTTP error status", e);
    if (!memchr(e->message, 0, sizeof e->message) || !memchr(e->param, 0, sizeof e->param) ||
        !memchr(e->type, 0, sizeof e->type))
        fail("error strings not terminated", e);
    char *j = oai_error_json(e);
    if (!j) fail("oai_error_json failed", e);
    free(j);
}

/* One made-up chunk per sample: two tokens with logprobs (top-k as the request asks), text, and
 * on sample 0 the prompt logprobs; then the body or the SSE stream. */
static void respond(const oai_request *req) {
    if (req->num_prompts == 0 || req->n < 1 || req->num_prompts * (size_t)req->n > 64) return;
    oai_response *res = NULL;
    oai_response_options opt = {.id = "cmpl-fuzz", .created = 1};
    if (oai_response_create(&CTX, req, req->num_prompts & 1 ? &opt : NULL, &res) != VLLM_OK) fail("response create", NULL);
    int k = req->logprobs > 0 ? req->logprobs : 0;
    int pk = req->prompt_logprobs > 0 ? req->prompt_logprobs : 0;
    if (k > 20) k = 20;
    if (pk > 20) pk = 20;
    for (size_t p = 0; p < req->num_prompts; p++) {
        const oai_prompt *pr = &req->prompts[p];
        size_t np = pr->prompt.num_token_ids;
        if (pr->prompt.text || (np && !pr->prompt.token_ids)) fail("prompt not tokenized", NULL);
        for (int s = 0; s < req->n; s++) {
            int32_t ids[2] = {np ? pr->prompt.token_ids[0] : 5, EOS};
            float lps[2] = {-0.5f, -1.25f};
            int32_t top_ids[2 * 20];
            float top_lps[2 * 20];
            for (int j = 0; j < 2 * k; j++) top_ids[j] = (j * 37) % VOCAB, top_lps[j] = -(float)j;
            float *plp = NULL;
            int32_t *ptop_ids = NULL;
            float *ptop = NULL;
            if (s == 0 && req->prompt_logprobs >= 0 && np) {
                plp = malloc(np * sizeof *plp);
                ptop_ids = malloc((np * (size_t)pk + 1) * sizeof *ptop_ids);
                ptop = malloc((np * (size_t)pk + 1) * sizeof *ptop);
                if (!plp || !ptop_ids || !ptop) abort();
                for (size_t j = 0; j < np; j++) plp[j] = j ? -1.0f : NAN;
                for (size_t j = 0; j < np * (size_t)pk; j++) ptop_ids[j] = (int32_t)(j % VOCAB), ptop[j] = -2.0f;
            }
            char text[] = "ab\xc3\xa9";
            vllm_stream_chunk c = {
                .index = (size_t)s,
                .last = s == req->n - 1,
                .token_ids = ids,
                .logprobs = lps,
                .num_tokens = 2,
                .top_logprob_ids = k ? top_ids : NULL,
                .top_logprobs = k ? top_lps : NULL,
                .num_top_logprobs = k,
                .text = text,
                .text_len = strlen(text),
                .finish_reason = s & 1 ? VLLM_FINISH_STOP : VLLM_FINISH_LENGTH,
                .stop_reason = NULL,
                .prompt_tokens = np,
                .completion_tokens = 2,
                .cached_prompt_tokens = np / 2,
                .prompt_logprobs = plp,
                .prompt_top_logprob_ids = pk ? ptop_ids : NULL,
                .prompt_top_logprobs = pk ? ptop : NULL,
                .num_prompt_top_logprobs = pk,
            };
            if (req->stream) {
                char *sse = NULL;
                size_t len = 0;
                if (oai_response_stream_chunk(res, p, &c, &sse, &len) != VLLM_OK || !sse) fail("stream chunk", NULL);
                free(sse);
            } else if (oai_response_add(res, p, &c) != VLLM_OK) {
                fail("response add", NULL);
            }
            free(plp);
            free(ptop_ids);
            free(ptop);
        }
    }
    char *out = NULL;
    size_t len = 0;
    oai_error err = {0};
    vllm_status st = req->stream ? oai_response_stream_end(res, &out, &len) : oai_response_body(res, &out, &len, &err);
    if (st != VLLM_OK || !out) fail("response body", &err);
    free(out);
    oai_response_free(res);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static bool ready;
    fuzz_quiet_stderr();
    if (!ready) setup(), ready = true;
    const char *body = (const char *)data; /* not NUL-terminated: the parsers take a length */
    CTX.reasoning_parser = size & 1 ? "qwen3" : NULL; /* Responses / Messages replies split reasoning off */
    for (int api = 0; api < 4; api++) {
        oai_request *req = (oai_request *)1;
        oai_error err;
        memset(&err, 0, sizeof err);
        vllm_status st = api == 0   ? oai_parse_completion(&CTX, body, size, &req, &err)
                         : api == 1 ? oai_parse_chat(&CTX, body, size, &req, &err)
                         : api == 2 ? oai_parse_responses(&CTX, body, size, &req, &err)
                                    : oai_parse_messages(&CTX, body, size, &req, &err);
        check_error(st, &err);
        if (st != VLLM_OK) {
            if (req) fail("*out not NULL on error", &err);
            continue;
        }
        if (!req || req->kind != (api ? OAI_KIND_CHAT : OAI_KIND_COMPLETION)) fail("no request", NULL);
        if (req->api != (api < 2 ? OAI_API_OPENAI : api == 2 ? OAI_API_RESPONSES : OAI_API_ANTHROPIC))
            fail("wrong api", NULL);
        for (size_t p = 0; p < req->num_prompts; p++) {
            const oai_prompt *pr = &req->prompts[p];
            for (size_t i = 0; i < pr->prompt.num_token_ids; i++)
                if (pr->prompt.token_ids[i] < 0 || pr->prompt.token_ids[i] >= VOCAB) fail("token id out of range", NULL);
            if (pr->params.max_tokens < 1 || pr->prompt.num_token_ids + (size_t)pr->params.max_tokens >
                                                 (size_t)CTX.max_model_len + (req->echo_only ? 1 : 0))
                fail("max_tokens not resolved within max_model_len", NULL);
        }
        respond(req);
        oai_request_free(req);
    }
    char *resp = NULL;
    oai_error err;
    memset(&err, 0, sizeof err);
    vllm_status st = oai_count_tokens_request(&CTX, body, size, &resp, &err);
    check_error(st, &err);
    if ((st == VLLM_OK) != (resp != NULL)) fail("count_tokens: response iff ok", &err);
    free(resp);
    resp = NULL;
    memset(&err, 0, sizeof err);
    st = oai_tokenize_request(&CTX, body, size, &resp, &err);
    check_error(st, &err);
    if ((st == VLLM_OK) != (resp != NULL)) fail("tokenize: response iff ok", &err);
    free(resp);
    resp = NULL;
    memset(&err, 0, sizeof err);
    st = oai_detokenize_request(&CTX, body, size, &resp, &err);
    check_error(st, &err);
    if ((st == VLLM_OK) != (resp != NULL)) fail("detokenize: response iff ok", &err);
    free(resp);
    return 0;
}
