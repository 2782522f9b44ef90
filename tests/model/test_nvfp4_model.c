/*
 * test_nvfp4_model.c: NVFP4 checkpoints at load (model/weights.c nvfp4_get, tensor/fp4.h, loader/hf_quant.h), made
 * here from the BF16 fixture qwen3_kv_fp8 by quantizing its projections the way compressed-tensors does (per
 * matrix a power-of-two global scale gs ~ 448 * 6 / max|W|, per 16 elements of a row an E4M3 scale e4m3(max|w| / 6
 * * gs), codes the nearest E2M1 of w / (scale / gs); element 2 i in the low nibble of byte i):
 *
 *   - the compressed-tensors file (weight_packed, weight_scale, weight_global_scale; config_groups
 *     nvfp4-pack-quantized) and the ModelOpt file (weight, weight_scale, weight_scale_2 = 1 / gs; quant_algo
 *     NVFP4) give exactly the greedy tokens and logprobs of an F32 checkpoint holding the values decoded here
 *     from this file's own E2M1 table;
 *   - the nibbles of each byte swapped (the wrong packing order) give other logprobs;
 *   - a missing weight_global_scale and a scale tensor of the wrong shape are refused naming them.
 * (transformers' reference on such a file: tools/make_quant_fixtures.py, next to come.)
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loader/safetensors.h"
#include "model/fixtures.h"
#include "tensor/fp8.h"
#include "tensor/tensor.h"
#include "test.h"
#include "vllm.h"

#define SRC VLLM_SOURCE_DIR "/tests/fixtures/models/qwen3_kv_fp8"
static const char *const PROJ[] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
static const float E2M1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

enum { F32_DEQ, CT, MODELOPT };

static bool is_proj(const char *name) {
    if (strncmp(name, "model.layers.", 13) || strlen(name) < 7 || strcmp(name + strlen(name) - 7, ".weight")) return false;
    for (size_t i = 0; i < sizeof PROJ / sizeof *PROJ; i++)
        if (strstr(name, PROJ[i])) return true;
    return false;
}

static uint8_t e2m1_code(float x) { /* nearest, a tie to the smaller magnitude */
    const float a = fabsf(x);
    int best = 0;
    for (int i = 1; i < 8; i++)
        if (fabsf(a - E2M1[i]) < fabsf(a - E2M1[best])) best = i;
    return (uint8_t)(best | (x < 0 ? 8 : 0));
}

/* dir/model.safetensors: the fixture's tensors with every projection as `form`; swap: nibbles swapped; drop: a
 * tensor left out; wide: layer 0 q_proj's weight_scale written with one column less */
static void write_ckpt(const char *dir, int form, bool swap, const char *drop, bool wide) {
    st_set *set = NULL;
    CHECK_OK(st_open_file(SRC "/model.safetensors", &set));
    if (!set) return;
    const size_t n = st_count(set);
    const char **names = calloc(4 * n, sizeof *names);
    tensor *ts = calloc(4 * n, sizeof *ts);
    char (*nbuf)[160] = calloc(4 * n, sizeof *nbuf);
    void **bufs = calloc(4 * n, sizeof *bufs);
    size_t m = 0, nb = 0;
    for (size_t i = 0; i < n; i++) {
        const char *name = st_name(set, i);
        const tensor *t = st_find(set, name);
        if (!is_proj(name)) {
            names[m] = name, ts[m++] = *t;
            continue;
        }
        CHECK(t->dtype == DTYPE_BF16 && t->ndim == 2 && t->shape[1] % 16 == 0);
        const int64_t N = t->shape[0], K = t->shape[1];
        float amax = 0;
        for (int64_t j = 0; j < N * K; j++) amax = fmaxf(amax, fabsf(bf16_to_f32(((const uint16_t *)t->data)[j])));
        const float gs = exp2f(roundf(log2f(448.0f * 6.0f / amax))); /* a power of two: 1 / gs is exact */
        uint8_t *q = calloc((size_t)(N * K / 2), 1), *sc = calloc((size_t)(N * K / 16), 1);
        float *deq = malloc((size_t)(N * K) * sizeof *deq);
        for (int64_t r = 0; r < N; r++)
            for (int64_t g = 0; g < K / 16; g++) {
                float gm = 0;
                for (int e = 0; e < 16; e++) gm = fmaxf(gm, fabsf(bf16_to_f32(((const uint16_t *)t->data)[r * K + g * 16 + e])));
                const uint8_t s8 = fp8_e4m3_from_f32(gm / 6.0f * gs);
                sc[r * (K / 16) + g] = s8;
                const float s = fp8_e4m3_to_f32(s8) / gs;
                for (int e = 0; e < 16; e++) {
                    const int64_t k = g * 16 + e;
                    const float w = bf16_to_f32(((const uint16_t *)t->data)[r * K + k]);
                    const uint8_t c = s > 0 ? e2m1_code(w / s) : 0;
                    deq[r * K + k] = (c & 8 ? -E2M1[c & 7] : E2M1[c & 7]) * s;
                    uint8_t *b = q + r * (K / 2) + k / 2;
                    *b |= (uint8_t)((k & 1) != swap ? c << 4 : c); /* element 2 i low, 2 i + 1 high */
                }
            }
        const size_t base = strlen(name) - 7;
        if (form == F32_DEQ) {
            names[m] = name, ts[m++] = tensor_2d(DTYPE_F32, deq, N, K);
            bufs[nb++] = deq, free(q), free(sc);
            continue;
        }
        free(deq);
        bufs[nb++] = q, bufs[nb++] = sc;
        float *gv = malloc(sizeof *gv);
        *gv = form == CT ? gs : 1.0f / gs;
        bufs[nb++] = gv;
        const char *suffix[3] = {form == CT ? ".weight_packed" : ".weight", ".weight_scale",
                                 form == CT ? ".weight_global_scale" : ".weight_scale_2"};
        tensor parts[3] = {tensor_2d(DTYPE_U8, q, N, K / 2), tensor_2d(DTYPE_F8_E4M3, sc, N, K / 16),
                           form == CT ? tensor_1d(DTYPE_F32, gv, 1) : tensor_make(DTYPE_F32, gv, 0, NULL)};
        if (wide && strstr(name, "layers.0.self_attn.q_proj")) parts[1].shape[1] -= 1;
        for (int p = 0; p < 3; p++) {
            snprintf(nbuf[m], sizeof nbuf[m], "%.*s%s", (int)base, name, suffix[p]);
            if (drop && !strcmp(nbuf[m], drop)) continue;
            names[m] = nbuf[m], ts[m] = parts[p], m++;
        }
    }
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK_OK(st_write_file(path, names, ts, m));
    for (size_t i = 0; i < nb; i++) free(bufs[i]);
    free(bufs), free(nbuf), free(names), free(ts);
    st_close(set);
}

static void write_config(const char *dir, int form) {
    fixture_write_config(SRC "/config.json", dir,
                         form == CT ? "{\"quant_method\": \"compressed-tensors\", \"format\": \"nvfp4-pack-quantized\", "
                                      "\"ignore\": [\"lm_head\"], \"config_groups\": {\"group_0\": {\"targets\": "
                                      "[\"Linear\"], \"input_activations\": null, \"weights\": {\"num_bits\": 4, "
                                      "\"type\": \"float\", \"symmetric\": true, \"dynamic\": false, \"strategy\": "
                                      "\"tensor_group\", \"group_size\": 16}}}}"
                         : form == MODELOPT ? "{\"quant_method\": \"modelopt\", \"quant_algo\": \"NVFP4\", "
                                              "\"group_size\": 16, \"ignore\": [\"lm_head\"]}"
                                            : NULL);
}

/* the greedy continuation of the test prompt (fixtures.h fixture_greedy) */
static vllm_status run(const char *dir, const int32_t *ids, size_t n, float *lp, int32_t *tok) {
    return fixture_greedy(dir, ids, n, 6, lp, tok);
}

int main(void) {
    char dir[] = "/tmp/vllmc_nvfp4_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    json_error_t err;
    json_t *exp = json_load_file(SRC "/expected.json", 0, &err);
    CHECK_MSG(exp != NULL, "%s", err.text);
    if (!exp) TEST_END();
    json_t *pid = json_object_get(json_array_get(json_object_get(exp, "prompts"), 3), "prompt_token_ids");
    const size_t n = json_array_size(pid);
    int32_t *ids = malloc(n * sizeof *ids);
    for (size_t j = 0; j < n; j++) ids[j] = (int32_t)json_integer_value(json_array_get(pid, j));
    char path[600];
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    FILE *f = fopen(path, "w");
    if (f) fputs("{\"bos_token_id\": 1, \"eos_token_id\": 2}", f), fclose(f);

    float want_lp[6], lp[6];
    int32_t want_tok[6], tok[6];
    write_config(dir, F32_DEQ);
    write_ckpt(dir, F32_DEQ, false, NULL, false);
    CHECK_OK(run(dir, ids, n, want_lp, want_tok));
    for (int form = CT; form <= MODELOPT; form++) {
        write_config(dir, form);
        write_ckpt(dir, form, false, NULL, false);
        CHECK_OK(run(dir, ids, n, lp, tok));
        for (int j = 0; j < 6; j++)
            CHECK_MSG(tok[j] == want_tok[j] && lp[j] == want_lp[j], "form %d token %d: %d %.7f, want %d %.7f", form, j,
                      tok[j], (double)lp[j], want_tok[j], (double)want_lp[j]);
    }
    /* the wrong nibble order */
    write_config(dir, CT);
    write_ckpt(dir, CT, true, NULL, false);
    CHECK_OK(run(dir, ids, n, lp, tok));
    double worst = 0;
    for (int j = 0; j < 6; j++) worst = fmax(worst, tok[j] != want_tok[j] ? INFINITY : fabs(lp[j] - want_lp[j]));
    CHECK_MSG(worst > 1e-2, "swapped nibbles: max |d| %g", worst);
    /* refusals */
    write_ckpt(dir, CT, false, "model.layers.1.mlp.up_proj.weight_global_scale", false);
    EXPECT_ERR(run(dir, ids, n, lp, tok), VLLM_ERR_NOT_FOUND, "model.layers.1.mlp.up_proj.weight_global_scale", "");
    write_ckpt(dir, CT, false, NULL, true);
    EXPECT_ERR(run(dir, ids, n, lp, tok), VLLM_ERR_FORMAT, "q_proj.weight_scale", "shape");

    for (const char *p = "config.json\0generation_config.json\0model.safetensors\0"; *p; p += strlen(p) + 1) {
        snprintf(path, sizeof path, "%s/%s", dir, p);
        unlink(path);
    }
    rmdir(dir);
    free(ids);
    json_decref(exp);
    TEST_END();
}
