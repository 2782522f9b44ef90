/* tokenize.c: `vllmc tokenize` and `vllmc detokenize` (in progress). */
#include <stdio.h>

#include "cli/cli.h"

int cmd_tokenize(int argc, char **argv) {
    (void)argc, (void)argv;
    fprintf(stderr, "vllmc tokenize: not implemented yet\n");
    return 2;
}

int cmd_detokenize(int argc, char **argv) {
    (void)argc, (void)argv;
    fprintf(stderr, "vllmc detokenize: not implemented yet\n");
    return 2;
}
