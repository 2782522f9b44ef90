/*
 * oai_response_internal.h: the reply builder's state (struct oai_response, one choice, one prompt), shared by
 * oai_response.c (completions and chat) and the other APIs' formats over the same chunks: oai_responses_out.c
 * (OpenAI Responses) and oai_anthropic_out.c (Anthropic Messages). Not used outside src/server/oai_*.
 */
#ifndef VLLM_SERVER_OAI_RESPONSE_INTERNAL_H
#define VLLM_SERVER_OAI_RESPONSE_INTERNAL_H

#include "server/oai_internal.h"

#define NOMEM() (oai_error_set(&r->err, 500, NULL, "out of memory"), VLLM_ERR_NO_MEMORY)

/* The Responses / Messages stream state of a reply (oai_responses_out.c, oai_anthropic_out.c). */
typedef struct api_stream {
    long long seq;          /* Responses: the next sequence_number */
    int open;               /* the open output item / content block: API_NONE, API_TEXT, API_REASONING, API_TOOL */
    size_t index;           /* its output_index / content block index */
    size_t count;           /* items / blocks opened so far */
    long long tool_index;   /* the chat tool_calls index of the open call */
    oai_buf text;           /* the open item's text / arguments so far */
    char item_id[48];       /* the open item's id */
    char *call_id, *name;   /* the open tool call's id and name */
    json_t *items;          /* Responses: the finished output items (for response.completed); Messages: the
                               content blocks' stop reasons are not kept */
    bool started, ended;    /* the opening events were sent / the closing ones */
    bool any_args;          /* Responses: an arguments delta was sent for the open call */
} api_stream;
enum { API_NONE = 0, API_TEXT, API_REASONING, API_TOOL };

/* One choice (one sample of one prompt). */
typedef struct choice {
    /* non-streaming: everything generated */
    oai_buf text;
    int32_t *ids;
    float *lps;
    int32_t *top_ids; /* (num_tokens, k) */
    float *top_lps;
    int k;
    size_t cap;
    /* both */
    size_t num_tokens;  /* tokens generated so far (vLLM previous_num_tokens) */
    size_t text_chars;  /* characters sent so far (vLLM previous_text_lens) */
    bool echoed;        /* the prompt (completions) or last message (chat) was sent */
    bool finished;
    vllm_finish_reason finish;
    char *stop_reason;
    oai_delta_parser *dp; /* streaming with reasoning / tool parsing (oai_reply_parse.c), made at the first chunk */
} choice;

/* Per prompt: usage and the prompt logprobs, which arrive once with sample 0. */
typedef struct prompt_state {
    size_t cached_tokens;
    bool have_cached;
    float *plp;        /* (num_prompt_tokens) */
    int32_t *ptop_ids; /* (num_prompt_tokens, pk) */
    float *ptop;
    int pk;
} prompt_state;

struct oai_response {
    const oai_server_ctx *ctx;
    const oai_request *req;
    char *id;
    uint64_t serial;   /* server-unique: the engine ids' suffix */
    size_t body_bytes; /* about what the last non-streamed body's JSON tree held (freed) */
    long long created;
    const char *model;
    choice *choices;
    size_t num_choices;
    prompt_state *prompts;
    bool started; /* chat: the role chunks were sent */
    bool failed;  /* an engine error was recorded */
    oai_error err;
    oai_parsers *parsers; /* chat: reasoning / tool-call parsing of the reply, NULL when the text is the content */
    bool hide_metadata;   /* include_reasoning false with a parser: no logprobs (vLLM's suppress_metadata) */
    api_stream api;       /* Responses / Messages streaming */
    char *api_object;     /* Responses: the final response object's JSON (oai_response_api_object) */
};

/* What one position has: its token, logprob (none: the first prompt token)
 * and the top-k alternatives. */
typedef struct lp_pos {
    int32_t id;
    bool none;
    float lp;
    const int32_t *top_ids;
    const float *top_lps;
    int k;
} lp_pos;

/* oai_response.c, for the other formats */
choice *oai_choice_of(oai_response *r, size_t prompt_index, const vllm_stream_chunk *c);
vllm_status oai_take_prompt_info(oai_response *r, size_t pi, const vllm_stream_chunk *c);
vllm_status oai_record_finish(oai_response *r, choice *ch, const vllm_stream_chunk *c);
vllm_status oai_engine_error(oai_response *r, const char *msg);
/* chat's logprobs object {"content": [{token, logprob, bytes, top_logprobs}]} */
json_t *oai_chat_logprobs(const oai_response *r, const lp_pos *pos, size_t n, int num_top);
lp_pos *oai_chunk_positions(const vllm_stream_chunk *c, size_t *n);
lp_pos *oai_choice_positions(const oai_response *r, const choice *ch, size_t pi, bool with_prompt, bool with_output,
                             size_t *n);
/* A choice's whole text through the reply's parsers into *m (clear it after); *content: the content (the text
 * itself without parsers). false when parsing failed. */
bool oai_choice_parse(const oai_response *r, const choice *ch, oai_parsed_message *m, const char **content,
                      size_t *content_len);
/* Appends "event: <type>\ndata: <o as JSON>\n\n" (the Responses and Messages streams) and drops o. */
vllm_status oai_sse_named(oai_buf *b, const char *type, json_t *o);
/* The reply's prompt tokens and its prefix-cache hits (cached: 0 when unknown). */
void oai_prompt_usage(const oai_response *r, size_t *prompt_tokens, size_t *cached);

/* oai_responses_out.c: the OpenAI Responses object and its stream events */
json_t *oai_responses_body(oai_response *r);
vllm_status oai_responses_stream_chunk(oai_response *r, choice *ch, const vllm_stream_chunk *c, oai_buf *b);
vllm_status oai_responses_stream_end(oai_response *r, oai_buf *b);
vllm_status oai_responses_stream_error(oai_response *r, oai_buf *b);

/* oai_anthropic_out.c: the Anthropic Messages object and its stream events */
json_t *oai_anthropic_body(oai_response *r);
vllm_status oai_anthropic_stream_chunk(oai_response *r, choice *ch, const vllm_stream_chunk *c, oai_buf *b);
vllm_status oai_anthropic_stream_end(oai_response *r, oai_buf *b);
vllm_status oai_anthropic_stream_error(oai_response *r, oai_buf *b);

#endif
