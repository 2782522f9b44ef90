/*
 * test_structured_engine.c: structured outputs end to end on the bundled model (stories260K, sampled at
 * temperature 1, so the mask decides every token): choice, regex, EBNF grammar and JSON object outputs are
 * sentences of their constraint and end with EOS where the constraint is complete; the same seeds give the same
 * outputs with chunked prefill, preemption and prefix caching on or off; logprobs are those of the masked
 * distribution; n > 1 samples each keep their own matcher; a grammar that ended lets ignore_eos go on
 * unconstrained; reasoning markers delay the constraint; bad constraints are refused at add_request.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "structured/so_spec.h"
#include "test.h"
#include "vllm.h"

static vllm_completion *gen(vllm_engine *e, const vllm_sampling_params *sp) {
    const int32_t ids[] = {1, 403, 407, 261};
    vllm_prompt p = {.token_ids = ids, .num_token_ids = 4};
    vllm_completion *c = NULL;
    CHECK_OK(vllm_generate(e, &p, 1, sp, false, &c, NULL));
    return c;
}

/* text is a whole sentence of the constraint */
static bool in_language(const vllm_structured_outputs *s, const char *text) {
    so_compiled *c = NULL;
    so_matcher *m = NULL;
    bool ok = so_spec_compile(s, &c) == VLLM_OK && so_matcher_create(c, &m) == VLLM_OK &&
              so_match_bytes(m, (const uint8_t *)text, strlen(text)) && so_match_can_end(m);
    so_matcher_free(m);
    so_compiled_free(c);
    return ok;
}

/* text can be continued into a sentence of the constraint */
static bool is_prefix(const vllm_structured_outputs *s, const char *text) {
    so_compiled *c = NULL;
    so_matcher *m = NULL;
    bool ok = so_spec_compile(s, &c) == VLLM_OK && so_matcher_create(c, &m) == VLLM_OK &&
              so_match_bytes(m, (const uint8_t *)text, strlen(text));
    so_matcher_free(m);
    so_compiled_free(c);
    return ok;
}

static vllm_sampling_params sampled(uint64_t seed, int max_tokens) {
    vllm_sampling_params sp = vllm_sampling_default_params();
    sp.temperature = 1.0f;
    sp.has_seed = true;
    sp.seed = seed;
    sp.max_tokens = max_tokens;
    return sp;
}

/* many seeds: every output that stopped is in the language; the ones cut by max_tokens are prefixes */
static void check_kind(vllm_engine *e, const vllm_structured_outputs *s, int max_tokens, int min_stopped,
                       const char *what) {
    int stopped = 0;
    for (uint64_t seed = 1; seed <= 12; seed++) {
        vllm_sampling_params sp = sampled(seed, max_tokens);
        sp.structured_outputs = *s;
        vllm_completion *c = gen(e, &sp);
        if (!c) return;
        if (c->finish_reason == VLLM_FINISH_STOP) {
            stopped++;
            CHECK_MSG(in_language(s, c->text), "%s seed %llu: '%s' is not in the language", what,
                      (unsigned long long)seed, c->text);
        } else {
            CHECK_MSG(c->finish_reason == VLLM_FINISH_LENGTH, "%s seed %llu: finish %d", what,
                      (unsigned long long)seed, (int)c->finish_reason);
            CHECK_MSG(is_prefix(s, c->text), "%s seed %llu: '%s' does not start a sentence", what,
                      (unsigned long long)seed, c->text);
        }
        vllm_completions_free(c, 1);
    }
    CHECK_MSG(stopped >= min_stopped, "%s: %d of 12 outputs ended", what, stopped);
}

static void test_kinds(vllm_engine *e) {
    const char *choices[] = {"Lily", "Tom and Ben", "once upon a time", "x\"y\\z"};
    vllm_structured_outputs s = {.choice = choices, .num_choice = 4};
    check_kind(e, &s, 32, 12, "choice");
    s = (vllm_structured_outputs){.regex = "(the|a) [a-z]{2,6}( [a-z]{1,5}){0,3}\\."};
    check_kind(e, &s, 64, 12, "regex");
    /* a finite language: every output ends */
    s = (vllm_structured_outputs){.grammar = "root ::= term ((\"+\" | \"-\") term){0,2} \"=\" num\n"
                                             "term ::= num | \"(\" num \"*\" num \")\"\n"
                                             "num ::= [1-9] [0-9]{0,2}\n"};
    check_kind(e, &s, 64, 12, "grammar");
    /* an unbounded one: outputs cut by max_tokens are prefixes */
    s = (vllm_structured_outputs){.json_object = true};
    check_kind(e, &s, 48, 0, "json_object");
    s = (vllm_structured_outputs){.json = "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\", "
                                          "\"maxLength\": 6}, \"age\": {\"type\": \"integer\", \"minimum\": 0, "
                                          "\"maximum\": 120}, \"pet\": {\"enum\": [\"cat\", \"dog\", null]}}, "
                                          "\"required\": [\"name\", \"age\"]}",
                                  .disable_any_whitespace = true};
    check_kind(e, &s, 64, 12, "json schema");
    /* they parse as the schema's objects */
    for (uint64_t seed = 1; seed <= 12; seed++) {
        vllm_sampling_params sp = sampled(seed, 64);
        sp.structured_outputs = s;
        vllm_completion *c = gen(e, &sp);
        if (c && c->finish_reason == VLLM_FINISH_STOP) {
            json_error_t je;
            json_t *j = json_loads(c->text, 0, &je);
            json_t *age = json_object_get(j, "age");
            CHECK_MSG(json_is_object(j) && json_is_string(json_object_get(j, "name")) && json_is_integer(age) &&
                          json_integer_value(age) >= 0 && json_integer_value(age) <= 120,
                      "json schema seed %llu: '%s'", (unsigned long long)seed, c->text);
            json_decref(j);
        }
        vllm_completions_free(c, 1);
    }
}

/* outputs of a few seeds, one string, for comparing layouts */
static char *run_all(vllm_engine *e) {
    const char *choices[] = {"Lily", "Tom and Ben", "once upon a time"};
    vllm_structured_outputs kinds[3] = {
        {.choice = choices, .num_choice = 3},
        {.regex = "[a-z]+( [a-z]+){2,5}\\."},
        {.json_object = true},
    };
    size_t cap = 1 << 16, n = 0;
    char *out = calloc(cap, 1);
    for (int k = 0; k < 3 && out; k++)
        for (uint64_t seed = 1; seed <= 4; seed++) {
            vllm_sampling_params sp = sampled(seed, 40);
            sp.structured_outputs = kinds[k];
            sp.n = 2;
            vllm_completion *c = gen(e, &sp);
            if (!c) continue;
            n += (size_t)snprintf(out + n, cap - n, "%s|%s|%d\n", c->text, c->siblings ? c->siblings[0].text : "",
                                  (int)c->finish_reason);
            vllm_completions_free(c, 1);
        }
    return out;
}

static vllm_engine *engine(int blocks, int batched, bool prefix) {
    vllm_engine_options o = vllm_engine_default_options();
    if (blocks) o.max_model_len = 64; /* (one sequence must fit the small cache) */
    o.num_threads = 1;
    o.num_kv_blocks = blocks;
    o.max_num_batched_tokens = batched;
    o.enable_prefix_caching = prefix;
    o.block_size = 4;
    vllm_engine *e = NULL;
    CHECK_OK(vllm_engine_create(VLLM_SOURCE_DIR "/models/stories260K", &o, &e));
    return e;
}

static void test_layouts(void) {
    vllm_engine *a = engine(0, 8192, true), *b = engine(0, 3, false), *c = engine(16, 8, true);
    /* the masks filled while the forward runs (what a GPU backend does; VLLM_MASKS_OVERLAP forces it here) */
    setenv("VLLM_MASKS_OVERLAP", "1", 1);
    vllm_engine *d = engine(0, 8192, true);
    unsetenv("VLLM_MASKS_OVERLAP");
    if (!a || !b || !c || !d) return;
    char *ra = run_all(a), *rb = run_all(b), *rc = run_all(c), *rd = run_all(d);
    CHECK_MSG(ra && rb && !strcmp(ra, rb), "chunked prefill, no prefix cache:\n%s\nvs\n%s", ra, rb);
    CHECK_MSG(ra && rc && !strcmp(ra, rc), "preemption:\n%s\nvs\n%s", ra, rc);
    CHECK_MSG(ra && rd && !strcmp(ra, rd), "masks during the forward:\n%s\nvs\n%s", ra, rd);
    free(ra);
    free(rb);
    free(rc);
    free(rd);
    vllm_engine_free(d);
    vllm_engine_free(a);
    vllm_engine_free(b);
    vllm_engine_free(c);
}

static void test_logprobs_and_eos(vllm_engine *e) {
    /* logprobs of the masked distribution: after "Lily" / "Tom" the allowed tokens hold all the mass */
    const char *choices[] = {"Lily", "Tom"};
    vllm_sampling_params sp = sampled(7, 8);
    sp.structured_outputs = (vllm_structured_outputs){.choice = choices, .num_choice = 2};
    sp.logprobs = 5;
    vllm_completion *c = gen(e, &sp);
    if (c && c->num_tokens > 0) {
        double mass = 0;
        for (int k = 0; k < 5; k++)
            if (c->top_logprobs[k] > -1e30f) mass += exp(c->top_logprobs[k]);
        CHECK_MSG(mass > 0.999, "first token's top-5 mass %g (the mask leaves few tokens)", mass);
        CHECK(c->logprobs[0] <= 0.0f && c->logprobs[0] > -30.0f);
    }
    vllm_completions_free(c, 1);
    /* ignore_eos: the grammar ends with the EOS it takes, then the output goes on unconstrained */
    sp = sampled(3, 20);
    sp.structured_outputs = (vllm_structured_outputs){.choice = choices, .num_choice = 2};
    sp.ignore_eos = true;
    c = gen(e, &sp);
    CHECK(c && c->finish_reason == VLLM_FINISH_LENGTH && c->num_tokens == 20);
    CHECK(c && (!strncmp(c->text, "Lily", 4) || !strncmp(c->text, "Tom", 3)));
    vllm_completions_free(c, 1);
}

/* reasoning markers: unconstrained up to and including the end marker, then the constraint; an end marker in
 * the prompt (after its last start marker) constrains from the first token */
static void test_reasoning(vllm_engine *e) {
    const char *choices[] = {" Lily", " Tom"};
    for (uint64_t seed = 1; seed <= 6; seed++) {
        vllm_sampling_params sp = sampled(seed, 60);
        sp.structured_outputs = (vllm_structured_outputs){.choice = choices, .num_choice = 2,
                                                          .reasoning_start = "\xe2\x96\x81upon", /* "▁upon" */
                                                          .reasoning_end = "."};
        vllm_completion *c = gen(e, &sp); /* the prompt has "▁upon" last: reasoning */
        if (!c) continue;
        const char *dot = strchr(c->text, '.');
        if (c->finish_reason == VLLM_FINISH_STOP) {
            CHECK_MSG(dot && (!strcmp(dot + 1, " Lily") || !strcmp(dot + 1, " Tom")), "seed %llu: '%s'",
                      (unsigned long long)seed, c->text);
        }
        vllm_completions_free(c, 1);
        /* the end marker in the prompt after the start: constrained at once */
        const int32_t ids[] = {1, 403, 407, 426};
        vllm_prompt p = {.token_ids = ids, .num_token_ids = 4};
        c = NULL;
        CHECK_OK(vllm_generate(e, &p, 1, &sp, false, &c, NULL));
        CHECK_MSG(c && (!strcmp(c->text, " Lily") || !strcmp(c->text, " Tom")), "seed %llu: '%s'",
                  (unsigned long long)seed, c ? c->text : "");
        vllm_completions_free(c, 1);
    }
    vllm_sampling_params sp = sampled(1, 8);
    sp.structured_outputs = (vllm_structured_outputs){.choice = choices, .num_choice = 2, .reasoning_end = "</think>"};
    int32_t bos = 1;
    vllm_prompt p = {.token_ids = &bos, .num_token_ids = 1};
    CHECK(vllm_engine_add_request(e, "bad-think", &p, &sp) == VLLM_ERR_INVALID_ARG);
    CHECK(strstr(vllm_last_error(), "not tokens of the vocabulary") != NULL);
}

static void test_refused(vllm_engine *e) {
    int32_t bos = 1;
    vllm_prompt p = {.token_ids = &bos, .num_token_ids = 1};
    vllm_sampling_params sp = sampled(1, 8);
    sp.structured_outputs.grammar = "root ::= missing";
    CHECK(vllm_engine_add_request(e, "bad1", &p, &sp) == VLLM_ERR_INVALID_ARG);
    CHECK(strstr(vllm_last_error(), "not defined") != NULL);
    sp.structured_outputs = (vllm_structured_outputs){.regex = "a", .json_object = true};
    CHECK(vllm_engine_add_request(e, "bad2", &p, &sp) == VLLM_ERR_INVALID_ARG);
    CHECK(strstr(vllm_last_error(), "only use one kind") != NULL);
    const char *none[1] = {NULL};
    sp.structured_outputs = (vllm_structured_outputs){.choice = none, .num_choice = 0};
    CHECK(vllm_engine_add_request(e, "bad3", &p, &sp) == VLLM_ERR_INVALID_ARG);
    sp.structured_outputs = (vllm_structured_outputs){.regex = "(a"};
    CHECK(vllm_engine_add_request(e, "bad4", &p, &sp) == VLLM_ERR_INVALID_ARG);
    sp.structured_outputs = (vllm_structured_outputs){.json = "{\"type\": \"object\", \"minProperties\": "};
    CHECK(vllm_engine_add_request(e, "bad5", &p, &sp) == VLLM_ERR_INVALID_ARG);
}

int main(void) {
    vllm_engine *e = engine(0, 8192, true);
    if (!e) TEST_END();
    test_kinds(e);
    test_logprobs_and_eos(e);
    test_reasoning(e);
    test_refused(e);
    vllm_engine_free(e);
    test_layouts();
    TEST_END();
}
