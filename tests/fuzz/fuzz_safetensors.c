/*
 * fuzz_safetensors.c: libFuzzer target for the safetensors reader (src/loader/safetensors.c): header
 * length, JSON header, dtypes, shapes and data offsets, and sharded folders (index + shards).
 * Input: byte 0 picks the layout, bit 0 clear: the rest is dir/model.safetensors;
 * set: the rest is "model.safetensors.index.json" NUL, 2 bytes (little-endian) = n, then
 * n bytes of model-00001-of-00002.safetensors and the rest as model-00002-of-00002.safetensors.
 * On success every tensor is looked up and its bytes read; any crash, leak or sanitizer report is a bug.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "loader/safetensors.h"

static const char *SHARD1 = "model-00001-of-00002.safetensors";
static const char *SHARD2 = "model-00002-of-00002.safetensors";

static void fail(const char *what, const char *name) {
    fprintf(fuzz_quiet_stderr(), "fuzz_safetensors: %s (tensor '%s'): %s\n", what, name, vllm_last_error());
    abort();
}

static void check_set(const st_set *set) {
    size_t n = st_count(set);
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < n; i++) {
        const char *name = st_name(set, i);
        if (!name || !st_dtype_str(set, name) || !st_file_of(set, name)) fail("listed tensor not found", name ? name : "");
        const tensor *t = st_find(set, name);
        tensor out;
        if (t) {
            /* its own shape: loadable F32 / F16 / BF16 must pass, other dtypes are UNSUPPORTED */
            vllm_status st = st_get(set, name, t->ndim, t->shape, &out);
            bool float_type = t->dtype == DTYPE_F32 || t->dtype == DTYPE_F16 || t->dtype == DTYPE_BF16;
            if (float_type ? st != VLLM_OK : st != VLLM_ERR_UNSUPPORTED) fail("st_get with its own shape", name);
            /* touch every byte of the data (mapped read-only). The product of the dims is taken in
               order with overflow checks, not with tensor_nbytes: the reader accepts a shape such
               as [2^32, 2^32, 0] (0 elements) whose partial products overflow int64_t. */
            size_t nb = dtype_size(t->dtype);
            for (int k = 0; k < t->ndim && nb; k++)
                if (__builtin_mul_overflow(nb, (size_t)t->shape[k], &nb)) nb = 0;
            const uint8_t *d = t->data;
            if (nb && !d) fail("tensor without data", name);
            for (size_t k = 0; k < nb; k++) sink ^= d[k];
            /* a wrong shape must fail cleanly */
            int64_t other[TENSOR_MAX_DIMS] = {t->ndim > 0 ? t->shape[0] ^ 1 : 1, 1, 1, 1};
            if (st_get(set, name, t->ndim > 0 ? t->ndim : 1, other, &out) == VLLM_OK) fail("wrong shape accepted", name);
        } else {
            /* present but not loadable (dtype without a tensor.h type, or too many dims) */
            int64_t shape[TENSOR_MAX_DIMS] = {1, 1, 1, 1};
            if (st_get(set, name, 1, shape, &out) == VLLM_OK) fail("unloadable tensor served", name);
        }
    }
    if (st_find(set, "no such tensor") || st_file_of(set, "no such tensor")) fail("absent name found", "");
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_quiet_stderr();
    if (size < 1) return 0;
    bool sharded = data[0] & 1;
    data++, size--;
    if (!sharded) {
        fuzz_write_file("model.safetensors.index.json", NULL, 0);
        fuzz_write_file("model.safetensors", data, size);
    } else {
        const uint8_t *nul = memchr(data, 0, size);
        size_t ilen = nul ? (size_t)(nul - data) : size;
        size_t rest = nul ? size - ilen - 1 : 0;
        const uint8_t *r = nul ? nul + 1 : data + size;
        size_t n1 = rest >= 2 ? (size_t)(r[0] | (r[1] << 8)) : 0;
        if (rest >= 2) r += 2, rest -= 2;
        if (n1 > rest) n1 = rest;
        fuzz_write_file("model.safetensors", NULL, 0);
        fuzz_write_file("model.safetensors.index.json", data, ilen);
        fuzz_write_file(SHARD1, r, n1);
        fuzz_write_file(SHARD2, r + n1, rest - n1);
    }
    st_set *set = NULL;
    vllm_status st = st_open_dir(fuzz_dir(), &set);
    if (st == VLLM_OK) {
        if (!set) fail("no set on success", "");
        check_set(set);
        st_close(set);
    } else if (set) {
        fail("a set on failure", "");
    }
    if (!sharded) { /* the same bytes through st_open_file */
        char path[512];
        snprintf(path, sizeof path, "%s/model.safetensors", fuzz_dir());
        if (st_open_file(path, &set) == VLLM_OK) {
            if (st != VLLM_OK) fail("st_open_file accepts what st_open_dir rejects", "");
            st_close(set);
        }
    }
    return 0;
}
