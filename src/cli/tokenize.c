/*
 * tokenize.c: `vllmc tokenize` (text -> {"ids":[...]}) and `vllmc detokenize`
 * (ids -> {"text":"..."}). Both load only the tokenizer (tokenizer.json +
 * tokenizer_config.json) from --model, never the weights, so a tokenizer-only
 * folder works. One JSON object per line on stdout; errors are one
 * "vllmc: ..." line on stderr with exit code 1 (2 for usage errors).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <jansson.h>

#include "cli/cli.h"
#include "tokenizer/tokenizer.h"
#include "vllm.h"

#define EXIT_FAIL 1
#define EXIT_USAGE 2

static void tokenize_usage(FILE *f) {
    fprintf(f,
            "usage: vllmc tokenize --model DIR (--text TEXT | --input F.jsonl) [--add-special-tokens]\n\n"
            "Prints {\"ids\":[...]} per text. Special tokens (BOS, templates) are added only with\n"
            "--add-special-tokens; in F.jsonl each line is {\"text\": \"...\"} with an optional\n"
            "\"add_special_tokens\": true|false that overrides the flag. Blank lines are skipped.\n");
}

static void detokenize_usage(FILE *f) {
    fprintf(f,
            "usage: vllmc detokenize --model DIR (--ids 1,2,3 | --input F.jsonl) [--skip-special-tokens]\n\n"
            "Prints {\"text\":\"...\"} per id list. In F.jsonl each line is {\"ids\": [...]} with an\n"
            "optional \"skip_special_tokens\": true|false that overrides the flag. Blank lines are skipped.\n");
}

/* Loads only the tokenizer of a model folder; prints the error itself. */
static tokenizer *load_tokenizer(const char *dir) {
    tokenizer *tok = NULL;
    vllm_status st = tok_load_dir(dir, &tok);
    if (st == VLLM_ERR_NOT_FOUND) {
        fprintf(stderr, "vllmc: %s: no tokenizer.json (%s)\n", dir, vllm_last_error());
        return NULL;
    }
    if (st) {
        fprintf(stderr, "vllmc: %s\n", vllm_last_error());
        return NULL;
    }
    return tok;
}

/* ids (n) -> stdout `{"ids":[a,b,...]}\n` */
static void print_ids(const int32_t *ids, size_t n) {
    fputs("{\"ids\":[", stdout);
    for (size_t i = 0; i < n; i++) printf(i ? ",%d" : "%d", (int)ids[i]);
    fputs("]}\n", stdout);
}

/* text (len bytes of UTF-8, may hold U+0000) -> stdout `{"text":"..."}\n`, non-ASCII kept as UTF-8 */
static bool print_text(const char *text, size_t len) {
    json_t *o = json_object();
    json_t *s = json_stringn(text, len);
    if (!o || !s || json_object_set_new(o, "text", s)) {
        if (!o) json_decref(s);
        json_decref(o);
        fprintf(stderr, "vllmc: decoded text is not valid UTF-8 or out of memory\n");
        return false;
    }
    char *js = json_dumps(o, JSON_COMPACT); /* U+0000 is written as \u0000 */
    json_decref(o);
    if (!js) {
        fprintf(stderr, "vllmc: out of memory\n");
        return false;
    }
    fputs(js, stdout);
    fputc('\n', stdout);
    free(js);
    return true;
}

/* Checks stdout got everything (a closed pipe or a full disk is an error, not silence). */
static int finish_stdout(int rc) {
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "vllmc: writing to stdout failed: %s\n", strerror(errno));
        return EXIT_FAIL;
    }
    return rc;
}

static bool encode_print(const tokenizer *tok, const char *text, size_t len, bool add_special, const char *where) {
    int32_t *ids = NULL;
    size_t n = 0;
    vllm_status st = tok_encode(tok, text, len, add_special, &ids, &n);
    if (st) {
        fprintf(stderr, "vllmc: %s: %s\n", where, vllm_last_error());
        free(ids);
        return false;
    }
    print_ids(ids, n);
    free(ids);
    return true;
}

static bool decode_print(const tokenizer *tok, const int32_t *ids, size_t n, bool skip_special, const char *where) {
    char *text = NULL;
    size_t len = 0;
    static const int32_t none[1] = {0};
    vllm_status st = tok_decode_len(tok, n ? ids : none, n, skip_special, &text, &len);
    if (st) {
        fprintf(stderr, "vllmc: %s: %s\n", where, vllm_last_error());
        free(text);
        return false;
    }
    bool ok = print_text(text, len);
    free(text);
    return ok;
}

/* Reads F.jsonl line by line, calling fn(line object, where) for every non-blank line. */
typedef bool (*line_fn)(const tokenizer *tok, json_t *o, bool flag, const char *where);

static bool for_each_line(const char *path, const tokenizer *tok, bool flag, line_fn fn) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "vllmc: %s: cannot open: %s\n", path, strerror(errno));
        return false;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long long lineno = 0;
    bool ok = true;
    char where[512];
    while (ok && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        snprintf(where, sizeof where, "%s:%lld", path, lineno);
        size_t k = (size_t)len;
        while (k > 0 && (line[k - 1] == '\n' || line[k - 1] == '\r' || line[k - 1] == ' ' || line[k - 1] == '\t')) k--;
        size_t b = 0;
        while (b < k && (line[b] == ' ' || line[b] == '\t')) b++;
        if (b == k) continue;
        json_error_t err;
        json_t *o = json_loadb(line + b, k - b, JSON_ALLOW_NUL, &err);
        if (!o || !json_is_object(o)) {
            fprintf(stderr, "vllmc: %s: invalid JSON: %s\n", where, o ? "not an object" : err.text);
            ok = false;
        } else {
            ok = fn(tok, o, flag, where);
        }
        json_decref(o);
    }
    if (ok && ferror(f)) {
        fprintf(stderr, "vllmc: %s: read error: %s\n", path, strerror(errno));
        ok = false;
    }
    free(line);
    if (f != stdin) fclose(f);
    return ok;
}

/* The optional boolean field `key` of a line; false (with the error printed) when it is not a boolean. */
static bool line_flag(json_t *o, const char *key, bool dflt, const char *where, bool *out) {
    json_t *v = json_object_get(o, key);
    *out = dflt;
    if (!v || json_is_null(v)) return true;
    if (!json_is_boolean(v)) {
        fprintf(stderr, "vllmc: %s: \"%s\" must be true or false\n", where, key);
        return false;
    }
    *out = json_is_true(v);
    return true;
}

static bool tokenize_line(const tokenizer *tok, json_t *o, bool flag, const char *where) {
    json_t *t = json_object_get(o, "text");
    if (!json_is_string(t)) {
        fprintf(stderr, "vllmc: %s: needs \"text\" (a string)\n", where);
        return false;
    }
    bool add;
    if (!line_flag(o, "add_special_tokens", flag, where, &add)) return false;
    return encode_print(tok, json_string_value(t), json_string_length(t), add, where);
}

static bool detokenize_line(const tokenizer *tok, json_t *o, bool flag, const char *where) {
    json_t *a = json_object_get(o, "ids");
    if (!json_is_array(a)) {
        fprintf(stderr, "vllmc: %s: needs \"ids\" (an array of token ids)\n", where);
        return false;
    }
    bool skip;
    if (!line_flag(o, "skip_special_tokens", flag, where, &skip)) return false;
    size_t n = json_array_size(a);
    if (n > SIZE_MAX / sizeof(int32_t) - 1) {
        fprintf(stderr, "vllmc: %s: too many ids\n", where);
        return false;
    }
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) {
        fprintf(stderr, "vllmc: %s: out of memory (%zu ids)\n", where, n);
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
            fprintf(stderr, "vllmc: %s: ids[%zu] is not a token id (a non-negative integer)\n", where, i);
            free(ids);
            return false;
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    bool ok = decode_print(tok, ids, n, skip, where);
    free(ids);
    return ok;
}

#define NEED_ARG(cmd, usage_fn)                                              \
    do {                                                                     \
        if (i + 1 >= argc) {                                                 \
            fprintf(stderr, "vllmc: %s: %s needs a value\n", cmd, argv[i]);  \
            usage_fn(stderr);                                                \
            return EXIT_USAGE;                                               \
        }                                                                    \
    } while (0)

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *input = NULL;
    bool add_special = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            tokenize_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--model")) { NEED_ARG("tokenize", tokenize_usage); model = argv[++i];
        } else if (!strcmp(a, "--text")) { NEED_ARG("tokenize", tokenize_usage); text = argv[++i];
        } else if (!strcmp(a, "--input")) { NEED_ARG("tokenize", tokenize_usage); input = argv[++i];
        } else if (!strcmp(a, "--add-special-tokens")) { add_special = true;
        } else {
            fprintf(stderr, "vllmc: tokenize: unknown option '%s'\n", a);
            tokenize_usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (!model || !!text + !!input != 1) {
        fprintf(stderr, "vllmc: tokenize: needs --model and exactly one of --text, --input\n");
        tokenize_usage(stderr);
        return EXIT_USAGE;
    }
    tokenizer *tok = load_tokenizer(model);
    if (!tok) return EXIT_FAIL;
    bool ok = text ? encode_print(tok, text, strlen(text), add_special, "--text")
                   : for_each_line(input, tok, add_special, tokenize_line);
    tok_free(tok);
    return finish_stdout(ok ? 0 : EXIT_FAIL);
}

int cmd_detokenize(int argc, char **argv) {
    const char *model = NULL, *ids_arg = NULL, *input = NULL;
    bool skip_special = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            detokenize_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--model")) { NEED_ARG("detokenize", detokenize_usage); model = argv[++i];
        } else if (!strcmp(a, "--ids")) { NEED_ARG("detokenize", detokenize_usage); ids_arg = argv[++i];
        } else if (!strcmp(a, "--input")) { NEED_ARG("detokenize", detokenize_usage); input = argv[++i];
        } else if (!strcmp(a, "--skip-special-tokens")) { skip_special = true;
        } else {
            fprintf(stderr, "vllmc: detokenize: unknown option '%s'\n", a);
            detokenize_usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (!model || !!ids_arg + !!input != 1) {
        fprintf(stderr, "vllmc: detokenize: needs --model and exactly one of --ids, --input\n");
        detokenize_usage(stderr);
        return EXIT_USAGE;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    if (ids_arg) {
        /* "" (or only spaces) is the empty sequence, which decodes to "" */
        if (ids_arg[strspn(ids_arg, " ")] != 0 && !cli_parse_ids(ids_arg, &ids, &n)) {
            fprintf(stderr, "vllmc: detokenize: --ids must be comma-separated non-negative integers, got '%s'\n",
                    ids_arg);
            return EXIT_USAGE;
        }
    }
    tokenizer *tok = load_tokenizer(model);
    if (!tok) {
        free(ids);
        return EXIT_FAIL;
    }
    bool ok = ids_arg ? decode_print(tok, ids, n, skip_special, "--ids")
                      : for_each_line(input, tok, skip_special, detokenize_line);
    free(ids);
    tok_free(tok);
    return finish_stdout(ok ? 0 : EXIT_FAIL);
}
