/*
 * cli_hub.h: Hugging Face model ids on vllmc's command line: --model / --tokenizer ids resolved to local
 * paths (hub.h) before a command reads files from them, with --revision / --tokenizer-revision.
 */
#ifndef VLLM_CLI_HUB_H
#define VLLM_CLI_HUB_H

#include <stdbool.h>

#include "vllm.h"

/* Inside an option loop: consumes --revision / --tokenizer-revision (and the value) into eo and returns 1;
 * 0 when argv[*i] is neither; -1 when the value is missing (message printed, prefixed with cmd). */
int cli_hub_opt(const char *cmd, int argc, char **argv, int *i, vllm_engine_options *eo);

/* Replaces *model (and eo->tokenizer) by local paths when they are model ids, downloading what is missing;
 * a local path is left as it is. *owned_model / *owned_tok hold the new strings (free them after use).
 * tokenizer_only: the model's tokenizer files alone (tokenize, chat-template). false with the message
 * printed, prefixed with cmd. */
bool cli_hub_resolve(const char *cmd, const char **model, vllm_engine_options *eo, bool tokenizer_only,
                     char **owned_model, char **owned_tok);

#endif
