/*
 * oai_protocol.h: the OpenAI / vLLM wire protocol, without HTTP or threads.
 *
 * Owns: parsing and validating request bodies of POST /v1/completions and
 * POST /v1/chat/completions (and /tokenize, /detokenize) into engine inputs
 * (token-id prompts + vllm_sampling_params), the served-model check, and the
 * JSON the server sends back: text_completion / chat.completion objects,
 * streamed chunks as Server-Sent Events, usage, logprobs in both formats,
 * error bodies.
 *
 * Semantics follow vLLM's vllm/entrypoints/openai/ (protocol.py,
 * serving_completion.py, serving_chat.py, serving_engine.py) and OpenAI's API
 * reference; each function cites the part it follows in oai_*.c.
 *
 * Typical use by a handler:
 *   oai_request *req; oai_error err;
 *   if (oai_parse_completion(&ctx, body, len, &req, &err)) -> send err (oai_error_json, err.status)
 *   oai_response *res; oai_response_create(&ctx, req, NULL, &res);
 *   for each prompt i: id_i = oai_response_engine_id(res, i);
 *       vllm_async_add_request(ae, id_i, &req->prompts[i].prompt, &req->prompts[i].params, &s_i)
 *       (a failure there: oai_error_from_status(&err, st, vllm_last_error()))
 *   streaming:     for each chunk c of stream i: oai_response_stream_chunk(res, i, &c, &sse, &n) -> send sse
 *                  then oai_response_stream_end(res, &sse, &n) -> send (usage chunk + "data: [DONE]")
 *   non-streaming: for each chunk c of stream i: oai_response_add(res, i, &c)
 *                  then oai_response_body(res, &json, &n) -> send with status 200
 */
#ifndef VLLM_SERVER_OAI_PROTOCOL_H
#define VLLM_SERVER_OAI_PROTOCOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vllm.h"

/* ------------------------------------------------------------------ */
/* Errors                                                              */
/* ------------------------------------------------------------------ */

/* An error for the client: HTTP status + OpenAI's error object. */
typedef struct oai_error {
    int status;            /* HTTP status: 400, 401, 404, 413, 500, 503, ... */
    char type[40];         /* "BadRequestError", "NotFoundError", ... (vLLM's err_type) */
    char param[64];        /* the offending request field ("" = JSON null) */
    char message[1024];    /* one line, UTF-8 */
} oai_error;

/* Fills e: status, its type (oai_error_type), param (NULL = none) and a
 * printf message (truncated to fit, never cut inside a UTF-8 sequence). */
void oai_error_set(oai_error *e, int status, const char *param, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
/* vLLM's err_type for an HTTP status: 400 BadRequestError, 401
 * AuthenticationError, 403 PermissionDeniedError, 404 NotFoundError, 405
 * MethodNotAllowed, 408 RequestTimeout, 413 RequestEntityTooLarge, 422
 * UnprocessableEntityError, 429 RateLimitError,
 * 500 InternalServerError, 501 NotImplementedError, 503
 * ServiceUnavailableError; others "Error". */
const char *oai_error_type(int status);
/* Maps an engine status (from vllm_async_add_request and friends) to an
 * error: INVALID_ARG / TOO_LONG / UNSUPPORTED / FORMAT -> 400, NOT_FOUND ->
 * 404, NO_MEMORY / BACKEND / INTERNAL / IO -> 500. param is guessed from the
 * message's leading field name when it names a request field. */
void oai_error_from_status(oai_error *e, vllm_status st, const char *message);
/* {"error":{"message":...,"type":...,"param":...|null,"code":<status>}}
 * (vLLM's ErrorResponse); malloc'd, NULL only when out of memory. */
char *oai_error_json(const oai_error *e);
/* The same object as one SSE event, "data: {...}\n\n": what vLLM streams
 * when a request fails mid-stream (send "data: [DONE]\n\n" after it). */
char *oai_error_sse(const oai_error *e);
/* The 401 body for a missing or wrong API key. */
char *oai_error_unauthorized_json(void);

/* ------------------------------------------------------------------ */
/* Server context                                                      */
/* ------------------------------------------------------------------ */

/* What parsing needs from the server, filled once at startup and read-only
 * afterwards (shared by all HTTP threads). All pointers are borrowed. */
typedef struct oai_server_ctx {
    const char *const *served_model_names; /* [0] is the name put in responses */
    size_t num_served_model_names;
    int max_model_len;                    /* vllm_engine_info.max_model_len */
    int vocab_size;                       /* token ids are checked against it */
    vllm_sampling_params default_sampling; /* vllm_async_engine_default_sampling() */
    const char *chat_template;            /* NULL: chat requests are rejected (400) */
    const char *bos_token;                /* for the template; may be NULL */
    const char *eos_token;
    /* Tokenizer access (any thread). tokenize/detokenize may be NULL when the
     * model has no tokenizer: text prompts are then rejected with a 400. */
    void *tok_ctx;
    /* *ids malloc'd (free()), as vllm_async_tokenize */
    vllm_status (*tokenize)(void *tok_ctx, const char *text, bool add_special_tokens, int32_t **ids,
                            size_t *num_ids);
    /* *text malloc'd (free()), as vllm_async_detokenize */
    vllm_status (*detokenize)(void *tok_ctx, const int32_t *ids, size_t num_ids, bool skip_special_tokens,
                              char **text);
    /* One token's text for logprobs (vLLM decodes each id alone). The string
     * must stay valid while the context lives (a table built at startup);
     * NULL or missing callback -> the token is shown as "token_id:<id>".
     * Invalid UTF-8 is replaced by U+FFFD in the JSON. */
    const char *(*token_str)(void *tok_ctx, int32_t id);
    /* /tokenize and /detokenize answer without an API key (as vLLM), so their
     * cost is capped: a /tokenize text (the prompt, or the rendered chat)
     * longer than this many bytes, or a /detokenize of more than this many
     * ids (what a text within the limit can tokenize to), gets a 400 naming
     * the limit. 0 = OAI_DEFAULT_MAX_TOKENIZE_BYTES. (vllmc serve
     * --max-tokenize-bytes.) */
    size_t max_tokenize_bytes;
    /* vLLM's --enable-prompt-tokens-details: usage carries
     * prompt_tokens_details.cached_tokens (prefix-cache hits). */
    bool enable_prompt_tokens_details;
    /* The most token entries one request's reply may hold (its memory bound:
     * a non-streamed reply keeps every token, a stream whose reader falls
     * behind merges them): summed over the prompts, n x (max_tokens x (1 +
     * logprobs) + prompt tokens x (1 + prompt_logprobs) when prompt logprobs
     * are asked), max_tokens being the request's or, when omitted, the rest
     * of the context. More is a 400 naming the fields and the limit.
     * 0 = OAI_DEFAULT_MAX_RESPONSE_ENTRIES; negative = no limit. */
    long long max_response_entries;
    /* Tools and reasoning (vLLM's --enable-auto-tool-choice, --tool-call-parser, --reasoning-parser): tool_choice
     * "auto" (the default with tools) needs both of the first two, else a 400 as vLLM; the parsers split the reply
     * into content, tool_calls and reasoning_content. NULL names: none. */
    bool enable_auto_tool_choice;
    const char *tool_call_parser;
    const char *reasoning_parser;
    /* The Responses API's store (store: true, previous_response_id); NULL: nothing is stored and a
     * previous_response_id is a 404 (vLLM without VLLM_ENABLE_RESPONSES_API_STORE). */
    struct responses_store *responses_store;
} oai_server_ctx;

/* max_response_entries' default: 2^20 entries. Building a non-streamed reply
 * peaks (measured, JSON tree + text) at about 190 bytes per entry with
 * logprobs 20 (200 MB at the limit), 650 with logprobs 0 (the most per
 * entry: 680 MB) and 30 without logprobs (32 MB). */
#define OAI_DEFAULT_MAX_RESPONSE_ENTRIES (1LL << 20)

/* The served-model check (vLLM's _check_model): model NULL or "" is
 * accepted (vLLM allows it); a name not in served_model_names -> 404
 * NotFoundError "The model `x` does not exist." with param "model".
 * oai_parse_* call it; exposed for other endpoints. Returns true if ok. */
bool oai_check_model(const oai_server_ctx *ctx, const char *model, oai_error *err);

/* ------------------------------------------------------------------ */
/* Requests                                                            */
/* ------------------------------------------------------------------ */

typedef enum oai_kind {
    OAI_KIND_COMPLETION = 0,  /* POST /v1/completions */
    OAI_KIND_CHAT = 1,        /* POST /v1/chat/completions */
} oai_kind;

/* Which API a request came in through: the reply's format. Responses and Messages requests are translated
 * into a chat request (kind OAI_KIND_CHAT) and answered in their own formats. */
typedef enum oai_api {
    OAI_API_OPENAI = 0,   /* /v1/completions, /v1/chat/completions */
    OAI_API_RESPONSES,    /* /v1/responses (OpenAI Responses API) */
    OAI_API_ANTHROPIC,    /* /v1/messages (Anthropic Messages API) */
} oai_api;

/* chat tool_choice (vLLM): none, auto (a tool parser finds calls in the text), required (one or more calls, forced
 * as a JSON array of {"name", "parameters"}), named (the output is the named tool's arguments) */
typedef enum oai_tool_mode {
    OAI_TOOLS_NONE = 0,
    OAI_TOOLS_AUTO,
    OAI_TOOLS_REQUIRED,
    OAI_TOOLS_NAMED,
} oai_tool_mode;

/* One prompt, ready for vllm_async_add_request. */
typedef struct oai_prompt {
    vllm_prompt prompt;           /* token ids only (text prompts are tokenized here:
                                     completions with special tokens, chat without, as vLLM) */
    vllm_sampling_params params;  /* the request's params with this prompt's max_tokens resolved
                                     (completions: 16 when absent or null, as vLLM; chat: absent
                                     max_completion_tokens / max_tokens = max_model_len - prompt
                                     length); arrays point into the oai_request */
    char *text;                   /* the prompt text: as given, rendered (chat), or decoded from
                                     ids when echo needs it; else NULL */
} oai_prompt;

/* A parsed, validated request; owns every string and array it points to. */
typedef struct oai_request {
    oai_kind kind;
    char *model;                  /* as sent (NULL when absent) */
    oai_prompt *prompts;          /* (num_prompts) completions: one per prompt; chat: exactly 1 */
    size_t num_prompts;
    int n;                        /* choices per prompt (= params.n) */
    bool stream;
    bool include_usage;           /* stream_options.include_usage: a final usage chunk */
    bool continuous_usage_stats;  /* stream_options.continuous_usage_stats: usage in every chunk */
    bool echo;                    /* completions: prompt text prepended to the output; chat: the last
                                     message's content prepended when its role is assistant */
    int logprobs;                 /* -1 = none; completions: logprobs k; chat: top_logprobs
                                     (0 when logprobs is true without top_logprobs) */
    int prompt_logprobs;          /* -1 = none (also set from logprobs when echo + logprobs) */
    bool echo_only;               /* completions echo with max_tokens 0: the reply is the prompt alone
                                     (the engine still runs 1 token, as vLLM) */
    char *echo_text;              /* chat echo: the content prepended, else NULL */
    char *chat_role;              /* chat: the reply's role ("assistant", or the last message's
                                     role when add_generation_prompt is false) */
    char *request_id;             /* the body's request_id (vLLM extension), else NULL: the
                                     response id is "cmpl-<request_id>" / "chatcmpl-<request_id>" */
    bool return_tokens_as_token_ids; /* logprobs tokens as "token_id:<id>" */
    /* storage behind prompts[i].params arrays (owned) */
    char **stop;
    size_t num_stop;
    char **bad_words;
    size_t num_bad_words;
    int32_t *stop_token_ids;
    size_t num_stop_token_ids;
    int32_t *allowed_token_ids;
    size_t num_allowed_token_ids;
    int32_t *logit_bias_ids;
    float *logit_bias_values;
    size_t num_logit_bias;
    /* structured outputs (response_format, structured_outputs, guided_*): storage behind params.structured_outputs */
    char *so_json, *so_regex, *so_grammar;
    char **so_choice;
    size_t num_so_choice;
    bool so_json_object, so_disable_any_whitespace;
    const char *so_param;         /* the field that set it (for errors); static */
    const char *so_think_start;   /* the reasoning parser's markers: the constraint starts after the reasoning */
    const char *so_think_end;     /* (vllm_structured_outputs.reasoning_start / _end); static, NULL = none */
    /* chat tools: tool_choice, the named tool, the tools as JSON text (for the tool parsers); NULL when none */
    oai_tool_mode tool_mode;
    char *tool_name;
    char *tools_json;
    /* chat, for the reasoning and tool parsers: the body's chat_template_kwargs as JSON text (NULL when
     * absent), include_reasoning (false: no reasoning in the reply, as vLLM) and parallel_tool_calls (false:
     * only the first tool call is returned) */
    char *chat_template_kwargs;
    bool include_reasoning;
    bool parallel_tool_calls;
    /* Responses / Messages: the body as sent (echoed in the reply), the chat messages it became (kept by the
     * Responses store for previous_response_id), and whether the reply is to be stored */
    oai_api api;
    struct json_t *api_body;
    struct json_t *api_messages;
    bool api_store;
} oai_request;

/* Parses and validates a /v1/completions body (len bytes, need not be
 * NUL-terminated), checks the model name, tokenizes text prompts (with
 * special tokens unless add_special_tokens is false), applies
 * truncate_prompt_tokens and checks prompt + max_tokens against
 * max_model_len (400, param "input_tokens", as vLLM). Each prompt's params
 * passed vllm_sampling_params_validate; token ids are checked against
 * vocab_size. Unknown fields are ignored.
 * VLLM_OK and *out, or an error status with err filled (400 / 404 / 500)
 * and *out NULL. */
vllm_status oai_parse_completion(const oai_server_ctx *ctx, const char *body, size_t len, oai_request **out,
                                 oai_error *err);
/* The same for /v1/chat/completions: messages rendered with ctx's chat
 * template (tools, chat_template_kwargs, add_generation_prompt,
 * continue_final_message), tokenized without special tokens unless
 * add_special_tokens is true. */
vllm_status oai_parse_chat(const oai_server_ctx *ctx, const char *body, size_t len, oai_request **out,
                           oai_error *err);
void oai_request_free(oai_request *r);

/* POST /v1/responses: the body's input items, instructions, previous_response_id (looked up in ctx's
 * responses store: unknown -> 404), tools, tool_choice, text.format, reasoning and sampling fields become a chat
 * request (vLLM's responses/protocol.py + utils.py construct_input_messages), parsed as oai_parse_chat. The
 * reply is a Responses object (oai_response_*). */
vllm_status oai_parse_responses(const oai_server_ctx *ctx, const char *body, size_t len, oai_request **out,
                                oai_error *err);
/* POST /v1/messages: an Anthropic Messages body (system, messages with text / tool_use / tool_result / thinking
 * blocks, tools, tool_choice, stop_sequences, max_tokens required) as a chat request (vLLM's anthropic/
 * serving.py _convert_anthropic_to_openai_request). */
vllm_status oai_parse_messages(const oai_server_ctx *ctx, const char *body, size_t len, oai_request **out,
                               oai_error *err);
/* POST /v1/messages/count_tokens: {"input_tokens": N} (malloc'd), the prompt rendered as for /v1/messages. */
vllm_status oai_count_tokens_request(const oai_server_ctx *ctx, const char *body, size_t len, char **resp,
                                     oai_error *err);
/* An error in Anthropic's shape: {"type":"error","error":{"type":"invalid_request_error" | "not_found_error" |
 * "authentication_error" | "permission_error" | "request_too_large" | "rate_limit_error" | "api_error" |
 * "overloaded_error", "message"}} (malloc'd). */
char *oai_error_anthropic_json(const oai_error *e);

/* max_tokenize_bytes' default: 1 MiB of text, a few hundred thousand tokens
 * (more than any context window); tokenizing it takes 0.1 to 1 CPU-second
 * depending on the tokenizer and the text. */
#define OAI_DEFAULT_MAX_TOKENIZE_BYTES ((size_t)1 << 20)

/* POST /tokenize: {"model"?, "prompt": str, "add_special_tokens"?: bool (true)}
 * or {"model"?, "messages": [...], "add_generation_prompt"?, "continue_final_message"?,
 * "add_special_tokens"?: bool (false), "chat_template_kwargs"?, "tools"?};
 * "return_token_strs"?: bool. On success *resp is the response
 * {"count", "max_model_len", "tokens", "token_strs": null|[...]} (malloc'd).
 * Runs the tokenizer on the calling thread (ctx->tokenize); a text over
 * ctx->max_tokenize_bytes is a 400 (param "prompt" or "messages"). */
vllm_status oai_tokenize_request(const oai_server_ctx *ctx, const char *body, size_t len, char **resp,
                                 oai_error *err);
/* POST /detokenize: {"model"?, "tokens": [ids]} -> {"prompt": "..."} (malloc'd).
 * More than ctx->max_tokenize_bytes ids is a 400 (param "tokens"). */
vllm_status oai_detokenize_request(const oai_server_ctx *ctx, const char *body, size_t len, char **resp,
                                   oai_error *err);
/* GET /v1/models: {"object":"list","data":[{"id","object":"model","created","owned_by":"vllm",
 * "root","parent":null,"max_model_len","permission":[...]}]} (malloc'd; created = now). */
char *oai_models_json(const oai_server_ctx *ctx, const char *root);

/* ------------------------------------------------------------------ */
/* Responses                                                           */
/* ------------------------------------------------------------------ */

/* Builds the reply of one request from its streams' chunks: accumulates for
 * the non-streaming body, or formats each chunk as SSE events. One per HTTP
 * request, used by one thread at a time. Choice index of sample s of prompt
 * p is p * n + s (vLLM). Chat replies go through ctx's --reasoning-parser
 * ("reasoning") and the request's tool_choice (auto: ctx's --tool-call-parser;
 * required / named: the forced JSON) into content and tool_calls, as vLLM's
 * serving_chat.py (oai_reply_parse.c). */
typedef struct oai_response oai_response;

typedef struct oai_response_options {
    const char *id;   /* NULL: "cmpl-<32 hex>" / "chatcmpl-<32 hex>" (random) */
    long long created; /* 0: time(NULL) */
} oai_response_options;

/* opt may be NULL. Borrows ctx and req (both must outlive the response).
 * VLLM_ERR_INVALID_ARG also for a parser name ctx does not know (the server
 * checks them at startup: server_check_parsers).
 * Without opt->id the id is "cmpl-"/"chatcmpl-" + the body's request_id when
 * it had one (several requests may share it: engine requests use
 * oai_response_engine_id), else + 32 random hex digits. Freeing a response
 * that held a large reply gives the memory back to the system. */
vllm_status oai_response_create(const oai_server_ctx *ctx, const oai_request *req, const oai_response_options *opt,
                                oai_response **out);
void oai_response_free(oai_response *r);
/* The response id ("cmpl-..." / "chatcmpl-..."): what the client sees, its
 * request_id echoed unchanged when it sent one. */
const char *oai_response_id(const oai_response *r);
/* Responses: the final response object's JSON once the body was built or the stream ended (for the store);
 * NULL before, and for other APIs. Owned by r. */
const char *oai_response_api_object(const oai_response *r);
/* The engine request id of prompt prompt_index: "<response id>-<prompt
 * index>-<serial>", the serial unique in the process (vLLM also appends its
 * own part), so requests that share a request_id never share an engine id.
 * malloc'd; NULL when out of memory. */
char *oai_response_engine_id(const oai_response *r, size_t prompt_index);

/* Non-streaming: records one chunk of prompt prompt_index's stream (text,
 * ids, logprobs, finish/stop reason, usage). A chunk with error set is
 * remembered: oai_response_body then fails with a 500. */
vllm_status oai_response_add(oai_response *r, size_t prompt_index, const vllm_stream_chunk *chunk);
/* Non-streaming: the text_completion / chat.completion JSON (malloc'd). On
 * VLLM_ERR_BACKEND (an engine error was recorded) err holds the 500. */
vllm_status oai_response_body(oai_response *r, char **body, size_t *len, oai_error *err);

/* Streaming: the SSE bytes for one chunk ("data: {...}\n\n" events; may be
 * "" when there is nothing to send), malloc'd. Chat: the first chunk of a
 * choice also emits the {"role":"assistant","content":""} delta; a finishing
 * chunk carries finish_reason (and stop_reason). A chunk with error set
 * yields an error event (the caller then ends the stream). */
vllm_status oai_response_stream_chunk(oai_response *r, size_t prompt_index, const vllm_stream_chunk *chunk,
                                      char **sse, size_t *len);
/* Streaming: after every stream ended: the usage chunk ("choices": []) when
 * include_usage, then "data: [DONE]\n\n" (malloc'd). */
vllm_status oai_response_stream_end(oai_response *r, char **sse, size_t *len);

/* Replies that held at least this many bytes give their memory back to the
 * system once freed. */
#define OAI_TRIM_BYTES ((size_t)16 << 20)
/* After freeing about `bytes` of reply memory (a response, a large streamed
 * chunk): from OAI_TRIM_BYTES on, hands the allocator's free pages back to
 * the system (glibc malloc_trim; a no-op elsewhere): a large reply is
 * millions of small blocks that free() would otherwise keep. */
void oai_release_memory(size_t bytes);

#endif
