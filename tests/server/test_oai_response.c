/*
 * test_oai_response.c: the exact JSON the server sends (src/server/oai_response.c,
 * oai_error.c): text_completion and chat.completion bodies, streamed chunks
 * as SSE events (role chunk, deltas, finish, usage chunk, [DONE]), logprobs
 * in the completions and chat formats, echo, n > 1 choice indices, engine
 * errors, and the error bodies. Chat replies with tools and reasoning
 * (oai_reply_parse.c): tool_choice named / required / auto (hermes) and a
 * reasoning parser (qwen3), whole and streamed from recorded pieces, their
 * finish_reason, include_reasoning, parallel_tool_calls, and the request's
 * skip_special_tokens.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/oai_internal.h"
#include "server/oai_protocol.h"
#include "test.h"
#include "server/oai_fake_tok.h"

enum { VOCAB = 512 };

/* token i's text: "t<i>"; 300 is "é" (2 bytes), 301 an invalid lone byte */
static char names[VOCAB][16];
static const char *fake_token_str(void *c, int32_t id) {
    (void)c;
    if (id == 300) return "\xc3\xa9";
    if (id == 301) return "\xe2";
    return id >= 0 && id < VOCAB ? names[id] : NULL;
}

static const char *SERVED[] = {"m"};

static oai_server_ctx CTX;

static void init_ctx(void) {
    for (int i = 0; i < VOCAB; i++) snprintf(names[i], sizeof names[i], "t%d", i);
    CTX = (oai_server_ctx){
        .served_model_names = SERVED,
        .num_served_model_names = 1,
        .max_model_len = 64,
        .vocab_size = VOCAB,
        .default_sampling = vllm_sampling_default_params(),
        .chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}",
        .tokenize = fake_tokenize,
        .detokenize = fake_detokenize,
        .token_str = fake_token_str,
    };
}

static oai_request *parse(bool chat, const char *body) {
    oai_request *r = NULL;
    oai_error err;
    vllm_status st = chat ? oai_parse_chat(&CTX, body, strlen(body), &r, &err)
                          : oai_parse_completion(&CTX, body, strlen(body), &r, &err);
    CHECK_MSG(st == VLLM_OK, "%s: %s", body, err.message);
    return r;
}

static oai_response *respond(const oai_request *req, const char *id) {
    oai_response *res = NULL;
    oai_response_options opt = {.id = id, .created = 100};
    CHECK_OK(oai_response_create(&CTX, req, &opt, &res));
    return res;
}

static vllm_stream_chunk chunk(size_t index, const char *text, int32_t *ids, float *lps, size_t n, vllm_finish_reason f,
                               const char *stop, size_t prompt_tokens, size_t completion_tokens) {
    vllm_stream_chunk c = {0};
    c.index = index;
    c.text = (char *)text;
    c.text_len = strlen(text);
    c.token_ids = ids;
    c.logprobs = lps;
    c.num_tokens = n;
    c.finish_reason = f;
    c.stop_reason = (char *)stop;
    c.prompt_tokens = prompt_tokens;
    c.completion_tokens = completion_tokens;
    c.last = f != VLLM_FINISH_NONE;
    return c;
}

#define CHECK_STR(got, want)                                                                         \
    do {                                                                                             \
        const char *g_ = (got), *w_ = (want);                                                        \
        CHECK_MSG(g_ && !strcmp(g_, w_), "\n got: %s\nwant: %s", g_ ? g_ : "(null)", w_);            \
    } while (0)

static char *body_of(oai_response *res) {
    char *body = NULL;
    size_t len = 0;
    oai_error err = {0};
    CHECK_OK(oai_response_body(res, &body, &len, &err));
    CHECK(!body || strlen(body) == len);
    return body;
}

static char *sse_of(oai_response *res, size_t p, const vllm_stream_chunk *c) {
    char *sse = NULL;
    size_t len = 0;
    CHECK_OK(oai_response_stream_chunk(res, p, c, &sse, &len));
    CHECK(!sse || strlen(sse) == len);
    return sse;
}

static char *end_of(oai_response *res) {
    char *sse = NULL;
    size_t len = 0;
    CHECK_OK(oai_response_stream_end(res, &sse, &len));
    return sse;
}

/* ------------------------------------------------------------------ */

static void test_completion_body(void) {
    oai_request *req = parse(false, "{\"prompt\":\"ab\"}");
    if (!req) return;
    oai_response *res = respond(req, "cmpl-1");
    int32_t a[] = {7}, b[] = {8};
    float la[] = {-0.5f}, lb[] = {-1.0f};
    vllm_stream_chunk c1 = chunk(0, "x", a, la, 1, VLLM_FINISH_NONE, NULL, 3, 1);
    vllm_stream_chunk c2 = chunk(0, "y", b, lb, 1, VLLM_FINISH_LENGTH, NULL, 3, 2);
    CHECK_OK(oai_response_add(res, 0, &c1));
    CHECK_OK(oai_response_add(res, 0, &c2));
    char *body = body_of(res);
    CHECK_STR(body, "{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":100,\"model\":\"m\",\"choices\":[{\"index\":0,"
                    "\"text\":\"xy\",\"logprobs\":null,\"finish_reason\":\"length\",\"stop_reason\":null,\"prompt_logprobs\":null}],"
                    "\"usage\":{\"prompt_tokens\":3,\"total_tokens\":5,\"completion_tokens\":2}}");
    free(body);
    oai_response_free(res);
    oai_request_free(req);
}

static void test_completion_stream(void) {
    oai_request *req = parse(false, "{\"prompt\":\"ab\",\"stream\":true,\"stream_options\":{\"include_usage\":true}}");
    if (!req) return;
    oai_response *res = respond(req, "cmpl-1");
    int32_t a[] = {7}, b[] = {8};
    float la[] = {-0.5f}, lb[] = {-1.0f};
    vllm_stream_chunk c0 = chunk(0, "", NULL, NULL, 0, VLLM_FINISH_NONE, NULL, 3, 0); /* a prefill step: skipped */
    vllm_stream_chunk c1 = chunk(0, "x", a, la, 1, VLLM_FINISH_NONE, NULL, 3, 1);
    vllm_stream_chunk c2 = chunk(0, "y\"", b, lb, 1, VLLM_FINISH_STOP, "END", 3, 2);
    char *s0 = sse_of(res, 0, &c0), *s1 = sse_of(res, 0, &c1), *s2 = sse_of(res, 0, &c2), *e = end_of(res);
    CHECK_STR(s0, "");
    CHECK_STR(s1, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":100,\"model\":\"m\",\"choices\":[{\"index\":0,"
                  "\"text\":\"x\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}]}\n\n");
    CHECK_STR(s2, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":100,\"model\":\"m\",\"choices\":[{\"index\":0,"
                  "\"text\":\"y\\\"\",\"logprobs\":null,\"finish_reason\":\"stop\",\"stop_reason\":\"END\"}]}\n\n");
    CHECK_STR(e, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":100,\"model\":\"m\",\"choices\":[],"
                 "\"usage\":{\"prompt_tokens\":3,\"total_tokens\":5,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n");
    free(s0), free(s1), free(s2), free(e);
    oai_response_free(res);
    oai_request_free(req);

    /* without include_usage: only [DONE]; continuous usage in every chunk */
    req = parse(false, "{\"prompt\":\"ab\",\"stream\":true}");
    if (!req) return;
    res = respond(req, "cmpl-2");
    e = end_of(res);
    CHECK_STR(e, "data: [DONE]\n\n");
    free(e);
    oai_response_free(res);
    oai_request_free(req);
    req = parse(false, "{\"prompt\":\"ab\",\"stream\":true,\"stream_options\":{\"continuous_usage_stats\":true}}");
    if (!req) return;
    res = respond(req, "cmpl-3");
    s1 = sse_of(res, 0, &c1);
    CHECK_STR(s1, "data: {\"id\":\"cmpl-3\",\"object\":\"text_completion\",\"created\":100,\"model\":\"m\",\"choices\":[{\"index\":0,"
                  "\"text\":\"x\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}],\"usage\":{\"prompt_tokens\":3,"
                  "\"total_tokens\":4,\"completion_tokens\":1}}\n\n");
    free(s1);
    oai_response_free(res);
    oai_request_free(req);
}

static void test_completion_logprobs(void) {
    oai_request *req = parse(false, "{\"prompt\":\"ab\",\"logprobs\":1}");
    if (!req) return;
    oai_response *res = respond(req, "cmpl-1");
    /* token 7 (sampled, rank 2) with top-1 token 9; token 8 (-inf) is its own top-1; token 300 is "é" */
    int32_t a[] = {7, 8}, ta[] = {9, 8}, b[] = {300};
    float la[] = {-0.5f, -INFINITY}, tla[] = {-0.25f, -INFINITY}, lb[] = {-2.0f};
    int32_t tb[] = {300};
    float tlb[] = {-2.0f};
    vllm_stream_chunk c1 = chunk(0, "t7t8", a, la, 2, VLLM_FINISH_NONE, NULL, 3, 2);
    c1.top_logprob_ids = ta, c1.top_logprobs = tla, c1.num_top_logprobs = 1;
    vllm_stream_chunk c2 = chunk(0, "\xc3\xa9", b, lb, 1, VLLM_FINISH_LENGTH, NULL, 3, 3);
    c2.top_logprob_ids = tb, c2.top_logprobs = tlb, c2.num_top_logprobs = 1;
    CHECK_OK(oai_response_add(res, 0, &c1));
    CHECK_OK(oai_response_add(res, 0, &c2));
    char *body = body_of(res);
    CHECK_STR(body, "{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":100,\"model\":\"m\",\"choices\":[{\"index\":0,"
                    "\"text\":\"t7t8\xc3\xa9\",\"logprobs\":{\"text_offset\":[0,2,4],\"token_logprobs\":[-0.5,-9999.0,-2.0],"
                    "\"tokens\":[\"t7\",\"t8\",\"\xc3\xa9\"],\"top_logprobs\":[{\"t7\":-0.5,\"t9\":-0.25},{\"t8\":-9999.0},"
                    "{\"\xc3\xa9\":-2.0}]},\"finish_reason\":\"length\",\"stop_reason\":null,\"prompt_logprobs\":null}],"
                    "\"usage\":{\"prompt_tokens\":3,\"total_tokens\":6,\"completion_tokens\":3}}");
    free(body);
    oai_response_free(res);

    /* streaming: text_offset continues from the characters already sent */
    oai_request_free(req);
    req = parse(false, "{\"prompt\":\"ab\",\"logprobs\":0,\"stream\":true}");
    if (!req) return;
    res = respond(req, "cmpl-2");
    vllm_stream_chunk d1 = chunk(0, "\xc3\xa9", b, lb, 1, VLLM_FINISH_NONE, NULL, 3, 1);
    vllm_stream_chunk d2 = chunk(0, "t7", a, la, 1, VLLM_FINISH_NONE, NULL, 3, 2);
    char *s1 = sse_of(res, 0, &d1), *s2 = sse_of(res, 0, &d2);
    CHECK_STR(s1, "data: {\"id\":\"cmpl-2\",\"object\":\"text_completion\",\"created\":100,\"model\":\"m\",\"choices\":[{\"index\":0,"
                  "\"text\":\"\xc3\xa9\",\"logprobs\":{\"text_offset\":[0],\"token_logprobs\":[-2.0],\"tokens\":[\"\xc3\xa9\"],"
                  "\"top_logprobs\":[{\"\xc3\xa9\":-2.0}]},\"finish_reason\":null,\"stop_reason\":null}]}\n\n");
    CHECK_STR(s2, "data: {\"id\":\"cmpl-2\",\"object\":\"text_completion\",\"created\":100,\"model\":\"m\",\"choices\":[{\"index\":0,"
                  "\"text\":\"t7\",\"logprobs\":{\"text_offset\":[1],\"token_logprobs\":[-0.5],\"tokens\":[\"t7\"],"
                  "\"top_logprobs\":[{\"t7\":-0.5}]},\"finish_reason\":null,\"stop_reason\":null}]}\n\n");
    free(s1), free(s2);
    oai_response_free(res);
    oai_request_free(req);

    /* a later chunk without top logprobs: only the sampled token in its dict */
    req = parse(false, "{\"prompt\":\"ab\",\"logprobs\":1}");
    if (!req) return;
    res = respond(req, "cmpl-4");
    vllm_stream_chunk f1 = chunk(0, "t7", a, la, 1, VLLM_FINISH_NONE, NULL, 3, 1);
    f1.top_logprob_ids = ta, f1.top_logprobs = tla, f1.num_top_logprobs = 1;
    vllm_stream_chunk f2 = chunk(0, "t9", ta, tla, 1, VLLM_FINISH_LENGTH, NULL, 3, 2);
    CHECK_OK(oai_response_add(res, 0, &f1));
    CHECK_OK(oai_response_add(res, 0, &f2));
    body = body_of(res);
    CHECK(body && strstr(body, "\"top_logprobs\":[{\"t7\":-0.5,\"t9\":-0.25},{\"t9\":-0.25}]"));
    free(body);
    oai_response_free(res);
    oai_request_free(req);

    /* no token_str callback: tokens shown as token_id:<id> */
    CTX.token_str = NULL;
    req = parse(true, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"logprobs\":true}");
    if (!req) return;
    res = respond(req, "chatcmpl-5");
    CHECK_OK(oai_response_add(res, 0, &f1));
    body = body_of(res);
    CHECK(body && strstr(body, "{\"content\":[{\"token\":\"token_id:7\",\"logprob\":-0.5,\"bytes\":null,\"top_logprobs\":[]}]}"));
    free(body);
    oai_response_free(res);
    oai_request_free(req);
    CTX.token_str = fake_token_str;

    /* return_tokens_as_token_ids */
    req = parse(false, "{\"prompt\":\"ab\",\"logprobs\":0,\"return_tokens_as_token_ids\":true}");
    if (!req) return;
    res = respond(req, "cmpl-3");
    vllm_stream_chunk e1 = chunk(0, "t7", a, la, 1, VLLM_FINISH_LENGTH, NULL, 3, 1);
    CHECK_OK(oai_response_add(res, 0, &e1));
    body = body_of(res);
    CHECK(body && strstr(body, "\"tokens\":[\"token_id:7\"],\"top_logprobs\":[{\"token_id:7\":-0.5}]"));
    free(body);
    oai_response_free(res);
    oai_request_free(req);
}

static void test_completion_echo_and_n(void) {
    /* echo with logprobs: the prompt's tokens first (the first has none) */
    oai_request *req = parse(false, "{\"prompt\":[1,100],\"echo\":true,\"logprobs\":0,\"stream\":true}");
    if (!req) return;
    CHECK(req->prompts[0].text && !strcmp(req->prompts[0].text, "<s>a")); /* decoded for echo */
    oai_response *res = respond(req, "cmpl-1");
    int32_t a[] = {7};
    float la[] = {-0.5f};
    float plp[] = {NAN, -3.0f};
    vllm_stream_chunk c1 = chunk(0, "t7", a, la, 1, VLLM_FINISH_LENGTH, NULL, 2, 1);
    c1.prompt_logprobs = plp;
    char *s1 = sse_of(res, 0, &c1);
    CHECK_STR(s1, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":100,\"model\":\"m\",\"choices\":[{\"index\":0,"
                  "\"text\":\"<s>at7\",\"logprobs\":{\"text_offset\":[0,2,6],\"token_logprobs\":[null,-3.0,-0.5],"
                  "\"tokens\":[\"t1\",\"t100\",\"t7\"],\"top_logprobs\":[null,{\"t100\":-3.0},{\"t7\":-0.5}]},"
                  "\"finish_reason\":\"length\",\"stop_reason\":null}]}\n\n");
    free(s1);
    oai_response_free(res);
    oai_request_free(req);

    /* non-streaming echo: prompt text + output; prompt_logprobs listed */
    req = parse(false, "{\"prompt\":\"a\",\"echo\":true,\"logprobs\":0}");
    if (!req) return;
    res = respond(req, "cmpl-2");
    c1.prompt_tokens = 2;
    CHECK_OK(oai_response_add(res, 0, &c1));
    char *body = body_of(res);
    CHECK_STR(body, "{\"id\":\"cmpl-2\",\"object\":\"text_completion\",\"created\":100,\"model\":\"m\",\"choices\":[{\"index\":0,"
                    "\"text\":\"at7\",\"logprobs\":{\"text_offset\":[0,2,6],\"token_logprobs\":[null,-3.0,-0.5],"
                    "\"tokens\":[\"t1\",\"t100\",\"t7\"],\"top_logprobs\":[null,{\"t100\":-3.0},{\"t7\":-0.5}]},"
                    "\"finish_reason\":\"length\",\"stop_reason\":null,\"prompt_logprobs\":[null,{\"100\":{\"logprob\":-3.0,"
                    "\"rank\":null,\"decoded_token\":\"t100\"}}]}],\"usage\":{\"prompt_tokens\":2,\"total_tokens\":3,"
                    "\"completion_tokens\":1}}");
    free(body);
    oai_response_free(res);
    oai_request_free(req);

    /* echo with max_tokens 0: the prompt alone */
    req = parse(false, "{\"prompt\":\"a\",\"echo\":true,\"max_tokens\":0}");
    if (!req) return;
    res = respond(req, "cmpl-3");
    CHECK_OK(oai_response_add(res, 0, &c1));
    body = body_of(res);
    CHECK(body && strstr(body, "\"text\":\"a\",\"logprobs\":null,\"finish_reason\":\"length\""));
    free(body);
    oai_response_free(res);
    oai_request_free(req);

    /* two prompts x n=2: choice index = prompt * n + sample */
    req = parse(false, "{\"prompt\":[\"a\",\"b\"],\"n\":2,\"stream\":true}");
    if (!req) return;
    res = respond(req, "cmpl-4");
    vllm_stream_chunk d = chunk(1, "q", a, la, 1, VLLM_FINISH_NONE, NULL, 2, 1);
    char *s = sse_of(res, 1, &d);
    CHECK(s && strstr(s, "\"choices\":[{\"index\":3,\"text\":\"q\""));
    free(s);
    vllm_stream_chunk bad = chunk(2, "q", a, la, 1, VLLM_FINISH_NONE, NULL, 2, 1);
    s = (char *)1;
    CHECK(oai_response_stream_chunk(res, 0, &bad, &s, NULL) == VLLM_ERR_INVALID_ARG && s == NULL);
    CHECK(oai_response_stream_chunk(res, 2, &d, &s, NULL) == VLLM_ERR_INVALID_ARG);
    oai_response_free(res);
    oai_request_free(req);
}

static void test_chat(void) {
    oai_request *req = parse(true, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true,\"n\":2,"
                                   "\"stream_options\":{\"include_usage\":true}}");
    if (!req) return;
    oai_response *res = respond(req, "chatcmpl-1");
    int32_t a[] = {7}, b[] = {8};
    float la[] = {-0.5f}, lb[] = {-1.0f};
    vllm_stream_chunk c1 = chunk(0, "Hel", a, la, 1, VLLM_FINISH_NONE, NULL, 2, 1);
    vllm_stream_chunk c2 = chunk(0, "lo", b, lb, 1, VLLM_FINISH_STOP, NULL, 2, 2);
    vllm_stream_chunk c3 = chunk(1, "", NULL, NULL, 0, VLLM_FINISH_ABORT, NULL, 2, 0);
    char *s1 = sse_of(res, 0, &c1), *s2 = sse_of(res, 0, &c2), *s3 = sse_of(res, 0, &c3), *e = end_of(res);
    const char *H = "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":100,\"model\":\"m\",\"choices\":";
    char want[2048];
    snprintf(want, sizeof want,
             "%s[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n"
             "%s[{\"index\":1,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n"
             "%s[{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
             H, H, H);
    CHECK_STR(s1, want);
    snprintf(want, sizeof want,
             "%s[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"logprobs\":null,\"finish_reason\":\"stop\",\"stop_reason\":null}]}\n\n",
             H);
    CHECK_STR(s2, want);
    snprintf(want, sizeof want,
             "%s[{\"index\":1,\"delta\":{\"content\":\"\"},\"logprobs\":null,\"finish_reason\":\"abort\",\"stop_reason\":null}]}\n\n",
             H);
    CHECK_STR(s3, want);
    CHECK_STR(e, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":100,\"model\":\"m\",\"choices\":[],"
                 "\"usage\":{\"prompt_tokens\":2,\"total_tokens\":4,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n");
    /* a chunk after the choice finished is dropped */
    char *s4 = sse_of(res, 0, &c2);
    CHECK_STR(s4, "");
    free(s1), free(s2), free(s3), free(s4), free(e);
    oai_response_free(res);
    oai_request_free(req);

    /* non-streaming with logprobs (top 2): vLLM's top list starts with the sampled token */
    req = parse(true, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"logprobs\":true,\"top_logprobs\":2}");
    if (!req) return;
    res = respond(req, "chatcmpl-2");
    int32_t t[] = {9, 7, 300, 5};
    float tl[] = {-0.25f, -0.5f, -1.5f, -3.0f};
    int32_t ids[] = {7, 301};
    float lps[] = {-0.5f, -4.0f};
    vllm_stream_chunk c = chunk(0, "t7\xe2", ids, lps, 2, VLLM_FINISH_LENGTH, NULL, 2, 2);
    c.top_logprob_ids = t, c.top_logprobs = tl, c.num_top_logprobs = 2;
    CHECK_OK(oai_response_add(res, 0, &c));
    char *body = body_of(res);
    CHECK_STR(body,
              "{\"id\":\"chatcmpl-2\",\"object\":\"chat.completion\",\"created\":100,\"model\":\"m\",\"choices\":[{\"index\":0,"
              "\"message\":{\"role\":\"assistant\",\"content\":\"t7\xef\xbf\xbd\",\"refusal\":null,\"annotations\":null,"
              "\"audio\":null,\"function_call\":null,\"reasoning\":null},\"logprobs\":{\"content\":[{\"token\":\"t7\","
              "\"logprob\":-0.5,\"bytes\":[116,55],\"top_logprobs\":[{\"token\":\"t7\",\"logprob\":-0.5,\"bytes\":[116,55]},"
              "{\"token\":\"t9\",\"logprob\":-0.25,\"bytes\":[116,57]}]},{\"token\":\"\xef\xbf\xbd\",\"logprob\":-4.0,"
              "\"bytes\":[239,191,189],\"top_logprobs\":[{\"token\":\"\xef\xbf\xbd\",\"logprob\":-4.0,\"bytes\":[239,191,189]},"
              "{\"token\":\"\xc3\xa9\",\"logprob\":-1.5,\"bytes\":[195,169]}]}]},\"finish_reason\":\"length\","
              "\"stop_reason\":null}],\"usage\":{\"prompt_tokens\":2,\"total_tokens\":4,\"completion_tokens\":2},"
              "\"prompt_logprobs\":null}");
    free(body);
    oai_response_free(res);
    oai_request_free(req);

    /* echo of a continued assistant message; cached tokens with prompt tokens details on */
    CTX.enable_prompt_tokens_details = true;
    req = parse(true, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"Once\"}],"
                      "\"continue_final_message\":true,\"echo\":true}");
    if (!req) return;
    res = respond(req, "chatcmpl-3");
    vllm_stream_chunk d = chunk(0, " upon", a, la, 1, VLLM_FINISH_LENGTH, NULL, 6, 1);
    d.cached_prompt_tokens = 4;
    CHECK_OK(oai_response_add(res, 0, &d));
    body = body_of(res);
    CHECK(body && strstr(body, "\"content\":\"Once upon\""));
    CHECK(body && strstr(body, "\"usage\":{\"prompt_tokens\":6,\"total_tokens\":7,\"completion_tokens\":1,"
                               "\"prompt_tokens_details\":{\"cached_tokens\":4}}"));
    free(body);
    oai_response_free(res);
    /* streaming echo: role chunk, then the echoed content */
    oai_request_free(req);
    req = parse(true, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"Once\"}],"
                      "\"continue_final_message\":true,\"echo\":true,\"stream\":true}");
    if (!req) return;
    res = respond(req, "chatcmpl-4");
    char *s = sse_of(res, 0, &d);
    snprintf(want, sizeof want,
             "data: {\"id\":\"chatcmpl-4\",\"object\":\"chat.completion.chunk\",\"created\":100,\"model\":\"m\",\"choices\":"
             "[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n"
             "data: {\"id\":\"chatcmpl-4\",\"object\":\"chat.completion.chunk\",\"created\":100,\"model\":\"m\",\"choices\":"
             "[{\"index\":0,\"delta\":{\"content\":\"Once\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n"
             "data: {\"id\":\"chatcmpl-4\",\"object\":\"chat.completion.chunk\",\"created\":100,\"model\":\"m\",\"choices\":"
             "[{\"index\":0,\"delta\":{\"content\":\" upon\"},\"logprobs\":null,\"finish_reason\":\"length\","
             "\"stop_reason\":null}]}\n\n");
    CHECK_STR(s, want);
    free(s);
    oai_response_free(res);
    oai_request_free(req);
    CTX.enable_prompt_tokens_details = false;
}

static void test_engine_error(void) {
    oai_request *req = parse(true, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true,"
                                   "\"stream_options\":{\"include_usage\":true}}");
    if (!req) return;
    oai_response *res = respond(req, "chatcmpl-1");
    vllm_stream_chunk c = chunk(0, "", NULL, NULL, 0, VLLM_FINISH_ABORT, NULL, 2, 0);
    c.error = (char *)"backend failed";
    char *s = sse_of(res, 0, &c), *e = end_of(res);
    CHECK_STR(s, "data: {\"error\":{\"message\":\"backend failed\",\"type\":\"InternalServerError\",\"param\":null,"
                 "\"code\":500}}\n\n");
    CHECK_STR(e, "data: [DONE]\n\n"); /* no usage chunk after an error */
    free(s), free(e);
    oai_response_free(res);
    oai_request_free(req);

    req = parse(false, "{\"prompt\":\"a\"}");
    if (!req) return;
    res = respond(req, "cmpl-1");
    CHECK_OK(oai_response_add(res, 0, &c));
    char *body = (char *)1;
    oai_error err = {0};
    CHECK(oai_response_body(res, &body, NULL, &err) == VLLM_ERR_BACKEND && body == NULL);
    CHECK(err.status == 500 && !strcmp(err.message, "backend failed") && !strcmp(err.type, "InternalServerError"));
    oai_response_free(res);
    oai_request_free(req);
}

static void test_ids(void) {
    oai_request *req = parse(false, "{\"prompt\":\"a\"}");
    oai_request *chat = parse(true, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"request_id\":\"abc\"}");
    if (!req || !chat) return;
    oai_response *r1 = NULL, *r2 = NULL, *r3 = NULL;
    CHECK_OK(oai_response_create(&CTX, req, NULL, &r1));
    CHECK_OK(oai_response_create(&CTX, req, NULL, &r2));
    CHECK_OK(oai_response_create(&CTX, chat, NULL, &r3));
    const char *i1 = oai_response_id(r1), *i2 = oai_response_id(r2);
    CHECK(i1 && strlen(i1) == 5 + 32 && !strncmp(i1, "cmpl-", 5) && strcmp(i1, i2) != 0);
    for (size_t i = 5; i1 && i < strlen(i1); i++) CHECK((i1[i] >= '0' && i1[i] <= '9') || (i1[i] >= 'a' && i1[i] <= 'f'));
    CHECK_STR(oai_response_id(r3), "chatcmpl-abc");
    /* created defaults to now */
    int32_t a[] = {7};
    float la[] = {-0.5f};
    vllm_stream_chunk c = chunk(0, "x", a, la, 1, VLLM_FINISH_STOP, NULL, 2, 1);
    CHECK_OK(oai_response_add(r1, 0, &c));
    char *body = body_of(r1);
    CHECK(body && strstr(body, "\"created\":1") && !strstr(body, "\"created\":100,"));
    free(body);
    oai_response_free(r1), oai_response_free(r2), oai_response_free(r3);
    oai_request_free(req), oai_request_free(chat);
}

/* Requests that share a request_id (or ids that differ past 159 bytes) get
 * the client's id back unchanged and distinct engine ids (issue 19, item 3). */
static void test_engine_ids(void) {
    char body[600], id_a[260], id_b[260];
    memset(id_a, 'x', 255), memset(id_b, 'x', 255);
    id_a[255] = 'A', id_b[255] = 'B', id_a[256] = id_b[256] = 0;
    snprintf(body, sizeof body, "{\"prompt\":[\"a\",\"b\"],\"request_id\":\"dup\"}");
    oai_request *q1 = parse(false, body), *q2 = parse(false, body);
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"request_id\":\"%s\"}", id_a);
    oai_request *la = parse(true, body);
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"request_id\":\"%s\"}", id_b);
    oai_request *lb = parse(true, body);
    if (!q1 || !q2 || !la || !lb) goto out;
    oai_response *r1 = NULL, *r2 = NULL, *ra = NULL, *rb = NULL;
    CHECK_OK(oai_response_create(&CTX, q1, NULL, &r1));
    CHECK_OK(oai_response_create(&CTX, q2, NULL, &r2));
    CHECK_OK(oai_response_create(&CTX, la, NULL, &ra));
    CHECK_OK(oai_response_create(&CTX, lb, NULL, &rb));
    /* what the client sees: its id, unchanged */
    CHECK_STR(oai_response_id(r1), "cmpl-dup");
    CHECK_STR(oai_response_id(r2), "cmpl-dup");
    CHECK(!strncmp(oai_response_id(ra), "chatcmpl-", 9) && !strcmp(oai_response_id(ra) + 9, id_a));
    CHECK(!strncmp(oai_response_id(rb), "chatcmpl-", 9) && !strcmp(oai_response_id(rb) + 9, id_b));
    /* what the engine sees: "<response id>-<prompt>-<serial>", all different, nothing cut */
    char *e[6] = {oai_response_engine_id(r1, 0), oai_response_engine_id(r1, 1), oai_response_engine_id(r2, 0),
                  oai_response_engine_id(r2, 1), oai_response_engine_id(ra, 0), oai_response_engine_id(rb, 0)};
    for (int i = 0; i < 6; i++) {
        CHECK(e[i] != NULL);
        for (int k = 0; k < i; k++) CHECK_MSG(e[i] && e[k] && strcmp(e[i], e[k]), "engine ids %d and %d: %s", k, i, e[i] ? e[i] : "");
    }
    CHECK(e[0] && !strncmp(e[0], "cmpl-dup-0-", 11) && e[1] && !strncmp(e[1], "cmpl-dup-1-", 11));
    CHECK(e[4] && !strncmp(e[4], oai_response_id(ra), strlen(oai_response_id(ra))) &&
          !strncmp(e[4] + strlen(oai_response_id(ra)), "-0-", 3));
    CHECK(e[5] && strstr(e[5], id_b));
    for (int i = 0; i < 6; i++) free(e[i]);
    oai_response_free(r1), oai_response_free(r2), oai_response_free(ra), oai_response_free(rb);
out:
    oai_request_free(q1), oai_request_free(q2), oai_request_free(la), oai_request_free(lb);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define SANITIZED 1
#endif
#endif

#if defined(__GLIBC__) && !defined(SANITIZED)
/* The process's resident memory in bytes (0 when unknown). */
static size_t rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, resident = 0;
    if (!f) return 0;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    fclose(f);
    return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}
#endif

/* A large non-streamed reply (logprobs 20: millions of small JSON blocks) gives
 * its memory back to the system once freed (issue 19, item 4). */
static void test_large_reply_memory(void) {
#if defined(__GLIBC__) && !defined(SANITIZED)
    CTX.max_model_len = 40000;
    oai_request *req = parse(false, "{\"prompt\":\"a\",\"max_tokens\":30000,\"logprobs\":20}");
    CTX.max_model_len = 64;
    if (!req) return;
    oai_response *res = respond(req, "cmpl-big");
    int32_t top_ids[20];
    float top_lps[20];
    for (int j = 0; j < 20; j++) top_ids[j] = 10 + j, top_lps[j] = -1.0f - (float)j;
    for (int t = 0; t < 30000; t++) {
        int32_t id = 10 + t % 400;
        float lp = -0.25f;
        vllm_stream_chunk c = chunk(0, "w", &id, &lp, 1, t == 29999 ? VLLM_FINISH_LENGTH : VLLM_FINISH_NONE, NULL, 2,
                                    (size_t)t + 1);
        c.top_logprob_ids = top_ids, c.top_logprobs = top_lps, c.num_top_logprobs = 20;
        if (oai_response_add(res, 0, &c) != VLLM_OK) break;
    }
    size_t before = rss_bytes();
    char *body = body_of(res); /* builds (and frees) a JSON tree of ~100 MB */
    size_t built = rss_bytes();
    oai_response_free(res);
    size_t after = rss_bytes();
    size_t len = body ? strlen(body) : 0;
    /* the tree's pages went back: what stays is about the body text */
    CHECK_MSG(built > before && after < before + len + (built - before) / 4,
              "RSS %zu MB before the body, %zu MB with it, %zu MB after freeing the reply (body %zu MB)", before >> 20,
              built >> 20, after >> 20, len >> 20);
    free(body);
    oai_request_free(req);
#endif
}

static void test_errors(void) {
    oai_error e;
    oai_error_set(&e, 400, "temperature", "temperature must be non-negative, got %g.", -1.0);
    char *j = oai_error_json(&e);
    CHECK_STR(j, "{\"error\":{\"message\":\"temperature must be non-negative, got -1.\",\"type\":\"BadRequestError\","
                 "\"param\":\"temperature\",\"code\":400}}");
    free(j);
    char *s = oai_error_sse(&e);
    CHECK(s && !strncmp(s, "data: {\"error\":{", 16) && !strcmp(s + strlen(s) - 4, "}}\n\n"));
    free(s);
    oai_error_set(&e, 404, NULL, "Not Found");
    j = oai_error_json(&e);
    CHECK_STR(j, "{\"error\":{\"message\":\"Not Found\",\"type\":\"NotFoundError\",\"param\":null,\"code\":404}}");
    free(j);
    j = oai_error_unauthorized_json();
    CHECK_STR(j, "{\"error\":{\"message\":\"Unauthorized\",\"type\":\"AuthenticationError\",\"param\":null,\"code\":401}}");
    free(j);
    CHECK_STR(oai_error_type(413), "RequestEntityTooLarge");
    CHECK_STR(oai_error_type(503), "ServiceUnavailableError");
    CHECK_STR(oai_error_type(500), "InternalServerError");
    CHECK_STR(oai_error_type(418), "Error");
    /* engine statuses */
    oai_error_from_status(&e, VLLM_ERR_INVALID_ARG, "min_tokens must be less than or equal to max_tokens=4, got 9.");
    CHECK(e.status == 400 && !strcmp(e.param, "min_tokens") && !strcmp(e.type, "BadRequestError"));
    oai_error_from_status(&e, VLLM_ERR_INVALID_ARG, "token_id(s) [9999] in logit_bias contain out-of-vocab token ids.");
    CHECK(e.status == 400 && !strcmp(e.param, "logit_bias"));
    oai_error_from_status(&e, VLLM_ERR_TOO_LONG, "request r1: prompt of 90 tokens is longer than max_model_len 64");
    CHECK(e.status == 400 && !strcmp(e.param, "input_tokens"));
    oai_error_from_status(&e, VLLM_ERR_NO_MEMORY, "");
    CHECK(e.status == 500 && !strcmp(e.param, "") && e.message[0]);
    oai_error_from_status(&e, VLLM_ERR_NOT_FOUND, "request x not found");
    CHECK(e.status == 404);
    /* long messages are cut on a UTF-8 boundary; invalid UTF-8 in them is repaired */
    char big[3000];
    memset(big, 'a', sizeof big);
    for (size_t i = 1; i + 1 < sizeof big; i += 2) big[i] = '\xc3', big[i + 1] = '\xa9';
    big[sizeof big - 1] = 0;
    oai_error_set(&e, 400, NULL, "%s", big);
    CHECK(strlen(e.message) < sizeof e.message);
    j = oai_error_json(&e);
    CHECK(j && !strstr(j, "\\ufffd") && !strstr(j, "\xef\xbf\xbd"));
    free(j);
    oai_error_set(&e, 400, NULL, "bad \xff byte");
    j = oai_error_json(&e);
    CHECK(j && strstr(j, "bad \xef\xbf\xbd byte"));
    free(j);
}


/* ------------------------------------------------------------------ */
/* Tool calls and reasoning (oai_reply_parse.c)                        */
/* ------------------------------------------------------------------ */

#define TOOLS                                                                                                  \
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get\",\"parameters\":{\"type\":\"object\","    \
    "\"properties\":{\"city\":{\"type\":\"string\"}}}}},{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]"
#define MSGS "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"
#define NAMED "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get\"}}"

/* Tool call ids are random: each "chatcmpl-tool-<32 hex>" becomes "chatcmpl-tool-ID". Returns how many. */
static int mask_ids(char *s) {
    int n = 0;
    for (char *p = s ? strstr(s, "chatcmpl-tool-") : NULL; p; p = strstr(p, "chatcmpl-tool-")) {
        p += 14;
        size_t k = 0;
        while (k < 32 && ((p[k] >= '0' && p[k] <= '9') || (p[k] >= 'a' && p[k] <= 'f'))) k++;
        if (k < 32) continue;
        memcpy(p, "ID", 2);
        memmove(p + 2, p + 32, strlen(p + 32) + 1);
        n++;
    }
    return n;
}

/* The body of a non-streamed chat reply to body whose one choice generated text and ended with f. */
static char *chat_reply(const char *body, const char *text, vllm_finish_reason f) {
    oai_request *req = parse(true, body);
    if (!req) return NULL;
    oai_response *res = respond(req, "chatcmpl-t");
    int32_t ids[] = {7, 8};
    vllm_stream_chunk c = chunk(0, text, ids, NULL, 2, f, NULL, 2, 2);
    CHECK_OK(oai_response_add(res, 0, &c));
    char *out = body_of(res);
    mask_ids(out);
    oai_response_free(res);
    oai_request_free(req);
    return out;
}

/* The choice of a chat reply body, from "message" on. */
static const char *choice_part(const char *body) { return body ? strstr(body, "\"message\":") : NULL; }

/* A streamed chat reply: the SSE of each piece (the last one finishes with f), masked, one string;
 * the role chunk left out. */
static char *chat_stream(const char *body, const char *const *pieces, size_t n, vllm_finish_reason f) {
    oai_request *req = parse(true, body);
    if (!req) return NULL;
    oai_response *res = respond(req, "chatcmpl-s");
    oai_buf all = {0};
    for (size_t i = 0; i < n; i++) {
        int32_t id = 7;
        vllm_stream_chunk c = chunk(0, pieces[i], &id, NULL, 1, i + 1 == n ? f : VLLM_FINISH_NONE, NULL, 2, i + 1);
        char *s = sse_of(res, 0, &c);
        const char *from = s;
        if (i == 0 && s && (from = strstr(s, "\n\n"))) from += 2; /* the role chunk */
        /* one line per event, without the envelope */
        for (const char *e = from ? strstr(from, "\"choices\":[") : NULL; e; e = strstr(e + 1, "\"choices\":[")) {
            const char *end = strstr(e, "}]}\n\n");
            if (!end) break;
            oai_buf_put(&all, e + 11, (size_t)(end - e - 11) + 1);
            oai_buf_puts(&all, "\n");
        }
        free(s);
    }
    char *e = end_of(res);
    CHECK_STR(e, "data: [DONE]\n\n");
    free(e);
    oai_response_free(res);
    oai_request_free(req);
    char *out = oai_buf_take(&all, NULL);
    mask_ids(out);
    return out;
}

#define MSG_HEAD "\"message\":{\"role\":\"assistant\","
#define MSG_NULLS "\"refusal\":null,\"annotations\":null,\"audio\":null,\"function_call\":null,"

static void test_tools_named(void) {
    /* the output is the chosen tool's arguments: one call, content "", finish_reason as the engine's */
    char *b = chat_reply("{" MSGS "," TOOLS "," NAMED "}", "{\"city\": \"Oslo\"}", VLLM_FINISH_STOP);
    CHECK(b && strstr(b, MSG_HEAD "\"content\":\"\"," MSG_NULLS "\"tool_calls\":[{\"id\":\"chatcmpl-tool-ID\","
                         "\"type\":\"function\",\"function\":{\"name\":\"get\",\"arguments\":\"{\\\"city\\\": "
                         "\\\"Oslo\\\"}\"}}],\"reasoning\":null},\"logprobs\":null,\"finish_reason\":\"stop\","));
    free(b);
    /* nothing but blanks: no call (vLLM's _extract_tool_calls), content "" */
    b = chat_reply("{" MSGS "," TOOLS "," NAMED "}", " \n", VLLM_FINISH_LENGTH);
    CHECK_STR(choice_part(b), MSG_HEAD "\"content\":\"\"," MSG_NULLS "\"reasoning\":null},\"logprobs\":null,"
                              "\"finish_reason\":\"length\",\"stop_reason\":null}],\"usage\":{\"prompt_tokens\":2,"
                              "\"total_tokens\":4,\"completion_tokens\":2},\"prompt_logprobs\":null}");
    free(b);
    /* streaming: every piece is an argument fragment of call 0, the first with id, type and name; named
       keeps the engine's finish_reason */
    const char *pieces[] = {"{\"ci", "ty\": \"Oslo\"}", ""};
    char *s = chat_stream("{" MSGS "," TOOLS "," NAMED ",\"stream\":true}", pieces, 3, VLLM_FINISH_STOP);
    CHECK_STR(s, "{\"index\":0,\"delta\":{\"tool_calls\":[{\"id\":\"chatcmpl-tool-ID\",\"type\":\"function\",\"index\":0,"
                 "\"function\":{\"name\":\"get\",\"arguments\":\"{\\\"ci\"}}]},\"logprobs\":null,\"finish_reason\":null}\n"
                 "{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"ty\\\": \\\"Oslo\\\"}\"}}]},"
                 "\"logprobs\":null,\"finish_reason\":null}\n"
                 "{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\"}}]},"
                 "\"logprobs\":null,\"finish_reason\":\"stop\",\"stop_reason\":null}\n");
    free(s);
}

static void test_tools_required(void) {
    /* each element is a call; arguments = json.dumps(parameters, ensure_ascii=False); "tool_calls" on stop */
    const char *out = "[{\"name\": \"get\", \"parameters\": {\"city\":\"Z\\u00fcrich\",\"n\":1.50}},"
                      " {\"name\":\"f\",\"parameters\":null}]";
    char *b = chat_reply("{" MSGS "," TOOLS ",\"tool_choice\":\"required\"}", out, VLLM_FINISH_STOP);
    CHECK(mask_ids(b) == 0);
    CHECK(b && strstr(b, MSG_HEAD "\"content\":\"\"," MSG_NULLS "\"tool_calls\":[{\"id\":\"chatcmpl-tool-ID\","
                         "\"type\":\"function\",\"function\":{\"name\":\"get\",\"arguments\":\"{\\\"city\\\": "
                         "\\\"Z\xc3\xbcrich\\\", \\\"n\\\": 1.5}\"}},{\"id\":\"chatcmpl-tool-ID\",\"type\":\"function\","
                         "\"function\":{\"name\":\"f\",\"arguments\":\"null\"}}],\"reasoning\":null},\"logprobs\":null,"
                         "\"finish_reason\":\"tool_calls\","));
    free(b);
    /* parallel_tool_calls false: the first call only */
    b = chat_reply("{" MSGS "," TOOLS ",\"tool_choice\":\"required\",\"parallel_tool_calls\":false}", out,
                   VLLM_FINISH_STOP);
    CHECK(b && strstr(b, "\"arguments\":\"null\"") == NULL && strstr(b, "\"name\":\"get\""));
    free(b);
    /* cut by max_tokens: not a list of definitions, no calls (vLLM suppresses the ValidationError) */
    b = chat_reply("{" MSGS "," TOOLS ",\"tool_choice\":\"required\"}", "[{\"name\": \"get\", \"param",
                   VLLM_FINISH_LENGTH);
    CHECK(b && strstr(b, MSG_HEAD "\"content\":\"\"," MSG_NULLS "\"reasoning\":null},\"logprobs\":null,"
                         "\"finish_reason\":\"length\","));
    free(b);
    /* streaming: a call is announced once its name is complete and its parameters started; later
       fragments carry "name": null; two calls in one delta; "tool_calls" at the end */
    const char *pieces[] = {"[{\"name\": \"g", "et\", \"parameters\": {\"ci", "ty\": \"Os",
                            "lo\"}}, {\"name\": \"f\", \"parameters\": {}}]", ""};
    char *s = chat_stream("{" MSGS "," TOOLS ",\"tool_choice\":\"required\",\"stream\":true}", pieces, 5,
                          VLLM_FINISH_STOP);
    CHECK_STR(s, "{\"index\":0,\"delta\":{\"tool_calls\":[{\"id\":\"chatcmpl-tool-ID\",\"type\":\"function\",\"index\":0,"
                 "\"function\":{\"name\":\"get\",\"arguments\":\"{\\\"ci\"}}]},\"logprobs\":null,\"finish_reason\":null}\n"
                 "{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":null,\"arguments\":"
                 "\"ty\\\": \\\"Os\"}}]},\"logprobs\":null,\"finish_reason\":null}\n"
                 "{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":null,\"arguments\":"
                 "\"lo\\\"}\"}},{\"id\":\"chatcmpl-tool-ID\",\"type\":\"function\",\"index\":1,\"function\":{\"name\":"
                 "\"f\",\"arguments\":\"{}\"}}]},\"logprobs\":null,\"finish_reason\":null}\n"
                 "{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"tool_calls\",\"stop_reason\":null}\n");
    free(s);
    /* the same cut by max_tokens: finish_reason "length" */
    s = chat_stream("{" MSGS "," TOOLS ",\"tool_choice\":\"required\",\"stream\":true}", pieces, 3, VLLM_FINISH_LENGTH);
    CHECK(s && strstr(s, "\"finish_reason\":\"length\""));
    free(s);
}

static void test_tools_auto(void) {
    CTX.enable_auto_tool_choice = true;
    CTX.tool_call_parser = "hermes";
    const char *text = "Hi <tool_call>{\"name\": \"get\", \"arguments\": {\"city\": \"Oslo\"}}</tool_call>";
    char *b = chat_reply("{" MSGS "," TOOLS "}", text, VLLM_FINISH_STOP);
    CHECK(b && strstr(b, MSG_HEAD "\"content\":\"Hi \"," MSG_NULLS "\"tool_calls\":[{\"id\":\"chatcmpl-tool-ID\","
                         "\"type\":\"function\",\"function\":{\"name\":\"get\",\"arguments\":\"{\\\"city\\\": "
                         "\\\"Oslo\\\"}\"}}],\"reasoning\":null},\"logprobs\":null,\"finish_reason\":\"tool_calls\","));
    free(b);
    /* a call alone: content null; no call: the text as content and the engine's reason */
    b = chat_reply("{" MSGS "," TOOLS "}", text + 3, VLLM_FINISH_LENGTH);
    CHECK(b && strstr(b, MSG_HEAD "\"content\":null,") && strstr(b, "\"finish_reason\":\"tool_calls\""));
    free(b);
    b = chat_reply("{" MSGS "," TOOLS "}", "no call", VLLM_FINISH_STOP);
    CHECK(b && strstr(b, MSG_HEAD "\"content\":\"no call\"," MSG_NULLS "\"reasoning\":null},\"logprobs\":null,"
                         "\"finish_reason\":\"stop\","));
    free(b);
    /* tool_choice none: no parsing at all */
    b = chat_reply("{" MSGS "," TOOLS ",\"tool_choice\":\"none\"}", text, VLLM_FINISH_STOP);
    CHECK(b && strstr(b, "\"content\":\"Hi <tool_call>") && !strstr(b, "tool_calls"));
    free(b);
    /* streaming: content up to the tag (a partial tag is held back), then the call */
    const char *pieces[] = {"Hi <tool", "_call>{\"name\": \"get\", \"arguments\": {\"city\"", ": \"Oslo\"}}</tool_call>", ""};
    char *s = chat_stream("{" MSGS "," TOOLS ",\"stream\":true}", pieces, 4, VLLM_FINISH_STOP);
    CHECK_STR(s, "{\"index\":0,\"delta\":{\"content\":\"Hi \"},\"logprobs\":null,\"finish_reason\":null}\n"
                 "{\"index\":0,\"delta\":{\"tool_calls\":[{\"id\":\"chatcmpl-tool-ID\",\"type\":\"function\",\"index\":0,"
                 "\"function\":{\"name\":\"get\",\"arguments\":\"{\\\"city\\\"\"}}]},\"logprobs\":null,"
                 "\"finish_reason\":null}\n"
                 "{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\": \\\"Oslo\\\"}\"}}]},"
                 "\"logprobs\":null,\"finish_reason\":null}\n"
                 "{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"tool_calls\",\"stop_reason\":null}\n");
    free(s);
    /* no call in the stream: the held-back text is flushed as content at the end */
    const char *plain[] = {"a <tool", ""};
    s = chat_stream("{" MSGS "," TOOLS ",\"stream\":true}", plain, 2, VLLM_FINISH_STOP);
    CHECK_STR(s, "{\"index\":0,\"delta\":{\"content\":\"a \"},\"logprobs\":null,\"finish_reason\":null}\n"
                 "{\"index\":0,\"delta\":{\"content\":\"<tool\"},\"logprobs\":null,\"finish_reason\":\"stop\","
                 "\"stop_reason\":null}\n");
    free(s);
    CTX.enable_auto_tool_choice = false;
    CTX.tool_call_parser = NULL;
}

static void test_reasoning(void) {
    CTX.reasoning_parser = "qwen3";
    char *b = chat_reply("{" MSGS "}", "<think>hmm</think>Hello", VLLM_FINISH_STOP);
    CHECK(b && strstr(b, MSG_HEAD "\"content\":\"Hello\"," MSG_NULLS "\"reasoning\":\"hmm\"},"));
    free(b);
    /* include_reasoning false: no reasoning, and no logprobs either (vLLM's suppress_metadata) */
    b = chat_reply("{" MSGS ",\"include_reasoning\":false,\"logprobs\":true}", "<think>hmm</think>Hello",
                   VLLM_FINISH_STOP);
    CHECK(b && strstr(b, "\"content\":\"Hello\"," MSG_NULLS "\"reasoning\":null},\"logprobs\":null,"));
    free(b);
    /* reasoning, then the named tool's arguments */
    b = chat_reply("{" MSGS "," TOOLS "," NAMED "}", "<think>x</think>{\"a\": 1}", VLLM_FINISH_STOP);
    CHECK(b && strstr(b, MSG_HEAD "\"content\":\"\"," MSG_NULLS "\"tool_calls\":[{\"id\":\"chatcmpl-tool-ID\","
                         "\"type\":\"function\",\"function\":{\"name\":\"get\",\"arguments\":\"{\\\"a\\\": 1}\"}}],"
                         "\"reasoning\":\"x\"},"));
    free(b);
    /* streaming: reasoning deltas, then content */
    const char *pieces[] = {"<think>hm", "m</thi", "nk>Hel", "lo"};
    char *s = chat_stream("{" MSGS ",\"stream\":true}", pieces, 4, VLLM_FINISH_STOP);
    CHECK_STR(s, "{\"index\":0,\"delta\":{\"reasoning\":\"hm\"},\"logprobs\":null,\"finish_reason\":null}\n"
                 "{\"index\":0,\"delta\":{\"reasoning\":\"m\"},\"logprobs\":null,\"finish_reason\":null}\n"
                 "{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"logprobs\":null,\"finish_reason\":null}\n"
                 "{\"index\":0,\"delta\":{\"content\":\"lo\"},\"logprobs\":null,\"finish_reason\":\"stop\","
                 "\"stop_reason\":null}\n");
    free(s);
    /* include_reasoning false: the reasoning deltas are not sent */
    s = chat_stream("{" MSGS ",\"stream\":true,\"include_reasoning\":false}", pieces, 4, VLLM_FINISH_STOP);
    CHECK_STR(s, "{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"logprobs\":null,\"finish_reason\":null}\n"
                 "{\"index\":0,\"delta\":{\"content\":\"lo\"},\"logprobs\":null,\"finish_reason\":\"stop\","
                 "\"stop_reason\":null}\n");
    free(s);
    /* reasoning then a named call: the tool stage starts when the reasoning ends */
    const char *named[] = {"<think>x</th", "ink>{\"a\"", ": 1}"};
    s = chat_stream("{" MSGS "," TOOLS "," NAMED ",\"stream\":true}", named, 3, VLLM_FINISH_STOP);
    CHECK_STR(s, "{\"index\":0,\"delta\":{\"reasoning\":\"x\"},\"logprobs\":null,\"finish_reason\":null}\n"
                 "{\"index\":0,\"delta\":{\"tool_calls\":[{\"id\":\"chatcmpl-tool-ID\",\"type\":\"function\",\"index\":0,"
                 "\"function\":{\"name\":\"get\",\"arguments\":\"{\\\"a\\\"\"}}]},\"logprobs\":null,\"finish_reason\":null}\n"
                 "{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\": 1}\"}}]},"
                 "\"logprobs\":null,\"finish_reason\":\"stop\",\"stop_reason\":null}\n");
    free(s);
    /* reasoning then auto tool calls (hermes) */
    CTX.enable_auto_tool_choice = true;
    CTX.tool_call_parser = "hermes";
    b = chat_reply("{" MSGS "," TOOLS "}",
                   "<think>r</think>ok<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", VLLM_FINISH_STOP);
    CHECK(b && strstr(b, MSG_HEAD "\"content\":\"ok\"," MSG_NULLS "\"tool_calls\":[{\"id\":\"chatcmpl-tool-ID\","
                         "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}],\"reasoning\":\"r\"},"
                         "\"logprobs\":null,\"finish_reason\":\"tool_calls\","));
    free(b);
    const char *mixed[] = {"<think>r</think>o", "k<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>"};
    s = chat_stream("{" MSGS "," TOOLS ",\"stream\":true}", mixed, 2, VLLM_FINISH_STOP);
    CHECK_STR(s, "{\"index\":0,\"delta\":{\"content\":\"o\",\"reasoning\":\"r\"},\"logprobs\":null,\"finish_reason\":null}\n"
                 "{\"index\":0,\"delta\":{\"content\":\"k\",\"tool_calls\":[{\"id\":\"chatcmpl-tool-ID\",\"type\":\"function\","
                 "\"index\":0,\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},\"logprobs\":null,"
                 "\"finish_reason\":\"tool_calls\",\"stop_reason\":null}\n");
    free(s);
    CTX.enable_auto_tool_choice = false;
    CTX.tool_call_parser = NULL;
    CTX.reasoning_parser = NULL;
}

/* What the parsers change in the request: skip_special_tokens (vLLM's adjust_request), and the errors. */
static void test_parser_options(void) {
    CTX.enable_auto_tool_choice = true;
    CTX.tool_call_parser = "hermes";
    oai_request *r = parse(true, "{" MSGS "," TOOLS "}");
    CHECK(r && !r->prompts[0].params.skip_special_tokens);
    oai_request_free(r);
    r = parse(true, "{" MSGS "," TOOLS ",\"tool_choice\":\"required\"}");
    CHECK(r && !r->prompts[0].params.skip_special_tokens);
    oai_request_free(r);
    r = parse(true, "{" MSGS "," TOOLS ",\"tool_choice\":\"none\"}");
    CHECK(r && r->prompts[0].params.skip_special_tokens);
    oai_request_free(r);
    r = parse(true, "{" MSGS "}");
    CHECK(r && r->prompts[0].params.skip_special_tokens);
    oai_request_free(r);
    CTX.tool_call_parser = "llama3_json"; /* its markers are plain text */
    r = parse(true, "{" MSGS "," TOOLS "}");
    CHECK(r && r->prompts[0].params.skip_special_tokens);
    oai_request_free(r);
    /* an unknown parser name (the server refuses it at startup) fails the reply */
    CTX.tool_call_parser = "bogus";
    r = parse(true, "{" MSGS "," TOOLS "}");
    oai_response *res = NULL;
    CHECK(r && oai_response_create(&CTX, r, NULL, &res) == VLLM_ERR_INVALID_ARG && !res);
    oai_request_free(r);
    CTX.enable_auto_tool_choice = false;
    CTX.tool_call_parser = NULL;
    CTX.reasoning_parser = "openai_gptoss"; /* the harmony markers are special tokens */
    r = parse(true, "{" MSGS "}");
    CHECK(r && !r->prompts[0].params.skip_special_tokens);
    oai_request_free(r);
    CTX.reasoning_parser = "qwen3";
    r = parse(true, "{" MSGS ",\"chat_template_kwargs\":{\"enable_thinking\":false}}");
    CHECK(r && r->prompts[0].params.skip_special_tokens && r->chat_template_kwargs &&
          !strcmp(r->chat_template_kwargs, "{\"enable_thinking\":false}"));
    oai_request_free(r);
    CTX.reasoning_parser = NULL;
}

/* Random pieces through every tool mode, with and without a reasoning parser, streamed and not: no crash, no
 * leak (ASan), every event well-formed JSON. */
static void test_tools_random(void) {
    static const char *const frags[] = {"<think>", "</think>", "<tool_call>", "</tool_call>", "{\"name\": \"get\", ",
                                        "\"arguments\": {", "\"parameters\": ", "[", "]", "{", "}", "\"", ", ", "x",
                                        "\xc3\xa9", "\xe2", " ", "\n", "<tool", "</thi", "null", "1.5"};
    const char *modes[] = {"", ",\"tool_choice\":\"required\"", ("," NAMED), ",\"tool_choice\":\"none\""};
    uint64_t x = 88172645463325252ull;
    int bad = 0;
    for (int round = 0; round < 2; round++) {
        CTX.reasoning_parser = round ? "qwen3" : NULL;
        CTX.enable_auto_tool_choice = true;
        CTX.tool_call_parser = "hermes";
        for (size_t m = 0; m < 4; m++) {
            for (int t = 0; t < 40; t++) {
                char body[1024];
                snprintf(body, sizeof body, "{" MSGS "," TOOLS "%s,\"stream\":%s,\"n\":2}", modes[m], t % 2 ? "true" : "false");
                oai_request *req = parse(true, body);
                if (!req) return;
                oai_response *res = respond(req, "chatcmpl-r");
                int pieces = 1 + (int)(t % 9);
                for (int k = 0; k < pieces * 2; k++) {
                    char text[64] = "";
                    for (int f = 0; f < 3; f++) {
                        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                        strcat(text, frags[x % (sizeof frags / sizeof *frags)]);
                    }
                    int32_t id = 7;
                    bool last = k >= pieces * 2 - 2;
                    vllm_stream_chunk c = chunk((size_t)(k % 2), text, &id, NULL, 1,
                                                last ? (k % 4 ? VLLM_FINISH_STOP : VLLM_FINISH_LENGTH) : VLLM_FINISH_NONE,
                                                NULL, 2, 1);
                    if (!req->stream) {
                        CHECK_OK(oai_response_add(res, 0, &c));
                        continue;
                    }
                    char *sse = sse_of(res, 0, &c);
                    for (char *e = sse ? strstr(sse, "data: ") : NULL; e; e = strstr(e + 1, "data: ")) {
                        char *end = strstr(e, "\n\n");
                        json_t *j = end ? json_loadb(e + 6, (size_t)(end - e - 6), 0, NULL) : NULL;
                        bad += j == NULL;
                        json_decref(j);
                    }
                    free(sse);
                }
                if (!req->stream) {
                    char *b = body_of(res);
                    json_t *j = b ? json_loads(b, 0, NULL) : NULL;
                    bad += j == NULL;
                    json_decref(j);
                    free(b);
                }
                oai_response_free(res);
                oai_request_free(req);
            }
        }
    }
    CHECK_MSG(bad == 0, "%d replies were not JSON", bad);
    CTX.reasoning_parser = NULL;
    CTX.enable_auto_tool_choice = false;
    CTX.tool_call_parser = NULL;
}

int main(void) {
    init_ctx();
    test_completion_body();
    test_completion_stream();
    test_completion_logprobs();
    test_completion_echo_and_n();
    test_chat();
    test_engine_error();
    test_ids();
    test_engine_ids();
    test_large_reply_memory();
    test_errors();
    test_tools_named();
    test_tools_required();
    test_tools_auto();
    test_reasoning();
    test_parser_options();
    test_tools_random();
    TEST_END();
}
