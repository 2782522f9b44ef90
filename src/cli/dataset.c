/*
 * dataset.c: the CLI's JSONL input files (format in dataset.h): the line
 * walker of tokenize / detokenize --input and the prompt datasets of
 * generate --prompts-file, bench throughput --dataset and bench serve
 * --dataset-path.
 *
 * The prompt lines follow vLLM's CustomDataset (vllm/benchmarks/datasets.py,
 * CustomDataset.sample): the file's first N lines, "prompt" per line, and the
 * line's "output_tokens" read only when no --output-len is given. vllm.c also
 * takes "prompt_token_ids" (a token-id prompt) and the key "output_len".
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "cli/dataset.h"

static bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

bool cli_jsonl_foreach(const char *cmd, const char *path, size_t json_flags, cli_jsonl_fn fn, void *ctx) {
    bool is_stdin = !strcmp(path, "-");
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: %s: cannot open: %s\n", cmd, path, strerror(errno));
        return false;
    }
    size_t where_cap = strlen(path) + 24; /* "path:" + a line number */
    char *where = malloc(where_cap);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long long lineno = 0;
    bool ok = where != NULL, done = false;
    if (!ok) fprintf(stderr, "%s: %s: out of memory\n", cmd, path);
    while (ok && !done && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        size_t b = 0, e = (size_t)len;
        while (e > 0 && is_blank(line[e - 1])) e--;
        while (b < e && is_blank(line[b])) b++;
        if (b == e) continue; /* blank lines are skipped */
        snprintf(where, where_cap, "%s:%lld", path, lineno);
        json_error_t err;
        json_t *o = json_loadb(line + b, e - b, json_flags, &err);
        if (!json_is_object(o)) {
            fprintf(stderr, "%s: %s: invalid JSON: %s\n", cmd, where, o ? "not an object" : err.text);
            ok = false;
        } else {
            cli_jsonl_step step = fn(o, where, ctx);
            if (step == CLI_JSONL_FAIL) ok = false;
            if (step == CLI_JSONL_STOP) done = true;
        }
        json_decref(o);
    }
    if (ok && ferror(f)) {
        fprintf(stderr, "%s: %s: read error: %s\n", cmd, path, strerror(errno));
        ok = false;
    }
    free(line);
    free(where);
    if (!is_stdin) fclose(f);
    return ok;
}

bool cli_dataset_push(cli_dataset *d, cli_prompt p) {
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 16;
        if (cap < d->cap || cap > SIZE_MAX / sizeof *d->items) return false;
        cli_prompt *items = realloc(d->items, cap * sizeof *items);
        if (!items) return false;
        d->items = items;
        d->cap = cap;
    }
    d->items[d->n++] = p;
    return true;
}

void cli_dataset_free(cli_dataset *d) {
    for (size_t i = 0; i < d->n; i++) {
        free(d->items[i].text);
        free(d->items[i].ids);
    }
    free(d->items);
    memset(d, 0, sizeof *d);
}

vllm_prompt *cli_dataset_prompts(const cli_dataset *d) {
    if (d->n > SIZE_MAX / sizeof(vllm_prompt)) return NULL;
    vllm_prompt *p = malloc((d->n ? d->n : 1) * sizeof *p);
    if (!p) return NULL;
    for (size_t i = 0; i < d->n; i++) {
        const cli_prompt *it = &d->items[i];
        p[i] = (vllm_prompt){.text = it->text, .token_ids = it->ids, .num_token_ids = it->num_ids};
    }
    return p;
}

/* ------------------------------------------------------------------ */
/* Prompt lines                                                        */
/* ------------------------------------------------------------------ */

typedef struct prompt_reader {
    const char *cmd;
    cli_dataset *d;
    size_t max_prompts, count;
    int output_len;
} prompt_reader;

/* The line's output length into *out (output_len, else output_tokens); false with the error printed. */
static bool line_output_len(const prompt_reader *r, json_t *o, const char *where, int *out) {
    const char *key = "output_len";
    json_t *v = json_object_get(o, key);
    if (!v) {
        key = "output_tokens";
        v = json_object_get(o, key);
    }
    if (!v) {
        fprintf(stderr, "%s: %s: no \"output_len\" or \"output_tokens\" (or give --output-len)\n", r->cmd, where);
        return false;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > INT32_MAX) {
        fprintf(stderr, "%s: %s: %s must be a positive integer\n", r->cmd, where, key);
        return false;
    }
    *out = (int)json_integer_value(v);
    return true;
}

static cli_jsonl_step prompt_line(json_t *o, const char *where, void *arg) {
    prompt_reader *r = arg;
    cli_prompt p = {0};
    if (r->output_len > 0) {
        p.output_len = r->output_len;
    } else if (r->output_len == CLI_OUTPUT_LEN_FROM_FILE && !line_output_len(r, o, where, &p.output_len)) {
        return CLI_JSONL_FAIL;
    }
    json_t *text = json_object_get(o, "prompt");
    json_t *ids = json_object_get(o, "prompt_token_ids");
    if (json_is_string(text)) {
        p.text = strdup(json_string_value(text));
        if (!p.text) goto oom;
    } else if (json_is_array(ids) && json_array_size(ids) > 0) {
        size_t n = json_array_size(ids);
        if (n > INT32_MAX) {
            fprintf(stderr, "%s: %s: prompt_token_ids holds more than %d ids\n", r->cmd, where, INT32_MAX);
            return CLI_JSONL_FAIL;
        }
        p.ids = malloc(n * sizeof *p.ids);
        if (!p.ids) goto oom;
        p.num_ids = n;
        for (size_t k = 0; k < n; k++) {
            json_t *v = json_array_get(ids, k);
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
                fprintf(stderr, "%s: %s: prompt_token_ids[%zu] is not a valid token id\n", r->cmd, where, k);
                free(p.ids);
                return CLI_JSONL_FAIL;
            }
            p.ids[k] = (int32_t)json_integer_value(v);
        }
    } else {
        fprintf(stderr, "%s: %s: needs \"prompt\" (string) or \"prompt_token_ids\" (non-empty array)\n", r->cmd,
                where);
        return CLI_JSONL_FAIL;
    }
    if (!cli_dataset_push(r->d, p)) goto oom;
    r->count++;
    return r->count >= r->max_prompts ? CLI_JSONL_STOP : CLI_JSONL_NEXT; /* lines past the last are not read */
oom:
    free(p.text);
    free(p.ids);
    fprintf(stderr, "%s: %s: out of memory\n", r->cmd, where);
    return CLI_JSONL_FAIL;
}

bool cli_dataset_read_jsonl(const char *cmd, const char *path, size_t max_prompts, int output_len, cli_dataset *d) {
    prompt_reader r = {.cmd = cmd, .d = d, .max_prompts = max_prompts, .output_len = output_len};
    if (max_prompts > 0 && !cli_jsonl_foreach(cmd, path, 0, prompt_line, &r)) return false;
    if (r.count == 0) {
        fprintf(stderr, "%s: %s: no prompts\n", cmd, path);
        return false;
    }
    return true;
}
