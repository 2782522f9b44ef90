/*
 * test_tool_parser_more.c: the deepseek_v31 and kimi_k2 tool-call parsers (src/server/tool_parser_deepseek_v31.c,
 * tool_parser_kimi_k2.c). Every expected value is written by hand from vLLM's parsers
 * (vllm/tool_parsers/deepseekv31_tool_parser.py@e2fc92ec, kimi_k2_tool_parser.py@c853e154: the regexes and
 * the content rule quoted in each source file's header) and, where vLLM's own tests have the case
 * (tests/tool_parsers/test_deepseekv31_tool_parser.py, test_kimi_k2_tool_parser.py), the same text and the
 * values they assert. Each case's comment names the vLLM behaviour it pins. Well-formed outputs are then
 * streamed split at every byte position, byte by byte and in random chunks: the streamed calls (id where the
 * model writes it, name, argument fragments joined) and content must equal the non-streaming result, every
 * fragment whole UTF-8, first deltas carrying id + name. Outputs where vLLM's streaming announces a call its
 * non-streaming regex then drops (no call end, a '\n' / a new call begin inside the arguments) are checked
 * against their own hand-written streamed values. Random pieces must keep the delta shape (ASan + UBSan
 * run the suite), and held-back input stays bounded with linear work.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/tool_parser.h"
#include "server/tool_parser_internal.h"
#include "test.h"
#include "server/utf8_check.h"

/* ------------------------------------------------------------------ */
/* Helpers (as in test_tool_parser.c)                                  */
/* ------------------------------------------------------------------ */

static toolp_parser *mk(const char *name) {
    toolp_parser *p = NULL;
    CHECK_OK(toolp_parser_new(name, NULL, &p));
    return p;
}

static bool eqn(const char *a, size_t an, const char *b) {
    if (!a || !b) return !a && !b;
    return an == strlen(b) && memcmp(a, b, an) == 0;
}

typedef struct scall {
    char id[128];
    char name[128];
    tp_buf args;
} scall;
typedef struct sres {
    tp_buf content;
    scall calls[16];
    size_t ncalls;
    int bad;
} sres;

static void sres_free(sres *r) {
    tp_buf_free(&r->content);
    for (size_t i = 0; i < r->ncalls; i++) tp_buf_free(&r->calls[i].args);
    memset(r, 0, sizeof *r);
}

static void collect(sres *r, const toolp_delta *d, bool check_utf8) {
    if (d->content) {
        if (!d->content_len || (check_utf8 && !utf8_ok(d->content, d->content_len))) r->bad++;
        tp_put(&r->content, d->content, d->content_len);
    }
    if (d->reasoning) r->bad++;
    for (size_t i = 0; i < d->num_calls; i++) {
        const toolp_call_delta *e = &d->calls[i];
        if (!e->arguments || (check_utf8 && !utf8_ok(e->arguments, e->arguments_len)) || e->name_null) r->bad++;
        if (e->id) {
            if (e->index != r->ncalls || !e->name || r->ncalls >= 16) {
                r->bad++;
                continue;
            }
            snprintf(r->calls[r->ncalls].id, sizeof r->calls[0].id, "%s", e->id);
            snprintf(r->calls[r->ncalls].name, sizeof r->calls[0].name, "%s", e->name);
            r->ncalls++;
        } else if (e->index >= r->ncalls || e->name || !e->arguments_len) {
            r->bad++;
            continue;
        }
        tp_put(&r->calls[e->index].args, e->arguments, e->arguments_len);
    }
}

static void run_stream(const toolp_parser *p, const char *text, size_t len, const size_t *cuts, size_t ncuts, sres *r) {
    memset(r, 0, sizeof *r);
    toolp_stream *s;
    if (toolp_stream_new(p, &s) != VLLM_OK) {
        r->bad++;
        return;
    }
    bool valid = utf8_ok(text, len);
    size_t prev = 0;
    toolp_delta d;
    for (size_t i = 0; i <= ncuts; i++) {
        size_t end = i < ncuts ? cuts[i] : len;
        if (toolp_stream_push(s, text + prev, end - prev, &d) != VLLM_OK) r->bad++;
        else collect(r, &d, valid);
        prev = end;
    }
    if (toolp_stream_finish(s, &d) != VLLM_OK) r->bad++;
    else collect(r, &d, valid);
    if (toolp_stream_num_calls(s) != r->ncalls) r->bad++;
    toolp_stream_free(s);
}

/* A streamed reply against wanted calls (ids: NULL = "chatcmpl-tool-" ids) and content (NULL = none). */
static bool stream_is(const sres *s, size_t ncalls, const char *const *ids, const char *const *names,
                      const char *const *args, const char *content, const char *what) {
    bool ok = s->bad == 0;
    if (!ok) fprintf(stderr, "  %s: %d shape violations\n", what, s->bad);
    if (s->ncalls != ncalls) {
        fprintf(stderr, "  %s: %zu calls streamed, want %zu\n", what, s->ncalls, ncalls);
        return false;
    }
    for (size_t i = 0; i < ncalls; i++) {
        bool id_ok = ids ? strcmp(s->calls[i].id, ids[i]) == 0
                         : strncmp(s->calls[i].id, "chatcmpl-tool-", 14) == 0 && strlen(s->calls[i].id) == 46;
        if (!id_ok || strcmp(s->calls[i].name, names[i]) != 0 || !eqn(s->calls[i].args.data, s->calls[i].args.len, args[i])) {
            fprintf(stderr, "  %s: call %zu id '%s' name '%s' args '%.*s'; want '%s' '%s' '%s'\n", what, i, s->calls[i].id,
                    s->calls[i].name, (int)s->calls[i].args.len, s->calls[i].args.data ? s->calls[i].args.data : "",
                    ids ? ids[i] : "chatcmpl-tool-*", names[i], args[i]);
            ok = false;
        }
    }
    const char *want = content ? content : "";
    if (s->content.len != strlen(want) || (s->content.len && memcmp(s->content.data, want, s->content.len) != 0)) {
        fprintf(stderr, "  %s: content '%.*s' want '%s'\n", what, (int)s->content.len, s->content.data ? s->content.data : "",
                content ? content : "");
        ok = false;
    }
    return ok;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return rng_state;
}

/* The stream, cut at every byte, byte by byte and in random chunks, gives these calls and content. */
static void check_stream_is(const toolp_parser *p, const char *label, const char *text, size_t ncalls,
                            const char *const *ids, const char *const *names, const char *const *args, const char *content) {
    size_t len = strlen(text);
    sres r;
    int fails = 0;
    char what[160];
    for (size_t k = 0; k <= len && fails < 3; k++) {
        run_stream(p, text, len, &k, 1, &r);
        snprintf(what, sizeof what, "%s cut %zu", label, k);
        if (!stream_is(&r, ncalls, ids, names, args, content, what)) fails++;
        sres_free(&r);
    }
    size_t *cuts = malloc((len + 1) * sizeof *cuts);
    for (size_t i = 0; i < len; i++) cuts[i] = i + 1;
    run_stream(p, text, len, cuts, len ? len - 1 : 0, &r);
    snprintf(what, sizeof what, "%s byte by byte", label);
    if (!stream_is(&r, ncalls, ids, names, args, content, what)) fails++;
    sres_free(&r);
    for (int t = 0; t < 30 && fails < 3; t++) {
        size_t n = 0, pos = 0;
        while (pos < len) {
            pos += 1 + rnd() % 7;
            if (pos < len) cuts[n++] = pos;
        }
        run_stream(p, text, len, cuts, n, &r);
        snprintf(what, sizeof what, "%s random chunks %d", label, t);
        if (!stream_is(&r, ncalls, ids, names, args, content, what)) fails++;
        sres_free(&r);
    }
    free(cuts);
    CHECK_MSG(fails == 0, "%s: the stream is not the expected one", label);
}

/* Non-streaming against hand-written values (ids: NULL = "chatcmpl-tool-" ids); then, when stream_agrees, the
 * stream must give the same calls and content (content null streams as nothing). */
static void check_case(const toolp_parser *p, const char *label, const char *text, bool called, const char *content,
                       size_t ncalls, const char *const *ids, const char *const *names, const char *const *args,
                       bool stream_agrees) {
    toolp_result r;
    CHECK_OK(toolp_extract(p, text, strlen(text), &r));
    CHECK_MSG(r.tools_called == called, "%s: tools_called %d", label, r.tools_called);
    CHECK_MSG(eqn(r.content, r.content_len, content), "%s: content '%s' want '%s'", label, r.content ? r.content : "(null)",
              content ? content : "(null)");
    CHECK_MSG(r.num_calls == ncalls, "%s: %zu calls want %zu", label, r.num_calls, ncalls);
    for (size_t i = 0; i < r.num_calls && i < ncalls; i++) {
        bool id_ok = ids ? strcmp(r.calls[i].id, ids[i]) == 0
                         : strncmp(r.calls[i].id, "chatcmpl-tool-", 14) == 0 && strlen(r.calls[i].id) == 46;
        CHECK_MSG(id_ok, "%s: call %zu id '%s' want '%s'", label, i, r.calls[i].id, ids ? ids[i] : "chatcmpl-tool-*");
        CHECK_MSG(strcmp(r.calls[i].name, names[i]) == 0, "%s: call %zu name '%s' want '%s'", label, i, r.calls[i].name,
                  names[i]);
        CHECK_MSG(eqn(r.calls[i].arguments, r.calls[i].arguments_len, args[i]), "%s: call %zu args\n  got  %s\n  want %s",
                  label, i, r.calls[i].arguments, args[i]);
    }
    toolp_result_clear(&r);
    if (stream_agrees) check_stream_is(p, label, text, ncalls, ids, names, args, content);
}

/* ------------------------------------------------------------------ */
/* deepseek_v31                                                        */
/* ------------------------------------------------------------------ */

#define V_CALLS "<｜tool▁calls▁begin｜>"
#define V_CALLS_END "<｜tool▁calls▁end｜>"
#define V_CALL "<｜tool▁call▁begin｜>"
#define V_SEP "<｜tool▁sep｜>"
#define V_END "<｜tool▁call▁end｜>"

static void test_deepseek_v31(void) {
    toolp_parser *p = mk("deepseek_v31");
    CHECK(toolp_parser_kind(p) == TOOLP_DEEPSEEK_V31 && !toolp_needs_special_tokens(p));
    /* one call: name and arguments as written, content None (content if content else None) */
    const char *n1[] = {"get_weather"}, *a1[] = {"{\"city\": \"Paris\", \"unit\": \"celsius\"}"};
    check_case(p, "v31 one call", V_CALLS V_CALL "get_weather" V_SEP "{\"city\": \"Paris\", \"unit\": \"celsius\"}" V_END V_CALLS_END,
               true, NULL, 1, NULL, n1, a1, true);
    /* vLLM's test_extract_tool_calls_with_tool: the prefix is the content, arguments kept compact */
    const char *n2[] = {"foo"}, *a2[] = {"{\"x\":1}"};
    check_case(p, "v31 vllm single", "normal text" V_CALLS V_CALL "foo" V_SEP "{\"x\":1}" V_END V_CALLS_END, true,
               "normal text", 1, NULL, n2, a2, true);
    /* vLLM's test_extract_tool_calls_with_multiple_tools: two calls, the suffix after the calls end dropped */
    const char *n3[] = {"foo", "bar"}, *a3[] = {"{\"x\":1}", "{\"y\":2}"};
    check_case(p, "v31 vllm multiple",
               "some prefix text" V_CALLS V_CALL "foo" V_SEP "{\"x\":1}" V_END V_CALL "bar" V_SEP "{\"y\":2}" V_END
               V_CALLS_END " some suffix text",
               true, "some prefix text", 2, NULL, n3, a3, true);
    /* nested JSON and unicode, passed through byte for byte (no json.loads / dumps); text between calls dropped */
    const char *n4[] = {"search", "translate"};
    const char *a4[] = {"{\"q\":{\"city\":\"北京\",\"tags\":[\"°C\",{\"deep\":[null,true,1.50]}]},\"emoji\":\"😀\"}",
                        "{\"text\": \"Grüße \\u00e9 \\\"q\\\"\"}"};
    check_case(p, "v31 nested unicode",
               "Let me look.\n\n" V_CALLS V_CALL "search" V_SEP
               "{\"q\":{\"city\":\"北京\",\"tags\":[\"°C\",{\"deep\":[null,true,1.50]}]},\"emoji\":\"😀\"}" V_END "\n" V_CALL
               "translate" V_SEP "{\"text\": \"Grüße \\u00e9 \\\"q\\\"\"}" V_END V_CALLS_END,
               true, "Let me look.\n\n", 2, NULL, n4, a4, true);
    /* malformed JSON arguments: no JSON check, the call is returned with them as written */
    const char *n5[] = {"f"}, *a5[] = {"{\"city\": \"Paris\""};
    check_case(p, "v31 malformed args", V_CALLS V_CALL "f" V_SEP "{\"city\": \"Paris\"" V_END V_CALLS_END, true, NULL, 1,
               NULL, n5, a5, true);
    /* name and arguments are not stripped; a separator inside the arguments stays in them (lazy name group) */
    const char *n6[] = {" f "}, *a6[] = {" a" V_SEP "b "};
    check_case(p, "v31 no strip", V_CALLS V_CALL " f " V_SEP " a" V_SEP "b " V_END, true, NULL, 1, NULL, n6, a6, true);
    /* no <｜tool▁calls▁begin｜>: no tools, the whole text as content (even with call tokens in it) */
    const char *plain = "The weather is fine." V_CALL "f" V_SEP "{}" V_END;
    check_case(p, "v31 plain", plain, false, plain, 0, NULL, NULL, NULL, true);
    /* the calls begin but nothing matches: tools_called is still true, content the prefix */
    check_case(p, "v31 empty section", "Hi" V_CALLS "garbage" V_CALLS_END " tail", true, "Hi", 0, NULL, NULL, NULL, true);
    /* a call end missing at the end of the text: the regex needs <｜tool▁call▁end｜>, the call is dropped
     * (tools_called true, content the prefix); vLLM's streaming has announced it, and so does this one */
    const char *miss = "pre" V_CALLS V_CALL "f" V_SEP "{\"a\": 1}";
    check_case(p, "v31 missing end", miss, true, "pre", 0, NULL, NULL, NULL, false);
    const char *nm[] = {"f"}, *am[] = {"{\"a\": 1}"};
    check_stream_is(p, "v31 missing end stream", miss, 1, NULL, nm, am, "pre");
    /* a '\n' in the arguments: '.' does not match it, the call is dropped, the search goes on after it */
    const char *nl = V_CALLS V_CALL "f" V_SEP "{\"a\":\n1}" V_END V_CALL "g" V_SEP "{}" V_END V_CALLS_END;
    const char *nn[] = {"g"}, *an[] = {"{}"};
    check_case(p, "v31 newline in args", nl, true, NULL, 1, NULL, nn, an, false);
    const char *nn2[] = {"f", "g"}, *an2[] = {"{\"a\":", "{}"};
    check_stream_is(p, "v31 newline in args stream", nl, 2, NULL, nn2, an2, NULL);
    /* a '\n' in the name: no match from that begin (nothing announced), the next call is found */
    check_case(p, "v31 newline in name", V_CALLS V_CALL "f\nx" V_SEP "{}" V_END V_CALL "g" V_SEP "{}" V_END, true, NULL, 1,
               NULL, nn, an, true);
    /* DeepSeek-V3's format is not V3.1's: its arguments span lines, so nothing matches */
    check_case(p, "v31 v3 format", V_CALLS V_CALL "function" V_SEP "f\n```json\n{}\n```" V_END V_CALLS_END, true, NULL, 0,
               NULL, NULL, NULL, false);
    toolp_parser_free(p);
}

/* ------------------------------------------------------------------ */
/* kimi_k2                                                             */
/* ------------------------------------------------------------------ */

#define K_SEC "<|tool_calls_section_begin|>"
#define K_SEC_END "<|tool_calls_section_end|>"
#define K_CALL "<|tool_call_begin|>"
#define K_ARG "<|tool_call_argument_begin|>"
#define K_END "<|tool_call_end|>"

static void test_kimi_k2(void) {
    toolp_parser *p = mk("kimi_k2");
    CHECK(toolp_parser_kind(p) == TOOLP_KIMI_K2 && toolp_needs_special_tokens(p));
    CHECK(strcmp(toolp_kind_name(TOOLP_KIMI_K2), "kimi_k2") == 0);
    /* vLLM's tool_call_with_content_before: blanks around the id and the arguments stripped (\s*), the id
     * "functions.get_weather:0" as the call id, the name its part after "functions." */
    const char *i1[] = {"functions.get_weather:0"}, *n1[] = {"get_weather"}, *a1[] = {"{\"city\": \"Beijing\"}"};
    check_case(p, "kimi content before",
               "I'll help you check the weather. " K_SEC " " K_CALL "\nfunctions.get_weather:0 " K_ARG " {\"city\": \"Beijing\"} " K_END
               " " K_SEC_END,
               true, "I'll help you check the weather. ", 1, i1, n1, a1, true);
    /* vLLM's multi_tool_call_with_content_before */
    const char *i2[] = {"functions.get_weather:0", "functions.get_weather:1"}, *n2[] = {"get_weather", "get_weather"};
    const char *a2[] = {"{\"city\": \"Beijing\"}", "{\"city\": \"Shanghai\"}"};
    check_case(p, "kimi two",
               "I'll help you check the weather. " K_SEC " " K_CALL "\nfunctions.get_weather:0 " K_ARG " {\"city\": \"Beijing\"} " K_END
               " " K_CALL "\nfunctions.get_weather:1 " K_ARG " {\"city\": \"Shanghai\"} " K_END " " K_SEC_END,
               true, "I'll help you check the weather. ", 2, i2, n2, a2, true);
    /* vLLM's three_concatenated_tool_calls (no blanks between the tokens) */
    const char *i3[] = {"functions.get_weather:0", "functions.get_news:1", "functions.send_email:2"};
    const char *n3[] = {"get_weather", "get_news", "send_email"};
    const char *a3[] = {"{\"city\": \"New York\"}", "{\"topic\": \"technology\"}",
                        "{\"to\": \"user@example.com\", \"subject\": \"Daily Update\"}"};
    check_case(p, "kimi three",
               "I'll help you with multiple tasks. " K_SEC K_CALL "functions.get_weather:0" K_ARG "{\"city\": \"New York\"}" K_END K_CALL
               "functions.get_news:1" K_ARG "{\"topic\": \"technology\"}" K_END K_CALL "functions.send_email:2" K_ARG
               "{\"to\": \"user@example.com\", \"subject\": \"Daily Update\"}" K_END K_SEC_END,
               true, "I'll help you with multiple tasks. ", 3, i3, n3, a3, true);
    /* vLLM's angle_brackets_in_json and newlines_in_json: '<' and line breaks inside the arguments (DOTALL),
     * kept as written */
    const char *i4[] = {"functions.process_html:0"}, *n4[] = {"process_html"};
    const char *a4[] = {"{\"html\": \"<div>content</div>\", \"text\": \"normal text\"}"};
    check_case(p, "kimi angle brackets",
               "I need to process HTML content. " K_SEC K_CALL "functions.process_html:0" K_ARG
               "{\"html\": \"<div>content</div>\", \"text\": \"normal text\"}" K_END K_SEC_END,
               true, "I need to process HTML content. ", 1, i4, n4, a4, true);
    const char *i5[] = {"functions.process_data:0"}, *n5[] = {"process_data"};
    const char *a5[] = {"{\n  \"name\": \"test\",\n  \"value\": 123,\n  \"nested\": {\n    \"key\": \"value\"\n  }\n}"};
    check_case(p, "kimi newlines in json",
               "I need to process formatted JSON. " K_SEC K_CALL "functions.process_data:0" K_ARG
               "{\n  \"name\": \"test\",\n  \"value\": 123,\n  \"nested\": {\n    \"key\": \"value\"\n  }\n}" K_END K_SEC_END,
               true, "I need to process formatted JSON. ", 1, i5, n5, a5, true);
    /* nested JSON with unicode; Unicode blanks (U+00A0 before, U+3000 and \n after) stripped by \s */
    const char *i6[] = {"get_weather:3"}, *n6[] = {"get_weather"};
    const char *a6[] = {"{\"city\": \"北京\", \"q\": {\"a\": [1, {\"b\": \"😀 é\"}], \"n\": null}}"};
    check_case(p, "kimi nested unicode",
               K_SEC K_CALL "get_weather:3" K_ARG "\xc2\xa0{\"city\": \"北京\", \"q\": {\"a\": [1, {\"b\": \"😀 é\"}], \"n\": null}}"
               "\xe3\x80\x80\n" K_END K_SEC_END,
               true, NULL, 1, i6, n6, a6, true);
    /* vLLM's test_extract_tool_calls_invalid_json: malformed arguments are returned as written */
    const char *i7[] = {"functions.invalid_get_weather:0", "functions.valid_get_weather:1"};
    const char *n7[] = {"invalid_get_weather", "valid_get_weather"}, *a7[] = {"{\"city\": \"Beijing\"", "{\"city\": \"Shanghai\"}"};
    check_case(p, "kimi invalid json",
               "I'll help you check the weather. " K_SEC " " K_CALL "\nfunctions.invalid_get_weather:0 " K_ARG " {\"city\": \"Beijing\" " K_END
               " " K_CALL "\nfunctions.valid_get_weather:1 " K_ARG " {\"city\": \"Shanghai\"} " K_END " " K_SEC_END,
               true, "I'll help you check the weather. ", 2, i7, n7, a7, true);
    /* vLLM's test_extract_tool_calls_invalid_funcall: an id without ":IDX" does not match */
    const char *i8[] = {"functions.valid_get_weather:1"}, *n8[] = {"valid_get_weather"}, *a8[] = {"{\"city\": \"Shanghai\"}"};
    check_case(p, "kimi invalid funcall",
               "I'll help you check the weather. " K_SEC " " K_CALL "\nfunctions.invalid_get_weather.0 " K_ARG " {\"city\": \"Beijing\"} " K_END
               " " K_CALL "\nfunctions.valid_get_weather:1 " K_ARG " {\"city\": \"Shanghai\"} " K_END " " K_SEC_END,
               true, "I'll help you check the weather. ", 1, i8, n8, a8, true);
    /* ids: split(":")[0].split(".")[-1]; the greedy [^<]+ takes the last ":IDX"; empty arguments;
     * \s* gives back a blank when nothing else is left before the ':' */
    const char *i9[] = {"functions.a.b:12", "ns:tool:3", " :0"}, *n9[] = {"b", "ns", " "}, *a9[] = {"[1, 2]", "", "{}"};
    check_case(p, "kimi ids",
               K_SEC K_CALL "functions.a.b:12" K_ARG "[1, 2]" K_END K_CALL " ns:tool:3\t" K_ARG "  \n " K_END K_CALL "  :0" K_ARG "{}" K_END,
               true, NULL, 3, i9, n9, a9, true);
    /* an id holding '<', or digits then text: no match from that begin */
    const char *i10[] = {"functions.g:1"}, *n10[] = {"g"}, *a10[] = {"{}"};
    check_case(p, "kimi bad ids",
               K_SEC K_CALL "functions.f<x>:0" K_ARG "{}" K_END K_CALL "functions.f:0 x" K_ARG "{}" K_END K_CALL "functions.g:1" K_ARG
               "{}" K_END,
               true, NULL, 1, i10, n10, a10, true);
    /* content after the section end and text inside the section outside calls: dropped */
    const char *i11[] = {"functions.f:0"}, *n11[] = {"f"}, *a11[] = {"{\"a\": 1}"};
    check_case(p, "kimi after section",
               "Sure. " K_SEC " noise " K_CALL "functions.f:0" K_ARG "{\"a\": 1}" K_END " between " K_SEC_END " Done, more text.",
               true, "Sure. ", 1, i11, n11, a11, true);
    /* no section begin: no tools, the whole text as content, even with calls in it; the singular variant
     * <|tool_call_section_begin|> does not count (extract_tool_calls checks the plural token only) */
    const char *plain = "Just an answer.";
    check_case(p, "kimi plain", plain, false, plain, 0, NULL, NULL, NULL, true);
    const char *sing = "x <|tool_call_section_begin|>" K_CALL "functions.f:0" K_ARG "{}" K_END "<|tool_call_section_end|>";
    check_case(p, "kimi singular section", sing, false, sing, 0, NULL, NULL, NULL, true);
    /* the section begins but holds no call: tools_called true, content the prefix (None when empty) */
    check_case(p, "kimi empty section", "Hi" K_SEC "   " K_SEC_END " after", true, "Hi", 0, NULL, NULL, NULL, true);
    check_case(p, "kimi only section", K_SEC K_SEC_END, true, NULL, 0, NULL, NULL, NULL, true);
    /* a call end missing at the end of generation: the regex needs <|tool_call_end|>, the call is dropped;
     * vLLM's streaming has announced it with its arguments, as this one (trailing blanks held back) */
    const char *miss = "x " K_SEC K_CALL "functions.f:0" K_ARG " {\"a\": 1}  ";
    check_case(p, "kimi missing end", miss, true, "x ", 0, NULL, NULL, NULL, false);
    check_stream_is(p, "kimi missing end stream", miss, 1, i11, n11, a11, "x ");
    /* the end missing before the argument begin: nothing announced either way */
    check_case(p, "kimi missing arg begin", "x " K_SEC K_CALL "functions.f:0 ", true, "x ", 0, NULL, NULL, NULL, true);
    /* a call begin inside the arguments fails that match ((?!<\|tool_call_begin\|>)); the next call matches.
     * The stream had announced the first call (as vLLM's) */
    const char *inner = K_SEC K_CALL "functions.f:0" K_ARG "{\"a\": 1" K_CALL "functions.g:1" K_ARG "{}" K_END K_SEC_END;
    check_case(p, "kimi begin in args", inner, true, NULL, 1, i10, n10, a10, false);
    const char *i12[] = {"functions.f:0", "functions.g:1"}, *n12[] = {"f", "g"}, *a12[] = {"{\"a\": 1", "{}"};
    check_stream_is(p, "kimi begin in args stream", inner, 2, i12, n12, a12, NULL);
    toolp_parser_free(p);
}

/* ------------------------------------------------------------------ */
/* Robustness and linearity                                            */
/* ------------------------------------------------------------------ */

static const char *const PIECES[] = {
    V_CALLS, V_CALLS_END, V_CALL, V_SEP, V_END, K_SEC, K_SEC_END, K_CALL, K_ARG, K_END, "<|tool_call_section_begin|>",
    "functions.", "f", ":", "0", ".", " ", "\n", "{", "}", "\"", "<", "|", "é", "\xc3", "\xa9", "\xff", "\xc2", "\xa0",
    "\xe3\x80", "\x80", "😀", "\xe2\x80\x8a", "1", "x",
};

static void test_robustness(void) {
    const char *names[] = {"deepseek_v31", "kimi_k2"};
    for (size_t k = 0; k < 2; k++) {
        toolp_parser *p = mk(names[k]);
        int bad = 0;
        for (int t = 0; t < 600; t++) {
            tp_buf txt = {0};
            int np = 1 + (int)(rnd() % 40);
            for (int i = 0; i < np; i++) tp_puts(&txt, PIECES[rnd() % (sizeof PIECES / sizeof *PIECES)]);
            toolp_result r;
            if (toolp_extract(p, txt.data, txt.len, &r) != VLLM_OK) bad++;
            toolp_result_clear(&r);
            size_t cuts[64], n = 0, pos = 0;
            while (n < 64) {
                pos += 1 + rnd() % 9;
                if (pos >= txt.len) break;
                cuts[n++] = pos;
            }
            sres s;
            run_stream(p, txt.data, txt.len, cuts, n, &s);
            if (s.bad) bad++;
            sres_free(&s);
            tp_buf_free(&txt);
        }
        CHECK_MSG(bad == 0, "%s: %d random inputs broke the delta shape", names[k], bad);
        for (int t = 0; t < 100; t++) {
            char buf[200];
            size_t n = rnd() % sizeof buf;
            for (size_t i = 0; i < n; i++) buf[i] = (char)(rnd() & 0xFF);
            toolp_result r;
            CHECK_OK(toolp_extract(p, buf, n, &r));
            toolp_result_clear(&r);
            size_t cut = n / 2;
            sres s;
            run_stream(p, buf, n, &cut, 1, &s);
            sres_free(&s);
        }
        toolp_parser_free(p);
    }
}

/* 64 KB of tag prefixes, open calls, blanks and failing begins, byte by byte and at once: held-back input
 * stays under 64 bytes (what keeps the work linear; speed itself is for benchmarks, not timed tests). */
static void test_linear(void) {
    const char *names[] = {"deepseek_v31", "deepseek_v31", "kimi_k2", "kimi_k2", "kimi_k2"};
    const char *heads[] = {V_CALLS, V_CALLS V_CALL "f" V_SEP, K_SEC, K_SEC K_CALL "f:0" K_ARG "{", K_SEC};
    const char *units[] = {V_CALL "f" V_SEP "{}" V_END V_CALL "g" V_SEP "x<｜tool▁call", " \xe3\x80\x80 <|tool_call_en",
                           K_CALL "f:0" K_ARG "{" K_CALL "g:1 " K_ARG " x", "  \t <|tool_call_e", K_CALL "functions.f<x"};
    for (size_t k = 0; k < 5; k++) {
        toolp_parser *p = mk(names[k]);
        tp_buf txt = {0};
        tp_puts(&txt, heads[k]);
        while (txt.len < 65536) tp_puts(&txt, units[k]);
        toolp_stream *s;
        CHECK_OK(toolp_stream_new(p, &s));
        size_t max_in = 0;
        toolp_delta d;
        for (size_t i = 0; i < txt.len; i++) {
            toolp_stream_push(s, txt.data + i, 1, &d);
            if (s->in.len - s->in_off > max_in) max_in = s->in.len - s->in_off;
        }
        toolp_stream_finish(s, &d);
        CHECK_MSG(max_in <= 64, "%s case %zu: %zu bytes held back", names[k], k, max_in);
        toolp_stream_free(s);
        CHECK_OK(toolp_stream_new(p, &s));
        CHECK_OK(toolp_stream_push(s, txt.data, txt.len, &d));
        CHECK_OK(toolp_stream_finish(s, &d));
        toolp_result r;
        CHECK_OK(toolp_extract(p, txt.data, txt.len, &r));
        toolp_result_clear(&r);
        toolp_stream_free(s);
        tp_buf_free(&txt);
        toolp_parser_free(p);
    }
}

static void test_registry(void) {
    toolp_kind k;
    CHECK(toolp_kind_from_name("deepseek_v31", &k) && k == TOOLP_DEEPSEEK_V31);
    CHECK(toolp_kind_from_name("kimi_k2", &k) && k == TOOLP_KIMI_K2);
    CHECK(strcmp(toolp_kind_name(TOOLP_DEEPSEEK_V31), "deepseek_v31") == 0);
    bool seen_v31 = false, seen_kimi = false;
    for (const char *const *p = toolp_names(); *p; p++) {
        seen_v31 |= strcmp(*p, "deepseek_v31") == 0;
        seen_kimi |= strcmp(*p, "kimi_k2") == 0;
    }
    CHECK(seen_v31 && seen_kimi);
    CHECK(toolp_kind_needs_special_tokens(TOOLP_KIMI_K2) && !toolp_kind_needs_special_tokens(TOOLP_DEEPSEEK_V31));
}

int main(void) {
    test_registry();
    test_deepseek_v31();
    test_kimi_k2();
    test_robustness();
    test_linear();
    TEST_END();
}
