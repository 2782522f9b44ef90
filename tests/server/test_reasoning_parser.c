/*
 * test_reasoning_parser.c: the reasoning parsers (src/server/reasoning_parser.c): qwen3 (start tag in the
 * prompt or generated, truncated output, enable_thinking false, <tool_call><function= as an implicit end),
 * deepseek_r1, deepseek_v3 (thinking on / off), granite's text markers and gpt-oss harmony channels; each
 * recorded output extracted as vLLM does, then streamed split at every byte position, byte by byte and in
 * random chunks (tags split anywhere) with the streamed parts joined equal to the non-streaming result;
 * is_reasoning_end on prompts and outputs; random input without crashes; bounded held-back text.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/reasoning_parser.h"
#include "server/tool_parser.h"
#include "server/tool_parser_internal.h"
#include "test.h"
#include "server/utf8_check.h"

static reasoning_parser *mk(const char *name, const char *kwargs) {
    json_t *kw = kwargs ? json_loads(kwargs, 0, NULL) : NULL;
    reasoning_parser *p = NULL;
    CHECK_OK(reasoning_parser_new(name, kw, &p));
    json_decref(kw);
    return p;
}

static bool eqn(const char *a, size_t an, const char *b) {
    if (!a || !b) return !a && !b;
    return an == strlen(b) && memcmp(a, b, an) == 0;
}

static void check_extract(const reasoning_parser *p, const char *label, const char *text, const char *reasoning,
                          const char *content) {
    reasoning_result r;
    CHECK_OK(reasoning_extract(p, text, strlen(text), &r));
    CHECK_MSG(eqn(r.reasoning, r.reasoning_len, reasoning), "%s: reasoning '%s' want '%s'", label,
              r.reasoning ? r.reasoning : "(null)", reasoning ? reasoning : "(null)");
    CHECK_MSG(eqn(r.content, r.content_len, content), "%s: content '%s' want '%s'", label, r.content ? r.content : "(null)",
              content ? content : "(null)");
    reasoning_result_clear(&r);
}

typedef struct sres {
    tp_buf reasoning, content;
    int bad;
    bool ended_early; /* reasoning_stream_ended went back to false */
} sres;

static void sres_free(sres *r) {
    tp_buf_free(&r->reasoning);
    tp_buf_free(&r->content);
}

static void take(sres *r, const reasoning_delta *d, bool valid) {
    if (d->reasoning) {
        if (!d->reasoning_len || (valid && !utf8_ok(d->reasoning, d->reasoning_len))) r->bad++;
        tp_put(&r->reasoning, d->reasoning, d->reasoning_len);
    }
    if (d->content) {
        if (!d->content_len || (valid && !utf8_ok(d->content, d->content_len))) r->bad++;
        tp_put(&r->content, d->content, d->content_len);
    }
}

static void run_stream(const reasoning_parser *p, bool prompt_ended, const char *text, size_t len, const size_t *cuts,
                       size_t ncuts, sres *r) {
    memset(r, 0, sizeof *r);
    reasoning_stream *s;
    if (reasoning_stream_new(p, prompt_ended, &s) != VLLM_OK) {
        r->bad++;
        return;
    }
    bool valid = utf8_ok(text, len), was_ended = false;
    size_t prev = 0;
    reasoning_delta d;
    for (size_t i = 0; i <= ncuts; i++) {
        size_t end = i < ncuts ? cuts[i] : len;
        if (reasoning_stream_push(s, text + prev, end - prev, &d) != VLLM_OK) r->bad++;
        else take(r, &d, valid);
        bool e = reasoning_stream_ended(s);
        if (was_ended && !e) r->ended_early = true;
        was_ended = e;
        prev = end;
    }
    if (reasoning_stream_finish(s, &d) != VLLM_OK) r->bad++;
    else take(r, &d, valid);
    if (reasoning_stream_push(s, "x", 1, &d) == VLLM_OK) r->bad++;
    reasoning_stream_free(s);
}

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return rng_state;
}

static bool agrees(const sres *s, const reasoning_result *ns, const char *what) {
    const char *rr = ns->reasoning ? ns->reasoning : "", *cc = ns->content ? ns->content : "";
    size_t rl = ns->reasoning ? ns->reasoning_len : 0, cl = ns->content ? ns->content_len : 0;
    bool ok = !s->bad && !s->ended_early && s->reasoning.len == rl && (!rl || memcmp(s->reasoning.data, rr, rl) == 0) &&
              s->content.len == cl && (!cl || memcmp(s->content.data, cc, cl) == 0);
    if (!ok)
        fprintf(stderr, "  %s: bad %d, reasoning '%.*s' vs '%s', content '%.*s' vs '%s'\n", what, s->bad,
                (int)s->reasoning.len, s->reasoning.data ? s->reasoning.data : "", rr, (int)s->content.len,
                s->content.data ? s->content.data : "", cc);
    return ok;
}

static void check_streaming(const reasoning_parser *p, const char *name, const char *text) {
    size_t len = strlen(text);
    reasoning_result ns;
    CHECK_OK(reasoning_extract(p, text, len, &ns));
    int fails = 0;
    char what[128];
    sres r;
    for (size_t k = 0; k <= len && fails < 3; k++) {
        run_stream(p, false, text, len, &k, 1, &r);
        snprintf(what, sizeof what, "%s cut %zu", name, k);
        if (!agrees(&r, &ns, what)) fails++;
        sres_free(&r);
    }
    size_t *cuts = malloc((len + 1) * sizeof *cuts);
    for (size_t i = 0; i < len; i++) cuts[i] = i + 1;
    run_stream(p, false, text, len, cuts, len ? len - 1 : 0, &r);
    snprintf(what, sizeof what, "%s byte by byte", name);
    if (!agrees(&r, &ns, what)) fails++;
    sres_free(&r);
    for (int t = 0; t < 30 && fails < 3; t++) {
        size_t n = 0, pos = 0;
        while (pos < len) {
            pos += 1 + rnd() % 6;
            if (pos < len) cuts[n++] = pos;
        }
        run_stream(p, false, text, len, cuts, n, &r);
        snprintf(what, sizeof what, "%s random %d", name, t);
        if (!agrees(&r, &ns, what)) fails++;
        sres_free(&r);
    }
    free(cuts);
    CHECK_MSG(fails == 0, "%s: streaming disagrees with the non-streaming result", name);
    reasoning_result_clear(&ns);
}

static bool is_end(const reasoning_parser *p, const char *text) { return reasoning_is_end(p, text, strlen(text)); }

/* ------------------------------------------------------------------ */

static const char QWEN_TOOL_OUT[] = "Plan: call the tool.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
                                    "</parameter>\n</function>\n</tool_call>";

static const char *const THINK_CASES[] = {
    "<think>\nThe user asks for the capital.\n</think>\n\nParis is the capital.",
    "Reasoning here.\n</think>\n\nAnswer.",
    "Still thinking about",
    "</think>",
    "</think>Answer",
    "<think>a</think>b</think>c",
    "思考中…</think>答案：是 😀",
    "Mention <tool_call> tags and <think in text",
    "<think>\n\n</think>\n\n",
    "",
};

static void test_registry(void) {
    reasoning_kind k;
    CHECK(reasoning_kind_from_name("qwen3", &k) && k == REASONING_QWEN3);
    CHECK(reasoning_kind_from_name("openai_gptoss", &k) && k == REASONING_GPT_OSS);
    CHECK(reasoning_kind_from_name("gpt_oss", &k) && k == REASONING_GPT_OSS);
    CHECK(!reasoning_kind_from_name("nope", &k));
    CHECK(strcmp(reasoning_kind_name(REASONING_GRANITE), "granite") == 0);
    size_t n = 0;
    for (const char *const *q = reasoning_names(); *q; q++) n++;
    CHECK(n == 6);
    reasoning_parser *p = NULL;
    EXPECT_ERR(reasoning_parser_new("nope", NULL, &p), VLLM_ERR_INVALID_ARG, "unknown name", "nope");
    CHECK(p == NULL);
    reasoning_parser_free(NULL);
    reasoning_stream_free(NULL);
    reasoning_result_clear(NULL);
}

static void test_qwen3(void) {
    reasoning_parser *p = mk("qwen3", NULL);
    CHECK(reasoning_parser_kind(p) == REASONING_QWEN3);
    check_extract(p, "qwen3 tags", THINK_CASES[0], "\nThe user asks for the capital.\n", "\n\nParis is the capital.");
    check_extract(p, "qwen3 start in prompt", THINK_CASES[1], "Reasoning here.\n", "\n\nAnswer.");
    check_extract(p, "qwen3 truncated", THINK_CASES[2], "Still thinking about", NULL);
    check_extract(p, "qwen3 end only", THINK_CASES[3], "", NULL);
    check_extract(p, "qwen3 empty reasoning", THINK_CASES[4], "", "Answer");
    check_extract(p, "qwen3 repeated end", THINK_CASES[5], "a", "b</think>c");
    check_extract(p, "qwen3 unicode", THINK_CASES[6], "思考中…", "答案：是 😀");
    check_extract(p, "qwen3 mention", THINK_CASES[7], THINK_CASES[7], NULL);
    check_extract(p, "qwen3 empty block", THINK_CASES[8], "\n\n", "\n\n");
    check_extract(p, "qwen3 tool call ends reasoning", QWEN_TOOL_OUT, "Plan: call the tool.\n", QWEN_TOOL_OUT + 21);
    check_extract(p, "qwen3 tool call first", "<tool_call>\n<function=f>\n</function>\n</tool_call>", NULL,
                  "<tool_call>\n<function=f>\n</function>\n</tool_call>");
    check_extract(p, "qwen3 hermes call is not an end", "x<tool_call>\n{\"name\": \"f\"}</tool_call>",
                  "x<tool_call>\n{\"name\": \"f\"}</tool_call>", NULL);
    for (size_t i = 0; i < sizeof THINK_CASES / sizeof *THINK_CASES; i++) {
        char name[32];
        snprintf(name, sizeof name, "qwen3 case %zu", i);
        check_streaming(p, name, THINK_CASES[i]);
    }
    check_streaming(p, "qwen3 tool call", QWEN_TOOL_OUT);
    check_streaming(p, "qwen3 tool call spaced", "r<tool_call>  \n\t<function = x>");
    check_streaming(p, "qwen3 tool call near miss", "r<tool_call>\n<functional>more reasoning</think>done");
    check_streaming(p, "qwen3 tool call truncated", "r<tool_call>\n<func");

    /* is_reasoning_end: prompts and outputs (special tokens kept) */
    CHECK(!is_end(p, "<|im_start|>assistant\n<think>\n"));
    CHECK(is_end(p, "<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    CHECK(!is_end(p, "old turn</think> answer<|im_end|>\n<|im_start|>assistant\n<think>\n"));
    CHECK(!is_end(p, "no markers at all"));
    CHECK(is_end(p, "<think>\nplan\n<tool_call>\n<function=f>"));
    CHECK(!is_end(p, "<think>\nplan <tool_call> tags"));
    CHECK(!is_end(p, "history <tool_call>\n<function=f>\n</function>\n</tool_call> <think>\n"));
    CHECK(!is_end(p, "<tool_call>\n<function=f></tool_call>"));
    CHECK(reasoning_is_end(p, NULL, 0) == false);

    /* streaming: the end is seen from the piece that holds it on */
    reasoning_stream *s;
    reasoning_delta d;
    CHECK_OK(reasoning_stream_new(p, false, &s));
    CHECK_OK(reasoning_stream_push(s, "abc</th", 7, &d));
    CHECK(d.reasoning && d.reasoning_len == 3 && !d.content && !reasoning_stream_ended(s));
    CHECK_OK(reasoning_stream_push(s, "ink>x", 5, &d));
    CHECK(!d.reasoning && d.content && d.content_len == 1 && reasoning_stream_ended(s));
    CHECK_OK(reasoning_stream_finish(s, &d));
    EXPECT_ERR(reasoning_stream_finish(s, &d), VLLM_ERR_INVALID_ARG, "finished", "stream");
    reasoning_stream_free(s);
    /* the prompt ended the reasoning: everything is content */
    sres r;
    run_stream(p, true, THINK_CASES[1], strlen(THINK_CASES[1]), NULL, 0, &r);
    CHECK(!r.reasoning.len && r.content.len == strlen(THINK_CASES[1]));
    sres_free(&r);
    reasoning_parser_free(p);

    /* enable_thinking false: no </think> -> all content; the stream is content from the start */
    p = mk("qwen3", "{\"enable_thinking\": false}");
    check_extract(p, "qwen3 no thinking", "Hello there.", NULL, "Hello there.");
    check_extract(p, "qwen3 no thinking, tags", "a</think>b", "a", "b");
    check_extract(p, "qwen3 no thinking, tool call", QWEN_TOOL_OUT, NULL, QWEN_TOOL_OUT);
    check_streaming(p, "qwen3 no thinking", "Hello there.");
    reasoning_stream_new(p, false, &s);
    CHECK(reasoning_stream_ended(s));
    reasoning_stream_free(s);
    reasoning_parser_free(p);
    /* Python truthiness of the kwarg */
    p = mk("qwen3", "{\"enable_thinking\": 0}");
    check_extract(p, "qwen3 enable_thinking 0", "Hello.", NULL, "Hello.");
    reasoning_parser_free(p);
    p = mk("qwen3", "{\"enable_thinking\": \"yes\"}");
    check_extract(p, "qwen3 enable_thinking yes", "Hello.", "Hello.", NULL);
    reasoning_parser_free(p);
}

static void test_deepseek(void) {
    reasoning_parser *p = mk("deepseek_r1", NULL);
    check_extract(p, "r1 tags", THINK_CASES[0], "\nThe user asks for the capital.\n", "\n\nParis is the capital.");
    check_extract(p, "r1 start in prompt", THINK_CASES[1], "Reasoning here.\n", "\n\nAnswer.");
    check_extract(p, "r1 truncated", THINK_CASES[2], "Still thinking about", NULL);
    check_extract(p, "r1 end only", THINK_CASES[3], "", NULL);
    check_extract(p, "r1 tool call is reasoning", QWEN_TOOL_OUT, QWEN_TOOL_OUT, NULL);
    check_extract(p, "r1 empty", "", "", NULL);
    for (size_t i = 0; i < sizeof THINK_CASES / sizeof *THINK_CASES; i++) {
        char name[32];
        snprintf(name, sizeof name, "deepseek_r1 case %zu", i);
        check_streaming(p, name, THINK_CASES[i]);
    }
    check_streaming(p, "deepseek_r1 tool call", QWEN_TOOL_OUT);
    CHECK(!is_end(p, "<｜Assistant｜><think>\n"));
    CHECK(is_end(p, "<think>x</think>"));
    CHECK(!is_end(p, "<think>\nplan\n<tool_call>\n<function=f>"));
    reasoning_parser_free(p);

    p = mk("deepseek_v3", "{\"thinking\": true}");
    check_extract(p, "v3 thinking", THINK_CASES[1], "Reasoning here.\n", "\n\nAnswer.");
    check_streaming(p, "v3 thinking", THINK_CASES[0]);
    CHECK(!is_end(p, "<think>\n"));
    reasoning_parser_free(p);
    p = mk("deepseek_v3", "{\"enable_thinking\": true, \"thinking\": false}");
    check_extract(p, "v3 enable_thinking", THINK_CASES[1], "Reasoning here.\n", "\n\nAnswer.");
    reasoning_parser_free(p);
    p = mk("deepseek_v3", NULL);
    check_extract(p, "v3 identity", THINK_CASES[1], NULL, THINK_CASES[1]);
    check_extract(p, "v3 identity empty", "", NULL, "");
    check_streaming(p, "v3 identity", THINK_CASES[0]);
    CHECK(is_end(p, "<think>\n"));
    reasoning_parser_free(p);
}

static void test_granite(void) {
    reasoning_parser *p = mk("granite", NULL);
    const char *c0 = "Here is my thought process: Step 1, add. Here is my response: The answer is 4.";
    check_extract(p, "granite", c0, " Step 1, add. ", " The answer is 4.");
    const char *c1 = "Here's my thought process:x Here's my response:";
    check_extract(p, "granite no response", c1, "x ", NULL);
    const char *c2 = "No markers in this reply: Here is nothing.";
    check_extract(p, "granite plain", c2, NULL, c2);
    const char *c3 = "Here is my thought process: unfinished";
    check_extract(p, "granite unfinished", c3, NULL, c3);
    const char *c4 = "Intro. Here is my thought process: A Here's my response: B";
    check_extract(p, "granite later marker", c4, " A ", " B");
    check_streaming(p, "granite", c0);
    check_streaming(p, "granite no response", c1);
    check_streaming(p, "granite plain", c2);
    check_streaming(p, "granite near miss", "Here is my thought: Here's my response: x");
    CHECK(is_end(p, c0));
    CHECK(!is_end(p, c3));
    reasoning_parser_free(p);
}

static void test_gptoss(void) {
    reasoning_parser *p = mk("openai_gptoss", NULL);
    const char *c0 = "<|channel|>analysis<|message|>Let me think.<|end|><|start|>assistant<|channel|>final<|message|>Answer.<|return|>";
    check_extract(p, "gpt-oss", c0, "Let me think.", "Answer.");
    const char *c1 = "<|channel|>analysis<|message|>A<|end|><|start|>assistant<|channel|>analysis<|message|>B<|end|>"
                     "<|start|>assistant<|channel|>final<|message|>C 😀<|return|>";
    check_extract(p, "gpt-oss two analyses", c1, "A\nB", "C 😀");
    const char *c2 = "<|channel|>analysis<|message|>partial";
    check_extract(p, "gpt-oss truncated", c2, "partial", NULL);
    const char *c3 = "<|channel|>analysis<|message|>Need a tool.<|end|><|start|>assistant<|channel|>commentary "
                     "to=functions.f <|constrain|>json<|message|>{\"a\": 1}<|call|>";
    check_extract(p, "gpt-oss tool call", c3, "Need a tool.", "{\"a\": 1}");
    const char *c4 = "<|channel|>analysis<|message|><|end|><|start|>assistant<|channel|>analysis<|message|>x<|end|>";
    check_extract(p, "gpt-oss empty message", c4, "\nx", NULL);
    check_streaming(p, "gpt-oss", c0);
    check_streaming(p, "gpt-oss two analyses", c1);
    check_streaming(p, "gpt-oss truncated", c2);
    check_streaming(p, "gpt-oss tool call", c3);
    check_streaming(p, "gpt-oss empty message", c4);
    CHECK(is_end(p, c0));
    CHECK(!is_end(p, c2));
    CHECK(is_end(p, "<|channel|>final <|constrain|>x<|message|>"));
    reasoning_stream *s;
    reasoning_delta d;
    CHECK_OK(reasoning_stream_new(p, false, &s));
    CHECK_OK(reasoning_stream_push(s, c0, 60, &d));
    CHECK(!reasoning_stream_ended(s));
    CHECK_OK(reasoning_stream_push(s, c0 + 60, strlen(c0) - 60, &d));
    CHECK(reasoning_stream_ended(s));
    reasoning_stream_free(s);
    reasoning_parser_free(p);
}

static const char *const PIECES[] = {"<think>", "</think>", "<tool_call>", "</tool_call>", "<function=", "<function ",
                                     "<", ">", "/", "think", "\n", " ", "x", "é", "\xc3", "\xff", "😀",
                                     "Here is my thought process:", "Here's my response:", "Here", ":",
                                     "<|channel|>", "analysis", "final", "<|message|>", "<|end|>", "<|start|>",
                                     "assistant", "<|return|>", " to=functions.f", "<|"};

/* The serving pipeline: the reasoning stream's content feeds the tool stream
 * (serving_chat.py); at every cut, the streamed reasoning, content and calls
 * equal reasoning_extract followed by toolp_extract on its content. */
static void check_chain(const char *rname, const char *tname, const char *tools, const char *text) {
    reasoning_parser *rp = mk(rname, NULL);
    json_t *tj = tools ? json_loads(tools, 0, NULL) : NULL;
    toolp_parser *tp = NULL;
    CHECK_OK(toolp_parser_new(tname, &(toolp_options){tj, 0}, &tp));
    json_decref(tj);
    size_t len = strlen(text);
    reasoning_result rr;
    CHECK_OK(reasoning_extract(rp, text, len, &rr));
    toolp_result tr;
    CHECK_OK(toolp_extract(tp, rr.content ? rr.content : "", rr.content_len, &tr));
    int fails = 0;
    for (size_t k = 0; k <= len; k++) {
        reasoning_stream *rs;
        toolp_stream *ts;
        CHECK_OK(reasoning_stream_new(rp, false, &rs));
        CHECK_OK(toolp_stream_new(tp, &ts));
        tp_buf reasoning = {0}, content = {0}, args = {0};
        size_t ncalls = 0;
        const char *name0 = NULL;
        for (int part = 0; part < 3; part++) {
            reasoning_delta rd;
            if (part == 0) reasoning_stream_push(rs, text, k, &rd);
            else if (part == 1) reasoning_stream_push(rs, text + k, len - k, &rd);
            else reasoning_stream_finish(rs, &rd);
            if (rd.reasoning) tp_put(&reasoning, rd.reasoning, rd.reasoning_len);
            toolp_delta td;
            toolp_stream_push(ts, rd.content ? rd.content : "", rd.content_len, &td);
            for (int again = 0; again < 2; again++) {
                if (td.content) tp_put(&content, td.content, td.content_len);
                for (size_t i = 0; i < td.num_calls; i++) {
                    if (td.calls[i].id) ncalls++;
                    if (td.calls[i].index == 0) tp_put(&args, td.calls[i].arguments, td.calls[i].arguments_len);
                }
                if (part < 2 || again) break;
                toolp_stream_finish(ts, &td);
            }
        }
        name0 = toolp_stream_call_name(ts, 0);
        bool ok = eqn(reasoning.data ? reasoning.data : "", reasoning.len, rr.reasoning ? rr.reasoning : "") &&
                  eqn(content.data ? content.data : "", content.len, tr.content ? tr.content : "") &&
                  ncalls == tr.num_calls && (!ncalls || (strcmp(name0, tr.calls[0].name) == 0 &&
                  eqn(args.data ? args.data : "", args.len, tr.calls[0].arguments)));
        if (!ok && fails++ < 2)
            fprintf(stderr, "  chain %s+%s cut %zu: reasoning '%s' content '%s' calls %zu args '%s'\n", rname, tname, k,
                    reasoning.data ? reasoning.data : "", content.data ? content.data : "", ncalls, args.data ? args.data : "");
        tp_buf_free(&reasoning), tp_buf_free(&content), tp_buf_free(&args);
        reasoning_stream_free(rs);
        toolp_stream_free(ts);
    }
    CHECK_MSG(fails == 0, "chain %s + %s disagrees at %d cuts", rname, tname, fails);
    CHECK(tr.tools_called);
    reasoning_result_clear(&rr);
    toolp_result_clear(&tr);
    toolp_parser_free(tp);
    reasoning_parser_free(rp);
}

static void test_chain(void) {
    check_chain("qwen3", "hermes", NULL,
                "<think>\nNeed the weather.\n</think>\n\nSure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                "{\"city\": \"Paris\"}}\n</tool_call>");
    check_chain("qwen3", "qwen3_coder", "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
                "{\"properties\":{\"n\":{\"type\":\"integer\"}}}}}]",
                "Plan: call f.\n<tool_call>\n<function=f>\n<parameter=n>\n7\n</parameter>\n</function>\n</tool_call>");
    check_chain("deepseek_r1", "deepseek_v3", NULL,
                "Think.</think>Calling." "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\": 1}\n```"
                "<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
}

static void test_robustness(void) {
    const char *names[] = {"qwen3", "deepseek_r1", "deepseek_v3", "granite", "openai_gptoss"};
    for (size_t k = 0; k < 5; k++) {
        reasoning_parser *p = mk(names[k], k == 2 ? "{\"thinking\": true}" : NULL);
        int bad = 0;
        for (int t = 0; t < 400; t++) {
            tp_buf txt = {0};
            int np = (int)(rnd() % 30);
            for (int i = 0; i < np; i++) tp_puts(&txt, PIECES[rnd() % (sizeof PIECES / sizeof *PIECES)]);
            reasoning_result r;
            if (reasoning_extract(p, txt.data ? txt.data : "", txt.len, &r) != VLLM_OK) bad++;
            reasoning_result_clear(&r);
            (void)reasoning_is_end(p, txt.data, txt.len);
            size_t cuts[64], n = 0, pos = 0;
            while (n < 64) {
                pos += 1 + rnd() % 5;
                if (pos >= txt.len) break;
                cuts[n++] = pos;
            }
            sres s;
            run_stream(p, rnd() % 4 == 0, txt.data ? txt.data : "", txt.len, cuts, n, &s);
            if (s.bad || s.ended_early) bad++;
            sres_free(&s);
            tp_buf_free(&txt);
        }
        CHECK_MSG(bad == 0, "%s: %d random inputs broke the stream", names[k], bad);
        reasoning_parser_free(p);
    }
}

static void test_linear(void) {
    const char *names[] = {"qwen3", "granite", "openai_gptoss", "qwen3"};
    const char *units[] = {"<tool_call> \n <functio", "Here is my respons", "<|channel|>analysis<|message|>x<|en", " \n"};
    for (size_t k = 0; k < 4; k++) {
        reasoning_parser *p = mk(names[k], NULL);
        tp_buf txt = {0};
        if (k == 1) tp_puts(&txt, "Here is my thought process:");
        if (k == 3) tp_puts(&txt, "plan <tool_call>"); /* then 200 KB of blanks after the held <tool_call> */
        while (txt.len < 200000) tp_puts(&txt, units[k]);
        reasoning_stream *s;
        CHECK_OK(reasoning_stream_new(p, false, &s));
        clock_t t0 = clock();
        reasoning_delta d;
        for (size_t i = 0; i < txt.len; i++) reasoning_stream_push(s, txt.data + i, 1, &d);
        reasoning_stream_finish(s, &d);
        reasoning_result r;
        CHECK_OK(reasoning_extract(p, txt.data, txt.len, &r));
        reasoning_result_clear(&r);
        (void)reasoning_is_end(p, txt.data, txt.len);
        double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
        CHECK_MSG(secs < 10, "%s: %.1f s for 200 KB", names[k], secs);
        reasoning_stream_free(s);
        tp_buf_free(&txt);
        reasoning_parser_free(p);
    }
}

int main(void) {
    test_registry();
    test_qwen3();
    test_deepseek();
    test_granite();
    test_gptoss();
    test_chain();
    test_robustness();
    test_linear();
    TEST_END();
}
