/*
 * test_sharded.c: a model split into two shards with a
 * model.safetensors.index.json (written here from a fixture) gives exactly
 * the tokens and logprobs of the single-file model; the dummy load format
 * runs from config.json alone.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loader/safetensors.h"
#include "test.h"
#include "vllm.h"

#define FIX VLLM_SOURCE_DIR "/tests/fixtures/models/qwen2_bias_tied"

static vllm_completion *run(const char *dir, vllm_load_format fmt) {
    vllm_engine_options o = vllm_engine_default_options();
    o.load_format = fmt;
    o.num_threads = 2;
    vllm_engine *e = NULL;
    vllm_completion *c = NULL;
    CHECK_OK(vllm_engine_create(dir, &o, &e));
    if (!e) return NULL;
    int32_t ids[] = {5, 17, 300, 42, 9};
    vllm_prompt p = {.token_ids = ids, .num_token_ids = 5};
    vllm_sampling_params sp = vllm_sampling_default_params();
    sp.temperature = 0;
    sp.max_tokens = 8;
    sp.ignore_eos = true;
    CHECK_OK(vllm_generate(e, &p, 1, &sp, false, &c, NULL));
    vllm_engine_free(e);
    return c;
}

int main(void) {
    char dir[] = "/tmp/vllmc_shard_XXXXXX";
    if (!mkdtemp(dir)) TEST_SKIP("mkdtemp failed");
    st_set *set = NULL;
    CHECK_OK(st_open_dir(FIX, &set));
    if (!set) TEST_END();
    size_t n = st_count(set), half = n / 2;
    const char **names = calloc(n, sizeof *names);
    tensor *ts = calloc(n, sizeof *ts);
    for (size_t i = 0; i < n; i++) {
        names[i] = st_name(set, i);
        ts[i] = *st_find(set, names[i]);
    }
    char path[512];
    snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
    CHECK_OK(st_write_file(path, names, ts, half));
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    CHECK_OK(st_write_file(path, names + half, ts + half, n - half));
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"metadata\": {}, \"weight_map\": {");
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"", i ? ", " : "", names[i], i < half ? 1 : 2);
    fprintf(f, "}}\n");
    fclose(f);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cp %s/config.json %s/generation_config.json %s/", FIX, FIX, dir);
    CHECK(system(cmd) == 0);

    vllm_completion *a = run(FIX, VLLM_LOAD_AUTO), *b = run(dir, VLLM_LOAD_AUTO);
    CHECK(a && b);
    if (a && b) {
        CHECK(a->num_tokens == 8 && b->num_tokens == 8);
        CHECK(!memcmp(a->token_ids, b->token_ids, 8 * sizeof(int32_t)));
        CHECK(!memcmp(a->logprobs, b->logprobs, 8 * sizeof(float)));
    }
    vllm_completions_free(a, 1);
    vllm_completions_free(b, 1);

    /* dummy weights: config.json alone */
    snprintf(cmd, sizeof cmd, "rm -f %s/*.safetensors %s/*.index.json", dir, dir);
    CHECK(system(cmd) == 0);
    vllm_completion *d = run(dir, VLLM_LOAD_DUMMY);
    CHECK(d && d->num_tokens == 8);
    vllm_completions_free(d, 1);

    free(names);
    free(ts);
    st_close(set);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    TEST_END();
}
