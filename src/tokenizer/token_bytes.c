/* token_bytes.c: one vocabulary token's bytes as a grammar sees them (xgrammar's decoded vocab). */
#include <string.h>

#include "core/error.h"
#include "tokenizer/internal.h"
#include "tokenizer/tokenizer.h"

/* The rules are xgrammar's TokenDecoder (cpp/tokenizer_info.cc, used by vLLM's structured outputs): the vocabulary
 * kind is read from the decoder chain (a ByteLevel decoder anywhere: byte-level; else a ByteFallback one:
 * byte-fallback; else raw), and each raw vocabulary string (tok_id_to_piece, added tokens included) becomes
 *   - byte-level: every code point through the inverse of GPT-2's bytes_to_unicode; the string unchanged when
 *     one has no inverse (an added token with a real space) or it is not UTF-8;
 *   - byte-fallback: <0xHH> (uppercase hex) the byte 0xHH; otherwise every U+2581 a space (no stripping);
 *   - raw: the string itself. */

tok_vocab_type tok_vocab_kind(const tokenizer *tok) { return tok_decoder_vocab_type(tok_decoder_of(tok)); }

static int hex_upper(char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; }

/* the bytes of a byte-level piece of n bytes into buf (room for n); false when a code point has no byte */
static bool bytelevel_bytes(const char *p, size_t n, uint8_t *buf, size_t *len) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp = 0;
        const size_t k = tok_utf8_decode(p + i, n - i, &cp);
        const int b = k ? tok_bytelevel_byte(cp) : -1;
        if (b < 0) return false;
        buf[o++] = (uint8_t)b;
        i += k;
    }
    *len = o;
    return true;
}

vllm_status tok_token_bytes(const tokenizer *tok, int32_t id, uint8_t *buf, size_t *len) {
    const char *p = tok_id_to_piece(tok, id);
    if (!p) return vt_error(VLLM_ERR_INVALID_ARG, "tokenizer: token id %d out of range", (int)id);
    const size_t n = strlen(p);
    switch (tok_vocab_kind(tok)) {
    case TOK_VOCAB_BYTE_LEVEL:
        if (bytelevel_bytes(p, n, buf, len)) return VLLM_OK;
        break;
    case TOK_VOCAB_BYTE_FALLBACK: {
        if (n == 6 && p[0] == '<' && p[1] == '0' && p[2] == 'x' && p[5] == '>' && hex_upper(p[3]) >= 0 &&
            hex_upper(p[4]) >= 0) {
            buf[0] = (uint8_t)(hex_upper(p[3]) << 4 | hex_upper(p[4]));
            *len = 1;
            return VLLM_OK;
        }
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
            if (i + 2 < n && (uint8_t)p[i] == 0xE2 && (uint8_t)p[i + 1] == 0x96 && (uint8_t)p[i + 2] == 0x81) {
                buf[o++] = ' ';
                i += 2;
            } else {
                buf[o++] = (uint8_t)p[i];
            }
        }
        *len = o;
        return VLLM_OK;
    }
    case TOK_VOCAB_RAW: break;
    }
    memcpy(buf, p, n);
    *len = n;
    return VLLM_OK;
}
