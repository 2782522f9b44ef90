/*
 * test_int4_model.c: AWQ and GPTQ 4-bit checkpoints at load (model/weights.c, tensor/int4.h), against the same
 * model stored as plain float weights.
 *
 * From the qwen3_qknorm fixture, every projection W (N, K) is quantized here per output feature and group of
 * 32 input features (min / max: s = (max - min) / 15 rounded to F16, z = clamp(-round(min / s), 0, 15), q =
 * clamp(round(w / s) + z, 0, 15), as AutoAWQ's pseudo_quantize_tensor) and written twice: packed as the
 * checkpoint format (AWQ GEMM; GPTQ with act-order g_idx and v1 zeros) with its quantization_config, and as
 * the dequantized values (q - z) s in F32. The engine must give both the same tokens and bit-identical
 * logprobs (the loader's F32 copies are those values); AWQ packed in plain nibble order must not; missing or
 * inconsistent tensors are refused naming them.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loader/safetensors.h"
#include "tensor/tensor.h"
#include "model/fixtures.h"
#include "test.h"
#include "vllm.h"

#define SRC VLLM_SOURCE_DIR "/tests/fixtures/models/qwen3_qknorm"
#define G 32

enum { AWQ, AWQ_PLAIN, GPTQ };
static const int ORDER[8] = {0, 2, 4, 6, 1, 3, 5, 7};

static bool is_proj(const char *name) {
    static const char *P[] = {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight",
                              "gate_proj.weight", "up_proj.weight", "down_proj.weight"};
    for (size_t i = 0; i < sizeof P / sizeof *P; i++)
        if (strstr(name, P[i])) return true;
    return false;
}

typedef struct list {
    const char *names[256];
    tensor ts[256];
    void *owned[256];
    size_t n;
} list;

static void add(list *l, const char *name, dtype dt, void *data, int ndim, int64_t d0, int64_t d1) {
    const int64_t shape[2] = {d0, d1};
    l->names[l->n] = strdup(name);
    l->owned[l->n] = data;
    l->ts[l->n++] = tensor_make(dt, data, ndim, shape);
}

static void write_list(list *l, const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK_OK(st_write_file(path, l->names, l->ts, l->n));
    for (size_t i = 0; i < l->n; i++) {
        free((void *)l->names[i]);
        free(l->owned[i]);
    }
    l->n = 0;
}

/* dir/config.json = the fixture's with quantization_config replaced by quant (NULL: dropped) */
static void write_config(const char *dir, const char *quant) { fixture_write_config(SRC "/config.json", dir, quant); }

/* the group of input feature k: k / G, or (act-order) a permutation's rank / G */
static int group_of(int fmt, int64_t k, int64_t K) { return fmt == GPTQ ? (int)(((k * 13 + 5) % K) / G) : (int)(k / G); }

/* W (N, K) floats -> the format's tensors under base (a.qweight ...) into qa, the dequantized W into qf */
static void quantize_into(int fmt, const char *base, const float *w, int64_t N, int64_t K, list *qa, list *qf, int drop) {
    const int64_t GR = K / G;
    int *q = malloc((size_t)(N * K) * sizeof *q), *z = malloc((size_t)(N * GR) * sizeof *z);
    uint16_t *s = malloc((size_t)(N * GR) * sizeof *s);
    float *deq = malloc((size_t)(N * K) * sizeof *deq);
    for (int64_t n = 0; n < N; n++)
        for (int g = 0; g < GR; g++) {
            float mx = -INFINITY, mn = INFINITY;
            for (int64_t k = 0; k < K; k++)
                if (group_of(fmt, k, K) == g) mx = fmaxf(mx, w[n * K + k]), mn = fminf(mn, w[n * K + k]);
            const uint16_t sh = f32_to_f16(fmaxf(mx - mn, 1e-5f) / 15.0f);
            const float sf = f16_to_f32(sh);
            const int zz = (int)fminf(fmaxf(-nearbyintf(mn / sf), 0.0f), 15.0f);
            s[g * N + n] = sh, z[g * N + n] = zz;
            for (int64_t k = 0; k < K; k++)
                if (group_of(fmt, k, K) == g) {
                    const int qq = (int)fminf(fmaxf(nearbyintf(w[n * K + k] / sf) + (float)zz, 0.0f), 15.0f);
                    q[n * K + k] = qq;
                    /* GPTQ v1 reads the zero back as ((z - 1) & 15) + 1 */
                    const int zr = fmt == GPTQ ? ((zz - 1) & 15) + 1 : zz;
                    deq[n * K + k] = (float)(qq - zr) * sf;
                }
        }
    char name[300];
    int32_t *qw, *qz = calloc((size_t)(GR * N / 8), sizeof *qz);
    if (fmt == GPTQ) {
        qw = calloc((size_t)(K / 8 * N), sizeof *qw);
        for (int64_t k = 0; k < K; k++)
            for (int64_t n = 0; n < N; n++) qw[(k / 8) * N + n] |= (int32_t)((uint32_t)q[n * K + k] << (4 * (k % 8)));
        for (int64_t g = 0; g < GR; g++)
            for (int64_t n = 0; n < N; n++)
                qz[g * (N / 8) + n / 8] |= (int32_t)((uint32_t)((z[g * N + n] - 1) & 15) << (4 * (n % 8)));
    } else {
        qw = calloc((size_t)(K * N / 8), sizeof *qw);
        for (int64_t k = 0; k < K; k++)
            for (int64_t c = 0; c < N / 8; c++)
                for (int p = 0; p < 8; p++) {
                    const int64_t n = 8 * c + (fmt == AWQ ? ORDER[p] : p);
                    qw[k * (N / 8) + c] |= (int32_t)((uint32_t)q[n * K + k] << (4 * p));
                    if (k % G == 0) qz[(k / G) * (N / 8) + c] |= (int32_t)((uint32_t)z[(k / G) * N + n] << (4 * p));
                }
    }
    snprintf(name, sizeof name, "%s.qweight", base);
    add(qa, name, DTYPE_I32, qw, 2, fmt == GPTQ ? K / 8 : K, fmt == GPTQ ? N : N / 8);
    snprintf(name, sizeof name, "%s.qzeros", base);
    if (drop == 1) free(qz);
    else add(qa, name, DTYPE_I32, qz, 2, GR, N / 8);
    snprintf(name, sizeof name, "%s.scales", base);
    add(qa, name, DTYPE_F16, s, 2, GR, N);
    if (fmt == GPTQ) {
        int32_t *gi = malloc((size_t)K * sizeof *gi);
        for (int64_t k = 0; k < K; k++) gi[k] = group_of(fmt, k, K) + (drop == 2 && k == 3 ? (int)GR : 0);
        snprintf(name, sizeof name, "%s.g_idx", base);
        add(qa, name, DTYPE_I32, gi, 1, K, 0);
    }
    snprintf(name, sizeof name, "%s.weight", base);
    add(qf, name, DTYPE_F32, deq, 2, N, K);
    free(q), free(z);
}

/* the fixture's tensors, projections quantized: dir_q gets the packed checkpoint, dir_f the float one;
 * drop 1: the first qzeros (in the file's order: layer 0's down_proj) left out; 2: a g_idx entry out of range */
static void build(int fmt, const char *dir_q, const char *dir_f, int drop) {
    st_set *set = NULL;
    CHECK_OK(st_open_file(SRC "/model.safetensors", &set));
    if (!set) return;
    list *qa = calloc(1, sizeof *qa), *qf = calloc(1, sizeof *qf);
    int nproj = 0;
    for (size_t i = 0; i < st_count(set); i++) {
        const char *name = st_name(set, i);
        const tensor *t = st_find(set, name);
        const int64_t n = tensor_numel(t);
        float *f = malloc((size_t)n * sizeof *f);
        for (int64_t j = 0; j < n; j++) {
            uint16_t h;
            memcpy(&h, (const uint8_t *)t->data + 2 * j, 2);
            f[j] = t->dtype == DTYPE_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
        }
        CHECK(t->dtype == DTYPE_BF16);
        if (is_proj(name)) {
            char base[200];
            snprintf(base, sizeof base, "%.*s", (int)(strlen(name) - 7), name);
            quantize_into(fmt, base, f, t->shape[0], t->shape[1], qa, qf, nproj++ == 0 ? drop : 0);
            free(f);
        } else {
            void *c1 = malloc((size_t)n * 4), *c2 = malloc((size_t)n * 4);
            memcpy(c1, f, (size_t)n * 4), memcpy(c2, f, (size_t)n * 4);
            add(qa, name, DTYPE_F32, c1, t->ndim, t->shape[0], t->ndim > 1 ? t->shape[1] : 0);
            add(qf, name, DTYPE_F32, c2, t->ndim, t->shape[0], t->ndim > 1 ? t->shape[1] : 0);
            free(f);
        }
    }
    CHECK(nproj == 21);
    write_list(qa, dir_q);
    write_list(qf, dir_f);
    free(qa), free(qf);
    st_close(set);
    write_config(dir_q, fmt == GPTQ ? "{\"quant_method\": \"gptq\", \"bits\": 4, \"group_size\": 32, \"desc_act\": true, "
                                      "\"sym\": false, \"checkpoint_format\": \"gptq\"}"
                                    : "{\"quant_method\": \"awq\", \"bits\": 4, \"group_size\": 32, \"zero_point\": true, "
                                      "\"version\": \"gemm\"}");
    write_config(dir_f, NULL);
}

static vllm_status run(const char *dir, vllm_completion **c) {
    vllm_engine_options o = vllm_engine_default_options();
    o.max_model_len = 64;
    o.num_threads = 2;
    vllm_engine *e = NULL;
    *c = NULL;
    vllm_status st = vllm_engine_create(dir, &o, &e);
    if (st != VLLM_OK) return st;
    static const int32_t p0[] = {5, 77, 300, 41, 9}, p1[] = {120};
    vllm_prompt ps[2] = {{.token_ids = p0, .num_token_ids = 5}, {.token_ids = p1, .num_token_ids = 1}};
    vllm_sampling_params sp = vllm_sampling_default_params();
    sp.temperature = 0;
    sp.ignore_eos = true;
    sp.max_tokens = 8;
    st = vllm_generate(e, ps, 2, &sp, false, c, NULL);
    vllm_engine_free(e);
    return st;
}

static void cleanup(const char *dir) {
    char path[600];
    for (const char *f = "config.json\0model.safetensors\0"; *f; f += strlen(f) + 1) {
        snprintf(path, sizeof path, "%s/%s", dir, f);
        unlink(path);
    }
}

int main(void) {
    char dq[] = "/tmp/vllmc_i4q_XXXXXX", df[] = "/tmp/vllmc_i4f_XXXXXX";
    CHECK(mkdtemp(dq) != NULL && mkdtemp(df) != NULL);
    for (int fmt = AWQ; fmt <= GPTQ; fmt++) {
        build(fmt, dq, df, 0);
        vllm_completion *a = NULL, *b = NULL;
        CHECK_OK(run(dq, &a));
        CHECK_OK(run(df, &b));
        bool same = a && b;
        for (int i = 0; same && i < 2; i++)
            same = a[i].num_tokens == b[i].num_tokens &&
                   !memcmp(a[i].token_ids, b[i].token_ids, a[i].num_tokens * sizeof *a[i].token_ids) &&
                   !memcmp(a[i].logprobs, b[i].logprobs, a[i].num_tokens * sizeof *a[i].logprobs);
        if (fmt == AWQ_PLAIN) CHECK_MSG(!same, "AWQ packed in plain nibble order gave the float model's outputs");
        else CHECK_MSG(same, "%s checkpoint and its dequantized float weights differ", fmt == AWQ ? "AWQ" : "GPTQ");
        if (a) vllm_completions_free(a, 2);
        if (b) vllm_completions_free(b, 2);
    }
    vllm_completion *c = NULL;
    build(AWQ, dq, df, 1);
    EXPECT_ERR(run(dq, &c), VLLM_ERR_NOT_FOUND, "model.layers.0.mlp.down_proj.qzeros", "");
    build(GPTQ, dq, df, 2);
    EXPECT_ERR(run(dq, &c), VLLM_ERR_FORMAT, "g_idx", "outside");
    build(AWQ, dq, df, 0);
    write_config(dq, "{\"quant_method\": \"awq\", \"bits\": 4, \"group_size\": 48, \"zero_point\": true}");
    EXPECT_ERR(run(dq, &c), VLLM_ERR_UNSUPPORTED, "group size 48", "");
    cleanup(dq), cleanup(df);
    rmdir(dq), rmdir(df);
    TEST_END();
}
