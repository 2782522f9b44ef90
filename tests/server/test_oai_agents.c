/*
 * test_oai_agents.c: the Responses and Anthropic Messages APIs without HTTP: their bodies translated into chat
 * prompts (input items, instructions, previous_response_id through the store, function calls and outputs,
 * reasoning items; Anthropic system / tool_use / tool_result / thinking blocks), their 400 / 404 answers, the
 * reply objects (reasoning, message, function_call items; thinking, text, tool_use blocks; status and stop
 * reasons) and the streamed events (order, sequence numbers, the deltas rebuilding the final object with the
 * same ids), count_tokens, Anthropic's error shape, and the bounded store (LRU eviction, delete).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/oai_fake_tok.h"
#include "server/oai_internal.h"
#include "server/oai_protocol.h"
#include "server/responses_store.h"
#include "test.h"

static const char *SERVED[] = {"m"};
static oai_server_ctx CTX;

/* Shows each message's role, content, tool calls, tool_call_id and reasoning. */
static const char TEMPLATE[] =
    "{% for m in messages %}<{{ m.role }}>{% if m.content %}{{ m.content }}{% endif %}"
    "{% if m.tool_calls %}{% for t in m.tool_calls %}[call {{ t.id }} {{ t.function.name }} {{ t.function.arguments | tojson }}]"
    "{% endfor %}{% endif %}{% if m.tool_call_id %}(for {{ m.tool_call_id }}){% endif %}"
    "{% if m.reasoning %}{think {{ m.reasoning }}}{% endif %}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}";

static void init_ctx(void) {
    CTX = (oai_server_ctx){
        .served_model_names = SERVED,
        .num_served_model_names = 1,
        .max_model_len = 4096,
        .vocab_size = 512,
        .default_sampling = vllm_sampling_default_params(),
        .chat_template = TEMPLATE,
        .tokenize = fake_tokenize,
        .detokenize = fake_detokenize,
    };
}

#define CHECK_STR(got, want)                                                                         \
    do {                                                                                             \
        const char *g_ = (got), *w_ = (want);                                                        \
        CHECK_MSG(g_ && !strcmp(g_, w_), "\n got: %s\nwant: %s", g_ ? g_ : "(null)", w_);            \
    } while (0)

typedef vllm_status (*parse_fn)(const oai_server_ctx *, const char *, size_t, oai_request **, oai_error *);

/* The rendered prompt of a body (NULL and a failed check when it does not parse). */
static char *prompt_of(parse_fn fn, const char *body) {
    oai_request *r = NULL;
    oai_error err = {0};
    vllm_status st = fn(&CTX, body, strlen(body), &r, &err);
    CHECK_MSG(st == VLLM_OK, "%s: %s", body, err.message);
    char *p = r && r->prompts[0].text ? strdup(r->prompts[0].text) : NULL;
    oai_request_free(r);
    return p;
}

/* A body's error: its status, and param / message fragments. */
static void check_error(parse_fn fn, const char *body, int status, const char *param, const char *msg) {
    oai_request *r = NULL;
    oai_error err = {0};
    vllm_status st = fn(&CTX, body, strlen(body), &r, &err);
    CHECK_MSG(st != VLLM_OK && !r, "%s: accepted", body);
    CHECK_MSG(err.status == status, "%s: status %d, want %d (%s)", body, err.status, status, err.message);
    if (param) CHECK_MSG(!strcmp(err.param, param), "%s: param '%s', want '%s'", body, err.param, param);
    if (msg) CHECK_MSG(strstr(err.message, msg), "%s: message '%s' lacks '%s'", body, err.message, msg);
    oai_request_free(r);
}

/* ---- Responses requests ---- */

static void test_responses_input(void) {
    char *p = prompt_of(oai_parse_responses, "{\"input\":\"Hi\",\"instructions\":\"Be brief\"}");
    CHECK_STR(p, "<system>Be brief<user>Hi<assistant>");
    free(p);
    /* items: messages with parts (joined with "\n", as chat), an assistant output message, a function call merged into it, its output,
       a reasoning item starting a new assistant message */
    p = prompt_of(oai_parse_responses,
                  "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"a\"},"
                  "{\"type\":\"input_text\",\"text\":\"b\"}]},"
                  "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"ok\"}]},"
                  "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"f\",\"arguments\":\"{\\\"x\\\":1}\"},"
                  "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"42\"},"
                  "{\"type\":\"reasoning\",\"content\":[{\"type\":\"reasoning_text\",\"text\":\"hm\"}],\"summary\":[]},"
                  "{\"role\":\"developer\",\"content\":\"d\"}]}");
    CHECK_STR(p, "<user>a\nb<assistant>ok[call c1 f {\"x\": 1}]<tool>42(for c1)<assistant>{think hm}<developer>d<assistant>");
    free(p);
    /* a last assistant message in progress is continued */
    p = prompt_of(oai_parse_responses, "{\"input\":[{\"role\":\"user\",\"content\":\"q\"},{\"type\":\"message\","
                                       "\"role\":\"assistant\",\"status\":\"incomplete\",\"content\":[{\"type\":"
                                       "\"output_text\",\"text\":\"par\"}]}]}");
    CHECK_STR(p, "<user>q<assistant>par");
    free(p);
    /* tools: flat -> nested; non-function tools left out; tool_choice auto without a tool parser renders them */
    oai_request *r = NULL;
    oai_error err;
    const char *body = "{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":{\"type\":"
                       "\"object\"}},{\"type\":\"web_search_preview\"}],\"tool_choice\":{\"type\":\"function\","
                       "\"name\":\"f\"},\"max_output_tokens\":7,\"temperature\":0.5}";
    CHECK_OK(oai_parse_responses(&CTX, body, strlen(body), &r, &err));
    if (r) {
        CHECK(r->api == OAI_API_RESPONSES && r->tool_mode == OAI_TOOLS_NAMED && r->tool_name && !strcmp(r->tool_name, "f"));
        CHECK(r->tools_json && strstr(r->tools_json, "\"function\":{\"name\":\"f\"") && !strstr(r->tools_json, "web_search"));
        CHECK(r->prompts[0].params.max_tokens == 7 && r->prompts[0].params.temperature == 0.5f);
        CHECK(!r->api_store); /* no store in this context */
    }
    oai_request_free(r);
    body = "{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\"}]}";
    CHECK_OK(oai_parse_responses(&CTX, body, strlen(body), &r, &err));
    CHECK(r && r->tool_mode == OAI_TOOLS_NONE);
    oai_request_free(r);
    /* text.format and reasoning.effort */
    body = "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"s\",\"schema\":{\"type\":"
           "\"object\"}}},\"reasoning\":{\"effort\":\"none\"},\"include\":[\"message.output_text.logprobs\"],"
           "\"top_logprobs\":2}";
    CHECK_OK(oai_parse_responses(&CTX, body, strlen(body), &r, &err));
    if (r) {
        CHECK(r->so_json && strstr(r->so_json, "object"));
        CHECK(r->chat_template_kwargs && strstr(r->chat_template_kwargs, "\"enable_thinking\":false"));
        CHECK(r->logprobs == 2);
    }
    oai_request_free(r);
}

static void test_responses_errors(void) {
    check_error(oai_parse_responses, "{}", 400, "input", "Field required");
    check_error(oai_parse_responses, "{\"input\":5}", 400, "input", NULL);
    check_error(oai_parse_responses, "{\"input\":\"x\",\"prompt\":{\"id\":\"p\"}}", 400, "prompt", "not supported");
    check_error(oai_parse_responses, "{\"input\":\"x\",\"background\":true}", 400, "background", NULL);
    check_error(oai_parse_responses, "{\"input\":\"x\",\"background\":true,\"store\":false}", 400, "background",
                "background can only be used when `store` is true");
    check_error(oai_parse_responses, "{\"input\":\"x\",\"tool_choice\":\"required\"}", 400, "tool_choice",
                "must be specified with 'tools'");
    check_error(oai_parse_responses,
                "{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\"}],\"tool_choice\":{\"type\":"
                "\"function\",\"name\":\"g\"}}",
                400, "tool_choice", "not found in 'tools'");
    check_error(oai_parse_responses,
                "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_object\"}},\"structured_outputs\":{\"regex\":\"a\"}}",
                400, "structured_outputs", "Cannot specify both");
    check_error(oai_parse_responses, "{\"input\":\"x\",\"include\":[\"everything\"]}", 400, "include", NULL);
    check_error(oai_parse_responses,
                "{\"input\":[{\"type\":\"reasoning\",\"summary\":[],\"encrypted_content\":\"zz\"}]}", 400, NULL,
                "Encrypted content is not supported.");
    check_error(oai_parse_responses, "{\"input\":[{\"type\":\"item_reference\",\"id\":\"x\"}]}", 400, "input[0]", NULL);
    check_error(oai_parse_responses, "{\"input\":\"x\",\"previous_response_id\":\"resp_nope\"}", 404, "response_id",
                "Response with id 'resp_nope' not found.");
    check_error(oai_parse_responses, "{\"input\":\"x\",\"model\":\"other\"}", 404, "model", NULL);
    check_error(oai_parse_responses, "{\"input\":\"x\",\"max_output_tokens\":0}", 400, "max_output_tokens", NULL);
}

/* ---- the store ---- */

static void test_store(void) {
    /* each entry is about its strings + the entry struct: 3 entries fit in 600 bytes, not 4 */
    responses_store *s = responses_store_new(600);
    CHECK(s != NULL);
    char big[101];
    memset(big, 'x', 100);
    big[100] = 0;
    CHECK_OK(responses_store_put(s, "a", big, "[]"));
    CHECK_OK(responses_store_put(s, "b", big, "[]"));
    CHECK_OK(responses_store_put(s, "c", big, "[]"));
    char *resp = NULL, *msgs = NULL;
    CHECK(responses_store_get(s, "a", &resp, &msgs) && resp && !strcmp(resp, big) && msgs && !strcmp(msgs, "[]"));
    free(resp), free(msgs);
    CHECK_OK(responses_store_put(s, "d", big, "[]")); /* evicts b, the least recently used */
    size_t n, bytes;
    responses_store_stats(s, &n, &bytes);
    CHECK_MSG(bytes <= 600, "store holds %zu bytes", bytes);
    CHECK(!responses_store_get(s, "b", NULL, NULL));
    CHECK(responses_store_get(s, "a", NULL, NULL) && responses_store_get(s, "d", NULL, NULL));
    CHECK(responses_store_delete(s, "a") && !responses_store_delete(s, "a") && !responses_store_get(s, "a", NULL, NULL));
    char huge[700];
    memset(huge, 'y', 699);
    huge[699] = 0;
    CHECK_OK(responses_store_put(s, "h", huge, "[]")); /* larger than the bound: not kept */
    CHECK(!responses_store_get(s, "h", NULL, NULL));
    /* many entries: the table grows, every one is found */
    responses_store_free(s);
    s = responses_store_new(1 << 24);
    char id[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(id, sizeof id, "resp_%d", i);
        CHECK_OK(responses_store_put(s, id, "{}", NULL));
    }
    int found = 0;
    for (int i = 0; i < 5000; i++) snprintf(id, sizeof id, "resp_%d", i), found += responses_store_get(s, id, NULL, NULL);
    CHECK(found == 5000);
    responses_store_free(s);
}

static void test_previous_response(void) {
    CTX.responses_store = responses_store_new(1 << 20);
    CHECK_OK(responses_store_put(
        CTX.responses_store, "resp_1",
        "{\"id\":\"resp_1\",\"output\":[{\"type\":\"reasoning\",\"content\":[{\"text\":\"r\"}]},{\"type\":\"message\","
        "\"content\":[{\"type\":\"output_text\",\"text\":\"A1\"}]},{\"type\":\"function_call\",\"call_id\":\"c9\","
        "\"name\":\"f\",\"arguments\":\"{}\"}]}",
        "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"Q1\"}]"));
    /* the stored conversation without its system message, the previous output (reasoning left out), then input */
    char *p = prompt_of(oai_parse_responses,
                        "{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c9\",\"output\":\"7\"}],"
                        "\"previous_response_id\":\"resp_1\",\"instructions\":\"S2\"}");
    CHECK_STR(p, "<system>S2<user>Q1<assistant>A1[call c9 f {}]<tool>7(for c9)<assistant>");
    free(p);
    oai_request *r = NULL;
    oai_error err;
    const char *body = "{\"input\":\"x\",\"store\":false}";
    CHECK_OK(oai_parse_responses(&CTX, body, strlen(body), &r, &err));
    CHECK(r && !r->api_store);
    oai_request_free(r);
    body = "{\"input\":\"x\"}";
    CHECK_OK(oai_parse_responses(&CTX, body, strlen(body), &r, &err));
    CHECK(r && r->api_store && r->api_messages && json_array_size(r->api_messages) == 1);
    oai_request_free(r);
    /* a conversation grown past what a prompt may hold (--max-tokenize-bytes) is refused, not rendered */
    CTX.max_tokenize_bytes = 64;
    check_error(oai_parse_responses, "{\"input\":\"x\",\"previous_response_id\":\"resp_1\"}", 400,
                "previous_response_id", "start a new conversation");
    CTX.max_tokenize_bytes = 0;
    responses_store_free(CTX.responses_store);
    CTX.responses_store = NULL;
}

/* ---- replies ---- */

static vllm_stream_chunk piece(const char *text, size_t tokens, vllm_finish_reason f, const char *stop) {
    static int32_t ids[64];
    for (size_t i = 0; i < 64; i++) ids[i] = 7;
    vllm_stream_chunk c = {0};
    c.text = (char *)text;
    c.text_len = strlen(text);
    c.token_ids = ids;
    c.num_tokens = tokens;
    c.finish_reason = f;
    c.stop_reason = (char *)stop;
    c.last = f != VLLM_FINISH_NONE;
    return c;
}

/* The non-streamed reply to body whose output was text (ending with f / stop), parsed as JSON. */
static json_t *reply(parse_fn fn, const char *body, const char *text, vllm_finish_reason f, const char *stop) {
    oai_request *r = NULL;
    oai_error err = {0};
    CHECK_MSG(fn(&CTX, body, strlen(body), &r, &err) == VLLM_OK, "%s: %s", body, err.message);
    if (!r) return NULL;
    oai_response *res = NULL;
    CHECK_OK(oai_response_create(&CTX, r, NULL, &res));
    vllm_stream_chunk c = piece(text, 3, f, stop);
    CHECK_OK(oai_response_add(res, 0, &c));
    char *out = NULL;
    size_t len;
    CHECK_OK(oai_response_body(res, &out, &len, &err));
    json_t *j = out ? json_loads(out, 0, NULL) : NULL;
    CHECK_MSG(j != NULL, "not JSON: %s", out ? out : "(null)");
    if (fn == oai_parse_responses) CHECK(oai_response_api_object(res) && !strcmp(oai_response_api_object(res), out));
    free(out);
    oai_response_free(res);
    oai_request_free(r);
    return j;
}

/* The events of a streamed reply to body fed pieces (the last ends with f), as a JSON array of
 * {"event": name, "data": object}. */
static json_t *stream(parse_fn fn, const char *body, const char *const *pieces, size_t n, vllm_finish_reason f) {
    oai_request *r = NULL;
    oai_error err = {0};
    CHECK_MSG(fn(&CTX, body, strlen(body), &r, &err) == VLLM_OK, "%s: %s", body, err.message);
    if (!r) return NULL;
    oai_response *res = NULL;
    CHECK_OK(oai_response_create(&CTX, r, NULL, &res));
    oai_buf all = {0};
    for (size_t i = 0; i <= n; i++) {
        char *sse = NULL;
        size_t len;
        if (i < n) {
            vllm_stream_chunk c = piece(pieces[i], 1, i + 1 == n ? f : VLLM_FINISH_NONE, NULL);
            CHECK_OK(oai_response_stream_chunk(res, 0, &c, &sse, &len));
        } else {
            CHECK_OK(oai_response_stream_end(res, &sse, &len));
        }
        if (sse) oai_buf_puts(&all, sse);
        free(sse);
    }
    json_t *events = json_array();
    char *text = oai_buf_take(&all, NULL);
    for (char *e = text; e && *e;) {
        char *nl = strstr(e, "\n\n");
        CHECK_MSG(nl && !strncmp(e, "event: ", 7), "not an SSE event: %.80s", e);
        if (!nl || strncmp(e, "event: ", 7)) break;
        *nl = 0;
        char *data = strstr(e, "\ndata: ");
        CHECK(data != NULL);
        if (!data) break;
        *data = 0;
        json_t *d = json_loads(data + 7, 0, NULL);
        CHECK_MSG(d != NULL, "event data is not JSON: %s", data + 7);
        CHECK_MSG(!strcmp(json_string_value(json_object_get(d, "type")), e + 7), "event %s has type %s", e + 7,
                  json_string_value(json_object_get(d, "type")));
        json_array_append_new(events, json_pack("{s:s, s:o}", "event", e + 7, "data", d ? d : json_null()));
        e = nl + 2;
    }
    free(text);
    oai_response_free(res);
    oai_request_free(r);
    return events;
}

static const char *ev_name(json_t *events, size_t i) {
    return json_string_value(json_object_get(json_array_get(events, i), "event"));
}
static json_t *ev_data(json_t *events, size_t i) { return json_object_get(json_array_get(events, i), "data"); }

/* Concatenates the "delta" of every event named name. */
static char *deltas(json_t *events, const char *name, const char *key) {
    oai_buf b = {0};
    oai_buf_put(&b, "", 0);
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e) if (!strcmp(ev_name(events, i), name)) {
            json_t *v = json_object_get(json_object_get(e, "data"), key);
            if (json_is_string(v)) oai_buf_puts(&b, json_string_value(v));
        }
    return oai_buf_take(&b, NULL);
}

static void test_responses_reply(void) {
    CTX.reasoning_parser = "qwen3";
    json_t *j = reply(oai_parse_responses, "{\"input\":\"x\"}", "<think>hm</think>Hello", VLLM_FINISH_STOP, NULL);
    json_t *out = json_object_get(j, "output");
    CHECK_STR(json_string_value(json_object_get(j, "object")), "response");
    CHECK(!strncmp(json_string_value(json_object_get(j, "id")), "resp_", 5));
    CHECK_STR(json_string_value(json_object_get(j, "status")), "completed");
    CHECK(json_array_size(out) == 2);
    CHECK_STR(json_string_value(json_object_get(json_array_get(out, 0), "type")), "reasoning");
    CHECK_STR(json_string_value(json_object_get(json_array_get(json_object_get(json_array_get(out, 0), "content"), 0), "text")), "hm");
    CHECK_STR(json_string_value(json_object_get(json_array_get(out, 1), "type")), "message");
    CHECK_STR(json_string_value(json_object_get(json_array_get(json_object_get(json_array_get(out, 1), "content"), 0), "text")), "Hello");
    json_t *u = json_object_get(j, "usage");
    CHECK(json_integer_value(json_object_get(u, "output_tokens")) == 3);
    CHECK(json_integer_value(json_object_get(json_object_get(u, "output_tokens_details"), "reasoning_tokens")) == 2);
    CHECK(json_integer_value(json_object_get(u, "total_tokens")) ==
          json_integer_value(json_object_get(u, "input_tokens")) + 3);
    json_decref(j);
    /* the length limit: incomplete */
    j = reply(oai_parse_responses, "{\"input\":\"x\",\"reasoning\":{\"effort\":\"none\"}}", "Hel", VLLM_FINISH_LENGTH,
              NULL);
    CHECK_STR(json_string_value(json_object_get(j, "status")), "incomplete");
    CHECK_STR(json_string_value(json_object_get(json_object_get(j, "incomplete_details"), "reason")), "max_output_tokens");
    json_decref(j);
    /* a named tool: one function_call item whose arguments are the output */
    const char *tools = "{\"input\":\"x\",\"reasoning\":{\"effort\":\"none\"},\"tools\":[{\"type\":\"function\","
                        "\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":"
                        "\"integer\"}}}}],\"tool_choice\":{\"type\":\"function\",\"name\":\"f\"}%s}";
    char body[512];
    snprintf(body, sizeof body, tools, "");
    j = reply(oai_parse_responses, body, "{\"a\": 1}", VLLM_FINISH_STOP, NULL);
    out = json_object_get(j, "output");
    CHECK(json_array_size(out) == 1);
    json_t *call = json_array_get(out, 0);
    CHECK_STR(json_string_value(json_object_get(call, "type")), "function_call");
    CHECK_STR(json_string_value(json_object_get(call, "name")), "f");
    CHECK_STR(json_string_value(json_object_get(call, "arguments")), "{\"a\": 1}");
    CHECK(!strncmp(json_string_value(json_object_get(call, "call_id")), "chatcmpl-tool-", 14));
    CHECK(!strncmp(json_string_value(json_object_get(call, "id")), "fc_", 3));
    json_decref(j);

    /* streamed: created, in_progress, the reasoning item, the message item, completed */
    const char *pieces[] = {"<think>h", "m</thi", "nk>Hel", "lo"};
    json_t *ev = stream(oai_parse_responses, "{\"input\":\"x\",\"stream\":true}", pieces, 4, VLLM_FINISH_STOP);
    static const char *const want[] = {
        "response.created",           "response.in_progress",        "response.output_item.added",
        "response.content_part.added", "response.reasoning_text.delta", "response.reasoning_text.delta",
        "response.reasoning_text.done", "response.content_part.done",  "response.output_item.done",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.delta", "response.output_text.done",   "response.content_part.done",
        "response.output_item.done",  "response.completed"};
    size_t ne = json_array_size(ev);
    CHECK_MSG(ne == sizeof want / sizeof *want, "%zu events", ne);
    for (size_t i = 0; i < ne && i < sizeof want / sizeof *want; i++) {
        CHECK_STR(ev_name(ev, i), want[i]);
        CHECK(json_integer_value(json_object_get(ev_data(ev, i), "sequence_number")) == (json_int_t)i);
    }
    char *rs = deltas(ev, "response.reasoning_text.delta", "delta"), *tx = deltas(ev, "response.output_text.delta", "delta");
    CHECK_STR(rs, "hm");
    CHECK_STR(tx, "Hello");
    free(rs), free(tx);
    json_t *fin = json_object_get(ev_data(ev, ne - 1), "response");
    out = json_object_get(fin, "output");
    CHECK(json_array_size(out) == 2);
    /* the same ids as streamed */
    CHECK_STR(json_string_value(json_object_get(json_array_get(out, 0), "id")),
              json_string_value(json_object_get(json_object_get(ev_data(ev, 2), "item"), "id")));
    CHECK_STR(json_string_value(json_object_get(json_array_get(out, 1), "id")),
              json_string_value(json_object_get(ev_data(ev, 11), "item_id")));
    CHECK(json_integer_value(json_object_get(ev_data(ev, 11), "output_index")) == 1);
    CHECK_STR(json_string_value(json_object_get(json_array_get(json_object_get(json_array_get(out, 1), "content"), 0), "text")),
              "Hello");
    CHECK(json_is_null(json_object_get(json_object_get(ev_data(ev, 0), "response"), "usage")));
    CHECK(json_integer_value(json_object_get(json_object_get(fin, "usage"), "output_tokens")) == 4);
    json_decref(ev);
    /* a streamed named tool call */
    snprintf(body, sizeof body, tools, ",\"stream\":true");
    const char *args[] = {"{\"a\"", ": 1}"};
    ev = stream(oai_parse_responses, body, args, 2, VLLM_FINISH_STOP);
    ne = json_array_size(ev);
    CHECK(ne >= 6);
    CHECK_STR(ev_name(ev, 2), "response.output_item.added");
    CHECK_STR(json_string_value(json_object_get(json_object_get(ev_data(ev, 2), "item"), "type")), "function_call");
    char *a = deltas(ev, "response.function_call_arguments.delta", "delta");
    CHECK_STR(a, "{\"a\": 1}");
    free(a);
    fin = json_object_get(ev_data(ev, ne - 1), "response");
    CHECK_STR(json_string_value(json_object_get(json_array_get(json_object_get(fin, "output"), 0), "arguments")),
              "{\"a\": 1}");
    json_decref(ev);
    CTX.reasoning_parser = NULL;
}

/* ---- Anthropic ---- */

static void test_messages_request(void) {
    char *p = prompt_of(oai_parse_messages,
                        "{\"model\":\"m\",\"max_tokens\":5,\"system\":[{\"type\":\"text\",\"text\":\"S1\"},{\"type\":"
                        "\"text\",\"text\":\"x-anthropic-billing-header: z\"},{\"type\":\"text\",\"text\":\"S2\"}],"
                        "\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"},{\"role\":\"assistant\",\"content\":"
                        "[{\"type\":\"thinking\",\"thinking\":\"t\",\"signature\":\"s\"},{\"type\":\"text\",\"text\":"
                        "\"let me see\"},{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"w\",\"input\":{\"c\":"
                        "\"P\"}}]},{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\","
                        "\"content\":[{\"type\":\"text\",\"text\":\"20\"},{\"type\":\"text\",\"text\":\"C\"}]},{\"type\":"
                        "\"text\",\"text\":\"thanks\"}]}]}");
    CHECK_STR(p, "<system>S1S2<user>weather?<assistant>let me see[call toolu_1 w {\"c\": \"P\"}]{think t}"
                 "<tool>20\nC(for toolu_1)<user>thanks<assistant>");
    free(p);
    oai_request *r = NULL;
    oai_error err;
    const char *body = "{\"model\":\"m\",\"max_tokens\":9,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                       "\"stop_sequences\":[\"END\"],\"tools\":[{\"name\":\"w\",\"input_schema\":{\"properties\":{}}}],"
                       "\"tool_choice\":{\"type\":\"any\"},\"thinking\":{\"type\":\"disabled\"}}";
    CHECK_OK(oai_parse_messages(&CTX, body, strlen(body), &r, &err));
    if (r) {
        CHECK(r->api == OAI_API_ANTHROPIC && r->tool_mode == OAI_TOOLS_REQUIRED);
        CHECK(r->prompts[0].params.max_tokens == 9 && r->num_stop == 1 && !strcmp(r->stop[0], "END"));
        CHECK(r->tools_json && strstr(r->tools_json, "\"type\":\"object\""));
        CHECK(r->chat_template_kwargs && strstr(r->chat_template_kwargs, "\"enable_thinking\":false"));
    }
    oai_request_free(r);
    check_error(oai_parse_messages, "{\"model\":\"m\",\"messages\":[]}", 400, "max_tokens", "Field required");
    check_error(oai_parse_messages, "{\"model\":\"m\",\"max_tokens\":0,\"messages\":[]}", 400, "max_tokens", "positive");
    check_error(oai_parse_messages, "{\"max_tokens\":3,\"messages\":[]}", 400, "model", "Model is required");
    check_error(oai_parse_messages, "{\"model\":\"zz\",\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                404, "model", NULL);
    check_error(oai_parse_messages,
                "{\"model\":\"m\",\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\","
                "\"source\":{\"type\":\"url\",\"url\":\"http://x\"}}]}]}",
                400, "messages[0].content[0]", "text-only");
    check_error(oai_parse_messages,
                "{\"model\":\"m\",\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{"
                "\"name\":\"w\"}],\"tool_choice\":{\"type\":\"tool\"}}",
                400, "tool_choice", "tool_choice.name is required");
    check_error(oai_parse_messages, "{\"model\":\"m\",\"max_tokens\":3,\"messages\":[{\"role\":\"bot\",\"content\":\"x\"}]}",
                400, "messages[0]", NULL);
    /* count_tokens: the prompt /v1/messages renders, counted */
    char *resp = NULL;
    body = "{\"model\":\"m\",\"system\":\"S\",\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}";
    CHECK_OK(oai_count_tokens_request(&CTX, body, strlen(body), &resp, &err));
    CHECK_STR(resp, "{\"input_tokens\":31}"); /* "<system>S<user>hello<assistant>": 31 bytes, one token each */
    free(resp);
    CHECK(oai_count_tokens_request(&CTX, "{\"messages\":[]}", 15, &resp, &err) != VLLM_OK && err.status == 400);
    /* Anthropic's error shape */
    oai_error e;
    oai_error_set(&e, 404, "model", "no such model");
    char *s = oai_error_anthropic_json(&e);
    CHECK_STR(s, "{\"type\":\"error\",\"error\":{\"type\":\"not_found_error\",\"message\":\"no such model\"}}");
    free(s);
    oai_error_set(&e, 500, NULL, "boom");
    s = oai_error_anthropic_json(&e);
    CHECK(s && strstr(s, "\"api_error\""));
    free(s);
    /* a message quoting the client's bytes: invalid UTF-8 becomes U+FFFD, never a failed reply */
    e.status = 400;
    snprintf(e.message, sizeof e.message, "bad field \xc3");
    s = oai_error_anthropic_json(&e);
    CHECK_STR(s, "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"bad field \xef\xbf\xbd\"}}");
    free(s);
}

static void test_messages_reply(void) {
    CTX.reasoning_parser = "qwen3";
    const char *base = "{\"model\":\"m\",\"max_tokens\":9,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]%s}";
    char body[512];
    snprintf(body, sizeof body, base, "");
    json_t *j = reply(oai_parse_messages, body, "<think>hm</think>Hi", VLLM_FINISH_STOP, NULL);
    CHECK_STR(json_string_value(json_object_get(j, "type")), "message");
    CHECK_STR(json_string_value(json_object_get(j, "role")), "assistant");
    CHECK(!strncmp(json_string_value(json_object_get(j, "id")), "msg_", 4));
    json_t *content = json_object_get(j, "content");
    CHECK(json_array_size(content) == 2);
    CHECK_STR(json_string_value(json_object_get(json_array_get(content, 0), "thinking")), "hm");
    CHECK_STR(json_string_value(json_object_get(json_array_get(content, 1), "text")), "Hi");
    CHECK_STR(json_string_value(json_object_get(j, "stop_reason")), "end_turn");
    CHECK(json_is_null(json_object_get(j, "stop_sequence")));
    CHECK(json_integer_value(json_object_get(json_object_get(j, "usage"), "output_tokens")) == 3);
    json_decref(j);
    j = reply(oai_parse_messages, body, "<think>hm</think>Hi", VLLM_FINISH_LENGTH, NULL);
    CHECK_STR(json_string_value(json_object_get(j, "stop_reason")), "max_tokens");
    json_decref(j);
    j = reply(oai_parse_messages, body, "<think>hm</think>Hi", VLLM_FINISH_STOP, "END");
    CHECK_STR(json_string_value(json_object_get(j, "stop_reason")), "stop_sequence");
    CHECK_STR(json_string_value(json_object_get(j, "stop_sequence")), "END");
    json_decref(j);
    /* a forced tool: a tool_use block with the parsed input */
    snprintf(body, sizeof body, base,
             ",\"thinking\":{\"type\":\"disabled\"},\"tools\":[{\"name\":\"w\",\"input_schema\":{\"type\":\"object\"}}],"
             "\"tool_choice\":{\"type\":\"tool\",\"name\":\"w\"}");
    j = reply(oai_parse_messages, body, "{\"c\": \"P\"}", VLLM_FINISH_STOP, NULL);
    content = json_object_get(j, "content");
    CHECK(json_array_size(content) == 1);
    json_t *tu = json_array_get(content, 0);
    CHECK_STR(json_string_value(json_object_get(tu, "type")), "tool_use");
    CHECK_STR(json_string_value(json_object_get(tu, "name")), "w");
    CHECK_STR(json_string_value(json_object_get(json_object_get(tu, "input"), "c")), "P");
    CHECK_STR(json_string_value(json_object_get(j, "stop_reason")), "tool_use");
    json_decref(j);

    /* streamed: message_start, ping, thinking block, text block, message_delta, message_stop */
    snprintf(body, sizeof body, base, ",\"stream\":true");
    const char *pieces[] = {"<think>h", "m</thi", "nk>H", "i"};
    json_t *ev = stream(oai_parse_messages, body, pieces, 4, VLLM_FINISH_STOP);
    static const char *const want[] = {"message_start",       "ping",          "content_block_start",
                                       "content_block_delta", "content_block_delta", "content_block_stop",
                                       "content_block_start", "content_block_delta", "content_block_delta",
                                       "content_block_stop",  "message_delta", "message_stop"};
    size_t ne = json_array_size(ev);
    CHECK_MSG(ne == sizeof want / sizeof *want, "%zu events", ne);
    for (size_t i = 0; i < ne && i < sizeof want / sizeof *want; i++) CHECK_STR(ev_name(ev, i), want[i]);
    json_t *msg = json_object_get(ev_data(ev, 0), "message");
    CHECK_STR(json_string_value(json_object_get(msg, "role")), "assistant");
    CHECK(json_array_size(json_object_get(msg, "content")) == 0 && json_is_object(json_object_get(msg, "usage")));
    CHECK_STR(json_string_value(json_object_get(json_object_get(ev_data(ev, 2), "content_block"), "type")), "thinking");
    CHECK(json_integer_value(json_object_get(ev_data(ev, 6), "index")) == 1);
    CHECK_STR(json_string_value(json_object_get(json_object_get(ev_data(ev, 7), "delta"), "text")), "H");
    json_t *md = ev_data(ev, ne - 2);
    CHECK_STR(json_string_value(json_object_get(json_object_get(md, "delta"), "stop_reason")), "end_turn");
    CHECK(json_integer_value(json_object_get(json_object_get(md, "usage"), "output_tokens")) == 4);
    json_decref(ev);
    /* a streamed tool call: tool_use block, input_json_delta fragments, stop_reason tool_use */
    snprintf(body, sizeof body, base,
             ",\"stream\":true,\"thinking\":{\"type\":\"disabled\"},\"tools\":[{\"name\":\"w\",\"input_schema\":{}}],"
             "\"tool_choice\":{\"type\":\"tool\",\"name\":\"w\"}");
    const char *args[] = {"{\"c\"", ": 1}"};
    ev = stream(oai_parse_messages, body, args, 2, VLLM_FINISH_STOP);
    ne = json_array_size(ev);
    CHECK(ne >= 6);
    json_t *cb = json_object_get(ev_data(ev, 2), "content_block");
    CHECK_STR(json_string_value(json_object_get(cb, "type")), "tool_use");
    CHECK(json_is_object(json_object_get(cb, "input")) && json_string_value(json_object_get(cb, "id")));
    oai_buf b = {0};
    oai_buf_put(&b, "", 0);
    for (size_t i = 0; i < ne; i++) {
        json_t *d = json_object_get(ev_data(ev, i), "delta");
        const char *pj = json_string_value(json_object_get(d, "partial_json"));
        if (pj) oai_buf_puts(&b, pj);
    }
    CHECK_STR(b.data, "{\"c\": 1}");
    oai_buf_free(&b);
    CHECK_STR(json_string_value(json_object_get(json_object_get(ev_data(ev, ne - 2), "delta"), "stop_reason")), "tool_use");
    json_decref(ev);
    CTX.reasoning_parser = NULL;
}

/* tool_choice required: several calls streamed in pieces cut anywhere (a stream reader that falls behind gets
 * merged chunks): every call's streamed arguments must be whole, in both APIs */
static void test_required_pieces(void) {
    /* six calls: the parser's table of calls grows past its first four while a call is being written (a
       use-after-free before: a call's arguments went to the table's old copy) */
    const char *text = "[{\"name\": \"w\", \"parameters\": {\"u\": \"c\"}}, {\"name\": \"w\", \"parameters\": "
                       "{\"u\": \"f\"}}, {\"name\": \"w\", \"parameters\": {\"u\": \"c\"}}, {\"name\": \"w\", "
                       "\"parameters\": {\"u\": \"f\"}}, {\"name\": \"w\", \"parameters\": {\"u\": \"c\"}}, {\"name\": "
                       "\"w\", \"parameters\": {\"u\": \"f\"}}]";
    const size_t n = strlen(text);
    const char *bodies[2] = {
        "{\"input\":\"x\",\"stream\":true,\"tools\":[{\"type\":\"function\",\"name\":\"w\",\"parameters\":{"
        "\"type\":\"object\",\"properties\":{\"u\":{\"enum\":[\"c\",\"f\"]}}}}],\"tool_choice\":\"required\",\"reasoning\":{\"effort\":\"none\"}}",
        "{\"model\":\"m\",\"max_tokens\":99,\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
        "\"tools\":[{\"name\":\"w\",\"input_schema\":{\"type\":\"object\",\"properties\":{\"u\":{\"enum\":[\"c\","
        "\"f\"]}}}}],\"tool_choice\":{\"type\":\"any\"},\"thinking\":{\"type\":\"disabled\"}}"};
    uint32_t seed = 12345;
    CTX.reasoning_parser = "qwen3"; /* as the server of test_server_agents: thinking off, then the tool stage */
    CTX.enable_auto_tool_choice = true;
    CTX.tool_call_parser = "hermes";
    for (int api = 0; api < 2; api++)
        for (int round = 0; round < 200; round++) {
            /* cut the text into 1 .. 40 pieces at random places */
            char *pieces[41];
            size_t cuts[42], nc = 0;
            cuts[nc++] = 0;
            int np = 1 + (int)((seed = seed * 1103515245u + 12345u) >> 16) % 40;
            for (int i = 1; i < np; i++) cuts[nc++] = ((seed = seed * 1103515245u + 12345u) >> 8) % n;
            cuts[nc++] = n;
            for (size_t i = 1; i < nc; i++)
                for (size_t j = i; j > 0 && cuts[j] < cuts[j - 1]; j--) {
                    size_t t = cuts[j];
                    cuts[j] = cuts[j - 1], cuts[j - 1] = t;
                }
            for (size_t i = 0; i + 1 < nc; i++) pieces[i] = strndup(text + cuts[i], cuts[i + 1] - cuts[i]);
            json_t *ev = stream(api ? oai_parse_messages : oai_parse_responses, bodies[api], (const char *const *)pieces,
                                nc - 1, VLLM_FINISH_STOP);
            for (size_t i = 0; i + 1 < nc; i++) free(pieces[i]);
            /* the arguments of each call, from the deltas */
            oai_buf args[8] = {{0}};
            int calls = 0;
            size_t k;
            json_t *e;
            json_array_foreach(ev, k, e) {
                json_t *d = json_object_get(e, "data");
                const char *name = json_string_value(json_object_get(e, "event"));
                if (api == 0 && !strcmp(name, "response.output_item.added")) calls++;
                if (api == 1 && !strcmp(name, "content_block_start")) calls++;
                const char *frag = api == 0 ? (!strcmp(name, "response.function_call_arguments.delta")
                                                   ? json_string_value(json_object_get(d, "delta"))
                                                   : NULL)
                                            : json_string_value(json_object_get(json_object_get(d, "delta"), "partial_json"));
                if (frag && calls >= 1 && calls <= 8) oai_buf_puts(&args[calls - 1], frag);
            }
            CHECK_MSG(calls == 6, "api %d round %d: %d calls", api, round, calls);
            for (int c = 0; c < 6 && c < calls; c++) {
                const char *a = args[c].data ? args[c].data : "";
                CHECK_MSG(!strcmp(a, c & 1 ? "{\"u\": \"f\"}" : "{\"u\": \"c\"}"), "api %d round %d call %d: %s", api,
                          round, c, a);
            }
            for (int c = 0; c < 8; c++) oai_buf_free(&args[c]);
            json_decref(ev);
        }
    CTX.reasoning_parser = NULL;
    CTX.enable_auto_tool_choice = false;
    CTX.tool_call_parser = NULL;
}

int main(void) {
    init_ctx();
    test_responses_input();
    test_responses_errors();
    test_store();
    test_previous_response();
    test_responses_reply();
    test_messages_request();
    test_messages_reply();
    test_required_pieces();
    TEST_END();
}
