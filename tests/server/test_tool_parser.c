/*
 * test_tool_parser.c: the tool-call parsers (src/server/tool_parser*.c): Python-compatible JSON (json.dumps
 * text, float repr, int() / float(), ast.literal_eval), and for every parser recorded model-style outputs
 * (one call, several, content before a call, no call, malformed JSON, unicode and nested arguments) checked
 * against what vLLM returns, then streamed split at every byte position, byte by byte and in random
 * chunks: the concatenated argument fragments of each call must equal the non-streaming arguments, the
 * content must match, every fragment must be whole UTF-8, first deltas carry id + name. Random and
 * adversarial inputs must not crash (the suite runs under ASan + UBSan), and held-back text stays bounded.
 * tool_choice "required" (tool_parser_required.c): pydantic's list[FunctionDefinition] rules, and the
 * streamed calls against the whole-text ones at every cut.
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
/* Helpers                                                             */
/* ------------------------------------------------------------------ */

static toolp_parser *mk(const char *name, const char *tools_json, int mistral_version) {
    json_t *tools = tools_json ? json_loads(tools_json, 0, NULL) : NULL;
    toolp_parser *p = NULL;
    toolp_options o = {tools, mistral_version};
    CHECK_OK(toolp_parser_new(name, &o, &p));
    json_decref(tools);
    return p;
}

static bool eqn(const char *a, size_t an, const char *b) {
    if (!a || !b) return !a && !b;
    return an == strlen(b) && memcmp(a, b, an) == 0;
}

/* One streamed reply, as a client would rebuild it. */
typedef struct scall {
    char id[64];
    char name[256];
    tp_buf args;
} scall;
typedef struct sres {
    tp_buf content, reasoning;
    scall calls[16];
    size_t ncalls;
    int bad; /* shape violations */
} sres;

static void sres_free(sres *r) {
    tp_buf_free(&r->content);
    tp_buf_free(&r->reasoning);
    for (size_t i = 0; i < r->ncalls; i++) tp_buf_free(&r->calls[i].args);
    memset(r, 0, sizeof *r);
}

static void collect(sres *r, const toolp_delta *d, bool check_utf8) {
    if (d->content) {
        if (!d->content_len || (check_utf8 && !utf8_ok(d->content, d->content_len))) r->bad++;
        tp_put(&r->content, d->content, d->content_len);
    }
    if (d->reasoning) {
        if (!d->reasoning_len || (check_utf8 && !utf8_ok(d->reasoning, d->reasoning_len))) r->bad++;
        tp_put(&r->reasoning, d->reasoning, d->reasoning_len);
    }
    for (size_t i = 0; i < d->num_calls; i++) {
        const toolp_call_delta *e = &d->calls[i];
        if (!e->arguments || (check_utf8 && !utf8_ok(e->arguments, e->arguments_len))) r->bad++;
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

/* Streams text cut at cuts[0..ncuts) (increasing). */
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
    if (toolp_stream_push(s, "x", 1, &d) == VLLM_OK) r->bad++; /* after finish */
    toolp_stream_free(s);
}

/* Does a streamed reply agree with the non-streaming result? what: a label for messages. */
static bool agrees(const sres *s, const toolp_result *ns, bool check_content, const char *what) {
    bool ok = s->bad == 0;
    if (!ok) fprintf(stderr, "  %s: %d shape violations\n", what, s->bad);
    size_t want = ns->tools_called ? ns->num_calls : 0;
    if (s->ncalls != want) {
        fprintf(stderr, "  %s: %zu calls streamed, %zu non-streaming\n", what, s->ncalls, want);
        return false;
    }
    for (size_t i = 0; i < want; i++) {
        if (strcmp(s->calls[i].name, ns->calls[i].name) != 0) {
            fprintf(stderr, "  %s: call %zu name '%s' vs '%s'\n", what, i, s->calls[i].name, ns->calls[i].name);
            ok = false;
        }
        const tp_buf *a = &s->calls[i].args;
        if (a->len != ns->calls[i].arguments_len || (a->len && memcmp(a->data, ns->calls[i].arguments, a->len) != 0)) {
            fprintf(stderr, "  %s: call %zu args '%.*s' vs '%s'\n", what, i, (int)a->len, a->data ? a->data : "",
                    ns->calls[i].arguments);
            ok = false;
        }
    }
    if (check_content) {
        const char *c = ns->content ? ns->content : "";
        size_t cl = ns->content ? ns->content_len : 0;
        if (s->content.len != cl || (cl && memcmp(s->content.data, c, cl) != 0)) {
            fprintf(stderr, "  %s: content '%.*s' vs '%.*s'\n", what, (int)s->content.len,
                    s->content.data ? s->content.data : "", (int)cl, c);
            ok = false;
        }
    }
    return ok;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return rng_state;
}

/* Streaming agreement at every single cut, byte by byte and in random chunks. */
static void check_streaming(const toolp_parser *p, const char *name, const char *text, bool check_content) {
    size_t len = strlen(text);
    toolp_result ns;
    CHECK_OK(toolp_extract(p, text, len, &ns));
    sres r;
    int fails = 0;
    char what[128];
    for (size_t k = 0; k <= len && fails < 3; k++) {
        run_stream(p, text, len, &k, 1, &r);
        snprintf(what, sizeof what, "%s cut %zu", name, k);
        if (!agrees(&r, &ns, check_content, what)) fails++;
        sres_free(&r);
    }
    size_t *cuts = malloc((len + 1) * sizeof *cuts);
    for (size_t i = 0; i < len; i++) cuts[i] = i + 1;
    run_stream(p, text, len, cuts, len ? len - 1 : 0, &r);
    snprintf(what, sizeof what, "%s byte by byte", name);
    if (!agrees(&r, &ns, check_content, what)) fails++;
    sres_free(&r);
    for (int t = 0; t < 30 && fails < 3; t++) {
        size_t n = 0, pos = 0;
        while (pos < len) {
            pos += 1 + rnd() % 7;
            if (pos < len) cuts[n++] = pos;
        }
        run_stream(p, text, len, cuts, n, &r);
        snprintf(what, sizeof what, "%s random chunks %d", name, t);
        if (!agrees(&r, &ns, check_content, what)) fails++;
        sres_free(&r);
    }
    free(cuts);
    CHECK_MSG(fails == 0, "%s: streaming disagrees with the non-streaming result", name);
    toolp_result_clear(&ns);
}

/* Non-streaming: tools_called, the content (NULL = null) and calls (name, arguments). */
static void check_extract(const toolp_parser *p, const char *label, const char *text, bool called,
                          const char *content, size_t ncalls, const char *const *names, const char *const *args) {
    toolp_result r;
    CHECK_OK(toolp_extract(p, text, strlen(text), &r));
    CHECK_MSG(r.tools_called == called, "%s: tools_called %d", label, r.tools_called);
    CHECK_MSG(eqn(r.content, r.content_len, content), "%s: content '%s' want '%s'", label, r.content ? r.content : "(null)",
              content ? content : "(null)");
    CHECK_MSG(r.num_calls == ncalls, "%s: %zu calls want %zu", label, r.num_calls, ncalls);
    for (size_t i = 0; i < r.num_calls && i < ncalls; i++) {
        CHECK_MSG(strcmp(r.calls[i].name, names[i]) == 0, "%s: call %zu name '%s' want '%s'", label, i, r.calls[i].name,
                  names[i]);
        CHECK_MSG(eqn(r.calls[i].arguments, r.calls[i].arguments_len, args[i]), "%s: call %zu args\n  got  %s\n  want %s",
                  label, i, r.calls[i].arguments, args[i]);
    }
    toolp_result_clear(&r);
}

/* ------------------------------------------------------------------ */
/* Python-compatible JSON                                              */
/* ------------------------------------------------------------------ */

static void check_incremental(const char *in, bool ascii);

/* dup: the text repeats a key (Python's dict keeps the last value at the first
 * place; the incremental writer cannot, a documented disagreement) */
static void check_dumps_dup(const char *in, const char *want, bool ascii, bool dup) {
    bool oom = false;
    pj *v = pj_loads(in, strlen(in), &oom);
    CHECK_MSG(v != NULL, "json.loads(%s) failed", in);
    if (!v) return;
    tp_buf b = {0};
    pj_dumps(&b, v, ascii);
    CHECK_MSG(b.data && strcmp(b.data, want) == 0, "dumps(loads(%s))\n  got  %s\n  want %s", in, b.data, want);
    if (!dup) check_incremental(in, ascii);
    tp_buf_free(&b);
    pj_free(v);
}

static void check_dumps(const char *in, const char *want, bool ascii) { check_dumps_dup(in, want, ascii, false); }

typedef struct { tp_buf b; } sink_ctx;
static void sink_out(void *ctx, int sink, const char *s, size_t n) {
    (void)sink;
    tp_put(&((sink_ctx *)ctx)->b, s, n);
}

/* pj_stream fed in pieces of `step` bytes writes exactly json.dumps(json.loads(in)). */
static void check_incremental(const char *in, bool ascii) {
    bool oom = false;
    pj *v = pj_loads(in, strlen(in), &oom);
    tp_buf want = {0};
    if (v) pj_dumps(&want, v, ascii);
    for (size_t step = 1; step <= 5; step++) {
        sink_ctx c = {{0}};
        pjs_hooks h = {.ctx = &c, .out = sink_out};
        pj_stream *ps = pjs_new(PJS_VALUE, ascii, &h);
        size_t n = strlen(in), i = 0;
        bool junk = false;
        while (i < n) {
            size_t k = n - i < step ? n - i : step;
            size_t used = pjs_feed(ps, in + i, k);
            if (used < k) { /* the value ended: json.loads allows only blanks after it */
                for (size_t j = i + used; j < n; j++) junk |= !strchr(" \t\r\n", in[j]);
                break;
            }
            i += k;
        }
        pjs_finish(ps);
        bool accepted = pjs_done(ps) && !pjs_error(ps) && !junk;
        if (v) {
            CHECK_MSG(accepted && c.b.len == want.len && memcmp(c.b.data, want.data, want.len) == 0,
                      "incremental(%s, step %zu)\n  got  %.*s\n  want %s", in, step, (int)c.b.len, c.b.data ? c.b.data : "",
                      want.data);
        } else {
            CHECK_MSG(!accepted, "incremental(%s): accepted what json.loads refuses", in);
        }
        pjs_free(ps);
        tp_buf_free(&c.b);
    }
    tp_buf_free(&want);
    pj_free(v);
}

static void check_literal(const char *in, const char *want) {
    bool oom = false;
    pj *v = pj_literal_eval(in, strlen(in), &oom);
    if (!want) {
        CHECK_MSG(v == NULL, "literal_eval(%s) should fail", in);
        pj_free(v);
        return;
    }
    CHECK_MSG(v != NULL, "literal_eval(%s) failed", in);
    if (!v) return;
    tp_buf b = {0};
    pj_dumps(&b, v, false);
    CHECK_MSG(b.data && strcmp(b.data, want) == 0, "literal_eval(%s) -> %s want %s", in, b.data, want);
    tp_buf_free(&b);
    pj_free(v);
}

static void test_json(void) {
    /* json.dumps(json.loads(x), ensure_ascii=False), values from CPython 3.11 */
    check_dumps("{\"a\":1,\"b\":[1,2.50,{\"c\":null}],\"d\":true,\"e\":1e5,\"f\":1E400,\"g\":-0,"
                "\"h\":123456789012345678901234567890,\"i\":0.1,\"j\":-1.5e-7,\"k\":1e16,\"l\":1e15,\"m\":5e-324,\"n\":-0.0}",
                "{\"a\": 1, \"b\": [1, 2.5, {\"c\": null}], \"d\": true, \"e\": 100000.0, \"f\": Infinity, \"g\": 0, "
                "\"h\": 123456789012345678901234567890, \"i\": 0.1, \"j\": -1.5e-07, \"k\": 1e+16, \"l\": 1000000000000000.0, "
                "\"m\": 5e-324, \"n\": -0.0}",
                false);
    check_dumps("{\"text\": \"Grüße, 世界 🌍\", \"esc\": \"caf\\u00e9 \\ud83d\\ude00 \\\"q\\\" \\\\ \\/ \\u0001 \\t\"}",
                "{\"text\": \"Grüße, 世界 🌍\", \"esc\": \"café 😀 \\\"q\\\" \\\\ / \\u0001 \\t\"}", false);
    /* ensure_ascii=True (gpt-oss) */
    check_dumps("{\"city\":\"Paris\",\"note\":\"café 😀\",\"x\":\"\\u007f\"}",
                "{\"city\": \"Paris\", \"note\": \"caf\\u00e9 \\ud83d\\ude00\", \"x\": \"\\u007f\"}", true);
    check_dumps("\"\\ud800x\"", "\"\\ud800x\"", true);
    check_dumps("\"\\ud800x\"", "\"\\ud800x\"", false);
    check_dumps(" [ ] ", "[]", false);
    check_dumps_dup("{\"a\": 1, \"b\": 2, \"a\": 3}", "{\"a\": 3, \"b\": 2}", false, true); /* dict: last value, first place */
    check_dumps("[NaN, Infinity, -Infinity, 1E2, 0e0, 12.5e-3]", "[NaN, Infinity, -Infinity, 100.0, 0.0, 0.0125]", false);

    /* what json.loads refuses */
    const char *bad[] = {"", "{", "[1,]", "{\"a\":1,}", "01", "1.", "1e", "-", "tru", "\"a\nb\"", "\"\\x\"", "{'a': 1}",
                         "[1] x", "\"\\ud800\\uZZZZ\"", "{\"a\" 1}", "nul", "+1", ".5"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        bool oom = false;
        pj *v = pj_loads(bad[i], strlen(bad[i]), &oom);
        CHECK_MSG(v == NULL, "json.loads(%s) should fail", bad[i]);
        pj_free(v);
        check_incremental(bad[i], false);
    }
    const char *good[] = {"{\"a\":1,\"b\":[1,2.50,{\"c\":null}],\"d\":true}",
                          "{\"t\":\"Grüße 世界 🌍\",\"e\":\"\\ud83d\\ude00 \\ud83d \\u00e9 \\\" \\\\ \\/ \\b\\f\\n\\r\\t\"}",
                          "[1e5, 1E400, -0, 0.1, -1.5e-7, 1e16, 123456789012345678901234567890, NaN, -Infinity]",
                          "  {\"nested\": {\"deep\": [[[], {}], {\"x\": [true, false, null]}]}}  ",
                          "\"plain\"", "42", "-7.25", "true", "{\"\\u0041\\ud800\\ud801\\udc37\": 1}"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        check_incremental(good[i], false);
        check_incremental(good[i], true);
    }

    /* repr(float) */
    struct {
        double d;
        const char *s;
    } fl[] = {{1.0, "1.0"},       {0.1, "0.1"},         {1e16, "1e+16"},  {1e15, "1000000000000000.0"}, {1e-5, "1e-05"},
              {0.0001, "0.0001"}, {123.456, "123.456"}, {-2.5, "-2.5"},   {1e100, "1e+100"},          {2.0000001, "2.0000001"},
              {5e-324, "5e-324"}, {1.7976931348623157e308, "1.7976931348623157e+308"}};
    for (size_t i = 0; i < sizeof fl / sizeof *fl; i++) {
        tp_buf b = {0};
        pj_float_repr(&b, fl[i].d);
        CHECK_MSG(b.data && strcmp(b.data, fl[i].s) == 0, "repr(%.17g) = %s want %s", fl[i].d, b.data, fl[i].s);
        tp_buf_free(&b);
    }

    /* int(str) / float(str) */
    struct {
        const char *in, *out;
    } ints[] = {{" 12 ", "12"}, {"1_000", "1000"}, {"+5", "5"}, {"-0", "0"}, {"007", "7"}, {"-42", "-42"},
                {"1.5", NULL},  {"0x10", NULL},    {"1__0", NULL}, {"_1", NULL}, {"", NULL}, {"1_", NULL}};
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
        bool oom = false;
        pj *v = pj_py_int(ints[i].in, strlen(ints[i].in), &oom);
        if (!ints[i].out) CHECK_MSG(!v, "int(%s) should fail", ints[i].in);
        else CHECK_MSG(v && strcmp(v->s, ints[i].out) == 0, "int(%s) = %s", ints[i].in, v ? v->s : "(fail)");
        pj_free(v);
    }
    double d;
    CHECK(pj_py_float("21.5", 4, &d) == 0 && d == 21.5);
    CHECK(pj_py_float(" 1_0.5 ", 7, &d) == 0 && d == 10.5);
    CHECK(pj_py_float(".5", 2, &d) == 0 && d == 0.5);
    CHECK(pj_py_float("5.", 2, &d) == 0 && d == 5.0);
    CHECK(pj_py_float("-Infinity", 9, &d) == 0 && d < 0 && isinf(d));
    CHECK(pj_py_float("nan", 3, &d) == 0 && isnan(d));
    CHECK(pj_py_float("abc", 3, &d) != 0);
    CHECK(pj_py_float("1e", 2, &d) != 0);
    CHECK(pj_py_float(".", 1, &d) != 0);
    CHECK(pj_py_float("0x10", 4, &d) != 0);

    /* ast.literal_eval + json.dumps */
    check_literal("['x', 'y']", "[\"x\", \"y\"]");
    check_literal("(1, 2)", "[1, 2]");
    check_literal("{'a': 1, 2: 'b', None: True, 1.5: (1,)}", "{\"a\": 1, \"2\": \"b\", \"null\": true, \"1.5\": [1]}");
    check_literal("1, 2", "[1, 2]");
    check_literal("'a' \"b\"", "\"ab\"");
    check_literal("-5", "-5");
    check_literal("- 5.5", "-5.5");
    check_literal("0x1F", "31");
    check_literal("1_000", "1000");
    check_literal("[1,\n 2]", "[1, 2]");
    check_literal("r'\\n'", "\"\\\\n\"");
    check_literal("'\\x41\\u00e9\\101'", "\"AéA\"");
    check_literal("True", "true");
    check_literal("()", "[]");
    check_literal("{}", "{}");
    check_literal("00", "0");
    check_literal("'''multi\nline'''", "\"multi\\nline\"");
    check_literal("07", NULL);
    check_literal("hello", NULL);
    check_literal("{1, 2}", NULL);   /* a set: json.dumps refuses it */
    check_literal("b'x'", NULL);     /* bytes: likewise */
    check_literal("1+2j", NULL);
    check_literal("--5", NULL);
    check_literal("[1, 2", NULL);
    check_literal("f'x'", NULL);
    check_literal("1\n2", NULL);
}

/* ------------------------------------------------------------------ */
/* Registry                                                            */
/* ------------------------------------------------------------------ */

static void test_registry(void) {
    toolp_kind k;
    CHECK(toolp_kind_from_name("hermes", &k) && k == TOOLP_HERMES);
    CHECK(toolp_kind_from_name("llama4_json", &k) && k == TOOLP_LLAMA3_JSON);
    CHECK(!toolp_kind_from_name("nope", &k));
    CHECK(!toolp_kind_from_name(NULL, &k));
    CHECK(strcmp(toolp_kind_name(TOOLP_DEEPSEEK_V3), "deepseek_v3") == 0);
    size_t n = 0;
    for (const char *const *p = toolp_names(); *p; p++) n++;
    CHECK(n == 10); /* + deepseek_v31, kimi_k2 (tests/server/test_tool_parser_more.c) */
    toolp_parser *p = NULL;
    EXPECT_ERR(toolp_parser_new("nope", NULL, &p), VLLM_ERR_INVALID_ARG, "unknown name", "nope");
    CHECK(p == NULL);
    json_t *obj = json_object();
    EXPECT_ERR(toolp_parser_new("hermes", &(toolp_options){obj, 0}, &p), VLLM_ERR_INVALID_ARG, "tools", "array");
    json_decref(obj);
    toolp_parser_free(NULL);
    toolp_stream_free(NULL);
    toolp_result_clear(NULL);
    p = mk("hermes", NULL, 0);
    CHECK(toolp_parser_kind(p) == TOOLP_HERMES && toolp_needs_special_tokens(p));
    toolp_parser_free(p);
    p = mk("qwen3_coder", NULL, 0);
    CHECK(!toolp_needs_special_tokens(p));
    toolp_parser_free(p);
}

/* ------------------------------------------------------------------ */
/* hermes                                                              */
/* ------------------------------------------------------------------ */

static const char *const HERMES_CASES[] = {
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>",
    "Let me check both.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
    "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"Europe/Paris\"}}\n</tool_call>",
    "<tool_call>{\"name\":\"f\",\"arguments\":{\"a\":1,\"b\":[1,2.50,{\"c\":null}],\"d\":true,\"e\":1e5,\"n\":-0}}</tool_call>",
    "<tool_call>\n{\"name\": \"translate\", \"arguments\": {\"text\": \"Grüße, 世界 🌍\", "
    "\"esc\": \"caf\\u00e9 \\ud83d\\ude00 \\\"q\\\" \\\\ \\/\"}}\n</tool_call>",
    "The weather in Paris is sunny.",
    "<tool_call>\n{\"arguments\": {\"x\": {\"deep\": [1, {\"y\": \"z\"}]}}, \"name\": \"nested\"}\n</tool_call>",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n",
    "I'll call <tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"a </tool\"}}\n</tool_call> done",
    "<tool_call>\n{\"name\": \"empty\", \"arguments\": \"\"}\n</tool_call>",
};

static void test_hermes(void) {
    toolp_parser *p = mk("hermes", NULL, 0);
    const char *n1[] = {"get_weather"}, *a1[] = {"{\"city\": \"Paris\", \"unit\": \"celsius\"}"};
    check_extract(p, "hermes single", HERMES_CASES[0], true, NULL, 1, n1, a1);
    const char *n2[] = {"get_weather", "get_time"}, *a2[] = {"{\"city\": \"Paris\"}", "{\"tz\": \"Europe/Paris\"}"};
    check_extract(p, "hermes two", HERMES_CASES[1], true, "Let me check both.\n", 2, n2, a2);
    const char *n3[] = {"f"}, *a3[] = {"{\"a\": 1, \"b\": [1, 2.5, {\"c\": null}], \"d\": true, \"e\": 100000.0, \"n\": 0}"};
    check_extract(p, "hermes compact", HERMES_CASES[2], true, NULL, 1, n3, a3);
    const char *n4[] = {"translate"}, *a4[] = {"{\"text\": \"Grüße, 世界 🌍\", \"esc\": \"café 😀 \\\"q\\\" \\\\ /\"}"};
    check_extract(p, "hermes unicode", HERMES_CASES[3], true, NULL, 1, n4, a4);
    check_extract(p, "hermes no call", HERMES_CASES[4], false, HERMES_CASES[4], 0, NULL, NULL);
    const char *n6[] = {"nested"}, *a6[] = {"{\"x\": {\"deep\": [1, {\"y\": \"z\"}]}}"};
    check_extract(p, "hermes arguments first", HERMES_CASES[5], true, NULL, 1, n6, a6);
    const char *n7[] = {"f"}, *a7[] = {"{}"};
    check_extract(p, "hermes unclosed", HERMES_CASES[6], true, NULL, 1, n7, a7);
    const char *n8[] = {"f"}, *a8[] = {"{\"q\": \"a </tool\"}"};
    check_extract(p, "hermes text around", HERMES_CASES[7], true, "I'll call ", 1, n8, a8);
    const char *n9[] = {"empty"}, *a9[] = {"\"\""};
    check_extract(p, "hermes string arguments", HERMES_CASES[8], true, NULL, 1, n9, a9);
    /* malformed: the whole text as content, no calls */
    const char *bad[] = {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call>",
                         "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
                         "<tool_call>\n{\"name\": 5, \"arguments\": {}}\n</tool_call>",
                         "<tool_call></tool_call>",
                         "ok <tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call><tool_call>[1]</tool_call>",
                         "<tool_call>\n{\"name\": \"f\", \"arguments\": {}} trailing\n</tool_call>"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) check_extract(p, "hermes malformed", bad[i], false, bad[i], 0, NULL, NULL);

    for (size_t i = 0; i < sizeof HERMES_CASES / sizeof *HERMES_CASES; i++) {
        char name[32];
        snprintf(name, sizeof name, "hermes case %zu", i);
        check_streaming(p, name, HERMES_CASES[i], true);
    }
    /* a malformed call that never gets a name: content then matches non-streaming */
    check_streaming(p, "hermes nameless", "<tool_call>\n{\"arguments\": {}}\n</tool_call>", true);

    /* ids, and the JSON shapes the server sends */
    toolp_result r;
    CHECK_OK(toolp_extract(p, HERMES_CASES[1], strlen(HERMES_CASES[1]), &r));
    CHECK(r.num_calls == 2 && strncmp(r.calls[0].id, "chatcmpl-tool-", 14) == 0 && strlen(r.calls[0].id) == 46);
    CHECK(r.num_calls == 2 && strcmp(r.calls[0].id, r.calls[1].id) != 0);
    json_t *j = toolp_result_tool_calls_json(&r);
    char *js = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    char want[512];
    snprintf(want, sizeof want,
             "[{\"id\":\"%s\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": "
             "\\\"Paris\\\"}\"}},{\"id\":\"%s\",\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"arguments\":"
             "\"{\\\"tz\\\": \\\"Europe/Paris\\\"}\"}}]",
             r.calls[0].id, r.calls[1].id);
    CHECK_MSG(js && strcmp(js, want) == 0, "tool_calls JSON %s", js);
    free(js);
    json_decref(j);
    toolp_result_clear(&r);

    toolp_stream *s;
    CHECK_OK(toolp_stream_new(p, &s));
    toolp_delta d;
    CHECK_OK(toolp_stream_push(s, "Hi <tool_", 9, &d));
    CHECK(d.content && d.content_len == 3 && memcmp(d.content, "Hi ", 3) == 0 && d.num_calls == 0);
    CHECK(toolp_delta_tool_calls_json(&d) == NULL);
    const char *rest = "call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1";
    CHECK_OK(toolp_stream_push(s, rest, strlen(rest), &d));
    CHECK(!d.content && d.num_calls == 1 && d.calls[0].id && d.calls[0].index == 0);
    j = toolp_delta_tool_calls_json(&d);
    js = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    snprintf(want, sizeof want,
             "[{\"id\":\"%s\",\"type\":\"function\",\"index\":0,\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\": \"}}]",
             d.calls[0].id);
    CHECK_MSG(js && strcmp(js, want) == 0, "first delta JSON %s", js);
    free(js);
    json_decref(j);
    CHECK_OK(toolp_stream_push(s, "}}\n</tool_call>", 15, &d));
    j = toolp_delta_tool_calls_json(&d);
    js = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    CHECK_MSG(js && strcmp(js, "[{\"index\":0,\"function\":{\"arguments\":\"1}\"}}]") == 0, "later delta JSON %s", js);
    free(js);
    json_decref(j);
    size_t al;
    CHECK(toolp_stream_num_calls(s) == 1 && strcmp(toolp_stream_call_name(s, 0), "f") == 0);
    CHECK(strcmp(toolp_stream_call_arguments(s, 0, &al), "{\"a\": 1}") == 0 && al == 8);
    CHECK(toolp_stream_call_name(s, 1) == NULL && toolp_stream_call_arguments(s, 1, NULL) == NULL);
    CHECK_OK(toolp_stream_finish(s, &d));
    CHECK(!d.content && !d.num_calls);
    EXPECT_ERR(toolp_stream_finish(s, &d), VLLM_ERR_INVALID_ARG, "finished", "stream");
    toolp_stream_free(s);

    /* a UTF-8 character split between pieces is never handed out in halves */
    CHECK_OK(toolp_stream_new(p, &s));
    CHECK_OK(toolp_stream_push(s, "caf\xc3", 4, &d));
    CHECK(d.content && d.content_len == 3);
    CHECK_OK(toolp_stream_push(s, "\xa9!", 2, &d));
    CHECK(d.content && d.content_len == 3 && memcmp(d.content, "\xc3\xa9!", 3) == 0);
    CHECK_OK(toolp_stream_finish(s, &d));
    toolp_stream_free(s);
    toolp_parser_free(p);
}

/* ------------------------------------------------------------------ */
/* qwen3_coder / qwen3_xml                                             */
/* ------------------------------------------------------------------ */

static const char QWEN_TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},\"temp\":{\"type\":\"number\"},"
    "\"metric\":{\"type\":\"boolean\"},\"opts\":{\"type\":\"object\"},\"tags\":{\"type\":\"array\"},\"any\":{},"
    "\"odd\":{\"type\":[\"string\",\"null\"]}}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"run\",\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"code\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"}}}}}]";

static const char *const QWEN_CASES[] = {
    /* 0 single */
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
    "</function>\n</tool_call>",
    /* 1 content + typed values */
    "Let me look that up.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSão Paulo 🌴\n</parameter>\n"
    "<parameter=temp>\n21.5\n</parameter>\n<parameter=days>\n1_0\n</parameter>\n<parameter=metric>\nTrue\n</parameter>\n"
    "<parameter=opts>\n{\"a\":1,\"b\":[1,2]}\n</parameter>\n<parameter=tags>\n['x', 'y']\n</parameter>\n"
    "<parameter=note>\nfree text\n</parameter>\n<parameter=any>\n123\n</parameter>\n<parameter=odd>\n[1, 2]\n</parameter>\n"
    "</function>\n</tool_call>",
    /* 2 two calls, the second with a multi-line value */
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>\n"
    "<tool_call>\n<function=run>\n<parameter=code>\ndef f(x):\n    return x < 2 and x > 0\n\n</parameter>\n"
    "<parameter=n>\nnull\n</parameter>\n</function>\n</tool_call>",
    /* 3 no <tool_call> tags */
    "<function=get_weather>\n<parameter=city>\nBerlin\n</parameter>\n</function>",
    /* 4 missing </parameter> and </function> */
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n<parameter=days>\n2\n</tool_call>",
    /* 5 no call */
    "No tools are needed for this.",
    /* 6 unclosed at the end of the text */
    "<tool_call>\n<function=run>\n<parameter=code>\nprint(1)\n\n",
    /* 7 no parameters */
    "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>",
    /* 8 number edge cases */
    "<tool_call>\n<function=get_weather>\n<parameter=temp>\n20.0\n</parameter>\n<parameter=days>\nseven\n</parameter>\n"
    "<parameter=metric>\nyes\n</parameter>\n<parameter=opts>\n{'a': (1, 2)}\n</parameter>\n</function>\n</tool_call>",
};

static void test_qwen3(void) {
    toolp_parser *p = mk("qwen3_coder", QWEN_TOOLS, 0);
    const char *wn[] = {"get_weather"}, *a0[] = {"{\"city\": \"Paris\", \"days\": 3}"};
    check_extract(p, "qwen3_coder single", QWEN_CASES[0], true, NULL, 1, wn, a0);
    const char *a1[] = {"{\"city\": \"São Paulo 🌴\", \"temp\": 21.5, \"days\": 10, \"metric\": true, \"opts\": {\"a\": 1, "
                        "\"b\": [1, 2]}, \"tags\": [\"x\", \"y\"], \"note\": \"free text\", \"any\": \"123\", \"odd\": [1, 2]}"};
    check_extract(p, "qwen3_coder typed", QWEN_CASES[1], true, "Let me look that up.\n\n", 1, wn, a1);
    const char *n2[] = {"get_weather", "run"},
               *a2[] = {"{\"city\": \"Paris\"}", "{\"code\": \"def f(x):\\n    return x < 2 and x > 0\\n\", \"n\": null}"};
    check_extract(p, "qwen3_coder two", QWEN_CASES[2], true, NULL, 2, n2, a2);
    const char *a3[] = {"{\"city\": \"Berlin\"}"};
    check_extract(p, "qwen3_coder bare", QWEN_CASES[3], true, NULL, 1, wn, a3);
    const char *a4[] = {"{\"city\": \"Rome\", \"days\": 2}"};
    check_extract(p, "qwen3_coder unclosed tags", QWEN_CASES[4], true, NULL, 1, wn, a4);
    check_extract(p, "qwen3_coder no call", QWEN_CASES[5], false, QWEN_CASES[5], 0, NULL, NULL);
    const char *rn[] = {"run"}, *a6[] = {"{\"code\": \"print(1)\"}"};
    check_extract(p, "qwen3_coder truncated", QWEN_CASES[6], true, NULL, 1, rn, a6);
    const char *a7[] = {"{}"};
    check_extract(p, "qwen3_coder no params", QWEN_CASES[7], true, NULL, 1, wn, a7);
    const char *a8[] = {"{\"temp\": 20, \"days\": \"seven\", \"metric\": false, \"opts\": {\"a\": [1, 2]}}"};
    check_extract(p, "qwen3_coder edge values", QWEN_CASES[8], true, NULL, 1, wn, a8);
    /* malformed: a function or parameter without '>', inf for a number */
    const char *bad[] = {"<tool_call>\n<function=get_weather</function>\n</tool_call>",
                         "<tool_call>\n<function=get_weather>\n<parameter=city</parameter>\n</function>\n</tool_call>",
                         "<tool_call>\n<function=get_weather>\n<parameter=temp>\ninf\n</parameter>\n</function>\n</tool_call>"};
    for (size_t i = 0; i < 3; i++) check_extract(p, "qwen3_coder malformed", bad[i], false, bad[i], 0, NULL, NULL);
    /* a repeated parameter keeps its first place and the last value (a dict) */
    const char *a9[] = {"{\"city\": \"B\", \"days\": 1}"};
    check_extract(p, "qwen3_coder repeated",
                  "<tool_call>\n<function=get_weather>\n<parameter=city>\nA\n</parameter>\n<parameter=days>\n1\n</parameter>\n"
                  "<parameter=city>\nB\n</parameter>\n</function>\n</tool_call>",
                  true, NULL, 1, wn, a9);
    for (size_t i = 0; i < sizeof QWEN_CASES / sizeof *QWEN_CASES; i++) {
        char name[32];
        snprintf(name, sizeof name, "qwen3_coder case %zu", i);
        check_streaming(p, name, QWEN_CASES[i], true);
    }
    /* streaming ids are Qwen3-Coder's call_<24 hex>; the non-streaming ones ToolCall's default */
    toolp_stream *s;
    toolp_delta d;
    CHECK_OK(toolp_stream_new(p, &s));
    CHECK_OK(toolp_stream_push(s, QWEN_CASES[0], strlen(QWEN_CASES[0]), &d));
    CHECK(d.num_calls == 1 && strncmp(d.calls[0].id, "call_", 5) == 0 && strlen(d.calls[0].id) == 29);
    toolp_stream_free(s);
    toolp_parser_free(p);

    p = mk("qwen3_xml", QWEN_TOOLS, 0);
    check_extract(p, "qwen3_xml single", QWEN_CASES[0], true, NULL, 1, wn, a0);
    const char *x1[] = {"{\"city\": \"São Paulo 🌴\", \"temp\": 21.5, \"days\": 10, \"metric\": true, "
                        "\"opts\": {\"a\":1,\"b\":[1,2]}, \"tags\": [\"x\", \"y\"], \"note\": \"free text\", \"any\": \"123\", "
                        "\"odd\": \"[1, 2]\"}"};
    check_extract(p, "qwen3_xml typed", QWEN_CASES[1], true, "Let me look that up.\n\n", 1, wn, x1);
    const char *x2[] = {"{\"city\": \"Paris\"}", "{\"code\": \"def f(x):\\n    return x < 2 and x > 0\\n\", \"n\": null}"};
    check_extract(p, "qwen3_xml two", QWEN_CASES[2], true, NULL, 2, n2, x2);
    const char *x8[] = {"{\"temp\": 20, \"days\": \"seven\", \"metric\": false, \"opts\": {\"a\": [1, 2]}}"};
    check_extract(p, "qwen3_xml edge values", QWEN_CASES[8], true, NULL, 1, wn, x8);
    const char *x9[] = {"{\"city\": \"A\", \"city\": \"\"}", "{}"}, *n9[] = {"get_weather", "run"};
    check_extract(p, "qwen3_xml text between calls",
                  "<tool_call>\n<function=get_weather>\n<parameter=city>\nA\n</parameter>\n<parameter=city>\nnull\n"
                  "</parameter>\n</function>\n</tool_call>\nand also\n<tool_call>\n<function=run>\n</function>\n</tool_call>\n",
                  true, "\nand also\n", 2, n9, x9);
    for (size_t i = 0; i < sizeof QWEN_CASES / sizeof *QWEN_CASES; i++) {
        char name[32];
        snprintf(name, sizeof name, "qwen3_xml case %zu", i);
        check_streaming(p, name, QWEN_CASES[i], true);
    }
    check_streaming(p, "qwen3_xml between",
                    "Hi\n<tool_call>\n<function=run>\n</function>\n</tool_call>\n  \n<tool_call>\n<function=run>\n"
                    "</function>\n</tool_call> x\n<tool_call>\n<function=run>\n</function>\n</tool_call>",
                    true);
    toolp_parser_free(p);

    /* without tools every value is a string (qwen3_coder: the schema has no such parameter) */
    p = mk("qwen3_coder", NULL, 0);
    const char *s0[] = {"{\"city\": \"Paris\", \"days\": \"3\"}"};
    check_extract(p, "qwen3_coder no tools", QWEN_CASES[0], true, NULL, 1, wn, s0);
    toolp_parser_free(p);
}

/* ------------------------------------------------------------------ */
/* llama3_json                                                         */
/* ------------------------------------------------------------------ */

static void test_llama(void) {
    toolp_parser *p = mk("llama3_json", NULL, 0);
    const char *c0 = "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}";
    const char *n0[] = {"get_weather"}, *a0[] = {"{\"city\": \"Paris\"}"};
    check_extract(p, "llama python_tag", c0, true, NULL, 1, n0, a0);
    const char *c1 = "{\"name\": \"a\", \"arguments\": {\"x\": 1}}; {\"name\": \"b\", \"parameters\": {\"y\": [1, 2], "
                     "\"t\": \"日本\"}}";
    const char *n1[] = {"a", "b"}, *a1[] = {"{\"x\": 1}", "{\"y\": [1, 2], \"t\": \"日本\"}"};
    check_extract(p, "llama two", c1, true, NULL, 2, n1, a1);
    const char *c2 = "{\"name\":\"nest\",\"arguments\":{\"a\":{\"b\":{\"c\":[1.0,2e3]}},\"s\":\"x\\ny\"}}";
    const char *n2[] = {"nest"}, *a2[] = {"{\"a\": {\"b\": {\"c\": [1.0, 2000.0]}}, \"s\": \"x\\ny\"}"};
    check_extract(p, "llama nested", c2, true, NULL, 1, n2, a2);
    const char *plain = "Hello! How can I help?";
    check_extract(p, "llama plain", plain, false, plain, 0, NULL, NULL);
    const char *noname = "{\"answer\": 42}";
    check_extract(p, "llama not a call", noname, false, noname, 0, NULL, NULL);
    const char *bad = "{\"name\": \"a\", \"arguments\": {\"x\": 1}";
    check_extract(p, "llama malformed", bad, false, bad, 0, NULL, NULL);
    const char *later = "Sure: {\"name\": \"a\", \"arguments\": {}}";
    const char *nl[] = {"a"}, *al[] = {"{}"};
    check_extract(p, "llama text first", later, true, NULL, 1, nl, al);
    check_streaming(p, "llama python_tag", c0, true);
    check_streaming(p, "llama two", c1, true);
    check_streaming(p, "llama nested", c2, true);
    check_streaming(p, "llama plain", plain, true);
    check_streaming(p, "llama not a call", noname, true);
    check_streaming(p, "llama args first", "{\"arguments\": {\"k\": [true]}, \"name\": \"late\"}", true);
    toolp_parser_free(p);
}

/* ------------------------------------------------------------------ */
/* mistral                                                             */
/* ------------------------------------------------------------------ */

static bool mistral_id(const char *id) {
    if (strlen(id) != 9) return false;
    for (int i = 0; i < 9; i++)
        if (!((id[i] >= 'a' && id[i] <= 'z') || (id[i] >= 'A' && id[i] <= 'Z') || (id[i] >= '0' && id[i] <= '9'))) return false;
    return true;
}

static void test_mistral(void) {
    toolp_parser *p = mk("mistral", NULL, 0);
    const char *c0 = "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
                     "{\"name\": \"get_time\", \"arguments\": {\"tz\":\"CET\",\"n\":[1,2]}}]";
    const char *n0[] = {"get_weather", "get_time"}, *a0[] = {"{\"city\": \"Paris\"}", "{\"tz\": \"CET\", \"n\": [1, 2]}"};
    check_extract(p, "mistral pre-v11", c0, true, NULL, 2, n0, a0);
    const char *c1 = "Sure, checking.[TOOL_CALLS][{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Zürich\"}}]";
    const char *n1[] = {"get_weather"}, *a1[] = {"{\"city\": \"Zürich\"}"};
    check_extract(p, "mistral content", c1, true, "Sure, checking.", 1, n1, a1);
    const char *c2 = "[TOOL_CALLS]get_weather{\"city\": \"Paris\"}[TOOL_CALLS]get_time{\"tz\":\"CET\"}";
    const char *a2[] = {"{\"city\": \"Paris\"}", "{\"tz\":\"CET\"}"};
    check_extract(p, "mistral v11", c2, true, NULL, 2, n0, a2);
    const char *c3 = "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {]";
    check_extract(p, "mistral malformed", c3, false, "[{\"name\": \"f\", \"arguments\": {]", 0, NULL, NULL);
    const char *c4 = "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}}] trailing";
    const char *n4[] = {"f"}, *a4[] = {"{}"};
    check_extract(p, "mistral regex fallback", c4, true, NULL, 1, n4, a4);
    const char *plain = "No tool needed.";
    check_extract(p, "mistral plain", plain, false, plain, 0, NULL, NULL);
    check_streaming(p, "mistral pre-v11", c0, true);
    check_streaming(p, "mistral content", c1, true);
    check_streaming(p, "mistral v11", c2, true);
    check_streaming(p, "mistral plain", plain, true);
    toolp_result r;
    CHECK_OK(toolp_extract(p, c0, strlen(c0), &r));
    CHECK(r.num_calls == 2 && mistral_id(r.calls[0].id) && mistral_id(r.calls[1].id));
    toolp_result_clear(&r);
    toolp_parser_free(p);
    /* the version fixed by the tokenizer: v11 reads "[{" as a name up to "{" */
    p = mk("mistral", NULL, 11);
    const char *nv[] = {" ["}, *av[] = {"{\"name\": \"f\", \"arguments\": {}}]"};
    check_extract(p, "mistral forced v11", "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}}]", true, NULL, 1, nv, av);
    toolp_parser_free(p);
    p = mk("mistral", NULL, 7);
    check_streaming(p, "mistral forced pre-v11", c0, true);
    toolp_parser_free(p);
}

/* ------------------------------------------------------------------ */
/* deepseek_v3                                                         */
/* ------------------------------------------------------------------ */

#define DS_CALLS "<｜tool▁calls▁begin｜>"
#define DS_CALL "<｜tool▁call▁begin｜>"
#define DS_SEP "<｜tool▁sep｜>"
#define DS_END "<｜tool▁call▁end｜>"
#define DS_CALLS_END "<｜tool▁calls▁end｜>"

static void test_deepseek(void) {
    toolp_parser *p = mk("deepseek_v3", NULL, 0);
    const char *c0 = DS_CALLS DS_CALL "function" DS_SEP "get_weather\n```json\n{\"city\": \"Paris\"}\n```" DS_END DS_CALLS_END;
    const char *n0[] = {"get_weather"}, *a0[] = {"{\"city\": \"Paris\"}"};
    check_extract(p, "deepseek single", c0, true, NULL, 1, n0, a0);
    const char *c1 = "Checking both cities.\n\n" DS_CALLS DS_CALL "function" DS_SEP "get_weather\n```json\n{\"city\":\"北京\"}\n```" DS_END
        "\n" DS_CALL "function" DS_SEP "get_time\n```json\n{\"tz\": {\"region\": \"Asia\", \"n\": [1, 2]}}\n```" DS_END DS_CALLS_END;
    const char *n1[] = {"get_weather", "get_time"}, *a1[] = {"{\"city\":\"北京\"}", "{\"tz\": {\"region\": \"Asia\", \"n\": [1, 2]}}"};
    check_extract(p, "deepseek two", c1, true, "Checking both cities.\n\n", 2, n1, a1);
    const char *plain = "Just text.";
    check_extract(p, "deepseek plain", plain, false, plain, 0, NULL, NULL);
    const char *bad = "pre" DS_CALLS DS_CALL "function" DS_SEP "f\n{\"a\": 1}\n" DS_END;
    check_extract(p, "deepseek malformed", bad, true, "pre", 0, NULL, NULL);
    const char *badtype = DS_CALLS DS_CALL "tool" DS_SEP "f\n```json\n{}\n```" DS_END;
    check_extract(p, "deepseek bad type", badtype, false, badtype, 0, NULL, NULL);
    check_streaming(p, "deepseek single", c0, true);
    check_streaming(p, "deepseek two", c1, true);
    check_streaming(p, "deepseek plain", plain, true);
    toolp_parser_free(p);
}

/* ------------------------------------------------------------------ */
/* openai (gpt-oss harmony)                                            */
/* ------------------------------------------------------------------ */

static void test_openai(void) {
    toolp_parser *p = mk("openai", NULL, 0);
    const char *c0 = "<|channel|>analysis<|message|>User wants the weather. Call the tool.<|end|><|start|>assistant"
                     "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\",\"note\":"
                     "\"café 😀\",\"days\":[1, 2.0]}<|call|>";
    const char *n0[] = {"get_weather"}, *a0[] = {"{\"city\": \"Paris\", \"note\": \"caf\\u00e9 \\ud83d\\ude00\", \"days\": [1, 2.0]}"};
    check_extract(p, "openai call", c0, true, NULL, 1, n0, a0);
    toolp_result r;
    CHECK_OK(toolp_extract(p, c0, strlen(c0), &r));
    CHECK(eqn(r.reasoning, r.reasoning_len, "User wants the weather. Call the tool."));
    toolp_result_clear(&r);
    const char *c1 = "<|channel|>analysis<|message|>Simple.<|end|><|start|>assistant<|channel|>final<|message|>Hello there!<|return|>";
    check_extract(p, "openai final", c1, false, "Hello there!", 0, NULL, NULL);
    const char *c2 = "<|channel|>commentary<|message|>Checking two.<|end|><|start|>assistant to=functions.a<|channel|>commentary json"
                     "<|message|>{}<|call|><|start|>assistant<|channel|>commentary to=functions.b <|constrain|>json<|message|>"
                     "{\"x\": {\"y\": null}}<|call|>";
    const char *n2[] = {"a", "b"}, *a2[] = {"{}", "{\"x\": {\"y\": null}}"};
    check_extract(p, "openai two", c2, true, "Checking two.", 2, n2, a2);
    const char *c3 = "<|channel|>commentary to=functions.run code<|message|>print('hi')<|call|>";
    const char *n3[] = {"run"}, *a3[] = {"print('hi')"};
    check_extract(p, "openai raw", c3, true, NULL, 1, n3, a3);
    const char *c4 = "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{not json<|call|>";
    const char *n4[] = {"f"}, *a4[] = {"{not json"};
    check_extract(p, "openai bad json", c4, true, NULL, 1, n4, a4);
    const char *c5 = "<|channel|>analysis<|message|>thinking<|end|><|start|>assistant<|channel|>final<|message|>partial answ";
    check_extract(p, "openai truncated", c5, false, "partial answ", 0, NULL, NULL);
    check_streaming(p, "openai call", c0, true);
    check_streaming(p, "openai final", c1, true);
    check_streaming(p, "openai raw", c3, true);
    check_streaming(p, "openai truncated", c5, true);
    /* streaming: analysis as reasoning */
    sres s;
    size_t cut = 20;
    run_stream(p, c0, strlen(c0), &cut, 1, &s);
    CHECK(s.reasoning.data && strcmp(s.reasoning.data, "User wants the weather. Call the tool.") == 0);
    sres_free(&s);
    toolp_parser_free(p);
}

/* ------------------------------------------------------------------ */
/* Robustness                                                          */
/* ------------------------------------------------------------------ */

static const char *const PIECES[] = {
    "<tool_call>", "</tool_call>", "{", "}", "[", "]", "\"", "\\", "\"name\"", "\"arguments\"", ":", ",", " ", "\n",
    "<function=", "</function>", "<parameter=", "</parameter>", ">", "f", "x", "1", "-", ".", "e", "null", "\\u",
    "d83d", "[TOOL_CALLS]", "<|python_tag|>", "<|channel|>", "analysis", "final", "commentary", " to=functions.",
    "<|message|>", "<|end|>", "<|call|>", "<|start|>", "<|constrain|>json", DS_CALLS, DS_CALL, DS_SEP, DS_END,
    "```json\n", "\n```", "é", "\xc3", "\xa9", "\xff", "😀", "NaN", "-Infinity", "'", "(", ")", "True",
};

static void test_robustness(void) {
    const char *names[] = {"hermes", "qwen3_coder", "qwen3_xml", "llama3_json", "mistral", "deepseek_v3", "openai"};
    for (size_t k = 0; k < 7; k++) {
        toolp_parser *p = mk(names[k], QWEN_TOOLS, 0);
        int bad = 0;
        for (int t = 0; t < 300; t++) {
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
            /* shape violations (not agreement) count: ids, indexes, fragments */
            if (s.bad) bad++;
            sres_free(&s);
            tp_buf_free(&txt);
        }
        CHECK_MSG(bad == 0, "%s: %d random inputs broke the delta shape", names[k], bad);
        /* random bytes */
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

/* Held-back text stays bounded (what keeps the work per byte constant; speed itself is measured by benchmarks,
 * not timed here): 200 KB of tag prefixes and open structures, fed byte by byte. */
static void test_linear(void) {
    const char *names[] = {"hermes", "qwen3_coder", "llama3_json", "mistral", "deepseek_v3", "openai"};
    const char *units[] = {"<tool_cal", "<parameter=a>x<paramete", "{\"name\": \"f\", \"arguments\": {\"a\": [",
                           "[TOOL_CALLS", DS_CALL "f" DS_SEP "g\n```json\n", "<|channel|>final<|message|><|en"};
    for (size_t k = 0; k < 6; k++) {
        toolp_parser *p = mk(names[k], NULL, 0);
        tp_buf txt = {0};
        if (k == 1) tp_puts(&txt, "<tool_call><function=f>");
        if (k == 2) tp_puts(&txt, "{\"name\": \"f\", \"arguments\": {\"a\": ");
        while (txt.len < 200000) tp_puts(&txt, units[k]);
        toolp_stream *s;
        CHECK_OK(toolp_stream_new(p, &s));
        size_t max_in = 0;
        toolp_delta d;
        for (size_t i = 0; i < txt.len; i++) {
            toolp_stream_push(s, txt.data + i, 1, &d);
            if (s->in.len - s->in_off > max_in) max_in = s->in.len - s->in_off;
        }
        toolp_stream_finish(s, &d);
        CHECK_MSG(max_in <= 64, "%s: %zu bytes held back", names[k], max_in);
        toolp_stream_free(s);
        /* and one push of everything, plus the non-streaming path */
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

/* ------------------------------------------------------------------ */
/* tool_choice "required" (tool_parser_required.c)                     */
/* ------------------------------------------------------------------ */

/* Streams text cut at cuts[0..ncuts) through a required stream. */
static void run_required(const char *text, size_t len, const size_t *cuts, size_t ncuts, sres *r) {
    memset(r, 0, sizeof *r);
    toolp_required_stream *s;
    if (toolp_required_stream_new(&s) != VLLM_OK) {
        r->bad++;
        return;
    }
    bool valid = utf8_ok(text, len);
    size_t prev = 0;
    toolp_delta d;
    for (size_t i = 0; i <= ncuts; i++) {
        size_t end = i < ncuts ? cuts[i] : len;
        if (toolp_required_stream_push(s, text + prev, end - prev, &d) != VLLM_OK) r->bad++;
        else collect(r, &d, valid);
        for (size_t k = 0; k < d.num_calls; k++) r->bad += d.calls[k].id ? d.calls[k].name_null : !d.calls[k].name_null;
        prev = end;
    }
    if (toolp_required_stream_finish(s, &d) != VLLM_OK) r->bad++;
    else collect(r, &d, valid);
    if (d.content || d.reasoning) r->bad++;
    if (toolp_required_stream_num_calls(s) != r->ncalls) r->bad++;
    if (toolp_required_stream_push(s, "x", 1, &d) == VLLM_OK) r->bad++; /* after finish */
    toolp_required_stream_free(s);
}

/* The non-streaming calls (names, arguments; ncalls 0: none) and streaming agreement at every cut. */
static void check_required(const char *label, const char *text, size_t ncalls, const char *const *names,
                           const char *const *args, bool stream_agrees) {
    size_t len = strlen(text);
    toolp_result ns;
    CHECK_OK(toolp_required_extract(text, len, &ns));
    CHECK_MSG(ns.tools_called == (ncalls > 0) && ns.num_calls == ncalls && !ns.content, "%s: %zu calls want %zu", label,
              ns.num_calls, ncalls);
    for (size_t i = 0; i < ns.num_calls && i < ncalls; i++) {
        CHECK_MSG(!strcmp(ns.calls[i].name, names[i]), "%s: call %zu name '%s'", label, i, ns.calls[i].name);
        CHECK_MSG(eqn(ns.calls[i].arguments, ns.calls[i].arguments_len, args[i]), "%s: call %zu args\n  got  %s\n  want %s",
                  label, i, ns.calls[i].arguments, args[i]);
        CHECK_MSG(!strncmp(ns.calls[i].id, "chatcmpl-tool-", 14) && strlen(ns.calls[i].id) == 46, "%s: id %s", label,
                  ns.calls[i].id);
    }
    if (stream_agrees) {
        sres r;
        int fails = 0;
        char what[160];
        for (size_t k = 0; k <= len && fails < 3; k++) {
            run_required(text, len, &k, 1, &r);
            snprintf(what, sizeof what, "%s cut %zu", label, k);
            if (!agrees(&r, &ns, false, what)) fails++;
            sres_free(&r);
        }
        size_t *cuts = malloc((len + 1) * sizeof *cuts);
        for (size_t i = 0; i + 1 < len; i++) cuts[i] = i + 1;
        run_required(text, len, cuts, len ? len - 1 : 0, &r);
        snprintf(what, sizeof what, "%s byte by byte", label);
        if (!agrees(&r, &ns, false, what)) fails++;
        sres_free(&r);
        free(cuts);
        CHECK_MSG(fails == 0, "%s: streaming disagrees with the non-streaming result", label);
    }
    toolp_result_clear(&ns);
}

static void test_required(void) {
    const char *n2[] = {"get", "f"};
    const char *a2[] = {"{\"city\": \"Z\xc3\xbcrich\", \"n\": 1.5, \"l\": [1, {\"x\": \"}]\\\"\"}]}", "null"};
    check_required("two calls",
                   "[{\"name\": \"get\", \"parameters\": {\"city\": \"Z\\u00fcrich\", \"n\": 1.50, \"l\": [1, {\"x\": "
                   "\"}]\\\"\"}]}}, {\"name\":\"f\",\"parameters\":null}]",
                   2, n2, a2, true);
    const char *nf[] = {"f"}, *aa[] = {"{\"a\": 1}"}, *ae[] = {"{}"};
    check_required("blanks", " [ { \"name\" : \"f\" , \"parameters\" : { \"a\" : 1 } } ] ", 1, nf, aa, true);
    check_required("parameters first", "[{\"parameters\": {\"a\": 1}, \"name\": \"f\"}]", 1, nf, aa, true);
    check_required("description", "[{\"name\": \"f\", \"description\": \"d\", \"parameters\": {}}]", 1, nf, ae, true);
    check_required("no parameters", "[{\"name\": \"f\"}]", 1, nf, (const char *[]){"null"}, false);
    const char *nc[] = {"caf\xc3\xa9"}, *ac[] = {"{\"\xe2\x82\xac\": \"\xf0\x9f\x98\x80\"}"};
    check_required("unicode", "[{\"name\": \"caf\\u00e9\", \"parameters\": {\"\xe2\x82\xac\": \"\\ud83d\\ude00\"}}]", 1, nc,
                   ac, true);
    check_required("empty list", "[]", 0, NULL, NULL, true);
    check_required("not a list", "{\"name\": \"f\", \"parameters\": {}}", 0, NULL, NULL, true);
    check_required("name not a string", "[{\"name\": 5, \"parameters\": {}}]", 0, NULL, NULL, true);
    check_required("bad name escape", "[{\"name\": \"\\x\", \"parameters\": {}}]", 0, NULL, NULL, true);
    /* what pydantic refuses but the stream had announced (vLLM streams these too) */
    check_required("parameters a list", "[{\"name\": \"f\", \"parameters\": [1]}]", 0, NULL, NULL, false);
    check_required("cut short", "[{\"name\": \"f\", \"parameters\": {\"a\": 1", 0, NULL, NULL, false);
    check_required("description a number", "[{\"name\": \"f\", \"description\": 1, \"parameters\": {}}]", 0, NULL,
                   NULL, false);
    /* a number the text stops in is ended by finish */
    sres r;
    const char *num = "[{\"name\": \"f\", \"parameters\": 12";
    run_required(num, strlen(num), NULL, 0, &r);
    CHECK(r.bad == 0 && r.ncalls == 1 && eqn(r.calls[0].args.data, r.calls[0].args.len, "12"));
    sres_free(&r);
    /* random fragments: no crash, well-formed deltas; a long reply byte by byte stays fast */
    static const char *const frags[] = {"[", "]", "{", "}", "\"name\"", "\"parameters\"", ": ", ", ", "\"f\"", "\"\\",
                                        "1.5", " ", "\"x\\\"}\"", "null", "\xc3", "\xa9", "[{\"name\": \"g\", "};
    int bad = 0;
    for (int t = 0; t < 500; t++) {
        tp_buf txt = {0};
        int np = 1 + (int)(rnd() % 40);
        if (t % 2) tp_puts(&txt, "[{\"name\": \"f\", \"parameters\": ");
        for (int i = 0; i < np; i++) tp_puts(&txt, frags[rnd() % (sizeof frags / sizeof *frags)]);
        toolp_result ns;
        if (toolp_required_extract(txt.data, txt.len, &ns) != VLLM_OK) bad++;
        toolp_result_clear(&ns);
        size_t cuts[64], n = 0, pos = 0;
        while (n < 64 && (pos += 1 + rnd() % 9) < txt.len) cuts[n++] = pos;
        run_required(txt.data, txt.len, cuts, n, &r);
        bad += r.bad != 0;
        sres_free(&r);
        tp_buf_free(&txt);
    }
    CHECK_MSG(bad == 0, "required: %d random inputs broke the delta shape", bad);
    tp_buf big = {0};
    tp_putc(&big, '[');
    while (big.len < 200000) tp_puts(&big, "{\"name\": \"f\", \"parameters\": {\"a\": [1, \"x\"]}}, ");
    tp_puts(&big, "{\"name\": \"f\", \"parameters\": {}}]");
    toolp_required_stream *rs;
    CHECK_OK(toolp_required_stream_new(&rs));
    toolp_delta d;
    for (size_t i = 0; i < big.len; i++) toolp_required_stream_push(rs, big.data + i, 1, &d);
    CHECK_OK(toolp_required_stream_finish(rs, &d));
    toolp_result ns;
    CHECK_OK(toolp_required_extract(big.data, big.len, &ns));
    CHECK(toolp_required_stream_num_calls(rs) == ns.num_calls && ns.num_calls > 4000);
    toolp_result_clear(&ns);
    toolp_required_stream_free(rs);
    tp_buf_free(&big);
}

int main(void) {
    test_json();
    test_registry();
    test_hermes();
    test_qwen3();
    test_llama();
    test_mistral();
    test_deepseek();
    test_openai();
    test_robustness();
    test_linear();
    test_required();
    TEST_END();
}
