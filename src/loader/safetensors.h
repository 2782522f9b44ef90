/*
 * safetensors.h: reading (memory-mapped) and writing .safetensors files.
 *
 * A file is an 8-byte little-endian u64 header length N, N bytes of JSON
 * header {"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
 * "__metadata__": {...}}, then the data section; offsets are relative to
 * the data section (byte 8 + N of the file).
 *
 * An st_set holds every tensor of a model folder (one file, or the shards
 * named by model.safetensors.index.json), mapped read-only (MAP_PRIVATE,
 * PROT_READ). Tensor descriptors point straight into the map: never write
 * through them, and note that the data of a tensor is only as aligned as
 * its offset in the file. HF writers keep offsets multiple of the element
 * size, but kernels must not assume more than 2-byte alignment; nothing is
 * copied to fix it.
 *
 * Every size in a file is checked (header length, offsets, shape products)
 * before use; a malformed file gives VLLM_ERR_FORMAT with a message naming
 * the file and tensor, never a crash.
 */
#ifndef VLLM_LOADER_SAFETENSORS_H
#define VLLM_LOADER_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "vllm.h"
#include "tensor/tensor.h"

/* Header length larger than this is rejected as absurd. */
#define ST_MAX_HEADER_BYTES (100u * 1024u * 1024u)

typedef struct st_set st_set;

/* Opens dir/model.safetensors, or dir/model.safetensors.index.json ("weight_map": name -> shard file)
   and every shard it names. VLLM_ERR_IO when neither exists
   ("DIR: no model.safetensors or model.safetensors.index.json"). */
vllm_status st_open_dir(const char *dir, st_set **out);
/* Opens one .safetensors file. */
vllm_status st_open_file(const char *path, st_set **out);
/* Unmaps and frees; NULL is ok. */
void st_close(st_set *set);

/* Number of tensors, and the name of tensor i (file order, shard by shard). */
size_t st_count(const st_set *set);
const char *st_name(const st_set *set, size_t i);

/* Tensor descriptor (dtype, shape, data pointing into the read-only map), NULL when absent.
   Also NULL for a tensor present in the file whose dtype has no dtype enum (F64, I8, F8_E5M2, ...)
   or with more than TENSOR_MAX_DIMS dims: st_get reports those precisely. */
const tensor *st_find(const st_set *set, const char *name);
/* Base name of the file holding a tensor (for messages); NULL when absent. */
const char *st_file_of(const st_set *set, const char *name);
/* The safetensors dtype string of a tensor as written in its file ("BF16", "F8_E4M3"); NULL when absent. */
const char *st_dtype_str(const st_set *set, const char *name);

/* Looks up a required tensor, checks its shape (ndim + dims) and that its dtype is F32/F16/BF16:
     VLLM_ERR_NOT_FOUND   "model.safetensors: tensor 'X' missing"
     VLLM_ERR_FORMAT      "model.safetensors: tensor 'X' has shape [64, 32], expected [64, 64]"
     VLLM_ERR_UNSUPPORTED "model.safetensors: tensor 'X' has dtype I64, not supported (F32, F16, BF16)"
   shape holds ndim expected dims (may be NULL when ndim is 0). */
vllm_status st_get(const st_set *set, const char *name, int ndim, const int64_t *shape, tensor *out);
/* st_get for a tensor of exactly dtype dt, any of tensor.h's (packed formats: MXFP4 blocks and scales are U8):
     VLLM_ERR_UNSUPPORTED "model.safetensors: tensor 'X' has dtype BF16, expected U8" */
vllm_status st_get_as(const st_set *set, const char *name, dtype dt, int ndim, const int64_t *shape, tensor *out);

/* Writes n tensors (contiguous host data, any dtype of tensor.h) into one safetensors file, as HF does:
   "__metadata__": {"format": "pt"} first, then the tensors in the given order with their data packed
   back to back, header padded with spaces to a multiple of 8 bytes. Names must be unique and non-empty.
   On failure the partial file is removed. */
vllm_status st_write_file(const char *path, const char *const *names, const tensor *tensors, size_t n);

#endif
