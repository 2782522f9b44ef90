/* test_gguf.c: the GGUF reader: every metadata type through the getters, string arrays, alignment, tensors,
 * split sets (files and buffers), a long list of malformed files (VLLM_ERR_FORMAT, never a crash), random
 * corruptions, and two real files (tests/fixtures/gguf). Files are built with tests/loader/gguf_build.h. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "loader/gguf.h"
#include "loader/gguf_build.h"
#include "test.h"

static char g_dir[64];

static void path_in(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", g_dir, name); }

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

/* An exact-size heap copy (so that ASan sees any read past the end). */
static uint8_t *dup_exact(const uint8_t *p, size_t n) {
    uint8_t *c = malloc(n ? n : 1);
    if (n) memcpy(c, p, n);
    return c;
}

/* gguf_open_memory on an exact copy of the first n bytes of b must fail with `want`, the message holding w1 and w2. */
#define EXPECT_BAD_N(b, n, want, w1, w2)                                                   \
    do {                                                                                   \
        uint8_t *c_ = dup_exact((b)->p, (n));                                              \
        gguf_file *f_ = (gguf_file *)&g_dir;                                               \
        EXPECT_ERR(gguf_open_memory(c_, (n), &f_), want, w1, w2);                          \
        CHECK(f_ == NULL);                                                                 \
        free(c_);                                                                          \
    } while (0)
#define EXPECT_BAD(b, w1, w2) EXPECT_BAD_N(b, (b)->n, VLLM_ERR_FORMAT, w1, w2)

static gguf_file *open_mem(const gb *b) {
    gguf_file *f = NULL;
    CHECK_OK(gguf_open_memory(b->p, b->n, &f));
    return f;
}

/* ------------------------------------------------------------------ */
/* a file with one tensor spec list                                    */
/* ------------------------------------------------------------------ */

typedef struct tspec {
    const char *name;
    uint32_t n_dims;
    int64_t ne[4];
    uint32_t type;
    uint64_t offset;
} tspec;

/* v3, general.architecture = "test" (+ general.alignment when align != 0), the tensors, padding to the
 * alignment, data_bytes bytes of data (pattern seed 1). Returns the data section's start. */
static size_t build(gb *b, const tspec *ts, size_t nt, size_t data_bytes, uint32_t align) {
    gb_header(b, 3, nt, align ? 2 : 1);
    gb_kv_str(b, "general.architecture", "test");
    if (align) gb_kv_u32(b, "general.alignment", align);
    for (size_t i = 0; i < nt; i++) gb_tensor(b, ts[i].name, ts[i].n_dims, ts[i].ne, ts[i].type, ts[i].offset);
    gb_pad(b, align ? align : 32);
    size_t start = b->n;
    gb_fill(b, data_bytes, 1);
    return start;
}

static void build1(gb *b, tspec t, size_t data_bytes) { build(b, &t, 1, data_bytes, 0); }

/* ------------------------------------------------------------------ */

static void test_type_table(void) {
    static const struct {
        uint32_t t;
        const char *name;
        int64_t block;
        size_t size;
    } want[] = {
        {GGML_TYPE_F32, "F32", 1, 4},          {GGML_TYPE_F16, "F16", 1, 2},         {GGML_TYPE_Q4_0, "Q4_0", 32, 18},
        {GGML_TYPE_Q4_1, "Q4_1", 32, 20},      {GGML_TYPE_Q5_0, "Q5_0", 32, 22},     {GGML_TYPE_Q5_1, "Q5_1", 32, 24},
        {GGML_TYPE_Q8_0, "Q8_0", 32, 34},      {GGML_TYPE_Q8_1, "Q8_1", 32, 36},     {GGML_TYPE_Q2_K, "Q2_K", 256, 84},
        {GGML_TYPE_Q3_K, "Q3_K", 256, 110},    {GGML_TYPE_Q4_K, "Q4_K", 256, 144},   {GGML_TYPE_Q5_K, "Q5_K", 256, 176},
        {GGML_TYPE_Q6_K, "Q6_K", 256, 210},    {GGML_TYPE_Q8_K, "Q8_K", 256, 292},   {GGML_TYPE_IQ2_XXS, "IQ2_XXS", 256, 66},
        {GGML_TYPE_IQ2_XS, "IQ2_XS", 256, 74}, {GGML_TYPE_IQ3_XXS, "IQ3_XXS", 256, 98}, {GGML_TYPE_IQ1_S, "IQ1_S", 256, 50},
        {GGML_TYPE_IQ4_NL, "IQ4_NL", 32, 18},  {GGML_TYPE_IQ3_S, "IQ3_S", 256, 110}, {GGML_TYPE_IQ2_S, "IQ2_S", 256, 82},
        {GGML_TYPE_IQ4_XS, "IQ4_XS", 256, 136}, {GGML_TYPE_I8, "I8", 1, 1},          {GGML_TYPE_I16, "I16", 1, 2},
        {GGML_TYPE_I32, "I32", 1, 4},          {GGML_TYPE_I64, "I64", 1, 8},         {GGML_TYPE_F64, "F64", 1, 8},
        {GGML_TYPE_IQ1_M, "IQ1_M", 256, 56},   {GGML_TYPE_BF16, "BF16", 1, 2},       {GGML_TYPE_TQ1_0, "TQ1_0", 256, 54},
        {GGML_TYPE_TQ2_0, "TQ2_0", 256, 66},   {GGML_TYPE_MXFP4, "MXFP4", 32, 17},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        CHECK_MSG(!strcmp(gguf_type_name(want[i].t), want[i].name), "type %u: %s", want[i].t, gguf_type_name(want[i].t));
        CHECK_MSG(gguf_type_block_size(want[i].t) == want[i].block, "%s block", want[i].name);
        CHECK_MSG(gguf_type_size(want[i].t) == want[i].size, "%s size", want[i].name);
    }
    /* removed or never defined numbers */
    uint32_t unknown[] = {4, 5, 31, 32, 33, 36, 37, 38, 40, 1000, UINT32_MAX};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        CHECK(!strcmp(gguf_type_name(unknown[i]), "?"));
        CHECK(gguf_type_block_size(unknown[i]) == 0);
        CHECK(gguf_type_size(unknown[i]) == 0);
    }
}

/* ------------------------------------------------------------------ */
/* metadata                                                            */
/* ------------------------------------------------------------------ */

static const float g_scores[4] = {0.5f, -1.25f, 3e38f, -0.0f};

/* One entry of every type, arrays of each kind, nested arrays; no tensors. */
static void build_meta(gb *b, uint32_t version) {
    gb_header(b, version, 0, 24);
    gb_key(b, "u8", GGUF_TYPE_UINT8), gb_u8(b, 200);
    gb_key(b, "i8", GGUF_TYPE_INT8), gb_u8(b, (uint8_t)-100);
    gb_key(b, "u16", GGUF_TYPE_UINT16), gb_u16(b, 60000);
    gb_key(b, "i16", GGUF_TYPE_INT16), gb_u16(b, (uint16_t)-30000);
    gb_key(b, "u32", GGUF_TYPE_UINT32), gb_u32(b, 4000000000u);
    gb_key(b, "i32", GGUF_TYPE_INT32), gb_u32(b, (uint32_t)-2000000000);
    gb_key(b, "f32", GGUF_TYPE_FLOAT32), gb_f32(b, 1.5f);
    gb_key(b, "bool", GGUF_TYPE_BOOL), gb_u8(b, 1);
    gb_kv_str(b, "str", "hello, gguf");
    gb_key(b, "u64", GGUF_TYPE_UINT64), gb_u64(b, (1ull << 63) + 5);
    gb_key(b, "i64", GGUF_TYPE_INT64), gb_u64(b, (uint64_t)INT64_MIN);
    gb_key(b, "f64", GGUF_TYPE_FLOAT64), gb_f64(b, -3.25);
    gb_kv_str(b, "qwen3.block_count", "28");
    gb_key(b, "empty.str", GGUF_TYPE_STRING), gb_strn(b, "", 0);
    /* arrays */
    gb_key(b, "arr.u8", GGUF_TYPE_ARRAY), gb_arr(b, GGUF_TYPE_UINT8, 3), gb_u8(b, 1), gb_u8(b, 2), gb_u8(b, 255);
    gb_key(b, "arr.i32", GGUF_TYPE_ARRAY), gb_arr(b, GGUF_TYPE_INT32, 3);
    gb_u32(b, 7), gb_u32(b, (uint32_t)-8), gb_u32(b, (uint32_t)INT32_MIN);
    gb_key(b, "tokenizer.ggml.scores", GGUF_TYPE_ARRAY), gb_arr(b, GGUF_TYPE_FLOAT32, 4);
    for (int i = 0; i < 4; i++) gb_f32(b, g_scores[i]);
    gb_key(b, "arr.bool", GGUF_TYPE_ARRAY), gb_arr(b, GGUF_TYPE_BOOL, 2), gb_u8(b, 0), gb_u8(b, 1);
    gb_key(b, "arr.u64", GGUF_TYPE_ARRAY), gb_arr(b, GGUF_TYPE_UINT64, 2), gb_u64(b, 42), gb_u64(b, UINT64_MAX);
    gb_key(b, "arr.f64", GGUF_TYPE_ARRAY), gb_arr(b, GGUF_TYPE_FLOAT64, 1), gb_f64(b, 0.125);
    gb_key(b, "tokenizer.ggml.tokens", GGUF_TYPE_ARRAY), gb_arr(b, GGUF_TYPE_STRING, 4);
    gb_str(b, "<s>"), gb_strn(b, "", 0), gb_strn(b, "a\0b", 3), gb_str(b, "\xe2\x96\x81the");
    gb_key(b, "arr.empty", GGUF_TYPE_ARRAY), gb_arr(b, GGUF_TYPE_UINT16, 0);
    /* [[1, 2], [3]] of uint16, and [["x"], []] of strings */
    gb_key(b, "arr.nested", GGUF_TYPE_ARRAY), gb_arr(b, GGUF_TYPE_ARRAY, 2);
    gb_arr(b, GGUF_TYPE_UINT16, 2), gb_u16(b, 1), gb_u16(b, 2);
    gb_arr(b, GGUF_TYPE_UINT16, 1), gb_u16(b, 3);
    gb_key(b, "arr.nested_str", GGUF_TYPE_ARRAY), gb_arr(b, GGUF_TYPE_ARRAY, 2);
    gb_arr(b, GGUF_TYPE_STRING, 1), gb_str(b, "x");
    gb_arr(b, GGUF_TYPE_STRING, 0);
}

static void test_metadata(uint32_t version) {
    gb b = {0};
    build_meta(&b, version);
    uint8_t *buf = dup_exact(b.p, b.n);
    gguf_file *f = NULL;
    CHECK_OK(gguf_open_memory(buf, b.n, &f));
    if (!f) goto out;
    CHECK(gguf_version(f) == version);
    CHECK(gguf_alignment(f) == 32);
    CHECK(gguf_tensor_count(f) == 0);
    CHECK(gguf_part_count(f) == 1);
    CHECK(!strcmp(gguf_file_name(f, 0), "(memory)"));
    CHECK(gguf_file_name(f, 1) == NULL && gguf_file_name(f, -1) == NULL);
    CHECK(gguf_kv_count(f) == 24);
    CHECK(!strcmp(gguf_kv_key(f, 0), "u8") && !strcmp(gguf_kv_key(f, 23), "arr.nested_str"));
    CHECK(gguf_kv_key(f, 24) == NULL);
    CHECK(gguf_find_key(f, "u8") == 0 && gguf_find_key(f, "str") == 8 && gguf_find_key(f, "arr.nested") == 22);
    CHECK(gguf_find_key(f, "nope") == -1 && gguf_find_key(f, "") == -1 && gguf_find_key(f, NULL) == -1);
    static const gguf_type types[24] = {
        GGUF_TYPE_UINT8,  GGUF_TYPE_INT8,   GGUF_TYPE_UINT16, GGUF_TYPE_INT16, GGUF_TYPE_UINT32, GGUF_TYPE_INT32,
        GGUF_TYPE_FLOAT32, GGUF_TYPE_BOOL,  GGUF_TYPE_STRING, GGUF_TYPE_UINT64, GGUF_TYPE_INT64, GGUF_TYPE_FLOAT64,
        GGUF_TYPE_STRING, GGUF_TYPE_STRING, GGUF_TYPE_ARRAY,  GGUF_TYPE_ARRAY, GGUF_TYPE_ARRAY,  GGUF_TYPE_ARRAY,
        GGUF_TYPE_ARRAY,  GGUF_TYPE_ARRAY,  GGUF_TYPE_ARRAY,  GGUF_TYPE_ARRAY, GGUF_TYPE_ARRAY,  GGUF_TYPE_ARRAY,
    };
    for (int i = 0; i < 24; i++) CHECK_MSG(gguf_kv_type(f, i) == types[i], "kv %d", i);
    CHECK(gguf_kv_type(f, 24) == GGUF_TYPE_COUNT && gguf_kv_type(f, -1) == GGUF_TYPE_COUNT);

    /* integers */
    const vllm_status untouched = VLLM_ERR_INTERNAL;
    vllm_status err = untouched;
    uint64_t u = 0;
    int64_t s = 0;
    CHECK(gguf_get_u64(f, "u8", &u, &err) && u == 200);
    CHECK(gguf_get_u64(f, "u16", &u, &err) && u == 60000);
    CHECK(gguf_get_u64(f, "u32", &u, &err) && u == 4000000000u);
    CHECK(gguf_get_u64(f, "u64", &u, &err) && u == (1ull << 63) + 5);
    CHECK(gguf_get_i64(f, "i8", &s, &err) && s == -100);
    CHECK(gguf_get_i64(f, "i16", &s, &err) && s == -30000);
    CHECK(gguf_get_i64(f, "i32", &s, &err) && s == -2000000000);
    CHECK(gguf_get_i64(f, "i64", &s, &err) && s == INT64_MIN);
    CHECK(gguf_get_i64(f, "u32", &s, &err) && s == 4000000000);
    CHECK(gguf_get_i64(f, "u8", &s, &err) && s == 200);
    CHECK(err == untouched);
    /* absent: false, err left alone */
    CHECK(!gguf_get_u64(f, "absent", &u, &err) && err == untouched);
    CHECK(!gguf_get_i64(f, "absent", &s, &err) && err == untouched);
    double d = 0;
    bool bo = false;
    const char *str = NULL;
    size_t len = 0;
    gguf_type et = GGUF_TYPE_COUNT;
    uint64_t count = 0;
    CHECK(!gguf_get_f64(f, "absent", &d, &err) && !gguf_get_bool(f, "absent", &bo, &err) &&
          !gguf_get_str(f, "absent", &str, &len, &err) && !gguf_get_arr(f, "absent", &et, &count, &err));
    CHECK(err == untouched);
    /* values that do not fit */
    CHECK(!gguf_get_u64(f, "i8", &u, &err) && err == VLLM_ERR_FORMAT);
    CHECK(strstr(vllm_last_error(), "(memory): i8 is -100, expected a non-negative integer") != NULL);
    err = untouched;
    CHECK(!gguf_get_i64(f, "u64", &s, &err) && err == VLLM_ERR_FORMAT);
    CHECK(strstr(vllm_last_error(), "too large for an int64") != NULL);
    err = untouched;
    /* types that do not convert */
    CHECK(!gguf_get_u64(f, "qwen3.block_count", &u, &err) && err == VLLM_ERR_FORMAT);
    CHECK_MSG(!strcmp(vllm_last_error(), "(memory): qwen3.block_count is a string, expected an integer"), "%s",
              vllm_last_error());
    err = untouched;
    CHECK(!gguf_get_i64(f, "f32", &s, &err) && err == VLLM_ERR_FORMAT);
    CHECK(strstr(vllm_last_error(), "f32 is a float32, expected an integer") != NULL);
    err = untouched;
    CHECK(!gguf_get_u64(f, "bool", &u, &err) && err == VLLM_ERR_FORMAT);
    err = untouched;
    CHECK(!gguf_get_i64(f, "arr.u8", &s, &err) && err == VLLM_ERR_FORMAT);
    CHECK(strstr(vllm_last_error(), "arr.u8 is an array, expected an integer") != NULL);
    CHECK(!gguf_get_u64(f, "str", &u, NULL));  /* err may be NULL */

    /* floats: F32, F64 and integers */
    err = untouched;
    CHECK(gguf_get_f64(f, "f32", &d, &err) && d == 1.5);
    CHECK(gguf_get_f64(f, "f64", &d, &err) && d == -3.25);
    CHECK(gguf_get_f64(f, "i32", &d, &err) && d == -2000000000.0);
    CHECK(gguf_get_f64(f, "u64", &d, &err) && d == (double)((1ull << 63) + 5));
    CHECK(gguf_get_f64(f, "u8", &d, &err) && d == 200.0);
    CHECK(err == untouched);
    CHECK(!gguf_get_f64(f, "str", &d, &err) && err == VLLM_ERR_FORMAT);
    CHECK(strstr(vllm_last_error(), "str is a string, expected a number") != NULL);
    err = untouched;
    CHECK(!gguf_get_f64(f, "bool", &d, &err) && err == VLLM_ERR_FORMAT);
    err = untouched;

    /* bool */
    CHECK(gguf_get_bool(f, "bool", &bo, &err) && bo);
    CHECK(!gguf_get_bool(f, "u8", &bo, &err) && err == VLLM_ERR_FORMAT);
    CHECK(strstr(vllm_last_error(), "u8 is a uint8, expected a bool") != NULL);
    err = untouched;

    /* strings: pointers into the buffer */
    CHECK(gguf_get_str(f, "str", &str, &len, &err) && len == 11 && !memcmp(str, "hello, gguf", 11));
    CHECK(str >= (const char *)buf && str + len <= (const char *)buf + b.n);
    CHECK(gguf_get_str(f, "empty.str", &str, &len, &err) && len == 0);
    CHECK(err == untouched);
    CHECK(!gguf_get_str(f, "u32", &str, &len, &err) && err == VLLM_ERR_FORMAT);
    CHECK(strstr(vllm_last_error(), "u32 is a uint32, expected a string") != NULL);
    err = untouched;

    /* arrays */
    CHECK(gguf_get_arr(f, "arr.u8", &et, &count, &err) && et == GGUF_TYPE_UINT8 && count == 3);
    CHECK(gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &count, &err) && et == GGUF_TYPE_STRING && count == 4);
    CHECK(gguf_get_arr(f, "arr.nested", &et, &count, &err) && et == GGUF_TYPE_ARRAY && count == 2);
    CHECK(gguf_get_arr(f, "arr.empty", &et, &count, &err) && et == GGUF_TYPE_UINT16 && count == 0);
    CHECK(gguf_get_arr(f, "arr.u64", NULL, NULL, &err));
    CHECK(err == untouched);
    CHECK(!gguf_get_arr(f, "str", &et, &count, &err) && err == VLLM_ERR_FORMAT);
    CHECK(strstr(vllm_last_error(), "str is a string, expected an array") != NULL);

    int64_t iv = 0;
    double dv = 0;
    CHECK(gguf_arr_i64(f, "arr.u8", 2, &iv) && iv == 255);
    CHECK(gguf_arr_i64(f, "arr.i32", 1, &iv) && iv == -8);
    CHECK(gguf_arr_i64(f, "arr.i32", 2, &iv) && iv == INT32_MIN);
    CHECK(!gguf_arr_i64(f, "arr.i32", 3, &iv));
    CHECK(gguf_arr_i64(f, "arr.u64", 0, &iv) && iv == 42);
    CHECK(!gguf_arr_i64(f, "arr.u64", 1, &iv));                    /* UINT64_MAX does not fit */
    CHECK(gguf_arr_f64(f, "arr.u64", 1, &dv) && dv == (double)UINT64_MAX);
    CHECK(!gguf_arr_i64(f, "tokenizer.ggml.scores", 0, &iv));      /* floats are not integers */
    CHECK(gguf_arr_f64(f, "tokenizer.ggml.scores", 1, &dv) && dv == -1.25);
    CHECK(gguf_arr_f64(f, "tokenizer.ggml.scores", 2, &dv) && dv == (double)3e38f);
    CHECK(gguf_arr_f64(f, "arr.f64", 0, &dv) && dv == 0.125);
    CHECK(gguf_arr_f64(f, "arr.i32", 1, &dv) && dv == -8.0);
    CHECK(!gguf_arr_f64(f, "arr.bool", 0, &dv) && !gguf_arr_i64(f, "arr.bool", 0, &iv));  /* bools are not numbers */
    CHECK(!gguf_arr_f64(f, "tokenizer.ggml.tokens", 0, &dv) && !gguf_arr_i64(f, "arr.nested", 0, &iv));
    CHECK(!gguf_arr_f64(f, "f32", 0, &dv) && !gguf_arr_i64(f, "absent", 0, &iv) && !gguf_arr_i64(f, "arr.empty", 0, &iv));

    CHECK(gguf_arr_str(f, "tokenizer.ggml.tokens", 0, &str, &len) && len == 3 && !memcmp(str, "<s>", 3));
    CHECK(gguf_arr_str(f, "tokenizer.ggml.tokens", 1, &str, &len) && len == 0);
    CHECK(gguf_arr_str(f, "tokenizer.ggml.tokens", 2, &str, &len) && len == 3 && !memcmp(str, "a\0b", 3));
    CHECK(gguf_arr_str(f, "tokenizer.ggml.tokens", 3, &str, &len) && len == 6 && !memcmp(str, "\xe2\x96\x81the", 6));
    CHECK(!gguf_arr_str(f, "tokenizer.ggml.tokens", 4, &str, &len));
    CHECK(!gguf_arr_str(f, "arr.u8", 0, &str, &len) && !gguf_arr_str(f, "str", 0, &str, &len));
    CHECK(!gguf_arr_str(f, "arr.nested_str", 0, &str, &len));

    const void *scores = gguf_arr_data(f, "tokenizer.ggml.scores");
    CHECK(scores != NULL && !memcmp(scores, g_scores, sizeof g_scores));  /* the host is little-endian */
    const uint8_t *u8s = gguf_arr_data(f, "arr.u8");
    CHECK(u8s && u8s[0] == 1 && u8s[2] == 255);
    CHECK(gguf_arr_data(f, "arr.empty") != NULL);
    CHECK(gguf_arr_data(f, "tokenizer.ggml.tokens") == NULL && gguf_arr_data(f, "arr.nested") == NULL);
    CHECK(gguf_arr_data(f, "u32") == NULL && gguf_arr_data(f, "absent") == NULL);
    gguf_close(f);
out:
    free(buf);
    gb_free(&b);

    /* a bool byte other than 0 / 1 reads as true */
    gb_header(&b, version, 0, 2);
    gb_key(&b, "b2", GGUF_TYPE_BOOL), gb_u8(&b, 2);
    gb_key(&b, "b0", GGUF_TYPE_BOOL), gb_u8(&b, 0);
    f = open_mem(&b);
    bool t = false, z = true;
    CHECK(f && gguf_get_bool(f, "b2", &t, NULL) && t && gguf_get_bool(f, "b0", &z, NULL) && !z);
    gguf_close(f);
    gb_free(&b);
}

/* The message example of gguf.h, through a file. */
static void test_file_messages(void) {
    gb b = {0};
    gb_header(&b, 3, 0, 1);
    gb_kv_str(&b, "qwen3.block_count", "28");
    char path[512];
    path_in(path, sizeof path, "model.gguf");
    CHECK(gb_write(&b, path) == 0);
    gguf_file *f = NULL;
    CHECK_OK(gguf_open(path, &f));
    if (f) {
        CHECK(!strcmp(gguf_file_name(f, 0), "model.gguf"));
        vllm_status err = VLLM_OK;
        uint64_t u;
        CHECK(!gguf_get_u64(f, "qwen3.block_count", &u, &err) && err == VLLM_ERR_FORMAT);
        CHECK_MSG(!strcmp(vllm_last_error(), "model.gguf: qwen3.block_count is a string, expected an integer"), "%s",
                  vllm_last_error());
        gguf_close(f);
    }
    gb_free(&b);

    /* not a file, no file, an empty file, arguments */
    f = (gguf_file *)&g_dir;
    EXPECT_ERR(gguf_open(g_dir, &f), VLLM_ERR_IO, g_dir, "not a regular file (a directory)");
    CHECK(f == NULL);
    char fifo[512];
    path_in(fifo, sizeof fifo, "fifo.gguf");
    if (mkfifo(fifo, 0600) == 0) {
        EXPECT_ERR(gguf_open(fifo, &f), VLLM_ERR_IO, "fifo.gguf", "not a regular file (a FIFO)");
        unlink(fifo);
    }
    path_in(path, sizeof path, "missing.gguf");
    EXPECT_ERR(gguf_open(path, &f), VLLM_ERR_NOT_FOUND, "missing.gguf", "No such file");
    path_in(path, sizeof path, "empty.gguf");
    gb e = {0};
    CHECK(gb_write(&e, path) == 0);
    EXPECT_ERR(gguf_open(path, &f), VLLM_ERR_FORMAT, "empty.gguf", "too short for a GGUF header");
    EXPECT_ERR(gguf_open(NULL, &f), VLLM_ERR_INVALID_ARG, "gguf_open", "NULL");
    EXPECT_ERR(gguf_open(path, NULL), VLLM_ERR_INVALID_ARG, "gguf_open", "NULL");
    EXPECT_ERR(gguf_open_memory(NULL, 0, &f), VLLM_ERR_FORMAT, "(memory)", "too short");
    EXPECT_ERR(gguf_open_memory(NULL, 5, &f), VLLM_ERR_INVALID_ARG, "gguf_open_memory", "NULL");
    const void *none[1] = {NULL};
    size_t zero[1] = {0};
    EXPECT_ERR(gguf_open_memory_parts(none, zero, 0, &f), VLLM_ERR_INVALID_ARG, "gguf_open_memory", "bad arguments");
    gguf_close(NULL);
    CHECK(gguf_kv_count(NULL) == 0 && gguf_tensor_count(NULL) == 0 && gguf_find_tensor(NULL, "x") == NULL);
}

/* ------------------------------------------------------------------ */
/* alignment and tensors                                               */
/* ------------------------------------------------------------------ */

static void test_tensors(void) {
    /* bytes: F32 [4, 3] 48; F16 [8] 16; Q4_0 [64, 2] 2*2*18 = 72; Q4_K [256, 1, 1, 2] 288; MXFP4 [32] 17;
     * I8 [2, 2, 2, 2] 16; unknown type 31 [8]: size unknown; F32 [0, 5]: empty */
    tspec ts[] = {
        {"blk.0.attn_q.weight", 2, {4, 3}, GGML_TYPE_F32, 0},
        {"blk.0.attn_norm.weight", 1, {8}, GGML_TYPE_F16, 64},
        {"q4_0", 2, {64, 2}, GGML_TYPE_Q4_0, 96},
        {"q4_k", 4, {256, 1, 1, 2}, GGML_TYPE_Q4_K, 192},
        {"mxfp4", 1, {32}, GGML_TYPE_MXFP4, 480},
        {"i8", 4, {2, 2, 2, 2}, GGML_TYPE_I8, 512},
        {"unknown", 1, {8}, 31, 544},
        {"empty", 2, {0, 5}, GGML_TYPE_F32, 576},
    };
    const size_t nb[] = {48, 16, 72, 288, 17, 16, 0, 0};
    for (int pass = 0; pass < 3; pass++) {
        /* default alignment 32; explicit 32; 64 (offsets above are multiples of 32 only: scale them) */
        uint32_t align = pass == 0 ? 0 : pass == 1 ? 32 : 64;
        tspec t2[8];
        memcpy(t2, ts, sizeof ts);
        if (align == 64)
            for (int i = 0; i < 8; i++) t2[i].offset *= 2;
        gb b = {0};
        size_t start = build(&b, t2, 8, align == 64 ? 1200 : 600, align);
        CHECK(start % (align ? align : 32) == 0);
        uint8_t *buf = dup_exact(b.p, b.n);
        gguf_file *f = NULL;
        CHECK_OK(gguf_open_memory(buf, b.n, &f));
        if (!f) {
            free(buf);
            gb_free(&b);
            continue;
        }
        CHECK(gguf_alignment(f) == (align ? align : 32));
        CHECK(gguf_tensor_count(f) == 8);
        for (size_t i = 0; i < 8; i++) {
            const gguf_tensor_info *t = gguf_tensor_at(f, i);
            CHECK(t != NULL);
            if (!t) continue;
            CHECK(!strcmp(t->name, t2[i].name));
            CHECK(t->type == t2[i].type);
            CHECK(t->n_dims == (int)t2[i].n_dims);
            for (int d = 0; d < GGUF_MAX_DIMS; d++)
                CHECK_MSG(t->ne[d] == (d < (int)t2[i].n_dims ? t2[i].ne[d] : 1), "%s ne[%d]", t->name, d);
            CHECK_MSG(t->nbytes == nb[i], "%s: nbytes %zu", t->name, t->nbytes);
            if (nb[i]) CHECK(t->data == buf + start + t2[i].offset);
            else CHECK(t->data == NULL);
            CHECK(t->file == 0);
            CHECK(gguf_find_tensor(f, t2[i].name) == t);
        }
        CHECK(gguf_tensor_at(f, 8) == NULL);
        CHECK(gguf_find_tensor(f, "absent") == NULL && gguf_find_tensor(f, "") == NULL);
        /* the data is the file's: pattern i * 7 + 1 from the data section's start */
        const gguf_tensor_info *q = gguf_find_tensor(f, "q4_0");
        if (q) CHECK(((const uint8_t *)q->data)[5] == (uint8_t)((t2[2].offset + 5) * 7 + 1));
        /* gguf_tensor */
        const gguf_tensor_info *t = NULL;
        CHECK_OK(gguf_tensor(f, "q4_k", &t));
        CHECK(t && t->nbytes == 288);
        EXPECT_ERR(gguf_tensor(f, "unknown", &t), VLLM_ERR_UNSUPPORTED, "'unknown'", "type 31");
        CHECK(t == NULL);
        EXPECT_ERR(gguf_tensor(f, "absent", &t), VLLM_ERR_NOT_FOUND, "(memory): tensor 'absent' missing", "");
        CHECK_OK(gguf_tensor(f, "empty", &t));
        gguf_close(f);
        free(buf);
        gb_free(&b);
    }

    /* alignment 1 and a large one (2^20, the data section beyond small headers) */
    for (int k = 0; k < 2; k++) {
        uint32_t align = k == 0 ? 1 : 1u << 20;
        tspec one = {"w", 1, {3}, GGML_TYPE_F16, 0};
        gb b = {0};
        size_t start = build(&b, &one, 1, 6, align);
        gguf_file *f = open_mem(&b);
        if (f) {
            CHECK(gguf_alignment(f) == align);
            CHECK(gguf_tensor_at(f, 0)->data == b.p + start);
            CHECK(k == 0 ? start == b.n - 6 : start == (1u << 20));
            gguf_close(f);
        }
        gb_free(&b);
    }

    /* a vocabulary-only file may end right after its metadata (no padding, no data section) */
    gb b = {0};
    gb_header(&b, 3, 0, 1);
    gb_kv_str(&b, "general.architecture", "x");
    CHECK(b.n % 32 != 0);
    gguf_file *f = open_mem(&b);
    gguf_close(f);
    /* so may a file whose only tensors are empty */
    gb_free(&b);
    tspec z = {"z", 2, {0, 7}, GGML_TYPE_Q8_0, 0};
    gb_header(&b, 3, 1, 0);
    gb_tensor(&b, z.name, z.n_dims, z.ne, z.type, z.offset);
    f = open_mem(&b);
    if (f) CHECK(gguf_tensor_at(f, 0)->nbytes == 0 && gguf_tensor_at(f, 0)->data == NULL);
    gguf_close(f);
    gb_free(&b);
}

/* ------------------------------------------------------------------ */
/* a large vocabulary                                                  */
/* ------------------------------------------------------------------ */

static void test_large_vocab(void) {
    const uint64_t n = 250000;
    gb b = {0};
    gb_header(&b, 3, 0, 2);
    gb_key(&b, "tokenizer.ggml.tokens", GGUF_TYPE_ARRAY);
    gb_arr(&b, GGUF_TYPE_STRING, n);
    char tok[32];
    for (uint64_t i = 0; i < n; i++) {
        snprintf(tok, sizeof tok, "tok%llu", (unsigned long long)i * 31);
        gb_str(&b, tok);
    }
    gb_key(&b, "tokenizer.ggml.token_type", GGUF_TYPE_ARRAY);
    gb_arr(&b, GGUF_TYPE_INT32, n);
    for (uint64_t i = 0; i < n; i++) gb_u32(&b, (uint32_t)(i % 5));
    gguf_file *f = open_mem(&b);
    if (f) {
        int bad = 0;
        for (uint64_t i = 0; i < n; i += 997) {
            const char *s;
            size_t len;
            snprintf(tok, sizeof tok, "tok%llu", (unsigned long long)i * 31);
            int64_t tt;
            if (!gguf_arr_str(f, "tokenizer.ggml.tokens", i, &s, &len) || len != strlen(tok) || memcmp(s, tok, len))
                bad++;
            if (!gguf_arr_i64(f, "tokenizer.ggml.token_type", i, &tt) || tt != (int64_t)(i % 5)) bad++;
        }
        const char *s;
        size_t len;
        CHECK(gguf_arr_str(f, "tokenizer.ggml.tokens", n - 1, &s, &len) && len == strlen("tok7749969"));
        CHECK(!gguf_arr_str(f, "tokenizer.ggml.tokens", n, &s, &len));
        CHECK(bad == 0);
        gguf_close(f);
    }
    gb_free(&b);
}

/* ------------------------------------------------------------------ */
/* split sets                                                          */
/* ------------------------------------------------------------------ */

/* Part `no` (0-based) of `count`: split keys unless keys is false (split.tensors.count = total, in every
 * part as gguf-split writes it), the first part the other metadata, tensors named "t<no>.<j>" (F32 [4]). */
static void build_part(gb *b, int no, int count, int n_tensors, int total, bool keys, int split_no_override) {
    int n_kv = (keys ? 3 : 0) + (no == 0 ? 2 : 0);
    gb_header(b, 3, (uint64_t)n_tensors, (uint64_t)n_kv);
    if (no == 0) {
        gb_kv_str(b, "general.architecture", "llama");
        gb_kv_u32(b, "llama.block_count", 2);
    }
    if (keys) {
        gb_kv_u16(b, "split.no", (uint16_t)(split_no_override >= 0 ? split_no_override : no));
        gb_kv_u16(b, "split.count", (uint16_t)count);
        gb_kv_i32(b, "split.tensors.count", total);
    }
    for (int j = 0; j < n_tensors; j++) {
        char name[32];
        snprintf(name, sizeof name, "t%d.%d", no, j);
        int64_t ne[1] = {4};
        gb_tensor(b, name, 1, ne, GGML_TYPE_F32, (uint64_t)j * 32);
    }
    gb_pad(b, 32);
    gb_fill(b, (size_t)n_tensors * 32, (unsigned)(no + 10));
}

static void write_part(const char *sub, const char *name, const gb *b) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s/%s", g_dir, sub, name);
    CHECK(gb_write(b, path) == 0);
}

/* Writes sub/model-0000K-of-00003.gguf with 1, 2, 1 tensors; split.tensors.count total_override (-1: 4);
 * part bad_no_part (-1: none) with split.no 0; dup: part 3's tensor renamed as one of part 2. */
static void write_set(const char *sub, bool keys, int total_override, int bad_no_part, bool dup) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", g_dir, sub);
    mkdir(dir, 0700);
    const int nt[3] = {1, 2, 1};
    for (int k = 0; k < 3; k++) {
        gb b = {0};
        int total = total_override >= 0 ? total_override : 4;
        build_part(&b, k, 3, nt[k], total, keys, k == bad_no_part ? 0 : -1);
        if (dup && k == 2) {
            /* rename "t2.0" to "t1.1" in place (same length) */
            uint8_t *q = memmem(b.p, b.n, "t2.0", 4);
            if (q) memcpy(q, "t1.1", 4);
        }
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-00003.gguf", k + 1);
        write_part(sub, name, &b);
        gb_free(&b);
    }
}

static void check_set(gguf_file *f, const char *const *names) {
    CHECK(gguf_part_count(f) == 3);
    CHECK(gguf_tensor_count(f) == 4);
    const char *want[4] = {"t0.0", "t1.0", "t1.1", "t2.0"};
    const int file[4] = {0, 1, 1, 2};
    for (int i = 0; i < 4; i++) {
        const gguf_tensor_info *t = gguf_tensor_at(f, (size_t)i);
        CHECK(t && !strcmp(t->name, want[i]) && t->file == file[i] && t->nbytes == 16);
        CHECK(gguf_find_tensor(f, want[i]) == t);
        /* data from its own part: pattern seed no + 10 at the part's data section */
        if (t) {
            size_t j = (size_t)(want[i][3] - '0');
            CHECK(((const uint8_t *)t->data)[0] == (uint8_t)(j * 32 * 7 + (unsigned)(file[i] + 10)));
        }
    }
    for (int k = 0; k < 3; k++) CHECK(!strcmp(gguf_file_name(f, k), names[k]));
    const char *s;
    size_t len;
    CHECK(gguf_get_str(f, "general.architecture", &s, &len, NULL) && len == 5 && !memcmp(s, "llama", 5));
}

static void test_split(void) {
    const char *names[3] = {"model-00001-of-00003.gguf", "model-00002-of-00003.gguf", "model-00003-of-00003.gguf"};
    char path[512];
    gguf_file *f = NULL;

    /* with split keys */
    write_set("split", true, -1, -1, false);
    snprintf(path, sizeof path, "%s/split/%s", g_dir, names[0]);
    CHECK_OK(gguf_open(path, &f));
    if (f) {
        check_set(f, names);
        uint64_t v;
        CHECK(gguf_get_u64(f, "split.count", &v, NULL) && v == 3);
        CHECK(gguf_kv_count(f) == 5);  /* the first part's metadata only */
        gguf_close(f);
    }
    /* opening another part names the first */
    snprintf(path, sizeof path, "%s/split/%s", g_dir, names[1]);
    f = (gguf_file *)&g_dir;
    EXPECT_ERR(gguf_open(path, &f), VLLM_ERR_INVALID_ARG, "part 2 of a 3-part split model",
               "open the first part, model-00001-of-00003.gguf");
    CHECK(f == NULL);

    /* by name only (no split keys) */
    write_set("byname", false, -1, -1, false);
    snprintf(path, sizeof path, "%s/byname/%s", g_dir, names[0]);
    CHECK_OK(gguf_open(path, &f));
    if (f) {
        check_set(f, names);
        gguf_close(f);
    }

    /* a missing part */
    write_set("missing", true, -1, -1, false);
    snprintf(path, sizeof path, "%s/missing/%s", g_dir, names[2]);
    unlink(path);
    snprintf(path, sizeof path, "%s/missing/%s", g_dir, names[0]);
    EXPECT_ERR(gguf_open(path, &f), VLLM_ERR_NOT_FOUND, "part 3 of 3", "model-00003-of-00003.gguf");
    CHECK(f == NULL);

    /* wrong split.no in part 2, wrong split.tensors.count, a duplicate name across parts */
    write_set("badno", true, -1, 1, false);
    snprintf(path, sizeof path, "%s/badno/%s", g_dir, names[0]);
    EXPECT_ERR(gguf_open(path, &f), VLLM_ERR_FORMAT, "model-00002-of-00003.gguf: split.no is 0", "expected 1");
    write_set("badtotal", true, 5, -1, false);
    snprintf(path, sizeof path, "%s/badtotal/%s", g_dir, names[0]);
    EXPECT_ERR(gguf_open(path, &f), VLLM_ERR_FORMAT, "split.tensors.count is 5", "hold 4 tensors");
    write_set("dup", true, -1, -1, true);
    snprintf(path, sizeof path, "%s/dup/%s", g_dir, names[0]);
    EXPECT_ERR(gguf_open(path, &f), VLLM_ERR_FORMAT, "model-00003-of-00003.gguf: tensor 't1.1'",
               "is also in model-00002-of-00003.gguf");

    /* split.count > 1 under a name without the pattern; the name and split.count disagree */
    gb b = {0};
    build_part(&b, 0, 3, 1, 4, true, -1);
    path_in(path, sizeof path, "plain.gguf");
    CHECK(gb_write(&b, path) == 0);
    EXPECT_ERR(gguf_open(path, &f), VLLM_ERR_FORMAT, "plain.gguf: split.count is 3", "cannot be found");
    path_in(path, sizeof path, "x-00001-of-00002.gguf");
    CHECK(gb_write(&b, path) == 0);
    EXPECT_ERR(gguf_open(path, &f), VLLM_ERR_FORMAT, "split.count is 3", "the name says 2 parts");
    /* a lone file named as one part of one */
    gb_free(&b);
    build_part(&b, 0, 1, 1, 1, true, -1);
    path_in(path, sizeof path, "y-00001-of-00001.gguf");
    CHECK(gb_write(&b, path) == 0);
    CHECK_OK(gguf_open(path, &f));
    if (f) CHECK(gguf_part_count(f) == 1 && gguf_tensor_count(f) == 1);
    gguf_close(f);
    gb_free(&b);

    /* buffers */
    gb p[3] = {{0}};
    const int nt[3] = {1, 2, 1};
    for (int k = 0; k < 3; k++) build_part(&p[k], k, 3, nt[k], 4, true, -1);
    const void *data[3] = {p[0].p, p[1].p, p[2].p};
    size_t len[3] = {p[0].n, p[1].n, p[2].n};
    CHECK_OK(gguf_open_memory_parts(data, len, 3, &f));
    if (f) {
        const char *mnames[3] = {"(memory part 1 of 3)", "(memory part 2 of 3)", "(memory part 3 of 3)"};
        check_set(f, mnames);
        gguf_close(f);
    }
    f = (gguf_file *)&g_dir;
    EXPECT_ERR(gguf_open_memory(p[0].p, p[0].n, &f), VLLM_ERR_INVALID_ARG, "(memory): split.count is 3",
               "a part of a split model");
    CHECK(f == NULL);
    EXPECT_ERR(gguf_open_memory_parts(data, len, 2, &f), VLLM_ERR_INVALID_ARG, "split.count is 3", "2 given");
    const void *swapped[3] = {p[0].p, p[2].p, p[1].p};
    size_t swapped_len[3] = {p[0].n, p[2].n, p[1].n};
    EXPECT_ERR(gguf_open_memory_parts(swapped, swapped_len, 3, &f), VLLM_ERR_FORMAT,
               "(memory part 2 of 3): split.no is 2", "expected 1");
    /* a single-part buffer with split.no 1 of 1, and split.count 0 */
    gb one = {0};
    build_part(&one, 0, 1, 1, 1, true, 1);
    EXPECT_BAD(&one, "split.no is 1", "expected 0");
    gb_free(&one);
    build_part(&one, 0, 0, 1, 1, true, -1);
    EXPECT_BAD(&one, "(memory): split.count is 0", "");
    gb_free(&one);
    build_part(&one, 0, 1, 1, 7, true, -1);
    EXPECT_BAD(&one, "split.tensors.count is 7", "the 1 part hold 1 tensors");
    gb_free(&one);
    gb_header(&one, 3, 0, 1);
    gb_kv_str(&one, "split.count", "3");
    EXPECT_BAD(&one, "(memory): split.count is a string, expected an integer", "");
    gb_free(&one);
    gb_header(&one, 3, 0, 2);
    gb_kv_u16(&one, "split.count", 1);
    gb_key(&one, "split.no", GGUF_TYPE_INT8), gb_u8(&one, 0xFF);
    EXPECT_BAD(&one, "(memory): split.no is -1, expected a non-negative integer", "");
    gb_free(&one);
    for (int k = 0; k < 3; k++) gb_free(&p[k]);
}

/* ------------------------------------------------------------------ */
/* malformed files                                                     */
/* ------------------------------------------------------------------ */

/* A small valid file: two metadata entries and two tensors, the last byte being tensor data. */
static void build_small(gb *b) {
    gb_header(b, 3, 2, 3);
    gb_kv_str(b, "general.architecture", "llama");
    gb_key(b, "tokenizer.ggml.tokens", GGUF_TYPE_ARRAY), gb_arr(b, GGUF_TYPE_STRING, 2), gb_str(b, "a"), gb_str(b, "bc");
    gb_kv_u32(b, "general.alignment", 16);
    int64_t ne0[1] = {4}, ne1[2] = {2, 2};
    gb_tensor(b, "x", 1, ne0, GGML_TYPE_F32, 0);
    gb_tensor(b, "y", 2, ne1, GGML_TYPE_F16, 16);
    gb_pad(b, 16);
    gb_fill(b, 24, 3);
}

static void test_truncations(void) {
    gb b = {0};
    build_small(&b);
    gguf_file *f = open_mem(&b);
    CHECK(f && gguf_tensor_count(f) == 2);
    gguf_close(f);
    int bad = 0;
    for (size_t n = 0; n < b.n; n++) {
        uint8_t *c = dup_exact(b.p, n);
        f = NULL;
        vllm_status st = gguf_open_memory(c, n, &f);
        if (st != VLLM_ERR_FORMAT || f != NULL || !strstr(vllm_last_error(), "(memory)")) {
            fprintf(stderr, "truncated to %zu bytes: status %d: %s\n", n, st, vllm_last_error());
            bad++;
        }
        gguf_close(f);
        free(c);
    }
    CHECK(bad == 0);
    gb_free(&b);
}

/* A header then raw bytes written by the caller. */
static void hdr(gb *b, uint64_t n_tensors, uint64_t n_kv) {
    gb_free(b);
    gb_header(b, 3, n_tensors, n_kv);
}

static void test_malformed(void) {
    gb b = {0};

    /* magic and version */
    build_small(&b);
    memcpy(b.p, "GGUG", 4);
    EXPECT_BAD(&b, "not a GGUF file", "magic 47 47 55 47");
    b.p[3] = 'F';
    const struct {
        uint32_t v;
        const char *msg;
    } versions[] = {{1, "GGUF version 1 is not supported"},
                    {0x03000000, "a big-endian file"},
                    {0x02000000, "a big-endian file"},
                    {0, "GGUF version 0 is not supported"},
                    {4, "GGUF version 4 is not supported"},
                    {0xFFFFFFFF, "GGUF version 4294967295"}};
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
        for (int k = 0; k < 4; k++) b.p[4 + k] = (uint8_t)(versions[i].v >> (8 * k));
        EXPECT_BAD(&b, versions[i].msg, "(memory)");
    }
    for (int k = 0; k < 4; k++) b.p[4 + k] = (uint8_t)(2 >> (8 * k));
    gguf_file *f = open_mem(&b);  /* version 2 reads the same */
    CHECK(f && gguf_version(f) == 2);
    gguf_close(f);

    /* header counts */
    hdr(&b, 0, UINT64_MAX), gb_fill(&b, 100, 0);
    EXPECT_BAD(&b, "18446744073709551615 metadata entries cannot fit", "");
    hdr(&b, 1ull << 62, 0), gb_fill(&b, 100, 0);
    EXPECT_BAD(&b, "4611686018427387904 tensor infos cannot fit", "");
    hdr(&b, 0, 0), b.n -= 1;
    EXPECT_BAD(&b, "too short for a GGUF header", "");

    /* keys */
    hdr(&b, 0, 1), gb_u64(&b, UINT64_MAX - 3), gb_fill(&b, 40, 0);
    EXPECT_BAD(&b, "the key of metadata entry 0 of 18446744073709551612 bytes", "truncated");
    hdr(&b, 0, 1), gb_u64(&b, 1ull << 40), gb_fill(&b, 40, 0);
    EXPECT_BAD(&b, "the key of metadata entry 0", "truncated");
    hdr(&b, 0, 1), gb_strn(&b, "a\0b", 3), gb_u32(&b, GGUF_TYPE_UINT8), gb_u8(&b, 0);
    EXPECT_BAD(&b, "the key of metadata entry 0 'a' holds a NUL byte", "");
    hdr(&b, 0, 2), gb_kv_u32(&b, "k", 1), gb_kv_str(&b, "k", "again");
    EXPECT_BAD(&b, "metadata key 'k' appears twice", "entries 0 and 1");

    /* value types */
    const uint32_t bad_types[] = {13, 100, UINT32_MAX};
    for (size_t i = 0; i < 3; i++) {
        hdr(&b, 0, 1), gb_key(&b, "key.x", bad_types[i]), gb_fill(&b, 16, 0);
        EXPECT_BAD(&b, "'key.x' has an unknown value type", "");
        hdr(&b, 0, 1), gb_key(&b, "arr.x", GGUF_TYPE_ARRAY), gb_arr(&b, bad_types[i], 1), gb_fill(&b, 16, 0);
        EXPECT_BAD(&b, "array 'arr.x' has an unknown element type", "");
        hdr(&b, 0, 1), gb_key(&b, "arr.y", GGUF_TYPE_ARRAY), gb_arr(&b, GGUF_TYPE_ARRAY, 1), gb_arr(&b, bad_types[i], 0);
        EXPECT_BAD(&b, "array 'arr.y' has an unknown element type", "");
    }

    /* huge string lengths and counts */
    hdr(&b, 0, 1), gb_key(&b, "s", GGUF_TYPE_STRING), gb_u64(&b, UINT64_MAX), gb_fill(&b, 64, 0);
    EXPECT_BAD(&b, "the string 's' of 18446744073709551615 bytes", "truncated");
    hdr(&b, 0, 1), gb_key(&b, "s", GGUF_TYPE_STRING), gb_u64(&b, 65), gb_fill(&b, 64, 0);
    EXPECT_BAD(&b, "the string 's' of 65 bytes (64 left)", "");
    const uint32_t fixed[] = {GGUF_TYPE_UINT8, GGUF_TYPE_UINT16, GGUF_TYPE_FLOAT32, GGUF_TYPE_FLOAT64, GGUF_TYPE_BOOL};
    const uint64_t counts[] = {UINT64_MAX, 1ull << 62, 1ull << 61, 1ull << 33};
    for (size_t i = 0; i < 5; i++)
        for (size_t c = 0; c < 4; c++) {
            hdr(&b, 0, 1), gb_key(&b, "a", GGUF_TYPE_ARRAY), gb_arr(&b, fixed[i], counts[c]), gb_fill(&b, 64, 0);
            EXPECT_BAD(&b, "array 'a' of", "bytes left");
        }
    hdr(&b, 0, 1), gb_key(&b, "a", GGUF_TYPE_ARRAY), gb_arr(&b, GGUF_TYPE_UINT32, 17), gb_fill(&b, 64, 0);
    EXPECT_BAD(&b, "array 'a' of 17 uint32 elements (64 bytes left)", "");
    for (size_t c = 0; c < 4; c++) {
        hdr(&b, 0, 1), gb_key(&b, "tokens", GGUF_TYPE_ARRAY), gb_arr(&b, GGUF_TYPE_STRING, counts[c]), gb_fill(&b, 64, 0);
        EXPECT_BAD(&b, "array 'tokens' of", "strings");
        hdr(&b, 0, 1), gb_key(&b, "nest", GGUF_TYPE_ARRAY), gb_arr(&b, GGUF_TYPE_ARRAY, counts[c]), gb_fill(&b, 64, 0);
        EXPECT_BAD(&b, "array 'nest' of", "arrays");
    }
    /* a string element too long, inside a plausible count */
    hdr(&b, 0, 1), gb_key(&b, "tokens", GGUF_TYPE_ARRAY), gb_arr(&b, GGUF_TYPE_STRING, 2), gb_str(&b, "ok");
    gb_u64(&b, 1000), gb_fill(&b, 8, 0);
    EXPECT_BAD(&b, "element 1 of 'tokens', 1000 bytes", "");
    hdr(&b, 0, 1), gb_key(&b, "tokens", GGUF_TYPE_ARRAY), gb_arr(&b, GGUF_TYPE_STRING, 2), gb_str(&b, "ok");
    gb_u64(&b, UINT64_MAX), gb_fill(&b, 8, 0);
    EXPECT_BAD(&b, "element 1 of 'tokens'", "truncated");

    /* nesting: 16 levels of arrays read, 17 do not */
    for (int levels = 16; levels <= 17; levels++) {
        hdr(&b, 0, 1), gb_key(&b, "deep", GGUF_TYPE_ARRAY);
        for (int l = 0; l < levels - 1; l++) gb_arr(&b, GGUF_TYPE_ARRAY, 1);
        gb_arr(&b, GGUF_TYPE_UINT8, 1), gb_u8(&b, 9);
        if (levels == 16) {
            f = open_mem(&b);
            gguf_type et;
            uint64_t n;
            CHECK(f && gguf_get_arr(f, "deep", &et, &n, NULL) && et == GGUF_TYPE_ARRAY && n == 1);
            gguf_close(f);
        } else {
            EXPECT_BAD(&b, "'deep': arrays nested more than 16 deep", "");
        }
    }

    /* alignment */
    const uint32_t bad_align[] = {0, 3, 48, 0x80000001u};
    for (size_t i = 0; i < 4; i++) {
        hdr(&b, 0, 1), gb_kv_u32(&b, "general.alignment", bad_align[i]);
        EXPECT_BAD(&b, "general.alignment", "is not a power of two");
    }
    hdr(&b, 0, 1), gb_key(&b, "general.alignment", GGUF_TYPE_UINT64), gb_u64(&b, 32);
    EXPECT_BAD(&b, "general.alignment is a uint64, expected a uint32", "");
    hdr(&b, 0, 1), gb_kv_str(&b, "general.alignment", "32");
    EXPECT_BAD(&b, "general.alignment is a string, expected a uint32", "");

    /* tensor infos */
    const tspec ok = {"w", 2, {4, 2}, GGML_TYPE_F32, 0};
    gb_free(&b), build1(&b, ok, 32);
    f = open_mem(&b);
    CHECK(f && gguf_tensor_at(f, 0)->nbytes == 32);
    gguf_close(f);
    tspec t = ok;
    t.n_dims = 0;
    gb_free(&b), build1(&b, t, 32);
    EXPECT_BAD(&b, "tensor 'w' has n_dims 0 (1 to 4)", "");
    t.n_dims = 5;
    gb_free(&b), build1(&b, t, 64);
    EXPECT_BAD(&b, "tensor 'w' has n_dims 5 (1 to 4)", "");
    t = ok, t.ne[1] = -1;
    gb_free(&b), build1(&b, t, 32);
    EXPECT_BAD(&b, "tensor 'w' has ne[1] = -1 (negative)", "");
    t = ok, t.ne[0] = 1ll << 32, t.ne[1] = 1ll << 32;
    gb_free(&b), build1(&b, t, 32);
    EXPECT_BAD(&b, "tensor 'w' has ne [4294967296, 4294967296, 1, 1]: too many elements", "");
    t = ok, t.n_dims = 4, t.ne[0] = 1ll << 20, t.ne[1] = 1ll << 20, t.ne[2] = 1ll << 20, t.ne[3] = 1ll << 4;
    gb_free(&b), build1(&b, t, 32);
    EXPECT_BAD(&b, "too many elements", "");
    t = ok, t.ne[0] = 0, t.ne[1] = INT64_MAX;  /* empty, but fine */
    gb_free(&b), build1(&b, t, 0);
    f = open_mem(&b);
    CHECK(f && gguf_tensor_at(f, 0)->nbytes == 0);
    gguf_close(f);
    t = ok, t.n_dims = 3, t.ne[0] = 0, t.ne[1] = 1ll << 32, t.ne[2] = 1ll << 32;  /* empty, its other dims overflow */
    gb_free(&b), build1(&b, t, 0);
    EXPECT_BAD(&b, "too many elements", "");
    t = ok, t.type = GGML_TYPE_F64, t.n_dims = 1, t.ne[0] = 1ll << 61;  /* 2^61 elements of 8 bytes: 2^64 */
    gb_free(&b), build1(&b, t, 32);
    EXPECT_BAD(&b, "tensor 'w' of type F64 with ne [2305843009213693952, 1, 1, 1] is too large", "");
    t = ok, t.type = GGML_TYPE_I64, t.n_dims = 3, t.ne[0] = 1ll << 31, t.ne[1] = 1ll << 29, t.ne[2] = 3;  /* 2^64 * 3 / 2 */
    gb_free(&b), build1(&b, t, 32);
    EXPECT_BAD(&b, "is too large", "");
    t = ok, t.type = GGML_TYPE_Q8_K, t.ne[0] = 1ll << 50, t.ne[1] = 1ll << 12;  /* 2^54 * 292 bytes: fits, not there */
    gb_free(&b), build1(&b, t, 32);
    EXPECT_BAD(&b, "needs bytes [0, 5260204364768739328)", "which has 32");
    t = ok, t.type = GGML_TYPE_Q4_0, t.ne[0] = 33;
    gb_free(&b), build1(&b, t, 64);
    EXPECT_BAD(&b, "tensor 'w' of type Q4_0 has ne[0] = 33, not a multiple of the block size 32", "");
    t = ok, t.type = GGML_TYPE_Q6_K, t.ne[0] = 128;
    gb_free(&b), build1(&b, t, 256);
    EXPECT_BAD(&b, "not a multiple of the block size 256", "");
    t = ok, t.offset = 16;
    gb_free(&b), build1(&b, t, 64);
    EXPECT_BAD(&b, "tensor 'w' has offset 16, not a multiple of the alignment 32", "");
    t = ok, t.offset = 32;
    gb_free(&b), build1(&b, t, 63);
    EXPECT_BAD(&b, "tensor 'w' needs bytes [32, 64) of the data section, which has 63", "");
    t = ok, t.offset = 96;
    gb_free(&b), build1(&b, t, 64);
    EXPECT_BAD(&b, "tensor 'w' has offset 96 past the end of the data section (64 bytes)", "");
    t = ok, t.offset = UINT64_MAX - 31;
    gb_free(&b), build1(&b, t, 64);
    EXPECT_BAD(&b, "past the end of the data section", "");
    t = ok, t.type = 31, t.offset = 64;  /* unknown type: still in the data section */
    gb_free(&b), build1(&b, t, 32);
    EXPECT_BAD(&b, "past the end of the data section", "");
    t = ok;
    gb_free(&b), build1(&b, t, 31);  /* truncated data */
    EXPECT_BAD(&b, "needs bytes [0, 32)", "which has 31");
    /* names */
    hdr(&b, 1, 0), gb_strn(&b, "w\0x", 3), gb_u32(&b, 1), gb_u64(&b, 1), gb_u32(&b, 0), gb_u64(&b, 0), gb_fill(&b, 64, 0);
    EXPECT_BAD(&b, "the name of tensor 0 'w' holds a NUL byte", "");
    hdr(&b, 1, 0), gb_u64(&b, 1ull << 50), gb_fill(&b, 64, 0);
    EXPECT_BAD(&b, "the name of tensor 0 of 1125899906842624 bytes", "");
    tspec two[2] = {ok, ok};
    two[1].offset = 32;
    gb_free(&b), build(&b, two, 2, 64, 0);
    EXPECT_BAD(&b, "tensor name 'w' appears twice", "");
    gb_free(&b);
}

/* ------------------------------------------------------------------ */
/* random corruptions: never a crash, only OK or FORMAT                */
/* ------------------------------------------------------------------ */

static uint64_t xorshift(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static void walk(const gguf_file *f) {
    for (size_t i = 0; i < gguf_kv_count(f); i++) {
        const char *k = gguf_kv_key(f, i);
        uint64_t u, n;
        int64_t s;
        double d;
        bool bo;
        const char *str;
        size_t len;
        gguf_type et;
        gguf_get_u64(f, k, &u, NULL), gguf_get_i64(f, k, &s, NULL), gguf_get_f64(f, k, &d, NULL);
        gguf_get_bool(f, k, &bo, NULL), gguf_get_str(f, k, &str, &len, NULL);
        if (gguf_get_arr(f, k, &et, &n, NULL))
            for (uint64_t j = 0; j < n && j < 64; j++)
                gguf_arr_str(f, k, j, &str, &len), gguf_arr_i64(f, k, j, &s), gguf_arr_f64(f, k, j, &d);
    }
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor_info *t = gguf_tensor_at(f, i);
        for (size_t j = 0; j < t->nbytes; j++) sink ^= ((const uint8_t *)t->data)[j];
    }
    (void)sink;
}

static void test_random(void) {
    gb b = {0};
    build_small(&b);
    gb m = {0};
    build_meta(&m, 3);
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    int bad = 0, ok = 0;
    for (int it = 0; it < 4000; it++) {
        const gb *src = it & 1 ? &b : &m;
        uint8_t *c = dup_exact(src->p, src->n);
        int flips = 1 + (int)(xorshift(&seed) % 4);
        for (int k = 0; k < flips; k++) {
            size_t at = (size_t)(xorshift(&seed) % src->n);
            uint64_t r = xorshift(&seed);
            c[at] = (r & 3) == 0 ? 0xFF : (r & 3) == 1 ? 0 : (uint8_t)(r >> 8);
        }
        gguf_file *f = NULL;
        vllm_status st = gguf_open_memory(c, src->n, &f);
        if (st == VLLM_OK) {
            ok++;
            walk(f);
        } else if (st != VLLM_ERR_FORMAT && st != VLLM_ERR_INVALID_ARG) {
            bad++;
        }
        gguf_close(f);
        free(c);
    }
    CHECK(bad == 0);
    CHECK(ok > 0);
    gb_free(&b);
    gb_free(&m);
}

/* ------------------------------------------------------------------ */
/* real files (tests/fixtures/gguf, see its README.md)                 */
/* ------------------------------------------------------------------ */

static void test_ollama_tiny(void) {
    gguf_file *f = NULL;
    CHECK_OK(gguf_open(VLLM_SOURCE_DIR "/tests/fixtures/gguf/ollama-llama-2-tiny-random.gguf", &f));
    if (!f) return;
    CHECK(gguf_version(f) == 3 && gguf_alignment(f) == 32 && gguf_kv_count(f) == 18);
    const char *s;
    size_t len;
    CHECK(gguf_get_str(f, "general.architecture", &s, &len, NULL) && len == 5 && !memcmp(s, "llama", 5));
    uint64_t u;
    CHECK(gguf_get_u64(f, "llama.block_count", &u, NULL) && u == 1);
    CHECK(gguf_get_u64(f, "llama.embedding_length", &u, NULL) && u == 8);
    double eps;
    CHECK(gguf_get_f64(f, "llama.attention.layer_norm_rms_epsilon", &eps, NULL) && fabs(eps - 1e-5) < 1e-9);
    gguf_type et;
    uint64_t n;
    CHECK(gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &n, NULL) && et == GGUF_TYPE_STRING && n == 32000);
    CHECK(gguf_arr_str(f, "tokenizer.ggml.tokens", 1, &s, &len) && len == 3 && !memcmp(s, "<s>", 3));
    CHECK(gguf_get_arr(f, "tokenizer.ggml.scores", &et, &n, NULL) && et == GGUF_TYPE_FLOAT32 && n == 32000);
    CHECK(gguf_arr_data(f, "tokenizer.ggml.scores") != NULL);
    int64_t tt;
    CHECK(gguf_arr_i64(f, "tokenizer.ggml.token_type", 0, &tt) && tt == 2);
    /* 12 tensors: 9 F16 matrices, 3 F32 norms */
    CHECK(gguf_tensor_count(f) == 12);
    int f16 = 0, f32 = 0;
    size_t total = 0;
    for (size_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor_info *t = gguf_tensor_at(f, i);
        f16 += t->type == GGML_TYPE_F16;
        f32 += t->type == GGML_TYPE_F32;
        total += t->nbytes;
        CHECK(t->data != NULL && t->file == 0);
    }
    CHECK(f16 == 9 && f32 == 3);
    CHECK(total == 1026144);  /* the data section, tensors back to back (all sizes multiples of 32) */
    const gguf_tensor_info *emb = gguf_find_tensor(f, "token_embd.weight");
    CHECK(emb && emb->type == GGML_TYPE_F16 && emb->n_dims == 2 && emb->ne[0] == 8 && emb->ne[1] == 32000 &&
          emb->nbytes == 512000);
    const gguf_tensor_info *out = gguf_find_tensor(f, "output.weight");
    CHECK(out && (const uint8_t *)out->data + out->nbytes == (const uint8_t *)emb->data + 1026144);
    const gguf_tensor_info *norm = gguf_find_tensor(f, "blk.0.attn_norm.weight");
    CHECK(norm && norm->type == GGML_TYPE_F32 && norm->n_dims == 1 && norm->ne[0] == 8 && norm->nbytes == 32);
    gguf_close(f);
}

static void test_vocab_phi3(void) {
    gguf_file *f = NULL;
    CHECK_OK(gguf_open(VLLM_SOURCE_DIR "/tests/fixtures/llamacpp-vocab/ggml-vocab-phi-3.gguf", &f));
    if (!f) return;
    CHECK(gguf_tensor_count(f) == 0 && gguf_kv_count(f) == 26);
    const char *s;
    size_t len;
    CHECK(gguf_get_str(f, "general.architecture", &s, &len, NULL) && len == 4 && !memcmp(s, "phi3", 4));
    CHECK(gguf_get_str(f, "tokenizer.chat_template", &s, &len, NULL) && len > 0 && !memcmp(s, "{{ bos_token }}", 15));
    bool add_bos = false, add_eos = true;
    CHECK(gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &add_bos, NULL) && add_bos);
    CHECK(gguf_get_bool(f, "tokenizer.ggml.add_eos_token", &add_eos, NULL) && !add_eos);
    int64_t eos;
    CHECK(gguf_get_i64(f, "tokenizer.ggml.eos_token_id", &eos, NULL) && eos == 32000);
    uint64_t n;
    CHECK(gguf_get_arr(f, "tokenizer.ggml.tokens", NULL, &n, NULL) && n == 32064);
    CHECK(gguf_arr_str(f, "tokenizer.ggml.tokens", 32000, &s, &len) && len == 13 && !memcmp(s, "<|endoftext|>", 13));
    CHECK(gguf_arr_str(f, "tokenizer.ggml.tokens", 32063, &s, &len) && len == 10 && !memcmp(s, "[PAD32063]", 10));
    double score;
    CHECK(gguf_arr_f64(f, "tokenizer.ggml.scores", 0, &score) && score == -1000.0);
    gguf_close(f);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/vllm_test_gguf_XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_type_table();
    test_metadata(3);
    test_metadata(2);
    test_file_messages();
    test_tensors();
    test_large_vocab();
    test_split();
    test_truncations();
    test_malformed();
    test_random();
    test_ollama_tiny();
    test_vocab_phi3();
    rm_tree(g_dir);
    TEST_END();
}
