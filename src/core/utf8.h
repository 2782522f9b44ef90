/* utf8.h: a code point as UTF-8 bytes, the one encoder of the tokenizer, the grammar engine and the tool parsers. */
#ifndef VLLM_CORE_UTF8_H
#define VLLM_CORE_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* cp (at most 0x10FFFF) into out as 1 to 4 bytes; returns the length. Surrogates get their 3-byte forms (Python's
 * surrogatepass: what JSON's lone \ud800 escapes decode to); callers that must produce valid UTF-8 replace them
 * first (tok_utf8_encode). */
size_t utf8_encode(uint32_t cp, char out[4]);

#endif
