/* chat_template.c: `vllmc chat-template` (in progress). */
#include <stdio.h>

#include "cli/cli.h"

int cmd_chat_template(int argc, char **argv) {
    (void)argc, (void)argv;
    fprintf(stderr, "vllmc chat-template: not implemented yet\n");
    return 2;
}
