/*
 * oai_internal.h: helpers shared by the oai_*.c files (not used outside
 * src/server/oai_*): a growable string buffer, UTF-8 utilities, compact JSON
 * dumping, random ids and the param guess for engine error messages.
 */
#ifndef VLLM_SERVER_OAI_INTERNAL_H
#define VLLM_SERVER_OAI_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/oai_protocol.h"
#include "server/tool_parser.h"

/* The most logprobs a request may ask for (vLLM's default max_logprobs). */
#define OAI_MAX_LOGPROBS 20
/* vLLM's VLLM_MAX_COMPLETION_PROMPTS default. */
#define OAI_MAX_PROMPTS 1024
/* Choices (prompts x n) one request may ask for: bounds the memory of one reply. */
#define OAI_MAX_CHOICES 16384
/* The largest n (the engine's bound in vllm_sampling_params_validate; vLLM's
 * VLLM_MAX_N_SEQUENCES is 16384, but each sample is an engine request here). */
#define OAI_MAX_N 4096

/* A growable byte buffer; any failed append sets oom and later appends are no-ops. */
typedef struct oai_buf {
    char *data; /* NUL-terminated when non-NULL */
    size_t len;
    size_t cap;
    bool oom;
} oai_buf;

void oai_buf_put(oai_buf *b, const char *s, size_t n);
void oai_buf_puts(oai_buf *b, const char *s);
void oai_buf_free(oai_buf *b);
/* Hands the data over (never NULL unless oom: "" for an empty buffer); the buffer is reset. */
char *oai_buf_take(oai_buf *b, size_t *len);

/* True when s[0..n) is valid UTF-8 (no overlong forms, surrogates or code points past U+10FFFF). */
bool oai_utf8_valid(const char *s, size_t n);
/* Unicode code points in s[0..n) (Python's len() of the decoded string; invalid
 * bytes count one each, as U+FFFD would). */
size_t oai_utf8_chars(const char *s, size_t n);
/* A JSON string of s[0..n); invalid UTF-8 sequences become U+FFFD (Python's
 * errors="replace"). NULL only when out of memory. */
json_t *oai_json_str(const char *s, size_t n);
/* The UTF-8 bytes of s with invalid sequences replaced, as a JSON array of ints
 * (Python's list(s.encode("utf-8", errors="replace"))). */
json_t *oai_json_bytes(const char *s);
/* A float as JSON: -inf (and anything below) -> -9999.0 as vLLM clamps; NaN -> null. */
json_t *oai_json_logprob(float x);

/* Compact JSON text (no spaces, keys in insertion order, floats with 9
 * significant digits: float32 values round-trip). malloc'd; NULL when out of memory. */
char *oai_json_dump(const json_t *j, size_t *len);

/* nhex random lowercase hex digits + NUL into out (out has nhex + 1 bytes). */
void oai_random_hex(char *out, size_t nhex);
/* A number never returned before in this process (1, 2, ...): the
 * server-unique part of engine request ids. */
uint64_t oai_next_serial(void);

/* x as Python's repr(float) writes it (vLLM's messages format floats so):
 * "2.0", "0.1", "2.0000001", "1e-308", "1e+39", "inf", "nan". */
void oai_py_float(double x, char out[32]);

/* The request field an engine / sampler message is about (its earliest
 * known field name), or NULL. */
const char *oai_guess_param(const char *message);

/* ------------------------------------------------------------------ */
/* Typed access to request fields (oai_field.c)                        */
/* ------------------------------------------------------------------ */
/* Each getter leaves *out untouched when the key is absent or JSON null
 * (the field's default), and on a wrong JSON type fills err (400, param =
 * param or key) and returns VLLM_ERR_INVALID_ARG. */

/* "a string", "an integer", "a number", "a boolean", "an array", "an object", "null". */
const char *oai_json_kind(const json_t *v);
/* 400 "<param>: Input should be <want>, got <kind>". */
vllm_status oai_type_error(oai_error *err, const char *param, const char *want, const json_t *v);
/* obj[key], or NULL when absent or null. */
json_t *oai_field(const json_t *obj, const char *key);
vllm_status oai_get_bool(const json_t *obj, const char *key, bool *out, oai_error *err);
/* Integers (and integral reals, as pydantic accepts 5.0) in int64. */
vllm_status oai_get_ll(const json_t *v, const char *param, long long *out, oai_error *err);
vllm_status oai_get_int64(const json_t *obj, const char *key, long long *out, bool *present, oai_error *err);
/* The number as JSON gave it (no narrowing to float: ranges are checked on
 * this value, as vLLM checks the Python float). */
vllm_status oai_get_double(const json_t *obj, const char *key, double *out, bool *present, oai_error *err);
vllm_status oai_get_string(const json_t *obj, const char *key, const char **out, oai_error *err);
/* Parses a request body: must be a JSON object (400 otherwise). */
vllm_status oai_parse_body(const char *body, size_t len, json_t **root, oai_error *err);

/* oai_request.c: a chat request from a chat body in JSON (the Responses and Messages bodies are translated into
 * one), answered in api's format. */
vllm_status oai_parse_chat_body(const oai_server_ctx *ctx, const json_t *chat, oai_api api, oai_request **out,
                                oai_error *err);
/* Another API's body (len bytes) parsed (*root) and translated by fn into a chat body (*chat, a new object fn
 * fills); both owned by the caller on VLLM_OK, both NULL on an error (err filled, never NULL). */
typedef vllm_status (*oai_translate_fn)(const oai_server_ctx *ctx, const json_t *body, json_t *chat, void *arg,
                                        oai_error *err);
vllm_status oai_translate_body(const oai_server_ctx *ctx, const char *body, size_t len, oai_translate_fn fn, void *arg,
                               json_t **root, json_t **chat, oai_error *err);

/* ------------------------------------------------------------------ */
/* Structured outputs (oai_structured.c)                               */
/* ------------------------------------------------------------------ */

/* oai_structured.c: response_format, structured_outputs and the older guided_* fields (vLLM's
 * extract_structured_outputs / StructuredOutputsParams) into r's so_* fields, the constraint checked by compiling
 * it (a 400 naming the problem); then oai_structured_params points sp's structured_outputs at them. */
vllm_status oai_parse_structured(const oai_server_ctx *ctx, const json_t *body, oai_request *r, oai_error *err);
/* chat: tool_choice required / named as a JSON-schema constraint (vLLM's get_json_schema_from_tools), with
 * r->tool_mode, tool_name and tools_json; after oai_chat_render validated tools and tool_choice */
vllm_status oai_parse_tool_choice(const oai_server_ctx *ctx, const json_t *body, oai_request *r, oai_error *err);
/* the constraint compiled once on the request's thread: an invalid schema, regex or grammar is a 400 naming it */
vllm_status oai_check_structured(const oai_request *r, oai_error *err);
void oai_structured_params(const oai_request *r, vllm_sampling_params *sp);

/* ------------------------------------------------------------------ */
/* Chat replies: reasoning and tool calls (oai_reply_parse.c)          */
/* ------------------------------------------------------------------ */

/* The parsers one chat request's reply needs (--reasoning-parser, the tool_choice's tool stage); read-only once
 * made, shared by its choices. *out stays NULL when the reply needs none (no reasoning parser, tool_choice
 * none): the text is the content. Errors: an unknown parser name (INVALID_ARG), NO_MEMORY. */
typedef struct oai_parsers oai_parsers;
vllm_status oai_parsers_new(const oai_server_ctx *ctx, const oai_request *req, oai_parsers **out);
void oai_parsers_free(oai_parsers *p);

/* One choice's message out of its whole text (owned strings; NULL = JSON null). */
typedef struct oai_parsed_message {
    char *content;
    size_t content_len;
    char *reasoning;
    size_t reasoning_len;
    toolp_result calls;      /* calls.num_calls tool calls (with ids) */
    bool auto_tools_called;  /* tool_choice auto found calls: finish_reason "tool_calls" */
} oai_parsed_message;
vllm_status oai_parse_message(const oai_parsers *p, const char *text, size_t len, oai_parsed_message *m);
void oai_parsed_message_clear(oai_parsed_message *m);

/* Streaming: one per choice, fed each piece of its text in order; *delta is the chat.completion.chunk delta
 * to send ({"content"?, "reasoning"?, "tool_calls"?}) or NULL when there is nothing. finishing: the last piece
 * (what the parsers held back is flushed with it). */
typedef struct oai_delta_parser oai_delta_parser;
vllm_status oai_delta_parser_new(const oai_parsers *p, oai_delta_parser **out);
void oai_delta_parser_free(oai_delta_parser *d);
vllm_status oai_delta_parser_push(oai_delta_parser *d, const char *piece, size_t len, bool finishing, json_t **delta);
/* A tool-call delta was produced (vLLM's tools_streamed). */
bool oai_delta_parser_tools_streamed(const oai_delta_parser *d);

/* ------------------------------------------------------------------ */
/* Chat prompts (oai_chat.c)                                           */
/* ------------------------------------------------------------------ */

/* Validates body's messages, tools, tool_choice, chat_template_kwargs,
 * documents, reasoning_effort, add_generation_prompt, continue_final_message
 * and chat_template, and renders the prompt with ctx's template. *prompt:
 * the rendered text; *role: the role of the reply (vLLM's
 * get_chat_request_role); *last_content: the last message's text content
 * and *last_role its role (for echo). All malloc'd. */
vllm_status oai_chat_render(const oai_server_ctx *ctx, const json_t *body, char **prompt, char **role,
                            char **last_content, char **last_role, oai_error *err);

#endif
