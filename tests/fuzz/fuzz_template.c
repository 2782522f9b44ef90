/*
 * fuzz_template.c: libFuzzer target for the chat-template interpreter: renders arbitrary
 * template text against a small fixed context; any crash, leak or sanitizer report is a bug.
 * Build: clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -Iinclude -Isrc \
 *        tests/fuzz/fuzz_template.c src/template/jinja.c src/core/error.c $(pkg-config --cflags --libs jansson libutf8proc)
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "template/jinja.h"

static const char *CTX =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"h\\u00e9llo \\u4f60\\u597d\"},"
    " {\"role\": \"assistant\", \"content\": \"<think>x</think>ok\", \"tool_calls\": [{\"type\": \"function\", \"function\":"
    " {\"name\": \"f\", \"arguments\": {\"a\": 1}}}]}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"n\": 3, \"f\": 1.5}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static json_t *ctx;
    if (!ctx) ctx = json_loads(CTX, 0, NULL);
    char *src = malloc(size + 1);
    if (!src) return 0;
    memcpy(src, data, size);
    src[size] = 0;
    char *out = NULL;
    if (jt_render(src, ctx, &out) == VLLM_OK) free(out);
    free(src);
    return 0;
}
