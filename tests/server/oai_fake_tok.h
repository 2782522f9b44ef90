/*
 * oai_fake_tok.h: the byte tokenizer the protocol tests give oai_server_ctx (test_oai_response.c,
 * test_oai_agents.c): token id = byte + 3, FAKE_BOS (1) with special tokens; ids below 3 decode as "<s>".
 */
#ifndef VLLM_TESTS_OAI_FAKE_TOK_H
#define VLLM_TESTS_OAI_FAKE_TOK_H

#include <stdlib.h>
#include <string.h>

#include "vllm.h"

enum { FAKE_BOS = 1 };
#define BOS FAKE_BOS

static inline vllm_status fake_tokenize(void *c, const char *text, bool add_special, int32_t **ids, size_t *n) {
    (void)c;
    size_t len = strlen(text);
    *ids = malloc((len + 1) * sizeof **ids);
    if (!*ids) return VLLM_ERR_NO_MEMORY;
    size_t k = 0;
    if (add_special) (*ids)[k++] = BOS;
    for (size_t i = 0; i < len; i++) (*ids)[k++] = (unsigned char)text[i] + 3;
    *n = k;
    return VLLM_OK;
}

static inline vllm_status fake_detokenize(void *c, const int32_t *ids, size_t n, bool skip, char **text) {
    (void)c, (void)skip;
    *text = malloc(3 * n + 1);
    if (!*text) return VLLM_ERR_NO_MEMORY;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= 3) (*text)[k++] = (char)(ids[i] - 3);
        else memcpy(*text + k, "<s>", 3), k += 3;
    }
    (*text)[k] = 0;
    return VLLM_OK;
}

#endif
