/*
 * test_fp8_model.c: block-scaled FP8 checkpoints at load (model/weights.c's FP8 path, loader/hf_quant.h),
 * on variants of the qwen3_fp8_block / _channel / _tensor fixtures (tools/make_quant_fixtures.py) written to a
 * temporary folder:
 *
 *   - each fixture loads and its first greedy tokens are the recorded ones;
 *   - a wrong packing order fails: each down_proj's scales in the wrong order (block: its two 128-blocks' scales
 *     swapped; channel: its 128 row scales reversed; tensor: the layer's up_proj's scale) give other logprobs than the dequantized-weights recording
 *     (the parity test would catch such a loader);
 *   - the per-tensor fixture under ModelOpt's FP8 configs (config.json's and hf_quant_config.json's);
 *   - per-tensor scales of the wrong shape, a missing weight_scale;
 *   - refused, naming the cause: F8_E4M3 weights under a config without quantization_config, a missing
 *     weight_scale_inv, scales of the wrong shape (weight_block_size [64, 128] against the file's [128, 128]),
 *     an unsupported scheme in config.json, and FP8 tensors under an AWQ config.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loader/safetensors.h"
#include "model/fixtures.h"
#include "tensor/tensor.h"
#include "test.h"
#include "vllm.h"

#define FIXTURES VLLM_SOURCE_DIR "/tests/fixtures/models"
#define SRC FIXTURES "/qwen3_fp8_block"

/* dir/config.json = the fixture's with quantization_config replaced by quant (NULL: dropped) */
static void write_config(const char *dir, const char *quant) { fixture_write_config(SRC "/config.json", dir, quant); }

enum { AS_IS, SWAP_SCALES, WIDE_SCALE };

/* dir/model.safetensors = fixture src's tensors, less `drop` (NULL: none); SWAP_SCALES: each down_proj's scales
 * in the wrong order (block: its two 128-blocks' swapped; channel: its rows' reversed); WIDE_SCALE: layer 0's
 * q_proj per-tensor weight_scale () written as (2) */
static void write_weights(const char *src, const char *dir, const char *drop, int mode) {
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    st_set *set = NULL;
    CHECK_OK(st_open_file(path, &set));
    if (!set) return;
    size_t n = st_count(set), m = 0;
    const char **names = calloc(n, sizeof *names);
    tensor *ts = calloc(n, sizeof *ts);
    void *copies[8];
    int nc = 0;
    for (size_t i = 0; i < n; i++) {
        const char *name = st_name(set, i);
        if (drop && !strcmp(name, drop)) continue;
        const tensor *t = st_find(set, name);
        CHECK_MSG(t != NULL, "%s", name);
        if (!t) continue;
        names[m] = name;
        ts[m] = *t;
        if (mode == SWAP_SCALES && strstr(name, "down_proj.weight_scale") && nc < 8) {
            const size_t es = dtype_size(t->dtype);
            if (t->ndim == 0) { /* one scale per matrix: the layer's up_proj's instead */
                char other[256];
                snprintf(other, sizeof other, "%.*sup_proj%s", (int)(strstr(name, "down_proj") - name), name,
                         strstr(name, "down_proj") + 9);
                const tensor *u = st_find(set, other);
                CHECK_MSG(u && u->ndim == 0 && u->dtype == t->dtype, "%s", other);
                if (!u) continue;
                ts[m].data = copies[nc++] = malloc(es);
                memcpy(copies[nc - 1], u->data, es);
            } else {
                const int64_t rows = t->shape[0] * (t->ndim == 2 ? t->shape[1] : 1);
                CHECK(rows >= 2 && (t->ndim == 1 || t->shape[0] == 1 || t->shape[1] == 1));
                uint8_t *c = malloc((size_t)rows * es);
                for (int64_t r = 0; r < rows; r++)
                    memcpy(c + r * es, (const uint8_t *)t->data + (rows - 1 - r) * es, es);
                ts[m].data = copies[nc++] = c;
            }
        }
        if (mode == WIDE_SCALE && !strcmp(name, "model.layers.0.self_attn.q_proj.weight_scale") && nc < 8) {
            CHECK(t->ndim == 0 && t->dtype == DTYPE_F32);
            float *c = malloc(2 * sizeof *c);
            memcpy(c, t->data, 4), memcpy(c + 1, t->data, 4);
            ts[m].data = copies[nc++] = c;
            ts[m].ndim = 1, ts[m].shape[0] = 2, ts[m].row_stride = 0;
        }
        m++;
    }
    CHECK(mode != SWAP_SCALES || nc == 3);
    CHECK(mode != WIDE_SCALE || nc == 1);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK_OK(st_write_file(path, names, ts, m));
    for (int i = 0; i < nc; i++) free(copies[i]);
    free(names), free(ts);
    st_close(set);
}

static void copy_file(const char *src, const char *name, const char *dir) {
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/%s", src, name);
    snprintf(b, sizeof b, "%s/%s", dir, name);
    FILE *in = fopen(a, "rb"), *out = fopen(b, "wb");
    CHECK(in && out);
    char buf[4096];
    size_t k;
    while (in && out && (k = fread(buf, 1, sizeof buf, in)) > 0) CHECK(fwrite(buf, 1, k, out) == k);
    if (in) fclose(in);
    if (out) fclose(out);
}

/* the greedy continuation of the test prompt (fixtures.h fixture_greedy) */
static vllm_status run(const char *dir, const int32_t *ids, size_t n, float *lp, int32_t *tok) {
    return fixture_greedy(dir, ids, n, 4, lp, tok);
}

/* The first 4 tokens and logprobs of the run match recording p3's (what names the run in messages) */
static void check_recording(json_t *p3, const float *lp, const int32_t *tok, const char *what) {
    for (int j = 0; j < 4; j++) {
        CHECK_MSG(tok[j] == (int32_t)json_integer_value(json_array_get(json_object_get(p3, "token_ids"), j)), "%s", what);
        CHECK_NEAR(lp[j], json_number_value(json_array_get(json_object_get(p3, "logprobs"), j)), 1e-3);
    }
}

/* Fixture src (its prompt 3) copied to dir and run dequantized: the recording holds; its down_proj scales in the
 * wrong order (or, one per matrix, another matrix's): it does not. The prompt's ids in *ids (n of them). */
static void packing_checks(const char *src, const char *dir, int32_t **ids, size_t *n) {
    char path[512];
    snprintf(path, sizeof path, "%s/expected.json", src);
    json_error_t err;
    json_t *exp = json_load_file(path, 0, &err);
    CHECK_MSG(exp != NULL, "%s", err.text);
    if (!exp) return;
    json_t *p3 = json_array_get(json_object_get(exp, "prompts"), 3);
    json_t *pid = json_object_get(p3, "prompt_token_ids");
    *n = json_array_size(pid);
    free(*ids);
    *ids = malloc(*n * sizeof **ids);
    for (size_t j = 0; j < *n; j++) (*ids)[j] = (int32_t)json_integer_value(json_array_get(pid, j));
    copy_file(src, "generation_config.json", dir);
    copy_file(src, "config.json", dir);
    float lp[4];
    int32_t tok[4];
    setenv("VLLM_FP8_DEQUANTIZE", "1", 1);
    write_weights(src, dir, NULL, AS_IS);
    CHECK_OK(run(dir, *ids, *n, lp, tok));
    check_recording(p3, lp, tok, src);
    write_weights(src, dir, NULL, SWAP_SCALES);
    CHECK_OK(run(dir, *ids, *n, lp, tok));
    double worst = 0;
    for (int j = 0; j < 4; j++) {
        const double d = fabs(lp[j] - json_number_value(json_array_get(json_object_get(p3, "logprobs"), j)));
        if (d > worst) worst = d;
        if (tok[j] != (int32_t)json_integer_value(json_array_get(json_object_get(p3, "token_ids"), j))) worst = INFINITY;
    }
    CHECK_MSG(worst > 1e-2, "%s: swapped scales: max |d| %g", src, worst);
    unsetenv("VLLM_FP8_DEQUANTIZE");
    json_decref(exp);
}

/* The per-tensor fixture under NVIDIA ModelOpt's configs (its tensors are ModelOpt FP8's: weight, weight_scale (),
 * input_scale ()): config.json's {"quant_method": "modelopt", "quant_algo": "FP8"} and, with config.json
 * unquantized, hf_quant_config.json's {"producer", "quantization": {"quant_algo": "FP8"}}: the recording holds */
static void modelopt_checks(const char *dir, const int32_t *ids, size_t n) {
    const char *src = FIXTURES "/qwen3_fp8_tensor";
    char path[512];
    snprintf(path, sizeof path, "%s/expected.json", src);
    json_error_t err;
    json_t *exp = json_load_file(path, 0, &err);
    CHECK_MSG(exp != NULL, "%s", err.text);
    if (!exp) return;
    json_t *p3 = json_array_get(json_object_get(exp, "prompts"), 3);
    float lp[4];
    int32_t tok[4];
    setenv("VLLM_FP8_DEQUANTIZE", "1", 1);
    write_weights(src, dir, NULL, AS_IS);
    snprintf(path, sizeof path, "%s/config.json", src);
    for (int form = 0; form < 2; form++) {
        char hq[512];
        snprintf(hq, sizeof hq, "%s/hf_quant_config.json", dir);
        if (form == 0) {
            fixture_write_config(path, dir, "{\"quant_method\": \"modelopt\", \"quant_algo\": \"FP8\", "
                                            "\"ignore\": [\"lm_head\"]}");
        } else {
            fixture_write_config(path, dir, NULL);
            FILE *f = fopen(hq, "w");
            CHECK(f != NULL);
            if (f) {
                fputs("{\"producer\": {\"name\": \"modelopt\", \"version\": \"0.31.0\"}, \"quantization\": "
                      "{\"quant_algo\": \"FP8\", \"kv_cache_quant_algo\": null, \"exclude_modules\": [\"lm_head\"]}}",
                      f);
                fclose(f);
            }
        }
        CHECK_OK(run(dir, ids, n, lp, tok));
        check_recording(p3, lp, tok, form ? "modelopt, hf_quant_config.json" : "modelopt, config.json");
        if (form == 1) { /* an algorithm not read: refused naming it */
            FILE *f = fopen(hq, "w");
            if (f) {
                fputs("{\"producer\": {\"name\": \"modelopt\"}, \"quantization\": {\"quant_algo\": \"INT4_AWQ\"}}", f);
                fclose(f);
            }
            EXPECT_ERR(run(dir, ids, n, lp, tok), VLLM_ERR_UNSUPPORTED, "hf_quant_config.json", "quant_algo 'INT4_AWQ'");
            unlink(hq);
        }
    }
    unsetenv("VLLM_FP8_DEQUANTIZE");
    json_decref(exp);
}

int main(void) {
    char dir[] = "/tmp/vllmc_fp8_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    int32_t *ids = NULL;
    size_t n = 0;
    float lp[4];
    int32_t tok[4];

    /* per-tensor (AutoFP8) and per-channel (compressed-tensors) scales, then the block fixture the rest uses */
    packing_checks(FIXTURES "/qwen3_fp8_tensor", dir, &ids, &n);
    write_weights(FIXTURES "/qwen3_fp8_tensor", dir, NULL, WIDE_SCALE);
    EXPECT_ERR(run(dir, ids, n, lp, tok), VLLM_ERR_FORMAT, "q_proj.weight_scale' has shape [2], expected [1]", "");
    write_weights(FIXTURES "/qwen3_fp8_tensor", dir, "model.layers.2.mlp.up_proj.weight_scale", AS_IS);
    EXPECT_ERR(run(dir, ids, n, lp, tok), VLLM_ERR_NOT_FOUND, "model.layers.2.mlp.up_proj.weight_scale'", "not found");
    modelopt_checks(dir, ids, n);
    packing_checks(FIXTURES "/qwen3_fp8_channel", dir, &ids, &n);
    packing_checks(SRC, dir, &ids, &n);

    /* refusals */
    write_weights(SRC, dir, NULL, AS_IS);
    write_config(dir, NULL);
    EXPECT_ERR(run(dir, ids, n, lp, tok), VLLM_ERR_UNSUPPORTED, "is F8_E4M3 but config.json's quantization_config is "
               "not an fp8 scheme (none)", "");
    write_config(dir, "{\"quant_method\": \"fp8\", \"weight_block_size\": [64, 128]}");
    EXPECT_ERR(run(dir, ids, n, lp, tok), VLLM_ERR_FORMAT, "weight_scale_inv", "shape");
    write_config(dir, "{\"quant_method\": \"compressed-tensors\", \"format\": \"float-quantized\", \"config_groups\": "
                      "{\"group_0\": {\"weights\": {\"num_bits\": 8, \"type\": \"float\"}}}}");
    EXPECT_ERR(run(dir, ids, n, lp, tok), VLLM_ERR_UNSUPPORTED, "FP8 weight strategy '?'", "");
    /* a per-tensor config over the file's per-block weight_scale_inv: no weight_scale */
    write_config(dir, "{\"quant_method\": \"fp8\"}");
    EXPECT_ERR(run(dir, ids, n, lp, tok), VLLM_ERR_NOT_FOUND, "q_proj.weight_scale'", "not found");
    write_config(dir, "{\"quant_method\": \"awq\", \"bits\": 4, \"group_size\": 128}");
    EXPECT_ERR(run(dir, ids, n, lp, tok), VLLM_ERR_UNSUPPORTED, "is F8_E4M3 but config.json's quantization_config is "
               "not an fp8 scheme (awq)", "");
    copy_file(SRC, "config.json", dir);
    write_weights(SRC, dir, "model.layers.1.mlp.up_proj.weight_scale_inv", AS_IS);
    EXPECT_ERR(run(dir, ids, n, lp, tok), VLLM_ERR_NOT_FOUND, "model.layers.1.mlp.up_proj.weight_scale_inv", "missing");

    char path[600];
    for (const char *f = "config.json\0generation_config.json\0model.safetensors\0"; *f; f += strlen(f) + 1) {
        snprintf(path, sizeof path, "%s/%s", dir, f);
        unlink(path);
    }
    rmdir(dir);
    free(ids);
    TEST_END();
}
