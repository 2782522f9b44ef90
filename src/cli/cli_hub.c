/*
 * cli_hub.c: --revision / --tokenizer-revision and the resolution of Hugging Face ids for vllmc's commands.
 */
#include "cli/cli_hub.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hub/hub.h"

int cli_hub_opt(const char *cmd, int argc, char **argv, int *i, vllm_engine_options *eo) {
    const char *a = argv[*i];
    const char **dst = !strcmp(a, "--revision") ? &eo->revision
                       : !strcmp(a, "--tokenizer-revision") ? &eo->tokenizer_revision
                                                              : NULL;
    if (!dst) return 0;
    if (*i + 1 >= argc || !argv[*i + 1][0]) {
        fprintf(stderr, "%s: %s needs a value (a branch, tag or commit)\n", cmd, a);
        return -1;
    }
    *dst = argv[++*i];
    return 1;
}

bool cli_hub_resolve(const char *cmd, const char **model, vllm_engine_options *eo, bool tokenizer_only,
                     char **owned_model, char **owned_tok) {
    *owned_model = *owned_tok = NULL;
    const char *orig_model = *model;
    if (*model && hub_is_model_id(*model)) {
        hub_options ho = {.revision = eo->revision, .tokenizer_only = tokenizer_only,
                          .no_weights = eo->load_format == VLLM_LOAD_DUMMY};
        if (hub_resolve(*model, &ho, owned_model) != VLLM_OK) {
            fprintf(stderr, "%s: %s\n", cmd, vllm_last_error());
            return false;
        }
        *model = *owned_model;
    }
    if (eo->tokenizer && hub_is_model_id(eo->tokenizer)) {
        const char *rev = eo->tokenizer_revision ? eo->tokenizer_revision
                          : orig_model && !strcmp(eo->tokenizer, orig_model) ? eo->revision
                                                                              : NULL;
        hub_options ho = {.revision = rev, .tokenizer_only = true};
        if (hub_resolve(eo->tokenizer, &ho, owned_tok) != VLLM_OK) {
            fprintf(stderr, "%s: %s\n", cmd, vllm_last_error());
            free(*owned_model);
            *owned_model = NULL;
            *model = orig_model;
            return false;
        }
        eo->tokenizer = *owned_tok;
    }
    return true;
}
