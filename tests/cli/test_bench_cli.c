/*
 * test_bench_cli.c: the `vllmc bench latency` and `vllmc bench throughput` (also with -dp 2)
 * contract: vLLM's result lines parse with positive, consistent numbers,
 * the JSON results match, datasets are read as documented, and every bad
 * option gives one clear error line and exit code 2.
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli_test_util.h"


static int count_substr(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

/* The number after `prefix` at the start of a line of s, or -1. */
static double number_after(const char *s, const char *prefix) {
    size_t n = strlen(prefix);
    for (const char *p = s; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (!strncmp(p, prefix, n)) return strtod(p + n, NULL);
    return -1;
}

/* Expects exit 2 with exactly one stderr line containing `needle`, nothing on stdout. */
static void expect_error(const char *args, const char *needle) { expect_error_rc(args, needle, 2); }

#define FIX VLLM_SOURCE_DIR "/tests/fixtures/models/llama_gqa"

static void test_latency(void) {
    char args[1024], json_path[300], *out, *err;
    snprintf(json_path, sizeof json_path, "%s/latency.json", g_tmp);
    snprintf(args, sizeof args,
             "bench latency --model %s --input-len 8 --output-len 4 --batch-size 3 --num-iters-warmup 1 "
             "--num-iters 4 --seed 3 --threads 1 --output-json %s",
             FIX, json_path);
    int rc = run(args, &out, &err);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, err);
    double avg = number_after(out, "Avg latency: ");
    double std = number_after(out, "Std latency: ");
    CHECK_MSG(avg > 0, "no average in: %s", out);
    CHECK(std >= 0);
    CHECK(count_substr(out, " seconds\n") == 8);
    const char *pcts[] = {"10% percentile latency: ", "25% percentile latency: ", "50% percentile latency: ",
                          "75% percentile latency: ", "90% percentile latency: ", "99% percentile latency: "};
    double prev = 0;
    for (int k = 0; k < 6; k++) {
        double v = number_after(out, pcts[k]);
        CHECK_MSG(v > 0 && v >= prev, "%s%g after %g", pcts[k], v, prev);
        prev = v;
    }
    /* one progress line per iteration on stderr */
    CHECK_MSG(count_substr(err, "Warmup iteration ") == 1, "stderr: %s", err);
    CHECK_MSG(count_substr(err, "Bench iteration ") == 4, "stderr: %s", err);

    json_error_t je;
    json_t *o = json_load_file(json_path, 0, &je);
    CHECK_MSG(o != NULL, "bad JSON %s: %s", json_path, je.text);
    if (o) {
        json_t *lat = json_object_get(o, "latencies");
        CHECK(json_array_size(lat) == 4);
        double sum = 0;
        size_t i;
        json_t *v;
        json_array_foreach(lat, i, v) sum += json_number_value(v);
        CHECK_NEAR(json_number_value(json_object_get(o, "avg_latency")), sum / 4, 1e-12);
        CHECK_NEAR(json_number_value(json_object_get(o, "avg_latency")), avg, 1e-6);
        CHECK(json_is_number(json_object_get(o, "std_latency")));
        json_t *pc = json_object_get(o, "percentiles");
        CHECK(json_object_size(pc) == 6);
        CHECK_NEAR(json_number_value(json_object_get(pc, "50")), number_after(out, pcts[2]), 1e-6);
        json_decref(o);
    }
    free(out);
    free(err);

    /* prefix caching on, engine options, dummy weights */
    rc = run("bench latency --model " FIX " --input-len 20 --output-len 3 --batch-size 2 --num-iters-warmup 0 "
             "--num-iters 2 --enable-prefix-caching --block-size 8 --max-num-seqs 2 --max-num-batched-tokens 16 "
             "--max-model-len 64 --load-format dummy",
             &out, &err);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, err);
    CHECK(number_after(out, "Avg latency: ") > 0);
    free(out);
    free(err);
}

/* Parses "Throughput: A requests/s, B total tokens/s, C output tokens/s". */
static bool parse_throughput(const char *out, double *req, double *total, double *output) {
    const char *p = strstr(out, "Throughput: ");
    return p && sscanf(p, "Throughput: %lf requests/s, %lf total tokens/s, %lf output tokens/s", req, total,
                       output) == 3;
}

static void test_throughput(void) {
    char args[1024], path[300], json_path[300], *out, *err;
    double req, total, output;
    snprintf(json_path, sizeof json_path, "%s/throughput.json", g_tmp);
    snprintf(args, sizeof args,
             "bench throughput --model %s --input-len 8 --output-len 4 --num-prompts 6 --max-num-seqs 4 "
             "--output-json %s",
             FIX, json_path);
    int rc = run(args, &out, &err);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, err);
    CHECK_MSG(parse_throughput(out, &req, &total, &output), "no throughput line in: %s", out);
    CHECK(req > 0 && total > 0 && output > 0);
    /* 6 requests of 8 + 4 tokens: total = 12 per request, output = 4 per request
     * (each printed with 2 decimals) */
    CHECK_NEAR(total / req, 12.0, 0.05 * 12);
    CHECK_NEAR(output / req, 4.0, 0.05 * 4);
    CHECK(number_after(out, "Total num prompt tokens:  ") == 48);
    CHECK(number_after(out, "Total num output tokens:  ") == 24);
    CHECK_MSG(strstr(err, "Running 6 prompts") && strstr(err, "Done: 6 requests"), "stderr: %s", err);
    json_error_t je;
    json_t *o = json_load_file(json_path, 0, &je);
    CHECK_MSG(o != NULL, "bad JSON %s: %s", json_path, je.text);
    if (o) {
        CHECK(json_integer_value(json_object_get(o, "num_requests")) == 6);
        CHECK(json_integer_value(json_object_get(o, "total_num_tokens")) == 72);
        double el = json_number_value(json_object_get(o, "elapsed_time"));
        CHECK(el > 0);
        CHECK_NEAR(json_number_value(json_object_get(o, "requests_per_second")), 6 / el, 1e-6 * (6 / el));
        CHECK_NEAR(json_number_value(json_object_get(o, "tokens_per_second")), 72 / el, 1e-6 * (72 / el));
        json_decref(o);
    }
    free(out);
    free(err);

    /* --data-parallel-size 2: two replicas behind the thread-safe front, the same token counts */
    snprintf(args, sizeof args,
             "bench throughput --model %s --input-len 8 --output-len 4 --num-prompts 6 --max-num-seqs 4 -dp 2 "
             "--threads 1", FIX);
    rc = run(args, &out, &err);
    CHECK_MSG(rc == 0, "-dp 2: rc %d: %s", rc, err);
    CHECK(parse_throughput(out, &req, &total, &output) && req > 0 && output > 0);
    CHECK(number_after(out, "Total num prompt tokens:  ") == 48);
    CHECK(number_after(out, "Total num output tokens:  ") == 24);
    CHECK_MSG(strstr(err, "Done: 6 requests"), "stderr: %s", err);
    free(out);
    free(err);
    snprintf(args, sizeof args, "bench latency --model %s -dp 2", FIX);
    rc = run(args, &out, &err);
    CHECK_MSG(rc == 2 && strstr(err, "-dp is an option of bench throughput"), "latency -dp: rc %d: %s", rc, err);
    free(out);
    free(err);

    /* a dataset: per-line output_len, token-id prompts, blank lines skipped */
    snprintf(path, sizeof path, "%s/data.jsonl", g_tmp);
    write_file(path, "{\"prompt_token_ids\": [1, 2, 3], \"output_len\": 5}\n\n"
                     "{\"prompt_token_ids\": [7, 8], \"output_len\": 2}\n"
                     "{\"prompt_token_ids\": [9, 10, 11, 12], \"output_len\": 1}\n");
    snprintf(args, sizeof args, "bench throughput --model %s --dataset %s --no-enable-prefix-caching", FIX, path);
    rc = run(args, &out, &err);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, err);
    CHECK(parse_throughput(out, &req, &total, &output) && req > 0 && total > 0 && output > 0);
    CHECK(number_after(out, "Total num prompt tokens:  ") == 9);
    CHECK(number_after(out, "Total num output tokens:  ") == 8);
    free(out);
    free(err);
    /* --output-len overrides the dataset's, --num-prompts takes the first lines */
    snprintf(args, sizeof args, "bench throughput --model %s --dataset %s --output-len 3 --num-prompts 2", FIX, path);
    rc = run(args, &out, &err);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, err);
    CHECK(number_after(out, "Total num prompt tokens:  ") == 5);
    CHECK(number_after(out, "Total num output tokens:  ") == 6);
    free(out);
    free(err);
    /* text prompts go through the model's tokenizer (BOS + 4 tokens here) */
    write_file(path, "{\"prompt\": \"Once upon a time\", \"output_len\": 5}\n{\"prompt_token_ids\": [1, 2, 3]}\n");
    snprintf(args, sizeof args, "bench throughput --model %s/models/stories260K --dataset-path %s --output-len 4",
             VLLM_SOURCE_DIR, path);
    rc = run(args, &out, &err);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, err);
    CHECK_MSG(number_after(out, "Total num prompt tokens:  ") == 8, "%s", out);
    CHECK(number_after(out, "Total num output tokens:  ") == 8);
    free(out);
    free(err);
    /* vLLM's key "output_tokens" too; lines of spaces are blank; with --output-len the lines'
     * lengths are not read (vLLM's CustomDataset), so a bad one does not matter */
    write_file(path, "{\"prompt_token_ids\": [1, 2], \"output_tokens\": 3}\n  \t \n"
                     "{\"prompt_token_ids\": [5], \"output_len\": 2, \"output_tokens\": 9}\n");
    snprintf(args, sizeof args, "bench throughput --model %s --dataset %s", FIX, path);
    rc = run(args, &out, &err);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, err);
    CHECK(number_after(out, "Total num prompt tokens:  ") == 3);
    CHECK(number_after(out, "Total num output tokens:  ") == 5);
    free(out);
    free(err);
    write_file(path, "{\"prompt_token_ids\": [1, 2], \"output_len\": 0}\n{\"prompt_token_ids\": [5]}\n");
    snprintf(args, sizeof args, "bench throughput --model %s --dataset %s --output-len 2", FIX, path);
    rc = run(args, &out, &err);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, err);
    CHECK(number_after(out, "Total num output tokens:  ") == 4);
    free(out);
    free(err);
}

static void test_errors(void) {
    char args[1024], path[300];
    expect_error("bench", "latency or throughput");
    expect_error("bench nosuch", "unknown benchmark 'nosuch'");
    expect_error("bench latency --input-len 4", "--model is required");
    expect_error("bench latency --model " FIX " --batch-size 0", "--batch-size");
    expect_error("bench latency --model " FIX " --num-iters abc", "--num-iters");
    expect_error("bench latency --model " FIX " --output-len -3", "--output-len");
    expect_error("bench latency --model " FIX " --seed", "--seed needs a value");
    expect_error("bench latency --model " FIX " --num-prompts 4", "--num-prompts");
    expect_error("bench latency --model " FIX " --dataset x.jsonl", "--dataset");
    expect_error("bench latency --model " FIX " --bogus", "--bogus");
    expect_error("bench latency --model " FIX " --load-format tensorflow", "--load-format");
    expect_error("bench throughput --model " FIX " --batch-size 4", "--batch-size");
    expect_error("bench throughput --model " FIX, "--input-len is required");
    expect_error("bench throughput --model " FIX " --input-len 4 --dataset x.jsonl", "--input-len");
    expect_error("bench throughput --model " FIX " --input-len 4 --max-num-seqs 0", "--max-num-seqs");
    expect_error("bench throughput --model " FIX " --dataset /nonexistent/data.jsonl",
                 "vllmc bench throughput: /nonexistent/data.jsonl: cannot open");
    /* the lengths must fit max_model_len (256 for this fixture) */
    expect_error("bench latency --model " FIX " --input-len 200 --output-len 100 --batch-size 1 --num-iters-warmup 0 "
                 "--num-iters 1",
                 "max_model_len");

    /* malformed datasets: one line names the file, the line and the problem */
    snprintf(path, sizeof path, "%s/bad.jsonl", g_tmp);
    snprintf(args, sizeof args, "bench throughput --model %s --dataset %s", FIX, path);
    write_file(path, "{\"prompt_token_ids\": [1, 2], \"output_len\": 2}\n{\"prompt_token_ids\": [1, 2]\n");
    expect_error(args, "bad.jsonl:2: invalid JSON");
    write_file(path, "{\"prompt_token_ids\": [1, 2]}\n");
    expect_error(args, "bad.jsonl:1: no \"output_len\"");
    write_file(path, "{\"prompt_token_ids\": [1, 2], \"output_len\": 0}\n");
    expect_error(args, "output_len must be a positive integer");
    write_file(path, "{\"prompt_token_ids\": [1, 2], \"output_tokens\": \"5\"}\n");
    expect_error(args, "bad.jsonl:1: output_tokens must be a positive integer");
    write_file(path, "{\"prompt_token_ids\": [1, -2], \"output_len\": 3}\n");
    expect_error(args, "prompt_token_ids[1]");
    write_file(path, "{\"text\": \"hi\", \"output_len\": 3}\n");
    expect_error(args, "needs \"prompt\"");
    write_file(path, "\n\n");
    expect_error(args, "no prompts");
    write_file(path, "{\"prompt\": \"hello\", \"output_len\": 3}\n");
    expect_error(args, "no tokenizer");

    /* engine errors: a non-zero exit and the engine's message */
    char *out, *err;
    int rc = run("bench latency --model /nonexistent/model", &out, &err);
    CHECK(rc == 1 && strstr(err, "config.json") && out[0] == 0);
    free(out);
    free(err);
}

int main(void) {
    if (!cli_tmp_begin("vllmc_bench")) TEST_SKIP("mkdtemp failed");
    test_latency();
    test_throughput();
    test_errors();
    cli_tmp_end();
    TEST_END();
}
