/* main.c: the vllmc entry point: dispatches to subcommands. */
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
            "  chat            interactive multi-turn chat with a model or a server (vllmc chat --help)\n"
            "  chat-template   render a model's chat template for a conversation\n"
            "  bench           latency and throughput benchmarks (vllmc bench --help)\n"
            "  serve           OpenAI-compatible HTTP server (vllmc serve MODEL --help)\n"
            "  version         print the version\n",
            VLLM_VERSION);
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
    if (!strcmp(cmd, "chat")) return cmd_chat(argc - 1, argv + 1);
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
