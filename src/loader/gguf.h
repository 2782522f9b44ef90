/*
 * gguf.h: reading GGUF files (llama.cpp's model format, versions 2 and 3), memory-mapped (prefix gguf_).
 *
 * A file is: magic "GGUF", u32 version, u64 tensor count, u64 metadata count; the metadata key/value
 * pairs (key: u64 length + bytes; u32 value type; the value: scalars little-endian, strings as u64
 * length + bytes, arrays as u32 element type + u64 count + elements, arrays of arrays allowed); the
 * tensor infos (name, u32 n_dims, n_dims x u64 ne (ne[0] the innermost, fastest-varying dimension),
 * u32 ggml type, u64 offset relative to the data section); padding to general.alignment (default 32,
 * a power of two); the data section.
 *
 * Split files (name-00001-of-0000N.gguf, with split.count / split.no / split.tensors.count in the
 * metadata): opening the first part opens every part; metadata come from the first, tensors from all.
 *
 * Every count, length, offset and size is checked (overflow, bounds, tensor data inside its file,
 * offsets multiples of the alignment, ne products, duplicate names) before use; a malformed file is
 * VLLM_ERR_FORMAT with one message naming the file (and key or tensor), never a crash.
 */
#ifndef VLLM_LOADER_GGUF_H
#define VLLM_LOADER_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vllm.h"

typedef struct gguf_file gguf_file;

/* Metadata value types (the file's numbering). */
typedef enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
} gguf_type;

/* Tensor element types (ggml's numbering, ggml.h enum ggml_type). Block types hold block_size
 * elements in type_size bytes (gguf_type_block_size / gguf_type_size). */
typedef enum ggml_type {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q4_0 = 2,
    GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6,
    GGML_TYPE_Q5_1 = 7,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q8_1 = 9,
    GGML_TYPE_Q2_K = 10,
    GGML_TYPE_Q3_K = 11,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14,
    GGML_TYPE_Q8_K = 15,
    GGML_TYPE_IQ2_XXS = 16,
    GGML_TYPE_IQ2_XS = 17,
    GGML_TYPE_IQ3_XXS = 18,
    GGML_TYPE_IQ1_S = 19,
    GGML_TYPE_IQ4_NL = 20,
    GGML_TYPE_IQ3_S = 21,
    GGML_TYPE_IQ2_S = 22,
    GGML_TYPE_IQ4_XS = 23,
    GGML_TYPE_I8 = 24,
    GGML_TYPE_I16 = 25,
    GGML_TYPE_I32 = 26,
    GGML_TYPE_I64 = 27,
    GGML_TYPE_F64 = 28,
    GGML_TYPE_IQ1_M = 29,
    GGML_TYPE_BF16 = 30,
    GGML_TYPE_TQ1_0 = 34,
    GGML_TYPE_TQ2_0 = 35,
    GGML_TYPE_MXFP4 = 39,
    GGML_TYPE_COUNT = 40
} ggml_type;

/* Name ("Q4_K", "F16"; "?" when unknown), elements per block and bytes per block of a tensor type;
 * block size 0 for a number the reader does not know (such a tensor is still listed: its data size is
 * then unknown and gguf_tensor refuses it). */
const char *gguf_type_name(uint32_t type);
int64_t gguf_type_block_size(uint32_t type);
size_t gguf_type_size(uint32_t type);

#define GGUF_MAX_DIMS 4

typedef struct gguf_tensor_info {
    const char *name;
    uint32_t type;                 /* ggml_type */
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];     /* ne[0] innermost (a weight (out, in) has ne = {in, out}); unused dims 1 */
    const void *data;              /* into the read-only map: never write */
    size_t nbytes;
    int file;                      /* which part of a split model (0-based) */
} gguf_tensor_info;

/* Opens a .gguf file (every part when it is the first of a split set). */
vllm_status gguf_open(const char *path, gguf_file **out);
/* Same on a buffer (not copied; must outlive the handle): the fuzz target and tests. */
vllm_status gguf_open_memory(const void *data, size_t len, gguf_file **out);
void gguf_close(gguf_file *f);

uint32_t gguf_version(const gguf_file *f);
size_t gguf_alignment(const gguf_file *f);

/* ---- metadata ---- */
size_t gguf_kv_count(const gguf_file *f);
const char *gguf_kv_key(const gguf_file *f, size_t i);
/* Index of a key, -1 when absent. */
int64_t gguf_find_key(const gguf_file *f, const char *key);
gguf_type gguf_kv_type(const gguf_file *f, int64_t i);

/* Typed getters by key. They return false when the key is absent; when it is present with a type that
 * does not convert they also return false and, if err is not NULL, set *err to VLLM_ERR_FORMAT with a
 * message ("model.gguf: qwen3.block_count is a string, expected an integer"); *err is left alone
 * otherwise. Integers convert between integer types when the value fits; floats accept F32 / F64 and
 * integers. */
bool gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out, vllm_status *err);
bool gguf_get_i64(const gguf_file *f, const char *key, int64_t *out, vllm_status *err);
bool gguf_get_f64(const gguf_file *f, const char *key, double *out, vllm_status *err);
bool gguf_get_bool(const gguf_file *f, const char *key, bool *out, vllm_status *err);
/* A string value: pointer into the map (not NUL-terminated) and its length. */
bool gguf_get_str(const gguf_file *f, const char *key, const char **s, size_t *len, vllm_status *err);

/* An array value: its element type and count (arrays of arrays: GGUF_TYPE_ARRAY, elements not readable
 * through the accessors below). */
bool gguf_get_arr(const gguf_file *f, const char *key, gguf_type *elem_type, uint64_t *count, vllm_status *err);
/* Element i of an array of numbers as double / int64 (false when out of range or not a number). */
bool gguf_arr_f64(const gguf_file *f, const char *key, uint64_t i, double *out);
bool gguf_arr_i64(const gguf_file *f, const char *key, uint64_t i, int64_t *out);
/* Element i of an array of strings (pointer into the map and length). O(1): the reader indexes string
 * arrays when it opens the file. */
bool gguf_arr_str(const gguf_file *f, const char *key, uint64_t i, const char **s, size_t *len);
/* Contiguous elements of an array of fixed-size numbers (e.g. tokenizer.ggml.scores, F32), pointer into
 * the map (only as aligned as the file made it: read with memcpy), NULL for strings and arrays. */
const void *gguf_arr_data(const gguf_file *f, const char *key);

/* ---- tensors ---- */
size_t gguf_tensor_count(const gguf_file *f);
/* Tensor i (file order, part by part). */
const gguf_tensor_info *gguf_tensor_at(const gguf_file *f, size_t i);
/* By name, NULL when absent (hash lookup). */
const gguf_tensor_info *gguf_find_tensor(const gguf_file *f, const char *name);

/* Base name of part `file` (messages). */
const char *gguf_file_name(const gguf_file *f, int file);

/* ---- additions ---- */

/* Behaviour worth knowing (gguf.c):
 * - gguf_open and split sets: a set is recognised by the name <prefix>-NNNNN-of-MMMMM.gguf and/or split.count
 *   > 1 in the metadata; the other parts are <prefix>-KKKKK-of-MMMMM.gguf in the same folder. Each part's
 *   split.no / split.count (where present) must match its place, the first part's split.tensors.count (where
 *   present) the total. Opening a part other than the first is VLLM_ERR_INVALID_ARG naming the first;
 *   split.count > 1 under a name without the pattern, or a name and split.count that disagree, is
 *   VLLM_ERR_FORMAT; a missing part is rf_open's error (VLLM_ERR_NOT_FOUND) with the part named.
 * - The metadata accessors see the first part only; gguf_version / gguf_alignment are the first part's.
 * - gguf_kv_type of an index out of range is GGUF_TYPE_COUNT; gguf_kv_key NULL.
 * - Getters: a bool is not an integer (gguf_get_u64 / _i64 / _f64 refuse it), any nonzero byte is true;
 *   gguf_arr_f64 / gguf_arr_i64 read integer (and for _f64 float) arrays only, not bools.
 * - Keys and tensor names holding a NUL byte are refused (VLLM_ERR_FORMAT); other bytes are not checked.
 * - Arrays of arrays are read (checked) up to 16 levels deep; deeper is VLLM_ERR_FORMAT.
 * - A file may end right after its tensor infos when no tensor has bytes (vocabulary-only files do). */

#define GGUF_DEFAULT_ALIGNMENT 32

/* Number of parts (1 for a single file); gguf_file_name takes 0 .. count-1. */
int gguf_part_count(const gguf_file *f);

/* The parts of a split model given as buffers, in order (not copied; they must outlive the handle): the
 * first part's split.count (absent: 1) must equal n, every part's split.no (where present) its index.
 * gguf_open_memory(data, len) is this with one part, so a buffer that is one part of a larger split set is
 * refused there (VLLM_ERR_INVALID_ARG). Parts are named "(memory)" (one) or "(memory part K of N)". */
vllm_status gguf_open_memory_parts(const void *const *data, const size_t *len, size_t n, gguf_file **out);

/* A tensor to load: VLLM_ERR_NOT_FOUND ("model.gguf: tensor 'x' missing") when absent,
 * VLLM_ERR_UNSUPPORTED when its type is a number the reader does not know (its byte size is then
 * unknown: such a tensor is listed by gguf_tensor_at / gguf_find_tensor with data NULL and nbytes 0).
 * An empty tensor (a zero dimension) has nbytes 0 and data NULL. */
vllm_status gguf_tensor(const gguf_file *f, const char *name, const gguf_tensor_info **out);

#endif
