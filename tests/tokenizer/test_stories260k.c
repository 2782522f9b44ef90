/*
 * test_stories260k.c: the bundled model's tokenizer (models/stories260K/tokenizer.json)
 * against tests/fixtures/stories260K_tokens.jsonl, ids computed by llama2.c's own encoder
 * (an independent implementation): exact ids, decode(encode(text)) == text, and <s> first
 * with add_special. Skips when the model folder or the fixture is absent.
 */
#define _POSIX_C_SOURCE 200809L /* getline */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "tokenizer/tokenizer.h"

#ifndef VLLM_SOURCE_DIR
#define VLLM_SOURCE_DIR "."
#endif
#define MODEL_DIR VLLM_SOURCE_DIR "/models/stories260K"
#define FIXTURE VLLM_SOURCE_DIR "/tests/fixtures/stories260K_tokens.jsonl"

static void print_ids(const char *what, const int32_t *ids, size_t n) {
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
    fputc('\n', stderr);
}

int main(void) {
    FILE *f = fopen(FIXTURE, "r");
    FILE *t = fopen(MODEL_DIR "/tokenizer.json", "r");
    if (t) fclose(t);
    if (!f || !t) {
        if (f) fclose(f);
        TEST_SKIP("models/stories260K/tokenizer.json or tests/fixtures/stories260K_tokens.jsonl missing");
    }
    tokenizer *tok = NULL;
    CHECK_OK(tok_load_dir(MODEL_DIR, &tok));
    if (!tok) {
        fclose(f);
        TEST_END();
    }
    CHECK(tok_vocab_size(tok) == 512);
    CHECK(tok_bos_id(tok) == 1 && tok_eos_id(tok) == 2);
    CHECK(tok_is_special(tok, 1) && !tok_is_special(tok, 300));

    char *line = NULL;
    size_t cap = 0;
    int lines = 0;
    while (getline(&line, &cap, f) > 0) {
        json_error_t err;
        json_t *o = json_loads(line, 0, &err);
        CHECK_MSG(o != NULL, "fixture line %d: %s", lines + 1, err.text);
        if (!o) continue;
        json_t *jtext = json_object_get(o, "text"), *jids = json_object_get(o, "ids");
        const char *text = json_string_value(jtext);
        size_t len = json_string_length(jtext), n_ref = json_array_size(jids);
        int32_t *ids = NULL;
        size_t n = 0;
        CHECK_OK(tok_encode(tok, text, len, false, &ids, &n));
        bool same = n == n_ref;
        for (size_t i = 0; same && i < n; i++) same = ids[i] == (int32_t)json_integer_value(json_array_get(jids, i));
        CHECK_MSG(same, "encode '%s'", text);
        if (!same) {
            print_ids("got     ", ids, n);
            fprintf(stderr, "  llama2.c:");
            for (size_t i = 0; i < n_ref; i++) fprintf(stderr, " %lld", (long long)json_integer_value(json_array_get(jids, i)));
            fputc('\n', stderr);
        }
        char *back = NULL;
        CHECK_OK(tok_decode(tok, ids, n, false, &back));
        CHECK_MSG(back && strlen(back) == len && memcmp(back, text, len) == 0, "decode(encode('%s')) = '%s'", text,
                  back ? back : "(null)");
        free(back);
        free(ids);
        json_decref(o);
        lines++;
    }
    free(line);
    fclose(f);
    CHECK(lines > 0);

    /* add_special: <s> then the plain encoding */
    const char *once = "Once upon a time";
    int32_t *plain = NULL, *special = NULL;
    size_t n_plain = 0, n_special = 0;
    CHECK_OK(tok_encode(tok, once, strlen(once), false, &plain, &n_plain));
    CHECK_OK(tok_encode(tok, once, strlen(once), true, &special, &n_special));
    CHECK(n_plain > 0 && n_special == n_plain + 1 && special[0] == 1 &&
          memcmp(special + 1, plain, n_plain * sizeof(int32_t)) == 0);
    char *text = NULL;
    CHECK_OK(tok_decode(tok, special, n_special, true, &text));
    CHECK(text && strcmp(text, once) == 0);
    free(text);
    free(plain);
    free(special);
    tok_free(tok);
    TEST_END();
}
