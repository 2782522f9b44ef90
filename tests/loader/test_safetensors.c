/* test_safetensors.c: safetensors write/read round trips, sharded folders, and every malformed file case. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "loader/safetensors.h"
#include "test.h"


static char g_dir[64];

static void path_in(char *buf, size_t cap, const char *sub, const char *name) {
    if (sub) snprintf(buf, cap, "%s/%s/%s", g_dir, sub, name);
    else snprintf(buf, cap, "%s/%s", g_dir, name);
}

static void write_bytes(const char *path, const void *buf, size_t len) {
    FILE *fp = fopen(path, "wb");
    CHECK(fp != NULL);
    if (!fp) return;
    CHECK(fwrite(buf, 1, len, fp) == len);
    fclose(fp);
}

/* A file with an explicit header length field, header text and data_len data bytes (value i & 0xff). */
static void write_raw(const char *path, uint64_t hlen_field, const char *header, size_t data_len) {
    size_t h = strlen(header);
    size_t len = 8 + h + data_len;
    uint8_t *buf = malloc(len);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(hlen_field >> (8 * i));
    memcpy(buf + 8, header, h);
    for (size_t i = 0; i < data_len; i++) buf[8 + h + i] = (uint8_t)i;
    write_bytes(path, buf, len);
    free(buf);
}

static void write_header(const char *path, const char *header, size_t data_len) {
    write_raw(path, strlen(header), header, data_len);
}

static void rm_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) rm_tree(p);
        else unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

/* ------------------------------------------------------------------ */

static float g_f32[6] = {1.0f, -2.0f, 3.5f, 0.25f, -0.0f, 1e-3f};
static uint16_t g_bf16[3], g_f16[4];
static int64_t g_i64[2] = {7, -9};
static uint8_t g_u8[3] = {1, 2, 3};

static void fill_halfs(void) {
    for (int i = 0; i < 3; i++) g_bf16[i] = f32_to_bf16((float)i - 0.5f);
    for (int i = 0; i < 4; i++) g_f16[i] = f32_to_f16((float)i * 0.125f);
}

static void test_round_trip(void) {
    char sub[512], path[512];
    path_in(sub, sizeof sub, NULL, "single");
    mkdir(sub, 0700);
    path_in(path, sizeof path, "single", "model.safetensors");
    /* U8 of 3 bytes first so that later tensors sit at odd offsets */
    const char *names[] = {"emb.u8", "w.f32", "b.bf16", "n.f16", "ids.i64"};
    tensor ts[5] = {
        tensor_1d(DTYPE_U8, g_u8, 3),
        tensor_2d(DTYPE_F32, g_f32, 2, 3),
        tensor_1d(DTYPE_BF16, g_bf16, 3),
        tensor_2d(DTYPE_F16, g_f16, 2, 2),
        tensor_1d(DTYPE_I64, g_i64, 2),
    };
    CHECK_OK(st_write_file(path, names, ts, 5));

    /* the header: length a multiple of 8, HF's layout */
    FILE *fp = fopen(path, "rb");
    uint8_t head[64];
    CHECK(fp && fread(head, 1, 64, fp) == 64);
    if (fp) fclose(fp);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | head[i];
    CHECK(hlen % 8 == 0);
    CHECK(!memcmp(head + 8, "{\"__metadata__\":{\"format\":\"pt\"},\"emb.u8\":{\"dtype\":\"U8\",\"shape\":[3]", 62 - 8));

    st_set *set = NULL;
    CHECK_OK(st_open_file(path, &set));
    CHECK(st_count(set) == 5);
    for (size_t i = 0; i < 5 && i < st_count(set); i++) CHECK(!strcmp(st_name(set, i), names[i]));
    CHECK(st_name(set, 5) == NULL);
    for (int i = 0; i < 5; i++) {
        const tensor *t = st_find(set, names[i]);
        CHECK(t != NULL);
        if (!t) continue;
        CHECK(t->dtype == ts[i].dtype && t->ndim == ts[i].ndim && t->row_stride == 0);
        for (int d = 0; d < t->ndim; d++) CHECK(t->shape[d] == ts[i].shape[d]);
        CHECK(!memcmp(t->data, ts[i].data, tensor_nbytes(&ts[i])));
        CHECK(!strcmp(st_file_of(set, names[i]), "model.safetensors"));
        CHECK(!strcmp(st_dtype_str(set, names[i]), dtype_name(ts[i].dtype)));
    }
    CHECK(st_find(set, "nope") == NULL && st_file_of(set, "nope") == NULL);

    /* st_get */
    tensor w;
    CHECK_OK(st_get(set, "w.f32", 2, (int64_t[]){2, 3}, &w));
    float v;
    memcpy(&v, (const char *)w.data + 2 * sizeof(float), sizeof v);
    CHECK(v == 3.5f);
    CHECK_OK(st_get(set, "b.bf16", 1, (int64_t[]){3}, &w));
    uint16_t h;
    memcpy(&h, (const char *)w.data + 2, 2);  /* data may be unaligned: read with memcpy */
    CHECK(bf16_to_f32(h) == 0.5f);
    CHECK_OK(st_get(set, "n.f16", 2, (int64_t[]){2, 2}, &w));
    EXPECT_ERR(st_get(set, "w.f32", 2, (int64_t[]){3, 2}, &w), VLLM_ERR_FORMAT, "has shape [2, 3], expected [3, 2]",
               "'w.f32'");
    EXPECT_ERR(st_get(set, "w.f32", 1, (int64_t[]){6}, &w), VLLM_ERR_FORMAT, "expected [6]", "model.safetensors");
    EXPECT_ERR(st_get(set, "model.layers.0.self_attn.q_proj.weight", 2, (int64_t[]){64, 64}, &w),
               VLLM_ERR_NOT_FOUND, "model.safetensors: tensor 'model.layers.0.self_attn.q_proj.weight' missing", "");
    EXPECT_ERR(st_get(set, "ids.i64", 1, (int64_t[]){2}, &w), VLLM_ERR_UNSUPPORTED, "dtype I64", "ids.i64");
    EXPECT_ERR(st_get(set, "emb.u8", 1, (int64_t[]){3}, &w), VLLM_ERR_UNSUPPORTED, "dtype U8", "model.safetensors");
    st_close(set);

    /* the same through st_open_dir */
    CHECK_OK(st_open_dir(sub, &set));
    CHECK(st_count(set) == 5 && st_find(set, "n.f16") != NULL);
    st_close(set);
    st_close(NULL);
    CHECK(st_count(NULL) == 0 && st_find(NULL, "x") == NULL);
}

static void test_sharded(void) {
    char sub[512], p1[512], p2[512], idx[512];
    path_in(sub, sizeof sub, NULL, "sharded");
    mkdir(sub, 0700);
    path_in(p1, sizeof p1, "sharded", "model-00001-of-00002.safetensors");
    path_in(p2, sizeof p2, "sharded", "model-00002-of-00002.safetensors");
    path_in(idx, sizeof idx, "sharded", "model.safetensors.index.json");
    const char *n1[] = {"a", "b"};
    tensor t1[2] = {tensor_2d(DTYPE_F32, g_f32, 3, 2), tensor_1d(DTYPE_BF16, g_bf16, 3)};
    const char *n2[] = {"c"};
    tensor t2[1] = {tensor_1d(DTYPE_F16, g_f16, 4)};
    CHECK_OK(st_write_file(p1, n1, t1, 2));
    CHECK_OK(st_write_file(p2, n2, t2, 1));
    const char *good =
        "{\"metadata\": {\"total_size\": 38}, \"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\", "
        "\"c\": \"model-00002-of-00002.safetensors\", \"b\": \"model-00001-of-00002.safetensors\"}}";
    write_bytes(idx, good, strlen(good));
    st_set *set = NULL;
    CHECK_OK(st_open_dir(sub, &set));
    CHECK(st_count(set) == 3);
    CHECK(st_file_of(set, "a") && !strcmp(st_file_of(set, "a"), "model-00001-of-00002.safetensors"));
    CHECK(st_file_of(set, "c") && !strcmp(st_file_of(set, "c"), "model-00002-of-00002.safetensors"));
    const tensor *c = st_find(set, "c");
    CHECK(c && c->dtype == DTYPE_F16 && c->shape[0] == 4 && !memcmp(c->data, g_f16, 8));
    tensor w;
    EXPECT_ERR(st_get(set, "zz", 1, (int64_t[]){1}, &w), VLLM_ERR_NOT_FOUND, "model.safetensors.index.json",
               "'zz' missing");
    EXPECT_ERR(st_get(set, "c", 1, (int64_t[]){5}, &w), VLLM_ERR_FORMAT, "model-00002-of-00002.safetensors",
               "expected [5]");
    st_close(set);

    /* index errors */
    struct { const char *json; vllm_status st; const char *w1, *w2; } cases[] = {
        {"{\"weight_map\": ", VLLM_ERR_FORMAT, "model.safetensors.index.json", "invalid JSON"},
        {"[1, 2]", VLLM_ERR_FORMAT, "model.safetensors.index.json", "object"},
        {"{\"metadata\": {}}", VLLM_ERR_FORMAT, "model.safetensors.index.json", "weight_map missing"},
        {"{\"weight_map\": []}", VLLM_ERR_FORMAT, "index.json", "weight_map is not an object"},
        {"{\"weight_map\": {}}", VLLM_ERR_FORMAT, "index.json", "empty"},
        {"{\"weight_map\": {\"a\": 3}}", VLLM_ERR_FORMAT, "weight_map['a']", "not a string"},
        {"{\"weight_map\": {\"a\": \"../etc/passwd\"}}", VLLM_ERR_FORMAT, "bad shard", "../etc/passwd"},
        {"{\"weight_map\": {\"a\": \"/etc/passwd\"}}", VLLM_ERR_FORMAT, "bad shard", "/etc/passwd"},
        {"{\"weight_map\": {\"a\": \"model-00003-of-00002.safetensors\"}}", VLLM_ERR_IO,
         "model-00003-of-00002.safetensors", "No such file"},
        {"{\"weight_map\": {\"a\": \"model-00002-of-00002.safetensors\"}}", VLLM_ERR_FORMAT, "'a'",
         "not in its shard model-00002-of-00002.safetensors"},
        {"{\"weight_map\": {\"a\": \"model-00002-of-00002.safetensors\", \"c\": \"model-00001-of-00002.safetensors\"}}",
         VLLM_ERR_FORMAT, "'a' is in model-00001-of-00002.safetensors", "not in model-00002-of-00002.safetensors"},
        {"{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\", \"q\": \"model-00001-of-00002.safetensors\"}}",
         VLLM_ERR_FORMAT, "'q'", "not in"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_bytes(idx, cases[i].json, strlen(cases[i].json));
        set = (st_set *)1;
        EXPECT_ERR(st_open_dir(sub, &set), cases[i].st, cases[i].w1, cases[i].w2);
        CHECK(set == NULL);
    }

    /* duplicate names across shards */
    const char *nd[] = {"b"};
    CHECK_OK(st_write_file(p2, nd, t2, 1));
    write_bytes(idx, good, strlen(good));
    EXPECT_ERR(st_open_dir(sub, &set), VLLM_ERR_FORMAT, "'b'", "also in model-00001-of-00002.safetensors");

    /* neither file */
    unlink(idx);
    EXPECT_ERR(st_open_dir(sub, &set), VLLM_ERR_IO, sub, "no model.safetensors or model.safetensors.index.json");
}

/* One malformed header: opening it fails with status and both words in the message. */
#define BAD_HEADER(header, data_len, want, w1, w2)                          \
    do {                                                                    \
        write_header(path, (header), (data_len));                           \
        st_set *s2 = (st_set *)1;                                           \
        EXPECT_ERR(st_open_file(path, &s2), (want), (w1), (w2));            \
        CHECK(s2 == NULL);                                                  \
        EXPECT_ERR(st_open_file(path, &s2), (want), "bad.safetensors", ""); \
    } while (0)

static void test_malformed(void) {
    char path[512];
    path_in(path, sizeof path, NULL, "bad.safetensors");
    st_set *set = NULL;

    write_bytes(path, "abc", 3);
    EXPECT_ERR(st_open_file(path, &set), VLLM_ERR_FORMAT, "bad.safetensors", "too short");
    write_bytes(path, "", 0);
    EXPECT_ERR(st_open_file(path, &set), VLLM_ERR_FORMAT, "bad.safetensors", "too short");
    write_raw(path, (uint64_t)1 << 63, "{}", 0);
    EXPECT_ERR(st_open_file(path, &set), VLLM_ERR_FORMAT, "bad.safetensors", "absurd");
    write_raw(path, UINT64_MAX, "{}", 0);
    EXPECT_ERR(st_open_file(path, &set), VLLM_ERR_FORMAT, "bad.safetensors", "absurd");
    write_raw(path, 200, "{}", 10);
    EXPECT_ERR(st_open_file(path, &set), VLLM_ERR_FORMAT, "bad.safetensors", "exceeds the file size");
    write_raw(path, 0, "", 0);
    EXPECT_ERR(st_open_file(path, &set), VLLM_ERR_FORMAT, "bad.safetensors", "too short");

    BAD_HEADER("{\"a\": {\"dtype\": \"F32\"", 0, VLLM_ERR_FORMAT, "not valid JSON", "");
    BAD_HEADER("[1, 2]", 0, VLLM_ERR_FORMAT, "not a JSON object", "");
    BAD_HEADER("{\"a\": 3}", 0, VLLM_ERR_FORMAT, "'a'", "not an object");
    BAD_HEADER("{\"__metadata__\": 3}", 0, VLLM_ERR_FORMAT, "__metadata__", "not an object");
    BAD_HEADER("{\"a\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4, VLLM_ERR_FORMAT, "'a'", "dtype missing");
    BAD_HEADER("{\"a\": {\"dtype\": 5, \"shape\": [1], \"data_offsets\": [0, 4]}}", 4, VLLM_ERR_FORMAT, "'a'",
               "dtype is not a string");
    BAD_HEADER("{\"a\": {\"dtype\": \"Q4_K\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4, VLLM_ERR_FORMAT,
               "'a'", "unknown dtype 'Q4_K'");
    BAD_HEADER("{\"a\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}", 4, VLLM_ERR_FORMAT, "'a'",
               "shape missing");
    BAD_HEADER("{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4, VLLM_ERR_FORMAT, "'a'", "data_offsets missing");
    BAD_HEADER("{\"a\": {\"dtype\": \"F32\", \"shape\": 1, \"data_offsets\": [0, 4]}}", 4, VLLM_ERR_FORMAT, "'a'",
               "shape is not an array");
    BAD_HEADER("{\"a\": {\"dtype\": \"F32\", \"shape\": [-1, 2], \"data_offsets\": [0, 4]}}", 4, VLLM_ERR_FORMAT,
               "'a'", "shape[0]");
    BAD_HEADER("{\"a\": {\"dtype\": \"F32\", \"shape\": [2.5], \"data_offsets\": [0, 4]}}", 4, VLLM_ERR_FORMAT,
               "'a'", "shape[0]");
    BAD_HEADER("{\"a\": {\"dtype\": \"F32\", \"shape\": [1, \"2\"], \"data_offsets\": [0, 8]}}", 8,
               VLLM_ERR_FORMAT, "'a'", "shape[1]");
    BAD_HEADER("{\"a\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 4]}}",
               4, VLLM_ERR_FORMAT, "'a'", "17 dims");
    BAD_HEADER("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 0]}}", 4, VLLM_ERR_FORMAT, "'a'",
               "begin > end");
    BAD_HEADER("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}", 4, VLLM_ERR_FORMAT, "'a'",
               "data_offsets is not");
    BAD_HEADER("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, -4]}}", 4, VLLM_ERR_FORMAT, "'a'",
               "data_offsets is not");
    BAD_HEADER("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, \"4\"]}}", 4, VLLM_ERR_FORMAT,
               "'a'", "data_offsets is not");
    BAD_HEADER("{\"X\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", 8, VLLM_ERR_FORMAT,
               "bad.safetensors: truncated: tensor 'X' needs bytes [0, 16) but the data section has 8", "");
    BAD_HEADER("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 18446744073709551615]}}", 4,
               VLLM_ERR_FORMAT, "not valid JSON", "too big integer");
    BAD_HEADER("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [9223372036854775803, 9223372036854775807]}}",
               4, VLLM_ERR_FORMAT, "'a'", "truncated");
    BAD_HEADER("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 12]}}", 12, VLLM_ERR_FORMAT,
               "'a'", "needs 8");
    BAD_HEADER("{\"a\": {\"dtype\": \"BF16\", \"shape\": [4611686018427387904, 4611686018427387904], "
               "\"data_offsets\": [0, 0]}}", 0, VLLM_ERR_FORMAT, "'a'", "too large");
    BAD_HEADER("{\"a\": {\"dtype\": \"F32\", \"shape\": [2305843009213693952, 2], \"data_offsets\": [0, 0]}}", 0,
               VLLM_ERR_FORMAT, "'a'", "too large");
    /* empty, but its nonzero dimensions overflow an int64 (found by fuzz_safetensors) */
    BAD_HEADER("{\"a\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 0], \"data_offsets\": [0, 0]}}",
               0, VLLM_ERR_FORMAT, "'a'", "too large");
    BAD_HEADER("{\"a\": {\"dtype\": \"F32\", \"shape\": [9223372036854775807], \"data_offsets\": [0, 4]}}", 4,
               VLLM_ERR_FORMAT, "'a'", "");
    BAD_HEADER("{\"a\": {\"dtype\": \"F4\", \"shape\": [3], \"data_offsets\": [0, 2]}}", 2, VLLM_ERR_FORMAT, "'a'",
               "whole number of bytes");
    BAD_HEADER("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
               "\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4, VLLM_ERR_FORMAT,
               "not valid JSON", "duplicate");
    BAD_HEADER("{\"\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4, VLLM_ERR_FORMAT,
               "empty name", "");
    BAD_HEADER("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}   \x01", 4, VLLM_ERR_FORMAT,
               "not valid JSON", "");

    /* not a file, no file */
    char dir[512];
    path_in(dir, sizeof dir, NULL, "single");
    EXPECT_ERR(st_open_file(dir, &set), VLLM_ERR_IO, "single", "not a regular file");
    path_in(dir, sizeof dir, NULL, "none.safetensors");
    EXPECT_ERR(st_open_file(dir, &set), VLLM_ERR_IO, "none.safetensors", "No such file");
    EXPECT_ERR(st_open_file(NULL, &set), VLLM_ERR_INVALID_ARG, "", "");
}

/* Files that are valid but hold tensors st_find cannot serve. */
static void test_odd_but_valid(void) {
    char path[512];
    path_in(path, sizeof path, NULL, "odd.safetensors");
    write_header(path,
                 "{\"__metadata__\": {\"format\": \"pt\"}, "
                 "\"f8\": {\"dtype\": \"F8_E5M2\", \"shape\": [2, 2], \"data_offsets\": [0, 4]}, "
                 "\"conv\": {\"dtype\": \"BF16\", \"shape\": [1, 1, 1, 1, 2], \"data_offsets\": [4, 8]}, "
                 "\"empty\": {\"dtype\": \"F32\", \"shape\": [0, 4], \"data_offsets\": [8, 8]}, "
                 "\"scalar\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [8, 12]}, "
                 "\"odd\": {\"dtype\": \"BF16\", \"shape\": [1], \"data_offsets\": [13, 15]}, "
                 "\"nib\": {\"dtype\": \"F4\", \"shape\": [2], \"data_offsets\": [15, 16]}}",
                 16);
    st_set *set = NULL;
    CHECK_OK(st_open_file(path, &set));
    CHECK(st_count(set) == 6);
    tensor w;
    CHECK(st_find(set, "f8") == NULL && st_file_of(set, "f8") != NULL);
    CHECK(st_dtype_str(set, "f8") && !strcmp(st_dtype_str(set, "f8"), "F8_E5M2"));
    EXPECT_ERR(st_get(set, "f8", 2, (int64_t[]){2, 2}, &w), VLLM_ERR_UNSUPPORTED, "'f8'", "dtype F8_E5M2");
    CHECK(st_find(set, "conv") == NULL);
    EXPECT_ERR(st_get(set, "conv", 2, (int64_t[]){1, 2}, &w), VLLM_ERR_UNSUPPORTED, "'conv'", "5 dims");
    const tensor *e = st_find(set, "empty");
    CHECK(e && e->ndim == 2 && e->shape[0] == 0 && tensor_numel(e) == 0);
    CHECK_OK(st_get(set, "scalar", 0, NULL, &w));
    CHECK(w.ndim == 0);
    const tensor *o = st_find(set, "odd");
    CHECK(o && ((const uint8_t *)o->data)[0] == 13);  /* data byte i holds i; offset 13 is odd */
    st_close(set);
}

static uint64_t xorshift(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Random garbage and bit flips: never crash, never succeed on garbage. */
static void test_fuzz(void) {
    char path[512];
    path_in(path, sizeof path, NULL, "fuzz.safetensors");
    uint64_t rng = 0x9e3779b97f4a7c15ull;
#define NEXT() xorshift(&rng)
    uint8_t buf[256];
    for (int it = 0; it < 300; it++) {
        size_t len = (size_t)(NEXT() % sizeof buf);
        for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)NEXT();
        if (len >= 8 && it % 2) {  /* plausible header length */
            uint64_t h = NEXT() % (len - 7);
            for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(h >> (8 * i));
        }
        write_bytes(path, buf, len);
        st_set *set = NULL;
        vllm_status st = st_open_file(path, &set);
        CHECK(st == VLLM_ERR_FORMAT && set == NULL);
        CHECK(strstr(vllm_last_error(), "fuzz.safetensors") != NULL);
    }

    /* bit flips in a valid file */
    const char *names[] = {"w", "b"};
    tensor ts[2] = {tensor_2d(DTYPE_F32, g_f32, 2, 3), tensor_1d(DTYPE_BF16, g_bf16, 3)};
    char good[512];
    path_in(good, sizeof good, NULL, "good.safetensors");
    CHECK_OK(st_write_file(good, names, ts, 2));
    FILE *fp = fopen(good, "rb");
    size_t n = fp ? fread(buf, 1, sizeof buf, fp) : 0;
    if (fp) fclose(fp);
    CHECK(n > 100);
    int ok = 0, bad = 0;
    for (int it = 0; it < 2000; it++) {
        uint8_t m[256];
        memcpy(m, buf, n);
        int flips = 1 + (int)(NEXT() % 3);
        for (int f = 0; f < flips; f++) m[NEXT() % n] ^= (uint8_t)(1u << (NEXT() % 8));
        write_bytes(path, m, n);
        st_set *set = NULL;
        vllm_status st = st_open_file(path, &set);
        if (st == VLLM_OK) {
            ok++;
            for (size_t i = 0; i < st_count(set); i++) {  /* whatever parsed must be inside the file */
                const tensor *t = st_find(set, st_name(set, i));
                if (t) {
                    volatile uint8_t sum = 0;
                    for (size_t b = 0; b < tensor_nbytes(t); b++) sum ^= ((const uint8_t *)t->data)[b];
                    (void)sum;
                }
            }
            st_close(set);
        } else {
            bad++;
            CHECK(set == NULL);
            CHECK(st == VLLM_ERR_FORMAT);
        }
    }
    CHECK(ok > 0 && bad > 0);
#undef NEXT
}

static void test_write_errors(void) {
    char path[512];
    path_in(path, sizeof path, NULL, "w.safetensors");
    tensor ts[2] = {tensor_1d(DTYPE_F32, g_f32, 2), tensor_1d(DTYPE_F32, g_f32, 2)};
    EXPECT_ERR(st_write_file(path, (const char *[]){"x", "x"}, ts, 2), VLLM_ERR_INVALID_ARG, "'x'", "twice");
    EXPECT_ERR(st_write_file(path, (const char *[]){"__metadata__"}, ts, 1), VLLM_ERR_INVALID_ARG, "__metadata__",
               "");
    EXPECT_ERR(st_write_file(path, (const char *[]){""}, ts, 1), VLLM_ERR_INVALID_ARG, "no name", "");
    tensor strided = tensor_cols(&(tensor){.dtype = DTYPE_F32, .ndim = 2, .shape = {2, 3}, .data = g_f32}, 0, 2);
    EXPECT_ERR(st_write_file(path, (const char *[]){"s"}, &strided, 1), VLLM_ERR_INVALID_ARG, "'s'",
               "not contiguous");
    tensor neg = tensor_1d(DTYPE_F32, g_f32, -1);
    EXPECT_ERR(st_write_file(path, (const char *[]){"n"}, &neg, 1), VLLM_ERR_INVALID_ARG, "'n'", "negative");
    tensor huge = tensor_2d(DTYPE_F32, g_f32, INT64_MAX, 2);
    EXPECT_ERR(st_write_file(path, (const char *[]){"h"}, &huge, 1), VLLM_ERR_INVALID_ARG, "'h'", "too large");
    struct stat sb;
    CHECK(stat(path, &sb) != 0);  /* nothing written */
    char nodir[512];
    path_in(nodir, sizeof nodir, "no_such_dir", "w.safetensors");
    EXPECT_ERR(st_write_file(nodir, (const char *[]){"x"}, ts, 1), VLLM_ERR_IO, "no_such_dir", "");

    /* an empty file (no tensors) is valid */
    CHECK_OK(st_write_file(path, NULL, NULL, 0));
    st_set *set = NULL;
    CHECK_OK(st_open_file(path, &set));
    CHECK(st_count(set) == 0 && st_find(set, "x") == NULL);
    st_close(set);
}

/* Thousands of tensors: every name found, in order. */
static void test_many(void) {
    enum { N = 5000 };
    char path[512];
    path_in(path, sizeof path, NULL, "many.safetensors");
    char(*names)[48] = malloc(N * sizeof *names);
    const char **np = malloc(N * sizeof *np);
    tensor *ts = malloc(N * sizeof *ts);
    float *vals = malloc(N * sizeof *vals);
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "model.layers.%d.mlp.w%d", i / 7, i % 7);
        np[i] = names[i];
        vals[i] = (float)i;
        ts[i] = tensor_1d(DTYPE_F32, &vals[i], 1);
    }
    CHECK_OK(st_write_file(path, np, ts, N));
    st_set *set = NULL;
    CHECK_OK(st_open_file(path, &set));
    CHECK(st_count(set) == N);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        const tensor *t = st_find(set, names[i]);
        float v = -1;
        if (t) memcpy(&v, t->data, 4);
        if (!t || v != (float)i || strcmp(st_name(set, (size_t)i), names[i])) bad++;
    }
    CHECK(bad == 0);
    st_close(set);
    free(names);
    free(np);
    free(ts);
    free(vals);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/vllm_test_st_XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    fill_halfs();
    test_round_trip();
    test_sharded();
    test_malformed();
    test_odd_but_valid();
    test_fuzz();
    test_write_errors();
    test_many();
    rm_tree(g_dir);
    TEST_END();
}
