/*
 * fuzz_dataset.c: libFuzzer target for the CLI's JSONL readers (src/cli/dataset.c):
 * cli_dataset_read_jsonl (generate --prompts-file, bench --dataset) and the line walker
 * cli_jsonl_foreach (tokenize / detokenize --input). Input: a flags byte (bits 0-1 the
 * output_len mode, bits 2-3 the prompt limit, bit 4 JSON_ALLOW_NUL for the walker), then the
 * file. The prompts read must respect the limits; any crash, leak or sanitizer report is a bug.
 */
#include <stdint.h>

#include "cli/dataset.c" /* the readers live in the vllmc CLI, not in libvllmc */
#include "fuzz_util.h"

static void fail(const char *what) {
    fprintf(fuzz_quiet_stderr(), "fuzz_dataset: %s\n", what);
    abort();
}

typedef struct walk {
    size_t lines;
    size_t stop_after;
} walk;

/* what tokenize --input reads from each line */
static cli_jsonl_step on_line(json_t *o, const char *where, void *arg) {
    walk *w = arg;
    if (!json_is_object(o) || !where || !strchr(where, ':')) fail("bad line object or location");
    json_t *text = json_object_get(o, "text");
    if (json_is_string(text)) {
        size_t n = json_string_length(text);
        volatile char sink = 0;
        for (size_t i = 0; i < n; i++) sink ^= json_string_value(text)[i];
        (void)sink;
    }
    json_t *ids = json_object_get(o, "ids");
    size_t i;
    json_t *v;
    json_array_foreach(ids, i, v) if (!json_is_integer(v)) return CLI_JSONL_FAIL;
    w->lines++;
    return w->lines >= w->stop_after ? CLI_JSONL_STOP : CLI_JSONL_NEXT;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_quiet_stderr();
    if (size < 1) return 0;
    static const int OUT_LEN[4] = {CLI_OUTPUT_LEN_IGNORE, CLI_OUTPUT_LEN_FROM_FILE, 7, CLI_OUTPUT_LEN_FROM_FILE};
    static const size_t MAX_PROMPTS[4] = {SIZE_MAX, 1, 3, 0};
    int out_len = OUT_LEN[data[0] & 3];
    size_t max_prompts = MAX_PROMPTS[(data[0] >> 2) & 3];
    size_t json_flags = data[0] & 16 ? JSON_ALLOW_NUL : 0;
    fuzz_write_file("data.jsonl", data + 1, size - 1);
    char path[512];
    snprintf(path, sizeof path, "%s/data.jsonl", fuzz_dir());

    cli_dataset d = {0};
    bool ok = cli_dataset_read_jsonl("vllmc fuzz", path, max_prompts, out_len, &d);
    if (ok && d.n == 0) fail("success without prompts"); /* (a bad line after good ones fails with d.n > 0) */
    if (d.n > max_prompts) fail("more prompts than asked for");
    for (size_t i = 0; i < d.n; i++) {
        const cli_prompt *p = &d.items[i];
        if (!p->text == !p->ids) fail("a prompt must be text or ids");
        if (p->ids && (p->num_ids == 0 || p->num_ids > INT32_MAX)) fail("bad id count");
        for (size_t k = 0; p->ids && k < p->num_ids; k++)
            if (p->ids[k] < 0) fail("negative token id");
        if (out_len > 0 ? p->output_len != out_len
                        : out_len == CLI_OUTPUT_LEN_FROM_FILE ? p->output_len < 1 : p->output_len != 0)
            fail("bad output_len");
    }
    vllm_prompt *prompts = cli_dataset_prompts(&d);
    if (!prompts) fail("cli_dataset_prompts");
    for (size_t i = 0; i < d.n; i++)
        if (prompts[i].text != d.items[i].text || prompts[i].num_token_ids != d.items[i].num_ids) fail("prompt view");
    free(prompts);
    cli_dataset_free(&d);
    if (d.n || d.items) fail("dataset not emptied");

    walk w = {.stop_after = max_prompts ? max_prompts : SIZE_MAX};
    cli_jsonl_foreach("vllmc fuzz", path, json_flags, on_line, &w);
    return 0;
}
