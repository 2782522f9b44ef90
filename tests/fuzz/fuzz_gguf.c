/*
 * fuzz_gguf.c: libFuzzer target for the GGUF reader (src/loader/gguf.c): header, metadata of every type
 * (nested arrays, string-array indexes), general.alignment, tensor infos and data bounds, split sets.
 * Input: byte 0 picks the layout: (b & 3) % 3 + 1 parts; then, for each part but the last, a 4-byte
 * little-endian length (cut to what is left), then the parts' bytes one after the other. Bit 2 clear: the
 * parts go to gguf_open_memory / gguf_open_memory_parts; set: they are written as files (m.gguf alone,
 * m-0000K-of-0000N.gguf for a set) and the first is opened with gguf_open (mmap, split names).
 * On success every key, array element and tensor is read through the accessors and checked against the
 * others; any crash, leak, sanitizer report or inconsistency is a bug.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "loader/gguf.h"

#define MAX_PARTS 3

static const uint8_t *g_part[MAX_PARTS];
static size_t g_len[MAX_PARTS];
static size_t g_nparts;
static bool g_in_memory;

static void fail(const char *what, const char *name) {
    fprintf(fuzz_quiet_stderr(), "fuzz_gguf: %s ('%s'): %s\n", what, name, vllm_last_error());
    abort();
}

/* [p, p + n) lies inside one of the input parts (memory mode only; files are mapped elsewhere). */
static void check_inside(const void *p, uint64_t n, const char *what, const char *name) {
    if (!g_in_memory) return;
    const uint8_t *q = p;
    for (size_t i = 0; i < g_nparts; i++)
        if (q >= g_part[i] && q <= g_part[i] + g_len[i] && n <= (uint64_t)(g_part[i] + g_len[i] - q)) return;
    fail(what, name);
}

static volatile uint8_t g_sink;

static void touch(const void *p, size_t n) {
    const uint8_t *q = p;
    for (size_t i = 0; i < n; i++) g_sink ^= q[i];
}

static size_t value_size(gguf_type t) {
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

static void check_kv(const gguf_file *f, size_t i) {
    const char *key = gguf_kv_key(f, i);
    if (!key) fail("listed key without a name", "");
    if (gguf_find_key(f, key) != (int64_t)i) fail("gguf_find_key does not give the key's index", key);
    gguf_type t = gguf_kv_type(f, (int64_t)i);
    if ((unsigned)t >= GGUF_TYPE_COUNT) fail("bad value type", key);
    bool is_int = t <= GGUF_TYPE_INT32 || t == GGUF_TYPE_UINT64 || t == GGUF_TYPE_INT64;
    bool is_float = t == GGUF_TYPE_FLOAT32 || t == GGUF_TYPE_FLOAT64;
    vllm_status err = VLLM_OK;
    uint64_t u;
    int64_t s;
    double d;
    bool b;
    const char *str;
    size_t len;
    gguf_type et;
    uint64_t count;
    /* each getter: true exactly for the types it converts (integers: when the value fits) */
    bool gu = gguf_get_u64(f, key, &u, &err);
    if (!gu && err != VLLM_ERR_FORMAT) fail("get_u64 refusal without FORMAT", key);
    if (gu && !is_int) fail("get_u64 on a non-integer", key);
    err = VLLM_OK;
    bool gi = gguf_get_i64(f, key, &s, &err);
    if (gi && !is_int) fail("get_i64 on a non-integer", key);
    if (is_int && !gu && !gi) fail("an integer neither uint64 nor int64", key);
    if (gu && gi && (s < 0 || (uint64_t)s != u)) fail("get_u64 and get_i64 disagree", key);
    if (!gi && err != VLLM_ERR_FORMAT) fail("get_i64 refusal without FORMAT", key);
    err = VLLM_OK;
    if (gguf_get_f64(f, key, &d, &err) != (is_int || is_float)) fail("get_f64", key);
    if (gguf_get_bool(f, key, &b, NULL) != (t == GGUF_TYPE_BOOL)) fail("get_bool", key);
    if (gguf_get_str(f, key, &str, &len, NULL) != (t == GGUF_TYPE_STRING)) fail("get_str", key);
    if (t == GGUF_TYPE_STRING) {
        check_inside(str, len, "string outside the input", key);
        touch(str, len);
    }
    if (gguf_get_arr(f, key, &et, &count, NULL) != (t == GGUF_TYPE_ARRAY)) fail("get_arr", key);
    if (t != GGUF_TYPE_ARRAY) {
        if (gguf_arr_data(f, key) || gguf_arr_str(f, key, 0, &str, &len) || gguf_arr_i64(f, key, 0, &s) ||
            gguf_arr_f64(f, key, 0, &d))
            fail("array accessor on a scalar", key);
        return;
    }
    if ((unsigned)et >= GGUF_TYPE_COUNT) fail("bad element type", key);
    size_t esz = value_size(et);
    const void *data = gguf_arr_data(f, key);
    if ((data != NULL) != (esz != 0)) fail("gguf_arr_data", key);
    if (data) {
        if (count > UINT64_MAX / esz) fail("array too large", key);
        check_inside(data, count * esz, "array outside the input", key);
        touch(data, (size_t)(count * esz));
    }
    bool num = esz && et != GGUF_TYPE_BOOL;
    for (uint64_t j = 0; j < count; j++) {
        bool has_f = gguf_arr_f64(f, key, j, &d), has_i = gguf_arr_i64(f, key, j, &s);
        if (has_f != num) fail("arr_f64", key);
        if (has_i && !(num && et != GGUF_TYPE_FLOAT32 && et != GGUF_TYPE_FLOAT64)) fail("arr_i64 on a non-integer", key);
        bool has_s = gguf_arr_str(f, key, j, &str, &len);
        if (has_s != (et == GGUF_TYPE_STRING)) fail("arr_str", key);
        if (has_s) {
            check_inside(str, len, "array string outside the input", key);
            touch(str, len);
        }
        if (!esz && et != GGUF_TYPE_STRING) break;  /* arrays of arrays: nothing to read */
    }
    if (gguf_arr_f64(f, key, count, &d) || gguf_arr_i64(f, key, count, &s) || gguf_arr_str(f, key, count, &str, &len))
        fail("array element past the end", key);
}

static void check_tensor(const gguf_file *f, size_t i) {
    const gguf_tensor_info *t = gguf_tensor_at(f, i);
    if (!t || !t->name) fail("listed tensor missing", "");
    if (gguf_find_tensor(f, t->name) != t) fail("gguf_find_tensor does not find the tensor", t->name);
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS) fail("n_dims", t->name);
    if (t->file < 0 || t->file >= gguf_part_count(f) || !gguf_file_name(f, t->file)) fail("file", t->name);
    for (int d = 0; d < GGUF_MAX_DIMS; d++)
        if (t->ne[d] < 0 || (d >= t->n_dims && t->ne[d] != 1)) fail("ne", t->name);
    const gguf_tensor_info *out = NULL;
    vllm_status st = gguf_tensor(f, t->name, &out);
    int64_t bs = gguf_type_block_size(t->type);
    if (bs == 0) {
        if (st != VLLM_ERR_UNSUPPORTED || out || t->data || t->nbytes) fail("unknown type served", t->name);
        return;
    }
    if (st != VLLM_OK || out != t) fail("gguf_tensor", t->name);
    if (t->ne[0] % bs) fail("ne[0] not a multiple of the block", t->name);
    /* nbytes = ne[0] / block * type_size * ne[1] * ne[2] * ne[3], checked not to overflow by the reader
     * unless a dimension is 0 (then 0 whatever the others) */
    bool empty = false;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) empty |= t->ne[d] == 0;
    uint64_t nb = empty ? 0 : (uint64_t)(t->ne[0] / bs) * gguf_type_size(t->type);
    for (int d = 1; d < GGUF_MAX_DIMS && !empty; d++)
        if (__builtin_mul_overflow(nb, (uint64_t)t->ne[d], &nb)) fail("size overflows", t->name);
    if (nb != t->nbytes) fail("nbytes", t->name);
    if ((t->data != NULL) != (t->nbytes != 0)) fail("data and nbytes", t->name);
    if (t->data) {
        check_inside(t->data, t->nbytes, "tensor data outside the input", t->name);
        touch(t->data, t->nbytes);
    }
}

static void check_file(const gguf_file *f) {
    uint32_t v = gguf_version(f);
    size_t a = gguf_alignment(f);
    if ((v != 2 && v != 3) || a == 0 || (a & (a - 1))) fail("version or alignment", "");
    for (size_t i = 0; i < gguf_kv_count(f); i++) check_kv(f, i);
    for (size_t i = 0; i < gguf_tensor_count(f); i++) check_tensor(f, i);
    if (gguf_kv_key(f, gguf_kv_count(f)) || gguf_tensor_at(f, gguf_tensor_count(f))) fail("past the end", "");
    /* a name no listed key / tensor has is not found (the fuzzer learns these names too: one it put in the file
     * must be found as itself) */
    const char *no_t = "no such tensor\x01", *no_k = "no such key\x01";
    const gguf_tensor_info *ti = gguf_find_tensor(f, no_t);
    const int64_t ki = gguf_find_key(f, no_k);
    if ((ti && (!ti->name || strcmp(ti->name, no_t))) || (ki != -1 && (!gguf_kv_key(f, (size_t)ki) ||
                                                                       strcmp(gguf_kv_key(f, (size_t)ki), no_k))))
        fail("absent found", "");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_quiet_stderr();
    if (size < 1) return 0;
    uint8_t mode = data[0];
    data++, size--;
    g_nparts = (size_t)(mode & 3) % 3 + 1;
    g_in_memory = !(mode & 4);
    size_t lens[MAX_PARTS];
    for (size_t k = 0; k + 1 < g_nparts; k++) {
        size_t n = 0;
        if (size >= 4) {
            n = (size_t)data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16 | (size_t)data[3] << 24;
            data += 4, size -= 4;
        }
        lens[k] = n;
    }
    for (size_t k = 0; k < g_nparts; k++) {
        size_t n = k + 1 < g_nparts ? (lens[k] < size ? lens[k] : size) : size;
        g_part[k] = data;
        g_len[k] = n;
        data += n, size -= n;
    }

    gguf_file *f = NULL;
    vllm_status st;
    if (g_in_memory) {
        const void *parts[MAX_PARTS];
        for (size_t k = 0; k < g_nparts; k++) parts[k] = g_part[k];
        st = gguf_open_memory_parts(parts, g_len, g_nparts, &f);
    } else {
        char name[64], path[512];
        for (size_t k = 0; k < MAX_PARTS; k++) { /* this input's parts; earlier inputs' others removed */
            for (size_t n = 2; n <= MAX_PARTS; n++) {
                snprintf(name, sizeof name, "m-%05zu-of-%05zu.gguf", k + 1, n);
                fuzz_write_file(name, n == g_nparts && k < g_nparts ? g_part[k] : NULL, g_len[k < g_nparts ? k : 0]);
            }
        }
        fuzz_write_file("m.gguf", g_nparts == 1 ? g_part[0] : NULL, g_len[0]);
        if (g_nparts == 1) snprintf(path, sizeof path, "%s/m.gguf", fuzz_dir());
        else snprintf(path, sizeof path, "%s/m-00001-of-%05zu.gguf", fuzz_dir(), g_nparts);
        st = gguf_open(path, &f);
    }
    if (st == VLLM_OK) {
        if (!f) fail("no handle on success", "");
        if (gguf_part_count(f) != (int)g_nparts) fail("part count", "");
        check_file(f);
        gguf_close(f);
    } else {
        if (f) fail("a handle on failure", "");
        if (st != VLLM_ERR_FORMAT && st != VLLM_ERR_INVALID_ARG && !(st == VLLM_ERR_NOT_FOUND && !g_in_memory))
            fail("unexpected status", "");
    }
    return 0;
}
