/* main.c: the vllmc entry point: dispatches to subcommands. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "vllm.h"

int cmd_serve(int argc, char **argv); /* serve.c: `vllmc serve` */

static void usage(FILE *f) {
    fprintf(f,
            "vllmc %s: LLM inference and serving in C\n\n"
            "usage: vllmc <command> [options]\n\n"
            "commands:\n"
            "  generate        offline generation (vllmc generate --help)\n"
            "  tokenize        text -> token ids as JSON\n"
            "  detokenize      token ids -> text as JSON\n"
            "  chat-template   render a model's chat template for a conversation\n"
            "  bench           latency and throughput benchmarks (vllmc bench --help)\n"
            "  serve           OpenAI-compatible HTTP server (vllmc serve MODEL --help)\n"
            "  version         print the version\n",
            VLLM_VERSION);
}

bool cli_parse_int(const char *s, long long lo, long long hi, long long *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool cli_parse_float(const char *s, double *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v)) return false;
    *out = v;
    return true;
}

bool cli_parse_ids(const char *s, int32_t **ids, size_t *n) {
    *ids = NULL;
    *n = 0;
    size_t cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    int32_t *a = malloc(cap * sizeof *a);
    if (!a) return false;
    const char *p = s;
    size_t k = 0;
    while (*p) {
        char *end;
        errno = 0;
        while (*p == ' ') p++;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) {
            free(a);
            return false;
        }
        a[k++] = (int32_t)v;
        p = end;
        while (*p == ' ') p++;
        if (*p == ',') {
            p++;
            if (!*p) {
                free(a);
                return false;
            }
        } else if (*p) {
            free(a);
            return false;
        }
    }
    if (k == 0) {
        free(a);
        return false;
    }
    *ids = a;
    *n = k;
    return true;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "generate")) return cmd_generate(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "detokenize")) return cmd_detokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "chat-template")) return cmd_chat_template(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return cmd_serve(argc - 1, argv + 1); /* serve.c */
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("vllmc %s\n", VLLM_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "vllmc: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
