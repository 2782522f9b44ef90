/*
 * test_dataset.c: the helpers the vllmc subcommands share, in process:
 * src/cli/dataset.c (the JSONL line walker and the prompt datasets of
 * generate, bench throughput and bench serve: formats, --num-prompts and
 * --output-len semantics, one error line naming command, file and line for
 * every malformed input), src/cli/bench_util.c (numpy's mean / std /
 * percentile, splitmix64, vocab_size) and src/cli/cli_util.c (number and
 * option parsing).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* the helpers live in the vllmc CLI, not in libvllmc */
#include "cli/bench_util.c"
#include "cli/cli_hub.c"
#include "cli/cli_util.c"
#include "cli/dataset.c"
#include "test.h"

static char g_dir[64];

static const char *write_tmp(const char *name, const char *text) {
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    return path;
}

/* stderr goes to a file between capture_start and capture_end (which returns it, malloc'd). */
static int g_saved_stderr = -1;

static void capture_start(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/stderr", g_dir);
    fflush(stderr);
    g_saved_stderr = dup(2);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        dup2(fd, 2);
        close(fd);
    }
}

static char *capture_end(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/stderr", g_dir);
    fflush(stderr);
    dup2(g_saved_stderr, 2);
    close(g_saved_stderr);
    char *s = t_slurp(path);
    return s ? s : strdup("");
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* Reading `text` as a dataset must fail with exactly one stderr line equal to `want`
 * (FILE stands for the file's path). */
static void expect_bad(const char *text, size_t max, int output_len, const char *want) {
    const char *path = write_tmp("bad.jsonl", text);
    char full[512];
    const char *at = strstr(want, "FILE");
    snprintf(full, sizeof full, "%.*s%s%s\n", at ? (int)(at - want) : (int)strlen(want), want, at ? path : "",
             at ? at + 4 : "");
    cli_dataset d = {0};
    capture_start();
    bool ok = cli_dataset_read_jsonl("vllmc bench x", path, max, output_len, &d);
    char *err = capture_end();
    CHECK_MSG(!ok, "accepted: %s", text);
    CHECK_MSG(!strcmp(err, full), "stderr\n  '%s'\nwant\n  '%s'", err, full);
    CHECK_MSG(count_lines(err) == 1, "one line: %s", err);
    free(err);
    cli_dataset_free(&d);
}

static void test_dataset_formats(void) {
    const char *path = write_tmp("ok.jsonl",
                                 "{\"prompt\": \"Once upon a time\", \"output_len\": 7}\n"
                                 "\n"
                                 "   \t\r\n"
                                 "  {\"prompt_token_ids\": [1, 400, 50], \"output_tokens\": 5}  \r\n"
                                 "{\"prompt\": \"both keys\", \"output_len\": 2, \"output_tokens\": 9}\n"
                                 "{\"prompt\": \"no length\"}\n");
    /* the lines' lengths: output_len, else output_tokens; the 4th line has none */
    cli_dataset d = {0};
    capture_start();
    bool ok = cli_dataset_read_jsonl("vllmc bench x", path, SIZE_MAX, CLI_OUTPUT_LEN_FROM_FILE, &d);
    char *err = capture_end();
    CHECK(!ok && strstr(err, ":6: no \"output_len\" or \"output_tokens\" (or give --output-len)"));
    free(err);
    CHECK(d.n == 3); /* what was read stays in d for the caller to free */
    cli_dataset_free(&d);
    CHECK(d.n == 0 && d.items == NULL);

    /* the first 3 prompts: blank lines do not count, later lines are not read */
    CHECK(cli_dataset_read_jsonl("vllmc bench x", path, 3, CLI_OUTPUT_LEN_FROM_FILE, &d));
    CHECK(d.n == 3);
    if (d.n == 3) {
        CHECK(!strcmp(d.items[0].text, "Once upon a time") && !d.items[0].ids && d.items[0].output_len == 7);
        CHECK(!d.items[1].text && d.items[1].num_ids == 3 && d.items[1].output_len == 5);
        CHECK(d.items[1].ids[0] == 1 && d.items[1].ids[1] == 400 && d.items[1].ids[2] == 50);
        CHECK(!strcmp(d.items[2].text, "both keys") && d.items[2].output_len == 2);
        vllm_prompt *p = cli_dataset_prompts(&d);
        CHECK(p != NULL);
        if (p) {
            CHECK(p[0].text == d.items[0].text && p[0].token_ids == NULL);
            CHECK(p[1].text == NULL && p[1].token_ids == d.items[1].ids && p[1].num_token_ids == 3);
        }
        free(p);
    }
    cli_dataset_free(&d);

    /* --output-len: every prompt's, the lines' own not read (vLLM's CustomDataset) */
    write_tmp("over.jsonl", "{\"prompt_token_ids\": [3], \"output_len\": 0}\n"
                            "{\"prompt\": \"x\", \"output_len\": \"x\"}\n"
                            "{\"prompt\": \"y\"}\n");
    char over[128];
    snprintf(over, sizeof over, "%s/over.jsonl", g_dir);
    CHECK(cli_dataset_read_jsonl("vllmc bench x", over, SIZE_MAX, 11, &d));
    CHECK(d.n == 3 && d.items[0].output_len == 11 && d.items[2].output_len == 11);
    cli_dataset_free(&d);
    /* generate: lengths not read at all */
    CHECK(cli_dataset_read_jsonl("vllmc", over, SIZE_MAX, CLI_OUTPUT_LEN_IGNORE, &d));
    CHECK(d.n == 3 && d.items[0].output_len == 0 && d.items[1].output_len == 0);
    /* appending to a dataset that already holds prompts; --num-prompts counts this file's */
    CHECK(cli_dataset_read_jsonl("vllmc", over, 1, CLI_OUTPUT_LEN_IGNORE, &d));
    CHECK(d.n == 4 && d.items[3].num_ids == 1 && d.items[3].ids[0] == 3);
    cli_dataset_free(&d);
}

static void test_dataset_errors(void) {
    const int FROM_FILE = CLI_OUTPUT_LEN_FROM_FILE;
    expect_bad("{\"prompt_token_ids\": [1, 2], \"output_len\": 2}\n{\"prompt_token_ids\": [1, 2]\n", SIZE_MAX,
               FROM_FILE, "vllmc bench x: FILE:2: invalid JSON: '}' expected near end of file");
    expect_bad("[1, 2]\n", SIZE_MAX, FROM_FILE, "vllmc bench x: FILE:1: invalid JSON: not an object");
    expect_bad("{\"prompt_token_ids\": [1, 2]}\n", SIZE_MAX, FROM_FILE,
               "vllmc bench x: FILE:1: no \"output_len\" or \"output_tokens\" (or give --output-len)");
    expect_bad("{\"prompt\": \"a\", \"output_len\": 0}\n", SIZE_MAX, FROM_FILE,
               "vllmc bench x: FILE:1: output_len must be a positive integer");
    expect_bad("{\"prompt\": \"a\", \"output_tokens\": 2147483648}\n", SIZE_MAX, FROM_FILE,
               "vllmc bench x: FILE:1: output_tokens must be a positive integer");
    expect_bad("{\"prompt\": \"a\", \"output_len\": 2.5}\n", SIZE_MAX, FROM_FILE,
               "vllmc bench x: FILE:1: output_len must be a positive integer");
    expect_bad("\n{\"prompt_token_ids\": [1, -2]}\n", SIZE_MAX, 4,
               "vllmc bench x: FILE:2: prompt_token_ids[1] is not a valid token id");
    expect_bad("{\"prompt_token_ids\": [1, 2147483648]}\n", SIZE_MAX, 4,
               "vllmc bench x: FILE:1: prompt_token_ids[1] is not a valid token id");
    expect_bad("{\"prompt_token_ids\": [1, \"2\"]}\n", SIZE_MAX, 4,
               "vllmc bench x: FILE:1: prompt_token_ids[1] is not a valid token id");
    const char *needs = "vllmc bench x: FILE:1: needs \"prompt\" (string) or \"prompt_token_ids\" (non-empty array)";
    expect_bad("{\"text\": \"hi\"}\n", SIZE_MAX, 4, needs);
    expect_bad("{\"prompt_token_ids\": []}\n", SIZE_MAX, 4, needs);
    expect_bad("{\"prompt\": 5}\n", SIZE_MAX, 4, needs);
    expect_bad("\n \n", SIZE_MAX, 4, "vllmc bench x: FILE: no prompts");
    expect_bad("", SIZE_MAX, 4, "vllmc bench x: FILE: no prompts");
    expect_bad("{\"prompt\": \"a\"}\n", 0, 4, "vllmc bench x: FILE: no prompts");
    /* a NUL in a prompt is not decoded (only the tokenize walker allows it) */
    expect_bad("{\"prompt\": \"a\\u0000b\"}\n", SIZE_MAX, 4,
               "vllmc bench x: FILE:1: invalid JSON: \\u0000 is not allowed without JSON_ALLOW_NUL near "
               "'\"a\\u0000b\"'");
    /* a file that cannot be opened */
    cli_dataset d = {0};
    capture_start();
    bool ok = cli_dataset_read_jsonl("vllmc", "/nonexistent/p.jsonl", SIZE_MAX, 4, &d);
    char *err = capture_end();
    CHECK(!ok && !strcmp(err, "vllmc: /nonexistent/p.jsonl: cannot open: No such file or directory\n"));
    free(err);
    /* a folder opens but cannot be read */
    capture_start();
    ok = cli_dataset_read_jsonl("vllmc", g_dir, SIZE_MAX, 4, &d);
    err = capture_end();
    CHECK_MSG(!ok && strstr(err, "read error") && count_lines(err) == 1, "%s", err);
    free(err);
    cli_dataset_free(&d);
}

/* cli_jsonl_foreach: every object line once, "FILE:LINE", STOP ends early */
typedef struct seen {
    int calls;
    char where[8][160];
    int stop_at;
} seen;

static cli_jsonl_step record(json_t *o, const char *where, void *arg) {
    seen *s = arg;
    (void)o;
    if (s->calls < 8) snprintf(s->where[s->calls], sizeof s->where[0], "%s", where);
    s->calls++;
    return s->calls == s->stop_at ? CLI_JSONL_STOP : CLI_JSONL_NEXT;
}

static void test_foreach(void) {
    const char *path = write_tmp("walk.jsonl", "{}\n\n{\"a\": \"x\\u0000y\"}\n{\"b\": 1}\nnot json\n");
    char p[128], want[160];
    snprintf(p, sizeof p, "%s", path);
    seen s = {.stop_at = 3};
    CHECK(cli_jsonl_foreach("vllmc", p, JSON_ALLOW_NUL, record, &s));
    CHECK(s.calls == 3);
    snprintf(want, sizeof want, "%s:3", p);
    CHECK(!strcmp(s.where[1], want));
    snprintf(want, sizeof want, "%s:4", p);
    CHECK(!strcmp(s.where[2], want));
    /* without the stop, line 5 is not JSON */
    seen all = {.stop_at = -1};
    capture_start();
    bool ok = cli_jsonl_foreach("vllmc", p, JSON_ALLOW_NUL, record, &all);
    char *err = capture_end();
    CHECK(!ok && all.calls == 3 && strstr(err, ":5: invalid JSON: ") && count_lines(err) == 1);
    free(err);
}

static void test_stats(void) {
    double v[] = {4, 1, 3, 2, 10};
    double mean, std;
    cli_sort_mean_std(v, 5, &mean, &std);
    CHECK(v[0] == 1 && v[1] == 2 && v[2] == 3 && v[3] == 4 && v[4] == 10);
    CHECK_NEAR(mean, 4.0, 1e-12);
    CHECK_NEAR(std, sqrt(10.0), 1e-12); /* numpy.std([4,1,3,2,10]) = sqrt(50/5) */
    /* numpy.percentile([1,2,3,4,10], q) */
    CHECK_NEAR(cli_percentile(v, 5, 50), 3.0, 1e-12);
    CHECK_NEAR(cli_percentile(v, 5, 10), 1.4, 1e-12);
    CHECK_NEAR(cli_percentile(v, 5, 90), 7.6, 1e-12);
    CHECK_NEAR(cli_percentile(v, 5, 99), 9.76, 1e-12);
    CHECK(cli_percentile(v, 5, 100) == 10 && cli_percentile(v, 5, 0) == 1);
    CHECK(cli_percentile(v, 1, 75) == 1);
    CHECK(cli_percentile(NULL, 0, 99) == 0); /* vLLM's `or 0` */
    cli_sort_mean_std(NULL, 0, &mean, &std);
    CHECK(mean == 0 && std == 0);

    /* splitmix64: the reference's first outputs from seed 0 */
    uint64_t st = 0;
    CHECK(cli_rng_next(&st) == 0xe220a8397b1dcdafULL);
    CHECK(cli_rng_next(&st) == 0x6e789e6aa1b965f4ULL);

    write_tmp("config.json", "{\"text_config\": {\"vocab_size\": 262144}}");
    CHECK(cli_model_vocab_size(g_dir) == 262144);
    write_tmp("config.json", "{\"vocab_size\": 32000, \"text_config\": {\"vocab_size\": 5}}");
    CHECK(cli_model_vocab_size(g_dir) == 32000);
    write_tmp("config.json", "{\"vocab_size\": 4294967296}");
    CHECK(cli_model_vocab_size(g_dir) == 0);
    CHECK(cli_model_vocab_size("/nonexistent") == 0);
}

static void test_args(void) {
    long long v;
    double d;
    CHECK(cli_parse_int("42", 0, 100, &v) && v == 42);
    CHECK(!cli_parse_int("101", 0, 100, &v) && !cli_parse_int("4x", 0, 100, &v) && !cli_parse_int("", 0, 1, &v));
    CHECK(!cli_parse_int("99999999999999999999", 0, INT64_MAX, &v));
    CHECK(cli_parse_float("0.5", &d) && d == 0.5);
    CHECK(!cli_parse_float("inf", &d) && !cli_parse_float("1e999", &d) && !cli_parse_float("1,5", &d));
    int32_t *ids;
    size_t n;
    CHECK(cli_parse_ids(" 1, 2 ,3", &ids, &n) && n == 3 && ids[2] == 3);
    free(ids);
    CHECK(!cli_parse_ids("1,", &ids, &n) && !cli_parse_ids("", &ids, &n) && !cli_parse_ids("-1", &ids, &n));
    CHECK(!cli_parse_ids("2147483648", &ids, &n));

    vllm_engine_options eo = vllm_engine_default_options();
    CHECK(cli_engine_flag("--enforce-eager", &eo) && eo.enforce_eager);
    CHECK(cli_engine_flag("--no-enable-prefix-caching", &eo) && !eo.enable_prefix_caching);
    CHECK(cli_engine_flag("--enable-prefix-caching", &eo) && eo.enable_prefix_caching);
    CHECK(!cli_engine_flag("--enforce", &eo));
    vllm_load_format lf = VLLM_LOAD_AUTO;
    CHECK(cli_load_format("x", "dummy", &lf) && lf == VLLM_LOAD_DUMMY);
    CHECK(cli_load_format("x", "safetensors", &lf) && lf == VLLM_LOAD_AUTO);
    capture_start();
    bool ok = cli_load_format("vllmc serve", "gguf", &lf);
    char *err = capture_end();
    CHECK(!ok && !strcmp(err, "vllmc serve: --load-format must be auto or dummy, got 'gguf'\n"));
    free(err);

    char *argv[] = {"vllmc", "--model", "m", "--seed", NULL};
    CHECK(cli_has_value(4, argv, 1, "vllmc x"));
    capture_start();
    ok = cli_has_value(4, argv, 3, "vllmc x");
    err = capture_end();
    CHECK(!ok && !strcmp(err, "vllmc x: --seed needs a value\n"));
    free(err);
    CHECK(cli_now() > 0);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/vllmc_dataset_XXXXXX");
    if (!mkdtemp(g_dir)) TEST_SKIP("mkdtemp failed");
    test_dataset_formats();
    test_dataset_errors();
    test_foreach();
    test_stats();
    test_args();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    CHECK(system(cmd) == 0);
    TEST_END();
}
