/*
 * test_generate_cli.c: the `vllmc generate` contract: JSON lines, prompt
 * files in input order, token-id prompts without a tokenizer, and one
 * clear error line with a non-zero exit for every malformed input.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loader/safetensors.h"
#include "cli/cli_test_util.h"


/* Expects failure with exactly one stderr line containing `needle`. */
static void expect_error(const char *args, const char *needle) { expect_error_rc(args, needle, -1); }

static void copy_file(const char *from, const char *to, long truncate_to) {
    char *data;
    FILE *f = fopen(from, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    data = malloc((size_t)n);
    CHECK(fread(data, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    if (truncate_to >= 0 && truncate_to < n) n = truncate_to;
    f = fopen(to, "wb");
    fwrite(data, 1, (size_t)n, f);
    fclose(f);
    free(data);
}

#define FIX VLLM_SOURCE_DIR "/tests/fixtures/models/llama_gqa"

static void test_json_contract(void) {
    char *out, *err;
    int rc = run("generate --model " FIX " --prompt-token-ids 1,5,9 --max-tokens 6 --temperature 0 --json --ignore-eos",
                 &out, &err);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, err);
    CHECK(count_lines(out) == 1);
    json_error_t je;
    json_t *o = json_loads(out, JSON_DISABLE_EOF_CHECK, &je);
    CHECK_MSG(o != NULL, "bad JSON: %s", out);
    if (o) {
        const char *keys[] = {"prompt_token_ids", "token_ids", "logprobs", "finish_reason"};
        const char *k;
        json_t *v;
        int i = 0;
        json_object_foreach(o, k, v) {
            if (i < 4) CHECK_MSG(!strcmp(k, keys[i]), "key %d is %s", i, k);
            i++;
        }
        CHECK(i == 4); /* no "text" without a tokenizer */
        CHECK(json_array_size(json_object_get(o, "prompt_token_ids")) == 3);
        CHECK(json_array_size(json_object_get(o, "token_ids")) == 6);
        CHECK(json_array_size(json_object_get(o, "logprobs")) == 6);
        CHECK(!strcmp(json_string_value(json_object_get(o, "finish_reason")), "length"));
        json_t *lp;
        size_t j;
        json_array_foreach(json_object_get(o, "logprobs"), j, lp) CHECK(json_is_number(lp) && json_number_value(lp) <= 0);
        json_decref(o);
    }
    free(out);
    free(err);
}

static void test_prompts_file(void) {
    char path[300], args[1024], *out, *err, *single_out, *single_err;
    snprintf(path, sizeof path, "%s/prompts.jsonl", g_tmp);
    write_file(path, "{\"prompt_token_ids\": [7, 8, 9, 10, 11]}\n{\"prompt_token_ids\": [3]}\n\n"
                     "{\"prompt_token_ids\": [100, 200]}\n");
    snprintf(args, sizeof args, "generate --model %s --prompts-file %s --max-tokens 4 --temperature 0 --json --ignore-eos",
             FIX, path);
    int rc = run(args, &out, &err);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, err);
    CHECK(count_lines(out) == 3);
    /* results come back in input order and equal single-prompt runs */
    CHECK(strstr(out, "{\"prompt_token_ids\":[7,8,9,10,11]") == out);
    rc = run("generate --model " FIX " --prompt-token-ids 3 --max-tokens 4 --temperature 0 --json --ignore-eos",
             &single_out, &single_err);
    CHECK(rc == 0);
    char *second = strchr(out, '\n');
    CHECK(second && !strncmp(second + 1, single_out, strlen(single_out)));
    free(out);
    free(err);
    free(single_out);
    free(single_err);

    /* a malformed file (src/cli/dataset.c, tested in test_dataset.c): one line naming the file
     * and line, before the model loads */
    snprintf(args, sizeof args, "generate --model /nonexistent/model --prompts-file %s", path);
    write_file(path, "{\"prompt_token_ids\": [1]}\n{\"prompt_token_ids\": [1, -2]}\n");
    expect_error(args, "vllmc: ");
    expect_error(args, "prompts.jsonl:2: prompt_token_ids[1] is not a valid token id");
    expect_error("generate --model " FIX " --prompts-file /nonexistent/p.jsonl", "p.jsonl: cannot open");
}

static void test_seed(void) {
    char *a, *b, *c, *e1, *e2, *e3;
    const char *base = "generate --model " FIX " --prompt-token-ids 4,5 --max-tokens 8 --temperature 1.0 --top-k 50 "
                       "--top-p 0.9 --json --ignore-eos --seed ";
    char args[1024];
    snprintf(args, sizeof args, "%s7", base);
    CHECK(run(args, &a, &e1) == 0);
    CHECK(run(args, &b, &e2) == 0);
    snprintf(args, sizeof args, "%s8", base);
    CHECK(run(args, &c, &e3) == 0);
    CHECK_MSG(!strcmp(a, b), "same seed, different output");
    CHECK_MSG(strcmp(a, c) != 0, "different seeds, same output: %s", a);
    free(a), free(b), free(c), free(e1), free(e2), free(e3);
}

/* --kv-cache-dtype fp8: the FP8 KV cache runs (greedy tokens out; the cache's own checks are test_attention's and
 * test_parity's) */
static void test_kv_cache_dtype(void) {
    char *out, *err;
    int rc = run("generate --model " FIX " --prompt-token-ids 1,5,9 --max-tokens 4 --temperature 0 --ignore-eos "
                 "--json --kv-cache-dtype fp8 --num-kv-blocks 64",
                 &out, &err);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, err);
    CHECK_MSG(strstr(out, "\"token_ids\"") != NULL, "no completion: %s", out);
    free(out), free(err);
}

static void test_errors(void) {
    char dir[300], args[1024], path[400];
    expect_error("generate --model /nonexistent/model --prompt-token-ids 1", "config.json");
    expect_error("generate --model " FIX " --prompt-token-ids 1,x", "--prompt-token-ids");
    expect_error("generate --model " FIX " --prompt-token-ids 1 --max-tokens abc", "--max-tokens");
    expect_error("generate --model " FIX " --prompt-token-ids 1 --temperature -1", "temperature");
    expect_error("generate --model " FIX " --prompt-token-ids 1 --top-p 0", "top_p");
    expect_error("generate --model " FIX " --prompt-token-ids 1,99999", "out of range");
    expect_error("generate --model " FIX " --prompt hello", "tokenizer");
    expect_error("generate --model " FIX " --prompt-token-ids 1 --bogus", "--bogus");
    expect_error("generate --prompt-token-ids 1", "--model");
    expect_error("generate --model " FIX " --prompt-token-ids 1 --kv-cache-dtype fp8_e5m2", "--kv-cache-dtype must be");
    expect_error("generate --model " FIX " --prompt-token-ids 1 --max-model-len 64 --prompt-token-ids "
                 "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,"
                 "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1",
                 "max_model_len");

    /* a broken model folder, one defect at a time */
    snprintf(dir, sizeof dir, "%s/model", g_tmp);
    mkdir(dir, 0755);
    snprintf(args, sizeof args, "generate --model %s --prompt-token-ids 1 --max-tokens 2", dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_file(path, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64,,}");
    expect_error(args, "config.json");
    char *cfg = t_slurp(FIX "/config.json");
    char *p = strstr(cfg, "LlamaForCausalLM");
    memcpy(p, "GPTXForCausalLMX", 16);
    write_file(path, cfg);
    expect_error(args, "not supported");
    memcpy(p, "LlamaForCausalLM", 16);
    write_file(path, cfg);
    expect_error(args, "model.safetensors");        /* no weights */
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    copy_file(FIX "/model.safetensors", path, 100000);
    expect_error(args, "model.safetensors");        /* truncated */
    copy_file(FIX "/model.safetensors", path, 5);
    expect_error(args, "model.safetensors");        /* shorter than its header length */
    write_file(path, "\x10\x00\x00\x00\x00\x00\x00\x00{not json here!}");
    expect_error(args, "model.safetensors");        /* bad header */
    /* a tensor missing */
    float w[4] = {0};
    tensor t = tensor_2d(DTYPE_F32, w, 2, 2);
    const char *names[] = {"model.embed_tokens.weight"};
    CHECK_OK(st_write_file(path, names, &t, 1));
    expect_error(args, "model.embed_tokens.weight");
    /* wrong shape: config says a wider model than the weights */
    copy_file(FIX "/model.safetensors", path, -1);
    char *q = strstr(cfg, "\"intermediate_size\": 128");
    CHECK(q != NULL);
    if (q) {
        memcpy(q, "\"intermediate_size\": 129", 24);
        snprintf(path, sizeof path, "%s/config.json", dir);
        write_file(path, cfg);
        expect_error(args, "shape");
    }
    free(cfg);
}

int main(void) {
    if (!cli_tmp_begin("vllmc_cli")) TEST_SKIP("mkdtemp failed");
    test_json_contract();
    test_prompts_file();
    test_seed();
    test_kv_cache_dtype();
    test_errors();
    cli_tmp_end();
    TEST_END();
}
