/*
 * gguf_build.h: a tiny GGUF writer for the tests (header only): a growable byte buffer with little-endian
 * writes, metadata entries, tensor infos and padding, so test_gguf.c can make valid files and break them
 * byte by byte. The layout is the one gguf.h describes (llama.cpp's docs/gguf.md).
 */
#ifndef VLLM_TESTS_GGUF_BUILD_H
#define VLLM_TESTS_GGUF_BUILD_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader/gguf.h"

typedef struct gb {
    uint8_t *p;
    size_t n, cap;
} gb;

static inline void gb_bytes(gb *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q) abort();
        b->p = q;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
}

static inline void gb_le(gb *b, uint64_t v, int n) {
    uint8_t t[8];
    for (int i = 0; i < n; i++) t[i] = (uint8_t)(v >> (8 * i));
    gb_bytes(b, t, (size_t)n);
}

static inline void gb_u8(gb *b, uint8_t v) { gb_le(b, v, 1); }
static inline void gb_u16(gb *b, uint16_t v) { gb_le(b, v, 2); }
static inline void gb_u32(gb *b, uint32_t v) { gb_le(b, v, 4); }
static inline void gb_u64(gb *b, uint64_t v) { gb_le(b, v, 8); }
static inline void gb_f32(gb *b, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    gb_u32(b, u);
}
static inline void gb_f64(gb *b, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    gb_u64(b, u);
}
/* A GGUF string: u64 length + bytes. */
static inline void gb_strn(gb *b, const char *s, size_t n) {
    gb_u64(b, n);
    gb_bytes(b, s, n);
}
static inline void gb_str(gb *b, const char *s) { gb_strn(b, s, strlen(s)); }

/* magic, version, tensor count, metadata count */
static inline void gb_header(gb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    gb_bytes(b, "GGUF", 4);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}

/* The key and value type of a metadata entry (the value follows). */
static inline void gb_key(gb *b, const char *key, uint32_t type) {
    gb_str(b, key);
    gb_u32(b, type);
}
static inline void gb_kv_u32(gb *b, const char *key, uint32_t v) {
    gb_key(b, key, GGUF_TYPE_UINT32);
    gb_u32(b, v);
}
static inline void gb_kv_u16(gb *b, const char *key, uint16_t v) {
    gb_key(b, key, GGUF_TYPE_UINT16);
    gb_u16(b, v);
}
static inline void gb_kv_i32(gb *b, const char *key, int32_t v) {
    gb_key(b, key, GGUF_TYPE_INT32);
    gb_u32(b, (uint32_t)v);
}
static inline void gb_kv_str(gb *b, const char *key, const char *s) {
    gb_key(b, key, GGUF_TYPE_STRING);
    gb_str(b, s);
}
/* The header of an array value (after gb_key(..., GGUF_TYPE_ARRAY)): element type and count. */
static inline void gb_arr(gb *b, uint32_t elem_type, uint64_t count) {
    gb_u32(b, elem_type);
    gb_u64(b, count);
}

/* A tensor info: name, n_dims, ne[0..n_dims), type, offset. */
static inline void gb_tensor(gb *b, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type,
                             uint64_t offset) {
    gb_str(b, name);
    gb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) gb_u64(b, (uint64_t)ne[i]);
    gb_u32(b, type);
    gb_u64(b, offset);
}

/* Zero bytes up to a multiple of align (from the start of the file). */
static inline void gb_pad(gb *b, size_t align) {
    while (b->n % align) gb_u8(b, 0);
}

/* n bytes of a pattern (i * 7 + seed) & 0xff. */
static inline void gb_fill(gb *b, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) gb_u8(b, (uint8_t)(i * 7 + seed));
}

static inline void gb_free(gb *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

static inline int gb_write(const gb *b, const char *path) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return -1;
    int ok = b->n == 0 || fwrite(b->p, 1, b->n, fp) == b->n;
    return fclose(fp) == 0 && ok ? 0 : -1;
}

#endif
