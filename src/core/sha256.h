/*
 * sha256.h: SHA-256 (FIPS 180-4), incremental, for verifying downloaded files against the
 * Hugging Face hub's LFS object ids.
 */
#ifndef VLLM_CORE_SHA256_H
#define VLLM_CORE_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct sha256_ctx {
    uint32_t h[8];
    uint64_t len;      /* bytes hashed so far */
    uint8_t buf[64];   /* the partial block */
    size_t nbuf;
} sha256_ctx;

void sha256_init(sha256_ctx *c);
void sha256_update(sha256_ctx *c, const void *data, size_t n);
/* Writes the 32-byte digest; the context must be re-initialised before reuse. */
void sha256_final(sha256_ctx *c, uint8_t out[32]);
/* The digest as 64 lowercase hex digits and a NUL. */
void sha256_hex(const uint8_t digest[32], char out[65]);

#endif
