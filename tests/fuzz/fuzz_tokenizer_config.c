/*
 * fuzz_tokenizer_config.c: libFuzzer target for a model folder's tokenizer_config.json and chat
 * template: ct_load_dir (src/template/chat_template.c: chat_template string or named list,
 * chat_template.jinja, bos/eos tokens) then rendering what it loaded, and tok_load_dir
 * (src/tokenizer/tokenizer.c: add_bos_token, add_eos_token, bos/eos tokens,
 * clean_up_tokenization_spaces) over the bundled stories260K tokenizer.json.
 * Input: tokenizer_config.json (absent when empty), optionally NUL then chat_template.jinja.
 * Any crash, leak or sanitizer report is a bug.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fuzz_util.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

static const char *MESSAGES =
    "[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"h\\u00e9llo\"},"
    " {\"role\": \"assistant\", \"content\": \"hi\", \"tool_calls\": [{\"type\": \"function\", \"function\":"
    " {\"name\": \"f\", \"arguments\": {\"a\": 1}}}]}, {\"role\": \"tool\", \"content\": \"2\"},"
    " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"more\"}]}]";

static void fail(const char *what) {
    fprintf(fuzz_quiet_stderr(), "fuzz_tokenizer_config: %s: %s\n", what, vllm_last_error());
    abort();
}

static void setup(void) {
    /* the folder holds the bundled tokenizer.json for good */
    FILE *f = fopen(FUZZ_ROOT "/models/stories260K/tokenizer.json", "rb");
    if (!f) fail("cannot open models/stories260K/tokenizer.json (run from the repo root)");
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    if (n == 0 || n == sizeof buf) fail("models/stories260K/tokenizer.json: unexpected size");
    fuzz_write_file("tokenizer.json", buf, n);
}

static void check_template(void) {
    char *src = NULL, *bos = NULL, *eos = NULL;
    if (ct_load_dir(fuzz_dir(), &src, &bos, &eos) != VLLM_OK) {
        if (src || bos || eos) fail("ct_load_dir failed but returned strings");
        return;
    }
    if (!src) fail("ct_load_dir gave no template");
    json_t *ctx = json_object();
    json_object_set_new(ctx, "messages", json_loads(MESSAGES, 0, NULL));
    json_object_set_new(ctx, "add_generation_prompt", json_true());
    json_object_set_new(ctx, "bos_token", bos ? json_string(bos) : json_null());
    json_object_set_new(ctx, "eos_token", eos ? json_string(eos) : json_null());
    char *out = NULL;
    if (ct_render(src, ctx, &out) == VLLM_OK) {
        if (!out) fail("render gave no text");
        free(out);
    }
    json_decref(ctx);
    free(src);
    free(bos);
    free(eos);
}

static void check_tokenizer(void) {
    tokenizer *tok = NULL;
    if (tok_load_dir(fuzz_dir(), &tok) != VLLM_OK) {
        if (tok) fail("tok_load_dir failed but returned a tokenizer");
        return;
    }
    int vocab = tok_vocab_size(tok);
    if (tok_bos_id(tok) < -1 || tok_bos_id(tok) >= vocab || tok_eos_id(tok) < -1 || tok_eos_id(tok) >= vocab)
        fail("bos / eos id out of range");
    static const char *text = "Once upon a time, </s> <s> there was a cat . It's n't";
    for (int special = 0; special < 2; special++) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (tok_encode(tok, text, strlen(text), special, &ids, &n) != VLLM_OK) fail("encode failed");
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= vocab) fail("encode gave an id out of range");
        char *out = NULL;
        size_t len = 0;
        if (tok_decode_len(tok, ids, n, special, &out, &len) != VLLM_OK) fail("decode failed");
        free(out);
        free(ids);
    }
    tok_free(tok);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static bool ready;
    fuzz_quiet_stderr();
    if (!ready) setup(), ready = true;
    fuzz_parts it = fuzz_parts_of(data, size);
    size_t clen = 0, jlen = 0;
    char *config = fuzz_next_part(&it, &clen);
    char *jinja = fuzz_next_part(&it, &jlen);
    fuzz_write_file("tokenizer_config.json", clen ? config : NULL, clen);
    fuzz_write_file("chat_template.jinja", jinja, jlen);
    check_template();
    check_tokenizer();
    free(config);
    free(jinja);
    return 0;
}
