/*
 * tool_parser.h: vLLM's --tool-call-parser parsers (tool calls out of generated text), one-shot and streaming.
 *
 * What it is: the text-level port of the vLLM modules in vllm/tool_parsers/ for the
 * chat endpoint's tool_choice "auto": a generated text (or the stream of its
 * pieces) -> the content the client sees plus the tool calls, each with an id,
 * a function name and its arguments as a JSON *string*, in the shapes
 * vLLM's ExtractedToolCallInformation / DeltaMessage carry.
 *
 * Parsers (--tool-call-parser names; each file cites the vLLM source it follows):
 *   hermes       Hermes 2 Pro / 3, Qwen2.5, Qwen3:  <tool_call>{"name": .., "arguments": {..}}</tool_call>
 *   qwen3_coder  Qwen3-Coder: <tool_call><function=NAME><parameter=P>VALUE</parameter></function></tool_call>,
 *   qwen3_xml    values typed by the request's tool schemas (qwen3_xml: its own conversion rules)
 *   llama3_json  Llama 3.x / 4 ("llama4_json" is the same parser): [<|python_tag|>]{"name":..,"parameters":{..}}; ...
 *   mistral      [TOOL_CALLS][{"name":..,"arguments":{..}}, ..]  (tokenizer < v11) or [TOOL_CALLS]name{..} (v11+)
 *   deepseek_v3  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{..}\n```<｜tool▁call▁end｜>
 *   openai       gpt-oss harmony: <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{..}<|call|>,
 *                analysis -> reasoning, final (and commentary without recipient) -> content
 *   deepseek_v31 DeepSeek-V3.1 / V3.2: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{..}<｜tool▁call▁end｜>
 *   kimi_k2      Kimi-K2: <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{..}
 *                <|tool_call_end|>; the call id is the model's "functions.NAME:IDX"
 *
 * Non-streaming (toolp_extract): as vLLM's extract_tool_calls. Arguments are
 * re-serialised as vLLM does where vLLM does (json.dumps(obj, ensure_ascii=False):
 * ", " and ": " separators, non-ASCII kept, Python's float repr and big integers;
 * gpt-oss: json.dumps with ensure_ascii=True) and kept raw where vLLM keeps
 * them raw (mistral v11, deepseek_v3). Malformed output (bad JSON, a missing
 * name, ...) -> tools_called false and the whole text as content, as vLLM.
 *
 * Streaming (toolp_stream_*): a per-choice state fed each new piece of text in
 * order (pieces may split a tag or a UTF-8 character anywhere); each push
 * returns what to send now: content, and tool-call deltas in OpenAI's
 * incremental shape (first delta of a call: index, id, type "function",
 * function.name and arguments "" or the first fragment; later deltas: index +
 * function.arguments fragment). Text that could be the start of a tag is
 * held back; toolp_stream_finish flushes it. Every fragment handed out is
 * whole UTF-8 (an incomplete trailing sequence waits for the next push).
 * For well-formed output the concatenated argument fragments of a call equal
 * the non-streaming arguments string (tests/server/test_tool_parser.c checks
 * this at every split point); where vLLM's own streaming emits the raw text
 * (hermes, mistral < v11, gpt-oss) this module re-serialises as the
 * non-streaming path does, so both agree.
 * Known disagreements (vLLM has them too, or they need output that cannot be
 * unsent): duplicate keys in a JSON arguments object (Python keeps the last
 * value at the first key's place); output that turns malformed after a call
 * was announced; llama3_json text that does not start with "{" or
 * <|python_tag|> streams as content (vLLM's streaming rule) while the
 * non-streaming path finds calls anywhere. When a stream ends without having
 * announced any call, the text it withheld is flushed as content, so content
 * then matches the non-streaming result.
 *
 * Work is linear in the text: each byte is looked at a bounded number of
 * times. Held-back input is at most the longest tag (under 32 bytes); what
 * a parser keeps besides: a qwen3 parameter value until it ends (its type
 * conversion needs all of it), a function / parameter / DeepSeek header name
 * until its end marker, and, until the first call is announced, the text
 * after the first tag (the content to flush if no call ever comes).
 *
 * Wiring (serving_chat.py): with a reasoning parser, feed the tool parser only
 * the content the reasoning parser returns (reasoning_parser.h); with the
 * openai parser feed the raw text and take reasoning from its deltas.
 * hermes, mistral, kimi_k2 and openai need the special tokens in the text (vLLM's
 * adjust_request sets skip_special_tokens=False for hermes, mistral and kimi_k2; the
 * harmony markers are special tokens): see toolp_needs_special_tokens.
 * Typical use:
 *   toolp_parser *tp; toolp_parser_new("hermes", &(toolp_options){.tools = tools_json}, &tp);
 *   non-streaming: toolp_result r; toolp_extract(tp, text, len, &r);
 *                  message.content = r.content (NULL -> null); message.tool_calls = toolp_result_tool_calls_json(&r);
 *                  finish_reason "tool_calls" when r.tools_called; toolp_result_clear(&r);
 *   streaming:     toolp_stream *s; toolp_stream_new(tp, &s);
 *                  per piece: toolp_delta d; toolp_stream_push(s, piece, n, &d);
 *                             delta.content = d.content (when non-NULL); delta.tool_calls = toolp_delta_tool_calls_json(&d);
 *                  at the end: toolp_stream_finish(s, &d) (send it too); finish_reason "tool_calls" when
 *                  toolp_stream_num_calls(s) > 0; toolp_stream_free(s);
 *   toolp_parser_free(tp);
 *
 * Threads: a parser is read-only after creation and may be shared by the
 * streams of one request on any threads; one stream is used by one thread at
 * a time. Errors: VLLM_ERR_INVALID_ARG (unknown name, bad use) and
 * VLLM_ERR_NO_MEMORY, with vt_error's message.
 */
#ifndef VLLM_SERVER_TOOL_PARSER_H
#define VLLM_SERVER_TOOL_PARSER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "vllm.h"

typedef enum toolp_kind {
    TOOLP_HERMES = 0,
    TOOLP_QWEN3_CODER,
    TOOLP_QWEN3_XML,
    TOOLP_LLAMA3_JSON,
    TOOLP_MISTRAL,
    TOOLP_DEEPSEEK_V3,
    TOOLP_OPENAI,
    TOOLP_DEEPSEEK_V31,
    TOOLP_KIMI_K2,
    TOOLP_NUM_KINDS
} toolp_kind;

/* The parser registered under name ("hermes", "qwen3_coder", "qwen3_xml",
 * "llama3_json", "llama4_json", "mistral", "deepseek_v3", "openai", "deepseek_v31", "kimi_k2"); false
 * when no parser has that name. */
bool toolp_kind_from_name(const char *name, toolp_kind *out);
/* The canonical name of a kind ("hermes", ...). */
const char *toolp_kind_name(toolp_kind kind);
/* The accepted names, NULL-terminated (for --help and error messages). */
const char *const *toolp_names(void);

typedef struct toolp_options {
    /* The request's "tools" array (OpenAI's [{"type":"function","function":{"name",
     * "parameters"}}]); NULL (or JSON null) when absent. qwen3_coder / qwen3_xml convert parameter
     * values by these schemas. The parser keeps a reference (json_incref). */
    const json_t *tools;
    /* mistral: the tokenizer version that decides the call format: < 11
     * "[TOOL_CALLS] [{...}]", >= 11 "[TOOL_CALLS]name{...}"; 0 = decide from the
     * output (the first non-blank character after [TOOL_CALLS] is '['). vLLM
     * uses the pre-v11 form for every non-mistral_common tokenizer. */
    int mistral_version;
} toolp_options;

/* Per-request configuration (kind + tools); opaque and read-only once made. */
typedef struct toolp_parser toolp_parser;

/* name: a --tool-call-parser name (toolp_kind_from_name); opt may be NULL. */
vllm_status toolp_parser_new(const char *name, const toolp_options *opt, toolp_parser **out);
void toolp_parser_free(toolp_parser *p);
toolp_kind toolp_parser_kind(const toolp_parser *p);
/* True when the parser needs the special tokens kept in the decoded text
 * (skip_special_tokens=False): hermes, mistral and kimi_k2 (vLLM's adjust_request),
 * openai (the harmony markers; vLLM parses its token ids instead). */
bool toolp_needs_special_tokens(const toolp_parser *p);
/* The same for a kind (before any parser is made: the request's skip_special_tokens). */
bool toolp_kind_needs_special_tokens(toolp_kind kind);
/* A new tool call id as vLLM's make_tool_call_id: "chatcmpl-tool-" + 32 random hex digits. */
void toolp_make_call_id(char out[48]);

/* ------------------------------------------------------------------ */
/* Non-streaming                                                       */
/* ------------------------------------------------------------------ */

typedef struct toolp_call {
    char *id;        /* "chatcmpl-tool-<32 hex>"; mistral: 9 alphanumerics; kimi_k2: the model's "functions.NAME:IDX" */
    char *name;
    char *arguments; /* a JSON text, as a string for the client */
    size_t arguments_len;
} toolp_call;

typedef struct toolp_result {
    bool tools_called;   /* vLLM's tools_called (finish_reason "tool_calls") */
    char *content;       /* NULL = JSON null */
    size_t content_len;
    char *reasoning;     /* openai only: the analysis channel (NULL = none) */
    size_t reasoning_len;
    toolp_call *calls;
    size_t num_calls;
} toolp_result;

/* text[0..len) (need not be NUL-terminated) -> *out (cleared first; free with
 * toolp_result_clear). Fails only for NO_MEMORY / INVALID_ARG. */
vllm_status toolp_extract(const toolp_parser *p, const char *text, size_t len, toolp_result *out);
void toolp_result_clear(toolp_result *r);
/* [{"id", "type": "function", "function": {"name", "arguments"}}, ...] (vLLM's
 * ToolCall list); NULL when out of memory. Invalid UTF-8 becomes U+FFFD. */
json_t *toolp_result_tool_calls_json(const toolp_result *r);

/* ------------------------------------------------------------------ */
/* Streaming                                                           */
/* ------------------------------------------------------------------ */

typedef struct toolp_stream toolp_stream;

typedef struct toolp_call_delta {
    size_t index;           /* the call's position in this choice (0, 1, ...) */
    const char *id;         /* non-NULL on the call's first delta only (then type is "function") */
    const char *name;       /* non-NULL on the first delta only */
    const char *arguments;  /* the fragment (never NULL; "" on a first delta without one yet) */
    size_t arguments_len;
    bool name_null;         /* a later delta that carries "name": null (tool_choice "required", as vLLM) */
} toolp_call_delta;

/* What to send for one push. Every pointer stays valid until the next push,
 * finish or free of the stream. */
typedef struct toolp_delta {
    const char *content;    /* NULL: no content this time */
    size_t content_len;
    const char *reasoning;  /* openai only; NULL: none */
    size_t reasoning_len;
    const toolp_call_delta *calls;
    size_t num_calls;       /* 0: no tool-call delta this time */
} toolp_delta;

/* The parser must outlive the stream. */
vllm_status toolp_stream_new(const toolp_parser *p, toolp_stream **out);
void toolp_stream_free(toolp_stream *s);
/* Feeds the next piece of generated text; *out says what to send now (all
 * fields empty when nothing). After finish: VLLM_ERR_INVALID_ARG. */
vllm_status toolp_stream_push(toolp_stream *s, const char *piece, size_t len, toolp_delta *out);
/* End of generation: flushes everything held back. */
vllm_status toolp_stream_finish(toolp_stream *s, toolp_delta *out);
/* Calls announced so far (finish_reason "tool_calls" when > 0). */
size_t toolp_stream_num_calls(const toolp_stream *s);
/* Call i's name / every argument byte streamed so far (NULL when i is out of range). */
const char *toolp_stream_call_name(const toolp_stream *s, size_t i);
const char *toolp_stream_call_arguments(const toolp_stream *s, size_t i, size_t *len);
/* delta's tool calls as OpenAI's delta.tool_calls: first delta {"id", "type":
 * "function", "index", "function": {"name", "arguments"}}, later {"index",
 * "function": {"arguments"}} ({"name": null, "arguments"} when name_null) (vLLM's
 * DeltaToolCall field order); NULL when the delta has no call or out of memory. */
json_t *toolp_delta_tool_calls_json(const toolp_delta *d);

/* ------------------------------------------------------------------ */
/* tool_choice "required" (tool_parser_required.c)                     */
/* ------------------------------------------------------------------ */

/* The output forced by tool_choice "required" (a JSON array of {"name", "parameters"} objects) read back
 * without any --tool-call-parser, as vLLM does (tool_parser_required.c cites it).
 * Non-streaming: text -> *out (cleared first): one call per element, arguments = json.dumps(parameters,
 * ensure_ascii=False) ("null" when absent or null), ids "chatcmpl-tool-<32 hex>", content NULL; text that is
 * not a list of {name: str, description?: str | null, parameters?: object | null, ...} -> no calls at all
 * (pydantic's ValidationError, which vLLM suppresses). tools_called: at least one call. */
vllm_status toolp_required_extract(const char *text, size_t len, toolp_result *out);

/* Streaming: each push returns the tool-call deltas to send now (content and reasoning are never set):
 * a call is announced (index = its position in the array, id, name, the arguments so far) once its name
 * string is complete and its parameters value has started; later deltas carry argument fragments with
 * name_null set. The fragments of a call join to toolp_required_extract's arguments string. Pointers stay
 * valid until the next push, finish or free. */
typedef struct toolp_required_stream toolp_required_stream;
vllm_status toolp_required_stream_new(toolp_required_stream **out);
void toolp_required_stream_free(toolp_required_stream *s);
vllm_status toolp_required_stream_push(toolp_required_stream *s, const char *piece, size_t len, toolp_delta *out);
/* End of generation: ends a number the text stopped in and flushes what was held back. */
vllm_status toolp_required_stream_finish(toolp_required_stream *s, toolp_delta *out);
/* Calls announced so far. */
size_t toolp_required_stream_num_calls(const toolp_required_stream *s);

#endif
