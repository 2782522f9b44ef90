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

#include <jansson.h>

#include "cli/cli.h"
#include "cli/cli_hub.h"
#include "cli/dataset.h"
#include "tokenizer/tokenizer.h"
#include "vllm.h"
#include "loader/gguf.h"
#include "loader/gguf_config.h"

#define EXIT_FAIL 1
#define EXIT_USAGE 2

static void tokenize_usage(FILE *f) {
    fprintf(f,
            "usage: vllmc tokenize --model DIR|ID (--text TEXT | --input F.jsonl) [--add-special-tokens]\n"
            "                      [--revision REV]\n\n"
            "Prints {\"ids\":[...]} per text. Special tokens (BOS, templates) are added only with\n"
            "--add-special-tokens; in F.jsonl each line is {\"text\": \"...\"} with an optional\n"
            "\"add_special_tokens\": true|false that overrides the flag. Blank lines are skipped.\n");
}

static void detokenize_usage(FILE *f) {
    fprintf(f,
            "usage: vllmc detokenize --model DIR|ID (--ids 1,2,3 | --input F.jsonl) [--skip-special-tokens]\n"
            "                        [--revision REV]\n\n"
            "Prints {\"text\":\"...\"} per id list. In F.jsonl each line is {\"ids\": [...]} with an\n"
            "optional \"skip_special_tokens\": true|false that overrides the flag. Blank lines are skipped.\n");
}

/* Loads only the tokenizer of a model folder or GGUF file; prints the error itself. */
/* The tokenizer of a folder, a GGUF file or a Hugging Face id (its tokenizer files alone, at revision). */
static tokenizer *load_tokenizer_at(const char *dir);
static tokenizer *load_tokenizer(const char *dir, const char *revision) {
    vllm_engine_options eo = vllm_engine_default_options();
    eo.revision = revision;
    char *hub_model = NULL, *hub_tok = NULL;
    if (!cli_hub_resolve("vllmc", &dir, &eo, true, &hub_model, &hub_tok)) return NULL;
    tokenizer *tok = load_tokenizer_at(dir);
    free(hub_model);
    free(hub_tok);
    return tok;
}

static tokenizer *load_tokenizer_at(const char *dir) {
    tokenizer *tok = NULL;
    vllm_status st;
    if (ggc_is_gguf_path(dir)) {
        gguf_file *gf = NULL;
        if (!(st = gguf_open(dir, &gf))) st = tok_load_gguf(gf, &tok);
        gguf_close(gf);
    } else {
        st = tok_load_dir(dir, &tok);
    }
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

/* What the --input line callbacks need. */
typedef struct line_ctx {
    const tokenizer *tok;
    bool flag;           /* --add-special-tokens / --skip-special-tokens, a line may override it */
} line_ctx;

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

static cli_jsonl_step tokenize_line(json_t *o, const char *where, void *arg) {
    const line_ctx *c = arg;
    json_t *t = json_object_get(o, "text");
    if (!json_is_string(t)) {
        fprintf(stderr, "vllmc: %s: needs \"text\" (a string)\n", where);
        return CLI_JSONL_FAIL;
    }
    bool add;
    if (!line_flag(o, "add_special_tokens", c->flag, where, &add)) return CLI_JSONL_FAIL;
    bool ok = encode_print(c->tok, json_string_value(t), json_string_length(t), add, where);
    return ok ? CLI_JSONL_NEXT : CLI_JSONL_FAIL;
}

static cli_jsonl_step detokenize_line(json_t *o, const char *where, void *arg) {
    const line_ctx *c = arg;
    json_t *a = json_object_get(o, "ids");
    if (!json_is_array(a)) {
        fprintf(stderr, "vllmc: %s: needs \"ids\" (an array of token ids)\n", where);
        return CLI_JSONL_FAIL;
    }
    bool skip;
    if (!line_flag(o, "skip_special_tokens", c->flag, where, &skip)) return CLI_JSONL_FAIL;
    size_t n = json_array_size(a);
    if (n > SIZE_MAX / sizeof(int32_t) - 1) {
        fprintf(stderr, "vllmc: %s: too many ids\n", where);
        return CLI_JSONL_FAIL;
    }
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) {
        fprintf(stderr, "vllmc: %s: out of memory (%zu ids)\n", where, n);
        return CLI_JSONL_FAIL;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
            fprintf(stderr, "vllmc: %s: ids[%zu] is not a token id (a non-negative integer)\n", where, i);
            free(ids);
            return CLI_JSONL_FAIL;
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    bool ok = decode_print(c->tok, ids, n, skip, where);
    free(ids);
    return ok ? CLI_JSONL_NEXT : CLI_JSONL_FAIL;
}

/* The options of both commands: --model DIR, exactly one of VALUE_OPT or --input, and FLAG_OPT. */
typedef struct tok_args {
    const char *cmd;         /* "tokenize" or "detokenize" */
    const char *value_opt;   /* "--text" or "--ids" */
    const char *flag_opt;    /* "--add-special-tokens" or "--skip-special-tokens" */
    void (*usage)(FILE *f);
    const char *model, *value, *input;
    bool flag;
    vllm_engine_options eo;  /* --revision */
} tok_args;

/* 0: parsed; 1: --help printed; 2: a usage error printed (then the usage). */
static int parse_tok_args(int argc, char **argv, tok_args *t) {
    char who[32];
    snprintf(who, sizeof who, "vllmc: %s", t->cmd);
    t->eo = vllm_engine_default_options();
    int v;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            t->usage(stdout);
            return 1;
        } else if (!strcmp(a, "--model")) { CLI_NEED_VALUE(who); t->model = argv[++i];
        } else if (!strcmp(a, t->value_opt)) { CLI_NEED_VALUE(who); t->value = argv[++i];
        } else if (!strcmp(a, "--input")) { CLI_NEED_VALUE(who); t->input = argv[++i];
        } else if (!strcmp(a, t->flag_opt)) { t->flag = true;
        } else if ((v = cli_hub_opt(who, argc, argv, &i, &t->eo)) != 0) { if (v < 0) goto bad;
        } else {
            fprintf(stderr, "%s: unknown option '%s'\n", who, a);
            goto bad;
        }
    }
    if (!t->model || !!t->value + !!t->input != 1) {
        fprintf(stderr, "%s: needs --model and exactly one of %s, --input\n", who, t->value_opt);
        goto bad;
    }
    return 0;
bad:
    t->usage(stderr);
    return 2;
}

int cmd_tokenize(int argc, char **argv) {
    tok_args t = {.cmd = "tokenize", .value_opt = "--text", .flag_opt = "--add-special-tokens",
                  .usage = tokenize_usage};
    int prc = parse_tok_args(argc, argv, &t);
    if (prc) return prc == 1 ? 0 : EXIT_USAGE;
    tokenizer *tok = load_tokenizer(t.model, t.eo.revision);
    if (!tok) return EXIT_FAIL;
    line_ctx c = {.tok = tok, .flag = t.flag};
    bool ok = t.value ? encode_print(tok, t.value, strlen(t.value), t.flag, "--text")
                      : cli_jsonl_foreach("vllmc", t.input, JSON_ALLOW_NUL, tokenize_line, &c);
    tok_free(tok);
    return finish_stdout(ok ? 0 : EXIT_FAIL);
}

int cmd_detokenize(int argc, char **argv) {
    tok_args t = {.cmd = "detokenize", .value_opt = "--ids", .flag_opt = "--skip-special-tokens",
                  .usage = detokenize_usage};
    int prc = parse_tok_args(argc, argv, &t);
    if (prc) return prc == 1 ? 0 : EXIT_USAGE;
    const char *ids_arg = t.value;
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
    tokenizer *tok = load_tokenizer(t.model, t.eo.revision);
    if (!tok) {
        free(ids);
        return EXIT_FAIL;
    }
    line_ctx c = {.tok = tok, .flag = t.flag};
    bool ok = ids_arg ? decode_print(tok, ids, n, t.flag, "--ids")
                      : cli_jsonl_foreach("vllmc", t.input, JSON_ALLOW_NUL, detokenize_line, &c);
    free(ids);
    tok_free(tok);
    return finish_stdout(ok ? 0 : EXIT_FAIL);
}
