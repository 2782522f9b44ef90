/*
 * fuzz_ebnf.c: libFuzzer target for the structured-output grammars (src/structured): the input up to its first
 * NUL is EBNF (so_ebnf_parse), printed and read back, compiled (so_compile) and matched against the rest of the
 * input (at most 64 bytes, at once then byte by byte with rollbacks); any crash, leak or sanitizer report is a bug.
 * Build: make fuzz (CMake -DVLLM_FUZZ=ON with clang).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "structured/so_match.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    const size_t gl = nul ? (size_t)(nul - data) : size;
    const uint8_t *text = nul ? nul + 1 : NULL;
    size_t tl = nul ? size - gl - 1 : 0;
    if (tl > 64) tl = 64;
    so_grammar *g = NULL;
    if (so_ebnf_parse((const char *)data, gl, NULL, &g) != VLLM_OK) return 0;
    char *s = so_grammar_print(g);
    if (s) {
        so_grammar *g2 = NULL;
        if (so_ebnf_parse(s, strlen(s), NULL, &g2) != VLLM_OK) abort(); /* the print must read back */
        char *s2 = so_grammar_print(g2);
        if (s2 && strcmp(s, s2) != 0) abort();
        free(s2);
        so_grammar_free(g2);
        free(s);
    }
    so_compiled *c = NULL;
    if (so_compile(g, &c) != VLLM_OK) {
        so_grammar_free(g);
        return 0;
    }
    so_matcher *m = NULL;
    if (so_matcher_create(c, &m) == VLLM_OK) {
        const bool whole = so_match_bytes(m, text, tl) && so_match_can_end(m);
        so_match_rollback(m, so_match_pos(m));
        bool bytes = true;
        for (size_t i = 0; i < tl && bytes; i++) bytes = so_match_bytes(m, text + i, 1);
        if ((bytes && so_match_can_end(m)) != whole) abort(); /* at once and byte by byte agree */
        so_match_rollback(m, so_match_pos(m) / 2);
        so_matcher_free(m);
    }
    so_compiled_free(c);
    so_grammar_free(g);
    return 0;
}
