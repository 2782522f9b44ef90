/*
 * safetensors.c: the safetensors reader (mmap + header validation + name
 * lookup, single file or sharded folder) and writer.
 *
 * Layout of an st_set: files[] (one per mapped file), entries[] (one per
 * tensor, in file order) and an open-addressing hash table over entry
 * names for st_find. Every number read from a file is checked before use.
 */
#include "loader/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "core/error.h"
#include "loader/regular_file.h"

/* More dims than this in a header is treated as malformed (TENSOR_MAX_DIMS is what st_find serves). */
#define ST_MAX_NDIM 16
/* An index json larger than this is not an index (a 1T-parameter model's is a few MB). */
#define ST_MAX_INDEX_BYTES (256u * 1024u * 1024u)

/* ------------------------------------------------------------------ */
/* dtypes as safetensors spells them                                   */
/* ------------------------------------------------------------------ */

/* Every dtype the safetensors format defines, with its width in bits and
   the tensor.h dtype it maps to (-1: readable header, not loadable). */
typedef struct st_dtype_info {
    const char *name;
    int bits;
    int dtype;
} st_dtype_info;

static const st_dtype_info ST_DTYPES[] = {
    {"F32", 32, DTYPE_F32},   {"F16", 16, DTYPE_F16},     {"BF16", 16, DTYPE_BF16},
    {"I32", 32, DTYPE_I32},   {"I64", 64, DTYPE_I64},     {"U8", 8, DTYPE_U8},
    {"F64", 64, -1},          {"U64", 64, -1},            {"U32", 32, -1},
    {"I16", 16, -1},          {"U16", 16, -1},            {"I8", 8, -1},
    {"BOOL", 8, -1},          {"F8_E4M3", 8, DTYPE_F8_E4M3},         {"F8_E5M2", 8, -1},
    {"F8_E8M0", 8, -1},       {"C64", 64, -1},            {"F6_E2M3", 6, -1},
    {"F6_E3M2", 6, -1},       {"F4", 4, -1},
};

static const st_dtype_info *st_dtype_lookup(const char *name) {
    for (size_t i = 0; i < sizeof ST_DTYPES / sizeof ST_DTYPES[0]; i++)
        if (!strcmp(ST_DTYPES[i].name, name)) return &ST_DTYPES[i];
    return NULL;
}

/* ------------------------------------------------------------------ */
/* the set                                                             */
/* ------------------------------------------------------------------ */

typedef struct st_file {
    char *path;           /* as opened */
    char *base;           /* for messages: base name, or the shard name of an index */
    uint8_t *map;         /* whole file, read-only */
    size_t size;
} st_file;

typedef struct st_entry {
    char *name;
    tensor t;             /* data into the map; valid when loadable */
    bool loadable;        /* dtype in tensor.h and ndim <= TENSOR_MAX_DIMS */
    int ndim;             /* ndim as written (may exceed TENSOR_MAX_DIMS) */
    const char *dtype_str;/* ST_DTYPES name */
    size_t file;          /* index into files */
} st_entry;

struct st_set {
    char *what;           /* base name of what was opened (model.safetensors[.index.json]) */
    st_file *files;
    size_t num_files, cap_files;
    st_entry *entries;
    size_t num_entries, cap_entries;
    size_t *slots;        /* hash table: entry index + 1, 0 = empty */
    size_t num_slots;     /* power of two, > 2 * num_entries */
};

static uint64_t st_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;  /* FNV-1a */
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

/* Index of the entry named name, or (size_t)-1. */
static size_t st_lookup(const st_set *set, const char *name) {
    if (!set || !name || set->num_slots == 0) return (size_t)-1;
    size_t mask = set->num_slots - 1;
    for (size_t i = (size_t)st_hash(name) & mask;; i = (i + 1) & mask) {
        size_t s = set->slots[i];
        if (s == 0) return (size_t)-1;
        if (!strcmp(set->entries[s - 1].name, name)) return s - 1;
    }
}

static void st_slot_insert(size_t *slots, size_t num_slots, const char *name, size_t index) {
    size_t mask = num_slots - 1;
    size_t i = (size_t)st_hash(name) & mask;
    while (slots[i]) i = (i + 1) & mask;
    slots[i] = index + 1;
}

/* Makes room in the hash table for one more entry (load factor <= 1/2). */
static vllm_status st_hash_reserve(st_set *set) {
    if (set->num_slots > 2 * (set->num_entries + 1)) return VLLM_OK;
    size_t n = set->num_slots ? set->num_slots * 2 : 64;
    if (n > SIZE_MAX / sizeof(size_t)) return vt_error(VLLM_ERR_NO_MEMORY, "safetensors: too many tensors");
    size_t *slots = calloc(n, sizeof *slots);
    if (!slots) return vt_error(VLLM_ERR_NO_MEMORY, "safetensors: out of memory for the name table");
    for (size_t e = 0; e < set->num_entries; e++) st_slot_insert(slots, n, set->entries[e].name, e);
    free(set->slots);
    set->slots = slots;
    set->num_slots = n;
    return VLLM_OK;
}

/* Grows *arr (of *cap elements of size elem) to hold at least need. */
static bool st_grow(void **arr, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t n = *cap ? *cap : 16;
    while (n < need) {
        if (n > SIZE_MAX / 2) return false;
        n *= 2;
    }
    if (n > SIZE_MAX / elem) return false;
    void *p = realloc(*arr, n * elem);
    if (!p) return false;
    *arr = p;
    *cap = n;
    return true;
}

void st_close(st_set *set) {
    if (!set) return;
    for (size_t i = 0; i < set->num_files; i++) {
        if (set->files[i].map) munmap(set->files[i].map, set->files[i].size);
        free(set->files[i].path);
        free(set->files[i].base);
    }
    for (size_t i = 0; i < set->num_entries; i++) free(set->entries[i].name);
    free(set->files);
    free(set->entries);
    free(set->slots);
    free(set->what);
    free(set);
}

static const char *st_basename(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* "[a, b, c]" into buf. */
static void st_fmt_shape(char *buf, size_t cap, const int64_t *shape, int ndim) {
    size_t len = 0;
    buf[0] = '\0';
    len += (size_t)snprintf(buf + len, cap - len, "[");
    for (int i = 0; i < ndim && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, i ? ", %" PRId64 : "%" PRId64, shape[i]);
    if (len < cap) snprintf(buf + len, cap - len, "]");
}

/* ------------------------------------------------------------------ */
/* reading one file                                                    */
/* ------------------------------------------------------------------ */

/* Maps path read-only and appends it to set->files; *index receives its position. */
static vllm_status st_map_file(st_set *set, const char *path, const char *base, size_t *index) {
    if (!st_grow((void **)&set->files, &set->cap_files, set->num_files + 1, sizeof(st_file)))
        return vt_error(VLLM_ERR_NO_MEMORY, "%s: out of memory", path);
    st_file *f = &set->files[set->num_files];
    memset(f, 0, sizeof *f);
    f->path = strdup(path);
    f->base = strdup(base);
    set->num_files++;  /* from here st_close frees it */
    if (!f->path || !f->base) return vt_error(VLLM_ERR_NO_MEMORY, "%s: out of memory", path);
    *index = set->num_files - 1;

    int fd;
    struct stat sb;
    vllm_status st = rf_open(path, &fd, &sb); /* a FIFO or a device is refused, never waited on */
    if (st) return st == VLLM_ERR_NOT_FOUND ? VLLM_ERR_IO : st;
    if (sb.st_size < 8) {
        close(fd);
        return vt_error(VLLM_ERR_FORMAT, "%s: file is %lld bytes, too short for the 8-byte header length",
                        base, (long long)sb.st_size);
    }
    if ((uint64_t)sb.st_size > (uint64_t)SIZE_MAX) {
        close(fd);
        return vt_error(VLLM_ERR_IO, "%s: file too large to map", path);
    }
    void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd);
    if (map == MAP_FAILED) return vt_error(VLLM_ERR_IO, "%s: mmap failed: %s", path, strerror(err));
    f->map = map;
    f->size = (size_t)sb.st_size;
    return VLLM_OK;
}

/* Product of non-negative dims; false on overflow (a zero dim makes it 0 whatever the others). */
static bool st_numel(const int64_t *shape, int ndim, uint64_t *out) {
    /* the product of the nonzero dimensions must fit an int64 too (tensor_numel is signed):
     * [2^32, 2^32, 0] is empty but overflows as soon as anything multiplies its dimensions,
     * and the Rust safetensors refuses it as well */
    uint64_t n = 1;
    bool empty = false;
    for (int i = 0; i < ndim; i++) {
        uint64_t d = (uint64_t)shape[i];
        if (d == 0) {
            empty = true;
            continue;
        }
        if (n > (uint64_t)INT64_MAX / d) return false;
        n *= d;
    }
    *out = empty ? 0 : n;
    return true;
}

/* Reads a non-negative JSON integer. */
static bool st_json_u64(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v)) return false;
    json_int_t x = json_integer_value(v);
    if (x < 0) return false;
    *out = (uint64_t)x;
    return true;
}

/* Validates one header entry and appends it to set->entries. */
static vllm_status st_add_entry(st_set *set, size_t fi, const char *name, const json_t *v,
                                const uint8_t *data, uint64_t data_size) {
    const char *fname = set->files[fi].base;
    if (name[0] == '\0') return vt_error(VLLM_ERR_FORMAT, "%s: a tensor has an empty name", fname);
    if (!json_is_object(v)) return vt_error(VLLM_ERR_FORMAT, "%s: tensor '%s': entry is not an object", fname, name);

    /* dtype */
    const json_t *jd = json_object_get(v, "dtype");
    if (!jd) return vt_error(VLLM_ERR_FORMAT, "%s: tensor '%s': dtype missing", fname, name);
    if (!json_is_string(jd)) return vt_error(VLLM_ERR_FORMAT, "%s: tensor '%s': dtype is not a string", fname, name);
    const st_dtype_info *di = st_dtype_lookup(json_string_value(jd));
    if (!di)
        return vt_error(VLLM_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%.32s'", fname, name,
                        json_string_value(jd));

    /* shape */
    const json_t *js = json_object_get(v, "shape");
    if (!js) return vt_error(VLLM_ERR_FORMAT, "%s: tensor '%s': shape missing", fname, name);
    if (!json_is_array(js)) return vt_error(VLLM_ERR_FORMAT, "%s: tensor '%s': shape is not an array", fname, name);
    size_t ndim = json_array_size(js);
    if (ndim > ST_MAX_NDIM)
        return vt_error(VLLM_ERR_FORMAT, "%s: tensor '%s': shape has %zu dims (at most %d)", fname, name, ndim,
                        ST_MAX_NDIM);
    int64_t shape[ST_MAX_NDIM];
    for (size_t i = 0; i < ndim; i++) {
        uint64_t d;
        if (!st_json_u64(json_array_get(js, i), &d) || d > (uint64_t)INT64_MAX)
            return vt_error(VLLM_ERR_FORMAT, "%s: tensor '%s': shape[%zu] is not a non-negative integer", fname,
                            name, i);
        shape[i] = (int64_t)d;
    }
    uint64_t numel;
    bool overflow = !st_numel(shape, (int)ndim, &numel);
    char sbuf[256];
    st_fmt_shape(sbuf, sizeof sbuf, shape, (int)ndim);
    if (overflow || numel > UINT64_MAX / (uint64_t)di->bits)
        return vt_error(VLLM_ERR_FORMAT, "%s: tensor '%s': shape %s is too large", fname, name, sbuf);
    uint64_t bits = numel * (uint64_t)di->bits;
    if (bits % 8 != 0)
        return vt_error(VLLM_ERR_FORMAT, "%s: tensor '%s': shape %s of %s is not a whole number of bytes", fname,
                        name, sbuf, di->name);
    uint64_t nbytes = bits / 8;
    if (numel > (uint64_t)INT64_MAX)
        return vt_error(VLLM_ERR_FORMAT, "%s: tensor '%s': shape %s is too large", fname, name, sbuf);

    /* data_offsets */
    const json_t *jo = json_object_get(v, "data_offsets");
    if (!jo) return vt_error(VLLM_ERR_FORMAT, "%s: tensor '%s': data_offsets missing", fname, name);
    uint64_t begin, end;
    if (!json_is_array(jo) || json_array_size(jo) != 2 || !st_json_u64(json_array_get(jo, 0), &begin) ||
        !st_json_u64(json_array_get(jo, 1), &end))
        return vt_error(VLLM_ERR_FORMAT, "%s: tensor '%s': data_offsets is not [begin, end] of non-negative integers",
                        fname, name);
    if (begin > end)
        return vt_error(VLLM_ERR_FORMAT, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] has begin > end",
                        fname, name, begin, end);
    if (end > data_size)
        return vt_error(VLLM_ERR_FORMAT,
                        "%s: truncated: tensor '%s' needs bytes [%" PRIu64 ", %" PRIu64 ") but the data section has %" PRIu64,
                        fname, name, begin, end, data_size);
    if (end - begin != nbytes)
        return vt_error(VLLM_ERR_FORMAT,
                        "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 ") hold %" PRIu64
                        " bytes but shape %s of %s needs %" PRIu64,
                        fname, name, begin, end, end - begin, sbuf, di->name, nbytes);

    /* append (duplicate names across shards are an error) */
    size_t dup = st_lookup(set, name);
    if (dup != (size_t)-1)
        return vt_error(VLLM_ERR_FORMAT, "%s: tensor '%s' is also in %s", fname, name,
                        set->files[set->entries[dup].file].base);
    vllm_status st = st_hash_reserve(set);
    if (st) return st;
    if (!st_grow((void **)&set->entries, &set->cap_entries, set->num_entries + 1, sizeof(st_entry)))
        return vt_error(VLLM_ERR_NO_MEMORY, "%s: out of memory", fname);
    st_entry *e = &set->entries[set->num_entries];
    memset(e, 0, sizeof *e);
    e->name = strdup(name);
    if (!e->name) return vt_error(VLLM_ERR_NO_MEMORY, "%s: out of memory", fname);
    e->ndim = (int)ndim;
    e->dtype_str = di->name;
    e->file = fi;
    e->loadable = di->dtype >= 0 && ndim <= TENSOR_MAX_DIMS;
    if (e->loadable)
        e->t = tensor_make((dtype)di->dtype, (void *)(uintptr_t)(data + begin), (int)ndim, shape);
    else  /* keep what fits, for messages */
        e->t = tensor_make(DTYPE_U8, NULL, ndim < TENSOR_MAX_DIMS ? (int)ndim : TENSOR_MAX_DIMS, shape);
    st_slot_insert(set->slots, set->num_slots, e->name, set->num_entries);
    set->num_entries++;
    return VLLM_OK;
}

/* Maps one safetensors file and adds all its tensors to set. base names it in messages. */
static vllm_status st_load_file(st_set *set, const char *path, const char *base) {
    size_t fi = 0;
    vllm_status st = st_map_file(set, path, base, &fi);
    if (st) return st;
    const st_file *f = &set->files[fi];
    const uint8_t *p = f->map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | p[i];
    if (hlen > ST_MAX_HEADER_BYTES)
        return vt_error(VLLM_ERR_FORMAT, "%s: header length %" PRIu64 " is absurd (more than %u bytes)", base, hlen,
                        ST_MAX_HEADER_BYTES);
    if (hlen > f->size - 8)
        return vt_error(VLLM_ERR_FORMAT, "%s: header length %" PRIu64 " exceeds the file size %zu", base, hlen,
                        f->size);
    if (hlen < 2) return vt_error(VLLM_ERR_FORMAT, "%s: header of %" PRIu64 " bytes is too short", base, hlen);

    json_error_t jerr;
    json_t *root = json_loadb((const char *)p + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return vt_error(VLLM_ERR_FORMAT, "%s: header is not valid JSON (byte %d: %s)", base, jerr.position,
                        jerr.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return vt_error(VLLM_ERR_FORMAT, "%s: header is not a JSON object", base);
    }
    const uint8_t *data = p + 8 + hlen;
    uint64_t data_size = (uint64_t)f->size - 8 - hlen;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) {
            if (!json_is_object(val)) {
                json_decref(root);
                return vt_error(VLLM_ERR_FORMAT, "%s: __metadata__ is not an object", base);
            }
            continue;
        }
        st = st_add_entry(set, fi, key, val, data, data_size);
        if (st) {
            json_decref(root);
            return st;
        }
    }
    json_decref(root);
    return VLLM_OK;
}

static st_set *st_new(const char *what) {
    st_set *set = calloc(1, sizeof *set);
    if (!set) return NULL;
    set->what = strdup(what);
    if (!set->what) {
        free(set);
        return NULL;
    }
    return set;
}

vllm_status st_open_file(const char *path, st_set **out) {
    if (!out) return vt_error(VLLM_ERR_INVALID_ARG, "st_open_file: out is NULL");
    *out = NULL;
    if (!path) return vt_error(VLLM_ERR_INVALID_ARG, "st_open_file: path is NULL");
    st_set *set = st_new(st_basename(path));
    if (!set) return vt_error(VLLM_ERR_NO_MEMORY, "%s: out of memory", path);
    vllm_status st = st_load_file(set, path, st_basename(path));
    if (st) {
        st_close(set);
        return st;
    }
    *out = set;
    return VLLM_OK;
}

/* ------------------------------------------------------------------ */
/* sharded folders                                                     */
/* ------------------------------------------------------------------ */

static char *st_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    if (a > SIZE_MAX - b - 2) return NULL;
    char *s = malloc(a + b + 2);
    if (!s) return NULL;
    memcpy(s, dir, a);
    s[a] = '/';
    memcpy(s + a + 1, name, b + 1);
    return s;
}

/* A shard name must stay inside the folder: relative, no ".." component. */
static bool st_shard_name_ok(const char *s) {
    if (s[0] == '\0' || s[0] == '/') return false;
    for (const char *p = s; *p;) {
        const char *q = strchr(p, '/');
        size_t len = q ? (size_t)(q - p) : strlen(p);
        if (len == 0 || (len == 2 && p[0] == '.' && p[1] == '.')) return false;
        if (!q) break;
        p = q + 1;
    }
    return true;
}

static int st_cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static vllm_status st_load_index(st_set *set, const char *dir, const char *index_path) {
    const char *iname = st_basename(index_path);
    char *text;
    size_t text_len;
    vllm_status st = rf_read(index_path, ST_MAX_INDEX_BYTES, &text, &text_len);
    if (st) return st == VLLM_ERR_NOT_FOUND ? VLLM_ERR_IO : st;
    json_error_t jerr;
    json_t *root = json_loadb(text, text_len, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    if (!root) return vt_error(VLLM_ERR_FORMAT, "%s: invalid JSON at line %d: %s", iname, jerr.line, jerr.text);
    const char **shards = NULL;
    json_t *wm = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(root)) {
        st = vt_error(VLLM_ERR_FORMAT, "%s: not a JSON object", iname);
        goto done;
    }
    if (!wm) {
        st = vt_error(VLLM_ERR_FORMAT, "%s: weight_map missing", iname);
        goto done;
    }
    if (!json_is_object(wm)) {
        st = vt_error(VLLM_ERR_FORMAT, "%s: weight_map is not an object", iname);
        goto done;
    }
    size_t n = json_object_size(wm);
    if (n == 0) {
        st = vt_error(VLLM_ERR_FORMAT, "%s: weight_map is empty", iname);
        goto done;
    }
    shards = malloc(n * sizeof *shards);
    if (!shards) {
        st = vt_error(VLLM_ERR_NO_MEMORY, "%s: out of memory", iname);
        goto done;
    }
    /* collect and check shard names, then sort them and drop repeats */
    size_t k = 0;
    const char *key;
    json_t *val;
    json_object_foreach(wm, key, val) {
        if (!json_is_string(val)) {
            st = vt_error(VLLM_ERR_FORMAT, "%s: weight_map['%s'] is not a string", iname, key);
            goto done;
        }
        if (!st_shard_name_ok(json_string_value(val))) {
            st = vt_error(VLLM_ERR_FORMAT, "%s: weight_map['%s'] names a bad shard file '%s'", iname, key,
                          json_string_value(val));
            goto done;
        }
        shards[k++] = json_string_value(val);
    }
    qsort(shards, k, sizeof *shards, st_cmp_str);
    size_t u = 0;
    for (size_t i = 0; i < k; i++)
        if (u == 0 || strcmp(shards[u - 1], shards[i])) shards[u++] = shards[i];

    for (size_t i = 0; i < u; i++) {
        char *path = st_join(dir, shards[i]);
        if (!path) {
            st = vt_error(VLLM_ERR_NO_MEMORY, "%s: out of memory", iname);
            goto done;
        }
        struct stat sb;
        if (stat(path, &sb) != 0) {
            st = vt_error(VLLM_ERR_IO, "%s: shard %s: %s", index_path, shards[i], strerror(errno));
            free(path);
            goto done;
        }
        st = st_load_file(set, path, shards[i]);
        free(path);
        if (st) goto done;
    }

    /* every mapped name must be in the shard the index says */
    json_object_foreach(wm, key, val) {
        size_t e = st_lookup(set, key);
        if (e == (size_t)-1) {
            st = vt_error(VLLM_ERR_FORMAT, "%s: tensor '%s' is not in its shard %s", iname, key,
                          json_string_value(val));
            goto done;
        }
        const char *actual = set->files[set->entries[e].file].base;
        if (strcmp(actual, json_string_value(val))) {
            st = vt_error(VLLM_ERR_FORMAT, "%s: tensor '%s' is in %s, not in %s as the index says", iname, key,
                          actual, json_string_value(val));
            goto done;
        }
    }
done:
    free(shards);
    json_decref(root);
    return st;
}

vllm_status st_open_dir(const char *dir, st_set **out) {
    if (!out) return vt_error(VLLM_ERR_INVALID_ARG, "st_open_dir: out is NULL");
    *out = NULL;
    if (!dir) return vt_error(VLLM_ERR_INVALID_ARG, "st_open_dir: dir is NULL");
    char *single = st_join(dir, "model.safetensors");
    char *index = st_join(dir, "model.safetensors.index.json");
    vllm_status st = VLLM_OK;
    st_set *set = NULL;
    if (!single || !index) {
        st = vt_error(VLLM_ERR_NO_MEMORY, "%s: out of memory", dir);
        goto done;
    }
    struct stat sb;
    bool use_single = stat(single, &sb) == 0;
    if (!use_single && stat(index, &sb) != 0) {
        st = vt_error(VLLM_ERR_IO, "%s: no model.safetensors or model.safetensors.index.json", dir);
        goto done;
    }
    set = st_new(use_single ? "model.safetensors" : "model.safetensors.index.json");
    if (!set) {
        st = vt_error(VLLM_ERR_NO_MEMORY, "%s: out of memory", dir);
        goto done;
    }
    st = use_single ? st_load_file(set, single, "model.safetensors") : st_load_index(set, dir, index);
    if (st) {
        st_close(set);
        set = NULL;
    }
done:
    free(single);
    free(index);
    *out = set;
    return st;
}

/* ------------------------------------------------------------------ */
/* lookups                                                             */
/* ------------------------------------------------------------------ */

size_t st_count(const st_set *set) { return set ? set->num_entries : 0; }

const char *st_name(const st_set *set, size_t i) {
    return set && i < set->num_entries ? set->entries[i].name : NULL;
}

const tensor *st_find(const st_set *set, const char *name) {
    size_t e = st_lookup(set, name);
    if (e == (size_t)-1 || !set->entries[e].loadable) return NULL;
    return &set->entries[e].t;
}

const char *st_file_of(const st_set *set, const char *name) {
    size_t e = st_lookup(set, name);
    return e == (size_t)-1 ? NULL : set->files[set->entries[e].file].base;
}

const char *st_dtype_str(const st_set *set, const char *name) {
    size_t e = st_lookup(set, name);
    return e == (size_t)-1 ? NULL : set->entries[e].dtype_str;
}

/* st_get, with the dtype required: dt, or any float one when dt is DTYPE_COUNT. */
static vllm_status st_get_dt(const st_set *set, const char *name, dtype dt, int ndim, const int64_t *shape,
                             tensor *out) {
    if (!set || !name || !out || ndim < 0 || ndim > TENSOR_MAX_DIMS || (ndim > 0 && !shape))
        return vt_error(VLLM_ERR_INVALID_ARG, "st_get: bad arguments for tensor '%s'", name ? name : "(null)");
    size_t e = st_lookup(set, name);
    if (e == (size_t)-1) return vt_error(VLLM_ERR_NOT_FOUND, "%s: tensor '%s' missing", set->what, name);
    const st_entry *en = &set->entries[e];
    const char *fname = set->files[en->file].base;
    char want[256], have[256];
    st_fmt_shape(want, sizeof want, shape, ndim);
    if (en->ndim > TENSOR_MAX_DIMS)
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: tensor '%s' has %d dims (at most %d supported), expected %s",
                        fname, name, en->ndim, TENSOR_MAX_DIMS, want);
    st_fmt_shape(have, sizeof have, en->t.shape, en->t.ndim);
    bool same = en->t.ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = en->t.shape[i] == shape[i];
    if (!same)
        return vt_error(VLLM_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected %s", fname, name, have, want);
    if (dt != DTYPE_COUNT && (!en->loadable || en->t.dtype != dt))
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s, expected %s", fname, name, en->dtype_str,
                        dtype_name(dt));
    if (!en->loadable || (en->t.dtype != DTYPE_F32 && en->t.dtype != DTYPE_F16 && en->t.dtype != DTYPE_BF16 &&
                          en->t.dtype != dt))
        return vt_error(VLLM_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s, not supported (F32, F16, BF16)", fname,
                        name, en->dtype_str);
    *out = en->t;
    return VLLM_OK;
}

vllm_status st_get(const st_set *set, const char *name, int ndim, const int64_t *shape, tensor *out) {
    return st_get_dt(set, name, DTYPE_COUNT, ndim, shape, out);
}

vllm_status st_get_as(const st_set *set, const char *name, dtype dt, int ndim, const int64_t *shape, tensor *out) {
    if ((unsigned)dt >= DTYPE_COUNT)
        return vt_error(VLLM_ERR_INVALID_ARG, "st_get_as: bad dtype for tensor '%s'", name ? name : "(null)");
    return st_get_dt(set, name, dt, ndim, shape, out);
}

/* ------------------------------------------------------------------ */
/* writing                                                             */
/* ------------------------------------------------------------------ */

/* Byte size of a contiguous host tensor, with checks. */
static vllm_status st_write_check(const char *path, const char *name, const tensor *t, uint64_t *nbytes) {
    if ((unsigned)t->dtype >= DTYPE_COUNT)
        return vt_error(VLLM_ERR_INVALID_ARG, "%s: tensor '%s' has an invalid dtype", path, name);
    if (t->ndim < 0 || t->ndim > TENSOR_MAX_DIMS)
        return vt_error(VLLM_ERR_INVALID_ARG, "%s: tensor '%s' has ndim %d", path, name, t->ndim);
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] < 0) return vt_error(VLLM_ERR_INVALID_ARG, "%s: tensor '%s' has a negative dim", path, name);
    uint64_t numel;
    bool overflow = !st_numel(t->shape, t->ndim, &numel);
    size_t es = dtype_size(t->dtype);
    if (overflow || numel > (uint64_t)INT64_MAX / es || numel * es > (uint64_t)SIZE_MAX)
        return vt_error(VLLM_ERR_INVALID_ARG, "%s: tensor '%s' is too large", path, name);
    if (t->ndim > 0 && t->row_stride != 0 && t->row_stride != tensor_row_len(t))
        return vt_error(VLLM_ERR_INVALID_ARG, "%s: tensor '%s' is not contiguous", path, name);
    *nbytes = numel * es;
    if (*nbytes > 0 && !t->data) return vt_error(VLLM_ERR_INVALID_ARG, "%s: tensor '%s' has no data", path, name);
    return VLLM_OK;
}

/* The header JSON for the tensors (keys in order). */
static vllm_status st_build_header(const char *path, const char *const *names, const tensor *tensors, size_t n,
                                   char **out) {
    json_t *root = json_object();
    json_t *meta = json_object();
    if (!root || !meta || json_object_set_new(root, "__metadata__", meta) ||
        json_object_set_new(meta, "format", json_string("pt"))) {
        json_decref(root);
        return vt_error(VLLM_ERR_NO_MEMORY, "%s: out of memory", path);
    }
    uint64_t offset = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t nb;
        vllm_status st = st_write_check(path, names[i], &tensors[i], &nb);
        if (st) {
            json_decref(root);
            return st;
        }
        if (nb > (uint64_t)INT64_MAX - offset) {
            json_decref(root);
            return vt_error(VLLM_ERR_INVALID_ARG, "%s: tensors are too large", path);
        }
        json_t *e = json_object(), *shape = json_array(), *offs = json_array();
        int bad = !e || !shape || !offs;
        for (int d = 0; !bad && d < tensors[i].ndim; d++)
            bad |= json_array_append_new(shape, json_integer(tensors[i].shape[d]));
        bad = bad || json_array_append_new(offs, json_integer((json_int_t)offset)) ||
              json_array_append_new(offs, json_integer((json_int_t)(offset + nb)));
        bad = bad || json_object_set_new(e, "dtype", json_string(dtype_name(tensors[i].dtype)));
        if (!bad) {
            bad = json_object_set_new(e, "shape", shape) | json_object_set_new(e, "data_offsets", offs);
            shape = offs = NULL;
        }
        if (bad) {
            json_decref(e);
            json_decref(shape);
            json_decref(offs);
            json_decref(root);
            return vt_error(VLLM_ERR_NO_MEMORY, "%s: out of memory", path);
        }
        if (json_object_set_new(root, names[i], e)) {
            json_decref(root);
            return vt_error(VLLM_ERR_INVALID_ARG, "%s: tensor name '%s' is not valid UTF-8", path, names[i]);
        }
        offset += nb;
    }
    *out = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!*out) return vt_error(VLLM_ERR_NO_MEMORY, "%s: out of memory", path);
    return VLLM_OK;
}

vllm_status st_write_file(const char *path, const char *const *names, const tensor *tensors, size_t n) {
    if (!path || (n > 0 && (!names || !tensors)))
        return vt_error(VLLM_ERR_INVALID_ARG, "st_write_file: bad arguments");
    for (size_t i = 0; i < n; i++) {
        if (!names[i] || !names[i][0])
            return vt_error(VLLM_ERR_INVALID_ARG, "%s: tensor %zu has no name", path, i);
        if (!strcmp(names[i], "__metadata__"))
            return vt_error(VLLM_ERR_INVALID_ARG, "%s: '__metadata__' is not a tensor name", path);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(names[i], names[j]))
                return vt_error(VLLM_ERR_INVALID_ARG, "%s: tensor name '%s' given twice", path, names[i]);
    }
    char *header = NULL;
    vllm_status st = st_build_header(path, names, tensors, n, &header);
    if (st) return st;
    size_t hlen = strlen(header);
    size_t padded = (hlen + 7) & ~(size_t)7;

    FILE *fp = fopen(path, "wb");
    if (!fp) {
        st = vt_error(VLLM_ERR_IO, "%s: %s", path, strerror(errno));
        free(header);
        return st;
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    bool ok = fwrite(len8, 1, 8, fp) == 8 && fwrite(header, 1, hlen, fp) == hlen;
    for (size_t i = hlen; ok && i < padded; i++) ok = fputc(' ', fp) != EOF;
    for (size_t i = 0; ok && i < n; i++) {
        uint64_t nb = 0;
        st_write_check(path, names[i], &tensors[i], &nb);  /* validated above */
        ok = nb == 0 || fwrite(tensors[i].data, 1, (size_t)nb, fp) == nb;
    }
    int err = errno;
    if (fclose(fp) != 0 && ok) {
        ok = false;
        err = errno;
    }
    free(header);
    if (!ok) {
        unlink(path);
        return vt_error(VLLM_ERR_IO, "%s: write failed: %s", path, strerror(err));
    }
    return VLLM_OK;
}
