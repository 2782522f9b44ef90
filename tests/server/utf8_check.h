/*
 * utf8_check.h: whether bytes are whole, well-formed UTF-8 (the streamed fragments of the tool-call and
 * reasoning parser tests must be).
 */
#ifndef VLLM_TEST_UTF8_CHECK_H
#define VLLM_TEST_UTF8_CHECK_H

#include <stdbool.h>
#include <stddef.h>

static inline bool utf8_ok(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        size_t need = c < 0x80 ? 0 : c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2 : c >= 0xF0 && c <= 0xF4 ? 3 : 9;
        if (need == 9 || i + need >= n + (need == 0)) return false;
        for (size_t k = 1; k <= need; k++)
            if ((p[i + k] & 0xC0) != 0x80) return false;
        i += need + 1;
    }
    return true;
}

#endif
