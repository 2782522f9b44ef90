/*
 * oai_reply_parse.c: a chat reply's text split into reasoning, content and tool calls (the reasoning and tool parsers wired as vLLM's serving_chat.py does), whole or per streamed piece.
 *
 * vLLM sources followed (cited by the commit of the stored copy):
 *  - vllm/entrypoints/openai/chat_completion/serving.py@006c49d4 chat_completion_full_generator and
 *    chat_completion_stream_generator, vllm/parser/abstract_parser.py@00cd9d76 (DelegatingParser.parse /
 *    _extract_tool_calls / parse_delta), and the older serving_chat.py@003fe593 that did the same inline:
 *    the reasoning parser runs first and the tool stage sees only the content; tool_choice
 *      named:    the content is the arguments of one call (id "chatcmpl-tool-<32 hex>", the chosen name);
 *                no call when the content is empty or blank; message content "";
 *      required: the content is a JSON array of {"name", "parameters"} (tool_parser_required.c);
 *                message content "";
 *      auto:     the --tool-call-parser's extract_tool_calls; when it found calls, content = its content
 *                (blank -> null), else the content is kept;
 *    streaming: while the reasoning lasts its deltas go out as reasoning (and any content as content); after
 *    it, the content goes to the tool stage: named streams each piece as an argument fragment of one call
 *    (the first delta with id, type and name; a delta per piece, as vLLM's extract_named_tool_call_streaming),
 *    required announces each array element as it is generated, auto runs the parser's streaming extraction;
 *    the held-back text of both parsers is flushed with the finishing piece.
 *  - include_reasoning false: no reasoning in the reply (a delta left with nothing else is not sent).
 *  - parallel_tool_calls false (vllm/entrypoints/serve/utils/tool_calls_utils.py maybe_filter_parallel_tool_calls):
 *    only the first call (index 0) is returned.
 *  - gpt-oss (--tool-call-parser openai): the tool parser reads the raw harmony text and gives the reasoning
 *    itself (vLLM's harmony path), so no reasoning parser runs before it.
 */
#include <stdlib.h>
#include <string.h>

#include "server/oai_internal.h"
#include "server/reasoning_parser.h"
#include "server/tool_parser.h"

struct oai_parsers {
    const oai_request *req;
    reasoning_parser *rp;        /* --reasoning-parser, NULL when none */
    toolp_parser *tp;            /* tool_choice auto: --tool-call-parser */
    bool openai_tools;           /* tp is gpt-oss's: it splits the reasoning itself */
    bool prompt_reasoning_ended; /* vLLM's reasoning_ended from the prompt (streaming) */
};

vllm_status oai_parsers_new(const oai_server_ctx *ctx, const oai_request *req, oai_parsers **out) {
    *out = NULL;
    bool reasoning = ctx->reasoning_parser && ctx->reasoning_parser[0];
    if (req->kind != OAI_KIND_CHAT || (!reasoning && req->tool_mode == OAI_TOOLS_NONE)) return VLLM_OK;
    oai_parsers *p = calloc(1, sizeof *p);
    if (!p) return VLLM_ERR_NO_MEMORY;
    p->req = req;
    vllm_status st = VLLM_OK;
    if (req->tool_mode == OAI_TOOLS_AUTO) {
        json_t *tools = req->tools_json ? json_loads(req->tools_json, 0, NULL) : NULL;
        st = toolp_parser_new(ctx->tool_call_parser, &(toolp_options){.tools = tools}, &p->tp);
        json_decref(tools);
        p->openai_tools = st == VLLM_OK && toolp_parser_kind(p->tp) == TOOLP_OPENAI;
    }
    if (st == VLLM_OK && reasoning && !p->openai_tools) {
        json_t *kwargs = req->chat_template_kwargs ? json_loads(req->chat_template_kwargs, 0, NULL) : NULL;
        st = reasoning_parser_new(ctx->reasoning_parser, kwargs, &p->rp);
        json_decref(kwargs);
        const char *prompt = req->num_prompts ? req->prompts[0].text : NULL;
        if (st == VLLM_OK && prompt) p->prompt_reasoning_ended = reasoning_is_end(p->rp, prompt, strlen(prompt));
    }
    if (st != VLLM_OK) {
        oai_parsers_free(p);
        return st;
    }
    *out = p;
    return VLLM_OK;
}

void oai_parsers_free(oai_parsers *p) {
    if (!p) return;
    reasoning_parser_free(p->rp);
    toolp_parser_free(p->tp);
    free(p);
}

/* Python's `not s.strip()` for the ASCII whitespace a model emits. */
static bool blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strchr(" \t\n\r\v\f", s[i]) || !s[i]) return false;
    return true;
}

static bool set_str(char **dst, size_t *dlen, const char *s, size_t n) {
    free(*dst);
    *dst = NULL, *dlen = 0;
    if (!s) return true;
    if (!(*dst = malloc(n + 1))) return false;
    memcpy(*dst, s, n);
    (*dst)[n] = 0;
    *dlen = n;
    return true;
}

/* ------------------------------------------------------------------ */
/* Non-streaming                                                       */
/* ------------------------------------------------------------------ */

void oai_parsed_message_clear(oai_parsed_message *m) {
    if (!m) return;
    free(m->content);
    free(m->reasoning);
    toolp_result_clear(&m->calls);
    *m = (oai_parsed_message){0};
}

/* tool_choice named: one call whose arguments are the content. */
static vllm_status named_call(const oai_request *q, const char *content, size_t n, toolp_result *out) {
    *out = (toolp_result){0};
    if (!content || blank(content, n)) return VLLM_OK;
    toolp_call *c = calloc(1, sizeof *c);
    char id[48];
    toolp_make_call_id(id);
    if (c) {
        out->calls = c, out->num_calls = 1;
        c->id = strdup(id);
        c->name = strdup(q->tool_name ? q->tool_name : "");
        set_str(&c->arguments, &c->arguments_len, content, n);
    }
    out->tools_called = true;
    if (!c || !c->id || !c->name || !c->arguments) {
        toolp_result_clear(out);
        return VLLM_ERR_NO_MEMORY;
    }
    return VLLM_OK;
}

/* tool_choice auto: the parser's calls; content = its content (blank -> null) when it found any. */
static vllm_status auto_calls(const oai_parsers *p, oai_parsed_message *m) {
    toolp_result r;
    vllm_status st = toolp_extract(p->tp, m->content ? m->content : "", m->content_len, &r);
    if (st != VLLM_OK) return st;
    bool ok = true;
    if (r.tools_called || p->openai_tools) {
        const char *c = r.content && !(r.tools_called && blank(r.content, r.content_len)) ? r.content : NULL;
        ok = set_str(&m->content, &m->content_len, c, r.content_len);
    }
    if (p->openai_tools) ok = ok && set_str(&m->reasoning, &m->reasoning_len, r.reasoning, r.reasoning_len);
    m->auto_tools_called = r.tools_called;
    if (r.tools_called) {
        free(r.content), free(r.reasoning);
        r.content = r.reasoning = NULL;
        m->calls = r;
    } else {
        toolp_result_clear(&r);
    }
    return ok ? VLLM_OK : VLLM_ERR_NO_MEMORY;
}

vllm_status oai_parse_message(const oai_parsers *p, const char *text, size_t len, oai_parsed_message *m) {
    *m = (oai_parsed_message){0};
    const oai_request *q = p->req;
    vllm_status st = VLLM_OK;
    if (p->rp) {
        reasoning_result rr;
        if ((st = reasoning_extract(p->rp, text, len, &rr)) != VLLM_OK) return st;
        m->content = rr.content, m->content_len = rr.content_len;
        m->reasoning = rr.reasoning, m->reasoning_len = rr.reasoning_len;
    } else if (!set_str(&m->content, &m->content_len, text ? text : "", len)) {
        return VLLM_ERR_NO_MEMORY;
    }
    switch (q->tool_mode) {
    case OAI_TOOLS_NAMED:
        st = named_call(q, m->content, m->content_len, &m->calls);
        if (st == VLLM_OK && !set_str(&m->content, &m->content_len, "", 0)) st = VLLM_ERR_NO_MEMORY;
        break;
    case OAI_TOOLS_REQUIRED:
        st = toolp_required_extract(m->content ? m->content : "", m->content_len, &m->calls);
        if (st == VLLM_OK && !set_str(&m->content, &m->content_len, "", 0)) st = VLLM_ERR_NO_MEMORY;
        break;
    case OAI_TOOLS_AUTO: st = auto_calls(p, m); break;
    case OAI_TOOLS_NONE: break;
    }
    if (st == VLLM_OK && !q->parallel_tool_calls) { /* the first call only */
        for (size_t i = 1; i < m->calls.num_calls; i++)
            free(m->calls.calls[i].id), free(m->calls.calls[i].name), free(m->calls.calls[i].arguments);
        if (m->calls.num_calls > 1) m->calls.num_calls = 1;
    }
    if (!q->include_reasoning) set_str(&m->reasoning, &m->reasoning_len, NULL, 0);
    if (st != VLLM_OK) oai_parsed_message_clear(m);
    return st;
}

/* ------------------------------------------------------------------ */
/* Streaming                                                           */
/* ------------------------------------------------------------------ */

struct oai_delta_parser {
    const oai_parsers *p;
    reasoning_stream *rs;
    toolp_stream *ts;            /* auto */
    toolp_required_stream *rq;   /* required */
    char named_id[48];
    bool named_announced;
    bool tools_streamed;
    /* the delta being built */
    oai_buf content, reasoning, stage;
    json_t *calls;
    bool oom;
};

vllm_status oai_delta_parser_new(const oai_parsers *p, oai_delta_parser **out) {
    *out = NULL;
    oai_delta_parser *d = calloc(1, sizeof *d);
    if (!d) return VLLM_ERR_NO_MEMORY;
    d->p = p;
    vllm_status st = VLLM_OK;
    if (p->rp) st = reasoning_stream_new(p->rp, p->prompt_reasoning_ended, &d->rs);
    if (st == VLLM_OK && p->tp) st = toolp_stream_new(p->tp, &d->ts);
    if (st == VLLM_OK && p->req->tool_mode == OAI_TOOLS_REQUIRED) st = toolp_required_stream_new(&d->rq);
    if (st != VLLM_OK) {
        oai_delta_parser_free(d);
        return st;
    }
    *out = d;
    return VLLM_OK;
}

void oai_delta_parser_free(oai_delta_parser *d) {
    if (!d) return;
    reasoning_stream_free(d->rs);
    toolp_stream_free(d->ts);
    toolp_required_stream_free(d->rq);
    oai_buf_free(&d->content), oai_buf_free(&d->reasoning), oai_buf_free(&d->stage);
    json_decref(d->calls);
    free(d);
}

bool oai_delta_parser_tools_streamed(const oai_delta_parser *d) { return d && d->tools_streamed; }

/* Appends a delta's tool calls (only index 0 without parallel_tool_calls; vLLM counts the call streamed
 * before that filter). */
static void add_calls(oai_delta_parser *d, const toolp_call_delta *calls, size_t n) {
    for (size_t i = 0; i < n; i++) {
        d->tools_streamed = true;
        if (!d->p->req->parallel_tool_calls && calls[i].index != 0) continue;
        toolp_delta one = {.calls = &calls[i], .num_calls = 1};
        json_t *a = toolp_delta_tool_calls_json(&one);
        if (!d->calls && a && !(d->calls = json_array())) d->oom = true;
        if (!a || json_array_extend(d->calls, a) != 0) d->oom = true;
        json_decref(a);
    }
}

static void add_delta(oai_delta_parser *d, const toolp_delta *t) {
    if (t->content) oai_buf_put(&d->content, t->content, t->content_len);
    if (t->reasoning) oai_buf_put(&d->reasoning, t->reasoning, t->reasoning_len);
    add_calls(d, t->calls, t->num_calls);
}

/* tool_choice named: the piece as an argument fragment of the one call (vLLM sends one per piece). */
static void named_delta(oai_delta_parser *d, const char *text, size_t n) {
    toolp_call_delta c = {.index = 0, .arguments = text, .arguments_len = n};
    if (!d->named_announced) {
        toolp_make_call_id(d->named_id);
        c.id = d->named_id;
        c.name = d->p->req->tool_name ? d->p->req->tool_name : "";
        d->named_announced = true;
    }
    add_calls(d, &c, 1);
}

/* The content that left the reasoning stage: content while the reasoning lasts, else the tool stage's. */
static vllm_status tool_stage(oai_delta_parser *d, const char *text, size_t n, bool has, bool finishing) {
    bool tool_phase = !d->rs || reasoning_stream_ended(d->rs);
    oai_tool_mode mode = d->p->req->tool_mode;
    if (!tool_phase || mode == OAI_TOOLS_NONE) {
        if (has) oai_buf_put(&d->content, text, n);
        return VLLM_OK;
    }
    toolp_delta t;
    vllm_status st = VLLM_OK;
    if (mode == OAI_TOOLS_NAMED) {
        named_delta(d, text, n);
    } else if (mode == OAI_TOOLS_REQUIRED) {
        if ((st = toolp_required_stream_push(d->rq, text, n, &t)) == VLLM_OK) add_delta(d, &t);
        if (st == VLLM_OK && finishing && (st = toolp_required_stream_finish(d->rq, &t)) == VLLM_OK) add_delta(d, &t);
    } else {
        if (has && n && (st = toolp_stream_push(d->ts, text, n, &t)) == VLLM_OK) add_delta(d, &t);
        if (st == VLLM_OK && finishing && (st = toolp_stream_finish(d->ts, &t)) == VLLM_OK) add_delta(d, &t);
    }
    return st;
}

static void take_reasoning(oai_delta_parser *d, const reasoning_delta *rd) {
    if (rd->reasoning) oai_buf_put(&d->reasoning, rd->reasoning, rd->reasoning_len);
    if (rd->content) oai_buf_put(&d->stage, rd->content, rd->content_len);
}

/* {"content"?, "reasoning"?, "tool_calls"?} (DeltaMessage's field order), or NULL when it would be empty. */
static json_t *delta_json(oai_delta_parser *d) {
    bool reasoning = d->reasoning.len && d->p->req->include_reasoning;
    if (!d->content.len && !reasoning && !d->calls) return NULL;
    json_t *o = json_object();
    if (!o) return NULL;
    if (d->content.len) json_object_set_new(o, "content", oai_json_str(d->content.data, d->content.len));
    if (reasoning) json_object_set_new(o, "reasoning", oai_json_str(d->reasoning.data, d->reasoning.len));
    if (d->calls) json_object_set(o, "tool_calls", d->calls);
    return o;
}

vllm_status oai_delta_parser_push(oai_delta_parser *d, const char *piece, size_t len, bool finishing, json_t **delta) {
    *delta = NULL;
    d->content.len = d->reasoning.len = d->stage.len = 0;
    json_decref(d->calls);
    d->calls = NULL;
    vllm_status st = VLLM_OK;
    bool has = true;
    const char *text = piece ? piece : "";
    size_t n = len;
    if (d->rs) {
        reasoning_delta rd;
        if ((st = reasoning_stream_push(d->rs, text, n, &rd)) == VLLM_OK) take_reasoning(d, &rd);
        if (st == VLLM_OK && finishing && (st = reasoning_stream_finish(d->rs, &rd)) == VLLM_OK) take_reasoning(d, &rd);
        has = d->stage.len > 0;
        text = d->stage.data ? d->stage.data : "", n = d->stage.len;
    }
    if (st == VLLM_OK) st = tool_stage(d, text, n, has, finishing);
    if (st != VLLM_OK) return st;
    if (d->oom || d->content.oom || d->reasoning.oom || d->stage.oom) return VLLM_ERR_NO_MEMORY;
    *delta = delta_json(d);
    return VLLM_OK;
}
