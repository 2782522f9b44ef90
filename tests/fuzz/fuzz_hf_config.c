/*
 * fuzz_hf_config.c: libFuzzer target for config.json + generation_config.json (src/loader/hf_config.c).
 * Input: config.json, optionally NUL then generation_config.json. Parsed from memory (hf_config_parse)
 * and from a folder (hf_config_load, which also reads the files); both must agree, and an accepted
 * config must be consistent (positive sizes, heads divisible, ids in range). Any crash, leak or
 * sanitizer report is a bug.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "loader/hf_config.h"

static void fail(const char *what) {
    fprintf(fuzz_quiet_stderr(), "fuzz_hf_config: %s: %s\n", what, vllm_last_error());
    abort();
}

static void check_config(const model_config *c) {
    if (c->vocab_size < 1 || c->hidden_size < 1 || c->intermediate_size < 1 || c->num_layers < 1 ||
        c->num_layers > MODEL_MAX_LAYERS || c->num_heads < 1 || c->num_kv_heads < 1 || c->head_dim < 1 ||
        c->num_heads % c->num_kv_heads != 0)
        fail("accepted config with bad sizes");
    if (!memchr(c->architecture, 0, sizeof c->architecture) || !c->architecture[0] ||
        !memchr(c->model_type, 0, sizeof c->model_type))
        fail("architecture / model_type not terminated");
    if (c->num_eos < 0 || c->num_eos > MODEL_MAX_EOS) fail("num_eos out of range");
    for (int i = 0; i < c->num_eos; i++)
        if (c->eos_token_ids[i] < 0) fail("negative eos id");
    if (!(c->rope.theta > 0) || !(c->rope.partial_rotary_factor > 0) || c->rope.partial_rotary_factor > 1)
        fail("bad rope");
    if (c->has_top_p && !(c->gen_top_p > 0 && c->gen_top_p <= 1)) fail("bad top_p");
    if (c->has_temperature && !(c->gen_temperature >= 0)) fail("bad temperature");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_quiet_stderr();
    fuzz_parts it = fuzz_parts_of(data, size);
    size_t clen = 0, glen = 0;
    char *config = fuzz_next_part(&it, &clen);
    char *gen = fuzz_next_part(&it, &glen);
    model_config *a = calloc(2, sizeof *a);
    if (!a) abort();
    vllm_status st = hf_config_parse(config, gen, "config.json", &a[0]);
    if (st == VLLM_OK) check_config(&a[0]);

    /* the same files in a folder (a third part, if any, is not written) */
    fuzz_write_file("config.json", config, clen);
    fuzz_write_file("generation_config.json", gen, glen);
    vllm_status st2 = hf_config_load(fuzz_dir(), &a[1]);
    if ((st == VLLM_OK) != (st2 == VLLM_OK)) fail("hf_config_load and hf_config_parse disagree");
    if (st == VLLM_OK && memcmp(&a[0], &a[1], sizeof a[0]) != 0) fail("hf_config_load and hf_config_parse differ");
    free(a);
    free(config);
    free(gen);
    return 0;
}
