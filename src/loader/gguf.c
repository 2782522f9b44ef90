/*
 * gguf.c: the GGUF reader (gguf.h): mmap, validation of the header, metadata and tensor infos, string-array
 * indexes, name hashes, split sets.
 *
 * Layout of a gguf_file: parts[] (one per mapped file or buffer, each with its metadata entries and a hash
 * over their keys), tensors[] (every part's tensors, in file order, part by part) and a hash over tensor
 * names. Metadata values stay in the map: an entry records where its value starts; an array of strings also
 * gets an index of where each element starts (32-bit offsets unless the array spans 4 GiB), so element i is
 * O(1) without copying the strings. Keys and tensor names are copied (NUL-terminated).
 *
 * Facts about the format (llama.cpp's docs/gguf.md and ggml/src/gguf.cpp): little-endian; magic "GGUF";
 * u32 version (1 had 32-bit counts; a byte-swapped version is a big-endian file); u64 tensor and key/value
 * counts; strings as u64 length + bytes; arrays as u32 element type + u64 count + elements; tensor infos
 * (name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset); general.alignment (u32, default 32); the
 * data section starts at the end of the tensor infos rounded up to the alignment. Split sets (gguf-split)
 * carry split.no (u16), split.count (u16) and split.tensors.count (i32) in every part, the other metadata in
 * the first part only. Block sizes and bytes per block: ggml's type traits (ggml/src/ggml.c, the block
 * structs of ggml/src/ggml-common.h).
 */
#include "loader/gguf.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "loader/regular_file.h"

/* Arrays of arrays nested deeper than this are refused (the parser recurses once per level). */
#define GGUF_MAX_ARRAY_DEPTH 16
/* Bytes of the fixed header: magic, version, tensor count, metadata count. */
#define GGUF_HEADER_BYTES 24
/* How much of a key or tensor name goes into a message. */
#define GGUF_MSG_NAME 96

/* ------------------------------------------------------------------ */
/* type tables                                                         */
/* ------------------------------------------------------------------ */

typedef struct gguf_type_traits {
    const char *name;
    int64_t block;  /* elements per block, 0: not a type this reader knows */
    size_t size;    /* bytes per block */
} gguf_type_traits;

/* Index = ggml_type. Numbers left out (4, 5: Q4_2 / Q4_3; 31-33: Q4_0_4_4 / Q4_0_4_8 / Q4_0_8_8;
 * 36-38: IQ4_NL_4_4 / _4_8 / _8_8) were removed from ggml and stay unknown. QK_K = 256. */
static const gguf_type_traits GGUF_TYPES[GGML_TYPE_COUNT] = {
    [GGML_TYPE_F32] = {"F32", 1, 4},
    [GGML_TYPE_F16] = {"F16", 1, 2},
    [GGML_TYPE_Q4_0] = {"Q4_0", 32, 18},     /* f16 d + 16 nibble bytes */
    [GGML_TYPE_Q4_1] = {"Q4_1", 32, 20},     /* f16 d, m + 16 */
    [GGML_TYPE_Q5_0] = {"Q5_0", 32, 22},     /* f16 d + 4 high bits + 16 */
    [GGML_TYPE_Q5_1] = {"Q5_1", 32, 24},     /* f16 d, m + 4 + 16 */
    [GGML_TYPE_Q8_0] = {"Q8_0", 32, 34},     /* f16 d + 32 */
    [GGML_TYPE_Q8_1] = {"Q8_1", 32, 36},     /* f16 d, s + 32 */
    [GGML_TYPE_Q2_K] = {"Q2_K", 256, 84},    /* 16 scales + 64 quants + f16 d, dmin */
    [GGML_TYPE_Q3_K] = {"Q3_K", 256, 110},   /* 32 hmask + 64 quants + 12 scales + f16 d */
    [GGML_TYPE_Q4_K] = {"Q4_K", 256, 144},   /* f16 d, dmin + 12 scales + 128 */
    [GGML_TYPE_Q5_K] = {"Q5_K", 256, 176},   /* f16 d, dmin + 12 + 32 qh + 128 */
    [GGML_TYPE_Q6_K] = {"Q6_K", 256, 210},   /* 128 ql + 64 qh + 16 scales + f16 d */
    [GGML_TYPE_Q8_K] = {"Q8_K", 256, 292},   /* f32 d + 256 + 16 int16 sums */
    [GGML_TYPE_IQ2_XXS] = {"IQ2_XXS", 256, 66},  /* f16 d + 32 uint16 */
    [GGML_TYPE_IQ2_XS] = {"IQ2_XS", 256, 74},    /* f16 d + 32 uint16 + 8 scales */
    [GGML_TYPE_IQ3_XXS] = {"IQ3_XXS", 256, 98},  /* f16 d + 96 */
    [GGML_TYPE_IQ1_S] = {"IQ1_S", 256, 50},      /* f16 d + 32 qs + 8 uint16 qh */
    [GGML_TYPE_IQ4_NL] = {"IQ4_NL", 32, 18},     /* f16 d + 16 */
    [GGML_TYPE_IQ3_S] = {"IQ3_S", 256, 110},     /* f16 d + 64 qs + 8 qh + 32 signs + 4 scales */
    [GGML_TYPE_IQ2_S] = {"IQ2_S", 256, 82},      /* f16 d + 64 qs + 8 qh + 8 scales */
    [GGML_TYPE_IQ4_XS] = {"IQ4_XS", 256, 136},   /* f16 d + uint16 scales_h + 4 scales_l + 128 */
    [GGML_TYPE_I8] = {"I8", 1, 1},
    [GGML_TYPE_I16] = {"I16", 1, 2},
    [GGML_TYPE_I32] = {"I32", 1, 4},
    [GGML_TYPE_I64] = {"I64", 1, 8},
    [GGML_TYPE_F64] = {"F64", 1, 8},
    [GGML_TYPE_IQ1_M] = {"IQ1_M", 256, 56},      /* 32 qs + 16 qh + 8 scales */
    [GGML_TYPE_BF16] = {"BF16", 1, 2},
    [GGML_TYPE_TQ1_0] = {"TQ1_0", 256, 54},      /* 48 base-3 bytes + 4 qh + f16 d */
    [GGML_TYPE_TQ2_0] = {"TQ2_0", 256, 66},      /* 64 + f16 d */
    [GGML_TYPE_MXFP4] = {"MXFP4", 32, 17},       /* e8m0 e + 16 */
};

const char *gguf_type_name(uint32_t type) {
    return type < GGML_TYPE_COUNT && GGUF_TYPES[type].name ? GGUF_TYPES[type].name : "?";
}

int64_t gguf_type_block_size(uint32_t type) { return type < GGML_TYPE_COUNT ? GGUF_TYPES[type].block : 0; }

size_t gguf_type_size(uint32_t type) { return type < GGML_TYPE_COUNT ? GGUF_TYPES[type].size : 0; }

/* Bytes of a fixed-size metadata value, 0 for strings and arrays. */
static const uint8_t GGUF_VALUE_SIZE[GGUF_TYPE_COUNT] = {
    [GGUF_TYPE_UINT8] = 1, [GGUF_TYPE_INT8] = 1,     [GGUF_TYPE_UINT16] = 2, [GGUF_TYPE_INT16] = 2,
    [GGUF_TYPE_UINT32] = 4, [GGUF_TYPE_INT32] = 4,   [GGUF_TYPE_FLOAT32] = 4, [GGUF_TYPE_BOOL] = 1,
    [GGUF_TYPE_UINT64] = 8, [GGUF_TYPE_INT64] = 8,   [GGUF_TYPE_FLOAT64] = 8,
};

/* "a uint8", "an array", ... for messages. */
static const char *gguf_value_noun(uint32_t t) {
    static const char *const NOUNS[GGUF_TYPE_COUNT] = {
        "a uint8", "an int8", "a uint16", "an int16", "a uint32", "an int32", "a float32",
        "a bool",  "a string", "an array", "a uint64", "an int64", "a float64",
    };
    return t < GGUF_TYPE_COUNT ? NOUNS[t] : "an unknown type";
}

/* "uint8", "array", ...: the noun without its article. */
static const char *gguf_value_name(uint32_t t) { return strchr(gguf_value_noun(t), ' ') + 1; }

/* ------------------------------------------------------------------ */
/* the handle                                                          */
/* ------------------------------------------------------------------ */

typedef struct gguf_kv {
    char *key;              /* first member: the name hash reads it (gguf_hash_build) */
    uint32_t type;          /* gguf_type */
    uint32_t elem_type;     /* arrays */
    const uint8_t *val;     /* scalars: the value; strings: the bytes; arrays: the first element */
    uint64_t len;           /* strings: bytes; arrays: elements */
    uint32_t *soff32;       /* arrays of strings: element i's u64 length field at val + soff[i] */
    uint64_t *soff64;       /* (the 64-bit form when the array spans more than 4 GiB) */
} gguf_kv;

typedef struct gguf_hash {
    size_t *slots;  /* entry index + 1, 0 = empty */
    size_t n;       /* power of two, > 2 * entries */
} gguf_hash;

typedef struct gguf_part {
    char *name;             /* base name (messages) */
    const uint8_t *map;
    size_t size;
    bool mapped;            /* munmap at close (gguf_open); buffers are the caller's */
    uint32_t version;
    size_t alignment;
    gguf_kv *kvs;
    size_t n_kv;
    gguf_hash keys;
    uint64_t n_tensors;     /* this part's tensors */
} gguf_part;

struct gguf_file {
    gguf_part *parts;
    int n_parts;
    gguf_tensor_info *tensors;  /* name: owned copy */
    size_t n_tensors, cap_tensors;
    gguf_hash names;
};

static void gguf_kv_free(gguf_kv *kv) {
    free(kv->key);
    free(kv->soff32);
    free(kv->soff64);
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    for (int i = 0; i < f->n_parts; i++) {
        gguf_part *p = &f->parts[i];
        if (p->mapped && p->map) munmap((void *)(uintptr_t)p->map, p->size);
        for (size_t k = 0; k < p->n_kv; k++) gguf_kv_free(&p->kvs[k]);
        free(p->kvs);
        free(p->keys.slots);
        free(p->name);
    }
    for (size_t i = 0; i < f->n_tensors; i++) free((char *)(uintptr_t)f->tensors[i].name);
    free(f->parts);
    free(f->tensors);
    free(f->names.slots);
    free(f);
}

/* ------------------------------------------------------------------ */
/* name hashes                                                         */
/* ------------------------------------------------------------------ */

static uint64_t gguf_fnv(const char *s) {
    uint64_t h = 1469598103934665603ull;  /* FNV-1a */
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

/* The name of entry i of an array of structs whose first member is a char * (gguf_kv, gguf_tensor_info). */
static const char *gguf_name_at(const void *base, size_t stride, size_t i) {
    const char *p;
    memcpy(&p, (const char *)base + i * stride, sizeof p);
    return p;
}

/* Index of name among the n entries hashed in h, or (size_t)-1. */
static size_t gguf_hash_find(const gguf_hash *h, const void *base, size_t stride, const char *name) {
    if (!h->n || !name) return (size_t)-1;
    size_t mask = h->n - 1;
    for (size_t i = (size_t)gguf_fnv(name) & mask;; i = (i + 1) & mask) {
        size_t s = h->slots[i];
        if (s == 0) return (size_t)-1;
        if (!strcmp(gguf_name_at(base, stride, s - 1), name)) return s - 1;
    }
}

/* Hashes the n names; a repeated one: *dup gets its second index, *first its first (no error set). */
static vllm_status gguf_hash_build(gguf_hash *h, const void *base, size_t stride, size_t n, size_t *dup,
                                   size_t *first) {
    *dup = (size_t)-1;
    size_t slots = 16;
    while (slots <= 2 * n) {
        if (slots > SIZE_MAX / 4 / sizeof(size_t)) return vt_error(VLLM_ERR_NO_MEMORY, "gguf: too many names");
        slots *= 2;
    }
    h->slots = calloc(slots, sizeof *h->slots);
    if (!h->slots) return vt_error(VLLM_ERR_NO_MEMORY, "gguf: out of memory for a name table (%zu names)", n);
    h->n = slots;
    size_t mask = slots - 1;
    for (size_t e = 0; e < n; e++) {
        const char *name = gguf_name_at(base, stride, e);
        size_t i = (size_t)gguf_fnv(name) & mask;
        for (; h->slots[i]; i = (i + 1) & mask) {
            if (!strcmp(gguf_name_at(base, stride, h->slots[i] - 1), name)) {
                *dup = e;
                *first = h->slots[i] - 1;
                return VLLM_OK;
            }
        }
        h->slots[i] = e + 1;
    }
    return VLLM_OK;
}

/* ------------------------------------------------------------------ */
/* reading                                                             */
/* ------------------------------------------------------------------ */

typedef struct gguf_rd {
    const uint8_t *p;
    uint64_t size, pos;
    const char *fname;
} gguf_rd;

/* Little-endian unsigned of n bytes. */
static uint64_t gguf_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* uint64 bits as int64 (two's complement) without implementation-defined conversions. */
static int64_t gguf_as_i64(uint64_t v) { return v <= (uint64_t)INT64_MAX ? (int64_t)v : -(int64_t)(~v) - 1; }

static uint64_t gguf_left(const gguf_rd *r) { return r->size - r->pos; }

/* "FILE: truncated at byte POS: WHAT" (FORMAT). */
static vllm_status gguf_truncated(const gguf_rd *r, const char *fmt, ...) VT_PRINTF(2, 3);
static vllm_status gguf_truncated(const gguf_rd *r, const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return vt_error(VLLM_ERR_FORMAT, "%s: truncated at byte %" PRIu64 " (file of %" PRIu64 " bytes): %s", r->fname,
                    r->pos, r->size, what);
}

/* Reads n (4 or 8) bytes as an unsigned; false when they are not there. */
static bool gguf_rd_uint(gguf_rd *r, int n, uint64_t *v) {
    if (gguf_left(r) < (uint64_t)n) return false;
    *v = gguf_le(r->p + r->pos, n);
    r->pos += (uint64_t)n;
    return true;
}

/* A string: *s points at its bytes, *len its length. what names it in messages. */
static vllm_status gguf_rd_str(gguf_rd *r, const uint8_t **s, uint64_t *len, const char *what) {
    *s = NULL;
    *len = 0;
    if (!gguf_rd_uint(r, 8, len)) return gguf_truncated(r, "the length of %s", what);
    if (*len > gguf_left(r))
        return gguf_truncated(r, "%s of %" PRIu64 " bytes (%" PRIu64 " left)", what, *len, gguf_left(r));
    *s = r->p + r->pos;
    r->pos += *len;
    return VLLM_OK;
}

/* A NUL-terminated copy of a key or tensor name (refused when it holds a NUL byte). */
static vllm_status gguf_rd_name(gguf_rd *r, char **out, const char *what) {
    const uint8_t *s;
    uint64_t len;
    vllm_status st = gguf_rd_str(r, &s, &len, what);
    if (st) return st;
    if (len > 0 && memchr(s, 0, (size_t)len))
        return vt_error(VLLM_ERR_FORMAT, "%s: %s '%.*s' holds a NUL byte", r->fname, what,
                        (int)strnlen((const char *)s, GGUF_MSG_NAME), (const char *)s);
    *out = malloc((size_t)len + 1);
    if (!*out) return vt_error(VLLM_ERR_NO_MEMORY, "%s: out of memory for %s (%" PRIu64 " bytes)", r->fname, what, len);
    if (len) memcpy(*out, s, (size_t)len);
    (*out)[len] = '\0';
    return VLLM_OK;
}

/* Reads a value of type t (an array: its element type, count and elements, without the outer type tag).
 * kv: the top-level entry to fill (NULL inside arrays of arrays). key names it in messages. */
static vllm_status gguf_rd_value(gguf_rd *r, uint32_t t, int depth, gguf_kv *kv, const char *key) {
    if (t < GGUF_TYPE_COUNT && GGUF_VALUE_SIZE[t]) {
        if (gguf_left(r) < GGUF_VALUE_SIZE[t]) return gguf_truncated(r, "the value of '%.*s'", GGUF_MSG_NAME, key);
        if (kv) kv->val = r->p + r->pos;
        r->pos += GGUF_VALUE_SIZE[t];
        return VLLM_OK;
    }
    if (t == GGUF_TYPE_STRING) {
        const uint8_t *s = NULL;
        uint64_t len = 0;
        char what[GGUF_MSG_NAME + 32];
        snprintf(what, sizeof what, "the string '%.*s'", GGUF_MSG_NAME, key);
        vllm_status st = gguf_rd_str(r, &s, &len, what);
        if (st) return st;
        if (kv) kv->val = s, kv->len = len;
        return VLLM_OK;
    }
    if (t != GGUF_TYPE_ARRAY)
        return vt_error(VLLM_ERR_FORMAT, "%s: '%.*s' has an unknown value type %" PRIu32, r->fname, GGUF_MSG_NAME, key, t);

    if (depth >= GGUF_MAX_ARRAY_DEPTH)
        return vt_error(VLLM_ERR_FORMAT, "%s: '%.*s': arrays nested more than %d deep", r->fname, GGUF_MSG_NAME, key,
                        GGUF_MAX_ARRAY_DEPTH);
    uint64_t et = 0, count = 0;
    if (!gguf_rd_uint(r, 4, &et) || !gguf_rd_uint(r, 8, &count))
        return gguf_truncated(r, "the array header of '%.*s'", GGUF_MSG_NAME, key);
    if (et >= GGUF_TYPE_COUNT)
        return vt_error(VLLM_ERR_FORMAT, "%s: array '%.*s' has an unknown element type %" PRIu64, r->fname,
                        GGUF_MSG_NAME, key, et);
    const uint8_t *elems = r->p + r->pos;
    if (kv) kv->elem_type = (uint32_t)et, kv->len = count, kv->val = elems;
    if (GGUF_VALUE_SIZE[et]) {
        uint64_t esz = GGUF_VALUE_SIZE[et];
        if (count > gguf_left(r) / esz)
            return gguf_truncated(r, "array '%.*s' of %" PRIu64 " %s elements (%" PRIu64 " bytes left)", GGUF_MSG_NAME,
                                  key, count, gguf_value_name((uint32_t)et), gguf_left(r));
        r->pos += count * esz;
        return VLLM_OK;
    }
    /* strings take at least 8 bytes each, arrays 12: a count beyond what is left cannot be */
    uint64_t min = et == GGUF_TYPE_STRING ? 8 : 12;
    if (count > gguf_left(r) / min)
        return gguf_truncated(r, "array '%.*s' of %" PRIu64 " %s (%" PRIu64 " bytes left)", GGUF_MSG_NAME, key, count,
                              et == GGUF_TYPE_STRING ? "strings" : "arrays", gguf_left(r));
    if (et == GGUF_TYPE_STRING) {
        bool wide = gguf_left(r) > UINT32_MAX;
        if (kv && count > 0) { /* the index; count <= file size / 8 here */
            if (wide) kv->soff64 = malloc((size_t)count * sizeof *kv->soff64);
            else kv->soff32 = malloc((size_t)count * sizeof *kv->soff32);
            if (!kv->soff64 && !kv->soff32)
                return vt_error(VLLM_ERR_NO_MEMORY, "%s: out of memory indexing '%.*s' (%" PRIu64 " strings)", r->fname,
                                GGUF_MSG_NAME, key, count);
        }
        for (uint64_t i = 0; i < count; i++) {
            uint64_t off = (uint64_t)(r->p + r->pos - elems), len = 0;
            if (!gguf_rd_uint(r, 8, &len))
                return gguf_truncated(r, "the length of element %" PRIu64 " of '%.*s'", i, GGUF_MSG_NAME, key);
            if (len > gguf_left(r))
                return gguf_truncated(r, "element %" PRIu64 " of '%.*s', %" PRIu64 " bytes (%" PRIu64 " left)", i,
                                      GGUF_MSG_NAME, key, len, gguf_left(r));
            r->pos += len;
            if (kv && wide) kv->soff64[i] = off;
            else if (kv) kv->soff32[i] = (uint32_t)off;
        }
        return VLLM_OK;
    }
    for (uint64_t i = 0; i < count; i++) { /* arrays of arrays: checked, not indexed */
        vllm_status st = gguf_rd_value(r, GGUF_TYPE_ARRAY, depth + 1, NULL, key);
        if (st) return st;
    }
    return VLLM_OK;
}

/* ------------------------------------------------------------------ */
/* metadata lookups on one part                                        */
/* ------------------------------------------------------------------ */

static const gguf_kv *gguf_part_kv(const gguf_part *p, const char *key) {
    size_t i = gguf_hash_find(&p->keys, p->kvs, sizeof *p->kvs, key);
    return i == (size_t)-1 ? NULL : &p->kvs[i];
}

/* A fixed-size integer at p of type t: 1 with *u (unsigned types), 2 with *s (signed), 0 not an integer. */
static int gguf_int_at(uint32_t t, const uint8_t *p, uint64_t *u, int64_t *s) {
    switch (t) {
    case GGUF_TYPE_UINT8: *u = p[0]; return 1;
    case GGUF_TYPE_UINT16: *u = gguf_le(p, 2); return 1;
    case GGUF_TYPE_UINT32: *u = gguf_le(p, 4); return 1;
    case GGUF_TYPE_UINT64: *u = gguf_le(p, 8); return 1;
    case GGUF_TYPE_INT8: *s = (int8_t)p[0]; return 2;
    case GGUF_TYPE_INT16: *s = (int16_t)(uint16_t)gguf_le(p, 2); return 2;
    case GGUF_TYPE_INT32: *s = (int32_t)(uint32_t)gguf_le(p, 4); return 2;
    case GGUF_TYPE_INT64: *s = gguf_as_i64(gguf_le(p, 8)); return 2;
    default: return 0;
    }
}

/* A fixed-size integer or float at p of type t as a double; false for other types. */
static bool gguf_num_at(uint32_t t, const uint8_t *p, double *out) {
    uint64_t u;
    int64_t s;
    int k = gguf_int_at(t, p, &u, &s);
    if (k == 1) *out = (double)u;
    else if (k == 2) *out = (double)s;
    else if (t == GGUF_TYPE_FLOAT32) {
        uint32_t b = (uint32_t)gguf_le(p, 4);
        float x;
        memcpy(&x, &b, sizeof x);
        *out = x;
    } else if (t == GGUF_TYPE_FLOAT64) {
        uint64_t b = gguf_le(p, 8);
        memcpy(out, &b, sizeof *out);
    } else
        return false;
    return true;
}

static void gguf_set_err(vllm_status *err, vllm_status st) {
    if (err) *err = st;
}

/* gguf_get_u64 / gguf_get_i64 on one part (split keys are read from every part). */
static bool gguf_part_u64(const gguf_part *p, const char *key, uint64_t *out, vllm_status *err) {
    const gguf_kv *kv = gguf_part_kv(p, key);
    if (!kv) return false;
    uint64_t u = 0;
    int64_t s = 0;
    int k = gguf_int_at(kv->type, kv->val, &u, &s);
    if (k == 0) {
        gguf_set_err(err, vt_error(VLLM_ERR_FORMAT, "%s: %s is %s, expected an integer", p->name, key,
                                   gguf_value_noun(kv->type)));
        return false;
    }
    if (k == 2 && s < 0) {
        gguf_set_err(err, vt_error(VLLM_ERR_FORMAT, "%s: %s is %" PRId64 ", expected a non-negative integer", p->name,
                                   key, s));
        return false;
    }
    *out = k == 1 ? u : (uint64_t)s;
    return true;
}

static bool gguf_part_i64(const gguf_part *p, const char *key, int64_t *out, vllm_status *err) {
    const gguf_kv *kv = gguf_part_kv(p, key);
    if (!kv) return false;
    uint64_t u = 0;
    int64_t s = 0;
    int k = gguf_int_at(kv->type, kv->val, &u, &s);
    if (k == 0) {
        gguf_set_err(err, vt_error(VLLM_ERR_FORMAT, "%s: %s is %s, expected an integer", p->name, key,
                                   gguf_value_noun(kv->type)));
        return false;
    }
    if (k == 1 && u > (uint64_t)INT64_MAX) {
        gguf_set_err(err, vt_error(VLLM_ERR_FORMAT, "%s: %s is %" PRIu64 ", too large for an int64", p->name, key, u));
        return false;
    }
    *out = k == 1 ? (int64_t)u : s;
    return true;
}

/* ------------------------------------------------------------------ */
/* parsing one part                                                    */
/* ------------------------------------------------------------------ */

static bool gguf_grow_tensors(gguf_file *f, uint64_t more) {
    if (more > SIZE_MAX / sizeof(gguf_tensor_info) - f->n_tensors) return false;
    size_t need = f->n_tensors + (size_t)more;
    if (need <= f->cap_tensors) return true;
    gguf_tensor_info *t = realloc(f->tensors, need * sizeof *t);
    if (!t) return false;
    f->tensors = t;
    f->cap_tensors = need;
    return true;
}

/* Checks the header, metadata and tensor infos of f->parts[pi] (mapped) and appends its tensors. */
static vllm_status gguf_parse_part(gguf_file *f, int pi) {
    gguf_part *part = &f->parts[pi];
    gguf_rd r = {.p = part->map, .size = part->size, .pos = 0, .fname = part->name};
    const char *fn = part->name;
    if (part->size < GGUF_HEADER_BYTES)
        return vt_error(VLLM_ERR_FORMAT, "%s: %zu bytes, too short for a GGUF header (%d bytes)", fn, part->size,
                        GGUF_HEADER_BYTES);
    if (memcmp(part->map, "GGUF", 4)) {
        const uint8_t *m = part->map;
        return vt_error(VLLM_ERR_FORMAT, "%s: not a GGUF file (magic %02x %02x %02x %02x, expected \"GGUF\")", fn, m[0],
                        m[1], m[2], m[3]);
    }
    r.pos = 4;
    uint64_t v = 0, n_tensors = 0, n_kv = 0;
    gguf_rd_uint(&r, 4, &v);
    part->version = (uint32_t)v;
    if (v == 1) return vt_error(VLLM_ERR_FORMAT, "%s: GGUF version 1 is not supported (versions 2 and 3 are)", fn);
    if (v != 0 && (v & 0xFFFF) == 0)
        return vt_error(VLLM_ERR_FORMAT,
                        "%s: GGUF version field is 0x%08" PRIx64 ": a big-endian file (only little-endian is supported)",
                        fn, v);
    if (v != 2 && v != 3)
        return vt_error(VLLM_ERR_FORMAT, "%s: GGUF version %" PRIu64 " is not supported (versions 2 and 3 are)", fn, v);
    gguf_rd_uint(&r, 8, &n_tensors);
    gguf_rd_uint(&r, 8, &n_kv);
    /* the least a metadata entry takes is 13 bytes (key length, type, a 1-byte value), a tensor info 32 */
    if (n_kv > gguf_left(&r) / 13)
        return gguf_truncated(&r, "%" PRIu64 " metadata entries cannot fit in %" PRIu64 " bytes", n_kv, gguf_left(&r));
    if (n_tensors > gguf_left(&r) / 32)
        return gguf_truncated(&r, "%" PRIu64 " tensor infos cannot fit in %" PRIu64 " bytes", n_tensors, gguf_left(&r));

    /* metadata */
    part->kvs = calloc(n_kv ? (size_t)n_kv : 1, sizeof *part->kvs);
    if (!part->kvs) return vt_error(VLLM_ERR_NO_MEMORY, "%s: out of memory (%" PRIu64 " metadata entries)", fn, n_kv);
    for (uint64_t i = 0; i < n_kv; i++) {
        gguf_kv *kv = &part->kvs[i];
        char what[64];
        snprintf(what, sizeof what, "the key of metadata entry %" PRIu64, i);
        vllm_status st = gguf_rd_name(&r, &kv->key, what);
        if (st) return st;
        part->n_kv++;  /* from here gguf_close frees it */
        uint64_t t = 0;
        if (!gguf_rd_uint(&r, 4, &t)) return gguf_truncated(&r, "the value type of '%.*s'", GGUF_MSG_NAME, kv->key);
        if (t >= GGUF_TYPE_COUNT)
            return vt_error(VLLM_ERR_FORMAT, "%s: '%.*s' has an unknown value type %" PRIu64, fn, GGUF_MSG_NAME, kv->key,
                            t);
        kv->type = (uint32_t)t;
        st = gguf_rd_value(&r, kv->type, 0, kv, kv->key);
        if (st) return st;
    }
    size_t dup, first;
    vllm_status st = gguf_hash_build(&part->keys, part->kvs, sizeof *part->kvs, part->n_kv, &dup, &first);
    if (st) return st;
    if (dup != (size_t)-1)
        return vt_error(VLLM_ERR_FORMAT, "%s: metadata key '%.*s' appears twice (entries %zu and %zu)", fn,
                        GGUF_MSG_NAME, part->kvs[dup].key, first, dup);

    /* general.alignment */
    part->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *al = gguf_part_kv(part, "general.alignment");
    if (al) {
        if (al->type != GGUF_TYPE_UINT32)
            return vt_error(VLLM_ERR_FORMAT, "%s: general.alignment is %s, expected a uint32", fn,
                            gguf_value_noun(al->type));
        uint64_t a = gguf_le(al->val, 4);
        if (a == 0 || (a & (a - 1)))
            return vt_error(VLLM_ERR_FORMAT, "%s: general.alignment %" PRIu64 " is not a power of two", fn, a);
        part->alignment = (size_t)a;
    }

    /* tensor infos (the data section starts after them: offsets are checked in a second pass) */
    if (!gguf_grow_tensors(f, n_tensors))
        return vt_error(VLLM_ERR_NO_MEMORY, "%s: out of memory (%" PRIu64 " tensors)", fn, n_tensors);
    size_t base = f->n_tensors;
    uint64_t *offsets = malloc((n_tensors ? (size_t)n_tensors : 1) * sizeof *offsets);
    if (!offsets) return vt_error(VLLM_ERR_NO_MEMORY, "%s: out of memory (%" PRIu64 " tensors)", fn, n_tensors);
    for (uint64_t i = 0; i < n_tensors; i++) {
        gguf_tensor_info *ti = &f->tensors[f->n_tensors];
        memset(ti, 0, sizeof *ti);
        char *name = NULL, what[64];
        snprintf(what, sizeof what, "the name of tensor %" PRIu64, i);
        st = gguf_rd_name(&r, &name, what);
        if (st) goto fail;
        ti->name = name;
        ti->file = pi;
        f->n_tensors++;  /* from here gguf_close frees its name */
        uint64_t nd = 0, ty = 0;
        if (!gguf_rd_uint(&r, 4, &nd)) {
            st = gguf_truncated(&r, "n_dims of tensor '%.*s'", GGUF_MSG_NAME, name);
            goto fail;
        }
        if (nd < 1 || nd > GGUF_MAX_DIMS) {
            st = vt_error(VLLM_ERR_FORMAT, "%s: tensor '%.*s' has n_dims %" PRIu64 " (1 to %d)", fn, GGUF_MSG_NAME, name,
                          nd, GGUF_MAX_DIMS);
            goto fail;
        }
        ti->n_dims = (int)nd;
        for (int d = 0; d < GGUF_MAX_DIMS; d++) ti->ne[d] = 1;
        for (int d = 0; d < (int)nd; d++) {
            uint64_t ne = 0;
            if (!gguf_rd_uint(&r, 8, &ne)) {
                st = gguf_truncated(&r, "ne[%d] of tensor '%.*s'", d, GGUF_MSG_NAME, name);
                goto fail;
            }
            if (ne > (uint64_t)INT64_MAX) {
                st = vt_error(VLLM_ERR_FORMAT, "%s: tensor '%.*s' has ne[%d] = %" PRId64 " (negative)", fn, GGUF_MSG_NAME,
                              name, d, gguf_as_i64(ne));
                goto fail;
            }
            ti->ne[d] = (int64_t)ne;
        }
        if (!gguf_rd_uint(&r, 4, &ty) || !gguf_rd_uint(&r, 8, &offsets[i])) {
            st = gguf_truncated(&r, "the type and offset of tensor '%.*s'", GGUF_MSG_NAME, name);
            goto fail;
        }
        ti->type = (uint32_t)ty;
    }
    part->n_tensors = n_tensors;

    /* the data section */
    uint64_t data_start = (r.pos + part->alignment - 1) & ~(uint64_t)(part->alignment - 1);
    uint64_t data_size = part->size > data_start ? part->size - data_start : 0;
    for (uint64_t i = 0; i < n_tensors; i++) {
        gguf_tensor_info *ti = &f->tensors[base + i];
        const char *name = ti->name;
        const int64_t *ne = ti->ne;
        uint64_t off = offsets[i];
        int64_t bs = gguf_type_block_size(ti->type);
        size_t ts = gguf_type_size(ti->type);
        /* the element count must fit an int64 (its nonzero factors, as for safetensors) */
        uint64_t n = 1;
        bool empty = false, overflow = false;
        for (int d = 0; d < ti->n_dims; d++) {
            if (ne[d] == 0) empty = true;
            else if (n > (uint64_t)INT64_MAX / (uint64_t)ne[d]) overflow = true;
            else n *= (uint64_t)ne[d];
        }
        if (overflow) {
            st = vt_error(VLLM_ERR_FORMAT,
                          "%s: tensor '%.*s' has ne [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                          "]: too many elements",
                          fn, GGUF_MSG_NAME, name, ne[0], ne[1], ne[2], ne[3]);
            goto fail;
        }
        if (off % part->alignment) {
            st = vt_error(VLLM_ERR_FORMAT, "%s: tensor '%.*s' has offset %" PRIu64 ", not a multiple of the alignment %zu",
                          fn, GGUF_MSG_NAME, name, off, part->alignment);
            goto fail;
        }
        if (off > data_size) {
            st = vt_error(VLLM_ERR_FORMAT,
                          "%s: tensor '%.*s' has offset %" PRIu64 " past the end of the data section (%" PRIu64 " bytes)",
                          fn, GGUF_MSG_NAME, name, off, data_size);
            goto fail;
        }
        if (bs == 0) continue;  /* a type this reader does not know: listed, size unknown (data NULL, nbytes 0) */
        if (ne[0] % bs) {
            st = vt_error(VLLM_ERR_FORMAT, "%s: tensor '%.*s' of type %s has ne[0] = %" PRId64
                          ", not a multiple of the block size %" PRId64, fn, GGUF_MSG_NAME, name,
                          gguf_type_name(ti->type), ne[0], bs);
            goto fail;
        }
        /* bytes = ne[0] / block * type_size * ne[1] * ne[2] * ne[3] */
        uint64_t nb = 0;
        if (!empty) {
            nb = (uint64_t)(ne[0] / bs);
            overflow = nb > UINT64_MAX / ts;
            nb *= ts;
            for (int d = 1; d < ti->n_dims && !overflow; d++) {
                if (nb > UINT64_MAX / (uint64_t)ne[d]) overflow = true;
                else nb *= (uint64_t)ne[d];
            }
        }
        if (overflow || nb > (uint64_t)SIZE_MAX) {
            st = vt_error(VLLM_ERR_FORMAT,
                          "%s: tensor '%.*s' of type %s with ne [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                          "] is too large",
                          fn, GGUF_MSG_NAME, name, gguf_type_name(ti->type), ne[0], ne[1], ne[2], ne[3]);
            goto fail;
        }
        if (nb > data_size - off) {
            st = vt_error(VLLM_ERR_FORMAT,
                          "%s: tensor '%.*s' needs bytes [%" PRIu64 ", %" PRIu64 ") of the data section, which has %" PRIu64
                          " (truncated file?)",
                          fn, GGUF_MSG_NAME, name, off, off + nb, data_size);
            goto fail;
        }
        ti->nbytes = (size_t)nb;
        ti->data = nb ? part->map + data_start + off : NULL;
    }
    free(offsets);
    return VLLM_OK;
fail:
    free(offsets);
    return st;
}

/* ------------------------------------------------------------------ */
/* opening                                                             */
/* ------------------------------------------------------------------ */

static gguf_part *gguf_add_part(gguf_file *f, const char *name) {
    gguf_part *p = realloc(f->parts, ((size_t)f->n_parts + 1) * sizeof *p);
    if (!p) return NULL;
    f->parts = p;
    p = &f->parts[f->n_parts];
    memset(p, 0, sizeof *p);
    p->name = strdup(name);
    if (!p->name) return NULL;
    f->n_parts++;
    return p;
}

static const char *gguf_basename(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* Maps path read-only as a new part and parses it. */
static vllm_status gguf_load_path(gguf_file *f, const char *path) {
    gguf_part *p = gguf_add_part(f, gguf_basename(path));
    if (!p) return vt_error(VLLM_ERR_NO_MEMORY, "%s: out of memory", path);
    int fd;
    struct stat sb;
    vllm_status st = rf_open(path, &fd, &sb);  /* a FIFO or a device is refused, never waited on */
    if (st) return st;
    if (sb.st_size < GGUF_HEADER_BYTES) {
        close(fd);
        return vt_error(VLLM_ERR_FORMAT, "%s: %lld bytes, too short for a GGUF header (%d bytes)", p->name,
                        (long long)sb.st_size, GGUF_HEADER_BYTES);
    }
    if ((uint64_t)sb.st_size > (uint64_t)SIZE_MAX) {
        close(fd);
        return vt_error(VLLM_ERR_IO, "%s: file too large to map", path);
    }
    void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd);
    if (map == MAP_FAILED) return vt_error(VLLM_ERR_IO, "%s: mmap failed: %s", path, strerror(err));
    p->map = map;
    p->size = (size_t)sb.st_size;
    p->mapped = true;
    return gguf_parse_part(f, f->n_parts - 1);
}

/* Checks part k's split.no / split.count (where present) against a set of count parts. */
static vllm_status gguf_check_split_keys(const gguf_file *f, int k, uint64_t count) {
    const gguf_part *p = &f->parts[k];
    vllm_status err = VLLM_OK;
    uint64_t v;
    if (gguf_part_u64(p, "split.no", &v, &err) && v != (uint64_t)k)
        return vt_error(VLLM_ERR_FORMAT, "%s: split.no is %" PRIu64 ", expected %d (part %d of %" PRIu64 ")", p->name, v,
                        k, k + 1, count);
    if (err) return err;
    if (gguf_part_u64(p, "split.count", &v, &err) && v != count)
        return vt_error(VLLM_ERR_FORMAT, "%s: split.count is %" PRIu64 ", expected %" PRIu64 " (as %s says)", p->name, v,
                        count, f->parts[0].name);
    return err;
}

/* After every part: split.tensors.count, duplicate tensor names, the name table. */
static vllm_status gguf_finish(gguf_file *f) {
    const gguf_part *p0 = &f->parts[0];
    vllm_status err = VLLM_OK;
    int64_t want;
    if (gguf_part_i64(p0, "split.tensors.count", &want, &err) && (want < 0 || (uint64_t)want != f->n_tensors))
        return vt_error(VLLM_ERR_FORMAT, "%s: split.tensors.count is %" PRId64 " but the %d part%s hold %zu tensors",
                        p0->name, want, f->n_parts, f->n_parts == 1 ? "" : "s", f->n_tensors);
    if (err) return err;
    size_t dup, first;
    vllm_status st = gguf_hash_build(&f->names, f->tensors, sizeof *f->tensors, f->n_tensors, &dup, &first);
    if (st) return st;
    if (dup != (size_t)-1) {
        const gguf_tensor_info *a = &f->tensors[first], *b = &f->tensors[dup];
        if (a->file == b->file)
            return vt_error(VLLM_ERR_FORMAT, "%s: tensor name '%.*s' appears twice", f->parts[b->file].name,
                            GGUF_MSG_NAME, b->name);
        return vt_error(VLLM_ERR_FORMAT, "%s: tensor '%.*s' is also in %s", f->parts[b->file].name, GGUF_MSG_NAME,
                        b->name, f->parts[a->file].name);
    }
    return VLLM_OK;
}

/* The split count the first part's metadata gives (absent: 0). */
static vllm_status gguf_meta_split_count(const gguf_file *f, uint64_t *count) {
    vllm_status err = VLLM_OK;
    *count = 0;
    if (gguf_part_u64(&f->parts[0], "split.count", count, &err) && *count == 0)
        return vt_error(VLLM_ERR_FORMAT, "%s: split.count is 0", f->parts[0].name);
    return err;
}

/* "<prefix>-NNNNN-of-MMMMM.gguf" with 1 <= N <= M: true with N, M and the prefix length (within path). */
static bool gguf_split_name(const char *path, unsigned *no, unsigned *count, size_t *prefix_len) {
    static const char SUFFIX[] = "-00000-of-00000.gguf";
    size_t n = strlen(path), sl = sizeof SUFFIX - 1;
    if (n < sl) return false;
    const char *s = path + n - sl;
    unsigned a = 0, b = 0;
    for (size_t i = 0; i < sl; i++) {
        if (SUFFIX[i] == '0') {
            if (s[i] < '0' || s[i] > '9') return false;
            if (i < 6) a = a * 10 + (unsigned)(s[i] - '0');
            else b = b * 10 + (unsigned)(s[i] - '0');
        } else if (s[i] != SUFFIX[i])
            return false;
    }
    if (a < 1 || b < 1 || a > b) return false;
    *no = a;
    *count = b;
    *prefix_len = n - sl;
    return true;
}

vllm_status gguf_open(const char *path, gguf_file **out) {
    if (!out) return vt_error(VLLM_ERR_INVALID_ARG, "gguf_open: out is NULL");
    *out = NULL;
    if (!path) return vt_error(VLLM_ERR_INVALID_ARG, "gguf_open: path is NULL");
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) return vt_error(VLLM_ERR_NO_MEMORY, "%s: out of memory", path);
    char *part_path = NULL;
    vllm_status st = gguf_load_path(f, path);
    if (st) goto done;

    unsigned name_no = 0, name_count = 0;
    size_t prefix_len = 0;
    bool named = gguf_split_name(path, &name_no, &name_count, &prefix_len);
    uint64_t count;
    st = gguf_meta_split_count(f, &count);
    if (st) goto done;
    const char *base = f->parts[0].name;
    if (named && count && count != name_count) {
        st = vt_error(VLLM_ERR_FORMAT, "%s: split.count is %" PRIu64 " but the name says %u parts", base, count,
                      name_count);
        goto done;
    }
    if (!count) count = named ? name_count : 1;
    if (count > 1 && !named) {
        st = vt_error(VLLM_ERR_FORMAT,
                      "%s: split.count is %" PRIu64 " but the name is not <prefix>-NNNNN-of-MMMMM.gguf: "
                      "the other parts cannot be found",
                      base, count);
        goto done;
    }
    if (count > 1 && name_no != 1) {
        const char *pb = gguf_basename(path);  /* the suffix holds no '/': the prefix ends within the base name */
        st = vt_error(VLLM_ERR_INVALID_ARG,
                      "%s: part %u of a %" PRIu64 "-part split model: open the first part, %.*s-00001-of-%05u.gguf", base,
                      name_no, count, (int)(prefix_len - (size_t)(pb - path)), pb, name_count);
        goto done;
    }
    st = gguf_check_split_keys(f, 0, count);  /* a lone file's split keys, if any, must say 0 of 1 */
    if (st) goto done;
    if (count > 1) {
        part_path = malloc(prefix_len + 32);
        if (!part_path) {
            st = vt_error(VLLM_ERR_NO_MEMORY, "%s: out of memory", path);
            goto done;
        }
        for (unsigned k = 1; k < count; k++) {
            memcpy(part_path, path, prefix_len);
            snprintf(part_path + prefix_len, 32, "-%05u-of-%05u.gguf", k + 1, (unsigned)count);
            st = gguf_load_path(f, part_path);
            if (st) {
                vt_error_prefix("%s: part %u of %" PRIu64, base, k + 1, count);
                goto done;
            }
            st = gguf_check_split_keys(f, (int)k, count);
            if (st) goto done;
        }
    }
    st = gguf_finish(f);
done:
    free(part_path);
    if (st) {
        gguf_close(f);
        return st;
    }
    *out = f;
    return VLLM_OK;
}

vllm_status gguf_open_memory_parts(const void *const *data, const size_t *len, size_t n, gguf_file **out) {
    if (!out) return vt_error(VLLM_ERR_INVALID_ARG, "gguf_open_memory: out is NULL");
    *out = NULL;
    if (n == 0 || !data || !len || n > 99999) return vt_error(VLLM_ERR_INVALID_ARG, "gguf_open_memory: bad arguments");
    for (size_t i = 0; i < n; i++)
        if (!data[i] && len[i]) return vt_error(VLLM_ERR_INVALID_ARG, "gguf_open_memory: part %zu is NULL", i + 1);
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) return vt_error(VLLM_ERR_NO_MEMORY, "gguf_open_memory: out of memory");
    vllm_status st = VLLM_OK;
    for (size_t i = 0; i < n && !st; i++) {
        char name[64];
        if (n == 1) snprintf(name, sizeof name, "(memory)");
        else snprintf(name, sizeof name, "(memory part %zu of %zu)", i + 1, n);
        gguf_part *p = gguf_add_part(f, name);
        if (!p) {
            st = vt_error(VLLM_ERR_NO_MEMORY, "gguf_open_memory: out of memory");
            break;
        }
        p->map = data[i];
        p->size = len[i];
        st = gguf_parse_part(f, (int)i);
        if (!st && i == 0) {
            uint64_t count;
            st = gguf_meta_split_count(f, &count);
            if (!st && (count ? count : 1) != n) {
                if (count > n)
                    st = vt_error(VLLM_ERR_INVALID_ARG, "%s: split.count is %" PRIu64 ": a part of a split model, %zu given",
                                  p->name, count, n);
                else
                    st = vt_error(VLLM_ERR_FORMAT, "%s: split.count is %" PRIu64 " but %zu parts are given", p->name,
                                  count ? count : 1, n);
            }
        }
        if (!st) st = gguf_check_split_keys(f, (int)i, n);
    }
    if (!st) st = gguf_finish(f);
    if (st) {
        gguf_close(f);
        return st;
    }
    *out = f;
    return VLLM_OK;
}

vllm_status gguf_open_memory(const void *data, size_t len, gguf_file **out) {
    return gguf_open_memory_parts(&data, &len, 1, out);
}

/* ------------------------------------------------------------------ */
/* accessors                                                           */
/* ------------------------------------------------------------------ */

uint32_t gguf_version(const gguf_file *f) { return f ? f->parts[0].version : 0; }

size_t gguf_alignment(const gguf_file *f) { return f ? f->parts[0].alignment : 0; }

int gguf_part_count(const gguf_file *f) { return f ? f->n_parts : 0; }

const char *gguf_file_name(const gguf_file *f, int file) {
    return f && file >= 0 && file < f->n_parts ? f->parts[file].name : NULL;
}

size_t gguf_kv_count(const gguf_file *f) { return f ? f->parts[0].n_kv : 0; }

const char *gguf_kv_key(const gguf_file *f, size_t i) {
    return f && i < f->parts[0].n_kv ? f->parts[0].kvs[i].key : NULL;
}

int64_t gguf_find_key(const gguf_file *f, const char *key) {
    if (!f || !key) return -1;
    size_t i = gguf_hash_find(&f->parts[0].keys, f->parts[0].kvs, sizeof(gguf_kv), key);
    return i == (size_t)-1 ? -1 : (int64_t)i;
}

gguf_type gguf_kv_type(const gguf_file *f, int64_t i) {
    if (!f || i < 0 || (uint64_t)i >= f->parts[0].n_kv) return GGUF_TYPE_COUNT;
    return (gguf_type)f->parts[0].kvs[i].type;
}

static const gguf_kv *gguf_kv_of(const gguf_file *f, const char *key) {
    return f && key ? gguf_part_kv(&f->parts[0], key) : NULL;
}

bool gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out, vllm_status *err) {
    return f && key && out && gguf_part_u64(&f->parts[0], key, out, err);
}

bool gguf_get_i64(const gguf_file *f, const char *key, int64_t *out, vllm_status *err) {
    return f && key && out && gguf_part_i64(&f->parts[0], key, out, err);
}

/* The "is X, expected Y" refusal of the getters. */
static bool gguf_mismatch(const gguf_file *f, const gguf_kv *kv, const char *expected, vllm_status *err) {
    gguf_set_err(err, vt_error(VLLM_ERR_FORMAT, "%s: %s is %s, expected %s", f->parts[0].name, kv->key,
                               gguf_value_noun(kv->type), expected));
    return false;
}

bool gguf_get_f64(const gguf_file *f, const char *key, double *out, vllm_status *err) {
    const gguf_kv *kv = gguf_kv_of(f, key);
    if (!kv || !out) return false;
    if (!gguf_num_at(kv->type, kv->val, out)) return gguf_mismatch(f, kv, "a number", err);
    return true;
}

bool gguf_get_bool(const gguf_file *f, const char *key, bool *out, vllm_status *err) {
    const gguf_kv *kv = gguf_kv_of(f, key);
    if (!kv || !out) return false;
    if (kv->type != GGUF_TYPE_BOOL) return gguf_mismatch(f, kv, "a bool", err);
    *out = kv->val[0] != 0;
    return true;
}

bool gguf_get_str(const gguf_file *f, const char *key, const char **s, size_t *len, vllm_status *err) {
    const gguf_kv *kv = gguf_kv_of(f, key);
    if (!kv || !s || !len) return false;
    if (kv->type != GGUF_TYPE_STRING) return gguf_mismatch(f, kv, "a string", err);
    *s = (const char *)kv->val;
    *len = (size_t)kv->len;
    return true;
}

bool gguf_get_arr(const gguf_file *f, const char *key, gguf_type *elem_type, uint64_t *count, vllm_status *err) {
    const gguf_kv *kv = gguf_kv_of(f, key);
    if (!kv) return false;
    if (kv->type != GGUF_TYPE_ARRAY) return gguf_mismatch(f, kv, "an array", err);
    if (elem_type) *elem_type = (gguf_type)kv->elem_type;
    if (count) *count = kv->len;
    return true;
}

/* Element i of a fixed-size numeric array, NULL when not one or out of range. */
static const uint8_t *gguf_arr_elem(const gguf_file *f, const char *key, uint64_t i, uint32_t *t) {
    const gguf_kv *kv = gguf_kv_of(f, key);
    if (!kv || kv->type != GGUF_TYPE_ARRAY || !GGUF_VALUE_SIZE[kv->elem_type] || i >= kv->len) return NULL;
    *t = kv->elem_type;
    return kv->val + i * GGUF_VALUE_SIZE[kv->elem_type];
}

bool gguf_arr_f64(const gguf_file *f, const char *key, uint64_t i, double *out) {
    uint32_t t;
    const uint8_t *p = gguf_arr_elem(f, key, i, &t);
    return p && out && gguf_num_at(t, p, out);
}

bool gguf_arr_i64(const gguf_file *f, const char *key, uint64_t i, int64_t *out) {
    uint32_t t;
    const uint8_t *p = gguf_arr_elem(f, key, i, &t);
    if (!p || !out) return false;
    uint64_t u = 0;
    int64_t s = 0;
    int k = gguf_int_at(t, p, &u, &s);
    if (k == 0 || (k == 1 && u > (uint64_t)INT64_MAX)) return false;
    *out = k == 1 ? (int64_t)u : s;
    return true;
}

bool gguf_arr_str(const gguf_file *f, const char *key, uint64_t i, const char **s, size_t *len) {
    const gguf_kv *kv = gguf_kv_of(f, key);
    if (!kv || !s || !len || kv->type != GGUF_TYPE_ARRAY || kv->elem_type != GGUF_TYPE_STRING || i >= kv->len)
        return false;
    uint64_t off = kv->soff64 ? kv->soff64[i] : kv->soff32[i];
    *len = (size_t)gguf_le(kv->val + off, 8);
    *s = (const char *)kv->val + off + 8;
    return true;
}

const void *gguf_arr_data(const gguf_file *f, const char *key) {
    const gguf_kv *kv = gguf_kv_of(f, key);
    if (!kv || kv->type != GGUF_TYPE_ARRAY || !GGUF_VALUE_SIZE[kv->elem_type]) return NULL;
    return kv->val;
}

size_t gguf_tensor_count(const gguf_file *f) { return f ? f->n_tensors : 0; }

const gguf_tensor_info *gguf_tensor_at(const gguf_file *f, size_t i) {
    return f && i < f->n_tensors ? &f->tensors[i] : NULL;
}

const gguf_tensor_info *gguf_find_tensor(const gguf_file *f, const char *name) {
    if (!f || !name) return NULL;
    size_t i = gguf_hash_find(&f->names, f->tensors, sizeof *f->tensors, name);
    return i == (size_t)-1 ? NULL : &f->tensors[i];
}

vllm_status gguf_tensor(const gguf_file *f, const char *name, const gguf_tensor_info **out) {
    if (!out) return vt_error(VLLM_ERR_INVALID_ARG, "gguf_tensor: out is NULL");
    *out = NULL;
    if (!f || !name) return vt_error(VLLM_ERR_INVALID_ARG, "gguf_tensor: bad arguments");
    const gguf_tensor_info *t = gguf_find_tensor(f, name);
    if (!t) return vt_error(VLLM_ERR_NOT_FOUND, "%s: tensor '%s' missing", f->parts[0].name, name);
    if (gguf_type_block_size(t->type) == 0)
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: tensor '%s' has ggml type %" PRIu32 ", which this reader does not know",
                        f->parts[t->file].name, name, t->type);
    *out = t;
    return VLLM_OK;
}
