/*
 * reasoning_parser.h: vLLM's --reasoning-parser parsers (reasoning vs content of generated text), one-shot and streaming.
 *
 * The text-level port of the vLLM modules in vllm/reasoning/ (each cited in reasoning_parser.c):
 *   qwen3          <think>...</think>; the start tag may be in the prompt (Qwen3.5 templates) or generated
 *                  (older ones); no </think>: all reasoning (truncated) unless chat_template_kwargs
 *                  enable_thinking is false (then all content); a <tool_call> followed by <function=
 *                  also ends reasoning (Qwen3.5 / Qwen3-Coder call without closing </think>)
 *   deepseek_r1    <think>...</think>, the start tag usually in the prompt: everything before </think> is
 *                  reasoning
 *   deepseek_v3    deepseek_r1 when chat_template_kwargs thinking or enable_thinking is true, else no
 *                  reasoning at all (IdentityReasoningParser)
 *   granite        "Here is my thought process:" ... "Here is my response:" ("Here's" too)
 *   openai_gptoss  gpt-oss harmony channels: analysis -> reasoning, the others -> content
 *                  ("gpt_oss" is accepted as a vllm.c alias)
 *
 * Non-streaming (reasoning_extract): vLLM's extract_reasoning -> (reasoning, content), either may be null;
 * a reasoning of "" stays "" where vLLM returns "" (e.g. output starting with </think>).
 * Streaming (reasoning_stream_*): per piece of text (pieces may split a tag or a UTF-8 character anywhere)
 * the reasoning and content to send now; text that may be the start of a tag is held back until it is
 * known, reasoning_stream_finish flushes it. Concatenated, the streamed parts equal the non-streaming
 * result (null read as "") for the outputs these models produce; the exceptions are vLLM's own: text before
 * a generated <think> streams as reasoning (non-streaming drops it), qwen3 with thinking disabled streams
 * everything as content (vLLM routes it so once the prompt ends reasoning), granite output that does not
 * start with its marker streams as content, and an unfinished granite or gpt-oss section.
 * Work is linear: each byte is looked at a bounded number of times. Held back: at most a marker's length
 * (under 32 bytes), except that qwen3 keeps a <tool_call> and the blanks after it until the next non-blank
 * byte shows whether <function follows.
 *
 * Tool parsing after reasoning (serving_chat.py): give the tool parser (tool_parser.h) only the content.
 *
 * Reasoning end (vLLM's is_reasoning_end, which structured outputs use to start constraining only after
 * the reasoning): reasoning_is_end works on text, which must keep the special tokens (decode with
 * skip_special_tokens=False) and may be the prompt, the output so far, or both joined: true when the last
 * reasoning marker in it ends the reasoning (think parsers: a </think> after the last <think>, qwen3 also
 * an unpaired <tool_call> followed by <function=; deepseek_v3 without thinking: always; granite: a
 * response marker; openai_gptoss: "<|channel|>final" with "<|message|>" within 256 bytes after it). It
 * reads the whole text: call it once for the prompt; while streaming use reasoning_stream_ended (the
 * streaming variant, is_reasoning_end_streaming: true from the piece that holds the end on).
 * Usage:
 *   reasoning_parser *rp; reasoning_parser_new("qwen3", chat_template_kwargs_or_NULL, &rp);
 *   bool ended = reasoning_is_end(rp, prompt_text, prompt_len);   (vLLM's prompt_is_reasoning_end)
 *   reasoning_stream *rs; reasoning_stream_new(rp, ended, &rs);
 *   per piece: reasoning_delta d; reasoning_stream_push(rs, piece, n, &d);
 *              send d.reasoning as delta.reasoning, d.content as delta.content (or to the tool parser)
 *   end: reasoning_stream_finish(rs, &d); reasoning_stream_free(rs); reasoning_parser_free(rp);
 * Threads: a parser is read-only once made; a stream is used by one thread at a time.
 */
#ifndef VLLM_SERVER_REASONING_PARSER_H
#define VLLM_SERVER_REASONING_PARSER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "vllm.h"

typedef enum reasoning_kind {
    REASONING_QWEN3 = 0,
    REASONING_DEEPSEEK_R1,
    REASONING_DEEPSEEK_V3,
    REASONING_GRANITE,
    REASONING_GPT_OSS,
    REASONING_NUM_KINDS
} reasoning_kind;

/* "qwen3", "deepseek_r1", "deepseek_v3", "granite", "openai_gptoss" (alias "gpt_oss"). */
bool reasoning_kind_from_name(const char *name, reasoning_kind *out);
const char *reasoning_kind_name(reasoning_kind kind);
/* The accepted names, NULL-terminated. */
const char *const *reasoning_names(void);

typedef struct reasoning_parser reasoning_parser;

/* chat_template_kwargs: the request's object (may be NULL): qwen3 reads enable_thinking (default true),
 * deepseek_v3 thinking / enable_thinking (default false), by Python truthiness. */
vllm_status reasoning_parser_new(const char *name, const json_t *chat_template_kwargs, reasoning_parser **out);
void reasoning_parser_free(reasoning_parser *p);
reasoning_kind reasoning_parser_kind(const reasoning_parser *p);

typedef struct reasoning_result {
    char *reasoning;  /* NULL = null */
    size_t reasoning_len;
    char *content;    /* NULL = null */
    size_t content_len;
} reasoning_result;

/* text[0..len) -> *out (cleared first; free with reasoning_result_clear). */
vllm_status reasoning_extract(const reasoning_parser *p, const char *text, size_t len, reasoning_result *out);
void reasoning_result_clear(reasoning_result *r);

/* vLLM's is_reasoning_end on text (see above); linear in len. */
bool reasoning_is_end(const reasoning_parser *p, const char *text, size_t len);

typedef struct reasoning_stream reasoning_stream;

/* Both pointers stay valid until the next push, finish or free. */
typedef struct reasoning_delta {
    const char *reasoning;  /* NULL: none this time */
    size_t reasoning_len;
    const char *content;    /* NULL: none this time */
    size_t content_len;
} reasoning_delta;

/* prompt_reasoning_ended: reasoning_is_end of the prompt (vLLM then sends everything as content);
 * the parser must outlive the stream. */
vllm_status reasoning_stream_new(const reasoning_parser *p, bool prompt_reasoning_ended, reasoning_stream **out);
void reasoning_stream_free(reasoning_stream *s);
vllm_status reasoning_stream_push(reasoning_stream *s, const char *piece, size_t len, reasoning_delta *out);
vllm_status reasoning_stream_finish(reasoning_stream *s, reasoning_delta *out);
/* The reasoning has ended: every later byte is content (is_reasoning_end_streaming). */
bool reasoning_stream_ended(const reasoning_stream *s);

#endif
