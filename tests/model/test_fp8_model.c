/*
 * test_fp8_model.c: block-scaled FP8 checkpoints at load (model/weights.c's FP8 path, loader/hf_quant.h),
 * on variants of the qwen3_fp8_block fixture (tools/make_quant_fixtures.py) written to a temporary folder:
 *
 *   - the fixture loads as FP8_B128 blocks and its first greedy tokens are the recorded ones;
 *   - a wrong packing order fails: the two block scales of each down_proj (1 x 2 blocks) swapped give other
 *     logprobs than the dequantized-weights recording (the parity test would catch such a loader);
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

#define SRC VLLM_SOURCE_DIR "/tests/fixtures/models/qwen3_fp8_block"

/* dir/config.json = the fixture's with quantization_config replaced by quant (NULL: dropped) */
static void write_config(const char *dir, const char *quant) { fixture_write_config(SRC "/config.json", dir, quant); }

/* dir/model.safetensors = the fixture's tensors, less `drop` (NULL: none), each down_proj's two scales
 * swapped when swap */
static void write_weights(const char *dir, const char *drop, bool swap) {
    st_set *set = NULL;
    CHECK_OK(st_open_file(SRC "/model.safetensors", &set));
    if (!set) return;
    size_t n = st_count(set), m = 0;
    const char **names = calloc(n, sizeof *names);
    tensor *ts = calloc(n, sizeof *ts);
    float *copies[8];
    int nc = 0;
    for (size_t i = 0; i < n; i++) {
        const char *name = st_name(set, i);
        if (drop && !strcmp(name, drop)) continue;
        const tensor *t = st_find(set, name);
        CHECK_MSG(t != NULL, "%s", name);
        if (!t) continue;
        names[m] = name;
        ts[m] = *t;
        if (swap && strstr(name, "down_proj.weight_scale_inv") && nc < 8) {
            CHECK(t->dtype == DTYPE_F32 && t->shape[0] == 1 && t->shape[1] == 2);
            float *s = malloc(2 * sizeof *s);
            memcpy(s, t->data, 2 * sizeof *s);
            const float a = s[0];
            s[0] = s[1], s[1] = a;
            ts[m].data = copies[nc++] = s;
        }
        m++;
    }
    CHECK(!swap || nc == 3);
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK_OK(st_write_file(path, names, ts, m));
    for (int i = 0; i < nc; i++) free(copies[i]);
    free(names), free(ts);
    st_close(set);
}

static void copy_file(const char *name, const char *dir) {
    char a[512], b[512];
    snprintf(a, sizeof a, SRC "/%s", name);
    snprintf(b, sizeof b, "%s/%s", dir, name);
    FILE *in = fopen(a, "rb"), *out = fopen(b, "wb");
    CHECK(in && out);
    char buf[4096];
    size_t k;
    while (in && out && (k = fread(buf, 1, sizeof buf, in)) > 0) CHECK(fwrite(buf, 1, k, out) == k);
    if (in) fclose(in);
    if (out) fclose(out);
}

/* The engine on dir: greedy continuations of the recorded prompts (first prompt 3, the 40-token one);
 * VLLM_OK and the logprobs of its first 4 tokens in lp, or the status. */
static vllm_status run(const char *dir, const int32_t *ids, size_t n, float lp[4], int32_t tok[4]) {
    vllm_engine_options o = vllm_engine_default_options();
    o.max_model_len = 128;
    o.num_threads = 2;
    vllm_engine *e = NULL;
    vllm_status st = vllm_engine_create(dir, &o, &e);
    if (st != VLLM_OK) return st;
    vllm_prompt p = {.token_ids = ids, .num_token_ids = n};
    vllm_sampling_params sp = vllm_sampling_default_params();
    sp.temperature = 0;
    sp.ignore_eos = true;
    sp.max_tokens = 4;
    vllm_completion *c = NULL;
    st = vllm_generate(e, &p, 1, &sp, false, &c, NULL);
    if (st == VLLM_OK)
        for (int j = 0; j < 4; j++) lp[j] = c[0].logprobs[j], tok[j] = c[0].token_ids[j];
    vllm_completions_free(c, 1);
    vllm_engine_free(e);
    return st;
}

int main(void) {
    char dir[] = "/tmp/vllmc_fp8_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    json_error_t err;
    json_t *exp = json_load_file(SRC "/expected.json", 0, &err);
    CHECK_MSG(exp != NULL, "%s", err.text);
    if (!exp) TEST_END();
    json_t *p3 = json_array_get(json_object_get(exp, "prompts"), 3);
    json_t *pid = json_object_get(p3, "prompt_token_ids");
    size_t n = json_array_size(pid);
    int32_t *ids = malloc(n * sizeof *ids);
    for (size_t j = 0; j < n; j++) ids[j] = (int32_t)json_integer_value(json_array_get(pid, j));
    copy_file("generation_config.json", dir);
    float lp[4];
    int32_t tok[4];

    /* as written, dequantized: the recording */
    setenv("VLLM_FP8_DEQUANTIZE", "1", 1);
    copy_file("config.json", dir);
    write_weights(dir, NULL, false);
    CHECK_OK(run(dir, ids, n, lp, tok));
    for (int j = 0; j < 4; j++) {
        CHECK(tok[j] == (int32_t)json_integer_value(json_array_get(json_object_get(p3, "token_ids"), j)));
        CHECK_NEAR(lp[j], json_number_value(json_array_get(json_object_get(p3, "logprobs"), j)), 1e-3);
    }
    /* the down_proj scales in the wrong order: the recording no longer holds */
    write_weights(dir, NULL, true);
    CHECK_OK(run(dir, ids, n, lp, tok));
    double worst = 0;
    for (int j = 0; j < 4; j++) {
        const double d = fabs(lp[j] - json_number_value(json_array_get(json_object_get(p3, "logprobs"), j)));
        if (d > worst) worst = d;
        if (tok[j] != (int32_t)json_integer_value(json_array_get(json_object_get(p3, "token_ids"), j))) worst = INFINITY;
    }
    CHECK_MSG(worst > 1e-2, "swapped scales: max |d| %g", worst);
    unsetenv("VLLM_FP8_DEQUANTIZE");

    /* refusals */
    write_weights(dir, NULL, false);
    write_config(dir, NULL);
    EXPECT_ERR(run(dir, ids, n, lp, tok), VLLM_ERR_UNSUPPORTED, "is F8_E4M3 but config.json has no quantization_config", "");
    write_config(dir, "{\"quant_method\": \"fp8\", \"weight_block_size\": [64, 128]}");
    EXPECT_ERR(run(dir, ids, n, lp, tok), VLLM_ERR_FORMAT, "weight_scale_inv", "shape");
    write_config(dir, "{\"quant_method\": \"compressed-tensors\", \"format\": \"float-quantized\", \"config_groups\": "
                      "{\"group_0\": {\"weights\": {\"num_bits\": 8, \"type\": \"float\"}}}}");
    EXPECT_ERR(run(dir, ids, n, lp, tok), VLLM_ERR_UNSUPPORTED, "compressed-tensors format 'float-quantized'", "");
    write_config(dir, "{\"quant_method\": \"awq\", \"bits\": 4, \"group_size\": 128}");
    EXPECT_ERR(run(dir, ids, n, lp, tok), VLLM_ERR_UNSUPPORTED, "is F8_E4M3 but config.json has no quantization_config", "");
    copy_file("config.json", dir);
    write_weights(dir, "model.layers.1.mlp.up_proj.weight_scale_inv", false);
    EXPECT_ERR(run(dir, ids, n, lp, tok), VLLM_ERR_NOT_FOUND, "model.layers.1.mlp.up_proj.weight_scale_inv", "missing");

    char path[600];
    for (const char *f = "config.json\0generation_config.json\0model.safetensors\0"; *f; f += strlen(f) + 1) {
        snprintf(path, sizeof path, "%s/%s", dir, f);
        unlink(path);
    }
    rmdir(dir);
    free(ids);
    json_decref(exp);
    TEST_END();
}
